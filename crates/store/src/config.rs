//! How a partition is built.

use crate::index::{BUCKET_BYTES, OFFSET_BITS_MAX, SLOTS_PER_BUCKET};
use crate::item::HEADER_BYTES;
use crate::region::HugePages;

/// Which items are evicted at the log's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Eviction {
    /// First in, first out: the log's natural order.
    Fifo,
    /// Every read moves the item to the tail.
    Lru,
    /// Reads move an item to the tail only when it sits in the older half of the log (MICA §4.3.1).
    ApproxLru,
    /// First in, first out with a second chance: reads count up to three in the item's header,
    /// and an item that reaches the head with a count is copied to the tail with one less
    /// instead of evicted (CLOCK with a 2-bit counter: S3-FIFO's main queue, Segcache's keep
    /// of frequently read items, one item at a time). A read never moves anything. The bytes
    /// of expired items the head reclaims pay for keeping unread items too, so memory that
    /// expired items held goes back to live ones, and an unread item smaller than the mean is
    /// kept by chance, the likelier the smaller (Segcache weighs its read counts by size the
    /// same way: the same memory then answers for more keys).
    Clock,
    /// S3-FIFO (Yang et al., SOSP'23) in the log: new keys enter a small ring of a tenth of the
    /// memory; an item read there is copied to the main ring (run by [`Eviction::Clock`]) as
    /// the small ring's head reaches it, and one never read leaves, its key remembered in a
    /// ghost table so that it enters the main ring directly when it is written again. A key
    /// read once costs a tenth of the memory's turnover, not a whole lap. Partitions under 1
    /// MiB, store mode and memory files (`-e`) run [`Eviction::Clock`] instead. The default:
    /// docs/SIMULATION.md has the curves that chose it.
    #[default]
    S3Fifo,
}

impl Eviction {
    /// Whether reads are counted in the item's header (clock's count, S3-FIFO's too).
    #[inline(always)]
    pub fn counts_reads(self) -> bool {
        matches!(self, Eviction::Clock | Eviction::S3Fifo)
    }

    /// The policy a log without a small ring runs: S3-FIFO's main ring alone is clock.
    pub fn without_small_ring(self) -> Eviction {
        if self == Eviction::S3Fifo {
            Eviction::Clock
        } else {
            self
        }
    }
}

/// Who may touch a partition (MICA §4.1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Access {
    /// Exclusive read, exclusive write: only the owner; no version words are written.
    Erew,
    /// Concurrent read, exclusive write: readers on other threads read optimistically through a
    /// [`crate::Reader`]; the owner brackets every change with the bucket's version.
    #[default]
    Crew,
}

/// The default index load at which the index is sized: a full log of items of the expected
/// size fills this fraction of the slots.
pub const INDEX_LOAD_DEFAULT: f64 = 0.625;
/// The index load past which a growing index splits buckets. Below the load it is sized for:
/// linear hashing leaves the buckets not yet split at a level with up to twice the others'
/// load, and a full bucket drops an item the log still holds (at most 1.4% of the items at
/// this load, against 4.2% at [`INDEX_LOAD_DEFAULT`], for Poisson-spread keys).
pub const INDEX_GROW_LOAD: f64 = 0.5;
/// Store mode's spare buckets as a fraction of the main buckets (MICA §4.3.3: 10% held its
/// whole data set).
pub const SPARE_BUCKETS_RATIO_DEFAULT: f64 = 0.1;
/// memcached's default item size limit (-I): 1 MiB.
pub const ITEM_BYTES_MAX_DEFAULT: usize = 1 << 20;

/// A partition's shape and policies.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Bytes of log (a multiple of 8; any size: see [`crate::log`]).
    pub log_bytes: usize,
    /// Address space to reserve for the log to grow into at run time ([`crate::Partition::set_log_limit`],
    /// memcached's `cache_memlimit`); at most `log_bytes` is used until then. Values below
    /// `log_bytes` mean no room to grow.
    pub log_room_bytes: usize,
    /// Index buckets (a power of two).
    pub bucket_count: usize,
    /// Largest item (header, key and value) a store accepts.
    pub item_bytes_max: usize,
    /// Eviction policy.
    pub eviction: Eviction,
    /// Access mode.
    pub access: Access,
    /// Which pages to ask for.
    pub huge_pages: HugePages,
    /// Width of logical offsets (48; tests narrow it to exercise the wrap).
    pub offset_bits: u32,
    /// This partition's number, folded into CAS uniques so they are unique server-wide.
    pub partition_index: u16,
    /// log2 of the partition count (the keyhash's high bits that choose the partition).
    pub partition_bits: u32,
    /// Store mode (MICA §4.3.3): `log_bytes` is an arena managed by segregated fits (any
    /// multiple of 8 bytes), the index is lossless by bulk chaining, and nothing is evicted.
    pub store_mode: bool,
    /// Store mode's spare buckets for bulk chaining.
    pub spare_buckets: usize,
    /// Doublings the cache-mode index may grow by when items the log holds no longer fit it
    /// (up to [`crate::index::LEVELS_MAX`]; 0 keeps `bucket_count`, as memcached's
    /// `-o no_hashexpand`).
    pub index_levels: u32,
}

