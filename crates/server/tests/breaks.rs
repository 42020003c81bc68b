//! Inputs that once took a worker down or lost an acknowledged write (issue 74), each at one
//! worker and at two, over the Redis listener and memcached's text protocol where the same path
//! exists: the server answers every one with its reply or a clear error, keeps answering every
//! client, and a write it acknowledged is there for the next read.

mod common;

use common::resp::{call, connect, frame, quicksilver, Redis};

/// A RESP request of byte arguments.
fn frame_bytes(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The server is alive and every worker answers: eight fresh connections (spread over the
/// workers) each store and read a key of their own.
fn every_worker_answers(port: u16) {
    for n in 0..8 {
        let mut client = connect(port);
        let key = format!("alive{n}");
        assert_eq!(call(&mut client, &frame(&["SET", &key, "v"])), b"+OK\r\n", "{key}");
        assert_eq!(call(&mut client, &frame(&["GET", &key])), b"$1\r\nv\r\n", "{key}");
    }
}

const BAD_KEY: &[u8] = b"-ERR key is empty or longer than 65536 bytes\r\n";

/// A Redis key past 64 KiB (and its database's prefix) is refused by every command on one key,
/// a memcached key past 250 bytes where memcached's protocols parse it.
#[test]
fn a_key_over_the_limits_is_refused_wherever_it_arrives() {
    let long = "k".repeat(64 * 1024 + 4);
    let memcached_long = "k".repeat(251);
    for threads in ["1", "2"] {
        let (mut server, port) = quicksilver(&["-t", threads]);
        // Eight connections, so some arrive on a worker that does not own the key's partition.
        for _ in 0..8 {
            let mut client = connect(port);
            for args in [
                &["SET", &long, "v"][..],
                &["SETNX", &long, "v"],
                &["INCR", &long],
                &["INCRBY", &long, "2"],
                &["DECRBY", &long, "2"],
                &["APPEND", &long, "v"],
                &["EXPIRE", &long, "10"],
                &["DEL", &long],
                &["GET", &long],
                &["TTL", &long],
            ] {
                assert_eq!(call(&mut client, &frame(args)), BAD_KEY, "-t {threads}: {}", args[0]);
            }
            // The connection stays in step.
            assert_eq!(call(&mut client, &frame(&["PING"])), b"+PONG\r\n");
        }
        every_worker_answers(port);
        // memcached's protocols refuse it where they parse it.
        let text_port = server.port;
        let mut text =
            common::Client::from_stream(std::net::TcpStream::connect(("127.0.0.1", text_port)).unwrap());
        let reply = text.call(format!("set {memcached_long} 0 0 1\r\nv\r\n").as_bytes());
        assert!(reply.starts_with(b"CLIENT_ERROR"), "{:?}", String::from_utf8_lossy(&reply));
        assert!(server.wait_exit(std::time::Duration::ZERO).is_none(), "the server stopped");
    }
}

/// The sizes that once walked a log's head past its tail: values close to half a 2 MiB
/// partition, one over what it takes, and a SETRANGE that grows one.
#[test]
fn large_values_on_the_smallest_partitions_keep_every_acknowledged_write() {
    for (memory, threads) in [("8", "1"), ("16", "2")] {
        let (mut server, port) = quicksilver(&["-m", memory, "-t", threads]);
        let mut client = connect(port);
        let mut acknowledged: Option<usize> = None;
        for (step, len) in
            [888_698, 984_869, 0, 399_821, 616_222, 925_446, 924_140, 888_698].into_iter().enumerate()
        {
            let reply = if len == 0 {
                call(&mut client, &frame_bytes(&[b"SETRANGE", b"a", b"924040", &[b'y'; 100]]))
            } else {
                call(&mut client, &frame_bytes(&[b"SET", b"a", &vec![b'x'; len]]))
            };
            let text = String::from_utf8_lossy(&reply).into_owned();
            match reply.first() {
                Some(b'+') => acknowledged = Some(len),
                Some(b':') => acknowledged = Some(text[1..text.len() - 2].parse().unwrap()),
                Some(b'-') => assert_eq!(text, "-ERR object too large for cache\r\n", "step {step}"),
                _ => panic!("-m {memory} -t {threads}, step {step}: {text:?}"),
            }
            // The write just acknowledged answers the next read, whole.
            let got = call(&mut client, &frame(&["STRLEN", "a"]));
            if let Some(len) = acknowledged {
                assert_eq!(got, format!(":{len}\r\n").as_bytes(), "-m {memory} -t {threads}, step {step}");
            }
        }
        every_worker_answers(port);
        // The same through memcached's text protocol.
        let mut text =
            common::Client::from_stream(std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap());
        for len in [888_698usize, 984_869, 399_821, 925_446, 924_140] {
            let mut request = format!("set t 0 0 {len}\r\n").into_bytes();
            request.extend(std::iter::repeat(b'x').take(len));
            request.extend_from_slice(b"\r\n");
            let reply = text.call(&request);
            if reply == b"STORED\r\n" {
                let got = text.call(b"mg t s\r\n");
                assert_eq!(got, format!("HD s{len}\r\n").as_bytes(), "-m {memory}: set of {len}");
            } else {
                assert_eq!(reply, b"SERVER_ERROR object too large for cache\r\n", "set of {len}");
            }
        }
        assert!(server.wait_exit(std::time::Duration::ZERO).is_none(), "the server stopped");
    }
}

#[test]
fn an_append_past_the_item_limit_is_refused_and_changes_nothing() {
    for threads in ["1", "2"] {
        let (_server, port) = quicksilver(&["-t", threads]);
        let mut client = connect(port);
        let chunk = vec![b'x'; 65_536];
        let mut len = 0;
        loop {
            let reply = call(&mut client, &frame_bytes(&[b"APPEND", b"grows", &chunk]));
            if reply == b"-ERR object too large for cache\r\n" {
                break;
            }
            len += chunk.len();
            assert_eq!(reply, format!(":{len}\r\n").as_bytes());
            assert!(len < 2 << 20, "no limit reached");
        }
        assert_eq!(call(&mut client, &frame(&["STRLEN", "grows"])), format!(":{len}\r\n").as_bytes());
    }
}

/// A connection's later command sees its earlier writes, whichever workers own the keys: a
/// COPY pipelined right after the SET of its source.
#[test]
fn a_copy_pipelined_after_a_set_sees_it() {
    for args in [&["-t", "2"][..], &["-t", "4"], &["-t", "2", "--access", "erew"]] {
        let (_server, port) = quicksilver(args);
        let mut client = connect(port);
        let erew = args.contains(&"erew");
        for n in 0..40 {
            let (from, to) = (format!("src{n}"), format!("dst{n}"));
            let mut both = frame(&["SET", &from, "v"]);
            both.extend(frame(&["COPY", &from, &to]));
            let reply = call(&mut client, &both);
            let copied = reply == b"+OK\r\n:1\r\n";
            // Without CREW, keys of two workers are refused (and nothing else).
            let refused = erew
                && reply.starts_with(
                    b"+OK\r\n-ERR RENAME, COPY, LMOVE and SMOVE of keys owned by more than one worker",
                );
            assert!(copied || refused, "{args:?}, pair {n}: {:?}", String::from_utf8_lossy(&reply));
            if copied {
                assert_eq!(call(&mut client, &frame(&["GET", &to])), b"$1\r\nv\r\n");
            }
        }
        every_worker_answers(port);
    }
}

/// Deadlines past 2106 (unix seconds over 2^32), as redis-server keeps them.
#[test]
fn times_past_2106_are_kept_as_redis_server_keeps_them() {
    let requests: Vec<Vec<u8>> = [
        &["SET", "a", "1"][..],
        &["EXPIREAT", "a", "33177117420"],
        &["EXPIRETIME", "a"],
        &["PEXPIRETIME", "a"],
        &["SET", "b", "1", "EXAT", "33177117420"],
        &["EXPIRETIME", "b"],
        &["PEXPIREAT", "b", "33177117420123"],
        &["PEXPIRETIME", "b"],
        &["GETEX", "a", "EXAT", "40000000000"],
        &["EXPIRETIME", "a"],
        &["EXPIREAT", "a", "9999999999999999"],
        &["EXPIREAT", "a", "33177117421", "GT"],
        &["EXPIRETIME", "a"],
        &["PERSIST", "a"],
        &["EXPIRETIME", "a"],
    ]
    .iter()
    .map(|args| frame(args))
    .collect();
    common::resp::same_replies(&requests);
    // TTL counts down from there (compared within a second of redis-server's).
    let redis = Redis::start();
    let (_server, port) = quicksilver(&["-t", "2"]);
    let ttl = |port: u16| {
        let mut client = connect(port);
        call(&mut client, &frame(&["SET", "far", "1", "EXAT", "33177117420"]));
        let reply = call(&mut client, &frame(&["TTL", "far"]));
        String::from_utf8_lossy(&reply[1..reply.len() - 2]).parse::<i64>().unwrap()
    };
    assert!((ttl(port) - ttl(redis.port)).abs() <= 1);
}

/// An HTTP request to the Redis port (a web page can make a browser send one) runs none of
/// its body: the connection closes at `POST` or `Host:` with nothing answered, as
/// redis-server's cross-protocol guard closes it.
#[test]
fn an_http_request_to_the_redis_port_runs_nothing() {
    let redis = Redis::start();
    let (_server, port) = quicksilver(&["-t", "2"]);
    let body = "*3\r\n$3\r\nSET\r\n$6\r\nxproto\r\n$5\r\npwned\r\n";
    for request in [
        format!("POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}", body.len()),
        format!("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n{body}"),
    ] {
        let mut replies = Vec::new();
        for port in [redis.port, port] {
            let mut client = connect(port);
            client.send(request.as_bytes());
            replies.push(client.read_to_close());
            let mut check = connect(port);
            assert_eq!(call(&mut check, &frame(&["EXISTS", "xproto"])), b":0\r\n", "{request:?}");
        }
        // At most the refusal of `GET /` (an HTTP GET's first line), from both: the reset at
        // the close (the unread body is discarded) may drop even that.
        let most = if request.starts_with("GET") {
            &b"-ERR wrong number of arguments for 'get' command\r\n"[..]
        } else {
            b""
        };
        for reply in &replies {
            assert!(most.starts_with(reply), "{request:?}: {:?}", String::from_utf8_lossy(reply));
        }
    }
}

/// SCAN's cursors in the time of the keys, not of -m: a few keys come back in one call
/// however large the memory, and a full walk of many lists every key in about as many calls
/// as redis-server's (COUNT keys a call).
#[test]
fn scan_costs_the_keys_not_the_memory() {
    let scan_all = |port: u16| {
        let mut client = connect(port);
        let (mut cursor, mut calls, mut seen) = ("0".to_string(), 0, std::collections::HashSet::new());
        loop {
            let reply = call(&mut client, &frame(&["SCAN", &cursor, "COUNT", "10"]));
            let text = String::from_utf8(reply).expect("text");
            let lines: Vec<&str> = text.split("\r\n").collect();
            // *2, $n, cursor, *k, then $len/key pairs.
            cursor = lines[2].to_string();
            seen.extend(
                lines[4..].iter().skip(1).step_by(2).filter(|key| !key.is_empty()).map(|k| k.to_string()),
            );
            calls += 1;
            if cursor == "0" {
                return (seen, calls);
            }
        }
    };
    for (memory, threads) in [("64", "1"), ("1024", "2")] {
        let (_server, port) = quicksilver(&["-m", memory, "-t", threads]);
        let mut client = connect(port);
        for key in ["a", "b", "c"] {
            call(&mut client, &frame(&["SET", key, "v"]));
        }
        let (seen, calls) = scan_all(port);
        assert_eq!((seen.len(), calls), (3, 1), "-m {memory} -t {threads}");
        let mut pipeline = Vec::new();
        for n in 0..3000 {
            pipeline.extend(frame(&["SET", &format!("key:{n}"), "v"]));
        }
        client.send(&pipeline);
        let replies = call(&mut client, &frame(&["DBSIZE"]));
        assert!(replies.ends_with(b"+OK\r\n:3003\r\n"), "-m {memory}: DBSIZE after the sets");
        let (seen, calls) = scan_all(port);
        assert_eq!(seen.len(), 3003, "-m {memory} -t {threads}");
        assert!(calls <= 3003 / 10 + 20, "-m {memory} -t {threads}: {calls} calls");
    }
}

/// A request's bounds are redis-server's, not the item limit: an MGET of 40,000 keys (a
/// 1.1 MB request) is answered as redis-server answers it, and a SET of a value over -I is
/// refused with an error, the connection in step.
#[test]
fn a_request_longer_than_the_item_limit_is_answered() {
    let redis = Redis::start();
    let keys: Vec<String> = (0..40_000).map(|n| format!("mget-key-{n:08}-of-forty-thousand")).collect();
    let mut mget: Vec<&str> = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    let mget = frame(&mget);
    assert!(mget.len() > 1 << 20);
    let mut theirs = connect(redis.port);
    call(&mut theirs, &frame(&["SET", "mget-key-00000007-of-forty-thousand", "seven"]));
    let want = call(&mut theirs, &mget);
    for threads in ["1", "2"] {
        let (_server, port) = quicksilver(&["-t", threads]);
        let mut client = connect(port);
        call(&mut client, &frame(&["SET", "mget-key-00000007-of-forty-thousand", "seven"]));
        assert!(call(&mut client, &mget) == want, "-t {threads}: MGET of 40,000 keys");
        let big = frame_bytes(&[b"SET", b"big", &vec![b'x'; 2 << 20]]);
        assert_eq!(call(&mut client, &big), b"-ERR object too large for cache\r\n", "-t {threads}");
        assert_eq!(call(&mut client, &frame(&["PING"])), b"+PONG\r\n");
    }
}

/// A request of many arguments that arrives a piece at a time (its walk goes on from where the
/// last read's stopped) is answered as redis-server answers it, over more than 2^20 arguments.
#[test]
fn a_request_of_many_arguments_arriving_in_pieces_is_answered() {
    let redis = Redis::start();
    let keys: Vec<String> = (0..1_100_000).map(|n| format!("{n:07}")).collect();
    let mut del: Vec<&str> = vec!["DEL"];
    del.extend(keys.iter().map(String::as_str));
    let del = frame(&del);
    let (_server, port) = quicksilver(&["-m", "256", "-t", "2"]);
    for port in [redis.port, port] {
        let mut client = connect(port);
        call(&mut client, &frame(&["MSET", "0000007", "a", "1099999", "b"]));
        for piece in del.chunks(4096) {
            client.send(piece);
        }
        assert_eq!(call(&mut client, &frame(&["PING"])), b":2\r\n+PONG\r\n", "port {port}");
    }
}

/// A request whose next argument's line is empty, arriving after the arguments before it (its
/// walk resumed from where the last read's stopped: the session fuzz target's panic), is a
/// protocol error as redis-server's, and every worker keeps answering.
#[test]
fn an_empty_argument_line_after_a_pause_is_a_protocol_error() {
    let redis = Redis::start();
    let mut expected = None;
    for (port, threads) in [(redis.port, ""), (0, "1"), (0, "2")] {
        let server = (port == 0).then(|| quicksilver(&["-t", threads]));
        let port = server.as_ref().map_or(port, |(_, port)| *port);
        let mut client = connect(port);
        client.send(b"*2\r\n$3\r\nGET\r\n");
        // Only so the rest likely comes in a read of its own (the test holds either way).
        std::thread::sleep(std::time::Duration::from_millis(200));
        client.send(b"\r\nkey\r\n");
        let reply = client.read_to_close();
        assert!(reply.starts_with(b"-ERR Protocol error"), "{:?}", String::from_utf8_lossy(&reply));
        assert_eq!(expected.get_or_insert_with(|| reply.clone()), &reply, "-t {threads}");
        if server.is_some() {
            every_worker_answers(port);
        }
    }
}
