//! A worker's other connections while a script of its own runs past `lua-time-limit`: the
//! script's hook opens its door (script::door), and what they sent meanwhile is answered as
//! redis-server answers it from inside a long script (`processEventsWhileBlocked`,
//! processCommand's busy check): `-BUSY` for any command but those it lets through, which are
//! served here (MULTI, DISCARD, EXEC answered EXECABORT, SCRIPT KILL of this very script,
//! SHUTDOWN) or left for after the script (WATCH, UNWATCH, AUTH, HELLO, QUIT, RESET). A
//! command refused inside MULTI makes its EXEC answer EXECABORT, as there.
//!
//! The door holds the worker's parts the script does not: the other connections (the slots
//! before and after the running one's), the poll, the io_uring and the read buffers. What it
//! takes and does not serve (the events of anything but a served connection, the ring's
//! completions for the connections it leaves alone, in order) waits in [`Later`] for the
//! worker's next turn, so nothing is lost; past [`KEPT_EVENTS_MAX`] events it keeps none and
//! the next turn looks at everything. New connections are accepted after the script. Connections it leaves alone: memcached's, one not
//! yet authenticated, one waiting on other workers' replies, a dump, a watch, a value arriving.

use super::*;
use crate::net::ring::{Completion, NetRing, Op};
use crate::script::door::Door;
use crate::session::Session;
use qs_proto::resp::command::{call, transaction_call, Call, Refusal};
use qs_proto::resp::reply;
use qs_proto::resp::script::Script;

/// EXEC while a script runs past its limit (the transaction is discarded).
const EXECABORT_BUSY: &[u8] = b"-EXECABORT Transaction discarded because of: BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
/// The events a door takes at a time.
const EVENTS: usize = 64;
/// The most events a door keeps for the next turn; past them it keeps none and the next turn
/// looks at everything (every connection, listener and port), so a client that sends without
/// end while a script runs holds no more than this.
const KEPT_EVENTS_MAX: usize = 4096;

/// What an event reported.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Ready {
    pub readable: bool,
    pub writable: bool,
    pub read_closed: bool,
    pub error: bool,
}

impl Ready {
    pub(super) fn of(event: &mio::event::Event) -> Ready {
        Ready {
            readable: event.is_readable(),
            writable: event.is_writable(),
            read_closed: event.is_read_closed(),
            error: event.is_error(),
        }
    }
}

/// What a script's door took and left for the worker's next turn, and its scratch.
#[derive(Default)]
pub(super) struct Later {
    /// Events taken meanwhile, in order: every one is taken again next turn (one a served
    /// connection's only queues it to be looked at again).
    pub events: Vec<(Token, Ready)>,
    /// More events came than are kept: the next turn looks at everything.
    pub overflowed: bool,
    /// The ring's completions for connections the door left alone, in order.
    pub completions: Vec<Completion>,
    /// Bytes read and written meanwhile (the worker's counters are the script's).
    pub bytes_read: u64,
    pub bytes_written: u64,
    events_buf: Option<Events>,
    /// Slots served this time (scratch).
    ready: Vec<usize>,
    /// Slots with a receive in `completions`: their later ones wait too.
    stalled: Vec<usize>,
    done: Vec<Completion>,
}

impl Later {
    /// Whether the door left any event.
    pub(super) fn is_empty(&self) -> bool {
        self.events.is_empty() && !self.overflowed
    }

    /// Keeps an event for the next turn.
    fn keep(&mut self, token: Token, ready: Ready) {
        if self.events.len() < KEPT_EVENTS_MAX {
            self.events.push((token, ready));
        } else {
            self.events.clear();
            self.overflowed = true;
        }
    }

    /// Its completions are taken: no connection's wait any more.
    pub(super) fn forget_stalled(&mut self) {
        self.stalled.clear();
    }
}

/// The worker's connection slots other than the running one's.
pub(super) struct Others<'c> {
    pub before: &'c mut [Option<Conn>],
    pub after: &'c mut [Option<Conn>],
}

impl Others<'_> {
    /// The connection in `slot` (none for the running one's).
    fn get(&mut self, slot: usize) -> Option<&mut Conn> {
        let running = self.before.len();
        match slot.cmp(&running) {
            std::cmp::Ordering::Less => self.before[slot].as_mut(),
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => self.after.get_mut(slot - running - 1)?.as_mut(),
        }
    }
}

/// A running script's door: the worker's parts its run does not hold.
pub(super) struct BusyDoor<'d, 'c> {
    pub others: &'d mut Others<'c>,
    pub poll: &'d mut Poll,
    pub net: &'d mut Option<NetRing>,
    pub buffers: &'d mut Buffers,
    pub later: &'d mut Later,
    /// The connections queued for this turn (their readiness taken before the script).
    pub work: &'d [usize],
    /// The connections whose replies this turn sends.
    pub flushing: &'d [usize],
    pub shared: &'d Shared,
    pub limits: qs_proto::Limits,
    pub me: usize,
}

