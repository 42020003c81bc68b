//! The partition's side of values sent from the log ([`crate::pinned`]): reading them in
//! place, and rescuing them before a write.

use crate::log::Log;
use crate::pinned::{self, LogValue};

impl pinned::Memory for Log {
    fn place(&self, offset: u64) -> (bool, usize) {
        Log::place(self, offset)
    }

    fn copy(&self, offset: u64, start: usize, len: usize) -> Box<[u8]> {
        let mut copy = Vec::with_capacity(len);
        self.read_bytes(offset, start, len, &mut copy);
        copy.into_boxed_slice()
    }
}

impl super::Partition {
    /// The bytes of `value`, a value this partition pinned: in the log, or its copy if the
    /// memory was written again since. The slice borrows the partition, so nothing writes
    /// the log while it lives.
    ///
    /// # Panics
    /// If `value` was pinned by another partition.
    pub fn value_bytes<'a>(&'a self, value: &'a LogValue) -> &'a [u8] {
        match pinned::rescued(&self.pins, value) {
            Ok(Some(copy)) => return copy,
            Ok(None) => {}
            Err(()) => panic!("a value pinned by another partition"),
        }
        #[cfg(not(loom))]
        {
            let (offset, start, len) = pinned::place(value);
            // SAFETY: the value is pinned and not rescued, so its bytes have not been written
            // since the read that pinned it (every write of the log checks the pins first and
            // rescues what it would overwrite), and nothing writes them while the slice lives:
            // only this partition writes its log, its writes need `&mut self` (or run inside a
            // method that has it), and the slice borrows `&self`.
            unsafe { self.shared.log.bytes_in_place(offset, start, len) }
        }
        #[cfg(loom)]
        unreachable!("loom's pins are rescued when made")
    }

    /// Copies out the pinned values `bytes` bytes written at item offset `offset` would
    /// overwrite (nothing to do, and one branch, when none is pinned).
    #[inline(always)]
    pub(super) fn before_writing(&mut self, offset: u64, bytes: usize) {
        if !self.pins.is_empty() {
            self.pins.rescue_overlapping(&self.shared.log, offset, bytes);
        }
    }
}
