//! qs-bench: Quicksilver's benchmarks: `qs-bench engine` (the engine in process),
//! `qs-bench run` (closed- and open-loop load over memcached's text protocol, for any
//! compatible server), `qs-bench native` (load over the native UDP protocol, with a recvmmsg echo
//! server as its floor), `qs-bench memtier` (memtier_benchmark against quicksilver, memcached and
//! Segcache, with the README's plot) and `qs-bench probe` (the machine's floor, measured with bare echo
//! servers).
//!
//! Unsafe code is denied except in the io_uring echo server, whose kernel interface requires it.
#![deny(unsafe_code)]
#![allow(clippy::too_many_lines)]

pub mod compare;
pub mod cpu;
pub mod engine;
pub mod latency;
pub mod load;
pub mod memtier;
pub mod native;
pub mod plot;
pub mod probe;
pub mod workload;
