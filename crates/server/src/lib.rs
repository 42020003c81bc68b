//! qs-server: Quicksilver's runtime — one pinned worker thread per core, each with its own
//! epoll loop, connections and partitions; memcached's text and meta protocols over TCP;
//! MICA's request direction (CREW reads anywhere, writes handed to the owner over SPSC rings,
//! or a port per worker for partition-aware clients).
//!
//! Data path: socket bytes -> [`conn`] read buffer -> `qs_proto::parse` -> [`engine::Engine::route`]
//! -> run here ([`engine`]) or hand over ([`worker`] rings) -> reply bytes in request order
//! ([`conn::Output`]) -> one send per connection per loop turn.

pub mod admin;
pub mod config;
pub mod direct;
pub mod exec;
pub mod flashio;
pub mod native;
pub mod observe;
pub mod server;
pub mod session;
pub mod shared;
pub mod sys;
pub mod worker;

/// This build's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub use server::{partition_config, Server};
