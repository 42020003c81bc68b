//! A get's read: the key looked up once, and the reply written around the value as the store
//! copies it ([`ReplySink`], a [`ValueSink`]). The store tells the sink the item first, so the
//! reply's head (the text `VALUE` line, the binary header) goes into the reply buffer ahead of
//! the value, and the value is copied once: from the log into the reply buffer, or, when large,
//! into a shared copy of its own ([`share`]), or not at all when a recent shared copy of the
//! same version is still held.

use super::share::Shares;
use super::{watch, Engine, Key};
use crate::session::budget::SharedValue;
use crate::shared::Shared;
use qs_proto::binary::Reply;
use qs_proto::response as reply;
use qs_store::{Command, Expiry, Hit, KeyHash, Outcome, ValueSink};
use std::sync::Arc;

/// What goes before a hit's value.
#[derive(Clone, Copy)]
pub(super) enum Head<'a> {
    /// `VALUE <key> <flags> <bytes>[ <cas>]\r\n`, and `\r\n` after the value.
    Text {
        /// With the CAS unique (gets, gats).
        with_cas: bool,
    },
    /// The binary reply's header (status 0, the item's CAS), its extras the item's flags,
    /// then `key` (empty unless the opcode returns it).
    Binary {
        /// The request's opcode.
        opcode: u8,
        /// The request's opaque.
        opaque: [u8; 4],
        /// The key the reply carries.
        key: &'a [u8],
    },
}

/// Where a large value went instead of the reply buffer.
enum Large {
    /// Nowhere: the value is in the reply buffer, or there was no hit.
    No,
    /// A copy of its own, read straight from the log, of the version with this CAS.
    Fresh(Vec<u8>, u64),
    /// A recent copy of the same version, still held by a reply: nothing copied.
    Reused(Arc<SharedValue>),
}

/// A get's reply, written as the store reads the value.
pub(super) struct ReplySink<'a> {
    out: &'a mut Vec<u8>,
    key: &'a [u8],
    head: Head<'a>,
    shared: &'a Shared,
    shares: &'a mut Shares,
    /// Where this reply starts in `out` (an undone read goes back to it).
    mark: usize,
    large: Large,
}

impl<'a> ReplySink<'a> {
    pub(super) fn new(
        out: &'a mut Vec<u8>,
        key: &'a [u8],
        head: Head<'a>,
        shared: &'a Shared,
        shares: &'a mut Shares,
    ) -> ReplySink<'a> {
        let mark = out.len();
        ReplySink { out, key, head, shared, shares, mark, large: Large::No }
    }

    /// Ends the reply of a read that answered `outcome`: the text reply's last `\r\n`, a
    /// large value handed to the connection's output to send from its copy.
    #[inline(always)]
    pub(super) fn finish(self, outcome: &Outcome) {
        if !matches!(outcome, Outcome::Hit(_)) {
            return;
        }
        let text = matches!(self.head, Head::Text { .. });
        let out = if matches!(self.large, Large::No) { self.out } else { self.hand_large() };
        if text {
            out.extend_from_slice(b"\r\n");
        }
    }

    /// A large value's copy, to the connection's output at the reply's end (the rare path).
    #[inline(never)]
    fn hand_large(self) -> &'a mut Vec<u8> {
        let at = self.out.len();
        match self.large {
            Large::No => {}
            Large::Fresh(bytes, cas) => {
                let copy = Arc::new(SharedValue::from_vec(bytes, self.shared.client_memory.clone()));
                self.shares.take_new_copy(self.key, cas, copy, at);
            }
            Large::Reused(copy) => self.shares.taken.push((at, copy)),
        }
        self.out
    }

    /// Writes the head for `hit`.
    #[inline(always)]
    fn write_head(&mut self, hit: &Hit) {
        let cas = self.shared.cas_out(hit.cas);
        match self.head {
            Head::Text { with_cas } => {
                reply::value_line(self.out, self.key, hit.flags, hit.value_len, with_cas.then_some(cas));
            }
            Head::Binary { opcode, opaque, key } => {
                let flags = hit.flags.to_be_bytes();
                let status = qs_proto::binary::status::NO_ERROR;
                Reply { opcode, opaque, status, cas, extras: &flags, key, value_len: hit.value_len }
                    .write_head(self.out);
            }
        }
    }
}

