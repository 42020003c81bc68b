//! The meta protocol parser: each input line is turned into a meta command (its first byte
//! picks mg ms md ma mn me), so the fuzzer spends its time on flags, keys and data blocks.
//! Invariants: qs_proto::check.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qs_proto::{check, Limits};

const COMMANDS: [&[u8]; 6] = [b"mg ", b"ms ", b"md ", b"ma ", b"mn", b"me "];

fuzz_target!(|input: &[u8]| {
    let mut data = Vec::with_capacity(input.len() + 64);
    let mut splits = Vec::new();
    for line in input.split_inclusive(|&b| b == b'\n') {
        let Some((&pick, rest)) = line.split_first() else { continue };
        data.extend_from_slice(COMMANDS[usize::from(pick) % COMMANDS.len()]);
        data.extend_from_slice(rest);
        if pick & 0x80 != 0 {
            splits.push(data.len() - rest.len() / 2);
        }
    }
    let limits = Limits { item_bytes_max: 100, now_ms: 0, databases: 16 };
    if let Err(broken) = check::check_stream(&data, &splits, &limits) {
        panic!("{broken}");
    }
});
