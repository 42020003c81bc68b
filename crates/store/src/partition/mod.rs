//! One partition: a circular log and its lossy index, owned by one thread, with every memcached
//! operation on items. Readers on other threads (CREW) go through [`crate::Reader`].
//!
//! Every change to a bucket or to an item reachable from it is bracketed by the bucket's version
//! (odd while changing) in CREW mode; EREW skips the brackets. The head only moves forward, and
//! it is published (with a release fence) before the memory it frees is written again.

use crate::arena::{Arena, ArenaStats};
use crate::command::{
    Append, Hit, MetaGet, Outcome, PartitionCommand, PartitionRequest, StoreMode, ValueSink,
};
use crate::config::{Access, Config, Eviction};
use crate::index::{Index, Shape, Slot, BUCKET_WORDS, SLOTS_PER_BUCKET};
use crate::item::Now;
use crate::item::{
    self, parse_counter, Expiry, Ext, Word0, Word1, BIT_DEAD, BIT_EXT, BIT_FETCHED, BIT_STALE, BIT_WIN_SENT,
    LONG_KEY_BYTES_MAX, SLACK_WORDS_MAX, VALUE_BYTES_MAX,
};
use crate::keyhash::KeyHash;
use crate::log::{Header, Heads, Log, LogGeometry};
use crate::region::PageKind;
use crate::stats::PartitionStats;
use crate::sync::{fence, Arc, AtomicU32, AtomicU64};
use std::cell::Cell;

mod arriving;
mod cache_log;
mod commands;
mod flash_tier;
mod pins;
mod requests;
mod small_ring;
mod steps;
mod store_mode;
use store_mode::StoreState;
mod upkeep;
pub use arriving::Arriving;
pub use flash_tier::{FlashCounters, FlashRead, Promoted, Resolved, FLASH_READ_BYTES};
use std::sync::atomic::Ordering::{Relaxed, Release};

/// Bits of a CAS unique that carry the partition number.
const CAS_PARTITION_BITS: u32 = 16;

/// Entries of the slot-hint table (see [`Partition::prefetch_item`]): enough that the requests
/// of one batch rarely share an entry.
const HINTS: usize = 256;

/// The low keyhash bits a hint gives up to hold the slot index (slots 0..15 fit in 4 bits).
const HINT_SLOT_MASK: u64 = 0xF;

/// What the owner shares with readers.
pub(crate) struct Shared {
    pub(crate) log: Log,
    pub(crate) index: Index,
    /// Logical head: items before it are gone.
    pub(crate) head: AtomicU64,
    /// The small ring's logical head (S3-FIFO), as `head` is the main ring's.
    pub(crate) small_head: AtomicU64,
    /// flush_all: items last accessed at or before this unix second are flushed (0: none).
    pub(crate) oldest_live: AtomicU32,
    /// Immediate flush_all: items whose CAS sequence is below this are flushed (0: none).
    pub(crate) oldest_cas_seq: AtomicU64,
    /// Odd while a step over several keys changes this partition ([`Partition::begin_step`]).
    pub(crate) steps: AtomicU64,
    pub(crate) partition_index: u16,
}

impl Shared {
    /// The memcached CAS unique of an item with CAS sequence `seq`.
    #[inline(always)]
    pub(crate) fn cas_unique(&self, seq: u64) -> u64 {
        seq << CAS_PARTITION_BITS | self.partition_index as u64
    }

    /// Whether flush_all has made an item with this header stop answering.
    #[inline(always)]
    pub(crate) fn is_flushed(&self, header: &Header, now: Now) -> bool {
        let oldest_live = self.oldest_live.load(Relaxed);
        if oldest_live == 0 || oldest_live > now.secs() {
            return false;
        }
        let oldest_cas_seq = self.oldest_cas_seq.load(Relaxed);
        header.word1.last_access() <= oldest_live
            || (oldest_cas_seq != 0 && header.word0.cas_seq() < oldest_cas_seq)
    }

    /// Whether the item with this header no longer answers.
    #[inline(always)]
    pub(crate) fn is_gone(&self, header: &Header, now: Now) -> bool {
        header.ext.expiry().is_expired(now) || self.is_flushed(header, now)
    }
}

/// A located item.
#[derive(Clone, Copy, Debug)]
struct Found {
    /// The key's main bucket (whose version brackets changes).
    bucket: usize,
    /// The bucket holding the slot: the main bucket, or in store mode a spare one chained to it.
    slot_bucket: usize,
    slot: usize,
    offset: u64,
    header: Header,
}

/// One item as [`Partition::dump`] lists it.
#[derive(Clone, Copy, Debug)]
pub struct Dumped<'a> {
    /// The key.
    pub key: &'a [u8],
    /// Value bytes.
    pub value_len: usize,
    /// When it expires.
    pub expiry: Expiry,
    /// Unix second of its last access.
    pub last_access_secs: u32,
    /// CAS unique.
    pub cas: u64,
    /// Fetched since it was stored.
    pub fetched: bool,
    /// Client flags.
    pub flags: u32,
}

