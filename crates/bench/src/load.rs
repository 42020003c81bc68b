//! `qs-bench run`: a load generator for memcached-compatible servers. Over TCP it speaks
//! memcached's text protocol or its meta protocol, over UDP memcached's framed UDP protocol, so
//! it drives memcached and quicksilver alike; `--protocol native` hands the run to the native
//! UDP driver ([`crate::native`]).
//!
//! Closed loop by default: each connection keeps `depth` operations in flight. With `--rate R`,
//! open loop: operations arrive as a Poisson process of R per second over all connections
//! whatever the server does, and each latency is measured from the operation's scheduled time,
//! so a stalled server is charged for the operations it delayed (no coordinated omission).
//! `--search` finds the highest offered rate whose p99 stays under each SLA target.
//!
//! Every value carries its key number and a version ([`crate::workload::ValueLayout`]); every
//! read's answer is judged against the versions written and acknowledged so far: another key's
//! value or a version never written counts as wrong, one older than a write acknowledged before
//! the read was sent counts as stale (a fast but wrong server must not win). The server's CPU
//! time per operation comes from /proc when its PID is given, and so does its resident memory
//! for throughput per GB.

use crate::cpu::process_cpu_secs;
use crate::workload::{
    judge, write_value, Arrivals, Dataset, Distribution, KeyChooser, Rng, ValueLayout, Verdict,
};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use mio::net::{TcpStream, UdpSocket};
use mio::{Events, Interest, Poll, Token};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::io::{IsTerminal, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How the generator talks to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// memcached's text protocol over TCP (`get`, `set`).
    Text,
    /// memcached's meta protocol over TCP (`mg <key> v`, `ms <key> <len>`).
    Meta,
    /// memcached's binary protocol over TCP (GET, SET frames).
    Binary,
    /// memcached's UDP protocol (8-byte frame header, text commands), one request per datagram.
    McUdp,
    /// Quicksilver's native UDP protocol with client-assisted direction (`qs-bench native`).
    Native,
}

/// YCSB's core workloads (Cooper et al., SoCC'10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
pub enum Ycsb {
    /// Update heavy: 50% read, 50% update, zipfian.
    A,
    /// Read mostly: 95% read, 5% update, zipfian.
    B,
    /// Read only: 100% read, zipfian.
    C,
    /// Read latest: 95% read, 5% insert, reads favour the newest keys.
    D,
    /// Short ranges: needs range scans, which a hash-partitioned cache does not have (refused).
    E,
    /// Read-modify-write: 50% read, 50% read-modify-write, zipfian.
    F,
}

/// Fractions of each operation (the rest are read-modify-writes).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Mix {
    /// Reads (GET).
    pub read: f64,
    /// Updates of an existing key (SET).
    pub update: f64,
    /// Inserts of a new key (SET).
    pub insert: f64,
}

impl Ycsb {
    /// The operation mix and key distribution, or why the workload cannot run.
    pub fn spec(self) -> Result<(Mix, Distribution), &'static str> {
        let zipf = Distribution::Zipf;
        match self {
            Ycsb::A => Ok((Mix { read: 0.5, update: 0.5, insert: 0.0 }, zipf)),
            Ycsb::B => Ok((Mix { read: 0.95, update: 0.05, insert: 0.0 }, zipf)),
            Ycsb::C => Ok((Mix { read: 1.0, update: 0.0, insert: 0.0 }, zipf)),
            Ycsb::D => Ok((Mix { read: 0.95, update: 0.0, insert: 0.05 }, Distribution::Latest)),
            Ycsb::E => Err("YCSB E scans short key ranges, and a hash-partitioned cache (memcached's \
                            protocols included) has no range scan; run A, B, C, D or F"),
            Ycsb::F => Ok((Mix { read: 0.5, update: 0.0, insert: 0.0 }, zipf)),
        }
    }
}

/// Options of `qs-bench run`.
#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    /// Server address (for mc-udp its UDP port; keys are loaded over TCP at the same address).
    #[arg(long, default_value = "127.0.0.1:11211")]
    pub server: SocketAddr,
    /// Protocol.
    #[arg(long, value_enum, default_value_t = Protocol::Text)]
    pub protocol: Protocol,
    /// Connections (UDP sockets for mc-udp).
    #[arg(long, alias = "conns", default_value_t = 50)]
    pub connections: usize,
    /// Operations in flight per connection (closed loop); with --rate, the most a connection
    /// pipelines before later arrivals wait (their latency still counts from their schedule).
    /// For --protocol native: datagrams in flight per partition.
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// Requests per datagram (--protocol native only; default 32).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Open loop: offered operations per second over all connections (Poisson arrivals).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Key and value sizes (MICA's datasets).
    #[arg(long, value_enum, default_value_t = Dataset::Tiny)]
    pub dataset: Dataset,
    /// Value bytes instead of the dataset's.
    #[arg(long)]
    pub value_size: Option<usize>,
    /// Distinct keys (all loaded before the run).
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Fraction of GETs (the rest are SETs).
    #[arg(long, default_value_t = 0.95)]
    pub get_ratio: f64,
    /// A YCSB core workload instead of --get-ratio and --dist.
    #[arg(long, value_enum)]
    pub ycsb: Option<Ycsb>,
    /// Key distribution.
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    pub dist: Distribution,
    /// Zipf exponent (below 1: YCSB's generator; 1 or more: rejection-inversion).
    #[arg(long, default_value_t = 0.99)]
    pub theta: f64,
    /// Measured seconds (per point with --search).
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Unmeasured seconds first.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// The server's PID, to report its CPU time per operation and its memory.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Skip loading the keys first.
    #[arg(long)]
    pub no_load: bool,
    /// Find the highest offered rate whose p99 stays under each SLA target: a closed-loop run
    /// for the maximum, then open-loop points up to it.
    #[arg(long)]
    pub search: bool,
    /// SLA targets for --search: p99 microseconds.
    #[arg(long, value_delimiter = ',', default_value = "100,200,500,1000")]
    pub sla_us: Vec<f64>,
    /// With --search: write the latency-throughput curve to this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// No progress line on the terminal.
    #[arg(long)]
    pub quiet: bool,
    /// Never sleep waiting for answers: poll the sockets without blocking (the generator then
    /// uses its whole core, and the server never pays to wake it).
    #[arg(long)]
    pub spin: bool,
    /// Pin the generator to these cores (taskset's list syntax, e.g. 1 or 2-3).
    #[arg(long)]
    pub cores: Option<String>,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print a JSON line after the table.
    #[arg(long)]
    pub json: bool,
    /// Write every request of the run (warm-up included, the load of the keys before it not)
    /// to this file as Twitter cache-trace CSV lines (seconds, key, key bytes, value bytes,
    /// connection 0, get or set, TTL 0), the order they were drawn in: `qs-sim mrc --trace
    /// FILE --format twitter` replays it.
    #[arg(long)]
    pub key_stream: Option<PathBuf>,
}

