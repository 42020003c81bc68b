//! The item memory as every worker sees it: the logs' size per partition (which
//! `cache_memlimit` changes, within the room reserved at start), the index, the largest item,
//! the pages the memory got, and store mode (whose arenas cannot change size).

use qs_store::{PageKind, Partition};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};

/// The item memory's figures and its one run-time change.
#[derive(Debug)]
pub struct Memory {
    /// Partitions.
    partitions: usize,
    /// Log bytes per partition now.
    log_bytes: AtomicUsize,
    /// The most log bytes per partition `cache_memlimit` may set (the reserved room).
    log_room: usize,
    /// The fewest.
    log_limit_min: usize,
    /// The logs cannot change size: store mode's arenas, or a memory file's layout (-e).
    fixed: bool,
    /// Store mode.
    store_mode: bool,
    /// Index bytes per partition.
    index_bytes: usize,
    /// Largest item accepted (header, key and value).
    item_bytes_max: usize,
    /// Pages the logs and the index got (of partition 0).
    page_kinds: (PageKind, PageKind),
    /// Main index buckets a partition may grow to.
    main_buckets: usize,
    /// Log bytes per partition at start (Redis's `maxmemory 0` goes back to it).
    started_log_bytes: usize,
    /// Redis's `maxmemory` set below the smallest cache ([`FLOOR_BYTES`]): the bytes asked,
    /// else 0. The logs keep their size, and commands that may use memory are refused (OOM),
    /// as redis-server refuses them when eviction cannot bring it under its limit.
    below_floor: AtomicU64,
}

/// The smallest item memory `cache_memlimit` sets (memcached's).
pub const FLOOR_BYTES: u64 = 8 << 20;

/// Why `cache_memlimit` could not set a size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unadjustable;

impl Memory {
    /// As partition `first` was built (every partition is alike), for `partitions`
    /// partitions; `memory_file`: the logs live in a memory file (-e), laid out for their size.
    pub fn of(first: &Partition, partitions: usize, item_bytes_max: usize, memory_file: bool) -> Memory {
        Memory {
            partitions,
            log_bytes: AtomicUsize::new(first.log_bytes()),
            log_room: first.log_room(),
            log_limit_min: first.log_limit_min(),
            fixed: first.is_store_mode() || memory_file,
            store_mode: first.is_store_mode(),
            index_bytes: first.index_bytes(),
            item_bytes_max,
            page_kinds: first.page_kinds(),
            main_buckets: first.room_buckets(),
            started_log_bytes: first.log_bytes(),
            below_floor: AtomicU64::new(0),
        }
    }

    /// The item memory at start, in megabytes (what Redis's `maxmemory 0` sets).
    pub fn started_megabytes(&self) -> u32 {
        u32::try_from(((self.started_log_bytes * self.partitions) as u64).div_ceil(1 << 20))
            .unwrap_or(u32::MAX)
    }

    /// Whether commands that may use memory are refused: Redis's `maxmemory` is below the
    /// smallest cache.
    #[inline]
    pub fn refusing(&self) -> bool {
        self.below_floor.load(Relaxed) != 0
    }

    /// Redis's `maxmemory` of `bytes` (1 to [`FLOOR_BYTES`]): commands that may use memory are
    /// refused from now on; 0: served again.
    pub fn set_below_floor(&self, bytes: u64) {
        self.below_floor.store(bytes, Relaxed);
    }

    /// Redis's `maxmemory`: the bytes asked while below the floor, else the item memory.
    pub fn redis_maxmemory(&self) -> u64 {
        match self.below_floor.load(Relaxed) {
            0 => self.maxbytes(),
            asked => asked,
        }
    }

    /// memcached's `cache_memlimit`: the log bytes per partition for `megabytes` in all, if
    /// the logs can take that size (the caller sets each partition's, then [`Memory::set`]).
    pub fn per_partition(&self, megabytes: u32) -> Result<usize, Unadjustable> {
        let per_partition = ((u64::from(megabytes) << 20) / self.partitions as u64) as usize & !7;
        if self.fixed || per_partition > self.log_room || per_partition < self.log_limit_min {
            return Err(Unadjustable);
        }
        Ok(per_partition)
    }

    /// Records the log bytes per partition now.
    pub fn set(&self, per_partition: usize) {
        self.log_bytes.store(per_partition, Relaxed);
    }

    /// Log bytes per partition now.
    pub fn log_bytes(&self) -> usize {
        self.log_bytes.load(Relaxed)
    }

    /// Item memory now (memcached's maxbytes): the log bytes of every partition.
    pub fn maxbytes(&self) -> u64 {
        (self.log_bytes() * self.partitions) as u64
    }

    /// Store mode.
    pub fn store_mode(&self) -> bool {
        self.store_mode
    }

    /// Index bytes per partition.
    pub fn index_bytes(&self) -> usize {
        self.index_bytes
    }

    /// Largest item accepted (header, key and value).
    pub fn item_bytes_max(&self) -> usize {
        self.item_bytes_max
    }

    /// Pages the logs and the index got.
    pub fn page_kinds(&self) -> (PageKind, PageKind) {
        self.page_kinds
    }

    /// Main index buckets a partition may grow to (`lru_crawler metadump` walks them a range
    /// at a time; a partition lists the ones it uses).
    pub fn main_buckets(&self) -> usize {
        self.main_buckets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_memlimit_stays_within_the_reserved_room_and_fixed_logs_stay() {
        let mut config = qs_store::Config::new(1 << 20, 256);
        config.huge_pages = qs_store::HugePages::Off;
        config.log_room_bytes = 4 << 20;
        let first = Partition::new(config);
        let memory = Memory::of(&first, 4, 1 << 20, false);
        assert_eq!(memory.maxbytes(), 4 << 20);
        assert_eq!(memory.per_partition(8), Ok(2 << 20));
        assert_eq!(memory.per_partition(64), Err(Unadjustable), "past the room");
        memory.set(2 << 20);
        assert_eq!((memory.log_bytes(), memory.maxbytes()), (2 << 20, 8 << 20));
        let fixed = Memory::of(&first, 4, 1 << 20, true);
        assert_eq!(fixed.per_partition(8), Err(Unadjustable), "a memory file's logs keep their size");
    }
}
