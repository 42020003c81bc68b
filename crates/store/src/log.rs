//! The circular log: a block of words that items are appended to at the tail and evicted from
//! at the head. Offsets are logical (they grow forever, kept modulo `2^offset_bits` in index
//! slots); each lap of the log spans `lap_bytes`, the power of two at or above the memory's
//! size, so the physical position is `offset & (lap_bytes - 1)` with no division. An item never
//! straddles the end of the memory: when it would, a padding record fills the rest of the lap
//! (the memory's unused end and the lap's part past the memory alike) and the item starts at
//! physical 0 (padded wrap, which keeps anonymous transparent huge pages usable). So a log may
//! have any size (a partition's exact share of -m) at the cost of one lap's skip per wrap.

use crate::item::{Ext, Word0, Word1, BIT_EXT, BIT_PAD, EXT_BYTES, HEADER_BYTES, PRECISE_BYTES};
use crate::region::{prefetch, HugePages, PageKind, Region};
use crate::sync::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// Geometry of a log, fixed at creation.
#[derive(Clone, Copy, Debug)]
pub struct LogGeometry {
    /// Bytes of memory (a multiple of 8; any size).
    pub log_bytes: u64,
    /// Logical bytes of one lap: the power of two at or above `log_bytes`. Offsets in
    /// `[log_bytes, lap_bytes)` of a lap have no memory and hold nothing.
    pub lap_bytes: u64,
    /// Mask of the logical offset space stored in slots (`2^offset_bits - 1`).
    pub offset_mask: u64,
    /// The bit of a slot's offset that says it is in the small ring ([`SMALL_BIT`]), 0 for a
    /// log without one (whose offsets may then use that bit too).
    pub small_flag: u64,
    /// Logical bytes of one lap of the small ring: the power of two at or above its memory (0
    /// without one).
    pub small_lap: u64,
    /// Bytes of the small ring's memory (0 without one).
    pub small_bytes: u64,
}

/// The offset bit of an item in a log's small ring (S3-FIFO's probationary queue: see
/// [`Log::with_small_ring`]). A log with a small ring keeps its own offsets below it.
pub const SMALL_BIT: u64 = 1 << 47;

/// Where the heads of a log's rings are: items behind them are gone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heads {
    /// The main ring's logical head.
    pub main: u64,
    /// The small ring's logical head (0 without one).
    pub small: u64,
}

impl LogGeometry {
    /// Whether an item at logical `offset` (as a slot holds it) is still inside the live window
    /// of its ring. Slots never point past a tail, so an offset at most one lap ahead of its
    /// ring's head is live.
    #[inline(always)]
    pub fn is_live(self, offset: u64, heads: Heads) -> bool {
        if offset & self.small_flag != 0 {
            return (offset ^ self.small_flag).wrapping_sub(heads.small) & self.offset_mask < self.small_lap;
        }
        offset.wrapping_sub(heads.main) & self.offset_mask < self.lap_bytes
    }

    /// Whether `offset` (as a slot holds it) is in the small ring.
    #[inline(always)]
    pub fn in_small(self, offset: u64) -> bool {
        offset & self.small_flag != 0
    }

    /// The offset a slot holds for the small ring's logical position `at`.
    #[inline(always)]
    pub fn small_offset(self, at: u64) -> u64 {
        self.small_flag | at & self.offset_mask
    }

    /// Byte position in the small ring's memory of a small-ring offset.
    #[inline(always)]
    pub fn small_physical(self, offset: u64) -> usize {
        (offset & (self.small_lap - 1)) as usize
    }

    /// Byte position in memory of logical `offset` (of the main ring).
    #[inline(always)]
    pub fn physical(self, offset: u64) -> usize {
        (offset & (self.lap_bytes - 1)) as usize
    }

    /// Logical bytes from `offset` to the start of the next lap (what a padding record there
    /// skips).
    #[inline(always)]
    pub fn to_lap_end(self, offset: u64) -> u64 {
        self.lap_bytes - self.physical(offset) as u64
    }
}

