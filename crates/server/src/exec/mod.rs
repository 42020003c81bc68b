//! One worker's view of the data: the partitions it owns (written only here) and CREW readers
//! for the rest. Executes parsed requests and writes memcached's replies.
//!
//! Routing (which worker must run a request) is decided by [`Engine::route`]; `execute` then
//! assumes every key it touches is either owned here or readable here.

use crate::observe::counters::WorkerCounters;
use crate::observe::watch::{self, UriKey};
use crate::session::names::name_client;
use crate::shared::Shared;
use qs_proto::response as reply;
use qs_proto::{GetKind, Request, ShutdownMode, StoreMode};
use qs_store::{Expiry, KeyHash, Now, Outcome, Partition, PartitionCommand};
use std::io::Write as _;
use std::sync::Arc;

mod admin;
mod arriving;
mod flash;
mod get;
mod native;
mod resp;
mod route;
mod run;
mod sample;
pub mod share;
mod update;

/// Where a request must run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Here.
    Local,
    /// On this worker (the owner of its key).
    Forward(usize),
    /// A multi-key get whose keys live on other workers (EREW): key by key.
    SplitGet,
    /// flush_all: on every worker.
    Broadcast,
    /// Needs every earlier request of the connection finished first, then runs here.
    AfterPending,
    /// Needs every earlier request of the connection finished first, then runs on this worker.
    ForwardAfterPending(usize),
}

/// What routing needs of a request, whatever its dialect ([`Engine::reach`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach<'a> {
    /// One key; `read_only`: a plain read, which CREW serves from any worker.
    Key {
        /// The key.
        key: &'a [u8],
        /// Reads only.
        read_only: bool,
    },
    /// A text get's keys (the rest of its line); read-only unless it touches.
    Keys {
        /// The keys, as a line.
        keys: &'a [u8],
        /// Reads only.
        read_only: bool,
    },
    /// Runs on every worker's partitions (flush_all, cache_memlimit).
    Everywhere,
    /// Runs here once the connection's earlier requests are answered (stats, watch).
    AfterPending,
    /// Runs at this key's owner once the connection's earlier requests are answered: a COPY
    /// to a key another worker owns than its source's (read there through a CREW reader).
    KeyAfterPending(&'a [u8]),
    /// Runs here: no key, or answered here whatever its key.
    Here,
}

/// Which command a store refused for its size came as: memcached records each differently
/// ([`Engine::refuse_too_large`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TooLarge {
    /// set add replace append prepend cas.
    Text,
    /// ms.
    Meta,
    /// A binary SET ADD REPLACE APPEND PREPEND.
    Binary,
}

impl TooLarge {
    /// How `request` is recorded.
    pub fn of(request: &Request<'_>) -> TooLarge {
        match request {
            Request::Meta(_) => TooLarge::Meta,
            Request::Binary(_) => TooLarge::Binary,
            _ => TooLarge::Text,
        }
    }

    /// How a command answered with `answer` is recorded.
    pub fn answering(answer: &qs_proto::command::Answer<'_>) -> TooLarge {
        match answer {
            qs_proto::command::Answer::Meta(_) => TooLarge::Meta,
            qs_proto::command::Answer::Binary { .. } => TooLarge::Binary,
            qs_proto::command::Answer::Text { .. } | qs_proto::command::Answer::Resp(_) => TooLarge::Text,
        }
    }
}

/// Whether `command` changed its key, by its `outcome`.
fn wrote(command: &PartitionCommand<'_>, outcome: &Outcome) -> bool {
    match outcome {
        Outcome::Stored { .. }
        | Outcome::Vivified { .. }
        | Outcome::Deleted
        | Outcome::Touched
        | Outcome::Counter { .. } => true,
        Outcome::Hit(_) => !matches!(command, PartitionCommand::Get),
        _ => false,
    }
}

/// A key's hash and partition, computed once per request.
pub type Located = (KeyHash, usize);

/// A request's key with its place, hashed once: where the window located it ahead of the
/// run (handed to [`Engine::execute`]), or when the request is run without.
#[derive(Clone, Copy, Debug)]
pub struct Key<'k> {
    /// The key.
    pub bytes: &'k [u8],
    /// Its hash.
    pub hash: KeyHash,
    /// Its partition.
    pub partition: usize,
}

