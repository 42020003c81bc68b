//! The caller of the script running on this thread, for `redis.call` and `redis.pcall`: they
//! are made once per Lua state and reach their run's caller here, not through closures made
//! for each run (mlua's scoped functions, the safe way, cost about 7,600 instructions a run
//! where the whole of redis-server's EVALSHA costs 21,500: docs/BENCHMARKS.md, "Scripts").

use super::vm::Caller;
use std::cell::Cell;
use std::ptr::NonNull;

type Erased = NonNull<dyn Caller + 'static>;

thread_local! {
    /// The running script's caller (`None` between runs, and while one of its calls runs).
    static CURRENT: Cell<Option<Erased>> = const { Cell::new(None) };
}

/// Puts a value back into [`CURRENT`] when dropped (on return and on unwinding alike).
struct Restore(Option<Erased>);

impl Drop for Restore {
    fn drop(&mut self) {
        CURRENT.set(self.0);
    }
}

/// Runs `f` with `caller` as this thread's current caller.
pub(super) fn with_caller<R>(caller: &mut dyn Caller, f: impl FnOnce() -> R) -> R {
    let pointer = NonNull::from(caller);
    // SAFETY: only the lifetime is erased (same layout). The pointer lives in CURRENT only
    // while `f` runs: `Restore` puts the previous value back when `f` returns or unwinds,
    // so it is never used after the borrow of `caller` ends.
    let erased: Erased = unsafe { std::mem::transmute::<NonNull<dyn Caller + '_>, Erased>(pointer) };
    let _restore = Restore(CURRENT.replace(Some(erased)));
    f()
}

/// Runs `f` on the current caller; `None` outside a run, and inside a call of it.
pub(super) fn with_current<R>(f: impl FnOnce(&mut dyn Caller) -> R) -> Option<R> {
    let pointer = CURRENT.take()?;
    let _restore = Restore(Some(pointer));
    // SAFETY: `with_caller` set the pointer from a `&mut dyn Caller` it holds borrowed while
    // the pointer is in CURRENT; taken out of CURRENT, it is reachable from here alone until
    // `Restore` puts it back, so this is the one reference to the caller meanwhile.
    let caller = unsafe { &mut *pointer.as_ptr() };
    Some(f(caller))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter(u32);

    impl Caller for Counter {
        fn call(&mut self, _frame: &[u8], _name: &[u8], _resp3: bool, out: &mut Vec<u8>) {
            self.0 += 1;
            out.push(b'x');
        }
    }

    #[test]
    fn the_caller_is_reached_while_it_runs_and_never_twice_at_once() {
        let mut counter = Counter(0);
        assert!(with_current(|_| ()).is_none(), "no caller outside a run");
        with_caller(&mut counter, || {
            let mut out = Vec::new();
            assert_eq!(with_current(|caller| caller.call(b"", b"", false, &mut out)), Some(()));
            let nested = with_current(|_| with_current(|_| ()).is_none());
            assert_eq!(nested, Some(true), "inside a call the caller is not reachable again");
            assert_eq!(with_current(|caller| caller.call(b"", b"", false, &mut out)), Some(()));
        });
        assert!(with_current(|_| ()).is_none(), "gone after the run");
        assert_eq!(counter.0, 2);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_caller(&mut counter, || panic!("a run that unwinds"));
        }));
        assert!(unwound.is_err());
        assert!(with_current(|_| ()).is_none(), "gone after a run that unwound");
    }
}
