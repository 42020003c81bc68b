//! The Redis protocol (RESP2 and RESP3), as redis-server 7.0 reads it (networking.c's
//! `processMultibulkBuffer` and `processInlineBuffer`): a request is an array of bulk strings
//! (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) or an inline line (`PING\r\n`, as telnet sends it).
//! [`parse`] checks a whole request's framing once and returns it as a [`Frame`] borrowing the
//! buffer; its arguments are walked again, without checks, where it runs ([`Frame::args`]).
//! A framing error is redis-server's `-ERR Protocol error: ...` reply, after which the
//! connection closes, as redis-server closes it.
//!
//! Which commands a frame names, their arity and options: [`command`]. Replies: [`reply`].

pub mod collection;
pub mod command;
mod command_table;
pub mod connection;
pub mod db;
pub mod glob;
pub mod owned;
pub mod reply;
pub mod script;
#[cfg(test)]
mod tests;

use crate::resp_frame::{digits, find_cr, inline_word};
pub use crate::resp_frame::{Args, Frame, ProtocolError};
use crate::{Parsed, Request};

/// Longest inline request, or multibulk or bulk count line, before the request is refused
/// (redis-server's PROTO_INLINE_MAX_SIZE).
pub const INLINE_BYTES_MAX: usize = 64 * 1024;
/// Largest bulk string (redis-server's default proto-max-bulk-len, 512 MB).
pub const BULK_BYTES_MAX: u64 = 512 * 1024 * 1024;
/// Most arguments in one request: redis-server's bound (INT_MAX). What so many arguments
/// hold is bounded by the client memory budget as they arrive.
pub const ARGS_MAX: u64 = i32::MAX as u64;

/// What parsing found at the front of the buffer, besides a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// An empty line or a multibulk count of zero or less: redis-server skips it silently.
    Empty,
    /// Malformed: the connection closes after the reply.
    Error(ProtocolError),
}

/// The RESP request at the front of `buf`: a [`Request::RespKey`] (a command on one key) or
/// [`Request::Resp`], a skipped empty request, or
/// [`Request::RespProtocolError`] (whose `len` is the whole buffer: nothing after it is read).
/// A request's bounds are redis-server's (a bulk string of at most proto-max-bulk-len, 512 MB;
/// at most [`ARGS_MAX`] arguments), not the item size limit: a value over -I is framed (its
/// bytes taken from the client memory budget, or the request refused for memory) and then
/// refused as too large for the cache, with an error reply, the connection in step.
pub fn parse<'a>(buf: &'a [u8], limits: &crate::Limits) -> Parsed<'a> {
    parse_as(buf, limits, false)
}

/// As [`parse`], for a connection that speaks RESP3 (`HELLO 3`): the request's replies are
/// RESP3's ([`crate::command::RespReply::resp3`], [`Frame::resp3`]).
pub fn parse3<'a>(buf: &'a [u8], limits: &crate::Limits) -> Parsed<'a> {
    parse_as(buf, limits, true)
}

/// [`parse`] (`resp3` false) or [`parse3`].
#[inline(always)]
pub fn parse_as<'a>(buf: &'a [u8], limits: &crate::Limits, resp3: bool) -> Parsed<'a> {
    let bulk_max = BULK_BYTES_MAX;
    if let Some((mut command, len)) = get_or_set(buf, bulk_max) {
        if let (true, crate::command::Answer::Resp(reply)) = (resp3, command.answer) {
            command.answer = crate::command::Answer::Resp(reply.resp3());
        }
        return Parsed::Request { request: Request::RespKey(command), len };
    }
    match frame_at(buf, bulk_max) {
        None => Parsed::Incomplete,
        Some((Ok(frame), _)) if is_http(&frame) => Parsed::Request {
            request: Request::RespProtocolError(ProtocolError::CrossProtocol),
            len: buf.len(),
        },
        Some((Ok(frame), len)) => {
            let request = match command::call(&frame, limits) {
                command::Call::Key(mut command) if resp3 => {
                    if let crate::command::Answer::Resp(reply) = command.answer {
                        command.answer = crate::command::Answer::Resp(reply.resp3());
                    }
                    Request::RespKey(command)
                }
                command::Call::Key(command) => Request::RespKey(command),
                _ if resp3 => Request::Resp(frame.in_resp3()),
                _ => Request::Resp(frame),
            };
            Parsed::Request { request, len }
        }
        Some((Err(Framing::Empty), len)) => Parsed::Refused { reply: "", len, noreply: true },
        Some((Err(Framing::Error(why)), _)) => {
            Parsed::Request { request: Request::RespProtocolError(why), len: buf.len() }
        }
    }
}

