//! Values sent from the log: the owner's read of a large value hands its reply a [`LogValue`]
//! (where the value lies) instead of a copy, and the worker sends the bytes from the log.
//!
//! The rule that makes it safe: the owner is the only thread that writes its log, and it
//! writes bytes a pinned value covers only after copying the value out (a *rescue*):
//! the partition's item writes and padding records check the pins first, and memory given
//! back to the kernel (`cache_memlimit`, the small ring switched off) rescues every pin. The
//! bytes are read in place only through `Partition::value_bytes`, which borrows the
//! partition, so no write can run while the slice lives; other threads never see a pinned
//! value's bytes (a CREW reader copies, and a reply to another worker's connection is copied
//! into the bytes handed back). A value rescued stays in its copy until the last reply
//! holding it is dropped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};

/// The next partition's pin identity (a value names its partition by it).
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// Pins kept before the ones no reply holds any more are first dropped (checked as pins are
/// made). After each pruning the next waits until the pins have doubled, so a partition whose
/// replies hold many pins at once (many connections, each with a pipeline of large gets)
/// scans them a bounded number of times per pin, not once per pin.
const PINS_BEFORE_PRUNING: usize = 32;

/// The memory values are pinned in (a partition's log).
pub(crate) trait Memory {
    /// Which ring holds item offset `offset`, and its byte position in that ring's memory.
    fn place(&self, offset: u64) -> (bool, usize);
    /// A copy of `len` bytes from byte `start` of the item at `offset`.
    fn copy(&self, offset: u64, start: usize, len: usize) -> Box<[u8]>;
}

/// Where the bytes a value's replies hold are charged: given back when the last reply that
/// holds the value lets it go (a pin made with a charge: [`crate::ValueSink::head_pinnable`]).
pub trait Charge: std::fmt::Debug + Send + Sync {
    /// Gives back `bytes` charged.
    fn give(&self, bytes: usize);
}

/// A value left in the log of its partition for a reply to send from there: see the module
/// page. Cheap to clone (the replies of one version share it). The handles are its replies':
/// the partition's own reference does not count, so the last handle dropped gives back the
/// value's charge, if it has one.
#[derive(Clone, Debug)]
pub struct LogValue(Arc<Pinned>);

/// A reference to a [`LogValue`] that does not keep it held ([`LogValue::downgrade`]).
#[derive(Clone, Debug, Default)]
pub struct WeakLogValue(Weak<Pinned>);

#[derive(Debug)]
struct Pinned {
    /// The pins' owner (see [`Pins::owner`]): tells a value of another partition apart.
    owner: u64,
    /// The item's logical offset (its ring told by the offset).
    offset: u64,
    /// The value's first byte within the item, and its length.
    start: usize,
    len: usize,
    /// Where the value's first byte lies: which ring, and its byte in that ring's memory
    /// (fixed while the pin lives: a change of the rings' memory rescues every pin first).
    ring: bool,
    at: usize,
    /// The value's copy, once the memory it lay in was to be written again.
    rescued: OnceLock<Box<[u8]>>,
    /// Whether the partition's pins hold a reference to it (besides its replies' handles).
    listed: AtomicBool,
    /// Where its replies' hold on it is charged, if anywhere.
    charge: Option<Arc<dyn Charge>>,
}

impl LogValue {
    /// The value's length in bytes.
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// Whether it was copied out of the log (the memory was to be written again).
    pub fn rescued(&self) -> bool {
        self.0.rescued.get().is_some()
    }

    /// Whether this is the only handle (no other reply holds the value).
    pub fn only_handle(&self) -> bool {
        Arc::strong_count(&self.0) == 1 + usize::from(self.0.listed.load(Relaxed))
    }

    /// A reference that does not hold the value.
    pub fn downgrade(&self) -> WeakLogValue {
        WeakLogValue(Arc::downgrade(&self.0))
    }
}

impl Drop for LogValue {
    fn drop(&mut self) {
        if self.only_handle() {
            if let Some(charge) = &self.0.charge {
                charge.give(self.0.len);
            }
        }
    }
}

impl WeakLogValue {
    /// A handle on the value while the partition or a reply still holds it; `None` once it
    /// is gone. A handle that is the only one holds a value whose charge was given back: the
    /// caller charges it again.
    pub fn upgrade(&self) -> Option<LogValue> {
        self.0.upgrade().map(LogValue)
    }
}

/// A partition's pinned values.
#[derive(Debug)]
pub(crate) struct Pins {
    /// This partition's identity, unique in the process.
    owner: u64,
    pinned: Vec<Arc<Pinned>>,
    /// How many pins the next pruning waits for.
    prune_at: usize,
    /// Pins no reply holds any more, found by the last pruning: their allocations are reused
    /// for the next pins (a large get pins its value each time; at depth 16 with 50
    /// connections, malloc and free of the pin cost as much as the rest of the pin).
    free: Vec<Arc<Pinned>>,
}

