//! Random RESP command streams, each sent to redis-server 7.0 and to quicksilver's RESP
//! listener on one connection per stream, in pipelines written in random pieces (so requests
//! arrive split across reads): the replies must match byte for byte after what cannot match is
//! masked (a TTL or idle time read a second apart, MEMORY USAGE's sizes, HELLO's connection
//! id). The streams come from a grammar of the string, counter, expiry and keyspace commands
//! with valid and invalid arguments over a handful of keys, so commands meet each other's
//! keys: an INCR of an appended value, a GETEX of a key RENAME moved, a SET KEEPTTL after
//! EXPIRE. Half the streams speak RESP3 (`HELLO 3`). MULTI, EXEC, DISCARD, WATCH and UNWATCH
//! fall among them, so transactions hold whatever came between (refused commands too), and
//! with four workers their keys, and those of MSETNX, RENAME and COPY across the groups, are
//! owned by several workers. So do EVAL of small generated scripts over two keys of the two
//! groups, EVALSHA of a few (loaded by SCRIPT LOAD in the streams, or answered NOSCRIPT), and
//! SCRIPT EXISTS and FLUSH. SELECT moves a stream among databases 0 to 2 (inside MULTI too),
//! where MOVE, COPY ... DB, DBSIZE and FLUSHDB meet its keys. Between steps, another connection
//! writes one of the keys now and then, so a WATCH the stream holds sees a concurrent change.
//!
//! The keys share hash tags (`{a}1`, `{a}2`...), so the writes of several keys that quicksilver
//! runs on one worker (MSETNX, RENAME, COPY) meet the same owner with four workers too.
//! TTLs are whole seconds: expiry is kept in seconds (docs/COMPATIBILITY.md).
//!
//! `QS_RESP_DIFF_STREAMS` (default 120) and `QS_RESP_DIFF_SEED` widen or move the search; a
//! failure prints the seed and the stream so far.

mod common;

use common::resp::{call, connect, frame, quicksilver, without_id, Redis};
use common::rng::Rng;
use common::Client;
use std::io::Write;

const GROUPS: &[&str] = &["{a}", "{b}"];
const VALUES: &[&str] = &["v", "", "hello world", "10", "-7", "3.5", "9223372036854775807", "x\r\ny", "0"];
const NUMBERS: &[&str] = &["1", "0", "-1", "42", "100", "abc", "9223372036854775807", "1.5", ""];
const SECONDS: &[&str] = &["100", "1000", "5000", "0", "-1", "x", "86400"];

fn key(rng: &mut Rng, group: &str) -> String {
    format!("{group}{}", rng.below(4))
}

/// SET's options: one expiry form, NX or XX, GET, in a random order and sometimes doubled.
fn set_options(rng: &mut Rng) -> Vec<String> {
    let mut options = Vec::new();
    let seconds = rng.pick(SECONDS).to_owned();
    let whole_ms = seconds.parse::<i64>().map_or(seconds.clone(), |s| (s * 1000).to_string());
    for _ in 0..rng.below(4) {
        match rng.below(8) {
            0 => options.extend(["EX".to_owned(), seconds.clone()]),
            1 => options.extend(["PX".to_owned(), whole_ms.clone()]),
            2 => options.push("KEEPTTL".to_owned()),
            3 => options.push("NX".to_owned()),
            4 => options.push("XX".to_owned()),
            5 => options.push("GET".to_owned()),
            6 => options.push("EX".to_owned()),
            _ => options.push(rng.pick(&["FOO", "nx", "get"]).to_owned()),
        }
    }
    options
}

