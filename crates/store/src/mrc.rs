//! Miss-ratio curves: LRU stack distances (Mattson et al., 1970), exact over every key
//! ([`StackDistances`]) or over a spatial sample of keys in fixed memory ([`Shards`],
//! Waldspurger et al., FAST'15), the estimate the server answers `stats mrc` with.
//!
//! A get of a key hits an LRU cache of C bytes when the key's own item and every distinct
//! item touched since the key's previous access fit in C: that sum is the get's stack
//! distance, and one pass over a stream gives the hit ratio at every size at once. Distances
//! come from a Fenwick tree over time: each key keeps its bytes at the position of its last
//! access, so the bytes touched since are one prefix-sum difference (O(log n)). Positions are
//! renumbered when the tree fills, so memory follows the keys held, not the stream's length.
//!
//! SHARDS samples keys, not requests: a key is in the sample when a hash of it falls below a
//! threshold (rate R), so every access of a sampled key is seen, and a distance among the
//! sampled keys, divided by R, estimates the distance among all keys. When more keys are
//! sampled than the memory allows, the threshold is lowered and the keys above it forgotten;
//! counts gathered at the higher rate are scaled down with it, so old and new ones weigh alike.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Sums over positions (a binary indexed tree).
struct Fenwick(Vec<u64>);

impl Fenwick {
    fn new(len: usize) -> Fenwick {
        Fenwick(vec![0; len + 1])
    }

    fn add(&mut self, position: usize, delta: i64) {
        let mut i = position + 1;
        while i < self.0.len() {
            self.0[i] = self.0[i].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Sum of positions `0..end`.
    fn prefix(&self, end: usize) -> u64 {
        let (mut i, mut sum) = (end, 0u64);
        while i > 0 {
            sum = sum.wrapping_add(self.0[i]);
            i &= i - 1;
        }
        sum
    }

    fn capacity(&self) -> usize {
        self.0.len() - 1
    }

    /// Zeroes every position, keeping the memory (and its pages resident: the write goes
    /// through an opaque reference, so it is not elided for a freshly zeroed allocation).
    fn clear(&mut self) {
        std::hint::black_box(&mut self.0[..]).fill(0);
    }
}

/// Hashes a u64 key by one folded 128-bit multiply: sequential keys and keyhashes alike spread
/// over every bit a hash map looks at.
#[derive(Default)]
pub struct FoldHasher(u64);

impl Hasher for FoldHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte) ^ self.0.rotate_left(8));
        }
    }

    fn write_u64(&mut self, key: u64) {
        let product = u128::from(key ^ self.0) * 0x9e37_79b9_7f4a_7c15;
        self.0 = (product as u64) ^ (product >> 64) as u64;
    }
}

type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<FoldHasher>>;

/// An LRU stack of keys with their bytes: what each access's stack distance is.
pub struct StackDistances {
    tree: Fenwick,
    /// Positions the tree is given per key held when it is renumbered (its size then grows;
    /// it never shrinks).
    spread: usize,
    /// Per key: position of its last access and its bytes there.
    last: KeyMap<(usize, u64)>,
    next: usize,
    /// Bytes of every key held.
    total: u64,
}

impl Default for StackDistances {
    fn default() -> StackDistances {
        StackDistances::new()
    }
}

impl StackDistances {
    /// An empty stack, for any number of keys: its tree grows to eight positions per key held.
    pub fn new() -> StackDistances {
        StackDistances { tree: Fenwick::new(1 << 12), spread: 8, last: KeyMap::default(), next: 0, total: 0 }
    }

    /// An empty stack for at most `keys` keys whose tree is allocated, and its pages written,
    /// now: four positions per key, renumbered in place whenever they are used up, so its
    /// memory stays what it is from the start (`stats mrc`'s estimator: the server's memory
    /// does not move as the sample fills).
    pub fn bounded(keys: usize) -> StackDistances {
        let mut tree = Fenwick::new((keys * 4).max(1 << 12));
        tree.clear();
        StackDistances { tree, spread: 4, last: KeyMap::default(), next: 0, total: 0 }
    }

