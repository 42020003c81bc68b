//! The dialects a connection speaks, at the edge of the worker: which one its first byte
//! picks, parsing a dialect's bytes into the one request type ([`qs_proto::Request`]), which
//! stores are too large to read, and a multi-key get resumed in pieces. The worker calls these
//! and never looks at a protocol's bytes itself; what it answers without running a request is
//! worker/refusals.rs.
//!
//! Replies of requests that run are written by [`crate::exec`] straight into the output with
//! the dialect's own encoders (`qs_proto::response`, `qs_proto::binary::write_*`): a value is
//! copied once, from the log to the reply, with no neutral outcome in between.

use crate::config::Protocol;
use crate::session::Input;
use qs_proto::{Parsed, Request};

/// A wire dialect: memcached's text protocol (with its meta commands), or its binary one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// Text and meta commands.
    Text,
    /// The binary protocol.
    Binary,
    /// The Redis protocol (`qs_proto::resp`).
    Resp,
    /// The Redis protocol on a connection that said `HELLO 3`: RESP3's replies.
    Resp3,
}

impl Dialect {
    /// The dialect of a connection that speaks `protocol` (decided: not `Auto`).
    #[inline]
    pub fn of(protocol: Protocol) -> Dialect {
        match protocol {
            Protocol::Binary => Dialect::Binary,
            Protocol::Resp => Dialect::Resp,
            Protocol::Auto | Protocol::Ascii => Dialect::Text,
        }
    }

    /// The protocol a connection speaks whose first byte is `first` (memcached's -B auto):
    /// the binary request magic picks binary, anything else text.
    #[inline]
    pub fn sniff(first: u8) -> Protocol {
        if first == qs_proto::binary::REQUEST_MAGIC {
            Protocol::Binary
        } else {
            Protocol::Ascii
        }
    }

    /// Either version of the Redis protocol.
    #[inline]
    pub fn is_resp(self) -> bool {
        matches!(self, Dialect::Resp | Dialect::Resp3)
    }

    /// Whether the request may change how the connection's next requests are parsed: a RESP
    /// `HELLO` (its protocol version), `RESET` (that, its authentication and its database),
    /// `SELECT`, `EXEC` or `DISCARD` (its database: qs_proto::resp::db). Its window ends with
    /// it.
    #[inline]
    pub fn switches_after(parsed: &Parsed<'_>) -> bool {
        matches!(parsed, Parsed::Request { request: Request::Resp(frame), .. }
            if frame.arg(0).is_some_and(|name| name.eq_ignore_ascii_case(b"hello") || qs_proto::resp::db::fences(name)))
    }

    /// Parses the request at the start of `bytes`.
    #[inline]
    pub fn parse<'a>(self, bytes: &'a [u8], limits: &qs_proto::Limits) -> Parsed<'a> {
        match self {
            Dialect::Text => qs_proto::parse(bytes, limits),
            Dialect::Binary => qs_proto::binary::parse(bytes, limits),
            Dialect::Resp | Dialect::Resp3 => qs_proto::resp::parse_as(bytes, limits, self == Dialect::Resp3),
        }
    }
}

/// A store whose data block is over the item size limit (its block never enters the read
/// buffer): its key, and whether memcached drops the key's old value for it (a refused `set`;
/// any meta set). `None` for any other request.
pub fn oversized_store<'a>(request: &'a Request<'_>, limits: &qs_proto::Limits) -> Option<(&'a [u8], bool)> {
    match request {
        Request::TooLarge { key, mode, .. } => Some((key, *mode == qs_proto::StoreMode::Set)),
        Request::Binary(qs_proto::binary::Binary {
            command: qs_proto::binary::BinaryCommand::TooLarge { key, set },
            ..
        }) => Some((key, *set)),
        Request::Meta(meta) if meta.too_large(limits) => Some((meta.key(), true)),
        _ => None,
    }
}

/// The end of a get's reply (text; binary gets have none).
pub const END: &[u8] = qs_proto::response::END;

