//! The command line, in memcached's spelling where it has one.

pub mod admin;
mod args;
pub mod file;
pub mod listen;
pub mod ssl;

use args::*;
use clap::{Parser, ValueEnum};
use std::net::IpAddr;

/// memcached's default TCP port.
pub const DEFAULT_PORT: i32 = 11211;

/// quicksilver: a memcached-compatible cache server on MICA's data path.
/// The most UDP sockets a worker serves (-l addresses with -U).
pub const UDP_SOCKETS_MAX: usize = 64;

#[derive(Parser, Debug, Clone)]
#[command(name = "quicksilver", version = crate::VERSION, about, max_term_width = 100, args_override_self = true)]
pub struct Config {
    /// TCP port to listen on (0 = off, -1 = a free port; default 11211, or -U's port when
    /// only -U is given, as in memcached).
    #[arg(short = 'p', long = "port", allow_negative_numbers = true)]
    pub port: Option<i32>,
    /// Interfaces to listen on, comma-separated or repeated, each `host`, `host:port`,
    /// `[v6]:port` or `*`, optionally `proto[ascii|binary|negotiating]:` first (memcached's -l;
    /// quicksilver's default is loopback only), or `proto[resp]:` for a listener speaking the
    /// Redis protocol (off unless named, e.g. `-l 127.0.0.1,proto[resp]:127.0.0.1:6379`).
    #[arg(short = 'l', long = "listen", default_value = "127.0.0.1", value_delimiter = ',', action = clap::ArgAction::Append)]
    pub listen: Vec<String>,
    /// UDP port for memcached's UDP protocol (0 = off, the default: UDP replies can be used for
    /// amplification, so turn it on only where clients are trusted; -1 = a free port).
    #[arg(short = 'U', long = "udp-port", allow_negative_numbers = true)]
    pub udp_port: Option<i32>,
    /// Item memory in megabytes (the logs; the index and buffers come on top, see README).
    #[arg(short = 'm', long = "memory-limit", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub memory_mib: u64,
    /// The most `cache_memlimit` may raise item memory to, in megabytes (default: the
    /// machine's memory; with -k, -m itself, as locked memory cannot be left unused). Address
    /// space is reserved for it; memory is used only as items fill it.
    #[arg(long = "memory-max", value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub memory_max_mib: Option<u64>,
    /// Most simultaneous connections.
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Worker threads, one per core (default: the cores this process may run on).
    #[arg(short = 't', long = "threads", value_parser = parse_threads)]
    pub threads: Option<usize>,
    /// Largest item, e.g. 1m, 512k or 2097152 (memcached's -I).
    #[arg(short = 'I', long = "max-item-size", default_value = "1m", value_parser = parse_size)]
    pub item_bytes_max: usize,
    /// Listen on this UNIX domain socket instead of TCP and UDP (memcached's -s; a stale
    /// socket file there is replaced).
    #[arg(short = 's', long = "unix-socket")]
    pub unix_socket: Option<std::path::PathBuf>,
    /// Permissions of the UNIX socket file, in octal (memcached's -a).
    #[arg(short = 'a', long = "unix-mask", default_value = "700", value_parser = parse_octal)]
    pub unix_mask: u32,
    /// Run in the background (memcached's -d): the command returns once the server serves.
    #[arg(short = 'd', long = "daemon")]
    pub daemon: bool,
    /// Write the process id to this file (memcached's -P); removed on exit.
    #[arg(short = 'P', long = "pidfile")]
    pub pidfile: Option<std::path::PathBuf>,
    /// When started as root, run as this user once the ports are bound (memcached's -u).
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    /// Enable the `shutdown` command (memcached's -A): a client may stop the server.
    #[arg(short = 'A', long = "enable-shutdown")]
    pub enable_shutdown: bool,
    /// Enable the `debugtime <seconds>` command of memcached's debug builds, which moves the
    /// server's clock (for memcached's expiry tests; never in production).
    #[arg(long = "enable-debugtime")]
    pub enable_debugtime: bool,
    /// Refuse `watch` (memcached's -W): no client may stream the server's logs.
    #[arg(short = 'W', long = "disable-watch")]
    pub disable_watch: bool,
    /// memcached's extended options, comma-separated `name=value` (see
    /// docs/COMPATIBILITY.md): watcher_logbuf_size=KB, worker_logbuf_size=KB, idle_timeout,
    /// the flash tier's ext_* options, ...; TLS (with -Z): ssl_chain_cert, ssl_key, ssl_keyformat,
    /// ssl_verify_mode (0 none, 1 request, 2 require, 3 once), ssl_ca_cert, ssl_ciphers,
    /// ssl_wbuf_size=KB, ssl_session_cache, ssl_min_version (2 tlsv1.2, 3 tlsv1.3),
    /// ssl_handshake_timeout=SECS, ssl_allow_plaintext (UDP beside TLS).
    #[arg(short = 'o', long = "extended", action = clap::ArgAction::Append, value_delimiter = ',')]
    pub extended: Vec<String>,
    /// Disable CAS (memcached's -C): items carry no CAS unique (0 is reported), `cas` stores
    /// whenever the item exists, and flush_all cuts off by the second only.
    #[arg(short = 'C', long = "disable-cas")]
    pub disable_cas: bool,
    /// Refuse flush_all (memcached's -F).
    #[arg(short = 'F', long = "disable-flush-all")]
    pub disable_flush_all: bool,
    /// Refuse `stats cachedump` and `lru_crawler metadump` (memcached's -X).
    #[arg(short = 'X', long = "disable-dumping")]
    pub disable_dumping: bool,
    /// Requests run for one connection before the worker turns to others (memcached's -R);
    /// each such yield counts in `stats` as `conn_yields`.
    #[arg(short = 'R', long = "max-reqs-per-event", default_value_t = 20, value_parser = parse_reqs_per_event)]
    pub reqs_per_event: u32,
    /// Listen backlog (memcached's -b).
    #[arg(short = 'b', long = "listen-backlog", default_value_t = 1024)]
    pub backlog: i32,
    /// Delimiter between key prefixes and ids for `stats detail` (memcached's -D); giving it
    /// turns the per-prefix counting on.
    #[arg(short = 'D', value_parser = parse_delimiter)]
    pub prefix_delimiter: Option<u8>,
    /// SASL authentication over the binary protocol (memcached's -S): PLAIN, users from the
    /// file named by MEMCACHED_SASL_PWDB (`user:password` lines).
    #[arg(short = 'S', long = "enable-sasl")]
    pub sasl: bool,
    /// ASCII authentication (memcached's -Y): the first command of a text connection must
    /// be `set <any> 0 0 <len>` carrying `user password` from this file's `user:password` lines.
    #[arg(short = 'Y', long = "auth-file")]
    pub auth_file: Option<std::path::PathBuf>,
    /// Try large memory pages (memcached's -L): the logs use 2 MiB pages where the system
    /// offers them, as `--huge-pages auto` (the default) does.
    #[arg(short = 'L', long = "enable-largepages")]
    pub large_pages: bool,
    /// Lock the server's memory (memcached's -k: mlockall; a failure is a warning).
    #[arg(short = 'k', long = "lock-memory")]
    pub lock_memory: bool,
    /// Raise the core-file limit (memcached's -r).
    #[arg(short = 'r', long = "enable-coredumps")]
    pub coredumps: bool,
    /// memcached's slab growth factor (-f): accepted, no effect (no slab classes here).
    #[arg(short = 'f', long = "slab-growth-factor")]
    pub slab_growth_factor: Option<f64>,
    /// memcached's smallest slab chunk (-n): accepted, no effect (no slab classes here).
    #[arg(short = 'n', long = "slab-min-size")]
    pub slab_min_size: Option<u32>,
    /// Print the licenses and exit (memcached's -i).
    #[arg(short = 'i', long = "license")]
    pub license: bool,
    /// memcached's restartable cache (-e): the logs live in this file (tmpfs or DAX), and a
    /// restart with the same -m, -t and partitions serves what was there, after a graceful
    /// stop or a crash alike.
    #[arg(short = 'e', long = "memory-file")]
    pub memory_file: Option<std::path::PathBuf>,
    /// Enable TLS/SSL (memcached's -Z): every TCP listener speaks TLS, except those given as
    /// `-l notls:IP:PORT`; the certificate and key come from -o ssl_chain_cert and ssl_key.
    #[arg(short = 'Z', long = "enable-ssl")]
    pub enable_ssl: bool,
    /// Protocol of client connections (memcached's -B): auto lets each connection's first byte
    /// choose between the text protocols and the binary one [default: auto; binary with -S,
    /// ascii with -Y].
    #[arg(short = 'B', long = "protocol", value_enum)]
    pub protocol: Option<Protocol>,
    /// Verbose: -v logs errors and warnings, -vv also connections.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// cache evicts the oldest items when full; store (memcached's -M) refuses instead.
    #[arg(long, value_enum, default_value_t = Mode::Cache)]
    pub mode: Mode,
    /// memcached's -M: return an error when memory is exhausted (store mode).
    #[arg(short = 'M', long = "disable-evictions")]
    pub no_evictions: bool,
    /// Who may touch a partition: erew forwards every request to its owner, crew lets any
    /// worker read any partition.
    #[arg(long, value_enum, default_value_t = AccessArg::Crew)]
    pub access: AccessArg,
    /// Which items leave first when the log is full.
    #[arg(long, value_enum, default_value_t = EvictionArg::S3fifo)]
    pub eviction: EvictionArg,
    /// Partitions (a power of two, at least the worker count; default 4 per worker).
    #[arg(long)]
    pub partitions: Option<usize>,
    /// 2 MiB pages: auto uses them when the system offers them, off never.
    #[arg(long, value_enum, default_value_t = HugePagesArg::Auto)]
    pub huge_pages: HugePagesArg,
    /// With a base port, worker i also listens on BASE + i and serves only there what it owns
    /// (client-assisted direction). 0 = off.
    #[arg(long, default_value_t = 0)]
    pub worker_port_base: u16,
    /// With a base port, partition i answers the native protocol (docs/PROTOCOL.md) on UDP
    /// port BASE + i, bound only by its owner (client-assisted direction). 0 = off.
    #[arg(long, default_value_t = 0)]
    pub native_port: u16,
    /// Pin workers to cores: auto pins only when the workers leave a core of the process's
    /// cores free (pinned workers that share their cores with other busy threads, a co-located
    /// client or proxy, wait for them instead of moving: docs/benchmarks/HISTORY.md).
    #[arg(long, value_enum, default_value_t = Pin::Auto)]
    pub pin: Pin,
    /// Read options from FILE first, one per line in the format of Debian's
    /// /etc/memcached.conf (`#` comments; -d, -h and logfile lines skipped, as Debian's
    /// service wrapper does). Options on the command line win over the file's.
    #[arg(long = "config-file", value_name = "FILE")]
    pub config_file: Option<std::path::PathBuf>,
    /// At start, copy the items a live node holds (memcached or quicksilver), hottest first,
    /// while serving; /readyz and `stats warm` say when it is done (-o warm_rate=MB a second).
    #[arg(long = "warm-from", value_name = "HOST:PORT", value_parser = |v: &str| admin::warm_source(Some(v)))]
    pub warm_from: Option<String>,
    /// Redis's numbered databases (SELECT 0 to one less; redis-server's `databases`), each a
    /// keyspace of its own in the one store; memcached's protocols see database 0.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub databases: u32,
}