impl LoadArgs {
    /// Options as `qs-bench run` parses them from `argv` (without the program name).
    pub fn from_argv(argv: &[&str]) -> Result<LoadArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            load: LoadArgs,
        }
        let argv = std::iter::once("run").chain(argv.iter().copied());
        <Cli as clap::Parser>::try_parse_from(argv).map(|cli| cli.load)
    }

    /// The operation mix and distribution the options ask for.
    pub fn workload(&self) -> Result<(Mix, Distribution), String> {
        match self.ycsb {
            Some(ycsb) => ycsb.spec().map_err(str::to_string),
            None if (0.0..=1.0).contains(&self.get_ratio) => {
                Ok((Mix { read: self.get_ratio, update: 1.0 - self.get_ratio, insert: 0.0 }, self.dist))
            }
            None => Err(format!("--get-ratio {} is not between 0 and 1", self.get_ratio)),
        }
    }

    /// (key bytes, value bytes).
    pub fn sizes(&self) -> (usize, usize) {
        let (key, value) = self.dataset.sizes();
        (key, self.value_size.unwrap_or(value))
    }
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Server address.
    pub server: String,
    /// Protocol.
    pub protocol: Protocol,
    /// Dataset.
    pub dataset: Dataset,
    /// Value bytes.
    pub value_size: usize,
    /// Key distribution.
    pub dist: String,
    /// The YCSB workload, if one ran.
    pub ycsb: Option<Ycsb>,
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
    /// Error answers, refused writes, and (UDP) requests never answered.
    pub errors: u64,
    /// Reads that returned another key's value or a version never written.
    pub wrong_values: u64,
    /// Reads older than a write acknowledged before they were sent.
    pub stale_values: u64,
    /// Operations still unanswered when the run gave up waiting for them after its end (the
    /// run waits for every one in flight, so the next run never races this one's writes).
    pub unanswered: u64,
    /// Latency percentiles in microseconds (operation sent, or scheduled in open loop, to
    /// its last answer read).
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest latency.
    pub max_us: f64,
    /// The generator's own CPU microseconds per operation.
    pub client_cpu_us_per_op: f64,
    /// Server user+system CPU microseconds per operation (when its PID was given).
    pub server_cpu_us_per_op: Option<f64>,
    /// Server resident memory at the end, MB (when its PID was given).
    pub server_rss_mb: Option<f64>,
    /// Operations per second per GB of server resident memory (Mercury/Iridium's TPS/GB).
    pub ops_per_sec_per_gb: Option<f64>,
}

/// Pins this process (every thread) to `cores` (taskset's list syntax).
pub fn pin_self(cores: &str) -> std::io::Result<()> {
    let status = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cores, &std::process::id().to_string()])
        .stdout(std::process::Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("taskset could not pin qs-bench to cores {cores}")))
    }
}

/// This process's CPU seconds since `start` (a [`process_cpu_secs`] reading), 0 if unreadable.
fn own_cpu_since(start: Option<f64>) -> f64 {
    match (start, process_cpu_secs(std::process::id())) {
        (Some(a), Some(b)) => b - a,
        _ => 0.0,
    }
}

/// A process's resident memory in bytes.
pub fn process_rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Writes key number `number` as `len` printable bytes: its hex digits, zero-padded on the
/// left (the low digits when `len` is under 16).
pub fn write_key_text(number: u64, len: usize, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = len.min(16);
    out.resize(out.len() + len - digits, b'0');
    for i in (0..digits).rev() {
        out.push(HEX[((number >> (4 * i)) & 0xF) as usize]);
    }
}

/// One request on the wire; an operation is one part (read, update, insert) or two
/// (read-modify-write: the read, then the write, pipelined).
#[derive(Clone, Copy, Debug)]
struct Part {
    key: u64,
    write: bool,
    /// A write's version; a read's floor (the newest version acknowledged when it was sent).
    version: u32,
    /// When the operation was sent (closed loop) or scheduled (open loop).
    at: Instant,
    /// The operation's last part: its answer completes the operation.
    last: bool,
    insert: bool,
    /// A write's oldest version in flight for its key when it was sent (or its own).
    oldest: u32,
}

/// The keys, their versions, and what to do next: shared by every connection of a run.
struct Workload {
    protocol: Protocol,
    key_len: usize,
    value_len: usize,
    mix: Mix,
    chooser: KeyChooser,
    rng: Rng,
    /// Newest version sent, per key number.
    issued: Vec<u32>,
    /// Oldest version a read may see, per key number: raised when a write completes to the
    /// oldest version that was in flight (or its own) when that write was sent, since every
    /// older one had completed before it started.
    floor: Vec<u32>,
    /// Keys whose stored version this run does not know yet (`--no-load`, or written by an
    /// earlier run): any version is accepted until one of this run's writes completes.
    unknown: Vec<bool>,
    /// Versions of writes in flight, per key with any (oldest first).
    in_flight: HashMap<u64, VecDeque<u32>>,
    /// Keys loaded before the run.
    loaded: u64,
    inserts_acked: u64,
    version_mask: u32,
    value: Vec<u8>,
    /// `--key-stream`: where each drawn request is written, and when the run began.
    key_stream: Option<(std::io::BufWriter<std::fs::File>, Instant)>,
}

impl Workload {
    fn new(args: &LoadArgs) -> Result<Workload, String> {
        let (mix, dist) = args.workload()?;
        let (key_len, value_len) = args.sizes();
        if args.keys < 2 {
            return Err("--keys must be at least 2".into());
        }
        if !(1..=250).contains(&key_len) {
            return Err(format!("keys of {key_len} bytes: memcached allows 1 to 250"));
        }
        Ok(Workload {
            protocol: args.protocol,
            key_len,
            value_len,
            mix,
            chooser: KeyChooser::new(dist, args.keys, args.theta),
            rng: Rng::new(args.seed),
            issued: vec![0; args.keys as usize],
            floor: vec![0; args.keys as usize],
            unknown: vec![args.no_load; args.keys as usize],
            in_flight: HashMap::new(),
            loaded: args.keys,
            inserts_acked: 0,
            version_mask: ValueLayout::of(value_len).version_mask(),
            value: vec![0; value_len],
            key_stream: match &args.key_stream {
                Some(path) => Some((
                    std::io::BufWriter::new(
                        std::fs::File::create(path)
                            .map_err(|error| format!("{}: {error}", path.display()))?,
                    ),
                    Instant::now(),
                )),
                None => None,
            },
        })
    }

    /// Writes `part` to `--key-stream`, if any.
    fn log_part(&mut self, part: &Part) {
        let Some((file, start)) = &mut self.key_stream else {
            return;
        };
        let mut key = Vec::with_capacity(self.key_len);
        write_key_text(part.key, self.key_len, &mut key);
        let seconds = part.at.saturating_duration_since(*start).as_secs();
        let op = if part.write { "set" } else { "get" };
        let key = String::from_utf8_lossy(&key);
        if let Err(error) = writeln!(file, "{seconds},{key},{},{},0,{op},0", self.key_len, self.value_len) {
            eprintln!("--key-stream: {error}; no more requests are written");
            self.key_stream = None;
        }
    }

    /// Flushes `--key-stream`.
    fn finish_key_stream(&mut self) -> std::io::Result<()> {
        match &mut self.key_stream {
            Some((file, _)) => file.flush(),
            None => Ok(()),
        }
    }