/// `lru_crawler` refused: the crawler is off (`-o no_lru_crawler`).
pub const CRAWLER_DISABLED: &[u8] = b"CLIENT_ERROR lru crawler disabled\r\n";

/// A class list that names no class (see [`qs_proto::crawler_classes`]).
pub const BAD_CLASS: &[u8] = b"BADCLASS invalid class id\r\n";

/// For a UDP reply's message split: a get's last key (its reply is split at VALUE blocks).
pub fn last_get_key(parsed: &Parsed<'_>) -> Option<Box<[u8]>> {
    match parsed {
        Parsed::Request { request: Request::Get { keys, .. }, .. } => {
            qs_proto::tokens::words(keys).last().map(Box::from)
        }
        _ => None,
    }
}

/// A multi-key get stopped part way (its replies reached the output bound): the keys not yet
/// run become a get line of their own, written over the keys already run, and wait in the read
/// buffer until the client has read enough.
pub struct Resume {
    /// Where the get's line starts in the unparsed bytes.
    line: usize,
    /// Length of the line's command part without trailing spaces (`get`, `gat <exptime>`).
    prefix: usize,
    /// Where the keys not yet run start in the unparsed bytes.
    rest: usize,
}

impl Resume {
    /// `line` is the get's line within `pending`, `keys` its keys and `rest` the suffix of
    /// them still to run (all subslices of `pending`).
    pub fn of(pending: &[u8], line: &[u8], keys: &[u8], rest: &[u8]) -> Resume {
        let at = |part: &[u8]| part.as_ptr() as usize - pending.as_ptr() as usize;
        let command = &pending[at(line)..at(keys)];
        let prefix = command.iter().rposition(|&byte| byte != b' ').map_or(0, |last| last + 1);
        Resume { line: at(line), prefix, rest: at(rest) }
    }

    /// Rewrites the line as a get of the remaining keys; returns how many unparsed bytes are
    /// done with (everything before the rewritten line).
    pub fn apply(&self, input: &mut Input) -> usize {
        // At least one key and its separator were run, so the command part and a space fit
        // before `rest`.
        let start = self.rest - self.prefix - 1;
        debug_assert!(start > self.line);
        let base = input.start;
        input.buf.copy_within(base + self.line..base + self.line + self.prefix, base + start);
        input.buf[base + self.rest - 1] = b' ';
        start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_byte_picks_the_dialect() {
        assert_eq!(Dialect::sniff(0x80), Protocol::Binary);
        assert_eq!(Dialect::sniff(b'g'), Protocol::Ascii);
        assert_eq!(Dialect::of(Protocol::Binary), Dialect::Binary);
        assert_eq!(Dialect::of(Protocol::Ascii), Dialect::Text);
    }

    #[test]
    fn a_resumed_get_keeps_its_command_and_the_keys_not_run() {
        let line = b"gat 10  a b c\r\n";
        let mut input = Input::new(1024);
        input.buf = line.to_vec();
        input.end = line.len();
        let pending = &line[..];
        let keys = &pending[8..13];
        let rest = &pending[10..13];
        let resume = Resume::of(pending, pending, keys, rest);
        let start = resume.apply(&mut input);
        assert_eq!(&input.buf[start..], b"gat 10 b c\r\n");
    }

    #[test]
    fn oversized_stores_name_their_key_and_whether_the_old_value_goes() {
        let limits = qs_proto::Limits { item_bytes_max: 1024, now_ms: 0, databases: 16 };
        let refused = |bytes: &[u8]| match qs_proto::parse(bytes, &limits) {
            Parsed::Request { request, .. } => {
                oversized_store(&request, &limits).map(|(key, drop)| (key.to_vec(), drop))
            }
            other => panic!("{other:?}"),
        };
        let big = limits.item_bytes_max + 1;
        assert_eq!(refused(format!("set k 0 0 {big}\r\n").as_bytes()), Some((b"k".to_vec(), true)));
        assert_eq!(refused(format!("add k 0 0 {big}\r\n").as_bytes()), Some((b"k".to_vec(), false)));
        assert_eq!(refused(b"get k\r\n"), None);
    }
}
