use super::*;
use crate::region::HugePages;

fn small(access: Access) -> Partition {
    let mut config = Config::new(256, 2);
    config.access = access;
    config.eviction = Eviction::Lru;
    config.huge_pages = HugePages::Off;
    Partition::new(config)
}

fn set(partition: &mut Partition, key: &[u8], value: &[u8]) {
    let command = PartitionCommand::Store { mode: StoreMode::Set, value, flags: 3, expiry: Expiry::NEVER };
    let outcome =
        partition.execute(&PartitionRequest::new(key, command), crate::Now::from_secs(100), &mut Vec::new());
    assert!(matches!(outcome, Outcome::Stored { .. }), "{outcome:?}");
}

#[test]
fn evictions_are_recorded_only_while_asked_and_peek_changes_nothing() {
    let mut partition = small(Access::Erew);
    for round in 0..8u8 {
        set(&mut partition, &[b'a' + round], &[round; 40]);
    }
    assert!(partition.take_evictions().is_empty(), "recorded while off");
    partition.record_evictions(true);
    for round in 0..8u8 {
        set(&mut partition, &[b'k', round], &[round; 40]);
    }
    let evicted = partition.take_evictions();
    assert!(!evicted.is_empty(), "a full log evicted nothing");
    let first = &evicted[0];
    assert_eq!((first.value_len, first.fetched), (40, false));
    assert!(first.key.len() <= 2);
    assert!(partition.take_evictions().is_empty(), "taken twice");
    let last = [b'k', 7];
    let before = partition.stats().gets;
    assert_eq!(partition.peek(KeyHash::of(&last), &last, crate::Now::from_secs(100)), Some(40));
    assert_eq!(partition.peek(KeyHash::of(b"absent"), b"absent", crate::Now::from_secs(100)), None);
    assert_eq!(partition.stats().gets, before, "peek counted a get");
    partition.record_evictions(false);
    set(&mut partition, b"zz", &[1; 40]);
    assert!(partition.take_evictions().is_empty());
}

/// Miri checks the owner's writes and a reader's optimistic copies for data races and
/// out-of-bounds access, on a log small enough to wrap many times.
#[test]
fn miri_owner_and_reader_threads() {
    let mut partition = small(Access::Crew);
    let reader = partition.reader();
    let thread = std::thread::spawn(move || {
        let mut out = Vec::new();
        for round in 0..30 {
            out.clear();
            let key = [b'a' + (round % 3) as u8];
            if let Outcome::Hit(hit) =
                reader.get(KeyHash::of(&key), &key, crate::Now::from_secs(100), &mut out)
            {
                let value = &out[hit.value_start..];
                assert!(value.iter().all(|&b| b == key[0]), "torn or foreign value {value:?}");
                assert_eq!(hit.flags, 3);
            }
        }
    });
    for round in 0..40usize {
        let key = [b'a' + (round % 3) as u8];
        set(&mut partition, &key, &vec![key[0]; 1 + round % 37]);
    }
    thread.join().unwrap();
    partition.check_invariants();
}

#[test]
fn miri_erew_writes_no_versions() {
    let mut partition = small(Access::Erew);
    for round in 0..20usize {
        set(&mut partition, &[b'k', round as u8 % 5], &[1; 20]);
    }
    let versions: u64 = (0..2).map(|bucket| partition.shared.index.bucket(bucket)[0].load(Relaxed)).sum();
    assert_eq!(versions, 0);
    partition.check_invariants();
}

fn get(partition: &mut Partition, key: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match partition.execute(
        &PartitionRequest::new(key, PartitionCommand::Get),
        crate::Now::from_secs(100),
        &mut out,
    ) {
        Outcome::Hit(hit) => Some(out[hit.value_start..hit.value_start + hit.value_len].to_vec()),
        Outcome::Miss => None,
        other => panic!("{other:?}"),
    }
}

