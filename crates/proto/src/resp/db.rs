//! Redis's numbered databases (SELECT) as namespaces of keys in the one store.
//!
//! Database 0 is the store's keys as they are: what memcached's protocols read and write, and
//! what a RESP connection that never said SELECT names. A key of database `n` (1 to 255) is
//! stored under [`MARK`], the byte `n`, then the key: a key no UTF-8 text can begin with (0xFF
//! is never a UTF-8 byte), hashed, placed and evicted as any other. A connection in database
//! `n` has its requests' key arguments rewritten so before they are parsed ([`map`]): every
//! command then reaches the store as it would in database 0, on other workers too, and the
//! single-key path of database 0 pays nothing. What lists keys (KEYS, SCAN, RANDOMKEY) and
//! counts them (DBSIZE, INFO's keyspace) reads the database back off the stored key
//! ([`split`]).
//!
//! A key of database 0 that itself begins with [`MARK`] and a byte from 1 to the last
//! database would name that database's key: the one difference from redis-server's separate
//! dictionaries, for keys that are not text (docs/COMPATIBILITY.md).

/// The two bytes a key of a database other than 0 begins with in the store.
pub const MARK: [u8; 2] = [0xFF, 0xFF];
/// Bytes a database's prefix adds to a key.
pub const PREFIX_BYTES: usize = 3;
/// The most databases (`--databases`): the database is one byte of the prefix.
pub const DATABASES_MAX: u32 = 256;

/// The prefix of database `db`'s keys in the store (empty for database 0).
pub fn prefix(db: u8) -> &'static [u8] {
    static PREFIXES: [[u8; PREFIX_BYTES]; 256] = {
        let mut all = [[0xFF, 0xFF, 0]; 256];
        let mut db = 0;
        while db < 256 {
            all[db][2] = db as u8;
            db += 1;
        }
        all
    };
    if db == 0 {
        &[]
    } else {
        &PREFIXES[db as usize]
    }
}

/// The database a stored key belongs to and the key as its clients name it.
pub fn split(stored: &[u8]) -> (u8, &[u8]) {
    match stored {
        [0xFF, 0xFF, db, key @ ..] if *db != 0 => (*db, key),
        _ => (0, stored),
    }
}

/// A stored key's name in database `db`, if it is one of that database's keys.
pub fn in_db(stored: &[u8], db: u8) -> Option<&[u8]> {
    let (its, key) = split(stored);
    (its == db).then_some(key)
}

/// The FLUSHDB argument that names database `db` (the last argument of a FLUSHDB run in
/// database `db`, so every worker it reaches empties that database alone).
pub fn flush_arg(db: u8) -> [u8; PREFIX_BYTES] {
    [MARK[0], MARK[1], db]
}

/// What [`map`] made of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapped {
    /// Nothing to change: it names no key (or the connection is in database 0).
    Same,
    /// Rewritten into the output (a multibulk request).
    Rewritten,
    /// It may change the connection's database (SELECT, EXEC, DISCARD, RESET): what follows
    /// it is mapped only once it has run.
    Fence,
}

/// Where a command's keys are among its arguments.
enum Keys {
    None,
    /// The arguments from `first` on, every `step`-th, up to `count` of them (`usize::MAX`:
    /// to the end).
    From {
        first: usize,
        step: usize,
        count: usize,
    },
    /// COPY: source and destination, and a `DB` option that moves the destination.
    Copy,
    /// FLUSHDB: the database rides along as a last argument.
    FlushDb,
    /// MOVE key db: the key in both databases, and the target database as a last argument.
    Move,
}

