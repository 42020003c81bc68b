//! Page-backed memory for logs and indexes, viewed as a slice of `AtomicU64` words.
//!
//! Where pages come from, in order (`HugePages::Auto`): explicit hugetlb pages when the kernel has
//! them reserved, then anonymous memory with `madvise(MADV_HUGEPAGE)` (transparent huge pages,
//! 2 MiB aligned) when THP is `always` or `madvise`, then plain 4 KiB pages. Allocation never fails
//! for lack of huge pages. Memory is zeroed by the kernel and faulted in as it is first touched
//! (a log's pages as its tail first reaches them; a 2 MiB page per fault where THP backs it), so
//! start-up costs the same at any size and resident memory grows with the data, as memcached's
//! does. hugetlb mappings reserve their pages at creation (no `MAP_NORESERVE`), so a later
//! fault cannot fail. Under Miri the region is an ordinary heap allocation.
//!
//! This is the only module of the crate with `unsafe`; everything above it sees `&[AtomicU64]`.

use crate::sync::AtomicU64;

/// Which pages a caller asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HugePages {
    /// hugetlb if reserved, else transparent huge pages if enabled, else plain pages.
    #[default]
    Auto,
    /// As `Auto`, but the caller wants to know it did not get huge pages (still never fails).
    On,
    /// Plain 4 KiB pages only.
    Off,
}

/// Which pages a region got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// Explicit 2 MiB hugetlb pages (`MAP_HUGETLB`).
    Hugetlb,
    /// Anonymous memory advised for transparent huge pages, 2 MiB aligned.
    TransparentHuge,
    /// Plain pages.
    Plain,
    /// A heap allocation (Miri, or sizes too small to map).
    Heap,
    /// A shared mapping of a memory file (`-e`): its contents outlive the process.
    File,
}

impl PageKind {
    /// Short name for reports and `stats`.
    pub const fn name(self) -> &'static str {
        match self {
            PageKind::Hugetlb => "hugetlb",
            PageKind::TransparentHuge => "thp",
            PageKind::Plain => "4k",
            PageKind::Heap => "heap",
            PageKind::File => "file",
        }
    }
}

#[cfg_attr(any(miri, loom), allow(dead_code))]
const HUGE_PAGE_BYTES: usize = 2 << 20;
const WORD_BYTES: usize = 8;

/// A zeroed, word-aligned block of memory shared as atomics.
pub struct Region {
    /// Start of the words, whichever backing holds them (kept here so `words` does not branch).
    data: *const AtomicU64,
    words_len: usize,
    kind: PageKind,
    backing: Backing,
}

enum Backing {
    /// A boxed slice turned into `data` by `Box::into_raw` (a raw pointer, so moving the region
    /// does not retag a Box and invalidate `data`), rebuilt and freed in `drop`.
    Heap,
    #[cfg(not(any(miri, loom)))]
    Mapped { map_base: *mut libc::c_void, map_bytes: usize },
}

// SAFETY: the region is plain memory accessed only through `&[AtomicU64]`, which is Sync; the raw
// pointers are owned by the region and unmapped only in `drop`, after every borrow has ended.
unsafe impl Send for Region {}
// SAFETY: as above: shared access is only ever through atomics.
unsafe impl Sync for Region {}

impl Region {
    /// A zeroed region of at least `bytes` bytes (rounded up to whole words), with the best pages
    /// `want` allows. Panics only if the machine is out of memory altogether.
    pub fn new(bytes: usize, want: HugePages) -> Region {
        Region::with_room(bytes, bytes, want)
    }

