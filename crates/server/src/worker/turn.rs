//! One request of a connection's window, decided and applied: the checks that stop a window
//! before a request (the client memory budget, `read_buf_mem_limit`, replies it waits for, an
//! owner that is behind, `-R`), then what the request needs (an answer here, a dump or a watch
//! started, handed to its owner, split over owners, broadcast, parked for flash, executed), as
//! a [`Flow`] the window loop (window.rs) applies to its input.

use super::*;
use crate::session::dump::Cursor;
use crate::session::Session;

/// What the window loop does after one request.
pub(super) enum Flow {
    /// The request is done: `len` bytes of input consumed, on to the next.
    Next(usize),
    /// The window stops here; the request stays in the input.
    Stop,
    /// The window stops and everything read is consumed (a watch started: what follows is
    /// ignored).
    StopAll,
    /// A get of several keys stopped part way: the keys answered leave the input.
    Resume(codec::Resume),
    /// The request waits for its flash reads: the window stops, and the requests after it may
    /// start theirs.
    Flash,
}

/// What one connection's turn holds borrowed: the worker's parts its requests use, and the
/// connection's own, each once.
pub(super) struct Turn<'t, 'h> {
    pub engine: &'t mut Engine,
    pub hand: &'t mut Hand<'h>,
    pub retry: &'t mut Vec<usize>,
    pub shared: &'t Shared,
    pub watching: &'t mut Vec<usize>,
    pub buffers: &'t mut Buffers,
    pub flash: &'t mut flash::FlashWaits,
    /// Some request ran (or was answered) this turn.
    pub executed: &'t mut bool,
    pub output: &'t mut Output,
    pub session: &'t mut Session,
    /// The socket refused the connection's last write: its client is not reading.
    pub write_blocked: bool,
    /// This worker, the connection's slot and generation.
    pub me: usize,
    pub index: usize,
    pub generation: u32,
    pub udp: bool,
    pub dialect: Dialect,
    /// memcached's -R: requests before the connection waits for the next turn.
    pub reqs_per_event: u32,
    pub served: u32,
    /// The worker's other connections, its poll and io_uring, and what a script's door left:
    /// what a script of this connection past lua-time-limit lets in (busy.rs).
    pub others: super::busy::Others<'t>,
    pub poll: &'t mut Poll,
    pub net: &'t mut Option<crate::net::ring::NetRing>,
    pub later: &'t mut super::busy::Later,
    /// The connections queued for this turn.
    pub work: &'t mut Vec<usize>,
    /// The connections whose replies this turn sends.
    pub flushing: &'t [usize],
}

impl Turn<'_, '_> {
    /// Whether the window stops before its next request: the client memory budget spent
    /// while this connection holds replies past its free share, `read_buf_mem_limit` reached,
    /// replies it waits for, too many in flight, an owner behind, or `-R` used up.
    #[inline(always)]
    pub(super) fn stops_before(&mut self) -> bool {
        // The budget spent: a connection holding replies past its free share runs nothing
        // more until its client has read them (the flush follows; one whose client reads
        // nothing is shed).
        let held = self.output.held_bytes();
        let over = held > crate::session::budget::OUTPUT_FREE_BYTES
            && (self.write_blocked || self.output.pending_total == 0)
            && self.buffers.budget().spent();
        if self.session.state.is_ending() || held > OUTPUT_BYTES_HIGH || over {
            return true;
        }
        if !self.udp && self.buffers.limited() && self.read_buf_limit_reached() {
            return true;
        }
        if self.session.state.blocked(Wait::Replies) {
            if self.output.pending_total > 0 {
                return true;
            }
            self.session.state.unblock(Wait::Replies);
        }
        if self.output.pending_total >= PENDING_PER_CONN_MAX {
            self.session.state.block(Wait::Replies);
            return true;
        }
        if self.hand.full || self.served >= self.reqs_per_event {
            // An owner is behind (this turn's batches go out first), or -R is used up.
            if !self.hand.full {
                self.engine.counters.conn_yields += 1;
            }
            self.retry.push(self.index);
            self.session.state.block(Wait::Turn);
            return true;
        }
        false
    }

    /// -o read_buf_mem_limit (conn::Buffers): the replies written so far are charged; past half
    /// the limit a connection with replies unsent waits for its client to read them, and at the
    /// limit one holding no reply memory at all is closed, as memcached closes it.
    fn read_buf_limit_reached(&mut self) -> bool {
        self.buffers.charge(self.output);
        let holds = self.output.held_bytes() > 0 || self.output.pending_total > 0;
        if holds && self.buffers.hold_room() == 0 {
            return true;
        }
        if !holds && self.buffers.room() == 0 && self.output.capacity_bytes() == 0 {
            self.engine.counters.response_obj_oom += 1;
            *self.executed = true;
            self.session.state.kill();
            self.session.error = true;
            return true;
        }
        false
    }

