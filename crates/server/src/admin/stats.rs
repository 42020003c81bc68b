//! `stats`, `stats settings` and `stats partitions`, with memcached's field names (exporters
//! and dashboards parse them). Figures come from what owners publish once per loop turn.

use crate::shared::{Shared, StatsBaseline, WorkerFigures};
use qs_store::flash::FlashStats;
use qs_store::PartitionStats;
use std::fmt::Display;
use std::io::Write;
use std::sync::atomic::Ordering::Relaxed;

fn stat(out: &mut Vec<u8>, name: &str, value: impl Display) {
    let _ = write!(out, "STAT {name} {value}\r\n");
}

/// Each partition's published counters, less what they were at the last `stats reset`.
fn partition_figures(shared: &Shared, baseline: &StatsBaseline) -> Vec<PartitionStats> {
    let base = PartitionStats::default();
    shared
        .published
        .partitions()
        .into_iter()
        .enumerate()
        .map(|(index, published)| published.since(baseline.partitions.get(index).unwrap_or(&base)))
        .collect()
}

/// Items held now (`curr_items`), as each worker last published them.
pub fn current_items(shared: &Shared) -> u64 {
    totals(shared).0.items
}

/// The partitions' figures summed, the workers' summed, and each partition's, less what they
/// were at the last `stats reset`.
pub fn totals(shared: &Shared) -> (PartitionStats, WorkerFigures, Vec<PartitionStats>) {
    let baseline = shared.published.baseline();
    let per_partition = partition_figures(shared, &baseline);
    let mut partitions = PartitionStats::default();
    for published in &per_partition {
        partitions.add(published);
    }
    let mut workers = WorkerFigures {
        remote_reads: vec![(0, 0); shared.published.partition_count()],
        ..Default::default()
    };
    let base = WorkerFigures::default();
    for (index, published) in shared.published.workers().into_iter().enumerate() {
        let base = baseline.workers.get(index).unwrap_or(&base);
        workers.counters.add(&published.counters.since(&base.counters));
        workers.buffers.add(&published.buffers);
        for (at, (total, (gets, hits))) in
            workers.remote_reads.iter_mut().zip(&published.remote_reads).enumerate()
        {
            let (base_gets, base_hits) = base.remote_reads.get(at).copied().unwrap_or((0, 0));
            total.0 += gets.saturating_sub(base_gets);
            total.1 += hits.saturating_sub(base_hits);
        }
    }
    (partitions, workers, per_partition)
}

/// CONFIG RESETSTAT: `stats reset`; redis-server's answer.
pub(crate) fn reset_for_redis(shared: &Shared) -> &'static [u8] {
    reset(shared);
    b"+OK\r\n"
}

/// `stats reset`: from now on the counters count from zero (the figures that describe the
/// present, items and bytes, stay).
fn reset(shared: &Shared) {
    let baseline = StatsBaseline {
        partitions: shared.published.partitions(),
        workers: shared.published.workers(),
        total_connections: shared.connections.totals().0,
        rejected_connections: shared.connections.totals().1,
    };
    shared.published.set_baseline(baseline);
    shared.observers.detail.reset();
}

/// Writes the reply to `stats <group>`.
pub fn write(shared: &Shared, group: &[u8], out: &mut Vec<u8>) {
    match group {
        b"" => general(shared, out),
        b"settings" => settings(shared, out),
        b"partitions" => partitions(shared, out),
        b"arena" => arena(shared, out),
        b"quicksilver" => quicksilver(shared, out),
        b"slabs" => slabs(shared, out),
        b"items" => items(shared, out),
        b"sizes" => stat(out, "sizes_status", "disabled"),
        b"latency" => shared.observers.latency.write_stats(out),
        b"warm" => shared.warming.write_stats(out),
        b"conns" | b"extstore" => {}
        b"reset" => {
            reset(shared);
            out.extend_from_slice(b"RESET\r\n");
            return;
        }
        _ => {
            out.extend_from_slice(b"ERROR\r\n");
            return;
        }
    }
    out.extend_from_slice(b"END\r\n");
}

/// memcached 1.6.18's general list, in its order (t/stats.t counts it), with quicksilver's
/// figures; docs/COMPATIBILITY.md says what each means here. Quicksilver's own: `stats quicksilver`.
fn general(shared: &Shared, out: &mut Vec<u8>) {
    let (p, w, _) = totals(shared);
    let flash = flash_totals(shared);
    general_process(shared, &w, out);
    general_commands(shared, &p, &w, flash.as_ref(), out);
    general_server(shared, &p, &w, flash.as_ref(), out);
    general_items(shared, &p, out);
    general_beyond(shared, &p, &w, out);
}

