//! `qs-bench latency`: latency under load, the billion-RPS paper's point. Each server (the
//! lineup of `qs-bench memtier`: quicksilver, memcached, and the peers built here) runs alone
//! with one worker on core 0; the generator (`qs-bench run`'s, on the other cores) first finds
//! the server's own maximum closed-loop (every connection at depth 1), then offers fixed
//! fractions of it open-loop (Poisson arrivals, latency counted from each request's schedule,
//! so a server that falls behind is not excused by the generator waiting for it): p50, p99 and
//! p99.9 at each fraction, for each value size. `--plot` draws p99 and p50 against the fraction
//! of each server's maximum, a panel per value size.

use crate::compare;
use crate::load::{self, LoadArgs, LoadReport};
use crate::memtier::{contenders, Lineup};
use crate::plot;
use serde::Serialize;
use std::io;
use std::path::PathBuf;

/// `qs-bench latency`'s options.
#[derive(clap::Args, Debug, Clone)]
pub struct LatencyArgs {
    /// The servers.
    #[command(flatten)]
    pub lineup: Lineup,
    /// Value sizes, bytes: a panel each.
    #[arg(long, value_delimiter = ',', default_value = "32,16384")]
    pub sizes: Vec<usize>,
    /// Fractions of each server's own maximum to offer.
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.8,0.95")]
    pub fractions: Vec<f64>,
    /// Connections (depth 1 each in the closed-loop run; open-loop arrivals queue behind one
    /// in flight).
    #[arg(long, default_value_t = 50)]
    pub connections: usize,
    /// Keys, all loaded first: at most this many, and no more than half the memory holds.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Measured seconds per point.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Unmeasured seconds before each point.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Fraction of gets (the rest are sets).
    #[arg(long, default_value_t = 0.95)]
    pub get_ratio: f64,
    /// Write p99 and p50 against the fraction of each server's maximum as an SVG here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Rounds (each server started afresh in each, the servers interleaved); each figure is the
    /// median of the rounds'.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Print the report as JSON after the table.
    #[arg(long)]
    pub json: bool,
}

/// One server at one value size and offered fraction of its maximum.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyRow {
    /// The server's name.
    pub server: String,
    /// Value bytes.
    pub value_size: usize,
    /// The server's closed-loop maximum, operations per second.
    pub max_ops_per_sec: f64,
    /// The fraction of it offered (1 for the closed-loop run itself).
    pub fraction: f64,
    /// Offered operations per second (none for the closed-loop run).
    pub offered: Option<f64>,
    /// Delivered operations per second.
    pub ops_per_sec: f64,
    /// Latency percentiles, µs.
    pub p50_us: f64,
    /// p99, µs.
    pub p99_us: f64,
    /// p99.9, µs.
    pub p999_us: f64,
    /// The server's CPU time per operation, µs.
    pub server_cpu_us_per_op: Option<f64>,
    /// Errors and requests never answered.
    pub errors: u64,
}

/// What `qs-bench latency` measured.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyReport {
    /// The command's settings, for the record.
    pub settings: String,
    /// A row per server, value size and fraction (the closed-loop run first).
    pub rows: Vec<LatencyRow>,
}

/// Runs every server at every size: its maximum, then each fraction of it.
pub fn run(args: &LatencyArgs) -> io::Result<LatencyReport> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load_cores = if cpus > 1 { compare::cores_list(1..cpus) } else { "0".to_string() };
    let lineup = contenders(&args.lineup)?;
    let mut rounds: Vec<Vec<LatencyRow>> = Vec::new();
    for round in 0..args.repeat.max(1) {
        eprintln!("round {}", round + 1);
        let mut rows = Vec::new();
        for &size in &args.sizes {
            let keys = args.keys.min((args.lineup.memory << 20) / 2 / (size as u64 + 64)).max(1);
            for contender in &lineup {
                let port = compare::free_port()?;
                let server = compare::start(&contender.program, &(contender.args)(port)?, "0", port)?;
                let point = Point { args, keys, size, cores: &load_cores, pid: server.child.id(), port };
                let closed = load::run(&point.load(None, false)?)?;
                let max = closed.ops_per_sec;
                report_row(&mut rows, contender.name, (size, max, 1.0), &closed);
                for &fraction in &args.fractions {
                    let open = load::run(&point.load(Some(max * fraction), true)?)?;
                    report_row(&mut rows, contender.name, (size, max, fraction), &open);
                }
            }
        }
        rounds.push(rows);
    }
    let rows = (0..rounds[0].len()).map(|index| median_row(rounds.iter().map(|rows| &rows[index]))).collect();
    let settings = format!(
        "qs-bench run's generator on cores {load_cores}, {} connections, {:.0}% gets, uniform keys \
         (all loaded first), {} s a point; each server alone on core 0 with one worker and {} MiB; \
         its maximum closed-loop at depth 1, then open-loop (Poisson) at {:?} of it; median of {}",
        args.connections,
        args.get_ratio * 100.0,
        args.seconds,
        args.lineup.memory,
        args.fractions,
        args.repeat.max(1)
    );
    let report = LatencyReport { settings, rows };
    if let Some(path) = &args.plot {
        draw(path, &report, args).map_err(io::Error::other)?;
    }
    Ok(report)
}

/// One load point's settings.
struct Point<'a> {
    args: &'a LatencyArgs,
    keys: u64,
    size: usize,
    cores: &'a str,
    pid: u32,
    port: u16,
}

