//! TLS (-Z) end to end: the real server binary and a rustls client over loopback.
//! memcached's own ssl_*.t files run in scripts/memcached-t.sh; pymemcache's TLS client and
//! `openssl s_client` in tests/interop.rs. Certificates: tests/tls/ (tests/tls/gen.sh).

mod common;

use common::tls::{cert_path, client_config, ALL_VERSIONS};
use common::ServerProcess;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn server_args() -> Vec<String> {
    vec![
        "-Z".into(),
        "-o".into(),
        format!("ssl_chain_cert={},ssl_key={}", cert_path("server.pem"), cert_path("server.key")),
    ]
}

/// A blocking TLS client.
struct TlsClient {
    stream: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
}

impl TlsClient {
    /// Connects and finishes the handshake (from the client's side).
    fn connect(port: u16, config: Arc<rustls::ClientConfig>) -> io::Result<TlsClient> {
        Ok(TlsClient { stream: common::tls::connect_with(port, config)? })
    }

    fn plain(port: u16) -> TlsClient {
        TlsClient::connect(port, client_config(None, ALL_VERSIONS)).expect("TLS connect")
    }

    /// Sends `request` and reads until the reply ends with `suffix`.
    fn call_until(&mut self, request: &[u8], suffix: &[u8]) -> io::Result<Vec<u8>> {
        self.stream.write_all(request)?;
        self.stream.flush()?;
        let mut reply = Vec::new();
        let mut buf = [0u8; 65536];
        while !reply.ends_with(suffix) {
            let read = self.stream.read(&mut buf)?;
            if read == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            reply.extend_from_slice(&buf[..read]);
        }
        Ok(reply)
    }

    fn call(&mut self, request: &[u8]) -> Vec<u8> {
        self.call_until(request, b"\r\n").expect("reply")
    }