/// The process, its connections and their buffers.
fn general_process(shared: &Shared, w: &WorkerFigures, out: &mut Vec<u8>) {
    let c = &w.counters;
    let baseline = shared.published.baseline();
    let now = crate::sys::now_secs();
    let (user, system) = crate::sys::cpu_times_secs();
    let curr_connections = shared.connections.open();
    let extended = &shared.extended;
    stat(out, "pid", std::process::id());
    stat(out, "uptime", shared.uptime_secs());
    stat(out, "time", now);
    stat(out, "version", super::VERSION);
    stat(out, "libevent", "none");
    stat(out, "pointer_size", usize::BITS);
    stat(out, "rusage_user", format_args!("{user:.6}"));
    stat(out, "rusage_system", format_args!("{system:.6}"));
    stat(out, "max_connections", shared.config.max_connections);
    stat(out, "curr_connections", curr_connections);
    let (total_connections, rejected) = shared.connections.totals();
    stat(out, "total_connections", total_connections.saturating_sub(baseline.total_connections));
    if extended.maxconns_fast {
        stat(out, "rejected_connections", rejected.saturating_sub(baseline.rejected_connections));
    }
    stat(out, "connection_structures", shared.observers.registry.count());
    // Connection buffers (docs/COMPATIBILITY.md): read buffers and reply buffers, as
    // memcached's read buffers and response objects.
    let buffers = &w.buffers;
    stat(out, "response_obj_oom", c.response_obj_oom);
    stat(out, "response_obj_count", buffers.replies);
    stat(out, "response_obj_bytes", buffers.reply_bytes);
    stat(out, "read_buf_count", buffers.count);
    stat(out, "read_buf_bytes", buffers.bytes);
    stat(out, "read_buf_bytes_free", buffers.bytes_free);
    stat(out, "read_buf_oom", c.read_buf_oom);
    stat(out, "reserved_fds", reserved_fds(shared).saturating_sub(curr_connections));
}

/// Open descriptors that are not clients' sockets, plus clients (memcached's `reserved_fds`
/// less `curr_connections`): the descriptors that are not sockets (the epoll and event
/// descriptors, memory and flash files, standard streams), counted once from /proc/self/fd,
/// and the sockets the registry lists. Listing /proc/self/fd on every `stats` costs a few
/// milliseconds with 10,000 connections open; a scrape every second would pay it.
fn reserved_fds(shared: &Shared) -> u64 {
    static NOT_SOCKETS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let sockets = shared.observers.registry.count() as u64;
    let not_sockets = *NOT_SOCKETS.get_or_init(|| {
        let open = std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count() as u64);
        open.saturating_sub(sockets)
    });
    not_sockets + sockets
}

/// Commands and their outcomes.
fn general_commands(
    shared: &Shared,
    p: &PartitionStats,
    w: &WorkerFigures,
    flash: Option<&FlashTotals>,
    out: &mut Vec<u8>,
) {
    let c = &w.counters;
    let remote_hits: u64 = w.remote_reads.iter().map(|r| r.1).sum();
    let remote_gets: u64 = w.remote_reads.iter().map(|r| r.0).sum();
    stat(out, "cmd_get", c.cmd_get);
    stat(out, "cmd_set", c.cmd_set);
    stat(out, "cmd_flush", c.cmd_flush);
    stat(out, "cmd_touch", c.cmd_touch);
    stat(out, "cmd_meta", c.meta_cmds);
    stat(out, "get_hits", p.get_hits + remote_hits);
    stat(out, "get_misses", p.get_misses + (remote_gets - remote_hits));
    stat(out, "get_expired", p.get_expired + c.remote_get_expired);
    stat(out, "get_flushed", p.get_flushed + c.remote_get_flushed);
    if let Some(FlashTotals { log, tier, .. }) = flash {
        // A read of a flash record (the page in memory included) for any command.
        stat(out, "get_extstore", log.reads + log.buffer_reads);
        stat(out, "get_aborted_extstore", 0);
        stat(out, "get_oom_extstore", 0);
        stat(out, "recache_from_extstore", tier.promoted);
        stat(out, "miss_from_extstore", tier.misses);
        stat(out, "badcrc_from_extstore", 0);
    }
    stat(out, "delete_misses", p.delete_misses);
    stat(out, "delete_hits", p.delete_hits);
    stat(out, "incr_misses", p.incr_misses);
    stat(out, "incr_hits", p.incr_hits);
    stat(out, "decr_misses", p.decr_misses);
    stat(out, "decr_hits", p.decr_hits);
    stat(out, "cas_misses", p.cas_misses);
    stat(out, "cas_hits", p.cas_hits);
    stat(out, "cas_badval", p.cas_badval);
    stat(out, "touch_hits", p.touch_hits);
    stat(out, "touch_misses", p.touch_misses);
    stat(out, "store_too_large", p.too_large + c.store_too_large);
    stat(out, "store_no_memory", p.refused + c.store_no_memory);
    stat(out, "auth_cmds", c.auth_cmds);
    stat(out, "auth_errors", c.auth_errors);
    if shared.extended.idle_timeout_secs != 0 {
        stat(out, "idle_kicks", c.idle_kicks);
    }
}

