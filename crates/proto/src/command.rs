//! The one command vocabulary: a command on one key in no dialect's words, which one executor
//! runs whatever the dialect it came in. memcached's meta flags are the natural superset: a
//! text `add` is a store in add mode, a binary `GETKQ` a quiet get whose reply carries its key,
//! `mg k v T30 N30` a get that touches and creates. Each codec turns its request into a
//! [`Command`] (`Request::key_command`, [`crate::Meta::key_command`],
//! [`crate::binary::Binary::key_command`]) and words the reply from what the executor did
//! ([`Answer`]; its encoders are each dialect's `reply` module, reached through
//! [`crate::answer`]).
//!
//! Exptimes are memcached's (relative seconds up to 30 days, else a unix time), widened to
//! `i64` so the text protocol's signed and the binary protocol's unsigned ones both fit.

use crate::{Meta, StoreMode};

/// A command on one key.
#[derive(Clone, Copy, Debug)]
pub struct Command<'r> {
    /// The key (decoded, for a base64 meta key).
    pub key: &'r [u8],
    /// What is asked.
    pub op: Op<'r>,
    /// How the reply is worded, and what the dialect records.
    pub answer: Answer<'r>,
}

/// What a command asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op<'r> {
    /// Read the item (get gets gat gats, GET* GAT*, mg).
    Get(Get),
    /// Store a value (set add replace append prepend cas, SET* ADD* REPLACE* APPEND* PREPEND*, ms).
    Store(Store<'r>),
    /// A store whose item would be larger than the item size limit: refused before its data
    /// was read.
    TooLarge {
        /// memcached drops the key's old value for it (a `set`, a binary SET, any `ms`).
        drops: bool,
    },
    /// Delete (or, with meta's I and x, invalidate or empty) the item.
    Delete(Delete),
    /// Increment or decrement a counter (incr decr, INCREMENT DECREMENT, ma).
    Arith(Arith),
    /// A signed count (Redis's INCR, INCRBY, DECR, DECRBY): a missing counter counts from 0,
    /// a result past the signed 64-bit range is refused.
    Count {
        /// Amount, signed.
        by: i64,
    },
    /// A new exptime (touch, TOUCH).
    Touch {
        /// The new exptime.
        exptime: i64,
        /// The reply reports the item (its flags: binary TOUCH), so it is read as it is touched.
        read: bool,
    },
    /// Report the item without changing it (me).
    Inspect,
}

impl Op<'_> {
    /// Whether it only reads (a plain get, a meta get without T, N or R, me): CREW serves
    /// those from any worker.
    #[inline]
    pub fn read_only(&self) -> bool {
        match self {
            Op::Get(get) => get.read_only(),
            Op::Inspect => true,
            _ => false,
        }
    }
}

/// A read's options; all `None`/`false` for a plain get.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Get {
    /// Touch: the new exptime (gat, GAT, mg T).
    pub touch: Option<i64>,
    /// mg N: a miss creates an empty item, with this exptime, and wins the right to fill it.
    pub vivify: Option<i64>,
    /// mg R: win the right to recache an item whose remaining TTL is below this many seconds.
    pub recache_below_secs: Option<u32>,
    /// mg R before T: R compares the TTL the item had before this request's touch.
    pub recache_before_touch: bool,
    /// mg u: the read does not count as an access (no LRU bump, no fetched mark).
    pub no_update: bool,
    /// mg E: the CAS an item created on a miss shows.
    pub cas_in: Option<u64>,
}

impl Get {
    /// The get's options: plain (`get`), or touching (`gat`).
    #[inline]
    pub fn touching(touch: Option<i64>) -> Get {
        Get { touch, ..Get::default() }
    }

    /// Whether it only reads (a CREW reader may serve it from any worker).
    #[inline]
    pub fn read_only(&self) -> bool {
        self.touch.is_none() && self.vivify.is_none() && self.recache_below_secs.is_none()
    }
}

/// A store's options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Store<'r> {
    /// How it stores, with the client's CAS where it compares one.
    pub mode: StoreMode,
    /// Client flags.
    pub flags: u32,
    /// Exptime.
    pub exptime: i64,
    /// The value.
    pub data: &'r [u8],
    /// ms N: an append or prepend to a missing item creates it, with this exptime.
    pub vivify: Option<i64>,
    /// ms E: the CAS the stored item shows.
    pub cas_in: Option<u64>,
    /// memcached drops the key's old value when the store is refused for its size or for
    /// memory (a `set`, a binary SET, any `ms`).
    pub drops_refused: bool,
}

/// A delete's options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delete {
    /// Delete only the version with this CAS (a client's); `Some(0)` matches none (meta C0).
    pub cas: Option<u64>,
    /// md I: mark the item stale instead of deleting it.
    pub invalidate: bool,
    /// md x: drop the value, keeping an empty item with `flags` and `exptime`.
    pub keep_item: bool,
    /// md T: the exptime an invalidated or emptied item gets.
    pub exptime: Option<i64>,
    /// md F: the flags an emptied item gets.
    pub flags: u32,
    /// md E: the CAS the invalidated or emptied item shows.
    pub cas_in: Option<u64>,
}

