//! `stats detail`: memcached's per-prefix counters. A key's prefix is what comes before its
//! first `:` (keys without one are not counted). Off by default; while off, recording costs
//! one relaxed load of a flag that is only written by `stats detail on|off`.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;

/// memcached's default prefix delimiter (its `-D`).
const DELIMITER: u8 = b':';

/// What one prefix has seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    gets: u64,
    hits: u64,
    sets: u64,
    deletes: u64,
}

/// The per-prefix counters of the whole server.
#[derive(Debug)]
pub struct Detail {
    enabled: AtomicBool,
    /// The prefix delimiter (-D), set at start.
    delimiter: AtomicU8,
    prefixes: Mutex<BTreeMap<Vec<u8>, Counts>>,
}

impl Default for Detail {
    fn default() -> Detail {
        Detail {
            enabled: AtomicBool::new(false),
            delimiter: AtomicU8::new(DELIMITER),
            prefixes: Mutex::default(),
        }
    }
}

impl Detail {
    /// memcached's -D: prefixes end at `delimiter`, and counting starts on.
    pub fn with_delimiter(delimiter: u8) -> Detail {
        Detail { enabled: AtomicBool::new(true), delimiter: AtomicU8::new(delimiter), ..Detail::default() }
    }

    /// The prefix delimiter (`stats settings` reports it).
    pub fn delimiter(&self) -> u8 {
        self.delimiter.load(Relaxed)
    }

    /// Whether collection is on.
    #[inline(always)]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Relaxed)
    }

    /// A get of `key` (`hit`: whether it found the item). Off (the default), one relaxed
    /// load, inlined where the request runs.
    #[inline(always)]
    pub fn record_get(&self, key: &[u8], hit: bool) {
        if !self.enabled() {
            return;
        }
        self.record(key, |counts| {
            counts.gets += 1;
            counts.hits += u64::from(hit);
        });
    }

    /// A store command of `key` (any outcome, as memcached counts it).
    #[inline(always)]
    pub fn record_set(&self, key: &[u8]) {
        if self.enabled() {
            self.record(key, |counts| counts.sets += 1);
        }
    }

    /// A delete of `key` (any outcome).
    #[inline(always)]
    pub fn record_delete(&self, key: &[u8]) {
        if self.enabled() {
            self.record(key, |counts| counts.deletes += 1);
        }
    }

    /// Counts a command of `key` under its prefix (collection is on: the callers looked).
    #[inline(never)]
    fn record(&self, key: &[u8], count: impl FnOnce(&mut Counts)) {
        let delimiter = self.delimiter();
        let Some(end) = key.iter().position(|&b| b == delimiter) else { return };
        let mut prefixes = self.prefixes.lock().unwrap_or_else(|e| e.into_inner());
        match prefixes.get_mut(&key[..end]) {
            Some(counts) => count(counts),
            None => count(prefixes.entry(key[..end].to_vec()).or_default()),
        }
    }

    /// `stats reset`: forgets every prefix.
    pub fn reset(&self) {
        self.prefixes.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Answers `stats detail <argument>` as memcached does.
    pub fn command(&self, argument: &[u8], out: &mut Vec<u8>) {
        match argument {
            b"on" | b"off" => {
                self.enabled.store(argument == b"on", Relaxed);
                out.extend_from_slice(b"OK\r\n");
            }
            b"dump" => {
                let prefixes = self.prefixes.lock().unwrap_or_else(|e| e.into_inner());
                for (prefix, c) in prefixes.iter() {
                    out.extend_from_slice(b"PREFIX ");
                    out.extend_from_slice(prefix);
                    let _ =
                        write!(out, " get {} hit {} set {} del {}\r\n", c.gets, c.hits, c.sets, c.deletes);
                }
                out.extend_from_slice(b"END\r\n");
            }
            _ => out.extend_from_slice(b"CLIENT_ERROR usage: stats detail on|off|dump\r\n"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(detail: &Detail) -> String {
        let mut out = Vec::new();
        detail.command(b"dump", &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn counts_by_prefix_only_while_on() {
        let detail = Detail::default();
        detail.record_set(b"foo:1");
        assert_eq!(dump(&detail), "END\r\n");
        let mut out = Vec::new();
        detail.command(b"on", &mut out);
        assert_eq!(out, b"OK\r\n");
        detail.record_set(b"foo:1");
        detail.record_get(b"foo:1", true);
        detail.record_get(b"foo:2", false);
        detail.record_delete(b"bar:x:y");
        detail.record_get(b"nodelimiter", true);
        assert_eq!(
            dump(&detail),
            "PREFIX bar get 0 hit 0 set 0 del 1\r\nPREFIX foo get 2 hit 1 set 1 del 0\r\nEND\r\n"
        );
        detail.reset();
        assert_eq!(dump(&detail), "END\r\n");
        out.clear();
        detail.command(b"", &mut out);
        assert_eq!(out, b"CLIENT_ERROR usage: stats detail on|off|dump\r\n");
    }
}