    /// Puts `key` on top. Its bytes become `bytes`, or stay what they were when `None` (a key
    /// not held then is not put on the stack: its size is unknown). Returns the key's distance
    /// before this access (its bytes and those of every key above it), `None` for a key not held.
    pub fn access(&mut self, key: u64, bytes: Option<u64>) -> Option<u64> {
        self.touch(key, bytes, None)
    }

    /// A read that fills a miss, as a look-aside client does: puts `key` on top, keeping its
    /// bytes, or with `fill` bytes when it was not held. Returns its distance, as
    /// [`StackDistances::access`].
    pub fn get_or_fill(&mut self, key: u64, fill: u64) -> Option<u64> {
        self.touch(key, None, Some(fill))
    }

    fn touch(&mut self, key: u64, bytes: Option<u64>, fill: Option<u64>) -> Option<u64> {
        // Renumbering keeps the order (and so every distance): done first, positions are fresh.
        if self.next == self.tree.capacity() {
            self.renumber();
        }
        let next = self.next;
        let (distance, old, new) = match self.last.get_mut(&key) {
            Some(entry) => {
                let (position, held) = *entry;
                // Every key's bytes sit at a position below `next`: the prefix up to `next`
                // is `total`, so one walk of the tree gives the bytes above the key.
                let distance = self.total - self.tree.prefix(position + 1) + held;
                self.tree.add(position, -(held as i64));
                let new = bytes.unwrap_or(held);
                *entry = (next, new);
                (Some(distance), held, new)
            }
            None => {
                let new = bytes.or(fill)?;
                self.last.insert(key, (next, new));
                (None, 0, new)
            }
        };
        self.tree.add(next, new as i64);
        self.total = self.total - old + new;
        self.next += 1;
        distance
    }

    /// Takes `key` off the stack (a delete).
    pub fn remove(&mut self, key: u64) {
        if let Some((position, old)) = self.last.remove(&key) {
            self.tree.add(position, -(old as i64));
            self.total -= old;
        }
    }

    /// Keeps only the keys `keep` says to.
    pub fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) {
        let tree = &mut self.tree;
        let mut dropped = 0;
        self.last.retain(|&key, &mut (position, bytes)| {
            let kept = keep(key);
            if !kept {
                tree.add(position, -(bytes as i64));
                dropped += bytes;
            }
            kept
        });
        self.total -= dropped;
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }

    /// Bytes of the keys held.
    pub fn bytes(&self) -> u64 {
        self.total
    }

    /// The keys held, in no order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.last.keys().copied()
    }

    /// Packs the live positions into `0..keys` in their order, in a tree `spread` times that
    /// size or the one it has when that is larger (so the sort here comes once per
    /// `spread - 1` times as many accesses as keys held, or less often).
    fn renumber(&mut self) {
        let mut live: Vec<(usize, u64)> =
            self.last.iter().map(|(&key, &(position, _))| (position, key)).collect();
        live.sort_unstable();
        let want = (live.len() * self.spread).max(1 << 12);
        if want <= self.tree.capacity() {
            self.tree.clear();
        } else {
            self.tree = Fenwick::new(want);
        }
        for (new_position, (_, key)) in live.iter().enumerate() {
            let entry = self.last.get_mut(key).expect("live key");
            entry.0 = new_position;
            self.tree.add(new_position, entry.1 as i64);
        }
        self.next = live.len();
    }
}

/// What an access does to the LRU stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A read: counted, its distance a hit or a miss at each size; the key moves to the top.
    Get,
    /// A write of an item taking these bytes: the key moves to the top at that size.
    Set(u64),
    /// A touch, an append, an arithmetic update: the key moves to the top, not counted.
    Touch,
    /// A delete: the key leaves the stack.
    Delete,
}

/// Histogram buckets per doubling of the distance.
const STEPS_PER_OCTAVE: u32 = 32;
/// Histogram buckets: distances up to 2^64 bytes.
const BUCKETS: usize = 64 * STEPS_PER_OCTAVE as usize;
/// Sampling hashes take this many bits: the threshold's unit is 2^-SAMPLE_BITS.
pub const SAMPLE_BITS: u32 = 24;

