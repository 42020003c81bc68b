//! A small set-associative front cache in front of a main cache, as the NIC cache of
//! ../shared/papers/memcached-nic-cache.txt (§III-IV): fixed-size items, `ways` per set, FIFO
//! or LRU within a set. A set stores into the front cache (write-allocate); a get that misses
//! is answered by the main cache and, with read-allocate, stored in the front cache too. The
//! paper's method: a load phase sets every record, then the transaction phase's gets are
//! counted.

use crate::stream::{mix, Access, Op};
use serde::Serialize;

/// Replacement within a set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Policy {
    /// The oldest insertion goes.
    Fifo,
    /// The least recently used goes.
    Lru,
}

/// One front cache.
pub struct FrontCache {
    ways: usize,
    sets: usize,
    policy: Policy,
    read_allocate: bool,
    /// Key + 1 per way (0: empty).
    keys: Vec<u64>,
    /// Insertion (FIFO) or last use (LRU) per way.
    stamps: Vec<u64>,
    clock: u64,
    gets: u64,
    hits: u64,
}

impl FrontCache {
    /// A cache of `items` items (rounded down to whole sets) in sets of `ways`.
    pub fn new(items: usize, ways: usize, policy: Policy, read_allocate: bool) -> FrontCache {
        let ways = ways.max(1);
        let sets = (items / ways).max(1);
        FrontCache {
            ways,
            sets,
            policy,
            read_allocate,
            keys: vec![0; sets * ways],
            stamps: vec![0; sets * ways],
            clock: 0,
            gets: 0,
            hits: 0,
        }
    }

    /// Replays one request.
    pub fn access(&mut self, access: &Access) {
        self.clock += 1;
        let set = (mix(access.key) % self.sets as u64) as usize * self.ways;
        let tag = access.key + 1;
        let found = (set..set + self.ways).find(|&way| self.keys[way] == tag);
        match access.op {
            Op::Get => {
                self.gets += 1;
                match found {
                    Some(way) => {
                        self.hits += 1;
                        if self.policy == Policy::Lru {
                            self.stamps[way] = self.clock;
                        }
                    }
                    None if self.read_allocate => self.insert(set, tag),
                    None => {}
                }
            }
            Op::Set => match found {
                Some(way) if self.policy == Policy::Lru => self.stamps[way] = self.clock,
                Some(_) => {}
                None => self.insert(set, tag),
            },
            Op::Delete => {
                if let Some(way) = found {
                    self.keys[way] = 0;
                    self.stamps[way] = 0;
                }
            }
        }
    }

    fn insert(&mut self, set: usize, tag: u64) {
        // An empty way has stamp 0, the oldest possible.
        let victim = (set..set + self.ways).min_by_key(|&way| self.stamps[way]).expect("a way");
        self.keys[victim] = tag;
        self.stamps[victim] = self.clock;
    }

    /// Forgets the counts (the end of a load phase), keeping the contents.
    pub fn reset_counts(&mut self) {
        self.gets = 0;
        self.hits = 0;
    }

    /// Miss ratio of gets.
    pub fn miss_ratio(&self) -> f64 {
        1.0 - self.hits as f64 / self.gets.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(key: u64) -> Access {
        Access { time: 0, key, key_size: 8, value_size: 8, op: Op::Get, ttl: 0 }
    }

    #[test]
    fn a_one_set_cache_is_fully_associative_fifo_or_lru() {
        for (policy, expected_hits) in [(Policy::Fifo, 1), (Policy::Lru, 2)] {
            let mut cache = FrontCache::new(2, 2, policy, true);
            for key in [1, 2, 1, 3, 1] {
                cache.access(&get(key));
            }
            // FIFO: 3 evicts 1 (oldest insert); LRU: 3 evicts 2 (1 was just used).
            assert_eq!(cache.hits, expected_hits, "{policy:?}");
        }
    }

    #[test]
    fn read_no_allocate_never_fills_on_a_miss_but_sets_do() {
        let mut cache = FrontCache::new(64, 4, Policy::Lru, false);
        cache.access(&get(5));
        cache.access(&get(5));
        assert_eq!(cache.hits, 0);
        cache.access(&Access { op: Op::Set, ..get(5) });
        cache.access(&get(5));
        assert_eq!(cache.hits, 1);
    }

    #[test]
    fn a_direct_mapped_cache_loses_to_conflicts_what_an_associative_one_keeps() {
        // Two hot keys that share a set in a direct-mapped cache of 64 sets.
        let (a, b) = {
            let mut found = None;
            'outer: for a in 0..1000u64 {
                for b in a + 1..1000 {
                    if mix(a) % 64 == mix(b) % 64 {
                        found = Some((a, b));
                        break 'outer;
                    }
                }
            }
            found.expect("a conflicting pair")
        };
        let mut direct = FrontCache::new(64, 1, Policy::Lru, true);
        let mut associative = FrontCache::new(64, 2, Policy::Lru, true);
        for _ in 0..10 {
            for key in [a, b] {
                direct.access(&get(key));
                associative.access(&get(key));
            }
        }
        assert_eq!(direct.hits, 0);
        assert!(associative.hits > 0);
    }
}

