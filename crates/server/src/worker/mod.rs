//! A worker: one thread, pinned, with its own epoll instance, connections and partitions.
//!
//! Each loop turn: wait for events (sleeping only when no ring has work), read and process
//! every ready connection (parse all buffered requests, run them here or hand them to their
//! owner), run the requests other workers handed over, place the replies that came back,
//! push the turn's hand-over batches (waking a worker only if it sleeps), publish counters,
//! then write every connection's output with one send each.

use crate::codec::{self, Dialect};
use crate::config::{Protocol, UDP_SOCKETS_MAX};
use crate::direct::{
    run_op, Batch, Hand, Rings, Task, BATCH_BYTES_MAX, INFLIGHT_BYTES_MAX, SPARE_BATCHES_MAX,
    SPARE_BATCH_BYTES,
};
use crate::exec::{Engine, Exec, Located, Route};
use crate::net::Transport;
use crate::observe::counters::WorkerCounters;
use crate::observe::registry::{self, Addr, Info};
use crate::session::{
    Buffers, Conn, Input, Output, RingIo, State, Wait, OUTPUT_BYTES_HIGH, READ_BUFFER_BYTES, SEND_SLICES_MAX,
};
use crate::shared::Shared;
use arrayvec::ArrayVec;
use mio::{Events, Interest, Poll, Token};
use qs_proto::{GetKind, Parsed, Request};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod accept;
mod budget;
mod busy;
use busy::Ready;
mod flash;
mod handover;
mod refusals;
mod turn;
mod tx;
mod udp;
mod uring;
mod window;
mod write;

const WAKER: Token = Token(0);
/// The flash tier's io_uring eventfd (reads the device finished).
const FLASH: Token = Token(NATIVE_BASE - 1);
/// The stream connections' io_uring eventfd (`-o io_backend=uring`): task work is queued.
const NET: Token = Token(UDP_BASE - 1);
const LISTENER_BASE: usize = 1;
/// memcached's UDP sockets (-U, one per -l address): tokens below the flash eventfd's.
const UDP_BASE: usize = NATIVE_BASE - 1 - UDP_SOCKETS_MAX;
const CONN_BASE: usize = 16;
/// Tokens of the native ports (far above any connection's).
const NATIVE_BASE: usize = 1 << 40;
/// Datagrams taken from the UDP socket per loop turn before TCP connections get their turn.
const UDP_DATAGRAMS_PER_TURN: usize = 64;
/// Largest UDP datagram.
const DATAGRAM_BYTES_MAX: usize = 65536;
/// The longest RESP request read (redis-server's client-query-buffer-limit).
const RESP_REQUEST_BYTES_MAX: usize = 1 << 30;
/// The most flushes in a row that hold a connection's ready replies back while replies from
/// other workers are outstanding (two workers, 50% GET, depth 16: one hold in a row left 1.8
/// sends per client batch, four or more leave one; docs/benchmarks/HISTORY.md).
const HOLD_FLUSHES_MAX: u8 = 4;
/// Closes after which a worker's once-a-second check gives memory back.
const SHED_AFTER_CLOSES: usize = 256;
/// Connections a turn reads ahead of serving them (each holds a read buffer meanwhile): two
/// windows' worth of prefetches, and no more buffers out at once than a worker pools.
const READ_AHEAD_MAX: usize = crate::session::POOL_BUFFERS_MAX;
/// How long a stopping server keeps answering what it has already received.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// A connection with this many requests waiting on other workers stops until some return.
const PENDING_PER_CONN_MAX: u32 = 256;
/// Requests parsed and prefetched ahead of running them.
const WINDOW: usize = 16;
/// What a worker listens on.
pub struct Sockets {
    /// TCP: the main ports (shared by every worker) and, with --worker-port-base, its own;
    /// each with the protocol its connections start in and whether they speak TLS (-Z).
    pub listeners: Vec<crate::net::Listening>,
    /// memcached's UDP port (-U), shared by every worker.
    pub udp: Vec<mio::net::UdpSocket>,
    /// The native ports of the partitions it owns.
    pub native: crate::native::Native,
}

