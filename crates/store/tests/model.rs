//! Random operation sequences against an exact model. In a roomy partition (index load well
//! under one half, log never full) nothing may be lost: every outcome and value matches the model.
//! In a cramped one the engine may lose keys (evictions), but a get never returns another key's
//! value, an old or deleted value, an expired value or torn bytes, and outcomes differ from the
//! model only as if the lost key were absent. In store mode nothing may be lost however cramped
//! the partition: a write that does not fit is refused cleanly and leaves the old version, and the
//! allocator's invariants are checked after every step.

mod common;
use common::*;
use proptest::prelude::*;
use qs_store::{
    Config, Eviction, Expiry, HugePages, Outcome, Partition, PartitionCommand, PartitionRequest, StoreMode,
};
use std::collections::HashMap;

#[derive(Clone, Debug)]
enum Op {
    Store {
        key: u8,
        mode: u8,
        len: usize,
        flags: u32,
        ttl: i64,
    },
    Cas {
        key: u8,
        len: usize,
        right: bool,
    },
    Number {
        key: u8,
        value: u64,
    },
    Arith {
        key: u8,
        delta: u64,
        decrement: bool,
    },
    Delete {
        key: u8,
    },
    Touch {
        key: u8,
        ttl: i64,
    },
    Get {
        key: u8,
        touch: Option<i64>,
    },
    Advance {
        secs: u32,
    },
    Flush,
    /// `cache_memlimit`: the log's size becomes this many thousandths of its room.
    Resize {
        permille: u32,
    },
}

fn ttl() -> impl Strategy<Value = i64> {
    prop_oneof![4 => Just(0i64), 2 => 1i64..4, 1 => Just(-1i64)]
}

fn op(keys: u8) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..keys, 0u8..5, 0usize..120, prop_oneof![Just(0u32), any::<u32>()], ttl())
            .prop_map(|(key, mode, len, flags, ttl)| Op::Store { key, mode, len, flags, ttl }),
        1 => (0..keys, 0usize..60, any::<bool>()).prop_map(|(key, len, right)| Op::Cas { key, len, right }),
        1 => (0..keys, prop_oneof![Just(u64::MAX), 0u64..1000]).prop_map(|(key, value)| Op::Number { key, value }),
        2 => (0..keys, 0u64..200, any::<bool>()).prop_map(|(key, delta, decrement)| Op::Arith { key, delta, decrement }),
        2 => (0..keys).prop_map(|key| Op::Delete { key }),
        1 => (0..keys, ttl()).prop_map(|(key, ttl)| Op::Touch { key, ttl }),
        8 => (0..keys, proptest::option::weighted(0.2, ttl())).prop_map(|(key, touch)| Op::Get { key, touch }),
        1 => (0u32..3).prop_map(|secs| Op::Advance { secs }),
        1 => Just(Op::Flush),
    ]
}

/// `op`, with now and then a change of the log's size.
fn op_or_resize(keys: u8) -> impl Strategy<Value = Op> {
    prop_oneof![30 => op(keys), 1 => (0u32..=1000).prop_map(|permille| Op::Resize { permille })]
}

#[derive(Clone, Debug, PartialEq)]
struct Entry {
    value: Vec<u8>,
    flags: u32,
    expiry: Expiry,
    cas: u64,
}

struct Harness {
    partition: Partition,
    model: HashMap<u8, Entry>,
    now: u32,
    version: u64,
    lossy: bool,
}

/// A write refused in store mode leaves the model as it was.
fn refused(outcome: &Outcome, harness: &Harness) -> bool {
    matches!(outcome, Outcome::OutOfMemory) && harness.partition.is_store_mode()
}

fn key_bytes(key: u8) -> Vec<u8> {
    format!("key:{key}").into_bytes()
}

impl Harness {
    fn value(&mut self, key: u8, len: usize) -> Vec<u8> {
        self.version += 1;
        let mut value = format!("{key}/{}/", self.version).into_bytes();
        value.resize(len.max(value.len()), b'.');
        value
    }

    fn present(&self, key: u8) -> Option<&Entry> {
        self.model.get(&key).filter(|entry| !entry.expiry.is_expired(qs_store::Now::from_secs(self.now)))
    }

