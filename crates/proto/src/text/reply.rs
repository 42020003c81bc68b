//! The text protocol's replies to what the executor did ([`crate::command::Answer::Text`]).

use crate::response::{self as reply};
use qs_store::{Hit, Outcome};

/// A store's reply.
#[inline]
pub(crate) fn store(outcome: &Outcome, out: &mut Vec<u8>) {
    if let Outcome::Stored { .. } = outcome {
        // The common reply, a copy of known length.
        return crate::out::append(out, reply::STORED);
    }
    out.extend_from_slice(match outcome {
        Outcome::NotStored => reply::NOT_STORED,
        Outcome::Exists => reply::EXISTS,
        Outcome::NotFound => reply::NOT_FOUND,
        Outcome::TooLarge => reply::TOO_LARGE,
        Outcome::OutOfMemory => reply::OUT_OF_MEMORY,
        _ => reply::BAD_FORMAT,
    });
}

/// A delete's reply.
#[inline]
pub(crate) fn delete(outcome: &Outcome, out: &mut Vec<u8>) {
    out.extend_from_slice(if *outcome == Outcome::Deleted { reply::DELETED } else { reply::NOT_FOUND });
}

/// incr/decr's reply: the new value, or why not.
#[inline]
pub(crate) fn arith(outcome: &Outcome, out: &mut Vec<u8>) {
    match *outcome {
        Outcome::Counter { value, .. } => {
            reply::push_u64(out, value);
            out.extend_from_slice(b"\r\n");
        }
        Outcome::NonNumeric => out.extend_from_slice(reply::NON_NUMERIC),
        Outcome::OutOfMemory => out.extend_from_slice(reply::ARITH_OUT_OF_MEMORY),
        _ => out.extend_from_slice(reply::NOT_FOUND),
    }
}

/// touch's reply.
#[inline]
pub(crate) fn touch(outcome: &Outcome, out: &mut Vec<u8>) {
    let touched = matches!(outcome, Outcome::Touched | Outcome::Hit(_));
    out.extend_from_slice(if touched { reply::TOUCHED } else { reply::NOT_FOUND });
}

/// What goes before a hit's value: `VALUE <key> <flags> <bytes>[ <cas>]\r\n`.
#[inline(always)]
pub(crate) fn head(key: &[u8], hit: &Hit, cas: Option<u64>, out: &mut Vec<u8>) {
    reply::value_line(out, key, hit.flags, hit.value_len, cas);
}
