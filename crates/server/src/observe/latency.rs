//! Server-side latency, which memcached does not measure: per worker and per command family,
//! two histograms of fixed log-scale buckets (2^k µs for k = 0..=24, 1 µs to 16.8 s, then
//! +Inf). One times a request from the moment its window was parsed to the moment its reply
//! was queued for the socket; the other from the read that brought its first byte, so time
//! spent queued behind other connections and requests shows.
//!
//! Each worker writes only its own histograms, with relaxed loads and stores (plain moves on
//! x86: no locked instruction, no cache line another thread writes); `/metrics` and
//! `stats latency` sum the workers' at scrape time. Time comes from the CPU's time-stamp
//! counter where there is one (one instruction: [`crate::sys::ticks`]), converted to
//! nanoseconds by a factor measured against the monotonic clock at start.

use qs_proto::{Parsed, Request};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// Buckets per histogram: `le` = 2^k µs for k in 0..=24, then +Inf.
pub const BUCKETS: usize = 26;

/// Which commands a request is counted with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Family {
    /// get gets gat gats.
    Get,
    /// set add replace append prepend cas.
    Set,
    /// delete.
    Delete,
    /// incr decr.
    IncrDecr,
    /// touch.
    Touch,
    /// Meta mg.
    MetaGet,
    /// Meta ms.
    MetaSet,
    /// Meta md.
    MetaDelete,
    /// Meta ma.
    MetaArith,
    /// Any binary-protocol frame.
    Binary,
    /// Redis GET and its kin (reads of one or more keys).
    RedisGet,
    /// Redis SET and its kin (stores).
    RedisSet,
    /// Any other Redis command.
    RedisOther,
    /// Everything else: admin commands, meta no-ops and debug, refused lines.
    Other,
}

/// Every family, in label order.
pub const FAMILIES: [Family; 14] = [
    Family::Get,
    Family::Set,
    Family::Delete,
    Family::IncrDecr,
    Family::Touch,
    Family::MetaGet,
    Family::MetaSet,
    Family::MetaDelete,
    Family::MetaArith,
    Family::Binary,
    Family::RedisGet,
    Family::RedisSet,
    Family::RedisOther,
    Family::Other,
];

impl Family {
    /// Its label value.
    pub fn name(self) -> &'static str {
        match self {
            Family::Get => "get",
            Family::Set => "set",
            Family::Delete => "delete",
            Family::IncrDecr => "incr_decr",
            Family::Touch => "touch",
            Family::MetaGet => "meta_get",
            Family::MetaSet => "meta_set",
            Family::MetaDelete => "meta_delete",
            Family::MetaArith => "meta_arith",
            Family::Binary => "binary",
            Family::RedisGet => "redis_get",
            Family::RedisSet => "redis_set",
            Family::RedisOther => "redis_other",
            Family::Other => "other",
        }
    }

    /// The family of a parsed request.
    #[inline]
    pub fn of(parsed: &Parsed<'_>) -> Family {
        use qs_proto::command::Op;
        use qs_proto::MetaCommand;
        let Parsed::Request { request, .. } = parsed else { return Family::Other };
        match request {
            Request::Get { .. } => Family::Get,
            Request::Store { .. } | Request::TooLarge { .. } => Family::Set,
            Request::Delete { .. } => Family::Delete,
            Request::Arith { .. } => Family::IncrDecr,
            Request::Touch { .. } => Family::Touch,
            Request::Meta(meta) => match meta.command {
                MetaCommand::Get => Family::MetaGet,
                MetaCommand::Set => Family::MetaSet,
                MetaCommand::Delete => Family::MetaDelete,
                MetaCommand::Arith => Family::MetaArith,
                MetaCommand::Debug => Family::Other,
            },
            Request::Binary(_) => Family::Binary,
            Request::RespKey(command) => match command.op {
                Op::Get(_) => Family::RedisGet,
                Op::Store(_) | Op::TooLarge { .. } => Family::RedisSet,
                _ => Family::RedisOther,
            },
            Request::Resp(_) | Request::RespProtocolError(_) => Family::RedisOther,
            _ => Family::Other,
        }
    }
}

/// Slots a histogram keeps: one per possible [`slot`] (0 to 64); those from [`BUCKETS`] - 1
/// on are the +Inf bucket, folded when read, so recording needs no clamp.
const SLOTS: usize = 65;

/// One histogram: its slots' counts and the sum of what it recorded, in ticks.
struct Histogram {
    slots: [AtomicU64; SLOTS],
    sum_ticks: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram { slots: std::array::from_fn(|_| AtomicU64::new(0)), sum_ticks: AtomicU64::new(0) }
    }
}

/// Adds `by` to a counter only its worker writes (a relaxed load and store: no locked
/// instruction; readers see a value at most one update old).
#[inline(always)]
fn bump(counter: &AtomicU64, by: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(by), Relaxed);
}

