//! memcached's binary protocol (protocol_binary.h, proto_bin.c of memcached 1.6.18): 24-byte
//! request headers, big-endian fields, replies that echo the opcode and the opaque.
//!
//! [`parse`] reads one request frame from the front of a buffer into a
//! [`Request::Binary`], borrowing key and value from the buffer, with
//! memcached's checks in memcached's order: a body shorter than its key and extras
//! ([`BinaryCommand::Refuse`] with `UNKNOWN_COMMAND`, then close), a key over 250 bytes or extras and
//! lengths an opcode does not take (`EINVAL`, then close), an unknown opcode (`UNKNOWN_COMMAND`,
//! its body swallowed as memcached swallows it). [`Reply`] writes replies.
//!
//! ```text
//!  byte   0       1       2       3
//!     0  magic   opcode  key length
//!     4  extras  type    vbucket / status
//!     8  total body length (extras + key + value)
//!    12  opaque (echoed unread)
//!    16  CAS
//!    20
//! ```

use crate::command::{self, Answer, Op};
pub use crate::request::{Binary, BinaryCommand};
use crate::{Limits, Parsed, Request, StoreMode, KEY_BYTES_MAX};

/// Bytes of a request or reply header.
pub const HEADER_BYTES: usize = 24;
/// The first byte of every request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// The first byte of every reply.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Longest SASL mechanism name memcached takes (its `MAX_SASL_MECH_LEN`).
pub const SASL_MECHANISM_BYTES_MAX: usize = 32;

/// Opcodes memcached 1.6 serves.
pub mod opcode {
    #![allow(missing_docs)]
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    /// memcached 1.6 lists it in its header but does not serve it (unknown command).
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// Reply status codes.
pub mod status {
    #![allow(missing_docs)]
    pub const NO_ERROR: u16 = 0x00;
    pub const KEY_ENOENT: u16 = 0x01;
    pub const KEY_EEXISTS: u16 = 0x02;
    pub const E2BIG: u16 = 0x03;
    pub const EINVAL: u16 = 0x04;
    pub const NOT_STORED: u16 = 0x05;
    pub const DELTA_BADVAL: u16 = 0x06;
    pub const AUTH_ERROR: u16 = 0x20;
    pub const AUTH_CONTINUE: u16 = 0x21;
    pub const UNKNOWN_COMMAND: u16 = 0x81;
    pub const ENOMEM: u16 = 0x82;

    /// The text memcached puts in the body of an error reply.
    pub fn message(status: u16) -> &'static [u8] {
        match status {
            ENOMEM => b"Out of memory",
            UNKNOWN_COMMAND => b"Unknown command",
            KEY_ENOENT => b"Not found",
            EINVAL => b"Invalid arguments",
            KEY_EEXISTS => b"Data exists for key.",
            E2BIG => b"Too large.",
            DELTA_BADVAL => b"Non-numeric server-side value for incr or decr",
            NOT_STORED => b"Not stored.",
            AUTH_ERROR => b"Auth failure.",
            _ => b"",
        }
    }
}

/// The header fields of a request frame.
#[derive(Clone, Copy, Debug)]
struct Header {
    opcode: u8,
    key_len: usize,
    extras_len: usize,
    body_len: usize,
    opaque: [u8; 4],
    cas: u64,
}

impl Header {
    fn read(bytes: &[u8; HEADER_BYTES]) -> Header {
        Header {
            opcode: bytes[1],
            key_len: usize::from(u16::from_be_bytes([bytes[2], bytes[3]])),
            extras_len: usize::from(bytes[4]),
            body_len: u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            opaque: [bytes[12], bytes[13], bytes[14], bytes[15]],
            cas: u64::from_be_bytes(bytes[16..24].try_into().expect("eight bytes")),
        }
    }
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[..4].try_into().expect("four bytes"))
}

fn be64(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes[..8].try_into().expect("eight bytes"))
}

