//! qs-client: Quicksilver's client library.
//!
//! - [`native`]: the native protocol over UDP (docs/PROTOCOL.md) with client-assisted direction:
//!   each request goes straight to the port of the partition that owns its key, batched per
//!   partition per datagram, retransmitted when unanswered.
#![forbid(unsafe_code)]

pub mod native;

pub use native::{Error, NativeClient, Op, Reply, Retry};
pub use qs_proto::native::Status;
