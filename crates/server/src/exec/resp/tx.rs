//! EXEC: a transaction's queued requests run as one step that no other client sees half of.
//!
//! The step runs here, on the worker whose client sent EXEC. The partitions of every key it
//! names (its requests' and its watched keys') must be held here for it: those other workers
//! own are borrowed from them for the step (shared/lending.rs: each owner hands its partitions
//! over between two of its loop turns and waits), so no other request runs on them meanwhile.
//! The step then marks every partition it holds as in a step (partition/steps.rs), so readers on
//! other threads (CREW's) see each key as it was before the step or after it, never between;
//! it checks the watched keys, runs the requests in order as this worker runs its own, and
//! gives the partitions back. A step that needs only this worker's partitions borrows nothing
//! and costs the single-key path nothing: the owners' loops read one flag a turn.

use super::*;
use crate::codec::Dialect;
use crate::session::tx::Tx;
use qs_proto::resp::command::{call, Call};
use qs_proto::Parsed;

/// Which keys a queued request names, as a step must hold them.
pub(super) enum Names<'a> {
    /// None: it runs anywhere (PING, TIME, CLIENT, ...).
    Nothing,
    /// These keys (as the store has them: a script's declared keys put into its database).
    Keys(Vec<std::borrow::Cow<'a, [u8]>>),
    /// Every partition (FLUSHALL, KEYS, SCAN, RANDOMKEY, CONFIG SET).
    Everything,
}

/// Refused before it runs: keys of several workers with the flash tier (`-o ext_path`), whose
/// reads are the owner's.
const FLASH_SPREAD: &[u8] =
    b"-ERR transactions over keys of several workers are not served with -o ext_path (run with -t 1)\r\n";
/// The server is stopping and an owner has left.
const STOPPING: &[u8] = b"-ERR the server is stopping\r\n";

impl Engine {
    /// This worker's partitions, lent for another worker's step (shared/lending.rs).
    pub fn lend_out(&mut self) -> Vec<(usize, Partition)> {
        let held = self.partitions.iter_mut().enumerate();
        held.filter_map(|(index, partition)| partition.take().map(|partition| (index, partition))).collect()
    }

    /// Takes partitions in: back from a step, or borrowed for one.
    pub fn take_in(&mut self, partitions: Vec<(usize, Partition)>) {
        for (index, partition) in partitions {
            debug_assert!(self.partitions[index].is_none(), "partition {index} held twice");
            self.partitions[index] = Some(partition);
        }
    }

    /// EXEC of `tx` (its queued requests parsed as `dialect` speaks) for the connection `fd`:
    /// the watched keys checked and the requests run as one step, their replies an array
    /// (a null one when a watched key changed).
    pub fn run_transaction(&mut self, tx: &Tx, (dialect, fd): (Dialect, i32), out: &mut Vec<u8>) {
        let others = self.step_workers(tx.requests(), &tx.watched, dialect);
        self.step_over(tx, &others, (dialect, fd, true), out)
    }

    /// The other workers that own keys of `request`, a write of several keys (MSET, MSETNX,
    /// DEL, UNLINK, RENAME, COPY) to run as a step of its own ([`Engine::run_spread_write`]);
    /// `None` when this worker owns them all, or with the flash tier (then routed as before:
    /// exec/resp/keys.rs).
    pub fn spread_write_workers(&self, request: &[u8], dialect: Dialect) -> Option<Vec<usize>> {
        let others = self.step_workers(std::iter::once(request), &[], dialect);
        (!others.is_empty() && !self.flash_on).then_some(others)
    }

    /// Runs `request` as a step over the partitions of `others` (its reply as outside a
    /// transaction).
    pub fn run_spread_write(
        &mut self,
        request: &[u8],
        others: &[usize],
        (dialect, fd): (Dialect, i32),
        out: &mut Vec<u8>,
    ) {
        let tx = Tx::alone(request, self.shared.client_memory.clone(), self.shared.watches.clone());
        self.step_over(&tx, others, (dialect, fd, false), out)
    }

    /// EVAL (or one of its forms) in `request`, as a step over the partitions of the keys it
    /// declares (its reply as outside a transaction).
    /// A script that reaches a key of a partition not held here before it writes is run
    /// again over every worker's partitions (exec/resp/eval.rs's [`Retry`]).
    pub fn run_script(&mut self, request: &[u8], (dialect, fd): (Dialect, i32), out: &mut Vec<u8>) {
        let others = self.step_workers(std::iter::once(request), &[], dialect);
        let start = out.len();
        self.retry = super::Retry::Possible;
        self.run_spread_write(request, &others, (dialect, fd), out);
        if self.retry == super::Retry::Wanted {
            out.truncate(start);
            self.retry = super::Retry::Off;
            let everyone: Vec<usize> = (0..self.shared.map.workers()).filter(|&w| w != self.worker).collect();
            self.run_spread_write(request, &everyone, (dialect, fd), out);
        }
        self.retry = super::Retry::Off;
    }

