//! Per-partition counters, kept by the owner with plain increments.

/// What a partition counts. Names follow memcached's `stats` where one exists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionStats {
    /// Get requests (get, gets, gat, gats), one per key.
    pub gets: u64,
    /// Gets that found the key.
    pub get_hits: u64,
    /// Gets that did not.
    pub get_misses: u64,
    /// Gets that found the key expired.
    pub get_expired: u64,
    /// Gets that found the key flushed.
    pub get_flushed: u64,
    /// Store commands received.
    pub sets: u64,
    /// Items linked by a store (memcached `total_items`).
    pub total_items: u64,
    /// Deletes that found the key.
    pub delete_hits: u64,
    /// Deletes that did not.
    pub delete_misses: u64,
    /// incr that found the key.
    pub incr_hits: u64,
    /// incr that did not.
    pub incr_misses: u64,
    /// decr that found the key.
    pub decr_hits: u64,
    /// decr that did not.
    pub decr_misses: u64,
    /// cas that stored.
    pub cas_hits: u64,
    /// cas on an absent key.
    pub cas_misses: u64,
    /// cas with a stale CAS unique.
    pub cas_badval: u64,
    /// touch/gat that found the key.
    pub touch_hits: u64,
    /// touch/gat that did not.
    pub touch_misses: u64,
    /// Live items pushed out at the log's head.
    pub log_evictions: u64,
    /// Live items dropped because their index bucket was full (the lossy index's losses).
    pub index_evictions: u64,
    /// Evicted (either way) without ever being fetched.
    pub evicted_unfetched: u64,
    /// Expired items reclaimed (found on access or passed by the head).
    pub reclaimed: u64,
    /// Expired items reclaimed without ever being fetched.
    pub expired_unfetched: u64,
    /// Stores refused as too large.
    pub too_large: u64,
    /// Items stored now (memcached `curr_items`).
    pub items: u64,
    /// Log bytes those items occupy (memcached `bytes`).
    pub bytes: u64,
    /// Items moved to the tail: clock's keeps at the head, LRU's and approximate LRU's re-appends.
    pub reappends: u64,
    /// S3-FIFO: items read in the small ring copied to the main ring at its head (memcached's
    /// `moves_to_warm`).
    pub promotions: u64,
    /// S3-FIFO: new keys the ghost remembered, written to the main ring directly.
    pub ghost_hits: u64,
    /// Store mode: writes refused for lack of arena space or spare buckets.
    pub refused: u64,
    /// Store mode: arena bytes (filled in by [`crate::Partition::stats_snapshot`]).
    pub arena_bytes: u64,
    /// Store mode: arena bytes in free blocks.
    pub arena_free_bytes: u64,
    /// Store mode: the largest free block (a total takes the largest of its parts).
    pub arena_largest_free: u64,
    /// Store mode: spare buckets chained into the index.
    pub spare_buckets_used: u64,
    /// Store mode: spare buckets in all.
    pub spare_buckets: u64,
    /// Log memory in use: up to the furthest byte written (filled in by
    /// [`crate::Partition::stats_snapshot`]; memcached's `total_malloced`).
    pub log_touched_bytes: u64,
    /// Main index buckets in use (filled in by [`crate::Partition::stats_snapshot`]; the index
    /// grows as items outnumber its slots).
    pub index_buckets: u64,
    /// Last access (unix seconds) of the oldest record in the log, 0 when empty (filled in by
    /// [`crate::Partition::stats_snapshot`]; a total takes the oldest of its parts).
    pub oldest_access_secs: u64,
}

