//! The flash tier's log (`-o ext_path`): items that leave the head of a
//! partition's DRAM log go on, in large sequential writes, to a circular log in a file on flash.
//!
//! The log is cut into pages of `page_bytes` (memcached's extstore writes whole pages too). The
//! page being filled lives in memory (the write buffer); when the next record does not fit, the
//! buffer is written to the file in one `pwrite` at the page's place and a new page starts. A
//! page's place is reused once the log has gone round: logical offsets grow for ever (as the
//! DRAM log's do), page `n` lives at `(n mod pages) * page_bytes` of the file's region, and an
//! offset is live while its page is one of the last `pages` (the one in memory included). So an
//! index slot that points at flash needs no invalidation when its page is overwritten: it stops
//! being live, as a DRAM slot does when the head passes it.
//!
//! A write that fails (an I/O error, a full device, a file removed behind the server's back)
//! turns the tier off: appends are refused from then on, reads of pages already written go on,
//! and nothing in DRAM is touched; [`FlashStats::failed`] says so.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// What the flash log has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlashStats {
    /// Records appended.
    pub records: u64,
    /// Bytes of records appended.
    pub record_bytes: u64,
    /// Pages written to the file.
    pub pages_written: u64,
    /// Bytes written to the file.
    pub bytes_written: u64,
    /// Pages whose place was reused (their records gone).
    pub pages_reused: u64,
    /// Reads served from the file.
    pub reads: u64,
    /// Bytes those reads brought.
    pub bytes_read: u64,
    /// Reads of the page still in memory.
    pub buffer_reads: u64,
    /// Writes that failed.
    pub write_errors: u64,
    /// Whether the tier turned itself off after a write error.
    pub failed: bool,
    /// Records (and their bytes) whose page was reused: gone from flash.
    pub records_evicted: u64,
    pub bytes_evicted: u64,
    /// The log's size in pages, and a page's bytes.
    pub pages: u64,
    pub page_bytes: u64,
}

/// The alignment O_DIRECT asks of a file position, a length and a buffer address.
pub const DIRECT_ALIGN: usize = 4096;

/// One aligned block of [`AlignedBuf`].
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Block([u8; DIRECT_ALIGN]);

/// Bytes at a [`DIRECT_ALIGN`]-aligned address, in whole blocks (what O_DIRECT reads into and
/// writes from). Its heap memory stays where it is while it lives (an io_uring read may hold
/// its address).
pub struct AlignedBuf {
    blocks: Vec<Block>,
}

impl AlignedBuf {
    /// Zeroed, at least `len` bytes (rounded up to whole blocks).
    pub fn zeroed(len: usize) -> AlignedBuf {
        AlignedBuf { blocks: vec![Block([0; DIRECT_ALIGN]); len.div_ceil(DIRECT_ALIGN)] }
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `Block` is `repr(C)` around a byte array of exactly its alignment, so it has
        // no padding and `blocks` is `len * DIRECT_ALIGN` initialized, contiguous bytes.
        unsafe {
            std::slice::from_raw_parts(self.blocks.as_ptr().cast::<u8>(), self.blocks.len() * DIRECT_ALIGN)
        }
    }

    /// Its bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; the borrow of `self` is unique.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.blocks.as_mut_ptr().cast::<u8>(),
                self.blocks.len() * DIRECT_ALIGN,
            )
        }
    }
}

/// The aligned span covering `len` bytes at `position`: its start and length.
pub fn direct_span(position: u64, len: usize) -> (u64, usize) {
    let start = position & !(DIRECT_ALIGN as u64 - 1);
    let end = (position + len as u64).next_multiple_of(DIRECT_ALIGN as u64);
    (start, (end - start) as usize)
}

