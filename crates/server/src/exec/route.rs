//! Where a request runs: its key hashed once and located (partition, then bucket and item
//! prefetched), and the worker that must run it ([`Route`]).

use super::*;

impl Engine {
    pub(super) fn locate(&self, key: &[u8]) -> Located {
        let hash = KeyHash::of(key);
        (hash, self.shared.map.partition_of(hash))
    }

    /// `bytes` as a request's key: placed where `at` says (the window located this very key),
    /// else hashed now.
    #[inline(always)]
    pub fn key<'k>(&self, bytes: &'k [u8], at: Option<Located>) -> Key<'k> {
        let (hash, partition) = at.unwrap_or_else(|| self.locate(bytes));
        debug_assert_eq!(hash, KeyHash::of(bytes), "a key located as another");
        Key { bytes, hash, partition }
    }

    /// The one key of a single-key request, located; `None` for other requests and for keys
    /// too long to look up.
    pub fn locate_request(&self, request: &Request<'_>) -> Option<Located> {
        let key = single_key_of(request)?;
        // A Redis key may be 64 KiB; memcached's longer than 250 bytes are refused where they
        // run (a text get's by `get_one`), never located.
        let longest = if let Request::RespKey(_) = request {
            qs_proto::RESP_KEY_BYTES_MAX
        } else {
            qs_proto::KEY_BYTES_MAX
        };
        (key.len() <= longest).then(|| self.locate(key))
    }

    /// Prefetch stage 1: start loading the key's bucket.
    #[inline(always)]
    pub fn prefetch_bucket(&self, (hash, partition): Located) {
        match &self.partitions[partition] {
            Some(owned) => owned.prefetch_bucket(hash),
            None if self.crew => {
                if let Some(reader) = self.shared.map.reader(partition) {
                    reader.prefetch_bucket(hash);
                }
            }
            None => {}
        }
    }

    /// Prefetch stage 1 for a key not yet parsed (a guess: see [`qs_proto::key_guess`]);
    /// its place, for stage 2.
    #[inline]
    pub fn prefetch_key(&self, key: &[u8]) -> Located {
        let hash = KeyHash::of(key);
        let located = (hash, self.shared.map.partition_of(hash));
        self.prefetch_bucket(located);
        located
    }

    /// Prefetch stage 2, after stage 1 had time: start loading the key's item.
    #[inline]
    pub fn prefetch_item(&self, (hash, partition): Located) {
        match &self.partitions[partition] {
            Some(owned) => owned.prefetch_item(hash),
            None if self.crew => {
                if let Some(reader) = self.shared.map.reader(partition) {
                    reader.prefetch_item(hash);
                }
            }
            None => {}
        }
    }

    pub(super) fn owner(&self, partition: usize) -> usize {
        self.shared.map.owner(partition)
    }

    /// For building a window of requests ahead of running them: whether `request` (located at
    /// `located`) will have to wait for the connection's requests handed to other workers
    /// (`waiting_on`: a bit per worker, as it will be when this request runs), so nothing after
    /// it should be parsed yet; and the workers waited on after it. A guess that only sizes
    /// the window: running the requests decides, so a wrong guess costs a parse, never order.
    #[inline]
    pub fn stalls(&self, request: &Request<'_>, located: Option<Located>, waiting_on: &mut u64) -> bool {
        if self.shared.map.workers() == 1 {
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
                self.reach(request),
                Reach::Key { read_only: true, .. } | Reach::Keys { read_only: true, .. }
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

    /// The worker that owns `key`.
    pub fn owner_of(&self, key: &[u8]) -> usize {
        self.owner(self.locate(key).1)
    }

    /// Whether `key` can be read here: this worker owns it, or CREW's readers read any key.
    pub fn reads_here(&self, key: &[u8]) -> bool {
        self.crew || self.owns(self.locate(key).1)
    }

    /// Whether this worker owns `partition`.
    #[inline]
    pub fn owns(&self, partition: usize) -> bool {
        self.partitions[partition].is_some()
    }

    /// What routing needs of `request`, whatever its dialect: the one place that knows which
    /// requests touch which keys, and which only read (CREW serves those from any worker).
    #[inline(always)]
    pub fn reach<'a>(&self, request: &'a Request<'_>) -> Reach<'a> {
        use qs_proto::binary::BinaryCommand as Bin;
        if let Request::Get { kind, keys, .. } = *request {
            return Reach::Keys { keys, read_only: kind.touch().is_none() };
        }
        if let Some(command) = request.key_command(&self.limits) {
            return Reach::Key { key: command.key, read_only: command.op.read_only() };
        }
        match *request {
            Request::Binary(ref binary) => match binary.command {
                // -F: refused where it arrives.
                Bin::Flush { .. } if self.shared.config.disable_flush_all => Reach::Here,
                Bin::Flush { .. } => Reach::Everywhere,
                Bin::Stat { .. } => Reach::AfterPending,
                _ => Reach::Here,
            },
            Request::FlushAll { .. } if self.shared.config.disable_flush_all => Reach::Here,
            // Every worker resizes its own partitions.
            Request::FlushAll { .. } | Request::CacheMemlimit { .. } => Reach::Everywhere,
            Request::Stats { .. } | Request::Watch { .. } => Reach::AfterPending,
            Request::Get { .. }
            | Request::Store { .. }
            | Request::TooLarge { .. }
            | Request::Delete { .. }
            | Request::Arith { .. }
            | Request::Touch { .. }
            | Request::Meta(_)
            | Request::Version
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
            | Request::RefreshCerts { .. }
            | Request::Cluster { .. }
            | Request::RespProtocolError(_)
            // Its key is its command's (above).
            | Request::RespKey(_) => Reach::Here,
            // Reads of several keys: after the connection's replies pending elsewhere (CREW
            // reads the keys here); anything else a RESP frame asks is answered here.
            Request::Resp(ref frame) => self.resp_reach(frame),
        }
    }

    /// Where `request` must run, given how many requests this connection has waiting on each
    /// worker (a later request for the same worker must queue behind them to keep order):
    /// one rule for every dialect, on its [`Reach`]. `at`: where its one key was located, if
    /// it was.
    #[inline(always)]
    pub fn route(&self, request: &Request<'_>, at: Option<Located>, pending: &[u32]) -> Route {
        if self.shared.map.workers() == 1 {
            // Every partition is here and nothing is ever pending on another worker.
            return Route::Local;
        }
        self.route_among_workers(request, at, pending)
    }

    /// [`Engine::route`] with several workers.
    #[inline(never)]
    fn route_among_workers(&self, request: &Request<'_>, at: Option<Located>, pending: &[u32]) -> Route {
        match self.reach(request) {
            Reach::Here => Route::Local,
            Reach::Everywhere => Route::Broadcast,
            Reach::AfterPending => Route::AfterPending,
            Reach::KeyAfterPending(key) => match self.owner(self.locate(key).1) {
                owner if owner == self.worker => Route::AfterPending,
                owner => Route::ForwardAfterPending(owner),
            },
            Reach::Keys { keys, read_only } => match at {
                // A get of one key, located by the window: not hashed again.
                Some((_, partition)) => self.route_one_key(self.owner(partition), read_only, pending),
                None => self.route_keys(keys, read_only, pending),
            },
            // Answered here with an error, no key read.
            Reach::Key { key, .. } if key.len() > qs_proto::RESP_KEY_BYTES_MAX => Route::Local,
            Reach::Key { key, read_only } => {
                let owner = self.owner(self.key(key, at).partition);
                if self.runs_here(owner, read_only, pending) {
                    Route::Local
                } else {
                    Route::Forward(owner)
                }
            }
        }
    }

    /// Whether a request on a key `owner` has runs here: the key is this worker's, or it is a
    /// read CREW lets this worker make, with no earlier request of the connection waiting on
    /// the owner.
    #[inline(always)]
    fn runs_here(&self, owner: usize, read_only: bool, pending: &[u32]) -> bool {
        owner == self.worker || (self.crew && read_only && pending[owner] == 0)
    }

    /// A text get of one key that `owner` has: as [`Engine::route_keys`] routes it.
    fn route_one_key(&self, owner: usize, read_only: bool, pending: &[u32]) -> Route {
        if self.runs_here(owner, read_only, pending) {
            Route::Local
        } else if self.crew && read_only {
            Route::AfterPending
        } else {
            Route::Forward(owner)
        }
    }

    /// A text get's keys: here when all are here (or readable here: CREW, a plain get, no
    /// earlier request waiting on the owner), to the owner when one key is another's, key by
    /// key when several owners have them.
    fn route_keys(&self, keys: &[u8], read_only: bool, pending: &[u32]) -> Route {
        let mut remote = None;
        let mut several = false;
        for key in qs_proto::tokens::words(keys) {
            if key.len() > qs_proto::KEY_BYTES_MAX {
                // Answered here with an error, no key read.
                return Route::Local;
            }
            let owner = self.owner(self.locate(key).1);
            if self.runs_here(owner, read_only, pending) {
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
}
