//! End-to-end behaviour of the real binary over sockets: pipelines, request order across
//! workers, large and split values, limits and bad input (each must leave other clients and
//! stored data untouched), memory bounds, and shutdown.

mod common;

use common::{reads_never_go_back, rss_bytes, server_with_canary, set, stat, stats, Client, ServerProcess};
use std::io::Write;
use std::time::{Duration, Instant};

fn get(client: &mut Client, key: &str) -> Option<Vec<u8>> {
    client.send(format!("get {key}\r\n").as_bytes());
    let reply = client.read_until(b"END\r\n");
    if reply == b"END\r\n" {
        return None;
    }
    let header_end = reply.windows(2).position(|w| w == b"\r\n").expect("a VALUE line");
    Some(reply[header_end + 2..reply.len() - 7].to_vec())
}

/// Other clients and stored data are unaffected: a canary key still reads back.
fn assert_healthy(server: &ServerProcess) {
    let mut client = server.connect();
    assert_eq!(get(&mut client, "canary").as_deref(), Some(&b"alive"[..]), "canary lost");
    set(&mut client, "canary", b"alive");
}

#[test]
fn deep_pipelines_across_partitions_answer_in_order_and_read_their_writes() {
    for access in ["crew", "erew"] {
        let server = ServerProcess::quicksilver(&["-t", "2", "--access", access]);
        let mut client = server.connect();
        // One write: 2000 requests, each key written then read back at once, three rounds.
        let mut pipeline = Vec::new();
        let mut expected = Vec::new();
        for round in 0..3 {
            for key in 0..200 {
                let value = format!("v{round}-{key}");
                pipeline.extend(
                    format!("set k{key} {round} 0 {}\r\n{value}\r\nget k{key}\r\n", value.len()).bytes(),
                );
                expected.extend(b"STORED\r\n");
                expected
                    .extend(format!("VALUE k{key} {round} {}\r\n{value}\r\nEND\r\n", value.len()).bytes());
            }
        }
        let keys: Vec<String> = (0..200).map(|k| format!("k{k}")).collect();
        pipeline.extend(format!("get {}\r\nmn\r\n", keys.join(" ")).bytes());
        for key in 0..200 {
            let value = format!("v2-{key}");
            expected.extend(format!("VALUE k{key} 2 {}\r\n{value}\r\n", value.len()).bytes());
        }
        expected.extend(b"END\r\nMN\r\n");
        client.send(&pipeline);
        let reply = client.read_until(b"MN\r\n");
        assert!(reply == expected, "{access}: replies out of order or wrong");
        let forwarded = stat(&mut client, "requests_forwarded");
        assert!(forwarded > 0, "{access}: nothing was handed to the other worker");
        // Handed over in batches, each at most one wake-up of a sleeping owner.
        let batches = stat(&mut client, "forward_batches");
        assert!(batches > 0 && batches <= forwarded, "{access}: {batches} batches for {forwarded} requests");
        let wakeups = stat(&mut client, "worker_wakeups");
        assert!(
            wakeups <= 2 * batches,
            "{access}: {wakeups} wake-ups for {batches} batches and their replies"
        );
    }
}

#[test]
fn many_connections_asking_at_once_each_get_their_own_answers() {
    // Every connection sends before any reads, so the server finds many ready at once and
    // reads them all before running any (its cross-connection prefetch); some requests put
    // no key second on their line (`gat`), some are garbage.
    for workers in ["1", "2"] {
        let server = ServerProcess::quicksilver(&["-t", workers]);
        let mut clients: Vec<Client> = (0..48).map(|_| server.connect()).collect();
        for (i, client) in clients.iter_mut().enumerate() {
            set(client, &format!("own{i}"), format!("v0-{i}").as_bytes());
        }
        for round in 1..12 {
            let mut expected = Vec::new();
            for (i, client) in clients.iter_mut().enumerate() {
                let key = format!("own{i}");
                let (request, reply) = match (round + i) % 6 {
                    0 => {
                        let value = format!("v{round}-{i}");
                        (
                            format!("set {key} {round} 0 {}\r\n{value}\r\nget {key}\r\n", value.len()),
                            format!("STORED\r\nVALUE {key} {round} {}\r\n{value}\r\nEND\r\n", value.len()),
                        )
                    }
                    1 => (format!("gat 0 {key}\r\n"), String::new()),
                    2 => (format!("mg {key} k O{round}\r\n"), format!("HD k{key} O{round}\r\n")),
                    3 => (format!("get nobody{i}\r\n"), "END\r\n".to_string()),
                    4 => ("bogus words\r\n".to_string(), "ERROR\r\n".to_string()),
                    _ => (
                        format!("incr {key} 1\r\n"),
                        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n".to_string(),
                    ),
                };
                client.send(request.as_bytes());
                expected.push(reply);
            }
            for (i, client) in clients.iter_mut().enumerate() {
                let key = format!("own{i}");
                if expected[i].is_empty() {
                    // gat: the value last stored under the connection's own key.
                    let reply = client.read_until(b"END\r\n");
                    let text = String::from_utf8_lossy(&reply);
                    assert!(text.starts_with(&format!("VALUE {key} ")), "{workers} workers, {key}: {text}");
                    assert!(text.contains(&format!("-{i}\r\n")), "{workers} workers, {key}: {text}");
                } else {
                    let suffix: &[u8] = if expected[i].ends_with("END\r\n") { b"END\r\n" } else { b"\r\n" };
                    let reply = client.read_until(suffix);
                    assert_eq!(String::from_utf8_lossy(&reply), expected[i], "{workers} workers, {key}");
                }
            }
        }
    }
}

#[test]
fn a_value_split_over_many_reads_and_binary_bytes_round_trip() {
    let server = ServerProcess::quicksilver(&["-t", "2"]);
    let mut client = server.connect();
    let value: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 256) as u8).collect();
    client.send(format!("set big 0 0 {}\r\n", value.len()).as_bytes());
    for chunk in value.chunks(997) {
        client.stream.write_all(chunk).expect("send");
        client.stream.flush().expect("flush");
    }
    client.send(b"\r\n");
    assert_eq!(client.read_until(b"\r\n"), b"STORED\r\n");
    assert_eq!(get(&mut client, "big").as_deref(), Some(&value[..]));
    // The largest value -I allows, and one byte more.
    let largest = vec![b'z'; (1 << 20) - 100];
    set(&mut client, "largest", &largest);
    assert_eq!(get(&mut client, "largest").map(|v| v.len()), Some(largest.len()));
}

