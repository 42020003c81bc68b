//! Workload pieces shared by every benchmark: MICA's datasets, key and value bytes, a fast
//! seeded RNG, and YCSB's scrambled zipfian generator (Gray et al., SIGMOD'94).

/// MICA's datasets (NSDI'14 §5.1) plus memcached's largest key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dataset {
    /// 8-byte keys, 8-byte values.
    Tiny,
    /// 16-byte keys, 64-byte values.
    Small,
    /// 128-byte keys, 1024-byte values.
    Large,
    /// 250-byte keys, 1152-byte values.
    Xlarge,
}

impl Dataset {
    /// (key bytes, value bytes).
    pub const fn sizes(self) -> (usize, usize) {
        match self {
            Dataset::Tiny => (8, 8),
            Dataset::Small => (16, 64),
            Dataset::Large => (128, 1024),
            Dataset::Xlarge => (250, 1152),
        }
    }
}

/// Key popularity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// Zipf with exponent theta, ranks scrambled over the key space (YCSB).
    Zipf,
}

/// xoshiro-style 64-bit generator (wyrand): fast, seeded, good enough for load generation.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    /// Next 64 random bits.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xA076_1D64_78BD_642F);
        let t = (self.0 as u128).wrapping_mul((self.0 ^ 0xE703_7ED1_A0B4_28DB) as u128);
        (t >> 64) as u64 ^ t as u64
    }
    /// Uniform in [0, 1).
    #[inline(always)]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Uniform in [0, n).
    #[inline(always)]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// Gray et al.'s zipfian generator over ranks [0, n), as YCSB's ZipfianGenerator.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    theta: f64,
    alpha: f64,
    zeta_n: f64,
    eta: f64,
}

impl Zipf {
    /// A generator for `n` items with exponent `theta` (0 < theta < 1).
    pub fn new(n: u64, theta: f64) -> Zipf {
        assert!(n >= 2 && theta > 0.0 && theta < 1.0, "zipf needs n >= 2 and 0 < theta < 1");
        let zeta_n = zeta(n, theta);
        let zeta_2 = zeta(2, theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta_2 / zeta_n);
        Zipf { n: n as f64, theta, alpha: 1.0 / (1.0 - theta), zeta_n, eta }
    }

    /// The next rank (0 is the most popular).
    #[inline(always)]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        let u = rng.next_f64();
        let uz = u * self.zeta_n;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        let rank = (self.n * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        rank.min(self.n as u64 - 1)
    }
}

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| (i as f64).powf(-theta)).sum()
}

/// FNV-1a of a rank's bytes: YCSB's scramble of zipf ranks over the key space.
#[inline(always)]
pub fn scramble(rank: u64, keys: u64) -> u64 {
    let mut hash = 0xCBF2_9CE4_8422_2325u64;
    for byte in rank.to_le_bytes() {
        hash ^= byte as u64;
        hash = hash.wrapping_mul(0x0100_0000_01B3);
    }
    hash % keys
}

/// Draws key numbers from a distribution.
#[derive(Clone, Debug)]
pub enum KeyChooser {
    /// Uniform over [0, keys).
    Uniform(u64),
    /// Scrambled zipf over [0, keys).
    Zipf(Zipf, u64),
}

impl KeyChooser {
    /// A chooser for `keys` keys.
    pub fn new(distribution: Distribution, keys: u64, theta: f64) -> KeyChooser {
        match distribution {
            Distribution::Uniform => KeyChooser::Uniform(keys),
            Distribution::Zipf => KeyChooser::Zipf(Zipf::new(keys, theta), keys),
        }
    }
    /// The next key number.
    #[inline(always)]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        match self {
            KeyChooser::Uniform(keys) => rng.below(*keys),
            KeyChooser::Zipf(zipf, keys) => scramble(zipf.next(rng), *keys),
        }
    }
}

/// Writes key number `number` as `key.len()` bytes: its 8 little-endian bytes, then filler.
#[inline(always)]
pub fn write_key(number: u64, key: &mut [u8]) {
    let bytes = number.to_le_bytes();
    let head = key.len().min(8);
    key[..head].copy_from_slice(&bytes[..head]);
    for (i, byte) in key[head..].iter_mut().enumerate() {
        *byte = b'k' ^ i as u8;
    }
}

/// Writes a value for key `number` at `version`: the key number, the version, then filler, so a
/// reader can check it got the right key.
#[inline(always)]
pub fn write_value(number: u64, version: u32, value: &mut [u8]) {
    let head = value.len().min(8);
    value[..head].copy_from_slice(&number.to_le_bytes()[..head]);
    if value.len() >= 12 {
        value[8..12].copy_from_slice(&version.to_le_bytes());
    }
}

/// Whether `value` is one written for key `number`.
#[inline(always)]
pub fn value_matches(number: u64, value: &[u8]) -> bool {
    match value.first_chunk::<8>() {
        Some(head) => u64::from_le_bytes(*head) == number,
        None => value.iter().zip(number.to_le_bytes()).all(|(a, b)| *a == b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let zipf = Zipf::new(1000, 0.99);
        let mut rng = Rng::new(1);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[zipf.next(&mut rng) as usize] += 1;
        }
        assert!(counts[0] > counts[10] && counts[10] > counts[500], "{:?}", &counts[..12]);
        assert!(counts[0] > 10_000, "rank 0 takes a large share under theta 0.99");
    }

    #[test]
    fn uniform_below_covers_the_range() {
        let mut rng = Rng::new(2);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            seen[rng.below(10) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn keys_and_values_round_trip() {
        let mut key = [0u8; 16];
        write_key(42, &mut key);
        assert_eq!(&key[..8], &42u64.to_le_bytes());
        let mut value = [0u8; 64];
        write_value(42, 7, &mut value);
        assert!(value_matches(42, &value) && !value_matches(43, &value));
    }
}
