//! A worker's buffers, lent to its connections while they have bytes in flight.

use super::budget::ClientMemory;
use super::{Input, Output};
use std::sync::Arc;
/// A lent read buffer (larger requests grow it up to the connection's limit, charged to the
/// client memory budget).
pub const READ_BUFFER_BYTES: usize = 16 << 10;
/// The smallest read buffer a received request gets (io_uring, [`Input::append`]).
const SMALL_READ_BYTES: usize = 512;
/// Buffers of each kind a worker keeps for lending (memcached 1.6 keeps a per-thread read-buffer
/// cache the same way): 512 KiB of reads and 512 KiB of replies, allocated and touched once
/// when the worker starts ([`Buffers::prefill`]), so that serving more connections at once
/// does not raise the process's memory as the pool fills.
pub const POOL_BUFFERS_MAX: usize = 32;
/// Largest reply buffer kept for lending again, and the capacity of those prefilled.
const POOL_OUT_BYTES_MAX: usize = 16 << 10;
/// Small buffers a worker keeps besides its pools, of each kind: read buffers of
/// `SMALL_READ_BYTES` and reply buffers that grew to at most `SMALL_REPLY_BYTES`. They serve the
/// connections past the pools' [`POOL_BUFFERS_MAX`]: at depth 1 each of a turn's connections
/// holds one of each at once, and without them every one past the pools allocated, grew and
/// freed a buffer of each kind per request (callgrind, 50 connections at depth 1: a tenth of
/// the requests). At most 256 KiB of small reads and 256 KiB of small replies.
const SMALL_POOL_MAX: usize = 512;
const SMALL_REPLY_BYTES: usize = 512;
/// Largest grown read buffer cut back to [`READ_BUFFER_BYTES`] for the pool when given back
/// (a long store's): its growth is given back to the allocator without a copy, and the pool
/// keeps its count under large writes.
const READ_BUFFER_CUT_MAX: usize = 8 * READ_BUFFER_BYTES;
/// Grown read buffers (longer than [`READ_BUFFER_BYTES`], at most [`READ_BUFFER_CUT_MAX`]) a
/// worker keeps whole for the next long store instead of cutting them back: a stream of sets
/// a little longer than a read buffer otherwise grows a buffer (realloc, copying what it
/// holds) and cuts it back once per set (callgrind, 16 KiB sets at depth 16: 380 instructions
/// a request, a set in twenty). At most 512 KiB.
const GROWN_READS_MAX: usize = 4;
/// What a prefilled buffer is filled with: written, so its pages are resident from the start
/// (zeroes from calloc would leave them untouched until first used).
const PREFILL_BYTE: u8 = 0xa5;

/// An empty buffer with room for `capacity` bytes whose pages are already written (resident):
/// what a worker allocates at start so that filling it later takes no new memory.
pub fn touched(capacity: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(capacity);
    buf.resize(capacity, PREFILL_BYTE);
    buf.clear();
    buf
}

/// A worker's buffers, lent to connections while they have bytes in flight: an idle
/// connection holds no buffer, so it costs a few hundred bytes however many there are.
///
/// Under `-o read_buf_mem_limit` the worker's connections hold at most `limit` bytes of
/// buffers together, as memcached bounds each thread's read buffers and response objects: a
/// connection that needs a read buffer when none is left is closed (`read_buf_oom`), and so
/// is one that holds no reply memory and finds none left (`response_obj_oom`). Unlike
/// memcached, a connection whose replies wait unsent is not closed: past half the limit it
/// waits for its client to read them, which keeps the other half for the connections whose
/// clients do read.
pub struct Buffers {
    /// Read buffers, each `READ_BUFFER_BYTES` long and initialised.
    reads: Vec<Vec<u8>>,
    /// Empty reply buffers with their capacity.
    replies: Vec<Vec<u8>>,
    /// Bytes of `replies`.
    replies_pooled_bytes: usize,
    /// Small read buffers, each `SMALL_READ_BYTES` long and initialised.
    small_reads: Vec<Vec<u8>>,
    /// Small empty reply buffers with their capacity.
    small_replies: Vec<Vec<u8>>,
    /// Bytes of `small_reads` and `small_replies`.
    small_pooled_bytes: usize,
    /// Grown read buffers kept whole ([`GROWN_READS_MAX`]).
    grown_reads: Vec<Vec<u8>>,
    /// Bytes the connections may hold together; `usize::MAX` without a limit.
    limit: usize,
    /// Read buffers lent now (each charged `READ_BUFFER_BYTES`, however far it grew: a large
    /// request's growth is bounded per connection by the item size limit, as memcached reads
    /// a large value straight into its item).
    reads_lent: usize,
    /// Connections holding reply memory now.
    replies_lent: usize,
    /// Reply memory they hold, as last charged (see [`Buffers::charge`]).
    replies_lent_bytes: usize,
    /// The server's client memory budget, which grown inputs and large outputs are charged to.
    budget: Arc<ClientMemory>,
}