/// Which of a log's rings an item is written to (S3-FIFO's small ring, or the main ring every
/// other policy has alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ring {
    Main,
    Small,
}

/// Outcome of looking a key up.
enum Lookup {
    Found(Found),
    Absent,
    /// It was there but expired or flushed; it has been removed.
    Gone {
        expired: bool,
    },
}

/// A partition, owned by one thread.
pub struct Partition {
    shared: Arc<Shared>,
    head: u64,
    tail: u64,
    /// S3-FIFO's small ring and ghost ([`small_ring`]).
    small: small_ring::SmallRing,
    next_cas_seq: u64,
    crew: bool,
    eviction: Eviction,
    item_bytes_max: usize,
    geometry: LogGeometry,
    /// Bytes of each lap the log fills before it wraps: the log's size, which
    /// [`Partition::set_log_limit`] changes within the memory the geometry spans.
    limit_bytes: u64,
    /// The end of the furthest byte written since the memory was last given back: the log
    /// memory in use.
    touched_bytes: u64,
    /// The index's shape as the owner last published it ([`Index::shape`]).
    shape: Shape,
    /// Items past which the index is overloaded and splits buckets ([`Partition::grow_index`],
    /// before a write looks anything up); `u64::MAX` once it cannot grow.
    grow_at_items: u64,
    /// Clock: bytes of expired items the head reclaimed and not yet spent on keeping unread
    /// items (at most [`Partition::credit_max`]). Memory an expired item held while it
    /// waited for the head goes back to live items this way.
    reclaim_credit: u64,
    scan_cursor: usize,
    scan_credit_bytes: u64,
    scan_stride_bytes: u64,
    stats: PartitionStats,
    scratch: Vec<u8>,
    /// The latest `now` seen, used to tell expired from live items passed by the head.
    clock: Now,
    /// Store mode's allocator and spare buckets (`None` in cache mode).
    store: Option<StoreState>,
    /// Where pipeline stage 2 found each recent key's candidate slot, so that stage 3 looks
    /// there first instead of scanning the bucket again: the keyhash with its low 4 bits
    /// replaced by the slot index, in the entry the keyhash's bucket bits choose. Only a hint:
    /// the slot is checked as a scan would check it, and a miss falls back to the scan.
    hints: Box<[Cell<u64>]>,
    /// Items evicted since [`Partition::take_evictions`] last ran, while
    /// [`Partition::record_evictions`] is on (memcached's `watch evictions`).
    evicted: Option<Vec<Evicted>>,
    /// `-e`: the page of the memory file that says where the log's live window is
    /// ([`crate::persist`]); `None` in memory only.
    persist: Option<crate::persist::State>,
    /// `-e` with a flash tier: the flash slots the index file held at start-up (bucket, word),
    /// until the flash tier is attached and decides whether they still hold.
    crash_flash_slots: Vec<(u64, u64)>,
    /// log2 of the partition count (a recovered key must hash to this partition).
    #[cfg(not(loom))]
    partition_bits: u32,
    /// `-o ext_path`: where items leaving the DRAM head go ([`flash_tier`]).
    flash: Option<Box<flash_tier::FlashTier>>,
    /// CAS sequences below this were handed out before the last restart or may have been; the
    /// state page keeps it a step ahead of `next_cas_seq` (`u64::MAX` in memory only).
    cas_mark: u64,
    /// Values left in the log for replies to send from there ([`pins`]).
    pins: crate::pinned::Pins,
    /// Bytes of the records whose values are still arriving ([`arriving`]).
    arriving: Arc<AtomicU64>,
}

/// An item evicted to make room, as `watch evictions` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evicted {
    /// The key.
    pub key: Vec<u8>,
    /// Value bytes.
    pub value_len: usize,
    /// When it would have expired.
    pub expiry: Expiry,
    /// Unix second of its last access.
    pub last_access_secs: u32,
    /// Fetched since it was stored.
    pub fetched: bool,
}

