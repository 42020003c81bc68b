//! The real engine under simulated time: qs-store's partitions, built as the server builds
//! them, replaying a stream with no sockets and no clock (each request's `time` is the
//! engine's `now`). Keys become bytes as a client would send them, values are written at
//! their real sizes, so the log fills and evicts exactly as in the server.
//!
//! Besides the hit ratio it counts the misses of expired items and the slots the lossy index
//! evicted from full buckets (MICA's index evicts rather than chains; a tag that matches
//! another key's costs a comparison, never a miss). What the index's evictions cost in hit
//! ratio is measured by running a twin with an index too large to overflow
//! ([`crate::mrc::MrcPlan::index_cost`]).

use crate::stream::{Access, Op};
use qs_store::index::{BUCKET_BYTES, SLOTS_PER_BUCKET};
use qs_store::{
    Config, Eviction, Expiry, KeyHash, Now, Outcome, Partition, PartitionCommand, PartitionRequest, StoreMode,
};

/// How the engine is built.
#[derive(Clone, Copy, Debug)]
pub struct EngineShape {
    /// Item memory: bytes of log, over all partitions.
    pub log_bytes: u64,
    /// Partitions (the server has several per worker); keys go to them by hash as there.
    pub partitions: u32,
    /// The eviction policy.
    pub eviction: Eviction,
    /// Expected item bytes (header included), to size the index as the server does.
    pub item_bytes: f64,
    /// Index load at which a full log of such items fills the slots (the server's 0.625).
    pub index_load: f64,
    /// A flash tier behind the DRAM log of this many times its bytes (0: none): items leaving
    /// the DRAM head go to a flash log (qs_store::flash, in a temporary file) and come back on
    /// access, as `-o ext_path` does; the index is sized for the items of both.
    pub flash_ratio: f64,
}

/// Misses and hits of an engine run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineTally {
    /// Gets replayed.
    pub gets: u64,
    /// Gets that hit.
    pub hits: u64,
    /// Misses of keys expired by their TTL.
    pub expired_misses: u64,
    /// Slots the index evicted from full buckets.
    pub index_evictions: u64,
    /// Items the log evicted at its head.
    pub log_evictions: u64,
}

impl EngineTally {
    /// Hit ratio of gets.
    pub fn hit_ratio(&self) -> f64 {
        self.hits as f64 / self.gets.max(1) as f64
    }
}

/// The engine being driven.
pub struct EngineSim {
    partitions: Vec<Partition>,
    partition_bits: u32,
    fill: bool,
    key: Vec<u8>,
    value: Vec<u8>,
    out: Vec<u8>,
    tally: EngineTally,
    /// Whether the partitions have a flash tier.
    flash: bool,
    /// The last request's time.
    now: u32,
}

impl EngineSim {
    /// An empty engine of `shape`; with `fill`, a get miss is followed by the client's set.
    pub fn new(shape: &EngineShape, fill: bool) -> EngineSim {
        let partitions = shape.partitions.max(1).next_power_of_two();
        let log_bytes = ((shape.log_bytes / u64::from(partitions)) as usize & !7).max(4096);
        let flash_bytes = (log_bytes as f64 * shape.flash_ratio) as u64;
        let slots = (log_bytes as u64 + flash_bytes) as f64 / shape.item_bytes.max(24.0) / shape.index_load;
        let buckets = ((slots / SLOTS_PER_BUCKET as f64).ceil() as usize).next_power_of_two().max(1);
        let partitions: Vec<Partition> = (0..partitions)
            .map(|index| {
                let mut config = Config::new(log_bytes, buckets);
                // A flash tier runs with clock (what leaves a small ring is not demoted).
                config.eviction =
                    if flash_bytes > 0 { shape.eviction.without_small_ring() } else { shape.eviction };
                config.partition_index = index as u16;
                config.partition_bits = partitions.trailing_zeros();
                let mut partition = Partition::new(config);
                if flash_bytes > 0 {
                    if let Some(log) = flash_log(flash_bytes) {
                        partition.attach_flash(log, 0);
                    }
                }
                partition
            })
            .collect();
        EngineSim {
            partition_bits: (partitions.len() as u32).trailing_zeros(),
            partitions,
            fill,
            key: Vec::new(),
            value: vec![b'v'; qs_store::config::ITEM_BYTES_MAX_DEFAULT],
            out: Vec::new(),
            tally: EngineTally::default(),
            flash: flash_bytes > 0,
            now: 0,
        }
    }

    /// Bytes of index over all partitions.
    pub fn index_bytes(&self) -> usize {
        self.partitions.iter().map(|partition| partition.main_buckets() * BUCKET_BYTES).sum()
    }

