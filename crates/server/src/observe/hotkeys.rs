//! `stats hotkeys`: the most frequently accessed keys. Each worker counts the keys of the
//! commands it runs (gets, sets, deletes, arithmetic, touches; reads of other workers'
//! partitions too) in a Space-Saving summary of fixed size ([`qs_store::hot`]) and publishes
//! it at most every [`PUBLISH_EVERY`]; `stats hotkeys [N]` merges the workers' summaries (a
//! key's counts and error bounds add up) and answers the top N:
//!
//! ```text
//! STAT hotkey_1 <key> count=<estimate> error=<bound>
//! ...
//! END
//! ```
//!
//! Counting every key (`stats hotkeys on`) costs 5-19% more server CPU per request at pipeline
//! depth 16 (docs/benchmarks/HISTORY.md), so by default a worker counts one request in
//! [`SAMPLE_ONE_IN`] on average (chosen at random intervals, so no periodic pattern of requests
//! aliases with it) and scales the counts up: the answer then starts with `STAT hotkeys sampled
//! 1/16`. Counted exactly, an estimate is never below the key's true count since tracking
//! began and above it by at most `error`; sampled, `count` estimates it (a key with c requests
//! is counted c/16 times, give or take sqrt(c/16)) and `error` bounds only the summary's part.
//! `stats hotkeys off` stops counting, `stats hotkeys sample` goes back to sampling,
//! `stats hotkeys reset` forgets the counts; `-o hotkeys_sample=N` starts the server counting
//! 1 request in N (1: every request, 0: off).

use qs_store::hot::{merge, HotKey};
use std::io::Write;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// Requests counted, on average, per request run while sampling (the default).
pub const SAMPLE_ONE_IN: u32 = 16;
/// Keys each worker watches.
pub const WATCHED_PER_WORKER: usize = 64;
/// How stale another worker's summary may be in an answer.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(50);
/// The most keys one answer lists.
pub const ANSWER_MAX: usize = 1000;
/// Keys an answer lists when the command names no number.
pub const ANSWER_DEFAULT: usize = 10;

/// What the workers share about hot keys.
pub struct HotKeys {
    /// 0: off; 1: every request counted; N: one in N on average.
    every: AtomicU32,
    /// What `stats hotkeys sample` goes back to.
    sample_one_in: u32,
    /// Bumped by `stats hotkeys reset`: a worker that sees it change forgets its counts.
    generation: AtomicU64,
    published: Vec<Mutex<Vec<HotKey>>>,
}

impl HotKeys {
    /// For `workers` workers, counting 1 request in `one_in` (0: off), nothing published yet.
    pub fn new(workers: usize, one_in: u32) -> HotKeys {
        HotKeys {
            every: AtomicU32::new(one_in),
            sample_one_in: if one_in > 1 { one_in } else { SAMPLE_ONE_IN },
            generation: AtomicU64::new(0),
            published: (0..workers).map(|_| Mutex::default()).collect(),
        }
    }

    /// Whether workers count keys.
    pub fn enabled(&self) -> bool {
        self.every() != 0
    }

    /// Requests per counted request (0: off, 1: every request).
    pub fn every(&self) -> u32 {
        self.every.load(Relaxed)
    }

    /// Switches counting to one request in `every` (0: off); the counts so far are forgotten
    /// when the rate changes, since they were scaled by the old one.
    fn set_every(&self, every: u32) {
        if self.every.swap(every, Relaxed) != every && every != 0 {
            self.forget();
        }
    }

    fn forget(&self) {
        self.generation.fetch_add(1, Relaxed);
        for slot in &self.published {
            slot.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }

    /// The reset generation.
    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }

    /// Worker `worker`'s summary, most frequent first.
    pub fn publish(&self, worker: usize, top: Vec<HotKey>) {
        if let Some(slot) = self.published.get(worker) {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = top;
        }
    }

