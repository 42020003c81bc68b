//! S3-FIFO in the log (`Eviction::S3Fifo`, Yang et al., SOSP'23): a small ring, a tenth of the
//! partition's memory, that new keys enter; a main ring run by clock ([`Partition::keep_head`])
//! that keys read while in the small ring are copied to as its head reaches them; and a ghost of
//! the keys the small ring dropped unread, which enter the main ring directly when they are
//! written again. A key read once costs a tenth of the memory's turnover instead of a whole
//! lap of it, which is what S3-FIFO gains over clock at small caches and under scans
//! (docs/SIMULATION.md).
//!
//! Both rings are circular logs in one [`crate::Log`]: the small ring's offsets carry
//! [`crate::log::SMALL_BIT`], so a slot says which ring its item is in and readers check it
//! against that ring's head. Everything lives inside the partition's share of `-m`: the main
//! ring gets what the small ring and the ghost leave.

use super::{Found, Partition, Ring, KEEP_BYTES_PER_RESERVE};
use crate::config::Config;
use crate::item::BIT_DEAD;
use crate::keyhash::KeyHash;

/// The small ring's share of the partition's memory (S3-FIFO's 10%).
const SMALL_SHARE_DIVISOR: usize = 10;
/// Bytes of memory per ghost entry (4 bytes each: under 1% of the memory). A partition of
/// items of a few hundred bytes holds about as many keys in the ghost as in the main ring,
/// as S3-FIFO's ghost does.
const GHOST_BYTES_PER_ENTRY: usize = 512;
/// Partitions smaller than this run clock alone: their small ring could not hold an item of a
/// useful size.
pub(super) const SMALL_RING_LOG_MIN: usize = 1 << 20;
/// A new item larger than this share of the small ring goes to the main ring directly.
const SMALL_ITEM_DIVISOR: u64 = 4;

/// An unread item at the small ring's head moves to the main ring by chance as clock keeps one
/// of this many times its size ([`Partition::small_enough_to_keep`]): only items under a
/// quarter of the mean, which a block trace has many of (docs/SIMULATION.md).
const SMALL_MOVE_SIZE_FACTOR: usize = 4;

/// The small ring's state in a partition (all zero and empty without one).
#[derive(Debug, Default)]
pub(super) struct SmallRing {
    /// Its head and tail, as the partition's `head` and `tail` are the main ring's.
    pub(super) head: u64,
    pub(super) tail: u64,
    /// Whether the small ring is in use (it exists, and `cache_memlimit` left room for it).
    pub(super) on: bool,
    /// Bytes the main ring has never held: its size at the start, what it grows by later,
    /// less what has been appended to it since. While there are any, the small ring copies its
    /// unread items on instead of dropping them.
    pub(super) main_free: u64,
    /// S3-FIFO's ghost: fingerprints of keys the small ring evicted unread, one per entry in
    /// the entry their hash picks (empty without a small ring). A key found here when it is
    /// written again enters the main ring directly.
    pub(super) ghost: Box<[u32]>,
}

/// An empty ghost entry: even, where every fingerprint is odd.
const GHOST_EMPTY: u32 = 2;

/// A ghost of `entries` empty entries, written now: its memory is resident from the start (as
/// the workers' buffers are), not faulted in by the first evictions.
pub(super) fn empty_ghost(entries: usize) -> Box<[u32]> {
    vec![GHOST_EMPTY; entries].into_boxed_slice()
}

/// How a cache-mode partition's memory is shared between S3-FIFO's rings and its ghost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Shares {
    /// The main ring's bytes.
    pub(super) main: usize,
    /// The small ring's bytes.
    pub(super) small: usize,
    /// Ghost entries (a power of two).
    pub(super) ghost: usize,
}

impl Shares {
    /// The shares for `config`, `None` where it runs without a small ring (another policy,
    /// store mode, or too small a partition; `Partition::open`, for a memory file, runs clock
    /// without asking).
    pub(super) fn of(config: &Config) -> Option<Shares> {
        if config.eviction != crate::config::Eviction::S3Fifo
            || config.store_mode
            || config.log_bytes < SMALL_RING_LOG_MIN
        {
            return None;
        }
        let small = (config.log_bytes / SMALL_SHARE_DIVISOR) & !7;
        let ghost = 1usize << (config.log_bytes / GHOST_BYTES_PER_ENTRY).ilog2();
        let main = (config.log_bytes - small - 4 * ghost) & !7;
        Some(Shares { main, small, ghost })
    }

