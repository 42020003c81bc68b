//! What keeps a partition's log and index in shape in either mode: CAS sequences, the buckets'
//! version brackets, linking and unlinking slots, growing the index, appending and writing
//! items, and the expired-item scan. Moving the head (eviction) is cache mode's
//! (cache_log.rs), the arena's allocation store mode's (store_mode.rs).

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
        if !value.is_empty() {
            self.shared.index.mark(bucket);
        }
        self.shared.index.bucket(bucket)[1 + slot].store(value.0, Relaxed);
    }

    pub(super) fn unlink(&mut self, found: &Found) {
        self.set_slot(found.slot_bucket, found.slot, Slot::EMPTY);
        if found.slot_bucket != found.bucket {
            self.release_spare_if_empty(found.bucket, found.slot_bucket);
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
        self.shared.index.mark(bucket);
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
                let age = self.small.tail.wrapping_sub(current.offset()) & self.geometry.offset_mask;
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
        index.mark(to);
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
        let size = item::item_bytes(key.len(), value.len(), new_item.ext().bytes());
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

    /// Bytes an item with extension `ext` takes for it in this partition's log (a store keeps
    /// the extension and precise words on every item, so a new expiry never moves one).
    #[inline(always)]
    pub(super) fn ext_bytes(&self, ext: Ext) -> usize {
        if self.store.is_some() {
            item::STORE_EXT_BYTES
        } else {
            ext.bytes()
        }
    }

    /// Writes an item at `offset`. `key_in_place` says the same key already sits where this
    /// layout puts it (an in-place update that keeps the extension word or its absence), so it is
    /// not written again.
    #[inline(always)]
    pub(super) fn write_item(
        &mut self,
        offset: u64,
        key: &[u8],
        value: &[u8],
        new_item: NewItem,
        slack_words: usize,
        key_in_place: bool,
    ) {
        let ext = new_item.ext();
        let ext_bytes = self.ext_bytes(ext);
        let bits = if ext_bytes > 0 { new_item.bits | BIT_EXT } else { new_item.bits & !BIT_EXT };
        let long_key = item::long_key_bytes(key.len());
        let key_start = item::HEADER_BYTES + ext_bytes + long_key;
        let words = (key_start + key.len() + value.len()).div_ceil(8);
        self.before_writing(offset, words * 8);
        // The item's words, bounds-checked once (an item never straddles the end of memory).
        let item = self.shared.log.item_words(offset, words);
        let precise_slot = ext_bytes == item::EXT_BYTES + item::PRECISE_BYTES;
        item[0].store(Word0::new(new_item.cas_seq, key.len(), bits).with_precise(precise_slot).0, Relaxed);
        item[1].store(Word1::new(value.len(), slack_words, new_item.last_access).0, Relaxed);
        if ext_bytes > 0 {
            item[2].store(ext.word(), Relaxed);
        }
        if precise_slot {
            item[3].store(ext.expiry().ms(), Relaxed);
        }
        if long_key > 0 {
            item[(item::HEADER_BYTES + ext_bytes) / 8].store(key.len() as u64, Relaxed);
        }
        if !key_in_place {
            crate::words::store_bytes(item, key_start, key);
        }
        crate::words::store_bytes(item, key_start + key.len(), value);
    }

    /// The hash of the key of the item at `offset`, read into the scratch buffer (no
    /// allocation per item a head passes).
    pub(super) fn key_hash_at(&mut self, offset: u64, header: &Header) -> KeyHash {
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        self.shared.log.read_bytes(offset, header.key_start(), header.key_len(), &mut key);
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
