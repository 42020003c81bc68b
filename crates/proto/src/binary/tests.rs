use super::*;
use proptest::prelude::*;

fn frame(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    request_frame(opcode, 0xdead_beef, 0, extras, key, value)
}

fn command(buf: &[u8]) -> (BinaryCommand<'_>, usize) {
    match parse(buf, &Limits::default()) {
        Parsed::Request { request: Request::Binary(binary), len } => {
            assert_eq!(binary.opaque, 0xdead_beef_u32.to_be_bytes());
            (binary.command, len)
        }
        other => panic!("{other:?}"),
    }
}

fn set_extras(flags: u32, exptime: u32) -> Vec<u8> {
    [flags.to_be_bytes(), exptime.to_be_bytes()].concat()
}

#[test]
fn every_opcode_parses_as_memcached_reads_it() {
    let buf = frame(opcode::GETKQ, &[], b"k", &[]);
    assert_eq!(
        command(&buf),
        (BinaryCommand::Get { key: b"k", quiet: true, with_key: true, touch: None }, 25)
    );
    let buf = frame(opcode::GATQ, &7u32.to_be_bytes(), b"key", &[]);
    assert_eq!(
        command(&buf),
        (BinaryCommand::Get { key: b"key", quiet: true, with_key: false, touch: Some(7) }, 31)
    );
    let buf = frame(opcode::TOUCH, &9u32.to_be_bytes(), b"key", &[]);
    assert_eq!(command(&buf), (BinaryCommand::Touch { key: b"key", exptime: 9 }, 31));
    let buf = frame(opcode::SETQ, &set_extras(19, 5), b"x", b"value");
    let store = BinaryCommand::Store {
        mode: StoreMode::Set,
        key: b"x",
        flags: 19,
        exptime: 5,
        value: b"value",
        quiet: true,
    };
    assert_eq!(command(&buf), (store, buf.len()));
    let buf = frame(opcode::PREPEND, &[], b"x", b"pre");
    let store = BinaryCommand::Store {
        mode: StoreMode::Prepend,
        key: b"x",
        flags: 0,
        exptime: 0,
        value: b"pre",
        quiet: false,
    };
    assert_eq!(command(&buf), (store, buf.len()));
    let extras = [5u64.to_be_bytes().as_slice(), &7u64.to_be_bytes(), &u32::MAX.to_be_bytes()].concat();
    let buf = frame(opcode::DECREMENTQ, &extras, b"n", &[]);
    let arith = BinaryCommand::Arith {
        key: b"n",
        delta: 5,
        initial: 7,
        exptime: u32::MAX,
        decrement: true,
        quiet: true,
    };
    assert_eq!(command(&buf), (arith, buf.len()));
    assert_eq!(
        command(&frame(opcode::DELETEQ, &[], b"d", &[])).0,
        BinaryCommand::Delete { key: b"d", quiet: true }
    );
    assert_eq!(
        command(&frame(opcode::FLUSHQ, &9u32.to_be_bytes(), &[], &[])).0,
        BinaryCommand::Flush { exptime: 9, quiet: true }
    );
    assert_eq!(
        command(&frame(opcode::FLUSH, &[], &[], &[])).0,
        BinaryCommand::Flush { exptime: 0, quiet: false }
    );
    assert_eq!(command(&frame(opcode::NOOP, &[], &[], &[])).0, BinaryCommand::Noop);
    assert_eq!(command(&frame(opcode::VERSION, &[], &[], &[])).0, BinaryCommand::Version);
    assert_eq!(command(&frame(opcode::QUITQ, &[], &[], &[])).0, BinaryCommand::Quit { quiet: true });
    assert_eq!(
        command(&frame(opcode::STAT, &[], b"settings", &[])).0,
        BinaryCommand::Stat { group: b"settings" }
    );
    assert_eq!(command(&frame(opcode::SASL_LIST_MECHS, &[], &[], &[])).0, BinaryCommand::SaslListMechs);
    let buf = frame(opcode::SASL_AUTH, &[], b"PLAIN", b"\0user\0pass");
    assert_eq!(
        command(&buf).0,
        BinaryCommand::SaslAuth { mechanism: b"PLAIN", data: b"\0user\0pass", step: false }
    );
}