/// The bucket holding distance `bytes`: bucket b holds (edge(b-1), edge(b)], edge(b) = 2^(b/32).
fn bucket_of(bytes: u64) -> usize {
    if bytes <= 1 {
        return 0;
    }
    let bucket = ((bytes as f64).log2() * f64::from(STEPS_PER_OCTAVE)).ceil() as usize;
    bucket.min(BUCKETS - 1)
}

/// The upper edge of bucket `bucket`, in bytes.
fn bucket_edge(bucket: usize) -> f64 {
    (bucket as f64 / f64::from(STEPS_PER_OCTAVE)).exp2()
}

/// A key's sampling hash: 24 bits, independent of the bits that choose its partition, bucket
/// and tag.
#[inline(always)]
pub fn sample_hash(keyhash: u64) -> u64 {
    let product = u128::from(keyhash) * 0xd6e8_feb8_6659_fd93;
    ((product as u64) ^ (product >> 64) as u64) >> (64 - SAMPLE_BITS)
}

/// SHARDS: the LRU miss-ratio curve of a stream, estimated from the keys whose sampling hash
/// falls below a threshold, in memory for at most `max_keys` keys.
pub struct Shards {
    /// Keys are sampled when `sample_hash(key) < threshold` (rate threshold / 2^24).
    threshold: u64,
    max_keys: usize,
    stack: StackDistances,
    /// Sampled gets by scaled distance (weights at the current rate).
    hits: Vec<f64>,
    /// Sampled gets (at the current rate), cold ones included.
    gets: f64,
    /// Sampled gets of keys not on the stack.
    cold: f64,
}

impl Shards {
    /// Sampling 1 key in `one_in` (at most), with room for `max_keys` sampled keys.
    pub fn new(one_in: u32, max_keys: usize) -> Shards {
        Shards {
            threshold: ((1u64 << SAMPLE_BITS) / u64::from(one_in.max(1))).max(1),
            max_keys: max_keys.max(16),
            stack: StackDistances::bounded(max_keys.max(16) + 1),
            hits: vec![0.0; BUCKETS],
            gets: 0.0,
            cold: 0.0,
        }
    }

    /// The sampling threshold: [`Shards::access`] wants only keys with
    /// `sample_hash(key) < threshold()`.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// The sampling rate.
    pub fn rate(&self) -> f64 {
        self.threshold as f64 / (1u64 << SAMPLE_BITS) as f64
    }

    /// Sampled keys held.
    pub fn keys(&self) -> usize {
        self.stack.len()
    }

    /// Estimated bytes of every key on the stack (sampled bytes / rate).
    pub fn working_set_bytes(&self) -> u64 {
        (self.stack.bytes() as f64 / self.rate()) as u64
    }

    /// Estimated gets since the start (sampled gets / rate).
    pub fn gets(&self) -> u64 {
        (self.gets / self.rate()) as u64
    }

    /// Whether `keyhash` is in the sample.
    #[inline(always)]
    pub fn sampled(&self, keyhash: u64) -> bool {
        sample_hash(keyhash) < self.threshold
    }

    /// Records an access of the key with hash `keyhash`; ignored when it is not sampled.
    pub fn access(&mut self, keyhash: u64, access: Access) {
        if !self.sampled(keyhash) {
            return;
        }
        match access {
            Access::Delete => self.stack.remove(keyhash),
            Access::Touch => {
                self.stack.access(keyhash, None);
            }
            Access::Set(bytes) => {
                self.stack.access(keyhash, Some(bytes));
            }
            Access::Get => {
                self.gets += 1.0;
                match self.stack.access(keyhash, None) {
                    Some(distance) => {
                        let bucket = bucket_of((distance as f64 / self.rate()) as u64);
                        self.hits[bucket] += 1.0;
                    }
                    None => self.cold += 1.0,
                }
            }
        }
        if self.stack.len() > self.max_keys {
            self.lower_rate();
        }
    }

    /// Lowers the threshold so that about 7/8 of the keys stay, forgets the others, and scales
    /// the counts to the new rate.
    fn lower_rate(&mut self) {
        let mut hashes: Vec<u64> = self.stack.keys().map(sample_hash).collect();
        let keep = self.max_keys * 7 / 8;
        let (_, &mut nth, _) = hashes.select_nth_unstable(keep);
        let old = self.rate();
        self.threshold = nth.max(1);
        let threshold = self.threshold;
        self.stack.retain(|key| sample_hash(key) < threshold);
        let scale = self.rate() / old;
        self.hits.iter_mut().for_each(|count| *count *= scale);
        self.gets *= scale;
        self.cold *= scale;
    }

