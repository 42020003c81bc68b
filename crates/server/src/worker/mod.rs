//! A worker: one thread, pinned, with its own epoll instance, connections and partitions.
//!
//! Each loop turn: wait for events (sleeping only when no ring has work), read and process
//! every ready connection (parse all buffered requests, run them here or hand them to their
//! owner), run the requests other workers handed over, place the replies that came back,
//! push the turn's hand-over batches (waking a worker only if it sleeps), publish counters,
//! then write every connection's output with one send each.

use crate::config::{Protocol, UDP_SOCKETS_MAX};
use crate::exec::{Engine, Exec, Located, Route};
use crate::observe::counters::WorkerCounters;
use crate::observe::registry::{self, Addr, Info};
use crate::session::{Buffers, Conn, Input, Output, Transport, OUTPUT_BYTES_HIGH};
use crate::shared::Shared;
use arrayvec::ArrayVec;
use mio::{Events, Interest, Poll, Token};
use qs_proto::{GetKind, Parsed, Request};
use rtrb::{Consumer, Producer};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod flash;

const WAKER: Token = Token(0);
/// The flash tier's io_uring eventfd (reads the device finished).
const FLASH: Token = Token(NATIVE_BASE - 1);
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
/// The most flushes in a row that hold a connection's ready replies back while replies from
/// other workers are outstanding (two workers, 50% GET, depth 16: one hold in a row left 1.8
/// sends per client batch, four or more leave one; docs/BENCHMARKS.md).
const HOLD_FLUSHES_MAX: u8 = 4;
/// memcached's reply when a UDP request's replies outgrow what is held for one connection.
const UDP_REPLY_TOO_LARGE: &[u8] = b"SERVER_ERROR out of memory writing get response\r\n";
/// How long a stopping server keeps answering what it has already received.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);
/// memcached's reply when the connection limit is reached.
const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

/// What happens to a forwarded request's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Sent to the client as is.
    Reply,
    /// One key of a split multi-get: the VALUE block without the END line.
    StripEnd,
    /// Not sent (flush_all on other workers, the delete after a refused set).
    Discard,
    /// Held by the owner for flash reads: answered in a later batch (never on a ring).
    Held,
}

/// One forwarded request.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    conn: u32,
    generation: u32,
    /// The connection's descriptor (`watch` lines name it).
    fd: i32,
    id: u64,
    kind: OpKind,
    request: (u32, u32),
    response: (u32, u32),
    /// `-o front_cache`: a plain `get` of one key answered under these write epochs and
    /// second, for the asking worker's front cache.
    front: Option<(qs_store::front::Epoch, u32)>,
}

/// Requests handed to one worker in one loop turn, and (on the way back) their replies.
#[derive(Default)]
pub struct Batch {
    ops: Vec<Op>,
    requests: Vec<u8>,
    responses: Vec<u8>,
}

/// Ring ends a worker holds, indexed by the other worker.
pub struct Rings {
    /// Requests to each worker.
    pub to: Vec<Option<Producer<Batch>>>,
    /// Requests from each worker.
    pub from: Vec<Option<Consumer<Batch>>>,
    /// Replies to each worker.
    pub reply_to: Vec<Option<Producer<Batch>>>,
    /// Replies from each worker.
    pub reply_from: Vec<Option<Consumer<Batch>>>,
}

/// Ring capacity in batches (one batch per loop turn per pair).
pub const RING_BATCHES: usize = 64;
/// A batch stops taking requests at this many request bytes until it has been sent; the
/// connections that wanted to add to it wait (bounds memory when an owner falls behind).
const BATCH_BYTES_MAX: usize = 2 << 20;
/// A connection with this many requests waiting on other workers stops until some return.
const PENDING_PER_CONN_MAX: u32 = 256;
/// Requests parsed and prefetched ahead of running them.
const WINDOW: usize = 16;
/// Spare batches kept for reuse.
const SPARE_BATCHES_MAX: usize = 16;
/// Bytes a spare batch keeps of its buffers (a batch of large values gives the rest back).
const SPARE_BATCH_BYTES: usize = 64 << 10;
/// Request bytes handed to one owner and not yet answered; beyond this, connections that want
/// to hand it more wait for its replies (with the batch limit, this bounds the memory an owner
/// that falls behind can make its peers hold).
const INFLIGHT_BYTES_MAX: usize = 4 << 20;

/// Builds the rings between `workers` workers.
pub fn rings(workers: usize) -> Vec<Rings> {
    let mut all: Vec<Rings> = (0..workers)
        .map(|_| Rings {
            to: (0..workers).map(|_| None).collect(),
            from: (0..workers).map(|_| None).collect(),
            reply_to: (0..workers).map(|_| None).collect(),
            reply_from: (0..workers).map(|_| None).collect(),
        })
        .collect();
    for a in 0..workers {
        for b in 0..workers {
            if a == b {
                continue;
            }
            let (producer, consumer) = rtrb::RingBuffer::new(RING_BATCHES);
            all[a].to[b] = Some(producer);
            all[b].from[a] = Some(consumer);
            let (producer, consumer) = rtrb::RingBuffer::new(RING_BATCHES);
            all[b].reply_to[a] = Some(producer);
            all[a].reply_from[b] = Some(consumer);
        }
    }
    all
}