fn keys_of(name: &[u8], argc: usize) -> Keys {
    const ONE: Keys = Keys::From { first: 1, step: 1, count: 1 };
    const ALL: Keys = Keys::From { first: 1, step: 1, count: usize::MAX };
    let lower = |word: &str| name.eq_ignore_ascii_case(word.as_bytes());
    let single = [
        "get",
        "set",
        "setnx",
        "setex",
        "psetex",
        "strlen",
        "type",
        "append",
        "ttl",
        "pttl",
        "expire",
        "pexpire",
        "expireat",
        "pexpireat",
        "getdel",
        "getset",
        "getex",
        "persist",
        "expiretime",
        "pexpiretime",
        "getrange",
        "substr",
        "setrange",
        "incrbyfloat",
        "incr",
        "decr",
        "incrby",
        "decrby",
    ];
    if lower("lmove") || lower("rpoplpush") || lower("smove") {
        return Keys::From { first: 1, step: 1, count: 2 };
    }
    let many = ["sinter", "sunion", "sdiff", "sinterstore", "sunionstore", "sdiffstore"];
    if many.iter().any(|word| lower(word)) {
        return ALL;
    }
    if single.iter().any(|word| lower(word)) || super::collection::is_command(name) {
        return ONE;
    }
    if ["del", "unlink", "exists", "mget", "watch"].iter().any(|word| lower(word)) {
        return ALL;
    }
    if lower("mset") || lower("msetnx") {
        return Keys::From { first: 1, step: 2, count: usize::MAX };
    }
    if lower("rename") || lower("renamenx") {
        return Keys::From { first: 1, step: 1, count: 2 };
    }
    if lower("copy") {
        return Keys::Copy;
    }
    if lower("object") || lower("memory") {
        // OBJECT ENCODING key, MEMORY USAGE key: the key after the subcommand.
        return if argc >= 3 { Keys::From { first: 2, step: 1, count: 1 } } else { Keys::None };
    }
    if lower("flushdb") {
        return Keys::FlushDb;
    }
    if lower("move") && argc == 3 {
        return Keys::Move;
    }
    Keys::None
}

/// Whether a request that names `name` changes the connection's database or ends what a
/// change inside MULTI applies to.
pub fn fences(name: &[u8]) -> bool {
    ["select", "exec", "discard", "reset", "swapdb"]
        .iter()
        .any(|word| name.eq_ignore_ascii_case(word.as_bytes()))
}

/// Whether a request of a connection in database 0 must be mapped all the same: a COPY with
/// a `DB` option (its destination moves to that database), a MOVE.
pub fn needs_map(frame: &crate::resp::Frame<'_>) -> bool {
    let Some(name) = frame.arg(0) else { return false };
    match frame.argc() {
        3 => name.eq_ignore_ascii_case(b"move"),
        5.. => {
            name.eq_ignore_ascii_case(b"copy")
                && frame.args().skip(3).any(|option| option.eq_ignore_ascii_case(b"db"))
        }
        _ => false,
    }
}

/// Where a database's keys are in the store: which namespace (prefix) each database number
/// names now (SWAPDB exchanges two), and how many databases there are.
pub trait Namespaces {
    /// The namespace of database `db`.
    fn of(&self, db: u8) -> u8;
    /// How many databases there are.
    fn count(&self) -> u32;
}

/// Each database its own namespace, as at start.
impl Namespaces for u32 {
    fn of(&self, db: u8) -> u8 {
        db
    }

    fn count(&self) -> u32 {
        *self
    }
}

/// Rewrites `frame`, a request of a connection whose database's keys are in namespace `db`,
/// into `out` as a multibulk request whose keys are the store's keys of that namespace.
/// `spaces`: how many databases there are (a COPY's `DB` option outside them is left for COPY
/// to refuse) and where each one's keys are (a MOVE's or COPY's target).
pub fn map(frame: &crate::resp::Frame<'_>, db: u8, spaces: &dyn Namespaces, out: &mut Vec<u8>) -> Mapped {
    let databases = spaces.count();
    let name = frame.arg(0).unwrap_or_default();
    if fences(name) {
        return Mapped::Fence;
    }
    let argc = frame.argc();
    match keys_of(name, argc) {
        Keys::None => Mapped::Same,
        Keys::From { .. } | Keys::FlushDb if db == 0 => Mapped::Same,
        Keys::From { first, step, count } => {
            let last = first.saturating_add(step.saturating_mul(count.saturating_sub(1)));
            let is_key = |index: usize| index >= first && index <= last && (index - first) % step == 0;
            write(
                frame.args().enumerate().map(|(index, arg)| (is_key(index).then(|| prefix(db)), arg)),
                argc,
                out,
            );
            Mapped::Rewritten
        }
        Keys::FlushDb => {
            let flag = flush_arg(db);
            write(frame.args().map(|arg| (None, arg)).chain([(None, &flag[..])]), argc + 1, out);
            Mapped::Rewritten
        }
        Keys::Copy => map_copy(frame, db, spaces, out),
        Keys::Move => {
            let key = frame.arg(1).unwrap_or_default();
            match frame.arg(2).and_then(crate::resp::command::integer) {
                // Another database: both keys as the store has them, and the target's mark.
                Some(to) if (0..i64::from(databases)).contains(&to) && spaces.of(to as u8) != db => {
                    let to = i64::from(spaces.of(to as u8));
                    let mark = flush_arg(to as u8);
                    let args = [
                        (None, &b"MOVE"[..]),
                        (Some(prefix(db)), key),
                        (Some(prefix(to as u8)), key),
                        (None, &mark[..]),
                    ];
                    write(args.into_iter(), 4, out);
                    Mapped::Rewritten
                }
                // Refused by MOVE itself (not an integer, out of range, its own database).
                _ => Mapped::Same,
            }
        }
    }
}

