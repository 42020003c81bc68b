//! Request streams: what the simulators replay. Synthetic streams (uniform, zipf, YCSB's
//! mixes, the latest distribution) are generated on the fly from a seed, so a stream of any
//! length costs no memory and the same arguments give the same stream.

pub use crate::rng::{mix, Rng};
use crate::zipf::Zipf;

/// What a request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A read; on a miss the client fills the cache (look-aside) when the run says so.
    Get,
    /// A write of the whole value.
    Set,
    /// A removal.
    Delete,
}

/// One request of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// Seconds since the stream's start.
    pub time: u32,
    /// The key, as a number (traces' keys are hashed to one).
    pub key: u64,
    /// Key bytes.
    pub key_size: u16,
    /// Value bytes.
    pub value_size: u32,
    /// The operation.
    pub op: Op,
    /// Seconds to live from `time` (0: forever).
    pub ttl: u32,
}

/// How keys are chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeyDist {
    /// Every key alike.
    Uniform,
    /// Zipf with exponent θ over the keys by rank (key 0 the most popular).
    Zipf(f64),
    /// YCSB's latest: zipf over recency, the most recently inserted key the most popular.
    Latest(f64),
}

/// YCSB's core workloads (E, the scans, has no cache meaning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ycsb {
    /// 50% reads, 50% updates.
    A,
    /// 95% reads, 5% updates.
    B,
    /// Reads only.
    C,
    /// 95% reads of the latest keys, 5% inserts of new ones.
    D,
    /// 50% reads, 50% read-modify-writes (a read, then a write of the same key).
    F,
}

impl Ycsb {
    /// Parses `a`..`f` (case-insensitive, not `e`).
    pub fn parse(text: &str) -> Option<Ycsb> {
        match text.to_ascii_lowercase().as_str() {
            "a" => Some(Ycsb::A),
            "b" => Some(Ycsb::B),
            "c" => Some(Ycsb::C),
            "d" => Some(Ycsb::D),
            "f" => Some(Ycsb::F),
            _ => None,
        }
    }

    /// The share of requests that write.
    fn write_share(self) -> f64 {
        match self {
            Ycsb::A | Ycsb::F => 0.5,
            Ycsb::B | Ycsb::D => 0.05,
            Ycsb::C => 0.0,
        }
    }
}

/// How value sizes are chosen: a size belongs to a key (the same key always has the same
/// size), so a cache's byte use is stable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeDist {
    /// Every value this size.
    Fixed(u32),
    /// Uniform in `min..=max` by key.
    Uniform { min: u32, max: u32 },
}

impl SizeDist {
    /// The value size of `key`.
    pub fn size_of(self, key: u64) -> u32 {
        match self {
            SizeDist::Fixed(size) => size,
            SizeDist::Uniform { min, max } => min + (mix(key ^ 0x5151) % u64::from(max - min + 1)) as u32,
        }
    }

    /// The mean value size.
    pub fn mean(self) -> f64 {
        match self {
            SizeDist::Fixed(size) => f64::from(size),
            SizeDist::Uniform { min, max } => (f64::from(min) + f64::from(max)) / 2.0,
        }
    }
}

/// The scan's first key: past any key count a run uses.
const SCAN_KEYS_START: u64 = 1 << 48;

/// A synthetic stream's recipe.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Synthetic {
    /// Keys at the start (YCSB D inserts more).
    pub keys: u64,
    /// Requests to generate.
    pub requests: u64,
    /// Key popularity.
    pub dist: KeyDist,
    /// Share of requests that are sets (ignored when `ycsb` is set).
    pub set_share: f64,
    /// A YCSB mix instead of `set_share` (D implies the latest distribution).
    pub ycsb: Option<Ycsb>,
    /// Key bytes.
    pub key_size: u16,
    /// Value bytes.
    pub sizes: SizeDist,
    /// Requests per simulated second.
    pub rate: u64,
    /// Random seed.
    pub seed: u64,
    /// Spread the popular keys over the key numbers (YCSB's scrambled zipfian) instead of
    /// making key 0 the most popular: matters where key order does (a load phase that sets
    /// keys in order), not for popularity.
    pub scramble: bool,
    /// Share of requests that are gets of the next key of a scan over cold keys, past every
    /// other key and each read once (a batch job reading through a hot set).
    pub scan_share: f64,
    /// Every key a time to live of its own: a third of them 1 s to 5 minutes, the rest 1 hour
    /// to 1 day (sets and the fills after a miss carry it).
    pub ttl_mix: bool,
}

