//! The client memory budget (session::budget) where requests are read: a store longer than a
//! read buffer takes its bytes from the budget before they arrive, or is refused for memory
//! (memcached's `SERVER_ERROR out of memory storing object`), its bytes swallowed unbuffered.

use super::*;

/// Limits under which every store is "too large": the parser then returns it from its command
/// line or header alone, with the length of its whole frame.
pub(super) const HEADER_ONLY: qs_proto::Limits =
    qs_proto::Limits { item_bytes_max: 0, now_ms: 0, databases: 16 };

/// The length of the store whose command line (or header) is at the front of `pending`, when
/// its frame is longer than a read buffer; `None` for anything else. Looked for only once half
/// a read buffer waits unparsed: the buffer grows only when it is full, and the worker runs
/// between reads, so the reservation still comes before any growth (and an ordinary request
/// split across reads costs no second parse).
pub(super) fn long_store(dialect: Dialect, pending: &[u8]) -> Option<usize> {
    if pending.len() < READ_BUFFER_BYTES / 2 {
        return None;
    }
    match dialect.parse(pending, &HEADER_ONLY) {
        Parsed::Request { request, len } if len > READ_BUFFER_BYTES => {
            codec::oversized_store(&request, &HEADER_ONLY).map(|_| len)
        }
        _ => None,
    }
}

/// A long RESP request the budget has no room for: redis-server's answer when maxmemory is
/// reached, and the connection closes (the rest of the request's arguments are not known, so
/// its bytes cannot be skipped). All of `pending` is done with.
pub(super) fn refuse_resp(pending: &[u8], engine: &mut Engine, output: &mut Output) -> usize {
    engine.counters.store_no_memory += 1;
    output.reply_buf().extend_from_slice(qs_proto::resp::reply::OOM);
    pending.len()
}

/// Answers the store at the front of `pending` as refused for want of memory, as memcached
/// answers when it cannot allocate the item: a `set` drops the key's old value (on its owner);
/// the reply is the dialect's. The length of its frame, to be swallowed.
pub(super) fn refuse_store(
    dialect: Dialect,
    pending: &[u8],
    me: usize,
    engine: &mut Engine,
    hand: &mut Hand<'_>,
    output: &mut Output,
) -> usize {
    let Parsed::Request { request, len } = dialect.parse(pending, &HEADER_ONLY) else {
        unreachable!("long_store found a store here")
    };
    let Some((key, drops)) = codec::oversized_store(&request, &HEADER_ONLY) else {
        unreachable!("long_store found a store here")
    };
    engine.counters.cmd_set += 1;
    engine.counters.store_no_memory += 1;
    if drops {
        let owner = engine.owner_of(key);
        if owner == me {
            engine.drop_refused(key);
        } else {
            hand.over(owner, Task::Drop, (key, None), output, engine);
        }
    }
    refusals::refuse_store(&request, refusals::Refusal::OutOfMemory, output.reply_buf());
    len
}
