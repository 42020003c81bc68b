//! RESP2 and RESP3 replies as redis-server 7.0 writes them ([`crate::command::Answer::Resp`]).

use super::command::{Refusal, Reply};
use crate::out::append;
use crate::response::{push_i64, push_u64};
use qs_store::{Hit, Now, Outcome};

/// The null bulk string (a miss; a SET that NX or XX kept from storing).
pub const NULL: &[u8] = b"$-1\r\n";
/// RESP3's null, where RESP2 writes [`NULL`].
pub const NULL3: &[u8] = b"_\r\n";

/// The null of a connection that speaks RESP3 (`resp3`) or RESP2.
pub const fn null(resp3: bool) -> &'static [u8] {
    if resp3 {
        NULL3
    } else {
        NULL
    }
}

/// The null `reply` writes: `$-1` in RESP2, `_` in RESP3.
pub const fn null_of(reply: Reply) -> &'static [u8] {
    null(matches!(reply, Reply::Bulk3 | Reply::Ok3 | Reply::Element3))
}

/// The head of a map of `pairs` names and values: RESP3's map, or RESP2's flat array of
/// twice as many elements.
pub fn map_head(pairs: usize, resp3: bool, out: &mut Vec<u8>) {
    if resp3 {
        out.push(b'%');
        push_u64(out, pairs as u64);
    } else {
        out.push(b'*');
        push_u64(out, 2 * pairs as u64);
    }
    out.extend_from_slice(b"\r\n");
}

/// Text for people (INFO): RESP3's verbatim string of format `txt`, or a RESP2 bulk string.
pub fn text(text: &[u8], resp3: bool, out: &mut Vec<u8>) {
    if !resp3 {
        return bulk(text, out);
    }
    out.push(b'=');
    push_u64(out, text.len() as u64 + 4);
    out.extend_from_slice(b"\r\ntxt:");
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}
/// `+OK`.
pub const OK: &[u8] = b"+OK\r\n";
/// RESET's answer.
pub const RESET: &[u8] = b"+RESET\r\n";
/// A command queued inside MULTI.
pub const QUEUED: &[u8] = b"+QUEUED\r\n";
/// EXEC of a transaction a queued command was refused in.
pub const EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";
/// EXEC of a transaction that may use memory, while the server is out of memory.
pub const EXECABORT_OOM: &[u8] =
    b"-EXECABORT Transaction discarded because of: OOM command not allowed when used memory > 'maxmemory'.\r\n";
/// EXEC without MULTI.
pub const EXEC_WITHOUT_MULTI: &[u8] = b"-ERR EXEC without MULTI\r\n";
/// DISCARD without MULTI.
pub const DISCARD_WITHOUT_MULTI: &[u8] = b"-ERR DISCARD without MULTI\r\n";
/// MULTI inside MULTI.
pub const MULTI_NESTED: &[u8] = b"-ERR MULTI calls can not be nested\r\n";
/// WATCH inside MULTI.
pub const WATCH_IN_MULTI: &[u8] = b"-ERR WATCH inside MULTI is not allowed\r\n";
/// EXEC that ran nothing because a watched key changed: a null array.
pub const fn exec_null(resp3: bool) -> &'static [u8] {
    if resp3 {
        NULL3
    } else {
        b"*-1\r\n"
    }
}
/// `+PONG`.
pub const PONG: &[u8] = b"+PONG\r\n";
/// redis-server's answer when maxmemory leaves no room.
pub const OOM: &[u8] = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n";
/// A value over the item size limit (-I); redis-server has no such limit.
pub const TOO_LARGE: &[u8] = b"-ERR object too large for cache\r\n";
/// A key over memcached's 250 bytes; redis-server has no such limit.
pub const BAD_KEY: &[u8] = b"-ERR key is empty or longer than 65536 bytes\r\n";
/// AUTH's refusal of a wrong user or password.
pub const WRONGPASS: &[u8] = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";
/// AUTH of a password where none is configured.
pub const AUTH_WITHOUT_PASSWORD: &[u8] = b"-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n";
/// A command before authentication.
pub const NOAUTH: &[u8] = b"-NOAUTH Authentication required.\r\n";
/// CLIENT SETNAME's (and HELLO's SETNAME's) refusal of a name with a space or a byte outside
/// printable ASCII.
pub const BAD_CLIENT_NAME: &[u8] =
    b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n";
/// HELLO without AUTH before authentication.
pub const NOAUTH_HELLO: &[u8] = b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n";
/// `ERR value is not an integer or out of range`.
pub const NOT_INTEGER: &[u8] = b"-ERR value is not an integer or out of range\r\n";

/// An integer reply.
pub fn integer(value: i64, out: &mut Vec<u8>) {
    out.push(b':');
    push_i64(out, value);
    append(out, b"\r\n");
}

/// A bulk string.
pub fn bulk(bytes: &[u8], out: &mut Vec<u8>) {
    bulk_head(bytes.len(), out);
    append(out, bytes);
    append(out, b"\r\n");
}

