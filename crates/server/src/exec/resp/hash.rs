//! Redis's hashes (issue 77) on the key's item, as redis-server 7.0 answers them (t_hash.c):
//! the item is read, its fields and values decoded (qs_proto::resp::collection), changed, and
//! written back whole with its expiry, at the key's owner; a hash left empty goes with its key.
//! The arguments are checked in redis-server's order: those it checks before it looks the key
//! up first, then the key's type (WRONGTYPE), then the rest.

use super::collection::{array_head, decoded, random_picks, scan_matches, scan_pattern};
use super::owned::Current;
use super::*;
use qs_proto::resp::collection::{Command, Kind, CORRUPT};
use qs_proto::resp::command::integer;
use qs_proto::resp::owned::{float, format_float};

/// The most fields a negative HRANDFIELD count answers (each may repeat): a bound on one
/// reply, where redis-server's is the client's output buffer limit.
const RANDOM_FIELDS_MAX: u64 = 1 << 20;

/// A hash as read: its fields and values, in order.
type Pairs<'v> = Vec<(&'v [u8], &'v [u8])>;

impl Engine {
    /// Runs a hash command on `key`, whose item is `current`, for the connection `fd`.
    pub(super) fn hash_command(
        &mut self,
        (key, fd): (Key<'_>, i32),
        current: Option<Current>,
        (command, resp3): (Command<'_>, bool),
        out: &mut Vec<u8>,
    ) {
        if let Some(refusal) = refused_first(&command) {
            return out.extend_from_slice(refusal.as_bytes());
        }
        let pairs = match decoded(current.as_ref(), Kind::Hash) {
            Ok(elements) => match elements.map(|elements| pairs_of(&elements)) {
                Some(None) => return out.extend_from_slice(CORRUPT),
                pairs => pairs.flatten(),
            },
            Err(refusal) => return out.extend_from_slice(refusal),
        };
        let mut args = command.args();
        let mut arg = || args.next().unwrap_or_default();
        if command.read_only() {
            return read(command, pairs.as_deref(), resp3, out);
        }
        let mut pairs = pairs.unwrap_or_default();
        // The answer, sent once the hash is written (the store may refuse it: too large).
        let mut answer = Vec::new();
        let changed = match command.name {
            "hset" | "hmset" => {
                let added = set_pairs(&mut pairs, command.args());
                if command.name == "hset" {
                    reply::integer(added as i64, &mut answer);
                } else {
                    answer.extend_from_slice(reply::OK);
                }
                true
            }
            "hsetnx" => {
                let (field, value) = (arg(), arg());
                let absent = find(&pairs, field).is_none();
                if absent {
                    pairs.push((field, value));
                }
                reply::integer(i64::from(absent), &mut answer);
                absent
            }
            "hdel" => {
                let before = pairs.len();
                for field in command.args() {
                    if let Some(at) = find(&pairs, field) {
                        pairs.remove(at);
                    }
                }
                reply::integer((before - pairs.len()) as i64, &mut answer);
                before != pairs.len()
            }
            _ => return self.hash_increment((key, fd), current.as_ref(), (command, pairs), out),
        };
        let refused = if changed { self.write_hash((key, fd), current.as_ref(), &pairs) } else { None };
        out.extend_from_slice(refused.unwrap_or(&answer));
    }

    /// HINCRBY and HINCRBYFLOAT (their increments were checked): the field's new value.
    fn hash_increment(
        &mut self,
        (key, fd): (Key<'_>, i32),
        current: Option<&Current>,
        (command, mut pairs): (Command<'_>, Pairs<'_>),
        out: &mut Vec<u8>,
    ) {
        let mut args = command.args();
        let (field, by) = (args.next().unwrap_or_default(), args.next().unwrap_or_default());
        let old = find(&pairs, field).map(|at| pairs[at].1);
        let mut text = Vec::with_capacity(24);
        if command.name == "hincrby" {
            let by = integer(by).unwrap_or_default();
            let Some(value) = old.map_or(Some(0), integer) else {
                return out.extend_from_slice(b"-ERR hash value is not an integer\r\n");
            };
            let Some(sum) = value.checked_add(by) else {
                return out.extend_from_slice(b"-ERR increment or decrement would overflow\r\n");
            };
            text.extend_from_slice(itoa::Buffer::new().format(sum).as_bytes());
        } else {
            let by = float(by).unwrap_or_default();
            let Some(value) = old.map_or(Some(0.0), float) else {
                return out.extend_from_slice(b"-ERR hash value is not a float\r\n");
            };
            let sum = value + by;
            if !sum.is_finite() {
                return out.extend_from_slice(b"-ERR increment would produce NaN or Infinity\r\n");
            }
            format_float(sum, &mut text);
        }
        set_pairs(&mut pairs, [field, &text[..]].into_iter());
        if let Some(refusal) = self.write_hash((key, fd), current, &pairs) {
            return out.extend_from_slice(refusal);
        }
        if command.name == "hincrby" {
            out.push(b':');
            out.extend_from_slice(&text);
            out.extend_from_slice(b"\r\n");
        } else {
            reply::bulk(&text, out);
        }
    }

    /// Writes the hash `pairs` (none: the key goes) with the item's expiry; the store's
    /// refusal, if it refused (a hash past the item size limit).
    fn write_hash(
        &mut self,
        at: (Key<'_>, i32),
        current: Option<&Current>,
        pairs: &[(&[u8], &[u8])],
    ) -> Option<&'static [u8]> {
        let elements: Vec<&[u8]> = pairs.iter().flat_map(|&(field, value)| [field, value]).collect();
        self.write_elements(at, current, (Kind::Hash, &elements))
    }
}

/// What redis-server refuses before it looks at the key: HINCRBY's and HINCRBYFLOAT's
/// increments, HRANDFIELD's count and option, HSCAN's cursor.
fn refused_first(command: &Command<'_>) -> Option<String> {
    let mut args = command.args();
    match command.name {
        "hset" | "hmset" if command.frame.argc() % 2 == 1 => {
            Some(format!("-ERR wrong number of arguments for '{}' command\r\n", command.name))
        }
        "hincrby" => {
            integer(args.nth(1)?).is_none().then(|| String::from_utf8_lossy(reply::NOT_INTEGER).into())
        }
        "hincrbyfloat" => match float(args.nth(1)?) {
            None => Some("-ERR value is not a valid float\r\n".into()),
            Some(by) if !by.is_finite() => Some("-ERR value is NaN or Infinity\r\n".into()),
            Some(_) => None,
        },
        "hrandfield" => {
            let count = args.next()?;
            let Some(count) = integer(count) else {
                return Some(String::from_utf8_lossy(reply::NOT_INTEGER).into());
            };
            if count == i64::MIN {
                return Some(format!(
                    "-ERR value is out of range, value must between {} and {}\r\n",
                    -i64::MAX,
                    i64::MAX
                ));
            }
            match args.next() {
                Some(option) if !option.eq_ignore_ascii_case(b"withvalues") || args.next().is_some() => {
                    Some("-ERR syntax error\r\n".into())
                }
                Some(_) if !(-i64::MAX / 2..=i64::MAX / 2).contains(&count) => {
                    Some("-ERR value is out of range\r\n".into())
                }
                _ if count < 0 && count.unsigned_abs() > RANDOM_FIELDS_MAX => {
                    Some(format!("-ERR a negative count answers at most {RANDOM_FIELDS_MAX} fields here\r\n"))
                }
                _ => None,
            }
        }
        "hscan" => std::str::from_utf8(args.next()?)
            .ok()
            .and_then(|text| text.parse::<u64>().ok())
            .is_none()
            .then(|| "-ERR invalid cursor\r\n".into()),
        _ => None,
    }
}

/// A hash's elements as fields and values, or `None` if they are not pairs.
fn pairs_of<'v>(elements: &[&'v [u8]]) -> Option<Pairs<'v>> {
    (elements.len() % 2 == 0).then(|| elements.chunks_exact(2).map(|pair| (pair[0], pair[1])).collect())
}

