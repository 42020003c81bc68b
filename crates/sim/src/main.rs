//! qs-sim: miss-ratio curves of a request stream on exact LRU, exact FIFO and the real engine.
//!
//!     qs-sim mrc --dist zipf --theta 0.99 --keys 1000000 --requests 10000000
//!     qs-sim mrc --trace cluster52.csv --format twitter --fractions 0.01,0.1,0.5
//!     qs-sim mrc --ycsb a --keys 100000 --json

use clap::{Parser, Subcommand, ValueEnum};
use qs_sim::mrc::{self, Model, MrcPlan, MrcReport};
use qs_sim::stream::{KeyDist, SizeDist, Synthetic, Ycsb};
use qs_sim::trace::{Format, Trace};
use qs_store::Eviction;
use std::fs::File;
use std::io::{self, BufReader};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "qs-sim", about = "Cache simulators on Quicksilver's engine and exact models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Miss-ratio curves by cache size, for exact LRU, exact FIFO and the engine.
    Mrc(MrcArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum DistArg {
    Uniform,
    Zipf,
    Latest,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    /// Twitter's cache-trace CSV.
    Twitter,
    /// libCacheSim's oracleGeneral binary records.
    Oracle,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum ModelArg {
    Lru,
    Fifo,
    Engine,
}

#[derive(Clone, Copy, ValueEnum)]
enum EvictionArg {
    ApproxLru,
    Lru,
    Fifo,
}

#[derive(clap::Args)]
struct MrcArgs {
    /// A trace to replay instead of a synthetic stream.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// The trace's format.
    #[arg(long, value_enum, default_value = "twitter")]
    format: FormatArg,
    /// Synthetic: keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Synthetic: requests.
    #[arg(long, default_value_t = 10_000_000)]
    requests: u64,
    /// Synthetic: key popularity.
    #[arg(long, value_enum, default_value = "zipf")]
    dist: DistArg,
    /// Synthetic: zipf exponent.
    #[arg(long, default_value_t = 0.99)]
    theta: f64,
    /// Synthetic: a YCSB mix (a, b, c, d, f) instead of --set-share.
    #[arg(long, value_parser = parse_ycsb)]
    ycsb: Option<Ycsb>,
    /// Synthetic: share of sets.
    #[arg(long, default_value_t = 0.05)]
    set_share: f64,
    /// Key bytes (synthetic streams and traces without key sizes).
    #[arg(long, default_value_t = 16)]
    key_size: u16,
    /// Synthetic: value bytes, N or MIN-MAX (uniform by key).
    #[arg(long, default_value = "32", value_parser = parse_sizes)]
    value_size: SizeDist,
    /// Synthetic: requests per simulated second.
    #[arg(long, default_value_t = 100_000)]
    rate: u64,
    /// Synthetic: random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Cache sizes as fractions of the working set.
    #[arg(long, value_delimiter = ',', default_values_t = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0])]
    fractions: Vec<f64>,
    /// Cache sizes in bytes of item memory (besides --fractions).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<u64>,
    /// Models to run.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [ModelArg::Lru, ModelArg::Fifo, ModelArg::Engine])]
    models: Vec<ModelArg>,
    /// The engine's eviction policy (the server's default: approx-lru).
    #[arg(long, value_enum, default_value = "approx-lru")]
    eviction: EvictionArg,
    /// The engine's partitions.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Gets that miss are not followed by a set (read-no-allocate).
    #[arg(long)]
    no_fill: bool,
    /// Print the report as JSON after the table.
    #[arg(long)]
    json: bool,
}

fn parse_ycsb(text: &str) -> Result<Ycsb, String> {
    Ycsb::parse(text).ok_or_else(|| format!("{text:?} is not a YCSB workload (a, b, c, d or f)"))
}

fn parse_sizes(text: &str) -> Result<SizeDist, String> {
    let number =
        |part: &str| part.trim().parse::<u32>().map_err(|_| format!("{part:?} is not a size in bytes"));
    match text.split_once('-') {
        Some((min, max)) => {
            let (min, max) = (number(min)?, number(max)?);
            if min > max {
                return Err(format!("{min} is above {max}"));
            }
            Ok(SizeDist::Uniform { min, max })
        }
        None => Ok(SizeDist::Fixed(number(text)?)),
    }
}

fn mrc_command(args: &MrcArgs) -> io::Result<MrcReport> {
    let plan = MrcPlan {
        sizes: args.sizes.clone(),
        fractions: args.fractions.clone(),
        models: args
            .models
            .iter()
            .map(|model| match model {
                ModelArg::Lru => Model::Lru,
                ModelArg::Fifo => Model::Fifo,
                ModelArg::Engine => Model::Engine,
            })
            .collect(),
        eviction: match args.eviction {
            EvictionArg::ApproxLru => Eviction::ApproxLru,
            EvictionArg::Lru => Eviction::Lru,
            EvictionArg::Fifo => Eviction::Fifo,
        },
        partitions: args.partitions,
        fill: !args.no_fill,
    };
    if let Some(path) = &args.trace {
        let format = match args.format {
            FormatArg::Twitter => Format::Twitter,
            FormatArg::Oracle => Format::OracleGeneral,
        };
        return mrc::run(&plan, || {
            let file = File::open(path)
                .map_err(|error| io::Error::new(error.kind(), format!("{}: {error}", path.display())))?;
            Ok(Trace::new(BufReader::with_capacity(1 << 20, file), format, args.key_size))
        });
    }
    let recipe = Synthetic {
        keys: args.keys.max(1),
        requests: args.requests,
        dist: match args.dist {
            DistArg::Uniform => KeyDist::Uniform,
            DistArg::Zipf => KeyDist::Zipf(args.theta),
            DistArg::Latest => KeyDist::Latest(args.theta),
        },
        set_share: args.set_share,
        ycsb: args.ycsb,
        key_size: args.key_size,
        sizes: args.value_size,
        rate: args.rate,
        seed: args.seed,
    };
    mrc::run(&plan, || Ok(recipe.stream().map(Ok)))
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |value| format!("{:.2}", value * 100.0))
}

fn print(report: &MrcReport) {
    println!(
        "{} requests ({} gets), {} keys, working set {} bytes, cold misses {:.2}% of gets; engine eviction {}",
        report.requests,
        report.gets,
        report.keys,
        report.working_set_bytes,
        report.cold_miss_ratio * 100.0,
        report.eviction
    );
    println!(
        "{:>9} {:>14} {:>8} {:>8} {:>8} {:>10} {:>10} {:>12}",
        "fraction", "bytes", "LRU %", "FIFO %", "engine %", "index %", "expired %", "index evict"
    );
    for point in &report.points {
        println!(
            "{:>9.4} {:>14} {:>8} {:>8} {:>8} {:>10} {:>10} {:>12}",
            point.fraction,
            point.bytes,
            percent(point.lru),
            percent(point.fifo),
            percent(point.engine),
            percent(point.engine_index_miss),
            percent(point.engine_expired_miss),
            point.engine_index_evictions.map_or_else(|| "-".into(), |count| count.to_string()),
        );
    }
    if let Some(rate) = report.engine_requests_per_sec {
        println!("engine replay: {:.2} M requests/s (all sizes together)", rate / 1e6);
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Mrc(args) => match mrc_command(&args) {
            Ok(report) => {
                print(&report);
                if args.json {
                    println!("{}", serde_json::to_string(&report).expect("a report serialises"));
                }
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("qs-sim mrc: {error}");
                ExitCode::FAILURE
            }
        },
    }
}
