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

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

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

/// A value left in the log of its partition for a reply to send from there: see the module
/// page. Cheap to clone (the replies of one version share it).
#[derive(Clone, Debug)]
pub struct LogValue(Arc<Pinned>);

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
    /// only: kept off the read's inlined path).
    #[cold]
    #[inline(never)]
    pub(crate) fn pin(&mut self, log: &impl Memory, offset: u64, (start, len): (usize, usize)) -> LogValue {
        if self.pinned.len() >= self.prune_at {
            self.prune();
        }
        let (ring, item_at) = log.place(offset);
        let at = item_at + start;
        let fresh = Pinned { owner: self.owner, offset, start, len, ring, at, rescued: OnceLock::new() };
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
        let mut kept = 0;
        for at in 0..self.pinned.len() {
            let pinned = &self.pinned[at];
            if Arc::strong_count(pinned) > 1 && pinned.rescued.get().is_none() {
                self.pinned.swap(kept, at);
                kept += 1;
            }
        }
        for pinned in self.pinned.drain(kept..) {
            if Arc::strong_count(&pinned) == 1 && Arc::weak_count(&pinned) == 0 && self.free.len() < before {
                self.free.push(pinned);
            }
        }
        self.prune_at = (2 * self.pinned.len()).max(PINS_BEFORE_PRUNING);
    }

    /// Before `bytes` bytes are written at item offset `offset` of `log`: copies out each
    /// pinned value those bytes would overwrite.
    #[cold]
    pub(crate) fn rescue_overlapping(&self, log: &impl Memory, offset: u64, bytes: usize) {
        let (ring, at) = log.place(offset);
        for pinned in &self.pinned {
            // A pin no reply holds any more needs no copy.
            if pinned.ring == ring
                && pinned.at < at + bytes
                && at < pinned.at + pinned.len
                && Arc::strong_count(pinned) > 1
            {
                rescue(log, pinned);
            }
        }
    }

    /// Copies out every pinned value (the memory is about to be given back or rewritten).
    #[cold]
    pub(crate) fn rescue_all(&mut self, log: &impl Memory) {
        for pinned in self.pinned.iter().filter(|pinned| Arc::strong_count(pinned) > 1) {
            rescue(log, pinned);
        }
        self.pinned.clear();
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
            held.push(pins.pin(&Zeros, n * 100, (8, 50)));
            prunings += usize::from(pins.prune_at != before);
        }
        // Every pin is held: each pruning keeps them all and doubles the wait.
        assert_eq!(pins.pinned.len(), 10_000);
        assert!(prunings <= 10, "{prunings} prunings for 10,000 held pins");
    }

    #[test]
    fn pins_no_reply_holds_are_dropped_at_the_next_pruning() {
        let mut pins = Pins::default();
        let held: Vec<LogValue> = (0..100).map(|n| pins.pin(&Zeros, n * 100, (8, 50))).collect();
        drop(held);
        for n in 0..PINS_BEFORE_PRUNING as u64 {
            drop(pins.pin(&Zeros, n * 100, (8, 50)));
        }
        assert!(pins.pinned.len() <= PINS_BEFORE_PRUNING + 1, "{} pins kept", pins.pinned.len());
    }
}
