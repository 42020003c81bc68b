//! memcached's UDP protocol (-U), side by side with memcached 1.6: the same datagrams, the same
//! reply datagrams (frame headers included); bad datagrams; replies spanning many datagrams;
//! gets whose keys live on other workers.

mod common;

use common::{Datagram, ServerProcess, UdpClient};

/// Requests whose replies do not depend on the server (no CAS values, versions or stats).
const SCRIPT: &[&[u8]] = &[
    b"set a 5 0 3\r\nabc\r\n",
    b"get a\r\n",
    b"get a a b\r\n",
    b"get zz a\r\n",
    b"get a zz a\r\n",
    b"get nope\r\n",
    b"set b 7 0 2\r\nBB\r\nget a b\r\nget b a c\r\n",
    b"gat 100 a b\r\n",
    b"add a 0 0 1\r\nx\r\nreplace q 0 0 1\r\nx\r\nappend a 0 0 2\r\nde\r\nprepend a 0 0 1\r\n_\r\nget a\r\n",
    b"set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nincr nope 1\r\n",
    b"delete a\r\ndelete a\r\ntouch b 10\r\ntouch a 10\r\n",
    b"set q 0 0 1 noreply\r\nQ\r\nget q\r\n",
    b"bogus command\r\n",
    b"get\r\n",
    b"\r\n",
    b"set k 0 0 1\r\nabc\r\n",
    b"set k 0 0 notanumber\r\n",
    b"ms m 2 T0 F3\r\nhi\r\nmg m v f\r\nmg zz v\r\nmg zz v q\r\nmd m q\r\nmg m\r\n",
    b"ma n D2\r\nma n MD D1 v\r\nma zz\r\nmn\r\n",
    b"verbosity 1\r\nflush_all 0\r\n",
    b"get b n\r\n",
];

/// Requests of the script that memcached 1.6.40's parser answers differently from Debian's
/// 1.6.18, with 1.6.45's reply datagrams (one each, then `mn`'s).
const CHANGED_SINCE_1_6_18: &[(&[u8], &[&str])] = &[
    (b"get\r\n", &["CLIENT_ERROR bad command line format\r\n", "MN\r\n"]),
    (b"\r\n", &["CLIENT_ERROR bad command line format\r\n", "MN\r\n"]),
    (
        b"set k 0 0 1\r\nabc\r\n",
        &["CLIENT_ERROR bad data chunk\r\n", "CLIENT_ERROR bad command line format\r\n", "MN\r\n"],
    ),
    (b"set k 0 0 notanumber\r\n", &["CLIENT_ERROR bad command line format\r\n", "MN\r\n"]),
];

/// Sends every request of the script (each followed by `mn`, whose reply ends the exchange) and
/// returns the reply datagrams, without memcached's empty datagrams (count 0: an artifact of
/// how it frees reply objects, which clients skip).
fn run_script(server: &ServerProcess) -> Vec<Vec<Datagram>> {
    let mut client = UdpClient::new(server.udp_port);
    SCRIPT
        .iter()
        .map(|request| {
            let payload = [request, b"mn\r\n".as_slice()].concat();
            let reply = client.exchange(&payload).unwrap_or_else(|| {
                panic!("{}: no reply to {:?}", server.name, String::from_utf8_lossy(request))
            });
            reply.into_iter().filter(|datagram| datagram.header[2] != 0).collect()
        })
        .collect()
}

fn show(datagrams: &[Datagram]) -> Vec<String> {
    datagrams.iter().map(|d| format!("{:?} {:?}", d.header, String::from_utf8_lossy(&d.payload))).collect()
}

#[test]
fn udp_replies_match_memcached_datagram_for_datagram() {
    let memcached = ServerProcess::memcached_udp(&["-t", "1"]);
    let expected = run_script(&memcached);
    // Two workers, so that gets of several keys gather values from both.
    let quicksilver = ServerProcess::quicksilver_udp(&["-t", "2"]);
    let got = run_script(&quicksilver);
    for ((request, expected), got) in SCRIPT.iter().zip(&expected).zip(&got) {
        if let Some((_, replies)) = CHANGED_SINCE_1_6_18.iter().find(|(changed, _)| changed == request) {
            // memcached 1.6.45's replies (the live oracle is Debian's 1.6.18).
            let payloads: Vec<String> =
                got.iter().map(|d| String::from_utf8_lossy(&d.payload).into_owned()).collect();
            assert_eq!(payloads, *replies, "reply datagrams to {:?}", String::from_utf8_lossy(request));
            continue;
        }
        // Request ids differ only if the scripts diverged; compare everything else exactly.
        assert_eq!(show(got), show(expected), "reply datagrams to {:?}", String::from_utf8_lossy(request));
    }
    assert_eq!(quicksilver.terminate().code(), Some(0));
}