    fn run(&mut self, key: u8, command: PartitionCommand<'_>) -> (Outcome, Vec<u8>) {
        let mut out = Vec::new();
        let k = key_bytes(key);
        let outcome = self.partition.execute(
            &PartitionRequest::new(&k, command),
            qs_store::Now::from_secs(self.now),
            &mut out,
        );
        self.partition.check_invariants();
        (outcome, out)
    }

    /// The engine acted as if `key` were absent while the model has it: allowed only when lossy.
    fn lost(&mut self, key: u8, what: &str) {
        assert!(self.lossy, "roomy partition lost key {key} ({what}); stats {:?}", self.partition.stats());
        let stats = self.partition.stats();
        assert!(stats.log_evictions + stats.index_evictions > 0, "lost key {key} without any eviction");
        self.model.remove(&key);
    }

    /// `Partition::dump` lists exactly the keys a get would find, each once, with the model's
    /// CAS, expiry and length (in a lossy partition, a subset of the model's keys).
    fn check_dump(&self) {
        let mut dumped = HashMap::new();
        let buckets = self.partition.main_buckets();
        // In two ranges, as the server walks a partition a chunk at a time.
        for range in [0..buckets / 2, buckets / 2..buckets] {
            self.partition.dump(range, qs_store::Now::from_secs(self.now), |item| {
                let entry = (item.cas, item.expiry, item.value_len);
                assert!(dumped.insert(item.key.to_vec(), entry).is_none(), "{:?} listed twice", item.key);
            });
        }
        if !self.partition.is_store_mode() {
            // Another thread's view (stats cachedump) lists the same.
            let mut read = HashMap::new();
            self.partition.reader().dump(0..buckets, qs_store::Now::from_secs(self.now), |item| {
                read.insert(item.key.to_vec(), (item.cas, item.expiry, item.value_len));
            });
            assert_eq!(read, dumped, "a reader's dump differs from the owner's");
        }
        let expected: HashMap<Vec<u8>, _> = (0..=u8::MAX)
            .filter_map(|key| self.present(key).map(|e| (key_bytes(key), (e.cas, e.expiry, e.value.len()))))
            .collect();
        if self.lossy {
            for (key, entry) in &dumped {
                assert_eq!(expected.get(key), Some(entry), "dump of {:?}", String::from_utf8_lossy(key));
            }
        } else {
            assert_eq!(dumped, expected);
        }
    }

