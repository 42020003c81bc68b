//! The keys Redis connections WATCH, and how often each was written since: every write of a
//! key (any protocol, any worker) counts here while someone watches it, so EXEC runs nothing
//! after a key it watched was written, deleted or created, even one written back to what it
//! was, as redis-server's `touchWatchedKey` does. With nothing watched a write costs one
//! relaxed load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The watched keys, server-wide.
#[derive(Default)]
pub struct Watches {
    /// How many keys are watched (by anyone): writes look at the table only while some are.
    watched: AtomicUsize,
    /// Each watched key: how many watches hold it, and its writes since it was first watched.
    keys: Mutex<HashMap<Vec<u8>, (usize, u64)>>,
}

impl Watches {
    fn keys(&self) -> MutexGuard<'_, HashMap<Vec<u8>, (usize, u64)>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether any key is watched (else no write needs telling).
    #[inline(always)]
    pub fn any(&self) -> bool {
        self.watched.load(Relaxed) != 0
    }

    /// A write of `key`, made.
    #[inline(always)]
    pub fn touch(&self, key: &[u8]) {
        if self.any() {
            self.touch_watched(key);
        }
    }

    #[cold]
    fn touch_watched(&self, key: &[u8]) {
        if let Some((_, writes)) = self.keys().get_mut(key) {
            *writes += 1;
        }
    }

    /// Writes of every watched key `exists` says is there (FLUSHALL empties them).
    pub fn touch_each(&self, mut exists: impl FnMut(&[u8]) -> bool) {
        if self.watched.load(Relaxed) == 0 {
            return;
        }
        for (key, (_, writes)) in self.keys().iter_mut() {
            if exists(key) {
                *writes += 1;
            }
        }
    }

    /// Starts a watch of `key`: its writes so far, for [`Watches::writes`] to compare.
    pub fn watch(&self, key: &[u8]) -> u64 {
        let mut keys = self.keys();
        let entry = keys.entry(key.to_vec()).or_insert_with(|| {
            self.watched.fetch_add(1, Relaxed);
            (0, 0)
        });
        entry.0 += 1;
        entry.1
    }

    /// `key`'s writes so far (it is watched).
    pub fn writes(&self, key: &[u8]) -> u64 {
        self.keys().get(key).map_or(u64::MAX, |&(_, writes)| writes)
    }

    /// Ends a watch of `key`.
    pub fn unwatch(&self, key: &[u8]) {
        let mut keys = self.keys();
        if let Some(entry) = keys.get_mut(key) {
            entry.0 -= 1;
            if entry.0 == 0 {
                keys.remove(key);
                self.watched.fetch_sub(1, Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_of_a_watched_key_count_until_its_last_watch_ends() {
        let watches = Watches::default();
        watches.touch(b"k");
        let first = watches.watch(b"k");
        assert_eq!(first, 0, "writes before the watch do not count");
        watches.touch(b"k");
        watches.touch(b"other");
        let second = watches.watch(b"k");
        assert_eq!((second, watches.writes(b"k")), (1, 1));
        watches.touch_each(|key| key == b"k");
        assert_eq!(watches.writes(b"k"), 2);
        watches.unwatch(b"k");
        assert_eq!(watches.writes(b"k"), 2, "still watched once");
        watches.unwatch(b"k");
        assert_eq!(watches.watched.load(Relaxed), 0, "nothing watched: writes skip the table");
        assert!(watches.keys().is_empty());
    }
}
