//! Where a RESP frame runs, and the Redis protocol's writes of several keys (DEL and UNLINK of
//! several, MSET, MSETNX) and FLUSHALL.
//!
//! A write of several keys runs where it arrives when this worker owns every key. Otherwise it
//! goes to every worker ([`Reach::Everywhere`]), each writing the keys it owns, as flush_all
//! does; the worker the client sent it to answers. DEL's count is read there, through CREW's
//! readers, before any worker deletes (the other workers take their part after this turn), so
//! it counts the keys as they stood; without CREW a key of another worker cannot be read there,
//! and the write is refused. MSETNX must see every key before it stores any: it runs only when
//! one worker owns all its keys, and is refused otherwise.

use super::*;
use qs_proto::command::{self as cmd, Answer, RespReply};
use qs_proto::resp::command::{call, Call};
use qs_proto::resp::owned::Step;
use qs_proto::resp::{reply, Frame};

/// The refusal of a write of several keys that this server cannot make at once.
const SPREAD: &[u8] =
    b"-ERR keys of other workers are written together only with --access crew (or one worker: -t 1)\r\n";
/// MSETNX of keys that more than one worker owns.
const MSETNX_SPREAD: &[u8] =
    b"-ERR MSETNX of keys owned by more than one worker is not served (run with -t 1)\r\n";

