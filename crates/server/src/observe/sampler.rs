//! What a worker samples of the keys its commands run on, besides their replies: the hot keys
//! (`stats hotkeys`, a sampled share counted in a top-k) and the live miss-ratio curve
//! (`stats mrc`, the accesses of a hash-sampled share of keys, handed over in batches). The
//! engine offers each command's key ([`Sampler::offer`]); once per loop turn the worker hands
//! the batches over and picks up the operator's switches ([`Sampler::turn_mrc`],
//! [`Sampler::publish_hot`]). Off, each costs one compare a request.

use crate::observe::hotkeys::{self, HotKeys};
use crate::observe::mrc::LiveMrc;
use qs_store::hot::TopKeys;
use qs_store::mrc::Access;
use qs_store::KeyHash;

/// Sampled accesses a worker holds for `stats mrc` at most before handing them over.
const MRC_BATCH_MAX: usize = 256;

/// One worker's sampling of its keys.
pub struct Sampler {
    /// The worker it samples for.
    worker: usize,
    /// The keys this worker runs commands on, most frequent (`stats hotkeys`).
    hot: TopKeys,
    /// Counting keys (refreshed from [`HotKeys`] each loop turn): every n-th request, 0 off.
    hot_every: u32,
    /// Requests until the next one counted (sampling), and the generator of the gaps.
    hot_countdown: u32,
    hot_rng: u64,
    /// The reset generation `hot` counts since, when it was last published, with how many
    /// accesses counted then, and loop turns since the clock was last looked at for it.
    hot_generation: u64,
    hot_published: std::time::Instant,
    hot_published_accesses: u64,
    hot_turns: u32,
    /// `stats mrc`'s sampling threshold as of this loop turn (0: off).
    mrc_threshold: u64,
    /// Gets run while `stats mrc` sampled (published each loop turn).
    mrc_gets: u64,
    /// Sampled accesses not yet handed to `stats mrc` (each loop turn, or when full).
    mrc_batch: Vec<(u64, Access)>,
}

impl Sampler {
    /// Worker `worker`'s sampler, both samplings off until the first loop turn looks.
    pub fn new(worker: usize) -> Sampler {
        Sampler {
            worker,
            hot: TopKeys::new(hotkeys::WATCHED_PER_WORKER),
            hot_every: 0,
            hot_countdown: 1,
            hot_rng: 0x9e37_79b9_7f4a_7c15 ^ worker as u64,
            hot_generation: 0,
            hot_published: std::time::Instant::now(),
            hot_published_accesses: 0,
            hot_turns: 0,
            mrc_threshold: 0,
            mrc_gets: 0,
            mrc_batch: Vec::with_capacity(MRC_BATCH_MAX),
        }
    }

    /// Shows a command's key to `stats hotkeys` and `stats mrc`: whether it is a get, and
    /// what it is to the miss-ratio curve (asked only for a sampled key).
    #[inline(always)]
    pub fn offer(
        &mut self,
        mrc: &LiveMrc,
        hash: KeyHash,
        key: &[u8],
        (is_get, access): (bool, impl FnOnce() -> Access),
    ) {
        if self.hot_every != 0 {
            self.hot_countdown -= 1;
            if self.hot_countdown == 0 {
                self.hot_countdown = self.hot_gap();
                self.hot.offer(hash, key);
            }
        }
        if self.mrc_threshold != 0 {
            self.mrc_gets += u64::from(is_get);
            if qs_store::mrc::sample_hash(hash.0) < self.mrc_threshold {
                self.mrc_batch.push((hash.0, access()));
                if self.mrc_batch.len() == MRC_BATCH_MAX {
                    mrc.record(&mut self.mrc_batch);
                }
            }
        }
    }

    /// Requests until the next counted one: 1 when every request is counted, else uniform in
    /// 1..2N (mean N), so that no periodic pattern of requests aliases with the sampling.
    #[inline(never)]
    fn hot_gap(&mut self) -> u32 {
        if self.hot_every <= 1 {
            return 1;
        }
        // xorshift64
        self.hot_rng ^= self.hot_rng << 13;
        self.hot_rng ^= self.hot_rng >> 7;
        self.hot_rng ^= self.hot_rng << 17;
        1 + (self.hot_rng % u64::from(2 * self.hot_every - 1)) as u32
    }