/// Parses the binary request at the front of `buf`. A first byte other than the request magic
/// closes the connection, as in memcached.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Parsed<'a> {
    let Some(head) = buf.first_chunk::<HEADER_BYTES>() else {
        return Parsed::Incomplete;
    };
    if head[0] != REQUEST_MAGIC {
        return Parsed::Close;
    }
    let header = Header::read(head);
    let Header { key_len, extras_len, body_len, .. } = header;
    // memcached reads the header, extras and key before it looks at the command.
    let fixed = HEADER_BYTES + extras_len + key_len;
    if buf.len() < fixed {
        return Parsed::Incomplete;
    }
    let frame = Frame { header, buf, fixed, whole: HEADER_BYTES + body_len };
    if key_len > body_len || key_len + extras_len > body_len {
        return frame.refuse(status::UNKNOWN_COMMAND, true, fixed);
    }
    if key_len > KEY_BYTES_MAX {
        return frame.refuse(status::EINVAL, true, fixed);
    }
    // Each group's parse is inlined here: this is the shape a single function compiles to
    // (a frame type with out-of-line methods cost 20 instructions a request more,
    // callgrind-server.sh with PROTOCOL=memcache_binary).
    match header.opcode {
        opcode::VERSION | opcode::NOOP | opcode::SASL_LIST_MECHS | opcode::QUIT | opcode::QUITQ => {
            frame.bare()
        }
        opcode::FLUSH | opcode::FLUSHQ | opcode::STAT => frame.admin(),
        opcode::SET | opcode::SETQ | opcode::ADD | opcode::ADDQ | opcode::REPLACE | opcode::REPLACEQ => {
            frame.store(limits)
        }
        opcode::APPEND | opcode::APPENDQ | opcode::PREPEND | opcode::PREPENDQ => frame.concat(limits),
        opcode::GET | opcode::GETQ | opcode::GETK | opcode::GETKQ => frame.get(),
        opcode::TOUCH | opcode::GAT | opcode::GATQ | opcode::GATK | opcode::GATKQ => frame.touch(),
        opcode::DELETE | opcode::DELETEQ => frame.delete(),
        opcode::INCREMENT | opcode::INCREMENTQ | opcode::DECREMENT | opcode::DECREMENTQ => frame.arith(),
        opcode::SASL_AUTH | opcode::SASL_STEP => frame.sasl(limits),
        // memcached swallows the body length again after the extras and key it has read.
        _ => frame.refuse(status::UNKNOWN_COMMAND, false, fixed.saturating_add(body_len)),
    }
}

/// A request frame whose header, extras and key are in `buf` (`fixed` bytes); its value, if
/// any, runs to `whole`.
#[derive(Clone, Copy)]
struct Frame<'a> {
    header: Header,
    buf: &'a [u8],
    fixed: usize,
    whole: usize,
}

impl<'a> Frame<'a> {
    #[inline(always)]
    fn request(&self, command: BinaryCommand<'a>, len: usize) -> Parsed<'a> {
        let Header { opcode, opaque, cas, .. } = self.header;
        Parsed::Request { request: Request::Binary(Binary { opcode, opaque, cas, command }), len }
    }

    #[inline(always)]
    fn refuse(&self, status: u16, close: bool, len: usize) -> Parsed<'a> {
        self.request(BinaryCommand::Refuse { status, close }, len)
    }

