//! qs-server: Quicksilver's runtime — one pinned worker thread per core, each with its own
//! epoll loop, connections and partitions; memcached's text, meta and binary protocols over
//! TCP, UNIX sockets, TLS and UDP; MICA's request direction (CREW reads anywhere, writes handed
//! to the owner over SPSC rings, or a port per worker for partition-aware clients).
//!
//! Data path: socket bytes -> `session` read buffer -> `codec` (one request type) ->
//! `exec::Engine::route` -> run here (`exec`) or hand over (`direct` rings) -> reply bytes in
//! request order ([`session::Output`]) -> one send per connection per loop turn (`worker`).
//! The components, bottom up: [`sys`], [`config`], [`observe`], `net`, [`session`], `codec`,
//! `flashio`, `script`, `shared`, `admin`, `exec`, `direct`, `native`, `worker`, `warm`, [`server`];
//! none imports one above it (scripts/check-layout.py). Only the ones linked here are public:
//! what the binary, the fuzz targets and the tests use; the rest are the crate's own.

pub(crate) mod admin;
pub(crate) mod cas;
pub(crate) mod codec;
pub mod config;
pub(crate) mod direct;
pub(crate) mod exec;
pub(crate) mod flashio;
pub(crate) mod native;
pub(crate) mod net;
pub mod observe;
pub(crate) mod script;
pub mod server;
pub mod session;
pub(crate) mod shared;
pub mod sys;
pub(crate) mod warm;
pub(crate) mod worker;

/// This build's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub use server::Server;
