//! RESP commands on one key that read the key and then write it (GETDEL, GETSET, SET with GET
//! or KEEPTTL, PERSIST, EXPIRE with NX XX GT LT, SETRANGE, INCRBYFLOAT), or read more of it
//! than a get answers (GETRANGE, EXPIRETIME, MEMORY USAGE, OBJECT IDLETIME): parsed and checked here as redis-server 7.0
//! checks them (t_string.c, expire.c), run by the server at the key's owner as a few steps of
//! the one vocabulary. Only the owner writes a partition, so the steps are atomic there.

use super::command::{expire_exptime, integer, Call, Refusal, Unit};
use super::Frame;
use crate::StoreMode;

/// A command on one key run at its owner (or, reading only, at any CREW reader).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Owned<'a> {
    /// The key.
    pub key: &'a [u8],
    /// What is done to it.
    pub step: Step<'a>,
}

/// What an [`Owned`] command does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step<'a> {
    /// GETDEL: the value, and the key goes.
    GetDel,
    /// SET with GET or KEEPTTL, and GETSET: store `value` (as `mode` decides) with memcached's
    /// `exptime` (`None`: the key keeps its expiry); with `get`, answer the value it had.
    Set {
        /// The new value.
        value: &'a [u8],
        /// SET's NX (Add), XX (Replace) or neither (Set).
        mode: StoreMode,
        /// memcached's exptime, or `None` for KEEPTTL.
        exptime: Option<i64>,
        /// Answer the old value (or null) instead of `+OK`.
        get: bool,
    },
    /// PERSIST: the key's expiry goes; `:1` when it had one.
    Persist,
    /// MEMORY USAGE: the bytes the key's item takes in the log.
    MemoryUsage,
    /// OBJECT IDLETIME: seconds since the key was last read or written.
    IdleTime,
    /// OBJECT FREQ: refused for a key there, as redis-server refuses it under an LRU policy.
    Freq,
    /// OBJECT ENCODING: the encoding redis-server would name for the value (a string's by its
    /// length and whether it is an integer; a collection's is compact at every size here).
    Encoding,
    /// OBJECT REFCOUNT: 1 (no value is shared here; nor does redis-server share one under an
    /// LRU policy, which CONFIG GET maxmemory-policy reports).
    RefCount,
    /// GETEX with an expiry redis-server refuses: as t_string.c's getexCommand, a missing key
    /// answers null before the time is checked; a key there gets the refusal
    /// (`not_integer`: not a number, else an invalid expire time).
    GetExRefused {
        /// The time is not an integer.
        not_integer: bool,
    },
    /// EXPIRE and its kin with a condition: the new expiry as memcached's exptime (-1: in
    /// the past, the key goes), set only when `when` allows.
    Expire {
        /// memcached's exptime.
        exptime: i64,
        /// NX, XX, GT, LT or none.
        when: When,
    },
    /// EXPIRETIME (`millis`: PEXPIRETIME): the unix time the key expires at.
    ExpireTime {
        /// In milliseconds.
        millis: bool,
    },
    /// GETRANGE key start end (inclusive, negative from the end).
    GetRange {
        /// First byte.
        start: i64,
        /// Last byte.
        end: i64,
    },
    /// SETRANGE key offset value: written at `offset`, the value padded with zero bytes up to
    /// it; the length after.
    SetRange {
        /// Where.
        offset: usize,
        /// What.
        value: &'a [u8],
    },
    /// A command on a collection (a hash), run on the key's item by the collection's rules
    /// (super::collection).
    Collection(super::collection::Command<'a>),
    /// INCRBYFLOAT: the value read as a float plus this.
    IncrByFloat(f64),
    /// RENAME (`nx`: RENAMENX) to this key: the value, flags and expiry move.
    Rename {
        /// The new name.
        to: &'a [u8],
        /// RENAMENX: only when the new name is free.
        nx: bool,
        /// MOVE to another database (`to` is the key there): as RENAMENX, and `:0` where
        /// there is no such key.
        moving: bool,
    },
    /// COPY to this key (REPLACE: over a key already there).
    Copy {
        /// The copy's name.
        to: &'a [u8],
        /// REPLACE.
        replace: bool,
    },
}