    /// A frame whose lengths do not fit its command: refused, and the connection closed.
    #[inline(always)]
    fn invalid(&self) -> Parsed<'a> {
        self.refuse(status::EINVAL, true, self.fixed)
    }

    #[inline(always)]
    fn extras(&self) -> &'a [u8] {
        &self.buf[HEADER_BYTES..HEADER_BYTES + self.header.extras_len]
    }

    #[inline(always)]
    fn key(&self) -> &'a [u8] {
        &self.buf[HEADER_BYTES + self.header.extras_len..self.fixed]
    }

    #[inline(always)]
    fn value_len(&self) -> usize {
        self.header.body_len - self.header.extras_len - self.header.key_len
    }

    /// The value, once the whole frame is in.
    #[inline(always)]
    fn value(&self) -> Option<&'a [u8]> {
        self.buf.get(self.fixed..self.whole)
    }

    #[inline(always)]
    fn quiet(&self) -> bool {
        matches!(
            self.header.opcode,
            opcode::GETQ
                | opcode::GETKQ
                | opcode::GATQ
                | opcode::GATKQ
                | opcode::SETQ
                | opcode::ADDQ
                | opcode::REPLACEQ
                | opcode::APPENDQ
                | opcode::PREPENDQ
                | opcode::DELETEQ
                | opcode::INCREMENTQ
                | opcode::DECREMENTQ
                | opcode::QUITQ
                | opcode::FLUSHQ
        )
    }

    /// VERSION, NOOP, SASL_LIST_MECHS and QUIT: a header alone.
    #[inline(always)]
    fn bare(&self) -> Parsed<'a> {
        let Header { opcode, key_len, extras_len, body_len, .. } = self.header;
        if extras_len != 0 || key_len != 0 || body_len != 0 {
            return self.invalid();
        }
        let command = match opcode {
            opcode::VERSION => BinaryCommand::Version,
            opcode::NOOP => BinaryCommand::Noop,
            opcode::SASL_LIST_MECHS => BinaryCommand::SaslListMechs,
            _ => BinaryCommand::Quit { quiet: self.quiet() },
        };
        self.request(command, self.fixed)
    }

    /// FLUSH (an optional expiry) and STAT (an optional group in the key).
    #[inline(always)]
    fn admin(&self) -> Parsed<'a> {
        let Header { opcode, key_len, extras_len, body_len, .. } = self.header;
        if opcode == opcode::STAT {
            if extras_len != 0 {
                return self.invalid();
            }
            return self.request(BinaryCommand::Stat { group: self.key() }, self.fixed);
        }
        if key_len != 0 || body_len != extras_len || !(extras_len == 0 || extras_len == 4) {
            return self.invalid();
        }
        let exptime = if extras_len == 4 { be32(self.extras()) } else { 0 };
        self.request(BinaryCommand::Flush { exptime, quiet: self.quiet() }, self.fixed)
    }

    /// SET, ADD and REPLACE: flags and expiry in the extras, a value.
    #[inline(always)]
    fn store(&self, limits: &Limits) -> Parsed<'a> {
        let Header { opcode, key_len, extras_len, body_len, cas, .. } = self.header;
        if extras_len != 8 || key_len == 0 || body_len < key_len + 8 {
            return self.invalid();
        }
        let extras = self.extras();
        let flags = be32(extras);
        let exptime = be32(&extras[4..]);
        let set = matches!(opcode, opcode::SET | opcode::SETQ);
        let key = self.key();
        if limits.too_large(key_len, self.value_len(), flags) {
            return self.request(BinaryCommand::TooLarge { key, set }, self.whole);
        }
        let Some(value) = self.value() else { return Parsed::Incomplete };
        let mode = match opcode {
            _ if cas != 0 => StoreMode::Cas(cas),
            opcode::SET | opcode::SETQ => StoreMode::Set,
            opcode::ADD | opcode::ADDQ => StoreMode::Add,
            _ => StoreMode::Replace,
        };
        self.request(
            BinaryCommand::Store { mode, key, flags, exptime, value, quiet: self.quiet() },
            self.whole,
        )
    }

    /// APPEND and PREPEND: a value, no extras.
    #[inline(always)]
    fn concat(&self, limits: &Limits) -> Parsed<'a> {
        let Header { opcode, key_len, extras_len, cas, .. } = self.header;
        if key_len == 0 || extras_len != 0 {
            return self.invalid();
        }
        let key = self.key();
        if limits.too_large(key_len, self.value_len(), 0) {
            return self.request(BinaryCommand::TooLarge { key, set: false }, self.whole);
        }
        let Some(value) = self.value() else { return Parsed::Incomplete };
        // A CAS makes it conditional on the item's (memcached's binary append and prepend).
        let mode = match (matches!(opcode, opcode::APPEND | opcode::APPENDQ), cas) {
            (true, 0) => StoreMode::Append,
            (true, cas) => StoreMode::AppendCas(cas),
            (false, 0) => StoreMode::Prepend,
            (false, cas) => StoreMode::PrependCas(cas),
        };
        let quiet = self.quiet();
        self.request(BinaryCommand::Store { mode, key, flags: 0, exptime: 0, value, quiet }, self.whole)
    }

    /// GET, GETQ, GETK and GETKQ: a key alone.
    #[inline(always)]
    fn get(&self) -> Parsed<'a> {
        let Header { opcode, key_len, extras_len, body_len, .. } = self.header;
        if extras_len != 0 || body_len != key_len || key_len == 0 {
            return self.invalid();
        }
        let with_key = matches!(opcode, opcode::GETK | opcode::GETKQ);
        self.request(
            BinaryCommand::Get { key: self.key(), quiet: self.quiet(), with_key, touch: None },
            self.fixed,
        )
    }

    /// TOUCH and the GAT family: an expiry in the extras.
    #[inline(always)]
    fn touch(&self) -> Parsed<'a> {
        let Header { opcode, key_len, extras_len, .. } = self.header;
        if extras_len != 4 || key_len == 0 {
            return self.invalid();
        }
        let exptime = be32(self.extras());
        let key = self.key();
        if opcode == opcode::TOUCH {
            return self.request(BinaryCommand::Touch { key, exptime }, self.fixed);
        }
        let with_key = matches!(opcode, opcode::GATK | opcode::GATKQ);
        self.request(
            BinaryCommand::Get { key, quiet: self.quiet(), with_key, touch: Some(exptime) },
            self.fixed,
        )
    }

    /// DELETE: a key alone.
    #[inline(always)]
    fn delete(&self) -> Parsed<'a> {
        let Header { key_len, extras_len, body_len, .. } = self.header;
        if key_len == 0 || extras_len != 0 || body_len != key_len {
            return self.invalid();
        }
        self.request(BinaryCommand::Delete { key: self.key(), quiet: self.quiet() }, self.fixed)
    }

    /// INCREMENT and DECREMENT: delta, initial value and expiry in the extras.
    #[inline(always)]
    fn arith(&self) -> Parsed<'a> {
        let Header { opcode, key_len, extras_len, body_len, .. } = self.header;
        if key_len == 0 || extras_len != 20 || body_len != key_len + extras_len {
            return self.invalid();
        }
        let extras = self.extras();
        let command = BinaryCommand::Arith {
            key: self.key(),
            delta: be64(extras),
            initial: be64(&extras[8..]),
            exptime: be32(&extras[16..]),
            decrement: matches!(opcode, opcode::DECREMENT | opcode::DECREMENTQ),
            quiet: self.quiet(),
        };
        self.request(command, self.fixed)
    }

    /// SASL_AUTH and SASL_STEP: the mechanism in the key, the data in the value.
    #[inline(always)]
    fn sasl(&self, limits: &Limits) -> Parsed<'a> {
        let Header { opcode, key_len, extras_len, .. } = self.header;
        if extras_len != 0 || key_len == 0 {
            return self.invalid();
        }
        if key_len > SASL_MECHANISM_BYTES_MAX {
            return self.refuse(status::EINVAL, false, self.whole);
        }
        if self.value_len() > limits.item_bytes_max {
            return self.refuse(status::ENOMEM, false, self.whole);
        }
        let Some(data) = self.value() else { return Parsed::Incomplete };
        let step = opcode == opcode::SASL_STEP;
        self.request(BinaryCommand::SaslAuth { mechanism: self.key(), data, step }, self.whole)
    }
}

