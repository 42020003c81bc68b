//! memcached's meta protocol (protocol.txt "Meta Commands"): mg ms md ma me (mn is parsed with
//! the text commands). Flags are single letters, some with a token after them; the reply
//! reflects the return flags in the order the request gave them.

use crate::command::{self, Answer, Command, Op};
use crate::number::{token_i32, token_u32, token_u64};
pub use crate::request::{Meta, MetaCommand, MetaOptions};
use crate::request::{Request, BAD_FORMAT, DECODED_KEY_BYTES_MAX, META_TOKENS_MAX, OPAQUE_BYTES_MAX};
use crate::tokens::{Tokens, TOKENS_MAX};
use crate::{Limits, Parsed, StoreMode, KEY_BYTES_MAX};
use base64::Engine;

fn refuse(reply: &'static str, len: usize) -> Parsed<'static> {
    Parsed::Refused { reply, len, noreply: false }
}

/// Parses a meta command line (`line` without its ending, `line_len` with it).
pub(crate) fn parse<'a>(
    command: MetaCommand,
    line: &'a [u8],
    line_len: usize,
    buf: &'a [u8],
    limits: &Limits,
) -> Parsed<'a> {
    let tokens = Tokens::<TOKENS_MAX>::split(line);
    let n = tokens.len();
    let first_flag = if command == MetaCommand::Set { 3 } else { 2 };
    // memcached 1.6.40's tokenizer refuses a flag that starts with neither a letter nor a
    // digit, and a command short of its key (and ms of its length): the line alone.
    let odd_flag = tokens.as_slice().iter().skip(first_flag).any(|token| {
        let first = token[0];
        !(b'A'..=b'z').contains(&first) && !first.is_ascii_digit()
    });
    if n < first_flag || odd_flag {
        return refuse(BAD_FORMAT, line_len);
    }
    let mut swallow = 0;
    if command == MetaCommand::Set {
        let Some(value_len) = token_i32(tokens.get(2)).filter(|&len| (0..=i32::MAX - 2).contains(&len))
        else {
            return refuse(BAD_FORMAT, line_len);
        };
        swallow = value_len as usize + 2;
    }
    let len = line_len + swallow;
    let key_token = tokens.get(1);
    if key_token.len() > KEY_BYTES_MAX {
        // ma words every refusal of its flag parse (the key's length among them) alike.
        let reply = if command == MetaCommand::Arith { MA_REFUSED } else { BAD_FORMAT };
        return refuse(reply, len);
    }
    if n > META_TOKENS_MAX {
        return refuse(
            match command {
                MetaCommand::Arith => MA_REFUSED,
                _ => "CLIENT_ERROR options flags are too long\r\n",
            },
            len,
        );
    }
    let flags_line = match tokens.as_slice().get(first_flag) {
        Some(first) => &line[first.as_ptr() as usize - line.as_ptr() as usize..],
        None => &[],
    };
    let mut meta = Meta {
        command,
        key_token,
        decoded: None,
        flags_line,
        value_len: swallow.saturating_sub(2),
        options: MetaOptions { delta: 1, ..MetaOptions::default() },
        data: &[],
    };
    if let Err(reply) = parse_flags(&mut meta, &tokens.as_slice()[first_flag.min(tokens.len())..]) {
        // memcached's ma reports every flag error the same way.
        let reply = match command {
            MetaCommand::Arith => MA_REFUSED,
            _ => reply,
        };
        return refuse(reply, len);
    }
    if command == MetaCommand::Set {
        if let Some(mode) = meta.options.mode {
            if !b"EAPRS".contains(&mode) {
                return refuse("CLIENT_ERROR invalid mode for ms M token\r\n", len);
            }
        }
        if meta.too_large(limits) {
            return Parsed::Request { request: Request::Meta(meta), len };
        }
        if buf.len() < len {
            return Parsed::Incomplete;
        }
        if &buf[len - 2..len] != b"\r\n" {
            return refuse("CLIENT_ERROR bad data chunk\r\n", len);
        }
        meta.data = &buf[line_len..len - 2];
    }
    if command == MetaCommand::Arith {
        if let Some(mode) = meta.options.mode {
            if !b"ID+-".contains(&mode) {
                return refuse("CLIENT_ERROR invalid mode for ma M token\r\n", len);
            }
        }
    }
    Parsed::Request { request: Request::Meta(meta), len }
}