    /// Runs `ops`, checking the dump every 25 steps and at the end.
    fn run_ops(&mut self, ops: Vec<Op>) {
        for (n, op) in ops.into_iter().enumerate() {
            self.step(op);
            if n % 25 == 0 {
                self.check_dump();
            }
        }
        self.check_dump();
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Store { key, mode, len, flags, ttl } => self.store(key, mode, len, flags, ttl),
            Op::Cas { key, len, right } => self.cas(key, len, right),
            Op::Number { key, value } => {
                let text = value.to_string().into_bytes();
                let expiry = Expiry::NEVER;
                let command =
                    PartitionCommand::Store { mode: StoreMode::Set, value: &text, flags: 0, expiry };
                let (outcome, _) = self.run(key, command);
                if refused(&outcome, self) {
                    return;
                }
                let Outcome::Stored { cas } = outcome else { panic!("set failed: {outcome:?}") };
                self.model.insert(key, Entry { value: text, flags: 0, expiry, cas });
            }
            Op::Arith { key, delta, decrement } => self.arith(key, delta, decrement),
            Op::Delete { key } => {
                let expected = self.present(key).is_some();
                let (outcome, _) = self.run(key, PartitionCommand::Delete { cas: 0 });
                match (outcome, expected) {
                    (Outcome::Deleted, true) | (Outcome::NotFound, false) => {}
                    (Outcome::NotFound, true) => self.lost(key, "delete"),
                    other => panic!("delete: {other:?}"),
                }
                self.model.remove(&key);
            }
            Op::Touch { key, ttl } => {
                let expiry = Expiry::from_exptime(ttl, qs_store::Now::from_secs(self.now));
                let expected = self.present(key).is_some();
                match (self.run(key, PartitionCommand::Touch { expiry }).0, expected) {
                    (Outcome::Touched, true) => self.model.get_mut(&key).unwrap().expiry = expiry,
                    (Outcome::NotFound, false) => {}
                    (Outcome::NotFound, true) => self.lost(key, "touch"),
                    other => panic!("touch: {other:?}"),
                }
            }
            Op::Get { key, touch } => self.get(key, touch),
            Op::Advance { secs } => self.now += secs,
            Op::Flush => {
                self.partition.flush_all(qs_store::Now::from_secs(self.now), 0, true);
                self.model.clear();
            }
            Op::Resize { permille } => {
                let room = self.partition.log_room();
                let bytes = (room as u64 * u64::from(permille) / 1000) as usize;
                let changed = self.partition.set_log_limit(bytes);
                assert_eq!(
                    changed,
                    bytes >= self.partition.log_limit_min() && !self.partition.is_store_mode()
                );
                if changed {
                    assert_eq!(self.partition.log_bytes(), bytes & !7);
                }
                self.partition.check_invariants();
            }
        }
    }

    fn store(&mut self, key: u8, mode: u8, len: usize, flags: u32, ttl: i64) {
        let mode =
            [StoreMode::Set, StoreMode::Add, StoreMode::Replace, StoreMode::Append, StoreMode::Prepend]
                [mode as usize];
        let data = self.value(key, len);
        let expiry = Expiry::from_exptime(ttl, qs_store::Now::from_secs(self.now));
        let current = self.present(key).cloned();
        let command = PartitionCommand::Store { mode, value: &data, flags, expiry };
        let (outcome, _) = self.run(key, command);
        if refused(&outcome, self) {
            return;
        }
        let expected_stored = match mode {
            StoreMode::Set => true,
            StoreMode::Add => current.is_none(),
            _ => current.is_some(),
        };
        let cas = match outcome {
            Outcome::Stored { cas } if expected_stored => cas,
            Outcome::NotStored if !expected_stored => return,
            Outcome::Stored { cas } if mode == StoreMode::Add => {
                self.lost(key, "add");
                cas
            }
            Outcome::NotStored
                if matches!(mode, StoreMode::Replace | StoreMode::Append | StoreMode::Prepend) =>
            {
                self.lost(key, "replace/append/prepend");
                return;
            }
            other => panic!("{mode:?}: {other:?} (model {current:?})"),
        };
        let entry = match (
            mode,
            self.model.get(&key).filter(|e| !e.expiry.is_expired(qs_store::Now::from_secs(self.now))),
        ) {
            (StoreMode::Append, Some(old)) => {
                Entry { value: [&old.value[..], &data].concat(), cas, ..old.clone() }
            }
            (StoreMode::Prepend, Some(old)) => {
                Entry { value: [&data[..], &old.value].concat(), cas, ..old.clone() }
            }
            _ => Entry { value: data, flags, expiry, cas },
        };
        self.model.insert(key, entry);
    }

    fn cas(&mut self, key: u8, len: usize, right: bool) {
        let data = self.value(key, len);
        let current = self.present(key).cloned();
        let token = match (&current, right) {
            (Some(entry), true) => entry.cas,
            (Some(entry), false) => entry.cas ^ 0x10000,
            (None, _) => 12345 << 16,
        };
        let command = PartitionCommand::Store {
            mode: StoreMode::Cas(token),
            value: &data,
            flags: 0,
            expiry: Expiry::NEVER,
        };
        match (self.run(key, command).0, &current) {
            (outcome, _) if refused(&outcome, self) => {}
            (Outcome::Stored { cas }, Some(_)) if right => {
                self.model.insert(key, Entry { value: data, flags: 0, expiry: Expiry::NEVER, cas });
            }
            (Outcome::Exists, Some(_)) if !right => {}
            (Outcome::NotFound, None) => {}
            (Outcome::NotFound, Some(_)) => self.lost(key, "cas"),
            other => panic!("cas: {other:?} (model {current:?})"),
        }
    }

    fn arith(&mut self, key: u8, delta: u64, decrement: bool) {
        let current = self.present(key).cloned();
        let (outcome, _) = self.run(key, PartitionCommand::Arith { delta, decrement, cas: 0 });
        if refused(&outcome, self) {
            return;
        }
        let Some(entry) = current else {
            assert_eq!(outcome, Outcome::NotFound);
            return;
        };
        let number = qs_store::item::parse_counter(&entry.value);
        match (outcome, number) {
            (Outcome::NotFound, _) => self.lost(key, "arith"),
            (Outcome::NonNumeric, None) => {}
            (Outcome::Counter { value, cas, expiry }, Some(number)) => {
                assert_eq!(expiry, entry.expiry, "incr/decr keeps the expiry");
                let expected =
                    if decrement { number.saturating_sub(delta) } else { number.wrapping_add(delta) };
                assert_eq!(value, expected);
                let mut text = expected.to_string().into_bytes();
                if text.len() < entry.value.len() {
                    text.resize(entry.value.len(), b' ');
                }
                self.model.insert(key, Entry { value: text, cas, ..entry });
            }
            other => panic!("arith on {:?}: {other:?}", String::from_utf8_lossy(&entry.value)),
        }
    }

    fn get(&mut self, key: u8, touch: Option<i64>) {
        let expiry = touch.map(|ttl| Expiry::from_exptime(ttl, qs_store::Now::from_secs(self.now)));
        let command = match expiry {
            Some(expiry) => PartitionCommand::GetAndTouch { expiry },
            None => PartitionCommand::Get,
        };
        let current = self.present(key).cloned();
        let (outcome, out) = self.run(key, command);
        match (outcome, current) {
            (Outcome::Hit(hit), Some(entry)) => {
                let value = &out[hit.value_start..hit.value_start + hit.value_len];
                assert_eq!(value, &entry.value[..], "key {key} returned a wrong value");
                assert_eq!((hit.flags, hit.cas), (entry.flags, entry.cas));
                if let Some(expiry) = expiry {
                    self.model.get_mut(&key).unwrap().expiry = expiry;
                }
            }
            (Outcome::Hit(hit), None) => {
                panic!(
                    "key {key} answered {:?} but is absent",
                    String::from_utf8_lossy(&out[hit.value_start..])
                )
            }
            (Outcome::Miss, Some(_)) => self.lost(key, "get"),
            (Outcome::Miss, None) => {}
            (other, _) => panic!("get: {other:?}"),
        }
    }
}