/// An incr/decr's options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arith {
    /// By how much.
    pub delta: u64,
    /// Decrement.
    pub decrement: bool,
    /// Only if the counter's CAS is this (a client's; 0: unconditionally).
    pub cas: u64,
    /// A miss creates the counter with this initial value and exptime (binary; ma N).
    pub create: Option<(u64, i64)>,
    /// ma T: an existing counter's new exptime.
    pub exptime: Option<i64>,
    /// ma E: the CAS the counter shows.
    pub cas_in: Option<u64>,
}

/// How a command's reply is worded: the dialect that parsed it, with what the reply needs of
/// the request. The executor asks it what the dialect records ([`Answer::records_detail`],
/// [`Answer::deletion_logged_as`]) and hands it what it did.
#[derive(Clone, Copy, Debug)]
pub enum Answer<'r> {
    /// The text protocol.
    Text {
        /// noreply.
        noreply: bool,
        /// A get's reply carries CAS uniques (gets, gats).
        with_cas: bool,
    },
    /// A meta command: its reply reflects the request's flags.
    Meta(&'r Meta<'r>),
    /// The binary protocol.
    Binary {
        /// The request's opcode, echoed.
        opcode: u8,
        /// The request's opaque, echoed.
        opaque: [u8; 4],
        /// A quiet opcode: success sends nothing (a get: a miss sends nothing).
        quiet: bool,
        /// A get's reply carries its key (GETK, GATK).
        with_key: bool,
    },
    /// The Redis protocol: how the command's outcome is worded.
    Resp(RespReply),
}

/// How a RESP command's outcome is worded ([`crate::resp::reply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespReply {
    /// GET: the value as a bulk string, a miss as the null bulk string.
    Bulk,
    /// GET on a RESP3 connection (`HELLO 3`): a miss is RESP3's null, `_`.
    Bulk3,
    /// One of MGET's values: as GET's, but a key holding a collection answers null.
    Element,
    /// MGET's value on a RESP3 connection.
    Element3,
    /// SET: `+OK`, or the null bulk string when NX or XX kept it from storing.
    Ok,
    /// SET on a RESP3 connection: `+OK`, or `_`.
    Ok3,
    /// SETNX: `:1` stored, `:0` not.
    StoredInteger,
    /// DEL: how many keys went (0 or 1 here).
    Deleted,
    /// EXISTS: whether the key is there.
    Exists,
    /// INCR, INCRBY: the counter's new value.
    Counter,
    /// EXPIRE and its kin: `:1` when the key was there, `:0` when not.
    Expired,
    /// TTL: seconds left, -1 for no expiry, -2 for no key.
    Ttl,
    /// PTTL: as TTL, in milliseconds (the store keeps seconds).
    Pttl,
    /// STRLEN: the value's length, 0 for no key.
    Strlen,
    /// TYPE: `+string`, or `+none` for no key.
    Type,
    /// APPEND: the value's length once appended to (a missing key is created).
    Appended,
}

impl RespReply {
    /// This reply as a RESP3 connection words it: only a null differs, for the commands on
    /// one key.
    pub const fn resp3(self) -> RespReply {
        match self {
            RespReply::Bulk => RespReply::Bulk3,
            RespReply::Element => RespReply::Element3,
            RespReply::Ok => RespReply::Ok3,
            other => other,
        }
    }
}

impl Answer<'_> {
    /// memcached shows text and binary commands to `stats detail` (its meta commands not).
    #[inline]
    pub fn records_detail(&self) -> bool {
        matches!(self, Answer::Text { .. } | Answer::Binary { .. })
    }

    /// The name `watch deletions` gives a delete of this dialect (memcached logs none of
    /// the binary protocol's).
    #[inline]
    pub fn deletion_logged_as(&self) -> Option<&'static str> {
        match self {
            Answer::Text { .. } => Some("delete"),
            Answer::Meta(_) => Some("md"),
            Answer::Binary { .. } | Answer::Resp(_) => None,
        }
    }

    /// Whether the reply shows the stored item's size (meta's `s`, Redis's APPEND): after an
    /// append it is looked up.
    #[inline]
    pub fn shows_stored_size(&self) -> bool {
        self.reports(b's') || matches!(self, Answer::Resp(RespReply::Appended))
    }

    /// Whether the reply reports the return flag `letter` (meta only).
    #[inline]
    pub fn reports(&self, letter: u8) -> bool {
        matches!(self, Answer::Meta(meta) if meta.options.has(letter))
    }
}

/// What incr/decr did about a missing counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Created {
    /// Nothing: the counter existed, or none was to be created.
    No,
    /// It was created with the initial value.
    Yes,
    /// It was to be created, and no memory was to be had.
    NoMemory,
}
