//! `qs-bench engine`: the engine in process, one core, through the real batch pipeline, beside
//! a plain `hashbrown` map holding the same items. Loading is not timed.

use crate::workload::{value_matches, write_key, write_value, Dataset, Distribution, KeyChooser, Rng};
use qs_store::index::{BUCKET_BYTES, SLOTS_PER_BUCKET};
use qs_store::{
    Access, Config, Eviction, Expiry, HugePages, Now, Outcome, Partition, PartitionCommand, PartitionRequest,
    StoreMode,
};
use std::time::Instant;

/// The clock the benchmark hands the engine (no item expires, so any fixed time will do).
const NOW: Now = Now::from_secs(1_700_000_000);

/// Which store to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Store {
    /// Quicksilver's partition (circular log + lossy index).
    Qs,
    /// `hashbrown::HashMap<[u8; K], [u8; V]>`, no eviction: the plain fast hash table.
    Hashbrown,
}

/// on/off switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

/// What to run.
#[derive(Clone, Debug, clap::Args)]
pub struct EngineArgs {
    /// Key and value sizes (MICA's datasets).
    #[arg(long, value_enum, default_value = "tiny")]
    pub dataset: Dataset,
    /// Key popularity.
    #[arg(long = "dist", value_enum, default_value = "uniform")]
    pub distribution: Distribution,
    /// Zipf exponent (below 1: YCSB's generator; 1 or more: rejection-inversion).
    #[arg(long, default_value_t = 0.99)]
    pub theta: f64,
    /// Fraction of operations that are GETs (the rest are SETs of existing keys).
    #[arg(long, default_value_t = 0.95)]
    pub get_ratio: f64,
    /// Number of distinct keys, all loaded before timing.
    #[arg(long, default_value_t = 4_000_000)]
    pub keys: u64,
    /// Operations timed (after a warm-up of a tenth as many).
    #[arg(long, default_value_t = 20_000_000)]
    pub ops: u64,
    /// Requests per engine batch.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// The multi-stage prefetch pipeline.
    #[arg(long, value_enum, default_value = "on")]
    pub prefetch: Switch,
    /// Store to measure.
    #[arg(long, value_enum, default_value = "qs")]
    pub store: Store,
    /// Access mode of the partition (CREW brackets writes with bucket versions).
    #[arg(long, value_enum, default_value = "crew")]
    pub access: AccessArg,
    /// Cache mode (circular log, lossy index) or store mode (arena, lossless chained index).
    #[arg(long, value_enum, default_value = "cache")]
    pub mode: ModeArg,
    /// Huge pages for the log and index.
    #[arg(long, value_enum, default_value = "auto")]
    pub huge_pages: HugePagesArg,
    /// RNG seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object as the last line.
    #[arg(long)]
    pub json: bool,
}

/// `--access`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AccessArg {
    /// Exclusive read, exclusive write.
    Erew,
    /// Concurrent read, exclusive write.
    Crew,
    /// Concurrent read, concurrent write: writes under the partition's lock (the comparison point).
    Crcw,
}

/// `--mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModeArg {
    /// Circular log and lossy index: evicts the oldest items.
    Cache,
    /// Segregated-fits arena and bulk-chained index: never evicts.
    Store,
}

/// `--huge-pages`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HugePagesArg {
    /// hugetlb, else THP, else 4 KiB pages.
    Auto,
    /// 4 KiB pages only.
    Off,
}

/// What a run measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EngineReport {
    pub store: Store,
    pub mode: ModeArg,
    pub dataset: Dataset,
    pub dist: Distribution,
    pub theta: f64,
    pub get_ratio: f64,
    pub keys: u64,
    pub ops: u64,
    pub batch: usize,
    pub prefetch: Switch,
    pub mops: f64,
    pub ns_per_op: f64,
    pub hit_ratio: f64,
    pub wrong_values: u64,
    /// Items per GiB at the default index load (log bytes per item plus the index's share).
    pub items_per_gib: f64,
    /// Bytes per item besides key and value: header plus index share at the default load.
    pub overhead_bytes_per_item: f64,
    /// Memory actually used per item in this run (log bytes of items plus the whole index).
    pub bytes_per_item_measured: f64,
    pub index_load: f64,
    pub log_pages: String,
    pub index_pages: String,
    pub load_secs: f64,
}

