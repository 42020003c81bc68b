//! An idealised LFU cache of a byte capacity, simulated directly: every key's access count is
//! kept forever (perfect LFU, not only while cached), and the cache holds the most frequently
//! accessed keys that fit. A key that is not cached comes in only by pushing out keys accessed
//! fewer times than it (ties: the least recently used goes first), so a one-off key never
//! displaces a popular one. A reference for how much a frequency-based policy could gain; no
//! real cache keeps counts of keys it no longer holds.

use crate::stream::{Access, Op};
use hashbrown::HashMap;

/// One idealised LFU cache.
pub struct LfuCache {
    capacity: u64,
    used: u64,
    /// Accesses of every key ever seen.
    counts: HashMap<u64, u64>,
    /// Cached keys as a min-heap on (count, last access): (count, last access, key, bytes).
    heap: Vec<(u64, u64, u64, u64)>,
    /// Cached key -> heap position.
    positions: HashMap<u64, usize>,
    clock: u64,
    gets: u64,
    hits: u64,
}

impl LfuCache {
    /// An empty cache of `capacity` bytes.
    pub fn new(capacity: u64) -> LfuCache {
        LfuCache {
            capacity,
            used: 0,
            counts: HashMap::new(),
            heap: Vec::new(),
            positions: HashMap::new(),
            clock: 0,
            gets: 0,
            hits: 0,
        }
    }

    /// Replays one request; `bytes` is what the item takes. Gets fill on a miss, as in the
    /// other models, when the key earns its place.
    pub fn access(&mut self, access: &Access, bytes: u64) {
        self.clock += 1;
        if access.op == Op::Delete {
            if let Some(at) = self.positions.get(&access.key).copied() {
                self.remove(at);
            }
            return;
        }
        let count = {
            let count = self.counts.entry(access.key).or_default();
            *count += 1;
            *count
        };
        if access.op == Op::Get {
            self.gets += 1;
        }
        if let Some(at) = self.positions.get(&access.key).copied() {
            if access.op == Op::Get {
                self.hits += 1;
            }
            let entry = &mut self.heap[at];
            entry.0 = count;
            entry.1 = self.clock;
            if access.op == Op::Set {
                self.used = self.used - entry.3 + bytes;
                entry.3 = bytes;
            }
            self.sift_down(at);
            while self.used > self.capacity && !self.heap.is_empty() {
                self.remove(0);
            }
            return;
        }
        if bytes > self.capacity {
            return;
        }
        // Room is made only from keys less used (or as used and less recent) than this one.
        while self.used + bytes > self.capacity {
            let (smallest_count, smallest_clock, _, _) = self.heap[0];
            if (smallest_count, smallest_clock) >= (count, self.clock) {
                return;
            }
            self.remove(0);
        }
        self.heap.push((count, self.clock, access.key, bytes));
        self.used += bytes;
        let at = self.heap.len() - 1;
        self.positions.insert(access.key, at);
        self.sift_up(at);
    }

    fn remove(&mut self, at: usize) {
        let last = self.heap.len() - 1;
        self.swap(at, last);
        let (_, _, key, bytes) = self.heap.pop().expect("non-empty");
        self.positions.remove(&key);
        self.used -= bytes;
        if at < self.heap.len() {
            self.sift_down(at);
            self.sift_up(at);
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.positions.insert(self.heap[a].2, a);
        self.positions.insert(self.heap[b].2, b);
    }

    fn less(&self, a: usize, b: usize) -> bool {
        (self.heap[a].0, self.heap[a].1) < (self.heap[b].0, self.heap[b].1)
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if !self.less(at, parent) {
                break;
            }
            self.swap(parent, at);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        loop {
            let (left, right) = (2 * at + 1, 2 * at + 2);
            let mut smallest = at;
            if left < self.heap.len() && self.less(left, smallest) {
                smallest = left;
            }
            if right < self.heap.len() && self.less(right, smallest) {
                smallest = right;
            }
            if smallest == at {
                return;
            }
            self.swap(at, smallest);
            at = smallest;
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
    use proptest::prelude::*;

    fn access(key: u64, op: Op) -> Access {
        Access { time: 0, key, key_size: 8, value_size: 8, op, ttl: 0 }
    }

    /// The same policy, the slow way: a list scanned for its least-used, least-recent entry.
    fn brute_force(stream: &[(u64, u64, Op)], capacity: u64) -> u64 {
        let mut counts: std::collections::HashMap<u64, u64> = Default::default();
        let mut cached: Vec<(u64, u64, u64, u64)> = Vec::new(); // (count, clock, key, bytes)
        let mut hits = 0;
        for (clock, &(key, bytes, op)) in stream.iter().enumerate() {
            let clock = clock as u64 + 1;
            let found = cached.iter().position(|entry| entry.2 == key);
            if op == Op::Delete {
                if let Some(at) = found {
                    cached.remove(at);
                }
                continue;
            }
            let count = *counts.entry(key).and_modify(|c| *c += 1).or_insert(1);
            if let Some(at) = found {
                hits += u64::from(op == Op::Get);
                cached[at].0 = count;
                cached[at].1 = clock;
                if op == Op::Set {
                    cached[at].3 = bytes;
                }
                while cached.iter().map(|e| e.3).sum::<u64>() > capacity {
                    let min = (0..cached.len()).min_by_key(|&i| (cached[i].0, cached[i].1)).unwrap();
                    cached.remove(min);
                }
                continue;
            }
            if bytes > capacity {
                continue;
            }
            let mut admitted = true;
            while cached.iter().map(|e| e.3).sum::<u64>() + bytes > capacity {
                let min = (0..cached.len()).min_by_key(|&i| (cached[i].0, cached[i].1)).unwrap();
                if (cached[min].0, cached[min].1) >= (count, clock) {
                    admitted = false;
                    break;
                }
                cached.remove(min);
            }
            if admitted {
                cached.push((count, clock, key, bytes));
            }
        }
        hits
    }

    proptest! {
        #[test]
        fn the_heap_keeps_what_the_policy_says(
            stream in proptest::collection::vec((0u64..30, 0u8..10), 1..300),
            sizes in proptest::collection::vec(1u64..40, 30),
            capacity in 40u64..300,
        ) {
            let stream: Vec<(u64, u64, Op)> = stream
                .into_iter()
                .map(|(key, op)| (key, sizes[key as usize], match op { 0 => Op::Delete, 1..=2 => Op::Set, _ => Op::Get }))
                .collect();
            let mut cache = LfuCache::new(capacity);
            for &(key, bytes, op) in &stream {
                cache.access(&access(key, op), bytes);
            }
            prop_assert_eq!(cache.hits, brute_force(&stream, capacity));
        }
    }

    #[test]
    fn a_one_off_key_does_not_displace_a_popular_one() {
        let mut cache = LfuCache::new(20);
        for _ in 0..5 {
            cache.access(&access(1, Op::Get), 10);
            cache.access(&access(2, Op::Get), 10);
        }
        cache.access(&access(3, Op::Get), 10);
        cache.access(&access(1, Op::Get), 10);
        cache.access(&access(2, Op::Get), 10);
        assert_eq!((cache.gets(), cache.hits), (13, 10));
    }
}
