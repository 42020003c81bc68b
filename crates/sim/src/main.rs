//! qs-sim: miss-ratio curves of a request stream on exact LRU, exact FIFO and the real engine.
//!
//!     qs-sim mrc --dist zipf --theta 0.99 --keys 1000000 --requests 10000000
//!     qs-sim mrc --trace cluster52.csv --format twitter --fractions 0.01,0.1,0.5
//!     qs-sim mrc --ycsb a --keys 100000 --json
//!     qs-sim skew --keys 201326592 --partitions 16,24,120,240
//!     qs-sim front --records 1000000 --requests 10000000

use clap::{Parser, Subcommand, ValueEnum};
use qs_sim::live::{LiveReport, Server};
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
    /// Load on the hottest partition over the mean, zipf keys spread by hash (exact).
    Skew(SkewArgs),
    /// The NIC paper's front cache: miss ratio by size, ways, policy, allocation, YCSB mix.
    Front(FrontArgs),
    /// Hot keys: per-partition Space-Saving summaries, merged, against the exact top N.
    Hotkeys(HotkeysArgs),
}

#[derive(clap::Args)]
struct HotkeysArgs {
    /// Keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Requests.
    #[arg(long, default_value_t = 10_000_000)]
    requests: u64,
    /// Zipf exponent.
    #[arg(long, default_value_t = 0.99)]
    theta: f64,
    /// Partitions, each with its own summary.
    #[arg(long, default_value_t = 8)]
    partitions: u32,
    /// Keys each summary watches.
    #[arg(long, default_value_t = 64)]
    capacity: usize,
    /// How many of the top keys to check.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(clap::Args)]
struct SkewArgs {
    /// Keys (the paper's 192 Mi: 201326592).
    #[arg(long, default_value_t = 192 << 20)]
    keys: u64,
    /// Zipf exponent.
    #[arg(long, default_value_t = 0.99)]
    theta: f64,
    /// Key bytes.
    #[arg(long, default_value_t = 16)]
    key_size: u16,
    /// Partition counts.
    #[arg(long, value_delimiter = ',', default_values_t = [16, 24, 120, 240])]
    partitions: Vec<u32>,
    /// Placements to draw (where the hottest keys land is chance): 0, 1, ... placements-1.
    #[arg(long, default_value_t = 1)]
    placements: u64,
    /// Print the report as JSON after the table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum PolicyArg {
    Fifo,
    Lru,
}

#[derive(clap::Args)]
struct FrontArgs {
    /// Records (the main cache holds them all).
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Transaction-phase requests per workload.
    #[arg(long, default_value_t = 10_000_000)]
    requests: u64,
    /// YCSB workloads.
    #[arg(long, value_delimiter = ',', value_parser = parse_ycsb, default_values = ["a", "b", "c", "d"])]
    ycsb: Vec<Ycsb>,
    /// Front cache sizes as fractions of the records.
    #[arg(long, value_delimiter = ',', default_values_t = [1.0 / 64.0, 1.0 / 32.0, 1.0 / 16.0, 1.0 / 8.0, 0.25, 0.5])]
    ratios: Vec<f64>,
    /// Ways per set.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4, 8, 16])]
    ways: Vec<usize>,
    /// Replacement policies.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [PolicyArg::Fifo, PolicyArg::Lru])]
    policies: Vec<PolicyArg>,
    /// Also run read-no-allocate (a get miss does not fill the front cache).
    #[arg(long)]
    no_allocate: bool,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON after the table.
    #[arg(long)]
    json: bool,
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
    /// The server's `watch fetchers mutations` stream (memcached's format).
    Watch,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum ModelArg {
    Lru,
    Fifo,
    S3fifo,
    /// Segcache's Merge eviction.
    Merge,
    Lfu,
    Engine,
}

#[derive(Clone, Copy, ValueEnum)]
enum EvictionArg {
    ApproxLru,
    Lru,
    Fifo,
    Clock,
    /// S3-FIFO in the log (the server's default).
    S3fifo,
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
    /// Synthetic: share of requests that are gets of a scan of cold keys, each read once
    /// (a scan polluting a hot set)
    #[arg(long, default_value_t = 0.0)]
    scan_share: f64,
    /// Synthetic: every key a time to live of its own, a third of them 1 s to 5 minutes, the
    /// rest 1 hour to 1 day
    #[arg(long)]
    ttl_mix: bool,
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
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [ModelArg::Lru, ModelArg::Fifo, ModelArg::S3fifo, ModelArg::Lfu, ModelArg::Engine])]
    models: Vec<ModelArg>,
    /// The engine's eviction policy (the server's default: s3fifo).
    #[arg(long, value_enum, default_value = "s3fifo")]
    eviction: EvictionArg,
    /// The engine's partitions.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Gets that miss are not followed by a set (read-no-allocate).
    #[arg(long)]
    no_fill: bool,
    /// The engine's index load: slots a log full of the stream's mean item fills (the
    /// server's 0.625; lower is a larger, less lossy index).
    #[arg(long, default_value_t = qs_store::config::INDEX_LOAD_DEFAULT)]
    index_load: f64,
    /// Also run a twin engine per size whose index never overflows: the difference is what
    /// the lossy index costs in hit ratio.
    #[arg(long)]
    index_cost: bool,
    /// Give the engine a flash tier of this many times each size's DRAM (`-o ext_path`'s
    /// model: items leaving the DRAM head go to a flash log and come back when read).
    #[arg(long, default_value_t = 0.0)]
    flash_ratio: f64,
    /// Print the report as JSON after the table.
    #[arg(long)]
    json: bool,
    /// Draw the curves to this SVG file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Also replay the stream to this quicksilver server (HOST:PORT; gets, the client's set
    /// after each miss, sets, deletes) and set its own estimate (`stats mrc`, reset first)
    /// beside the exact curves at its sizes (0.25x to 8x its item memory).
    #[arg(long)]
    live: Option<String>,
    /// Requests per pipelined batch of the replay to --live.
    #[arg(long, default_value_t = 64)]
    live_depth: usize,
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

/// A request stream, boxed: synthetic or a trace.
type Stream = Box<dyn Iterator<Item = io::Result<qs_sim::stream::Access>>>;

/// Opens `args`' stream; `pass` counts the opens (a trace's progress bar names its pass).
fn open_stream(args: &MrcArgs, pass: &mut u32) -> io::Result<Stream> {
    *pass += 1;
    if let Some(path) = &args.trace {
        let format = match args.format {
            FormatArg::Twitter => Format::Twitter,
            FormatArg::Oracle => Format::OracleGeneral,
            FormatArg::Watch => Format::Watch,
        };
        let file = File::open(path)
            .map_err(|error| io::Error::new(error.kind(), format!("{}: {error}", path.display())))?;
        // A bar per pass over the trace, by bytes read (drawn only on a terminal).
        let bytes = file.metadata().map(|metadata| metadata.len()).unwrap_or(0);
        let bar = indicatif::ProgressBar::new(bytes)
            .with_style(
                indicatif::ProgressStyle::with_template("{msg} {wide_bar} {bytes}/{total_bytes} {eta}")
                    .expect("a valid template"),
            )
            .with_message(format!("pass {pass}"))
            .with_finish(indicatif::ProgressFinish::AndClear);
        return Ok(Box::new(Trace::new(
            BufReader::with_capacity(1 << 20, bar.wrap_read(file)),
            format,
            args.key_size,
        )));
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
        scramble: false,
        scan_share: args.scan_share,
        ttl_mix: args.ttl_mix,
    };
    Ok(Box::new(recipe.stream().map(Ok)))
}

fn mrc_command(args: &MrcArgs) -> io::Result<MrcReport> {
    let mut plan = MrcPlan {
        sizes: args.sizes.clone(),
        fractions: args.fractions.clone(),
        models: args
            .models
            .iter()
            .map(|model| match model {
                ModelArg::Lru => Model::Lru,
                ModelArg::Fifo => Model::Fifo,
                ModelArg::S3fifo => Model::S3Fifo,
                ModelArg::Merge => Model::Merge,
                ModelArg::Lfu => Model::Lfu,
                ModelArg::Engine => Model::Engine,
            })
            .collect(),
        eviction: match args.eviction {
            EvictionArg::ApproxLru => Eviction::ApproxLru,
            EvictionArg::Lru => Eviction::Lru,
            EvictionArg::Fifo => Eviction::Fifo,
            EvictionArg::Clock => Eviction::Clock,
            EvictionArg::S3fifo => Eviction::S3Fifo,
        },
        partitions: args.partitions,
        fill: !args.no_fill,
        index_load: args.index_load,
        index_cost: args.index_cost,
        flash_ratio: args.flash_ratio,
    };
    let mut pass = 0;
    let live = match &args.live {
        Some(address) => {
            let mut server = Server::connect(address)
                .map_err(|error| io::Error::new(error.kind(), format!("{address}: {error}")))?;
            server.stats("stats mrc reset")?;
            server.stats("stats mrc on")?;
            let replayed = server.replay(open_stream(args, &mut pass)?, args.live_depth)?;
            let curve = server.live_curve()?;
            plan.sizes.extend(curve.points.iter().map(|&(multiple, _)| curve.size(multiple)));
            Some((replayed, curve))
        }
        None => None,
    };
    let mut report = mrc::run(&plan, || open_stream(args, &mut pass))?;
    if let Some((replayed, curve)) = live {
        for point in &mut report.points {
            point.live =
                curve.points.iter().find(|&&(multiple, _)| curve.size(multiple) == point.bytes).map(|p| p.1);
        }
        report.live = Some(LiveReport { replayed, curve });
    }
    Ok(report)
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |value| format!("{:.2}", value * 100.0))
}

