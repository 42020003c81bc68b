//! memcached's text protocol: the classic commands (protocol.txt "Commands"), with memcached
//! 1.6's token-count rules and error replies.

use crate::command::{self, Answer, Op};
use crate::number::{strtol, strtoul, token_i32, token_u32, token_u64};
pub use crate::request::{watch, GetKind, Request, ShutdownMode, StoreMode};
use crate::tokens::{Tokens, SHORT, TOKENS_MAX};
use crate::{Limits, Parsed, KEY_BYTES_MAX};

/// Class ids memcached's crawler takes: 1 to 63.
const CRAWLER_CLASSES: std::ops::RangeInclusive<u32> = 1..=63;

/// The class list of `lru_crawler crawl|metadump`: `Some(true)` when it covers every item of a
/// server with one class (`all`, `hash`, or a list naming class 1), `Some(false)` for a valid
/// list without it (memcached answers with an empty dump), `None` for an invalid one
/// (`BADCLASS invalid class id`).
pub fn crawler_classes(classes: &[u8]) -> Option<bool> {
    if classes == b"all" || classes == b"hash" {
        return Some(true);
    }
    let mut first = false;
    // strtok_r: empty pieces between commas are skipped.
    for piece in classes.split(|&byte| byte == b',').filter(|piece| !piece.is_empty()) {
        let class = strtoul(piece).filter(|class| CRAWLER_CLASSES.contains(class))?;
        first |= class == 1;
    }
    Some(first)
}

pub(crate) use crate::request::{BAD_FORMAT, ERROR};
/// A data block not ended by `\r\n`.
pub const BAD_DATA_CHUNK: &str = "CLIENT_ERROR bad data chunk\r\n";
const INVALID_EXPTIME: &str = "CLIENT_ERROR invalid exptime argument\r\n";
const INVALID_DELTA: &str = "CLIENT_ERROR invalid numeric delta argument\r\n";