/// What a worker listens on.
pub struct Sockets {
    /// TCP: the main ports (shared by every worker) and, with --worker-port-base, its own;
    /// each with the protocol its connections start in and whether they speak TLS (-Z).
    pub listeners: Vec<(crate::session::Listener, crate::config::Protocol, bool)>,
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
    listeners: Vec<crate::session::Listener>,
    /// Each listener's address.
    listener_addrs: Vec<Addr>,
    /// Each listener's protocol (-B, or its `proto[...]` in -l).
    listener_protocols: Vec<crate::config::Protocol>,
    /// Each listener's connections speak TLS (-Z, unless `notls:`).
    listener_tls: Vec<bool>,
    /// memcached's UDP port (-U), bound by every worker.
    udp: Vec<mio::net::UdpSocket>,
    /// The UDP socket may have datagrams waiting.
    udp_ready: u64,
    /// Receive buffer for one datagram, and the send buffer for one reply datagram.
    udp_buf: Vec<u8>,
    /// The native protocol's ports of this worker's partitions.
    native: crate::native::Native,
    conns: Vec<Option<Conn>>,
    generations: Vec<u32>,
    free: Vec<usize>,
    engine: Engine,
    rings: Rings,
    outgoing: Vec<Option<Batch>>,
    unsent_replies: Vec<VecDeque<Batch>>,
    spare: Vec<Batch>,
    /// Per owner: request bytes handed over and not yet answered.
    inflight: Vec<usize>,
    work: Vec<usize>,
    flush: Vec<usize>,
    /// Connections that stopped because a batch was full: serviced again next turn.
    retry: Vec<usize>,
    /// The second of the last `-o idle_timeout` scan.
    idle_scan_secs: u32,
    /// `Shared::accept_resumed` as last seen (no_maxconns_fast: accept again when it moves).
    accept_resumed_seen: u64,
    /// Keys located by `read_ahead`, for its item prefetch.
    ahead: Vec<Located>,
    input_limit: usize,
    executed: bool,
    /// Buffers lent to connections while they have bytes in flight.
    buffers: Buffers,
    /// What `buffers` held when last published.
    buffers_shown: crate::session::BufferFigures,
    /// Its `watch` connections.
    watching: Vec<usize>,
    /// Requests waiting for flash reads.
    flash: flash::FlashWaits,
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
        let Sockets { listeners, mut udp, mut native } = sockets;
        let listener_tls: Vec<bool> = listeners.iter().map(|listener| listener.2).collect();
        let (mut listeners, listener_protocols): (Vec<_>, Vec<_>) =
            listeners.into_iter().map(|(listener, protocol, _)| (listener, protocol)).unzip();
        for (offset, listener) in listeners.iter_mut().enumerate() {
            poll.registry().register(listener, Token(LISTENER_BASE + offset), Interest::READABLE)?;
        }
        for (offset, socket) in udp.iter_mut().enumerate() {
            poll.registry().register(socket, Token(UDP_BASE + offset), Interest::READABLE)?;
        }
        for (offset, port) in native.ports.iter_mut().enumerate() {
            poll.registry().register(&mut port.socket, Token(NATIVE_BASE + offset), Interest::READABLE)?;
        }
        let now = crate::sys::now_secs();
        let path = shared.config.unix_socket.as_deref();
        let listener_addrs: Vec<Addr> = listeners.iter().map(|listener| listener.addr(path)).collect();
        for (listener, addr) in listeners.iter().zip(&listener_addrs) {
            let info = Info::new(registry::Kind::Listener, addr.clone(), None, now);
            shared.registry.add(listener.fd(), Arc::new(info));
        }
        for socket in &udp {
            if let Ok(addr) = socket.local_addr() {
                let info = Info::new(registry::Kind::Udp, Addr::Inet(addr), None, now);
                shared.registry.add(socket.as_raw_fd(), Arc::new(info));
            }
        }
        let mut flash = flash::FlashWaits::default();
        if shared.flash_io.is_some() && !shared.extended.flash_io_threads {
            // io_uring where the kernel allows it; the reader threads otherwise.
            if let Ok(uring) = crate::flashio::Uring::new(256) {
                poll.registry().register(
                    &mut mio::unix::SourceFd(&uring.eventfd()),
                    FLASH,
                    Interest::READABLE,
                )?;
                flash.uring = Some(uring);
                shared.flash_rings.fetch_add(1, Relaxed);
            }
        }
        let workers = shared.workers;
        let input_limit =
            shared.item_bytes_max.max(qs_proto::GET_LINE_BYTES_MAX) + qs_proto::LINE_BYTES_MAX + 2;
        let buffer_limit =
            Buffers::limit_per_worker(shared.extended.read_buf_mem_limit_bytes, shared.workers);
        Ok(Worker {
            index,
            shared,
            poll,
            listeners,
            listener_addrs,
            listener_protocols,
            listener_tls,
            udp_ready: if udp.len() >= 64 { u64::MAX } else { (1u64 << udp.len()) - 1 },
            udp,
            udp_buf: vec![0; DATAGRAM_BYTES_MAX],
            native,
            conns: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            engine,
            rings,
            outgoing: (0..workers).map(|_| None).collect(),
            unsent_replies: (0..workers).map(|_| VecDeque::new()).collect(),
            spare: Vec::new(),
            inflight: vec![0; workers],
            work: Vec::new(),
            flush: Vec::new(),
            retry: Vec::new(),
            idle_scan_secs: 0,
            accept_resumed_seen: 0,
            ahead: Vec::new(),
            input_limit,
            executed: false,
            buffers: Buffers::new(buffer_limit),
            buffers_shown: Default::default(),
            watching: Vec::new(),
            flash,
        })
    }

    /// Runs until the server stops.
    pub fn run(mut self) {
        let mut events = Events::with_capacity(256);
        let mut stop_deadline: Option<Instant> = None;
        let flash_durable = self.shared.flash_io.is_some() && self.shared.config.memory_file.is_some();
        let mut flash_written_secs = 0;
        loop {
            let timeout = self.timeout();
            if flash_durable
                && (timeout != Some(Duration::ZERO) || self.engine.now_secs != flash_written_secs)
            {
                // -e: before sleeping, and once a second under load, the flash page being
                // filled goes to the file, so a crash loses no flash item older than that.
                flash_written_secs = self.engine.now_secs;
                self.engine.flash_write_partial();
            }
            self.engine.turn_mrc();
            if let Err(error) = self.poll.poll(&mut events, timeout) {
                if error.kind() != io::ErrorKind::Interrupted {
                    eprintln!("worker {}: poll failed: {error}", self.index);
                    return;
                }
            }
            self.shared.sleeping[self.index].0.store(false, SeqCst);
            self.engine.now_secs = crate::sys::now_secs();
            // A wake-up with nothing to do is the publish the timeout asked for.
            self.engine.publish_hot(events.is_empty());
            // Starts (or stops) recording evictions before this turn's requests run.
            self.engine.log_evictions();
            for event in events.iter() {
                match event.token() {
                    WAKER => {}
                    FLASH => {
                        if let Some(uring) = self.flash.uring.as_ref() {
                            uring.clear_eventfd();
                        }
                    }
                    Token(token) if (UDP_BASE..UDP_BASE + UDP_SOCKETS_MAX).contains(&token) => {
                        self.udp_ready |= 1 << (token - UDP_BASE);
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
                            if event.is_readable() || event.is_read_closed() || event.is_error() {
                                conn.read_ready = true;
                            }
                            conn.peer_closed |= event.is_read_closed();
                            if event.is_writable() {
                                conn.write_blocked = false;
                            }
                            queue(&mut self.work, conn, index);
                        }
                    }
                }
            }
            let resumed = self.shared.accept_resumed.load(Relaxed);
            if resumed != self.accept_resumed_seen {
                // Accepting paused at the connection limit and has resumed: the listeners'
                // edge-triggered events for the connections that waited have passed.
                self.accept_resumed_seen = resumed;
                for listener in 0..self.listeners.len() {
                    self.accept(listener);
                }
            }
            if self.udp_ready != 0 {
                self.receive_udp();
            }
            if self.native.ready() && self.native.serve(&mut self.engine) {
                self.executed = true;
            }
            self.run_handed_over();
            self.finish_flash();
            self.place_replies();
            self.read_ahead();
            while let Some(index) = self.work.pop() {
                self.service(index);
            }
            if self.shared.flash_io.is_some() {
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
                    .and_then(|conn| conn.watch.as_ref())
                    .is_some_and(|sink| sink.look())
                {
                    queue_flush(&mut self.flush, index);
                }
            }
            self.write_all();
            self.publish_buffers();
            let idle_timeout = self.shared.extended.idle_timeout_secs;
            if self.engine.now_secs != self.idle_scan_secs {
                self.idle_scan_secs = self.engine.now_secs;
                if idle_timeout > 0 {
                    self.kick_idle(idle_timeout);
                }
                self.drop_stalled_handshakes();
            }
            if self.shared.stop.load(Relaxed) {
                let deadline = *stop_deadline.get_or_insert_with(|| self.begin_stop());
                if self.conns.iter().all(Option::is_none) || Instant::now() > deadline {
                    // -e: the flash pages being filled go out, so the next start has them all.
                    self.engine.flash_write_partial();
                    self.engine.publish();
                    return;
                }
            }
        }
    }

    /// Zero when work is queued; otherwise announce sleep, re-check the rings, and sleep.
    fn timeout(&mut self) -> Option<Duration> {
        let busy = !self.work.is_empty()
            || self.flash.has_work()
            || self.udp_ready != 0
            || self.native.ready()
            || self.outgoing.iter().any(Option::is_some)
            || self.unsent_replies.iter().any(|queue| !queue.is_empty());
        if busy {
            return Some(Duration::ZERO);
        }
        if self.shared.stop.load(Relaxed) {
            return Some(Duration::from_millis(10));
        }
        self.shared.sleeping[self.index].0.store(true, SeqCst);
        std::sync::atomic::fence(SeqCst);
        let rings_have_work = self.rings.from.iter().flatten().any(|ring| !ring.is_empty())
            || self.shared.flash_io.as_ref().is_some_and(|io| io.has_done(self.index))
            || self.rings.reply_from.iter().flatten().any(|ring| !ring.is_empty())
            || self.watching.iter().any(|&index| {
                self.conns[index]
                    .as_ref()
                    .and_then(|conn| conn.watch.as_ref())
                    .is_some_and(|sink| sink.is_ready())
            });
        if rings_have_work {
            self.shared.sleeping[self.index].0.store(false, SeqCst);
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
            self.shared.registry.remove(listener.fd());
            let _ = self.poll.registry().deregister(&mut listener);
        }
        for socket in &mut self.udp {
            // Kept for sending the replies of datagrams already received.
            let _ = self.poll.registry().deregister(socket);
        }
        self.udp_ready = 0;
        for port in &mut self.native.ports {
            let _ = self.poll.registry().deregister(&mut port.socket);
            port.ready = false;
        }
        for index in 0..self.conns.len() {
            if self.conns[index].is_some() {
                self.service(index);
                if let Some(conn) = self.conns[index].as_mut() {
                    conn.closing = true;
                    queue_flush(&mut self.flush, index);
                }
            }
        }
        self.write_all();
        Instant::now() + SHUTDOWN_GRACE
    }

    fn accept(&mut self, listener: usize) {
        let shared = self.shared.clone();
        let _turn = match self.listeners.get(listener) {
            // Another worker is accepting from the shared socket: it takes this one too (it
            // accepts until none is left; one arriving later wakes both workers again).
            Some(crate::session::Listener::Unix(_)) => match shared.unix_accept.try_lock() {
                Ok(guard) => Some(guard),
                Err(_) => return,
            },
            _ => None,
        };
        let fast = self.shared.extended.maxconns_fast;
        let _reserving = (!fast).then(|| shared.reserved_accept.lock().unwrap_or_else(|e| e.into_inner()));
        loop {
            let Some(socket) = self.listeners.get(listener) else { return };
            // Without maxconns_fast a place is taken before accepting: at the limit nothing
            // is accepted and clients wait in the backlog until a connection closes.
            if !fast {
                let open = self.shared.curr_connections.fetch_add(1, Relaxed);
                if open >= self.shared.config.max_connections as u64 {
                    self.shared.curr_connections.fetch_sub(1, Relaxed);
                    self.shared.disable_accepting();
                    self.release_false_pause();
                    return;
                }
            }
            let (mut stream, peer) = match socket.accept() {
                Ok(accepted) => accepted,
                Err(error) => {
                    if !fast {
                        self.shared.curr_connections.fetch_sub(1, Relaxed);
                    }
                    if error.kind() != io::ErrorKind::WouldBlock && self.shared.config.verbose > 0 {
                        eprintln!("accept: {error}");
                    }
                    return;
                }
            };
            let open = if fast { self.shared.curr_connections.fetch_add(1, Relaxed) } else { 0 };
            if open >= self.shared.config.max_connections as u64 {
                self.shared.curr_connections.fetch_sub(1, Relaxed);
                self.shared.rejected_connections.fetch_add(1, Relaxed);
                let _ = stream.write(TOO_MANY_CONNECTIONS);
                continue;
            }
            if self.listener_tls[listener] {
                // -Z: a TLS session around the socket (its handshake runs as it is read).
                let session = match (self.shared.tls.as_ref(), stream) {
                    (Some(tls), crate::session::Stream::Tcp(socket)) => {
                        tls.accept(socket, self.engine.now_secs).ok()
                    }
                    _ => None,
                };
                let Some(session) = session else {
                    // The socket is closed as it drops; its place goes back.
                    self.shared.curr_connections.fetch_sub(1, Relaxed);
                    continue;
                };
                stream = crate::session::Stream::Tls(Box::new(session));
            }
            self.shared.total_connections.fetch_add(1, Relaxed);
            let index = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.generations.push(0);
                self.conns.len() - 1
            });
            let interest = Interest::READABLE | Interest::WRITABLE;
            if self.poll.registry().register(&mut stream, Token(CONN_BASE + index), interest).is_err() {
                self.shared.curr_connections.fetch_sub(1, Relaxed);
                self.free.push(index);
                continue;
            }
            if self.shared.config.verbose > 1 {
                eprintln!("worker {}: new connection {index}", self.index);
            }
            self.generations[index] = self.generations[index].wrapping_add(1);
            let fd = stream.fd();
            let local = stream.local_addr(&self.listener_addrs[listener]);
            let info = Arc::new(Info::new(registry::Kind::Client, peer, Some(local), self.engine.now_secs));
            self.shared.registry.add(fd, info.clone());
            if self.shared.watchers.wants(crate::observe::watch::CONNEVENTS) {
                let (rip, rport, transport) = peer_text(&info.addr);
                self.shared.log(
                    crate::observe::watch::CONNEVENTS,
                    format_args!("type=conn_new rip={rip} rport={rport} transport={transport} cfd={fd}"),
                );
            }
            let conn = Conn {
                watch: None,
                error: false,
                protocol: self.listener_protocols[listener],
                authenticated: self.shared.sasl_passwords.is_none() && self.shared.ascii_passwords.is_none(),
                info: Some(info),
                fd,
                transport: Transport::Tcp(stream),
                generation: self.generations[index],
                input: Input::new(self.input_limit),
                output: Output::new(self.shared.workers),
                read_ready: true,
                peer_closed: false,
                write_blocked: false,
                stalled: false,
                flash_wait: false,
                closing: false,
                dead: false,
                queued: false,
                waiting: false,
                held: 0,
                dump: None,
                stacked: false,
                eof: false,
                starved: false,
            };
            self.conns[index] = Some(conn);
            self.work.push(index);
            if let Some(conn) = self.conns[index].as_mut() {
                conn.queued = true;
            }
        }
    }

    /// Processes buffered requests and reads more until the socket is drained or the
    /// connection must wait.
    fn service(&mut self, index: usize) {
        let Some(conn) = self.conns[index].as_mut() else { return };
        conn.queued = false;
        conn.output.borrow(&mut self.buffers);
        loop {
            self.process(index);
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
            // A connection dropped (a read_buf_oom among the reasons) shows in stats at once.
            self.executed |= conn.dead;
        }
        queue_flush(&mut self.flush, index);
    }

    /// Reads the connections queued this turn whose buffers are empty, and starts loading the
    /// bucket and then the item of each one's first request before any of them runs: at
    /// depth 1 a connection brings one request per turn, so the turn's connections together
    /// are the batch that hides the memory loads (MICA's prefetch pipeline, across
    /// connections). The keys are guessed before parsing; a wrong guess only wastes a load.
    fn read_ahead(&mut self) {
        if self.work.len() < 2 {
            return;
        }
        let Worker { work, conns, engine, ahead, buffers, shared, .. } = self;
        let tls = shared.tls.as_deref();
        ahead.clear();
        // `service` pops the queue from its end: load in that order.
        for &index in work.iter().rev() {
            let Some(conn) = conns[index].as_mut() else { continue };
            if conn.input.end != 0 || !conn.may_read() || !read_once(conn, &mut engine.counters, buffers, tls)
            {
                continue;
            }
            if let Some(key) = qs_proto::tokens::key_guess(conn.input.pending()) {
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
    fn process(&mut self, index: usize) {
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
            stalled,
            closing,
            dead,
            generation,
            waiting,
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
            flash_wait,
            ..
        } = conn;
        if *flash_wait {
            return;
        }
        *starved = false;
        engine.conn_fd = *fd;
        if watch.is_some() {
            // A watcher's input is read (to see it close) and ignored, as memcached ignores it.
            input.consume(input.end - input.start);
            *closing |= *eof;
            *starved = true;
            return;
        }
        let udp = matches!(transport, Transport::Udp { .. });
        if *protocol == Protocol::Auto {
            match input.pending().first() {
                Some(&qs_proto::binary::REQUEST_MAGIC) => *protocol = Protocol::Binary,
                Some(_) => *protocol = Protocol::Ascii,
                None => {}
            }
        }
        let binary = *protocol == Protocol::Binary;
        if !*authenticated && !binary {
            if let Some(passwords) = shared.ascii_passwords.as_ref() {
                // -Y: the first command must authenticate (memcached's asciiauth).
                loop {
                    if !input.apply_skip() {
                        *starved = true;
                        return;
                    }
                    let pending = input.pending();
                    match crate::session::auth::ascii_auth(
                        pending,
                        passwords,
                        &mut engine.counters,
                        output.reply_buf(),
                    ) {
                        crate::session::auth::AsciiAuth::Wait => {
                            if pending.len() >= input.limit {
                                *dead = true;
                            }
                            *closing |= *eof;
                            *starved = true;
                            return;
                        }
                        crate::session::auth::AsciiAuth::Close => {
                            *dead = true;
                            return;
                        }
                        crate::session::auth::AsciiAuth::Answered { consumed, authenticated: ok } => {
                            *executed = true;
                            input.consume(consumed);
                            if ok {
                                *authenticated = true;
                                break;
                            }
                        }
                    }
                }
            }
        }
        *waiting = false;
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
            if *stalled && output.pending_total == 0 {
                // What it waited for has arrived (service reads again only once this clears).
                *stalled = false;
            }
            if !input.apply_skip() {
                *starved = true;
                return;
            }
            // The window borrows the read buffer: it lives in this block, dropped in place.
            let (mut consumed, stop, resume) = {
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
                    let parsed = if binary {
                        qs_proto::binary::parse(&pending[ahead..], &engine.limits)
                    } else {
                        qs_proto::parse(&pending[ahead..], &engine.limits)
                    };
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
                    // The input ran dry: memcached would send what it holds now.
                    *stacked = false;
                    *closing |= *eof;
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
                    if *dead || *closing || output.held_bytes() > OUTPUT_BYTES_HIGH {
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
                            *dead = true;
                            *error = true;
                            stop = true;
                            break;
                        }
                    }
                    if *stalled {
                        if output.pending_total > 0 {
                            stop = true;
                            break;
                        }
                        *stalled = false;
                    }
                    if output.pending_total >= PENDING_PER_CONN_MAX {
                        *stalled = true;
                        stop = true;
                        break;
                    }
                    if hand.full {
                        // An owner is behind: wait until this turn's batches are sent.
                        retry.push(index);
                        *waiting = true;
                        stop = true;
                        break;
                    }
                    if served >= reqs_per_event {
                        engine.counters.conn_yields += 1;
                        retry.push(index);
                        *waiting = true;
                        stop = true;
                        break;
                    }
                    served += 1;
                    if udp {
                        unmarked = Some(get_last_key(parsed));
                    }
                    let here = &pending[consumed..];
                    let flushes = matches!(
                        parsed,
                        Parsed::Request { request: Request::Get { .. } | Request::MetaNoop, .. }
                    );
                    if let Parsed::Request { request: Request::Metadump { classes }, len } = parsed {
                        if !udp {
                            *executed = true;
                            if dump.is_none() {
                                start_dump(classes, *stacked, dump, output.reply_buf(), engine);
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
                                *stalled = true;
                                stop = true;
                                break;
                            }
                            *executed = true;
                            let refusal: &[u8] = if shared.config.disable_watch {
                                b"CLIENT_ERROR watch commands not allowed\r\n"
                            } else if *stacked {
                                b"ERROR cannot pipeline other commands before watch\r\n"
                            } else if streams.is_none() {
                                b"ERROR\r\n"
                            } else {
                                b""
                            };
                            if !refusal.is_empty() {
                                output.reply_buf().extend_from_slice(refusal);
                                consumed += len;
                                continue;
                            }
                            *watch = Some(shared.watchers.add(streams.unwrap_or_default(), me));
                            watching.push(index);
                            if let Some(info) = info {
                                info.set_state(registry::State::Watch);
                            }
                            output.reply_buf().extend_from_slice(b"OK\r\n");
                            // Whatever follows is ignored.
                            consumed = pending.len();
                            stop = true;
                            break;
                        }
                    }
                    *stacked = !flushes;
                    let (request, len) = match parsed {
                        Parsed::Incomplete => unreachable!("the window holds no incomplete request"),
                        Parsed::Close => {
                            *dead = true;
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
                                    *closing = true;
                                    stop = true;
                                    break;
                                }
                                continue;
                            }
                        }
                    }
                    engine.hint(request, *located);
                    if let Some((owner, delete)) = too_large(request, engine) {
                        // The data block never enters the buffer: answer here, and let the owner
                        // drop the old value as memcached does.
                        if owner == me {
                            *executed = true;
                            engine.execute(request, output.reply_buf());
                        } else {
                            if let Some(delete) = delete {
                                hand.over(owner, &delete, OpKind::Discard, output, engine);
                            }
                            // Counted here, where it is answered (the owner only deletes).
                            engine.counters.cmd_set += 1;
                            engine.counters.store_too_large += 1;
                            *executed = true;
                            match request {
                                Request::TooLarge { noreply: true, .. } => {}
                                Request::Binary(binary) => qs_proto::binary::write_error(
                                    output.reply_buf(),
                                    binary.opcode,
                                    binary.opaque,
                                    qs_proto::binary::status::E2BIG,
                                ),
                                _ => output.reply_buf().extend_from_slice(qs_proto::response::TOO_LARGE),
                            }
                        }
                        consumed += len;
                        continue;
                    }
                    match engine.route(request, &output.pending) {
                        Route::Local => {}
                        Route::AfterPending if output.pending_total > 0 => {
                            *stalled = true;
                            stop = true;
                            break;
                        }
                        Route::AfterPending => {}
                        Route::Forward(owner) => {
                            // A plain get of one key may come from the front cache, unless an
                            // earlier request of this connection waits on the owner.
                            if output.pending[owner] == 0 {
                                if let Request::Get { kind: GetKind::Get, keys } = *request {
                                    if let Some(key) = qs_proto::tokens::single_word(keys) {
                                        if engine.front_serve(key, output.reply_buf()) {
                                            *executed = true;
                                            consumed += len;
                                            continue;
                                        }
                                    }
                                }
                            }
                            hand.over(owner, &here[..len], OpKind::Reply, output, engine);
                            consumed += len;
                            continue;
                        }
                        Route::SplitGet => {
                            let Request::Get { kind, keys } = *request else {
                                unreachable!("split gets are gets")
                            };
                            if flash_on && park_for_flash(flash, request, engine, shared, index, *generation)
                            {
                                *flash_wait = true;
                                waits_at = Some(position);
                                stop = true;
                                break;
                            }
                            *executed = true;
                            let budget = OUTPUT_BYTES_HIGH
                                .saturating_sub(output.held_bytes())
                                .min(buffers.hold_room());
                            let mut added = 0;
                            let mut rest = None;
                            for key in qs_proto::tokens::words(keys) {
                                let owner = engine.owner_of(key);
                                if owner == me {
                                    let buf = output.reply_buf();
                                    let before = buf.len();
                                    engine.get_one(kind, key, buf);
                                    added += buf.len() - before;
                                } else {
                                    let mut line = Vec::with_capacity(key.len() + 24);
                                    crate::exec::single_get_line(kind, key, &mut line);
                                    hand.over(owner, &line, OpKind::StripEnd, output, engine);
                                }
                                if added > budget || output.pending_total >= PENDING_PER_CONN_MAX {
                                    rest = crate::exec::keys_after(keys, key);
                                    if rest.is_some() {
                                        break;
                                    }
                                }
                            }
                            if let Some(rest) = rest {
                                resume = Some(Resume::of(pending, here, keys, rest));
                                stop = true;
                                break;
                            }
                            output.reply_buf().extend_from_slice(qs_proto::response::END);
                            consumed += len;
                            continue;
                        }
                        Route::Broadcast => {
                            for owner in (0..hand.outgoing.len()).filter(|&owner| owner != me) {
                                hand.over(owner, &here[..len], OpKind::Discard, output, engine);
                            }
                            *stalled = true;
                        }
                    }
                    if flash_on && park_for_flash(flash, request, engine, shared, index, *generation) {
                        *flash_wait = true;
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
                                .min(buffers.hold_room());
                            if let Some(rest) = engine.get_many(kind, keys, output.reply_buf(), budget) {
                                resume = Some(Resume::of(pending, here, keys, rest));
                                stop = true;
                                break;
                            }
                            consumed += len;
                            continue;
                        }
                    }
                    match engine.execute(request, output.reply_buf()) {
                        Exec::Done => {}
                        Exec::Close => *closing = true,
                        Exec::Forward(owner) => hand.over(owner, &here[..len], OpKind::Reply, output, engine),
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
                (consumed, stop, resume)
            };
            if let Some(resume) = resume {
                consumed = resume.apply(input);
            }
            input.consume(consumed);
            if stop {
                return;
            }
        }
    }

    /// Runs the requests other workers handed over and queues their replies. A request whose
    /// keys are on flash, and those of its connection behind it, are held until the reads are
    /// back (`flash`); their replies go back later.
    fn run_handed_over(&mut self) {
        for from in 0..self.rings.from.len() {
            while let Some(mut batch) = self.rings.from[from].as_mut().and_then(|ring| ring.pop().ok()) {
                self.executed = true;
                let Batch { ops, requests, responses } = &mut batch;
                responses.clear();
                let mut held = 0;
                for op in ops.iter_mut() {
                    let (start, len) = (op.request.0 as usize, op.request.1 as usize);
                    let request = &requests[start..start + len];
                    if self.engine.flash_on() && crate::session::dump::decode_chunk(request).is_none() {
                        if !self.flash.holds(from, op) {
                            self.flash.keys.clear();
                            if let Parsed::Request { request, .. } =
                                parse_handed(request, &self.engine.limits)
                            {
                                self.engine.flash_probe(&request, &mut self.flash.keys);
                            }
                        }
                        if self.flash.holds(from, op) || !self.flash.keys.is_empty() {
                            self.flash.hold(from, *op, request.to_vec(), &mut self.engine, &self.shared);
                            op.kind = OpKind::Held;
                            held += 1;
                            continue;
                        }
                    }
                    run_op(&mut self.engine, op, request, responses);
                }
                if held > 0 {
                    ops.retain(|op| op.kind != OpKind::Held);
                }
                self.unsent_replies[from].push_back(batch);
            }
        }
    }

    /// Places replies that came back into their connections' output.
    fn place_replies(&mut self) {
        for from in 0..self.rings.reply_from.len() {
            while let Some(mut batch) = self.rings.reply_from[from].as_mut().and_then(|ring| ring.pop().ok())
            {
                for op in &batch.ops {
                    let index = op.conn as usize;
                    let Some(conn) = self.conns.get_mut(index).and_then(Option::as_mut) else { continue };
                    if conn.generation != op.generation {
                        continue;
                    }
                    let (start, len) = (op.response.0 as usize, op.response.1 as usize);
                    if let Some(tag) = op.front {
                        let request = &batch.requests[op.request.0 as usize..][..op.request.1 as usize];
                        let line = request.strip_suffix(b"\n").unwrap_or(request);
                        let line = line.strip_suffix(b"\r").unwrap_or(line);
                        if let Some(key) = qs_proto::tokens::words(line).nth(1) {
                            self.engine.front_fill(key, &batch.responses[start..start + len], tag);
                        }
                    }
                    let placed = conn.output.fill(op.id, &batch.responses[start..start + len]);
                    debug_assert!(placed, "a reply for a request that was not waiting");
                    queue(&mut self.work, conn, index);
                }
                self.inflight[from] -= batch.requests.len();
                if self.spare.len() < SPARE_BATCHES_MAX {
                    batch.ops.clear();
                    batch.requests.clear();
                    batch.responses.clear();
                    batch.requests.shrink_to(SPARE_BATCH_BYTES);
                    batch.responses.shrink_to(SPARE_BATCH_BYTES);
                    self.spare.push(batch);
                }
            }
        }
    }

    /// Pushes this turn's batches and held replies onto the rings, waking sleeping owners.
    fn send_outgoing(&mut self) {
        for owner in 0..self.outgoing.len() {
            if let Some(batch) = self.outgoing[owner].take() {
                let ring = self.rings.to[owner].as_mut().expect("no ring to self");
                let bytes = batch.requests.len();
                match ring.push(batch) {
                    Ok(()) => {
                        self.inflight[owner] += bytes;
                        self.engine.counters.forward_batches += 1;
                        self.engine.counters.wakeups += u64::from(self.shared.wake_if_sleeping(owner));
                    }
                    Err(rtrb::PushError::Full(batch)) => self.outgoing[owner] = Some(batch),
                }
            }
            while let Some(batch) = self.unsent_replies[owner].pop_front() {
                let ring = self.rings.reply_to[owner].as_mut().expect("no ring to self");
                match ring.push(batch) {
                    Ok(()) => self.engine.counters.wakeups += u64::from(self.shared.wake_if_sleeping(owner)),
                    Err(rtrb::PushError::Full(batch)) => {
                        self.unsent_replies[owner].push_front(batch);
                        break;
                    }
                }
            }
        }
    }

    /// Writes every connection's ready output with one send each; closes finished ones.
    fn write_all(&mut self) {
        while let Some(index) = self.flush.pop() {
            let Some(conn) = self.conns[index].as_mut() else { continue };
            let Transport::Tcp(stream) = &mut conn.transport else {
                self.finish_udp(index);
                continue;
            };
            // Replies that wait on another worker split a batch's answer in two sends (and
            // the client's next requests in two reads, so the split lasts): hold the ready part
            // back until they arrive, which queues the connection again. A client that keeps
            // sending keeps replies pending; after HOLD_FLUSHES_MAX held flushes in a row the
            // ready part goes anyway.
            if conn.watch.is_some() {
                // New lines for a watcher: try the socket even if it last refused (epoll
                // reports a UNIX socket writable only once it is three quarters empty), so
                // its buffer holds what the socket can take, as memcached's logger does.
                conn.write_blocked = false;
            }
            let hold = conn.output.pending_total > 0 && conn.held < HOLD_FLUSHES_MAX && !conn.closing;
            conn.held = if hold { conn.held + 1 } else { 0 };
            while !hold && !conn.dead && !conn.write_blocked {
                if conn.output.unsent().is_empty() {
                    // TLS: records rustls still holds go out too.
                    match stream.flush() {
                        Ok(()) => {}
                        Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                            conn.write_blocked = true;
                            break;
                        }
                        Err(_) => {
                            conn.dead = true;
                            break;
                        }
                    }
                    // A watcher's lines move over once what it was sent before is gone.
                    let Some(sink) = conn.watch.as_ref() else { break };
                    let moved = sink.take(conn.output.reply_buf());
                    if moved == 0 {
                        break;
                    }
                    self.shared.watchers.sent.fetch_add(moved as u64, Relaxed);
                }
                match stream.write(conn.output.unsent()) {
                    Ok(written) => {
                        self.engine.counters.bytes_written += written as u64;
                        conn.output.advance(written);
                    }
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => conn.write_blocked = true,
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => conn.dead = true,
                }
            }
            conn.output.lend_back(&mut self.buffers);
            let finished = conn.closing
                && conn.output.held_bytes() == 0
                && conn.output.pending_total == 0
                && !conn.write_blocked;
            if conn.dead || finished {
                self.close(index);
            } else if !conn.write_blocked && conn.output.held_bytes() <= OUTPUT_BYTES_HIGH && !conn.stalled {
                // Output drained below the limit: resume reading if it had stopped.
                // Unparsed bytes that form no request yet wait for the socket (no spinning).
                if conn.read_ready || (conn.input.start < conn.input.end && !conn.starved) {
                    queue(&mut self.work, conn, index);
                }
            }
        }
        // Connections queued by the flush run next turn (poll returns at once).
    }

    /// Takes waiting datagrams (a bounded number per turn): each valid one becomes a connection
    /// of its own whose input is the datagram's requests, run like any other connection's.
    fn receive_udp(&mut self) {
        for _ in 0..UDP_DATAGRAMS_PER_TURN {
            if self.udp_ready == 0 {
                return;
            }
            let which = self.udp_ready.trailing_zeros() as usize;
            let Some(socket) = self.udp.get(which) else {
                self.udp_ready = 0;
                return;
            };
            let (len, peer) = match socket.recv_from(&mut self.udp_buf) {
                Ok(received) => received,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // WouldBlock: drained (edge-triggered epoll reports what arrives next).
                    self.udp_ready &= !(1 << which);
                    continue;
                }
            };
            self.engine.counters.bytes_read += len as u64;
            let datagram = &self.udp_buf[..len];
            // memcached serves single-datagram requests and ignores anything else.
            let Some(header) = qs_proto::udp::FrameHeader::parse(datagram) else { continue };
            if !header.is_single_request() || len == qs_proto::udp::HEADER_BYTES {
                continue;
            }
            let payload = datagram[qs_proto::udp::HEADER_BYTES..].to_vec();
            let index = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.generations.push(0);
                self.conns.len() - 1
            });
            self.generations[index] = self.generations[index].wrapping_add(1);
            let end = payload.len();
            // memcached reads each datagram's protocol from its first byte.
            let protocol = match payload[0] {
                qs_proto::binary::REQUEST_MAGIC => Protocol::Binary,
                _ => Protocol::Ascii,
            };
            self.conns[index] = Some(Conn {
                watch: None,
                error: false,
                protocol,
                authenticated: true,
                info: None,
                fd: socket.as_raw_fd(),
                transport: Transport::Udp { peer, request_id: header.request_id, socket: which },
                generation: self.generations[index],
                input: Input { limit: end, buf: payload, start: 0, end, skip: 0, lent: false },
                output: Output::new(self.shared.workers),
                read_ready: false,
                peer_closed: false,
                write_blocked: false,
                stalled: false,
                flash_wait: false,
                closing: false,
                dead: false,
                queued: true,
                waiting: false,
                held: 0,
                dump: None,
                stacked: false,
                eof: false,
                starved: false,
            });
            self.work.push(index);
        }
    }

    /// Sends a UDP connection's replies once every request of its datagram has run and every
    /// reply is in, one message per command's reply (a get's split at its VALUE blocks), each
    /// in numbered datagrams as memcached does; then the connection ends.
    fn finish_udp(&mut self, index: usize) {
        let Some(conn) = self.conns[index].as_mut() else { return };
        let Transport::Udp { peer, request_id, socket } = conn.transport else { return };
        if conn.stalled || conn.waiting || conn.flash_wait || conn.output.pending_total > 0 {
            return;
        }
        if conn.output.held_bytes() > OUTPUT_BYTES_HIGH && conn.input.start < conn.input.end {
            // Processing stopped at the output limit; what is left of the datagram is dropped.
            conn.output.reply_buf().extend_from_slice(UDP_REPLY_TOO_LARGE);
            conn.output.mark(None);
        }
        let output = &conn.output;
        let mut messages = Vec::new();
        let mut start = 0;
        for (end, last_key) in &output.marks {
            messages.extend(qs_proto::udp::Messages::new(&output.out[start..*end], last_key.as_deref()));
            start = *end;
        }
        messages.extend(qs_proto::udp::Messages::new(&output.out[start..], None));
        if let Some(socket) = self.udp.get(socket) {
            for message in messages {
                let Some((count, chunks)) = qs_proto::udp::datagrams(message) else { continue };
                for (sequence, chunk) in chunks.enumerate() {
                    let header = qs_proto::udp::FrameHeader {
                        request_id,
                        sequence: sequence as u16,
                        count,
                        reserved: 0,
                    };
                    self.udp_buf.clear();
                    self.udp_buf.extend_from_slice(&header.to_bytes());
                    self.udp_buf.extend_from_slice(chunk);
                    // A full socket buffer drops the datagram: UDP clients retry.
                    if socket.send_to(&self.udp_buf, peer).is_ok() {
                        self.engine.counters.bytes_written += self.udp_buf.len() as u64;
                    }
                }
            }
            self.udp_buf.resize(DATAGRAM_BYTES_MAX, 0);
        }
        self.close(index);
    }

    /// -Z: closes connections whose handshake has run past its time (a stalled client holds
    /// a socket and a session, nothing more, until then), counting each as a handshake error.
    fn drop_stalled_handshakes(&mut self) {
        let Some(tls) = self.shared.tls.clone() else { return };
        for index in 0..self.conns.len() {
            let overdue = self.conns[index].as_ref().is_some_and(|conn| match &conn.transport {
                Transport::Tcp(crate::session::Stream::Tls(session)) => {
                    session.handshake_overdue(self.engine.now_secs)
                }
                _ => false,
            });
            if overdue {
                tls.handshake_errors.fetch_add(1, Relaxed);
                if let Some(conn) = self.conns[index].as_mut() {
                    conn.error = true;
                    conn.dead = true;
                }
                self.close(index);
            }
        }
    }

    /// `-o idle_timeout`: closes the stream connections that have sent no command for more
    /// than `timeout_secs` while waiting for one (memcached's conn_timeout_thread), once a
    /// second.
    fn kick_idle(&mut self, timeout_secs: u32) {
        let since = self.engine.now_secs.saturating_sub(timeout_secs);
        for index in 0..self.conns.len() {
            let Some(conn) = self.conns[index].as_ref() else { continue };
            let idle = conn.watch.is_none()
                && conn.output.pending_total == 0
                && conn.info.as_ref().is_some_and(|info| info.idle_since(since));
            if idle {
                self.engine.counters.idle_kicks += 1;
                self.executed = true;
                self.close(index);
            }
        }
    }

    /// Without maxconns_fast, after pausing at the limit: a connection that closed between
    /// the count and the pause found nothing to resume, so this resumes (else accepting would
    /// wait for a close that may never come).
    fn release_false_pause(&self) {
        if self.shared.curr_connections.load(Relaxed) < self.shared.config.max_connections as u64 {
            self.shared.connection_closed();
        }
    }

    /// Publishes what the connection buffers hold, when it changed.
    fn publish_buffers(&mut self) {
        let now = self.buffers.figures();
        if now != self.buffers_shown {
            self.buffers_shown = now;
            self.shared.workers_published[self.index].lock().unwrap_or_else(|e| e.into_inner()).buffers = now;
        }
    }

    fn close(&mut self, index: usize) {
        if let Some(mut conn) = self.conns[index].take() {
            self.buffers.release(&mut conn.input, &mut conn.output);
            let Transport::Tcp(stream) = &mut conn.transport else {
                self.free.push(index);
                return;
            };
            if let crate::session::Stream::Tls(session) = stream {
                if !conn.dead {
                    session.close();
                }
            }
            let _ = self.poll.registry().deregister(stream);
            self.shared.registry.remove(stream.fd());
            self.shared.curr_connections.fetch_sub(1, Relaxed);
            if !self.shared.extended.maxconns_fast {
                self.shared.connection_closed();
            }
            if let Some(sink) = conn.watch.take() {
                self.shared.watchers.remove(&sink);
                self.watching.retain(|&watcher| watcher != index);
            }
            if self.shared.watchers.wants(crate::observe::watch::CONNEVENTS) {
                if let Some(info) = conn.info.as_ref() {
                    let (rip, rport, transport) = peer_text(&info.addr);
                    let reason = if conn.error {
                        "error"
                    } else if self.shared.stop.load(Relaxed) {
                        "shutdown"
                    } else {
                        "normal"
                    };
                    self.shared.log(
                        crate::observe::watch::CONNEVENTS,
                        format_args!(
                            "type=conn_close rip={rip} rport={rport} transport={transport} reason={reason} cfd={}",
                            conn.fd
                        ),
                    );
                }
            }
            self.free.push(index);
            if self.shared.config.verbose > 1 {
                eprintln!("worker {}: closed connection {index}", self.index);
            }
        }
    }
}