impl Partition {
    /// Builds a partition (allocating and faulting in its memory).
    pub fn new(config: Config) -> Partition {
        let (log, index) = if config.store_mode {
            let log = Log::new_arena(config.log_bytes, config.huge_pages);
            (log, Index::new(config.bucket_count, config.spare_buckets, config.huge_pages))
        } else if let Some(shares) = small_ring::Shares::of(&config) {
            let offset_bits = config.offset_bits.min(crate::log::SMALL_BIT.trailing_zeros());
            let room = config.log_room_bytes.saturating_sub(shares.others()).max(shares.main);
            let log = Log::with_small_ring(shares.main, room, shares.small, offset_bits, config.huge_pages);
            let index = Index::growing(config.bucket_count, 0, config.index_levels, config.huge_pages);
            let mut partition =
                Partition::assemble(Config { log_bytes: shares.main, offset_bits, ..config }, log, index);
            partition.small.ghost = small_ring::empty_ghost(shares.ghost);
            partition.small.on = true;
            return partition;
        } else {
            let log =
                Log::new(config.log_bytes, config.log_room_bytes, config.offset_bits, config.huge_pages);
            (log, Index::growing(config.bucket_count, 0, config.index_levels, config.huge_pages))
        };
        let config = Config { eviction: config.eviction.without_small_ring(), ..config };
        Partition::assemble(config, log, index)
    }

