use super::*;
use crate::{parse, Parsed};

fn limits() -> Limits {
    Limits { item_bytes_max: 1 << 20, now_ms: 0, databases: 16 }
}

/// Parses every request in `buf`, returning each as its debug form and length.
fn parse_all(buf: &[u8]) -> (Vec<String>, usize) {
    let mut at = 0;
    let mut parsed = Vec::new();
    loop {
        match parse(&buf[at..], &limits()) {
            Parsed::Incomplete => return (parsed, at),
            Parsed::Close => {
                parsed.push("close".into());
                return (parsed, at);
            }
            Parsed::Request { request, len } => {
                parsed.push(format!("{request:?}"));
                at += len;
            }
            Parsed::Refused { reply, len, .. } => {
                parsed.push(reply.to_string());
                at = (at + len).min(buf.len());
            }
        }
    }
}

#[test]
fn a_pipeline_parses_the_same_at_every_split_point() {
    let pipeline: &[u8] =
        b"set a 1 2 3\r\nabc\r\nget a b\r\ngets a\r\ngat 5 a\r\ndelete a noreply\r\nincr n 7\r\n\
        touch a 9\r\nmg a v c O1\r\nms b 2 T5\r\nhi\r\nmd b q\r\nma n D3\r\nmn\r\nbogus\r\nflush_all 3\r\n\
        version\r\nverbosity 1\r\nstats\r\nappend a 0 0 1\nx\r\ncas a 0 0 1 99\r\ny\r\n";
    let (whole, len) = parse_all(pipeline);
    assert_eq!(len, pipeline.len());
    assert_eq!(whole.len(), 19);
    for split in 0..pipeline.len() {
        // What the first part yields must be a prefix of the whole, and parsing resumes
        // where it stopped once the rest arrives.
        let (first, consumed) = parse_all(&pipeline[..split]);
        assert_eq!(first[..], whole[..first.len()], "split at {split}");
        let (rest, _) = parse_all(&pipeline[consumed..]);
        assert_eq!([first, rest].concat(), whole, "split at {split}");
    }
}

