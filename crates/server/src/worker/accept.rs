//! Accepting connections (the -c limit, maxconns_fast, TLS sessions at accept), closing them,
//! and the timers that close idle connections and stalled TLS handshakes.

use super::*;

impl Worker {
    /// Accepts every connection waiting on `listener`, within the -c limit (a place is
    /// taken before accepting, or with maxconns_fast after, the connection then told
    /// `ERROR Too many open connections` and closed).
    pub(super) fn accept(&mut self, listener: usize) {
        let shared = self.shared.clone();
        let _turn = match self.listeners.get(listener).map(|listening| &listening.socket) {
            // Another worker is accepting from the shared socket: it takes this one too (it
            // accepts until none is left; one arriving later wakes both workers again).
            Some(crate::net::Listener::Unix(_)) => match shared.connections.unix_turn() {
                Some(guard) => Some(guard),
                None => return,
            },
            _ => None,
        };
        let fast = self.shared.extended.maxconns_fast;
        let _reserving = (!fast).then(|| shared.connections.reserving());
        loop {
            let Some(socket) = self.listeners.get(listener).map(|listening| &listening.socket) else {
                return;
            };
            // Without maxconns_fast a place is taken before accepting: at the limit nothing
            // is accepted and clients wait in the backlog until a connection closes.
            if !fast {
                let open = self.shared.connections.take_place();
                if open >= self.shared.config.max_connections as u64 {
                    self.shared.connections.give_place();
                    self.shared.connections.pause();
                    self.release_false_pause();
                    return;
                }
            }
            let (mut stream, peer) = match socket.accept() {
                Ok(accepted) => accepted,
                Err(error) => {
                    if !fast {
                        self.shared.connections.give_place();
                    }
                    if error.kind() != io::ErrorKind::WouldBlock && self.shared.config.verbose > 0 {
                        eprintln!("accept: {error}");
                    }
                    return;
                }
            };
            let open = if fast { self.shared.connections.take_place() } else { 0 };
            if open >= self.shared.config.max_connections as u64 {
                self.shared.connections.give_place();
                self.shared.connections.rejected();
                let _ = stream.write(refusals::TOO_MANY_CONNECTIONS);
                continue;
            }
            self.admit(listener, stream, peer);
        }
    }

    /// Makes an accepted socket (its place under the limit taken) a connection of this worker:
    /// a TLS session around it on a -Z listener, registered, logged, queued to read.
    fn admit(&mut self, listener: usize, mut stream: crate::net::Stream, peer: Addr) {
        let security = self.listeners[listener].security;
        let mutual = security == crate::net::Security::MutualTls;
        if security != crate::net::Security::Plain {
            // -Z: a TLS session around the socket (its handshake runs as it is read).
            let session = match (self.shared.credentials.tls(), stream) {
                (Some(tls), crate::net::Stream::Tcp(socket)) => {
                    tls.accept(socket, self.engine.now.secs(), mutual).ok()
                }
                _ => None,
            };
            let Some(session) = session else {
                // The socket is closed as it drops; its place goes back.
                self.shared.connections.give_place();
                return;
            };
            stream = crate::net::Stream::Tls(Box::new(session));
        }
        self.shared.connections.accepted();
        let index = new_slot(&mut self.conns, &mut self.generations, &mut self.free);
        // On the ring a connection's bytes come from its receive and the ring tells of room to
        // write: epoll does not watch it.
        let on_ring = self.net.is_some() && !matches!(stream, crate::net::Stream::Tls(_));
        let interest = Interest::READABLE | Interest::WRITABLE;
        if !on_ring && self.poll.registry().register(&mut stream, Token(CONN_BASE + index), interest).is_err()
        {
            self.shared.connections.give_place();
            self.free.push(index);
            return;
        }
        if self.shared.config.verbose > 1 {
            eprintln!("worker {}: new connection {index}", self.index);
        }
        self.generations[index] = self.generations[index].wrapping_add(1);
        let fd = stream.fd();
        let local = stream.local_addr(&self.listeners[listener].addr);
        let info = Arc::new(Info::new(registry::Kind::Client, peer, Some(local), self.engine.now.secs()));
        if self.listeners[listener].protocol == crate::config::Protocol::Resp {
            // A Redis client (CLIENT LIST lists it), speaking RESP2 until its HELLO 3.
            info.set_resp(2);
        }
        self.shared.observers.registry.add(fd, info.clone());
        if self.shared.observers.watchers.wants(crate::observe::watch::CONNEVENTS) {
            let (rip, rport, transport) = peer_text(&info.addr);
            self.shared.log(
                crate::observe::watch::CONNEVENTS,
                format_args!("type=conn_new rip={rip} rport={rport} transport={transport} cfd={fd}"),
            );
        }
        let mut conn = Conn::new(
            Transport::Tcp(stream),
            self.generations[index],
            Input::new(match self.listeners[listener].protocol {
                crate::config::Protocol::Resp => self.resp_input_limit,
                _ => self.input_limit,
            }),
            Output::new(self.shared.map.workers()),
            self.listeners[listener].protocol,
        );
        conn.session.phase = crate::session::auth::Phase::at_accept(self.shared.auth_modes());
        conn.session.info = Some(info);
        conn.fd = fd;
        conn.read_ready = !on_ring;
        if on_ring {
            conn.ring = RingIo::Idle;
            if let Some(net) = self.net.as_mut() {
                net.install(index, fd);
            }
        }
        self.conns[index] = Some(conn);
        self.work.push(index);
        if let Some(conn) = self.conns[index].as_mut() {
            conn.queued = true;
        }
    }

