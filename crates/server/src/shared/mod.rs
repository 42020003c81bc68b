//! What every worker can see: the partition map, CREW readers, published counters, wake-up
//! handles. Written at start-up, then only through atomics and per-partition mutexes that the
//! owner locks once per event-loop turn (never per request).

mod connections;
mod map;
mod memory;
mod published;
mod wakeups;

use crate::config::Config;
use crate::observe::counters::WorkerCounters;
pub use connections::Connections;
pub use map::PartitionMap;
pub use memory::Memory;
pub use published::{FlashFigures, Published};
use qs_store::PartitionStats;
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
    /// -S: the SASL users (MEMCACHED_SASL_PWDB).
    pub sasl_passwords: Option<crate::session::auth::Passwords>,
    /// -Y: the ASCII authentication users.
    pub ascii_passwords: Option<crate::session::auth::Passwords>,
    /// -Z: the TLS configuration and its figures.
    pub tls: Option<std::sync::Arc<crate::session::tls::Context>>,
    /// The `-o` options.
    pub extended: crate::config::Extended,
    /// The command line.
    pub config: Config,
    /// Workers, partitions, their owners, and the CREW readers.
    pub map: PartitionMap,
    /// `-o ext_path`: the flash reader threads' queues.
    pub flash_io: Option<crate::flashio::FlashIo>,
    /// `-o ext_path`: workers reading flash through their own io_uring.
    pub flash_rings: std::sync::atomic::AtomicUsize,
    /// Workers whose stream connections run on io_uring (`-o io_backend=uring`; one that the
    /// kernel refused runs on epoll).
    pub net_rings: std::sync::atomic::AtomicUsize,
    /// Whether a worker has said that the kernel refused its io_uring (said once).
    pub uring_refused: std::sync::atomic::AtomicBool,
    /// What the workers publish for `stats`, and what `stats reset` zeroed.
    pub published: Published,
    /// Client connections: counts, the -c limit's accept pause.
    pub connections: Connections,
    /// The workers' sleep flags and wakers, and the stop flag.
    pub wakeups: Wakeups,
    /// The item memory: the logs' size (`cache_memlimit`), the index, the largest item.
    pub memory: Memory,
    /// Start time (for uptime).
    pub started: Instant,
    /// Native protocol: the directory's epoch, drawn at start (a restart, which is when the map
    /// can change, draws another).
    pub native_epoch: u32,
    /// Native protocol: the key of the address cookies (random at start).
    pub native_secret: u64,
    /// `lru_crawler enable|disable`: whether metadump and crawl are served.
    pub crawler_enabled: AtomicBool,
    /// `stats detail`: per-prefix counters.
    pub detail: crate::observe::detail::Detail,
    /// `stats hotkeys`: the workers' most frequent keys.
    pub hotkeys: crate::observe::hotkeys::HotKeys,
    /// `stats mrc`: the live miss-ratio curve.
    pub mrc: crate::observe::mrc::LiveMrc,
    /// `-o front_cache` under EREW: each partition's write epochs (empty otherwise).
    pub front_epochs: Vec<qs_store::front::WriteEpochs>,
    /// Every open socket, for `stats conns`.
    pub registry: crate::observe::registry::Registry,
    /// `watch` connections.
    pub watchers: crate::observe::watch::Watchers,
    /// What clients may make the server hold beyond their first buffers (session::budget).
    pub client_memory: std::sync::Arc<crate::session::budget::ClientMemory>,
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

impl Shared {
    /// The server's authentication mode (-Y, -S), as connections meet it.
    pub fn auth_modes(&self) -> crate::session::auth::Modes<'_> {
        crate::session::auth::Modes {
            ascii: self.ascii_passwords.as_ref(),
            sasl: self.sasl_passwords.as_ref(),
        }
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
        let wake = self.watchers.log(stream, body);
        if wake != 0 {
            for worker in (0..self.map.workers()).filter(|worker| wake & (1 << (worker % 64)) != 0) {
                self.wake_if_sleeping(worker);
            }
        }
    }

    /// Asks every worker to stop: no new connections; what was received is answered.
    pub fn request_stop(&self) {
        self.wakeups.request_stop();
    }

    /// Wakes every worker (shutdown, a resumed accept).
    pub fn wake_all(&self) {
        self.wakeups.wake_all();
    }
}

impl crate::flashio::Host for Shared {
    fn flash_io(&self) -> Option<&crate::flashio::FlashIo> {
        self.flash_io.as_ref()
    }

    fn wake(&self, worker: usize) {
        self.wake_if_sleeping(worker);
    }

    fn stopping(&self) -> bool {
        self.wakeups.stopping()
    }
}
