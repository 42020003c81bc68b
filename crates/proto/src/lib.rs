//! qs-proto: memcached's text and meta protocols as pure functions over byte slices (no I/O).
//!
//! [`parse`] reads one request from the front of a connection's buffer and borrows everything
//! it returns from that buffer (zero copy); it never needs more than one request's bytes and
//! says when it needs more ([`Parsed::Incomplete`]). Refusals carry memcached 1.6's exact
//! reply and how many bytes to skip so the stream stays in sync. [`response`] writes replies.
//!
//! The rules follow memcached 1.6's proto_text.c: tokens split on spaces (at most 23 read), a
//! line ends at `\n` with an optional `\r` before it, a line with no `\n` in its first
//! [`LINE_BYTES_MAX`] bytes closes the connection unless it is a get (large multi-gets are
//! allowed), numbers parse as memcached's `safe_strto*` do, truncation quirks included.
#![deny(unsafe_code)]

pub mod answer;
pub mod binary;
pub mod check;
pub mod command;
pub mod meta;
pub mod native;
pub mod number;
pub mod out;
pub mod packed;
pub mod request;
pub mod resp;
pub mod resp_frame;
pub mod response;
pub mod text;
pub mod tokens;
pub mod udp;

pub use meta::{Meta, MetaCommand};
pub use text::{crawler_classes, GetKind, Request, ShutdownMode, StoreMode};

/// Longest key, in bytes.
pub const KEY_BYTES_MAX: usize = 250;
/// Longest key a Redis client may name (64 KiB, as redis-server stores them and Django's own
/// cache tests expect), plus its database's prefix (`resp::db`): the store keeps keys this long
/// (`qs_store::LONG_KEY_BYTES_MAX`), and memcached's protocols keep [`KEY_BYTES_MAX`].
pub const RESP_KEY_BYTES_MAX: usize = 64 * 1024 + resp::db::PREFIX_BYTES;
/// Longest command line other than a get's before the connection is closed (memcached: 2048).
pub const LINE_BYTES_MAX: usize = 2048;
/// Longest get/gets/gat/gats line; memcached allows long multi-gets, a bound keeps memory finite.
pub const GET_LINE_BYTES_MAX: usize = 1 << 20;

/// Limits the parser enforces.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A store whose data block alone exceeds this is refused before its data is read.
    pub item_bytes_max: usize,
    /// The turn's time, in unix milliseconds: what a relative expiry (Redis's EX and PX)
    /// counts from. The parsers read no clock; the executor sets this once per turn.
    pub now_ms: u64,
    /// Redis's databases (`--databases`): SELECT's and COPY's DB take 0 to one less.
    pub databases: u32,
}

/// memcached's item header on a 64-bit build with CAS on: what an item costs besides its key
/// (plus a terminating NUL), its data block (plus `\r\n`) and, for nonzero client flags, 4 bytes.
pub const MEMCACHED_ITEM_HEADER_BYTES: usize = 56;

impl Limits {
    /// Whether memcached refuses a store of `value_len` bytes under `key_len` bytes of key with
    /// `flags` ("SERVER_ERROR object too large for cache"): its whole item, header included,
    /// must fit in the item size limit (-I).
    pub fn too_large(&self, key_len: usize, value_len: usize, flags: u32) -> bool {
        let flags_bytes = if flags != 0 { 4 } else { 0 };
        MEMCACHED_ITEM_HEADER_BYTES + key_len + 1 + value_len.saturating_add(2) + flags_bytes
            > self.item_bytes_max
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { item_bytes_max: 1 << 20, now_ms: 0, databases: 16 }
    }
}

/// The result of parsing the front of a buffer.
#[derive(Debug)]
pub enum Parsed<'a> {
    /// No complete request yet: read more and try again.
    Incomplete,
    /// A request occupying the first `len` bytes.
    Request {
        /// The request.
        request: Request<'a>,
        /// Bytes it occupies.
        len: usize,
    },
    /// A request refused with `reply` (a whole line, `\r\n` included, or empty for nothing).
    /// Skip `len` bytes, which may run past the buffer: the rest arrives later and is skipped too.
    Refused {
        /// memcached's reply.
        reply: &'static str,
        /// Bytes to skip.
        len: usize,
        /// Text protocol `noreply` was given: memcached then sends nothing, even for errors.
        noreply: bool,
    },
    /// Close the connection without a reply (memcached does so for an over-long line).
    Close,
}

