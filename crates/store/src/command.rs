//! What a caller asks of a partition and what it gets back. Storage outcomes are plain values,
//! never errors (STYLE.md §5).

use crate::item::Expiry;
use crate::keyhash::KeyHash;
use crate::pinned::LogValue;

/// How a store command treats an existing item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if absent.
    Add,
    /// Store only if present.
    Replace,
    /// Add the data after the existing value (flags and expiry kept).
    Append,
    /// Add the data before the existing value (flags and expiry kept).
    Prepend,
    /// Store only if the item's CAS unique equals this one.
    Cas(u64),
    /// Meta `ms` with `I` and `C`: store if the item's CAS unique equals this one; if this one
    /// is lower (an older version's), store anyway but marked stale, keeping the item's expiry
    /// and win-token mark (memcached's "set-to-invalid").
    CasOrStale(u64),
    /// Meta `ms` append mode with `C`: as `Append`, only if the item's CAS unique equals this.
    AppendCas(u64),
    /// Meta `ms` prepend mode with `C`: as `Prepend`, only if the item's CAS unique equals this.
    PrependCas(u64),
}

/// One operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionCommand<'a> {
    /// get / gets: the value is appended to the output buffer.
    Get,
    /// gat / gats: set a new expiry, then as `Get`.
    GetAndTouch {
        /// The new expiry.
        expiry: Expiry,
    },
    /// touch: set a new expiry (a touch counts as a fetch, as in memcached).
    Touch {
        /// The new expiry.
        expiry: Expiry,
    },
    /// Meta `T` on md and ma: set a new expiry without the read's bookkeeping (the item is not
    /// marked fetched, nothing is counted as a touch).
    SetExpiry {
        /// The new expiry.
        expiry: Expiry,
    },
    /// set add replace append prepend cas.
    Store {
        /// Which of them.
        mode: StoreMode,
        /// The data.
        value: &'a [u8],
        /// memcached client flags.
        flags: u32,
        /// When it stops answering.
        expiry: Expiry,
    },
    /// delete; with `cas` non-zero, only if the item's CAS matches (meta `md C`).
    Delete {
        /// Expected CAS, or 0 for any.
        cas: u64,
    },
    /// incr / decr: incr wraps at 2^64, decr stops at 0.
    Arith {
        /// Amount.
        delta: u64,
        /// decr instead of incr.
        decrement: bool,
        /// Expected CAS, or 0 for any (meta `ma C`).
        cas: u64,
    },
    /// Redis's INCRBY (and DECRBY as a negative `by`): the value must read as a signed 64-bit
    /// integer (trailing spaces, which memcached's decr leaves, aside), and a result past that
    /// range is [`Outcome::Overflow`]; the new value is stored exactly (no padding).
    Count {
        /// Amount, signed.
        by: i64,
    },
    /// Meta `md I`: mark the item stale with a new CAS instead of deleting it; with `cas`
    /// non-zero, only if the item's CAS matches (`md I C`).
    Invalidate {
        /// Expected CAS, or 0 for any.
        cas: u64,
    },
    /// Meta `mg` with its item-changing flags (T, N, R) and win/recache semantics: a hit on a
    /// stale item, or on one whose remaining TTL is below `recache_below_secs`, hands out the win
    /// token once (`Hit::won`; later readers see `Hit::win_sent`); a miss with `vivify` creates an
    /// empty item with that expiry and hands the token to this caller ([`Outcome::Vivified`]).
    MetaGet(MetaGet),
}

/// Options of [`PartitionCommand::MetaGet`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaGet {
    /// `T`: new expiry on a hit.
    pub touch: Option<Expiry>,
    /// `N`: on a miss, create an empty item expiring then and win.
    pub vivify: Option<Expiry>,
    /// `R`: win when the remaining TTL is below this many seconds.
    pub recache_below_secs: Option<u32>,
    /// `R` came before `T` in the request: it reads the TTL before the touch (memcached
    /// applies the flags in order).
    pub recache_before_touch: bool,
    /// `u`: the read leaves the item as it was: not marked fetched, its last access and its
    /// place in the eviction order kept.
    pub no_update: bool,
}

/// A request to a partition: the key, its hash (computed once by the caller) and the command.
#[derive(Clone, Copy, Debug)]
pub struct PartitionRequest<'a> {
    /// The key (at most 250 bytes).
    pub key: &'a [u8],
    /// `KeyHash::of(key)`.
    pub hash: KeyHash,
    /// What to do.
    pub command: PartitionCommand<'a>,
}

impl<'a> PartitionRequest<'a> {
    /// A request for `key`, hashing it.
    #[inline]
    pub fn new(key: &'a [u8], command: PartitionCommand<'a>) -> PartitionRequest<'a> {
        PartitionRequest { key, hash: KeyHash::of(key), command }
    }
}