    /// `-e`: a cache-mode partition whose log lives in `file` from byte `offset`
    /// ([`crate::persist::segment_bytes`] of it: the state page, then `config.log_bytes`
    /// rounded down to whole pages). What the file holds for the same geometry is taken back
    /// (the live window is scanned, every item checked and indexed again); anything else
    /// starts empty. The index stays in memory: it is rebuilt, not saved.
    #[cfg(not(any(miri, loom)))]
    pub fn open(
        config: Config,
        file: &std::fs::File,
        offset: u64,
        index_file: Option<(&std::fs::File, u64)>,
    ) -> std::io::Result<(Partition, crate::persist::Recovered)> {
        if config.store_mode {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "store mode cannot use a memory file",
            ));
        }
        let log_bytes = crate::persist::log_bytes(config.log_bytes);
        let state = crate::persist::State::open(file, offset)?;
        let log = Log::in_file(file, offset + crate::persist::STATE_BYTES, log_bytes, config.offset_bits)?;
        // With a flash tier the index lives in a file too: its flash slots are taken before it
        // is emptied for the log's scan, and put back once the flash tier is attached
        // (`flash_restore`); its DRAM slots are rebuilt from the log like any index's.
        let (index, crash_flash_slots) = match index_file {
            Some((index_file, index_offset)) => {
                let index = Index::in_file(index_file, index_offset, config.bucket_count)?;
                let slots = flash_tier::take_flash_slots(&index);
                (index, slots)
            }
            None => {
                (Index::growing(config.bucket_count, 0, config.index_levels, config.huge_pages), Vec::new())
            }
        };
        let mut config = config;
        config.log_bytes = log_bytes;
        // The memory file holds one ring: S3-FIFO runs as its main ring's clock.
        config.eviction = config.eviction.without_small_ring();
        let mut partition = Partition::assemble(config, log, index);
        partition.crash_flash_slots = crash_flash_slots;
        let shape = crate::persist::Shape {
            log_bytes: log_bytes as u64,
            offset_bits: config.offset_bits,
            partition_index: config.partition_index,
            #[cfg(not(loom))]
            partition_bits: config.partition_bits,
        };
        let recovered = match state.window(&shape) {
            Some(window) => partition.recover(window),
            None => {
                state.start(&shape);
                crate::persist::Recovered::default()
            }
        };
        partition.cas_mark = partition.next_cas_seq;
        partition.persist = Some(state);
        partition.advance_cas_mark();
        Ok((partition, recovered))
    }

    fn assemble(config: Config, log: Log, index: Index) -> Partition {
        let bucket_bits = config.bucket_count.trailing_zeros();
        assert!(
            config.partition_bits + bucket_bits + crate::keyhash::TAG_BITS <= 64,
            "partition, bucket and tag bits must fit in the keyhash"
        );
        assert!(config.partition_bits <= CAS_PARTITION_BITS);
        let geometry = log.geometry();
        let shape = index.shape();
        // The scan must visit every bucket before the tail advances by the offset space less
        // two logs (MICA §4.3.2): one bucket per `stride` bytes appended.
        let scan_window = (geometry.offset_mask + 1) - 2 * geometry.lap_bytes;
        let scan_stride_bytes = (scan_window / index.room_buckets() as u64).max(1);
        let item_bytes_max = config.item_bytes_max.min(config.log_bytes / 2);
        let store = config.store_mode.then(|| StoreState {
            arena: Arena::new(log.words(), item_bytes_max),
            spare_free: (config.bucket_count..config.bucket_count + config.spare_buckets).rev().collect(),
        });
        let shared = Shared {
            log,
            index,
            head: AtomicU64::new(0),
            small_head: AtomicU64::new(0),
            oldest_live: AtomicU32::new(0),
            oldest_cas_seq: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            partition_index: config.partition_index,
        };
        let mut partition = Partition {
            shared: Arc::new(shared),
            head: 0,
            tail: 0,
            small: small_ring::SmallRing::default(),
            next_cas_seq: 1,
            crew: config.access == Access::Crew,
            // Store mode never moves items: nothing is evicted for reads to protect.
            eviction: if config.store_mode { Eviction::Fifo } else { config.eviction },
            item_bytes_max,
            geometry,
            limit_bytes: if config.store_mode { geometry.log_bytes } else { config.log_bytes as u64 },
            touched_bytes: 0,
            shape,
            grow_at_items: u64::MAX,
            reclaim_credit: 0,
            scan_cursor: 0,
            scan_credit_bytes: 0,
            scan_stride_bytes,
            stats: PartitionStats::default(),
            scratch: Vec::new(),
            clock: Now::from_secs(0),
            store,
            hints: (0..HINTS).map(|_| Cell::new(0)).collect(),
            evicted: None,
            persist: None,
            crash_flash_slots: Vec::new(),
            #[cfg(not(loom))]
            partition_bits: config.partition_bits,
            flash: None,
            cas_mark: u64::MAX,
            pins: crate::pinned::Pins::default(),
            arriving: Arc::new(AtomicU64::new(0)),
        };
        partition.small.main_free = partition.limit_bytes;
        partition.plan_growth();
        partition
    }

    /// Takes back the live window a memory file kept: every record from its head to its tail
    /// is checked (a sane header that fits before the tail, a key that hashes to this
    /// partition) and indexed, a later version of a key replacing an earlier one. The window
    /// is cut at the first record that fails, so nothing torn or misplaced is ever served.
    #[cfg(not(any(miri, loom)))]
    fn recover(&mut self, window: crate::persist::Window) -> crate::persist::Recovered {
        let mut recovered = crate::persist::Recovered::default();
        self.head = window.head;
        self.tail = window.head;
        self.shared.head.store(self.head, Relaxed);
        self.limit_bytes = window.limit_bytes.clamp(self.log_limit_min() as u64, self.geometry.log_bytes);
        self.shared.oldest_live.store(window.oldest_live, Relaxed);
        self.shared.oldest_cas_seq.store(window.oldest_cas_seq, Relaxed);
        self.next_cas_seq = window.cas_mark.max(1);
        let mut key = Vec::new();
        let mut at = window.head;
        while at < window.tail {
            if self.shared.log.is_padding(at) {
                at += self.geometry.to_lap_end(at);
                continue;
            }
            let header = self.shared.log.header(at);
            let key_len = header.key_len();
            let capacity = header.capacity() as u64;
            let sane = key_len > 0
                && key_len <= LONG_KEY_BYTES_MAX
                && header.word1.value_len() <= VALUE_BYTES_MAX
                && at + capacity <= window.tail
                && self.geometry.physical(at) as u64 + capacity <= self.geometry.log_bytes;
            if !sane {
                recovered.cut_bytes = window.tail - at;
                break;
            }
            key.clear();
            self.shared.log.read_bytes(at, header.key_start(), key_len, &mut key);
            let hash = KeyHash::of(&key);
            let here = |hash: KeyHash| {
                hash.partition(self.partition_bits) == usize::from(self.shared.partition_index)
            };
            // A tagged key an older release placed by its whole hash: dropped, not a broken file.
            let misplaced = !here(hash) && here(KeyHash(xxhash_rust::xxh3::xxh3_64(&key)));
            if !here(hash) && !misplaced {
                recovered.cut_bytes = window.tail - at;
                break;
            }
            self.tail = at + capacity;
            at += capacity;
            if misplaced && !header.word0.has(BIT_DEAD) {
                self.shared.log.set_word0(self.tail - capacity, header.word0.with_bit(BIT_DEAD));
                recovered.misplaced += 1;
            }
            if misplaced || header.word0.has(BIT_DEAD) {
                continue;
            }
            self.stats.items += 1;
            self.stats.bytes += capacity;
            self.next_cas_seq = self.next_cas_seq.max(header.word0.cas_seq() + 1);
            let offset = self.tail - capacity;
            let slot = Slot::new(hash.tag(), offset & self.geometry.offset_mask);
            match self.find(hash, &key) {
                Some(older) => {
                    self.retire(older.offset, &older.header);
                    self.set_slot(older.slot_bucket, older.slot, slot);
                    recovered.replaced += 1;
                }
                None => self.link(self.shape.bucket(hash), slot),
            }
            if self.stats.items > self.grow_at_items {
                self.grow_index();
            }
        }
        self.tail = at;
        recovered.items = self.stats.items;
        recovered.bytes = self.stats.bytes;
        self.touched_bytes = self.geometry.log_bytes;
        self.persist_window();
        recovered
    }

    /// `-e`: writes the live window (head and tail) to the state page; called after the
    /// records it covers are whole.
    #[inline(always)]
    fn persist_window(&self) {
        if let Some(state) = &self.persist {
            state.set_window(self.head, self.tail);
        }
    }

    /// `-e`: keeps the state page's CAS mark ahead of every sequence handed out.
    #[cold]
    fn advance_cas_mark(&mut self) {
        self.cas_mark = self.next_cas_seq + crate::persist::CAS_MARK_STEP;
        if let Some(state) = &self.persist {
            state.set_cas_mark(self.cas_mark);
        }
    }

    /// Starts or stops keeping a record of evicted items (off: nothing is kept or copied).
    pub fn record_evictions(&mut self, on: bool) {
        if on != self.evicted.is_some() {
            self.evicted = on.then(Vec::new);
        }
    }

    /// The items evicted since the last call (while recording).
    pub fn take_evictions(&mut self) -> Vec<Evicted> {
        self.evicted.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The value length of `key`'s item if it answers at `now`, looked up without
    /// touching it or counting anything (memcached logs this lookup before a store).
    pub fn peek(&self, hash: KeyHash, key: &[u8], now: Now) -> Option<usize> {
        let found = self.find(hash, key)?;
        (!self.shared.is_gone(&found.header, now)).then(|| found.header.word1.value_len())
    }

    /// As [`Partition::peek`], with the item's CAS: a look that changes nothing (no fetch
    /// mark, no win token, no LRU bump).
    pub fn peek_cas(&self, hash: KeyHash, key: &[u8], now: Now) -> Option<(usize, u64)> {
        let found = self.find(hash, key)?;
        (!self.shared.is_gone(&found.header, now))
            .then(|| (found.header.word1.value_len(), self.shared.cas_unique(found.header.word0.cas_seq())))
    }

    /// The expiry of `key`'s item if it answers at `now`, looked up as [`Partition::peek`].
    pub fn peek_expiry(&self, hash: KeyHash, key: &[u8], now: Now) -> Option<Expiry> {
        let found = self.find(hash, key)?;
        (!self.shared.is_gone(&found.header, now)).then(|| found.header.ext.expiry())
    }

    fn note_eviction(&mut self, offset: u64, header: &Header) {
        let Some(evicted) = self.evicted.as_mut() else { return };
        let mut key = Vec::new();
        self.shared.log.read_bytes(offset, header.key_start(), header.key_len(), &mut key);
        evicted.push(Evicted {
            key,
            value_len: header.word1.value_len(),
            expiry: header.ext.expiry(),
            last_access_secs: header.word1.last_access(),
            fetched: header.word0.has(BIT_FETCHED),
        });
    }

    /// Counters with store mode's memory figures filled in (cheap: for publishing each turn).
    pub fn stats_snapshot(&self) -> PartitionStats {
        let mut stats = self.stats;
        stats.log_touched_bytes = self.log_touched_bytes() as u64;
        stats.index_buckets = self.shape.buckets() as u64;
        if self.store.is_none() && self.head < self.tail && !self.shared.log.is_padding(self.head) {
            stats.oldest_access_secs = u64::from(self.shared.log.header(self.head).word1.last_access());
        }
        if let Some(store) = &self.store {
            stats.arena_bytes = store.arena.capacity();
            stats.arena_free_bytes = store.arena.free_bytes();
            stats.arena_largest_free = store.arena.largest_free(self.shared.log.words());
            let (used, all) = self.spare_buckets();
            stats.spare_buckets_used = used as u64;
            stats.spare_buckets = all as u64;
        }
        stats
    }

    /// A handle other threads use to read this partition (CREW).
    pub fn reader(&self) -> crate::Reader {
        assert!(self.crew, "readers need Access::Crew");
        crate::Reader::new(self.shared.clone())
    }

    /// Counters so far.
    pub fn stats(&self) -> &PartitionStats {
        &self.stats
    }

    /// Pages backing the log and the index.
    pub fn page_kinds(&self) -> (PageKind, PageKind) {
        (self.shared.log.page_kind(), self.shared.index.page_kind())
    }

    /// Bytes of log memory: the log's size (in store mode the arena's).
    pub fn log_bytes(&self) -> usize {
        match self.store {
            Some(_) => self.shared.log.words().len() * 8,
            None => (self.limit_bytes + self.small_ring_bytes()) as usize,
        }
    }

    /// The most [`Partition::set_log_limit`] may grow the log to: the memory reserved for it.
    pub fn log_room(&self) -> usize {
        match self.store {
            Some(_) => self.log_bytes(),
            None => (self.geometry.log_bytes + self.small_ring_room()) as usize,
        }
    }

    /// Log memory in use: up to the furthest byte written (a log's pages are faulted in as
    /// its tail first reaches them, and given back when it shrinks).
    pub fn log_touched_bytes(&self) -> usize {
        match self.store {
            Some(_) => self.log_bytes(),
            None => (self.touched_bytes + self.small.tail.min(self.geometry.small_bytes)) as usize,
        }
    }

    /// The smallest log [`Partition::set_log_limit`] accepts: room for two of the largest items
    /// (below what S3-FIFO's small ring and ghost need besides, a partition runs clock).
    pub fn log_limit_min(&self) -> usize {
        (2 * self.item_bytes_max).max(64)
    }

    /// memcached's `cache_memlimit` for this partition: the log fills `bytes` of each lap from
    /// now on. Growing (up to [`Partition::log_room`]) lets the tail run further before it
    /// wraps: at once in a log that has not wrapped, else once the tail reaches the old end
    /// (the oldest items lie between). Shrinking evicts every item that ends past the new
    /// size, cuts the log there and gives the memory past it back. Store mode's arena cannot
    /// change size. Returns whether the size changed.
    pub fn set_log_limit(&mut self, bytes: usize) -> bool {
        let total = (bytes & !7) as u64;
        // The small ring and the ghost keep their size and the main ring takes the change, as
        // long as it keeps room for two of the largest items; below that the small ring is
        // turned off (emptied) and the partition runs clock in all of `bytes`.
        let others = self.small_ring_room();
        let small = others > 0
            && total >= others + self.log_limit_min() as u64
            && total - others <= self.geometry.log_bytes;
        let bytes = if small { total - others } else { total };
        // A memory file's log keeps the size its file was laid out for.
        if self.store.is_some()
            || self.persist.is_some()
            || bytes > self.geometry.log_bytes
            || bytes < self.log_limit_min() as u64
        {
            return false;
        }
        // Memory given back or cut reads as zeroes: values replies send from it are copied first.
        self.pins.rescue_all(&self.shared.log);
        self.set_small_ring(small);
        let shrinking = bytes < self.limit_bytes;
        self.small.main_free += bytes.saturating_sub(self.limit_bytes);
        self.limit_bytes = bytes;
        if shrinking {
            self.cut_at_limit();
        }
        true
    }

    /// After a shrink: evicts the items that end past the limit, then makes the log skip from
    /// the first record past the limit to each lap's end (a padding record, as the tail writes
    /// when it wraps), so nothing past the limit is reachable, and gives that memory back.
    fn cut_at_limit(&mut self) {
        let limit = self.limit_bytes;
        let ends_past = |partition: &Self, at: u64, header: &Header| {
            partition.geometry.physical(at) as u64 + header.capacity() as u64 > limit
        };
        // 1. Evict: unlink each live item past the limit from the index and mark it dead.
        let past: Vec<(u64, Header)> = self
            .records()
            .filter(|(at, header)| !header.word0.has(BIT_DEAD) && ends_past(self, *at, header))
            .collect();
        for (at, header) in past {
            self.evict_in_place(at, &header);
        }
        // 2. Cut each lap of the live window at its first record past the limit: every record
        //    from there to the lap's end is dead now.
        let mut cuts: Vec<u64> = Vec::new();
        for (at, header) in self.records() {
            let lap_start = at - self.geometry.physical(at) as u64;
            if ends_past(self, at, &header) && cuts.last().map_or(true, |&cut| cut < lap_start) {
                cuts.push(at);
            }
        }
        for at in cuts {
            let lap_end = at + self.geometry.to_lap_end(at);
            if lap_end >= self.tail {
                // The tail's own lap: what lies between the cut and the tail is dead, so the
                // tail moves on to the next lap, and the head follows to keep the live window
                // within one lap (the records it passes are dead too; where the cut is at the
                // head, the window is empty).
                if at == self.head {
                    self.head = lap_end;
                } else {
                    self.shared.log.write_padding(at);
                }
                // The index scan counts the skip as appended bytes, as it does a wrap's padding.
                self.scan_credit_bytes += lap_end - self.tail;
                self.tail = lap_end;
                while self.tail - self.head > self.geometry.lap_bytes {
                    self.evict_head();
                }
                break;
            }
            if at == self.head {
                // Dead records at the head: the head simply moves past them.
                while self.head < lap_end {
                    self.evict_head();
                }
            } else {
                self.shared.log.write_padding(at);
            }
        }
        self.shared.head.store(self.head, Relaxed);
        if self.crew {
            fence(Release);
        }
        // 3. Nothing reachable lies past the limit (a padding record may sit at it).
        let keep = (limit + 8) as usize;
        self.shared.log.release_from(keep);
        self.touched_bytes = self.touched_bytes.min(keep.next_multiple_of(4096) as u64);
    }

    /// The records of the live window, head to tail, padding skipped: (offset, header).
    fn records(&self) -> impl Iterator<Item = (u64, Header)> + '_ {
        let mut at = self.head;
        std::iter::from_fn(move || {
            while at < self.tail {
                if self.shared.log.is_padding(at) {
                    at += self.geometry.to_lap_end(at);
                    continue;
                }
                let header = self.shared.log.header(at);
                let record = at;
                at += header.capacity() as u64;
                return Some((record, header));
            }
            None
        })
    }

    /// Bytes of the log held at `now` by items that no longer answer (expired or flushed)
    /// and wait for the head to pass them: what a reclaim ahead of the head could give back.
    /// Walks the whole log (for simulations and tests, not the request path).
    pub fn gone_bytes(&self, now: Now) -> u64 {
        if self.store.is_some() {
            return 0;
        }
        self.records()
            .chain(self.small_records())
            .filter(|(_, header)| !header.word0.has(BIT_DEAD) && self.shared.is_gone(header, now))
            .map(|(_, header)| header.capacity() as u64)
            .sum()
    }

    /// Evicts the live item at `offset` where it lies (a shrinking log's end): out of the
    /// index and counted as an eviction (or a reclaim, if it had expired).
    fn evict_in_place(&mut self, offset: u64, header: &Header) {
        let key = self.key_of(offset, header);
        let hash = KeyHash::of(&key);
        let found = self.find(hash, &key).filter(|found| found.offset == offset & self.geometry.offset_mask);
        let bucket = self.shape.bucket(hash);
        let version = self.begin_write(bucket);
        if let Some(found) = found {
            self.unlink(&found);
        }
        self.shared.log.set_word0(offset, header.word0.with_bit(BIT_DEAD));
        self.end_write(bucket, version);
        self.stats.items -= 1;
        self.stats.bytes -= header.capacity() as u64;
        if self.shared.is_gone(header, self.clock) {
            self.count_reclaimed(header);
        } else {
            self.count_eviction(offset, header);
        }
    }

    /// Bytes appended since the item at `offset` was (the lap's unused end not counted).
    #[inline(always)]
    fn age(&self, offset: u64) -> u64 {
        let age = self.tail.wrapping_sub(offset) & self.geometry.offset_mask;
        if age > self.geometry.physical(self.tail) as u64 {
            // An earlier lap: its end past the limit held nothing.
            age.saturating_sub(self.geometry.lap_bytes - self.limit_bytes)
        } else {
            age
        }
    }

    /// Bytes of index memory.
    pub fn index_bytes(&self) -> usize {
        self.shared.index.bytes()
    }

    /// Index slots in all.
    pub fn slot_count(&self) -> usize {
        self.shared.index.bucket_count() * SLOTS_PER_BUCKET
    }

    /// Largest item a store accepts here.
    pub fn item_bytes_max(&self) -> usize {
        self.item_bytes_max
    }

    /// Main index buckets the index may grow to: a dump that walks `0..room_buckets()` in
    /// ranges sees every bucket in use whenever it gets there.
    pub fn room_buckets(&self) -> usize {
        self.shared.index.room_buckets()
    }

    /// The first main bucket from `from` that may hold a key (its group of
    /// [`crate::index::GROUP_BUCKETS`] has held one); [`Partition::main_buckets`] when none
    /// does. A walk of the keyspace passes the rest unread.
    pub fn next_occupied(&self, from: usize) -> usize {
        self.shared.index.next_marked(from, self.main_buckets())
    }

    /// Main index buckets in use: [`Partition::dump`] walks `0..main_buckets()`.
    pub fn main_buckets(&self) -> usize {
        self.shape.buckets()
    }

    /// Lists, without touching them, the items that main buckets `buckets` (and in store mode
    /// the spare buckets chained to them) point to and that still answer at `now`: every
    /// key a get would find there, once. For `lru_crawler metadump`, a range at a time.
    pub fn dump(&self, buckets: std::ops::Range<usize>, now: Now, mut visit: impl FnMut(&Dumped<'_>)) {
        let mut key = Vec::new();
        for bucket in buckets.start..buckets.end.min(self.main_buckets()) {
            let mut at = bucket;
            loop {
                let words = self.shared.index.bucket(at);
                for word in &words[1..] {
                    let slot = Slot(word.load(Relaxed));
                    if slot.is_empty()
                        || slot.is_link()
                        || Self::is_flash_slot(slot)
                        || !self.geometry.is_live(slot.offset(), self.heads())
                    {
                        continue;
                    }
                    let header = self.shared.log.header(slot.offset());
                    if self.shared.is_gone(&header, now) {
                        continue;
                    }
                    key.clear();
                    self.shared.log.read_bytes(slot.offset(), header.key_start(), header.key_len(), &mut key);
                    visit(&Dumped {
                        key: &key,
                        value_len: header.word1.value_len(),
                        expiry: header.ext.expiry(),
                        last_access_secs: header.word1.last_access(),
                        cas: self.shared.cas_unique(header.word0.cas_seq()),
                        fetched: header.word0.has(BIT_FETCHED),
                        flags: header.ext.flags(),
                    });
                }
                // Only store mode chains buckets.
                let last = Slot(words[BUCKET_WORDS - 1].load(Relaxed));
                if !last.is_link() {
                    break;
                }
                at = last.offset() as usize;
            }
        }
    }

    /// Checks the structure's invariants (for tests and fuzzers); panics when one fails.
    pub fn check_invariants(&self) {
        if let Some(store) = &self.store {
            return self.check_store_invariants(store);
        }
        assert!(self.tail - self.head <= self.geometry.lap_bytes, "live window exceeds the log");
        assert_eq!(self.shared.head.load(Relaxed), self.head, "published head lags");
        let (mut items, mut bytes, mut at) = (0u64, 0u64, self.head);
        while at < self.tail {
            if self.shared.log.is_padding(at) {
                at += self.geometry.to_lap_end(at);
                continue;
            }
            let header = self.shared.log.header(at);
            assert!(self.shared.log.fits(at, header.capacity()), "item straddles the end");
            if !header.word0.has(BIT_DEAD) {
                items += 1;
                bytes += header.capacity() as u64;
            }
            at += header.capacity() as u64;
        }
        assert_eq!(at, self.tail, "items do not tile the live window");
        if self.has_small_ring() {
            assert!(
                self.small.tail - self.small.head <= self.geometry.small_lap,
                "small ring exceeds its memory"
            );
            assert_eq!(self.shared.small_head.load(Relaxed), self.small.head, "published small head lags");
            for (offset, header) in self.small_records() {
                assert!(self.shared.log.fits(offset, header.capacity()), "small item straddles the end");
                if !header.word0.has(BIT_DEAD) {
                    items += 1;
                    bytes += header.capacity() as u64;
                }
            }
        }
        assert_eq!((items, bytes), (self.stats.items, self.stats.bytes), "item accounting drifted");
        for bucket in 0..self.shape.buckets() {
            let words = self.shared.index.bucket(bucket);
            assert_eq!(words[0].load(Relaxed) & 1, 0, "bucket left mid-change");
            for word in &words[1..] {
                let slot = Slot(word.load(Relaxed));
                if !slot.is_empty()
                    && !Self::is_flash_slot(slot)
                    && self.geometry.is_live(slot.offset(), self.heads())
                {
                    let header = self.shared.log.header(slot.offset());
                    assert!(!header.word0.has(BIT_DEAD), "a slot points to a dead item");
                }
            }
        }
    }
}