/// A hint is only a hint: one left for a key whose slot then went to another key (or whose
/// key moved, or was deleted), or one that points at the right slot of a forged entry, never
/// answers for the wrong key.
#[test]
fn stale_and_forged_hints_fall_back_to_the_scan() {
    let mut partition = small(Access::Crew);
    set(&mut partition, b"a", b"1");
    set(&mut partition, b"b", b"2");
    for key in [&b"a"[..], b"b"] {
        partition.prefetch_item(KeyHash::of(key));
    }
    // Delete "a" and write "c": "c" may take "a"'s old slot while "a"'s hint still names it.
    let deleted = partition.execute(
        &PartitionRequest::new(b"a", PartitionCommand::Delete { cas: 0 }),
        crate::Now::from_secs(100),
        &mut Vec::new(),
    );
    assert_eq!(deleted, Outcome::Deleted);
    set(&mut partition, b"c", b"3");
    assert_eq!(get(&mut partition, b"a"), None);
    assert_eq!(get(&mut partition, b"b").as_deref(), Some(&b"2"[..]));
    assert_eq!(get(&mut partition, b"c").as_deref(), Some(&b"3"[..]));
    // "b" moves (a longer value is appended elsewhere) after its hint was taken.
    partition.prefetch_item(KeyHash::of(b"b"));
    set(&mut partition, b"b", b"a-longer-value");
    assert_eq!(get(&mut partition, b"b").as_deref(), Some(&b"a-longer-value"[..]));
    // Every hint entry forged to name every slot, for every key: answers do not change.
    for slot in 0..SLOTS_PER_BUCKET as u64 {
        for key in [&b"a"[..], b"b", b"c", b"d"] {
            let hash = KeyHash::of(key);
            partition.hint(hash).set(hash.0 & !HINT_SLOT_MASK | slot);
        }
        assert_eq!(get(&mut partition, b"a"), None);
        assert_eq!(get(&mut partition, b"b").as_deref(), Some(&b"a-longer-value"[..]));
        assert_eq!(get(&mut partition, b"c").as_deref(), Some(&b"3"[..]));
        assert_eq!(get(&mut partition, b"d"), None);
    }
    partition.check_invariants();
}

/// A sink that writes a head, then takes the value in `out` (or holds it already: `skip`), and
/// counts its undos.
struct HeadFirst {
    out: Vec<u8>,
    skip: bool,
    heads: usize,
    undos: usize,
}

impl ValueSink for HeadFirst {
    fn head(&mut self, hit: &crate::Hit) -> Option<&mut Vec<u8>> {
        self.heads += 1;
        self.out.extend_from_slice(format!("<{} {}>", hit.flags, hit.value_len).as_bytes());
        (!self.skip).then_some(&mut self.out)
    }

    fn undo(&mut self) {
        self.undos += 1;
        self.out.clear();
    }
}

/// The store tells a sink the item before it copies the value, copies it once to the buffer
/// the sink gives, and copies nothing when the sink holds it already; owner and reader alike.
#[test]
fn miri_a_sink_writes_its_head_before_the_value_and_may_take_none() {
    let mut partition = small(Access::Crew);
    set(&mut partition, b"k", b"value");
    let hash = KeyHash::of(b"k");
    let mut sink = HeadFirst { out: Vec::new(), skip: false, heads: 0, undos: 0 };
    let Outcome::Hit(hit) = partition.read_value(hash, b"k", None, crate::Now::from_secs(100), &mut sink)
    else {
        panic!()
    };
    assert_eq!(sink.out, b"<3 5>value");
    assert_eq!((hit.value_start, hit.value_len), (5, 5));
    let reader = partition.reader();
    let mut sink = HeadFirst { out: Vec::new(), skip: true, heads: 0, undos: 0 };
    let (outcome, _) = reader.read_telling(hash, b"k", crate::Now::from_secs(100), &mut sink);
    assert!(matches!(outcome, Outcome::Hit(hit) if hit.value_len == 5 && hit.value_start == 0));
    assert_eq!((sink.out.as_slice(), sink.heads, sink.undos), (&b"<3 5>"[..], 1, 0));
    let mut sink = HeadFirst { out: Vec::new(), skip: false, heads: 0, undos: 0 };
    assert_eq!(
        partition.read_value(KeyHash::of(b"x"), b"x", None, crate::Now::from_secs(100), &mut sink),
        Outcome::Miss
    );
    assert_eq!((sink.heads, sink.out.len()), (0, 0), "a miss writes no head");
    let touch = Some(Expiry::from_exptime(400, crate::Now::from_secs(100)));
    let Outcome::Hit(hit) = partition.read_value(hash, b"k", touch, crate::Now::from_secs(100), &mut sink)
    else {
        panic!()
    };
    assert_eq!(
        (hit.expiry, &sink.out[hit.value_start..]),
        (Expiry::from_exptime(400, crate::Now::from_secs(100)), &b"value"[..])
    );
    partition.check_invariants();
}

/// A sink that leaves every value in the log, keeping the pins it is given.
#[derive(Default)]
struct Pinning {
    values: Vec<crate::LogValue>,
}

impl ValueSink for Pinning {
    fn head(&mut self, _hit: &crate::Hit) -> Option<&mut Vec<u8>> {
        unreachable!("the owner offers a pin")
    }

    fn undo(&mut self) {}

    fn head_pinnable(
        &mut self,
        _hit: &crate::Hit,
        pin: impl FnOnce(crate::PinCharge) -> Option<crate::LogValue>,
    ) -> Option<&mut Vec<u8>> {
        self.values.push(pin(None).expect("cache mode pins"));
        None
    }
}