    /// Decides and applies what one parsed request needs; `pending` is the connection's
    /// input, `here` its part from this request on.
    #[inline(always)]
    pub(super) fn step(
        &mut self,
        parsed: &Parsed<'_>,
        located: Option<Located>,
        pending: &[u8],
        here: &[u8],
    ) -> Flow {
        if let Some(flow) = self.shared.scripts.any_overdue().then(|| self.while_busy(parsed)).flatten() {
            return flow;
        }
        if self.session.tx.is_some() {
            if let Some(flow) = self.in_multi(parsed, here) {
                return flow;
            }
        }
        if let Parsed::Request { request, len } = parsed {
            // The common request, straight to its read: none of the cases below applies to a
            // get of one key this worker owns (never oversized, routed here, and a binary
            // one only once the SASL gate is open).
            let open = self.session.phase == crate::session::auth::Phase::Open;
            if let Some(get) = self.engine.owned_get(request, located, open) {
                self.engine.get_owned(get, self.hand.fd, self.output.reply_buf());
                self.session.stacked = true;
                *self.executed = true;
                let shares = &mut self.engine.shares;
                self.output.adopt(&mut shares.taken, &mut shares.segments);
                return Flow::Next(*len);
            }
        }
        if !self.udp {
            match parsed {
                Parsed::Request { request: Request::Metadump { classes, keys }, len } => {
                    return self.metadump(classes, *keys, *len);
                }
                Parsed::Request { request: Request::Watch { streams }, len } => {
                    return self.start_watch(*streams, *len);
                }
                _ => {}
            }
        }
        // Only `mn` sends what is stacked before it (memcached 1.6.40; a get did too before).
        let flushes = matches!(parsed, Parsed::Request { request: Request::MetaNoop, .. });
        // A request whose data runs past what was read (a value swallowed or read into its
        // item) has memcached read again, and send what it holds first.
        let runs_past = match parsed {
            Parsed::Refused { len, .. } | Parsed::Request { len, .. } => *len > here.len(),
            _ => false,
        };
        self.session.stacked = !flushes && !runs_past;
        let (request, len) = match parsed {
            Parsed::Incomplete => unreachable!("the window holds no incomplete request"),
            Parsed::Close => {
                self.session.state.kill();
                self.session.error = true;
                self.engine.counters.conns_dropped += 1;
                return Flow::Stop;
            }
            Parsed::Refused { reply, len, noreply } => {
                if !noreply {
                    self.output.reply_buf().extend_from_slice(reply.as_bytes());
                }
                return Flow::Next(*len);
            }
            Parsed::Request { request, len } => (request, *len),
        };
        if let Some(flow) = self.sasl(request, len) {
            return flow;
        }
        if let Some(flow) = self.oversized(request, len) {
            return flow;
        }
        if let Some(flow) = self.shared.memory.refusing().then(|| self.out_of_memory(request, len)).flatten()
        {
            return flow;
        }
        if let Request::Resp(frame) = request {
            // The database KEYS, SCAN, DBSIZE and FLUSHDB see, and SELECT (here or in EXEC)
            // changes: read back once the request has run.
            self.engine.db = self.shared.db_spaces.space(self.session.db);
            let flow = self.tx_command(frame, len);
            let flow = flow.or_else(|| self.spread_write(frame, here, len));
            if let Some(flow) = flow.or_else(|| self.script_step(frame, here, len)) {
                self.db_back();
                return flow;
            }
        }
        match self.engine.route(request, located, &self.output.pending) {
            Route::Local => {}
            Route::AfterPending if self.output.pending_total > 0 => {
                self.session.state.block(Wait::Replies);
                return Flow::Stop;
            }
            Route::AfterPending => {}
            Route::ForwardAfterPending(_) if self.output.pending_total > 0 => {
                self.session.state.block(Wait::Replies);
                return Flow::Stop;
            }
            Route::ForwardAfterPending(owner) => return self.forward(owner, request, located, &here[..len]),
            Route::Forward(owner) => return self.forward(owner, request, located, &here[..len]),
            // After the connection's requests waiting elsewhere: a RESP DEL of several keys
            // counts the other workers' keys as they stand once those requests have run.
            Route::Broadcast if self.output.pending_total > 0 => {
                self.session.state.block(Wait::Replies);
                return Flow::Stop;
            }
            Route::SplitGet => return self.split_get(request, pending, here, len),
            Route::Broadcast => {
                for owner in (0..self.hand.outgoing.len()).filter(|&owner| owner != self.me) {
                    let task = Task::Everywhere(self.dialect);
                    self.hand.over(owner, task, (&here[..len], None), self.output, self.engine);
                }
                self.session.state.block(Wait::Replies);
            }
        }
        self.run_here(request, located, pending, here, len)
    }

