//! `qs-bench memtier`: quicksilver, memcached and the peers built here (Pelikan Segcache,
//! pogocache), each started with the same memory and one worker pinned to the same core,
//! driven in turn by memtier_benchmark (the independent load generator) at each pipeline
//! depth: requests per second, p50/p99/p99.9 as memtier measures them, and the server's CPU per
//! request from /proc.
//! `--plot FILE.svg` draws requests per second beside p99 and CPU per request (the README's
//! picture).

use crate::compare::{self, Server};
use crate::cpu::process_cpu_secs;
use crate::plot;
use serde::Serialize;
use std::io;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// `qs-bench memtier`'s options.
#[derive(clap::Args, Debug, Clone)]
pub struct MemtierArgs {
    /// memtier_benchmark's binary (scripts/build-memtier.sh builds it outside the repository).
    #[arg(long)]
    pub memtier: String,
    /// The servers.
    #[command(flatten)]
    pub lineup: Lineup,
    /// Pipeline depths, one run per server at each.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub depths: Vec<usize>,
    /// memtier's connections (one thread).
    #[arg(long, default_value_t = 50)]
    pub connections: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 10)]
    pub seconds: u32,
    /// Keys, all preloaded before the runs (the gets hit).
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Value size, bytes.
    #[arg(long, default_value_t = 32)]
    pub data_size: usize,
    /// memtier's set:get ratio.
    #[arg(long, default_value = "1:10")]
    pub ratio: String,
    /// Runs of each server at each depth (interleaved; each figure is the median).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Write requests per second beside p99 as an SVG here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Print the report as JSON after the table.
    #[arg(long)]
    pub json: bool,
}

/// One server at one depth, as memtier and /proc saw it.
#[derive(Clone, Debug, Serialize)]
pub struct MemtierRow {
    /// The server's name.
    pub server: String,
    /// Pipeline depth.
    pub depth: usize,
    /// memtier's operations per second.
    pub ops_per_sec: f64,
    /// memtier's latency percentiles, ms.
    pub p50_ms: f64,
    /// p99, ms.
    pub p99_ms: f64,
    /// p99.9, ms.
    pub p999_ms: f64,
    /// The server's CPU time per operation, µs (/proc).
    pub server_cpu_us_per_op: Option<f64>,
}

/// What `qs-bench memtier` measured.
#[derive(Clone, Debug, Serialize)]
pub struct MemtierReport {
    /// The command's settings, for the record.
    pub settings: String,
    /// A row per server and depth.
    pub rows: Vec<MemtierRow>,
}

/// A server to measure: its name and how to start it on a port.
pub(crate) struct Contender {
    pub(crate) name: &'static str,
    pub(crate) program: String,
    pub(crate) args: Box<dyn Fn(u16) -> io::Result<Vec<String>>>,
}

/// The servers to run (quicksilver, memcached, and the peers where built), each with the same
/// memory and one worker: the options `qs-bench memtier` and `qs-bench latency` share.
#[derive(clap::Args, Debug, Clone)]
pub struct Lineup {
    /// The quicksilver binary (default: the one beside qs-bench, else on PATH).
    #[arg(long)]
    pub quicksilver: Option<String>,
    /// memcached's binary.
    #[arg(long, default_value = "memcached")]
    pub memcached: String,
    /// Pelikan Segcache's binary (pelikan-segcache), if built: run with its shipped settings,
    /// the same heap and one worker.
    #[arg(long)]
    pub segcache: Option<String>,
    /// pogocache's binary (github.com/tidwall/pogocache, `make`), if built: one thread, the same
    /// memory limit, its other settings its defaults (io_uring on, CAS off).
    #[arg(long)]
    pub pogocache: Option<String>,
    /// Item memory of every server, MiB.
    #[arg(long, default_value_t = 256)]
    pub memory: u64,
}