/// Where `field` is in `pairs`.
fn find(pairs: &[(&[u8], &[u8])], field: &[u8]) -> Option<usize> {
    pairs.iter().position(|(name, _)| *name == field)
}

/// Sets each field of `args` (field, value, field, value...) in `pairs`: a field there keeps
/// its place, a new one goes last. How many fields were new.
fn set_pairs<'v>(pairs: &mut Pairs<'v>, mut args: impl Iterator<Item = &'v [u8]>) -> usize {
    let mut added = 0;
    while let (Some(field), Some(value)) = (args.next(), args.next()) {
        match find(pairs, field) {
            Some(at) => pairs[at].1 = value,
            None => {
                pairs.push((field, value));
                added += 1;
            }
        }
    }
    added
}

/// The commands that only read (`pairs`: the hash, none for a missing key).
fn read(command: Command<'_>, pairs: Option<&[(&[u8], &[u8])]>, resp3: bool, out: &mut Vec<u8>) {
    let missing = pairs.is_none();
    let pairs = pairs.unwrap_or_default();
    let mut args = command.args();
    let value_of = |field: &[u8]| find(pairs, field).map(|at| pairs[at].1);
    match command.name {
        "hget" => match value_of(args.next().unwrap_or_default()) {
            Some(value) => reply::bulk(value, out),
            None => out.extend_from_slice(reply::null(resp3)),
        },
        "hmget" => {
            array_head(command.frame.argc() - 2, out);
            for field in args {
                match value_of(field) {
                    Some(value) => reply::bulk(value, out),
                    None => out.extend_from_slice(reply::null(resp3)),
                }
            }
        }
        "hgetall" => {
            reply::map_head(pairs.len(), resp3, out);
            for (field, value) in pairs {
                reply::bulk(field, out);
                reply::bulk(value, out);
            }
        }
        "hkeys" | "hvals" => {
            array_head(pairs.len(), out);
            for (field, value) in pairs {
                reply::bulk(if command.name == "hkeys" { field } else { value }, out);
            }
        }
        "hexists" => reply::integer(i64::from(value_of(args.next().unwrap_or_default()).is_some()), out),
        "hlen" => reply::integer(pairs.len() as i64, out),
        "hstrlen" => {
            reply::integer(value_of(args.next().unwrap_or_default()).map_or(0, <[u8]>::len) as i64, out)
        }
        "hrandfield" => random_fields(pairs, (args.next(), args.next().is_some()), resp3, out),
        // A missing key's scan is answered before its options are read, as redis-server does.
        _ if missing => out.extend_from_slice(b"*2\r\n$1\r\n0\r\n*0\r\n"),
        _ => scan(pairs, args.skip(1), out),
    }
}