fn done(request: Request<'_>, len: usize) -> Parsed<'_> {
    Parsed::Request { request, len }
}

fn refuse(reply: &'static str, len: usize, noreply: bool) -> Parsed<'static> {
    Parsed::Refused { reply, len, noreply }
}

/// Parses a text command whose line (line ending stripped) is `line`, `line_len` bytes with
/// its ending, at the front of `buf`.
pub(crate) fn parse<'a>(line: &'a [u8], line_len: usize, buf: &'a [u8], limits: &Limits) -> Parsed<'a> {
    // The hot path: get and gets need only their command token, and their keys are the
    // rest of the line, so they skip the tokenizer.
    if let Some(parsed) = parse_get_fast(line, line_len) {
        return parsed;
    }
    if let Some(parsed) = parse_set_fast(line, line_len, buf, limits) {
        return parsed;
    }
    // Every other command but a long gat or stats fits a short split; the rest take the
    // full one (the same tokens, and memcached's counts for lines over its limit).
    let short = Tokens::<SHORT>::split(line);
    if !short.has_more() {
        return parse_tokens(&short, line, line_len, buf, limits);
    }
    parse_tokens(&Tokens::<TOKENS_MAX>::split(line), line, line_len, buf, limits)
}

fn parse_tokens<'a, const N: usize>(
    tokens: &Tokens<'a, N>,
    line: &'a [u8],
    line_len: usize,
    buf: &'a [u8],
    limits: &Limits,
) -> Parsed<'a> {
    let n = tokens.len();
    // memcached 1.6.40's parser names the command by the bytes before the first space, so a
    // line that starts with a space names none of these: only the commands it then looks up
    // by their first token (below) answer it. Each needs its least count of tokens (else
    // `CLIENT_ERROR bad command line format`) and ignores tokens past what it reads.
    if line.first() != Some(&b' ') {
        let least = match tokens.get(0) {
            b"get" | b"gets" | b"delete" => 2,
            b"gat" | b"gats" | b"incr" | b"decr" | b"touch" => 3,
            b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => 5,
            _ => 0,
        };
        if n < least {
            return refuse(BAD_FORMAT, line_len, false);
        }
        match tokens.get(0) {
            b"get" | b"gets" => return parse_get(tokens, line, line_len, 1),
            b"gat" | b"gats" => return parse_get(tokens, line, line_len, 2),
            b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
                return parse_store(tokens, line_len, buf, limits)
            }
            b"delete" => return parse_delete(tokens, line_len),
            b"incr" | b"decr" => return parse_arith(tokens, line_len),
            b"touch" => return parse_touch(tokens, line_len),
            b"stats" if tokens.get(1) == b"cachedump" => {
                let args = (n >= 4).then(|| (strtoul(tokens.get(2)), strtoul(tokens.get(3))));
                return done(Request::CacheDump { args }, line_len);
            }
            b"stats" => {
                return done(Request::Stats { group: tokens.get(1), argument: tokens.get(2) }, line_len)
            }
            // memcached ignores arguments to these.
            b"version" => return done(Request::Version, line_len),
            b"quit" => return done(Request::Quit, line_len),
            b"mn" => return done(Request::MetaNoop, line_len),
            b"watch" => {
                let streams = (1..n)
                    .try_fold(0, |streams, at| watch::named(tokens.get(at)).map(|bit| streams | bit))
                    .map(|streams| if n > 1 { streams } else { watch::FETCHERS });
                return done(Request::Watch { streams }, line_len);
            }
            _ => {}
        }
    }
    let noreply = tokens.noreply();
    match tokens.get(0) {
        b"flush_all" => parse_flush_all(tokens, line_len, noreply),
        b"cache_memlimit" => match token_u32(tokens.get(1)).filter(|_| n >= 2) {
            Some(megabytes) => done(Request::CacheMemlimit { megabytes, noreply }, line_len),
            None => refuse(ERROR, line_len, noreply),
        },
        b"slabs" => parse_slabs(tokens, line_len, noreply),
        b"debugtime" => match strtol(tokens.get(1)) {
            Some(delta) if n >= 2 => done(Request::DebugTime { delta }, line_len),
            _ => refuse(ERROR, line_len, noreply),
        },
        b"verbosity" => match token_u32(tokens.get(1)).filter(|_| n >= 2) {
            // memcached reads the level and ignores its value here.
            Some(_) => done(Request::Verbosity { noreply }, line_len),
            None => refuse(BAD_FORMAT, line_len, noreply),
        },
        b"lru_crawler" => parse_lru_crawler(tokens, line_len),
        b"shutdown" => {
            let mode = match (n, tokens.get(1)) {
                (1, _) => ShutdownMode::Now,
                (2, b"graceful") => ShutdownMode::Graceful,
                _ => ShutdownMode::Invalid,
            };
            done(Request::Shutdown { mode }, line_len)
        }
        b"refresh_certs" => done(Request::RefreshCerts { noreply }, line_len),
        b"config" if n == 3 && tokens.get(2) == b"cluster" => match tokens.get(1) {
            b"get" => done(Request::Cluster { reload: false }, line_len),
            b"reload" => done(Request::Cluster { reload: true }, line_len),
            _ => refuse(ERROR, line_len, noreply),
        },
        _ if n > 1 && tokens.get(n - 1).starts_with(b"HTTP/") => Parsed::Close,
        _ => refuse(ERROR, line_len, noreply),
    }
}

/// `get <keys>` and `gets <keys>` without tokenizing; `None` for any other line.
fn parse_get_fast(line: &[u8], line_len: usize) -> Option<Parsed<'_>> {
    let (kind, keys) = if let Some(keys) = line.strip_prefix(b"get ") {
        (GetKind::Get, keys)
    } else {
        (GetKind::Gets, line.strip_prefix(b"gets ")?)
    };
    // Like the tokenizer's count check: a get needs a key.
    let Some(request) = get_request(kind, keys) else {
        return Some(refuse(BAD_FORMAT, line_len, false));
    };
    Some(done(request, line_len))
}

/// The get of `keys` (the line after its command), with its one key found where it names one;
/// `None` where it names none. One scan of the line.
#[inline(always)]
fn get_request(kind: GetKind, keys: &[u8]) -> Option<Request<'_>> {
    if !keys.is_empty() && !crate::tokens::has_space(keys) {
        return Some(Request::Get { kind, keys, single: true });
    }
    let start = keys.iter().position(|&byte| byte != b' ')?;
    let rest = &keys[start..];
    let end = rest.iter().position(|&byte| byte == b' ').unwrap_or(rest.len());
    Some(match rest[end..].iter().all(|&byte| byte == b' ') {
        true => Request::Get { kind, keys: &rest[..end], single: true },
        false => Request::Get { kind, keys, single: false },
    })
}

