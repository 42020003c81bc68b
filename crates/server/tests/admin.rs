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
        let want = stat_names(&mut memcached.connect(), "");
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
        "cache_memlimit 1 2 3\r\n",
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