/// The key of the binary request at the front of `buf`, when its header and key have arrived
/// (for prefetching before the request is parsed).
pub fn key_guess(buf: &[u8]) -> Option<&[u8]> {
    let head = buf.first_chunk::<HEADER_BYTES>()?;
    let header = Header::read(head);
    let start = HEADER_BYTES + header.extras_len;
    let key = buf.get(start..start + header.key_len)?;
    (!key.is_empty()).then_some(key)
}

/// A reply header and the parts after it, written as memcached writes them.
#[derive(Clone, Copy, Debug)]
pub struct Reply<'a> {
    /// The request's opcode.
    pub opcode: u8,
    /// The request's opaque.
    pub opaque: [u8; 4],
    /// Status.
    pub status: u16,
    /// CAS (0 when none).
    pub cas: u64,
    /// Extras.
    pub extras: &'a [u8],
    /// Key.
    pub key: &'a [u8],
    /// Value bytes that follow (written by the caller, or given in `value`).
    pub value_len: usize,
}

impl Reply<'_> {
    /// Writes the header, extras and key (the caller appends `value_len` bytes of value).
    pub fn write_head(&self, out: &mut Vec<u8>) {
        let body_len = self.extras.len() + self.key.len() + self.value_len;
        out.reserve(HEADER_BYTES + body_len);
        // The header is built whole and appended once (a copy of known length: stores).
        let mut header = [0u8; HEADER_BYTES];
        header[0] = RESPONSE_MAGIC;
        header[1] = self.opcode;
        header[2..4].copy_from_slice(&(self.key.len() as u16).to_be_bytes());
        header[4] = self.extras.len() as u8;
        header[6..8].copy_from_slice(&self.status.to_be_bytes());
        header[8..12].copy_from_slice(&(body_len as u32).to_be_bytes());
        header[12..16].copy_from_slice(&self.opaque);
        header[16..24].copy_from_slice(&self.cas.to_be_bytes());
        crate::out::append(out, &header);
        crate::out::append(out, self.extras);
        crate::out::append(out, self.key);
    }
}

