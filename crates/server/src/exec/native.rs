//! The native protocol's requests run on their (owned) partitions: what each opcode is as a
//! store command, and what its answer is on the wire (its status, and the flags, CAS or value
//! the reply carries). The datagrams, their replies and the retransmit dedupe are the native
//! transport's (crate::native).

use super::Engine;
use qs_proto::native::{Opcode, RequestMsg, Status};
use qs_store::{KeyHash, Outcome, PartitionCommand, StoreMode};

/// What a native request answered: the reply's status, flags and number (a CAS, or a
/// counter's value), and for a hit the value's bytes, at `value` in the buffer the request ran
/// with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeAnswer {
    /// The reply's status.
    pub status: Status,
    /// The item's flags (a hit's).
    pub flags: u32,
    /// A hit's or a store's CAS, or a counter's new value.
    pub number: u64,
    /// A hit's value, as a range of the output buffer.
    pub value: std::ops::Range<usize>,
}

impl NativeAnswer {
    fn of(status: Status, number: u64) -> NativeAnswer {
        NativeAnswer { status, flags: 0, number, value: 0..0 }
    }
}

impl Engine {
    /// Runs a native request on its partition (owned here: the port's), with `out` for a hit's
    /// value; counts it as memcached's stats count the same command in the other dialects.
    pub fn run_native(
        &mut self,
        request: &RequestMsg<'_>,
        (hash, partition): (KeyHash, usize),
        out: &mut Vec<u8>,
    ) -> NativeAnswer {
        let key = request.key;
        // A key on flash comes back to DRAM first (a plain set replaces it: no read needed).
        if self.flash_on() && !(request.opcode == Opcode::Set && request.operand == 0) {
            self.flash_load_now(hash, partition, key);
        }
        let mut run = |engine: &mut Engine, command: PartitionCommand<'_>, out: &mut Vec<u8>| {
            engine.run_owned(hash, partition, key, command, out).expect("routed to the owner")
        };
        match request.opcode {
            Opcode::Get => {
                self.counters.cmd_get += 1;
                out.clear();
                match run(self, PartitionCommand::Get, out) {
                    Outcome::Hit(hit) => NativeAnswer {
                        status: Status::Ok,
                        flags: hit.flags,
                        number: hit.cas,
                        value: hit.value_start..hit.value_start + hit.value_len,
                    },
                    _ => NativeAnswer::of(Status::NotFound, 0),
                }
            }
            Opcode::Set | Opcode::Add | Opcode::Replace => self.native_store(request, &mut run),
            Opcode::Delete => {
                match run(self, PartitionCommand::Delete { cas: request.operand }, &mut Vec::new()) {
                    Outcome::Deleted => NativeAnswer::of(Status::Ok, 0),
                    Outcome::Exists => NativeAnswer::of(Status::Exists, 0),
                    _ => NativeAnswer::of(Status::NotFound, 0),
                }
            }
            Opcode::Incr | Opcode::Decr => {
                let decrement = request.opcode == Opcode::Decr;
                let command = PartitionCommand::Arith { delta: request.operand, decrement, cas: 0 };
                match run(self, command, &mut Vec::new()) {
                    Outcome::Counter { value, .. } => NativeAnswer::of(Status::Ok, value),
                    Outcome::NonNumeric => NativeAnswer::of(Status::NonNumeric, 0),
                    Outcome::OutOfMemory => NativeAnswer::of(Status::OutOfMemory, 0),
                    _ => NativeAnswer::of(Status::NotFound, 0),
                }
            }
            Opcode::Touch => {
                self.counters.cmd_touch += 1;
                let expiry = self.expiry(request.exptime);
                match run(self, PartitionCommand::Touch { expiry }, &mut Vec::new()) {
                    Outcome::Touched => NativeAnswer::of(Status::Ok, 0),
                    _ => NativeAnswer::of(Status::NotFound, 0),
                }
            }
        }
    }

    /// A native set, add, replace or CAS (a replace with a CAS); a set refused as too large
    /// drops the key's old value, as memcached's does.
    fn native_store(
        &mut self,
        request: &RequestMsg<'_>,
        run: &mut impl FnMut(&mut Engine, PartitionCommand<'_>, &mut Vec<u8>) -> Outcome,
    ) -> NativeAnswer {
        self.counters.cmd_set += 1;
        let mode = match (request.opcode, request.operand) {
            (Opcode::Add, _) => StoreMode::Add,
            (_, 0) if request.opcode == Opcode::Set => StoreMode::Set,
            (_, 0) => StoreMode::Replace,
            (_, cas) => StoreMode::Cas(cas),
        };
        let expiry = self.expiry(request.exptime);
        let command = PartitionCommand::Store { mode, value: request.value, flags: request.flags, expiry };
        match run(self, command, &mut Vec::new()) {
            Outcome::Stored { cas } => NativeAnswer::of(Status::Ok, cas),
            Outcome::NotStored => NativeAnswer::of(Status::NotStored, 0),
            Outcome::Exists => NativeAnswer::of(Status::Exists, 0),
            Outcome::NotFound => NativeAnswer::of(Status::NotFound, 0),
            outcome @ (Outcome::TooLarge | Outcome::OutOfMemory) => {
                if mode == StoreMode::Set {
                    self.drop_refused(request.key);
                }
                let status =
                    if outcome == Outcome::TooLarge { Status::TooLarge } else { Status::OutOfMemory };
                NativeAnswer::of(status, 0)
            }
            _ => NativeAnswer::of(Status::BadRequest, 0),
        }
    }
}
