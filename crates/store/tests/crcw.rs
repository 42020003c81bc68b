//! CRCW: two threads write and read one partition; every key ends at its writer's last value and
//! no read ever returns another key's value or torn bytes.

use qs_store::{
    Config, Expiry, HugePages, Outcome, PartitionCommand, PartitionRequest, SharedPartition, StoreMode,
};
use std::sync::Arc;

const NOW: u32 = 1_700_000_000;

#[test]
fn two_writers_and_readers_share_a_partition() {
    let mut config = Config::new(1 << 20, 64);
    config.huge_pages = HugePages::Off;
    let partition = Arc::new(SharedPartition::new(config));
    let threads: Vec<_> = (0..2u8)
        .map(|thread| {
            let partition = partition.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for round in 0..5_000u32 {
                    let key = [b'k', thread, (round % 50) as u8];
                    let value = [&key[..], &round.to_le_bytes()].concat();
                    let command = PartitionCommand::Store {
                        mode: StoreMode::Set,
                        value: &value,
                        flags: 0,
                        expiry: Expiry::NEVER,
                    };
                    assert!(matches!(
                        partition.execute(
                            &PartitionRequest::new(&key, command),
                            qs_store::Now::from_secs(NOW),
                            &mut out
                        ),
                        Outcome::Stored { .. }
                    ));
                    let other = [b'k', 1 - thread, (round % 50) as u8];
                    out.clear();
                    if let Outcome::Hit(hit) = partition.execute(
                        &PartitionRequest::new(&other, PartitionCommand::Get),
                        qs_store::Now::from_secs(NOW),
                        &mut out,
                    ) {
                        assert_eq!(&out[hit.value_start..hit.value_start + 3], &other[..], "foreign value");
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    partition.check_invariants();
    for thread in 0..2u8 {
        for slot in 0..50u32 {
            let key = [b'k', thread, slot as u8];
            let mut out = Vec::new();
            let Outcome::Hit(hit) = partition.execute(
                &PartitionRequest::new(&key, PartitionCommand::Get),
                qs_store::Now::from_secs(NOW),
                &mut out,
            ) else {
                panic!("lost {key:?}")
            };
            let last_round = 4_950 + slot;
            assert_eq!(&out[hit.value_start + 3..], &last_round.to_le_bytes(), "not the last write");
        }
    }
    assert_eq!(partition.stats().items, 100);
}
