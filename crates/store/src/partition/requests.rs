//! A partition's requests: one at a time (`execute`, `run`) or a batch with its buckets and items
//! prefetched first (`execute_batch`), the plain get and set fast paths, `flush_all` and the
//! crawler's bucket scans.

use super::*;
use crate::item::Now;

impl Partition {
    /// Runs one request. A hit's value is appended to `out`.
    #[inline]
    pub fn execute(&mut self, request: &PartitionRequest<'_>, now: Now, out: &mut Vec<u8>) -> Outcome {
        if request.key.is_empty() || request.key.len() > LONG_KEY_BYTES_MAX {
            return Outcome::BadKey;
        }
        let (hash, key) = (request.hash, request.key);
        self.clock = now;
        match request.command {
            // Nothing appended: no room to make.
            PartitionCommand::Get | PartitionCommand::Delete { .. } | PartitionCommand::Invalidate { .. } => {
            }
            // No more than the write will take: a keep or eviction too many is an item lost.
            PartitionCommand::Store { value, flags, expiry, .. } => {
                self.keep_ahead(item::item_bytes(key.len(), value.len(), Ext::new(flags, expiry).bytes()))
            }
            _ => self.keep_ahead(item::item_bytes(key.len(), 0, 0)),
        }
        let outcome = match request.command {
            PartitionCommand::Get => self.get(hash, key, None, true, now, &mut Append::new(out)),
            PartitionCommand::GetAndTouch { expiry } => {
                self.get(hash, key, Some(expiry), true, now, &mut Append::new(out))
            }
            PartitionCommand::Touch { expiry } => self.touch(hash, key, expiry, now),
            PartitionCommand::SetExpiry { expiry } => match self.lookup(hash, key, now) {
                Lookup::Found(found) => {
                    self.set_expiry(found, expiry, now);
                    Outcome::Touched
                }
                Lookup::Absent | Lookup::Gone { .. } => Outcome::NotFound,
            },
            PartitionCommand::Store { mode, value, flags, expiry } => {
                self.store(hash, key, mode, value, flags, expiry, now)
            }
            PartitionCommand::Delete { cas } => self.delete(hash, key, cas, now),
            PartitionCommand::Arith { delta, decrement, cas } => {
                self.arith(hash, key, delta, decrement, cas, now)
            }
            PartitionCommand::Count { by } => self.count(hash, key, by, now),
            PartitionCommand::Invalidate { cas } => self.invalidate(hash, key, cas, now),
            PartitionCommand::MetaGet(options) => {
                self.meta_get(hash, key, options, now, &mut Append::new(out))
            }
        };
        self.scan_if_due();
        self.settle_if_pending();
        outcome
    }

