//! Partitions lent to one worker for one step over keys several workers own (a transaction's
//! EXEC): the step's worker asks their owners, each hands its partitions over at the top of its
//! next loop turn and waits, the step runs on them as on the worker's own, and they go back.
//! One such step runs at a time, server-wide, so two steps never wait for each other: a worker
//! that finds one under way waits its turn ([`Lending::borrow`]) and lends its own partitions
//! meanwhile when asked. An owner waits only for a step that holds everything it needs, which
//! waits for nothing (docs/ARCHITECTURE.md, "Transactions").

// std's locks and atomics; loom's where the protocol is model-checked (the loom_model tests
// below, under `--cfg lending_loom`: a cfg of its own, so the rest of the build, the store's
// loom switches among it, keeps std's).
#[cfg(lending_loom)]
use loom::sync::{
    atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
    Condvar, Mutex, MutexGuard,
};
use std::sync::PoisonError;
#[cfg(not(lending_loom))]
use std::sync::{
    atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
    Condvar, Mutex, MutexGuard,
};

/// The lending desk: generic over what is lent (a worker's partitions) so its protocol is
/// tested on its own.
pub struct Lending<T> {
    /// Per worker: asked to lend (read at the top of every loop turn, so a relaxed flag).
    asked: Vec<AtomicBool>,
    desk: Mutex<Desk<T>>,
    changed: Condvar,
    /// Bumped (under the desk's lock) by every change a waiter waits for: one watches it a
    /// moment before it sleeps, as a step lasts microseconds.
    moves: AtomicU64,
    /// How many times a waiter looks at `moves` before it sleeps: [`SPINS`] where every worker
    /// has a core of its own, else none (a waiter spinning on the core the step needs would
    /// only delay it).
    spins: u32,
}

/// How many times a waiter looks at [`Lending::moves`] before it sleeps on the condition
/// variable (tens of microseconds).
const SPINS: u32 = 2_000;

struct Desk<T> {
    /// What each worker lent, until the step's worker takes it.
    lent: Vec<Option<T>>,
    /// What goes back to each worker.
    returned: Vec<Option<T>>,
    /// Workers that stopped: they lend nothing any more.
    gone: Vec<bool>,
    /// A step over other workers' partitions runs (one at a time, server-wide).
    stepping: bool,
}