impl Synthetic {
    /// The stream.
    pub fn stream(&self) -> SyntheticStream {
        let dist = match (self.ycsb, self.dist) {
            (Some(Ycsb::D), KeyDist::Zipf(theta)) => KeyDist::Latest(theta),
            (Some(Ycsb::D), KeyDist::Uniform) => KeyDist::Latest(0.99),
            (_, dist) => dist,
        };
        let zipf = match dist {
            KeyDist::Uniform => None,
            KeyDist::Zipf(theta) | KeyDist::Latest(theta) => Some(Zipf::new(self.keys, theta)),
        };
        // A stride coprime with the key count permutes 0..keys.
        let mut stride = 2_654_435_761 % self.keys.max(1);
        while self.scramble && gcd(stride.max(1), self.keys) != 1 {
            stride += 1;
        }
        SyntheticStream {
            stride: stride.max(1),
            recipe: *self,
            dist,
            zipf,
            rng: Rng::new(self.seed),
            issued: 0,
            keys: self.keys,
            pending_write: None,
            scanned: 0,
        }
    }
}

/// A synthetic stream being generated.
pub struct SyntheticStream {
    recipe: Synthetic,
    stride: u64,
    dist: KeyDist,
    zipf: Option<Zipf>,
    rng: Rng,
    issued: u64,
    /// Keys so far (YCSB D's inserts add to them).
    keys: u64,
    /// YCSB F: the write half of a read-modify-write, issued next.
    pending_write: Option<u64>,
    /// Keys the scan has read.
    scanned: u64,
}

impl SyntheticStream {
    fn access(&self, key: u64, op: Op) -> Access {
        Access {
            time: (self.issued / self.recipe.rate.max(1)) as u32,
            key,
            key_size: self.recipe.key_size,
            value_size: self.recipe.sizes.size_of(key),
            op,
            ttl: if self.recipe.ttl_mix { ttl_of(key) } else { 0 },
        }
    }

    fn choose(&mut self) -> u64 {
        match self.dist {
            KeyDist::Uniform => self.rng.below(self.keys),
            KeyDist::Zipf(_) => {
                let rank = self.zipf.as_ref().expect("zipf").sample(&mut self.rng) - 1;
                if self.recipe.scramble {
                    let offset = mix(self.recipe.seed) % self.keys;
                    ((u128::from(rank) * u128::from(self.stride) + u128::from(offset))
                        % u128::from(self.keys)) as u64
                } else {
                    rank
                }
            }
            KeyDist::Latest(_) => {
                // Rank r (1 = the newest) among the keys so far; ranks past them wrap.
                let rank = self.zipf.as_ref().expect("zipf").sample(&mut self.rng) - 1;
                self.keys - 1 - rank % self.keys
            }
        }
    }
}

impl Iterator for SyntheticStream {
    type Item = Access;

    fn next(&mut self) -> Option<Access> {
        if self.issued >= self.recipe.requests {
            return None;
        }
        if let Some(key) = self.pending_write.take() {
            let access = self.access(key, Op::Set);
            self.issued += 1;
            return Some(access);
        }
        if self.recipe.scan_share > 0.0 && self.rng.unit() < self.recipe.scan_share {
            self.scanned += 1;
            let access = self.access(SCAN_KEYS_START + self.scanned, Op::Get);
            self.issued += 1;
            return Some(access);
        }
        let write = self.rng.unit() < self.recipe.ycsb.map_or(self.recipe.set_share, Ycsb::write_share);
        let access = match (self.recipe.ycsb, write) {
            (Some(Ycsb::D), true) => {
                self.keys += 1;
                self.access(self.keys - 1, Op::Set)
            }
            (Some(Ycsb::F), true) => {
                let key = self.choose();
                self.pending_write = Some(key);
                self.access(key, Op::Get)
            }
            (_, true) => {
                let key = self.choose();
                self.access(key, Op::Set)
            }
            (_, false) => {
                let key = self.choose();
                self.access(key, Op::Get)
            }
        };
        self.issued += 1;
        Some(access)
    }
}

