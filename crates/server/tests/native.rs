//! The native protocol end to end (docs/PROTOCOL.md): the real `quicksilver` binary with
//! `--native-port`, spoken to by qs-client and by hand-built datagrams.

mod common;

use common::ServerProcess;
use qs_client::native::{ClientStats, Datagrams};
use qs_client::{Error, NativeClient, Op, Retry, Status};
use qs_proto::native::{self as wire, Directory, Header, Kind, Opcode, RequestMsg, ResponseMsg, Responses};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

fn base(server: &ServerProcess) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], server.native_port))
}

fn client(server: &ServerProcess) -> NativeClient {
    NativeClient::connect(base(server)).expect("the directory")
}

/// A response as (status, request id, number, value).
type Answer = (Status, u32, u64, Vec<u8>);

/// A raw socket for hand-built datagrams.
struct Raw {
    socket: UdpSocket,
}

impl Raw {
    fn new() -> Raw {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        Raw { socket }
    }

    fn directory(&self, to: SocketAddr) -> Directory {
        let mut request = Vec::new();
        Header { kind: Kind::DirectoryRequest, count: 0, epoch: 0, cookie: 0 }.write(&mut request);
        request.resize(wire::DIRECTORY_REQUEST_BYTES_MIN, 0);
        self.socket.send_to(&request, to).unwrap();
        let reply = self.receive().expect("a directory");
        let header = Header::parse(&reply).unwrap();
        assert_eq!(header.kind, Kind::Directory);
        let directory = Directory::parse(&reply[wire::HEADER_BYTES..]).unwrap();
        assert_eq!(header.epoch, directory.epoch);
        directory
    }

    fn receive(&self) -> Option<Vec<u8>> {
        let mut buf = vec![0; 65536];
        let (len, _) = self.socket.recv_from(&mut buf).ok()?;
        buf.truncate(len);
        Some(buf)
    }

    /// Sends `requests` in one datagram and returns the replies of the datagrams that come back.
    fn exchange(&self, to: SocketAddr, cookie: u64, requests: &[RequestMsg<'_>]) -> (Header, Vec<Answer>) {
        let mut datagram = Vec::new();
        Header { kind: Kind::Requests, count: requests.len() as u16, epoch: 0, cookie }.write(&mut datagram);
        for request in requests {
            request.write(&mut datagram);
        }
        self.send_raw(to, &datagram)
    }

    fn send_raw(&self, to: SocketAddr, datagram: &[u8]) -> (Header, Vec<Answer>) {
        self.socket.send_to(datagram, to).unwrap();
        let reply = self.receive().expect("a reply");
        let header = Header::parse(&reply).unwrap();
        assert_eq!(header.kind, Kind::Responses);
        let responses = Responses::new(&reply[wire::HEADER_BYTES..], header.count)
            .map(|response| {
                let ResponseMsg { status, request_id, number, value, .. } = response.unwrap();
                (status, request_id, number, value.to_vec())
            })
            .collect();
        (header, responses)
    }
}

fn request(opcode: Opcode, request_id: u32, key: &[u8]) -> RequestMsg<'_> {
    RequestMsg {
        opcode,
        request_id,
        keyhash: xxhash_rust::xxh3::xxh3_64(key),
        flags: 0,
        exptime: 0,
        operand: 0,
        key,
        value: b"",
    }
}

/// A key whose partition is `partition` under `directory`.
fn key_in(directory: &Directory, partition: usize, prefix: &str) -> Vec<u8> {
    (0..)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .find(|key| directory.partition_of(xxhash_rust::xxh3::xxh3_64(key)) == partition)
        .unwrap()
}

