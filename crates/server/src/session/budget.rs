//! The client memory budget: what clients can make the server hold beyond each connection's
//! first buffers, charged server-wide. memcached reads a value straight into item memory, so
//! `-m` bounds what its clients hold; quicksilver buffers a value in the connection's input
//! and copies replies into its output, so both are charged here instead, against a budget
//! tied to `-m` ([`ClientMemory::limit_for`]):
//!
//! - a connection's input may grow past its lent read buffer only with bytes from the budget:
//!   a store whose value does not fit now is answered memcached's `SERVER_ERROR out of memory
//!   storing object` and its bytes are swallowed as they arrive, never kept;
//! - a connection's output past its first [`OUTPUT_FREE_BYTES`] is charged: while the budget
//!   is spent, a connection whose socket refuses its replies runs no more requests, a get of
//!   several keys runs one key at a time, and once a second the connections that have taken
//!   nothing of their replies since the last look are closed, the largest first, until the
//!   budget has room (`response_obj_oom`).

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// Values at least this long are sent from one shared copy (a [`SharedValue`]) by every reply
/// that carries them, as memcached's replies point at the one item: a thousand clients asking
/// for one large value and not reading hold one copy of it, not a thousand.
pub const SHARED_VALUE_BYTES_MIN: usize = 16 << 10;

/// Output a connection holds without charge: one pooled reply buffer's worth. Together with
/// the lent read buffer, what a connection holds uncharged is bounded by the pools.
pub const OUTPUT_FREE_BYTES: usize = 16 << 10;

/// The smallest budget, whatever `-m` (memcached runs with `-m 2`).
const LIMIT_MIN_BYTES: usize = 4 << 20;

/// The server-wide budget of client memory.
#[derive(Debug)]
pub struct ClientMemory {
    limit: usize,
    used: AtomicUsize,
}

impl Default for ClientMemory {
    fn default() -> ClientMemory {
        ClientMemory::new(usize::MAX)
    }
}

impl ClientMemory {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> ClientMemory {
        ClientMemory { limit, used: AtomicUsize::new(0) }
    }

    /// The budget for `-m` of `memory_bytes` and items of at most `item_bytes_max`: half of
    /// `-m`, at least two of the largest items in flight (with their command lines) and 4 MiB.
    pub fn limit_for(memory_bytes: usize, item_bytes_max: usize) -> usize {
        let two_items = 2 * (item_bytes_max + qs_proto::LINE_BYTES_MAX + 2);
        (memory_bytes / 2).max(two_items).max(LIMIT_MIN_BYTES)
    }

    /// The budget in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes charged now.
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// Bytes left before the budget is spent.
    pub fn room(&self) -> usize {
        self.limit.saturating_sub(self.used())
    }

    /// Whether the budget is spent.
    pub fn spent(&self) -> bool {
        self.used() >= self.limit
    }

    /// Takes `bytes` if they fit under the budget.
    pub fn try_take(&self, bytes: usize) -> bool {
        let before = self.used.fetch_add(bytes, Relaxed);
        if before.saturating_add(bytes) > self.limit {
            self.used.fetch_sub(bytes, Relaxed);
            return false;
        }
        true
    }

    /// Takes `bytes` whether or not they fit (memory already in use: bytes received, a reply
    /// written).
    pub fn force(&self, bytes: usize) {
        self.used.fetch_add(bytes, Relaxed);
    }

    /// Gives back `bytes` taken before.
    pub fn give(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Relaxed);
    }

    /// Moves a charge of `was` bytes to `now` bytes (forced), keeping `charged` current.
    pub fn recharge(&self, charged: &mut usize, now: usize) {
        if now > *charged {
            self.force(now - *charged);
        } else if now < *charged {
            self.give(*charged - now);
        }
        *charged = now;
    }
}

/// A large value the replies that send it share, charged to the client memory budget (its
/// length) while any of them holds it: a copy made once out of the log, or the value left in
/// the log of the partition that owns it ([`qs_store::LogValue`], sent from there by the
/// owner's sends; see `exec::get`). Cheap to clone: the clones are the replies' handles on
/// one value.
#[derive(Clone, Debug)]
pub enum SharedValue {
    /// A copy of its own.
    Copy(Arc<Copied>),
    /// In the log of partition `.0`: the value's handles carry its charge (no allocation of
    /// its own: a large get at depth 16 spent a malloc and a free on one, 250 instructions).
    Log(usize, qs_store::LogValue),
}

/// A shared value's copy, charged to the budget while it lives.
#[derive(Debug)]
pub struct Copied {
    bytes: Box<[u8]>,
    budget: Arc<ClientMemory>,
}

impl Drop for Copied {
    fn drop(&mut self) {
        self.budget.give(self.bytes.len());
    }
}

impl qs_store::Charge for ClientMemory {
    fn give(&self, bytes: usize) {
        ClientMemory::give(self, bytes);
    }
}