    /// `lru_crawler metadump|mgdump`: started (or refused) and listed while the client keeps
    /// up; the request stays until the dump is complete.
    fn metadump(&mut self, classes: &[u8], keys: bool, len: usize) -> Flow {
        *self.executed = true;
        if self.session.dump.is_none() {
            start_dump(
                classes,
                keys,
                self.session.stacked,
                &mut self.session.dump,
                self.output.reply_buf(),
                self.engine,
            );
        }
        self.session.stacked = true;
        if continue_dump(&mut self.session.dump, self.output, self.hand, self.engine, self.me) {
            return Flow::Next(len);
        }
        // More to list once the client has read some: the request stays.
        Flow::Stop
    }

    /// `watch`: refused, or the connection becomes a stream of log lines.
    fn start_watch(&mut self, streams: Option<u16>, len: usize) -> Flow {
        if self.output.pending_total > 0 {
            // Its earlier requests' replies come first.
            self.session.state.block(Wait::Replies);
            return Flow::Stop;
        }
        *self.executed = true;
        let refusal = refusals::watch_refusal(
            self.shared.config.disable_watch,
            self.session.stacked,
            streams.is_none(),
        );
        if let Some(refusal) = refusal {
            self.output.reply_buf().extend_from_slice(refusal);
            return Flow::Next(len);
        }
        self.session.watch = Some(self.shared.observers.watchers.add(streams.unwrap_or_default(), self.me));
        self.watching.push(self.index);
        if let Some(info) = &self.session.info {
            info.set_state(registry::State::Watch);
        }
        self.output.reply_buf().extend_from_slice(refusals::WATCH_STARTED);
        // Whatever follows is ignored; an end of input read with it (no event will say so
        // again) ends the stream now.
        if self.session.eof {
            self.session.state.close();
        }
        Flow::StopAll
    }

    /// A RESP request while a script runs past `lua-time-limit`: answered as redis-server
    /// answers it then (busy.rs); `None` for what is served as ever (memcached's requests, and
    /// what redis-server lets through that busy.rs leaves to the turn).
    #[inline(never)]
    fn while_busy(&mut self, parsed: &Parsed<'_>) -> Option<Flow> {
        let Parsed::Request { request, len } = parsed else { return None };
        if !self.dialect.is_resp() {
            return None;
        }
        let at = (self.shared, self.me, &self.engine.limits);
        if !super::busy::answer(request, self.session, at, self.output.reply_buf()) {
            return None;
        }
        *self.executed = true;
        Some(Flow::Next(*len))
    }

    /// Under -S, a binary request before authentication is answered here (SASL's own
    /// commands, or a refusal).
    fn sasl(&mut self, request: &Request<'_>, len: usize) -> Option<Flow> {
        if self.session.phase == crate::session::auth::Phase::Open {
            return None;
        }
        let (Request::Binary(request), Some(passwords)) = (request, self.shared.credentials.sasl()) else {
            return None;
        };
        let reply = self.output.reply_buf();
        match crate::session::auth::sasl_gate(
            request,
            &mut self.session.phase,
            passwords,
            &mut self.engine.counters,
            reply,
        ) {
            crate::session::auth::Gate::Pass => None,
            crate::session::auth::Gate::Answered { close } => {
                *self.executed = true;
                if close {
                    self.session.state.close();
                    return Some(Flow::Stop);
                }
                Some(Flow::Next(len))
            }
        }
    }

    /// A store too large for an item: its data block never enters the buffer; answered and
    /// recorded here, whoever owns its key ([`Engine::refuse_too_large`]), and its owner drops
    /// the old value as memcached does.
    fn oversized(&mut self, request: &Request<'_>, len: usize) -> Option<Flow> {
        let (key, drops) = codec::oversized_store(request, &self.engine.limits)?;
        *self.executed = true;
        self.engine.refuse_too_large(crate::exec::TooLarge::of(request), key, drops);
        let owner = self.engine.owner_of(key);
        if drops && owner != self.me {
            self.hand.over(owner, Task::Drop, (key, None), self.output, self.engine);
        }
        refusals::refuse_store(request, refusals::Refusal::TooLarge, self.output.reply_buf());
        Some(Flow::Next(len))
    }