/// -B: the protocol client connections speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Protocol {
    /// The first byte decides: 0x80 (the binary request magic) for binary, else text.
    Auto,
    /// Text and meta commands only.
    Ascii,
    /// Binary only.
    Binary,
    /// The Redis protocol (RESP2, and RESP3 after `HELLO 3`), on a listener of its own only (`-l proto[resp]:...`).
    #[value(skip)]
    Resp,
}

impl Protocol {
    /// Its name in `stats settings`' binding_protocol.
    pub fn binding_name(self) -> &'static str {
        match self {
            Protocol::Auto => "auto-negotiate",
            Protocol::Ascii => "ascii",
            Protocol::Binary => "binary",
            Protocol::Resp => "resp",
        }
    }
}

/// --pin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Pin {
    /// Pin when there are fewer workers than cores this process may use.
    Auto,
    /// Always pin worker i to the i-th allowed core.
    #[value(name = "true")]
    Always,
    /// Never pin.
    #[value(name = "false")]
    Never,
}

impl Pin {
    /// Whether `workers` workers are pinned when the process may use `cores` cores.
    pub fn applies(self, workers: usize, cores: usize) -> bool {
        match self {
            Pin::Auto => workers < cores,
            Pin::Always => true,
            Pin::Never => false,
        }
    }
}

