//! Store mode (`-M`) end to end, side by side with memcached -M: fill until the first refusal,
//! then check that the refusal is memcached's, nothing stored was evicted, a refused set drops
//! the old value as memcached does, and freed space takes new items.

mod common;
use common::*;

/// Deterministic value sizes between 16 and 1024 bytes.
fn size_of(n: u64) -> usize {
    let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xDEAD_BEEF;
    x ^= x >> 29;
    16 + (x % 1009) as usize
}

fn value(n: u64) -> Vec<u8> {
    let mut value = format!("v{n}:").into_bytes();
    value.resize(size_of(n), b'a' + (n % 26) as u8);
    value
}

fn set(client: &mut Client, key: &str, value: &[u8]) -> Vec<u8> {
    let mut request = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
    request.extend_from_slice(value);
    request.extend_from_slice(b"\r\n");
    client.call(&request)
}

fn get(client: &mut Client, key: &str) -> Option<Vec<u8>> {
    let reply = client.call(format!("get {key}\r\n").as_bytes());
    if reply == b"END\r\n" {
        return None;
    }
    let header_end = reply.windows(2).position(|w| w == b"\r\n").expect("a VALUE line");
    Some(reply[header_end + 2..reply.len() - 7].to_vec())
}

/// Sets keys `prefix`0, 1, ... until 50 refusals in a row (memory exhausted for every size);
/// returns the keys stored and the first refusal line.
fn fill(client: &mut Client, prefix: &str) -> (Vec<u64>, Vec<u8>) {
    let (mut stored, mut first_refusal, mut in_a_row) = (Vec::new(), None, 0);
    for n in 0..1_000_000u64 {
        let reply = set(client, &format!("{prefix}{n}"), &value(n));
        if reply == b"STORED\r\n" {
            stored.push(n);
            in_a_row = 0;
            continue;
        }
        first_refusal.get_or_insert(reply);
        in_a_row += 1;
        if in_a_row == 50 {
            return (stored, first_refusal.unwrap_or_default());
        }
    }
    panic!("never refused");
}

fn check_server(server: &ServerProcess) -> Vec<u64> {
    let mut client = server.connect();
    let (stored, refusal) = fill(&mut client, "k");
    assert_eq!(
        String::from_utf8_lossy(&refusal),
        "SERVER_ERROR out of memory storing object\r\n",
        "{}: the refusal",
        server.name
    );
    assert!(stored.len() > 1000, "{}: only {} items in 8 MiB", server.name, stored.len());
    for &n in &stored {
        assert_eq!(get(&mut client, &format!("k{n}")), Some(value(n)), "{}: k{n} lost", server.name);
    }
    assert_eq!(stat(&mut client, "evictions"), 0, "{}", server.name);
    assert_eq!(stat(&mut client, "curr_items"), stored.len() as u64, "{}", server.name);
    stored
}

#[test]
fn store_mode_refuses_like_memcached_and_loses_nothing() {
    let memcached = ServerProcess::memcached(&["-M", "-m", "8", "-t", "1"]);
    let memcached_items = check_server(&memcached).len();
    let quicksilver = ServerProcess::quicksilver(&["-M", "-m", "8", "-t", "1"]);
    let stored = check_server(&quicksilver);
    eprintln!("items stored in -m 8: quicksilver {}, memcached {memcached_items}", stored.len());
    let mut client = quicksilver.connect();

    // A set that cannot be stored drops the key's old value (memcached's rule for set; memcached
    // itself cannot be shown here: it gives a size class its first page beyond the limit).
    let (first, huge) = (stored[0], vec![b'x'; 900 << 10]);
    assert_eq!(
        set(&mut client, &format!("k{first}"), &huge),
        b"SERVER_ERROR out of memory storing object\r\n"
    );
    assert_eq!(get(&mut client, &format!("k{first}")), None, "the old value outlived a refused set");

    // Freed space takes new items: delete every other key, then new ones fit.
    let (gone, kept): (Vec<u64>, Vec<u64>) = stored[1..].iter().partition(|&&n| n % 2 == 0);
    for n in &gone {
        assert_eq!(client.call(format!("delete k{n}\r\n").as_bytes()), b"DELETED\r\n");
    }
    // `stats arena` shows the freed space by block size, and it sums to the free total.
    let arena = stats(&mut client, "arena");
    let free: u64 = arena
        .iter()
        .filter(|(k, _)| k.ends_with(":free_bytes"))
        .map(|(_, v)| v.parse::<u64>().unwrap())
        .sum();
    let groups = arena.iter().filter(|(k, _)| k.ends_with(":free_blocks")).count();
    assert!(groups > 1, "freed blocks of many sizes, but {groups} groups: {arena:?}");
    assert_eq!(free, stat(&mut client, "store_arena_free_bytes"), "{arena:?}");
    let (refilled, _) = fill(&mut client, "r");
    assert!(refilled.len() > stored.len() / 4, "only {} new items after freeing half", refilled.len());
    for n in kept {
        assert_eq!(get(&mut client, &format!("k{n}")), Some(value(n)), "k{n} lost while refilling");
    }
    let stats = stats(&mut client, "");
    let figure = |name: &str| stats.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    assert_eq!(figure("evictions").as_deref(), Some("0"));
    assert!(figure("store_arena_bytes").is_some() && figure("store_refused_writes").is_some());
    assert_eq!(quicksilver.terminate().code(), Some(0));
}

#[test]
fn ms_refusals_use_memcacheds_string() {
    {
        let server = ServerProcess::quicksilver(&["-M", "-m", "8", "-t", "1"]);
        let mut client = server.connect();
        let (stored, _) = fill(&mut client, "k");
        assert!(stored.contains(&1) && stored.contains(&2));
        // ms of a value that cannot fit: memcached's string, and the old value is gone.
        let huge = vec![b'y'; 900 << 10];
        let mut request = format!("ms k1 {}\r\n", huge.len()).into_bytes();
        request.extend_from_slice(&huge);
        request.extend_from_slice(b"\r\n");
        assert_eq!(
            String::from_utf8_lossy(&client.call(&request)),
            "SERVER_ERROR out of memory storing object\r\n",
            "{}",
            server.name
        );
        assert_eq!(get(&mut client, "k1"), None, "{}", server.name);
        // touch and get need no memory.
        assert_eq!(client.call(b"touch k2 100\r\n"), b"TOUCHED\r\n", "{}", server.name);
    }
}