/// Parses the request at the front of `buf`.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Parsed<'a> {
    let Some((newline, nul)) = find_newline(buf) else {
        return if too_long_without_newline(buf) { Parsed::Close } else { Parsed::Incomplete };
    };
    let line_len = newline + 1;
    // memcached 1.6.40: no command is shorter than two bytes and its line ending.
    if line_len < 4 {
        return Parsed::Refused { reply: request::BAD_FORMAT, len: line_len, noreply: false };
    }
    let line = &buf[..newline];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // memcached reads the line as a C string: it ends at a NUL byte (a key with one in it is
    // cut there, and the words after it are not seen).
    let line = match nul.then(|| find_nul(line)).flatten() {
        Some(nul) => &line[..nul],
        None => line,
    };
    if line.len() >= 2 && line[0] == b'm' && (line.len() == 2 || line[2] == b' ') {
        if let Some(command) = MetaCommand::from_byte(line[1]) {
            return meta::parse(command, line, line_len, buf, limits);
        }
    }
    text::parse(line, line_len, buf, limits)
}

/// A guess at the key of the request at the start of `buf`, in either protocol, made without
/// parsing it (for prefetching only: a wrong guess costs a wasted load, never a wrong answer):
/// a binary frame's key ([`binary::key_guess`]), else the text line's second word
/// ([`tokens::key_guess`]).
pub fn key_guess(buf: &[u8]) -> Option<&[u8]> {
    match buf.first() {
        Some(&binary::REQUEST_MAGIC) => binary::key_guess(buf),
        Some(b'*') => resp::key_guess(buf),
        _ => tokens::key_guess(buf),
    }
}

/// Where the first newline of `buf` is, and whether a NUL byte comes before it (memcached
/// reads a line as a C string: it ends there). Request lines are short, so the first 32 bytes
/// are scanned a word at a time, both bytes looked for in each word, and then byte by byte
/// (memchr's vector set-up costs more than that on a short line); longer lines go to memchr.
#[inline]
fn find_newline(buf: &[u8]) -> Option<(usize, bool)> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const NEWLINES: u64 = u64::from_ne_bytes([b'\n'; 8]);
    let head = buf.len().min(32);
    let mut at = 0;
    let mut nul = false;
    while at + 8 <= head {
        let word = u64::from_le_bytes(buf[at..at + 8].try_into().expect("eight bytes"));
        let x = word ^ NEWLINES;
        // A zero byte of x sets its high bit here; bytes above the first zero may be set too
        // (borrows), so the lowest set bit is exactly the first newline (and likewise the
        // first NUL in `nuls`; with no zero byte at all, nothing is set).
        let zeros = x.wrapping_sub(ONES) & !x & HIGHS;
        let nuls = word.wrapping_sub(ONES) & !word & HIGHS;
        if zeros != 0 {
            let newline = zeros.trailing_zeros();
            return Some((at + (newline / 8) as usize, nul || nuls.trailing_zeros() < newline));
        }
        nul |= nuls != 0;
        at += 8;
    }
    if let Some(i) = buf[at..head].iter().position(|&byte| byte == b'\n') {
        return Some((at + i, nul || buf[at..at + i].contains(&0)));
    }
    let newline = head + memchr::memchr(b'\n', &buf[head..])?;
    Some((newline, nul || buf[at..head].contains(&0) || memchr::memchr(0, &buf[head..newline]).is_some()))
}

/// Where the first NUL byte of `line` is (the rare line that has one).
fn find_nul(line: &[u8]) -> Option<usize> {
    memchr::memchr(0, line)
}

