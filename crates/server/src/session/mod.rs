//! A client connection: its read buffer and its ordered output. Replies that another worker
//! is computing wait in segments, so responses leave in request order.

mod arriving;
pub mod auth;
pub mod auth_resp;
pub mod budget;
mod buffers;
pub mod dump;
mod mapping;
pub mod names;
mod output;
mod state;
pub mod tx;
pub mod watches;

pub use arriving::Arriving;
pub use buffers::{touched, BufferFigures, Buffers, POOL_BUFFERS_MAX, READ_BUFFER_BYTES};
pub use output::{Output, Segment, SegmentPool, SEND_SLICES_MAX};
pub use state::{RingIo, State, Wait};

use crate::net::Transport;

/// Output beyond which a connection's requests are not processed (and its socket not read)
/// until the client reads: bounds memory for clients that never read their replies.
pub const OUTPUT_BYTES_HIGH: usize = 1 << 20;
/// Input side: bytes read and not yet parsed are `buf[start..end]`.
pub struct Input {
    /// Fully initialized buffer.
    pub buf: Vec<u8>,
    /// First unparsed byte.
    pub start: usize,
    /// End of the bytes read.
    pub end: usize,
    /// Bytes still to discard (a refused data block that runs past what was read).
    pub skip: usize,
    /// Largest the buffer may grow to.
    pub limit: usize,
    /// Whether `buf` is lent by the worker's [`Buffers`] (a UDP datagram's is its own).
    pub lent: bool,
    /// Bytes taken from the client memory budget: the buffer may grow to a lent read buffer's
    /// size plus these without asking for more ([`budget`]).
    pub charged: usize,
    /// A long set whose value goes into the log as it arrives ([`Arriving`]): the bytes read
    /// go there until it has all of its value.
    pub arriving: Option<Box<Arriving>>,
    /// When the read that brought the first unparsed byte returned ([`crate::sys::ticks`]):
    /// where the latency histograms' read-to-reply span starts.
    pub since: u64,
    /// How far the framing of a RESP request still arriving at the front got: the next read
    /// walks it on from there, not from its start ([`qs_proto::resp::progress`]). Reset
    /// whenever the front moves.
    pub frame: std::cell::Cell<qs_proto::resp::Progress>,
    /// RESP requests at the front already in their database (qs_proto::resp::db::map): this
    /// many bytes from `start`.
    pub mapped: usize,
    /// The mapped requests end with one that may change the database (SELECT, EXEC): none
    /// after it is mapped until it has run.
    pub map_fence: bool,
    /// The request at the front must be mapped even in database 0 (a COPY with `DB`).
    pub map_next: bool,
}

impl Input {
    /// An empty input that may grow to `limit` bytes; it holds no buffer until it reads.
    pub fn new(limit: usize) -> Input {
        Input {
            buf: Vec::new(),
            start: 0,
            end: 0,
            skip: 0,
            limit,
            lent: false,
            charged: 0,
            arriving: None,
            since: 0,
            frame: Default::default(),
            mapped: 0,
            map_fence: false,
            map_next: false,
        }
    }