/// Counts from a timed run.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    hits: u64,
    misses: u64,
    wrong: u64,
}

/// Runs the benchmark described by `args`.
pub fn run(args: &EngineArgs) -> EngineReport {
    assert!(args.keys >= 2 && args.batch >= 1 && (0.0..=1.0).contains(&args.get_ratio));
    match args.store {
        Store::Qs => match args.dataset {
            Dataset::Tiny => run_qs::<8, 8>(args),
            Dataset::Small => run_qs::<16, 64>(args),
            Dataset::Large => run_qs::<128, 1024>(args),
            Dataset::Xlarge => run_qs::<250, 1152>(args),
        },
        Store::Hashbrown => match args.dataset {
            Dataset::Tiny => run_hashbrown::<8, 8>(args),
            Dataset::Small => run_hashbrown::<16, 64>(args),
            Dataset::Large => run_hashbrown::<128, 1024>(args),
            Dataset::Xlarge => run_hashbrown::<250, 1152>(args),
        },
    }
}

/// The partition under test: owned (EREW/CREW) or shared behind a writer lock (CRCW).
enum Target {
    Owned(Partition),
    Shared(qs_store::SharedPartition),
}

impl Target {
    fn inspect<R>(&self, read: impl FnOnce(&Partition) -> R) -> R {
        match self {
            Target::Owned(partition) => read(partition),
            Target::Shared(partition) => partition.inspect(read),
        }
    }
}

fn partition_for(args: &EngineArgs) -> Target {
    let (key_len, value_len) = args.dataset.sizes();
    let store_mode = args.mode == ModeArg::Store;
    let item_bytes = qs_store::item::item_bytes(
        key_len,
        value_len,
        if store_mode { qs_store::item::STORE_EXT_BYTES } else { 0 },
    );
    let data_bytes = args.keys as usize * item_bytes;
    // Store mode: the arena holds every item once in its tagged block (overwrites of the same
    // size stay in place), padded by up to a quarter to keep small items off an extra cache
    // line, with room to spare.
    let block_bytes = (item_bytes + qs_store::arena::TAG_OVERHEAD).max(qs_store::arena::BLOCK_BYTES_MIN);
    let arena_bytes = (args.keys as usize * block_bytes * 5 / 4).max(1 << 16);
    // Twice the data, so that approximate-LRU re-appends (which leave dead copies behind) never
    // push live keys out during a run: misses then come only from the lossy index.
    let log_bytes = (data_bytes * 2).next_power_of_two().max(1 << 16);
    let slots_wanted = args.keys as f64 / qs_store::config::INDEX_LOAD_DEFAULT;
    let buckets = ((slots_wanted / SLOTS_PER_BUCKET as f64).ceil() as usize).next_power_of_two();
    let mut config =
        if store_mode { Config::store(arena_bytes, buckets) } else { Config::new(log_bytes, buckets) };
    if !store_mode {
        config.eviction = Eviction::ApproxLru;
    }
    config.access = if args.access == AccessArg::Erew { Access::Erew } else { Access::Crew };
    config.huge_pages = if args.huge_pages == HugePagesArg::Off { HugePages::Off } else { HugePages::Auto };
    match args.access {
        AccessArg::Crcw => Target::Shared(qs_store::SharedPartition::new(config)),
        _ => Target::Owned(Partition::new(config)),
    }
}

