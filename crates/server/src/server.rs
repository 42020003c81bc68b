//! Start-up: builds the partitions from the configuration, binds the listeners, and starts one
//! worker thread per core; [`Server`] is the running server's handle.

/// Write epochs per partition for `-o front_cache` (keys share one when their hash bits agree).
const FRONT_EPOCH_SLOTS: usize = 4096;

use crate::config::listen;
use crate::config::{self, AccessArg, Config, EvictionArg, HugePagesArg};
use crate::net as conn;
use crate::observe::{detail, hotkeys, mrc, watch};
use crate::session::budget::ClientMemory;
use crate::shared::Credentials;
use crate::shared::Shared;
use crate::sys::{self, memfile};
use crate::{exec as engine, flashio, native, worker};
use qs_store::{Access, Eviction, HugePages, Partition};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Expected bytes of an item (header, key and value) when sizing the index.
const EXPECTED_ITEM_BYTES: usize = 128;

/// A partition's memory plan: its share of -m as log, and an index sized for items of
/// `EXPECTED_ITEM_BYTES` (128), by the `-o` settings parsed once at start.
pub fn partition_config(
    config: &Config,
    extended: &config::Extended,
    index: usize,
    partitions: usize,
) -> qs_store::Config {
    let budget_bytes = ((config.memory_mib << 20) / partitions as u64) as usize;
    let mut partition = if config.store_mode() {
        // Store mode: the whole share is arena (segregated fits need no power of two), and
        // the index must hold every item, so it is sized for items of half the expected size
        // (plus 10% spare buckets for chains).
        let slots = budget_bytes / (EXPECTED_ITEM_BYTES / 2);
        let buckets = slots.div_ceil(15).max(1).next_power_of_two();
        qs_store::Config::store(budget_bytes, buckets)
    } else {
        // The whole share is log, as memcached's -m is item memory; the index is overhead
        // beside it (docs/ARCHITECTURE.md, "Memory").
        let log_bytes = budget_bytes & !7;
        let slots = log_bytes / EXPECTED_ITEM_BYTES;
        let buckets = ((slots as f64 / (15.0 * qs_store::config::INDEX_LOAD_DEFAULT)).ceil() as usize)
            .max(1)
            .next_power_of_two();
        // -o hashpower=N: at least 2^N slots over all the partitions (memcached's initial hash
        // table). Either way the index grows, as memcached's does, when the items the log
        // holds outnumber its slots (smaller items than expected), unless -o no_hashexpand
        // or a flash tier (whose index may live in a file) keeps it at this size.
        let asked = extended
            .hashpower
            .map_or(0, |power| ((1usize << power) / partitions).div_ceil(15).max(1).next_power_of_two());
        let mut partition = qs_store::Config::new(log_bytes, buckets.max(asked));
        if extended.no_hashexpand || !extended.ext_paths.is_empty() {
            partition.index_levels = 0;
        }
        partition
    };
    partition.item_bytes_max = config.item_bytes_max;
    partition.access = match config.access {
        AccessArg::Erew => Access::Erew,
        AccessArg::Crew => Access::Crew,
    };
    partition.eviction = match config.eviction {
        EvictionArg::Fifo => Eviction::Fifo,
        EvictionArg::Lru => Eviction::Lru,
        EvictionArg::ApproxLru => Eviction::ApproxLru,
        EvictionArg::Clock => Eviction::Clock,
        EvictionArg::S3fifo => Eviction::S3Fifo,
    };
    // A flash tier takes what leaves the main ring's head: S3-FIFO runs as that ring's clock.
    if !extended.ext_paths.is_empty() {
        partition.eviction = partition.eviction.without_small_ring();
    }
    partition.huge_pages = match config.huge_pages {
        HugePagesArg::Auto => HugePages::Auto,
        HugePagesArg::On => HugePages::On,
        HugePagesArg::Off => HugePages::Off,
    };
    partition.partition_index = index as u16;
    partition.partition_bits = partitions.trailing_zeros();
    partition
}

