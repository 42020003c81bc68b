//! Workload pieces shared by every benchmark: MICA's datasets, key and value bytes, a fast
//! seeded RNG, YCSB's scrambled zipfian generator (Gray et al., SIGMOD'94), and the open
//! loop's Poisson arrivals.

use std::time::Duration;

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
    /// YCSB's "latest": zipf over recency, the newest key the most popular (YCSB D).
    Latest,
    /// YCSB's "sequential": every key in turn, 0, 1, ... keys-1, then around again (what
    /// memaslap's gets do over the keys it has set: a working set that stays warm in the caches).
    Sequential,
    /// One hot key (key 0) takes [`HOT_SHARE`] of the requests, the rest are uniform over
    /// every key: the single celebrity key a partitioned cache must survive.
    Hot,
}

/// The hot key's share of requests under [`Distribution::Hot`].
pub const HOT_SHARE: f64 = 0.1;

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
        let mut zipf = Zipf { n: n as f64, theta, alpha: 1.0 / (1.0 - theta), zeta_n, eta: 0.0 };
        zipf.eta = zipf.eta_for_n();
        zipf
    }

    fn eta_for_n(&self) -> f64 {
        let zeta_2 = 1.0 + 0.5f64.powf(self.theta);
        (1.0 - (2.0 / self.n).powf(1.0 - self.theta)) / (1.0 - zeta_2 / self.zeta_n)
    }

    /// Ranks now `[0, n)` for a larger `n` (inserted items), updating zeta incrementally as
    /// YCSB's generator does.
    pub fn grow(&mut self, n: u64) {
        let old = self.n as u64;
        if n <= old {
            return;
        }
        self.zeta_n += (old + 1..=n).map(|i| (i as f64).powf(-self.theta)).sum::<f64>();
        self.n = n as f64;
        self.eta = self.eta_for_n();
    }

    /// How many ranks.
    pub fn items(&self) -> u64 {
        self.n as u64
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
    /// Scrambled zipf over [0, keys) with theta >= 1, beyond Gray's generator: rejection-inversion
    /// (qs-sim's sampler, the one its simulations draw from).
    ZipfHeavy(qs_sim::zipf::Zipf, u64),
    /// Zipf over recency: rank 0 is the newest key (the highest number).
    Latest(Zipf),
    /// [`KeyChooser::Latest`] with theta >= 1 (its set-up is constant time, so growing rebuilds it).
    LatestHeavy(qs_sim::zipf::Zipf, u64, f64),
    /// Keys in turn over [0, keys): the next one to hand out.
    Sequential { keys: u64, next: std::cell::Cell<u64> },
    /// Key 0 with probability [`HOT_SHARE`], else uniform over [0, keys).
    Hot(u64),
}

impl KeyChooser {
    /// A chooser for `keys` keys.
    pub fn new(distribution: Distribution, keys: u64, theta: f64) -> KeyChooser {
        match distribution {
            Distribution::Uniform => KeyChooser::Uniform(keys),
            Distribution::Zipf if theta >= 1.0 => {
                KeyChooser::ZipfHeavy(qs_sim::zipf::Zipf::new(keys.max(1), theta), keys)
            }
            Distribution::Latest if theta >= 1.0 => {
                KeyChooser::LatestHeavy(qs_sim::zipf::Zipf::new(keys.max(1), theta), keys, theta)
            }
            Distribution::Zipf => KeyChooser::Zipf(Zipf::new(keys, theta), keys),
            Distribution::Latest => KeyChooser::Latest(Zipf::new(keys, theta)),
            Distribution::Sequential => KeyChooser::Sequential { keys, next: std::cell::Cell::new(0) },
            Distribution::Hot => KeyChooser::Hot(keys),
        }
    }