#[test]
fn the_directory_describes_every_partition_its_owner_and_port() {
    let server = ServerProcess::quicksilver_native(8, &["-t", "2"]);
    let raw = Raw::new();
    let directory = raw.directory(base(&server));
    assert_eq!(directory.partitions.len(), 8);
    assert_eq!(directory.partition_bits, 3);
    assert_eq!(directory.workers, 2);
    assert_eq!(directory.hash, wire::HASH_XXH3_64);
    assert_eq!(directory.access, wire::ACCESS_CREW);
    assert_eq!(directory.mode, wire::MODE_CACHE);
    assert_ne!(directory.epoch, 0);
    assert_ne!(directory.cookie, 0);
    for (partition, &(owner, port)) in directory.partitions.iter().enumerate() {
        assert_eq!(owner as usize, partition % 2);
        assert_eq!(port, server.native_port + partition as u16);
    }
    // Any partition's port answers it, with the same epoch.
    let elsewhere = raw.directory(SocketAddr::from(([127, 0, 0, 1], server.native_port + 5)));
    assert_eq!(elsewhere.epoch, directory.epoch);
    // A directory request too small to be no amplifier gets nothing.
    let mut short = Vec::new();
    Header { kind: Kind::DirectoryRequest, count: 0, epoch: 0, cookie: 0 }.write(&mut short);
    short.resize(100, 0);
    raw.socket.send_to(&short, base(&server)).unwrap();
    assert_eq!(raw.receive(), None);
    let store = ServerProcess::quicksilver_native(4, &["-t", "1", "-M", "--access", "erew"]);
    let directory = Raw::new().directory(base(&store));
    assert_eq!(
        (directory.mode, directory.access, directory.partitions.len()),
        (wire::MODE_STORE, wire::ACCESS_EREW, 4)
    );
}

#[test]
fn operations_behave_as_their_memcached_commands_and_share_the_data() {
    let server = ServerProcess::quicksilver_native(8, &["-t", "2"]);
    let mut native = client(&server);
    let mut text = server.connect();
    let ok = |result: Result<qs_client::Reply, Error>| result.expect("an answer");

    let stored = ok(native.set(b"greeting", b"hello", 42, 0));
    assert_eq!(stored.status, Status::Ok);
    let got = native.get(b"greeting").unwrap().expect("a hit");
    assert_eq!((got.value.as_slice(), got.flags, got.number), (&b"hello"[..], 42, stored.number));
    assert_eq!(text.call(b"get greeting\r\n"), b"VALUE greeting 42 5\r\nhello\r\nEND\r\n");
    assert_eq!(text.call(b"set from-text 7 0 3\r\nabc\r\n"), b"STORED\r\n");
    let from_text = native.get(b"from-text").unwrap().unwrap();
    assert_eq!((from_text.value.as_slice(), from_text.flags), (&b"abc"[..], 7));
    assert_eq!(native.get(b"nothing").unwrap(), None);

    let add = |key, value| Op::Add { key, value, flags: 0, exptime: 0 };
    let replace = |key, value| Op::Replace { key, value, flags: 0, exptime: 0 };
    let cas_set = |key, value, cas| Op::Set { key, value, flags: 0, exptime: 0, cas };
    let replies = native.execute(&[
        add(b"greeting", b"x"),
        add(b"fresh", b"new"),
        replace(b"absent", b"x"),
        replace(b"fresh", b"newer"),
        cas_set(b"greeting", b"stale", stored.number + 1000),
        cas_set(b"greeting", b"swapped", stored.number),
        cas_set(b"absent", b"x", 5),
    ]);
    let statuses: Vec<Status> = replies.into_iter().map(|reply| reply.unwrap().status).collect();
    use Status::*;
    assert_eq!(statuses, [NotStored, Ok, NotStored, Ok, Exists, Ok, NotFound]);
    assert_eq!(
        text.call(b"get greeting fresh\r\n"),
        b"VALUE greeting 0 7\r\nswapped\r\nVALUE fresh 0 5\r\nnewer\r\nEND\r\n"
    );

    assert_eq!(text.call(b"set counter 0 0 2\r\n10\r\n"), b"STORED\r\n");
    let counted = native.execute(&[
        Op::Incr { key: b"counter", delta: 5 },
        Op::Decr { key: b"counter", delta: 20 },
        Op::Incr { key: b"no-counter", delta: 1 },
        Op::Incr { key: b"greeting", delta: 1 },
        Op::Incr { key: b"counter", delta: u64::MAX },
    ]);
    let counted: Vec<(Status, u64)> =
        counted.into_iter().map(|r| r.map(|r| (r.status, r.number)).unwrap()).collect();
    assert_eq!(counted, [(Ok, 15), (Ok, 0), (NotFound, 0), (NonNumeric, 0), (Ok, u64::MAX)]);

    let touched = native
        .execute(&[Op::Touch { key: b"fresh", exptime: 100 }, Op::Touch { key: b"absent", exptime: 1 }]);
    let touched: Vec<Status> = touched.into_iter().map(|r| r.unwrap().status).collect();
    assert_eq!(touched, [Ok, NotFound]);
    assert_eq!(text.call(b"mg fresh t\r\n"), b"HD t100\r\n");
    assert_eq!(ok(native.set(b"gone", b"x", 0, -1)).status, Ok, "stored already expired");
    assert_eq!(native.get(b"gone").unwrap(), None);

    let deleted = native.execute(&[
        Op::Delete { key: b"fresh", cas: 0 },
        Op::Delete { key: b"fresh", cas: 0 },
        Op::Delete { key: b"from-text", cas: 1 },
    ]);
    let deleted: Vec<Status> = deleted.into_iter().map(|r| r.unwrap().status).collect();
    assert_eq!(deleted, [Ok, NotFound, Exists]);
    assert_eq!(text.call(b"get fresh\r\n"), b"END\r\n");

    let too_long = [b'k'; 251];
    let bad = native.execute(&[Op::Get(b""), Op::Get(&too_long)]);
    assert!(matches!(bad[0], Err(Error::BadKey)) && matches!(bad[1], Err(Error::BadKey)));
    assert_eq!(common::stat(&mut text, "native_bad"), 0);
}

