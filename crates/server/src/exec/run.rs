//! The one executor: a command on one key ([`qs_proto::command::Command`]), whatever dialect
//! it came in, run on the key's partition with each of memcached's rules written once (a
//! store's CAS and -C rules, a refused store dropping the old value, meta's N, I, x and E);
//! its reply worded by the command's [`Answer`], the encoders of the dialect that parsed it.
//! Reads are in get.rs, deletes and counters in update.rs.

use super::*;
use qs_proto::command::{self as cmd, Answer, Command as KeyCommand, Created, Op};

impl Engine {
    /// Runs `command` for the connection `fd` here, its key located at `at` when the window
    /// located it.
    #[inline(always)]
    pub fn run_command(
        &mut self,
        command: &KeyCommand<'_>,
        (at, fd): (Option<Located>, i32),
        out: &mut Vec<u8>,
    ) -> Exec {
        let KeyCommand { key, op, answer } = *command;
        // memcached's keys are refused past 250 bytes by their parsers; Redis's go to 64 KiB.
        let longest =
            if let Answer::Resp(_) = answer { qs_proto::RESP_KEY_BYTES_MAX } else { qs_proto::KEY_BYTES_MAX };
        if key.is_empty() || key.len() > longest {
            // Refused before any partition is asked: such a key hashes to a partition that
            // routing did not send it to (it is answered where it arrives).
            answer.bad_key(out);
            return Exec::Done;
        }
        let key = self.key(key, at);
        if let Answer::Resp(_) = answer {
            // INCR's kin and APPEND read the value as a string, and GETEX touches only a
            // string: a collection is not one.
            let string_write = matches!(op, Op::Count { .. } | Op::Arith(_))
                || matches!(op, Op::Store(store) if store.mode == StoreMode::Append)
                || matches!(op, Op::Get(get) if get.touch.is_some());
            if string_write && self.holds_collection(key) {
                out.extend_from_slice(qs_proto::resp::collection::WRONGTYPE);
                return Exec::Done;
            }
        }
        if let (Answer::Meta(_), false) = (answer, matches!(op, Op::TooLarge { .. })) {
            self.counters.meta_cmds += 1;
        }
        match op {
            Op::Get(get) => return self.get(key, &get, answer, fd, out),
            Op::Store(store) => {
                self.store(key, &store, (answer, fd), out);
            }
            Op::TooLarge { drops } => {
                self.refuse_too_large(TooLarge::answering(&answer), &key, drops);
                answer.too_large(out);
            }
            Op::Delete(delete) => {
                let outcome = self.delete_command(key, &delete, (answer, fd));
                answer.delete(&outcome, out);
            }
            Op::Arith(arith) => self.count(key, &arith, (answer, fd), out),
            Op::Count { by } => self.count_signed(key, by, (answer, fd), out),
            Op::Touch { exptime, read } => self.touch(key, (exptime, read), (answer, fd), out),
            Op::Inspect => self.inspect(key, answer, out),
        }
        Exec::Done
    }

    /// memcached's exptime (the text protocol's signed one or the binary protocol's unsigned
    /// one) as an expiry, by this turn's clock.
    pub(super) fn exptime(&self, exptime: i64) -> Expiry {
        Expiry::from_exptime(exptime, self.now)
    }

