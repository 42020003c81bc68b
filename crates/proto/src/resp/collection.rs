//! Redis's collections as cache items (issue 77): a hash is an item like any other, its
//! fields and values encoded in its value and its type in its client flags, so it lives in the
//! log, is evicted, expires, is charged to `-m` and survives a restart as one key.
//!
//! The value is the collection's elements in order, each a length (LEB128, one byte up to
//! 127) and its bytes; a hash's are its fields and values in turn, in the order redis-server's
//! listpack keeps them (a new field at the end, an updated one in its place). A command reads
//! the item, changes the elements and writes the item back whole: the compact form Redis
//! keeps small collections in, at every size; the largest collection is the largest item
//! (`-I`), and a write past it is refused (`-ERR object too large for cache`).
//!
//! The flags say the type: `FLAGS_BASE` plus the type's number. memcached's protocols read
//! such an item as any other (`get` answers the encoded value with those flags); a memcached
//! client that stores an item with them makes a key Redis's commands read as that type, and
//! one whose value does not decode answers [`CORRUPT`].

use super::command::Call;
use super::owned::{Owned, Step};
use super::Frame;

/// The flags of a collection's item, less its type's number (`QS` and `0xC0`).
pub const FLAGS_BASE: u32 = 0x5153_C000;

/// `WRONGTYPE`, as redis-server words it.
pub const WRONGTYPE: &[u8] = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

/// The answer for an item whose flags name a collection and whose value does not decode as
/// one (a memcached client's item with those flags).
pub const CORRUPT: &[u8] = b"-ERR the key's item has a collection's flags but not its encoding\r\n";

/// A collection's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A hash: fields and their values.
    Hash = 1,
    /// A list: elements in order.
    List = 2,
    /// A set: distinct members.
    Set = 3,
    /// A sorted set: members and their scores.
    Zset = 4,
}

impl Kind {
    /// The flags of an item of this type.
    pub const fn flags(self) -> u32 {
        FLAGS_BASE | self as u32
    }

    /// The type an item's `flags` say it holds (`None`: a string).
    #[inline(always)]
    pub const fn of_flags(flags: u32) -> Option<Kind> {
        match flags {
            f if f == Kind::Hash.flags() => Some(Kind::Hash),
            f if f == Kind::List.flags() => Some(Kind::List),
            f if f == Kind::Set.flags() => Some(Kind::Set),
            f if f == Kind::Zset.flags() => Some(Kind::Zset),
            _ => None,
        }
    }

    /// TYPE's answer.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Hash => "hash",
            Kind::List => "list",
            Kind::Set => "set",
            Kind::Zset => "zset",
        }
    }
}

/// Whether an item of `flags` is a collection (Redis's string commands refuse it).
#[inline(always)]
pub const fn is_collection(flags: u32) -> bool {
    flags & !0xff == FLAGS_BASE && Kind::of_flags(flags).is_some()
}