#[test]
fn a_batch_over_every_partition_goes_straight_to_the_owners() {
    let server = ServerProcess::quicksilver_native(8, &["-t", "2"]);
    // A patient client: on a loaded 2-core machine the default 50 ms can pass before a busy
    // worker answers, and this test counts retransmissions.
    let socket = qs_client::native::Socket::new(UdpSocket::bind("127.0.0.1:0").unwrap());
    let patience = Retry { timeout: Duration::from_secs(2), retries: 8 };
    let mut native = NativeClient::with_datagrams(socket, base(&server), patience).expect("the directory");
    let keys: Vec<Vec<u8>> = (0..600).map(|i| format!("batch:{i}").into_bytes()).collect();
    let values: Vec<Vec<u8>> =
        (0..600).map(|i| format!("value-{i}-{}", "v".repeat(i % 50)).into_bytes()).collect();
    let sets: Vec<Op<'_>> = keys
        .iter()
        .zip(&values)
        .map(|(key, value)| Op::Set { key, value, flags: 3, exptime: 0, cas: 0 })
        .collect();
    assert!(native.execute(&sets).into_iter().all(|reply| reply.unwrap().status == Status::Ok));
    let gets: Vec<Op<'_>> = keys.iter().map(|key| Op::Get(key)).collect();
    for (reply, value) in native.execute(&gets).into_iter().zip(&values) {
        let reply = reply.unwrap();
        assert_eq!((reply.status, &reply.value, reply.flags), (Status::Ok, value, 3));
    }
    let ClientStats { datagrams_sent, retransmitted, redirected, .. } = native.stats();
    assert_eq!((retransmitted, redirected), (0, 0));
    assert!(datagrams_sent <= 40, "600 sets and 600 gets in {datagrams_sent} datagrams");
    let mut text = server.connect();
    settled_stat(&mut text, "native_requests", 1200);
    assert_eq!(common::stat(&mut text, "native_redirects"), 0, "nothing misdirected");
    assert_eq!(common::stat(&mut text, "curr_items"), 600);
    let partitions = common::stats(&mut text, "partitions");
    let holding = partitions.iter().filter(|(name, value)| name.ends_with(":items") && value != "0").count();
    assert_eq!(holding, 8, "keys on every partition: {partitions:?}");
}