/// A worker thread's state.
pub struct Worker {
    index: usize,
    shared: Arc<Shared>,
    poll: Poll,
    listeners: Vec<crate::net::Listening>,
    /// memcached's UDP port (-U).
    udp: Udp,
    /// The native protocol's ports of this worker's partitions.
    native: crate::native::Native,
    conns: Vec<Option<Conn>>,
    generations: Vec<u32>,
    free: Vec<usize>,
    engine: Engine,
    rings: Rings,
    /// Requests handed to other workers and their replies.
    handover: HandOver,
    work: Vec<usize>,
    flush: Flush,
    /// Connections that stopped because a batch was full: serviced again next turn.
    retry: Vec<usize>,
    /// The second of the last `-o idle_timeout` scan.
    idle_scan_secs: u32,
    /// Connections closed since the last [`Worker::shed_slots`].
    closed_since_shed: usize,
    /// `Connections::resumptions` as last seen (no_maxconns_fast: accept again when it moves).
    accept_resumed_seen: u64,
    /// How many of the connections queued this turn were queued before the replies that
    /// came back were placed (see `Worker::before_broadcasts`).
    work_from_events: usize,
    /// Keys located by `read_ahead`, for its item prefetch.
    ahead: Vec<Located>,
    input_limit: usize,
    /// The same for a connection of a RESP listener.
    resp_input_limit: usize,
    executed: bool,
    /// Buffers lent to connections while they have bytes in flight.
    buffers: Buffers,
    /// What `buffers` held when last published.
    buffers_shown: crate::session::BufferFigures,
    /// Its `watch` connections.
    watching: Vec<usize>,
    /// Requests waiting for flash reads.
    flash: flash::FlashWaits,
    /// `-o io_backend=uring`: the stream connections' io_uring (`None` on epoll).
    net: Option<crate::net::ring::NetRing>,
    /// What a turn's work on `net` reuses.
    ring: RingScratch,
    /// What a script's door took and left for the next turn (busy.rs).
    later: busy::Later,
}

/// A worker's UDP sockets (memcached's -U, bound by every worker).
struct Udp {
    sockets: Vec<mio::net::UdpSocket>,
    /// Which sockets may have datagrams waiting, a bit each.
    ready: u64,
    /// Receive buffer for one datagram, and the send buffer for one reply datagram.
    buf: Vec<u8>,
}

/// A worker's side of the hand-over: the batch it fills for each owner, the replies that
/// wait for room in a ring, what is in flight, and the batches other workers handed it.
struct HandOver {
    outgoing: Vec<Option<Batch>>,
    unsent_replies: Vec<VecDeque<Batch>>,
    spare: Vec<Batch>,
    /// Per owner: request bytes handed over and not yet answered.
    inflight: Vec<usize>,
    /// The batches other workers handed over, popped before any of them runs.
    popped: Vec<(usize, Batch)>,
    /// This turn's batches hold a request for every worker (counted as they are pushed; the
    /// replies wait until all of them are).
    broadcast: bool,
    /// The count of requests for every worker last seen (`Wakeups::broadcasts`).
    broadcasts_seen: u64,
}

