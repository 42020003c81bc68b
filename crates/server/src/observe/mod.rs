//! What the workers record for the operator, written on the request path and read by the
//! admin commands: the connection registry (`stats conns`, Redis's CLIENT LIST), watchers' log streams (`watch`),
//! hot keys, live miss-ratio curves, and per-prefix detail (`stats detail`).

pub mod clients;
pub mod counters;
pub mod detail;
pub mod hotkeys;
pub mod latency;
pub mod mrc;
pub mod registry;
pub mod sampler;
pub mod watch;