/// The slot of a duration of `micros` whole microseconds: the least k with the duration under
/// 2^k µs (`ilog2(2·micros + 1)`: one bit scan, no branch).
#[inline(always)]
fn slot(micros: u64) -> usize {
    ((micros << 1) | 1).ilog2() as usize
}

/// The bucket of a duration of `micros` whole microseconds: the least k with the duration
/// under 2^k µs (the last, +Inf, for 2^24 µs and longer).
pub fn bucket(micros: u64) -> usize {
    slot(micros).min(BUCKETS - 1)
}

impl Histogram {
    /// Records `ticks`, which are `micros` whole microseconds.
    #[inline(always)]
    fn record(&self, ticks: u64, micros: u64) {
        bump(&self.slots[slot(micros)], 1);
        bump(&self.sum_ticks, ticks);
    }
}

/// A family's two histograms, side by side (one address computation records both).
#[derive(Default)]
struct Pair {
    /// Parsed to reply queued.
    service: Histogram,
    /// First byte read to reply queued.
    read_to_reply: Histogram,
}

/// One worker's histograms, on cache lines of their own.
#[repr(align(128))]
pub struct WorkerLatency {
    /// Per family.
    families: [Pair; FAMILIES.len()],
    /// Microseconds per tick, times 2^32 (one multiply and a shift make a slot's input).
    us_per_tick_q32: u64,
}

impl WorkerLatency {
    fn new(ns_per_tick_q32: u64) -> WorkerLatency {
        WorkerLatency { families: Default::default(), us_per_tick_q32: (ns_per_tick_q32 / 1000).max(1) }
    }

    /// Whole microseconds in `ticks` of [`crate::sys::ticks`].
    #[inline(always)]
    fn micros(&self, ticks: u64) -> u64 {
        ((ticks as u128 * self.us_per_tick_q32 as u128) >> 32) as u64
    }

    /// Records a request of `family` whose reply was queued at tick `done`, its window parsed
    /// at `parsed` and its first byte read at `read`.
    #[inline(always)]
    pub fn record(&self, family: Family, read: u64, parsed: u64, done: u64) {
        let pair = &self.families[family as usize];
        // Parsed and done on this thread in this turn: never backwards.
        let service = done.wrapping_sub(parsed);
        let total = done.saturating_sub(read);
        pair.service.record(service, self.micros(service));
        pair.read_to_reply.record(total, self.micros(total));
    }
}

/// Which of the two histograms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    /// Parsed to reply queued.
    Service,
    /// First byte read to reply queued.
    ReadToReply,
}

/// A histogram summed over the workers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summed {
    /// Count per bucket (not cumulative).
    pub buckets: [u64; BUCKETS],
    /// Sum of the durations, in nanoseconds.
    pub sum_ns: u64,
}

impl Summed {
    /// Requests recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The upper bound of bucket `k` in seconds (`None`: +Inf).
    pub fn bound_secs(k: usize) -> Option<f64> {
        (k + 1 < BUCKETS).then(|| (1u64 << k) as f64 * 1e-6)
    }

    /// The least bucket bound under which at least `quantile` of the requests fell, in
    /// microseconds (`None` when nothing was recorded or it is the +Inf bucket).
    pub fn quantile_bound_us(&self, quantile: f64) -> Option<u64> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        let wanted = ((count as f64) * quantile).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (k, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= wanted {
                return (k + 1 < BUCKETS).then_some(1u64 << k);
            }
        }
        None
    }
}

/// Every worker's histograms.
pub struct Latency {
    workers: Box<[WorkerLatency]>,
    /// Nanoseconds per tick, times 2^32 (for the sums, at scrape time).
    ns_per_tick_q32: u64,
}

impl Latency {
    /// Histograms for `workers` workers, converting ticks at `ns_per_tick_q32`
    /// ([`crate::sys::ns_per_tick_q32`]).
    pub fn new(workers: usize, ns_per_tick_q32: u64) -> Latency {
        Latency {
            workers: (0..workers).map(|_| WorkerLatency::new(ns_per_tick_q32)).collect(),
            ns_per_tick_q32,
        }
    }

    /// Worker `index`'s histograms (its own to write).
    #[inline(always)]
    pub fn worker(&self, index: usize) -> &WorkerLatency {
        &self.workers[index]
    }

    /// Workers measured.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Requests worker `index` has run (and timed), of every family.
    pub fn worker_requests(&self, index: usize) -> u64 {
        let worker = &self.workers[index];
        worker.families.iter().flat_map(|pair| &pair.service.slots).map(|slot| slot.load(Relaxed)).sum()
    }