    /// Once per loop turn, before the worker waits: hands `stats mrc` this worker's sampled
    /// accesses and count of gets, and picks up its threshold (on, off, lowered).
    pub fn turn_mrc(&mut self, mrc: &LiveMrc) {
        mrc.record(&mut self.mrc_batch);
        mrc.publish_gets(self.worker, self.mrc_gets);
        self.mrc_threshold = mrc.threshold();
    }

    /// Whether keys were counted since the last publish (the worker then wakes within
    /// [`hotkeys::PUBLISH_EVERY`] to publish them even if it has nothing else to do).
    pub fn hot_dirty(&self) -> bool {
        self.hot.accesses() != self.hot_published_accesses
    }

    /// Once per loop turn (`now`: at once): publishes this worker's hot keys when they changed
    /// and the last publish is older than [`hotkeys::PUBLISH_EVERY`], and picks up
    /// `stats hotkeys on|off|sample|reset`. The clock is looked at every 16th turn while busy.
    /// Sampled counts are published scaled up by the sampling rate.
    pub fn publish_hot(&mut self, hotkeys: &HotKeys, now: bool) {
        self.hot_turns = self.hot_turns.wrapping_add(1);
        if !now && self.hot_turns % 16 != 0 && self.hot_every == hotkeys.every() {
            return;
        }
        let every = hotkeys.every();
        if self.hot_every != every {
            self.hot_every = every;
            self.hot_countdown = self.hot_gap();
        }
        let generation = hotkeys.generation();
        if generation != self.hot_generation {
            self.hot_generation = generation;
            self.hot.clear();
            self.hot_published_accesses = 0;
            return;
        }
        if !self.hot_dirty() || !(now || self.hot_published.elapsed() >= hotkeys::PUBLISH_EVERY) {
            return;
        }
        self.hot_published = std::time::Instant::now();
        self.hot_published_accesses = self.hot.accesses();
        let scale = u64::from(self.hot_every.max(1));
        let mut top = self.hot.top();
        for hot in &mut top {
            hot.count *= scale;
            hot.error *= scale;
        }
        hotkeys.publish(self.worker, top);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gaps_between_counted_requests_average_the_sampling_rate() {
        let mut sampler = Sampler::new(3);
        sampler.hot_every = 1;
        assert!((0..100).all(|_| sampler.hot_gap() == 1));
        sampler.hot_every = 10;
        let gaps: Vec<u32> = (0..10_000).map(|_| sampler.hot_gap()).collect();
        assert!(gaps.iter().all(|&gap| (1..20).contains(&gap)), "a gap outside 1..2N");
        let mean = gaps.iter().map(|&gap| f64::from(gap)).sum::<f64>() / gaps.len() as f64;
        assert!((9.0..11.0).contains(&mean), "mean gap {mean}");
    }

    fn offer_gets(sampler: &mut Sampler, mrc: &LiveMrc, asked: &mut u32) {
        for key in 0..1000u64 {
            let hash = KeyHash(key.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            sampler.offer(
                mrc,
                hash,
                &key.to_le_bytes(),
                (true, || {
                    *asked += 1;
                    Access::Get
                }),
            );
        }
    }

    #[test]
    fn on_it_counts_the_gets_and_hands_the_sampled_accesses_over() {
        let mut sampler = Sampler::new(0);
        let mrc = LiveMrc::new(1, 1);
        sampler.turn_mrc(&mrc);
        let mut asked = 0;
        offer_gets(&mut sampler, &mrc, &mut asked);
        assert_eq!(sampler.mrc_gets, 1000);
        assert!(asked > 0, "no key sampled at one in one");
        sampler.turn_mrc(&mrc);
        assert!(sampler.mrc_batch.is_empty(), "the batch is handed over each turn");
    }

    #[test]
    fn off_it_counts_nothing_and_asks_nothing() {
        let mut sampler = Sampler::new(0);
        let mrc = LiveMrc::new(1, 0);
        sampler.turn_mrc(&mrc);
        let mut asked = 0;
        offer_gets(&mut sampler, &mrc, &mut asked);
        assert_eq!(asked, 0);
        assert!(!sampler.hot_dirty());
        assert_eq!(sampler.mrc_gets, 0);
    }
}
