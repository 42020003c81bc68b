//! What keeps a partition's log and index in shape: CAS sequences, the buckets' version
//! brackets, linking and unlinking slots, growing the index, appending items to the log and
//! moving its head (eviction, S3-FIFO's small ring, the expired-item scan).

use super::*;

impl Partition {
    #[inline(always)]
    pub(super) fn take_cas_seq(&mut self) -> u64 {
        let seq = self.next_cas_seq;
        self.next_cas_seq += 1;
        if self.next_cas_seq >= self.cas_mark {
            self.advance_cas_mark();
        }
        seq
    }

    #[inline(always)]
    pub(super) fn begin_write(&self, bucket: usize) -> u64 {
        if !self.crew {
            return 0;
        }
        let version = &self.shared.index.bucket(bucket)[0];
        let before = version.load(Relaxed);
        version.store(before + 1, Relaxed);
        fence(Release);
        before
    }

    #[inline(always)]
    pub(super) fn end_write(&self, bucket: usize, before: u64) {
        if self.crew {
            self.shared.index.bucket(bucket)[0].store(before + 2, Release);
        }
    }

    #[inline(always)]
    pub(super) fn set_slot(&self, bucket: usize, slot: usize, value: Slot) {
        self.shared.index.bucket(bucket)[1 + slot].store(value.0, Relaxed);
    }

    pub(super) fn unlink(&mut self, found: &Found) {
        self.set_slot(found.slot_bucket, found.slot, Slot::EMPTY);
        if found.slot_bucket != found.bucket {
            self.release_spare_if_empty(found.bucket, found.slot_bucket);
        }
    }

    /// Store mode: takes an emptied spare bucket at the end of its chain out of the chain.
    pub(super) fn release_spare_if_empty(&mut self, bucket: usize, spare: usize) {
        let index = &self.shared.index;
        if index.bucket(spare)[1..].iter().any(|word| word.load(Relaxed) != 0) {
            return;
        }
        let mut previous = bucket;
        loop {
            let link = &index.bucket(previous)[BUCKET_WORDS - 1];
            let next = Slot(link.load(Relaxed));
            if !next.is_link() {
                debug_assert!(false, "spare bucket {spare} not in the chain of {bucket}");
                return;
            }
            if next.offset() as usize == spare {
                link.store(0, Relaxed);
                break;
            }
            previous = next.offset() as usize;
        }
        if let Some(store) = self.store.as_mut() {
            store.spare_free.push(spare);
        }
    }

    /// Marks an item superseded and takes it out of the counts.
    #[inline(always)]
    pub(super) fn retire(&mut self, offset: u64, header: &Header) {
        self.shared.log.set_word0(offset, header.word0.with_bit(BIT_DEAD));
        self.stats.items -= 1;
        match self.store.as_mut() {
            None => self.stats.bytes -= header.capacity() as u64,
            Some(store) => {
                let words = self.shared.log.words();
                self.stats.bytes -= store.arena.block_size(words, offset);
                store.arena.free(words, offset);
            }
        }
    }

    pub(super) fn count_reclaimed(&mut self, header: &Header) {
        self.stats.reclaimed += 1;
        if !header.word0.has(BIT_FETCHED) {
            self.stats.expired_unfetched += 1;
        }
    }

