//! CRCW (MICA §4.1.2): any thread may read and write a partition. Kept as the comparison point
//! for EREW and CREW, never the default.
//!
//! Reads are CREW's optimistic reads ([`crate::Reader`]), lock-free. Writes take the partition's
//! lock, which covers the log append and the index update together. MICA's CRCW locks each bucket
//! by compare-and-swap on its version and holds the log lock only for the append; with the engine's
//! owner-only state (tail, statistics, CAS sequence) behind one lock, writers to different buckets
//! of one partition serialise here. That is the cost CRCW is kept to show.

use crate::command::{Outcome, PartitionCommand, PartitionRequest};
use crate::config::{Access, Config};
use crate::item::Now;
use crate::partition::Partition;
use crate::reader::Reader;
use crate::stats::PartitionStats;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A partition any thread may read and write (`Send + Sync`; share it by reference or `Arc`).
pub struct SharedPartition {
    writer: Mutex<Partition>,
    reader: Reader,
}

impl SharedPartition {
    /// Builds the partition (its access mode is forced to CREW, whose version protocol the
    /// lock-free reads rely on).
    pub fn new(mut config: Config) -> SharedPartition {
        config.access = Access::Crew;
        let partition = Partition::new(config);
        let reader = partition.reader();
        SharedPartition { writer: Mutex::new(partition), reader }
    }

    fn lock(&self) -> MutexGuard<'_, Partition> {
        // A panic while holding the lock is a bug that already failed loudly; the partition's
        // state is only changed inside version brackets, so readers stay safe either way.
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one request: a plain get lock-free, anything else under the lock.
    pub fn execute(&self, request: &PartitionRequest<'_>, now: Now, out: &mut Vec<u8>) -> Outcome {
        match request.command {
            PartitionCommand::Get => self.reader.get(request.hash, request.key, now, out),
            _ => self.lock().execute(request, now, out),
        }
    }

    /// Runs requests in order, as [`SharedPartition::execute`] does each.
    pub fn execute_batch(
        &self,
        requests: &[PartitionRequest<'_>],
        now: Now,
        out: &mut Vec<u8>,
        outcomes: &mut Vec<Outcome>,
    ) {
        for request in requests {
            outcomes.push(self.execute(request, now, out));
        }
    }

    /// flush_all (see [`Partition::flush_all`]).
    pub fn flush_all(&self, now: Now, delay_secs: u32) {
        self.lock().flush_all(now, delay_secs, true);
    }

    /// The writers' counters (lock-free gets are not counted here).
    pub fn stats(&self) -> PartitionStats {
        self.inspect(|partition| *partition.stats())
    }

    /// Reads something of the partition under the lock (sizes, pages, statistics).
    pub fn inspect<R>(&self, read: impl FnOnce(&Partition) -> R) -> R {
        read(&self.lock())
    }

    /// Checks the partition's invariants (tests).
    pub fn check_invariants(&self) {
        self.lock().check_invariants();
    }
}
