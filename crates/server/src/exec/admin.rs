//! Admin commands that need the partitions a worker owns: `lru_crawler`, `lru_crawler
//! metadump` chunks, `cache_memlimit`, `stats cachedump`; and the dispatch of every command
//! that touches no key to [`crate::admin`].

use super::*;
use crate::codec::{BAD_CLASS, CRAWLER_DISABLED};
use qs_proto::binary::{self as bin, status, Binary, BinaryCommand as Bin, Reply};

impl Engine {
    /// Runs a command that touches no key (`stats`, `version`, `shutdown`, the crawler and
    /// slab commands...) for the connection `fd`, appending its reply to `out`.
    pub(super) fn admin(&mut self, request: &Request<'_>, fd: i32, out: &mut Vec<u8>) -> Exec {
        match *request {
            Request::Stats { group: b"detail", argument } => {
                self.shared.observers.detail.command(argument, out)
            }
            Request::Stats { group: b"hotkeys", argument } => {
                // This worker's own summary as of now; the others' as of their last publish.
                self.publish_hot(true);
                self.shared.observers.hotkeys.command(argument, out);
            }
            Request::Stats { group: b"mrc", argument } => {
                // This worker's count as of now; the others' as of their last loop turn.
                self.turn_mrc();
                self.shared.observers.mrc.command(argument, self.shared.memory.maxbytes(), out);
                self.turn_mrc();
            }
            Request::Stats { group: b"conns", .. } => {
                self.shared.observers.registry.write_stats(fd, self.now.secs(), out);
                out.extend_from_slice(reply::END);
            }
            Request::SlabsReassign { classes } => {
                let largest = crate::admin::stats::memcached_largest_class(&self.shared);
                out.extend_from_slice(slabs_reassign(classes, largest));
            }
            Request::CacheMemlimit { megabytes, noreply } => {
                let reply = self.cache_memlimit(megabytes, true);
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
                    self.set_now(crate::sys::clock::now());
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
            // ElastiCache's discovery clients read the version as a plain release number.
            Request::Version if self.shared.cluster.enabled() => out.extend_from_slice(b"VERSION 1.6.45\r\n"),
            Request::Version => out.extend_from_slice(VERSION_REPLY),
            Request::Verbosity { noreply } => {
                if !noreply {
                    out.extend_from_slice(reply::OK);
                }
            }
            Request::Quit => return Exec::Close,
            // The worker turns a stream connection into a watcher; a datagram cannot be one.
            Request::Watch { .. } => out.extend_from_slice(b"ERROR\r\n"),
            Request::Crawl { classes } => out.extend_from_slice(self.crawl(classes)),
            Request::CrawlerSwitch { enable } => {
                let was = self.shared.switch_crawler(enable);
                out.extend_from_slice(match (enable, was) {
                    // As memcached: starting a running crawler fails; stopping always succeeds.
                    (true, true) => b"ERROR failed to start lru crawler thread\r\n",
                    _ => reply::OK,
                });
            }
            Request::CrawlerPacing => out.extend_from_slice(reply::OK),
            Request::Cluster { reload } => self.shared.cluster.answer(reload, out),
            Request::RefreshCerts { noreply } => {
                let refreshed = match self.shared.credentials.tls() {
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
                    out.extend_from_slice(b"SERVER_ERROR: shutdown not enabled\r\n");
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
            Request::Resp(ref frame) => return self.resp_keyless(frame, fd, out),
            Request::RespProtocolError(error) => {
                error.write(out);
                return Exec::Close;
            }
            _ => unreachable!("key commands run in Engine::execute"),
        }
        Exec::Done
    }
}

impl Engine {
    /// `lru_crawler crawl <classes>`: memcached's background reclaim of expired items. Here an
    /// expired item is dropped when a request finds it, and its memory returns when the log's
    /// head passes it (the index scan clears its slot), so there is nothing to start: the
    /// reply is memcached's.
    pub(super) fn crawl(&self, classes: &[u8]) -> &'static [u8] {
        if !self.shared.crawler_enabled() {
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
    pub fn dump_chunk(
        &self,
        partition: usize,
        buckets: std::ops::Range<usize>,
        keys: bool,
        out: &mut Vec<u8>,
    ) {
        let Some(owned) = &self.partitions[partition] else { return };
        owned.dump(buckets, self.now, |item| {
            if keys {
                return reply::mgdump_line(out, item.key);
            }
            let line = reply::DumpItem {
                key: item.key,
                expires: (item.expiry != Expiry::NEVER).then_some(item.expiry.secs()),
                last_access: item.last_access_secs,
                cas: self.cas_out(item.cas),
                fetched: item.fetched,
                size: debug_size(item.key.len(), item.value_len) as u64,
                flags: item.flags,
            };
            reply::metadump_line(out, &line);
        });
    }

    /// memcached's `cache_memlimit`: every worker runs it (a broadcast) on the partitions it
    /// owns; the reply of the worker the client sent it to (`asked_here`) is the one sent, and
    /// that worker records the new limit.
    pub(super) fn cache_memlimit(&mut self, megabytes: u32, asked_here: bool) -> &'static [u8] {
        if megabytes < 8 {
            return b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n";
        }
        if megabytes > 1_000_000_000 {
            return b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n";
        }
        // A memory file's logs keep the size the file was laid out for (-e), store mode's too.
        let Ok(per_partition) = self.shared.memory.per_partition(megabytes) else {
            return b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n";
        };
        for partition in self.partitions.iter_mut().flatten() {
            partition.set_log_limit(per_partition);
        }
        if asked_here {
            self.shared.memory.set(per_partition);
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
    pub(super) fn cache_dump(&self, args: Option<(Option<u32>, Option<u32>)>, out: &mut Vec<u8>) {
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
            let buckets = 0..self.shared.memory.main_buckets();
            let mut line = |item: &qs_store::Dumped<'_>| {
                if (limit != 0 && shown >= limit) || out.len() - start > REPLY_BYTES_MAX - 600 {
                    return;
                }
                let expires = if item.expiry == Expiry::NEVER { 0 } else { item.expiry.secs() };
                out.extend_from_slice(b"ITEM ");
                out.extend_from_slice(item.key);
                let _ = write!(out, " [{} b; {} s]\r\n", item.value_len, expires);
                shown += 1;
            };
            for (index, partition) in self.partitions.iter().enumerate() {
                match (partition, self.shared.map.reader(index)) {
                    (Some(owned), _) => owned.dump(buckets.clone(), self.now, &mut line),
                    (None, Some(reader)) => reader.dump(buckets.clone(), self.now, &mut line),
                    (None, None) => {}
                }
            }
        }
        out.extend_from_slice(reply::END);
    }

    /// Partition `index`, where this worker owns it (the flash waits ask for theirs here).
    pub fn owned_partition(&mut self, index: usize) -> Option<&mut Partition> {
        self.partitions.get_mut(index).and_then(Option::as_mut)
    }

    /// How many partitions the server has.
    pub fn partition_count(&self) -> usize {
        self.partitions.len()
    }

    /// Main index buckets per partition.
    pub fn main_buckets(&self) -> usize {
        self.shared.memory.main_buckets()
    }

    /// Whether `lru_crawler` serves dumps and crawls (`lru_crawler disable` stops it).
    pub fn crawler_enabled(&self) -> bool {
        self.shared.crawler_enabled()
    }

    /// -X: `stats cachedump` and `lru_crawler metadump` are refused.
    pub fn dumping_disabled(&self) -> bool {
        self.shared.config.disable_dumping
    }

    /// A binary request that names no key (quit, flush, noop, version, stat, SASL outside
    /// a SASL server, a refusal), answered as memcached 1.6.18 answers it.
    pub(super) fn binary_admin(&mut self, request: &Binary<'_>, out: &mut Vec<u8>) -> Exec {
        let Binary { opcode, opaque, command, .. } = *request;
        let reply =
            Reply { opcode, opaque, status: status::NO_ERROR, cas: 0, extras: &[], key: &[], value_len: 0 };
        let error = |out: &mut Vec<u8>, status| bin::write_error(out, opcode, opaque, status);
        match command {
            Bin::Quit { quiet } => {
                if !quiet {
                    reply.write_head(out);
                }
                return Exec::Close;
            }
            // -F: memcached answers a refused flush with AUTH_ERROR.
            Bin::Flush { .. } if self.shared.config.disable_flush_all => error(out, status::AUTH_ERROR),
            Bin::Flush { exptime, quiet } => {
                self.flush_local(i32::try_from(exptime).unwrap_or(i32::MAX), true);
                if !quiet {
                    reply.write_head(out);
                }
            }
            Bin::Noop => reply.write_head(out),
            Bin::Version => {
                let version = super::VERSION.as_bytes();
                Reply { value_len: version.len(), ..reply }.write_head(out);
                out.extend_from_slice(version);
            }
            Bin::Stat { group } => self.binary_stat(reply, group, out),
            // With SASL on, the worker answers these; without it memcached does not know them.
            Bin::SaslListMechs | Bin::SaslAuth { .. } => error(out, status::UNKNOWN_COMMAND),
            Bin::Refuse { status, close } => {
                error(out, status);
                if close {
                    return Exec::Close;
                }
            }
            // A command on a key is the executor's (run.rs).
            Bin::Get { .. }
            | Bin::Touch { .. }
            | Bin::Store { .. }
            | Bin::TooLarge { .. }
            | Bin::Delete { .. }
            | Bin::Arith { .. } => debug_assert!(false, "a keyed binary command in binary_admin"),
        }
        Exec::Done
    }

    /// STAT: one packet per statistic, then an empty one; memcached's groups (and ours).
    fn binary_stat(&mut self, reply: Reply<'_>, group: &[u8], out: &mut Vec<u8>) {
        let mut text = Vec::new();
        if group.starts_with(b"detail") {
            match &group[6..] {
                rest if rest.starts_with(b" dump") => {
                    self.shared.observers.detail.command(b"dump", &mut text);
                    Reply { key: b"detailed", value_len: text.len(), ..reply }.write_head(out);
                    out.extend_from_slice(&text);
                }
                rest if rest.starts_with(b" on") => self.shared.observers.detail.command(b"on", &mut text),
                rest if rest.starts_with(b" off") => self.shared.observers.detail.command(b"off", &mut text),
                _ => return bin::write_error(out, reply.opcode, reply.opaque, status::KEY_ENOENT),
            }
            return reply.write_head(out);
        }
        let group = if group.starts_with(b"reset") {
            &b"reset"[..]
        } else if group.starts_with(b"settings") {
            &b"settings"[..]
        } else {
            group
        };
        match group {
            b"" | b"reset" | b"settings" | b"items" | b"slabs" | b"sizes" | b"partitions" | b"arena"
            | b"latency" | b"warm" => {}
            _ => return bin::write_error(out, reply.opcode, reply.opaque, status::KEY_ENOENT),
        }
        self.publish();
        crate::admin::stats::write(&self.shared, group, &mut text);
        for line in text.split(|&byte| byte == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(stat) = line.strip_prefix(b"STAT ") else { continue };
            let space = stat.iter().position(|&byte| byte == b' ').unwrap_or(stat.len());
            let (name, value) = (&stat[..space], stat.get(space + 1..).unwrap_or_default());
            Reply { key: name, value_len: value.len(), ..reply }.write_head(out);
            out.extend_from_slice(value);
        }
        reply.write_head(out);
    }
}
