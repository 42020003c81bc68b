//! memcached's admin commands against real memcached: `cache_memlimit`, `slabs reassign`,
//! `stats cachedump`, `stats sizes`, and the names and order of `stats` itself (tools and
//! memcached's t/stats.t count them).

mod common;

use common::{set, stat, stats, Client, ServerProcess};

fn call(client: &mut Client, line: &str) -> String {
    String::from_utf8_lossy(&client.call(line.as_bytes())).into_owned()
}

/// The names `stats` lists, in order.
fn stat_names(client: &mut Client, group: &str) -> Vec<String> {
    stats(client, group).into_iter().map(|(name, _)| name).collect()
}

#[test]
fn stats_lists_memcacheds_names_in_its_order() {
    for args in [
        &[][..],
        &["-o", "no_lru_crawler,no_lru_maintainer"],
        &["-o", "no_modern"],
        &["-o", "idle_timeout=10"],
    ] {
        let memcached = ServerProcess::memcached(args);
        let quicksilver = ServerProcess::quicksilver(args);
        let want = common::stat_names_of_1_6_45(stat_names(&mut memcached.connect(), ""));
        let got = stat_names(&mut quicksilver.connect(), "");
        assert_eq!(got, want, "{args:?}");
    }
}

#[test]
fn admin_command_replies_match_memcached() {
    let memcached = ServerProcess::memcached(&["-m", "64"]);
    let quicksilver = ServerProcess::quicksilver(&["-m", "64", "-t", "2"]);
    let (mut m, mut q) = (memcached.connect(), quicksilver.connect());
    for line in [
        "slabs reassign 1 2\r\n",
        "slabs reassign 0 1\r\n",
        "slabs reassign 1 1\r\n",
        "slabs reassign 1 99\r\n",
        "slabs reassign -1 1\r\n",
        "slabs reassign x 1\r\n",
        "slabs reassign 1\r\n",
        "cache_memlimit\r\n",
        "cache_memlimit x\r\n",
        "cache_memlimit 4\r\n",
        "cache_memlimit 2000000000\r\n",
        "cache_memlimit 32 noreply\r\n",
        "cache_memlimit 48\r\n",
        "stats cachedump\r\n",
        "stats cachedump 1\r\n",
        "stats cachedump x 1\r\n",
        "stats cachedump 64 1\r\n",
        "stats cachedump 63 1\r\n",
        "stats sizes\r\n",
    ] {
        let want = call(&mut m, line);
        let got = call(&mut q, line);
        assert_eq!(got, want, "{line:?}");
    }
    // memcached 1.6.40 ignores tokens past the ones a command reads (1.6.45's answer; Debian's
    // 1.6.18 answers ERROR).
    assert_eq!(
        call(&mut q, "cache_memlimit 1 2 3\r\n"),
        "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n"
    );
    let settings = |client: &mut Client| {
        stats(client, "settings").into_iter().find(|(name, _)| name == "maxbytes").map(|(_, v)| v)
    };
    assert_eq!(settings(&mut q), settings(&mut m), "maxbytes after cache_memlimit 48");
    assert_eq!(stat(&mut q, "limit_maxbytes"), 48 << 20);
}

#[test]
fn cachedump_lists_items_of_every_worker_and_is_refused_under_x() {
    let server = ServerProcess::quicksilver(&["-t", "2"]);
    let mut client = server.connect();
    for n in 0..40 {
        set(&mut client, &format!("key{n}"), b"value");
    }
    let dump = call(&mut client, "stats cachedump 1 0\r\n");
    for n in 0..40 {
        assert!(dump.contains(&format!("ITEM key{n} [5 b; 0 s]\r\n")), "key{n} missing: {dump}");
    }
    assert!(dump.ends_with("END\r\n"));
    let limited = call(&mut client, "stats cachedump 1 7\r\n");
    assert_eq!(limited.matches("ITEM ").count(), 7, "{limited}");
    assert_eq!(call(&mut client, "stats cachedump 2 0\r\n"), "END\r\n");
    let refused = ServerProcess::quicksilver(&["-X"]);
    assert_eq!(
        call(&mut refused.connect(), "stats cachedump 1 0\r\n"),
        "CLIENT_ERROR stats cachedump not allowed\r\n"
    );
}