impl Default for Pins {
    fn default() -> Pins {
        Pins {
            owner: NEXT_OWNER.fetch_add(1, Relaxed),
            pinned: Vec::new(),
            prune_at: PINS_BEFORE_PRUNING,
            free: Vec::new(),
        }
    }
}

impl Pins {
    /// Pins the `len` bytes from byte `start` of the item at `offset` of `log` (large values
    /// only: kept off the read's inlined path), its replies' hold on it charged to `charge`
    /// (its length, which the caller takes; given back when the last handle is dropped).
    #[cold]
    #[inline(never)]
    pub(crate) fn pin(
        &mut self,
        log: &impl Memory,
        offset: u64,
        (start, len): (usize, usize),
        charge: Option<Arc<dyn Charge>>,
    ) -> LogValue {
        if self.pinned.len() >= self.prune_at {
            self.prune();
        }
        let (ring, item_at) = log.place(offset);
        let at = item_at + start;
        let fresh = Pinned {
            owner: self.owner,
            offset,
            start,
            len,
            ring,
            at,
            rescued: OnceLock::new(),
            listed: AtomicBool::new(true),
            charge,
        };
        let pinned = match self.free.pop() {
            Some(mut pinned) => {
                // Nothing else holds a pin on the free list (the pruning saw it so).
                *Arc::get_mut(&mut pinned).expect("a pin no reply holds") = fresh;
                pinned
            }
            None => Arc::new(fresh),
        };
        if cfg!(loom) {
            // loom's atomics are not plain words: the value is copied at once.
            rescue(log, &pinned);
        }
        self.pinned.push(pinned.clone());
        LogValue(pinned)
    }

    /// Whether no value is pinned (the common case: checked before every write).
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.pinned.is_empty()
    }

    /// Drops the pins no reply holds (keeping their allocations for reuse, up to as many as
    /// there were pins) and those rescued; the next pruning waits until the pins left have doubled.
    fn prune(&mut self) {
        let before = self.pinned.len();
        let free = &mut self.free;
        self.pinned.retain(|pinned| {
            if Arc::strong_count(pinned) > 1 && pinned.rescued.get().is_none() {
                return true;
            }
            pinned.listed.store(false, Relaxed);
            if Arc::strong_count(pinned) == 1 && Arc::weak_count(pinned) == 0 && free.len() < before {
                // The list's reference moves to the free list (retain drops this one).
                free.push(pinned.clone());
            }
            false
        });
        self.prune_at = (2 * self.pinned.len()).max(PINS_BEFORE_PRUNING);
    }

    /// Before `bytes` bytes are written at item offset `offset` of `log`: copies out each
    /// pinned value those bytes would overwrite. Pins no reply holds any more need no copy;
    /// when they are most of the list, it is pruned (a burst of large gets over, the pins it
    /// left are not scanned before every write until the next large get).
    #[cold]
    pub(crate) fn rescue_overlapping(&mut self, log: &impl Memory, offset: u64, bytes: usize) {
        let (ring, at) = log.place(offset);
        let mut unheld = 0;
        for pinned in &self.pinned {
            if Arc::strong_count(pinned) == 1 {
                unheld += 1;
            } else if pinned.ring == ring && pinned.at < at + bytes && at < pinned.at + pinned.len {
                rescue(log, pinned);
            }
        }
        if 2 * unheld > self.pinned.len() {
            self.prune();
        }
    }

    /// Copies out every pinned value (the memory is about to be given back or rewritten).
    #[cold]
    pub(crate) fn rescue_all(&mut self, log: &impl Memory) {
        for pinned in self.pinned.iter().filter(|pinned| Arc::strong_count(pinned) > 1) {
            rescue(log, pinned);
        }
        for pinned in self.pinned.drain(..) {
            pinned.listed.store(false, Relaxed);
        }
        self.prune_at = PINS_BEFORE_PRUNING;
    }
}

/// Copies `pinned` out of `log` unless it already was.
fn rescue(log: &impl Memory, pinned: &Pinned) {
    pinned.rescued.get_or_init(|| log.copy(pinned.offset, pinned.start, pinned.len));
}

/// The bytes of `value` if `pins` pinned it: its copy once rescued, else `None` (it lies in
/// `log`, untouched). `Err` for a value of another partition.
pub(crate) fn rescued<'a>(pins: &Pins, value: &'a LogValue) -> Result<Option<&'a [u8]>, ()> {
    if value.0.owner != pins.owner {
        return Err(());
    }
    Ok(value.0.rescued.get().map(|copy| &copy[..]))
}

