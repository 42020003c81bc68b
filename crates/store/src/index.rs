//! The lossy set-associative index: 128-byte buckets of a version word and 15 slots.
//!
//! ```text
//! bucket (16 words, 2 cache lines)        slot (one word)
//! +---------+--------+-----+---------+     63          48 47                          0
//! | version | slot 0 | ... | slot 14 |    +--------------+-----------------------------+
//! +---------+--------+-----+---------+    |     tag      |   log offset (logical)      |
//!                                         +--------------+-----------------------------+
//! ```
//! A slot of all zeroes is empty (tags are never 0). The version is a seqlock for CREW readers:
//! odd while the owner changes the bucket or one of its items.
//!
//! A cache-mode index grows as memcached's hash table does, by linear hashing: the buckets in
//! use are `base << level` plus the `split` buckets already split at this level, and bucket
//! `b` splits into `b` and `b + (base << level)` by one bit of the slots' tags, so a split reads
//! nothing but the bucket (the tag's low `level` bits pick among a base bucket's descendants;
//! within a bucket a tag compare has that many bits fewer, at most [`LEVELS_MAX`]). The memory
//! for every level is mapped at the start and costs nothing until a split first touches it.
//! CREW readers see a [`Shape`] published by the owner and look again if it changed under them.
//!
//! Store mode makes the index lossless by bulk chaining (MICA §4.3.3): spare buckets follow the
//! main ones in the same memory, and a full bucket's last slot becomes a link (tag 0, the spare
//! bucket's number as the offset) to a spare bucket that holds the overflow. Every change to a
//! chain is bracketed by its main bucket's version.

use crate::keyhash::KeyHash;
use crate::region::{prefetch, HugePages, PageKind, Region};
use crate::sync::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Slots per bucket.
pub const SLOTS_PER_BUCKET: usize = 15;
/// Words per bucket: the version and the slots.
pub const BUCKET_WORDS: usize = 16;
/// Bytes per bucket.
pub const BUCKET_BYTES: usize = BUCKET_WORDS * 8;
const _: () = assert!(BUCKET_BYTES == 128);
const _: () = assert!(SLOTS_PER_BUCKET + 1 == BUCKET_WORDS);

/// Most doublings an index may grow by: each takes one bit from the tag compare within a
/// bucket (15 bits, so 12 are left at the most) and the memory for all of them is mapped at
/// the start (anonymous memory: address space only, until touched).
pub const LEVELS_MAX: u32 = 3;

/// Main buckets summed up by one bit of an index's occupancy summary ([`Index::mark`]).
pub const GROUP_BUCKETS: usize = 64;

/// Bits of a slot holding the offset.
pub const OFFSET_BITS_MAX: u32 = 48;

/// One index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(pub u64);

impl Slot {
    /// The empty slot.
    pub const EMPTY: Slot = Slot(0);
    /// Packs a tag and an offset (offset must fit in 48 bits).
    #[inline(always)]
    pub const fn new(tag: u16, offset: u64) -> Slot {
        Slot((tag as u64) << OFFSET_BITS_MAX | offset & ((1 << OFFSET_BITS_MAX) - 1))
    }
    /// The tag.
    #[inline(always)]
    pub const fn tag(self) -> u16 {
        (self.0 >> OFFSET_BITS_MAX) as u16
    }
    /// The logical log offset.
    #[inline(always)]
    pub const fn offset(self) -> u64 {
        self.0 & ((1 << OFFSET_BITS_MAX) - 1)
    }
    /// Whether nothing is stored here.
    #[inline(always)]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// A link to bucket `bucket` (a spare bucket, never bucket 0).
    #[inline(always)]
    pub const fn link(bucket: usize) -> Slot {
        Slot(bucket as u64)
    }
    /// Whether this is a link to another bucket rather than an item.
    #[inline(always)]
    pub const fn is_link(self) -> bool {
        self.tag() == 0 && self.0 != 0
    }
}

/// Which buckets are in use and where a key's bucket is: linear hashing over the base buckets'
/// count (a power of two), `level` doublings done and `split` buckets of the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    base_mask: usize,
    base_bits: u32,
    /// `level << 56 | split`: 0 until the index first grows, which keeps the common case to
    /// one compare.
    word: u64,
}