/// Bytes a flash item is expected to take when sizing the index for the flash tier: the
/// flash share is counted at twice `ext_item_size` per item (smaller ones stay in DRAM).
fn flash_item_bytes(extended: &config::Extended) -> u64 {
    (2 * extended.ext_item_size.max(EXPECTED_ITEM_BYTES)) as u64
}

/// With a flash tier the index must find the flash items too: each partition's index grows by
/// its share of the flash bytes at [`flash_item_bytes`] per item (8 bytes a slot: at the
/// default 512, 1 GiB of flash costs 8 MiB of index).
fn flash_index_sizing(
    mut configs: Vec<qs_store::Config>,
    extended: &config::Extended,
) -> Vec<qs_store::Config> {
    let flash_bytes: u64 = extended.ext_paths.iter().map(|(_, bytes)| bytes).sum();
    let per_partition = flash_bytes / configs.len() as u64;
    for partition in &mut configs {
        let dram_slots = (partition.log_bytes / EXPECTED_ITEM_BYTES) as u64;
        let flash_slots = per_partition / flash_item_bytes(extended);
        let slots = (dram_slots + flash_slots) as f64;
        let buckets = ((slots / (15.0 * qs_store::config::INDEX_LOAD_DEFAULT)).ceil() as usize)
            .max(1)
            .next_power_of_two();
        partition.bucket_count = partition.bucket_count.max(buckets);
    }
    configs
}

/// Opens the `ext_path` files and gives each partition its flash log: partition p writes to
/// file p mod files, in an equal share of it; a log's pages hold at most `ext_wbuf_size` and
/// at least eight fit in its share.
fn attach_flash(partitions: &mut [Partition], extended: &config::Extended) -> Result<(), String> {
    let files = extended.ext_paths.len();
    let mut restored = 0;
    for (number, (path, bytes)) in extended.ext_paths.iter().enumerate() {
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        if extended.flash_direct {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_DIRECT);
        }
        let file = options
            .open(path)
            .map_err(|e| format!("Failed to open file for storage: {}: {e}", path.display()))?;
        // Two servers on one flash file would overwrite each other's pages (memcached refuses
        // too): the lock lives as long as the file is open.
        if !sys::try_lock_exclusive(&file)
            .map_err(|e| format!("ext_path {}: cannot lock: {e}", path.display()))?
        {
            return Err(format!("ext_path {}: in use by another server", path.display()));
        }
        let is_device = {
            use std::os::unix::fs::FileTypeExt;
            file.metadata().map(|meta| meta.file_type().is_block_device()).unwrap_or(false)
        };
        if !is_device {
            // SIZE for the logs, and the header page before them.
            file.set_len(*bytes + FLASH_HEADER_BYTES)
                .map_err(|e| format!("Failed to size {}: {e}", path.display()))?;
        }
        let file = Arc::new(file);
        let sharing: Vec<usize> = (0..partitions.len()).filter(|p| p % files == number).collect();
        if sharing.is_empty() {
            continue;
        }
        // The file's first page names the run that last wrote it: a memory file's flash slots
        // are trusted only if they were made in that run (no server has written it since).
        let old_epoch = read_flash_epoch(&file, extended.flash_direct);
        let new_epoch = random_u64() | 1;
        write_flash_epoch(&file, new_epoch)
            .map_err(|e| format!("ext_path {}: cannot write: {e}", path.display()))?;
        let share = (bytes / sharing.len() as u64) & !4095;
        let page_bytes = (extended.ext_wbuf_bytes as u64).min(share / 8) & !4095;
        for (slot, &index) in sharing.iter().enumerate() {
            let log = qs_store::flash::FlashLog::new(
                Arc::clone(&file),
                FLASH_HEADER_BYTES + slot as u64 * share,
                share,
                page_bytes as usize,
            )
            .and_then(|log| if extended.flash_direct { log.direct() } else { Some(log) })
            .ok_or_else(|| {
                format!(
                    "ext_path {}: {bytes} bytes is too small for {} partitions",
                    path.display(),
                    sharing.len()
                )
            })?;
            // ext_item_size counts the item's bytes; a record here adds its header.
            partitions[index].attach_flash(log, extended.ext_item_size);
            let partition = &mut partitions[index];
            // -e: the index file's flash slots, in what was written out before the stop (a
            // graceful one or a crash), if the flash file is as that run left it.
            let (slots, persisted) = partition.take_crash_flash();
            if let Some((durable, epoch)) = persisted {
                if old_epoch == Some(epoch) && !slots.is_empty() {
                    restored += partition.flash_restore(durable, &slots);
                }
            }
            partition.set_flash_epoch(new_epoch);
        }
    }
    if restored > 0 {
        eprintln!("[restart] {restored} flash items back");
    }
    Ok(())
}