    fn stats(&mut self, group: &str) -> Vec<(String, String)> {
        let request = if group.is_empty() { "stats\r\n".to_string() } else { format!("stats {group}\r\n") };
        let reply = self.call_until(request.as_bytes(), b"END\r\n").expect("stats");
        String::from_utf8_lossy(&reply)
            .lines()
            .filter_map(|line| line.strip_prefix("STAT "))
            .filter_map(|line| line.split_once(' '))
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    fn stat(&mut self, name: &str) -> String {
        self.stats("").into_iter().find(|(key, _)| key == name).map(|(_, value)| value).unwrap_or_default()
    }

    fn peer_certificate(&self) -> Vec<u8> {
        self.stream.conn.peer_certificates().and_then(|certs| certs.first()).expect("server cert").to_vec()
    }
}

/// Whether a TLS client completes a version request on `port`.
fn answers_tls(port: u16) -> bool {
    TlsClient::connect(port, client_config(Some("client"), ALL_VERSIONS))
        .and_then(|mut client| client.call_until(b"version\r\n", b"\r\n"))
        .is_ok_and(|reply| reply.starts_with(b"VERSION"))
}

fn tls_server(extra: &[&str]) -> ServerProcess {
    let mut args = server_args();
    args.extend(extra.iter().map(|arg| arg.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ServerProcess::quicksilver_probed(&args, answers_tls)
}

/// Whether a connection that sends `request` gets a reply: false when the server closes it
/// (or fails it) without one.
fn refused(mut client: TlsClient) -> bool {
    match client.call_until(b"version\r\n", b"\r\n") {
        Ok(reply) => !reply.starts_with(b"VERSION"),
        Err(_) => true,
    }
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::pem_file_iter(cert_path(pem)).expect("pem").next().expect("one").expect("cert").to_vec()
}

/// Reads until the peer closes (or `limit` passes): whether it closed.
fn closes_within(stream: &mut TcpStream, limit: Duration) -> bool {
    stream.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(error) if matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn tls_serves_every_protocol_with_large_values_and_pipelines() {
    let server = tls_server(&["-t", "2"]);
    let mut client = TlsClient::plain(server.port);
    // A 1 MiB value each way: larger than ssl_wbuf_size and the socket buffers.
    let value: Vec<u8> = (0..1_048_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut request = format!("set big 7 0 {}\r\n", value.len()).into_bytes();
    request.extend_from_slice(&value);
    request.extend_from_slice(b"\r\n");
    assert_eq!(client.call(&request), b"STORED\r\n");
    let reply = client.call_until(b"get big\r\n", b"END\r\n").expect("get big");
    let mut expected = format!("VALUE big 7 {}\r\n", value.len()).into_bytes();
    expected.extend_from_slice(&value);
    expected.extend_from_slice(b"\r\nEND\r\n");
    assert!(reply == expected, "1 MiB value differs after TLS ({} bytes back)", reply.len());
    // 500 pipelined sets and gets in one write.
    let mut pipeline = Vec::new();
    for i in 0..500 {
        pipeline.extend_from_slice(format!("set k{i} 0 0 {}\r\nv{i}\r\n", format!("v{i}").len()).as_bytes());
    }
    for i in 0..500 {
        pipeline.extend_from_slice(format!("get k{i}\r\n").as_bytes());
    }
    pipeline.extend_from_slice(b"mn\r\n");
    let reply = client.call_until(&pipeline, b"MN\r\n").expect("pipeline");
    let text = String::from_utf8_lossy(&reply);
    assert_eq!(text.matches("STORED\r\n").count(), 500);
    for i in [0, 1, 250, 499] {
        assert!(text.contains(&format!("VALUE k{i} 0 {}\r\nv{i}\r\n", format!("v{i}").len())), "k{i}");
    }
    // Meta and binary protocol on TLS connections (the first byte picks, as in plaintext).
    assert_eq!(client.call(b"mg k7 v\r\n"), b"VA 2\r\nv7\r\n");
    let mut binary = TlsClient::plain(server.port);
    let noop = [0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    binary.stream.write_all(&noop).expect("binary noop");
    let mut header = [0u8; 24];
    binary.stream.read_exact(&mut header).expect("binary reply");
    assert_eq!(&header[..2], &[0x81, 0x0a]);
    assert_eq!(client.stat("ssl_handshake_errors"), "0");
}

#[test]
fn a_notls_listener_serves_plaintext_beside_tls() {
    let plain_port = common::free_tcp_ports(1);
    let listen = format!("notls:127.0.0.1:{plain_port}");
    let server = tls_server(&["-l", &listen]);
    let mut tls = TlsClient::plain(server.port);
    assert_eq!(tls.call(b"set shared 0 0 5\r\nhello\r\n"), b"STORED\r\n");
    let mut plain = TcpStream::connect(("127.0.0.1", plain_port)).expect("plaintext listener");
    plain.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    plain.write_all(b"get shared\r\n").expect("send");
    let mut reply = Vec::new();
    let mut buf = [0u8; 1024];
    while !reply.ends_with(b"END\r\n") {
        let read = plain.read(&mut buf).expect("plaintext reply");
        assert!(read > 0, "closed: {reply:?}");
        reply.extend_from_slice(&buf[..read]);
    }
    assert_eq!(reply, b"VALUE shared 0 5\r\nhello\r\nEND\r\n");
}

#[test]
fn bad_clients_are_closed_and_counted_and_nothing_else_changes() {
    let server = tls_server(&[]);
    let mut good = TlsClient::plain(server.port);
    assert_eq!(good.call(b"set canary 0 0 5\r\nalive\r\n"), b"STORED\r\n");
    let errors = |client: &mut TlsClient| client.stat("ssl_handshake_errors").parse::<u64>().expect("errors");
    let before = errors(&mut good);
    // A plaintext client on the TLS port.
    let mut plain = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    plain.write_all(b"get canary\r\n").expect("send");
    assert!(closes_within(&mut plain, Duration::from_secs(5)), "plaintext client not closed");
    // A truncated handshake: the start of a ClientHello record, then the client goes away.
    let mut truncated = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    truncated.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]).expect("send");
    truncated.shutdown(std::net::Shutdown::Write).expect("half close");
    assert!(closes_within(&mut truncated, Duration::from_secs(5)), "truncated handshake not closed");
    // Garbage in a record header's place.
    let mut garbage = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    garbage.write_all(&[0xff; 64]).expect("send");
    assert!(closes_within(&mut garbage, Duration::from_secs(5)), "garbage not closed");
    // An oversized handshake record length.
    let mut oversized = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    oversized.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff]).expect("send");
    oversized.write_all(&[0u8; 4096]).expect("send");
    assert!(closes_within(&mut oversized, Duration::from_secs(5)), "oversized record not closed");
    let deadline = Instant::now() + Duration::from_secs(5);
    while errors(&mut good) < before + 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(errors(&mut good), before + 4, "each bad client is one handshake error");
    // The established connection and the stored item are untouched.
    assert_eq!(
        good.call_until(b"get canary\r\n", b"END\r\n").expect("get"),
        b"VALUE canary 0 5\r\nalive\r\nEND\r\n"
    );
    assert!(answers_tls(server.port));
}

#[test]
fn stalled_handshakes_cost_nothing_while_waiting_and_are_closed_at_their_deadline() {
    let server = tls_server(&["-o", "ssl_handshake_timeout=2", "-c", "4096"]);
    let mut good = TlsClient::plain(server.port);
    let rss_before = common::rss_bytes(server.pid());
    // 100 silent clients and 100 that stop halfway through a ClientHello.
    let mut stalled = Vec::new();
    for i in 0..200 {
        let mut socket = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
        if i % 2 == 1 {
            socket.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc]).expect("partial hello");
        }
        stalled.push(socket);
    }
    std::thread::sleep(Duration::from_millis(300));
    let cpu_before = common::cpu_ticks(server.pid());
    std::thread::sleep(Duration::from_millis(1000));
    let spent = common::cpu_ticks(server.pid()) - cpu_before;
    // A core is ~100 ticks a second; waiting costs nothing (a tick of noise allowed).
    assert!(spent <= 2, "stalled handshakes cost {spent} ticks in 1 s");
    let rss_growth = common::rss_bytes(server.pid()).saturating_sub(rss_before);
    assert!(rss_growth < 16 << 20, "200 stalled handshakes took {rss_growth} bytes");
    // Served meanwhile.
    assert_eq!(good.call(b"version\r\n")[..7], *b"VERSION");
    for socket in &mut stalled {
        assert!(closes_within(socket, Duration::from_secs(6)), "a stalled handshake outlived its deadline");
    }
    assert_eq!(good.stat("ssl_handshake_errors"), "200");
    assert_eq!(good.stat("curr_connections"), "1", "only the good client remains");
}