/// get family: the keys start after `key_index` tokens; the line must hold at least one key.
fn parse_get<'a, const N: usize>(
    tokens: &Tokens<'a, N>,
    line: &'a [u8],
    line_len: usize,
    key_index: usize,
) -> Parsed<'a> {
    // get needs a key; gat needs its exptime, and with no key answers just END.
    if tokens.len() < 2 {
        return refuse(ERROR, line_len, false);
    }
    let kind = match tokens.get(0) {
        b"get" => GetKind::Get,
        b"gets" => GetKind::Gets,
        command => {
            let Some(exptime) = token_i32(tokens.get(1)) else {
                return refuse(INVALID_EXPTIME, line_len, false);
            };
            if command == b"gat" {
                GetKind::Gat { exptime }
            } else {
                GetKind::Gats { exptime }
            }
        }
    };
    // The keys are the rest of the line after the command (and exptime) tokens.
    let last_fixed = tokens.get(key_index - 1);
    let keys_start = last_fixed.as_ptr() as usize - line.as_ptr() as usize + last_fixed.len();
    let keys = &line[keys_start..];
    // gat and gats with no key answer END, as memcached's do.
    done(get_request(kind, keys).unwrap_or(Request::Get { kind, keys, single: false }), line_len)
}

fn store_mode<const N: usize>(tokens: &Tokens<'_, N>) -> Option<StoreMode> {
    Some(match tokens.get(0) {
        b"set" => StoreMode::Set,
        b"add" => StoreMode::Add,
        b"replace" => StoreMode::Replace,
        b"append" => StoreMode::Append,
        b"prepend" => StoreMode::Prepend,
        _ => StoreMode::Cas(token_u64(tokens.get(5)).filter(|_| !tokens.get(5).is_empty())?),
    })
}

/// `set <key> <flags> <exptime> <bytes>[ noreply]` with single spaces and plain digits, read
/// without the tokenizer; `None` for any other line, which the tokenizer's path then reads (to
/// the same request: the tokens are these, and [`store`] reads them the same way).
fn parse_set_fast<'a>(line: &'a [u8], line_len: usize, buf: &'a [u8], limits: &Limits) -> Option<Parsed<'a>> {
    let rest = line.strip_prefix(b"set ")?;
    let key_len = rest.iter().position(|&byte| byte == b' ')?;
    if key_len == 0 {
        return None;
    }
    let mut fields: [&[u8]; 3] = [&[]; 3];
    let mut at = key_len + 1;
    for (index, field) in fields.iter_mut().enumerate() {
        let start = at;
        while at < rest.len() && rest[at].is_ascii_digit() {
            at += 1;
        }
        if at == start {
            return None;
        }
        *field = &rest[start..at];
        if index < 2 {
            if rest.get(at) != Some(&b' ') {
                return None;
            }
            at += 1;
        }
    }
    let noreply = match &rest[at..] {
        b"" => false,
        b" noreply" => true,
        _ => return None,
    };
    Some(store(Some(StoreMode::Set), &rest[..key_len], fields, noreply, line_len, buf, limits))
}

fn parse_store<'a, const N: usize>(
    tokens: &Tokens<'a, N>,
    line_len: usize,
    buf: &'a [u8],
    limits: &Limits,
) -> Parsed<'a> {
    let numbers = [tokens.get(2), tokens.get(3), tokens.get(4)];
    store(store_mode(tokens), tokens.get(1), numbers, tokens.noreply(), line_len, buf, limits)
}

