//! Nobody in without credentials: every listener kind (plain, `proto[ascii|binary|negotiating]`,
//! TLS, `notls:`, a UNIX socket) under every authentication mode (-Y, -S, none), probed in
//! both dialects with data and admin commands. A listener whose dialect cannot authenticate
//! under the mode is refused at start; on every other one, nothing is served before the
//! connection authenticates. The real server binary, over sockets.

mod common;

use qs_proto::binary::{opcode, request_frame, status};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How the server authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    None,
    /// -Y: ASCII authentication.
    Ascii,
    /// -S: SASL over the binary protocol.
    Sasl,
}

/// Which listener the probes go through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Plain,
    Ascii,
    Binary,
    Negotiating,
    Tls,
    NoTls,
    Unix,
}

const KINDS: [Kind; 7] =
    [Kind::Plain, Kind::Ascii, Kind::Binary, Kind::Negotiating, Kind::Tls, Kind::NoTls, Kind::Unix];

/// A scratch directory with an auth file (`foo:bar`) for both modes.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("qs-auth-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        std::fs::write(dir.join("users"), b"foo:bar\n").expect("auth file");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The command line for `mode` and `kind` on `port` (a UNIX socket in `dir` for `Kind::Unix`).
fn args(mode: Mode, kind: Kind, port: u16, dir: &Path) -> Vec<String> {
    let mut args: Vec<String> = vec!["-t".into(), "1".into(), "-U".into(), "0".into()];
    match mode {
        Mode::None => {}
        Mode::Ascii => args.extend(["-Y".into(), dir.join("users").display().to_string()]),
        Mode::Sasl => args.push("-S".into()),
    }
    let listen = match kind {
        Kind::Plain | Kind::Tls => format!("127.0.0.1:{port}"),
        Kind::Ascii => format!("proto[ascii]:127.0.0.1:{port}"),
        Kind::Binary => format!("proto[binary]:127.0.0.1:{port}"),
        Kind::Negotiating => format!("proto[negotiating]:127.0.0.1:{port}"),
        Kind::NoTls => format!("notls:127.0.0.1:{port}"),
        Kind::Unix => {
            args.extend(["-s".into(), dir.join("sock").display().to_string()]);
            return args;
        }
    };
    args.extend(["-l".into(), listen]);
    if matches!(kind, Kind::Tls | Kind::NoTls) {
        let cert = common::tls::cert_path;
        args.extend([
            "-Z".into(),
            "-o".into(),
            format!("ssl_chain_cert={},ssl_key={}", cert("server.pem"), cert("server.key")),
        ]);
    }
    args
}

/// A started server, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    kind: Kind,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection through any listener kind.
trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

