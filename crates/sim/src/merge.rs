//! Segcache's Merge eviction (Yang et al., NSDI'21, as Pelikan's segcache crate 0.3 does it),
//! simulated directly: items are appended to fixed-size segments (64 of them, as Pelikan's
//! shipped config has at 64 MB); when no segment is free, a chain of the oldest segments from
//! the merge cursor is merged into its first one. Each segment of the chain is pruned to about
//! a quarter of a segment, dropping the items whose read count, weighed by their size against
//! the segment's mean (`freq / (size / mean)`), is at or below a cutoff that adapts as the
//! segment is walked; what remains is copied into the first segment until it is 80% full, and
//! the other segments are freed. Reads count to 16, then with falling probability to 127;
//! counts survive overwrites and copies. A set of a cached key appends a new version (the old
//! one is dead bytes until its segment is merged) and a get miss fills the cache (look-aside),
//! as the other models do. Without TTLs, so one chain (Segcache keeps one per TTL bucket).

use crate::rng::Rng;
use crate::stream::{Access, Op};
use hashbrown::HashMap;

/// Segments in the cache.
const SEGMENTS: u64 = 64;
/// Segments a merge wants (its target keeps 1/N of each).
const N_MERGE: usize = 4;
/// Segments one merge takes at most.
const MAX_MERGE: usize = 8;
/// The highest read count.
const FREQ_MAX: u8 = 127;

struct Item {
    bytes: u64,
    freq: u8,
    /// The segment holding the live version.
    segment: usize,
    /// Matches the generation of its one live segment entry.
    generation: u64,
}

#[derive(Default)]
struct Segment {
    /// Keys appended, with their generation (stale entries are dead bytes).
    entries: Vec<(u64, u64)>,
    /// Bytes appended (live and dead).
    used: u64,
}

/// One Segcache-with-Merge cache.
pub struct MergeCache {
    capacity: u64,
    segment_bytes: u64,
    segments: Vec<Segment>,
    /// Segment numbers in write order, oldest first; the last is the one written to.
    chain: Vec<usize>,
    free: Vec<usize>,
    /// Where the next merge starts in `chain`.
    cursor: usize,
    items: HashMap<u64, Item>,
    generation: u64,
    rng: Rng,
    /// Whether a get that misses is followed by a set (look-aside).
    fill: bool,
    gets: u64,
    hits: u64,
}

impl MergeCache {
    /// An empty cache of `capacity` bytes.
    pub fn new(capacity: u64) -> MergeCache {
        let segment_bytes = (capacity / SEGMENTS).max(1);
        MergeCache {
            capacity,
            segment_bytes,
            segments: (0..SEGMENTS).map(|_| Segment::default()).collect(),
            chain: Vec::new(),
            free: (0..SEGMENTS as usize).rev().collect(),
            cursor: 0,
            items: HashMap::new(),
            generation: 0,
            rng: Rng::new(capacity),
            fill: true,
            gets: 0,
            hits: 0,
        }
    }

    /// The same cache, filling on a miss or not (`--no-fill`: memtier's load, where only
    /// sets write).
    pub fn filling(mut self, fill: bool) -> MergeCache {
        self.fill = fill;
        self
    }

    /// Replays one request; `bytes` is what the item takes.
    pub fn access(&mut self, access: &Access, bytes: u64) {
        match access.op {
            Op::Get => {
                self.gets += 1;
                match self.items.get_mut(&access.key) {
                    Some(item) => {
                        self.hits += 1;
                        let freq = item.freq;
                        if freq < FREQ_MAX && (freq <= 16 || self.rng.below(u64::from(freq)) == 0) {
                            item.freq += 1;
                        }
                    }
                    None if self.fill => self.append(access.key, bytes, 1),
                    None => {}
                }
            }
            Op::Set => {
                // A new key starts at one (Segcache's hashtable links it so), which the
                // size weighting turns into a preference for small items never read.
                let freq = self.items.get(&access.key).map_or(1, |item| item.freq);
                self.append(access.key, bytes, freq);
            }
            Op::Delete => {
                self.items.remove(&access.key);
            }
        }
    }