/// memcached words every refusal of an `ma` flag parse alike.
const MA_REFUSED: &str = "CLIENT_ERROR invalid or duplicate flag\r\n";

const BAD_TOKEN: &str = "CLIENT_ERROR bad token in command line format\r\n";

/// memcached's `_meta_flag_preparse`: every flag once, known letters only, tokens well formed.
fn parse_flags(meta: &mut Meta<'_>, flag_tokens: &[&[u8]]) -> Result<(), &'static str> {
    let options = &mut meta.options;
    let mut error = None;
    for &token in flag_tokens {
        let letter = token[0];
        if !(b'A'..=b'z').contains(&letter) || options.has(letter) {
            return Err(if (b'A'..=b'z').contains(&letter) {
                "CLIENT_ERROR duplicate flag\r\n"
            } else {
                "CLIENT_ERROR invalid flag\r\n"
            });
        }
        options.seen |= 1 << (letter - b'A');
        let value = &token[1..];
        let failed = match letter {
            b'b' => {
                let mut bytes = [0u8; DECODED_KEY_BYTES_MAX];
                match base64::engine::general_purpose::STANDARD.decode_slice(meta.key_token, &mut bytes) {
                    Ok(len) if len > 0 => {
                        meta.decoded = Some(bytes[..len].to_vec());
                        None
                    }
                    _ => Some("CLIENT_ERROR error decoding key\r\n"),
                }
            }
            b'N' => token_i32(value).map(|ttl| options.vivify = Some(ttl)).map_or(Some(BAD_TOKEN), |_| None),
            b'T' => token_i32(value).map(|ttl| options.ttl = Some(ttl)).map_or(Some(BAD_TOKEN), |_| None),
            b'R' => token_i32(value).map(|ttl| options.recache = Some(ttl)).map_or(Some(BAD_TOKEN), |_| None),
            b'C' => token_u64(value).map(|cas| options.cas = Some(cas)).map_or(Some(BAD_TOKEN), |_| None),
            b'E' => token_u64(value).map(|cas| options.cas_in = Some(cas)).map_or(Some(BAD_TOKEN), |_| None),
            b'F' => {
                token_u32(value).map(|flags| options.client_flags = flags).map_or(Some(BAD_FORMAT), |_| None)
            }
            // memcached 1.6.40 reads the byte after the letter, whatever follows it (none: a
            // mode no command has).
            b'M' => {
                options.mode = Some(value.first().copied().unwrap_or(b' '));
                None
            }
            b'J' => token_u64(value)
                .map(|initial| options.initial = initial)
                .map_or(Some("CLIENT_ERROR invalid numeric initial value\r\n"), |_| None),
            b'D' => token_u64(value)
                .map(|delta| options.delta = delta)
                .map_or(Some("CLIENT_ERROR invalid numeric delta value\r\n"), |_| None),
            b'O' if token.len() > OPAQUE_BYTES_MAX => Some("CLIENT_ERROR opaque token too long\r\n"),
            b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'v' | b'h' | b'u' | b'q' | b'l'
            | b'I' | b'x' => None,
            _ => return Err("CLIENT_ERROR invalid flag\r\n"),
        };
        // A key that is not base64 outranks every malformed token (memcached decodes the key
        // between checking the letters and reading the tokens).
        if error.is_none() || letter == b'b' {
            error = failed.or(error);
        }
    }
    error.map_or(Ok(()), Err)
}

impl<'r> Meta<'r> {
    /// The command in the one vocabulary ([`crate::command`]): mg, ms, md, ma and me, their
    /// flags read in request order where memcached applies them in that order (N and T).
    pub fn key_command(&'r self, limits: &Limits) -> Command<'r> {
        let options = &self.options;
        let op = match self.command {
            MetaCommand::Get => Op::Get(command::Get {
                touch: options.ttl.map(i64::from),
                vivify: options.vivify.map(|_| self.vivify_exptime()),
                recache_below_secs: options.recache.map(|secs| secs.max(0) as u32),
                recache_before_touch: options.recache.is_some() && self.before(b'R', b'T'),
                no_update: options.has(b'u'),
                cas_in: options.cas_in,
            }),
            MetaCommand::Set if self.too_large(limits) => Op::TooLarge { drops: true },
            MetaCommand::Set => Op::Store(command::Store {
                mode: self.store_mode(),
                flags: options.client_flags,
                exptime: i64::from(options.ttl.unwrap_or(0)),
                data: self.data,
                vivify: options.vivify.map(i64::from),
                cas_in: options.cas_in,
                drops_refused: true,
            }),
            MetaCommand::Delete => Op::Delete(command::Delete {
                cas: options.cas,
                invalidate: options.has(b'I'),
                keep_item: options.has(b'x'),
                exptime: options.ttl.map(i64::from),
                flags: options.client_flags,
                cas_in: options.cas_in,
            }),
            MetaCommand::Arith => Op::Arith(command::Arith {
                delta: options.delta,
                decrement: self.decrement(),
                // C0 compares nothing here (memcached's ma ignores it).
                cas: options.cas.unwrap_or(0),
                create: options.vivify.map(|_| (options.initial, self.vivify_exptime())),
                exptime: options.ttl.map(i64::from),
                cas_in: options.cas_in,
            }),
            MetaCommand::Debug => Op::Inspect,
        };
        Command { key: self.key(), op, answer: Answer::Meta(self) }
    }

    /// ms: the store mode its M, C and I flags give. As memcached: set and replace compare the
    /// CAS (with I, an older one stores the value marked stale), append and prepend compare a
    /// nonzero one, add ignores it.
    fn store_mode(&self) -> StoreMode {
        let options = &self.options;
        let mode = match options.mode {
            Some(b'E') => StoreMode::Add,
            Some(b'A') => StoreMode::Append,
            Some(b'P') => StoreMode::Prepend,
            Some(b'R') => StoreMode::Replace,
            _ => StoreMode::Set,
        };
        let Some(cas) = options.cas else { return mode };
        match mode {
            // C0 never matches, and is no older version either: memcached answers EX.
            StoreMode::Set | StoreMode::Replace if options.has(b'I') && cas != 0 => {
                StoreMode::CasOrStale(cas)
            }
            StoreMode::Set | StoreMode::Replace => StoreMode::Cas(cas),
            StoreMode::Append if cas != 0 => StoreMode::AppendCas(cas),
            StoreMode::Prepend if cas != 0 => StoreMode::PrependCas(cas),
            other => other,
        }
    }

    /// The exptime an item created on a miss (N) ends with: memcached applies N and T in the
    /// order the request lists them, so the later of the two stands.
    fn vivify_exptime(&self) -> i64 {
        let options = &self.options;
        let mut exptime = 0;
        for token in self.flag_tokens() {
            match token[0] {
                b'N' => exptime = options.vivify.unwrap_or(0),
                b'T' => exptime = options.ttl.unwrap_or(exptime),
                _ => {}
            }
        }
        i64::from(exptime)
    }

    /// Whether flag `first` comes before flag `second` in the request (as `Option`s order: a
    /// flag not given counts as before every one given).
    fn before(&self, first: u8, second: u8) -> bool {
        let at = |letter| self.flag_tokens().position(|token| token[0] == letter);
        at(first) < at(second)
    }
}

pub(crate) mod reply;
pub use reply::ttl_secs;

#[cfg(test)]
mod tests;
