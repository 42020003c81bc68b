//! A connection's output: the replies in request order, ready bytes and slots other workers
//! fill, and large values sent from their shared copy or the log (one vectored send).

use super::budget::{self, LogBytes};
use super::{Buffers, OUTPUT_BYTES_HIGH};
use std::collections::VecDeque;

/// Most slices one vectored send takes (the rest goes with the next).
pub const SEND_SLICES_MAX: usize = 16;

/// A reply position: ready bytes, or a slot another worker will fill.
pub enum Segment {
    /// Waiting for forwarded request `id`.
    Waiting {
        /// Forward id.
        id: u64,
        /// The worker computing it.
        owner: usize,
    },
    /// Bytes ready to send.
    Ready(Vec<u8>),
    /// The end of one command's reply (UDP connections only): see [`Output::mark`].
    Mark(Option<Box<[u8]>>),
    /// A large value, sent from its one shared copy (`sent` bytes of it so far).
    Shared {
        /// The value.
        value: budget::SharedValue,
        /// Bytes of it sent.
        sent: usize,
    },
}

impl Segment {
    /// The bytes it holds for sending.
    fn held(&self) -> usize {
        match self {
            Segment::Ready(bytes) => bytes.len(),
            Segment::Shared { value, sent } => value.len() - sent,
            Segment::Waiting { .. } | Segment::Mark(_) => 0,
        }
    }
}

/// Output side.
pub struct Output {
    /// Bytes ready to send; `out[sent..]` is unsent.
    pub out: Vec<u8>,
    /// Bytes of `out` already sent.
    pub sent: usize,
    /// Replies after `out`, when some wait on other workers: changed only through
    /// [`Output::push_segment`] and [`Output::pop_segment`], which keep `held_behind`.
    segments: VecDeque<Segment>,
    /// Bytes the segments hold, but the last one's where it is ready (the one
    /// [`Output::reply_buf`] grows in place): with it, [`Output::held_bytes`] needs no walk
    /// of the segments (a window of large gets asks it before each request).
    held_behind: usize,
    /// Forwarded requests waiting, per worker.
    pub pending: Vec<u32>,
    /// Forwarded requests waiting in all.
    pub pending_total: u32,
    /// UDP: where each command's reply ends in `out`, and the get's last key for a get (the
    /// reply is then split at its VALUE blocks, as memcached does).
    pub marks: Vec<(usize, Option<Box<[u8]>>)>,
    next_id: u64,
    /// Emptied ready segments, kept for the next replies queued behind a waiting one.
    pub(super) spare: Vec<Vec<u8>>,
    /// Reply memory charged to the worker's [`Buffers`] for this output.
    pub(super) charged: usize,
    /// Reply memory charged to the client memory budget ([`budget`]): what its buffers hold
    /// past [`budget::OUTPUT_FREE_BYTES`].
    pub(super) budget_charged: usize,
    /// Bytes sent over the connection's life (its client's progress in reading).
    pub sent_total: u64,
}

/// Emptied ready segments an output keeps for reuse, and the largest kept.
const SPARE_SEGMENTS: usize = 8;
const SPARE_SEGMENT_BYTES: usize = 4096;
/// The room a new ready segment starts with.
const SEGMENT_BYTES_FIRST: usize = 256;
/// Emptied segments a worker keeps for its connections' next replies behind shared values
/// ([`SegmentPool`]), each at most [`SEGMENT_BYTES_FIRST`] long: 256 KiB, enough for a window of
/// pipelined large gets on each of many connections (each get's reply ends in a segment of its
/// own: 50 connections at depth 16 hold 760 at once, and with 256 kept, a third of the gets
/// allocated one and freed it, at 230 instructions a get in callgrind).
const POOLED_SEGMENTS_MAX: usize = 1024;
/// Larger emptied segments the pool keeps besides, each at most [`SPARE_SEGMENT_BYTES`]: the
/// replies behind a large value gather in one segment, which grows past [`SEGMENT_BYTES_FIRST`]
/// when many small ones follow it. 64 KiB at most.
const POOLED_LARGE_SEGMENTS_MAX: usize = 16;

/// A worker's emptied ready segments, for the reply bytes behind its connections' shared values:
/// a large get's reply is its head in the reply buffer, the value, and its tail in a segment of
/// its own, and the segments an output empties go back here when it lends its buffers back, so
/// that a stream of large gets allocates none (an idle connection still holds none).
#[derive(Default)]
pub struct SegmentPool {
    /// Segments of at most [`SEGMENT_BYTES_FIRST`].
    small: Vec<Vec<u8>>,
    /// Segments of at most [`SPARE_SEGMENT_BYTES`], larger than the small ones.
    large: Vec<Vec<u8>>,
}