    /// A request its key's owner runs: a plain get of one key (or RESP's GET) may come from
    /// the front cache (unless an earlier request of this connection waits on the owner), a
    /// get of one key goes as that key alone, anything else as its bytes.
    fn forward(&mut self, owner: usize, request: &Request<'_>, at: Option<Located>, bytes: &[u8]) -> Flow {
        let resp = matches!(self.dialect, Dialect::Resp | Dialect::Resp3);
        if resp && self.shared.scripts.busy(owner, self.engine.limits.now_ms) {
            self.output.reply_buf().extend_from_slice(crate::script::BUSY);
            *self.executed = true;
            return Flow::Next(bytes.len());
        }
        let single = match *request {
            Request::Get { kind, keys, single: true } => Some((kind, keys)),
            _ => None,
        };
        let front = match (single, request) {
            (Some((GetKind::Get, key)), _) => Some((key, false)),
            (_, Request::RespKey(command)) if crate::exec::is_plain_resp_get(command) => {
                Some((command.key, true))
            }
            _ => None,
        };
        if let (Some((key, resp)), 0) = (front, self.output.pending[owner]) {
            if self.engine.front_serve(self.engine.key(key, at), resp, self.output.reply_buf()) {
                *self.executed = true;
                return Flow::Next(bytes.len());
            }
        }
        match single {
            Some((kind, key)) => {
                self.hand.over(owner, Task::Get { kind, end: true }, (key, at), self.output, self.engine)
            }
            None => self.hand_over(owner, request, (bytes, at)),
        }
        Flow::Next(bytes.len())
    }

    /// Hands `request` (its `bytes` as it arrived) to `owner`: a command on one key parsed
    /// and packed, anything else as its bytes.
    fn hand_over(&mut self, owner: usize, request: &Request<'_>, (bytes, at): (&[u8], Option<Located>)) {
        match request.key_command(&self.engine.limits) {
            Some(command) => self.hand.command(owner, (&command, at), self.output, self.engine),
            None => self.hand.over(owner, Task::Request(self.dialect), (bytes, at), self.output, self.engine),
        }
    }

    /// A get whose keys have several owners: each key run here or handed to its owner, in
    /// order, while the output has room; the rest waits for the client to read.
    fn split_get(&mut self, request: &Request<'_>, pending: &[u8], here: &[u8], len: usize) -> Flow {
        let Request::Get { kind, keys, .. } = *request else { unreachable!("split gets are gets") };
        if self.parks_for_flash(request) {
            return Flow::Flash;
        }
        *self.executed = true;
        let budget = self.reply_room();
        let mut added = 0;
        let mut rest = None;
        for bytes in qs_proto::tokens::words(keys) {
            let key = self.engine.key(bytes, None);
            let owner = self.engine.owner_of_partition(key.partition);
            if owner == self.me {
                let buf = self.output.reply_buf();
                let before = buf.len();
                self.engine.get_one(kind, (key, self.hand.fd), buf);
                added += buf.len() - before + self.engine.shares.taken_bytes();
                let shares = &mut self.engine.shares;
                self.output.adopt(&mut shares.taken, &mut shares.segments);
            } else {
                let at = Some((key.hash, key.partition));
                self.hand.over(owner, Task::Get { kind, end: false }, (bytes, at), self.output, self.engine);
            }
            if added > budget || self.output.pending_total >= PENDING_PER_CONN_MAX {
                rest = crate::exec::keys_after(keys, bytes);
                if rest.is_some() {
                    break;
                }
            }
        }
        if let Some(rest) = rest {
            return Flow::Resume(codec::Resume::of(pending, here, keys, rest));
        }
        self.output.reply_buf().extend_from_slice(codec::END);
        Flow::Next(len)
    }