/// Traffic, limits, threads, the index, the background work memcached reports, logging,
/// the flash tier and TLS.
fn general_server(
    shared: &Shared,
    p: &PartitionStats,
    w: &WorkerFigures,
    flash: Option<&FlashTotals>,
    out: &mut Vec<u8>,
) {
    let c = &w.counters;
    let extended = &shared.extended;
    stat(out, "bytes_read", c.bytes_read);
    stat(out, "bytes_written", c.bytes_written);
    stat(out, "limit_maxbytes", shared.memory.maxbytes());
    stat(out, "accepting_conns", u8::from(shared.connections.accepting()));
    let (pauses, paused_us) = shared.connections.pauses();
    stat(out, "listen_disabled_num", pauses);
    stat(out, "time_in_listen_disabled_us", paused_us);
    stat(out, "threads", shared.map.workers());
    stat(out, "conn_yields", c.conn_yields);
    // The index grows by linear hashing, a bucket at a time: the level is the whole doublings.
    stat(out, "hash_power_level", p.index_buckets.max(1).ilog2());
    stat(out, "hash_bytes", (p.index_buckets + p.spare_buckets) * qs_store::index::BUCKET_BYTES as u64);
    stat(out, "hash_is_expanding", 0);
    if extended.slab_reassign {
        for name in [
            "slab_reassign_rescues",
            "slab_reassign_chunk_rescues",
            "slab_reassign_inline_reclaim",
            "slab_reassign_busy_items",
            "slab_reassign_busy_deletes",
            "slab_reassign_busy_nomem",
        ] {
            stat(out, name, 0);
        }
        // memcached 1.6.45's names: busy_nomem and the last busy status replace
        // evictions_nomem.
        stat(out, "slab_reassign_last_busy_status", "none");
        stat(out, "slab_reassign_running", 0);
        stat(out, "slabs_moved", 0);
    }
    if shared.crawler_enabled() {
        stat(out, "lru_crawler_running", 0);
        stat(out, "lru_crawler_starts", 0);
    }
    if extended.lru_maintainer {
        stat(out, "lru_maintainer_juggles", 0);
    }
    stat(out, "malloc_fails", 0);
    let watchers = &shared.observers.watchers;
    stat(out, "log_worker_dropped", 0);
    stat(out, "log_worker_written", watchers.written.load(Relaxed));
    stat(out, "log_watcher_skipped", watchers.skipped.load(Relaxed));
    stat(out, "log_watcher_sent", watchers.sent.load(Relaxed));
    stat(out, "log_watchers", watchers.count());
    if let Some(totals) = flash {
        extstore_stats(out, totals);
    }
    if let Some(tls) = shared.credentials.tls() {
        if tls.settings().session_cache {
            stat(out, "ssl_new_sessions", tls.new_sessions());
        }
        stat(out, "ssl_handshake_errors", tls.handshake_errors.load(Relaxed));
        stat(out, "ssl_proto_errors", tls.proto_errors.load(Relaxed));
        stat(out, "time_since_server_cert_refresh", tls.secs_since_refresh(crate::sys::now_secs()));
    }
}

/// What the cache holds, and what left it.
fn general_items(shared: &Shared, p: &PartitionStats, out: &mut Vec<u8>) {
    let extended = &shared.extended;
    stat(out, "unexpected_napi_ids", 0);
    stat(out, "round_robin_fallback", 0);
    stat(out, "bytes", p.bytes);
    stat(out, "curr_items", p.items);
    stat(out, "total_items", p.total_items);
    stat(out, "slab_global_page_pool", 0);
    stat(out, "expired_unfetched", p.expired_unfetched);
    stat(out, "evicted_unfetched", p.evicted_unfetched);
    if extended.lru_maintainer {
        stat(out, "evicted_active", 0);
    }
    stat(out, "evictions", p.log_evictions + p.index_evictions);
    stat(out, "reclaimed", p.reclaimed);
    stat(out, "crawler_reclaimed", 0);
    stat(out, "crawler_items_checked", 0);
    stat(out, "lrutail_reflocked", 0);
    if extended.lru_maintainer {
        stat(out, "moves_to_cold", 0);
        stat(out, "moves_to_warm", p.promotions);
        stat(out, "moves_within_lru", p.reappends);
        stat(out, "direct_reclaims", 0);
        stat(out, "lru_bumps_dropped", 0);
    }
}