/// Whether a buffer with no newline yet has grown past what memcached tolerates.
fn too_long_without_newline(buf: &[u8]) -> bool {
    if buf.len() <= LINE_BYTES_MAX {
        return false;
    }
    let is_get = buf.starts_with(b"get ") || buf.starts_with(b"gets ");
    !is_get || buf.len() > GET_LINE_BYTES_MAX
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_first_newline_is_found_in_every_word_position() {
        for len in 0..80 {
            for at in 0..len {
                let mut buf = vec![b'x'; len];
                buf[at] = b'\n';
                if at + 1 < len {
                    buf[len - 1] = b'\n';
                }
                assert_eq!(find_newline(&buf), Some((at, false)), "len {len}, newline at {at}");
            }
            assert_eq!(find_newline(&vec![b'x'; len]), None);
        }
        // Bytes that borrow into their neighbours (0x0b is 0x0a ^ 1, 0x8a sets the high bit).
        assert_eq!(find_newline(b"\x0b\x8a\n\x0b\x0b\x0b\x0b\x0b\n"), Some((2, false)));
        assert_eq!(find_newline(b"get a\0b\r\n"), Some((8, true)));
        assert_eq!(find_newline(b"get ab\r\n\0"), Some((7, false)));
    }

    /// memcached 1.6.18 reads a line as a C string: a NUL ends it, so a key with one inside is
    /// never stored or looked up whole.
    #[test]
    fn a_nul_byte_ends_the_line_as_in_memcached() {
        let limits = Limits::default();
        match parse(b"get a\0b\r\n", &limits) {
            Parsed::Request { request: Request::Get { keys, .. }, len } => {
                assert_eq!((keys, len), (&b"a"[..], 9))
            }
            other => panic!("{other:?}"),
        }
        // A store cut before its length is refused, and its data line is a line of its own.
        assert!(matches!(parse(b"set a\0b 0 0 1\r\nx\r\n", &limits), Parsed::Refused { len: 15, .. }));
        assert!(matches!(parse(b"ms a\0b 1\r\nx\r\n", &limits), Parsed::Refused { len: 10, .. }));
        assert!(matches!(parse(b"get \0\r\n", &limits), Parsed::Refused { len: 7, .. }));
    }

    proptest! {
        #[test]
        fn find_newline_agrees_with_memchr(buf in proptest::collection::vec(
            prop_oneof![Just(b'\n'), Just(b'\r'), Just(0x0b_u8), Just(0x8a_u8), Just(0), Just(1), any::<u8>()],
            0..100)) {
            let want = memchr::memchr(b'\n', &buf).map(|at| (at, buf[..at].contains(&0)));
            prop_assert_eq!(find_newline(&buf), want);
        }

        #[test]
        fn the_key_guess_is_the_parsed_key(
            template in proptest::sample::select(vec![
                "get {}\r\n", "gets {}\r\n", "set {} 1 2 3\r\nabc\r\n", "add {} 0 0 1 noreply\r\nx\r\n",
                "cas {} 0 0 1 7\r\nz\r\n", "append {} 0 0 0\r\n\r\n", "delete {}\r\n", "incr {} 5\r\n",
                "decr {} 1 noreply\r\n", "touch {} 10\r\n", "mg {}\r\n", "mg {} v k O123 q\r\n",
                "ms {} 2 T1 F5\r\nhi\r\n", "md {} q\r\n", "ma {} D5 N0 J3\r\n", "get {}\n",
            ]),
            key in "[!-~]{1,250}",
        ) {
            let buf = template.replace("{}", &key).into_bytes();
            let Parsed::Request { request, .. } = parse(&buf, &Limits::default()) else {
                return Err(TestCaseError::fail(format!("{template} with {key} did not parse")));
            };
            let parsed = match &request {
                Request::Get { keys, .. } => keys,
                Request::Store { key, .. }
                | Request::TooLarge { key, .. }
                | Request::Delete { key, .. }
                | Request::Arith { key, .. }
                | Request::Touch { key, .. } => key,
                Request::Meta(meta) => meta.key(),
                other => return Err(TestCaseError::fail(format!("{other:?}"))),
            };
            prop_assert_eq!(tokens::key_guess(&buf), Some(parsed));
        }
    }
}
