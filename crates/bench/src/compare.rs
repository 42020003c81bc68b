//! `qs-bench compare`: quicksilver and memcached side by side on this machine, in one run.
//! Starts both with equal memory and worker counts, pins each to the same cores and the load
//! to the others, runs the same matrix of workloads against each (interleaved point by point,
//! so drift hits both alike), stops both, and prints one table of ratios (quicksilver /
//! memcached) with the raw figures: throughput, server CPU per operation, p99, and latency at
//! equal offered load. `--quick` is a one-minute version; `--plot DIR` adds latency-throughput
//! curves and quicksilver's per-partition load as SVG.

use crate::load::{self, LoadArgs, LoadReport};
use crate::plot;
use clap::Args;
use serde::Serialize;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Options of `qs-bench compare`.
#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// A one-minute version: one worker, three workloads, short points.
    #[arg(long)]
    pub quick: bool,
    /// Worker (thread) counts to run, each a server process pair (default: 1,2; quick: 1).
    #[arg(long, value_delimiter = ',')]
    pub workers: Vec<usize>,
    /// Memory for each server, MiB (-m).
    #[arg(long)]
    pub memory: Option<u64>,
    /// Keys loaded before each point.
    #[arg(long)]
    pub keys: Option<u64>,
    /// Measured seconds per point.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Unmeasured seconds before each point.
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Connections.
    #[arg(long, default_value_t = 50)]
    pub connections: usize,
    /// The protocol both servers are driven with: text, meta or binary (memcached's).
    #[arg(long, value_enum, default_value_t = load::Protocol::Text)]
    pub protocol: load::Protocol,
    /// The memcached binary.
    #[arg(long, default_value = "memcached")]
    pub memcached: String,
    /// The quicksilver binary (default: next to qs-bench, else on PATH).
    #[arg(long)]
    pub quicksilver: Option<String>,
    /// Write SVG plots into this directory (latency against throughput; per-partition load).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Print a JSON line after the table.
    #[arg(long)]
    pub json: bool,
    /// memtier_benchmark's binary (scripts/build-memtier.sh): each row is also run by memtier
    /// against both servers (its own preloaded keys, the row's value size, set:get ratio, key
    /// distribution, connections and depth, one thread on the load cores), measured from the
    /// servers as qs-bench's runs are, and printed beside qs-bench's figures. Text and binary.
    #[arg(long)]
    pub memtier: Option<String>,
}

/// What memtier_benchmark's run of a row cost one server.
#[derive(Clone, Debug, Serialize)]
pub struct MemtierFigures {
    /// Operations per second (the server's cmd_get + cmd_set).
    pub ops_per_sec: f64,
    /// Server CPU per operation, µs (/proc).
    pub server_cpu_us_per_op: Option<f64>,
}

/// One workload of the matrix.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// Dataset name.
    pub dataset: &'static str,
    /// GET fraction.
    pub get_ratio: f64,
    /// uniform or zipf.
    pub dist: &'static str,
    /// Pipeline depth.
    pub depth: usize,
}

/// One workload measured on both servers.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Worker count of both servers.
    pub workers: usize,
    /// The workload.
    pub point: Point,
    /// Quicksilver's figures.
    pub quicksilver: LoadReport,
    /// memcached's figures.
    pub memcached: LoadReport,
    /// Throughput ratio (quicksilver / memcached).
    pub ops_ratio: f64,
    /// Server CPU per operation ratio (quicksilver / memcached; lower is better).
    pub cpu_ratio: Option<f64>,
    /// p99 ratio (quicksilver / memcached; lower is better).
    pub p99_ratio: f64,
    /// memtier_benchmark's run of the same workload (with `--memtier`): quicksilver's, memcached's.
    pub memtier: Option<(MemtierFigures, MemtierFigures)>,
}

