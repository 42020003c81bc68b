//! qs-store: Quicksilver's engine, MICA's cache mode (NSDI'14 §4.3.1–4.3.2).
//!
//! A [`Partition`] is a circular log of items plus a lossy set-associative index over it, owned
//! by one thread. Requests come in batches ([`Partition::execute_batch`]) and go through a
//! prefetch pipeline (buckets, then items, then execution). Time is an argument ([`Now`]:
//! unix seconds and milliseconds from one reading); the crate reads no clock, does no I/O and
//! starts no threads.
//!
//! Module map: [`keyhash`] (which hash bits do what), [`region`] (pages; the only `unsafe`),
//! [`words`] (byte copies over shared atomic words), [`item`] (entry layout and memcached item
//! rules), [`index`] (buckets and slots), [`log`] (circular log memory), [`partition`] (the
//! operations), [`reader`] (CREW optimistic reads), [`command`] (requests and outcomes),
//! [`front`] (a reply cache validated by write epochs, for hot keys under EREW), [`hot`] (the
//! most frequent keys in fixed memory, for `stats hotkeys`), [`mrc`] (LRU stack
//! distances, exact and sampled: miss-ratio curves, for `stats mrc` and qs-sim).

pub mod arena;
pub mod command;
pub mod config;
pub mod crcw;
pub mod flash;
pub mod front;
pub mod hot;
pub mod index;
pub mod item;
pub mod keyhash;
pub mod log;
pub mod mrc;
pub mod partition;
pub mod persist;
pub mod pinned;
pub mod reader;
pub mod region;
pub mod stats;
mod sync;
pub mod words;

pub use command::{
    deliver, Append, Hit, MetaGet, Outcome, PartitionCommand, PartitionRequest, PinCharge, StoreMode,
    ValueSink,
};
pub use config::{Access, Config, Eviction};
pub use crcw::SharedPartition;
pub use item::{Expiry, Now, KEY_BYTES_MAX, LONG_KEY_BYTES_MAX};
pub use keyhash::KeyHash;
pub use partition::{
    Arriving, Dumped, Evicted, FlashCounters, FlashRead, Partition, Promoted, Resolved, FLASH_READ_BYTES,
};
pub use pinned::{Charge, LogValue, WeakLogValue};
pub use reader::{Gone, Reader};
pub use region::{HugePages, PageKind};
pub use stats::PartitionStats;