    /// Bytes besides the main ring's.
    pub(super) fn others(self) -> usize {
        self.small + 4 * self.ghost
    }
}

impl Partition {
    /// Whether this partition runs a small ring (it has one, and `cache_memlimit` has not
    /// turned it off).
    #[inline(always)]
    pub(super) fn has_small_ring(&self) -> bool {
        self.small.on
    }

    /// Bytes of memory outside the main ring in use: the small ring's and the ghost's.
    pub(super) fn small_ring_bytes(&self) -> u64 {
        if self.small.on {
            self.small_ring_room()
        } else {
            0
        }
    }

    /// Bytes of memory the small ring and the ghost have, on or off.
    pub(super) fn small_ring_room(&self) -> u64 {
        self.geometry.small_bytes + 4 * self.small.ghost.len() as u64
    }

    /// Turns the small ring on or off (`cache_memlimit`): off, it is emptied (its items
    /// evicted, its memory given back) and every item goes to the main ring, which is clock.
    pub(super) fn set_small_ring(&mut self, on: bool) {
        if self.small.on && !on {
            while self.small.head < self.small.tail {
                self.evict_small_head();
            }
            self.publish_head();
            self.shared.log.release_small();
        }
        self.small.on = on && self.geometry.small_lap != 0;
    }

    /// The largest item the small ring takes; larger new items go to the main ring.
    #[inline(always)]
    fn small_item_max(&self) -> u64 {
        self.geometry.small_bytes / SMALL_ITEM_DIVISOR
    }

    /// Which ring a new key of `size` bytes goes to: the small one, unless the ghost remembers
    /// the key (it was dropped from the small ring unread and is back: it goes to the main ring
    /// and leaves the ghost) or it is too large for the small ring.
    #[inline(always)]
    pub(super) fn ring_for_new(&mut self, hash: KeyHash, size: usize) -> Ring {
        if !self.has_small_ring() || size as u64 > self.small_item_max() {
            return Ring::Main;
        }
        let (at, fingerprint) = self.ghost_entry(hash);
        if self.small.ghost[at] == fingerprint {
            self.small.ghost[at] = GHOST_EMPTY;
            self.stats.ghost_hits += 1;
            return Ring::Main;
        }
        Ring::Small
    }

    /// Which ring a new version of the item at `offset` goes to: the ring it is in, unless it no
    /// longer fits the small ring.
    #[inline(always)]
    pub(super) fn ring_for_existing(&self, offset: u64, size: usize) -> Ring {
        if self.geometry.in_small(offset) && size as u64 <= self.small_item_max() {
            Ring::Small
        } else {
            Ring::Main
        }
    }

    /// The ghost entry `hash` picks and the fingerprint it would hold there (never 0).
    #[inline(always)]
    fn ghost_entry(&self, hash: KeyHash) -> (usize, u32) {
        let mixed = hash.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((mixed >> 32) as usize & (self.small.ghost.len() - 1), (hash.0 >> 32) as u32 | 1)
    }

    /// Remembers a key the small ring dropped unread.
    fn ghost_insert(&mut self, hash: KeyHash) {
        let (at, fingerprint) = self.ghost_entry(hash);
        self.small.ghost[at] = fingerprint;
    }

    /// Bytes free between the small ring's tail and head.
    #[inline(always)]
    fn small_room(&self) -> u64 {
        self.geometry.small_lap - (self.small.tail - self.small.head)
    }

    /// The padding an item of `size` bytes needs before it at the small ring's tail.
    #[inline(always)]
    fn small_padding_before(&self, size: usize) -> u64 {
        let at = self.geometry.small_physical(self.small.tail) as u64;
        if at + size as u64 > self.geometry.small_bytes {
            self.geometry.small_lap - at
        } else {
            0
        }
    }

    /// [`Partition::reserve`] for the small ring: room for `size` bytes at its tail (plain
    /// evictions at its head where [`Partition::promote_ahead`] left too little); the offset.
    pub(super) fn reserve_small(&mut self, size: usize) -> u64 {
        let mut padding = self.small_padding_before(size);
        let mut need = padding + size as u64;
        if self.small_room() < need {
            // Never past the tail, as the main ring's [`Partition::reserve`].
            while self.small_room() < need && self.small.head < self.small.tail {
                self.evict_small_head();
            }
            if self.small_room() < need {
                debug_assert_eq!(
                    self.small.head, self.small.tail,
                    "a small ring short of room with records in it"
                );
                self.small.tail += padding;
                self.small.head = self.small.tail;
                (padding, need) = (0, size as u64);
            }
            self.publish_head();
        }
        if padding > 0 {
            if (self.geometry.small_physical(self.small.tail) as u64) < self.geometry.small_bytes {
                self.before_writing(self.geometry.small_offset(self.small.tail), 8);
                self.shared.log.write_padding(self.geometry.small_offset(self.small.tail));
            }
            self.small.tail += padding;
        }
        let offset = self.geometry.small_offset(self.small.tail);
        self.small.tail += size as u64;
        self.scan_credit_bytes += need;
        offset
    }

