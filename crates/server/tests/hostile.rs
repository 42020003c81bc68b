//! Hostile clients against the real binary over real sockets: requests split at every byte,
//! partial requests held open, slowloris, clients that never read, floods past `-c`, random
//! and binary bytes, absurd lengths, half-closes and resets. Each case checks that the
//! server answers as memcached 1.6 does where memcached is the oracle, that other clients are
//! served and stored items are unchanged, that RSS stays bounded, and that the server's CPU
//! (utime + stime from /proc/PID/stat) stays near idle while no complete request waits.

mod common;

use common::{rss_bytes, server_with_canary, set, stat, stats, Client, ServerProcess};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Held by the tests that measure the server's RSS or CPU against a bound, and by the ones that
/// load the machine most, so that their measurements do not run beside each other's load.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn measuring() -> std::sync::MutexGuard<'static, ()> {
    MEASURING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`), the unit of /proc/PID/stat times.
fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// Waits `period` and returns the server's CPU ticks in it, and 2% of a core over the time
/// actually waited (the bound for a server with nothing to do).
fn ticks_while_idle(server: &ServerProcess, period: Duration) -> (u64, u64) {
    let before = common::cpu_ticks(server.pid());
    let started = Instant::now();
    std::thread::sleep(period);
    let used = common::cpu_ticks(server.pid()) - before;
    (used, ticks_per_second() * started.elapsed().as_millis() as u64 * 2 / 100 / 1000)
}

/// Other clients are served and the stored canary is unchanged.
fn assert_healthy(server: &ServerProcess) {
    let mut client = server.connect();
    assert_eq!(client.call(b"get canary\r\n"), b"VALUE canary 0 5\r\nalive\r\nEND\r\n", "canary changed");
}

/// Everything the server sends within `quiet` of the last byte (or until it closes), and
/// whether it closed.
fn read_for(stream: &mut TcpStream, quiet: Duration) -> (Vec<u8>, bool) {
    stream.set_read_timeout(Some(quiet)).expect("timeout");
    let mut all = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return (all, true),
            Ok(n) => all.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return (all, false),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return (all, true),
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// Text and meta requests, each with the requests that set its stage first. `{k}` is replaced
/// by a key of the attempt's own, so attempts do not see each other's items. No reply here
/// carries a CAS unique or a clock reading (they differ between runs and servers by design).
const REQUESTS: &[(&str, &str)] = &[
    ("", "set {k} 5 0 3\r\nabc\r\n"),
    ("", "set {k} 5 0 3 noreply\r\nabc\r\nget {k}\r\n"),
    ("set {k} 1 0 2\r\nhi\r\n", "get {k}\r\n"),
    ("set {k} 1 0 2\r\nhi\r\n", "get {k} {k}2 {k}\r\n"),
    ("", "add {k} 0 0 1\r\nx\r\n"),
    ("set {k} 0 0 1\r\nx\r\n", "add {k} 0 0 1\r\ny\r\n"),
    ("", "replace {k} 0 0 1\r\nx\r\n"),
    ("set {k} 0 0 1\r\nx\r\n", "append {k} 0 0 2\r\nyz\r\nget {k}\r\n"),
    ("set {k} 0 0 1\r\nx\r\n", "prepend {k} 0 0 2\r\nyz\r\nget {k}\r\n"),
    ("", "cas {k} 0 0 1 12345\r\nx\r\n"),
    ("set {k} 0 0 2\r\n41\r\n", "incr {k} 1\r\n"),
    ("set {k} 0 0 2\r\n41\r\n", "decr {k} 50\r\n"),
    ("", "incr {k} 1\r\n"),
    ("set {k} 0 0 1\r\nx\r\n", "delete {k}\r\n"),
    ("", "delete {k}\r\n"),
    ("set {k} 0 0 1\r\nx\r\n", "touch {k} 100\r\n"),
    ("set {k} 3 0 1\r\nx\r\n", "gat 100 {k}\r\n"),
    ("", "mn\r\n"),
    ("set {k} 9 0 3\r\nabc\r\n", "mg {k} v f s k\r\n"),
    ("", "mg {k} v\r\n"),
    ("", "ms {k} 3 F4\r\nabc\r\nmg {k} v f\r\n"),
    ("", "ms {k} 3 q\r\nabc\r\nmg {k} v q\r\n"),
    ("set {k} 0 0 1\r\nx\r\n", "md {k}\r\n"),
    ("set {k} 0 0 1\r\n7\r\n", "ma {k} v\r\n"),
    ("", "ma {k} N0 J13 v\r\n"),
    ("", "me {k}\r\n"),
    ("", "bogus command\r\n"),
    ("", "get\r\n"),
    ("", "set {k} 0 0 z\r\n"),
    ("", "set {k} 0 0 2\r\nabc\r\n"),
    ("", "verbosity 1\r\n"),
];

/// Requests of [`REQUESTS`] that memcached 1.6.40's parser answers differently from Debian's
/// 1.6.18 (the live oracle), with 1.6.45's answers, recorded from it.
const CHANGED_SINCE_1_6_18: &[(&str, &str)] = &[
    ("get\r\n", "CLIENT_ERROR bad command line format\r\n"),
    ("set {k} 0 0 z\r\n", "CLIENT_ERROR bad command line format\r\n"),
    // The block's leftover `\n` is a line under four bytes.
    ("set {k} 0 0 2\r\nabc\r\n", "CLIENT_ERROR bad data chunk\r\nCLIENT_ERROR bad command line format\r\n"),
];

/// The replies to `request` on a fresh connection when it arrives in the pieces `cuts`
/// delimit (each piece reaches the server alone). `{k}` becomes a key no other exchange uses,
/// and the replies show it as `{k}` again.
fn exchange_in_pieces(server: &ServerProcess, case: (&str, &str), cuts: &[usize]) -> String {
    static NEXT_KEY: AtomicUsize = AtomicUsize::new(0);
    // Of one width, so a request's length is the same in every exchange.
    let key = format!("key{:07}", NEXT_KEY.fetch_add(1, Ordering::Relaxed));
    let (setup, request) = (case.0.replace("{k}", &key), case.1.replace("{k}", &key));
    let mut client = server.connect();
    if !setup.is_empty() {
        client.call(setup.as_bytes());
    }
    let bytes = request.as_bytes();
    let mut from = 0;
    for &cut in cuts.iter().chain([bytes.len()].iter()) {
        client.send(&bytes[from..cut]);
        from = cut;
        // The piece arrives, and is read, before the next: the server sees it alone.
        std::thread::sleep(Duration::from_micros(300));
    }
    String::from_utf8_lossy(&client.call(b"")).replace(&key, "{k}")
}

#[test]
fn requests_split_at_every_byte_answer_as_when_sent_whole_and_as_memcached() {
    let memcached = ServerProcess::memcached(&[]);
    let quicksilver = ServerProcess::quicksilver(&["-t", "2"]);
    for &case in REQUESTS {
        let oracle = match CHANGED_SINCE_1_6_18.iter().find(|(request, _)| *request == case.1) {
            Some((_, recorded)) => recorded.to_string(),
            None => exchange_in_pieces(&memcached, case, &[]),
        };
        let whole = exchange_in_pieces(&quicksilver, case, &[]);
        assert_eq!(whole, oracle, "{:?} sent whole: quicksilver differs from memcached", case.1);
        let length = case.1.replace("{k}", "key0000000").len();
        for cut in 1..length {
            let split = exchange_in_pieces(&quicksilver, case, &[cut]);
            assert_eq!(split, whole, "{:?} split after byte {cut}", case.1);
        }
        let all_cuts: Vec<usize> = (1..length).collect();
        let dribbled = exchange_in_pieces(&quicksilver, case, &all_cuts);
        assert_eq!(dribbled, whole, "{:?} sent one byte at a time", case.1);
    }
}

#[test]
fn a_partial_request_held_open_costs_no_cpu() {
    // The regression test for a worker that spun while a connection's buffered bytes formed
    // no request: a partial command line, a partial value, a binary-protocol header.
    let server = server_with_canary(&["-t", "2"]);
    let binary_get_header: [u8; 24] =
        [0x80, 0x00, 0x00, 0x03, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let partials: [&[u8]; 4] =
        [b"get foo", b"set big 0 0 100000\r\nabcdefgh", &binary_get_header, b"mg canary v"];
    let mut held: Vec<Client> = Vec::new();
    for partial in partials {
        let mut client = server.connect();
        client.send(partial);
        held.push(client);
    }
    std::thread::sleep(Duration::from_millis(200));
    let (used, allowed) = ticks_while_idle(&server, Duration::from_secs(2));
    assert!(used <= allowed, "{used} ticks over 2 s with partial requests held (at most {allowed})");
    assert_healthy(&server);
    // The rest arrives: the requests complete as if sent whole.
    held[0].send(b" canary\r\n");
    assert_eq!(held[0].call(b""), b"VALUE canary 0 5\r\nalive\r\nEND\r\n");
    held[1].send(&vec![b'x'; 100_000 - 8]);
    assert_eq!(held[1].call(b"\r\n"), b"STORED\r\n");
    held[3].send(b"\r\n");
    assert_eq!(held[3].call(b""), b"VA 5\r\nalive\r\n");
}

#[test]
fn a_thousand_slowloris_connections_cost_little_and_are_answered() {
    let _measuring = measuring();
    // Tests hold thousands of sockets: the soft open-file limit goes up to the hard one.
    qs_server::sys::raise_fd_limit(u64::MAX);
    let server = server_with_canary(&["-t", "2", "-c", "2000"]);
    let mut streams: Vec<TcpStream> = (0..1000)
        .map(|_| {
            let stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
            stream.set_nodelay(true).expect("nodelay");
            stream.set_nonblocking(true).expect("nonblocking");
            stream
        })
        .collect();
    let request = b"get canary\r\n";
    let expected = b"VALUE canary 0 5\r\nalive\r\nEND\r\n";
    let rounds = 2;
    let mut replies: Vec<Vec<u8>> = vec![Vec::new(); streams.len()];
    let mut probe = server.connect();
    let before = common::cpu_ticks(server.pid());
    let started = Instant::now();
    let mut worst_probe = Duration::ZERO;
    // A byte every 100 ms on every connection: each request takes 1.2 s to arrive.
    for tick in 0..rounds * request.len() {
        let byte = &request[tick % request.len()..][..1];
        for stream in &mut streams {
            stream.write_all(byte).expect("dribble");
        }
        for (stream, reply) in streams.iter_mut().zip(&mut replies) {
            let mut chunk = [0u8; 256];
            while let Ok(n) = stream.read(&mut chunk) {
                if n == 0 {
                    panic!("the server closed a slow connection");
                }
                reply.extend_from_slice(&chunk[..n]);
            }
        }
        let asked = Instant::now();
        assert_eq!(probe.call(b"get canary\r\n"), expected);
        worst_probe = worst_probe.max(asked.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    let elapsed = started.elapsed();
    let used = common::cpu_ticks(server.pid()) - before;
    // Each byte is a wake-up, a read and a look for a line end: about 10,000 a second here.
    let allowed = ticks_per_second() * elapsed.as_millis() as u64 * 30 / 100 / 1000;
    assert!(used <= allowed, "{used} ticks in {elapsed:?} for 1000 slow connections (at most {allowed})");
    assert!(worst_probe < Duration::from_secs(1), "another client waited {worst_probe:?}");
    std::thread::sleep(Duration::from_millis(200));
    for (stream, reply) in streams.iter_mut().zip(&mut replies) {
        let (rest, _) = read_for(stream, Duration::from_millis(1));
        reply.extend_from_slice(&rest);
        assert_eq!(reply, &expected.repeat(rounds), "a slow client's answers");
    }
    assert_healthy(&server);
}

#[test]
fn clients_that_never_read_are_bounded_each_and_together() {
    let _measuring = measuring();
    let server = server_with_canary(&["-t", "2", "-I", "2m"]);
    let mut writer = server.connect();
    set(&mut writer, "big", &vec![b'b'; 1_000_000]);
    let baseline = rss_bytes(server.pid());
    // Sixteen clients each ask for 2 GB of replies and never read them.
    let request = b"get big\r\n".repeat(100);
    let mut readers: Vec<Client> = (0..16).map(|_| server.connect()).collect();
    for reader in &mut readers {
        reader.stream.set_nonblocking(true).expect("nonblocking");
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let mut progressed = false;
        for reader in &mut readers {
            if let Ok(n) = reader.stream.write(&request) {
                progressed |= n > 0;
            }
        }
        if !progressed {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let grown = rss_bytes(server.pid()).saturating_sub(baseline);
    eprintln!("GROWN {grown}");
    // Per connection: the output high-water mark (1 MiB) and one value past it, and the
    // allocator's copy of a buffer that grew past them (freed, not always returned): 41-68
    // MB measured for the 16, against the 32 GB they asked for.
    assert!(grown < 16 * (5 << 20), "the server buffered {grown} bytes for 16 clients that do not read");
    // Idle while everyone is blocked on the clients.
    let (used, allowed) = ticks_while_idle(&server, Duration::from_secs(1));
    assert!(used <= allowed, "{used} ticks in 1 s while every client is blocked");
    assert_healthy(&server);
    // A reader that starts reading gets whole values, in order.
    let mut reader = readers.pop().expect("a reader");
    reader.stream.set_nonblocking(false).expect("blocking");
    let mut block = b"VALUE big 0 1000000\r\n".to_vec();
    block.extend_from_slice(&vec![b'b'; 1_000_000]);
    block.extend_from_slice(b"\r\nEND\r\n");
    let mut got = vec![0; block.len()];
    reader.stream.read_exact(&mut got).expect("read a reply");
    assert!(got == block, "a blocked client's first reply");
}

#[test]
fn a_flood_past_the_connection_limit_is_refused_and_leaves_the_server_serving() {
    // Tests hold thousands of sockets: the soft open-file limit goes up to the hard one.
    qs_server::sys::raise_fd_limit(u64::MAX);
    let server = server_with_canary(&["-t", "2", "-c", "50"]);
    let mut flood: Vec<TcpStream> =
        (0..400).filter_map(|_| TcpStream::connect(("127.0.0.1", server.port)).ok()).collect();
    let mut refused = 0;
    let mut served = 0;
    for stream in &mut flood {
        let _ = stream.write_all(b"get canary\r\n");
    }
    for stream in &mut flood {
        let (reply, closed) = read_for(stream, Duration::from_millis(200));
        if reply == b"ERROR Too many open connections\r\n" && closed {
            refused += 1;
        } else {
            assert_eq!(reply, b"VALUE canary 0 5\r\nalive\r\nEND\r\n", "a connection within the limit");
            served += 1;
        }
    }
    assert!(served <= 50 && served > 0, "{served} served");
    assert_eq!(refused + served, flood.len());
    drop(flood);
    // Once the flood is gone, new clients are served again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut client = server.connect();
        let (reply, _) = {
            client.send(b"get canary\r\n");
            read_for(&mut client.stream, Duration::from_millis(200))
        };
        if reply == b"VALUE canary 0 5\r\nalive\r\nEND\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "still refused after the flood left: {reply:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(stat(&mut server.connect(), "rejected_connections") >= refused as u64);
}

/// What memcached and quicksilver answer to `bytes` sent on a fresh connection, read until
/// each has been quiet for 300 ms or closed.
fn both_answer(memcached: &ServerProcess, quicksilver: &ServerProcess, bytes: &[u8]) -> [(Vec<u8>, bool); 2] {
    [memcached, quicksilver].map(|server| {
        let mut client = server.connect();
        let _ = client.stream.write_all(bytes);
        read_for(&mut client.stream, Duration::from_millis(300))
    })
}

#[test]
fn lengths_near_two_to_the_32_and_over_long_lines_answer_as_memcached() {
    let memcached = ServerProcess::memcached(&[]);
    let quicksilver = server_with_canary(&["-t", "2"]);
    let long_key = "k".repeat(251);
    let keys_line = format!("get {}\r\n", (0..1500).map(|i| format!("k{i}")).collect::<Vec<_>>().join(" "));
    // memcached 1.6.40's parser refuses a length that does not fit 31 bits on the line at
    // once, and a storage line's key over 250 bytes with its block swallowed: 1.6.45's answers, recorded from it (the live oracle
    // here is Debian's 1.6.18, which answers these the older way). For a get with a key over
    // 250 bytes 1.6.45 sends the error line twice terminated (`...format\r\n\r\n`); one is
    // sent here (docs/COMPATIBILITY.md).
    const REFUSED: &str = "CLIENT_ERROR bad command line format\r\n";
    let cases: Vec<(String, Option<&str>)> = vec![
        ("set x 0 0 4294967295\r\n".into(), Some(REFUSED)),
        ("set x 0 0 4294967296\r\n".into(), Some(REFUSED)),
        ("set x 0 0 2147483647\r\n".into(), Some(REFUSED)),
        ("set x 0 0 2147483648\r\n".into(), Some(REFUSED)),
        ("set x 0 0 -1\r\n".into(), Some(REFUSED)),
        ("set x 4294967296 0 1\r\nx\r\n".into(), None),
        ("set x 0 0 18446744073709551616\r\n".into(), Some(REFUSED)),
        ("ms x 4294967295\r\n".into(), Some(REFUSED)),
        ("ms x 99999999999999999999\r\n".into(), Some(REFUSED)),
        (format!("get {long_key}\r\n"), Some(REFUSED)),
        (format!("set {long_key} 0 0 1\r\nx\r\n"), Some(REFUSED)),
        (keys_line, None),
        ("GET / HTTP/1.0\r\n".into(), None),
        ("PUT /x HTTP/1.1\r\nHost: y\r\n\r\n".into(), None),
        ("DELETE HTTP/1.1\r\n".into(), None),
    ];
    for (case, recorded) in &cases {
        let [mut oracle, ours] = both_answer(&memcached, &quicksilver, case.as_bytes());
        if let Some(recorded) = recorded {
            oracle = (recorded.as_bytes().to_vec(), false);
        }
        let shown = &case[..case.len().min(60)];
        assert_eq!(
            String::from_utf8_lossy(&ours.0),
            String::from_utf8_lossy(&oracle.0),
            "{shown:?}: quicksilver differs from memcached"
        );
        assert_eq!(ours.1, oracle.1, "{shown:?}: memcached closed: {}", oracle.1);
    }
    assert_healthy(&quicksilver);
}

#[test]
fn binary_frames_on_the_text_port_and_random_bytes_harm_no_one() {
    let server = server_with_canary(&["-t", "2"]);
    let mut frame = vec![0x80, 0x00, 0x00, 0x06, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    frame.extend_from_slice(b"canary");
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut random = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed as u8
    };
    let noise: Vec<u8> = (0..1 << 20).map(|_| random()).collect();
    let mut sent = Vec::new();
    for bytes in [&frame[..], &frame.repeat(500), &noise] {
        let mut client = server.connect();
        let _ = client.stream.write_all(bytes);
        sent.push(client);
    }
    std::thread::sleep(Duration::from_millis(300));
    let (used, allowed) = ticks_while_idle(&server, Duration::from_secs(1));
    assert!(used <= allowed, "{used} ticks in 1 s after garbage");
    assert_healthy(&server);
    assert_eq!(stats(&mut server.connect(), "").iter().find(|(k, _)| k == "curr_items").unwrap().1, "1");
}

#[test]
fn half_closed_sockets_are_answered_then_closed_as_memcached_does() {
    let memcached = ServerProcess::memcached(&[]);
    let quicksilver = ServerProcess::quicksilver(&["-t", "2"]);
    for request in [&b"set a 0 0 1\r\nx\r\nget a\r\n"[..], b"get a\r\nget", b"set b 0 0 5\r\nab"] {
        let [oracle, ours] = [&memcached, &quicksilver].map(|server| {
            let mut client = server.connect();
            client.send(request);
            client.stream.shutdown(std::net::Shutdown::Write).expect("half-close");
            read_for(&mut client.stream, Duration::from_secs(2))
        });
        assert_eq!(String::from_utf8_lossy(&ours.0), String::from_utf8_lossy(&oracle.0), "{request:?}");
        assert!(ours.1, "{request:?}: the server kept a half-closed connection open");
    }
    // Bytes and the end of input that reach the server together (one epoll edge for both, as
    // when the server accepts late): the end is still seen, and the connection closed.
    let mut burst: Vec<TcpStream> = Vec::new();
    for _ in 0..64 {
        let mut stream = TcpStream::connect(("127.0.0.1", quicksilver.port)).expect("connect");
        stream.write_all(b"set b 0 0 5\r\nab").expect("send");
        stream.shutdown(std::net::Shutdown::Write).expect("half-close");
        burst.push(stream);
    }
    for (i, stream) in burst.iter_mut().enumerate() {
        let (reply, closed) = read_for(stream, Duration::from_secs(2));
        assert!(closed && reply.is_empty(), "connection {i} of the burst: closed {closed}, got {reply:?}");
    }
}

#[test]
fn resets_in_the_middle_of_a_value_store_nothing() {
    let server = server_with_canary(&["-t", "2"]);
    for (request, sent) in
        [("set canary 0 0 100000\r\n", 50_000), ("ms canary 100000\r\n", 99_999), ("set other 0 0 10\r\n", 5)]
    {
        let stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
        let mut client = Client::from_stream(stream);
        client.send(request.as_bytes());
        client.send(&vec![b'z'; sent]);
        std::thread::sleep(Duration::from_millis(50));
        // SO_LINGER 0: close sends a reset instead of a FIN.
        let linger = libc::linger { l_onoff: 1, l_linger: 0 };
        use std::os::fd::AsRawFd;
        // SAFETY: setsockopt on a socket we own, with a correctly sized linger struct.
        unsafe {
            libc::setsockopt(
                client.stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                &linger as *const libc::linger as *const libc::c_void,
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
        drop(client);
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_healthy(&server);
    assert_eq!(server.connect().call(b"get other\r\n"), b"END\r\n");
}

/// Waits until the server counts `count` open connections (`probe` among them).
fn await_connections(probe: &mut Client, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while stat(probe, "curr_connections") != count {
        assert!(Instant::now() < deadline, "the server never counted {count} connections");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One fresh server: its workers' fixed buffers are warmed (the read and reply pools, the
/// io_uring's receive buffers), then twice `count` connections each ask `version` once, stay
/// idle and close. Returns, for each of the two storms, the RSS its connections added and the
/// RSS left above the level before it once they all closed.
fn idle_connections_rss(args: &[&str], count: usize) -> [(u64, u64); 2] {
    let server = server_with_canary(args);
    // 600 connections each hold a partial request, so each has a read buffer lent at once,
    // then complete it and leave; 300 ask a second time.
    let mut warm: Vec<Client> = (0..600).map(|_| server.connect()).collect();
    for client in &mut warm {
        client.send(b"get canary");
    }
    std::thread::sleep(Duration::from_millis(200));
    for client in &mut warm {
        assert_eq!(client.call(b"\r\n").len(), 30);
    }
    for client in warm.iter_mut().step_by(2) {
        assert_eq!(client.call(b"get canary\r\n").len(), 30);
    }
    drop(warm);
    let mut probe = server.connect();
    await_connections(&mut probe, 1);
    // Past the once-a-second return of memory the warm-up's closes started.
    std::thread::sleep(Duration::from_millis(1200));
    [idle_storm(&server, &mut probe, count), idle_storm(&server, &mut probe, count)]
}

/// `count` connections ask `version` once, stay idle and close: the RSS they added, and the
/// RSS left of it once they closed.
fn idle_storm(server: &ServerProcess, probe: &mut Client, count: usize) -> (u64, u64) {
    let baseline = rss_bytes(server.pid());
    let mut idle: Vec<Client> = (0..count).map(|_| server.connect()).collect();
    for client in &mut idle {
        client.send(b"version\r\n");
    }
    for client in &mut idle {
        assert!(client.read_until(b"\r\n").starts_with(b"VERSION "));
    }
    await_connections(probe, count as u64 + 1);
    let grown = rss_bytes(server.pid()).saturating_sub(baseline);
    assert_healthy(server);
    drop(idle);
    await_connections(probe, 1);
    // Given back within the second after the closes (checked each tenth of one, for three).
    let mut kept = u64::MAX;
    for _ in 0..30 {
        kept = rss_bytes(server.pid()).saturating_sub(baseline);
        if kept <= KEPT_MAX {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (grown, kept)
}

/// What may stay after a second storm of idle connections closes: within 10% of a warm
/// server's ~5 MiB.
const KEPT_MAX: u64 = 512 * 1024;

/// What may stay after the first: glibc's per-thread caches (up to 7 free chunks of each small
/// size, which malloc_trim cannot return) pin a page each, and the per-slot generation
/// counters stay; neither grows with the count, and a second storm adds nearly nothing.
const FIRST_KEPT_MAX: u64 = 1024 * 1024;

#[test]
fn idle_connections_cost_under_one_kibibyte_each_in_every_run_and_give_it_back() {
    let _measuring = measuring();
    // Tests hold thousands of sockets: the soft open-file limit goes up to the hard one.
    qs_server::sys::raise_fd_limit(u64::MAX);
    let count = 5000;
    // Ten runs each, a fresh server per run: a bound that held only by luck would fail here
    // (before the read-ahead limit the figure swung from 0.6 to 8 KiB per connection).
    for args in [&["-c", "10000"][..], &["-t", "1", "-c", "10000"]] {
        let mut figures = Vec::new();
        for _ in 0..10 {
            let storms = idle_connections_rss(args, count);
            figures.push(storms.map(|(grown, kept)| (grown / count as u64, kept)));
        }
        eprintln!(
            "{args:?}: {count} idle connections, twice: (bytes each, bytes kept after closing): {figures:?}"
        );
        for [(first, first_kept), (second, kept)] in figures {
            assert!(first.max(second) <= 1024, "{args:?}: {} bytes per idle connection", first.max(second));
            // What they took goes back: the first storm leaves no more than the allocator's
            // caches pin, the second within 10% of the warm server's RSS (a few hundred KiB
            // on a ~5 MiB server).
            assert!(first_kept <= FIRST_KEPT_MAX, "{args:?}: {first_kept} bytes kept after the first storm");
            assert!(kept <= KEPT_MAX, "{args:?}: {kept} bytes kept after the second storm closed");
        }
    }
}

#[test]
fn memory_is_what_dash_m_says_and_start_up_touches_little_of_it() {
    for (megabytes, expected) in [("100", 104_857_600u64), ("1000", 1_048_576_000), ("4096", 4_294_967_296)] {
        let server = ServerProcess::quicksilver(&["-t", "2", "-m", megabytes]);
        let mut client = server.connect();
        let settings = stats(&mut client, "settings");
        let maxbytes = &settings.iter().find(|(k, _)| k == "maxbytes").expect("maxbytes").1;
        assert_eq!(maxbytes, &expected.to_string(), "-m {megabytes}");
        assert_eq!(stat(&mut client, "limit_maxbytes"), expected, "-m {megabytes}");
        let rss = rss_bytes(server.pid());
        assert!(rss < 64 << 20, "-m {megabytes}: {rss} bytes resident before any data");
    }
}

/// A `watch` connection that never reads: its lines are skipped once its buffer and socket
/// are full (counted in `log_watcher_skipped`), memory stays bounded, the server idles when
/// the traffic stops, and other clients are served as before. When it reads at last it is
/// told how many lines it missed (`skipped=N`): every line is delivered or counted.
#[test]
fn a_watcher_that_never_reads_is_bounded_and_costs_nothing() {
    let _measuring = measuring();
    let server = server_with_canary(&["-t", "2", "-o", "watcher_logbuf_size=16"]);
    let mut stalled = server.connect();
    stalled.send(b"watch fetchers mutations\r\n");
    assert_eq!(stalled.read_until(b"\r\n"), b"OK\r\n");
    let rss_before = rss_bytes(server.pid());
    let mut client = server.connect();
    let key = "k".repeat(200);
    for round in 0..20_000 {
        client.send(format!("get {key}{round}\r\n").as_bytes());
        if round % 100 == 99 {
            client.send(b"mn\r\n");
            let _ = client.read_until(b"MN\r\n");
        }
    }
    client.send(b"mn\r\n");
    let _ = client.read_until(b"MN\r\n");
    // 20,000 lines of about 280 bytes: 5.6 MB the watcher never read.
    let grown = rss_bytes(server.pid()).saturating_sub(rss_before);
    assert!(grown < 8 << 20, "RSS grew {grown} bytes for a watcher that does not read");
    assert!(stat(&mut client, "log_watcher_skipped") > 0, "nothing skipped");
    std::thread::sleep(Duration::from_millis(200));
    let (used, allowed) = ticks_while_idle(&server, Duration::from_secs(1));
    assert!(used <= allowed.max(1), "{used} ticks in 1 s with a stalled watcher (at most {allowed})");
    assert_healthy(&server);
    // The stalled watcher reads at last, then one more line is logged: every line logged
    // since it started watching (the 20,000 gets, the health check's and this one) was either
    // delivered or counted in a `skipped=` notice; nothing vanished.
    let (first, _) = read_for(&mut stalled.stream, Duration::from_millis(500));
    let _ = client.call(b"get after\r\n");
    let (next, _) = read_for(&mut stalled.stream, Duration::from_millis(500));
    let all = String::from_utf8_lossy(&[first, next.clone()].concat()).to_string();
    let delivered = all.lines().filter(|line| line.contains(" type=item_get ")).count();
    let skipped: usize =
        all.lines().filter_map(|line| line.strip_prefix("skipped=")?.parse::<usize>().ok()).sum();
    assert!(skipped > 0, "no skipped= notice in {} lines", all.lines().count());
    assert_eq!(delivered + skipped, 20_002, "{delivered} lines delivered, {skipped} reported skipped");
    // Caught up, it gets new lines as they happen.
    let next = String::from_utf8_lossy(&next).to_string();
    assert!(next.contains("type=item_get key=after status=not_found"), "{next:?}");
}

/// Opens 100 connections that each send a set's command line and hold its data back, so each
/// keeps a read buffer; then completes every set. Returns how many were closed, how many
/// stored, and the server's `stats` once all are closed.
fn partial_sets_under_a_read_buffer_limit(server: &ServerProcess) -> (usize, usize, Vec<(String, String)>) {
    let mut held: Vec<Client> = (0..100)
        .map(|_| {
            let mut client = server.connect();
            client.send(b"set held 0 0 2\r\n");
            client
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let (mut closed, mut stored) = (0, 0);
    for client in &mut held {
        let _ = client.stream.write_all(b"ok\r\n");
        client.stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let mut reply = [0u8; 8];
        match client.stream.read(&mut reply) {
            Ok(8) if &reply == b"STORED\r\n" => stored += 1,
            Ok(0) => closed += 1,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => closed += 1,
            other => panic!("{other:?}: {:?}", String::from_utf8_lossy(&reply)),
        }
    }
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    (closed, stored, stats(&mut server.connect(), ""))
}

#[test]
fn read_buf_mem_limit_closes_connections_past_it_as_memcached_does() {
    let _measuring = measuring();
    // 1 MiB for one worker: 64 read buffers of 16 KiB, in memcached as here.
    let args = ["-t", "1", "-o", "read_buf_mem_limit=1"];
    let memcached = ServerProcess::memcached(&args);
    let quicksilver = server_with_canary(&args);
    for (name, server) in [("memcached", &memcached), ("quicksilver", &quicksilver)] {
        let (closed, stored, stats) = partial_sets_under_a_read_buffer_limit(server);
        let stat = |name: &str| stats.iter().find(|(key, _)| key == name).map(|(_, value)| value.clone());
        eprintln!("{name}: closed {closed}, stored {stored}, read_buf_oom {:?}", stat("read_buf_oom"));
        // memcached keeps 59 (its response objects share the 64 buffers), quicksilver 63.
        assert!((55..=64).contains(&stored), "{name} kept {stored} of 100");
        assert_eq!(closed + stored, 100);
        let oom: usize = stat("read_buf_oom").and_then(|v| v.parse().ok()).expect("read_buf_oom");
        assert!(oom >= 30, "{name}: read_buf_oom {oom}");
    }
    assert_healthy(&quicksilver);
}

#[test]
fn read_buf_mem_limit_bounds_replies_that_clients_do_not_read_and_loses_none() {
    let _measuring = measuring();
    let server = server_with_canary(&["-t", "1", "-o", "read_buf_mem_limit=4"]);
    let value = vec![b'v'; 100_000];
    set(&mut server.connect(), "big", &value);
    let baseline = rss_bytes(server.pid());
    // Three clients ask for 30 MB of replies each and read none of them yet.
    let request = b"get big\r\n".repeat(300);
    let mut hogs: Vec<Client> = (0..3).map(|_| server.connect()).collect();
    for hog in &mut hogs {
        hog.stream.set_nonblocking(true).expect("nonblocking");
        let mut sent = 0;
        let deadline = Instant::now() + Duration::from_secs(2);
        while sent < request.len() && Instant::now() < deadline {
            match hog.stream.write(&request[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("send: {e}"),
            }
        }
        assert_eq!(sent, request.len(), "the server reads every request");
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut other = server.connect();
    let held: u64 = stat(&mut other, "response_obj_bytes");
    // Half the limit for replies left unread, and the one reply that crossed it (with the
    // buffer's doubling): 2.6 MB measured.
    assert!(held <= 4 << 20, "{held} bytes of replies held under a 4 MiB limit");
    let grown = rss_bytes(server.pid()).saturating_sub(baseline);
    assert!(grown < 16 << 20, "RSS grew {grown} bytes");
    // Idle while the hogs do not read, and others are served.
    let (used, allowed) = ticks_while_idle(&server, Duration::from_secs(1));
    assert!(used <= allowed, "{used} ticks in 1 s while every hog is blocked");
    assert_eq!(other.call(b"get big\r\n").len(), value.len() + 27);
    assert_healthy(&server);
    // Each hog then reads every reply, whole and in order.
    let mut block = b"VALUE big 0 100000\r\n".to_vec();
    block.extend_from_slice(&value);
    block.extend_from_slice(b"\r\nEND\r\n");
    for hog in &mut hogs {
        hog.stream.set_nonblocking(false).expect("blocking");
        let mut got = vec![0; block.len()];
        for n in 0..300 {
            hog.stream.read_exact(&mut got).unwrap_or_else(|e| panic!("reply {n}: {e}"));
            assert!(got == block, "reply {n}");
        }
    }
    assert_eq!(stat(&mut other, "response_obj_oom"), 0);
}

/// A small xorshift generator for the churn clients' keys, sizes and mix.
struct Dice(u64);

impl Dice {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// Keys the churn test fills and then reads and writes: about 20 MB of values through `-m 8`.
const CHURN_KEYS: u64 = 8000;

/// A store of `key` with a value of 10-5000 bytes (memtier's `--data-size-range=10-5000`).
fn churn_set(client: &mut Client, key: u64, dice: &mut Dice) {
    let len = 10 + dice.next(4991) as usize;
    let mut request = format!("set key:{key} 0 0 {len}\r\n").into_bytes();
    request.resize(request.len() + len, b'v');
    request.extend_from_slice(b"\r\n");
    client.send(&request);
    assert_eq!(client.read_until(b"\r\n"), b"STORED\r\n");
}

/// A connection from one of 32 loopback source addresses (so a run's tens of thousands of
/// closed connections, each in TIME_WAIT a minute, do not use up one address's ports).
fn connect_from(port: u16, source: u8) -> Client {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    socket.set_reuse_address(true).expect("SO_REUSEADDR");
    let from = std::net::SocketAddr::from(([127, 0, 0, 2 + source % 32], 0));
    socket.bind(&from.into()).expect("bind");
    socket.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into()).expect("connect");
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    stream.set_nodelay(true).expect("nodelay");
    Client::from_stream(stream)
}

/// `clients` clients at once for `period`, as memtier's `--reconnect-interval 3` churns: each
/// reconnects after every third request, one set in eleven, values 10-5000 bytes. Returns the
/// connections made.
fn churn(port: u16, clients: u64, period: Duration) -> u64 {
    let connections = AtomicUsize::new(0);
    let deadline = Instant::now() + period;
    std::thread::scope(|scope| {
        for t in 0..clients {
            let connections = &connections;
            scope.spawn(move || {
                let mut dice = Dice(0x2545_f491_4f6c_dd1d ^ (t + 1));
                while Instant::now() < deadline {
                    let mut client = connect_from(port, t as u8);
                    for _ in 0..3 {
                        let key = dice.next(CHURN_KEYS);
                        if dice.next(11) == 0 {
                            churn_set(&mut client, key, &mut dice);
                        } else {
                            client.send(format!("get key:{key}\r\n").as_bytes());
                            client.read_until(b"END\r\n");
                        }
                    }
                    connections.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    connections.into_inner() as u64
}

/// RSS less the transparent huge pages in it: the item log and index (mapped with THP where
/// offered) take 2 MiB at a time as the data first reaches a page, which is item memory under
/// `-m`, not memory the connections take.
fn small_page_rss(pid: u32) -> i64 {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).expect("smaps_rollup");
    let field = |name: &str| -> i64 {
        rollup
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<i64>().ok())
            .unwrap_or(0)
            * 1024
    };
    field("Rss:") - field("AnonHugePages:")
}

/// One fresh server (`-m 8`): filled past its memory, its code for gets and reconnections run
/// once by four clients for a moment (so that pages of the binary read in for the first time
/// are not counted), then `period` of churn by 50 clients at once. Returns the RSS outside
/// huge pages it kept
/// (negative: gave back) once the worker's once-a-second return of memory has run (read every
/// tenth of a second for two seconds, the least taken), and the connections made.
fn churn_rss(args: &[&str], period: Duration) -> (i64, u64) {
    let mut all = vec!["-m", "8", "-c", "4096"];
    all.extend_from_slice(args);
    let server = if args == ["memcached"] {
        ServerProcess::memcached_at("memcached", &["-m", "8", "-c", "4096"])
    } else {
        ServerProcess::quicksilver(&all)
    };
    let port = server.port;
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            scope.spawn(move || {
                let mut client = connect_from(port, t as u8);
                let mut dice = Dice(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
                for key in (t..CHURN_KEYS).step_by(4) {
                    churn_set(&mut client, key, &mut dice);
                }
            });
        }
    });
    churn(port, 4, Duration::from_millis(200));
    // Past the once-a-second return of memory that the closes start.
    std::thread::sleep(Duration::from_millis(1500));
    let before = small_page_rss(server.pid());
    let connections = churn(port, 50, period);
    let mut kept = i64::MAX;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        kept = kept.min(small_page_rss(server.pid()) - before);
        if kept <= 0 {
            break;
        }
    }
    assert!(server.connect().call(b"version\r\n").starts_with(b"VERSION "));
    (kept, connections)
}

/// What connection churn may add to RSS: memcached 1.6's figure. memcached adds 56-70 KiB
/// under this churn, and +0.05 to +0.10 MiB over 40 s of memtier reconnecting every 3 requests
/// (scripts/bench-idle-memory.py --churn 40), whose upper end this is. quicksilver, whose
/// workers allocate their buffers at start, kept -106 to +86 KiB over 80 runs measured; it
/// added 1.1-1.2 MiB in every run before (docs/benchmarks/HISTORY.md, "Connection churn").
const CHURN_GROWTH_MAX: i64 = 128 * 1024;

#[test]
fn connection_churn_after_a_fill_takes_no_more_memory_than_memcached_in_every_run() {
    let _measuring = measuring();
    let memcached: Vec<(i64, u64)> =
        (0..2).map(|_| churn_rss(&["memcached"], Duration::from_secs(2))).collect();
    eprintln!("memcached: RSS growth under churn, (bytes, connections): {memcached:?}");
    // Ten runs each, a fresh server per run: a bound that held only by luck would fail here.
    for args in [&[][..], &["-t", "1"]] {
        let mut figures = Vec::new();
        for _ in 0..10 {
            figures.push(churn_rss(args, Duration::from_secs(2)));
        }
        eprintln!("quicksilver {args:?}: RSS growth under churn, (bytes, connections): {figures:?}");
        for (grown, connections) in figures {
            assert!(connections >= 300, "{args:?}: only {connections} connections in the churn");
            assert!(grown <= CHURN_GROWTH_MAX, "{args:?}: RSS grew {grown} bytes under churn");
        }
    }
}