/// Beyond memcached's list: the native protocol's ports and store mode's arenas, when on.
fn general_beyond(shared: &Shared, p: &PartitionStats, w: &WorkerFigures, out: &mut Vec<u8>) {
    let c = &w.counters;
    if shared.config.native_port != 0 {
        stat(out, "native_datagrams_in", c.native_datagrams_in);
        stat(out, "native_datagrams_out", c.native_datagrams_out);
        stat(out, "native_requests", c.native_requests);
        stat(out, "native_redirects", c.native_redirects);
        stat(out, "native_bad", c.native_bad);
        stat(out, "native_duplicates", c.native_duplicates);
        stat(out, "native_replies_dropped", c.native_replies_dropped);
    }
    if shared.config.store_mode() {
        // Store mode's memory: the arenas of all partitions.
        let used = p.arena_bytes - p.arena_free_bytes;
        let fragmentation = if p.arena_free_bytes == 0 {
            0.0
        } else {
            1.0 - p.arena_largest_free as f64 / p.arena_free_bytes as f64
        };
        stat(out, "store_arena_bytes", p.arena_bytes);
        stat(out, "store_arena_used_bytes", used);
        stat(out, "store_arena_free_bytes", p.arena_free_bytes);
        stat(out, "store_largest_free_block", p.arena_largest_free);
        stat(out, "store_fragmentation", format!("{fragmentation:.4}"));
        stat(out, "store_spare_buckets_used", p.spare_buckets_used);
        stat(out, "store_spare_buckets", p.spare_buckets);
        stat(out, "store_refused_writes", p.refused);
    }
}

/// The flash tier's figures summed over the partitions (`None` without one).
struct FlashTotals {
    log: FlashStats,
    tier: qs_store::FlashCounters,
    /// Bytes of the pages in use (written and still in the logs, and those being filled).
    used_page_bytes: u64,
    /// Bytes of all the logs.
    capacity_bytes: u64,
    /// Pages written and still in their logs.
    pages_used: u64,
}

fn flash_totals(shared: &Shared) -> Option<FlashTotals> {
    if !shared.published.flash_on() {
        return None;
    }
    let mut log = FlashStats::default();
    let mut tier = qs_store::FlashCounters::default();
    let (mut used_page_bytes, mut capacity_bytes, mut pages_used) = (0, 0, 0);
    for (one, counters) in shared.published.flash_all() {
        log.records += one.records;
        log.record_bytes += one.record_bytes;
        log.pages_written += one.pages_written;
        log.bytes_written += one.bytes_written;
        log.pages_reused += one.pages_reused;
        log.reads += one.reads;
        log.bytes_read += one.bytes_read;
        log.buffer_reads += one.buffer_reads;
        log.write_errors += one.write_errors;
        log.failed |= one.failed;
        log.records_evicted += one.records_evicted;
        log.bytes_evicted += one.bytes_evicted;
        log.pages += one.pages;
        used_page_bytes += (one.pages_written + 1).min(one.pages) * one.page_bytes;
        capacity_bytes += one.pages * one.page_bytes;
        pages_used += one.pages_written.min(one.pages);
        tier.demoted += counters.demoted;
        tier.dropped += counters.dropped;
        tier.promoted += counters.promoted;
        tier.misses += counters.misses;
        tier.superseded += counters.superseded;
        tier.served += counters.served;
    }
    Some(FlashTotals { log, tier, used_page_bytes, capacity_bytes, pages_used })
}