    /// The share of the bytes the log holds that belong to items expired by the last request's
    /// time, waiting for the head.
    pub fn expired_share(&self) -> f64 {
        let held: u64 = self.partitions.iter().map(|partition| partition.stats().bytes).sum();
        let gone: u64 =
            self.partitions.iter().map(|partition| partition.gone_bytes(Now::from_secs(self.now))).sum();
        gone as f64 / held.max(1) as f64
    }

    /// Replays one request at its time.
    pub fn access(&mut self, access: &Access) {
        let mut key = std::mem::take(&mut self.key);
        key_bytes(access.key, access.key_size, &mut key);
        self.replay(access, &key, KeyHash::of(&key));
        self.key = key;
    }

    /// Starts loading what replaying `hash`'s request will touch: stage 1 its index bucket,
    /// stage 2 (a few requests later, once the bucket is in) its item. Only a hint: the
    /// replay is the same with or without it.
    pub fn prefetch(&self, hash: KeyHash, stage: u8) {
        let partition = &self.partitions[hash.partition(self.partition_bits)];
        if stage == 1 {
            partition.prefetch_bucket(hash);
        } else {
            partition.prefetch_item(hash);
        }
    }

    /// [`EngineSim::access`] with the key's bytes and hash already made (see [`key_bytes`]).
    pub fn replay(&mut self, access: &Access, key: &[u8], hash: KeyHash) {
        let index = hash.partition(self.partition_bits);
        let now = access.time + 1;
        self.now = now;
        match access.op {
            Op::Get => {
                self.tally.gets += 1;
                self.out.clear();
                let request = PartitionRequest { key, hash, command: PartitionCommand::Get };
                let expired_before = self.partitions[index].stats().get_expired;
                let partition = &mut self.partitions[index];
                let outcome = if self.flash {
                    partition.execute_with_flash(&request, Now::from_secs(now), &mut self.out)
                } else {
                    partition.run(&request, Now::from_secs(now), &mut self.out)
                };
                match outcome {
                    Outcome::Hit(_) => self.tally.hits += 1,
                    _ => {
                        if self.partitions[index].stats().get_expired > expired_before {
                            self.tally.expired_misses += 1;
                        }
                        if self.fill {
                            self.set(index, key, hash, access, now);
                        }
                    }
                }
            }
            Op::Set => self.set(index, key, hash, access, now),
            Op::Delete => {
                let request = PartitionRequest { key, hash, command: PartitionCommand::Delete { cas: 0 } };
                if self.flash {
                    self.partitions[index].execute_with_flash(&request, Now::from_secs(now), &mut self.out);
                } else {
                    self.partitions[index].run(&request, Now::from_secs(now), &mut self.out);
                }
            }
        }
    }

    fn set(&mut self, index: usize, key: &[u8], hash: KeyHash, access: &Access, now: u32) {
        let size = (access.value_size as usize).min(self.value.len());
        let expiry = if access.ttl == 0 { Expiry::NEVER } else { Expiry::at_secs(now + access.ttl) };
        let command =
            PartitionCommand::Store { mode: StoreMode::Set, value: &self.value[..size], flags: 0, expiry };
        let request = PartitionRequest { key, hash, command };
        self.partitions[index].run(&request, Now::from_secs(now), &mut self.out);
    }

    /// The run so far.
    pub fn tally(&self) -> EngineTally {
        let mut tally = self.tally;
        for partition in &self.partitions {
            tally.index_evictions += partition.stats().index_evictions;
            tally.log_evictions += partition.stats().log_evictions;
        }
        tally
    }
}

/// A flash log of `bytes` in a temporary file (removed at once: the open file lives on), in
/// 64 KiB pages; `None` when no file can be made or it is too small.
fn flash_log(bytes: u64) -> Option<qs_store::flash::FlashLog> {
    static FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let number = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("qs-sim-flash-{}-{number}", std::process::id()));
    let file =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).ok()?;
    let _ = std::fs::remove_file(&path);
    qs_store::flash::FlashLog::new(std::sync::Arc::new(file), 0, bytes, 64 << 10)
}