impl std::ops::Deref for Key<'_> {
    type Target = [u8];

    #[inline(always)]
    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

/// What executing a request asks of the connection afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exec {
    /// Done; the reply is in the output.
    Done,
    /// quit: close once the output is written.
    Close,
    /// Must run on this owner after all (a CREW read that found a stale item to win).
    Forward(usize),
    /// HELLO 2 or 3: the connection speaks RESP3 (true) or RESP2 from its next request.
    Resp3(bool),
    /// RESET: the connection is as it was accepted (RESP2, no name, authenticated again where
    /// a password is asked for) from its next request.
    Reset,
}

pub use crate::admin::{VERSION, VERSION_REPLY};

/// `-o front_cache`: sets and ways of a worker's front cache (qs-sim front: more than 4
/// ways gains under half a point), and the largest reply it keeps.
const FRONT_SETS: usize = 256;
const FRONT_WAYS: usize = 4;
const FRONT_REPLY_BYTES_MAX: usize = 2048;

/// A key of a request whose record must come from flash before the request runs.
#[derive(Clone, Debug)]
pub struct FlashKey {
    /// Where it is.
    pub partition: usize,
    pub hash: KeyHash,
    pub key: Vec<u8>,
    /// What to read (grown when the record turns out longer).
    pub read: qs_store::FlashRead,
    /// The request is a plain get (text get/gets, binary get): a young record is served
    /// where it is instead of coming back to DRAM.
    pub plain_get: bool,
}

/// A flash key resolved for the request about to run again: its record when it is to be
/// served from flash (`None`: promoted, or absent, so the request runs as usual and the key is
/// not looked for on flash again).
#[derive(Debug)]
pub struct FlashResolved {
    pub hash: KeyHash,
    pub serve: Option<(qs_store::FlashRead, Vec<u8>)>,
}

/// A worker's partitions and readers.
pub struct Engine {
    /// This worker's number.
    pub worker: usize,
    /// Partitions, `Some` where this worker owns them.
    partitions: Vec<Option<Partition>>,
    shared: Arc<Shared>,
    /// The clock, read once per loop turn.
    pub now: Now,
    /// [`crate::sys::ticks`] read as the loop turn began: what this turn read arrived by then
    /// (the latency histograms' read-to-reply span starts here).
    pub turn_ticks: u64,
    scratch: Vec<u8>,
    /// This worker's counters.
    pub counters: WorkerCounters,
    /// Per partition: reads served here for other owners (gets, hits).
    pub remote_reads: Vec<(u64, u64)>,
    /// Parser limits.
    pub limits: qs_proto::Limits,
    crew: bool,
    /// The owned partitions record evicted items (someone watched evictions at the last look).
    recording_evictions: bool,
    /// Hot keys and the live miss-ratio curve's sample.
    sampler: crate::observe::sampler::Sampler,
    /// `-o front_cache` under EREW: replies of other workers' keys (qs_store::front).
    front: Option<qs_store::front::FrontCache>,
    /// `-o ext_path`: the partitions have flash tiers.
    flash_on: bool,
    /// The flash keys of the request about to run again, resolved (see [`FlashResolved`]);
    /// emptied once it has run.
    pub flash_resolved: Vec<FlashResolved>,
    /// Partitions whose flash tier turned off, already said on standard error.
    flash_off_said: std::cell::Cell<u64>,
    /// Large values sent from shared copies ([`share`]).
    pub shares: share::Shares,
    /// A step over several workers' partitions runs (exec/resp/tx.rs): the partitions held
    /// now go back to their owners after it, so no value is left pinned in their logs.
    stepping: bool,
    /// A script's run may be made again over every partition (exec/resp/eval.rs).
    retry: resp::Retry,
    /// The namespace of the Redis database of the connection whose RESP request runs
    /// (shared::DbSpaces: the database's own unless SWAPDB exchanged it): what KEYS, SCAN,
    /// RANDOMKEY, DBSIZE and FLUSHDB see. Keys arrive already in it (qs_proto::resp::db).
    pub db: u8,
    /// The database a SELECT (or RESET) of the request moved the connection to: the worker's
    /// turn reads it back into the connection.
    pub selected: Option<u8>,
}

