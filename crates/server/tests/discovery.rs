//! ElastiCache-style cluster discovery (`-o cluster_config=FILE`): `config get cluster` in
//! ElastiCache's format, its version growing on SIGHUP or `config reload cluster` when the fleet
//! file changed, memcached's `ERROR` without a fleet file, and a real discovery client
//! (PyPI's elasticache-pyclient, in the virtual environment scripts/test.sh makes) following
//! the fleet as a node is added and removed.

mod common;

use common::{Client, ServerProcess};
use std::process::Command;

/// A fleet file of its own for test `name`.
fn fleet_file(name: &str, text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("qs-fleet-{name}-{}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

fn ask(client: &mut Client, line: &[u8]) -> String {
    String::from_utf8(client.call(line)).unwrap()
}

#[test]
fn config_get_cluster_answers_as_elasticache_does() {
    let path = fleet_file("format", "cache-1.example|10.0.0.1|11211\n127.0.0.1:11212\n");
    let option = format!("cluster_config={}", path.display());
    let server = ServerProcess::quicksilver(&["-o", &option]);
    let mut client = server.connect();
    let body = "1\ncache-1.example|10.0.0.1|11211 127.0.0.1|127.0.0.1|11212\n";
    let expected = format!("CONFIG cluster 0 {}\r\n{body}\r\nEND\r\n", body.len());
    assert_eq!(ask(&mut client, b"config get cluster\r\n"), expected);
    // Discovery clients parse the version as a plain release number.
    assert_eq!(ask(&mut client, b"version\r\n"), "VERSION 1.6.45\r\n");
    // The same file again: the same version.
    assert_eq!(ask(&mut client, b"config reload cluster\r\n"), "OK\r\n");
    assert!(ask(&mut client, b"config get cluster\r\n").contains("\r\n1\n"));
    // SIGHUP after a change: version 2.
    std::fs::write(&path, "127.0.0.1:11212\n").unwrap();
    // SAFETY: kill with a child pid we own.
    unsafe { libc::kill(server.pid() as i32, libc::SIGHUP) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !ask(&mut client, b"config get cluster\r\n").contains("\r\n2\n127.0.0.1|127.0.0.1|11212\n\r\nEND") {
        assert!(std::time::Instant::now() < deadline, "SIGHUP did not reload the fleet");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A broken file is refused and the fleet kept.
    std::fs::write(&path, "not a node\n").unwrap();
    assert!(ask(&mut client, b"config reload cluster\r\n").starts_with("SERVER_ERROR cluster_config"));
    assert!(ask(&mut client, b"config get cluster\r\n").contains("\r\n2\n"));
    // Other config forms are unknown commands, as in memcached.
    assert_eq!(ask(&mut client, b"config get other\r\n"), "ERROR\r\n");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn without_a_fleet_file_config_is_an_unknown_command_as_in_memcached() {
    let quicksilver = ServerProcess::quicksilver(&[]);
    let memcached = ServerProcess::memcached(&[]);
    for line in [&b"config get cluster\r\n"[..], b"config reload cluster\r\n"] {
        let ours = quicksilver.connect().call(line);
        let theirs = memcached.connect().call(line);
        assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(line));
    }
    // SIGHUP is ignored, as memcached ignores it outside its proxy mode.
    // SAFETY: kill with a child pid we own.
    unsafe { libc::kill(quicksilver.pid() as i32, libc::SIGHUP) };
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(quicksilver.connect().call(b"version\r\n"), b"VERSION 1.6.45-quicksilver\r\n");
}

#[test]
fn a_real_discovery_client_follows_the_fleet() {
    let python = std::env::var("QS_DISCOVERY_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/quicksilver/venv-discovery/bin/python")
    });
    // Each node on a loopback address of its own: the client's hash ring tells nodes apart
    // by IP (ElastiCache gives each node its own).
    let nodes: Vec<ServerProcess> =
        ["127.0.0.2", "127.0.0.3"].iter().map(|ip| ServerProcess::quicksilver(&["-l", ip])).collect();
    let path = fleet_file("client", "");
    let option = format!("cluster_config={}", path.display());
    let endpoint = ServerProcess::quicksilver(&["-o", &option]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/elasticache_discovery.py");
    let output = Command::new(&python)
        .arg(script)
        .args([endpoint.port.to_string(), endpoint.pid().to_string(), path.display().to_string()])
        .arg(format!("127.0.0.1:{}", endpoint.port))
        .args(["127.0.0.2", "127.0.0.3"].iter().zip(&nodes).map(|(ip, node)| format!("{ip}:{}", node.port)))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python} (scripts/test.sh makes the environment): {e}"));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}\n{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(text.matches("ok").count(), 5, "{text}");
    let _ = std::fs::remove_file(&path);
}