/// A step's borrowed partitions, each with the worker it goes back to (on drop, if not before);
/// the step ends with it.
pub struct Borrowed<'a, T> {
    lending: &'a Lending<T>,
    /// What was lent, by whom.
    pub lent: Vec<(usize, T)>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<T> Lending<T> {
    /// A desk for `workers` workers, none asked.
    pub fn new(workers: usize) -> Lending<T> {
        Lending {
            asked: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            desk: Mutex::new(Desk {
                lent: (0..workers).map(|_| None).collect(),
                returned: (0..workers).map(|_| None).collect(),
                gone: vec![false; workers],
                stepping: false,
            }),
            changed: Condvar::new(),
            moves: AtomicU64::new(0),
            // Under loom a waiter sleeps at once: spinning only multiplies the schedules.
            spins: match std::thread::available_parallelism() {
                Ok(cores) if workers <= cores.get() && !cfg!(lending_loom) => SPINS,
                _ => 0,
            },
        }
    }

    /// Tells the waiters the desk changed (its lock held).
    fn moved(&self) {
        self.moves.fetch_add(1, Relaxed);
        self.changed.notify_all();
    }

    /// Waits for the desk to change: a moment watching [`Lending::moves`], then asleep.
    fn wait_for_change<'a>(&'a self, desk: MutexGuard<'a, Desk<T>>) -> MutexGuard<'a, Desk<T>> {
        let seen = self.moves.load(Relaxed);
        drop(desk);
        for _ in 0..self.spins {
            if self.moves.load(Relaxed) != seen {
                return lock(&self.desk);
            }
            std::hint::spin_loop();
        }
        let desk = lock(&self.desk);
        if self.moves.load(Relaxed) != seen {
            return desk;
        }
        self.changed.wait(desk).unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `worker` is asked to lend its partitions (it then calls [`Lending::lend`]).
    #[inline(always)]
    pub fn asked(&self, worker: usize) -> bool {
        self.asked[worker].load(Relaxed)
    }

    /// `worker` hands `lent` over and waits until the step gives it back; given back at once
    /// when the step no longer wants it.
    pub fn lend(&self, worker: usize, lent: T) -> T {
        let mut desk = lock(&self.desk);
        if !self.asked[worker].load(Relaxed) {
            return lent;
        }
        desk.lent[worker] = Some(lent);
        self.moved();
        loop {
            if let Some(back) = desk.returned[worker].take() {
                return back;
            }
            if !self.asked[worker].load(Relaxed) {
                if let Some(back) = desk.lent[worker].take() {
                    return back;
                }
            }
            desk = self.wait_for_change(desk);
        }
    }

    /// `worker` stopped: a step waiting for it gives up.
    pub fn leave(&self, worker: usize) {
        let mut desk = lock(&self.desk);
        desk.gone[worker] = true;
        self.moved();
    }

    /// Starts a step over the partitions of `workers` (none of them `me`, the caller), asking
    /// each and waking it with `wake`, and waits until all have lent theirs. While another step
    /// is under way it waits for it to end, lending its own partitions (`lend_own`, which calls
    /// [`Lending::lend`]) when that step asks for them. `None` when one of them has stopped.
    /// (Until 2026-12-07 the step was a mutex of its own, tried in a loop: a step's end
    /// released it after the desk's last change, so a waiter that had just looked could sleep
    /// through it, bounded by a 1 ms wake-up; the loom model found it.)
    pub fn borrow(
        &self,
        me: usize,
        workers: &[usize],
        wake: impl Fn(usize),
        mut lend_own: impl FnMut(),
    ) -> Option<Borrowed<'_, T>> {
        let mut desk = lock(&self.desk);
        // One step at a time: the desk says whether one runs, and its end is a change of the
        // desk, so a waiter cannot miss it.
        while desk.stepping {
            if self.asked(me) {
                drop(desk);
                lend_own();
                desk = lock(&self.desk);
            } else {
                desk = self.wait_for_change(desk);
            }
        }
        desk.stepping = true;
        for &worker in workers {
            self.asked[worker].store(true, Relaxed);
            wake(worker);
        }
        // A worker waiting for the step lock waits on the desk, not its poll.
        self.moved();
        let mut lent = Vec::with_capacity(workers.len());
        loop {
            for &worker in workers {
                if let Some(partitions) = desk.lent[worker].take() {
                    lent.push((worker, partitions));
                }
            }
            if lent.len() == workers.len() {
                drop(desk);
                return Some(Borrowed { lending: self, lent });
            }
            if workers.iter().any(|&worker| desk.gone[worker]) {
                // Under the desk's lock: an owner not yet lending sees it is no longer asked.
                for &worker in workers {
                    self.asked[worker].store(false, Relaxed);
                }
                for (worker, partitions) in lent.drain(..) {
                    desk.returned[worker] = Some(partitions);
                }
                desk.stepping = false;
                self.moved();
                return None;
            }
            desk = self.wait_for_change(desk);
        }
    }
}

impl<T> Drop for Borrowed<'_, T> {
    fn drop(&mut self) {
        let mut desk = lock(&self.lending.desk);
        for (worker, partitions) in self.lent.drain(..) {
            // Cleared here, before the next step can ask again: the owner clearing it on its
            // way back could clear that step's ask.
            self.lending.asked[worker].store(false, Relaxed);
            desk.returned[worker] = Some(partitions);
        }
        desk.stepping = false;
        self.lending.moved();
    }
}