#[test]
fn every_request_gets_exactly_one_response_whatever_the_bursts() {
    // Bursts of many datagrams from two senders, interleaved, then of few: the server must
    // answer only the current burst's requests (a reply slot left over from a larger burst was
    // once sent again), each sender only its own, and may put one sender's responses in fewer
    // datagrams than it sent.
    let server = ServerProcess::quicksilver_native(1, &["-t", "1"]);
    let senders = [Raw::new(), Raw::new()];
    let to = base(&server);
    let mut next_id = 1u32;
    let mut expected = [std::collections::BTreeMap::new(), std::collections::BTreeMap::new()];
    for round in 0..60u32 {
        let datagrams = [24, 1, 7, 2, 31, 1, 12, 3][round as usize % 8];
        for sent in 0..datagrams {
            let sender = sent % 2;
            let mut datagram = Vec::new();
            Header { kind: Kind::Requests, count: 1, epoch: 0, cookie: 0 }.write(&mut datagram);
            request(Opcode::Get, next_id, b"burst:key").write(&mut datagram);
            senders[sender].socket.send_to(&datagram, to).unwrap();
            expected[sender].insert(next_id, 0u32);
            next_id += 1;
        }
        for (sender, raw) in senders.iter().enumerate() {
            let mut waiting = expected[sender].values().filter(|&&answers| answers == 0).count();
            while waiting > 0 {
                let reply = raw.receive().expect("a response to every request");
                let header = Header::parse(&reply).unwrap();
                for response in Responses::new(&reply[wire::HEADER_BYTES..], header.count) {
                    let response = response.unwrap();
                    assert_eq!(response.status, Status::NotFound);
                    let answers =
                        expected[sender].get_mut(&response.request_id).expect("this sender's request");
                    *answers += 1;
                    waiting -= usize::from(*answers == 1);
                }
            }
        }
    }
    for raw in &senders {
        raw.socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        assert_eq!(raw.receive(), None, "no response beyond one per request");
    }
    for answered in &expected {
        assert!(answered.values().all(|&answers| answers == 1), "{answered:?}");
    }
    let mut text = server.connect();
    let sent = next_id as u64 - 1;
    settled_stat(&mut text, "native_datagrams_in", sent);
    assert!(common::stat(&mut text, "native_datagrams_out") <= sent);
}

#[test]
fn a_request_at_another_owners_port_is_redirected_never_served() {
    let server = ServerProcess::quicksilver_native(8, &["-t", "2"]);
    let raw = Raw::new();
    let directory = raw.directory(base(&server));
    // Partition 0's port belongs to worker 0; partition 1 to worker 1, partition 2 to worker 0.
    let foreign = key_in(&directory, 1, "foreign");
    let sibling = key_in(&directory, 2, "sibling");
    let mut set_foreign = request(Opcode::Set, 1, &foreign);
    set_foreign.value = b"should not land";
    let mut set_sibling = request(Opcode::Set, 2, &sibling);
    set_sibling.value = b"same owner";
    let (header, replies) = raw.exchange(base(&server), directory.cookie, &[set_foreign, set_sibling]);
    assert_eq!(header.epoch, directory.epoch);
    let mut statuses: Vec<(Status, u32)> = replies.iter().map(|reply| (reply.0, reply.1)).collect();
    statuses.sort_by_key(|&(_, id)| id);
    assert_eq!(statuses, [(Status::Redirect, 1), (Status::Ok, 2)]);
    let mut text = server.connect();
    assert_eq!(text.call(format!("get {}\r\n", String::from_utf8(foreign).unwrap()).as_bytes()), b"END\r\n");
    settled_stat(&mut text, "native_redirects", 1);
}

#[test]
fn bad_requests_get_clear_statuses_and_the_port_keeps_serving() {
    let server = ServerProcess::quicksilver_native(4, &["-t", "1"]);
    let raw = Raw::new();
    let directory = raw.directory(base(&server));
    let to = base(&server);
    let mut wrong_hash = request(Opcode::Get, 1, b"key");
    wrong_hash.keyhash ^= 1;
    let mut value_on_get = request(Opcode::Get, 2, b"key");
    value_on_get.value = b"stray";
    let fine = request(Opcode::Get, 3, b"key");
    let (_, replies) = raw.exchange(to, directory.cookie, &[wrong_hash, value_on_get, fine]);
    let mut statuses: Vec<(Status, u32)> = replies.iter().map(|reply| (reply.0, reply.1)).collect();
    statuses.sort_by_key(|&(_, id)| id);
    assert_eq!(statuses, [(Status::BadRequest, 1), (Status::BadRequest, 2), (Status::NotFound, 3)]);

    // An unknown opcode is skipped; a request running past the datagram's end stops reading.
    let mut datagram = Vec::new();
    Header { kind: Kind::Requests, count: 3, epoch: 0, cookie: directory.cookie }.write(&mut datagram);
    let mut unknown = Vec::new();
    request(Opcode::Get, 4, b"key").write(&mut unknown);
    unknown[0] = 200;
    datagram.extend_from_slice(&unknown);
    request(Opcode::Get, 5, b"key").write(&mut datagram);
    let mut cut = Vec::new();
    request(Opcode::Get, 6, b"key").write(&mut cut);
    datagram.extend_from_slice(&cut[..cut.len() - 2]);
    let (_, replies) = raw.send_raw(to, &datagram);
    // Replies need not follow request order (refusals come first): they carry the request ids.
    let mut statuses: Vec<(Status, u32)> = replies.iter().map(|reply| (reply.0, reply.1)).collect();
    statuses.sort_by_key(|&(_, id)| id);
    assert_eq!(statuses, [(Status::BadRequest, 4), (Status::NotFound, 5), (Status::BadRequest, 6)]);

    // Datagrams that are not the protocol's get no answer at all.
    for junk in [&b"\x00\x01\x00\x00\x00\x01\x00\x00get key\r\n"[..], b"", b"QS", &[0xff; 300]] {
        raw.socket.send_to(junk, to).unwrap();
    }
    let mut wrong_version = datagram.clone();
    wrong_version[2] = 9;
    raw.socket.send_to(&wrong_version, to).unwrap();
    assert_eq!(raw.receive(), None);

    let mut native = client(&server);
    assert_eq!(native.set(b"key", b"still serving", 0, 0).unwrap().status, Status::Ok);
    assert_eq!(native.get(b"key").unwrap().unwrap().value, b"still serving");
    let mut text = server.connect();
    // Four bad requests, five foreign datagrams.
    settled_stat(&mut text, "native_bad", 4 + 5);
}

