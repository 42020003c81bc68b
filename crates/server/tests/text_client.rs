//! qs-client's text-protocol client against real memcached and quicksilver, and its
//! partition-aware mode against quicksilver's worker ports.

mod common;

use common::ServerProcess;
use qs_client::{Error, Op, Reply, Status, TextClient};
use std::net::SocketAddr;

fn addr(server: &ServerProcess) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], server.port))
}

/// What a reply shows that two servers must agree on (CAS values differ between servers).
fn shown(reply: &Result<Reply, Error>, op: &Op<'_>) -> String {
    match reply {
        Ok(reply) => {
            let number = match op {
                Op::Incr { .. } | Op::Decr { .. } => reply.number.to_string(),
                _ => String::new(),
            };
            format!("{:?} {} {} {}", reply.status, reply.flags, String::from_utf8_lossy(&reply.value), number)
        }
        Err(error) => format!("error: {error}"),
    }
}

fn script(client: &mut TextClient) -> Vec<String> {
    let mut seen = Vec::new();
    let mut run = |client: &mut TextClient, ops: &[Op<'_>]| {
        let replies = client.execute(ops);
        assert_eq!(replies.len(), ops.len());
        seen.extend(replies.iter().zip(ops).map(|(reply, op)| shown(reply, op)));
        replies
    };
    let set = |key, value, flags| Op::Set { key, value, flags, exptime: 0, cas: 0 };
    run(
        client,
        &[set(b"a", b"alpha", 1), set(b"b", b"beta", 2), Op::Get(b"a"), Op::Get(b"missing"), Op::Get(b"b")],
    );
    run(
        client,
        &[
            Op::Add { key: b"a", value: b"x", flags: 0, exptime: 0 },
            Op::Add { key: b"c", value: b"gamma", flags: 3, exptime: 0 },
            Op::Replace { key: b"nothing", value: b"x", flags: 0, exptime: 0 },
            Op::Replace { key: b"c", value: b"GAMMA", flags: 4, exptime: 0 },
            Op::Get(b"c"),
        ],
    );
    let cas = run(client, &[Op::Get(b"a")])[0].as_ref().unwrap().number;
    run(
        client,
        &[
            Op::Set { key: b"a", value: b"stale", flags: 0, exptime: 0, cas: cas + 1 },
            Op::Set { key: b"a", value: b"swapped", flags: 9, exptime: 0, cas },
            Op::Set { key: b"absent", value: b"x", flags: 0, exptime: 0, cas: 77 },
            Op::Get(b"a"),
        ],
    );
    let cas = run(client, &[Op::Get(b"b")])[0].as_ref().unwrap().number;
    run(
        client,
        &[
            Op::Delete { key: b"b", cas: cas + 1 },
            Op::Delete { key: b"b", cas },
            Op::Delete { key: b"b", cas: 0 },
            Op::Delete { key: b"c", cas: 0 },
            set(b"n", b"10", 0),
            Op::Incr { key: b"n", delta: 5 },
            Op::Decr { key: b"n", delta: 100 },
            Op::Incr { key: b"a", delta: 1 },
            Op::Incr { key: b"none", delta: 1 },
            Op::Touch { key: b"n", exptime: 100 },
            Op::Touch { key: b"none", exptime: 100 },
            Op::Get(b"n"),
            Op::Get(b""),
            Op::Get(b"has space"),
        ],
    );
    // A pipeline of many.
    let keys: Vec<Vec<u8>> = (0..300).map(|i| format!("pipelined:{i}").into_bytes()).collect();
    let sets: Vec<Op<'_>> =
        keys.iter().map(|key| Op::Set { key, value: key, flags: 7, exptime: 0, cas: 0 }).collect();
    run(client, &sets);
    let gets: Vec<Op<'_>> = keys.iter().map(|key| Op::Get(key)).collect();
    run(client, &gets);
    seen
}

#[test]
fn the_text_client_gets_the_same_answers_from_memcached_and_quicksilver() {
    let memcached = ServerProcess::memcached(&[]);
    let quicksilver = ServerProcess::quicksilver(&["-t", "2"]);
    let expected = script(&mut TextClient::connect(addr(&memcached)).unwrap());
    let got = script(&mut TextClient::connect(addr(&quicksilver)).unwrap());
    assert_eq!(got, expected);
    assert!(expected.iter().any(|line| line.starts_with("Exists")), "the script exercises CAS: {expected:?}");
    assert!(
        expected.contains(&"Ok 0 15 ".to_string()) || expected.contains(&"Ok 0  15".to_string()),
        "{expected:?}"
    );
}

#[test]
fn partition_aware_requests_never_leave_their_worker() {
    let mut found = None;
    for _ in 0..5 {
        let base = common::free_tcp_ports(2).to_string();
        let started = std::panic::catch_unwind(|| {
            ServerProcess::quicksilver(&["-t", "2", "--worker-port-base", &base])
        });
        if let Ok(server) = started {
            found = Some(server);
            break;
        }
    }
    let server = found.expect("quicksilver with worker ports");
    let mut aware = TextClient::connect_partition_aware(addr(&server)).unwrap();
    let map = aware.partition_map().unwrap().clone();
    assert_eq!(map.owners, [0, 1, 0, 1, 0, 1, 0, 1]);
    let keys: Vec<Vec<u8>> = (0..400).map(|i| format!("aware:{i}").into_bytes()).collect();
    let sets: Vec<Op<'_>> =
        keys.iter().map(|key| Op::Set { key, value: key, flags: 1, exptime: 0, cas: 0 }).collect();
    assert!(aware.execute(&sets).into_iter().all(|reply| reply.unwrap().status == Status::Ok));
    let mut ops: Vec<Op<'_>> = keys.iter().map(|key| Op::Get(key)).collect();
    ops.extend(keys.iter().map(|key| Op::Delete { key, cas: 0 }));
    for (reply, op) in aware.execute(&ops).into_iter().zip(&ops) {
        let reply = reply.unwrap();
        assert_eq!(reply.status, Status::Ok);
        if let Op::Get(key) = op {
            assert_eq!(&reply.value, key);
        }
    }
    let mut text = server.connect();
    assert_eq!(common::stat(&mut text, "requests_forwarded"), 0, "no request crossed workers");
    // The same writes through the main port are handed to their owners about half the time.
    let mut plain = TextClient::connect(addr(&server)).unwrap();
    assert!(plain.execute(&sets).into_iter().all(|reply| reply.unwrap().status == Status::Ok));
    assert!(common::stat(&mut text, "requests_forwarded") > 50);
}

#[test]
fn partition_aware_mode_needs_worker_ports_and_says_so() {
    let server = ServerProcess::quicksilver(&["-t", "2"]);
    let error = TextClient::connect_partition_aware(addr(&server)).err().expect("no worker ports");
    assert!(error.to_string().contains("--worker-port-base"), "{error}");
    let memcached = ServerProcess::memcached(&[]);
    let error = TextClient::connect_partition_aware(addr(&memcached)).err().expect("not quicksilver");
    assert!(error.to_string().contains("not a Quicksilver server"), "{error}");
}