    /// Keys `[0, keys)` now exist (after inserts): "latest" follows the newest; the others keep
    /// drawing from the keys they started with, as YCSB's do.
    pub fn grow(&mut self, keys: u64) {
        match self {
            KeyChooser::Latest(zipf) => zipf.grow(keys),
            KeyChooser::LatestHeavy(zipf, held, theta) if keys > *held => {
                *zipf = qs_sim::zipf::Zipf::new(keys, *theta);
                *held = keys;
            }
            _ => {}
        }
    }
    /// The next key number.
    #[inline(always)]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        match self {
            KeyChooser::Uniform(keys) => rng.below(*keys),
            KeyChooser::Zipf(zipf, keys) => scramble(zipf.next(rng), *keys),
            KeyChooser::ZipfHeavy(zipf, keys) => scramble(zipf.sample_with(|| rng.next_f64()) - 1, *keys),
            KeyChooser::Latest(zipf) => zipf.items() - 1 - zipf.next(rng),
            KeyChooser::LatestHeavy(zipf, keys, _) => *keys - zipf.sample_with(|| rng.next_f64()),
            KeyChooser::Sequential { keys, next } => {
                let key = next.get();
                next.set(if key + 1 == *keys { 0 } else { key + 1 });
                key
            }
            KeyChooser::Hot(keys) => {
                if rng.next_f64() < HOT_SHARE {
                    0
                } else {
                    rng.below(*keys)
                }
            }
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

/// What a value of some length carries: the key number's low bits and the version's low bits.
/// From 12 bytes: the whole key number (8 bytes, little-endian) then a 4-byte version; from 8
/// bytes (MICA's tiny items): 5 bytes of key number then 3 of version; shorter: key bytes only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueLayout {
    key_bytes: usize,
    version_bytes: usize,
}

impl ValueLayout {
    /// The layout of a `len`-byte value.
    pub const fn of(len: usize) -> ValueLayout {
        if len >= 12 {
            ValueLayout { key_bytes: 8, version_bytes: 4 }
        } else if len >= 8 {
            ValueLayout { key_bytes: 5, version_bytes: 3 }
        } else {
            ValueLayout { key_bytes: len, version_bytes: 0 }
        }
    }

    /// The key number bits a value keeps.
    pub const fn key_mask(self) -> u64 {
        if self.key_bytes >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * self.key_bytes)) - 1
        }
    }

    /// The version bits a value keeps (0: none, versions not checked).
    pub const fn version_mask(self) -> u32 {
        if self.version_bytes >= 4 {
            u32::MAX
        } else {
            (1u32 << (8 * self.version_bytes)) - 1
        }
    }
}

/// Writes a value for key `number` at `version` (see [`ValueLayout`]), filler after, so a
/// reader can check it got the right key and a version it may see.
#[inline(always)]
pub fn write_value(number: u64, version: u32, value: &mut [u8]) {
    let layout = ValueLayout::of(value.len());
    let (key, rest) = value.split_at_mut(layout.key_bytes);
    key.copy_from_slice(&number.to_le_bytes()[..layout.key_bytes]);
    let (stamp, filler) = rest.split_at_mut(layout.version_bytes);
    stamp.copy_from_slice(&version.to_le_bytes()[..layout.version_bytes]);
    for (i, byte) in filler.iter_mut().enumerate() {
        *byte = b'v' ^ i as u8;
    }
}

/// The (key number bits, version bits) a value carries.
#[inline(always)]
pub fn read_value(value: &[u8]) -> (u64, u32) {
    let layout = ValueLayout::of(value.len());
    let mut key = [0u8; 8];
    key[..layout.key_bytes].copy_from_slice(&value[..layout.key_bytes]);
    let mut version = [0u8; 4];
    version[..layout.version_bytes]
        .copy_from_slice(&value[layout.key_bytes..layout.key_bytes + layout.version_bytes]);
    (u64::from_le_bytes(key), u32::from_le_bytes(version))
}

/// Whether `value` is one written for key `number`.
#[inline(always)]
pub fn value_matches(number: u64, value: &[u8]) -> bool {
    read_value(value).0 == number & ValueLayout::of(value.len()).key_mask()
}

