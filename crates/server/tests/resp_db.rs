//! Redis's numbered databases end to end (issue 76): SELECT, and every command that reads or
//! writes keys, in databases 0 to 15 as redis-server 7.0 answers them (compared byte for byte
//! with one worker and with four); KEYS, SCAN, RANDOMKEY, DBSIZE and FLUSHDB see their own
//! database; COPY ... DB and MOVE carry keys between them; SWAPDB exchanges two (and touches
//! the watched keys either holds); SELECT inside MULTI and inside a
//! script; memcached's protocols see database 0; redis-py given `db=N` (what `redis://host/N`
//! asks) works as against redis-server.

mod common;

use common::resp::{
    connect, frame, one, quicksilver, redis_py_script, replies_match, same_single_replies, Redis,
};

#[test]
fn databases_answer_as_redis_server_does() {
    same_single_replies(&[
        &["SET", "k", "zero"],
        &["SELECT", "1"],
        &["GET", "k"],
        &["SET", "k", "one"],
        &["MSET", "a", "1", "b", "2", "c", "3"],
        &["MGET", "a", "b", "c", "k"],
        &["INCR", "a"],
        &["EXISTS", "a", "b", "zz"],
        &["DBSIZE"],
        &["KEYS", "k"],
        &["RENAME", "c", "d"],
        &["TTL", "d"],
        &["EXPIRE", "d", "100"],
        &["SELECT", "0"],
        &["GET", "k"],
        &["DBSIZE"],
        &["KEYS", "*"],
        &["EXISTS", "a"],
        // COPY into another database, and MOVE between them.
        &["COPY", "k", "k2", "DB", "2"],
        &["COPY", "k", "k2", "DB", "2"],
        &["COPY", "k", "k2", "DB", "2", "REPLACE"],
        &["COPY", "k", "k", "DB", "0"],
        &["COPY", "k", "k", "DB", "3"],
        &["COPY", "k", "x", "DB", "16"],
        &["COPY", "k", "x", "DB", "no"],
        &["MOVE", "k", "3"],
        &["MOVE", "k", "3"],
        &["MOVE", "nope", "3"],
        &["MOVE", "k", "0"],
        &["MOVE", "k", "16"],
        &["MOVE", "k", "x"],
        &["MOVE", "k"],
        &["SELECT", "3"],
        &["GET", "k"],
        &["SET", "m", "moved"],
        &["MOVE", "m", "0"],
        &["SELECT", "2"],
        &["GET", "k2"],
        &["SELECT", "0"],
        &["GET", "m"],
        &["GET", "k"],
        // FLUSHDB empties its own database alone.
        &["SELECT", "1"],
        &["FLUSHDB"],
        &["DBSIZE"],
        &["GET", "a"],
        &["SELECT", "2"],
        &["DBSIZE"],
        &["FLUSHDB", "ASYNC"],
        &["FLUSHDB", "NOW"],
        &["SELECT", "0"],
        &["DBSIZE"],
        // Refusals.
        &["SELECT", "16"],
        &["SELECT", "-1"],
        &["SELECT", "x"],
        &["SELECT"],
        &["CONFIG", "GET", "databases"],
        // SELECT queued inside MULTI: the commands after it are the new database's, and the
        // connection stays there after EXEC; DISCARD and EXECABORT leave it where it was.
        &["MULTI"],
        &["SELECT", "5"],
        &["SET", "t", "five"],
        &["EXEC"],
        &["GET", "t"],
        &["MULTI"],
        &["SELECT", "6"],
        &["DISCARD"],
        &["GET", "t"],
        &["MULTI"],
        &["SELECT", "7"],
        &["NOSUCHCOMMAND"],
        &["EXEC"],
        &["GET", "t"],
        &["SELECT", "0"],
        &["GET", "t"],
        // WATCH sees its own database's key.
        &["SELECT", "5"],
        &["WATCH", "t"],
        &["SELECT", "0"],
        &["SET", "t", "db0"],
        &["SELECT", "5"],
        &["MULTI"],
        &["GET", "t"],
        &["EXEC"],
        // A script's SELECT is its own; its keys are the caller's database's.
        &[
            "EVAL",
            "redis.call('select', 8); redis.call('set', KEYS[1], 'eight'); return redis.call('get', KEYS[1])",
            "1",
            "s",
        ],
        &["GET", "s"],
        &["EVAL", "return redis.call('get', KEYS[1])", "1", "t"],
        &["SELECT", "8"],
        &["GET", "s"],
        &["EVAL", "return {KEYS[1], redis.call('exists', KEYS[1])}", "1", "s"],
        // RESET goes back to database 0.
        &["RESET"],
        &["GET", "t"],
        &["FLUSHALL"],
        &["SELECT", "8"],
        &["DBSIZE"],
    ]);
}