impl Door for BusyDoor<'_, '_> {
    fn serve(&mut self) {
        let mut ready = std::mem::take(&mut self.later.ready);
        ready.clear();
        // Those whose readiness the turn took before the script ran, then what came since.
        ready.extend_from_slice(self.work);
        self.take_events(&mut ready);
        self.take_completions(&mut ready);
        ready.sort_unstable();
        ready.dedup();
        for &slot in &ready {
            self.serve_conn(slot);
        }
        self.later.ready = ready;
        // Replies made this turn before the script ran go now, not after it.
        for &slot in self.flushing {
            if let Some(conn) = self.others.get(slot).filter(|conn| conn.output.pending_total == 0) {
                self.later.bytes_written += write_now(conn);
            }
        }
    }
}

/// The slot of a connection's token; `None` for any other token.
fn conn_slot(token: Token) -> Option<usize> {
    match token {
        WAKER | NET | FLASH => None,
        Token(token) if (UDP_BASE..UDP_BASE + UDP_SOCKETS_MAX).contains(&token) => None,
        Token(token) if !(CONN_BASE..NATIVE_BASE).contains(&token) => None,
        Token(token) => Some(token - CONN_BASE),
    }
}

/// Whether the door answers a connection: a RESP one, authenticated, open, with nothing of
/// its own under way.
fn answerable(conn: &Conn) -> bool {
    matches!(conn.transport, Transport::Tcp(_))
        && Dialect::of(conn.session.protocol).is_resp()
        && conn.session.phase.admitted()
        && conn.session.state == State::Open
        && conn.session.watch.is_none()
        && conn.session.dump.is_none()
        && conn.output.pending_total == 0
        && conn.input.skip == 0
        && conn.input.arriving.is_none()
}

impl BusyDoor<'_, '_> {
    /// The poll's events now: each kept for the next turn; a served connection's readiness
    /// noted, and the connection served now.
    fn take_events(&mut self, ready: &mut Vec<usize>) {
        let mut events = self.later.events_buf.take().unwrap_or_else(|| Events::with_capacity(EVENTS));
        if self.poll.poll(&mut events, Some(Duration::ZERO)).is_ok() {
            for event in events.iter() {
                let got = Ready::of(event);
                if !self.later.overflowed {
                    self.later.keep(event.token(), got);
                }
                let Some(slot) = conn_slot(event.token()) else { continue };
                let Some(conn) = self.others.get(slot).filter(|conn| conn.ring == RingIo::Off) else {
                    continue;
                };
                if answerable(conn) {
                    conn.read_ready |= got.readable || got.read_closed || got.error;
                    conn.peer_closed |= got.read_closed;
                    conn.write_blocked &= !got.writable;
                    ready.push(slot);
                }
            }
        }
        self.later.events_buf = Some(events);
    }

    /// The ring's completions now: a served connection's received bytes go to its input (and
    /// it is served now); any other completion waits for the next turn, with every later one
    /// of its connection.
    fn take_completions(&mut self, ready: &mut Vec<usize>) {
        let Some(net) = self.net.as_mut() else { return };
        if net.has_completions() {
            let _ = net.run_work();
        }
        let mut done = std::mem::take(&mut self.later.done);
        net.reap(&mut done);
        for completion in done.drain(..) {
            let slot = completion.slot;
            let conn = self
                .others
                .get(slot)
                .filter(|conn| conn.generation == completion.generation && answerable(conn));
            let receive = completion.op == Op::Receive;
            let (Some(conn), Some(id), true, false) =
                (conn, completion.buffer, receive, self.later.stalled.contains(&slot))
            else {
                if receive {
                    self.later.stalled.push(slot);
                }
                self.later.completions.push(completion);
                continue;
            };
            if !completion.more {
                conn.ring = RingIo::Idle;
            }
            let bytes = net.take(id, completion.result.max(0) as usize);
            self.later.bytes_read += bytes.len() as u64;
            let appended = conn.input.append(bytes, self.buffers);
            net.give_back(id);
            if !appended {
                // -o read_buf_mem_limit, as the turn's own receive: closed.
                conn.session.state.kill();
                conn.session.error = true;
                continue;
            }
            ready.push(slot);
        }
        self.later.done = done;
    }

