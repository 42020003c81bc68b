//! `GET /metrics`: Prometheus's text exposition (0.0.4), or OpenMetrics 1.0 when the scraper
//! asks for it.
//!
//! memcached's series carry prometheus/memcached_exporter's names, labels, types and help
//! (its `pkg/exporter/exporter.go`), derived the way it derives them: from the text of
//! `stats`, `stats settings`, `stats items` and `stats slabs` (so the two can never disagree),
//! so dashboards and alert rules written for the exporter work unchanged. Quicksilver's own
//! series, `quicksilver_*`, add what memcached does not measure: latency histograms per
//! command family, S3-FIFO's moves, evictions by reason, the workers' load, the front cache,
//! the miss-ratio curve, the client memory budget and readiness.
//!
//! Not prometheus-client: it encodes OpenMetrics only and names a counter's samples
//! `<family>_total`, so the exporter's counters without that suffix
//! (`memcached_uptime_seconds`, `memcached_slab_items_moves_to_cold`, ...) could not keep
//! their names.

use crate::admin::stats;
use crate::observe::latency::{Span, Summed, FAMILIES};
use crate::shared::Shared;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// The content type of Prometheus's text format.
pub const TEXT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The content type of OpenMetrics' text format.
pub const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A metric's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One metric family: its help, type and samples (label pairs, value), in order.
struct Family {
    name: String,
    help: &'static str,
    kind: Kind,
    samples: Vec<(String, String, f64)>,
}

/// The families of one scrape, each written once with all its samples together.
#[derive(Default)]
struct Exposition {
    families: Vec<Family>,
    index: HashMap<String, usize>,
}

impl Exposition {
    /// Adds a sample of family `name` with `labels` (pairs) and `value`.
    fn add(&mut self, name: &str, help: &'static str, kind: Kind, labels: &[(&str, &str)], value: f64) {
        self.add_suffixed(name, "", help, kind, labels, value);
    }

    /// As [`Exposition::add`], for a histogram's `_bucket`, `_sum` or `_count` sample.
    fn add_suffixed(
        &mut self,
        name: &str,
        suffix: &str,
        help: &'static str,
        kind: Kind,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let at = match self.index.get(name) {
            Some(&at) => at,
            None => {
                self.families.push(Family { name: name.to_string(), help, kind, samples: Vec::new() });
                self.index.insert(name.to_string(), self.families.len() - 1);
                self.families.len() - 1
            }
        };
        let mut text = String::new();
        for (index, (label, value)) in labels.iter().enumerate() {
            let comma = if index == 0 { "" } else { "," };
            let _ = write!(text, "{comma}{label}=\"{}\"", escape(value));
        }
        self.families[at].samples.push((suffix.to_string(), text, value));
    }

