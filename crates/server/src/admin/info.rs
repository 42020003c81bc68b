//! The Redis protocol's INFO: redis-server 7.0's sections and field names (what monitoring,
//! clients and Redis's own tests read), their figures taken from memcached's `stats` (one
//! source for both: [`super::stats`]), so the two never disagree.

use crate::shared::Shared;
use std::collections::HashMap;
use std::io::Write;

/// The sections INFO lists with no argument (or `default`), in redis-server's order.
const DEFAULT: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "errorstats",
    "cluster",
    "keyspace",
];
/// What `all` and `everything` add.
const MORE: &[&str] = &["commandstats", "latencystats"];

/// INFO's text for the sections `asked` names (none: the default ones), without case.
/// `keyspace`: each database's keys where databases other than 0 are in use (else every
/// item is database 0's).
pub fn write(shared: &Shared, asked: &[&[u8]], keyspace: Option<&[u64]>, out: &mut Vec<u8>) {
    let mut general = Vec::new();
    super::stats::write(shared, b"", &mut general);
    let text = String::from_utf8_lossy(&general);
    let stats: HashMap<&str, &str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("STAT "))
        .filter_map(|line| line.split_once(' '))
        .collect();
    let figure = |name: &str| stats.get(name).copied().unwrap_or("0");
    let number = |name: &str| figure(name).parse::<u64>().unwrap_or(0);
    for section in sections(asked) {
        if out.is_empty() {
            let _ = write!(out, "# {}\r\n", title(section));
        } else {
            let _ = write!(out, "\r\n# {}\r\n", title(section));
        }
        let mut field = |name: &str, value: &dyn std::fmt::Display| {
            let _ = write!(out, "{name}:{value}\r\n");
        };
        match section {
            "server" => {
                field("redis_version", &"7.0.15");
                field("quicksilver_version", &env!("CARGO_PKG_VERSION"));
                field("redis_mode", &"standalone");
                field("os", &std::env::consts::OS);
                field("arch_bits", &64);
                field("multiplexing_api", &"epoll");
                field("process_id", &figure("pid"));
                field("uptime_in_seconds", &figure("uptime"));
                field("uptime_in_days", &(number("uptime") / 86_400));
                field("hz", &10);
            }
            "clients" => {
                field("connected_clients", &figure("curr_connections"));
                field("maxclients", &figure("max_connections"));
                field("blocked_clients", &0);
            }
            "memory" => memory(shared, (number("bytes"), shared.memory.redis_maxmemory()), &mut field),
            "persistence" => {
                field("loading", &0);
                field("rdb_bgsave_in_progress", &0);
                field("aof_enabled", &0);
                field("aof_rewrite_in_progress", &0);
            }
            "stats" => {
                field("total_connections_received", &figure("total_connections"));
                field("total_commands_processed", &commands(&number));
                field("total_net_input_bytes", &figure("bytes_read"));
                field("total_net_output_bytes", &figure("bytes_written"));
                field("expired_keys", &figure("reclaimed"));
                field("evicted_keys", &figure("evictions"));
                field("keyspace_hits", &figure("get_hits"));
                field("keyspace_misses", &figure("get_misses"));
            }
            "replication" => {
                field("role", &"master");
                field("connected_slaves", &0);
                field("master_repl_offset", &0);
            }
            "cpu" => {
                field("used_cpu_sys", &figure("rusage_system"));
                field("used_cpu_user", &figure("rusage_user"));
                field("used_cpu_sys_children", &"0.000000");
                field("used_cpu_user_children", &"0.000000");
            }
            "cluster" => field("cluster_enabled", &0),
            "keyspace" => {
                let every = [number("curr_items")];
                for (db, &keys) in keyspace.unwrap_or(&every).iter().enumerate().filter(|(_, &keys)| keys > 0)
                {
                    field(&format!("db{db}"), &format_args!("keys={keys},expires=0,avg_ttl=0"));
                }
            }
            "commandstats" => {
                for (name, counter) in [
                    ("get", "cmd_get"),
                    ("set", "cmd_set"),
                    ("expire", "cmd_touch"),
                    ("flushall", "cmd_flush"),
                ] {
                    let calls = number(counter);
                    if calls > 0 {
                        field(
                            &format!("cmdstat_{name}"),
                            &format_args!(
                                "calls={calls},usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0"
                            ),
                        );
                    }
                }
            }
            _ => {}
        }
    }
}

