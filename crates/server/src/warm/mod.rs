//! Warming a new node from a live one (`--warm-from HOST:PORT`): a node that replaces another
//! (new hardware, a kernel update without -e, a resize) would start empty and send its share
//! of the traffic to the database until it fills. Instead, while it serves, a thread of its own
//! lists the live node's items (`lru_crawler metadump all`, which memcached and quicksilver
//! both answer), chooses the most recently used that fit in this node's memory, and copies them
//! hottest first: pipelined `mg <key> v f t` to the source (value, flags, the TTL left), then
//! `ms <key> ... ME` (add) to this node's own text listener, so a value a client stored here
//! meanwhile is never overwritten. It copies at most `-o warm_rate` MB of values a second, so
//! the source keeps serving its clients; between rounds it sleeps, costing nothing.
//!
//! `stats warm` and `/metrics` (`quicksilver_warm_*`) show how far it is; `/readyz` answers
//! 503 `warming` until it ends, so a rolling replacement waits for one node to be warm before
//! replacing the next. A source that cannot be reached, listed or read ends the warm as
//! `failed` (what was copied stays, and the node serves as a cold one would).
//!
//! The source is not trusted: a line is at most 4 KiB, the listing keeps at most
//! as many items as this node's memory could hold, a value over this node's
//! item limit is read past in small pieces and counted refused, and a key no meta command can
//! name (over 250 bytes once in base64) is counted refused and passed over. Anything else the
//! source sends that is not memcached's text ends the warm as `failed`.

pub mod meta;

use crate::shared::warming::Phase;
use crate::shared::Shared;
use meta::{Head, Listed, StoreReply};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Keys asked of the source per round trip (and stored here per round trip): few enough that
/// a round costs the source little more than a client's request (16 KB of 1 KB values, some
/// 25 µs; at 64 a probe's p99 on the source rose by 0.1 ms: docs/BENCHMARKS.md, "Replacing a
/// node").
const CHUNK_KEYS: usize = 16;
/// How long connecting, or a read or write to either node, may stall before the warm gives up.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The share of this node's item memory (-m) the chosen items may fill: what the clients
/// store meanwhile has the rest, and the log does not wrap over the hottest copied first.
const FILL_PERCENT: u64 = 90;
/// Items that expire within this many seconds are not copied.
const EXPIRY_MARGIN_SECS: u32 = 2;
/// How often a busy crawler (memcached's `BUSY`) is asked again, a second apart.
const BUSY_RETRIES: u32 = 30;
/// The longest line read from the source: a metadump line (a key of 250 bytes, each encoded
/// as three, and its fields) or an `mg` reply's head, with room to spare.
const LINE_BYTES_MAX: usize = 4096;
/// The least an item costs in memcached's or quicksilver's memory (a header and a short key),
/// which bounds how many items this node's memory could hold.
const ITEM_BYTES_MIN: u64 = 48;

/// The most items a listing keeps for a node of `memory_bytes`: no more could fit.
fn listed_max(memory_bytes: u64) -> usize {
    usize::try_from(memory_bytes / ITEM_BYTES_MIN).unwrap_or(usize::MAX).max(1024)
}

/// Starts warming from `--warm-from`'s node into this one's text listener at `target`
/// (`None`: there is no plaintext one, and the warm fails at once).
pub fn start(shared: Arc<Shared>, target: Option<SocketAddr>) {
    let source = shared.extended.admin.warm_from.clone().unwrap_or_default();
    shared.warming.set_source(&source);
    shared.warming.set_phase(Phase::Listing);
    let thread = shared.clone();
    let spawned = std::thread::Builder::new().name("warm".into()).spawn(move || {
        let shared = thread;
        let started = Instant::now();
        let result = match target {
            Some(target) => run(&shared, &source, target, started),
            None => {
                Err("no plaintext text listener to store into (-Z without notls:, or only binary)".into())
            }
        };
        let warming = &shared.warming;
        warming.millis.store(started.elapsed().as_millis() as u64, Relaxed);
        let copied = format!(
            "{} of {} chosen items copied ({} MB of values) in {:.1} s; {} already here, {} gone, {} refused",
            warming.copied.load(Relaxed),
            warming.chosen.load(Relaxed),
            warming.copied_bytes.load(Relaxed) >> 20,
            started.elapsed().as_secs_f64(),
            warming.present.load(Relaxed),
            warming.gone.load(Relaxed),
            warming.refused.load(Relaxed),
        );
        match result {
            Ok(()) => {
                warming.set_phase(Phase::Done);
                eprintln!("[warm] from {source}: {copied}");
            }
            Err(why) => {
                warming.fail(&why);
                eprintln!("[warm] from {source} failed: {why}; {copied}");
            }
        }
    });
    if let Err(error) = spawned {
        shared.warming.fail(&format!("no thread: {error}"));
    }
}

