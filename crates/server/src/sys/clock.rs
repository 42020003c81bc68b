//! The wall clock every worker reads once a turn (the codecs are given that time), moved as
//! a whole by `debugtime` (`--enable-debugtime`), so expiries and the times they are compared
//! with agree.

use qs_store::Now;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// Seconds `debugtime` has moved the clock by (0 unless the server runs with
/// `--enable-debugtime`).
static SHIFT_SECS: AtomicI64 = AtomicI64::new(0);

/// Now, as moved by `debugtime`.
pub fn now() -> Now {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let ms = since.map_or(0, |since| since.as_millis() as i64);
    Now::from_ms(ms.saturating_add(SHIFT_SECS.load(Relaxed).saturating_mul(1000)).max(0) as u64)
}

/// `debugtime`: moves the clock by `delta` seconds.
pub fn shift(delta: i32) {
    SHIFT_SECS.fetch_add(i64::from(delta), Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_milliseconds_come_from_one_reading() {
        let now = now();
        assert_eq!(u64::from(now.secs()), now.ms() / 1000);
        assert!(now.secs() > 1_600_000_000);
    }
}
