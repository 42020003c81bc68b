//! Test helpers: start the real `quicksilver` binary or a real memcached on a free loopback
//! port, wait until it answers (polling, never a fixed sleep), stop it by PID when dropped.
#![allow(dead_code)]

pub mod resp;
pub mod rng;
pub mod tls;
pub mod twemproxy;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to start answering.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a test waits for one reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// A server process under test.
pub struct ServerProcess {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its UDP port on 127.0.0.1 (0: UDP off).
    pub udp_port: u16,
    /// Its native protocol's base port (partition i on base + i; 0: off).
    pub native_port: u16,
    /// What it is, for messages.
    pub name: &'static str,
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// The first of `count` consecutive TCP ports that were free a moment ago.
pub fn free_tcp_ports(count: u16) -> u16 {
    for _ in 0..100 {
        let base = free_udp_ports(count);
        if (base..base + count).all(|port| TcpListener::bind(("127.0.0.1", port)).is_ok()) {
            return base;
        }
    }
    panic!("no {count} consecutive free TCP ports");
}

/// The first of `count` consecutive UDP ports that were free a moment ago.
pub fn free_udp_ports(count: u16) -> u16 {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let seed = now
        ^ (std::process::id() as u64) << 32
        ^ CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) << 48;
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for _ in 0..1000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let base = 20_000 + (state % 30_000) as u16;
        let all_free =
            (base..base + count).all(|port| std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok());
        if all_free {
            return base;
        }
    }
    panic!("no {count} consecutive free UDP ports");
}

impl ServerProcess {
    /// Starts quicksilver with `args` (plus -p and -l).
    pub fn quicksilver(args: &[&str]) -> ServerProcess {
        Self::spawn("quicksilver", env!("CARGO_BIN_EXE_quicksilver"), args)
    }

    /// Starts quicksilver with UDP on a free port (-U), plus `args`.
    pub fn quicksilver_udp(args: &[&str]) -> ServerProcess {
        Self::spawn_udp("quicksilver", env!("CARGO_BIN_EXE_quicksilver"), &[], args)
    }