impl Engine {
    /// Where a RESP frame runs ([`Engine::reach`]).
    pub(in crate::exec) fn resp_reach<'a>(&self, frame: &Frame<'a>) -> Reach<'a> {
        match call(frame, &self.limits) {
            // Reads of several keys: after the connection's replies pending elsewhere (CREW
            // reads the keys here).
            Call::Mget(_)
            | Call::ExistsMany(_)
            | Call::DbSize
            | Call::Info(_)
            | Call::Keys(_)
            | Call::Scan(_)
            | Call::RandomKey => Reach::AfterPending,
            // -F: refused where it arrives.
            Call::Flush { .. } if self.shared.config.disable_flush_all => Reach::Here,
            Call::Flush { .. } => Reach::Everywhere,
            // maxmemory: each worker resizes its own partitions.
            Call::ConfigSet(_) => Reach::Everywhere,
            // Each worker writes the watched keys it holds.
            Call::SwapDb(..) => Reach::Everywhere,
            // SINTER and its kin over keys of several workers: at the first key's owner (the
            // destination's, for the STORE forms), reading the others through CREW's readers
            // once the connection's requests pending elsewhere are answered; without CREW,
            // refused where it arrives.
            Call::Owned(qs_proto::resp::owned::Owned { key, step: Step::Collection(command) })
                if command.many_keys() && self.one_owner(command.keys()).is_none() =>
            {
                if self.crew {
                    Reach::KeyAfterPending(key)
                } else {
                    Reach::Here
                }
            }
            Call::Owned(owned) => match owned.other_key() {
                // Both keys' owner runs it. Else a COPY runs at its target's owner, reading
                // its source through a CREW reader once the connection's requests pending
                // elsewhere are answered (so it sees the connection's own writes); anything
                // else is refused where it arrives.
                Some(to) if self.one_owner([owned.key, to].into_iter()).is_none() => match owned.step {
                    Step::Copy { .. } if self.crew => Reach::KeyAfterPending(to),
                    _ => Reach::Here,
                },
                _ => Reach::Key { key: owned.key, read_only: owned.read_only() },
            },
            Call::DelMany(frame) => self.spread_reach(frame.args().skip(1)),
            Call::Mset { frame, nx: false } => self.spread_reach(frame.args().skip(1).step_by(2)),
            Call::Mset { frame, nx: true } => match self.one_owner(frame.args().skip(1).step_by(2)) {
                // The first key's owner owns them all: it runs there.
                Some(_) => Reach::Key { key: frame.arg(1).unwrap_or_default(), read_only: false },
                None => Reach::AfterPending,
            },
            _ => Reach::Here,
        }
    }

    /// A write of `keys`: here when this worker owns them all (or they cannot be written
    /// together: refused here), else on every worker.
    fn spread_reach<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) -> Reach<'a> {
        match self.one_owner(keys) {
            Some(owner) if owner == self.worker => Reach::Here,
            _ if self.crew => Reach::Everywhere,
            _ => Reach::AfterPending,
        }
    }

    /// The worker owning every key of `keys`, if one does (keys too long for the store are
    /// refused wherever they run).
    fn one_owner<'a>(&self, mut keys: impl Iterator<Item = &'a [u8]>) -> Option<usize> {
        let owner_of = |key: &[u8]| self.owner(self.locate(key).1);
        let first = owner_of(keys.next()?);
        keys.all(|key| owner_of(key) == first).then_some(first)
    }

    /// This worker's part of a RESP frame routed to every worker, for the connection `fd`
    /// (another worker's).
    pub(in crate::exec) fn resp_everywhere(&mut self, frame: &Frame<'_>, fd: i32) {
        match call(frame, &self.limits) {
            Call::Flush { db } => self.flush_db(db, fd, false),
            Call::DelMany(frame) => {
                self.delete_owned(frame.args().skip(1), fd);
            }
            Call::Mset { frame, nx: false } => self.mset_owned(&frame, fd),
            Call::ConfigSet(frame) => {
                let _ = self.config_set(&frame, false);
            }
            Call::SwapDb(a, b) => self.swap_dbs((a, b), false),
            _ => debug_assert!(false, "not a frame for every worker: {frame:?}"),
        }
    }

    /// FLUSHALL and FLUSHDB here: every item goes now, and its memory with it, so DBSIZE
    /// counts 0 at once (memcached's flush_all leaves its items to be found flushed).
    pub(super) fn flush_now(&mut self, asked_here: bool) {
        self.flush_local(0, asked_here);
        for partition in self.partitions.iter_mut().flatten() {
            partition.drop_flushed();
        }
    }

    /// DEL or UNLINK of several keys: how many of them went (a key named twice counts once).
    pub(super) fn del_many(&mut self, frame: &Frame<'_>, fd: i32, out: &mut Vec<u8>) {
        let keys = frame.args().skip(1);
        let spread = keys
            .clone()
            .any(|key| key.len() <= qs_proto::RESP_KEY_BYTES_MAX && !self.owns(self.locate(key).1));
        if spread && !self.crew {
            return out.extend_from_slice(SPREAD);
        }
        // Other workers' keys, as they stand before those workers delete them.
        // A set, not a list: a DEL of a million keys is a million lookups, not 10^12.
        let mut others: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
        let mut gone = 0;
        for key in keys.clone() {
            if key.is_empty() || key.len() > qs_proto::RESP_KEY_BYTES_MAX {
                continue;
            }
            let located = self.key(key, None);
            if !self.owns(located.partition) && others.insert(key) {
                gone += i64::from(matches!(self.read_unchanged(located), Outcome::Hit(_)));
            }
        }
        gone += self.delete_owned(keys, fd);
        reply::integer(gone, out);
    }

    /// Deletes the keys of `keys` this worker owns; how many went.
    pub(super) fn delete_owned<'a>(&mut self, keys: impl Iterator<Item = &'a [u8]>, fd: i32) -> i64 {
        let mut gone = 0;
        for key in keys {
            if key.is_empty() || key.len() > qs_proto::RESP_KEY_BYTES_MAX {
                continue;
            }
            let key = self.key(key, None);
            if self.owns(key.partition) {
                let answer = Answer::Resp(RespReply::Deleted);
                gone += i64::from(
                    self.delete_command(key, &cmd::Delete::default(), (answer, fd)) == Outcome::Deleted,
                );
            }
        }
        gone
    }

    /// MSET: `+OK` once this worker's keys are stored (the others' are stored by their
    /// owners before the connection's next request runs).
    pub(super) fn mset(&mut self, frame: &Frame<'_>, fd: i32, out: &mut Vec<u8>) {
        let spread = frame
            .args()
            .skip(1)
            .step_by(2)
            .any(|key| key.len() <= qs_proto::RESP_KEY_BYTES_MAX && !self.owns(self.locate(key).1));
        if spread && !self.crew {
            return out.extend_from_slice(SPREAD);
        }
        if let Some(refusal) = self.mset_refusal(frame) {
            return out.extend_from_slice(refusal);
        }
        self.mset_owned(frame, fd);
        out.extend_from_slice(reply::OK);
    }

    /// MSETNX (one worker owns every key: routing made sure, or it is refused): `:1` when no
    /// key was there and all are stored, `:0` when one was and none is.
    pub(super) fn msetnx(&mut self, frame: &Frame<'_>, fd: i32, out: &mut Vec<u8>) {
        let keys = frame.args().skip(1).step_by(2);
        // Routed to the one owner of every key (or run in a step holding their partitions).
        if !keys.clone().all(|key| self.owns(self.locate(key).1)) {
            return out.extend_from_slice(MSETNX_SPREAD);
        }
        if let Some(refusal) = self.mset_refusal(frame) {
            return out.extend_from_slice(refusal);
        }
        for key in keys {
            if matches!(self.read_unchanged(self.key(key, None)), Outcome::Hit(_)) {
                return reply::integer(0, out);
            }
        }
        self.mset_owned(frame, fd);
        reply::integer(1, out);
    }

    /// Why none of MSET's pairs is stored: a key the store cannot hold or a value over the
    /// item size limit (redis-server has neither limit).
    fn mset_refusal(&self, frame: &Frame<'_>) -> Option<&'static [u8]> {
        let mut pairs = frame.args().skip(1);
        while let (Some(key), Some(value)) = (pairs.next(), pairs.next()) {
            if key.is_empty() || key.len() > qs_proto::RESP_KEY_BYTES_MAX {
                return Some(reply::BAD_KEY);
            }
            if value.len() > self.limits.item_bytes_max {
                return Some(reply::TOO_LARGE);
            }
        }
        None
    }

    /// Stores the pairs of an MSET frame whose keys this worker owns.
    fn mset_owned(&mut self, frame: &Frame<'_>, fd: i32) {
        let mut pairs = frame.args().skip(1);
        while let (Some(key), Some(value)) = (pairs.next(), pairs.next()) {
            if key.is_empty() || key.len() > qs_proto::RESP_KEY_BYTES_MAX {
                continue;
            }
            let key = self.key(key, None);
            if self.owns(key.partition) {
                self.store_value(key, (value, 0), (qs_store::StoreMode::Set, fd), 0);
            }
        }
    }
}
