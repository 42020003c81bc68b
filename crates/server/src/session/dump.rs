//! `lru_crawler metadump`: every item's key and metadata, streamed a chunk at a time.
//!
//! memcached hands the connection to its crawler thread, which walks the LRUs and writes to
//! the socket as it goes. Here a dump is a cursor on the connection: each partition's main
//! index buckets are listed [`CHUNK_BUCKETS`] at a time, by the connection's worker for the
//! partitions it owns and by their owners for the rest (a chunk task on the rings between
//! workers, whose reply lands in order). Only a bounded amount is produced ahead of
//! what the client has read, so a dump of any size runs in bounded memory and never holds up
//! the worker's other connections.

use std::ops::Range;

/// Main index buckets per chunk: at most 15 items each, so a chunk's lines stay well under
/// a megabyte even with 250-byte keys that all need escaping, and a chunk of ordinary items
/// (about 20 KB of lines) takes the worker about a tenth of a millisecond.
pub const CHUNK_BUCKETS: usize = 32;
/// A dump waits for the client once this much of its output is unsent.
pub const OUTPUT_AHEAD_BYTES: usize = 1 << 20;
/// A dump lists at most this much in one loop turn (at least one chunk), then lets the
/// worker's other connections run: listing a megabyte at once held them up 4-5 ms (a probe's
/// p99 went from 0.14 to 6 ms while a million items were dumped; docs/BENCHMARKS.md,
/// "Replacing a node").
pub const TURN_BYTES: usize = 32 << 10;
/// Chunks handed to owners and not yet answered, at most.
pub const CHUNKS_IN_FLIGHT: u32 = 4;

/// Where a running dump stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The partition being listed.
    pub partition: usize,
    /// Its next main bucket.
    pub bucket: usize,
    /// `mgdump`: keys only.
    pub keys: bool,
}

impl Cursor {
    /// The next chunk of a dump over `partitions` partitions of `buckets` main buckets each,
    /// moving the cursor past it; `None` when the dump is complete.
    pub fn next_chunk(&mut self, partitions: usize, buckets: usize) -> Option<(usize, Range<usize>)> {
        if self.bucket >= buckets {
            self.partition += 1;
            self.bucket = 0;
        }
        if self.partition >= partitions || buckets == 0 {
            return None;
        }
        let start = self.bucket;
        self.bucket = (start + CHUNK_BUCKETS).min(buckets);
        Some((self.partition, start..self.bucket))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_covers_every_bucket_of_every_partition_once() {
        for (partitions, buckets) in [(1, 1), (4, 128), (2, 300), (3, 1000)] {
            let mut cursor = Cursor::default();
            let mut seen = vec![vec![0u8; buckets]; partitions];
            while let Some((partition, range)) = cursor.next_chunk(partitions, buckets) {
                assert!(range.len() <= CHUNK_BUCKETS && !range.is_empty());
                for bucket in range {
                    seen[partition][bucket] += 1;
                }
            }
            assert!(seen.iter().flatten().all(|&count| count == 1), "{partitions} x {buckets}");
            assert_eq!(cursor.next_chunk(partitions, buckets), None);
        }
    }
}