/// One front cache's figure in [`experiment`].
#[derive(Clone, Debug, Serialize)]
pub struct FrontPoint {
    /// The YCSB workload (A, B, C, D, F).
    pub workload: String,
    /// Front cache items over main cache items (the records).
    pub ratio: f64,
    /// Ways per set.
    pub ways: usize,
    /// Replacement.
    pub policy: Policy,
    /// Read-allocate (a get miss fills the front cache).
    pub read_allocate: bool,
    /// Miss ratio of the transaction phase's gets.
    pub miss_ratio: f64,
}

/// The NIC paper's experiment: what to run.
#[derive(Clone, Debug)]
pub struct FrontPlan {
    /// Records: the main cache holds them all.
    pub records: u64,
    /// Transaction-phase requests per workload.
    pub requests: u64,
    /// YCSB workloads.
    pub workloads: Vec<crate::stream::Ycsb>,
    /// Front cache sizes as fractions of the records.
    pub ratios: Vec<f64>,
    /// Ways per set.
    pub ways: Vec<usize>,
    /// Replacement policies.
    pub policies: Vec<Policy>,
    /// Read-allocate, read-no-allocate or both.
    pub allocation: Vec<bool>,
    /// Random seed.
    pub seed: u64,
}

/// For each workload, a load phase setting every record in order, then `requests` YCSB
/// requests (scrambled zipf 0.99 as YCSB draws them, or latest for D) through every
/// combination of front cache size, ways, policy and allocation, all in one pass.
pub fn experiment(plan: &FrontPlan) -> Vec<FrontPoint> {
    let FrontPlan {
        records,
        requests,
        ref workloads,
        ref ratios,
        ref ways,
        ref policies,
        ref allocation,
        seed,
    } = *plan;
    use crate::stream::{KeyDist, SizeDist, Synthetic};
    let mut points = Vec::new();
    for &workload in workloads {
        let mut caches = Vec::new();
        for &ratio in ratios {
            for &ways in ways {
                for &policy in policies {
                    for &read_allocate in allocation {
                        let items = (records as f64 * ratio).round() as usize;
                        caches.push((ratio, FrontCache::new(items, ways, policy, read_allocate)));
                    }
                }
            }
        }
        for key in 0..records {
            let load = Access { time: 0, key, key_size: 16, value_size: 448, op: Op::Set, ttl: 0 };
            caches.iter_mut().for_each(|(_, cache)| cache.access(&load));
        }
        caches.iter_mut().for_each(|(_, cache)| cache.reset_counts());
        let recipe = Synthetic {
            keys: records,
            requests,
            dist: KeyDist::Zipf(0.99),
            set_share: 0.0,
            ycsb: Some(workload),
            key_size: 16,
            sizes: SizeDist::Fixed(448),
            rate: 100_000,
            seed,
            scramble: true,
            scan_share: 0.0,
            ttl_mix: false,
        };
        for access in recipe.stream() {
            caches.iter_mut().for_each(|(_, cache)| cache.access(&access));
        }
        for (ratio, cache) in &caches {
            points.push(FrontPoint {
                workload: format!("{workload:?}"),
                ratio: *ratio,
                ways: cache.ways,
                policy: cache.policy,
                read_allocate: cache.read_allocate,
                miss_ratio: cache.miss_ratio(),
            });
        }
    }
    points
}