fn run_qs<const K: usize, const V: usize>(args: &EngineArgs) -> EngineReport {
    let (key_len, value_len) = (K, V);
    let mut partition = partition_for(args);
    let started = Instant::now();
    let mut loader = Batcher::<K, V>::new(args.batch);
    for first in (0..args.keys).step_by(args.batch) {
        let count = (args.keys - first).min(args.batch as u64) as usize;
        loader.fill(count, |i| (first + i as u64, false));
        loader.execute(&mut partition, true);
    }
    let load_secs = started.elapsed().as_secs_f64();
    let chooser = KeyChooser::new(args.distribution, args.keys, args.theta);
    let mut rng = Rng::new(args.seed);
    let prefetch = args.prefetch == Switch::On;
    timed_qs(&mut partition, &mut loader, &chooser, &mut rng, args, args.ops / 10, prefetch);
    let started = Instant::now();
    let tally = timed_qs(&mut partition, &mut loader, &chooser, &mut rng, args, args.ops, prefetch);
    let secs = started.elapsed().as_secs_f64();
    let (stats, (log_pages, index_pages), index_bytes, slot_count) = partition.inspect(|partition| {
        (*partition.stats(), partition.page_kinds(), partition.index_bytes(), partition.slot_count())
    });
    let store_mode = args.mode == ModeArg::Store;
    let item_bytes = qs_store::item::item_bytes(
        key_len,
        value_len,
        if store_mode { qs_store::item::STORE_EXT_BYTES } else { 0 },
    );
    // Store mode: an item costs its whole tagged block, padding included.
    let item_bytes =
        if store_mode { stats.bytes as f64 / stats.items.max(1) as f64 } else { item_bytes as f64 };
    let index_share = BUCKET_BYTES as f64 / SLOTS_PER_BUCKET as f64 / qs_store::config::INDEX_LOAD_DEFAULT;
    let overhead = item_bytes - (key_len + value_len) as f64 + index_share;
    report(args, tally, secs, load_secs, |report| {
        report.items_per_gib = (1u64 << 30) as f64 / (item_bytes + index_share);
        report.overhead_bytes_per_item = overhead;
        report.bytes_per_item_measured =
            (stats.bytes as f64 + index_bytes as f64) / stats.items.max(1) as f64;
        report.index_load = stats.items as f64 / slot_count as f64;
        report.log_pages = log_pages.name().into();
        report.index_pages = index_pages.name().into();
    })
}

/// The timed loop: fill a batch of keys, run it through the pipeline, check every answer.
#[inline(never)]
fn timed_qs<const K: usize, const V: usize>(
    partition: &mut Target,
    batcher: &mut Batcher<K, V>,
    chooser: &KeyChooser,
    rng: &mut Rng,
    args: &EngineArgs,
    ops: u64,
    prefetch: bool,
) -> Tally {
    let mut tally = Tally::default();
    let mut done = 0;
    let get_below = (args.get_ratio * u64::MAX as f64) as u64;
    while done < ops {
        let count = (ops - done).min(args.batch as u64) as usize;
        batcher.fill(count, |_| (chooser.next(rng), rng.next_u64() < get_below || args.get_ratio >= 1.0));
        batcher.execute(partition, prefetch);
        batcher.check(&mut tally);
        done += count as u64;
    }
    tally
}

/// Keys, values and requests of one batch, allocated once; `K`-byte keys and `V`-byte values,
/// sized at compile time as the hashbrown side's are.
struct Batcher<const K: usize, const V: usize> {
    keys: Vec<[u8; K]>,
    values: Vec<[u8; V]>,
    numbers: Vec<u64>,
    gets: Vec<bool>,
    spare: Vec<PartitionRequest<'static>>,
    out: Vec<u8>,
    outcomes: Vec<Outcome>,
    version: u32,
    /// Requests in the current batch.
    count: usize,
}

impl<const K: usize, const V: usize> Batcher<K, V> {
    fn new(batch: usize) -> Batcher<K, V> {
        Batcher {
            keys: vec![[0; K]; batch],
            values: vec![[0; V]; batch],
            numbers: vec![0; batch],
            gets: vec![false; batch],
            spare: Vec::with_capacity(batch),
            out: Vec::with_capacity(batch * V),
            outcomes: Vec::with_capacity(batch),
            version: 0,
            count: 0,
        }
    }

    /// Chooses `count` (key number, is-get) pairs and writes their keys and values.
    #[inline(always)]
    fn fill(&mut self, count: usize, mut choose: impl FnMut(usize) -> (u64, bool)) {
        self.count = count;
        self.version = self.version.wrapping_add(1);
        let (keys, values) = (&mut self.keys[..count], &mut self.values[..count]);
        let (numbers, gets) = (&mut self.numbers[..count], &mut self.gets[..count]);
        for i in 0..count {
            let (number, get) = choose(i);
            (numbers[i], gets[i]) = (number, get);
            write_key(number, &mut keys[i]);
            // Written for GETs too: a branch on the operation here would be one more
            // mispredicted branch per request in a mixed workload.
            write_value(number, self.version, &mut values[i]);
        }
    }