impl<'a> Owned<'a> {
    /// Whether it only reads (a CREW reader may run it).
    pub fn read_only(&self) -> bool {
        if let Step::Collection(command) = self.step {
            return command.read_only();
        }
        matches!(
            self.step,
            Step::GetRange { .. }
                | Step::ExpireTime { .. }
                | Step::GetExRefused { .. }
                | Step::MemoryUsage
                | Step::IdleTime
                | Step::Freq
                | Step::Encoding
                | Step::RefCount
        )
    }

    /// The second key it writes (RENAME's and COPY's destination): one worker must own both.
    pub fn other_key(&self) -> Option<&'a [u8]> {
        match self.step {
            Step::Rename { to, .. } | Step::Copy { to, .. } => Some(to),
            Step::Collection(command) => command.other_key(),
            _ => None,
        }
    }
}

/// EXPIRE's conditions (Redis 7.0's NX, XX, GT, LT; none: always), checked one after
/// another as expire.c checks them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct When {
    /// NX: only a key with no expiry.
    pub nx: bool,
    /// XX: only a key with an expiry.
    pub xx: bool,
    /// GT: only a later expiry (a key with none is never later).
    pub gt: bool,
    /// LT: only an earlier expiry (a key with none takes any).
    pub lt: bool,
}

impl When {
    /// Whether a key expiring at `current` (0: never) may take `new` (0: never).
    pub fn allows(self, current: u64, new: u64) -> bool {
        let latest = |expiry: u64| if expiry == 0 { u64::MAX } else { expiry };
        !(self.nx && current != 0
            || self.xx && current == 0
            || self.gt && (current == 0 || latest(new) <= latest(current))
            || self.lt && current != 0 && latest(new) >= latest(current))
    }
}

fn owned<'a>(key: &'a [u8], step: Step<'a>) -> Call<'a> {
    Call::Owned(Owned { key, step })
}

/// GETDEL key.
pub(super) fn getdel(key: &[u8]) -> Call<'_> {
    owned(key, Step::GetDel)
}

/// GETSET key value: SET with GET, its expiry gone.
pub(super) fn getset<'a>(key: &'a [u8], value: &'a [u8]) -> Call<'a> {
    owned(key, Step::Set { value, mode: StoreMode::Set, exptime: Some(0), get: true })
}

/// SET with GET or KEEPTTL (its other options already checked).
pub(super) fn set_owned<'a>(
    (key, value): (&'a [u8], &'a [u8]),
    mode: StoreMode,
    exptime: Option<i64>,
    get: bool,
) -> Call<'a> {
    owned(key, Step::Set { value, mode, exptime, get })
}

/// PERSIST key.
pub(super) fn persist(key: &[u8]) -> Call<'_> {
    owned(key, Step::Persist)
}

/// EXPIRETIME key, PEXPIRETIME key.
pub(super) fn expiretime(key: &[u8], millis: bool) -> Call<'_> {
    owned(key, Step::ExpireTime { millis })
}

