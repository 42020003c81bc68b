//! A get's read: the key looked up once, and the reply written around the value as the store
//! reads it ([`ReplySink`], a [`ValueSink`]), in every dialect. The store tells the sink the
//! item first (for a meta get, after it claimed any win token), so the reply's head (the text
//! `VALUE` line, the binary header, the meta get's `VA`/`HD` line with its flags) goes into the
//! reply buffer ahead of the value. A small value is then copied once, from the log into the
//! reply buffer. A large one ([`share`]) read by the partition's owner is not copied: it is left
//! in the log (pinned, [`qs_store::LogValue`]) and the connection's sends read it there; read
//! through a CREW reader, it is copied once into a shared copy of its own. A reply still
//! holding the same version shares it, and nothing is copied.

use super::share::Shares;
use super::{watch, Engine, Exec, Key};
use crate::session::budget::SharedValue;
use crate::shared::Shared;
use qs_proto::command::{self as cmd, Answer};
use qs_proto::Request;
use qs_store::{Expiry, Hit, KeyHash, LogValue, MetaGet, Outcome, PartitionCommand, PinCharge, ValueSink};

/// Where a large value went instead of the reply buffer.
enum Large {
    /// Nowhere: the value is in the reply buffer, or there was no hit.
    No,
    /// A copy of its own, read straight from the log, of the version with this CAS.
    Fresh(Vec<u8>, u64),
    /// A recent copy of the same version, still held by a reply: nothing copied.
    Reused(SharedValue),
    /// Left in the log of the owned partition: the version with this CAS.
    Log(LogValue, u64),
}

/// A get that runs on a partition of this worker by the short way ([`Engine::owned_get`]).
pub struct OwnedGet<'r> {
    key: Key<'r>,
    how: How<'r>,
}

/// How an [`OwnedGet`] was asked.
enum How<'r> {
    /// A text get of this kind.
    Text(qs_proto::GetKind),
    /// A command of another dialect: its options and wording.
    Command(cmd::Get, Answer<'r>),
}

/// A get's reply, written as the store reads the value.
pub(super) struct ReplySink<'a> {
    out: &'a mut Vec<u8>,
    key: &'a [u8],
    answer: Answer<'a>,
    shared: &'a Shared,
    shares: &'a mut Shares,
    /// Where this reply starts in `out` (an undone read goes back to it).
    mark: usize,
    large: Large,
    /// The clock's second, for what a meta get's head reports.
    now_secs: u32,
    /// The head said the value follows (a meta get may send none).
    value_follows: bool,
    /// The partition read, when it is this worker's own: a large value may be left in its
    /// log and sent from there.
    owned: Option<usize>,
}

impl<'a> ReplySink<'a> {
    pub(super) fn new(
        out: &'a mut Vec<u8>,
        key: &'a [u8],
        answer: Answer<'a>,
        shared: &'a Shared,
        (shares, now_secs): (&'a mut Shares, u32),
    ) -> ReplySink<'a> {
        let mark = out.len();
        ReplySink {
            out,
            key,
            answer,
            shared,
            shares,
            mark,
            large: Large::No,
            now_secs,
            value_follows: false,
            owned: None,
        }
    }

    /// Makes this the sink of a read of `partition`, owned here: a large value is left in its
    /// log.
    #[inline(always)]
    pub(super) fn owned(&mut self, partition: usize) {
        self.owned = Some(partition);
    }

    /// Ends the reply of a read that answered `outcome`: what follows the value (the text
    /// reply's `\r\n`), a large value handed to the connection's output to send from its copy.
    #[inline(always)]
    pub(super) fn finish(self, outcome: &Outcome) {
        if !matches!(outcome, Outcome::Hit(_)) || !self.value_follows {
            return;
        }
        let answer = self.answer;
        let out = if matches!(self.large, Large::No) { self.out } else { self.hand_large() };
        answer.tail(out);
    }

