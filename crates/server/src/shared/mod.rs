//! What every worker can see: the partition map, CREW readers, published counters, wake-up
//! handles. Written at start-up, then only through atomics and per-partition mutexes that the
//! owner locks once per event-loop turn (never per request).

pub mod cluster;
mod connections;
mod credentials;
pub mod lending;
mod map;
mod memory;
mod published;
mod rings;
mod spaces;
mod wakeups;
pub mod warming;

use crate::config::Config;
use crate::observe::counters::WorkerCounters;
pub use connections::Connections;
pub use credentials::Credentials;
pub use map::PartitionMap;
pub use memory::{Memory, FLOOR_BYTES};
pub use published::Published;
use qs_store::PartitionStats;
pub use rings::IoRings;
pub use spaces::DbSpaces;
use std::sync::atomic::AtomicBool;
use std::time::Instant;
pub use wakeups::Wakeups;

/// What a worker publishes for `stats`.
#[derive(Clone, Debug, Default)]
pub struct WorkerFigures {
    /// Its counters.
    pub counters: WorkerCounters,
    /// Per partition: reads of other workers' partitions served here (gets, hits).
    pub remote_reads: Vec<(u64, u64)>,
    /// What its connection buffers hold (a reading, not a counter).
    pub buffers: crate::session::BufferFigures,
}

/// A value on its own cache line, so workers' flags do not share lines.
#[repr(align(128))]
#[derive(Default)]
pub struct Padded<T>(pub T);

/// Server-wide state.
pub struct Shared {
    /// CAS values clients chose with meta `E`.
    pub explicit_cas: crate::cas::ExplicitCas,
    /// The gates a connection passes: SASL and ASCII passwords, TLS.
    pub credentials: Credentials,
    /// The `-o` options.
    pub extended: crate::config::Extended,
    /// The command line.
    pub config: Config,
    /// Workers, partitions, their owners, and the CREW readers.
    pub map: PartitionMap,
    /// The workers' io_uring rings and the flash reader threads' queues.
    pub rings: IoRings,
    /// What the workers publish for `stats`, and what `stats reset` zeroed.
    pub published: Published,
    /// Client connections: counts, the -c limit's accept pause.
    pub connections: Connections,
    /// The workers' sleep flags and wakers, and the stop flag.
    pub wakeups: Wakeups,
    /// Partitions lent for a step over several workers' keys (a transaction's EXEC).
    pub lending: lending::Lending<Vec<(usize, qs_store::Partition)>>,
    /// The keys Redis connections WATCH, and their writes since.
    pub watches: std::sync::Arc<crate::session::watches::Watches>,
    /// Redis scripts: the one cache, and each worker's script while one runs.
    pub scripts: std::sync::Arc<crate::script::Scripts>,
    /// The item memory: the logs' size (`cache_memlimit`), the index, the largest item.
    pub memory: Memory,
    /// The native protocol's directory epoch and cookie key.
    pub native: NativeKeys,
    /// Since when the server runs, and the crawler's switch.
    pub running: Running,
    /// What the request path records for the operator (`stats detail`, `stats hotkeys`,
    /// `stats mrc`, `stats conns`, `watch`).
    pub observers: Observers,
    /// `-o front_cache` under EREW: each partition's write epochs (empty otherwise).
    pub front_epochs: Vec<qs_store::front::WriteEpochs>,
    /// What clients may make the server hold beyond their first buffers (session::budget).
    pub client_memory: std::sync::Arc<crate::session::budget::ClientMemory>,
    /// What the start took back from a memory file (-e) and how long loading took.
    pub restart: Restart,
    /// Cluster discovery (`-o cluster_config`): `config get cluster`.
    pub cluster: cluster::Cluster,
    /// Warming from a live node (`--warm-from`): `stats warm`, `/readyz`.
    pub warming: warming::Warming,
    /// A Redis database other than 0 may hold keys (a request was mapped into one, or the
    /// items came from elsewhere: -e, --warm-from): DBSIZE, INFO's keyspace and FLUSHDB of
    /// database 0 then tell its keys from the others' (a walk) rather than take every item.
    pub databases_used: std::sync::atomic::AtomicBool,
    /// Which namespace each database's keys are in (SWAPDB exchanges two).
    pub db_spaces: DbSpaces,
    /// redis-server's encoding thresholds as CONFIG SET last set them (read back by CONFIG
    /// GET; they change nothing here: qs_proto::resp::collection::SETTINGS).
    pub encoding_settings: [std::sync::atomic::AtomicI64; qs_proto::resp::collection::SETTINGS_KEPT],
}

