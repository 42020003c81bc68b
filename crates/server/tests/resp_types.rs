//! Redis's collections through a real client: redis-py's own API runs a session store, a tag
//! index, a leaderboard and a rate limiter's window (hashes, sets, sorted sets, lists) against
//! redis-server and against quicksilver (one and four workers), and what each run read must be
//! the same.

mod common;

use common::resp::{quicksilver, Redis};

/// Runs interop/redis_py_types.py against the server on `port`: what it read, as JSON.
fn workload(port: u16, server: &str) -> String {
    let script = format!("{}/tests/interop/redis_py_types.py", env!("CARGO_MANIFEST_DIR"));
    let output = std::process::Command::new("/usr/bin/python3")
        .args([&script, &port.to_string()])
        .output()
        .expect("python3 with redis-py (scripts/test.sh installs python3-redis)");
    assert!(
        output.status.success(),
        "redis_py_types.py against {server}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn redis_py_reads_collections_as_against_redis_server() {
    let redis = Redis::start();
    let expected = workload(redis.port, "redis-server");
    for workers in ["1", "4"] {
        let (_server, port) = quicksilver(&["-t", workers]);
        assert_eq!(workload(port, &format!("quicksilver -t {workers}")), expected, "-t {workers}");
    }
}
