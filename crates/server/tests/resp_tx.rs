//! Redis transactions end to end (issue 76): MULTI/EXEC/DISCARD/WATCH as redis-server 7.0
//! answers them, compared byte for byte, including a watched key another connection writes;
//! a memcached write of a watched key; EXEC over keys of several workers seen whole by every
//! reader (`-t 4`: no MGET ever sees half of a transaction or of an MSET); and a client that
//! queues without end, bounded by the client memory budget.

mod common;

use common::resp::{
    call, connect, frame, no_reader_sees_half, one, quicksilver, replies_match, same_single_replies, Redis,
};

#[test]
fn transactions_answer_as_redis_server_does() {
    same_single_replies(&[
        &["EXEC"],
        &["DISCARD"],
        &["MULTI"],
        &["MULTI"],
        &["WATCH", "x"],
        &["SET", "{a}1", "1"],
        &["NOSUCH"],
        &["GET"],
        &["EXEC"],
        &["EXISTS", "{a}1"],
        &["MULTI"],
        &["SET", "a", "1"],
        &["INCR", "a"],
        &["SET", "b", "x"],
        &["INCR", "b"],
        &["SET", "a", "1", "EX", "abc"],
        &["MSET", "a", "5", "b", "6", "c", "7"],
        &["MGET", "a", "b", "c"],
        &["DEL", "a", "c"],
        &["EXEC"],
        &["MULTI"],
        &["DISCARD"],
        &["MULTI"],
        &["EXEC"],
        &["WATCH"],
        &["UNWATCH"],
    ]);
}

#[test]
fn watched_keys_abort_exec_when_written_as_redis_server_does() {
    for workers in ["1", "4"] {
        let redis = Redis::start();
        let (_server, port) = quicksilver(&["-t", workers]);
        for server in [redis.port, port] {
            call(&mut connect(server), &frame(&["FLUSHALL"]));
        }
        let run = |server: u16| -> Vec<Vec<u8>> {
            let (mut watcher, mut writer) = (connect(server), connect(server));
            let mut replies = Vec::new();
            let mut ask =
                |client: &mut common::Client, words: &[&str]| replies.push(one(client, &frame(words)));
            // Written by another connection: EXEC runs nothing.
            ask(&mut watcher, &["SET", "k", "1"]);
            ask(&mut watcher, &["WATCH", "k", "other"]);
            ask(&mut writer, &["SET", "k", "1"]);
            ask(&mut watcher, &["MULTI"]);
            ask(&mut watcher, &["INCR", "k"]);
            ask(&mut watcher, &["EXEC"]);
            // Not written: it runs, and the watch ends with it.
            ask(&mut watcher, &["WATCH", "k"]);
            ask(&mut watcher, &["MULTI"]);
            ask(&mut watcher, &["INCR", "k"]);
            ask(&mut watcher, &["EXEC"]);
            ask(&mut writer, &["SET", "k", "9"]);
            ask(&mut watcher, &["MULTI"]);
            ask(&mut watcher, &["GET", "k"]);
            ask(&mut watcher, &["EXEC"]);
            // Absent when watched, created and deleted again: still a write.
            ask(&mut watcher, &["WATCH", "gone"]);
            ask(&mut writer, &["SET", "gone", "1"]);
            ask(&mut writer, &["DEL", "gone"]);
            ask(&mut watcher, &["MULTI"]);
            ask(&mut watcher, &["PING"]);
            ask(&mut watcher, &["EXEC"]);
            // A write refused is none; an EXPIRE is one; FLUSHALL of an absent key is none.
            ask(&mut watcher, &["WATCH", "k", "absent"]);
            ask(&mut writer, &["INCRBY", "k", "x"]);
            ask(&mut writer, &["FLUSHALL"]);
            ask(&mut watcher, &["MULTI"]);
            ask(&mut watcher, &["PING"]);
            ask(&mut watcher, &["EXEC"]);
            ask(&mut writer, &["SET", "e", "1"]);
            ask(&mut watcher, &["WATCH", "e"]);
            ask(&mut writer, &["EXPIRE", "e", "100"]);
            ask(&mut watcher, &["MULTI"]);
            ask(&mut watcher, &["PING"]);
            ask(&mut watcher, &["EXEC"]);
            // DISCARD unwatches.
            ask(&mut watcher, &["WATCH", "e"]);
            ask(&mut writer, &["SET", "e", "2"]);
            ask(&mut watcher, &["MULTI"]);
            ask(&mut watcher, &["DISCARD"]);
            ask(&mut watcher, &["MULTI"]);
            ask(&mut watcher, &["GET", "e"]);
            ask(&mut watcher, &["EXEC"]);
            replies
        };
        let (want, got) = (run(redis.port), run(port));
        replies_match(&want, &got, &format!("with {workers} workers"));
    }
}

#[test]
fn a_memcached_write_of_a_watched_key_aborts_exec() {
    let (server, port) = quicksilver(&["-t", "2"]);
    let mut redis = connect(port);
    assert_eq!(one(&mut redis, &frame(&["SET", "shared", "1"])), b"+OK\r\n");
    assert_eq!(one(&mut redis, &frame(&["WATCH", "shared"])), b"+OK\r\n");
    let mut memcached = server.connect();
    common::set(&mut memcached, "shared", b"2");
    assert_eq!(one(&mut redis, &frame(&["MULTI"])), b"+OK\r\n");
    assert_eq!(one(&mut redis, &frame(&["GET", "shared"])), b"+QUEUED\r\n");
    assert_eq!(one(&mut redis, &frame(&["EXEC"])), b"*-1\r\n", "the text protocol's set is a write");
}