/// memcached's extstore lines of `stats`. The logs are circular: a page's place is reused as
/// a whole (a page eviction), nothing is compacted.
fn extstore_stats(out: &mut Vec<u8>, totals: &FlashTotals) {
    let FlashTotals { log, tier, used_page_bytes, capacity_bytes, pages_used } = totals;
    let used_bytes = log.record_bytes - log.bytes_evicted;
    stat(out, "extstore_compact_lost", 0);
    stat(out, "extstore_compact_rescues", 0);
    stat(out, "extstore_compact_skipped", 0);
    stat(out, "extstore_page_allocs", log.pages_written);
    stat(out, "extstore_page_evictions", log.pages_reused);
    stat(out, "extstore_page_reclaims", 0);
    stat(out, "extstore_pages_free", log.pages - pages_used);
    stat(out, "extstore_pages_used", pages_used);
    stat(out, "extstore_objects_evicted", log.records_evicted);
    stat(out, "extstore_objects_read", log.reads + log.buffer_reads);
    stat(out, "extstore_objects_written", log.records);
    stat(out, "extstore_objects_used", log.records - log.records_evicted);
    stat(out, "extstore_bytes_evicted", log.bytes_evicted);
    stat(out, "extstore_bytes_written", log.bytes_written);
    stat(out, "extstore_bytes_read", log.bytes_read);
    stat(out, "extstore_bytes_used", used_bytes);
    stat(out, "extstore_bytes_fragmented", used_page_bytes.saturating_sub(used_bytes));
    stat(out, "extstore_limit_maxbytes", capacity_bytes);
    stat(out, "extstore_io_queue", 0);
    // Quicksilver's own.
    stat(out, "extstore_demoted", tier.demoted);
    stat(out, "extstore_demote_dropped", tier.dropped);
    stat(out, "extstore_superseded", tier.superseded);
    stat(out, "extstore_served_in_place", tier.served);
    stat(out, "extstore_write_errors", log.write_errors);
    stat(out, "extstore_failed", u8::from(log.failed));
}