    /// A region of `bytes` that may grow to `room` bytes later without moving: anonymous
    /// memory is mapped at `room` and costs nothing until touched. Where the room cannot be
    /// had for free (hugetlb pages are reserved at mapping)
    /// the region is `bytes` long; [`Region::bytes`] says which. Small regions (under 512 KiB
    /// with their room) are zeroed heap memory, room and all.
    pub fn with_room(bytes: usize, room: usize, want: HugePages) -> Region {
        let words_len = bytes.div_ceil(WORD_BYTES).max(1);
        let room_words = room.div_ceil(WORD_BYTES).max(words_len);
        #[cfg(not(any(miri, loom)))]
        if room_words * WORD_BYTES >= HUGE_PAGE_BYTES / 4 {
            return map(words_len, room_words, want);
        }
        let _ = want;
        heap(room_words)
    }

    /// `bytes` (a multiple of 4096) of `file` from byte `offset` (a multiple of 4096), mapped
    /// shared: what is written is the file's, and what the file held is read back, so the
    /// memory survives the process (on tmpfs or a DAX file system, memcached's `-e`). The file
    /// must be at least `offset + bytes` long.
    #[cfg(not(any(miri, loom)))]
    pub fn from_file(file: &std::fs::File, offset: u64, bytes: usize) -> std::io::Result<Region> {
        use std::os::fd::AsRawFd;
        if bytes == 0 || bytes % 4096 != 0 || offset % 4096 != 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "unaligned memory-file region",
            ));
        }
        if file.metadata()?.len() < offset + bytes as u64 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "memory file too short"));
        }
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "offset too large"))?;
        // SAFETY: a fresh shared mapping of a file range the kernel places; no existing memory
        // is touched. The file is at least `offset + bytes` long (checked above), so no page of
        // the mapping lies past its end (which would SIGBUS when touched); the mapping holds its
        // own reference to the file, so closing `file` later does not unmap it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(mapped(base, bytes, base, bytes / WORD_BYTES, PageKind::File))
    }

    /// Gives the pages wholly at or after byte `from` back to the kernel (a shrunk log's end);
    /// they read as zero afterwards and are faulted in again when written. The caller
    /// guarantees nothing reachable lies there: the owner writes nothing there until the
    /// log grows again, and readers only reach memory through index slots, which point at
    /// live items only, and check what they read. A no-op on the heap and on hugetlb pages.
    pub fn release_from(&self, from: usize) {
        self.release_range(from, self.bytes());
    }

    /// [`Region::release_from`] for the pages wholly inside bytes `[from, to)` (`to` at most
    /// the region's size; a page that straddles either end is kept).
    pub fn release_range(&self, from: usize, to: usize) {
        #[cfg(not(any(miri, loom)))]
        if let Backing::Mapped { .. } = self.backing {
            // A file's pages hold its contents (they would read back as they are, not as
            // zero): nothing to give back.
            if self.kind == PageKind::Hugetlb || self.kind == PageKind::File {
                return;
            }
            let start = (self.data as usize + from).next_multiple_of(4096);
            let end = (self.data as usize + to.min(self.bytes())) & !4095;
            if start < end {
                // SAFETY: [start, end) lies inside this region's mapping (start is at or after
                // `data + from`, end at or before the region's end). MADV_DONTNEED on private anonymous
                // memory replaces the pages with zero-fill-on-demand ones: no memory is unmapped,
                // so the `&[AtomicU64]` views stay valid, and every access to them is atomic.
                unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
            }
        }
        #[cfg(any(miri, loom))]
        let _ = (from, to);
    }

    /// The memory as words.
    #[inline(always)]
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: `data` points to `words_len` initialised, 8-byte aligned words (a boxed slice or
        // a read-write mapping) that live as long as `self`; AtomicU64 has u64's layout, and all
        // access through the slice is atomic, so no data race is possible.
        unsafe { std::slice::from_raw_parts(self.data, self.words_len) }
    }

    /// Which pages backs this region.
    pub fn page_kind(&self) -> PageKind {
        self.kind
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.words_len * WORD_BYTES
    }
}

fn heap(words_len: usize) -> Region {
    let words: Box<[AtomicU64]> = (0..words_len).map(|_| AtomicU64::new(0)).collect();
    let data = Box::into_raw(words) as *const AtomicU64;
    Region { data, words_len, kind: PageKind::Heap, backing: Backing::Heap }
}