fn pin(partition: &mut Partition, key: &[u8]) -> crate::LogValue {
    let mut sink = Pinning::default();
    let outcome = partition.read_value(KeyHash::of(key), key, None, crate::Now::from_secs(100), &mut sink);
    assert!(matches!(outcome, Outcome::Hit(_)), "{outcome:?}");
    sink.values.pop().expect("pinned")
}

/// A value left in the log is read there until its memory is about to be written again (the
/// log wrapping over it, or its own key rewritten in place), and from its copy after: never
/// torn. Under Miri, the in-place slice is checked against those writes.
#[test]
fn miri_a_pinned_value_is_read_in_place_and_rescued_before_its_memory_is_written() {
    let mut partition = small(Access::Crew);
    set(&mut partition, b"big", &[7; 40]);
    let value = pin(&mut partition, b"big");
    assert_eq!((partition.value_bytes(&value), value.rescued()), (&[7u8; 40][..], cfg!(loom)));
    set(&mut partition, b"other", &[1; 40]);
    assert!(!value.rescued(), "a write elsewhere copied it");
    for round in 0..8u8 {
        set(&mut partition, &[b'k', round], &[round; 40]);
    }
    assert_eq!(
        partition.peek(KeyHash::of(b"big"), b"big", crate::Now::from_secs(100)),
        None,
        "the log did not wrap over it"
    );
    assert!(value.rescued());
    assert_eq!(partition.value_bytes(&value), &[7u8; 40][..]);

    set(&mut partition, b"same", b"first");
    let first = pin(&mut partition, b"same");
    set(&mut partition, b"same", b"secnd");
    assert!(first.rescued(), "rewritten in place over a pinned value");
    assert_eq!(partition.value_bytes(&first), b"first");
    let second = pin(&mut partition, b"same");
    assert_eq!(partition.value_bytes(&second), b"secnd");
    partition.check_invariants();
}

#[test]
#[should_panic(expected = "another partition")]
fn a_pinned_value_is_read_through_its_own_partition_only() {
    let mut partition = small(Access::Erew);
    set(&mut partition, b"k", b"v");
    let value = pin(&mut partition, b"k");
    let _ = small(Access::Erew).value_bytes(&value);
}