/// --mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Evict when full (memcached's default).
    Cache,
    /// Never evict; refuse writes when full.
    Store,
}

/// --access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AccessArg {
    /// Exclusive read, exclusive write.
    Erew,
    /// Concurrent read, exclusive write.
    Crew,
}

/// --eviction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EvictionArg {
    /// First in, first out.
    Fifo,
    /// Least recently used.
    Lru,
    /// Approximate LRU (MICA's).
    ApproxLru,
    /// FIFO that keeps, once per read up to three, an item read since it was written.
    Clock,
    /// S3-FIFO: a small ring for new keys, a main ring run by clock, a ghost of dropped keys.
    S3fifo,
}

/// --huge-pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HugePagesArg {
    /// Use them when available.
    Auto,
    /// Ask for them (still starts without them).
    On,
    /// Never.
    Off,
}

/// memcached's default bytes of log lines held for one watcher.
const WATCHER_LOGBUF_BYTES: usize = 256 << 10;

/// What `-o` set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extended {
    /// Bytes of log lines held for a watcher that has not read them (then lines are skipped).
    pub watcher_logbuf_bytes: usize,
    /// Per-worker log buffer (accepted for memcached's service lines; lines go straight to
    /// the watchers' buffers here).
    pub worker_logbuf_bytes: usize,
    /// `idle_timeout`: seconds a client may stay silent before it is closed (0: never).
    pub idle_timeout_secs: u32,
    /// `read_buf_mem_limit`: bytes of read buffers all connections may hold together (0: no
    /// limit beyond each connection's own).
    pub read_buf_mem_limit_bytes: usize,
    /// `maxconns_fast` (memcached 1.6's default): a connection over the limit is told
    /// `ERROR Too many open connections` and closed, instead of waiting in the backlog.
    pub maxconns_fast: bool,
    /// `slab_chunk_max` in bytes (memcached's -I checks read it; no slabs here).
    pub slab_chunk_max_bytes: usize,
    /// Whether `slab_chunk_max` was given.
    pub slab_chunk_max_given: bool,
    /// `lru_crawler` on at start (`no_lru_crawler`, `no_modern` turn it off): the crawler's
    /// commands (`lru_crawler metadump`) answer as memcached's do when it is off.
    pub lru_crawler: bool,
    /// memcached's slab rebalancer switch (`slab_reassign`, on unless `no_slab_reassign` or
    /// `no_modern`): nothing to rebalance here; it decides which of memcached's `stats` lines
    /// appear.
    pub slab_reassign: bool,
    /// memcached's LRU maintainer thread switch (likewise only for the `stats` lines).
    pub lru_maintainer: bool,
    /// Options accepted that change nothing here (memcached's slab and LRU tuning), for the
    /// one warning line at start.
    pub ignored: Vec<String>,
    /// `-o mrc_sample=N`: `stats mrc` samples 1 key in N at most (0: off until `stats mrc on`).
    pub mrc_sample_one_in: u32,
    /// `-o hotkeys_sample=N`: `stats hotkeys` counts 1 request in N (1: all, 0: off).
    pub hotkeys_sample_one_in: u32,
    /// `-o front_cache`: under EREW, workers serve repeated gets of other workers' keys from
    /// a small cache validated by the owners' write epochs (qs_store::front).
    pub front_cache: bool,
    /// `-o ext_path=FILE:SIZE` (several allowed): the flash tier's files and their sizes.
    pub ext_paths: Vec<(std::path::PathBuf, u64)>,
    /// `-o ext_item_size`: items smaller than this (header, key and value) stay DRAM-only.
    pub ext_item_size: usize,
    /// `-o ext_wbuf_size` (MB): the most a partition's flash write page holds.
    pub ext_wbuf_bytes: usize,
    /// `-o ext_page_size` (MB): memcached's flash allocation unit (shown in `stats settings`;
    /// the flash log here is one circular log per partition).
    pub ext_page_bytes: usize,
    /// `-o ext_threads`: threads reading flash.
    pub ext_threads: usize,
    /// `-o flash_io=threads`: flash reads on the reader threads even where io_uring works
    /// (`auto`, the default: each worker's own io_uring, the threads where it is refused).
    pub flash_io_threads: bool,
    /// `-o flash_direct`: the flash files are opened with O_DIRECT (reads and writes reach the
    /// device, not the page cache; for measuring it, or where memory is better spent on items).
    pub flash_direct: bool,
    /// The `ssl_*` options (used with -Z).
    pub ssl: ssl::Settings,
    /// `metrics_port`, `metrics_listen`: the admin HTTP listener; `cluster_config`: the fleet
    /// file of cluster discovery.
    pub admin: admin::Settings,
    /// `-o io_backend`: how workers do their stream connections' I/O.
    pub io_backend: IoBackend,
    /// memcached's `-o hashpower=N` (12 to 32): the index holds at least 2^N slots in all, so
    /// that a cache of small items keeps as many as its memory holds (unset: sized for items of
    /// 128 bytes).
    pub hashpower: Option<u32>,
    /// memcached's `-o no_hashexpand`: the index keeps the size it starts with instead of
    /// growing as items outnumber its slots.
    pub no_hashexpand: bool,
}

