//! Store mode (`-o store_mode`): items are never evicted. The log's memory is an arena whose
//! blocks are allocated and freed ([`crate::arena`]), a full bucket chains a spare one, and a
//! write that finds no room is refused (`SERVER_ERROR out of memory`), leaving the old version.
//! The mode is its state, [`StoreState`] (`Partition::store`, `None` in cache mode): the few
//! places cache and store mode differ match on it (enum dispatch, nothing dynamic on the
//! request path), and everything only store mode does is here.

use super::*;

/// What store mode keeps besides the arena memory and the index.
pub(super) struct StoreState {
    pub(super) arena: Arena,
    /// Spare buckets not in any chain.
    pub(super) spare_free: Vec<usize>,
}

impl Partition {
    /// Store mode's [`Partition::put`]: in place when the new item fits the old one's block;
    /// otherwise a new block is allocated first and the old one freed after, so a refused
    /// write leaves the old version. Items always carry the flags/expiry word and the precise
    /// expiry word, so touch never needs to move them. Out of arena space or spare buckets: [`Outcome::OutOfMemory`].
    pub(super) fn put_store(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        value: &[u8],
        mut new_item: NewItem,
        existing: Option<Found>,
    ) -> Outcome {
        let size = item::item_bytes(key.len(), value.len(), self.ext_bytes(new_item.ext()));
        if value.len() > VALUE_BYTES_MAX || size > self.item_bytes_max {
            self.stats.too_large += 1;
            return Outcome::TooLarge;
        }
        let store = self.store.as_mut().expect("store mode");
        if let Some(found) = existing {
            if size <= store.arena.item_capacity(self.shared.log.words(), found.offset) {
                new_item.cas_seq = self.take_cas_seq();
                self.stats.total_items += 1;
                let version = self.begin_write(found.bucket);
                self.write_item(found.offset, key, value, new_item, 0, true);
                self.end_write(found.bucket, version);
                return Outcome::Stored { cas: self.shared.cas_unique(new_item.cas_seq) };
            }
        }
        let Some(offset) = store.arena.alloc(self.shared.log.words(), size) else {
            self.stats.refused += 1;
            return Outcome::OutOfMemory;
        };
        let block = store.arena.block_size(self.shared.log.words(), offset);
        new_item.cas_seq = self.take_cas_seq();
        let bucket = self.shape.bucket(hash);
        let version = self.begin_write(bucket);
        self.write_item(offset, key, value, new_item, 0, false);
        let slot = Slot::new(hash.tag(), offset);
        match existing {
            Some(found) => {
                self.set_slot(found.slot_bucket, found.slot, slot);
                self.retire(found.offset, &found.header);
            }
            None => {
                if !self.link_chained(bucket, slot) {
                    let store = self.store.as_mut().expect("store mode");
                    store.arena.free(self.shared.log.words(), offset);
                    self.end_write(bucket, version);
                    self.stats.refused += 1;
                    return Outcome::OutOfMemory;
                }
            }
        }
        self.end_write(bucket, version);
        self.stats.items += 1;
        self.stats.bytes += block;
        self.stats.total_items += 1;
        self.reclaim_step();
        Outcome::Stored { cas: self.shared.cas_unique(new_item.cas_seq) }
    }

    /// Store mode: puts a slot in the first empty slot of `bucket`'s chain, chaining a spare
    /// bucket when the chain is full. `false` when no spare bucket is left.
    pub(super) fn link_chained(&mut self, bucket: usize, slot: Slot) -> bool {
        let index = &self.shared.index;
        index.mark(bucket);
        let mut at = bucket;
        loop {
            let words = index.bucket(at);
            for word in &words[1..] {
                if word.load(Relaxed) == 0 {
                    word.store(slot.0, Relaxed);
                    return true;
                }
            }
            let last = Slot(words[BUCKET_WORDS - 1].load(Relaxed));
            if last.is_link() {
                at = last.offset() as usize;
                continue;
            }
            let Some(spare) = self.store.as_mut().and_then(|store| store.spare_free.pop()) else {
                return false;
            };
            // The last slot's item moves to the spare bucket and the link takes its place.
            let spare_words = index.bucket(spare);
            spare_words[1].store(last.0, Relaxed);
            spare_words[2].store(slot.0, Relaxed);
            words[BUCKET_WORDS - 1].store(Slot::link(spare).0, Relaxed);
            return true;
        }
    }