/// Lists, chooses and copies.
fn run(shared: &Shared, source: &str, target: SocketAddr, started: Instant) -> Result<(), String> {
    if shared.credentials.sasl().is_some() {
        return Err("-S: memcached's SASL allows no text commands; warming needs -Y's or none".into());
    }
    let login = shared.credentials.modes().ascii.and_then(crate::session::auth::Passwords::first);
    let mut from = Node::source(source, login)?;
    let mut items = from.list(listed_max(shared.config.memory_mib << 20))?;
    let askable = items.len();
    items.retain(|item| meta::askable(&item.key));
    shared.warming.refused.fetch_add((askable - items.len()) as u64, Relaxed);
    let warming = &shared.warming;
    warming.listed.store(items.len() as u64, Relaxed);
    meta::hottest_first(&mut items);
    let capacity = (shared.config.memory_mib << 20) / 100 * FILL_PERCENT;
    items.truncate(meta::fitting(&items, capacity));
    items.shrink_to_fit();
    warming.chosen.store(items.len() as u64, Relaxed);
    warming.set_phase(Phase::Copying);
    let mut to = Node::connect(target)?;
    if let Some((user, password)) = login {
        to.login(user, password)?;
    }
    copy(shared, (&mut from, &mut to), &items, started)
}

/// Copies `items` in rounds of [`CHUNK_KEYS`], at most `-o warm_rate` value bytes a second.
fn copy(
    shared: &Shared,
    (from, to): (&mut Node, &mut Node),
    items: &[Listed],
    started: Instant,
) -> Result<(), String> {
    let warming = &shared.warming;
    let rate = shared.extended.admin.warm_rate;
    let item_max = shared.memory.item_bytes_max();
    let copying = Instant::now();
    let (mut asks, mut stores) = (Vec::new(), Vec::new());
    let mut bytes = 0u64;
    for chunk in items.chunks(CHUNK_KEYS) {
        if shared.wakeups.stopping() {
            return Err("the server is stopping".into());
        }
        asks.clear();
        stores.clear();
        for item in chunk {
            meta::push_get(&mut asks, &item.key);
        }
        from.send(&asks)?;
        let now = crate::sys::now_secs();
        let mut sent = 0;
        for item in chunk {
            match meta::get_head(from.line()?)? {
                Head::Miss => drop(warming.gone.fetch_add(1, Relaxed)),
                // Expiring as it is read: its value is passed over.
                Head::Value { len, ttl: Some(0), .. } => {
                    from.pass_over(len)?;
                    warming.gone.fetch_add(1, Relaxed);
                }
                // More than this node takes: read past, never held.
                Head::Value { len, .. } if len > item_max => {
                    from.pass_over(len)?;
                    warming.refused.fetch_add(1, Relaxed);
                }
                Head::Value { len, flags, ttl } => {
                    meta::push_add_line(&mut stores, &item.key, len, flags, (ttl, now));
                    // The value goes from the source's reply straight into the request here.
                    from.value_into(len, &mut stores)?;
                    bytes += len as u64;
                    sent += 1;
                }
            }
        }
        to.send(&stores)?;
        for _ in 0..sent {
            let counter = match meta::store_reply(to.line()?)? {
                StoreReply::Stored => &warming.copied,
                StoreReply::Present => &warming.present,
                StoreReply::Refused => &warming.refused,
            };
            counter.fetch_add(1, Relaxed);
        }
        warming.copied_bytes.store(bytes, Relaxed);
        warming.millis.store(started.elapsed().as_millis() as u64, Relaxed);
        if rate > 0 {
            let due = Duration::from_secs_f64(bytes as f64 / rate as f64);
            if let Some(ahead) = due.checked_sub(copying.elapsed()) {
                std::thread::sleep(ahead);
            }
        }
    }
    Ok(())
}

/// A connection to a node, read a line or a value at a time.
struct Node {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    line: Vec<u8>,
}