/// `-o io_backend`: how a worker reads and writes its stream connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoBackend {
    /// epoll readiness, one `recv` and one `send` per ready connection.
    Epoll,
    /// io_uring (the default: docs/benchmarks/HISTORY.md, "io_uring becomes the default backend"): multishot receives
    /// into a provided-buffer ring, every send of a loop turn in one `io_uring_enter` (TLS
    /// connections stay on epoll); epoll where io_uring is refused.
    #[default]
    Uring,
}

/// memcached's ext_* defaults (storage.c, memcached.c).
pub const EXT_ITEM_SIZE_DEFAULT: usize = 512;
pub const EXT_WBUF_MB_DEFAULT: usize = 4;
pub const EXT_PAGE_MB_DEFAULT: usize = 64;
pub const EXT_THREADS_DEFAULT: usize = 1;

/// memcached's extstore options that tune its page compaction and write-back thread: accepted
/// and named in the one warning line (the flash log here is circular: nothing to compact).
const EXT_TUNING_OPTIONS: &[&str] = &[
    "ext_item_age",
    "ext_low_ttl",
    "ext_recache_rate",
    "ext_compact_under",
    "ext_drop_under",
    "ext_max_frag",
    "ext_drop_unread",
    "ext_max_sleep",
    "ext_io_depth",
    "slab_automove_freeratio",
];

/// memcached's ext_path argument: `FILE:SIZE[:bucket]`, SIZE with an m, g, t or p suffix.
fn parse_ext_path(value: &str) -> Result<(std::path::PathBuf, u64), String> {
    let mut parts = value.split(':');
    let file = parts.next().filter(|file| !file.is_empty()).ok_or("Could not parse ext_path")?;
    let size = parts
        .next()
        .filter(|size| !size.is_empty())
        .ok_or("must supply size to ext_path, ie: ext_path=/f/e:64m (M|G|T|P supported)")?;
    if let Some(bucket) = parts.next() {
        if !matches!(bucket, "compact" | "lowttl" | "chunked" | "default") {
            return Err(format!("Unknown extstore bucket: {bucket}"));
        }
    }
    let (digits, unit) = size.split_at(size.len() - 1);
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        "p" => 1 << 50,
        _ => return Err(format!("ext_path {file}: size {size} needs an M, G, T or P suffix")),
    };
    let count: u64 = digits.parse().map_err(|_| format!("ext_path {file}: could not parse size {size}"))?;
    let bytes = count.checked_mul(multiplier).filter(|&bytes| bytes > 0);
    Ok((file.into(), bytes.ok_or_else(|| format!("ext_path {file}: size {size} is not usable"))?))
}

/// memcached's slab page: the largest slab chunk and what `slab_chunk_max` must divide.
pub const SLAB_PAGE_BYTES: usize = 1 << 20;

/// memcached's `-o` options that tune its slab allocator, LRU and hash table: accepted (so a
/// service line starts unchanged) and named in one warning, since quicksilver's circular logs
/// and lossy index have none of these parts (docs/COMPATIBILITY.md).
const TUNING_OPTIONS: &[&str] = &[
    "slab_reassign",
    "no_slab_reassign",
    "slab_automove",
    "no_slab_automove",
    "slab_automove_ratio",
    "slab_automove_window",
    "tail_repair_time",
    "hash_algorithm",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "lru_maintainer",
    "no_lru_maintainer",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temporary_ttl",
    "slab_sizes",
    "track_sizes",
    "no_chunked_items",
];

impl Default for Extended {
    /// memcached 1.6's defaults (`-o modern`), with quicksilver's own options off.
    fn default() -> Extended {
        Extended {
            watcher_logbuf_bytes: WATCHER_LOGBUF_BYTES,
            worker_logbuf_bytes: 64 << 10,
            idle_timeout_secs: 0,
            read_buf_mem_limit_bytes: 0,
            maxconns_fast: true,
            slab_chunk_max_bytes: SLAB_PAGE_BYTES / 2,
            slab_chunk_max_given: false,
            lru_crawler: true,
            slab_reassign: true,
            lru_maintainer: true,
            ignored: Vec::new(),
            mrc_sample_one_in: crate::observe::mrc::SAMPLE_ONE_IN,
            hotkeys_sample_one_in: crate::observe::hotkeys::SAMPLE_ONE_IN,
            front_cache: false,
            ext_paths: Vec::new(),
            ext_item_size: EXT_ITEM_SIZE_DEFAULT,
            ext_wbuf_bytes: EXT_WBUF_MB_DEFAULT << 20,
            ext_page_bytes: EXT_PAGE_MB_DEFAULT << 20,
            ext_threads: EXT_THREADS_DEFAULT,
            flash_io_threads: false,
            flash_direct: false,
            ssl: ssl::Settings::default(),
            admin: admin::Settings::default(),
            io_backend: IoBackend::Uring,
            hashpower: None,
            no_hashexpand: false,
        }
    }
}