/// Shrinking evicts (and says so in the counters), the rest stays readable, and the server
/// grows back and fills without trouble.
#[test]
fn cache_memlimit_shrinks_and_grows_the_item_memory() {
    let server = ServerProcess::quicksilver(&["-m", "64", "-t", "2"]);
    let mut client = server.connect();
    let value = vec![b'v'; 1000];
    for n in 0..40_000 {
        client.send(format!("set key{n} 0 0 {} noreply\r\n", value.len()).as_bytes());
        client.send(&value);
        client.send(b"\r\n");
    }
    assert_eq!(call(&mut client, ""), "", "every noreply set read");
    let before = stat(&mut client, "curr_items");
    assert!(before > 30_000, "{before}");
    assert_eq!(call(&mut client, "cache_memlimit 16\r\n"), "OK\r\n");
    assert_eq!(stat(&mut client, "limit_maxbytes"), 16 << 20);
    let after = stat(&mut client, "curr_items");
    assert!(after < 17_000 && after > 5_000, "{before} -> {after}");
    assert!(stat(&mut client, "evictions") >= before - after);
    assert!(stat(&mut client, "bytes") <= 16 << 20);
    // What is left is intact: every key either answers its value or is gone.
    let mut found = 0;
    for n in (0..40_000).step_by(97) {
        let reply = client.call(format!("get key{n}\r\n").as_bytes());
        if reply != b"END\r\n" {
            assert!(reply.ends_with(&[&value[..], b"\r\nEND\r\n"].concat()), "key{n}");
            found += 1;
        }
    }
    assert!(found > 0);
    assert_eq!(call(&mut client, "cache_memlimit 64\r\n"), "OK\r\n");
    for n in 0..40_000 {
        client.send(format!("set again{n} 0 0 {} noreply\r\n", value.len()).as_bytes());
        client.send(&value);
        client.send(b"\r\n");
    }
    assert_eq!(call(&mut client, ""), "", "every noreply set read");
    assert!(stat(&mut client, "curr_items") > 30_000);
    let slabs = stats(&mut client, "slabs");
    let malloced = slabs.iter().find(|(name, _)| name == "total_malloced").expect("total_malloced");
    assert_eq!(malloced.1, (64u64 << 20).to_string());
}

#[test]
fn cache_memlimit_is_refused_in_store_mode_and_past_memory_max() {
    let store = ServerProcess::quicksilver(&["-M", "-m", "16"]);
    assert_eq!(
        call(&mut store.connect(), "cache_memlimit 32\r\n"),
        "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n"
    );
    // Plain pages: hugetlb pages, where a machine reserves them, leave no room to grow into.
    let capped = ServerProcess::quicksilver(&["-m", "16", "--memory-max", "32", "--huge-pages", "off"]);
    let mut client = capped.connect();
    assert_eq!(call(&mut client, "cache_memlimit 32\r\n"), "OK\r\n");
    assert_eq!(
        call(&mut client, "cache_memlimit 33\r\n"),
        "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n"
    );
}

