//! qs-bench: Quicksilver's benchmarks: `qs-bench engine` (the engine in process) and
//! `qs-bench run` (a closed-loop load generator over memcached's text protocol, for any
//! compatible server). The side-by-side harness and the papers' workloads come with the bench
//! issue.
#![forbid(unsafe_code)]

pub mod engine;
pub mod load;
pub mod probe;
pub mod workload;
