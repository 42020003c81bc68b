//! What the worker may do with a connection ([`State`]), what a blocked one waits for
//! ([`Wait`]), and how its bytes move ([`RingIo`]).

/// What a connection's requests wait for while it is [`State::Blocked`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Every request it handed to other workers has come back (its next request must run
    /// after them, or it has `PENDING_PER_CONN_MAX` out).
    Replies,
    /// Its first request's flash reads (worker::flash): it runs again when they are back.
    Flash,
    /// This turn's hand-over batches are sent (an owner's batch is full, or `-R`'s count of
    /// requests per event is reached): it runs again next turn.
    Turn,
}

/// Where a connection stands. Facts about its socket (readable, closed by the peer, refusing
/// writes) and its input (starved, at its end) are kept beside it; this is what the worker
/// may do with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Reads and runs requests.
    Open,
    /// Reads nothing and runs nothing until what it waits for is done.
    Blocked(Wait),
    /// Reads nothing more; closes once its output is sent (quit, end of input, shutdown).
    Closing,
    /// Closes now.
    Dead,
}

impl State {
    /// Blocks an open connection on `why` (a closing or dead one stays as it is).
    pub fn block(&mut self, why: Wait) {
        if matches!(self, State::Open | State::Blocked(_)) {
            *self = State::Blocked(why);
        }
    }

    /// Opens a connection blocked on `why`; true if it was.
    pub fn unblock(&mut self, why: Wait) -> bool {
        let was = *self == State::Blocked(why);
        if was {
            *self = State::Open;
        }
        was
    }

    /// Whether it is blocked on `why`.
    pub fn blocked(&self, why: Wait) -> bool {
        *self == State::Blocked(why)
    }

    /// Closes once the output is sent (a dead connection stays dead).
    pub fn close(&mut self) {
        if !self.is_dead() {
            *self = State::Closing;
        }
    }

    /// Closes now.
    pub fn kill(&mut self) {
        *self = State::Dead;
    }

    /// Whether it closes once its output is sent.
    pub fn is_closing(&self) -> bool {
        *self == State::Closing
    }

    /// Whether it closes now.
    pub fn is_dead(&self) -> bool {
        *self == State::Dead
    }

    /// Whether it ends: closing or dead.
    pub fn is_ending(&self) -> bool {
        matches!(self, State::Closing | State::Dead)
    }
}

/// How a stream connection's bytes move (`-o io_backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingIo {
    /// epoll readiness, `recv` and `send` on the socket (TLS, UDP, `io_backend=epoll`).
    Off,
    /// The worker's io_uring, with no receive posted (its input waits on its output, or the
    /// last one ended).
    Idle,
    /// The worker's io_uring, with its multishot receive posted.
    Receiving,
    /// The worker's io_uring, its receive cancelled and not yet ended (posted again only once
    /// it has, so a socket never has two).
    Cancelling,
}
