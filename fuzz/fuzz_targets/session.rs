//! A real connection state machine over arbitrary bytes: three servers run in this process,
//! each with two workers on the smallest partitions `-m 8` makes (2 MiB), so keys are handed
//! between workers (no authentication with plain, `proto[ascii]`, `proto[binary]`,
//! `proto[negotiating]` and `proto[resp]` listeners; -Y; -S). Each input picks one listener
//! and, with its third byte, a large value (up to the item size limit) stored first in that
//! listener's dialect under a key it picks; its bytes are sent over a real socket in pieces
//! it picks, then the client closes its side and reads until the server closes. Invariants:
//! no panic (a worker's panic aborts); nothing is served before authentication unless the
//! auth file's credentials (foo, bar) were sent; the server closes the connection (its defined
//! end); once it has, the client memory budget holds nothing for it; and every worker still
//! answers (fresh connections to the text and RESP listeners, spread over the workers).
#![no_main]

use clap::Parser;
use libfuzzer_sys::fuzz_target;
use qs_server::config::Config;
use qs_server::Server;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

/// How long the server may take to close once the client has closed its side.
const END_WITHIN: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Open,
    Ascii,
    Sasl,
}

struct Running {
    server: Server,
    ports: Vec<u16>,
    mode: Mode,
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

fn start(mode: Mode, dir: &std::path::Path) -> Running {
    let ports: Vec<u16> = (0..if mode == Mode::Open { 5 } else { 1 }).map(|_| free_port()).collect();
    let listen = match mode {
        Mode::Open => format!(
            "127.0.0.1:{},proto[ascii]:127.0.0.1:{},proto[binary]:127.0.0.1:{},proto[negotiating]:127.0.0.1:{},\
             proto[resp]:127.0.0.1:{}",
            ports[0], ports[1], ports[2], ports[3], ports[4]
        ),
        _ => format!("127.0.0.1:{}", ports[0]),
    };
    let users = dir.join("users").display().to_string();
    let mut args = vec!["quicksilver", "-U", "0", "-t", "2", "-m", "8", "-c", "64", "-l", &listen];
    match mode {
        Mode::Open => {}
        Mode::Ascii => args.extend(["-Y", &users]),
        Mode::Sasl => args.push("-S"),
    }
    let config = Config::try_parse_from(&args).expect("command line");
    let server = Server::start(config).expect("server starts");
    Running { server, ports, mode }
}

fn servers() -> &'static [Running; 3] {
    static SERVERS: OnceLock<[Running; 3]> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("qs-fuzz-session-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        std::fs::write(dir.join("users"), b"foo:bar\n").expect("auth file");
        // Read by -S at start; set before any server thread runs.
        std::env::set_var("MEMCACHED_SASL_PWDB", dir.join("users"));
        [start(Mode::Open, &dir), start(Mode::Ascii, &dir), start(Mode::Sasl, &dir)]
    })
}

/// Whether a reply shows a request served: a text success, or a binary response whose status
/// is 0 to anything but VERSION and the SASL mechanisms (which need no authentication).
fn served(reply: &[u8]) -> bool {
    if reply.first() == Some(&0x81) {
        let mut at = 0;
        while reply.len() >= at + 24 {
            let opcode = reply[at + 1];
            let status = u16::from_be_bytes([reply[at + 6], reply[at + 7]]);
            if status == 0 && opcode != 0x0b && opcode != 0x20 {
                return true;
            }
            let body = u32::from_be_bytes(reply[at + 8..at + 12].try_into().expect("four bytes")) as usize;
            at += 24 + body;
        }
        return false;
    }
    let text = String::from_utf8_lossy(reply);
    ["STORED", "VALUE", "STAT ", "OK\r\n", "END\r\n", "HD", "VA ", "EN\r\n", "key=", "DELETED", "NOT_"]
        .iter()
        .any(|word| text.contains(word))
}

/// What the server says of its connections (for a failure's message).
fn connections(running: &Running) -> String {
    let shared = running.server.shared();
    format!(
        "curr_connections {}, client memory used {}",
        shared.connections.open(),
        shared.client_memory.used()
    )
}

/// The index of the Open server's RESP listener among its ports.
const RESP_PORT: usize = 4;

/// A store of `len` bytes under key `big<n>` (`n` picks the key, so its owner), in the
/// dialect of listener `which` (its binary one gets none: its frames carry their own lengths,
/// which the fuzzer writes).
fn large_store(which: usize, n: u8, len: usize) -> Vec<u8> {
    let key = format!("big{}", n % 16);
    let mut out = match which {
        RESP_PORT => format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${len}\r\n", key.len()).into_bytes(),
        2 => return Vec::new(),
        _ => format!("set {key} 0 0 {len}\r\n").into_bytes(),
    };
    out.resize(out.len() + len, b'v');
    out.extend_from_slice(b"\r\n");
    out
}

/// Whether every worker still answers: fresh connections (spread over the workers) to the
/// Open server's text and RESP listeners each get their reply.
fn every_worker_answers(running: &Running) {
    for n in 0..4 {
        for (port, ask, want) in
            [(running.ports[0], &b"version\r\n"[..], &b"VERSION"[..]), (running.ports[RESP_PORT], b"PING\r\n", b"+PONG")]
        {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            stream.set_read_timeout(Some(END_WITHIN)).expect("timeout");
            stream.write_all(ask).expect("ask");
            let mut reply = vec![0u8; want.len()];
            let answered = stream.read_exact(&mut reply).is_ok() && reply == want;
            assert!(answered, "connection {n} to port {port} got no answer: {}", connections(running));
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let [pick, cut, grow, data @ ..] = input else { return };
    let servers = servers();
    let running = &servers[usize::from(*pick) % 3];
    let which = usize::from(*pick / 3) % running.ports.len();
    let port = running.ports[which];
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(END_WITHIN)).expect("timeout");
    stream.set_write_timeout(Some(END_WITHIN)).expect("timeout");
    let _ = stream.set_nodelay(true);
    // A value of up to the item size limit (-I, 1 MiB) first, on the Open server.
    if *grow > 0 && running.mode == Mode::Open {
        let len = (usize::from(*grow) * 4099).min((1 << 20) - 64);
        let _ = stream.write_all(&large_store(which, *cut, len));
    }
    let cut = usize::from(*cut).max(1);
    for piece in data.chunks(cut) {
        if stream.write_all(piece).is_err() {
            break;
        }
    }
    let _ = stream.shutdown(Shutdown::Write);
    let mut reply = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the server did not end the connection within {END_WITHIN:?} ({e}); it sent {:?}; {}",
                String::from_utf8_lossy(&reply[reply.len().saturating_sub(300)..]),
                connections(running)
            ),
        }
    }
    let credentials: &[u8] = match running.mode {
        Mode::Open => b"",
        Mode::Ascii => b"foo bar",
        Mode::Sasl => b"\0foo\0bar",
    };
    if running.mode != Mode::Open && !data.windows(credentials.len()).any(|window| window == credentials) {
        assert!(!served(&reply), "served before authentication: {:?}", String::from_utf8_lossy(&reply));
    }
    // Closed: what it held is back in the budget (a worker releases before it closes).
    let used = running.server.shared().client_memory.used();
    assert_eq!(used, 0, "the client memory budget holds {used} bytes after the connection closed");
    if running.mode == Mode::Open {
        every_worker_answers(running);
    }
});
