//! `qs-bench run` against real memcached (the Debian package scripts/test.sh installs): a
//! short closed-loop and open-loop run, every reply checked, the server's CPU per operation
//! read from /proc.
// Benchmark drivers and report writers read best as one long sequence of steps or rows.
#![allow(clippy::too_many_lines)]

use clap::Parser;
use qs_bench::load::{self, LoadArgs};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Memcached {
    child: Child,
    port: u16,
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn memcached() -> Memcached {
    let port =
        TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port");
    let mut command = Command::new("memcached");
    // TCP and UDP on the same port number (UDP is free when TCP was: a test port is short-lived).
    command.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", &port.to_string(), "-m", "64"]);
    // memcached refuses to run as root without -u.
    if Command::new("id").arg("-u").output().is_ok_and(|out| out.stdout.starts_with(b"0\n")) {
        command.args(["-u", "nobody"]);
    }
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("memcached on PATH (scripts/test.sh installs it)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "memcached did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Memcached { child, port }
}

/// `qs-bench run` options as a person would type them.
fn args(server: &Memcached, extra: &[&str]) -> LoadArgs {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }
    let server_arg = format!("127.0.0.1:{}", server.port);
    let pid = server.child.id().to_string();
    let mut argv =
        vec!["run", "--server", &server_arg, "--server-pid", &pid, "--keys", "2000", "--connections", "4"];
    argv.extend_from_slice(&["--duration", "0.5", "--warmup", "0.2"]);
    argv.extend_from_slice(extra);
    Cli::parse_from(argv).load
}

#[test]
fn a_run_ends_with_nothing_in_flight_so_the_next_run_reads_only_its_own_writes() {
    let server = memcached();
    for _ in 0..3 {
        // Write-heavy and deep: 4 connections x 16 writes in flight when the time is up.
        let writes = load::run(&args(&server, &["--depth", "16", "--get-ratio", "0.1"])).expect("the run");
        assert_eq!(writes.unanswered, 0, "every operation in flight was answered: {writes:?}");
        assert_eq!((writes.wrong_values, writes.stale_values), (0, 0), "{writes:?}");
        // The next run loads the same keys at version 0 and reads the hot ones.
        let reads = load::run(&args(&server, &["--dist", "zipf", "--get-ratio", "0.5"])).expect("the run");
        assert_eq!((reads.wrong_values, reads.stale_values, reads.unanswered), (0, 0, 0), "{reads:?}");
    }
}

#[test]
fn a_closed_loop_run_against_memcached_checks_every_reply() {
    let server = memcached();
    let report = load::run(&args(&server, &["--depth", "4", "--dist", "zipf", "--get-ratio", "0.9"]))
        .expect("the run");
    assert!(report.ops > 100, "{report:?}");
    assert_eq!(report.wrong_values, 0, "{report:?}");
    assert_eq!(report.hit_ratio, 1.0, "every key was loaded first: {report:?}");
    assert!(report.server_cpu_us_per_op.is_some(), "{report:?}");
    assert!(report.p50_us <= report.p99_us && report.p99_us <= report.p999_us, "{report:?}");
}

#[test]
fn an_open_loop_run_against_memcached_delivers_the_offered_rate() {
    let server = memcached();
    let report = load::run(&args(&server, &["--rate", "2000", "--depth", "8"])).expect("the run");
    assert_eq!(report.wrong_values, 0, "{report:?}");
    assert_eq!(report.offered_rate, Some(2000.0));
    // 2000/s is far below what memcached serves: what was offered is what completed.
    assert!((report.ops_per_sec - 2000.0).abs() < 400.0, "{report:?}");
}

#[test]
fn every_protocol_and_ycsb_workload_runs_clean_against_memcached() {
    let server = memcached();
    for extra in [
        &["--protocol", "meta", "--get-ratio", "0.5", "--dist", "zipf", "--depth", "4"][..],
        &["--protocol", "mc-udp", "--get-ratio", "0.5", "--dataset", "xlarge", "--depth", "2"],
        &["--ycsb", "a", "--dataset", "small", "--depth", "4"],
        &["--ycsb", "d", "--protocol", "meta"],
        &["--dist", "sequential", "--get-ratio", "0.5", "--depth", "2"],
        &["--ycsb", "f", "--depth", "4"],
    ] {
        let report = load::run(&args(&server, extra)).expect("the run");
        assert!(report.ops > 100, "{extra:?}: {report:?}");
        assert_eq!(
            (report.errors, report.wrong_values, report.stale_values),
            (0, 0, 0),
            "{extra:?}: {report:?}"
        );
        assert!(report.hit_ratio > 0.99, "{extra:?}: {report:?}");
        assert!(report.client_cpu_us_per_op > 0.0 && report.server_rss_mb.is_some(), "{report:?}");
    }
    let refused = load::run(&args(&server, &["--ycsb", "e"])).expect_err("E has range scans");
    assert!(refused.to_string().contains("range scan"), "{refused}");
}

#[test]
fn a_search_finds_a_rate_under_a_loose_target() {
    let server = memcached();
    let mut options = args(&server, &["--sla-us", "50000"]);
    (options.duration, options.warmup) = (0.2, 0.05);
    let report = load::search(&options).expect("search");
    assert_eq!(report.points.len(), 12);
    assert!(report.points.windows(2).all(|pair| pair[0].offered_rate < pair[1].offered_rate));
    let loose = &report.sla[0];
    assert!(loose.ops_per_sec.is_some_and(|ops| ops > 0.0), "{report:?}");
}