    /// Appends a version of `key` to the segment written to, merging to free one when full.
    fn append(&mut self, key: u64, bytes: u64, freq: u8) {
        if bytes > self.segment_bytes {
            self.items.remove(&key);
            return;
        }
        let full =
            self.chain.last().map_or(true, |&last| self.segments[last].used + bytes > self.segment_bytes);
        if full {
            let mut merges = 0;
            while self.free.is_empty() {
                if merges < SEGMENTS {
                    self.merge();
                } else {
                    // Every merge kept whole segments (they cannot: the cutoff rises until
                    // items go), so the oldest is dropped outright.
                    self.drop_segment(0);
                }
                merges += 1;
            }
            let fresh = self.free.pop().expect("a merge frees a segment");
            self.segments[fresh] = Segment::default();
            self.chain.push(fresh);
        }
        let segment = *self.chain.last().expect("a segment is written to");
        self.generation += 1;
        self.segments[segment].entries.push((key, self.generation));
        self.segments[segment].used += bytes;
        self.items.insert(key, Item { bytes, freq, segment, generation: self.generation });
    }

    /// Whether the entry is the live version of its key, in `segment`.
    fn is_live(&self, segment: usize, (key, generation): (u64, u64)) -> bool {
        self.items.get(&key).is_some_and(|item| item.generation == generation && item.segment == segment)
    }

    /// Merge eviction from the cursor: the chain's first segment and up to MAX_MERGE after it
    /// (never the one written to).
    fn merge(&mut self) {
        let evictable = self.chain.len() - 1;
        if self.cursor + 3 > evictable {
            self.cursor = 0;
        }
        let chain_len = (evictable - self.cursor).min(MAX_MERGE);
        let target_ratio = if chain_len < N_MERGE { 1.0 / chain_len as f64 } else { 1.0 / N_MERGE as f64 };
        let stop_bytes = ((target_ratio * (N_MERGE - 1) as f64 + 0.05) * self.segment_bytes as f64) as u64;
        let dst = self.chain[self.cursor];
        let mut cutoff = self.prune(dst, 1.0, target_ratio);
        self.compact(dst);
        let at = self.cursor + 1;
        let mut merged = 1;
        while at < self.chain.len() - 1 && merged <= MAX_MERGE {
            if self.segments[dst].used >= stop_bytes {
                break;
            }
            let src = self.chain[at];
            cutoff = self.prune(src, cutoff, target_ratio);
            for entry in std::mem::take(&mut self.segments[src].entries) {
                if !self.is_live(src, entry) {
                    continue;
                }
                let bytes = self.items[&entry.0].bytes;
                if self.segments[dst].used + bytes <= self.segment_bytes {
                    self.generation += 1;
                    let item = self.items.get_mut(&entry.0).expect("live");
                    item.segment = dst;
                    item.generation = self.generation;
                    self.segments[dst].entries.push((entry.0, self.generation));
                    self.segments[dst].used += bytes;
                } else {
                    self.items.remove(&entry.0);
                }
            }
            self.chain.remove(at);
            self.free.push(src);
            merged += 1;
        }
        self.cursor += 1;
    }

    /// Drops the live items of `segment` whose size-weighted read count is at or below the
    /// cutoff, adapting the cutoff so about `target_ratio` of a segment stays; returns the
    /// cutoff reached (Segcache's `Segment::prune`).
    fn prune(&mut self, segment: usize, cutoff_freq: f64, target_ratio: f64) -> f64 {
        let entries = std::mem::take(&mut self.segments[segment].entries);
        let live: Vec<(u64, u64)> =
            entries.iter().copied().filter(|&entry| self.is_live(segment, entry)).collect();
        let live_bytes: u64 = live.iter().map(|(key, _)| self.items[key].bytes).sum();
        let to_keep = (self.segment_bytes as f64 * target_ratio) as u64;
        let to_drop = live_bytes.saturating_sub(to_keep);
        let mean = live_bytes as f64 / live.len().max(1) as f64;
        let mut cutoff = (1.0 + cutoff_freq) / 2.0;
        let update_interval = (self.segment_bytes / 10).max(1);
        let (mut scanned, mut dropped, mut retained, mut updates) = (0u64, 0u64, 0u64, 1u64);
        let mut kept = Vec::with_capacity(live.len());
        for (key, generation) in live {
            let item = &self.items[&key];
            scanned += item.bytes;
            if scanned >= updates * update_interval {
                updates += 1;
                let t = (retained as f64 / scanned as f64 - target_ratio) / target_ratio;
                if !(-0.5..=0.5).contains(&t) {
                    cutoff *= 1.0 + t;
                }
            }
            let weighted = f64::from(item.freq) / (item.bytes as f64 / mean);
            if cutoff >= 0.0001 && to_drop > 0 && dropped < to_drop && weighted <= cutoff {
                dropped += item.bytes;
                self.items.remove(&key);
                continue;
            }
            retained += item.bytes;
            kept.push((key, generation));
        }
        self.segments[segment].entries = kept;
        cutoff
    }