/// Writers run `MULTI / INCR a / INCR b / EXEC` and `MSET a x b x` over pairs of keys that
/// live on different workers while readers run `MGET a b`: a reader never sees the two differ.
#[test]
fn no_reader_sees_half_of_a_transaction_across_workers() {
    no_reader_sees_half(|client, n, a, b| {
        if n % 4 < 2 {
            let mut batch = frame(&["MULTI"]);
            batch.extend(frame(&["INCR", a]));
            batch.extend(frame(&["INCR", b]));
            batch.extend(frame(&["EXEC"]));
            let reply = call(client, &batch);
            assert!(reply.starts_with(b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:"), "{reply:?}");
        } else {
            let value = n.to_string();
            assert_eq!(call(client, &frame(&["MSET", a, &value, b, &value])), b"+OK\r\n");
        }
    });
}

#[test]
fn a_transaction_queued_without_end_is_bounded_by_the_client_memory_budget() {
    // -m 8: a client memory budget of 4 MiB.
    let (_server, port) = quicksilver(&["-t", "2", "-m", "8"]);
    let mut client = connect(port);
    assert_eq!(one(&mut client, &frame(&["MULTI"])), b"+OK\r\n");
    let value = "v".repeat(64 << 10);
    let mut refused = false;
    for n in 0..200 {
        let reply = one(&mut client, &frame(&["SET", &format!("k{n}"), &value]));
        if reply.starts_with(b"-OOM") {
            refused = true;
            break;
        }
        assert_eq!(reply, b"+QUEUED\r\n");
    }
    assert!(refused, "12.5 MiB queued under a 4 MiB budget");
    assert!(one(&mut client, &frame(&["EXEC"])).starts_with(b"-EXECABORT"));
    // The queue's bytes went back with it: the budget serves another client's large set.
    let mut other = connect(port);
    let big = "w".repeat(256 << 10);
    assert_eq!(one(&mut other, &frame(&["SET", "big", &big])), b"+OK\r\n");
    assert_eq!(one(&mut client, &frame(&["PING"])), b"+PONG\r\n");
}

/// redis-py's transactions (Django's set_many, WATCH-based optimistic locking under four
/// threads), against redis-server and against quicksilver with four workers.
#[test]
fn redis_py_transactions_work_as_against_redis_server() {
    let redis = Redis::start();
    let (_server, port) = quicksilver(&["-t", "4"]);
    for (name, port) in [("redis-server", redis.port), ("quicksilver", port)] {
        common::resp::redis_py_script("redis_py_transactions.py", port, name);
    }
}

#[test]
fn out_of_memory_refuses_what_may_use_memory_as_redis_server_does() {
    // maxmemory below what the server holds: redis-server refuses every command that may use
    // memory, as quicksilver does for a limit below its smallest cache. Quicksilver keeps its
    // items meanwhile, as redis-server's noeviction does (its allkeys-lru would evict them all).
    let redis = Redis::start();
    call(&mut connect(redis.port), &frame(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]));
    let (_server, port) = quicksilver(&["-t", "2"]);
    let run = |server: u16| -> Vec<Vec<u8>> {
        let (mut client, mut admin) = (connect(server), connect(server));
        let mut replies = Vec::new();
        let mut ask = |client: &mut common::Client, words: &[&str]| replies.push(one(client, &frame(words)));
        ask(&mut admin, &["FLUSHALL"]);
        ask(&mut client, &["SET", "x", "1"]);
        ask(&mut client, &["MULTI"]);
        ask(&mut client, &["SET", "queued", "1"]);
        ask(&mut admin, &["CONFIG", "SET", "maxmemory", "1"]);
        ask(&mut client, &["EXEC"]);
        for words in [
            &["SET", "y", "1"][..],
            &["GET", "x"],
            &["INCR", "n"],
            &["APPEND", "x", "more"],
            &["LPUSH", "l", "a"],
            &["HSET", "h", "f", "v"],
            &["EXPIRE", "x", "100"],
            &["MULTI"],
            &["SET", "a", "1"],
            &["GET", "x"],
            &["EXEC"],
            &["MULTI"],
            &["GET", "x"],
            &["EXEC"],
            &["EVAL", "return redis.call('set', KEYS[1], '2')", "1", "x"],
            &["EVAL", "return redis.call('get', KEYS[1])", "1", "x"],
            &["EVAL", "#!lua\nreturn 1", "0"],
            &["EVAL", "#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])", "1", "x"],
            &["EVAL", "#!lua flags=allow-oom\nreturn redis.call('set', KEYS[1], '3')", "1", "x"],
            &["DEL", "x"],
        ] {
            ask(&mut client, words);
        }
        ask(&mut admin, &["CONFIG", "SET", "maxmemory", "0"]);
        ask(&mut client, &["SET", "y", "2"]);
        ask(&mut client, &["GET", "y"]);
        replies
    };
    let (want, got) = (run(redis.port), run(port));
    replies_match(&want, &got, "");
}