    #[inline(always)]
    fn execute(&mut self, partition: &mut Target, prefetch: bool) {
        let mut requests = recycle(std::mem::take(&mut self.spare));
        let count = self.count;
        for ((key, value), &get) in
            self.keys[..count].iter().zip(&self.values[..count]).zip(&self.gets[..count])
        {
            // Chosen by index, not by branch (see `fill`).
            let command = [
                PartitionCommand::Store { mode: StoreMode::Set, value, flags: 0, expiry: Expiry::NEVER },
                PartitionCommand::Get,
            ][usize::from(get)];
            requests.push(PartitionRequest::new(key, command));
        }
        self.out.clear();
        self.outcomes.clear();
        match partition {
            Target::Owned(partition) => {
                partition.execute_batch(&requests, NOW, prefetch, &mut self.out, &mut self.outcomes)
            }
            Target::Shared(partition) => {
                partition.execute_batch(&requests, NOW, &mut self.out, &mut self.outcomes)
            }
        }
        self.spare = recycle(requests);
    }

    /// Counts hits, misses and wrong answers, with selects rather than a branch on each
    /// outcome's kind (see `fill`).
    #[inline(always)]
    fn check(&self, tally: &mut Tally) {
        for (outcome, &number) in self.outcomes.iter().zip(&self.numbers[..self.count]) {
            let is_hit = matches!(outcome, Outcome::Hit(_));
            let is_miss = matches!(outcome, Outcome::Miss);
            let is_stored = matches!(outcome, Outcome::Stored { .. });
            let (value_start, value_len) = match outcome {
                Outcome::Hit(hit) => (hit.value_start, hit.value_len),
                _ => (0, V),
            };
            let value = self.out.get(value_start..value_start + V).unwrap_or(&[]);
            let right = (value_len == V) & (value.len() == V) && value_matches(number, value);
            tally.hits += u64::from(is_hit);
            tally.misses += u64::from(is_miss);
            tally.wrong += u64::from(is_hit & !right) + u64::from(!(is_hit | is_miss | is_stored));
        }
    }
}

/// Reuses a request vector's allocation for requests of another lifetime.
fn recycle<'a>(mut requests: Vec<PartitionRequest<'_>>) -> Vec<PartitionRequest<'a>> {
    requests.clear();
    requests.into_iter().map(|_| unreachable!("the vector is empty")).collect()
}

fn run_hashbrown<const K: usize, const V: usize>(args: &EngineArgs) -> EngineReport {
    let started = Instant::now();
    let mut map: hashbrown::HashMap<[u8; K], [u8; V]> = hashbrown::HashMap::with_capacity(args.keys as usize);
    for number in 0..args.keys {
        let (mut key, mut value) = ([0u8; K], [0u8; V]);
        write_key(number, &mut key);
        write_value(number, 0, &mut value);
        map.insert(key, value);
    }
    let load_secs = started.elapsed().as_secs_f64();
    let chooser = KeyChooser::new(args.distribution, args.keys, args.theta);
    let mut rng = Rng::new(args.seed);
    timed_hashbrown(&mut map, &chooser, &mut rng, args.get_ratio, args.ops / 10);
    let started = Instant::now();
    let tally = timed_hashbrown(&mut map, &chooser, &mut rng, args.get_ratio, args.ops);
    let secs = started.elapsed().as_secs_f64();
    let buckets = (map.capacity() * 8 / 7).next_power_of_two() as f64;
    let bytes = buckets * (K + V + 1) as f64;
    report(args, tally, secs, load_secs, |report| {
        report.bytes_per_item_measured = bytes / map.len() as f64;
        report.items_per_gib = (1u64 << 30) as f64 / report.bytes_per_item_measured;
        report.overhead_bytes_per_item = report.bytes_per_item_measured - (K + V) as f64;
        report.index_load = map.len() as f64 / buckets;
        report.log_pages = "heap".into();
        report.index_pages = "heap".into();
    })
}

