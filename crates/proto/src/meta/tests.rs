use super::*;
use crate::{parse, Parsed};

fn meta(input: &[u8]) -> Meta<'_> {
    match parse(input, &Limits::default()) {
        Parsed::Request { request: Request::Meta(meta), .. } => meta,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
    }
}

#[test]
fn flags_and_their_tokens() {
    let get = meta(b"mg key v c T30 N-1 R5 O123 q k\r\n");
    assert_eq!(get.command, MetaCommand::Get);
    assert_eq!(get.key(), b"key");
    let options = get.options;
    assert!(options.has(b'v') && options.has(b'c') && options.quiet() && !options.has(b'f'));
    assert_eq!((options.ttl, options.vivify, options.recache), (Some(30), Some(-1), Some(5)));
    let tokens: Vec<&[u8]> = get.flag_tokens().collect();
    assert_eq!(tokens, [&b"v"[..], b"c", b"T30", b"N-1", b"R5", b"O123", b"q", b"k"]);
}

#[test]
fn set_carries_its_data_and_mode() {
    let set = meta(b"ms key 3 MA F7 C99 I\r\nabc\r\n");
    assert_eq!(set.data, b"abc");
    assert_eq!(set.options.mode, Some(b'A'));
    assert_eq!(set.options.client_flags, 7);
    assert_eq!(set.options.cas, Some(99));
    assert!(set.options.has(b'I'));
    assert!(matches!(parse(b"ms key 3\r\nab", &Limits::default()), Parsed::Incomplete));
}

#[test]
fn arithmetic_defaults_and_modes() {
    let arith = meta(b"ma n\r\n");
    assert_eq!((arith.options.delta, arith.options.initial, arith.decrement()), (1, 0, false));
    let arith = meta(b"ma n MD D5 J9 N0\r\n");
    assert_eq!((arith.options.delta, arith.options.initial, arith.decrement()), (5, 9, true));
    assert!(meta(b"ma n M-\r\n").decrement());
}

#[test]
fn base64_keys_decode() {
    let get = meta(b"mg Zm9v b v\r\n");
    assert_eq!(get.key(), b"foo");
    assert_eq!(get.key_token, b"Zm9v");
    match parse(b"mg !!!! b\r\n", &Limits::default()) {
        Parsed::Refused { reply, .. } => assert_eq!(reply, "CLIENT_ERROR error decoding key\r\n"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn replies_reflect_flags_in_request_order() {
    let get = meta(b"mg aw== s O7 v t k c f b\r\n");
    let item =
        crate::response::MetaItem { cas: 5, flags: 3, value_len: 2, ttl_secs: -1, ..Default::default() };
    let mut out = Vec::new();
    crate::response::meta_flags(&mut out, &get, Some(&item), b"cfstlh");
    assert_eq!(String::from_utf8_lossy(&out), " s2 O7 t-1 kaw== b c5 f3");
}

#[test]
fn meta_commands_become_the_one_vocabulary() {
    use crate::command::{Get, Op};
    let limits = Limits::default();
    let get = meta(b"mg key v T30 N10 R5 u E77\r\n");
    let command = get.key_command(&limits);
    assert_eq!(command.key, b"key");
    let want = Get {
        touch: Some(30),
        vivify: Some(10),
        recache_below_secs: Some(5),
        recache_before_touch: false,
        no_update: true,
        cas_in: Some(77),
    };
    assert_eq!(command.op, Op::Get(want));
    assert!(!command.op.read_only());
    // N and T apply in request order: the later one is the created item's.
    let Op::Get(get) = meta(b"mg key N10 T30\r\n").key_command(&limits).op else { panic!() };
    assert_eq!(get.vivify, Some(30));
    let Op::Get(get) = meta(b"mg key R5 T30\r\n").key_command(&limits).op else { panic!() };
    assert!(get.recache_before_touch);
    assert!(meta(b"mg key v k\r\n").key_command(&limits).op.read_only());
    assert!(meta(b"me key\r\n").key_command(&limits).op.read_only());

    let append = meta(b"ms key 3 MA C99 N5\r\nabc\r\n");
    let Op::Store(store) = append.key_command(&limits).op else { panic!() };
    assert_eq!(
        (store.mode, store.data, store.vivify, store.drops_refused),
        (StoreMode::AppendCas(99), &b"abc"[..], Some(5), true)
    );
    let stale = meta(b"ms key 1 C99 I\r\na\r\n");
    let Op::Store(store) = stale.key_command(&limits).op else { panic!() };
    assert_eq!(store.mode, StoreMode::CasOrStale(99));
    let add = meta(b"ms key 1 ME C99\r\na\r\n");
    let Op::Store(store) = add.key_command(&limits).op else { panic!() };
    assert_eq!(store.mode, StoreMode::Add);
    let small = Limits { item_bytes_max: 100, now_ms: 0, databases: 16 };
    let Parsed::Request { request: Request::Meta(large), .. } = parse(b"ms key 500\r\n", &small) else {
        panic!()
    };
    assert_eq!(large.key_command(&small).op, Op::TooLarge { drops: true });

    let Op::Delete(delete) = meta(b"md key C0 I x T9 F3\r\n").key_command(&limits).op else { panic!() };
    assert_eq!(
        (delete.cas, delete.invalidate, delete.keep_item, delete.exptime, delete.flags),
        (Some(0), true, true, Some(9), 3)
    );
    let Op::Arith(arith) = meta(b"ma key MD D4 C0 N0 J7\r\n").key_command(&limits).op else { panic!() };
    assert_eq!((arith.delta, arith.decrement, arith.cas, arith.create), (4, true, 0, Some((7, 0))));
}
