//! `qs-bench run` against real memcached (the Debian package scripts/test.sh installs): a
//! short closed-loop and open-loop run, every reply checked, the server's CPU per operation
//! read from /proc.

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
    command.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0", "-m", "64"]);
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
fn a_closed_loop_run_against_memcached_checks_every_reply() {
    let server = memcached();
    let report = load::run(&args(&server, &["--depth", "4", "--dist", "zipf", "--get-ratio", "0.9"]))
        .expect("the run");
    assert!(report.ops > 100, "{report:?}");
    assert_eq!(report.wrong, 0, "{report:?}");
    assert_eq!(report.hit_ratio, 1.0, "every key was loaded first: {report:?}");
    assert!(report.server_cpu_us_per_op.is_some(), "{report:?}");
    assert!(report.p50_us <= report.p99_us && report.p99_us <= report.p999_us, "{report:?}");
}

#[test]
fn an_open_loop_run_against_memcached_delivers_the_offered_rate() {
    let server = memcached();
    let report = load::run(&args(&server, &["--rate", "2000", "--depth", "8"])).expect("the run");
    assert_eq!(report.wrong, 0, "{report:?}");
    assert_eq!(report.offered_rate, Some(2000.0));
    // 2000/s is far below what memcached serves: what was offered is what completed.
    assert!((report.ops_per_sec - 2000.0).abs() < 400.0, "{report:?}");
}
