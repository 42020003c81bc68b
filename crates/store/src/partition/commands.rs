//! memcached's operations on one item: finding it (the index's buckets, the hint, the chained
//! spares), get and its after-read upkeep, the stores (set, add, replace, cas, append, prepend)
//! and their placement, touch, delete, incr/decr and the meta get.

use super::*;
use crate::item::Now;

impl Partition {
    pub(super) fn key_of(&self, offset: u64, header: &Header) -> Vec<u8> {
        let mut key = Vec::new();
        self.shared.log.read_bytes(offset, header.key_start(), header.key_len(), &mut key);
        key
    }

    // ---- lookups ---------------------------------------------------------------------------

    #[inline(always)]
    pub(super) fn find(&self, hash: KeyHash, key: &[u8]) -> Option<Found> {
        let bucket = self.shape.bucket(hash);
        let tag = hash.tag();
        // A key has at most one live slot, so a hinted slot that holds it is the one a scan
        // would find.
        let hint = self.hint(hash).get();
        if hint & !HINT_SLOT_MASK == hash.0 & !HINT_SLOT_MASK {
            let slot_index = (hint & HINT_SLOT_MASK) as usize;
            if let Some(word) = self.shared.index.bucket(bucket)[1..].get(slot_index) {
                if let Some(found) =
                    self.probe(bucket, bucket, slot_index, Slot(word.load(Relaxed)), tag, key)
                {
                    return Some(found);
                }
            }
        }
        let mut slot_bucket = bucket;
        loop {
            let words = self.shared.index.bucket(slot_bucket);
            for (slot_index, word) in words[1..].iter().enumerate() {
                let slot = Slot(word.load(Relaxed));
                if let Some(found) = self.probe(bucket, slot_bucket, slot_index, slot, tag, key) {
                    return Some(found);
                }
            }
            // Only store mode chains buckets; a cache-mode slot is never a link.
            let last = Slot(words[BUCKET_WORDS - 1].load(Relaxed));
            if !last.is_link() {
                return None;
            }
            slot_bucket = last.offset() as usize;
        }
    }

    /// Whether `slot` (slot `slot_index` of `slot_bucket`, in `bucket`'s chain) holds `key`.
    #[inline(always)]
    pub(super) fn probe(
        &self,
        bucket: usize,
        slot_bucket: usize,
        slot_index: usize,
        slot: Slot,
        tag: u16,
        key: &[u8],
    ) -> Option<Found> {
        if slot.tag() != tag || !self.geometry.is_live(slot.offset(), self.heads()) {
            return None;
        }
        let offset = slot.offset();
        let header = self.shared.log.header_if_key(offset, key)?;
        Some(Found { bucket, slot_bucket, slot: slot_index, offset, header })
    }

    /// Finds a key that still answers; an expired or flushed one is removed on the way.
    #[inline(always)]
    pub(super) fn lookup(&mut self, hash: KeyHash, key: &[u8], now: Now) -> Lookup {
        let Some(found) = self.find(hash, key) else { return Lookup::Absent };
        if !self.shared.is_gone(&found.header, now) {
            return Lookup::Found(found);
        }
        let expired = found.header.ext.expiry().is_expired(now);
        let version = self.begin_write(found.bucket);
        self.unlink(&found);
        self.retire(found.offset, &found.header);
        self.count_reclaimed(&found.header);
        self.end_write(found.bucket, version);
        Lookup::Gone { expired }
    }

    // ---- operations ------------------------------------------------------------------------

    #[inline(always)]
    pub(super) fn get(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        touch: Option<Expiry>,
        update: bool,
        now: Now,
        sink: &mut impl ValueSink,
    ) -> Outcome {
        self.get_winning(hash, key, (touch, update), now, sink, |_| false)
    }