#[test]
fn replies_to_clients_that_have_not_proven_their_address_are_bounded() {
    let server = ServerProcess::quicksilver_native(4, &["-t", "1"]);
    let mut native = client(&server);
    let big = vec![b'b'; 1000];
    assert_eq!(native.set(b"big", &big, 0, 0).unwrap().status, Status::Ok);
    assert_eq!(native.set(b"small", b"s", 0, 0).unwrap().status, Status::Ok);
    let raw = Raw::new();
    let directory = raw.directory(base(&server));
    let port_of =
        |key: &[u8]| directory.partitions[directory.partition_of(xxhash_rust::xxh3::xxh3_64(key))].1;
    let at = |key: &[u8]| SocketAddr::from(([127, 0, 0, 1], port_of(key)));
    // No cookie (or someone else's): the 1000-byte value would be 17 times the request.
    for cookie in [0, directory.cookie ^ 1, native.directory().cookie] {
        let (_, replies) = raw.exchange(at(b"big"), cookie, &[request(Opcode::Get, 1, b"big")]);
        assert_eq!((replies[0].0, replies[0].3.len()), (Status::ProveAddress, 0), "cookie {cookie}");
        let (_, replies) = raw.exchange(at(b"small"), cookie, &[request(Opcode::Get, 2, b"small")]);
        assert_eq!(
            (replies[0].0, replies[0].3.as_slice()),
            (Status::Ok, &b"s"[..]),
            "small replies are fine"
        );
    }
    let (_, replies) = raw.exchange(at(b"big"), directory.cookie, &[request(Opcode::Get, 3, b"big")]);
    assert_eq!((replies[0].0, &replies[0].3), (Status::Ok, &big));
}

#[test]
fn what_does_not_fit_a_datagram_is_sent_to_tcp() {
    let server = ServerProcess::quicksilver_native(4, &["-t", "1"]);
    let mut native = client(&server);
    let mut text = server.connect();
    let value = vec![b'v'; 8200];
    let mut set = format!("set large 0 0 {}\r\n", value.len()).into_bytes();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    assert_eq!(text.call(&set), b"STORED\r\n");
    assert!(matches!(native.get(b"large"), Err(Error::UseTcp)));
    assert!(matches!(native.set(b"large", &value, 0, 0), Err(Error::UseTcp)), "refused before sending");
    // A datagram larger than the server reads: its cut request is answered "use TCP".
    let raw = Raw::new();
    let directory = raw.directory(base(&server));
    let key = b"oversized";
    let mut oversized = request(Opcode::Set, 9, key);
    oversized.value = &value;
    let to =
        SocketAddr::from(([127, 0, 0, 1], directory.partitions[directory.partition_of(oversized.keyhash)].1));
    let (_, replies) = raw.exchange(to, directory.cookie, &[oversized]);
    assert_eq!((replies[0].0, replies[0].1), (Status::UseTcp, 9));
    assert_eq!(text.call(b"get oversized\r\n"), b"END\r\n");
}

