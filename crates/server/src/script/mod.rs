//! Redis scripts: EVAL's Lua 5.1, as redis-server 7.0 embeds it (eval.c, script_lua.c).
//!
//! One script cache serves the whole server ([`Scripts`], in the shared state): a script's
//! SHA1 and its source, loaded by EVAL or SCRIPT LOAD on any worker and run by EVALSHA on any
//! other. Each worker thread runs scripts in a Lua state of its own ([`vm`]), which compiles
//! a script the first time that worker runs it; SCRIPT FLUSH moves the cache's generation, and
//! each state drops what it compiled when it next runs one. The state calls back into the
//! worker's executor for `redis.call` (exec/resp/eval.rs), which runs the command as the
//! connection's own would run and hands its reply here to become a Lua value ([`convert`]).
//!
//! A script's run is watched ([`Running`]): past `lua-time-limit` it can be stopped by
//! SCRIPT KILL from any connection of another worker, unless it has written.

mod call;
pub(crate) mod convert;
mod current;
pub(crate) mod door;
mod libs;
mod msgpack;
mod run;
pub(crate) mod vm;

use std::collections::HashMap;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::{Arc, Mutex};

/// A script's SHA1 in lower-case hex, as scripts are named.
pub type Sha = [u8; 40];

/// redis-server's `lua-time-limit` (`busy-reply-threshold`) by default, milliseconds.
pub(crate) const TIME_LIMIT_MS: u64 = 5_000;

/// Each worker's Lua state may hold this much (its allocations past it fail: the script
/// ends with an OOM error), bytes.
pub(crate) const MEMORY_MAX: usize = 64 << 20;

/// The answer to a request for a worker whose script runs past `lua-time-limit`.
pub(crate) const BUSY: &[u8] =
    b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";

/// The server's script cache and the scripts running now.
pub struct Scripts {
    /// SHA1 -> source.
    cache: Mutex<HashMap<Sha, Arc<[u8]>>>,
    /// The sources' bytes (INFO's `used_memory_scripts_eval`).
    bytes: AtomicUsize,
    /// How many scripts (INFO's `number_of_cached_scripts`).
    count: AtomicUsize,
    /// Moved by SCRIPT FLUSH: a worker's Lua state drops what it compiled before.
    generation: AtomicU64,
    /// `lua-time-limit`, milliseconds (CONFIG SET changes it).
    pub time_limit_ms: AtomicU64,
    /// Each Lua state's memory limit, bytes.
    pub memory_max: usize,
    /// Each worker's script, while one runs.
    pub running: Vec<Running>,
    /// Each worker's Lua state's memory, bytes, as it last published it.
    pub memory: Vec<AtomicUsize>,
    /// The server is stopping: a running script ends at its next look (else SIGTERM could
    /// never stop a server whose only worker runs a script without end).
    stopping: AtomicBool,
    /// Scripts past `lua-time-limit` now: while any is, every worker answers its RESP
    /// clients `-BUSY` (worker/busy.rs), as redis-server answers all of its clients.
    overdue: AtomicUsize,
}

/// What a worker's running script shows the others.
#[derive(Default)]
pub struct Running {
    /// When it started, unix milliseconds (0: none runs).
    pub since_ms: AtomicU64,
    /// [`CLEAN`], [`KILLED`] or [`WROTE`]: one of the last two, whichever came first, for
    /// good (SCRIPT KILL and the script's first write race for it).
    state: AtomicU8,
    /// It ran past `lua-time-limit` (counted in [`Scripts::overdue`]).
    overdue: AtomicBool,
}

/// A running script that has neither written nor been told to stop.
const CLEAN: u8 = 0;
/// SCRIPT KILL told it to stop: it may not write, and ends at its next look.
const KILLED: u8 = 1;
/// It has written: SCRIPT KILL cannot stop it.
const WROTE: u8 = 2;

impl Running {
    /// A script starts: clean.
    pub fn start(&self, now_ms: u64) {
        self.state.store(CLEAN, Relaxed);
        self.since_ms.store(now_ms.max(1), Release);
    }

    /// The script ended.
    pub fn end(&self) {
        self.since_ms.store(0, Release);
    }