/// What a turn's io_uring work reuses, so that it allocates nothing once warm.
#[derive(Default)]
struct RingScratch {
    /// Completions taken from the ring.
    done: Vec<crate::net::ring::Completion>,
    /// The ring's connections flushed this turn (and whether each has bytes to send).
    sends: Vec<(usize, bool)>,
    /// Of those, the ones sending now.
    sending: Vec<usize>,
    /// What each of a flush's sends offered, in bytes, by connection slot (0: none).
    offered: Vec<usize>,
    /// The allocations of a flush's gathered slices, their ranges and its sends
    /// (`net::ring::recycle`).
    slices: Vec<std::io::IoSlice<'static>>,
    ranges: Vec<std::ops::Range<usize>>,
    payloads: Vec<(i32, crate::net::ring::Payload<'static>, usize, u32)>,
}

impl Worker {
    /// A worker with its poll instance, listeners, engine and rings.
    pub fn new(
        index: usize,
        shared: Arc<Shared>,
        poll: Poll,
        sockets: Sockets,
        engine: Engine,
        rings: Rings,
    ) -> io::Result<Worker> {
        let Sockets { mut listeners, mut udp, mut native } = sockets;
        for (offset, listener) in listeners.iter_mut().enumerate() {
            poll.registry().register(
                &mut listener.socket,
                Token(LISTENER_BASE + offset),
                Interest::READABLE,
            )?;
        }
        for (offset, socket) in udp.iter_mut().enumerate() {
            poll.registry().register(socket, Token(UDP_BASE + offset), Interest::READABLE)?;
        }
        for (offset, port) in native.ports.iter_mut().enumerate() {
            poll.registry().register(&mut port.socket, Token(NATIVE_BASE + offset), Interest::READABLE)?;
        }
        let now = crate::sys::now_secs();
        for listener in &listeners {
            let info = Info::new(registry::Kind::Listener, listener.addr.clone(), None, now);
            shared.observers.registry.add(listener.socket.fd(), Arc::new(info));
        }
        for socket in &udp {
            if let Ok(addr) = socket.local_addr() {
                let info = Info::new(registry::Kind::Udp, Addr::Inet(addr), None, now);
                shared.observers.registry.add(socket.as_raw_fd(), Arc::new(info));
            }
        }
        let mut flash = flash::FlashWaits::default();
        if shared.rings.flash_io().is_some() && !shared.extended.flash_io_threads {
            // io_uring where the kernel allows it; the reader threads otherwise.
            if let Ok(uring) = crate::flashio::Uring::new(256) {
                poll.registry().register(
                    &mut mio::unix::SourceFd(&uring.eventfd()),
                    FLASH,
                    Interest::READABLE,
                )?;
                flash.uring = Some(uring);
                shared.rings.flash_ring_started();
            }
        }
        let mut net = None;
        if shared.extended.io_backend == crate::config::IoBackend::Uring {
            // A registered file per connection the worker may hold (every one, at worst; past
            // 65,536 the rest name their descriptors).
            let files = shared.config.max_connections.saturating_add(16).min(1 << 16);
            match crate::net::ring::NetRing::new(files) {
                Ok(ring) => {
                    let eventfd = ring.eventfd();
                    poll.registry().register(&mut mio::unix::SourceFd(&eventfd), NET, Interest::READABLE)?;
                    net = Some(ring);
                    shared.rings.net_ring(true);
                }
                Err(error) => uring_refused(&shared, &error),
            }
        }
        let workers = shared.map.workers();
        let (input_limit, resp_input_limit) = input_limits(&shared);
        let buffer_limit =
            Buffers::limit_per_worker(shared.extended.read_buf_mem_limit_bytes, shared.map.workers());
        let buffers = Buffers::with_budget(buffer_limit, shared.client_memory.clone());
        Ok(Worker {
            index,
            shared,
            poll,
            listeners,
            udp: Udp {
                ready: if udp.len() >= 64 { u64::MAX } else { (1u64 << udp.len()) - 1 },
                sockets: udp,
                buf: vec![0; DATAGRAM_BYTES_MAX],
            },
            native,
            conns: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            engine,
            rings,
            handover: HandOver {
                outgoing: (0..workers).map(|_| None).collect(),
                unsent_replies: (0..workers).map(|_| VecDeque::new()).collect(),
                spare: Vec::new(),
                inflight: vec![0; workers],
                popped: Vec::new(),
                broadcast: false,
                broadcasts_seen: 0,
            },
            work: Vec::new(),
            flush: Flush::default(),
            retry: Vec::new(),
            idle_scan_secs: 0,
            closed_since_shed: 0,
            accept_resumed_seen: 0,
            work_from_events: 0,
            ahead: Vec::new(),
            input_limit,
            resp_input_limit,
            executed: false,
            buffers,
            buffers_shown: Default::default(),
            watching: Vec::new(),
            flash,
            net,
            ring: RingScratch::default(),
            later: busy::Later::default(),
        })
    }

