//! The binary protocol, differentially: random streams of binary frames (every opcode memcached
//! 1.6 serves, quiet and key-returning variants, valid and invalid extras and lengths, unknown
//! opcodes, CAS-conditional stores and deletes) sent to real memcached 1.6 and to quicksilver;
//! every reply frame must match field for field, CAS uniques aside (they differ by design:
//! compared as zero or not, and a request's CAS is taken from that server's own last reply).
//! Also the binary protocol over UDP and the `-B` choice per connection.
//!
//! `QS_BINARY_STREAMS` (default 120) and `QS_BINARY_SEED` widen or move the search.

mod common;

use common::rng::Rng;
use common::{ServerProcess, UdpClient};
use qs_proto::binary::{opcode, request_frame};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One request: its frame, built once the server's last CAS is known.
#[derive(Clone, Debug)]
struct Step {
    opcode: u8,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
    /// 0: CAS 0; 1: the server's last CAS; 2: a CAS no item has.
    cas: u8,
}

const KEYS: &[&[u8]] = &[b"a", b"b", b"n", b"key with spaces", b"\x00\xff", b"k2"];
const VALUES: &[&[u8]] = &[b"", b"v", b"12", b"18446744073709551615", b"text", b"0007"];

fn step(rng: &mut Rng) -> Step {
    let key = KEYS[rng.below(KEYS.len())].to_vec();
    let value = VALUES[rng.below(VALUES.len())].to_vec();
    let flags_exptime = |rng: &mut Rng| {
        let flags: u32 = [0, 19, u32::MAX][rng.below(3)];
        let exptime: u32 = [0, 0, 1000, u32::MAX][rng.below(4)];
        [flags.to_be_bytes(), exptime.to_be_bytes()].concat()
    };
    let cas = [0, 0, 1, 2][rng.below(4)];
    let (opcode, extras, value) = match rng.below(22) {
        0 | 1 => ([opcode::SET, opcode::SETQ][rng.below(2)], flags_exptime(rng), value),
        2 => ([opcode::ADD, opcode::ADDQ][rng.below(2)], flags_exptime(rng), value),
        3 => ([opcode::REPLACE, opcode::REPLACEQ][rng.below(2)], flags_exptime(rng), value),
        4..=6 => ([opcode::GET, opcode::GETQ, opcode::GETK, opcode::GETKQ][rng.below(4)], vec![], vec![]),
        7 => ([opcode::DELETE, opcode::DELETEQ][rng.below(2)], vec![], vec![]),
        8 | 9 => {
            let code =
                [opcode::INCREMENT, opcode::DECREMENT, opcode::INCREMENTQ, opcode::DECREMENTQ][rng.below(4)];
            let delta: u64 = [1, 0, 5, u64::MAX][rng.below(4)];
            let initial: u64 = [0, 7, 100][rng.below(3)];
            let exptime: u32 = [0, u32::MAX, 1000][rng.below(3)];
            let extras =
                [delta.to_be_bytes().as_slice(), &initial.to_be_bytes(), &exptime.to_be_bytes()].concat();
            (code, extras, vec![])
        }
        10 => (
            [opcode::APPEND, opcode::APPENDQ, opcode::PREPEND, opcode::PREPENDQ][rng.below(4)],
            vec![],
            value,
        ),
        11 => (opcode::TOUCH, 1000u32.to_be_bytes().to_vec(), vec![]),
        12 | 13 => {
            let code = [opcode::GAT, opcode::GATQ, opcode::GATK, opcode::GATKQ][rng.below(4)];
            (code, [0u32, 1000][rng.below(2)].to_be_bytes().to_vec(), vec![])
        }
        14 => (opcode::NOOP, vec![], vec![]),
        15 => (opcode::VERSION, vec![], vec![]),
        16 => ([opcode::FLUSH, opcode::FLUSHQ][rng.below(2)], vec![], vec![]),
        // Invalid shapes, which close the connection: rare, so streams go on a while.
        17 if rng.below(4) == 0 => (opcode::GET, vec![0; 4], vec![]),
        18 if rng.below(4) == 0 => (opcode::SET, vec![0; 4], value),
        19 if rng.below(6) == 0 => (opcode::GET, vec![], vec![]),
        20 => ([0x40, 0x1b, 0xfe][rng.below(3)], vec![], vec![]),
        _ => (opcode::GETK, vec![], vec![]),
    };
    let key = match opcode {
        opcode::NOOP | opcode::VERSION | opcode::FLUSH | opcode::FLUSHQ | 0x40 | 0x1b | 0xfe => vec![],
        _ => key,
    };
    Step { opcode, extras, key, value, cas }
}