    /// [`Partition::get`], and a win token claimed when `wins` says the hit wins one (meta's
    /// R and stale items): claimed before the value is copied, so the sink is told the hit as
    /// the reply will report it.
    #[inline(always)]
    pub(super) fn get_winning(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        (touch, update): (Option<Expiry>, bool),
        now: Now,
        sink: &mut impl ValueSink,
        wins: impl FnOnce(&Hit) -> bool,
    ) -> Outcome {
        self.stats.gets += 1;
        let mut found = match self.lookup(hash, key, now) {
            Lookup::Found(found) => found,
            Lookup::Absent => {
                self.count_get_miss(touch.is_some());
                return Outcome::Miss;
            }
            Lookup::Gone { expired } => {
                if expired {
                    self.stats.get_expired += 1;
                } else {
                    self.stats.get_flushed += 1;
                }
                self.count_get_miss(touch.is_some());
                return Outcome::Miss;
            }
        };
        self.stats.get_hits += 1;
        let mut before = None;
        if let Some(expiry) = touch {
            self.stats.touch_hits += 1;
            before = Some(found.header.ext.expiry());
            found = self.set_expiry(found, expiry, now);
        }
        self.answer_hit_winning(found, update, now, sink, (before, wins))
    }

    /// Copies a found item's value to `sink`, does the read's bookkeeping unless `update` is
    /// false (meta `u`: not marked fetched, last access and LRU position kept), and builds the hit.
    #[inline(always)]
    pub(super) fn answer_hit(
        &mut self,
        found: Found,
        update: bool,
        now: Now,
        sink: &mut impl ValueSink,
    ) -> Outcome {
        self.answer_hit_winning(found, update, now, sink, (None, |_| false))
    }

    /// [`Partition::answer_hit`] for a hit whose expiry before this request's touch was
    /// `before`, and which claims a win token when `wins` says so.
    #[inline(always)]
    fn answer_hit_winning(
        &mut self,
        mut found: Found,
        update: bool,
        now: Now,
        sink: &mut impl ValueSink,
        (before, wins): (Option<Expiry>, impl FnOnce(&Hit) -> bool),
    ) -> Outcome {
        let header = found.header;
        let mut hit = header.hit(0, self.shared.cas_unique(header.word0.cas_seq()));
        if let Some(before) = before {
            hit.expiry_before = before;
        }
        if wins(&hit) {
            let word0 = header.word0.with_bit(BIT_WIN_SENT);
            let version = self.begin_write(found.bucket);
            self.shared.log.set_word0(found.offset, word0);
            self.end_write(found.bucket, version);
            // The read's bookkeeping writes this word again: with the token's bit.
            found.header.word0 = word0;
            hit.won = true;
        }
        let value_at = (header.key_start() + header.key_len(), header.word1.value_len());
        // Cache mode's writes rescue the pins they would overwrite; store mode's allocator
        // writes freed memory itself, so its values are copied.
        let (log, pins, offset, copies) =
            (&self.shared.log, &mut self.pins, found.offset, self.store.is_some());
        if let Some(buffer) =
            sink.head_pinnable(&hit, |charge| (!copies).then(|| pins.pin(log, offset, value_at, charge)))
        {
            hit.value_start = buffer.len();
            self.shared.log.read_bytes(found.offset, value_at.0, value_at.1, buffer);
        }
        if update {
            self.after_read(&found, now);
        }
        Outcome::Hit(hit)
    }

    pub(super) fn count_get_miss(&mut self, touch: bool) {
        self.stats.get_misses += 1;
        if touch {
            self.stats.touch_misses += 1;
        }
    }

