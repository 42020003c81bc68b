//! The Redis protocol listener (`-l proto[resp]:...`) against redis-server 7.0 on loopback:
//! the same requests to both, the replies compared byte for byte.

mod common;

use common::resp::{call, connect, frame, quicksilver, same_replies, same_replies_after, Redis};
use common::{free_port, Client, ServerProcess};
use std::io::Read;
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn strings_answer_as_redis_server_does() {
    let requests: Vec<Vec<u8>> = [
        &["SET", "s1", "value one"][..],
        &["GET", "s1"],
        &["get", "missing"],
        &["SET", "s1", "other", "NX"],
        &["SET", "s2", "v", "XX"],
        &["SET", "s1", "v2", "XX"],
        &["GET", "s1"],
        &["SET", "s3", "v", "EX", "100"],
        &["SET", "s3", "v", "ex", "100", "EX", "200"],
        &["SET", "s3", "v", "PX", "1500"],
        &["SET", "s3", "v", "EXAT", "4000000000"],
        &["SET", "s3", "v", "PXAT", "4000000000000"],
        &["SET", "s3", "v", "EX", "0"],
        &["SET", "s3", "v", "EX", "-5"],
        &["SET", "s3", "v", "EX", "ten"],
        &["SET", "s3", "v", "EX"],
        &["SET", "s3", "v", "EX", "10", "PX", "10"],
        &["SET", "s3", "v", "NX", "XX"],
        &["SET", "s3", "v", "FOO"],
        &["SET", "s3"],
        &["GET"],
        &["GET", "a", "b"],
        &["SETNX", "n1", "1"],
        &["SETNX", "n1", "2"],
        &["GET", "n1"],
        &["SETEX", "e1", "100", "v"],
        &["SETEX", "e1", "0", "v"],
        &["SETEX", "e1", "x", "v"],
        &["PSETEX", "e2", "1500", "v"],
        &["PSETEX", "e2", "-1", "v"],
        &["GET", "e2"],
        &["EXISTS", "e2"],
        &["EXISTS", "nothing"],
        &["DEL", "e2"],
        &["DEL", "e2"],
        &["UNLINK", "e1"],
    ]
    .iter()
    .map(|args| frame(args))
    .collect();
    same_replies(&requests);
}

#[test]
fn counters_answer_as_redis_server_does() {
    let requests: Vec<Vec<u8>> = [
        &["INCR", "c1"][..],
        &["INCR", "c1"],
        &["INCRBY", "c1", "40"],
        &["INCRBY", "c1", "4x"],
        &["INCRBY", "c1", "99999999999999999999"],
        &["GET", "c1"],
        &["SET", "c2", "abc"],
        &["INCR", "c2"],
        &["DECR", "d1"],
        &["DECR", "d1"],
        &["DECRBY", "d1", "10"],
        &["INCRBY", "d1", "-5"],
        &["DECRBY", "d1", "-20"],
        &["GET", "d1"],
        &["SET", "d2", " 5"],
        &["INCR", "d2"],
        &["SET", "d3", "9223372036854775806"],
        &["INCR", "d3"],
        &["INCR", "d3"],
        &["GET", "d3"],
        &["SET", "d4", "-9223372036854775807"],
        &["DECR", "d4"],
        &["DECR", "d4"],
        &["DECRBY", "d4", "-9223372036854775808"],
        &["DECRBY", "d4", "x"],
        &["SET", "d5", "007"],
        &["INCR", "d5"],
    ]
    .iter()
    .map(|args| frame(args))
    .collect();
    same_replies(&requests);
}

#[test]
fn keys_and_expiry_answer_as_redis_server_does() {
    let requests: Vec<Vec<u8>> = [
        &["FLUSHALL"][..],
        &["SET", "a1", "x"],
        &["FLUSHDB", "SYNC"],
        &["GET", "a1"],
        &["FLUSHALL", "NOW"],
        &["FLUSHALL", "ASYNC", "SYNC"],
        &["DBSIZE", "x"],
        &["APPEND", "ap", "hello"],
        &["APPEND", "ap", " world"],
        &["GET", "ap"],
        &["STRLEN", "ap"],
        &["STRLEN", "nope"],
        &["TYPE", "ap"],
        &["TYPE", "nope"],
        &["APPEND", "ap"],
        &["SET", "m1", "one"],
        &["SET", "m2", "two"],
        &["MGET", "m1", "nope", "m2", "m1"],
        &["MGET"],
        &["EXISTS", "m1", "nope", "m2", "m1"],
        &["TTL", "m1"],
        &["PTTL", "m1"],
        &["TTL", "nope"],
        &["PTTL", "nope"],
        &["EXPIRE", "m1", "100"],
        &["TTL", "m1"],
        &["EXPIRE", "nope", "100"],
        &["EXPIRE", "m1", "x"],
        &["EXPIRE", "m1"],
        &["PEXPIRE", "m2", "50000"],
        &["TTL", "m2"],
        &["EXPIREAT", "m2", "4000000000"],
        &["EXPIRE", "m2", "0"],
        &["EXISTS", "m2"],
        &["PEXPIREAT", "m1", "1000"],
        &["GET", "m1"],
    ]
    .iter()
    .map(|args| frame(args))
    .collect();
    same_replies(&requests);
}