#[test]
fn keyspace_walks_see_their_own_database() {
    let (_server, port) = quicksilver(&["-t", "2"]);
    let mut client = connect(port);
    for (db, count) in [("0", 3), ("4", 5)] {
        assert_eq!(one(&mut client, &frame(&["SELECT", db])), b"+OK\r\n");
        for i in 0..count {
            assert_eq!(one(&mut client, &frame(&["SET", &format!("key:{db}:{i}"), "v"])), b"+OK\r\n");
        }
    }
    let mut seen = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let reply = String::from_utf8(one(&mut client, &frame(&["SCAN", &cursor]))).expect("text");
        let lines: Vec<&str> = reply.split("\r\n").collect();
        cursor = lines[2].to_string();
        seen.extend(lines.iter().filter(|line| line.starts_with("key:")).map(|line| line.to_string()));
        if cursor == "0" {
            break;
        }
    }
    seen.sort();
    assert_eq!(seen, (0..5).map(|i| format!("key:4:{i}")).collect::<Vec<_>>());
    let random = String::from_utf8(one(&mut client, &frame(&["RANDOMKEY"]))).expect("text");
    assert!(random.contains("key:4:"), "{random}");
    let info = String::from_utf8(one(&mut client, &frame(&["INFO", "keyspace"]))).expect("text");
    assert!(info.contains("db0:keys=3,") && info.contains("db4:keys=5,"), "{info}");
    let clients = String::from_utf8(one(&mut client, &frame(&["CLIENT", "INFO"]))).expect("text");
    assert!(clients.contains(" db=4 "), "{clients}");
    assert_eq!(one(&mut client, &frame(&["DBSIZE"])), b":5\r\n");
    assert_eq!(one(&mut client, &frame(&["SELECT", "0"])), b"+OK\r\n");
    assert_eq!(one(&mut client, &frame(&["DBSIZE"])), b":3\r\n");
    let keys = String::from_utf8(one(&mut client, &frame(&["KEYS", "*"]))).expect("text");
    assert!(keys.starts_with("*3\r\n") && !keys.contains("key:4:"), "{keys}");
    // SWAPDB: each database's keys are the other's, for every walk.
    assert_eq!(one(&mut client, &frame(&["SWAPDB", "0", "4"])), b"+OK\r\n");
    assert_eq!(one(&mut client, &frame(&["DBSIZE"])), b":5\r\n");
    let keys = String::from_utf8(one(&mut client, &frame(&["KEYS", "*"]))).expect("text");
    assert!(keys.starts_with("*5\r\n") && keys.contains("key:4:"), "{keys}");
    let info = String::from_utf8(one(&mut client, &frame(&["INFO", "keyspace"]))).expect("text");
    assert!(info.contains("db0:keys=5,") && info.contains("db4:keys=3,"), "{info}");
}

#[test]
fn memcached_protocols_see_database_0() {
    let (server, port) = quicksilver(&[]);
    let mut resp = connect(port);
    let mut text = connect(server.port);
    text.send(b"set shared 0 0 4\r\ntext\r\n");
    assert_eq!(text.read_until(b"\r\n"), b"STORED\r\n");
    assert_eq!(one(&mut resp, &frame(&["GET", "shared"])), b"$4\r\ntext\r\n");
    assert_eq!(one(&mut resp, &frame(&["SELECT", "1"])), b"+OK\r\n");
    assert_eq!(one(&mut resp, &frame(&["GET", "shared"])), b"$-1\r\n");
    assert_eq!(one(&mut resp, &frame(&["SET", "only1", "x"])), b"+OK\r\n");
    text.send(b"get only1\r\n");
    assert_eq!(text.read_until(b"END\r\n"), b"END\r\n");
}

#[test]
fn redis_py_with_a_database_works_as_against_redis_server() {
    let redis = Redis::start();
    redis_py_script("redis_py_databases.py", redis.port, "redis-server");
    for workers in ["1", "4"] {
        let (_server, port) = quicksilver(&["-t", workers]);
        redis_py_script("redis_py_databases.py", port, &format!("quicksilver -t {workers}"));
    }
}

