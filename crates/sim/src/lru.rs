//! Exact LRU miss-ratio curves by stack distance (Mattson et al., 1970): one pass over a stream
//! gives the hit ratio of an LRU cache of every size at once, because LRU is a stack algorithm
//! (a cache's contents are always the top of one recency stack). With items of different
//! sizes the distance is counted in bytes: a get hits a cache of C bytes when its own item and
//! every distinct item touched since its previous access fit in C. The distances are
//! [`qs_store::mrc::StackDistances`]' (a Fenwick tree over time), the same code the server's
//! live estimate (`stats mrc`) runs on its sample of keys.

use crate::stream::{Access, Op};
use qs_store::mrc::StackDistances;

/// Hits of an LRU cache at each of a set of sizes, from one pass.
pub struct LruCurve {
    /// Cache sizes asked for, in bytes, ascending.
    sizes: Vec<u64>,
    /// Gets whose distance falls in (sizes[i-1], sizes[i]]; the last slot: beyond every size.
    buckets: Vec<u64>,
    stack: StackDistances,
    gets: u64,
    cold: u64,
}

impl LruCurve {
    /// A curve at `sizes` (bytes, any order).
    pub fn new(sizes: &[u64]) -> LruCurve {
        let mut sizes = sizes.to_vec();
        sizes.sort_unstable();
        sizes.dedup();
        LruCurve { buckets: vec![0; sizes.len() + 1], sizes, stack: StackDistances::new(), gets: 0, cold: 0 }
    }

    /// Replays one request. `bytes` is what the item takes in the cache. Gets fill on a miss
    /// (look-aside clients set what they missed), so every get and set leaves the key on top;
    /// a get hit keeps the cached item's size, a set or a filled miss stores `bytes`.
    ///
    /// Exact for streams where an item never shrinks and nothing is deleted (a key's size is
    /// fixed, as in the synthetic streams). A delete takes the key off the stack, and an item
    /// that shrinks keeps its place: an LRU cache could then hold a deeper key again that it
    /// has already evicted, which the stack counts as held, so there the curve is an upper bound.
    pub fn access(&mut self, access: &Access, bytes: u64) {
        match access.op {
            Op::Delete => self.stack.remove(access.key),
            Op::Set => {
                self.stack.access(access.key, Some(bytes));
            }
            Op::Get => {
                self.gets += 1;
                match self.stack.get_or_fill(access.key, bytes) {
                    Some(distance) => self.buckets[self.sizes.partition_point(|&size| size < distance)] += 1,
                    None => self.cold += 1,
                }
            }
        }
    }

    /// Gets replayed.
    pub fn gets(&self) -> u64 {
        self.gets
    }

    /// Gets of keys never seen before (misses at any size).
    pub fn cold_misses(&self) -> u64 {
        self.cold
    }

    /// Bytes of the distinct keys seen.
    pub fn working_set_bytes(&self) -> u64 {
        self.stack.bytes()
    }

    /// (size, hit ratio of gets) for each size asked for.
    pub fn hit_ratios(&self) -> Vec<(u64, f64)> {
        let mut hits = 0;
        self.sizes
            .iter()
            .zip(&self.buckets)
            .map(|(&size, &bucket)| {
                hits += bucket;
                (size, hits as f64 / self.gets.max(1) as f64)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{KeyDist, SizeDist, Synthetic};
    use proptest::prelude::*;

    /// A plain LRU cache of `capacity` bytes, simulated directly.
    fn brute_force(stream: &[(u64, u64, Op)], capacity: u64) -> (u64, u64) {
        let mut order: Vec<(u64, u64)> = Vec::new(); // most recent last
        let (mut gets, mut hits) = (0, 0);
        for &(key, mut bytes, op) in stream {
            let found = order.iter().position(|&(k, _)| k == key);
            if op == Op::Get {
                gets += 1;
                if let Some(index) = found {
                    hits += 1;
                    bytes = order[index].1;
                }
            }
            if let Some(index) = found {
                order.remove(index);
            }
            if op == Op::Delete || bytes > capacity {
                continue;
            }
            order.push((key, bytes));
            while order.iter().map(|&(_, b)| b).sum::<u64>() > capacity {
                order.remove(0);
            }
        }
        (gets, hits)
    }

    fn access(key: u64, op: Op) -> Access {
        Access { time: 0, key, key_size: 8, value_size: 8, op, ttl: 0 }
    }

    proptest! {
        #[test]
        fn stack_distances_give_what_an_lru_cache_does(
            stream in proptest::collection::vec((0u64..40, 0u8..10), 1..400),
            key_sizes in proptest::collection::vec(1u64..50, 40),
            sizes in proptest::collection::vec(50u64..800, 1..6),
        ) {
            // Each key has its size (as in a synthetic stream); no deletes (see `access`).
            let stream: Vec<(u64, u64, Op)> = stream
                .into_iter()
                .map(|(key, op)| (key, key_sizes[key as usize], if op < 3 { Op::Set } else { Op::Get }))
                .collect();
            let mut curve = LruCurve::new(&sizes);
            for &(key, bytes, op) in &stream {
                curve.access(&access(key, op), bytes);
            }
            for (size, ratio) in curve.hit_ratios() {
                let (gets, hits) = brute_force(&stream, size);
                prop_assert_eq!(gets, curve.gets());
                prop_assert!((ratio - hits as f64 / gets.max(1) as f64).abs() < 1e-12, "size {} ratio {} hits {}/{}", size, ratio, hits, gets);
            }
        }
    }

    #[test]
    fn renumbering_keeps_distances() {
        // More requests than the tree's first capacity, over few keys: renumbered many times.
        let recipe = Synthetic {
            keys: 500,
            requests: 300_000,
            dist: KeyDist::Zipf(0.8),
            set_share: 0.0,
            ycsb: None,
            key_size: 8,
            sizes: SizeDist::Fixed(8),
            rate: 1000,
            seed: 5,
            scramble: false,
            scan_share: 0.0,
            ttl_mix: false,
        };
        let mut curve = LruCurve::new(&[100 * 16, 250 * 16, 500 * 16]);
        for access in recipe.stream() {
            curve.access(&access, 16);
        }
        let ratios = curve.hit_ratios();
        // Everything fits at 500 items: only cold misses are left.
        let all = 1.0 - curve.cold_misses() as f64 / curve.gets() as f64;
        assert!((ratios[2].1 - all).abs() < 1e-12, "{ratios:?} vs {all}");
        assert!(ratios[0].1 < ratios[1].1 && ratios[1].1 < ratios[2].1);
        assert_eq!(curve.working_set_bytes(), 500 * 16);
    }
}
