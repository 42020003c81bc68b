//! `stats mrc`: the server's own miss-ratio curve, estimated live. Every worker looks at the key
//! of each command it runs (gets, stores, deletes, touches, arithmetic; reads of other
//! workers' partitions too); keys whose sampling hash falls below the threshold (SHARDS,
//! [`qs_store::mrc::Shards`]: 1 key in [`SAMPLE_ONE_IN`] at most, fewer once more than
//! [`SAMPLED_KEYS_MAX`] keys are sampled) are collected by the worker and handed, once per
//! loop turn, to one shared estimator under a mutex. A key not sampled costs a multiply and a
//! compare against the worker's copy of the threshold, and a get one more increment of the
//! worker's own count (published once per loop turn).
//!
//! ```text
//! STAT mrc on
//! STAT mrc_sample_rate 0.0625
//! STAT mrc_sampled_keys 4096
//! STAT mrc_gets <gets since tracking began>
//! STAT mrc_working_set_bytes <bytes of every key seen, estimated>
//! STAT mrc_item_memory <item memory now: limit_maxbytes>
//! STAT mrc_hit_ratio_0.25x 0.8123
//! ...                                  (0.5x 1x 2x 4x 8x)
//! END
//! ```
//!
//! Each `mrc_hit_ratio_<m>x` is the hit ratio of gets that an LRU cache of m times the item
//! memory would have had on the requests seen since tracking began (item bytes as the log
//! stores them). `stats mrc on|off|reset` starts, stops and forgets it.

use qs_store::mrc::{Access, Shards};
use qs_store::{PartitionCommand, StoreMode};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Keys sampled at most: 1 in this many.
pub const SAMPLE_ONE_IN: u32 = 16;
/// Sampled keys held at most (about 64 bytes each); more lower the rate.
pub const SAMPLED_KEYS_MAX: usize = 16 << 10;
/// Multiples of the item memory `stats mrc` answers at.
pub const MULTIPLES: [(f64, &str); 6] =
    [(0.25, "0.25x"), (0.5, "0.5x"), (1.0, "1x"), (2.0, "2x"), (4.0, "4x"), (8.0, "8x")];

/// A worker's count of gets as last published, alone on its cache lines.
#[repr(align(128))]
#[derive(Default)]
struct Gets(AtomicU64);

/// The live curve all workers feed.
pub struct LiveMrc {
    /// The estimator's sampling threshold; 0 while off (nothing is sampled).
    threshold: AtomicU64,
    one_in: u32,
    /// Every get run while on, by worker, as published (each written by its worker only):
    /// SHARDS' adjustment holds the sampled gets against the rate times these.
    gets: Box<[Gets]>,
    /// (on, the estimator, the sum of `gets` when it was reset).
    shards: Mutex<(bool, Shards, u64)>,
}

impl LiveMrc {
    /// For `workers` workers, sampling 1 key in `one_in` at most; on unless `one_in` is 0.
    pub fn new(workers: usize, one_in: u32) -> LiveMrc {
        let shards = Shards::new(one_in.max(1), SAMPLED_KEYS_MAX);
        let on = one_in > 0;
        LiveMrc {
            threshold: AtomicU64::new(if on { shards.threshold() } else { 0 }),
            one_in: one_in.max(1),
            gets: (0..workers.max(1)).map(|_| Gets::default()).collect(),
            shards: Mutex::new((on, shards, 0)),
        }
    }

    /// The sampling threshold now (0: off). A worker reads it once per loop turn and hands
    /// [`LiveMrc::record`] the commands whose key's `sample_hash` is below it; a threshold a
    /// turn old only offers keys that `record` then drops.
    pub fn threshold(&self) -> u64 {
        self.threshold.load(Relaxed)
    }

    /// Whether `command` is a read (counted as a get of the curve).
    #[inline(always)]
    pub fn is_get(command: &PartitionCommand<'_>) -> bool {
        matches!(
            command,
            PartitionCommand::Get | PartitionCommand::GetAndTouch { .. } | PartitionCommand::MetaGet(_)
        )
    }

    /// Worker `worker`'s count of gets while sampling was on, since it started (published once
    /// per loop turn).
    pub fn publish_gets(&self, worker: usize, gets: u64) {
        if let Some(slot) = self.gets.get(worker) {
            slot.0.store(gets, Relaxed);
        }
    }

    /// Gets offered since the start, all workers.
    fn all_gets(&self) -> u64 {
        self.gets.iter().map(|gets| gets.0.load(Relaxed)).sum()
    }

    /// What `command` does to the LRU stack of `stats mrc`.
    #[inline(always)]
    pub fn access_of(key: &[u8], command: &PartitionCommand<'_>) -> Access {
        match *command {
            _ if Self::is_get(command) => Access::Get,
            PartitionCommand::Store { mode, value, flags, expiry, .. } => match mode {
                StoreMode::Append
                | StoreMode::Prepend
                | StoreMode::AppendCas(_)
                | StoreMode::PrependCas(_) => Access::Touch,
                _ => {
                    let ext = qs_store::item::Ext::new(flags, expiry).bytes();
                    Access::Set(qs_store::item::item_bytes(key.len(), value.len(), ext) as u64)
                }
            },
            PartitionCommand::Delete { .. } => Access::Delete,
            _ => Access::Touch,
        }
    }