/// A bulk string's length line.
#[inline(always)]
pub fn bulk_head(len: usize, out: &mut Vec<u8>) {
    out.push(b'$');
    push_u64(out, len as u64);
    append(out, b"\r\n");
}

/// What a failed outcome says, if it is one of the store's refusals.
pub fn refused(outcome: &Outcome) -> Option<&'static [u8]> {
    match outcome {
        Outcome::TooLarge => Some(TOO_LARGE),
        Outcome::OutOfMemory => Some(OOM),
        Outcome::BadKey => Some(BAD_KEY),
        _ => None,
    }
}

/// A store's reply; `size` is the value's length once stored (APPEND's answer).
pub fn store(reply: Reply, outcome: &Outcome, size: usize, out: &mut Vec<u8>) {
    if let Some(text) = refused(outcome) {
        return out.extend_from_slice(text);
    }
    let stored = matches!(outcome, Outcome::Stored { .. });
    match (reply, stored) {
        // An append whose joined value would outgrow the item limit is refused unchanged.
        (Reply::Appended, false) => out.extend_from_slice(TOO_LARGE),
        (Reply::Appended, true) => integer(size as i64, out),
        (Reply::StoredInteger, _) => integer(i64::from(stored), out),
        (_, true) => append(out, OK),
        (reply, false) => out.extend_from_slice(null_of(reply)),
    }
}

/// DEL's reply: how many keys went.
pub(crate) fn delete(outcome: &Outcome, out: &mut Vec<u8>) {
    match refused(outcome) {
        Some(text) => out.extend_from_slice(text),
        None => integer(i64::from(*outcome == Outcome::Deleted), out),
    }
}

/// INCR's and DECR's reply: the new value, or why not.
pub(crate) fn arith(outcome: &Outcome, out: &mut Vec<u8>) {
    match *outcome {
        // A signed count's value, as its bits (qs_store::Command::Count).
        Outcome::Counter { value, .. } => integer(value as i64, out),
        Outcome::Overflow => out.extend_from_slice(b"-ERR increment or decrement would overflow\r\n"),
        Outcome::NonNumeric => out.extend_from_slice(NOT_INTEGER),
        ref other => out.extend_from_slice(refused(other).unwrap_or(NOT_INTEGER)),
    }
}

/// What goes before a hit's value: the bulk string's length line; whether the value
/// follows. A collection is no string: GET answers WRONGTYPE, and MGET null in its place.
#[inline(always)]
pub(crate) fn hit_head(reply: Reply, hit: &Hit, out: &mut Vec<u8>) -> bool {
    if super::collection::is_collection(hit.flags) {
        out.extend_from_slice(match reply {
            Reply::Element | Reply::Element3 => null_of(reply),
            _ => super::collection::WRONGTYPE,
        });
        return false;
    }
    bulk_head(hit.value_len, out);
    true
}

/// EXPIRE's reply: whether the key was there.
pub(crate) fn touch(outcome: &Outcome, out: &mut Vec<u8>) {
    match refused(outcome) {
        Some(text) => out.extend_from_slice(text),
        None => integer(i64::from(matches!(outcome, Outcome::Touched | Outcome::Hit(_))), out),
    }
}