impl Default for Buffers {
    fn default() -> Buffers {
        Buffers::new(usize::MAX)
    }
}

/// What a worker's buffers hold, for `stats` (memcached's `read_buf_*`/`response_obj_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferFigures {
    /// Read and reply buffers, lent and pooled.
    pub count: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Bytes pooled, free to lend.
    pub bytes_free: usize,
    /// Connections holding reply memory.
    pub replies: usize,
    /// The reply memory they hold.
    pub reply_bytes: usize,
}

impl BufferFigures {
    /// Adds another worker's figures.
    pub fn add(&mut self, other: &BufferFigures) {
        self.count += other.count;
        self.bytes += other.bytes;
        self.bytes_free += other.bytes_free;
        self.replies += other.replies;
        self.reply_bytes += other.reply_bytes;
    }
}

impl Buffers {
    /// Buffers whose connections may hold at most `limit` bytes together, under no client
    /// memory budget.
    pub fn new(limit: usize) -> Buffers {
        Buffers::with_budget(limit, Arc::default())
    }

    /// Buffers whose connections may hold at most `limit` bytes together, and whose growth
    /// beyond them is charged to `budget`.
    pub fn with_budget(limit: usize, budget: Arc<ClientMemory>) -> Buffers {
        Buffers {
            budget,
            reads: Vec::new(),
            replies: Vec::new(),
            replies_pooled_bytes: 0,
            small_reads: Vec::new(),
            small_replies: Vec::new(),
            small_pooled_bytes: 0,
            grown_reads: Vec::new(),
            limit,
            reads_lent: 0,
            replies_lent: 0,
            replies_lent_bytes: 0,
        }
    }

    /// Fills the pools at the worker's start, on its own thread (so the buffers sit in its
    /// allocator arena): [`POOL_BUFFERS_MAX`] read buffers and as many reply buffers, their
    /// pages touched, as far as the limit allows half of it for each kind. The pools then hold
    /// what the connections borrow at once under ordinary load, and a burst of connections or
    /// their churn takes no new memory (memcached's connections read into one thread cache and
    /// send values from their items, so its memory does not move with them either).
    pub fn prefill(&mut self) {
        let each = if self.limited() { self.limit / 2 / READ_BUFFER_BYTES } else { POOL_BUFFERS_MAX };
        for _ in 0..each.min(POOL_BUFFERS_MAX) {
            self.reads.push(vec![PREFILL_BYTE; READ_BUFFER_BYTES]);
            let reply = touched(POOL_OUT_BYTES_MAX);
            self.replies_pooled_bytes += reply.capacity();
            self.replies.push(reply);
        }
    }

    /// A worker's share of `-o read_buf_mem_limit` (`total` bytes; 0: none), split between
    /// `workers` as memcached splits it between threads: whole read buffers, at least one.
    pub fn limit_per_worker(total: usize, workers: usize) -> usize {
        if total == 0 {
            return usize::MAX;
        }
        (total / workers.max(1) / READ_BUFFER_BYTES).max(1) * READ_BUFFER_BYTES
    }

    /// The server's client memory budget.
    pub fn budget(&self) -> &ClientMemory {
        &self.budget
    }

    /// Whether a limit applies.
    pub fn limited(&self) -> bool {
        self.limit != usize::MAX
    }

