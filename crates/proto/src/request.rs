//! The request vocabulary every parser produces and the server consumes: one [`Request`] type
//! for the text, meta and binary protocols, with the meta and binary forms it carries. Parsers
//! (text, meta, binary) build it; nothing here reads bytes off the wire.

use crate::{Limits, KEY_BYTES_MAX};

/// memcached's reply to an unknown command.
pub(crate) const ERROR: &str = "ERROR\r\n";
/// memcached's reply to a malformed command line.
pub(crate) const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format\r\n";

/// Which of the get commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetKind {
    /// get: values.
    Get,
    /// gets: values with CAS uniques.
    Gets,
    /// gat: touch, then values.
    Gat {
        /// New exptime (memcached rules).
        exptime: i32,
    },
    /// gats: touch, then values with CAS uniques.
    Gats {
        /// New exptime.
        exptime: i32,
    },
}

impl GetKind {
    /// Whether the reply carries CAS uniques.
    pub fn with_cas(self) -> bool {
        matches!(self, GetKind::Gets | GetKind::Gats { .. })
    }

    /// The new exptime, for gat/gats.
    pub fn touch(self) -> Option<i32> {
        match self {
            GetKind::Gat { exptime } | GetKind::Gats { exptime } => Some(exptime),
            _ => None,
        }
    }
}

/// Which storage command: the store's own modes (`qs_store::StoreMode`), so a codec names the
/// operation the store runs and nothing maps one enum onto another. The text commands give
/// `Set`, `Add`, `Replace`, `Append`, `Prepend` and `Cas`; binary frames with a CAS give
/// `Cas`, `AppendCas` and `PrependCas`; meta `ms` gives them all.
pub use qs_store::StoreMode;

