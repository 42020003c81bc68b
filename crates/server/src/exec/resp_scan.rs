//! The Redis protocol's walks of the keyspace: KEYS, SCAN and RANDOMKEY. Every partition's
//! index is walked bucket by bucket, the worker's own partitions directly and the others'
//! through their CREW readers (without CREW another worker's keys are not seen here), as
//! `lru_crawler metadump` walks them. A SCAN cursor names the partition and bucket to go on
//! from: keys there the whole time are listed at least once, whatever is written meanwhile
//! (an index that grows splits a bucket into one at a higher number, which is walked later).

use super::*;
use qs_proto::resp::command::Scan;
use qs_proto::resp::glob;
use qs_proto::resp::reply;

impl Engine {
    /// Calls `visit` with each key held in buckets `buckets` of partition `partition`.
    fn walk(&self, partition: usize, buckets: std::ops::Range<usize>, visit: &mut dyn FnMut(&[u8])) {
        let mut visit_item = |item: &qs_store::Dumped<'_>| visit(item.key);
        match (&self.partitions[partition], self.shared.map.reader(partition)) {
            (Some(owned), _) => owned.dump(buckets, self.now, &mut visit_item),
            (None, Some(reader)) if self.crew => reader.dump(buckets, self.now, &mut visit_item),
            _ => {}
        }
    }

    /// KEYS: every key matching `pattern`, in one array (as redis-server: SCAN walks a
    /// large keyspace in steps).
    pub(super) fn resp_keys_matching(&self, pattern: &[u8], out: &mut Vec<u8>) {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let every = pattern == b"*";
        for partition in 0..self.partitions.len() {
            self.walk(partition, 0..self.shared.memory.main_buckets(), &mut |key| {
                if every || glob::matches(pattern, key, false) {
                    keys.push(key.to_vec());
                }
            });
        }
        array(keys.iter().map(Vec::as_slice), keys.len(), out);
    }

    /// SCAN: the keys of the next `count` buckets from the cursor, and the cursor after them
    /// (0 once every partition is walked).
    pub(super) fn resp_scan(&self, scan: &Scan<'_>, out: &mut Vec<u8>) {
        let buckets = self.shared.memory.main_buckets() as u64;
        let total = buckets * self.partitions.len() as u64;
        let mut at = scan.cursor;
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let end = at.saturating_add(scan.count as u64).min(total);
        while at < end {
            let (partition, bucket) = ((at / buckets) as usize, (at % buckets) as usize);
            // To the end of this partition's buckets at most.
            let stop = end.min((partition as u64 + 1) * buckets);
            let range = bucket..bucket + (stop - at) as usize;
            self.walk(partition, range, &mut |key| {
                if scan.strings && scan.pattern.map_or(true, |pattern| glob::matches(pattern, key, false)) {
                    keys.push(key.to_vec());
                }
            });
            at = stop;
        }
        let next = if at >= total { 0 } else { at };
        out.extend_from_slice(b"*2\r\n");
        reply::bulk(next.to_string().as_bytes(), out);
        array(keys.iter().map(Vec::as_slice), keys.len(), out);
    }

    /// RANDOMKEY: the first key found from a random partition and bucket on (null when
    /// there is none).
    pub(super) fn resp_random_key(&self, resp3: bool, out: &mut Vec<u8>) {
        let buckets = self.shared.memory.main_buckets();
        let total = buckets * self.partitions.len();
        let start = random_below(total);
        // Buckets a chunk at a time, wrapping round once.
        let mut walked = 0;
        while walked < total {
            let at = (start + walked) % total;
            let (partition, bucket) = (at / buckets, at % buckets);
            let chunk = (buckets - bucket).min(total - walked).min(4096);
            let mut found = None;
            self.walk(partition, bucket..bucket + chunk, &mut |key| {
                if found.is_none() {
                    found = Some(key.to_vec());
                }
            });
            if let Some(key) = found {
                return reply::bulk(&key, out);
            }
            walked += chunk;
        }
        out.extend_from_slice(reply::null(resp3));
    }
}

/// An array of `len` bulk strings.
fn array<'a>(items: impl Iterator<Item = &'a [u8]>, len: usize, out: &mut Vec<u8>) {
    out.push(b'*');
    qs_proto::response::push_u64(out, len as u64);
    out.extend_from_slice(b"\r\n");
    for item in items {
        reply::bulk(item, out);
    }
}

/// A number below `bound` (not 0), from the clock's nanoseconds mixed (splitmix64): RANDOMKEY
/// needs spread, not secrecy.
fn random_below(bound: usize) -> usize {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut z = nanos.as_nanos() as u64 ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % bound.max(1) as u64) as usize
}
