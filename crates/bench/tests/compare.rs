//! `qs-bench compare` end to end: the real qs-bench binary starts the real quicksilver and
//! memcached binaries, runs the quick matrix with short points, and prints the ratio table and
//! a JSON report; the plots are written.
// Benchmark drivers and report writers read best as one long sequence of steps or rows.
#![allow(clippy::too_many_lines)]

use std::path::PathBuf;
use std::process::Command;

/// The quicksilver binary of this build (beside qs-bench), built first when missing.
fn quicksilver() -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_qs-bench"));
    let path = bench.with_file_name("quicksilver");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "-q", "-p", "qs-server", "--bin", "quicksilver"]);
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        assert!(build.status().expect("cargo runs").success(), "building quicksilver");
    }
    path
}

#[test]
fn compare_quick_prints_the_ratio_table_and_json() {
    let plots = std::env::temp_dir().join(format!("qs-compare-test-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_qs-bench"))
        .args([
            "compare",
            "--quick",
            "--duration",
            "0.3",
            "--warmup",
            "0.1",
            "--keys",
            "2000",
            "--memory",
            "64",
        ])
        .args(["--connections", "8", "--json", "--plot"])
        .arg(&plots)
        .arg("--quicksilver")
        .arg(quicksilver())
        .output()
        .expect("qs-bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("ratios are quicksilver / memcached"), "{stdout}");
    assert!(stdout.contains("tiny 95% GET uniform") && stdout.contains("equal offered load"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("a JSON line")).expect("the last line is JSON");
    let rows = json["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{json}");
    for row in rows {
        for server in ["quicksilver", "memcached"] {
            let report = &row[server];
            assert!(report["ops"].as_u64().is_some_and(|ops| ops > 0), "{row}");
            for bad in ["errors", "wrong_values", "stale_values"] {
                assert_eq!(report[bad].as_u64(), Some(0), "{server} {bad}: {row}");
            }
            assert!(report["server_cpu_us_per_op"].as_f64().is_some(), "{row}");
        }
        assert!(row["ops_ratio"].as_f64().is_some_and(f64::is_finite), "{row}");
    }
    assert!(json["memcached_version"].as_str().is_some_and(|v| v.starts_with("memcached 1.")), "{json}");
    let written = json["plots"].as_array().expect("plots");
    assert_eq!(written.len(), 2, "{json}");
    for plot in written {
        let svg = std::fs::read_to_string(plot.as_str().expect("a path")).expect("the plot exists");
        assert!(svg.starts_with("<svg"));
    }
    std::fs::remove_dir_all(&plots).expect("cleaned up");
}

#[test]
fn latency_runs_each_server_at_its_maximum_and_fractions_of_it_and_plots_them() {
    let plot = std::env::temp_dir().join(format!("qs-latency-test-{}.svg", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_qs-bench"))
        .args(["latency", "--sizes", "32,2000", "--fractions", "0.5", "--seconds", "0.3", "--warmup", "0.1"])
        .args(["--keys", "2000", "--memory", "64", "--connections", "8", "--json", "--plot"])
        .arg(&plot)
        .arg("--quicksilver")
        .arg(quicksilver())
        .output()
        .expect("qs-bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let json: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("a JSON line")).expect("the last line is JSON");
    let rows = json["rows"].as_array().expect("rows");
    // Two servers, two sizes, the maximum and one fraction of it.
    assert_eq!(rows.len(), 8, "{json}");
    for row in rows {
        assert_eq!(row["errors"].as_u64(), Some(0), "{row}");
        assert!(row["ops_per_sec"].as_f64().is_some_and(|ops| ops > 0.0), "{row}");
        assert!(row["p99_us"].as_f64().is_some_and(|p99| p99 > 0.0), "{row}");
        let open = row["offered"].as_f64();
        let max = row["max_ops_per_sec"].as_f64().expect("the maximum");
        match open {
            Some(offered) => assert!((offered - max * 0.5).abs() <= 1.0, "half the maximum offered: {row}"),
            None => assert_eq!(row["ops_per_sec"].as_f64(), Some(max), "{row}"),
        }
    }
    let servers: Vec<&str> = rows.iter().filter_map(|row| row["server"].as_str()).collect();
    assert!(servers.contains(&"quicksilver") && servers.contains(&"memcached"), "{json}");
    let svg = std::fs::read_to_string(&plot).expect("the plot exists");
    assert!(svg.starts_with("<svg") && svg.contains("2000-byte values"), "the plot has a panel per size");
    std::fs::remove_file(&plot).expect("cleaned up");
}

/// A quicksilver with its native port on, stopped when dropped.
struct Native(std::process::Child, u16);

impl Drop for Native {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts quicksilver with 4 partitions on native ports BASE..BASE+3 (retrying other bases if
/// one is taken) and waits until its TCP port answers.
fn native_server() -> Native {
    for _ in 0..10 {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let base = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if base > 65000 || (1..4).any(|i| std::net::UdpSocket::bind(("127.0.0.1", base + i)).is_err()) {
            continue;
        }
        let mut child = Command::new(quicksilver())
            .args(["-l", "127.0.0.1", "-p", &tcp.to_string(), "-t", "1", "-m", "64", "--partitions", "4"])
            .args(["--native-port", &base.to_string()])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("quicksilver starts");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if std::net::TcpStream::connect(("127.0.0.1", tcp)).is_ok() {
                return Native(child, base);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("quicksilver with a native port did not start");
}

#[test]
fn run_drives_the_native_protocol_closed_and_open_loop() {
    let server = native_server();
    let address = format!("127.0.0.1:{}", server.1);
    let pid = server.0.id().to_string();
    for extra in [&["--depth", "2"][..], &["--rate", "5000", "--no-load"]] {
        let output = Command::new(env!("CARGO_BIN_EXE_qs-bench"))
            .args([
                "run",
                "--protocol",
                "native",
                "--server",
                &address,
                "--server-pid",
                &pid,
                "--keys",
                "2000",
            ])
            .args(["--duration", "0.5", "--warmup", "0.2", "--quiet", "--json"])
            .args(extra)
            .output()
            .expect("qs-bench runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
        let json: serde_json::Value =
            serde_json::from_str(stdout.lines().last().expect("JSON")).expect("JSON");
        assert!(json["ops"].as_u64().is_some_and(|ops| ops > 500), "{json}");
        assert_eq!(json["wrong_values"].as_u64(), Some(0), "{json}");
        assert_eq!(json["hit_ratio"].as_f64(), Some(1.0), "{json}");
        if extra.contains(&"--rate") {
            // 5000/s is far below what the server does: what was offered is what completed.
            let rate = json["ops_per_sec"].as_f64().expect("rate");
            assert!((rate - 5000.0).abs() < 1000.0, "{json}");
        }
    }
}