    /// Runs until the server stops: each loop turn sleeps until there is work, notes what
    /// the events report (`take_events`), does the turn's work (`turn`),
    /// and once a second closes idle connections and overdue handshakes.
    pub fn run(mut self) {
        self.buffers.prefill();
        self.handover.spare.extend((0..SPARE_BATCHES_MAX).map(|_| Batch::prefilled()));
        if let Some(net) = self.net.as_mut() {
            if let Err(error) = net.enable() {
                uring_refused(&self.shared, &error);
                self.net = None;
                self.shared.rings.net_ring(false);
            }
        }
        let mut events = Events::with_capacity(256);
        let mut stop_deadline: Option<Instant> = None;
        let flash_durable =
            self.shared.rings.flash_io().is_some() && self.shared.config.memory_file.is_some();
        let mut flash_written_secs = 0;
        loop {
            let timeout = self.timeout();
            if flash_durable
                && (timeout != Some(Duration::ZERO) || self.engine.now.secs() != flash_written_secs)
            {
                // -e: before sleeping, and once a second under load, the flash page being
                // filled goes to the file, so a crash loses no flash item older than that.
                flash_written_secs = self.engine.now.secs();
                self.engine.flash_write_partial();
            }
            self.engine.turn_mrc();
            if let Err(error) = self.poll.poll(&mut events, timeout) {
                if error.kind() != io::ErrorKind::Interrupted {
                    eprintln!("worker {}: poll failed: {error}", self.index);
                    // A step waiting for this worker's partitions gives up.
                    self.shared.lending.leave(self.index);
                    return;
                }
            }
            self.shared.wakeups.awake(self.index);
            if self.shared.lending.asked(self.index) {
                // Another worker's step over keys of several workers (a transaction's EXEC)
                // runs on this worker's partitions: lent between two turns, and back.
                let lent = self.engine.lend_out();
                let back = self.shared.lending.lend(self.index, lent);
                self.engine.take_in(back);
            }
            self.engine.set_now(crate::sys::clock::now());
            self.engine.turn_ticks = crate::sys::ticks();
            // A wake-up with nothing to do is the publish the timeout asked for.
            self.engine.publish_hot(events.is_empty());
            // Starts (or stops) recording evictions before this turn's requests run.
            self.engine.log_evictions();
            self.take_events(&events);
            self.turn();
            self.once_a_second();
            if self.shared.wakeups.stopping() {
                let deadline = *stop_deadline.get_or_insert_with(|| self.begin_stop());
                if self.conns.iter().all(Option::is_none) || Instant::now() > deadline {
                    // -e: the flash pages being filled go out, so the next start has them all.
                    self.engine.flash_write_partial();
                    self.engine.publish();
                    self.shared.lending.leave(self.index);
                    return;
                }
            }
        }
    }

    /// Notes what this turn's events report: readiness of connections, listeners, UDP and
    /// native ports, and finished flash reads; accepts new connections.
    fn take_events(&mut self, events: &Events) {
        if !self.later.is_empty() {
            // What a script's door took while it ran (busy.rs), before what came since.
            let later = std::mem::take(&mut self.later.events);
            for &(token, ready) in &later {
                self.take_event(token, ready);
            }
            self.later.events = recycle_events(later);
        }
        if std::mem::take(&mut self.later.overflowed) {
            // More came while a script ran than its door kept: everything is looked at.
            let every = Ready { readable: true, writable: true, read_closed: false, error: false };
            for listener in 0..self.listeners.len() {
                self.take_event(Token(LISTENER_BASE + listener), every);
            }
            for socket in 0..self.udp.sockets.len() {
                self.take_event(Token(UDP_BASE + socket), every);
            }
            for port in 0..self.native.ports.len() {
                self.take_event(Token(NATIVE_BASE + port), every);
            }
            for index in 0..self.conns.len() {
                self.take_event(Token(CONN_BASE + index), every);
            }
        }
        if self.later.bytes_read + self.later.bytes_written > 0 {
            self.engine.counters.bytes_read += std::mem::take(&mut self.later.bytes_read);
            self.engine.counters.bytes_written += std::mem::take(&mut self.later.bytes_written);
        }
        for event in events.iter() {
            self.take_event(event.token(), Ready::of(event));
        }
    }

    /// One event's readiness noted (a listener's: its connections accepted).
    fn take_event(&mut self, token: Token, event: Ready) {
        match token {
            WAKER | NET => {}
            FLASH => {
                if let Some(uring) = self.flash.uring.as_ref() {
                    uring.clear_eventfd();
                }
            }
            Token(token) if (UDP_BASE..UDP_BASE + UDP_SOCKETS_MAX).contains(&token) => {
                self.udp.ready |= 1 << (token - UDP_BASE);
            }
            Token(token) if token < CONN_BASE => self.accept(token - LISTENER_BASE),
            Token(token) if token >= NATIVE_BASE => {
                if let Some(port) = self.native.ports.get_mut(token - NATIVE_BASE) {
                    port.ready = true;
                }
            }
            Token(token) => {
                let index = token - CONN_BASE;
                if let Some(conn) = self.conns.get_mut(index).and_then(Option::as_mut) {
                    if event.readable || event.read_closed || event.error {
                        conn.read_ready = true;
                    }
                    conn.peer_closed |= event.read_closed;
                    if event.writable {
                        conn.write_blocked = false;
                    }
                    queue(&mut self.work, conn, index);
                }
            }
        }
    }

