use super::command::{call, integer, Call, Reply};
use super::*;
use crate::command::{Answer, Op};
use crate::StoreMode;
use proptest::prelude::*;

/// The turn's time the tests parse at (2025-12-02), in unix milliseconds.
const NOW_MS: u64 = 1_764_633_600_000;
const LIMITS: crate::Limits = crate::Limits { item_bytes_max: 1 << 20, now_ms: NOW_MS, databases: 16 };

fn parse_default(bytes: &[u8]) -> Parsed<'_> {
    parse(bytes, &crate::Limits::default())
}

fn frame_bytes(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The frame at the front of `bytes` (whatever it asks: [`parse`] reads a command on one key
/// on into the one vocabulary).
fn parsed_frame(bytes: &[u8]) -> (Frame<'_>, usize) {
    match frame_at(bytes, BULK_BYTES_MAX) {
        Some((Ok(frame), len)) => (frame, len),
        other => panic!("{other:?}"),
    }
}

fn protocol_error(bytes: &[u8]) -> ProtocolError {
    match parse_default(bytes) {
        Parsed::Request { request: Request::RespProtocolError(error), len } => {
            assert_eq!(len, bytes.len());
            error
        }
        other => panic!("{other:?}"),
    }
}

proptest! {
    #[test]
    fn any_arguments_come_back_whole_and_every_prefix_is_incomplete(
        args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6)
    ) {
        let slices: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let bytes = frame_bytes(&slices);
        let (frame, len) = parsed_frame(&bytes);
        prop_assert_eq!(len, bytes.len());
        prop_assert_eq!(frame.args().collect::<Vec<_>>(), slices);
        for cut in 1..bytes.len() {
            prop_assert!(matches!(parse_default(&bytes[..cut]), Parsed::Incomplete), "cut at {}", cut);
        }
    }
}

#[test]
fn a_frame_ends_where_its_last_bulk_string_does() {
    let mut bytes = frame_bytes(&[b"GET", b"k"]);
    bytes.extend_from_slice(b"PING\r\n");
    let (frame, len) = parsed_frame(&bytes);
    assert_eq!(len, bytes.len() - 6);
    assert_eq!(frame.argc(), 2);
    assert_eq!(frame.arg(1), Some(&b"k"[..]));
}

#[test]
fn inline_requests_split_on_spaces_and_empty_ones_are_skipped() {
    let (frame, len) = parsed_frame(b"  SET  k\tv \r\nGET k\r\n");
    assert_eq!(len, 13);
    assert_eq!(frame.args().collect::<Vec<_>>(), [&b"SET"[..], b"k", b"v"]);
    assert!(matches!(parse_default(b" \r\nPING\r\n"), Parsed::Refused { len: 3, noreply: true, .. }));
    assert!(matches!(parse_default(b"*0\r\n"), Parsed::Refused { len: 4, .. }));
    assert!(matches!(parse_default(b"*-1\r\n"), Parsed::Refused { len: 5, .. }));
    assert!(matches!(parse_default(b"PING"), Parsed::Incomplete));
}

#[test]
fn broken_framing_is_refused_as_redis_server_words_it() {
    let message = |bytes: &[u8]| {
        let mut out = Vec::new();
        protocol_error(bytes).write(&mut out);
        String::from_utf8(out).expect("ascii")
    };
    assert_eq!(message(b"*x\r\n"), "-ERR Protocol error: invalid multibulk length\r\n");
    assert_eq!(message(b"*01\r\n"), "-ERR Protocol error: invalid multibulk length\r\n");
    assert_eq!(message(b"*1\r\n+PING\r\n"), "-ERR Protocol error: expected '$', got '+'\r\n");
    // A line break where the `$` goes is written as a space, as redis-server writes it.
    assert_eq!(message(b"*1\r\n\r\nPING\r\n"), "-ERR Protocol error: expected '$', got ' '\r\n");
    assert_eq!(message(b"*1\r\n$-1\r\n"), "-ERR Protocol error: invalid bulk length\r\n");
    assert_eq!(message(b"*1\r\n$536870913\r\n"), "-ERR Protocol error: invalid bulk length\r\n");
    // Past the item size limit (-I, 1 MiB here) but within redis-server's bound: a request
    // still arriving, refused once it runs (as too large for the cache), not at its framing.
    assert!(matches!(parse_default(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048577\r\n"), Parsed::Incomplete));
    let long = vec![b'a'; INLINE_BYTES_MAX + 1];
    assert_eq!(message(&long), "-ERR Protocol error: too big inline request\r\n");
    let mut count = b"*".to_vec();
    count.extend(vec![b'1'; INLINE_BYTES_MAX + 1]);
    assert_eq!(message(&count), "-ERR Protocol error: too big mbulk count string\r\n");
}

fn refusal(args: &[&[u8]]) -> String {
    let bytes = frame_bytes(args);
    let (frame, _) = parsed_frame(&bytes);
    match call(&frame, &LIMITS) {
        Call::Error(refusal) => {
            let mut out = Vec::new();
            reply::refusal(&refusal, &mut out);
            String::from_utf8(out).expect("ascii")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn arity_comes_before_options_and_names_the_command_in_lower_case() {
    assert_eq!(refusal(&[b"GeT"]), "-ERR wrong number of arguments for 'get' command\r\n");
    assert_eq!(refusal(&[b"SET", b"k"]), "-ERR wrong number of arguments for 'set' command\r\n");
    assert_eq!(refusal(&[b"SET", b"k", b"v", b"EX"]), "-ERR syntax error\r\n");
    assert_eq!(refusal(&[b"SET", b"k", b"v", b"EX", b"0"]), "-ERR invalid expire time in 'set' command\r\n");
    assert_eq!(refusal(&[b"SETEX", b"k", b"0", b"v"]), "-ERR invalid expire time in 'setex' command\r\n");
    assert_eq!(refusal(&[b"INCRBY", b"k", b"1.5"]), "-ERR value is not an integer or out of range\r\n");
}

#[test]
fn an_unknown_commands_arguments_are_shown_up_to_128_bytes() {
    assert_eq!(refusal(&[b"nope"]), "-ERR unknown command 'nope', with args beginning with: \r\n");
    let long = vec![b'y'; 200];
    assert_eq!(
        refusal(&[b"nope", &long, b"z"]),
        format!("-ERR unknown command 'nope', with args beginning with: '{}' \r\n", "y".repeat(128))
    );
    assert_eq!(
        refusal(&[b"nope", b"a\r\nb"]),
        "-ERR unknown command 'nope', with args beginning with: 'a  b' \r\n"
    );
}

fn command_of(args: &[&[u8]]) -> (Op<'static>, Reply) {
    let bytes: &'static [u8] = Box::leak(frame_bytes(args).into_boxed_slice());
    let (frame, _) = parsed_frame(bytes);
    match call(&frame, &LIMITS) {
        Call::Key(command) => match command.answer {
            Answer::Resp(reply) => (command.op, reply),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn set_options_become_the_store_mode_and_exptime() {
    let store = |args: &[&[u8]]| match command_of(args) {
        (Op::Store(store), Reply::Ok) => (store.mode, store.exptime),
        other => panic!("{other:?}"),
    };
    assert_eq!(store(&[b"SET", b"k", b"v"]), (StoreMode::Set, 0));
    // Every expiry becomes the unix millisecond it ends at, which the store reads as one.
    // The turn's time, as the executor gives it: no clock is read.
    let now = || NOW_MS as i64;
    let within = |(mode, exptime): (StoreMode, i64), (want_mode, from, to): (StoreMode, i64, i64)| {
        assert_eq!(mode, want_mode);
        assert!((from..=to).contains(&exptime), "{exptime} not in {from}..={to}");
        assert!(exptime >= qs_store::item::MILLIS_EXPTIME_MIN);
    };
    let before = now();
    let nx = store(&[b"set", b"k", b"v", b"nx", b"ex", b"10"]);
    let xx = store(&[b"SET", b"k", b"v", b"XX", b"PX", b"1001"]);
    let last = store(&[b"SET", b"k", b"v", b"EX", b"10", b"EX", b"20"]);
    let long = store(&[b"SET", b"k", b"v", b"EX", b"2592001"]);
    let after = now();
    within(nx, (StoreMode::Add, before + 10_000, after + 10_000));
    within(xx, (StoreMode::Replace, before + 1_001, after + 1_001));
    within(last, (StoreMode::Set, before + 20_000, after + 20_000));
    within(long, (StoreMode::Set, before + 2_592_001_000, after + 2_592_001_000));
    assert_eq!(store(&[b"SET", b"k", b"v", b"PXAT", b"4102444800123"]), (StoreMode::Set, 4_102_444_800_123));
    assert_eq!(store(&[b"SET", b"k", b"v", b"EXAT", b"4102444800"]), (StoreMode::Set, 4_102_444_800_000));
    // An absolute time in the past: already expired.
    assert_eq!(store(&[b"SET", b"k", b"v", b"EXAT", b"1000"]), (StoreMode::Set, -1));
}

#[test]
fn integers_are_read_as_redis_servers_string2ll_reads_them() {
    assert_eq!(integer(b"0"), Some(0));
    assert_eq!(integer(b"-42"), Some(-42));
    assert_eq!(integer(b"9223372036854775807"), Some(i64::MAX));
    assert_eq!(integer(b"-9223372036854775808"), Some(i64::MIN));
    for refused in [&b""[..], b"-", b"-0", b"01", b"+1", b" 1", b"1 ", b"9223372036854775808", b"1e3"] {
        assert_eq!(integer(refused), None, "{refused:?}");
    }
}

#[test]
fn a_request_arriving_says_how_long_it_is_at_least() {
    let at_least = |bytes: &[u8]| match progress(bytes, Progress::default()) {
        Walked::Arriving { at_least, .. } => at_least,
        Walked::Other => None,
    };
    let mut bytes = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\nvvv".to_vec();
    assert_eq!(at_least(&bytes), Some(29 + 100_000 + 2));
    bytes.truncate(20);
    assert_eq!(at_least(&bytes), None, "the bulk's length is not here yet");
    assert_eq!(at_least(b"*1\r\n$4\r\nPING\r\n"), None, "whole");
    assert_eq!(at_least(b"PING"), None);
}

#[test]
fn inline_words_in_quotes_are_taken_whole_and_unbalanced_quotes_are_refused() {
    let (frame, _) = parsed_frame(b"SET k \"hello world\" 'it s'\r\n");
    assert_eq!(frame.args().collect::<Vec<_>>(), [&b"SET"[..], b"k", b"hello world", b"it s"]);
    let (frame, _) = parsed_frame(b"SET k \"\"\r\n");
    assert_eq!(frame.arg(2), Some(&b""[..]));
    for (line, why) in [
        (&b"set \"\"\"test-key\"\"\" v\r\n"[..], "unbalanced quotes in request"),
        (b"set \"open v\r\n", "unbalanced quotes in request"),
        (b"set \"a\\nb\" v\r\n", "quoted inline requests with escapes are not supported"),
        (b"set a\"b\" v\r\n", "quotes inside an inline word are not supported"),
    ] {
        assert_eq!(protocol_error(line), ProtocolError::Message(why), "{line:?}");
    }
}

#[test]
fn a_key_is_guessed_from_the_second_bulk_string() {
    assert_eq!(key_guess(&frame_bytes(&[b"GET", b"user:1"])), Some(&b"user:1"[..]));
    assert_eq!(key_guess(&frame_bytes(&[b"SET", b"k", b"v"])), Some(&b"k"[..]));
    assert_eq!(key_guess(&frame_bytes(&[b"PING"])), None);
    assert_eq!(key_guess(b"*2\r\n$3\r\nGET\r\n$5\r\nus"), None, "not all here");
    assert_eq!(key_guess(b"*2\r\n$x\r\n"), None);
}

#[test]
fn a_command_on_one_key_is_read_into_the_one_vocabulary_when_parsed() {
    let bytes = frame_bytes(&[b"GET", b"user:1"]);
    match parse_default(&bytes) {
        Parsed::Request { request: Request::RespKey(command), len } => {
            assert_eq!((command.key, len), (&b"user:1"[..], bytes.len()));
            assert!(matches!(command.op, Op::Get(_)));
        }
        other => panic!("{other:?}"),
    }
    // What is not one command on one key stays a frame.
    let bytes = frame_bytes(&[b"MGET", b"a", b"b"]);
    assert!(matches!(parse_default(&bytes), Parsed::Request { request: Request::Resp(_), .. }));
}

#[test]
fn client_names_are_read_from_client_and_hello_and_checked_as_redis_server_checks_them() {
    let bytes = frame_bytes(&[b"client", b"SetName", b"cache-1"]);
    let (frame, _) = parsed_frame(&bytes);
    assert!(matches!(call(&frame, &LIMITS), Call::ClientSetName(b"cache-1")));
    let bytes = frame_bytes(&[b"CLIENT", b"GETNAME"]);
    let (frame, _) = parsed_frame(&bytes);
    assert!(matches!(call(&frame, &LIMITS), Call::ClientGetName));
    let bytes = frame_bytes(&[b"HELLO", b"2", b"AUTH", b"u", b"p", b"SETNAME", b"web"]);
    let (frame, _) = parsed_frame(&bytes);
    assert!(matches!(
        call(&frame, &LIMITS),
        Call::Hello { proto: Some(2), auth: Some((b"u", b"p")), name: Some(b"web") }
    ));
    assert_eq!(
        refusal(&[b"CLIENT", b"SETNAME"]),
        "-ERR wrong number of arguments for 'client|setname' command\r\n"
    );
    assert_eq!(
        refusal(&[b"CLIENT", b"GETNAME", b"x"]),
        "-ERR wrong number of arguments for 'client|getname' command\r\n"
    );
    assert_eq!(refusal(&[b"HELLO", b"2", b"SETNAME"]), "-ERR Syntax error in HELLO option 'SETNAME'\r\n");
    for (name, valid) in
        [(&b"cache-1"[..], true), (b"", true), (b"a b", false), (b"a\nb", false), (b"caf\xc3\xa9", false)]
    {
        assert_eq!(connection::client_name_valid(name), valid, "{name:?}");
    }
}

#[test]
fn a_resp3_connections_requests_answer_nulls_and_maps_as_resp3_does() {
    let limits = crate::Limits { item_bytes_max: 1 << 20, now_ms: 0, databases: 16 };
    let get = frame_bytes(&[b"GET", b"k"]);
    let Parsed::Request { request: Request::RespKey(command), .. } = super::parse3(&get, &limits) else {
        panic!("GET is a command on one key")
    };
    assert!(matches!(command.answer, Answer::Resp(Reply::Bulk3)));
    let mut out = Vec::new();
    command.answer.miss(b"k", &mut out);
    assert_eq!(out, b"_\r\n");
    let Parsed::Request { request: Request::RespKey(command), .. } = super::parse(&get, &limits) else {
        panic!("GET is a command on one key")
    };
    assert!(matches!(command.answer, Answer::Resp(Reply::Bulk)));
    let mget = frame_bytes(&[b"MGET", b"a", b"b"]);
    let Parsed::Request { request: Request::Resp(frame), .. } = super::parse3(&mget, &limits) else {
        panic!("MGET is a frame")
    };
    assert!(frame.resp3());
    let hello = frame_bytes(&[b"HELLO", b"3"]);
    let (frame, _) = parsed_frame(&hello);
    assert!(matches!(call(&frame, &LIMITS), Call::Hello { proto: Some(3), auth: None, name: None }));
    assert_eq!(refusal(&[b"HELLO", b"4"]), "-NOPROTO sorry, this protocol version is not supported.\r\n");
    let mut out = Vec::new();
    reply::map_head(2, true, &mut out);
    reply::map_head(2, false, &mut out);
    reply::text(b"# Keyspace\r\n", true, &mut out);
    assert_eq!(out, b"%2\r\n*4\r\n=16\r\ntxt:# Keyspace\r\n\r\n");
}

/// What the general path makes of `buf`: the command on one key framed at its front, and the
/// request's length.
fn framed_command(buf: &[u8], bulk_max: u64) -> Option<(String, usize)> {
    match frame_at(buf, bulk_max) {
        Some((Ok(frame), len)) => match call(&frame, &LIMITS) {
            Call::Key(command) => Some((format!("{command:?}"), len)),
            _ => None,
        },
        _ => None,
    }
}

proptest! {
    /// GET and SET as clients write them are read in one pass (`get_or_set`): whatever it
    /// reads is what framing the request and looking its name up reads, for any case of the
    /// name, any key and value, a request cut short anywhere, a byte changed anywhere, and
    /// another request after it.
    #[test]
    fn get_and_set_read_in_one_pass_as_the_general_path_reads_them(
        set in any::<bool>(),
        upper in proptest::collection::vec(any::<bool>(), 3),
        key in proptest::collection::vec(any::<u8>(), 0..20),
        value in proptest::collection::vec(any::<u8>(), 0..40),
        cut in any::<proptest::sample::Index>(),
        changed in proptest::option::of((any::<proptest::sample::Index>(), any::<u8>())),
        bulk_max in prop_oneof![Just(8u64), Just(1u64 << 20)],
    ) {
        let name: Vec<u8> = (if set { b"set" } else { b"get" })
            .iter()
            .zip(&upper)
            .map(|(&byte, &up)| if up { byte.to_ascii_uppercase() } else { byte })
            .collect();
        let mut args: Vec<&[u8]> = vec![&name, &key];
        if set {
            args.push(&value);
        }
        let mut buf = frame_bytes(&args);
        buf.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
        if let Some((at, byte)) = changed {
            let at = at.index(buf.len());
            buf[at] = byte;
        }
        let buf = &buf[..cut.index(buf.len() + 1)];
        if let Some((command, len)) = super::get_or_set(buf, bulk_max) {
            prop_assert_eq!(Some((format!("{command:?}"), len)), framed_command(buf, bulk_max));
        }
    }
}

#[test]
fn get_and_set_as_clients_write_them_are_read_in_one_pass() {
    let get = frame_bytes(&[b"GET", b"key"]);
    let (command, len) = super::get_or_set(&get, 1 << 20).expect("a GET");
    assert_eq!((command.key, len), (&b"key"[..], get.len()));
    let set = frame_bytes(&[b"set", b"k", b"value\r\n"]);
    let (command, len) = super::get_or_set(&set, 1 << 20).expect("a SET");
    assert_eq!((command.key, len), (&b"k"[..], set.len()));
    // Other forms are the general path's.
    assert!(super::get_or_set(&frame_bytes(&[b"SET", b"k", b"v", b"EX", b"10"]), 1 << 20).is_none());
    assert!(super::get_or_set(&get[..get.len() - 1], 1 << 20).is_none());
    assert!(super::get_or_set(b"GET key\r\n", 1 << 20).is_none());
}

/// A request of many arguments arriving a piece at a time is walked on from where the last
/// walk stopped, and finds what a walk from its start finds.
#[test]
fn a_walk_goes_on_from_where_it_stopped() {
    let args: Vec<Vec<u8>> = (0..500).map(|n| format!("key-{n}").into_bytes()).collect();
    let mut all: Vec<&[u8]> = vec![b"DEL"];
    all.extend(args.iter().map(Vec::as_slice));
    let request = frame_bytes(&all);
    let mut memo = Progress::default();
    for cut in (1..request.len()).step_by(7) {
        let (resumed, fresh) =
            (progress(&request[..cut], memo), progress(&request[..cut], Progress::default()));
        assert_eq!(resumed, fresh, "cut at {cut}");
        match resumed {
            Walked::Arriving { progress, at_least } => {
                memo = progress;
                // Through the end of the argument arriving, once its length is here.
                assert!(at_least.map_or(true, |len| len > cut && len <= request.len()), "cut at {cut}");
            }
            Walked::Other => assert!(cut < 3, "cut at {cut}: the count line not all here"),
        }
    }
    assert_eq!(progress(&request, memo), Walked::Other, "all here");
    assert_eq!(progress(b"PING\r\n", Progress::default()), Walked::Other);
    assert_eq!(progress(b"*2\r\n+x\r\n", Progress::default()), Walked::Other, "broken framing");
    // An empty line where an argument's starts (the session fuzz target found its panic).
    assert_eq!(progress(b"*2\r\n\r\n", Progress::default()), Walked::Other);
    let Walked::Arriving { progress: first, .. } = progress(b"*2\r\n$3\r\nGET\r\n", Progress::default())
    else {
        panic!("the first argument walked, the second to come");
    };
    assert_eq!(progress(b"*2\r\n$3\r\nGET\r\n\r\nkey", first), Walked::Other, "walked on to an empty line");
}

#[test]
fn script_forms_are_checked_as_redis_server_checks_them() {
    use super::script::{called, Eval, Script};
    let parse = |text: &[u8]| {
        let args: Vec<&[u8]> = text.split(|&byte| byte == b' ').collect();
        let bytes = frame_bytes(&args);
        let (frame, _) = parsed_frame(&bytes);
        let mut out = Vec::new();
        match call(&frame, &LIMITS) {
            Call::Eval(Eval { sha, read_only, keys, .. }) => {
                format!("eval sha={sha} ro={read_only} keys={keys}")
            }
            Call::Script(Script::Exists(_)) => "exists".into(),
            Call::Script(script) => format!("{script:?}"),
            Call::Error(refusal) => {
                super::reply::refusal(&refusal, &mut out);
                String::from_utf8(out).unwrap()
            }
            other => format!("{other:?}"),
        }
    };
    assert_eq!(parse(b"EVAL s 1 k a"), "eval sha=false ro=false keys=1");
    assert_eq!(parse(b"evalsha_ro s 0"), "eval sha=true ro=true keys=0");
    assert_eq!(parse(b"EVAL s 2 k"), "-ERR Number of keys can't be greater than number of args\r\n");
    assert_eq!(parse(b"EVAL s -1"), "-ERR Number of keys can't be negative\r\n");
    assert_eq!(parse(b"EVAL s x"), "-ERR value is not an integer or out of range\r\n");
    assert_eq!(parse(b"EVAL s"), "-ERR wrong number of arguments for 'eval' command\r\n");
    assert_eq!(parse(b"SCRIPT LOAD"), "-ERR wrong number of arguments for 'script|load' command\r\n");
    assert_eq!(parse(b"SCRIPT EXISTS"), "-ERR wrong number of arguments for 'script|exists' command\r\n");
    assert_eq!(parse(b"SCRIPT FLUSH bad"), "-ERR SCRIPT FLUSH only support SYNC|ASYNC option\r\n");
    assert_eq!(parse(b"SCRIPT foo"), "-ERR unknown subcommand 'foo'. Try SCRIPT HELP.\r\n");
    assert_eq!(parse(b"script flush async"), "Flush");
    assert_eq!(parse(b"SCRIPT EXISTS a b"), "exists");
    let set = called(b"SET").expect("served");
    assert!(set.write && !set.noscript && set.fits(3) && !set.fits(2));
    let get = called(b"get").expect("served");
    assert!(!get.write && get.fits(2) && !get.fits(3));
    assert!(called(b"eval").expect("served").noscript);
    assert!(called(b"multi").expect("served").noscript);
    assert_eq!(called(b"nosuch"), None);
}