#[test]
fn client_certificates_are_required_and_verified_with_verify_mode_2() {
    let ca = format!("ssl_verify_mode=2,ssl_ca_cert={}", cert_path("ca.pem"));
    let server = tls_server(&["-o", &ca]);
    let mut good =
        TlsClient::connect(server.port, client_config(Some("client"), ALL_VERSIONS)).expect("good client");
    assert_eq!(good.call(b"version\r\n")[..7], *b"VERSION");
    // No certificate; one signed by another CA; both under TLS 1.2 and 1.3.
    for versions in [&[&rustls::version::TLS13][..], &[&rustls::version::TLS12][..]] {
        let anonymous = TlsClient::connect(server.port, client_config(None, versions));
        assert!(anonymous.map_or(true, refused), "a client without a certificate was served");
        let rogue = TlsClient::connect(server.port, client_config(Some("rogue"), versions));
        assert!(rogue.map_or(true, refused), "a certificate from another CA was accepted");
    }
    assert_eq!(good.stat("ssl_handshake_errors"), "4");
    let settings = good.stats("settings");
    let setting = |name: &str| settings.iter().find(|(key, _)| key == name).map(|(_, value)| value.clone());
    assert_eq!(setting("ssl_verify_mode").as_deref(), Some("3"), "memcached shows OpenSSL's flags");
    assert_eq!(setting("ssl_ca_cert"), Some(cert_path("ca.pem")));
    // The client's certificate name in `stats conns`.
    let conns = good.stats("conns");
    assert!(
        conns.iter().any(|(key, value)| key.ends_with(":tls_peer_cn") && value == "client.test"),
        "{conns:?}"
    );
}