/// What a header says about an item: decoded once, used by every operation.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    /// Word 0 (CAS sequence, key length, bits).
    pub word0: Word0,
    /// Word 1 (value length, slack, last access).
    pub word1: Word1,
    /// Flags and expiry (zero when absent).
    pub ext: Ext,
    /// A long key's length (its word after the extension); 0 for any other key.
    pub long_key_len: usize,
}

impl Header {
    /// What a read of this item answers besides its value bytes (which start at `value_start` in
    /// the caller's buffer); `cas` is the item's server-wide CAS unique.
    #[inline(always)]
    pub fn hit(&self, value_start: usize, cas: u64) -> crate::command::Hit {
        crate::command::Hit {
            value_start,
            value_len: self.word1.value_len(),
            flags: self.ext.flags(),
            cas,
            expiry: self.ext.expiry(),
            expiry_before: self.ext.expiry(),
            last_access_secs: self.word1.last_access(),
            fetched_before: self.word0.has(crate::item::BIT_FETCHED),
            stale: self.word0.has(crate::item::BIT_STALE),
            win_sent: self.word0.has(crate::item::BIT_WIN_SENT),
            won: false,
        }
    }

    /// Byte offset of the key from the item's start.
    #[inline(always)]
    pub fn key_start(&self) -> usize {
        HEADER_BYTES + self.ext_bytes() + crate::item::long_key_bytes(self.key_len())
    }
    /// Key length in bytes (a long key's from its own word).
    #[inline(always)]
    pub fn key_len(&self) -> usize {
        if self.word0.long_key() {
            self.long_key_len
        } else {
            self.word0.key_len()
        }
    }
    /// Bytes of the extension and precise expiry words, as the header says they follow.
    #[inline(always)]
    pub fn ext_bytes(&self) -> usize {
        // P is set only with EXT.
        usize::from(self.word0.has(BIT_EXT)) * EXT_BYTES + usize::from(self.word0.precise()) * PRECISE_BYTES
    }
    /// Bytes the item occupies, its slack included.
    #[inline(always)]
    pub fn capacity(&self) -> usize {
        crate::item::item_bytes(self.key_len(), self.word1.value_len(), self.ext_bytes())
            + self.word1.slack_words() * 8
    }
}

/// A geometry's small-ring fields when it has none.
const NO_SMALL: LogGeometry =
    LogGeometry { log_bytes: 0, lap_bytes: 0, offset_mask: 0, small_flag: 0, small_lap: 0, small_bytes: 0 };

/// The log's memory.
pub struct Log {
    region: Region,
    /// The region's words that are the main ring's memory: all of them without a small ring.
    main: std::ops::Range<usize>,
    /// The small ring's words in the region, before the main ring's ([`Log::with_small_ring`]).
    small: Option<std::ops::Range<usize>>,
    geometry: LogGeometry,
}

impl Log {
    /// A log of `log_bytes` bytes (a multiple of 8) with address space for `room` bytes
    /// (where the memory allows: see [`Region::with_room`]), offsets wrapping at
    /// `2^offset_bits`. The geometry spans all the memory; the partition decides how much of
    /// each lap it fills.
    pub fn new(log_bytes: usize, room: usize, offset_bits: u32, huge_pages: HugePages) -> Log {
        assert!(log_bytes % 8 == 0 && log_bytes >= 64, "log size must be a multiple of 8 bytes");
        let region = Region::with_room(log_bytes, room.max(log_bytes), huge_pages);
        let log_bytes = region.bytes();
        let lap_bytes = log_bytes.next_power_of_two() as u64;
        assert!(
            offset_bits <= crate::index::OFFSET_BITS_MAX && (1u64 << offset_bits) >= 4 * lap_bytes,
            "the offset space must be at least four times the log's lap"
        );
        let geometry = LogGeometry {
            log_bytes: log_bytes as u64,
            lap_bytes,
            offset_mask: (1 << offset_bits) - 1,
            ..NO_SMALL
        };
        Log { main: 0..region.words().len(), region, small: None, geometry }
    }

