//! Optimistic reads of a partition from any thread (CREW, MICA §4.1.2 and §4.3.2).
//!
//! The owner brackets every change to a bucket, and to any item reachable from it, by making the
//! bucket's version odd and then even again (release), and publishes the head (then a release
//! fence) before it writes over memory the head has left. The one exception is the metadata a
//! read leaves behind, an item's fetched bit and last access: each is one word written whole,
//! so a reader sees it as it was or as it is, never torn, and either is a true answer. A reader:
//! 1. loads the version (acquire) and retries while it is odd;
//! 2. finds the slot and copies the item with relaxed atomic loads (no data race, possibly torn);
//! 3. issues an acquire fence, then reloads the version and the head.
//!
//! If any word it copied was written by a change that started after step 1, the fence pairs with
//! the owner's release fence, so step 3 sees the odd (or newer) version or the newer head, and the
//! reader retries. Otherwise the copy is exactly what the owner last published (that metadata
//! aside).

use crate::command::{Append, Hit, Outcome, ValueSink};
use crate::index::Slot;
use crate::item::Now;
use crate::item::LONG_KEY_BYTES_MAX;
use crate::keyhash::KeyHash;
use crate::log::Heads;
use crate::partition::{Dumped, Shared};
use crate::sync::{fence, Arc};
use std::sync::atomic::Ordering::{Acquire, Relaxed};

/// Why a read found its key's item but did not answer it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    /// It did not find it, or found it and answered.
    No,
    /// The item had expired.
    Expired,
    /// flush_all had invalidated it.
    Flushed,
}

/// A read-only handle on a partition, for threads other than its owner. Cloning is cheap.
#[derive(Clone)]
pub struct Reader {
    shared: Arc<Shared>,
}

impl Reader {
    pub(crate) fn new(shared: Arc<Shared>) -> Reader {
        Reader { shared }
    }

    /// Looks `key` up; on a hit the value is appended to `out`. Never blocks the owner; retries
    /// while the owner changes the bucket. Does no LRU bookkeeping (the owner's reads do).
    pub fn get(&self, hash: KeyHash, key: &[u8], now: Now, out: &mut Vec<u8>) -> Outcome {
        self.get_telling(hash, key, now, out).0
    }

    /// [`Reader::get`], also telling why a miss found the key's item unanswerable.
    pub fn get_telling(&self, hash: KeyHash, key: &[u8], now: Now, out: &mut Vec<u8>) -> (Outcome, Gone) {
        self.read_telling(hash, key, now, &mut Append::new(out))
    }

    /// [`Reader::get_telling`] with the value handed to `sink` (told the item first, so a
    /// reply's head goes before the value, and told to undo when a read raced the owner).
    pub fn read_telling(
        &self,
        hash: KeyHash,
        key: &[u8],
        now: Now,
        sink: &mut impl ValueSink,
    ) -> (Outcome, Gone) {
        self.read_checked(hash, key, now, sink, true)
    }

    /// [`Reader::get`] for the thread that holds the partition now (its owner, or the worker
    /// running a step over it: partition/steps.rs), which does not wait for its own step.
    pub fn get_held(&self, hash: KeyHash, key: &[u8], now: Now, out: &mut Vec<u8>) -> Outcome {
        self.read_checked(hash, key, now, &mut Append::new(out), false).0
    }

    #[inline(always)]
    fn read_checked(
        &self,
        hash: KeyHash,
        key: &[u8],
        now: Now,
        sink: &mut impl ValueSink,
        stepped: bool,
    ) -> (Outcome, Gone) {
        if key.is_empty() || key.len() > LONG_KEY_BYTES_MAX {
            return (Outcome::BadKey, Gone::No);
        }
        let index = &self.shared.index;
        loop {
            // A split publishes its shape before the buckets it changed are even again, so a
            // bucket read under an older shape is caught by the shape read after it.
            let shape = index.shape();
            // Not in a step over several keys (partition/steps.rs) either: a read never sees
            // part of a transaction.
            let steps = if stepped { self.step() } else { self.shared.steps.load(Relaxed) };
            let bucket = index.bucket(shape.bucket(hash));
            let (before, head) = self.begin(bucket);
            let mut gone = Gone::No;
            let found = self.read_once(bucket, hash.tag(), key, head, now, sink, &mut gone);
            let unchanged = self.unchanged(bucket, before, found.map(|(offset, _)| offset));
            if !unchanged || !index.still(shape) || self.shared.steps.load(Relaxed) != steps {
                sink.undo();
                crate::sync::spin_hint();
                continue;
            }
            return match found {
                Some((_, Some(hit))) => (Outcome::Hit(hit), Gone::No),
                Some((_, None)) => (Outcome::Miss, gone),
                None => (Outcome::Miss, Gone::No),
            };
        }
    }