    /// One turn's work, in order: resumed accepts, UDP datagrams, native bursts, replies that
    /// came back, requests other workers handed over, flash reads back, reads ahead, every
    /// queued connection's window, then counters published before the replies leave, this
    /// turn's batches pushed, and one send per connection.
    fn turn(&mut self) {
        let resumed = self.shared.connections.resumptions();
        if resumed != self.accept_resumed_seen {
            // Accepting paused at the connection limit and has resumed: the listeners'
            // edge-triggered events for the connections that waited have passed.
            self.accept_resumed_seen = resumed;
            for listener in 0..self.listeners.len() {
                self.accept(listener);
            }
        }
        if self.udp.ready != 0 {
            self.receive_udp();
        }
        self.net_completions();
        if self.native.ready() && self.native.serve(&mut self.engine) {
            self.executed = true;
        }
        // Replies before requests: a worker pushes its requests before its replies, so one
        // it sent before a reply (a flush_all of another connection) runs before the
        // connection that reply resumes goes on.
        self.work_from_events = self.work.len();
        self.place_replies();
        self.run_handed_over();
        self.finish_flash();
        self.read_ahead();
        while let Some(index) = self.work.pop() {
            self.service(index);
        }
        if self.shared.rings.flash_io().is_some() {
            // Reads the page cache holds complete inside the submit: run their requests
            // in this turn.
            self.flash.submit();
            self.finish_flash();
            self.flash.submit();
        }
        // Published before the replies leave, so a client that saw a reply sees its
        // effect in `stats` (asked on any worker).
        if self.executed {
            self.engine.log_evictions();
            self.engine.publish();
            self.executed = false;
        }
        self.send_outgoing();
        for index in std::mem::take(&mut self.retry) {
            if let Some(conn) = self.conns[index].as_mut() {
                queue(&mut self.work, conn, index);
            }
        }
        for &index in &self.watching {
            if self.conns[index]
                .as_ref()
                .and_then(|conn| conn.session.watch.as_ref())
                .is_some_and(|sink| sink.look())
            {
                queue_flush(&mut self.flush, index);
            }
        }
        self.write_all();
        if let Some(net) = self.net.as_mut() {
            // The turn's receives posted and cancelled, in one system call.
            let _ = net.submit();
        }
        self.publish_buffers();
    }

    /// Once a second (on the first turn of each second): `-o idle_timeout` and TLS handshake
    /// deadlines.
    fn once_a_second(&mut self) {
        let idle_timeout = self.shared.extended.idle_timeout_secs;
        if self.engine.now.secs() != self.idle_scan_secs {
            self.idle_scan_secs = self.engine.now.secs();
            if idle_timeout > 0 {
                self.kick_idle(idle_timeout);
            }
            self.drop_stalled_handshakes();
            self.shed_stalled_readers();
            self.shed_slots();
        }
    }

    /// Zero when work is queued; otherwise announce sleep, re-check the rings, and sleep.
    fn timeout(&mut self) -> Option<Duration> {
        let busy = !self.work.is_empty()
            || self.flash.has_work()
            || self.net.as_mut().is_some_and(|net| net.has_completions())
            || self.udp.ready != 0
            || self.native.ready()
            || self.handover.outgoing.iter().any(Option::is_some)
            || self.handover.unsent_replies.iter().any(|queue| !queue.is_empty())
            || !self.later.is_empty()
            || !self.later.completions.is_empty();
        if busy {
            return Some(Duration::ZERO);
        }
        if self.shared.wakeups.stopping() {
            return Some(Duration::from_millis(10));
        }
        self.shared.wakeups.going_to_sleep(self.index);
        let rings_have_work = self.rings.from.iter().flatten().any(|ring| !ring.is_empty())
            || self.shared.rings.flash_io().is_some_and(|io| io.has_done(self.index))
            || self.rings.reply_from.iter().flatten().any(|ring| !ring.is_empty())
            || self.watching.iter().any(|&index| {
                self.conns[index]
                    .as_ref()
                    .and_then(|conn| conn.session.watch.as_ref())
                    .is_some_and(|sink| sink.is_ready())
            });
        if rings_have_work {
            self.shared.wakeups.awake(self.index);
            return Some(Duration::ZERO);
        }
        if self.engine.hot_dirty() {
            // Wake once more to publish the keys counted since the last publish.
            return Some(crate::observe::hotkeys::PUBLISH_EVERY);
        }
        Some(Duration::from_secs(1))
    }