/// `stats hotkeys`: a stream with known counts over connections served by both workers, the
/// merged answer held to the exact counts and their bounds.
#[test]
fn stats_hotkeys_finds_the_most_frequent_keys_within_their_bounds() {
    let quicksilver = ServerProcess::quicksilver(&["-t", "2"]);
    // Key k is read 400 / k times (k = 1..=200): a zipf-like stream whose top ten are keys
    // 1..=10, spread over four connections (which the two workers share) and both workers'
    // partitions.
    let mut clients: Vec<Client> = (0..4).map(|_| quicksilver.connect()).collect();
    // Sampled until every request is asked for; each worker picks the switch up at its next
    // loop turn.
    assert_eq!(call(&mut clients[0], "stats hotkeys\r\n"), "STAT hotkeys sampled 1/16\r\nEND\r\n");
    assert_eq!(call(&mut clients[0], "stats hotkeys on\r\n"), "OK\r\n");
    std::thread::sleep(std::time::Duration::from_millis(100));
    set(&mut clients[0], "hot1", b"v");
    let mut exact = std::collections::HashMap::new();
    let mut batch = vec![String::new(); 4];
    for k in 1..=200u64 {
        for i in 0..400 / k {
            batch[(i as usize + k as usize) % 4].push_str(&format!("mg hot{k} v\r\n"));
            *exact.entry(format!("hot{k}")).or_insert(0u64) += 1;
        }
    }
    *exact.get_mut("hot1").unwrap() += 1; // the set
    for (client, requests) in clients.iter_mut().zip(&batch) {
        client.call(requests.as_bytes());
    }
    // Other workers publish within 50 ms (hotkeys::PUBLISH_EVERY).
    std::thread::sleep(std::time::Duration::from_millis(300));
    let answer = call(&mut clients[0], "stats hotkeys 10\r\n");
    let lines: Vec<&str> = answer.lines().collect();
    assert_eq!(lines.len(), 11, "{answer}");
    assert_eq!(lines[10], "END");
    for (rank, line) in lines[..10].iter().enumerate() {
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields[1], format!("hotkey_{}", rank + 1), "{line}");
        let key = fields[2];
        let count: u64 = fields[3].strip_prefix("count=").unwrap().parse().unwrap();
        let error: u64 = fields[4].strip_prefix("error=").unwrap().parse().unwrap();
        let truth = exact[key];
        assert!(count >= truth && count - error <= truth, "{line}: exact {truth}");
        // The top ten are keys 1..=10 (400, 200, 133, 100, 80, 66, 57, 50, 44, 40 reads).
        let k: u64 = key.strip_prefix("hot").unwrap().parse().unwrap();
        assert!(k <= 10, "{line}");
    }
    let top3 = call(&mut clients[1], "stats hotkeys 3\r\n");
    assert!(top3.starts_with("STAT hotkey_1 hot1 count=") && top3.lines().count() == 4, "{top3}");
    assert_eq!(
        call(&mut clients[1], "stats hotkeys nine\r\n"),
        "CLIENT_ERROR usage: stats hotkeys [N|on|off|sample|reset]\r\n"
    );
    assert_eq!(call(&mut clients[1], "stats hotkeys off\r\n"), "OK\r\n");
    assert_eq!(call(&mut clients[1], "stats hotkeys reset\r\n"), "RESET\r\n");
    clients[2].call(b"mg hot1 v\r\n");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(call(&mut clients[3], "stats hotkeys\r\n"), "STAT hotkeys off\r\nEND\r\n");
    assert_eq!(call(&mut clients[1], "stats hotkeys on\r\n"), "OK\r\n");
    clients[2].call(b"mg hot7 v\r\nmg hot7 v\r\n");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(call(&mut clients[3], "stats hotkeys\r\n"), "STAT hotkey_1 hot7 count=2 error=0\r\nEND\r\n");

    // Sampled (the default): 1 request in 16 counted and scaled up. Two keys take 4,800 and
    // 2,400 of 9,200 requests, 2,000 others one each: the two lead, with counts near theirs.
    assert_eq!(call(&mut clients[1], "stats hotkeys sample\r\n"), "OK\r\n");
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut batch = vec![String::new(); 4];
    for i in 0..9_200usize {
        let key = match i % 23 {
            0..=11 => "heavy".to_string(),
            12..=17 => "warm".to_string(),
            _ => format!("cold{i}"),
        };
        batch[i % 4].push_str(&format!("mg {key} v\r\n"));
    }
    for (client, requests) in clients.iter_mut().zip(&batch) {
        client.call(requests.as_bytes());
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let answer = call(&mut clients[0], "stats hotkeys 2\r\n");
    let lines: Vec<&str> = answer.lines().collect();
    assert_eq!(lines.len(), 4, "{answer}");
    assert_eq!(lines[0], "STAT hotkeys sampled 1/16");
    for (line, (key, truth)) in lines[1..3].iter().zip([("heavy", 4_800.0), ("warm", 2_400.0)]) {
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields[2], key, "{answer}");
        let count: f64 = fields[3].strip_prefix("count=").unwrap().parse().unwrap();
        // 300 and 150 counted on average: within 30% is over three standard deviations.
        assert!((count - truth).abs() < 0.3 * truth, "{line}: {truth} requests");
    }
}