    /// Once a second, after connections closed: gives back the slots past the last open
    /// connection and, after many closes, the memory the allocator holds free, so a burst of
    /// connections that came and went leaves the worker's memory as it was.
    pub(super) fn shed_slots(&mut self) {
        let many = self.closed_since_shed >= SHED_AFTER_CLOSES;
        // A burst's last few closes come after the second that saw most of them.
        let spare = self.closed_since_shed > 0 && self.free.len() >= SHED_AFTER_CLOSES;
        // Only between turns with nothing queued: queues name slots.
        if !(many || spare) || !self.work.is_empty() || !self.flush.is_empty() || !self.retry.is_empty() {
            return;
        }
        self.closed_since_shed = 0;
        let end = self.conns.iter().rposition(Option::is_some).map_or(0, |last| last + 1);
        let shrunk = end < self.conns.len();
        if shrunk {
            self.conns.truncate(end);
            self.conns.shrink_to_fit();
            self.free.retain(|&index| index < end);
            self.free.shrink_to_fit();
            self.flush.shrink(end);
        }
        if many || shrunk {
            crate::sys::release_free_memory();
        }
    }

    /// Without maxconns_fast, after pausing at the limit: a connection that closed between
    /// the count and the pause found nothing to resume, so this resumes (else accepting would
    /// wait for a close that may never come).
    pub(super) fn release_false_pause(&self) {
        if self.shared.connections.open() < self.shared.config.max_connections as u64 {
            self.shared.connection_closed();
        }
    }

    /// -Z: closes connections whose handshake has run past its time (a stalled client holds
    /// a socket and a session, nothing more, until then), counting each as a handshake error.
    pub(super) fn drop_stalled_handshakes(&mut self) {
        let Some(tls) = self.shared.credentials.tls().cloned() else { return };
        for index in 0..self.conns.len() {
            let overdue = self.conns[index].as_ref().is_some_and(|conn| match &conn.transport {
                Transport::Tcp(crate::net::Stream::Tls(session)) => {
                    session.handshake_overdue(self.engine.now.secs())
                }
                _ => false,
            });
            if overdue {
                tls.handshake_errors.fetch_add(1, Relaxed);
                if let Some(conn) = self.conns[index].as_mut() {
                    conn.session.state.kill();
                    conn.session.error = true;
                }
                self.close(index);
            }
        }
    }

    /// `-o idle_timeout`: closes the stream connections that have sent no command for more
    /// than `timeout_secs` while waiting for one (memcached's conn_timeout_thread), once a
    /// second.
    pub(super) fn kick_idle(&mut self, timeout_secs: u32) {
        let since = self.engine.now.secs().saturating_sub(timeout_secs);
        for index in 0..self.conns.len() {
            let Some(conn) = self.conns[index].as_ref() else { continue };
            let idle = conn.session.watch.is_none()
                && conn.output.pending_total == 0
                && conn.session.info.as_ref().is_some_and(|info| info.idle_since(since));
            if idle {
                self.engine.counters.idle_kicks += 1;
                self.executed = true;
                self.close(index);
            }
        }
    }

    pub(super) fn close(&mut self, index: usize) {
        if let Some(mut conn) = self.conns[index].take() {
            if let (true, Some(net)) = (conn.ring != RingIo::Off, self.net.as_mut()) {
                // Its receive and any poll end (their last completions find no connection), and
                // with them the ring's hold on the socket.
                let _ = net.cancel_all(conn.fd, index, conn.generation);
                // Now, not with the turn's others: a close outside a turn (an idle kick) would
                // otherwise leave the socket open while the worker sleeps.
                let _ = net.submit();
                // The cancel named the socket by its slot, so it leaves the table only now.
                net.uninstall(index);
            }
            self.buffers.release(&mut conn.input, &mut conn.output);
            let Transport::Tcp(stream) = &mut conn.transport else {
                self.free.push(index);
                return;
            };
            if let crate::net::Stream::Tls(session) = stream {
                if !conn.session.state.is_dead() {
                    session.close();
                }
            }
            let _ = self.poll.registry().deregister(stream);
            self.shared.observers.registry.remove(stream.fd());
            self.shared.connections.give_place();
            if !self.shared.extended.maxconns_fast {
                self.shared.connection_closed();
            }
            if let Some(sink) = conn.session.watch.take() {
                self.shared.observers.watchers.remove(&sink);
                self.watching.retain(|&watcher| watcher != index);
            }
            if self.shared.observers.watchers.wants(crate::observe::watch::CONNEVENTS) {
                if let Some(info) = conn.session.info.as_ref() {
                    let (rip, rport, transport) = peer_text(&info.addr);
                    let reason = if conn.session.error {
                        "error"
                    } else if self.shared.wakeups.stopping() {
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
            self.closed_since_shed += 1;
            if self.shared.config.verbose > 1 {
                eprintln!("worker {}: closed connection {index}", self.index);
            }
        }
    }
}
