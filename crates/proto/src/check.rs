//! Invariants of [`parse`] over a whole connection's byte stream, for property tests and the
//! fuzz targets (`fuzz/`): whatever the bytes, the parser must not panic, every request and
//! refusal must move the stream forward, what it borrows must respect the protocol's limits,
//! every reply must be one whole line, and the requests seen must not depend on how the bytes
//! were split into reads.

use crate::{parse, GetKind, Limits, Meta, MetaCommand, Parsed, Request, KEY_BYTES_MAX};

/// What a connection saw: one entry per request, refusal or close, in order.
pub type Transcript = Vec<String>;

/// Feeds `data` to a simulated connection in reads that end at each of `splits` (sorted or
/// not; out-of-range ones are ignored) and returns what it saw, or the first broken
/// invariant. The simulation keeps the server's rules: the buffer holds unparsed bytes, a
/// refusal's skip may run past the buffer and swallows later bytes, a close ends the stream.
pub fn transcript(data: &[u8], splits: &[usize], limits: &Limits) -> Result<Transcript, String> {
    transcript_of(data, splits, limits, parse)
}

/// A parser of one protocol: [`parse`] or [`crate::binary::parse`].
pub type Parser = for<'a> fn(&'a [u8], &Limits) -> Parsed<'a>;

/// [`transcript`] with the binary protocol's parser.
pub fn binary_transcript(data: &[u8], splits: &[usize], limits: &Limits) -> Result<Transcript, String> {
    transcript_of(data, splits, limits, crate::binary::parse)
}

fn transcript_of(
    data: &[u8],
    splits: &[usize],
    limits: &Limits,
    parse: Parser,
) -> Result<Transcript, String> {
    let mut ends: Vec<usize> = splits.iter().copied().filter(|&s| s < data.len()).collect();
    ends.push(data.len());
    ends.sort_unstable();
    ends.dedup();
    let mut seen = Transcript::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut skip = 0usize;
    let mut start = 0;
    for end in ends {
        let mut chunk = &data[start..end];
        start = end;
        let skipped = skip.min(chunk.len());
        skip -= skipped;
        chunk = &chunk[skipped..];
        buf.extend_from_slice(chunk);
        let mut at = 0;
        loop {
            let pending = &buf[at..];
            match parse(pending, limits) {
                Parsed::Incomplete => break,
                Parsed::Close => {
                    seen.push("close".into());
                    return Ok(seen);
                }
                Parsed::Refused { reply, len, noreply } => {
                    check_reply(reply)?;
                    if len == 0 {
                        return Err(format!("refusal {reply:?} consumed nothing"));
                    }
                    seen.push(format!("refused {reply:?} noreply={noreply}"));
                    let here = len.min(pending.len());
                    skip = len - here;
                    at += here;
                }
                Parsed::Request { request, len } => {
                    check_request(&request, len, pending, limits)?;
                    seen.push(format!("{request:?}"));
                    let here = len.min(pending.len());
                    skip = len - here;
                    at += here;
                }
            }
            if skip > 0 {
                break;
            }
        }
        buf.drain(..at);
    }
    Ok(seen)
}

/// Checks that the transcript of `data` is the same when it arrives in one read and when it
/// arrives in reads ending at `splits`; returns the transcript.
pub fn check_stream(data: &[u8], splits: &[usize], limits: &Limits) -> Result<Transcript, String> {
    check_stream_of(data, splits, limits, parse)
}

/// [`check_stream`] for a stream of binary-protocol frames.
pub fn check_binary_stream(data: &[u8], splits: &[usize], limits: &Limits) -> Result<Transcript, String> {
    check_stream_of(data, splits, limits, crate::binary::parse)
}

fn check_stream_of(
    data: &[u8],
    splits: &[usize],
    limits: &Limits,
    parse: Parser,
) -> Result<Transcript, String> {
    let whole = transcript_of(data, &[], limits, parse)?;
    let split = transcript_of(data, splits, limits, parse)?;
    if whole != split {
        return Err(format!(
            "reads ending at {splits:?} changed what was parsed:\n{whole:#?}\nvs\n{split:#?}"
        ));
    }
    Ok(whole)
}

