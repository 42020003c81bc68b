//! `qs-bench`: benchmarks for Quicksilver.
#![forbid(unsafe_code)]
#![allow(clippy::too_many_lines)]

use clap::{Parser, Subcommand};
use qs_bench::compare::{self, CompareArgs};
use qs_bench::engine::{self, EngineArgs, EngineReport};
use qs_bench::latency::{self, LatencyArgs};
use qs_bench::load::{self, LoadArgs};
use qs_bench::memtier::{self, MemtierArgs};
use qs_bench::native::{self, NativeArgs};
use qs_bench::plot;
use qs_bench::probe::{self, ProbeArgs};

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
    /// Closed- or open-loop (--rate) load against a running server (memcached, quicksilver, or any
    /// compatible one) over the text, meta, memcached UDP or native protocol: throughput, latency,
    /// server CPU per operation; --search finds the best rate under p99 targets.
    Run(LoadArgs),
    /// quicksilver and memcached side by side: starts both (equal memory and workers, pinned to
    /// the same cores), runs the same matrix against each, stops both, prints a ratio table.
    Compare(CompareArgs),
    /// memtier_benchmark against quicksilver, memcached, Pelikan Segcache and pogocache (when
    /// built), one worker each on the same core, at each pipeline depth: requests/s, p99, CPU
    /// per request; --plot draws the README's picture.
    Memtier(MemtierArgs),
    /// Latency under load: each server's own maximum (closed loop, depth 1), then open-loop
    /// (Poisson) load at fractions of it (50%, 80%, 95%): p50, p99, p99.9 per value size, for
    /// quicksilver, memcached and the peers built here; --plot draws them.
    Latency(LatencyArgs),
    /// Closed-loop load over Quicksilver's native UDP protocol (qs-client, client-assisted
    /// direction): requests per second, server CPU per request and per datagram; with
    /// --echo-probe, against a bare recvmmsg/sendmmsg echo server's CPU per datagram.
    Native(NativeArgs),
    /// The native probe's UDP echo server (started by `native --echo-probe` and `probe`).
    #[command(hide = true)]
    UdpEcho {
        /// One recvfrom and one sendto per datagram instead of recvmmsg/sendmmsg bursts.
        #[arg(long)]
        plain: bool,
        /// Sockets to serve (bursts only), like the server's native ports.
        #[arg(long, default_value_t = 1)]
        sockets: usize,
    },
    /// This machine's limits as references: bare echo servers' CPU per message over loopback
    /// TCP (epoll and io_uring) and UDP (plain and recvmmsg/sendmmsg) at each depth, and DRAM
    /// random-access latency and throughput (run as `taskset -c 1 qs-bench probe`).
    Probe(ProbeArgs),
    /// The scaling plot: requests per second against workers, a panel per workload, from the
    /// JSON `scripts/bench-scaling.py --out` writes.
    ScalingPlot {
        /// The report.
        #[arg(long, default_value = "scaling.json")]
        input: std::path::PathBuf,
        /// The SVG to write.
        #[arg(long, default_value = "scaling.svg")]
        out: std::path::PathBuf,
    },
    /// The hit-ratio plot of replacing a node: the fleet's hit ratio each second, a line per
    /// mode, from the JSON `scripts/bench-warm.py --out` writes.
    HitRatioPlot {
        /// The report.
        #[arg(long, default_value = "warm.json")]
        input: std::path::PathBuf,
        /// The SVG to write.
        #[arg(long, default_value = "warm.svg")]
        out: std::path::PathBuf,
    },
    /// The probe's echo server (started by `probe`; prints its address, runs until killed).
    #[command(hide = true)]
    ProbeEcho {
        /// epoll, uring or uring-multishot.
        #[arg(long, value_enum, default_value = "epoll")]
        io: probe::EchoIo,
        /// What to answer: the bytes received, or END for every line (memcached misses).
        #[arg(long, value_enum, default_value = "echo")]
        answer: probe::Answer,
        /// Port to listen on (0: any free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
}

