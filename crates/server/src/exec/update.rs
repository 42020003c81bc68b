//! Deletes and counters for every dialect, each rule written once: a delete (with meta's
//! invalidation and emptying), and incr/decr with memcached's creation of a missing counter.
//! The executor (run.rs) calls these and has the command's codec word the reply.

use super::*;
use qs_proto::command::{self as cmd, Answer, Created};

impl Engine {
    /// incr/decr of `key` for every dialect: its counter moved by `delta` (only if its CAS
    /// matches `cas`, a client's; 0: unconditionally), or, on a miss, created with `create`'s
    /// initial value and expiry when given (as an add, as memcached does).
    pub(super) fn arith(
        &mut self,
        key: Key<'_>,
        (delta, decrement): (u64, bool),
        cas: u64,
        create: Option<(u64, Expiry)>,
        fd: i32,
    ) -> (Outcome, Created) {
        let cas = if cas == 0 { 0 } else { self.cas_expected(key, cas) };
        self.log_lookup(&key, fd);
        let outcome = self.run(key, PartitionCommand::Arith { delta, decrement, cas }, &mut Vec::new());
        let (Outcome::NotFound, Some((initial, expiry))) = (outcome, create) else {
            return (outcome, Created::No);
        };
        let mut digits = itoa::Buffer::new();
        let value = digits.format(initial).as_bytes();
        let store = PartitionCommand::Store { mode: qs_store::StoreMode::Add, value, flags: 0, expiry };
        match self.run(key, store, &mut Vec::new()) {
            Outcome::Stored { cas } => (Outcome::Counter { value: initial, cas, expiry }, Created::Yes),
            Outcome::OutOfMemory => (Outcome::OutOfMemory, Created::NoMemory),
            _ => (Outcome::NotStored, Created::No),
        }
    }

    /// A delete of `key` for every dialect, compared with `cas` (the store's: 0 for none):
    /// shown to `watch fetchers` as a lookup, and, when `logged_as` names the command (text
    /// `delete`, meta `md`; memcached logs no binary delete), to `watch deletions`.
    pub(super) fn delete(
        &mut self,
        key: Key<'_>,
        cas: u64,
        (logged_as, fd): (Option<&'static str>, i32),
    ) -> Outcome {
        self.log_lookup(&key, fd);
        let size = if logged_as.is_some() { self.peek_for_deletion(&key) } else { None };
        let outcome = self.run(key, PartitionCommand::Delete { cas }, &mut Vec::new());
        if let (Outcome::Deleted, Some(command)) = (outcome, logged_as) {
            self.log_deleted(&key, size, command);
        }
        outcome
    }

    /// A delete of any dialect: shown to `stats detail` where memcached shows it, compared
    /// with the client's CAS (meta's C0 matches nothing), or meta's I (mark stale) and x
    /// (drop the value, keep the item).
    pub(super) fn delete_command(
        &mut self,
        key: Key<'_>,
        delete: &cmd::Delete,
        (answer, fd): (Answer<'_>, i32),
    ) -> Outcome {
        if answer.records_detail() {
            self.shared.observers.detail.record_delete(&key);
        }
        // To the store a CAS of 0 means "unconditional", so C0 becomes one no item can have.
        let cas = match delete.cas {
            None => 0,
            Some(0) => u64::MAX,
            Some(cas) => self.cas_expected(key, cas),
        };
        // An invalidation leaves the item: no deletion to log.
        let logged_as = if delete.invalidate { None } else { answer.deletion_logged_as() };
        if delete.keep_item {
            return self.empty(key, delete, cas, (logged_as, fd));
        }
        if !delete.invalidate {
            return self.delete(key, cas, (logged_as, fd));
        }
        self.log_lookup(&key, fd);
        let outcome = self.run(key, PartitionCommand::Invalidate { cas }, &mut Vec::new());
        if let (Outcome::Deleted, Some(exptime)) = (outcome, delete.exptime) {
            let expiry = self.exptime(exptime);
            self.run(key, PartitionCommand::SetExpiry { expiry }, &mut Vec::new());
        }
        if let (Outcome::Deleted, Some(chosen)) = (outcome, delete.cas_in) {
            self.choose_cas(key, None, chosen);
        }
        outcome
    }

    /// md x (memcached 1.6.27): the value goes and the item stays, with the request's flags
    /// and TTL (none given: 0 and none), and the CAS the client saw (memcached keeps the
    /// item's) unless E names one; with I it is then marked stale.
    fn empty(
        &mut self,
        key: Key<'_>,
        delete: &cmd::Delete,
        cas: u64,
        logged: (Option<&'static str>, i32),
    ) -> Outcome {
        let seen = self.look(key).map_or(0, |(_, cas)| self.cas_out(cas));
        let outcome = self.delete(key, cas, logged);
        if outcome != Outcome::Deleted {
            return outcome;
        }
        let expiry = self.exptime(delete.exptime.unwrap_or(0));
        let command =
            PartitionCommand::Store { mode: StoreMode::Add, value: b"", flags: delete.flags, expiry };
        if let Outcome::Stored { cas: own } = self.run(key, command, &mut Vec::new()) {
            self.choose_cas(key, Some(own), delete.cas_in.unwrap_or(seen));
        }
        if delete.invalidate {
            self.run(key, PartitionCommand::Invalidate { cas: 0 }, &mut Vec::new());
            if let Some(chosen) = delete.cas_in {
                self.choose_cas(key, None, chosen);
            }
        }
        outcome
    }
}
