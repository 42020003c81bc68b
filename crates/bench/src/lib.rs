//! qs-bench: Quicksilver's benchmarks. Today `qs-bench engine` (the engine in process); the load
//! generator and side-by-side harness come with the bench issue.
#![forbid(unsafe_code)]

pub mod engine;
pub mod workload;