    /// Bytes lent to connections now.
    pub fn lent(&self) -> usize {
        self.reads_lent * READ_BUFFER_BYTES + self.replies_lent_bytes
    }

    /// Bytes connections may still take before the limit.
    pub fn room(&self) -> usize {
        self.limit.saturating_sub(self.lent())
    }

    /// Bytes connections whose replies wait unsent may still take (half the limit).
    pub fn hold_room(&self) -> usize {
        (self.limit / 2).saturating_sub(self.lent())
    }

    /// Whether the pool of `kept` buffers of one kind is full, or keeping `bytes` more would
    /// hold more than the limit in all.
    fn pool_full(&self, kept: usize, bytes: usize) -> bool {
        kept >= POOL_BUFFERS_MAX || self.lent() + self.pooled_bytes() + bytes > self.limit
    }

    /// Bytes the pools hold, free to lend.
    fn pooled_bytes(&self) -> usize {
        self.reads.len() * READ_BUFFER_BYTES
            + self.replies_pooled_bytes
            + self.small_pooled_bytes
            + self.grown_reads.iter().map(Vec::capacity).sum::<usize>()
    }

    /// A read buffer, or `None` when the limit leaves no room for one.
    pub(super) fn take_read(&mut self) -> Option<Vec<u8>> {
        if self.room() < READ_BUFFER_BYTES {
            return None;
        }
        self.reads_lent += 1;
        Some(self.reads.pop().unwrap_or_else(|| vec![0; READ_BUFFER_BYTES]))
    }

    /// A read buffer for `bytes` received (io_uring): a pooled one while the pool has one or
    /// when they fill a good part of it, else one just large enough (charged as a whole one all
    /// the same). A turn's completions each take one before any connection is served: past the
    /// pool, a burst of small requests would otherwise hold a 16 KiB buffer each.
    pub(super) fn take_read_for(&mut self, bytes: usize) -> Option<Vec<u8>> {
        if bytes >= READ_BUFFER_BYTES / 4 || !self.reads.is_empty() {
            return self.take_read();
        }
        if self.room() < READ_BUFFER_BYTES {
            return None;
        }
        self.reads_lent += 1;
        if bytes <= SMALL_READ_BYTES {
            if let Some(buf) = self.small_reads.pop() {
                self.small_pooled_bytes -= buf.capacity();
                return Some(buf);
            }
        }
        let len = bytes.next_power_of_two().max(SMALL_READ_BYTES);
        // malloc then fill: calloc (what `vec![0; len]` asks for) skips glibc's thread cache
        // (callgrind, depth 1: 4,164 against 4,205 instructions per request).
        #[allow(clippy::slow_vector_initialization)]
        let mut buf = Vec::with_capacity(len);
        buf.resize(len, 0);
        Some(buf)
    }

    pub(super) fn give_read(&mut self, buf: Vec<u8>) {
        self.reads_lent -= 1;
        self.keep_read(buf);
    }

    /// An empty grown read buffer with room for at least `bytes`, kept whole from an earlier
    /// long store, to replace a connection's read buffer (given back with
    /// [`Buffers::keep_read`]); `None` when none is kept.
    pub(super) fn take_grown(&mut self, bytes: usize) -> Option<Vec<u8>> {
        let at = self.grown_reads.iter().position(|grown| grown.capacity() >= bytes)?;
        let mut grown = self.grown_reads.swap_remove(at);
        grown.clear();
        Some(grown)
    }

    /// Keeps a read buffer no connection holds for lending again, if the pools take it
    /// ([`Buffers::give_read`] for one lent; directly for one [`Buffers::take_grown`] replaced,
    /// whose connection is still lent a buffer).
    pub(super) fn keep_read(&mut self, mut buf: Vec<u8>) {
        let len = buf.len();
        if len > READ_BUFFER_BYTES
            && len <= READ_BUFFER_CUT_MAX
            && self.grown_reads.len() < GROWN_READS_MAX
            && !self.pool_full(0, buf.capacity())
        {
            self.grown_reads.push(buf);
        } else if (READ_BUFFER_BYTES..=READ_BUFFER_CUT_MAX).contains(&len)
            && !self.pool_full(self.reads.len(), READ_BUFFER_BYTES)
        {
            if len > READ_BUFFER_BYTES {
                buf.truncate(READ_BUFFER_BYTES);
                buf.shrink_to_fit();
            }
            self.reads.push(buf);
        } else if len == SMALL_READ_BYTES
            && self.small_reads.len() < SMALL_POOL_MAX
            && !self.pool_full(0, buf.capacity())
        {
            self.small_pooled_bytes += buf.capacity();
            self.small_reads.push(buf);
        }
    }