/// Bytes at the start of each flash file before the partitions' logs: the run's epoch.
const FLASH_HEADER_BYTES: u64 = 4096;
/// The flash file header's first word.
const FLASH_MAGIC: &[u8; 8] = b"QSFLASH1";

/// The epoch in a flash file's header (`None`: not one of ours, or unreadable).
fn read_flash_epoch(file: &std::fs::File, direct: bool) -> Option<u64> {
    let mut header = Vec::new();
    if !qs_store::flash::read_at(file, 0, 16, direct, &mut header)
        || header.len() < 16
        || &header[..8] != FLASH_MAGIC
    {
        return None;
    }
    Some(u64::from_le_bytes(header[8..16].try_into().expect("8 bytes")))
}

/// Writes a flash file's header page with `epoch` (aligned: the file may be O_DIRECT).
fn write_flash_epoch(file: &std::fs::File, epoch: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut page = qs_store::flash::AlignedBuf::zeroed(FLASH_HEADER_BYTES as usize);
    page.bytes_mut()[..8].copy_from_slice(FLASH_MAGIC);
    page.bytes_mut()[8..16].copy_from_slice(&epoch.to_le_bytes());
    file.write_all_at(page.bytes(), 0)
}

/// A server that is listening; [`Server::wait`] runs it to the end.
pub struct Server {
    shared: Arc<Shared>,
    gate: Arc<Gate>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// The admin HTTP listener (`-o metrics_port`, `-o metrics_listen`).
    endpoint: Option<crate::admin::http::Endpoint>,
    /// Where `--warm-from` stores what it copies (see `Bound::text_addr`).
    text_addr: Option<std::net::SocketAddr>,
}

impl Server {
    /// Builds the partitions, binds the listeners and starts the workers.
    pub fn start(config: Config) -> Result<Server, String> {
        let server = Server::start_held(config)?;
        server.serve();
        Ok(server)
    }

