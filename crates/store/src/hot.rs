//! The most frequent keys of a stream in fixed memory: Space-Saving (Metwally, Agrawal and El
//! Abbadi, "Efficient computation of frequent and top-k elements in data streams", 2005).
//!
//! `capacity` counters watch one key each. A watched key's access adds one to its counter; an
//! unwatched key takes over the counter with the smallest count m, starting at m + 1 with
//! error m. Every count over-estimates its key's true count by at most its error, and by at
//! most N / capacity for a stream of N accesses; any key whose true count exceeds N / capacity
//! is watched. A min-heap keeps the smallest counter at hand (O(log capacity) per access).

use crate::KeyHash;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// One watched key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotKey {
    /// The key.
    pub key: Vec<u8>,
    /// Its estimated accesses: never below the true count, above it by at most `error`.
    pub count: u64,
    /// How much `count` may over-estimate.
    pub error: u64,
}

/// A hasher for keys that are already hashes.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// Space-Saving over keys.
#[derive(Clone, Debug)]
pub struct TopKeys {
    capacity: usize,
    /// A min-heap on `count`.
    heap: Vec<(HotKey, u64)>,
    /// Key hash -> heap position.
    positions: HashMap<u64, usize, BuildHasherDefault<Prehashed>>,
    accesses: u64,
}

impl TopKeys {
    /// Watches at most `capacity` keys (at least one).
    pub fn new(capacity: usize) -> TopKeys {
        let capacity = capacity.max(1);
        TopKeys {
            capacity,
            heap: Vec::with_capacity(capacity),
            positions: HashMap::with_capacity_and_hasher(capacity * 2, BuildHasherDefault::default()),
            accesses: 0,
        }
    }

    /// Counts one access of `key` (whose hash is `hash`).
    pub fn offer(&mut self, hash: KeyHash, key: &[u8]) {
        self.accesses += 1;
        if let Some(&at) = self.positions.get(&hash.0) {
            // Two keys of one 64-bit hash share a counter: an over-count of at most their
            // collisions, which for xxh3 is nil in practice.
            self.heap[at].0.count += 1;
            self.sift_down(at);
            return;
        }
        if self.heap.len() < self.capacity {
            self.heap.push((HotKey { key: key.to_vec(), count: 1, error: 0 }, hash.0));
            let at = self.heap.len() - 1;
            self.positions.insert(hash.0, at);
            self.sift_up(at);
            return;
        }
        let (smallest, old_hash) = &mut self.heap[0];
        let floor = smallest.count;
        self.positions.remove(old_hash);
        smallest.key.clear();
        smallest.key.extend_from_slice(key);
        smallest.error = floor;
        smallest.count = floor + 1;
        *old_hash = hash.0;
        self.positions.insert(hash.0, 0);
        self.sift_down(0);
    }

    /// Accesses counted.
    pub fn accesses(&self) -> u64 {
        self.accesses
    }

    /// The watched keys, most frequent first.
    pub fn top(&self) -> Vec<HotKey> {
        let mut keys: Vec<HotKey> = self.heap.iter().map(|(key, _)| key.clone()).collect();
        keys.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        keys
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.heap.clear();
        self.positions.clear();
        self.accesses = 0;
    }

    /// Moves the entry at `from` to `to` in a sift (the sifted entry's own position is written
    /// once, where it ends: one map write a level, not two).
    #[inline(always)]
    fn step(&mut self, from: usize, to: usize) {
        self.heap.swap(from, to);
        self.positions.insert(self.heap[to].1, to);
    }

    fn sift_up(&mut self, mut at: usize) {
        let start = at;
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.heap[parent].0.count <= self.heap[at].0.count {
                break;
            }
            self.step(parent, at);
            at = parent;
        }
        if at != start {
            self.positions.insert(self.heap[at].1, at);
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        let start = at;
        loop {
            let (left, right) = (2 * at + 1, 2 * at + 2);
            let mut smallest = at;
            if left < self.heap.len() && self.heap[left].0.count < self.heap[smallest].0.count {
                smallest = left;
            }
            if right < self.heap.len() && self.heap[right].0.count < self.heap[smallest].0.count {
                smallest = right;
            }
            if smallest == at {
                break;
            }
            self.step(smallest, at);
            at = smallest;
        }
        if at != start {
            self.positions.insert(self.heap[at].1, at);
        }
    }
}