    /// Reads connection `slot` (an epoll one, while its input is empty), answers each whole
    /// request, and writes the answers.
    fn serve_conn(&mut self, slot: usize) {
        let Some(conn) = self.others.get(slot).filter(|conn| answerable(conn)) else { return };
        let tls = self.shared.credentials.tls().map(|tls| &**tls);
        if conn.ring == RingIo::Off && conn.input.start == conn.input.end && conn.may_read() {
            let mut counters = WorkerCounters::default();
            read_once(conn, (&mut counters, crate::sys::ticks()), self.buffers, tls);
            self.later.bytes_read += counters.bytes_read;
        }
        let resp3 = super::window::resp_version(conn) == Dialect::Resp3;
        conn.output.borrow(self.buffers);
        loop {
            let Conn { input, output, session, .. } = &mut *conn;
            let len = match qs_proto::resp::parse_as(input.pending(), &self.limits, resp3) {
                Parsed::Request { request, len } => {
                    if !answer(&request, session, (self.shared, self.me, &self.limits), output.reply_buf()) {
                        break;
                    }
                    len
                }
                Parsed::Refused { reply, len, noreply } => {
                    if !noreply {
                        output.reply_buf().extend_from_slice(reply.as_bytes());
                    }
                    len
                }
                Parsed::Incomplete | Parsed::Close => break,
            };
            input.consume(len);
        }
        self.later.bytes_written += write_now(conn);
        if matches!(conn.transport, Transport::Tcp(_)) {
            conn.input.lend_back(self.buffers);
        }
        self.buffers.settle(&mut conn.output);
        if let Some(net) = self.net.as_mut() {
            repost(net, conn, slot);
        }
    }
}

/// Answers one request as redis-server does while a script runs past its limit; false when
/// it is left (with what follows it) for after the script.
pub(super) fn answer(
    request: &Request<'_>,
    session: &mut Session,
    (shared, me, limits): (&Shared, usize, &qs_proto::Limits),
    out: &mut Vec<u8>,
) -> bool {
    let in_multi = session.tx.as_ref().is_some_and(|tx| tx.multi);
    let Request::Resp(frame) = request else {
        return refuse(session, crate::script::BUSY, out);
    };
    if let Some(tx) = transaction_call(frame) {
        match tx {
            Call::Multi if in_multi => out.extend_from_slice(reply::MULTI_NESTED),
            Call::Multi => {
                super::tx::begun(session, shared).multi = true;
                out.extend_from_slice(reply::OK);
            }
            // Refused as EXEC (redis-server's rejectCommand), inside MULTI or not.
            Call::Exec => {
                session.tx = None;
                out.extend_from_slice(EXECABORT_BUSY);
            }
            Call::Discard if in_multi => {
                session.tx = None;
                out.extend_from_slice(reply::OK);
            }
            Call::Discard => out.extend_from_slice(reply::DISCARD_WITHOUT_MULTI),
            Call::Error(refusal) => {
                let mut refused = Vec::new();
                reply::refusal(&refusal, &mut refused);
                return refuse(session, &refused, out);
            }
            // WATCH and UNWATCH read or change what the script's worker holds: after it.
            _ => return false,
        }
        return true;
    }
    match call(frame, limits) {
        Call::Script(Script::Kill) => out.extend_from_slice(shared.scripts.kill(me).reply()),
        // The script ends at its next look, and the connection with the server.
        Call::Shutdown if shared.config.enable_shutdown => shared.request_stop(),
        Call::Shutdown => out.extend_from_slice(b"-ERR shutdown not enabled (memcached's -A allows it)\r\n"),
        Call::Quit | Call::Reset | Call::Auth { .. } | Call::Hello { .. } => return false,
        // Told before the busy check, as redis-server tells them.
        Call::Error(refusal @ (Refusal::Unknown(_) | Refusal::Arity(_))) => {
            let mut refused = Vec::new();
            reply::refusal(&refusal, &mut refused);
            return refuse(session, &refused, out);
        }
        _ => return refuse(session, crate::script::BUSY, out),
    }
    true
}

/// A refusal: written, and inside MULTI the transaction aborts (EXEC answers EXECABORT).
fn refuse(session: &mut Session, refusal: &[u8], out: &mut Vec<u8>) -> bool {
    if let Some(tx) = session.tx.as_mut().filter(|tx| tx.multi) {
        tx.aborted = true;
    }
    out.extend_from_slice(refusal);
    true
}

/// Writes what the connection's output holds in its buffer, as far as the socket takes it:
/// the bytes written (the rest goes with the worker's next flush).
fn write_now(conn: &mut Conn) -> u64 {
    let Transport::Tcp(stream) = &mut conn.transport else { return 0 };
    let mut written = 0;
    while !conn.write_blocked && !conn.session.state.is_dead() {
        let Some(bytes) = conn.output.unsent_in_buffer().filter(|bytes| !bytes.is_empty()) else { break };
        match stream.write(bytes) {
            Ok(sent) => {
                written += sent as u64;
                conn.output.advance(sent);
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => conn.write_blocked = true,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => conn.session.state.kill(),
        }
    }
    // TLS: the records rustls holds go out too.
    if !conn.write_blocked && stream.flush().is_err() {
        conn.write_blocked = true;
    }
    written
}

/// Posts a ring connection's receive again once its last one ended.
fn repost(net: &mut NetRing, conn: &mut Conn, slot: usize) {
    if conn.ring == RingIo::Idle && conn.wants_input(NetRing::BUFFER_BYTES - 1) {
        super::uring::post_receive(net, conn, slot);
    }
}
