//! Where warming from a live node stands (`--warm-from`): written by the warming thread
//! (crate::warm), read by `stats warm`, `/metrics` and `/readyz`.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicU8};
use std::sync::Mutex;

/// The phases of a warm, in order; `Failed` ends one early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// No `--warm-from`.
    Off = 0,
    /// Listing the source's items (`lru_crawler metadump all`).
    Listing = 1,
    /// Copying the chosen items, hottest first.
    Copying = 2,
    /// Every chosen item was copied (or found already here, or gone at the source).
    Done = 3,
    /// The source could not be listed or read to the end: what was copied stays.
    Failed = 4,
}

impl Phase {
    /// Its name in `stats warm`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Off => "off",
            Phase::Listing => "listing",
            Phase::Copying => "copying",
            Phase::Done => "done",
            Phase::Failed => "failed",
        }
    }

    fn of(value: u8) -> Phase {
        match value {
            1 => Phase::Listing,
            2 => Phase::Copying,
            3 => Phase::Done,
            4 => Phase::Failed,
            _ => Phase::Off,
        }
    }
}

/// A warm's figures, each a counter the warming thread alone writes.
#[derive(Default)]
pub struct Warming {
    phase: AtomicU8,
    /// Items the source listed (live ones).
    pub listed: AtomicU64,
    /// Those chosen to copy (the hottest that fit in this node's memory).
    pub chosen: AtomicU64,
    /// Items stored here.
    pub copied: AtomicU64,
    /// Their value bytes.
    pub copied_bytes: AtomicU64,
    /// Chosen items this node already held (a client stored them first: theirs is kept).
    pub present: AtomicU64,
    /// Chosen items the source no longer had when asked.
    pub gone: AtomicU64,
    /// Chosen items this node refused (out of memory, too large).
    pub refused: AtomicU64,
    /// Milliseconds from the start of listing to the end of copying (so far, while running).
    pub millis: AtomicU64,
    /// The source, and why a failed warm failed.
    text: Mutex<(String, String)>,
}

impl Warming {
    /// Where the warm stands.
    pub fn phase(&self) -> Phase {
        Phase::of(self.phase.load(Relaxed))
    }

    /// Moves the warm to `phase`.
    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Relaxed);
    }

    /// Whether a warm is still running (`/readyz` says `warming` meanwhile).
    pub fn running(&self) -> bool {
        matches!(self.phase(), Phase::Listing | Phase::Copying)
    }

    /// Names the source (when the warm starts).
    pub fn set_source(&self, source: &str) {
        self.text.lock().unwrap_or_else(|e| e.into_inner()).0 = source.to_string();
    }

    /// Ends the warm as failed, for `why`.
    pub fn fail(&self, why: &str) {
        self.text.lock().unwrap_or_else(|e| e.into_inner()).1 = why.to_string();
        self.set_phase(Phase::Failed);
    }

    /// The lines of `stats warm`.
    pub fn write_stats(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        let (source, error) = self.text.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let _ = write!(out, "STAT warm_state {}\r\n", self.phase().name());
        if !source.is_empty() {
            let _ = write!(out, "STAT warm_source {source}\r\n");
        }
        let counters = [
            ("warm_listed_items", &self.listed),
            ("warm_chosen_items", &self.chosen),
            ("warm_copied_items", &self.copied),
            ("warm_copied_bytes", &self.copied_bytes),
            ("warm_present_items", &self.present),
            ("warm_gone_items", &self.gone),
            ("warm_refused_items", &self.refused),
        ];
        for (name, counter) in counters {
            let _ = write!(out, "STAT {name} {}\r\n", counter.load(Relaxed));
        }
        let millis = self.millis.load(Relaxed);
        let _ = write!(out, "STAT warm_seconds {}.{:03}\r\n", millis / 1000, millis % 1000);
        if !error.is_empty() {
            let _ = write!(out, "STAT warm_error {}\r\n", error.replace(['\r', '\n'], " "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_name_the_phase_the_source_and_a_failure() {
        let warming = Warming::default();
        assert_eq!(warming.phase(), Phase::Off);
        assert!(!warming.running());
        warming.set_source("10.0.0.1:11211");
        warming.set_phase(Phase::Copying);
        assert!(warming.running());
        warming.copied.store(3, Relaxed);
        warming.millis.store(1_250, Relaxed);
        let mut out = Vec::new();
        warming.write_stats(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("STAT warm_state copying\r\nSTAT warm_source 10.0.0.1:11211\r\n"), "{text}");
        assert!(
            text.contains("STAT warm_copied_items 3\r\n") && text.contains("STAT warm_seconds 1.250\r\n")
        );
        warming.fail("source closed\r\nthe connection");
        assert!(!warming.running());
        let mut out = Vec::new();
        warming.write_stats(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("STAT warm_state failed\r\n"));
        assert!(text.ends_with("STAT warm_error source closed  the connection\r\n"), "{text}");
    }
}