/// EXPIRE key time NX|XX|GT|LT...: the options as expire.c reads them.
pub(super) fn expire_when<'a>(name: &'static str, frame: &Frame<'a>, unit: Unit, now: i64) -> Call<'a> {
    let (key, time) = (frame.arg(1).unwrap_or_default(), frame.arg(2).unwrap_or_default());
    let mut when = When::default();
    for option in frame.args().skip(3) {
        let flag = match option.to_ascii_lowercase().as_slice() {
            b"nx" => &mut when.nx,
            b"xx" => &mut when.xx,
            b"gt" => &mut when.gt,
            b"lt" => &mut when.lt,
            _ => return Call::Error(Refusal::UnsupportedOption(option)),
        };
        *flag = true;
    }
    if when.nx && (when.xx || when.gt || when.lt) {
        return Call::Error(Refusal::Message(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if when.gt && when.lt {
        return Call::Error(Refusal::Message("GT and LT options at the same time are not compatible"));
    }
    match expire_exptime(time, unit, name, now) {
        Ok(exptime) => owned(key, Step::Expire { exptime, when }),
        Err(refusal) => Call::Error(refusal),
    }
}

/// GETRANGE key start end.
pub(super) fn getrange<'a>(key: &'a [u8], start: &[u8], end: &[u8]) -> Call<'a> {
    match (integer(start), integer(end)) {
        (Some(start), Some(end)) => owned(key, Step::GetRange { start, end }),
        _ => Call::Error(Refusal::NotInteger),
    }
}

/// SETRANGE key offset value: an offset past `item_max` (the item size limit) is refused as
/// redis-server refuses one past proto-max-bulk-len.
pub(super) fn setrange<'a>(key: &'a [u8], offset: &[u8], value: &'a [u8], item_max: usize) -> Call<'a> {
    let Some(offset) = integer(offset) else {
        return Call::Error(Refusal::NotInteger);
    };
    if offset < 0 {
        return Call::Error(Refusal::Message("offset is out of range"));
    }
    if !value.is_empty() && offset as u64 + value.len() as u64 > item_max as u64 {
        return Call::Error(Refusal::Message("string exceeds maximum allowed size (proto-max-bulk-len)"));
    }
    owned(key, Step::SetRange { offset: offset as usize, value })
}

/// INCRBYFLOAT key increment.
pub(super) fn incrbyfloat<'a>(key: &'a [u8], by: &[u8]) -> Call<'a> {
    match float(by) {
        Some(by) => owned(key, Step::IncrByFloat(by)),
        None => Call::Error(Refusal::Message("value is not a valid float")),
    }
}

/// RENAME key newkey, RENAMENX key newkey.
pub(super) fn rename<'a>(key: &'a [u8], to: &'a [u8], nx: bool) -> Call<'a> {
    owned(key, Step::Rename { to, nx, moving: false })
}

/// MOVE key db, as db.c's moveCommand checks it: `db` an integer, one of the `databases`,
/// not the connection's own. A MOVE that passes is mapped (super::db) into
/// `MOVE key key-in-db [FF FF db]`: both keys as the store has them.
pub(super) fn move_key<'a>(frame: &Frame<'a>, databases: u32) -> Call<'a> {
    let (key, second) = (frame.arg(1).unwrap_or_default(), frame.arg(2).unwrap_or_default());
    match (frame.argc(), frame.arg(3)) {
        (4, Some([0xFF, 0xFF, _])) => return owned(key, Step::Rename { to: second, nx: true, moving: true }),
        (3, _) => {}
        _ => return Call::Error(Refusal::Arity("move")),
    }
    match integer(second) {
        None => Call::Error(Refusal::NotInteger),
        Some(db) if !(0..i64::from(databases)).contains(&db) => Call::Error(Refusal::DbIndex),
        // A MOVE to another database is mapped before it is read: this one names its own.
        Some(_) => Call::Error(Refusal::Message("source and destination objects are the same")),
    }
}

/// COPY source destination [DB 0] [REPLACE], as db.c's copyCommand reads it (database 0 is
/// the only one).
pub(super) fn copy<'a>(frame: &Frame<'a>) -> Call<'a> {
    let (key, to) = (frame.arg(1).unwrap_or_default(), frame.arg(2).unwrap_or_default());
    let mut replace = false;
    let mut options = frame.args().skip(3);
    while let Some(option) = options.next() {
        if option.eq_ignore_ascii_case(b"replace") {
            replace = true;
        } else if option.eq_ignore_ascii_case(b"db") {
            match options.next().map(integer) {
                Some(Some(0)) => {}
                Some(Some(_)) => return Call::Error(Refusal::DbIndex),
                Some(None) => return Call::Error(Refusal::NotInteger),
                None => return Call::Error(Refusal::Syntax),
            }
        } else {
            return Call::Error(Refusal::Syntax);
        }
    }
    if key == to {
        return Call::Error(Refusal::Message("source and destination objects are the same"));
    }
    owned(key, Step::Copy { to, replace })
}

