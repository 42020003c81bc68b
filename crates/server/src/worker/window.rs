//! The window pipeline: a connection's buffered requests parsed a window at a time, each key
//! hashed once, buckets then items prefetched, then each request run here, handed to its
//! owner, or parked (flash reads, output space, another worker's replies); and the reads
//! ahead that make one window of a turn's connections at depth 1.

use super::*;

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
                || !read_once(conn, &mut self.engine.counters, &mut self.buffers, self.shared.tls.as_deref())
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
            self.executed |= conn.state.is_dead();
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
        let tls = shared.tls.as_deref();
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
                empty && read_once(conn, &mut engine.counters, buffers, tls) && conn.input.end > 0
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
    /// overlap instead of stalling one request at a time (MICA's prefetch pipeline).
    // the window loop: parsing, prefetching and running share one borrow of the read buffer per window, its fastest shape.
    #[allow(clippy::too_many_lines)]
    pub(super) fn process(&mut self, index: usize) {
        let Worker {
            conns,
            engine,
            outgoing,
            spare,
            inflight,
            index: me,
            executed,
            retry,
            shared,
            watching,
            buffers,
            flash,
            ..
        } = self;
        let me = *me;
        let Some(conn) = conns[index].as_mut() else { return };
        let Conn {
            input,
            output,
            state,
            generation,
            transport,
            dump,
            stacked,
            eof,
            starved,
            info,
            fd,
            watch,
            error,
            protocol,
            authenticated,
            ring,
            write_blocked,
            ..
        } = conn;
        if state.blocked(Wait::Flash) {
            return;
        }
        *starved = false;
        engine.conn_fd = *fd;
        if watch.is_some() {
            // A watcher's input is read (to see it close) and ignored, as memcached ignores it.
            input.consume(input.end - input.start);
            if *eof {
                state.close();
            }
            *starved = true;
            return;
        }
        let udp = matches!(transport, Transport::Udp { .. });
        if *protocol == Protocol::Auto {
            if let Some(&first) = input.pending().first() {
                *protocol = Dialect::sniff(first);
            }
        }
        let dialect = Dialect::of(*protocol);
        if !*authenticated {
            use crate::session::auth::{admit, Admission, Modes};
            let modes =
                Modes { ascii: shared.ascii_passwords.as_ref(), sasl: shared.sasl_passwords.as_ref() };
            let (admission, answered) = admit(
                input,
                state,
                *eof,
                dialect == Dialect::Binary,
                modes,
                &mut engine.counters,
                output.reply_buf(),
            );
            *executed |= answered;
            match admission {
                Admission::Parse => *authenticated |= modes.sasl.is_none() && dialect == Dialect::Text,
                Admission::Wait => {
                    if *eof {
                        state.close();
                    }
                    *starved = true;
                    return;
                }
                Admission::Done => return,
            }
        }
        state.unblock(Wait::Turn);
        let full = outgoing.iter().flatten().any(|batch| batch.requests.len() >= BATCH_BYTES_MAX)
            || inflight.iter().any(|&bytes| bytes >= INFLIGHT_BYTES_MAX);
        let mut hand = Hand { outgoing, spare, conn: index as u32, generation: *generation, fd: *fd, full };
        // memcached's -R: after this many requests the connection waits for the next turn.
        let reqs_per_event = if udp { u32::MAX } else { shared.config.reqs_per_event };
        let mut served = 0u32;
        // The first request may be one that waited for flash: its resolved keys serve it only.
        let flash_on = engine.flash_on();
        let mut ran_first = !flash_on;
        loop {
            if output.pending_total == 0 {
                // What it waited for has arrived (service reads again only once this clears).
                state.unblock(Wait::Replies);
            }
            if !input.apply_skip() {
                // A refused value still to swallow: at the end of input there is no more of
                // it, and the connection ends (memcached closes a swallowing connection at EOF).
                if *eof {
                    state.close();
                }
                *starved = true;
                return;
            }
            // The window borrows the read buffer: it lives in this block, dropped in place.
            let (mut consumed, stop, resume, long) = 'window: {
                let pending = input.pending();
                let mut window: ArrayVec<(Parsed<'_>, Option<Located>), WINDOW> = ArrayVec::new();
                let mut ahead = 0;
                // Workers this connection will be waiting on: a request that must wait for
                // them ends the window (what follows would be parsed again after the wait).
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
                        Parsed::Request { request, len } => {
                            let located = engine.locate_request(request);
                            (*len, located, engine.stalls(request, located, &mut waiting_on))
                        }
                    };
                    if let Some(located) = located {
                        engine.prefetch_bucket(located);
                    }
                    window.push((parsed, located));
                    if stalls || len >= pending.len() - ahead {
                        // A request that will wait; or a close, or a refused block running past
                        // the buffer: nothing follows.
                        break;
                    }
                    ahead += len;
                }
                if window.is_empty() {
                    // A store longer than its buffer may grow now: settled below.
                    let long = budget::long_store(dialect, pending)
                        .filter(|&len| len > READ_BUFFER_BYTES + input.charged);
                    if long.is_some() {
                        break 'window (0, false, None, long);
                    }
                }
                if window.is_empty() && pending.len() >= input.limit && *ring != RingIo::Off {
                    // On the ring (epoll's read stops at the limit): garbage without a line
                    // end, as the parser would have refused a request this long.
                    state.kill();
                    *error = true;
                    engine.counters.conns_dropped += 1;
                    return;
                }
                if window.is_empty() {
                    // The input ran dry: memcached would send what it holds now.
                    *stacked = false;
                    if *eof {
                        state.close();
                    }
                    *starved = true;
                    if let Some(info) = info {
                        info.ran_dry(pending);
                    }
                    return;
                }
                if let Some(info) = info {
                    info.touch(engine.now_secs);
                }
                // Stage 2 only pays when other requests run while the item loads: a request
                // alone (depth 1) goes straight to its lookup, which scans the bucket anyway.
                if window.len() > 1 {
                    for (_, located) in &window {
                        if let Some(located) = located {
                            engine.prefetch_item(*located);
                        }
                    }
                }
                let mut consumed = 0;
                let mut stop = false;
                let mut resume = None;
                // UDP: the reply of the request handled last, still to be marked as ended.
                let mut unmarked: Option<Option<Box<[u8]>>> = None;
                // A request that waits for flash: the window's requests after it may start
                // their flash reads now (FlashWaits::prefetch).
                let mut waits_at = None;
                for (position, (parsed, located)) in window.iter().enumerate() {
                    if flash_on {
                        if ran_first {
                            engine.flash_forget();
                        }
                        ran_first = true;
                    }
                    if let Some(last_key) = unmarked.take() {
                        output.mark(last_key);
                    }
                    // The client memory budget spent: a connection holding replies past its
                    // free share runs nothing more until its client has read them (the flush
                    // follows; one whose client reads nothing is shed).
                    let held = output.held_bytes();
                    let over = held > crate::session::budget::OUTPUT_FREE_BYTES
                        && (*write_blocked || output.pending_total == 0)
                        && buffers.budget().spent();
                    if state.is_ending() || held > OUTPUT_BYTES_HIGH || over {
                        stop = true;
                        break;
                    }
                    if !udp && buffers.limited() {
                        // -o read_buf_mem_limit (conn::Buffers): the replies written so far are
                        // charged; past half the limit a connection with replies unsent waits
                        // for its client to read them, and at the limit one holding no reply
                        // memory at all is closed, as memcached closes it.
                        buffers.charge(output);
                        let holds = output.held_bytes() > 0 || output.pending_total > 0;
                        if holds && buffers.hold_room() == 0 {
                            stop = true;
                            break;
                        }
                        if !holds && buffers.room() == 0 && output.capacity_bytes() == 0 {
                            engine.counters.response_obj_oom += 1;
                            *executed = true;
                            state.kill();
                            *error = true;
                            stop = true;
                            break;
                        }
                    }
                    if state.blocked(Wait::Replies) {
                        if output.pending_total > 0 {
                            stop = true;
                            break;
                        }
                        state.unblock(Wait::Replies);
                    }
                    if output.pending_total >= PENDING_PER_CONN_MAX {
                        state.block(Wait::Replies);
                        stop = true;
                        break;
                    }
                    if hand.full {
                        // An owner is behind: wait until this turn's batches are sent.
                        retry.push(index);
                        state.block(Wait::Turn);
                        stop = true;
                        break;
                    }
                    if served >= reqs_per_event {
                        engine.counters.conn_yields += 1;
                        retry.push(index);
                        state.block(Wait::Turn);
                        stop = true;
                        break;
                    }
                    served += 1;
                    if udp {
                        unmarked = Some(codec::last_get_key(parsed));
                    }
                    let here = &pending[consumed..];
                    // Only `mn` sends what is stacked before it (memcached 1.6.40; a get
                    // did too before).
                    let flushes = matches!(parsed, Parsed::Request { request: Request::MetaNoop, .. });
                    if let Parsed::Request { request: Request::Metadump { classes, keys }, len } = parsed {
                        if !udp {
                            *executed = true;
                            if dump.is_none() {
                                start_dump(classes, *keys, *stacked, dump, output.reply_buf(), engine);
                            }
                            *stacked = true;
                            if continue_dump(dump, output, &mut hand, engine, me) {
                                consumed += len;
                                continue;
                            }
                            // More to list once the client has read some: the request stays.
                            stop = true;
                            break;
                        }
                    }
                    if let Parsed::Request { request: Request::Watch { streams }, len } = parsed {
                        if !udp {
                            if output.pending_total > 0 {
                                // Its earlier requests' replies come first.
                                state.block(Wait::Replies);
                                stop = true;
                                break;
                            }
                            *executed = true;
                            let refusal = codec::watch_refusal(
                                shared.config.disable_watch,
                                *stacked,
                                streams.is_none(),
                            );
                            if let Some(refusal) = refusal {
                                output.reply_buf().extend_from_slice(refusal);
                                consumed += len;
                                continue;
                            }
                            *watch = Some(shared.watchers.add(streams.unwrap_or_default(), me));
                            watching.push(index);
                            if let Some(info) = info {
                                info.set_state(registry::State::Watch);
                            }
                            output.reply_buf().extend_from_slice(codec::WATCH_STARTED);
                            // Whatever follows is ignored; an end of input read with it (no
                            // event will say so again) ends the stream now.
                            consumed = pending.len();
                            if *eof {
                                state.close();
                            }
                            stop = true;
                            break;
                        }
                    }
                    // A request whose data runs past what was read (a value swallowed or read
                    // into its item) has memcached read again, and send what it holds first.
                    let runs_past = match parsed {
                        Parsed::Refused { len, .. } | Parsed::Request { len, .. } => *len > here.len(),
                        _ => false,
                    };
                    *stacked = !flushes && !runs_past;
                    let (request, len) = match parsed {
                        Parsed::Incomplete => unreachable!("the window holds no incomplete request"),
                        Parsed::Close => {
                            state.kill();
                            *error = true;
                            engine.counters.conns_dropped += 1;
                            stop = true;
                            break;
                        }
                        Parsed::Refused { reply, len, noreply } => {
                            if !noreply {
                                output.reply_buf().extend_from_slice(reply.as_bytes());
                            }
                            consumed += len;
                            continue;
                        }
                        Parsed::Request { request, len } => (request, *len),
                    };
                    if let (Request::Binary(request), Some(passwords)) =
                        (request, shared.sasl_passwords.as_ref())
                    {
                        let reply = output.reply_buf();
                        match crate::session::auth::sasl_gate(
                            request,
                            authenticated,
                            passwords,
                            &mut engine.counters,
                            reply,
                        ) {
                            crate::session::auth::Gate::Pass => {}
                            crate::session::auth::Gate::Answered { close } => {
                                *executed = true;
                                consumed += len;
                                if close {
                                    state.close();
                                    stop = true;
                                    break;
                                }
                                continue;
                            }
                        }
                    }
                    engine.hint(request, *located);
                    if let Some((key, drops)) = codec::oversized_store(request, &engine.limits) {
                        // The data block never enters the buffer: answer here, and let the owner
                        // drop the old value as memcached does.
                        let owner = engine.owner_of(key);
                        *executed = true;
                        if owner == me {
                            engine.execute(request, output.reply_buf());
                        } else {
                            if drops {
                                hand.over(owner, Task::Drop, key, output, engine);
                            }
                            // Counted here, where it is answered (the owner only drops).
                            engine.counters.cmd_set += 1;
                            engine.counters.store_too_large += 1;
                            codec::refuse_store(request, codec::Refusal::TooLarge, output.reply_buf());
                        }
                        consumed += len;
                        continue;
                    }
                    match engine.route(request, &output.pending) {
                        Route::Local => {}
                        Route::AfterPending if output.pending_total > 0 => {
                            state.block(Wait::Replies);
                            stop = true;
                            break;
                        }
                        Route::AfterPending => {}
                        Route::Forward(owner) => {
                            // A plain get of one key may come from the front cache, unless an
                            // earlier request of this connection waits on the owner.
                            // A get of one key goes as that key alone.
                            let single = match *request {
                                Request::Get { kind, keys } => {
                                    qs_proto::tokens::single_word(keys).map(|key| (kind, key))
                                }
                                _ => None,
                            };
                            if let (Some((GetKind::Get, key)), 0) = (single, output.pending[owner]) {
                                if engine.front_serve(key, output.reply_buf()) {
                                    *executed = true;
                                    consumed += len;
                                    continue;
                                }
                            }
                            match single {
                                Some((kind, key)) => {
                                    hand.over(owner, Task::Get { kind, end: true }, key, output, engine);
                                }
                                None => {
                                    hand.over(owner, Task::Request(dialect), &here[..len], output, engine)
                                }
                            }
                            consumed += len;
                            continue;
                        }
                        Route::SplitGet => {
                            let Request::Get { kind, keys } = *request else {
                                unreachable!("split gets are gets")
                            };
                            if flash_on && park_for_flash(flash, request, engine, shared, index, *generation)
                            {
                                state.block(Wait::Flash);
                                waits_at = Some(position);
                                stop = true;
                                break;
                            }
                            *executed = true;
                            let budget = OUTPUT_BYTES_HIGH
                                .saturating_sub(output.held_bytes())
                                .min(buffers.hold_room())
                                .min(buffers.budget().room());
                            let mut added = 0;
                            let mut rest = None;
                            for key in qs_proto::tokens::words(keys) {
                                let owner = engine.owner_of(key);
                                if owner == me {
                                    let buf = output.reply_buf();
                                    let before = buf.len();
                                    engine.get_one(kind, key, buf);
                                    added += buf.len() - before + engine.shares.taken_bytes();
                                    output.adopt(&mut engine.shares.taken);
                                } else {
                                    hand.over(owner, Task::Get { kind, end: false }, key, output, engine);
                                }
                                if added > budget || output.pending_total >= PENDING_PER_CONN_MAX {
                                    rest = crate::exec::keys_after(keys, key);
                                    if rest.is_some() {
                                        break;
                                    }
                                }
                            }
                            if let Some(rest) = rest {
                                resume = Some(codec::Resume::of(pending, here, keys, rest));
                                stop = true;
                                break;
                            }
                            output.reply_buf().extend_from_slice(codec::END);
                            consumed += len;
                            continue;
                        }
                        Route::Broadcast => {
                            for owner in (0..hand.outgoing.len()).filter(|&owner| owner != me) {
                                hand.over(owner, Task::Everywhere(dialect), &here[..len], output, engine);
                            }
                            state.block(Wait::Replies);
                        }
                    }
                    if flash_on && park_for_flash(flash, request, engine, shared, index, *generation) {
                        state.block(Wait::Flash);
                        waits_at = Some(position);
                        stop = true;
                        break;
                    }
                    *executed = true;
                    if let Request::Get { kind, keys } = *request {
                        // Not located: several keys (or one too long). Several keys' replies
                        // may outgrow the output bound, so the get runs in pieces as the
                        // client reads.
                        if located.is_none() {
                            let budget = OUTPUT_BYTES_HIGH
                                .saturating_sub(output.held_bytes())
                                .min(buffers.hold_room())
                                .min(buffers.budget().room());
                            let rest = engine.get_many(kind, keys, output.reply_buf(), budget);
                            output.adopt(&mut engine.shares.taken);
                            if let Some(rest) = rest {
                                resume = Some(codec::Resume::of(pending, here, keys, rest));
                                stop = true;
                                break;
                            }
                            consumed += len;
                            continue;
                        }
                    }
                    let executed_as = engine.execute(request, output.reply_buf());
                    output.adopt(&mut engine.shares.taken);
                    match executed_as {
                        Exec::Done => {}
                        Exec::Close => state.close(),
                        Exec::Forward(owner) => {
                            hand.over(owner, Task::Request(dialect), &here[..len], output, engine);
                        }
                    }
                    consumed += len;
                }
                if let Some(last_key) = unmarked.take() {
                    output.mark(last_key);
                }
                if let Some(position) = waits_at {
                    for (parsed, _) in &window[position + 1..] {
                        if let Parsed::Request { request, .. } = parsed {
                            flash.prefetch(request, engine, shared);
                        }
                    }
                }
                engine.hint_clear();
                (consumed, stop, resume, None)
            };
            if let Some(len) = long {
                // A store longer than a read buffer: its bytes come from the client memory
                // budget before they arrive, or it is refused and they are swallowed.
                if !input.afford(len, buffers) {
                    *executed = true;
                    consumed = budget::refuse_store(dialect, input.pending(), me, engine, &mut hand, output);
                }
            }
            if let Some(resume) = resume {
                consumed = resume.apply(input);
            }
            input.consume(consumed);
            if stop {
                return;
            }
        }
    }
}

