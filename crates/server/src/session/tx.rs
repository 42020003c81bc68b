//! A Redis connection's transaction as it is built: MULTI's queue of requests and WATCH's keys,
//! between MULTI (or the first WATCH) and EXEC, DISCARD or UNWATCH (worker/tx.rs runs them;
//! exec/resp/tx.rs runs EXEC). The queued bytes are charged to the client memory budget, so a
//! client that queues without end is bounded as one that sends an endless value is.

use crate::session::budget::ClientMemory;
use std::sync::Arc;

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
    /// The watched keys, each with the CAS of the version it had when watched (`None`: absent).
    pub watched: Vec<(Vec<u8>, Option<u64>)>,
    /// What is charged to the budget for this transaction.
    charged: usize,
    budget: Arc<ClientMemory>,
}

/// A queued request's bytes and bookkeeping, as charged.
const QUEUED_OVERHEAD_BYTES: usize = std::mem::size_of::<usize>();
/// A watched key's bookkeeping beyond its bytes, as charged.
const WATCHED_OVERHEAD_BYTES: usize = std::mem::size_of::<(Vec<u8>, Option<u64>)>();

impl Tx {
    /// No transaction yet: nothing queued or watched.
    pub fn new(budget: Arc<ClientMemory>) -> Tx {
        Tx {
            multi: false,
            aborted: false,
            queued: Vec::new(),
            ends: Vec::new(),
            watched: Vec::new(),
            charged: 0,
            budget,
        }
    }

    /// A transaction of the one request `request` (a write of several workers' keys run as a
    /// step of its own), charged nothing beyond the request's own bytes, already charged.
    pub fn alone(request: &[u8], budget: Arc<ClientMemory>) -> Tx {
        let mut tx = Tx::new(budget);
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

    /// Watches `key`, whose version now has CAS `cas` (`None`: absent); false when the budget
    /// has no room for it. A key watched again keeps its first version, as redis-server's.
    pub fn watch(&mut self, key: &[u8], cas: Option<u64>) -> bool {
        if self.watched.iter().any(|(watched, _)| watched == key) {
            return true;
        }
        let bytes = key.len() + WATCHED_OVERHEAD_BYTES;
        if !self.budget.try_take(bytes) {
            return false;
        }
        self.charged += bytes;
        self.watched.push((key.to_vec(), cas));
        true
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_requests_come_back_in_order_and_their_charge_goes_with_the_transaction() {
        let budget = Arc::new(ClientMemory::new(1 << 20));
        let mut tx = Tx::new(budget.clone());
        assert!(tx.queue(b"*1\r\n$4\r\nPING\r\n") && tx.queue(b"*2\r\n$4\r\nINCR\r\n$1\r\na\r\n"));
        assert!(tx.watch(b"a", Some(5)) && tx.watch(b"a", Some(6)), "watched twice: the first version");
        let requests: Vec<&[u8]> = tx.requests().collect();
        assert_eq!(requests, [&b"*1\r\n$4\r\nPING\r\n"[..], b"*2\r\n$4\r\nINCR\r\n$1\r\na\r\n"]);
        assert_eq!(tx.watched, vec![(b"a".to_vec(), Some(5))]);
        assert!(budget.used() > 0);
        drop(tx);
        assert_eq!(budget.used(), 0, "the charge is given back");
    }

    #[test]
    fn a_queue_past_the_budget_is_refused() {
        let budget = Arc::new(ClientMemory::new(64));
        let mut tx = Tx::new(budget.clone());
        assert!(tx.queue(&[b'x'; 40]));
        assert!(!tx.queue(&[b'x'; 40]), "no room");
        assert_eq!(tx.len(), 1);
        assert_eq!(budget.used(), 40 + QUEUED_OVERHEAD_BYTES);
    }
}
