//! Cache mode's circular log: the tail appends, and room ahead of it is made by moving the
//! head on, evicting (or, under clock and S3-FIFO, keeping by re-appending) the items it
//! passes. Store mode (store_mode.rs) never evicts; the small ring of S3-FIFO is
//! small_ring.rs. The mode is told apart by `Partition::store` (`None` here).

use super::*;

impl Partition {
    /// Makes room for `size` bytes at the tail (padding to the end of the lap if the item would
    /// straddle the end of memory) and returns the logical offset of the room.
    pub(super) fn reserve(&mut self, size: usize) -> u64 {
        let mut padding = self.padding_before(size);
        let mut need = padding + size as u64;
        // The live window spans at most one lap, so no two live bytes share a physical byte.
        if self.room() < need {
            // Never past the tail: what lies there is no record.
            while self.room() < need && self.head < self.tail {
                self.evict_head();
            }
            if self.room() < need {
                // Empty, and still short: the item is larger than the memory before the tail,
                // so padding to the lap's end and the item would span more than a lap. Both
                // ends move to the next lap's start instead (nothing lies between to pad).
                debug_assert_eq!(self.head, self.tail, "a log short of room with records in it");
                self.tail += padding;
                self.head = self.tail;
                (padding, need) = (0, size as u64);
            }
            self.publish_head();
        }
        if padding > 0 {
            if (self.geometry.physical(self.tail) as u64) < self.geometry.log_bytes {
                self.before_writing(self.tail, 8);
                self.shared.log.write_padding(self.tail);
            }
            self.tail += padding;
        }
        let offset = self.tail & self.geometry.offset_mask;
        self.tail += size as u64;
        self.small.main_free = self.small.main_free.saturating_sub(need);
        self.scan_credit_bytes += need;
        self.touched_bytes = self.touched_bytes.max(self.geometry.physical(offset) as u64 + size as u64);
        offset
    }

    /// The clock policy's keeps, made before a write looks anything up (so no item a command
    /// holds moves under it): room for `size` bytes at the tail, keeping items read since they
    /// were written as the head reaches them, at most [`KEEPS_PER_RESERVE`] of them. Whatever
    /// room is still short is made by the write's own plain evictions.
    /// With S3-FIFO, the small ring's promotions come first ([`Partition::promote_ahead`]), then
    /// room in the main ring, for a write that goes to either.
    pub(super) fn keep_ahead(&mut self, size: usize) {
        if self.stats.items > self.grow_at_items {
            self.grow_index();
        }
        // Nothing is written for a write the partition refuses for its size.
        if !self.eviction.counts_reads() || self.store.is_some() || size > self.item_bytes_max {
            return;
        }
        let (heads_before, tail_before) = (self.heads(), self.tail);
        let mut keeps = KEEPS_PER_RESERVE;
        if self.has_small_ring() {
            self.promote_ahead(size, &mut keeps, tail_before);
        }
        self.keep_main(size, &mut keeps, tail_before);
        if self.heads() != heads_before {
            self.publish_head();
        }
    }

    /// Clock at the main ring's head until it has room for `size` bytes, within `keeps` steps
    /// and [`KEEP_BYTES_PER_RESERVE`] bytes appended since the tail was at `tail_before`.
    pub(super) fn keep_main(&mut self, size: usize, keeps: &mut u32, tail_before: u64) {
        while *keeps > 0
            && self.head < self.tail
            && self.room() < self.padding_before(size) + size as u64
            && self.tail - tail_before <= KEEP_BYTES_PER_RESERVE
        {
            *keeps -= 1;
            if !self.keep_head() {
                self.evict_head();
            }
        }
    }

    /// Where the rings' heads are now.
    #[inline(always)]
    pub(super) fn heads(&self) -> Heads {
        Heads { main: self.head, small: self.small.head }
    }

    /// Bytes free between the tail and the head (the live window spans at most one lap).
    pub(super) fn room(&self) -> u64 {
        self.geometry.lap_bytes - (self.tail - self.head)
    }

    /// The padding an item of `size` bytes appended now needs first: to the end of the lap
    /// when it would straddle the end of memory, else none.
    pub(super) fn padding_before(&self, size: usize) -> u64 {
        if self.geometry.physical(self.tail) as u64 + size as u64 > self.limit_bytes {
            self.geometry.to_lap_end(self.tail)
        } else {
            0
        }
    }