fn print(report: &MrcReport) {
    println!(
        "{} requests ({} gets), {} keys, working set {} bytes, cold misses {}% of gets; engine eviction {}",
        report.requests,
        report.gets,
        report.keys,
        report.working_set_bytes,
        percent(report.cold_miss_ratio),
        report.eviction
    );
    println!(
        "{:>9} {:>14} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>10} {:>12} {:>8}",
        "fraction",
        "bytes",
        "LRU %",
        "FIFO %",
        "S3FIFO %",
        "merge %",
        "LFU %",
        "engine %",
        "index -pp",
        "expired %",
        "exp held %",
        "index evict",
        "live %"
    );
    for point in &report.points {
        println!(
            "{:>9.4} {:>14} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>10} {:>12} {:>8}",
            point.fraction,
            point.bytes,
            percent(point.lru),
            percent(point.fifo),
            percent(point.s3fifo),
            percent(point.merge),
            percent(point.lfu),
            percent(point.engine),
            percent(point.engine_index_cost),
            percent(point.engine_expired_miss),
            percent(point.engine_expired_held),
            point.engine_index_evictions.map_or_else(|| "-".into(), |count| count.to_string()),
            percent(point.live),
        );
    }
    if let Some(live) = &report.live {
        let (replayed, curve) = (&live.replayed, &live.curve);
        println!(
            "live: {} requests replayed, the server's own hit ratio {:.2}% at item memory {} bytes; its estimate \
             (stats mrc) sampled at rate {} ({} keys), working set {} bytes (exact {})",
            replayed.requests,
            replayed.hits as f64 * 100.0 / replayed.gets.max(1) as f64,
            curve.item_memory,
            curve.sample_rate,
            curve.sampled_keys,
            curve.working_set_bytes,
            report.working_set_bytes
        );
        let worst = report
            .points
            .iter()
            .filter_map(|point| Some((point.live? - point.lru?).abs()))
            .fold(0.0f64, f64::max);
        println!("live estimate vs exact LRU: largest difference {:.2} percentage points", worst * 100.0);
    }
    if let Some(rate) = report.engine_requests_per_sec {
        println!("engine replay: {:.2} M requests/s (per engine run, replay only, one core)", rate / 1e6);
    }
}

