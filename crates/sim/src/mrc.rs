//! Miss-ratio curves: one stream, replayed once per model, at cache sizes given in bytes or as
//! fractions of the stream's working set (the bytes of every distinct key, measured by a first
//! pass). Every model counts an item as the engine stores it (header, key and value, padded),
//! so LRU, FIFO and the engine are compared at the same item memory.

use crate::engine::{key_bytes, EngineShape, EngineSim};
use crate::fifo::FifoCache;
use crate::lfu::LfuCache;
use crate::lru::LruCurve;
use crate::merge::MergeCache;
use crate::s3fifo::S3FifoCache;
use crate::stream::Access;
use hashbrown::HashMap;
use qs_store::{Eviction, KeyHash};
use serde::Serialize;
use std::io;

/// Which models to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// Exact LRU (stack distances).
    Lru,
    /// Exact FIFO.
    Fifo,
    /// Exact S3-FIFO.
    S3Fifo,
    /// Segcache's Merge eviction.
    Merge,
    /// Idealised (perfect) LFU.
    Lfu,
    /// The real engine.
    Engine,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct MrcPlan {
    /// Cache sizes in bytes of item memory (added to those from `fractions`).
    pub sizes: Vec<u64>,
    /// Cache sizes as fractions of the working set.
    pub fractions: Vec<f64>,
    /// Models to run.
    pub models: Vec<Model>,
    /// The engine's eviction policy.
    pub eviction: Eviction,
    /// The engine's partitions.
    pub partitions: u32,
    /// Whether a get miss is followed by the client's set.
    pub fill: bool,
    /// The engine's index load (the server's: [`qs_store::config::INDEX_LOAD_DEFAULT`]).
    pub index_load: f64,
    /// Also run, for every size, a twin engine whose index is 16 times larger (it never
    /// overflows), so that what the lossy index costs in hit ratio is the difference.
    pub index_cost: bool,
    /// The engine with a flash tier of this many times each size's DRAM (0: none).
    pub flash_ratio: f64,
}

/// One cache size's figures.
#[derive(Clone, Debug, Serialize)]
pub struct MrcPoint {
    /// Item memory in bytes.
    pub bytes: u64,
    /// As a fraction of the working set.
    pub fraction: f64,
    /// Exact LRU's hit ratio of gets.
    pub lru: Option<f64>,
    /// Exact FIFO's.
    pub fifo: Option<f64>,
    /// Exact S3-FIFO's.
    pub s3fifo: Option<f64>,
    /// Segcache's Merge eviction, if modelled.
    pub merge: Option<f64>,
    /// Idealised LFU's.
    pub lfu: Option<f64>,
    /// The engine's.
    pub engine: Option<f64>,
    /// What the lossy index costs: the hit ratio of a twin whose index never overflows, less
    /// the engine's.
    pub engine_index_cost: Option<f64>,
    /// Share of the engine's gets missed because the item had expired.
    pub engine_expired_miss: Option<f64>,
    /// The share of the engine's held bytes that belong to expired items at the end, waiting
    /// for the head.
    pub engine_expired_held: Option<f64>,
    /// Index slots evicted from full buckets.
    pub engine_index_evictions: Option<u64>,
    /// A live server's own estimate at this size (`qs-sim mrc --live`).
    pub live: Option<f64>,
}

/// A curve.
#[derive(Clone, Debug, Serialize)]
pub struct MrcReport {
    /// Requests replayed (per model).
    pub requests: u64,
    /// Gets among them.
    pub gets: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Bytes of the distinct keys' items.
    pub working_set_bytes: u64,
    /// Gets of keys never seen before (misses at any size), when LRU ran.
    pub cold_miss_ratio: Option<f64>,
    /// The engine's eviction policy.
    pub eviction: String,
    /// One entry per size, ascending.
    pub points: Vec<MrcPoint>,
    /// Requests per second of the engines' replay, over all engines (sizes and twins) and
    /// counting only the replay, not making the stream.
    pub engine_requests_per_sec: Option<f64>,
    /// The replay to a live server and its estimate (`qs-sim mrc --live`).
    pub live: Option<crate::live::LiveReport>,
}