    /// A request this worker runs: parked while its keys are read from flash; a get of several
    /// keys (or one too long to locate) in pieces as the client reads; anything else executed
    /// (and handed on if the engine says so).
    #[inline(always)]
    fn run_here(
        &mut self,
        request: &Request<'_>,
        located: Option<Located>,
        pending: &[u8],
        here: &[u8],
        len: usize,
    ) -> Flow {
        if self.parks_for_flash(request) {
            return Flow::Flash;
        }
        *self.executed = true;
        if let (&Request::Get { kind, keys, .. }, None) = (request, located) {
            // Several keys' replies may outgrow the output bound: the get runs in pieces.
            let budget = self.reply_room();
            let rest = self.engine.get_many(kind, (keys, self.hand.fd), self.output.reply_buf(), budget);
            let shares = &mut self.engine.shares;
            self.output.adopt(&mut shares.taken, &mut shares.segments);
            if let Some(rest) = rest {
                return Flow::Resume(codec::Resume::of(pending, here, keys, rest));
            }
            return Flow::Next(len);
        }
        let executed_as = self.engine.execute(request, (located, self.hand.fd), self.output.reply_buf());
        let shares = &mut self.engine.shares;
        self.output.adopt(&mut shares.taken, &mut shares.segments);
        match executed_as {
            Exec::Done => {}
            Exec::Close => self.session.state.close(),
            Exec::Forward(owner) => self.hand_over(owner, request, (&here[..len], located)),
            Exec::Resp3(on) => {
                // The window ended with the HELLO: what follows is parsed in the new version (and
                // in the connection's next turns, from its registry entry).
                self.dialect = if on { Dialect::Resp3 } else { Dialect::Resp };
                if let Some(info) = &self.session.info {
                    info.set_resp(if on { 3 } else { 2 });
                }
            }
            Exec::Reset => {
                self.dialect = Dialect::Resp;
                // RESET ends MULTI and unwatches, and goes back to database 0.
                self.session.tx = None;
                self.engine.selected = Some(0);
                if let Some(info) = &self.session.info {
                    info.set_resp(2);
                    info.set_name(b"");
                }
                // Where a password is asked for, what follows goes through the gate again
                // (`windows` stops at the end of this window).
                self.session.phase = crate::session::auth::Phase::at_accept(self.shared.auth_modes());
            }
        }
        if let Request::Resp(_) = request {
            self.db_back();
        }
        Flow::Next(len)
    }

    /// The connection's database as its RESP request left it (SELECT).
    fn db_back(&mut self) {
        let Some(db) = self.engine.selected.take() else { return };
        if db != self.session.db {
            self.session.db = db;
            if let Some(info) = &self.session.info {
                info.set_db(self.session.db);
            }
        }
    }

    /// The reply bytes a get of several keys may add now: the output bound, the read buffer
    /// limit's room and the client memory budget's.
    fn reply_room(&self) -> usize {
        OUTPUT_BYTES_HIGH
            .saturating_sub(self.output.held_bytes())
            .min(self.buffers.hold_room())
            .min(self.buffers.budget().room())
    }

    /// With `-o ext_path`: when `request` (to run here now) has keys on flash, starts reading
    /// them and returns true; the request stays in the connection's input and runs again when
    /// they are back.
    #[inline]
    fn parks_for_flash(&mut self, request: &Request<'_>) -> bool {
        if !self.engine.flash_on() {
            return false;
        }
        let flash = &mut *self.flash;
        flash.keys.clear();
        self.engine.flash_probe(request, &mut flash.keys);
        if flash.keys.is_empty() {
            return false;
        }
        let waiter = flash::Waiter::Local { conn: self.index, generation: self.generation };
        flash.start(waiter, self.engine, self.shared);
        self.session.state.block(Wait::Flash);
        true
    }
}

/// The start of `lru_crawler metadump <classes>`: memcached's refusals, or the cursor set to
/// the first chunk.
fn start_dump(
    classes: &[u8],
    keys: bool,
    stacked: bool,
    dump: &mut Option<Cursor>,
    out: &mut Vec<u8>,
    engine: &Engine,
) {
    let switches =
        refusals::DumpSwitches { crawler: engine.crawler_enabled(), dumping: !engine.dumping_disabled() };
    if let Some(refusal) =
        refusals::metadump_refusal(switches, refusals::DumpAsked { keys, pipelined: stacked })
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
    dump: &mut Option<Cursor>,
    output: &mut Output,
    hand: &mut Hand<'_>,
    engine: &mut Engine,
    me: usize,
) -> bool {
    let Some(cursor) = dump.as_mut() else { return true };
    let (partitions, buckets) = (engine.partition_count(), engine.main_buckets());
    let held_before = output.held_bytes();
    loop {
        if output.held_bytes() >= crate::session::dump::OUTPUT_AHEAD_BYTES
            || output.held_bytes() >= held_before + crate::session::dump::TURN_BYTES
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
            hand.over(owner, task, (&[], None), output, engine);
        }
    }
    let keys = cursor.keys;
    *dump = None;
    output.reply_buf().extend_from_slice(if keys { b"EN\r\n" } else { codec::END });
    true
}