impl Server {
    /// Starts the server, or returns its standard error when it refuses to start.
    fn start(mode: Mode, kind: Kind, dir: &Path) -> Result<Server, String> {
        let port = common::free_tcp_ports(1);
        let child = Command::new(env!("CARGO_BIN_EXE_quicksilver"))
            .args(args(mode, kind, port, dir))
            .env("MEMCACHED_SASL_PWDB", dir.join("users"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start quicksilver");
        // Killed and waited for when dropped, whichever way this ends.
        let mut server = Server { child, port, kind, dir: dir.to_path_buf() };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if !server.alive() {
                let mut stderr = String::new();
                let _ = server.child.stderr.take().map(|mut pipe| pipe.read_to_string(&mut stderr));
                return Err(stderr);
            }
            let up = match kind {
                Kind::Unix => UnixStream::connect(dir.join("sock")).is_ok(),
                _ => TcpStream::connect(("127.0.0.1", port)).is_ok(),
            };
            if up {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("quicksilver did not start");
    }

    fn connect(&self) -> Box<dyn Stream> {
        let quiet = Some(Duration::from_millis(300));
        match self.kind {
            Kind::Unix => {
                let stream = UnixStream::connect(self.dir.join("sock")).expect("connect");
                stream.set_read_timeout(quiet).expect("timeout");
                Box::new(stream)
            }
            Kind::Tls => {
                let stream = common::tls::connect(self.port).expect("TLS handshake");
                stream.sock.set_read_timeout(quiet).expect("timeout");
                Box::new(stream)
            }
            _ => {
                let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
                stream.set_read_timeout(quiet).expect("timeout");
                Box::new(stream)
            }
        }
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Sends `request` and reads until the server closes or says nothing for 300 ms.
fn exchange(stream: &mut dyn Stream, request: &[u8]) -> (Vec<u8>, bool) {
    if stream.write_all(request).and_then(|()| stream.flush()).is_err() {
        return (Vec::new(), true);
    }
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (reply, true),
            Ok(read) => reply.extend_from_slice(&buf[..read]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return (reply, false);
            }
            Err(_) => return (reply, true),
        }
    }
}

const TEXT_PROBES: &[&[u8]] = &[
    b"set k 0 0 1\r\nx\r\n",
    b"get k\r\n",
    b"ms k 1\r\nx\r\n",
    b"mg k v\r\n",
    b"stats\r\n",
    b"stats detail dump\r\n",
    b"watch\r\n",
    b"lru_crawler metadump all\r\n",
    b"lru_crawler mgdump all\r\n",
    b"verbosity 1\r\n",
    b"flush_all\r\n",
    b"shutdown\r\n",
];

fn binary_probes() -> Vec<Vec<u8>> {
    let set_extras = [0u8; 8];
    vec![
        request_frame(opcode::SET, 1, 0, &set_extras, b"k", b"x"),
        request_frame(opcode::GET, 2, 0, &[], b"k", b""),
        request_frame(opcode::STAT, 3, 0, &[], b"", b""),
        request_frame(opcode::VERBOSITY, 4, 0, &[0, 0, 0, 1], b"", b""),
        request_frame(opcode::FLUSH, 5, 0, &[], b"", b""),
        request_frame(opcode::NOOP, 6, 0, &[], b"", b""),
    ]
}

/// Whether a reply shows a request served: a text success, or a binary response whose
/// status is 0.
fn served(reply: &[u8]) -> bool {
    if reply.first() == Some(&0x81) {
        let mut at = 0;
        while reply.len() >= at + 24 {
            let status = u16::from_be_bytes([reply[at + 6], reply[at + 7]]);
            if status == 0 {
                return true;
            }
            let body = u32::from_be_bytes(reply[at + 8..at + 12].try_into().unwrap()) as usize;
            at += 24 + body;
        }
        return false;
    }
    let text = String::from_utf8_lossy(reply);
    ["STORED", "VALUE", "STAT ", "OK\r\n", "END\r\n", "HD", "VA ", "EN\r\n", "key=", "mg "]
        .iter()
        .any(|word| text.contains(word))
}

/// Authenticates in the dialect the mode takes; true when the server accepted it.
fn authenticate(stream: &mut dyn Stream, mode: Mode) -> bool {
    match mode {
        Mode::None => true,
        Mode::Ascii => exchange(stream, b"set auth 0 0 7\r\nfoo bar\r\n").0 == b"STORED\r\n",
        Mode::Sasl => {
            let frame = request_frame(opcode::SASL_AUTH, 9, 0, &[], b"PLAIN", b"\0foo\0bar");
            let reply = exchange(stream, &frame).0;
            reply.len() >= 24 && reply[6..8] == [0, 0]
        }
    }
}

/// Whether `k` is stored, asked in the mode's dialect after authenticating.
fn stored(server: &Server, mode: Mode) -> bool {
    let mut stream = server.connect();
    assert!(
        authenticate(&mut *stream, mode),
        "{mode:?} {:?}: the right credentials were refused",
        server.kind
    );
    match mode {
        Mode::Sasl => {
            let reply = exchange(&mut *stream, &request_frame(opcode::GET, 1, 0, &[], b"k", b"")).0;
            assert!(reply.len() >= 24, "{:?}: no reply to an authenticated get", server.kind);
            u16::from_be_bytes([reply[6], reply[7]]) == status::NO_ERROR
        }
        _ => exchange(&mut *stream, b"get k\r\n").0.starts_with(b"VALUE"),
    }
}

/// Which listener kinds a mode refuses at start (their dialect cannot authenticate).
fn refused(mode: Mode, kind: Kind) -> bool {
    matches!(
        (mode, kind),
        (Mode::Ascii, Kind::Binary | Kind::Negotiating) | (Mode::Sasl, Kind::Ascii | Kind::Negotiating)
    )
}

#[test]
fn no_listener_serves_anything_before_authentication_under_either_mode() {
    let scratch = Scratch::new("matrix");
    for mode in [Mode::Ascii, Mode::Sasl] {
        for kind in KINDS {
            let started = Server::start(mode, kind, &scratch.0);
            if refused(mode, kind) {
                let stderr = started.err().unwrap_or_else(|| panic!("{mode:?} {kind:?} started"));
                assert!(stderr.contains("every listener must be"), "{mode:?} {kind:?}: {stderr}");
                continue;
            }
            let mut server = started.unwrap_or_else(|stderr| panic!("{mode:?} {kind:?} refused: {stderr}"));
            let probes = TEXT_PROBES.iter().map(|probe| probe.to_vec()).chain(binary_probes());
            for probe in probes {
                let mut stream = server.connect();
                let (reply, _closed) = exchange(&mut *stream, &probe);
                assert!(
                    !served(&reply),
                    "{mode:?} {kind:?}: {:?} served before authentication: {:?}",
                    String::from_utf8_lossy(&probe),
                    String::from_utf8_lossy(&reply)
                );
            }
            assert!(server.alive(), "{mode:?} {kind:?}: an unauthenticated shutdown stopped the server");
            assert!(!stored(&server, mode), "{mode:?} {kind:?}: an unauthenticated set stored its value");
        }
    }
}

#[test]
fn without_authentication_every_listener_kind_serves() {
    let scratch = Scratch::new("open");
    for kind in KINDS {
        let server = Server::start(Mode::None, kind, &scratch.0).expect("starts");
        let mut stream = server.connect();
        if kind == Kind::Binary {
            let set = request_frame(opcode::SET, 1, 0, &[0; 8], b"k", b"x");
            assert!(served(&exchange(&mut *stream, &set).0), "{kind:?}");
        } else {
            assert_eq!(exchange(&mut *stream, b"set k 0 0 1\r\nx\r\n").0, b"STORED\r\n", "{kind:?}");
        }
        assert!(stored(&server, Mode::None) || kind == Kind::Binary, "{kind:?}");
    }
}

/// memcached's `dispatch_bin_command`: an unauthenticated binary frame is refused once its
/// header, extras and key are in, its body never read; 100 connections announcing 1 MB
/// values each leave the server's memory where it was.
#[test]
fn an_unauthenticated_binary_frame_is_refused_before_its_body() {
    let scratch = Scratch::new("body");
    let server = Server::start(Mode::Sasl, Kind::Plain, &scratch.0).expect("starts");
    let pid = server.child.id();
    let before = common::rss_bytes(pid);
    let value = vec![b'v'; 1 << 20];
    let frame = request_frame(opcode::SET, 7, 0, &[0; 8], b"big", &value);
    let mut streams = Vec::new();
    for _ in 0..100 {
        let mut stream = server.connect();
        // The header, extras and key, then part of the body: the refusal comes at once.
        let (reply, closed) = exchange(&mut *stream, &frame[..24 + 8 + 3 + 4096]);
        assert!(reply.len() >= 24 && reply[6..8] == status::AUTH_ERROR.to_be_bytes(), "{reply:?}");
        assert!(closed, "the connection is closed after the refusal");
        streams.push(stream);
    }
    // A SASL frame announcing a body longer than any credential is refused the same way.
    let mut stream = server.connect();
    let long = request_frame(opcode::SASL_AUTH, 8, 0, &[], b"PLAIN", &value);
    let (reply, closed) = exchange(&mut *stream, &long[..24 + 5 + 100]);
    assert!(reply.len() >= 24 && reply[6..8] == status::AUTH_ERROR.to_be_bytes() && closed, "{reply:?}");
    let after = common::rss_bytes(pid);
    assert!(after < before + (8 << 20), "RSS went from {before} to {after} bytes");
    assert!(!stored(&server, Mode::Sasl));
}
