//! `qs-bench`: benchmarks for Quicksilver.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use qs_bench::engine::{self, EngineArgs, EngineReport};
use qs_bench::load::{self, LoadArgs};

#[derive(Parser)]
#[command(name = "qs-bench", version, about = "Quicksilver benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Subcommands,
}

#[derive(Subcommand)]
enum Subcommands {
    /// The engine in process on one core: MICA's datasets through the prefetching batch pipeline,
    /// or the hashbrown reference (`--store hashbrown`) on the same keys.
    Engine(EngineArgs),
    /// Closed-loop load over memcached's text protocol against a running server (memcached,
    /// quicksilver, or any compatible one): throughput, latency, server CPU per operation.
    Run(LoadArgs),
}

fn main() {
    match Cli::parse().command {
        Subcommands::Engine(args) => {
            let report = engine::run(&args);
            print_table(&report);
            if args.json {
                println!("{}", serde_json::to_string(&report).expect("report serialises"));
            }
        }
        Subcommands::Run(args) => match load::run(&args) {
            Ok(report) => {
                println!(
                    "{} {:?} {} get={} conns={} depth={}: {:.0} ops/s  p50 {} us  p99 {} us  p99.9 {} us  hit {:.3}  wrong {}  server CPU {} us/op",
                    report.server,
                    report.dataset,
                    report.dist,
                    report.get_ratio,
                    report.connections,
                    report.depth,
                    report.ops_per_sec,
                    report.p50_us,
                    report.p99_us,
                    report.p999_us,
                    report.hit_ratio,
                    report.wrong,
                    report.server_cpu_us_per_op.map_or("?".to_string(), |us| format!("{us:.3}")),
                );
                if args.json {
                    println!("{}", serde_json::to_string(&report).expect("report serialises"));
                }
            }
            Err(error) => {
                eprintln!("qs-bench run: {error}");
                std::process::exit(1);
            }
        },
    }
}

fn print_table(report: &EngineReport) {
    println!(
        "store={:?} dataset={:?} dist={:?} get_ratio={} keys={} batch={} prefetch={:?}",
        report.store,
        report.dataset,
        report.dist,
        report.get_ratio,
        report.keys,
        report.batch,
        report.prefetch
    );
    println!(
        "  {:.2} Mops/s  {:.1} ns/op  hit ratio {:.4}  wrong values {}  (load {:.1} s)",
        report.mops, report.ns_per_op, report.hit_ratio, report.wrong_values, report.load_secs
    );
    println!(
        "  {:.0} items/GiB  overhead {:.1} B/item  measured {:.1} B/item  index load {:.3}  pages log={} index={}",
        report.items_per_gib,
        report.overhead_bytes_per_item,
        report.bytes_per_item_measured,
        report.index_load,
        report.log_pages,
        report.index_pages
    );
}
