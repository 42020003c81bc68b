//! `qs-bench run`: a load generator over memcached's text protocol on TCP, so it drives
//! memcached and quicksilver alike. Closed loop by default: each connection keeps `depth`
//! requests in flight. With `--rate R`, open loop: requests arrive as a Poisson process of R per
//! second over all connections whatever the server does, and each latency is measured from the
//! request's scheduled time, so a stalled server is charged for the requests it delayed (no
//! coordinated omission). Every GET reply is checked against the key it asked for; the server's
//! CPU time per operation comes from /proc when its PID is given.

use crate::workload::{Distribution, KeyChooser, Rng};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use serde::Serialize;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Key and value sizes (MICA's datasets that fit a text protocol line comfortably).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
pub enum LoadDataset {
    /// 8-byte keys, 8-byte values.
    Tiny,
    /// 16-byte keys, 64-byte values.
    Small,
    /// 128-byte keys, 1024-byte values.
    Large,
}

impl LoadDataset {
    fn sizes(self) -> (usize, usize) {
        match self {
            LoadDataset::Tiny => (8, 8),
            LoadDataset::Small => (16, 64),
            LoadDataset::Large => (128, 1024),
        }
    }
}

/// Options of `qs-bench run`.
#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1:11211")]
    pub server: SocketAddr,
    /// Connections.
    #[arg(long, default_value_t = 50)]
    pub connections: usize,
    /// Requests in flight per connection (closed loop); with --rate, the most a connection
    /// pipelines before later arrivals wait (their latency still counts from their schedule).
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// Open loop: offered operations per second over all connections (Poisson arrivals).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Key and value sizes.
    #[arg(long, value_enum, default_value_t = LoadDataset::Tiny)]
    pub dataset: LoadDataset,
    /// Distinct keys (all loaded before the run).
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Fraction of GETs (the rest are SETs).
    #[arg(long, default_value_t = 0.95)]
    pub get_ratio: f64,
    /// Key distribution.
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    pub dist: Distribution,
    /// Zipf skew.
    #[arg(long, default_value_t = 0.99)]
    pub theta: f64,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Unmeasured seconds first.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// The server's PID, to report its CPU time per operation.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Skip loading the keys first.
    #[arg(long)]
    pub no_load: bool,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print a JSON line after the table.
    #[arg(long)]
    pub json: bool,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Server address.
    pub server: String,
    /// Dataset.
    pub dataset: LoadDataset,
    /// Key distribution.
    pub dist: String,
    /// GET fraction.
    pub get_ratio: f64,
    /// Connections.
    pub connections: usize,
    /// Depth.
    pub depth: usize,
    /// Offered operations per second (open loop), or none (closed loop).
    pub offered_rate: Option<f64>,
    /// Operations completed in the measured window.
    pub ops: u64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// GET hit ratio.
    pub hit_ratio: f64,
    /// Replies that were errors or carried another key's value.
    pub wrong: u64,
    /// Latency percentiles in microseconds (request sent, or scheduled in open loop, to reply
    /// read).
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Server user+system CPU microseconds per operation (when its PID was given).
    pub server_cpu_us_per_op: Option<f64>,
}

/// Linux's USER_HZ: /proc reports CPU times in these ticks.
const TICKS_PER_SEC: f64 = 100.0;

/// The server's user+system CPU seconds so far.
pub fn process_cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    let user: f64 = fields.get(11)?.parse().ok()?;
    let system: f64 = fields.get(12)?.parse().ok()?;
    Some((user + system) / TICKS_PER_SEC)
}

fn write_key(number: u64, len: usize, out: &mut Vec<u8>) {
    let text = format!("{number:0len$x}");
    out.extend_from_slice(&text.as_bytes()[text.len() - len..]);
}

fn value_for(number: u64, len: usize, out: &mut Vec<u8>) {
    let text = format!("{number:016x}");
    for i in 0..len {
        out.push(text.as_bytes()[i % 16]);
    }
}