    /// Estimated hit ratio of gets in an LRU cache of `bytes` (interpolated within the
    /// histogram bucket holding `bytes`, 1/32 of an octave wide).
    pub fn hit_ratio(&self, bytes: u64) -> f64 {
        if self.gets == 0.0 {
            return 0.0;
        }
        let bucket = bucket_of(bytes);
        let below: f64 = self.hits[..bucket].iter().sum();
        let low = if bucket == 0 { 0.0 } else { bucket_edge(bucket - 1) };
        let high = bucket_edge(bucket);
        let share = ((bytes as f64 - low) / (high - low)).clamp(0.0, 1.0);
        (below + self.hits[bucket] * share) / self.gets
    }

    /// [`Shards::hit_ratio`] with SHARDS' adjustment (Waldspurger et al., §4.2): the sample
    /// saw some number of gets where the rate predicts `rate * all_gets` (`all_gets`: every get
    /// since tracking began, sampled or not); the difference, which comes mostly from how many
    /// of the hottest keys fell in the sample, is taken as hits at the smallest distance.
    pub fn hit_ratio_adjusted(&self, bytes: u64, all_gets: u64) -> f64 {
        let expected = self.rate() * all_gets as f64;
        if expected <= 0.0 || self.gets == 0.0 {
            return self.hit_ratio(bytes);
        }
        let hits = self.hit_ratio(bytes) * self.gets + (expected - self.gets);
        (hits / expected).clamp(0.0, 1.0)
    }

    /// Forgets everything sampled; the rate goes back to 1 in `one_in`.
    pub fn reset(&mut self, one_in: u32) {
        *self = Shards::new(one_in, self.max_keys);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A plain LRU cache of `capacity` bytes over (key, bytes, is_get), simulated directly;
    /// gets fill on a miss. Returns (gets, hits).
    fn brute_force(stream: &[(u64, u64, bool)], capacity: u64) -> (u64, u64) {
        let mut order: Vec<(u64, u64)> = Vec::new(); // most recent last
        let (mut gets, mut hits) = (0, 0);
        for &(key, mut bytes, get) in stream {
            let found = order.iter().position(|&(k, _)| k == key);
            if get {
                gets += 1;
                if let Some(index) = found {
                    hits += 1;
                    bytes = order[index].1;
                }
            }
            if let Some(index) = found {
                order.remove(index);
            }
            if bytes > capacity {
                continue;
            }
            order.push((key, bytes));
            while order.iter().map(|&(_, b)| b).sum::<u64>() > capacity {
                order.remove(0);
            }
        }
        (gets, hits)
    }

    proptest! {
        #[test]
        fn distances_give_what_an_lru_cache_does(
            stream in proptest::collection::vec((0u64..40, 0u8..10), 1..400),
            key_sizes in proptest::collection::vec(1u64..50, 40),
            capacity in 50u64..800,
        ) {
            let stream: Vec<(u64, u64, bool)> =
                stream.into_iter().map(|(key, op)| (key, key_sizes[key as usize], op >= 3)).collect();
            let mut stack = StackDistances::new();
            let (mut gets, mut hits) = (0, 0);
            for &(key, bytes, get) in &stream {
                let distance = stack.access(key, Some(bytes));
                if get {
                    gets += 1;
                    hits += u64::from(distance.is_some_and(|d| d <= capacity));
                }
            }
            prop_assert_eq!((gets, hits), brute_force(&stream, capacity));
        }
    }

    #[test]
    fn renumbering_and_removal_keep_distances() {
        for stack in [StackDistances::new(), StackDistances::bounded(128)] {
            renumbering_and_removal_keep_distances_in(stack);
        }
    }

    #[test]
    fn a_bounded_stack_renumbers_in_place() {
        let mut stack = StackDistances::bounded(1000);
        let capacity = stack.tree.capacity();
        assert_eq!(capacity, 1 << 12);
        for round in 0..100u64 {
            for key in 0..1000 {
                stack.access(key, Some(1));
            }
            assert_eq!(stack.tree.capacity(), capacity, "round {round}: the tree was replaced");
        }
        assert_eq!(stack.access(0, None), Some(1000));
    }

    fn renumbering_and_removal_keep_distances_in(mut stack: StackDistances) {
        for round in 0..10_000u64 {
            for key in 0..100 {
                let distance = stack.access(key, Some(8));
                // Every other key was touched since: the whole stack is above.
                assert_eq!(distance, (round > 0).then_some(800), "round {round} key {key}");
            }
        }
        stack.remove(5);
        // Above 6: 7..=99, the last round's order.
        assert_eq!(stack.access(6, None), Some(94 * 8));
        assert_eq!(stack.access(5, None), None);
        stack.retain(|key| key % 2 == 0);
        assert_eq!((stack.len(), stack.bytes()), (50, 400));
        assert_eq!(stack.access(6, None), Some(8));
        // Above 8: 10..=98 even and 6.
        assert_eq!(stack.access(8, None), Some(47 * 8));
    }

    #[test]
    fn bucket_edges_enclose_their_distances() {
        for bytes in [2u64, 3, 100, 1 << 20, (1 << 20) + 1, 3 << 30, u64::MAX / 2] {
            let bucket = bucket_of(bytes);
            assert!(bucket_edge(bucket) >= bytes as f64 * 0.999_999, "{bytes}");
            assert!(bucket == 0 || bucket_edge(bucket - 1) < bytes as f64, "{bytes}");
        }
    }

    /// A zipf stream: key k drawn with weight (k+1)^-theta, by inverse transform.
    fn skewed(keys: u64, theta: f64, requests: u64, seed: u64) -> impl Iterator<Item = u64> {
        let weights: Vec<f64> = (0..keys).map(|k| ((k + 1) as f64).powf(-theta)).collect();
        let total: f64 = weights.iter().sum();
        let mut cumulative = Vec::with_capacity(keys as usize);
        let mut sum = 0.0;
        for w in weights {
            sum += w / total;
            cumulative.push(sum);
        }
        let mut state = seed;
        (0..requests).map(move |_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (state >> 11) as f64 / (1u64 << 53) as f64;
            cumulative.partition_point(|&c| c < u).min(keys as usize - 1) as u64
        })
    }

