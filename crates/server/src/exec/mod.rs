//! One worker's view of the data: the partitions it owns (written only here) and CREW readers
//! for the rest. Executes parsed requests and writes memcached's replies.
//!
//! Routing (which worker must run a request) is decided by [`Engine::route`]; `execute` then
//! assumes every key it touches is either owned here or readable here.

use crate::observe::counters::WorkerCounters;
use crate::observe::watch::{self, UriKey};
use crate::shared::Shared;
use qs_proto::response::{self as reply, MetaItem};
use qs_proto::{GetKind, Meta, MetaCommand, Request, ShutdownMode, StoreMode};
use qs_store::{Command, Expiry, KeyHash, MetaGet, Outcome, Partition};
use std::io::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

mod binary;

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
}

/// A key's hash and partition, computed once per request.
pub type Located = (KeyHash, usize);

/// What executing a request asks of the connection afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exec {
    /// Done; the reply is in the output.
    Done,
    /// quit: close once the output is written.
    Close,
    /// Must run on this owner after all (a CREW read that found a stale item to win).
    Forward(usize),
}

pub use crate::admin::{VERSION, VERSION_REPLY};

/// `-o front_cache`: sets and ways of a worker's front cache (qs-sim front: more than 4
/// ways gains under half a point), and the largest reply it keeps.
const FRONT_SETS: usize = 256;
const FRONT_WAYS: usize = 4;
const FRONT_REPLY_BYTES_MAX: usize = 2048;
/// Sampled accesses a worker holds for `stats mrc` at most before handing them over.
const MRC_BATCH_MAX: usize = 256;

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
    pub partitions: Vec<Option<Partition>>,
    shared: Arc<Shared>,
    /// The clock, read once per loop turn.
    pub now_secs: u32,
    scratch: Vec<u8>,
    /// This worker's counters.
    pub counters: WorkerCounters,
    /// Per partition: reads served here for other owners (gets, hits).
    pub remote_reads: Vec<(u64, u64)>,
    /// Parser limits.
    pub limits: qs_proto::Limits,
    crew: bool,
    /// The located key of the request being run (its address, length and place), so it is
    /// hashed once: set by [`Engine::hint`], cleared by [`Engine::hint_clear`].
    hint: Option<(usize, usize, Located)>,
    /// The descriptor of the connection whose requests run now (`stats conns`, `watch`).
    pub conn_fd: i32,
    /// The owned partitions record evicted items (someone watched evictions at the last look).
    recording_evictions: bool,
    /// The request running now was handed over by another worker.
    pub for_other: bool,
    /// The keys this worker runs commands on, most frequent (`stats hotkeys`).
    hot: qs_store::hot::TopKeys,
    /// Counting keys (refreshed from [`crate::observe::hotkeys::HotKeys`] each loop turn).
    hot_every: u32,
    /// Requests until the next one counted (sampling), and the generator of the gaps.
    hot_countdown: u32,
    hot_rng: u64,
    /// The reset generation `hot` counts since, when it was last published, with how many
    /// accesses counted then, and loop turns since the clock was last looked at for it.
    hot_generation: u64,
    hot_published: std::time::Instant,
    hot_published_accesses: u64,
    hot_turns: u32,
    /// `-o front_cache` under EREW: replies of other workers' keys (qs_store::front).
    front: Option<qs_store::front::FrontCache>,
    /// `stats mrc`'s sampling threshold as of this loop turn (0: off).
    mrc_threshold: u64,
    /// Gets run while `stats mrc` sampled (published each loop turn).
    mrc_gets: u64,
    /// Sampled accesses not yet handed to `stats mrc` (each loop turn, or when full).
    mrc_batch: Vec<(u64, qs_store::mrc::Access)>,
    /// `-o ext_path`: the partitions have flash tiers.
    flash_on: bool,
    /// The flash keys of the request about to run again, resolved (see [`FlashResolved`]);
    /// emptied once it has run.
    pub flash_resolved: Vec<FlashResolved>,
    /// Partitions whose flash tier turned off, already said on standard error.
    flash_off_said: std::cell::Cell<u64>,
}

impl Engine {
    /// An engine for `worker` owning `partitions`.
    pub fn new(worker: usize, partitions: Vec<Option<Partition>>, shared: Arc<Shared>) -> Engine {
        let count = partitions.len();
        let limits = qs_proto::Limits { item_bytes_max: shared.item_bytes_max };
        let crew = !shared.readers.is_empty();
        let flash_on = !shared.flash.is_empty();
        let front = (!shared.front_epochs.is_empty())
            .then(|| qs_store::front::FrontCache::new(FRONT_SETS, FRONT_WAYS));
        Engine {
            worker,
            partitions,
            shared,
            now_secs: crate::sys::now_secs(),
            scratch: Vec::new(),
            counters: WorkerCounters::default(),
            remote_reads: vec![(0, 0); count],
            limits,
            crew,
            hint: None,
            conn_fd: -1,
            recording_evictions: false,
            for_other: false,
            hot: qs_store::hot::TopKeys::new(crate::observe::hotkeys::WATCHED_PER_WORKER),
            hot_every: 0,
            hot_countdown: 1,
            hot_rng: 0x9e37_79b9_7f4a_7c15 ^ worker as u64,
            hot_generation: 0,
            hot_published: std::time::Instant::now(),
            hot_published_accesses: 0,
            hot_turns: 0,
            mrc_threshold: 0,
            front,
            mrc_gets: 0,
            mrc_batch: Vec::with_capacity(MRC_BATCH_MAX),
            flash_on,
            flash_resolved: Vec::new(),
            flash_off_said: std::cell::Cell::new(0),
        }
    }

    fn locate(&self, key: &[u8]) -> Located {
        if let Some((address, len, located)) = self.hint {
            // The very bytes of the request being run (same address and length in the
            // unchanged read buffer): its hash is known.
            if address == key.as_ptr() as usize && len == key.len() {
                return located;
            }
        }
        let hash = KeyHash::of(key);
        (hash, hash.partition(self.shared.partition_bits))
    }

    /// The one key of a single-key request, located; `None` for other requests and for keys
    /// too long to look up.
    pub fn locate_request(&self, request: &Request<'_>) -> Option<Located> {
        let key = single_key_of(request)?;
        (key.len() <= qs_proto::KEY_BYTES_MAX).then(|| self.locate(key))
    }

    /// Prefetch stage 1: start loading the key's bucket.
    #[inline]
    pub fn prefetch_bucket(&self, (hash, partition): Located) {
        match &self.partitions[partition] {
            Some(owned) => owned.prefetch_bucket(hash),
            None if self.crew => self.shared.readers[partition].prefetch_bucket(hash),
            None => {}
        }
    }

    /// Prefetch stage 1 for a key not yet parsed (a guess: see [`qs_proto::tokens::key_guess`]);
    /// its place, for stage 2.
    #[inline]
    pub fn prefetch_key(&self, key: &[u8]) -> Located {
        let hash = KeyHash::of(key);
        let located = (hash, hash.partition(self.shared.partition_bits));
        self.prefetch_bucket(located);
        located
    }

    /// Prefetch stage 2, after stage 1 had time: start loading the key's item.
    #[inline]
    pub fn prefetch_item(&self, (hash, partition): Located) {
        match &self.partitions[partition] {
            Some(owned) => owned.prefetch_item(hash),
            None if self.crew => self.shared.readers[partition].prefetch_item(hash),
            None => {}
        }
    }

    /// Remembers where `request`'s key was located, for the request about to run.
    pub fn hint(&mut self, request: &Request<'_>, located: Option<Located>) {
        self.hint = match (single_key_of(request), located) {
            (Some(key), Some(located)) => Some((key.as_ptr() as usize, key.len(), located)),
            _ => None,
        };
    }

    /// Forgets the hint (the read buffer may change after this).
    pub fn hint_clear(&mut self) {
        self.hint = None;
    }

    fn owner(&self, partition: usize) -> usize {
        self.shared.owner[partition]
    }