    fn begin_stop(&mut self) -> Instant {
        for mut listener in self.listeners.drain(..) {
            self.shared.observers.registry.remove(listener.socket.fd());
            let _ = self.poll.registry().deregister(&mut listener.socket);
        }
        for socket in &mut self.udp.sockets {
            // Kept for sending the replies of datagrams already received.
            let _ = self.poll.registry().deregister(socket);
        }
        self.udp.ready = 0;
        for port in &mut self.native.ports {
            let _ = self.poll.registry().deregister(&mut port.socket);
            port.ready = false;
        }
        for index in 0..self.conns.len() {
            if self.conns[index].is_some() {
                self.service(index);
                if let Some(conn) = self.conns[index].as_mut() {
                    conn.session.state.close();
                    queue_flush(&mut self.flush, index);
                }
            }
        }
        self.write_all();
        Instant::now() + SHUTDOWN_GRACE
    }
}

/// A peer as `watch connevents` names it: address, port and transport.
/// A worker whose io_uring the kernel refused serves on epoll; the first to find it says so.
fn uring_refused(shared: &Shared, error: &io::Error) {
    if shared.rings.first_refusal() {
        eprintln!("quicksilver: io_uring refused ({error}): connections are served on epoll (-o io_backend)");
    }
}

fn peer_text(addr: &Addr) -> (String, u16, &'static str) {
    match addr {
        Addr::Inet(peer) => (peer.ip().to_string(), peer.port(), "tcp"),
        Addr::Unix(_) => ("unix".to_string(), 0, "local"),
    }
}

/// One read from `conn`'s socket into its buffer; false when nothing more should be read
/// this turn (the socket is drained, closed or failed, or the buffer is full).
fn read_once(
    conn: &mut Conn,
    (counters, turn_ticks): (&mut WorkerCounters, u64),
    buffers: &mut Buffers,
    tls: Option<&crate::net::tls::Context>,
) -> bool {
    if conn.ring != RingIo::Off {
        // Its bytes come from the worker's io_uring.
        return false;
    }
    let input = &conn.input;
    if !input.buf.is_empty() && input.start == 0 && input.end == input.buf.len() && !conn.session.starved {
        // Full of requests that wait on their replies being read: the rest stays in the
        // socket until they run (growing the buffer for them would only hold more).
        return false;
    }
    let was_empty = conn.input.start == conn.input.end;
    let Some(spare) = conn.input.spare(buffers) else {
        // -o read_buf_mem_limit: no read buffer left for it; memcached closes the connection.
        conn.session.state.kill();
        conn.session.error = true;
        counters.read_buf_oom += 1;
        return false;
    };
    if spare.is_empty() {
        // A request larger than the buffer may grow: the parser would have refused it, so
        // this is garbage without a line end.
        conn.session.state.kill();
        conn.session.error = true;
        counters.conns_dropped += 1;
        return false;
    }
    let room = spare.len();
    let Transport::Tcp(stream) = &mut conn.transport else { return false };
    let mut broken = false;
    match stream.read(spare) {
        Ok(0) => {
            // The client sent all it will: answer what it sent (a dump or a long get may
            // still be running), then close.
            conn.read_ready = false;
            conn.session.eof = true;
            if conn.input.start == conn.input.end && conn.session.dump.is_none() {
                conn.session.state.close();
            }
        }
        Ok(read) => {
            if was_empty {
                conn.input.since = turn_ticks;
            }
            conn.input.end += read;
            counters.bytes_read += read as u64;
            if read < room && !conn.peer_closed {
                // A short read drained the socket; edge-triggered epoll reports whatever
                // arrives next. (Once the peer has closed, the end of input is read next.)
                conn.read_ready = false;
            }
        }
        Err(error) if error.kind() == io::ErrorKind::WouldBlock => conn.read_ready = false,
        Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
        Err(error) => {
            conn.read_ready = false;
            conn.session.state.kill();
            broken = error.kind() == io::ErrorKind::InvalidData;
        }
    }
    if let (crate::net::Stream::Tls(session), Some(tls)) = (stream, tls) {
        if session.take_handshake_failure() {
            tls.handshake_errors.fetch_add(1, Relaxed);
            conn.session.error = true;
        } else if broken {
            // memcached 1.6.45's `ssl_proto_errors`: TLS that broke after the handshake.
            tls.proto_errors.fetch_add(1, Relaxed);
        }
        if let Some(peer) = session.take_handshake() {
            tls.handshakes.fetch_add(1, Relaxed);
            if let (Some(name), Some(info)) = (peer, conn.session.info.as_ref()) {
                info.set_tls_peer_cn(name);
            }
        }
    }
    true
}

/// An emptied list of events, its allocation kept.
fn recycle_events(mut events: Vec<(Token, Ready)>) -> Vec<(Token, Ready)> {
    events.clear();
    events
}

fn queue(work: &mut Vec<usize>, conn: &mut Conn, index: usize) {
    if !conn.queued {
        conn.queued = true;
        work.push(index);
    }
}

/// A free connection slot: a freed one, else a new one at the end (whose generation, if the
/// slot existed before [`Worker::shed_slots`] cut it off, goes on from where it was, so a late
/// completion for its last connection is never taken for the new one's).
fn new_slot(conns: &mut Vec<Option<Conn>>, generations: &mut Vec<u32>, free: &mut Vec<usize>) -> usize {
    free.pop().unwrap_or_else(|| {
        conns.push(None);
        if generations.len() < conns.len() {
            generations.push(0);
        }
        conns.len() - 1
    })
}

fn queue_flush(flush: &mut Flush, index: usize) {
    flush.push(index);
}

/// Connections to write this turn, each once: a list and a mark per connection slot, so
/// queueing is constant time however many connections a turn flushes.
#[derive(Default)]
struct Flush {
    list: Vec<usize>,
    queued: Vec<bool>,
}

impl Flush {
    /// Queues connection `index` unless it is queued already.
    fn push(&mut self, index: usize) {
        if index >= self.queued.len() {
            self.queued.resize(index + 1, false);
        }
        if !std::mem::replace(&mut self.queued[index], true) {
            self.list.push(index);
        }
    }