fn settings(shared: &Shared, out: &mut Vec<u8>) {
    let config = &shared.config;
    let extended = &shared.extended;
    let yes = |on: bool| if on { "yes" } else { "no" };
    // memcached 1.6.18's settings, in its order, with quicksilver's values; then ours.
    stat(out, "maxbytes", shared.memory.maxbytes());
    stat(out, "maxconns", config.max_connections);
    stat(out, "tcpport", if config.unix_socket.is_some() { 0 } else { config.tcp_port() });
    stat(out, "udpport", config.udp_port());
    stat(out, "inter", config.listen.join(","));
    stat(out, "verbosity", config.verbose);
    stat(out, "oldest", 0);
    stat(out, "evictions", if config.store_mode() { "off" } else { "on" });
    match &config.unix_socket {
        Some(path) => stat(out, "domain_socket", path.display()),
        None => stat(out, "domain_socket", "NULL"),
    }
    stat(out, "umask", format_args!("{:o}", config.unix_mask));
    stat(out, "shutdown_command", yes(config.enable_shutdown));
    stat(out, "growth_factor", format_args!("{:.2}", config.slab_growth_factor.unwrap_or(1.25)));
    stat(out, "chunk_size", config.slab_min_size.unwrap_or(48));
    stat(out, "num_threads", shared.map.workers());
    stat(out, "num_threads_per_udp", shared.map.workers());
    stat(out, "stat_key_prefix", shared.observers.detail.delimiter() as char);
    stat(out, "detail_enabled", yes(shared.observers.detail.enabled()));
    stat(out, "reqs_per_event", config.reqs_per_event);
    stat(out, "cas_enabled", yes(!config.disable_cas));
    stat(out, "tcp_backlog", config.backlog);
    stat(out, "binding_protocol", config.binding_protocol().binding_name());
    stat(out, "auth_enabled_sasl", yes(config.sasl));
    match &config.auth_file {
        Some(path) => stat(out, "auth_enabled_ascii", path.display()),
        None => stat(out, "auth_enabled_ascii", "no"),
    }
    stat(out, "item_size_max", config.item_bytes_max);
    stat(out, "maxconns_fast", yes(extended.maxconns_fast));
    stat(out, "slab_chunk_max", extended.slab_chunk_max_bytes);
    stat(out, "lru_crawler", yes(extended.lru_crawler));
    stat(out, "flush_enabled", yes(!config.disable_flush_all));
    stat(out, "dump_enabled", yes(!config.disable_dumping));
    stat(out, "hash_algorithm", "xxh3");
    stat(out, "idle_timeout", extended.idle_timeout_secs);
    stat(out, "watcher_logbuf_size", extended.watcher_logbuf_bytes);
    stat(out, "worker_logbuf_size", extended.worker_logbuf_bytes);
    stat(out, "read_buf_mem_limit", extended.read_buf_mem_limit_bytes);
    stat(out, "inline_ascii_response", "no");
    if shared.published.flash_on() {
        let extended = &shared.extended;
        stat(out, "ext_item_size", extended.ext_item_size);
        stat(out, "ext_item_age", u32::MAX);
        stat(out, "ext_low_ttl", 0);
        stat(out, "ext_recache_rate", 0);
        stat(out, "ext_wbuf_size", extended.ext_wbuf_bytes);
        stat(out, "ext_compact_under", 0);
        stat(out, "ext_drop_under", 0);
        stat(out, "ext_max_sleep", 1_000_000);
        stat(out, "ext_max_frag", "0.80");
        stat(out, "slab_automove_freeratio", "0.010");
        stat(out, "ext_drop_unread", "no");
        let rings = shared.rings.flash_rings();
        stat(out, "flash_io", if rings == shared.map.workers() { "io_uring" } else { "threads" });
    }
    stat(out, "drop_privileges", "no");
    let uring = shared.rings.net_rings();
    stat(out, "io_backend", if uring > 0 && uring == shared.map.workers() { "uring" } else { "epoll" });
    // memcached's TLS lines (Debian's build has TLS: they are there with or without -Z).
    let ssl = &shared.extended.ssl;
    let path = |path: &Option<std::path::PathBuf>, none: &'static str| {
        path.as_ref().map_or_else(|| none.to_string(), |path| path.display().to_string())
    };
    stat(out, "ssl_enabled", yes(config.enable_ssl));
    stat(out, "ssl_chain_cert", path(&ssl.chain_cert, "(null)"));
    stat(out, "ssl_key", path(&ssl.key, "(null)"));
    stat(out, "ssl_verify_mode", ssl.verify_flags());
    stat(out, "ssl_keyformat", ssl.keyformat);
    stat(out, "ssl_ciphers", ssl.ciphers.as_deref().unwrap_or("NULL"));
    stat(out, "ssl_ca_cert", path(&ssl.ca_cert, "NULL"));
    stat(out, "ssl_wbuf_size", ssl.wbuf_bytes);
    stat(out, "ssl_session_cache", yes(ssl.session_cache));
    stat(out, "ssl_kernel_tls", yes(ssl.kernel_tls));
    stat(out, "ssl_min_version", ssl.min_version_text());
    stat(out, "proxy_enabled", "no");
    match &config.memory_file {
        Some(path) => stat(out, "memory_file", path.display()),
        None => stat(out, "memory_file", "(null)"),
    }
    // memcached 1.6.45: client flags are 32 bits unless built with 64-bit ones (so are ours).
    stat(out, "client_flags_size", 4);
    stat(out, "mode", if config.store_mode() { "store" } else { "cache" });
    stat(out, "interface", config.interface());
    stat(out, "partitions", shared.published.partition_count());
    stat(out, "access", format_args!("{:?}", config.access).to_string().to_lowercase());
    stat(out, "eviction_policy", format_args!("{:?}", config.eviction).to_string().to_lowercase());
    stat(out, "log_bytes_per_partition", shared.memory.log_bytes());
    stat(out, "index_bytes_per_partition", shared.memory.index_bytes());
    stat(out, "log_pages", format_args!("{:?}", shared.memory.page_kinds().0).to_string().to_lowercase());
    stat(out, "index_pages", format_args!("{:?}", shared.memory.page_kinds().1).to_string().to_lowercase());
    stat(out, "worker_port_base", config.worker_port_base);
    stat(out, "native_port", config.native_port);
}

/// Store mode's free space by block size, summed over partitions: for each group of size
/// classes that has free blocks (four groups per power of two; 8-byte classes below 64 bytes),
/// `STAT <smallest block bytes>:free_bytes` and `:free_blocks`. Empty in cache mode.
fn arena(shared: &Shared, out: &mut Vec<u8>) {
    let mut groups = std::collections::BTreeMap::<u64, (u64, u64)>::new();
    for partition in shared.published.free_groups() {
        for (floor, bytes, blocks) in partition.snapshot() {
            let group = groups.entry(floor).or_default();
            group.0 += bytes;
            group.1 += blocks;
        }
    }
    for (floor, (bytes, blocks)) in groups {
        stat(out, &format!("{floor}:free_bytes"), bytes);
        stat(out, &format!("{floor}:free_blocks"), blocks);
    }
}

/// memcached's largest slab class id + 1 (`stats cachedump` ids must be below it).
pub const SLAB_CLASSES_MAX: u32 = 64;
/// The one class quicksilver's `stats slabs|items|cachedump` show: the logs.
pub const LOG_CLASS: u32 = 1;