    /// Starts memcached with UDP on a free port (-U), plus `args`.
    pub fn memcached_udp(args: &[&str]) -> ServerProcess {
        let mut first = Vec::new();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            first.extend(["-u", "nobody"]);
        }
        Self::spawn_udp("memcached", "memcached", &first, args)
    }

    fn spawn_udp(name: &'static str, program: &str, first: &[&str], args: &[&str]) -> ServerProcess {
        for _attempt in 0..5 {
            let udp_port = std::net::UdpSocket::bind("127.0.0.1:0")
                .and_then(|s| s.local_addr())
                .map(|a| a.port())
                .expect("a free UDP port");
            let udp_text = udp_port.to_string();
            let mut all: Vec<&str> = first.to_vec();
            all.extend(["-U", &udp_text]);
            all.extend_from_slice(args);
            let mut server = Self::spawn(name, program, &all);
            server.udp_port = udp_port;
            if UdpClient::new(udp_port).exchange(b"mn\r\n").is_some() {
                return server;
            }
        }
        panic!("{name} did not start with UDP");
    }

    /// Starts memcached 1.6 from PATH with `args`.
    /// Starts the memcached binary at `program` (a newer release built outside the
    /// repository) on a free port, as [`ServerProcess::memcached`].
    pub fn memcached_at(program: &str, args: &[&str]) -> ServerProcess {
        let mut all = vec!["-U", "0"];
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            all.extend(["-u", "nobody"]);
        }
        all.extend_from_slice(args);
        Self::spawn("memcached", program, &all)
    }

    pub fn memcached(args: &[&str]) -> ServerProcess {
        let mut all = vec!["-U", "0"];
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            all.extend(["-u", "nobody"]);
        }
        all.extend_from_slice(args);
        Self::spawn("memcached", "memcached", &all)
    }

    /// Starts quicksilver with TCP and UDP on the same port number (as memaslap's UDP mode
    /// needs), plus `args`.
    pub fn quicksilver_udp_same_port(args: &[&str]) -> ServerProcess {
        for _attempt in 0..5 {
            let port = free_port();
            if std::net::UdpSocket::bind(("127.0.0.1", port)).is_err() {
                continue;
            }
            let port_text = port.to_string();
            let all: Vec<&str> = ["-U", port_text.as_str()].into_iter().chain(args.iter().copied()).collect();
            if let Some(mut server) =
                Self::spawn_at("quicksilver", env!("CARGO_BIN_EXE_quicksilver"), port, &all)
            {
                server.udp_port = port;
                return server;
            }
        }
        panic!("quicksilver did not start with TCP and UDP on one port");
    }

    /// Starts quicksilver with the native protocol on `ports` free consecutive UDP ports
    /// (--native-port), plus `args`.
    pub fn quicksilver_native(ports: u16, args: &[&str]) -> ServerProcess {
        for _attempt in 0..10 {
            let base = free_udp_ports(ports);
            if let Some(server) = Self::quicksilver_native_at(base, args) {
                return server;
            }
        }
        panic!("quicksilver did not start with native ports");
    }

    /// Starts quicksilver with the native protocol from UDP port `base`; `None` when it could
    /// not bind (or did not start).
    pub fn quicksilver_native_at(base: u16, args: &[&str]) -> Option<ServerProcess> {
        let base_text = base.to_string();
        let all: Vec<&str> =
            ["--native-port", base_text.as_str()].into_iter().chain(args.iter().copied()).collect();
        let mut server = Self::spawn_at("quicksilver", env!("CARGO_BIN_EXE_quicksilver"), free_port(), &all)?;
        server.native_port = base;
        Some(server)
    }

    /// Starts quicksilver with -S (SASL, binary protocol only) and the password file `pwdb`,
    /// plus `args`; it counts as started once it answers a binary VERSION.
    #[allow(dead_code)]
    pub fn quicksilver_sasl(pwdb: &std::path::Path, args: &[&str]) -> ServerProcess {
        for _attempt in 0..5 {
            let port = free_port();
            let port_text = port.to_string();
            let child = Command::new(env!("CARGO_BIN_EXE_quicksilver"))
                .args(["-p", &port_text, "-l", "127.0.0.1", "-S"])
                .args(args)
                .env("MEMCACHED_SASL_PWDB", pwdb)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start quicksilver -S");
            let mut server = ServerProcess { child, port, udp_port: 0, native_port: 0, name: "quicksilver" };
            let deadline = Instant::now() + START_TIMEOUT;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = server.child.try_wait() {
                    break;
                }
                let version = [0x80, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
                if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut reply = [0u8; 24];
                    if stream.write_all(&version).is_ok()
                        && stream.read_exact(&mut reply).is_ok()
                        && reply[0] == 0x81
                    {
                        return server;
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("quicksilver -S did not start");
    }

    /// Starts quicksilver with `args` (plus -p and -l 127.0.0.1), waiting until `ready(port)`
    /// (e.g. a TLS handshake and a version) succeeds.
    pub fn quicksilver_probed(args: &[&str], ready: impl Fn(u16) -> bool) -> ServerProcess {
        Self::program_probed("quicksilver", env!("CARGO_BIN_EXE_quicksilver"), args, ready)
    }

    /// Starts `program` with `args` (plus -p and -l 127.0.0.1), waiting until `ready(port)`.
    pub fn program_probed(
        name: &'static str,
        program: &str,
        args: &[&str],
        ready: impl Fn(u16) -> bool,
    ) -> ServerProcess {
        for _attempt in 0..5 {
            let port = free_port();
            let port_text = port.to_string();
            let mut command = Command::new(program);
            command.args(["-p", &port_text, "-l", "127.0.0.1"]).args(args);
            // QS_IO_BACKEND=epoll (or uring) runs every quicksilver on that backend.
            if let Ok(backend) = std::env::var("QS_IO_BACKEND") {
                if name == "quicksilver" && !args.iter().any(|arg| arg.contains("io_backend")) {
                    command.args(["-o", &format!("io_backend={backend}")]);
                }
            }
            command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
            let child = command.spawn().unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
            let mut server = ServerProcess { child, port, udp_port: 0, native_port: 0, name };
            let deadline = Instant::now() + START_TIMEOUT;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = server.child.try_wait() {
                    break;
                }
                if ready(port) {
                    return server;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("{name} did not start");
    }

    fn spawn(name: &'static str, program: &str, args: &[&str]) -> ServerProcess {
        for _attempt in 0..5 {
            if let Some(server) = Self::spawn_at(name, program, free_port(), args) {
                return server;
            }
        }
        panic!("{name} did not start");
    }

    /// Starts quicksilver with `args` on `port` (a restart where a client expects it); `None`
    /// when it does not answer there.
    pub fn quicksilver_on(port: u16, args: &[&str]) -> Option<ServerProcess> {
        Self::spawn_at("quicksilver", env!("CARGO_BIN_EXE_quicksilver"), port, args)
    }

    fn spawn_at(name: &'static str, program: &str, port: u16, args: &[&str]) -> Option<ServerProcess> {
        {
            let port_text = port.to_string();
            let mut command = Command::new(program);
            command.args(["-p", &port_text, "-l", "127.0.0.1"]).args(args);
            command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
            let child = command.spawn().unwrap_or_else(|e| {
                panic!("cannot start {program} (scripts/test.sh installs memcached): {e}")
            });
            let mut server = ServerProcess { child, port, udp_port: 0, native_port: 0, name };
            let binary_only = args.windows(2).any(|pair| pair == ["-B", "binary"]);
            server.wait_until_answering(binary_only).then_some(server)
        }
    }

    /// Whether it answers a version request (a binary one for a binary-only server).
    fn wait_until_answering(&mut self, binary_only: bool) -> bool {
        let deadline = Instant::now() + START_TIMEOUT;
        let binary_version = [0x80, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let probe: &[u8] = if binary_only { &binary_version } else { b"version\r\n" };
        let answer: &[u8] = if binary_only { &[0x81, 0x0b] } else { b"VERSION" };
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false; // exited (port taken?)
            }
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                if stream.write_all(probe).is_ok() {
                    let mut buf = [0u8; 64];
                    if let Ok(n) = stream.read(&mut buf) {
                        // With -Y, any answer means it serves (it asks for a login first).
                        if buf[..n].starts_with(answer)
                            || buf[..n].starts_with(b"CLIENT_ERROR unauthenticated")
                        {
                            return true;
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// A new client connection.
    pub fn connect(&self) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream.set_read_timeout(Some(REPLY_TIMEOUT)).expect("timeout");
        stream.set_nodelay(true).expect("nodelay");
        Client { stream, buf: Vec::new() }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` for the process to exit on its own; its status, or `None`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        // SAFETY: kill with a child pid we own.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(Instant::now() < deadline, "{} did not stop on SIGTERM", self.name);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking client connection for tests.
pub struct Client {
    /// The socket.
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    /// A client over an already connected stream.
    pub fn from_stream(stream: TcpStream) -> Client {
        Client { stream, buf: Vec::new() }
    }

    /// Sends bytes.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Reads until the bytes received end with `suffix`; returns them (without clearing
    /// anything that arrived after).
    pub fn read_until(&mut self, suffix: &[u8]) -> Vec<u8> {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            if let Some(end) = find(&self.buf, suffix) {
                let rest = self.buf.split_off(end + suffix.len());
                return std::mem::replace(&mut self.buf, rest);
            }
            assert!(Instant::now() < deadline, "timed out waiting for {:?}", String::from_utf8_lossy(suffix));
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => panic!(
                    "connection closed while waiting for {:?}; got {:?}",
                    String::from_utf8_lossy(suffix),
                    String::from_utf8_lossy(&self.buf)
                ),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("read: {e}; got {:?}", String::from_utf8_lossy(&self.buf)),
            }
        }
    }

    /// Sends `request` then `mn`, and returns everything before the `MN` (works for quiet
    /// and noreply requests, which answer nothing).
    pub fn call(&mut self, request: &[u8]) -> Vec<u8> {
        self.send(request);
        self.send(b"mn\r\n");
        let mut reply = self.read_until(b"MN\r\n");
        reply.truncate(reply.len() - 4);
        reply
    }

    /// As [`Client::call`], but `None` when the server closes the connection instead (what it
    /// sent before closing is dropped).
    pub fn try_call(&mut self, request: &[u8]) -> Option<Vec<u8>> {
        if self.stream.write_all(request).and_then(|_| self.stream.write_all(b"mn\r\n")).is_err() {
            return None;
        }
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            if let Some(end) = find(&self.buf, b"MN\r\n") {
                let rest = self.buf.split_off(end + 4);
                let mut reply = std::mem::replace(&mut self.buf, rest);
                reply.truncate(end);
                return Some(reply);
            }
            assert!(Instant::now() < deadline, "timed out; got {:?}", String::from_utf8_lossy(&self.buf));
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("read: {e}; got {:?}", String::from_utf8_lossy(&self.buf)),
            }
        }
    }

    /// Reads until the server closes the connection; returns what came before.
    pub fn read_to_close(&mut self) -> Vec<u8> {
        let mut all = std::mem::take(&mut self.buf);
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            assert!(Instant::now() < deadline, "the server did not close the connection");
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return all,
                Ok(n) => all.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return all,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// Stores `key` = `value` and checks the reply.
pub fn set(client: &mut Client, key: &str, value: &[u8]) {
    client.send(format!("set {key} 0 0 {}\r\n", value.len()).as_bytes());
    client.send(value);
    client.send(b"\r\n");
    assert_eq!(client.read_until(b"\r\n"), b"STORED\r\n", "set {key}");
}

/// A quicksilver holding the item `canary` = `alive`.
pub fn server_with_canary(args: &[&str]) -> ServerProcess {
    let server = ServerProcess::quicksilver(args);
    set(&mut server.connect(), "canary", b"alive");
    server
}

/// CPU time the process has used, user plus system, in clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // Fields after the command name (which may hold spaces) start at field 3 (state);
    // utime and stime are fields 14 and 15.
    let after_name = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// The process's resident memory (VmRSS), in bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()).expect("kB") * 1024
}

/// Reads `stats` into (name, value) pairs.
pub fn stats(client: &mut Client, group: &str) -> Vec<(String, String)> {
    let request = if group.is_empty() { "stats\r\n".to_string() } else { format!("stats {group}\r\n") };
    client.send(request.as_bytes());
    let reply = client.read_until(b"END\r\n");
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|line| {
            let mut parts = line.strip_prefix("STAT ")?.splitn(2, ' ');
            Some((parts.next()?.to_string(), parts.next()?.to_string()))
        })
        .collect()
}

/// One statistic as a number, from `stats` (memcached's) or else `stats quicksilver`.
pub fn stat(client: &mut Client, name: &str) -> u64 {
    let find =
        |client: &mut Client, group: &str| stats(client, group).into_iter().find(|(key, _)| key == name);
    find(client, "")
        .or_else(|| find(client, "quicksilver"))
        .unwrap_or_else(|| panic!("no stat {name}"))
        .1
        .parse()
        .expect("a number")
}

/// One datagram of a UDP reply: frame header fields and payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// Request id, sequence number, datagram count, reserved.
    pub header: [u16; 4],
    /// What follows the header.
    pub payload: Vec<u8>,
}

/// A memcached UDP client for tests.
pub struct UdpClient {
    /// Its socket.
    pub socket: std::net::UdpSocket,
    port: u16,
    next_id: u16,
}

impl UdpClient {
    /// A client of the server's UDP port.
    pub fn new(port: u16) -> UdpClient {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        UdpClient { socket, port, next_id: 1 }
    }

    /// Sends raw bytes as one datagram.
    pub fn send_raw(&self, datagram: &[u8]) {
        self.socket.send_to(datagram, ("127.0.0.1", self.port)).expect("send");
    }

    /// Sends `payload` behind a frame header (a fresh request id, sequence 0, count 1); the id.
    fn send_request(&mut self, payload: &[u8]) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut datagram =
            [id.to_be_bytes(), 0u16.to_be_bytes(), 1u16.to_be_bytes(), 0u16.to_be_bytes()].concat();
        datagram.extend_from_slice(payload);
        self.send_raw(&datagram);
        id
    }

    /// Sends `payload` behind a frame header (a fresh request id, sequence 0, count 1) and
    /// collects reply datagrams until one ends in `MN\r\n` (callers end their requests with
    /// `mn`), or `None` after a quiet second.
    pub fn exchange(&mut self, payload: &[u8]) -> Option<Vec<Datagram>> {
        let id = self.send_request(payload);
        self.receive_until_mn(id)
    }

    /// Sends `payload` as [`UdpClient::exchange`] does and collects the datagrams of one reply
    /// message (as many as their count says); `None` after a quiet second.
    #[allow(dead_code)]
    pub fn exchange_message(&mut self, payload: &[u8]) -> Option<Vec<Datagram>> {
        let id = self.send_request(payload);
        self.socket.set_read_timeout(Some(Duration::from_secs(1))).expect("timeout");
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            let len = self.socket.recv(&mut buf).ok()?;
            let field = |at: usize| u16::from_be_bytes([buf[at], buf[at + 1]]);
            if len < 8 || field(0) != id {
                continue;
            }
            let count = field(4);
            got.push(Datagram {
                header: [field(0), field(2), count, field(6)],
                payload: buf[8..len].to_vec(),
            });
            if got.len() >= usize::from(count) {
                return Some(got);
            }
        }
    }

    /// Collects datagrams of request `id` until one ends in `MN\r\n`; `None` after a quiet second.
    pub fn receive_until_mn(&mut self, id: u16) -> Option<Vec<Datagram>> {
        self.socket.set_read_timeout(Some(Duration::from_secs(1))).expect("timeout");
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            let len = self.socket.recv(&mut buf).ok()?;
            assert!(len >= 8, "a reply datagram shorter than its header");
            let field = |at: usize| u16::from_be_bytes([buf[at], buf[at + 1]]);
            let datagram =
                Datagram { header: [field(0), field(2), field(4), field(6)], payload: buf[8..len].to_vec() };
            if datagram.header[0] != id {
                continue; // a late reply to an earlier request
            }
            let done = datagram.payload.ends_with(b"MN\r\n");
            got.push(datagram);
            if done {
                return Some(got);
            }
        }
    }
}

/// A reply's lines with what differs between servers by design masked: the version string and
/// CAS uniques (the last one seen is noted in `last_cas`, for a following `{cas}`). With
/// `clock`, also meta TTLs (to the nearest ten seconds) and idle times, which a second passing
/// between two runs changes.
/// The lines of an `lru_crawler metadump` (each ends in a bare `\n`; the `\r\n` of `END`
/// follows the last): clock readings, CAS uniques and sizes masked (sizes differ by design,
/// docs/COMPATIBILITY.md), in sorted order (the order is each server's walk).
fn mask_dump(lines: &str) -> String {
    // The line the dump ends with (`END`, or a refusal) follows the last bare `\n`.
    let (lines, end) = lines.rsplit_once('\n').unwrap_or(("", lines));
    let mut masked: Vec<String> = lines
        .split('\n')
        .map(|line| {
            line.split(' ')
                .map(|field| match field.split_once('=') {
                    Some(("exp", "-1")) => field.to_string(),
                    Some((name @ ("exp" | "la" | "cas" | "size"), _)) => format!("{name}=<n>"),
                    _ => field.to_string(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    masked.sort();
    masked.join("\n") + "\n" + end
}

pub fn mask_reply(reply: &[u8], last_cas: &mut String, clock: bool) -> Vec<String> {
    let text = String::from_utf8_lossy(reply);
    let mut lines = Vec::new();
    for line in text.split("\r\n") {
        if line.starts_with("key=") {
            lines.push(mask_dump(line));
            continue;
        }
        let mut tokens: Vec<String> = line.split(' ').map(str::to_string).collect();
        if tokens[0] == "VERSION" {
            // Each server names its own version (docs/COMPATIBILITY.md).
            tokens.truncate(1);
        }
        if tokens[0] == "VALUE" && tokens.len() == 5 {
            *last_cas = tokens[4].clone();
            tokens[4] = "<cas>".into();
        }
        if matches!(tokens[0].as_str(), "VA" | "HD" | "NS" | "EX" | "NF") {
            for token in tokens.iter_mut().skip(1) {
                let (letter, number) = token.split_at(1.min(token.len()));
                let numeric = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit());
                match letter {
                    "c" if numeric => {
                        *last_cas = number.to_string();
                        *token = "c<cas>".into();
                    }
                    "t" if numeric && clock => {
                        *token = format!("t~{}", (number.parse::<u64>().unwrap_or(0) + 5) / 10);
                    }
                    "l" if numeric && clock => *token = "l<secs>".into(),
                    _ => {}
                }
            }
        }
        lines.push(tokens.join(" "));
    }
    lines
}

/// A memory file for `-e`, on tmpfs where there is one (as memcached recommends), removed when
/// dropped with what the server keeps beside it (`.meta`, `.index`).
pub struct MemoryFile(pub std::path::PathBuf);

impl MemoryFile {
    /// A fresh one named after `name` and this process.
    pub fn new(name: &str) -> MemoryFile {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            std::path::PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let file = MemoryFile(dir.join(format!("qs-e-{name}-{}", std::process::id())));
        file.clean();
        file
    }

    fn clean(&self) {
        let _ = std::fs::remove_file(&self.0);
        let prefix = format!("{}.", self.0.file_name().and_then(|name| name.to_str()).expect("utf-8"));
        if let Ok(entries) = std::fs::read_dir(self.0.parent().expect("a directory")) {
            for entry in entries.flatten() {
                if entry.file_name().to_str().is_some_and(|other| other.starts_with(&prefix)) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }

    /// The path, as -e takes it.
    pub fn arg(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }

    /// memcached's metadata file beside it.
    pub fn meta(&self) -> std::path::PathBuf {
        std::path::PathBuf::from(format!("{}.meta", self.arg()))
    }
}

impl Drop for MemoryFile {
    fn drop(&mut self) {
        self.clean();
    }
}

/// `stats` names as memcached 1.6.45 lists them, from a list of Debian's 1.6.18 (the live
/// oracle in CI): the slab mover's `evictions_nomem` gave way to `busy_nomem` and
/// `last_busy_status`.
pub fn stat_names_of_1_6_45(names: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(names.len() + 1);
    for name in names {
        if name == "slab_reassign_evictions_nomem" {
            continue;
        }
        let busy_deletes = name == "slab_reassign_busy_deletes";
        out.push(name);
        if busy_deletes {
            out.push("slab_reassign_busy_nomem".into());
            out.push("slab_reassign_last_busy_status".into());
        }
    }
    out
}

/// Readers, one thread per client in `readers`, each reading the key's version (a decimal
/// number) with `read` until `writes` has written versions 1 to `versions` (acknowledged one by
/// one) and 200 ms more have passed; fails if a read returns a version older than one whose
/// write was acknowledged before the read was sent. Returns the reads made.
pub fn reads_never_go_back(
    readers: Vec<Client>,
    read: fn(&mut Client) -> Option<Vec<u8>>,
    (versions, mut write): (u64, impl FnMut(u64)),
) -> u64 {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let acknowledged = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = readers
        .into_iter()
        .map(|mut client| {
            let (acknowledged, done) = (acknowledged.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !done.load(Ordering::Acquire) {
                    let floor = acknowledged.load(Ordering::Acquire);
                    let value = read(&mut client).expect("the key is always there");
                    let version: u64 = String::from_utf8(value).unwrap().parse().unwrap();
                    assert!(version >= floor, "read version {version} after {floor} was acknowledged");
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for version in 1..=versions {
        write(version);
        acknowledged.store(version, Ordering::Release);
    }
    // Then nothing changes for a while: the other worker's readers are served from the front.
    std::thread::sleep(Duration::from_millis(200));
    done.store(true, Ordering::Release);
    threads.into_iter().map(|thread| thread.join().unwrap()).sum()
}