#[test]
fn the_connection_limit_refuses_like_memcached() {
    let server = server_with_canary(&["-t", "2", "-c", "4"]);
    // Earlier connections close asynchronously: wait until only this one is counted.
    let mut first = server.connect();
    let wait_for = |client: &mut Client, open: u64| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while stat(client, "curr_connections") != open {
            assert!(Instant::now() < deadline, "curr_connections never reached {open}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    wait_for(&mut first, 1);
    let held: Vec<Client> = (0..3).map(|_| server.connect()).collect();
    wait_for(&mut first, 4);
    let mut refused = server.connect();
    assert_eq!(refused.read_to_close(), b"ERROR Too many open connections\r\n");
    drop(held);
    wait_for(&mut first, 1);
    assert!(stat(&mut first, "rejected_connections") >= 1);
    drop(first);
    assert_healthy(&server);
}

#[test]
fn an_over_long_line_closes_only_that_connection() {
    let server = server_with_canary(&["-t", "2"]);
    let mut client = server.connect();
    client.send(&vec![b'x'; 5000]);
    assert_eq!(client.read_to_close(), b"");
    assert_healthy(&server);
}

#[test]
fn binary_garbage_gets_errors_and_harms_no_one() {
    let server = server_with_canary(&["-t", "2"]);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..20 {
        let mut client = server.connect();
        let garbage: Vec<u8> = (0..3000)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let _ = client.stream.write_all(&garbage);
        let _ = client.stream.write_all(b"\r\n");
    }
    assert_healthy(&server);
}

#[test]
fn half_sent_requests_and_abrupt_closes_harm_no_one() {
    let server = server_with_canary(&["-t", "2"]);
    for partial in
        [&b"set canary 0 0 5\r\nxx"[..], b"get cana", b"ms canary 5 T0\r\nab", b"set canary 0 0 100\r\n"]
    {
        let mut client = server.connect();
        client.send(partial);
        drop(client);
    }
    assert_healthy(&server);
}

#[test]
fn a_client_that_never_reads_is_bounded() {
    let server = server_with_canary(&["-t", "2"]);
    let mut writer = server.connect();
    set(&mut writer, "big", &vec![b'b'; 500_000]);
    let baseline = rss_bytes(server.pid());
    // Ask for 1 GB of replies and never read them.
    let mut reader = server.connect();
    reader.stream.set_nonblocking(true).expect("nonblocking");
    let request = b"get big\r\n".repeat(100);
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut sent = 0usize;
    while Instant::now() < deadline && sent < 2000 * request.len() {
        match reader.stream.write(&request) {
            Ok(n) => sent += n,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let grown = rss_bytes(server.pid()).saturating_sub(baseline);
    assert!(grown < 64 << 20, "the server buffered {grown} bytes for a client that does not read");
    assert_healthy(&server);
}

/// Reads `expected` from `client` in pieces, comparing as it goes.
fn expect_stream(client: &mut Client, expected: &[u8], what: &str) {
    use std::io::Read;
    let mut got = vec![0; expected.len()];
    client.stream.read_exact(&mut got).unwrap_or_else(|e| panic!("{what}: {e}"));
    if got != expected {
        let at = got.iter().zip(expected).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "{what}: differs at byte {at}: got {:?}, expected {:?}",
            String::from_utf8_lossy(&got[at..(at + 40).min(got.len())]),
            String::from_utf8_lossy(&expected[at..(at + 40).min(expected.len())])
        );
    }
}

#[test]
fn a_multi_get_of_large_values_is_answered_in_pieces_as_the_client_reads() {
    // One request line asking for 300 MB: the server must not build the whole reply at once
    // (memcached streams it from its items), and the request after it must still run.
    for workers in ["1", "2"] {
        let server = server_with_canary(&["-t", workers]);
        let mut writer = server.connect();
        let size = 500_000;
        let values: Vec<Vec<u8>> = (0..4u8).map(|i| vec![b'a' + i; size]).collect();
        for (i, value) in values.iter().enumerate() {
            set(&mut writer, &format!("big{i}"), value);
        }
        let baseline = rss_bytes(server.pid());
        for command in ["get", "gat 0"] {
            let keys: Vec<String> = (0..600).map(|i| format!("big{}", i % 4)).collect();
            let mut reader = server.connect();
            reader.send(format!("{command} {}\r\nset after 0 0 1\r\nx\r\n", keys.join(" ")).as_bytes());
            std::thread::sleep(Duration::from_millis(300));
            let grown = rss_bytes(server.pid()).saturating_sub(baseline);
            assert!(grown < 64 << 20, "{command} with {workers} workers: {grown} bytes buffered");
            for (i, key) in keys.iter().enumerate() {
                let mut block = format!("VALUE {key} 0 {size}\r\n").into_bytes();
                block.extend_from_slice(&values[i % 4]);
                block.extend_from_slice(b"\r\n");
                expect_stream(&mut reader, &block, &format!("{command}, key {i}, {workers} workers"));
            }
            expect_stream(
                &mut reader,
                b"END\r\nSTORED\r\n",
                &format!("{command}: the end and the next request"),
            );
            assert_eq!(reader.call(b"get after\r\n"), b"VALUE after 0 1\r\nx\r\nEND\r\n");
        }
        assert_healthy(&server);
    }
}

#[test]
fn thousands_of_idle_connections() {
    let server = server_with_canary(&["-t", "2", "-c", "5000"]);
    let idle: Vec<Client> = (0..3000).map(|_| server.connect()).collect();
    assert_healthy(&server);
    let mut client = server.connect();
    // Connected clients may still wait in the other worker's accept queue for a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    while stat(&mut client, "curr_connections") < 3000 {
        assert!(Instant::now() < deadline, "3000 connections were not all accepted");
        std::thread::sleep(Duration::from_millis(20));
    }
    let rss = rss_bytes(server.pid());
    assert!(rss < 400 << 20, "3000 idle connections use {rss} bytes");
    drop(idle);
}

#[test]
fn resident_memory_stays_within_the_limit_while_writing_a_gibibyte() {
    let server = ServerProcess::quicksilver(&["-t", "2", "-m", "64"]);
    let mut client = server.connect();
    let value = vec![b'v'; 16 << 10];
    let mut batch = Vec::new();
    let total_bytes = 1usize << 30;
    let sets = total_bytes / value.len();
    for i in 0..sets {
        batch.extend(format!("set key{i} 0 0 {} noreply\r\n", value.len()).bytes());
        batch.extend_from_slice(&value);
        batch.extend(b"\r\n");
        if batch.len() > 1 << 20 || i == sets - 1 {
            client.send(&batch);
            batch.clear();
        }
    }
    assert!(client.call(b"").is_empty());
    let rss = rss_bytes(server.pid());
    // -m 64 of logs, their index (1/8 of -m here), and a fixed allowance for the program,
    // thread stacks and buffers (docs/ARCHITECTURE.md, "Memory").
    let bound = (64u64 << 20) + (8 << 20) + (32 << 20);
    assert!(rss <= bound, "resident {rss} bytes > {bound}");
    let figures = stats(&mut client, "");
    let evictions: u64 =
        figures.iter().find(|(k, _)| k == "evictions").map(|(_, v)| v.parse().unwrap()).unwrap();
    assert!(evictions > 0, "a gibibyte into 64 MiB must evict");
    let last = format!("key{}", sets - 1);
    assert_eq!(get(&mut client, &last).map(|v| v.len()), Some(value.len()), "the newest item is kept");
}

#[test]
fn stats_report_memcached_names_and_counts() {
    let server = ServerProcess::quicksilver(&["-t", "2"]);
    let mut client = server.connect();
    for key in 0..50 {
        set(&mut client, &format!("s{key}"), b"x");
    }
    for key in 0..60 {
        let _ = get(&mut client, &format!("s{key}"));
    }
    let figures = stats(&mut client, "");
    let value = |name: &str| -> u64 {
        figures.iter().find(|(k, _)| k == name).unwrap_or_else(|| panic!("no {name}")).1.parse().unwrap_or(0)
    };
    for name in [
        "pid",
        "uptime",
        "time",
        "version",
        "pointer_size",
        "rusage_user",
        "rusage_system",
        "curr_connections",
        "total_connections",
        "cmd_get",
        "cmd_set",
        "cmd_flush",
        "cmd_touch",
        "get_hits",
        "get_misses",
        "get_expired",
        "delete_hits",
        "delete_misses",
        "incr_hits",
        "incr_misses",
        "decr_hits",
        "decr_misses",
        "cas_hits",
        "cas_misses",
        "cas_badval",
        "touch_hits",
        "touch_misses",
        "bytes_read",
        "bytes_written",
        "limit_maxbytes",
        "threads",
        "curr_items",
        "total_items",
        "bytes",
        "evictions",
        "expired_unfetched",
        "evicted_unfetched",
        "reclaimed",
    ] {
        assert!(figures.iter().any(|(k, _)| k == name), "stats lacks {name}");
    }
    assert_eq!(value("curr_items"), 50);
    assert_eq!(value("cmd_set"), 50);
    assert_eq!(value("get_hits"), 50);
    assert_eq!(value("get_misses"), 10);
    assert_eq!(value("cmd_get"), 60);
    assert_eq!(value("threads"), 2);
    let partitions = stats(&mut client, "partitions");
    let items: u64 = partitions
        .iter()
        .filter(|(k, _)| k.ends_with(":items"))
        .map(|(_, v)| v.parse::<u64>().unwrap())
        .sum();
    assert_eq!(items, 50);
    assert!(partitions.iter().filter(|(k, _)| k.ends_with(":owner_worker")).any(|(_, v)| v == "1"));
    let settings = stats(&mut client, "settings");
    assert!(settings.iter().any(|(k, v)| k == "maxconns" && v == "1024"));
}

#[test]
fn sigterm_answers_what_was_received_then_exits_zero() {
    let server = server_with_canary(&["-t", "2"]);
    let mut client = server.connect();
    assert_eq!(get(&mut client, "canary").as_deref(), Some(&b"alive"[..]));
    let status = server.terminate();
    assert!(status.success(), "exit status {status:?}");
}

/// Runs quicksilver with `args` and returns its exit status and standard error; one that is
/// still running after ten seconds (it started serving) is killed and reported as `None`.
fn run_to_exit(args: &[&str]) -> (Option<std::process::ExitStatus>, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run quicksilver");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    (status, stderr)
}

#[test]
fn a_second_server_on_a_taken_port_is_refused_and_the_first_keeps_its_clients() {
    // SO_REUSEPORT would let a second server join the port and take half the connections.
    let first = server_with_canary(&["-t", "2"]);
    let port = first.port.to_string();
    for workers in ["1", "2"] {
        let (status, stderr) = run_to_exit(&["-p", &port, "-l", "127.0.0.1", "-t", workers]);
        assert!(
            status.is_some_and(|s| !s.success()),
            "-t {workers}: a second server started on a taken port"
        );
        assert!(stderr.contains("Address already in use"), "-t {workers}: {stderr}");
    }
    let udp = ServerProcess::quicksilver_udp(&[]);
    let (status, stderr) = run_to_exit(&["-p", "0", "-l", "127.0.0.1", "-U", &udp.udp_port.to_string()]);
    assert!(status.is_some_and(|s| !s.success()), "a second server started on a taken UDP port");
    assert!(stderr.contains("Address already in use"), "{stderr}");
    for _ in 0..20 {
        assert_healthy(&first);
    }
}

#[test]
fn bad_command_lines_exit_with_status_two() {
    for args in [
        &["--no-such-flag"][..],
        &["-p", "notaport"],
        &["--partitions", "3"],
        &["-U", "notaport"],
        &["-m", "0"],
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver"))
            .args(args)
            .output()
            .expect("run quicksilver");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(!output.stderr.is_empty(), "{args:?}: no message");
    }
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver")).arg("-h").output().expect("run");
    assert!(help.status.success() && String::from_utf8_lossy(&help.stdout).contains("-m"));
    let version =
        std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver")).arg("-V").output().expect("run");
    assert!(version.status.success() && String::from_utf8_lossy(&version.stdout).contains("quicksilver"));
}

/// `lru_crawler metadump all` on `client`: the keys listed (URI-decoded), in order.
fn dump_keys(client: &mut Client) -> Vec<Vec<u8>> {
    client.send(b"lru_crawler metadump all\r\n");
    let reply = client.read_until(b"END\r\n");
    let lines = reply[..reply.len() - 5].strip_prefix(b"OK\r\n").expect("a dump begins with OK");
    lines
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            let encoded = line.strip_prefix(b"key=").expect("key=").split(|&b| b == b' ').next().unwrap();
            let mut key = Vec::new();
            let mut at = 0;
            while at < encoded.len() {
                if encoded[at] == b'%' {
                    let hex = std::str::from_utf8(&encoded[at + 1..at + 3]).unwrap();
                    key.push(u8::from_str_radix(hex, 16).unwrap());
                    at += 3;
                } else {
                    key.push(encoded[at]);
                    at += 1;
                }
            }
            key
        })
        .collect()
}

