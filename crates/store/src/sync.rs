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
