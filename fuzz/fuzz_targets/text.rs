//! The text protocol parser over arbitrary bytes: the first two bytes choose where the
//! stream is split into reads, the rest is the stream. Invariants: qs_proto::check.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qs_proto::{check, Limits};

fuzz_target!(|input: &[u8]| {
    let (splits, data) = match input {
        [a, b, data @ ..] => (vec![usize::from(*a), usize::from(*a) + usize::from(*b) * 16], data),
        _ => (Vec::new(), input),
    };
    // A small item limit so the too-large paths are reached with small inputs.
    let limits = Limits { item_bytes_max: 100, now_ms: 0, databases: 16 };
    if let Err(broken) = check::check_stream(data, &splits, &limits) {
        panic!("{broken}");
    }
});