    /// The text, in Prometheus's format or OpenMetrics'.
    fn render(&self, open_metrics: bool) -> String {
        let mut out = String::with_capacity(self.families.len() * 256);
        for family in &self.families {
            let (name, kind) = match (family.kind, open_metrics) {
                (Kind::Counter, true) => match family.name.strip_suffix("_total") {
                    Some(stem) => (stem, "counter"),
                    // OpenMetrics requires a counter's samples to end in _total: the exporter's
                    // counters that do not keep their names as `unknown`.
                    None => (family.name.as_str(), "unknown"),
                },
                (Kind::Counter, false) => (family.name.as_str(), "counter"),
                (Kind::Gauge, _) => (family.name.as_str(), "gauge"),
                (Kind::Histogram, _) => (family.name.as_str(), "histogram"),
            };
            let _ = writeln!(out, "# HELP {name} {}", family.help);
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (suffix, labels, value) in &family.samples {
                let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
                let _ = writeln!(out, "{}{suffix}{braces} {}", family.name, number(*value));
            }
        }
        if open_metrics {
            out.push_str("# EOF\n");
        }
        out
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A sample value: integers without a fraction, others as Rust prints them.
fn number(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

/// The `STAT name value` lines of a `stats` group's reply, by name.
fn stat_map(shared: &Shared, group: &[u8]) -> HashMap<String, String> {
    let mut reply = Vec::new();
    stats::write(shared, group, &mut reply);
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|line| line.strip_prefix("STAT "))
        .filter_map(|line| line.split_once(' '))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

/// `stats items` or `stats slabs` split per slab class: `items:1:number` or `1:chunk_size`.
fn per_class(map: &HashMap<String, String>, prefix: &str) -> BTreeMap<u32, HashMap<String, String>> {
    let mut classes: BTreeMap<u32, HashMap<String, String>> = BTreeMap::new();
    for (name, value) in map {
        let Some(rest) = name.strip_prefix(prefix) else { continue };
        let Some((class, field)) = rest.split_once(':') else { continue };
        let Ok(class) = class.parse::<u32>() else { continue };
        classes.entry(class).or_default().insert(field.to_string(), value.clone());
    }
    classes
}

/// The exposition of `shared`'s figures; `ready` is whether the server serves traffic.
pub fn render(shared: &Shared, ready: bool, open_metrics: bool) -> String {
    let mut exposition = Exposition::default();
    let mut general = stat_map(shared, b"");
    let slabs = stat_map(shared, b"slabs");
    // The exporter's client reads `stats slabs`' totals (`total_malloced`) with `stats`.
    for (name, value) in &slabs {
        if !name.contains(':') {
            general.entry(name.clone()).or_insert_with(|| value.clone());
        }
    }
    let settings = stat_map(shared, b"settings");
    exporter_general(&mut exposition, &general);
    exporter_settings(&mut exposition, &settings);
    exporter_items(&mut exposition, &per_class(&stat_map(shared, b"items"), "items:"));
    exporter_slabs(&mut exposition, &per_class(&slabs, ""));
    exposition.add("memcached_up", "Could the memcached server be reached.", Kind::Gauge, &[], 1.0);
    super::metrics_own::own(&mut Sink(&mut exposition), shared, ready);
    latency(&mut exposition, shared);
    exposition.render(open_metrics)
}

/// What [`super::metrics_own`] writes through: a sample of a counter or a gauge.
pub struct Sink<'a>(&'a mut Exposition);

impl Sink<'_> {
    /// A counter's sample.
    pub fn counter(&mut self, name: &str, help: &'static str, labels: &[(&str, &str)], value: f64) {
        self.0.add(name, help, Kind::Counter, labels, value);
    }

    /// A gauge's sample.
    pub fn gauge(&mut self, name: &str, help: &'static str, labels: &[(&str, &str)], value: f64) {
        self.0.add(name, help, Kind::Gauge, labels, value);
    }
}

/// A field's value as the exporter parses it (a float), if present and a number.
fn parse(map: &HashMap<String, String>, key: &str) -> Option<f64> {
    map.get(key)?.parse::<f64>().ok()
}

/// One series from one field, with the exporter's name, help and type, if the field is there.
fn from_field(
    exposition: &mut Exposition,
    map: &HashMap<String, String>,
    key: &str,
    (name, help, kind): (&str, &'static str, Kind),
    labels: &[(&str, &str)],
) {
    if let Some(value) = parse(map, key) {
        exposition.add(name, help, kind, labels, value);
    }
}

const COMMANDS: (&str, &str, Kind) = (
    "memcached_commands_total",
    "Total number of all requests broken down by command (get, set, etc.) and status.",
    Kind::Counter,
);

/// The exporter's series from `stats`.
fn exporter_general(exposition: &mut Exposition, s: &HashMap<String, String>) {
    let version = s.get("version").map_or("", String::as_str);
    exposition.add(
        "memcached_version",
        "The version of this memcached server.",
        Kind::Gauge,
        &[("version", version)],
        1.0,
    );
    for op in ["get", "delete", "incr", "decr", "cas", "touch"] {
        let (name, help, kind) = COMMANDS;
        from_field(
            exposition,
            s,
            &format!("{op}_hits"),
            (name, help, kind),
            &[("command", op), ("status", "hit")],
        );
        from_field(
            exposition,
            s,
            &format!("{op}_misses"),
            (name, help, kind),
            &[("command", op), ("status", "miss")],
        );
    }
    for (key, (name, help, kind)) in GENERAL_HEAD {
        from_field(exposition, s, key, (name, help, kind), &[]);
    }
    from_field(exposition, s, "cas_badval", COMMANDS, &[("command", "cas"), ("status", "badval")]);
    from_field(exposition, s, "cmd_flush", COMMANDS, &[("command", "flush"), ("status", "hit")]);
    // memcached counts cas commands in cmd_set too.
    let cas: Option<f64> = ["cas_misses", "cas_hits", "cas_badval"].iter().map(|key| parse(s, key)).sum();
    if let (Some(set), Some(cas)) = (parse(s, "cmd_set"), cas) {
        let (name, help, kind) = COMMANDS;
        exposition.add(name, help, kind, &[("command", "set"), ("status", "hit")], set - cas);
    }
    if s.contains_key("extstore_limit_maxbytes") {
        for (key, (name, help, kind)) in EXTSTORE {
            from_field(exposition, s, key, (name, help, kind), &[]);
        }
    }
    for (key, (name, help, kind)) in GENERAL {
        from_field(exposition, s, key, (name, help, kind), &[]);
    }
}

type Series = (&'static str, &'static str, Kind);

const GENERAL_HEAD: [(&str, Series); 2] = [
    ("uptime", ("memcached_uptime_seconds", "Number of seconds since the server started.", Kind::Counter)),
    ("time", ("memcached_time_seconds", "current UNIX time according to the server.", Kind::Gauge)),
];

const GENERAL: [(&str, Series); 26] = [
    ("rusage_user", ("memcached_process_user_cpu_seconds_total", "Accumulated user time for this process.", Kind::Counter)),
    ("rusage_system", ("memcached_process_system_cpu_seconds_total", "Accumulated system time for this process.", Kind::Counter)),
    ("bytes", ("memcached_current_bytes", "Current number of bytes used to store items.", Kind::Gauge)),
    ("limit_maxbytes", ("memcached_limit_bytes", "Number of bytes this server is allowed to use for storage.", Kind::Gauge)),
    ("curr_items", ("memcached_current_items", "Current number of items stored by this instance.", Kind::Gauge)),
    ("total_items", ("memcached_items_total", "Total number of items stored during the life of this instance.", Kind::Counter)),
    ("bytes_read", ("memcached_read_bytes_total", "Total number of bytes read by this server from network.", Kind::Counter)),
    ("bytes_written", ("memcached_written_bytes_total", "Total number of bytes sent by this server to network.", Kind::Counter)),
    ("curr_connections", ("memcached_current_connections", "Current number of open connections.", Kind::Gauge)),
    ("total_connections", ("memcached_connections_total", "Total number of connections opened since the server started running.", Kind::Counter)),
    ("rejected_connections", ("memcached_connections_rejected_total", "Total number of connections rejected due to hitting the memcached's -c limit in maxconns_fast mode.", Kind::Counter)),
    ("conn_yields", ("memcached_connections_yielded_total", "Total number of connections yielded running due to hitting the memcached's -R limit.", Kind::Counter)),
    ("listen_disabled_num", ("memcached_connections_listener_disabled_total", "Number of times that memcached has hit its connections limit and disabled its listener.", Kind::Counter)),
    ("evictions", ("memcached_items_evicted_total", "Total number of valid items removed from cache to free memory for new items.", Kind::Counter)),
    ("reclaimed", ("memcached_items_reclaimed_total", "Total number of times an entry was stored using memory from an expired entry.", Kind::Counter)),
    ("store_too_large", ("memcached_item_too_large_total", "The number of times an item exceeded the max-item-size when being stored.", Kind::Counter)),
    ("store_no_memory", ("memcached_item_no_memory_total", "The number of times an item could not be stored due to no more memory.", Kind::Counter)),
    ("lru_crawler_starts", ("memcached_lru_crawler_starts_total", "Times an LRU crawler was started.", Kind::Counter)),
    ("direct_reclaims", ("memcached_direct_reclaims_total", "Times worker threads had to directly reclaim or evict items.", Kind::Counter)),
    ("crawler_items_checked", ("memcached_lru_crawler_items_checked_total", "Total items examined by LRU Crawler.", Kind::Counter)),
    ("crawler_reclaimed", ("memcached_lru_crawler_reclaimed_total", "Total items freed by LRU Crawler.", Kind::Counter)),
    ("moves_to_cold", ("memcached_lru_crawler_moves_to_cold_total", "Total number of items moved from HOT/WARM to COLD LRU's.", Kind::Counter)),
    ("moves_to_warm", ("memcached_lru_crawler_moves_to_warm_total", "Total number of items moved from COLD to WARM LRU.", Kind::Counter)),
    ("moves_within_lru", ("memcached_lru_crawler_moves_within_lru_total", "Total number of items reshuffled within HOT or WARM LRU's.", Kind::Counter)),
    ("total_malloced", ("memcached_malloced_bytes", "Number of bytes of memory allocated to slab pages.", Kind::Gauge)),
    ("accepting_conns", ("memcached_accepting_connections", "The Memcached server is currently accepting new connections.", Kind::Gauge)),
];

const EXTSTORE: [(&str, Series); 19] = [
    (
        "extstore_compact_lost",
        (
            "memcached_extstore_compact_lost_total",
            "Total number of items lost because they were locked during extstore compaction.",
            Kind::Counter,
        ),
    ),
    (
        "extstore_compact_rescues",
        (
            "memcached_extstore_compact_rescued_total",
            "Total number of items moved to a new page during extstore compaction,",
            Kind::Counter,
        ),
    ),
    (
        "extstore_compact_skipped",
        (
            "memcached_extstore_compact_skipped_total",
            "Total number of items dropped due to inactivity during extstore compaction.",
            Kind::Counter,
        ),
    ),
    (
        "extstore_page_allocs",
        (
            "memcached_extstore_pages_allocated_total",
            "Total number of times a page was allocated in extstore.",
            Kind::Counter,
        ),
    ),
    (
        "extstore_page_evictions",
        (
            "memcached_extstore_pages_evicted_total",
            "Total number of times a page was evicted from extstore.",
            Kind::Counter,
        ),
    ),
    (
        "extstore_page_reclaims",
        (
            "memcached_extstore_pages_reclaimed_total",
            "Total number of times an empty extstore page was freed.",
            Kind::Counter,
        ),
    ),
    (
        "extstore_pages_free",
        (
            "memcached_extstore_pages_free",
            "Number of extstore pages not yet containing any items.",
            Kind::Gauge,
        ),
    ),
    (
        "extstore_pages_used",
        (
            "memcached_extstore_pages_used",
            "Number of extstore pages containing at least one item.",
            Kind::Gauge,
        ),
    ),
    (
        "extstore_objects_evicted",
        (
            "memcached_extstore_objects_evicted_total",
            "Total number of items evicted from extstore to free up space.",
            Kind::Counter,
        ),
    ),
    (
        "extstore_objects_read",
        ("memcached_extstore_objects_read_total", "Total number of items read from extstore.", Kind::Counter),
    ),
    (
        "extstore_objects_written",
        (
            "memcached_extstore_objects_written_total",
            "Total number of items written to extstore.",
            Kind::Counter,
        ),
    ),
    (
        "extstore_objects_used",
        ("memcached_extstore_objects_used", "Number of items stored in extstore.", Kind::Gauge),
    ),
    (
        "extstore_bytes_evicted",
        (
            "memcached_extstore_bytes_evicted_total",
            "Total number of bytes evicted from extstore to free up space.",
            Kind::Counter,
        ),
    ),
    (
        "extstore_bytes_written",
        (
            "memcached_extstore_bytes_written_total",
            "Total number of bytes written to extstore.",
            Kind::Counter,
        ),
    ),
    (
        "extstore_bytes_read",
        ("memcached_extstore_bytes_read_total", "Total number of bytes read from extstore.", Kind::Counter),
    ),
    (
        "extstore_bytes_used",
        (
            "memcached_extstore_bytes_used",
            "Current number of bytes used to store items in extstore.",
            Kind::Counter,
        ),
    ),
    (
        "extstore_bytes_fragmented",
        (
            "memcached_extstore_bytes_fragmented",
            "Current number of bytes in extstore pages allocated but not used to store an object.",
            Kind::Gauge,
        ),
    ),
    (
        "extstore_limit_maxbytes",
        (
            "memcached_extstore_bytes_limit",
            "Number of bytes of external storage allocated for this server.",
            Kind::Gauge,
        ),
    ),
    (
        "extstore_io_queue",
        (
            "memcached_extstore_io_queue_depth",
            "Number of items in the I/O queue waiting to be processed.",
            Kind::Gauge,
        ),
    ),
];

/// The exporter's series from `stats settings`.
fn exporter_settings(exposition: &mut Exposition, settings: &HashMap<String, String>) {
    from_field(
        exposition,
        settings,
        "maxconns",
        ("memcached_max_connections", "Maximum number of clients allowed.", Kind::Gauge),
        &[],
    );
    if settings.get("lru_crawler").map(String::as_str) != Some("yes") {
        return;
    }
    exposition.add(
        "memcached_lru_crawler_enabled",
        "Whether the LRU crawler is enabled.",
        Kind::Gauge,
        &[],
        1.0,
    );
    // memcached's segmented-LRU tuning, which `stats settings` here does not list (there are
    // no LRU segments or maintainer thread: docs/COMPATIBILITY.md): what holds here, so the
    // exporter's dashboards find every series. The crawler runs without pauses or a limit.
    for (name, help) in LRU_TUNING {
        exposition.add(name, help, Kind::Gauge, &[], 0.0);
    }
}

const LRU_TUNING: [(&str, &str); 7] = [
    ("memcached_lru_crawler_sleep", "Microseconds to sleep between LRU crawls."),
    ("memcached_lru_crawler_to_crawl", "Max items to crawl per slab per run."),
    ("memcached_lru_crawler_maintainer_thread", "Split LRU mode and background threads."),
    ("memcached_lru_crawler_hot_percent", "Percent of slab memory reserved for HOT LRU."),
    ("memcached_lru_crawler_warm_percent", "Percent of slab memory reserved for WARM LRU."),
    ("memcached_lru_crawler_hot_max_factor", "Set idle age of HOT LRU to COLD age * this"),
    ("memcached_lru_crawler_warm_max_factor", "Set idle age of WARM LRU to COLD age * this"),
];

const ITEMS: [(&str, Series); 19] = [
    ("mem_requested", ("memcached_slab_mem_requested_bytes", "Number of bytes of memory actual items take up within a slab.", Kind::Counter)),
    ("number", ("memcached_slab_current_items", "Number of items currently stored in this slab class.", Kind::Gauge)),
    ("age", ("memcached_slab_items_age_seconds", "Number of seconds the oldest item has been in the slab class.", Kind::Gauge)),
    ("crawler_reclaimed", ("memcached_slab_items_crawler_reclaimed_total", "Number of items freed by the LRU Crawler.", Kind::Counter)),
    ("evicted", ("memcached_slab_items_evicted_total", "Total number of times an item had to be evicted from the LRU before it expired.", Kind::Counter)),
    ("evicted_nonzero", ("memcached_slab_items_evicted_nonzero_total", "Total number of times an item which had an explicit expire time set had to be evicted from the LRU before it expired.", Kind::Counter)),
    ("evicted_time", ("memcached_slab_items_evicted_time_seconds", "Seconds since the last access for the most recent item evicted from this class.", Kind::Counter)),
    ("evicted_unfetched", ("memcached_slab_items_evicted_unfetched_total", "Total nmber of items evicted and never fetched.", Kind::Counter)),
    ("expired_unfetched", ("memcached_slab_items_expired_unfetched_total", "Total number of valid items evicted from the LRU which were never touched after being set.", Kind::Counter)),
    ("outofmemory", ("memcached_slab_items_outofmemory_total", "Total number of items for this slab class that have triggered an out of memory error.", Kind::Counter)),
    ("reclaimed", ("memcached_slab_items_reclaimed_total", "Total number of items reclaimed.", Kind::Counter)),
    ("tailrepairs", ("memcached_slab_items_tailrepairs_total", "Total number of times the entries for a particular ID need repairing.", Kind::Counter)),
    ("moves_to_cold", ("memcached_slab_items_moves_to_cold", "Number of items moved from HOT or WARM into COLD.", Kind::Counter)),
    ("moves_to_warm", ("memcached_slab_items_moves_to_warm", "Number of items moves from COLD into WARM.", Kind::Counter)),
    ("moves_within_lru", ("memcached_slab_items_moves_within_lru", "Number of times active items were bumped within HOT or WARM.", Kind::Counter)),
    ("number_hot", ("memcached_slab_hot_items", "Number of items presently stored in the HOT LRU.", Kind::Gauge)),
    ("number_warm", ("memcached_slab_warm_items", "Number of items presently stored in the WARM LRU.", Kind::Gauge)),
    ("number_cold", ("memcached_slab_cold_items", "Number of items presently stored in the COLD LRU.", Kind::Gauge)),
    ("number_temp", ("memcached_slab_temporary_items", "Number of items presently stored in the TEMPORARY LRU.", Kind::Gauge)),
];

const ITEM_AGES: [(&str, Series); 2] = [
    ("age_hot", ("memcached_slab_hot_age_seconds", "Age of the oldest item in HOT LRU.", Kind::Gauge)),
    ("age_warm", ("memcached_slab_warm_age_seconds", "Age of the oldest item in HOT LRU.", Kind::Gauge)),
];

/// The exporter's per-class series from `stats items`.
fn exporter_items(exposition: &mut Exposition, classes: &BTreeMap<u32, HashMap<String, String>>) {
    for (class, fields) in classes {
        let slab = class.to_string();
        for (key, series) in ITEMS.iter().chain(ITEM_AGES.iter()) {
            from_field(exposition, fields, key, *series, &[("slab", &slab)]);
        }
        for (key, lru) in [
            ("hits_to_hot", "hot"),
            ("hits_to_warm", "warm"),
            ("hits_to_cold", "cold"),
            ("hits_to_temp", "temporary"),
        ] {
            let series = ("memcached_slab_lru_hits_total", "Number of get_hits to the LRU.", Kind::Counter);
            from_field(exposition, fields, key, series, &[("slab", &slab), ("lru", lru)]);
        }
    }
}

const SLABS: [(&str, Series); 8] = [
    (
        "chunk_size",
        (
            "memcached_slab_chunk_size_bytes",
            "Number of bytes allocated to each chunk within this slab class.",
            Kind::Gauge,
        ),
    ),
    (
        "chunks_per_page",
        (
            "memcached_slab_chunks_per_page",
            "Number of chunks within a single page for this slab class.",
            Kind::Gauge,
        ),
    ),
    (
        "total_pages",
        ("memcached_slab_current_pages", "Number of pages allocated to this slab class.", Kind::Gauge),
    ),
    (
        "total_chunks",
        ("memcached_slab_current_chunks", "Number of chunks allocated to this slab class.", Kind::Gauge),
    ),
    ("used_chunks", ("memcached_slab_chunks_used", "Number of chunks allocated to an item.", Kind::Gauge)),
    ("free_chunks", ("memcached_slab_chunks_free", "Number of chunks not yet allocated items.", Kind::Gauge)),
    (
        "free_chunks_end",
        (
            "memcached_slab_chunks_free_end",
            "Number of free chunks at the end of the last allocated page.",
            Kind::Gauge,
        ),
    ),
    (
        "mem_requested",
        (
            "memcached_slab_mem_requested_bytes",
            "Number of bytes of memory actual items take up within a slab.",
            Kind::Gauge,
        ),
    ),
];

/// The exporter's per-class series from `stats slabs`.
fn exporter_slabs(exposition: &mut Exposition, classes: &BTreeMap<u32, HashMap<String, String>>) {
    let commands = (
        "memcached_slab_commands_total",
        "Total number of all requests broken down by command (get, set, etc.) and status per slab.",
        Kind::Counter,
    );
    for (class, fields) in classes {
        let slab = class.to_string();
        for op in ["get", "delete", "incr", "decr", "cas", "touch"] {
            let labels = [("slab", slab.as_str()), ("command", op), ("status", "hit")];
            from_field(exposition, fields, &format!("{op}_hits"), commands, &labels);
        }
        let labels = [("slab", slab.as_str()), ("command", "cas"), ("status", "badval")];
        from_field(exposition, fields, "cas_badval", commands, &labels);
        let cas: Option<f64> = ["cas_hits", "cas_badval"].iter().map(|key| parse(fields, key)).sum();
        if let (Some(set), Some(cas)) = (parse(fields, "cmd_set"), cas) {
            let (name, help, kind) = commands;
            exposition.add(
                name,
                help,
                kind,
                &[("slab", &slab), ("command", "set"), ("status", "hit")],
                set - cas,
            );
        }
        for (key, series) in SLABS {
            from_field(exposition, fields, key, series, &[("slab", &slab)]);
        }
    }
}

/// The latency histograms, per command family that has seen a request.
fn latency(exposition: &mut Exposition, shared: &Shared) {
    const SPANS: [(Span, &str, &str); 2] = [
        (
            Span::Service,
            "quicksilver_request_duration_seconds",
            "Time from a request's parse to its reply queued for the socket, per command family.",
        ),
        (
            Span::ReadToReply,
            "quicksilver_request_read_to_reply_seconds",
            "Time from the read that brought a request's first byte to its reply queued for the socket, per command family.",
        ),
    ];
    for (span, name, help) in SPANS {
        for family in FAMILIES {
            let summed = shared.observers.latency.summed(family, span);
            if summed.count() == 0 {
                continue;
            }
            let label = family.name();
            let mut cumulative = 0;
            for (k, count) in summed.buckets.iter().enumerate() {
                cumulative += count;
                let le = Summed::bound_secs(k).map_or("+Inf".to_string(), |bound| format!("{bound}"));
                let labels = [("family", label), ("le", le.as_str())];
                exposition.add_suffixed(name, "_bucket", help, Kind::Histogram, &labels, cumulative as f64);
            }
            let labels = [("family", label)];
            exposition.add_suffixed(name, "_sum", help, Kind::Histogram, &labels, summed.sum_ns as f64 / 1e9);
            exposition.add_suffixed(name, "_count", help, Kind::Histogram, &labels, cumulative as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_written_once_with_their_samples_together() {
        let mut exposition = Exposition::default();
        exposition.add("a_total", "A.", Kind::Counter, &[("x", "1")], 1.0);
        exposition.add("b", "B.", Kind::Gauge, &[], 2.5);
        exposition.add("a_total", "A.", Kind::Counter, &[("x", "2\"q")], 3.0);
        exposition.add("c_seconds", "C.", Kind::Counter, &[], 4.0);
        let text = exposition.render(false);
        assert_eq!(
            text,
            "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 1\na_total{x=\"2\\\"q\"} 3\n\
             # HELP b B.\n# TYPE b gauge\nb 2.5\n# HELP c_seconds C.\n# TYPE c_seconds counter\nc_seconds 4\n"
        );
        let open = exposition.render(true);
        assert!(open.contains("# TYPE a counter\na_total{x=\"1\"} 1\n"), "{open}");
        assert!(open.contains("# TYPE c_seconds unknown\nc_seconds 4\n"), "{open}");
        assert!(open.ends_with("# EOF\n"), "{open}");
    }

    #[test]
    fn numbers_print_as_prometheus_reads_them() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(1e-6), "0.000001");
    }
}