/// A dump lists every stored key exactly once, whichever worker owns its partition and
/// whichever worker the dumping connection landed on, in both access modes; keys deleted,
/// expired or flushed are not listed.
#[test]
fn metadump_lists_every_key_once_across_workers() {
    for access in ["crew", "erew"] {
        let server = ServerProcess::quicksilver(&["-t", "2", "--access", access]);
        let mut writer = server.connect();
        let mut expected = std::collections::BTreeSet::new();
        let mut batch = Vec::new();
        for n in 0..20_000u32 {
            // Keys that need escaping, and long ones.
            let key = match n % 4 {
                0 => format!("k{n}"),
                1 => format!("a/b:{n}?c=d&e"),
                2 => format!("{n}{}", "x".repeat(200)),
                _ => format!("é{n}%"),
            };
            batch.extend_from_slice(format!("set {key} {n} 0 1 noreply\r\nv\r\n").as_bytes());
            expected.insert(key.into_bytes());
        }
        writer.send(&batch);
        for gone in ["k0", "k4"] {
            writer.send(format!("delete {gone} noreply\r\n").as_bytes());
            expected.remove(gone.as_bytes());
        }
        writer.send(b"set short 0 -1 1 noreply\r\nx\r\n");
        assert_eq!(writer.call(b"version\r\n").len(), "VERSION 1.6.45-quicksilver\r\n".len());
        // Several connections, so that both workers run a dump.
        for _ in 0..4 {
            let mut client = server.connect();
            let listed = dump_keys(&mut client);
            let unique: std::collections::BTreeSet<_> = listed.iter().cloned().collect();
            assert_eq!(unique.len(), listed.len(), "{access}: a key listed twice");
            assert_eq!(unique, expected, "{access}: the dump differs from what was stored");
            // The connection carries on after the dump.
            assert_eq!(client.call(b"get k8\r\n"), b"VALUE k8 8 1\r\nv\r\nEND\r\n");
        }
        writer.send(b"flush_all\r\n");
        assert_eq!(writer.read_until(b"\r\n"), b"OK\r\n");
        assert!(dump_keys(&mut server.connect()).is_empty(), "{access}: flushed keys listed");
    }
}