impl Shape {
    fn fixed(bucket_count: usize) -> Shape {
        Shape { base_mask: bucket_count - 1, base_bits: bucket_count.trailing_zeros(), word: 0 }
    }

    fn level(self) -> u32 {
        (self.word >> 56) as u32
    }

    fn split(self) -> usize {
        (self.word & ((1 << 56) - 1)) as usize
    }

    /// The main bucket that holds `hash`'s slot.
    #[inline(always)]
    pub fn bucket(self, hash: KeyHash) -> usize {
        let base = hash.bucket(self.base_mask);
        if self.word == 0 {
            base
        } else {
            self.grown_bucket(hash, base)
        }
    }

    /// [`Shape::bucket`] once the index has grown: the tag's low `level` bits above the base
    /// bucket's, and one more for a bucket already split at this level.
    #[inline(never)]
    fn grown_bucket(self, hash: KeyHash, base: usize) -> usize {
        let (tag, level, split) = (hash.tag() as usize, self.level(), self.split());
        let at = base | (tag & ((1 << level) - 1)) << self.base_bits;
        if at < split {
            at | (tag >> level & 1) << (self.base_bits + level)
        } else {
            at
        }
    }

    /// Main buckets in use: `0..buckets()`.
    #[inline(always)]
    pub fn buckets(self) -> usize {
        ((self.base_mask + 1) << self.level()) + self.split()
    }

    /// The next split: bucket `from` gives the slots whose tag has bit `tag_bit` set to bucket
    /// `to`; the shape after it is `next`.
    pub fn next_split(self) -> (usize, usize, u16, Shape) {
        let (level, split) = (self.level(), self.split());
        let width = (self.base_mask + 1) << level;
        let (from, to) = (split, split + width);
        let tag_bit = 1u16 << level;
        let next = if split + 1 == width {
            Shape::at(self, level + 1, 0)
        } else {
            Shape::at(self, level, split + 1)
        };
        (from, to, tag_bit, next)
    }

    fn at(self, level: u32, split: usize) -> Shape {
        Shape { word: u64::from(level) << 56 | split as u64, ..self }
    }

    fn with_word(self, word: u64) -> Shape {
        Shape { word, ..self }
    }
}

/// The buckets of one partition.
pub struct Index {
    region: Region,
    /// The shape at the start (level 0): its base.
    base: Shape,
    /// The shape in use, as [`Shape::word`]: written by the owner only.
    shape: AtomicU64,
    /// Doublings the memory has room for.
    levels_max: u32,
    spare_count: usize,
    /// A bit per [`GROUP_BUCKETS`] main buckets (of the room), set once the owner has put a
    /// slot in one of them (written by the owner only, never cleared): a walk of the keyspace
    /// (SCAN) passes the groups whose bit is clear without reading their buckets, so a
    /// sparse keyspace costs its keys, not the memory's buckets.
    groups: Box<[AtomicU64]>,
}

/// An empty occupancy summary for `buckets` main buckets (all set with `full`).
fn group_words(buckets: usize, full: bool) -> Box<[AtomicU64]> {
    let words = buckets.div_ceil(GROUP_BUCKETS).div_ceil(64);
    (0..words).map(|_| AtomicU64::new(if full { u64::MAX } else { 0 })).collect()
}

impl Index {
    /// `bucket_count` main buckets (a power of two) and `spare_count` spare buckets after
    /// them, all empty: a fixed size.
    pub fn new(bucket_count: usize, spare_count: usize, huge_pages: HugePages) -> Index {
        Index::growing(bucket_count, spare_count, 0, huge_pages)
    }

    /// As [`Index::new`], with room to double `levels` times (at most [`LEVELS_MAX`]; none with
    /// spare buckets, which follow the main ones, or where the pages cannot be had lazily).
    pub fn growing(bucket_count: usize, spare_count: usize, levels: u32, huge_pages: HugePages) -> Index {
        assert!(bucket_count.is_power_of_two(), "bucket count must be a power of two");
        let levels = if spare_count > 0 { 0 } else { levels.min(LEVELS_MAX) };
        let bytes = (bucket_count + spare_count) * BUCKET_BYTES;
        let region = Region::with_room(bytes, (bucket_count << levels) * BUCKET_BYTES, huge_pages);
        let levels_max = if region.bytes() >= (bucket_count << levels) * BUCKET_BYTES { levels } else { 0 };
        let base = Shape::fixed(bucket_count);
        let groups = group_words(bucket_count << levels_max, false);
        Index { region, base, shape: AtomicU64::new(0), levels_max, spare_count, groups }
    }

