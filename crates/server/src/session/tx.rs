//! A Redis connection's transaction as it is built: MULTI's queue of requests and WATCH's keys,
//! between MULTI (or the first WATCH) and EXEC, DISCARD or UNWATCH (worker/tx.rs runs them;
//! exec/resp/tx.rs runs EXEC). The queued bytes are charged to the client memory budget, so a
//! client that queues without end is bounded as one that sends an endless value is.

use crate::session::budget::ClientMemory;
use crate::session::watches::Watches;
use std::sync::Arc;

/// A watched key: its version when watched, and its writes then (shared/watches.rs).
pub struct Watched {
    pub key: Vec<u8>,
    /// The CAS of the version it had (`None`: absent).
    pub version: Option<u64>,
    pub writes: u64,
}

/// What a connection holds of a transaction.
pub struct Tx {
    /// Inside MULTI: requests are queued.
    pub multi: bool,
    /// A request was refused while queued: EXEC answers EXECABORT.
    pub aborted: bool,
    /// The queued requests' bytes, one after another, as they arrived.
    queued: Vec<u8>,
    /// Where each queued request ends in `queued`.
    ends: Vec<usize>,
    /// The watched keys.
    pub watched: Vec<Watched>,
    /// The database a SELECT queued inside MULTI moves to (the requests after it are mapped
    /// into it as they are queued).
    pub db: Option<u8>,
    /// What is charged to the budget for this transaction.
    charged: usize,
    budget: Arc<ClientMemory>,
    watches: Arc<Watches>,
}

/// The queue's first allocation: a transaction of a few small commands grows it no further.
const QUEUED_BYTES_FIRST: usize = 1024;
/// A queued request's bytes and bookkeeping, as charged.
const QUEUED_OVERHEAD_BYTES: usize = std::mem::size_of::<usize>();
/// A watched key's bookkeeping beyond its bytes, as charged.
const WATCHED_OVERHEAD_BYTES: usize = std::mem::size_of::<Watched>();

impl Tx {
    /// No transaction yet: nothing queued or watched.
    pub fn new(budget: Arc<ClientMemory>, watches: Arc<Watches>) -> Tx {
        Tx {
            multi: false,
            aborted: false,
            queued: Vec::with_capacity(QUEUED_BYTES_FIRST),
            ends: Vec::with_capacity(16),
            watched: Vec::new(),
            db: None,
            charged: 0,
            budget,
            watches,
        }
    }

    /// A transaction of the one request `request` (a write of several workers' keys run as a
    /// step of its own), charged nothing beyond the request's own bytes, already charged.
    pub fn alone(request: &[u8], budget: Arc<ClientMemory>, watches: Arc<Watches>) -> Tx {
        let mut tx = Tx::new(budget, watches);
        tx.queued.extend_from_slice(request);
        tx.ends.push(request.len());
        tx
    }

    /// Queues `request` (its bytes as received); false, with nothing queued, when the client
    /// memory budget has no room for it.
    pub fn queue(&mut self, request: &[u8]) -> bool {
        let bytes = request.len() + QUEUED_OVERHEAD_BYTES;
        if !self.budget.try_take(bytes) {
            return false;
        }
        self.charged += bytes;
        self.queued.extend_from_slice(request);
        self.ends.push(self.queued.len());
        true
    }

    /// Watches `key`, whose version now is `version` (`None`: absent), once its writes start
    /// to count: false when the budget has no room for it. A key watched again keeps its first
    /// watch, as redis-server's.
    pub fn watch(&mut self, key: &[u8], version: impl FnOnce() -> Option<u64>) -> bool {
        if self.watched.iter().any(|watched| watched.key == key) {
            return true;
        }
        let bytes = key.len() + WATCHED_OVERHEAD_BYTES;
        if !self.budget.try_take(bytes) {
            return false;
        }
        self.charged += bytes;
        let writes = self.watches.watch(key);
        self.watched.push(Watched { key: key.to_vec(), version: version(), writes });
        true
    }

    /// Whether a watched key was written since it was watched, by `version_of` (its version
    /// now) and the writes counted.
    pub fn watched_changed(&self, mut version_of: impl FnMut(&[u8]) -> Option<u64>) -> bool {
        self.watched.iter().any(|watched| {
            self.watches.writes(&watched.key) != watched.writes || version_of(&watched.key) != watched.version
        })
    }

    /// The queued requests, in order.
    pub fn requests(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(self.ends.iter().copied()).map(|(start, end)| &self.queued[start..end])
    }

    /// How many requests are queued.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        self.budget.give(self.charged);
        for watched in &self.watched {
            self.watches.unwatch(&watched.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_requests_come_back_in_order_and_their_charge_goes_with_the_transaction() {
        let budget = Arc::new(ClientMemory::new(1 << 20));
        let watches = Arc::new(Watches::default());
        let mut tx = Tx::new(budget.clone(), watches.clone());
        assert!(tx.queue(b"*1\r\n$4\r\nPING\r\n") && tx.queue(b"*2\r\n$4\r\nINCR\r\n$1\r\na\r\n"));
        assert!(tx.watch(b"a", || Some(5)) && tx.watch(b"a", || Some(6)), "watched twice: the first version");
        let requests: Vec<&[u8]> = tx.requests().collect();
        assert_eq!(requests, [&b"*1\r\n$4\r\nPING\r\n"[..], b"*2\r\n$4\r\nINCR\r\n$1\r\na\r\n"]);
        assert_eq!((tx.watched.len(), tx.watched[0].version), (1, Some(5)));
        assert!(!tx.watched_changed(|_| Some(5)), "same version, no write");
        assert!(tx.watched_changed(|_| Some(6)), "another version");
        watches.touch(b"a");
        assert!(tx.watched_changed(|_| Some(5)), "written back to the same version");
        assert!(budget.used() > 0);
        drop(tx);
        assert_eq!(budget.used(), 0, "the charge is given back");
        assert_eq!(watches.writes(b"a"), u64::MAX, "no longer watched");
    }

    #[test]
    fn a_queue_past_the_budget_is_refused() {
        let budget = Arc::new(ClientMemory::new(64));
        let mut tx = Tx::new(budget.clone(), Arc::default());
        assert!(tx.queue(&[b'x'; 40]));
        assert!(!tx.queue(&[b'x'; 40]), "no room");
        assert_eq!(tx.len(), 1);
        assert_eq!(budget.used(), 40 + QUEUED_OVERHEAD_BYTES);
    }
}