#[test]
fn large_replies_span_numbered_datagrams_of_at_most_1400_bytes() {
    let memcached = ServerProcess::memcached_udp(&["-t", "1"]);
    let quicksilver = ServerProcess::quicksilver_udp(&["-t", "2"]);
    let value: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut replies = Vec::new();
    for server in [&memcached, &quicksilver] {
        let mut tcp = server.connect();
        let mut set = format!("set big 3 0 {}\r\n", value.len()).into_bytes();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        assert_eq!(tcp.call(&set), b"STORED\r\n");
        let mut client = UdpClient::new(server.udp_port);
        let datagrams = client.exchange(b"get big\r\nmn\r\n").expect("a reply");
        let (value_part, mn) = datagrams.split_at(datagrams.len() - 1);
        assert_eq!(mn[0].payload, b"MN\r\n");
        let count = value_part.len();
        for (sequence, datagram) in value_part.iter().enumerate() {
            assert_eq!(datagram.header[1..], [sequence as u16, count as u16, 0], "{}", server.name);
            assert!(datagram.payload.len() + 8 <= 1400, "{}: {} bytes", server.name, datagram.payload.len());
        }
        let joined: Vec<u8> = value_part.iter().flat_map(|d| d.payload.clone()).collect();
        let mut expected = b"VALUE big 3 100000\r\n".to_vec();
        expected.extend_from_slice(&value);
        expected.extend_from_slice(b"\r\nEND\r\n");
        assert!(joined == expected, "{}: the reassembled reply differs", server.name);
        replies.push(value_part.to_vec());
    }
    assert_eq!(replies[0], replies[1], "memcached and quicksilver split the reply differently");
}

#[test]
fn gets_gather_keys_from_every_worker_in_order() {
    let server = ServerProcess::quicksilver_udp(&["-t", "2"]);
    let mut tcp = server.connect();
    let keys: Vec<String> = (0..40).map(|i| format!("key:{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(
            tcp.call(format!("set {key} {i} 0 {}\r\n{}\r\n", key.len(), key).as_bytes()),
            b"STORED\r\n"
        );
    }
    let request = format!("get {} missing\r\n", keys.join(" "));
    let tcp_reply = tcp.call(request.as_bytes());
    let mut client = UdpClient::new(server.udp_port);
    let datagrams = client.exchange(format!("{request}mn\r\n").as_bytes()).expect("a reply");
    // One message per value, then END alone (the last key missed), then MN.
    assert_eq!(datagrams.len(), keys.len() + 2);
    let joined: Vec<u8> = datagrams[..datagrams.len() - 1].iter().flat_map(|d| d.payload.clone()).collect();
    assert_eq!(String::from_utf8_lossy(&joined), String::from_utf8_lossy(&tcp_reply));
    let stats = common::stats(&mut tcp, "partitions");
    let owners: std::collections::HashSet<&String> =
        stats.iter().filter(|(k, _)| k.ends_with(":owner_worker")).map(|(_, v)| v).collect();
    assert_eq!(owners.len(), 2, "the keys did not span both workers");
}