#[inline(never)]
fn timed_hashbrown<const K: usize, const V: usize>(
    map: &mut hashbrown::HashMap<[u8; K], [u8; V]>,
    chooser: &KeyChooser,
    rng: &mut Rng,
    get_ratio: f64,
    ops: u64,
) -> Tally {
    let mut tally = Tally::default();
    let mut out = Vec::with_capacity(V);
    for op in 0..ops {
        let number = chooser.next(rng);
        let mut key = [0u8; K];
        write_key(number, &mut key);
        if rng.next_f64() < get_ratio {
            out.clear();
            match map.get(&key) {
                Some(value) => {
                    out.extend_from_slice(value);
                    tally.hits += 1;
                    tally.wrong += u64::from(!value_matches(number, &out));
                }
                None => tally.misses += 1,
            }
        } else {
            let mut value = [0u8; V];
            write_value(number, op as u32, &mut value);
            map.insert(key, value);
        }
    }
    tally
}

fn report(
    args: &EngineArgs,
    tally: Tally,
    secs: f64,
    load_secs: f64,
    fill: impl FnOnce(&mut EngineReport),
) -> EngineReport {
    let lookups = (tally.hits + tally.misses).max(1);
    let mut report = EngineReport {
        store: args.store,
        mode: args.mode,
        dataset: args.dataset,
        dist: args.distribution,
        theta: args.theta,
        get_ratio: args.get_ratio,
        keys: args.keys,
        ops: args.ops,
        batch: args.batch,
        prefetch: args.prefetch,
        mops: args.ops as f64 / secs / 1e6,
        ns_per_op: secs * 1e9 / args.ops.max(1) as f64,
        hit_ratio: tally.hits as f64 / lookups as f64,
        wrong_values: tally.wrong,
        items_per_gib: 0.0,
        overhead_bytes_per_item: 0.0,
        bytes_per_item_measured: 0.0,
        index_load: 0.0,
        log_pages: String::new(),
        index_pages: String::new(),
        load_secs,
    };
    fill(&mut report);
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        engine: EngineArgs,
    }

    fn args(extra: &[&str]) -> EngineArgs {
        let base = ["engine", "--keys", "3000", "--ops", "20000", "--huge-pages", "off"];
        Cli::parse_from(base.iter().chain(extra)).engine
    }

    /// The benchmark itself runs in `cargo test` with tiny parameters so it cannot rot.
    #[test]
    fn every_store_dataset_and_distribution_runs_and_answers_right() {
        for store in ["qs", "hashbrown"] {
            for dataset in ["tiny", "small", "large", "xlarge"] {
                for dist in ["uniform", "zipf"] {
                    for prefetch in ["on", "off"] {
                        let args = args(&[
                            "--store",
                            store,
                            "--dataset",
                            dataset,
                            "--dist",
                            dist,
                            "--prefetch",
                            prefetch,
                            "--get-ratio",
                            "0.5",
                        ]);
                        let report = run(&args);
                        assert_eq!(report.wrong_values, 0, "{store} {dataset} {dist}");
                        assert!(report.hit_ratio > 0.99, "{store} {dataset} {dist}: {}", report.hit_ratio);
                        assert!(report.mops > 0.0 && report.items_per_gib > 0.0);
                    }
                }
            }
        }
    }

    #[test]
    fn every_access_mode_runs() {
        for access in ["erew", "crew", "crcw"] {
            let report = run(&args(&["--access", access, "--get-ratio", "0.5"]));
            assert_eq!(report.wrong_values, 0, "{access}");
            assert!(report.hit_ratio > 0.99 && report.index_load > 0.0, "{access}");
        }
    }

    #[test]
    fn store_mode_runs_every_dataset_and_access_and_loses_nothing() {
        for dataset in ["tiny", "small", "large", "xlarge"] {
            for access in ["erew", "crew", "crcw"] {
                let report = run(&args(&[
                    "--mode",
                    "store",
                    "--dataset",
                    dataset,
                    "--access",
                    access,
                    "--get-ratio",
                    "0.5",
                ]));
                assert_eq!(report.wrong_values, 0, "{dataset} {access}");
                assert_eq!(report.hit_ratio, 1.0, "{dataset} {access}: store mode never loses a key");
            }
        }
    }

    #[test]
    fn tiny_items_cost_at_most_32_bytes_of_overhead() {
        let report = run(&args(&["--dataset", "tiny"]));
        assert!(report.overhead_bytes_per_item <= 32.0, "{}", report.overhead_bytes_per_item);
    }
}