#[test]
fn a_retransmitted_incr_is_applied_once() {
    let server = ServerProcess::quicksilver_native(4, &["-t", "1"]);
    let mut text = server.connect();
    assert_eq!(text.call(b"set hits 0 0 1\r\n0\r\n"), b"STORED\r\n");
    let raw = Raw::new();
    let directory = raw.directory(base(&server));
    let mut incr = request(Opcode::Incr, 77, b"hits");
    incr.operand = 5;
    let to = SocketAddr::from(([127, 0, 0, 1], directory.partitions[directory.partition_of(incr.keyhash)].1));
    for _ in 0..3 {
        let (_, replies) = raw.exchange(to, directory.cookie, &[incr]);
        assert_eq!((replies[0].0, replies[0].2), (Status::Ok, 5));
    }
    incr.request_id = 78;
    let (_, replies) = raw.exchange(to, directory.cookie, &[incr]);
    assert_eq!((replies[0].0, replies[0].2), (Status::Ok, 10), "a new request id counts again");
    assert_eq!(text.call(b"get hits\r\n"), b"VALUE hits 0 2\r\n10\r\nEND\r\n");
    settled_stat(&mut text, "native_duplicates", 2);
    // The same id from the same socket for another request (a client that restarted its ids,
    // or another behind the same NAT address) is a new request: it runs.
    let mut decr = incr;
    decr.opcode = Opcode::Decr;
    decr.operand = 4;
    let (_, replies) = raw.exchange(to, directory.cookie, &[decr]);
    assert_eq!((replies[0].0, replies[0].2), (Status::Ok, 6), "decr under incr's id");
    decr.operand = 5;
    let (_, replies) = raw.exchange(to, directory.cookie, &[decr]);
    assert_eq!((replies[0].0, replies[0].2), (Status::Ok, 1), "another operand under the same id");
    let mut other = request(Opcode::Incr, 78, b"misses");
    other.operand = 5;
    assert_eq!(text.call(b"set misses 0 0 1\r\n1\r\n"), b"STORED\r\n");
    let to_other =
        SocketAddr::from(([127, 0, 0, 1], directory.partitions[directory.partition_of(other.keyhash)].1));
    let (_, replies) = raw.exchange(to_other, directory.cookie, &[other]);
    assert_eq!((replies[0].0, replies[0].2), (Status::Ok, 6), "another key under the same id");
    let (_, replies) = raw.exchange(to_other, directory.cookie, &[other]);
    assert_eq!((replies[0].0, replies[0].2), (Status::Ok, 6), "its retransmission is not applied");
    // memcached's decr keeps the value's length (space-padded).
    assert_eq!(text.call(b"get hits\r\n"), b"VALUE hits 0 2\r\n1 \r\nEND\r\n");
    settled_stat(&mut text, "native_duplicates", 3);
}

/// A socket that loses and reorders datagrams both ways (deterministically).
struct Lossy {
    socket: UdpSocket,
    state: u64,
    held: Vec<(Vec<u8>, SocketAddr)>,
    percent_lost: u64,
}

impl Lossy {
    fn roll(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state % 100
    }
}

impl Datagrams for Lossy {
    fn send_to(&mut self, datagram: &[u8], to: SocketAddr) -> std::io::Result<()> {
        if self.roll() < self.percent_lost {
            return Ok(());
        }
        self.socket.send_to(datagram, to).map(|_| ())
    }

    fn recv_from(&mut self, buf: &mut [u8], timeout: Duration) -> std::io::Result<(usize, SocketAddr)> {
        let deliver = |buf: &mut [u8], (datagram, from): (Vec<u8>, SocketAddr)| {
            buf[..datagram.len()].copy_from_slice(&datagram);
            Ok((datagram.len(), from))
        };
        if !self.held.is_empty() && self.roll() < 50 {
            let held = self.held.remove(0);
            return deliver(buf, held);
        }
        let deadline = std::time::Instant::now() + timeout;
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            self.socket.set_read_timeout(Some(left.max(Duration::from_micros(1))))?;
            let (len, from) = match self.socket.recv_from(buf) {
                Ok(received) => received,
                Err(_) => break,
            };
            let roll = self.roll();
            if roll < self.percent_lost {
                continue;
            }
            if roll < self.percent_lost + 30 {
                self.held.push((buf[..len].to_vec(), from));
                continue;
            }
            return Ok((len, from));
        }
        match self.held.pop() {
            Some(held) => deliver(buf, held),
            None => Err(std::io::ErrorKind::WouldBlock.into()),
        }
    }
}