    /// Draws the next operation and hands each of its parts, encoded, to `out`.
    fn next(&mut self, at: Instant, mut out: impl FnMut(Part, &[u8])) {
        let draw = self.rng.next_f64();
        let mix = self.mix;
        let mut wire = Vec::with_capacity(64 + self.value_len);
        if draw >= mix.read + mix.update && draw < mix.read + mix.update + mix.insert {
            let key = self.issued.len() as u64;
            self.issued.push(0);
            self.floor.push(0);
            self.unknown.push(false);
            let part = self.write(key, at, true);
            self.log_part(&part);
            self.encode(&part, &mut wire);
            out(part, &wire);
            return;
        }
        let key = self.chooser.next(&mut self.rng);
        let update = draw >= mix.read && draw < mix.read + mix.update;
        // What is left over (YCSB F's share) reads and then writes the key back.
        let modify =
            draw >= mix.read + mix.update + mix.insert && 1.0 - (mix.read + mix.update + mix.insert) > 1e-9;
        if !update {
            let floor = self.floor[key as usize];
            let part =
                Part { key, write: false, version: floor, at, last: !modify, insert: false, oldest: 0 };
            self.log_part(&part);
            self.encode(&part, &mut wire);
            out(part, &wire);
            wire.clear();
        }
        if update || modify {
            let part = self.write(key, at, false);
            self.log_part(&part);
            self.encode(&part, &mut wire);
            out(part, &wire);
        }
    }

    fn write(&mut self, key: u64, at: Instant, insert: bool) -> Part {
        let version = self.issued[key as usize].wrapping_add(1) & self.version_mask;
        self.issued[key as usize] = version;
        let in_flight = self.in_flight.entry(key).or_default();
        // The oldest version the store may hold once this write completes.
        let oldest = in_flight.front().copied().unwrap_or(version);
        in_flight.push_back(version);
        Part { key, write: true, version, at, last: true, insert, oldest }
    }

    fn encode(&mut self, part: &Part, out: &mut Vec<u8>) {
        if self.protocol == Protocol::Binary {
            let mut key = Vec::with_capacity(self.key_len);
            write_key_text(part.key, self.key_len, &mut key);
            if part.write {
                write_value(part.key, part.version, &mut self.value);
                let frame = qs_proto::binary::request_frame(
                    qs_proto::binary::opcode::SET,
                    0,
                    0,
                    &[0; 8],
                    &key,
                    &self.value,
                );
                out.extend_from_slice(&frame);
            } else {
                out.extend_from_slice(&qs_proto::binary::request_frame(
                    qs_proto::binary::opcode::GET,
                    0,
                    0,
                    &[],
                    &key,
                    &[],
                ));
            }
            return;
        }
        let command: &[u8] = match (self.protocol, part.write) {
            (Protocol::Meta, false) => b"mg ",
            (Protocol::Meta, true) => b"ms ",
            (_, false) => b"get ",
            (_, true) => b"set ",
        };
        out.extend_from_slice(command);
        write_key_text(part.key, self.key_len, out);
        match (self.protocol, part.write) {
            (Protocol::Meta, false) => out.extend_from_slice(b" v\r\n"),
            (_, false) => out.extend_from_slice(b"\r\n"),
            (protocol, true) => {
                let header = if protocol == Protocol::Meta {
                    format!(" {}\r\n", self.value_len)
                } else {
                    format!(" 0 0 {}\r\n", self.value_len)
                };
                out.extend_from_slice(header.as_bytes());
                write_value(part.key, part.version, &mut self.value);
                out.extend_from_slice(&self.value);
                out.extend_from_slice(b"\r\n");
            }
        }
    }

    /// Records a write that completed (`stored`) or was lost or refused.
    fn complete_write(&mut self, part: &Part, stored: bool) {
        if let Some(in_flight) = self.in_flight.get_mut(&part.key) {
            if let Some(at) = in_flight.iter().position(|&version| version == part.version) {
                in_flight.remove(at);
            }
            if in_flight.is_empty() {
                self.in_flight.remove(&part.key);
            }
        }
        if !stored {
            return;
        }
        let index = part.key as usize;
        let floor = &mut self.floor[index];
        let ahead = part.oldest.wrapping_sub(*floor) & self.version_mask;
        if ahead <= self.version_mask / 2 {
            *floor = part.oldest;
        }
        self.unknown[index] = false;
        if part.insert {
            self.inserts_acked += 1;
            self.chooser.grow(self.loaded + self.inserts_acked);
        }
    }
}

/// What the server answered to one part.
#[derive(Debug, PartialEq, Eq)]
enum Answer<'a> {
    Value(&'a [u8]),
    Miss,
    Stored,
    /// NOT_STORED, EXISTS, NOT_FOUND (NS, EX, NF).
    Refused,
    /// ERROR, CLIENT_ERROR, SERVER_ERROR, or anything unexpected.
    Error,
}

/// Parses one answer from the front of `input`: `Some((bytes, answer))`, `None` when incomplete.
fn parse_answer(protocol: Protocol, input: &[u8], write: bool) -> Option<(usize, Answer<'_>)> {
    if protocol == Protocol::Binary {
        return parse_binary_answer(input, write);
    }
    let line_end = input.windows(2).position(|w| w == b"\r\n")?;
    let line = &input[..line_end];
    let after = line_end + 2;
    let length = |field: &[u8]| -> Option<usize> {
        field.iter().try_fold(0usize, |n, &d| d.is_ascii_digit().then(|| n * 10 + (d - b'0') as usize))
    };
    let meta = protocol == Protocol::Meta;
    if write {
        let answer = match line {
            b"STORED" | b"HD" => Answer::Stored,
            b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" | b"NS" | b"EX" | b"NF" => Answer::Refused,
            _ => Answer::Error,
        };
        return Some((after, answer));
    }
    if meta && line.starts_with(b"VA ") {
        let bytes = length(line[3..].split(|&b| b == b' ').next()?).unwrap_or(usize::MAX);
        if bytes == usize::MAX {
            return Some((after, Answer::Error));
        }
        let total = after + bytes + 2;
        return (input.len() >= total).then(|| (total, Answer::Value(&input[after..after + bytes])));
    }
    if !meta && line.starts_with(b"VALUE ") {
        let Some(bytes) = line.rsplit(|&b| b == b' ').next().and_then(length) else {
            return Some((after, Answer::Error));
        };
        let total = after + bytes + 2 + b"END\r\n".len();
        return (input.len() >= total).then(|| (total, Answer::Value(&input[after..after + bytes])));
    }
    let answer = if line == b"END" && !meta || line == b"EN" && meta { Answer::Miss } else { Answer::Error };
    Some((after, answer))
}

/// A binary reply frame: a GET's value (after its 4 bytes of flags), a miss, a SET's outcome.
fn parse_binary_answer(input: &[u8], write: bool) -> Option<(usize, Answer<'_>)> {
    let header = input.get(..qs_proto::binary::HEADER_BYTES)?;
    let body = u32::from_be_bytes(header[8..12].try_into().ok()?) as usize;
    let total = qs_proto::binary::HEADER_BYTES + body;
    let frame = input.get(..total)?;
    let status = u16::from_be_bytes([header[6], header[7]]);
    let extras = usize::from(header[4]);
    let key = usize::from(u16::from_be_bytes([header[2], header[3]]));
    let answer = match (status, write) {
        (0, false) => Answer::Value(frame.get(qs_proto::binary::HEADER_BYTES + extras + key..)?),
        (0, true) => Answer::Stored,
        (qs_proto::binary::status::KEY_ENOENT, false) => Answer::Miss,
        (qs_proto::binary::status::KEY_ENOENT | qs_proto::binary::status::KEY_EEXISTS, true) => {
            Answer::Refused
        }
        _ => Answer::Error,
    };
    Some((total, answer))
}