/// Where a read's value goes. The store tells the sink the item (its flags, length and CAS)
/// before it copies the value, so a reply's head can be written ahead of the value and the
/// value copied once: from the log into the reply, or into a buffer of the sink's choosing.
pub trait ValueSink {
    /// A hit: write what goes before the value, and return the buffer the value is appended
    /// to (`None`: the sink holds this value already, and nothing is copied).
    fn head(&mut self, hit: &Hit) -> Option<&mut Vec<u8>>;
    /// The read that called [`ValueSink::head`] raced a writer and runs again: forget what
    /// `head` wrote and what was appended since.
    fn undo(&mut self);
    /// [`ValueSink::head`] for a read by the partition's owner, which may leave the value in
    /// its log: `pin` pins it there, its hold charged where it says ([`crate::Charge`]), and
    /// gives the [`LogValue`] a reply sends it from (return `None` then: nothing is copied), or `None` where the log cannot keep it (store mode:
    /// copy it). By default the value is copied as `head` says.
    #[inline(always)]
    fn head_pinnable(
        &mut self,
        hit: &Hit,
        pin: impl FnOnce(PinCharge) -> Option<LogValue>,
    ) -> Option<&mut Vec<u8>> {
        let _ = pin;
        self.head(hit)
    }
}

/// Where a pinned value's hold is charged ([`ValueSink::head_pinnable`]), if anywhere.
pub type PinCharge = Option<std::sync::Arc<dyn crate::Charge>>;

/// The plain sink: the value appended to a buffer, nothing before it.
pub struct Append<'a> {
    out: &'a mut Vec<u8>,
    mark: usize,
}

impl<'a> Append<'a> {
    /// Appends to `out`.
    #[inline(always)]
    pub fn new(out: &'a mut Vec<u8>) -> Append<'a> {
        let mark = out.len();
        Append { out, mark }
    }
}

impl ValueSink for Append<'_> {
    #[inline(always)]
    fn head(&mut self, _hit: &Hit) -> Option<&mut Vec<u8>> {
        self.mark = self.out.len();
        Some(self.out)
    }

    #[inline(always)]
    fn undo(&mut self) {
        self.out.truncate(self.mark);
    }
}

/// Hands `value` (read elsewhere: a flash record) to `sink` as a read of the log would, with
/// `hit.value_start` set to where it landed.
pub fn deliver(sink: &mut impl ValueSink, hit: &mut Hit, value: &[u8]) {
    if let Some(buffer) = sink.head(hit) {
        hit.value_start = buffer.len();
        buffer.extend_from_slice(value);
    }
}

/// What a hit returns besides the value bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// Where the value starts in the buffer it was appended to (0 when the sink took no
    /// copy: see [`ValueSink::head`]).
    pub value_start: usize,
    /// Its length.
    pub value_len: usize,
    /// memcached client flags.
    pub flags: u32,
    /// CAS unique.
    pub cas: u64,
    /// Expiry (after a touch, the new one).
    pub expiry: Expiry,
    /// Expiry before this request's touch (the same as `expiry` without one).
    pub expiry_before: Expiry,
    /// Last access before this one, unix seconds.
    pub last_access_secs: u32,
    /// Whether it had been fetched before this access.
    pub fetched_before: bool,
    /// Marked stale by `Invalidate`.
    pub stale: bool,
    /// A win token had already been handed out for it (meta `Z`).
    pub win_sent: bool,
    /// This request won the right to recache it (meta `W`; only from [`PartitionCommand::MetaGet`]).
    pub won: bool,
}

/// The result of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Found; the value is in the output buffer.
    Hit(Hit),
    /// Not found (absent, expired, flushed or dropped by the lossy index).
    Miss,
    /// Meta `mg N`: not found, so an empty item was created and this caller won (`EN` + `W`).
    Vivified {
        /// The new item's CAS unique.
        cas: u64,
    },
    /// Stored, with its new CAS unique.
    Stored {
        /// The new CAS unique.
        cas: u64,
    },
    /// add on a present key, replace/append/prepend on an absent one.
    NotStored,
    /// cas (or a CAS-checked delete/arith) against a changed item.
    Exists,
    /// cas, delete, touch or arith on an absent key.
    NotFound,
    /// Deleted (or invalidated).
    Deleted,
    /// Touched.
    Touched,
    /// incr/decr result.
    Counter {
        /// The new value.
        value: u64,
        /// The new CAS unique.
        cas: u64,
        /// The item's expiry, which incr/decr keeps (meta `ma t` reports it).
        expiry: Expiry,
    },
    /// incr/decr on a value that is not a decimal number.
    NonNumeric,
    /// A signed count ([`PartitionCommand::Count`]) whose result is past the 64-bit range.
    Overflow,
    /// The item is larger than the item size limit or than half the partition's log.
    TooLarge,
    /// The key is empty or longer than 250 bytes.
    BadKey,
    /// Store mode: no room for the item (arena space or spare buckets exhausted); nothing was
    /// evicted and the old version, if any, is unchanged.
    OutOfMemory,
}
