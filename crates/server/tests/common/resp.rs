//! RESP test helpers: redis-server beside quicksilver's RESP listener, requests written as
//! redis-cli writes them, and replies read up to a marker.

use super::{free_port, Client, ServerProcess};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server on a free port with 16 databases and 64 MiB (as quicksilver serves), stopped
/// when dropped.
pub struct Redis {
    pub child: Child,
    pub port: u16,
}

impl Redis {
    pub fn start() -> Redis {
        Redis::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Redis {
        for _attempt in 0..5 {
            let port = free_port();
            let child = Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--databases",
                    "16",
                ])
                // As quicksilver's defaults: 64 MiB, any key evicted.
                .args(["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("redis-server (scripts/test.sh installs it)");
            let mut redis = Redis { child, port };
            if answers_ping(port) {
                return redis;
            }
            let _ = redis.child.kill();
        }
        panic!("redis-server did not start");
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn answers_ping(port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        // A server still starting (or one that took the port first and went) may refuse, reset
        // or close: tried again, never a panic.
        if let Some(reply) = ping(port) {
            // A server with a password answers, refusing.
            if reply == b"+PONG\r\n" || reply.starts_with(b"-NOAUTH") {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// PING's reply line from `port`, if a server there answers one.
fn ping(port: u16) -> Option<Vec<u8>> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(b"PING\r\n").ok()?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 256];
    while !reply.ends_with(b"\r\n") {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
        }
    }
    Some(reply)
}

/// quicksilver with a RESP listener: the server and that listener's port.
pub fn quicksilver(args: &[&str]) -> (ServerProcess, u16) {
    for _attempt in 0..5 {
        let port = free_port();
        let listen = format!("127.0.0.1,proto[resp]:127.0.0.1:{port}");
        let mut all = vec!["-l", &listen];
        all.extend_from_slice(args);
        let server = ServerProcess::quicksilver(&all);
        if answers_ping(port) {
            return (server, port);
        }
    }
    panic!("quicksilver's RESP listener did not start");
}

pub fn connect(port: u16) -> Client {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(super::REPLY_TIMEOUT)).expect("timeout");
    Client::from_stream(stream)
}

/// A request written as redis-cli writes it: an array of bulk strings.
pub fn frame(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
    }
    out
}

pub const MARK: &[u8] = b"*2\r\n$4\r\nECHO\r\n$5\r\n@@@@@\r\n";
pub const MARK_REPLY: &[u8] = b"$5\r\n@@@@@\r\n";

/// Sends `request` then an ECHO marker; returns everything before the marker's reply.
pub fn call(client: &mut Client, request: &[u8]) -> Vec<u8> {
    client.send(request);
    client.send(MARK);
    let mut reply = client.read_until(MARK_REPLY);
    reply.truncate(reply.len() - MARK_REPLY.len());
    reply
}

/// Each request to both servers, in order on one connection each: the replies must match,
/// with one worker and with four (keys then live on other workers: sets are handed to their
/// owner, reads made here).
pub fn same_replies(requests: &[Vec<u8>]) {
    same_replies_after(None, requests);
}

/// As [`same_replies`], after `HELLO version` on each connection (its replies compared but
/// for the connection's id) where one is given.
pub fn same_replies_after(hello: Option<&str>, requests: &[Vec<u8>]) {
    for workers in ["1", "4"] {
        let redis = Redis::start();
        let (_server, port) = quicksilver(&["-t", workers]);
        let (mut theirs, mut ours) = (connect(redis.port), connect(port));
        let hello = hello.map(|version| frame(&["HELLO", version]));
        for request in hello.iter().chain(requests) {
            let (mut want, mut got) = (call(&mut theirs, request), call(&mut ours, request));
            if request.starts_with(b"*2\r\n$5\r\nHELLO") {
                (want, got) = (without_id(&want), without_id(&got));
            }
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "request {:?} with {workers} workers",
                String::from_utf8_lossy(request)
            );
        }
    }
}

/// The replies quicksilver gave (`got`) are redis-server's (`want`), one by one; `label` names
/// the run in a failure.
pub fn replies_match(want: &[Vec<u8>], got: &[Vec<u8>], label: &str) {
    for (at, (want, got)) in want.iter().zip(got).enumerate() {
        assert_eq!(String::from_utf8_lossy(got), String::from_utf8_lossy(want), "reply {at} {label}");
    }
}

/// Each request to redis-server and to quicksilver (one worker, then four), one reply read at a
/// time on one connection each (so MULTI's queued replies are read as they come): the replies
/// must match, HELLO's but for the connection's id.
pub fn same_single_replies(lines: &[&[&str]]) {
    for workers in ["1", "4"] {
        let redis = Redis::start();
        let (_server, port) = quicksilver(&["-t", workers]);
        let (mut theirs, mut ours) = (connect(redis.port), connect(port));
        for words in lines {
            let request = frame(words);
            let (mut want, mut got) = (one(&mut theirs, &request), one(&mut ours, &request));
            if words[0] == "HELLO" {
                (want, got) = (without_id(&want), without_id(&got));
            }
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "{words:?}, {workers} workers"
            );
        }
    }
}