/// `stats mrc`: a zipf stream through a running server (gets, the client's set after each
/// miss), its estimate held to the exact LRU curve of the same requests in the order the server
/// ran them, computed here by stack distance.
#[test]
fn stats_mrc_estimates_the_exact_lru_curve() {
    use qs_store::mrc::StackDistances;
    let quicksilver = ServerProcess::quicksilver(&["-t", "2", "-m", "8", "-o", "mrc_sample=2"]);
    let mut client = quicksilver.connect();
    assert_eq!(call(&mut client, "stats mrc reset\r\n"), "RESET\r\n");
    // 32,768 keys of 1,000-byte values (1,040 bytes each in the log: 32 MiB in all, four times
    // the item memory), zipf 0.99 by inverse transform from a fixed seed.
    let (keys, requests, value) = (32_768usize, 200_000usize, vec![b'v'; 1000]);
    let weights: Vec<f64> = (1..=keys).map(|rank| (rank as f64).powf(-0.99)).collect();
    let total: f64 = weights.iter().sum();
    let cumulative: Vec<f64> =
        weights.iter().scan(0.0, |sum, w| Some(*sum + w / total).inspect(|s| *sum = *s)).collect();
    let mut state = 42u64;
    let mut draw = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let u = (state >> 11) as f64 / (1u64 << 53) as f64;
        cumulative.partition_point(|&c| c < u).min(keys - 1)
    };
    let item_bytes = |key: &str| qs_store::item::item_bytes(key.len(), value.len(), 0) as u64;
    let keyhash = |key: &str| qs_store::KeyHash::of(key.as_bytes()).0;
    let mut exact = StackDistances::new();
    let mut distances = Vec::new();
    for _ in 0..requests / 100 {
        let batch: Vec<String> = (0..100).map(|_| format!("k{}", draw())).collect();
        let gets: String = batch.iter().map(|key| format!("mg {key}\r\n")).collect();
        let replies = call(&mut client, &gets);
        let replies: Vec<&str> = replies.split_terminator("\r\n").collect();
        assert_eq!(replies.len(), batch.len(), "{replies:?}");
        let mut fills = Vec::new();
        for (key, reply) in batch.iter().zip(&replies) {
            distances.push(exact.access(keyhash(key), None));
            match *reply {
                "HD" => {}
                "EN" => {
                    fills.extend_from_slice(format!("ms {key} {} q\r\n", value.len()).as_bytes());
                    fills.extend_from_slice(&value);
                    fills.extend_from_slice(b"\r\n");
                    exact.access(keyhash(key), Some(item_bytes(key)));
                }
                other => panic!("mg {key}: {other}"),
            }
        }
        assert_eq!(client.call(&fills), b"");
    }
    let answer = call(&mut client, "stats mrc\r\n");
    let stats: std::collections::HashMap<&str, &str> =
        answer.lines().filter_map(|line| line.strip_prefix("STAT ")?.split_once(' ')).collect();
    assert_eq!(stats["mrc"], "on", "{answer}");
    assert_eq!(stats["mrc_gets"], requests.to_string(), "{answer}");
    let memory: u64 = stats["mrc_item_memory"].parse().unwrap();
    assert_eq!(memory, 8 << 20);
    for multiple in ["0.25", "0.5", "1", "2", "4", "8"] {
        let size = (memory as f64 * multiple.parse::<f64>().unwrap()) as u64;
        let want = distances.iter().filter(|d| d.is_some_and(|d| d <= size)).count() as f64 / requests as f64;
        let got: f64 = stats[format!("mrc_hit_ratio_{multiple}x").as_str()].parse().unwrap();
        assert!((want - got).abs() < 0.02, "{multiple}x: exact {want:.4}, estimate {got:.4}\n{answer}");
    }
    assert_eq!(call(&mut client, "stats mrc off\r\n"), "OK\r\n");
    assert!(call(&mut client, "stats mrc\r\n").starts_with("STAT mrc off\r\n"));
    assert_eq!(call(&mut client, "stats mrc x\r\n"), "CLIENT_ERROR usage: stats mrc [on|off|reset]\r\n");
}