impl Engine {
    /// The turn's time: what every command of the turn runs at, and what the codecs count a
    /// relative expiry from.
    pub fn set_now(&mut self, now: Now) {
        self.now = now;
        self.limits.now_ms = now.ms();
    }

    /// An engine for `worker` owning `partitions`.
    pub fn new(worker: usize, partitions: Vec<Option<Partition>>, shared: Arc<Shared>) -> Engine {
        let count = partitions.len();
        let now = crate::sys::clock::now();
        let limits = qs_proto::Limits {
            item_bytes_max: shared.memory.item_bytes_max(),
            now_ms: now.ms(),
            databases: shared.config.databases,
        };
        let crew = shared.map.crew();
        let flash_on = shared.published.flash_on();
        let front = (!shared.front_epochs.is_empty())
            .then(|| qs_store::front::FrontCache::new(FRONT_SETS, FRONT_WAYS));
        Engine {
            worker,
            partitions,
            shared,
            now,
            turn_ticks: crate::sys::ticks(),
            scratch: Vec::new(),
            counters: WorkerCounters::default(),
            remote_reads: vec![(0, 0); count],
            limits,
            crew,
            recording_evictions: false,
            sampler: crate::observe::sampler::Sampler::new(worker),
            front,
            flash_on,
            flash_resolved: Vec::new(),
            shares: share::Shares::default(),
            flash_off_said: std::cell::Cell::new(0),
            stepping: false,
            retry: resp::Retry::Off,
            db: 0,
            selected: None,
        }
    }

    /// A CAS unique as clients see it: 0 under -C (memcached's items then carry none).
    #[inline]
    pub fn cas_out(&self, cas: u64) -> u64 {
        self.shared.cas_out(cas)
    }

    /// The CAS the store must compare for a client's `expected` on `key` (owner only): the
    /// version's own CAS when the client names the value it was given with `E`, one no item
    /// has when the version has a chosen value the client did not name.
    pub(super) fn cas_expected(&mut self, key: Key<'_>, expected: u64) -> u64 {
        if !self.shared.explicit_cas.used() {
            return expected;
        }
        let Some((_, own)) = self.look(key) else {
            return expected;
        };
        match self.shared.explicit_cas.shown(own) {
            shown if shown == own => expected,
            shown if shown == expected => own,
            _ => u64::MAX,
        }
    }

    /// The value length and CAS of `key`'s item in a partition owned here, looked at without
    /// changing anything (a win token, the fetch mark): `None` for none.
    pub(super) fn look(&self, key: Key<'_>) -> Option<(usize, u64)> {
        self.partitions[key.partition].as_ref()?.peek_cas(key.hash, key.bytes, self.now)
    }

    /// `mode` with its expected CAS, if any, made the store's ([`Engine::cas_expected`]).
    pub(super) fn mode_expected(&mut self, key: Key<'_>, mode: qs_store::StoreMode) -> qs_store::StoreMode {
        use qs_store::StoreMode as M;
        if !self.shared.explicit_cas.used() {
            return mode;
        }
        match mode {
            M::Cas(cas) => M::Cas(self.cas_expected(key, cas)),
            // Set-to-invalid compares by order: a value below the chosen one is older.
            M::CasOrStale(cas) => M::CasOrStale(match self.look(key) {
                Some((_, own)) if self.shared.explicit_cas.shown(own) != own => {
                    match cas.cmp(&self.shared.explicit_cas.shown(own)) {
                        std::cmp::Ordering::Equal => own,
                        std::cmp::Ordering::Less => 1,
                        std::cmp::Ordering::Greater => u64::MAX,
                    }
                }
                _ => cas,
            }),
            M::AppendCas(cas) => M::AppendCas(self.cas_expected(key, cas)),
            M::PrependCas(cas) => M::PrependCas(self.cas_expected(key, cas)),
            other => other,
        }
    }