/// One command, as its arguments.
fn command(rng: &mut Rng) -> Vec<String> {
    let group = rng.pick(GROUPS);
    let k = key(rng, group);
    let v = rng.pick(VALUES).to_owned();
    let n = rng.pick(NUMBERS).to_owned();
    let s = rng.pick(SECONDS).to_owned();
    let other_group = rng.pick(GROUPS);
    let words: Vec<String> = match rng.below(65) {
        0..=3 => vec!["GET".into(), k],
        4..=6 => {
            let mut set = vec!["SET".into(), k, v];
            set.extend(set_options(rng));
            set
        }
        7 => vec!["SETNX".into(), k, v],
        8 => vec!["SETEX".into(), k, s, v],
        9 => vec!["GETSET".into(), k, v],
        10 => vec!["GETDEL".into(), k],
        11 => {
            let option = rng.pick(&["EX", "PERSIST", "", "PX"]);
            let mut getex = vec!["GETEX".into(), k];
            match option {
                "" => {}
                "PERSIST" => getex.push(option.into()),
                "PX" => getex.extend([option.into(), format!("{s}000")]),
                _ => getex.extend([option.into(), s]),
            }
            getex
        }
        12 => vec!["MGET".into(), k, key(rng, group), key(rng, other_group)],
        13 => vec!["MSET".into(), k, v, key(rng, other_group), n],
        14 => vec!["MSETNX".into(), k, v, key(rng, other_group), n],
        15 => vec!["APPEND".into(), k, v],
        16 => vec!["STRLEN".into(), k],
        17 => vec!["GETRANGE".into(), k, n, rng.pick(NUMBERS).into()],
        18 => vec!["SETRANGE".into(), k, rng.pick(&["0", "2", "5", "-1", "x"]).into(), v],
        19 => vec!["INCR".into(), k],
        20 => vec!["DECR".into(), k],
        21 => vec!["INCRBY".into(), k, n],
        22 => vec!["DECRBY".into(), k, n],
        // Keys of their own, and steps a double adds exactly: redis-server adds in `long
        // double` (docs/COMPATIBILITY.md).
        23 => {
            let float_key = format!("{group}f");
            vec![
                "INCRBYFLOAT".into(),
                float_key,
                rng.pick(&["1.5", "-2", "0.25", "x", "1e3", "2.5e-1"]).into(),
            ]
        }
        24 => vec!["DEL".into(), k, key(rng, other_group)],
        25 => vec!["EXISTS".into(), k, key(rng, group)],
        26 => vec!["TYPE".into(), k],
        27 => {
            let mut expire = vec![rng.pick(&["EXPIRE", "PEXPIRE"]).to_owned(), k];
            let condition = rng.chance(40).then(|| rng.pick(&["NX", "XX", "GT", "LT", "BAD"]));
            // A condition compares expiry times: redis-server's differ by the milliseconds
            // between two commands where whole seconds tie, so conditional times are all
            // different.
            let s = if condition.is_some() { (200 + rng.below(1_000_000)).to_string() } else { s };
            expire.push(if expire[0] == "PEXPIRE" { format!("{s}000") } else { s });
            expire.extend(condition.map(String::from));
            expire
        }
        28 => vec!["PERSIST".into(), k],
        29 => vec!["TTL".into(), k],
        30 => vec![rng.pick(&["RENAME", "RENAMENX"]).into(), k, key(rng, other_group)],
        31 => {
            let mut copy = vec!["COPY".into(), k, key(rng, other_group)];
            if rng.chance(50) {
                copy.push("REPLACE".into());
            }
            copy
        }
        32 if rng.chance(50) => vec!["ECHO".into(), v],
        32 => {
            let (command, sub) = *[("MEMORY", "USAGE"), ("OBJECT", "IDLETIME"), ("OBJECT", "FREQ")]
                .get(rng.below(3))
                .expect("one of three");
            vec![command.into(), sub.into(), k]
        }
        // Transactions: MULTI blocks end where an EXEC or DISCARD falls, with whatever came
        // between them (refused commands too), over keys of either group.
        34 => vec![rng.pick(&["MULTI", "multi"]).into()],
        35 => vec!["EXEC".into()],
        36 => vec!["DISCARD".into()],
        37 => vec!["WATCH".into(), k, key(rng, other_group)],
        38 if rng.chance(50) => vec!["UNWATCH".into()],
        39 | 40 => {
            let other = key(rng, other_group);
            script_command(rng, k, other, v)
        }
        41..=44 => {
            let other = key(rng, other_group);
            database_command(rng, k, other)
        }
        choice @ 45..=64 => {
            let same_group = key(rng, group);
            collection_command(rng, choice, (k, same_group), (v, n))
        }
        _ => vec![rng.pick(&["PING", "get", "set", "INCR", "NOSUCH", "WATCH", "EXEC x"]).into()],
    };
    words
}