    /// For building a window of requests ahead of running them: whether `request` (located at
    /// `located`) will have to wait for the connection's requests handed to other workers
    /// (`waiting_on`: a bit per worker, as it will be when this request runs), so nothing after
    /// it should be parsed yet; and the workers waited on after it. A guess that only sizes
    /// the window: running the requests decides, so a wrong guess costs a parse, never order.
    pub fn stalls(&self, request: &Request<'_>, located: Option<Located>, waiting_on: &mut u64) -> bool {
        if self.shared.workers == 1 {
            return false;
        }
        let Some((_, partition)) = located else {
            // Several keys, no key, or stats: may wait on anything handed over so far.
            return *waiting_on != 0;
        };
        let owner = self.owner(partition);
        if owner == self.worker {
            return false;
        }
        let crew_read = self.crew
            && matches!(
                request,
                Request::Get { kind: GetKind::Get | GetKind::Gets, .. }
                    | Request::Binary(qs_proto::binary::Binary {
                        command: qs_proto::binary::Command::Get { touch: None, .. },
                        ..
                    })
            );
        if crew_read {
            return *waiting_on & (1 << (owner % 64)) != 0;
        }
        *waiting_on |= 1 << (owner % 64);
        false
    }

    /// The worker that owns `partition`.
    pub fn owner_of_partition(&self, partition: usize) -> usize {
        self.owner(partition)
    }

    /// Main index buckets per partition.
    pub fn main_buckets(&self) -> usize {
        self.shared.main_buckets
    }

    /// Whether `lru_crawler` serves dumps and crawls (`lru_crawler disable` stops it).
    pub fn crawler_enabled(&self) -> bool {
        self.shared.crawler_enabled.load(Relaxed)
    }

    /// A CAS unique as clients see it: 0 under -C (memcached's items then carry none).
    #[inline]
    pub fn cas_out(&self, cas: u64) -> u64 {
        if self.shared.config.disable_cas {
            0
        } else {
            cas
        }
    }

    /// -X: `stats cachedump` and `lru_crawler metadump` are refused.
    pub fn dumping_disabled(&self) -> bool {
        self.shared.config.disable_dumping
    }

    /// The worker that owns `key`.
    pub fn owner_of(&self, key: &[u8]) -> usize {
        self.owner(self.locate(key).1)
    }

    /// Where `request` must run, given how many requests this connection has waiting on each
    /// worker (a later request for the same worker must queue behind them to keep order).
    pub fn route(&self, request: &Request<'_>, pending: &[u32]) -> Route {
        let keyed = !matches!(
            request,
            Request::FlushAll { .. }
                | Request::Stats { .. }
                | Request::Version
                | Request::Verbosity { .. }
                | Request::Metadump { .. }
                | Request::Crawl { .. }
                | Request::CrawlerSwitch { .. }
                | Request::CrawlerPacing
                | Request::SlabsAutomove { .. }
                | Request::SlabsReassign { .. }
                | Request::CacheMemlimit { .. }
                | Request::CacheDump { .. }
                | Request::DebugTime { .. }
                | Request::Watch { .. }
                | Request::Shutdown { .. }
                | Request::RefreshCerts { .. }
        );
        if keyed && self.shared.workers == 1 {
            // Every partition is here: no need to hash the keys twice.
            return Route::Local;
        }
        let key = match request {
            Request::Binary(binary) => return self.route_binary(binary, pending),
            Request::Get { kind, keys } => return self.route_get(*kind, keys, pending),
            Request::Store { key, .. }
            | Request::TooLarge { key, .. }
            | Request::Delete { key, .. }
            | Request::Arith { key, .. }
            | Request::Touch { key, .. } => *key,
            Request::Meta(meta) => return self.route_meta(meta, pending),
            // -F: refused where it arrives.
            Request::FlushAll { .. } if self.shared.config.disable_flush_all => return Route::Local,
            Request::FlushAll { .. } => return Route::Broadcast,
            // Every worker resizes its own partitions.
            Request::CacheMemlimit { .. } => return Route::Broadcast,
            Request::Stats { .. } | Request::Watch { .. } => return Route::AfterPending,
            Request::Version
            | Request::Verbosity { .. }
            | Request::Quit
            | Request::MetaNoop
            | Request::Metadump { .. }
            | Request::Crawl { .. }
            | Request::CrawlerSwitch { .. }
            | Request::CrawlerPacing
            | Request::SlabsAutomove { .. }
            | Request::SlabsReassign { .. }
            | Request::CacheDump { .. }
            | Request::DebugTime { .. }
            | Request::Shutdown { .. }
            | Request::RefreshCerts { .. } => return Route::Local,
        };
        if key.len() > qs_proto::KEY_BYTES_MAX {
            return Route::Local;
        }
        let owner = self.owner(self.locate(key).1);
        if owner == self.worker {
            Route::Local
        } else {
            Route::Forward(owner)
        }
    }

    fn route_get(&self, kind: GetKind, keys: &[u8], pending: &[u32]) -> Route {
        // gat/gats write (the new expiry), so only plain gets may read other partitions.
        let read_only = kind.touch().is_none();
        let mut remote = None;
        let mut several = false;
        for key in qs_proto::tokens::words(keys) {
            if key.len() > qs_proto::KEY_BYTES_MAX {
                // Answered here with an error, no key read.
                return Route::Local;
            }
            let owner = self.owner(self.locate(key).1);
            if owner == self.worker || (self.crew && read_only && pending[owner] == 0) {
                continue;
            }
            several |= remote.is_some_and(|other| other != owner);
            remote = Some(owner);
        }
        match remote {
            None => Route::Local,
            Some(_) if self.crew && read_only => Route::AfterPending,
            Some(owner) if !several && qs_proto::tokens::single_word(keys).is_some() => Route::Forward(owner),
            Some(_) => Route::SplitGet,
        }
    }

    fn route_meta(&self, meta: &Meta<'_>, pending: &[u32]) -> Route {
        if meta.key().len() > qs_proto::KEY_BYTES_MAX {
            return Route::Local;
        }
        let owner = self.owner(self.locate(meta.key()).1);
        if owner == self.worker {
            return Route::Local;
        }
        let options = &meta.options;
        let read_only = match meta.command {
            MetaCommand::Get => !(options.has(b'T') || options.has(b'N') || options.has(b'R')),
            MetaCommand::Debug => true,
            _ => false,
        };
        if self.crew && read_only && pending[owner] == 0 {
            Route::Local
        } else {
            Route::Forward(owner)
        }
    }

    /// Whether the partitions have flash tiers.
    #[inline]
    pub fn flash_on(&self) -> bool {
        self.flash_on
    }

    /// The keys of `request` (to run here) whose records are on flash and must be read before
    /// it runs, appended to `keys`; none without a flash tier. A plain set needs no read (it
    /// drops the key's flash copies), nor does a key just resolved.
    pub fn flash_probe(&self, request: &Request<'_>, keys: &mut Vec<FlashKey>) {
        if !self.flash_on {
            return;
        }
        let plain_get = match request {
            Request::Get { kind, .. } => matches!(kind, GetKind::Get | GetKind::Gets),
            Request::Binary(binary) => {
                matches!(binary.command, qs_proto::binary::Command::Get { touch: None, .. })
            }
            _ => false,
        };
        let mut probe = |key: &[u8]| {
            if key.len() > qs_proto::KEY_BYTES_MAX {
                return;
            }
            let (hash, partition) = self.locate(key);
            if self.flash_resolved.iter().any(|resolved| resolved.hash == hash)
                || keys.iter().any(|known| known.hash == hash)
            {
                return;
            }
            let Some(owned) = &self.partitions[partition] else { return };
            if let Some(read) = owned.flash_probe(hash, key, self.now_secs) {
                keys.push(FlashKey { partition, hash, key: key.to_vec(), read, plain_get });
            }
        };
        match request {
            Request::Get { keys, .. } => qs_proto::tokens::words(keys).for_each(&mut probe),
            Request::Store { mode: StoreMode::Set, .. } | Request::TooLarge { .. } => {}
            Request::Meta(meta) => probe(meta.key()),
            _ => {
                if let Some(key) = single_key_of(request) {
                    probe(key);
                }
            }
        }
    }

    /// `-e` with a flash tier: writes each owned partition's flash page as far as it holds
    /// (see [`qs_store::Partition::flash_write_partial`]).
    pub fn flash_write_partial(&mut self) {
        if self.flash_on {
            for partition in self.partitions.iter_mut().flatten() {
                partition.flash_write_partial();
            }
        }
    }