/// EXISTS, TTL and PTTL, from the item found (if any) at `now`.
pub(crate) fn inspect(reply: Reply, found: Option<&Hit>, now: Now, out: &mut Vec<u8>) {
    // Milliseconds left; TTL rounds them to the nearest second, as redis-server does.
    let left = |hit: &Hit| match hit.expiry {
        qs_store::Expiry::NEVER => -1,
        expiry => expiry.ms().saturating_sub(now.ms()) as i64,
    };
    let value = match (reply, found) {
        (Reply::Ttl | Reply::Pttl, None) => -2,
        (Reply::Ttl, Some(hit)) => match left(hit) {
            -1 => -1,
            ms => (ms + 500) / 1000,
        },
        (Reply::Type, found) => {
            let kind = found.and_then(|hit| super::collection::Kind::of_flags(hit.flags));
            return match (found, kind) {
                (_, Some(kind)) => {
                    out.push(b'+');
                    out.extend_from_slice(kind.name().as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
                (Some(_), None) => out.extend_from_slice(b"+string\r\n"),
                (None, _) => out.extend_from_slice(b"+none\r\n"),
            };
        }
        (Reply::Strlen, Some(hit)) if super::collection::is_collection(hit.flags) => {
            return out.extend_from_slice(super::collection::WRONGTYPE);
        }
        (Reply::Strlen, found) => found.map_or(0, |hit| hit.value_len as i64),
        (Reply::Pttl, Some(hit)) => left(hit),
        (_, found) => i64::from(found.is_some()),
    };
    integer(value, out);
}

/// HELLO's description of the server: a map in RESP3, a flat array of names and values in
/// RESP2. It names the Redis release whose protocol it answers as its version, as clients
/// gate features on it.
pub fn hello(id: u64, resp3: bool, out: &mut Vec<u8>) {
    map_head(7, resp3, out);
    for (name, value) in [("server", "redis"), ("version", "7.0.15")] {
        bulk(name.as_bytes(), out);
        bulk(value.as_bytes(), out);
    }
    bulk(b"proto", out);
    integer(if resp3 { 3 } else { 2 }, out);
    bulk(b"id", out);
    integer(id as i64, out);
    for (name, value) in [("mode", "standalone"), ("role", "master")] {
        bulk(name.as_bytes(), out);
        bulk(value.as_bytes(), out);
    }
    bulk(b"modules", out);
    out.extend_from_slice(b"*0\r\n");
}

/// A refused command's reply.
pub fn refusal(refusal: &Refusal<'_>, out: &mut Vec<u8>) {
    match refusal {
        Refusal::Unknown(frame) => unknown(frame, out),
        Refusal::Arity(name) => {
            out.extend_from_slice(b"-ERR wrong number of arguments for '");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"' command\r\n");
        }
        Refusal::Syntax => out.extend_from_slice(b"-ERR syntax error\r\n"),
        Refusal::NotInteger => out.extend_from_slice(NOT_INTEGER),
        Refusal::ExpireTime(name) => {
            out.extend_from_slice(b"-ERR invalid expire time in '");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"' command\r\n");
        }
        Refusal::DbIndex => out.extend_from_slice(b"-ERR DB index is out of range\r\n"),
        Refusal::DecrementOverflow => out.extend_from_slice(b"-ERR decrement would overflow\r\n"),
        Refusal::Unsupported(text) | Refusal::Message(text) | Refusal::NoMulti(text) => {
            out.extend_from_slice(b"-ERR ");
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Refusal::NoProto => {
            out.extend_from_slice(b"-NOPROTO sorry, this protocol version is not supported.\r\n")
        }
        Refusal::HelloOption(option) => quoted(b"Syntax error in HELLO option ", option, out),
        Refusal::UnsupportedOption(option) => {
            let start = out.len();
            out.extend_from_slice(b"-ERR Unsupported option ");
            out.extend_from_slice(option);
            spaces_for_line_ends(&mut out[start + 1..]);
            out.extend_from_slice(b"\r\n");
        }
        Refusal::UnknownSubcommand(frame) => {
            let (name, sub) = (frame.arg(0).unwrap_or_default(), frame.arg(1).unwrap_or_default());
            let start = out.len();
            out.extend_from_slice(b"-ERR unknown subcommand '");
            out.extend_from_slice(&sub[..sub.len().min(128)]);
            out.extend_from_slice(b"'. Try ");
            out.extend(name.iter().map(u8::to_ascii_uppercase));
            out.extend_from_slice(b" HELP.");
            spaces_for_line_ends(&mut out[start + 1..]);
            out.extend_from_slice(b"\r\n");
        }
        Refusal::ClientType(name) => quoted(b"Unknown client type ", name, out),
        Refusal::SubcommandArity(frame) => {
            let (name, sub) = (frame.arg(0).unwrap_or_default(), frame.arg(1).unwrap_or_default());
            out.extend_from_slice(b"-ERR wrong number of arguments for '");
            out.extend(name.iter().map(u8::to_ascii_lowercase));
            out.push(b'|');
            out.extend(sub.iter().map(u8::to_ascii_lowercase));
            out.extend_from_slice(b"' command\r\n");
        }
    }
}

/// `-ERR <text>'<quoted>'`, the client's bytes quoted as redis-server quotes them.
fn quoted(text: &[u8], quoted: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(b"-ERR ");
    out.extend_from_slice(text);
    out.push(b'\'');
    out.extend_from_slice(quoted);
    out.push(b'\'');
    spaces_for_line_ends(&mut out[start + 1..]);
    out.extend_from_slice(b"\r\n");
}

/// redis-server's error lines turn `\r` and `\n` into spaces.
fn spaces_for_line_ends(text: &mut [u8]) {
    for byte in text {
        if *byte == b'\r' || *byte == b'\n' {
            *byte = b' ';
        }
    }
}

/// redis-server's `unknown command '%.128s', with args beginning with: ` and each argument as
/// `'%.*s' ` while fewer than 128 bytes are written (each cut to what is left of 128), with
/// `\r` and `\n` turned into spaces.
fn unknown(frame: &super::Frame<'_>, out: &mut Vec<u8>) {
    let start = out.len();
    let mut args = frame.args();
    let name = args.next().unwrap_or_default();
    out.extend_from_slice(b"-ERR unknown command '");
    out.extend_from_slice(&name[..name.len().min(128)]);
    out.extend_from_slice(b"', with args beginning with: ");
    let mut written = 0;
    for arg in args {
        if written >= 128 {
            break;
        }
        let take = arg.len().min(128 - written);
        out.push(b'\'');
        out.extend_from_slice(&arg[..take]);
        out.extend_from_slice(b"' ");
        written += take + 3;
    }
    spaces_for_line_ends(&mut out[start + 1..]);
    out.extend_from_slice(b"\r\n");
}
