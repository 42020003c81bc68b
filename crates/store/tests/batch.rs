//! The batch pipeline (prefetch stages and the lean GET/SET paths) must not change semantics:
//! the same requests run through `execute_batch`, in batches of random sizes with prefetch on or
//! off, give exactly the outcomes and bytes that one-at-a-time `execute` gives on a twin partition.

mod common;
use common::*;
use proptest::prelude::*;
use qs_store::{Eviction, Expiry, PartitionCommand, PartitionRequest, StoreMode};

#[derive(Clone, Debug)]
enum Op {
    Get(u8),
    Set(u8, usize, i64),
    Add(u8, usize),
    Delete(u8),
    Incr(u8),
    LongKey,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..40).prop_map(Op::Get),
        4 => (0u8..40, 0usize..200, prop_oneof![Just(0i64), Just(-1i64), 1i64..3]).prop_map(|(k, n, t)| Op::Set(k, n, t)),
        1 => (0u8..40, 0usize..50).prop_map(|(k, n)| Op::Add(k, n)),
        1 => (0u8..40).prop_map(Op::Delete),
        1 => (0u8..40).prop_map(Op::Incr),
        1 => Just(Op::LongKey),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn batches_answer_exactly_as_single_requests(
        ops in proptest::collection::vec(op(), 1..300),
        batch_sizes in proptest::collection::vec(1usize..40, 1..20),
        prefetch in any::<bool>(),
        cramped in any::<bool>(),
    ) {
        let (log, buckets) = if cramped { (4096, 2) } else { (1 << 20, 64) };
        let mut batched = partition(log, buckets, Eviction::ApproxLru);
        let mut single = partition(log, buckets, Eviction::ApproxLru);
        let keys: Vec<Vec<u8>> = (0..40u8).map(|k| format!("key-{k}").into_bytes()).collect();
        let long_key = vec![b'x'; 300];
        let values: Vec<Vec<u8>> = ops.iter().enumerate().map(|(i, op)| match op {
            Op::Set(_, len, _) | Op::Add(_, len) => {
                let mut v = format!("{i}:").into_bytes();
                v.resize((*len).max(v.len()), b'v');
                v
            }
            _ => Vec::new(),
        }).collect();
        let requests: Vec<PartitionRequest<'_>> = ops.iter().zip(&values).map(|(op, value)| match op {
            Op::Get(k) => PartitionRequest::new(&keys[*k as usize], PartitionCommand::Get),
            Op::Set(k, _, ttl) => PartitionRequest::new(&keys[*k as usize], PartitionCommand::Store {
                mode: StoreMode::Set, value, flags: 0, expiry: Expiry::from_exptime(*ttl, qs_store::Now::from_secs(NOW)),
            }),
            Op::Add(k, _) => PartitionRequest::new(&keys[*k as usize], PartitionCommand::Store {
                mode: StoreMode::Add, value, flags: 9, expiry: Expiry::NEVER,
            }),
            Op::Delete(k) => PartitionRequest::new(&keys[*k as usize], PartitionCommand::Delete { cas: 0 }),
            Op::Incr(k) => PartitionRequest::new(&keys[*k as usize], PartitionCommand::Arith { delta: 1, decrement: false, cas: 0 }),
            Op::LongKey => PartitionRequest::new(&long_key, PartitionCommand::Get),
        }).collect();

        let (mut batch_out, mut batch_outcomes) = (Vec::new(), Vec::new());
        let (mut start, mut sizes) = (0, batch_sizes.iter().cycle());
        while start < requests.len() {
            let end = (start + sizes.next().unwrap()).min(requests.len());
            batched.execute_batch(&requests[start..end], qs_store::Now::from_secs(NOW), prefetch, &mut batch_out, &mut batch_outcomes);
            start = end;
        }
        let (mut single_out, mut single_outcomes) = (Vec::new(), Vec::new());
        for request in &requests {
            single_outcomes.push(single.execute(request, qs_store::Now::from_secs(NOW), &mut single_out));
        }
        prop_assert_eq!(&batch_outcomes, &single_outcomes);
        prop_assert_eq!(&batch_out, &single_out);
        prop_assert_eq!(batched.stats(), single.stats());
        batched.check_invariants();
    }
}
