//! The worker's side of request direction ([`crate::direct`]): running the batches other
//! workers handed over, placing the replies that came back, pushing this turn's batches.

use super::*;

impl Worker {
    /// Runs the requests other workers handed over and queues their replies. A request whose
    /// keys are on flash, and those of its connection behind it, are held until the reads are
    /// back (`flash`); their replies go back later.
    pub(super) fn run_handed_over(&mut self) {
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
    pub(super) fn place_replies(&mut self) {
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
    pub(super) fn send_outgoing(&mut self) {
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
}