/// A parsed request, borrowing the read buffer.
#[derive(Debug)]
pub enum Request<'a> {
    /// get gets gat gats: `keys` is the rest of the line (space-separated keys, at least one,
    /// each checked against [`KEY_BYTES_MAX`] as it is answered).
    Get {
        /// Which command.
        kind: GetKind,
        /// The keys, as a line; with `single`, the one key alone (no space around it).
        keys: &'a [u8],
        /// The line names one key, and `keys` is it: the parser's one scan of the line found
        /// it, so no later step scans the line again to ask.
        single: bool,
    },
    /// set add replace append prepend cas.
    Store {
        /// Which command.
        mode: StoreMode,
        /// The key.
        key: &'a [u8],
        /// Client flags.
        flags: u32,
        /// Exptime (memcached rules).
        exptime: i32,
        /// The data block, without its `\r\n`.
        data: &'a [u8],
        /// No reply wanted.
        noreply: bool,
    },
    /// A storage command whose data block is larger than the item size limit: reply
    /// `SERVER_ERROR object too large for cache` (unless noreply); a refused `set` also removes
    /// the key's old value, as memcached does. The request's `len` covers the whole data block
    /// and may run past the buffer.
    TooLarge {
        /// Which command.
        mode: StoreMode,
        /// The key.
        key: &'a [u8],
        /// No reply wanted.
        noreply: bool,
    },
    /// delete.
    Delete {
        /// The key.
        key: &'a [u8],
        /// No reply wanted.
        noreply: bool,
    },
    /// incr / decr.
    Arith {
        /// The key.
        key: &'a [u8],
        /// Amount.
        delta: u64,
        /// decr.
        decrement: bool,
        /// No reply wanted.
        noreply: bool,
    },
    /// touch.
    Touch {
        /// The key.
        key: &'a [u8],
        /// New exptime.
        exptime: i32,
        /// No reply wanted.
        noreply: bool,
    },
    /// flush_all, with an optional delay.
    FlushAll {
        /// Seconds from now (0: now).
        delay: i32,
        /// No reply wanted.
        noreply: bool,
    },
    /// stats, with an optional group.
    Stats {
        /// The argument (empty for plain `stats`).
        group: &'a [u8],
        /// The group's own argument (`stats detail on`; empty when none).
        argument: &'a [u8],
    },
    /// version.
    Version,
    /// verbosity.
    Verbosity {
        /// No reply wanted.
        noreply: bool,
    },
    /// quit: close the connection.
    Quit,
    /// A meta command (mg ms md ma me).
    Meta(Meta<'a>),
    /// mn.
    MetaNoop,
    /// `lru_crawler metadump <classes>`: list every item (the server checks `classes` with
    /// [`crate::text::crawler_classes`], after checking that the crawler is enabled, as memcached does).
    Metadump {
        /// `all`, `hash`, or a comma-separated list of class ids.
        classes: &'a [u8],
        /// `lru_crawler mgdump` (memcached 1.6.19): each key as an `mg` line instead.
        keys: bool,
    },
    /// `lru_crawler crawl <classes>`: reclaim expired items now.
    Crawl {
        /// As for [`Request::Metadump`].
        classes: &'a [u8],
    },
    /// `lru_crawler enable` / `lru_crawler disable`.
    CrawlerSwitch {
        /// enable.
        enable: bool,
    },
    /// `lru_crawler sleep <us>` / `lru_crawler tocrawl <n>` with a valid number: pacing of
    /// memcached's crawler thread (answered OK).
    CrawlerPacing,
    /// `slabs automove 0|1|2`: memcached's slab rebalancer switch. Quicksilver's logs have no
    /// slab classes to move memory between, so a valid level is accepted and changes nothing.
    SlabsAutomove {
        /// No reply wanted.
        noreply: bool,
    },
    /// `slabs reassign <src> <dst>`: memcached's manual slab page move (both numbers parsed;
    /// `None` where one is not a number).
    SlabsReassign {
        /// Source and destination class ids.
        classes: Option<(i32, i32)>,
    },
    /// `cache_memlimit <megabytes> [noreply]`: memcached's run-time change of the item memory.
    CacheMemlimit {
        /// The new limit in megabytes.
        megabytes: u32,
        /// No reply wanted.
        noreply: bool,
    },
    /// `stats cachedump <class> <limit>`: up to `limit` items of a class. `None` when the
    /// line has too few tokens; a number that does not parse is `None` inside.
    CacheDump {
        /// The class id and the limit.
        args: Option<(Option<u32>, Option<u32>)>,
    },
    /// `debugtime <seconds>`: memcached's debug builds move the server's clock forward (or
    /// back) by this much; quicksilver answers it only when started with `--enable-debugtime`.
    DebugTime {
        /// Seconds to add to the clock.
        delta: i32,
    },
    /// `watch [streams]`: the connection becomes a stream of log lines (memcached's watchers).
    Watch {
        /// The streams asked for ([`watch`] bits; `fetchers` when none is named), or `None`
        /// when one is unknown (memcached answers `ERROR`, after its other checks).
        streams: Option<u16>,
    },
    /// `shutdown`, `shutdown graceful`, or another mode (refused once shutdown is enabled).
    Shutdown {
        /// What was asked.
        mode: ShutdownMode,
    },
    /// `refresh_certs [noreply]`: memcached's TLS reload of the certificate, key and CA files.
    RefreshCerts {
        /// No reply wanted.
        noreply: bool,
    },
    /// ElastiCache's cluster discovery: `config get cluster` (the fleet's nodes and their
    /// version), or quicksilver's `config reload cluster` (the fleet file read again).
    Cluster {
        /// `config reload cluster`.
        reload: bool,
    },
    /// A binary-protocol request ([`crate::binary::parse`]).
    Binary(Binary<'a>),
    /// A Redis protocol request (its listener's dialect) that is not one command on one key:
    /// see [`crate::resp`].
    Resp(crate::resp_frame::Frame<'a>),
    /// A Redis protocol command on one key, read into the one vocabulary when it was parsed
    /// (so it is located, prefetched, routed and run without reading its frame again).
    RespKey(crate::command::Command<'a>),
    /// A Redis protocol request whose framing is broken: the error is answered and the
    /// connection closes, as redis-server closes it.
    RespProtocolError(crate::resp_frame::ProtocolError),
}

/// The log streams `watch` names, as bits.
pub mod watch {
    /// `rawcmds`.
    pub const RAWCMDS: u16 = 1 << 0;
    /// `evictions`: items pushed out to make room.
    pub const EVICTIONS: u16 = 1 << 1;
    /// `fetchers`: lookups of items (gets, and the lookup before a store).
    pub const FETCHERS: u16 = 1 << 2;
    /// `mutations`: stores.
    pub const MUTATIONS: u16 = 1 << 3;
    /// `sysevents`.
    pub const SYSEVENTS: u16 = 1 << 4;
    /// `connevents`: connections opened and closed.
    pub const CONNEVENTS: u16 = 1 << 5;
    /// `proxyreqs`.
    pub const PROXYREQS: u16 = 1 << 6;
    /// `proxyevents`.
    pub const PROXYEVENTS: u16 = 1 << 7;
    /// `proxyuser`.
    pub const PROXYUSER: u16 = 1 << 8;
    /// `deletions`: items deleted by `delete` and `md` (memcached 1.6.20).
    pub const DELETIONS: u16 = 1 << 9;

    /// The bit of the stream named `name`.
    pub fn named(name: &[u8]) -> Option<u16> {
        Some(match name {
            b"rawcmds" => RAWCMDS,
            b"evictions" => EVICTIONS,
            b"fetchers" => FETCHERS,
            b"mutations" => MUTATIONS,
            b"sysevents" => SYSEVENTS,
            b"connevents" => CONNEVENTS,
            b"proxyreqs" => PROXYREQS,
            b"proxyevents" => PROXYEVENTS,
            b"proxyuser" => PROXYUSER,
            b"deletions" => DELETIONS,
            _ => return None,
        })
    }
}

/// What `shutdown` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// `shutdown`: stop now (memcached raises SIGINT).
    Now,
    /// `shutdown graceful` (memcached raises SIGUSR1).
    Graceful,
    /// Any other argument: `CLIENT_ERROR invalid shutdown mode`.
    Invalid,
}

/// Which meta command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCommand {
    /// mg.
    Get,
    /// ms.
    Set,
    /// md.
    Delete,
    /// ma.
    Arith,
    /// me.
    Debug,
}

impl MetaCommand {
    /// The command for `m<byte>` (mn is a text command: it takes no key).
    pub fn from_byte(byte: u8) -> Option<MetaCommand> {
        Some(match byte {
            b'g' => MetaCommand::Get,
            b's' => MetaCommand::Set,
            b'd' => MetaCommand::Delete,
            b'a' => MetaCommand::Arith,
            b'e' => MetaCommand::Debug,
            _ => return None,
        })
    }
}

/// memcached's MFLAG_MAX_OPT_LENGTH: more tokens than this (terminal included) is refused.
pub(crate) const META_TOKENS_MAX: usize = 20;
/// Longest opaque token, `O` included (memcached's MFLAG_MAX_OPAQUE_LENGTH).
pub const OPAQUE_BYTES_MAX: usize = 32;
/// A base64 key of [`KEY_BYTES_MAX`] characters decodes to at most this many bytes.
pub(crate) const DECODED_KEY_BYTES_MAX: usize = KEY_BYTES_MAX / 4 * 3 + 3;

/// A meta request, borrowing the read buffer.
#[derive(Clone, Debug)]
pub struct Meta<'a> {
    /// Which command.
    pub command: MetaCommand,
    /// The key token as sent (base64 when the `b` flag is given).
    pub key_token: &'a [u8],
    /// The decoded key (`b` flag; the rare path, so it may allocate).
    pub(crate) decoded: Option<Vec<u8>>,
    /// The flag tokens as a line.
    pub(crate) flags_line: &'a [u8],
    /// ms: the declared data length.
    pub value_len: usize,
    /// Parsed flag values.
    pub options: MetaOptions,
    /// ms: the data block, without its `\r\n`.
    pub data: &'a [u8],
}