    /// The native protocol's flash path: when `key`'s record is on flash, reads it now (the
    /// worker waits for this one read: a page-cache copy, or the device's latency) and brings
    /// the item back to DRAM, so that the command run next finds it. A failed read counts as
    /// a flash miss and leaves the key as it was.
    pub fn flash_load_now(&mut self, hash: KeyHash, partition: usize, key: &[u8]) {
        if !self.flash_on {
            return;
        }
        let now = self.now_secs;
        let Some(owned) = self.partitions[partition].as_mut() else { return };
        let Some(mut read) = owned.flash_probe(hash, key, now) else { return };
        // A record longer than the first read asks for one more read of its whole length.
        for _ in 0..2 {
            let record = match owned.flash_place(read.offset, read.len) {
                None => Vec::new(),
                Some(qs_store::flash::Place::Buffer(bytes)) => {
                    let bytes = bytes.to_vec();
                    owned.flash_count_read(bytes.len(), true);
                    bytes
                }
                Some(qs_store::flash::Place::File(position)) => {
                    let mut bytes = Vec::with_capacity(read.len);
                    let direct = owned.flash_is_direct();
                    let read_ok = owned.flash_file().is_some_and(|file| {
                        qs_store::flash::read_at(&file, position, read.len, direct, &mut bytes)
                    });
                    if read_ok {
                        owned.flash_count_read(bytes.len(), false);
                    } else {
                        bytes.clear();
                    }
                    bytes
                }
            };
            if record.is_empty() {
                owned.flash_read_failed();
                return;
            }
            match owned.flash_resolve(hash, key, read, &record, now, false) {
                qs_store::Resolved::NeedBytes(len) if len > read.len => read.len = len,
                _ => return,
            }
        }
    }

    /// Forgets the flash keys resolved for the request that has now run.
    #[inline]
    pub fn flash_forget(&mut self) {
        if !self.flash_resolved.is_empty() {
            self.flash_resolved.clear();
        }
    }

    /// A plain get of a key whose record was read from flash and is to be served from it;
    /// `None` when there is none (or it stopped being the key's: run as usual).
    fn read_flash(
        &mut self,
        hash: KeyHash,
        partition: usize,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<Outcome> {
        let at = self
            .flash_resolved
            .iter()
            .position(|resolved| resolved.hash == hash && resolved.serve.is_some())?;
        let (read, record) = self.flash_resolved[at].serve.take()?;
        let owned = self.partitions[partition].as_mut()?;
        let request = qs_store::Request { key, hash, command: Command::Get };
        match owned.serve_from_flash(&request, read, &record, self.now_secs, out) {
            Some(Ok(outcome)) => Some(outcome),
            _ => None,
        }
    }

    /// Runs `request` here, appending its reply to `out` (nothing for noreply).
    pub fn execute(&mut self, request: &Request<'_>, out: &mut Vec<u8>) -> Exec {
        match *request {
            Request::Get { kind, keys } => {
                if let Some(key) = qs_proto::tokens::single_word(keys) {
                    if !self.get_one(kind, key, out) {
                        out.extend_from_slice(reply::BAD_FORMAT);
                        return Exec::Done;
                    }
                    out.extend_from_slice(reply::END);
                    return Exec::Done;
                }
                self.get_many(kind, keys, out, usize::MAX);
            }
            Request::Store { mode, key, flags, exptime, data, noreply } => {
                let reply = self.store(mode, key, flags, exptime, data);
                if !noreply {
                    out.extend_from_slice(reply);
                }
            }
            Request::TooLarge { mode, key, noreply } => {
                self.counters.cmd_set += 1;
                self.counters.store_too_large += 1;
                self.shared.detail.record_set(key);
                if mode == StoreMode::Set {
                    self.run(key, Command::Delete { cas: 0 }, &mut Vec::new());
                }
                if !noreply {
                    out.extend_from_slice(reply::TOO_LARGE);
                }
            }
            Request::Delete { key, noreply } => {
                self.shared.detail.record_delete(key);
                self.log_lookup(key);
                let reply = match self.run(key, Command::Delete { cas: 0 }, &mut Vec::new()) {
                    Outcome::Deleted => reply::DELETED,
                    _ => reply::NOT_FOUND,
                };
                if !noreply {
                    out.extend_from_slice(reply);
                }
            }
            Request::Arith { key, delta, decrement, noreply } => {
                self.log_lookup(key);
                let outcome = self.run(key, Command::Arith { delta, decrement, cas: 0 }, &mut Vec::new());
                if !noreply {
                    match outcome {
                        Outcome::Counter { value, .. } => {
                            reply::push_u64(out, value);
                            out.extend_from_slice(b"\r\n");
                        }
                        Outcome::NonNumeric => out.extend_from_slice(reply::NON_NUMERIC),
                        Outcome::OutOfMemory => out.extend_from_slice(reply::ARITH_OUT_OF_MEMORY),
                        _ => out.extend_from_slice(reply::NOT_FOUND),
                    }
                }
            }
            Request::Touch { key, exptime, noreply } => {
                self.counters.cmd_touch += 1;
                let expiry = self.expiry(exptime);
                self.log_lookup(key);
                let reply = match self.run(key, Command::Touch { expiry }, &mut Vec::new()) {
                    Outcome::Touched => reply::TOUCHED,
                    _ => reply::NOT_FOUND,
                };
                if !noreply {
                    out.extend_from_slice(reply);
                }
            }
            Request::FlushAll { .. } if self.shared.config.disable_flush_all => {
                out.extend_from_slice(b"CLIENT_ERROR flush_all not allowed\r\n");
            }
            Request::FlushAll { delay, noreply } => {
                self.flush_local(delay);
                if !noreply {
                    out.extend_from_slice(reply::OK);
                }
            }
            Request::Stats { group: b"detail", argument } => self.shared.detail.command(argument, out),
            Request::Stats { group: b"hotkeys", argument } => {
                // This worker's own summary as of now; the others' as of their last publish.
                self.publish_hot(true);
                self.shared.hotkeys.command(argument, out);
            }
            Request::Stats { group: b"mrc", argument } => {
                // This worker's count as of now; the others' as of their last loop turn.
                self.turn_mrc();
                self.shared.mrc.command(argument, self.shared.maxbytes(), out);
                self.turn_mrc();
            }
            Request::Stats { group: b"conns", .. } => {
                self.shared.registry.write_stats(self.conn_fd, self.now_secs, out);
                out.extend_from_slice(reply::END);
            }
            Request::SlabsReassign { classes } => {
                let largest = crate::admin::stats::memcached_largest_class(&self.shared);
                out.extend_from_slice(slabs_reassign(classes, largest));
            }
            Request::CacheMemlimit { megabytes, noreply } => {
                let reply = self.cache_memlimit(megabytes);
                if !noreply {
                    out.extend_from_slice(reply);
                }
            }
            Request::CacheDump { args } => self.cache_dump(args, out),
            Request::SlabsAutomove { noreply } => {
                if !noreply {
                    out.extend_from_slice(reply::OK);
                }
            }
            Request::DebugTime { delta } => {
                if self.shared.config.enable_debugtime {
                    crate::sys::shift_clock(delta);
                    self.now_secs = crate::sys::now_secs();
                    out.extend_from_slice(reply::OK);
                } else {
                    out.extend_from_slice(b"ERROR\r\n");
                }
            }
            Request::Stats { group, .. } => {
                // This worker's own figures as of now, not as of its last loop turn.
                self.publish();
                crate::admin::stats::write(&self.shared, group, out)
            }
            Request::Version => out.extend_from_slice(VERSION_REPLY),
            Request::Verbosity { noreply } => {
                if !noreply {
                    out.extend_from_slice(reply::OK);
                }
            }
            Request::Quit => return Exec::Close,
            // The worker turns a stream connection into a watcher; a datagram cannot be one.
            Request::Watch { .. } => out.extend_from_slice(b"ERROR\r\n"),
            Request::MetaNoop => out.extend_from_slice(b"MN\r\n"),
            Request::Meta(ref meta) => return self.meta(meta, out),
            Request::Crawl { classes } => out.extend_from_slice(self.crawl(classes)),
            Request::CrawlerSwitch { enable } => {
                let was = self.shared.crawler_enabled.swap(enable, Relaxed);
                out.extend_from_slice(match (enable, was) {
                    // As memcached: starting a running crawler fails; stopping always succeeds.
                    (true, true) => b"ERROR failed to start lru crawler thread\r\n",
                    _ => reply::OK,
                });
            }
            Request::CrawlerPacing => out.extend_from_slice(reply::OK),
            Request::Binary(ref binary) => return self.binary(binary, out),
            Request::RefreshCerts { noreply } => {
                let refreshed = match &self.shared.tls {
                    Some(tls) => tls.refresh(crate::sys::now_secs()),
                    None => Err("Error TLS not enabled".into()),
                };
                match refreshed {
                    Ok(()) if noreply => {}
                    Ok(()) => out.extend_from_slice(reply::OK),
                    // As memcached: the error goes back even with noreply.
                    Err(message) => {
                        out.extend_from_slice(message.as_bytes());
                        out.extend_from_slice(b"\r\n");
                    }
                }
            }
            Request::Shutdown { mode } => {
                if !self.shared.config.enable_shutdown {
                    out.extend_from_slice(b"ERROR: shutdown not enabled\r\n");
                } else if mode == ShutdownMode::Invalid {
                    out.extend_from_slice(b"CLIENT_ERROR invalid shutdown mode\r\n");
                } else {
                    // memcached closes this connection without a reply and stops as on a
                    // signal; here both modes are the graceful stop of SIGTERM.
                    self.shared.request_stop();
                    return Exec::Close;
                }
            }
            Request::Metadump { .. } => {
                // A dump runs a chunk at a time from the connection (crate::worker); one that
                // reaches the engine came where it cannot stream (a UDP datagram).
                out.extend_from_slice(b"ERROR metadump not allowed\r\n");
            }
        }
        Exec::Done
    }

    /// `lru_crawler crawl <classes>`: memcached's background reclaim of expired items. Here an
    /// expired item is dropped when a request finds it, and its memory returns when the log's
    /// head passes it (the index scan clears its slot), so there is nothing to start: the
    /// reply is memcached's.
    fn crawl(&self, classes: &[u8]) -> &'static [u8] {
        if !self.shared.crawler_enabled.load(Relaxed) {
            return CRAWLER_DISABLED;
        }
        match qs_proto::crawler_classes(classes) {
            None => BAD_CLASS,
            // memcached answers this when the crawler finds no class to start on.
            Some(_) if classes == b"hash" => b"ERROR an unknown error happened\r\n",
            Some(_) => reply::OK,
        }
    }