impl Node {
    /// Connects to `addr`, with [`IO_TIMEOUT`] on everything.
    fn connect(addr: SocketAddr) -> Result<Node, String> {
        let stream =
            TcpStream::connect_timeout(&addr, IO_TIMEOUT).map_err(|e| format!("connect to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
        let writer = stream.try_clone().map_err(|e| e.to_string())?;
        Ok(Node { reader: BufReader::with_capacity(256 << 10, stream), writer, line: Vec::new() })
    }

    /// Connects to the source at `source` (HOST:PORT, resolved now), logging in with `login`
    /// where it asks for it (memcached's -Y: `CLIENT_ERROR unauthenticated`, or a close).
    fn source(source: &str, login: Option<(&[u8], &[u8])>) -> Result<Node, String> {
        let addr = source
            .to_socket_addrs()
            .map_err(|e| format!("{source}: {e}"))?
            .next()
            .ok_or_else(|| format!("{source}: no address"))?;
        let mut node = Node::connect(addr)?;
        node.send(b"version\r\n")?;
        if node.line().is_ok_and(|line| line.starts_with(b"VERSION ")) {
            return Ok(node);
        }
        let Some((user, password)) = login else {
            return Err("the source asks for authentication: give this node -Y with a user it knows".into());
        };
        let mut node = Node::connect(addr)?;
        node.login(user, password)?;
        Ok(node)
    }

    /// memcached's text login (-Y): a `set` whose data is `user password`.
    fn login(&mut self, user: &[u8], password: &[u8]) -> Result<(), String> {
        let mut request = format!("set auth 0 0 {}\r\n", user.len() + 1 + password.len()).into_bytes();
        for part in [user, b" ", password, b"\r\n"] {
            request.extend_from_slice(part);
        }
        self.send(&request)?;
        match self.line()? {
            b"STORED" => Ok(()),
            other => Err(format!("login refused: {}", String::from_utf8_lossy(other))),
        }
    }

    /// Lists the node's live items (`lru_crawler metadump all`), waiting out a busy crawler;
    /// the hottest `most` of them, where it lists more (at most twice that are held).
    fn list(&mut self, most: usize) -> Result<Vec<Listed>, String> {
        let now = crate::sys::now_secs();
        'ask: for _ in 0..BUSY_RETRIES {
            self.send(b"lru_crawler metadump all\r\n")?;
            let mut items = Vec::new();
            loop {
                let line = self.line()?;
                if line == b"END" {
                    return Ok(items);
                }
                if line.starts_with(b"BUSY") {
                    std::thread::sleep(Duration::from_secs(1));
                    continue 'ask;
                }
                let first = line.split(|&byte| byte == b' ').next().unwrap_or_default();
                if first.ends_with(b"ERROR") {
                    return Err(format!("metadump refused: {}", String::from_utf8_lossy(line)));
                }
                // memcached 1.6.45 and quicksilver acknowledge the dump first.
                if line == b"OK" {
                    continue;
                }
                if !line.starts_with(b"key=") {
                    return Err(format!("not a metadump line: {:?}", String::from_utf8_lossy(line)));
                }
                items.extend(meta::dump_line(line, now, EXPIRY_MARGIN_SECS));
                if items.len() >= 2 * most {
                    meta::hottest_first(&mut items);
                    items.truncate(most);
                }
            }
        }
        Err("the source's crawler stayed busy".into())
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.writer.write_all(bytes).map_err(|e| format!("write: {e}"))
    }

    /// The next line, without its line end (at most [`LINE_BYTES_MAX`]).
    fn line(&mut self) -> Result<&[u8], String> {
        self.line.clear();
        let mut limited = (&mut self.reader).take(LINE_BYTES_MAX as u64 + 1);
        match limited.read_until(b'\n', &mut self.line) {
            Ok(0) => Err("the connection closed".into()),
            Ok(_) if !self.line.ends_with(b"\n") && self.line.len() > LINE_BYTES_MAX => {
                Err(format!("a line longer than {LINE_BYTES_MAX} bytes"))
            }
            Ok(_) if !self.line.ends_with(b"\n") => Err("the connection closed inside a line".into()),
            Ok(_) => Ok(self
                .line
                .strip_suffix(b"\n")
                .map_or(&self.line[..], |line| line.strip_suffix(b"\r").unwrap_or(line))),
            Err(e) => Err(format!("read: {e}")),
        }
    }

    /// Reads past a value of `len` bytes and its `\r\n`, a piece at a time.
    fn pass_over(&mut self, len: usize) -> Result<(), String> {
        let want = len as u64 + 2;
        let skipped = std::io::copy(&mut (&mut self.reader).take(want), &mut std::io::sink())
            .map_err(|e| format!("read: {e}"))?;
        if skipped < want {
            return Err("the connection closed inside a value".into());
        }
        Ok(())
    }

    /// Reads a value of `len` bytes and its `\r\n`, appending both to `out`.
    fn value_into(&mut self, len: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let start = out.len();
        out.resize(start + len + 2, 0);
        self.reader.read_exact(&mut out[start..]).map_err(|e| format!("read: {e}"))?;
        if &out[start + len..] != b"\r\n" {
            return Err("a value without its line end".into());
        }
        Ok(())
    }
}