/// What `compare` measured.
#[derive(Clone, Debug, Serialize)]
pub struct CompareReport {
    /// `quicksilver -V`.
    pub quicksilver_version: String,
    /// `memcached -V`.
    pub memcached_version: String,
    /// Closed-loop matrix.
    pub rows: Vec<Row>,
    /// Open loop at equal offered load (tiny, 95% GET, uniform, depth 16).
    pub equal_load: Vec<Row>,
    /// Plots written.
    pub plots: Vec<String>,
}

/// A server process, killed and reaped when dropped.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(crate) fn running_as_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|out| out.stdout.starts_with(b"0\n"))
}

/// Starts `program args` pinned to `cores` and waits until it answers a get (a miss's `END`:
/// every memcached-protocol server has get, not all have `version`).
pub(crate) fn start(program: &str, args: &[String], cores: &str, port: u16) -> io::Result<Server> {
    let child = Command::new("taskset")
        .args(["-c", cores, program])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|error| io::Error::other(format!("starting {program} under taskset: {error}")))?;
    let mut server = Server { child, port };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(io::Error::other(format!("{program} exited at start ({status})")));
        }
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
            stream.write_all(b"get qs-bench-ready\r\n")?;
            let mut reply = [0u8; 64];
            if stream.read(&mut reply).is_ok_and(|n| reply[..n].starts_with(b"END")) {
                return Ok(server);
            }
        }
        if Instant::now() > deadline {
            server.child.kill()?;
            return Err(io::Error::other(format!("{program} did not answer on port {port}")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn version_of(program: &str) -> String {
    Command::new(program)
        .arg("-V")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .unwrap_or_else(|_| "?".to_string())
}

fn quicksilver_binary(args: &CompareArgs) -> String {
    quicksilver_beside(args.quicksilver.as_deref())
}

/// `given`, or the quicksilver binary beside qs-bench's, or the one on PATH.
pub(crate) fn quicksilver_beside(given: Option<&str>) -> String {
    if let Some(path) = given {
        return path.to_string();
    }
    let beside = std::env::current_exe().ok().and_then(|exe| Some(exe.parent()?.join("quicksilver")));
    match beside {
        Some(path) if path.exists() => path.display().to_string(),
        _ => "quicksilver".to_string(),
    }
}

fn matrix(quick: bool) -> Vec<Point> {
    if quick {
        return vec![
            Point { dataset: "tiny", get_ratio: 0.95, dist: "uniform", depth: 1 },
            Point { dataset: "tiny", get_ratio: 0.95, dist: "uniform", depth: 16 },
            Point { dataset: "small", get_ratio: 0.5, dist: "zipf", depth: 16 },
        ];
    }
    let mut points = Vec::new();
    for dataset in ["tiny", "small"] {
        for get_ratio in [0.95, 0.5] {
            for dist in ["uniform", "zipf"] {
                for depth in [1, 16] {
                    points.push(Point { dataset, get_ratio, dist, depth });
                }
            }
        }
    }
    points
}

struct Settings {
    protocol: load::Protocol,
    keys: u64,
    duration: f64,
    warmup: f64,
    connections: usize,
}

fn load_args(server: &Server, point: &Point, settings: &Settings, rate: Option<f64>) -> io::Result<LoadArgs> {
    let address = format!("127.0.0.1:{}", server.port);
    let pid = server.child.id().to_string();
    let (keys, duration, warmup) =
        (settings.keys.to_string(), settings.duration.to_string(), settings.warmup.to_string());
    let (get_ratio, depth, connections) =
        (point.get_ratio.to_string(), point.depth.to_string(), settings.connections.to_string());
    let mut argv = vec![
        "--server",
        &address,
        "--server-pid",
        &pid,
        "--dataset",
        point.dataset,
        "--get-ratio",
        &get_ratio,
        "--dist",
        point.dist,
        "--depth",
        &depth,
        "--connections",
        &connections,
        "--keys",
        &keys,
        "--duration",
        &duration,
        "--warmup",
        &warmup,
        "--quiet",
    ];
    let protocol = clap::ValueEnum::to_possible_value(&settings.protocol).expect("a named protocol");
    argv.extend_from_slice(&["--protocol", protocol.get_name()]);
    let rate = rate.map(|rate| rate.to_string());
    if let Some(rate) = &rate {
        argv.extend_from_slice(&["--rate", rate]);
    }
    LoadArgs::from_argv(&argv).map_err(|error| io::Error::other(error.to_string()))
}

fn row(workers: usize, point: &Point, quicksilver: LoadReport, memcached: LoadReport) -> Row {
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    Row {
        workers,
        point: point.clone(),
        ops_ratio: ratio(quicksilver.ops_per_sec, memcached.ops_per_sec),
        cpu_ratio: quicksilver
            .server_cpu_us_per_op
            .zip(memcached.server_cpu_us_per_op)
            .map(|(a, b)| ratio(a, b)),
        p99_ratio: ratio(quicksilver.p99_us, memcached.p99_us),
        quicksilver,
        memcached,
        memtier: None,
    }
}

/// memtier_benchmark's arguments for `point` against `port` (`None` for a protocol memtier does
/// not speak). `load`: preload the keys (every key once, each connection its own range).
fn memtier_args(point: &Point, settings: &Settings, port: u16, load: bool) -> Option<Vec<String>> {
    let protocol = match settings.protocol {
        load::Protocol::Text => "memcache_text",
        load::Protocol::Binary => "memcache_binary",
        _ => return None,
    };
    let dataset: crate::workload::Dataset = clap::ValueEnum::from_str(point.dataset, true).ok()?;
    let value_len = dataset.sizes().1;
    let mut args: Vec<String> = [
        "-s",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-P",
        protocol,
        "-t",
        "1",
        "-c",
        &settings.connections.to_string(),
        "-d",
        &value_len.to_string(),
        "--key-maximum",
        &settings.keys.to_string(),
        "--hide-histogram",
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    if load {
        let per_connection = settings.keys.div_ceil(settings.connections as u64);
        args.extend(
            ["--ratio", "1:0", "--key-pattern", "P:P", "-n", &per_connection.to_string()].map(String::from),
        );
        return Some(args);
    }
    let gets = (point.get_ratio * 100.0).round() as u64;
    let sets = 100 - gets.min(100);
    let common = gcd(gets, sets).max(1);
    let pattern = if point.dist == "zipf" { "Z:Z" } else { "R:R" };
    let seconds = (settings.warmup + settings.duration).ceil().max(1.0) as u64;
    args.extend(
        [
            "--ratio",
            &format!("{}:{}", sets / common, gets / common),
            "--key-pattern",
            pattern,
            "--pipeline",
            &point.depth.to_string(),
            "--test-time",
            &seconds.to_string(),
        ]
        .map(String::from),
    );
    if point.dist == "zipf" {
        args.extend(["--key-zipf-exp", "0.99"].map(String::from));
    }
    Some(args)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The reply to `request` (a `stats` command), up to its `END`.
fn stats_reply(port: u16, request: &[u8]) -> io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(request)?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 16384];
    while !reply.ends_with(b"END\r\n") {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// The server's `cmd_get + cmd_set`.
fn server_ops(port: u16) -> io::Result<u64> {
    let text = stats_reply(port, b"stats\r\n")?;
    let stat = |name: &str| {
        text.lines()
            .filter_map(|line| line.strip_prefix("STAT "))
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(stat("cmd_get") + stat("cmd_set"))
}

/// Runs memtier_benchmark's version of `point` against `server` (after preloading its keys once
/// per dataset) and measures the server over the run's middle `settings.duration` seconds.
fn memtier_run(
    memtier: &str,
    cores: &str,
    server: &Server,
    point: &Point,
    settings: &Settings,
    loaded: &mut Vec<&'static str>,
) -> io::Result<Option<MemtierFigures>> {
    let Some(args) = memtier_args(point, settings, server.port, false) else { return Ok(None) };
    let spawn = |args: &[String]| {
        Command::new("taskset")
            .arg("-c")
            .arg(cores)
            .arg(memtier)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| io::Error::other(format!("{memtier}: {error}")))
    };
    if !loaded.contains(&point.dataset) {
        let load = memtier_args(point, settings, server.port, true).expect("the protocol was accepted");
        let status = spawn(&load)?.wait()?;
        if !status.success() {
            return Err(io::Error::other(format!("{memtier} failed to load the keys ({status})")));
        }
        loaded.push(point.dataset);
    }
    let mut child = spawn(&args)?;
    std::thread::sleep(Duration::from_secs_f64(settings.warmup.max(0.5)));
    let pid = server.child.id();
    let (ops0, cpu0) = (server_ops(server.port)?, crate::cpu::process_cpu_secs(pid));
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(settings.duration));
    let (ops1, cpu1) = (server_ops(server.port)?, crate::cpu::process_cpu_secs(pid));
    let elapsed = started.elapsed().as_secs_f64();
    child.wait()?;
    let ops = ops1.saturating_sub(ops0);
    Ok(Some(MemtierFigures {
        ops_per_sec: ops as f64 / elapsed,
        server_cpu_us_per_op: cpu0.zip(cpu1).filter(|_| ops > 0).map(|(a, b)| (b - a) * 1e6 / ops as f64),
    }))
}

fn describe(point: &Point) -> String {
    format!("{} {:.0}% GET {}", point.dataset, point.get_ratio * 100.0, point.dist)
}

pub(crate) fn cores_list(range: std::ops::Range<usize>) -> String {
    range.map(|core| core.to_string()).collect::<Vec<_>>().join(",")
}

/// Runs the comparison and prints progress on stderr.
pub fn run(args: &CompareArgs) -> io::Result<CompareReport> {
    let quick = args.quick;
    let workers = if args.workers.is_empty() {
        if quick {
            vec![1]
        } else {
            vec![1, 2]
        }
    } else {
        args.workers.clone()
    };
    if !matches!(args.protocol, load::Protocol::Text | load::Protocol::Meta | load::Protocol::Binary) {
        return Err(io::Error::other("compare drives text, meta or binary (TCP) only"));
    }
    eprintln!("protocol: {:?}", args.protocol);
    let settings = Settings {
        protocol: args.protocol,
        keys: args.keys.unwrap_or(if quick { 50_000 } else { 100_000 }),
        duration: args.duration.unwrap_or(if quick { 2.0 } else { 3.0 }),
        warmup: args.warmup.unwrap_or(if quick { 0.5 } else { 1.0 }),
        connections: args.connections,
    };
    let memory = args.memory.unwrap_or(if quick { 256 } else { 1024 }).to_string();
    let quicksilver = quicksilver_binary(args);
    let report_versions = (version_of(&quicksilver), version_of(&args.memcached));
    if report_versions.1 == "?" {
        return Err(io::Error::other(format!(
            "{} -V failed: is memcached installed (apt-get install memcached)?",
            args.memcached
        )));
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut rows = Vec::new();
    let mut equal_load = Vec::new();
    let mut plots = Vec::new();
    for &count in &workers {
        let server_cores = cores_list(0..count.min(cpus));
        let load_cores = if count < cpus { cores_list(count..cpus) } else { cores_list(0..cpus) };
        load::pin_self(&load_cores)?;
        eprintln!(
            "{count} worker(s): servers on cores {server_cores}, load on cores {load_cores}, {} connections, {} keys, {} s per point",
            settings.connections, settings.keys, settings.duration
        );
        let (qs_port, mc_port) = (free_port()?, free_port()?);
        let threads = count.to_string();
        let qs_args: Vec<String> =
            ["-l", "127.0.0.1", "-p", &qs_port.to_string(), "-t", &threads, "-m", &memory]
                .iter()
                .map(|arg| arg.to_string())
                .collect();
        let mut mc_args: Vec<String> =
            ["-l", "127.0.0.1", "-p", &mc_port.to_string(), "-U", "0", "-t", &threads, "-m", &memory]
                .iter()
                .map(|arg| arg.to_string())
                .collect();
        if running_as_root() {
            mc_args.extend(["-u".to_string(), "nobody".to_string()]);
        }
        let qs = start(&quicksilver, &qs_args, &server_cores, qs_port)?;
        let mc = start(&args.memcached, &mc_args, &server_cores, mc_port)?;
        let (mut qs_loaded, mut mc_loaded) = (Vec::new(), Vec::new());
        for (index, point) in matrix(quick).iter().enumerate() {
            // Alternate which server goes first, so neither always follows the other.
            let (first, second) = if index % 2 == 0 { (&qs, &mc) } else { (&mc, &qs) };
            let a = load::run(&load_args(first, point, &settings, None)?)?;
            let b = load::run(&load_args(second, point, &settings, None)?)?;
            let (qs_report, mc_report) = if index % 2 == 0 { (a, b) } else { (b, a) };
            let mut row = row(count, point, qs_report, mc_report);
            if let Some(memtier) = &args.memtier {
                let qs_memtier = memtier_run(memtier, &load_cores, &qs, point, &settings, &mut qs_loaded)?;
                let mc_memtier = memtier_run(memtier, &load_cores, &mc, point, &settings, &mut mc_loaded)?;
                row.memtier = qs_memtier.zip(mc_memtier);
                if let Some((q, m)) = &row.memtier {
                    eprintln!(
                        "  {:<26} depth {:>2}: memtier: quicksilver {:>9.0} ops/s, memcached {:>9.0} ops/s",
                        "", point.depth, q.ops_per_sec, m.ops_per_sec
                    );
                }
            }
            eprintln!(
                "  {:<26} depth {:>2}: quicksilver {:>9.0} ops/s, memcached {:>9.0} ops/s ({:.2}x)",
                describe(point),
                point.depth,
                row.quicksilver.ops_per_sec,
                row.memcached.ops_per_sec,
                row.ops_ratio
            );
            rows.push(row);
        }
        // Latency at equal offered load: fractions of the slower server's maximum.
        let base = Point { dataset: "tiny", get_ratio: 0.95, dist: "uniform", depth: 16 };
        let slower = rows
            .iter()
            .filter(|row| row.workers == count && row.point.depth == 16 && row.point.dataset == "tiny")
            .map(|row| row.quicksilver.ops_per_sec.min(row.memcached.ops_per_sec))
            .fold(f64::INFINITY, f64::min);
        let fractions: &[f64] = if quick { &[0.5] } else { &[0.25, 0.5, 0.8] };
        for &fraction in fractions.iter().filter(|_| slower.is_finite()) {
            let rate = (slower * fraction).round();
            let qs_report = load::run(&load_args(&qs, &base, &settings, Some(rate))?)?;
            let mc_report = load::run(&load_args(&mc, &base, &settings, Some(rate))?)?;
            equal_load.push(row(count, &base, qs_report, mc_report));
        }
        if let Some(dir) = &args.plot {
            std::fs::create_dir_all(dir)?;
            plots.extend(sweep_plots(dir, count, &base, &settings, &qs, &mc, &rows, quick)?);
        }
    }
    Ok(CompareReport {
        quicksilver_version: report_versions.0,
        memcached_version: report_versions.1,
        rows,
        equal_load,
        plots,
    })
}

/// Each server's open-loop sweep up to its own maximum, drawn as latency-throughput curves;
/// quicksilver's per-partition GETs drawn as bars.
#[allow(clippy::too_many_arguments)]
fn sweep_plots(
    dir: &std::path::Path,
    workers: usize,
    base: &Point,
    settings: &Settings,
    qs: &Server,
    mc: &Server,
    rows: &[Row],
    quick: bool,
) -> io::Result<Vec<String>> {
    let Some(top) = rows.iter().find(|row| row.workers == workers && row.point.depth == 16) else {
        return Ok(Vec::new());
    };
    let fractions: &[f64] = if quick {
        &[0.2, 0.4, 0.6, 0.8, 0.9, 1.0]
    } else {
        &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0]
    };
    let sweep_settings =
        Settings { duration: settings.duration.min(1.5), warmup: settings.warmup.min(0.3), ..*settings };
    let mut curves = Vec::new();
    let mut title = String::new();
    for (name, server, max) in
        [("quicksilver", qs, top.quicksilver.ops_per_sec), ("memcached", mc, top.memcached.ops_per_sec)]
    {
        let mut points = Vec::new();
        for fraction in fractions {
            let rate = (max * fraction).max(1.0);
            points.push(load::run(&load_args(server, base, &sweep_settings, Some(rate))?)?);
        }
        title = format!("{} ({workers} worker(s) each)", plot::title(&points[0]));
        curves.push(plot::Curve::of(name, &points));
    }
    let latency = dir.join(format!("latency-throughput-{workers}w.svg"));
    plot::latency_curves(&latency, &title, &curves).map_err(io::Error::other)?;
    let mut written = vec![latency.display().to_string()];
    if let Some(gets) = partition_gets(qs.port)? {
        let labels: Vec<String> = (0..gets.len()).map(|index| index.to_string()).collect();
        let total: f64 = gets.iter().sum::<f64>().max(1.0);
        let shares: Vec<f64> = gets.iter().map(|gets| 100.0 * gets / total).collect();
        let bars = dir.join(format!("partition-load-{workers}w.svg"));
        plot::bars(
            &bars,
            &format!("quicksilver: share of GETs per partition over the run ({workers} worker(s))"),
            "partition",
            "% of GETs",
            &labels,
            &[("GETs".to_string(), shares)],
        )
        .map_err(io::Error::other)?;
        written.push(bars.display().to_string());
    }
    Ok(written)
}

/// Quicksilver's GETs per partition (`stats partitions`).
pub fn partition_gets(port: u16) -> io::Result<Option<Vec<f64>>> {
    let text = stats_reply(port, b"stats partitions\r\n")?;
    let mut gets = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some("STAT"), Some(name), Some(value)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let Some((index, "gets")) = name.split_once(':') else { continue };
        let (Ok(index), Ok(value)) = (index.parse::<usize>(), value.parse::<f64>()) else { continue };
        gets.resize(gets.len().max(index + 1), 0.0);
        gets[index] = value;
    }
    Ok((!gets.is_empty()).then_some(gets))
}

/// Prints the ratio table.
pub fn print(report: &CompareReport) {
    println!(
        "{} against {}; ratios are quicksilver / memcached",
        report.quicksilver_version, report.memcached_version
    );
    println!(
        "{:>7}  {:<26} {:>5}  {:>10} {:>10} {:>6}  {:>8} {:>8} {:>6}  {:>7} {:>7} {:>6}  {:>6}",
        "workers",
        "workload",
        "depth",
        "qs ops/s",
        "mc ops/s",
        "ratio",
        "qs CPU",
        "mc CPU",
        "ratio",
        "qs p99",
        "mc p99",
        "ratio",
        "errors"
    );
    let figure = |value: Option<f64>, digits: usize| {
        value.map_or("?".to_string(), |value| format!("{value:.digits$}"))
    };
    for row in &report.rows {
        println!(
            "{:>7}  {:<26} {:>5}  {:>10.0} {:>10.0} {:>5.2}x  {:>8} {:>8} {:>5}x  {:>7.0} {:>7.0} {:>5.2}x  {:>6}",
            row.workers,
            describe(&row.point),
            row.point.depth,
            row.quicksilver.ops_per_sec,
            row.memcached.ops_per_sec,
            row.ops_ratio,
            figure(row.quicksilver.server_cpu_us_per_op, 2),
            figure(row.memcached.server_cpu_us_per_op, 2),
            figure(row.cpu_ratio, 2),
            row.quicksilver.p99_us,
            row.memcached.p99_us,
            row.p99_ratio,
            errors(&row.quicksilver) + errors(&row.memcached),
        );
    }
    println!("(server CPU in µs per operation from /proc; p99 in µs, closed loop)");
    if report.rows.iter().any(|row| row.memtier.is_some()) {
        println!("memtier_benchmark on the same rows (one thread; the servers' own counts and CPU):");
        println!(
            "{:>7}  {:<26} {:>5}  {:>10} {:>10} {:>6}  {:>8} {:>8} {:>6}  {:>14}",
            "workers",
            "workload",
            "depth",
            "qs ops/s",
            "mc ops/s",
            "ratio",
            "qs CPU",
            "mc CPU",
            "ratio",
            "qs-bench ratio"
        );
        for row in &report.rows {
            let Some((q, m)) = &row.memtier else { continue };
            let cpu_ratio = q.server_cpu_us_per_op.zip(m.server_cpu_us_per_op).map(|(a, b)| a / b);
            println!(
                "{:>7}  {:<26} {:>5}  {:>10.0} {:>10.0} {:>5.2}x  {:>8} {:>8} {:>5}x  {:>13}x",
                row.workers,
                describe(&row.point),
                row.point.depth,
                q.ops_per_sec,
                m.ops_per_sec,
                q.ops_per_sec / m.ops_per_sec.max(1.0),
                figure(q.server_cpu_us_per_op, 2),
                figure(m.server_cpu_us_per_op, 2),
                figure(cpu_ratio, 2),
                figure(row.cpu_ratio, 2),
            );
        }
    }
    if !report.equal_load.is_empty() {
        println!("equal offered load, open loop (tiny, 95% GET, uniform, depth 16; latency from the scheduled time):");
        println!(
            "{:>7}  {:>10}  {:>10} {:>10}  {:>16} {:>16}  {:>6}",
            "workers", "offered/s", "qs done/s", "mc done/s", "qs p50/p99/p99.9", "mc p50/p99/p99.9", "p99 x"
        );
        for row in &report.equal_load {
            let tail = |r: &LoadReport| format!("{:.0}/{:.0}/{:.0}", r.p50_us, r.p99_us, r.p999_us);
            println!(
                "{:>7}  {:>10.0}  {:>10.0} {:>10.0}  {:>16} {:>16}  {:>5.2}x",
                row.workers,
                row.quicksilver.offered_rate.unwrap_or(0.0),
                row.quicksilver.ops_per_sec,
                row.memcached.ops_per_sec,
                tail(&row.quicksilver),
                tail(&row.memcached),
                row.p99_ratio,
            );
        }
    }
    for plot in &report.plots {
        println!("plot: {plot}");
    }
}

/// Errors, wrong and stale values of one run.
fn errors(report: &LoadReport) -> u64 {
    report.errors + report.wrong_values + report.stale_values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memtier_runs_the_rows_workload() {
        let settings = Settings {
            protocol: load::Protocol::Text,
            keys: 50_000,
            duration: 2.0,
            warmup: 0.5,
            connections: 50,
        };
        let point = Point { dataset: "small", get_ratio: 0.95, dist: "zipf", depth: 16 };
        let args = memtier_args(&point, &settings, 11311, false).expect("text is spoken").join(" ");
        for part in [
            "-p 11311",
            "-P memcache_text",
            "-c 50",
            "-d 64",
            "--key-maximum 50000",
            "--ratio 1:19",
            "--key-pattern Z:Z",
            "--pipeline 16",
            "--test-time 3",
            "--key-zipf-exp 0.99",
        ] {
            assert!(args.contains(part), "{part} in {args}");
        }
        let half = Point { dataset: "tiny", get_ratio: 0.5, dist: "uniform", depth: 1 };
        let args = memtier_args(&half, &settings, 1, false).expect("text").join(" ");
        assert!(args.contains("--ratio 1:1") && args.contains("-d 8") && args.contains("R:R"), "{args}");
        let load = memtier_args(&half, &settings, 1, true).expect("text").join(" ");
        assert!(load.contains("--ratio 1:0") && load.contains("P:P") && load.contains("-n 1000"), "{load}");
        let meta = Settings { protocol: load::Protocol::Meta, ..settings };
        assert!(memtier_args(&point, &meta, 1, false).is_none(), "memtier has no meta protocol");
    }
}