struct Counters {
    ops: u64,
    reads: u64,
    hits: u64,
    errors: u64,
    wrong: u64,
    stale: u64,
    latency: Histogram<u64>,
}

impl Counters {
    fn new() -> Counters {
        Counters {
            ops: 0,
            reads: 0,
            hits: 0,
            errors: 0,
            wrong: 0,
            stale: 0,
            latency: Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds"),
        }
    }
}

/// Settles one answered (or lost, `None`) part; true when it completed its operation.
fn settle(workload: &mut Workload, counters: &mut Counters, part: &Part, answer: Option<Answer<'_>>) -> bool {
    match answer {
        Some(Answer::Value(value)) if !part.write => {
            counters.reads += 1;
            let index = part.key as usize;
            let (floor, issued) = if workload.unknown[index] {
                // Any version: one past the newest issued back round to it is the whole space.
                (workload.issued[index].wrapping_add(1), workload.issued[index])
            } else {
                (part.version, workload.issued[index])
            };
            let verdict = judge(part.key, value, floor, issued);
            match verdict {
                Verdict::Fresh if value.len() == workload.value_len => counters.hits += 1,
                Verdict::Stale => counters.stale += 1,
                _ => counters.wrong += 1,
            }
            let bad = !matches!(verdict, Verdict::Fresh) || value.len() != workload.value_len;
            if bad && counters.stale + counters.wrong <= 5 {
                // The first few, for finding out why.
                let (key, version) = crate::workload::read_value(value);
                eprintln!(
                    "qs-bench: key {} answered {verdict:?}: {} bytes, key {key} version {version}, \
                     expected versions {floor}..={issued}{}",
                    part.key,
                    value.len(),
                    if workload.unknown[index] { " (unknown)" } else { "" },
                );
            }
        }
        Some(Answer::Miss) if !part.write => counters.reads += 1,
        Some(Answer::Stored) if part.write => workload.complete_write(part, true),
        _ => {
            counters.errors += 1;
            if part.write {
                workload.complete_write(part, false);
            }
        }
    }
    if part.last {
        counters.ops += 1;
        let _ = counters.latency.record(part.at.elapsed().as_micros().max(1) as u64);
    }
    part.last
}

/// memcached's UDP frame header: request id, sequence number, datagram count, reserved.
const UDP_HEADER: usize = 8;
/// How long a UDP request may go unanswered before it counts as lost.
const UDP_TIMEOUT: Duration = Duration::from_millis(500);

struct UdpPending {
    part: Part,
    sent: Instant,
    /// Payloads by sequence number, once the datagram count is known.
    chunks: Vec<Option<Vec<u8>>>,
}

enum Link {
    Tcp { stream: TcpStream, parts: VecDeque<Part>, input: Vec<u8>, output: Vec<u8> },
    Udp { socket: UdpSocket, next_id: u16, pending: HashMap<u16, UdpPending> },
}

struct Conn {
    link: Link,
    /// Operations in flight.
    ops: usize,
    /// Open loop: arrivals waiting because `depth` operations are already in flight.
    backlog: VecDeque<Instant>,
}

impl Conn {
    /// Queues (TCP) or sends (UDP) the next operation.
    fn issue(&mut self, workload: &mut Workload, at: Instant) -> std::io::Result<()> {
        self.ops += 1;
        let mut result = Ok(());
        match &mut self.link {
            Link::Tcp { parts, output, .. } => workload.next(at, |part, wire| {
                parts.push_back(part);
                output.extend_from_slice(wire);
            }),
            Link::Udp { socket, next_id, pending } => workload.next(at, |part, wire| {
                let id = *next_id;
                *next_id = next_id.wrapping_add(1);
                let mut datagram = Vec::with_capacity(UDP_HEADER + wire.len());
                datagram.extend_from_slice(&id.to_be_bytes());
                datagram.extend_from_slice(&[0, 0, 0, 1, 0, 0]);
                datagram.extend_from_slice(wire);
                // A full socket buffer loses the datagram like the network would: it times out.
                if let Err(error) = socket.send(&datagram) {
                    if error.kind() != std::io::ErrorKind::WouldBlock {
                        result = Err(error);
                    }
                }
                pending.insert(id, UdpPending { part, sent: Instant::now(), chunks: Vec::new() });
            }),
        }
        result
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if let Link::Tcp { stream, output, .. } = &mut self.link {
            if !output.is_empty() {
                stream.write_all(output)?;
                output.clear();
            }
        }
        Ok(())
    }

    /// Reads what arrived and settles every complete answer; returns the operations completed.
    fn receive(
        &mut self,
        workload: &mut Workload,
        counters: &mut Counters,
        chunk: &mut [u8],
    ) -> std::io::Result<usize> {
        let mut done = 0;
        match &mut self.link {
            Link::Tcp { stream, parts, input, .. } => {
                loop {
                    match stream.read(chunk) {
                        Ok(0) => return Err(std::io::Error::other("the server closed a connection")),
                        Ok(n) => {
                            input.extend_from_slice(&chunk[..n]);
                            // A short read drained the socket: skip the read that would only
                            // say so (edge-triggered readiness fires again for new data).
                            if n < chunk.len() {
                                break;
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
                let mut consumed = 0;
                while let Some(part) = parts.front().copied() {
                    let Some((len, answer)) = parse_answer(workload.protocol, &input[consumed..], part.write)
                    else {
                        break;
                    };
                    consumed += len;
                    parts.pop_front();
                    done += settle(workload, counters, &part, Some(answer)) as usize;
                }
                input.drain(..consumed);
            }
            Link::Udp { socket, pending, .. } => loop {
                let n = match socket.recv(chunk) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                };
                if n < UDP_HEADER {
                    counters.errors += 1;
                    continue;
                }
                let id = u16::from_be_bytes([chunk[0], chunk[1]]);
                let seq = u16::from_be_bytes([chunk[2], chunk[3]]) as usize;
                let total = u16::from_be_bytes([chunk[4], chunk[5]]) as usize;
                let Some(entry) = pending.get_mut(&id) else { continue };
                if total == 0 || seq >= total {
                    continue;
                }
                entry.chunks.resize(total, None);
                entry.chunks[seq] = Some(chunk[UDP_HEADER..n].to_vec());
                if entry.chunks.iter().all(Option::is_some) {
                    let entry = pending.remove(&id).expect("present");
                    let payload: Vec<u8> = entry.chunks.into_iter().flatten().flatten().collect();
                    let answer = match parse_answer(workload.protocol, &payload, entry.part.write) {
                        Some((len, answer)) if len == payload.len() => Some(answer),
                        _ => Some(Answer::Error),
                    };
                    done += settle(workload, counters, &entry.part, answer) as usize;
                }
            },
        }
        self.ops -= done;
        Ok(done)
    }

    /// UDP: settles requests unanswered for too long as lost; returns the operations completed.
    fn expire(&mut self, workload: &mut Workload, counters: &mut Counters, now: Instant) -> usize {
        let Link::Udp { pending, .. } = &mut self.link else { return 0 };
        let mut done = 0;
        pending.retain(|_, entry| {
            if now.duration_since(entry.sent) < UDP_TIMEOUT {
                return true;
            }
            done += settle(workload, counters, &entry.part, None) as usize;
            false
        });
        self.ops -= done;
        done
    }
}

/// Stores every key once over TCP (text protocol, pipelined, noreply), then waits for the
/// server to catch up (a `version` after the sets). A server that answers sets despite
/// `noreply` (pogocache) is read meanwhile, its `STORED` lines skipped.
fn preload(args: &LoadArgs) -> std::io::Result<()> {
    let (key_len, value_len) = args.sizes();
    let mut stream = std::net::TcpStream::connect(args.server)?;
    let replies = stream.try_clone()?;
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || preload_answer(replies));
        let mut batch = Vec::new();
        let mut value = vec![0u8; value_len];
        for key in 0..args.keys {
            batch.extend_from_slice(b"set ");
            write_key_text(key, key_len, &mut batch);
            batch.extend_from_slice(format!(" 0 0 {value_len} noreply\r\n").as_bytes());
            write_value(key, 0, &mut value);
            batch.extend_from_slice(&value);
            batch.extend_from_slice(b"\r\n");
            if batch.len() > 256 << 10 {
                stream.write_all(&batch)?;
                batch.clear();
            }
        }
        batch.extend_from_slice(b"version\r\n");
        stream.write_all(&batch)?;
        reader.join().map_err(|_| std::io::Error::other("the preload's reader panicked"))?
    })
}

