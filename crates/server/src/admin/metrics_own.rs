//! Quicksilver's own series on `/metrics` (`quicksilver_*`): what memcached_exporter cannot
//! show because memcached does not measure it. The latency histograms are written by
//! [`super::metrics`]; the rest is here.

use super::metrics::Sink;
use crate::shared::Shared;
use std::sync::atomic::Ordering::Relaxed;

/// Writes quicksilver's own counters and gauges.
pub fn own(sink: &mut Sink<'_>, shared: &Shared, ready: bool) {
    sink.gauge(
        "quicksilver_ready",
        "Whether the server takes traffic (0 while a memory file or flash tier is being loaded, or --warm-from copies items).",
        &[],
        f64::from(u8::from(ready)),
    );
    restart(sink, shared);
    warm(sink, shared);
    store(sink, shared);
    workers(sink, shared);
    observers(sink, shared);
    connections(sink, shared);
}

/// What the start loaded: a warm restart's items, and how long loading took.
fn restart(sink: &mut Sink<'_>, shared: &Shared) {
    let restart = &shared.restart;
    sink.gauge(
        "quicksilver_restart_warm",
        "Whether this start took its items back from a memory file (-e).",
        &[],
        f64::from(u8::from(restart.warm)),
    );
    sink.gauge(
        "quicksilver_restart_items",
        "Items this start took back from the memory file.",
        &[],
        restart.items as f64,
    );
    sink.gauge(
        "quicksilver_restart_bytes",
        "Bytes of the items this start took back from the memory file.",
        &[],
        restart.bytes as f64,
    );
    sink.gauge(
        "quicksilver_restart_load_seconds",
        "How long this start took to load its memory file and flash tier (not ready meanwhile).",
        &[],
        restart.load_secs,
    );
}

/// Warming from a live node (`--warm-from`; all zero without it).
fn warm(sink: &mut Sink<'_>, shared: &Shared) {
    use crate::shared::warming::Phase;
    let warming = &shared.warming;
    let phase = warming.phase();
    for state in [Phase::Off, Phase::Listing, Phase::Copying, Phase::Done, Phase::Failed] {
        sink.gauge(
            "quicksilver_warm_state",
            "Where warming from a live node stands (--warm-from): 1 for the present state.",
            &[("state", state.name())],
            f64::from(u8::from(phase == state)),
        );
    }
    let items = "The items chosen to warm from a live node, by outcome: copied here, already here (kept), gone at the source, or refused here.";
    for (outcome, counter) in [
        ("copied", &warming.copied),
        ("present", &warming.present),
        ("gone", &warming.gone),
        ("refused", &warming.refused),
    ] {
        sink.counter(
            "quicksilver_warm_items_total",
            items,
            &[("outcome", outcome)],
            counter.load(Relaxed) as f64,
        );
    }
    sink.counter(
        "quicksilver_warm_bytes_total",
        "Value bytes copied from a live node.",
        &[],
        warming.copied_bytes.load(Relaxed) as f64,
    );
    sink.gauge(
        "quicksilver_warm_chosen_items",
        "Items chosen to copy from a live node: its hottest that fit in this node's memory.",
        &[],
        warming.chosen.load(Relaxed) as f64,
    );
    sink.gauge(
        "quicksilver_warm_seconds",
        "How long warming from a live node has taken (so far, while it runs).",
        &[],
        warming.millis.load(Relaxed) as f64 / 1000.0,
    );
}

/// The partitions' figures: evictions by reason, S3-FIFO's moves, expiry, memory.
fn store(sink: &mut Sink<'_>, shared: &Shared) {
    let (p, _, _) = super::stats::totals(shared);
    let evictions = "Items evicted, by reason: the log wrapped over them, or their index bucket was full.";
    sink.counter("quicksilver_evictions_total", evictions, &[("reason", "log")], p.log_evictions as f64);
    sink.counter("quicksilver_evictions_total", evictions, &[("reason", "index")], p.index_evictions as f64);
    sink.counter(
        "quicksilver_s3fifo_promotions_total",
        "S3-FIFO: items read while in the small ring, copied to the main ring.",
        &[],
        p.promotions as f64,
    );
    sink.counter(
        "quicksilver_s3fifo_ghost_hits_total",
        "S3-FIFO: new keys the ghost remembered, written to the main ring directly.",
        &[],
        p.ghost_hits as f64,
    );
    sink.counter(
        "quicksilver_reappends_total",
        "Items moved to the log's head to keep them (clock's keeps, LRU's re-appends).",
        &[],
        p.reappends as f64,
    );
    let expired = "Items found expired or flushed, by where: a get, or an expired item's memory reused.";
    sink.counter("quicksilver_items_expired_total", expired, &[("found", "get")], p.get_expired as f64);
    sink.counter(
        "quicksilver_items_expired_total",
        expired,
        &[("found", "flushed_get")],
        p.get_flushed as f64,
    );
    sink.counter("quicksilver_items_expired_total", expired, &[("found", "reclaimed")], p.reclaimed as f64);
    sink.gauge(
        "quicksilver_log_bytes_in_use",
        "Log memory in use: up to the furthest byte written.",
        &[],
        p.log_touched_bytes as f64,
    );
    sink.gauge(
        "quicksilver_index_buckets_used",
        "Index buckets in use (the index grows as items outnumber its slots).",
        &[],
        p.index_buckets as f64,
    );
}