    /// Runs a batch through the prefetch pipeline: prefetch every bucket, then every candidate
    /// item, then execute in order. Results are pushed to `outcomes` in request order.
    pub fn execute_batch(
        &mut self,
        requests: &[PartitionRequest<'_>],
        now: Now,
        prefetch: bool,
        out: &mut Vec<u8>,
        outcomes: &mut Vec<Outcome>,
    ) {
        if prefetch {
            self.prefetch_buckets(requests);
            self.prefetch_items(requests);
        }
        for request in requests {
            outcomes.push(self.run(request, now, out));
        }
    }

    /// Runs one request as [`Partition::execute_batch`] does (lean paths for plain GET and
    /// SET). For callers that build their own pipeline over several partitions with
    /// [`Partition::prefetch_bucket`] and [`Partition::prefetch_item`].
    #[inline(always)]
    pub fn run(&mut self, request: &PartitionRequest<'_>, now: Now, out: &mut Vec<u8>) -> Outcome {
        let outcome = match request.command {
            PartitionCommand::Get => self.plain_get(request.hash, request.key, now, &mut Append::new(out)),
            PartitionCommand::Store { mode: StoreMode::Set, value, flags, expiry } => {
                self.plain_set(request, value, flags, expiry, now, out)
            }
            _ => return self.execute(request, now, out),
        };
        self.settle_if_pending();
        outcome
    }

    /// Re-points the slots of items this command demoted to flash, if any.
    #[inline(always)]
    pub(super) fn settle_if_pending(&mut self) {
        if self.flash.is_some() {
            self.settle_flash();
        }
    }

    /// Pipeline stage 1 for one key: start loading its bucket.
    #[inline(always)]
    pub fn prefetch_bucket(&self, hash: KeyHash) {
        self.shared.index.prefetch(self.shape.bucket(hash));
    }

    /// Pipeline stage 2 for one key: start loading its candidate item (after stage 1 had time
    /// to bring the bucket in).
    #[inline(always)]
    pub fn prefetch_item(&self, hash: KeyHash) {
        let bucket = self.shared.index.bucket(self.shape.bucket(hash));
        let tag = hash.tag();
        for (slot_index, word) in bucket[1..].iter().enumerate() {
            let slot = Slot(word.load(Relaxed));
            if slot.tag() == tag && self.geometry.is_live(slot.offset(), self.heads()) {
                self.shared.log.prefetch(slot.offset());
                self.hint(hash).set(hash.0 & !HINT_SLOT_MASK | slot_index as u64);
                break;
            }
        }
    }

    /// The hint-table entry for `hash`.
    #[inline(always)]
    pub(super) fn hint(&self, hash: KeyHash) -> &Cell<u64> {
        &self.hints[hash.bucket(HINTS - 1)]
    }

    /// The batch's common case, kept lean: a plain GET of a well-formed key. An expired or
    /// flushed item to reclaim takes the general path, as [`Partition::execute`] would.
    #[inline(always)]
    pub(super) fn plain_get(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        now: Now,
        sink: &mut impl ValueSink,
    ) -> Outcome {
        if key.is_empty() || key.len() > LONG_KEY_BYTES_MAX {
            return Outcome::BadKey;
        }
        let Some(found) = self.find(hash, key) else {
            self.stats.gets += 1;
            self.count_get_miss(false);
            return Outcome::Miss;
        };
        if self.shared.is_gone(&found.header, now) {
            // As `execute` runs it: the item goes, and the crawler may be due.
            self.clock = now;
            let outcome = self.get(hash, key, None, true, now, sink);
            self.scan_if_due();
            return outcome;
        }
        self.stats.gets += 1;
        self.stats.get_hits += 1;
        self.answer_hit(found, true, now, sink)
    }

    /// A meta get as [`Partition::run`] runs `PartitionCommand::MetaGet`, its value handed to `sink`
    /// once the hit is what the reply reports (a win token claimed first): the reply's head
    /// goes before the value, which is copied once.
    #[inline]
    pub fn read_meta(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        options: MetaGet,
        now: Now,
        sink: &mut impl ValueSink,
    ) -> Outcome {
        if key.is_empty() || key.len() > LONG_KEY_BYTES_MAX {
            return Outcome::BadKey;
        }
        self.clock = now;
        self.keep_ahead(item::item_bytes(key.len(), 0, 0));
        let outcome = self.meta_get(hash, key, options, now, sink);
        self.scan_if_due();
        self.settle_if_pending();
        outcome
    }

    /// A get (with `touch`, a get-and-touch) as [`Partition::run`] runs `PartitionCommand::Get` and
    /// `PartitionCommand::GetAndTouch`, its value handed to `sink`: a reply's head goes before the
    /// value, which is copied once, from the log to where the sink says.
    #[inline]
    pub fn read_value(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        touch: Option<Expiry>,
        now: Now,
        sink: &mut impl ValueSink,
    ) -> Outcome {
        let outcome = match touch {
            None => self.plain_get(hash, key, now, sink),
            Some(_) if key.is_empty() || key.len() > LONG_KEY_BYTES_MAX => return Outcome::BadKey,
            Some(expiry) => {
                self.clock = now;
                self.keep_ahead(item::item_bytes(key.len(), 0, 0));
                let outcome = self.get(hash, key, Some(expiry), true, now, sink);
                self.scan_if_due();
                outcome
            }
        };
        self.settle_if_pending();
        outcome
    }

    /// The other common case: a plain SET of a well-formed key whose old version, if any, still
    /// answers. Anything unusual goes through [`Partition::execute`].
    #[inline(always)]
    pub(super) fn plain_set(
        &mut self,
        request: &PartitionRequest<'_>,
        value: &[u8],
        flags: u32,
        expiry: Expiry,
        now: Now,
        out: &mut Vec<u8>,
    ) -> Outcome {
        if request.key.is_empty() || request.key.len() > LONG_KEY_BYTES_MAX {
            return self.execute(request, now, out);
        }
        self.clock = now;
        self.keep_ahead(item::item_bytes(request.key.len(), value.len(), Ext::new(flags, expiry).bytes()));
        let existing = self.find(request.hash, request.key);
        if existing.is_some_and(|found| self.shared.is_gone(&found.header, now)) {
            return self.execute(request, now, out);
        }
        self.clock = now;
        self.stats.sets += 1;
        let new_item = NewItem { cas_seq: 0, bits: 0, flags, expiry, last_access: now.secs() };
        let outcome = self.put(request.hash, request.key, value, new_item, existing);
        self.scan_if_due();
        outcome
    }

    /// Pipeline stage 1: start loading both lines of every request's bucket.
    #[inline(always)]
    pub(super) fn prefetch_buckets(&self, requests: &[PartitionRequest<'_>]) {
        for request in requests {
            self.prefetch_bucket(request.hash);
        }
    }

    /// Pipeline stage 2: start loading the first line of each request's candidate item.
    #[inline(always)]
    pub(super) fn prefetch_items(&self, requests: &[PartitionRequest<'_>]) {
        for request in requests {
            self.prefetch_item(request.hash);
        }
    }

    /// flush_all: items stored or accessed before the flush time stop answering, from
    /// `now + delay_secs` on (memcached's rules, including its CAS cut-off for an
    /// immediate flush). Without `by_cas` (memcached's -C) the cut-off is the second alone:
    /// items stored in the flush's own second are flushed too, as memcached's are.
    pub fn flush_all(&mut self, now: Now, delay_secs: u32, by_cas: bool) {
        let now = now.secs();
        let flush_at = if delay_secs > 0 { now.saturating_add(delay_secs) } else { now };
        if delay_secs == 0 {
            // Nothing in the main ring answers now: it fills again as a new one does.
            self.small.main_free = self.limit_bytes;
        }
        if !by_cas {
            self.shared.oldest_live.store(flush_at.max(1), Relaxed);
        } else {
            let oldest_live = flush_at.saturating_sub(1).max(1);
            self.shared.oldest_live.store(oldest_live, Relaxed);
            if oldest_live <= now {
                self.shared.oldest_cas_seq.store(self.next_cas_seq, Relaxed);
            }
        }
        if let Some(state) = &self.persist {
            state.set_flush(self.shared.oldest_live.load(Relaxed), self.shared.oldest_cas_seq.load(Relaxed));
        }
    }

    /// After an immediate flush ([`Partition::flush_all`] with no delay), which left every item
    /// to be found flushed: moves both rings' heads to their tails now, each record passed
    /// counted reclaimed (none is an eviction), so the item count is exact at once (Redis's
    /// FLUSHALL leaves DBSIZE at 0) and the memory is free. Store mode's items go as they are
    /// found, as memcached's do.
    pub fn drop_flushed(&mut self) {
        if self.store.is_some() {
            return;
        }
        while self.head < self.tail {
            self.evict_head();
        }
        self.drop_small_ring();
        self.publish_head();
    }

    /// Scans up to `buckets` buckets for dangling slots (housekeeping; also done automatically,
    /// at the rate the offset width needs, as the tail advances).
    pub fn scan_buckets(&mut self, buckets: usize) {
        for _ in 0..buckets.min(self.shape.buckets()) {
            if self.store.is_some() {
                self.reclaim_step();
            } else {
                self.scan_one_bucket();
            }
        }
    }
}