    /// As [`Server::start`], but the workers wait for [`Server::serve`] before they take
    /// any connection (clients wait in the listen backlog): the binary binds its ports as
    /// root, drops to -u's user, then serves, as memcached does.
    pub fn start_held(config: Config) -> Result<Server, String> {
        let (config, extended) = settle(config)?;
        let credentials = Credentials::load(&config, &extended)?;
        // Up before the memory file or flash tier loads, so /readyz can say it is loading.
        let endpoint = start_endpoint(&config, &extended, &credentials)?;
        let (partitions, restart) = build_partitions(&config, &extended)?;
        let workers = config.workers();
        let owner: Vec<usize> = (0..partitions.len()).map(|p| p % workers).collect();
        let cluster = crate::shared::cluster::Cluster::load(extended.admin.cluster_config.clone())?;
        let mut shared = new_shared(&config, extended, &partitions, credentials);
        shared.restart = restart;
        shared.cluster = cluster;
        let shared = Arc::new(shared);
        if let Some(endpoint) = &endpoint {
            endpoint.attach(shared.clone());
        }
        let mut owned: Vec<Vec<Option<Partition>>> =
            (0..workers).map(|_| (0..partitions.len()).map(|_| None).collect()).collect();
        for (index, partition) in partitions.into_iter().enumerate() {
            owned[owner[index]][index] = Some(partition);
        }
        let mut bound = Bound::bind(&config, workers, shared.credentials.tls().is_some())?;
        let gate = Arc::new(Gate::default());
        let mut rings = crate::direct::rings(workers);
        let mut threads = Vec::new();
        for (index, partitions) in owned.into_iter().enumerate().rev() {
            let sockets = bound.worker_sockets(index, &config, &shared)?;
            let poll = mio::Poll::new().map_err(|e| e.to_string())?;
            let waker = mio::Waker::new(poll.registry(), mio::Token(0)).map_err(|e| e.to_string())?;
            shared.wakeups.set_waker(index, waker);
            let engine = engine::Engine::new(index, partitions, shared.clone());
            let worker_rings = rings.pop().expect("one ring set per worker");
            let worker = worker::Worker::new(index, shared.clone(), poll, sockets, engine, worker_rings)
                .map_err(|e| e.to_string())?;
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let pin = config.pin.applies(workers, cores);
            let gate = gate.clone();
            let thread = std::thread::Builder::new()
                .name(format!("worker-{index}"))
                .spawn(move || {
                    if pin {
                        let _ = sys::pin_to_core(index);
                    }
                    gate.wait();
                    worker.run();
                })
                .map_err(|e| e.to_string())?;
            threads.push(thread);
        }
        if shared.rings.flash_io().is_some() {
            flashio::FlashIo::start(&shared, shared.extended.ext_threads)
                .map_err(|e| format!("flash reader threads: {e}"))?;
        }
        let text_addr = bound.text_addr;
        Ok(Server { shared, threads, gate, endpoint, text_addr })
    }

    /// What the workers share (for tests of the admin commands, and the session fuzz target's
    /// look at the client memory budget).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Lets the workers serve (after [`Server::start_held`]).
    pub fn serve(&self) {
        if self.shared.extended.admin.warm_from.is_some() {
            // Before the workers serve, so /readyz never says ready before warming starts.
            crate::warm::start(self.shared.clone(), self.text_addr);
        }
        self.gate.open();
        if let Some(endpoint) = &self.endpoint {
            endpoint.ready();
        }
    }