/// COPY source destination [DB n] [REPLACE]: both keys in the connection's database, the
/// destination moved to database `n` and the option dropped, where `n` is one.
fn map_copy(frame: &crate::resp::Frame<'_>, db: u8, spaces: &dyn Namespaces, out: &mut Vec<u8>) -> Mapped {
    let databases = spaces.count();
    let args: Vec<&[u8]> = frame.args().collect();
    let mut to_db = db;
    let mut kept: Vec<&[u8]> = Vec::with_capacity(args.len());
    let mut index = 3;
    while index < args.len() {
        let option = args[index];
        if option.eq_ignore_ascii_case(b"db") {
            let target = args.get(index + 1).and_then(|n| crate::resp::command::integer(n));
            match target {
                Some(n) if (0..i64::from(databases)).contains(&n) => to_db = spaces.of(n as u8),
                // Left as it is: COPY refuses it (not an integer, out of range, missing).
                _ => return if db == 0 { Mapped::Same } else { plain_copy(&args, db, out) },
            }
            index += 2;
            continue;
        }
        kept.push(option);
        index += 1;
    }
    if args.len() < 3 {
        return if db == 0 { Mapped::Same } else { plain_copy(&args, db, out) };
    }
    let head = [(None, args[0]), (Some(prefix(db)), args[1]), (Some(prefix(to_db)), args[2])];
    write(head.into_iter().chain(kept.iter().map(|&arg| (None, arg))), 3 + kept.len(), out);
    Mapped::Rewritten
}

/// A COPY whose options COPY itself refuses: its two keys mapped, the rest as it is.
fn plain_copy(args: &[&[u8]], db: u8, out: &mut Vec<u8>) -> Mapped {
    let mapped =
        args.iter().enumerate().map(|(index, &arg)| ((1..=2).contains(&index).then(|| prefix(db)), arg));
    write(mapped, args.len(), out);
    Mapped::Rewritten
}

