//! Partition skew (kvs-billion-rps-isca15 §6): with keys spread over partitions by hash and
//! key popularity zipf-distributed, how much more load does the hottest partition get than
//! the mean? Computed exactly, not sampled: each key's probability is summed into the
//! partition its key hash sends it to, as the server routes it (the key's bytes as
//! [`crate::engine::key_bytes`] makes them, the top bits of the xxh3 key hash, or for a
//! partition count that is not a power of two the same bits scaled to the count).

use crate::engine::key_bytes;
use qs_store::KeyHash;
use serde::Serialize;

/// One partition count's loads.
#[derive(Clone, Debug, Serialize)]
pub struct SkewPoint {
    /// Partitions.
    pub partitions: u32,
    /// Load of the hottest partition over the mean load.
    pub hottest_over_mean: f64,
    /// Share of the partitions loaded less than a fifth of the hottest.
    pub cold_share: f64,
    /// The hottest partition's share of all requests.
    pub hottest_share: f64,
}

/// The partition `hash` goes to among `partitions`.
pub fn partition_of(hash: KeyHash, partitions: u32) -> usize {
    (((hash.0 >> 32) * u64::from(partitions)) >> 32) as usize
}

/// Loads of `counts` partitions under zipf(`theta`) over `keys` keys of `key_size` bytes.
/// Which partition the hottest keys land in is chance: `placement` 0 names keys by rank
/// (key number rank - 1), any other value renames them by a seeded bijection, another draw.
pub fn skew(keys: u64, theta: f64, key_size: u16, counts: &[u32], placement: u64) -> Vec<SkewPoint> {
    let mut loads: Vec<Vec<f64>> = counts.iter().map(|&count| vec![0.0; count as usize]).collect();
    let mut key = Vec::new();
    let mut total = 0.0;
    for rank in 1..=keys {
        let weight = (-theta * (rank as f64).ln()).exp();
        total += weight;
        let number =
            if placement == 0 { rank - 1 } else { crate::stream::mix(rank ^ crate::stream::mix(placement)) };
        key_bytes(number, key_size, &mut key);
        let hash = KeyHash::of(&key);
        for (load, &count) in loads.iter_mut().zip(counts) {
            load[partition_of(hash, count)] += weight;
        }
    }
    loads
        .iter()
        .zip(counts)
        .map(|(load, &partitions)| {
            let hottest = load.iter().copied().fold(0.0, f64::max);
            let mean = total / f64::from(partitions);
            SkewPoint {
                partitions,
                hottest_over_mean: hottest / mean,
                cold_share: load.iter().filter(|&&value| value < hottest / 5.0).count() as f64
                    / f64::from(partitions),
                hottest_share: hottest / total,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_popularity_spreads_evenly_and_one_partition_has_everything() {
        // θ near 0: every key alike, so 10,000 keys over 4 partitions come close to even.
        let points = skew(10_000, 1e-9, 16, &[1, 4], 0);
        assert!((points[0].hottest_over_mean - 1.0).abs() < 1e-9);
        assert!(points[1].hottest_over_mean < 1.05, "{points:?}");
    }

    #[test]
    fn the_hottest_key_bounds_the_hottest_partition() {
        let (keys, theta) = (100_000u64, 0.99);
        let total: f64 = (1..=keys).map(|k| (k as f64).powf(-theta)).sum();
        let top = 1.0 / total;
        for point in skew(keys, theta, 16, &[16, 64, 240], 3) {
            assert!(point.hottest_share >= top, "{point:?}");
            assert!(point.hottest_over_mean >= top * f64::from(point.partitions), "{point:?}");
        }
    }

    #[test]
    fn power_of_two_counts_route_as_the_server_does() {
        let mut key = Vec::new();
        key_bytes(42, 16, &mut key);
        let hash = KeyHash::of(&key);
        assert_eq!(partition_of(hash, 16), hash.partition(4));
    }
}