    /// A large value's copy, to the connection's output at the reply's end (the rare path).
    #[inline(never)]
    fn hand_large(self) -> &'a mut Vec<u8> {
        let at = self.out.len();
        match self.large {
            Large::No => {}
            Large::Fresh(bytes, cas) => {
                let copy = SharedValue::from_vec(bytes, self.shared.client_memory.clone());
                self.shares.take_new_copy(self.key, cas, copy, at);
            }
            Large::Reused(copy) => self.shares.taken.push((at, copy)),
            Large::Log(value, cas) => {
                let partition = self.owned.expect("a value left in the log of an owned partition");
                let copy = SharedValue::in_log(partition, value);
                self.shares.take_new_copy(self.key, cas, copy, at);
            }
        }
        self.out
    }

    /// Writes the head for `hit`; whether the value follows it.
    #[inline(always)]
    fn write_head(&mut self, hit: &Hit) -> bool {
        self.value_follows =
            self.answer.head(self.key, hit, self.shared.cas_out(hit.cas), self.now_secs, self.out);
        self.value_follows
    }
}

impl ReplySink<'_> {
    /// Writes the head for `hit` and says where its value goes: `Some(buffer)` to be copied
    /// there (the reply buffer, or a fresh copy of a large value), or `None` when nothing is
    /// copied (no value follows, a recent copy of the version is reused, or `pin` left it in
    /// the log).
    #[inline(always)]
    fn place(
        &mut self,
        hit: &Hit,
        pin: Option<impl FnOnce(PinCharge) -> Option<LogValue>>,
    ) -> Option<&mut Vec<u8>> {
        if !self.write_head(hit) {
            return None;
        }
        if !self.shares.wants(hit.value_len) {
            return Some(self.out);
        }
        self.place_large(hit, pin)
    }

    /// [`ReplySink::place`] for a large value (the rare path, out of line).
    #[inline(never)]
    fn place_large(
        &mut self,
        hit: &Hit,
        pin: Option<impl FnOnce(PinCharge) -> Option<LogValue>>,
    ) -> Option<&mut Vec<u8>> {
        if let Some(copy) =
            self.shares.recent_copy(self.key, hit.cas, hit.value_len, &self.shared.client_memory)
        {
            self.large = Large::Reused(copy);
            return None;
        }
        let budget = &self.shared.client_memory;
        if let Some(value) = pin.filter(|_| self.owned.is_some()).and_then(|pin| pin(Some(budget.clone()))) {
            // The replies' hold on it is charged as a copy would be, until the last lets it go.
            budget.force(value.len());
            self.large = Large::Log(value, hit.cas);
            return None;
        }
        self.large = Large::Fresh(Vec::with_capacity(hit.value_len), hit.cas);
        match &mut self.large {
            Large::Fresh(bytes, _) => Some(bytes),
            Large::No | Large::Reused(_) | Large::Log(..) => None,
        }
    }
}

impl ValueSink for ReplySink<'_> {
    #[inline(always)]
    fn head(&mut self, hit: &Hit) -> Option<&mut Vec<u8>> {
        self.place(hit, None::<fn(PinCharge) -> Option<LogValue>>)
    }

    #[inline(always)]
    fn head_pinnable(
        &mut self,
        hit: &Hit,
        pin: impl FnOnce(PinCharge) -> Option<LogValue>,
    ) -> Option<&mut Vec<u8>> {
        self.place(hit, Some(pin))
    }

    fn undo(&mut self) {
        self.out.truncate(self.mark);
        self.large = Large::No;
        self.value_follows = false;
    }
}