    /// A store of any dialect: counted, logged, its CAS made the store's (under -C, what
    /// memcached compares then), an append or prepend with meta N creating a missing item, a
    /// refusal for size or memory dropping the old value where memcached drops it; for the
    /// connection `fd` (`watch` lines).
    pub(super) fn store(
        &mut self,
        key: Key<'_>,
        store: &cmd::Store<'_>,
        (answer, fd): (Answer<'_>, i32),
        out: &mut Vec<u8>,
    ) -> Outcome {
        self.counters.cmd_set += 1;
        if answer.records_detail() {
            self.shared.observers.detail.record_set(&key);
        }
        self.log_lookup(&key, fd);
        let mode = self.mode_expected(key, store.mode);
        let mode = if self.shared.config.disable_cas { answer.mode_without_cas(mode) } else { mode };
        let (flags, data) = (store.flags, store.data);
        let mut expiry = self.exptime(store.exptime);
        let mut outcome =
            self.run(key, PartitionCommand::Store { mode, value: data, flags, expiry }, &mut Vec::new());
        let appending = matches!(
            mode,
            StoreMode::Append | StoreMode::Prepend | StoreMode::AppendCas(_) | StoreMode::PrependCas(_)
        );
        if let (true, Some(exptime), Outcome::NotStored) = (appending, store.vivify, outcome) {
            // memcached 1.6.20: append and prepend with N create a missing item, with N's TTL.
            expiry = self.exptime(exptime);
            outcome = self.run(
                key,
                PartitionCommand::Store { mode: StoreMode::Add, value: data, flags, expiry },
                &mut Vec::new(),
            );
        }
        self.log_store(&key, (&outcome, mode), expiry, data.len(), fd);
        let mut shown = (0, data.len(), mode);
        match outcome {
            Outcome::TooLarge | Outcome::OutOfMemory if store.drops_refused => self.drop_refused(&key),
            Outcome::Stored { cas } => {
                if let Some(chosen) = store.cas_in {
                    self.choose_cas(key, Some(cas), chosen);
                }
                shown.0 = self.cas_out(cas);
                // `s` (memcached 1.6.21): the item's size once stored, appended data included.
                if appending && answer.shows_stored_size() {
                    shown.1 = self.look(key).map_or(shown.1, |(len, _)| len);
                }
            }
            _ => {}
        }
        answer.store(&outcome, shown, out);
        outcome
    }

    /// incr/decr of any dialect, with a missing counter created where the command says, and
    /// meta's E and T applied to the counter.
    fn count(
        &mut self,
        key: Key<'_>,
        arith: &cmd::Arith,
        (answer, fd): (Answer<'_>, i32),
        out: &mut Vec<u8>,
    ) {
        let create = arith.create.map(|(initial, exptime)| (initial, self.exptime(exptime)));
        let (outcome, created) = self.arith(key, (arith.delta, arith.decrement), arith.cas, create, fd);
        let mut cas = 0;
        if let Outcome::Counter { cas: own, .. } = outcome {
            if let Some(chosen) = arith.cas_in {
                self.choose_cas(key, Some(own), chosen);
            }
            if let (Some(exptime), Created::No) = (arith.exptime, created) {
                let expiry = self.exptime(exptime);
                self.run(key, PartitionCommand::SetExpiry { expiry }, &mut Vec::new());
            }
            cas = self.cas_out(own);
        }
        answer.arith((&outcome, created), cas, self.now, out);
    }

    /// A signed count (the Redis protocol's INCRBY): a missing counter is created holding `by`.
    fn count_signed(&mut self, key: Key<'_>, by: i64, (answer, fd): (Answer<'_>, i32), out: &mut Vec<u8>) {
        self.log_lookup(&key, fd);
        let mut outcome = self.run(key, PartitionCommand::Count { by }, &mut Vec::new());
        if outcome == Outcome::NotFound {
            let mut digits = itoa::Buffer::new();
            let value = digits.format(by).as_bytes();
            let expiry = Expiry::NEVER;
            let store = PartitionCommand::Store { mode: StoreMode::Add, value, flags: 0, expiry };
            outcome = match self.run(key, store, &mut Vec::new()) {
                Outcome::Stored { cas } => Outcome::Counter { value: by as u64, cas, expiry },
                other => other,
            };
        }
        answer.arith((&outcome, Created::No), 0, self.now, out);
    }

    /// A new exptime; with `read`, the item is read as it is touched (its flags are replied).
    fn touch(
        &mut self,
        key: Key<'_>,
        (exptime, read): (i64, bool),
        (answer, fd): (Answer<'_>, i32),
        out: &mut Vec<u8>,
    ) {
        self.counters.cmd_touch += 1;
        let expiry = self.exptime(exptime);
        self.log_lookup(&key, fd);
        let outcome = if read {
            let mut value = std::mem::take(&mut self.scratch);
            value.clear();
            let outcome = self.run(key, PartitionCommand::GetAndTouch { expiry }, &mut value);
            self.scratch = value;
            outcome
        } else {
            self.run(key, PartitionCommand::Touch { expiry }, &mut Vec::new())
        };
        let cas = match &outcome {
            Outcome::Hit(hit) => self.cas_out(hit.cas),
            _ => 0,
        };
        answer.touch(&outcome, cas, out);
    }

    /// Whether `key`'s item is a Redis collection, which string commands refuse.
    fn holds_collection(&mut self, key: Key<'_>) -> bool {
        matches!(self.read_unchanged(key), Outcome::Hit(hit) if qs_proto::resp::collection::is_collection(hit.flags))
    }

    /// The item as it stands, read without changing it (through the reader when there is
    /// one, else a plain get); its value is left in the scratch buffer.
    pub(super) fn read_unchanged(&mut self, key: Key<'_>) -> Outcome {
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        let outcome = match self.shared.map.reader(key.partition) {
            // Held here (owned, or lent to a step running here): no waiting for the step.
            Some(reader) if self.owns(key.partition) => reader.get_held(key.hash, &key, self.now, &mut value),
            Some(reader) => reader.get(key.hash, &key, self.now, &mut value),
            None => self.run(key, PartitionCommand::Get, &mut value),
        };
        self.scratch = value;
        outcome
    }

    /// me: the item as it stands, looked at without changing it (through the reader when
    /// there is one, else a plain get).
    fn inspect(&mut self, key: Key<'_>, answer: Answer<'_>, out: &mut Vec<u8>) {
        let outcome = self.read_unchanged(key);
        let found = match &outcome {
            Outcome::Hit(hit) => Some((hit, self.cas_out(hit.cas), debug_size(key.len(), hit.value_len))),
            _ => None,
        };
        answer.inspect(found, self.now, out);
    }
}