#[test]
fn requests_parse_to_what_they_say() {
    let cases: &[(&[u8], &str)] = &[
        (b"get a  b\r\n", r#"Get { kind: Get, keys: [97, 32, 32, 98], single: false }"#),
        (b"get  a \r\n", r#"Get { kind: Get, keys: [97], single: true }"#),
        (b"gat 10 a\r\n", r#"Get { kind: Gat { exptime: 10 }, keys: [97], single: true }"#),
        // memcached 1.6.40: tokens past what a command reads are ignored.
        (b"delete k 1\r\n", r#"Delete { key: [107], noreply: false }"#),
        (b"incr k 1 2 3\r\n", r#"Arith { key: [107], delta: 1, decrement: false, noreply: false }"#),
        (b"flush_all 1 2 3\r\n", r#"FlushAll { delay: 1, noreply: false }"#),
        (b"verbosity 1 2 3\r\n", "Verbosity { noreply: false }"),
        (b"delete k 0\r\n", r#"Delete { key: [107], noreply: false }"#),
        (b"delete k 0 noreply\r\n", r#"Delete { key: [107], noreply: true }"#),
        (
            b"incr k 18446744073709551615\r\n",
            r#"Arith { key: [107], delta: 18446744073709551615, decrement: false, noreply: false }"#,
        ),
        (b"flush_all\r\n", r#"FlushAll { delay: 0, noreply: false }"#),
        (b"flush_all 10 noreply\r\n", r#"FlushAll { delay: 10, noreply: true }"#),
        (b"stats settings\r\n", r#"Stats { group: [115, 101, 116, 116, 105, 110, 103, 115], argument: [] }"#),
        (b"stats detail on\r\n", r#"Stats { group: [100, 101, 116, 97, 105, 108], argument: [111, 110] }"#),
        (b"slabs automove 1\r\n", "SlabsAutomove { noreply: false }"),
        (b"slabs reassign 1 2\r\n", "SlabsReassign { classes: Some((1, 2)) }"),
        (b"slabs reassign x 2\r\n", "SlabsReassign { classes: None }"),
        (b"cache_memlimit 64\r\n", "CacheMemlimit { megabytes: 64, noreply: false }"),
        (b"cache_memlimit 64 noreply\r\n", "CacheMemlimit { megabytes: 64, noreply: true }"),
        (b"stats cachedump 1 100\r\n", "CacheDump { args: Some((Some(1), Some(100))) }"),
        (b"stats cachedump 1\r\n", "CacheDump { args: None }"),
        (b"debugtime -5\r\n", "DebugTime { delta: -5 }"),
        // watch: fetchers when no stream is named; bits as in `text::watch`; None for an unknown one.
        (b"watch\r\n", "Watch { streams: Some(4) }"),
        (b"watch mutations evictions\r\n", "Watch { streams: Some(10) }"),
        (b"watch connevents\r\n", "Watch { streams: Some(32) }"),
        (b"watch fetchers bogus\r\n", "Watch { streams: None }"),
        (b"quit\r\n", "Quit"),
        (b"mn\r\n", "MetaNoop"),
        (b"lru_crawler metadump all\r\n", "Metadump { classes: [97, 108, 108], keys: false }"),
        (b"lru_crawler mgdump 1\r\n", "Metadump { classes: [49], keys: true }"),
        (b"lru_crawler crawl 1,2\r\n", "Crawl { classes: [49, 44, 50] }"),
        (b"lru_crawler enable\r\n", "CrawlerSwitch { enable: true }"),
        (b"lru_crawler disable\r\n", "CrawlerSwitch { enable: false }"),
        (b"lru_crawler sleep 1000000\r\n", "CrawlerPacing"),
        (b"lru_crawler tocrawl 4294967296\r\n", "CrawlerPacing"),
        (b"shutdown\r\n", "Shutdown { mode: Now }"),
        (b"shutdown graceful\r\n", "Shutdown { mode: Graceful }"),
        (b"shutdown now\r\n", "Shutdown { mode: Invalid }"),
        (b"shutdown graceful x\r\n", "Shutdown { mode: Invalid }"),
        (
            b"set k 4294967296 99999999999 1\r\nx\r\n",
            r#"Store { mode: Set, key: [107], flags: 0, exptime: 1215752191, data: [120], noreply: false }"#,
        ),
    ];
    for (input, expected) in cases {
        match parse(input, &limits()) {
            Parsed::Request { request, len } => {
                assert_eq!(format!("{request:?}"), *expected, "{:?}", String::from_utf8_lossy(input));
                assert_eq!(len, input.len());
            }
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
        }
    }
}

#[test]
fn refusals_carry_memcached_replies_and_skip_lengths() {
    let long_key = "k".repeat(251);
    let set_long_key = format!("set {long_key} 0 0 1\r\n");
    let cases: &[(&[u8], &str, usize)] = &[
        // memcached 1.6.40's parser: a line under four bytes, a command short of its
        // tokens, a length that does not parse: the line alone; any other refusal of a
        // storage command swallows its data block too.
        (b"\r\n", "CLIENT_ERROR bad command line format\r\n", 2),
        (b" \n", "CLIENT_ERROR bad command line format\r\n", 2),
        (b"mn\n", "CLIENT_ERROR bad command line format\r\n", 3),
        (b"GET k\r\n", "ERROR\r\n", 7),
        (b"  get k\r\n", "ERROR\r\n", 9),
        (b"get\r\n", "CLIENT_ERROR bad command line format\r\n", 5),
        (b"gat 10\r\n", "CLIENT_ERROR bad command line format\r\n", 8),
        (b"mg\r\n", "CLIENT_ERROR bad command line format\r\n", 4),
        (b"set k 0 0\r\n", "CLIENT_ERROR bad command line format\r\n", 11),
        (b"set k -1 0 1\r\n", "CLIENT_ERROR bad command line format\r\n", 17),
        (b"cas foo 0 0 6 \r\n", "CLIENT_ERROR bad command line format\r\n", 24),
        (b"set k 0 0 -1\r\n", "CLIENT_ERROR bad command line format\r\n", 14),
        (set_long_key.as_bytes(), "CLIENT_ERROR bad command line format\r\n", set_long_key.len() + 3),
        (b"set k 0 0 2\r\nabcd\r\n", "CLIENT_ERROR bad data chunk\r\n", 17),
        (b"cas k 0 0 1 x\r\n", "CLIENT_ERROR bad command line format\r\n", 18),
        (b"touch k x\r\n", "CLIENT_ERROR invalid exptime argument\r\n", 11),
        (b"incr k -1\r\n", "CLIENT_ERROR invalid numeric delta argument\r\n", 11),
        // memcached 1.6.40's tokenizer refuses a flag that starts with neither a letter nor a
        // digit; a digit is read as an unknown flag.
        (b"mg k !\r\n", "CLIENT_ERROR bad command line format\r\n", 8),
        (b"mg k 5\r\n", "CLIENT_ERROR invalid flag\r\n", 8),
        (b"ms k 1 !\r\na\r\n", "CLIENT_ERROR bad command line format\r\n", 10),
        (b"mg k T\r\n", "CLIENT_ERROR bad token in command line format\r\n", 8),
        (b"mg k v v\r\n", "CLIENT_ERROR duplicate flag\r\n", 10),
        (b"md k v v\r\n", "CLIENT_ERROR duplicate flag\r\n", 10),
        (b"ma k v v\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n", 10),
        (b"ms k 2 MX\r\nab\r\n", "CLIENT_ERROR invalid mode for ms M token\r\n", 15),
        (b"lru_crawler\r\n", "ERROR\r\n", 13),
        (b"lru_crawler metadump\r\n", "ERROR\r\n", 22),
        (b"lru_crawler metadump all x\r\n", "ERROR\r\n", 28),
        (b"lru_crawler sleep x\r\n", "CLIENT_ERROR bad command line format\r\n", 21),
        (b"lru_crawler sleep 1000001\r\n", "CLIENT_ERROR sleep must be one second or less\r\n", 27),
        (b"lru_crawler tocrawl -1\r\n", "CLIENT_ERROR bad command line format\r\n", 24),
        (b"slabs automove invalid\r\n", "CLIENT_ERROR bad command line format\r\n", 24),
        (b"slabs automove 3\r\n", "ERROR\r\n", 18),
        (b"slabs automove ratio x\r\n", "ERROR\r\n", 24),
        (b"slabs reassign 1\r\n", "ERROR\r\n", 18),
        (b"cache_memlimit\r\n", "ERROR\r\n", 16),
        (b"cache_memlimit x\r\n", "ERROR\r\n", 18),
        (b"debugtime x\r\n", "ERROR\r\n", 13),
    ];
    for (input, reply, skip) in cases {
        match parse(input, &limits()) {
            Parsed::Refused { reply: got, len, .. } => {
                assert_eq!((got, len), (*reply, *skip), "{:?}", String::from_utf8_lossy(input));
            }
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
        }
    }
}

#[test]
fn a_too_large_value_is_skipped_without_buffering_it() {
    match parse(b"set k 0 0 2000000 noreply\r\n", &limits()) {
        Parsed::Request {
            request: Request::TooLarge { mode: StoreMode::Set, key: b"k", noreply: true },
            len,
        } => {
            assert_eq!(len, 27 + 2_000_002);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn over_long_lines_close_unless_they_are_gets() {
    let junk = vec![b'x'; crate::LINE_BYTES_MAX + 1];
    assert!(matches!(parse(&junk, &limits()), Parsed::Close));
    let mut get = b"get ".to_vec();
    get.resize(crate::LINE_BYTES_MAX * 4, b'k');
    assert!(matches!(parse(&get, &limits()), Parsed::Incomplete));
    get.resize(crate::GET_LINE_BYTES_MAX + 1, b'k');
    assert!(matches!(parse(&get, &limits()), Parsed::Close));
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_and_lengths_stay_sane(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        match parse(&bytes, &limits()) {
            Parsed::Request { len, request } => {
                let data_block = matches!(request, Request::TooLarge { .. });
                proptest::prop_assert!(data_block || len <= bytes.len());
                proptest::prop_assert!(len > 0);
            }
            Parsed::Refused { len, .. } => proptest::prop_assert!(len > 0),
            Parsed::Incomplete | Parsed::Close => {}
        }
    }
}

proptest::proptest! {
    /// The set fast path reads every line it takes as the tokenizer's path does.
    #[test]
    fn the_set_fast_path_agrees_with_the_tokenizer(
        command in proptest::sample::select(vec!["set", "set ", "add", "sets"]),
        key in proptest::sample::select(vec!["k".to_string(), "key1".into(), "noreply".into(), "0".into(), "k".repeat(251)]),
        numbers in proptest::collection::vec(
            proptest::sample::select(vec!["0", "00", "7", "3", "-1", "+2", "x", "4294967296",
                "2147483647", "99999999999999999999", "123456789012345678"]),
            3,
        ),
        separators in proptest::collection::vec(proptest::sample::select(vec![" ", " ", " ", "  "]), 4),
        tail in proptest::sample::select(vec!["", " noreply", " noreply ", " other", " ", " noreply x"]),
        data in proptest::sample::select(vec!["", "a", "abc", "abcdefg", "xy\r\nzz"]),
    ) {
        let line = format!(
            "{command}{}{key}{}{}{}{}{}{}{tail}",
            separators[0], separators[1], numbers[0], separators[2], numbers[1], separators[3], numbers[2],
        );
        let buf = format!("{line}\r\n{data}\r\n").into_bytes();
        let line_len = line.len() + 2;
        let tokens = Tokens::<TOKENS_MAX>::split(line.as_bytes());
        let general = parse_tokens(&tokens, line.as_bytes(), line_len, &buf, &limits());
        if let Some(fast) = parse_set_fast(line.as_bytes(), line_len, &buf, &limits()) {
            proptest::prop_assert_eq!(format!("{fast:?}"), format!("{general:?}"));
        }
        // And the whole parser answers the same either way.
        proptest::prop_assert_eq!(format!("{:?}", parse(&buf, &limits())), format!("{general:?}"));
    }
}

#[test]
fn the_set_fast_path_takes_plain_sets_only() {
    let fast = |line: &str| parse_set_fast(line.as_bytes(), line.len() + 2, b"", &limits()).is_some();
    assert!(fast("set k 0 0 1"));
    assert!(fast("set k 1 2 3 noreply"));
    assert!(!fast("set  k 0 0 1"));
    assert!(!fast("set k 0 0 1 "));
    assert!(!fast("set k 0 0 1 extra"));
    assert!(!fast("set k -1 0 1"));
    assert!(!fast("add k 0 0 1"));
}

#[test]
fn crawler_class_lists_read_as_memcached_reads_them() {
    for (classes, expected) in [
        (&b"all"[..], Some(true)),
        (b"hash", Some(true)),
        (b"1", Some(true)),
        (b"2,1", Some(true)),
        (b",1,,", Some(true)),
        (b"2", Some(false)),
        (b"63", Some(false)),
        (b"0", None),
        (b"64", None),
        (b"1,x", None),
        (b"-1", None),
        (b"ALL", None),
    ] {
        assert_eq!(crawler_classes(classes), expected, "{:?}", String::from_utf8_lossy(classes));
    }
}

#[test]
fn http_request_lines_close_as_memcached_closes_them() {
    for line in [
        "GET / HTTP/1.0\r\n",
        "PUT /asdf/asd/fasdfasdf/sadf HTTP/1.1\r\n",
        "DELETE HTTP/1.1\r\n",
        "foo HTTP/2\n",
    ] {
        assert!(matches!(parse(line.as_bytes(), &limits()), Parsed::Close), "{line}");
    }
    // Commands memcached dispatches before its last branch answer as ever.
    for line in ["get / HTTP/1.0\r\n", "delete HTTP/1.1\r\n", "set x HTTP/1.1\r\n", "version HTTP/1.1\r\n"] {
        assert!(!matches!(parse(line.as_bytes(), &limits()), Parsed::Close), "{line}");
    }
    assert!(matches!(parse(b"GET / HTTP/1.0 extra\r\n", &limits()), Parsed::Refused { reply: ERROR, .. }));
}

#[test]
fn text_commands_become_the_one_vocabulary() {
    use crate::command::{Answer, Op};
    let limits = Limits::default();
    let parsed = |input: &'static [u8]| match parse(input, &limits) {
        Parsed::Request { request, .. } => request,
        other => panic!("{other:?}"),
    };
    let set = parsed(b"set k 5 -1 2 noreply\r\nab\r\n");
    let command = set.key_command(&limits).unwrap();
    let Op::Store(store) = command.op else { panic!() };
    assert_eq!(
        (command.key, store.mode, store.flags, store.exptime, store.data),
        (&b"k"[..], StoreMode::Set, 5, -1, &b"ab"[..])
    );
    assert!(store.drops_refused && matches!(command.answer, Answer::Text { noreply: true, .. }));
    let add = parsed(b"add k 0 0 1\r\na\r\n");
    let Op::Store(store) = add.key_command(&limits).unwrap().op else { panic!() };
    assert!(!store.drops_refused);
    let touch = parsed(b"touch k 10\r\n");
    assert_eq!(touch.key_command(&limits).unwrap().op, Op::Touch { exptime: 10, read: false });
    assert!(parsed(b"get a b\r\n").key_command(&limits).is_none());
    let gets = GetKind::Gats { exptime: 5 }.command(b"k");
    assert!(matches!(gets.answer, Answer::Text { with_cas: true, .. }) && !gets.op.read_only());
}

/// A long store's flags and exptime read from its line alone, as the parser reads them.
#[test]
fn a_store_line_gives_its_flags_and_exptime() {
    assert_eq!(super::store_fields(b"set k 5 -1 100000"), Some((5, -1)));
    assert_eq!(super::store_fields(b"set k 4294967295 0 9 noreply"), Some((u32::MAX, 0)));
    assert_eq!(super::store_fields(b"set k x 0 9"), None);
}
