//! The binary protocol's replies to what the executor did ([`crate::command::Answer::Binary`]),
//! as memcached 1.6.18 sends them (proto_bin.c): errors are sent even for quiet commands,
//! successes of quiet commands are not, a quiet get sends only hits.

use super::{status, write_error, Reply};
use crate::StoreMode;
use qs_store::{Hit, Outcome};

/// The reply's fixed part: the request's opcode and opaque, status 0.
fn reply(opcode: u8, opaque: [u8; 4]) -> Reply<'static> {
    Reply { opcode, opaque, status: status::NO_ERROR, cas: 0, extras: &[], key: &[], value_len: 0 }
}

/// A store's reply: the new CAS (`cas`, as clients see it), or why not.
#[inline]
pub(crate) fn store(
    (opcode, opaque, quiet): (u8, [u8; 4], bool),
    outcome: &Outcome,
    cas: u64,
    mode: StoreMode,
    out: &mut Vec<u8>,
) {
    let failure = match outcome {
        Outcome::Stored { .. } if quiet => return,
        Outcome::Stored { .. } => return Reply { cas, ..reply(opcode, opaque) }.write_head(out),
        Outcome::Exists => status::KEY_EEXISTS,
        Outcome::NotFound => status::KEY_ENOENT,
        Outcome::TooLarge => status::E2BIG,
        Outcome::OutOfMemory => status::ENOMEM,
        _ => match mode {
            StoreMode::Add => status::KEY_EEXISTS,
            StoreMode::Replace => status::KEY_ENOENT,
            _ => status::NOT_STORED,
        },
    };
    write_error(out, opcode, opaque, failure);
}

/// A delete's reply.
#[inline]
pub(crate) fn delete((opcode, opaque, quiet): (u8, [u8; 4], bool), outcome: &Outcome, out: &mut Vec<u8>) {
    match outcome {
        Outcome::Deleted if quiet => {}
        Outcome::Deleted => reply(opcode, opaque).write_head(out),
        Outcome::Exists => write_error(out, opcode, opaque, status::KEY_EEXISTS),
        _ => write_error(out, opcode, opaque, status::KEY_ENOENT),
    }
}

/// An increment's or decrement's reply: the counter's new value (8 bytes) and CAS, or why not.
#[inline]
pub(crate) fn arith(
    (opcode, opaque, quiet): (u8, [u8; 4], bool),
    outcome: &Outcome,
    cas: u64,
    out: &mut Vec<u8>,
) {
    let failure = match *outcome {
        Outcome::Counter { .. } if quiet => return,
        Outcome::Counter { value, .. } => {
            Reply { cas, value_len: 8, ..reply(opcode, opaque) }.write_head(out);
            return out.extend_from_slice(&value.to_be_bytes());
        }
        Outcome::NonNumeric => status::DELTA_BADVAL,
        Outcome::Exists => status::KEY_EEXISTS,
        Outcome::NotStored => status::NOT_STORED,
        Outcome::OutOfMemory => status::ENOMEM,
        _ => status::KEY_ENOENT,
    };
    write_error(out, opcode, opaque, failure);
}

/// TOUCH's reply: the item's flags and CAS, or KEY_ENOENT.
#[inline]
pub(crate) fn touch((opcode, opaque): (u8, [u8; 4]), outcome: &Outcome, cas: u64, out: &mut Vec<u8>) {
    match outcome {
        Outcome::Hit(hit) => {
            let flags = hit.flags.to_be_bytes();
            Reply { cas, extras: &flags, ..reply(opcode, opaque) }.write_head(out);
        }
        _ => write_error(out, opcode, opaque, status::KEY_ENOENT),
    }
}

/// What goes before a hit's value: the header (the item's CAS), the flags as extras, then
/// `key` (empty unless the opcode returns it).
#[inline(always)]
pub(crate) fn head((opcode, opaque): (u8, [u8; 4]), key: &[u8], hit: &Hit, cas: u64, out: &mut Vec<u8>) {
    let flags = hit.flags.to_be_bytes();
    Reply { cas, extras: &flags, key, value_len: hit.value_len, ..reply(opcode, opaque) }.write_head(out);
}

/// A get's miss: nothing when quiet; the key, when the opcode returns it, instead of
/// memcached's "Not found".
#[inline]
pub(crate) fn miss(
    (opcode, opaque, quiet, with_key): (u8, [u8; 4], bool, bool),
    key: &[u8],
    out: &mut Vec<u8>,
) {
    if quiet {
        return;
    }
    if with_key {
        return Reply { status: status::KEY_ENOENT, key, ..reply(opcode, opaque) }.write_head(out);
    }
    write_error(out, opcode, opaque, status::KEY_ENOENT);
}
