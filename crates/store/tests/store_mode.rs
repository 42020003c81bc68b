//! Store mode end to end on one partition: filling to exhaustion, freeing and refilling with
//! other sizes (coalescing must make the freed space usable), clean refusals, and expired items
//! reclaimed by housekeeping.

mod common;
use common::*;
use qs_store::{Config, Expiry, HugePages, Outcome, Partition, PartitionCommand, StoreMode};

fn store_partition(arena_bytes: usize, buckets: usize) -> Partition {
    let mut config = Config::store(arena_bytes, buckets);
    config.huge_pages = HugePages::Off;
    Partition::new(config)
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A get without the per-step structure walk.
fn read(partition: &mut Partition, key: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match partition.execute(
        &qs_store::PartitionRequest::new(key, PartitionCommand::Get),
        qs_store::Now::from_secs(NOW),
        &mut out,
    ) {
        Outcome::Hit(hit) => Some(out[hit.value_start..hit.value_start + hit.value_len].to_vec()),
        _ => None,
    }
}

fn value_for(key: &[u8], len: usize) -> Vec<u8> {
    let mut value = key.to_vec();
    value.resize(len.max(key.len()), b'#');
    value
}

/// Sets `prefix`-numbered keys with sizes from `size` until `patience` refusals in a row;
/// returns the stored ones. Checks the structure only at the end (a walk per step would make
/// this quadratic).
fn fill_until(
    partition: &mut Partition,
    rng: &mut Rng,
    prefix: &str,
    patience: usize,
    size: impl Fn(&mut Rng) -> usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut stored = Vec::new();
    let mut refusals = 0;
    for n in 0.. {
        let key = format!("{prefix}:{n}").into_bytes();
        let value = value_for(&key, size(rng));
        let command =
            PartitionCommand::Store { mode: StoreMode::Set, value: &value, flags: 0, expiry: Expiry::NEVER };
        match partition.execute(
            &qs_store::PartitionRequest::new(&key, command),
            qs_store::Now::from_secs(NOW),
            &mut Vec::new(),
        ) {
            Outcome::Stored { .. } => {
                stored.push((key, value));
                refusals = 0;
            }
            Outcome::OutOfMemory => {
                assert_eq!(get(partition, &key, NOW), None, "a refused new key must not appear");
                refusals += 1;
                if refusals == patience {
                    partition.check_invariants();
                    return stored;
                }
            }
            other => panic!("set answered {other:?}"),
        }
    }
    unreachable!()
}

fn fill(
    partition: &mut Partition,
    rng: &mut Rng,
    prefix: &str,
    size: impl Fn(&mut Rng) -> usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    fill_until(partition, rng, prefix, 1, size)
}

#[test]
fn fill_free_half_and_refill_reuses_the_space() {
    let mut partition = store_partition(1 << 20, 512);
    let capacity = partition.arena_stats().unwrap().arena_bytes;
    let mut rng = Rng(0x5EED);
    let first = fill(&mut partition, &mut rng, "a", |rng| 16 + rng.below(1009) as usize);
    let full = partition.arena_stats().unwrap();
    assert!(full.used_bytes as f64 > 0.97 * capacity as f64, "filled only {full:?}");
    assert_eq!(partition.stats().refused, 1);
    for (key, value) in &first {
        assert_eq!(read(&mut partition, key).as_deref(), Some(&value[..]));
    }

    // Delete every other key at random positions: the holes are of every size.
    let mut kept = Vec::new();
    for (key, value) in first {
        if rng.below(2) == 0 {
            let delete = qs_store::PartitionRequest::new(&key, PartitionCommand::Delete { cas: 0 });
            assert_eq!(
                partition.execute(&delete, qs_store::Now::from_secs(NOW), &mut Vec::new()),
                Outcome::Deleted
            );
        } else {
            kept.push((key, value));
        }
    }
    let holes = partition.arena_stats().unwrap();
    assert!(holes.free_bytes as f64 > 0.4 * capacity as f64, "{holes:?}");

    // Refill with a different size mix (small and large values share the freed space) until
    // 100 writes in a row are refused.
    let second = fill_until(&mut partition, &mut rng, "b", 100, |rng| {
        if rng.below(4) == 0 {
            1024 + rng.below(1024) as usize
        } else {
            8 + rng.below(100) as usize
        }
    });
    assert!(!second.is_empty());
    let refilled = partition.arena_stats().unwrap();
    assert!(refilled.used_bytes as f64 > 0.95 * capacity as f64, "freed space was not reused: {refilled:?}");
    for (key, value) in kept.iter().chain(&second) {
        assert_eq!(read(&mut partition, key).as_deref(), Some(&value[..]), "lost {key:?}");
    }
    assert_eq!(partition.stats().log_evictions + partition.stats().index_evictions, 0);

    // Deleting everything coalesces the arena back into one block.
    for (key, _) in kept.iter().chain(&second) {
        partition.execute(
            &qs_store::PartitionRequest::new(key, PartitionCommand::Delete { cas: 0 }),
            qs_store::Now::from_secs(NOW),
            &mut Vec::new(),
        );
    }
    partition.check_invariants();
    let empty = partition.arena_stats().unwrap();
    assert_eq!((empty.free_bytes, empty.largest_free, empty.fragmentation), (capacity, capacity, 0.0));
    assert_eq!(partition.spare_buckets().0, 0, "emptied chains give their spare buckets back");
}

#[test]
fn a_refused_overwrite_keeps_the_old_value() {
    let mut partition = store_partition(64 << 10, 64);
    let mut rng = Rng(7);
    let stored = fill(&mut partition, &mut rng, "k", |_| 200);
    let (key, old) = &stored[0];
    let bigger = value_for(key, 4000);
    assert_eq!(store(&mut partition, StoreMode::Set, key, &bigger, NOW), Outcome::OutOfMemory);
    assert_eq!(get(&mut partition, key, NOW).as_deref(), Some(&old[..]));
    // append, incr on a full arena: refused the same way, value unchanged.
    assert_eq!(store(&mut partition, StoreMode::Append, key, &bigger, NOW), Outcome::OutOfMemory);
    assert_eq!(get(&mut partition, key, NOW).as_deref(), Some(&old[..]));
    // A smaller value fits the old block: updated in place even when the arena is full.
    let smaller = value_for(key, 100);
    assert!(matches!(store(&mut partition, StoreMode::Set, key, &smaller, NOW), Outcome::Stored { .. }));
    assert_eq!(get(&mut partition, key, NOW).as_deref(), Some(&smaller[..]));
    assert!(partition.stats().refused >= 3);
}

#[test]
fn touch_never_needs_memory() {
    let mut partition = store_partition(64 << 10, 64);
    let mut rng = Rng(9);
    let stored = fill(&mut partition, &mut rng, "t", |_| 100);
    for (key, _) in &stored {
        let expiry = Expiry::from_exptime(100, qs_store::Now::from_secs(NOW));
        assert_eq!(run(&mut partition, key, PartitionCommand::Touch { expiry }, NOW).0, Outcome::Touched);
    }
}

#[test]
fn expired_items_are_reclaimed_and_their_space_reused() {
    let mut partition = store_partition(256 << 10, 128);
    let mut filled = 0;
    for n in 0.. {
        let key = format!("e:{n}").into_bytes();
        let value = value_for(&key, 500);
        let expiry = Expiry::from_exptime(2, qs_store::Now::from_secs(NOW));
        let command = PartitionCommand::Store { mode: StoreMode::Set, value: &value, flags: 0, expiry };
        match run(&mut partition, &key, command, NOW).0 {
            Outcome::Stored { .. } => filled += 1,
            Outcome::OutOfMemory => break,
            other => panic!("{other:?}"),
        }
    }
    assert!(filled > 400);
    // Three seconds later every item has expired; housekeeping frees them without reads.
    let later = NOW + 3;
    partition.execute(
        &qs_store::PartitionRequest::new(b"probe", PartitionCommand::Get),
        qs_store::Now::from_secs(later),
        &mut Vec::new(),
    );
    partition.scan_buckets(128);
    partition.check_invariants();
    let stats = partition.arena_stats().unwrap();
    assert_eq!(stats.used_bytes, 0, "expired items still hold memory: {stats:?}");
    assert_eq!(partition.stats().reclaimed, filled);
    assert_eq!(partition.stats().items, 0);
    let key = b"after".to_vec();
    let value = value_for(&key, 500);
    assert!(matches!(store(&mut partition, StoreMode::Set, &key, &value, later), Outcome::Stored { .. }));
}