/// Buckets one write may split while the index grows: a few hundred nanoseconds at most, and
/// enough that an index whose items arrive one per write outgrows them (each split adds 15
/// slots).
const SPLITS_PER_WRITE: u32 = 4;

/// Items the clock policy may keep at the head for one write: past it the head is evicted
/// whatever was read, so a log of items all read (each kept, then kept again with one read less)
/// never makes one write copy the whole log. A run of read items at the head loses one in 65
/// each time the head passes it (a hot set written together: 486 of 500 kept through a scan of
/// three laps, where 16 kept 446).
const KEEPS_PER_RESERVE: u32 = 64;

/// The most a never-read item's size earns it another lap: 960 in 1024 (15/16).
const SMALL_KEEP_MAX: u64 = 960;

/// Bytes the clock policy may copy in keeps for one write (large items: a few keeps).
const KEEP_BYTES_PER_RESERVE: u64 = 256 << 10;

/// The tag stored in a found item's slot.
fn found_tag(partition: &Partition, found: &Found) -> u16 {
    Slot(partition.shared.index.bucket(found.slot_bucket)[1 + found.slot].load(Relaxed)).tag()
}

/// Header fields of an item about to be written.
#[derive(Clone, Copy, Debug)]
struct NewItem {
    cas_seq: u64,
    bits: u8,
    flags: u32,
    expiry: Expiry,
    last_access: u32,
}

impl NewItem {
    /// Its flags and expiry as the log keeps them.
    #[inline(always)]
    fn ext(&self) -> Ext {
        Ext::new(self.flags, self.expiry)
    }

    /// A new version of an item that keeps its flags and expiry (append, prepend, incr, decr).
    fn keeping_flags_and_expiry(header: &Header, now: Now) -> NewItem {
        NewItem {
            cas_seq: 0,
            bits: 0,
            flags: header.ext.flags(),
            expiry: header.ext.expiry(),
            last_access: now.secs(),
        }
    }
}

/// memcached's item header (64-bit, CAS on), which its item size limit counts; the parser's
/// `qs_proto::MEMCACHED_ITEM_HEADER_BYTES` is the same figure for a store's own data block.
const MEMCACHED_ITEM_HEADER_BYTES: usize = 56;

/// Decimal text of `value` in `buffer`.
fn format_u64(mut value: u64, buffer: &mut [u8; 24]) -> &[u8] {
    let mut at = buffer.len();
    loop {
        at -= 1;
        buffer[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &buffer[at..];
        }
    }
}

#[cfg(test)]
mod tests;