    /// Gives the version of `key` that now stands the client's chosen CAS `chosen` (owner only).
    pub(super) fn choose_cas(&mut self, key: Key<'_>, own: Option<u64>, chosen: u64) {
        let own = own.or_else(|| self.look(key).map(|(_, cas)| cas));
        if let Some(own) = own {
            self.shared.explicit_cas.insert(own, chosen);
        }
    }

    /// Runs `request` here, appending its reply to `out` (nothing for noreply). `at`: where
    /// the one key of a single-key request was located ([`Engine::locate_request`]), if it was.
    /// A command on one key, whatever its dialect, goes to the one executor (run.rs).
    pub fn execute(
        &mut self,
        request: &Request<'_>,
        (at, fd): (Option<Located>, i32),
        out: &mut Vec<u8>,
    ) -> Exec {
        match *request {
            Request::Get { kind, keys, single } => {
                if single {
                    if !self.get_one(kind, (self.key(keys, at), fd), out) {
                        out.extend_from_slice(reply::BAD_FORMAT);
                        return Exec::Done;
                    }
                    out.extend_from_slice(reply::END);
                    return Exec::Done;
                }
                self.get_many(kind, (keys, fd), out, usize::MAX);
            }
            Request::FlushAll { .. } if self.shared.config.disable_flush_all => {
                out.extend_from_slice(b"CLIENT_ERROR flush_all not allowed\r\n");
            }
            Request::FlushAll { delay, noreply } => {
                self.flush_local(delay, true);
                if !noreply {
                    out.extend_from_slice(reply::OK);
                }
            }
            Request::MetaNoop => out.extend_from_slice(b"MN\r\n"),
            Request::Binary(ref binary) => {
                return match binary.key_command() {
                    Some(command) => self.run_command(&command, (at, fd), out),
                    None => self.binary_admin(binary, out),
                };
            }
            _ => {
                if let Some(command) = request.key_command(&self.limits) {
                    return self.run_command(&command, (at, fd), out);
                }
                return self.admin(request, fd, out);
            }
        }
        Exec::Done
    }

    /// A command every worker runs on its own partitions (routed [`Route::Broadcast`]), run
    /// here for a client of another worker: its effect on the partitions owned here only. It
    /// is counted, logged and answered by the worker the client sent it to (`fd`, the
    /// client's connection there, names it in `watch` lines).
    pub fn run_everywhere(&mut self, request: &Request<'_>, fd: i32) {
        match *request {
            Request::FlushAll { delay, .. } => self.flush_local(delay, false),
            Request::CacheMemlimit { megabytes, .. } => {
                self.cache_memlimit(megabytes, false);
            }
            Request::Binary(qs_proto::binary::Binary {
                command: qs_proto::binary::BinaryCommand::Flush { exptime, .. },
                ..
            }) => self.flush_local(i32::try_from(exptime).unwrap_or(i32::MAX), false),
            // A RESP FLUSHALL or FLUSHDB, or a write of several keys: this worker's part.
            Request::Resp(ref frame) => self.resp_everywhere(frame, fd),
            _ => debug_assert!(false, "not a command for every worker: {request:?}"),
        }
    }

    /// flush_all on the partitions owned here (`asked_here`: where the client sent it, which
    /// counts it once).
    pub(super) fn flush_local(&mut self, delay: i32, asked_here: bool) {
        if asked_here {
            self.counters.cmd_flush += 1;
        }
        let now = self.now;
        for (partition, owned) in self.partitions.iter().enumerate() {
            if let (Some(_), Some(epochs)) = (owned, self.shared.front_epochs.get(partition)) {
                epochs.bump_all();
            }
        }
        // The watched keys it empties (those there now, on partitions held here).
        let watches = self.shared.watches.clone();
        watches.touch_each(|key| {
            let key = self.key(key, None);
            key.len() <= qs_proto::RESP_KEY_BYTES_MAX && self.owns(key.partition) && self.look(key).is_some()
        });
        // As an exptime: past 30 days, an absolute unix time (one already past flushes now).
        let delay = match i64::from(delay) {
            d if d <= 0 => 0,
            d if d <= qs_store::item::RELATIVE_EXPTIME_SECS_MAX => d as u32,
            at => (at as u32).saturating_sub(now.secs()),
        };
        let by_cas = !self.shared.config.disable_cas;
        for partition in self.partitions.iter_mut().flatten() {
            partition.flush_all(now, delay, by_cas);
        }
    }