/// A peer as `watch connevents` names it: address, port and transport.
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
    counters: &mut WorkerCounters,
    buffers: &mut Buffers,
    tls: Option<&crate::session::tls::Context>,
) -> bool {
    let Some(spare) = conn.input.spare(buffers) else {
        // -o read_buf_mem_limit: no read buffer left for it; memcached closes the connection.
        conn.dead = true;
        conn.error = true;
        counters.read_buf_oom += 1;
        return false;
    };
    if spare.is_empty() {
        // A request larger than the buffer may grow: the parser would have refused it, so
        // this is garbage without a line end.
        conn.dead = true;
        conn.error = true;
        counters.conns_dropped += 1;
        return false;
    }
    let room = spare.len();
    let Transport::Tcp(stream) = &mut conn.transport else { return false };
    match stream.read(spare) {
        Ok(0) => {
            // The client sent all it will: answer what it sent (a dump or a long get may
            // still be running), then close.
            conn.read_ready = false;
            conn.eof = true;
            conn.closing = conn.input.start == conn.input.end && conn.dump.is_none();
        }
        Ok(read) => {
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
        Err(_) => {
            conn.read_ready = false;
            conn.dead = true;
        }
    }
    if let (crate::session::Stream::Tls(session), Some(tls)) = (stream, tls) {
        if session.take_handshake_failure() {
            tls.handshake_errors.fetch_add(1, Relaxed);
            conn.error = true;
        }
        if let Some(Some(name)) = session.take_handshake() {
            if let Some(info) = conn.info.as_ref() {
                info.set_tls_peer_cn(name);
            }
        }
    }
    true
}

fn queue(work: &mut Vec<usize>, conn: &mut Conn, index: usize) {
    if !conn.queued {
        conn.queued = true;
        work.push(index);
    }
}

fn queue_flush(flush: &mut Vec<usize>, index: usize) {
    if !flush.contains(&index) {
        flush.push(index);
    }
}

/// The start of `lru_crawler metadump <classes>`: memcached's refusals, or the cursor set to
/// the first chunk.
fn start_dump(
    classes: &[u8],
    stacked: bool,
    dump: &mut Option<crate::session::dump::Cursor>,
    out: &mut Vec<u8>,
    engine: &Engine,
) {
    if !engine.crawler_enabled() {
        out.extend_from_slice(crate::exec::CRAWLER_DISABLED);
    } else if engine.dumping_disabled() {
        out.extend_from_slice(b"ERROR metadump not allowed\r\n");
    } else if stacked {
        out.extend_from_slice(b"ERROR cannot pipeline other commands before metadump\r\n");
    } else {
        match qs_proto::crawler_classes(classes) {
            None => out.extend_from_slice(crate::exec::BAD_CLASS),
            Some(true) => *dump = Some(crate::session::dump::Cursor::default()),
            // A valid list of classes that hold nothing here.
            Some(false) => out.extend_from_slice(qs_proto::response::END),
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
        if owner == me {
            engine.dump_chunk(partition, range, output.reply_buf());
        } else {
            hand.over(
                owner,
                &crate::session::dump::encode_chunk(partition, range),
                OpKind::Reply,
                output,
                engine,
            );
        }
    }
    *dump = None;
    output.reply_buf().extend_from_slice(qs_proto::response::END);
    true
}

/// Hands requests of one connection over to their owners.
struct Hand<'a> {
    outgoing: &'a mut Vec<Option<Batch>>,
    spare: &'a mut Vec<Batch>,
    conn: u32,
    generation: u32,
    fd: i32,
    /// Some owner's batch reached [`BATCH_BYTES_MAX`] this turn.
    full: bool,
}

impl Hand<'_> {
    /// Adds `request` (complete request bytes) to this turn's batch for `owner` and reserves
    /// its reply's place in `output`.
    fn over(&mut self, owner: usize, request: &[u8], kind: OpKind, output: &mut Output, engine: &mut Engine) {
        let id = output.wait_for(owner);
        let batch = self.outgoing[owner].get_or_insert_with(|| self.spare.pop().unwrap_or_default());
        let start = batch.requests.len();
        batch.requests.extend_from_slice(request);
        self.full |= batch.requests.len() >= BATCH_BYTES_MAX;
        let request = (start as u32, request.len() as u32);
        batch.ops.push(Op {
            conn: self.conn,
            generation: self.generation,
            fd: self.fd,
            id,
            kind,
            request,
            response: (0, 0),
            front: None,
        });
        engine.counters.forwarded += 1;
    }
}

