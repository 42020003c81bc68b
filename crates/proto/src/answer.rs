//! The seam between the dialects and the one vocabulary: a request of any dialect to its
//! [`Command`] ([`Request::key_command`]), and a command's reply worded by the dialect that
//! parsed it ([`Answer`]'s encoders dispatch to each dialect's `reply` module). A new dialect
//! adds its arm in each.

use crate::command::{Answer, Command, Created};
use crate::{Limits, Request, StoreMode};
use qs_store::{Hit, Now, Outcome};

impl<'r> Request<'r> {
    /// A single-key command in the one vocabulary ([`crate::command`]), whatever its dialect;
    /// `None` for a request that names no key, or (a text get) a line of keys, which runs as
    /// one get per key ([`crate::GetKind::command`]).
    #[inline]
    pub fn key_command(&'r self, limits: &Limits) -> Option<Command<'r>> {
        match self {
            Request::Meta(meta) => Some(meta.key_command(limits)),
            Request::Binary(binary) => binary.key_command(),
            Request::RespKey(command) => Some(*command),
            // Read when it was parsed: a frame left as one is not a command on one key.
            Request::Resp(_) => None,
            _ => crate::text::key_command(self),
        }
    }
}

impl Answer<'_> {
    /// Under -C, the CAS a store compares, as memcached 1.6.18 compares it when its items
    /// carry none: a binary frame's CAS is the new item's, so it is dropped and the store is
    /// its opcode's plain one; an append or prepend with a CAS appends unconditionally; the text and
    /// meta protocols compare a `cas`/`C` with the item's and never match.
    #[inline]
    pub fn mode_without_cas(&self, mode: StoreMode) -> StoreMode {
        match (self, mode) {
            (_, StoreMode::AppendCas(_)) => StoreMode::Append,
            (_, StoreMode::PrependCas(_)) => StoreMode::Prepend,
            (Answer::Binary { opcode, .. }, StoreMode::Cas(_)) => match *opcode {
                crate::binary::opcode::ADD | crate::binary::opcode::ADDQ => StoreMode::Add,
                crate::binary::opcode::REPLACE | crate::binary::opcode::REPLACEQ => StoreMode::Replace,
                _ => StoreMode::Set,
            },
            (_, StoreMode::Cas(_)) => StoreMode::Cas(u64::MAX),
            (_, other) => other,
        }
    }

    /// A store's reply; `size` is the item's value length once stored (meta `s`).
    #[inline]
    pub fn store(&self, outcome: &Outcome, (cas, size, mode): (u64, usize, StoreMode), out: &mut Vec<u8>) {
        match *self {
            Answer::Text { noreply: true, .. } => {}
            Answer::Text { .. } => crate::text::reply::store(outcome, out),
            Answer::Meta(meta) => crate::meta::reply::store(meta, outcome, cas, size, out),
            Answer::Binary { opcode, opaque, quiet, .. } => {
                crate::binary::reply::store((opcode, opaque, quiet), outcome, cas, mode, out);
            }
            Answer::Resp(reply) => crate::resp::reply::store(reply, outcome, size, out),
        }
    }

    /// A store refused for its size before its data was read.
    #[inline]
    pub fn too_large(&self, out: &mut Vec<u8>) {
        match *self {
            Answer::Text { noreply: true, .. } => {}
            Answer::Text { .. } | Answer::Meta(_) => out.extend_from_slice(crate::response::TOO_LARGE),
            Answer::Binary { opcode, opaque, .. } => {
                crate::binary::write_error(out, opcode, opaque, crate::binary::status::E2BIG);
            }
            Answer::Resp(_) => out.extend_from_slice(crate::resp::reply::TOO_LARGE),
        }
    }

    /// A key no item can have (empty, or over [`crate::KEY_BYTES_MAX`]): refused before any
    /// partition is asked. Only the Redis protocol lets such a key through its parser (the
    /// memcached dialects refuse it while parsing), but every dialect has its words for it.
    #[inline]
    pub fn bad_key(&self, out: &mut Vec<u8>) {
        match *self {
            Answer::Text { noreply: true, .. } => {}
            Answer::Text { .. } | Answer::Meta(_) => out.extend_from_slice(crate::response::BAD_FORMAT),
            Answer::Binary { opcode, opaque, .. } => {
                crate::binary::write_error(out, opcode, opaque, crate::binary::status::EINVAL);
            }
            Answer::Resp(_) => out.extend_from_slice(crate::resp::reply::BAD_KEY),
        }
    }