/// A multibulk request of `argc` arguments, each with its prefix (if any) before it.
fn write<'a>(args: impl Iterator<Item = (Option<&'a [u8]>, &'a [u8])>, argc: usize, out: &mut Vec<u8>) {
    out.push(b'*');
    out.extend_from_slice(argc.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for (before, arg) in args {
        let before = before.unwrap_or_default();
        out.push(b'$');
        out.extend_from_slice((before.len() + arg.len()).to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(before);
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::frame_of;

    fn mapped(request: &[u8], db: u8) -> (Mapped, Vec<u8>) {
        let (frame, _) = frame_of(request).expect("a whole request");
        let frame = frame.expect("framed");
        let mut out = Vec::new();
        let how = map(&frame, db, &16u32, &mut out);
        (how, out)
    }

    #[test]
    fn keys_take_their_database_and_nothing_else_does() {
        let (how, out) = mapped(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", 2);
        assert_eq!(how, Mapped::Rewritten);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$4\r\n\xff\xff\x02k\r\n$1\r\nv\r\n");
        let (_, out) = mapped(b"MSET a 1 b 2\r\n", 3);
        assert_eq!(
            out,
            b"*5\r\n$4\r\nMSET\r\n$4\r\n\xff\xff\x03a\r\n$1\r\n1\r\n$4\r\n\xff\xff\x03b\r\n$1\r\n2\r\n"
        );
        let (_, out) = mapped(b"RENAME a b\r\n", 1);
        assert_eq!(out, b"*3\r\n$6\r\nRENAME\r\n$4\r\n\xff\xff\x01a\r\n$4\r\n\xff\xff\x01b\r\n");
        let (_, out) = mapped(b"LMOVE a b LEFT RIGHT\r\n", 1);
        assert_eq!(
            out,
            b"*5\r\n$5\r\nLMOVE\r\n$4\r\n\xff\xff\x01a\r\n$4\r\n\xff\xff\x01b\r\n$4\r\nLEFT\r\n$5\r\nRIGHT\r\n"
        );
        let (_, out) = mapped(b"HSET h f v\r\n", 1);
        assert_eq!(out, b"*4\r\n$4\r\nHSET\r\n$4\r\n\xff\xff\x01h\r\n$1\r\nf\r\n$1\r\nv\r\n");
        let (_, out) = mapped(b"OBJECT ENCODING k\r\n", 1);
        assert_eq!(out, b"*3\r\n$6\r\nOBJECT\r\n$8\r\nENCODING\r\n$4\r\n\xff\xff\x01k\r\n");
        assert_eq!(mapped(b"PING\r\n", 1).0, Mapped::Same);
        assert_eq!(mapped(b"GET k\r\n", 0).0, Mapped::Same);
        assert_eq!(mapped(b"SELECT 0\r\n", 1).0, Mapped::Fence);
        assert_eq!(mapped(b"exec\r\n", 0).0, Mapped::Fence);
    }

    #[test]
    fn copy_moves_its_destination_and_drops_the_option() {
        let (how, out) = mapped(b"COPY a b DB 3 REPLACE\r\n", 0);
        assert_eq!(how, Mapped::Rewritten);
        assert_eq!(out, b"*4\r\n$4\r\nCOPY\r\n$1\r\na\r\n$4\r\n\xff\xff\x03b\r\n$7\r\nREPLACE\r\n");
        let (_, out) = mapped(b"COPY a b DB 0\r\n", 2);
        assert_eq!(out, b"*3\r\n$4\r\nCOPY\r\n$4\r\n\xff\xff\x02a\r\n$1\r\nb\r\n");
        // Refused by COPY itself, its keys still mapped.
        assert_eq!(mapped(b"COPY a b DB 99\r\n", 0).0, Mapped::Same);
        let (_, out) = mapped(b"COPY a b DB x\r\n", 1);
        assert_eq!(
            out,
            b"*5\r\n$4\r\nCOPY\r\n$4\r\n\xff\xff\x01a\r\n$4\r\n\xff\xff\x01b\r\n$2\r\nDB\r\n$1\r\nx\r\n"
        );
    }

    #[test]
    fn move_names_the_key_in_both_databases() {
        let (how, out) = mapped(b"MOVE k 3\r\n", 1);
        assert_eq!(how, Mapped::Rewritten);
        assert_eq!(
            out,
            b"*4\r\n$4\r\nMOVE\r\n$4\r\n\xff\xff\x01k\r\n$4\r\n\xff\xff\x03k\r\n$3\r\n\xff\xff\x03\r\n"
        );
        let (_, out) = mapped(b"MOVE k 0\r\n", 2);
        assert_eq!(out, b"*4\r\n$4\r\nMOVE\r\n$4\r\n\xff\xff\x02k\r\n$1\r\nk\r\n$3\r\n\xff\xff\x00\r\n");
        assert_eq!(mapped(b"MOVE k 2\r\n", 2).0, Mapped::Same);
        assert_eq!(mapped(b"MOVE k x\r\n", 0).0, Mapped::Same);
        assert_eq!(mapped(b"MOVE k 16\r\n", 0).0, Mapped::Same);
    }

    #[test]
    fn flushdb_carries_its_database() {
        let (_, out) = mapped(b"FLUSHDB ASYNC\r\n", 5);
        assert_eq!(out, b"*3\r\n$7\r\nFLUSHDB\r\n$5\r\nASYNC\r\n$3\r\n\xff\xff\x05\r\n");
        assert_eq!(mapped(b"FLUSHDB\r\n", 0).0, Mapped::Same);
    }

    #[test]
    fn stored_keys_split_back() {
        assert_eq!(split(b"\xff\xff\x07key"), (7, &b"key"[..]));
        assert_eq!(split(b"key"), (0, &b"key"[..]));
        assert_eq!(split(b"\xff\xff\x00key"), (0, &b"\xff\xff\x00key"[..]));
        assert_eq!(in_db(b"\xff\xff\x07key", 7), Some(&b"key"[..]));
        assert_eq!(in_db(b"\xff\xff\x07key", 0), None);
        assert_eq!(prefix(0), b"");
        assert_eq!(prefix(9), b"\xff\xff\x09");
    }
}
