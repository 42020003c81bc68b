//! Hot keys against the truth: a zipf stream's keys offered to Space-Saving summaries (one per
//! partition, keys routed by hash as the server routes them, merged as `stats hotkeys` merges
//! them), the merged top N held against the exact top N of the same stream.

use crate::engine::key_bytes;
use crate::skew::partition_of;
use crate::stream::Synthetic;
use hashbrown::HashMap;
use qs_store::hot::{merge, TopKeys};
use qs_store::KeyHash;
use serde::Serialize;

/// One of the exact top keys.
#[derive(Clone, Debug, Serialize)]
pub struct HotCheck {
    /// Its rank in the exact counts (1: the most frequent).
    pub rank: usize,
    /// The key.
    pub key: String,
    /// Its exact count.
    pub exact: u64,
    /// The merged summaries' estimate (none: not in their top N).
    pub estimate: Option<u64>,
    /// The estimate's stated error bound.
    pub error: Option<u64>,
    /// Whether exact <= estimate <= exact + error.
    pub within_bound: bool,
}

/// Runs `recipe`'s stream through `partitions` summaries of `capacity` keys each and checks
/// the merged top `n` against the exact top `n`.
pub fn check(recipe: &Synthetic, partitions: u32, capacity: usize, n: usize) -> Vec<HotCheck> {
    let mut summaries: Vec<TopKeys> = (0..partitions.max(1)).map(|_| TopKeys::new(capacity)).collect();
    let mut exact: HashMap<u64, u64> = HashMap::new();
    let mut key = Vec::new();
    for access in recipe.stream() {
        key_bytes(access.key, access.key_size, &mut key);
        let hash = KeyHash::of(&key);
        summaries[partition_of(hash, partitions.max(1))].offer(hash, &key);
        *exact.entry(access.key).or_default() += 1;
    }
    let merged = merge(&summaries.iter().map(TopKeys::top).collect::<Vec<_>>(), n);
    let mut truth: Vec<(u64, u64)> = exact.into_iter().collect();
    truth.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    truth
        .iter()
        .take(n)
        .enumerate()
        .map(|(rank, &(number, count))| {
            key_bytes(number, recipe.key_size, &mut key);
            let found = merged.iter().find(|hot| hot.key == key);
            HotCheck {
                rank: rank + 1,
                key: String::from_utf8_lossy(&key).into_owned(),
                exact: count,
                estimate: found.map(|hot| hot.count),
                error: found.map(|hot| hot.error),
                within_bound: found.is_some_and(|hot| hot.count >= count && hot.count - hot.error <= count),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{KeyDist, SizeDist};

    #[test]
    fn the_top_ten_of_a_zipf_stream_are_found_within_their_bounds() {
        for theta in [0.9, 0.99, 1.2] {
            let recipe = Synthetic {
                keys: 100_000,
                requests: 500_000,
                dist: KeyDist::Zipf(theta),
                set_share: 0.0,
                ycsb: None,
                key_size: 16,
                sizes: SizeDist::Fixed(32),
                rate: 100_000,
                seed: 9,
                scramble: true,
                scan_share: 0.0,
                ttl_mix: false,
            };
            for check in check(&recipe, 8, 64, 10) {
                assert!(check.within_bound, "theta {theta}: {check:?}");
            }
        }
    }
}
