//! A Redis connection's transaction, run where its requests are read, as redis-server 7.0
//! answers it (multi.c): MULTI starts queueing, each request after it is answered `+QUEUED`
//! (or refused at once, for an unknown command or a wrong number of arguments, which makes
//! EXEC answer EXECABORT), and EXEC runs the queue as one step (exec/resp/tx.rs); DISCARD
//! drops it; WATCH records its keys' versions, and EXEC runs nothing when one has changed.
//! EXEC and WATCH wait for the connection's requests still running on other workers, so they
//! see its own writes.

use super::turn::{Flow, Turn};
use super::*;
use crate::session::tx::Tx;
use qs_proto::resp::command::{call, transaction_call, Call, Refusal};
use qs_proto::resp::{reply, Frame};

/// A queued request or a watched key the client memory budget has no room for: redis-server's
/// out-of-memory answer.
const NO_ROOM: &[u8] = reply::OOM;
/// A command redis-server refuses inside MULTI (its `no-multi` flag).
const NOT_IN_MULTI: &[u8] = b"-ERR Command not allowed inside a transaction\r\n";
/// WATCH of a key another worker owns, which only CREW's readers can read here.
const WATCH_SPREAD: &[u8] = b"-ERR WATCH of keys other workers own needs --access crew (or -t 1)\r\n";