    /// The partition's step count (partition/steps.rs) once no step is under way (waits while one is), to give
    /// [`Reader::step_unchanged`] after reading.
    pub fn step(&self) -> u64 {
        loop {
            let steps = self.shared.steps.load(Acquire);
            if steps & 1 == 0 {
                return steps;
            }
            crate::sync::spin_hint();
        }
    }

    /// Whether no step began since [`Reader::step`] returned `seen`: what was read in
    /// between is what the partition held outside any step.
    pub fn step_unchanged(&self, seen: u64) -> bool {
        fence(Acquire);
        self.shared.steps.load(Relaxed) == seen
    }

    /// Main index buckets in use now (the owner may grow them).
    pub fn main_buckets(&self) -> usize {
        self.shared.index.bucket_count()
    }

    /// [`crate::Partition::next_occupied`], as the owner last left the index.
    pub fn next_occupied(&self, from: usize) -> usize {
        let index = &self.shared.index;
        index.next_marked(from, index.bucket_count())
    }

    /// Lists the items main buckets `buckets` point to that answer at `now`, as
    /// [`crate::Partition::dump`] does, from any thread (memcached's `stats cachedump`): each
    /// bucket is copied optimistically and copied again if the owner changed it meanwhile.
    /// Store mode's chains are not followed (a dump of chained buckets lists their main
    /// bucket's slots only). A split while the dump runs may move a key from a bucket listed
    /// to one not yet listed, which then lists it again.
    pub fn dump(&self, buckets: std::ops::Range<usize>, now: Now, mut visit: impl FnMut(&Dumped<'_>)) {
        let index = &self.shared.index;
        let log = &self.shared.log;
        let geometry = log.geometry();
        let mut keys = Vec::new();
        let mut items: Vec<(std::ops::Range<usize>, Dumped<'static>)> = Vec::new();
        for at in buckets.start..buckets.end.min(index.bucket_count()) {
            let bucket = index.bucket(at);
            loop {
                let (before, head) = self.begin(bucket);
                keys.clear();
                items.clear();
                let mut offsets = [0u64; crate::index::SLOTS_PER_BUCKET];
                for word in &bucket[1..] {
                    let slot = Slot(word.load(Relaxed));
                    if slot.is_empty() || slot.is_link() || !geometry.is_live(slot.offset(), head) {
                        continue;
                    }
                    let header = log.header(slot.offset());
                    // A racing write can tear the header: bound the lengths before use.
                    let key_len = header.key_len();
                    if key_len == 0
                        || key_len > LONG_KEY_BYTES_MAX
                        || !log.fits(slot.offset(), header.capacity())
                    {
                        continue;
                    }
                    if self.shared.is_gone(&header, now) {
                        continue;
                    }
                    let start = keys.len();
                    log.read_bytes(slot.offset(), header.key_start(), key_len, &mut keys);
                    offsets[items.len()] = slot.offset();
                    let item = Dumped {
                        key: &[],
                        value_len: header.word1.value_len(),
                        expiry: header.ext.expiry(),
                        last_access_secs: header.word1.last_access(),
                        cas: self.shared.cas_unique(header.word0.cas_seq()),
                        fetched: header.word0.has(crate::item::BIT_FETCHED),
                        flags: header.ext.flags(),
                    };
                    items.push((start..keys.len(), item));
                }
                if !self.unchanged(bucket, before, offsets[..items.len()].iter().copied()) {
                    crate::sync::spin_hint();
                    continue;
                }
                for (range, item) in &items {
                    visit(&Dumped { key: &keys[range.clone()], ..*item });
                }
                break;
            }
        }
    }

    /// The heads the owner last published.
    #[inline(always)]
    fn heads(&self) -> Heads {
        Heads { main: self.shared.head.load(Relaxed), small: self.shared.small_head.load(Relaxed) }
    }

    /// Step 1 of an optimistic read: the bucket's version once it is even (no change under
    /// way), and the head.
    #[inline(always)]
    fn begin(&self, bucket: &[crate::sync::AtomicU64]) -> (u64, Heads) {
        loop {
            let before = bucket[0].load(Acquire);
            if before & 1 == 0 {
                return (before, self.heads());
            }
            crate::sync::spin_hint();
        }
    }

    /// Step 3: whether what was copied since [`Reader::begin`] returned `before` is what the
    /// owner last published: the bucket's version has not moved and every item copied (at
    /// `offsets`) is still live.
    #[inline(always)]
    fn unchanged(
        &self,
        bucket: &[crate::sync::AtomicU64],
        before: u64,
        offsets: impl IntoIterator<Item = u64>,
    ) -> bool {
        fence(Acquire);
        let after = bucket[0].load(Relaxed);
        let head = self.heads();
        let geometry = self.shared.log.geometry();
        before == after && offsets.into_iter().all(|offset| geometry.is_live(offset, head))
    }

    /// Pipeline stage 1 for one key: start loading its bucket.
    #[inline(always)]
    pub fn prefetch_bucket(&self, hash: KeyHash) {
        let index = &self.shared.index;
        index.prefetch(index.shape().bucket(hash));
    }

    /// Pipeline stage 2 for one key: start loading its candidate item. A hint only: the
    /// bucket may change meanwhile, and [`Reader::get`] checks everything again.
    #[inline(always)]
    pub fn prefetch_item(&self, hash: KeyHash) {
        let index = &self.shared.index;
        let bucket = index.bucket(index.shape().bucket(hash));
        let (log, tag) = (&self.shared.log, hash.tag());
        let head = self.heads();
        for word in &bucket[1..] {
            let slot = Slot(word.load(Relaxed));
            if slot.tag() == tag && log.geometry().is_live(slot.offset(), head) {
                log.prefetch(slot.offset());
                break;
            }
        }
    }

    /// One optimistic attempt: `Some((offset, hit))` when the key's item was found (`hit` is
    /// `None` if it had expired or been flushed).
    #[allow(clippy::too_many_arguments)]
    fn read_once(
        &self,
        bucket: &[crate::sync::AtomicU64],
        tag: u16,
        key: &[u8],
        head: Heads,
        now: Now,
        sink: &mut impl ValueSink,
        gone: &mut Gone,
    ) -> Option<(u64, Option<Hit>)> {
        let log = &self.shared.log;
        let geometry = log.geometry();
        let index = &self.shared.index;
        let mut words = bucket;
        // Store mode's chains: a racing change can make a link point anywhere, so links are
        // bounded (the version check then sends the reader round again).
        let mut hops = 0;
        loop {
            if let Some(found) = self.scan_bucket(words, tag, key, head, geometry, now, sink, gone) {
                return Some(found);
            }
            let last = Slot(words[crate::index::BUCKET_WORDS - 1].load(Relaxed));
            let next = last.offset() as usize;
            hops += 1;
            if !last.is_link()
                || next < index.base_buckets()
                || next >= index.base_buckets() + index.spare_count()
                || hops > index.spare_count()
            {
                return None;
            }
            words = index.bucket(next);
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn scan_bucket(
        &self,
        bucket: &[crate::sync::AtomicU64],
        tag: u16,
        key: &[u8],
        head: Heads,
        geometry: crate::log::LogGeometry,
        now: Now,
        sink: &mut impl ValueSink,
        gone: &mut Gone,
    ) -> Option<(u64, Option<Hit>)> {
        let log = &self.shared.log;
        for word in &bucket[1..] {
            let slot = Slot(word.load(Relaxed));
            if slot.tag() != tag || !geometry.is_live(slot.offset(), head) {
                continue;
            }
            let offset = slot.offset();
            let header = log.header(offset);
            // A racing write can tear the header: bound every length before using it.
            if header.key_len() != key.len() || !log.fits(offset, header.capacity()) {
                continue;
            }
            if !log.bytes_equal(offset, header.key_start(), key) {
                continue;
            }
            if self.shared.is_gone(&header, now) {
                *gone = if self.shared.is_flushed(&header, now) { Gone::Flushed } else { Gone::Expired };
                return Some((offset, None));
            }
            let mut hit = header.hit(0, self.shared.cas_unique(header.word0.cas_seq()));
            if let Some(buffer) = sink.head(&hit) {
                hit.value_start = buffer.len();
                log.read_bytes(offset, header.key_start() + key.len(), header.word1.value_len(), buffer);
            }
            return Some((offset, Some(hit)));
        }
        None
    }
}