#[test]
fn bad_datagrams_get_no_reply_or_an_error_and_harm_nothing() {
    let server = ServerProcess::quicksilver_udp(&["-t", "2"]);
    let mut tcp = server.connect();
    assert_eq!(tcp.call(b"set keep 1 0 4\r\nsafe\r\n"), b"STORED\r\n");
    let mut client = UdpClient::new(server.udp_port);
    let header = |id: u16, sequence: u16, count: u16| {
        [id.to_be_bytes(), sequence.to_be_bytes(), count.to_be_bytes(), [0, 0]].concat()
    };
    // Ignored, as memcached ignores them: shorter than a header, header only, a request
    // claiming several datagrams (not supported) or none.
    for short in 0..8 {
        client.send_raw(&vec![7u8; short]);
    }
    client.send_raw(&header(9, 0, 1));
    client.send_raw(&[header(10, 0, 2), b"get keep\r\n".to_vec()].concat());
    client.send_raw(&[header(11, 0, 0), b"get keep\r\n".to_vec()].concat());
    // Incomplete requests at the end of a datagram are dropped (a datagram is the whole
    // request): the complete ones before them are answered.
    let reply = client.exchange(b"mn\r\nset x 0 0 10\r\nabc").expect("a reply");
    assert_eq!(reply.last().unwrap().payload, b"MN\r\n");
    let reply = client.exchange(b"mn\r\nget keep").expect("a reply");
    assert_eq!(reply.last().unwrap().payload, b"MN\r\n");
    // Errors are answered like memcached's.
    let mut cases: Vec<(Vec<u8>, &[u8])> = vec![
        (b"set x 0 0 2\r\nabc\r\nmn\r\n".to_vec(), b"CLIENT_ERROR bad data chunk\r\n"),
        (b"set x 0 0 2000000\r\n".to_vec(), b"SERVER_ERROR object too large for cache\r\n"),
        (
            [b"get ".as_slice(), &[b'k'; 300], b"\r\nmn\r\n"].concat(),
            b"CLIENT_ERROR bad command line format\r\n",
        ),
        ([&[0xffu8, 0, 1, 2, 0x80][..], b"\r\nmn\r\n"].concat(), b"ERROR\r\n"),
    ];
    for (payload, error) in cases.drain(..) {
        let id = 100;
        client.send_raw(&[header(id, 0, 1), payload.clone()].concat());
        client.socket.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 2048];
        let len = client.socket.recv(&mut buf).expect("an error reply");
        assert_eq!(&buf[8..len], error, "{:?}", String::from_utf8_lossy(&payload));
        // Drain what else it answered (e.g. ERROR for the skipped data line, then MN).
        while client.socket.set_read_timeout(Some(std::time::Duration::from_millis(200))).is_ok()
            && client.socket.recv(&mut buf).is_ok()
        {}
    }
    // quit over UDP stops only its own datagram.
    let reply = client.exchange(b"quit\r\n").map(|d| d.len());
    assert_eq!(reply, None, "quit answered");
    // A line over the length limit without a newline: dropped like a closed connection.
    client.send_raw(&[header(12, 0, 1), vec![b'x'; 4000]].concat());
    // Everything else is untouched, over UDP and TCP.
    let reply = client.exchange(b"get keep\r\nmn\r\n").expect("UDP still answers");
    assert_eq!(reply[0].payload, b"VALUE keep 1 4\r\nsafe\r\nEND\r\n");
    assert_eq!(tcp.call(b"get keep\r\n"), b"VALUE keep 1 4\r\nsafe\r\nEND\r\n");
    assert_eq!(server.terminate().code(), Some(0));
}

#[test]
fn a_get_of_many_large_values_in_one_datagram_is_cut_off_at_the_output_bound() {
    // 3000 keys of a 1 MB value in one small datagram: 3 GB of replies if nothing bounded it.
    for workers in ["1", "2"] {
        let server = ServerProcess::quicksilver_udp(&["-t", workers]);
        let mut tcp = server.connect();
        let value = vec![b'v'; 1_000_000];
        let mut set = format!("set big 0 0 {}\r\n", value.len()).into_bytes();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        assert_eq!(tcp.call(&set), b"STORED\r\n");
        let status = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let rss = |pid: u32| -> u64 {
            let status = status(pid);
            let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
            line.split_whitespace().nth(1).and_then(|kb| kb.parse().ok()).expect("kB")
        };
        let before = rss(server.pid());
        let client = UdpClient::new(server.udp_port);
        let keys = vec!["big"; 3000].join(" ");
        client.send_raw(&[&[0u8, 5, 0, 0, 0, 1, 0, 0][..], format!("get {keys}\r\n").as_bytes()].concat());
        // The server answers what fits under its output bound, then memcached's error; some
        // datagrams may be lost in the client's socket buffer, so only the bound is checked.
        std::thread::sleep(std::time::Duration::from_millis(500));
        let grown_kb = rss(server.pid()).saturating_sub(before);
        assert!(grown_kb < 64 << 10, "{workers} workers: grew {grown_kb} kB");
        assert_eq!(tcp.call(b"get big\r\n").len(), value.len() + "VALUE big 0 1000000\r\n\r\nEND\r\n".len());
    }
}