/// Appends `element` to an encoded collection.
pub fn push(out: &mut Vec<u8>, element: &[u8]) {
    let mut len = element.len();
    while len >= 0x80 {
        out.push((len as u8 & 0x7f) | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
    out.extend_from_slice(element);
}

/// The bytes [`push`] writes for an element of `len` bytes.
pub const fn encoded_len(len: usize) -> usize {
    let mut head = 1;
    let mut rest = len >> 7;
    while rest > 0 {
        head += 1;
        rest >>= 7;
    }
    head + len
}

/// The elements of an encoded collection, in order; `None` if it does not decode.
pub fn elements(mut bytes: &[u8]) -> Option<Vec<&[u8]>> {
    let mut elements = Vec::new();
    while !bytes.is_empty() {
        let (mut len, mut shift, mut at) = (0usize, 0u32, 0);
        loop {
            let byte = *bytes.get(at)?;
            at += 1;
            len |= usize::from(byte & 0x7f).checked_shl(shift)?;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 35 {
                return None;
            }
        }
        let element = bytes.get(at..at.checked_add(len)?)?;
        elements.push(element);
        bytes = &bytes[at + len..];
    }
    Some(elements)
}

/// The commands on collections served, as the command table spells them (each names its key
/// first).
pub const COMMANDS: &[&str] = &[
    "hset",
    "hsetnx",
    "hmset",
    "hget",
    "hmget",
    "hgetall",
    "hdel",
    "hexists",
    "hlen",
    "hkeys",
    "hvals",
    "hstrlen",
    "hincrby",
    "hincrbyfloat",
    "hrandfield",
    "hscan",
    "lpush",
    "rpush",
    "lpushx",
    "rpushx",
    "lpop",
    "rpop",
    "llen",
    "lrange",
    "lindex",
    "lset",
    "linsert",
    "lrem",
    "ltrim",
    "lpos",
    "lmove",
    "rpoplpush",
    "sadd",
    "srem",
    "smembers",
    "sismember",
    "smismember",
    "scard",
    "spop",
    "srandmember",
    "sscan",
    "sinter",
    "sunion",
    "sdiff",
    "sinterstore",
    "sunionstore",
    "sdiffstore",
    "smove",
    "zadd",
    "zincrby",
    "zrem",
    "zscore",
    "zmscore",
    "zcard",
    "zcount",
    "zlexcount",
    "zrank",
    "zrevrank",
    "zrange",
    "zrevrange",
    "zrangebyscore",
    "zrevrangebyscore",
    "zrangebylex",
    "zrevrangebylex",
    "zremrangebyscore",
    "zremrangebyrank",
    "zremrangebylex",
    "zpopmin",
    "zpopmax",
    "zscan",
    "zrandmember",
];

/// The blocking pops of lists and sorted sets, and LMPOP and ZMPOP, refused by name (a later
/// issue).
pub const BLOCKING: &[&str] =
    &["blpop", "brpop", "brpoplpush", "blmove", "blmpop", "lmpop", "bzpopmin", "bzpopmax", "bzmpop", "zmpop"];

/// Whether `name` is one of [`COMMANDS`] (any case).
pub fn is_command(name: &[u8]) -> bool {
    COMMANDS.iter().any(|spelled| name.eq_ignore_ascii_case(spelled.as_bytes()))
}

/// redis-server 7.0's thresholds between a collection's compact encoding and its larger ones,
/// each with the slot of [`SETTING_DEFAULTS`] it shares with its alias: CONFIG SET takes an
/// integer for each and CONFIG GET reads it back, and they change nothing here (one compact
/// encoding at every size).
pub const SETTINGS: &[(&str, usize)] = &[
    ("hash-max-listpack-entries", 0),
    ("hash-max-ziplist-entries", 0),
    ("hash-max-listpack-value", 1),
    ("hash-max-ziplist-value", 1),
    ("set-max-intset-entries", 2),
    ("zset-max-listpack-entries", 3),
    ("zset-max-ziplist-entries", 3),
    ("zset-max-listpack-value", 4),
    ("zset-max-ziplist-value", 4),
    ("list-max-listpack-size", 5),
    ("list-max-ziplist-size", 5),
    ("list-compress-depth", 6),
];
/// How many values [`SETTINGS`] keeps.
pub const SETTINGS_KEPT: usize = 7;
/// redis-server's defaults of [`SETTINGS`]' values.
pub const SETTING_DEFAULTS: [i64; SETTINGS_KEPT] = [128, 64, 512, 128, 64, -2, 0];

/// A command on a collection: routed to its key's owner as an [`Owned`] step, its arguments
/// read there from the frame (the arity is checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command<'a> {
    /// The command's name as the table spells it (`hset`).
    pub name: &'static str,
    /// The request: the key is argument 1.
    pub frame: Frame<'a>,
}

impl<'a> Command<'a> {
    /// The arguments after the key.
    pub fn args(&self) -> impl Iterator<Item = &'a [u8]> + Clone {
        self.frame.args().skip(2)
    }

    /// Whether it only reads (a CREW reader may run it).
    pub fn read_only(&self) -> bool {
        matches!(
            self.name,
            "hget"
                | "hmget"
                | "hgetall"
                | "hexists"
                | "hlen"
                | "hkeys"
                | "hvals"
                | "hstrlen"
                | "hrandfield"
                | "hscan"
                | "llen"
                | "lrange"
                | "lindex"
                | "lpos"
                | "smembers"
                | "sismember"
                | "smismember"
                | "scard"
                | "srandmember"
                | "sscan"
                | "sinter"
                | "sunion"
                | "sdiff"
                | "zscore"
                | "zmscore"
                | "zcard"
                | "zcount"
                | "zlexcount"
                | "zrank"
                | "zrevrank"
                | "zrange"
                | "zrevrange"
                | "zrangebyscore"
                | "zrevrangebyscore"
                | "zrangebylex"
                | "zrevrangebylex"
                | "zscan"
                | "zrandmember"
        )
    }

    /// The type it works on.
    pub fn kind(&self) -> Kind {
        match self.name.as_bytes()[0] {
            b'h' => Kind::Hash,
            b's' => Kind::Set,
            b'z' => Kind::Zset,
            _ => Kind::List,
        }
    }

    /// The second key it writes (LMOVE's, RPOPLPUSH's and SMOVE's destination).
    pub fn other_key(&self) -> Option<&'a [u8]> {
        matches!(self.name, "lmove" | "rpoplpush" | "smove").then(|| self.frame.arg(2).unwrap_or_default())
    }

    /// Whether it names several keys: SINTER, SUNION, SDIFF and their STORE forms (every
    /// argument a key).
    pub fn many_keys(&self) -> bool {
        matches!(self.name, "sinter" | "sunion" | "sdiff" | "sinterstore" | "sunionstore" | "sdiffstore")
    }

    /// Every key it names: the first, then the other one or the others.
    pub fn keys(&self) -> impl Iterator<Item = &'a [u8]> + Clone {
        let count = if self.many_keys() {
            self.frame.argc() - 1
        } else if self.other_key().is_some() {
            2
        } else {
            1
        };
        self.frame.args().skip(1).take(count)
    }
}