    /// A delete's reply.
    #[inline]
    pub fn delete(&self, outcome: &Outcome, out: &mut Vec<u8>) {
        match *self {
            Answer::Text { noreply: true, .. } => {}
            Answer::Text { .. } => crate::text::reply::delete(outcome, out),
            Answer::Meta(meta) => crate::meta::reply::delete(meta, outcome, out),
            Answer::Binary { opcode, opaque, quiet, .. } => {
                crate::binary::reply::delete((opcode, opaque, quiet), outcome, out);
            }
            Answer::Resp(_) => crate::resp::reply::delete(outcome, out),
        }
    }

    /// incr/decr's reply; `cas` is the counter's.
    #[inline]
    pub fn arith(&self, (outcome, created): (&Outcome, Created), cas: u64, now: Now, out: &mut Vec<u8>) {
        match *self {
            Answer::Text { noreply: true, .. } => {}
            Answer::Text { .. } => crate::text::reply::arith(outcome, out),
            Answer::Meta(meta) => crate::meta::reply::arith(meta, (outcome, created), cas, now, out),
            Answer::Binary { opcode, opaque, quiet, .. } => {
                crate::binary::reply::arith((opcode, opaque, quiet), outcome, cas, out);
            }
            Answer::Resp(_) => crate::resp::reply::arith(outcome, out),
        }
    }

    /// A touch's reply; `cas` is the item's, when the touch read it.
    #[inline]
    pub fn touch(&self, outcome: &Outcome, cas: u64, out: &mut Vec<u8>) {
        match *self {
            Answer::Text { noreply: true, .. } | Answer::Meta(_) => {}
            Answer::Text { .. } => crate::text::reply::touch(outcome, out),
            Answer::Resp(_) => crate::resp::reply::touch(outcome, out),
            Answer::Binary { opcode, opaque, .. } => {
                crate::binary::reply::touch((opcode, opaque), outcome, cas, out)
            }
        }
    }

    /// What goes before a get's value, for a hit of `key` (its CAS `cas`): the text `VALUE`
    /// line, the binary header, the meta get's line (which reports what the read decided: a
    /// win token, a stale item). Whether the value follows it (a meta get without `v`, or
    /// whose `C` names the version the client has, sends none).
    #[inline(always)]
    pub fn head(&self, key: &[u8], hit: &Hit, cas: u64, now_secs: u32, out: &mut Vec<u8>) -> bool {
        match *self {
            Answer::Text { with_cas, .. } => {
                crate::text::reply::head(key, hit, with_cas.then_some(cas), out);
                true
            }
            Answer::Binary { opcode, opaque, with_key, .. } => {
                let key = if with_key { key } else { &[] };
                crate::binary::reply::head((opcode, opaque), key, hit, cas, out);
                true
            }
            Answer::Meta(meta) => crate::meta::reply::hit_head(meta, hit, cas, now_secs, out),
            Answer::Resp(reply) => crate::resp::reply::hit_head(reply, hit, out),
        }
    }

    /// What goes after a get's value (`\r\n` in the text protocol and meta's).
    #[inline(always)]
    pub fn tail(&self, out: &mut Vec<u8>) {
        if let Answer::Text { .. } | Answer::Meta(_) | Answer::Resp(_) = self {
            crate::out::append(out, b"\r\n");
        }
    }

    /// A get's miss (the text protocol says nothing: `END` ends the whole get).
    #[inline]
    pub fn miss(&self, key: &[u8], out: &mut Vec<u8>) {
        match *self {
            Answer::Text { .. } => {}
            Answer::Meta(meta) => crate::meta::reply::miss(meta, out),
            Answer::Binary { opcode, opaque, quiet, with_key } => {
                crate::binary::reply::miss((opcode, opaque, quiet, with_key), key, out);
            }
            Answer::Resp(reply) => out.extend_from_slice(crate::resp::reply::null_of(reply)),
        }
    }

    /// A meta get's miss that created an empty item (N) and won it.
    #[inline]
    pub fn vivified(&self, cas: u64, now: Now, out: &mut Vec<u8>) {
        if let Answer::Meta(meta) = *self {
            crate::meta::reply::vivified(meta, cas, now, out);
        }
    }

    /// me's reply: the item (its CAS and size as memcached counts it), or none.
    #[inline]
    pub fn inspect(&self, found: Option<(&Hit, u64, usize)>, now: Now, out: &mut Vec<u8>) {
        match *self {
            Answer::Meta(meta) => crate::meta::reply::inspect(meta, found, now, out),
            Answer::Resp(reply) => crate::resp::reply::inspect(reply, found.map(|(hit, _, _)| hit), now, out),
            _ => {}
        }
    }
}