/// The start of `lru_crawler metadump <classes>`: memcached's refusals, or the cursor set to
/// the first chunk.
fn start_dump(
    classes: &[u8],
    keys: bool,
    stacked: bool,
    dump: &mut Option<crate::session::dump::Cursor>,
    out: &mut Vec<u8>,
    engine: &Engine,
) {
    if let Some(refusal) =
        codec::metadump_refusal(engine.crawler_enabled(), engine.dumping_disabled(), stacked, keys)
    {
        out.extend_from_slice(refusal);
        return;
    }
    // memcached 1.6.43 starts a dump with `OK`.
    match qs_proto::crawler_classes(classes) {
        None => out.extend_from_slice(codec::BAD_CLASS),
        Some(true) => {
            out.extend_from_slice(b"OK\r\n");
            *dump = Some(crate::session::dump::Cursor { keys, ..Default::default() });
        }
        // A valid list of classes that hold nothing here.
        Some(false) => {
            out.extend_from_slice(b"OK\r\n");
            out.extend_from_slice(if keys { b"EN\r\n" } else { codec::END });
        }
    }
}

/// Lists chunks of a running dump while the client keeps up: the owned partitions' here, the
/// others' by their owners. Returns true once the dump is complete (or was never started),
/// with its `END` written.
fn continue_dump(
    dump: &mut Option<crate::session::dump::Cursor>,
    output: &mut Output,
    hand: &mut Hand<'_>,
    engine: &mut Engine,
    me: usize,
) -> bool {
    let Some(cursor) = dump.as_mut() else { return true };
    let (partitions, buckets) = (engine.partitions.len(), engine.main_buckets());
    loop {
        if output.held_bytes() >= crate::session::dump::OUTPUT_AHEAD_BYTES
            || output.pending_total >= crate::session::dump::CHUNKS_IN_FLIGHT
            || hand.full
        {
            return false;
        }
        let Some((partition, range)) = cursor.next_chunk(partitions, buckets) else { break };
        let owner = engine.owner_of_partition(partition);
        let keys = cursor.keys;
        if owner == me {
            engine.dump_chunk(partition, range, keys, output.reply_buf());
        } else {
            let (start, end) = (range.start as u32, range.end as u32);
            let task = Task::Chunk { partition: partition as u32, start, end, keys };
            hand.over(owner, task, &[], output, engine);
        }
    }
    let keys = cursor.keys;
    *dump = None;
    output.reply_buf().extend_from_slice(if keys { b"EN\r\n" } else { codec::END });
    true
}

/// With `-o ext_path`: when `request` (to run here now) has keys on flash, starts reading them
/// and returns true; the request stays in the connection's input and runs again when they are
/// back.
fn park_for_flash(
    flash: &mut flash::FlashWaits,
    request: &Request<'_>,
    engine: &mut Engine,
    shared: &Shared,
    conn: usize,
    generation: u32,
) -> bool {
    flash.keys.clear();
    engine.flash_probe(request, &mut flash.keys);
    if flash.keys.is_empty() {
        return false;
    }
    flash.start(flash::Waiter::Local { conn, generation }, engine, shared);
    true
}
