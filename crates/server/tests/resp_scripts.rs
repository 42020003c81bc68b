//! Redis scripts end to end (issue 76): EVAL, EVALSHA and SCRIPT as redis-server 7.0 answers
//! them, compared byte for byte with one worker and with four (a script's declared keys then
//! live on other workers and are borrowed for its step); no reader ever sees half of a
//! script's writes across workers; a script past its memory is stopped with an error and the
//! server serves on; a script running too long answers other workers' clients BUSY and is
//! stopped by SCRIPT KILL from another worker, unless it has written; redis-py's Lock and
//! registered scripts work as against redis-server.

mod common;

use common::resp::{
    call, connect, frame, no_reader_sees_half, one, quicksilver, redis_py_script, same_single_replies, Redis,
};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn scripts_answer_as_redis_server_does() {
    const RELEASE: &str =
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
    same_single_replies(&[
        &["SET", "k", "v"],
        &["EVAL", "return redis.call('get', KEYS[1])", "1", "k"],
        &["EVAL", "return redis.call('incr', KEYS[1])", "1", "k"],
        &["EVAL", "return redis.pcall('incr', KEYS[1])", "1", "k"],
        &["EVAL", "return {KEYS[1], KEYS[2], ARGV[1], {1, 2.9, true, false}, nil, 5}", "2", "a", "b", "c"],
        &["EVAL", "return redis.call('mset', KEYS[1], ARGV[1], KEYS[2], ARGV[2])", "2", "x1", "y1", "1", "2"],
        &["EVAL", "return redis.call('mget', KEYS[1], KEYS[2])", "2", "x1", "y1"],
        &["EVAL", "return redis.call('del', KEYS[1], KEYS[2], KEYS[3])", "3", "x1", "y1", "k"],
        &["EVAL", "return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])", "1", "lock", "token", "60000"],
        &["EVAL", RELEASE, "1", "lock", "other"],
        &["EVAL", RELEASE, "1", "lock", "token"],
        &["EVAL", RELEASE, "1", "lock", "token"],
        &["SCRIPT", "LOAD", RELEASE],
        &["SCRIPT", "EXISTS", "8d6e3bfa2a8d7ad1bc2abac2e6d4c3ba1be2b1d3", "ffff"],
        &["EVALSHA", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", "0"],
        &["EVAL", "return 1", "0"],
        &["EVALSHA", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", "0"],
        &["EVALSHA_RO", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"],
        &["SCRIPT", "FLUSH"],
        &["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"],
        &["EVALSHA", "abc", "0"],
        &["EVAL", "return 1", "-1"],
        &["EVAL", "return 1", "2", "a"],
        &["EVAL", "return 1", "x"],
        &["EVAL", "return 1"],
        &["EVAL", "return syntax error", "0"],
        &["EVAL", "x = 1", "0"],
        &["EVAL", "return newproxy(true)", "0"],
        &["EVAL", "return redis.call('set', KEYS[1], 1.5, 'PX', 2^20)", "1", "n"],
        &["EVAL", "return {redis.call('get', KEYS[1]), redis.pcall('nosuch')}", "1", "n"],
        &["EVAL", "return coroutine.wrap(function() return redis.call('get', KEYS[1]) end)()", "1", "n"],
        &["EVAL", "return undefined_name", "0"],
        &["EVAL", "string.rep = nil", "0"],
        &["EVAL", "error('boom')", "0"],
        &["EVAL", "error({err='CUSTOM failure'})", "0"],
        &["EVAL", "return redis.call('nosuch')", "0"],
        &["EVAL", "return redis.call('get')", "0"],
        &["EVAL", "return redis.call('multi')", "0"],
        &["EVAL", "return redis.call('eval', 'return 1', '0')", "0"],
        &["EVAL", "return redis.call('set', KEYS[1], {})", "1", "k"],
        &["EVAL", "return redis.call()", "0"],
        &["EVAL", "return redis.pcall()", "0"],
        &["EVAL_RO", "return redis.call('set', KEYS[1], 'v')", "1", "k"],
        &["EVAL", "#!lua flags=no-writes\nreturn redis.call('set', KEYS[1], 'v')", "1", "k"],
        &["EVAL", "#!lua\nreturn redis.call('set', KEYS[1], 'v')", "1", "k"],
        &["EVAL", "#!python\nreturn 1", "0"],
        &["EVAL", "return redis.status_reply('FINE')", "0"],
        &["EVAL", "return redis.error_reply('BAD thing')", "0"],
        &["EVAL", "return redis.error_reply('NOCODE')", "0"],
        &["EVAL", "return {err='ERR x\\r\\ny'}", "0"],
        &["EVAL", "return {double=1.5}", "0"],
        &["EVAL", "return redis.sha1hex('')", "0"],
        &[
            "EVAL",
            "local ok, err = pcall(function() redis.call('incr', KEYS[1]) end) return err",
            "1",
            "lock",
        ],
        &["EVAL", "return redis.call('set', KEYS[1], 1.5)", "1", "f"],
        &["EVAL", "return redis.call('incrbyfloat', KEYS[1], 0.25)", "1", "f"],
        &["EVAL", "redis.setresp(3) return redis.call('get', KEYS[1])", "1", "missing"],
        &["EVAL", "redis.setresp(4)", "0"],
        &["EVAL", "return bit.bxor(5, 3) .. cjson.encode({1, 'a'})", "0"],
        &["EVAL", "return cjson.decode('{\"a\":[1,2]}').a[2]", "0"],
        &["EVAL", "return loadstring('return 7')()", "0"],
        &["EVAL", "return tostring(print)", "0"],
        &["EVAL", "local t = {} for i = 1, 5 do t[i] = redis.call('incr', KEYS[1]) end return t", "1", "n"],
        &["EVAL", "return redis.call('exists', KEYS[1], KEYS[2])", "2", "n", "missing"],
        &["SCRIPT", "KILL"],
        &["SCRIPT", "DEBUG", "x"],
        &["SCRIPT", "LOAD"],
        &["SCRIPT", "nosuch"],
        &["MULTI"],
        &["EVAL", "return redis.call('incr', KEYS[1])", "1", "n"],
        &["EVAL", "return redis.call('get', KEYS[1])", "1", "n"],
        &["EXEC"],
    ]);
}

#[test]
fn resp3_connections_get_resp3_replies_from_scripts() {
    same_single_replies(&[
        &["HELLO", "3"],
        &["EVAL", "return {map={a=1}}", "0"],
        &["EVAL", "return {set={x=true}}", "0"],
        &["EVAL", "return {double=2.5}", "0"],
        &["EVAL", "return nil", "0"],
        &["EVAL", "return false", "0"],
        &["EVAL", "redis.setresp(3) return false", "0"],
        &["EVAL", "redis.setresp(3) return true", "0"],
        &["EVAL", "redis.setresp(3) local v = redis.call('get', KEYS[1]) return v == nil", "1", "missing"],
        &["EVAL", "return {big_number='123456789012345678901234567890'}", "0"],
    ]);
}

#[test]
fn no_reader_sees_half_of_a_script_across_workers() {
    const BOTH: &str = "redis.call('incr', KEYS[1]) return redis.call('incr', KEYS[2])";
    no_reader_sees_half(|client, _, a, b| {
        let reply = call(client, &frame(&["EVAL", BOTH, "2", a, b]));
        assert!(reply.starts_with(b":"), "{}", String::from_utf8_lossy(&reply));
    });
}

#[test]
fn undeclared_keys_are_served_and_refused_only_inside_exec() {
    let script = "redis.call('get', 'probe') return redis.call('set', ARGV[1], 'v')";
    for workers in ["1", "4"] {
        let (_server, port) = quicksilver(&["-t", workers]);
        let mut client = connect(port);
        // Alone, a script reaching another worker's key before it writes runs again over
        // every partition.
        for n in 0..16 {
            let key = format!("u{n}");
            assert_eq!(call(&mut client, &frame(&["EVAL", script, "0", &key])), b"+OK\r\n", "{workers}");
            assert_eq!(call(&mut client, &frame(&["GET", &key])), b"$1\r\nv\r\n");
        }
        let keys = (0..16).map(|n| format!("u{n}")).collect::<Vec<_>>().join(" ");
        let everything = "return #redis.call('keys', '*') .. ':' .. redis.call('dbsize')";
        assert_eq!(call(&mut client, &frame(&["EVAL", everything, "0"])), b"$5\r\n16:16\r\n", "{keys}");
    }
    // Inside EXEC the step holds what the transaction names: another worker's key is refused.
    let (_server, port) = quicksilver(&["-t", "4"]);
    let mut client = connect(port);
    let mut batch = frame(&["MULTI"]);
    for n in 0..16 {
        batch.extend(frame(&["EVAL", script, "0", &format!("u{n}")]));
    }
    batch.extend(frame(&["EXEC"]));
    let reply = String::from_utf8(call(&mut client, &batch)).expect("text");
    assert!(reply.contains("-ERR Script attempted to access a key another worker owns"), "{reply}");
}

#[test]
fn a_script_past_its_memory_fails_and_the_server_serves_on() {
    let (_server, port) = quicksilver(&["-t", "1"]);
    let mut client = connect(port);
    let greedy = "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 64) .. i end return #t";
    let reply = String::from_utf8(call(&mut client, &frame(&["EVAL", greedy, "0"]))).expect("text");
    assert!(reply.starts_with("-OOM the script ran out of memory"), "{reply}");
    assert_eq!(call(&mut client, &frame(&["EVAL", "return 1", "0"])), b":1\r\n");
    let info = String::from_utf8(call(&mut client, &frame(&["INFO", "memory"]))).expect("text");
    let lua: u64 = info
        .lines()
        .find_map(|line| line.strip_prefix("used_memory_lua:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("used_memory_lua");
    assert!(lua > 0 && lua <= 64 << 20, "{lua}");
}

/// SCRIPT KILL on `stream`, once; `None` when no answer came within a moment (the
/// connection shares the busy worker: its answer comes once the script ends).
fn kill(stream: &mut TcpStream) -> Option<String> {
    stream.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
    stream.write_all(&frame(&["SCRIPT", "KILL"])).expect("send");
    let mut reply = [0u8; 512];
    match stream.read(&mut reply) {
        Ok(n) if n > 0 => Some(String::from_utf8_lossy(&reply[..n]).into_owned()),
        _ => None,
    }
}

/// SCRIPT KILL from a connection another worker serves, once a script runs: connections are
/// opened until one answers other than NOTBUSY; that answer, and the connection.
fn kill_from_another_worker(port: u16) -> (String, TcpStream) {
    let started = Instant::now();
    let mut stuck = Vec::new();
    while started.elapsed() < Duration::from_secs(120) {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        loop {
            match kill(&mut stream) {
                Some(reply) if reply.starts_with("-NOTBUSY") => continue,
                Some(reply) => return (reply, stream),
                None => break,
            }
        }
        stuck.push(stream);
    }
    panic!("no connection reached another worker");
}

#[test]
fn a_long_script_answers_busy_elsewhere_and_is_killed_unless_it_wrote() {
    let (_server, port) = quicksilver(&["-t", "2"]);
    let mut setup = connect(port);
    assert_eq!(call(&mut setup, &frame(&["CONFIG", "SET", "lua-time-limit", "50"])), b"+OK\r\n");
    let mut runner = connect(port);
    runner.send(&frame(&["EVAL", "while true do end", "0"]));
    // Kill a script that is not running yet: opened until one reaches the other worker.
    let (reply, mut other) = kill_from_another_worker(port);
    assert_eq!(reply, "+OK\r\n");
    let killed = String::from_utf8(one(&mut runner, b"")).expect("text");
    assert!(killed.starts_with("-ERR Script killed by user with SCRIPT KILL... script: "), "{killed}");
    assert_eq!(one(&mut runner, &frame(&["PING"])), b"+PONG\r\n");
    // Past lua-time-limit, the other worker answers BUSY for the busy worker's keys.
    runner.send(&frame(&["EVAL", "while true do end", "0"]));
    let busy = wait_busy(port);
    assert_eq!(busy, crate_busy());
    let stopped = loop {
        match kill(&mut other).expect("the other worker answers") {
            reply if reply.starts_with("-NOTBUSY") => continue,
            reply => break reply,
        }
    };
    assert_eq!(stopped, "+OK\r\n");
    assert!(one(&mut runner, b"").starts_with(b"-ERR Script killed by user"));
    // A script that wrote runs to its end: SCRIPT KILL cannot stop it.
    // (It writes a key of its own worker, undeclared: a declared key of the other worker, or
    // an undeclared one, which runs it again over every partition, would hold that worker
    // for the script's whole run. Inside EXEC such a key is refused: so one is found.)
    let own = (0..64)
        .map(|n| format!("w{n}"))
        .find(|key| {
            let mut batch = frame(&["MULTI"]);
            batch.extend(frame(&["EVAL", "return redis.call('set', ARGV[1], '1')", "0", key]));
            batch.extend(frame(&["EXEC"]));
            call(&mut runner, &batch).ends_with(b"*1\r\n+OK\r\n")
        })
        .expect("a key of the runner's worker");
    let wrote = format!(
        "redis.call('set', '{own}', '2') local t = redis.call('time')[1] \
         while redis.call('time')[1] - t < 3 do end return 'done'"
    );
    runner.send(&frame(&["EVAL", &wrote, "0"]));
    // Not a deadline: the script has likelier written when the kill comes. A kill that comes
    // before its first write stops it instead (the write is then refused): either way exactly
    // one of the two wins, and the answers agree.
    std::thread::sleep(Duration::from_millis(200));
    let reply = loop {
        match kill(&mut other).expect("the other worker answers") {
            reply if reply.starts_with("-NOTBUSY") => continue,
            reply => break reply,
        }
    };
    let ended = one(&mut runner, b"");
    if reply == "+OK\r\n" {
        assert!(ended.starts_with(b"-ERR Script killed by user"), "{}", String::from_utf8_lossy(&ended));
    } else {
        assert!(reply.starts_with("-UNKILLABLE Sorry the script already executed write commands"), "{reply}");
        assert_eq!(ended, b"$4\r\ndone\r\n");
    }
}

/// Once a script runs past lua-time-limit, a write of a key its worker owns, sent from
/// another worker, is answered BUSY: that answer. A SET of each key goes on a connection of
/// its own, so one handed to the busy worker before its script counted as busy waits there,
/// and its connection is left.
fn wait_busy(port: u16) -> Vec<u8> {
    let started = Instant::now();
    let mut left = Vec::new();
    for n in 0u32.. {
        assert!(started.elapsed() < Duration::from_secs(120), "no BUSY");
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        // Not a deadline on the answer: a connection the busy worker took waits for the
        // script, and the next one is tried (any other worker answers BUSY at once).
        stream.set_read_timeout(Some(Duration::from_secs(1))).expect("timeout");
        stream.write_all(&frame(&["SET", &format!("k{}", n % 32), "v"])).expect("send");
        let mut reply = [0u8; 512];
        match stream.read(&mut reply) {
            Ok(read @ 1..) if reply.starts_with(b"-BUSY") => return reply[..read].to_vec(),
            // Answered (its key is another worker's, or not busy yet): closed again.
            Ok(1..) => {}
            // Waiting at the busy worker: left open, so the wait is not cut short.
            _ => left.push(stream),
        }
    }
    unreachable!()
}

#[test]
fn a_long_script_answers_every_client_busy_as_redis_server_does() {
    // Past lua-time-limit, redis-server answers every client BUSY but for what it lets
    // through (MULTI, DISCARD, SCRIPT KILL...); quicksilver does on every worker, the script's
    // own among them (one worker: all of these connections share it). The replies are
    // redis-server 7.0.15's to the same requests, written out (Redis's own unit/multi and
    // unit/scripting tests of a script past its limit run in CI too).
    const BUSY: &str =
        "-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
    const EXECABORT: &str = "-EXECABORT Transaction discarded because of: BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
    let want = [
        "+OK\r\n",
        "+OK\r\n",
        "+OK\r\n",
        "+QUEUED\r\n",
        BUSY,
        BUSY,
        EXECABORT,
        "+OK\r\n",
        BUSY,
        "-ERR unknown command 'NOSUCH', with args beginning with: \r\n",
        "+OK\r\n",
        "-ERR DISCARD without MULTI\r\n",
        BUSY,
        EXECABORT,
        "+OK\r\n",
        "$1\r\n1\r\n",
        "+PONG\r\n",
        "+PONG\r\n",
    ];
    for workers in ["1", "4"] {
        let (_server, port) = quicksilver(&["-t", workers]);
        let (mut admin, mut tx, mut runner) = (connect(port), connect(port), connect(port));
        let mut replies = vec![
            one(&mut admin, &frame(&["CONFIG", "SET", "lua-time-limit", "20"])),
            one(&mut tx, &frame(&["SET", "xx", "1"])),
            one(&mut tx, &frame(&["MULTI"])),
            one(&mut tx, &frame(&["INCR", "xx"])),
        ];
        // A script that catches the kill's error: its end comes at its next instruction outside
        // the pcall (redis-server's, at its next line).
        let script = "local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end";
        runner.send(&frame(&["EVAL", script, "0"]));
        // Until the script is past its limit: BUSY once it is.
        let busy = loop {
            let reply = one(&mut admin, &frame(&["PING"]));
            if reply != b"+PONG\r\n" {
                break reply;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        replies.push(busy);
        for words in [
            &["INCR", "xx"][..],
            &["EXEC"],
            &["MULTI"],
            &["GET", "xx"],
            &["NOSUCH"],
            &["DISCARD"],
            &["DISCARD"],
            &["SET", "yy", "1"],
            &["EXEC"],
        ] {
            replies.push(one(&mut tx, &frame(words)));
        }
        replies.push(one(&mut admin, &frame(&["SCRIPT", "KILL"])));
        let killed = one(&mut runner, b"");
        assert!(
            killed.starts_with(b"-ERR Script killed by user with SCRIPT KILL..."),
            "{}",
            String::from_utf8_lossy(&killed)
        );
        replies.push(one(&mut tx, &frame(&["GET", "xx"])));
        replies.push(one(&mut admin, &frame(&["PING"])));
        replies.push(one(&mut runner, &frame(&["PING"])));
        for (at, (want, got)) in want.iter().zip(&replies).enumerate() {
            assert_eq!(String::from_utf8_lossy(got), *want, "reply {at} with {workers} workers");
        }
    }
}

#[test]
fn sigterm_stops_a_server_whose_only_worker_runs_a_script_without_end() {
    let (server, port) = quicksilver(&["-t", "1"]);
    let mut runner = connect(port);
    runner.send(&frame(&["EVAL", "while true do end", "0"]));
    // Not a deadline: the script is likelier under way when the signal comes.
    std::thread::sleep(Duration::from_millis(200));
    assert!(server.terminate().success());
}

fn crate_busy() -> Vec<u8> {
    b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n".to_vec()
}

#[test]
fn redis_py_locks_and_scripts_work_as_against_redis_server() {
    let redis = Redis::start();
    redis_py_script("redis_py_scripts.py", redis.port, "redis-server");
    for workers in ["1", "4"] {
        let (_server, port) = quicksilver(&["-t", workers]);
        redis_py_script("redis_py_scripts.py", port, &format!("quicksilver -t {workers}"));
    }
}