#[test]
fn stats_slabs_counts_every_hit_as_the_general_list_does() {
    // Two workers: a get served by a worker that does not own the key (an optimistic read of
    // another partition) is a hit in `stats slabs` too, as in memcached, where dashboards
    // sum the classes' get_hits.
    let server = ServerProcess::quicksilver(&["-t", "2"]);
    let mut clients: Vec<Client> = (0..4).map(|_| server.connect()).collect();
    for n in 0..40 {
        set(&mut clients[0], &format!("k{n}"), b"v");
    }
    for client in &mut clients {
        for n in 0..40 {
            assert!(call(client, &format!("get k{n}\r\n")).starts_with("VALUE"));
        }
    }
    let general = stat(&mut clients[0], "get_hits");
    assert_eq!(general, 160);
    let slabs = stats(&mut clients[0], "slabs");
    let hits: u64 = slabs
        .iter()
        .filter(|(name, _)| name.ends_with(":get_hits"))
        .map(|(_, v)| v.parse::<u64>().unwrap())
        .sum();
    assert_eq!(hits, general);
}

#[test]
fn the_default_eviction_keeps_a_key_that_is_read_and_fifo_does_not() {
    // 2 MiB of item memory, 6 MiB of other values written through it: the key read once per
    // half lap stays under S3-FIFO (the default: `stats settings` says so) and clock, not under
    // FIFO.
    for (args, kept) in [
        (&["-m", "2", "-t", "1"][..], Some("s3fifo")),
        (&["-m", "2", "-t", "1", "--eviction", "clock"], Some("clock")),
        (&["-m", "2", "-t", "1", "--eviction", "fifo"], None),
    ] {
        let server = ServerProcess::quicksilver(args);
        let mut client = server.connect();
        let policy = stats(&mut client, "settings").into_iter().find(|(name, _)| name == "eviction_policy");
        let want = kept.unwrap_or("fifo");
        assert_eq!(policy.map(|(_, value)| value).as_deref(), Some(want));
        set(&mut client, "hot", b"still here");
        let filler = vec![b'x'; 1000];
        let mut lost_at = None;
        for i in 0..6000 {
            set(&mut client, &format!("filler:{i}"), &filler);
            if i % 500 == 0 && !call(&mut client, "get hot\r\n").contains("still here") {
                lost_at.get_or_insert(i);
            }
        }
        assert_eq!(lost_at.is_none(), kept.is_some(), "{args:?}: hot lost at {lost_at:?}");
        if kept.is_some() {
            assert!(stat(&mut client, "moves_within_lru") > 0, "clock's keeps are counted");
        }
    }
}