    pub(super) fn take_reply(&mut self) -> Vec<u8> {
        if self.room() == 0 {
            return Vec::new();
        }
        if let Some(buf) = self.replies.pop() {
            self.replies_pooled_bytes -= buf.capacity();
            return buf;
        }
        let buf = self.small_replies.pop().unwrap_or_default();
        self.small_pooled_bytes -= buf.capacity();
        buf
    }

    pub(super) fn give_reply(&mut self, mut buf: Vec<u8>) {
        let capacity = buf.capacity();
        if capacity == 0 {
            // Nothing to keep (an empty buffer in the pool would be lent to grow again).
        } else if capacity <= POOL_OUT_BYTES_MAX && !self.pool_full(self.replies.len(), capacity) {
            buf.clear();
            self.replies_pooled_bytes += capacity;
            self.replies.push(buf);
        } else if capacity <= SMALL_REPLY_BYTES
            && self.small_replies.len() < SMALL_POOL_MAX
            && !self.pool_full(0, capacity)
        {
            buf.clear();
            self.small_pooled_bytes += capacity;
            self.small_replies.push(buf);
        }
    }

    /// Brings the reply memory charged for `output` up to what it holds now (its buffers grow
    /// as replies are written into them).
    pub fn charge(&mut self, output: &mut Output) {
        let now = output.capacity_bytes();
        if now == output.charged {
            return;
        }
        match (output.charged, now) {
            (0, _) => self.replies_lent += 1,
            (_, 0) => self.replies_lent -= 1,
            _ => {}
        }
        self.replies_lent_bytes = self.replies_lent_bytes - output.charged + now;
        output.charged = now;
    }

    /// Brings what `output` is charged to the client memory budget up to what its buffers
    /// hold now; whether the budget is spent.
    pub fn settle(&mut self, output: &mut Output) -> bool {
        let now = output.capacity_bytes().saturating_sub(super::budget::OUTPUT_FREE_BYTES);
        if now != output.budget_charged {
            self.budget.recharge(&mut output.budget_charged, now);
        }
        self.budget.spent()
    }

    /// Takes back everything a closing connection holds.
    pub fn release(&mut self, input: &mut Input, output: &mut Output) {
        if !input.buf.is_empty() && input.lent {
            self.give_read(std::mem::take(&mut input.buf));
            input.lent = false;
        }
        input.buf = Vec::new();
        self.budget.give(input.charged);
        input.charged = 0;
        output.out = Vec::new();
        output.clear_segments();
        output.spare = Vec::new();
        self.charge(output);
        self.settle(output);
    }