/// Per-worker load and the hand-over of requests between workers (MICA's skew).
fn workers(sink: &mut Sink<'_>, shared: &Shared) {
    let latency = &shared.observers.latency;
    for index in 0..latency.workers() {
        let worker = index.to_string();
        sink.counter(
            "quicksilver_worker_requests_total",
            "Requests each worker parsed and ran or handed over (the load per worker).",
            &[("worker", &worker)],
            latency.worker_requests(index) as f64,
        );
    }
    let (_, w, _) = super::stats::totals(shared);
    let c = &w.counters;
    let handed = [
        ("quicksilver_requests_forwarded_total", "Requests handed to the partition's owner.", c.forwarded),
        (
            "quicksilver_forward_batches_total",
            "Batches of requests handed over (one per owner per loop turn).",
            c.forward_batches,
        ),
        (
            "quicksilver_requests_executed_for_others_total",
            "Requests run for another worker.",
            c.executed_for_others,
        ),
        (
            "quicksilver_worker_wakeups_total",
            "Sleeping workers woken to run handed-over requests or take replies.",
            c.wakeups,
        ),
        (
            "quicksilver_front_cache_hits_total",
            "Gets of other workers' keys answered from the front cache.",
            c.front_hits,
        ),
        (
            "quicksilver_remote_get_hits_total",
            "CREW reads of other workers' partitions that hit.",
            c.remote_get_hits,
        ),
        (
            "quicksilver_remote_get_misses_total",
            "CREW reads of other workers' partitions that missed.",
            c.remote_get_misses,
        ),
        (
            "quicksilver_connections_dropped_total",
            "Connections closed for misbehaving (over-long lines, unread output).",
            c.conns_dropped,
        ),
        ("quicksilver_idle_kicks_total", "Connections closed by -o idle_timeout.", c.idle_kicks),
        ("quicksilver_auth_commands_total", "Authentication attempts.", c.auth_cmds),
        ("quicksilver_auth_errors_total", "Failed authentication attempts.", c.auth_errors),
    ];
    for (name, help, value) in handed {
        sink.counter(name, help, &[], value as f64);
    }
    let in_flight = c.forwarded.saturating_sub(c.executed_for_others);
    sink.gauge(
        "quicksilver_handover_in_flight",
        "Requests handed over and not yet run by their owners (the hand-over rings' depth, summed).",
        &[],
        in_flight as f64,
    );
}

/// The miss-ratio curve and the hot keys' share.
fn observers(sink: &mut Sink<'_>, shared: &Shared) {
    let mut reply = Vec::new();
    shared.observers.mrc.command(b"", shared.memory.maxbytes(), &mut reply);
    let text = String::from_utf8_lossy(&reply);
    for line in text.lines() {
        let Some((name, value)) = line.strip_prefix("STAT ").and_then(|line| line.split_once(' ')) else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else { continue };
        if let Some(memory) = name.strip_prefix("mrc_hit_ratio_") {
            sink.gauge(
                "quicksilver_mrc_hit_ratio",
                "The hit ratio an LRU cache of this many times the item memory would have had (stats mrc).",
                &[("memory", memory)],
                value,
            );
        } else if name == "mrc_working_set_bytes" {
            sink.gauge(
                "quicksilver_mrc_working_set_bytes",
                "Bytes of the distinct keys sampled (stats mrc).",
                &[],
                value,
            );
        }
    }
    reply.clear();
    shared.observers.hotkeys.command(b"10", &mut reply);
    let every = f64::from(shared.observers.hotkeys.every().max(1));
    let top: f64 = String::from_utf8_lossy(&reply)
        .lines()
        .filter(|line| line.starts_with("STAT hotkey_"))
        .filter_map(|line| line.split(" count=").nth(1)?.split(' ').next()?.parse::<f64>().ok())
        .sum();
    let (p, _, _) = super::stats::totals(shared);
    let requests = (p.gets + p.sets) as f64;
    let share = if requests > 0.0 { (top * every / requests).min(1.0) } else { 0.0 };
    sink.gauge(
        "quicksilver_hotkeys_top10_share",
        "Share of gets and sets that went to the ten hottest keys (sampled; stats hotkeys).",
        &[],
        share,
    );
}

/// The client memory budget and TLS.
fn connections(sink: &mut Sink<'_>, shared: &Shared) {
    sink.gauge(
        "quicksilver_client_memory_limit_bytes",
        "The memory all clients may hold together beyond their first buffers (tied to -m).",
        &[],
        shared.client_memory.limit() as f64,
    );
    sink.gauge(
        "quicksilver_client_memory_used_bytes",
        "What clients hold of that budget now.",
        &[],
        shared.client_memory.used() as f64,
    );
    if let Some(tls) = shared.credentials.tls() {
        sink.counter(
            "quicksilver_tls_handshakes_total",
            "TLS handshakes that finished.",
            &[],
            tls.handshakes.load(Relaxed) as f64,
        );
        sink.counter(
            "quicksilver_tls_handshake_errors_total",
            "TLS handshakes that failed.",
            &[],
            tls.handshake_errors.load(Relaxed) as f64,
        );
        sink.counter(
            "quicksilver_tls_protocol_errors_total",
            "TLS sessions that broke after their handshake.",
            &[],
            tls.proto_errors.load(Relaxed) as f64,
        );
        sink.counter(
            "quicksilver_tls_new_sessions_total",
            "TLS sessions stored in the session cache.",
            &[],
            tls.new_sessions() as f64,
        );
    }
}
