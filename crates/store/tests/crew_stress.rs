//! CREW under stress: one owner thread wraps a small log fast (sets of varying sizes, in-place
//! updates, deletes, LRU moves) while reader threads check every value they get: it must carry
//! the key they asked for, a valid checksum (no torn bytes), and a version never older than one
//! they saw before (no overwritten value coming back).

use qs_store::{
    Access, Config, Eviction, Expiry, HugePages, KeyHash, Outcome, Partition, PartitionCommand,
    PartitionRequest, StoreMode,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const KEYS: u32 = 48;
const NOW: u32 = 1_700_000_000;

fn key(id: u32) -> Vec<u8> {
    format!("stress-key-{id}").into_bytes()
}

/// key id, version, payload, then a checksum of everything before it.
fn encode(id: u32, version: u32, payload_len: usize) -> Vec<u8> {
    let mut value = Vec::with_capacity(payload_len + 16);
    value.extend_from_slice(&id.to_le_bytes());
    value.extend_from_slice(&version.to_le_bytes());
    value.extend((0..payload_len).map(|i| (version as usize ^ i) as u8));
    let checksum = KeyHash::of(&value).0;
    value.extend_from_slice(&checksum.to_le_bytes());
    value
}

fn decode(value: &[u8]) -> (u32, u32) {
    assert!(value.len() >= 16, "value too short: {}", value.len());
    let (body, checksum) = value.split_at(value.len() - 8);
    assert_eq!(KeyHash::of(body).0.to_le_bytes(), checksum, "torn value");
    (u32::from_le_bytes(body[0..4].try_into().unwrap()), u32::from_le_bytes(body[4..8].try_into().unwrap()))
}

#[test]
fn crew_readers_never_see_torn_foreign_or_old_values() {
    let mut config = Config::new(32 << 10, 8);
    config.eviction = Eviction::Lru;
    let partition = stress(config);
    assert!(partition.stats().log_evictions > 1000, "the log did not wrap");
}

/// S3-FIFO: a deleted key comes back in the small ring, which wraps under the readers (a
/// rewrite stays in the ring its key is in, most of them the main one), and a key read there
/// moves to the main ring when the small ring's head reaches it: each slot is checked against
/// its own ring's head.
#[test]
fn crew_readers_never_see_torn_foreign_or_old_values_under_s3fifo() {
    let mut config = Config::new(1 << 20, 8);
    config.eviction = Eviction::S3Fifo;
    let partition = stress(config);
    let stats = partition.stats();
    assert!(stats.promotions > 0, "no key moved between the rings");
    assert!(
        stats.delete_hits > 1000,
        "{} deletes: too few keys came back in the small ring",
        stats.delete_hits
    );
    assert!(partition.log_bytes() == 1 << 20);
}

/// The index starts with one bucket for 48 keys and grows by splits while the readers read:
/// a key moved to a new bucket under a reader must still be found, whole.
#[test]
fn crew_readers_never_see_torn_foreign_or_old_values_while_the_index_grows() {
    let config = Config::new(32 << 10, 1);
    let partition = stress(config);
    assert!(partition.main_buckets() >= 4, "the index did not grow: {}", partition.main_buckets());
}

/// Store mode: blocks are freed, coalesced and reused for other keys, and two main buckets with
/// spare buckets chained to them hold the 48 keys, while the readers check the same properties.
#[test]
fn crew_readers_in_store_mode_never_see_torn_foreign_or_old_values() {
    let mut config = Config::store(16 << 10, 2);
    config.spare_buckets = 4;
    let partition = stress(config);
    let (spares_used, _) = partition.spare_buckets();
    assert!(spares_used >= 2, "48 keys in 30 main slots need chains");
    assert!(partition.stats().delete_hits > 1000, "blocks were not freed often enough");
}

fn stress(mut config: Config) -> Partition {
    let rounds: u32 = if cfg!(debug_assertions) { 150_000 } else { 1_500_000 };
    config.access = Access::Crew;
    config.huge_pages = HugePages::Off;
    let mut partition = Partition::new(config);
    let done = Arc::new(AtomicBool::new(false));
    let hits = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|seed| {
            let reader = partition.reader();
            let (done, hits) = (done.clone(), hits.clone());
            std::thread::spawn(move || {
                let mut newest = vec![0u32; KEYS as usize];
                let mut out = Vec::new();
                let mut id = seed;
                while !done.load(Ordering::Relaxed) {
                    id = (id * 7 + 3) % KEYS;
                    let k = key(id);
                    out.clear();
                    if let Outcome::Hit(hit) =
                        reader.get(KeyHash::of(&k), &k, qs_store::Now::from_secs(NOW), &mut out)
                    {
                        let (got_id, version) =
                            decode(&out[hit.value_start..hit.value_start + hit.value_len]);
                        assert_eq!(got_id, id, "another key's value");
                        assert!(version >= newest[id as usize], "an overwritten value came back");
                        newest[id as usize] = version;
                        hits.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let mut out = Vec::new();
    let mut state = 0x9E37_79B9u32;
    for version in 1..=rounds {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let id = state % KEYS;
        let k = key(id);
        let command_kind = state >> 28;
        let value = encode(id, version, (state >> 8) as usize % 300);
        let command = match command_kind {
            0 => PartitionCommand::Delete { cas: 0 },
            1..=3 => PartitionCommand::Get,
            _ => PartitionCommand::Store {
                mode: StoreMode::Set,
                value: &value,
                flags: 0,
                expiry: Expiry::NEVER,
            },
        };
        out.clear();
        partition.execute(&PartitionRequest::new(&k, command), qs_store::Now::from_secs(NOW), &mut out);
    }
    done.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.join().expect("a reader failed");
    }
    partition.check_invariants();
    assert!(hits.load(Ordering::Relaxed) > 1000, "readers hit too rarely to prove anything");
    partition
}