/// A key's time to live under `ttl_mix`: a third of the keys 1 s to 5 minutes, the rest 1 hour
/// to 1 day, fixed by the key.
fn ttl_of(key: u64) -> u32 {
    let hash = mix(key ^ 0x0074_746c_5f6d_6978);
    if hash % 3 == 0 {
        1 + (hash >> 8) as u32 % 300
    } else {
        3600 + (hash >> 8) as u32 % (86_400 - 3600)
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recipe() -> Synthetic {
        Synthetic {
            keys: 1000,
            requests: 20_000,
            dist: KeyDist::Zipf(0.99),
            set_share: 0.1,
            ycsb: None,
            key_size: 16,
            sizes: SizeDist::Uniform { min: 10, max: 100 },
            rate: 1000,
            seed: 7,
            scramble: false,
            scan_share: 0.0,
            ttl_mix: false,
        }
    }

    #[test]
    fn a_recipe_gives_the_same_stream_every_time() {
        let first: Vec<_> = recipe().stream().collect();
        assert_eq!(first.len(), 20_000);
        assert_eq!(first, recipe().stream().collect::<Vec<_>>());
        assert_eq!(first.last().unwrap().time, 19);
    }

    #[test]
    fn the_ttl_mix_gives_a_third_of_the_keys_minutes_and_the_rest_hours() {
        let ttls: Vec<u32> = (0..30_000u64).map(ttl_of).collect();
        let short = ttls.iter().filter(|&&ttl| ttl <= 300).count() as f64 / ttls.len() as f64;
        assert!((short - 1.0 / 3.0).abs() < 0.02, "{short}");
        assert!(ttls.iter().all(|&ttl| (1..=300).contains(&ttl) || (3600..86_400).contains(&ttl)));
        let accesses: Vec<Access> = Synthetic { ttl_mix: true, ..recipe() }.stream().collect();
        assert!(accesses.iter().all(|a| a.ttl == ttl_of(a.key)), "a key keeps its time to live");
    }

    #[test]
    fn a_scan_reads_each_cold_key_once_at_its_share() {
        let accesses: Vec<Access> = Synthetic { scan_share: 0.25, ..recipe() }.stream().collect();
        let scanned: Vec<u64> = accesses.iter().filter(|a| a.key >= SCAN_KEYS_START).map(|a| a.key).collect();
        let share = scanned.len() as f64 / accesses.len() as f64;
        assert!((share - 0.25).abs() < 0.02, "{share}");
        assert!(scanned.windows(2).all(|pair| pair[0] < pair[1]), "each scanned key once, in order");
        let scans: Vec<&Access> = accesses.iter().filter(|a| a.key >= SCAN_KEYS_START).collect();
        assert!(scans.iter().all(|a| a.op == Op::Get));
    }

    #[test]
    fn set_share_and_sizes_hold() {
        let stream: Vec<_> = recipe().stream().collect();
        let sets = stream.iter().filter(|a| a.op == Op::Set).count() as f64 / stream.len() as f64;
        assert!((sets - 0.1).abs() < 0.01, "{sets}");
        for access in &stream {
            assert!((10..=100).contains(&access.value_size));
            assert_eq!(access.value_size, recipe().sizes.size_of(access.key));
            assert!(access.key < 1000);
        }
    }

    #[test]
    fn scrambling_permutes_the_keys_and_keeps_popularity() {
        let plain: Vec<_> = recipe().stream().map(|a| a.key).collect();
        let scrambled: Vec<_> = Synthetic { scramble: true, ..recipe() }.stream().map(|a| a.key).collect();
        assert!(scrambled.iter().all(|&key| key < 1000));
        let count = |keys: &[u64], key: u64| keys.iter().filter(|&&k| k == key).count();
        let hottest = (0..1000).max_by_key(|&key| count(&scrambled, key)).unwrap();
        assert_ne!(hottest, 0);
        assert_eq!(count(&scrambled, hottest), count(&plain, 0));
    }

    #[test]
    fn ycsb_f_writes_right_after_reading_the_same_key() {
        let stream: Vec<_> = Synthetic { ycsb: Some(Ycsb::F), ..recipe() }.stream().collect();
        let mut writes = 0;
        for pair in stream.windows(2) {
            if pair[1].op == Op::Set {
                assert_eq!(pair[0].op, Op::Get);
                assert_eq!(pair[0].key, pair[1].key);
                writes += 1;
            }
        }
        assert!((writes as f64 / stream.len() as f64 - 1.0 / 3.0).abs() < 0.02, "{writes}");
    }

    #[test]
    fn ycsb_d_inserts_new_keys_and_reads_the_newest_most() {
        let stream: Vec<_> = Synthetic { ycsb: Some(Ycsb::D), ..recipe() }.stream().collect();
        let inserts: Vec<_> = stream.iter().filter(|a| a.op == Op::Set).map(|a| a.key).collect();
        assert!(inserts.windows(2).all(|w| w[1] == w[0] + 1) && inserts[0] == 1000);
        // Reads in the second half go mostly to keys inserted during the run.
        let late = &stream[10_000..];
        let fresh = late.iter().filter(|a| a.op == Op::Get && a.key >= 1000).count();
        let reads = late.iter().filter(|a| a.op == Op::Get).count();
        assert!(fresh * 2 > reads, "{fresh} of {reads}");
    }
}