/// A RESP request's key, guessed before it is parsed (its second bulk string: the key of
/// GET, SET and every command on one key), for the prefetch of a turn's first requests.
pub fn key_guess(buf: &[u8]) -> Option<&[u8]> {
    let bulk = |at: usize| -> Option<(&[u8], usize)> {
        let rest = buf.get(at..)?;
        let cr = rest.iter().take(12).position(|&byte| byte == b'\r')?;
        let len = digits(rest.get(1..cr)?)? as usize;
        let start = at + cr + 2;
        Some((buf.get(start..start + len)?, start + len + 2))
    };
    let first = buf.iter().take(12).position(|&byte| byte == b'\n')? + 1;
    let (_, next) = bulk(first)?;
    let (key, _) = bulk(next)?;
    (!key.is_empty() && key.len() <= crate::KEY_BYTES_MAX).then_some(key)
}

/// How far the framing of a multibulk request still arriving got ([`progress`]): where the
/// first argument not all here starts, how many came before it, and how many there are
/// (0: nothing walked yet). Offsets are from the request's first byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    at: usize,
    args: u64,
    count: u64,
}

impl Progress {
    /// Whether a walk has started (else it starts at the request's first byte).
    pub fn started(self) -> bool {
        self.count > 0
    }
}

/// What [`progress`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walked {
    /// A multibulk request not all here: how far it got, and how long the request is at least
    /// (through the end of the bulk string arriving now), where that is known.
    Arriving { progress: Progress, at_least: Option<usize> },
    /// Anything else: a request all here, another form, or broken framing ([`parse`] says).
    Other,
}

/// Walks the multibulk request at the front of `buf` on from `from` (what the last call found
/// for the same request, as it was then; [`Progress::default`] the first time), so a request
/// of many arguments arriving a read at a time is walked once in all, not from its start on
/// every read. The same checks as [`parse`]'s, which reads the request once it is all here.
pub fn progress(buf: &[u8], from: Progress) -> Walked {
    let mut progress = from;
    if !progress.started() {
        if buf.first() != Some(&b'*') {
            return Walked::Other;
        }
        let Some(cr) = find_cr(buf) else { return Walked::Other };
        match number(&buf[1..cr]) {
            Some(count) if (1..=ARGS_MAX as i64).contains(&count) => {
                progress = Progress { at: cr + 2, args: 0, count: count as u64 };
            }
            _ => return Walked::Other,
        }
    }
    while progress.args < progress.count {
        let Some(rest) = buf.get(progress.at..) else { return Walked::Other };
        let Some(cr) = find_cr(rest) else {
            return match rest.len() > INLINE_BYTES_MAX {
                true => Walked::Other,
                false => Walked::Arriving { progress, at_least: None },
            };
        };
        // An argument's line that is empty (`\r` first) is refused, as any not `$<length>` is.
        let len = match (rest[0], rest.get(1..cr).and_then(number)) {
            (b'$', Some(len)) if (0..=BULK_BYTES_MAX as i64).contains(&len) => len as usize,
            _ => return Walked::Other,
        };
        let end = cr + 2 + len + 2;
        if rest.len() < end {
            return Walked::Arriving { progress, at_least: Some(progress.at + end) };
        }
        progress.at += end;
        progress.args += 1;
    }
    Walked::Other
}

type Framed<'a> = Option<(Result<Frame<'a>, Framing>, usize)>;

/// `GET key` and `SET key value` as clients write them (`*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n`),
/// whole at the front of `buf`: the command that [`frame_at`] and [`command::call`] make of
/// the same bytes, read in one pass without framing the request first and looking its name
/// up. `None` for anything else (another command or form, a framing error, a request not all
/// here), which the general path then reads.
#[inline(always)]
fn get_or_set(buf: &[u8], bulk_max: u64) -> Option<(crate::command::Command<'_>, usize)> {
    let set = match buf.get(..13)? {
        [b'*', b'2', b'\r', b'\n', b'$', b'3', b'\r', b'\n', name @ .., b'\r', b'\n']
            if name.eq_ignore_ascii_case(b"get") =>
        {
            false
        }
        [b'*', b'3', b'\r', b'\n', b'$', b'3', b'\r', b'\n', name @ .., b'\r', b'\n']
            if name.eq_ignore_ascii_case(b"set") =>
        {
            true
        }
        _ => return None,
    };
    let (key, at) = bulk_at(buf, 13, bulk_max)?;
    let call = if set {
        let (value, end) = bulk_at(buf, at, bulk_max)?;
        (command::key(key, command::store(crate::StoreMode::Set, value, 0), command::Reply::Ok), end)
    } else {
        (command::key(key, crate::command::Op::Get(crate::command::Get::default()), command::Reply::Bulk), at)
    };
    match call {
        (command::Call::Key(command), len) => Some((command, len)),
        _ => None,
    }
}

