//! A front cache for hot keys under EREW (the NIC-cache paper's front cache in
//! software): a worker that does not own a key's partition keeps a small set-associative table
//! of replies it got from the owner, and serves a repeated read from it instead of handing the
//! request over, as long as nothing may have changed the item since.
//!
//! Validity without invalidation messages: the owner keeps [`WriteEpochs`], a small array of
//! counters per partition indexed by keyhash bits, and bumps a key's counter (and, for
//! `flush_all`, the partition's) *before* it runs any command that may change the key and so
//! before that command is acknowledged. A reply is cached with the epochs the owner read when it
//! ran the read (the owner is the only writer, so the reply and the epochs agree), and served
//! only while both still read the same. A read that finds them unchanged is linearized at that
//! load: no write to the key had begun, so the cached reply is the current value; a write
//! acknowledged before the read began has bumped them, and the read goes to the owner. An entry
//! also lives only within the clock second it was filled in, so that an item's expiry is never
//! overrun (the owner does not tag a reply of an item that expires within that second: a
//! Redis expiry may fall within one). This module is not yet wired into the server (see
//! docs/ARCHITECTURE.md).

use std::sync::atomic::{AtomicU64, Ordering};

/// Per-partition write epochs, bumped by the partition's owner.
pub struct WriteEpochs {
    slots: Box<[AtomicU64]>,
    /// Bumped by `flush_all` (every key may have changed).
    all: AtomicU64,
}

/// What a reply was cached under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Epoch {
    slot: u64,
    all: u64,
}

impl WriteEpochs {
    /// `slots` counters (rounded up to a power of two).
    pub fn new(slots: usize) -> WriteEpochs {
        let slots = slots.max(1).next_power_of_two();
        WriteEpochs { slots: (0..slots).map(|_| AtomicU64::new(0)).collect(), all: AtomicU64::new(0) }
    }

    fn slot(&self, keyhash: u64) -> &AtomicU64 {
        // The top bits choose the partition and the low ones the bucket and tag: use the
        // middle, which vary within a partition and a bucket alike.
        &self.slots[(keyhash >> 24) as usize & (self.slots.len() - 1)]
    }