/// Whether the kernel will back `madvise(MADV_HUGEPAGE)` memory with huge pages.
#[cfg(not(any(miri, loom)))]
fn thp_enabled() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .map(|mode| mode.contains("[always]") || mode.contains("[madvise]"))
        .unwrap_or(false)
}

#[cfg(not(any(miri, loom)))]
fn map(words_len: usize, room_words: usize, want: HugePages) -> Region {
    let bytes = words_len * WORD_BYTES;
    if want != HugePages::Off {
        let huge_bytes = bytes.next_multiple_of(HUGE_PAGE_BYTES);
        // hugetlb pages are reserved when mapped: no room beyond what is asked for.
        if let Some(base) = mmap_anonymous(huge_bytes, libc::MAP_HUGETLB) {
            return mapped(base, huge_bytes, base, words_len, PageKind::Hugetlb);
        }
        let (words_len, huge_bytes) =
            (room_words, (room_words * WORD_BYTES).next_multiple_of(HUGE_PAGE_BYTES));
        if thp_enabled() {
            // Over-allocate by one huge page so the data can start on a 2 MiB boundary.
            let map_bytes = huge_bytes + HUGE_PAGE_BYTES;
            if let Some(base) = mmap_anonymous(map_bytes, 0) {
                let aligned = (base as usize).next_multiple_of(HUGE_PAGE_BYTES) as *mut libc::c_void;
                // SAFETY: [aligned, aligned + huge_bytes) lies inside the mapping just made.
                let advised = unsafe { libc::madvise(aligned, huge_bytes, libc::MADV_HUGEPAGE) };
                if advised == 0 {
                    return mapped(base, map_bytes, aligned, words_len, PageKind::TransparentHuge);
                }
                // SAFETY: unmapping exactly the mapping made above, never handed out.
                unsafe { libc::munmap(base, map_bytes) };
            }
        }
    }
    let room_bytes = room_words * WORD_BYTES;
    match mmap_anonymous(room_bytes, 0) {
        Some(base) => mapped(base, room_bytes, base, room_words, PageKind::Plain),
        None => heap(words_len),
    }
}

#[cfg(not(any(miri, loom)))]
fn mapped(
    map_base: *mut libc::c_void,
    map_bytes: usize,
    data: *mut libc::c_void,
    words_len: usize,
    kind: PageKind,
) -> Region {
    let data = data as *const AtomicU64;
    Region { data, words_len, kind, backing: Backing::Mapped { map_base, map_bytes } }
}

#[cfg(not(any(miri, loom)))]
fn mmap_anonymous(bytes: usize, extra_flags: libc::c_int) -> Option<*mut libc::c_void> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | extra_flags;
    // SAFETY: a fresh anonymous mapping at an address the kernel picks; no existing memory is
    // touched. hugetlb mappings are made without MAP_NORESERVE so the kernel reserves the pages
    // now and a later fault cannot SIGBUS.
    let flags = if extra_flags & libc::MAP_HUGETLB != 0 { flags & !libc::MAP_NORESERVE } else { flags };
    // SAFETY: see above.
    let base =
        unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    (base != libc::MAP_FAILED).then_some(base)
}

impl Drop for Region {
    fn drop(&mut self) {
        match self.backing {
            Backing::Heap => {
                let words = std::ptr::slice_from_raw_parts_mut(self.data as *mut AtomicU64, self.words_len);
                // SAFETY: `data`/`words_len` came from `Box::into_raw` of exactly this slice in
                // `heap` and are freed once, here; `&mut self` proves no borrow of them is alive.
                drop(unsafe { Box::from_raw(words) });
            }
            #[cfg(not(any(miri, loom)))]
            Backing::Mapped { map_base, map_bytes } => {
                // SAFETY: the mapping was made by `map` and is unmapped once; `&mut self` proves
                // no borrow of its words is alive.
                unsafe { libc::munmap(map_base, map_bytes) };
            }
        }
    }
}