fn harness(log_bytes: usize, buckets: usize, eviction: Eviction, lossy: bool) -> Harness {
    harness_with_room(log_bytes, 0, buckets, eviction, lossy)
}

/// As [`harness`], with an index that keeps its size (`-o no_hashexpand`) when `fixed`.
fn harness_index(log_bytes: usize, buckets: usize, eviction: Eviction, fixed: bool) -> Harness {
    let mut harness = harness(log_bytes, buckets, eviction, true);
    if fixed {
        let mut config = Config::new(log_bytes, buckets);
        config.eviction = eviction;
        config.huge_pages = HugePages::Off;
        config.index_levels = 0;
        harness.partition = Partition::new(config);
    }
    harness
}

fn harness_with_room(
    log_bytes: usize,
    room: usize,
    buckets: usize,
    eviction: Eviction,
    lossy: bool,
) -> Harness {
    let mut config = Config::new(log_bytes, buckets);
    config.log_room_bytes = room;
    config.eviction = eviction;
    config.huge_pages = HugePages::Off;
    Harness { partition: Partition::new(config), model: HashMap::new(), now: NOW, version: 0, lossy }
}

/// A store-mode partition: `arena_bytes` of arena, `buckets` main buckets, `spares` spare ones.
fn store_harness(arena_bytes: usize, buckets: usize, spares: usize) -> Harness {
    let mut config = Config::store(arena_bytes, buckets);
    config.spare_buckets = spares;
    config.huge_pages = HugePages::Off;
    Harness { partition: Partition::new(config), model: HashMap::new(), now: NOW, version: 0, lossy: false }
}