/// Merges summaries (of different workers' or partitions' streams): counts and errors of the
/// same key add up, the most frequent `n` first.
pub fn merge(summaries: &[Vec<HotKey>], n: usize) -> Vec<HotKey> {
    let mut merged: HashMap<Vec<u8>, (u64, u64)> = HashMap::new();
    for summary in summaries {
        for hot in summary {
            let entry = merged.entry(hot.key.clone()).or_default();
            entry.0 += hot.count;
            entry.1 += hot.error;
        }
    }
    let mut keys: Vec<HotKey> =
        merged.into_iter().map(|(key, (count, error))| HotKey { key, count, error }).collect();
    keys.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    keys.truncate(n);
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn offer(top: &mut TopKeys, key: &[u8]) {
        top.offer(KeyHash::of(key), key);
    }

    proptest! {
        #[test]
        fn counts_bound_the_truth_and_frequent_keys_are_watched(
            stream in proptest::collection::vec(0u8..40, 1..2000),
            capacity in 1usize..20,
        ) {
            let mut top = TopKeys::new(capacity);
            let mut exact = [0u64; 40];
            for &key in &stream {
                offer(&mut top, &[key]);
                exact[key as usize] += 1;
            }
            let n = stream.len() as u64;
            let watched = top.top();
            prop_assert!(watched.len() <= capacity);
            for hot in &watched {
                let truth = exact[hot.key[0] as usize];
                prop_assert!(hot.count >= truth && hot.count - hot.error <= truth, "{:?} truth {}", hot, truth);
                prop_assert!(hot.error <= n / capacity as u64);
            }
            for (key, &count) in exact.iter().enumerate() {
                if count > n / capacity as u64 {
                    prop_assert!(watched.iter().any(|hot| hot.key == [key as u8]), "key {} count {}", key, count);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn the_heap_and_its_positions_agree_after_every_access(
            stream in proptest::collection::vec(0u8..60, 1..600),
            capacity in 1usize..20,
        ) {
            let mut top = TopKeys::new(capacity);
            for &key in &stream {
                offer(&mut top, &[key]);
                prop_assert_eq!(top.positions.len(), top.heap.len());
                for (at, (hot, hash)) in top.heap.iter().enumerate() {
                    prop_assert_eq!(top.positions.get(hash), Some(&at));
                    prop_assert_eq!(*hash, KeyHash::of(&hot.key).0);
                    if at > 0 {
                        prop_assert!(top.heap[(at - 1) / 2].0.count <= hot.count);
                    }
                }
            }
        }
    }

    #[test]
    fn a_stream_of_few_keys_is_counted_exactly() {
        let mut top = TopKeys::new(8);
        for (key, times) in [(b"a", 5), (b"b", 3), (b"c", 9)] {
            for _ in 0..times {
                offer(&mut top, key);
            }
        }
        let keys: Vec<_> = top.top().into_iter().map(|hot| (hot.key, hot.count, hot.error)).collect();
        assert_eq!(keys, [(b"c".to_vec(), 9, 0), (b"a".to_vec(), 5, 0), (b"b".to_vec(), 3, 0)]);
        assert_eq!(top.accesses(), 17);
    }

    #[test]
    fn merging_adds_counts_and_errors_of_one_key() {
        let one = vec![
            HotKey { key: b"x".to_vec(), count: 10, error: 1 },
            HotKey { key: b"y".to_vec(), count: 4, error: 0 },
        ];
        let two = vec![
            HotKey { key: b"x".to_vec(), count: 3, error: 2 },
            HotKey { key: b"z".to_vec(), count: 8, error: 0 },
        ];
        let merged = merge(&[one, two], 2);
        assert_eq!(
            merged,
            [
                HotKey { key: b"x".to_vec(), count: 13, error: 3 },
                HotKey { key: b"z".to_vec(), count: 8, error: 0 }
            ]
        );
    }
}
