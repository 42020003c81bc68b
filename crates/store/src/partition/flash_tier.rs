//! A partition's flash tier (`-o ext_path`): items leaving the DRAM log's head
//! are demoted to the partition's [`FlashLog`] instead of dropped, and their index slot is
//! re-pointed there (the tag with [`FLASH_TAG`] set, the flash offset), so a flash item costs no
//! more DRAM than a slot. A DRAM lookup's tag compare never matches a flash slot; a command that
//! misses in DRAM asks [`Partition::flash_lookup`] whether the key may be on flash, reads the
//! record (the server without blocking its worker; [`Partition::execute_with_flash`] in
//! place), and [`Partition::promote`] checks it and brings it back to DRAM, where the command
//! then runs as on any DRAM item: every command keeps memcached's semantics on a flash item
//! (delete, incr, append, cas, touch...) at the price of one read. A plain set needs no read:
//! it drops the key's flash slots.
//!
//! Demotion happens inside the eviction loop, which may run inside another bucket's version
//! bracket; the slot is re-pointed right after the command (`settle_flash`), and a lookup in
//! between misses, as for any item mid-eviction.

use super::{NewItem, Partition};
use crate::flash::{FlashLog, FlashStats};
use crate::index::Slot;
use crate::item::Now;
use crate::item::{Ext, Word0, Word1, BIT_EXT, BIT_FETCHED, EXT_BYTES, HEADER_BYTES, PRECISE_BYTES};
use crate::keyhash::{KeyHash, FLASH_TAG};
use crate::log::Header;
use crate::{Outcome, PartitionCommand, PartitionRequest};
use std::sync::atomic::Ordering::Relaxed;

/// Bytes read for a flash record when its size is not known yet (a device page).
pub const FLASH_READ_BYTES: usize = 4096;

/// What the flash tier has done besides its log's own figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlashCounters {
    /// Items demoted from the DRAM head to flash.
    pub demoted: u64,
    /// Items that would have been demoted but whose slot had gone (evicted from the index or
    /// taken while the demotion waited): dropped as without flash.
    pub dropped: u64,
    /// Items brought back to DRAM by a command.
    pub promoted: u64,
    /// Flash reads that found another key (a tag match), a gone page or an expired item.
    pub misses: u64,
    /// Flash slots a plain set made obsolete.
    pub superseded: u64,
    /// Gets answered from flash without moving the item (the younger half of the flash log).
    pub served: u64,
}

/// The flash side of a partition.
pub(super) struct FlashTier {
    pub(super) log: FlashLog,
    /// Smaller items stay DRAM-only (memcached's `ext_item_size`).
    min_item_bytes: usize,
    /// Demotions whose slot waits to be re-pointed: (bucket, slot, DRAM slot, flash slot).
    pending: Vec<(usize, usize, Slot, Slot)>,
    counters: FlashCounters,
}

/// A flash record to read for a key: where, and how many bytes to start with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashRead {
    /// Logical flash offset.
    pub offset: u64,
    /// Bytes to read: [`FLASH_READ_BYTES`] or to the end of its page, whichever is less.
    pub len: usize,
}

/// The header at the start of a flash record of at least [`HEADER_BYTES`].
fn record_header(record: &[u8]) -> Header {
    let word = |at: usize| u64::from_le_bytes(record[at..at + 8].try_into().expect("8 bytes"));
    let word0 = Word0(word(0));
    let word1 = Word1(word(8));
    let ext = if !word0.has(BIT_EXT) || record.len() < HEADER_BYTES + EXT_BYTES {
        Ext::NONE
    } else if word0.precise() && record.len() >= HEADER_BYTES + EXT_BYTES + PRECISE_BYTES {
        Ext::from_words(word(HEADER_BYTES), word(HEADER_BYTES + EXT_BYTES))
    } else {
        Ext::from_words(word(HEADER_BYTES), 0)
    };
    let mut header = Header { word0, word1, ext, long_key_len: 0 };
    let long_at = HEADER_BYTES + header.ext_bytes();
    if word0.long_key() && record.len() >= long_at + 8 {
        header.long_key_len = (word(long_at) as usize).min(crate::item::LONG_KEY_BYTES_MAX + 1);
    }
    header
}