/// Values of the meta flags that carry them.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetaOptions {
    /// Which flag letters were given (bit `c - 64` for ASCII letter `c`).
    pub(crate) seen: u64,
    /// `T`: new TTL.
    pub ttl: Option<i32>,
    /// `N`: vivify on miss with this TTL.
    pub vivify: Option<i32>,
    /// `R`: win when the remaining TTL is below this.
    pub recache: Option<i32>,
    /// `C`: compare CAS.
    pub cas: Option<u64>,
    /// `E`: the CAS value to give the item (memcached 1.6.27).
    pub cas_in: Option<u64>,
    /// `F`: client flags.
    pub client_flags: u32,
    /// `M`: mode character.
    pub mode: Option<u8>,
    /// `D`: delta (default 1).
    pub delta: u64,
    /// `J`: initial value on vivify (default 0).
    pub initial: u64,
}

impl MetaOptions {
    /// Whether flag `letter` was given.
    pub fn has(&self, letter: u8) -> bool {
        (b'A'..=b'z').contains(&letter) && self.seen & (1 << (letter - b'A')) != 0
    }

    /// `q`: suppress the nominal reply.
    pub fn quiet(&self) -> bool {
        self.has(b'q')
    }

    /// `b`: the key is base64.
    pub fn base64(&self) -> bool {
        self.has(b'b')
    }
}

impl<'a> Meta<'a> {
    /// The key the item is stored under (decoded when `b` was given).
    pub fn key(&self) -> &[u8] {
        self.decoded.as_deref().unwrap_or(self.key_token)
    }

    /// The flag tokens in request order (each starts with its letter).
    pub fn flag_tokens(&self) -> impl Iterator<Item = &'a [u8]> {
        crate::tokens::words(self.flags_line)
    }
}

