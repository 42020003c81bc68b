//! One send per connection per loop turn: each connection's ready output written, finished
//! connections closed, back-pressured ones resumed.

use super::*;

impl Worker {
    /// Writes every connection's ready output with one send each; closes finished ones.
    pub(super) fn write_all(&mut self) {
        let mut on_ring = std::mem::take(&mut self.ring.sends);
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
            if conn.session.watch.is_some() {
                // New lines for a watcher: try the socket even if it last refused (epoll
                // reports a UNIX socket writable only once it is three quarters empty), so
                // its buffer holds what the socket can take, as memcached's logger does.
                conn.write_blocked = false;
            }
            let waiting = conn.output.pending_total > 0
                && conn.held < HOLD_FLUSHES_MAX
                && !conn.session.state.is_closing();
            conn.held = if waiting { conn.held + 1 } else { 0 };
            // A refused value still arriving (skipped as it comes): as memcached, the answers go
            // once all of it is read. A client that stops writing the value at the first reply
            // would otherwise leave the rest to be taken as its next requests.
            let hold = waiting || (conn.input.skip > 0 && !conn.session.state.is_ending());
            if conn.ring != RingIo::Off {
                if let Some(sink) = conn.session.watch.as_ref().filter(|_| !conn.output.has_unsent()) {
                    let moved = sink.take(conn.output.reply_buf());
                    self.shared.observers.watchers.sent.fetch_add(moved as u64, Relaxed);
                }
                let send =
                    !hold && !conn.session.state.is_dead() && !conn.write_blocked && conn.output.has_unsent();
                on_ring.push((index, send));
                continue;
            }
            while !hold && !conn.session.state.is_dead() && !conn.write_blocked {
                if !conn.output.has_unsent() {
                    // TLS: records rustls still holds go out too.
                    match stream.flush() {
                        Ok(()) => {}
                        Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                            conn.write_blocked = true;
                            break;
                        }
                        Err(_) => {
                            conn.session.state.kill();
                            break;
                        }
                    }
                    // A watcher's lines move over once what it was sent before is gone.
                    let Some(sink) = conn.session.watch.as_ref() else { break };
                    let moved = sink.take(conn.output.reply_buf());
                    if moved == 0 {
                        break;
                    }
                    self.shared.observers.watchers.sent.fetch_add(moved as u64, Relaxed);
                }
                let sent = match conn.output.unsent_in_buffer() {
                    Some(bytes) => stream.write(bytes),
                    None => {
                        let mut slices = [io::IoSlice::new(&[]); SEND_SLICES_MAX];
                        let count = conn.output.unsent_slices(&self.engine, &mut slices);
                        stream.write_vectored(&slices[..count])
                    }
                };
                match sent {
                    Ok(written) => {
                        self.engine.counters.bytes_written += written as u64;
                        conn.output.advance(written);
                    }
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => conn.write_blocked = true,
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => conn.session.state.kill(),
                }
            }
            self.after_write(index);
        }
        // The ring's connections: every send in one system call, then each as above.
        let mut sending = std::mem::take(&mut self.ring.sending);
        sending.clear();
        sending.extend(on_ring.iter().filter(|(_, send)| *send).map(|&(index, _)| index));
        while !sending.is_empty() {
            self.send_ring(&sending);
            // A watcher whose lines all left takes the ones logged meanwhile, as the epoll
            // path does until its socket is full; output sent in pieces (a shared value after
            // the buffer) goes on with its next one.
            sending.retain(|&index| self.watcher_refilled(index) || self.more_to_send(index));
        }
        for (index, _) in on_ring.drain(..) {
            self.after_write(index);
            self.sync_receive(index);
        }
        self.ring.sends = on_ring;
        self.ring.sending = sending;
        // Connections queued by the flush run next turn (poll returns at once).
    }

    /// Whether a ring connection whose socket took all it was offered has more ready to send.
    fn more_to_send(&self, index: usize) -> bool {
        let Some(conn) = self.conns[index].as_ref() else { return false };
        conn.session.watch.is_none()
            && !conn.write_blocked
            && !conn.session.state.is_dead()
            && conn.output.has_unsent()
            && conn.input.skip == 0
    }

    /// For a ring watcher whose output all left: moves the lines logged since; whether any.
    fn watcher_refilled(&mut self, index: usize) -> bool {
        let Some(conn) = self.conns[index].as_mut() else { return false };
        let Some(sink) = conn.session.watch.as_ref() else { return false };
        if conn.write_blocked || conn.session.state.is_dead() || conn.output.has_unsent() {
            return false;
        }
        let moved = sink.take(conn.output.reply_buf());
        self.shared.observers.watchers.sent.fetch_add(moved as u64, Relaxed);
        moved > 0
    }

    /// After a connection's write: closes it when finished (or dead), else resumes its reads
    /// once its output has drained below the bound.
    fn after_write(&mut self, index: usize) {
        let Some(conn) = self.conns[index].as_mut() else { return };
        conn.output.lend_back(&mut self.buffers, &mut self.engine.shares.segments);
        self.buffers.settle(&mut conn.output);
        let finished = conn.session.state.is_closing()
            && conn.output.held_bytes() == 0
            && conn.output.pending_total == 0
            && !conn.write_blocked;
        if conn.session.state.is_dead() || finished {
            self.close(index);
        } else if !conn.write_blocked
            && conn.output.held_bytes() <= OUTPUT_BYTES_HIGH
            && !conn.session.state.blocked(Wait::Replies)
        {
            // Output drained below the limit: resume reading if it had stopped.
            // Unparsed bytes that form no request yet wait for the socket (no spinning).
            if conn.read_ready || (conn.input.start < conn.input.end && !conn.session.starved) {
                queue(&mut self.work, conn, index);
            }
        }
    }

    /// Once a second while the client memory budget is spent (session::budget): closes the
    /// connections whose clients have read none of their replies since the last look (their
    /// sockets refuse more), holding the most first, until the budget has room again. A
    /// client that reads, however slowly, is not closed.
    pub(super) fn shed_stalled_readers(&mut self) {
        if !self.buffers.budget().spent() {
            for conn in self.conns.iter_mut().flatten() {
                conn.sent_seen = conn.output.sent_total;
            }
            return;
        }
        let mut stalled: Vec<(usize, usize)> = Vec::new();
        for (index, conn) in self.conns.iter_mut().enumerate() {
            let Some(conn) = conn else { continue };
            let held = conn.output.held_bytes();
            let progress = conn.output.sent_total != conn.sent_seen;
            conn.sent_seen = conn.output.sent_total;
            if conn.write_blocked && !progress && held > crate::session::budget::OUTPUT_FREE_BYTES {
                stalled.push((held, index));
            }
        }
        stalled.sort_unstable_by(|a, b| b.cmp(a));
        for (_, index) in stalled {
            if !self.buffers.budget().spent() {
                break;
            }
            self.engine.counters.response_obj_oom += 1;
            self.executed = true;
            self.close(index);
        }
    }

    /// Publishes what the connection buffers hold, when it changed.
    pub(super) fn publish_buffers(&mut self) {
        let now = self.buffers.figures();
        if now != self.buffers_shown {
            self.buffers_shown = now;
            self.shared.published.worker(self.index).buffers = now;
        }
    }
}
