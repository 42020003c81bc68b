//! What a script past `lua-time-limit` lets in: its worker's other connections, answered
//! `-BUSY` (or, for what redis-server lets through while a script runs, served) from the
//! script's hook, as redis-server answers its clients from inside a long script
//! (`processEventsWhileBlocked`). The worker's turn puts its door here for a run's length; the
//! hook opens it ([`serve`]).

use std::cell::Cell;
use std::ptr::NonNull;

/// A worker's connections other than the running script's, as the hook reaches them.
pub(crate) trait Door {
    /// Reads what they sent and answers it as redis-server answers while a script runs.
    fn serve(&mut self);
}

type Erased = NonNull<dyn Door + 'static>;

thread_local! {
    /// The door of the run on this thread (`None` between runs, and while it is served).
    static DOOR: Cell<Option<Erased>> = const { Cell::new(None) };
}

/// Puts a value back into [`DOOR`] when dropped (on return and on unwinding alike).
struct Restore(Option<Erased>);

impl Drop for Restore {
    fn drop(&mut self) {
        DOOR.set(self.0);
    }
}

/// Runs `f` (a script's run) with `door` as this thread's door.
pub(crate) fn with_door<R>(door: &mut dyn Door, f: impl FnOnce() -> R) -> R {
    let pointer = NonNull::from(door);
    // SAFETY: only the lifetime is erased (same layout). The pointer lives in DOOR only while
    // `f` runs: `Restore` puts the previous value back when `f` returns or unwinds, so it is
    // never used after the borrow of `door` ends.
    let erased: Erased = unsafe { std::mem::transmute::<NonNull<dyn Door + '_>, Erased>(pointer) };
    let _restore = Restore(DOOR.replace(Some(erased)));
    f()
}

/// Serves the door of the run on this thread, if it has one (and is not being served).
pub(crate) fn serve() {
    let Some(pointer) = DOOR.take() else { return };
    let _restore = Restore(Some(pointer));
    // SAFETY: `with_door` set the pointer from a `&mut dyn Door` it holds borrowed while the
    // pointer is in DOOR; taken out of DOOR, it is reachable from here alone until `Restore`
    // puts it back, so this is the one reference to the door meanwhile.
    let door = unsafe { &mut *pointer.as_ptr() };
    door.serve();
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Count(u32);

    impl Door for Count {
        fn serve(&mut self) {
            self.0 += 1;
            // Served again from inside: not reachable twice at once.
            serve();
        }
    }

    #[test]
    fn the_door_is_served_while_its_run_lasts_and_never_twice_at_once() {
        let mut count = Count(0);
        serve();
        with_door(&mut count, || {
            serve();
            serve();
        });
        serve();
        assert_eq!(count.0, 2);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_door(&mut count, || panic!("a run that unwinds"));
        }));
        assert!(unwound.is_err());
        serve();
        assert_eq!(count.0, 2, "gone after a run that unwound");
    }
}