/// The call of the collection command `name` (its arity checked) on `key`. What else its
/// arguments must be is checked where it runs, as redis-server checks it (inside MULTI a
/// command is queued once its arity fits: HSET's pairs are counted when it runs).
pub(super) fn call<'a>(name: &'static str, key: &'a [u8], frame: &Frame<'a>) -> Call<'a> {
    Call::Owned(Owned { key, step: Step::Collection(Command { name, frame: *frame }) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_round_trip_with_their_lengths() {
        let long = vec![b'x'; 300];
        let mut bytes = Vec::new();
        for element in [&b""[..], b"a", &long, &[0x80, 0xff]] {
            push(&mut bytes, element);
        }
        assert_eq!(bytes.len(), encoded_len(0) + encoded_len(1) + encoded_len(300) + encoded_len(2));
        assert_eq!(elements(&bytes).unwrap(), vec![&b""[..], b"a", &long, &[0x80, 0xff]]);
        assert_eq!(elements(&bytes[..bytes.len() - 1]), None, "cut short");
        assert_eq!(elements(&[0x85]), None, "a length without its end");
        assert_eq!(elements(&[0xff; 8]), None, "a length past 2^35");
    }

    proptest::proptest! {
        #[test]
        fn any_elements_round_trip(items in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..300), 0..20)) {
            let mut bytes = Vec::new();
            for item in &items {
                push(&mut bytes, item);
            }
            let expected: usize = items.iter().map(|item| encoded_len(item.len())).sum();
            proptest::prop_assert_eq!(bytes.len(), expected);
            let decoded = elements(&bytes).expect("decodes");
            proptest::prop_assert_eq!(decoded, items.iter().map(Vec::as_slice).collect::<Vec<_>>());
        }

        #[test]
        fn any_bytes_decode_or_refuse_without_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            if let Some(decoded) = elements(&bytes) {
                let mut again = Vec::new();
                for element in &decoded {
                    push(&mut again, element);
                }
                // A length may be written longer than it needs: what decodes is at most as long.
                proptest::prop_assert!(again.len() <= bytes.len());
            }
        }
    }

    #[test]
    fn flags_name_the_type() {
        assert_eq!(Kind::of_flags(Kind::Hash.flags()), Some(Kind::Hash));
        assert!(is_collection(0x5153_C001));
        assert!(!is_collection(0) && !is_collection(0x5153_C000) && !is_collection(0x5153_C0FF));
    }
}
