//! Interop with real third-party clients and tools (installed by scripts/test.sh): libmemcached's
//! memcapable conformance checker and its command-line tools, pymemcache's whole client API, and
//! twemproxy (nutcracker) with ketama hashing in front of three quicksilver instances;
//! libmemcached's UDP mode (memccp --udp) and memaslap's UDP load (gets and sets over UDP).

mod common;

use common::ServerProcess;
use std::io::Write;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn run(program: &str, args: &[&str]) -> Output {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (scripts/test.sh installs it): {e}"));
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A file `name` holding `contents` in a fresh directory of its own (for memccp, which names
/// the key after the file); returns the directory (to remove) and the file's path.
fn temp_file(dir_name: &str, name: &str, contents: &[u8]) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("{dir_name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join(name);
    std::fs::File::create(&file).and_then(|mut f| f.write_all(contents)).expect("file");
    (dir, file.to_str().expect("utf-8 path").to_owned())
}

#[test]
fn libmemcached_memcapable_ascii_suite_passes() {
    let server = ServerProcess::quicksilver(&["-t", "2"]);
    let port = server.port.to_string();
    let output = run("memccapable", &["-h", "127.0.0.1", "-p", &port, "-a"]);
    let text = stdout(&output);
    assert!(output.status.success() && text.contains("All tests passed"), "{text}");
}

#[test]
fn libmemcached_tools_copy_read_remove_flush_stat_and_load() {
    let server = ServerProcess::quicksilver(&["-t", "2"]);
    let servers = format!("--servers=127.0.0.1:{}", server.port);
    let (dir, file) = temp_file("qs-interop", "greeting.txt", b"hello from memccp\n");

    let copied = run("memccp", &[&servers, &file]);
    assert!(copied.status.success(), "memccp: {copied:?}");
    let read = run("memccat", &[&servers, "greeting.txt"]);
    assert!(stdout(&read).starts_with("hello from memccp\n"), "memccat: {read:?}");

    let removed = run("memcrm", &[&servers, "greeting.txt"]);
    assert!(removed.status.success(), "memcrm: {removed:?}");
    let gone = run("memccat", &[&servers, "greeting.txt"]);
    assert!(!gone.status.success() || stdout(&gone).is_empty(), "still there after memcrm");

    run("memccp", &[&servers, &file]);
    let flushed = run("memcflush", &[&servers]);
    assert!(flushed.status.success(), "memcflush: {flushed:?}");
    let gone = run("memccat", &[&servers, "greeting.txt"]);
    assert!(!gone.status.success() || stdout(&gone).is_empty(), "still there after memcflush");

    let stats = run("memcstat", &[&servers]);
    let text = stdout(&stats);
    assert!(text.contains("curr_connections") && text.contains("get_hits"), "{text}");

    let load = run("memcslap", &[&servers, "--concurrency=4", "--execute-number=500", "--flush"]);
    assert!(load.status.success(), "memcslap: {}", String::from_utf8_lossy(&load.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn libmemcached_and_memaslap_over_udp() {
    let server = ServerProcess::quicksilver_udp_same_port(&["-t", "2"]);
    let servers = format!("--servers=127.0.0.1:{}", server.port);
    let (dir, file) = temp_file("qs-interop-udp", "over-udp.txt", b"sent by datagram\n");
    // libmemcached's UDP mode sends sets without waiting for replies; read it back over TCP.
    let copied = run("memccp", &["--udp", &servers, &file]);
    assert!(copied.status.success(), "memccp --udp: {copied:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let read = run("memccat", &[&servers, "over-udp.txt"]);
        if stdout(&read).starts_with("sent by datagram\n") {
            break;
        }
        assert!(Instant::now() < deadline, "the UDP set never arrived: {read:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // memaslap: 90% gets, 10% sets over UDP, for two seconds; it counts lost, reordered and
    // timed-out datagrams and misses.
    let target = format!("127.0.0.1:{}", server.port);
    let load = run("memcaslap", &["-s", &target, "-U", "-t", "2s", "-T", "1", "-c", "4"]);
    let text = stdout(&load);
    let figure = |name: &str| -> u64 {
        let line =
            text.lines().find(|line| line.starts_with(name)).unwrap_or_else(|| panic!("{name}? {text}"));
        line.rsplit(' ').next().and_then(|n| n.trim().parse().ok()).unwrap_or_else(|| panic!("{line}"))
    };
    assert!(figure("cmd_get:") > 1000, "{text}");
    for name in ["get_misses:", "packet_disorder:", "packet_drop:", "udp_timeout:"] {
        assert_eq!(figure(name), 0, "{name} {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pymemcache_whole_client_api() {
    let server = ServerProcess::quicksilver(&["-t", "2"]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/pymemcache_api.py");
    // The first Python that has pymemcache (a pyenv python may shadow Debian's).
    let python = ["python3", "/usr/bin/python3"]
        .into_iter()
        .find(|python| run(python, &["-c", "import pymemcache"]).status.success())
        .expect("pymemcache is not installed (scripts/test.sh installs it)");
    let output = run(python, &[script, &server.port.to_string()]);
    assert!(output.status.success(), "{}{}", stdout(&output), String::from_utf8_lossy(&output.stderr));
}

/// A nutcracker process, stopped when dropped.
struct Twemproxy(std::process::Child);

impl Drop for Twemproxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port")
}

/// Starts nutcracker with ketama over `servers`; `None` if it exits (a port was taken).
fn start_twemproxy(servers: &[ServerProcess], dir: &std::path::Path) -> Option<(Twemproxy, common::Client)> {
    let (proxy_port, stats_port) = (free_port(), free_port());
    let mut config = format!(
        "quicksilver:\n  listen: 127.0.0.1:{proxy_port}\n  hash: md5\n  distribution: ketama\n  \
         timeout: 4000\n  auto_eject_hosts: false\n  servers:\n"
    );
    for server in servers {
        config.push_str(&format!("   - 127.0.0.1:{}:1\n", server.port));
    }
    let config_path = dir.join("nutcracker.yml");
    std::fs::write(&config_path, config).expect("config");
    let child = Command::new("nutcracker")
        .args(["-c", config_path.to_str().expect("path"), "-s", &stats_port.to_string()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("cannot run nutcracker (scripts/test.sh installs it)");
    let mut proxy = Twemproxy(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(stream) = std::net::TcpStream::connect(("127.0.0.1", proxy_port)) {
            stream.set_read_timeout(Some(common::REPLY_TIMEOUT)).expect("timeout");
            return Some((proxy, common::Client::from_stream(stream)));
        }
        if let Ok(Some(_)) = proxy.0.try_wait() {
            return None;
        }
        assert!(Instant::now() < deadline, "nutcracker did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn twemproxy_with_ketama_spreads_keys_over_three_instances() {
    let servers: Vec<ServerProcess> = (0..3).map(|_| ServerProcess::quicksilver(&["-t", "1"])).collect();
    let dir = std::env::temp_dir().join(format!("qs-twemproxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // Ports are picked free, then bound by nutcracker: retry if another test took one first.
    let (_proxy, mut client) = (0..5)
        .find_map(|_| start_twemproxy(&servers, &dir))
        .expect("nutcracker did not start (scripts/test.sh installs it)");
    const KEYS: usize = 600;
    for key in 0..KEYS {
        client.send(
            format!("set key:{key} 0 0 {}\r\nvalue:{key}\r\n", format!("value:{key}").len()).as_bytes(),
        );
        assert_eq!(client.read_until(b"\r\n"), b"STORED\r\n");
    }
    for key in 0..KEYS {
        client.send(format!("get key:{key}\r\n").as_bytes());
        let reply = client.read_until(b"END\r\n");
        let value = format!("value:{key}");
        assert!(String::from_utf8_lossy(&reply).contains(&value), "key:{key} through the proxy");
    }
    let mut total = 0;
    let mut spread = Vec::new();
    for server in &servers {
        let mut direct = server.connect();
        let mut held = 0;
        for key in 0..KEYS {
            direct.send(format!("get key:{key}\r\n").as_bytes());
            if direct.read_until(b"END\r\n").starts_with(b"VALUE") {
                held += 1;
            }
        }
        spread.push(held);
        total += held;
    }
    // Ketama places keys by hashes of "host:port", so the split varies with the ports.
    assert!(spread.iter().all(|&held| held > 0), "keys per instance: {spread:?}");
    assert_eq!(total, KEYS, "every key is on exactly one instance");
    let _ = std::fs::remove_dir_all(&dir);
}