    /// Moves the small ring's head to its tail (every item in it flushed: none is evicted).
    pub(super) fn drop_small_ring(&mut self) {
        while self.small.head < self.small.tail {
            self.evict_small_head();
        }
    }

    /// Moves the small ring's head past one record: a live item leaves the cache (an eviction,
    /// its key to the ghost; a reclaim if it had expired).
    fn evict_small_head(&mut self) {
        let offset = self.geometry.small_offset(self.small.head);
        if self.shared.log.is_padding(offset) {
            self.small.head += self.geometry.small_lap - self.geometry.small_physical(offset) as u64;
            return;
        }
        let header = self.shared.log.header(offset);
        if self.leave_head(&header) {
            let hash = self.key_hash_at(offset, &header);
            self.ghost_insert(hash);
            self.count_eviction(offset, &header);
        }
        self.small.head += header.capacity() as u64;
    }

    /// The item at the small ring's head if it is to go to the main ring: live, still in the
    /// index, and either read since it was written or unread while the main ring is still
    /// filling (`main_free`: a cache still filling: S3-FIFO's small queue takes only what the
    /// main one leaves, so a fill that reads nothing fills all the memory).
    fn small_head_to_move(&mut self) -> Option<Found> {
        let offset = self.geometry.small_offset(self.small.head);
        if self.shared.log.is_padding(offset) {
            return None;
        }
        let header = self.shared.log.header(offset);
        // Unread items go on while the main ring has room no live item holds (once it is full,
        // a write's keeps leave it about an item's room, which is no reason to take one).
        // And clock's size weighting, for items under a quarter of the mean: a tiny block among
        // large ones (a real trace's spread) earns its place as clock would keep it, where
        // items of about the mean size (a scan's) do not get in unread.
        let movable = header.word0.freq() > 0
            || self.small.main_free > 0
            || self.head == 0
            || self.small_enough_to_keep(offset, SMALL_MOVE_SIZE_FACTOR * header.capacity());
        if header.word0.has(BIT_DEAD) || !movable || self.shared.is_gone(&header, self.clock) {
            return None;
        }
        self.found_at(offset, header)
    }

    /// S3-FIFO's small queue before a write looks anything up: room for `size` bytes at the
    /// small ring's tail, the items at its head read since they were written copied to the main
    /// ring (with clock's keeps there first) and the others evicted (or copied too while the
    /// main ring has free room), within the write's `keeps` and [`KEEP_BYTES_PER_RESERVE`]
    /// from `tail_before`.
    pub(super) fn promote_ahead(&mut self, size: usize, keeps: &mut u32, tail_before: u64) {
        if size as u64 > self.small_item_max() {
            return;
        }
        while *keeps > 0
            && self.small.head < self.small.tail
            && self.small_room() < self.small_padding_before(size) + size as u64
            && self.tail - tail_before <= KEEP_BYTES_PER_RESERVE
        {
            *keeps -= 1;
            match self.small_head_to_move() {
                Some(found) => {
                    if found.header.word0.freq() > 0 {
                        self.keep_main(found.header.capacity(), keeps, tail_before);
                        self.stats.promotions += 1;
                    }
                    // Into the main ring with no reads: it must be read there to stay.
                    let bits = found.header.word0.with_freq(0).bits();
                    self.move_to_tail(&found, bits, found.header.word1.last_access());
                }
                None => self.evict_small_head(),
            }
        }
    }

    /// The small ring's records, head to tail, padding skipped: (offset, header).
    pub(super) fn small_records(&self) -> impl Iterator<Item = (u64, crate::log::Header)> + '_ {
        let mut at = self.small.head;
        std::iter::from_fn(move || {
            while at < self.small.tail {
                let offset = self.geometry.small_offset(at);
                if self.shared.log.is_padding(offset) {
                    at += self.geometry.small_lap - self.geometry.small_physical(offset) as u64;
                    continue;
                }
                let header = self.shared.log.header(offset);
                at += header.capacity() as u64;
                return Some((offset, header));
            }
            None
        })
    }
}