/// Reads what the server answers to the preload, up to its `VERSION` line.
fn preload_answer(mut stream: std::net::TcpStream) -> std::io::Result<()> {
    let mut reply = [0u8; 4096];
    let mut got = Vec::new();
    loop {
        let n = stream.read(&mut reply)?;
        if n == 0 {
            return Err(std::io::Error::other("the server closed the connection while loading"));
        }
        got.extend_from_slice(&reply[..n]);
        while let Some(end) = got.windows(2).position(|pair| pair == b"\r\n") {
            let line: Vec<u8> = got.drain(..end + 2).collect();
            if line.starts_with(b"VERSION ") {
                return Ok(());
            }
            if line != b"STORED\r\n" {
                return Err(std::io::Error::other(format!(
                    "loading the keys: the server answered {:?}",
                    String::from_utf8_lossy(&line)
                )));
            }
        }
    }
}

fn connect(args: &LoadArgs, poll: &Poll, index: usize) -> std::io::Result<Conn> {
    let link = if args.protocol == Protocol::McUdp {
        let local: SocketAddr =
            if args.server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("address");
        let mut socket = UdpSocket::bind(local)?;
        socket.connect(args.server)?;
        poll.registry().register(&mut socket, Token(index), Interest::READABLE)?;
        Link::Udp { socket, next_id: 0, pending: HashMap::new() }
    } else {
        let std_stream = std::net::TcpStream::connect(args.server)?;
        std_stream.set_nodelay(true)?;
        std_stream.set_nonblocking(true)?;
        let mut stream = TcpStream::from_std(std_stream);
        poll.registry().register(&mut stream, Token(index), Interest::READABLE)?;
        Link::Tcp { stream, parts: VecDeque::new(), input: Vec::new(), output: Vec::new() }
    };
    Ok(Conn { link, ops: 0, backlog: VecDeque::new() })
}

/// How long the end of a run waits for the operations still in flight.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Waits (at most [`DRAIN_LIMIT`]) for every operation still in flight when a run ends, so none
/// of its writes is still on the way when the next run loads the same keys: a server may apply a
/// closed connection's last writes after another connection's (memcached does too), and such a
/// late write would overwrite the next run's load and be judged wrong there. The answers are
/// still judged: wrong and stale ones count; throughput and latency do not. Returns the
/// operations still unanswered at the limit.
fn drain(
    conns: &mut [Conn],
    workload: &mut Workload,
    counters: &mut Counters,
    poll: &mut Poll,
    chunk: &mut [u8],
) -> std::io::Result<u64> {
    let mut late = Counters::new();
    let deadline = Instant::now() + DRAIN_LIMIT;
    let mut events = Events::with_capacity(1024);
    while conns.iter().any(|conn| conn.ops > 0) {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        for conn in conns.iter_mut() {
            conn.expire(workload, &mut late, now);
        }
        wait(poll, &mut events, Duration::from_millis(10).min(deadline - now))?;
        for event in events.iter() {
            conns[event.token().0].receive(workload, &mut late, chunk)?;
        }
    }
    counters.wrong += late.wrong;
    counters.stale += late.stale;
    Ok(conns.iter().map(|conn| conn.ops as u64).sum())
}

