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
#![forbid(unsafe_code)]

pub mod check;
pub mod meta;
pub mod native;
pub mod number;
pub mod response;
pub mod text;
pub mod tokens;
pub mod udp;

pub use meta::{Meta, MetaCommand};
pub use text::{GetKind, Request, StoreMode};

/// Longest key, in bytes.
pub const KEY_BYTES_MAX: usize = 250;
/// Longest command line other than a get's before the connection is closed (memcached: 2048).
pub const LINE_BYTES_MAX: usize = 2048;
/// Longest get/gets/gat/gats line; memcached allows long multi-gets, a bound keeps memory finite.
pub const GET_LINE_BYTES_MAX: usize = 1 << 20;

/// Limits the parser enforces.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A store whose data block alone exceeds this is refused before its data is read.
    pub item_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { item_bytes_max: 1 << 20 }
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
    let Some(newline) = memchr::memchr(b'\n', buf) else {
        return if too_long_without_newline(buf) { Parsed::Close } else { Parsed::Incomplete };
    };
    let line_len = newline + 1;
    let line = &buf[..newline];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() >= 2 && line[0] == b'm' && (line.len() == 2 || line[2] == b' ') {
        if let Some(command) = MetaCommand::from_byte(line[1]) {
            return meta::parse(command, line, line_len, buf, limits);
        }
    }
    text::parse(line, line_len, buf, limits)
}

/// Whether a buffer with no newline yet has grown past what memcached tolerates.
fn too_long_without_newline(buf: &[u8]) -> bool {
    if buf.len() <= LINE_BYTES_MAX {
        return false;
    }
    let is_get = buf.starts_with(b"get ") || buf.starts_with(b"gets ");
    !is_get || buf.len() > GET_LINE_BYTES_MAX
}
