//! The atomics the engine uses: std's normally, loom's when the read/write protocol is model-checked
//! (`RUSTFLAGS="--cfg loom"`).

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64};
#[cfg(loom)]
pub use loom::sync::Arc;
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicU32, AtomicU64};
#[cfg(not(loom))]
pub use std::sync::Arc;

/// Waits a moment for the owner to finish a change (under loom: lets the model switch threads).
#[inline(always)]
pub fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
