//! Commands that touch no key: `version`, `stats` in all its groups and `stats settings`.

pub mod http;
pub mod info;
pub mod metrics;
pub mod metrics_own;
pub mod stats;

/// The version we report: memcached's, whose behaviour we follow (clients pick features by
/// it), then our own name.
pub const VERSION: &str = "1.6.45-quicksilver";
/// The reply to `version`.
pub const VERSION_REPLY: &[u8] = b"VERSION 1.6.45-quicksilver\r\n";
