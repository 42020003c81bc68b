//! Model check of the CREW protocol with loom, running the real partition and reader code on
//! loom's atomics (`RUSTFLAGS="--cfg loom" cargo test -p qs-store --release --test loom_crew`).
//! Every interleaving (within the preemption bound) of an owner that overwrites a key and then
//! pushes its old copy out of the log, against a reader of that key, must give the reader the old
//! value, the new value or a miss — never anything else.
#![cfg(loom)]

use qs_store::{
    Access, Config, Eviction, Expiry, HugePages, KeyHash, Outcome, Partition, PartitionCommand,
    PartitionRequest, StoreMode,
};

const NOW: u32 = 1_700_000_000;

fn set(partition: &mut Partition, key: &[u8], value: &[u8]) {
    let command = PartitionCommand::Store { mode: StoreMode::Set, value, flags: 0, expiry: Expiry::NEVER };
    let outcome = partition.execute(
        &PartitionRequest::new(key, command),
        qs_store::Now::from_secs(NOW),
        &mut Vec::new(),
    );
    assert!(matches!(outcome, Outcome::Stored { .. }));
}

/// One bucket and a 128-byte log: a couple of writes wrap it.
fn tiny_crew_partition() -> Partition {
    let mut config = Config::new(128, 1);
    config.access = Access::Crew;
    config.eviction = Eviction::Fifo;
    config.huge_pages = HugePages::Off;
    Partition::new(config)
}

#[test]
fn reader_sees_old_new_or_nothing() {
    loom::model(|| {
        let mut partition = tiny_crew_partition();
        set(&mut partition, b"k", b"old-value");
        let reader = partition.reader();
        let thread = loom::thread::spawn(move || {
            let mut out = Vec::new();
            match reader.get(KeyHash::of(b"k"), b"k", qs_store::Now::from_secs(NOW), &mut out) {
                Outcome::Hit(hit) => {
                    let value = &out[hit.value_start..hit.value_start + hit.value_len];
                    assert!(value == b"old-value" || value == b"a-new-longer-value", "{value:?}");
                }
                Outcome::Miss => {}
                other => panic!("{other:?}"),
            }
        });
        // Appended (it no longer fits in place), then the old copy is evicted and overwritten.
        set(&mut partition, b"k", b"a-new-longer-value");
        set(&mut partition, b"x", &[7u8; 40]);
        thread.join().unwrap();
    });
}

/// The metadata a read leaves behind (fetched bit, last access) is written without the bucket's
/// version bracket: a reader racing with the owner's read must still get the value whole, with
/// the metadata as it was before or after.
#[test]
fn reader_racing_the_owners_read_sees_the_value_and_either_metadata() {
    loom::model(|| {
        let mut partition = tiny_crew_partition();
        set(&mut partition, b"k", b"the-value");
        let reader = partition.reader();
        let thread = loom::thread::spawn(move || {
            let mut out = Vec::new();
            match reader.get(KeyHash::of(b"k"), b"k", qs_store::Now::from_secs(NOW + 1), &mut out) {
                Outcome::Hit(hit) => {
                    assert_eq!(&out[hit.value_start..hit.value_start + hit.value_len], b"the-value");
                    assert!(hit.last_access_secs == NOW || hit.last_access_secs == NOW + 5, "{hit:?}");
                }
                other => panic!("{other:?}"),
            }
        });
        let outcome = partition.execute(
            &PartitionRequest::new(b"k", PartitionCommand::Get),
            qs_store::Now::from_secs(NOW + 5),
            &mut Vec::new(),
        );
        assert!(matches!(outcome, Outcome::Hit(hit) if !hit.fetched_before && hit.last_access_secs == NOW));
        thread.join().unwrap();
    });
}

/// A split of the index racing a reader: the key's slot moves to the new bucket while the
/// reader looks for it under the old shape or the new one; it must never miss.
#[test]
fn reader_racing_an_index_split_always_finds_the_key() {
    // A key whose slot moves: its tag has the first level's bit.
    let moving =
        (0u32..).map(|i| format!("m{i}").into_bytes()).find(|key| KeyHash::of(key).tag() & 1 != 0).unwrap();
    // The fill before the race is many atomic operations, each a branch to loom.
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 100_000;
    builder.check(move || {
        let mut config = Config::new(2048, 1);
        config.access = Access::Crew;
        config.eviction = Eviction::Fifo;
        config.huge_pages = HugePages::Off;
        config.index_levels = 1;
        let mut partition = Partition::new(config);
        set(&mut partition, &moving, b"v");
        // Seven more make eight items in a bucket that grows past seven (half its slots): the
        // next write splits it.
        for i in 0..7u32 {
            set(&mut partition, format!("f{i}").as_bytes(), b"x");
        }
        assert_eq!(partition.main_buckets(), 1);
        let reader = partition.reader();
        let key = moving.clone();
        let thread = loom::thread::spawn(move || {
            let mut out = Vec::new();
            let outcome = reader.get(KeyHash::of(&key), &key, qs_store::Now::from_secs(NOW), &mut out);
            assert!(matches!(outcome, Outcome::Hit(_)), "a split made the reader miss: {outcome:?}");
        });
        // This write splits the bucket before it looks anything up.
        set(&mut partition, b"y", b"x");
        assert_eq!(partition.main_buckets(), 2);
        thread.join().unwrap();
    });
}