impl Engine {
    /// One key of a text get, for the connection `fd`: its VALUE block (nothing on a miss).
    /// `false` for a key too long.
    pub fn get_one(&mut self, kind: qs_proto::GetKind, (key, fd): (Key<'_>, i32), out: &mut Vec<u8>) -> bool {
        if key.len() > qs_proto::KEY_BYTES_MAX {
            return false;
        }
        let command = kind.command(key.bytes);
        if let cmd::Op::Get(get) = command.op {
            self.get(key, &get, command.answer, fd, out);
        }
        true
    }

    /// A get of one key that a partition of this worker owns, located by the window, with no
    /// flash tier: a text get, RESP's GET, or a binary get on a connection the SASL gate has
    /// nothing to say to (`open`), to run by [`Engine::get_owned`] as [`Engine::execute`]
    /// would run it. `None` for any other request (the general path's). Asks nothing of the
    /// connection, so its caller takes the reply buffer only for a get that runs.
    #[inline(always)]
    pub fn owned_get<'r>(
        &self,
        request: &'r Request<'r>,
        at: Option<super::Located>,
        open: bool,
    ) -> Option<OwnedGet<'r>> {
        let (hash, partition) = at?;
        if self.flash_on || !self.owns(partition) {
            return None;
        }
        let (key, how) = match *request {
            Request::Get { kind, keys, single: true } => (keys, How::Text(kind)),
            // GETEX's touch takes the general path, which refuses it on a collection first.
            Request::RespKey(cmd::Command { key, op: cmd::Op::Get(get), answer }) if get.touch.is_none() => {
                (key, How::Command(get, answer))
            }
            Request::Binary(ref binary) if open => match binary.key_command()? {
                cmd::Command { key, op: cmd::Op::Get(get), answer } => (key, How::Command(get, answer)),
                _ => return None,
            },
            _ => return None,
        };
        // An empty key is refused by the general path (`run_command`).
        (!key.is_empty()).then_some(OwnedGet { key: Key { bytes: key, hash, partition }, how })
    }

    /// Runs a get [`Engine::owned_get`] found, for the connection `fd`: its reply (a text
    /// get's VALUE block and `END`) appended to `out`.
    #[inline(always)]
    pub fn get_owned(&mut self, get: OwnedGet<'_>, fd: i32, out: &mut Vec<u8>) {
        match get.how {
            How::Text(kind) => self.text_get_owned(kind, get.key, fd, out),
            How::Command(options, answer) => {
                self.get(get.key, &options, answer, fd, out);
            }
        }
    }

    /// [`Engine::get_owned`] for a text get: get and gets skip the command the general path
    /// builds (as `get` and `read_reply` run them on a key owned here); the touching kinds take
    /// it.
    #[inline(always)]
    fn text_get_owned(&mut self, kind: qs_proto::GetKind, at: Key<'_>, fd: i32, out: &mut Vec<u8>) {
        let Key { bytes: key, hash, .. } = at;
        let with_cas = match kind {
            qs_proto::GetKind::Get => false,
            qs_proto::GetKind::Gets => true,
            _ => {
                self.get_one(kind, (at, fd), out);
                out.extend_from_slice(qs_proto::response::END);
                return;
            }
        };
        self.counters.cmd_get += 1;
        self.offer(hash, key, &PartitionCommand::Get);
        let answer = Answer::Text { noreply: false, with_cas };
        let outcome = self.read_owned(at, None, answer, out).expect("owned");
        let size = match &outcome {
            Outcome::Hit(hit) => Some(hit.value_len),
            _ => None,
        };
        self.tell_get(&at, (size, answer.records_detail()), fd);
        qs_proto::out::append(out, qs_proto::response::END);
    }

    /// A get of `key` in any dialect (with a touch, a get-and-touch; meta's N, R and u),
    /// its reply written to `out`: counts it, records it for `stats detail` (where memcached
    /// does) and `watch fetchers`. A CREW read that must be the owner's after all (a win token
    /// to hand out, a first fetch to mark) is `Exec::Forward`ed, with nothing written. `fd`
    /// is the asking connection's (`watch` lines).
    pub(super) fn get(
        &mut self,
        key: Key<'_>,
        get: &cmd::Get,
        answer: Answer<'_>,
        fd: i32,
        out: &mut Vec<u8>,
    ) -> Exec {
        self.counters.cmd_get += 1;
        if get.touch.is_some() {
            self.counters.cmd_touch += 1;
        }
        let outcome = if let Answer::Meta(_) = answer {
            match self.read_meta(key, get, answer, out) {
                Some(outcome) => outcome,
                None => return Exec::Forward(self.owner(key.partition)),
            }
        } else {
            let touch = get.touch.map(|exptime| self.exptime(exptime));
            self.read_reply(key, touch, answer, out)
        };
        let size = match &outcome {
            Outcome::Hit(hit) => Some(hit.value_len),
            Outcome::Vivified { .. } => Some(0),
            _ => None,
        };
        self.tell_get(&key, (size, answer.records_detail()), fd);
        if size.is_none() {
            answer.miss(&key, out);
        }
        Exec::Done
    }

    /// Tells `stats detail` (where the dialect records it: `detail`) and `watch fetchers` of a
    /// get of `key` that found a value of `size` bytes, or nothing, for the connection `fd`.
    #[inline(always)]
    fn tell_get(&self, key: &Key<'_>, (size, detail): (Option<usize>, bool), fd: i32) {
        if detail {
            self.shared.observers.detail.record_get(key, size.is_some());
        }
        if self.shared.observers.watchers.wants(watch::FETCHERS) {
            self.log_get(key, size, fd);
        }
    }

    /// A meta get's read, its reply written as the store reads the value (the head reports
    /// what the read decided: a win token claimed, a stale item). `None` when a CREW read must
    /// run on the owner after all (a win token to hand out, a first fetch to mark): then
    /// nothing is written.
    fn read_meta(
        &mut self,
        key: Key<'_>,
        get: &cmd::Get,
        answer: Answer<'_>,
        out: &mut Vec<u8>,
    ) -> Option<Outcome> {
        let Key { bytes, hash, partition } = key;
        let now = self.now;
        let outcome = if self.partitions[partition].is_some() {
            let options = MetaGet {
                touch: get.touch.map(|exptime| self.exptime(exptime)),
                vivify: get.vivify.map(|exptime| self.exptime(exptime)),
                recache_below_secs: get.recache_below_secs,
                recache_before_touch: get.recache_before_touch,
                no_update: get.no_update,
            };
            self.offer(hash, bytes, &PartitionCommand::MetaGet(options));
            if let Some(epochs) = self.shared.front_epochs.get(partition) {
                // It may touch or take a token: other workers' front caches stop serving it.
                epochs.bump(hash.0);
            }
            let shared = &*self.shared;
            let mut sink = ReplySink::new(out, bytes, answer, shared, (&mut self.shares, now.secs()));
            if !self.stepping {
                sink.owned(partition);
            }
            let owned = self.partitions[partition].as_mut().expect("owned");
            let outcome = owned.read_meta(hash, bytes, options, now, &mut sink);
            sink.finish(&outcome);
            let changed = options.touch.is_some() || options.vivify.is_some();
            if changed && matches!(outcome, Outcome::Hit(_) | Outcome::Vivified { .. }) {
                self.shared.watches.touch(bytes);
            }
            outcome
        } else {
            let shared = &*self.shared;
            let reader = shared
                .map
                .reader(partition)
                .expect("a partition not owned here is read through its CREW reader");
            let mut sink = ReplySink::new(out, bytes, answer, shared, (&mut self.shares, now.secs()));
            let (outcome, gone) = reader.read_telling(hash, bytes, now, &mut sink);
            // The win token is the owner's to hand out, and the first fetch marks the item
            // fetched (meta `h`): both are writes, so the owner serves them (and shows the key
            // to `stats hotkeys` and `stats mrc` then, once).
            if let Outcome::Hit(hit) = &outcome {
                if (hit.stale && !hit.win_sent) || (!hit.fetched_before && !get.no_update) {
                    sink.undo();
                    self.count_remote(partition, &outcome, gone);
                    return None;
                }
            }
            sink.finish(&outcome);
            self.count_remote(partition, &outcome, gone);
            self.offer(hash, bytes, &PartitionCommand::Get);
            outcome
        };
        if let Outcome::Vivified { cas } = outcome {
            if let Some(chosen) = get.cas_in {
                self.choose_cas(key, Some(cas), chosen);
            }
            answer.vivified(self.cas_out(cas), now, out);
        }
        Some(outcome)
    }

    /// Reads `key` through the partition when owned, else through its CREW reader (a touch
    /// is always owned here: routing made sure), writing the reply as it goes.
    fn read_reply(
        &mut self,
        key: Key<'_>,
        touch: Option<Expiry>,
        answer: Answer<'_>,
        out: &mut Vec<u8>,
    ) -> Outcome {
        let Key { bytes: key, hash, partition } = key;
        let command = touch.map_or(PartitionCommand::Get, |expiry| PartitionCommand::GetAndTouch { expiry });
        if self.flash_on && !self.flash_resolved.is_empty() && touch.is_none() {
            if let Some(outcome) = self.reply_from_flash(hash, partition, key, answer, out) {
                self.offer(hash, key, &command);
                return outcome;
            }
        }
        self.offer(hash, key, &command);
        if touch.is_some() {
            if let Some(epochs) = self.shared.front_epochs.get(partition) {
                // Before the change: other workers' front caches stop serving the key now.
                epochs.bump(hash.0);
            }
        }
        if let Some(outcome) = self.read_owned(Key { bytes: key, hash, partition }, touch, answer, out) {
            return outcome;
        }
        assert!(touch.is_none(), "touch of partition {partition} routed to worker {}", self.worker);
        let now = self.now;
        let shared = &*self.shared;
        let mut sink = ReplySink::new(out, key, answer, shared, (&mut self.shares, now.secs()));
        let reader =
            shared.map.reader(partition).expect("a partition not owned here is read through its CREW reader");
        let (outcome, gone) = reader.read_telling(hash, key, now, &mut sink);
        sink.finish(&outcome);
        self.count_remote(partition, &outcome, gone);
        outcome
    }

    /// Reads `key` through its partition when this worker owns it (with `touch`, a
    /// get-and-touch), writing the reply as it goes; `None`, with nothing done, when another
    /// worker owns it.
    #[inline(always)]
    fn read_owned(
        &mut self,
        key: Key<'_>,
        touch: Option<Expiry>,
        answer: Answer<'_>,
        out: &mut Vec<u8>,
    ) -> Option<Outcome> {
        let Key { bytes: key, hash, partition } = key;
        let owned = self.partitions[partition].as_mut()?;
        let now = self.now;
        let mut sink = ReplySink::new(out, key, answer, &self.shared, (&mut self.shares, now.secs()));
        if !self.stepping {
            sink.owned(partition);
        }
        let outcome = owned.read_value(hash, key, touch, now, &mut sink);
        sink.finish(&outcome);
        if let (Some(expiry), Outcome::Hit(hit)) = (touch, &outcome) {
            // GETEX's new expiry: a WATCH of the key sees the write; a PERSIST of a key with
            // no expiry writes nothing (redis-server's `removeExpire` signals no change).
            if expiry != Expiry::NEVER || hit.expiry_before != Expiry::NEVER {
                self.shared.watches.touch(key);
            }
        }
        Some(outcome)
    }

    /// A plain get served from the record read from flash for it (the rare path: the record
    /// is copied from the read's buffer); `None` when there is none.
    fn reply_from_flash(
        &mut self,
        hash: KeyHash,
        partition: usize,
        key: &[u8],
        answer: Answer<'_>,
        out: &mut Vec<u8>,
    ) -> Option<Outcome> {
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        let outcome = self.read_flash(hash, partition, key, &mut value);
        if let Some(Outcome::Hit(hit)) = &outcome {
            let bytes = &value[hit.value_start..hit.value_start + hit.value_len];
            let mut sink =
                ReplySink::new(out, key, answer, &self.shared, (&mut self.shares, self.now.secs()));
            qs_store::deliver(&mut sink, &mut hit.clone(), bytes);
            sink.finish(&Outcome::Hit(*hit));
        }
        self.scratch = value;
        outcome
    }
}