    /// Answers `stats hotkeys <argument>`.
    pub fn command(&self, argument: &[u8], out: &mut Vec<u8>) {
        let count = match argument {
            b"on" | b"off" | b"sample" => {
                self.set_every(match argument {
                    b"on" => 1,
                    b"off" => 0,
                    _ => self.sample_one_in,
                });
                out.extend_from_slice(b"OK\r\n");
                return;
            }
            b"reset" => {
                self.forget();
                out.extend_from_slice(b"RESET\r\n");
                return;
            }
            b"" => ANSWER_DEFAULT,
            number => match std::str::from_utf8(number).ok().and_then(|text| text.parse::<usize>().ok()) {
                Some(count) => count.min(ANSWER_MAX),
                None => {
                    out.extend_from_slice(b"CLIENT_ERROR usage: stats hotkeys [N|on|off|sample|reset]\r\n");
                    return;
                }
            },
        };
        let summaries: Vec<Vec<HotKey>> = self
            .published
            .iter()
            .map(|slot| slot.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .collect();
        match self.every() {
            0 => out.extend_from_slice(b"STAT hotkeys off\r\n"),
            1 => {}
            every => {
                let _ = write!(out, "STAT hotkeys sampled 1/{every}\r\n");
            }
        }
        for (rank, hot) in merge(&summaries, count).iter().enumerate() {
            let _ = write!(out, "STAT hotkey_{} ", rank + 1);
            out.extend_from_slice(&hot.key);
            let _ = write!(out, " count={} error={}\r\n", hot.count, hot.error);
        }
        out.extend_from_slice(b"END\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(hot: &HotKeys, argument: &[u8]) -> String {
        let mut out = Vec::new();
        hot.command(argument, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn merges_the_workers_summaries_and_answers_the_top_n() {
        let hot = HotKeys::new(2, 0);
        assert!(!hot.enabled());
        assert_eq!(answer(&hot, b"on"), "OK\r\n");
        hot.publish(
            0,
            vec![
                HotKey { key: b"a".to_vec(), count: 5, error: 0 },
                HotKey { key: b"b".to_vec(), count: 2, error: 1 },
            ],
        );
        hot.publish(
            1,
            vec![
                HotKey { key: b"b".to_vec(), count: 4, error: 0 },
                HotKey { key: b"c".to_vec(), count: 1, error: 0 },
            ],
        );
        assert_eq!(
            answer(&hot, b"2"),
            "STAT hotkey_1 b count=6 error=1\r\nSTAT hotkey_2 a count=5 error=0\r\nEND\r\n"
        );
        assert!(answer(&hot, b"").ends_with("STAT hotkey_3 c count=1 error=0\r\nEND\r\n"));
        assert_eq!(answer(&hot, b"off"), "OK\r\n");
        assert!(!hot.enabled());
        assert!(answer(&hot, b"1").starts_with("STAT hotkeys off\r\n"));
        assert_eq!(answer(&hot, b"x"), "CLIENT_ERROR usage: stats hotkeys [N|on|off|sample|reset]\r\n");
        assert_eq!(answer(&hot, b"reset"), "RESET\r\n");
        assert_eq!(hot.generation(), 2); // "on" forgot the (no) counts too
        assert_eq!(answer(&hot, b""), "STAT hotkeys off\r\nEND\r\n");
        // Sampling: the rate heads the answer; a change of rate forgets the counts.
        assert_eq!(answer(&hot, b"sample"), "OK\r\n");
        assert_eq!((hot.every(), hot.generation()), (SAMPLE_ONE_IN, 3));
        assert_eq!(answer(&hot, b""), "STAT hotkeys sampled 1/16\r\nEND\r\n");
        assert_eq!(answer(&hot, b"sample"), "OK\r\n");
        assert_eq!(hot.generation(), 3);
        assert_eq!(answer(&hot, b"on"), "OK\r\n");
        assert_eq!((hot.every(), hot.generation()), (1, 4));
        let sampled = HotKeys::new(1, 8);
        assert_eq!(answer(&sampled, b""), "STAT hotkeys sampled 1/8\r\nEND\r\n");
    }
}