    /// Store mode's housekeeping step, one bucket chain per write: expired and flushed items
    /// are freed so their space is reused without anyone reading them.
    pub(super) fn reclaim_step(&mut self) {
        let bucket = self.scan_cursor;
        self.scan_cursor = if self.scan_cursor + 1 < self.shape.buckets() { self.scan_cursor + 1 } else { 0 };
        self.reclaim_bucket(bucket);
    }

    pub(super) fn reclaim_bucket(&mut self, bucket: usize) {
        let now = self.clock;
        loop {
            let Some(found) = self.first_gone(bucket, now) else { return };
            let version = self.begin_write(bucket);
            self.unlink(&found);
            self.retire(found.offset, &found.header);
            self.count_reclaimed(&found.header);
            self.end_write(bucket, version);
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

    /// Whether this partition is in store mode.
    pub fn is_store_mode(&self) -> bool {
        self.store.is_some()
    }

    /// Store mode's memory statistics (walks the free lists: for `stats`, not the data path).
    pub fn arena_stats(&self) -> Option<ArenaStats> {
        self.store.as_ref().map(|store| store.arena.stats(self.shared.log.words()))
    }

    /// Store mode's free space by size, readable from any thread (`None` in cache mode).
    pub fn free_groups(&self) -> Option<std::sync::Arc<crate::arena::FreeGroups>> {
        self.store.as_ref().map(|store| store.arena.free_groups())
    }

    /// Store mode's spare buckets: (in use, in all).
    pub fn spare_buckets(&self) -> (usize, usize) {
        match &self.store {
            Some(store) => {
                let all = self.shared.index.spare_count();
                (all - store.spare_free.len(), all)
            }
            None => (0, 0),
        }
    }

    /// Store mode: the arena's own invariants, every allocated block referenced by exactly one
    /// slot, every slot pointing at an allocated block, chains and spare counts consistent, and
    /// the item counts right.
    pub(super) fn check_store_invariants(&self, store: &StoreState) {
        let words = self.shared.log.words();
        let walk = store.arena.check(words);
        let allocated: std::collections::HashSet<u64> = walk.allocated.iter().copied().collect();
        let mut referenced = std::collections::HashSet::new();
        let mut chained = 0;
        for bucket in 0..self.shape.buckets() {
            assert_eq!(self.shared.index.bucket(bucket)[0].load(Relaxed) & 1, 0, "bucket left mid-change");
            let mut at = bucket;
            loop {
                let slots = &self.shared.index.bucket(at)[1..];
                for word in slots {
                    let slot = Slot(word.load(Relaxed));
                    if slot.is_empty() || slot.is_link() {
                        continue;
                    }
                    assert!(allocated.contains(&slot.offset()), "slot points at no allocated block");
                    assert!(referenced.insert(slot.offset()), "two slots point at one item");
                    let header = self.shared.log.header(slot.offset());
                    assert!(!header.word0.has(BIT_DEAD), "a slot points to a dead item");
                    assert_eq!(slot.tag(), KeyHash::of(&self.key_of(slot.offset(), &header)).tag(), "tag");
                }
                let last = Slot(slots[SLOTS_PER_BUCKET - 1].load(Relaxed));
                if !last.is_link() {
                    break;
                }
                chained += 1;
                at = last.offset() as usize;
                assert!(at >= self.shape.buckets(), "a link to a main bucket");
            }
        }
        assert_eq!(referenced.len(), allocated.len(), "allocated blocks no slot refers to (leaked)");
        assert_eq!(chained + store.spare_free.len(), self.shared.index.spare_count(), "spare buckets lost");
        assert_eq!(self.stats.items, allocated.len() as u64, "item count drifted");
        assert_eq!(self.stats.bytes, walk.allocated_bytes, "byte count drifted");
    }
}
