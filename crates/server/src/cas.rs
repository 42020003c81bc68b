//! memcached 1.6.27's `E<cas>`: a CAS value the client chooses for the item it writes (`ms`,
//! `mg` with `N`, `md`, `ma`), which later reads report and `C` compares against.
//!
//! Quicksilver's CAS values come from each partition's sequence and its index, kept in the
//! item header's 48 bits; a client's value fits neither. So the values clients chose live
//! beside the log, in a table from the item version's own CAS (unique for ever: sequences
//! never repeat) to the chosen one. Replies translate through it (`Engine::cas_out`) and
//! compares translate back (`Engine::cas_expected`). The table holds at most
//! [`ENTRIES_MAX`] versions, oldest dropped first; a version dropped from it, or one written
//! before a restart, reports its own CAS again, which a client's compare then refuses (`EX`):
//! never a wrong match. Until a client sends `E`, the table is never locked.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

/// Versions whose chosen CAS is kept (about 3 MiB at most).
pub const ENTRIES_MAX: usize = 1 << 16;

/// The chosen CAS of each item version written with `E`.
#[derive(Default)]
pub struct ExplicitCas {
    used: AtomicBool,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    chosen: HashMap<u64, u64>,
    order: VecDeque<u64>,
}

impl ExplicitCas {
    /// Notes that the version with CAS `own` was given `chosen`.
    pub fn insert(&self, own: u64, chosen: u64) {
        self.used.store(true, Relaxed);
        let mut table = self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if table.chosen.insert(own, chosen).is_none() {
            table.order.push_back(own);
        }
        while table.order.len() > ENTRIES_MAX {
            if let Some(oldest) = table.order.pop_front() {
                table.chosen.remove(&oldest);
            }
        }
    }

    /// The CAS a client sees for the version whose own CAS is `own`. Until a client chooses
    /// one (meta `E`), one relaxed load, inlined where the reply is written.
    #[inline(always)]
    pub fn shown(&self, own: u64) -> u64 {
        if !self.used.load(Relaxed) {
            return own;
        }
        self.chosen(own)
    }

    /// The chosen CAS of the version whose own CAS is `own`, or `own`.
    #[inline(never)]
    fn chosen(&self, own: u64) -> u64 {
        let table = self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        table.chosen.get(&own).copied().unwrap_or(own)
    }

    /// Whether any version was given a chosen CAS.
    pub fn used(&self) -> bool {
        self.used.load(Relaxed)
    }

    /// Versions in the table, for tests.
    pub fn len(&self) -> usize {
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).order.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chosen_values_show_until_the_oldest_is_dropped() {
        let table = ExplicitCas::default();
        assert_eq!(table.shown(7), 7);
        table.insert(7, 4000);
        assert_eq!(table.shown(7), 4000);
        assert_eq!(table.shown(8), 8);
        for own in 100..100 + ENTRIES_MAX as u64 {
            table.insert(own, 1);
        }
        assert_eq!(table.len(), ENTRIES_MAX);
        assert_eq!(table.shown(7), 7, "the oldest version went first");
    }
}