/// memcached's largest slab class id for these settings (its slabs_init): classes grow from
/// a 96-byte chunk (its 48-byte item header and -n 48) by -f until slab_chunk_max. `slabs
/// reassign` takes ids up to it, as memcached does.
pub fn memcached_largest_class(shared: &Shared) -> u32 {
    let factor = shared.config.slab_growth_factor.unwrap_or(1.25);
    let chunk_max = shared.extended.slab_chunk_max_bytes as f64;
    let mut size: u32 = 48 + shared.config.slab_min_size.unwrap_or(48);
    let mut class = 0;
    while class + 1 < SLAB_CLASSES_MAX - 1 {
        class += 1;
        if f64::from(size) >= chunk_max / factor {
            break;
        }
        size = size.next_multiple_of(8);
        size = (f64::from(size) * factor) as u32;
    }
    class
}
/// The log's allocation unit, shown as its class's chunk size.
const LOG_CHUNK_BYTES: u64 = 8;
/// memcached's slab page, the unit of `total_pages`.
const PAGE_BYTES: u64 = 1 << 20;

/// `stats slabs`: the logs as one class whose chunk is their 8-byte unit of allocation;
/// `total_malloced` is the memory set aside for items, the logs' size (as -m, then
/// `cache_memlimit`, set it; pages are faulted in as the logs first fill them, which
/// `stats quicksilver`'s `log_bytes_in_use` shows).
fn slabs(shared: &Shared, out: &mut Vec<u8>) {
    let (p, w, _) = totals(shared);
    // Hits served by other workers' optimistic reads count too, as in the general list.
    let remote_hits: u64 = w.remote_reads.iter().map(|r| r.1).sum();
    let malloced = if shared.memory.store_mode() { p.arena_bytes } else { shared.memory.maxbytes() };
    if malloced > 0 {
        let used = if shared.memory.store_mode() { p.arena_bytes - p.arena_free_bytes } else { p.bytes };
        let total_chunks = malloced / LOG_CHUNK_BYTES;
        let used_chunks = used / LOG_CHUNK_BYTES;
        let class = LOG_CLASS;
        let mut field = |name: &str, value: u64| stat(out, &format!("{class}:{name}"), value);
        field("chunk_size", LOG_CHUNK_BYTES);
        field("chunks_per_page", PAGE_BYTES / LOG_CHUNK_BYTES);
        field("total_pages", malloced.div_ceil(PAGE_BYTES));
        field("total_chunks", total_chunks);
        field("used_chunks", used_chunks);
        field("free_chunks", total_chunks.saturating_sub(used_chunks));
        field("free_chunks_end", 0);
        field("get_hits", p.get_hits + remote_hits);
        field("cmd_set", p.sets);
        field("delete_hits", p.delete_hits);
        field("incr_hits", p.incr_hits);
        field("decr_hits", p.decr_hits);
        field("cas_hits", p.cas_hits);
        field("cas_badval", p.cas_badval);
        field("touch_hits", p.touch_hits);
    }
    stat(out, "active_slabs", u64::from(malloced > 0));
    stat(out, "total_malloced", malloced);
}

/// `stats items`: the logs as one class (listed while it holds items), in memcached's
/// fields; `age` is the age of the oldest record in the logs, and the segmented-LRU
/// figures memcached keeps (hot, warm, moves) are 0 here but `moves_within_lru`, the
/// eviction policy's moves (clock's keeps, LRU's re-appends), and `moves_to_warm`, S3-FIFO's
/// moves from its small ring to its main one (memcached's cold to warm).
fn items(shared: &Shared, out: &mut Vec<u8>) {
    let (p, _, _) = totals(shared);
    if p.items == 0 {
        return;
    }
    let now = u64::from(crate::sys::now_secs());
    let age = if p.oldest_access_secs == 0 { 0 } else { now.saturating_sub(p.oldest_access_secs) };
    let class = LOG_CLASS;
    let mut field = |name: &str, value: u64| stat(out, &format!("items:{class}:{name}"), value);
    field("number", p.items);
    field("number_hot", 0);
    field("number_warm", 0);
    field("number_cold", p.items);
    field("age_hot", 0);
    field("age_warm", 0);
    field("age", age);
    field("mem_requested", p.bytes);
    field("evicted", p.log_evictions + p.index_evictions);
    field("evicted_nonzero", 0);
    field("evicted_time", 0);
    field("outofmemory", p.refused);
    field("tailrepairs", 0);
    field("reclaimed", p.reclaimed);
    field("expired_unfetched", p.expired_unfetched);
    field("evicted_unfetched", p.evicted_unfetched);
    field("evicted_active", 0);
    field("crawler_reclaimed", 0);
    field("crawler_items_checked", 0);
    field("lrutail_reflocked", 0);
    field("moves_to_cold", 0);
    field("moves_to_warm", p.promotions);
    field("moves_within_lru", p.reappends);
    field("direct_reclaims", 0);
    field("hits_to_hot", 0);
    field("hits_to_warm", 0);
    field("hits_to_cold", p.get_hits);
    field("hits_to_temp", 0);
}