/// What a request expects back.
#[derive(Clone, Copy)]
struct Sent {
    key: u64,
    get: bool,
    /// When it was sent (closed loop) or scheduled (open loop).
    at: Instant,
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

struct Conn {
    stream: TcpStream,
    inflight: VecDeque<Sent>,
    /// Open loop: arrivals waiting because `depth` requests are already in flight.
    backlog: VecDeque<Instant>,
    input: Vec<u8>,
    output: Vec<u8>,
}

struct Counters {
    ops: u64,
    gets: u64,
    hits: u64,
    wrong: u64,
    latency: Histogram<u64>,
}

/// Parses one reply from the front of `input`: `Some((bytes, hit, ok))`.
fn parse_reply(input: &[u8], sent: &Sent, key_len: usize, value_len: usize) -> Option<(usize, bool, bool)> {
    let line_end = input.windows(2).position(|w| w == b"\r\n")?;
    let line = &input[..line_end];
    if sent.get {
        if line == b"END" {
            return Some((line_end + 2, false, true));
        }
        if line.starts_with(b"VALUE ") {
            let bytes: usize = line
                .rsplit(|&b| b == b' ')
                .next()?
                .iter()
                .try_fold(0usize, |n, &d| d.is_ascii_digit().then(|| n * 10 + (d - b'0') as usize))?;
            let total = line_end + 2 + bytes + 2 + 5;
            if input.len() < total {
                return None;
            }
            let mut expected_key = Vec::new();
            write_key(sent.key, key_len, &mut expected_key);
            let mut expected_value = Vec::new();
            value_for(sent.key, value_len, &mut expected_value);
            let data = &input[line_end + 2..line_end + 2 + bytes];
            let ok = line[6..].starts_with(&expected_key) && data == &expected_value[..];
            return Some((total, true, ok));
        }
        return Some((line_end + 2, false, false));
    }
    Some((line_end + 2, false, line == b"STORED"))
}

fn request(args: &LoadArgs, rng: &mut Rng, chooser: &KeyChooser, out: &mut Vec<u8>) -> Sent {
    request_at(args, rng, chooser, out, Instant::now())
}

fn request_at(args: &LoadArgs, rng: &mut Rng, chooser: &KeyChooser, out: &mut Vec<u8>, at: Instant) -> Sent {
    let (key_len, value_len) = args.dataset.sizes();
    let key = chooser.next(rng);
    let get = rng.next_f64() < args.get_ratio;
    if get {
        out.extend_from_slice(b"get ");
        write_key(key, key_len, out);
        out.extend_from_slice(b"\r\n");
    } else {
        out.extend_from_slice(b"set ");
        write_key(key, key_len, out);
        out.extend_from_slice(format!(" 0 0 {value_len}\r\n").as_bytes());
        value_for(key, value_len, out);
        out.extend_from_slice(b"\r\n");
    }
    Sent { key, get, at }
}

/// Stores every key once (pipelined, noreply), then waits for the server to catch up.
fn preload(args: &LoadArgs) -> std::io::Result<()> {
    let (key_len, value_len) = args.dataset.sizes();
    let mut stream = std::net::TcpStream::connect(args.server)?;
    let mut batch = Vec::new();
    for key in 0..args.keys {
        batch.extend_from_slice(b"set ");
        write_key(key, key_len, &mut batch);
        batch.extend_from_slice(format!(" 0 0 {value_len} noreply\r\n").as_bytes());
        value_for(key, value_len, &mut batch);
        batch.extend_from_slice(b"\r\n");
        if batch.len() > 256 << 10 {
            stream.write_all(&batch)?;
            batch.clear();
        }
    }
    batch.extend_from_slice(b"version\r\n");
    stream.write_all(&batch)?;
    let mut reply = [0u8; 256];
    let mut got = Vec::new();
    while !got.ends_with(b"\r\n") {
        let n = stream.read(&mut reply)?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&reply[..n]);
    }
    Ok(())
}

