//! `-e`: partitions whose logs live in a memory file come back with their items after a stop
//! at any moment, and never answer with a torn, stale or misplaced value.
#![cfg(not(miri))]

mod common;

use common::{get, run, set, store_with, NOW};
use qs_store::persist::{segment_bytes, Recovered};
use qs_store::{Config, Eviction, HugePages, Outcome, Partition, PartitionCommand, StoreMode};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::PathBuf;

struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, bytes: u64) -> (TempFile, File) {
        let path = std::env::temp_dir().join(format!("qs-persist-{name}-{}", std::process::id()));
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        file.set_len(bytes).unwrap();
        (TempFile(path), file)
    }

    /// A copy of the file as it is this instant: what a server killed now would leave.
    fn snapshot(&self, name: &str) -> (TempFile, File) {
        let path = self.0.with_extension(name);
        std::fs::copy(&self.0, &path).unwrap();
        let file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        (TempFile(path), file)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn config(log_bytes: usize) -> Config {
    let mut config = Config::new(log_bytes, 1024);
    config.huge_pages = HugePages::Off;
    config.eviction = Eviction::ApproxLru;
    config
}

fn open(config: Config, file: &File) -> (Partition, Recovered) {
    Partition::open(config, file, 0, None).unwrap()
}

fn key(n: u64) -> Vec<u8> {
    format!("key:{n}").into_bytes()
}

fn value(n: u64, version: u64) -> Vec<u8> {
    format!("value {n} v{version} ").repeat(1 + (n % 7) as usize).into_bytes()
}

#[test]
fn a_reopened_file_answers_every_item_with_its_flags_expiry_and_cas() {
    let log_bytes = 1 << 20;
    let (_temp, file) = TempFile::new("reopen", segment_bytes(log_bytes));
    let (mut partition, recovered) = open(config(log_bytes), &file);
    assert_eq!(recovered, Recovered::default());
    let mut cas = HashMap::new();
    for n in 0..2000u64 {
        match store_with(&mut partition, StoreMode::Set, &key(n), &value(n, 0), n as u32, 3600, NOW) {
            Outcome::Stored { cas: unique } => cas.insert(n, unique),
            other => panic!("{other:?}"),
        };
    }
    for n in (0..2000).step_by(3) {
        set(&mut partition, &key(n), &value(n, 1), NOW);
    }
    for n in (1..2000).step_by(5) {
        run(&mut partition, &key(n), PartitionCommand::Delete { cas: 0 }, NOW);
    }
    let items = partition.stats().items;
    drop(partition);

    let (mut partition, recovered) = open(config(log_bytes), &file);
    assert_eq!((recovered.items, recovered.cut_bytes), (items, 0));
    assert_eq!(partition.stats().items, items);
    for n in 0..2000u64 {
        let mut out = Vec::new();
        let name = key(n);
        let request = qs_store::PartitionRequest::new(&name, PartitionCommand::Get);
        match partition.execute(&request, qs_store::Now::from_secs(NOW + 1), &mut out) {
            Outcome::Hit(hit) => {
                assert!(n % 5 != 1, "key {n} was deleted");
                let expected = value(n, u64::from(n % 3 == 0));
                assert_eq!(&out[hit.value_start..hit.value_start + hit.value_len], &expected[..]);
                if n % 3 != 0 {
                    assert_eq!((hit.flags, hit.cas, hit.expiry.secs()), (n as u32, cas[&n], NOW + 3600));
                }
            }
            Outcome::Miss => assert!(n % 5 == 1, "key {n} lost"),
            other => panic!("{other:?}"),
        }
    }
    // New writes get CAS uniques above every one handed out before.
    let newest = cas.values().max().copied().unwrap();
    match store_with(&mut partition, StoreMode::Set, b"fresh", b"x", 0, 0, NOW) {
        Outcome::Stored { cas } => assert!(cas > newest),
        other => panic!("{other:?}"),
    }
    partition.check_invariants();
}

#[test]
fn a_stop_at_any_request_keeps_every_answer_through_many_laps() {
    // A small log that wraps many times; the file is copied (what a kill -9 would leave) at
    // random requests and each copy opened: every key answers as the running partition did at
    // that moment, whatever the eviction, wrap or flush in between.
    let log_bytes = 64 << 10;
    let (temp, file) = TempFile::new("laps", segment_bytes(log_bytes));
    let (mut partition, _) = open(config(log_bytes), &file);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let keys = 600u64;
    for request in 0..30_000u64 {
        let n = next() % keys;
        match next() % 10 {
            0 => {
                run(&mut partition, &key(n), PartitionCommand::Delete { cas: 0 }, NOW);
            }
            1..=4 => {
                set(&mut partition, &key(n), &value(n, request), NOW);
            }
            _ => {
                get(&mut partition, &key(n), NOW);
            }
        }
        if request == 20_000 {
            partition.flush_all(qs_store::Now::from_secs(NOW), 0, false);
        }
        if next() % 3000 == 0 {
            let (_copy, copy_file) = temp.snapshot(&format!("at{request}"));
            let (mut recovered, report) = open(config(log_bytes), &copy_file);
            assert_eq!(report.cut_bytes, 0);
            let (mut lost, mut extra) = (0, 0);
            for n in 0..keys {
                let mut out = Vec::new();
                let name = key(n);
                let request = qs_store::PartitionRequest::new(&name, PartitionCommand::Get);
                let expected = partition.peek(request.hash, &name, qs_store::Now::from_secs(NOW)).map(|_| ());
                let answer = get(&mut recovered, &name, NOW);
                match (expected, answer) {
                    (Some(()), Some(got)) => {
                        let want = match partition.execute(&request, qs_store::Now::from_secs(NOW), &mut out)
                        {
                            Outcome::Hit(hit) => {
                                out[hit.value_start..hit.value_start + hit.value_len].to_vec()
                            }
                            other => panic!("{other:?}"),
                        };
                        assert_eq!(got, want, "key {n}: a value other than the one acknowledged last");
                    }
                    (Some(()), None) => lost += 1,
                    (None, Some(_)) => extra += 1,
                    (None, None) => {}
                }
            }
            assert_eq!((lost, extra), (0, 0), "at request {request}");
            recovered.check_invariants();
        }
    }
}

#[test]
fn garbage_past_the_tail_and_another_shape_are_never_served() {
    let log_bytes = 256 << 10;
    let (temp, file) = TempFile::new("garbage", segment_bytes(log_bytes));
    let (mut partition, _) = open(config(log_bytes), &file);
    for n in 0..100u64 {
        set(&mut partition, &key(n), &value(n, 0), NOW);
    }
    drop(partition);
    // A write in flight at a crash: bytes after the tail, a header and half a value.
    {
        use std::os::unix::fs::FileExt;
        let tail_page = qs_store::persist::STATE_BYTES + 64 * 1024;
        file.write_all_at(&[0xAB; 300], tail_page).unwrap();
    }
    let (mut partition, recovered) = open(config(log_bytes), &file);
    assert_eq!((recovered.items, recovered.cut_bytes), (100, 0));
    for n in 0..100u64 {
        assert_eq!(get(&mut partition, &key(n), NOW), Some(value(n, 0)));
    }
    drop(partition);
    // Another log size for the same file starts empty.
    let (_copy, copy) = temp.snapshot("shape");
    let (mut other, recovered) = Partition::open(config(128 << 10), &copy, 0, None).unwrap();
    assert_eq!(recovered.items, 0);
    assert_eq!(get(&mut other, &key(1), NOW), None);
}

#[test]
fn a_tagged_key_an_older_release_placed_by_its_whole_hash_is_dropped_and_the_rest_come_back() {
    let log_bytes = 1 << 20;
    // A tagged key whose whole-key hash and tag hash pick different halves (one partition bit).
    let tagged = (0..)
        .map(|n| format!("user:{n}:{{t{n}}}").into_bytes())
        .find(|key| {
            let whole = qs_store::KeyHash(xxhash_rust::xxh3::xxh3_64(key));
            whole.partition(1) != qs_store::KeyHash::of(key).partition(1)
        })
        .expect("such a key");
    let old_home = qs_store::KeyHash(xxhash_rust::xxh3::xxh3_64(&tagged)).partition(1);
    let mut shape = config(log_bytes);
    (shape.partition_bits, shape.partition_index) = (1, old_home as u16);
    let home = |key: &[u8]| qs_store::KeyHash::of(key).partition(1) == old_home;
    let plain: Vec<Vec<u8>> = (0..4000).map(key).filter(|key| home(key)).take(50).collect();
    let (_temp, file) = TempFile::new("misplaced", segment_bytes(log_bytes));
    let (mut partition, _) = open(shape, &file);
    // As an older release stored it: placed by the whole key's hash, among keys placed alike.
    set(&mut partition, &plain[0], b"before", NOW);
    set(&mut partition, &tagged, b"tagged", NOW);
    for key in &plain[1..] {
        set(&mut partition, key, b"after", NOW);
    }
    drop(partition);
    let (mut partition, recovered) = open(shape, &file);
    assert_eq!((recovered.misplaced, recovered.cut_bytes, recovered.items), (1, 0, plain.len() as u64));
    assert_eq!(get(&mut partition, &tagged, NOW), None, "the misplaced item does not answer");
    for key in &plain {
        assert!(get(&mut partition, key, NOW).is_some(), "{:?} came back", String::from_utf8_lossy(key));
    }
    partition.check_invariants();
}