#[test]
fn the_connection_commands_and_refusals_answer_as_redis_server_does() {
    let requests: Vec<Vec<u8>> = [
        &["PING"][..],
        &["ping", "hello there"],
        &["ECHO", "x\r\ny"],
        &["SELECT", "0"],
        &["SELECT", "1"],
        &["SELECT", "x"],
        &["NOSUCH"],
        &["nosuch", "a", "b c", "d\r\ne"],
        &["FLUBBER", &"y".repeat(200), "z"],
    ]
    .iter()
    .map(|args| frame(args))
    .collect();
    same_replies(&requests);
}

#[test]
fn handshakes_and_tool_commands_answer_as_redis_server_does() {
    let requests: Vec<Vec<u8>> = [
        &["HELLO", "2", "x"][..],
        &["HELLO", "two"],
        &["AUTH", "secret"],
        &["AUTH", "default", "anything"],
        &["AUTH", "bob", "secret"],
        &["CLIENT", "SETINFO", "LIB-NAME", "redis-py"],
        &["CLIENT", "NOSUCH", "x"],
        &["CLIENT", "NO-EVICT", "on"],
        &["CLIENT", "NO-EVICT", "maybe"],
        &["CLIENT", "ID", "x"],
        &["CONFIG", "GET", "maxmemory"],
        &["CONFIG", "GET", "MAXMEMORY-policy"],
        &["config", "get", "save"],
        &["CONFIG", "GET", "appendonly"],
        &["CONFIG", "GET", "databases"],
        &["CONFIG", "GET", "no-such-*"],
        &["CONFIG", "GET"],
        &["CONFIG", "SET", "maxmemory", "128mb"],
        &["CONFIG", "SET", "maxmemory", "abc"],
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru", "save", ""],
        &["CONFIG", "SET", "no-such-setting", "1"],
        &["CONFIG", "SET", "maxmemory"],
        &["CONFIG", "SET"],
    ]
    .iter()
    .map(|args| frame(args))
    .collect();
    same_replies(&requests[1..]);
    // HELLO names the connection's id, which differs between the two servers: compared
    // without it.
    same_replies_after(Some("2"), &[]);
}

#[test]
fn client_names_answer_as_redis_server_does() {
    let requests: Vec<Vec<u8>> = [
        &["CLIENT", "GETNAME"][..],
        &["CLIENT", "SETNAME"],
        &["CLIENT", "SETNAME", "a", "b"],
        &["CLIENT", "SETNAME", "a b"],
        &["CLIENT", "SETNAME", "caf\u{e9}"],
        &["CLIENT", "SETNAME", "new\nline"],
        &["CLIENT", "SETNAME", "cache-1"],
        &["CLIENT", "GETNAME"],
        &["client", "getname", "x"],
        &["HELLO", "2", "SETNAME"],
        &["HELLO", "2", "SETNAME", "x y"],
        &["CLIENT", "GETNAME"],
        &["CLIENT", "SETNAME", ""],
        &["CLIENT", "GETNAME"],
    ]
    .iter()
    .map(|args| frame(args))
    .collect();
    same_replies(&requests);
    // HELLO's SETNAME names the connection (its reply holds the connection's id, which differs).
    let redis = Redis::start();
    let (_server, port) = quicksilver(&["-t", "2"]);
    for port in [redis.port, port] {
        let mut client = connect(port);
        let reply = call(&mut client, &frame(&["HELLO", "2", "SETNAME", "web-7"]));
        assert!(reply.starts_with(b"*14\r\n"), "{reply:?}");
        assert_eq!(call(&mut client, &frame(&["CLIENT", "GETNAME"])), b"$5\r\nweb-7\r\n");
    }
    // A name is at most 1,024 bytes here (redis-server keeps any length).
    let mut client = connect(port);
    let long = "n".repeat(1025);
    let reply = call(&mut client, &frame(&["CLIENT", "SETNAME", &long]));
    assert_eq!(String::from_utf8_lossy(&reply), "-ERR Client names longer than 1024 bytes are not kept\r\n");
    assert_eq!(call(&mut client, &frame(&["CLIENT", "SETNAME", &long[1..]])), b"+OK\r\n");
    // A name goes with its connection: the next one (given the same descriptor) has none.
    for _ in 0..3 {
        let mut named = connect(port);
        assert_eq!(call(&mut named, &frame(&["CLIENT", "SETNAME", "gone"])), b"+OK\r\n");
        drop(named);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut next = connect(port);
        assert_eq!(call(&mut next, &frame(&["CLIENT", "GETNAME"])), b"$-1\r\n");
    }
}

