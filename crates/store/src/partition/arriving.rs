//! A set's value received straight into the log (issue 58): the record is appended at the
//! tail when the set's command line has arrived, dead (so no head, scan or warm restart takes
//! it for an item), filled as the value's bytes arrive, and linked as the key's item once the
//! last byte is in. The value crosses user-space memory once (from wherever the socket's bytes
//! landed into the log) instead of growing the connection's input to the whole value first.
//!
//! The log goes on serving other writes while a value arrives: if its head comes round to the
//! record first, the record is gone and the store fails (memcached's "out of memory storing
//! object"). Each fill checks that before it writes, on the owner's thread, which alone moves
//! the head, so no write ever lands in memory the log has handed to another item. Records in
//! flight may take at most [`ARRIVING_SHARE`] of a partition's log, so clients that send half a
//! value and stop cannot push out more of the cache than that; past it, a long set is read
//! into the connection's input as before (where the client memory budget bounds it). Records
//! go to the main ring: S3-FIFO's small ring is a tenth of the log, which a few values in
//! flight would lap before they are in.

use super::*;
use crate::item::Now;
use std::sync::atomic::Ordering::AcqRel;

/// The share of a partition's log that values still arriving may take together (1/4).
const ARRIVING_SHARE: u64 = 4;

/// A set whose value is arriving into its record in the log ([`Partition::begin_arriving`]).
/// Dropping it abandons the record (it stays dead; the head passes it like a deleted item).
pub struct Arriving {
    /// The record's offset, as a slot would hold it.
    offset: u64,
    /// Byte position of the value within the record.
    value_at: usize,
    /// The value's length, and how much of it is in.
    len: usize,
    filled: usize,
    /// The record's bytes (its capacity).
    size: usize,
    hash: KeyHash,
    key: Box<[u8]>,
    new_item: NewItem,
    /// The partition's bytes in flight, which this record's size is part of until dropped.
    in_flight: Arc<AtomicU64>,
}

impl Arriving {
    /// The set's key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The key's hash.
    pub fn hash(&self) -> KeyHash {
        self.hash
    }

    /// Value bytes still to arrive.
    pub fn remaining(&self) -> usize {
        self.len - self.filled
    }

    /// The value's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Counts `len` more of the value's bytes as arrived without writing them: the record is
    /// lost, and what is left of its value is swallowed.
    pub fn skip(&mut self, len: usize) {
        self.filled = (self.filled + len).min(self.len);
    }

    /// Whether the value is empty (never: short values take the ordinary path).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Arriving {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(self.size as u64, AcqRel);
    }
}

impl Partition {
    /// Starts a set of `key` (hashed to `hash`) whose `len`-byte value is still to arrive: its
    /// record is appended now, dead, with the key and header in place. `None` where this
    /// partition reads values the ordinary way: store mode and a flash tier (whose writes are
    /// not plain appends), a value over the item size limit, or the records in flight already
    /// at their share of the log.
    pub fn begin_arriving(
        &mut self,
        (hash, key): (KeyHash, &[u8]),
        len: usize,
        (flags, expiry): (u32, Expiry),
        now: Now,
    ) -> Option<Arriving> {
        if self.store.is_some()
            || self.flash.is_some()
            || key.is_empty()
            || key.len() > crate::item::KEY_BYTES_MAX
        {
            return None;
        }
        let ext = Ext::new(flags, expiry);
        let size = item::item_bytes(key.len(), len, ext.bytes());
        if len > VALUE_BYTES_MAX || size > self.item_bytes_max {
            return None;
        }
        let share = self.limit_bytes / ARRIVING_SHARE;
        if self.arriving.load(Relaxed) + size as u64 > share {
            return None;
        }
        self.clock = now;
        self.keep_ahead(size);
        let offset = self.reserve(size);
        let new_item = NewItem { cas_seq: 0, bits: BIT_DEAD, flags, expiry, last_access: now.secs() };
        // Pinned values the record's memory held are copied out before any of it is written.
        self.before_writing(offset, size);
        // The header and key now; the value's words as it arrives.
        self.write_item(offset, key, &[], new_item, 0, false);
        self.shared.log.set_word1(offset, Word1::new(len, 0, now.secs()));
        self.persist_window();
        self.arriving.fetch_add(size as u64, AcqRel);
        let value_at = item::HEADER_BYTES + ext.bytes() + key.len();
        Some(Arriving {
            offset,
            value_at,
            len,
            filled: 0,
            size,
            hash,
            key: key.into(),
            new_item: NewItem { bits: 0, ..new_item },
            in_flight: Arc::clone(&self.arriving),
        })
    }