#[test]
fn a_scan_does_not_flush_the_hot_set_under_the_default_eviction() {
    // A hot set of 500 keys (250 KB) read whole every quarter lap of -m 2, while a scan of 6,000
    // cold keys of 1,000 bytes, each missed once and filled (look-aside), goes through three
    // laps: S3-FIFO (whose small ring the scan's keys pass through) and clock keep the hot set;
    // FIFO, which reads do not touch, loses it.
    for (args, default) in [
        (&["-m", "2", "-t", "1"][..], Some("s3fifo")),
        (&["-m", "2", "-t", "1", "--eviction", "clock"], Some("clock")),
        (&["-m", "2", "-t", "1", "--eviction", "fifo"], None),
    ] {
        let server = ServerProcess::quicksilver(args);
        let mut client = server.connect();
        let hot_get =
            format!("get {}\r\n", (0..500).map(|i| format!("hot:{i}")).collect::<Vec<_>>().join(" "));
        let hot_hits = |client: &mut Client| call(client, &hot_get).matches("VALUE ").count();
        let mut batch = Vec::new();
        for i in 0..500 {
            batch.extend_from_slice(
                format!("set hot:{i} 0 0 500 noreply\r\n{}\r\n", "h".repeat(500)).as_bytes(),
            );
        }
        client.send(&batch);
        assert_eq!(hot_hits(&mut client), 500);
        let cold = "c".repeat(1000);
        for i in 0..6000 {
            if i % 500 == 0 {
                hot_hits(&mut client);
            }
            assert_eq!(call(&mut client, &format!("get scan:{i}\r\n")), "END\r\n");
            client.send(format!("set scan:{i} 0 0 1000 noreply\r\n{cold}\r\n").as_bytes());
        }
        let kept = hot_hits(&mut client);
        if let Some(policy) = default {
            // A write keeps at most 64 items: a run of read items at the head (this hot set,
            // written together) loses one in 65 each lap.
            assert!(kept >= 475, "the scan flushed {} of the hot set under {policy}", 500 - kept);
        } else {
            assert!(kept < 100, "FIFO kept {kept} of the hot set: the scan is too short to test anything");
        }
    }
}

#[test]
fn the_index_grows_so_small_items_fill_the_memory() {
    // 8 MiB of 56-byte items (8-byte keys, 32-byte values): the index starts sized for 128-byte
    // items and grows as memcached's hash table does; `-o no_hashexpand` keeps it at its first
    // size, where it drops entries before the log is full, unless `-o hashpower=17` (2^17
    // slots) sizes it for them.
    let fill = |args: &[&str]| {
        let server = ServerProcess::quicksilver(args);
        let mut client = server.connect();
        let level_before = stat(&mut client, "hash_power_level");
        let mut batch = Vec::new();
        for i in 0..200_000 {
            batch.extend_from_slice(
                format!("set k:{i:06} 0 0 32 noreply\r\n{}\r\n", "v".repeat(32)).as_bytes(),
            );
            if batch.len() > 1 << 16 {
                client.send(&batch);
                batch.clear();
            }
        }
        batch.extend_from_slice(b"mn\r\n");
        client.send(&batch);
        assert_eq!(client.read_until(b"MN\r\n"), b"MN\r\n");
        let live = stat(&mut client, "bytes") as f64 / stat(&mut client, "limit_maxbytes") as f64;
        (live, level_before, stat(&mut client, "hash_power_level"))
    };
    let (grown, before, after) = fill(&["-m", "8", "-t", "1"]);
    assert!(grown >= 0.97, "the growing index holds {grown:.3} of the memory in items");
    assert!(after > before, "hash_power_level {before} -> {after}: the index did not grow");
    let (fixed, before, after) = fill(&["-m", "8", "-t", "1", "-o", "no_hashexpand"]);
    assert!(fixed < 0.95, "the fixed index holds {fixed:.3} of the memory in items");
    assert_eq!(before, after, "-o no_hashexpand grew the index");
    let (sized, _, _) = fill(&["-m", "8", "-t", "1", "-o", "no_hashexpand,hashpower=17"]);
    assert!(sized >= 0.97, "-o hashpower=17 holds {sized:.3} of the memory in items");
}
