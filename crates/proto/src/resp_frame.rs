//! A Redis protocol request's arguments as they lie in the read buffer, and its framing
//! errors: the types the request vocabulary carries ([`crate::Request::Resp`]), apart from
//! the parser ([`crate::resp`]) that makes them.

/// A request's arguments as they lie in the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The bytes after the multibulk count line (every `$len\r\ndata\r\n`), or an inline
    /// request's line without its line ending.
    bytes: &'a [u8],
    /// Arguments (at least one).
    argc: usize,
    /// An inline request: words split on spaces.
    inline: bool,
    /// It came from a connection that speaks RESP3 (`HELLO 3`): its replies are RESP3's.
    resp3: bool,
}

impl<'a> Frame<'a> {
    /// A frame whose framing the parser checked: `argc` arguments in `bytes`.
    pub(crate) fn new(bytes: &'a [u8], argc: usize, inline: bool) -> Frame<'a> {
        Frame { bytes, argc, inline, resp3: false }
    }

    /// This frame, from a connection that speaks RESP3.
    pub(crate) fn in_resp3(self) -> Frame<'a> {
        Frame { resp3: true, ..self }
    }

    /// Whether its connection speaks RESP3 (`HELLO 3`): nulls, maps and INFO's text are
    /// written as RESP3 writes them.
    #[inline]
    pub fn resp3(&self) -> bool {
        self.resp3
    }

    /// How many arguments, the command's name included.
    #[inline]
    pub fn argc(&self) -> usize {
        self.argc
    }

    /// The arguments in order, the command's name first.
    #[inline]
    pub fn args(&self) -> Args<'a> {
        Args { rest: self.bytes, left: self.argc, inline: self.inline }
    }

    /// The argument at `index` (the name is 0).
    pub fn arg(&self, index: usize) -> Option<&'a [u8]> {
        self.args().nth(index)
    }
}

/// A frame's arguments ([`Frame::args`]).
#[derive(Clone, Debug)]
pub struct Args<'a> {
    rest: &'a [u8],
    left: usize,
    inline: bool,
}

impl<'a> Iterator for Args<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if self.inline {
            // Checked by `parse`: every word reads.
            let (word, after) = inline_word(self.rest).ok().flatten()?;
            self.rest = after;
            return Some(word);
        }
        // Checked by `parse`: `$<len>\r?<len bytes>??`, `len` in plain decimal digits. Read
        // here without checking again (a request's arguments are read several times): a
        // frame that broke the promise would read wrong bytes, never out of bounds.
        let rest = self.rest;
        let mut at = 1;
        let mut len = 0usize;
        while let Some(&byte) = rest.get(at) {
            if byte == b'\r' {
                break;
            }
            len = len.wrapping_mul(10).wrapping_add(usize::from(byte.wrapping_sub(b'0')));
            at += 1;
        }
        let start = at + 2;
        let data = rest.get(start..start.checked_add(len)?)?;
        self.rest = rest.get(start + len + 2..).unwrap_or_default();
        Some(data)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Args<'_> {}

/// A framing error, worded as redis-server words it after `-ERR Protocol error: `.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// A fixed message.
    Message(&'static str),
    /// A bulk string's count line did not start with `$`: the byte it started with.
    ExpectedDollar(u8),
    /// A request named `POST` or `Host:`: an HTTP request (which a web page can make a browser
    /// send to any port) rather than a client's. As redis-server's guard against
    /// cross-protocol scripting: nothing is answered, and the connection closes before any
    /// of it runs.
    CrossProtocol,
}

impl ProtocolError {
    /// The reply: `-ERR Protocol error: ...\r\n`.
    pub fn write(&self, out: &mut Vec<u8>) {
        if *self == ProtocolError::CrossProtocol {
            return;
        }
        out.extend_from_slice(b"-ERR Protocol error: ");
        match *self {
            ProtocolError::Message(text) => out.extend_from_slice(text.as_bytes()),
            ProtocolError::CrossProtocol => {}
            ProtocolError::ExpectedDollar(byte) => {
                out.extend_from_slice(b"expected '$', got '");
                // As redis-server's addReplyErrorFormat: no line break inside an error line.
                out.push(if matches!(byte, b'\r' | b'\n') { b' ' } else { byte });
                out.push(b'\'');
            }
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// A run of decimal digits (at most 18: no overflow), or `None`.
pub(crate) fn digits(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 18 {
        return None;
    }
    bytes
        .iter()
        .try_fold(0u64, |value, &byte| byte.is_ascii_digit().then(|| value * 10 + u64::from(byte - b'0')))
}

/// Where a count line's `\r` is, once the byte after it has arrived too.
pub(crate) fn find_cr(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&byte| byte == b'\r').filter(|&at| at + 1 < buf.len())
}

/// A word and what follows it.
pub(crate) type Split<'a> = (&'a [u8], &'a [u8]);

/// The next word of an inline request and what follows it (`None`: no more words), split as
/// redis-server's `sdssplitargs` splits: on spaces, a word in double or single quotes taken
/// whole (its closing quote followed by a space or the end, else the quotes are unbalanced).
/// Quoted words with backslash escapes, and quotes inside a word, are refused: their bytes
/// would have to be rewritten, and a frame's arguments are the read buffer's own bytes.
pub(crate) fn inline_word(rest: &[u8]) -> Result<Option<Split<'_>>, &'static str> {
    let rest = trim_start(rest);
    let Some(&first) = rest.first() else { return Ok(None) };
    if first == b'"' || first == b'\'' {
        let body = &rest[1..];
        let close = body.iter().position(|&byte| byte == first || byte == b'\\');
        return match close {
            None => Err("unbalanced quotes in request"),
            Some(at) if body[at] == b'\\' => Err("quoted inline requests with escapes are not supported"),
            Some(at) if body.get(at + 1).is_some_and(|&byte| !is_space(byte)) => {
                Err("unbalanced quotes in request")
            }
            Some(at) => Ok(Some((&body[..at], &body[at + 1..]))),
        };
    }
    let end =
        rest.iter().position(|&byte| is_space(byte) || byte == b'"' || byte == b'\'').unwrap_or(rest.len());
    match rest.get(end) {
        Some(b'"' | b'\'') => Err("quotes inside an inline word are not supported"),
        _ => Ok(Some(rest.split_at(end))),
    }
}

pub(crate) fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n' | b'\x0b' | b'\x0c')
}

pub(crate) fn trim_start(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&byte| !is_space(byte)).unwrap_or(bytes.len());
    &bytes[start..]
}