    /// Records a worker's sampled accesses, in the order it ran them (keys a stale threshold
    /// let through are dropped here), and empties `accesses`. One lock per batch: a worker
    /// hands its batch over once per loop turn, so the estimator's lines move between cores
    /// once per turn, not once per sampled request.
    pub fn record(&self, accesses: &mut Vec<(u64, Access)>) {
        if accesses.is_empty() {
            return;
        }
        let mut guard = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        let (on, shards, _) = &mut *guard;
        if *on {
            for &(keyhash, access) in accesses.iter() {
                shards.access(keyhash, access);
            }
            self.threshold.store(shards.threshold(), Relaxed);
        }
        accesses.clear();
    }

    /// Answers `stats mrc [on|off|reset]`; `item_memory` is limit_maxbytes now.
    pub fn command(&self, argument: &[u8], item_memory: u64, out: &mut Vec<u8>) {
        let mut guard = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        let (on, shards, gets_at_reset) = &mut *guard;
        match argument {
            b"on" | b"off" => {
                *on = argument == b"on";
                self.threshold.store(if *on { shards.threshold() } else { 0 }, Relaxed);
                out.extend_from_slice(b"OK\r\n");
                return;
            }
            b"reset" => {
                shards.reset(self.one_in);
                *gets_at_reset = self.all_gets();
                if *on {
                    self.threshold.store(shards.threshold(), Relaxed);
                }
                out.extend_from_slice(b"RESET\r\n");
                return;
            }
            b"" => {}
            _ => {
                out.extend_from_slice(b"CLIENT_ERROR usage: stats mrc [on|off|reset]\r\n");
                return;
            }
        }
        let _ = write!(out, "STAT mrc {}\r\n", if *on { "on" } else { "off" });
        let _ = write!(out, "STAT mrc_sample_rate {}\r\n", shards.rate());
        let _ = write!(out, "STAT mrc_sampled_keys {}\r\n", shards.keys());
        let all_gets = self.all_gets() - *gets_at_reset;
        let _ = write!(out, "STAT mrc_gets {all_gets}\r\n");
        let _ = write!(out, "STAT mrc_working_set_bytes {}\r\n", shards.working_set_bytes());
        let _ = write!(out, "STAT mrc_item_memory {item_memory}\r\n");
        for (multiple, name) in MULTIPLES {
            let ratio = shards.hit_ratio_adjusted((item_memory as f64 * multiple) as u64, all_gets);
            let _ = write!(out, "STAT mrc_hit_ratio_{name} {ratio:.4}\r\n");
        }
        out.extend_from_slice(b"END\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qs_store::{Expiry, KeyHash};

    fn answer(mrc: &LiveMrc, argument: &[u8]) -> String {
        let mut out = Vec::new();
        mrc.command(argument, 1000, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn counts_sampled_gets_by_distance_and_answers_each_multiple() {
        // Every key sampled: 10 keys of 32 bytes in the log each (2-byte key, 8-byte value), read
        // round robin by two workers.
        let mrc = LiveMrc::new(2, 1);
        let set = PartitionCommand::Store {
            mode: StoreMode::Set,
            value: b"12345678",
            flags: 0,
            expiry: Expiry::NEVER,
        };
        let mut gets = [0u64; 2];
        for round in 0..100 {
            for key in 0..10u8 {
                let key = [b'k', key];
                let hash = KeyHash::of(&key);
                gets[round % 2] += 1;
                let mut batch = vec![(hash.0, LiveMrc::access_of(&key, &PartitionCommand::Get))];
                if round == 0 {
                    batch.push((hash.0, LiveMrc::access_of(&key, &set)));
                }
                mrc.record(&mut batch);
                assert!(batch.is_empty());
            }
        }
        mrc.publish_gets(0, gets[0]);
        mrc.publish_gets(1, gets[1]);
        let text = answer(&mrc, b"");
        assert!(
            text.starts_with("STAT mrc on\r\nSTAT mrc_sample_rate 1\r\nSTAT mrc_sampled_keys 10\r\n"),
            "{text}"
        );
        assert!(text.contains("STAT mrc_gets 1000\r\n"), "{text}");
        assert!(text.contains("STAT mrc_working_set_bytes 320\r\nSTAT mrc_item_memory 1000\r\n"), "{text}");
        // 10 x 32 = 320 bytes of distance: misses at 250 bytes, hits (99 rounds of 100) above.
        assert!(
            text.contains("STAT mrc_hit_ratio_0.25x 0.0000\r\nSTAT mrc_hit_ratio_0.5x 0.9900\r\n"),
            "{text}"
        );
        assert!(text.ends_with("STAT mrc_hit_ratio_8x 0.9900\r\nEND\r\n"), "{text}");

        assert_eq!(answer(&mrc, b"off"), "OK\r\n");
        assert_eq!(mrc.threshold(), 0);
        mrc.record(&mut vec![(KeyHash::of(b"k\x01").0, Access::Get)]);
        assert!(answer(&mrc, b"").contains("STAT mrc off\r\n"));
        assert!(answer(&mrc, b"").contains("STAT mrc_gets 1000\r\n"));
        assert_eq!(answer(&mrc, b"reset"), "RESET\r\n");
        assert!(answer(&mrc, b"").contains("STAT mrc_gets 0\r\n"));
        assert_eq!(answer(&mrc, b"x"), "CLIENT_ERROR usage: stats mrc [on|off|reset]\r\n");
    }
}