fn main() {
    match Cli::parse().command {
        Subcommands::ScalingPlot { input, out } => {
            let report = std::fs::read_to_string(&input)
                .map_err(|error| error.to_string())
                .and_then(|text| serde_json::from_str(&text).map_err(|error| error.to_string()));
            let drawn = report.and_then(|report: serde_json::Value| {
                let title = format!("requests/s by workers ({} cores)", report["cores"]);
                plot::scaling(&out, &title, &plot::scaling_panels(&report))
            });
            if let Err(error) = drawn {
                fail("scaling-plot", error);
            }
        }
        Subcommands::HitRatioPlot { input, out } => {
            let report = std::fs::read_to_string(&input)
                .map_err(|error| error.to_string())
                .and_then(|text| serde_json::from_str(&text).map_err(|error| error.to_string()));
            if let Err(error) = report.and_then(|report: serde_json::Value| plot::hit_ratio(&out, &report)) {
                fail("hit-ratio-plot", error);
            }
        }
        Subcommands::Compare(args) => match compare::run(&args) {
            Ok(report) => {
                compare::print(&report);
                print_json(args.json, &report);
            }
            Err(error) => fail("compare", error),
        },
        Subcommands::Memtier(args) => match memtier::run(&args) {
            Ok(report) => {
                memtier::print(&report);
                print_json(args.json, &report);
            }
            Err(error) => fail("memtier", error),
        },
        Subcommands::Latency(args) => match latency::run(&args) {
            Ok(report) => {
                latency::print(&report);
                print_json(args.json, &report);
            }
            Err(error) => fail("latency", error),
        },
        Subcommands::UdpEcho { plain, sockets } => {
            let served = if plain { probe::udp_echo_plain() } else { native::udp_echo_server(sockets) };
            if let Err(error) = served {
                fail("udp-echo", error);
            }
        }
        Subcommands::Native(args) => match native::run(&args) {
            Ok(report) => {
                println!(
                    "native {:?} get={} partitions={} window={} batch={}: {:.0} requests/s  {:.1} requests/datagram  p50 {} us  p99 {} us  p99.9 {} us  hit {:.3}  wrong {}  retransmitted {}  redirected {}",
                    report.dataset,
                    report.get_ratio,
                    report.partitions,
                    report.window,
                    report.batch,
                    report.requests_per_sec,
                    report.requests_per_datagram,
                    report.p50_us,
                    report.p99_us,
                    report.p999_us,
                    report.hit_ratio,
                    report.wrong,
                    report.retransmitted,
                    report.redirected,
                );
                println!(
                    "  server CPU {} ns/request, {} us/datagram; echo {} us/datagram ({} datagrams/s); server/echo datagrams per CPU-second {}",
                    figure(report.server_cpu_ns_per_request, 1),
                    figure(report.server_cpu_us_per_datagram, 3),
                    figure(report.echo_cpu_us_per_datagram, 3),
                    figure(report.echo_datagrams_per_sec, 0),
                    figure(report.server_over_echo, 2),
                );
                print_json(args.json, &report);
            }
            Err(error) => fail("native", error),
        },
        Subcommands::Engine(args) => {
            let report = engine::run(&args);
            print_table(&report);
            print_json(args.json, &report);
        }
        Subcommands::ProbeEcho { io, answer, port } => {
            let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind 127.0.0.1");
            println!("{}", listener.local_addr().expect("bound address"));
            let served = match io {
                probe::EchoIo::Epoll => probe::echo_server(listener, answer),
                probe::EchoIo::Uring => probe::echo_server_uring(listener, answer),
                probe::EchoIo::UringMultishot => probe::echo_server_uring_multishot(listener, answer),
            };
            if let Err(error) = served {
                fail("probe-echo", error);
            }
        }
        Subcommands::Probe(args) => match probe::run(&args) {
            Ok(report) => {
                println!(
                    "loopback TCP echo, {} connections, {}-byte messages:",
                    report.connections, report.message
                );
                for figure in &report.tcp_echo {
                    println!(
                        "  {:<5} depth {:>3}: {:>9.0} messages/s  server CPU {:.3} us/message",
                        format!("{:?}", figure.io).to_lowercase(),
                        figure.depth,
                        figure.messages_per_sec,
                        figure.server_cpu_us_per_message
                    );
                }
                if !report.udp_echo.is_empty() {
                    println!(
                        "loopback UDP echo, {} sockets, {}-byte datagrams:",
                        args.udp_sockets, report.message
                    );
                }
                for figure in &report.udp_echo {
                    println!(
                        "  {:<7} depth {:>3}: {:>9.0} datagrams/s  server CPU {:.3} us/datagram",
                        format!("{:?}", figure.io).to_lowercase(),
                        figure.depth,
                        figure.datagrams_per_sec,
                        figure.server_cpu_us_per_datagram
                    );
                }
                if let Some(dram) = &report.dram {
                    println!(
                        "DRAM random access over {} MiB ({} pages): {:.1} ns dependent, {:.1} ns each with {} in flight",
                        dram.bytes >> 20,
                        dram.pages,
                        dram.dependent_ns,
                        dram.parallel_ns_per_access,
                        dram.chains
                    );
                }
                print_json(args.json, &report);
            }
            Err(error) => fail("probe", error),
        },
        Subcommands::Run(args) if args.search => match load::search(&args) {
            Ok(report) => {
                print_load(&report.closed);
                println!("  p99 target   best ops/s   offered/s   p99");
                for sla in &report.sla {
                    let figure =
                        |value: Option<f64>| value.map_or("-".to_string(), |value| format!("{value:.0}"));
                    println!(
                        "  {:>7} us  {:>11}  {:>10}  {:>5} us",
                        sla.p99_target_us,
                        figure(sla.ops_per_sec),
                        figure(sla.offered_rate),
                        figure(sla.p99_us)
                    );
                }
                if let Some(path) = &args.plot {
                    let curve = plot::Curve::of(&format!("{}", args.server), &report.points);
                    match plot::latency_curves(path, &plot::title(&report.closed), &[curve]) {
                        Ok(()) => println!("  plot: {}", path.display()),
                        Err(error) => eprintln!("qs-bench run: the plot: {error}"),
                    }
                }
                print_json(args.json, &report);
            }
            Err(error) => fail("run", error),
        },
        Subcommands::Run(args) => match load::run(&args) {
            Ok(report) => {
                print_load(&report);
                print_json(args.json, &report);
            }
            Err(error) => fail("run", error),
        },
    }
}