/// Starts each server in turn, preloads it, runs memtier at each depth, and stops it.
pub fn run(args: &MemtierArgs) -> io::Result<MemtierReport> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (server_cores, load_cores) =
        if cpus > 1 { ("0".to_string(), compare::cores_list(1..cpus)) } else { ("0".into(), "0".into()) };
    let contenders = contenders(&args.lineup)?;
    let mut samples: Vec<Vec<MemtierRow>> = vec![Vec::new(); contenders.len() * args.depths.len()];
    for round in 0..args.repeat.max(1) {
        for (index, contender) in contenders.iter().enumerate() {
            let port = compare::free_port()?;
            let server = compare::start(&contender.program, &(contender.args)(port)?, &server_cores, port)?;
            memtier(args, &load_cores, port, None)?;
            for (d, &depth) in args.depths.iter().enumerate() {
                let row = measure(args, &load_cores, &server, contender.name, depth)?;
                eprintln!(
                    "  round {} {:<12} depth {:>2}: {:>9.0} ops/s  p99 {:.3} ms  {:.2} µs CPU/op",
                    round + 1,
                    row.server,
                    depth,
                    row.ops_per_sec,
                    row.p99_ms,
                    row.server_cpu_us_per_op.unwrap_or(f64::NAN)
                );
                samples[index * args.depths.len() + d].push(row);
            }
        }
    }
    let rows = samples.into_iter().map(median_row).collect();
    let settings = format!(
        "memtier_benchmark -t 1 -c {} --ratio {} --data-size {} --key-pattern R:R --key-maximum {} \
         --test-time {}, pipeline {:?}; servers -m {} with one worker on core {server_cores}, \
         memtier on {load_cores}; median of {}",
        args.connections,
        args.ratio,
        args.data_size,
        args.keys,
        args.seconds,
        args.depths,
        args.lineup.memory,
        args.repeat
    );
    let report = MemtierReport { settings, rows };
    if let Some(path) = &args.plot {
        draw(path, &report, args)?;
    }
    Ok(report)
}

pub(crate) fn contenders(args: &Lineup) -> io::Result<Vec<Contender>> {
    let memory = args.memory.to_string();
    let quicksilver = compare::quicksilver_beside(args.quicksilver.as_deref());
    let qs_memory = memory.clone();
    let mut list = vec![Contender {
        name: "quicksilver",
        program: quicksilver,
        args: Box::new(move |port| {
            Ok(["-p", &port.to_string(), "-l", "127.0.0.1", "-U", "0", "-m", &qs_memory, "-t", "1"]
                .map(str::to_string)
                .to_vec())
        }),
    }];
    if compare::version_of(&args.memcached) == "?" {
        return Err(io::Error::other(format!("{} -V failed: is memcached installed?", args.memcached)));
    }
    let mc_memory = memory.clone();
    let root = compare::running_as_root();
    list.push(Contender {
        name: "memcached",
        program: args.memcached.clone(),
        args: Box::new(move |port| {
            let mut args: Vec<String> =
                ["-p", &port.to_string(), "-l", "127.0.0.1", "-U", "0", "-m", &mc_memory, "-t", "1"]
                    .map(str::to_string)
                    .to_vec();
            if root {
                args.extend(["-u".to_string(), "nobody".to_string()]);
            }
            Ok(args)
        }),
    });
    if let Some(segcache) = &args.segcache {
        let heap = args.memory;
        list.push(Contender {
            name: "segcache",
            program: segcache.clone(),
            args: Box::new(move |port| {
                segcache_config(port, heap).map(|path| vec![path.display().to_string()])
            }),
        });
    }
    if let Some(pogocache) = &args.pogocache {
        let memory = format!("{}mb", args.memory);
        list.push(Contender {
            name: "pogocache",
            program: pogocache.clone(),
            args: Box::new(move |port| {
                Ok(["-h", "127.0.0.1", "-p", &port.to_string(), "--threads", "1", "--maxmemory", &memory]
                    .map(str::to_string)
                    .to_vec())
            }),
        });
    }
    Ok(list)
}

