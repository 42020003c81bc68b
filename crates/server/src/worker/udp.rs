//! memcached's UDP port (-U): each datagram becomes a connection of its own for one turn,
//! its replies framed back into datagrams.

use super::*;

impl Worker {
    /// Takes waiting datagrams (a bounded number per turn): each valid one becomes a connection
    /// of its own whose input is the datagram's requests, run like any other connection's.
    pub(super) fn receive_udp(&mut self) {
        for _ in 0..UDP_DATAGRAMS_PER_TURN {
            if self.udp.ready == 0 {
                return;
            }
            let which = self.udp.ready.trailing_zeros() as usize;
            let Some(socket) = self.udp.sockets.get(which) else {
                self.udp.ready = 0;
                return;
            };
            let (len, peer) = match socket.recv_from(&mut self.udp.buf) {
                Ok(received) => received,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // WouldBlock: drained (edge-triggered epoll reports what arrives next).
                    self.udp.ready &= !(1 << which);
                    continue;
                }
            };
            self.engine.counters.bytes_read += len as u64;
            let datagram = &self.udp.buf[..len];
            // memcached serves single-datagram requests and ignores anything else.
            let Some(header) = qs_proto::udp::FrameHeader::parse(datagram) else { continue };
            if !header.is_single_request() || len == qs_proto::udp::HEADER_BYTES {
                continue;
            }
            let payload = datagram[qs_proto::udp::HEADER_BYTES..].to_vec();
            let index = new_slot(&mut self.conns, &mut self.generations, &mut self.free);
            self.generations[index] = self.generations[index].wrapping_add(1);
            let end = payload.len();
            // memcached reads each datagram's protocol from its first byte.
            let protocol = Dialect::sniff(payload[0]);
            let mut conn = Conn::new(
                Transport::Udp { peer, request_id: header.request_id, socket: which },
                self.generations[index],
                Input {
                    limit: end,
                    buf: payload,
                    start: 0,
                    end,
                    skip: 0,
                    lent: false,
                    charged: 0,
                    arriving: None,
                    since: self.engine.turn_ticks,
                    ..Input::new(end)
                },
                Output::new(self.shared.map.workers()),
                protocol,
            );
            conn.fd = socket.as_raw_fd();
            conn.queued = true;
            self.conns[index] = Some(conn);
            self.work.push(index);
        }
    }

    /// Sends a UDP connection's replies once every request of its datagram has run and every
    /// reply is in, one message per command's reply (a get's split at its VALUE blocks), each
    /// in numbered datagrams as memcached does; then the connection ends.
    pub(super) fn finish_udp(&mut self, index: usize) {
        let Some(conn) = self.conns[index].as_mut() else { return };
        let Transport::Udp { peer, request_id, socket } = conn.transport else { return };
        if matches!(conn.session.state, State::Blocked(_)) || conn.output.pending_total > 0 {
            return;
        }
        if conn.output.held_bytes() > OUTPUT_BYTES_HIGH && conn.input.start < conn.input.end {
            // Processing stopped at the output limit; what is left of the datagram is dropped.
            conn.output.reply_buf().extend_from_slice(refusals::UDP_REPLY_TOO_LARGE);
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
        if let Some(socket) = self.udp.sockets.get(socket) {
            for message in messages {
                let Some((count, chunks)) = qs_proto::udp::datagrams(message) else { continue };
                for (sequence, chunk) in chunks.enumerate() {
                    let header = qs_proto::udp::FrameHeader {
                        request_id,
                        sequence: sequence as u16,
                        count,
                        reserved: 0,
                    };
                    self.udp.buf.clear();
                    self.udp.buf.extend_from_slice(&header.to_bytes());
                    self.udp.buf.extend_from_slice(chunk);
                    // A full socket buffer drops the datagram: UDP clients retry.
                    if socket.send_to(&self.udp.buf, peer).is_ok() {
                        self.engine.counters.bytes_written += self.udp.buf.len() as u64;
                    }
                }
            }
            self.udp.buf.resize(DATAGRAM_BYTES_MAX, 0);
        }
        self.close(index);
    }
}