/// A reference to a [`SharedValue`] that does not hold it (kept to reuse it while a reply
/// still does).
#[derive(Debug)]
pub enum WeakShared {
    Copy(std::sync::Weak<Copied>),
    Log(usize, qs_store::WeakLogValue),
}

/// What reads a value left in the log: the owner of its partition (the engine of the worker
/// that read it), whose borrow keeps the log unwritten while the bytes are used.
pub trait LogBytes {
    /// The bytes of `value`, left in the log of `partition`.
    fn log_bytes<'a>(&'a self, partition: usize, value: &'a qs_store::LogValue) -> &'a [u8];
}

impl SharedValue {
    /// A copy of `bytes`, charged to `budget`.
    pub fn new(bytes: &[u8], budget: Arc<ClientMemory>) -> SharedValue {
        SharedValue::from_vec(bytes.into(), budget)
    }

    /// `bytes`, kept as they are (read straight into a buffer of their own), charged to `budget`.
    pub fn from_vec(bytes: Vec<u8>, budget: Arc<ClientMemory>) -> SharedValue {
        budget.force(bytes.len());
        SharedValue::Copy(Arc::new(Copied { bytes: bytes.into_boxed_slice(), budget }))
    }

    /// `value`, left in the log of `partition`: pinned with its charge (its length, taken as a
    /// copy would be: the log rescues it into one when its memory is written again while a
    /// reply still holds it), given back when its last handle is dropped.
    pub fn in_log(partition: usize, value: qs_store::LogValue) -> SharedValue {
        SharedValue::Log(partition, value)
    }

    /// The value's length.
    pub fn len(&self) -> usize {
        match self {
            SharedValue::Copy(copy) => copy.bytes.len(),
            SharedValue::Log(_, value) => value.len(),
        }
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value, read through `logs` when it lies in a log.
    pub fn bytes<'a>(&'a self, logs: &'a impl LogBytes) -> &'a [u8] {
        match self {
            SharedValue::Copy(copy) => &copy.bytes,
            SharedValue::Log(partition, value) => logs.log_bytes(*partition, value),
        }
    }

    /// A reference that does not hold the value.
    pub fn downgrade(&self) -> WeakShared {
        match self {
            SharedValue::Copy(copy) => WeakShared::Copy(Arc::downgrade(copy)),
            SharedValue::Log(partition, value) => WeakShared::Log(*partition, value.downgrade()),
        }
    }
}

impl WeakShared {
    /// The value while a reply still holds it. A value in the log no reply holds any more
    /// (its charge given back) but not yet let go by its partition is charged to `budget`
    /// again, as a new one would be.
    pub fn upgrade(&self, budget: &ClientMemory) -> Option<SharedValue> {
        match self {
            WeakShared::Copy(copy) => copy.upgrade().map(SharedValue::Copy),
            WeakShared::Log(partition, value) => {
                let value = value.upgrade()?;
                if value.only_handle() {
                    budget.force(value.len());
                }
                Some(SharedValue::Log(*partition, value))
            }
        }
    }
}

/// Reads no log: for outputs that hold copies only (tests, UDP).
pub struct NoLogs;

impl LogBytes for NoLogs {
    fn log_bytes<'a>(&'a self, partition: usize, _value: &'a qs_store::LogValue) -> &'a [u8] {
        unreachable!("a value left in the log of partition {partition} outside its owner's sends")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_half_of_dash_m_with_room_for_two_items_and_a_floor() {
        assert_eq!(ClientMemory::limit_for(64 << 20, 1 << 20), 32 << 20);
        assert_eq!(ClientMemory::limit_for(8 << 20, 1 << 20), 4 << 20);
        assert_eq!(ClientMemory::limit_for(2 << 20, 1 << 20), 4 << 20);
        assert_eq!(ClientMemory::limit_for(64 << 20, 32 << 20), 2 * ((32 << 20) + 2050));
    }

    #[test]
    fn a_shared_value_is_charged_while_it_lives() {
        let budget = Arc::new(ClientMemory::new(100));
        let value = SharedValue::new(b"twelve bytes", budget.clone());
        assert_eq!((value.len(), value.bytes(&NoLogs)), (12, &b"twelve bytes"[..]));
        let again = value.clone();
        assert_eq!(budget.used(), 12, "charged once however many hold it");
        drop(value);
        assert_eq!(budget.used(), 12);
        drop(again);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn takes_fit_under_the_limit_and_forced_ones_may_pass_it() {
        let budget = ClientMemory::new(100);
        assert!(budget.try_take(60));
        assert!(!budget.try_take(41), "past the limit");
        assert_eq!(budget.used(), 60);
        assert!(budget.try_take(40));
        assert!(budget.spent());
        budget.force(10);
        assert_eq!((budget.used(), budget.room()), (110, 0));
        let mut charged = 10;
        budget.recharge(&mut charged, 0);
        budget.give(100);
        assert_eq!((budget.used(), charged), (0, 0));
    }
}