/// Takes every flash slot out of an index left in a file (bucket, word) and empties the
/// index, for the log's scan to rebuild.
#[cfg(not(any(miri, loom)))]
pub(super) fn take_flash_slots(index: &crate::index::Index) -> Vec<(u64, u64)> {
    let mut slots = Vec::new();
    for bucket in 0..index.bucket_count() {
        let words = index.bucket(bucket);
        for word in &words[1..] {
            let slot = Slot(word.load(Relaxed));
            if slot.tag() & FLASH_TAG != 0 {
                slots.push((bucket as u64, slot.0));
            }
        }
        for word in words {
            word.store(0, Relaxed);
        }
    }
    slots
}

/// What a memory file kept of a partition's flash tier: the index file's flash slots (bucket,
/// word), and the state page's durable flash offset and flash file epoch.
pub type CrashFlash = (Vec<(u64, u64)>, Option<(u64, u64)>);

/// What a read record is.
enum Checked {
    /// `key`'s, live: its slot and header.
    Valid { bucket: usize, slot: usize, header: Header },
    /// Not the key's, gone or expired.
    Absent,
    /// Longer than what was read.
    NeedBytes(usize),
}

/// What the server does with a flash record it read ([`Partition::flash_resolve`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Resolved {
    /// Back in DRAM (or not the key's, gone, expired): run the command as usual.
    Done,
    /// The key's, in the younger half, and the command is a plain get: serve it from the
    /// record with [`Partition::serve_from_flash`] (nothing moves).
    Serve,
    /// The record is longer than what was read: read this many bytes from the same offset.
    NeedBytes(usize),
}

/// What a read record says, for [`Partition::promote`].
#[derive(Debug, PartialEq, Eq)]
pub enum Promoted {
    /// Back in DRAM: run the command.
    Done,
    /// The key is not there (another key's record, a gone page, an expired item): run the
    /// command as a DRAM miss.
    Absent,
    /// The record is longer than what was read: read this many bytes from the same offset.
    NeedBytes(usize),
}

impl Partition {
    /// Gives this partition a flash tier: items of at least `min_item_bytes` (header included)
    /// leaving the DRAM head go to `log`. Not in store mode (nothing is evicted there).
    pub fn attach_flash(&mut self, log: FlashLog, min_item_bytes: usize) {
        // What leaves a small ring is dropped, not demoted: a flash tier runs with clock.
        assert!(!self.has_small_ring(), "a flash tier needs a partition without a small ring");
        if self.store.is_none() {
            self.flash = Some(Box::new(FlashTier {
                log,
                min_item_bytes,
                pending: Vec::new(),
                counters: FlashCounters::default(),
            }));
            // The index keeps the shape it has: queued slot moves name buckets.
            self.plan_growth();
        }
    }

    /// The flash tier's figures, if it has one.
    pub fn flash_stats(&self) -> Option<(FlashStats, FlashCounters)> {
        self.flash.as_ref().map(|tier| (tier.log.stats(), tier.counters))
    }

    /// Whether `slot` points into the flash tier.
    #[inline(always)]
    pub(super) fn is_flash_slot(slot: Slot) -> bool {
        slot.tag() & FLASH_TAG != 0
    }

    /// Whether a non-empty `slot` points at nothing any more (an offset the DRAM head or the
    /// flash log has passed).
    #[inline(always)]
    pub(super) fn slot_is_dead(&self, slot: Slot) -> bool {
        if Self::is_flash_slot(slot) {
            return self.flash.as_ref().map_or(true, |tier| !tier.log.is_live(slot.offset()));
        }
        !self.geometry.is_live(slot.offset(), self.heads())
    }

