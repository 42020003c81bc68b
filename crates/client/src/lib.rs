//! qs-client: Quicksilver's client library.
//!
//! - [`native`]: the native protocol over UDP (docs/PROTOCOL.md) with client-assisted direction:
//!   each request goes straight to the port of the partition that owns its key, batched per
//!   partition per datagram, retransmitted when unanswered.
//! - [`text`]: memcached's text protocol over TCP with pipelining, for memcached and any
//!   compatible server; partition-aware mode sends each request to its owner's worker port, and
//!   fleet mode spreads keys over many servers with [`ketama`] consistent hashing as
//!   libmemcached does, so qs-client shares a mixed memcached/Quicksilver fleet with other clients.
//!
//! Both take the same [`Op`]s and answer with the same [`Reply`]: outcomes (a miss, a refused
//! add) are statuses, errors are only what kept an operation from an answer.
#![forbid(unsafe_code)]

pub mod ketama;
pub mod native;
pub mod text;

pub use ketama::{Continuum, Flavor, Server};
pub use native::{Error, NativeClient, Op, Reply, Retry, Socket};
pub use qs_proto::native::Status;
pub use text::TextClient;