    /// A log of `log_bytes` with room for `room` (as [`Log::new`]) and a small ring of
    /// `small_bytes` (a multiple of 8) before it in the same memory (so the two share a huge
    /// page rather than round up one each, and the main ring can still grow into its room): S3-FIFO's probationary queue, a circular
    /// log of its own that new items enter (the partition decides which ring an item goes to).
    /// Its offsets carry [`SMALL_BIT`], so the main ring's must stay below it
    /// (`offset_bits` at most 47). Every accessor takes either ring's offsets.
    pub fn with_small_ring(
        log_bytes: usize,
        room: usize,
        small_bytes: usize,
        offset_bits: u32,
        huge_pages: HugePages,
    ) -> Log {
        assert!(log_bytes % 8 == 0 && log_bytes >= 64, "log size must be a multiple of 8 bytes");
        assert!(small_bytes % 8 == 0 && small_bytes >= 64, "small ring size must be a multiple of 8 bytes");
        assert!(offset_bits <= SMALL_BIT.trailing_zeros(), "the log's offsets must stay below the small bit");
        let region =
            Region::with_room(log_bytes + small_bytes, room.max(log_bytes) + small_bytes, huge_pages);
        // Where the room could not be had, the region is the two sizes alone.
        let main_bytes = region.bytes() - small_bytes;
        let lap_bytes = (main_bytes as u64).next_power_of_two();
        assert!(
            (1u64 << offset_bits) >= 4 * lap_bytes,
            "the offset space must be at least four times the log's lap"
        );
        let geometry = LogGeometry {
            log_bytes: main_bytes as u64,
            lap_bytes,
            offset_mask: (1 << offset_bits) - 1,
            small_flag: SMALL_BIT,
            small_lap: (small_bytes as u64).next_power_of_two(),
            small_bytes: small_bytes as u64,
        };
        let small_words = small_bytes / 8;
        let main = small_words..small_words + main_bytes / 8;
        Log { region, main, small: Some(0..small_words), geometry }
    }

    /// The memory, byte position and word mask (of its lap) of logical `offset` in either ring.
    #[inline(always)]
    fn locate(&self, offset: u64) -> (&[AtomicU64], usize, usize) {
        if offset & self.geometry.small_flag != 0 {
            if let Some(small) = &self.small {
                let lap = self.geometry.small_lap;
                let words = &self.region.words()[small.clone()];
                return (words, (offset & (lap - 1)) as usize, (lap / 8 - 1) as usize);
            }
        }
        (self.words(), self.geometry.physical(offset), self.word_mask())
    }

    /// Which ring holds logical `offset` (true: the small ring) and its byte position in that
    /// ring's memory.
    #[inline(always)]
    pub fn place(&self, offset: u64) -> (bool, usize) {
        let small = offset & self.geometry.small_flag != 0 && self.small.is_some();
        (small, self.locate(offset).1)
    }