/// A dump far larger than the output bound, for a client that does not read it: the server
/// produces it only as fast as the client reads, so its memory stays put and other clients are
/// served meanwhile; read later, the dump is complete. A client that half-closes after asking
/// still gets the whole dump.
#[test]
fn a_dump_for_a_client_that_does_not_read_is_bounded() {
    let server = server_with_canary(&["-t", "2", "-m", "256"]);
    let mut writer = server.connect();
    let mut batch = Vec::new();
    const KEYS: usize = 100_000;
    for n in 0..KEYS {
        // 250-byte keys that all need escaping: about 780 bytes of dump each, 78 MB in all.
        let key = format!("{n:0>10}{}", "/".repeat(240));
        batch.extend_from_slice(format!("set {key} 0 0 1 noreply\r\nv\r\n").as_bytes());
    }
    writer.send(&batch);
    assert_eq!(writer.call(b"version\r\n").len(), "VERSION 1.6.45-quicksilver\r\n".len());
    let baseline = rss_bytes(server.pid());
    let mut idle = server.connect();
    idle.send(b"lru_crawler metadump all\r\n");
    std::thread::sleep(Duration::from_millis(500));
    assert_healthy(&server);
    let grown = rss_bytes(server.pid()).saturating_sub(baseline);
    assert!(grown < 32 << 20, "the server buffered {grown} bytes of a dump nobody reads");
    idle.stream.shutdown(std::net::Shutdown::Write).expect("half-close");
    let reply = idle.read_to_close();
    assert!(reply.ends_with(b"END\r\n"), "the dump did not end with END");
    let lines = reply.iter().filter(|&&b| b == b'\n').count() - 2;
    assert_eq!(lines, KEYS + 1, "every key and the canary, once each");
}

/// `stats reset`: memcached's counters start again from zero; what describes the present
/// (items, bytes, connections open) stays.
#[test]
fn stats_reset_zeroes_counters_and_keeps_items() {
    let server = ServerProcess::quicksilver(&["-t", "2"]);
    let mut client = server.connect();
    for key in 0..20 {
        set(&mut client, &format!("r{key}"), b"x");
    }
    for key in 0..30 {
        let _ = get(&mut client, &format!("r{key}"));
    }
    assert_eq!(stat(&mut client, "cmd_get"), 30);
    assert_eq!(client.call(b"stats reset\r\n"), b"RESET\r\n");
    for (name, value) in
        [("cmd_get", 0), ("get_hits", 0), ("get_misses", 0), ("cmd_set", 0), ("total_items", 0)]
    {
        assert_eq!(stat(&mut client, name), value, "{name} after reset");
    }
    assert_eq!(stat(&mut client, "curr_items"), 20);
    assert_eq!(stat(&mut client, "curr_connections"), 1);
    for key in 15..25 {
        let _ = get(&mut client, &format!("r{key}"));
    }
    set(&mut client, "r99", b"y");
    assert_eq!(stat(&mut client, "cmd_get"), 10);
    assert_eq!(stat(&mut client, "get_hits"), 5);
    assert_eq!(stat(&mut client, "get_misses"), 5);
    assert_eq!(stat(&mut client, "cmd_set"), 1);
    assert_eq!(stat(&mut client, "total_items"), 1);
    assert_eq!(stat(&mut client, "curr_items"), 21);
    let hits: u64 = stats(&mut client, "partitions")
        .iter()
        .filter(|(k, _)| k.ends_with(":hits"))
        .map(|(_, v)| v.parse::<u64>().unwrap())
        .sum();
    assert_eq!(hits, 5, "stats partitions counts from the reset too");
}

/// The crawler's switch and its crawls (memcached runs these on a thread of its own and
/// answers by its timing, so the conformance suite leaves them out): crawls answer OK, a
/// switched-off crawler refuses dumps and crawls, and switching it on again restores both.
#[test]
fn lru_crawler_switch_and_crawls() {
    let server = server_with_canary(&["-t", "2"]);
    let mut client = server.connect();
    for (request, reply) in [
        (&b"lru_crawler crawl 1\r\n"[..], &b"OK\r\n"[..]),
        (b"lru_crawler crawl all\r\n", b"OK\r\n"),
        (b"lru_crawler crawl 2,1\r\n", b"OK\r\n"),
        (b"lru_crawler disable\r\n", b"OK\r\n"),
        (b"lru_crawler crawl 1\r\n", b"CLIENT_ERROR lru crawler disabled\r\n"),
        (b"lru_crawler metadump all\r\n", b"CLIENT_ERROR lru crawler disabled\r\n"),
        (b"lru_crawler disable\r\n", b"OK\r\n"),
        (b"lru_crawler enable\r\n", b"OK\r\n"),
        (b"lru_crawler enable\r\n", b"ERROR failed to start lru crawler thread\r\n"),
    ] {
        assert_eq!(client.call(request), reply, "{}", String::from_utf8_lossy(request));
    }
    assert_eq!(dump_keys(&mut client), vec![b"canary".to_vec()]);
}

/// `shutdown` is refused unless -A enables it, as in memcached; enabled, a bad mode is
/// refused, and `shutdown` closes the connection and stops the server cleanly (exit 0).
#[test]
fn shutdown_needs_enable_shutdown_then_stops_the_server() {
    let server = ServerProcess::quicksilver(&["-t", "2"]);
    assert_eq!(server.connect().call(b"shutdown\r\n"), b"SERVER_ERROR: shutdown not enabled\r\n");
    drop(server);
    for mode in ["shutdown", "shutdown graceful"] {
        let mut server = server_with_canary(&["-t", "2", "-A"]);
        let mut client = server.connect();
        assert_eq!(client.call(b"shutdown now\r\n"), b"CLIENT_ERROR invalid shutdown mode\r\n");
        client.send(format!("{mode}\r\n").as_bytes());
        assert_eq!(client.read_to_close(), b"", "{mode}: no reply, the connection closes");
        let status = server.wait_exit(Duration::from_secs(10)).expect("the server stopped");
        assert!(status.success(), "{mode}: exit status {status:?}");
    }
}