/// Writes a reply with no extras or key whose value is `value`.
pub fn write_simple(out: &mut Vec<u8>, opcode: u8, opaque: [u8; 4], status: u16, cas: u64, value: &[u8]) {
    let reply = Reply { opcode, opaque, status, cas, extras: &[], key: &[], value_len: value.len() };
    reply.write_head(out);
    out.extend_from_slice(value);
}

/// Writes memcached's error reply for `status` (its text as the value, CAS 0).
pub fn write_error(out: &mut Vec<u8>, opcode: u8, opaque: [u8; 4], status: u16) {
    write_simple(out, opcode, opaque, status, 0, status::message(status));
}

/// A request frame (for tests, benchmarks and clients): header, extras, key, value.
pub fn request_frame(opcode: u8, opaque: u32, cas: u64, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let body_len = extras.len() + key.len() + value.len();
    let mut frame = Vec::with_capacity(HEADER_BYTES + body_len);
    frame.extend_from_slice(&[REQUEST_MAGIC, opcode]);
    frame.extend_from_slice(&(key.len() as u16).to_be_bytes());
    frame.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    frame.extend_from_slice(&(body_len as u32).to_be_bytes());
    frame.extend_from_slice(&opaque.to_be_bytes());
    frame.extend_from_slice(&cas.to_be_bytes());
    frame.extend_from_slice(extras);
    frame.extend_from_slice(key);
    frame.extend_from_slice(value);
    frame
}

impl<'r> Binary<'r> {
    /// A command on one key in the one vocabulary ([`crate::command`]); `None` for the others
    /// (quit, flush, noop, version, stat, SASL, refusals). The header's CAS is a condition:
    /// in the store mode (the parser put it there), for a delete and an increment here.
    #[inline]
    pub fn key_command(&self) -> Option<command::Command<'r>> {
        let Binary { opcode, opaque, cas, command } = *self;
        let answer = |quiet, with_key| Answer::Binary { opcode, opaque, quiet, with_key };
        let (key, op, answer) = match command {
            BinaryCommand::Get { key, quiet, with_key, touch } => {
                (key, Op::Get(command::Get::touching(touch.map(i64::from))), answer(quiet, with_key))
            }
            BinaryCommand::Touch { key, exptime } => {
                (key, Op::Touch { exptime: i64::from(exptime), read: true }, answer(false, false))
            }
            BinaryCommand::Store { mode, key, flags, exptime, value, quiet } => {
                let exptime = i64::from(exptime);
                let drops_refused = mode == StoreMode::Set;
                let store = command::Store {
                    mode,
                    flags,
                    exptime,
                    data: value,
                    vivify: None,
                    cas_in: None,
                    drops_refused,
                };
                (key, Op::Store(store), answer(quiet, false))
            }
            BinaryCommand::TooLarge { key, set } => (key, Op::TooLarge { drops: set }, answer(false, false)),
            BinaryCommand::Delete { key, quiet } => {
                let delete = command::Delete { cas: (cas != 0).then_some(cas), ..command::Delete::default() };
                (key, Op::Delete(delete), answer(quiet, false))
            }
            BinaryCommand::Arith { key, delta, initial, exptime, decrement, quiet } => {
                // An exptime of all ones: a miss creates nothing.
                let create = (exptime != u32::MAX).then_some((initial, i64::from(exptime)));
                let arith = command::Arith { delta, decrement, cas, create, ..command::Arith::default() };
                (key, Op::Arith(arith), answer(quiet, false))
            }
            _ => return None,
        };
        Some(command::Command { key, op, answer })
    }
}

pub(crate) mod reply;

#[cfg(test)]
mod tests;
