//! What the worker answers without running a request, each as memcached words it: a store
//! refused before its data block is read (too large, or no room in the client memory budget),
//! `watch` and the dumps refused or started, a UDP request whose replies outgrow a connection,
//! and the connection limit.

use crate::codec::CRAWLER_DISABLED;
use qs_proto::Request;

/// Why a store is refused before its data block is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its value is over the item size limit (-I).
    TooLarge,
    /// The client memory budget (session::budget) has no room for its value now: memcached's
    /// answer when it cannot allocate the item.
    OutOfMemory,
}

/// The answer to a store refused before its data block is read, in its dialect (nothing for
/// text's noreply).
pub fn refuse_store(request: &Request<'_>, why: Refusal, out: &mut Vec<u8>) {
    use qs_proto::binary::status;
    let (code, text) = match why {
        Refusal::TooLarge => (status::E2BIG, qs_proto::response::TOO_LARGE),
        Refusal::OutOfMemory => (status::ENOMEM, qs_proto::response::OUT_OF_MEMORY),
    };
    match request {
        Request::TooLarge { noreply: true, .. } => {}
        Request::Binary(binary) => qs_proto::binary::write_error(out, binary.opcode, binary.opaque, code),
        _ => out.extend_from_slice(text),
    }
}

/// Why `watch` is refused, as memcached words it; `None` when it starts.
pub fn watch_refusal(disabled: bool, pipelined: bool, no_streams: bool) -> Option<&'static [u8]> {
    if disabled {
        Some(b"CLIENT_ERROR watch commands not allowed\r\n")
    } else if pipelined {
        Some(b"ERROR cannot pipeline other commands before watch\r\n")
    } else if no_streams {
        Some(b"ERROR\r\n")
    } else {
        None
    }
}

/// `watch` started: what follows on the connection is log lines.
pub const WATCH_STARTED: &[u8] = b"OK\r\n";

/// What the server allows of `lru_crawler metadump` and `mgdump` now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DumpSwitches {
    /// The crawler is on (`lru_crawler enable`, not `-o no_lru_crawler`).
    pub crawler: bool,
    /// Dumps are allowed (no -X).
    pub dumping: bool,
}

/// A dump asked for: which, and whether requests were pipelined before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DumpAsked {
    /// `mgdump` (keys as `mg` lines) rather than `metadump`.
    pub keys: bool,
    /// Other requests came in the same read before it.
    pub pipelined: bool,
}

/// Why a dump is refused, as memcached words it and in its order of checks; `None` when it
/// may start.
pub fn metadump_refusal(switches: DumpSwitches, asked: DumpAsked) -> Option<&'static [u8]> {
    let DumpAsked { keys, pipelined } = asked;
    if !switches.crawler {
        Some(CRAWLER_DISABLED)
    } else if !switches.dumping {
        Some(if keys { b"ERROR key dump not allowed\r\n" } else { b"ERROR metadump not allowed\r\n" })
    } else if pipelined {
        Some(if keys {
            b"ERROR cannot pipeline other commands before mgdump\r\n"
        } else {
            b"ERROR cannot pipeline other commands before metadump\r\n"
        })
    } else {
        None
    }
}

/// memcached's reply when a UDP request's replies outgrow what is held for one connection.
pub const UDP_REPLY_TOO_LARGE: &[u8] = b"SERVER_ERROR out of memory writing get response\r\n";

/// memcached's reply when the connection limit is reached (then it closes the connection).
pub const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_store_is_answered_in_its_dialect() {
        let limits = qs_proto::Limits { item_bytes_max: 1024, now_ms: 0, databases: 16 };
        let answer = |bytes: &[u8], why| match qs_proto::parse(bytes, &limits) {
            qs_proto::Parsed::Request { request, .. } => {
                let mut out = Vec::new();
                refuse_store(&request, why, &mut out);
                out
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(answer(b"set k 0 0 2000\r\n", Refusal::TooLarge), qs_proto::response::TOO_LARGE);
        assert_eq!(answer(b"set k 0 0 2000\r\n", Refusal::OutOfMemory), qs_proto::response::OUT_OF_MEMORY);
        assert_eq!(answer(b"set k 0 0 2000 noreply\r\n", Refusal::TooLarge), b"");
    }

    #[test]
    fn watch_and_dumps_are_refused_in_memcacheds_order() {
        assert_eq!(
            watch_refusal(true, true, true),
            Some(&b"CLIENT_ERROR watch commands not allowed\r\n"[..])
        );
        assert_eq!(
            watch_refusal(false, true, true),
            Some(&b"ERROR cannot pipeline other commands before watch\r\n"[..])
        );
        assert_eq!(watch_refusal(false, false, true), Some(&b"ERROR\r\n"[..]));
        assert_eq!(watch_refusal(false, false, false), None);
        let on = DumpSwitches { crawler: true, dumping: true };
        let asked = DumpAsked { keys: false, pipelined: false };
        assert_eq!(
            metadump_refusal(DumpSwitches { crawler: false, dumping: false }, asked),
            Some(CRAWLER_DISABLED)
        );
        assert_eq!(
            metadump_refusal(
                DumpSwitches { crawler: true, dumping: false },
                DumpAsked { keys: true, pipelined: true }
            ),
            Some(&b"ERROR key dump not allowed\r\n"[..])
        );
        assert_eq!(
            metadump_refusal(on, DumpAsked { keys: false, pipelined: true }),
            Some(&b"ERROR cannot pipeline other commands before metadump\r\n"[..])
        );
        assert_eq!(metadump_refusal(on, asked), None);
    }
}