/// Parses a handed-over request's bytes (either protocol).
fn parse_handed<'a>(request: &'a [u8], limits: &qs_proto::Limits) -> Parsed<'a> {
    match request.first() {
        Some(&qs_proto::binary::REQUEST_MAGIC) => qs_proto::binary::parse(request, limits),
        _ => qs_proto::parse(request, limits),
    }
}

/// Runs one handed-over request (or dump chunk) and appends its reply to `responses`.
fn run_op(engine: &mut Engine, op: &mut Op, request: &[u8], responses: &mut Vec<u8>) {
    let response_start = responses.len();
    engine.conn_fd = op.fd;
    if let Some((partition, buckets)) = crate::session::dump::decode_chunk(request) {
        engine.dump_chunk(partition, buckets, responses);
        op.response = (response_start as u32, (responses.len() - response_start) as u32);
        return;
    }
    match parse_handed(request, &engine.limits) {
        Parsed::Request { request, .. } => {
            // Every key of a handed-over request is owned here, so nothing is handed on.
            engine.for_other = true;
            engine.execute(&request, responses);
            engine.for_other = false;
            op.front = match request {
                Request::Get { kind: GetKind::Get, keys } if op.kind == OpKind::Reply => {
                    qs_proto::tokens::single_word(keys).and_then(|key| engine.front_tag(key))
                }
                _ => None,
            };
        }
        other => panic!("handed-over request did not parse: {other:?}"),
    }
    match op.kind {
        OpKind::Reply | OpKind::Held => {}
        OpKind::StripEnd => {
            if responses[response_start..].ends_with(qs_proto::response::END) {
                responses.truncate(responses.len() - qs_proto::response::END.len());
            }
        }
        OpKind::Discard => responses.truncate(response_start),
    }
    op.response = (response_start as u32, (responses.len() - response_start) as u32);
    engine.counters.executed_for_others += 1;
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

/// For a storage request whose data block exceeds the item size limit: the key's owner, and
/// the request that drops the old value there when memcached would (a refused set; any ms).
fn too_large(request: &Request<'_>, engine: &Engine) -> Option<(usize, Option<Vec<u8>>)> {
    match request {
        Request::TooLarge { key, mode, .. } => {
            let delete =
                (*mode == qs_proto::StoreMode::Set).then(|| [b"delete ", *key, b" noreply\r\n"].concat());
            Some((engine.owner_of(key), delete))
        }
        Request::Binary(qs_proto::binary::Binary {
            command: qs_proto::binary::Command::TooLarge { key, set },
            ..
        }) => {
            let delete = set.then(|| {
                qs_proto::binary::request_frame(qs_proto::binary::opcode::DELETEQ, 0, 0, &[], key, &[])
            });
            Some((engine.owner_of(key), delete))
        }
        Request::Meta(meta) if meta.too_large(&engine.limits) => {
            let base64: &[u8] = if meta.options.base64() { b" b" } else { b"" };
            let delete = [b"md ", meta.key_token, base64, b" q\r\n"].concat();
            Some((engine.owner_of(meta.key()), Some(delete)))
        }
        _ => None,
    }
}

/// For a UDP reply's message split: a get's last key (its reply is split at VALUE blocks).
fn get_last_key(parsed: &Parsed<'_>) -> Option<Box<[u8]>> {
    match parsed {
        Parsed::Request { request: Request::Get { keys, .. }, .. } => {
            qs_proto::tokens::words(keys).last().map(Box::from)
        }
        _ => None,
    }
}

/// A multi-key get stopped part way (its replies reached the output bound): the keys not yet
/// run become a get line of their own, written over the keys already run, and wait in the read
/// buffer until the client has read enough.
struct Resume {
    /// Where the get's line starts in the unparsed bytes.
    line: usize,
    /// Length of the line's command part without trailing spaces (`get`, `gat <exptime>`).
    prefix: usize,
    /// Where the keys not yet run start in the unparsed bytes.
    rest: usize,
}

impl Resume {
    /// `line` is the get's line within `pending`, `keys` its keys and `rest` the suffix of
    /// them still to run (all subslices of `pending`).
    fn of(pending: &[u8], line: &[u8], keys: &[u8], rest: &[u8]) -> Resume {
        let at = |part: &[u8]| part.as_ptr() as usize - pending.as_ptr() as usize;
        let command = &pending[at(line)..at(keys)];
        let prefix = command.iter().rposition(|&byte| byte != b' ').map_or(0, |last| last + 1);
        Resume { line: at(line), prefix, rest: at(rest) }
    }

    /// Rewrites the line as a get of the remaining keys; returns how many unparsed bytes are
    /// done with (everything before the rewritten line).
    fn apply(&self, input: &mut Input) -> usize {
        // At least one key and its separator were run, so the command part and a space fit
        // before `rest`.
        let start = self.rest - self.prefix - 1;
        debug_assert!(start > self.line);
        let base = input.start;
        input.buf.copy_within(base + self.line..base + self.line + self.prefix, base + start);
        input.buf[base + self.rest - 1] = b' ';
        start
    }
}