/// A reply is empty (nothing to send) or exactly one line ending in `\r\n`.
fn check_reply(reply: &str) -> Result<(), String> {
    if reply.is_empty() {
        return Ok(());
    }
    let Some(body) = reply.strip_suffix("\r\n") else {
        return Err(format!("reply {reply:?} does not end a line"));
    };
    if body.is_empty() || body.contains(['\r', '\n']) {
        return Err(format!("reply {reply:?} is not one line"));
    }
    Ok(())
}

fn check_key(key: &[u8], what: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(format!("{what}: key of {} bytes", key.len()));
    }
    if key.iter().any(|&b| b == b' ' || b == b'\n') {
        return Err(format!("{what}: key {key:?} holds a separator"));
    }
    Ok(())
}

fn check_request(request: &Request<'_>, len: usize, buf: &[u8], limits: &Limits) -> Result<(), String> {
    if len == 0 {
        return Err(format!("{request:?} consumed nothing"));
    }
    let refused_block = match request {
        Request::TooLarge { .. } => true,
        Request::Meta(meta) => meta.too_large(limits),
        Request::Binary(binary) => {
            matches!(
                binary.command,
                crate::binary::BinaryCommand::TooLarge { .. } | crate::binary::BinaryCommand::Refuse { .. }
            )
        }
        _ => false,
    };
    if len > buf.len() && !refused_block {
        return Err(format!("{request:?} claims {len} bytes of a {}-byte buffer", buf.len()));
    }
    match request {
        Request::Get { kind, keys, single } => {
            if *single && crate::tokens::single_word(keys) != Some(keys) {
                return Err(format!("a get of one key whose keys are {keys:?}"));
            }
            // gat/gats with no key answer END, as memcached does; get/gets need one.
            let keyless = matches!(kind, GetKind::Get | GetKind::Gets);
            if keyless && crate::tokens::words(keys).next().is_none() {
                return Err("get without keys".into());
            }
        }
        Request::Store { key, data, flags, .. } => {
            check_key(key, "store")?;
            if limits.too_large(key.len(), data.len(), *flags) {
                return Err(format!("accepted a {}-byte data block", data.len()));
            }
            if !buf[..len].ends_with(b"\r\n") {
                return Err("a data block not ended by \\r\\n".into());
            }
        }
        Request::TooLarge { key, .. } => check_key(key, "too large")?,
        Request::Delete { key, .. } | Request::Arith { key, .. } | Request::Touch { key, .. } => {
            check_key(key, "keyed command")?;
        }
        Request::Meta(meta) => check_meta(meta, len, buf, limits)?,
        Request::Binary(binary) => check_binary(binary, len, limits)?,
        _ => {}
    }
    Ok(())
}

fn check_binary(binary: &crate::binary::Binary<'_>, len: usize, limits: &Limits) -> Result<(), String> {
    use crate::binary::{BinaryCommand, HEADER_BYTES};
    if len < HEADER_BYTES {
        return Err(format!("a binary request of {len} bytes"));
    }
    // Binary keys may hold any byte, separators included.
    if let Some(key) = binary.command.key() {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Err(format!("binary key of {} bytes", key.len()));
        }
    }
    match binary.command {
        BinaryCommand::Store { key, flags, value, .. } if limits.too_large(key.len(), value.len(), flags) => {
            return Err(format!("binary store accepted a {}-byte value", value.len()));
        }
        BinaryCommand::SaslAuth { data, .. } if data.len() > limits.item_bytes_max => {
            return Err(format!("SASL data of {} bytes", data.len()));
        }
        _ => {}
    }
    Ok(())
}