/// Bytes an access's item takes in the engine's log.
pub fn item_bytes(access: &Access) -> u64 {
    qs_store::item::item_bytes(
        access.key_size as usize,
        access.value_size as usize,
        if access.ttl != 0 { qs_store::item::EXT_BYTES } else { 0 },
    ) as u64
}

/// Replays `stream` through every engine and returns the seconds spent replaying (not
/// reading or generating the stream). The stream is taken in chunks; each request's key is
/// made once for all engines, and the engine's two prefetch stages run ahead of the replay
/// as the server runs them over a batch: a request's index bucket is loaded `AHEAD`
/// requests before it is replayed, its item `AHEAD / 2` before. Prefetches are hints: the
/// outcome is that of one request at a time, in order.
fn replay_pipelined<S>(engines: &mut [EngineSim], stream: S) -> io::Result<f64>
where
    S: Iterator<Item = io::Result<Access>>,
{
    const CHUNK: usize = 4096;
    const AHEAD: usize = 16;
    let mut chunk: Vec<(Access, KeyHash)> = Vec::with_capacity(CHUNK);
    let mut keys: Vec<Vec<u8>> = vec![Vec::new(); CHUNK];
    let mut replaying = 0.0;
    let mut stream = stream.fuse();
    loop {
        chunk.clear();
        for key in keys.iter_mut() {
            let Some(access) = stream.next() else { break };
            let access = access?;
            key_bytes(access.key, access.key_size, key);
            chunk.push((access, KeyHash::of(key)));
        }
        if chunk.is_empty() {
            return Ok(replaying);
        }
        let started = std::time::Instant::now();
        for (index, (access, hash)) in chunk.iter().enumerate() {
            if let Some((_, ahead)) = chunk.get(index + AHEAD) {
                engines.iter().for_each(|engine| engine.prefetch(*ahead, 1));
            }
            if let Some((_, ahead)) = chunk.get(index + AHEAD / 2) {
                engines.iter().for_each(|engine| engine.prefetch(*ahead, 2));
            }
            for engine in engines.iter_mut() {
                engine.replay(access, &keys[index], *hash);
            }
        }
        replaying += started.elapsed().as_secs_f64();
    }
}

/// A cache simulated directly, one per size (FIFO and LFU are not stack algorithms).
pub trait SizedCache {
    /// Replays one request; `bytes` is what the item takes.
    fn access(&mut self, access: &Access, bytes: u64);
    /// Hit ratio of gets.
    fn hit_ratio(&self) -> f64;
}

impl SizedCache for FifoCache {
    fn access(&mut self, access: &Access, bytes: u64) {
        FifoCache::access(self, access, bytes);
    }

    fn hit_ratio(&self) -> f64 {
        FifoCache::hit_ratio(self)
    }
}

impl SizedCache for S3FifoCache {
    fn access(&mut self, access: &Access, bytes: u64) {
        S3FifoCache::access(self, access, bytes);
    }

    fn hit_ratio(&self) -> f64 {
        S3FifoCache::hit_ratio(self)
    }
}

impl SizedCache for MergeCache {
    fn access(&mut self, access: &Access, bytes: u64) {
        MergeCache::access(self, access, bytes);
    }

    fn hit_ratio(&self) -> f64 {
        MergeCache::hit_ratio(self)
    }
}

impl SizedCache for LfuCache {
    fn access(&mut self, access: &Access, bytes: u64) {
        LfuCache::access(self, access, bytes);
    }

    fn hit_ratio(&self) -> f64 {
        LfuCache::hit_ratio(self)
    }
}

/// Replays `stream` through one cache per size (all in one pass) and returns their hit ratios.
fn replay_per_size<C: SizedCache, S>(sizes: &[u64], new: impl Fn(u64) -> C, stream: S) -> io::Result<Vec<f64>>
where
    S: Iterator<Item = io::Result<Access>>,
{
    let mut caches: Vec<C> = sizes.iter().map(|&size| new(size)).collect();
    for access in stream {
        let access = access?;
        let bytes = item_bytes(&access);
        caches.iter_mut().for_each(|cache| cache.access(&access, bytes));
    }
    Ok(caches.iter().map(SizedCache::hit_ratio).collect())
}