/// The key bytes of key number `key`: its 16 hex digits padded with `_` to `size`, or its last
/// `size` digits when `size` is shorter (at least 1 byte, at most memcached's 250), as a
/// client's generated keys look.
pub fn key_bytes(key: u64, size: u16, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.clear();
    out.extend((0..16).rev().map(|digit| HEX[(key >> (digit * 4)) as usize & 15]));
    let size = (size as usize).clamp(1, qs_store::KEY_BYTES_MAX);
    if size < out.len() {
        out.drain(..out.len() - size);
    }
    out.resize(size, b'_');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lru::LruCurve;
    use crate::stream::{KeyDist, SizeDist, Synthetic};

    fn recipe(keys: u64) -> Synthetic {
        Synthetic {
            keys,
            requests: 200_000,
            dist: KeyDist::Zipf(0.99),
            set_share: 0.0,
            ycsb: None,
            key_size: 16,
            sizes: SizeDist::Fixed(32),
            rate: 10_000,
            seed: 11,
            scramble: false,
            scan_share: 0.0,
            ttl_mix: false,
        }
    }

    fn shape(log_bytes: u64, eviction: Eviction) -> EngineShape {
        EngineShape {
            log_bytes,
            partitions: 1,
            eviction,
            item_bytes: 64.0,
            index_load: 0.625,
            flash_ratio: 0.0,
        }
    }

    #[test]
    fn a_cache_that_holds_every_key_misses_only_cold() {
        let mut engine = EngineSim::new(&shape(8 << 20, Eviction::ApproxLru), true);
        let mut curve = LruCurve::new(&[8 << 20]);
        for access in recipe(10_000).stream() {
            engine.access(&access);
            curve.access(&access, 64);
        }
        let tally = engine.tally();
        assert_eq!(tally.gets, curve.gets());
        assert_eq!(tally.gets - tally.hits, curve.cold_misses());
        assert_eq!(tally.log_evictions, 0);
    }

    /// Hit ratios of exact FIFO, exact LRU and the engine with `eviction`, 20,000 keys of
    /// 64-byte items through a 256 KiB log (4096 items).
    fn against_models(eviction: Eviction) -> (f64, f64, EngineTally) {
        let mut engine = EngineSim::new(&shape(256 << 10, eviction), true);
        let mut curve = LruCurve::new(&[256 << 10]);
        let mut fifo = crate::fifo::FifoCache::new(256 << 10);
        for access in recipe(20_000).stream() {
            engine.access(&access);
            curve.access(&access, 64);
            fifo.access(&access, 64);
        }
        (fifo.hit_ratio(), curve.hit_ratios()[0].1, engine.tally())
    }

    #[test]
    fn the_engine_under_fifo_is_exact_fifo_but_for_its_index() {
        let (fifo, _, tally) = against_models(Eviction::Fifo);
        assert!(tally.log_evictions > 0);
        assert!((tally.hit_ratio() - fifo).abs() < 0.01, "{tally:?} vs {fifo}");
    }

    #[test]
    fn approximate_lru_lies_between_fifo_and_lru() {
        let (fifo, lru, tally) = against_models(Eviction::ApproxLru);
        assert!(fifo < tally.hit_ratio() && tally.hit_ratio() < lru, "{fifo} {} {lru}", tally.hit_ratio());
    }

    #[test]
    fn deletes_and_ttls_are_honoured() {
        let mut engine = EngineSim::new(&shape(1 << 20, Eviction::ApproxLru), false);
        let at = |time, key, op, ttl| Access { time, key, key_size: 8, value_size: 10, op, ttl };
        engine.access(&at(0, 1, Op::Set, 5));
        engine.access(&at(0, 2, Op::Set, 0));
        engine.access(&at(1, 1, Op::Get, 0));
        engine.access(&at(1, 2, Op::Delete, 0));
        engine.access(&at(2, 2, Op::Get, 0));
        engine.access(&at(9, 1, Op::Get, 0));
        let tally = engine.tally();
        assert_eq!((tally.gets, tally.hits, tally.expired_misses), (3, 1, 1));
    }

    #[test]
    fn dram_with_nine_times_as_much_flash_hits_as_ten_times_the_dram() {
        // The flash tier's promise: a hit ratio equal to a DRAM-only cache ten
        // times as large. 20,000 keys of 64-byte items; 64 KiB of DRAM (5% of the working set).
        let run = |log_bytes: u64, flash_ratio: f64| {
            let shape = EngineShape { flash_ratio, ..shape(log_bytes, Eviction::ApproxLru) };
            let mut engine = EngineSim::new(&shape, true);
            for access in recipe(20_000).stream() {
                engine.access(&access);
            }
            engine.tally().hit_ratio()
        };
        let (small, tiered, large) = (run(64 << 10, 0.0), run(64 << 10, 9.0), run(640 << 10, 0.0));
        assert!(tiered > small + 0.1, "{small} {tiered} {large}");
        assert!((tiered - large).abs() < 0.03, "{small} {tiered} {large}");
    }

    #[test]
    fn keys_look_like_client_keys() {
        let mut key = Vec::new();
        key_bytes(0xab, 20, &mut key);
        assert_eq!(key, b"00000000000000ab____");
        key_bytes(0xab, 4, &mut key);
        assert_eq!(key, b"00ab");
    }
}
