//! qs-sim: cache simulators that drive the real engine. A request stream (synthetic, or a real
//! trace read as a stream) is replayed against exact reference models (LRU by stack distance,
//! FIFO, S3-FIFO, idealised LFU) and against qs-store's partitions under simulated time, so every figure of the engine
//! can be held against an exact answer: miss-ratio curves by cache size and policy, with the
//! lossy index's cost measured against a twin whose index never overflows. Beside them: the
//! partition skew of zipf popularity under hash partitioning (exact), and the set-associative
//! front cache of the NIC-cache paper.
#![forbid(unsafe_code)]

pub mod engine;
pub mod fifo;
pub mod front;
pub mod hotkeys;
pub mod lfu;
pub mod live;
pub mod lru;
pub mod merge;
pub mod mrc;
pub mod plot;
pub mod rng;
pub mod s3fifo;
pub mod skew;
pub mod stream;
pub mod trace;
pub mod zipf;