    /// One chunk of `lru_crawler metadump`: the items of main buckets `buckets` of `partition`
    /// (owned here), one line each.
    pub fn dump_chunk(&self, partition: usize, buckets: std::ops::Range<usize>, out: &mut Vec<u8>) {
        let Some(owned) = &self.partitions[partition] else { return };
        owned.dump(buckets, self.now_secs, |item| {
            let line = reply::DumpItem {
                key: item.key,
                expires: (item.expiry != Expiry::NEVER).then_some(item.expiry.0),
                last_access: item.last_access_secs,
                cas: self.cas_out(item.cas),
                fetched: item.fetched,
                size: debug_size(item.key.len(), item.value_len) as u64,
            };
            reply::metadump_line(out, &line);
        });
    }

    /// memcached's `cache_memlimit`: every worker runs it (a broadcast) on the partitions it
    /// owns; the reply of the worker the client sent it to is the one sent.
    fn cache_memlimit(&mut self, megabytes: u32) -> &'static [u8] {
        if megabytes < 8 {
            return b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n";
        }
        if megabytes > 1_000_000_000 {
            return b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n";
        }
        let shared = &self.shared;
        let per_partition = ((u64::from(megabytes) << 20) / shared.partitions.len() as u64) as usize & !7;
        // A memory file's logs keep the size the file was laid out for (-e).
        let fixed = shared.store_mode || shared.config.memory_file.is_some();
        if fixed || per_partition > shared.log_room || per_partition < shared.log_limit_min {
            return b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n";
        }
        for partition in self.partitions.iter_mut().flatten() {
            partition.set_log_limit(per_partition);
        }
        if !self.for_other {
            self.shared.log_bytes.store(per_partition, Relaxed);
            if self.shared.config.verbose > 0 {
                eprintln!("maxbytes adjusted to {megabytes}m");
            }
        }
        reply::OK
    }

    /// memcached's `stats cachedump <class> <limit>`: quicksilver's one class (1, the log)
    /// lists up to `limit` items (0: all), at most 2 MB of lines as memcached; other valid
    /// class ids are empty. Partitions of other workers are read through their CREW readers
    /// (under EREW only this worker's partitions are listed).
    fn cache_dump(&self, args: Option<(Option<u32>, Option<u32>)>, out: &mut Vec<u8>) {
        const REPLY_BYTES_MAX: usize = 2 << 20;
        if self.shared.config.disable_dumping {
            out.extend_from_slice(b"CLIENT_ERROR stats cachedump not allowed\r\n");
            return;
        }
        let Some(args) = args else {
            out.extend_from_slice(b"CLIENT_ERROR bad command line\r\n");
            return;
        };
        let (Some(class), Some(limit)) = args else {
            out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
            return;
        };
        if class >= crate::admin::stats::SLAB_CLASSES_MAX {
            out.extend_from_slice(b"CLIENT_ERROR Illegal slab id\r\n");
            return;
        }
        if class == crate::admin::stats::LOG_CLASS {
            let start = out.len();
            let mut shown = 0u32;
            let buckets = 0..self.shared.main_buckets;
            let mut line = |item: &qs_store::Dumped<'_>| {
                if (limit != 0 && shown >= limit) || out.len() - start > REPLY_BYTES_MAX - 600 {
                    return;
                }
                let expires = if item.expiry == Expiry::NEVER { 0 } else { item.expiry.0 };
                out.extend_from_slice(b"ITEM ");
                out.extend_from_slice(item.key);
                let _ = write!(out, " [{} b; {} s]\r\n", item.value_len, expires);
                shown += 1;
            };
            for (index, partition) in self.partitions.iter().enumerate() {
                match (partition, self.shared.readers.get(index)) {
                    (Some(owned), _) => owned.dump(buckets.clone(), self.now_secs, &mut line),
                    (None, Some(reader)) => reader.dump(buckets.clone(), self.now_secs, &mut line),
                    (None, None) => {}
                }
            }
        }
        out.extend_from_slice(reply::END);
    }

    /// flush_all on the partitions owned here.
    pub fn flush_local(&mut self, delay: i32) {
        if !self.for_other {
            // Counted once, where the client sent it (every worker runs it).
            self.counters.cmd_flush += 1;
        }
        let now = self.now_secs;
        for (partition, owned) in self.partitions.iter().enumerate() {
            if let (Some(_), Some(epochs)) = (owned, self.shared.front_epochs.get(partition)) {
                epochs.bump_all();
            }
        }
        // As an exptime: past 30 days, an absolute unix time (one already past flushes now).
        let delay = match i64::from(delay) {
            d if d <= 0 => 0,
            d if d <= qs_store::item::RELATIVE_EXPTIME_SECS_MAX => d as u32,
            at => (at as u32).saturating_sub(now),
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
        command: Command<'_>,
        out: &mut Vec<u8>,
    ) -> Option<Outcome> {
        let owned = self.partitions.get(partition)?.is_some();
        owned.then(|| self.run_at(hash, partition, key, command, out))
    }

    /// memcached's exptime as an expiry, by this turn's clock.
    pub fn expiry(&self, exptime: i32) -> Expiry {
        Expiry::from_exptime(exptime as i64, self.now_secs)
    }

    /// Runs one command on `key`'s partition (owned here: routing made sure).
    fn run(&mut self, key: &[u8], command: Command<'_>, out: &mut Vec<u8>) -> Outcome {
        let (hash, partition) = self.locate(key);
        self.run_at(hash, partition, key, command, out)
    }

    /// [`Engine::run`] with the key already hashed.
    fn run_at(
        &mut self,
        hash: KeyHash,
        partition: usize,
        key: &[u8],
        command: Command<'_>,
        out: &mut Vec<u8>,
    ) -> Outcome {
        self.offer(hash, key, &command);
        if let Some(epochs) = self.shared.front_epochs.get(partition) {
            // Before any change: other workers' front caches stop serving the key now.
            if !matches!(command, Command::Get) {
                epochs.bump(hash.0);
            }
        }
        let request = qs_store::Request { key, hash, command };
        let now = self.now_secs;
        match &mut self.partitions[partition] {
            Some(partition) => partition.run(&request, now, out),
            None => panic!("request for partition {partition} routed to worker {}", self.worker),
        }
    }

    /// `-o front_cache`: answers a plain `get` of `key` (another worker's) from this worker's
    /// front cache when it holds a reply still valid; `false` otherwise (hand it over).
    pub fn front_serve(&mut self, key: &[u8], out: &mut Vec<u8>) -> bool {
        if self.front.is_none() {
            return false;
        }
        let (hash, partition) = self.locate(key);
        let front = self.front.as_mut().expect("checked");
        let Some(reply) = front.get(hash.0, key, &self.shared.front_epochs[partition], self.now_secs) else {
            return false;
        };
        out.extend_from_slice(reply);
        // Counted as a hit of a read served here, as a CREW read is.
        self.counters.cmd_get += 1;
        self.counters.remote_get_hits += 1;
        self.counters.front_hits += 1;
        let counts = &mut self.remote_reads[partition];
        counts.0 += 1;
        counts.1 += 1;
        self.offer(hash, key, &Command::Get);
        true
    }

    /// `-o front_cache`, at the owner: what a handed-over plain `get` of `key` was answered
    /// under (the key's write epochs and this second), for the asking worker's front cache.
    pub fn front_tag(&self, key: &[u8]) -> Option<(qs_store::front::Epoch, u32)> {
        let (hash, partition) = self.locate(key);
        Some((self.shared.front_epochs.get(partition)?.read(hash.0), self.now_secs))
    }

    /// `-o front_cache`: keeps the owner's reply to a plain `get` of `key`, tagged by
    /// [`Engine::front_tag`].
    pub fn front_fill(&mut self, key: &[u8], reply: &[u8], tag: (qs_store::front::Epoch, u32)) {
        if reply.len() > FRONT_REPLY_BYTES_MAX || !reply.starts_with(b"VALUE ") {
            return;
        }
        let hash = self.locate(key).0;
        if let Some(front) = self.front.as_mut() {
            front.insert(hash.0, key, reply, tag.0, tag.1);
        }
    }

    /// Shows a command's key to `stats hotkeys` and `stats mrc`.
    #[inline(always)]
    fn offer(&mut self, hash: KeyHash, key: &[u8], command: &Command<'_>) {
        if self.hot_every != 0 {
            self.hot_countdown -= 1;
            if self.hot_countdown == 0 {
                self.hot_countdown = self.hot_gap();
                self.hot.offer(hash, key);
            }
        }
        if self.mrc_threshold != 0 {
            self.mrc_gets += u64::from(crate::observe::mrc::LiveMrc::is_get(command));
            if qs_store::mrc::sample_hash(hash.0) < self.mrc_threshold {
                self.mrc_batch.push((hash.0, crate::observe::mrc::LiveMrc::access_of(key, command)));
                if self.mrc_batch.len() == MRC_BATCH_MAX {
                    self.shared.mrc.record(&mut self.mrc_batch);
                }
            }
        }
    }

    /// Requests until the next counted one: 1 when every request is counted, else uniform in
    /// 1..2N (mean N), so that no periodic pattern of requests aliases with the sampling.
    #[inline(never)]
    fn hot_gap(&mut self) -> u32 {
        if self.hot_every <= 1 {
            return 1;
        }
        // xorshift64
        self.hot_rng ^= self.hot_rng << 13;
        self.hot_rng ^= self.hot_rng >> 7;
        self.hot_rng ^= self.hot_rng << 17;
        1 + (self.hot_rng % u64::from(2 * self.hot_every - 1)) as u32
    }

    /// Once per loop turn, before the worker waits: hands `stats mrc` this worker's sampled
    /// accesses and count of gets, and picks up its threshold (on, off, lowered).
    pub fn turn_mrc(&mut self) {
        self.shared.mrc.record(&mut self.mrc_batch);
        self.shared.mrc.publish_gets(self.worker, self.mrc_gets);
        self.mrc_threshold = self.shared.mrc.threshold();
    }

    /// A read of `key`: through the partition when owned, else through its CREW reader.
    fn read(&mut self, key: &[u8], command: Command<'_>, out: &mut Vec<u8>) -> Outcome {
        let (hash, partition) = self.locate(key);
        if self.flash_on && !self.flash_resolved.is_empty() && matches!(command, Command::Get) {
            if let Some(outcome) = self.read_flash(hash, partition, key, out) {
                self.offer(hash, key, &command);
                return outcome;
            }
        }
        if self.partitions[partition].is_some() || !matches!(command, Command::Get) {
            return self.run_at(hash, partition, key, command, out);
        }
        self.offer(hash, key, &command);
        self.read_remote(hash, partition, key, out)
    }

    /// A get through `partition`'s CREW reader (not offered to `stats hotkeys` and `stats mrc`:
    /// the caller does that).
    fn read_remote(&mut self, hash: KeyHash, partition: usize, key: &[u8], out: &mut Vec<u8>) -> Outcome {
        let (outcome, gone) = self.shared.readers[partition].get_telling(hash, key, self.now_secs, out);
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
        outcome
    }

    /// A get of several keys, bounded: runs them in order until the reply has grown by more
    /// than `budget` bytes, then stops and returns the keys not yet run (a suffix of `keys`,
    /// starting at a key), to be run as a get of their own once the client has read what is
    /// written; `None` when every key has run and END ends the reply. At least one key runs
    /// per call, so a resumed get always moves on.
    pub fn get_many<'k>(
        &mut self,
        kind: GetKind,
        keys: &'k [u8],
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
            self.get_one(kind, key, out);
            if out.len() - start > budget {
                if let Some(rest) = keys_after(keys, key) {
                    return Some(rest);
                }
            }
        }
        out.extend_from_slice(reply::END);
        None
    }

    /// One key of a get: its VALUE block (nothing on a miss). `false` for a key too long.
    pub fn get_one(&mut self, kind: GetKind, key: &[u8], out: &mut Vec<u8>) -> bool {
        if key.len() > qs_proto::KEY_BYTES_MAX {
            return false;
        }
        let touch = kind.touch().map(|exptime| self.expiry(exptime));
        let mut value = std::mem::take(&mut self.scratch);
        let outcome = self.fetch(key, touch, &mut value);
        if let Outcome::Hit(hit) = outcome {
            let cas = kind.with_cas().then_some(self.cas_out(hit.cas));
            reply::value_line(out, key, hit.flags, hit.value_len, cas);
            out.extend_from_slice(&value[hit.value_start..hit.value_start + hit.value_len]);
            out.extend_from_slice(b"\r\n");
        }
        self.scratch = value;
        true
    }

    /// A get of `key` for either protocol (with `touch`, a get-and-touch): counts it, reads it
    /// into `value` (cleared first), records it for `stats detail` and `watch fetchers`.
    fn fetch(&mut self, key: &[u8], touch: Option<Expiry>, value: &mut Vec<u8>) -> Outcome {
        self.counters.cmd_get += 1;
        let command = match touch {
            Some(expiry) => {
                self.counters.cmd_touch += 1;
                Command::GetAndTouch { expiry }
            }
            None => Command::Get,
        };
        value.clear();
        let outcome = self.read(key, command, value);
        self.shared.detail.record_get(key, matches!(outcome, Outcome::Hit(_)));
        if self.shared.watchers.wants(watch::FETCHERS) {
            let size = match &outcome {
                Outcome::Hit(hit) => Some(hit.value_len),
                _ => None,
            };
            self.log_get(key, size);
        }
        outcome
    }

    /// `watch fetchers`: a lookup of `key` that found a value of `size` bytes, or nothing.
    fn log_get(&self, key: &[u8], size: Option<usize>) {
        let status = if size.is_some() { "found" } else { "not_found" };
        self.shared.log(
            watch::FETCHERS,
            format_args!(
                "type=item_get key={} status={status} clsid={} cfd={} size={}",
                UriKey(key),
                size.map_or(0, |size| watch::slab_class(key.len(), size)),
                self.conn_fd,
                size.unwrap_or(0)
            ),
        );
    }

    /// `watch fetchers`: memcached logs the lookup a store, delete, incr/decr or touch makes
    /// of the key's current item; so does this (a look that changes nothing, only while
    /// someone watches).
    fn log_lookup(&self, key: &[u8]) {
        if !self.shared.watchers.wants(watch::FETCHERS) || key.len() > qs_proto::KEY_BYTES_MAX {
            return;
        }
        let (hash, partition) = self.locate(key);
        if let Some(owned) = &self.partitions[partition] {
            self.log_get(key, owned.peek(hash, key, self.now_secs));
        }
    }

    /// `watch mutations`: a store's outcome, as memcached's `item_store` line.
    fn log_store(
        &self,
        key: &[u8],
        outcome: &Outcome,
        mode: qs_store::StoreMode,
        expiry: Expiry,
        size: usize,
    ) {
        if !self.shared.watchers.wants(watch::MUTATIONS) {
            return;
        }
        let status = match outcome {
            Outcome::Stored { .. } => "stored",
            Outcome::Exists => "exists",
            Outcome::NotFound => "not_found",
            Outcome::TooLarge => "too_large",
            Outcome::OutOfMemory => "no_memory",
            _ => "not_stored",
        };
        let command = match mode {
            qs_store::StoreMode::Set => "set",
            qs_store::StoreMode::Add => "add",
            qs_store::StoreMode::Replace => "replace",
            qs_store::StoreMode::Append | qs_store::StoreMode::AppendCas(_) => "append",
            qs_store::StoreMode::Prepend | qs_store::StoreMode::PrependCas(_) => "prepend",
            _ => "cas",
        };
        let ttl = ttl_secs(expiry, self.now_secs).max(0);
        // An append or prepend that stored logs the joined item's size, as memcached does.
        let joined = matches!(command, "append" | "prepend") && matches!(outcome, Outcome::Stored { .. });
        let size = if joined {
            let (hash, partition) = self.locate(key);
            let peeked =
                self.partitions[partition].as_ref().and_then(|owned| owned.peek(hash, key, self.now_secs));
            peeked.unwrap_or(size)
        } else {
            size
        };
        self.shared.log(
            watch::MUTATIONS,
            format_args!(
                "type=item_store key={} status={status} cmd={command} ttl={ttl} clsid={} cfd={} size={size}",
                UriKey(key),
                watch::slab_class(key.len(), size),
                self.conn_fd
            ),
        );
    }

    /// `watch evictions`: the items this worker's partitions evicted since the last call
    /// (recording starts when someone watches evictions, stops when no one does).
    pub fn log_evictions(&mut self) {
        let wanted = self.shared.watchers.wants(watch::EVICTIONS);
        if !wanted && !self.recording_evictions {
            // The common case: one relaxed load per loop turn.
            return;
        }
        self.recording_evictions = wanted;
        for partition in self.partitions.iter_mut().flatten() {
            partition.record_evictions(wanted);
            for item in partition.take_evictions() {
                let ttl = ttl_secs(item.expiry, self.now_secs);
                self.shared.log(
                    watch::EVICTIONS,
                    format_args!(
                        "type=eviction key={} fetch={} ttl={ttl} la={} clsid={} size={}",
                        UriKey(&item.key),
                        if item.fetched { "yes" } else { "no" },
                        self.now_secs.saturating_sub(item.last_access_secs),
                        watch::slab_class(item.key.len(), item.value_len),
                        item.value_len
                    ),
                );
            }
        }
    }

    fn store(&mut self, mode: StoreMode, key: &[u8], flags: u32, exptime: i32, data: &[u8]) -> &'static [u8] {
        let expiry = self.expiry(exptime);
        match self.store_outcome(store_mode(mode), key, flags, expiry, data) {
            Outcome::Stored { .. } => reply::STORED,
            Outcome::NotStored => reply::NOT_STORED,
            Outcome::Exists => reply::EXISTS,
            Outcome::NotFound => reply::NOT_FOUND,
            Outcome::TooLarge => reply::TOO_LARGE,
            Outcome::OutOfMemory => reply::OUT_OF_MEMORY,
            _ => reply::BAD_FORMAT,
        }
    }

    /// A store of either protocol: counts it, logs it, and drops the old value of a set that
    /// could not be stored, as memcached does.
    fn store_outcome(
        &mut self,
        mode: qs_store::StoreMode,
        key: &[u8],
        flags: u32,
        expiry: Expiry,
        data: &[u8],
    ) -> Outcome {
        self.counters.cmd_set += 1;
        self.shared.detail.record_set(key);
        self.log_lookup(key);
        let unchecked = matches!(mode, qs_store::StoreMode::Cas(_)) && self.shared.config.disable_cas;
        // -C: memcached's items carry CAS 0, so a cas store succeeds whenever the item exists.
        let mode = if unchecked { qs_store::StoreMode::Replace } else { mode };
        let mut outcome = self.run(key, Command::Store { mode, value: data, flags, expiry }, &mut Vec::new());
        if unchecked && outcome == Outcome::NotStored {
            outcome = Outcome::NotFound;
        }
        self.log_store(key, &outcome, mode, expiry, data.len());
        // memcached (-M for out of memory) drops the old value of a set it could not store.
        if matches!(outcome, Outcome::TooLarge | Outcome::OutOfMemory) && mode == qs_store::StoreMode::Set {
            self.run(key, Command::Delete { cas: 0 }, &mut Vec::new());
        }
        outcome
    }

    fn meta(&mut self, meta: &Meta<'_>, out: &mut Vec<u8>) -> Exec {
        self.counters.meta_cmds += 1;
        match meta.command {
            MetaCommand::Get => return self.meta_get(meta, out),
            MetaCommand::Set => self.meta_set(meta, out),
            MetaCommand::Delete => self.meta_delete(meta, out),
            MetaCommand::Arith => self.meta_arith(meta, out),
            MetaCommand::Debug => self.meta_debug(meta, out),
        }
        Exec::Done
    }

    fn meta_item(&self, hit: &qs_store::Hit) -> MetaItem {
        MetaItem {
            cas: self.cas_out(hit.cas),
            flags: hit.flags,
            value_len: hit.value_len,
            ttl_secs: ttl_secs(hit.expiry, self.now_secs),
            idle_secs: self.now_secs.saturating_sub(hit.last_access_secs),
            fetched_before: hit.fetched_before,
        }
    }

    /// The expiry a meta request's flags give an item: memcached applies N (only to an item
    /// this request `created`) and T in the order the request lists them, starting from
    /// `start`. With `until_t`, the expiry as it stands where the `t` flag is (what `t` reports).
    fn expiry_in_flag_order(&self, meta: &Meta<'_>, start: Expiry, created: bool, until_t: bool) -> Expiry {
        let options = &meta.options;
        let mut expiry = start;
        for token in meta.flag_tokens() {
            match token[0] {
                b'N' if created => expiry = options.vivify.map_or(expiry, |ttl| self.expiry(ttl)),
                b'T' => expiry = options.ttl.map_or(expiry, |ttl| self.expiry(ttl)),
                b't' if until_t => return expiry,
                _ => {}
            }
        }
        expiry
    }

    fn meta_get(&mut self, meta: &Meta<'_>, out: &mut Vec<u8>) -> Exec {
        let options = &meta.options;
        let key = meta.key();
        let (hash, partition) = self.locate(key);
        let owned = self.partitions[partition].is_some();
        self.counters.cmd_get += 1;
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        let outcome = if owned {
            let touch = options.ttl.map(|ttl| self.expiry(ttl));
            // An item created on a miss ends with the expiry its N and T leave in request order.
            let vivify = options.vivify.map(|_| self.expiry_in_flag_order(meta, Expiry::NEVER, true, false));
            let recache_below_secs = options.recache.map(|secs| secs.max(0) as u32);
            if touch.is_some() {
                self.counters.cmd_touch += 1;
            }
            let letters = || meta.flag_tokens().map(|token| token[0]);
            let recache_before_touch = options.recache.is_some()
                && letters().position(|l| l == b'R') < letters().position(|l| l == b'T');
            let no_update = options.has(b'u');
            let options = MetaGet { touch, vivify, recache_below_secs, recache_before_touch, no_update };
            self.run(key, Command::MetaGet(options), &mut value)
        } else {
            self.read_remote(hash, partition, key, &mut value)
        };
        // The win token is the owner's to hand out, and the first fetch marks the item fetched
        // (meta `h`): both are writes, so the owner serves them (and shows the key to `stats
        // hotkeys` and `stats mrc` then, once).
        let for_owner =
            |hit: &qs_store::Hit| (hit.stale && !hit.win_sent) || (!hit.fetched_before && !options.has(b'u'));
        if !owned {
            if let Outcome::Hit(hit) = &outcome {
                if for_owner(hit) {
                    self.scratch = value;
                    return Exec::Forward(self.owner(partition));
                }
            }
            self.offer(hash, key, &Command::Get);
        }
        let (item, data, won, stale, win_sent) = match outcome {
            Outcome::Hit(hit) => {
                let data = hit.value_start..hit.value_start + hit.value_len;
                let mut item = self.meta_item(&hit);
                if options.has(b't') && options.ttl.is_some() {
                    // `t` before `T` reads the expiry before the touch.
                    let shown = self.expiry_in_flag_order(meta, hit.expiry_before, false, true);
                    item.ttl_secs = ttl_secs(shown, self.now_secs);
                }
                (item, data, hit.won, hit.stale, hit.win_sent)
            }
            Outcome::Vivified { cas } => {
                let shown = self.expiry_in_flag_order(meta, Expiry::NEVER, true, true);
                let ttl_secs = ttl_secs(shown, self.now_secs);
                (
                    MetaItem { cas: self.cas_out(cas), ttl_secs, ..MetaItem::default() },
                    0..0,
                    true,
                    false,
                    false,
                )
            }
            _ => {
                if self.shared.watchers.wants(watch::FETCHERS) {
                    self.log_get(key, None);
                }
                if !options.quiet() {
                    // A miss reflects only the request's key (k) and opaque (O).
                    out.extend_from_slice(b"EN");
                    reply::meta_flags(out, meta, None, b"");
                    out.extend_from_slice(b"\r\n");
                }
                self.scratch = value;
                return Exec::Done;
            }
        };
        if self.shared.watchers.wants(watch::FETCHERS) {
            self.log_get(key, Some(item.value_len));
        }
        let with_value = options.has(b'v');
        if with_value {
            out.extend_from_slice(b"VA ");
            reply::push_u64(out, item.value_len as u64);
        } else {
            out.extend_from_slice(b"HD");
        }
        reply::meta_flags(out, meta, Some(&item), b"cfstlh");
        if win_sent {
            out.extend_from_slice(b" Z");
        }
        if stale {
            out.extend_from_slice(b" X");
        }
        if won {
            out.extend_from_slice(b" W");
        }
        out.extend_from_slice(b"\r\n");
        if with_value {
            out.extend_from_slice(&value[data]);
            out.extend_from_slice(b"\r\n");
        }
        self.scratch = value;
        Exec::Done
    }

    fn meta_set(&mut self, meta: &Meta<'_>, out: &mut Vec<u8>) {
        let options = &meta.options;
        let key = meta.key();
        self.counters.cmd_set += 1;
        let mut mode = match options.mode {
            Some(b'E') => qs_store::StoreMode::Add,
            Some(b'A') => qs_store::StoreMode::Append,
            Some(b'P') => qs_store::StoreMode::Prepend,
            Some(b'R') => qs_store::StoreMode::Replace,
            _ => qs_store::StoreMode::Set,
        };
        if let Some(cas) = options.cas {
            // As memcached: set and replace compare the CAS (with I, an older one stores the
            // value marked stale), append and prepend compare a nonzero one, add ignores it.
            mode = match mode {
                // C0 never matches, and is no older version either: memcached answers EX.
                qs_store::StoreMode::Set | qs_store::StoreMode::Replace if options.has(b'I') && cas != 0 => {
                    qs_store::StoreMode::CasOrStale(cas)
                }
                qs_store::StoreMode::Set | qs_store::StoreMode::Replace => qs_store::StoreMode::Cas(cas),
                qs_store::StoreMode::Append if cas != 0 => qs_store::StoreMode::AppendCas(cas),
                qs_store::StoreMode::Prepend if cas != 0 => qs_store::StoreMode::PrependCas(cas),
                other => other,
            };
        }
        if meta.too_large(&self.limits) {
            self.run(key, Command::Delete { cas: 0 }, &mut Vec::new());
            out.extend_from_slice(reply::TOO_LARGE);
            return;
        }
        let expiry = self.expiry(options.ttl.unwrap_or(0));
        let command = Command::Store { mode, value: meta.data, flags: options.client_flags, expiry };
        self.log_lookup(key);
        let outcome = self.run(key, command, &mut Vec::new());
        self.log_store(key, &outcome, mode, expiry, meta.data.len());
        let (code, cas) = match outcome {
            Outcome::Stored { cas } => ("HD", cas),
            Outcome::NotStored => ("NS", 0),
            Outcome::Exists => ("EX", 0),
            Outcome::NotFound => ("NF", 0),
            Outcome::TooLarge => {
                self.run(key, Command::Delete { cas: 0 }, &mut Vec::new());
                out.extend_from_slice(reply::TOO_LARGE);
                return;
            }
            Outcome::OutOfMemory => {
                // As memcached -M: the old value does not outlive a refused ms.
                self.run(key, Command::Delete { cas: 0 }, &mut Vec::new());
                out.extend_from_slice(reply::OUT_OF_MEMORY);
                return;
            }
            _ => {
                out.extend_from_slice(reply::BAD_FORMAT);
                return;
            }
        };
        if code == "HD" && options.quiet() {
            return;
        }
        out.extend_from_slice(code.as_bytes());
        let item = MetaItem { cas: self.cas_out(cas), ..MetaItem::default() };
        reply::meta_flags(out, meta, Some(&item), b"c");
        out.extend_from_slice(b"\r\n");
    }

    fn meta_delete(&mut self, meta: &Meta<'_>, out: &mut Vec<u8>) {
        let options = &meta.options;
        let key = meta.key();
        // memcached's md compares any C, C0 included (no item has CAS 0, so it answers EX);
        // to the store a CAS of 0 means "unconditional", so C0 becomes one no item can have.
        let cas = options.cas.map_or(0, |cas| if cas == 0 { u64::MAX } else { cas });
        self.log_lookup(key);
        let outcome = if options.has(b'I') {
            let outcome = self.run(key, Command::Invalidate { cas }, &mut Vec::new());
            if let (Outcome::Deleted, Some(ttl)) = (outcome, options.ttl) {
                let expiry = self.expiry(ttl);
                self.run(key, Command::SetExpiry { expiry }, &mut Vec::new());
            }
            outcome
        } else {
            self.run(key, Command::Delete { cas }, &mut Vec::new())
        };
        let code: &[u8] = match outcome {
            Outcome::Deleted if options.quiet() => return,
            Outcome::Deleted => b"HD",
            Outcome::Exists => b"EX",
            _ => b"NF",
        };
        out.extend_from_slice(code);
        reply::meta_flags(out, meta, None, b"");
        out.extend_from_slice(b"\r\n");
    }

    fn meta_arith(&mut self, meta: &Meta<'_>, out: &mut Vec<u8>) {
        let options = &meta.options;
        let key = meta.key();
        let decrement = meta.decrement();
        let command = Command::Arith { delta: options.delta, decrement, cas: options.cas.unwrap_or(0) };
        self.log_lookup(key);
        let mut outcome = self.run(key, command, &mut Vec::new());
        // memcached 1.6 answers a counter created on a miss (N) even in quiet mode; q silences
        // only a delta applied to an existing counter, value (v) included.
        let mut created = false;
        if outcome == Outcome::NotFound && options.vivify.is_some() {
            let expiry = self.expiry_in_flag_order(meta, Expiry::NEVER, true, false);
            let mut digits = itoa::Buffer::new();
            let value = digits.format(options.initial).as_bytes();
            let store = Command::Store { mode: qs_store::StoreMode::Add, value, flags: 0, expiry };
            outcome = match self.run(key, store, &mut Vec::new()) {
                Outcome::Stored { cas } => {
                    created = true;
                    Outcome::Counter { value: options.initial, cas, expiry }
                }
                _ => Outcome::NotStored,
            };
        }
        let (value, cas, expiry) = match outcome {
            Outcome::Counter { value, cas, expiry } => (value, cas, expiry),
            Outcome::NonNumeric => {
                out.extend_from_slice(reply::NON_NUMERIC);
                return;
            }
            Outcome::OutOfMemory => {
                out.extend_from_slice(reply::ARITH_OUT_OF_MEMORY);
                return;
            }
            other => {
                out.extend_from_slice(match other {
                    Outcome::Exists => b"EX",
                    Outcome::NotStored => b"NS",
                    _ => b"NF",
                });
                reply::meta_flags(out, meta, None, b"");
                out.extend_from_slice(b"\r\n");
                return;
            }
        };
        if let (Some(ttl), false) = (options.ttl, created) {
            let expiry = self.expiry(ttl);
            self.run(key, Command::SetExpiry { expiry }, &mut Vec::new());
        }
        // A created counter already has its final expiry; `t` reads it where the flag stands.
        let start = if created { Expiry::NEVER } else { expiry };
        let ttl_secs = self::ttl_secs(self.expiry_in_flag_order(meta, start, created, true), self.now_secs);
        let mut digits = itoa::Buffer::new();
        let number = digits.format(value).as_bytes();
        if options.quiet() && !created {
            return;
        }
        if options.has(b'v') {
            out.extend_from_slice(b"VA ");
            reply::push_u64(out, number.len() as u64);
        } else {
            out.extend_from_slice(b"HD");
        }
        let item = MetaItem { cas: self.cas_out(cas), ttl_secs, ..MetaItem::default() };
        reply::meta_flags(out, meta, Some(&item), b"ct");
        out.extend_from_slice(b"\r\n");
        if options.has(b'v') {
            out.extend_from_slice(number);
            out.extend_from_slice(b"\r\n");
        }
    }

    fn meta_debug(&mut self, meta: &Meta<'_>, out: &mut Vec<u8>) {
        let key = meta.key();
        let (hash, partition) = self.locate(key);
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        // A side-effect-free look: the reader when there is one, else a plain get.
        let outcome = match self.shared.readers.get(partition) {
            Some(reader) => reader.get(hash, key, self.now_secs, &mut value),
            None => self.run(key, Command::Get, &mut value),
        };
        self.scratch = value;
        let Outcome::Hit(hit) = outcome else {
            out.extend_from_slice(b"EN\r\n");
            return;
        };
        out.extend_from_slice(b"ME ");
        out.extend_from_slice(meta.key_token);
        out.extend_from_slice(b" exp=");
        reply::push_i64(out, ttl_secs(hit.expiry, self.now_secs));
        out.extend_from_slice(b" la=");
        reply::push_u64(out, self.now_secs.saturating_sub(hit.last_access_secs) as u64);
        out.extend_from_slice(b" cas=");
        reply::push_u64(out, self.cas_out(hit.cas));
        out.extend_from_slice(if hit.fetched_before { b" fetch=yes" } else { b" fetch=no" });
        out.extend_from_slice(b" cls=1 size=");
        reply::push_u64(out, debug_size(key.len(), hit.value_len) as u64);
        out.extend_from_slice(b"\r\n");
    }

    /// Whether keys were counted since the last publish (the worker then wakes within
    /// [`crate::observe::hotkeys::PUBLISH_EVERY`] to publish them even if it has nothing else to do).
    pub fn hot_dirty(&self) -> bool {
        self.hot.accesses() != self.hot_published_accesses
    }

    /// Once per loop turn (`now`: at once): publishes this worker's hot keys when they changed
    /// and the last publish is older than [`crate::observe::hotkeys::PUBLISH_EVERY`], and picks up
    /// `stats hotkeys on|off|sample|reset`. The clock is looked at every 16th turn while busy.
    /// Sampled counts are published scaled up by the sampling rate.
    pub fn publish_hot(&mut self, now: bool) {
        self.hot_turns = self.hot_turns.wrapping_add(1);
        if !now && self.hot_turns % 16 != 0 && self.hot_every == self.shared.hotkeys.every() {
            return;
        }
        let every = self.shared.hotkeys.every();
        if self.hot_every != every {
            self.hot_every = every;
            self.hot_countdown = self.hot_gap();
        }
        let generation = self.shared.hotkeys.generation();
        if generation != self.hot_generation {
            self.hot_generation = generation;
            self.hot.clear();
            self.hot_published_accesses = 0;
            return;
        }
        if !self.hot_dirty()
            || !(now || self.hot_published.elapsed() >= crate::observe::hotkeys::PUBLISH_EVERY)
        {
            return;
        }
        self.hot_published = std::time::Instant::now();
        self.hot_published_accesses = self.hot.accesses();
        let scale = u64::from(self.hot_every.max(1));
        let mut top = self.hot.top();
        for hot in &mut top {
            hot.count *= scale;
            hot.error *= scale;
        }
        self.shared.hotkeys.publish(self.worker, top);
    }

    /// Publishes this worker's partition figures and counters for `stats`.
    pub fn publish(&self) {
        for (index, partition) in self.partitions.iter().enumerate() {
            if let Some(partition) = partition {
                *self.shared.partitions[index].lock().unwrap_or_else(|e| e.into_inner()) =
                    partition.stats_snapshot();
                if let (Some(figures), Some(slot)) = (partition.flash_stats(), self.shared.flash.get(index)) {
                    let bit = 1u64 << (index % 64);
                    if figures.0.failed && self.flash_off_said.get() & bit == 0 {
                        self.flash_off_said.set(self.flash_off_said.get() | bit);
                        eprintln!(
                            "quicksilver: partition {index}: a flash write failed; its flash tier is off \
                             (items leaving DRAM are evicted, flash items still in place answer; stats: extstore_failed)"
                        );
                    }
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = figures;
                }
            }
        }
        let mut published =
            self.shared.workers_published[self.worker].lock().unwrap_or_else(|e| e.into_inner());
        published.counters = self.counters;
        published.remote_reads.clone_from(&self.remote_reads);
    }
}