/// Runs the load and reports (for `--search`, see [`search`]).
pub fn run(args: &LoadArgs) -> std::io::Result<LoadReport> {
    if let Some(cores) = &args.cores {
        pin_self(cores)?;
    }
    if args.protocol == Protocol::Native {
        return run_native(args);
    }
    if args.batch.is_some() {
        return Err(std::io::Error::other(
            "--batch (requests per datagram) applies to --protocol native; over text, meta and \
             mc-udp each request is its own command",
        ));
    }
    let mut workload = Workload::new(args).map_err(std::io::Error::other)?;
    if args.connections == 0 || args.depth == 0 {
        return Err(std::io::Error::other("--connections and --depth must be at least 1"));
    }
    if !args.no_load {
        preload(args)?;
    }
    let mut poll = Poll::new()?;
    let mut conns =
        (0..args.connections).map(|index| connect(args, &poll, index)).collect::<Result<Vec<_>, _>>()?;
    let open = args.rate.is_some();
    let mut arrivals = args.rate.map(|rate| Arrivals::new(rate, args.seed ^ 0xA5A5));
    let mut next_conn = 0;
    if !open {
        for conn in &mut conns {
            for _ in 0..args.depth {
                conn.issue(&mut workload, Instant::now())?;
            }
            conn.flush()?;
        }
    }
    let mut counters = Counters::new();
    let mut events = Events::with_capacity(1024);
    let start = Instant::now();
    let warmup_end = start + Duration::from_secs_f64(args.warmup);
    let end = warmup_end + Duration::from_secs_f64(args.duration);
    let mut measuring = false;
    let mut cpu_start = None;
    let mut client_cpu_start = None;
    let mut chunk = vec![0u8; 64 << 10];
    let progress = !args.quiet && std::io::stderr().is_terminal();
    let mut next_progress = start + Duration::from_secs(1);
    let mut last_expiry = start;
    loop {
        let now = Instant::now();
        if !measuring && now >= warmup_end {
            measuring = true;
            counters = Counters { latency: Histogram::new_from(&counters.latency), ..Counters::new() };
            cpu_start = args.server_pid.and_then(process_cpu_secs);
            client_cpu_start = process_cpu_secs(std::process::id());
        }
        if now >= end {
            break;
        }
        if progress && now >= next_progress {
            next_progress += Duration::from_secs(1);
            let secs = now.duration_since(if measuring { warmup_end } else { start }).as_secs_f64();
            eprint!(
                "\r{} {:5.1} s  {:>10.0} ops/s  p99 {:>6} us  errors {}  wrong {}  stale {}   ",
                if measuring { "run   " } else { "warmup" },
                secs,
                counters.ops as f64 / secs.max(1e-9),
                counters.latency.value_at_quantile(0.99),
                counters.errors,
                counters.wrong,
                counters.stale,
            );
        }
        if now.duration_since(last_expiry) >= Duration::from_millis(50) {
            last_expiry = now;
            for conn in &mut conns {
                let done = conn.expire(&mut workload, &mut counters, now);
                for _ in 0..done.min(if open { 0 } else { args.depth }) {
                    conn.issue(&mut workload, Instant::now())?;
                }
            }
        }
        let mut timeout = if args.spin { Duration::ZERO } else { Duration::from_millis(10) };
        if let Some(arrivals) = arrivals.as_mut() {
            // Hand each due arrival to the next connection, round robin.
            let since_start = now - start;
            while let Some(due) = arrivals.due(since_start) {
                conns[next_conn].backlog.push_back(start + due);
                next_conn = (next_conn + 1) % conns.len();
            }
            for conn in &mut conns {
                while conn.ops < args.depth {
                    let Some(at) = conn.backlog.pop_front() else { break };
                    conn.issue(&mut workload, at)?;
                }
                conn.flush()?;
            }
            // epoll waits in whole milliseconds: spin when the next arrival is sooner.
            let until_next = arrivals.next_at().saturating_sub(since_start);
            timeout =
                if until_next < Duration::from_millis(1) { Duration::ZERO } else { until_next.min(timeout) };
        }
        wait(&mut poll, &mut events, timeout)?;
        for event in events.iter() {
            let conn = &mut conns[event.token().0];
            let done = conn.receive(&mut workload, &mut counters, &mut chunk)?;
            if !open {
                for _ in 0..done {
                    conn.issue(&mut workload, Instant::now())?;
                }
            }
            conn.flush()?;
        }
    }
    if progress {
        eprint!("\r{:100}\r", "");
    }
    let elapsed = args.duration;
    let cpu_end = args.server_pid.and_then(process_cpu_secs);
    let server_cpu_us_per_op = match (cpu_start, cpu_end) {
        (Some(a), Some(b)) if counters.ops > 0 => Some((b - a) * 1e6 / counters.ops as f64),
        _ => None,
    };
    let client_cpu = own_cpu_since(client_cpu_start);
    let ops_per_sec = counters.ops as f64 / elapsed;
    let rss = args.server_pid.and_then(process_rss_bytes);
    let unanswered = drain(&mut conns, &mut workload, &mut counters, &mut poll, &mut chunk)?;
    workload.finish_key_stream()?;
    let (mix, dist) = args.workload().map_err(std::io::Error::other)?;
    Ok(LoadReport {
        server: args.server.to_string(),
        protocol: args.protocol,
        dataset: args.dataset,
        value_size: workload.value_len,
        dist: format!("{dist:?}").to_lowercase(),
        ycsb: args.ycsb,
        get_ratio: mix.read,
        connections: args.connections,
        depth: args.depth,
        offered_rate: args.rate,
        ops: counters.ops,
        ops_per_sec,
        hit_ratio: counters.hits as f64 / counters.reads.max(1) as f64,
        errors: counters.errors,
        wrong_values: counters.wrong,
        stale_values: counters.stale,
        unanswered,
        p50_us: counters.latency.value_at_quantile(0.5) as f64,
        p99_us: counters.latency.value_at_quantile(0.99) as f64,
        p999_us: counters.latency.value_at_quantile(0.999) as f64,
        max_us: counters.latency.max() as f64,
        client_cpu_us_per_op: client_cpu * 1e6 / counters.ops.max(1) as f64,
        server_cpu_us_per_op,
        server_rss_mb: rss.map(|bytes| bytes as f64 / 1e6),
        ops_per_sec_per_gb: rss.map(|bytes| ops_per_sec / (bytes as f64 / 1e9)),
    })
}

/// `--protocol native`: the run through the native driver, reported in the same shape (closed
/// loop: `--depth` datagrams in flight per partition of `--batch` requests each; open loop:
/// what is due, in batches).
fn run_native(args: &LoadArgs) -> std::io::Result<LoadReport> {
    let (mix, dist) = args.workload().map_err(std::io::Error::other)?;
    if mix.insert > 0.0 || mix.read + mix.update < 1.0 {
        return Err(std::io::Error::other("the native driver runs reads and updates (YCSB A, B, C)"));
    }
    let native_args = crate::native::NativeArgs {
        server: args.server,
        dataset: args.dataset,
        keys: args.keys,
        get_ratio: mix.read,
        dist,
        theta: args.theta,
        per_datagram: args.batch.unwrap_or(32),
        window: args.depth,
        rate: args.rate,
        duration: args.duration,
        warmup: args.warmup,
        server_pid: args.server_pid,
        no_load: args.no_load,
        echo_probe: false,
        echo_cores: String::new(),
        busy_poll_us: 0,
        seed: args.seed,
        json: false,
    };
    let client_cpu_start = process_cpu_secs(std::process::id());
    let report = crate::native::run(&native_args)?;
    let client_cpu = own_cpu_since(client_cpu_start);
    let rss = args.server_pid.and_then(process_rss_bytes);
    Ok(LoadReport {
        server: args.server.to_string(),
        protocol: Protocol::Native,
        dataset: args.dataset,
        value_size: args.dataset.sizes().1,
        dist: format!("{dist:?}").to_lowercase(),
        ycsb: args.ycsb,
        get_ratio: mix.read,
        connections: report.partitions,
        depth: args.depth,
        offered_rate: args.rate,
        ops: report.requests,
        ops_per_sec: report.requests_per_sec,
        hit_ratio: report.hit_ratio,
        errors: 0,
        wrong_values: report.wrong,
        stale_values: 0,
        unanswered: 0,
        p50_us: report.p50_us,
        p99_us: report.p99_us,
        p999_us: report.p999_us,
        max_us: report.p999_us,
        // The load and the warm-up share the client's CPU time here.
        client_cpu_us_per_op: client_cpu * 1e6 / report.requests.max(1) as f64,
        server_cpu_us_per_op: report.server_cpu_ns_per_request.map(|ns| ns / 1e3),
        server_rss_mb: rss.map(|bytes| bytes as f64 / 1e6),
        ops_per_sec_per_gb: rss.map(|bytes| report.requests_per_sec / (bytes as f64 / 1e9)),
    })
}

/// One SLA target's answer.
#[derive(Debug, Clone, Serialize)]
pub struct SlaPoint {
    /// The p99 target, microseconds.
    pub p99_target_us: f64,
    /// The highest throughput measured with p99 under the target, the offered load delivered
    /// and no errors (none when no point met it).
    pub ops_per_sec: Option<f64>,
    /// That point's offered rate.
    pub offered_rate: Option<f64>,
    /// That point's p99.
    pub p99_us: Option<f64>,
}

/// What `--search` measured.
#[derive(Debug, Clone, Serialize)]
pub struct SearchReport {
    /// The closed-loop run that found the maximum.
    pub closed: LoadReport,
    /// Open-loop points, lowest offered rate first.
    pub points: Vec<LoadReport>,
    /// Per SLA target, the best point.
    pub sla: Vec<SlaPoint>,
}

/// Offered loads of the sweep, as fractions of the closed-loop maximum.
const SWEEP: [f64; 12] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0];

/// Whether an open-loop point delivered what was offered, cleanly.
fn delivered(point: &LoadReport) -> bool {
    point.errors == 0 && point.ops_per_sec >= 0.95 * point.offered_rate.unwrap_or(0.0)
}

