//! A real connection state machine over arbitrary bytes: three servers run in this process
//! (no authentication with plain, `proto[ascii]`, `proto[binary]` and `proto[negotiating]`
//! listeners; -Y; -S), and each input picks one listener, is sent over a real socket in pieces
//! it picks, then the client closes its side and reads until the server closes. Invariants:
//! no panic (a worker's panic aborts); nothing is served before authentication unless the
//! auth file's credentials (foo, bar) were sent; the server closes the connection (its defined
//! end); once it has, the client memory budget holds nothing for it.
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
    let ports: Vec<u16> = (0..if mode == Mode::Open { 4 } else { 1 }).map(|_| free_port()).collect();
    let listen = match mode {
        Mode::Open => format!(
            "127.0.0.1:{},proto[ascii]:127.0.0.1:{},proto[binary]:127.0.0.1:{},proto[negotiating]:127.0.0.1:{}",
            ports[0], ports[1], ports[2], ports[3]
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

fuzz_target!(|input: &[u8]| {
    let [pick, cut, data @ ..] = input else { return };
    let servers = servers();
    let running = &servers[usize::from(*pick) % 3];
    let port = running.ports[usize::from(*pick / 3) % running.ports.len()];
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(END_WITHIN)).expect("timeout");
    stream.set_write_timeout(Some(END_WITHIN)).expect("timeout");
    let _ = stream.set_nodelay(true);
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
});
