//! A worker's stream connections on its io_uring (`-o io_backend=uring`,
//! [`crate::net::ring`]): receives land in the connections' inputs, each connection's
//! receive is posted while it may take input and cancelled while its output holds it back,
//! and a turn's sends leave together.

use super::*;
use crate::net::ring::{recycle, Completion, NetRing, Op, Payload};

impl Worker {
    /// Takes the ring's completions: received bytes go to their connections' inputs (each
    /// buffer given back at once), which are queued to run; ends of input and errors as a
    /// socket read would report them.
    pub(super) fn net_completions(&mut self) {
        let Some(net) = self.net.as_mut() else { return };
        if net.has_completions() {
            // Task work queued since the wait: running it posts its completions.
            let _ = net.run_work();
        }
        let mut done = std::mem::take(&mut self.ring.done);
        // What a script's door left (busy.rs), before what came since.
        done.append(&mut self.later.completions);
        self.later.forget_stalled();
        net.reap(&mut done);
        for completion in done.drain(..) {
            self.net_completion(completion);
        }
        self.ring.done = done;
    }

    /// One completion other than a send's (sends are taken in `write_all`).
    fn net_completion(&mut self, completion: Completion) {
        let Completion { op, slot, generation, result, buffer, more } = completion;
        if op == Op::Writable {
            let conn = self.conns.get_mut(slot).and_then(Option::as_mut);
            if let Some(conn) = conn.filter(|conn| conn.generation == generation) {
                conn.write_blocked = false;
                queue(&mut self.work, conn, slot);
            }
            return;
        }
        if op != Op::Receive {
            return;
        }
        let net = self.net.as_mut().expect("a ring's completion");
        let conn =
            self.conns.get_mut(slot).and_then(Option::as_mut).filter(|conn| conn.generation == generation);
        let Some(conn) = conn else {
            // A closed connection's last receive: its buffer goes back all the same.
            if let Some(id) = buffer {
                net.take(id, 0);
                net.give_back(id);
            }
            return;
        };
        if !more {
            conn.ring = RingIo::Idle;
        }
        if let Some(id) = buffer {
            let bytes = net.take(id, result.max(0) as usize);
            self.engine.counters.bytes_read += bytes.len() as u64;
            let mut rest = bytes;
            let input = &mut conn.input;
            if input.start == input.end {
                input.since = self.engine.turn_ticks;
            }
            if let Some(arriving) =
                input.arriving.as_mut().filter(|_| input.start == input.end && input.skip == 0)
            {
                // A set's value arriving into the log: copied there from the ring's buffer,
                // not through the input.
                rest = &bytes[self.engine.fill_arriving(arriving, bytes)..];
            }
            let appended = rest.is_empty() || input.append(rest, &mut self.buffers);
            net.give_back(id);
            if !appended {
                // -o read_buf_mem_limit: no read buffer left for it; memcached closes it.
                conn.session.state.kill();
                conn.session.error = true;
                self.engine.counters.read_buf_oom += 1;
            }
            queue(&mut self.work, conn, slot);
            return;
        }
        match result {
            0 => {
                // The client sent all it will: answer what it sent, then close.
                conn.session.eof = true;
                if conn.input.start == conn.input.end && conn.session.dump.is_none() {
                    conn.session.state.close();
                }
                queue(&mut self.work, conn, slot);
            }
            // Out of buffers, or cancelled: posted again when the connection wants input.
            _ if result == -libc::ENOBUFS || result == -libc::ECANCELED => queue(&mut self.work, conn, slot),
            // A kernel without the multishot limit: posted again without one.
            _ if result == -libc::EINVAL && net.unlimit() => queue(&mut self.work, conn, slot),
            _ => {
                conn.session.state.kill();
                queue(&mut self.work, conn, slot);
            }
        }
    }

    /// Posts connection `index`'s receive when it wants input, cancels it when it does not
    /// (a connection whose output is held back reads nothing more, as on epoll).
    pub(super) fn sync_receive(&mut self, index: usize) {
        let Some(net) = self.net.as_mut() else { return };
        let Some(conn) = self.conns[index].as_mut() else { return };
        if conn.ring == RingIo::Off {
            return;
        }
        // A receive's last buffer may take up to a buffer more than its limit.
        let overshoot = NetRing::BUFFER_BYTES - 1;
        match (conn.ring, conn.wants_input(overshoot)) {
            (RingIo::Idle, true) => post_receive(net, conn, index),
            (RingIo::Receiving, false) if net.cancel(index, conn.generation).is_ok() => {
                conn.ring = RingIo::Cancelling;
            }
            _ => {}
        }
    }

