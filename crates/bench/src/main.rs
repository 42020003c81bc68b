//! `qs-bench`: benchmarks for Quicksilver.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use qs_bench::engine::{self, EngineArgs, EngineReport};

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