impl SegmentPool {
    /// An empty segment.
    fn take(&mut self) -> Vec<u8> {
        self.small.pop().unwrap_or_else(|| Vec::with_capacity(SEGMENT_BYTES_FIRST))
    }

    /// An empty segment for many replies' bytes: a large one if the pool has one.
    fn take_large(&mut self) -> Vec<u8> {
        self.large.pop().unwrap_or_else(|| self.take())
    }

    /// Keeps those of `segments` (all empty) not too large for reuse, as many as there is
    /// room for.
    fn keep(&mut self, segments: &mut Vec<Vec<u8>>) {
        for segment in segments.drain(..) {
            let capacity = segment.capacity();
            if capacity <= SEGMENT_BYTES_FIRST {
                if self.small.len() < POOLED_SEGMENTS_MAX {
                    self.small.push(segment);
                }
            } else if capacity <= SPARE_SEGMENT_BYTES && self.large.len() < POOLED_LARGE_SEGMENTS_MAX {
                self.large.push(segment);
            }
        }
    }

    /// Segments kept (small and large).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.small.len() + self.large.len()
    }
}

impl Output {
    /// Output for a server with `workers` workers.
    pub fn new(workers: usize) -> Output {
        Output {
            out: Vec::new(),
            sent: 0,
            segments: VecDeque::new(),
            held_behind: 0,
            pending: vec![0; workers],
            pending_total: 0,
            marks: Vec::new(),
            next_id: 0,
            spare: Vec::new(),
            charged: 0,
            budget_charged: 0,
            sent_total: 0,
        }
    }

    /// An emptied ready segment, or a new one with room for a few replies' heads (a segment
    /// behind a shared value takes the next reply's `VALUE` line: growing from nothing would
    /// reallocate several times).
    fn spare_segment(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_else(|| Vec::with_capacity(SEGMENT_BYTES_FIRST))
    }

    /// An emptied ready segment of this output's, or one from the worker's `pool`.
    fn segment_from(&mut self, pool: &mut SegmentPool) -> Vec<u8> {
        self.spare.pop().unwrap_or_else(|| pool.take())
    }

    /// Puts `segment` behind the others: the one it follows, if ready, no longer grows.
    #[inline(always)]
    fn push_segment(&mut self, segment: Segment) {
        if let Some(Segment::Ready(last)) = self.segments.back() {
            self.held_behind += last.len();
        }
        if !matches!(segment, Segment::Ready(_)) {
            self.held_behind += segment.held();
        }
        self.segments.push_back(segment);
    }

    /// Takes the front segment.
    #[inline(always)]
    fn pop_segment(&mut self) -> Option<Segment> {
        let segment = self.segments.pop_front()?;
        // A ready segment that was the last was not counted behind.
        if !(self.segments.is_empty() && matches!(segment, Segment::Ready(_))) {
            self.held_behind -= segment.held();
        }
        Some(segment)
    }

    /// Drops every segment (a closing connection's).
    pub fn clear_segments(&mut self) {
        self.segments.clear();
        self.held_behind = 0;
    }

    /// Where a reply computed here goes: behind everything before it.
    #[inline]
    pub fn reply_buf(&mut self) -> &mut Vec<u8> {
        if self.segments.is_empty() {
            return &mut self.out;
        }
        self.reply_buf_behind()
    }

    /// [`Output::reply_buf`] behind a reply that waits or a shared value: the last ready
    /// segment.
    #[inline(never)]
    fn reply_buf_behind(&mut self) -> &mut Vec<u8> {
        if !matches!(self.segments.back(), Some(Segment::Ready(_))) {
            let segment = self.spare_segment();
            self.push_segment(Segment::Ready(segment));
        }
        match self.segments.back_mut() {
            Some(Segment::Ready(bytes)) => bytes,
            _ => unreachable!("a ready segment was just pushed"),
        }
    }

    /// Ends one command's reply (UDP replies go out as one message per command's reply).
    pub fn mark(&mut self, last_key: Option<Box<[u8]>>) {
        if self.segments.is_empty() {
            self.marks.push((self.out.len(), last_key));
        } else {
            self.push_segment(Segment::Mark(last_key));
        }
    }