/// A reply frame with its CAS reduced to whether it was zero.
#[derive(Debug, PartialEq, Eq)]
struct Frame {
    opcode: u8,
    status: u16,
    opaque: u32,
    cas_nonzero: bool,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    last_cas: u64,
    closed: bool,
}

impl Conn {
    fn new(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        stream.set_nodelay(true).expect("nodelay");
        Conn { stream, buf: Vec::new(), last_cas: 0, closed: false }
    }

    fn frame(&mut self) -> Option<Frame> {
        loop {
            if self.buf.len() >= 24 {
                let body = u32::from_be_bytes(self.buf[8..12].try_into().unwrap()) as usize;
                if self.buf.len() >= 24 + body {
                    let b: Vec<u8> = self.buf.drain(..24 + body).collect();
                    let (extras_len, key_len) = (b[4] as usize, u16::from_be_bytes([b[2], b[3]]) as usize);
                    let cas = u64::from_be_bytes(b[16..24].try_into().unwrap());
                    if cas != 0 {
                        self.last_cas = cas;
                    }
                    assert_eq!(b[0], 0x81, "reply magic");
                    return Some(Frame {
                        opcode: b[1],
                        status: u16::from_be_bytes([b[6], b[7]]),
                        opaque: u32::from_be_bytes(b[12..16].try_into().unwrap()),
                        cas_nonzero: cas != 0,
                        extras: b[24..24 + extras_len].to_vec(),
                        key: b[24 + extras_len..24 + extras_len + key_len].to_vec(),
                        value: b[24 + extras_len + key_len..].to_vec(),
                    });
                }
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    self.closed = true;
                    return None;
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// Sends `step` and a NOOP behind it; the replies up to the NOOP's (or the close).
    fn exchange(&mut self, step: &Step, opaque: u32) -> Vec<Frame> {
        let cas = match step.cas {
            0 => 0,
            1 => self.last_cas,
            _ => 0x7fff_ffff,
        };
        let mut bytes = request_frame(step.opcode, opaque, cas, &step.extras, &step.key, &step.value);
        bytes.extend(request_frame(opcode::NOOP, u32::MAX, 0, &[], &[], &[]));
        if self.stream.write_all(&bytes).is_err() {
            self.closed = true;
            return Vec::new();
        }
        let mut frames = Vec::new();
        while let Some(mut frame) = self.frame() {
            if frame.opcode == opcode::NOOP && frame.opaque == u32::MAX {
                break;
            }
            if frame.opcode == opcode::VERSION {
                frame.value.clear();
            }
            frames.push(frame);
        }
        frames
    }
}

fn compare(quicksilver_args: &[&str]) {
    let streams = std::env::var("QS_BINARY_STREAMS").ok().and_then(|v| v.parse().ok()).unwrap_or(120u64);
    let seed = std::env::var("QS_BINARY_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_b1a5u64);
    let memcached = ServerProcess::memcached(&["-t", "2"]);
    let quicksilver = ServerProcess::quicksilver(quicksilver_args);
    for stream in 0..streams {
        let mut rng = Rng(seed ^ (stream + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let (mut expected, mut got) = (Conn::new(memcached.port), Conn::new(quicksilver.port));
        // Each stream starts from an empty cache on both.
        expected
            .exchange(&Step { opcode: opcode::FLUSH, extras: vec![], key: vec![], value: vec![], cas: 0 }, 0);
        got.exchange(&Step { opcode: opcode::FLUSH, extras: vec![], key: vec![], value: vec![], cas: 0 }, 0);
        let mut steps = Vec::new();
        for index in 0..40u32 {
            let step = step(&mut rng);
            steps.push(step.clone());
            let (want, have) = (expected.exchange(&step, index), got.exchange(&step, index));
            assert_eq!(
                have, want,
                "seed {seed} stream {stream} step {index}: {step:?}\nsteps so far: {steps:#?}\nargs {quicksilver_args:?}"
            );
            assert_eq!(got.closed, expected.closed, "seed {seed} stream {stream} step {index}: closed");
            if expected.closed {
                break;
            }
        }
    }
}

#[test]
fn random_binary_streams_answer_as_memcached_does_with_one_worker() {
    compare(&["-t", "1"]);
}

#[test]
fn random_binary_streams_answer_as_memcached_does_with_two_workers() {
    compare(&["-t", "2"]);
}

#[test]
fn random_binary_streams_answer_as_memcached_does_under_erew() {
    compare(&["-t", "2", "--access", "erew"]);
}

/// memcached answers binary requests over UDP, one datagram each, with its frame header.
#[test]
fn binary_over_udp_answers_as_memcached_does() {
    let memcached = ServerProcess::memcached_udp(&["-t", "2"]);
    let quicksilver = ServerProcess::quicksilver_udp(&["-t", "2"]);
    let set = request_frame(opcode::SET, 9, 0, &[0, 0, 0, 5, 0, 0, 0, 0], b"udp", b"value");
    let get = request_frame(opcode::GETK, 10, 0, &[], b"udp", &[]);
    let miss = request_frame(opcode::GET, 11, 0, &[], b"nope", &[]);
    let incr = request_frame(
        opcode::INCREMENT,
        12,
        0,
        &[0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 40, 0, 0, 0, 0],
        b"n",
        &[],
    );
    // The payloads, CAS reduced to whether it is zero (the frame header's request ids differ).
    let mask_cas = |datagrams: Vec<common::Datagram>| -> Vec<(u16, u16, Vec<u8>)> {
        datagrams
            .into_iter()
            .map(|datagram| {
                let mut reply = datagram.payload;
                if reply.len() >= 24 {
                    let nonzero = reply[16..24].iter().any(|&b| b != 0);
                    reply[16..24].fill(0);
                    reply[23] = nonzero as u8;
                }
                (datagram.header[1], datagram.header[2], reply)
            })
            .collect()
    };
    for request in [set, get, miss, incr.clone(), incr] {
        let want = UdpClient::new(memcached.udp_port).exchange_message(&request).map(mask_cas);
        let have = UdpClient::new(quicksilver.udp_port).exchange_message(&request).map(mask_cas);
        assert!(want.is_some(), "memcached did not answer");
        assert_eq!(have, want, "{request:?}");
    }
}

/// -B: a binary-only server closes a text connection; an ASCII-only one answers 0x80 as text.
#[test]
fn the_protocol_choice_is_memcached_s() {
    let version = request_frame(opcode::VERSION, 1, 0, &[], &[], &[]);
    for (args, binary_answered, text_answered) in
        [(&["-B", "auto"][..], true, true), (&["-B", "binary"], true, false), (&["-B", "ascii"], false, true)]
    {
        for (name, server) in [
            ("memcached", ServerProcess::memcached_udp(args)),
            ("quicksilver", ServerProcess::quicksilver_udp(args)),
        ] {
            let mut conn = Conn::new(server.port);
            conn.stream.write_all(&version).unwrap();
            let mut reply = [0u8; 24];
            let read = conn.stream.read(&mut reply).unwrap_or(0);
            assert_eq!(read > 0 && reply[0] == 0x81, binary_answered, "{name} {args:?} binary");
            let mut text = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
            text.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            text.write_all(b"version\r\n").unwrap();
            let mut buf = [0u8; 64];
            let read = text.read(&mut buf).unwrap_or(0);
            assert_eq!(buf[..read].starts_with(b"VERSION "), text_answered, "{name} {args:?} text");
        }
    }
}

/// Large values (sent from one shared copy, read from the log once) answer byte for byte as
/// memcached's: GET, GETK, GAT and a quiet get of a miss pipelined between them, the same
/// version twice (the second reply reuses the first's copy), then a new version.
#[test]
fn large_binary_values_answer_as_memcached_does() {
    let memcached = ServerProcess::memcached(&["-t", "2", "-I", "2m"]);
    for args in [&["-t", "1", "-I", "2m"][..], &["-t", "2", "-I", "2m"]] {
        let quicksilver = ServerProcess::quicksilver(args);
        let (mut expected, mut got) = (Conn::new(memcached.port), Conn::new(quicksilver.port));
        for version in 0..2u8 {
            let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8 ^ version).collect();
            let mut stream = Vec::new();
            for (key, value) in [(&b"big"[..], &big[..]), (b"big2", &big[..20_000])] {
                let extras = [0xde, 0xad, 0xbe, 0xef + version, 0, 0, 0, 0];
                stream.extend(request_frame(opcode::SET, 1, 0, &extras, key, value));
            }
            stream.extend(request_frame(opcode::GET, 2, 0, &[], b"big", &[]));
            stream.extend(request_frame(opcode::GETQ, 3, 0, &[], b"missing", &[]));
            stream.extend(request_frame(opcode::GETK, 4, 0, &[], b"big2", &[]));
            stream.extend(request_frame(opcode::GET, 5, 0, &[], b"big", &[]));
            stream.extend(request_frame(opcode::GAT, 6, 0, &[0, 0, 0, 0], b"big", &[]));
            let replies = |conn: &mut Conn| {
                conn.stream.write_all(&stream).unwrap();
                (0..6).map(|_| conn.frame().expect("a reply")).collect::<Vec<_>>()
            };
            let (want, have) = (replies(&mut expected), replies(&mut got));
            assert_eq!(have.len(), want.len());
            for (have, want) in have.iter().zip(&want) {
                assert_eq!(have, want, "version {version}, quicksilver {args:?}");
            }
            assert_eq!(have[2].value, big);
        }
    }
}