#[test]
fn a_cas_makes_a_store_conditional() {
    let buf = request_frame(opcode::ADD, 1, 42, &set_extras(0, 0), b"k", b"v");
    let Parsed::Request { request: Request::Binary(binary), .. } = parse(&buf, &Limits::default()) else {
        panic!()
    };
    assert_eq!(binary.cas, 42);
    assert!(matches!(binary.command, BinaryCommand::Store { mode: StoreMode::Cas(42), .. }));
    // Append and prepend with a CAS are conditional on it too, in the store's own modes.
    for (code, mode) in
        [(opcode::APPENDQ, StoreMode::AppendCas(42)), (opcode::PREPEND, StoreMode::PrependCas(42))]
    {
        let buf = request_frame(code, 1, 42, &[], b"k", b"v");
        let Parsed::Request { request: Request::Binary(binary), .. } = parse(&buf, &Limits::default()) else {
            panic!()
        };
        assert!(
            matches!(binary.command, BinaryCommand::Store { mode: found, .. } if found == mode),
            "{code:#x}"
        );
    }
}

#[test]
fn malformed_frames_get_memcached_s_refusals() {
    let refuse = |status, close| BinaryCommand::Refuse { status, close };
    // Extras and lengths an opcode does not take: EINVAL, then close.
    assert_eq!(command(&frame(opcode::GET, &[0; 4], b"k", &[])).0, refuse(status::EINVAL, true));
    assert_eq!(command(&frame(opcode::GET, &[], &[], &[])).0, refuse(status::EINVAL, true));
    assert_eq!(command(&frame(opcode::SET, &[0; 4], b"k", b"v")).0, refuse(status::EINVAL, true));
    assert_eq!(command(&frame(opcode::NOOP, &[], b"k", &[])).0, refuse(status::EINVAL, true));
    assert_eq!(command(&frame(opcode::INCREMENT, &[0; 8], b"k", &[])).0, refuse(status::EINVAL, true));
    assert_eq!(command(&frame(opcode::STAT, &[1], &[], &[])).0, refuse(status::EINVAL, true));
    // A key over 250 bytes.
    assert_eq!(command(&frame(opcode::GET, &[], &[b'x'; 251], &[])).0, refuse(status::EINVAL, true));
    // A key longer than the body: UNKNOWN_COMMAND, then close.
    let mut buf = frame(opcode::GET, &[], b"key", &[]);
    buf[8..12].copy_from_slice(&1u32.to_be_bytes());
    assert_eq!(command(&buf), (refuse(status::UNKNOWN_COMMAND, true), 27));
    // Unknown opcodes (VERBOSITY among them in memcached 1.6) swallow their body.
    assert_eq!(
        command(&frame(opcode::VERBOSITY, &[0; 4], &[], &[])),
        (refuse(status::UNKNOWN_COMMAND, false), 32)
    );
    assert_eq!(command(&frame(0x40, &[], &[], b"abc")), (refuse(status::UNKNOWN_COMMAND, false), 27));
    // Another magic: close.
    let mut buf = frame(opcode::GET, &[], b"k", &[]);
    buf[0] = 0x81;
    assert!(matches!(parse(&buf, &Limits::default()), Parsed::Close));
}

#[test]
fn a_value_over_the_item_limit_is_refused_before_it_arrives() {
    let limits = Limits { item_bytes_max: 1024, now_ms: 0, databases: 16 };
    let mut buf = frame(opcode::SET, &set_extras(0, 0), b"big", &[b'x'; 2000]);
    buf.truncate(100);
    let Parsed::Request { request: Request::Binary(binary), len } = parse(&buf, &limits) else { panic!() };
    assert_eq!(binary.command, BinaryCommand::TooLarge { key: b"big", set: true });
    assert_eq!(len, HEADER_BYTES + 8 + 3 + 2000);
}

#[test]
fn every_split_point_is_incomplete_until_the_frame_is_whole() {
    let frames = [
        frame(opcode::SET, &set_extras(1, 2), b"key", b"some value"),
        frame(opcode::GETK, &[], b"key", &[]),
        frame(opcode::SASL_STEP, &[], b"PLAIN", b"data"),
        frame(opcode::INCREMENT, &[0; 20], b"n", &[]),
    ];
    for whole in frames {
        for cut in 0..whole.len() {
            assert!(matches!(parse(&whole[..cut], &Limits::default()), Parsed::Incomplete), "cut {cut}");
        }
        let mut two = whole.clone();
        two.extend_from_slice(&whole);
        let Parsed::Request { len, .. } = parse(&two, &Limits::default()) else { panic!() };
        assert_eq!(len, whole.len());
    }
}