    /// Drops the segment at `at` in the chain, every item in it.
    fn drop_segment(&mut self, at: usize) {
        let segment = self.chain.remove(at);
        for entry in std::mem::take(&mut self.segments[segment].entries) {
            if self.is_live(segment, entry) {
                self.items.remove(&entry.0);
            }
        }
        self.free.push(segment);
    }

    /// Packs a segment's live items to its start.
    fn compact(&mut self, segment: usize) {
        let entries = std::mem::take(&mut self.segments[segment].entries);
        let live: Vec<(u64, u64)> =
            entries.into_iter().filter(|&entry| self.is_live(segment, entry)).collect();
        self.segments[segment].used = live.iter().map(|(key, _)| self.items[key].bytes).sum();
        self.segments[segment].entries = live;
    }

    /// Bytes the segments hold (live and dead), at most the capacity.
    pub fn used_bytes(&self) -> u64 {
        self.chain.iter().map(|&segment| self.segments[segment].used).sum()
    }

    /// Hit ratio of gets.
    pub fn hit_ratio(&self) -> f64 {
        if self.gets == 0 {
            0.0
        } else {
            self.hits as f64 / self.gets as f64
        }
    }

    /// The capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(op: Op, key: u64) -> Access {
        Access { time: 0, key, key_size: 8, value_size: 0, op, ttl: 0 }
    }

    #[test]
    fn merging_keeps_what_is_read_and_drops_what_is_not() {
        // A full cache, every other key read five times, then as much again of new keys:
        // the merges keep the read keys of the segments they take and drop the others.
        let mut merge = MergeCache::new(64 * 200);
        for key in 0..1200u64 {
            merge.access(&request(Op::Set, key), 10);
        }
        for _ in 0..5 {
            for key in (0..1200u64).step_by(2) {
                merge.access(&request(Op::Get, key), 10);
            }
        }
        for key in 10_000..11_200u64 {
            merge.access(&request(Op::Set, key), 10);
        }
        let read = (0..1200u64).step_by(2).filter(|key| merge.items.contains_key(key)).count();
        let unread = (1..1200u64).step_by(2).filter(|key| merge.items.contains_key(key)).count();
        assert!(read > 3 * unread.max(10), "{read} read keys kept against {unread} unread");
    }

    #[test]
    fn bytes_stay_within_the_capacity_and_every_item_is_in_its_segment() {
        let mut cache = MergeCache::new(64 * 100);
        let mut state = 7u64;
        for _ in 0..50_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = (state >> 33) % 2000;
            let op = match (state >> 20) % 10 {
                0 => Op::Delete,
                1 | 2 => Op::Set,
                _ => Op::Get,
            };
            cache.access(&request(op, key), 8 + (state >> 40) % 60);
            assert!(cache.used_bytes() <= cache.capacity());
            for (key, item) in &cache.items {
                let entries = &cache.segments[item.segment].entries;
                assert!(entries.contains(&(*key, item.generation)), "an item lost its segment entry");
                assert!(cache.chain.contains(&item.segment), "an item in a free segment");
            }
        }
    }

    #[test]
    fn smaller_items_are_kept_before_larger_ones_read_as_often() {
        // Every key read once, half of them small: the weighed count favours the small ones.
        let mut cache = MergeCache::new(64 * 1000);
        for key in 0..20_000u64 {
            let bytes = if key % 2 == 0 { 20 } else { 200 };
            cache.access(&request(Op::Set, key), bytes);
            cache.access(&request(Op::Get, key), bytes);
        }
        let small = cache.items.values().filter(|item| item.bytes == 20).count();
        let large = cache.items.len() - small;
        assert!(small > 2 * large, "{small} small against {large} large");
    }
}