/// `--search`: a closed-loop run finds the maximum throughput, then open-loop points sweep the
/// offered rate up to it; for each SLA target the best point whose p99 stays under it.
pub fn search(args: &LoadArgs) -> std::io::Result<SearchReport> {
    let closed = run(&LoadArgs { search: false, rate: None, ..args.clone() })?;
    let mut points = Vec::new();
    for fraction in SWEEP {
        let rate = (closed.ops_per_sec * fraction).max(1.0);
        let point = run(&LoadArgs { search: false, rate: Some(rate), no_load: true, ..args.clone() })?;
        if !args.quiet {
            eprintln!(
                "  offered {:>10.0}/s  delivered {:>10.0}/s  p50 {:>6} us  p99 {:>6} us  p99.9 {:>6} us",
                rate, point.ops_per_sec, point.p50_us, point.p99_us, point.p999_us
            );
        }
        points.push(point);
    }
    let sla = sla_points(&args.sla_us, &points);
    Ok(SearchReport { closed, points, sla })
}

/// For each target, the highest-throughput point that meets it.
pub fn sla_points(targets: &[f64], points: &[LoadReport]) -> Vec<SlaPoint> {
    targets
        .iter()
        .map(|&target| {
            let best = points
                .iter()
                .filter(|point| delivered(point) && point.p99_us <= target)
                .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
            SlaPoint {
                p99_target_us: target,
                ops_per_sec: best.map(|point| point.ops_per_sec),
                offered_rate: best.and_then(|point| point.offered_rate),
                p99_us: best.map(|point| point.p99_us),
            }
        })
        .collect()
}