    /// Runs `command` on `partition` when this worker owns it (`None` when another does), for
    /// callers that located the key themselves (the native protocol).
    pub fn run_owned(
        &mut self,
        hash: KeyHash,
        partition: usize,
        key: &[u8],
        command: PartitionCommand<'_>,
        out: &mut Vec<u8>,
    ) -> Option<Outcome> {
        let owned = self.partitions.get(partition)?.is_some();
        owned.then(|| self.run_at(hash, partition, key, command, out))
    }

    /// memcached's exptime as an expiry, by this turn's clock.
    pub fn expiry(&self, exptime: i32) -> Expiry {
        Expiry::from_exptime(exptime as i64, self.now)
    }

    /// Runs one command on `key`'s partition (owned here: routing made sure).
    fn run(&mut self, key: Key<'_>, command: PartitionCommand<'_>, out: &mut Vec<u8>) -> Outcome {
        self.run_at(key.hash, key.partition, key.bytes, command, out)
    }

    /// [`Engine::run`] with the key already hashed.
    fn run_at(
        &mut self,
        hash: KeyHash,
        partition: usize,
        key: &[u8],
        command: PartitionCommand<'_>,
        out: &mut Vec<u8>,
    ) -> Outcome {
        self.offer(hash, key, &command);
        if let Some(epochs) = self.shared.front_epochs.get(partition) {
            // Before any change: other workers' front caches stop serving the key now.
            if !matches!(command, PartitionCommand::Get) {
                epochs.bump(hash.0);
            }
        }
        let request = qs_store::PartitionRequest { key, hash, command };
        let now = self.now;
        let outcome = match &mut self.partitions[partition] {
            Some(partition) => partition.run(&request, now, out),
            None => panic!("request for partition {partition} routed to worker {}", self.worker),
        };
        if self.shared.watches.any() && wrote(&request.command, &outcome) {
            // A WATCH of it sees the write (a write refused is none).
            self.shared.watches.touch(key);
        }
        outcome
    }

    /// Counts a read made here through `partition`'s CREW reader.
    fn count_remote(&mut self, partition: usize, outcome: &Outcome, gone: qs_store::Gone) {
        match gone {
            qs_store::Gone::No => {}
            qs_store::Gone::Expired => self.counters.remote_get_expired += 1,
            qs_store::Gone::Flushed => self.counters.remote_get_flushed += 1,
        }
        let counts = &mut self.remote_reads[partition];
        counts.0 += 1;
        if matches!(outcome, Outcome::Hit(_)) {
            counts.1 += 1;
            self.counters.remote_get_hits += 1;
        } else {
            self.counters.remote_get_misses += 1;
        }
    }