/// Databases: the stream moves among three (and is refused past the sixteenth), and keys move
/// and are copied between them.
fn database_command(rng: &mut Rng, k: String, other: String) -> Vec<String> {
    match rng.below(4) {
        0 => vec!["SELECT".into(), rng.pick(&["0", "1", "2", "2", "16", "x"]).into()],
        1 => vec!["MOVE".into(), k, rng.pick(&["0", "1", "2", "x"]).into()],
        2 => {
            let mut copy = vec!["COPY".into(), k, other, "DB".into()];
            copy.push(rng.pick(&["0", "1", "2", "99"]).into());
            if rng.chance(50) {
                copy.push("REPLACE".into());
            }
            copy
        }
        _ => vec![rng.pick(&["DBSIZE", "DBSIZE", "DBSIZE", "FLUSHDB"]).into()],
    }
}

/// A set command on `k` (which may hold another type: WRONGTYPE); the other keys of SINTER,
/// SUNION, SDIFF, their STORE forms and SMOVE are of the same group (one worker owns them).
/// Members are integers mostly (an intset's order is redis-server's too); replies that list a
/// set's members are compared sorted (normalize).
fn set_command(rng: &mut Rng, (k, other): (String, String)) -> Vec<String> {
    const MEMBERS: &[&str] = &["1", "2", "3", "-7", "10", "a", "x\r\ny", ""];
    let member = rng.pick(MEMBERS).to_owned();
    let another = rng.pick(MEMBERS).to_owned();
    let mut words: Vec<String> = match rng.below(12) {
        0..=2 => vec!["SADD".into(), k, member, another],
        3 => vec!["SREM".into(), k, member, another],
        4 => vec![rng.pick(&["SMEMBERS", "SCARD"]).into(), k],
        5 => vec![rng.pick(&["SISMEMBER", "SMISMEMBER"]).into(), k, member],
        6 => vec![rng.pick(&["SINTER", "SUNION", "SDIFF"]).into(), k, other],
        7 => vec![rng.pick(&["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]).into(), k, other.clone(), other],
        8 => vec!["SMOVE".into(), k, other, member],
        9 => vec![rng.pick(&["SPOP", "SRANDMEMBER"]).into(), k, rng.pick(&["0", "-1", "x"]).into()],
        10 => vec![
            "SSCAN".into(),
            k,
            rng.pick(&["0", "x"]).into(),
            "COUNT".into(),
            rng.pick(&["5", "0"]).into(),
        ],
        _ => vec!["SINTER".into(), k],
    };
    if rng.chance(10) {
        words.pop();
    }
    words
}

/// A command on a collection (`choice` 45 to 64 picks the type), on `k`; `to` is a key of
/// the same group for the commands of several keys.
fn collection_command(
    rng: &mut Rng,
    choice: usize,
    (k, to): (String, String),
    (v, n): (String, String),
) -> Vec<String> {
    match choice {
        45..=49 => hash_command(rng, k, v, n),
        50..=54 => list_command(rng, (k, to), v, n),
        55..=59 => set_command(rng, (k, to)),
        _ => zset_command(rng, k),
    }
}

/// A sorted-set command on `k` (which may hold another type: WRONGTYPE), with scores a double
/// holds exactly and ranges of every kind.
fn zset_command(rng: &mut Rng, k: String) -> Vec<String> {
    const SCORES: &[&str] = &["1", "2", "2.5", "-3", "0", "inf", "-inf", "x", "1e400"];
    const BOUNDS: &[&str] = &["-inf", "+inf", "(1", "2", "(2.5", "x", "0"];
    const LEX: &[&str] = &["-", "+", "[a", "(b", "[c", "x"];
    const MEMBERS: &[&str] = &["a", "b", "c", "d", ""];
    let member = rng.pick(MEMBERS).to_owned();
    let mut words: Vec<String> = match rng.below(16) {
        0..=2 => {
            let mut zadd = vec!["ZADD".into(), k];
            for _ in 0..rng.below(3) {
                zadd.push(rng.pick(&["NX", "XX", "GT", "LT", "CH", "INCR"]).into());
            }
            zadd.extend([rng.pick(SCORES).into(), member]);
            if rng.chance(40) {
                zadd.extend([rng.pick(SCORES).into(), rng.pick(MEMBERS).into()]);
            }
            zadd
        }
        3 => vec!["ZINCRBY".into(), k, rng.pick(SCORES).into(), member],
        4 => vec!["ZREM".into(), k, member, rng.pick(MEMBERS).into()],
        5 => vec![rng.pick(&["ZSCORE", "ZRANK", "ZREVRANK"]).into(), k, member],
        6 => vec![rng.pick(&["ZMSCORE", "ZCARD"]).into(), k, member],
        7 => vec![
            rng.pick(&["ZCOUNT", "ZREMRANGEBYSCORE"]).into(),
            k,
            rng.pick(BOUNDS).into(),
            rng.pick(BOUNDS).into(),
        ],
        8 => vec![
            rng.pick(&["ZLEXCOUNT", "ZREMRANGEBYLEX", "ZRANGEBYLEX", "ZREVRANGEBYLEX"]).into(),
            k,
            rng.pick(LEX).into(),
            rng.pick(LEX).into(),
        ],
        9 => vec![
            rng.pick(&["ZRANGE", "ZREVRANGE", "ZREMRANGEBYRANK"]).into(),
            k,
            rng.pick(&["0", "1", "-1", "x"]).into(),
            rng.pick(&["-1", "2", "0"]).into(),
        ],
        10 => {
            let mut zrange = vec!["ZRANGE".into(), k];
            match rng.below(3) {
                0 => zrange.extend([rng.pick(BOUNDS).into(), rng.pick(BOUNDS).into(), "BYSCORE".into()]),
                1 => zrange.extend([rng.pick(LEX).into(), rng.pick(LEX).into(), "BYLEX".into()]),
                _ => zrange.extend(["0".into(), "-1".into()]),
            }
            for _ in 0..rng.below(3) {
                match rng.below(3) {
                    0 => zrange.push("REV".into()),
                    1 => zrange.push("WITHSCORES".into()),
                    _ => zrange.extend([
                        "LIMIT".into(),
                        rng.pick(&["0", "1", "-1"]).into(),
                        rng.pick(&["1", "2", "-1"]).into(),
                    ]),
                }
            }
            zrange
        }
        11 => {
            let mut by = vec![
                rng.pick(&["ZRANGEBYSCORE", "ZREVRANGEBYSCORE"]).into(),
                k,
                rng.pick(BOUNDS).into(),
                rng.pick(BOUNDS).into(),
            ];
            if rng.chance(50) {
                by.push("WITHSCORES".into());
            }
            by
        }
        12 => vec![rng.pick(&["ZPOPMIN", "ZPOPMAX"]).into(), k, rng.pick(&["1", "2", "0", "-1", "x"]).into()],
        13 => vec!["ZSCAN".into(), k, "0".into()],
        _ => vec!["ZCARD".into(), k],
    };
    if rng.chance(10) {
        words.pop();
    }
    words
}

/// A list command on `k` (which may hold a string or a hash: WRONGTYPE); LMOVE's and
/// RPOPLPUSH's destination `to` is a key of the same group (one worker owns both).
fn list_command(rng: &mut Rng, (k, to): (String, String), v: String, n: String) -> Vec<String> {
    const INDEXES: &[&str] = &["0", "1", "-1", "-2", "2", "5", "-9", "x"];
    let index = rng.pick(INDEXES).to_owned();
    let other = rng.pick(INDEXES).to_owned();
    let mut words: Vec<String> = match rng.below(14) {
        0..=2 => vec![rng.pick(&["LPUSH", "RPUSH", "LPUSHX", "RPUSHX"]).into(), k, v, n],
        3 => vec![rng.pick(&["LPOP", "RPOP"]).into(), k],
        4 => vec![rng.pick(&["LPOP", "RPOP"]).into(), k, rng.pick(&["0", "1", "3", "-1", "x"]).into()],
        5 => vec!["LRANGE".into(), k, index, other],
        6 => vec![rng.pick(&["LLEN", "LINDEX"]).into(), k, index],
        7 => vec!["LSET".into(), k, index, v],
        8 => vec!["LINSERT".into(), k, rng.pick(&["BEFORE", "after", "x"]).into(), n, v],
        9 => vec!["LREM".into(), k, rng.pick(&["0", "1", "-1", "x"]).into(), v],
        10 => vec!["LTRIM".into(), k, index, other],
        11 => {
            vec!["LPOS".into(), k, v, rng.pick(&["RANK", "COUNT", "MAXLEN"]).into(), rng.pick(INDEXES).into()]
        }
        12 => vec![
            "LMOVE".into(),
            k,
            to,
            rng.pick(&["LEFT", "RIGHT", "UP"]).into(),
            rng.pick(&["LEFT", "right"]).into(),
        ],
        _ => vec!["RPOPLPUSH".into(), k, to],
    };
    if words[0] == "LLEN" {
        words.pop();
    }
    if rng.chance(10) {
        words.pop();
    }
    words
}

/// A hash command on `k` (which may hold a string: WRONGTYPE), over a few fields.
fn hash_command(rng: &mut Rng, k: String, v: String, n: String) -> Vec<String> {
    const FIELDS: &[&str] = &["f", "g", "h", "", "x\r\ny"];
    let field = rng.pick(FIELDS).to_owned();
    let other = rng.pick(FIELDS).to_owned();
    let mut words: Vec<String> = match rng.below(12) {
        0 | 1 => vec!["HSET".into(), k, field, v],
        2 => vec!["HSET".into(), k, field, v, other, n],
        3 => vec![rng.pick(&["HGET", "HEXISTS", "HSTRLEN"]).into(), k, field],
        4 => vec!["HMGET".into(), k, field, other],
        5 => vec![rng.pick(&["HGETALL", "HKEYS", "HVALS", "HLEN"]).into(), k],
        6 => vec!["HDEL".into(), k, field, other],
        7 => vec!["HINCRBY".into(), k, rng.pick(&["n", "f"]).into(), n],
        // Steps a double adds exactly (redis-server adds in `long double`).
        8 => vec![
            "HINCRBYFLOAT".into(),
            k,
            "fl".into(),
            rng.pick(&["1.5", "-2", "0.25", "x", "1e3", "inf"]).into(),
        ],
        9 => vec!["HSETNX".into(), k, field, v],
        10 => vec!["HMSET".into(), k, field, v, other],
        _ => vec!["HSCAN".into(), k, rng.pick(&["0", "x"]).into()],
    };
    if rng.chance(10) {
        // Arity and syntax errors: a word short.
        words.pop();
    }
    words
}

/// The first word of a step that another connection sends (database 0), between two steps of
/// the stream.
const SIDE: &str = "@side";

/// Another client's write of one of the stream's keys: what a WATCH in the stream must see.
fn side_write(rng: &mut Rng) -> Vec<String> {
    let group = rng.pick(GROUPS);
    let k = key(rng, group);
    let write: Vec<String> = match rng.below(4) {
        0 => vec!["SET".into(), k, rng.pick(VALUES).into()],
        1 => vec!["INCR".into(), k],
        2 => vec!["DEL".into(), k],
        _ => vec!["EXPIRE".into(), k, "1000".into()],
    };
    std::iter::once(SIDE.to_string()).chain(write).collect()
}

/// EVAL of a generated script over `k` and `other` with `v` its argument, EVALSHA of a known
/// script, or SCRIPT LOAD, EXISTS or FLUSH.
fn script_command(rng: &mut Rng, k: String, other: String, v: String) -> Vec<String> {
    match rng.below(4) {
        0 | 1 => vec!["EVAL".into(), script(rng), "2".into(), k, other, v],
        2 => {
            let (sha, _) = SCRIPTS[rng.below(SCRIPTS.len())];
            vec![rng.pick(&["EVALSHA", "evalsha", "EVALSHA_RO"]).into(), sha.into(), "2".into(), k, other]
        }
        _ => match rng.below(3) {
            0 => vec!["SCRIPT".into(), "LOAD".into(), SCRIPTS[rng.below(SCRIPTS.len())].1.into()],
            1 => vec![
                "SCRIPT".into(),
                "EXISTS".into(),
                SCRIPTS[rng.below(SCRIPTS.len())].0.into(),
                "0".repeat(40),
            ],
            _ => vec!["SCRIPT".into(), "FLUSH".into()],
        },
    }
}

/// Scripts EVALSHA names, with their SHA1s (SCRIPT LOAD in the streams loads them).
const SCRIPTS: &[(&str, &str)] = &[
    ("2bab3b661081db58bd2341920e0ba7cf5dc77b25", "return redis.call('incr', KEYS[1])"),
    (
        "9a1d7f0bf19c99a659979fc7a4ad2521cabf45ca",
        "return {redis.call('get', KEYS[1]), redis.pcall('incr', KEYS[2])}",
    ),
    ("206396248e12c6e742fd7296250433c8d7343b74", "return redis.call('nosuch')"),
];

/// A small script over KEYS[1], KEYS[2] and ARGV[1]: a few calls, their replies returned (an
/// error of `redis.call` ends it, one of `redis.pcall` is a value).
fn script(rng: &mut Rng) -> String {
    const CALLS: &[&str] = &[
        "redis.call('incr', KEYS[1])",
        "redis.call('set', KEYS[1], ARGV[1])",
        "redis.pcall('get', KEYS[2])",
        "redis.call('append', KEYS[2], ARGV[1])",
        "redis.call('del', KEYS[1])",
        "redis.pcall('incrby', KEYS[2], ARGV[1])",
        "redis.call('mget', KEYS[1], KEYS[2])",
        "redis.call('exists', KEYS[1], KEYS[2])",
        "redis.call('getset', KEYS[2], 'x')",
        "redis.call('strlen', KEYS[1])",
        "redis.call('ttl', KEYS[1])",
        "(redis.call('get', KEYS[1]) == ARGV[1] and redis.call('del', KEYS[1]) or 0)",
        "redis.call('set', KEYS[1], ARGV[1], 'NX')",
        "tonumber(redis.call('get', KEYS[2]) or '0')",
        "redis.call('nosuch')",
        "redis.status_reply('DONE')",
    ];
    let mut text = String::from("local r = {} ");
    for _ in 0..1 + rng.below(3) {
        text.push_str(&format!("r[#r + 1] = {} ", rng.pick(CALLS)));
    }
    text.push_str(if rng.chance(50) { "return r" } else { "return r[#r]" });
    text
}

/// A reply with what cannot match masked: TTL's and OBJECT IDLETIME's positive answers (a
/// second apart between the servers) and MEMORY USAGE's (each server's own sizes) read as one;
/// inside EXEC's array, each queued request's (`queued`: those answered `+QUEUED` since MULTI).
fn normalize(request: &[String], reply: Vec<u8>, queued: &mut Option<Vec<Vec<String>>>) -> Vec<u8> {
    let name = request[0].to_ascii_uppercase();
    match (name.as_str(), reply.as_slice()) {
        ("MULTI", b"+OK\r\n") => *queued = Some(Vec::new()),
        ("EXEC" | "DISCARD", _) if !reply.starts_with(b"-ERR") => {
            let requests = queued.take().unwrap_or_default();
            if reply.starts_with(b"*") && !reply.starts_with(b"*-") {
                let at = reply.windows(2).position(|w| w == b"\r\n").expect("a count line") + 2;
                let mut masked = reply[..at].to_vec();
                for (request, element) in requests.iter().zip(split_replies(&reply[at..])) {
                    masked.extend(normalize(request, element, &mut None));
                }
                return masked;
            }
        }
        (_, b"+QUEUED\r\n") => queued.get_or_insert_with(Vec::new).push(request.to_vec()),
        _ => {}
    }
    let listed = ["SMEMBERS", "SINTER", "SUNION", "SDIFF"].contains(&name.as_str());
    if listed && (reply.starts_with(b"*") || reply.starts_with(b"~")) && !reply.starts_with(b"*-") {
        let at = reply.windows(2).position(|w| w == b"\r\n").expect("a count line") + 2;
        let mut members = split_replies(&reply[at..]);
        members.sort();
        let mut sorted = reply[..at].to_vec();
        sorted.extend(members.concat());
        return sorted;
    }
    // SSCAN's members after its cursor, sorted as well.
    let scan_head = b"*2\r\n$1\r\n0\r\n";
    if name == "SSCAN" && reply.starts_with(scan_head) {
        let inner = normalize(&["SMEMBERS".to_owned()], reply[scan_head.len()..].to_vec(), &mut None);
        return [&scan_head[..], &inner].concat();
    }
    let counted = ["TTL", "MEMORY", "OBJECT"].contains(&name.as_str());
    if counted && reply.starts_with(b":") && !reply.starts_with(b":-") {
        return b":<positive>\r\n".to_vec();
    }
    reply
}

/// Writes `bytes` in random pieces (each its own write, so the server may read a request in
/// parts).
fn send_in_pieces(client: &mut Client, bytes: &[u8], rng: &mut Rng) {
    let mut rest = bytes;
    while !rest.is_empty() {
        let take = if rng.chance(30) { 1 + rng.below(rest.len()) } else { rest.len() };
        client.stream.write_all(&rest[..take]).expect("send");
        client.stream.flush().expect("flush");
        rest = &rest[take..];
        if !rest.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// Runs `steps` (each a pipeline of commands) on a new connection to `port`: every reply, in
/// order, each masked.
fn run(port: u16, resp3: bool, steps: &[Vec<Vec<String>>], seed: u64) -> Vec<Vec<u8>> {
    let mut client = connect(port);
    let mut replies = Vec::new();
    if resp3 {
        replies.push(without_id(&call(&mut client, &frame(&["HELLO", "3"]))));
    }
    let mut rng = Rng(seed);
    let mut queued = None;
    let mut side: Option<Client> = None;
    for step in steps {
        if let [request] = &step[..] {
            if request[0] == SIDE {
                // Another client's write between the stream's steps (a watched key changed
                // under a WATCH the stream holds, say), on a connection of its own.
                let side = side.get_or_insert_with(|| connect(port));
                let words: Vec<&str> = request[1..].iter().map(String::as_str).collect();
                replies.push(call(side, &frame(&words)));
                continue;
            }
        }
        let mut bytes = Vec::new();
        for request in step {
            let words: Vec<&str> = request.iter().map(String::as_str).collect();
            bytes.extend_from_slice(&frame(&words));
        }
        send_in_pieces(&mut client, &bytes, &mut rng);
        // The step's replies, up to the marker `call` sends, one per request.
        let all = call(&mut client, b"");
        let split = split_replies(&all);
        assert_eq!(split.len(), step.len(), "one reply per request: {:?}", String::from_utf8_lossy(&all));
        for (request, reply) in step.iter().zip(split) {
            replies.push(normalize(request, reply, &mut queued));
        }
    }
    replies
}

/// The length of the RESP value at the front of `bytes`.
fn value_len(bytes: &[u8]) -> usize {
    let line_end = bytes.windows(2).position(|w| w == b"\r\n").expect("a whole line") + 2;
    let number =
        || -> i64 { std::str::from_utf8(&bytes[1..line_end - 2]).expect("text").parse().expect("a length") };
    match bytes[0] {
        b'$' | b'=' if number() < 0 => line_end,
        b'$' | b'=' => line_end + number() as usize + 2,
        b'*' | b'~' | b'>' | b'%' => {
            let count = number().max(0) as usize * if bytes[0] == b'%' { 2 } else { 1 };
            let mut at = line_end;
            for _ in 0..count {
                at += value_len(&bytes[at..]);
            }
            at
        }
        _ => line_end,
    }
}

/// A pipeline's replies, each on its own.
fn split_replies(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut replies = Vec::new();
    while !bytes.is_empty() {
        let len = value_len(bytes);
        replies.push(bytes[..len].to_vec());
        bytes = &bytes[len..];
    }
    replies
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn compare(workers: &str) {
    let streams = env_number("QS_RESP_DIFF_STREAMS", 120);
    let seed = env_number("QS_RESP_DIFF_SEED", 0x05ee_d0f2_ed15);
    let redis = Redis::start();
    let (_server, port) = quicksilver(&["-t", workers]);
    for stream in 0..streams {
        let stream_seed =
            (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ stream.wrapping_mul(0x2545_f491_4f6c_dd1d)) | 1;
        let mut rng = Rng(stream_seed);
        let resp3 = rng.chance(50);
        let mut in_multi = false;
        let steps: Vec<Vec<Vec<String>>> = (0..6 + rng.below(20))
            .map(|_| {
                if rng.chance(12) {
                    return vec![side_write(&mut rng)];
                }
                // A third of the steps are pipelines of several commands in one write.
                let count = if rng.chance(33) { 2 + rng.below(7) } else { 1 };
                let mut step: Vec<Vec<String>> = (0..count).map(|_| command(&mut rng)).collect();
                for request in &step {
                    let name = request[0].to_ascii_uppercase();
                    let ends = request.len() == 1 && (name == "EXEC" || name == "DISCARD");
                    in_multi = (in_multi || name == "MULTI" && request.len() == 1) && !ends;
                }
                // A step ends outside MULTI, so the marker after it is answered, not queued.
                if std::mem::take(&mut in_multi) {
                    step.push(vec![rng.pick(&["EXEC", "EXEC", "DISCARD"]).into()]);
                }
                step
            })
            .collect();
        // Each stream starts from an empty keyspace on both.
        for port in [redis.port, port] {
            call(&mut connect(port), &frame(&["FLUSHALL"]));
        }
        let expected = run(redis.port, resp3, &steps, stream_seed);
        let got = run(port, resp3, &steps, stream_seed);
        if expected != got {
            let at = expected.iter().zip(&got).position(|(e, g)| e != g).unwrap_or(0);
            panic!(
                "stream {stream} (seed {stream_seed:#x}, RESP3 {resp3}, {workers} workers) differs at reply {at}\n\
                 steps: {steps:?}\n  redis-server: {:?}\n  quicksilver:  {:?}",
                String::from_utf8_lossy(&expected[at]),
                String::from_utf8_lossy(&got[at])
            );
        }
    }
}

#[test]
fn random_resp_streams_answer_as_redis_server_does_with_one_worker() {
    compare("1");
}

#[test]
fn random_resp_streams_answer_as_redis_server_does_with_four_workers() {
    compare("4");
}