/// `lru_crawler` refusals, as memcached words them.
pub const CRAWLER_DISABLED: &[u8] = b"CLIENT_ERROR lru crawler disabled\r\n";
/// A class list that names no class (see [`qs_proto::crawler_classes`]).
pub const BAD_CLASS: &[u8] = b"BADCLASS invalid class id\r\n";

/// The `size=` that `me` and `lru_crawler metadump` report: the item's bytes in the log
/// (header with its extension word, key and value), as memcached reports its item's.
fn debug_size(key_len: usize, value_len: usize) -> usize {
    qs_store::item::item_bytes(key_len, value_len, true)
}

/// A get of one key in the form of `kind`, as request bytes (to hand one key to its owner).
pub fn single_get_line(kind: GetKind, key: &[u8], line: &mut Vec<u8>) {
    match kind {
        GetKind::Get => line.extend_from_slice(b"get "),
        GetKind::Gets => line.extend_from_slice(b"gets "),
        GetKind::Gat { exptime } | GetKind::Gats { exptime } => {
            line.extend_from_slice(if kind.with_cas() { b"gats " } else { b"gat " });
            reply::push_i64(line, exptime as i64);
            line.push(b' ');
        }
    }
    line.extend_from_slice(key);
    line.extend_from_slice(b"\r\n");
}