/// Runs `plan` over the stream `open()` returns (called once per pass).
pub fn run<S>(plan: &MrcPlan, mut open: impl FnMut() -> io::Result<S>) -> io::Result<MrcReport>
where
    S: Iterator<Item = io::Result<Access>>,
{
    let pass = first_pass(open()?)?;
    let mut sizes: Vec<u64> = plan.sizes.clone();
    sizes.extend(plan.fractions.iter().map(|fraction| (pass.working_set as f64 * fraction).round() as u64));
    sizes.retain(|&size| size > 0);
    sizes.sort_unstable();
    sizes.dedup();
    let mut points: Vec<MrcPoint> = sizes
        .iter()
        .map(|&bytes| MrcPoint {
            bytes,
            fraction: bytes as f64 / pass.working_set.max(1) as f64,
            lru: None,
            fifo: None,
            s3fifo: None,
            merge: None,
            lfu: None,
            engine: None,
            engine_index_cost: None,
            engine_expired_miss: None,
            engine_expired_held: None,
            engine_index_evictions: None,
            live: None,
        })
        .collect();
    let mut cold_miss_ratio = None;
    if plan.models.contains(&Model::Lru) {
        let mut curve = LruCurve::new(&sizes);
        for access in open()? {
            let access = access?;
            curve.access(&access, item_bytes(&access));
        }
        for (point, (_, ratio)) in points.iter_mut().zip(curve.hit_ratios()) {
            point.lru = Some(ratio);
        }
        cold_miss_ratio = Some(curve.cold_misses() as f64 / curve.gets().max(1) as f64);
    }
    if plan.models.contains(&Model::Fifo) {
        let ratios = replay_per_size(&sizes, FifoCache::new, open()?)?;
        points.iter_mut().zip(ratios).for_each(|(point, ratio)| point.fifo = Some(ratio));
    }
    if plan.models.contains(&Model::S3Fifo) {
        let ratios = replay_per_size(&sizes, S3FifoCache::new, open()?)?;
        points.iter_mut().zip(ratios).for_each(|(point, ratio)| point.s3fifo = Some(ratio));
    }
    if plan.models.contains(&Model::Merge) {
        let ratios = replay_per_size(&sizes, |bytes| MergeCache::new(bytes).filling(plan.fill), open()?)?;
        points.iter_mut().zip(ratios).for_each(|(point, ratio)| point.merge = Some(ratio));
    }
    if plan.models.contains(&Model::Lfu) {
        let ratios = replay_per_size(&sizes, LfuCache::new, open()?)?;
        points.iter_mut().zip(ratios).for_each(|(point, ratio)| point.lfu = Some(ratio));
    }
    let engine_requests_per_sec = if plan.models.contains(&Model::Engine) {
        Some(engine_points(plan, &pass, &sizes, &mut points, open()?)?)
    } else {
        None
    };
    Ok(MrcReport {
        requests: pass.requests,
        gets: pass.gets,
        keys: pass.keys,
        working_set_bytes: pass.working_set,
        cold_miss_ratio,
        eviction: format!("{:?}", plan.eviction),
        points,
        engine_requests_per_sec,
        live: None,
    })
}

/// What the first pass over a stream finds: its requests, gets, keys, working set and bytes
/// of all the items it touches (for the mean item size).
struct FirstPass {
    requests: u64,
    gets: u64,
    keys: u64,
    working_set: u64,
    item_total: u64,
}

fn first_pass(stream: impl Iterator<Item = io::Result<Access>>) -> io::Result<FirstPass> {
    let mut sizes_by_key: HashMap<u64, u64> = HashMap::new();
    let (mut requests, mut gets, mut item_total) = (0u64, 0u64, 0u64);
    for access in stream {
        let access = access?;
        requests += 1;
        gets += u64::from(access.op == crate::stream::Op::Get);
        let bytes = item_bytes(&access);
        item_total += bytes;
        sizes_by_key.insert(access.key, bytes);
    }
    let working_set: u64 = sizes_by_key.values().sum();
    Ok(FirstPass { requests, gets, keys: sizes_by_key.len() as u64, working_set, item_total })
}