    /// Writes the next of the value's bytes (at most what remains of it). False once the
    /// log's head has passed the record: nothing is written, and the store is to fail.
    pub fn fill_arriving(&mut self, arriving: &mut Arriving, bytes: &[u8]) -> bool {
        if !self.geometry.is_live(arriving.offset, self.heads()) {
            return false;
        }
        let bytes = &bytes[..bytes.len().min(arriving.remaining())];
        let words = arriving.size / 8;
        let item = self.shared.log.item_words(arriving.offset, words);
        crate::words::store_bytes(item, arriving.value_at + arriving.filled, bytes);
        arriving.filled += bytes.len();
        true
    }

    /// Links the record, its value all in, as the key's item (replacing the one there, as a
    /// set does): `Stored`, or `OutOfMemory` when the log's head passed the record first.
    pub fn finish_arriving(&mut self, arriving: Arriving, now: Now) -> Outcome {
        self.clock = now;
        self.stats.sets += 1;
        if !self.geometry.is_live(arriving.offset, self.heads()) {
            return Outcome::OutOfMemory;
        }
        debug_assert_eq!(arriving.remaining(), 0, "a value linked before all of it arrived");
        let (hash, offset) = (arriving.hash, arriving.offset);
        let existing = match self.lookup(hash, &arriving.key, now) {
            Lookup::Found(found) => Some(found),
            Lookup::Absent | Lookup::Gone { .. } => None,
        };
        let mut new_item = arriving.new_item;
        new_item.cas_seq = self.take_cas_seq();
        self.stats.total_items += 1;
        let cas = self.shared.cas_unique(new_item.cas_seq);
        if let Some(found) = existing.as_ref().filter(|_| self.eviction.counts_reads()) {
            // A key written again is as popular as it was: the clock's count carries over.
            new_item.bits |= found.header.word0.bits() & item::FREQ_BITS;
        }
        let ext = new_item.ext();
        let bits = if ext.bytes() > 0 { new_item.bits | BIT_EXT } else { new_item.bits };
        // Alive from here: one word, as a memory file's records change.
        let word0 = Word0::new(new_item.cas_seq, arriving.key.len(), bits).with_precise(ext.is_precise());
        self.shared.log.set_word0(offset, word0);
        self.stats.items += 1;
        self.stats.bytes += arriving.size as u64;
        let slot = Slot::new(hash.tag(), offset);
        match existing {
            Some(found) => {
                let version = self.begin_write(found.bucket);
                self.retire(found.offset, &found.header);
                self.set_slot(found.slot_bucket, found.slot, slot);
                self.end_write(found.bucket, version);
            }
            None => {
                let bucket = self.shape.bucket(hash);
                let version = self.begin_write(bucket);
                self.link(bucket, slot);
                self.end_write(bucket, version);
            }
        }
        self.scan_if_due();
        Outcome::Stored { cas }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::HugePages;

    fn partition(log_bytes: usize, eviction: Eviction) -> Partition {
        let mut config = Config::new(log_bytes, 64);
        config.access = Access::Crew;
        config.eviction = eviction;
        config.huge_pages = HugePages::Off;
        Partition::new(config)
    }

    fn get(partition: &mut Partition, key: &[u8]) -> Option<(Vec<u8>, u32)> {
        let mut out = Vec::new();
        match partition.execute(
            &PartitionRequest::new(key, PartitionCommand::Get),
            crate::Now::from_secs(100),
            &mut out,
        ) {
            Outcome::Hit(hit) => {
                Some((out[hit.value_start..hit.value_start + hit.value_len].to_vec(), hit.flags))
            }
            Outcome::Miss => None,
            other => panic!("{other:?}"),
        }
    }

    fn set(partition: &mut Partition, key: &[u8], value: &[u8]) {
        let command =
            PartitionCommand::Store { mode: StoreMode::Set, value, flags: 0, expiry: Expiry::NEVER };
        let outcome = partition.execute(
            &PartitionRequest::new(key, command),
            crate::Now::from_secs(100),
            &mut Vec::new(),
        );
        assert!(matches!(outcome, Outcome::Stored { .. }), "{outcome:?}");
    }

    fn begin(partition: &mut Partition, key: &[u8], len: usize) -> Option<Arriving> {
        partition.begin_arriving((KeyHash::of(key), key), len, (7, Expiry::NEVER), crate::Now::from_secs(100))
    }

    /// The value arrives in uneven pieces (words split across fills); the old value answers
    /// until the last one is in, the new one after, with the set's flags and a new CAS.
    #[test]
    fn a_value_filled_in_pieces_replaces_the_old_one_once_linked() {
        for eviction in [Eviction::Lru, Eviction::Clock, Eviction::S3Fifo] {
            let mut partition = partition(1 << 20, eviction);
            set(&mut partition, b"k", b"old");
            let value: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
            let mut arriving = begin(&mut partition, b"k", value.len()).expect("reserved");
            assert_eq!(arriving.key(), b"k");
            for piece in value.chunks(4093) {
                assert!(partition.fill_arriving(&mut arriving, piece));
                assert_eq!(get(&mut partition, b"k"), Some((b"old".to_vec(), 0)), "seen before linked");
            }
            assert_eq!(arriving.remaining(), 0);
            let items = partition.stats().items;
            assert!(matches!(
                partition.finish_arriving(arriving, crate::Now::from_secs(100)),
                Outcome::Stored { .. }
            ));
            assert_eq!(get(&mut partition, b"k"), Some((value, 7)), "{eviction:?}");
            assert_eq!(partition.stats().items, items, "one item replaced another");
            assert_eq!(partition.arriving.load(Relaxed), 0);
        }
    }

    /// A record the log's head passes before its value is in: the fills stop writing (no
    /// later item is touched) and the store fails; the items written meanwhile are whole.
    #[test]
    fn a_record_the_head_passes_fails_and_harms_nothing() {
        let mut partition = partition(256 << 10, Eviction::Lru);
        let mut arriving = begin(&mut partition, b"slow", 30_000).expect("reserved");
        assert!(partition.fill_arriving(&mut arriving, &[b'x'; 1000]));
        for round in 0..40u32 {
            set(&mut partition, format!("k{round}").as_bytes(), &[round as u8; 10_000]);
        }
        assert!(!partition.fill_arriving(&mut arriving, &[b'y'; 29_000]), "wrote into a lapped record");
        for round in 30..40u32 {
            let (value, _) = get(&mut partition, format!("k{round}").as_bytes()).expect("recent item");
            assert!(value.iter().all(|&byte| byte == round as u8), "item {round} overwritten");
        }
        assert!(matches!(
            partition.finish_arriving(arriving, crate::Now::from_secs(100)),
            Outcome::OutOfMemory
        ));
        assert_eq!(get(&mut partition, b"slow"), None);
    }

    /// Records in flight up to their share all get linked under every policy: none goes to
    /// S3-FIFO's small ring, which they would lap.
    #[test]
    fn records_in_flight_together_are_all_linked() {
        for eviction in [Eviction::Lru, Eviction::Clock, Eviction::S3Fifo] {
            let mut partition = partition(1 << 20, eviction);
            let mut held: Vec<Arriving> =
                (0..20).map_while(|i| begin(&mut partition, format!("h{i}").as_bytes(), 20_000)).collect();
            let count = held.len();
            assert!(count >= 10, "{count} in flight under {eviction:?}");
            for arriving in &mut held {
                assert!(partition.fill_arriving(arriving, &[b'v'; 20_000]));
            }
            for arriving in held {
                assert!(
                    matches!(
                        partition.finish_arriving(arriving, crate::Now::from_secs(100)),
                        Outcome::Stored { .. }
                    ),
                    "{eviction:?}"
                );
            }
            for i in 0..count {
                assert_eq!(
                    get(&mut partition, format!("h{i}").as_bytes()).map(|(value, _)| value.len()),
                    Some(20_000)
                );
            }
        }
    }

    /// An abandoned record is never found, the head passes it without counting an eviction,
    /// and its bytes stop counting against the share in flight.
    #[test]
    fn an_abandoned_record_is_dead_and_its_share_returns() {
        let mut partition = partition(256 << 10, Eviction::Lru);
        let arriving = begin(&mut partition, b"gone", 10_000).expect("reserved");
        assert!(partition.arriving.load(Relaxed) > 10_000);
        drop(arriving);
        assert_eq!(partition.arriving.load(Relaxed), 0);
        assert_eq!(get(&mut partition, b"gone"), None);
        let (items, evictions) = (partition.stats().items, partition.stats().log_evictions);
        for round in 0..30u32 {
            set(&mut partition, format!("k{round}").as_bytes(), &[1; 10_000]);
        }
        assert_eq!(partition.stats().items - items + partition.stats().log_evictions - evictions, 30);
    }

    /// Records in flight take at most a quarter of the log; past it the caller reads the value
    /// the ordinary way. Store mode never reserves.
    #[test]
    fn records_in_flight_are_bounded_by_their_share() {
        let mut partition = partition(256 << 10, Eviction::Lru);
        let held: Vec<Arriving> =
            (0..10).map_while(|i| begin(&mut partition, format!("h{i}").as_bytes(), 20_000)).collect();
        assert_eq!(held.len(), 3, "64 KiB share of 20 KB records");
        drop(held);
        assert!(begin(&mut partition, b"again", 20_000).is_some());
        let mut config = Config::new(256 << 10, 64);
        config.store_mode = true;
        config.huge_pages = HugePages::Off;
        assert!(Partition::new(config)
            .begin_arriving((KeyHash::of(b"k"), b"k"), 20_000, (0, Expiry::NEVER), crate::Now::from_secs(100))
            .is_none());
    }
}