/// What a read's value says about the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Another key's value, or a version nobody wrote yet.
    Wrong,
    /// Older than a write acknowledged before the read was sent.
    Stale,
    /// A version the read may see.
    Fresh,
}

/// Judges a read of key `number` that returned `value`: `floor` is the newest version of the key
/// acknowledged before the read was sent, `issued` the newest sent so far (versions compare
/// modulo the layout's width; writes in flight may or may not be seen).
pub fn judge(number: u64, value: &[u8], floor: u32, issued: u32) -> Verdict {
    let layout = ValueLayout::of(value.len());
    let (key, version) = read_value(value);
    if key != number & layout.key_mask() {
        return Verdict::Wrong;
    }
    let mask = layout.version_mask();
    let (seen, floor, issued) = (version & mask, floor & mask, issued & mask);
    let window = issued.wrapping_sub(floor) & mask;
    let behind_issued = issued.wrapping_sub(seen) & mask;
    if behind_issued <= window {
        Verdict::Fresh
    } else if seen.wrapping_sub(floor) & mask > mask / 2 {
        // Behind the floor (within half the version space): an acknowledged write was lost.
        Verdict::Stale
    } else {
        Verdict::Wrong
    }
}

/// Poisson arrivals at `rate` per second, as offsets from the start of the run: the open
/// loop's clock-free schedule (tests drive it with a fake clock).
#[derive(Clone, Debug)]
pub struct Arrivals {
    mean_gap_secs: f64,
    next: Duration,
    rng: Rng,
}

impl Arrivals {
    /// Arrivals at `rate` per second from time zero.
    pub fn new(rate: f64, seed: u64) -> Arrivals {
        assert!(rate > 0.0, "the offered rate must be positive");
        let mut arrivals = Arrivals { mean_gap_secs: 1.0 / rate, next: Duration::ZERO, rng: Rng::new(seed) };
        arrivals.next = arrivals.gap();
        arrivals
    }

    fn gap(&mut self) -> Duration {
        // Inverse transform of the exponential distribution; 1 - u is in (0, 1].
        let u = 1.0 - self.rng.next_f64();
        Duration::from_secs_f64(-u.ln() * self.mean_gap_secs)
    }

    /// The next arrival due at or before `now`, advancing past it; `None` when the next is
    /// later. A caller that falls behind gets every missed arrival with its original time.
    pub fn due(&mut self, now: Duration) -> Option<Duration> {
        if self.next > now {
            return None;
        }
        let due = self.next;
        let gap = self.gap();
        self.next += gap;
        Some(due)
    }