/// Pelikan Segcache's shipped config/segcache.toml with this run's ports, heap and one worker.
fn segcache_config(port: u16, heap_mib: u64) -> io::Result<PathBuf> {
    let admin = compare::free_port()?;
    // Its shipped hash_power (22) at 64 MB, one more per doubling of the heap.
    let hash_power = 22 + (heap_mib / 64).max(1).ilog2();
    let path = std::env::temp_dir().join(format!("qs-bench-segcache-{}-{port}.toml", std::process::id()));
    std::fs::write(
        &path,
        format!(
            "daemonize = false\n[admin]\nhost = \"127.0.0.1\"\nport = \"{admin}\"\nhttp_enabled = false\n\
             [server]\nhost = \"127.0.0.1\"\nport = \"{port}\"\ntimeout = 100\nnevent = 1024\n\
             [worker]\ntimeout = 100\nnevent = 1024\nthreads = 1\n\
             [seg]\nhash_power = {hash_power}\nheap_size = \"{heap_mib}MB\"\nsegment_size = \"1MB\"\n\
             compact_target = 2\nmerge_target = 4\nmerge_max = 8\neviction = \"Merge\"\n\
             [time]\ntime_type = \"Memcache\"\n[buf]\n[debug]\nlog_level = \"error\"\n"
        ),
    )?;
    Ok(path)
}

/// Runs memtier once: the preload (every key set once, in order) when `depth` is None, else a
/// timed run at `depth`, whose JSON report is returned.
fn memtier(
    args: &MemtierArgs,
    cores: &str,
    port: u16,
    depth: Option<usize>,
) -> io::Result<serde_json::Value> {
    let json = std::env::temp_dir().join(format!("qs-bench-memtier-{}-{port}.json", std::process::id()));
    let mut command = Command::new("taskset");
    command.args([
        "-c",
        cores,
        &args.memtier,
        "-s",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-P",
        "memcache_text",
    ]);
    command.args([
        "-t",
        "1",
        "--hide-histogram",
        "--key-minimum",
        "1",
        "--key-maximum",
        &args.keys.to_string(),
    ]);
    command.args(["--data-size", &args.data_size.to_string()]);
    match depth {
        None => command.args(["-c", "1", "--ratio", "1:0", "--key-pattern", "P:P", "-n", "allkeys"]),
        Some(depth) => command
            .args(["-c", &args.connections.to_string(), "--ratio", &args.ratio, "--key-pattern", "R:R"])
            .args(["--pipeline", &depth.to_string(), "--test-time", &args.seconds.to_string()])
            .args(["--print-percentiles", "50,99,99.9"]),
    };
    command.arg("--json-out-file").arg(&json).stdout(Stdio::null()).stderr(Stdio::null());
    let status = command.status().map_err(|error| io::Error::other(format!("{}: {error}", args.memtier)))?;
    if !status.success() {
        return Err(io::Error::other(format!("{} failed against port {port} ({status})", args.memtier)));
    }
    let text = std::fs::read_to_string(&json)?;
    let _ = std::fs::remove_file(&json);
    serde_json::from_str(&text).map_err(io::Error::other)
}

fn measure(
    args: &MemtierArgs,
    cores: &str,
    server: &Server,
    name: &str,
    depth: usize,
) -> io::Result<MemtierRow> {
    let pid = server.child.id();
    let cpu_before = process_cpu_secs(pid);
    let report = memtier(args, cores, server.port, Some(depth))?;
    let cpu_after = process_cpu_secs(pid);
    let totals = &report["ALL STATS"]["Totals"];
    let number = |value: &serde_json::Value| value.as_f64().unwrap_or(f64::NAN);
    let percentile = |name: &str| number(&totals["Percentile Latencies"][name]);
    let count = number(&totals["Count"]);
    Ok(MemtierRow {
        server: name.to_string(),
        depth,
        ops_per_sec: number(&totals["Ops/sec"]),
        p50_ms: percentile("p50.00"),
        p99_ms: percentile("p99.00"),
        p999_ms: percentile("p99.90"),
        server_cpu_us_per_op: cpu_before
            .zip(cpu_after)
            .filter(|_| count > 0.0)
            .map(|(a, b)| (b - a) * 1e6 / count),
    })
}