/// Where an unrescued `value` lies: its item's offset, and its first byte within it and length.
#[cfg(not(loom))]
pub(crate) fn place(value: &LogValue) -> (u64, usize, usize) {
    (value.0.offset, value.0.start, value.0.len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log of one ring whose copies are zeros.
    struct Zeros;

    impl Memory for Zeros {
        fn place(&self, offset: u64) -> (bool, usize) {
            (false, offset as usize)
        }
        fn copy(&self, _offset: u64, _start: usize, len: usize) -> Box<[u8]> {
            vec![0; len].into()
        }
    }

    #[test]
    fn pins_held_by_replies_are_scanned_a_bounded_number_of_times() {
        let mut pins = Pins::default();
        let mut held = Vec::new();
        let mut prunings = 0;
        for n in 0..10_000u64 {
            let before = pins.prune_at;
            held.push(pins.pin(&Zeros, n * 100, (8, 50), None));
            prunings += usize::from(pins.prune_at != before);
        }
        // Every pin is held: each pruning keeps them all and doubles the wait.
        assert_eq!(pins.pinned.len(), 10_000);
        assert!(prunings <= 10, "{prunings} prunings for 10,000 held pins");
    }

    #[test]
    fn a_write_prunes_the_pins_once_most_are_held_no_more() {
        let mut pins = Pins::default();
        let held: Vec<LogValue> = (0..1000).map(|n| pins.pin(&Zeros, n * 100, (8, 50), None)).collect();
        pins.rescue_overlapping(&Zeros, 1_000_000, 8);
        assert_eq!(pins.pinned.len(), 1000, "all held: none pruned");
        let (kept, gone) = held.split_at(400);
        drop(gone.to_vec());
        let kept = kept.to_vec();
        drop(held);
        pins.rescue_overlapping(&Zeros, 1_000_000, 8);
        assert_eq!(pins.pinned.len(), 400, "most held no more: pruned");
        assert!(kept.iter().all(|value| !value.rescued()), "nothing written over them");
        pins.rescue_overlapping(&Zeros, 0, 200);
        assert!(kept[0].rescued() && kept[1].rescued() && !kept[2].rescued());
    }

    #[test]
    fn pins_no_reply_holds_are_dropped_at_the_next_pruning() {
        let mut pins = Pins::default();
        let held: Vec<LogValue> = (0..100).map(|n| pins.pin(&Zeros, n * 100, (8, 50), None)).collect();
        drop(held);
        for n in 0..PINS_BEFORE_PRUNING as u64 {
            drop(pins.pin(&Zeros, n * 100, (8, 50), None));
        }
        assert!(pins.pinned.len() <= PINS_BEFORE_PRUNING + 1, "{} pins kept", pins.pinned.len());
    }

    /// Bytes charged now.
    #[derive(Debug, Default)]
    struct Charged(std::sync::atomic::AtomicUsize);

    impl Charge for Charged {
        fn give(&self, bytes: usize) {
            self.0.fetch_sub(bytes, Relaxed);
        }
    }

    impl Charged {
        fn take(&self, bytes: usize) {
            self.0.fetch_add(bytes, Relaxed);
        }
        fn now(&self) -> usize {
            self.0.load(Relaxed)
        }
    }

    #[test]
    fn a_charge_is_given_back_with_the_last_reply_handle_listed_or_not() {
        let charged = Arc::new(Charged::default());
        let mut pins = Pins::default();
        // Listed: the pins' own reference does not count as a handle.
        let value = pins.pin(&Zeros, 0, (8, 50), Some(charged.clone()));
        charged.take(50);
        let again = value.clone();
        assert!(!value.only_handle());
        drop(value);
        assert_eq!(charged.now(), 50, "another handle holds it");
        assert!(again.only_handle());
        drop(again);
        assert_eq!(charged.now(), 0, "given back with the last handle");
        // Rescued and unlisted by a pruning while replies hold it.
        let value = pins.pin(&Zeros, 100, (8, 50), Some(charged.clone()));
        charged.take(50);
        let again = value.clone();
        pins.rescue_all(&Zeros);
        assert!(!value.only_handle());
        drop(value);
        assert_eq!(charged.now(), 50);
        drop(again);
        assert_eq!(charged.now(), 0);
    }

    #[test]
    fn a_weak_reference_finds_a_value_while_the_pins_hold_it_and_its_charge_is_taken_again() {
        let charged = Arc::new(Charged::default());
        let mut pins = Pins::default();
        let value = pins.pin(&Zeros, 0, (8, 50), Some(charged.clone()));
        charged.take(50);
        let weak = value.downgrade();
        drop(value);
        assert_eq!(charged.now(), 0);
        // The pins still list it: the reference finds it, with no reply holding it.
        let found = weak.upgrade().expect("listed");
        assert!(found.only_handle(), "the finder charges it again");
        charged.take(50);
        drop(found);
        assert_eq!(charged.now(), 0);
        pins.rescue_all(&Zeros);
        assert!(weak.upgrade().is_none(), "gone once neither the pins nor a reply hold it");
    }
}