#[test]
fn a_signed_count_reads_and_writes_exact_signed_numbers_and_refuses_past_the_range() {
    let mut partition = small(Access::Erew);
    let count = |partition: &mut Partition, key: &[u8], by: i64| {
        partition.execute(
            &PartitionRequest::new(key, PartitionCommand::Count { by }),
            crate::Now::from_secs(100),
            &mut Vec::new(),
        )
    };
    let value = |partition: &mut Partition, key: &[u8]| {
        let mut out = Vec::new();
        match partition.execute(
            &PartitionRequest::new(key, PartitionCommand::Get),
            crate::Now::from_secs(100),
            &mut out,
        ) {
            Outcome::Hit(hit) => out[hit.value_start..].to_vec(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(count(&mut partition, b"n", 1), Outcome::NotFound);
    set(&mut partition, b"n", b"10 ");
    assert!(matches!(count(&mut partition, b"n", -15), Outcome::Counter { value, .. } if value as i64 == -5));
    assert_eq!(value(&mut partition, b"n"), b"-5");
    set(&mut partition, b"max", b"9223372036854775807");
    assert_eq!(count(&mut partition, b"max", 1), Outcome::Overflow);
    assert_eq!(value(&mut partition, b"max"), b"9223372036854775807");
    for not_integer in [&b"abc"[..], b"", b"01", b"-0", b" 1", b"9223372036854775808"] {
        set(&mut partition, b"x", not_integer);
        assert_eq!(count(&mut partition, b"x", 1), Outcome::NonNumeric, "{not_integer:?}");
    }
}

/// Values near half a 2 MiB partition, under every eviction policy: a write over what the
/// partition takes is refused without evicting anything, one that needs more than the memory
/// left before the tail's position empties the log rather than walk its head past the tail,
/// and every acknowledged write answers the next read whole.
#[test]
fn values_near_half_the_log_never_walk_the_head_past_the_tail() {
    for eviction in [Eviction::S3Fifo, Eviction::Clock, Eviction::Fifo, Eviction::Lru] {
        let mut config = Config::new(2 << 20, 64);
        config.eviction = eviction;
        config.huge_pages = HugePages::Off;
        config.item_bytes_max = 1 << 20;
        let mut partition = Partition::new(config);
        let now = crate::Now::from_secs(100);
        let mut out = Vec::new();
        for (step, len) in [888_698, 984_869, 924_140, 399_821, 616_222, 925_446, 935_000, 1_000, 888_698]
            .into_iter()
            .enumerate()
        {
            let value = vec![step as u8; len];
            let command = PartitionCommand::Store {
                mode: StoreMode::Set,
                value: &value,
                flags: 0,
                expiry: Expiry::NEVER,
            };
            let key = [b'a'];
            match partition.execute(&PartitionRequest::new(&key, command), now, &mut out) {
                // Looked at without a read, so the policies evict it rather than keep it.
                Outcome::Stored { .. } => {
                    assert_eq!(
                        partition.peek(KeyHash::of(&key), &key, now),
                        Some(len),
                        "{eviction:?} step {step}"
                    )
                }
                Outcome::TooLarge => {
                    assert!(len > partition.item_bytes_max() - 64, "{eviction:?} step {step}")
                }
                other => panic!("{eviction:?} step {step}: {other:?}"),
            }
            assert!(partition.head <= partition.tail, "{eviction:?} step {step}: head past tail");
            assert!(partition.small.head <= partition.small.tail, "{eviction:?} step {step}");
        }
    }
}

#[test]
fn a_step_moves_the_count_by_two_and_a_read_across_it_is_told() {
    let mut partition = small(Access::Crew);
    let reader = partition.reader();
    let seen = reader.step();
    assert!(reader.step_unchanged(seen), "no step: the read stands");
    partition.begin_step();
    set(&mut partition, b"a", b"1");
    partition.end_step();
    assert!(!reader.step_unchanged(seen), "a step since: read again");
    assert_eq!(reader.step(), seen + 2);
}

#[test]
fn a_reader_waits_for_the_step_under_way() {
    let mut partition = small(Access::Crew);
    let reader = partition.reader();
    partition.begin_step();
    let waiting = std::thread::spawn(move || reader.step());
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(!waiting.is_finished(), "the reader waits while the step is under way");
    set(&mut partition, b"a", b"1");
    partition.end_step();
    assert_eq!(waiting.join().expect("the reader"), 2);
}

/// Keys past 254 bytes (a Redis key up to 64 KiB) are long keys: their length in a word of its
/// own. Written, read by the owner and by a CREW reader, updated in place and grown, listed by
/// a dump, deleted, and packed among short keys without either reading the other's bytes.
#[test]
fn long_keys_are_kept_read_listed_and_deleted() {
    let mut config = Config::new(1 << 20, 64);
    config.access = Access::Crew;
    config.huge_pages = HugePages::Off;
    let mut partition = Partition::new(config);
    let reader = partition.reader();
    let now = crate::Now::from_secs(100);
    let long: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).take(64 * 1024).collect();
    let edge = vec![b'e'; 255];
    let short = vec![b's'; 254];
    for (key, value) in [(&long, &b"v-long"[..]), (&edge, b"v-edge"), (&short, b"v-short")] {
        set(&mut partition, key, value);
    }
    for (key, value) in [(&long, &b"v-long"[..]), (&edge, b"v-edge"), (&short, b"v-short")] {
        assert_eq!(get(&mut partition, key).as_deref(), Some(value), "key of {} bytes", key.len());
        let mut out = Vec::new();
        match reader.get(KeyHash::of(key), key, now, &mut out) {
            Outcome::Hit(hit) => assert_eq!(&out[hit.value_start..hit.value_start + hit.value_len], value),
            other => panic!("reader: {other:?} for a key of {} bytes", key.len()),
        }
    }
    // A prefix of a long key is another key.
    assert_eq!(get(&mut partition, &long[..long.len() - 1]), None);
    // Updated in place (shorter), then grown (moved).
    set(&mut partition, &long, b"v");
    assert_eq!(get(&mut partition, &long).as_deref(), Some(&b"v"[..]));
    set(&mut partition, &long, &[7; 300]);
    assert_eq!(get(&mut partition, &long).as_deref(), Some(&[7; 300][..]));
    let mut listed: Vec<usize> = Vec::new();
    partition.dump(0..partition.main_buckets(), now, |item| listed.push(item.key.len()));
    listed.sort_unstable();
    assert_eq!(listed, vec![254, 255, 64 * 1024]);
    let mut read: Vec<Vec<u8>> = Vec::new();
    reader
        .dump(0..partition.main_buckets(), now, &mut |item: &crate::Dumped<'_>| read.push(item.key.to_vec()));
    assert!(read.contains(&long) && read.contains(&edge) && read.contains(&short));
    let deleted = partition.execute(
        &PartitionRequest::new(&long, PartitionCommand::Delete { cas: 0 }),
        now,
        &mut Vec::new(),
    );
    assert!(matches!(deleted, Outcome::Deleted), "{deleted:?}");
    assert_eq!(get(&mut partition, &long), None);
    assert_eq!(get(&mut partition, &edge).as_deref(), Some(&b"v-edge"[..]));
}