/// The row of median figures (each figure's own median) of one server's runs at one depth.
fn median_row(runs: Vec<MemtierRow>) -> MemtierRow {
    let median = |get: fn(&MemtierRow) -> f64| {
        let mut values: Vec<f64> = runs.iter().map(get).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    MemtierRow {
        ops_per_sec: median(|row| row.ops_per_sec),
        p50_ms: median(|row| row.p50_ms),
        p99_ms: median(|row| row.p99_ms),
        p999_ms: median(|row| row.p999_ms),
        server_cpu_us_per_op: Some(median(|row| row.server_cpu_us_per_op.unwrap_or(f64::NAN))),
        ..runs[0].clone()
    }
}

fn draw(path: &std::path::Path, report: &MemtierReport, args: &MemtierArgs) -> io::Result<()> {
    let labels: Vec<String> = args.depths.iter().map(|depth| format!("pipeline {depth}")).collect();
    let mut servers: Vec<&str> = Vec::new();
    for row in &report.rows {
        if !servers.contains(&row.server.as_str()) {
            servers.push(&row.server);
        }
    }
    let series = |get: fn(&MemtierRow) -> f64| -> Vec<(String, Vec<f64>)> {
        servers
            .iter()
            .map(|server| {
                let values = report.rows.iter().filter(|row| row.server == *server).map(get).collect();
                (server.to_string(), values)
            })
            .collect()
    };
    let (rps, p99) = (series(|row| row.ops_per_sec), series(|row| row.p99_ms));
    let cpu = series(|row| row.server_cpu_us_per_op.unwrap_or(0.0));
    let title = format!(
        "memtier_benchmark, {} connections, {} set:get, {}-byte values; one worker each",
        args.connections, args.ratio, args.data_size
    );
    plot::bar_panels(
        path,
        &title,
        &[
            plot::Panel {
                title: "requests per second (higher is better)",
                x_desc: "",
                y_desc: "requests/s",
                labels: &labels,
                series: &rps,
            },
            plot::Panel {
                title: "p99 latency (lower is better)",
                x_desc: "",
                y_desc: "ms",
                labels: &labels,
                series: &p99,
            },
            plot::Panel {
                title: "server CPU per request (lower is better)",
                x_desc: "",
                y_desc: "µs",
                labels: &labels,
                series: &cpu,
            },
        ],
    )
    .map_err(io::Error::other)
}

/// Prints the table: each row's figures and its ratios to memcached's at the same depth.
pub fn print(report: &MemtierReport) {
    println!("{}", report.settings);
    println!(
        "{:<12} {:>5} {:>11} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}",
        "server", "depth", "ops/s", "p50 ms", "p99 ms", "p99.9 ms", "µs CPU/op", "x ops", "x p99"
    );
    for row in &report.rows {
        let memcached =
            report.rows.iter().find(|other| other.server == "memcached" && other.depth == row.depth);
        let (ops_ratio, p99_ratio) = memcached
            .map_or((f64::NAN, f64::NAN), |m| (row.ops_per_sec / m.ops_per_sec, row.p99_ms / m.p99_ms));
        println!(
            "{:<12} {:>5} {:>11.0} {:>9.3} {:>9.3} {:>9.3} {:>10.2} {:>9.2} {:>9.2}",
            row.server,
            row.depth,
            row.ops_per_sec,
            row.p50_ms,
            row.p99_ms,
            row.p999_ms,
            row.server_cpu_us_per_op.unwrap_or(f64::NAN),
            ops_ratio,
            p99_ratio
        );
    }
}