#[test]
fn a_lossy_reordering_network_loses_and_doubles_nothing() {
    let server = ServerProcess::quicksilver_native(8, &["-t", "2"]);
    let lossy = Lossy {
        socket: UdpSocket::bind("127.0.0.1:0").unwrap(),
        state: 0x2545_F491_4F6C_DD1D,
        held: Vec::new(),
        percent_lost: 25,
    };
    let retry = Retry { timeout: Duration::from_millis(30), retries: 40 };
    let mut native =
        NativeClient::with_datagrams(lossy, base(&server), retry).expect("the directory, eventually");
    let counters: Vec<Vec<u8>> = (0..20).map(|i| format!("counter:{i}").into_bytes()).collect();
    let zero: Vec<Op<'_>> =
        counters.iter().map(|key| Op::Set { key, value: b"0", flags: 0, exptime: 0, cas: 0 }).collect();
    assert!(native.execute(&zero).into_iter().all(|reply| reply.unwrap().status == Status::Ok));
    let keys: Vec<Vec<u8>> = (0..200).map(|i| format!("lossy:{i}").into_bytes()).collect();
    for round in 1..=10u64 {
        let mut ops: Vec<Op<'_>> = counters.iter().map(|key| Op::Incr { key, delta: round }).collect();
        ops.extend(keys.iter().map(|key| Op::Set {
            key,
            value: key,
            flags: round as u32,
            exptime: 0,
            cas: 0,
        }));
        for reply in native.execute(&ops) {
            assert_eq!(reply.unwrap().status, Status::Ok, "round {round}");
        }
    }
    let mut ops: Vec<Op<'_>> = counters.iter().map(|key| Op::Get(key)).collect();
    ops.extend(keys.iter().map(|key| Op::Get(key)));
    let replies = native.execute(&ops);
    for reply in &replies[..counters.len()] {
        assert_eq!(reply.as_ref().unwrap().value, b"55", "every incr applied exactly once");
    }
    for (reply, key) in replies[counters.len()..].iter().zip(&keys) {
        let reply = reply.as_ref().unwrap();
        assert_eq!((&reply.value, reply.flags), (key, 10));
    }
    assert!(native.stats().retransmitted > 0, "the shim lost datagrams: {:?}", native.stats());
}

#[test]
fn a_restarted_server_with_another_layout_is_followed() {
    let base_port = common::free_udp_ports(8);
    let first = ServerProcess::quicksilver_native_at(base_port, &["-t", "1"]).expect("first server");
    let mut native = client(&first);
    let old = native.directory().clone();
    assert_eq!(old.partitions.len(), 4);
    let keys: Vec<Vec<u8>> = (0..100).map(|i| format!("moved:{i}").into_bytes()).collect();
    let sets: Vec<Op<'_>> =
        keys.iter().map(|key| Op::Set { key, value: b"1", flags: 0, exptime: 0, cas: 0 }).collect();
    assert!(native.execute(&sets).into_iter().all(|reply| reply.unwrap().status == Status::Ok));
    first.terminate();
    let second = ServerProcess::quicksilver_native_at(base_port, &["-t", "2"])
        .expect("second server on the same ports");
    let sets: Vec<Op<'_>> =
        keys.iter().map(|key| Op::Set { key, value: b"2", flags: 0, exptime: 0, cas: 0 }).collect();
    assert!(native.execute(&sets).into_iter().all(|reply| reply.unwrap().status == Status::Ok));
    let new = native.directory().clone();
    assert_ne!(new.epoch, old.epoch);
    assert_eq!(new.partitions.len(), 8);
    let gets: Vec<Op<'_>> = keys.iter().map(|key| Op::Get(key)).collect();
    assert!(native.execute(&gets).into_iter().all(|reply| reply.unwrap().value == b"2"));
    let mut text = second.connect();
    assert_eq!(common::stat(&mut text, "curr_items"), 100);
}

/// Waits until `name` reads `want`: a native burst's replies leave before its worker publishes
/// its counters at the end of the turn.
fn settled_stat(client: &mut common::Client, name: &str, want: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let got = common::stat(client, name);
        if got == want {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{name}: {got}, want {want}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