/// INFO's memory section: the items' bytes and the limit (`used`, `max`), the scripts'.
fn memory(shared: &Shared, (used, max): (u64, u64), field: &mut dyn FnMut(&str, &dyn std::fmt::Display)) {
    field("used_memory", &used);
    field("used_memory_human", &human(used));
    field("maxmemory", &max);
    field("maxmemory_human", &human(max));
    field("maxmemory_policy", &"allkeys-lru");
    field("mem_allocator", &"libc");
    let lua = shared.scripts.lua_memory() as u64;
    let (scripts, script_bytes) = shared.scripts.figures();
    field("used_memory_lua", &lua);
    field("used_memory_lua_human", &human(lua));
    field("used_memory_scripts_eval", &script_bytes);
    field("number_of_cached_scripts", &scripts);
}

/// The sections to list, each once, in redis-server's order.
fn sections(asked: &[&[u8]]) -> Vec<&'static str> {
    let is = |arg: &[u8], name: &str| arg.eq_ignore_ascii_case(name.as_bytes());
    let every = asked.iter().any(|arg| is(arg, "all") || is(arg, "everything"));
    let default = asked.is_empty() || asked.iter().any(|arg| is(arg, "default"));
    DEFAULT
        .iter()
        .chain(MORE)
        .copied()
        .filter(|name| every || (default && DEFAULT.contains(name)) || asked.iter().any(|arg| is(arg, name)))
        .collect()
}

/// A section's heading, as redis-server capitalises it.
fn title(section: &str) -> String {
    match section {
        "cpu" => "CPU".to_owned(),
        "commandstats" => "Commandstats".to_owned(),
        "errorstats" => "Errorstats".to_owned(),
        "latencystats" => "Latencystats".to_owned(),
        _ => {
            let mut title = section.to_owned();
            title[..1].make_ascii_uppercase();
            title
        }
    }
}

/// Commands counted by memcached's stats (reads, stores, touches, deletes, counters, flushes).
fn commands(number: &dyn Fn(&str) -> u64) -> u64 {
    let counted = ["cmd_get", "cmd_set", "cmd_touch", "cmd_flush", "delete_hits", "delete_misses"];
    let counters = ["incr_hits", "incr_misses", "decr_hits", "decr_misses"];
    counted.iter().chain(&counters).map(|name| number(name)).sum()
}

/// redis-server's `bytesToHuman`: B, K, M, G with two decimals.
fn human(bytes: u64) -> String {
    let value = bytes as f64;
    match bytes {
        0..=1023 => format!("{bytes}B"),
        1024..=1_048_575 => format!("{:.2}K", value / 1024.0),
        1_048_576..=1_073_741_823 => format!("{:.2}M", value / 1_048_576.0),
        _ => format!("{:.2}G", value / 1_073_741_824.0),
    }
}

#[cfg(test)]
mod tests {
    use super::{human, sections};

    #[test]
    fn sections_are_picked_as_redis_server_picks_them() {
        assert_eq!(sections(&[]).len(), 11);
        assert_eq!(sections(&[b"CPU"]), ["cpu"]);
        assert_eq!(sections(&[b"cpu", b"sentinel"]), ["cpu"]);
        assert_eq!(sections(&[b"cpu", b"all"]).len(), 13, "each section once");
        assert_eq!(sections(&[b"commandSTATS"]), ["commandstats"]);
        assert!(sections(&[b"default"]).iter().all(|name| *name != "commandstats"));
    }

    #[test]
    fn sizes_read_as_redis_server_writes_them() {
        assert_eq!(human(1000), "1000B");
        assert_eq!(human(64 << 20), "64.00M");
        assert_eq!(human(3 << 30), "3.00G");
    }
}