/// A storage command from its tokens: `mode` (`None`: a cas unique that did not parse), the
/// key, and the flags, exptime and length tokens. As memcached 1.6.40 does: a length that
/// does not parse refuses the line alone (its reply is sent even with noreply); once the
/// length is known, any other refusal swallows the data block too.
fn store<'a>(
    mode: Option<StoreMode>,
    key: &'a [u8],
    [flags, exptime, value_len]: [&[u8]; 3],
    noreply: bool,
    line_len: usize,
    buf: &'a [u8],
    limits: &Limits,
) -> Parsed<'a> {
    let Some(value_len) = token_i32(value_len).filter(|len| (0..=i32::MAX - 2).contains(len)) else {
        return refuse(BAD_FORMAT, line_len, false);
    };
    let value_len = value_len as usize;
    let len = line_len + value_len + 2;
    if key.len() > KEY_BYTES_MAX {
        return refuse(BAD_FORMAT, len, noreply);
    }
    let (Some(flags), Some(exptime), Some(mode)) = (strtoul(flags), strtol(exptime), mode) else {
        return refuse(BAD_FORMAT, len, noreply);
    };
    if limits.too_large(key.len(), value_len, flags) {
        return done(Request::TooLarge { mode, key, noreply }, len);
    }
    if buf.len() < len {
        return Parsed::Incomplete;
    }
    if &buf[len - 2..len] != b"\r\n" {
        return refuse(BAD_DATA_CHUNK, len, noreply);
    }
    let data = &buf[line_len..line_len + value_len];
    done(Request::Store { mode, key, flags, exptime, data, noreply }, len)
}

/// The flags and exptime of a storage command's line (without its line ending), read as
/// the parser reads them: for a store whose data block is still arriving, which the parser,
/// given only the line, returns as too large for an item of no bytes (`Request::TooLarge`).
pub fn store_fields(line: &[u8]) -> Option<(u32, i32)> {
    let tokens = Tokens::<SHORT>::split(line);
    Some((strtoul(tokens.get(2))?, strtol(tokens.get(3))?))
}

fn parse_delete<'a, const N: usize>(tokens: &Tokens<'a, N>, line_len: usize) -> Parsed<'a> {
    let noreply = tokens.noreply();
    let key = tokens.get(1);
    if key.len() > KEY_BYTES_MAX {
        return refuse(BAD_FORMAT, line_len, noreply);
    }
    done(Request::Delete { key, noreply }, line_len)
}

fn parse_arith<'a, const N: usize>(tokens: &Tokens<'a, N>, line_len: usize) -> Parsed<'a> {
    let noreply = tokens.noreply();
    let key = tokens.get(1);
    if key.len() > KEY_BYTES_MAX {
        return refuse(BAD_FORMAT, line_len, noreply);
    }
    let Some(delta) = token_u64(tokens.get(2)) else {
        return refuse(INVALID_DELTA, line_len, noreply);
    };
    let decrement = tokens.get(0) == b"decr";
    done(Request::Arith { key, delta, decrement, noreply }, line_len)
}

fn parse_touch<'a, const N: usize>(tokens: &Tokens<'a, N>, line_len: usize) -> Parsed<'a> {
    let noreply = tokens.noreply();
    let key = tokens.get(1);
    if key.len() > KEY_BYTES_MAX {
        return refuse(BAD_FORMAT, line_len, noreply);
    }
    let Some(exptime) = token_i32(tokens.get(2)) else {
        return refuse(INVALID_EXPTIME, line_len, noreply);
    };
    done(Request::Touch { key, exptime, noreply }, line_len)
}

/// `flush_all [delay] [noreply]`: a delay is read when there is any token beside the command
/// and noreply (memcached 1.6.40 ignores the rest).
fn parse_flush_all<'a, const N: usize>(tokens: &Tokens<'a, N>, line_len: usize, noreply: bool) -> Parsed<'a> {
    let delay = if tokens.len() == 1 + noreply as usize {
        0
    } else {
        match token_i32(tokens.get(1)) {
            Some(delay) => delay,
            None => return refuse(INVALID_EXPTIME, line_len, noreply),
        }
    };
    done(Request::FlushAll { delay, noreply }, line_len)
}

