//! The worker's side of request direction ([`crate::direct`]): running the batches other
//! workers handed over, placing the replies that came back, pushing this turn's batches.

use super::flash::Held;
use super::*;

impl Worker {
    /// Runs the requests other workers handed over and queues their replies. A request whose
    /// keys are on flash, and those of its connection behind it, are held until the reads are
    /// back (`flash`); their replies go back later.
    ///
    /// Every batch waiting is popped before any runs. When a request for every worker
    /// (flush_all and its kin) has been handed over since this was last asked (counted before
    /// its push, so popping it shows the count), the rings are looked at once more (its
    /// worker pushed it before any reply, so one that a popped request came after is there
    /// now), the connections that reached this worker before it run
    /// ([`Worker::before_broadcasts`]), and such requests run ahead of the rest: a request
    /// one worker sends after a flush's reply came back from another runs after that flush,
    /// though the two came on different rings.
    pub(super) fn run_handed_over(&mut self) {
        let mut popped = std::mem::take(&mut self.handover.popped);
        self.pop_handed_over(&mut popped);
        let broadcasts = self.shared.wakeups.broadcasts();
        let everywhere_first = !popped.is_empty()
            && (broadcasts != self.handover.broadcasts_seen
                || popped.iter().any(|(_, batch)| batch.everywhere));
        if everywhere_first {
            self.handover.broadcasts_seen = broadcasts;
            self.pop_handed_over(&mut popped);
            self.before_broadcasts();
            for (from, batch) in &mut popped {
                self.run_batch(*from, batch, Pass::Everywhere);
            }
        }
        let pass = if everywhere_first { Pass::Rest } else { Pass::All };
        for (from, mut batch) in popped.drain(..) {
            self.run_batch(from, &mut batch, pass);
            self.handover.unsent_replies[from].push_back(batch);
        }
        self.handover.popped = popped;
    }

    /// Pops every batch the other workers' rings hold, in each ring's order.
    fn pop_handed_over(&mut self, popped: &mut Vec<(usize, Batch)>) {
        for (from, ring) in self.rings.from.iter_mut().enumerate() {
            while let Some(batch) = ring.as_mut().and_then(|ring| ring.pop().ok()) {
                popped.push((from, batch));
            }
        }
    }

    /// Runs the operations of one batch that worker `from` handed over that `pass` names.
    fn run_batch(&mut self, from: usize, batch: &mut Batch, pass: Pass) {
        let Worker { engine, flash, shared, executed, .. } = self;
        *executed = true;
        let Batch { ops, requests, packed, responses, .. } = batch;
        if pass != Pass::Rest {
            responses.clear();
        }
        // Held ops leave the batch: their replies go back in a later one.
        ops.retain_mut(|op| {
            let everywhere = matches!(op.task, Task::Everywhere(_));
            if (pass == Pass::Everywhere && !everywhere) || (pass == Pass::Rest && everywhere) {
                return true;
            }
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
    }

    /// Before the requests for every worker (flush_all and its kin) that other workers
    /// handed over run: the connections that reached this worker before them (reported by
    /// this turn's poll, or waiting to be accepted) run first, as one thread would run them. A client that sent `flush_all` and closed before another client
    /// connected has its flush run before the other's writes, whichever workers the kernel
    /// gave the two connections to. Those resumed by replies this turn wait: the requests
    /// handed over before their replies run first.
    fn before_broadcasts(&mut self) {
        let mut early: Vec<usize> = self.work.drain(..self.work_from_events.min(self.work.len())).collect();
        self.work_from_events = 0;
        let queued = self.work.len();
        for listener in 0..self.listeners.len() {
            self.accept(listener);
        }
        early.extend(self.work.drain(queued..));
        for index in early {
            // One on the io_uring with no receive posted (just accepted): what its client sent
            // is read here, and its receive posted after.
            let on_ring = self.conns[index].as_ref().is_some_and(|conn| conn.ring == RingIo::Idle);
            if let (true, Some(conn)) = (on_ring, self.conns[index].as_mut()) {
                conn.ring = RingIo::Off;
                conn.read_ready = true;
            }
            self.service(index);
            if let (true, Some(conn)) = (on_ring, self.conns[index].as_mut()) {
                conn.ring = RingIo::Idle;
                conn.read_ready = false;
                self.sync_receive(index);
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
                self.handover.inflight[from] -= batch.requests.len();
                if self.handover.spare.len() < SPARE_BATCHES_MAX {
                    batch.ops.clear();
                    batch.requests.clear();
                    batch.packed.clear();
                    batch.everywhere = false;
                    batch.responses.clear();
                    batch.requests.shrink_to(SPARE_BATCH_BYTES);
                    batch.responses.shrink_to(SPARE_BATCH_BYTES);
                    self.handover.spare.push(batch);
                }
            }
        }
    }

    /// Pushes this turn's batches and held replies onto the rings, waking sleeping owners.
    /// Every batch goes before any reply. A request for every worker among them is counted
    /// before its batches are pushed, so a worker that pops one sees the count; and the
    /// replies wait until all of them are pushed (see [`Worker::run_handed_over`]).
    pub(super) fn send_outgoing(&mut self) {
        if self.handover.broadcast {
            self.shared.wakeups.note_broadcast();
        }
        for owner in 0..self.handover.outgoing.len() {
            if let Some(batch) = self.handover.outgoing[owner].take() {
                let ring = self.rings.to[owner].as_mut().expect("no ring to self");
                let bytes = batch.requests.len();
                match ring.push(batch) {
                    Ok(()) => {
                        self.handover.inflight[owner] += bytes;
                        self.engine.counters.forward_batches += 1;
                        self.engine.counters.wakeups += u64::from(self.shared.wake_if_sleeping(owner));
                    }
                    Err(rtrb::PushError::Full(batch)) => self.handover.outgoing[owner] = Some(batch),
                }
            }
        }
        if self.handover.broadcast {
            if self.handover.outgoing.iter().any(Option::is_some) {
                // A ring is full: counted again as its batch goes next turn.
                return;
            }
            self.handover.broadcast = false;
        }
        for owner in 0..self.handover.outgoing.len() {
            while let Some(batch) = self.handover.unsent_replies[owner].pop_front() {
                let ring = self.rings.reply_to[owner].as_mut().expect("no ring to self");
                match ring.push(batch) {
                    Ok(()) => self.engine.counters.wakeups += u64::from(self.shared.wake_if_sleeping(owner)),
                    Err(rtrb::PushError::Full(batch)) => {
                        self.handover.unsent_replies[owner].push_front(batch);
                        break;
                    }
                }
            }
        }
    }
}

/// Which operations of a handed-over batch [`Worker::run_batch`] runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    All,
    /// Only the requests for every worker (run first).
    Everywhere,
    /// All but those.
    Rest,
}