impl Shared {
    /// Whether a database other than 0 may hold keys.
    pub fn databases_used(&self) -> bool {
        self.databases_used.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A request was mapped into a database other than 0.
    pub fn use_databases(&self) {
        if !self.databases_used() {
            self.databases_used.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// The start's loading: a memory file's items taken back (-e) and the flash tier attached.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Restart {
    /// A memory file laid out for this configuration was taken back (a warm restart).
    pub warm: bool,
    /// Items it held that are served again.
    pub items: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Seconds the memory file and the flash tier took to load.
    pub load_secs: f64,
}

/// The counters at the last `stats reset`; `stats` shows what accrued since.
#[derive(Clone, Debug, Default)]
pub struct StatsBaseline {
    /// Per partition, as published.
    pub partitions: Vec<PartitionStats>,
    /// Per worker, as published.
    pub workers: Vec<WorkerFigures>,
    /// Connections accepted.
    pub total_connections: u64,
    /// Connections refused at the -c limit.
    pub rejected_connections: u64,
}

/// What the request path records for the operator: each a type of its own (crate::observe),
/// with its own locks or atomics.
pub struct Observers {
    /// `stats detail`: per-prefix counters.
    pub detail: crate::observe::detail::Detail,
    /// `stats hotkeys`: the workers' most frequent keys.
    pub hotkeys: crate::observe::hotkeys::HotKeys,
    /// `stats mrc`: the live miss-ratio curve.
    pub mrc: crate::observe::mrc::LiveMrc,
    /// Every open socket, for `stats conns`.
    pub registry: crate::observe::registry::Registry,
    /// `watch` connections.
    pub watchers: crate::observe::watch::Watchers,
    /// Each worker's latency histograms (`stats latency`, `/metrics`).
    pub latency: crate::observe::latency::Latency,
}

/// Since when the server runs, and what `lru_crawler enable|disable` switched.
#[derive(Debug)]
pub struct Running {
    started: Instant,
    crawler_enabled: AtomicBool,
}

impl Running {
    /// Started now, the crawler on or off.
    pub fn new(crawler_enabled: bool) -> Running {
        Running { started: Instant::now(), crawler_enabled: AtomicBool::new(crawler_enabled) }
    }
}

/// The native protocol's keys, drawn at start (a restart, which is when the map can change,
/// draws others).
#[derive(Clone, Copy, Debug)]
pub struct NativeKeys {
    epoch: u32,
    secret: u64,
}

impl NativeKeys {
    /// The directory's `epoch` and the address cookies' `secret`.
    pub fn new(epoch: u32, secret: u64) -> NativeKeys {
        NativeKeys { epoch, secret }
    }

    /// The directory's epoch.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The key of the address cookies.
    pub fn secret(&self) -> u64 {
        self.secret
    }
}

impl Shared {
    /// The server's authentication mode (-Y, -S), as connections meet it.
    pub fn auth_modes(&self) -> crate::session::auth::Modes<'_> {
        self.credentials.modes()
    }

    /// Seconds since the server started.
    pub fn uptime_secs(&self) -> u64 {
        self.running.started.elapsed().as_secs()
    }

    /// `lru_crawler enable|disable`: whether metadump and crawl are served.
    pub fn crawler_enabled(&self) -> bool {
        self.running.crawler_enabled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Turns the crawler on or off; whether it was on.
    pub fn switch_crawler(&self, enable: bool) -> bool {
        self.running.crawler_enabled.swap(enable, std::sync::atomic::Ordering::Relaxed)
    }

    /// A CAS unique as clients see it: 0 under -C (memcached's items then carry none), else
    /// the value a client chose for the version with `E`, or its own.
    #[inline]
    pub fn cas_out(&self, cas: u64) -> u64 {
        if self.config.disable_cas {
            0
        } else {
            self.explicit_cas.shown(cas)
        }
    }

    /// A connection closed: if accepting was paused, it resumes (every worker is woken to
    /// accept what waited meanwhile).
    pub fn connection_closed(&self) {
        if self.connections.resume() {
            self.wake_all();
        }
    }

    /// Wakes worker `worker` if it sleeps (or is about to).
    pub fn wake_if_sleeping(&self, worker: usize) -> bool {
        self.wakeups.wake_if_sleeping(worker)
    }

    /// Logs a line of `stream` to its watchers (call only when [`crate::observe::watch::Watchers::wants`]
    /// it) and wakes the workers that must send it.
    pub fn log(&self, stream: u16, body: std::fmt::Arguments<'_>) {
        let wake = self.observers.watchers.log(stream, body);
        if wake != 0 {
            for worker in (0..self.map.workers()).filter(|worker| wake & (1 << (worker % 64)) != 0) {
                self.wake_if_sleeping(worker);
            }
        }
    }

    /// Asks every worker to stop: no new connections; what was received is answered.
    pub fn request_stop(&self) {
        self.scripts.stop();
        self.wakeups.request_stop();
    }

    /// Wakes every worker (shutdown, a resumed accept).
    pub fn wake_all(&self) {
        self.wakeups.wake_all();
    }
}

impl crate::flashio::Host for Shared {
    fn flash_io(&self) -> Option<&crate::flashio::FlashIo> {
        self.rings.flash_io()
    }

    fn wake(&self, worker: usize) {
        self.wake_if_sleeping(worker);
    }

    fn stopping(&self) -> bool {
        self.wakeups.stopping()
    }
}
