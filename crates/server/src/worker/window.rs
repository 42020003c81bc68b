//! The window pipeline: a connection's buffered requests parsed a window at a time, each key
//! hashed once, buckets then items prefetched, then each request run here, handed to its
//! owner, or parked (flash reads, output space, another worker's replies); and the reads
//! ahead that make one window of a turn's connections at depth 1.

use super::turn::{Flow, Turn};
use super::*;
use crate::observe::latency::Family;

impl Worker {
    /// Processes buffered requests and reads more until the socket is drained or the
    /// connection must wait.
    pub(super) fn service(&mut self, index: usize) {
        let Some(conn) = self.conns[index].as_mut() else { return };
        conn.queued = false;
        conn.output.borrow(&mut self.buffers);
        // Large values go out from shared copies on stream connections (a UDP reply is cut
        // into datagrams from one buffer).
        let stream = matches!(conn.transport, Transport::Tcp(_));
        loop {
            self.engine.shares.on = stream;
            self.process(index);
            self.engine.shares.on = false;
            let Some(conn) = self.conns[index].as_mut() else { return };
            if !conn.may_read()
                || !read_once(
                    conn,
                    (&mut self.engine.counters, self.engine.turn_ticks),
                    &mut self.buffers,
                    self.shared.credentials.tls().map(|tls| &**tls),
                )
            {
                break;
            }
        }
        if let Some(conn) = self.conns[index].as_mut() {
            if matches!(conn.transport, Transport::Tcp(_)) {
                conn.input.lend_back(&mut self.buffers);
            }
            self.buffers.settle(&mut conn.output);
            // A connection dropped (a read_buf_oom among the reasons) shows in stats at once.
            self.executed |= conn.session.state.is_dead();
        }
        self.sync_receive(index);
        queue_flush(&mut self.flush, index);
    }

    /// Reads the connections queued this turn whose buffers are empty, and starts loading the
    /// bucket and then the item of each one's first request before any of them runs: at
    /// depth 1 a connection brings one request per turn, so the turn's connections together
    /// are the batch that hides the memory loads (MICA's prefetch pipeline, across
    /// connections). The keys are guessed before parsing; a wrong guess only wastes a load.
    pub(super) fn read_ahead(&mut self) {
        if self.work.len() < 2 {
            return;
        }
        let Worker { work, conns, engine, ahead, buffers, shared, .. } = self;
        let tls = shared.credentials.tls().map(|tls| &**tls);
        ahead.clear();
        let mut read = 0;
        // `service` pops the queue from its end: load in that order.
        for &index in work.iter().rev() {
            if read == READ_AHEAD_MAX {
                // The rest are read as they are served, one read buffer out at a time.
                break;
            }
            let Some(conn) = conns[index].as_mut() else { continue };
            let fresh = if conn.ring == RingIo::Off {
                // Read only into an empty buffer, and fresh only if the read brought bytes.
                let empty = conn.input.end == 0 && conn.may_read();
                empty
                    && read_once(conn, (&mut engine.counters, engine.turn_ticks), buffers, tls)
                    && conn.input.end > 0
            } else {
                // Its bytes came in with the ring's completions.
                conn.input.end != 0
            };
            if !fresh {
                // A read that found nothing gives its buffer back at once: a burst of new or
                // woken connections would otherwise hold one each until served, and the
                // burst's buffers, freed after, stay in the allocator's heap (memory per
                // idle connection swung 0.6-8 KiB from run to run with the burst's size).
                if conn.ring == RingIo::Off && matches!(conn.transport, Transport::Tcp(_)) {
                    conn.input.lend_back(buffers);
                }
                continue;
            }
            read += 1;
            if let Some(key) = qs_proto::key_guess(conn.input.pending()) {
                ahead.push(engine.prefetch_key(key));
            }
        }
        for &located in ahead.iter() {
            engine.prefetch_item(located);
        }
    }