fn eviction() -> impl Strategy<Value = Eviction> {
    prop_oneof![
        Just(Eviction::Fifo),
        Just(Eviction::Lru),
        Just(Eviction::ApproxLru),
        Just(Eviction::Clock),
        Just(Eviction::S3Fifo)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn roomy_partition_loses_nothing(eviction in eviction(), ops in proptest::collection::vec(op(24), 1..300)) {
        // 24 keys in 16 buckets of 15 slots: load 0.1; 1 MiB of log never fills.
        let mut harness = harness(1 << 20, 16, eviction, false);
        harness.run_ops(ops);
        let stats = *harness.partition.stats();
        prop_assert_eq!(stats.log_evictions + stats.index_evictions, 0);
    }

    #[test]
    fn cramped_partition_never_lies(
        eviction in eviction(),
        log_bytes in proptest::sample::select(vec![2048usize, 1368, 3000]),
        ops in proptest::collection::vec(op(32), 200..600),
        fixed_index in any::<bool>(),
    ) {
        // 32 keys in two buckets (30 slots) over a 1.3-3 KiB log: both kinds of eviction
        // happen (index evictions where the index keeps its size, splits where it grows);
        // logs that are not a power of two skip the rest of each lap.
        let mut harness = harness_index(log_bytes, 2, eviction, fixed_index);
        harness.run_ops(ops);
    }

    /// cache_memlimit at random moments: a log that grows and shrinks (evicting what lies past
    /// its new end) still never lies, and its structure holds after every step.
    #[test]
    fn resized_partition_never_lies(
        eviction in eviction(),
        log_bytes in proptest::sample::select(vec![2048usize, 1368, 3000]),
        ops in proptest::collection::vec(op_or_resize(32), 200..600),
    ) {
        let mut harness = harness_with_room(log_bytes, 3 * log_bytes, 2, eviction, true);
        harness.run_ops(ops);
    }

    /// Growing never loses anything in a roomy partition.
    #[test]
    fn growing_partition_loses_nothing(ops in proptest::collection::vec(op(24), 1..300)) {
        let mut harness = harness_with_room(1 << 20, 4 << 20, 16, Eviction::ApproxLru, false);
        for (n, op) in ops.into_iter().enumerate() {
            if n % 50 == 0 {
                let bytes = harness.partition.log_bytes() + (256 << 10);
                assert!(harness.partition.set_log_limit(bytes));
            }
            harness.step(op);
        }
        harness.check_dump();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Store mode in a cramped partition (32 keys, 2 main buckets of 15 slots, so chains form;
    /// a 3 KiB arena that random sizes overflow): never a lost key, only clean refusals.
    #[test]
    fn store_mode_loses_nothing(spares in 1usize..4, ops in proptest::collection::vec(op(32), 100..500)) {
        let mut harness = store_harness(3072, 2, spares);
        harness.run_ops(ops);
        let stats = *harness.partition.stats();
        prop_assert_eq!(stats.log_evictions + stats.index_evictions, 0);
    }
}

#[test]
fn store_mode_cases_do_refuse_and_chain() {
    // The same shape as the property test, driven to show that refusals and chains occur there.
    let mut harness = store_harness(3072, 2, 2);
    for round in 0..64u8 {
        harness.step(Op::Store { key: round % 32, mode: 0, len: 4, flags: 0, ttl: 0 });
    }
    assert!(harness.partition.spare_buckets().0 > 0, "32 keys in 30 main slots chain a spare bucket");
    for round in 0..64u8 {
        harness.step(Op::Store { key: round % 32, mode: 0, len: 110, flags: 0, ttl: 0 });
    }
    assert!(harness.partition.stats().refused > 0, "large values overflow the arena");
    for key in 0..32u8 {
        harness.step(Op::Get { key, touch: None });
    }
}

#[test]
fn cramped_cases_do_evict() {
    // The same shape as the property test, driven to show that both kinds of loss occur there
    // with a fixed index, and that a growing one splits its buckets there.
    let mut grows = harness_index(2048, 2, Eviction::Fifo, false);
    let mut harness = harness_index(2048, 2, Eviction::Fifo, true);
    for round in 0..250u8 {
        for harness in [&mut harness, &mut grows] {
            harness.step(Op::Store { key: round % 32, mode: 0, len: 4, flags: 0, ttl: 0 });
            harness.step(Op::Get { key: round.wrapping_mul(7) % 32, touch: None });
        }
    }
    assert!(harness.partition.stats().index_evictions > 0, "small items overflow the buckets first");
    assert!(grows.partition.main_buckets() > 2, "a growing index splits instead");
    for round in 0..250u8 {
        harness.step(Op::Store { key: round % 32, mode: 0, len: 100, flags: 0, ttl: 0 });
    }
    assert!(harness.partition.stats().log_evictions > 0, "large items fill the log first");
}