impl Meta<'_> {
    /// ms: whether the declared data block exceeds the item size limit (then `data` is empty
    /// and the request's length covers the block to skip).
    pub fn too_large(&self, limits: &Limits) -> bool {
        self.command == MetaCommand::Set
            && limits.too_large(self.key().len(), self.value_len, self.options.client_flags)
    }

    /// ma: decrement mode.
    pub fn decrement(&self) -> bool {
        matches!(self.options.mode, Some(b'D' | b'-'))
    }
}

/// A binary request: the header fields every reply needs, and the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binary<'a> {
    /// The opcode as sent (the reply carries it back, quiet variants included).
    pub opcode: u8,
    /// The opaque, echoed unread (kept in wire order).
    pub opaque: [u8; 4],
    /// The CAS field.
    pub cas: u64,
    /// What is asked.
    pub command: BinaryCommand<'a>,
}

/// What a binary request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryCommand<'a> {
    /// GET GETQ GETK GETKQ, and GAT GATQ GATK GATKQ (`touch` holds their new exptime).
    Get {
        /// The key.
        key: &'a [u8],
        /// Q: a miss sends nothing.
        quiet: bool,
        /// K: a reply carries the key.
        with_key: bool,
        /// GAT*: the new exptime.
        touch: Option<u32>,
    },
    /// TOUCH: a new exptime; the reply carries the flags, no value.
    Touch {
        /// The key.
        key: &'a [u8],
        /// New exptime.
        exptime: u32,
    },
    /// SET ADD REPLACE APPEND PREPEND (and Q); a non-zero header CAS makes SET ADD REPLACE a
    /// CAS store and APPEND PREPEND conditional on it.
    Store {
        /// Set, Add, Replace, Append or Prepend.
        mode: StoreMode,
        /// The key.
        key: &'a [u8],
        /// Client flags (0 for append/prepend).
        flags: u32,
        /// Exptime (0 for append/prepend).
        exptime: u32,
        /// The value.
        value: &'a [u8],
        /// Q: success sends nothing.
        quiet: bool,
    },
    /// A store whose item would exceed the item size limit: `E2BIG`, the value swallowed (the
    /// request's `len` covers it and may run past the buffer); a refused SET also drops the
    /// key's old value, as memcached does.
    TooLarge {
        /// The key.
        key: &'a [u8],
        /// It was a SET (or SETQ).
        set: bool,
    },
    /// DELETE(Q), with the header CAS as a condition when non-zero.
    Delete {
        /// The key.
        key: &'a [u8],
        /// Q.
        quiet: bool,
    },
    /// INCREMENT DECREMENT (and Q).
    Arith {
        /// The key.
        key: &'a [u8],
        /// Amount.
        delta: u64,
        /// The value a miss creates, unless `exptime` is `0xffffffff`.
        initial: u64,
        /// The created counter's exptime; `0xffffffff`: a miss creates nothing.
        exptime: u32,
        /// DECREMENT.
        decrement: bool,
        /// Q.
        quiet: bool,
    },
    /// QUIT(Q): reply (unless quiet), then close.
    Quit {
        /// Q.
        quiet: bool,
    },
    /// FLUSH(Q), with an optional delay.
    Flush {
        /// Exptime of the flush (0: now).
        exptime: u32,
        /// Q.
        quiet: bool,
    },
    /// NOOP.
    Noop,
    /// VERSION.
    Version,
    /// STAT with a group (the key; empty for all).
    Stat {
        /// The group.
        group: &'a [u8],
    },
    /// SASL_LIST_MECHS.
    SaslListMechs,
    /// SASL_AUTH and SASL_STEP.
    SaslAuth {
        /// The mechanism (the key).
        mechanism: &'a [u8],
        /// The client's data (the value).
        data: &'a [u8],
        /// SASL_STEP.
        step: bool,
    },
    /// An error reply with memcached's text for `status`; with `close`, the connection closes
    /// after it. What the request's `len` covers is skipped.
    Refuse {
        /// The status.
        status: u16,
        /// Close after the reply.
        close: bool,
    },
}

impl<'a> BinaryCommand<'a> {
    /// The key the command works on, for commands with one.
    pub fn key(&self) -> Option<&'a [u8]> {
        match *self {
            BinaryCommand::Get { key, .. }
            | BinaryCommand::Touch { key, .. }
            | BinaryCommand::Store { key, .. }
            | BinaryCommand::TooLarge { key, .. }
            | BinaryCommand::Delete { key, .. }
            | BinaryCommand::Arith { key, .. } => Some(key),
            _ => None,
        }
    }
}