    /// Parses and runs (or hands over) every complete request buffered on connection `index`.
    ///
    /// Requests are taken a window at a time: the window is parsed first, its keys hashed
    /// and their buckets and then their items prefetched, so the memory loads of a pipeline
    /// overlap instead of stalling one request at a time (MICA's prefetch pipeline); then each
    /// request is decided and applied in order (turn.rs).
    pub(super) fn process(&mut self, index: usize) {
        let Worker {
            conns,
            engine,
            handover: HandOver { outgoing, spare, broadcast, inflight, .. },
            index: me,
            executed,
            retry,
            shared,
            watching,
            buffers,
            flash,
            poll,
            net,
            later,
            work,
            flush,
            ..
        } = self;
        // The connection's slot apart from the others: a script of its past lua-time-limit lets
        // them in (busy.rs).
        let (before, rest) = conns.split_at_mut(index);
        let Some((Some(conn), after)) = rest.split_first_mut() else { return };
        if conn.session.state.blocked(Wait::Flash) {
            return;
        }
        conn.session.starved = false;
        let Some(dialect) = admit(conn, shared, engine, executed) else { return };
        conn.session.state.unblock(Wait::Turn);
        let Conn { input, output, session, generation, transport, fd, ring, write_blocked, .. } = conn;
        let full = outgoing.iter().flatten().any(|batch| batch.requests.len() >= BATCH_BYTES_MAX)
            || inflight.iter().any(|&bytes| bytes >= INFLIGHT_BYTES_MAX);
        let (conn, generation, fd) = (index as u32, *generation, *fd);
        let mut hand = Hand { outgoing, spare, conn, generation, fd, full, broadcast };
        let udp = matches!(transport, Transport::Udp { .. });
        let mut turn = Turn {
            engine,
            hand: &mut hand,
            retry,
            shared,
            watching,
            buffers,
            flash,
            executed,
            output,
            session,
            write_blocked: *write_blocked,
            me: *me,
            index,
            generation,
            udp,
            dialect,
            reqs_per_event: if udp { u32::MAX } else { shared.config.reqs_per_event },
            served: 0,
            others: super::busy::Others { before, after },
            poll,
            net,
            later,
            work,
            flushing: flush.queued(),
        };
        windows(&mut turn, input, *ring != RingIo::Off);
    }
}

/// Runs a connection's windows one after another until its input runs dry or one stops it,
/// consuming what they ran (and settling a long store's budget, or a get of several keys
/// stopped part way).
#[inline(always)]
fn windows(turn: &mut Turn<'_, '_>, input: &mut Input, on_ring: bool) {
    // The first request may be one that waited for flash: its resolved keys serve it only.
    let mut ran_first = !turn.engine.flash_on();
    loop {
        if turn.output.pending_total == 0 {
            // What it waited for has arrived (service reads again only once this clears).
            turn.session.state.unblock(Wait::Replies);
        }
        if !input.apply_skip() {
            // A refused value still to swallow: at the end of input there is no more of
            // it, and the connection ends (memcached closes a swallowing connection at EOF).
            if turn.session.eof {
                turn.session.state.close();
            }
            turn.session.starved = true;
            return;
        }
        if input.arriving.is_some() && !arrive(turn, input) {
            // More of a value arriving into the log is to come (at the end of input, none).
            if turn.session.eof {
                turn.session.state.close();
            }
            turn.session.starved = true;
            return;
        }
        if turn.dialect.is_resp() {
            // Keys into the connection's database before they are parsed (qs_proto::resp::db).
            let spaces = &turn.shared.db_spaces;
            let db = spaces.space(turn.session.db_ahead());
            if (db != 0 || input.map_next) && input.map_databases(db, spaces) {
                turn.shared.use_databases();
            }
        }
        let mut map_next = false;
        // The window borrows the read buffer: it lives in this block, dropped in place.
        let (mut consumed, stop, resume, long) = 'window: {
            let pending = input.pending();
            if turn.dialect.is_resp() && input.frame.get().started() && still_arriving(input) {
                // The request at the front is still arriving: not parsed from its start again.
                match ran_dry(turn, input, on_ring) {
                    Some(long) => break 'window (0, false, None, Some(long)),
                    None => return,
                }
            }
            // Filled in place: a window returned by value is copied whole (16 entries) twice a
            // turn at depth 1 (callgrind: 650 instructions a request).
            let mut window = ArrayVec::new();
            let dialect = turn.dialect;
            map_next = fill_window(&mut window, (pending, input.mapped), dialect, turn.engine, turn.output);
            if window.is_empty() && map_next {
                // A request at the front to map first.
                break 'window (0, false, None, None);
            }
            if window.is_empty() {
                match ran_dry(turn, input, on_ring) {
                    Some(long) => break 'window (0, false, None, Some(long)),
                    None => return,
                }
            }
            if let Some(info) = &turn.session.info {
                info.touch(turn.engine.now.secs());
            }
            let (consumed, stop, resume) = run_window(turn, &window, (pending, input.since), &mut ran_first);
            (consumed, stop, resume, None)
        };
        if let Some(len) = long {
            // A store longer than a read buffer: a set of a key owned here has its value
            // received into the log; any other's bytes come from the client memory budget
            // before they arrive, or it is refused and they are swallowed.
            if let Some(line_len) = start_arriving(turn, input, len) {
                consumed = line_len;
            } else if input.afford(len, turn.buffers) {
                input.hold_frame(len, !on_ring);
            } else if turn.dialect.is_resp() {
                *turn.executed = true;
                consumed = budget::refuse_resp(input.pending(), turn.engine, turn.output);
                turn.session.state.close();
            } else {
                *turn.executed = true;
                consumed = budget::refuse_store(
                    turn.dialect,
                    input.pending(),
                    turn.me,
                    turn.engine,
                    turn.hand,
                    turn.output,
                );
            }
        }
        if let Some(resume) = resume {
            consumed = resume.apply(input);
        }
        input.consume(consumed);
        input.map_next |= map_next;
        if stop {
            return;
        }
        if !turn.session.phase.admitted() {
            // RESET where a password is asked for: what follows goes through the gate, in
            // the connection's next turn.
            turn.retry.push(turn.index);
            return;
        }
        if input.start == input.end && input.skip == 0 && input.arriving.is_none() {
            // Every byte read ran (at depth 1, every turn): the input ran dry, as the next
            // window would find, told without building it.
            if turn.output.pending_total == 0 {
                turn.session.state.unblock(Wait::Replies);
            }
            dried(turn, input.pending());
            return;
        }
    }
}