impl PartitionStats {
    /// What the counters gained since `base` (an earlier snapshot: memcached's `stats reset`);
    /// the figures that describe the present (items, bytes, arena and spare buckets) stay.
    pub fn since(&self, base: &PartitionStats) -> PartitionStats {
        // Every field named, so a new counter cannot be forgotten here.
        let PartitionStats {
            gets,
            get_hits,
            get_misses,
            get_expired,
            get_flushed,
            sets,
            total_items,
            delete_hits,
            delete_misses,
            incr_hits,
            incr_misses,
            decr_hits,
            decr_misses,
            cas_hits,
            cas_misses,
            cas_badval,
            touch_hits,
            touch_misses,
            log_evictions,
            index_evictions,
            evicted_unfetched,
            reclaimed,
            expired_unfetched,
            too_large,
            reappends,
            promotions,
            ghost_hits,
            refused,
            items: _,
            bytes: _,
            arena_bytes: _,
            arena_free_bytes: _,
            arena_largest_free: _,
            spare_buckets_used: _,
            spare_buckets: _,
            log_touched_bytes: _,
            index_buckets: _,
            oldest_access_secs: _,
        } = *base;
        let mut since = *self;
        for (value, base) in [
            (&mut since.gets, gets),
            (&mut since.get_hits, get_hits),
            (&mut since.get_misses, get_misses),
            (&mut since.get_expired, get_expired),
            (&mut since.get_flushed, get_flushed),
            (&mut since.sets, sets),
            (&mut since.total_items, total_items),
            (&mut since.delete_hits, delete_hits),
            (&mut since.delete_misses, delete_misses),
            (&mut since.incr_hits, incr_hits),
            (&mut since.incr_misses, incr_misses),
            (&mut since.decr_hits, decr_hits),
            (&mut since.decr_misses, decr_misses),
            (&mut since.cas_hits, cas_hits),
            (&mut since.cas_misses, cas_misses),
            (&mut since.cas_badval, cas_badval),
            (&mut since.touch_hits, touch_hits),
            (&mut since.touch_misses, touch_misses),
            (&mut since.log_evictions, log_evictions),
            (&mut since.index_evictions, index_evictions),
            (&mut since.evicted_unfetched, evicted_unfetched),
            (&mut since.reclaimed, reclaimed),
            (&mut since.expired_unfetched, expired_unfetched),
            (&mut since.too_large, too_large),
            (&mut since.reappends, reappends),
            (&mut since.promotions, promotions),
            (&mut since.ghost_hits, ghost_hits),
            (&mut since.refused, refused),
        ] {
            *value = value.saturating_sub(base);
        }
        since
    }

    /// Adds `other` into `self` (for a server-wide total).
    pub fn add(&mut self, other: &PartitionStats) {
        let PartitionStats {
            gets,
            get_hits,
            get_misses,
            get_expired,
            get_flushed,
            sets,
            total_items,
            delete_hits,
            delete_misses,
            incr_hits,
            incr_misses,
            decr_hits,
            decr_misses,
            cas_hits,
            cas_misses,
            cas_badval,
            touch_hits,
            touch_misses,
            log_evictions,
            index_evictions,
            evicted_unfetched,
            reclaimed,
            expired_unfetched,
            too_large,
            items,
            bytes,
            reappends,
            promotions,
            ghost_hits,
            refused,
            arena_bytes,
            arena_free_bytes,
            arena_largest_free,
            spare_buckets_used,
            spare_buckets,
            log_touched_bytes,
            index_buckets,
            oldest_access_secs,
        } = *other;
        self.gets += gets;
        self.get_hits += get_hits;
        self.get_misses += get_misses;
        self.get_expired += get_expired;
        self.get_flushed += get_flushed;
        self.sets += sets;
        self.total_items += total_items;
        self.delete_hits += delete_hits;
        self.delete_misses += delete_misses;
        self.incr_hits += incr_hits;
        self.incr_misses += incr_misses;
        self.decr_hits += decr_hits;
        self.decr_misses += decr_misses;
        self.cas_hits += cas_hits;
        self.cas_misses += cas_misses;
        self.cas_badval += cas_badval;
        self.touch_hits += touch_hits;
        self.touch_misses += touch_misses;
        self.log_evictions += log_evictions;
        self.index_evictions += index_evictions;
        self.evicted_unfetched += evicted_unfetched;
        self.reclaimed += reclaimed;
        self.expired_unfetched += expired_unfetched;
        self.too_large += too_large;
        self.items += items;
        self.bytes += bytes;
        self.reappends += reappends;
        self.promotions += promotions;
        self.ghost_hits += ghost_hits;
        self.refused += refused;
        self.arena_bytes += arena_bytes;
        self.arena_free_bytes += arena_free_bytes;
        self.arena_largest_free = self.arena_largest_free.max(arena_largest_free);
        self.spare_buckets_used += spare_buckets_used;
        self.spare_buckets += spare_buckets;
        self.log_touched_bytes += log_touched_bytes;
        self.index_buckets += index_buckets;
        self.oldest_access_secs = match (self.oldest_access_secs, oldest_access_secs) {
            (0, other) | (other, 0) => other,
            (mine, other) => mine.min(other),
        };
    }
}