/// The key of a request that names exactly one.
fn single_key_of<'a>(request: &'a Request<'_>) -> Option<&'a [u8]> {
    match request {
        Request::Get { keys, .. } => qs_proto::tokens::single_word(keys),
        Request::Store { key, .. }
        | Request::TooLarge { key, .. }
        | Request::Delete { key, .. }
        | Request::Arith { key, .. }
        | Request::Touch { key, .. } => Some(key),
        // A base64 key is decoded into the request itself: its address is not the buffer's.
        Request::Meta(meta) if !meta.options.base64() => Some(meta.key()),
        Request::Binary(binary) => binary.command.key(),
        _ => None,
    }
}

fn store_mode(mode: StoreMode) -> qs_store::StoreMode {
    match mode {
        StoreMode::Set => qs_store::StoreMode::Set,
        StoreMode::Add => qs_store::StoreMode::Add,
        StoreMode::Replace => qs_store::StoreMode::Replace,
        StoreMode::Append => qs_store::StoreMode::Append,
        StoreMode::Prepend => qs_store::StoreMode::Prepend,
        StoreMode::Cas(cas) => qs_store::StoreMode::Cas(cas),
    }
}

/// Remaining seconds of an expiry, -1 for none (meta `t`).
fn ttl_secs(expiry: Expiry, now_secs: u32) -> i64 {
    if expiry == Expiry::NEVER {
        -1
    } else {
        (expiry.0 as i64 - now_secs as i64).max(0)
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