/// Starts the long store at the front of `input` (its frame `len` bytes) as a set whose value
/// goes into the log as it arrives, where it is a text `set` of a key this worker owns and its
/// partition takes it: the length of its command line, done with. `None` for the ordinary path.
fn start_arriving(turn: &mut Turn<'_, '_>, input: &mut Input, len: usize) -> Option<usize> {
    if turn.dialect != Dialect::Text || turn.udp {
        return None;
    }
    let pending = input.pending();
    let Parsed::Request { request, .. } = turn.dialect.parse(pending, &budget::HEADER_ONLY) else {
        return None;
    };
    let (arriving, line_len) = turn.engine.begin_arriving(&request, pending, len)?;
    input.arriving = Some(arriving);
    Some(line_len)
}

/// Feeds a set's value arriving into the log what the input holds of it: true once the set is
/// done with (its value and the `\r\n` after it in, and answered), false while more is to come.
fn arrive(turn: &mut Turn<'_, '_>, input: &mut Input) -> bool {
    let Some(arriving) = input.arriving.as_mut() else { return true };
    let taken = turn.engine.fill_arriving(arriving, &input.buf[input.start..input.end]);
    let remaining = arriving.remaining();
    input.consume(taken);
    if remaining > 0 || input.end - input.start < 2 {
        return false;
    }
    let ended = input.pending().starts_with(b"\r\n");
    input.consume(2);
    let arriving = input.arriving.take().expect("a value arriving");
    turn.engine.finish_arriving(*arriving, (ended, turn.hand.fd), turn.output.reply_buf());
    *turn.executed = true;
    true
}

/// A window with no complete request: a store longer than its buffer, whose bytes the budget
/// settles next (its length); else the connection waits for more input (`None`), or is closed
/// for garbage as long as its input limit without a line end (on the ring; epoll's read stops
/// at the limit, and the parser would have refused a request this long).
fn ran_dry(turn: &mut Turn<'_, '_>, input: &Input, on_ring: bool) -> Option<usize> {
    let pending = input.pending();
    let long = match turn.dialect.is_resp() {
        // Walked on from where the last read's walk stopped (and left there for the next).
        true => resp_arriving(input),
        false => budget::long_store(turn.dialect, pending),
    };
    let long = long.filter(|&len| len > READ_BUFFER_BYTES + input.charged);
    if long.is_some() {
        return long;
    }
    if pending.len() >= input.limit && on_ring {
        turn.session.state.kill();
        turn.session.error = true;
        turn.engine.counters.conns_dropped += 1;
        return None;
    }
    dried(turn, pending);
    None
}

/// The input ran dry with `pending` left (no whole request): memcached would send what it
/// holds now; at the end of input the connection closes.
#[inline(always)]
fn dried(turn: &mut Turn<'_, '_>, pending: &[u8]) {
    turn.session.stacked = false;
    if turn.session.eof {
        turn.session.state.close();
    }
    turn.session.starved = true;
    if let Some(info) = &turn.session.info {
        info.ran_dry(pending);
    }
}