impl Turn<'_, '_> {
    /// Inside MULTI: the request is queued, or refused (the transaction then aborts at EXEC).
    /// `None` outside MULTI, and for what runs even inside it (EXEC, DISCARD, MULTI, WATCH,
    /// QUIT, RESET, and framing errors).
    pub(super) fn in_multi(&mut self, parsed: &Parsed<'_>, here: &[u8]) -> Option<Flow> {
        self.session.tx.as_ref().filter(|tx| tx.multi)?;
        let Parsed::Request { request, len } = parsed else { return None };
        let refused = |turn: &mut Self, refusal: Option<&Refusal<'_>>| {
            match refusal {
                Some(refusal) => reply::refusal(refusal, turn.output.reply_buf()),
                // redis-server's `no-multi` commands among those served (SHUTDOWN).
                None => turn.output.reply_buf().extend_from_slice(NOT_IN_MULTI),
            }
            if let Some(tx) = turn.session.tx.as_mut() {
                tx.aborted = true;
            }
            *turn.executed = true;
            Some(Flow::Next(*len))
        };
        match request {
            Request::RespKey(_) => {}
            Request::Resp(frame) => match transaction_call(frame) {
                Some(Call::Unwatch) => {}
                Some(Call::Error(refusal)) => return refused(self, Some(&refusal)),
                // The connection runs these as it would outside MULTI (tx_command).
                Some(_) => return None,
                None => match call(frame, &self.engine.limits) {
                    Call::Quit | Call::Reset => return None,
                    // The requests after it are mapped into its database as they arrive (the
                    // window ends with it); EXEC moves the connection there.
                    Call::Select(db) => {
                        if let Some(tx) = self.session.tx.as_mut() {
                            tx.db = Some(db);
                        }
                    }
                    Call::Error(refusal @ (Refusal::Unknown(_) | Refusal::Arity(_))) => {
                        return refused(self, Some(&refusal));
                    }
                    Call::Shutdown | Call::Error(Refusal::NoMulti(_)) => return refused(self, None),
                    _ => {}
                },
            },
            _ => return None,
        }
        if self.shared.memory.refusing() {
            // Out of memory, nothing more is queued (redis-server's queue could grow without
            // end): refused, as redis-server refuses it.
            self.output.reply_buf().extend_from_slice(reply::OOM);
            return refused_after(self, *len);
        }
        let tx = self.session.tx.as_mut().expect("inside MULTI");
        let queued = here.get(..*len).is_some_and(|bytes| tx.queue(bytes));
        if !queued {
            tx.aborted = true;
        }
        self.output.reply_buf().extend_from_slice(if queued { reply::QUEUED } else { NO_ROOM });
        *self.executed = true;
        Some(Flow::Next(*len))
    }

    /// MULTI, EXEC, DISCARD, WATCH and UNWATCH; `None` for any other request.
    pub(super) fn tx_command(&mut self, frame: &Frame<'_>, len: usize) -> Option<Flow> {
        let call = transaction_call(frame)?;
        let in_multi = self.session.tx.as_ref().is_some_and(|tx| tx.multi);
        let answer: &[u8] = match call {
            Call::Multi if in_multi => reply::MULTI_NESTED,
            Call::Multi => {
                begun(self.session, self.shared).multi = true;
                reply::OK
            }
            Call::Exec => return Some(self.exec(len)),
            Call::Discard if in_multi => {
                // The watched keys go too.
                self.session.tx = None;
                reply::OK
            }
            Call::Discard => reply::DISCARD_WITHOUT_MULTI,
            Call::Error(refusal) => {
                reply::refusal(&refusal, self.output.reply_buf());
                *self.executed = true;
                return Some(Flow::Next(len));
            }
            Call::Watch(_) if in_multi => reply::WATCH_IN_MULTI,
            Call::Watch(_) if self.output.pending_total > 0 => {
                // After the connection's writes still running elsewhere.
                self.session.state.block(Wait::Replies);
                return Some(Flow::Stop);
            }
            Call::Watch(frame) => self.watch(&frame),
            Call::Unwatch => {
                self.session.tx = None;
                reply::OK
            }
            _ => return None,
        };
        self.output.reply_buf().extend_from_slice(answer);
        *self.executed = true;
        Some(Flow::Next(len))
    }

    /// MSET, MSETNX, DEL, UNLINK, RENAME, RENAMENX, COPY and MOVE of keys several workers own: one
    /// step, as EXEC's, once the connection's requests running elsewhere are answered; `None`
    /// for any other request, and for keys this worker owns alone.
    pub(super) fn spread_write(&mut self, frame: &Frame<'_>, here: &[u8], len: usize) -> Option<Flow> {
        const WRITES: [&[u8]; 8] =
            [b"mset", b"msetnx", b"del", b"unlink", b"rename", b"renamenx", b"copy", b"move"];
        let name = frame.arg(0)?;
        if frame.argc() < 3 || !WRITES.iter().any(|write| name.eq_ignore_ascii_case(write)) {
            return None;
        }
        let request = here.get(..len)?;
        let others = self.engine.spread_write_workers(request, self.dialect)?;
        if self.output.pending_total > 0 {
            self.session.state.block(Wait::Replies);
            return Some(Flow::Stop);
        }
        let at = (self.dialect, self.hand.fd);
        self.engine.run_spread_write(request, &others, at, self.output.reply_buf());
        *self.executed = true;
        Some(Flow::Next(len))
    }

    /// EVAL, EVALSHA, EVAL_RO and EVALSHA_RO: the script runs as one step over the partitions
    /// of the keys it declares (exec/resp/eval.rs), once the connection's requests running
    /// elsewhere are answered; `None` for any other request.
    pub(super) fn script_step(&mut self, frame: &Frame<'_>, here: &[u8], len: usize) -> Option<Flow> {
        const EVALS: [&[u8]; 4] = [b"eval", b"evalsha", b"eval_ro", b"evalsha_ro"];
        let name = frame.arg(0)?;
        if !EVALS.iter().any(|eval| name.eq_ignore_ascii_case(eval)) {
            return None;
        }
        let request = here.get(..len)?;
        if self.output.pending_total > 0 {
            self.session.state.block(Wait::Replies);
            return Some(Flow::Stop);
        }
        // Past lua-time-limit, the script lets the worker's other connections in (busy.rs).
        let mut door = super::busy::BusyDoor {
            others: &mut self.others,
            poll: &mut *self.poll,
            net: &mut *self.net,
            buffers: &mut *self.buffers,
            later: &mut *self.later,
            work: self.work,
            flushing: self.flushing,
            shared: self.shared,
            limits: self.engine.limits,
            me: self.me,
        };
        let (engine, out, at) = (&mut *self.engine, self.output.reply_buf(), (self.dialect, self.hand.fd));
        crate::script::door::with_door(&mut door, || engine.run_script(request, at, out));
        *self.executed = true;
        Some(Flow::Next(len))
    }

    /// Out of memory (maxmemory below the smallest cache): a request that may use memory is
    /// refused, as redis-server refuses it; `None` for any other.
    pub(super) fn out_of_memory(&mut self, request: &Request<'_>, len: usize) -> Option<Flow> {
        if !self.dialect.is_resp() || !qs_proto::resp::script::uses_memory(request) {
            return None;
        }
        self.output.reply_buf().extend_from_slice(reply::OOM);
        *self.executed = true;
        Some(Flow::Next(len))
    }

    /// Whether a request of the transaction's queue may use memory.
    fn queue_uses_memory(&self, tx: &Tx) -> bool {
        tx.requests().any(|bytes| match self.dialect.parse(bytes, &self.engine.limits) {
            Parsed::Request { request, .. } => qs_proto::resp::script::uses_memory(&request),
            _ => false,
        })
    }

    /// WATCH of the frame's keys: each one's version now.
    fn watch(&mut self, frame: &Frame<'_>) -> &'static [u8] {
        let keys = frame.args().skip(1);
        if keys.clone().any(|key| !self.engine.reads_here(key)) {
            return WATCH_SPREAD;
        }
        let tx = begun(self.session, self.shared);
        for key in keys {
            // Its writes count from before its version is read: none falls between.
            if !tx.watch(key, || self.engine.version_of(key)) {
                return NO_ROOM;
            }
        }
        reply::OK
    }

    /// EXEC: the queue runs as one step, once the connection's requests running elsewhere are
    /// answered (after another worker's step under way, if one is: shared/lending.rs).
    fn exec(&mut self, len: usize) -> Flow {
        if !self.session.tx.as_ref().is_some_and(|tx| tx.multi) {
            self.output.reply_buf().extend_from_slice(reply::EXEC_WITHOUT_MULTI);
            *self.executed = true;
            return Flow::Next(len);
        }
        if self.output.pending_total > 0 {
            self.session.state.block(Wait::Replies);
            return Flow::Stop;
        }
        let tx = self.session.tx.take().expect("inside MULTI");
        *self.executed = true;
        if tx.aborted {
            self.output.reply_buf().extend_from_slice(reply::EXECABORT);
            return Flow::Next(len);
        }
        if self.shared.memory.refusing() && self.queue_uses_memory(&tx) {
            self.output.reply_buf().extend_from_slice(reply::EXECABORT_OOM);
            return Flow::Next(len);
        }
        self.engine.run_transaction(&tx, (self.dialect, self.hand.fd), self.output.reply_buf());
        let shares = &mut self.engine.shares;
        self.output.adopt(&mut shares.taken, &mut shares.segments);
        Flow::Next(len)
    }
}

/// A request refused while queued (its reply written): EXEC answers EXECABORT.
fn refused_after(turn: &mut Turn<'_, '_>, len: usize) -> Option<Flow> {
    if let Some(tx) = turn.session.tx.as_mut() {
        tx.aborted = true;
    }
    *turn.executed = true;
    Some(Flow::Next(len))
}

/// The connection's transaction, begun now if it has none (MULTI or a first WATCH).
pub(super) fn begun<'s>(session: &'s mut crate::session::Session, shared: &Shared) -> &'s mut Tx {
    session.tx.get_or_insert_with(|| Box::new(Tx::new(shared.client_memory.clone(), shared.watches.clone())))
}