fn skew_command(args: &SkewArgs) {
    println!("zipf {} over {} keys:", args.theta, args.keys);
    println!(
        "{:>9} {:>10} {:>18} {:>14} {:>22}",
        "placement", "partitions", "hottest / mean", "hottest share", "under 1/5 of hottest"
    );
    for placement in 0..args.placements.max(1) {
        let points = qs_sim::skew::skew(args.keys, args.theta, args.key_size, &args.partitions, placement);
        for point in &points {
            println!(
                "{:>9} {:>10} {:>17.2}x {:>13.2}% {:>21.1}%",
                placement,
                point.partitions,
                point.hottest_over_mean,
                point.hottest_share * 100.0,
                point.cold_share * 100.0
            );
        }
        if args.json {
            println!("{}", serde_json::to_string(&points).expect("a report serialises"));
        }
    }
}

fn front_command(args: &FrontArgs) {
    use qs_sim::front::Policy;
    let policies: Vec<Policy> = args
        .policies
        .iter()
        .map(|policy| if *policy == PolicyArg::Fifo { Policy::Fifo } else { Policy::Lru })
        .collect();
    let allocation: Vec<bool> = if args.no_allocate { vec![true, false] } else { vec![true] };
    let points = qs_sim::front::experiment(&qs_sim::front::FrontPlan {
        records: args.records,
        requests: args.requests,
        workloads: args.ycsb.clone(),
        ratios: args.ratios.clone(),
        ways: args.ways.clone(),
        policies,
        allocation,
        seed: args.seed,
    });
    println!(
        "get miss ratio (%) of the front cache; {} records, {} requests per workload",
        args.records, args.requests
    );
    println!("{:>8} {:>6} {:>8} {:>14} ratio: miss %", "workload", "policy", "allocate", "ways");
    let mut rows: Vec<(String, String, bool, usize)> = Vec::new();
    for point in &points {
        let row = (point.workload.clone(), format!("{:?}", point.policy), point.read_allocate, point.ways);
        if !rows.contains(&row) {
            rows.push(row);
        }
    }
    for (workload, policy, allocate, ways) in rows {
        let cells: Vec<String> = points
            .iter()
            .filter(|p| {
                p.workload == workload
                    && format!("{:?}", p.policy) == policy
                    && p.read_allocate == allocate
                    && p.ways == ways
            })
            .map(|p| format!("1/{:.0}: {:5.2}", 1.0 / p.ratio, p.miss_ratio * 100.0))
            .collect();
        println!(
            "{workload:>8} {policy:>6} {:>8} {ways:>14} {}",
            if allocate { "read" } else { "no" },
            cells.join("  ")
        );
    }
    if args.json {
        println!("{}", serde_json::to_string(&points).expect("a report serialises"));
    }
}