/// Runs the load and reports.
pub fn run(args: &LoadArgs) -> std::io::Result<LoadReport> {
    if !args.no_load {
        preload(args)?;
    }
    let (key_len, value_len) = args.dataset.sizes();
    let chooser = KeyChooser::new(args.dist, args.keys, args.theta);
    let mut rng = Rng::new(args.seed);
    let mut poll = Poll::new()?;
    let mut conns = Vec::new();
    for index in 0..args.connections {
        let std_stream = std::net::TcpStream::connect(args.server)?;
        std_stream.set_nodelay(true)?;
        std_stream.set_nonblocking(true)?;
        let mut stream = TcpStream::from_std(std_stream);
        poll.registry().register(&mut stream, Token(index), Interest::READABLE)?;
        conns.push(Conn {
            stream,
            inflight: VecDeque::new(),
            backlog: VecDeque::new(),
            input: Vec::new(),
            output: Vec::new(),
        });
    }
    let open = args.rate.is_some();
    let mut arrivals = args.rate.map(|rate| Arrivals::new(rate, args.seed ^ 0xA5A5));
    let mut next_conn = 0;
    for conn in conns.iter_mut().filter(|_| !open) {
        for _ in 0..args.depth {
            let sent = request(args, &mut rng, &chooser, &mut conn.output);
            conn.inflight.push_back(sent);
        }
        conn.stream.write_all(&conn.output)?;
        conn.output.clear();
    }
    let mut counters = Counters {
        ops: 0,
        gets: 0,
        hits: 0,
        wrong: 0,
        latency: Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds"),
    };
    let mut events = Events::with_capacity(1024);
    let start = Instant::now();
    let warmup_end = start + Duration::from_secs_f64(args.warmup);
    let end = warmup_end + Duration::from_secs_f64(args.duration);
    let mut measuring = false;
    let mut cpu_start = None;
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let now = Instant::now();
        if !measuring && now >= warmup_end {
            measuring = true;
            counters = Counters { latency: Histogram::new_from(&counters.latency), ..counters };
            counters.ops = 0;
            counters.gets = 0;
            counters.hits = 0;
            counters.wrong = 0;
            cpu_start = args.server_pid.and_then(process_cpu_secs);
        }
        if now >= end {
            break;
        }
        let mut timeout = Duration::from_millis(10);
        if let Some(arrivals) = arrivals.as_mut() {
            // Hand each due arrival to the next connection, round robin.
            let since_start = now - start;
            while let Some(due) = arrivals.due(since_start) {
                conns[next_conn].backlog.push_back(start + due);
                next_conn = (next_conn + 1) % conns.len();
            }
            for conn in &mut conns {
                let before = conn.output.len();
                while conn.inflight.len() < args.depth {
                    let Some(at) = conn.backlog.pop_front() else { break };
                    let sent = request_at(args, &mut rng, &chooser, &mut conn.output, at);
                    conn.inflight.push_back(sent);
                }
                if conn.output.len() > before {
                    conn.stream.write_all(&conn.output)?;
                    conn.output.clear();
                }
            }
            // epoll waits in whole milliseconds: spin when the next arrival is sooner.
            let until_next = arrivals.next_at().saturating_sub(since_start);
            timeout =
                if until_next < Duration::from_millis(1) { Duration::ZERO } else { until_next.min(timeout) };
        }
        poll.poll(&mut events, Some(timeout))?;
        for event in events.iter() {
            let conn = &mut conns[event.token().0];
            loop {
                match conn.stream.read(&mut chunk) {
                    Ok(0) => return Err(std::io::Error::other("the server closed a connection")),
                    Ok(n) => conn.input.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            let mut consumed = 0;
            while let Some(sent) = conn.inflight.front().copied() {
                let Some((len, hit, ok)) = parse_reply(&conn.input[consumed..], &sent, key_len, value_len)
                else {
                    break;
                };
                consumed += len;
                conn.inflight.pop_front();
                counters.ops += 1;
                counters.gets += sent.get as u64;
                counters.hits += hit as u64;
                counters.wrong += !ok as u64;
                let _ = counters.latency.record(sent.at.elapsed().as_micros().max(1) as u64);
                if !open {
                    let next = request(args, &mut rng, &chooser, &mut conn.output);
                    conn.inflight.push_back(next);
                }
            }
            conn.input.drain(..consumed);
            if !conn.output.is_empty() {
                conn.stream.write_all(&conn.output)?;
                conn.output.clear();
            }
        }
    }
    let elapsed = args.duration;
    let cpu_end = args.server_pid.and_then(process_cpu_secs);
    let server_cpu_us_per_op = match (cpu_start, cpu_end) {
        (Some(a), Some(b)) if counters.ops > 0 => Some((b - a) * 1e6 / counters.ops as f64),
        _ => None,
    };
    Ok(LoadReport {
        server: args.server.to_string(),
        dataset: args.dataset,
        dist: format!("{:?}", args.dist).to_lowercase(),
        get_ratio: args.get_ratio,
        connections: args.connections,
        depth: args.depth,
        offered_rate: args.rate,
        ops: counters.ops,
        ops_per_sec: counters.ops as f64 / elapsed,
        hit_ratio: counters.hits as f64 / counters.gets.max(1) as f64,
        wrong: counters.wrong,
        p50_us: counters.latency.value_at_quantile(0.5) as f64,
        p99_us: counters.latency.value_at_quantile(0.99) as f64,
        p999_us: counters.latency.value_at_quantile(0.999) as f64,
        server_cpu_us_per_op,
    })
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
    fn replies_parse_and_values_are_checked() {
        let sent = Sent { key: 5, get: true, at: Instant::now() };
        let mut value = Vec::new();
        value_for(5, 8, &mut value);
        let mut reply = b"VALUE 00000005 0 8\r\n".to_vec();
        reply.extend_from_slice(&value);
        reply.extend_from_slice(b"\r\nEND\r\n");
        assert_eq!(parse_reply(&reply, &sent, 8, 8), Some((reply.len(), true, true)));
        assert_eq!(parse_reply(&reply[..reply.len() - 1], &sent, 8, 8), None);
        assert_eq!(parse_reply(b"END\r\n", &sent, 8, 8), Some((5, false, true)));
        let wrong_key = Sent { key: 6, ..sent };
        assert_eq!(parse_reply(&reply, &wrong_key, 8, 8).map(|r| r.2), Some(false));
        let set = Sent { get: false, ..sent };
        assert_eq!(parse_reply(b"STORED\r\n", &set, 8, 8), Some((8, false, true)));
    }
}