/// A server this test started in the background: SIGKILLed by pid when the test ends, however
/// it ends.
struct Daemon(i32);

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill with a pid this test read from the server's own pid file.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// Whether process `pid` is gone (or a zombie waiting for its new parent to reap it).
fn exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// memcached's -d and -P, as a memcached service definition starts it: the command returns 0
/// once the server serves, the pid file names the detached server, SIGTERM to that pid stops
/// it and removes the file; a start that fails (a taken port) fails the command, with the
/// reason, instead of vanishing in the background.
#[test]
fn daemon_mode_writes_a_pid_file_and_reports_a_failed_start() {
    let dir = std::env::temp_dir().join(format!("qs-daemon-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pidfile = dir.join("quicksilver.pid");
    let port = common::free_tcp_ports(1).to_string();
    let start = |port: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver"))
            .args(["-d", "-P", pidfile.to_str().unwrap(), "-p", port, "-l", "127.0.0.1", "-t", "1"])
            .output()
            .expect("run quicksilver -d")
    };
    let output = start(&port);
    assert!(output.status.success(), "{output:?}");
    let pid: i32 = std::fs::read_to_string(&pidfile).expect("pid file").trim().parse().expect("a pid");
    let daemon = Daemon(pid);
    let stream = std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).expect("serving");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let mut client = Client::from_stream(stream);
    assert_eq!(client.call(b"version\r\n"), b"VERSION 1.6.45-quicksilver\r\n");
    let taken = start(&port);
    assert_eq!(taken.status.code(), Some(1), "{taken:?}");
    assert!(String::from_utf8_lossy(&taken.stderr).contains("failed to listen"), "{taken:?}");
    // SAFETY: kill with the pid the server wrote.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !exited(pid) {
        assert!(Instant::now() < deadline, "the daemon did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(daemon);
    assert!(!pidfile.exists(), "the pid file outlived the server");
    let _ = std::fs::remove_dir_all(&dir);
}

/// memcached's -u: started as root, the server runs as the named user once its port is bound;
/// an unknown user fails the start with memcached's message and status (67).
#[test]
fn user_switch_when_started_as_root() {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: -u changes nothing, nothing to check");
        return;
    }
    let server = ServerProcess::quicksilver(&["-t", "1", "-u", "nobody"]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).expect("status");
    let uid = status.lines().find(|line| line.starts_with("Uid:")).expect("Uid line");
    let nobody = std::process::Command::new("id").args(["-u", "nobody"]).output().expect("id");
    let nobody = String::from_utf8_lossy(&nobody.stdout).trim().to_string();
    assert!(uid.split_whitespace().skip(1).all(|id| id == nobody), "{uid}, nobody is {nobody}");
    assert_eq!(server.connect().call(b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver"))
        .args(["-p", &common::free_tcp_ports(1).to_string(), "-u", "no-such-user-here"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(67), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("can't find the user no-such-user-here to switch to"));
}

/// Dumps while another client keeps writing: every key that was stored before and never
/// touched is listed, and no key is listed twice, under both access modes.
#[test]
fn metadump_while_keys_change() {
    for access in ["crew", "erew"] {
        let server = ServerProcess::quicksilver(&["-t", "2", "--access", access]);
        let mut writer = server.connect();
        let mut batch = Vec::new();
        for n in 0..5000 {
            batch.extend_from_slice(format!("set stable{n} 0 0 1 noreply\r\ns\r\n").as_bytes());
        }
        writer.send(&batch);
        assert!(writer.call(b"").is_empty());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churn = {
            let stop = stop.clone();
            let mut client = server.connect();
            std::thread::spawn(move || {
                let mut round = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut batch = Vec::new();
                    for n in 0..200 {
                        let key = (round * 200 + n) % 3000;
                        batch.extend_from_slice(format!("set churn{key} 0 0 2 noreply\r\nxx\r\n").as_bytes());
                        batch.extend_from_slice(
                            format!("delete churn{} noreply\r\n", (key * 7) % 3000).as_bytes(),
                        );
                    }
                    client.send(&batch);
                    assert!(client.call(b"").is_empty());
                    round += 1;
                }
            })
        };
        for _ in 0..5 {
            let listed = dump_keys(&mut server.connect());
            let unique: std::collections::BTreeSet<_> = listed.iter().cloned().collect();
            assert_eq!(unique.len(), listed.len(), "{access}: a key listed twice");
            let stable = unique.iter().filter(|key| key.starts_with(b"stable")).count();
            assert_eq!(stable, 5000, "{access}: untouched keys missing from the dump");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        churn.join().expect("writer");
    }
}

/// A server started on a UNIX domain socket (memcached's -s): killed when dropped.
struct UnixServer {
    child: std::process::Child,
}

impl Drop for UnixServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts quicksilver on the UNIX socket `path` with `args`, and waits until it answers.
fn unix_server(path: &std::path::Path, args: &[&str]) -> UnixServer {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver"))
        .args(["-s", path.to_str().unwrap()])
        .args(args)
        .spawn()
        .expect("start quicksilver -s");
    let server = UnixServer { child };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(path).is_err() {
        assert!(Instant::now() < deadline, "quicksilver -s did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

/// A client over the UNIX socket at `path`, with the same calls as a TCP [`Client`].
fn unix_client(path: &std::path::Path) -> Client {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let stream = std::os::unix::net::UnixStream::connect(path).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    // SAFETY: the descriptor comes from a connected stream socket given up just above; the
    // test client only reads and writes it (TcpStream's calls work on any stream socket).
    Client::from_stream(unsafe { std::net::TcpStream::from_raw_fd(stream.into_raw_fd()) })
}

/// memcached's -s and -a: the server listens on a UNIX domain socket (and not on TCP) with the
/// given permissions; every worker serves its connections, handed-over requests included;
/// a socket file left by an earlier server is replaced, any other file is refused.
#[test]
fn unix_domain_socket_serves_like_tcp() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("qs-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("quicksilver.sock");
    let port = common::free_tcp_ports(1).to_string();
    for round in 0..2 {
        // The second round finds the first server's socket file still there.
        let server = unix_server(&path, &["-t", "2", "-a", "766", "-p", &port, "-l", "127.0.0.1"]);
        let mode = std::fs::metadata(&path).expect("socket file").permissions().mode() & 0o777;
        assert_eq!(mode, 0o766, "-a 766");
        let mut clients: Vec<Client> = (0..8).map(|_| unix_client(&path)).collect();
        for (n, client) in clients.iter_mut().enumerate() {
            for key in 0..50 {
                set(client, &format!("u{round}-{n}-{key}"), format!("v{key}").as_bytes());
            }
        }
        for (n, client) in clients.iter_mut().enumerate() {
            let keys: Vec<String> = (0..50).map(|key| format!("u{round}-{}-{key}", (n + 1) % 8)).collect();
            let reply = client.call(format!("get {}\r\n", keys.join(" ")).as_bytes());
            assert_eq!(reply.windows(5).filter(|w| w == b"VALUE").count(), 50, "multi-get over the socket");
        }
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).is_err(),
            "-s listens on TCP too"
        );
        let settings = common::stats(&mut clients[0], "settings");
        assert!(settings.iter().any(|(k, v)| k == "domain_socket" && v == path.to_str().unwrap()));
        drop(server);
    }
    std::fs::remove_file(&path).expect("the socket file");
    std::fs::write(&path, b"not a socket").expect("file");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver"))
        .args(["-s", path.to_str().unwrap()])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("failed to listen on UNIX socket"));
    assert_eq!(std::fs::read(&path).expect("file"), b"not a socket", "a regular file was replaced");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `stats conns` as memcached lists it: each client with its own address, the address it
/// reached, and its state (awaiting a data block, new, idle, partway through a
/// line, asking).
#[test]
fn stats_conns_lists_clients_as_memcached_does() {
    fn clients(server: &ServerProcess) -> Vec<(String, String, String)> {
        let mut waiting_data = server.connect();
        waiting_data.send(b"set pending 0 0 5\r\n");
        let fresh = server.connect();
        let mut idle = server.connect();
        assert!(idle.call(b"version\r\n").starts_with(b"VERSION"));
        let mut partial = server.connect();
        partial.send(b"get abc");
        let mut asking = server.connect();
        std::thread::sleep(Duration::from_millis(200));
        let figures = stats(&mut asking, "conns");
        let mut by_fd: std::collections::BTreeMap<u32, std::collections::HashMap<String, String>> =
            Default::default();
        for (name, value) in figures {
            let (fd, field) = name.split_once(':').expect("fd:field");
            by_fd.entry(fd.parse().expect("a descriptor")).or_default().insert(field.to_string(), value);
        }
        let ports = [&waiting_data, &fresh, &idle, &partial, &asking]
            .map(|c| c.stream.local_addr().unwrap().port().to_string());
        let listening = by_fd.values().filter(|e| e["state"] == "conn_listening").count();
        assert!(listening >= 1, "no listener listed");
        by_fd
            .values()
            .filter(|e| e.contains_key("listen_addr"))
            .map(|e| {
                let peer_port = e["addr"].rsplit(':').next().unwrap().to_string();
                let who =
                    ports.iter().position(|p| *p == peer_port).map_or("other".into(), |i| i.to_string());
                let reached = e["listen_addr"].replace(&server.port.to_string(), "PORT");
                (who, reached, e["state"].clone())
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }
    let expected = vec![
        ("0".to_string(), "tcp:127.0.0.1:PORT".to_string(), "conn_nread".to_string()),
        ("1".to_string(), "tcp:127.0.0.1:PORT".to_string(), "conn_new_cmd".to_string()),
        ("2".to_string(), "tcp:127.0.0.1:PORT".to_string(), "conn_read".to_string()),
        ("3".to_string(), "tcp:127.0.0.1:PORT".to_string(), "conn_read".to_string()),
        ("4".to_string(), "tcp:127.0.0.1:PORT".to_string(), "conn_parse_cmd".to_string()),
    ];
    let memcached = ServerProcess::memcached(&[]);
    assert_eq!(clients(&memcached), expected, "memcached");
    let quicksilver = ServerProcess::quicksilver(&["-t", "2"]);
    assert_eq!(clients(&quicksilver), expected, "quicksilver");
}

/// `watch`: the log lines of a command sequence are memcached 1.6.18's, field for field (but
/// the time, line number, descriptor and port): lookups before stores, deletes, incr and
/// touch; store outcomes with command, TTL, slab class and size; URI-encoded keys; meta
/// commands; connections opened and closed.
#[test]
fn watch_lines_are_memcached_lines() {
    fn lines(server: &ServerProcess) -> Vec<String> {
        let mut watcher = server.connect();
        watcher.send(b"watch fetchers mutations evictions connevents\r\n");
        assert_eq!(watcher.read_until(b"\r\n"), b"OK\r\n");
        let mut client = server.connect();
        let client_port = client.stream.local_addr().expect("local address").port();
        let commands: &[&[u8]] = &[
            b"set a 0 0 1\r\n1\r\n",
            b"get a b\r\n",
            b"gets a\r\n",
            b"add a 0 0 1\r\n2\r\n",
            b"replace zz 0 0 1\r\n2\r\n",
            b"append a 0 0 1\r\n2\r\n",
            b"cas a 0 0 1 999\r\n3\r\n",
            b"incr a 5\r\n",
            b"touch a 10\r\n",
            b"gat 0 a\r\n",
            b"delete a\r\n",
            b"delete a\r\n",
            b"mg a v\r\n",
            b"ms m 2 T30\r\nhi\r\n",
            b"mg m v\r\n",
            b"md m\r\n",
            b"ma m\r\n",
            b"set sp%20 0 0 1\r\n1\r\n",
        ];
        for command in commands {
            // Each reply (and `mn`'s) before the next command, so lines come in command order.
            client.send(command);
            client.send(b"mn\r\n");
            let _ = client.read_until(b"MN\r\n");
        }
        client.send(b"quit\r\n");
        drop(client);
        let mut text = String::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        let done = |text: &str| {
            text.find("key=sp%2520 status=stored").is_some_and(|at| text[at..].contains("type=conn_close"))
        };
        while !done(&text) && Instant::now() < deadline {
            text.push_str(&String::from_utf8_lossy(&watcher.read_until(b"\n")));
        }
        // The client's connection events only (not a readiness probe's).
        let rport = format!("rport={client_port} ");
        text.lines()
            .filter(|line| !line.contains(" type=conn_") || line.contains(&rport))
            .map(|line| {
                line.split(' ')
                    .filter(|field| !["ts=", "gid=", "cfd=", "rport="].iter().any(|p| field.starts_with(p)))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }
    let memcached = lines(&ServerProcess::memcached(&[]));
    assert!(memcached.len() > 20, "memcached logged {memcached:?}");
    for threads in ["1", "2"] {
        let quicksilver = lines(&ServerProcess::quicksilver(&["-t", threads]));
        assert_eq!(quicksilver, memcached, "with -t {threads}");
    }
}

/// A `watch mutations` line names the connection that sent the store (`cfd`), also for a set
/// whose value went into the log as it arrived, finished after another connection's request
/// ran on the same worker (the engine once kept the last caller's descriptor and logged it).
#[test]
fn a_watch_line_names_the_connection_whose_value_arrived() {
    fn cfd_of(lines: &str, key: &str) -> Option<String> {
        let line = lines.lines().find(|line| line.contains(&format!(" key={key} status=stored")))?;
        line.split(' ').find_map(|field| field.strip_prefix("cfd=")).map(str::to_owned)
    }
    let server = ServerProcess::quicksilver(&["-t", "1", "-I", "2m"]);
    let mut watcher = server.connect();
    watcher.send(b"watch mutations\r\n");
    assert_eq!(watcher.read_until(b"\r\n"), b"OK\r\n");
    let (mut arriving, mut other) = (server.connect(), server.connect());
    assert_eq!(arriving.call(b"set mine 0 0 1\r\n1\r\n"), b"STORED\r\n");
    assert_eq!(other.call(b"set theirs 0 0 1\r\n1\r\n"), b"STORED\r\n");
    // A value too long for the connection's input: received into the log as it comes.
    let value = vec![b'v'; 1_000_000];
    arriving.send(b"set big 0 0 1000000\r\n");
    arriving.send(&value[..300_000]);
    assert_eq!(other.call(b"set between 0 0 1\r\n1\r\n"), b"STORED\r\n");
    arriving.send(&value[300_000..]);
    arriving.send(b"\r\n");
    assert_eq!(arriving.read_until(b"\r\n"), b"STORED\r\n");
    let mut lines = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while cfd_of(&lines, "big").is_none() && Instant::now() < deadline {
        lines.push_str(&String::from_utf8_lossy(&watcher.read_until(b"\n")));
    }
    let (mine, theirs) = (cfd_of(&lines, "mine"), cfd_of(&lines, "theirs"));
    assert_ne!(mine, theirs, "{lines}");
    assert_eq!(cfd_of(&lines, "between"), theirs, "{lines}");
    assert_eq!(cfd_of(&lines, "big"), mine, "{lines}");
}

/// `watch` is refused with -W, and an unknown stream is an error, as memcached answers.
#[test]
fn watch_refusals_are_memcached_replies() {
    let server = ServerProcess::quicksilver(&["-W"]);
    assert_eq!(server.connect().call(b"watch mutations\r\n"), b"CLIENT_ERROR watch commands not allowed\r\n");
    let server = ServerProcess::quicksilver(&[]);
    let mut client = server.connect();
    assert_eq!(client.call(b"watch bogus\r\n"), b"ERROR\r\n");
    assert!(client.call(b"version\r\n").starts_with(b"VERSION"));
    assert_eq!(stat(&mut client, "log_watchers"), 0);
}

/// Service lines as distributions ship them (Debian's /etc/memcached.conf, Red Hat's
/// /etc/sysconfig/memcached) and as operators tune them start quicksilver unchanged, and
/// `stats settings` reports what they asked for.
#[test]
fn memcached_service_lines_start_quicksilver_unchanged() {
    // Debian and Red Hat name their own service users; the test uses one that exists here.
    let user = ["memcache", "memcached", "nobody"]
        .into_iter()
        .find(|user| std::process::Command::new("id").arg(user).output().is_ok_and(|o| o.status.success()))
        .unwrap_or("nobody");
    let pidfile = std::env::temp_dir().join(format!("qs-service-line-{}.pid", std::process::id()));
    let pidfile = pidfile.to_str().expect("utf-8 path").to_string();
    // ::1 where the machine has IPv6 loopback (Red Hat's default line names it).
    let v6 = std::net::TcpListener::bind("[::1]:0").is_ok();
    let red_hat_listen = if v6 { "127.0.0.1,::1" } else { "127.0.0.1" };
    // Each line's arguments and the settings it must show.
    type Line<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>);
    let lines: Vec<Line> = vec![
        // Debian: -m 64 -p 11211 -u memcache -l 127.0.0.1 -P /var/run/memcached/memcached.pid
        (vec!["-m", "64", "-u", user, "-P", &pidfile], vec![("maxconns", "1024"), ("evictions", "on")]),
        // Red Hat: -p 11211 -u memcached -m 64 -c 1024 -l 127.0.0.1,::1 -U 0
        (vec!["-u", user, "-m", "64", "-c", "1024", "-l", red_hat_listen, "-U", "0"], vec![("udpport", "0")]),
        // Tuned: the modern options, a larger item size, backlog, requests per event, no CAS.
        (
            vec![
                "-m", "256", "-c", "4096", "-t", "2", "-I", "2m", "-b", "2048", "-R", "40", "-C",
                "-o", "modern,slab_reassign,slab_automove=1,lru_crawler,lru_maintainer,hash_algorithm=murmur3",
                "-f", "1.08", "-n", "64", "-L",
            ],
            vec![
                ("item_size_max", "2097152"),
                ("tcp_backlog", "2048"),
                ("reqs_per_event", "40"),
                ("cas_enabled", "no"),
                ("maxconns", "4096"),
            ],
        ),
        // Locked down: no flush, no dumping, text only, idle connections closed, -D prefixes.
        (
            vec![
                "-F", "-X", "-B", "ascii", "-D", "/", "-o",
                "idle_timeout=600,maxconns_fast,watcher_logbuf_size=512,worker_logbuf_size=128,no_inline_ascii_resp",
            ],
            vec![
                ("flush_enabled", "no"),
                ("dump_enabled", "no"),
                ("binding_protocol", "ascii"),
                ("idle_timeout", "600"),
                ("stat_key_prefix", "/"),
                ("detail_enabled", "yes"),
                ("watcher_logbuf_size", "524288"),
            ],
        ),
    ];
    for (args, expected) in lines {
        let server = ServerProcess::quicksilver(&args);
        let mut client = server.connect();
        set(&mut client, "line", b"works");
        assert_eq!(get(&mut client, "line").as_deref(), Some(&b"works"[..]), "{args:?}");
        let settings = stats(&mut client, "settings");
        for (name, value) in expected {
            let got = settings.iter().find(|(key, _)| key == name).map(|(_, v)| v.as_str());
            assert_eq!(got, Some(value), "{name} with {args:?}");
        }
        if v6 && args.contains(&"127.0.0.1,::1") {
            let mut stream = std::net::TcpStream::connect(("::1", server.port)).expect("::1 listens too");
            stream.write_all(b"get line\r\n").unwrap();
        }
    }
    let _ = std::fs::remove_file(&pidfile);
}

/// Options for parts quicksilver does not have refuse to start and name the missing feature;
/// options memcached refuses are refused with memcached's message.
#[test]
fn options_for_missing_features_refuse_to_start_and_say_why() {
    let refusals: &[(&[&str], &str)] = &[
        (&["-o", "ext_path=/tmp/extstore"], "must supply size to ext_path"),
        (&["-Z"], "ERROR: You cannot enable SSL without a TCP port."),
        (
            &["-Z", "-l", "127.0.0.1:11299", "-o", "ssl_chain_cert=/nonexistent/cert.pem"],
            "Error loading the certificate chain",
        ),
        (&["-o", "proxy_config=/tmp/proxy.lua"], "proxy mode is not part of quicksilver"),
        (&["-o", "no_such_option"], "Illegal suboption \"no_such_option\""),
        (&["-I", "1000"], "Item max size cannot be less than 1024 bytes."),
        (&["-I", "256m"], "Cannot set item size limit higher than 1/2 of memory max."),
        (&["-I", "2m", "-o", "slab_chunk_max=3000"], "must be evenly divisible by slab_chunk_max"),
        (&["-t", "0"], "Number of threads must be greater than 0"),
        (&["-R", "0"], "Number of requests per event must be greater than 0"),
        (&["-S", "-B", "ascii"], "You cannot allow the ASCII protocol while using SASL."),
        // A mode refuses every protocol it cannot authenticate, as memcached does for -B (and,
        // unlike memcached, for each listener's own: tests/auth.rs).
        (&["-S", "-B", "auto"], "You cannot allow the ASCII protocol while using SASL."),
        (&["-Y", "/dev/null", "-B", "auto"], "You cannot allow the BINARY protocol while using ascii"),
        (&["-Y", "/dev/null", "-B", "binary"], "You cannot allow the BINARY protocol while using ascii"),
        (&["-S", "-Y", "/dev/null"], "You cannot allow the BINARY protocol while using ascii"),
        (&["-S", "-U", "11211"], "Cannot enable UDP while using binary SASL authentication."),
        (&["-Y", "/nonexistent/authfile"], "Could not open authfile"),
        // Only what runs is offered: CRCW is the engine's comparison point, not served.
        (&["--access", "crcw"], "[possible values: erew, crew]"),
    ];
    for (args, message) in refusals {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver"))
            .args(["-p", "0"])
            .args(*args)
            .env("MEMCACHED_SASL_PWDB", "/dev/null")
            .output()
            .expect("run quicksilver");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} started");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

/// memcached's port rules (t/issue_67.t has the full table): -p -1 and -U -1 pick free
/// ports, reported in MEMCACHED_PORT_FILENAME as memcached reports them.
#[test]
fn free_ports_and_listener_specs_follow_memcached() {
    let dir = std::env::temp_dir().join(format!("qs-e2e-ports-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port_file = dir.join("ports");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver"))
        .args(["-p", "-1", "-U", "-1", "-l", "127.0.0.1"])
        .env("MEMCACHED_PORT_FILENAME", &port_file)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run quicksilver");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !port_file.exists() {
        assert!(Instant::now() < deadline, "no port file");
        assert!(child.try_wait().unwrap().is_none(), "quicksilver exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(&port_file).unwrap();
    let ports: Vec<(String, u16)> = text
        .lines()
        .map(|line| {
            let (kind, port) = line.split_once(": ").expect("KIND INET: PORT");
            (kind.to_string(), port.parse().expect("a port"))
        })
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(ports.len(), 2, "{text}");
    assert_eq!(ports[0].0, "TCP INET");
    assert_eq!(ports[1].0, "UDP INET");
    assert!(ports.iter().all(|&(_, port)| port != 11211 && port != 0), "{text}");
}

/// A `proto[binary]:` listener speaks binary only (text closes the connection, as memcached's
/// bad-magic rule) while the main port negotiates.
#[test]
fn listener_protocol_prefix_fixes_the_protocol() {
    let extra = common::free_tcp_ports(1);
    let server = ServerProcess::quicksilver(&["-l", &format!("proto[binary]:127.0.0.1:{extra}")]);
    let mut main = server.connect();
    assert_eq!(main.call(b"version\r\n")[..8], *b"VERSION ");
    let stream = std::net::TcpStream::connect(("127.0.0.1", extra)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut binary = Client::from_stream(stream.try_clone().unwrap());
    let version = [0x80, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    binary.send(&version);
    let mut head = [0u8; 24];
    std::io::Read::read_exact(&mut &stream, &mut head).unwrap();
    assert_eq!(head[..2], [0x81, 0x0b]);
    let stream = std::net::TcpStream::connect(("127.0.0.1", extra)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut text = Client::from_stream(stream);
    // A whole binary header's worth of text: its first byte is not the binary magic.
    text.send(b"get a_long_key_name_here\r\n");
    assert!(!text.read_to_close().starts_with(b"VERSION"));
}

/// `-o no_maxconns_fast`: at -c the server stops accepting instead of refusing, so a new
/// client waits in the backlog (counted in listen_disabled_num, accepting_conns 0) and is
/// served as soon as a connection closes.
#[test]
fn without_maxconns_fast_clients_wait_at_the_limit_then_get_served() {
    let server = ServerProcess::quicksilver(&["-c", "3", "-t", "2", "-o", "no_maxconns_fast"]);
    // The start-up probe's connection may still be closing: wait until none is open.
    let mut first = server.connect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while stat(&mut first, "curr_connections") > 1 {
        assert!(Instant::now() < deadline, "the probe connection did not close");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut second = server.connect();
    let mut third = server.connect();
    assert_eq!(&second.call(b"version\r\n")[..8], b"VERSION ");
    assert_eq!(&third.call(b"version\r\n")[..8], b"VERSION ");
    let waiting = std::net::TcpStream::connect(("127.0.0.1", server.port)).expect("the backlog takes it");
    waiting.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut waiting = Client::from_stream(waiting);
    waiting.send(b"version\r\n");
    let mut buf = [0u8; 64];
    let early = std::io::Read::read(&mut waiting.stream, &mut buf);
    assert!(early.is_err(), "served over the limit: {early:?}");
    assert_eq!(stat(&mut first, "accepting_conns"), 0);
    assert_eq!(stat(&mut first, "listen_disabled_num"), 1);
    drop(third);
    waiting.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let reply = waiting.read_until(b"\r\n");
    assert!(reply.starts_with(b"VERSION "), "{reply:?}");
    assert!(stat(&mut first, "time_in_listen_disabled_us") > 0);
    assert_eq!(&second.call(b"version\r\n")[..8], b"VERSION ");
    // At the limit again; one fewer and the server accepts again.
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(10);
    while stat(&mut first, "accepting_conns") != 1 {
        assert!(Instant::now() < deadline, "accepting did not resume");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `-o front_cache` under EREW: readers on every worker read a key while a writer on another
/// connection writes increasing versions; no read returns a version older than one whose set
/// was acknowledged before the read was sent, reads of the other worker's key are served from
/// the front cache once nothing changes, and every one counts as a get hit.
#[test]
fn front_cache_never_serves_a_value_older_than_an_acknowledged_set() {
    let server = ServerProcess::quicksilver(&["-t", "2", "--access", "erew", "-o", "front_cache"]);
    let mut writer = server.connect();
    set(&mut writer, "celebrity", b"0");
    // SO_REUSEPORT spreads connections over the workers at random: with 16 readers, the
    // chance that none lands on the worker that does not own the key is 2^-16 (with 4 it
    // was 1 in 16, and the front cache then had nothing to serve).
    let readers = (0..16).map(|_| server.connect()).collect();
    let write = |version: u64| set(&mut writer, "celebrity", version.to_string().as_bytes());
    let reads = reads_never_go_back(readers, |client| get(client, "celebrity"), (3000, write));
    assert!(reads > 1000, "{reads} reads");
    let mut client = server.connect();
    let (hits, gets) = (stat(&mut client, "get_hits"), stat(&mut client, "cmd_get"));
    assert_eq!(hits, gets, "every get hit, front hits counted");
    assert!(stat(&mut client, "front_cache_hits") > 0, "nothing served from the front cache");
}

/// An oversized store in one dialect: what precedes the value, what follows it, the requests
/// sent after it and how their answers and the refusal end.
type Oversized = (Vec<u8>, &'static [u8], &'static [u8], &'static [u8], &'static [u8]);

/// What a client that stops writing a value at the first reply sees after sending a value
/// over -I: whether a reply came before the whole value was written, the refusal, and the
/// answers to a set and a get sent after it on the same connection.
fn refuse_then_serve(server: &ServerProcess, dialect: &str) -> (bool, Vec<u8>, Vec<u8>) {
    const VALUE: usize = 3 << 20;
    const CHUNK: usize = 64 << 10;
    let mut client = server.connect();
    let (head, tail, follow, follow_end, refusal_end): Oversized = match dialect {
        "binary" => {
            let key = b"big";
            let mut head = vec![0x80, 0x01, 0, key.len() as u8, 8, 0, 0, 0];
            head.extend_from_slice(&((8 + key.len() + VALUE) as u32).to_be_bytes());
            head.extend_from_slice(&[0; 12 + 8]);
            head.extend_from_slice(key);
            // Then a set of "small" (flags 0, no expiry, value "v") and a get of it.
            let follow: &'static [u8] = b"\x80\x01\x00\x05\x08\x00\x00\x00\x00\x00\x00\x0e\x00\x00\x00\x00\
\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00smallv\
\x80\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00small";
            (head, b"", follow, b"v", b"Too large.")
        }
        "text" => (
            format!("set big 0 0 {VALUE}\r\n").into_bytes(),
            b"\r\n",
            b"set small 0 0 1\r\nv\r\nget small\r\n",
            b"END\r\n",
            b"\r\n",
        ),
        _ => (
            format!("ms big {VALUE}\r\n").into_bytes(),
            b"\r\n",
            b"ms small 1\r\nv\r\nmg small v\r\n",
            b"v\r\n",
            b"\r\n",
        ),
    };
    client.send(&head);
    // Written as a client paced by its network would: a chunk, then a short look for a reply.
    client.stream.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    let chunk = vec![b'x'; CHUNK];
    let mut sent = 0;
    while sent < VALUE {
        let piece = &chunk[..CHUNK.min(VALUE - sent)];
        client.send(piece);
        sent += piece.len();
        let mut byte = [0u8; 1];
        if sent < VALUE && client.stream.peek(&mut byte).is_ok() {
            // The client takes the reply as the end of the operation and stops writing.
            return (true, Vec::new(), Vec::new());
        }
    }
    client.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    client.send(tail);
    let refusal = client.read_until(refusal_end);
    client.send(follow);
    let mut answers = client.read_until(follow_end);
    if dialect == "binary" {
        // CAS values are each server's own: the set's reply, then the get's after it.
        answers[16..24].fill(0);
        answers[40..48].fill(0);
    }
    (false, refusal, answers)
}

#[test]
fn a_value_over_the_item_limit_is_refused_once_all_of_it_is_read_as_memcached_does() {
    let memcached = ServerProcess::memcached(&[]);
    let quicksilver = ServerProcess::quicksilver(&[]);
    for dialect in ["binary", "text", "meta"] {
        let oracle = refuse_then_serve(&memcached, dialect);
        assert!(!oracle.0, "memcached answered {dialect} before the value was read");
        let ours = refuse_then_serve(&quicksilver, dialect);
        assert!(!ours.0, "{dialect}: a reply came before the whole value was written");
        assert_eq!(ours.1, oracle.1, "{dialect}: the refusal");
        assert_eq!(ours.2, oracle.2, "{dialect}: the set and get after it");
        assert!(!ours.2.is_empty());
    }
}