/// HELLO's reply with its `id` (the connection's number, which differs between servers) cut
/// out (a refusal as it is).
pub fn without_id(reply: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(reply).into_owned();
    let Some(at) = text.find("$2\r\nid\r\n:") else { return reply.to_vec() };
    let end = at + text[at..].find("\r\n$4\r\nmode").expect("then the mode");
    format!("{}{}", &text[..at], &text[end..]).into_bytes()
}

/// A `-Y` users file with one user, `app` with password `pw`, in a temporary directory named
/// after the test and the process.
pub fn users_file(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("qs-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("directory");
    let users = dir.join("users");
    std::fs::write(&users, "app:pw\n").expect("users");
    users
}

/// Sends `request` and reads exactly one reply (inside MULTI, where [`call`]'s marker would be
/// queued, not answered).
pub fn one(client: &mut Client, request: &[u8]) -> Vec<u8> {
    client.send(request);
    read_value(client)
}

/// One whole RESP value from `client`.
fn read_value(client: &mut Client) -> Vec<u8> {
    let mut value = client.read_until(b"\r\n");
    let count = || -> i64 {
        std::str::from_utf8(&value[1..value.len() - 2]).ok().and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    match value[0] {
        b'$' | b'=' | b'!' if count() >= 0 => {
            let want = count() as usize + 2;
            while client.buf.len() < want {
                let mut chunk = [0u8; 65536];
                match std::io::Read::read(&mut client.stream, &mut chunk) {
                    Ok(0) => panic!("connection closed inside a bulk string"),
                    Ok(n) => client.buf.extend_from_slice(&chunk[..n]),
                    Err(e) => panic!("read: {e}"),
                }
            }
            let rest = client.buf.split_off(want);
            value.extend(std::mem::replace(&mut client.buf, rest));
        }
        b'*' | b'~' | b'>' | b'%' if count() > 0 => {
            let elements = count() as usize * if value[0] == b'%' { 2 } else { 1 };
            for _ in 0..elements {
                let element = read_value(client);
                value.extend(element);
            }
        }
        _ => {}
    }
    value
}

/// Runs the redis-py script `name` (in tests/interop/) against the RESP listener on `port`; it
/// must exit successfully (`server` names the server in the failure).
pub fn redis_py_script(name: &str, port: u16, server: &str) -> String {
    let script = format!("{}/tests/interop/{name}", env!("CARGO_MANIFEST_DIR"));
    let output = std::process::Command::new("/usr/bin/python3")
        .args([&script, &port.to_string()])
        .output()
        .expect("python3 with redis-py (scripts/test.sh installs python3-redis)");
    assert!(
        output.status.success(),
        "{name} against {server}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Under `-t 4`, two writer threads each call `write(client, n, a, b)` (its n-th write, over
/// one pair of keys on different workers, which must leave the two equal) while two readers
/// run `MGET a b`: no reader may ever see the two differ. Counted, not timed: it ends once
/// both have run enough to have met, however slow the machine.
pub fn no_reader_sees_half(write: fn(&mut Client, u64, &str, &str)) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;
    let (_server, port) = quicksilver(&["-t", "4"]);
    let pairs: Vec<(String, String)> = (0..8).map(|i| (format!("a{i}"), format!("b{i}"))).collect();
    let mut setup = connect(port);
    for (a, b) in &pairs {
        assert_eq!(call(&mut setup, &frame(&["MSET", a, "0", b, "0"])), b"+OK\r\n");
    }
    let pairs = Arc::new(pairs);
    let stop = Arc::new(AtomicBool::new(false));
    let (steps, reads) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let writers: Vec<_> = (0..2u64)
        .map(|writer| {
            let (pairs, stop, steps) = (pairs.clone(), stop.clone(), steps.clone());
            std::thread::spawn(move || {
                let mut client = connect(port);
                for n in 0u64.. {
                    if stop.load(Relaxed) {
                        break;
                    }
                    let (a, b) = &pairs[n as usize % pairs.len()];
                    write(&mut client, n * 2 + writer, a, b);
                    steps.fetch_add(1, Relaxed);
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (pairs, stop, reads) = (pairs.clone(), stop.clone(), reads.clone());
            std::thread::spawn(move || {
                let mut client = connect(port);
                for n in 0usize.. {
                    if stop.load(Relaxed) {
                        break;
                    }
                    let (a, b) = &pairs[n % pairs.len()];
                    let reply = String::from_utf8(call(&mut client, &frame(&["MGET", a, b]))).expect("text");
                    let values: Vec<&str> = reply.split("\r\n").skip(2).step_by(2).take(2).collect();
                    assert_eq!(values[0], values[1], "MGET {a} {b} saw half of a step: {reply:?}");
                    reads.fetch_add(1, Relaxed);
                }
            })
        })
        .collect();
    while steps.load(Relaxed) < 2_000 || reads.load(Relaxed) < 4_000 {
        std::thread::sleep(Duration::from_millis(20));
        assert!(!writers.iter().chain(&readers).any(|t| t.is_finished()), "a client thread failed");
    }
    stop.store(true, Relaxed);
    for thread in writers.into_iter().chain(readers) {
        thread.join().expect("no client saw a difference");
    }
}
