//! memcached's `cache_memlimit` on a partition: the log grows into its reserved room without
//! evicting, and shrinking evicts exactly the items past the new end (wherever the head and
//! tail are), gives that memory back, and leaves every other item readable.

mod common;
use common::*;
use qs_store::{Config, Eviction, HugePages, Partition};

const VALUE: usize = 1000;

fn partition(log_bytes: usize, room: usize) -> Partition {
    let mut config = Config::new(log_bytes, 1024);
    config.log_room_bytes = room;
    config.huge_pages = HugePages::Off;
    config.eviction = Eviction::Fifo;
    config.item_bytes_max = 64 << 10;
    Partition::new(config)
}

fn key(n: usize) -> Vec<u8> {
    format!("key:{n}").into_bytes()
}

fn value(n: usize) -> Vec<u8> {
    let mut value = format!("{n}:").into_bytes();
    value.resize(VALUE, b'v');
    value
}

/// Every key in `keys` reads back its own value or is gone; returns how many are there.
fn readable(partition: &mut Partition, keys: std::ops::Range<usize>) -> usize {
    let mut found = 0;
    for n in keys {
        if let Some(got) = get(partition, &key(n), NOW) {
            assert_eq!(got, value(n), "key {n}");
            found += 1;
        }
    }
    found
}

#[test]
fn growing_stores_more_without_evicting() {
    let mut p = partition(256 << 10, 1 << 20);
    assert_eq!((p.log_bytes(), p.log_room()), (256 << 10, 1 << 20));
    assert!(p.set_log_limit(1 << 20));
    for n in 0..900 {
        set(&mut p, &key(n), &value(n), NOW);
    }
    assert_eq!(p.stats().log_evictions, 0, "900 KB fit in the grown log");
    assert_eq!(readable(&mut p, 0..900), 900);
    assert!(p.log_touched_bytes() > 800 << 10);
    assert!(!p.set_log_limit(2 << 20), "no growing past the room");
}

/// Shrinks at several positions of the tail: still in its first lap, past the new end in a
/// later lap, and short of the new end in a later lap.
#[test]
fn shrinking_evicts_past_the_end_and_keeps_the_rest() {
    for stored in [700usize, 1500, 1100] {
        let mut p = partition(1 << 20, 1 << 20);
        for n in 0..stored {
            set(&mut p, &key(n), &value(n), NOW);
        }
        let before = p.stats().items;
        assert!(p.set_log_limit(512 << 10));
        p.check_invariants();
        let evicted = before - p.stats().items;
        assert!(evicted > 0, "{stored}: something lay past 512 KiB");
        assert_eq!(p.stats().log_evictions, evicted + (stored as u64 - before));
        assert!(p.stats().bytes <= 512 << 10);
        assert!(p.log_touched_bytes() <= (512 << 10) + 4096);
        assert_eq!(readable(&mut p, 0..stored) as u64, p.stats().items, "{stored}");
        // The smaller log keeps working: wraps at its new end, evicting as it goes.
        for n in stored..stored + 2000 {
            set(&mut p, &key(n), &value(n), NOW);
        }
        p.check_invariants();
        assert!(p.log_touched_bytes() <= (512 << 10) + 4096);
        assert!(readable(&mut p, stored + 1600..stored + 2000) == 400, "the newest items are there");
        // And grows back.
        assert!(p.set_log_limit(1 << 20));
        let evictions = p.stats().log_evictions;
        for n in 0..400 {
            set(&mut p, &key(100_000 + n), &value(100_000 + n), NOW);
        }
        p.check_invariants();
        assert_eq!(readable(&mut p, 100_000..100_400), 400);
        let _ = evictions;
    }
}

#[test]
fn limits_outside_the_room_or_below_two_items_are_refused() {
    let mut p = partition(1 << 20, 1 << 20);
    assert!(!p.set_log_limit((1 << 20) + 8));
    assert!(!p.set_log_limit(p.log_limit_min() - 8));
    assert!(p.set_log_limit(p.log_limit_min()));
    let mut store = Config::store(1 << 20, 1024);
    store.huge_pages = HugePages::Off;
    let mut store = Partition::new(store);
    assert!(!store.set_log_limit(512 << 10), "store mode's arena has a fixed size");
}

/// S3-FIFO: the main ring takes a change of size while it keeps room for two of the largest
/// items besides the small ring and the ghost; below that the small ring is emptied and the
/// partition runs clock in all of the new size, and growing turns the small ring back on.
#[test]
fn s3fifo_shrinks_its_main_ring_then_turns_its_small_ring_off() {
    let mut config = Config::new(8 << 20, 1024);
    config.huge_pages = HugePages::Off;
    config.eviction = Eviction::S3Fifo;
    config.item_bytes_max = 1 << 20;
    let mut p = Partition::new(config);
    assert_eq!((p.log_bytes(), p.log_room()), (8 << 20, 8 << 20));
    // 9,000 items of about 1 KB, every third read once while new (the invariants checked at
    // the end of each fill, not per request).
    let fill = |p: &mut Partition, from: usize| {
        for n in from..from + 9000 {
            let value = value(n);
            let command = qs_store::PartitionCommand::Store {
                mode: qs_store::StoreMode::Set,
                value: &value,
                flags: 0,
                expiry: qs_store::Expiry::NEVER,
            };
            p.execute(
                &qs_store::PartitionRequest::new(&key(n), command),
                qs_store::Now::from_secs(NOW),
                &mut Vec::new(),
            );
            if n % 3 == 0 {
                p.execute(
                    &qs_store::PartitionRequest::new(&key(n), qs_store::PartitionCommand::Get),
                    qs_store::Now::from_secs(NOW),
                    &mut Vec::new(),
                );
            }
        }
        p.check_invariants();
    };
    fill(&mut p, 0);
    let promoted = p.stats().promotions;
    assert!(promoted > 0);
    // 4 MiB: the main ring shrinks, the small ring stays.
    assert!(p.set_log_limit(4 << 20));
    assert_eq!(p.log_bytes(), 4 << 20);
    assert!(p.stats().bytes <= 4 << 20);
    assert!(readable(&mut p, 0..9000) > 1000);
    // 2 MiB: two items of 1 MiB and the small ring do not fit: clock in all 2 MiB.
    assert!(p.set_log_limit(2 << 20));
    assert_eq!(p.log_bytes(), 2 << 20);
    assert!(p.stats().bytes <= 2 << 20);
    fill(&mut p, 20_000);
    assert_eq!(p.stats().promotions, promoted, "no small ring: nothing moves out of it");
    assert!(readable(&mut p, 20_000..29_000) > 500);
    assert!(!p.set_log_limit((2 << 20) - 8), "under two of the largest items");
    // Back to 8 MiB: the small ring is on again.
    assert!(p.set_log_limit(8 << 20));
    assert_eq!(p.log_bytes(), 8 << 20);
    fill(&mut p, 40_000);
    assert!(p.stats().promotions > promoted);
    // The keys read while new are the ones kept: 3,000 of them, about 3 MB.
    let read_kept =
        (40_000..49_000).filter(|n| n % 3 == 0).filter(|&n| get(&mut p, &key(n), NOW).is_some()).count();
    assert!(read_kept > 2500, "{read_kept} of 3000 read keys kept");
    p.check_invariants();
}