    /// Bookkeeping after a hit: fetched bit, last access, and the eviction policy's re-append.
    #[inline(always)]
    pub(super) fn after_read(&mut self, found: &Found, now: Now) {
        let header = found.header;
        let age = self.age(found.offset);
        let reappend = match self.eviction {
            Eviction::Fifo | Eviction::Clock | Eviction::S3Fifo => false,
            Eviction::Lru => age > header.capacity() as u64,
            Eviction::ApproxLru => age > self.limit_bytes / 2,
        };
        if reappend {
            self.stats.reappends += 1;
            self.move_to_tail(found, header.word0.bits() | BIT_FETCHED, now.secs());
            return;
        }
        let fetched = header.word0.has(BIT_FETCHED);
        let accessed = header.word1.last_access() == now.secs();
        let counted = !self.eviction.counts_reads() || header.word0.freq() == item::FREQ_MAX;
        if fetched && accessed && counted {
            return;
        }
        if !counted {
            // Written whole like the fetched bit (below), once per read until the count is full.
            let word0 = header.word0.with_bit(BIT_FETCHED).with_freq(header.word0.freq() + 1);
            self.shared.log.set_word0(found.offset, word0);
            if !accessed {
                self.shared.log.set_word1(found.offset, header.word1.with_last_access(now.secs()));
            }
            return;
        }
        // No version bracket: each of these is one word written whole, changing only metadata
        // (the fetched bit, the last access), so an optimistic reader sees either word as it was
        // or as it is now, and any mix of the two is a header some order of the accesses could
        // give. Leaving the bucket's version alone keeps its line clean: a read dirties only the
        // item's line, and only the first time in a second.
        if !fetched {
            self.shared.log.set_word0(found.offset, header.word0.with_bit(BIT_FETCHED));
        }
        if !accessed {
            self.shared.log.set_word1(found.offset, header.word1.with_last_access(now.secs()));
        }
    }