#[test]
fn inline_requests_empty_lines_and_pipelines_answer_as_redis_server_does() {
    let mut pipeline = Vec::new();
    for i in 0..50 {
        pipeline.extend(frame(&["SET", &format!("p{i}"), &format!("{i}")]));
        pipeline.extend(frame(&["GET", &format!("p{i}")]));
        pipeline.extend_from_slice(b"INCR pc\r\n");
    }
    let requests = vec![
        b"PING\r\n".to_vec(),
        b"ping\n".to_vec(),
        b"  set   inline   word  \r\n".to_vec(),
        b"GET inline\r\n".to_vec(),
        b"\r\n\r\nPING\r\n".to_vec(),
        b"*0\r\n*-1\r\nPING\r\n".to_vec(),
        pipeline,
    ];
    same_replies(&requests);
}

#[test]
fn a_request_split_across_reads_is_answered_once_whole() {
    let redis = Redis::start();
    let (_server, port) = quicksilver(&[]);
    let mut request = frame(&["SET", "split", &"v".repeat(3000)]);
    request.extend(frame(&["GET", "split"]));
    let mut replies = Vec::new();
    for port in [redis.port, port] {
        let mut client = connect(port);
        client.stream.set_nodelay(true).expect("nodelay");
        for piece in request.chunks(7) {
            client.send(piece);
            std::thread::sleep(Duration::from_micros(200));
        }
        replies.push(call(&mut client, b""));
    }
    assert_eq!(replies[0], replies[1]);
    assert!(replies[1].starts_with(b"+OK\r\n$3000\r\nvvv"));
}

#[test]
fn broken_framing_is_answered_with_redis_servers_protocol_error_and_the_connection_closes() {
    let redis = Redis::start();
    let (_server, port) = quicksilver(&[]);
    let cases: [&[u8]; 5] =
        [b"*abc\r\n", b"*1\r\n+PING\r\n", b"*1\r\n$-4\r\n", b"*1\r\n$x\r\n", b"*01\r\n$4\r\nPING\r\n"];
    for case in cases {
        let mut got = Vec::new();
        for port in [redis.port, port] {
            let mut client = connect(port);
            client.send(b"PING\r\n");
            client.send(case);
            let mut all = Vec::new();
            client.stream.read_to_end(&mut all).expect("read to close");
            got.push(all);
        }
        assert_eq!(String::from_utf8_lossy(&got[1]), String::from_utf8_lossy(&got[0]), "{case:?}");
    }
}

#[test]
fn commands_out_of_scope_get_the_unknown_command_error_and_unserved_forms_say_so() {
    let (_server, port) = quicksilver(&[]);
    let mut client = connect(port);
    assert_eq!(
        call(&mut client, &frame(&["XADD", "h", "f", "v"])),
        b"-ERR unknown command 'XADD', with args beginning with: 'h' 'f' 'v' \r\n"
    );
    // Forms of the commands served that this server does not serve yet are refused by name,
    // never answered wrongly.
    for (request, error) in [
        (frame(&["HELLO", "4"]), "-NOPROTO sorry, this protocol version is not supported.\r\n"),
        (frame(&["FUNCTION", "LIST"]), "-ERR functions are not served (no scripting)\r\n"),
    ] {
        assert_eq!(String::from_utf8_lossy(&call(&mut client, &request)), error);
    }
}

#[test]
fn commands_that_read_then_write_a_key_answer_as_redis_server_does() {
    let requests: Vec<Vec<u8>> = [
        &["SET", "k", "v1"][..],
        &["GETDEL", "k"],
        &["GETDEL", "k"],
        &["GETSET", "k", "v2"],
        &["GETSET", "k", "v3"],
        &["SET", "k", "v4", "GET"],
        &["SET", "nope", "v", "XX", "GET"],
        &["SET", "k", "v5", "NX", "GET"],
        &["SET", "fresh", "v", "NX", "GET"],
        &["GET", "k"],
        &["SET", "t", "v", "EX", "100"],
        &["SET", "t", "w", "KEEPTTL"],
        &["TTL", "t"],
        &["SET", "t", "x", "KEEPTTL", "EX", "5"],
        &["GETEX", "t", "PERSIST"],
        &["TTL", "t"],
        &["GETEX", "t", "EX", "50"],
        &["TTL", "t"],
        &["GETEX", "t", "EX", "0"],
        &["GETEX", "t", "EX", "5", "PX", "5000"],
        &["GETEX", "nope", "EX", "5"],
        &["PERSIST", "t"],
        &["PERSIST", "t"],
        &["PERSIST", "nope"],
        &["EXPIRE", "t", "100", "XX"],
        &["EXPIRE", "t", "100", "NX"],
        &["TTL", "t"],
        &["EXPIRE", "t", "50", "GT"],
        &["EXPIRE", "t", "200", "GT"],
        &["TTL", "t"],
        &["EXPIRE", "t", "300", "LT"],
        &["EXPIRE", "t", "30", "LT", "XX"],
        &["TTL", "t"],
        &["EXPIRE", "t", "30", "NX", "XX"],
        &["EXPIRE", "t", "30", "GT", "LT"],
        &["EXPIRE", "t", "30", "YY"],
        &["EXPIREAT", "t", "4000000000"],
        &["EXPIRETIME", "t"],
        &["PEXPIRETIME", "t"],
        &["EXPIRETIME", "k"],
        &["EXPIRETIME", "nope"],
        &["EXPIRE", "t", "-1", "LT"],
        &["EXISTS", "t"],
        &["SET", "s", "Hello World"],
        &["GETRANGE", "s", "0", "3"],
        &["GETRANGE", "s", "-3", "-1"],
        &["GETRANGE", "s", "5", "3"],
        &["GETRANGE", "s", "x", "3"],
        &["GETRANGE", "nope", "0", "-1"],
        &["SUBSTR", "s", "0", "4"],
        &["SETRANGE", "s", "6", "Redis"],
        &["GET", "s"],
        &["SETRANGE", "pad", "5", "x"],
        &["GET", "pad"],
        &["SETRANGE", "empty", "5", ""],
        &["EXISTS", "empty"],
        &["SETRANGE", "s", "-1", "x"],
        &["SET", "f", "10.5"],
        &["INCRBYFLOAT", "f", "0.25"],
        &["INCRBYFLOAT", "f", "-5"],
        &["INCRBYFLOAT", "f", "5.0e3"],
        &["INCRBYFLOAT", "newf", "3"],
        &["INCRBYFLOAT", "s", "1"],
        &["INCRBYFLOAT", "f", "abc"],
        &["INCRBYFLOAT", "f", "inf"],
        &["MSET", "a", "1", "b", "2", "c", "3"],
        &["MGET", "a", "b", "c"],
        &["MSET", "a", "1", "b"],
        &["DEL", "a", "b", "nope", "a"],
        &["EXISTS", "a", "b", "c"],
        &["UNLINK", "c", "c"],
        &["MSETNX", "x{t}", "1", "y{t}", "2"],
        &["MSETNX", "x{t}", "3", "z{t}", "4"],
        &["MGET", "x{t}", "y{t}", "z{t}"],
        &["DBSIZE"],
        &["FLUSHALL"],
        &["DBSIZE"],
    ]
    .iter()
    .map(|args| frame(args))
    .collect();
    same_replies(&requests);
}