impl Point<'_> {
    /// `qs-bench run`'s options for this point: closed loop without `rate`.
    fn load(&self, rate: Option<f64>, loaded: bool) -> io::Result<LoadArgs> {
        let (server, pid) = (format!("127.0.0.1:{}", self.port), self.pid.to_string());
        let (connections, keys) = (self.args.connections.to_string(), self.keys.to_string());
        let (size, seconds, gets) =
            (self.size.to_string(), self.args.seconds.to_string(), self.args.get_ratio.to_string());
        let warmup = self.args.warmup.to_string();
        let mut argv = vec![
            "--server",
            &server,
            "--server-pid",
            &pid,
            "--connections",
            &connections,
            "--depth",
            "1",
            "--keys",
            &keys,
            "--value-size",
            &size,
            "--get-ratio",
            &gets,
            "--duration",
            &seconds,
            "--warmup",
            &warmup,
            "--cores",
            self.cores,
            "--quiet",
        ];
        let rate = rate.map(|rate| format!("{rate:.0}"));
        if let Some(rate) = &rate {
            argv.extend_from_slice(&["--rate", rate]);
        }
        if loaded {
            argv.push("--no-load");
        }
        LoadArgs::from_argv(&argv).map_err(|error| io::Error::other(error.to_string()))
    }
}

fn report_row(
    rows: &mut Vec<LatencyRow>,
    server: &str,
    (size, max, fraction): (usize, f64, f64),
    run: &LoadReport,
) {
    let row = LatencyRow {
        server: server.to_string(),
        value_size: size,
        max_ops_per_sec: max,
        fraction,
        offered: run.offered_rate,
        ops_per_sec: run.ops_per_sec,
        p50_us: run.p50_us,
        p99_us: run.p99_us,
        p999_us: run.p999_us,
        server_cpu_us_per_op: run.server_cpu_us_per_op,
        errors: run.errors + run.unanswered,
    };
    eprintln!(
        "  {:<12} {:>6} B  {:>5.0}% of {:>7.0}/s: {:>7.0} ops/s  p50 {:>7.0} µs  p99 {:>7.0} µs  p99.9 {:>7.0} µs",
        row.server,
        size,
        fraction * 100.0,
        max,
        row.ops_per_sec,
        row.p50_us,
        row.p99_us,
        row.p999_us
    );
    rows.push(row);
}

/// Each figure of a row the median of the rounds' (the middle one of an even count's upper
/// half).
fn median_row<'a>(runs: impl Iterator<Item = &'a LatencyRow>) -> LatencyRow {
    let runs: Vec<&LatencyRow> = runs.collect();
    let median = |get: fn(&LatencyRow) -> f64| {
        let mut values: Vec<f64> = runs.iter().map(|row| get(row)).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    LatencyRow {
        max_ops_per_sec: median(|row| row.max_ops_per_sec),
        offered: runs[0].offered.map(|_| median(|row| row.offered.unwrap_or(f64::NAN))),
        ops_per_sec: median(|row| row.ops_per_sec),
        p50_us: median(|row| row.p50_us),
        p99_us: median(|row| row.p99_us),
        p999_us: median(|row| row.p999_us),
        server_cpu_us_per_op: runs[0]
            .server_cpu_us_per_op
            .map(|_| median(|row| row.server_cpu_us_per_op.unwrap_or(f64::NAN))),
        errors: runs.iter().map(|row| row.errors).sum(),
        ..runs[0].clone()
    }
}

/// A panel per value size: p99 (and p50) against the fraction of each server's maximum.
fn draw(path: &std::path::Path, report: &LatencyReport, args: &LatencyArgs) -> Result<(), String> {
    let panels: Vec<(String, Vec<plot::Curve>)> = args
        .sizes
        .iter()
        .map(|&size| {
            let rows =
                || report.rows.iter().filter(move |row| row.value_size == size && row.offered.is_some());
            let mut names: Vec<&str> = rows().map(|row| row.server.as_str()).collect();
            names.dedup();
            let curves = names
                .iter()
                .map(|&name| plot::Curve {
                    name: name.to_string(),
                    points: rows()
                        .filter(|row| row.server == name)
                        .map(|row| (row.fraction * 100.0, row.p50_us, row.p99_us))
                        .collect(),
                })
                .collect();
            (format!("{size}-byte values"), curves)
        })
        .collect();
    plot::fraction_panels(path, "latency at a fraction of each server's own maximum (open loop)", &panels)
}

/// The report as a table.
pub fn print(report: &LatencyReport) {
    println!("{}", report.settings);
    println!("server       value B  % of max    max ops/s    ops/s   p50 µs   p99 µs  p99.9 µs  µs CPU/op");
    for row in &report.rows {
        let fraction =
            if row.offered.is_some() { format!("{:.0}%", row.fraction * 100.0) } else { "max".into() };
        println!(
            "{:<12} {:>7} {:>9} {:>12.0} {:>8.0} {:>8.0} {:>8.0} {:>9.0} {:>10.2}",
            row.server,
            row.value_size,
            fraction,
            row.max_ops_per_sec,
            row.ops_per_sec,
            row.p50_us,
            row.p99_us,
            row.p999_us,
            row.server_cpu_us_per_op.unwrap_or(f64::NAN)
        );
    }
}