/// HRANDFIELD: one field (none asked: a bulk string, or null for no key), `count` distinct
/// ones, or (a negative count) that many, each drawn anew; with their values if `values`.
fn random_fields(
    pairs: &[(&[u8], &[u8])],
    (count, values): (Option<&[u8]>, bool),
    resp3: bool,
    out: &mut Vec<u8>,
) {
    let Some(count) = count.and_then(integer) else {
        return match pairs.len() {
            0 => out.extend_from_slice(reply::null(resp3)),
            len => reply::bulk(pairs[scan::random_below(len)].0, out),
        };
    };
    let write = |(field, value): (&[u8], &[u8]), out: &mut Vec<u8>| {
        if values && resp3 {
            out.extend_from_slice(b"*2\r\n");
        }
        reply::bulk(field, out);
        if values {
            reply::bulk(value, out);
        }
    };
    let picks = random_picks(pairs.len(), count);
    array_head(picks.len() * if values && !resp3 { 2 } else { 1 }, out);
    for at in picks {
        write(pairs[at], out);
    }
}

/// HSCAN: every field and value in one answer (cursor 0), as redis-server answers a hash it
/// keeps compact; MATCH filters the fields, COUNT is checked and read past.
fn scan<'a>(pairs: &[(&[u8], &[u8])], options: impl Iterator<Item = &'a [u8]>, out: &mut Vec<u8>) {
    let pattern = match scan_pattern(options) {
        Ok(pattern) => pattern,
        Err(refusal) => return out.extend_from_slice(refusal),
    };
    let matching: Vec<&(&[u8], &[u8])> =
        pairs.iter().filter(|(field, _)| scan_matches(pattern, field)).collect();
    out.extend_from_slice(b"*2\r\n$1\r\n0\r\n");
    array_head(matching.len() * 2, out);
    for (field, value) in matching {
        reply::bulk(field, out);
        reply::bulk(value, out);
    }
}