/// MEMORY USAGE key [SAMPLES count], checked as object.c's memoryCommand checks it (the
/// options before the key is looked up).
pub(super) fn memory<'a>(frame: &Frame<'a>) -> Call<'a> {
    let sub = frame.arg(1).unwrap_or_default();
    if !sub.eq_ignore_ascii_case(b"usage") {
        let known = ["doctor", "stats", "malloc-stats", "purge", "help"];
        if known.iter().any(|name| sub.eq_ignore_ascii_case(name.as_bytes())) {
            return Call::Error(Refusal::Unsupported("of MEMORY only USAGE is served"));
        }
        return Call::Error(Refusal::UnknownSubcommand(*frame));
    }
    if frame.argc() < 3 {
        return Call::Error(Refusal::SubcommandArity(*frame));
    }
    let mut options = frame.args().skip(3);
    while let Some(option) = options.next() {
        match (option.eq_ignore_ascii_case(b"samples"), options.next()) {
            (true, Some(count)) => match integer(count) {
                None => return Call::Error(Refusal::NotInteger),
                Some(count) if count < 0 => return Call::Error(Refusal::Syntax),
                Some(_) => {}
            },
            _ => return Call::Error(Refusal::Syntax),
        }
    }
    owned(frame.arg(2).unwrap_or_default(), Step::MemoryUsage)
}

/// OBJECT IDLETIME, FREQ, ENCODING and REFCOUNT of a key (HELP is refused by name).
pub(super) fn object<'a>(frame: &Frame<'a>) -> Call<'a> {
    let sub = frame.arg(1).unwrap_or_default();
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    let step = match () {
        _ if is("idletime") => Step::IdleTime,
        _ if is("freq") => Step::Freq,
        _ if is("encoding") => Step::Encoding,
        _ if is("refcount") => Step::RefCount,
        _ if is("help") => {
            return Call::Error(Refusal::Unsupported(
                "of OBJECT only IDLETIME, FREQ, ENCODING and REFCOUNT are served",
            ))
        }
        _ => return Call::Error(Refusal::UnknownSubcommand(*frame)),
    };
    if frame.argc() != 3 {
        return Call::Error(Refusal::SubcommandArity(*frame));
    }
    owned(frame.arg(2).unwrap_or_default(), step)
}

/// A float as redis-server's `string2ld` reads one: no spaces around it, not NaN, nothing
/// after it, at most 5,000 bytes.
pub fn float(text: &[u8]) -> Option<f64> {
    if text.is_empty() || text.len() > 5000 || text[0].is_ascii_whitespace() {
        return None;
    }
    let text = std::str::from_utf8(text).ok()?;
    if text.ends_with(char::is_whitespace) {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    (!value.is_nan()).then_some(value)
}

/// A float as redis-server writes INCRBYFLOAT's result (`ld2string`'s human form: no exponent,
/// no trailing zeros): a whole number in all its digits (as `%.17Lf` writes it), else the
/// shortest digits that read back as the same double. redis-server adds in `long double`:
/// where a sum needs more than a double's 53 bits, the last digits may differ.
pub fn format_float(value: f64, out: &mut Vec<u8>) {
    use std::io::Write;
    if value == 0.0 {
        // Both zeros are "0".
        out.push(b'0');
        return;
    }
    if value.fract() == 0.0 {
        let _ = write!(out, "{value:.0}");
        return;
    }
    let _ = write!(out, "{value}");
}
