//! The flash tier on a partition: items leaving a small DRAM log live on in a flash log, every
//! command keeps memcached's semantics on them, and no answer is ever another version's.
#![cfg(not(miri))]

mod common;

use common::NOW;
use qs_store::flash::FlashLog;
use qs_store::{
    Config, Expiry, HugePages, Outcome, Partition, PartitionCommand, PartitionRequest, StoreMode,
};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::sync::Arc;

struct Temp(std::path::PathBuf);

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn flash_file(name: &str, writable: bool) -> (Temp, Arc<File>) {
    let path = std::env::temp_dir().join(format!("qs-flash-tier-{name}-{}", std::process::id()));
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    let file = if writable { file } else { File::open(&path).unwrap() };
    (Temp(path), Arc::new(file))
}

/// A partition of `dram` bytes of log with a flash log of `flash` bytes in 16 KiB pages.
fn partition(dram: usize, flash: u64, file: Arc<File>) -> Partition {
    let mut config = Config::new(dram, 4096);
    config.huge_pages = HugePages::Off;
    config.eviction = qs_store::Eviction::Clock;
    let mut partition = Partition::new(config);
    partition.attach_flash(FlashLog::new(file, 0, flash, 16 << 10).unwrap(), 16);
    partition
}

fn run(partition: &mut Partition, key: &[u8], command: PartitionCommand<'_>, now: u32) -> (Outcome, Vec<u8>) {
    let mut out = Vec::new();
    let outcome = partition.execute_with_flash(
        &PartitionRequest::new(key, command),
        qs_store::Now::from_secs(now),
        &mut out,
    );
    partition.check_invariants();
    (outcome, out)
}

fn get(partition: &mut Partition, key: &[u8], now: u32) -> Option<Vec<u8>> {
    match run(partition, key, PartitionCommand::Get, now) {
        (Outcome::Hit(hit), out) => Some(out[hit.value_start..hit.value_start + hit.value_len].to_vec()),
        (Outcome::Miss, _) => None,
        (other, _) => panic!("{other:?}"),
    }
}

fn set(partition: &mut Partition, key: &[u8], value: &[u8], exptime: i64, now: u32) -> u64 {
    let command = PartitionCommand::Store {
        mode: StoreMode::Set,
        value,
        flags: 7,
        expiry: Expiry::from_exptime(exptime, qs_store::Now::from_secs(now)),
    };
    match run(partition, key, command, now).0 {
        Outcome::Stored { cas } => cas,
        other => panic!("{other:?}"),
    }
}

fn value(n: u64, version: u64) -> Vec<u8> {
    format!("{n}/{version}|").repeat(20 + (n % 30) as usize).into_bytes()
}

#[test]
fn items_pushed_out_of_dram_answer_from_flash_with_their_cas_and_flags() {
    let (_temp, file) = flash_file("answer", true);
    let mut partition = partition(64 << 10, 4 << 20, file);
    let mut cas = HashMap::new();
    for n in 0..2000u64 {
        cas.insert(n, set(&mut partition, format!("key{n}").as_bytes(), &value(n, 0), 0, NOW));
    }
    let (flash, counters) = partition.flash_stats().unwrap();
    assert!(counters.demoted > 1500 && flash.pages_written > 10, "{counters:?} {flash:?}");
    // A set drops the flash slots with its key's bucket and tag unread: a key whose 27 hash
    // bits (12 of bucket, 15 of tag) equal an earlier key's flash slot's costs that one.
    let collisions = counters.superseded;
    let mut lost = 0;
    for n in 0..2000u64 {
        let key = format!("key{n}");
        let (outcome, out) = run(&mut partition, key.as_bytes(), PartitionCommand::Get, NOW);
        let Outcome::Hit(hit) = outcome else {
            lost += 1;
            continue;
        };
        assert_eq!(&out[hit.value_start..hit.value_start + hit.value_len], &value(n, 0)[..]);
        assert_eq!((hit.flags, hit.cas), (7, cas[&n]), "key {n}");
    }
    assert!(lost <= collisions, "lost {lost}, collisions {collisions}: {:?}", partition.flash_stats());
    let (_, counters) = partition.flash_stats().unwrap();
    assert!(counters.served + counters.promoted > 1500, "{counters:?}");
}