/// Keys as long as Redis clients send them: past memcached's 250 bytes, up to 64 KiB, in any
/// database, answered as redis-server answers them (one worker and four); memcached's
/// protocols still refuse a key over 250 bytes.
#[test]
fn long_keys_are_stored_as_redis_server_stores_them() {
    let keys: Vec<String> = [251, 255, 1000, 65536].iter().map(|&n| "k".repeat(n - 1) + "!").collect();
    let mut lines: Vec<Vec<String>> = Vec::new();
    let words = |line: &[&str]| line.iter().map(|word| word.to_string()).collect::<Vec<_>>();
    for (i, key) in keys.iter().enumerate() {
        lines.push(words(&["SET", key, &format!("value {i}"), "EX", "100"]));
        lines.push(words(&["GET", key]));
        lines.push(words(&["APPEND", key, "+"]));
        lines.push(words(&["STRLEN", key]));
        lines.push(words(&["TTL", key]));
    }
    lines.push(words(&["MGET", &keys[0], &keys[3], "short"]));
    lines.push(words(&["EXISTS", &keys[1], &keys[2]]));
    lines.push(words(&["RENAME", &keys[3], "renamed"]));
    lines.push(words(&["GET", "renamed"]));
    lines.push(words(&["RENAME", "renamed", &keys[3]]));
    lines.push(words(&["INCR", &keys[2]]));
    lines.push(words(&["SET", &keys[2], "41"]));
    lines.push(words(&["INCR", &keys[2]]));
    lines.push(words(&["SELECT", "2"]));
    lines.push(words(&["GET", &keys[3]]));
    lines.push(words(&["SET", &keys[3], "in two"]));
    lines.push(words(&["KEYS", "k*!"]));
    lines.push(words(&["MOVE", &keys[3], "0"]));
    lines.push(words(&["SELECT", "0"]));
    lines.push(words(&["GET", &keys[3]]));
    lines.push(words(&["DEL", &keys[0], &keys[1], &keys[2]]));
    lines.push(words(&["DBSIZE"]));
    let borrowed: Vec<Vec<&str>> =
        lines.iter().map(|line| line.iter().map(String::as_str).collect()).collect();
    let lines: Vec<&[&str]> = borrowed.iter().map(Vec::as_slice).collect();
    same_single_replies(&lines);
    let (server, port) = quicksilver(&[]);
    let mut resp = connect(port);
    assert_eq!(one(&mut resp, &frame(&["SET", &keys[0], "v"])), b"+OK\r\n");
    let mut text = connect(server.port);
    text.send(format!("get {}\r\n", keys[0]).as_bytes());
    assert_eq!(text.read_until(b"\r\n"), b"CLIENT_ERROR bad command line format\r\n");
}

#[test]
fn swapdb_exchanges_databases_as_redis_server_does() {
    // One connection's view, then a second connection's (in the other database) and a
    // watcher's: SWAPDB moves every connection's view at once, and touches watched keys that
    // either database holds.
    same_single_replies(&[
        &["SET", "a", "in0"],
        &["SELECT", "1"],
        &["SET", "a", "in1"],
        &["SET", "b", "only1"],
        &["SWAPDB", "0", "1"],
        &["GET", "a"],
        &["GET", "b"],
        &["DBSIZE"],
        &["SELECT", "0"],
        &["GET", "a"],
        &["GET", "b"],
        &["DBSIZE"],
        &["KEYS", "b*"],
        &["MOVE", "a", "1"],
        &["MOVE", "b", "1"],
        &["SELECT", "1"],
        &["GET", "b"],
        &["SWAPDB", "1", "1"],
        &["SWAPDB", "x", "1"],
        &["SWAPDB", "1", "y"],
        &["SWAPDB", "0", "16"],
        &["SWAPDB", "0"],
        &["MULTI"],
        &["SWAPDB", "0", "1"],
        &["DBSIZE"],
        &["EXEC"],
        &["DBSIZE"],
        &["FLUSHDB"],
        &["SELECT", "0"],
        &["DBSIZE"],
        &["SWAPDB", "0", "1"],
        &["FLUSHALL"],
    ]);
    for workers in ["1", "4"] {
        let redis = Redis::start();
        let (_server, port) = quicksilver(&["-t", workers]);
        let run = |server: u16| -> Vec<Vec<u8>> {
            let (mut watcher, mut other) = (connect(server), connect(server));
            let mut replies = Vec::new();
            let mut ask =
                |client: &mut common::Client, words: &[&str]| replies.push(one(client, &frame(words)));
            ask(&mut other, &["FLUSHALL"]);
            // A watched key that exists: the swap writes it.
            ask(&mut watcher, &["SET", "x", "30"]);
            ask(&mut watcher, &["WATCH", "x"]);
            ask(&mut other, &["SWAPDB", "0", "1"]);
            ask(&mut watcher, &["MULTI"]);
            ask(&mut watcher, &["PING"]);
            ask(&mut watcher, &["EXEC"]);
            // One missing here that the other database holds: written too.
            ask(&mut watcher, &["GET", "x"]);
            ask(&mut watcher, &["WATCH", "x"]);
            ask(&mut other, &["SWAPDB", "0", "1"]);
            ask(&mut watcher, &["MULTI"]);
            ask(&mut watcher, &["GET", "x"]);
            ask(&mut watcher, &["EXEC"]);
            // Neither holds it, or another pair swapped: not written.
            ask(&mut watcher, &["WATCH", "nothing", "x"]);
            ask(&mut other, &["SWAPDB", "2", "3"]);
            ask(&mut watcher, &["MULTI"]);
            ask(&mut watcher, &["GET", "x"]);
            ask(&mut watcher, &["EXEC"]);
            ask(&mut other, &["SELECT", "1"]);
            ask(&mut other, &["DBSIZE"]);
            ask(&mut other, &["SWAPDB", "0", "1"]);
            ask(&mut other, &["DBSIZE"]);
            replies
        };
        let (want, got) = (run(redis.port), run(port));
        replies_match(&want, &got, &format!("with {workers} workers"));
    }
}