    /// The connection queued last, no longer queued.
    fn pop(&mut self) -> Option<usize> {
        let index = self.list.pop()?;
        self.queued[index] = false;
        Some(index)
    }

    /// The connections queued, in order.
    fn queued(&self) -> &[usize] {
        &self.list
    }

    /// Whether no connection is queued.
    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Forgets the marks of slots from `end` on (none of them queued).
    fn shrink(&mut self, end: usize) {
        if end < self.queued.len() && self.list.iter().all(|&index| index < end) {
            self.queued.truncate(end);
            self.queued.shrink_to_fit();
        }
    }
}

/// The longest a connection's unparsed input may grow: a memcached request's (the item limit
/// and a command line), and a Redis request's, as long as redis-server's query buffer allows
/// (1 GiB) within the client memory budget, which charges its bytes as they arrive.
fn input_limits(shared: &Shared) -> (usize, usize) {
    let input_limit =
        shared.memory.item_bytes_max().max(qs_proto::GET_LINE_BYTES_MAX) + qs_proto::LINE_BYTES_MAX + 2;
    (input_limit, input_limit.max(shared.client_memory.limit().min(RESP_REQUEST_BYTES_MAX)))
}

#[cfg(test)]
mod tests {
    use super::Flush;

    #[test]
    fn a_flush_queue_holds_each_connection_once() {
        let mut flush = Flush::default();
        for index in [3, 1, 3, 0, 1, 3] {
            flush.push(index);
        }
        let mut popped: Vec<usize> = std::iter::from_fn(|| flush.pop()).collect();
        popped.sort_unstable();
        assert_eq!(popped, [0, 1, 3]);
        // Popped connections may be queued again.
        flush.push(3);
        assert_eq!(flush.pop(), Some(3));
        assert_eq!(flush.pop(), None);
    }

    #[test]
    fn many_connections_flushed_in_one_turn_stay_linear() {
        // 300,000 connections queued twice each: a queue that searched its list on every push
        // would make ~9e10 comparisons here (minutes); this one makes 600,000 pushes.
        const CONNECTIONS: usize = 300_000;
        let mut flush = Flush::default();
        for round in 0..2 {
            for index in 0..CONNECTIONS {
                flush.push(if round == 0 { index } else { CONNECTIONS - 1 - index });
            }
        }
        let mut count = 0;
        while flush.pop().is_some() {
            count += 1;
        }
        assert_eq!(count, CONNECTIONS);
    }
}