    /// The `len` bytes from byte `start` of the item at `offset`, as a slice of the log's own
    /// memory (bounds-checked).
    ///
    /// # Safety
    /// No thread may write those bytes while the slice lives.
    #[cfg(not(loom))]
    pub unsafe fn bytes_in_place(&self, offset: u64, start: usize, len: usize) -> &[u8] {
        if len == 0 {
            return &[];
        }
        let (memory, at, _) = self.locate(offset);
        let from = at + start;
        let words = &memory[from / 8..(from + len).div_ceil(8)];
        // SAFETY: `words` covers the range (bounds-checked above), an `AtomicU64` has the size
        // and alignment of a `u64` and any bit pattern is a valid byte, and the caller promises
        // no writes while the slice lives, so plain reads do not race.
        unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>().add(from % 8), len) }
    }

    /// The words of the item at `offset` (either ring), `words` long: bounds-checked once.
    #[inline(always)]
    pub fn item_words(&self, offset: u64, words: usize) -> &[AtomicU64] {
        let (memory, at, _) = self.locate(offset);
        &memory[at / 8..at / 8 + words]
    }

    /// Gives the small ring's memory back to the kernel (it holds no live item).
    pub fn release_small(&self) {
        if let Some(small) = &self.small {
            self.region.release_range(small.start * 8, small.end * 8);
        }
    }

    /// A log in `log_bytes` (a multiple of 4096) of a memory file from byte `offset` (`-e`): its
    /// contents are the file's, so a restarted server finds the items the last one wrote.
    #[cfg(not(any(miri, loom)))]
    pub fn in_file(
        file: &std::fs::File,
        offset: u64,
        log_bytes: usize,
        offset_bits: u32,
    ) -> std::io::Result<Log> {
        let region = Region::from_file(file, offset, log_bytes)?;
        let lap_bytes = (log_bytes as u64).next_power_of_two();
        assert!(
            offset_bits <= crate::index::OFFSET_BITS_MAX && (1u64 << offset_bits) >= 4 * lap_bytes,
            "the offset space must be at least four times the log's lap"
        );
        let geometry = LogGeometry {
            log_bytes: log_bytes as u64,
            lap_bytes,
            offset_mask: (1 << offset_bits) - 1,
            ..NO_SMALL
        };
        Ok(Log { main: 0..region.words().len(), region, small: None, geometry })
    }

    /// Store mode's arena memory: `bytes` (a multiple of 8), not necessarily a power of two.
    /// Its offsets never wrap; the geometry is that of the next power of two, so every offset
    /// in it is "live" from head 0 and maps to itself.
    pub fn new_arena(bytes: usize, huge_pages: HugePages) -> Log {
        assert!(bytes % 8 == 0 && bytes >= 64, "arena size must be a multiple of 8 bytes");
        let region = Region::new(bytes, huge_pages);
        let geometry = LogGeometry {
            log_bytes: bytes as u64,
            lap_bytes: bytes.next_power_of_two() as u64,
            offset_mask: (1 << crate::index::OFFSET_BITS_MAX) - 1,
            ..NO_SMALL
        };
        Log { main: 0..region.words().len(), region, small: None, geometry }
    }

    /// The log's geometry.
    #[inline(always)]
    pub fn geometry(&self) -> LogGeometry {
        self.geometry
    }

    /// The log's memory as words.
    #[inline(always)]
    pub fn words(&self) -> &[AtomicU64] {
        &self.region.words()[self.main.clone()]
    }

    /// Gives the memory from byte `from` to the end back to the kernel (see
    /// [`Region::release_from`] for what the caller guarantees).
    pub fn release_from(&self, from: usize) {
        self.region.release_range(self.main.start * 8 + from, self.main.end * 8);
    }

    /// Pages backing the log.
    pub fn page_kind(&self) -> PageKind {
        self.region.page_kind()
    }

    /// Starts loading the first cache line of the item at `offset`.
    #[inline(always)]
    pub fn prefetch(&self, offset: u64) {
        let (words, at, _) = self.locate(offset);
        prefetch(words, at / 8);
    }

    /// Reads the header of the item at `offset`. Lengths may be garbage if a CREW reader races the
    /// owner; callers bound them before use.
    #[inline(always)]
    pub fn header(&self, offset: u64) -> Header {
        let (words, at, mask) = self.locate(offset);
        Self::header_in(words, at, mask)
    }

    /// The header of the item at `offset` if the item's key is `key` (the item located once
    /// for both: a get's probe).
    #[inline(always)]
    pub fn header_if_key(&self, offset: u64, key: &[u8]) -> Option<Header> {
        let (words, at, mask) = self.locate(offset);
        let header = Self::header_in(words, at, mask);
        (header.key_len() == key.len() && crate::words::bytes_equal(words, at + header.key_start(), key))
            .then_some(header)
    }

    /// The header at byte `at` of `words` (a ring's memory, `mask` its word mask).
    #[inline(always)]
    fn header_in(words: &[AtomicU64], at: usize, mask: usize) -> Header {
        let at = at / 8;
        let word0 = Word0(words[at].load(Relaxed));
        let word1 = Word1(words[(at + 1) & mask].load(Relaxed));
        let ext = if word0.has(BIT_EXT) {
            let precise = if word0.precise() { words[(at + 3) & mask].load(Relaxed) } else { 0 };
            Ext::from_words(words[(at + 2) & mask].load(Relaxed), precise)
        } else {
            Ext::NONE
        };
        let mut header = Header { word0, word1, ext, long_key_len: 0 };
        if word0.long_key() {
            // Bounded: a CREW reader racing the owner may read any length here.
            let long = words[(at + 2 + header.ext_bytes() / 8) & mask].load(Relaxed);
            header.long_key_len = (long as usize).min(crate::item::LONG_KEY_BYTES_MAX + 1);
        }
        header
    }

    /// Whether the record at `offset` is padding: a padding record, or the part of a lap past
    /// the memory's end (where an item that ended exactly at the end leaves the tail).
    #[inline(always)]
    pub fn is_padding(&self, offset: u64) -> bool {
        let (words, at, _) = self.locate(offset);
        words.get(at / 8).map_or(true, |word| Word0(word.load(Relaxed)).has(BIT_PAD))
    }

    #[inline(always)]
    fn word_mask(&self) -> usize {
        (self.geometry.lap_bytes / 8 - 1) as usize
    }

    /// Writes header word 0 of the item at `offset`.
    #[inline(always)]
    pub fn set_word0(&self, offset: u64, word0: Word0) {
        let (words, at, _) = self.locate(offset);
        words[at / 8].store(word0.0, Relaxed);
    }

    /// Writes header word 1 of the item at `offset`.
    #[inline(always)]
    pub fn set_word1(&self, offset: u64, word1: Word1) {
        let (words, at, _) = self.locate(offset);
        words[at / 8 + 1].store(word1.0, Relaxed);
    }

    /// Writes the extension of the item at `offset`, which must have `BIT_EXT`; `precise_slot`
    /// says word 0 has the precise bit (then the precise word gets the expiry, whole second or
    /// not), and without it `ext` must not be precise.
    #[inline(always)]
    pub fn set_ext(&self, offset: u64, ext: Ext, precise_slot: bool) {
        let (words, at, _) = self.locate(offset);
        words[at / 8 + 2].store(ext.word(), Relaxed);
        if precise_slot {
            words[at / 8 + 3].store(ext.expiry().ms(), Relaxed);
        }
    }

    /// Writes a padding record at `offset`.
    pub fn write_padding(&self, offset: u64) {
        self.set_word0(offset, Word0::PAD);
    }

    /// Appends `len` bytes from byte `start` of the item at `offset` to `out`.
    #[inline(always)]
    pub fn read_bytes(&self, offset: u64, start: usize, len: usize, out: &mut Vec<u8>) {
        let (words, at, _) = self.locate(offset);
        crate::words::load_bytes(words, at + start, len, out);
    }

    /// Whether the `expected.len()` bytes from byte `start` of the item at `offset` equal `expected`.
    #[inline(always)]
    pub fn bytes_equal(&self, offset: u64, start: usize, expected: &[u8]) -> bool {
        let (words, at, _) = self.locate(offset);
        crate::words::bytes_equal(words, at + start, expected)
    }

    /// Whether an item of `bytes` starting at `offset` lies inside the memory (it always does
    /// when the header was read consistently; a racing CREW reader checks before copying).
    #[inline(always)]
    pub fn fits(&self, offset: u64, bytes: usize) -> bool {
        let (words, at, _) = self.locate(offset);
        at.saturating_add(bytes) <= words.len() * 8
    }
}
