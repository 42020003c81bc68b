//! `watch`: connections that receive the server's log lines (memcached's watchers): lookups
//! (`fetchers`), stores (`mutations`), evictions and connections opened and closed, in
//! memcached 1.6.18's line format.
//!
//! Nothing is formatted unless a watcher asked for that stream (one relaxed load per event
//! otherwise). A line goes into each matching watcher's buffer, bounded by
//! `-o watcher_logbuf_size`; a line that does not fit is counted and reported later as
//! `skipped=N`, so a watcher that does not read costs bounded memory and slows no one. The
//! worker that owns the watcher's connection sends what its buffer holds.

use qs_proto::text::watch as streams;
use std::io::Write as _;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64};
use std::sync::{Arc, Mutex};

/// One watcher: its streams and the lines waiting for it.
#[derive(Debug)]
pub struct Sink {
    streams: u16,
    /// The worker that owns the connection (it sends the lines).
    pub owner: usize,
    held: Mutex<Held>,
    /// Lines were logged for it (sent or skipped) since the owner last looked: the owner
    /// should try its socket again.
    ready: AtomicBool,
}

#[derive(Debug, Default)]
struct Held {
    bytes: Vec<u8>,
    /// Lines that did not fit since the last `skipped=` line.
    skipped: u64,
}

impl Sink {
    /// Whether lines were logged since the owner last looked (see [`Sink::look`]).
    pub fn is_ready(&self) -> bool {
        self.ready.load(SeqCst)
    }

    /// Whether lines were logged since the last look; the next line logged wakes the owner.
    pub fn look(&self) -> bool {
        self.ready.swap(false, SeqCst)
    }

    /// Moves the waiting lines to `out`; how many bytes moved.
    pub fn take(&self, out: &mut Vec<u8>) -> usize {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        out.extend_from_slice(&held.bytes);
        let len = held.bytes.len();
        held.bytes.clear();
        len
    }
}

/// Every watcher.
#[derive(Debug)]
pub struct Watchers {
    /// The streams some watcher wants.
    wanted: AtomicU16,
    sinks: Mutex<Vec<Arc<Sink>>>,
    /// Bytes held for one watcher at most.
    buffer_bytes: usize,
    /// Lines numbered in the order they were logged (memcached's `gid`).
    next_gid: AtomicU64,
    /// Lines not delivered because a watcher's buffer was full (`log_watcher_skipped`).
    pub skipped: AtomicU64,
    /// Bytes handed to watchers' connections (`log_watcher_sent`).
    pub sent: AtomicU64,
    /// Lines logged (`log_worker_written`).
    pub written: AtomicU64,
}

impl Watchers {
    /// No watchers; each may hold `buffer_bytes` of lines.
    pub fn new(buffer_bytes: usize) -> Watchers {
        Watchers {
            wanted: AtomicU16::new(0),
            sinks: Mutex::new(Vec::new()),
            buffer_bytes,
            next_gid: AtomicU64::new(1),
            skipped: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            written: AtomicU64::new(0),
        }
    }

    /// Whether some watcher wants `stream` (the only cost of logging when none does).
    #[inline]
    pub fn wants(&self, stream: u16) -> bool {
        self.wanted.load(Relaxed) & stream != 0
    }

    /// Adds a watcher of `streams` whose connection worker `owner` serves.
    pub fn add(&self, streams: u16, owner: usize) -> Arc<Sink> {
        let sink = Arc::new(Sink {
            streams,
            owner,
            held: Mutex::new(Held::default()),
            ready: AtomicBool::new(false),
        });
        let mut sinks = self.lock();
        sinks.push(sink.clone());
        self.wanted.fetch_or(streams, Relaxed);
        sink
    }

    /// Removes a watcher (its connection closed).
    pub fn remove(&self, sink: &Arc<Sink>) {
        let mut sinks = self.lock();
        sinks.retain(|other| !Arc::ptr_eq(other, sink));
        self.wanted.store(sinks.iter().fold(0, |all, sink| all | sink.streams), Relaxed);
    }