    /// At eviction: copies the live item at `offset` to flash and queues its slot's move;
    /// false when it stays a plain eviction (too small, the tier off, its slot gone).
    pub(super) fn demote(&mut self, offset: u64, header: &Header) -> bool {
        let capacity = header.capacity();
        let Some(tier) = self.flash.as_mut() else { return false };
        // A long key's item stays a plain eviction: a flash read's first FLASH_READ_BYTES
        // must hold the key, which the lookup compares before it reads more.
        let long = header.word0.long_key();
        if long || capacity < tier.min_item_bytes || capacity > tier.log.page_bytes() || !tier.log.is_on() {
            return false;
        }
        let mut record = std::mem::take(&mut self.scratch);
        record.clear();
        self.shared.log.read_bytes(offset, 0, capacity, &mut record);
        let key_start = header.key_start();
        let hash = KeyHash::of(&record[key_start..key_start + header.key_len()]);
        let bucket = self.shape.bucket(hash);
        let dram = Slot::new(hash.tag(), offset & self.geometry.offset_mask);
        let slot = self.shared.index.bucket(bucket)[1..].iter().position(|word| word.load(Relaxed) == dram.0);
        let demoted = match slot {
            Some(slot) => match tier.log.append(&record) {
                Some(flash_offset) => {
                    tier.pending.push((bucket, slot, dram, Slot::new(hash.tag() | FLASH_TAG, flash_offset)));
                    tier.counters.demoted += 1;
                    true
                }
                None => false,
            },
            None => {
                tier.counters.dropped += 1;
                false
            }
        };
        self.scratch = record;
        demoted
    }