    /// `bucket_count` main buckets (a power of two, no spares) mapped from `bytes_for(..)`
    /// bytes of `file` at `offset`, as they were left there (`-e` with a flash tier: the flash
    /// slots survive a crash). A fixed size.
    #[cfg(not(any(miri, loom)))]
    pub fn in_file(file: &std::fs::File, offset: u64, bucket_count: usize) -> std::io::Result<Index> {
        assert!(bucket_count.is_power_of_two(), "bucket count must be a power of two");
        let region = Region::from_file(file, offset, Index::file_bytes(bucket_count))?;
        let base = Shape::fixed(bucket_count);
        // What the file holds is not known: every group may hold a slot.
        let groups = group_words(bucket_count, true);
        Ok(Index { region, base, shape: AtomicU64::new(0), levels_max: 0, spare_count: 0, groups })
    }

    /// Bytes a file holds for an index of `bucket_count` buckets (whole pages).
    pub fn file_bytes(bucket_count: usize) -> usize {
        (bucket_count * BUCKET_BYTES).next_multiple_of(4096)
    }

    /// Number of spare buckets (bucket numbers `base_buckets()..base_buckets() + spare_count()`).
    pub fn spare_count(&self) -> usize {
        self.spare_count
    }

    /// The shape in use (readers: compare it again after reading a bucket, as a split may
    /// have moved the key).
    #[inline(always)]
    pub fn shape(&self) -> Shape {
        self.base.with_word(self.shape.load(Acquire))
    }

    /// Whether `shape` (read earlier with [`Index::shape`]) is still the one in use.
    #[inline(always)]
    pub fn still(&self, shape: Shape) -> bool {
        self.shape.load(Acquire) == shape.word
    }

    /// The owner publishes a new shape, with both buckets of the split that made it marked
    /// as changing (odd versions) until after this.
    pub fn publish(&self, shape: Shape) {
        self.shape.store(shape.word, Release);
    }

    /// Whether another split fits in the memory after `shape`.
    pub fn can_split(&self, shape: Shape) -> bool {
        shape.level() < self.levels_max
    }

    /// Main buckets at the start (spare buckets follow them).
    pub fn base_buckets(&self) -> usize {
        self.base.base_mask + 1
    }

    /// Main buckets the index may grow to.
    pub fn room_buckets(&self) -> usize {
        self.base_buckets() << self.levels_max
    }

    /// Number of main buckets in use.
    pub fn bucket_count(&self) -> usize {
        self.shape().buckets()
    }

    /// The 16 words of bucket `bucket`.
    #[inline(always)]
    pub fn bucket(&self, bucket: usize) -> &[AtomicU64] {
        let start = bucket * BUCKET_WORDS;
        &self.region.words()[start..start + BUCKET_WORDS]
    }

    /// Records that main bucket `bucket` holds a slot (the owner, as it puts one there; a
    /// spare bucket's main bucket is marked when its chain is). A word of the summary that
    /// stays in cache: a load and a compare where the bit is set already.
    #[inline(always)]
    pub fn mark(&self, bucket: usize) {
        let group = bucket / GROUP_BUCKETS;
        if let Some(word) = self.groups.get(group / 64) {
            let (bits, bit) = (word.load(Relaxed), 1u64 << (group % 64));
            if bits & bit == 0 {
                word.store(bits | bit, Relaxed);
            }
        }
    }

    /// The first main bucket from `from` (before `end`) whose group has held a slot; `end`
    /// when none has. Groups never marked are passed 64 at a time, a word each.
    pub fn next_marked(&self, from: usize, end: usize) -> usize {
        let mut group = from / GROUP_BUCKETS;
        while group * GROUP_BUCKETS < end {
            let Some(word) = self.groups.get(group / 64) else { return end };
            let bits = word.load(Relaxed) >> (group % 64);
            if bits == 0 {
                group = (group / 64 + 1) * 64;
                continue;
            }
            group += bits.trailing_zeros() as usize;
            return (group * GROUP_BUCKETS).max(from).min(end);
        }
        end
    }

