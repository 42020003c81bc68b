//! One partition: a circular log and its lossy index, owned by one thread, with every memcached
//! operation on items. Readers on other threads (CREW) go through [`crate::Reader`].
//!
//! Every change to a bucket or to an item reachable from it is bracketed by the bucket's version
//! (odd while changing) in CREW mode; EREW skips the brackets. The head only moves forward, and
//! it is published (with a release fence) before the memory it frees is written again.

use crate::arena::{Arena, ArenaStats};
use crate::command::{Command, MetaGet, Outcome, Request, StoreMode};
use crate::config::{Access, Config, Eviction};
use crate::index::{Index, Shape, Slot, BUCKET_WORDS, SLOTS_PER_BUCKET};
use crate::item::{
    self, parse_counter, Expiry, Ext, Word0, Word1, BIT_DEAD, BIT_EXT, BIT_FETCHED, BIT_STALE, BIT_WIN_SENT,
    KEY_BYTES_MAX, SLACK_WORDS_MAX, VALUE_BYTES_MAX,
};
use crate::keyhash::KeyHash;
use crate::log::{Header, Heads, Log, LogGeometry};
use crate::region::PageKind;
use crate::stats::PartitionStats;
use crate::sync::{fence, Arc, AtomicU32, AtomicU64};
use std::cell::Cell;