#[cfg(all(test, not(lending_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// An owner's loop: lends `mine` whenever asked, until told to stop; counts its turns.
    fn owner(
        lending: Arc<Lending<Vec<u32>>>,
        worker: usize,
        stop: Arc<AtomicBool>,
    ) -> std::thread::JoinHandle<Vec<u32>> {
        std::thread::spawn(move || {
            let mut mine = vec![worker as u32 * 10, worker as u32 * 10 + 1];
            while !stop.load(Relaxed) {
                if lending.asked(worker) {
                    mine = lending.lend(worker, mine);
                }
                std::thread::yield_now();
            }
            lending.leave(worker);
            mine
        })
    }

    #[test]
    fn a_step_borrows_what_the_owners_lend_and_gives_it_back_changed() {
        let lending = Arc::new(Lending::new(3));
        let stop = Arc::new(AtomicBool::new(false));
        let owners: Vec<_> = (1..3).map(|worker| owner(lending.clone(), worker, stop.clone())).collect();
        for round in 0..100u32 {
            let mut step = lending.borrow(0, &[1, 2], |_| {}, || {}).expect("no owner gone");
            assert_eq!(step.lent.len(), 2);
            for (_, partitions) in &mut step.lent {
                partitions.push(round);
            }
        }
        stop.store(true, Relaxed);
        for (worker, handle) in (1..3).zip(owners) {
            let mine = handle.join().expect("an owner");
            assert_eq!(mine.len(), 102, "every step's change came back to worker {worker}");
            assert_eq!(mine[2..], (0..100).collect::<Vec<_>>()[..]);
        }
    }

    #[test]
    fn a_second_step_waits_for_the_first_and_an_owner_gone_ends_a_step() {
        let lending = Arc::new(Lending::<Vec<u32>>::new(3));
        let stop = Arc::new(AtomicBool::new(false));
        let one = owner(lending.clone(), 1, stop.clone());
        let step = lending.borrow(0, &[1], |_| {}, || {}).expect("worker 1 lends");
        // Worker 2 waits for the step to end, lending its own when asked meanwhile.
        let waiting = {
            let lending = lending.clone();
            std::thread::spawn(move || lending.borrow(2, &[1], |_| {}, || {}).is_some())
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!waiting.is_finished(), "one step at a time");
        drop(step);
        assert!(waiting.join().expect("worker 2"), "its step ran once the first ended");
        stop.store(true, Relaxed);
        assert_eq!(one.join().expect("worker 1").len(), 2);
        assert!(lending.borrow(0, &[1], |_| {}, || {}).is_none(), "worker 1 is gone: nothing to wait for");
        assert!(!lending.asked(1), "no longer asked");
    }

    #[test]
    fn an_owner_no_longer_asked_keeps_what_it_would_have_lent() {
        let lending = Lending::<Vec<u32>>::new(2);
        assert_eq!(lending.lend(1, vec![7]), vec![7], "not asked: kept");
    }
}

/// The lending protocol under loom, every interleaving of its threads (within
/// LOOM_MAX_PREEMPTIONS): a step gets what its owner lends and gives it back changed; two steps
/// that each need the other's worker both end (the one waiting for the step lock lends its own
/// when asked), each seeing the other's change. A deadlock or a lost partition fails the model.
///
///     RUSTFLAGS="--cfg lending_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p qs-server --release --lib \
///         loom_model --target-dir target/loom
#[cfg(all(test, lending_loom))]
mod loom_model {
    use super::*;
    use loom::sync::Arc;

    /// A worker's loop between its own steps: lends `mine` whenever asked until `done`.
    fn lend_until(
        lending: &Lending<Vec<u32>>,
        worker: usize,
        mut mine: Vec<u32>,
        done: &AtomicBool,
    ) -> Vec<u32> {
        while !done.load(Relaxed) {
            if lending.asked(worker) {
                mine = lending.lend(worker, mine);
            }
            loom::thread::yield_now();
        }
        mine
    }

    #[test]
    fn a_step_gets_what_the_owner_lends_and_gives_it_back() {
        loom::model(|| {
            let lending = Arc::new(Lending::new(2));
            let done = Arc::new(AtomicBool::new(false));
            let owner = {
                let (lending, done) = (lending.clone(), done.clone());
                loom::thread::spawn(move || lend_until(&lending, 1, vec![10], &done))
            };
            let mut step = lending.borrow(0, &[1], |_| {}, || {}).expect("the owner lends");
            assert_eq!(step.lent, vec![(1, vec![10])]);
            step.lent[0].1.push(99);
            drop(step);
            done.store(true, Relaxed);
            let mine = owner.join().expect("the owner");
            assert_eq!(mine, vec![10, 99], "the step's change came back");
        });
    }

    #[test]
    fn two_steps_over_each_others_worker_both_end() {
        loom::model(|| {
            let lending = Arc::new(Lending::new(2));
            let done = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
            let worker = |me: usize| {
                let (lending, done) = (lending.clone(), done.clone());
                loom::thread::spawn(move || {
                    let other = 1 - me;
                    let mine = std::cell::RefCell::new(vec![me as u32]);
                    let lend_own = || {
                        let lent = std::mem::take(&mut *mine.borrow_mut());
                        *mine.borrow_mut() = lending.lend(me, lent);
                    };
                    let mut step = lending.borrow(me, &[other], |_| {}, lend_own).expect("both stay");
                    step.lent[0].1.push(100 + me as u32);
                    drop(step);
                    done[me].store(true, Relaxed);
                    // Lends on until the other worker's step has ended too.
                    let mine = std::mem::take(&mut *mine.borrow_mut());
                    lend_until(&lending, me, mine, &done[other])
                })
            };
            let (zero, one) = (worker(0), worker(1));
            let (zero, one) = (zero.join().expect("worker 0"), one.join().expect("worker 1"));
            assert_eq!(zero, vec![0, 101], "worker 1's step changed worker 0's");
            assert_eq!(one, vec![1, 100], "worker 0's step changed worker 1's");
        });
    }
}