/// Waits up to `timeout` for events; a wait a signal interrupts returns none (the caller's
/// loop looks at the clock and waits again) rather than ending the run.
fn wait(poll: &mut Poll, events: &mut Events, timeout: Duration) -> std::io::Result<()> {
    match poll.poll(events, Some(timeout)) {
        Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {
            events.clear();
            Ok(())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> LoadArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            load: LoadArgs,
        }
        let mut argv = vec!["run"];
        argv.extend_from_slice(extra);
        <Cli as clap::Parser>::parse_from(argv).load
    }

    fn value(key: u64, version: u32, len: usize) -> Vec<u8> {
        let mut value = vec![0u8; len];
        write_value(key, version, &mut value);
        value
    }

    #[test]
    fn answers_parse_in_both_protocols() {
        let mut reply = b"VALUE 00000005 0 8\r\n".to_vec();
        reply.extend_from_slice(&value(5, 1, 8));
        reply.extend_from_slice(b"\r\nEND\r\n");
        let (len, answer) = parse_answer(Protocol::Text, &reply, false).expect("complete");
        assert_eq!(len, reply.len());
        assert_eq!(answer, Answer::Value(&reply[20..28]));
        assert_eq!(parse_answer(Protocol::Text, &reply[..reply.len() - 1], false), None);
        assert_eq!(parse_answer(Protocol::Text, b"END\r\n", false), Some((5, Answer::Miss)));
        assert_eq!(parse_answer(Protocol::Text, b"STORED\r\n", true), Some((8, Answer::Stored)));
        assert_eq!(parse_answer(Protocol::Text, b"NOT_STORED\r\n", true), Some((12, Answer::Refused)));
        let error = b"SERVER_ERROR out of memory storing object\r\n";
        assert_eq!(parse_answer(Protocol::Text, error, true), Some((error.len(), Answer::Error)));
        assert_eq!(parse_answer(Protocol::Text, b"ERROR\r\n", false), Some((7, Answer::Error)));
        let mut meta = b"VA 8\r\n".to_vec();
        meta.extend_from_slice(&value(5, 1, 8));
        meta.extend_from_slice(b"\r\n");
        assert_eq!(
            parse_answer(Protocol::Meta, &meta, false),
            Some((meta.len(), Answer::Value(&meta[6..14])))
        );
        assert_eq!(parse_answer(Protocol::Meta, b"EN\r\n", false), Some((4, Answer::Miss)));
        assert_eq!(parse_answer(Protocol::Meta, b"HD\r\n", true), Some((4, Answer::Stored)));
        assert_eq!(parse_answer(Protocol::Meta, b"NS\r\n", true), Some((4, Answer::Refused)));
        assert_eq!(parse_answer(Protocol::Meta, b"END\r\n", false), Some((5, Answer::Error)));
        let mut hit = vec![0x81, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        hit.extend_from_slice(b"\0\0\0\0abc");
        assert_eq!(parse_answer(Protocol::Binary, &hit, false), Some((31, Answer::Value(b"abc"))));
        assert_eq!(parse_answer(Protocol::Binary, &hit[..30], false), None);
        let mut miss = vec![0x81, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        miss.extend_from_slice(b"Not found");
        assert_eq!(parse_answer(Protocol::Binary, &miss, false), Some((33, Answer::Miss)));
        let stored = [0x81, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
        assert_eq!(parse_answer(Protocol::Binary, &stored, true), Some((24, Answer::Stored)));
    }

    /// Issues the next operations until one is a single write of some key; returns its part.
    fn next_write(workload: &mut Workload) -> Part {
        loop {
            let mut parts = Vec::new();
            workload.next(Instant::now(), |part, _| parts.push(part));
            if let [part] = parts[..] {
                if part.write {
                    return part;
                }
            }
        }
    }

    fn read_of(workload: &mut Workload, key: u64) -> Part {
        Part {
            key,
            write: false,
            version: workload.floor[key as usize],
            at: Instant::now(),
            last: true,
            insert: false,
            oldest: 0,
        }
    }

    #[test]
    fn key_stream_writes_each_drawn_request_as_a_twitter_trace_line() {
        let path = std::env::temp_dir().join(format!("qs-bench-key-stream-{}.csv", std::process::id()));
        let path_text = path.to_str().expect("a UTF-8 temp path");
        let mut workload = Workload::new(&args(&[
            "--ycsb",
            "f",
            "--keys",
            "1000",
            "--dataset",
            "small",
            "--key-stream",
            path_text,
        ]))
        .expect("workload");
        let mut parts = Vec::new();
        for _ in 0..200 {
            workload.next(Instant::now(), |part, _| parts.push(part));
        }
        workload.finish_key_stream().expect("flush");
        let text = std::fs::read_to_string(&path).expect("the key stream");
        std::fs::remove_file(&path).ok();
        let lines: Vec<&str> = text.lines().collect();
        // YCSB F: every operation a get, half of them followed by a set of the same key.
        assert_eq!(lines.len(), parts.len());
        assert!(parts.len() > 250 && parts.len() < 350, "{} parts", parts.len());
        for (line, part) in lines.iter().zip(&parts) {
            let fields: Vec<&str> = line.split(',').collect();
            let mut key = Vec::new();
            write_key_text(part.key, 16, &mut key);
            let op = if part.write { "set" } else { "get" };
            assert_eq!(fields, ["0", std::str::from_utf8(&key).unwrap(), "16", "64", "0", op, "0"], "{line}");
        }
    }

    #[test]
    fn concurrent_writes_may_land_in_either_order_but_completed_ones_are_never_lost() {
        let mut workload = Workload::new(&args(&["--get-ratio", "0", "--keys", "2"])).expect("workload");
        let mut counters = Counters::new();
        // Find two writes of the same key in flight together.
        let first = next_write(&mut workload);
        let second = loop {
            let part = next_write(&mut workload);
            if part.key == first.key {
                break part;
            }
            settle(&mut workload, &mut counters, &part, Some(Answer::Stored));
        };
        assert!(second.version > first.version);
        // The second completes first, then the first: the store may hold either.
        settle(&mut workload, &mut counters, &second, Some(Answer::Stored));
        settle(&mut workload, &mut counters, &first, Some(Answer::Stored));
        let read = read_of(&mut workload, first.key);
        let answer = value(first.key, first.version, 8);
        settle(&mut workload, &mut counters, &read, Some(Answer::Value(&answer)));
        assert_eq!((counters.stale, counters.wrong, counters.hits), (0, 0, 1));
        // A third write sent after both completed, and completed: both older versions are gone.
        let third = loop {
            let part = next_write(&mut workload);
            if part.key == first.key {
                break part;
            }
            settle(&mut workload, &mut counters, &part, Some(Answer::Stored));
        };
        let before = read_of(&mut workload, first.key);
        settle(&mut workload, &mut counters, &third, Some(Answer::Stored));
        // A read sent before the third completed may still see the first...
        settle(&mut workload, &mut counters, &before, Some(Answer::Value(&answer)));
        assert_eq!(counters.stale, 0);
        // ...one sent after may not, and may not see a version never written either.
        let after = read_of(&mut workload, first.key);
        settle(&mut workload, &mut counters, &after, Some(Answer::Value(&answer)));
        assert_eq!(counters.stale, 1);
        let unwritten = value(first.key, third.version + 1, 8);
        settle(&mut workload, &mut counters, &after, Some(Answer::Value(&unwritten)));
        assert_eq!(counters.wrong, 1);
        let other_key = value(first.key ^ 1, third.version, 8);
        settle(&mut workload, &mut counters, &after, Some(Answer::Value(&other_key)));
        assert_eq!(counters.wrong, 2);
        // A miss is allowed (a cache may evict); an error is counted.
        settle(&mut workload, &mut counters, &after, Some(Answer::Miss));
        settle(&mut workload, &mut counters, &after, Some(Answer::Error));
        assert_eq!((counters.stale, counters.wrong, counters.errors), (1, 2, 1));
    }

    #[test]
    fn without_loading_any_version_is_accepted_until_this_run_writes() {
        let mut workload =
            Workload::new(&args(&["--get-ratio", "0", "--keys", "2", "--no-load"])).expect("workload");
        let mut counters = Counters::new();
        let read = read_of(&mut workload, 1);
        let answer = value(1, 77, 8);
        settle(&mut workload, &mut counters, &read, Some(Answer::Value(&answer)));
        assert_eq!((counters.hits, counters.stale, counters.wrong), (1, 0, 0));
        let write = loop {
            let part = next_write(&mut workload);
            if part.key == 1 {
                break part;
            }
        };
        settle(&mut workload, &mut counters, &write, Some(Answer::Stored));
        let read = read_of(&mut workload, 1);
        settle(&mut workload, &mut counters, &read, Some(Answer::Value(&answer)));
        assert_eq!(counters.wrong + counters.stale, 1, "77 was never written by this run");
    }

    #[test]
    fn ycsb_workloads_have_their_mixes() {
        for (name, read, update, insert) in [
            ("a", 0.5, 0.5, 0.0),
            ("b", 0.95, 0.05, 0.0),
            ("c", 1.0, 0.0, 0.0),
            ("d", 0.95, 0.0, 0.05),
            ("f", 0.5, 0.0, 0.0),
        ] {
            let mut workload = Workload::new(&args(&["--ycsb", name, "--keys", "1000"])).expect("workload");
            let (mut reads, mut updates, mut inserts, mut modifies) = (0, 0, 0, 0);
            for _ in 0..20_000 {
                let mut parts = Vec::new();
                workload.next(Instant::now(), |part, wire| parts.push((part, wire.to_vec())));
                match &parts[..] {
                    [(part, wire)] if !part.write => {
                        assert!(wire.starts_with(b"get "));
                        reads += 1
                    }
                    [(part, _)] if part.insert => {
                        assert!(part.key >= 1000);
                        inserts += 1;
                        workload.complete_write(part, true);
                    }
                    [(part, wire)] => {
                        assert!(part.key < 1000 && wire.starts_with(b"set "));
                        updates += 1
                    }
                    [(read, _), (write, _)] => {
                        assert!(!read.last && write.last && read.key == write.key);
                        modifies += 1
                    }
                    _ => unreachable!(),
                }
            }
            let share = |n: i32| n as f64 / 20_000.0;
            assert!((share(reads) - read).abs() < 0.02, "{name}: reads {}", share(reads));
            assert!((share(updates) - update).abs() < 0.02, "{name}: updates {}", share(updates));
            assert!((share(inserts) - insert).abs() < 0.02, "{name}: inserts {}", share(inserts));
            let rmw = 1.0 - read - update - insert;
            assert!((share(modifies) - rmw).abs() < 0.02, "{name}: read-modify-writes {}", share(modifies));
        }
        assert!(Workload::new(&args(&["--ycsb", "e"])).is_err_and(|why| why.contains("range scan")));
    }

    #[test]
    fn keys_are_fixed_width_hex() {
        let mut out = Vec::new();
        write_key_text(0xABC, 8, &mut out);
        assert_eq!(out, b"00000abc");
        out.clear();
        write_key_text(u64::MAX, 20, &mut out);
        assert_eq!(out, b"0000ffffffffffffffff");
        out.clear();
        write_key_text(0x12345, 4, &mut out);
        assert_eq!(out, b"2345");
    }

    #[test]
    fn sla_points_take_the_best_clean_point_under_each_target() {
        let point = |offered: f64, delivered: f64, p99: f64, errors: u64| {
            let mut report = test_report();
            report.offered_rate = Some(offered);
            report.ops_per_sec = delivered;
            report.p99_us = p99;
            report.errors = errors;
            report
        };
        let points = [
            point(1000.0, 1000.0, 50.0, 0),
            point(2000.0, 1990.0, 150.0, 0),
            point(3000.0, 2990.0, 90.0, 3),
            point(4000.0, 3000.0, 180.0, 0),
        ];
        let sla = sla_points(&[100.0, 200.0, 10.0], &points);
        assert_eq!(sla[0].ops_per_sec, Some(1000.0));
        assert_eq!(sla[1].ops_per_sec, Some(1990.0), "4000 offered, 3000 delivered: not met");
        assert_eq!(sla[2].ops_per_sec, None);
    }

    fn test_report() -> LoadReport {
        LoadReport {
            server: String::new(),
            protocol: Protocol::Text,
            dataset: Dataset::Tiny,
            value_size: 8,
            dist: "uniform".into(),
            ycsb: None,
            get_ratio: 0.95,
            connections: 1,
            depth: 1,
            offered_rate: None,
            ops: 0,
            ops_per_sec: 0.0,
            hit_ratio: 1.0,
            errors: 0,
            wrong_values: 0,
            stale_values: 0,
            unanswered: 0,
            p50_us: 0.0,
            p99_us: 0.0,
            p999_us: 0.0,
            max_us: 0.0,
            client_cpu_us_per_op: 0.0,
            server_cpu_us_per_op: None,
            server_rss_mb: None,
            ops_per_sec_per_gb: None,
        }
    }
}