impl Config {
    /// A partition with `log_bytes` of log and `bucket_count` buckets, default policies.
    pub fn new(log_bytes: usize, bucket_count: usize) -> Config {
        Config {
            log_bytes,
            log_room_bytes: 0,
            bucket_count,
            item_bytes_max: ITEM_BYTES_MAX_DEFAULT,
            eviction: Eviction::default(),
            access: Access::default(),
            huge_pages: HugePages::Auto,
            offset_bits: OFFSET_BITS_MAX,
            partition_index: 0,
            partition_bits: 0,
            store_mode: false,
            spare_buckets: 0,
            index_levels: crate::index::LEVELS_MAX,
        }
    }

    /// A store-mode partition: an arena of `arena_bytes` (rounded down to 8 bytes), `bucket_count`
    /// main buckets and spare buckets [`SPARE_BUCKETS_RATIO_DEFAULT`] of their number.
    pub fn store(arena_bytes: usize, bucket_count: usize) -> Config {
        let mut config = Config::new(arena_bytes & !7, bucket_count);
        config.store_mode = true;
        config.index_levels = 0;
        config.spare_buckets = ((bucket_count as f64 * SPARE_BUCKETS_RATIO_DEFAULT).ceil() as usize).max(1);
        config
    }

    /// Splits `budget_bytes` (one partition's share of -m) between log and index so that a log
    /// full of `expected_item_bytes` items (header included) loads the index to
    /// [`INDEX_LOAD_DEFAULT`] or less. The log is what the index leaves of the budget.
    pub fn for_budget(budget_bytes: usize, expected_item_bytes: usize) -> Config {
        let item_bytes = expected_item_bytes.max(HEADER_BYTES + 8) as f64;
        // For each power-of-two bucket count, the largest log it indexes at the planned load
        // that still fits beside it; the best of them.
        let (mut best_log, mut best_buckets) = (4096, 1);
        for bits in 0..usize::BITS - 1 {
            let buckets = 1usize << bits;
            let Some(left) = budget_bytes.checked_sub(buckets * BUCKET_BYTES) else { break };
            let indexed =
                (buckets as f64 * SLOTS_PER_BUCKET as f64 * INDEX_LOAD_DEFAULT * item_bytes) as usize;
            let log_bytes = left.min(indexed) & !7;
            if log_bytes > best_log {
                (best_log, best_buckets) = (log_bytes, Self::buckets_for(log_bytes, item_bytes));
            }
        }
        Config::new(best_log, best_buckets)
    }

    fn buckets_for(log_bytes: usize, item_bytes: f64) -> usize {
        let items = log_bytes as f64 / item_bytes;
        let buckets = (items / (SLOTS_PER_BUCKET as f64 * INDEX_LOAD_DEFAULT)).ceil() as usize;
        buckets.max(1).next_power_of_two()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_split_stays_within_budget_and_loads_the_index_as_planned() {
        for budget_mib in [1usize, 16, 64, 100, 1000] {
            for expected_item_bytes in [32usize, 96, 1200] {
                let budget = budget_mib << 20;
                let config = Config::for_budget(budget, expected_item_bytes);
                let index_bytes = config.bucket_count * BUCKET_BYTES;
                assert!(
                    config.log_bytes + index_bytes <= budget,
                    "{budget_mib} MiB, {expected_item_bytes} B"
                );
                assert!(config.log_bytes % 8 == 0 && config.bucket_count.is_power_of_two());
                assert!(
                    config.log_bytes * 2 >= budget,
                    "the log gets most of the budget: {budget_mib} MiB, {expected_item_bytes} B: {}",
                    config.log_bytes
                );
                let items = config.log_bytes / expected_item_bytes;
                let load = items as f64 / (config.bucket_count * SLOTS_PER_BUCKET) as f64;
                assert!(load <= INDEX_LOAD_DEFAULT + 1e-9, "load {load}");
            }
        }
    }
}