fn hotkeys_command(args: &HotkeysArgs) -> bool {
    let recipe = Synthetic {
        keys: args.keys.max(1),
        requests: args.requests,
        dist: KeyDist::Zipf(args.theta),
        set_share: 0.0,
        ycsb: None,
        key_size: 16,
        sizes: SizeDist::Fixed(32),
        rate: 100_000,
        seed: args.seed,
        scramble: true,
        scan_share: 0.0,
        ttl_mix: false,
    };
    let checks = qs_sim::hotkeys::check(&recipe, args.partitions, args.capacity, args.top);
    println!(
        "zipf {} over {} keys, {} requests; {} partitions x {} watched keys, merged:",
        args.theta, args.keys, args.requests, args.partitions, args.capacity
    );
    println!("{:>4} {:>18} {:>10} {:>10} {:>8} {:>7}", "rank", "key", "exact", "estimate", "error", "within");
    for check in &checks {
        println!(
            "{:>4} {:>18} {:>10} {:>10} {:>8} {:>7}",
            check.rank,
            check.key,
            check.exact,
            check.estimate.map_or_else(|| "-".into(), |count| count.to_string()),
            check.error.map_or_else(|| "-".into(), |error| error.to_string()),
            if check.within_bound { "yes" } else { "NO" }
        );
    }
    checks.iter().all(|check| check.within_bound)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Hotkeys(args) => {
            if hotkeys_command(&args) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Command::Skew(args) => {
            skew_command(&args);
            ExitCode::SUCCESS
        }
        Command::Front(args) => {
            front_command(&args);
            ExitCode::SUCCESS
        }
        Command::Mrc(args) => match mrc_command(&args) {
            Ok(report) => {
                print(&report);
                if args.json {
                    println!("{}", serde_json::to_string(&report).expect("a report serialises"));
                }
                if let Some(path) = &args.svg {
                    let title = match &args.trace {
                        Some(trace) => format!("{} ({} requests)", trace.display(), report.requests),
                        None => format!("{} keys, {} requests", args.keys, report.requests),
                    };
                    if let Err(error) = qs_sim::plot::mrc(path, &title, &report) {
                        eprintln!("qs-sim mrc: {}: {error}", path.display());
                        return ExitCode::FAILURE;
                    }
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