    /// What the buffers hold now.
    pub fn figures(&self) -> BufferFigures {
        let reads = self.reads_lent + self.reads.len();
        let free = self.pooled_bytes();
        let small = self.small_reads.len() + self.small_replies.len() + self.grown_reads.len();
        BufferFigures {
            count: reads + self.replies_lent + self.replies.len() + small,
            bytes: self.reads_lent * READ_BUFFER_BYTES + self.replies_lent_bytes + free,
            bytes_free: free,
            replies: self.replies_lent,
            reply_bytes: self.replies_lent_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_starts_with_its_pools_full_and_they_stay_that_size() {
        let mut pool = Buffers::default();
        pool.prefill();
        let full = pool.figures();
        assert_eq!(full.count, 2 * POOL_BUFFERS_MAX);
        assert_eq!(full.bytes, POOL_BUFFERS_MAX * (READ_BUFFER_BYTES + POOL_OUT_BYTES_MAX));
        assert_eq!(full.bytes_free, full.bytes, "all pooled, none lent");
        // Small receives take pooled buffers while any is left, and give them back.
        let taken: Vec<Vec<u8>> =
            (0..POOL_BUFFERS_MAX).map(|_| pool.take_read_for(40).expect("room")).collect();
        assert!(taken.iter().all(|buf| buf.len() == READ_BUFFER_BYTES));
        let past = pool.take_read_for(40).expect("room");
        assert_eq!(past.len(), SMALL_READ_BYTES, "past the pool, one its own size");
        let address = past.as_ptr();
        pool.give_read(past);
        // Kept, and lent again to the next small receive past the pool.
        let again = pool.take_read_for(40).expect("room");
        assert_eq!(again.as_ptr(), address, "the small buffer is reused");
        pool.give_read(again);
        taken.into_iter().for_each(|buf| pool.give_read(buf));
        let reply = pool.take_reply();
        assert_eq!(reply.capacity(), POOL_OUT_BYTES_MAX);
        pool.give_reply(reply);
        let now = pool.figures();
        assert_eq!(now.count, full.count + 1, "the pools, and the small read buffer");
        assert_eq!(now.bytes, full.bytes + SMALL_READ_BYTES);
        assert_eq!(now.bytes_free, now.bytes, "all pooled, none lent");
    }

    #[test]
    fn buffers_past_the_pools_are_kept_small_and_grown_read_buffers_are_kept_whole_a_few() {
        let mut pool = Buffers::default();
        pool.prefill();
        let replies: Vec<Vec<u8>> = (0..POOL_BUFFERS_MAX).map(|_| pool.take_reply()).collect();
        // Past the pool a connection gets an empty buffer; grown a little, it is kept.
        let mut past = pool.take_reply();
        assert_eq!(past.capacity(), 0);
        past.extend_from_slice(b"VALUE k 0 1\r\nv\r\nEND\r\n");
        let address = past.as_ptr();
        replies.into_iter().for_each(|buf| pool.give_reply(buf));
        pool.give_reply(past);
        pool.give_reply(Vec::new());
        let taken: Vec<Vec<u8>> = (0..=POOL_BUFFERS_MAX).map(|_| pool.take_reply()).collect();
        assert_eq!(taken[POOL_BUFFERS_MAX].as_ptr(), address, "the small reply buffer is lent again");
        assert!(taken.iter().all(|buf| buf.capacity() > 0), "no empty buffer was pooled");
        taken.into_iter().for_each(|buf| pool.give_reply(buf));
        // Read buffers grown for long stores are kept whole, a few of them, for the next
        // long stores; past those, one goes back to the pool at its usual size.
        let grown: Vec<Vec<u8>> = (0..=GROWN_READS_MAX)
            .map(|_| {
                let mut grown = pool.take_read().expect("room");
                grown.resize(3 * READ_BUFFER_BYTES, 0);
                grown
            })
            .collect();
        let addresses: Vec<*const u8> = grown.iter().map(|buf| buf.as_ptr()).collect();
        let before = pool.figures();
        grown.into_iter().for_each(|buf| pool.give_read(buf));
        let after = pool.figures();
        assert_eq!(after.count, before.count, "kept: the pool's count is unchanged");
        assert_eq!(after.bytes_free - before.bytes_free, (GROWN_READS_MAX * 3 + 1) * READ_BUFFER_BYTES);
        assert_eq!(pool.take_read().expect("room").capacity(), READ_BUFFER_BYTES);
        let mut kept = Vec::new();
        while let Some(buf) = pool.take_grown(2 * READ_BUFFER_BYTES) {
            assert!(buf.is_empty() && buf.capacity() >= 3 * READ_BUFFER_BYTES);
            kept.push(buf.as_ptr());
        }
        assert_eq!(kept.len(), GROWN_READS_MAX);
        assert!(kept.iter().all(|address| addresses.contains(address)));
        assert!(pool.take_grown(1).is_none());
    }

    #[test]
    fn under_a_limit_the_prefill_takes_half_of_it_for_each_kind() {
        let mut pool = Buffers::new(8 * READ_BUFFER_BYTES);
        pool.prefill();
        assert_eq!(pool.figures().count, 8);
        assert_eq!(pool.room(), 8 * READ_BUFFER_BYTES, "pooled buffers are not lent");
    }
}
