//! The writes every dialect shares, each rule written once: a delete, and incr/decr with
//! memcached's creation of a missing counter. The dialects' executors (mod.rs for text,
//! meta.rs, binary.rs) parse nothing here and reply in their own words from the outcome.

use super::*;

/// What [`Engine::arith`] did about a missing counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Created {
    /// Nothing: the counter existed, or none was to be created.
    No,
    /// It was created with the initial value.
    Yes,
    /// It was to be created, and no memory was to be had.
    NoMemory,
}

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
    ) -> (Outcome, Created) {
        let cas = if cas == 0 { 0 } else { self.cas_expected(key, cas) };
        self.log_lookup(&key);
        let outcome = self.run(key, Command::Arith { delta, decrement, cas }, &mut Vec::new());
        let (Outcome::NotFound, Some((initial, expiry))) = (outcome, create) else {
            return (outcome, Created::No);
        };
        let mut digits = itoa::Buffer::new();
        let value = digits.format(initial).as_bytes();
        let store = Command::Store { mode: qs_store::StoreMode::Add, value, flags: 0, expiry };
        match self.run(key, store, &mut Vec::new()) {
            Outcome::Stored { cas } => (Outcome::Counter { value: initial, cas, expiry }, Created::Yes),
            Outcome::OutOfMemory => (Outcome::OutOfMemory, Created::NoMemory),
            _ => (Outcome::NotStored, Created::No),
        }
    }

    /// A delete of `key` for every dialect, compared with `cas` (the store's: 0 for none):
    /// shown to `watch fetchers` as a lookup, and, when `logged_as` names the command (text
    /// `delete`, meta `md`; memcached logs no binary delete), to `watch deletions`.
    pub(super) fn delete(&mut self, key: Key<'_>, cas: u64, logged_as: Option<&'static str>) -> Outcome {
        self.log_lookup(&key);
        let size = if logged_as.is_some() { self.peek_for_deletion(&key) } else { None };
        let outcome = self.run(key, Command::Delete { cas }, &mut Vec::new());
        if let (Outcome::Deleted, Some(command)) = (outcome, logged_as) {
            self.log_deleted(&key, size, command);
        }
        outcome
    }
}