/// Asks the CPU to start loading the cache line holding `words[index]`. A hint only: it has no
/// effect on program semantics and never faults.
#[inline(always)]
pub fn prefetch(words: &[AtomicU64], index: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
    if let Some(word) = words.get(index) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: prefetch is a hint that never dereferences the pointer architecturally; the
        // pointer is derived from a live reference anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(word.as_ptr() as *const i8) };
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri), not(loom))))]
    let _ = (words, index);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    /// Regression: `words()` used a pointer taken before the heap Box was moved into the region,
    /// which Miri reported as undefined behaviour (a moved Box is retagged).
    #[test]
    fn miri_region_words_survive_moving_the_region() {
        let region = Region::new(64, HugePages::Off);
        region.words()[3].store(5, Relaxed);
        let moved = vec![region];
        let boxed = Box::new(moved);
        assert_eq!(boxed[0].words()[3].load(Relaxed), 5);
    }

    #[test]
    fn miri_small_region_is_zeroed_heap() {
        let region = Region::new(100, HugePages::Auto);
        assert_eq!(region.words().len(), 13);
        assert!(region.words().iter().all(|w| w.load(Relaxed) == 0));
    }

    /// With hugetlb pages reserved (`echo 8 > /proc/sys/vm/nr_hugepages`) the region uses them;
    /// without, it falls back (covered by the test below).
    #[cfg(not(miri))]
    #[test]
    fn reserved_hugetlb_pages_are_used() {
        let free = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|info| {
                let line = info.lines().find(|line| line.starts_with("HugePages_Free:"))?.to_owned();
                line.split_whitespace().nth(1)?.parse::<usize>().ok()
            })
            .unwrap_or(0);
        let region = Region::new(HUGE_PAGE_BYTES, HugePages::Auto);
        if free >= 1 {
            assert_eq!(region.page_kind(), PageKind::Hugetlb);
        } else {
            assert_ne!(region.page_kind(), PageKind::Hugetlb);
        }
    }

    #[cfg(not(miri))]
    #[test]
    fn a_file_region_outlives_its_mapping() {
        let path = std::env::temp_dir().join(format!("qs-region-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(3 * 4096).unwrap();
        let region = Region::from_file(&file, 4096, 8192).unwrap();
        assert_eq!((region.page_kind(), region.words().len()), (PageKind::File, 1024));
        region.words()[5].store(0xfeed, Relaxed);
        drop(region);
        let again = Region::from_file(&file, 4096, 8192).unwrap();
        assert_eq!(again.words()[5].load(Relaxed), 0xfeed);
        assert!(Region::from_file(&file, 8192, 8192).is_err(), "past the file's end");
        assert!(Region::from_file(&file, 100, 4096).is_err(), "unaligned");
        drop(again);
        std::fs::remove_file(&path).unwrap();
    }

    #[cfg(not(miri))]
    #[test]
    fn large_region_is_mapped_zeroed_and_writable() {
        for want in [HugePages::Auto, HugePages::Off] {
            let region = Region::new(4 << 20, want);
            assert_ne!(region.page_kind(), PageKind::Heap);
            if want == HugePages::Off {
                assert_eq!(region.page_kind(), PageKind::Plain);
            }
            let words = region.words();
            assert_eq!(words.len(), (4 << 20) / 8);
            assert_eq!(words.as_ptr() as usize % 8, 0);
            if region.page_kind() != PageKind::Plain {
                assert_eq!(words.as_ptr() as usize % HUGE_PAGE_BYTES, 0);
            }
            words[words.len() - 1].store(7, Relaxed);
            assert_eq!(words[words.len() - 1].load(Relaxed), 7);
            assert_eq!(words[12345].load(Relaxed), 0);
        }
    }
}