/// Reads `len` bytes at `position` of `file` into `out` (appended; fewer at the end of the
/// file), through an aligned span when `direct` (a file opened with O_DIRECT). False when the
/// read failed or found nothing.
pub fn read_at(file: &File, position: u64, len: usize, direct: bool, out: &mut Vec<u8>) -> bool {
    let (start, span) = if direct { direct_span(position, len) } else { (position, len) };
    let mut aligned = direct.then(|| AlignedBuf::zeroed(span));
    let mut plain = Vec::new();
    let buf: &mut [u8] = match aligned.as_mut() {
        Some(aligned) => &mut aligned.bytes_mut()[..span],
        None => {
            plain.resize(span, 0);
            &mut plain
        }
    };
    let mut got = 0;
    while got < span {
        match file.read_at(&mut buf[got..], start + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    let skip = (position - start) as usize;
    let end = got.min(skip + len);
    if end <= skip {
        return false;
    }
    out.extend_from_slice(&buf[skip..end]);
    true
}

/// Where a live record's bytes are.
#[derive(Debug, PartialEq, Eq)]
pub enum Place<'a> {
    /// In the page being filled, in memory.
    Buffer(&'a [u8]),
    /// In the file at this byte position.
    File(u64),
}

/// One partition's circular log on flash.
pub struct FlashLog {
    file: Arc<File>,
    /// Byte position of the region in the file.
    base: u64,
    page_bytes: u64,
    pages: u64,
    /// The page being filled (its number) and its bytes so far.
    page: u64,
    buffer: Vec<u8>,
    /// Bytes of `buffer` already in the file (written early by [`FlashLog::write_partial`]).
    flushed: usize,
    /// Per place in the file: the records (and bytes) of the page written there.
    placed: Vec<(u32, u64)>,
    /// Records (and bytes) in the page being filled.
    filling: (u32, u64),
    /// The file is opened with O_DIRECT: pages go out through this aligned copy, padded to
    /// whole blocks, and reads are of aligned spans.
    direct: Option<AlignedBuf>,
    stats: FlashStats,
}

impl FlashLog {
    /// A log in `bytes` of `file` from byte `base`, in pages of `page_bytes` (at least two
    /// pages fit, or `None`).
    pub fn new(file: Arc<File>, base: u64, bytes: u64, page_bytes: usize) -> Option<FlashLog> {
        let page_bytes = page_bytes.max(4096) as u64;
        let pages = bytes / page_bytes;
        (pages >= 2).then(|| FlashLog {
            file,
            base,
            page_bytes,
            pages,
            page: 0,
            buffer: Vec::with_capacity(page_bytes as usize),
            flushed: 0,
            placed: vec![(0, 0); pages as usize],
            filling: (0, 0),
            direct: None,
            stats: FlashStats { pages, page_bytes, ..FlashStats::default() },
        })
    }

    /// The same log on a file opened with O_DIRECT (its region and pages must be aligned to
    /// [`DIRECT_ALIGN`]: `None` otherwise).
    pub fn direct(mut self) -> Option<FlashLog> {
        let aligned = self.base % DIRECT_ALIGN as u64 == 0 && self.page_bytes % DIRECT_ALIGN as u64 == 0;
        self.direct = Some(AlignedBuf::zeroed(self.page_bytes as usize));
        aligned.then_some(self)
    }

    /// Whether reads must be of aligned spans (O_DIRECT).
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// The file it is in (readers on other threads read it with `pread`).
    pub fn file(&self) -> Arc<File> {
        Arc::clone(&self.file)
    }

    /// Counts a read made by another thread at a [`Place::File`] (`bytes` read), or from the
    /// page in memory.
    pub fn count_read(&mut self, bytes: usize, from_buffer: bool) {
        if from_buffer {
            self.stats.buffer_reads += 1;
        } else {
            self.stats.reads += 1;
            self.stats.bytes_read += bytes as u64;
        }
    }

    /// Logical offset below which every record is in the file: whole pages, then what
    /// [`FlashLog::write_partial`] wrote of the page being filled.
    pub fn durable(&self) -> u64 {
        self.page * self.page_bytes + self.flushed as u64
    }

    /// Takes the log up where a stop left it: the records below `durable` (as
    /// [`FlashLog::durable`] said then) are live again, and appends go on after them (the
    /// page they end in is read back into memory). Nothing may have been appended since it
    /// was made. False (and the log left empty) when that page cannot be read.
    pub fn resume(&mut self, durable: u64) -> bool {
        debug_assert!(self.buffer.is_empty() && self.page == 0, "resumed after use");
        let (page, within) = (durable / self.page_bytes, (durable % self.page_bytes) as usize);
        if within > 0 {
            let place = self.base + (page % self.pages) * self.page_bytes;
            let mut prefix = Vec::with_capacity(self.page_bytes as usize);
            if !read_at(&self.file, place, within, self.direct.is_some(), &mut prefix)
                || prefix.len() != within
            {
                return false;
            }
            self.buffer = prefix;
        }
        self.page = page;
        self.flushed = within;
        true
    }

    /// Bytes of one page: the largest record the log takes.
    pub fn page_bytes(&self) -> usize {
        self.page_bytes as usize
    }

    /// Bytes of the log (whole pages).
    pub fn bytes(&self) -> u64 {
        self.pages * self.page_bytes
    }

    /// What it has done.
    pub fn stats(&self) -> FlashStats {
        self.stats
    }

    /// Whether appends are taken (not after a write error).
    pub fn is_on(&self) -> bool {
        !self.stats.failed
    }

    /// Appends `record` and returns its logical offset; `None` when the tier is off or the
    /// record is larger than a page. The page in memory goes to the file first when the record
    /// does not fit in it.
    pub fn append(&mut self, record: &[u8]) -> Option<u64> {
        if self.stats.failed || record.len() as u64 > self.page_bytes {
            return None;
        }
        if (self.buffer.len() + record.len()) as u64 > self.page_bytes && !self.write_page() {
            return None;
        }
        let offset = self.page * self.page_bytes + self.buffer.len() as u64;
        self.buffer.extend_from_slice(record);
        self.stats.records += 1;
        self.stats.record_bytes += record.len() as u64;
        self.filling.0 += 1;
        self.filling.1 += record.len() as u64;
        Some(offset)
    }

    /// Writes the page in memory to its place and starts the next; false (and the tier off)
    /// when the write fails.
    fn write_page(&mut self) -> bool {
        let written = self.write_buffer();
        self.finish_page(written)
    }

    /// Writes what the page being filled holds so far to its place (it is written again,
    /// whole, when full), so a crash loses no record appended before; false (and the tier off)
    /// when the write fails.
    pub fn write_partial(&mut self) -> bool {
        if self.stats.failed || self.buffer.len() == self.flushed {
            return !self.stats.failed;
        }
        match self.write_buffer() {
            Ok(()) => {
                self.stats.bytes_written += (self.buffer.len() - self.flushed) as u64;
                self.flushed = self.buffer.len();
                true
            }
            Err(_) => {
                self.stats.write_errors += 1;
                self.stats.failed = true;
                false
            }
        }
    }

    /// Writes the page being filled, as far as it holds, to its place.
    fn write_buffer(&mut self) -> std::io::Result<()> {
        let place = self.base + (self.page % self.pages) * self.page_bytes;
        match self.direct.as_mut() {
            Some(staging) => {
                let padded = self.buffer.len().next_multiple_of(DIRECT_ALIGN);
                let bytes = &mut staging.bytes_mut()[..padded];
                bytes[..self.buffer.len()].copy_from_slice(&self.buffer);
                bytes[self.buffer.len()..].fill(0);
                self.file.write_all_at(bytes, place)
            }
            None => self.file.write_all_at(&self.buffer, place),
        }
    }

    fn finish_page(&mut self, written: std::io::Result<()>) -> bool {
        match written {
            Ok(()) => {
                self.stats.pages_written += 1;
                self.stats.bytes_written += self.buffer.len() as u64;
                self.flushed = 0;
                let place = (self.page % self.pages) as usize;
                let (records, bytes) =
                    std::mem::replace(&mut self.placed[place], std::mem::take(&mut self.filling));
                self.stats.records_evicted += u64::from(records);
                self.stats.bytes_evicted += bytes;
                self.page += 1;
                if self.page >= self.pages {
                    // The next page's place held page `page - pages`: its records are gone.
                    self.stats.pages_reused += 1;
                }
                self.buffer.clear();
                true
            }
            Err(_) => {
                self.stats.write_errors += 1;
                self.stats.failed = true;
                false
            }
        }
    }

    /// Bytes appended after the record at `offset` (how old it is).
    pub fn age(&self, offset: u64) -> u64 {
        (self.page * self.page_bytes + self.buffer.len() as u64).saturating_sub(offset)
    }

    /// Whether the record at logical `offset` is still in the log (its page not reused).
    #[inline]
    pub fn is_live(&self, offset: u64) -> bool {
        let page = offset / self.page_bytes;
        page <= self.page && page + self.pages > self.page
    }

    /// Where the `len` bytes at live `offset` are, or `None` when they are gone.
    pub fn place(&self, offset: u64, len: usize) -> Option<Place<'_>> {
        if !self.is_live(offset) || offset % self.page_bytes + len as u64 > self.page_bytes {
            return None;
        }
        let within = (offset % self.page_bytes) as usize;
        if offset / self.page_bytes == self.page {
            // The page being filled holds only what was appended: a read of a fixed size
            // gets the rest of it.
            return self.buffer.get(within..(within + len).min(self.buffer.len())).map(Place::Buffer);
        }
        Some(Place::File(
            self.base + (offset / self.page_bytes % self.pages) * self.page_bytes + within as u64,
        ))
    }

    /// Reads `len` bytes at `offset` into `out` (appended; fewer from the page still in memory
    /// when it holds fewer), waiting for the device: for the
    /// flash tier's I/O threads and for tests. False when the record is gone or the read
    /// failed. A page reused while the read was in flight is caught by the caller, which
    /// checks [`FlashLog::is_live`] again and the key it finds.
    pub fn read(&mut self, offset: u64, len: usize, out: &mut Vec<u8>) -> bool {
        match self.place(offset, len) {
            None => false,
            Some(Place::Buffer(bytes)) => {
                out.extend_from_slice(bytes);
                self.stats.buffer_reads += 1;
                true
            }
            Some(Place::File(position)) => {
                // A page is written as long as it was filled, so a read of a fixed size near
                // its end may stop at the file's end: what is there is the record.
                let start = out.len();
                let read = read_at(&self.file, position, len, self.direct.is_some(), out);
                if read {
                    self.stats.reads += 1;
                    self.stats.bytes_read += (out.len() - start) as u64;
                }
                read
            }
        }
    }
}

#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    fn temp(name: &str) -> (std::path::PathBuf, Arc<File>) {
        let path = std::env::temp_dir().join(format!("qs-flash-{name}-{}", std::process::id()));
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        (path, Arc::new(file))
    }

    fn record(n: u64) -> Vec<u8> {
        format!("record {n};").repeat(1 + (n % 300) as usize).into_bytes()
    }

    #[test]
    fn records_read_back_from_the_buffer_and_the_file_until_their_page_is_reused() {
        let (path, file) = temp("laps");
        let mut log = FlashLog::new(file, 8192, 8 * 4096, 4096).unwrap();
        let mut offsets = Vec::new();
        for n in 0..2000u64 {
            let offset = log.append(&record(n)).expect("taken");
            offsets.push(offset);
            // Every record still live reads back as written; every older one is gone.
            if n % 97 == 0 {
                for (m, &at) in offsets.iter().enumerate() {
                    let mut out = Vec::new();
                    let want = record(m as u64);
                    if log.is_live(at) {
                        assert!(log.read(at, want.len(), &mut out), "record {m}");
                        assert_eq!(out, want, "record {m}");
                    } else {
                        assert!(!log.read(at, want.len(), &mut out));
                    }
                }
            }
        }
        let stats = log.stats();
        assert!(stats.pages_reused > 0 && stats.reads > 0 && stats.buffer_reads > 0, "{stats:?}");
        // The live records are those of the last 8 pages (records of up to 3.6 KB leave
        // pages part empty).
        let live: u64 = offsets
            .iter()
            .enumerate()
            .filter(|(_, &at)| log.is_live(at))
            .map(|(n, _)| record(n as u64).len() as u64)
            .sum();
        assert!(live > 3 * 4096 && live <= 8 * 4096, "{live}");
        // Evicted records are those of pages whose place was reused (counted a page late: a
        // page's records die when its place is next written).
        let dead = offsets.iter().filter(|&&at| !log.is_live(at)).count() as u64;
        assert!(stats.records_evicted <= dead, "{} > {dead}", stats.records_evicted);
        assert!(dead - stats.records_evicted < 2 * 4096 / 10, "{} vs {dead}", stats.records_evicted);
        assert_eq!(stats.records, 2000);
        // Nothing was written outside the region.
        assert!(std::fs::metadata(&path).unwrap().len() <= 8192 + 8 * 4096);
        assert_eq!(log.append(&vec![0; 4097]), None, "larger than a page");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_direct_log_reads_back_what_it_wrote() {
        use std::os::unix::fs::OpenOptionsExt;
        let path = std::env::temp_dir().join(format!("qs-flash-direct-{}", std::process::id()));
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path);
        let Ok(file) = opened else {
            eprintln!("skipped: no O_DIRECT on {}", path.display());
            return;
        };
        let mut log = FlashLog::new(Arc::new(file), 8192, 8 * 8192, 8192).unwrap().direct().expect("aligned");
        let mut offsets = Vec::new();
        for n in 0..200u64 {
            offsets.push(log.append(&record(n)).expect("taken"));
        }
        let live: Vec<(usize, u64)> =
            offsets.iter().copied().enumerate().filter(|&(_, at)| log.is_live(at)).collect();
        assert!(live.len() > 20);
        for (n, at) in live {
            let want = record(n as u64);
            let mut out = Vec::new();
            assert!(log.read(at, want.len(), &mut out), "record {n}");
            assert_eq!(out, want, "record {n}");
        }
        assert!(log.stats().reads > 0);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_failed_write_turns_the_tier_off_and_keeps_what_was_read_before() {
        let (path, _) = temp("readonly");
        let file = Arc::new(File::open(&path).unwrap()); // read-only: every write fails
        let mut log = FlashLog::new(file, 0, 4 * 4096, 4096).unwrap();
        let first = log.append(b"in memory").unwrap();
        let mut appended = 1;
        while log.append(&[7; 1000]).is_some() {
            appended += 1;
        }
        assert!(appended >= 4, "a page's worth went in before the write");
        let stats = log.stats();
        assert!(stats.failed && !log.is_on() && stats.write_errors == 1, "{stats:?}");
        assert_eq!(log.append(b"more"), None);
        let mut out = Vec::new();
        assert!(log.read(first, 9, &mut out), "the page still in memory reads");
        assert_eq!(out, b"in memory");
        std::fs::remove_file(path).unwrap();
    }
}

/// The aligned buffer's unsafe views, under Miri too (`miri_` tests run there).
#[cfg(test)]
mod miri_tests {
    use super::*;

    #[test]
    fn miri_an_aligned_buffer_is_aligned_and_whole() {
        let mut buf = AlignedBuf::zeroed(5000);
        assert_eq!(buf.bytes().len(), 8192);
        assert_eq!(buf.bytes().as_ptr() as usize % DIRECT_ALIGN, 0);
        buf.bytes_mut()[8191] = 7;
        buf.bytes_mut()[0] = 1;
        assert_eq!((buf.bytes()[0], buf.bytes()[4096], buf.bytes()[8191]), (1, 0, 7));
        assert_eq!(direct_span(4100, 10), (4096, 4096));
        assert_eq!(direct_span(4090, 10), (0, 8192));
        assert_eq!(direct_span(8192, 4096), (8192, 4096));
    }
}