    /// `tx` as one step, the partitions of `others` borrowed for it; `array`: EXEC's reply.
    fn step_over(
        &mut self,
        tx: &Tx,
        others: &[usize],
        (dialect, fd, array): (Dialect, i32, bool),
        out: &mut Vec<u8>,
    ) {
        if others.is_empty() {
            self.run_step(tx, (dialect, fd, array), out);
            return;
        }
        if self.flash_on {
            out.extend_from_slice(FLASH_SPREAD);
            return;
        }
        let shared = self.shared.clone();
        let me = self.worker;
        let wake = |worker| shared.wakeups.wake(worker);
        let lend_own = || {
            let lent = self.lend_out();
            let back = shared.lending.lend(me, lent);
            self.take_in(back);
        };
        let Some(mut borrowed) = shared.lending.borrow(me, others, wake, lend_own) else {
            out.extend_from_slice(STOPPING);
            return;
        };
        let mut held = Vec::with_capacity(borrowed.lent.len());
        for (worker, partitions) in borrowed.lent.drain(..) {
            held.push((worker, partitions.iter().map(|(index, _)| *index).collect::<Vec<_>>()));
            self.take_in(partitions);
        }
        self.stepping = true;
        self.run_step(tx, (dialect, fd, array), out);
        self.stepping = false;
        // The borrowed partitions' figures as the step left them, for `stats` and DBSIZE
        // asked anywhere (their owners publish again once they run something).
        self.publish();
        for (worker, indices) in held {
            let partitions = indices
                .into_iter()
                .map(|index| (index, self.partitions[index].take().expect("a borrowed partition")))
                .collect();
            borrowed.lent.push((worker, partitions));
        }
    }

    /// The workers other than this one whose partitions a step needs: those of `watched` and
    /// of the keys `requests` name.
    fn step_workers<'r>(
        &self,
        requests: impl Iterator<Item = &'r [u8]>,
        watched: &[crate::session::tx::Watched],
        dialect: Dialect,
    ) -> Vec<usize> {
        let workers = self.shared.map.workers();
        if workers == 1 {
            return Vec::new();
        }
        let mut needed = vec![false; workers];
        let owner_of = |key: &[u8]| self.owner(self.locate(key).1);
        for watched in watched {
            needed[owner_of(&watched.key)] = true;
        }
        for bytes in requests {
            let Parsed::Request { request, .. } = dialect.parse(bytes, &self.limits) else { continue };
            match names(&request, &self.limits, self.db) {
                Names::Nothing => {}
                Names::Keys(keys) => keys.into_iter().for_each(|key| needed[owner_of(&key)] = true),
                Names::Everything => needed.iter_mut().for_each(|worker| *worker = true),
            }
        }
        (0..workers).filter(|&worker| needed[worker] && worker != self.worker).collect()
    }

    /// The step itself, every partition it needs held here.
    fn run_step(&mut self, tx: &Tx, (dialect, fd, array): (Dialect, i32, bool), out: &mut Vec<u8>) {
        let resp3 = dialect == Dialect::Resp3;
        for partition in self.partitions.iter().flatten() {
            partition.begin_step();
        }
        let changed = tx.watched_changed(|key| self.version_of(key));
        if changed {
            out.extend_from_slice(reply::exec_null(resp3));
        } else {
            if array {
                out.push(b'*');
                qs_proto::response::push_u64(out, tx.len() as u64);
                out.extend_from_slice(b"\r\n");
            }
            for bytes in tx.requests() {
                match dialect.parse(bytes, &self.limits) {
                    // What a request asks of its connection afterwards (HELLO's protocol, QUIT)
                    // is not applied inside a transaction.
                    Parsed::Request { request, .. } => drop(self.execute(&request, (None, fd), out)),
                    Parsed::Refused { reply, noreply: false, .. } => out.extend_from_slice(reply.as_bytes()),
                    _ => {}
                }
            }
        }
        for partition in self.partitions.iter().flatten() {
            partition.end_step();
        }
    }

    /// The CAS of `key`'s version now (`None`: absent), as WATCH records it.
    pub fn version_of(&mut self, key: &[u8]) -> Option<u64> {
        if key.is_empty() || key.len() > qs_proto::RESP_KEY_BYTES_MAX {
            return None;
        }
        match self.read_unchanged(self.key(key, None)) {
            Outcome::Hit(hit) => Some(hit.cas),
            _ => None,
        }
    }
}

/// The keys `request` names, for the partitions a step must hold; `db`: the database its
/// connection is in (a script's declared keys arrive as its clients name them).
pub(super) fn names<'a>(request: &Request<'a>, limits: &qs_proto::Limits, db: u8) -> Names<'a> {
    use std::borrow::Cow;
    let frame = match request {
        Request::RespKey(command) => return Names::Keys(vec![Cow::Borrowed(command.key)]),
        Request::Resp(frame) => frame,
        _ => return Names::Nothing,
    };
    let borrowed = |keys: &mut dyn Iterator<Item = &'a [u8]>| Names::Keys(keys.map(Cow::Borrowed).collect());
    match call(frame, limits) {
        Call::Key(command) => Names::Keys(vec![Cow::Borrowed(command.key)]),
        Call::Mget(frame) | Call::ExistsMany(frame) | Call::DelMany(frame) => {
            borrowed(&mut frame.args().skip(1))
        }
        Call::Mset { frame, .. } => borrowed(&mut frame.args().skip(1).step_by(2)),
        Call::Owned(qs_proto::resp::owned::Owned {
            step: qs_proto::resp::owned::Step::Collection(command),
            ..
        }) => borrowed(&mut command.keys()),
        Call::Owned(owned) => borrowed(&mut [Some(owned.key), owned.other_key()].into_iter().flatten()),
        // A script's declared keys (what it reaches beyond them: exec/resp/eval.rs).
        Call::Eval(eval) if db == 0 => borrowed(&mut eval.keys()),
        Call::Eval(eval) => {
            let prefix = qs_proto::resp::db::prefix(db);
            Names::Keys(eval.keys().map(|key| Cow::Owned([prefix, key].concat())).collect())
        }
        Call::Keys(_)
        | Call::Scan(_)
        | Call::RandomKey
        | Call::Flush { .. }
        | Call::ConfigSet(_)
        | Call::SwapDb(..) => Names::Everything,
        _ => Names::Nothing,
    }
}
