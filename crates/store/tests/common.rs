//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use qs_store::{
    Config, Eviction, Expiry, HugePages, Outcome, Partition, PartitionCommand, PartitionRequest, StoreMode,
};

pub const NOW: u32 = 1_700_000_000;

pub fn partition(log_bytes: usize, bucket_count: usize, eviction: Eviction) -> Partition {
    let mut config = Config::new(log_bytes, bucket_count);
    config.eviction = eviction;
    config.huge_pages = HugePages::Off;
    Partition::new(config)
}

pub fn run(
    partition: &mut Partition,
    key: &[u8],
    command: PartitionCommand<'_>,
    now: u32,
) -> (Outcome, Vec<u8>) {
    let mut out = Vec::new();
    let outcome =
        partition.execute(&PartitionRequest::new(key, command), qs_store::Now::from_secs(now), &mut out);
    partition.check_invariants();
    (outcome, out)
}

pub fn get(partition: &mut Partition, key: &[u8], now: u32) -> Option<Vec<u8>> {
    match run(partition, key, PartitionCommand::Get, now) {
        (Outcome::Hit(hit), out) => Some(out[hit.value_start..hit.value_start + hit.value_len].to_vec()),
        (Outcome::Miss, _) => None,
        (other, _) => panic!("get answered {other:?}"),
    }
}

pub fn store(partition: &mut Partition, mode: StoreMode, key: &[u8], value: &[u8], now: u32) -> Outcome {
    store_with(partition, mode, key, value, 0, 0, now)
}

pub fn store_with(
    partition: &mut Partition,
    mode: StoreMode,
    key: &[u8],
    value: &[u8],
    flags: u32,
    exptime: i64,
    now: u32,
) -> Outcome {
    let expiry = Expiry::from_exptime(exptime, qs_store::Now::from_secs(now));
    run(partition, key, PartitionCommand::Store { mode, value, flags, expiry }, now).0
}

pub fn set(partition: &mut Partition, key: &[u8], value: &[u8], now: u32) -> u64 {
    match store(partition, StoreMode::Set, key, value, now) {
        Outcome::Stored { cas } => cas,
        other => panic!("set answered {other:?}"),
    }
}