#[test]
fn replies_are_laid_out_as_memcached_s() {
    let mut out = Vec::new();
    write_error(&mut out, opcode::GETQ, [1, 2, 3, 4], status::KEY_ENOENT);
    assert_eq!(
        &out[..HEADER_BYTES],
        &[0x81, 0x09, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(&out[HEADER_BYTES..], b"Not found");
    out.clear();
    let reply = Reply {
        opcode: opcode::GETK,
        opaque: [0; 4],
        status: 0,
        cas: 7,
        extras: &[0, 0, 0, 5],
        key: b"k",
        value_len: 2,
    };
    reply.write_head(&mut out);
    out.extend_from_slice(b"hi");
    assert_eq!(&out[2..4], &[0, 1]);
    assert_eq!(out[4], 4);
    assert_eq!(&out[8..12], &7u32.to_be_bytes());
    assert_eq!(&out[16..24], &7u64.to_be_bytes());
    assert_eq!(&out[24..], b"\0\0\0\x05khi");
}

#[test]
fn the_key_guess_is_the_frame_s_key() {
    let buf = frame(opcode::SET, &set_extras(0, 0), b"guess", b"v");
    assert_eq!(key_guess(&buf), Some(&b"guess"[..]));
    assert_eq!(crate::key_guess(&buf), Some(&b"guess"[..]));
    assert_eq!(key_guess(&buf[..30]), None);
}

proptest! {
    #[test]
    fn any_bytes_parse_without_panicking(mut bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        if let Some(first) = bytes.first_mut() {
            *first = REQUEST_MAGIC;
        }
        match parse(&bytes, &Limits { item_bytes_max: 256, now_ms: 0, databases: 16 }) {
            Parsed::Request { len, request } => {
                // A request's bytes are in the buffer unless it is skipped.
                let skipped = matches!(
                    request,
                    Request::Binary(Binary { command: BinaryCommand::TooLarge { .. } | BinaryCommand::Refuse { .. }, .. })
                );
                prop_assert!(skipped || len <= bytes.len());
                prop_assert!(len >= HEADER_BYTES);
            }
            Parsed::Incomplete | Parsed::Close => {}
            Parsed::Refused { .. } => prop_assert!(false, "binary refusals are requests"),
        }
    }
}

#[test]
fn binary_commands_become_the_one_vocabulary() {
    use crate::command::{Delete, Get, Op};
    let limits = Limits::default();
    let command = |frame: Vec<u8>| match parse(&frame, &limits) {
        Parsed::Request { request: Request::Binary(binary), .. } => binary.key_command().map(|command| {
            (
                command.key.to_vec(),
                command.op.read_only(),
                format!("{:?}", command.op),
                format!("{:?}", command.answer),
            )
        }),
        other => panic!("{other:?}"),
    };
    let (key, read_only, op, answer) = command(request_frame(opcode::GETKQ, 7, 0, &[], b"k", b"")).unwrap();
    assert_eq!((key, read_only, op), (b"k".to_vec(), true, format!("{:?}", Op::Get(Get::default()))));
    assert!(answer.contains("quiet: true, with_key: true"), "{answer}");
    let gat = command(request_frame(opcode::GAT, 1, 0, &9u32.to_be_bytes(), b"k", b"")).unwrap();
    assert_eq!((gat.1, gat.2), (false, format!("{:?}", Op::Get(Get::touching(Some(9))))));
    let delete = command(request_frame(opcode::DELETE, 1, 5, &[], b"k", b"")).unwrap();
    assert_eq!(delete.2, format!("{:?}", Op::Delete(Delete { cas: Some(5), ..Delete::default() })));
    let mut extras = 3u64.to_be_bytes().to_vec();
    extras.extend(10u64.to_be_bytes());
    extras.extend(u32::MAX.to_be_bytes());
    let incr = command(request_frame(opcode::INCREMENT, 1, 0, &extras, b"k", b"")).unwrap();
    assert!(incr.2.contains("create: None"), "{}", incr.2);
    assert!(command(request_frame(opcode::NOOP, 1, 0, &[], b"", b"")).is_none());
}