    /// Starts loading both cache lines of bucket `bucket`.
    #[inline(always)]
    pub fn prefetch(&self, bucket: usize) {
        let words = self.region.words();
        prefetch(words, bucket * BUCKET_WORDS);
        prefetch(words, bucket * BUCKET_WORDS + 8);
    }

    /// Bytes of memory in use: the buckets in use and the spare ones.
    pub fn bytes(&self) -> usize {
        let shape = self.base.with_word(self.shape.load(Relaxed));
        (shape.buckets() + self.spare_count) * BUCKET_BYTES
    }

    /// Pages backing the index.
    pub fn page_kind(&self) -> PageKind {
        self.region.page_kind()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_layout() {
        let slot = Slot::new(0xBEEF, 0x1234_5678_9ABC);
        assert_eq!(slot.0, 0xBEEF_1234_5678_9ABC);
        assert_eq!(slot.tag(), 0xBEEF);
        assert_eq!(slot.offset(), 0x1234_5678_9ABC);
        assert!(!slot.is_empty() && Slot::EMPTY.is_empty());
        assert_eq!(Slot::new(1, u64::MAX).offset(), (1 << 48) - 1, "offset is truncated to 48 bits");
    }

    #[test]
    fn buckets_are_two_lines_and_disjoint() {
        let index = Index::new(4, 0, HugePages::Off);
        assert_eq!(index.bytes(), 4 * 128);
        index.bucket(1)[15].store(9, Relaxed);
        assert_eq!(index.bucket(2)[0].load(Relaxed), 0);
        assert_eq!(index.bucket(1).len(), 16);
        assert_eq!(index.bucket(0).as_ptr() as usize % 8, 0);
    }

    #[test]
    fn splits_keep_every_key_findable_and_use_one_tag_bit_a_level() {
        let mut shape = Index::growing(4, 0, LEVELS_MAX, HugePages::Off).shape();
        let hashes: Vec<KeyHash> = (0..2000u64).map(|i| KeyHash::of(&i.to_le_bytes())).collect();
        let mut at: Vec<usize> = hashes.iter().map(|hash| shape.bucket(*hash)).collect();
        while shape.level() < LEVELS_MAX {
            let (from, to, tag_bit, next) = shape.next_split();
            for (hash, bucket) in hashes.iter().zip(&mut at) {
                if *bucket == from && hash.tag() & tag_bit != 0 {
                    *bucket = to;
                }
            }
            shape = next;
            for (hash, bucket) in hashes.iter().zip(&at) {
                assert_eq!(shape.bucket(*hash), *bucket, "a key moved other than by its split");
                assert!(*bucket < shape.buckets());
            }
        }
        assert_eq!(shape.buckets(), 32);
    }

    #[test]
    fn an_index_grows_into_memory_mapped_at_the_start() {
        let index = Index::growing(4, 0, 2, HugePages::Off);
        assert_eq!((index.bytes(), index.room_buckets()), (4 * 128, 16));
        let mut shape = index.shape();
        while index.can_split(shape) {
            let (_, to, _, next) = shape.next_split();
            index.bucket(to)[1].store(7, Relaxed);
            shape = next;
            index.publish(shape);
        }
        assert_eq!((index.bucket_count(), index.bytes()), (16, 16 * 128));
        assert_eq!(Index::growing(4, 1, 2, HugePages::Off).room_buckets(), 4, "spares: no growth");
    }

    #[test]
    fn the_occupancy_summary_finds_every_marked_group_and_passes_the_rest() {
        let index = Index::growing(1 << 14, 0, 2, HugePages::Off);
        let end = index.room_buckets();
        assert_eq!(index.next_marked(0, end), end, "nothing marked");
        for bucket in [5, 64 * 70 + 3, end - 1] {
            index.mark(bucket);
        }
        assert_eq!(index.next_marked(0, end), 0, "bucket 5's group starts at 0");
        assert_eq!(index.next_marked(6, end), 6, "inside a marked group: where asked");
        assert_eq!(index.next_marked(64, end), 64 * 70);
        assert_eq!(index.next_marked(64 * 71, end), end - GROUP_BUCKETS);
        assert_eq!(index.next_marked(64 * 71, 64 * 1000), 64 * 1000, "none before the end");
        index.mark(end + 10_000);
    }
}