#[test]
fn info_lists_redis_servers_sections_and_fields() {
    // One worker: another's figures would show as of its last loop turn.
    let (_server, port) = quicksilver(&["-t", "1"]);
    let mut client = connect(port);
    call(&mut client, &frame(&["SET", "a", "v"]));
    call(&mut client, &frame(&["GET", "a"]));
    call(&mut client, &frame(&["GET", "nope"]));
    let info = String::from_utf8(call(&mut client, &frame(&["INFO"]))).expect("text");
    for field in [
        "# Server\r\nredis_version:7.0.15\r\n",
        "\r\nconnected_clients:1\r\n",
        "\r\nmaxmemory_policy:allkeys-lru\r\n",
        "\r\nkeyspace_hits:1\r\n",
        "\r\nkeyspace_misses:1\r\n",
        "\r\n# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n",
    ] {
        assert!(info.contains(field), "{field:?} in {info}");
    }
    let cpu = String::from_utf8(call(&mut client, &frame(&["INFO", "cpu"]))).expect("text");
    assert!(cpu.contains("# CPU\r\nused_cpu_sys:") && !cpu.contains("used_memory"), "{cpu}");
}

#[test]
fn a_value_past_the_item_size_limit_is_refused_with_an_error_and_one_under_it_is_stored() {
    let (_server, port) = quicksilver(&["-I", "1m"]);
    let mut client = connect(port);
    let value = "v".repeat(1_000_000);
    assert_eq!(call(&mut client, &frame(&["SET", "big", &value])), b"+OK\r\n");
    let reply = call(&mut client, &frame(&["GET", "big"]));
    assert!(reply.starts_with(b"$1000000\r\nvvv"));
    // Within redis-server's bounds the request is read, then refused: an error, the old value
    // kept and the connection in step.
    let value = "w".repeat(2_000_000);
    assert_eq!(call(&mut client, &frame(&["SET", "big", &value])), b"-ERR object too large for cache\r\n");
    assert_eq!(call(&mut client, &frame(&["STRLEN", "big"])), b":1000000\r\n");
    // Past them, its length is refused before its bytes are read: an error, then the close.
    client.send(b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$536870913\r\n");
    let mut reply = Vec::new();
    client.stream.read_to_end(&mut reply).expect("read to close");
    assert_eq!(reply, b"-ERR Protocol error: invalid bulk length\r\n");
    let mut again = connect(port);
    assert_eq!(call(&mut again, &frame(&["EXISTS", "big"])), b":1\r\n");
}

#[test]
fn dbsize_counts_the_keys_as_memcacheds_curr_items_does_and_none_after_a_flush() {
    let (_server, port) = quicksilver(&["-t", "1"]);
    let mut client = connect(port);
    for key in ["a", "b", "c"] {
        call(&mut client, &frame(&["SET", key, "v"]));
    }
    call(&mut client, &frame(&["SET", "a", "again"]));
    assert_eq!(call(&mut client, &frame(&["DBSIZE"])), b":3\r\n");
    call(&mut client, &frame(&["DEL", "b"]));
    assert_eq!(call(&mut client, &frame(&["DBSIZE"])), b":2\r\n");
    call(&mut client, &frame(&["FLUSHALL"]));
    assert_eq!(call(&mut client, &frame(&["DBSIZE"])), b":0\r\n");
}

#[test]
fn redis_py_runs_a_cache_workload() {
    let (_server, port) = quicksilver(&["-t", "2"]);
    common::resp::redis_py_script("redis_py_cache.py", port, "quicksilver");
}

/// Runs `program` with `args` in the interop directory `dir` against a quicksilver with two
/// workers, then against one whose users file (-Y) asks for a password (the client's `AUTH`).
fn client_workload(dir: &str, program: &str, args: &[&str]) {
    let dir = format!("{}/tests/interop/{dir}", env!("CARGO_MANIFEST_DIR"));
    let users = tempfile_dir().join("users");
    std::fs::write(&users, "app:pw\n").expect("write the users");
    let open = quicksilver(&["-t", "2"]);
    let with_password = quicksilver(&["-t", "2", "-Y", users.to_str().expect("path")]);
    for ((_server, port), password) in [(open, ""), (with_password, "pw")] {
        let port = port.to_string();
        let mut all: Vec<&str> = args.to_vec();
        all.push(&port);
        let output = Command::new(program)
            .args(&all)
            .current_dir(&dir)
            .env("QS_PASSWORD", password)
            .output()
            .unwrap_or_else(|e| panic!("{program} (scripts/test.sh installs it): {e}"));
        assert!(
            output.status.success(),
            "{program} {all:?} with password {password:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn go_redis_runs_a_cache_workload() {
    // `go run` takes go-redis from the Go module proxy the first time (go.sum pins it).
    client_workload("go_redis", "go", &["run", "."]);
}

#[test]
fn ioredis_runs_a_cache_workload() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/ioredis");
    if !std::path::Path::new(dir).join("node_modules/ioredis").exists() {
        // npm ci takes the versions package-lock.json pins from the npm registry.
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(dir)
            .status()
            .expect("npm (Node.js)");
        assert!(status.success(), "npm ci");
    }
    client_workload("ioredis", "node", &["cache.js"]);
}

/// Jedis's class path, resolved by Maven from Maven Central the first time (pom.xml pins the
/// versions) into `target/classpath.txt` of its directory.
fn jedis_classpath() -> String {
    // The two Jedis tests run side by side: one resolves, the other waits for it.
    static RESOLVING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _resolving = RESOLVING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/jedis");
    let file = std::path::Path::new(dir).join("target/classpath.txt");
    if !file.exists() {
        let status = Command::new("mvn")
            .args(["-q", "-B", "dependency:build-classpath", "-Dmdep.outputFile=target/classpath.txt"])
            .current_dir(dir)
            .status()
            .expect("mvn (scripts/test.sh installs Maven and a JDK)");
        assert!(status.success(), "mvn dependency:build-classpath");
    }
    std::fs::read_to_string(file).expect("the class path")
}

#[test]
fn jedis_runs_a_cache_workload() {
    let classpath = jedis_classpath();
    client_workload("jedis", "java", &["-cp", &classpath, "CacheWorkload.java"]);
}

/// Over TLS, and in RESP3 (Jedis's `HELLO 3`).
#[test]
fn jedis_runs_its_workload_over_tls_in_resp3() {
    let classpath = jedis_classpath();
    let certs = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tls");
    let files = format!("ssl_chain_cert={certs}/server.pem,ssl_key={certs}/server.key");
    let port = free_port();
    let listen = format!("127.0.0.1,proto[resp]:127.0.0.1:{port}");
    let probe = |port: u16| TcpStream::connect(("127.0.0.1", port)).is_ok();
    let _server = ServerProcess::quicksilver_probed(&["-Z", "-o", &files, "-l", &listen], probe);
    let output = Command::new("java")
        .args(["-cp", &classpath, "CacheWorkload.java", &port.to_string()])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/jedis"))
        .env("QS_TLS_CA", format!("{certs}/ca.pem"))
        .env("QS_PROTOCOL", "3")
        .output()
        .expect("java");
    assert!(
        output.status.success(),
        "Jedis over TLS in RESP3: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn quit_answers_ok_and_closes() {
    let (_server, port) = quicksilver(&[]);
    let mut client = connect(port);
    client.send(&frame(&["QUIT"]));
    let mut all = Vec::new();
    client.stream.read_to_end(&mut all).expect("read to close");
    assert_eq!(all, b"+OK\r\n");
}

#[test]
fn millisecond_expiry_answers_as_redis_server_does() {
    let requests: Vec<Vec<u8>> = [
        &["SET", "x", "v", "PXAT", "4102444800123"][..],
        &["PEXPIRETIME", "x"],
        &["EXPIRETIME", "x"],
        &["PEXPIREAT", "x", "4102444800500"],
        &["EXPIRETIME", "x"],
        &["PEXPIREAT", "x", "4102444800499"],
        &["EXPIRETIME", "x"],
        &["EXPIREAT", "x", "4102444801"],
        &["PEXPIRETIME", "x"],
        &["GETEX", "x", "PXAT", "4102444802999"],
        &["PEXPIRETIME", "x"],
        &["SET", "y", "v", "KEEPTTL"],
        &["SET", "x", "w", "KEEPTTL"],
        &["PEXPIRETIME", "x"],
        &["PEXPIREAT", "x", "4102444802998", "GT"],
        &["PEXPIREAT", "x", "4102444803000", "GT"],
        &["PEXPIRETIME", "x"],
        &["PERSIST", "x"],
        &["PEXPIRETIME", "x"],
        &["SET", "x", "v", "PXAT", "1000"],
        &["GET", "x"],
    ]
    .iter()
    .map(|args| frame(args))
    .collect();
    same_replies(&requests);
}

/// A key set for 100 ms answers before then and not after, on both servers, and memcached's
/// protocols see the same item with its TTL rounded up to the second.
#[test]
fn a_sub_second_expiry_ends_at_its_millisecond() {
    let redis = Redis::start();
    let (server, port) = quicksilver(&[]);
    for port in [redis.port, port] {
        let mut client = connect(port);
        let started = Instant::now();
        assert_eq!(call(&mut client, &frame(&["PSETEX", "k", "300", "v"])), b"+OK\r\n");
        assert_eq!(call(&mut client, &frame(&["GET", "k"])), b"$1\r\nv\r\n");
        let pttl = String::from_utf8(call(&mut client, &frame(&["PTTL", "k"]))).unwrap();
        let left: u64 = pttl.trim_start_matches(':').trim().parse().unwrap();
        assert!(left <= 300 && left + started.elapsed().as_millis() as u64 >= 290, "PTTL {left}");
        std::thread::sleep(
            Duration::from_millis(300).saturating_sub(started.elapsed()) + Duration::from_millis(30),
        );
        assert_eq!(call(&mut client, &frame(&["GET", "k"])), b"$-1\r\n", "port {port}");
    }
    let mut resp = connect(port);
    let mut text = server.connect();
    call(&mut resp, &frame(&["SET", "both", "v", "PXAT", "4102444800123"]));
    assert!(text.call(b"me both\r\n").starts_with(b"ME both exp="));
    let line = String::from_utf8(text.call(b"mg both t\r\n")).unwrap();
    let ttl: i64 = line.trim().trim_start_matches("HD t").parse().unwrap();
    let want = 4_102_444_801
        - std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((want - 1..=want).contains(&ttl), "mg t{ttl}, want about {want}");
}

#[test]
fn one_store_behind_both_dialects() {
    let (server, port) = quicksilver(&[]);
    let mut resp = connect(port);
    let mut text = server.connect();
    assert_eq!(call(&mut resp, &frame(&["SET", "shared", "from redis"])), b"+OK\r\n");
    assert_eq!(text.call(b"get shared\r\n"), b"VALUE shared 0 10\r\nfrom redis\r\nEND\r\n");
    text.call(b"set other 5 0 4\r\nmemc\r\n");
    assert_eq!(call(&mut resp, &frame(&["GET", "other"])), b"$4\r\nmemc\r\n");
    text.call(b"set n 0 0 2\r\n41\r\n");
    assert_eq!(call(&mut resp, &frame(&["INCR", "n"])), b":42\r\n");
    assert_eq!(text.call(b"incr n 8\r\n"), b"50\r\n");
    assert_eq!(call(&mut resp, &frame(&["DEL", "n"])), b":1\r\n");
    assert_eq!(text.call(b"get n\r\n"), b"END\r\n");
    // memcached's decr keeps a shorter number's length with spaces; Redis's counters read
    // past them, and store the exact number.
    text.call(b"set pad 0 0 2\r\n10\r\n");
    assert_eq!(text.call(b"decr pad 1\r\n"), b"9\r\n");
    assert_eq!(call(&mut resp, &frame(&["DECRBY", "pad", "12"])), b":-3\r\n");
    assert_eq!(text.call(b"get pad\r\n"), b"VALUE pad 0 2\r\n-3\r\nEND\r\n");
    assert_eq!(
        text.call(b"incr pad 1\r\n"),
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
}

/// Sends `request` and reads one reply of one line (a status, an error or an integer).
fn one_line(client: &mut Client, request: &[u8]) -> String {
    client.send(request);
    String::from_utf8_lossy(&client.read_until(b"\r\n")).into_owned()
}

#[test]
fn with_a_password_nothing_runs_before_auth_as_with_redis_servers_requirepass() {
    let dir = tempfile_dir();
    let users = dir.join("users");
    std::fs::write(&users, "default:s3cret\n").expect("write the users");
    let redis = Redis::start_with(&["--requirepass", "s3cret"]);
    let (_server, port) = quicksilver(&["-Y", users.to_str().expect("path")]);
    let (mut theirs, mut ours) = (connect(redis.port), connect(port));
    for request in [
        frame(&["GET", "k"]),
        frame(&["SET", "k", "v"]),
        frame(&["HSET", "h", "f", "v"]),
        frame(&["GET"]),
        frame(&["HELLO", "2"]),
        frame(&["HELLO", "2", "AUTH", "default", "wrong"]),
        frame(&["HELLO", "2", "AUTH", "default", "wrong", "SETNAME", "x y"]),
        frame(&["HELLO", "2", "SETNAME", "web"]),
        frame(&["AUTH", "wrong"]),
        frame(&["AUTH", "a", "b", "c"]),
        b"PING\r\n".to_vec(),
        frame(&["AUTH", "s3cret"]),
        frame(&["SET", "k", "v"]),
        frame(&["AUTH", "default", "wrong"]),
        frame(&["AUTH", "default", "s3cret"]),
    ] {
        let want = one_line(&mut theirs, &request);
        assert_eq!(one_line(&mut ours, &request), want, "{:?}", String::from_utf8_lossy(&request));
    }
    // A failed AUTH leaves an authenticated connection as it was.
    assert_eq!(call(&mut ours, &frame(&["GET", "k"])), call(&mut theirs, &frame(&["GET", "k"])));
    // HELLO with AUTH authenticates and answers the handshake.
    let mut hello = connect(port);
    let reply = call(&mut hello, &frame(&["HELLO", "2", "AUTH", "default", "s3cret"]));
    assert!(reply.starts_with(b"*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n"), "{reply:?}");
    assert_eq!(call(&mut hello, &frame(&["GET", "k"])), b"$1\r\nv\r\n");
    // HELLO's AUTH authenticates even where its SETNAME's name is then refused, as
    // redis-server's; a good name is set.
    for port in [redis.port, port] {
        let mut client = connect(port);
        let bad = ["HELLO", "2", "AUTH", "default", "s3cret", "SETNAME", "x y"];
        assert_eq!(
            String::from_utf8_lossy(&call(&mut client, &frame(&bad))),
            "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
        );
        assert_eq!(call(&mut client, &frame(&["GET", "k"])), b"$1\r\nv\r\n");
        let mut named = connect(port);
        let good = ["HELLO", "2", "AUTH", "default", "s3cret", "SETNAME", "api"];
        assert!(call(&mut named, &frame(&good)).starts_with(b"*14\r\n"));
        assert_eq!(call(&mut named, &frame(&["CLIENT", "GETNAME"])), b"$3\r\napi\r\n");
    }
    // Before authentication a request may hold at most 10 arguments of 16 KiB each.
    for (request, error) in [
        (b"*11\r\n".to_vec(), "-ERR Protocol error: unauthenticated multibulk length\r\n"),
        (b"*2\r\n$4\r\nAUTH\r\n$16385\r\n".to_vec(), "-ERR Protocol error: unauthenticated bulk length\r\n"),
    ] {
        for port in [redis.port, port] {
            let mut stranger = connect(port);
            stranger.send(&request);
            let mut all = Vec::new();
            stranger.stream.read_to_end(&mut all).expect("read to close");
            assert_eq!(String::from_utf8_lossy(&all), error);
        }
    }
}

/// A fresh directory under the system's temporary one.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("qs-resp-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    dir
}

#[test]
fn redis_cli_talks_to_a_resp_listener_over_tls() {
    let certs = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tls");
    let files = format!("ssl_chain_cert={certs}/server.pem,ssl_key={certs}/server.key");
    let port = free_port();
    let listen = format!("127.0.0.1,proto[resp]:127.0.0.1:{port}");
    let probe = |port: u16| TcpStream::connect(("127.0.0.1", port)).is_ok();
    let _server = ServerProcess::quicksilver_probed(&["-Z", "-o", &files, "-l", &listen], probe);
    let cli = |args: &[&str]| {
        let ca = format!("{certs}/ca.pem");
        let mut all = vec!["--tls", "--cacert", &ca, "-p"];
        let port = port.to_string();
        all.push(&port);
        all.extend_from_slice(args);
        let output =
            Command::new("redis-cli").args(&all).output().expect("redis-cli (scripts/test.sh installs it)");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while cli(&["PING"]) != "PONG\n" {
        assert!(Instant::now() < deadline, "no TLS listener");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(cli(&["SET", "greeting", "hello"]), "OK\n");
    assert_eq!(cli(&["GET", "greeting"]), "hello\n");
    // The same port refuses plaintext: nothing is answered in the clear.
    let mut plain = connect(port);
    plain.send(b"PING\r\n");
    let mut got = Vec::new();
    let _ = plain.stream.read_to_end(&mut got);
    assert!(!got.starts_with(b"+PONG"), "{got:?}");
}

#[test]
fn twemproxy_with_redis_true_spreads_keys_over_two_resp_listeners() {
    let (servers, ports): (Vec<ServerProcess>, Vec<u16>) = (0..2).map(|_| quicksilver(&["-t", "2"])).unzip();
    let dir = tempfile_dir();
    let proxy = common::twemproxy::start(&ports, true, &dir);
    let mut client = connect(proxy.port);
    // nutcracker serves no ECHO (the marker `call` sends): each reply is read as expected.
    let mut expect = |request: &[&str], reply: &[u8]| {
        client.send(&frame(request));
        assert_eq!(client.read_until(reply), reply, "{request:?}");
    };
    const KEYS: usize = 200;
    for key in 0..KEYS {
        expect(&["SET", &format!("user:{key}"), &format!("v{key}"), "EX", "600"], b"+OK\r\n");
    }
    // Each key is on exactly one instance, and both hold some.
    let mut direct: Vec<Client> = ports.iter().map(|&port| connect(port)).collect();
    let mut held = [0usize; 2];
    for key in 0..KEYS {
        let holders: Vec<usize> = (0..2)
            .filter(|&at| call(&mut direct[at], &frame(&["EXISTS", &format!("user:{key}")])) == b":1\r\n")
            .collect();
        assert_eq!(holders.len(), 1, "user:{key} on {holders:?}");
        held[holders[0]] += 1;
    }
    assert!(held.iter().all(|&count| count > KEYS / 5), "ketama spread: {held:?}");
    // Through the proxy: MGET and DEL of several keys (nutcracker splits them by server),
    // counters, TTLs.
    expect(&["MGET", "user:1", "nope", "user:2"], b"*3\r\n$2\r\nv1\r\n$-1\r\n$2\r\nv2\r\n");
    expect(&["DEL", "user:1", "user:2", "nope"], b":2\r\n");
    expect(&["INCRBY", "hits", "5"], b":5\r\n");
    expect(&["INCR", "hits"], b":6\r\n");
    expect(&["GET", "user:3"], b"$2\r\nv3\r\n");
    // The TTL as set, or a second less if a second has turned since.
    client.send(&frame(&["TTL", "user:3"]));
    let ttl = client.read_until(b"\r\n");
    assert!(ttl == b":600\r\n" || ttl == b":599\r\n", "{ttl:?}");
    drop(servers);
}

#[test]
fn stats_and_watch_count_and_show_resp_commands_as_memcacheds() {
    let (server, port) = quicksilver(&["-t", "1"]);
    let mut watcher = connect(server.port);
    watcher.send(b"watch fetchers mutations\r\n");
    assert_eq!(watcher.read_until(b"\r\n"), b"OK\r\n");
    let mut client = connect(port);
    assert_eq!(call(&mut client, &frame(&["SET", "k", "v"])), b"+OK\r\n");
    assert_eq!(call(&mut client, &frame(&["GET", "k"])), b"$1\r\nv\r\n");
    assert_eq!(call(&mut client, &frame(&["GET", "nope"])), b"$-1\r\n");
    assert_eq!(call(&mut client, &frame(&["DEL", "k"])), b":1\r\n");
    let lines =
        String::from_utf8_lossy(&watcher.read_until(b"type=item_get key=nope status=not_found")).into_owned();
    assert!(lines.contains("type=item_store key=k status=stored cmd=set"), "{lines}");
    assert!(lines.contains("type=item_get key=k status=found"), "{lines}");
    let mut admin = connect(server.port);
    admin.send(b"stats\r\n");
    let stats = String::from_utf8_lossy(&admin.read_until(b"END\r\n")).into_owned();
    for line in [
        "STAT cmd_get 2\r\n",
        "STAT cmd_set 1\r\n",
        "STAT get_hits 1\r\n",
        "STAT get_misses 1\r\n",
        "STAT delete_hits 1\r\n",
    ] {
        assert!(stats.contains(line), "{line:?} in {stats}");
    }
}

/// `stats hotkeys` and `stats mrc` (asked over memcached's protocol) see the keys of RESP
/// commands, read on either worker.
#[test]
fn hot_keys_and_the_miss_ratio_curve_see_resp_keys() {
    let (server, port) = quicksilver(&["-t", "2", "-o", "mrc_sample=1"]);
    let mut admin = server.connect();
    let ask = |admin: &mut Client, request: &str| {
        admin.send(request.as_bytes());
        String::from_utf8_lossy(&admin.read_until(b"\r\n")).into_owned()
            + &String::from_utf8_lossy(&if request.contains(" on") || request.contains("reset") {
                Vec::new()
            } else {
                admin.read_until(b"END\r\n")
            })
    };
    assert_eq!(ask(&mut admin, "stats hotkeys on\r\n"), "OK\r\n");
    assert_eq!(ask(&mut admin, "stats mrc reset\r\n"), "RESET\r\n");
    std::thread::sleep(Duration::from_millis(100));
    let mut client = connect(port);
    let mut request = Vec::new();
    for n in 0..60 {
        request.extend_from_slice(&frame(&["GET", "resp:hot"]));
        request.extend_from_slice(&frame(&["GET", &format!("resp:cold{n}")]));
    }
    request.extend_from_slice(&frame(&["MGET", "resp:hot", "resp:hot"]));
    call(&mut client, &request);
    // Other workers publish within 50 ms.
    std::thread::sleep(Duration::from_millis(300));
    let hot = ask(&mut admin, "stats hotkeys 1\r\n");
    assert!(hot.starts_with("STAT hotkey_1 resp:hot count=62 "), "{hot}");
    let mrc = ask(&mut admin, "stats mrc\r\n");
    assert!(mrc.contains("STAT mrc_gets 122\r\n"), "{mrc}");
}