    /// The owner, before a command that may change the key with this hash. Only the owner
    /// writes, so a load and a store do; `Release` orders the bump before the change.
    pub fn bump(&self, keyhash: u64) {
        let slot = self.slot(keyhash);
        slot.store(slot.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
    }

    /// The owner, before `flush_all`.
    pub fn bump_all(&self) {
        self.all.store(self.all.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
    }

    /// The epochs of the key with this hash now.
    pub fn read(&self, keyhash: u64) -> Epoch {
        Epoch { slot: self.slot(keyhash).load(Ordering::Acquire), all: self.all.load(Ordering::Acquire) }
    }
}

struct Entry {
    keyhash: u64,
    key: Box<[u8]>,
    reply: Vec<u8>,
    epoch: Epoch,
    second: u32,
    /// Last use, for LRU within the set.
    used: u64,
}

/// A set-associative cache of replies, LRU within each set.
pub struct FrontCache {
    sets: Vec<Vec<Entry>>,
    ways: usize,
    clock: u64,
    /// Hits served, entries found stale.
    pub hits: u64,
    /// Entries dropped because an epoch or the second had moved on.
    pub stale: u64,
}

impl FrontCache {
    /// `sets` sets (rounded up to a power of two) of `ways` entries.
    pub fn new(sets: usize, ways: usize) -> FrontCache {
        let sets = sets.max(1).next_power_of_two();
        FrontCache {
            sets: (0..sets).map(|_| Vec::with_capacity(ways.max(1))).collect(),
            ways: ways.max(1),
            clock: 0,
            hits: 0,
            stale: 0,
        }
    }

    fn set_of(&self, keyhash: u64) -> usize {
        (keyhash >> 16) as usize & (self.sets.len() - 1)
    }

    /// The cached reply for `key`, if its epochs in `epochs` are still those it was cached
    /// under and the clock is still in the second it was cached in; a stale entry is dropped.
    pub fn get(&mut self, keyhash: u64, key: &[u8], epochs: &WriteEpochs, now_secs: u32) -> Option<&[u8]> {
        let set = self.set_of(keyhash);
        let way = self.sets[set].iter().position(|entry| entry.keyhash == keyhash && *entry.key == *key)?;
        let entry = &self.sets[set][way];
        if entry.second != now_secs || entry.epoch != epochs.read(keyhash) {
            self.sets[set].swap_remove(way);
            self.stale += 1;
            return None;
        }
        self.clock += 1;
        self.hits += 1;
        let entry = &mut self.sets[set][way];
        entry.used = self.clock;
        Some(&entry.reply)
    }

    /// Caches `reply` for `key`, read by the owner under `epoch` in second `now_secs`,
    /// replacing the key's old entry or the set's least recently used one.
    pub fn insert(&mut self, keyhash: u64, key: &[u8], reply: &[u8], epoch: Epoch, now_secs: u32) {
        self.clock += 1;
        let set_index = self.set_of(keyhash);
        let ways = self.ways;
        let set = &mut self.sets[set_index];
        let entry = Entry {
            keyhash,
            key: key.into(),
            reply: reply.to_vec(),
            epoch,
            second: now_secs,
            used: self.clock,
        };
        if let Some(way) = set.iter().position(|old| old.keyhash == keyhash && *old.key == *key) {
            set[way] = entry;
        } else if set.len() < ways {
            set.push(entry);
        } else if let Some(oldest) = set.iter_mut().min_by_key(|old| old.used) {
            *oldest = entry;
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.sets.iter().map(Vec::len).sum()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyHash;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};

    fn hash(key: &[u8]) -> u64 {
        KeyHash::of(key).0
    }

    #[test]
    fn serves_until_a_bump_a_flush_or_the_next_second() {
        let epochs = WriteEpochs::new(64);
        let mut front = FrontCache::new(16, 4);
        let (k, h) = (b"hot".as_slice(), hash(b"hot"));
        assert!(front.get(h, k, &epochs, 100).is_none());
        front.insert(h, k, b"VALUE hot 0 1\r\nx\r\nEND\r\n", epochs.read(h), 100);
        assert_eq!(front.get(h, k, &epochs, 100), Some(&b"VALUE hot 0 1\r\nx\r\nEND\r\n"[..]));
        // Another key's bump in another slot leaves it; its own bump does not.
        let other = (0..)
            .map(|i: u32| format!("k{i}"))
            .find(|key| (hash(key.as_bytes()) >> 24) & 63 != (h >> 24) & 63);
        epochs.bump(hash(other.unwrap().as_bytes()));
        assert!(front.get(h, k, &epochs, 100).is_some());
        epochs.bump(h);
        assert!(front.get(h, k, &epochs, 100).is_none());
        assert_eq!((front.len(), front.stale), (0, 1));
        front.insert(h, k, b"r", epochs.read(h), 100);
        epochs.bump_all();
        assert!(front.get(h, k, &epochs, 100).is_none());
        front.insert(h, k, b"r", epochs.read(h), 100);
        assert!(front.get(h, k, &epochs, 101).is_none(), "an entry lives within its second");
        assert_eq!(front.hits, 2);
    }

    #[test]
    fn replaces_the_least_recently_used_way() {
        let epochs = WriteEpochs::new(64);
        let mut front = FrontCache::new(1, 2);
        let keys: Vec<Vec<u8>> = (0..3).map(|i| format!("key{i}").into_bytes()).collect();
        front.insert(hash(&keys[0]), &keys[0], b"0", epochs.read(hash(&keys[0])), 1);
        front.insert(hash(&keys[1]), &keys[1], b"1", epochs.read(hash(&keys[1])), 1);
        assert!(front.get(hash(&keys[0]), &keys[0], &epochs, 1).is_some());
        front.insert(hash(&keys[2]), &keys[2], b"2", epochs.read(hash(&keys[2])), 1);
        assert!(front.get(hash(&keys[1]), &keys[1], &epochs, 1).is_none(), "key1 was the LRU way");
        assert!(front.get(hash(&keys[0]), &keys[0], &epochs, 1).is_some());
        assert!(front.get(hash(&keys[2]), &keys[2], &epochs, 1).is_some());
        // Re-inserting a key replaces its entry.
        front.insert(hash(&keys[2]), &keys[2], b"two", epochs.read(hash(&keys[2])), 1);
        assert_eq!(front.len(), 2);
        assert_eq!(front.get(hash(&keys[2]), &keys[2], &epochs, 1), Some(&b"two"[..]));
    }

    /// The protocol under threads: an owner writes increasing versions of one key (bump, then
    /// write, then acknowledge), a reader serves from its front cache or asks the owner (which
    /// answers the value and the epochs together); no read may return a version older than
    /// one acknowledged before the read began.
    #[test]
    fn never_serves_a_value_older_than_an_acknowledged_write() {
        let epochs = Arc::new(WriteEpochs::new(64));
        // The owner's item and what it answers a handed-over read with: value and epochs
        // read together (the owner runs one command at a time).
        let owner_state = Arc::new(Mutex::new(0u64));
        let acknowledged = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let key = b"celebrity";
        let h = hash(key);
        let writer = {
            let (epochs, owner_state, acknowledged, stop) =
                (epochs.clone(), owner_state.clone(), acknowledged.clone(), stop.clone());
            std::thread::spawn(move || {
                for version in 1..=20_000u64 {
                    let mut item = owner_state.lock().unwrap();
                    epochs.bump(h);
                    *item = version;
                    drop(item);
                    acknowledged.store(version, Ordering::Release);
                }
                stop.store(true, Ordering::Release);
            })
        };
        let mut front = FrontCache::new(4, 2);
        let (mut served_front, mut reads, mut after_stop) = (0u64, 0u64, 0u32);
        loop {
            if stop.load(Ordering::Acquire) {
                // A hundred reads after the last write: they come from the front.
                after_stop += 1;
                if after_stop > 100 {
                    break;
                }
            }
            let floor = acknowledged.load(Ordering::Acquire);
            let version = match front.get(h, key, &epochs, 7) {
                Some(reply) => {
                    served_front += 1;
                    u64::from_le_bytes(reply.try_into().unwrap())
                }
                None => {
                    let item = owner_state.lock().unwrap();
                    let (version, epoch) = (*item, epochs.read(h));
                    drop(item);
                    front.insert(h, key, &version.to_le_bytes(), epoch, 7);
                    version
                }
            };
            assert!(version >= floor, "read {version} after {floor} was acknowledged");
            reads += 1;
        }
        writer.join().unwrap();
        assert!(served_front > 0 && reads > served_front, "{served_front} of {reads} from the front");
    }
}