    /// After a command: re-points the slots of the items it demoted. A slot taken meanwhile
    /// (by the command's own new item) leaves the flash item to any free slot of its bucket,
    /// or drops it.
    pub(super) fn settle_flash(&mut self) {
        let Some(tier) = self.flash.as_mut() else { return };
        if tier.pending.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut tier.pending);
        for &(bucket, slot, dram, flash) in &pending {
            let version = self.begin_write(bucket);
            let words = self.shared.index.bucket(bucket);
            let target = if words[1 + slot].load(Relaxed) == dram.0 {
                Some(slot)
            } else {
                words[1..].iter().position(|word| {
                    let current = Slot(word.load(Relaxed));
                    current.is_empty() || self.slot_is_dead(current)
                })
            };
            match target {
                Some(target) => self.set_slot(bucket, target, flash),
                None => {
                    if let Some(tier) = self.flash.as_mut() {
                        tier.counters.demoted -= 1;
                        tier.counters.dropped += 1;
                    }
                }
            }
            self.end_write(bucket, version);
        }
        pending.clear();
        if let Some(tier) = self.flash.as_mut() {
            tier.pending = pending;
        }
        self.persist_flash_page();
    }

    /// Where `hash`'s key may be on flash: the first live flash slot with its tag (the record
    /// read there says whether it is the key). `None` without a flash tier, and for keys with
    /// no flash slot: the command is a plain DRAM miss.
    pub fn flash_lookup(&self, hash: KeyHash) -> Option<FlashRead> {
        let tier = self.flash.as_ref()?;
        let flash_tag = hash.tag() | FLASH_TAG;
        let words = self.shared.index.bucket(self.shape.bucket(hash));
        words[1..].iter().find_map(|word| {
            let slot = Slot(word.load(Relaxed));
            (slot.tag() == flash_tag && tier.log.is_live(slot.offset())).then(|| {
                let page_left =
                    tier.log.page_bytes() - (slot.offset() % tier.log.page_bytes() as u64) as usize;
                FlashRead { offset: slot.offset(), len: FLASH_READ_BYTES.min(page_left) }
            })
        })
    }

    /// Where `hash`'s key must be read from flash before a command on it runs: it is not in
    /// DRAM and a live flash slot has its tag. `None` without a flash tier (one branch).
    #[inline]
    pub fn flash_probe(&self, hash: KeyHash, key: &[u8], now: Now) -> Option<FlashRead> {
        self.flash.as_ref()?;
        let read = self.flash_lookup(hash)?;
        self.peek(hash, key, now).is_none().then_some(read)
    }

    /// Where the flash log's `len` bytes at `offset` are (`None`: gone).
    pub fn flash_place(&self, offset: u64, len: usize) -> Option<crate::flash::Place<'_>> {
        self.flash.as_ref()?.log.place(offset, len)
    }

    /// Whether the flash file is opened with O_DIRECT (reads of aligned spans).
    pub fn flash_is_direct(&self) -> bool {
        self.flash.as_ref().is_some_and(|tier| tier.log.is_direct())
    }

    /// The flash log's file, for readers on other threads.
    pub fn flash_file(&self) -> Option<std::sync::Arc<std::fs::File>> {
        self.flash.as_ref().map(|tier| tier.log.file())
    }

    /// With the record read for `hash`'s key at `read.offset`: a plain get (`plain_get`) of a
    /// record in the younger half is to be served from it; anything else brings the item back
    /// to DRAM ([`Partition::promote`]) so the command runs on it as on any DRAM item.
    pub fn flash_resolve(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        read: FlashRead,
        record: &[u8],
        now: Now,
        plain_get: bool,
    ) -> Resolved {
        if plain_get && !self.in_older_half(read.offset) {
            return match self.check_record(hash, key, read, record, now) {
                Checked::Valid { .. } => Resolved::Serve,
                Checked::NeedBytes(len) => Resolved::NeedBytes(len),
                Checked::Absent => Resolved::Done,
            };
        }
        match self.promote(hash, key, read, record, now) {
            Promoted::NeedBytes(len) => Resolved::NeedBytes(len),
            Promoted::Done | Promoted::Absent => Resolved::Done,
        }
    }

    /// `-e`: the flash slots the index file held at start-up, and the flash log's durable
    /// offset and epoch the state page kept (see [`Partition::flash_restore`]); taken once.
    pub fn take_crash_flash(&mut self) -> CrashFlash {
        (std::mem::take(&mut self.crash_flash_slots), self.persist.as_ref().map(|state| state.flash()))
    }

    /// `-e`: the flash file's epoch from now on, and the log's durable offset, in the state page.
    pub fn set_flash_epoch(&mut self, epoch: u64) {
        let durable = self.flash.as_ref().map_or(0, |tier| tier.log.durable());
        if let Some(state) = &self.persist {
            state.set_flash_page(durable);
            state.set_flash_epoch(epoch);
        }
    }

    /// `-e`: the state page learns the flash log's durable offset: slots at or above it are
    /// dropped at a restart.
    #[inline]
    pub(super) fn persist_flash_page(&self) {
        if let (Some(state), Some(tier)) = (&self.persist, &self.flash) {
            state.set_flash_page(tier.log.durable());
        }
    }

    /// `-e`: writes the flash page being filled as far as it holds (when the worker idles,
    /// once a second, and at a graceful stop), so that a restart finds every flash item
    /// appended before.
    pub fn flash_write_partial(&mut self) {
        if self.persist.is_none() {
            return;
        }
        self.settle_flash();
        if let Some(tier) = self.flash.as_mut() {
            tier.log.write_partial();
        }
        self.persist_flash_page();
    }

    /// At a restart, before anything runs: the flash log resumes at `durable` (what the stop
    /// left written) and the slots go back into the index where their bucket has room and holds
    /// no item that may be the same key (a slot with the same tag: the DRAM item is newer, as
    /// a set drops the key's flash slots). Returns how many came back.
    pub fn flash_restore(&mut self, durable: u64, slots: &[(u64, u64)]) -> usize {
        let Some(tier) = self.flash.as_mut() else { return 0 };
        if !tier.log.resume(durable) {
            return 0;
        }
        let mut restored = 0;
        for &(bucket, word) in slots {
            let bucket = bucket as usize;
            let slot = Slot(word);
            // Live, and written to the file before the stop (what was only in memory is gone).
            let live = self
                .flash
                .as_ref()
                .is_some_and(|tier| tier.log.is_live(slot.offset()) && slot.offset() < durable);
            if bucket >= self.shape.buckets() || !Self::is_flash_slot(slot) || !live {
                continue;
            }
            let words = self.shared.index.bucket(bucket);
            let tag = slot.tag() & !FLASH_TAG;
            let taken = words[1..].iter().any(|word| {
                let other = Slot(word.load(Relaxed));
                other != Slot::EMPTY && other.tag() & !FLASH_TAG == tag
            });
            let Some(free) = words[1..].iter().position(|word| word.load(Relaxed) == Slot::EMPTY.0) else {
                continue;
            };
            if taken && self.flash_key_in_dram(slot.offset()) {
                continue;
            }
            let version = self.begin_write(bucket);
            self.set_slot(bucket, free, slot);
            self.end_write(bucket, version);
            restored += 1;
        }
        restored
    }

    /// Whether the key of the flash record at `offset` has an item in DRAM (read in place: for
    /// [`Partition::flash_restore`], where a tag is shared). True when the record cannot be
    /// read, so an unreadable one is not put back.
    fn flash_key_in_dram(&mut self, offset: u64) -> bool {
        let Some(tier) = self.flash.as_mut() else { return true };
        let page_left = tier.log.page_bytes() - (offset % tier.log.page_bytes() as u64) as usize;
        let mut record = Vec::new();
        if !tier.log.read(offset, FLASH_READ_BYTES.min(page_left), &mut record) || record.len() < HEADER_BYTES
        {
            return true;
        }
        let header = record_header(&record);
        let (start, len) = (header.key_start(), header.key_len());
        let Some(key) = record.get(start..start + len).filter(|key| !key.is_empty()) else { return true };
        self.find(KeyHash::of(key), key).is_some()
    }

    /// Counts a read of the flash log made elsewhere ([`crate::flash::FlashLog::count_read`]).
    pub fn flash_count_read(&mut self, bytes: usize, from_buffer: bool) {
        if let Some(tier) = self.flash.as_mut() {
            tier.log.count_read(bytes, from_buffer);
        }
    }

    /// Counts a flash read that could not be made (the tier is off, the read failed): the
    /// command runs as a DRAM miss.
    pub fn flash_read_failed(&mut self) {
        if let Some(tier) = self.flash.as_mut() {
            tier.counters.misses += 1;
        }
    }

    /// With the record read at `read.offset`: when it is `key`'s, live and unexpired, puts it
    /// back in DRAM (its CAS, flags, expiry and bits kept; fetched, as a command is about to
    /// touch it) in place of the flash slot.
    pub fn promote(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        read: FlashRead,
        record: &[u8],
        now: Now,
    ) -> Promoted {
        let (bucket, slot, header) = match self.check_record(hash, key, read, record, now) {
            Checked::Valid { bucket, slot, header } => (bucket, slot, header),
            Checked::Absent => return Promoted::Absent,
            Checked::NeedBytes(len) => return Promoted::NeedBytes(len),
        };
        let key_start = header.key_start();
        let key_len = header.key_len();
        let value_len = header.word1.value_len();
        let new_item = NewItem {
            cas_seq: header.word0.cas_seq(),
            bits: header.word0.bits() & !BIT_EXT | BIT_FETCHED,
            flags: header.ext.flags(),
            expiry: header.ext.expiry(),
            last_access: header.word1.last_access(),
        };
        let version = self.begin_write(bucket);
        let offset = self.append(
            super::Ring::Main,
            key,
            &record[key_start + key_len..key_start + key_len + value_len],
            new_item,
        );
        self.set_slot(bucket, slot, Slot::new(hash.tag(), offset));
        self.end_write(bucket, version);
        if let Some(tier) = self.flash.as_mut() {
            tier.counters.promoted += 1;
        }
        self.settle_flash();
        Promoted::Done
    }

    /// Whether the record read at `read.offset` is `key`'s, live and unexpired (an expired or
    /// flushed one loses its slot here); an absent one is counted as a flash miss.
    fn check_record(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        read: FlashRead,
        record: &[u8],
        now: Now,
    ) -> Checked {
        let checked = self.check_record_inner(hash, key, read, record, now);
        if matches!(checked, Checked::Absent) {
            if let Some(tier) = self.flash.as_mut() {
                tier.counters.misses += 1;
            }
        }
        checked
    }

    fn check_record_inner(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        read: FlashRead,
        record: &[u8],
        now: Now,
    ) -> Checked {
        let bucket = self.shape.bucket(hash);
        let flash = Slot::new(hash.tag() | FLASH_TAG, read.offset);
        let words = self.shared.index.bucket(bucket);
        let Some(slot) = words[1..].iter().position(|word| word.load(Relaxed) == flash.0) else {
            return Checked::Absent; // dropped or superseded while the read was in flight
        };
        if !self.flash.as_ref().is_some_and(|tier| tier.log.is_live(read.offset))
            || record.len() < HEADER_BYTES
        {
            return Checked::Absent;
        }
        let header = record_header(record);
        let capacity = header.capacity();
        if record.len() < capacity {
            return Checked::NeedBytes(capacity);
        }
        let key_start = header.key_start();
        let key_len = header.key_len();
        if key_len != key.len() || &record[key_start..key_start + key_len] != key {
            return Checked::Absent;
        }
        if self.shared.is_gone(&header, now) {
            // Expired or flushed: its flash slot goes, as a DRAM item's would.
            let version = self.begin_write(bucket);
            self.set_slot(bucket, slot, Slot::EMPTY);
            self.end_write(bucket, version);
            return Checked::Absent;
        }
        Checked::Valid { bucket, slot, header }
    }

    /// Whether a flash record sits in the older half of the flash log: a read of it brings it
    /// back to DRAM (to be written to flash again later, at the tail), as the DRAM log's
    /// approximate LRU re-appends hits in its older half; a younger one is served from flash
    /// and stays there, so hot items are not rewritten on every read.
    pub fn in_older_half(&self, offset: u64) -> bool {
        self.flash.as_ref().is_some_and(|tier| tier.log.age(offset) > tier.log.bytes() / 2)
    }

    /// A plain get answered from a flash record where it is (no move): `Some(Ok(hit))`,
    /// `Some(Err(len))` to read `len` bytes first, `None` when the record is not the key's.
    pub fn serve_from_flash(
        &mut self,
        request: &PartitionRequest<'_>,
        read: FlashRead,
        record: &[u8],
        now: Now,
        out: &mut Vec<u8>,
    ) -> Option<Result<Outcome, usize>> {
        let header = match self.check_record(request.hash, request.key, read, record, now) {
            Checked::Valid { header, .. } => header,
            Checked::NeedBytes(len) => return Some(Err(len)),
            Checked::Absent => return None,
        };
        let value_from = header.key_start() + header.key_len();
        let value_start = out.len();
        out.extend_from_slice(&record[value_from..value_from + header.word1.value_len()]);
        self.stats.gets += 1;
        self.stats.get_hits += 1;
        if let Some(tier) = self.flash.as_mut() {
            tier.counters.served += 1;
        }
        Some(Ok(Outcome::Hit(header.hit(value_start, self.shared.cas_unique(header.word0.cas_seq())))))
    }

    /// A plain set of `hash`'s key: its flash versions (slots with its tag in its bucket; a
    /// same-tag slot of another key goes too, a rare lost cache entry) stop answering.
    pub(super) fn supersede_flash(&mut self, hash: KeyHash) {
        let Some(tier) = self.flash.as_mut() else { return };
        let flash_tag = hash.tag() | FLASH_TAG;
        let bucket = self.shape.bucket(hash);
        let words = self.shared.index.bucket(bucket);
        for (slot, word) in words[1..].iter().enumerate() {
            if Slot(word.load(Relaxed)).tag() == flash_tag {
                tier.counters.superseded += 1;
                // Within the set's own bracket of this bucket.
                words[1 + slot].store(0, Relaxed);
            }
        }
    }

    /// [`Partition::execute`] that reads flash in place when the key may be there: for tests,
    /// simulations and tools; the server reads without blocking its worker.
    pub fn execute_with_flash(
        &mut self,
        request: &PartitionRequest<'_>,
        now: Now,
        out: &mut Vec<u8>,
    ) -> Outcome {
        let plain_set =
            matches!(request.command, PartitionCommand::Store { mode: crate::StoreMode::Set, .. });
        if !plain_set && self.peek(request.hash, request.key, now).is_none() {
            if let Some(mut read) = self.flash_lookup(request.hash) {
                let mut record = Vec::new();
                loop {
                    record.clear();
                    let Some(tier) = self.flash.as_mut() else { break };
                    if !tier.log.read(read.offset, read.len, &mut record) {
                        break;
                    }
                    if matches!(request.command, PartitionCommand::Get) && !self.in_older_half(read.offset) {
                        match self.serve_from_flash(request, read, &record, now, out) {
                            Some(Ok(outcome)) => return outcome,
                            Some(Err(len)) => {
                                read.len = len;
                                continue;
                            }
                            None => break,
                        }
                    }
                    match self.promote(request.hash, request.key, read, &record, now) {
                        Promoted::NeedBytes(len) => read.len = len,
                        Promoted::Done | Promoted::Absent => break,
                    }
                }
            }
        }
        let outcome = self.execute(request, now, out);
        self.settle_flash();
        outcome
    }
}