impl ValueSink for ReplySink<'_> {
    #[inline(always)]
    fn head(&mut self, hit: &Hit) -> Option<&mut Vec<u8>> {
        self.write_head(hit);
        if !self.shares.wants(hit.value_len) {
            return Some(self.out);
        }
        if let Some(copy) = self.shares.recent_copy(self.key, hit.cas, hit.value_len) {
            self.large = Large::Reused(copy);
            return None;
        }
        self.large = Large::Fresh(Vec::with_capacity(hit.value_len), hit.cas);
        match &mut self.large {
            Large::Fresh(bytes, _) => Some(bytes),
            Large::No | Large::Reused(_) => None,
        }
    }

    fn undo(&mut self) {
        self.out.truncate(self.mark);
        self.large = Large::No;
    }
}

impl Engine {
    /// One key of a text get: its VALUE block (nothing on a miss). `false` for a key too long.
    pub fn get_one(&mut self, kind: qs_proto::GetKind, key: Key<'_>, out: &mut Vec<u8>) -> bool {
        if key.len() > qs_proto::KEY_BYTES_MAX {
            return false;
        }
        let touch = kind.touch().map(|exptime| self.expiry(exptime));
        self.fetch(key, touch, Head::Text { with_cas: kind.with_cas() }, out);
        true
    }

    /// A get of `key` for either protocol (with `touch`, a get-and-touch), its reply's head
    /// and value written to `out` on a hit: counts it, records it for `stats detail` and
    /// `watch fetchers`.
    pub(super) fn fetch(
        &mut self,
        key: Key<'_>,
        touch: Option<Expiry>,
        head: Head<'_>,
        out: &mut Vec<u8>,
    ) -> Outcome {
        self.counters.cmd_get += 1;
        if touch.is_some() {
            self.counters.cmd_touch += 1;
        }
        let outcome = self.read_reply(key, touch, head, out);
        self.shared.detail.record_get(&key, matches!(outcome, Outcome::Hit(_)));
        if self.shared.watchers.wants(watch::FETCHERS) {
            let size = match &outcome {
                Outcome::Hit(hit) => Some(hit.value_len),
                _ => None,
            };
            self.log_get(&key, size);
        }
        outcome
    }

    /// Reads `key` through the partition when owned, else through its CREW reader (a touch
    /// is always owned here: routing made sure), writing the reply as it goes.
    fn read_reply(
        &mut self,
        key: Key<'_>,
        touch: Option<Expiry>,
        head: Head<'_>,
        out: &mut Vec<u8>,
    ) -> Outcome {
        let Key { bytes: key, hash, partition } = key;
        let command = touch.map_or(Command::Get, |expiry| Command::GetAndTouch { expiry });
        if self.flash_on && !self.flash_resolved.is_empty() && touch.is_none() {
            if let Some(outcome) = self.reply_from_flash(hash, partition, key, head, out) {
                self.offer(hash, key, &command);
                return outcome;
            }
        }
        self.offer(hash, key, &command);
        if touch.is_some() {
            if let Some(epochs) = self.shared.front_epochs.get(partition) {
                // Before the change: other workers' front caches stop serving the key now.
                epochs.bump(hash.0);
            }
        }
        let now = self.now_secs;
        let shared = &*self.shared;
        let mut sink = ReplySink::new(out, key, head, shared, &mut self.shares);
        if let Some(owned) = &mut self.partitions[partition] {
            let outcome = owned.read_value(hash, key, touch, now, &mut sink);
            sink.finish(&outcome);
            return outcome;
        }
        assert!(touch.is_none(), "touch of partition {partition} routed to worker {}", self.worker);
        let reader =
            shared.map.reader(partition).expect("a partition not owned here is read through its CREW reader");
        let (outcome, gone) = reader.read_telling(hash, key, now, &mut sink);
        sink.finish(&outcome);
        self.count_remote(partition, &outcome, gone);
        outcome
    }

    /// A plain get served from the record read from flash for it (the rare path: the record
    /// is copied from the read's buffer); `None` when there is none.
    fn reply_from_flash(
        &mut self,
        hash: KeyHash,
        partition: usize,
        key: &[u8],
        head: Head<'_>,
        out: &mut Vec<u8>,
    ) -> Option<Outcome> {
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        let outcome = self.read_flash(hash, partition, key, &mut value);
        if let Some(Outcome::Hit(hit)) = &outcome {
            let bytes = &value[hit.value_start..hit.value_start + hit.value_len];
            let mut sink = ReplySink::new(out, key, head, &self.shared, &mut self.shares);
            qs_store::deliver(&mut sink, &mut hit.clone(), bytes);
            sink.finish(&Outcome::Hit(*hit));
        }
        self.scratch = value;
        outcome
    }
}
