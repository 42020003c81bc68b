//! `-e`: a partition's log kept in a memory file, so that a restarted server finds its items.
//!
//! A partition's part of the file is one page of state, then its log. The log's records are
//! written as in memory; the state page says where the live window is (head and tail, as
//! logical offsets), how flush_all stands, and a CAS mark above every CAS sequence handed out.
//! The index is not kept: it is rebuilt at start-up by scanning the window
//! ([`crate::Partition::open`]), which also checks every record.
//!
//! What makes a crash at any instant (`kill -9`, not only a graceful stop) safe: records in the
//! window are never rewritten except one word at a time (a dead bit, the fetched bit, the last
//! access, an expiry), so a record is either whole or outside the window. The tail is written
//! to the state page only after the record it takes in is whole, and the head moves past
//! records before their memory is reused; in a memory file a value is never rewritten in
//! place (a new version is appended). A write in flight at the crash is lost, never half seen.

use crate::region::Region;
use crate::sync::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// Bytes of a partition's state page.
pub const STATE_BYTES: u64 = 4096;
/// How far the state page's CAS mark runs ahead of the next CAS sequence.
pub const CAS_MARK_STEP: u64 = 1 << 16;

/// "QSPART02": the state page of a partition laid out as this version lays it out (02: items
/// may carry the precise expiry word, flagged in word 0, whose CAS sequence has 47 bits).
const MAGIC: u64 = u64::from_le_bytes(*b"QSPART02");

// The state page's words.
const W_MAGIC: usize = 0;
const W_SHAPE: usize = 1;
const W_LOG_BYTES: usize = 2;
const W_HEAD: usize = 3;
const W_TAIL: usize = 4;
const W_LIMIT: usize = 5;
const W_OLDEST_LIVE: usize = 6;
const W_OLDEST_CAS: usize = 7;
const W_CAS_MARK: usize = 8;
const W_FLASH_PAGE: usize = 9;
const W_FLASH_EPOCH: usize = 10;

/// The log bytes a memory file holds for a partition configured with `log_bytes`: whole pages.
pub fn log_bytes(log_bytes: usize) -> usize {
    (log_bytes & !4095).max(4096)
}

/// Bytes of a partition's part of a memory file (its state page and its log).
pub fn segment_bytes(configured_log_bytes: usize) -> u64 {
    STATE_BYTES + log_bytes(configured_log_bytes) as u64
}

/// What a partition's log must match to be taken back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Bytes of log.
    pub log_bytes: u64,
    /// Width of logical offsets.
    pub offset_bits: u32,
    /// The partition's number.
    pub partition_index: u16,
    /// log2 of the partition count.
    pub partition_bits: u32,
}

impl Shape {
    fn word(&self) -> u64 {
        u64::from(self.offset_bits)
            | u64::from(self.partition_index) << 8
            | u64::from(self.partition_bits) << 24
    }
}

/// The live window and flush state a state page kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Logical offset of the oldest record.
    pub head: u64,
    /// Logical offset just past the newest whole record.
    pub tail: u64,
    /// Bytes of each lap the log filled.
    pub limit_bytes: u64,
    /// flush_all's cut-off second (0: none).
    pub oldest_live: u32,
    /// flush_all's CAS cut-off.
    pub oldest_cas_seq: u64,
    /// Every CAS sequence handed out is below this.
    pub cas_mark: u64,
}

/// What a partition took back from its memory file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Items indexed again.
    pub items: u64,
    /// Their bytes in the log.
    pub bytes: u64,
    /// Older versions of a key found before a newer one (a write in flight at a crash).
    pub replaced: u64,
    /// Bytes of the window cut off at a record that failed its checks (0 after any clean or
    /// unclean stop of this server; not 0 means the file was changed behind its back).
    pub cut_bytes: u64,
    /// Items with a `{...}` hash tag placed by a release before tags chose the partition: in
    /// the wrong partition now, so dropped (counted, not indexed).
    pub misplaced: u64,
}

/// A partition's state page, mapped from the memory file.
pub struct State {
    region: Region,
}

impl State {
    /// Maps the state page at `offset` of `file`.
    #[cfg(not(any(miri, loom)))]
    pub fn open(file: &std::fs::File, offset: u64) -> std::io::Result<State> {
        Ok(State { region: Region::from_file(file, offset, STATE_BYTES as usize)? })
    }

    fn words(&self) -> &[AtomicU64] {
        self.region.words()
    }

    /// The window kept for a log of `shape`, or `None` when the page is blank or was laid
    /// out for another shape.
    pub fn window(&self, shape: &Shape) -> Option<Window> {
        let words = self.words();
        let load = |word: usize| words[word].load(Relaxed);
        if load(W_MAGIC) != MAGIC || load(W_SHAPE) != shape.word() || load(W_LOG_BYTES) != shape.log_bytes {
            return None;
        }
        let (head, tail) = (load(W_HEAD), load(W_TAIL));
        let lap_bytes = shape.log_bytes.next_power_of_two();
        if tail < head || tail - head > lap_bytes {
            return None;
        }
        Some(Window {
            head,
            tail,
            limit_bytes: load(W_LIMIT),
            oldest_live: load(W_OLDEST_LIVE) as u32,
            oldest_cas_seq: load(W_OLDEST_CAS),
            cas_mark: load(W_CAS_MARK),
        })
    }

    /// Lays the page out blank for a log of `shape`: an empty window.
    pub fn start(&self, shape: &Shape) {
        let words = self.words();
        words[W_MAGIC].store(0, Relaxed);
        for word in &words[1..] {
            word.store(0, Relaxed);
        }
        words[W_SHAPE].store(shape.word(), Relaxed);
        words[W_LOG_BYTES].store(shape.log_bytes, Relaxed);
        words[W_LIMIT].store(shape.log_bytes, Relaxed);
        words[W_CAS_MARK].store(1, Relaxed);
        words[W_MAGIC].store(MAGIC, Relaxed);
    }

    /// The live window now: `tail` only once every record before it is whole, `head` before
    /// any record before it is overwritten.
    #[inline(always)]
    pub fn set_window(&self, head: u64, tail: u64) {
        let words = self.words();
        words[W_HEAD].store(head, Relaxed);
        words[W_TAIL].store(tail, Relaxed);
    }

    /// flush_all's cut-offs now.
    pub fn set_flush(&self, oldest_live: u32, oldest_cas_seq: u64) {
        self.words()[W_OLDEST_LIVE].store(u64::from(oldest_live), Relaxed);
        self.words()[W_OLDEST_CAS].store(oldest_cas_seq, Relaxed);
    }

    /// The flash log's durable offset (every record below it is in the file) and the epoch of
    /// the flash file the slots refer to (`-o ext_path` with `-e`).
    pub fn flash(&self) -> (u64, u64) {
        (self.words()[W_FLASH_PAGE].load(Relaxed), self.words()[W_FLASH_EPOCH].load(Relaxed))
    }

    /// The flash log's durable offset now (stored only once what is below it is written).
    #[inline]
    pub fn set_flash_page(&self, page: u64) {
        self.words()[W_FLASH_PAGE].store(page, Relaxed);
    }

    /// The flash file's epoch now.
    pub fn set_flash_epoch(&self, epoch: u64) {
        self.words()[W_FLASH_EPOCH].store(epoch, Relaxed);
    }

    /// Every CAS sequence handed out from now on stays below `mark` until it is raised.
    pub fn set_cas_mark(&self, mark: u64) {
        self.words()[W_CAS_MARK].store(mark, Relaxed);
    }
}