fn print_load(report: &load::LoadReport) {
    let workload = match report.ycsb {
        Some(ycsb) => format!("ycsb-{ycsb:?}").to_lowercase(),
        None => format!("get={}", report.get_ratio),
    };
    println!(
        "{} {:?} {:?} {} {} conns={} depth={}: {:.0} ops/s  p50 {} us  p99 {} us  p99.9 {} us  hit {:.3}  errors {}  wrong {}  stale {}",
        report.server,
        report.protocol,
        report.dataset,
        report.dist,
        workload,
        report.connections,
        report.depth,
        report.ops_per_sec,
        report.p50_us,
        report.p99_us,
        report.p999_us,
        report.hit_ratio,
        report.errors,
        report.wrong_values,
        report.stale_values,
    );
    println!(
        "  server CPU {} us/op  client CPU {:.3} us/op  server RSS {} MB  {} ops/s per GB",
        figure(report.server_cpu_us_per_op, 3),
        report.client_cpu_us_per_op,
        figure(report.server_rss_mb, 1),
        figure(report.ops_per_sec_per_gb, 0),
    );
}

fn print_table(report: &EngineReport) {
    println!(
        "store={:?} mode={:?} dataset={:?} dist={:?} get_ratio={} keys={} batch={} prefetch={:?}",
        report.store,
        report.mode,
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

/// Reports a failed subcommand and exits non-zero.
fn fail(command: &str, error: impl std::fmt::Display) -> ! {
    eprintln!("qs-bench {command}: {error}");
    std::process::exit(1);
}

/// Prints `report` as one JSON line when asked to.
fn print_json(json: bool, report: &impl serde::Serialize) {
    if json {
        println!("{}", serde_json::to_string(report).expect("report serialises"));
    }
}

/// A figure with `digits` decimals, or `?` when it was not measured.
fn figure(value: Option<f64>, digits: usize) -> String {
    value.map_or("?".to_string(), |value| format!("{value:.digits$}"))
}