    /// Sends the ready output of the ring's connections in `sending` with one
    /// `io_uring_enter`; a socket that refuses (full) makes its connection write-blocked until
    /// epoll reports it writable. Receives reaped meanwhile are taken too.
    pub(super) fn send_ring(&mut self, sending: &[usize]) {
        if sending.is_empty() {
            return;
        }
        let Some(net) = self.net.as_mut() else { return };
        let mut done = std::mem::take(&mut self.ring.done);
        // Each connection's ready output: its reply buffer, or (when a shared value or a reply
        // waits behind it) slices gathered one after another in `flat`, a value left in the
        // log read in place.
        let mut flat: Vec<io::IoSlice<'_>> = recycle(std::mem::take(&mut self.ring.slices));
        let mut gathered: Vec<std::ops::Range<usize>> = std::mem::take(&mut self.ring.ranges);
        gathered.clear();
        for &index in sending {
            let Some(conn) = self.conns[index].as_ref() else { continue };
            if conn.output.unsent_in_buffer().is_none() {
                let mut room = [io::IoSlice::new(&[]); SEND_SLICES_MAX];
                let count = conn.output.unsent_slices(&self.engine, &mut room);
                flat.extend_from_slice(&room[..count]);
                gathered.push(flat.len() - count..flat.len());
            }
        }
        let mut ranges = gathered.drain(..);
        // Vectors kept between turns (one grown send by send reallocated several times a turn).
        let mut sends: Vec<(i32, Payload<'_>, usize, u32)> = recycle(std::mem::take(&mut self.ring.payloads));
        sends.extend(sending.iter().filter_map(|&index| {
            let conn = self.conns[index].as_ref()?;
            let payload = match conn.output.unsent_in_buffer() {
                Some(bytes) => Payload::One(bytes),
                // In the order they were gathered.
                None => Payload::Gathered(&flat[ranges.next()?]),
            };
            (!payload.is_empty()).then_some((conn.fd, payload, index, conn.generation))
        }));
        let failed = net.send_all(&sends, &mut done).is_err();
        // What each send offered, by connection slot: less taken means the socket is full.
        let mut offered = std::mem::take(&mut self.ring.offered);
        if offered.len() < self.conns.len() {
            offered.resize(self.conns.len(), 0);
        }
        for (_, payload, index, _) in &sends {
            offered[*index] = payload.len();
        }
        drop(ranges);
        self.ring.ranges = gathered;
        self.ring.payloads = recycle(sends);
        self.ring.slices = recycle(flat);
        for completion in done.drain(..) {
            if completion.op != Op::Send {
                self.net_completion(completion);
                continue;
            }
            let Some(conn) = self.conns.get_mut(completion.slot).and_then(Option::as_mut) else { continue };
            match completion.result {
                written if written > 0 => {
                    self.engine.counters.bytes_written += written as u64;
                    conn.output.advance(written as usize);
                    let offer = offered.get(completion.slot).copied().unwrap_or(0);
                    if (written as usize) < offer {
                        // A short send: the socket is full.
                        conn.write_blocked = true;
                    }
                }
                error if error == -libc::EAGAIN => conn.write_blocked = true,
                error if error == -libc::EINTR => {}
                _ => conn.session.state.kill(),
            }
        }
        for &index in sending {
            // Cleared for the next flush: a completion of no send of this one offers nothing.
            if let Some(offer) = offered.get_mut(index) {
                *offer = 0;
            }
            let Some(conn) = self.conns[index].as_mut() else { continue };
            if conn.write_blocked && !conn.session.state.is_dead() {
                // Told by the ring when the socket has room (epoll does not watch it).
                if let Some(net) = self.net.as_mut() {
                    if net.await_writable(conn.fd, index, conn.generation).is_err() {
                        conn.session.state.kill();
                    }
                }
            }
        }
        if failed {
            for &index in sending {
                if let Some(conn) = self.conns[index].as_mut() {
                    conn.session.state.kill();
                }
            }
        }
        self.ring.done = done;
        self.ring.offered = offered;
    }
}

/// Posts an idle ring connection's receive (for up to its input's room); its state says so
/// once posted.
pub(super) fn post_receive(net: &mut NetRing, conn: &mut Conn, index: usize) {
    let overshoot = NetRing::BUFFER_BYTES - 1;
    if net.receive(conn.fd, index, conn.generation, conn.input_room(overshoot)).is_ok() {
        conn.ring = RingIo::Receiving;
    }
}
