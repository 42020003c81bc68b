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
//! Store mode makes the index lossless by bulk chaining (MICA §4.3.3): spare buckets follow the
//! main ones in the same memory, and a full bucket's last slot becomes a link (tag 0, the spare
//! bucket's number as the offset) to a spare bucket that holds the overflow. Every change to a
//! chain is bracketed by its main bucket's version.

use crate::region::{prefetch, HugePages, PageKind, Region};
use crate::sync::AtomicU64;

/// Slots per bucket.
pub const SLOTS_PER_BUCKET: usize = 15;
/// Words per bucket: the version and the slots.
pub const BUCKET_WORDS: usize = 16;
/// Bytes per bucket.
pub const BUCKET_BYTES: usize = BUCKET_WORDS * 8;
const _: () = assert!(BUCKET_BYTES == 128);
const _: () = assert!(SLOTS_PER_BUCKET + 1 == BUCKET_WORDS);

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

/// The buckets of one partition.
pub struct Index {
    region: Region,
    bucket_mask: usize,
    spare_count: usize,
}

impl Index {
    /// `bucket_count` main buckets (a power of two) and `spare_count` spare buckets after
    /// them, all empty.
    pub fn new(bucket_count: usize, spare_count: usize, huge_pages: HugePages) -> Index {
        assert!(bucket_count.is_power_of_two(), "bucket count must be a power of two");
        let region = Region::new((bucket_count + spare_count) * BUCKET_BYTES, huge_pages);
        Index { region, bucket_mask: bucket_count - 1, spare_count }
    }

    /// `bucket_count` main buckets (a power of two, no spares) mapped from `bytes_for(..)`
    /// bytes of `file` at `offset`, as they were left there (`-e` with a flash tier: the flash
    /// slots survive a crash).
    #[cfg(not(any(miri, loom)))]
    pub fn in_file(file: &std::fs::File, offset: u64, bucket_count: usize) -> std::io::Result<Index> {
        assert!(bucket_count.is_power_of_two(), "bucket count must be a power of two");
        let region = Region::from_file(file, offset, Index::file_bytes(bucket_count))?;
        Ok(Index { region, bucket_mask: bucket_count - 1, spare_count: 0 })
    }

    /// Bytes a file holds for an index of `bucket_count` buckets (whole pages).
    pub fn file_bytes(bucket_count: usize) -> usize {
        (bucket_count * BUCKET_BYTES).next_multiple_of(4096)
    }

    /// Number of spare buckets (bucket numbers `bucket_count()..bucket_count() + spare_count()`).
    pub fn spare_count(&self) -> usize {
        self.spare_count
    }

    /// Mask that turns a keyhash's bucket bits into a bucket number.
    #[inline(always)]
    pub fn bucket_mask(&self) -> usize {
        self.bucket_mask
    }

    /// Number of main buckets.
    pub fn bucket_count(&self) -> usize {
        self.bucket_mask + 1
    }

    /// The 16 words of bucket `bucket`.
    #[inline(always)]
    pub fn bucket(&self, bucket: usize) -> &[AtomicU64] {
        let start = bucket * BUCKET_WORDS;
        &self.region.words()[start..start + BUCKET_WORDS]
    }

    /// Starts loading both cache lines of bucket `bucket`.
    #[inline(always)]
    pub fn prefetch(&self, bucket: usize) {
        let words = self.region.words();
        prefetch(words, bucket * BUCKET_WORDS);
        prefetch(words, bucket * BUCKET_WORDS + 8);
    }

    /// Bytes of memory.
    pub fn bytes(&self) -> usize {
        self.region.bytes()
    }

    /// Pages backing the index.
    pub fn page_kind(&self) -> PageKind {
        self.region.page_kind()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

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
}
