//! The worker's side of request direction ([`crate::direct`]): running the batches other
//! workers handed over, placing the replies that came back, pushing this turn's batches.

use super::flash::Held;
use super::*;

impl Worker {
    /// Runs the requests other workers handed over and queues their replies. A request whose
    /// keys are on flash, and those of its connection behind it, are held until the reads are
    /// back (`flash`); their replies go back later.
    pub(super) fn run_handed_over(&mut self) {
        let Worker { rings, engine, flash, shared, unsent_replies, executed, .. } = self;
        for (from, (ring, unsent)) in rings.from.iter_mut().zip(unsent_replies.iter_mut()).enumerate() {
            while let Some(mut batch) = ring.as_mut().and_then(|ring| ring.pop().ok()) {
                *executed = true;
                let Batch { ops, requests, packed, responses } = &mut batch;
                responses.clear();
                // Held ops leave the batch: their replies go back in a later one.
                ops.retain_mut(|op| {
                    let bytes = &requests[op.bytes.0 as usize..][..op.bytes.1 as usize];
                    // Read once, for the flash probe and the run alike (a command, not at all).
                    let mut meta = None;
                    let handed = op.task.decode((bytes, packed), &engine.limits, &mut meta);
                    if engine.flash_on() && flash.must_hold(from, op, &handed, engine) {
                        flash.hold(from, Held::of(*op, bytes, packed), engine, shared);
                        return false;
                    }
                    run_op(engine, op, bytes, &handed, responses);
                    true
                });
                unsent.push_back(batch);
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
                        // Only a get of one key carries a tag: its bytes are the key.
                        let key = &batch.requests[op.bytes.0 as usize..][..op.bytes.1 as usize];
                        self.engine.front_fill(key, &batch.responses[start..start + len], tag);
                    }
                    let placed = conn.output.fill(op.id, &batch.responses[start..start + len]);
                    debug_assert!(placed, "a reply for a request that was not waiting");
                    queue(&mut self.work, conn, index);
                }
                self.inflight[from] -= batch.requests.len();
                if self.spare.len() < SPARE_BATCHES_MAX {
                    batch.ops.clear();
                    batch.requests.clear();
                    batch.packed.clear();
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