    /// Puts a new slot in a bucket: an empty or dangling slot if there is one, else the slot of
    /// the oldest item, which is dropped (an index eviction).
    pub(super) fn link(&mut self, bucket: usize, slot: Slot) {
        let words = self.shared.index.bucket(bucket);
        let mut oldest = (0, 0u64);
        for (slot_index, word) in words[1..].iter().enumerate() {
            let current = Slot(word.load(Relaxed));
            if current.is_empty() || self.slot_is_dead(current) {
                word.store(slot.0, Relaxed);
                return;
            }
            // A flash item is older than any in DRAM: the first to give up its slot. A small
            // ring's item is as old as its place in that ring, scaled to the main ring's lap.
            let age = if Self::is_flash_slot(current) {
                u64::MAX
            } else if self.geometry.in_small(current.offset()) {
                let age = self.small_tail.wrapping_sub(current.offset()) & self.geometry.offset_mask;
                age * (self.geometry.lap_bytes / self.geometry.small_lap)
            } else {
                self.tail.wrapping_sub(current.offset()) & self.geometry.offset_mask
            };
            if age > oldest.1 {
                oldest = (slot_index, age);
            }
        }
        let victim = Slot(words[1 + oldest.0].load(Relaxed));
        if Self::is_flash_slot(victim) {
            self.stats.index_evictions += 1;
            self.set_slot(bucket, oldest.0, slot);
            return;
        }
        let header = self.shared.log.header(victim.offset());
        self.note_eviction(victim.offset(), &header);
        self.retire(victim.offset(), &header);
        self.stats.index_evictions += 1;
        if !header.word0.has(BIT_FETCHED) {
            self.stats.evicted_unfetched += 1;
        }
        self.set_slot(bucket, oldest.0, slot);
    }

    /// Sets the item count past which the index grows: [`INDEX_GROW_LOAD`] of its slots, as
    /// long as it has room to (never with a flash tier, whose queued slot moves name buckets).
    ///
    /// [`INDEX_GROW_LOAD`]: crate::config::INDEX_GROW_LOAD
    pub(crate) fn plan_growth(&mut self) {
        let slots = (self.shape.buckets() * SLOTS_PER_BUCKET) as f64;
        self.grow_at_items = if self.flash.is_none() && self.shared.index.can_split(self.shape) {
            (slots * crate::config::INDEX_GROW_LOAD) as u64
        } else {
            u64::MAX
        };
    }

    /// Splits buckets, at most [`SPLITS_PER_WRITE`], while the index holds more items than it
    /// is sized for; run before a write looks anything up, so no command holds a bucket
    /// number a split changes. Growing ahead of the load keeps the lossy index from dropping
    /// items the log could hold (memcached grows its hash table at 1.5 items a bucket).
    pub(super) fn grow_index(&mut self) {
        for _ in 0..SPLITS_PER_WRITE {
            if self.stats.items <= self.grow_at_items {
                return;
            }
            self.split_bucket();
            self.plan_growth();
        }
    }

    /// One linear-hashing split: the next bucket's slots whose tag has this level's bit move
    /// to its new sibling (dangling ones are dropped), and the new shape is published while
    /// both buckets are marked as changing, so a reader that used the old shape looks again.
    pub(super) fn split_bucket(&mut self) {
        let (from, to, tag_bit, next) = self.shape.next_split();
        let from_version = self.begin_write(from);
        let to_version = self.begin_write(to);
        let index = &self.shared.index;
        let (source, target) = (index.bucket(from), index.bucket(to));
        let mut moved = 1;
        for word in &source[1..] {
            let slot = Slot(word.load(Relaxed));
            if slot.is_empty() {
                continue;
            }
            if self.slot_is_dead(slot) {
                word.store(0, Relaxed);
            } else if slot.tag() & tag_bit != 0 {
                target[moved].store(slot.0, Relaxed);
                moved += 1;
                word.store(0, Relaxed);
            }
        }
        self.shape = next;
        index.publish(next);
        self.end_write(to, to_version);
        self.end_write(from, from_version);
    }

    /// Appends a new item at the tail of `ring`, evicting at its head as needed; returns its
    /// offset.
    pub(super) fn append(&mut self, ring: Ring, key: &[u8], value: &[u8], new_item: NewItem) -> u64 {
        let ext = new_item.flags != 0 || new_item.expiry != Expiry::NEVER;
        let size = item::item_bytes(key.len(), value.len(), ext);
        let offset = match ring {
            Ring::Main => self.reserve(size),
            Ring::Small => self.reserve_small(size),
        };
        self.write_item(offset, key, value, new_item, 0, false);
        // The item is whole: the memory file's window may take it in.
        self.persist_window();
        self.stats.items += 1;
        self.stats.bytes += size as u64;
        offset
    }