    /// Copies an item to the tail with header bits `bits` and last access `last_access`,
    /// keeping its CAS, flags and expiry (LRU's move on a read, clock's keep at the head). The
    /// old copy is superseded first, so making room for the new one passes it as it would any
    /// superseded item.
    pub(super) fn move_to_tail(&mut self, found: &Found, bits: u8, last_access: u32) {
        let header = found.header;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let key_len = header.key_len();
        self.shared.log.read_bytes(
            found.offset,
            header.key_start(),
            key_len + header.word1.value_len(),
            &mut scratch,
        );
        let (key, value) = scratch.split_at(key_len);
        let new_header = NewItem {
            cas_seq: header.word0.cas_seq(),
            bits: bits & !BIT_EXT,
            flags: header.ext.flags(),
            expiry: header.ext.expiry(),
            last_access,
        };
        let version = self.begin_write(found.bucket);
        self.retire(found.offset, &header);
        let offset = self.append(Ring::Main, key, value, new_header);
        self.set_slot(found.slot_bucket, found.slot, Slot::new(found_tag(self, found), offset));
        self.end_write(found.bucket, version);
        self.scratch = scratch;
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn store(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        mode: StoreMode,
        value: &[u8],
        flags: u32,
        expiry: Expiry,
        now: Now,
    ) -> Outcome {
        self.stats.sets += 1;
        let existing = match self.lookup(hash, key, now) {
            Lookup::Found(found) => Some(found),
            Lookup::Absent | Lookup::Gone { .. } => None,
        };
        let mut new_item = NewItem { cas_seq: 0, bits: 0, flags, expiry, last_access: now.secs() };
        match (mode, existing) {
            (StoreMode::Add, Some(_)) => return Outcome::NotStored,
            (
                StoreMode::Replace
                | StoreMode::Append
                | StoreMode::Prepend
                | StoreMode::AppendCas(_)
                | StoreMode::PrependCas(_),
                None,
            ) => return Outcome::NotStored,
            (StoreMode::Cas(_) | StoreMode::CasOrStale(_), None) => {
                self.stats.cas_misses += 1;
                return Outcome::NotFound;
            }
            (StoreMode::Cas(cas), Some(found)) => {
                if self.shared.cas_unique(found.header.word0.cas_seq()) != cas {
                    self.stats.cas_badval += 1;
                    return Outcome::Exists;
                }
                self.stats.cas_hits += 1;
            }
            (StoreMode::CasOrStale(cas), Some(found)) => {
                let current = self.shared.cas_unique(found.header.word0.cas_seq());
                if cas > current {
                    self.stats.cas_badval += 1;
                    return Outcome::Exists;
                }
                if cas < current {
                    // An older version's write: kept, but marked stale for the next reader.
                    new_item.bits = BIT_STALE | (found.header.word0.bits() & BIT_WIN_SENT);
                    new_item.expiry = found.header.ext.expiry();
                }
                self.stats.cas_hits += 1;
            }
            (StoreMode::AppendCas(cas) | StoreMode::PrependCas(cas), Some(found))
                if self.shared.cas_unique(found.header.word0.cas_seq()) != cas =>
            {
                return Outcome::Exists;
            }
            _ => {}
        }
        if let Some(found) = existing {
            match mode {
                StoreMode::Append | StoreMode::AppendCas(_) => {
                    return self.concatenate(hash, key, &found, value, true, now);
                }
                StoreMode::Prepend | StoreMode::PrependCas(_) => {
                    return self.concatenate(hash, key, &found, value, false, now);
                }
                _ => {}
            }
        }
        self.put(hash, key, value, new_item, existing)
    }

    pub(super) fn concatenate(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        found: &Found,
        data: &[u8],
        append: bool,
        now: Now,
    ) -> Outcome {
        let header = found.header;
        let old_len = header.word1.value_len();
        // memcached sizes the joined item as it sizes any (its header, the key and a
        // NUL, the data and \r\n, 4 bytes for nonzero client flags) and answers NOT_STORED
        // when that outgrows the item size limit.
        let flags_bytes = if header.ext.flags() != 0 { 4 } else { 0 };
        if MEMCACHED_ITEM_HEADER_BYTES + key.len() + 1 + old_len + data.len() + 2 + flags_bytes
            > self.item_bytes_max
        {
            return Outcome::NotStored;
        }
        if old_len + data.len() > VALUE_BYTES_MAX {
            self.stats.too_large += 1;
            return Outcome::TooLarge;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        if !append {
            scratch.extend_from_slice(data);
        }
        let value_at = header.key_start() + header.key_len();
        self.shared.log.read_bytes(found.offset, value_at, old_len, &mut scratch);
        if append {
            scratch.extend_from_slice(data);
        }
        let new_item = NewItem::keeping_flags_and_expiry(&header, now);
        let outcome = self.put(hash, key, &scratch, new_item, Some(*found));
        self.scratch = scratch;
        outcome
    }

    /// Writes a new version of `key`: in place when it fits the existing item's space, else
    /// appended at the tail with the old version retired. Inlined: it is most of a SET, and
    /// a call's register saves and restores were a tenth of one (callgrind).
    #[inline(always)]
    pub(super) fn put(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        value: &[u8],
        mut new_item: NewItem,
        existing: Option<Found>,
    ) -> Outcome {
        if self.store.is_some() {
            return self.put_store(hash, key, value, new_item, existing);
        }
        let ext_bytes = new_item.ext().bytes();
        let size = item::item_bytes(key.len(), value.len(), ext_bytes);
        if value.len() > VALUE_BYTES_MAX || size > self.item_bytes_max {
            self.stats.too_large += 1;
            return Outcome::TooLarge;
        }
        new_item.cas_seq = self.take_cas_seq();
        self.stats.total_items += 1;
        let cas = self.shared.cas_unique(new_item.cas_seq);
        if let Some(found) = existing.as_ref().filter(|_| self.eviction.counts_reads()) {
            // A key written again is as popular as it was: the clock's count carries over.
            new_item.bits |= found.header.word0.bits() & item::FREQ_BITS;
        }
        if let Some(found) = existing {
            let capacity = found.header.capacity();
            // Not in a memory file: a value rewritten in place could be found half written
            // after a crash, where an appended one is outside the window until whole.
            if size <= capacity && (capacity - size) / 8 <= SLACK_WORDS_MAX && self.persist.is_none() {
                let version = self.begin_write(found.bucket);
                let key_in_place = found.header.ext_bytes() == ext_bytes;
                self.write_item(found.offset, key, value, new_item, (capacity - size) / 8, key_in_place);
                self.end_write(found.bucket, version);
                return Outcome::Stored { cas };
            }
            let version = self.begin_write(found.bucket);
            self.retire(found.offset, &found.header);
            let ring = self.ring_for_existing(found.offset, size);
            let offset = self.append(ring, key, value, new_item);
            self.set_slot(found.slot_bucket, found.slot, Slot::new(hash.tag(), offset));
            self.end_write(found.bucket, version);
            return Outcome::Stored { cas };
        }
        let bucket = self.shape.bucket(hash);
        let version = self.begin_write(bucket);
        if self.flash.is_some() {
            self.supersede_flash(hash);
        }
        let ring = self.ring_for_new(hash, size);
        let offset = self.append(ring, key, value, new_item);
        self.link(bucket, Slot::new(hash.tag(), offset));
        self.end_write(bucket, version);
        Outcome::Stored { cas }
    }

    /// The first item of `bucket`'s chain that no longer answers.
    pub(super) fn first_gone(&self, bucket: usize, now: Now) -> Option<Found> {
        let mut slot_bucket = bucket;
        loop {
            let words = self.shared.index.bucket(slot_bucket);
            for (slot_index, word) in words[1..].iter().enumerate() {
                let slot = Slot(word.load(Relaxed));
                if slot.is_empty() || slot.is_link() {
                    continue;
                }
                let header = self.shared.log.header(slot.offset());
                if self.shared.is_gone(&header, now) {
                    let offset = slot.offset();
                    return Some(Found { bucket, slot_bucket, slot: slot_index, offset, header });
                }
            }
            let last = Slot(words[BUCKET_WORDS - 1].load(Relaxed));
            if !last.is_link() {
                return None;
            }
            slot_bucket = last.offset() as usize;
        }
    }

    pub(super) fn touch(&mut self, hash: KeyHash, key: &[u8], expiry: Expiry, now: Now) -> Outcome {
        match self.lookup(hash, key, now) {
            Lookup::Found(found) => {
                self.stats.touch_hits += 1;
                let found = self.set_expiry(found, expiry, now);
                self.after_read(&found, now);
                Outcome::Touched
            }
            Lookup::Absent | Lookup::Gone { .. } => {
                self.stats.touch_misses += 1;
                Outcome::NotFound
            }
        }
    }

    /// Gives an item a new expiry: in place when it has the words the expiry needs (the
    /// extension word, and the precise word for one within a second), else re-appended with
    /// them. Returns where the item is now.
    pub(super) fn set_expiry(&mut self, found: Found, expiry: Expiry, now: Now) -> Found {
        let header = found.header;
        let ext = Ext::new(header.ext.flags(), expiry);
        let precise_slot = header.word0.precise();
        if header.word0.has(BIT_EXT) && (precise_slot || !ext.is_precise()) {
            let version = self.begin_write(found.bucket);
            self.shared.log.set_ext(found.offset, ext, precise_slot);
            self.end_write(found.bucket, version);
            return Found { header: Header { ext, ..header }, ..found };
        }
        if expiry == Expiry::NEVER {
            return found;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let key_len = header.key_len();
        let data_len = key_len + header.word1.value_len();
        self.shared.log.read_bytes(found.offset, header.key_start(), data_len, &mut scratch);
        let (key, value) = scratch.split_at(key_len);
        let new_item = NewItem {
            cas_seq: header.word0.cas_seq(),
            bits: header.word0.bits(),
            flags: header.ext.flags(),
            expiry,
            last_access: now.secs(),
        };
        let version = self.begin_write(found.bucket);
        let tag = found_tag(self, &found);
        self.retire(found.offset, &header);
        let ring = self.ring_for_existing(
            found.offset,
            item::item_bytes(key_len, value.len(), self.ext_bytes(Ext::new(header.ext.flags(), expiry))),
        );
        let offset = self.append(ring, key, value, new_item);
        self.set_slot(found.slot_bucket, found.slot, Slot::new(tag, offset));
        self.end_write(found.bucket, version);
        self.scratch = scratch;
        let header = self.shared.log.header(offset);
        Found { offset, header, ..found }
    }

    pub(super) fn delete(&mut self, hash: KeyHash, key: &[u8], cas: u64, now: Now) -> Outcome {
        let Lookup::Found(found) = self.lookup(hash, key, now) else {
            self.stats.delete_misses += 1;
            return Outcome::NotFound;
        };
        if cas != 0 && self.shared.cas_unique(found.header.word0.cas_seq()) != cas {
            return Outcome::Exists;
        }
        self.stats.delete_hits += 1;
        let version = self.begin_write(found.bucket);
        self.unlink(&found);
        self.retire(found.offset, &found.header);
        self.end_write(found.bucket, version);
        Outcome::Deleted
    }

    pub(super) fn arith(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        delta: u64,
        decrement: bool,
        cas: u64,
        now: Now,
    ) -> Outcome {
        let Some(found) = self.counter(hash, key, decrement, now) else {
            return Outcome::NotFound;
        };
        let header = found.header;
        let old_len = header.word1.value_len();
        // memcached refuses an empty value as non-numeric before it compares the CAS.
        if old_len == 0 {
            return Outcome::NonNumeric;
        }
        if cas != 0 && self.shared.cas_unique(found.header.word0.cas_seq()) != cas {
            return Outcome::Exists;
        }
        let mut scratch = self.counter_value(&found);
        let Some(number) = parse_counter(&scratch) else {
            self.scratch = scratch;
            return Outcome::NonNumeric;
        };
        if decrement {
            self.stats.decr_hits += 1;
        } else {
            self.stats.incr_hits += 1;
        }
        let value = if decrement { number.saturating_sub(delta) } else { number.wrapping_add(delta) };
        let mut digits = [0u8; 24];
        let text = format_u64(value, &mut digits);
        // memcached keeps the old length when the number is shorter, padding with spaces.
        scratch.clear();
        scratch.extend_from_slice(text);
        if text.len() < old_len {
            scratch.resize(old_len, b' ');
        }
        let mut new_item = NewItem::keeping_flags_and_expiry(&header, now);
        if text.len() <= old_len {
            // memcached rewrites a number that fits in place: the item keeps its marks (h, X, Z).
            new_item.bits = header.word0.bits() & (BIT_FETCHED | BIT_STALE | BIT_WIN_SENT);
        }
        let expiry = new_item.expiry;
        let outcome = self.put(hash, key, &scratch, new_item, Some(found));
        self.scratch = scratch;
        match outcome {
            Outcome::Stored { cas } => Outcome::Counter { value, cas, expiry },
            other => other,
        }
    }

    /// The counter `key` names, if there is one; a miss counts as an incr's or a decr's.
    fn counter(&mut self, hash: KeyHash, key: &[u8], decrement: bool, now: Now) -> Option<Found> {
        let Lookup::Found(found) = self.lookup(hash, key, now) else {
            if decrement {
                self.stats.decr_misses += 1;
            } else {
                self.stats.incr_misses += 1;
            }
            return None;
        };
        Some(found)
    }

    /// A counter's value, read into the partition's scratch buffer (taken: the caller puts it
    /// back).
    fn counter_value(&mut self, found: &Found) -> Vec<u8> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let value_at = found.header.key_start() + found.header.key_len();
        self.shared.log.read_bytes(found.offset, value_at, found.header.word1.value_len(), &mut scratch);
        scratch
    }

    /// [`PartitionCommand::Count`]: a signed counter, as Redis keeps one.
    pub(super) fn count(&mut self, hash: KeyHash, key: &[u8], by: i64, now: Now) -> Outcome {
        let Some(found) = self.counter(hash, key, by < 0, now) else {
            return Outcome::NotFound;
        };
        let header = found.header;
        let old_len = header.word1.value_len();
        let mut scratch = self.counter_value(&found);
        let number = crate::item::parse_signed_counter(&scratch);
        let Some(value) = number.map(|number| number.checked_add(by)) else {
            self.scratch = scratch;
            return Outcome::NonNumeric;
        };
        let Some(value) = value else {
            self.scratch = scratch;
            return Outcome::Overflow;
        };
        if by < 0 {
            self.stats.decr_hits += 1;
        } else {
            self.stats.incr_hits += 1;
        }
        let mut digits = [0u8; 24];
        scratch.clear();
        if value < 0 {
            scratch.push(b'-');
        }
        scratch.extend_from_slice(format_u64(value.unsigned_abs(), &mut digits));
        let mut new_item = NewItem::keeping_flags_and_expiry(&header, now);
        if scratch.len() == old_len {
            new_item.bits = header.word0.bits() & (BIT_FETCHED | BIT_STALE | BIT_WIN_SENT);
        }
        let expiry = new_item.expiry;
        let outcome = self.put(hash, key, &scratch, new_item, Some(found));
        self.scratch = scratch;
        match outcome {
            Outcome::Stored { cas } => Outcome::Counter { value: value as u64, cas, expiry },
            other => other,
        }
    }

    pub(super) fn meta_get(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        options: MetaGet,
        now: Now,
        sink: &mut impl ValueSink,
    ) -> Outcome {
        // A stale item, or one whose remaining TTL is below R's, wins its reader the right to
        // recache it, once (meta `W`; `Z` to the readers after).
        let wins = |hit: &Hit| {
            let expiry = if options.recache_before_touch { hit.expiry_before } else { hit.expiry };
            let remaining = expiry.secs().saturating_sub(now.secs());
            let recache =
                options.recache_below_secs.is_some_and(|below| expiry != Expiry::NEVER && remaining < below);
            (hit.stale || recache) && !hit.win_sent
        };
        match self.get_winning(hash, key, (options.touch, !options.no_update), now, sink, wins) {
            Outcome::Hit(hit) => Outcome::Hit(hit),
            Outcome::Miss => match options.vivify {
                Some(expiry) => {
                    // The request that creates the stub has fetched it (memcached: `h1` next).
                    let stub = NewItem {
                        cas_seq: 0,
                        bits: BIT_WIN_SENT | BIT_FETCHED,
                        flags: 0,
                        expiry,
                        last_access: now.secs(),
                    };
                    match self.put(hash, key, &[], stub, None) {
                        Outcome::Stored { cas } => Outcome::Vivified { cas },
                        other => other,
                    }
                }
                None => Outcome::Miss,
            },
            other => other,
        }
    }

    pub(super) fn invalidate(&mut self, hash: KeyHash, key: &[u8], cas: u64, now: Now) -> Outcome {
        let Lookup::Found(found) = self.lookup(hash, key, now) else {
            self.stats.delete_misses += 1;
            return Outcome::NotFound;
        };
        if cas != 0 && self.shared.cas_unique(found.header.word0.cas_seq()) != cas {
            self.stats.delete_misses += 1;
            return Outcome::Exists;
        }
        self.stats.delete_hits += 1;
        let cas_seq = self.take_cas_seq();
        let word0 = found.header.word0.with_bit(BIT_STALE).without_bit(BIT_WIN_SENT).with_cas_seq(cas_seq);
        let version = self.begin_write(found.bucket);
        self.shared.log.set_word0(found.offset, word0);
        self.end_write(found.bucket, version);
        Outcome::Deleted
    }

    // ---- mechanics ---------------------------------------------------------------------------
}