/// The bulk string at `at` of `buf` and where what follows it starts, where [`multibulk`]
/// would read it the same way (else `None`).
#[inline(always)]
fn bulk_at(buf: &[u8], at: usize, bulk_max: u64) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    if rest.first() != Some(&b'$') {
        return None;
    }
    let cr = find_cr(rest)?;
    let len = number(&rest[1..cr]).filter(|&len| (0..=bulk_max as i64).contains(&len))? as usize;
    let end = cr + 2 + len + 2;
    (rest.len() >= end).then(|| (&rest[cr + 2..cr + 2 + len], at + end))
}

/// The request at the front of `buf` as a frame, whatever command it names, and its length
/// (`None` while it is not all here; an error for what [`parse`] refuses, or skips: an empty
/// request's length is how much is skipped).
pub fn frame_of(buf: &[u8]) -> Option<(Result<Frame<'_>, Framing>, usize)> {
    frame_at(buf, BULK_BYTES_MAX)
}

/// The frame at the front of `buf`, its bulk strings at most `bulk_max` bytes each.
fn frame_at(buf: &[u8], bulk_max: u64) -> Framed<'_> {
    if buf.first() == Some(&b'*') {
        multibulk(buf, bulk_max)
    } else {
        inline(buf)
    }
}

/// `*<count>\r\n` then `count` bulk strings. As redis-server, a count line ends at its first
/// `\r`, and the byte after it (the `\n`) and the two after a bulk string's data (its `\r\n`)
/// are stepped over unread.
fn multibulk(buf: &[u8], bulk_max: u64) -> Framed<'_> {
    let Some(cr) = find_cr(buf) else {
        return too_long(buf, "too big mbulk count string");
    };
    let count = match number(&buf[1..cr]) {
        Some(count) if count <= ARGS_MAX as i64 => count,
        _ => return Some((Err(Framing::Error(ProtocolError::Message("invalid multibulk length"))), 0)),
    };
    let start = cr + 2;
    if count <= 0 {
        return Some((Err(Framing::Empty), start));
    }
    let mut at = start;
    for _ in 0..count {
        let rest = &buf[at..];
        let Some(cr) = find_cr(rest) else {
            return too_long(rest, "too big bulk count string");
        };
        if rest[0] != b'$' {
            return Some((Err(Framing::Error(ProtocolError::ExpectedDollar(rest[0]))), 0));
        }
        let len = match number(&rest[1..cr]) {
            Some(len) if (0..=bulk_max as i64).contains(&len) => len as usize,
            _ => return Some((Err(Framing::Error(ProtocolError::Message("invalid bulk length"))), 0)),
        };
        let end = cr + 2 + len + 2;
        if rest.len() < end {
            return None;
        }
        at += end;
    }
    let frame = Frame::new(&buf[start..at], count as usize, false);
    Some((Ok(frame), at))
}

/// A line of words ([`crate::resp_frame::inline_word`]).
fn inline(buf: &[u8]) -> Framed<'_> {
    let Some(newline) = buf.iter().position(|&byte| byte == b'\n') else {
        return too_long(buf, "too big inline request");
    };
    let line = &buf[..newline];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut words = 0;
    let mut rest = line;
    loop {
        match inline_word(rest) {
            Ok(Some((_, after))) => (words, rest) = (words + 1, after),
            Ok(None) => break,
            Err(why) => return Some((Err(Framing::Error(ProtocolError::Message(why))), 0)),
        }
    }
    if words == 0 {
        return Some((Err(Framing::Empty), newline + 1));
    }
    Some((Ok(Frame::new(line, words, true)), newline + 1))
}

/// Whether `frame` is the first line or a header of an HTTP request (`POST ...`, `Host: ...`),
/// as redis-server's `securityWarningCommand` tells them.
fn is_http(frame: &Frame<'_>) -> bool {
    let name = frame.args().next().unwrap_or_default();
    name.eq_ignore_ascii_case(b"post") || name.eq_ignore_ascii_case(b"host:")
}

/// Incomplete, or (past redis-server's bound for a line) refused with `why`.
fn too_long<'a>(buf: &[u8], why: &'static str) -> Framed<'a> {
    if buf.len() > INLINE_BYTES_MAX {
        Some((Err(Framing::Error(ProtocolError::Message(why))), 0))
    } else {
        None
    }
}

/// A count line's number (between the marker and its `\r`), as redis-server's `string2ll`
/// reads it: an optional `-`, then `0` alone or digits without a leading zero.
fn number(text: &[u8]) -> Option<i64> {
    let (negative, digits_part) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits_part.first() == Some(&b'0') && (negative || digits_part.len() > 1) {
        return None;
    }
    let value = digits(digits_part)? as i64;
    Some(if negative { -value } else { value })
}