/// Whether the RESP request at the front of `input` is still arriving, walked on from where
/// the last walk of it stopped (and how far it got kept for the next).
fn still_arriving(input: &Input) -> bool {
    match qs_proto::resp::progress(input.pending(), input.frame.get()) {
        qs_proto::resp::Walked::Arriving { progress, .. } => {
            input.frame.set(progress);
            true
        }
        qs_proto::resp::Walked::Other => false,
    }
}

/// [`budget::long_store`] for a RESP request still arriving at the front of `input`: how long
/// it is at least, once half a read buffer of it waits; its walk kept in `input.frame`.
fn resp_arriving(input: &Input) -> Option<usize> {
    let pending = input.pending();
    match qs_proto::resp::progress(pending, input.frame.get()) {
        qs_proto::resp::Walked::Arriving { progress, at_least } => {
            input.frame.set(progress);
            at_least.filter(|&len| len > READ_BUFFER_BYTES && pending.len() >= READ_BUFFER_BYTES / 2)
        }
        qs_proto::resp::Walked::Other => None,
    }
}

/// Fills `window` with the requests of one window, parsed from `pending`: each key hashed once and its bucket
/// prefetched (stage 1); with more than one, their items prefetched too (stage 2 only pays when
/// other requests run while an item loads: a request alone, at depth 1, goes straight to its
/// lookup). A request that must wait for other workers' replies ends the window (what
/// follows would be parsed again after the wait), as do a close and a refused block running
/// past the buffer.
/// A RESP request past the `mapped` bytes that must be put into its database though the
/// connection is in database 0 (a COPY with `DB`) ends the window before it: true then.
#[inline(always)]
fn fill_window<'p>(
    window: &mut ArrayVec<(Parsed<'p>, Option<Located>), WINDOW>,
    (pending, mapped): (&'p [u8], usize),
    dialect: Dialect,
    engine: &mut Engine,
    output: &Output,
) -> bool {
    let mut ahead = 0;
    // Workers this connection will be waiting on.
    let mut waiting_on = output
        .pending
        .iter()
        .enumerate()
        .filter(|&(_, &count)| count > 0)
        .fold(0u64, |bits, (owner, _)| bits | 1 << (owner % 64));
    while !window.is_full() && ahead < pending.len() {
        let parsed = dialect.parse(&pending[ahead..], &engine.limits);
        let (len, located, stalls) = match &parsed {
            Parsed::Incomplete => break,
            Parsed::Close => (usize::MAX, None, false),
            Parsed::Refused { len, .. } => (*len, None, false),
            Parsed::Request { request: Request::Resp(frame), .. }
                if ahead >= mapped && qs_proto::resp::db::needs_map(frame) =>
            {
                return true;
            }
            Parsed::Request { request, len } => {
                let located = engine.locate_request(request);
                (*len, located, engine.stalls(request, located, &mut waiting_on))
            }
        };
        if let Some(located) = located {
            engine.prefetch_bucket(located);
        }
        let switches = dialect.is_resp() && Dialect::switches_after(&parsed);
        window.push((parsed, located));
        if stalls || switches || len >= pending.len() - ahead {
            break;
        }
        ahead += len;
    }
    if window.len() > 1 {
        for (_, located) in window.iter() {
            if let Some(located) = located {
                engine.prefetch_item(*located);
            }
        }
    }
    false
}

/// Runs a window's requests in order until one stops it: the bytes consumed, whether the
/// window stopped, and where a get of several keys stopped part way.
#[inline(always)]
fn run_window(
    turn: &mut Turn<'_, '_>,
    window: &[(Parsed<'_>, Option<Located>)],
    (pending, read_at): (&[u8], u64),
    ran_first: &mut bool,
) -> (usize, bool, Option<codec::Resume>) {
    let flash_on = turn.engine.flash_on();
    // The latency histograms: the window was parsed just now.
    let latency = turn.shared.observers.latency.worker(turn.me);
    let parsed_at = crate::sys::ticks();
    let read_at = if read_at == 0 { parsed_at } else { read_at };
    let mut consumed = 0;
    // UDP: the reply of the request handled last, still to be marked as ended.
    let mut unmarked: Option<Option<Box<[u8]>>> = None;
    let mut outcome = (false, None);
    // A request that waits for flash: the window's requests after it may start their flash
    // reads now (FlashWaits::prefetch).
    let mut waits_at = None;
    for (position, (parsed, located)) in window.iter().enumerate() {
        if flash_on {
            if *ran_first {
                turn.engine.flash_forget();
            }
            *ran_first = true;
        }
        if let Some(last_key) = unmarked.take() {
            turn.output.mark(last_key);
        }
        if turn.stops_before() {
            outcome.0 = true;
            break;
        }
        turn.served += 1;
        if turn.udp {
            unmarked = Some(codec::last_get_key(parsed));
        }
        let flow = turn.step(parsed, *located, pending, &pending[consumed..]);
        // Timed when done with: a request stopped before it ran, part way (a get of several
        // keys) or for flash runs again, and is timed then.
        if let Flow::Next(_) | Flow::StopAll = flow {
            latency.record(Family::of(parsed), read_at, parsed_at, crate::sys::ticks());
        }
        match flow {
            Flow::Next(len) => consumed += len,
            Flow::Stop => outcome.0 = true,
            Flow::StopAll => (consumed, outcome.0) = (pending.len(), true),
            Flow::Resume(resume) => outcome = (true, Some(resume)),
            Flow::Flash => (waits_at, outcome.0) = (Some(position), true),
        }
        if outcome.0 {
            break;
        }
    }
    if let Some(last_key) = unmarked.take() {
        turn.output.mark(last_key);
    }
    if let Some(position) = waits_at {
        for (parsed, _) in &window[position + 1..] {
            if let Parsed::Request { request, .. } = parsed {
                turn.flash.prefetch(request, turn.engine, turn.shared);
            }
        }
    }
    (consumed, outcome.0, outcome.1)
}

/// A connection's dialect (sniffed from its first byte where its listener negotiates) and,
/// until it has authenticated, the admission phase (session::auth): `None` when nothing may
/// be parsed now (a watcher, whose input is read only to see it close, is ignored here too).
#[inline(always)]
fn admit(conn: &mut Conn, shared: &Shared, engine: &mut Engine, executed: &mut bool) -> Option<Dialect> {
    if conn.session.watch.is_some() {
        // A watcher's input is read (to see it close) and ignored, as memcached ignores it.
        conn.input.consume(conn.input.end - conn.input.start);
        if conn.session.eof {
            conn.session.state.close();
        }
        conn.session.starved = true;
        return None;
    }
    if conn.session.protocol == Protocol::Auto {
        if let Some(&first) = conn.input.pending().first() {
            conn.session.protocol = Dialect::sniff(first);
        }
    }
    let mut dialect = Dialect::of(conn.session.protocol);
    if dialect == Dialect::Resp {
        dialect = resp_version(conn);
    }
    if conn.session.phase.admitted() {
        return Some(dialect);
    }
    use crate::session::auth::{admit, Admission, Phase};
    let modes = shared.auth_modes();
    let binary = dialect == Dialect::Binary;
    let (admission, answered) = if dialect.is_resp() {
        crate::session::auth_resp::admit_resp(
            &mut conn.input,
            (&mut conn.session.state, conn.session.eof),
            modes,
            (&mut engine.counters, conn.session.info.as_deref()),
            conn.output.reply_buf(),
        )
    } else {
        admit(
            &mut conn.input,
            &mut conn.session.state,
            conn.session.eof,
            binary,
            modes,
            &mut engine.counters,
            conn.output.reply_buf(),
        )
    };
    *executed |= answered;
    match admission {
        Admission::Parse => {
            // A text or RESP connection's Parse is its authentication's success (a binary
            // one's, a frame the SASL gate is to see).
            if !binary {
                conn.session.phase = Phase::Authenticated;
            }
            // HELLO 3 with its AUTH: RESP3 from the next request.
            Some(if dialect.is_resp() { resp_version(conn) } else { dialect })
        }
        Admission::Wait => {
            if conn.session.eof {
                conn.session.state.close();
            }
            conn.session.starved = true;
            None
        }
        Admission::Done => None,
    }
}

/// A RESP connection's dialect: RESP3 once it said HELLO 3 (its registry entry keeps the
/// version), else RESP2. Kept out of line: memcached's connections never ask.
#[inline(never)]
pub(super) fn resp_version(conn: &Conn) -> Dialect {
    if conn.session.info.as_ref().is_some_and(|info| info.resp() == 3) {
        Dialect::Resp3
    } else {
        Dialect::Resp
    }
}
