//! Sleeping and waking the workers: each worker says when it is about to sleep in its poll,
//! and whoever gives it work (a hand-over, a flash read, a watch line, a resumed accept, the
//! stop) wakes it only then (its eventfd). The stop flag lives here too.

use super::Padded;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{fence, AtomicBool, AtomicU64};
use std::sync::OnceLock;

/// The workers' sleep flags, their wakers and the stop flag.
pub struct Wakeups {
    /// Set when a worker is about to sleep in its poll.
    sleeping: Vec<Padded<AtomicBool>>,
    /// Wakes a worker (eventfd), set once its poll exists.
    wakers: Vec<OnceLock<mio::Waker>>,
    /// Set by SIGTERM/SIGINT or `shutdown`: stop accepting, finish, exit.
    stop: AtomicBool,
    /// Requests run on every worker (flush_all and its kin) handed over so far.
    broadcasts: AtomicU64,
}

impl Wakeups {
    /// For `workers` workers, none of them with a waker yet.
    pub fn new(workers: usize) -> Wakeups {
        Wakeups {
            sleeping: (0..workers).map(|_| Padded(AtomicBool::new(false))).collect(),
            wakers: (0..workers).map(|_| OnceLock::new()).collect(),
            stop: AtomicBool::new(false),
            broadcasts: AtomicU64::new(0),
        }
    }

    /// A request for every worker (flush_all and its kin) is being handed over.
    pub fn note_broadcast(&self) {
        self.broadcasts.fetch_add(1, Relaxed);
    }

    /// How many requests for every worker have been handed over so far.
    pub fn broadcasts(&self) -> u64 {
        self.broadcasts.load(Relaxed)
    }

    /// Gives `worker` its waker (once, at start-up).
    pub fn set_waker(&self, worker: usize, waker: mio::Waker) {
        let _ = self.wakers[worker].set(waker);
    }

    /// `worker` is about to sleep (then looks once more for work, which a waker that saw the
    /// flag may have given it).
    pub fn going_to_sleep(&self, worker: usize) {
        self.sleeping[worker].0.store(true, SeqCst);
        fence(SeqCst);
    }

    /// `worker` is awake.
    pub fn awake(&self, worker: usize) {
        self.sleeping[worker].0.store(false, SeqCst);
    }

    /// Wakes `worker` if it sleeps (or is about to); whether it did.
    pub fn wake_if_sleeping(&self, worker: usize) -> bool {
        fence(SeqCst);
        if self.sleeping[worker].0.swap(false, SeqCst) {
            if let Some(waker) = self.wakers[worker].get() {
                let _ = waker.wake();
            }
            return true;
        }
        false
    }

    /// Wakes `worker`, asleep or not (a step waits for it: partitions lent, shared/lending.rs).
    pub fn wake(&self, worker: usize) {
        if let Some(waker) = self.wakers[worker].get() {
            let _ = waker.wake();
        }
    }

    /// Wakes every worker.
    pub fn wake_all(&self) {
        for waker in self.wakers.iter().filter_map(OnceLock::get) {
            let _ = waker.wake();
        }
    }

    /// Asks every worker to stop, and wakes them to see it.
    pub fn request_stop(&self) {
        self.stop.store(true, Relaxed);
        self.wake_all();
    }

    /// Whether the workers are to stop.
    pub fn stopping(&self) -> bool {
        self.stop.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_sleeping_worker_is_woken_and_the_stop_is_seen() {
        let wakeups = Wakeups::new(2);
        assert!(!wakeups.wake_if_sleeping(0), "awake: nothing to wake");
        wakeups.going_to_sleep(1);
        assert!(wakeups.wake_if_sleeping(1) && !wakeups.wake_if_sleeping(1), "woken once");
        wakeups.going_to_sleep(0);
        wakeups.awake(0);
        assert!(!wakeups.wake_if_sleeping(0));
        assert!(!wakeups.stopping());
        wakeups.request_stop();
        assert!(wakeups.stopping());
    }
}