impl Extended {
    /// A flash tier option (`ext_*`, `flash_*`): `Ok(true)` when `name` is one.
    fn flash_option(&mut self, name: &str, value: Option<&str>, option: &str) -> Result<bool, String> {
        match name {
            "ext_path" => {
                let value = value.ok_or("Could not parse ext_path")?;
                self.ext_paths.push(parse_ext_path(value)?);
            }
            "ext_item_size" => self.ext_item_size = number(name, value)? as usize,
            "ext_wbuf_size" => self.ext_wbuf_bytes = number(name, value)? as usize * (1 << 20),
            "ext_page_size" => self.ext_page_bytes = number(name, value)? as usize * (1 << 20),
            "ext_threads" => self.ext_threads = (number(name, value)? as usize).max(1),
            "flash_direct" => self.flash_direct = true,
            "flash_io" => {
                self.flash_io_threads = match value {
                    Some("threads") => true,
                    Some("auto") => false,
                    _ => return Err("flash_io must be auto or threads".into()),
                }
            }
            _ if EXT_TUNING_OPTIONS.contains(&name) => self.ignored.push(option.to_string()),
            _ if name.starts_with("ext_") => return Err(format!("Illegal suboption \"{option}\"")),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// A TLS option (`ssl_*`): `Ok(true)` when `name` is one.
    fn ssl_option(&mut self, name: &str, value: Option<&str>) -> Result<bool, String> {
        match name {
            "ssl_chain_cert" => self.ssl.chain_cert = Some(text(name, value)?.into()),
            "ssl_key" => self.ssl.key = Some(text(name, value)?.into()),
            "ssl_ciphers" => self.ssl.ciphers = Some(text(name, value)?),
            "ssl_ca_cert" => self.ssl.ca_cert = Some(text(name, value)?.into()),
            "ssl_keyformat" => self.ssl.keyformat = signed(name, value)?,
            "ssl_verify_mode" => self.ssl.verify_mode = choice(name, value, 3)?,
            "ssl_min_version" => self.ssl.min_version = choice(name, value, 3)?,
            "ssl_wbuf_size" => self.ssl.wbuf_bytes = kilobytes(name, value)?,
            "ssl_session_cache" => self.ssl.session_cache = true,
            "ssl_kernel_tls" => self.ssl.kernel_tls = true,
            "ssl_allow_plaintext" => self.ssl.allow_plaintext = true,
            "ssl_handshake_timeout" => self.ssl.handshake_secs = number(name, value)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// memcached's options that keep their meaning whatever the server (inline ASCII responses
/// are gone in memcached 1.6 too; privileges are dropped by -u here): accepted silently.
const NO_OP_OPTIONS: &[&str] =
    &["modern", "inline_ascii_resp", "no_inline_ascii_resp", "drop_privileges", "no_drop_privileges"];

impl Config {
    /// The `-o` options, checked as memcached checks them (its messages).
    pub fn extended(&self) -> Result<Extended, String> {
        let mut extended = Extended::default();
        for option in self.extended.iter().filter(|option| !option.is_empty()) {
            let (name, value) = match option.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (option.as_str(), None),
            };
            if extended.flash_option(name, value, option)?
                || extended.ssl_option(name, value)?
                || extended.admin.option(name, value)?
            {
                continue;
            }
            match name {
                "io_backend" => {
                    extended.io_backend = match value {
                        Some("epoll") => IoBackend::Epoll,
                        Some("uring") => IoBackend::Uring,
                        _ => return Err("io_backend must be epoll or uring".into()),
                    }
                }
                "watcher_logbuf_size" => extended.watcher_logbuf_bytes = kilobytes(name, value)?,
                "worker_logbuf_size" => extended.worker_logbuf_bytes = kilobytes(name, value)?,
                "idle_timeout" => {
                    let value = value.ok_or("Missing numeric argument for idle_timeout")?;
                    // memcached reads it with atoi: digits up to the first other byte.
                    extended.idle_timeout_secs = atoi(value).max(0) as u32;
                }
                "read_buf_mem_limit" => {
                    extended.read_buf_mem_limit_bytes = number(name, value)? as usize * (1 << 20);
                }
                "hashpower" => {
                    let n = atoi(value.ok_or("Missing numeric argument for hashpower")?);
                    if n < 12 {
                        return Err(format!("Initial hashtable multiplier of {n} is too low"));
                    }
                    if n > 32 {
                        return Err(format!(
                            "Initial hashtable multiplier of {n} is too high\nChoose a value based on \"STAT hash_power_level\" from a running instance"
                        ));
                    }
                    extended.hashpower = Some(n as u32);
                }
                "no_hashexpand" => extended.no_hashexpand = true,
                "mrc_sample" => extended.mrc_sample_one_in = number(name, value)?,
                "hotkeys_sample" => extended.hotkeys_sample_one_in = number(name, value)?,
                "front_cache" => extended.front_cache = true,
                "maxconns_fast" => extended.maxconns_fast = true,
                "no_maxconns_fast" => extended.maxconns_fast = false,
                "slab_chunk_max" => {
                    let value = value.ok_or("Missing slab_chunk_max argument")?;
                    extended.slab_chunk_max_bytes = value
                        .trim()
                        .parse::<usize>()
                        .map_err(|_| "could not parse argument to slab_chunk_max".to_string())?;
                    extended.slab_chunk_max_given = true;
                }
                "lru_crawler" => extended.lru_crawler = true,
                "no_lru_crawler" => extended.lru_crawler = false,
                "no_modern" => {
                    if !extended.slab_chunk_max_given {
                        extended.slab_chunk_max_bytes = SLAB_PAGE_BYTES;
                    }
                    extended.maxconns_fast = false;
                    extended.lru_crawler = false;
                    extended.slab_reassign = false;
                    extended.lru_maintainer = false;
                    extended.ignored.push(option.clone());
                }
                "resp_obj_mem_limit" => {
                    eprintln!("DEPRECATED: resp_obj_mem_limit no longer used. See read_buf_mem_limit,");
                }
                "slab_reassign" | "no_slab_reassign" => {
                    extended.slab_reassign = name == "slab_reassign";
                    extended.ignored.push(option.clone());
                }
                "lru_maintainer" | "no_lru_maintainer" => {
                    extended.lru_maintainer = name == "lru_maintainer";
                    extended.ignored.push(option.clone());
                }
                _ if NO_OP_OPTIONS.contains(&name) => {}
                _ if TUNING_OPTIONS.contains(&name) => extended.ignored.push(option.clone()),
                _ if name.starts_with("proxy_") => {
                    return Err(format!("-o {name}: memcached's proxy mode is not part of quicksilver"))
                }
                _ => return Err(format!("Illegal suboption \"{option}\"")),
            }
        }
        extended.admin.warm_from = self.warm_from.clone().or(extended.admin.warm_from);
        Ok(extended)
    }

    /// memcached's checks of -I against -m and slab_chunk_max, with its messages.
    /// -Z's rules: memcached's, plus plaintext UDP and native ports only when asked for.
    fn check_tls(&self, extended: &Extended, plan: &crate::config::listen::Plan) -> Result<(), String> {
        if !self.enable_ssl {
            return plan.refuse_tls_prefixes();
        }
        if plan.tcp.is_empty() {
            return Err("ERROR: You cannot enable SSL without a TCP port.".into());
        }
        if extended.ssl.kernel_tls {
            return Err("Kernel TLS offload is not available".into());
        }
        if !extended.ssl.allow_plaintext {
            if !plan.udp.is_empty() {
                return Err(
                    "-Z: UDP (-U) has no TLS, so its requests and replies would cross the network in \
                            plaintext beside the TLS ports; turn it off (-U 0) or accept that with \
                            -o ssl_allow_plaintext"
                        .into(),
                );
            }
            if self.native_port != 0 {
                return Err("-Z: the native UDP ports (--native-port) have no TLS, so their requests and \
                            replies would cross the network in plaintext; leave them off or accept that \
                            with -o ssl_allow_plaintext"
                    .into());
            }
        }
        Ok(())
    }

    /// Authentication covers every way in: each listener must speak the one dialect its
    /// server's mode authenticates (-S: binary, -Y: text), as memcached demands of -B (which it
    /// checks, unlike each `-l proto[...]:` listener's own), or Redis's (whose AUTH checks the
    /// same users); the transports without authentication (UDP, the native ports) stay off.
    fn check_auth(&self, plan: &crate::config::listen::Plan) -> Result<(), String> {
        if self.sasl && self.auth_file.is_some() {
            // memcached: -S makes the protocol binary, which -Y then refuses.
            return Err(
                "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens.".into(),
            );
        }
        let (mode, speaks, refusal) = if self.sasl {
            ("-S", Protocol::Binary, "ERROR: You cannot allow the ASCII protocol while using SASL.")
        } else if self.auth_file.is_some() {
            (
                "-Y",
                Protocol::Ascii,
                "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens.",
            )
        } else {
            return Ok(());
        };
        if self.protocol.is_some_and(|protocol| protocol != speaks) {
            return Err(refusal.into());
        }
        // A Redis listener authenticates with AUTH against the same users.
        let gated = |protocol: Protocol| protocol == speaks || protocol == Protocol::Resp;
        if let Some(endpoint) = plan.tcp.iter().find(|endpoint| !gated(endpoint.protocol)) {
            let name = match endpoint.protocol {
                Protocol::Auto => "negotiating",
                Protocol::Ascii => "ascii",
                Protocol::Binary => "binary",
                Protocol::Resp => "resp",
            };
            let want = if self.sasl { "binary" } else { "ascii" };
            return Err(format!(
                "{refusal} Listener {} speaks proto[{name}]; with {mode} every listener must be proto[{want}] \
                 (connections could otherwise skip authentication)",
                endpoint.addr
            ));
        }
        if self.udp_port() != 0 {
            return Err(if self.sasl {
                "ERROR: Cannot enable UDP while using binary SASL authentication.".into()
            } else {
                "Cannot use UDP with ascii authentication enabled (-U 0 to disable)".into()
            });
        }
        if self.native_port != 0 {
            return Err(format!(
                "ERROR: the native protocol has no authentication: --native-port cannot be used with {mode}"
            ));
        }
        Ok(())
    }

    fn check_item_size(&self, extended: &Extended) -> Result<(), String> {
        let item = self.item_bytes_max;
        if item < 1024 {
            return Err("Item max size cannot be less than 1024 bytes.".into());
        }
        if item as u64 > (self.memory_mib << 20) / 2 {
            return Err("Cannot set item size limit higher than 1/2 of memory max.".into());
        }
        if item > 1 << 30 {
            return Err("Cannot set item size limit higher than a gigabyte.".into());
        }
        let mut chunk = extended.slab_chunk_max_bytes;
        if item > 1 << 20 && !extended.slab_chunk_max_given {
            chunk = SLAB_PAGE_BYTES / 2;
        }
        if chunk == 0 || chunk > item {
            return Err(format!(
                "slab_chunk_max (bytes: {chunk}) cannot be larger than -I (item_size_max {item})"
            ));
        }
        if item % chunk != 0 {
            return Err(format!(
                "-I (item_size_max: {item}) must be evenly divisible by slab_chunk_max (bytes: {chunk})"
            ));
        }
        if SLAB_PAGE_BYTES % chunk != 0 {
            return Err(format!(
                "slab_chunk_max (bytes: {chunk}) must divide evenly into {SLAB_PAGE_BYTES} (slab_page_size)"
            ));
        }
        Ok(())
    }

    /// The protocol connections speak: -B, or what -S (binary) and -Y (ascii) imply.
    pub fn binding_protocol(&self) -> Protocol {
        match self.protocol {
            Some(protocol) => protocol,
            None if self.sasl => Protocol::Binary,
            None if self.auth_file.is_some() => Protocol::Ascii,
            None => Protocol::Auto,
        }
    }

    /// The TCP port in memcached's numbering (0 off, -1 a free one): -p, else -U's port when
    /// only -U is given, else 11211.
    pub fn tcp_port(&self) -> i32 {
        match (self.port, self.udp_port) {
            (Some(port), _) => port,
            (None, Some(udp)) if udp != 0 => udp,
            (None, _) => DEFAULT_PORT,
        }
    }

    /// The UDP port in memcached's numbering (0, the default, is off).
    pub fn udp_port(&self) -> i32 {
        self.udp_port.unwrap_or(0)
    }

    /// The addresses to listen on (none with -s, which replaces TCP and UDP).
    pub fn listen_plan(&self) -> Result<crate::config::listen::Plan, String> {
        if self.unix_socket.is_some() {
            return Ok(crate::config::listen::Plan::default());
        }
        crate::config::listen::plan(&self.listen, self.tcp_port(), self.udp_port(), self.binding_protocol())
    }

    /// The first interface (UDP, the worker ports and the native ports bind it).
    pub fn interface(&self) -> IpAddr {
        self.listen_plan().map_or(IpAddr::from([127, 0, 0, 1]), |plan| plan.interface())
    }

    /// The most item memory `cache_memlimit` may set, in bytes: --memory-max, else the
    /// machine's memory; never below -m; -m itself with -k.
    pub fn memory_max_bytes(&self) -> u64 {
        let configured = self.memory_mib << 20;
        if self.lock_memory {
            return configured;
        }
        let machine = || {
            std::fs::read_to_string("/proc/meminfo").ok().and_then(|info| {
                let line = info.lines().find(|line| line.starts_with("MemTotal:"))?.to_owned();
                Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? << 10)
            })
        };
        let max = self.memory_max_mib.map(|mib| mib << 20).or_else(machine).unwrap_or(configured);
        max.max(configured)
    }

    /// Worker count.
    pub fn workers(&self) -> usize {
        self.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1)
    }

    /// Whether store mode is on (--mode store or -M).
    pub fn store_mode(&self) -> bool {
        self.mode == Mode::Store || self.no_evictions
    }

    /// Partition count: by default four per worker, fewer (down to one per worker) when -m
    /// is too small to give each a mebibyte (memcached runs with -m 2).
    pub fn partition_count(&self) -> usize {
        self.partitions.unwrap_or_else(|| {
            // validate() refuses more than 256 workers; clamped here so a huge -t cannot overflow.
            let workers = self.workers().min(1 << 12).next_power_of_two();
            let whole_mib = (self.memory_mib.max(1) as usize).min(1 << 20);
            let fitting = 1 << whole_mib.ilog2();
            (4 * workers).min(fitting).max(workers)
        })
    }

    /// Checks what clap cannot; the message is for the user. What it gives back is the `-o`
    /// settings, parsed once here for whoever starts the server.
    pub fn validate(&self) -> Result<Extended, String> {
        if self.memory_file.is_some() && self.store_mode() {
            return Err(
                "-e: store mode keeps its items in an arena, not a log; a memory file holds logs only".into(),
            );
        }
        let plan = self.listen_plan()?;
        self.check_auth(&plan)?;
        if plan.udp.len() > UDP_SOCKETS_MAX {
            return Err(format!("-U: at most {} UDP addresses (-l gives more)", UDP_SOCKETS_MAX));
        }
        if plan.tcp.len() > 1 && (self.worker_port_base != 0 || self.native_port != 0) {
            return Err("--worker-port-base and --native-port take one -l address (several given)".into());
        }
        let extended = self.extended()?;
        self.check_item_size(&extended)?;
        self.check_tls(&extended, &plan)?;
        let workers = self.workers();
        if workers > 256 {
            return Err("at most 256 worker threads".into());
        }
        let partitions = self.partition_count();
        if !partitions.is_power_of_two() || partitions < workers || partitions > 4096 {
            return Err(format!(
                "--partitions {partitions}: must be a power of two, at least the worker count ({workers}), at most 4096"
            ));
        }
        if self.native_port != 0 && self.native_port as usize + partitions > 65536 {
            return Err(format!(
                "--native-port {}: {partitions} partitions need ports up to {}",
                self.native_port,
                self.native_port as usize + partitions - 1
            ));
        }
        let per_partition = (self.memory_mib << 20) / partitions as u64;
        if per_partition < 1 << 20 {
            return Err(format!(
                "-m {}: at least 1 MiB per partition ({partitions} partitions)",
                self.memory_mib
            ));
        }
        Ok(extended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_options_in_memcached_syntax() {
        let parse = |options: &str| {
            Config::try_parse_from(["quicksilver", "-o", options])
                .expect("command line")
                .extended()
                .map(|e| e.ssl)
        };
        let ssl = parse("ssl_chain_cert=/c.pem,ssl_key=/k.pem,ssl_verify_mode=2,ssl_keyformat=2,ssl_wbuf_size=64,ssl_session_cache,ssl_min_version=3,ssl_ca_cert=/ca.pem,ssl_ciphers=HIGH:!ECDSA").expect("valid");
        assert_eq!(ssl.chain_cert.as_deref(), Some(std::path::Path::new("/c.pem")));
        assert_eq!((ssl.verify_mode, ssl.verify_flags(), ssl.keyformat), (2, 3, 2));
        assert_eq!((ssl.wbuf_bytes, ssl.session_cache, ssl.min_version_text()), (64 << 10, true, "tlsv1.3"));
        assert_eq!(ssl.ciphers.as_deref(), Some("HIGH:!ECDSA"));
        assert_eq!(parse("ssl_verify_mode").unwrap_err(), "Missing ssl_verify_mode argument");
        assert_eq!(parse("ssl_verify_mode=x").unwrap_err(), "could not parse argument to ssl_verify_mode");
        assert_eq!(
            parse("ssl_verify_mode=4").unwrap_err(),
            "Invalid ssl_verify_mode. Use help to see valid options."
        );
        assert_eq!(
            parse("ssl_min_version=-1").unwrap_err(),
            "Invalid ssl_min_version. Use help to see valid options."
        );
        assert_eq!(parse("ssl_chain_cert").unwrap_err(), "Missing ssl_chain_cert argument");
        assert_eq!(parse("ssl_bogus").unwrap_err(), "Illegal suboption \"ssl_bogus\"");
        let plan = |args: &[&str]| {
            let mut all = vec!["quicksilver"];
            all.extend_from_slice(args);
            Config::try_parse_from(all).expect("command line").validate()
        };
        assert_eq!(
            plan(&["-l", "notls:127.0.0.1:1"]).unwrap_err(),
            "'notls' option is valid only when SSL is enabled"
        );
        assert!(plan(&["-Z", "-U", "11211"]).unwrap_err().contains("ssl_allow_plaintext"));
        assert!(plan(&["-Z", "-U", "11211", "-o", "ssl_allow_plaintext"]).is_ok());
        assert_eq!(plan(&["-Z", "-p", "0"]).unwrap_err(), "ERROR: You cannot enable SSL without a TCP port.");
    }

    #[test]
    fn ext_path_in_memcached_syntax() {
        assert_eq!(parse_ext_path("/f/e:64m"), Ok(("/f/e".into(), 64 << 20)));
        assert_eq!(parse_ext_path("/f/e:2G:compact"), Ok(("/f/e".into(), 2 << 30)));
        assert_eq!(parse_ext_path("/f/e:1t"), Ok(("/f/e".into(), 1 << 40)));
        assert!(parse_ext_path("/f/e").unwrap_err().starts_with("must supply size"));
        assert!(parse_ext_path("/f/e:64").is_err(), "no unit");
        assert!(parse_ext_path("/f/e:0m").is_err());
        assert!(parse_ext_path(":64m").is_err());
        assert_eq!(parse_ext_path("/f/e:1m:other"), Err("Unknown extstore bucket: other".into()));
        let config = Config::parse_from([
            "quicksilver",
            "-o",
            "ext_path=/a:1g,ext_path=/b:2g,ext_item_size=1024,ext_threads=4,ext_recache_rate=10",
        ]);
        let extended = config.extended().unwrap();
        assert_eq!(extended.ext_paths, vec![("/a".into(), 1 << 30), ("/b".into(), 2 << 30)]);
        assert_eq!((extended.ext_item_size, extended.ext_threads), (1024, 4));
        assert_eq!(extended.ignored, vec!["ext_recache_rate=10".to_string()]);
    }

    #[test]
    fn sizes_in_memcached_syntax() {
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("2097152"), Ok(2 << 20));
        assert_eq!(parse_size("12"), Ok(12));
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn partitions_default_to_four_per_worker() {
        let config = Config::parse_from(["quicksilver", "-t", "2"]);
        assert_eq!(config.partition_count(), 8);
        assert!(config.validate().is_ok());
        // A small -m gets fewer partitions, each at least a mebibyte.
        let small = Config::parse_from(["quicksilver", "-t", "2", "-m", "3"]);
        assert_eq!(small.partition_count(), 2);
        assert!(small.validate().is_ok());
        let tiny = Config::parse_from(["quicksilver", "-t", "2", "-m", "1"]);
        assert!(tiny.validate().is_err());
        let bad = Config::parse_from(["quicksilver", "-t", "2", "--partitions", "6"]);
        assert!(bad.validate().is_err());
        let three = Config::parse_from(["quicksilver", "-t", "3"]);
        assert_eq!(three.partition_count(), 16);
        // A -t past any machine is refused, not an overflow (found by the config fuzz target).
        let huge = Config::parse_from(["quicksilver", "-t", "4444444444444444444444444444"]);
        assert!(huge.validate().is_err());
        assert!(three.validate().is_ok());
    }
}

#[cfg(test)]
mod pin_tests {
    use super::Pin;

    #[test]
    fn auto_pins_only_with_a_core_to_spare() {
        assert!(Pin::Auto.applies(1, 2));
        assert!(!Pin::Auto.applies(2, 2));
        assert!(!Pin::Auto.applies(4, 2));
        assert!(Pin::Always.applies(2, 2));
        assert!(!Pin::Never.applies(1, 8));
    }
}
