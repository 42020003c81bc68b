//! The admin HTTP listener (`-o metrics_listen`, `-o metrics_port`): `/metrics` with
//! memcached_exporter's names and quicksilver's latency histograms, `/healthz`, `/readyz`
//! (not ready while a memory file loads), `stats latency`, Basic credentials under -S, TLS
//! under -Z, and scrapers that cannot hold more than their bound.
//! Prometheus itself, promtool and the real exporter judge it in scripts/test-metrics.py.

mod common;

use common::{free_port, Client, MemoryFile, ServerProcess};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// An HTTP reply: status, headers (lower-case names) and body.
struct Reply {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

/// Sends `request` (a whole HTTP request) over `io` and reads the reply to the end.
fn exchange(mut io: impl Read + Write, request: &str) -> Reply {
    io.write_all(request.as_bytes()).expect("send");
    let mut raw = Vec::new();
    let _ = io.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status =
        lines.next().and_then(|line| line.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.to_string()))
        .collect();
    Reply { status, headers, body: body.to_string() }
}

/// `METHOD path` on 127.0.0.1:`port`, with `extra` header lines.
fn http(port: u16, method: &str, path: &str, extra: &str) -> Reply {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics port");
    stream.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    exchange(stream, &format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n"))
}

fn get(port: u16, path: &str) -> Reply {
    http(port, "GET", path, "")
}

/// Waits until the listener answers `/healthz`.
fn wait_healthy(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() && get(port, "/healthz").status == 200 {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the metrics listener did not come up");
}

/// The value of the sample `series` (name and labels exactly as written) in an exposition.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// quicksilver with its admin listener on a free port, plus `args`; (server, metrics port).
fn with_metrics(args: &[&str]) -> (ServerProcess, u16) {
    let port = free_port();
    let listen = format!("metrics_listen=127.0.0.1:{port}");
    let mut all = vec!["-o", &listen];
    all.extend_from_slice(args);
    let server = ServerProcess::quicksilver(&all);
    wait_healthy(port);
    (server, port)
}

fn load(client: &mut Client, sets: usize, hits: usize, misses: usize) {
    for i in 0..sets {
        assert_eq!(client.call(format!("set key{i} 0 0 5\r\nvalue\r\n").as_bytes()), b"STORED\r\n");
    }
    for i in 0..hits {
        client.call(format!("get key{}\r\n", i % sets).as_bytes());
    }
    for i in 0..misses {
        assert_eq!(client.call(format!("get nokey{i}\r\n").as_bytes()), b"END\r\n");
    }
}

#[test]
fn metrics_carry_the_exporters_names_and_count_what_was_sent() {
    let (server, port) = with_metrics(&["-t", "2"]);
    let mut client = server.connect();
    load(&mut client, 30, 70, 25);
    let reply = get(port, "/metrics");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    let body = &reply.body;
    let commands = |command: &str, status: &str| {
        sample(body, &format!("memcached_commands_total{{command=\"{command}\",status=\"{status}\"}}"))
    };
    assert_eq!(commands("get", "hit"), Some(70.0), "{body}");
    assert_eq!(commands("get", "miss"), Some(25.0));
    assert_eq!(commands("set", "hit"), Some(30.0));
    assert_eq!(sample(body, "memcached_current_items"), Some(30.0));
    assert_eq!(sample(body, "memcached_up"), Some(1.0));
    assert_eq!(sample(body, "memcached_limit_bytes"), Some(64.0 * 1024.0 * 1024.0));
    assert_eq!(sample(body, "memcached_max_connections"), Some(1024.0));
    assert_eq!(sample(body, "quicksilver_ready"), Some(1.0));
    for line in ["# TYPE memcached_commands_total counter", "# TYPE memcached_current_items gauge"] {
        assert!(body.lines().any(|l| l == line), "{line} missing");
    }
    // The latency histograms: one request per get, cumulative buckets ending at +Inf.
    let gets = "quicksilver_request_duration_seconds_count{family=\"get\"}";
    assert_eq!(sample(body, gets), Some(95.0), "{body}");
    let inf = "quicksilver_request_duration_seconds_bucket{family=\"get\",le=\"+Inf\"}";
    assert_eq!(sample(body, inf), Some(95.0));
    assert_eq!(sample(body, "quicksilver_request_read_to_reply_seconds_count{family=\"set\"}"), Some(30.0));
    let sum = sample(body, "quicksilver_request_duration_seconds_sum{family=\"get\"}").unwrap();
    assert!(sum > 0.0 && sum < 95.0, "{sum}");
    let workers: f64 = (0..2)
        .filter_map(|w| sample(body, &format!("quicksilver_worker_requests_total{{worker=\"{w}\"}}")))
        .sum();
    assert!(workers >= 125.0, "{workers}");
}

#[test]
fn stats_latency_shows_the_histograms_metrics_shows() {
    let (server, port) = with_metrics(&[]);
    let mut client = server.connect();
    load(&mut client, 5, 12, 3);
    let stats: HashMap<String, String> = common::stats(&mut client, "latency").into_iter().collect();
    assert_eq!(stats["get:service:count"], "15");
    assert_eq!(stats["set:read_to_reply:count"], "5");
    let p99: u64 = stats["get:service:p99_us"].parse().unwrap();
    assert!(p99.is_power_of_two(), "{p99}");
    assert_eq!(stats[&format!("get:service:le_{p99}us")], "15");
    let body = get(port, "/metrics").body;
    let bucket =
        format!("quicksilver_request_duration_seconds_bucket{{family=\"get\",le=\"{}\"}}", p99 as f64 * 1e-6);
    assert_eq!(sample(&body, &bucket), Some(15.0), "{bucket}");
}

#[test]
fn health_readiness_methods_paths_and_openmetrics() {
    let (_server, port) = with_metrics(&[]);
    assert_eq!(get(port, "/healthz").status, 200);
    let ready = get(port, "/readyz");
    assert_eq!((ready.status, ready.body.as_str()), (200, "ready\n"));
    assert_eq!(get(port, "/nothing").status, 404);
    let post = http(port, "POST", "/metrics", "Content-Length: 0\r\n");
    assert_eq!(post.status, 405);
    assert_eq!(post.headers["allow"], "GET, HEAD");
    let head = http(port, "HEAD", "/metrics", "");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert!(head.headers["content-length"].parse::<usize>().unwrap() > 1000);
    let open = http(port, "GET", "/metrics?x=1", "Accept: application/openmetrics-text;version=1.0.0\r\n");
    assert_eq!(open.headers["content-type"], "application/openmetrics-text; version=1.0.0; charset=utf-8");
    assert!(open.body.ends_with("# EOF\n"));
    // OpenMetrics: a counter's family drops _total; the exporter's without it are `unknown`.
    assert!(open.body.contains("# TYPE memcached_commands counter\n"));
    assert!(open.body.contains("# TYPE memcached_uptime_seconds unknown\n"));
    let garbage = {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        exchange(stream, "\x01\x02 nonsense\r\n\r\n")
    };
    assert_eq!(garbage.status, 400);
}

#[test]
fn scrapers_are_bounded_and_cost_nothing_while_they_wait() {
    let (server, port) = with_metrics(&[]);
    // A head past its limit is refused.
    let big = format!("X-Big: {}\r\n", "a".repeat(9000));
    assert_eq!(http(port, "GET", "/metrics", &big).status, 431);
    // Silent connections past the limit (16): each new one takes the place of the oldest
    // silent one, so the first are closed, and health probes are answered all the while.
    let mut silent: Vec<TcpStream> =
        (0..40).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    for probe in 0..50 {
        let path = if probe % 2 == 0 { "/healthz" } else { "/readyz" };
        assert_eq!(get(port, path).status, 200, "probe {probe} among silent connections");
    }
    let mut byte = [0u8; 1];
    silent[0].set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    assert_eq!(silent[0].read(&mut byte).unwrap_or(0), 0, "the oldest silent connection is closed");
    let silent: Vec<TcpStream> = silent.split_off(24);
    // The waiting ones cost no CPU, and clients are served meanwhile.
    let before = common::cpu_ticks(server.pid());
    std::thread::sleep(Duration::from_millis(1000));
    let mut client = server.connect();
    assert_eq!(client.call(b"set a 0 0 1\r\nx\r\n"), b"STORED\r\n");
    assert!(common::cpu_ticks(server.pid()) - before <= 5, "silent scrapers cost CPU");
    drop(silent);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(get(port, "/metrics").status, 200);
}

#[test]
fn a_slow_scraper_is_cut_off_at_the_deadline() {
    let (_server, port) = with_metrics(&[]);
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let started = Instant::now();
    slow.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    let took = started.elapsed();
    assert!(rest.is_empty(), "{rest:?}");
    assert!(took >= Duration::from_secs(9) && took < Duration::from_secs(15), "{took:?}");
}

#[test]
fn readiness_waits_for_the_memory_file() {
    let file = MemoryFile::new("readyz");
    let port = free_port();
    let listen = format!("metrics_listen=127.0.0.1:{port}");
    let args = ["-m", "512", "-e", file.arg(), "-o", &listen];
    {
        let server = ServerProcess::quicksilver(&args);
        let mut client = server.connect();
        let value = vec![b'v'; 1000];
        for chunk in 0..150 {
            let mut batch = Vec::new();
            for i in chunk * 1000..(chunk + 1) * 1000 {
                batch.extend_from_slice(format!("set k{i} 0 0 1000 noreply\r\n").as_bytes());
                batch.extend_from_slice(&value);
                batch.extend_from_slice(b"\r\n");
            }
            assert_eq!(client.call(&batch), b"");
        }
        drop(server); // SIGKILL: the memory file holds the items
    }
    // Probed by the loop below: it must not wait for the data port.
    let server = ServerProcess::quicksilver_probed(&args, |_| true);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let status = TcpStream::connect(("127.0.0.1", port)).map(|stream| {
            stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            exchange(stream, "GET /readyz HTTP/1.1\r\n\r\n").status
        });
        if let Ok(status) = status {
            if seen.last() != Some(&status) {
                seen.push(status);
            }
            if status == 200 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(seen, [503, 200], "not ready while loading, then ready");
    let body = get(port, "/metrics").body;
    assert_eq!(sample(&body, "memcached_current_items"), Some(150_000.0));
    assert_eq!(sample(&body, "quicksilver_restart_warm"), Some(1.0));
    assert_eq!(sample(&body, "quicksilver_restart_items"), Some(150_000.0));
    assert!(sample(&body, "quicksilver_restart_load_seconds").is_some_and(|secs| secs > 0.0));
    drop(server);
}

#[test]
fn under_sasl_metrics_ask_for_credentials() {
    let pwdb = std::env::temp_dir().join(format!("qs-metrics-pwdb-{}", std::process::id()));
    std::fs::write(&pwdb, "scraper:secret\n").unwrap();
    let port = free_port();
    let listen = format!("metrics_listen=127.0.0.1:{port}");
    let _server = ServerProcess::quicksilver_sasl(&pwdb, &["-o", &listen]);
    wait_healthy(port);
    let refused = get(port, "/metrics");
    assert_eq!(refused.status, 401);
    assert_eq!(refused.headers["www-authenticate"], "Basic realm=\"quicksilver\"");
    assert!(!refused.body.contains("memcached_"));
    // scraper:wrong, then scraper:secret.
    assert_eq!(http(port, "GET", "/metrics", "Authorization: Basic c2NyYXBlcjp3cm9uZw==\r\n").status, 401);
    let admitted = http(port, "GET", "/metrics", "Authorization: Basic c2NyYXBlcjpzZWNyZXQ=\r\n");
    assert_eq!(admitted.status, 200);
    assert_eq!(sample(&admitted.body, "memcached_up"), Some(1.0));
    assert_eq!(get(port, "/readyz").status, 200);
    let _ = std::fs::remove_file(&pwdb);
}

#[test]
fn under_tls_the_listener_speaks_tls() {
    let port = free_port();
    let listen = format!("metrics_listen=127.0.0.1:{port}");
    let cert = format!("ssl_chain_cert={}", common::tls::cert_path("server.pem"));
    let key = format!("ssl_key={}", common::tls::cert_path("server.key"));
    let _server = ServerProcess::quicksilver_probed(&["-Z", "-o", &cert, "-o", &key, "-o", &listen], |p| {
        common::tls::connect(p).is_ok()
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let stream = loop {
        match common::tls::connect(port) {
            Ok(stream) => break stream,
            Err(error) if Instant::now() > deadline => panic!("no TLS on the metrics port: {error}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let reply = exchange(stream, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(reply.status, 200);
    assert_eq!(sample(&reply.body, "memcached_up"), Some(1.0));
    assert!(reply.body.contains("quicksilver_tls_handshake_errors_total"));
    // The probe's handshake on the data port, at least.
    assert!(sample(&reply.body, "quicksilver_tls_handshakes_total") >= Some(1.0), "{}", reply.body);
    // Plaintext gets no answer.
    let plain = TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    assert_ne!(exchange(plain, "GET /healthz HTTP/1.1\r\n\r\n").status, 200);
}

#[test]
fn metrics_port_follows_the_first_listener() {
    let port = free_port();
    let option = format!("metrics_port={port}");
    let _server = ServerProcess::quicksilver(&["-o", &option]);
    wait_healthy(port);
    assert_eq!(get(port, "/healthz").body, "ok\n");
}

#[test]
fn a_port_in_use_is_refused_at_start() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().port();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver"))
        .args(["-p", "0", "-l", "127.0.0.1", "-o", &format!("metrics_listen=127.0.0.1:{taken}")])
        .output()
        .expect("runs");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("metrics listener"), "{output:?}");
}

#[test]
fn every_protocol_is_timed_in_its_family() {
    let port = free_port();
    let listen = format!("metrics_listen=127.0.0.1:{port}");
    let (server, resp_port) = common::resp::quicksilver(&["-o", &listen]);
    wait_healthy(port);
    let mut resp = common::resp::connect(resp_port);
    for _ in 0..3 {
        common::resp::call(&mut resp, &common::resp::frame(&["SET", "r", "v"]));
    }
    for _ in 0..4 {
        common::resp::call(&mut resp, &common::resp::frame(&["GET", "r"]));
    }
    common::resp::call(&mut resp, &common::resp::frame(&["INCR", "n"]));
    let mut client = server.connect();
    client.call(b"ms m 1\r\nx\r\nmg m v\r\nmg m v\r\nma n2 N0\r\nmd m\r\n");
    // A binary GET of a missing key.
    let mut get = vec![0x80, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    get.push(b'b');
    let mut binary = server.connect();
    binary.send(&get);
    let mut reply = [0u8; 24];
    binary.stream.read_exact(&mut reply).unwrap();
    assert_eq!(reply[0], 0x81);
    let body = get_body(port);
    let count = |family: &str| {
        sample(&body, &format!("quicksilver_request_duration_seconds_count{{family=\"{family}\"}}"))
    };
    assert_eq!(count("redis_set"), Some(3.0), "{body}");
    assert_eq!(count("redis_get"), Some(4.0));
    // The helper's PINGs while the server started, then INCR.
    assert!(count("redis_other") >= Some(1.0));
    assert_eq!(count("meta_set"), Some(1.0));
    assert_eq!(count("meta_get"), Some(2.0));
    assert_eq!(count("meta_arith"), Some(1.0));
    assert_eq!(count("meta_delete"), Some(1.0));
    assert_eq!(count("binary"), Some(1.0));
}

fn get_body(port: u16) -> String {
    get(port, "/metrics").body
}

#[test]
fn the_flash_tier_shows_in_the_exporters_extstore_series() {
    let dir = std::env::temp_dir().join(format!("qs-metrics-flash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ext = format!("ext_path={}:64m", dir.join("flash").display());
    let (server, port) = with_metrics(&["-m", "64", "-o", &ext]);
    let mut client = server.connect();
    assert_eq!(client.call(b"set k 0 0 1\r\nx\r\n"), b"STORED\r\n");
    let body = get_body(port);
    assert_eq!(sample(&body, "memcached_extstore_bytes_limit"), Some(64.0 * 1024.0 * 1024.0), "{body}");
    for name in ["memcached_extstore_objects_read_total", "memcached_extstore_bytes_written_total"] {
        assert!(sample(&body, name).is_some(), "{name}");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