    /// One family's histogram, summed over the workers.
    pub fn summed(&self, family: Family, span: Span) -> Summed {
        let mut summed = Summed::default();
        let mut sum_ticks: u128 = 0;
        for worker in self.workers.iter() {
            let pair = &worker.families[family as usize];
            let histogram = match span {
                Span::Service => &pair.service,
                Span::ReadToReply => &pair.read_to_reply,
            };
            for (at, slot) in histogram.slots.iter().enumerate() {
                summed.buckets[at.min(BUCKETS - 1)] += slot.load(Relaxed);
            }
            sum_ticks += histogram.sum_ticks.load(Relaxed) as u128;
        }
        summed.sum_ns = ((sum_ticks * self.ns_per_tick_q32 as u128) >> 32) as u64;
        summed
    }

    /// `stats latency`: the histograms `/metrics` shows, per command family that has seen a
    /// request and per span (`service`: parsed to reply queued; `read_to_reply`: first byte
    /// read to reply queued): the count, the sum and the 50th, 99th and 99.9th percentiles'
    /// bucket bounds in microseconds, then each bucket's cumulative count up to the last one
    /// used (`le_<bound>us`, as Prometheus's `le`).
    pub fn write_stats(&self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let mut stat = |name: &str, value: &dyn std::fmt::Display| {
            let _ = write!(out, "STAT {name} {value}\r\n");
        };
        for family in FAMILIES {
            for (span, span_name) in [(Span::Service, "service"), (Span::ReadToReply, "read_to_reply")] {
                let summed = self.summed(family, span);
                let count = summed.count();
                if count == 0 {
                    continue;
                }
                let prefix = format!("{}:{span_name}", family.name());
                stat(&format!("{prefix}:count"), &count);
                stat(&format!("{prefix}:sum_us"), &(summed.sum_ns / 1000));
                for (quantile, name) in [(0.5, "p50"), (0.99, "p99"), (0.999, "p999")] {
                    let bound = summed.quantile_bound_us(quantile);
                    stat(
                        &format!("{prefix}:{name}_us"),
                        &bound.map_or("+Inf".to_string(), |us| us.to_string()),
                    );
                }
                let last = summed.buckets.iter().rposition(|&n| n > 0).unwrap_or(0);
                let mut cumulative = 0;
                for (k, n) in summed.buckets.iter().enumerate().take(last + 1) {
                    cumulative += n;
                    match Summed::bound_secs(k) {
                        Some(_) => stat(&format!("{prefix}:le_{}us", 1u64 << k), &cumulative),
                        None => stat(&format!("{prefix}:le_inf"), &cumulative),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_microseconds() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 1);
        assert_eq!(bucket(2), 2);
        assert_eq!(bucket(3), 2);
        assert_eq!(bucket(4), 3);
        assert_eq!(bucket(1 << 40), BUCKETS - 1);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        // Every bucket's values are below its bound and at or above the one before.
        for k in 0..BUCKETS - 1 {
            let bound_us = 1u64 << k;
            assert_eq!(bucket(bound_us - 1), k, "{k}");
            assert_eq!(bucket(bound_us), k + 1, "{k}");
        }
        assert_eq!(Summed::bound_secs(0), Some(1e-6));
        assert_eq!(Summed::bound_secs(24), Some(16.777216));
        assert_eq!(Summed::bound_secs(25), None);
    }

    #[test]
    fn workers_are_summed_per_family_and_span() {
        // One tick is one nanosecond.
        let latency = Latency::new(2, 1 << 32);
        latency.worker(0).record(Family::Get, 0, 500, 1_700);
        latency.worker(1).record(Family::Get, 0, 10_000, 13_200);
        latency.worker(1).record(Family::Set, 100, 200, 300);
        let service = latency.summed(Family::Get, Span::Service);
        assert_eq!(service.count(), 2);
        assert_eq!(service.sum_ns, 1_200 + 3_200);
        assert_eq!(service.buckets[1], 1);
        assert_eq!(service.buckets[2], 1);
        let waited = latency.summed(Family::Get, Span::ReadToReply);
        assert_eq!(waited.sum_ns, 1_700 + 13_200);
        assert_eq!(waited.buckets[bucket(13)], 1);
        assert_eq!(latency.summed(Family::Set, Span::Service).count(), 1);
        assert_eq!(latency.summed(Family::Delete, Span::Service), Summed::default());
        assert_eq!(service.quantile_bound_us(0.5), Some(2));
        assert_eq!(service.quantile_bound_us(0.99), Some(4));
    }

    #[test]
    fn a_worker_has_cache_lines_of_its_own() {
        assert_eq!(std::mem::align_of::<WorkerLatency>(), 128);
        assert_eq!(std::mem::size_of::<WorkerLatency>() % 128, 0);
    }

    #[test]
    fn every_family_has_its_own_name() {
        let names: std::collections::HashSet<_> = FAMILIES.iter().map(|f| f.name()).collect();
        assert_eq!(names.len(), FAMILIES.len());
        for (index, family) in FAMILIES.iter().enumerate() {
            assert_eq!(*family as usize, index);
        }
    }
}
