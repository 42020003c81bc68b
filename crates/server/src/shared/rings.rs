//! The workers' io_uring rings, as `stats settings` reports them: which read flash through a
//! ring of their own, which serve connections on one, and whether the kernel refused one.

use crate::flashio::FlashIo;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicUsize};

/// The workers' I/O rings and the flash reader threads' queues.
pub struct IoRings {
    /// `-o ext_path`: the flash reader threads' queues.
    flash_io: Option<FlashIo>,
    /// Workers reading flash through their own io_uring.
    flash_rings: AtomicUsize,
    /// Workers whose stream connections run on io_uring (`-o io_backend=uring`; one that the
    /// kernel refused runs on epoll).
    net_rings: AtomicUsize,
    /// Whether a worker has said that the kernel refused its io_uring (said once).
    uring_refused: AtomicBool,
}

impl IoRings {
    /// No ring yet; `flash_io` with a flash tier.
    pub fn new(flash_io: Option<FlashIo>) -> IoRings {
        IoRings {
            flash_io,
            flash_rings: AtomicUsize::new(0),
            net_rings: AtomicUsize::new(0),
            uring_refused: AtomicBool::new(false),
        }
    }

    /// `-o ext_path`: the flash reader threads' queues.
    pub fn flash_io(&self) -> Option<&FlashIo> {
        self.flash_io.as_ref()
    }

    /// A worker reads flash through its own ring.
    pub fn flash_ring_started(&self) {
        self.flash_rings.fetch_add(1, Relaxed);
    }

    /// How many workers read flash through their own ring.
    pub fn flash_rings(&self) -> usize {
        self.flash_rings.load(Relaxed)
    }

    /// A worker serves its connections on a ring (`started`), or gave its ring up.
    pub fn net_ring(&self, started: bool) {
        if started {
            self.net_rings.fetch_add(1, Relaxed);
        } else {
            self.net_rings.fetch_sub(1, Relaxed);
        }
    }

    /// How many workers serve their connections on a ring.
    pub fn net_rings(&self) -> usize {
        self.net_rings.load(Relaxed)
    }

    /// Whether this is the first refusal of a ring by the kernel (to be said once).
    pub fn first_refusal(&self) -> bool {
        !self.uring_refused.swap(true, Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_are_counted_and_a_refusal_is_said_once() {
        let rings = IoRings::new(None);
        assert!(rings.flash_io().is_none());
        rings.flash_ring_started();
        rings.net_ring(true);
        rings.net_ring(true);
        rings.net_ring(false);
        assert_eq!((rings.flash_rings(), rings.net_rings()), (1, 1));
        assert!(rings.first_refusal());
        assert!(!rings.first_refusal());
    }
}
