//! Which namespace of the store each Redis database's keys are in (qs_proto::resp::db): at
//! start database n's own, and SWAPDB exchanges two databases' namespaces at once, for every
//! connection of every worker, without moving a key. The table is not kept across a warm
//! restart (`-e`): after one, each database names its own namespace again.

use qs_proto::resp::db::Namespaces;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};

/// Database number to namespace.
pub struct DbSpaces {
    table: Vec<AtomicU8>,
    /// Swaps one at a time (each reads two entries and writes both).
    swapping: Mutex<()>,
}

impl DbSpaces {
    /// `count` databases, each in its own namespace.
    pub fn new(count: u32) -> DbSpaces {
        DbSpaces { table: (0..count).map(|db| AtomicU8::new(db as u8)).collect(), swapping: Mutex::new(()) }
    }

    /// SWAPDB `a` `b` (both under [`Namespaces::count`]): each names the other's keys from now.
    pub fn swap(&self, a: u8, b: u8) {
        let _one_at_a_time = self.swapping.lock().unwrap_or_else(PoisonError::into_inner);
        let (space_a, space_b) = (self.space(a), self.space(b));
        self.table[usize::from(a)].store(space_b, Relaxed);
        self.table[usize::from(b)].store(space_a, Relaxed);
    }

    /// The namespace of database `db`.
    #[inline]
    pub fn space(&self, db: u8) -> u8 {
        self.table.get(usize::from(db)).map_or(db, |space| space.load(Relaxed))
    }

    /// The database whose keys are in namespace `space`.
    pub fn database_of(&self, space: u8) -> u8 {
        (0..self.table.len()).find(|&db| self.table[db].load(Relaxed) == space).unwrap_or(usize::from(space))
            as u8
    }
}

impl Namespaces for DbSpaces {
    fn of(&self, db: u8) -> u8 {
        self.space(db)
    }

    fn count(&self) -> u32 {
        self.table.len() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_exchanges_two_databases_namespaces() {
        let spaces = DbSpaces::new(16);
        assert_eq!((spaces.of(0), spaces.of(5), spaces.count()), (0, 5, 16));
        spaces.swap(0, 5);
        assert_eq!((spaces.of(0), spaces.of(5), spaces.of(1)), (5, 0, 1));
        assert_eq!((spaces.database_of(0), spaces.database_of(5)), (5, 0));
        spaces.swap(5, 1);
        assert_eq!((spaces.of(0), spaces.of(5), spaces.of(1)), (5, 1, 0));
        spaces.swap(3, 3);
        assert_eq!(spaces.of(3), 3);
    }
}
