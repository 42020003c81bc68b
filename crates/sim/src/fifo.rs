//! An exact FIFO cache of a byte capacity, simulated directly (FIFO is not a stack algorithm:
//! one simulation per size). Items leave in the order they came in; a hit does not move one.
//! A set of a cached key rewrites it where it is (as the engine's log does for a value that
//! fits), and a get miss fills the cache (look-aside).

use crate::stream::{Access, Op};
use hashbrown::HashMap;
use std::collections::VecDeque;

/// One FIFO cache.
pub struct FifoCache {
    capacity: u64,
    used: u64,
    /// Key -> (bytes, generation of its queue entry).
    items: HashMap<u64, (u64, u64)>,
    /// Insertion order: (key, generation); an entry whose generation no longer matches the
    /// key's is stale (the key was deleted and inserted again).
    queue: VecDeque<(u64, u64)>,
    generation: u64,
    gets: u64,
    hits: u64,
}

impl FifoCache {
    /// An empty cache of `capacity` bytes.
    pub fn new(capacity: u64) -> FifoCache {
        FifoCache {
            capacity,
            used: 0,
            items: HashMap::new(),
            queue: VecDeque::new(),
            generation: 0,
            gets: 0,
            hits: 0,
        }
    }

    /// Replays one request; `bytes` is what the item takes.
    pub fn access(&mut self, access: &Access, bytes: u64) {
        match access.op {
            Op::Get => {
                self.gets += 1;
                if self.items.contains_key(&access.key) {
                    self.hits += 1;
                } else {
                    self.insert(access.key, bytes);
                }
            }
            Op::Set => match self.items.get_mut(&access.key) {
                Some(entry) => {
                    self.used = self.used - entry.0 + bytes;
                    entry.0 = bytes;
                    self.evict_to_fit();
                }
                None => self.insert(access.key, bytes),
            },
            Op::Delete => {
                if let Some((old, _)) = self.items.remove(&access.key) {
                    self.used -= old;
                }
            }
        }
    }

    fn insert(&mut self, key: u64, bytes: u64) {
        if bytes > self.capacity {
            return;
        }
        self.generation += 1;
        self.items.insert(key, (bytes, self.generation));
        self.queue.push_back((key, self.generation));
        self.used += bytes;
        self.evict_to_fit();
    }

    /// Evicts from the oldest end until the items fit. The item just written is the newest,
    /// so it goes only if it alone outgrew the cache.
    fn evict_to_fit(&mut self) {
        while self.used > self.capacity {
            let Some((key, generation)) = self.queue.pop_front() else { break };
            if self.items.get(&key).is_some_and(|&(_, g)| g == generation) {
                let (bytes, _) = self.items.remove(&key).expect("present");
                self.used -= bytes;
            }
        }
    }

    /// Gets replayed.
    pub fn gets(&self) -> u64 {
        self.gets
    }

    /// Hit ratio of gets.
    pub fn hit_ratio(&self) -> f64 {
        self.hits as f64 / self.gets.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(key: u64, op: Op) -> Access {
        Access { time: 0, key, key_size: 8, value_size: 8, op, ttl: 0 }
    }

    #[test]
    fn evicts_in_insertion_order_and_hits_do_not_move_items() {
        let mut cache = FifoCache::new(30);
        for key in [1, 2, 3] {
            cache.access(&access(key, Op::Get), 10);
        }
        cache.access(&access(1, Op::Get), 10); // hit; 1 stays oldest
        cache.access(&access(4, Op::Get), 10); // miss; evicts 1
        cache.access(&access(1, Op::Get), 10); // miss; evicts 2
        cache.access(&access(3, Op::Get), 10); // hit
        assert_eq!((cache.gets(), cache.hits), (7, 2));
        assert!(!cache.items.contains_key(&2) && cache.items.contains_key(&3));
    }

    #[test]
    fn a_set_that_grows_an_item_evicts_older_ones_and_deletes_free_space() {
        let mut cache = FifoCache::new(30);
        for key in [1, 2, 3] {
            cache.access(&access(key, Op::Set), 10);
        }
        cache.access(&access(3, Op::Set), 20); // 40 bytes: 1 goes
        assert!(!cache.items.contains_key(&1) && cache.used == 30);
        cache.access(&access(2, Op::Delete), 0);
        assert_eq!(cache.used, 20);
        cache.access(&access(2, Op::Get), 10);
        assert_eq!(cache.used, 30);
        assert!(cache.items.contains_key(&3) && cache.items.contains_key(&2));
    }
}