    /// Watchers connected (`log_watchers`).
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Sink>>> {
        self.sinks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Logs one line of `stream` (`body` is what follows `ts=... gid=... `); returns the
    /// workers to wake (as bits): those whose watchers had nothing logged since they looked.
    pub fn log(&self, stream: u16, body: std::fmt::Arguments<'_>) -> u64 {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let gid = self.next_gid.fetch_add(1, Relaxed);
        let mut line = Vec::with_capacity(160);
        let _ = writeln!(line, "ts={}.{} gid={gid} {body}", now.as_secs(), now.subsec_micros());
        self.written.fetch_add(1, Relaxed);
        let mut wake = 0;
        for sink in self.lock().iter().filter(|sink| sink.streams & stream != 0) {
            let mut held = sink.held.lock().unwrap_or_else(|e| e.into_inner());
            let notice = if held.skipped > 0 { format!("skipped={}\n", held.skipped) } else { String::new() };
            if held.bytes.len() + notice.len() + line.len() > self.buffer_bytes {
                held.skipped += 1;
                self.skipped.fetch_add(1, Relaxed);
            } else {
                held.bytes.extend_from_slice(notice.as_bytes());
                held.bytes.extend_from_slice(&line);
                held.skipped = 0;
            }
            drop(held);
            // Skipped or not, the owner tries the socket again (it may have room by now).
            if !sink.ready.swap(true, SeqCst) {
                wake |= 1 << (sink.owner % 64);
            }
        }
        wake
    }
}

/// `key=` as memcached writes it: URI-encoded, letters, digits and `-._~` as they are.
pub struct UriKey<'a>(pub &'a [u8]);

impl std::fmt::Display for UriKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for &byte in self.0 {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
                write!(f, "{}", byte as char)?;
            } else {
                write!(f, "%{byte:02X}")?;
            }
        }
        Ok(())
    }
}

/// The slab class memcached 1.6 would keep an item of this key and value in with its default
/// settings (`-n 48 -f 1.25`, slab_chunk_max 512 KiB: classes of 96, 120, 152, ... 394840 bytes,
/// then 524288, which also holds the chunks of larger items), so `clsid=` reads as it does
/// there. Quicksilver's logs have no classes; this only keeps the lines comparable.
pub fn slab_class(key_len: usize, value_len: usize) -> u32 {
    const CHUNK_MAX: usize = 512 << 10;
    // memcached's item header with CAS (56 bytes), the key and its NUL, the value and CRLF.
    let total = 56 + key_len + 1 + value_len + 2;
    let mut size = 96.0f64;
    let mut class = 1;
    while size < CHUNK_MAX as f64 / 1.25 {
        let aligned = (size as usize).div_ceil(8) * 8;
        if total <= aligned {
            return class;
        }
        size = aligned as f64 * 1.25;
        class += 1;
    }
    class
}

/// The streams, for callers.
pub use streams::{CONNEVENTS, DELETIONS, EVICTIONS, FETCHERS, MUTATIONS};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_classes_are_memcached_defaults() {
        // Totals at class edges: 96, 120, then 394840 (class 38) and the largest (39).
        assert_eq!(slab_class(1, 96 - 60), 1);
        assert_eq!(slab_class(1, 96 - 59), 2);
        assert_eq!(slab_class(1, 120 - 60), 2);
        assert_eq!(slab_class(0, 394840 - 59), 38);
        assert_eq!(slab_class(0, 394840 - 58), 39);
        assert_eq!(slab_class(10, 4 << 20), 39);
    }

    #[test]
    fn keys_are_uri_encoded_as_memcached_does() {
        assert_eq!(UriKey(b"a-b.c_d~e").to_string(), "a-b.c_d~e");
        assert_eq!(UriKey(b"#k y/").to_string(), "%23k%20y%2F");
    }

    #[test]
    fn a_full_buffer_skips_lines_and_says_so_once_there_is_room() {
        let watchers = Watchers::new(200);
        assert!(!watchers.wants(FETCHERS));
        let sink = watchers.add(FETCHERS | MUTATIONS, 1);
        assert!(watchers.wants(FETCHERS) && !watchers.wants(EVICTIONS));
        assert_eq!(watchers.log(FETCHERS, format_args!("type=item_get key=a")), 1 << 1);
        assert_eq!(watchers.log(FETCHERS, format_args!("type=item_get key=b")), 0, "woken twice");
        assert!(sink.look() && !sink.look(), "a look clears the mark");
        assert_eq!(watchers.log(FETCHERS, format_args!("type=item_get key=b2")), 1 << 1, "not woken again");
        assert_eq!(watchers.log(EVICTIONS, format_args!("type=eviction key=c")), 0);
        let long = "x".repeat(150);
        watchers.log(MUTATIONS, format_args!("{long}"));
        watchers.log(MUTATIONS, format_args!("{long}"));
        assert_eq!(watchers.skipped.load(Relaxed), 2);
        assert!(sink.is_ready());
        let mut out = Vec::new();
        sink.take(&mut out);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("ts=") && lines[0].contains(" gid=1 type=item_get key=a"));
        assert!(lines[1].contains(" gid=2 type=item_get key=b"));
        assert!(lines[2].contains(" gid=3 type=item_get key=b2"));
        watchers.log(FETCHERS, format_args!("type=item_get key=d"));
        let mut out = Vec::new();
        sink.take(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("skipped=2\nts="), "{text}");
        watchers.remove(&sink);
        assert!(!watchers.wants(FETCHERS));
        assert_eq!(watchers.count(), 0);
    }
}