#[test]
fn verify_mode_1_asks_for_a_certificate_and_checks_one_given() {
    let ca = format!("ssl_verify_mode=1,ssl_ca_cert={}", cert_path("ca.pem"));
    let server = tls_server(&["-o", &ca]);
    let mut anonymous = TlsClient::plain(server.port);
    assert_eq!(anonymous.call(b"version\r\n")[..7], *b"VERSION");
    let rogue = TlsClient::connect(server.port, client_config(Some("rogue"), ALL_VERSIONS));
    assert!(rogue.map_or(true, refused), "a certificate from another CA was accepted");
}

#[test]
fn refresh_certs_gives_new_connections_the_new_files() {
    let dir = std::env::temp_dir().join(format!("qs-tls-refresh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::copy(cert_path("server.pem"), &cert).expect("copy");
    std::fs::copy(cert_path("server.key"), &key).expect("copy");
    let files = format!("ssl_chain_cert={},ssl_key={}", cert.display(), key.display());
    let server = ServerProcess::quicksilver_probed(&["-Z", "-o", &files], answers_tls);
    let mut first = TlsClient::plain(server.port);
    assert_eq!(first.peer_certificate(), der_of("server.pem"));
    std::fs::copy(cert_path("server2.pem"), &cert).expect("copy");
    std::fs::copy(cert_path("server2.key"), &key).expect("copy");
    // Two seconds and more: the server's clock counts whole seconds, so a refresh read back
    // within the same tick or the next says 0 or 1, always less than this.
    std::thread::sleep(Duration::from_millis(2100));
    let before = first.stat("time_since_server_cert_refresh").parse::<u64>().expect("secs");
    assert!(before >= 2, "{before}");
    assert_eq!(first.call(b"refresh_certs\r\n"), b"OK\r\n");
    assert!(first.stat("time_since_server_cert_refresh").parse::<u64>().expect("secs") < before);
    assert_eq!(TlsClient::plain(server.port).peer_certificate(), der_of("server2.pem"));
    // The open connection keeps what it negotiated.
    assert_eq!(first.call(b"version\r\n")[..7], *b"VERSION");
    // A broken file: memcached's error, and nothing changes.
    std::fs::write(&cert, b"not a certificate\n").expect("write");
    let reply = String::from_utf8(first.call(b"refresh_certs\r\n")).expect("utf8");
    assert!(
        reply.starts_with(&format!("Error loading the certificate chain: {} : ", cert.display())),
        "{reply}"
    );
    assert_eq!(TlsClient::plain(server.port).peer_certificate(), der_of("server2.pem"));
    assert_eq!(first.call(b"refresh_certs noreply\r\nmn\r\n")[..4], *b"Erro");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tls_1_3_minimum_refuses_tls_1_2_clients() {
    let server = tls_server(&["-o", "ssl_min_version=3"]);
    let old = TlsClient::connect(server.port, client_config(None, &[&rustls::version::TLS12]));
    assert!(old.map_or(true, refused));
    let mut new =
        TlsClient::connect(server.port, client_config(None, &[&rustls::version::TLS13])).expect("TLS 1.3");
    assert_eq!(new.call(b"version\r\n")[..7], *b"VERSION");
    assert_eq!(new.stat("ssl_handshake_errors"), "1");
}

#[test]
fn session_cache_resumes_sessions_only_when_asked() {
    // rustls's client keeps sessions in its config: one config, two connections.
    for (cache, resumed) in [(false, false), (true, true)] {
        let server = if cache { tls_server(&["-o", "ssl_session_cache"]) } else { tls_server(&[]) };
        for versions in [&[&rustls::version::TLS12][..], &[&rustls::version::TLS13][..]] {
            let config = client_config(None, versions);
            let mut first = TlsClient::connect(server.port, config.clone()).expect("first");
            // TLS 1.3 tickets arrive after the handshake: a round trip takes them in.
            assert_eq!(first.call(b"version\r\n")[..7], *b"VERSION");
            let second = TlsClient::connect(server.port, config).expect("second");
            let kind = second.stream.conn.handshake_kind();
            assert_eq!(
                kind == Some(rustls::HandshakeKind::Resumed),
                resumed,
                "{versions:?} cache {cache}: {kind:?}"
            );
        }
        let mut client = TlsClient::plain(server.port);
        let stats = client.stats("");
        let new_sessions = stats.iter().find(|(key, _)| key == "ssl_new_sessions");
        assert_eq!(new_sessions.is_some(), cache, "ssl_new_sessions only with the cache, as memcached");
    }
}

/// The options as memcached checks them at start: each bad one stops the server with a message.
#[test]
fn bad_tls_options_stop_the_server_with_a_message() {
    let chain = format!("ssl_chain_cert={},ssl_key={}", cert_path("server.pem"), cert_path("server.key"));
    let cases: &[(&[&str], &str)] = &[
        (&["-Z"], "Error loading the certificate chain"),
        (
            &["-Z", "-o", "ssl_chain_cert=/nonexistent.pem"],
            "Error loading the certificate chain: /nonexistent.pem",
        ),
        (&["-Z", "-o", &chain, "-U", "11299"], "ssl_allow_plaintext"),
        (
            &["-Z", "-o", &chain, "-o", "ssl_verify_mode=5"],
            "Invalid ssl_verify_mode. Use help to see valid options.",
        ),
        (
            &["-Z", "-o", &chain, "-o", "ssl_min_version=4"],
            "Invalid ssl_min_version. Use help to see valid options.",
        ),
        (&["-Z", "-o", &chain, "-o", "ssl_kernel_tls"], "Kernel TLS offload is not available"),
        (&["-Z", "-o", &chain, "-o", "ssl_ciphers=RC4-MD5"], "Error setting the provided cipher(s): RC4-MD5"),
        (&["-Z", "-o", &chain, "-o", "ssl_verify_mode=2"], "ssl_ca_cert"),
        (&["-Z", "-o", &chain, "-p", "0"], "ERROR: You cannot enable SSL without a TCP port."),
        (&["-l", "notls:127.0.0.1:11298"], "'notls' option is valid only when SSL is enabled"),
    ];
    for (args, message) in cases {
        let port = common::free_tcp_ports(1).to_string();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver"));
        command.args(["-l", "127.0.0.1"]);
        if !args.contains(&"-p") {
            command.args(["-p", &port]);
        }
        let mut child = command
            .args(*args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run");
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{args:?} started");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        child.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("read");
        assert!(!status.success(), "{args:?} exited 0");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

/// `stats settings`' TLS lines and `refresh_certs` without -Z, side by side with memcached.
#[test]
fn tls_settings_and_refresh_certs_match_memcached() {
    let chain = format!(
        "ssl_chain_cert={},ssl_key={},ssl_ca_cert={},ssl_verify_mode=1,ssl_wbuf_size=32,ssl_ciphers=ECDHE-ECDSA-AES128-GCM-SHA256",
        cert_path("server.pem"),
        cert_path("server.key"),
        cert_path("ca.pem")
    );
    let settings_of = |server: &ServerProcess| -> Vec<(String, String)> {
        let mut client = TlsClient::plain(server.port);
        client.stats("settings").into_iter().filter(|(key, _)| key.starts_with("ssl_")).collect()
    };
    let ours = ServerProcess::quicksilver_probed(&["-Z", "-o", &chain], answers_tls);
    let memcached = memcached_tls(&["-Z", "-o", &chain]);
    assert_eq!(settings_of(&ours), settings_of(&memcached));
    let plain_ours = ServerProcess::quicksilver(&[]);
    let plain_memcached = ServerProcess::memcached(&[]);
    let stats = |server: &ServerProcess| {
        let mut client = server.connect();
        let lines: Vec<(String, String)> = common::stats(&mut client, "settings")
            .into_iter()
            .filter(|(key, _)| key.starts_with("ssl_"))
            .collect();
        (lines, client.call(b"refresh_certs\r\n"))
    };
    assert_eq!(stats(&plain_ours), stats(&plain_memcached));
}

/// memcached with TLS on a free port, waiting until a TLS client gets a version.
fn memcached_tls(args: &[&str]) -> ServerProcess {
    let mut all = vec!["-U", "0"];
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        all.extend(["-u", "nobody"]);
    }
    all.extend_from_slice(args);
    ServerProcess::program_probed("memcached", "memcached", &all, answers_tls)
}

#[test]
fn a_value_over_the_item_limit_is_refused_once_all_of_it_is_read() {
    // As in plaintext (e2e.rs, checked there against memcached): the refusal waits for the
    // whole value, and the connection then serves what follows.
    const VALUE: usize = 3 << 20;
    let server = tls_server(&[]);
    let mut client = TlsClient::plain(server.port);
    // Tickets and anything else the handshake left are read first.
    assert!(client.call(b"version\r\n").starts_with(b"VERSION"));
    client.stream.write_all(format!("set big 0 0 {VALUE}\r\n").as_bytes()).expect("head");
    client.stream.flush().expect("head");
    client.stream.sock.set_read_timeout(Some(Duration::from_millis(10))).expect("timeout");
    let chunk = vec![b'x'; 64 << 10];
    let mut sent = 0;
    while sent < VALUE {
        client.stream.write_all(&chunk).expect("chunk");
        client.stream.flush().expect("chunk");
        sent += chunk.len();
        let mut byte = [0u8; 1];
        assert!(
            sent == VALUE || client.stream.sock.peek(&mut byte).is_err(),
            "a reply came after {sent} of {VALUE} bytes"
        );
    }
    client.stream.sock.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    assert_eq!(client.call(b"\r\n"), b"SERVER_ERROR object too large for cache\r\n");
    assert_eq!(
        client.call_until(b"set small 0 0 1\r\nv\r\nget small\r\n", b"END\r\n").expect("after"),
        b"STORED\r\nVALUE small 0 1\r\nv\r\nEND\r\n"
    );
}

/// The first request after the handshake, from a client with Nagle's algorithm on (as most
/// TLS clients leave it): answered at once, not after the server's delayed ACK of the
/// client's last handshake flight released it (40 ms). The fastest of five is compared, so
/// a busy machine's stall does not decide it.
#[test]
fn the_first_request_after_the_handshake_is_not_held_by_nagle() {
    let server = tls_server(&[]);
    let fastest = (0..5)
        .map(|_| {
            let mut client = TlsClient::plain(server.port);
            client.stream.sock.set_nodelay(false).expect("nodelay");
            let start = Instant::now();
            assert!(client.call(b"version\r\n").starts_with(b"VERSION"));
            start.elapsed()
        })
        .min()
        .unwrap();
    assert!(fastest < Duration::from_millis(25), "the first reply took {fastest:?}");
}