    /// Where the admin HTTP listener listens, if one was asked for.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.endpoint.as_ref().map(crate::admin::http::Endpoint::addr)
    }

    /// Asks the workers to stop: no new connections; what was received is answered.
    pub fn stop(&self) {
        self.shared.request_stop();
    }

    /// A handle that stops the server from another thread.
    pub fn stopper(&self) -> impl Fn() + Send + 'static {
        let shared = self.shared.clone();
        move || shared.request_stop()
    }

    /// Waits for every worker to finish.
    pub fn wait(self) {
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

/// Starts the admin HTTP listener where `-o metrics_port` or `-o metrics_listen` asks for one.
fn start_endpoint(
    config: &Config,
    extended: &config::Extended,
    credentials: &Credentials,
) -> Result<Option<crate::admin::http::Endpoint>, String> {
    let first_tcp = config.listen_plan()?.tcp.first().map(|endpoint| endpoint.addr);
    let Some(addr) = extended.admin.addr(first_tcp) else { return Ok(None) };
    crate::admin::http::Endpoint::start(addr, credentials.tls().cloned()).map(Some)
}

/// Checks `config` and settles what follows from it: the extended options, the flash tier's
/// access mode, and a start-up line naming memcached's tuning options that have no effect here.
fn settle(config: Config) -> Result<(Config, config::Extended), String> {
    let mut extended = config.validate()?;
    let mut config = config;
    let flash_on = !extended.ext_paths.is_empty();
    if flash_on {
        if config.store_mode() {
            return Err(
                "-o ext_path: store mode keeps every item in memory; the flash tier is for cache mode".into(),
            );
        }
        if config.access != AccessArg::Erew {
            // A flash read is the owner's to make (its flash log's page in memory is not
            // shared), so reads of other workers' partitions are handed to them.
            eprintln!("quicksilver: -o ext_path: reads go to the partition's owner (--access erew)");
            config.access = AccessArg::Erew;
        }
    }
    if let Some(factor) = config.slab_growth_factor {
        extended.ignored.push(format!("-f {factor}"));
    }
    if let Some(size) = config.slab_min_size {
        extended.ignored.push(format!("-n {size}"));
    }
    if !extended.ignored.is_empty() {
        eprintln!(
            "quicksilver: {}: memcached's slab, LRU and hash-table tuning has no effect here \
             (circular logs and a lossy index have no slab classes, LRU segments or hash expansion)",
            extended.ignored.join(",")
        );
    }
    Ok((config, extended))
}

/// The partitions: each one's share of -m, from a memory file (-e) or new, with its flash
/// tier attached.
fn build_partitions(
    config: &Config,
    extended: &config::Extended,
) -> Result<(Vec<Partition>, crate::shared::Restart), String> {
    let started = std::time::Instant::now();
    let mut restart = crate::shared::Restart::default();
    let flash_on = !extended.ext_paths.is_empty();
    let partition_count = config.partition_count();
    let room_bytes = ((config.memory_max_bytes() / partition_count as u64) as usize) & !7;
    let configs: Vec<qs_store::Config> = (0..partition_count)
        .map(|p| {
            let mut partition = partition_config(config, extended, p, partition_count);
            // Address space for cache_memlimit to grow the log into (used only as it
            // fills; store mode's arena and a memory file's logs ignore it).
            partition.log_room_bytes = room_bytes;
            partition
        })
        .collect();
    let configs = if flash_on { flash_index_sizing(configs, extended) } else { configs };
    let mut partitions: Vec<Partition> = match &config.memory_file {
        Some(path) => {
            let opened = memfile::open(path, &configs, flash_on)?;
            (restart.warm, restart.items, restart.bytes) =
                (opened.warm, opened.recovered.items, opened.recovered.bytes);
            opened.partitions
        }
        None => configs.into_iter().map(Partition::new).collect(),
    };
    if flash_on {
        attach_flash(&mut partitions, extended)?;
    }
    restart.load_secs = started.elapsed().as_secs_f64();
    Ok((partitions, restart))
}

/// What every worker sees, as the partitions start.
fn new_shared(
    config: &Config,
    extended: config::Extended,
    partitions: &[Partition],
    credentials: Credentials,
) -> Shared {
    let workers = config.workers();
    let partition_count = partitions.len();
    let flash_on = !extended.ext_paths.is_empty();
    let readers = if config.access == AccessArg::Erew {
        Vec::new()
    } else {
        partitions.iter().map(Partition::reader).collect()
    };
    // A front cache only helps where other workers' keys are handed over (EREW), and with
    // more than one worker.
    let front_epochs = if extended.front_cache && config.access == AccessArg::Erew && workers > 1 {
        (0..partition_count).map(|_| qs_store::front::WriteEpochs::new(FRONT_EPOCH_SLOTS)).collect()
    } else {
        Vec::new()
    };
    let first = &partitions[0];
    // Items that came from elsewhere may be in any database.
    let databases_used = config.memory_file.is_some() || config.warm_from.is_some();
    Shared {
        databases_used: std::sync::atomic::AtomicBool::new(databases_used),
        db_spaces: crate::shared::DbSpaces::new(config.databases),
        encoding_settings: qs_proto::resp::collection::SETTING_DEFAULTS
            .map(std::sync::atomic::AtomicI64::new),
        explicit_cas: Default::default(),
        rings: crate::shared::IoRings::new(flash_on.then(|| flashio::FlashIo::new(workers))),
        front_epochs,
        map: crate::shared::PartitionMap::new(workers, partition_count, readers),
        published: crate::shared::Published::new(partitions, workers),
        connections: Default::default(),
        wakeups: crate::shared::Wakeups::new(workers),
        lending: crate::shared::lending::Lending::new(workers),
        watches: Default::default(),
        scripts: std::sync::Arc::new(crate::script::Scripts::new(workers, crate::script::MEMORY_MAX)),
        running: crate::shared::Running::new(extended.lru_crawler),
        memory: crate::shared::Memory::of(
            first,
            partition_count,
            config.item_bytes_max,
            config.memory_file.is_some(),
        ),
        native: crate::shared::NativeKeys::new((random_u64() as u32) | 1, random_u64()),
        observers: crate::shared::Observers {
            detail: config.prefix_delimiter.map(detail::Detail::with_delimiter).unwrap_or_default(),
            hotkeys: hotkeys::HotKeys::new(workers, extended.hotkeys_sample_one_in),
            mrc: mrc::LiveMrc::new(workers, extended.mrc_sample_one_in),
            registry: Default::default(),
            watchers: watch::Watchers::new(extended.watcher_logbuf_bytes),
            latency: crate::observe::latency::Latency::new(
                workers,
                sys::ns_per_tick_q32(std::time::Duration::from_millis(10)),
            ),
        },
        credentials,
        extended,
        client_memory: std::sync::Arc::new(ClientMemory::new(ClientMemory::limit_for(
            (config.memory_mib as usize).saturating_mul(1 << 20),
            config.item_bytes_max,
        ))),
        restart: Default::default(),
        cluster: Default::default(),
        warming: Default::default(),
        config: config.clone(),
    }
}

/// The sockets bound at start-up, each worker's own (SO_REUSEPORT) or shared (-s).
struct Bound {
    /// Per worker: its TCP listeners, their protocol, and whether they speak TLS.
    tcp: Vec<Vec<conn::Listening>>,
    /// Per worker: its UDP sockets.
    udp: Vec<Vec<mio::net::UdpSocket>>,
    /// -s: the one UNIX domain socket every worker accepts from.
    unix: Option<std::os::unix::net::UnixListener>,
    /// The address a worker's own port (--worker-port-base) and native ports bind.
    interface: std::net::IpAddr,
    /// The first plaintext listener speaking text and meta, where `--warm-from` stores what it
    /// copies (an unspecified address as loopback).
    text_addr: Option<std::net::SocketAddr>,
}

impl Bound {
    /// Binds every planned address for every worker (the first settles a free port where the
    /// plan asks for one), and writes MEMCACHED_PORT_FILENAME.
    fn bind(config: &Config, workers: usize, tls: bool) -> Result<Bound, String> {
        let plan = config.listen_plan()?;
        // -s: a UNIX domain socket instead of TCP and UDP, as in memcached.
        let unix = match &config.unix_socket {
            Some(path) => Some(
                sys::unix_listener(path, config.unix_mask)
                    .map_err(|e| format!("failed to listen on UNIX socket {}: {e}", path.display()))?,
            ),
            None => None,
        };
        // Every worker binds every address (SO_REUSEPORT): the first one's socket settles a
        // free port where the plan asks for one, and the others join it there.
        let mut tcp: Vec<Vec<conn::Listening>> = (0..workers).map(|_| Vec::new()).collect();
        let mut tcp_bound = Vec::new();
        let mut text_addr = None;
        for endpoint in &plan.tcp {
            let mut addr = endpoint.addr;
            if addr.port() != 0 {
                sys::ensure_port_free(addr, true).map_err(|e| format!("failed to listen on {addr}: {e}"))?;
            }
            for listeners in &mut tcp {
                let listener = sys::listener(addr, true, config.backlog)
                    .map_err(|e| format!("failed to listen on {addr}: {e}"))?;
                addr = listener.local_addr().map_err(|e| format!("failed to listen on {addr}: {e}"))?;
                listeners.push(conn::Listening::new(
                    conn::Listener::Tcp(listener),
                    None,
                    endpoint.protocol,
                    conn::Security::of(tls, endpoint.notls, endpoint.mtls),
                ));
            }
            tcp_bound.push(addr);
            let text = matches!(endpoint.protocol, config::Protocol::Auto | config::Protocol::Ascii);
            if text && conn::Security::of(tls, endpoint.notls, endpoint.mtls) == conn::Security::Plain {
                text_addr = text_addr.or(Some(loopback_if_unspecified(addr)));
            }
        }
        let mut udp: Vec<Vec<mio::net::UdpSocket>> = (0..workers).map(|_| Vec::new()).collect();
        let mut udp_bound = Vec::new();
        for &planned in &plan.udp {
            let mut addr = planned;
            if addr.port() != 0 {
                sys::ensure_port_free(addr, false)
                    .map_err(|e| format!("failed to listen on UDP port {}: {e}", addr.port()))?;
            }
            for socket in &mut udp {
                let bound = sys::udp_socket(addr, true)
                    .map_err(|e| format!("failed to listen on UDP port {}: {e}", addr.port()))?;
                addr = bound
                    .local_addr()
                    .map_err(|e| format!("failed to listen on UDP port {}: {e}", addr.port()))?;
                socket.push(bound);
            }
            udp_bound.push(addr);
        }
        if unix.is_none() {
            if let Some(path) = std::env::var_os("MEMCACHED_PORT_FILENAME") {
                if let Err(e) = listen::write_port_file(std::path::Path::new(&path), &tcp_bound, &udp_bound) {
                    eprintln!("Failed to write \"{}\": {e}", std::path::Path::new(&path).display());
                }
            }
        }
        Ok(Bound { tcp, udp, unix, interface: plan.interface(), text_addr })
    }

    /// Worker `index`'s sockets: its listeners (TCP, the shared UNIX socket, its own port),
    /// UDP sockets and native ports.
    fn worker_sockets(
        &mut self,
        index: usize,
        config: &Config,
        shared: &Arc<Shared>,
    ) -> Result<worker::Sockets, String> {
        let mut listeners = std::mem::take(&mut self.tcp[index]);
        if let Some(listener) = &self.unix {
            // Every worker accepts from the one socket (whichever wakes first).
            listeners.push(conn::Listening::new(
                conn::Listener::Unix(mio::net::UnixListener::from_std(
                    listener.try_clone().map_err(|e| format!("UNIX socket: {e}"))?,
                )),
                config.unix_socket.as_deref(),
                config.binding_protocol(),
                conn::Security::Plain,
            ));
        }
        if config.worker_port_base != 0 {
            let port = config.worker_port_base as usize + index;
            let port = u16::try_from(port).map_err(|_| "--worker-port-base too high".to_string())?;
            let addr = SocketAddr::new(self.interface, port);
            listeners.push(conn::Listening::new(
                conn::Listener::Tcp(
                    sys::listener(addr, false, config.backlog)
                        .map_err(|e| format!("failed to listen on TCP port {port}: {e}"))?,
                ),
                None,
                config.binding_protocol(),
                conn::Security::of(shared.credentials.tls().is_some(), false, false),
            ));
        }
        let udp = std::mem::take(&mut self.udp[index]);
        let mut ports = Vec::new();
        if config.native_port != 0 {
            for partition in (0..shared.map.partitions()).filter(|&p| shared.map.owner(p) == index) {
                let port = config.native_port + partition as u16;
                let socket = sys::udp_socket(SocketAddr::new(self.interface, port), false)
                    .map_err(|e| format!("failed to listen on native UDP port {port}: {e}"))?;
                ports.push(native::Port { socket, ready: true });
            }
        }
        let native = native::Native::new(ports, shared.clone());
        Ok(worker::Sockets { listeners, udp, native })
    }
}

/// Holds the workers until the server may serve.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: std::sync::Condvar,
}

impl Gate {
    fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.opened.notify_all();
    }

    fn wait(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.opened.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A random 64-bit number (std's per-process hash keys, which come from the OS).
/// `addr`, with loopback for an unspecified IP (a listener on every interface).
fn loopback_if_unspecified(addr: std::net::SocketAddr) -> std::net::SocketAddr {
    match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
            (std::net::Ipv4Addr::LOCALHOST, addr.port()).into()
        }
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
            (std::net::Ipv6Addr::LOCALHOST, addr.port()).into()
        }
        _ => addr,
    }
}

fn random_u64() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now())
}