fn check_meta(meta: &Meta<'_>, len: usize, buf: &[u8], limits: &Limits) -> Result<(), String> {
    let key = meta.key();
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(format!("meta key of {} bytes", key.len()));
    }
    if meta.too_large(limits) {
        // Too large: the server refuses it and skips the block, which never enters the buffer.
        if !meta.data.is_empty() {
            return Err("a too-large ms carried data".into());
        }
    } else if meta.command == MetaCommand::Set {
        if meta.data.len() != meta.value_len {
            return Err(format!("ms data of {} bytes, {} declared", meta.data.len(), meta.value_len));
        }
        if limits.too_large(key.len(), meta.data.len(), meta.options.client_flags) {
            return Err(format!("ms accepted a {}-byte data block", meta.data.len()));
        }
        if !buf[..len].ends_with(b"\r\n") {
            return Err("an ms data block not ended by \\r\\n".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits { item_bytes_max: 150, now_ms: 0, databases: 16 }
    }

    #[test]
    fn a_refused_block_is_swallowed_across_reads() {
        let data = b"set k 0 0 100\r\n".iter().chain([b'x'; 102].iter()).chain(b"get k\r\n").copied();
        let data: Vec<u8> = data.collect();
        let seen = check_stream(&data, &[3, 20, 60, 117], &limits()).unwrap();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen[1].starts_with("Get"), "{seen:?}");
    }

    proptest::proptest! {
        #[test]
        fn streams_of_requests_parse_the_same_however_they_are_split(
            lines in proptest::collection::vec(proptest::sample::select(vec![
                "get a b\r\n", "gets a\r\n", "set a 1 2 3\r\nabc\r\n", "set a 0 0 70\r\n", "x\r\n",
                "mg a v k O123 q\r\n", "ms a 2 T1 F5\r\nhi\r\n", "ms a 99\r\n", "md a q\r\n", "mn\r\n",
                "ma a D5 N0 J3\r\n", "incr a 5\r\n", "delete a noreply\r\n", "touch a 1\r\n", "bogus\r\n",
                "cas a 0 0 1 7\r\nz\r\n", "gat 1 a\r\n", "mg\r\n", "me a\r\n", "\r\n", "flush_all 0\r\n",
                "get \u{7f}\r\n", "ms YQ== 1 b\r\nq\r\n", "mg a a a a a a a a a a a a a a a a a a a a a\r\n",
            ]), 0..12),
            noise in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            splits in proptest::collection::vec(0usize..600, 0..6),
        ) {
            let mut data: Vec<u8> = lines.concat().into_bytes();
            data.extend_from_slice(&noise);
            if let Err(broken) = check_stream(&data, &splits, &limits()) {
                proptest::prop_assert!(false, "{}", broken);
            }
        }

        #[test]
        fn binary_frame_streams_parse_the_same_however_they_are_split(
            frames in proptest::collection::vec((
                proptest::sample::select(vec![0x00u8, 0x01, 0x02, 0x04, 0x05, 0x09, 0x0a, 0x0c, 0x0e, 0x10, 0x11, 0x1c, 0x1d, 0x21, 0x23, 0x40]),
                proptest::sample::select(vec![0usize, 4, 8, 20]),
                proptest::sample::select(vec![0usize, 1, 3, 251]),
                proptest::sample::select(vec![0usize, 2, 90, 200]),
            ), 0..8),
            splits in proptest::collection::vec(0usize..2000, 0..6),
        ) {
            let mut data = Vec::new();
            for (opcode, extras, key, value) in frames {
                data.extend(crate::binary::request_frame(opcode, 1, 0, &vec![0; extras], &vec![b'k'; key], &vec![b'v'; value]));
            }
            if let Err(broken) = check_binary_stream(&data, &splits, &limits()) {
                proptest::prop_assert!(false, "{}", broken);
            }
        }

        #[test]
        fn arbitrary_bytes_keep_the_invariants(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
            splits in proptest::collection::vec(0usize..400, 0..6),
        ) {
            if let Err(broken) = check_stream(&data, &splits, &limits()) {
                proptest::prop_assert!(false, "{}", broken);
            }
        }
    }
}
