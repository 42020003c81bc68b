//! A connection's long `set` whose value goes straight into its record in the log as it
//! arrives (qs_store's `Arriving`), instead of into the connection's input first. The worker
//! starts one where the key is its own (exec/arriving.rs), feeds it the bytes its socket
//! delivers (worker/window.rs, and worker/uring.rs from the ring's buffers), and links the item
//! once the value and its `\r\n` are in.

/// A set whose value is arriving into the log.
pub struct Arriving {
    /// The record in the log.
    pub record: qs_store::Arriving,
    /// The key's partition (owned by this connection's worker).
    pub partition: usize,
    /// The set's exptime, as the client sent it (for `watch mutations`).
    pub exptime: i64,
    /// No reply wanted.
    pub noreply: bool,
    /// The log's head passed the record before its value was in: the rest of the value is
    /// swallowed and the set answered as refused for memory.
    pub lost: bool,
}

impl Arriving {
    /// Value bytes still to arrive.
    pub fn remaining(&self) -> usize {
        self.record.remaining()
    }
}
