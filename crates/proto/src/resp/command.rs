//! What a RESP frame asks, checked as redis-server 7.0 checks it (t_string.c, server.c): the
//! command's arity first, then its options, each refusal worded as redis-server words it. A
//! command on one key becomes the one vocabulary's [`Command`], answered in RESP
//! ([`Answer::Resp`]); the connection's own commands are answered where they run.

use super::connection;
use super::owned::{self, Owned};
use super::Frame;
pub use crate::command::RespReply as Reply;
use crate::command::{Answer, Command, Delete, Get, Op, Store};
use crate::StoreMode;
use qs_store::item::MILLIS_EXPTIME_MIN;

/// What a frame asks.
#[derive(Debug)]
pub enum Call<'a> {
    /// A command on one key.
    Key(Command<'a>),
    /// PING, with its optional message.
    Ping(Option<&'a [u8]>),
    /// ECHO.
    Echo(&'a [u8]),
    /// QUIT: `+OK`, then the connection closes.
    Quit,
    /// SELECT of a database (one of `--databases`).
    Select(u8),
    /// SWAPDB of two databases (each one of `--databases`).
    SwapDb(u8, u8),
    /// MGET: the keys are the frame's arguments after the name.
    Mget(Frame<'a>),
    /// EXISTS of several keys: how many are there (a key named twice counts twice).
    ExistsMany(Frame<'a>),
    /// DBSIZE: how many keys.
    DbSize,
    /// HELLO [2|3], with AUTH's user and password if given: the server's description, in the
    /// protocol asked for (the connection speaks it from then on), else in the one it speaks.
    Hello {
        /// The protocol asked for: 2 or 3.
        proto: Option<u8>,
        /// AUTH user password.
        auth: Option<(&'a [u8], &'a [u8])>,
        /// SETNAME name: the connection's name, set once it has authenticated.
        name: Option<&'a [u8]>,
    },
    /// AUTH `[user] password`.
    Auth {
        /// The user (none: the one user, or redis-server's `default`).
        user: Option<&'a [u8]>,
        /// The password.
        password: &'a [u8],
    },
    /// CLIENT ID.
    ClientId,
    /// CLIENT SETNAME name (an empty name clears it).
    ClientSetName(&'a [u8]),
    /// CLIENT GETNAME.
    ClientGetName,
    /// RESET: the connection as it was accepted (RESP2, no name, authenticated again where a
    /// password is asked for); `+RESET`.
    Reset,
    /// `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE]`: the server stops gracefully, where memcached's
    /// `-A` allows it.
    Shutdown,
    /// CLIENT LIST [TYPE type | ID id...]: the connections picked, a line each.
    ClientList(super::connection::Clients<'a>),
    /// CLIENT INFO: the asking connection's line.
    ClientInfo,
    /// CLIENT KILL addr (`old_form`: `+OK` or `No such client`), or CLIENT KILL with filters
    /// (how many went).
    ClientKill {
        /// Which connections.
        clients: super::connection::Clients<'a>,
        /// `CLIENT KILL ip:port`.
        old_form: bool,
    },
    /// CONFIG GET of these patterns (the frame's arguments after `CONFIG GET`).
    ConfigGet(Frame<'a>),
    /// CONFIG SET of these names and values (the frame's arguments after `CONFIG SET`).
    ConfigSet(Frame<'a>),
    /// CONFIG RESETSTAT: the counters count from zero (memcached's `stats reset`).
    ResetStat,
    /// COMMAND COUNT: how many commands are served.
    CommandCount,
    /// COMMAND, or COMMAND INFO of the names after `COMMAND INFO` (none: every command).
    CommandInfo(Option<Frame<'a>>),
    /// A command accepted and answered `+OK` with nothing to do (CLIENT NO-EVICT, AUTH of the
    /// default user).
    Accepted,
    /// COMMAND DOCS: no documents yet (an empty map; clients then use their own tables).
    CommandDocs,
    /// FLUSHALL (`db` None: every key goes) or FLUSHDB of database `db` (its keys go), SYNC
    /// or ASYNC alike.
    Flush { db: Option<u8> },
    /// A command on one key run at its owner as a few steps (read, then write).
    Owned(Owned<'a>),
    /// DEL or UNLINK of several keys: how many of them went.
    DelMany(Frame<'a>),
    /// MSET, or MSETNX (`nx`: none is stored if one is there): the frame's key-value pairs.
    Mset {
        /// The frame.
        frame: Frame<'a>,
        /// MSETNX.
        nx: bool,
    },
    /// TIME: the unix time, seconds and microseconds.
    Time,
    /// KEYS pattern: every key that matches.
    Keys(&'a [u8]),
    /// SCAN: some buckets' keys, and where to go on.
    Scan(Scan<'a>),
    /// RANDOMKEY: a key, or null in an empty cache.
    RandomKey,
    /// INFO of these sections (the frame's arguments after the name; none: the default).
    Info(Frame<'a>),
    /// MULTI: the connection's commands are queued until EXEC.
    Multi,
    /// EXEC: the queued commands run as one step.
    Exec,
    /// DISCARD: the queued commands are dropped.
    Discard,
    /// WATCH of the frame's keys (its arguments after the name): EXEC runs nothing if one of
    /// them changed before it.
    Watch(Frame<'a>),
    /// UNWATCH: no key is watched any more.
    Unwatch,
    /// EVAL, EVALSHA, EVAL_RO or EVALSHA_RO.
    Eval(super::script::Eval<'a>),
    /// SCRIPT's subcommands.
    Script(super::script::Script<'a>),
    /// Refused: the reply's text after `-`.
    Error(Refusal<'a>),
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scan<'a> {
    /// Where to start (0: the beginning).
    pub cursor: u64,
    /// MATCH: only keys that match.
    pub pattern: Option<&'a [u8]>,
    /// COUNT: how many buckets to walk (redis-server's hint; 10 by default).
    pub count: usize,
    /// TYPE: only keys of this type (`string`, `hash`, `list`, `set`; any case).
    pub kind: Option<&'a [u8]>,
}

/// Why a command is refused, worded as redis-server words it.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal<'a> {
    /// `ERR unknown command '<name>', with args beginning with: '<arg>' ...`.
    Unknown(Frame<'a>),
    /// `ERR wrong number of arguments for '<name>' command` (the name lower-cased).
    Arity(&'static str),
    /// `ERR syntax error`.
    Syntax,
    /// `ERR value is not an integer or out of range`.
    NotInteger,
    /// `ERR invalid expire time in '<name>' command`.
    ExpireTime(&'static str),
    /// `ERR DB index is out of range`.
    DbIndex,
    /// `ERR decrement would overflow` (DECRBY of the smallest integer).
    DecrementOverflow,
    /// A form redis-server has that this server does not serve yet (the text after `ERR `).
    Unsupported(&'static str),
    /// A command not served here that redis-server refuses inside MULTI (its `no-multi`
    /// flag): there `ERR Command not allowed inside a transaction`, else `ERR <text>`.
    NoMulti(&'static str),
    /// `ERR <text>`, as redis-server words it.
    Message(&'static str),
    /// `NOPROTO sorry, this protocol version is not supported.`
    NoProto,
    /// `ERR Unsupported option <option>` (EXPIRE's).
    UnsupportedOption(&'a [u8]),
    /// `ERR Syntax error in HELLO option '<option>'`.
    HelloOption(&'a [u8]),
    /// `ERR unknown subcommand '<sub>'. Try <COMMAND> HELP.`
    UnknownSubcommand(Frame<'a>),
    /// `ERR wrong number of arguments for '<command>|<sub>' command`.
    SubcommandArity(Frame<'a>),
    /// `ERR Unknown client type '<type>'` (CLIENT LIST's and KILL's TYPE).
    ClientType(&'a [u8]),
}

/// What `frame` asks, under `limits`: the item size limit (-I) bounds SETRANGE, and relative
/// expiries count from the turn's time (no clock is read here).
pub fn call<'a>(frame: &Frame<'a>, limits: &crate::Limits) -> Call<'a> {
    let now = limits.now_ms as i64;
    let mut args = frame.args();
    let name = args.next().unwrap_or_default();
    let argc = frame.argc();
    // GET key and SET key value, what a cache is asked most: straight to the commands the
    // table's rows below make of them, without looking the name up among the others.
    match argc {
        2 if name.eq_ignore_ascii_case(b"get") => {
            return key(args.next().unwrap_or_default(), Op::Get(Get::default()), Reply::Bulk);
        }
        3 if name.eq_ignore_ascii_case(b"set") => {
            let (k, value) = (args.next().unwrap_or_default(), args.next().unwrap_or_default());
            return key(k, store(StoreMode::Set, value, 0), Reply::Ok);
        }
        _ => {}
    }
    // A transaction's MULTI and EXEC, told apart before the table's scan (they are its last
    // rows).
    if let Some(call) = transaction_call(frame) {
        return call;
    }
    // EVAL and EVALSHA, what lock and rate-limit libraries send on every call: before the
    // table's scan too (they are among its last rows).
    if let Some(call) = super::script::early(frame, name) {
        return call;
    }
    let spelled = match looked_up(frame, name) {
        Ok(spelled) => spelled,
        Err(refused) => return refused,
    };
    // The arguments after the name (the arity is checked: the ones named are there).
    let first =
        [args.next().unwrap_or_default(), args.next().unwrap_or_default(), args.next().unwrap_or_default()];
    match spelled {
        "ping" if argc > 2 => Call::Error(Refusal::Arity(spelled)),
        "ping" => Call::Ping((argc > 1).then_some(first[0])),
        "echo" => Call::Echo(first[0]),
        "quit" => Call::Quit,
        "reset" => Call::Reset,
        "debug" => connection::debug(frame),
        "shutdown" => connection::shutdown(frame),
        "select" => select(first[0], limits.databases),
        "swapdb" => swapdb([first[0], first[1]], limits.databases),
        "get" => key(first[0], Op::Get(Get::default()), Reply::Bulk),
        "set" => set(first, frame.args().skip(3), now),
        "setnx" => key(first[0], store(StoreMode::Add, first[1], 0), Reply::StoredInteger),
        "setex" | "psetex" => setex(spelled, first, now),
        "del" | "unlink" if argc > 2 => Call::DelMany(*frame),
        "del" | "unlink" => key(first[0], Op::Delete(Delete::default()), Reply::Deleted),
        "exists" if argc > 2 => Call::ExistsMany(*frame),
        "exists" => key(first[0], Op::Inspect, Reply::Exists),
        "mget" => Call::Mget(*frame),
        "strlen" => key(first[0], Op::Inspect, Reply::Strlen),
        "type" => key(first[0], Op::Inspect, Reply::Type),
        "append" => key(first[0], append(first[1]), Reply::Appended),
        "dbsize" => Call::DbSize,
        "flushall" => flush(argc, first[0], None),
        "flushdb" => flushdb(frame),
        "hello" => connection::hello(frame),
        "auth" => connection::auth(argc, first),
        "client" => connection::client(frame, first[0], argc),
        "config" => connection::config(frame, first[0], argc),
        "command" => connection::command(frame, first[0], argc),
        "function" => connection::function(frame, first[0], argc),
        "ttl" => key(first[0], Op::Inspect, Reply::Ttl),
        "pttl" => key(first[0], Op::Inspect, Reply::Pttl),
        "expire" | "pexpire" | "expireat" | "pexpireat" if argc > 3 => {
            owned::expire_when(spelled, frame, Unit::of_expire(spelled), now)
        }
        "expire" | "pexpire" | "expireat" | "pexpireat" => expire(spelled, first, now),
        "getdel" => owned::getdel(first[0]),
        "memory" => owned::memory(frame),
        "object" => owned::object(frame),
        "getset" => owned::getset(first[0], first[1]),
        "getex" => getex(first[0], frame, now),
        "persist" => owned::persist(first[0]),
        "expiretime" | "pexpiretime" => owned::expiretime(first[0], spelled == "pexpiretime"),
        "getrange" | "substr" => owned::getrange(first[0], first[1], first[2]),
        "setrange" => {
            owned::setrange(first[0], first[1], frame.arg(3).unwrap_or_default(), limits.item_bytes_max)
        }
        "incrbyfloat" => owned::incrbyfloat(first[0], first[1]),
        name if super::collection::COMMANDS.contains(&name) => {
            super::collection::call(spelled, first[0], frame)
        }
        "mset" | "msetnx" if argc % 2 == 0 => Call::Error(Refusal::Arity(spelled)),
        "mset" | "msetnx" => Call::Mset { frame: *frame, nx: spelled == "msetnx" },
        "time" => Call::Time,
        "info" => Call::Info(*frame),
        "keys" => Call::Keys(first[0]),
        "rename" | "renamenx" => owned::rename(first[0], first[1], spelled == "renamenx"),
        "copy" => owned::copy(frame),
        "move" => owned::move_key(frame, limits.databases),
        "scan" => scan(frame),
        "randomkey" => Call::RandomKey,
        "multi" => Call::Multi,
        "exec" => Call::Exec,
        "discard" => Call::Discard,
        "watch" => Call::Watch(*frame),
        "unwatch" => Call::Unwatch,
        "script" => super::script::script(frame, first[0], argc),
        "incr" => key(first[0], Op::Count { by: 1 }, Reply::Counter),
        "decr" => key(first[0], Op::Count { by: -1 }, Reply::Counter),
        "incrby" => count(first[0], first[1], false),
        _ => count(first[0], first[1], true),
    }
}

/// The command table's spelling of `name`, once its arity is checked (redis-server's: exactly
/// N, or at least -N); else the refusal.
fn looked_up<'a>(frame: &Frame<'a>, name: &[u8]) -> Result<&'static str, Call<'a>> {
    let Some(&(spelled, arity)) =
        TABLE.iter().find(|(spelled, _)| name.eq_ignore_ascii_case(spelled.as_bytes()))
    else {
        return Err(unknown(frame, name));
    };
    let argc = frame.argc();
    let fits = if arity > 0 { argc == arity as usize } else { argc >= arity.unsigned_abs() as usize };
    if !fits {
        return Err(Call::Error(Refusal::Arity(spelled)));
    }
    Ok(spelled)
}

/// A command not in the table: the blocking pops and SAVE refused by name, anything else
/// unknown.
fn unknown<'a>(frame: &Frame<'a>, name: &[u8]) -> Call<'a> {
    if super::collection::BLOCKING.iter().any(|blocking| name.eq_ignore_ascii_case(blocking.as_bytes())) {
        return Call::Error(Refusal::Unsupported("blocking pops (and LMPOP, ZMPOP) are not served yet"));
    }
    if name.eq_ignore_ascii_case(b"save") || name.eq_ignore_ascii_case(b"bgsave") {
        return Call::Error(Refusal::NoMulti(
            "SAVE is not served: the warm restart (-e) keeps the cache across a restart",
        ));
    }
    Call::Error(Refusal::Unknown(*frame))
}

/// MULTI, EXEC, DISCARD, WATCH and UNWATCH, told from the name without looking it up among
/// the other commands (the connection runs them, on every transaction); `None` for any other.
pub fn transaction_call<'a>(frame: &Frame<'a>) -> Option<Call<'a>> {
    let name = frame.arg(0)?;
    let argc = frame.argc();
    let only = |call: Call<'a>, spelled: &'static str| {
        Some(if argc == 1 { call } else { Call::Error(Refusal::Arity(spelled)) })
    };
    match name.len() {
        4 if name.eq_ignore_ascii_case(b"exec") => only(Call::Exec, "exec"),
        5 if name.eq_ignore_ascii_case(b"multi") => only(Call::Multi, "multi"),
        5 if name.eq_ignore_ascii_case(b"watch") => {
            Some(if argc >= 2 { Call::Watch(*frame) } else { Call::Error(Refusal::Arity("watch")) })
        }
        7 if name.eq_ignore_ascii_case(b"discard") => only(Call::Discard, "discard"),
        7 if name.eq_ignore_ascii_case(b"unwatch") => only(Call::Unwatch, "unwatch"),
        _ => None,
    }
}

/// The commands served, as redis-server's command table names them, with its arity.
const TABLE: &[(&str, i32)] = &[
    ("ping", -1),
    ("echo", 2),
    ("quit", -1),
    ("reset", 1),
    ("memory", -2),
    ("object", -2),
    ("debug", -2),
    ("shutdown", -1),
    ("select", 2),
    ("swapdb", 3),
    ("get", 2),
    ("set", -3),
    ("setnx", 3),
    ("setex", 4),
    ("psetex", 4),
    ("del", -2),
    ("unlink", -2),
    ("exists", -2),
    ("mget", -2),
    ("strlen", 2),
    ("type", 2),
    ("append", 3),
    ("dbsize", 1),
    ("hello", -1),
    ("auth", -2),
    ("client", -2),
    ("config", -2),
    ("command", -1),
    ("function", -2),
    ("flushall", -1),
    ("flushdb", -1),
    ("ttl", 2),
    ("pttl", 2),
    ("expire", -3),
    ("pexpire", -3),
    ("expireat", -3),
    ("pexpireat", -3),
    ("incr", 2),
    ("incrby", 3),
    ("decr", 2),
    ("decrby", 3),
    ("getdel", 2),
    ("getset", 3),
    ("getex", -2),
    ("persist", 2),
    ("expiretime", 2),
    ("pexpiretime", 2),
    ("getrange", 4),
    ("substr", 4),
    ("setrange", 4),
    ("incrbyfloat", 3),
    ("mset", -3),
    ("msetnx", -3),
    ("time", 1),
    ("info", -1),
    ("keys", 2),
    ("rename", 3),
    ("renamenx", 3),
    ("copy", -3),
    // MOVE key db: exactly 3 as redis-server counts it (the 4th of a mapped one is checked
    // by owned::move_key).
    ("move", -3),
    ("scan", -2),
    ("randomkey", 1),
    ("multi", 1),
    ("exec", 1),
    ("discard", 1),
    ("watch", -2),
    ("unwatch", 1),
    ("eval", -3),
    ("evalsha", -3),
    ("eval_ro", -3),
    ("evalsha_ro", -3),
    ("script", -2),
    ("hset", -4),
    ("hsetnx", 4),
    ("hmset", -4),
    ("hget", 3),
    ("hmget", -3),
    ("hgetall", 2),
    ("hdel", -3),
    ("hexists", 3),
    ("hlen", 2),
    ("hkeys", 2),
    ("hvals", 2),
    ("hstrlen", 3),
    ("hincrby", 4),
    ("hincrbyfloat", 4),
    ("hrandfield", -2),
    ("hscan", -3),
    ("lpush", -3),
    ("rpush", -3),
    ("lpushx", -3),
    ("rpushx", -3),
    ("lpop", -2),
    ("rpop", -2),
    ("llen", 2),
    ("lrange", 4),
    ("lindex", 3),
    ("lset", 4),
    ("linsert", 5),
    ("lrem", 4),
    ("ltrim", 4),
    ("lpos", -3),
    ("lmove", 5),
    ("rpoplpush", 3),
    ("sadd", -3),
    ("srem", -3),
    ("smembers", 2),
    ("sismember", 3),
    ("smismember", -3),
    ("scard", 2),
    ("spop", -2),
    ("srandmember", -2),
    ("sscan", -3),
    ("sinter", -2),
    ("sunion", -2),
    ("sdiff", -2),
    ("sinterstore", -3),
    ("sunionstore", -3),
    ("sdiffstore", -3),
    ("smove", 4),
    ("zadd", -4),
    ("zincrby", 4),
    ("zrem", -3),
    ("zscore", 3),
    ("zmscore", -3),
    ("zcard", 2),
    ("zcount", 4),
    ("zlexcount", 4),
    ("zrank", 3),
    ("zrevrank", 3),
    ("zrange", -4),
    ("zrevrange", -4),
    ("zrangebyscore", -4),
    ("zrevrangebyscore", -4),
    ("zrangebylex", -4),
    ("zrevrangebylex", -4),
    ("zremrangebyscore", 4),
    ("zremrangebyrank", 4),
    ("zremrangebylex", 4),
    ("zpopmin", -2),
    ("zpopmax", -2),
    ("zscan", -3),
    ("zrandmember", -2),
];

pub(super) fn key<'a>(key: &'a [u8], op: Op<'a>, reply: Reply) -> Call<'a> {
    Call::Key(Command { key, op, answer: Answer::Resp(reply) })
}

pub(super) fn store(mode: StoreMode, data: &[u8], exptime: i64) -> Op<'_> {
    Op::Store(Store { mode, flags: 0, exptime, data, vivify: None, cas_in: None, drops_refused: false })
}

/// APPEND: memcached's append, creating a missing key (meta's N).
fn append(data: &[u8]) -> Op<'_> {
    match store(StoreMode::Append, data, 0) {
        Op::Store(store) => Op::Store(Store { vivify: Some(0), ..store }),
        other => other,
    }
}

/// How many commands are served (the command table's length).
pub fn served_count() -> usize {
    TABLE.len()
}

/// FLUSHALL and FLUSHDB take SYNC or ASYNC, nothing else.
fn flush(argc: usize, option: &[u8], db: Option<u8>) -> Call<'_> {
    let known = option.eq_ignore_ascii_case(b"sync") || option.eq_ignore_ascii_case(b"async");
    match argc {
        1 => Call::Flush { db },
        2 if known => Call::Flush { db },
        _ => Call::Error(Refusal::Syntax),
    }
}

/// FLUSHDB of database 0, or of the database its last argument names where a connection in
/// another database sent it (super::db::map adds it).
fn flushdb<'a>(frame: &Frame<'a>) -> Call<'a> {
    let argc = frame.argc();
    let last = frame.arg(argc - 1).unwrap_or_default();
    let db = match last {
        [0xFF, 0xFF, db] if argc > 1 && *db != 0 => Some(*db),
        _ => None,
    };
    let argc = if db.is_some() { argc - 1 } else { argc };
    flush(argc, frame.arg(1).filter(|_| argc > 1).unwrap_or_default(), Some(db.unwrap_or(0)))
}

/// SELECT of one of `databases` databases.
/// SWAPDB's two databases, refused as redis-server refuses them.
fn swapdb(indices: [&[u8]; 2], databases: u32) -> Call<'static> {
    let (Some(first), Some(second)) = (integer(indices[0]), integer(indices[1])) else {
        let which =
            if integer(indices[0]).is_none() { "invalid first DB index" } else { "invalid second DB index" };
        return Call::Error(Refusal::Message(which));
    };
    let range = 0..i64::from(databases);
    if !range.contains(&first) || !range.contains(&second) {
        return Call::Error(Refusal::DbIndex);
    }
    Call::SwapDb(first as u8, second as u8)
}

fn select(index: &[u8], databases: u32) -> Call<'_> {
    match integer(index) {
        None => Call::Error(Refusal::NotInteger),
        Some(db) if (0..i64::from(databases)).contains(&db) => Call::Select(db as u8),
        Some(_) => Call::Error(Refusal::DbIndex),
    }
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT t|PXAT ms-t|KEEPTTL], parsed as t_string.c's
/// `parseExtendedStringArgumentsOrReply` does (each option once, exclusive ones refused).
fn set<'a>(args: [&'a [u8]; 3], options: impl Iterator<Item = &'a [u8]>, now: i64) -> Call<'a> {
    let (mut mode, mut expiry) = (StoreMode::Set, None::<(&[u8], Unit)>);
    let (mut keep_ttl, mut get) = (false, false);
    let mut options = options.peekable();
    while let Some(option) = options.next() {
        let next = options.peek().copied();
        let is = |name: &str| option.eq_ignore_ascii_case(name.as_bytes());
        if is("nx") && mode != StoreMode::Replace {
            mode = StoreMode::Add;
        } else if is("xx") && mode != StoreMode::Add {
            mode = StoreMode::Replace;
        } else if is("get") {
            get = true;
        } else if is("keepttl") && expiry.is_none() {
            keep_ttl = true;
        } else if let (Some(unit), Some(value), false) = (Unit::named(option), next, keep_ttl) {
            // The same unit again replaces the first (redis-server checks the others only).
            if expiry.is_some_and(|(_, before)| before != unit) {
                return Call::Error(Refusal::Syntax);
            }
            expiry = Some((value, unit));
            options.next();
        } else {
            return Call::Error(Refusal::Syntax);
        }
    }
    let exptime = match expiry {
        None => 0,
        Some((value, unit)) => match exptime(value, unit, "set", now) {
            Ok(exptime) => exptime,
            Err(refusal) => return Call::Error(refusal),
        },
    };
    if keep_ttl || get {
        let exptime = (!keep_ttl).then_some(exptime);
        return owned::set_owned((args[0], args[1]), mode, exptime, get);
    }
    key(args[0], store(mode, args[1], exptime), Reply::Ok)
}

/// SCAN's arguments, as db.c's `scanGenericCommand` reads them.
fn scan<'a>(frame: &Frame<'a>) -> Call<'a> {
    let cursor = frame.arg(1).unwrap_or_default();
    let Some(cursor) = std::str::from_utf8(cursor).ok().and_then(|text| text.parse::<u64>().ok()) else {
        return Call::Error(Refusal::Message("invalid cursor"));
    };
    let mut scan = Scan { cursor, pattern: None, count: 10, kind: None };
    let mut options = frame.args().skip(2);
    while let Some(option) = options.next() {
        let is = |name: &str| option.eq_ignore_ascii_case(name.as_bytes());
        let Some(value) = options.next() else {
            return Call::Error(Refusal::Syntax);
        };
        if is("count") {
            match integer(value) {
                None => return Call::Error(Refusal::NotInteger),
                Some(count) if count < 1 => return Call::Error(Refusal::Syntax),
                Some(count) => scan.count = count.min(1 << 20) as usize,
            }
        } else if is("match") {
            scan.pattern = (value != b"*").then_some(value);
        } else if is("type") {
            scan.kind = Some(value);
        } else {
            return Call::Error(Refusal::Syntax);
        }
    }
    Call::Scan(scan)
}

/// GETEX key [EX s|PX ms|EXAT t|PXAT ms-t|PERSIST]: a get, touching when asked (PERSIST: no
/// expiry); options as t_string.c's `parseExtendedStringArgumentsOrReply` reads GETEX's.
fn getex<'a>(key_bytes: &'a [u8], frame: &Frame<'a>, now: i64) -> Call<'a> {
    let mut options = frame.args().skip(2);
    let mut expiry = None::<(&[u8], Unit)>;
    let mut persist = false;
    while let Some(option) = options.next() {
        if option.eq_ignore_ascii_case(b"persist") && expiry.is_none() {
            persist = true;
            continue;
        }
        // The same unit again replaces the first, as in SET.
        let (Some(unit), false) = (Unit::named(option), persist) else {
            return Call::Error(Refusal::Syntax);
        };
        match options.next() {
            Some(value) if !expiry.is_some_and(|(_, before)| before != unit) => expiry = Some((value, unit)),
            _ => return Call::Error(Refusal::Syntax),
        }
    }
    let touch = match (expiry, persist) {
        (_, true) => Some(0),
        (None, false) => None,
        (Some((value, unit)), false) => match exptime(value, unit, "getex", now) {
            Ok(exptime) => Some(exptime),
            Err(refusal) => {
                let not_integer = refusal == Refusal::NotInteger;
                let step = super::owned::Step::GetExRefused { not_integer };
                return Call::Owned(super::owned::Owned { key: key_bytes, step });
            }
        },
    };
    key(key_bytes, Op::Get(Get { touch, ..Get::default() }), Reply::Bulk)
}

/// SETEX key seconds value, PSETEX key milliseconds value.
fn setex<'a>(name: &'static str, args: [&'a [u8]; 3], now: i64) -> Call<'a> {
    let unit = if name == "setex" { Unit::Seconds } else { Unit::Millis };
    match exptime(args[1], unit, name, now) {
        Ok(exptime) => key(args[0], store(StoreMode::Set, args[2], exptime), Reply::Ok),
        Err(refusal) => Call::Error(refusal),
    }
}

/// EXPIRE key seconds, PEXPIRE key ms, EXPIREAT key unix-seconds, PEXPIREAT key unix-ms: a
/// touch; a time not in the future expires the key at once (redis-server deletes it).
fn expire<'a>(name: &'static str, args: [&'a [u8]; 3], now: i64) -> Call<'a> {
    match expire_exptime(args[1], Unit::of_expire(name), name, now) {
        Ok(exptime) => key(args[0], Op::Touch { exptime, read: false }, Reply::Expired),
        Err(refusal) => Call::Error(refusal),
    }
}

/// EXPIRE's time as the store's exptime, checked as expire.c checks it: in milliseconds it
/// must not overflow, a relative one once the clock is added; a time not in the future is -1
/// (the key goes at once), any other the unix millisecond it expires at
/// ([`qs_store::item::MILLIS_EXPTIME_MIN`] and up). `now`: the turn's unix millisecond.
pub(super) fn expire_exptime(
    value: &[u8],
    unit: Unit,
    name: &'static str,
    now: i64,
) -> Result<i64, Refusal<'static>> {
    let value = integer(value).ok_or(Refusal::NotInteger)?;
    let millis = match unit {
        Unit::Seconds | Unit::UnixSeconds => value.checked_mul(1000).ok_or(Refusal::ExpireTime(name))?,
        Unit::Millis | Unit::UnixMillis => value,
    };
    let base = if matches!(unit, Unit::Seconds | Unit::Millis) { now } else { 0 };
    let at = millis.checked_add(base).ok_or(Refusal::ExpireTime(name))?;
    Ok(if at <= now { -1 } else { at.max(MILLIS_EXPTIME_MIN) })
}

/// INCRBY and DECRBY (`negate`): a missing key counts from 0.
fn count<'a>(key_bytes: &'a [u8], by: &[u8], negate: bool) -> Call<'a> {
    match (integer(by), negate) {
        (None, _) => Call::Error(Refusal::NotInteger),
        (Some(i64::MIN), true) => Call::Error(Refusal::DecrementOverflow),
        (Some(by), negate) => key(key_bytes, Op::Count { by: if negate { -by } else { by } }, Reply::Counter),
    }
}

/// An expiry's unit and whether it is absolute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unit {
    Seconds,
    Millis,
    UnixSeconds,
    UnixMillis,
}

impl Unit {
    /// EXPIRE's (seconds), PEXPIRE's, EXPIREAT's or PEXPIREAT's.
    pub(super) fn of_expire(name: &str) -> Unit {
        match name {
            "expire" => Unit::Seconds,
            "pexpire" => Unit::Millis,
            "expireat" => Unit::UnixSeconds,
            _ => Unit::UnixMillis,
        }
    }

    fn named(option: &[u8]) -> Option<Unit> {
        [("ex", Unit::Seconds), ("px", Unit::Millis), ("exat", Unit::UnixSeconds), ("pxat", Unit::UnixMillis)]
            .into_iter()
            .find(|(name, _)| option.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, unit)| unit)
    }
}

/// A Redis expiry (SET's EX, PX, EXAT, PXAT; SETEX, PSETEX, GETEX) as the store's exptime:
/// the unix millisecond it expires at ([`qs_store::item::MILLIS_EXPTIME_MIN`] and up), so it is
/// kept to the millisecond, or -1 for one not in the future (memcached's already expired).
/// Refused as redis-server refuses it: not above zero, or overflowing once in milliseconds
/// and, for a relative one, once `now` (the turn's unix millisecond) is added.
pub(super) fn exptime(
    value: &[u8],
    unit: Unit,
    name: &'static str,
    now: i64,
) -> Result<i64, Refusal<'static>> {
    let value = integer(value).ok_or(Refusal::NotInteger)?;
    let too_long = matches!(unit, Unit::Seconds | Unit::UnixSeconds) && value > i64::MAX / 1000;
    if value <= 0 || too_long {
        return Err(Refusal::ExpireTime(name));
    }
    let millis = if matches!(unit, Unit::Seconds | Unit::UnixSeconds) { value * 1000 } else { value };
    let at = match unit {
        Unit::Seconds | Unit::Millis => millis.checked_add(now).ok_or(Refusal::ExpireTime(name))?,
        Unit::UnixSeconds | Unit::UnixMillis => millis,
    };
    Ok(if at <= now { -1 } else { at.max(MILLIS_EXPTIME_MIN) })
}

/// A signed 64-bit integer as redis-server's `string2ll` reads it.
pub fn integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || (digits[0] == b'0' && (negative || digits.len() > 1)) {
        return None;
    }
    let mut value: i64 = 0;
    for &byte in digits {
        if !byte.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(byte - b'0');
        value = value.checked_mul(10)?;
        value = if negative { value.checked_sub(digit)? } else { value.checked_add(digit)? };
    }
    Some(value)
}
