//! Zipf-distributed ranks by rejection-inversion (Hörmann and Derflinger, "Rejection-inversion to
//! generate variates from monotone discrete distributions", 1996): constant set-up time and
//! memory for any number of keys (192 Mi keys as cheaply as 1000) and any exponent θ > 0,
//! including θ ≥ 1, which YCSB's generator (Gray et al.) cannot do.

use crate::rng::Rng;

/// Ranks 1..=n with P(k) proportional to k^-θ.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    theta: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    s: f64,
}

impl Zipf {
    /// The distribution over `n` ranks (n ≥ 1) with exponent `theta` (> 0).
    pub fn new(n: u64, theta: f64) -> Zipf {
        assert!(n >= 1 && theta > 0.0, "zipf needs n >= 1 and theta > 0");
        let mut zipf = Zipf { n: n as f64, theta, h_integral_x1: 0.0, h_integral_n: 0.0, s: 0.0 };
        zipf.h_integral_x1 = zipf.h_integral(1.5) - 1.0;
        zipf.h_integral_n = zipf.h_integral(zipf.n + 0.5);
        zipf.s = 2.0 - zipf.h_integral_inverse(zipf.h_integral(2.5) - zipf.h(2.0));
        zipf
    }

    /// A rank in 1..=n.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        self.sample_with(|| rng.unit())
    }

    /// A rank in 1..=n, drawing uniform numbers in [0, 1) from `unit` (another generator's).
    #[inline]
    pub fn sample_with(&self, mut unit: impl FnMut() -> f64) -> u64 {
        loop {
            let u = self.h_integral_n + unit() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.s || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    fn h(&self, x: f64) -> f64 {
        (-self.theta * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.theta) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.theta)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// ln(1+x)/x, accurate near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x - 1)/x, accurate near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact probabilities of ranks 1..=n.
    fn exact(n: u64, theta: f64) -> Vec<f64> {
        let weights: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-theta)).collect();
        let total: f64 = weights.iter().sum();
        weights.iter().map(|w| w / total).collect()
    }

    #[test]
    fn frequencies_match_the_exact_distribution() {
        for theta in [0.5, 0.99, 1.0, 1.2] {
            let n = 50;
            let zipf = Zipf::new(n, theta);
            let mut rng = Rng::new(3);
            let draws = 400_000;
            let mut counts = vec![0u64; n as usize];
            for _ in 0..draws {
                let k = zipf.sample(&mut rng);
                assert!((1..=n).contains(&k));
                counts[k as usize - 1] += 1;
            }
            for (rank, p) in exact(n, theta).iter().enumerate() {
                let seen = counts[rank] as f64 / draws as f64;
                // Five standard deviations of a binomial share.
                let bound = 5.0 * (p * (1.0 - p) / draws as f64).sqrt() + 1e-4;
                assert!((seen - p).abs() < bound, "theta {theta} rank {}: {seen} vs {p}", rank + 1);
            }
        }
    }

    #[test]
    fn one_rank_and_huge_key_counts_work() {
        let mut rng = Rng::new(1);
        assert_eq!(Zipf::new(1, 0.99).sample(&mut rng), 1);
        let zipf = Zipf::new(192 << 20, 0.99);
        let top = (0..100_000).filter(|_| zipf.sample(&mut rng) == 1).count();
        // P(rank 1) = 1 / H(n, 0.99), about 0.046 for 192 Mi keys.
        assert!((3_900..5_300).contains(&top), "{top}");
    }
}