/// `slabs`: memcached 1.6's `slabs reassign` and `slabs automove` checks (any other `slabs`
/// line answers `ERROR`).
fn parse_slabs<'a, const N: usize>(tokens: &Tokens<'a, N>, line_len: usize, noreply: bool) -> Parsed<'a> {
    let ntokens = tokens.len() + 1;
    if ntokens == 5 && tokens.get(1) == b"reassign" {
        let classes = strtol(tokens.get(2)).zip(strtol(tokens.get(3)));
        return done(Request::SlabsReassign { classes }, line_len);
    }
    if ntokens < 4 || tokens.get(1) != b"automove" {
        return refuse(ERROR, line_len, noreply);
    }
    if tokens.get(2) == b"ratio" {
        // A ratio only tunes the rebalancer: accepted when it is a number, as memcached does.
        let ratio = std::str::from_utf8(tokens.get(3)).ok().and_then(|text| text.parse::<f64>().ok());
        return match ratio {
            Some(_) if ntokens >= 5 => done(Request::SlabsAutomove { noreply }, line_len),
            _ => refuse(ERROR, line_len, noreply),
        };
    }
    match strtoul(tokens.get(2)) {
        None => refuse(BAD_FORMAT, line_len, noreply),
        Some(0..=2) => done(Request::SlabsAutomove { noreply }, line_len),
        Some(_) => refuse(ERROR, line_len, noreply),
    }
}

/// `lru_crawler`, with memcached 1.6's token counts and replies.
fn parse_lru_crawler<'a, const N: usize>(tokens: &Tokens<'a, N>, line_len: usize) -> Parsed<'a> {
    const SLEEP_TOO_LONG: &str = "CLIENT_ERROR sleep must be one second or less\r\n";
    let ntokens = tokens.len() + 1;
    match (ntokens, tokens.get(1)) {
        (4, b"crawl") => done(Request::Crawl { classes: tokens.get(2) }, line_len),
        (4, b"metadump") => done(Request::Metadump { classes: tokens.get(2), keys: false }, line_len),
        (4, b"mgdump") => done(Request::Metadump { classes: tokens.get(2), keys: true }, line_len),
        (4, b"tocrawl") => match strtoul(tokens.get(2)) {
            Some(_) => done(Request::CrawlerPacing, line_len),
            None => refuse(BAD_FORMAT, line_len, false),
        },
        (4, b"sleep") => match strtoul(tokens.get(2)) {
            Some(micros) if micros > 1_000_000 => refuse(SLEEP_TOO_LONG, line_len, false),
            Some(_) => done(Request::CrawlerPacing, line_len),
            None => refuse(BAD_FORMAT, line_len, false),
        },
        (3, b"enable") => done(Request::CrawlerSwitch { enable: true }, line_len),
        (3, b"disable") => done(Request::CrawlerSwitch { enable: false }, line_len),
        _ => refuse(ERROR, line_len, false),
    }
}

/// A text command on one key in the one vocabulary ([`crate::command`]); `None` for the
/// others (a get's line of keys runs as one get per key: [`GetKind::command`]).
#[inline]
pub(crate) fn key_command<'r>(request: &'r Request<'r>) -> Option<command::Command<'r>> {
    let text = |noreply| Answer::Text { noreply, with_cas: false };
    let (key, op, answer) = match *request {
        Request::Store { mode, key, flags, exptime, data, noreply } => {
            let exptime = i64::from(exptime);
            let drops_refused = mode == StoreMode::Set;
            let store =
                command::Store { mode, flags, exptime, data, vivify: None, cas_in: None, drops_refused };
            (key, Op::Store(store), text(noreply))
        }
        Request::TooLarge { mode, key, noreply } => {
            (key, Op::TooLarge { drops: mode == StoreMode::Set }, text(noreply))
        }
        Request::Delete { key, noreply } => (key, Op::Delete(command::Delete::default()), text(noreply)),
        Request::Arith { key, delta, decrement, noreply } => {
            (key, Op::Arith(command::Arith { delta, decrement, ..command::Arith::default() }), text(noreply))
        }
        Request::Touch { key, exptime, noreply } => {
            (key, Op::Touch { exptime: i64::from(exptime), read: false }, text(noreply))
        }
        _ => return None,
    };
    Some(command::Command { key, op, answer })
}

impl GetKind {
    /// The get of one of its keys, in the one vocabulary.
    #[inline]
    pub fn command(self, key: &[u8]) -> command::Command<'_> {
        let get = command::Get::touching(self.touch().map(i64::from));
        command::Command {
            key,
            op: Op::Get(get),
            answer: Answer::Text { noreply: false, with_cas: self.with_cas() },
        }
    }
}

pub(crate) mod reply;

#[cfg(test)]
mod tests;
