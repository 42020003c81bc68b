//! What memcached added after 1.6.18, up to 1.6.45 (the release quicksilver follows): each
//! case below is a request sequence with memcached 1.6.45's replies, recorded from it byte for
//! byte (built from its public source outside the repository; CI has only Debian's 1.6.18,
//! which answers these differently, so they are asserted here instead of against it live).
//! docs/COMPATIBILITY.md lists the changes.

mod common;

use common::{Client, ServerProcess};
use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

/// (case, [(request, memcached 1.6.45's reply)]).
type Case = (&'static str, &'static [(&'static str, &'static str)]);

const CASES: &[Case] = &[
    (
        "short lines and blank commands",
        &[
            (" \n", "CLIENT_ERROR bad command line format\r\n"),
            ("\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("mn\n", "CLIENT_ERROR bad command line format\r\n"),
            ("ab\n", "CLIENT_ERROR bad command line format\r\n"),
        ],
    ),
    (
        "a command is the bytes before the first space",
        &[
            ("set sp 0 0 1\r\nx\r\n", "STORED\r\n"),
            ("  get sp\r\n", "ERROR\r\n"),
            ("get sp\r\n", "VALUE sp 0 1\r\nx\r\nEND\r\n"),
            ("  flush_all\r\n", "OK\r\n"),
            ("get sp\r\n", "END\r\n"),
        ],
    ),
    (
        "commands short of their tokens",
        &[
            ("get\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("gets\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("gat 10\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("set k 0 0\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("incr k\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("touch k\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("delete\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("mg\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("ms k\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("verbosity\r\n", "CLIENT_ERROR bad command line format\r\n"),
        ],
    ),
    (
        "a malformed storage line swallows its data block",
        &[
            ("cas foo 0 0 6 \r\nbarva2\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("set foo1 0 0 1\r\n1\r\n", "STORED\r\n"),
            ("set k -1 0 1\r\nx\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("set k 0 x 1\r\nx\r\n", "CLIENT_ERROR bad command line format\r\n"),
            (
                "set k 0 0 -1\r\nx\r\n",
                "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n",
            ),
            (
                "set k 0 0 +1\r\nx\r\n",
                "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n",
            ),
            ("get foo1 k\r\n", "VALUE foo1 0 1\r\n1\r\nEND\r\n"),
        ],
    ),
    (
        "tokens past what a command reads are ignored",
        &[
            ("set n 0 0 1\r\n5\r\n", "STORED\r\n"),
            ("incr n 1 2 3\r\n", "6\r\n"),
            ("delete nope x\r\n", "NOT_FOUND\r\n"),
            ("verbosity 1 2 3\r\n", "OK\r\n"),
            ("flush_all 0 2 3\r\n", "OK\r\n"),
            ("get n\r\n", "END\r\n"),
        ],
    ),
    (
        "numbers read strictly",
        &[
            ("set n 0 0 1\r\n5\r\n", "STORED\r\n"),
            ("incr n +1\r\n", "CLIENT_ERROR invalid numeric delta argument\r\n"),
            ("incr n 007\r\n", "12\r\n"),
            ("touch n +5\r\n", "CLIENT_ERROR invalid exptime argument\r\n"),
            ("gat -0 n\r\n", "VALUE n 0 2\r\n12\r\nEND\r\n"),
        ],
    ),
    (
        "shutdown not enabled",
        &[
            ("shutdown\r\n", "SERVER_ERROR: shutdown not enabled\r\n"),
            ("shutdown graceful\r\n", "SERVER_ERROR: shutdown not enabled\r\n"),
            ("shutdown x\r\n", "SERVER_ERROR: shutdown not enabled\r\n"),
        ],
    ),
    (
        "ms s reports the stored size",
        &[
            ("ms sz 2 s\r\nab\r\n", "HD s2\r\n"),
            ("ms sz 1 s MA\r\nc\r\n", "HD s3\r\n"),
            ("ms sz 3 s MP q\r\nxyz\r\n", ""),
            ("mg sz v s\r\n", "VA 6 s6\r\nxyzabc\r\n"),
        ],
    ),
    (
        "append and prepend with N create a missing item",
        &[
            ("ms va 1 MA N0 s\r\nx\r\n", "HD s1\r\n"),
            ("mg va v t\r\n", "VA 1 t-1\r\nx\r\n"),
            ("ms vp 2 MP N100 F3\r\nyz\r\n", "HD\r\n"),
            ("mg vp v f\r\n", "VA 2 f3\r\nyz\r\n"),
            ("ms vn 1 MA\r\nx\r\n", "NS\r\n"),
        ],
    ),
    (
        "E sets the CAS value",
        &[
            ("ms e1 2 E4000 c\r\nab\r\n", "HD c4000\r\n"),
            ("mg e1 c v\r\n", "VA 2 c4000\r\nab\r\n"),
            ("ms e1 2 C4000 E5000 c\r\ncd\r\n", "HD c5000\r\n"),
            ("ms e1 2 C4000 c\r\nef\r\n", "EX c0\r\n"),
            ("gets e1\r\n", "VALUE e1 0 2 5000\r\ncd\r\nEND\r\n"),
            ("cas e1 0 0 1 5000\r\ng\r\n", "STORED\r\n"),
            ("mg e1 v\r\n", "VA 1\r\ng\r\n"),
        ],
    ),
    (
        "E on mg with N, md and ma",
        &[
            ("mg e2 E777 N0 c\r\n", "HD c777 W\r\n"),
            ("mg e2 c v\r\n", "VA 0 c777 Z\r\n\r\n"),
            ("ms e3 1\r\nx\r\n", "HD\r\n"),
            ("md e3 I E888\r\n", "HD\r\n"),
            ("mg e3 c\r\n", "HD c888 X W\r\n"),
            ("ms e4 1\r\n5\r\n", "HD\r\n"),
            ("ma e4 E999 c v\r\n", "VA 1 c999\r\n6\r\n"),
            ("ma e4 C999 E1000 c v\r\n", "VA 1 c1000\r\n7\r\n"),
            ("ma e4 C999 c v\r\n", "EX\r\n"),
        ],
    ),
    (
        "md x drops the value and keeps the item",
        &[
            ("ms dx 2 T100 F7 E50\r\nxy\r\n", "HD\r\n"),
            ("md dx x\r\n", "HD\r\n"),
            ("mg dx v f t s c\r\n", "VA 0 f0 t-1 s0 c50\r\n\r\n"),
            ("md dx x F9 q\r\n", ""),
            ("mg dx v f s\r\n", "VA 0 f9 s0\r\n\r\n"),
            ("md nope x\r\n", "NF\r\n"),
        ],
    ),
    (
        "md x with I marks it stale",
        &[
            ("ms di 2 T100 F7\r\nxy\r\n", "HD\r\n"),
            ("md di x I T30 E60\r\n", "HD\r\n"),
            ("mg di v f s c\r\n", "VA 0 f0 s0 c60 X W\r\n\r\n"),
        ],
    ),
    (
        "mg C does not send a value the client has",
        &[
            ("ms mc 3 E100\r\nabc\r\n", "HD\r\n"),
            ("mg mc C100 c v\r\n", "HD c100\r\n"),
            ("mg mc C101 c v\r\n", "VA 3 c100\r\nabc\r\n"),
            ("mg mc C100 v k s\r\n", "HD kmc s3\r\n"),
        ],
    ),
    (
        "client flags over 32 bits are refused on ms",
        &[
            ("ms fl 1 F4294967301\r\nx\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("ms fl 1 F4294967295\r\nx\r\n", "HD\r\n"),
            ("mg fl f\r\n", "HD f4294967295\r\n"),
            ("ms fl 1 F-1\r\nx\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("ms fl 1 F00000000001\r\nx\r\n", "HD\r\n"),
        ],
    ),
    (
        "M reads the byte after the letter",
        &[
            ("ms mm 1 MAX\r\nx\r\n", "NS\r\n"),
            ("ms mm 1 M\r\nx\r\n", "CLIENT_ERROR invalid mode for ms M token\r\n"),
            ("ms mm 1 MS\r\nx\r\n", "HD\r\n"),
            ("ma mm MQ\r\n", "CLIENT_ERROR invalid mode for ma M token\r\n"),
        ],
    ),
    (
        "mgdump and metadump",
        &[
            ("lru_crawler mgdump 2\r\n", "OK\r\nEN\r\n"),
            ("lru_crawler mgdump x\r\n", "BADCLASS invalid class id\r\n"),
            ("lru_crawler metadump 2\r\n", "OK\r\nEND\r\n"),
            ("lru_crawler mgdump\r\n", "ERROR\r\n"),
        ],
    ),
];

fn call(client: &mut Client, request: &str) -> String {
    String::from_utf8_lossy(&client.call(request.as_bytes())).into_owned()
}

#[test]
fn every_case_answers_as_memcached_1_6_45() {
    for (case, steps) in CASES {
        let server = ServerProcess::quicksilver(&["-t", "2"]);
        let mut client = server.connect();
        for (request, want) in *steps {
            assert_eq!(call(&mut client, request), *want, "{case}: {request:?}");
        }
    }
}

#[test]
fn the_version_is_1_6_45s() {
    let server = ServerProcess::quicksilver(&[]);
    assert_eq!(call(&mut server.connect(), "version\r\n"), "VERSION 1.6.45-quicksilver\r\n");
}

/// `lru_crawler metadump` begins with `OK` (1.6.43) and carries the flags (1.6.24);
/// `lru_crawler mgdump` lists every key as an `mg` line, then `EN` (1.6.19).
#[test]
fn dumps_list_every_item_as_1_6_45_does() {
    let server = ServerProcess::quicksilver(&["-t", "2"]);
    let mut client = server.connect();
    let keys: Vec<String> = (0..300).map(|n| format!("dump{n}")).collect();
    for (n, key) in keys.iter().enumerate() {
        assert_eq!(call(&mut client, &format!("set {key} {n} 0 1\r\nx\r\n")), "STORED\r\n");
    }
    assert_eq!(call(&mut client, "ms bin\x01ary 1 b\r\nx\r\n"), "CLIENT_ERROR error decoding key\r\n");
    assert_eq!(call(&mut client, "ms YmluAWFyeQ== 1 b\r\nx\r\n"), "HD\r\n");
    client.send(b"lru_crawler metadump all\r\n");
    let dump = String::from_utf8(client.read_until(b"END\r\n")).unwrap();
    let mut lines = dump.lines();
    assert_eq!(lines.next(), Some("OK"));
    let items: Vec<&str> = lines.take_while(|line| *line != "END").collect();
    assert_eq!(items.len(), 301);
    for (n, key) in keys.iter().enumerate() {
        let line = items.iter().find(|line| line.starts_with(&format!("key={key} "))).expect(key);
        assert!(line.contains(" cls=1 size=") && line.ends_with(&format!(" flags={n} ")), "{line}");
    }
    client.send(b"lru_crawler mgdump hash\r\n");
    let dump = String::from_utf8(client.read_until(b"\r\nEN\r\n")).unwrap();
    let mut lines: Vec<&str> = dump.lines().collect();
    assert_eq!(lines.remove(0), "OK");
    assert_eq!(lines.pop(), Some("EN"));
    let mut want: Vec<String> = keys.iter().map(|key| format!("mg {key}")).collect();
    want.push("mg YmluAWFyeQ== b".into());
    want.sort();
    lines.sort();
    assert_eq!(lines, want);
    // Each line is a request that finds its item.
    assert_eq!(call(&mut client, "mg YmluAWFyeQ== b v\r\n"), "VA 1\r\nx\r\n");
    assert_eq!(
        call(&mut client, "mg x v\r\nlru_crawler mgdump all\r\n"),
        "EN\r\nERROR cannot pipeline other commands before mgdump\r\n"
    );
    let disabled = ServerProcess::quicksilver(&["-X"]);
    assert_eq!(call(&mut disabled.connect(), "lru_crawler mgdump all\r\n"), "ERROR key dump not allowed\r\n");
}

/// `watch deletions` (1.6.20): a line for each item `delete` or `md` removed, none for a miss
/// or for `md I`, which keeps the item.
#[test]
fn a_deletions_watcher_sees_what_delete_and_md_remove() {
    let server = ServerProcess::quicksilver(&["-t", "2"]);
    let watcher = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    watcher.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (&watcher).write_all(b"watch deletions\n").unwrap();
    let mut lines = BufReader::new(&watcher);
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    assert_eq!(line, "OK\r\n");
    let mut client = server.connect();
    let next = |lines: &mut BufReader<&std::net::TcpStream>| {
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        line
    };
    assert_eq!(call(&mut client, "set vfoo 0 0 4\r\nvbar\r\n"), "STORED\r\n");
    assert_eq!(call(&mut client, "md missing\r\n"), "NF\r\n");
    assert_eq!(call(&mut client, "delete vfoo\r\n"), "DELETED\r\n");
    let logged = next(&mut lines);
    assert!(logged.starts_with("ts="), "{logged}");
    assert!(logged.ends_with(" type=deleted key=vfoo cmd=delete clsid=1 size=4\n"), "{logged}");
    assert_eq!(call(&mut client, "set vfoo 0 0 4\r\nvbar\r\n"), "STORED\r\n");
    assert_eq!(call(&mut client, "md vfoo I\r\n"), "HD\r\n");
    assert_eq!(call(&mut client, "md vfoo\r\n"), "HD\r\n");
    let logged = next(&mut lines);
    assert!(logged.ends_with(" type=deleted key=vfoo cmd=md clsid=1 size=4\n"), "{logged}");
}

/// With -Y, a client announcing an authentication token over 16,384 bytes is refused at once
/// (1.6.42) instead of the server waiting for it.
#[test]
fn an_oversized_auth_token_is_refused_at_once() {
    let dir = std::env::temp_dir().join(format!("qs-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("authfile");
    std::fs::write(&file, "user:pass\n").unwrap();
    let server = ServerProcess::quicksilver(&["-Y", file.to_str().unwrap()]);
    let mut client = server.connect();
    client.send(b"set k 0 0 2000000000\r\n");
    assert_eq!(client.read_until(b"\r\n"), b"CLIENT_ERROR auth token too long\r\n");
    client.send(b"set k 0 0 9\r\nuser pass\r\n");
    assert_eq!(client.read_until(b"\r\n"), b"STORED\r\n");
    // Before it authenticates, a line shorter than any authentication closes the connection.
    let mut other = server.connect();
    other.send(b"shrt\r\n");
    assert_eq!(other.read_to_close(), b"");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `stats settings` has `client_flags_size`; `stats` names the slab mover's figures as 1.6.45.
#[test]
fn stats_carry_1_6_45s_names() {
    let server = ServerProcess::quicksilver(&[]);
    let mut client = server.connect();
    let settings = common::stats(&mut client, "settings");
    let flags =
        settings.iter().find(|(name, _)| name == "client_flags_size").map(|(_, value)| value.as_str());
    assert_eq!(flags, Some("4"));
    let names: Vec<String> = common::stats(&mut client, "").into_iter().map(|(name, _)| name).collect();
    let at = |name: &str| names.iter().position(|n| n == name).unwrap_or_else(|| panic!("{name}"));
    assert!(at("slab_reassign_busy_deletes") < at("slab_reassign_busy_nomem"));
    assert!(at("slab_reassign_busy_nomem") < at("slab_reassign_last_busy_status"));
    assert!(at("slab_reassign_last_busy_status") < at("slab_reassign_running"));
    assert!(!names.iter().any(|n| n == "slab_reassign_evictions_nomem"));
}