#[path = "partition_flash.rs"]
mod flash_tier;
#[path = "partition_small.rs"]
mod small_ring;
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
    pub(crate) fn is_flushed(&self, header: &Header, now_secs: u32) -> bool {
        let oldest_live = self.oldest_live.load(Relaxed);
        if oldest_live == 0 || oldest_live > now_secs {
            return false;
        }
        let oldest_cas_seq = self.oldest_cas_seq.load(Relaxed);
        header.word1.last_access() <= oldest_live
            || (oldest_cas_seq != 0 && header.word0.cas_seq() < oldest_cas_seq)
    }

    /// Whether the item with this header no longer answers.
    #[inline(always)]
    pub(crate) fn is_gone(&self, header: &Header, now_secs: u32) -> bool {
        header.ext.expiry().is_expired(now_secs) || self.is_flushed(header, now_secs)
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
    /// S3-FIFO's small ring ([`Log::with_small_ring`]): its head and tail, as `head` and
    /// `tail` are the main ring's (both 0 without one).
    small_head: u64,
    small_tail: u64,
    /// Whether the small ring is in use (it exists, and `cache_memlimit` left room for it).
    small_on: bool,
    /// Bytes the main ring has never held: its size at the start, what it grows by later,
    /// less what has been appended to it since. While there are any, the small ring copies its
    /// unread items on instead of dropping them.
    main_free: u64,
    /// S3-FIFO's ghost: fingerprints of keys the small ring evicted unread, one per entry in
    /// the entry their hash picks (empty without a small ring). A key found here when it is
    /// written again enters the main ring directly.
    ghost: Box<[u32]>,
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
    /// The latest `now_secs` seen, used to tell expired from live items passed by the head.
    clock_secs: u32,
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
    partition_bits: u32,
    /// `-o ext_path`: where items leaving the DRAM head go ([`flash_tier`]).
    flash: Option<Box<flash_tier::FlashTier>>,
    /// CAS sequences below this were handed out before the last restart or may have been; the
    /// state page keeps it a step ahead of `next_cas_seq` (`u64::MAX` in memory only).
    cas_mark: u64,
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

/// What store mode keeps besides the arena memory and the index.
struct StoreState {
    arena: Arena,
    /// Spare buckets not in any chain.
    spare_free: Vec<usize>,
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
            partition.ghost = small_ring::empty_ghost(shares.ghost);
            partition.small_on = true;
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
            partition_index: config.partition_index,
        };
        let mut partition = Partition {
            shared: Arc::new(shared),
            head: 0,
            tail: 0,
            small_head: 0,
            small_tail: 0,
            small_on: false,
            main_free: 0,
            ghost: Box::default(),
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
            clock_secs: 0,
            store,
            hints: (0..HINTS).map(|_| Cell::new(0)).collect(),
            evicted: None,
            persist: None,
            crash_flash_slots: Vec::new(),
            partition_bits: config.partition_bits,
            flash: None,
            cas_mark: u64::MAX,
        };
        partition.main_free = partition.limit_bytes;
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
            let key_len = header.word0.key_len();
            let capacity = header.capacity() as u64;
            let sane = key_len > 0
                && key_len <= KEY_BYTES_MAX
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
            if hash.partition(self.partition_bits) != usize::from(self.shared.partition_index) {
                recovered.cut_bytes = window.tail - at;
                break;
            }
            self.tail = at + capacity;
            at += capacity;
            if header.word0.has(BIT_DEAD) {
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

    /// The value length of `key`'s item if it answers at `now_secs`, looked up without
    /// touching it or counting anything (memcached logs this lookup before a store).
    pub fn peek(&self, hash: KeyHash, key: &[u8], now_secs: u32) -> Option<usize> {
        let found = self.find(hash, key)?;
        (!self.shared.is_gone(&found.header, now_secs)).then(|| found.header.word1.value_len())
    }

    /// As [`Partition::peek`], with the item's CAS: a look that changes nothing (no fetch
    /// mark, no win token, no LRU bump).
    pub fn peek_cas(&self, hash: KeyHash, key: &[u8], now_secs: u32) -> Option<(usize, u64)> {
        let found = self.find(hash, key)?;
        (!self.shared.is_gone(&found.header, now_secs))
            .then(|| (found.header.word1.value_len(), self.shared.cas_unique(found.header.word0.cas_seq())))
    }

    fn note_eviction(&mut self, offset: u64, header: &Header) {
        let Some(evicted) = self.evicted.as_mut() else { return };
        let mut key = Vec::new();
        self.shared.log.read_bytes(offset, header.key_start(), header.word0.key_len(), &mut key);
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

    /// Whether this partition is in store mode.
    pub fn is_store_mode(&self) -> bool {
        self.store.is_some()
    }

    /// Store mode's memory statistics (walks the free lists: for `stats`, not the data path).
    pub fn arena_stats(&self) -> Option<ArenaStats> {
        self.store.as_ref().map(|store| store.arena.stats(self.shared.log.words()))
    }

    /// Store mode's free space by size, readable from any thread (`None` in cache mode).
    pub fn free_groups(&self) -> Option<std::sync::Arc<crate::arena::FreeGroups>> {
        self.store.as_ref().map(|store| store.arena.free_groups())
    }

    /// Store mode's spare buckets: (in use, in all).
    pub fn spare_buckets(&self) -> (usize, usize) {
        match &self.store {
            Some(store) => {
                let all = self.shared.index.spare_count();
                (all - store.spare_free.len(), all)
            }
            None => (0, 0),
        }
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
            None => (self.touched_bytes + self.small_tail.min(self.geometry.small_bytes)) as usize,
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
        self.set_small_ring(small);
        let shrinking = bytes < self.limit_bytes;
        self.main_free += bytes.saturating_sub(self.limit_bytes);
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

    /// Bytes of the log held at `now_secs` by items that no longer answer (expired or flushed)
    /// and wait for the head to pass them: what a reclaim ahead of the head could give back.
    /// Walks the whole log (for simulations and tests, not the request path).
    pub fn gone_bytes(&self, now_secs: u32) -> u64 {
        if self.store.is_some() {
            return 0;
        }
        self.records()
            .chain(self.small_records())
            .filter(|(_, header)| !header.word0.has(BIT_DEAD) && self.shared.is_gone(header, now_secs))
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
        if self.shared.is_gone(header, self.clock_secs) {
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

    /// Main index buckets in use: [`Partition::dump`] walks `0..main_buckets()`.
    pub fn main_buckets(&self) -> usize {
        self.shape.buckets()
    }

    /// Lists, without touching them, the items that main buckets `buckets` (and in store mode
    /// the spare buckets chained to them) point to and that still answer at `now_secs`: every
    /// key a get would find there, once. For `lru_crawler metadump`, a range at a time.
    pub fn dump(&self, buckets: std::ops::Range<usize>, now_secs: u32, mut visit: impl FnMut(&Dumped<'_>)) {
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
                    if self.shared.is_gone(&header, now_secs) {
                        continue;
                    }
                    key.clear();
                    self.shared.log.read_bytes(
                        slot.offset(),
                        header.key_start(),
                        header.word0.key_len(),
                        &mut key,
                    );
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

    /// Runs one request. A hit's value is appended to `out`.
    #[inline]
    pub fn execute(&mut self, request: &Request<'_>, now_secs: u32, out: &mut Vec<u8>) -> Outcome {
        if request.key.is_empty() || request.key.len() > KEY_BYTES_MAX {
            return Outcome::BadKey;
        }
        let (hash, key) = (request.hash, request.key);
        self.clock_secs = now_secs;
        match request.command {
            // Nothing appended: no room to make.
            Command::Get | Command::Delete { .. } | Command::Invalidate { .. } => {}
            // No more than the write will take: a keep or eviction too many is an item lost.
            Command::Store { value, flags, expiry, .. } => self.keep_ahead(item::item_bytes(
                key.len(),
                value.len(),
                flags != 0 || expiry != Expiry::NEVER,
            )),
            _ => self.keep_ahead(item::item_bytes(key.len(), 0, false)),
        }
        let outcome = match request.command {
            Command::Get => self.get(hash, key, None, true, now_secs, out),
            Command::GetAndTouch { expiry } => self.get(hash, key, Some(expiry), true, now_secs, out),
            Command::Touch { expiry } => self.touch(hash, key, expiry, now_secs),
            Command::SetExpiry { expiry } => match self.lookup(hash, key, now_secs) {
                Lookup::Found(found) => {
                    self.set_expiry(found, expiry, now_secs);
                    Outcome::Touched
                }
                Lookup::Absent | Lookup::Gone { .. } => Outcome::NotFound,
            },
            Command::Store { mode, value, flags, expiry } => {
                self.store(hash, key, mode, value, flags, expiry, now_secs)
            }
            Command::Delete { cas } => self.delete(hash, key, cas, now_secs),
            Command::Arith { delta, decrement, cas } => {
                self.arith(hash, key, delta, decrement, cas, now_secs)
            }
            Command::Invalidate { cas } => self.invalidate(hash, key, cas, now_secs),
            Command::MetaGet(options) => self.meta_get(hash, key, options, now_secs, out),
        };
        self.scan_if_due();
        self.settle_if_pending();
        outcome
    }

    /// Runs a batch through the prefetch pipeline: prefetch every bucket, then every candidate
    /// item, then execute in order. Results are pushed to `outcomes` in request order.
    pub fn execute_batch(
        &mut self,
        requests: &[Request<'_>],
        now_secs: u32,
        prefetch: bool,
        out: &mut Vec<u8>,
        outcomes: &mut Vec<Outcome>,
    ) {
        if prefetch {
            self.prefetch_buckets(requests);
            self.prefetch_items(requests);
        }
        for request in requests {
            outcomes.push(self.run(request, now_secs, out));
        }
    }

    /// Runs one request as [`Partition::execute_batch`] does (lean paths for plain GET and
    /// SET). For callers that build their own pipeline over several partitions with
    /// [`Partition::prefetch_bucket`] and [`Partition::prefetch_item`].
    #[inline]
    pub fn run(&mut self, request: &Request<'_>, now_secs: u32, out: &mut Vec<u8>) -> Outcome {
        let outcome = match request.command {
            Command::Get => self.plain_get(request, now_secs, out),
            Command::Store { mode: StoreMode::Set, value, flags, expiry } => {
                self.plain_set(request, value, flags, expiry, now_secs, out)
            }
            _ => return self.execute(request, now_secs, out),
        };
        self.settle_if_pending();
        outcome
    }

    /// Re-points the slots of items this command demoted to flash, if any.
    #[inline(always)]
    fn settle_if_pending(&mut self) {
        if self.flash.is_some() {
            self.settle_flash();
        }
    }

    /// Pipeline stage 1 for one key: start loading its bucket.
    #[inline(always)]
    pub fn prefetch_bucket(&self, hash: KeyHash) {
        self.shared.index.prefetch(self.shape.bucket(hash));
    }

    /// Pipeline stage 2 for one key: start loading its candidate item (after stage 1 had time
    /// to bring the bucket in).
    #[inline(always)]
    pub fn prefetch_item(&self, hash: KeyHash) {
        let bucket = self.shared.index.bucket(self.shape.bucket(hash));
        let tag = hash.tag();
        for (slot_index, word) in bucket[1..].iter().enumerate() {
            let slot = Slot(word.load(Relaxed));
            if slot.tag() == tag && self.geometry.is_live(slot.offset(), self.heads()) {
                self.shared.log.prefetch(slot.offset());
                self.hint(hash).set(hash.0 & !HINT_SLOT_MASK | slot_index as u64);
                break;
            }
        }
    }

    /// The hint-table entry for `hash`.
    #[inline(always)]
    fn hint(&self, hash: KeyHash) -> &Cell<u64> {
        &self.hints[hash.bucket(HINTS - 1)]
    }

    /// The batch's common case, kept lean: a plain GET of a well-formed key. Anything unusual
    /// (a bad key, an expired or flushed item to reclaim) goes through [`Partition::execute`].
    #[inline(always)]
    fn plain_get(&mut self, request: &Request<'_>, now_secs: u32, out: &mut Vec<u8>) -> Outcome {
        if request.key.is_empty() || request.key.len() > KEY_BYTES_MAX {
            return self.execute(request, now_secs, out);
        }
        let Some(found) = self.find(request.hash, request.key) else {
            self.stats.gets += 1;
            self.count_get_miss(false);
            return Outcome::Miss;
        };
        if self.shared.is_gone(&found.header, now_secs) {
            return self.execute(request, now_secs, out);
        }
        self.stats.gets += 1;
        self.stats.get_hits += 1;
        self.answer_hit(found, true, now_secs, out)
    }

    /// The other common case: a plain SET of a well-formed key whose old version, if any, still
    /// answers. Anything unusual goes through [`Partition::execute`].
    #[inline(always)]
    fn plain_set(
        &mut self,
        request: &Request<'_>,
        value: &[u8],
        flags: u32,
        expiry: Expiry,
        now_secs: u32,
        out: &mut Vec<u8>,
    ) -> Outcome {
        if request.key.is_empty() || request.key.len() > KEY_BYTES_MAX {
            return self.execute(request, now_secs, out);
        }
        self.clock_secs = now_secs;
        self.keep_ahead(item::item_bytes(
            request.key.len(),
            value.len(),
            flags != 0 || expiry != Expiry::NEVER,
        ));
        let existing = self.find(request.hash, request.key);
        if existing.is_some_and(|found| self.shared.is_gone(&found.header, now_secs)) {
            return self.execute(request, now_secs, out);
        }
        self.clock_secs = now_secs;
        self.stats.sets += 1;
        let new_item = NewItem { cas_seq: 0, bits: 0, flags, expiry, last_access: now_secs };
        let outcome = self.put(request.hash, request.key, value, new_item, existing);
        self.scan_if_due();
        outcome
    }

    /// Pipeline stage 1: start loading both lines of every request's bucket.
    #[inline(always)]
    fn prefetch_buckets(&self, requests: &[Request<'_>]) {
        for request in requests {
            self.prefetch_bucket(request.hash);
        }
    }

    /// Pipeline stage 2: start loading the first line of each request's candidate item.
    #[inline(always)]
    fn prefetch_items(&self, requests: &[Request<'_>]) {
        for request in requests {
            self.prefetch_item(request.hash);
        }
    }

    /// flush_all: items stored or accessed before the flush time stop answering, from
    /// `now_secs + delay_secs` on (memcached's rules, including its CAS cut-off for an
    /// immediate flush). Without `by_cas` (memcached's -C) the cut-off is the second alone:
    /// items stored in the flush's own second are flushed too, as memcached's are.
    pub fn flush_all(&mut self, now_secs: u32, delay_secs: u32, by_cas: bool) {
        let flush_at = if delay_secs > 0 { now_secs.saturating_add(delay_secs) } else { now_secs };
        if delay_secs == 0 {
            // Nothing in the main ring answers now: it fills again as a new one does.
            self.main_free = self.limit_bytes;
        }
        if !by_cas {
            self.shared.oldest_live.store(flush_at.max(1), Relaxed);
        } else {
            let oldest_live = flush_at.saturating_sub(1).max(1);
            self.shared.oldest_live.store(oldest_live, Relaxed);
            if oldest_live <= now_secs {
                self.shared.oldest_cas_seq.store(self.next_cas_seq, Relaxed);
            }
        }
        if let Some(state) = &self.persist {
            state.set_flush(self.shared.oldest_live.load(Relaxed), self.shared.oldest_cas_seq.load(Relaxed));
        }
    }

    /// Scans up to `buckets` buckets for dangling slots (housekeeping; also done automatically,
    /// at the rate the offset width needs, as the tail advances).
    pub fn scan_buckets(&mut self, buckets: usize) {
        for _ in 0..buckets.min(self.shape.buckets()) {
            if self.store.is_some() {
                self.reclaim_step();
            } else {
                self.scan_one_bucket();
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
                self.small_tail - self.small_head <= self.geometry.small_lap,
                "small ring exceeds its memory"
            );
            assert_eq!(self.shared.small_head.load(Relaxed), self.small_head, "published small head lags");
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

    /// Store mode: the arena's own invariants, every allocated block referenced by exactly one
    /// slot, every slot pointing at an allocated block, chains and spare counts consistent, and
    /// the item counts right.
    fn check_store_invariants(&self, store: &StoreState) {
        let words = self.shared.log.words();
        let walk = store.arena.check(words);
        let allocated: std::collections::HashSet<u64> = walk.allocated.iter().copied().collect();
        let mut referenced = std::collections::HashSet::new();
        let mut chained = 0;
        for bucket in 0..self.shape.buckets() {
            assert_eq!(self.shared.index.bucket(bucket)[0].load(Relaxed) & 1, 0, "bucket left mid-change");
            let mut at = bucket;
            loop {
                let slots = &self.shared.index.bucket(at)[1..];
                for word in slots {
                    let slot = Slot(word.load(Relaxed));
                    if slot.is_empty() || slot.is_link() {
                        continue;
                    }
                    assert!(allocated.contains(&slot.offset()), "slot points at no allocated block");
                    assert!(referenced.insert(slot.offset()), "two slots point at one item");
                    let header = self.shared.log.header(slot.offset());
                    assert!(!header.word0.has(BIT_DEAD), "a slot points to a dead item");
                    assert_eq!(slot.tag(), KeyHash::of(&self.key_of(slot.offset(), &header)).tag(), "tag");
                }
                let last = Slot(slots[SLOTS_PER_BUCKET - 1].load(Relaxed));
                if !last.is_link() {
                    break;
                }
                chained += 1;
                at = last.offset() as usize;
                assert!(at >= self.shape.buckets(), "a link to a main bucket");
            }
        }
        assert_eq!(referenced.len(), allocated.len(), "allocated blocks no slot refers to (leaked)");
        assert_eq!(chained + store.spare_free.len(), self.shared.index.spare_count(), "spare buckets lost");
        assert_eq!(self.stats.items, allocated.len() as u64, "item count drifted");
        assert_eq!(self.stats.bytes, walk.allocated_bytes, "byte count drifted");
    }

    fn key_of(&self, offset: u64, header: &Header) -> Vec<u8> {
        let mut key = Vec::new();
        self.shared.log.read_bytes(offset, header.key_start(), header.word0.key_len(), &mut key);
        key
    }

    // ---- lookups ---------------------------------------------------------------------------

    #[inline(always)]
    fn find(&self, hash: KeyHash, key: &[u8]) -> Option<Found> {
        let bucket = self.shape.bucket(hash);
        let tag = hash.tag();
        // A key has at most one live slot, so a hinted slot that holds it is the one a scan
        // would find.
        let hint = self.hint(hash).get();
        if hint & !HINT_SLOT_MASK == hash.0 & !HINT_SLOT_MASK {
            let slot_index = (hint & HINT_SLOT_MASK) as usize;
            if let Some(word) = self.shared.index.bucket(bucket)[1..].get(slot_index) {
                if let Some(found) =
                    self.probe(bucket, bucket, slot_index, Slot(word.load(Relaxed)), tag, key)
                {
                    return Some(found);
                }
            }
        }
        let mut slot_bucket = bucket;
        loop {
            let words = self.shared.index.bucket(slot_bucket);
            for (slot_index, word) in words[1..].iter().enumerate() {
                let slot = Slot(word.load(Relaxed));
                if let Some(found) = self.probe(bucket, slot_bucket, slot_index, slot, tag, key) {
                    return Some(found);
                }
            }
            // Only store mode chains buckets; a cache-mode slot is never a link.
            let last = Slot(words[BUCKET_WORDS - 1].load(Relaxed));
            if !last.is_link() {
                return None;
            }
            slot_bucket = last.offset() as usize;
        }
    }

    /// Whether `slot` (slot `slot_index` of `slot_bucket`, in `bucket`'s chain) holds `key`.
    #[inline(always)]
    fn probe(
        &self,
        bucket: usize,
        slot_bucket: usize,
        slot_index: usize,
        slot: Slot,
        tag: u16,
        key: &[u8],
    ) -> Option<Found> {
        if slot.tag() != tag || !self.geometry.is_live(slot.offset(), self.heads()) {
            return None;
        }
        let offset = slot.offset();
        let header = self.shared.log.header(offset);
        (header.word0.key_len() == key.len() && self.shared.log.bytes_equal(offset, header.key_start(), key))
            .then_some(Found { bucket, slot_bucket, slot: slot_index, offset, header })
    }

    /// Finds a key that still answers; an expired or flushed one is removed on the way.
    #[inline(always)]
    fn lookup(&mut self, hash: KeyHash, key: &[u8], now_secs: u32) -> Lookup {
        let Some(found) = self.find(hash, key) else { return Lookup::Absent };
        if !self.shared.is_gone(&found.header, now_secs) {
            return Lookup::Found(found);
        }
        let expired = found.header.ext.expiry().is_expired(now_secs);
        let version = self.begin_write(found.bucket);
        self.unlink(&found);
        self.retire(found.offset, &found.header);
        self.count_reclaimed(&found.header);
        self.end_write(found.bucket, version);
        Lookup::Gone { expired }
    }

    // ---- operations ------------------------------------------------------------------------

    #[inline(always)]
    fn get(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        touch: Option<Expiry>,
        update: bool,
        now_secs: u32,
        out: &mut Vec<u8>,
    ) -> Outcome {
        self.stats.gets += 1;
        let mut found = match self.lookup(hash, key, now_secs) {
            Lookup::Found(found) => found,
            Lookup::Absent => {
                self.count_get_miss(touch.is_some());
                return Outcome::Miss;
            }
            Lookup::Gone { expired } => {
                if expired {
                    self.stats.get_expired += 1;
                } else {
                    self.stats.get_flushed += 1;
                }
                self.count_get_miss(touch.is_some());
                return Outcome::Miss;
            }
        };
        self.stats.get_hits += 1;
        if let Some(expiry) = touch {
            self.stats.touch_hits += 1;
            let before = found.header.ext.expiry();
            found = self.set_expiry(found, expiry, now_secs);
            let mut outcome = self.answer_hit(found, update, now_secs, out);
            if let Outcome::Hit(hit) = &mut outcome {
                hit.expiry_before = before;
            }
            return outcome;
        }
        self.answer_hit(found, update, now_secs, out)
    }

    /// Copies a found item's value to `out`, does the read's bookkeeping unless `update` is
    /// false (meta `u`: not marked fetched, last access and LRU position kept), and builds the hit.
    #[inline(always)]
    fn answer_hit(&mut self, found: Found, update: bool, now_secs: u32, out: &mut Vec<u8>) -> Outcome {
        let header = found.header;
        let value_start = out.len();
        let value_len = header.word1.value_len();
        self.shared.log.read_bytes(found.offset, header.key_start() + header.word0.key_len(), value_len, out);
        let hit = header.hit(value_start, self.shared.cas_unique(header.word0.cas_seq()));
        if update {
            self.after_read(&found, now_secs);
        }
        Outcome::Hit(hit)
    }

    fn count_get_miss(&mut self, touch: bool) {
        self.stats.get_misses += 1;
        if touch {
            self.stats.touch_misses += 1;
        }
    }

    /// Bookkeeping after a hit: fetched bit, last access, and the eviction policy's re-append.
    #[inline(always)]
    fn after_read(&mut self, found: &Found, now_secs: u32) {
        let header = found.header;
        let age = self.age(found.offset);
        let reappend = match self.eviction {
            Eviction::Fifo | Eviction::Clock | Eviction::S3Fifo => false,
            Eviction::Lru => age > header.capacity() as u64,
            Eviction::ApproxLru => age > self.limit_bytes / 2,
        };
        if reappend {
            self.stats.reappends += 1;
            self.move_to_tail(found, header.word0.bits() | BIT_FETCHED, now_secs);
            return;
        }
        let fetched = header.word0.has(BIT_FETCHED);
        let accessed = header.word1.last_access() == now_secs;
        let counted = !self.eviction.counts_reads() || header.word0.freq() == item::FREQ_MAX;
        if fetched && accessed && counted {
            return;
        }
        if !counted {
            // Written whole like the fetched bit (below), once per read until the count is full.
            let word0 = header.word0.with_bit(BIT_FETCHED).with_freq(header.word0.freq() + 1);
            self.shared.log.set_word0(found.offset, word0);
            if !accessed {
                self.shared.log.set_word1(found.offset, header.word1.with_last_access(now_secs));
            }
            return;
        }
        // No version bracket: each of these is one word written whole, changing only metadata
        // (the fetched bit, the last access), so an optimistic reader sees either word as it was
        // or as it is now, and any mix of the two is a header some order of the accesses could
        // give. Leaving the bucket's version alone keeps its line clean: a read dirties only the
        // item's line, and only the first time in a second.
        if !fetched {
            self.shared.log.set_word0(found.offset, header.word0.with_bit(BIT_FETCHED));
        }
        if !accessed {
            self.shared.log.set_word1(found.offset, header.word1.with_last_access(now_secs));
        }
    }

    /// Copies an item to the tail with header bits `bits` and last access `last_access`,
    /// keeping its CAS, flags and expiry (LRU's move on a read, clock's keep at the head). The
    /// old copy is superseded first, so making room for the new one passes it as it would any
    /// superseded item.
    fn move_to_tail(&mut self, found: &Found, bits: u8, last_access: u32) {
        let header = found.header;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let key_len = header.word0.key_len();
        self.shared.log.read_bytes(
            found.offset,
            header.key_start(),
            key_len + header.word1.value_len(),
            &mut scratch,
        );
        let (key, value) = scratch.split_at(key_len);
        let new_header = NewItem {
            cas_seq: header.word0.cas_seq(),
            bits: bits & !BIT_EXT,
            flags: header.ext.flags(),
            expiry: header.ext.expiry(),
            last_access,
        };
        let version = self.begin_write(found.bucket);
        self.retire(found.offset, &header);
        let offset = self.append(Ring::Main, key, value, new_header);
        self.set_slot(found.slot_bucket, found.slot, Slot::new(found_tag(self, found), offset));
        self.end_write(found.bucket, version);
        self.scratch = scratch;
    }

    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        mode: StoreMode,
        value: &[u8],
        flags: u32,
        expiry: Expiry,
        now_secs: u32,
    ) -> Outcome {
        self.stats.sets += 1;
        let existing = match self.lookup(hash, key, now_secs) {
            Lookup::Found(found) => Some(found),
            Lookup::Absent | Lookup::Gone { .. } => None,
        };
        let mut new_item = NewItem { cas_seq: 0, bits: 0, flags, expiry, last_access: now_secs };
        match (mode, existing) {
            (StoreMode::Add, Some(_)) => return Outcome::NotStored,
            (
                StoreMode::Replace
                | StoreMode::Append
                | StoreMode::Prepend
                | StoreMode::AppendCas(_)
                | StoreMode::PrependCas(_),
                None,
            ) => return Outcome::NotStored,
            (StoreMode::Cas(_) | StoreMode::CasOrStale(_), None) => {
                self.stats.cas_misses += 1;
                return Outcome::NotFound;
            }
            (StoreMode::Cas(cas), Some(found)) => {
                if self.shared.cas_unique(found.header.word0.cas_seq()) != cas {
                    self.stats.cas_badval += 1;
                    return Outcome::Exists;
                }
                self.stats.cas_hits += 1;
            }
            (StoreMode::CasOrStale(cas), Some(found)) => {
                let current = self.shared.cas_unique(found.header.word0.cas_seq());
                if cas > current {
                    self.stats.cas_badval += 1;
                    return Outcome::Exists;
                }
                if cas < current {
                    // An older version's write: kept, but marked stale for the next reader.
                    new_item.bits = BIT_STALE | (found.header.word0.bits() & BIT_WIN_SENT);
                    new_item.expiry = found.header.ext.expiry();
                }
                self.stats.cas_hits += 1;
            }
            (StoreMode::AppendCas(cas) | StoreMode::PrependCas(cas), Some(found))
                if self.shared.cas_unique(found.header.word0.cas_seq()) != cas =>
            {
                return Outcome::Exists;
            }
            _ => {}
        }
        if let Some(found) = existing {
            match mode {
                StoreMode::Append | StoreMode::AppendCas(_) => {
                    return self.concatenate(hash, key, &found, value, true, now_secs);
                }
                StoreMode::Prepend | StoreMode::PrependCas(_) => {
                    return self.concatenate(hash, key, &found, value, false, now_secs);
                }
                _ => {}
            }
        }
        self.put(hash, key, value, new_item, existing)
    }

    fn concatenate(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        found: &Found,
        data: &[u8],
        append: bool,
        now_secs: u32,
    ) -> Outcome {
        let header = found.header;
        let old_len = header.word1.value_len();
        // memcached sizes the joined item as it sizes any (its header, the key and a
        // NUL, the data and \r\n, 4 bytes for nonzero client flags) and answers NOT_STORED
        // when that outgrows the item size limit.
        let flags_bytes = if header.ext.flags() != 0 { 4 } else { 0 };
        if MEMCACHED_ITEM_HEADER_BYTES + key.len() + 1 + old_len + data.len() + 2 + flags_bytes
            > self.item_bytes_max
        {
            return Outcome::NotStored;
        }
        if old_len + data.len() > VALUE_BYTES_MAX {
            self.stats.too_large += 1;
            return Outcome::TooLarge;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        if !append {
            scratch.extend_from_slice(data);
        }
        let value_at = header.key_start() + header.word0.key_len();
        self.shared.log.read_bytes(found.offset, value_at, old_len, &mut scratch);
        if append {
            scratch.extend_from_slice(data);
        }
        let new_item = NewItem::keeping_flags_and_expiry(&header, now_secs);
        let outcome = self.put(hash, key, &scratch, new_item, Some(*found));
        self.scratch = scratch;
        outcome
    }

    /// Writes a new version of `key`: in place when it fits the existing item's space, else
    /// appended at the tail with the old version retired. Inlined: it is most of a SET, and
    /// a call's register saves and restores were a tenth of one (callgrind).
    #[inline(always)]
    fn put(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        value: &[u8],
        mut new_item: NewItem,
        existing: Option<Found>,
    ) -> Outcome {
        if self.store.is_some() {
            return self.put_store(hash, key, value, new_item, existing);
        }
        let ext = new_item.flags != 0 || new_item.expiry != Expiry::NEVER;
        let size = item::item_bytes(key.len(), value.len(), ext);
        if value.len() > VALUE_BYTES_MAX || size > self.item_bytes_max {
            self.stats.too_large += 1;
            return Outcome::TooLarge;
        }
        new_item.cas_seq = self.take_cas_seq();
        self.stats.total_items += 1;
        let cas = self.shared.cas_unique(new_item.cas_seq);
        if let Some(found) = existing.as_ref().filter(|_| self.eviction.counts_reads()) {
            // A key written again is as popular as it was: the clock's count carries over.
            new_item.bits |= found.header.word0.bits() & item::FREQ_BITS;
        }
        if let Some(found) = existing {
            let capacity = found.header.capacity();
            // Not in a memory file: a value rewritten in place could be found half written
            // after a crash, where an appended one is outside the window until whole.
            if size <= capacity && (capacity - size) / 8 <= SLACK_WORDS_MAX && self.persist.is_none() {
                let version = self.begin_write(found.bucket);
                let key_in_place = found.header.word0.has(BIT_EXT) == ext;
                self.write_item(found.offset, key, value, new_item, (capacity - size) / 8, key_in_place);
                self.end_write(found.bucket, version);
                return Outcome::Stored { cas };
            }
            let version = self.begin_write(found.bucket);
            self.retire(found.offset, &found.header);
            let ring = self.ring_for_existing(found.offset, size);
            let offset = self.append(ring, key, value, new_item);
            self.set_slot(found.slot_bucket, found.slot, Slot::new(hash.tag(), offset));
            self.end_write(found.bucket, version);
            return Outcome::Stored { cas };
        }
        let bucket = self.shape.bucket(hash);
        let version = self.begin_write(bucket);
        if self.flash.is_some() {
            self.supersede_flash(hash);
        }
        let ring = self.ring_for_new(hash, size);
        let offset = self.append(ring, key, value, new_item);
        self.link(bucket, Slot::new(hash.tag(), offset));
        self.end_write(bucket, version);
        Outcome::Stored { cas }
    }

    /// Store mode's [`Partition::put`]: in place when the new item fits the old one's block;
    /// otherwise a new block is allocated first and the old one freed after, so a refused
    /// write leaves the old version. Items always carry the flags/expiry word, so touch never
    /// needs to move them. Out of arena space or spare buckets: [`Outcome::OutOfMemory`].
    fn put_store(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        value: &[u8],
        mut new_item: NewItem,
        existing: Option<Found>,
    ) -> Outcome {
        let size = item::item_bytes(key.len(), value.len(), true);
        if value.len() > VALUE_BYTES_MAX || size > self.item_bytes_max {
            self.stats.too_large += 1;
            return Outcome::TooLarge;
        }
        let store = self.store.as_mut().expect("store mode");
        if let Some(found) = existing {
            if size <= store.arena.item_capacity(self.shared.log.words(), found.offset) {
                new_item.cas_seq = self.take_cas_seq();
                self.stats.total_items += 1;
                let version = self.begin_write(found.bucket);
                self.write_item(found.offset, key, value, new_item, 0, true);
                self.end_write(found.bucket, version);
                return Outcome::Stored { cas: self.shared.cas_unique(new_item.cas_seq) };
            }
        }
        let Some(offset) = store.arena.alloc(self.shared.log.words(), size) else {
            self.stats.refused += 1;
            return Outcome::OutOfMemory;
        };
        let block = store.arena.block_size(self.shared.log.words(), offset);
        new_item.cas_seq = self.take_cas_seq();
        let bucket = self.shape.bucket(hash);
        let version = self.begin_write(bucket);
        self.write_item(offset, key, value, new_item, 0, false);
        let slot = Slot::new(hash.tag(), offset);
        match existing {
            Some(found) => {
                self.set_slot(found.slot_bucket, found.slot, slot);
                self.retire(found.offset, &found.header);
            }
            None => {
                if !self.link_chained(bucket, slot) {
                    let store = self.store.as_mut().expect("store mode");
                    store.arena.free(self.shared.log.words(), offset);
                    self.end_write(bucket, version);
                    self.stats.refused += 1;
                    return Outcome::OutOfMemory;
                }
            }
        }
        self.end_write(bucket, version);
        self.stats.items += 1;
        self.stats.bytes += block;
        self.stats.total_items += 1;
        self.reclaim_step();
        Outcome::Stored { cas: self.shared.cas_unique(new_item.cas_seq) }
    }

    /// Store mode: puts a slot in the first empty slot of `bucket`'s chain, chaining a spare
    /// bucket when the chain is full. `false` when no spare bucket is left.
    fn link_chained(&mut self, bucket: usize, slot: Slot) -> bool {
        let index = &self.shared.index;
        let mut at = bucket;
        loop {
            let words = index.bucket(at);
            for word in &words[1..] {
                if word.load(Relaxed) == 0 {
                    word.store(slot.0, Relaxed);
                    return true;
                }
            }
            let last = Slot(words[BUCKET_WORDS - 1].load(Relaxed));
            if last.is_link() {
                at = last.offset() as usize;
                continue;
            }
            let Some(spare) = self.store.as_mut().and_then(|store| store.spare_free.pop()) else {
                return false;
            };
            // The last slot's item moves to the spare bucket and the link takes its place.
            let spare_words = index.bucket(spare);
            spare_words[1].store(last.0, Relaxed);
            spare_words[2].store(slot.0, Relaxed);
            words[BUCKET_WORDS - 1].store(Slot::link(spare).0, Relaxed);
            return true;
        }
    }

    /// Store mode's housekeeping step, one bucket chain per write: expired and flushed items
    /// are freed so their space is reused without anyone reading them.
    fn reclaim_step(&mut self) {
        let bucket = self.scan_cursor;
        self.scan_cursor = if self.scan_cursor + 1 < self.shape.buckets() { self.scan_cursor + 1 } else { 0 };
        self.reclaim_bucket(bucket);
    }

    fn reclaim_bucket(&mut self, bucket: usize) {
        let now_secs = self.clock_secs;
        loop {
            let Some(found) = self.first_gone(bucket, now_secs) else { return };
            let version = self.begin_write(bucket);
            self.unlink(&found);
            self.retire(found.offset, &found.header);
            self.count_reclaimed(&found.header);
            self.end_write(bucket, version);
        }
    }

    /// The first item of `bucket`'s chain that no longer answers.
    fn first_gone(&self, bucket: usize, now_secs: u32) -> Option<Found> {
        let mut slot_bucket = bucket;
        loop {
            let words = self.shared.index.bucket(slot_bucket);
            for (slot_index, word) in words[1..].iter().enumerate() {
                let slot = Slot(word.load(Relaxed));
                if slot.is_empty() || slot.is_link() {
                    continue;
                }
                let header = self.shared.log.header(slot.offset());
                if self.shared.is_gone(&header, now_secs) {
                    let offset = slot.offset();
                    return Some(Found { bucket, slot_bucket, slot: slot_index, offset, header });
                }
            }
            let last = Slot(words[BUCKET_WORDS - 1].load(Relaxed));
            if !last.is_link() {
                return None;
            }
            slot_bucket = last.offset() as usize;
        }
    }

    fn touch(&mut self, hash: KeyHash, key: &[u8], expiry: Expiry, now_secs: u32) -> Outcome {
        match self.lookup(hash, key, now_secs) {
            Lookup::Found(found) => {
                self.stats.touch_hits += 1;
                let found = self.set_expiry(found, expiry, now_secs);
                self.after_read(&found, now_secs);
                Outcome::Touched
            }
            Lookup::Absent | Lookup::Gone { .. } => {
                self.stats.touch_misses += 1;
                Outcome::NotFound
            }
        }
    }

    /// Gives an item a new expiry: in place when it has the extension word, else re-appended
    /// with one. Returns where the item is now.
    fn set_expiry(&mut self, found: Found, expiry: Expiry, now_secs: u32) -> Found {
        let header = found.header;
        if header.word0.has(BIT_EXT) {
            let version = self.begin_write(found.bucket);
            self.shared.log.set_ext(found.offset, Ext::new(header.ext.flags(), expiry));
            self.end_write(found.bucket, version);
            let header = Header { ext: Ext::new(header.ext.flags(), expiry), ..header };
            return Found { header, ..found };
        }
        if expiry == Expiry::NEVER {
            return found;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let key_len = header.word0.key_len();
        let data_len = key_len + header.word1.value_len();
        self.shared.log.read_bytes(found.offset, header.key_start(), data_len, &mut scratch);
        let (key, value) = scratch.split_at(key_len);
        let new_item = NewItem {
            cas_seq: header.word0.cas_seq(),
            bits: header.word0.bits(),
            flags: 0,
            expiry,
            last_access: now_secs,
        };
        let version = self.begin_write(found.bucket);
        let tag = found_tag(self, &found);
        self.retire(found.offset, &header);
        let ring = self.ring_for_existing(found.offset, item::item_bytes(key_len, value.len(), true));
        let offset = self.append(ring, key, value, new_item);
        self.set_slot(found.slot_bucket, found.slot, Slot::new(tag, offset));
        self.end_write(found.bucket, version);
        self.scratch = scratch;
        let header = self.shared.log.header(offset);
        Found { offset, header, ..found }
    }

    fn delete(&mut self, hash: KeyHash, key: &[u8], cas: u64, now_secs: u32) -> Outcome {
        let Lookup::Found(found) = self.lookup(hash, key, now_secs) else {
            self.stats.delete_misses += 1;
            return Outcome::NotFound;
        };
        if cas != 0 && self.shared.cas_unique(found.header.word0.cas_seq()) != cas {
            return Outcome::Exists;
        }
        self.stats.delete_hits += 1;
        let version = self.begin_write(found.bucket);
        self.unlink(&found);
        self.retire(found.offset, &found.header);
        self.end_write(found.bucket, version);
        Outcome::Deleted
    }

    fn arith(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        delta: u64,
        decrement: bool,
        cas: u64,
        now_secs: u32,
    ) -> Outcome {
        let Lookup::Found(found) = self.lookup(hash, key, now_secs) else {
            if decrement {
                self.stats.decr_misses += 1;
            } else {
                self.stats.incr_misses += 1;
            }
            return Outcome::NotFound;
        };
        let header = found.header;
        let old_len = header.word1.value_len();
        // memcached refuses an empty value as non-numeric before it compares the CAS.
        if old_len == 0 {
            return Outcome::NonNumeric;
        }
        if cas != 0 && self.shared.cas_unique(found.header.word0.cas_seq()) != cas {
            return Outcome::Exists;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let value_at = header.key_start() + header.word0.key_len();
        self.shared.log.read_bytes(found.offset, value_at, old_len, &mut scratch);
        let Some(number) = parse_counter(&scratch) else {
            self.scratch = scratch;
            return Outcome::NonNumeric;
        };
        if decrement {
            self.stats.decr_hits += 1;
        } else {
            self.stats.incr_hits += 1;
        }
        let value = if decrement { number.saturating_sub(delta) } else { number.wrapping_add(delta) };
        let mut digits = [0u8; 24];
        let text = format_u64(value, &mut digits);
        // memcached keeps the old length when the number is shorter, padding with spaces.
        scratch.clear();
        scratch.extend_from_slice(text);
        if text.len() < old_len {
            scratch.resize(old_len, b' ');
        }
        let mut new_item = NewItem::keeping_flags_and_expiry(&header, now_secs);
        if text.len() <= old_len {
            // memcached rewrites a number that fits in place: the item keeps its marks (h, X, Z).
            new_item.bits = header.word0.bits() & (BIT_FETCHED | BIT_STALE | BIT_WIN_SENT);
        }
        let expiry = new_item.expiry;
        let outcome = self.put(hash, key, &scratch, new_item, Some(found));
        self.scratch = scratch;
        match outcome {
            Outcome::Stored { cas } => Outcome::Counter { value, cas, expiry },
            other => other,
        }
    }

    fn meta_get(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        options: MetaGet,
        now_secs: u32,
        out: &mut Vec<u8>,
    ) -> Outcome {
        match self.get(hash, key, options.touch, !options.no_update, now_secs, out) {
            Outcome::Hit(mut hit) => {
                let expiry = if options.recache_before_touch { hit.expiry_before } else { hit.expiry };
                let remaining = expiry.0.saturating_sub(now_secs);
                let recache = options
                    .recache_below_secs
                    .is_some_and(|below| expiry != Expiry::NEVER && remaining < below);
                if (hit.stale || recache) && !hit.win_sent {
                    // The read may have moved the item (LRU): find it again to claim the token.
                    if let Some(found) = self.find(hash, key) {
                        let version = self.begin_write(found.bucket);
                        self.shared.log.set_word0(found.offset, found.header.word0.with_bit(BIT_WIN_SENT));
                        self.end_write(found.bucket, version);
                        hit.won = true;
                    }
                }
                Outcome::Hit(hit)
            }
            Outcome::Miss => match options.vivify {
                Some(expiry) => {
                    // The request that creates the stub has fetched it (memcached: `h1` next).
                    let stub = NewItem {
                        cas_seq: 0,
                        bits: BIT_WIN_SENT | BIT_FETCHED,
                        flags: 0,
                        expiry,
                        last_access: now_secs,
                    };
                    match self.put(hash, key, &[], stub, None) {
                        Outcome::Stored { cas } => Outcome::Vivified { cas },
                        other => other,
                    }
                }
                None => Outcome::Miss,
            },
            other => other,
        }
    }

    fn invalidate(&mut self, hash: KeyHash, key: &[u8], cas: u64, now_secs: u32) -> Outcome {
        let Lookup::Found(found) = self.lookup(hash, key, now_secs) else {
            self.stats.delete_misses += 1;
            return Outcome::NotFound;
        };
        if cas != 0 && self.shared.cas_unique(found.header.word0.cas_seq()) != cas {
            self.stats.delete_misses += 1;
            return Outcome::Exists;
        }
        self.stats.delete_hits += 1;
        let cas_seq = self.take_cas_seq();
        let word0 = found.header.word0.with_bit(BIT_STALE).without_bit(BIT_WIN_SENT).with_cas_seq(cas_seq);
        let version = self.begin_write(found.bucket);
        self.shared.log.set_word0(found.offset, word0);
        self.end_write(found.bucket, version);
        Outcome::Deleted
    }

    // ---- mechanics ---------------------------------------------------------------------------

    #[inline(always)]
    fn take_cas_seq(&mut self) -> u64 {
        let seq = self.next_cas_seq;
        self.next_cas_seq += 1;
        if self.next_cas_seq >= self.cas_mark {
            self.advance_cas_mark();
        }
        seq
    }

    #[inline(always)]
    fn begin_write(&self, bucket: usize) -> u64 {
        if !self.crew {
            return 0;
        }
        let version = &self.shared.index.bucket(bucket)[0];
        let before = version.load(Relaxed);
        version.store(before + 1, Relaxed);
        fence(Release);
        before
    }

    #[inline(always)]
    fn end_write(&self, bucket: usize, before: u64) {
        if self.crew {
            self.shared.index.bucket(bucket)[0].store(before + 2, Release);
        }
    }

    #[inline(always)]
    fn set_slot(&self, bucket: usize, slot: usize, value: Slot) {
        self.shared.index.bucket(bucket)[1 + slot].store(value.0, Relaxed);
    }

    fn unlink(&mut self, found: &Found) {
        self.set_slot(found.slot_bucket, found.slot, Slot::EMPTY);
        if found.slot_bucket != found.bucket {
            self.release_spare_if_empty(found.bucket, found.slot_bucket);
        }
    }

    /// Store mode: takes an emptied spare bucket at the end of its chain out of the chain.
    fn release_spare_if_empty(&mut self, bucket: usize, spare: usize) {
        let index = &self.shared.index;
        if index.bucket(spare)[1..].iter().any(|word| word.load(Relaxed) != 0) {
            return;
        }
        let mut previous = bucket;
        loop {
            let link = &index.bucket(previous)[BUCKET_WORDS - 1];
            let next = Slot(link.load(Relaxed));
            if !next.is_link() {
                debug_assert!(false, "spare bucket {spare} not in the chain of {bucket}");
                return;
            }
            if next.offset() as usize == spare {
                link.store(0, Relaxed);
                break;
            }
            previous = next.offset() as usize;
        }
        if let Some(store) = self.store.as_mut() {
            store.spare_free.push(spare);
        }
    }

    /// Marks an item superseded and takes it out of the counts.
    #[inline(always)]
    fn retire(&mut self, offset: u64, header: &Header) {
        self.shared.log.set_word0(offset, header.word0.with_bit(BIT_DEAD));
        self.stats.items -= 1;
        match self.store.as_mut() {
            None => self.stats.bytes -= header.capacity() as u64,
            Some(store) => {
                let words = self.shared.log.words();
                self.stats.bytes -= store.arena.block_size(words, offset);
                store.arena.free(words, offset);
            }
        }
    }

    fn count_reclaimed(&mut self, header: &Header) {
        self.stats.reclaimed += 1;
        if !header.word0.has(BIT_FETCHED) {
            self.stats.expired_unfetched += 1;
        }
    }

    /// Puts a new slot in a bucket: an empty or dangling slot if there is one, else the slot of
    /// the oldest item, which is dropped (an index eviction).
    fn link(&mut self, bucket: usize, slot: Slot) {
        let words = self.shared.index.bucket(bucket);
        let mut oldest = (0, 0u64);
        for (slot_index, word) in words[1..].iter().enumerate() {
            let current = Slot(word.load(Relaxed));
            if current.is_empty() || self.slot_is_dead(current) {
                word.store(slot.0, Relaxed);
                return;
            }
            // A flash item is older than any in DRAM: the first to give up its slot. A small
            // ring's item is as old as its place in that ring, scaled to the main ring's lap.
            let age = if Self::is_flash_slot(current) {
                u64::MAX
            } else if self.geometry.in_small(current.offset()) {
                let age = self.small_tail.wrapping_sub(current.offset()) & self.geometry.offset_mask;
                age * (self.geometry.lap_bytes / self.geometry.small_lap)
            } else {
                self.tail.wrapping_sub(current.offset()) & self.geometry.offset_mask
            };
            if age > oldest.1 {
                oldest = (slot_index, age);
            }
        }
        let victim = Slot(words[1 + oldest.0].load(Relaxed));
        if Self::is_flash_slot(victim) {
            self.stats.index_evictions += 1;
            self.set_slot(bucket, oldest.0, slot);
            return;
        }
        let header = self.shared.log.header(victim.offset());
        self.note_eviction(victim.offset(), &header);
        self.retire(victim.offset(), &header);
        self.stats.index_evictions += 1;
        if !header.word0.has(BIT_FETCHED) {
            self.stats.evicted_unfetched += 1;
        }
        self.set_slot(bucket, oldest.0, slot);
    }

    /// Sets the item count past which the index grows: [`INDEX_GROW_LOAD`] of its slots, as
    /// long as it has room to (never with a flash tier, whose queued slot moves name buckets).
    ///
    /// [`INDEX_GROW_LOAD`]: crate::config::INDEX_GROW_LOAD
    pub(crate) fn plan_growth(&mut self) {
        let slots = (self.shape.buckets() * SLOTS_PER_BUCKET) as f64;
        self.grow_at_items = if self.flash.is_none() && self.shared.index.can_split(self.shape) {
            (slots * crate::config::INDEX_GROW_LOAD) as u64
        } else {
            u64::MAX
        };
    }

    /// Splits buckets, at most [`SPLITS_PER_WRITE`], while the index holds more items than it
    /// is sized for; run before a write looks anything up, so no command holds a bucket
    /// number a split changes. Growing ahead of the load keeps the lossy index from dropping
    /// items the log could hold (memcached grows its hash table at 1.5 items a bucket).
    fn grow_index(&mut self) {
        for _ in 0..SPLITS_PER_WRITE {
            if self.stats.items <= self.grow_at_items {
                return;
            }
            self.split_bucket();
            self.plan_growth();
        }
    }

    /// One linear-hashing split: the next bucket's slots whose tag has this level's bit move
    /// to its new sibling (dangling ones are dropped), and the new shape is published while
    /// both buckets are marked as changing, so a reader that used the old shape looks again.
    fn split_bucket(&mut self) {
        let (from, to, tag_bit, next) = self.shape.next_split();
        let from_version = self.begin_write(from);
        let to_version = self.begin_write(to);
        let index = &self.shared.index;
        let (source, target) = (index.bucket(from), index.bucket(to));
        let mut moved = 1;
        for word in &source[1..] {
            let slot = Slot(word.load(Relaxed));
            if slot.is_empty() {
                continue;
            }
            if self.slot_is_dead(slot) {
                word.store(0, Relaxed);
            } else if slot.tag() & tag_bit != 0 {
                target[moved].store(slot.0, Relaxed);
                moved += 1;
                word.store(0, Relaxed);
            }
        }
        self.shape = next;
        index.publish(next);
        self.end_write(to, to_version);
        self.end_write(from, from_version);
    }

    /// Appends a new item at the tail of `ring`, evicting at its head as needed; returns its
    /// offset.
    fn append(&mut self, ring: Ring, key: &[u8], value: &[u8], new_item: NewItem) -> u64 {
        let ext = new_item.flags != 0 || new_item.expiry != Expiry::NEVER;
        let size = item::item_bytes(key.len(), value.len(), ext);
        let offset = match ring {
            Ring::Main => self.reserve(size),
            Ring::Small => self.reserve_small(size),
        };
        self.write_item(offset, key, value, new_item, 0, false);
        // The item is whole: the memory file's window may take it in.
        self.persist_window();
        self.stats.items += 1;
        self.stats.bytes += size as u64;
        offset
    }

    /// Writes an item at `offset`. `key_in_place` says the same key already sits where this
    /// layout puts it (an in-place update that keeps the extension word or its absence), so it is
    /// not written again.
    #[inline(always)]
    fn write_item(
        &self,
        offset: u64,
        key: &[u8],
        value: &[u8],
        new_item: NewItem,
        slack_words: usize,
        key_in_place: bool,
    ) {
        let ext = self.store.is_some() || new_item.flags != 0 || new_item.expiry != Expiry::NEVER;
        let bits = if ext { new_item.bits | BIT_EXT } else { new_item.bits & !BIT_EXT };
        let key_start = item::HEADER_BYTES + if ext { item::EXT_BYTES } else { 0 };
        // The item's words, bounds-checked once (an item never straddles the end of memory).
        let item = self.shared.log.item_words(offset, (key_start + key.len() + value.len()).div_ceil(8));
        item[0].store(Word0::new(new_item.cas_seq, key.len(), bits).0, Relaxed);
        item[1].store(Word1::new(value.len(), slack_words, new_item.last_access).0, Relaxed);
        if ext {
            item[2].store(Ext::new(new_item.flags, new_item.expiry).0, Relaxed);
        }
        if !key_in_place {
            crate::words::store_bytes(item, key_start, key);
        }
        crate::words::store_bytes(item, key_start + key.len(), value);
    }

    /// Makes room for `size` bytes at the tail (padding to the end of the lap if the item would
    /// straddle the end of memory) and returns the logical offset of the room.
    fn reserve(&mut self, size: usize) -> u64 {
        let padding = self.padding_before(size);
        let need = padding + size as u64;
        // The live window spans at most one lap, so no two live bytes share a physical byte.
        if self.room() < need {
            while self.room() < need {
                self.evict_head();
            }
            self.publish_head();
        }
        if padding > 0 {
            if (self.geometry.physical(self.tail) as u64) < self.geometry.log_bytes {
                self.shared.log.write_padding(self.tail);
            }
            self.tail += padding;
        }
        let offset = self.tail & self.geometry.offset_mask;
        self.tail += size as u64;
        self.main_free = self.main_free.saturating_sub(need);
        self.scan_credit_bytes += need;
        self.touched_bytes = self.touched_bytes.max(self.geometry.physical(offset) as u64 + size as u64);
        offset
    }

    /// The clock policy's keeps, made before a write looks anything up (so no item a command
    /// holds moves under it): room for `size` bytes at the tail, keeping items read since they
    /// were written as the head reaches them, at most [`KEEPS_PER_RESERVE`] of them. Whatever
    /// room is still short is made by the write's own plain evictions.
    /// With S3-FIFO, the small ring's promotions come first ([`Partition::promote_ahead`]), then
    /// room in the main ring, for a write that goes to either.
    fn keep_ahead(&mut self, size: usize) {
        if self.stats.items > self.grow_at_items {
            self.grow_index();
        }
        if !self.eviction.counts_reads() || self.store.is_some() {
            return;
        }
        let (heads_before, tail_before) = (self.heads(), self.tail);
        let mut keeps = KEEPS_PER_RESERVE;
        if self.has_small_ring() {
            self.promote_ahead(size, &mut keeps, tail_before);
        }
        self.keep_main(size, &mut keeps, tail_before);
        if self.heads() != heads_before {
            self.publish_head();
        }
    }

    /// Clock at the main ring's head until it has room for `size` bytes, within `keeps` steps
    /// and [`KEEP_BYTES_PER_RESERVE`] bytes appended since the tail was at `tail_before`.
    fn keep_main(&mut self, size: usize, keeps: &mut u32, tail_before: u64) {
        while *keeps > 0
            && self.room() < self.padding_before(size) + size as u64
            && self.tail - tail_before <= KEEP_BYTES_PER_RESERVE
        {
            *keeps -= 1;
            if !self.keep_head() {
                self.evict_head();
            }
        }
    }

    /// Where the rings' heads are now.
    #[inline(always)]
    fn heads(&self) -> Heads {
        Heads { main: self.head, small: self.small_head }
    }

    /// Bytes free between the tail and the head (the live window spans at most one lap).
    fn room(&self) -> u64 {
        self.geometry.lap_bytes - (self.tail - self.head)
    }

    /// The padding an item of `size` bytes appended now needs first: to the end of the lap
    /// when it would straddle the end of memory, else none.
    fn padding_before(&self, size: usize) -> u64 {
        if self.geometry.physical(self.tail) as u64 + size as u64 > self.limit_bytes {
            self.geometry.to_lap_end(self.tail)
        } else {
            0
        }
    }

    /// Publishes a head that moved: the memory file's window moves past the evicted records
    /// before they are overwritten, and CREW readers see the head before the memory is reused.
    fn publish_head(&mut self) {
        self.persist_window();
        self.shared.head.store(self.head, Relaxed);
        self.shared.small_head.store(self.small_head, Relaxed);
        if self.crew {
            fence(Release);
        }
    }

    /// The clock policy at the head: an item read since it was written (or last kept) is copied
    /// to the tail with one read less instead of evicted, and so is one never read while the
    /// bytes of expired items the head reclaimed pay for it (`reclaim_credit`) or, by chance,
    /// when it is smaller than the mean ([`Partition::small_enough_to_keep`]). True if the
    /// head item was kept; false if the head is anything else (padding, a superseded or
    /// expired item, one never read and not kept, one the index no longer finds), which the
    /// caller evicts.
    fn keep_head(&mut self) -> bool {
        let offset = self.head;
        if self.shared.log.is_padding(offset) {
            return false;
        }
        let header = self.shared.log.header(offset);
        let unread = header.word0.freq() == 0;
        let paid = unread && self.reclaim_credit >= header.capacity() as u64;
        if header.word0.has(BIT_DEAD)
            || (unread && !paid && !self.small_enough_to_keep(offset, header.capacity()))
            || self.shared.is_gone(&header, self.clock_secs)
        {
            return false;
        }
        let Some(found) = self.found_at(offset & self.geometry.offset_mask, header) else {
            return false;
        };
        if paid {
            self.reclaim_credit -= header.capacity() as u64;
        }
        let bits = header.word0.with_freq(header.word0.freq().saturating_sub(1)).bits();
        self.move_to_tail(&found, bits, header.word1.last_access());
        self.stats.reappends += 1;
        true
    }

    /// The hash of the key of the item at `offset`, read into the scratch buffer (no
    /// allocation per item a head passes).
    fn key_hash_at(&mut self, offset: u64, header: &Header) -> KeyHash {
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        self.shared.log.read_bytes(offset, header.key_start(), header.word0.key_len(), &mut key);
        let hash = KeyHash::of(&key);
        self.scratch = key;
        hash
    }

    /// The item at `offset` (as a slot holds it) as the index finds it, if a slot of its key's
    /// bucket still points there.
    fn found_at(&mut self, offset: u64, header: Header) -> Option<Found> {
        let hash = self.key_hash_at(offset, &header);
        let bucket = self.shape.bucket(hash);
        let slot = Slot::new(hash.tag(), offset);
        let index =
            self.shared.index.bucket(bucket)[1..].iter().position(|word| word.load(Relaxed) == slot.0)?;
        Some(Found { bucket, slot_bucket: bucket, slot: index, offset, header })
    }

    /// Takes a record a head passes out of the counts; an expired or flushed one is counted
    /// reclaimed and its bytes become clock's credit. Whether it was a live item, which the
    /// caller then evicts ([`Partition::count_eviction`]) or demotes.
    fn leave_head(&mut self, header: &Header) -> bool {
        if header.word0.has(BIT_DEAD) {
            return false;
        }
        self.stats.items -= 1;
        self.stats.bytes -= header.capacity() as u64;
        if self.shared.is_gone(header, self.clock_secs) {
            self.count_reclaimed(header);
            self.reclaim_credit = (self.reclaim_credit + header.capacity() as u64).min(self.credit_max());
            return false;
        }
        true
    }

    /// Counts a live item evicted from the log (memcached's `evictions`, `evicted_unfetched`,
    /// `watch evictions`).
    fn count_eviction(&mut self, offset: u64, header: &Header) {
        self.note_eviction(offset, header);
        self.stats.log_evictions += 1;
        if !header.word0.has(BIT_FETCHED) {
            self.stats.evicted_unfetched += 1;
        }
    }

    /// Clock's size weighting for an item never read, at the head: kept for another lap with
    /// probability `2 * (mean - size) / mean` of the partition's mean item, at most 15/16 (so
    /// an item under half the mean is kept for 16 laps on average, one over the mean never).
    /// A key costs its bytes and pays in hits alike whatever its size, so the same memory
    /// answers more when it holds smaller items (Segcache's merge weighs read counts by size
    /// the same way). The dice is the item's offset, new at each lap. Not with a flash tier,
    /// where what leaves the head is demoted, not lost.
    fn small_enough_to_keep(&self, offset: u64, size: usize) -> bool {
        let (size, mean) = (size as u64, self.stats.bytes / self.stats.items.max(1));
        if size >= mean || self.flash.is_some() {
            return false;
        }
        let dice = offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54;
        dice * mean < (SMALL_KEEP_MAX * mean).min(2 * 1024 * (mean - size))
    }

    /// The most reclaim credit clock saves up: half the log (a write spends it a keep at a
    /// time, at most [`KEEPS_PER_RESERVE`] keeps).
    fn credit_max(&self) -> u64 {
        if self.eviction.counts_reads() {
            self.limit_bytes / 2
        } else {
            0
        }
    }

    /// Moves the head past one record, counting a live item as evicted (or reclaimed if expired).
    fn evict_head(&mut self) {
        let offset = self.head;
        if self.shared.log.is_padding(offset) {
            self.head += self.geometry.to_lap_end(offset);
            return;
        }
        let header = self.shared.log.header(offset);
        // A demoted item is on flash now, still answering: not an eviction.
        if self.leave_head(&header) && !(self.flash.is_some() && self.demote(offset, &header)) {
            self.count_eviction(offset, &header);
        }
        self.head += header.capacity() as u64;
    }

    fn scan_if_due(&mut self) {
        while self.scan_credit_bytes >= self.scan_stride_bytes {
            self.scan_credit_bytes -= self.scan_stride_bytes;
            self.scan_one_bucket();
        }
    }

    fn scan_one_bucket(&mut self) {
        let bucket = self.scan_cursor;
        self.scan_cursor = if self.scan_cursor + 1 < self.shape.buckets() { self.scan_cursor + 1 } else { 0 };
        let version = self.begin_write(bucket);
        for word in &self.shared.index.bucket(bucket)[1..BUCKET_WORDS] {
            let slot = Slot(word.load(Relaxed));
            if !slot.is_empty() && self.slot_is_dead(slot) {
                word.store(0, Relaxed);
            }
        }
        self.end_write(bucket, version);
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
    /// A new version of an item that keeps its flags and expiry (append, prepend, incr, decr).
    fn keeping_flags_and_expiry(header: &Header, now_secs: u32) -> NewItem {
        NewItem {
            cas_seq: 0,
            bits: 0,
            flags: header.ext.flags(),
            expiry: header.ext.expiry(),
            last_access: now_secs,
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
mod tests {
    use super::*;
    use crate::region::HugePages;

    fn small(access: Access) -> Partition {
        let mut config = Config::new(256, 2);
        config.access = access;
        config.eviction = Eviction::Lru;
        config.huge_pages = HugePages::Off;
        Partition::new(config)
    }

    fn set(partition: &mut Partition, key: &[u8], value: &[u8]) {
        let command = Command::Store { mode: StoreMode::Set, value, flags: 3, expiry: Expiry::NEVER };
        let outcome = partition.execute(&Request::new(key, command), 100, &mut Vec::new());
        assert!(matches!(outcome, Outcome::Stored { .. }), "{outcome:?}");
    }

    #[test]
    fn evictions_are_recorded_only_while_asked_and_peek_changes_nothing() {
        let mut partition = small(Access::Erew);
        for round in 0..8u8 {
            set(&mut partition, &[b'a' + round], &[round; 40]);
        }
        assert!(partition.take_evictions().is_empty(), "recorded while off");
        partition.record_evictions(true);
        for round in 0..8u8 {
            set(&mut partition, &[b'k', round], &[round; 40]);
        }
        let evicted = partition.take_evictions();
        assert!(!evicted.is_empty(), "a full log evicted nothing");
        let first = &evicted[0];
        assert_eq!((first.value_len, first.fetched), (40, false));
        assert!(first.key.len() <= 2);
        assert!(partition.take_evictions().is_empty(), "taken twice");
        let last = [b'k', 7];
        let before = partition.stats().gets;
        assert_eq!(partition.peek(KeyHash::of(&last), &last, 100), Some(40));
        assert_eq!(partition.peek(KeyHash::of(b"absent"), b"absent", 100), None);
        assert_eq!(partition.stats().gets, before, "peek counted a get");
        partition.record_evictions(false);
        set(&mut partition, b"zz", &[1; 40]);
        assert!(partition.take_evictions().is_empty());
    }

    /// Miri checks the owner's writes and a reader's optimistic copies for data races and
    /// out-of-bounds access, on a log small enough to wrap many times.
    #[test]
    fn miri_owner_and_reader_threads() {
        let mut partition = small(Access::Crew);
        let reader = partition.reader();
        let thread = std::thread::spawn(move || {
            let mut out = Vec::new();
            for round in 0..30 {
                out.clear();
                let key = [b'a' + (round % 3) as u8];
                if let Outcome::Hit(hit) = reader.get(KeyHash::of(&key), &key, 100, &mut out) {
                    let value = &out[hit.value_start..];
                    assert!(value.iter().all(|&b| b == key[0]), "torn or foreign value {value:?}");
                    assert_eq!(hit.flags, 3);
                }
            }
        });
        for round in 0..40usize {
            let key = [b'a' + (round % 3) as u8];
            set(&mut partition, &key, &vec![key[0]; 1 + round % 37]);
        }
        thread.join().unwrap();
        partition.check_invariants();
    }

    #[test]
    fn miri_erew_writes_no_versions() {
        let mut partition = small(Access::Erew);
        for round in 0..20usize {
            set(&mut partition, &[b'k', round as u8 % 5], &[1; 20]);
        }
        let versions: u64 = (0..2).map(|bucket| partition.shared.index.bucket(bucket)[0].load(Relaxed)).sum();
        assert_eq!(versions, 0);
        partition.check_invariants();
    }

    fn get(partition: &mut Partition, key: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        match partition.execute(&Request::new(key, Command::Get), 100, &mut out) {
            Outcome::Hit(hit) => Some(out[hit.value_start..hit.value_start + hit.value_len].to_vec()),
            Outcome::Miss => None,
            other => panic!("{other:?}"),
        }
    }

    /// A hint is only a hint: one left for a key whose slot then went to another key (or whose
    /// key moved, or was deleted), or one that points at the right slot of a forged entry, never
    /// answers for the wrong key.
    #[test]
    fn stale_and_forged_hints_fall_back_to_the_scan() {
        let mut partition = small(Access::Crew);
        set(&mut partition, b"a", b"1");
        set(&mut partition, b"b", b"2");
        for key in [&b"a"[..], b"b"] {
            partition.prefetch_item(KeyHash::of(key));
        }
        // Delete "a" and write "c": "c" may take "a"'s old slot while "a"'s hint still names it.
        let deleted =
            partition.execute(&Request::new(b"a", Command::Delete { cas: 0 }), 100, &mut Vec::new());
        assert_eq!(deleted, Outcome::Deleted);
        set(&mut partition, b"c", b"3");
        assert_eq!(get(&mut partition, b"a"), None);
        assert_eq!(get(&mut partition, b"b").as_deref(), Some(&b"2"[..]));
        assert_eq!(get(&mut partition, b"c").as_deref(), Some(&b"3"[..]));
        // "b" moves (a longer value is appended elsewhere) after its hint was taken.
        partition.prefetch_item(KeyHash::of(b"b"));
        set(&mut partition, b"b", b"a-longer-value");
        assert_eq!(get(&mut partition, b"b").as_deref(), Some(&b"a-longer-value"[..]));
        // Every hint entry forged to name every slot, for every key: answers do not change.
        for slot in 0..SLOTS_PER_BUCKET as u64 {
            for key in [&b"a"[..], b"b", b"c", b"d"] {
                let hash = KeyHash::of(key);
                partition.hint(hash).set(hash.0 & !HINT_SLOT_MASK | slot);
            }
            assert_eq!(get(&mut partition, b"a"), None);
            assert_eq!(get(&mut partition, b"b").as_deref(), Some(&b"a-longer-value"[..]));
            assert_eq!(get(&mut partition, b"c").as_deref(), Some(&b"3"[..]));
            assert_eq!(get(&mut partition, b"d"), None);
        }
        partition.check_invariants();
    }
}