    /// Whether it ran past `lua-time-limit`.
    pub fn is_overdue(&self) -> bool {
        self.overdue.load(Relaxed)
    }

    /// Whether SCRIPT KILL stopped it.
    pub fn killed(&self) -> bool {
        self.state.load(Acquire) == KILLED
    }

    /// Whether the script has written.
    pub fn has_written(&self) -> bool {
        self.state.load(Acquire) == WROTE
    }

    /// The script is about to write: `false` once it was told to stop (it may not, then).
    pub fn writes(&self) -> bool {
        match self.state.compare_exchange(CLEAN, WROTE, AcqRel, Acquire) {
            Ok(_) => true,
            Err(state) => state == WROTE,
        }
    }

    /// SCRIPT KILL: told to stop unless it has written.
    fn stop(&self) -> Kill {
        match self.state.compare_exchange(CLEAN, KILLED, AcqRel, Acquire) {
            Ok(_) => Kill::Stopped,
            Err(KILLED) => Kill::Stopped,
            Err(_) => Kill::Unkillable,
        }
    }
}

/// What SCRIPT KILL found.
#[derive(Debug, PartialEq, Eq)]
pub enum Kill {
    /// The script running was told to stop.
    Stopped,
    /// No script runs (besides the asking worker's own, which is this one's caller).
    NotBusy,
    /// The script running has written.
    Unkillable,
}

impl Kill {
    /// SCRIPT KILL's answer, as redis-server words it.
    pub fn reply(&self) -> &'static [u8] {
        match self {
            Kill::Stopped => b"+OK\r\n",
            Kill::NotBusy => b"-NOTBUSY No scripts in execution right now.\r\n",
            Kill::Unkillable => b"-UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.\r\n",
        }
    }
}

impl Scripts {
    /// The cache of a server of `workers` workers, each Lua state held to `memory_max` bytes.
    pub fn new(workers: usize, memory_max: usize) -> Scripts {
        Scripts {
            cache: Mutex::default(),
            bytes: AtomicUsize::new(0),
            count: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            time_limit_ms: AtomicU64::new(TIME_LIMIT_MS),
            memory_max,
            running: (0..workers).map(|_| Running::default()).collect(),
            memory: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
            stopping: AtomicBool::new(false),
            overdue: AtomicUsize::new(0),
        }
    }

    /// The source of the script `sha`, if the cache holds it.
    pub fn source(&self, sha: &Sha) -> Option<Arc<[u8]>> {
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(sha).cloned()
    }