    /// Reserves the next reply position for a request forwarded to `owner`.
    pub fn wait_for(&mut self, owner: usize) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.push_segment(Segment::Waiting { id, owner });
        self.pending[owner] += 1;
        self.pending_total += 1;
        id
    }

    /// Fills the position of forwarded request `id`; replies ready at the front move to `out`.
    /// False if no such request waits (a bug in the sender).
    pub fn fill(&mut self, id: u64, bytes: &[u8]) -> bool {
        let Some(position) = self
            .segments
            .iter()
            .position(|segment| matches!(segment, Segment::Waiting { id: waiting, .. } if *waiting == id))
        else {
            return false;
        };
        let Segment::Waiting { owner, .. } = self.segments[position] else { unreachable!() };
        self.pending[owner] -= 1;
        self.pending_total -= 1;
        if position == 0 {
            // The oldest reply (an owner answers in order, so nearly always): straight out.
            self.pop_segment();
            self.out.extend_from_slice(bytes);
        } else {
            let mut ready = self.spare_segment();
            ready.extend_from_slice(bytes);
            // A waiting one held nothing; a ready one that is not the last is counted behind.
            if position + 1 < self.segments.len() {
                self.held_behind += ready.len();
            }
            self.segments[position] = Segment::Ready(ready);
        }
        self.promote();
        true
    }

    /// Moves the replies ready at the front of the segments into `out`, up to the first one that
    /// waits (on another worker, or to be sent from its shared copy).
    fn promote(&mut self) {
        while matches!(self.segments.front(), Some(Segment::Ready(_) | Segment::Mark(_))) {
            match self.pop_segment() {
                Some(Segment::Ready(mut bytes)) => {
                    self.out.extend_from_slice(&bytes);
                    // Small ones all (as many as there were replies behind shared values,
                    // for the worker's pool once the output is sent), a few larger ones.
                    let small = bytes.capacity() <= SEGMENT_BYTES_FIRST;
                    if small || (self.spare.len() < SPARE_SEGMENTS && bytes.capacity() <= SPARE_SEGMENT_BYTES)
                    {
                        bytes.clear();
                        self.spare.push(bytes);
                    }
                }
                Some(Segment::Mark(last_key)) => self.marks.push((self.out.len(), last_key)),
                _ => unreachable!("the front was ready or a mark"),
            }
        }
    }

    /// Takes the shared values an execution left out of the reply buffer (each `(at, value)`:
    /// the value goes at byte `at` of the buffer [`Output::reply_buf`] gave it, in order): the
    /// bytes after each become a ready segment behind it, taken from `pool`.
    #[inline]
    pub fn adopt(&mut self, shared: &mut Vec<(usize, budget::SharedValue)>, pool: &mut SegmentPool) {
        if !shared.is_empty() {
            self.adopt_taken(shared, pool);
        }
    }

    /// [`Output::adopt`] for an execution that left values out (the rare, large ones).
    fn adopt_taken(&mut self, shared: &mut Vec<(usize, budget::SharedValue)>, pool: &mut SegmentPool) {
        let Some(&(first, _)) = shared.first() else { return };
        // The bytes after the first value move out of the buffer, into a segment behind it.
        let mut after = self.spare.pop().unwrap_or_else(|| pool.take_large());
        let buf = self.reply_buf();
        after.extend_from_slice(&buf[first..]);
        buf.truncate(first);
        if shared.len() == 1 {
            // One value (a get of one key): its tail is that segment, copied once.
            let (_, value) = shared.pop().expect("one value");
            self.push_segment(Segment::Shared { value, sent: 0 });
            if after.is_empty() {
                self.spare.push(after);
            } else {
                self.push_segment(Segment::Ready(after));
            }
            return;
        }
        let mut pieces = shared.drain(..).peekable();
        while let Some((at, value)) = pieces.next() {
            self.push_segment(Segment::Shared { value, sent: 0 });
            let to = pieces.peek().map_or(first + after.len(), |&(next, _)| next);
            if to > at {
                let mut ready = self.segment_from(pool);
                ready.extend_from_slice(&after[at - first..to - first]);
                self.push_segment(Segment::Ready(ready));
            }
        }
        after.clear();
        self.spare.push(after);
    }

    /// The replies ready behind one that waits.
    fn ready_segments(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.segments.iter().filter_map(|segment| match segment {
            Segment::Ready(bytes) => Some(bytes),
            Segment::Waiting { .. } | Segment::Mark(_) | Segment::Shared { .. } => None,
        })
    }

    /// Bytes held for this connection (unsent and waiting), shared values' included.
    #[inline]
    pub fn held_bytes(&self) -> usize {
        if self.segments.is_empty() {
            // All in the reply buffer (the common case).
            return self.out.len() - self.sent;
        }
        self.held_bytes_across()
    }

    /// [`Output::held_bytes`] with replies behind the reply buffer.
    #[inline]
    fn held_bytes_across(&self) -> usize {
        let last = match self.segments.back() {
            Some(Segment::Ready(bytes)) => bytes.len(),
            _ => 0,
        };
        debug_assert_eq!(
            self.held_behind + last,
            self.segments.iter().map(Segment::held).sum::<usize>(),
            "the segments' bytes counted as they change"
        );
        self.out.len() - self.sent + self.held_behind + last
    }

    /// Memory its buffers hold (what [`Buffers::charge`] charges).
    #[inline]
    pub fn capacity_bytes(&self) -> usize {
        if self.segments.is_empty() && self.spare.is_empty() {
            return self.out.capacity();
        }
        let segments: usize = self.ready_segments().map(Vec::capacity).sum();
        let spare: usize = self.spare.iter().map(Vec::capacity).sum();
        self.out.capacity() + segments + spare
    }

    /// Borrows a reply buffer from `pool` if it has none.
    pub fn borrow(&mut self, pool: &mut Buffers) {
        if self.out.capacity() == 0 {
            self.out = pool.take_reply();
            pool.charge(self);
        }
    }

    /// Gives the reply buffer back to `pool`, and the spare segments to `segments`, once
    /// everything is sent and nothing waits on another worker.
    pub fn lend_back(&mut self, pool: &mut Buffers, segments: &mut SegmentPool) {
        if self.sent == self.out.len() && self.segments.is_empty() {
            let out = std::mem::take(&mut self.out);
            self.sent = 0;
            segments.keep(&mut self.spare);
            pool.charge(self);
            pool.give_reply(out);
        }
    }

    /// Whether bytes are ready to send.
    pub fn has_unsent(&self) -> bool {
        self.sent < self.out.len() || matches!(self.segments.front(), Some(Segment::Shared { .. }))
    }

    /// The bytes ready to send when they are all in the reply buffer (no shared value or
    /// reply waits behind it: the common case, one plain send); `None` otherwise.
    #[inline]
    pub fn unsent_in_buffer(&self) -> Option<&[u8]> {
        self.segments.is_empty().then(|| &self.out[self.sent..])
    }

    /// The bytes ready to send, in order, as slices for one vectored send written to the
    /// front of `slices` (at most its length; [`SEND_SLICES_MAX`] is what a send takes); how
    /// many. `out`'s unsent bytes come first, then the shared values and ready replies behind
    /// them up to the first reply that waits. A value left in the log is read through `logs`,
    /// whose borrow keeps it unwritten while the slices live.
    pub fn unsent_slices<'a>(
        &'a self,
        logs: &'a impl LogBytes,
        slices: &mut [std::io::IoSlice<'a>],
    ) -> usize {
        let mut count = 0;
        let mut push = |bytes: &'a [u8]| {
            if count < slices.len() && !bytes.is_empty() {
                slices[count] = std::io::IoSlice::new(bytes);
                count += 1;
            }
            count < slices.len()
        };
        if self.sent < self.out.len() {
            push(&self.out[self.sent..]);
        }
        for segment in &self.segments {
            let room = match segment {
                Segment::Shared { value, sent } => push(&value.bytes(logs)[*sent..]),
                Segment::Ready(bytes) => push(bytes),
                Segment::Waiting { .. } | Segment::Mark(_) => false,
            };
            if !room {
                break;
            }
        }
        count
    }

    /// Marks the first `len` bytes of what [`Output::unsent_slices`] gave sent.
    #[inline]
    pub fn advance(&mut self, len: usize) {
        if self.sent + len < self.out.len() || (self.sent + len == self.out.len() && self.segments.is_empty())
        {
            // Within the reply buffer (the common case).
            self.sent_total += len as u64;
            self.sent_from_buffer(len);
            return;
        }
        self.advance_across(len);
    }

    /// Marks `len` bytes of the reply buffer sent (at most what it holds unsent), emptying it
    /// once all of it is.
    #[inline(always)]
    fn sent_from_buffer(&mut self, len: usize) {
        self.sent += len;
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
            if self.out.capacity() > OUTPUT_BYTES_HIGH {
                self.out = Vec::new();
            }
        }
    }

    /// [`Output::advance`] past the reply buffer, into the shared values and replies behind it.
    #[inline(never)]
    fn advance_across(&mut self, mut len: usize) {
        self.sent_total += len as u64;
        while len > 0 {
            if self.sent < self.out.len() {
                let taken = len.min(self.out.len() - self.sent);
                self.sent_from_buffer(taken);
                len -= taken;
                continue;
            }
            let Some(Segment::Shared { value, sent }) = self.segments.front_mut() else {
                debug_assert!(false, "{len} bytes sent past the ready output");
                return;
            };
            let taken = len.min(value.len() - *sent);
            *sent += taken;
            len -= taken;
            let done = *sent == value.len();
            self.held_behind -= taken;
            if done {
                // The replies behind it move into `out`, which is empty now.
                self.pop_segment();
                self.promote();
            }
        }
    }
}