    #[test]
    fn a_sample_estimates_the_exact_curve() {
        // 200k keys, zipf 1: exact curve by stack distance, estimate from 1 key in 8 capped
        // at 4096 keys (the cap lowers the rate to about 1 in 40), with SHARDS' adjustment
        // (without it, the sample's share of the hottest keys decides: 5-17 points low here).
        let (keys, bytes) = (200_000u64, 64u64);
        let mut exact = StackDistances::new();
        let mut shards = Shards::new(8, 4096);
        let sizes = [keys * bytes / 16, keys * bytes / 4, keys * bytes];
        let mut exact_hits = [0u64; 3];
        let mut gets = 0u64;
        for key in skewed(keys, 1.0, 2_000_000, 7) {
            let keyhash = crate::KeyHash::of(&key.to_le_bytes()).0;
            gets += 1;
            if let Some(distance) = exact.access(keyhash, Some(bytes)) {
                for (hits, &size) in exact_hits.iter_mut().zip(&sizes) {
                    *hits += u64::from(distance <= size);
                }
            }
            shards.access(keyhash, Access::Get);
            shards.access(keyhash, Access::Set(bytes)); // a look-aside client fills a miss
        }
        assert!(shards.keys() <= 4096 && shards.rate() < 1.0 / 8.0, "rate {}", shards.rate());
        for (hits, &size) in exact_hits.iter().zip(&sizes) {
            let want = *hits as f64 / gets as f64;
            let got = shards.hit_ratio_adjusted(size, gets);
            assert!((want - got).abs() < 0.02, "size {size}: exact {want:.4} estimate {got:.4}");
        }
        let working_set = shards.working_set_bytes() as f64 / exact.bytes() as f64;
        assert!((0.9..1.1).contains(&working_set), "working set estimate off by {working_set}");
    }
}