    /// A get of several keys, bounded: runs them in order until the reply has grown by more
    /// than `budget` bytes, then stops and returns the keys not yet run (a suffix of `keys`,
    /// starting at a key), to be run as a get of their own once the client has read what is
    /// written; `None` when every key has run and END ends the reply. At least one key runs
    /// per call, so a resumed get always moves on.
    pub fn get_many<'k>(
        &mut self,
        kind: GetKind,
        (keys, fd): (&'k [u8], i32),
        out: &mut Vec<u8>,
        budget: usize,
    ) -> Option<&'k [u8]> {
        // memcached drops the partial reply of a get with a key too long: check first.
        if qs_proto::tokens::words(keys).any(|key| key.len() > qs_proto::KEY_BYTES_MAX) {
            out.extend_from_slice(reply::BAD_FORMAT);
            return None;
        }
        let start = out.len();
        for key in qs_proto::tokens::words(keys) {
            self.get_one(kind, (self.key(key, None), fd), out);
            if out.len() - start + self.shares.taken_bytes() > budget {
                if let Some(rest) = keys_after(keys, key) {
                    return Some(rest);
                }
            }
        }
        out.extend_from_slice(reply::END);
        None
    }

    /// The one rule for a store refused for its size, whatever its dialect and wherever it is
    /// answered, recorded as memcached 1.6.18 records it: a text store counts `store_too_large`
    /// and shows the set to `stats detail`; a binary one only shows it to `stats detail`; a meta
    /// set counts `store_too_large` (and a meta command). None counts in `cmd_set` (memcached
    /// counts a store once its item exists). When it `drops` (a `set`, any meta set), the key's
    /// old value goes if this worker owns it; otherwise the caller hands the drop to the owner.
    pub fn refuse_too_large(&mut self, command: TooLarge, key: &[u8], drops: bool) {
        let (too_large, detail) = match command {
            TooLarge::Meta => {
                self.counters.meta_cmds += 1;
                (true, false)
            }
            TooLarge::Binary => (false, true),
            TooLarge::Text => (true, true),
        };
        if too_large {
            self.counters.store_too_large += 1;
        }
        if detail {
            self.shared.observers.detail.record_set(key);
        }
        if drops {
            self.drop_refused(key);
        }
    }

    /// The one rule for a store refused for its size or for memory (a `set` of any protocol,
    /// any meta set; -M for out of memory): memcached drops the key's old value, so a reader
    /// never sees the value the client meant to replace. Counted as no delete. The key's
    /// partition is owned here (a refusal answered elsewhere hands the drop to the owner).
    pub fn drop_refused(&mut self, key: &[u8]) {
        let key = self.key(key, None);
        if self.owns(key.partition) {
            self.run(key, PartitionCommand::Delete { cas: 0 }, &mut Vec::new());
        }
    }
}

/// The `size=` that `me` and `lru_crawler metadump` report: the item's bytes in the log
/// (header with its extension word, key and value), as memcached reports its item's.
fn debug_size(key_len: usize, value_len: usize) -> usize {
    qs_store::item::item_bytes(key_len, value_len, qs_store::item::EXT_BYTES)
}

/// The key of a request that names exactly one.
fn single_key_of<'a>(request: &'a Request<'_>) -> Option<&'a [u8]> {
    match request {
        Request::Get { keys, single: true, .. } => Some(keys),
        Request::Store { key, .. }
        | Request::TooLarge { key, .. }
        | Request::Delete { key, .. }
        | Request::Arith { key, .. }
        | Request::Touch { key, .. } => Some(key),
        // A base64 key is decoded into the request: the decoded key is the one located.
        Request::Meta(meta) => Some(meta.key()),
        Request::Binary(binary) => binary.command.key(),
        Request::RespKey(command) => Some(command.key),
        _ => None,
    }
}

/// The keys of `keys` after `key` (a word of it), from the next key on; `None` if none follow.
pub fn keys_after<'k>(keys: &'k [u8], key: &[u8]) -> Option<&'k [u8]> {
    // `key` is a subslice of `keys`: where it ends is plain address arithmetic.
    let end = key.as_ptr() as usize - keys.as_ptr() as usize + key.len();
    let rest = &keys[end..];
    let next = rest.iter().position(|&byte| byte != b' ')?;
    Some(&rest[next..])
}

/// memcached's `slabs reassign <src> <dst>` answers, for memcached's class ids (0, its page
/// pool, to `largest`). Quicksilver's logs have no slab pages to move, so a valid pair is
/// answered as memcached answers a class with no spare pages.
fn slabs_reassign(classes: Option<(i32, i32)>, largest: u32) -> &'static [u8] {
    let Some((src, dst)) = classes else {
        return b"CLIENT_ERROR bad command line format\r\n";
    };
    let valid = 0..=largest as i32;
    if src == dst {
        b"SAME src and dst class are identical\r\n"
    } else if !valid.contains(&src) || !valid.contains(&dst) {
        b"BADCLASS invalid src or dst class id\r\n"
    } else {
        b"NOSPARE source class has no spare pages\r\n"
    }
}

/// Whether `command` is RESP's GET of one key, read only (what the front cache may answer).
#[inline(always)]
pub fn is_plain_resp_get(command: &qs_proto::command::Command<'_>) -> bool {
    use qs_proto::command::{Answer, Op, RespReply};
    matches!(command.op, Op::Get(get) if get == qs_proto::command::Get::default())
        && matches!(command.answer, Answer::Resp(RespReply::Bulk | RespReply::Bulk3))
}
