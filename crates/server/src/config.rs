//! The command line, in memcached's spelling where it has one.

use clap::{Parser, ValueEnum};
use std::net::IpAddr;

/// quicksilver: a memcached-compatible cache server on MICA's data path.
#[derive(Parser, Debug, Clone)]
#[command(name = "quicksilver", version = crate::VERSION, about, max_term_width = 100)]
pub struct Config {
    /// TCP port to listen on.
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    pub port: u16,
    /// Interface to listen on.
    #[arg(short = 'l', long = "listen", default_value = "127.0.0.1")]
    pub listen: IpAddr,
    /// UDP port for memcached's UDP protocol (0 = off, the default: UDP replies can be used for
    /// amplification, so turn it on only where clients are trusted).
    #[arg(short = 'U', long = "udp-port", default_value_t = 0)]
    pub udp_port: u16,
    /// Item memory in megabytes (the logs; the index and buffers come on top, see README).
    #[arg(short = 'm', long = "memory-limit", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub memory_mib: u64,
    /// Most simultaneous connections.
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Worker threads, one per core (default: the cores this process may run on).
    #[arg(short = 't', long = "threads")]
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
    /// docs/COMPATIBILITY.md): watcher_logbuf_size=KB, worker_logbuf_size=KB.
    #[arg(short = 'o', long = "extended", action = clap::ArgAction::Append, value_delimiter = ',')]
    pub extended: Vec<String>,
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
    #[arg(long, value_enum, default_value_t = EvictionArg::ApproxLru)]
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
    /// client or proxy, wait for them instead of moving: docs/BENCHMARKS.md).
    #[arg(long, value_enum, default_value_t = Pin::Auto)]
    pub pin: Pin,
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
    /// Concurrent read, concurrent write.
    Crcw,
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

/// memcached's -I syntax: bytes, or a number with a k or m suffix.
fn parse_size(text: &str) -> Result<usize, String> {
    let lower = text.to_ascii_lowercase();
    let (digits, unit) = match lower.as_bytes().last() {
        Some(b'k') => (&lower[..lower.len() - 1], 1 << 10),
        Some(b'm') => (&lower[..lower.len() - 1], 1 << 20),
        _ => (&lower[..], 1),
    };
    let value: usize = digits.parse().map_err(|_| format!("not a size: {text}"))?;
    let bytes = value.checked_mul(unit).ok_or("size too large")?;
    if !(1024..=1 << 30).contains(&bytes) {
        return Err("item size must be between 1k and 1024m".into());
    }
    Ok(bytes)
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
}

impl Config {
    /// The `-o` options, checked as memcached checks them (its messages).
    pub fn extended(&self) -> Result<Extended, String> {
        let mut extended =
            Extended { watcher_logbuf_bytes: WATCHER_LOGBUF_BYTES, worker_logbuf_bytes: 64 << 10 };
        let kilobytes = |name: &str, value: Option<&str>| -> Result<usize, String> {
            let value = value.ok_or_else(|| format!("Missing {name} argument"))?;
            value
                .trim()
                .parse::<u32>()
                .map(|kb| kb as usize * 1024)
                .map_err(|_| format!("could not parse argument to {name}"))
        };
        for option in self.extended.iter().filter(|option| !option.is_empty()) {
            let (name, value) = match option.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (option.as_str(), None),
            };
            match name {
                "watcher_logbuf_size" => extended.watcher_logbuf_bytes = kilobytes(name, value)?,
                "worker_logbuf_size" => extended.worker_logbuf_bytes = kilobytes(name, value)?,
                _ => return Err(format!("Illegal suboption \"{option}\"")),
            }
        }
        Ok(extended)
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
            let workers = self.workers().next_power_of_two();
            let whole_mib = (self.memory_mib.max(1) as usize).min(1 << 20);
            let fitting = 1 << whole_mib.ilog2();
            (4 * workers).min(fitting).max(workers)
        })
    }

    /// Checks what clap cannot; the message is for the user.
    pub fn validate(&self) -> Result<(), String> {
        self.extended()?;
        let workers = self.workers();
        let partitions = self.partition_count();
        if workers > 256 {
            return Err("at most 256 worker threads".into());
        }
        if !partitions.is_power_of_two() || partitions < workers || partitions > 4096 {
            return Err(format!(
                "--partitions {partitions}: must be a power of two, at least the worker count ({workers}), at most 4096"
            ));
        }
        if self.access == AccessArg::Crcw {
            return Err("--access crcw is not served yet; use crew or erew".into());
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_memcached_syntax() {
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("2097152"), Ok(2 << 20));
        assert!(parse_size("12").is_err());
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

/// An octal permission mask such as 700 or 0766.
fn parse_octal(text: &str) -> Result<u32, String> {
    u32::from_str_radix(text, 8)
        .ok()
        .filter(|mask| *mask <= 0o777)
        .ok_or_else(|| format!("{text:?} is not an octal permission mask (e.g. 700)"))
}