    /// Whether the cache holds `sha`.
    pub fn exists(&self, sha: &[u8]) -> bool {
        let Ok(sha) = <Sha>::try_from(sha) else { return false };
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).contains_key(&sha)
    }

    /// Keeps `source` as the script `sha` (it compiled).
    pub fn keep(&self, sha: Sha, source: &[u8]) {
        let mut cache = self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let std::collections::hash_map::Entry::Vacant(entry) = cache.entry(sha) {
            entry.insert(source.into());
            self.bytes.fetch_add(source.len() + 40, Relaxed);
            self.count.fetch_add(1, Relaxed);
        }
    }

    /// SCRIPT FLUSH: every script goes.
    pub fn flush(&self) {
        let mut cache = self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        cache.clear();
        self.bytes.store(0, Relaxed);
        self.count.store(0, Relaxed);
        self.generation.fetch_add(1, Release);
    }

    /// The cache's generation (moved by each flush).
    pub fn generation(&self) -> u64 {
        self.generation.load(Acquire)
    }

    /// The cache's scripts and their bytes.
    pub fn figures(&self) -> (usize, usize) {
        (self.count.load(Relaxed), self.bytes.load(Relaxed))
    }

    /// Every Lua state's memory, bytes.
    pub fn lua_memory(&self) -> usize {
        self.memory.iter().map(|bytes| bytes.load(Relaxed)).sum()
    }

    /// The server stops: running scripts end at their next look.
    pub fn stop(&self) {
        self.stopping.store(true, Release);
    }

    /// Whether the server is stopping.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Relaxed)
    }

    /// Worker `worker`'s script found itself past `lua-time-limit` (its hook's look): every
    /// worker answers its RESP clients [`BUSY`] from now until it ends.
    pub fn overdue(&self, worker: usize) {
        if !self.running[worker].overdue.swap(true, AcqRel) {
            self.overdue.fetch_add(1, AcqRel);
        }
    }

    /// Worker `worker`'s script ended.
    pub fn ended(&self, worker: usize) {
        let running = &self.running[worker];
        running.end();
        if running.overdue.swap(false, AcqRel) {
            self.overdue.fetch_sub(1, AcqRel);
        }
    }

    /// Whether a script runs past `lua-time-limit` (its worker's hook has seen it).
    #[inline]
    pub fn any_overdue(&self) -> bool {
        self.overdue.load(Relaxed) != 0
    }

    /// Whether worker `worker` runs a script past `lua-time-limit` at `now_ms` (its clients'
    /// requests from other workers are answered [`BUSY`] meanwhile).
    #[inline]
    pub fn busy(&self, worker: usize, now_ms: u64) -> bool {
        let since = self.running[worker].since_ms.load(Relaxed);
        since != 0 && now_ms.saturating_sub(since) >= self.time_limit_ms.load(Relaxed)
    }

    /// SCRIPT KILL, asked on worker `asking`: the longest-running script of another worker
    /// (or of its own, while that one lets its connections in) is told to stop, unless it has
    /// written.
    pub fn kill(&self, asking: usize) -> Kill {
        let busy = self
            .running
            .iter()
            .enumerate()
            .filter(|(worker, running)| {
                // Its own runs only while it lets its connections in (worker/busy.rs).
                (*worker != asking || running.is_overdue()) && running.since_ms.load(Acquire) != 0
            })
            .min_by_key(|(_, running)| running.since_ms.load(Relaxed));
        busy.map_or(Kill::NotBusy, |(_, running)| running.stop())
    }
}

/// The SHA1 of `bytes` in lower-case hex (`redis.sha1hex`, a script's name).
pub(crate) fn sha1_hex(bytes: &[u8]) -> Sha {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, bytes);
    let mut hex = [0u8; 40];
    for (at, byte) in digest.as_ref().iter().enumerate() {
        hex[at * 2] = b"0123456789abcdef"[usize::from(byte >> 4)];
        hex[at * 2 + 1] = b"0123456789abcdef"[usize::from(byte & 15)];
    }
    hex
}

/// A SHA1 as EVALSHA names it (any case), lower-cased; `None` unless it is 40 bytes.
pub(crate) fn sha_named(text: &[u8]) -> Option<Sha> {
    let mut sha = <Sha>::try_from(text).ok()?;
    sha.make_ascii_lowercase();
    Some(sha)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_is_redis_servers() {
        assert_eq!(&sha1_hex(b""), b"da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(&sha1_hex(b"return 1"), b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
        assert_eq!(sha_named(b"E0E1F9FABFC9D4800C877A703B823AC0578FF8DB"), Some(sha1_hex(b"return 1")));
        assert_eq!(sha_named(b"abc"), None);
    }

    #[test]
    fn the_cache_keeps_flushes_and_kills() {
        let scripts = Scripts::new(2, 1 << 20);
        let sha = sha1_hex(b"return 1");
        scripts.keep(sha, b"return 1");
        scripts.keep(sha, b"return 1");
        assert_eq!(scripts.figures(), (1, 48));
        assert!(scripts.exists(&sha));
        let before = scripts.generation();
        scripts.flush();
        assert!(!scripts.exists(&sha) && scripts.generation() > before);
        assert_eq!(scripts.kill(0), Kill::NotBusy);
        scripts.running[1].start(5);
        assert_eq!(scripts.kill(1), Kill::NotBusy, "a worker's own script is not its to kill");
        assert_eq!(scripts.kill(0), Kill::Stopped);
        assert!(scripts.running[1].killed());
        assert!(!scripts.running[1].writes(), "a script told to stop may not write");
        scripts.running[1].start(6);
        assert!(scripts.running[1].writes() && scripts.running[1].writes());
        assert_eq!(scripts.kill(0), Kill::Unkillable);
        assert!(!scripts.running[1].killed());
        scripts.running[1].end();
        assert_eq!(scripts.kill(0), Kill::NotBusy);
    }
}