    /// Publishes a head that moved: the memory file's window moves past the evicted records
    /// before they are overwritten, and CREW readers see the head before the memory is reused.
    pub(super) fn publish_head(&mut self) {
        self.persist_window();
        self.shared.head.store(self.head, Relaxed);
        self.shared.small_head.store(self.small.head, Relaxed);
        if self.crew {
            fence(Release);
        }
    }

    /// The clock policy at the head: an item read since it was written (or last kept) is copied
    /// to the tail with one read less instead of evicted, and so is one never read while the
    /// bytes of expired items the head reclaimed pay for it (`reclaim_credit`) or, by chance,
    /// when it is smaller than the mean ([`Partition::small_enough_to_keep`]). True if the
    /// head item was kept; false if the head is anything else (padding, a superseded or
    /// expired item, one never read and not kept, one the index no longer finds), which the
    /// caller evicts.
    pub(super) fn keep_head(&mut self) -> bool {
        let offset = self.head;
        if self.shared.log.is_padding(offset) {
            return false;
        }
        let header = self.shared.log.header(offset);
        let unread = header.word0.freq() == 0;
        let paid = unread && self.reclaim_credit >= header.capacity() as u64;
        if header.word0.has(BIT_DEAD)
            || (unread && !paid && !self.small_enough_to_keep(offset, header.capacity()))
            || self.shared.is_gone(&header, self.clock)
        {
            return false;
        }
        let Some(found) = self.found_at(offset & self.geometry.offset_mask, header) else {
            return false;
        };
        if paid {
            self.reclaim_credit -= header.capacity() as u64;
        }
        let bits = header.word0.with_freq(header.word0.freq().saturating_sub(1)).bits();
        self.move_to_tail(&found, bits, header.word1.last_access());
        self.stats.reappends += 1;
        true
    }

    /// Takes a record a head passes out of the counts; an expired or flushed one is counted
    /// reclaimed and its bytes become clock's credit. Whether it was a live item, which the
    /// caller then evicts ([`Partition::count_eviction`]) or demotes.
    pub(super) fn leave_head(&mut self, header: &Header) -> bool {
        if header.word0.has(BIT_DEAD) {
            return false;
        }
        self.stats.items -= 1;
        self.stats.bytes -= header.capacity() as u64;
        if self.shared.is_gone(header, self.clock) {
            self.count_reclaimed(header);
            self.reclaim_credit = (self.reclaim_credit + header.capacity() as u64).min(self.credit_max());
            return false;
        }
        true
    }

    /// Counts a live item evicted from the log (memcached's `evictions`, `evicted_unfetched`,
    /// `watch evictions`).
    pub(super) fn count_eviction(&mut self, offset: u64, header: &Header) {
        self.note_eviction(offset, header);
        self.stats.log_evictions += 1;
        if !header.word0.has(BIT_FETCHED) {
            self.stats.evicted_unfetched += 1;
        }
    }

    /// Clock's size weighting for an item never read, at the head: kept for another lap with
    /// probability `2 * (mean - size) / mean` of the partition's mean item, at most 15/16 (so
    /// an item under half the mean is kept for 16 laps on average, one over the mean never).
    /// A key costs its bytes and pays in hits alike whatever its size, so the same memory
    /// answers more when it holds smaller items (Segcache's merge weighs read counts by size
    /// the same way). The dice is the item's offset, new at each lap. Not with a flash tier,
    /// where what leaves the head is demoted, not lost.
    pub(super) fn small_enough_to_keep(&self, offset: u64, size: usize) -> bool {
        let (size, mean) = (size as u64, self.stats.bytes / self.stats.items.max(1));
        if size >= mean || self.flash.is_some() {
            return false;
        }
        let dice = offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54;
        dice * mean < (SMALL_KEEP_MAX * mean).min(2 * 1024 * (mean - size))
    }

    /// The most reclaim credit clock saves up: half the log (a write spends it a keep at a
    /// time, at most [`KEEPS_PER_RESERVE`] keeps).
    pub(super) fn credit_max(&self) -> u64 {
        if self.eviction.counts_reads() {
            self.limit_bytes / 2
        } else {
            0
        }
    }

    /// Moves the head past one record, counting a live item as evicted (or reclaimed if expired).
    pub(super) fn evict_head(&mut self) {
        let offset = self.head;
        if self.shared.log.is_padding(offset) {
            self.head += self.geometry.to_lap_end(offset);
            return;
        }
        let header = self.shared.log.header(offset);
        // A demoted item is on flash now, still answering: not an eviction.
        if self.leave_head(&header) && !(self.flash.is_some() && self.demote(offset, &header)) {
            self.count_eviction(offset, &header);
        }
        self.head += header.capacity() as u64;
    }
}