    /// The unparsed bytes.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Marks `len` bytes parsed; what runs past the buffer is skipped as it arrives.
    pub fn consume(&mut self, len: usize) {
        if len > 0 {
            self.frame.set(Default::default());
            self.mapped = self.mapped.saturating_sub(len);
            self.map_fence &= self.mapped > 0;
        }
        let available = self.end - self.start;
        if len <= available {
            self.start += len;
        } else {
            self.start = self.end;
            self.skip += len - available;
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Discards skipped bytes that have arrived; true when none remain to skip.
    pub fn apply_skip(&mut self) -> bool {
        let now = self.skip.min(self.end - self.start);
        self.consume(now);
        self.skip -= now;
        self.skip == 0
    }

    /// Room to read into: borrows a buffer from `pool` if it has none, moves unparsed bytes to
    /// the front and grows the buffer when it is full. Empty when the buffer is at its limit;
    /// `None` when it has no buffer and `pool` has none to lend under its limit.
    pub fn spare(&mut self, pool: &mut Buffers) -> Option<&mut [u8]> {
        if self.buf.is_empty() {
            self.buf = pool.take_read()?;
            self.lent = true;
        }
        if self.start > 0 && self.end == self.buf.len() {
            self.compact();
        }
        if self.end == self.buf.len() && self.buf.len() < self.limit {
            // Doubling, but not past what is already charged when that is more than now (a
            // store's reservation: the buffer grows to its frame and no further).
            let covered = buffers::READ_BUFFER_BYTES + self.charged;
            let doubled = (self.buf.len() * 2).min(self.limit);
            let grown = if covered > self.buf.len() { doubled.min(covered) } else { doubled };
            if !self.afford(grown, pool) {
                // The client memory budget is spent: no request this long can be read now.
                return None;
            }
            self.buf.reserve_exact(grown - self.buf.len());
            self.buf.resize(grown, 0);
        }
        Some(&mut self.buf[self.end..])
    }

    /// Appends `bytes` received for it (io_uring), borrowing a buffer from `pool` if it has
    /// none and growing it as needed (a receive cancelled for back-pressure may still deliver
    /// a few buffers past `limit`; the worker drops a connection whose unparsed bytes reach
    /// `limit` without forming a request). False when `pool` has no buffer to lend.
    pub fn append(&mut self, bytes: &[u8], pool: &mut Buffers) -> bool {
        if self.buf.is_empty() {
            let Some(buf) = pool.take_read_for(bytes.len()) else { return false };
            self.buf = buf;
            self.lent = true;
        }
        if self.start > 0 && self.end + bytes.len() > self.buf.len() {
            self.compact();
        }
        let need = self.end + bytes.len();
        if need > self.buf.len() {
            let mut room = self.buf.capacity();
            if need > room {
                // At least two read buffers' worth: a small buffer taken for a first short
                // receive does not double its way up through a long request (a store longer
                // than that has its whole frame reserved once the worker sees it: `hold_frame`).
                let grown = need.max(room * 2).max(2 * buffers::READ_BUFFER_BYTES).min(self.limit.max(need));
                // Received already: charged whether or not it fits (the worker refuses what
                // does not, or drops the connection, once it sees what the bytes are).
                if !self.afford(grown, pool) {
                    let need = grown.saturating_sub(buffers::READ_BUFFER_BYTES);
                    pool.budget().force(need - self.charged);
                    self.charged = need;
                }
                if let Some(mut kept) = pool.take_grown(need) {
                    // Into a grown buffer kept from an earlier long store: no realloc.
                    kept.extend_from_slice(&self.buf[..self.end]);
                    kept.extend_from_slice(bytes);
                    pool.keep_read(std::mem::replace(&mut self.buf, kept));
                    self.end = need;
                    return true;
                }
                room = grown;
            }
            // Appended, not written into room: what lies past `end` is neither copied by the
            // growth nor zeroed first.
            self.buf.truncate(self.end);
            self.buf.reserve_exact(room - self.end);
            self.buf.extend_from_slice(bytes);
        } else {
            self.buf[self.end..need].copy_from_slice(bytes);
        }
        self.end = need;
        true
    }

    /// Moves the unparsed bytes to the front of the buffer.
    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// Makes room for a request of `len` bytes at the front of the pending bytes (a store
    /// longer than a read buffer, whose bytes the budget has taken: [`Input::afford`]) in one
    /// step, instead of doubling as its bytes arrive. Reads by `read(2)` need the room
    /// initialised (`zeroed`); the ring's receives append and take none.
    pub fn hold_frame(&mut self, len: usize, zeroed: bool) {
        self.compact();
        if len <= self.buf.len() {
            return;
        }
        self.buf.truncate(self.end);
        self.buf.reserve_exact(len - self.end);
        if zeroed {
            self.buf.resize(len, 0);
        }
    }

    /// Gives the buffer back once it holds nothing unparsed (a grown one is freed), and its
    /// charge to the client memory budget with it.
    pub fn lend_back(&mut self, pool: &mut Buffers) {
        if self.start == self.end && !self.buf.is_empty() && self.lent {
            pool.give_read(std::mem::take(&mut self.buf));
            self.lent = false;
            self.start = 0;
            self.end = 0;
        }
        if self.buf.is_empty() && self.charged > 0 {
            pool.budget().give(self.charged);
            self.charged = 0;
        }
    }

    /// Makes sure the buffer may hold `bytes` (a request that long): takes what the client
    /// memory budget must add for it. False when the budget has no room for it.
    pub fn afford(&mut self, bytes: usize, pool: &Buffers) -> bool {
        let need = bytes.saturating_sub(buffers::READ_BUFFER_BYTES);
        if need <= self.charged {
            return true;
        }
        if !pool.budget().try_take(need - self.charged) {
            return false;
        }
        self.charged = need;
        true
    }
}

/// A connection: its socket and how the worker moves its bytes, its input and output, and its
/// [`Session`], what it holds between them. A turn borrows the session, the output and the
/// input as three parts.
pub struct Conn {
    /// The socket.
    pub transport: Transport,
    /// Distinguishes this connection from earlier ones in the same slot.
    pub generation: u32,
    /// Its socket's descriptor (a UDP request's: the UDP socket's).
    pub fd: i32,
    /// Input.
    pub input: Input,
    /// Output.
    pub output: Output,
    /// How its bytes move.
    pub ring: RingIo,
    /// The socket may have more to read.
    pub read_ready: bool,
    /// The peer has closed its side (epoll's read-closed): a short read does not mean the
    /// socket is drained, the end of input is still to be read (no edge will report it again).
    pub peer_closed: bool,
    /// The socket refused a write; wait for writable.
    pub write_blocked: bool,
    /// Queued for servicing this loop turn.
    pub queued: bool,
    /// Flushes in a row that held ready output back while replies from other workers were
    /// outstanding (at most `HOLD_FLUSHES_MAX`).
    pub held: u8,
    /// `output.sent_total` when the client memory budget was last found spent: a connection
    /// whose client has read nothing since is shed ([`budget`]).
    pub sent_seen: u64,
    /// What the conversation holds between its bytes.
    pub session: Session,
}

/// What a connection's conversation holds between its bytes: what the worker may do with it,
/// where it stands with authentication and its protocol, a dump or a watch it runs, and how
/// its input ended.
pub struct Session {
    /// What the worker may do with it.
    pub state: State,
    /// The protocol it speaks: `Auto` until its first byte decides (memcached's -B).
    pub protocol: crate::config::Protocol,
    /// Where it stands with authentication ([`auth::Phase`]; `Open` without -S or -Y).
    pub phase: auth::Phase,
    /// A running `lru_crawler metadump` (its request stays at the front of the input until
    /// the dump is complete).
    pub dump: Option<crate::session::dump::Cursor>,
    /// A request other than a get or `mn` ran since the input last ran dry: memcached still
    /// holds its response, and refuses a metadump behind it ("cannot pipeline").
    pub stacked: bool,
    /// The client closed its side: nothing more is read; the connection closes once what it
    /// sent is answered.
    pub eof: bool,
    /// Its buffered bytes do not yet form a request (or a refused data block is still
    /// arriving): it waits for the socket like an idle connection.
    pub starved: bool,
    /// Closed for a protocol error (`watch connevents` says `reason=error`).
    pub error: bool,
    /// Its entry in `stats conns` (stream connections), which it keeps current.
    pub info: Option<std::sync::Arc<crate::observe::registry::Info>>,
    /// A `watch` connection: the log lines waiting for it (what it sends is ignored).
    pub watch: Option<std::sync::Arc<crate::observe::watch::Sink>>,
    /// A Redis transaction being built: MULTI's queue, WATCH's keys.
    pub tx: Option<Box<tx::Tx>>,
    /// Its Redis database (SELECT; qs_proto::resp::db).
    pub db: u8,
}

impl Session {
    /// The database the next requests' keys belong to: one a SELECT queued inside MULTI
    /// names (the requests after it are queued for it), else the connection's.
    pub fn db_ahead(&self) -> u8 {
        self.tx.as_ref().filter(|tx| tx.multi).and_then(|tx| tx.db).unwrap_or(self.db)
    }
}

impl Conn {
    /// A new connection on `transport`, open, with nothing read or written yet.
    pub fn new(
        transport: Transport,
        generation: u32,
        input: Input,
        output: Output,
        protocol: crate::config::Protocol,
    ) -> Conn {
        Conn {
            transport,
            generation,
            fd: -1,
            input,
            output,
            ring: RingIo::Off,
            read_ready: false,
            peer_closed: false,
            write_blocked: false,
            queued: false,
            held: 0,
            sent_seen: 0,
            session: Session {
                state: State::Open,
                protocol,
                phase: auth::Phase::Open,
                dump: None,
                stacked: false,
                eof: false,
                starved: false,
                error: false,
                info: None,
                watch: None,
                tx: None,
                db: 0,
            },
        }
    }

    /// Whether its socket may be read now: it is open, it has more, and its output does not
    /// hold its requests back.
    pub fn may_read(&self) -> bool {
        self.read_ready
            && self.session.state == State::Open
            && !self.session.eof
            && self.output.held_bytes() <= OUTPUT_BYTES_HIGH
    }

    /// Whether a connection on the worker's io_uring should have its receive posted: it may
    /// take input (open, not at its end, its output under the bound) and its input has room
    /// ([`Conn::input_room`]) for a receive that may take up to `overshoot` bytes past it.
    pub fn wants_input(&self, overshoot: usize) -> bool {
        self.session.state == State::Open
            && !self.session.eof
            && self.output.held_bytes() <= OUTPUT_BYTES_HIGH
            && self.input_room(overshoot) > 0
    }

    /// How many more bytes the input may take now, for a receive that may take up to
    /// `overshoot` bytes past what it is asked for: a read buffer's worth of requests waiting
    /// to run is enough (as on epoll), so the input never outgrows its read buffer for them;
    /// while a request waits for the rest of itself, at least another read buffer's worth (a
    /// long value: all of what the budget gave it), up to the input's limit.
    pub fn input_room(&self, overshoot: usize) -> usize {
        let pending = self.input.end - self.input.start;
        let below_limit = self.input.limit.saturating_sub(pending);
        if self.session.starved {
            let value = (buffers::READ_BUFFER_BYTES + self.input.charged).saturating_sub(pending);
            value.max(buffers::READ_BUFFER_BYTES).min(below_limit)
        } else {
            buffers::READ_BUFFER_BYTES.saturating_sub(pending + overshoot).min(below_limit)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::buffers::READ_BUFFER_BYTES;
    use super::*;

    /// A connection whose input holds `pending` bytes, `starved` or not, `charged` for a long
    /// value, with a limit of 1 MiB.
    fn conn_with_input(pending: usize, starved: bool, charged: usize) -> Conn {
        let input = Input {
            limit: 1 << 20,
            buf: vec![0; pending],
            start: 0,
            end: pending,
            skip: 0,
            lent: false,
            charged,
            arriving: None,
            since: 0,
            frame: Default::default(),
            mapped: 0,
            map_fence: false,
            map_next: false,
        };
        let peer = "127.0.0.1:1".parse().unwrap();
        let transport = Transport::Udp { peer, request_id: 0, socket: 0 };
        let mut conn = Conn::new(transport, 1, input, Output::new(1), crate::config::Protocol::Ascii);
        conn.session.starved = starved;
        conn
    }

    #[test]
    fn a_receive_takes_no_more_than_a_read_buffer_of_requests_and_all_of_a_long_value() {
        let overshoot = 2047;
        // Requests wait to run: room up to a read buffer, less what a receive may overshoot.
        assert_eq!(
            conn_with_input(1000, false, 0).input_room(overshoot),
            READ_BUFFER_BYTES - 1000 - overshoot
        );
        let full = conn_with_input(READ_BUFFER_BYTES - overshoot, false, 0);
        assert_eq!(full.input_room(overshoot), 0);
        assert!(!full.wants_input(overshoot), "a read buffer of requests is enough");
        // Waiting for the rest of a request: at least another read buffer's worth.
        assert_eq!(conn_with_input(0, true, 0).input_room(overshoot), READ_BUFFER_BYTES);
        assert_eq!(conn_with_input(20_000, true, 0).input_room(overshoot), READ_BUFFER_BYTES);
        // A long value the budget gave 500 KB: all of it may come.
        let long = conn_with_input(10_000, true, 500_000);
        assert_eq!(long.input_room(overshoot), READ_BUFFER_BYTES + 500_000 - 10_000);
        // Never past the input's limit.
        assert_eq!(conn_with_input((1 << 20) - 5, true, 0).input_room(overshoot), 5);
        assert!(!conn_with_input(1 << 20, true, 0).wants_input(overshoot));
    }

    #[test]
    fn received_bytes_append_to_the_input_and_its_buffer_grows_past_the_limit_only_as_needed() {
        let mut pool = Buffers::new(usize::MAX);
        let mut input = Input::new(8);
        assert!(input.append(b"get a\r\n", &mut pool));
        assert!(input.lent);
        assert_eq!(input.pending(), b"get a\r\n");
        input.consume(4);
        // Parsed bytes make room first.
        assert!(input.append(b"get b\r\n", &mut pool));
        assert_eq!(input.pending(), b"a\r\nget b\r\n");
        let big = vec![b'x'; 3 * READ_BUFFER_BYTES];
        assert!(input.append(&big, &mut pool));
        assert_eq!(input.pending().len(), 10 + big.len());
        input.consume(input.end - input.start);
        input.lend_back(&mut pool);
        assert!(!input.lent && input.buf.is_empty());
    }

    impl Output {
        /// Everything ready to send, in one buffer.
        fn unsent(&self) -> Vec<u8> {
            let mut slices = [std::io::IoSlice::new(&[]); 64];
            let count = self.unsent_slices(&budget::NoLogs, &mut slices);
            slices[..count].iter().flat_map(|slice| slice.iter().copied()).collect()
        }
    }

    #[test]
    fn replies_leave_in_request_order() {
        let mut output = Output::new(2);
        output.reply_buf().extend_from_slice(b"a");
        let first = output.wait_for(1);
        output.reply_buf().extend_from_slice(b"c");
        let second = output.wait_for(1);
        output.reply_buf().extend_from_slice(b"e");
        assert_eq!(output.unsent(), b"a");
        assert!(output.fill(second, b"d"));
        assert_eq!(output.unsent(), b"a");
        assert!(output.fill(first, b"b"));
        assert_eq!(output.unsent(), b"abcde");
        assert_eq!(output.pending_total, 0);
        assert!(!output.fill(first, b"x"));
    }

    #[test]
    fn values_left_out_of_one_execution_go_between_its_bytes_and_their_segments_are_reused() {
        let budget = std::sync::Arc::new(budget::ClientMemory::new(usize::MAX));
        let value = |bytes: &[u8]| budget::SharedValue::new(bytes, budget.clone());
        let (mut output, mut pool, mut segments) =
            (Output::new(1), Buffers::default(), SegmentPool::default());
        output.borrow(&mut pool);
        // A get of three keys: head, value, head, value, head, value, end.
        output.reply_buf().extend_from_slice(b"h1|h2|h3|end");
        output.adopt(&mut vec![(3, value(b"V1")), (6, value(b"V2")), (9, value(b"V3"))], &mut segments);
        assert_eq!(output.unsent(), b"h1|V1h2|V2h3|V3end");
        output.advance(output.held_bytes());
        output.lend_back(&mut pool, &mut segments);
        assert_eq!(output.held_bytes(), 0);
        let pooled = segments.len();
        assert!(pooled >= 3, "the emptied segments are pooled ({pooled})");
        // The next get takes its segment from the pool.
        output.borrow(&mut pool);
        output.reply_buf().extend_from_slice(b"h|end");
        output.adopt(&mut vec![(2, value(b"V"))], &mut segments);
        assert_eq!(output.unsent(), b"h|Vend");
        assert_eq!(segments.len(), pooled - 1);
    }

    #[test]
    fn marks_land_where_each_reply_ends_once_replies_are_in_order() {
        let mut output = Output::new(2);
        output.reply_buf().extend_from_slice(b"aa");
        output.mark(None);
        let waiting = output.wait_for(1);
        output.mark(Some(b"k".as_slice().into()));
        output.reply_buf().extend_from_slice(b"c");
        output.mark(None);
        assert_eq!(output.marks, vec![(2, None)]);
        assert!(output.fill(waiting, b"bbb"));
        assert_eq!(output.unsent(), b"aabbbc");
        assert_eq!(output.marks, vec![(2, None), (5, Some(b"k".as_slice().into())), (6, None)]);
    }

    proptest::proptest! {
        /// Whatever order other workers answer in, and however segments are reused, the bytes
        /// sent are every reply in request order.
        #[test]
        fn sent_bytes_are_the_replies_in_request_order(
            steps in proptest::collection::vec((0u8..4, 0usize..64, 1usize..40), 1..200),
            send_max in 1usize..100,
        ) {
            let budget = std::sync::Arc::new(budget::ClientMemory::default());
            let mut output = Output::new(3);
            // The model: each request's reply, `None` while it waits.
            let mut model: Vec<Option<Vec<u8>>> = Vec::new();
            let mut waiting: Vec<(u64, usize)> = Vec::new();
            let mut sent = Vec::new();
            for (n, &(kind, pick, len)) in steps.iter().enumerate() {
                let reply: Vec<u8> = (0..len).map(|i| b'a' + ((n + i) % 26) as u8).collect();
                match kind {
                    0 => {
                        output.reply_buf().extend_from_slice(&reply);
                        model.push(Some(reply));
                    }
                    1 => {
                        waiting.push((output.wait_for(1 + pick % 2), model.len()));
                        model.push(None);
                    }
                    2 => {
                        // A large value left out of the reply buffer, between two replies.
                        let buf = output.reply_buf();
                        buf.extend_from_slice(b"<");
                        let at = buf.len();
                        buf.extend_from_slice(b">");
                        let value = budget::SharedValue::new(&reply, budget.clone());
                        output.adopt(&mut vec![(at, value)], &mut SegmentPool::default());
                        model.push(Some([&b"<"[..], &reply, b">"].concat()));
                    }
                    _ if !waiting.is_empty() => {
                        let (id, at) = waiting.remove(pick % waiting.len());
                        proptest::prop_assert!(output.fill(id, &reply));
                        model[at] = Some(reply);
                    }
                    _ => {}
                }
                // Send what is ready, as the worker would, the socket taking at most `send_max`.
                let ready = output.unsent();
                let taken = ready.len().min(send_max);
                sent.extend_from_slice(&ready[..taken]);
                output.advance(taken);
                while output.has_unsent() {
                    let ready = output.unsent();
                    sent.extend_from_slice(&ready);
                    output.advance(ready.len());
                }
                let expected: Vec<u8> = model.iter().map_while(|reply| reply.clone()).flatten().collect();
                proptest::prop_assert_eq!(&sent, &expected);
            }
            proptest::prop_assert_eq!(output.pending_total as usize, waiting.len());
        }
    }

    #[test]
    fn idle_connections_hold_no_buffer() {
        let mut pool = Buffers::default();
        let mut input = Input::new(1 << 20);
        assert_eq!(input.buf.capacity(), 0);
        input.spare(&mut pool).unwrap()[..5].copy_from_slice(b"get a");
        input.end = 5;
        input.lend_back(&mut pool);
        assert_eq!(input.pending(), b"get a", "unparsed bytes keep their buffer");
        input.consume(5);
        input.lend_back(&mut pool);
        assert_eq!(input.buf.capacity(), 0);
        assert_eq!(pool.figures().bytes_free, READ_BUFFER_BYTES);
        let mut output = Output::new(2);
        output.borrow(&mut pool);
        output.reply_buf().extend_from_slice(b"END\r\n");
        output.lend_back(&mut pool, &mut SegmentPool::default());
        assert_eq!(output.unsent(), b"END\r\n", "unsent bytes keep their buffer");
        output.advance(5);
        output.lend_back(&mut pool, &mut SegmentPool::default());
        assert_eq!(output.out.capacity(), 0);
        output.borrow(&mut pool);
        assert!(output.out.capacity() > 0, "the pool's buffer is lent again");
    }

    #[test]
    fn the_limit_is_split_between_workers_in_whole_read_buffers() {
        assert_eq!(Buffers::limit_per_worker(0, 4), usize::MAX, "0: no limit");
        assert_eq!(Buffers::limit_per_worker(1 << 20, 32), 2 * READ_BUFFER_BYTES);
        assert_eq!(Buffers::limit_per_worker(1 << 20, 128), READ_BUFFER_BYTES, "at least one");
        assert_eq!(Buffers::limit_per_worker(1 << 20, 3), 21 * READ_BUFFER_BYTES);
    }

    #[test]
    fn a_limited_pool_lends_no_read_buffer_past_its_limit_and_takes_back_on_release() {
        let mut pool = Buffers::new(2 * READ_BUFFER_BYTES);
        let mut inputs: Vec<Input> = (0..3).map(|_| Input::new(1 << 20)).collect();
        assert!(inputs[0].spare(&mut pool).is_some());
        assert!(inputs[1].spare(&mut pool).is_some());
        assert!(inputs[2].spare(&mut pool).is_none(), "a third buffer is past the limit");
        assert_eq!(pool.room(), 0);
        inputs[0].end = 3;
        inputs[0].lend_back(&mut pool);
        assert_eq!(pool.room(), 0, "unparsed bytes keep their buffer");
        let mut output = Output::new(1);
        pool.release(&mut inputs[0], &mut output);
        assert_eq!(pool.room(), READ_BUFFER_BYTES);
        assert!(inputs[2].spare(&mut pool).is_some(), "the released buffer is lent again");
        let figures = pool.figures();
        assert_eq!((figures.count, figures.bytes, figures.bytes_free), (2, 2 * READ_BUFFER_BYTES, 0));
    }

    #[test]
    fn reply_memory_is_charged_as_it_grows_and_released_once_sent() {
        let mut pool = Buffers::new(8 * READ_BUFFER_BYTES);
        let mut output = Output::new(2);
        output.borrow(&mut pool);
        output.reply_buf().extend_from_slice(&[b'x'; 50_000]);
        let waiting = output.wait_for(1);
        output.reply_buf().extend_from_slice(&[b'y'; 10_000]);
        pool.charge(&mut output);
        let charged = pool.figures().reply_bytes;
        assert!(charged >= 60_000, "{charged}");
        assert_eq!(pool.figures().replies, 1);
        assert_eq!(pool.room(), 8 * READ_BUFFER_BYTES - charged);
        assert_eq!(pool.hold_room(), (4 * READ_BUFFER_BYTES).saturating_sub(charged));
        assert!(output.fill(waiting, b"z"));
        output.advance(output.unsent().len());
        output.lend_back(&mut pool, &mut SegmentPool::default());
        assert_eq!((pool.figures().replies, pool.figures().reply_bytes), (0, 0));
        assert_eq!(pool.room(), 8 * READ_BUFFER_BYTES);
        // Over the limit the pool keeps nothing more and lends nothing.
        let mut big = Output::new(1);
        big.reply_buf().extend_from_slice(&vec![0; 9 * READ_BUFFER_BYTES]);
        pool.charge(&mut big);
        assert_eq!(pool.room(), 0);
        let mut other = Output::new(1);
        other.borrow(&mut pool);
        assert_eq!(other.out.capacity(), 0, "no reply memory past the limit");
        pool.release(&mut Input::new(16), &mut big);
        assert_eq!(pool.figures().reply_bytes, 0);
    }

    #[test]
    fn skipping_runs_past_the_buffer() {
        let mut input = Input::new(1 << 20);
        input.spare(&mut Buffers::default()).unwrap();
        input.buf[..4].copy_from_slice(b"abcd");
        input.end = 4;
        input.consume(10);
        assert_eq!(input.skip, 6);
        input.buf[..8].copy_from_slice(b"123456xy");
        input.end = 8;
        assert!(input.apply_skip());
        assert_eq!(input.pending(), b"xy");
    }
}