    /// When the next arrival is due.
    pub fn next_at(&self) -> Duration {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_follow_a_poisson_process_on_a_fake_clock() {
        let rate = 10_000.0;
        let mut arrivals = Arrivals::new(rate, 7);
        let mut times = Vec::new();
        // Tick the fake clock every 100 µs for 10 s.
        for tick in 1..=100_000u64 {
            let now = Duration::from_micros(tick * 100);
            while let Some(due) = arrivals.due(now) {
                assert!(due <= now, "an arrival came before its time");
                times.push(due.as_secs_f64());
            }
        }
        let count = times.len() as f64;
        assert!((count - 100_000.0).abs() < 1_500.0, "{count} arrivals in 10 s at 10k/s");
        let gaps: Vec<f64> = times.windows(2).map(|pair| pair[1] - pair[0]).collect();
        assert!(gaps.iter().all(|&gap| gap >= 0.0), "arrivals go forward");
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let variance = gaps.iter().map(|gap| (gap - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        // Exponential gaps: mean 1/rate and a coefficient of variation of 1.
        assert!((mean * rate - 1.0).abs() < 0.02, "mean gap {mean}");
        assert!((variance.sqrt() / mean - 1.0).abs() < 0.03, "cv {}", variance.sqrt() / mean);
        // Poisson counts per 10 ms window: variance equals the mean (100).
        let mut windows = vec![0.0f64; 1000];
        for time in &times {
            windows[((time * 100.0) as usize).min(999)] += 1.0;
        }
        let window_mean = windows.iter().sum::<f64>() / 1000.0;
        let window_var = windows.iter().map(|n| (n - window_mean).powi(2)).sum::<f64>() / 1000.0;
        assert!((window_var / window_mean - 1.0).abs() < 0.15, "dispersion {}", window_var / window_mean);
    }

    #[test]
    fn a_late_caller_gets_every_missed_arrival_at_its_own_time() {
        let mut arrivals = Arrivals::new(1_000.0, 3);
        assert_eq!(arrivals.due(Duration::ZERO), None);
        // The generator stalls for a second: the arrivals it missed keep their schedule, so
        // their latency counts from then (no coordinated omission).
        let late = Duration::from_secs(1);
        let missed: Vec<Duration> = std::iter::from_fn(|| arrivals.due(late)).collect();
        assert!((900..1100).contains(&missed.len()), "{} missed", missed.len());
        assert!(missed.windows(2).all(|pair| pair[0] <= pair[1]));
        assert!(missed[0] < Duration::from_millis(20), "the first was due at {:?}", missed[0]);
        assert!(arrivals.next_at() > late);
    }

    #[test]
    fn zipf_beyond_one_follows_its_law() {
        // theta 1.2 over 1000 keys: Gray's generator cannot, rejection-inversion can. The most
        // drawn key takes 1/H(1000, 1.2) of the draws, the next (1/2)^1.2 of that.
        let harmonic: f64 = (1..=1000).map(|k| (k as f64).powf(-1.2)).sum();
        for distribution in [Distribution::Zipf, Distribution::Latest] {
            let chooser = KeyChooser::new(distribution, 1000, 1.2);
            let mut rng = Rng::new(7);
            let mut counts = vec![0u32; 1000];
            for _ in 0..200_000 {
                counts[chooser.next(&mut rng) as usize] += 1;
            }
            let mut sorted = counts.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            let top = sorted[0] as f64 / 200_000.0;
            assert!((top - 1.0 / harmonic).abs() < 0.01, "{top} vs {}", 1.0 / harmonic);
            let second = sorted[1] as f64 / sorted[0] as f64;
            assert!((second - 0.5f64.powf(1.2)).abs() < 0.03, "{second}");
            if distribution == Distribution::Latest {
                assert_eq!(sorted[0], counts[999], "latest: the newest key is the hottest");
            }
        }
        let mut latest = KeyChooser::new(Distribution::Latest, 10, 1.5);
        latest.grow(20);
        let mut rng = Rng::new(3);
        assert!((0..1000).map(|_| latest.next(&mut rng)).any(|key| key >= 10), "grown keys are drawn");
        assert!((0..1000).all(|_| latest.next(&mut rng) < 20));
    }

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
    fn hot_gives_one_key_its_share_and_spreads_the_rest() {
        let chooser = KeyChooser::new(Distribution::Hot, 1000, 0.99);
        let mut rng = Rng::new(3);
        let mut counts = vec![0u32; 1000];
        for _ in 0..200_000 {
            counts[chooser.next(&mut rng) as usize] += 1;
        }
        // Key 0: 10% plus its uniform share (0.09%); any other key about 0.09%.
        let hot = f64::from(counts[0]) / 200_000.0;
        assert!((hot - 0.1009).abs() < 0.003, "hot share {hot}");
        let coldest = *counts[1..].iter().min().unwrap();
        let warmest = *counts[1..].iter().max().unwrap();
        assert!(coldest > 100 && warmest < 260, "{coldest}..{warmest}");
    }

    #[test]
    fn sequential_visits_every_key_in_turn_and_wraps() {
        let chooser = KeyChooser::new(Distribution::Sequential, 5, 0.99);
        let mut rng = Rng::new(3);
        let drawn: Vec<u64> = (0..12).map(|_| chooser.next(&mut rng)).collect();
        assert_eq!(drawn, [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1]);
    }

    #[test]
    fn keys_and_values_round_trip() {
        let mut key = [0u8; 16];
        write_key(42, &mut key);
        assert_eq!(&key[..8], &42u64.to_le_bytes());
        for len in [4, 8, 11, 12, 64, 1152] {
            let mut value = vec![0u8; len];
            write_value(42, 7, &mut value);
            assert!(value_matches(42, &value) && !value_matches(43, &value), "{len}");
            let (key, version) = read_value(&value);
            assert_eq!(key, 42);
            assert_eq!(version, 7 & ValueLayout::of(len).version_mask());
        }
    }

    #[test]
    fn reads_are_judged_by_key_and_version() {
        let value = |key: u64, version: u32, len: usize| {
            let mut value = vec![0u8; len];
            write_value(key, version, &mut value);
            value
        };
        for len in [8, 64] {
            // Acknowledged up to 5, writes 6 and 7 in flight: 5, 6 and 7 may be seen.
            for seen in 5..=7 {
                assert_eq!(judge(9, &value(9, seen, len), 5, 7), Verdict::Fresh, "{len} {seen}");
            }
            assert_eq!(judge(9, &value(9, 4, len), 5, 7), Verdict::Stale);
            assert_eq!(judge(9, &value(9, 0, len), 5, 7), Verdict::Stale);
            assert_eq!(judge(9, &value(9, 8, len), 5, 7), Verdict::Wrong, "never written");
            assert_eq!(judge(9, &value(10, 6, len), 5, 7), Verdict::Wrong, "another key");
        }
        // Versions wrap in a 3-byte field: acknowledged 0xFFFFFE, issued 1 (wrapped).
        let mask = ValueLayout::of(8).version_mask();
        assert_eq!(mask, 0xFF_FFFF);
        assert_eq!(judge(3, &value(3, 0xFF_FFFF, 8), 0xFF_FFFE, 1), Verdict::Fresh);
        assert_eq!(judge(3, &value(3, 0, 8), 0xFF_FFFE, 1), Verdict::Fresh);
        assert_eq!(judge(3, &value(3, 0xFF_FFFD, 8), 0xFF_FFFE, 1), Verdict::Stale);
        assert_eq!(judge(3, &value(3, 2, 8), 0xFF_FFFE, 1), Verdict::Wrong);
        // Short values carry no version: only the key is checked.
        assert_eq!(judge(3, &value(3, 0, 4), 9, 12), Verdict::Fresh);
    }

    /// Chi-square of observed counts against expected probabilities.
    fn chi_square(counts: &[u64], expected: &[f64]) -> f64 {
        let total: u64 = counts.iter().sum();
        counts
            .iter()
            .zip(expected)
            .map(|(&seen, &p)| {
                let want = p * total as f64;
                (seen as f64 - want).powi(2) / want
            })
            .sum()
    }

    /// The exact distribution of Gray et al.'s generator over ranks: rank 0 for u < 1/zeta(n),
    /// rank 1 up to (1 + 0.5^theta)/zeta(n), then floor(n (eta u - eta + 1)^alpha), which is
    /// at least k from u = ((k/n)^(1/alpha) - 1 + eta) / eta.
    fn gray_probabilities(zipf: &Zipf) -> Vec<f64> {
        let n = zipf.items() as usize;
        let u1 = (1.0 + 0.5f64.powf(zipf.theta)) / zipf.zeta_n;
        let from = |k: usize| ((k as f64 / zipf.n).powf(1.0 / zipf.alpha) - 1.0 + zipf.eta) / zipf.eta;
        let mut p = vec![0.0; n];
        p[0] = 1.0 / zipf.zeta_n;
        p[1] = 0.5f64.powf(zipf.theta) / zipf.zeta_n;
        for (k, share) in p.iter_mut().enumerate() {
            let low = if k == 0 { u1 } else { from(k).max(u1) };
            let high = if k + 1 == n { 1.0 } else { from(k + 1).min(1.0) };
            *share += (high - low).max(0.0);
        }
        p
    }

    #[test]
    fn zipf_matches_theory_by_chi_square() {
        // Small n, where every rank has a large expected count; critical values at p = 0.001.
        // Gray's generator is exact for ranks 0 and 1 and approximates the rest with a
        // continuous curve (YCSB's, deliberately): its draws must fit that exact
        // distribution, whose distance from pure zipf is bounded.
        for (n, theta, critical) in
            [(3u64, 0.99, 13.82), (10, 0.99, 27.88), (10, 0.5, 27.88), (30, 0.8, 59.70)]
        {
            let zipf = Zipf::new(n, theta);
            let mut rng = Rng::new(n ^ theta.to_bits());
            let mut counts = vec![0u64; n as usize];
            for _ in 0..200_000 {
                counts[zipf.next(&mut rng) as usize] += 1;
            }
            let expected = gray_probabilities(&zipf);
            assert!((expected.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{expected:?}");
            let statistic = chi_square(&counts, &expected);
            assert!(statistic < critical, "n {n} theta {theta}: chi-square {statistic:.1} >= {critical}");
            // Against pure zipf: ranks 0 and 1 exact, total variation under 6%.
            let norm = zeta(n, theta);
            let pure: Vec<f64> = (1..=n).map(|i| (i as f64).powf(-theta) / norm).collect();
            assert!((expected[0] - pure[0]).abs() < 1e-12 && (expected[1] - pure[1]).abs() < 0.02);
            let distance: f64 = expected.iter().zip(&pure).map(|(a, b)| (a - b).abs()).sum::<f64>() / 2.0;
            assert!(distance < 0.06, "n {n} theta {theta}: total variation {distance:.3}");
        }
    }

    #[test]
    fn a_grown_zipf_equals_one_built_at_that_size() {
        let mut grown = Zipf::new(100, 0.99);
        grown.grow(1000);
        let built = Zipf::new(1000, 0.99);
        assert!((grown.zeta_n - built.zeta_n).abs() < 1e-9);
        assert!((grown.eta - built.eta).abs() < 1e-12);
        assert_eq!(grown.items(), 1000);
    }

    #[test]
    fn latest_prefers_the_newest_keys_and_follows_inserts() {
        let mut chooser = KeyChooser::new(Distribution::Latest, 1000, 0.99);
        let mut rng = Rng::new(5);
        let draws: Vec<u64> = (0..10_000).map(|_| chooser.next(&mut rng)).collect();
        assert!(draws.iter().all(|&key| key < 1000));
        let newest = draws.iter().filter(|&&key| key == 999).count();
        assert!(newest > 1000, "the newest key is the most popular: {newest}");
        chooser.grow(1010);
        let after: Vec<u64> = (0..10_000).map(|_| chooser.next(&mut rng)).collect();
        assert!(after.iter().all(|&key| key < 1010));
        assert!(after.iter().filter(|&&key| key == 1009).count() > 1000);
    }

    #[test]
    fn scrambling_spreads_the_hot_ranks_over_the_key_space() {
        let keys = 1_000_000;
        let hot: Vec<u64> = (0..100).map(|rank| scramble(rank, keys)).collect();
        assert!(hot.iter().all(|&key| key < keys));
        // The 100 hottest keys land all over the space, not on the lowest numbers.
        let low = hot.iter().filter(|&&key| key < keys / 10).count();
        assert!((2..=25).contains(&low), "{low} of the hottest 100 in the lowest tenth");
        let mut unique = hot.clone();
        unique.sort_unstable();
        unique.dedup();
        assert!(unique.len() >= 99, "distinct ranks stay distinct keys");
        // Skew survives: under scrambled zipf the most drawn key takes a large share.
        let chooser = KeyChooser::new(Distribution::Zipf, keys, 0.99);
        let mut rng = Rng::new(9);
        let top = scramble(0, keys);
        let hits = (0..100_000).filter(|_| chooser.next(&mut rng) == top).count();
        assert!(hits > 3_000, "the hottest key drew {hits} of 100000");
    }
}