/// `stats quicksilver`: the figures memcached has no name for.
fn quicksilver(shared: &Shared, out: &mut Vec<u8>) {
    let (p, w, _) = totals(shared);
    let c = &w.counters;
    let remote_gets: u64 = w.remote_reads.iter().map(|r| r.0).sum();
    stat(out, "log_evictions", p.log_evictions);
    stat(out, "index_evictions", p.index_evictions);
    stat(out, "requests_forwarded", c.forwarded);
    stat(out, "front_cache_hits", c.front_hits);
    stat(out, "forward_batches", c.forward_batches);
    stat(out, "worker_wakeups", c.wakeups);
    stat(out, "remote_reads", remote_gets);
    stat(out, "conn_dropped", c.conns_dropped);
    stat(out, "requests_executed_for_others", c.executed_for_others);
    stat(out, "remote_get_hits", c.remote_get_hits);
    stat(out, "remote_get_misses", c.remote_get_misses);
    stat(out, "log_bytes_in_use", p.log_touched_bytes);
    // The client memory budget (session::budget): its size and what clients hold of it now.
    stat(out, "client_memory_limit", shared.client_memory.limit());
    stat(out, "client_memory_used", shared.client_memory.used());
}

fn partitions(shared: &Shared, out: &mut Vec<u8>) {
    let (_, w, per_partition) = totals(shared);
    for (index, p) in per_partition.into_iter().enumerate() {
        let (remote_gets, remote_hits) = w.remote_reads[index];
        let mut field = |name: &str, value: u64| {
            let _ = write!(out, "STAT {index}:{name} {value}\r\n");
        };
        field("owner_worker", shared.map.owner(index) as u64);
        field("items", p.items);
        field("bytes", p.bytes);
        field("gets", p.gets + remote_gets);
        field("hits", p.get_hits + remote_hits);
        field("sets", p.sets);
        field("log_evictions", p.log_evictions);
        field("index_evictions", p.index_evictions);
        if let Some((log, tier)) = shared.published.flash(index) {
            field("flash_demoted", tier.demoted);
            field("flash_reads", log.reads + log.buffer_reads);
            field("flash_promoted", tier.promoted);
            field("flash_served", tier.served);
            field("flash_misses", tier.misses);
            field("flash_objects_used", log.records - log.records_evicted);
            field("flash_bytes_written", log.bytes_written);
            field("flash_failed", u64::from(log.failed));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::observe::counters::WorkerCounters;
    use clap::Parser;

    /// Every counter a worker keeps reaches `stats` or `stats quicksilver`: each is set alone
    /// to a value of its own in a stopped server's published figures, and its value must
    /// appear in the replies (a counter missing from the sums or from the lists fails here).
    #[test]
    fn every_worker_counter_shows_in_stats() {
        let native = std::net::UdpSocket::bind("127.0.0.1:0").expect("a free port");
        let native_port = native.local_addr().expect("its address").port().to_string();
        drop(native);
        let config = crate::config::Config::try_parse_from([
            "quicksilver",
            "-p",
            "0",
            "-U",
            "0",
            "-l",
            "127.0.0.1",
            "-t",
            "1",
            "--partitions",
            "1",
            "-m",
            "8",
            "-o",
            "idle_timeout=60",
            "--native-port",
            &native_port,
        ])
        .expect("command line");
        let server = crate::Server::start(config).expect("server starts");
        let shared = server.shared().clone();
        server.stop();
        server.wait();
        for (index, name) in WorkerCounters::NAMES.iter().enumerate() {
            let value = 7_700_000_000 + index as u64;
            let mut counters = WorkerCounters::default();
            *counters.values_mut()[index] = value;
            shared.published.worker(0).counters = counters;
            let mut out = Vec::new();
            super::write(&shared, b"", &mut out);
            super::write(&shared, b"quicksilver", &mut out);
            let text = String::from_utf8(out).expect("text");
            assert!(text.contains(&format!(" {value}\r\n")), "{name} is not in stats:\n{text}");
        }
    }
}