    /// Writes an item at `offset`. `key_in_place` says the same key already sits where this
    /// layout puts it (an in-place update that keeps the extension word or its absence), so it is
    /// not written again.
    #[inline(always)]
    pub(super) fn write_item(
        &self,
        offset: u64,
        key: &[u8],
        value: &[u8],
        new_item: NewItem,
        slack_words: usize,
        key_in_place: bool,
    ) {
        let ext = self.store.is_some() || new_item.flags != 0 || new_item.expiry != Expiry::NEVER;
        let bits = if ext { new_item.bits | BIT_EXT } else { new_item.bits & !BIT_EXT };
        let key_start = item::HEADER_BYTES + if ext { item::EXT_BYTES } else { 0 };
        // The item's words, bounds-checked once (an item never straddles the end of memory).
        let item = self.shared.log.item_words(offset, (key_start + key.len() + value.len()).div_ceil(8));
        item[0].store(Word0::new(new_item.cas_seq, key.len(), bits).0, Relaxed);
        item[1].store(Word1::new(value.len(), slack_words, new_item.last_access).0, Relaxed);
        if ext {
            item[2].store(Ext::new(new_item.flags, new_item.expiry).0, Relaxed);
        }
        if !key_in_place {
            crate::words::store_bytes(item, key_start, key);
        }
        crate::words::store_bytes(item, key_start + key.len(), value);
    }

    /// Makes room for `size` bytes at the tail (padding to the end of the lap if the item would
    /// straddle the end of memory) and returns the logical offset of the room.
    pub(super) fn reserve(&mut self, size: usize) -> u64 {
        let padding = self.padding_before(size);
        let need = padding + size as u64;
        // The live window spans at most one lap, so no two live bytes share a physical byte.
        if self.room() < need {
            while self.room() < need {
                self.evict_head();
            }
            self.publish_head();
        }
        if padding > 0 {
            if (self.geometry.physical(self.tail) as u64) < self.geometry.log_bytes {
                self.shared.log.write_padding(self.tail);
            }
            self.tail += padding;
        }
        let offset = self.tail & self.geometry.offset_mask;
        self.tail += size as u64;
        self.main_free = self.main_free.saturating_sub(need);
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
        if !self.eviction.counts_reads() || self.store.is_some() {
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
        Heads { main: self.head, small: self.small_head }
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
        self.shared.small_head.store(self.small_head, Relaxed);
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
            || self.shared.is_gone(&header, self.clock_secs)
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

    /// The hash of the key of the item at `offset`, read into the scratch buffer (no
    /// allocation per item a head passes).
    pub(super) fn key_hash_at(&mut self, offset: u64, header: &Header) -> KeyHash {
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        self.shared.log.read_bytes(offset, header.key_start(), header.word0.key_len(), &mut key);
        let hash = KeyHash::of(&key);
        self.scratch = key;
        hash
    }

    /// The item at `offset` (as a slot holds it) as the index finds it, if a slot of its key's
    /// bucket still points there.
    pub(super) fn found_at(&mut self, offset: u64, header: Header) -> Option<Found> {
        let hash = self.key_hash_at(offset, &header);
        let bucket = self.shape.bucket(hash);
        let slot = Slot::new(hash.tag(), offset);
        let index =
            self.shared.index.bucket(bucket)[1..].iter().position(|word| word.load(Relaxed) == slot.0)?;
        Some(Found { bucket, slot_bucket: bucket, slot: index, offset, header })
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
        if self.shared.is_gone(header, self.clock_secs) {
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

    pub(super) fn scan_if_due(&mut self) {
        while self.scan_credit_bytes >= self.scan_stride_bytes {
            self.scan_credit_bytes -= self.scan_stride_bytes;
            self.scan_one_bucket();
        }
    }

    pub(super) fn scan_one_bucket(&mut self) {
        let bucket = self.scan_cursor;
        self.scan_cursor = if self.scan_cursor + 1 < self.shape.buckets() { self.scan_cursor + 1 } else { 0 };
        let version = self.begin_write(bucket);
        for word in &self.shared.index.bucket(bucket)[1..BUCKET_WORDS] {
            let slot = Slot(word.load(Relaxed));
            if !slot.is_empty() && self.slot_is_dead(slot) {
                word.store(0, Relaxed);
            }
        }
        self.end_write(bucket, version);
    }
}
