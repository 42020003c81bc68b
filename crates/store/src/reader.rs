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

use crate::command::{Hit, Outcome};
use crate::index::Slot;
use crate::item::KEY_BYTES_MAX;
use crate::keyhash::KeyHash;
use crate::partition::Shared;
use crate::sync::{fence, Arc};
use std::sync::atomic::Ordering::{Acquire, Relaxed};

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
    pub fn get(&self, hash: KeyHash, key: &[u8], now_secs: u32, out: &mut Vec<u8>) -> Outcome {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Outcome::BadKey;
        }
        let index = &self.shared.index;
        let bucket = index.bucket(hash.bucket(index.bucket_mask()));
        let value_start = out.len();
        loop {
            let before = bucket[0].load(Acquire);
            if before & 1 == 1 {
                crate::sync::spin_hint();
                continue;
            }
            let head = self.shared.head.load(Relaxed);
            let found = self.read_once(bucket, hash.tag(), key, head, now_secs, out);
            fence(Acquire);
            let after = bucket[0].load(Relaxed);
            let head_after = self.shared.head.load(Relaxed);
            let still_live = match found {
                Some((offset, _)) => self.shared.log.geometry().is_live(offset, head_after),
                None => true,
            };
            if before != after || !still_live {
                out.truncate(value_start);
                crate::sync::spin_hint();
                continue;
            }
            return match found {
                Some((_, Some(mut hit))) => {
                    hit.value_start = value_start;
                    Outcome::Hit(hit)
                }
                _ => Outcome::Miss,
            };
        }
    }

    /// Pipeline stage 1 for one key: start loading its bucket.
    #[inline(always)]
    pub fn prefetch_bucket(&self, hash: KeyHash) {
        let index = &self.shared.index;
        index.prefetch(hash.bucket(index.bucket_mask()));
    }

    /// Pipeline stage 2 for one key: start loading its candidate item. A hint only: the
    /// bucket may change meanwhile, and [`Reader::get`] checks everything again.
    #[inline(always)]
    pub fn prefetch_item(&self, hash: KeyHash) {
        let index = &self.shared.index;
        let bucket = index.bucket(hash.bucket(index.bucket_mask()));
        let (log, tag) = (&self.shared.log, hash.tag());
        let head = self.shared.head.load(Relaxed);
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
    fn read_once(
        &self,
        bucket: &[crate::sync::AtomicU64],
        tag: u16,
        key: &[u8],
        head: u64,
        now_secs: u32,
        out: &mut Vec<u8>,
    ) -> Option<(u64, Option<Hit>)> {
        let log = &self.shared.log;
        let geometry = log.geometry();
        let index = &self.shared.index;
        let mut words = bucket;
        // Store mode's chains: a racing change can make a link point anywhere, so links are
        // bounded (the version check then sends the reader round again).
        let mut hops = 0;
        loop {
            if let Some(found) = self.scan_bucket(words, tag, key, head, geometry, now_secs, out) {
                return Some(found);
            }
            let last = Slot(words[crate::index::BUCKET_WORDS - 1].load(Relaxed));
            let next = last.offset() as usize;
            hops += 1;
            if !last.is_link()
                || next < index.bucket_count()
                || next >= index.bucket_count() + index.spare_count()
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
        head: u64,
        geometry: crate::log::LogGeometry,
        now_secs: u32,
        out: &mut Vec<u8>,
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
            if header.word0.key_len() != key.len() || !log.fits(offset, header.capacity()) {
                continue;
            }
            if !log.bytes_equal(offset, header.key_start(), key) {
                continue;
            }
            if self.shared.is_gone(&header, now_secs) {
                return Some((offset, None));
            }
            log.read_bytes(offset, header.key_start() + key.len(), header.word1.value_len(), out);
            let hit = header.hit(0, self.shared.cas_unique(header.word0.cas_seq()));
            return Some((offset, Some(hit)));
        }
        None
    }
}