/// The engine model at every size (with `index_cost`, a twin with a 16x roomier index beside
/// each, whose difference is the lossy index's cost), replayed over `stream` at once; fills in
/// the points' engine figures and returns the replay's requests per second.
fn engine_points(
    plan: &MrcPlan,
    pass: &FirstPass,
    sizes: &[u64],
    points: &mut [MrcPoint],
    stream: impl Iterator<Item = io::Result<Access>>,
) -> io::Result<f64> {
    let item_bytes = pass.item_total as f64 / pass.requests.max(1) as f64;
    let engine = |log_bytes: u64, index_load: f64| {
        let shape = EngineShape {
            log_bytes,
            partitions: plan.partitions,
            eviction: plan.eviction,
            item_bytes,
            index_load,
            flash_ratio: plan.flash_ratio,
        };
        EngineSim::new(&shape, plan.fill)
    };
    let mut engines: Vec<EngineSim> =
        sizes.iter().map(|&log_bytes| engine(log_bytes, plan.index_load)).collect();
    if plan.index_cost {
        engines.extend(sizes.iter().map(|&log_bytes| engine(log_bytes, plan.index_load / 16.0)));
    }
    let replaying = replay_pipelined(&mut engines, stream)?;
    let twins = if plan.index_cost { &engines[sizes.len()..] } else { &[] };
    for (index, point) in points.iter_mut().enumerate() {
        let tally = engines[index].tally();
        point.engine = Some(tally.hit_ratio());
        point.engine_expired_miss = Some(tally.expired_misses as f64 / tally.gets.max(1) as f64);
        point.engine_expired_held = Some(engines[index].expired_share());
        if let Some(twin) = twins.get(index) {
            point.engine_index_cost = Some(twin.tally().hit_ratio() - tally.hit_ratio());
        }
        point.engine_index_evictions = Some(tally.index_evictions);
    }
    Ok((pass.requests * engines.len() as u64) as f64 / replaying.max(1e-9))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{KeyDist, SizeDist, Synthetic};

    #[test]
    fn curves_rise_with_size_and_the_models_agree_where_everything_fits() {
        let recipe = Synthetic {
            keys: 5_000,
            requests: 100_000,
            dist: KeyDist::Zipf(0.99),
            set_share: 0.05,
            ycsb: None,
            key_size: 16,
            sizes: SizeDist::Uniform { min: 16, max: 200 },
            rate: 10_000,
            seed: 2,
            scramble: false,
            scan_share: 0.0,
            ttl_mix: false,
        };
        let plan = MrcPlan {
            sizes: vec![],
            fractions: vec![0.05, 0.2, 0.5, 2.0],
            models: vec![Model::Lru, Model::Fifo, Model::Lfu, Model::Engine],
            eviction: Eviction::ApproxLru,
            partitions: 1,
            fill: true,
            index_load: qs_store::config::INDEX_LOAD_DEFAULT,
            index_cost: true,
            flash_ratio: 0.0,
        };
        let report = run(&plan, || Ok(recipe.stream().map(Ok))).unwrap();
        assert_eq!(report.requests, 100_000);
        assert_eq!(report.points.len(), 4);
        for pair in report.points.windows(2) {
            assert!(pair[0].lru < pair[1].lru && pair[0].fifo < pair[1].fifo);
            assert!(pair[0].engine < pair[1].engine);
        }
        for point in &report.points {
            // LRU beats FIFO on a skewed stream; with a static popularity, perfect LFU beats both.
            assert!(point.lru >= point.fifo, "{point:?}");
            assert!(point.lfu >= point.lru, "{point:?}");
        }
        let all = &report.points[3];
        let ceiling = 1.0 - report.cold_miss_ratio.unwrap();
        assert!((all.lru.unwrap() - ceiling).abs() < 1e-9 && (all.fifo.unwrap() - ceiling).abs() < 1e-9);
        assert!(all.engine.unwrap() > ceiling - 0.01, "{all:?} vs {ceiling}");
    }
}