#[test]
fn every_command_sees_a_flash_item_as_memcached_would() {
    let (_temp, file) = flash_file("commands", true);
    let mut partition = partition(64 << 10, 4 << 20, file);
    set(&mut partition, b"counter", b"41", 0, NOW);
    set(&mut partition, b"doomed", b"x", 0, NOW);
    set(&mut partition, b"short", b"lived", 10, NOW);
    let stored = set(&mut partition, b"casme", b"v1", 0, NOW);
    for n in 0..1000u64 {
        set(&mut partition, format!("filler{n}").as_bytes(), &value(n, 0), 0, NOW);
    }
    assert!(
        partition
            .peek(qs_store::KeyHash::of(b"counter"), b"counter", qs_store::Now::from_secs(NOW))
            .is_none(),
        "on flash"
    );
    let arith = PartitionCommand::Arith { delta: 1, decrement: false, cas: 0 };
    let outcome = run(&mut partition, b"counter", arith, NOW).0;
    assert!(
        matches!(outcome, Outcome::Counter { value: 42, .. }),
        "{outcome:?} {:?}",
        partition.flash_stats()
    );
    assert_eq!(run(&mut partition, b"doomed", PartitionCommand::Delete { cas: 0 }, NOW).0, Outcome::Deleted);
    assert_eq!(get(&mut partition, b"doomed", NOW), None);
    let cas_set = PartitionCommand::Store {
        mode: StoreMode::Cas(stored),
        value: b"v2",
        flags: 0,
        expiry: Expiry::NEVER,
    };
    assert!(matches!(run(&mut partition, b"casme", cas_set, NOW).0, Outcome::Stored { .. }));
    assert_eq!(get(&mut partition, b"casme", NOW).as_deref(), Some(&b"v2"[..]));
    assert_eq!(get(&mut partition, b"short", NOW + 11), None, "expired on flash");
    let add =
        PartitionCommand::Store { mode: StoreMode::Add, value: b"again", flags: 0, expiry: Expiry::NEVER };
    assert_eq!(run(&mut partition, b"filler3", add, NOW).0, Outcome::NotStored, "exists on flash");
}

#[test]
fn random_commands_never_answer_another_version_as_flash_wraps() {
    // A flash log of 256 KiB behind 32 KiB of DRAM: items fall off the flash end too. Every
    // answer is the model's current value or a miss (a cache may drop), never another.
    let (_temp, file) = flash_file("model", true);
    let mut partition = partition(32 << 10, 256 << 10, file);
    let mut model: HashMap<u64, u64> = HashMap::new();
    let mut rng = 0x1234_5678_9abc_def1u64;
    let (mut hits, mut misses) = (0, 0);
    for step in 0..40_000u64 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let n = rng % 3000;
        let key = format!("key{n}");
        match rng >> 60 {
            0..=5 => {
                set(&mut partition, key.as_bytes(), &value(n, step), 0, NOW);
                model.insert(n, step);
            }
            6 => {
                run(&mut partition, key.as_bytes(), PartitionCommand::Delete { cas: 0 }, NOW);
                model.remove(&n);
            }
            _ => match get(&mut partition, key.as_bytes(), NOW) {
                Some(got) => {
                    let version = model.get(&n).copied().expect("a deleted key answered");
                    assert_eq!(got, value(n, version), "key {n} at step {step}");
                    hits += 1;
                }
                None => misses += 1,
            },
        }
    }
    let (flash, counters) = partition.flash_stats().unwrap();
    assert!(
        flash.pages_reused > 0 && counters.promoted > 1000 && hits > 1000,
        "{flash:?} {counters:?} {hits} {misses}"
    );
}

#[test]
fn a_failed_flash_leaves_dram_serving() {
    let (_temp, file) = flash_file("failed", false);
    let mut partition = partition(64 << 10, 1 << 20, file);
    for n in 0..2000u64 {
        set(&mut partition, format!("key{n}").as_bytes(), &value(n, 0), 0, NOW);
    }
    let (flash, _) = partition.flash_stats().unwrap();
    assert!(flash.failed && flash.write_errors == 1, "{flash:?}");
    assert_eq!(get(&mut partition, b"key1999", NOW), Some(value(1999, 0)), "DRAM still serves");
}
