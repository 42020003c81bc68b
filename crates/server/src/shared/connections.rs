//! The server's client connections as every worker counts them: how many are open (the -c
//! limit), accepted and refused, and whether accepting is paused at the limit
//! (`no_maxconns_fast`), with memcached's figures for `stats`.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Instant;

/// Connection counts and the accept pause, shared by the workers.
#[derive(Debug, Default)]
pub struct Connections {
    /// Open client connections (a place is taken before or just after accepting).
    open: AtomicU64,
    /// Accepted since start.
    total: AtomicU64,
    /// Refused at the -c limit (maxconns_fast).
    rejected: AtomicU64,
    /// Since when accepting has been paused at the -c limit.
    paused: Mutex<Option<Instant>>,
    /// Times accepting resumed (workers compare it with what they saw to accept again).
    resumed: AtomicU64,
    /// Times accepting was paused (memcached's `listen_disabled_num`).
    pauses: AtomicU64,
    /// Microseconds accepting was paused, the current pause not counted.
    paused_us: AtomicU64,
    /// Held while a worker accepts from the UNIX socket every worker listens on: accepts in
    /// turn, so descriptors are numbered in the order clients connected (a concurrent
    /// `accept4` reserves a descriptor even when it finds nothing), as memcached's one
    /// listening thread numbers them.
    unix_turn: Mutex<()>,
    /// Without maxconns_fast: held by the worker accepting, so that no worker sees another's
    /// place taken for an accept that finds the backlog empty and pauses below the limit.
    reserving: Mutex<()>,
}

impl Connections {
    /// Takes a place for a connection; how many were open before.
    pub fn take_place(&self) -> u64 {
        self.open.fetch_add(1, Relaxed)
    }

    /// Gives a connection's place back (it closed, or was never made).
    pub fn give_place(&self) {
        self.open.fetch_sub(1, Relaxed);
    }

    /// Open connections now.
    pub fn open(&self) -> u64 {
        self.open.load(Relaxed)
    }

    /// Counts a connection accepted.
    pub fn accepted(&self) {
        self.total.fetch_add(1, Relaxed);
    }

    /// Counts a connection refused at the limit.
    pub fn rejected(&self) {
        self.rejected.fetch_add(1, Relaxed);
    }

    /// Connections accepted and refused since start.
    pub fn totals(&self) -> (u64, u64) {
        (self.total.load(Relaxed), self.rejected.load(Relaxed))
    }

    /// Pauses accepting (new connections wait in the listen backlog, as in memcached), unless
    /// it is paused already.
    pub fn pause(&self) {
        let mut since = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        if since.is_none() {
            *since = Some(Instant::now());
            self.pauses.fetch_add(1, Relaxed);
        }
    }

    /// Resumes accepting if it was paused; whether it was (the workers must then be woken
    /// to accept what waited meanwhile).
    pub fn resume(&self) -> bool {
        let mut since = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        let Some(at) = since.take() else { return false };
        self.paused_us.fetch_add(at.elapsed().as_micros() as u64, Relaxed);
        self.resumed.fetch_add(1, Relaxed);
        true
    }

    /// Whether new connections are being accepted.
    pub fn accepting(&self) -> bool {
        self.paused.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }

    /// Times accepting resumed (a worker that saw fewer accepts again).
    pub fn resumptions(&self) -> u64 {
        self.resumed.load(Relaxed)
    }

    /// memcached's `listen_disabled_num` and `time_in_listen_disabled_us`.
    pub fn pauses(&self) -> (u64, u64) {
        (self.pauses.load(Relaxed), self.paused_us.load(Relaxed))
    }

    /// This worker's turn to accept from the shared UNIX socket; `None` while another has it
    /// (that one accepts what waits).
    pub fn unix_turn(&self) -> Option<MutexGuard<'_, ()>> {
        match self.unix_turn.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Without maxconns_fast: held while places are taken and accepts made.
    pub fn reserving(&self) -> MutexGuard<'_, ()> {
        self.reserving.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_is_counted_once_and_resumed_once() {
        let connections = Connections::default();
        assert!(connections.accepting() && !connections.resume());
        connections.pause();
        connections.pause();
        assert!(!connections.accepting());
        assert_eq!(connections.pauses().0, 1);
        assert!(connections.resume() && connections.accepting());
        assert_eq!(connections.resumptions(), 1);
        assert_eq!((connections.take_place(), connections.take_place()), (0, 1));
        connections.give_place();
        assert_eq!(connections.open(), 1);
        let held = connections.unix_turn();
        assert!(held.is_some() && connections.unix_turn().is_none());
    }
}
