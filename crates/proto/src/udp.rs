//! memcached's UDP framing: every datagram starts with an 8-byte frame header (request id,
//! sequence number, datagram count, reserved; big-endian u16 each). A request must fit one
//! datagram. A reply goes out as messages, each split into datagrams of at most
//! [`DATAGRAM_BYTES_MAX`] bytes, header included, numbered 0..count with the request's id.
//!
//! memcached 1.6 sends one message per reply object: one per command's reply, and for
//! get/gets/gat/gats one per `VALUE` block, the `END` line riding in the last block's message
//! when the last key asked for was a hit and in a message of its own otherwise.
//! [`Messages`] reproduces that from the reply bytes.

/// Bytes of the frame header.
pub const HEADER_BYTES: usize = 8;
/// Largest datagram memcached sends (its `UDP_MAX_PAYLOAD_SIZE`), header included.
pub const DATAGRAM_BYTES_MAX: usize = 1400;
/// Reply bytes per datagram.
pub const PAYLOAD_BYTES_MAX: usize = DATAGRAM_BYTES_MAX - HEADER_BYTES;

/// A frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Chosen by the client; echoed in every datagram of the reply.
    pub request_id: u16,
    /// This datagram's position in its message.
    pub sequence: u16,
    /// Datagrams in the message.
    pub count: u16,
    /// Unused (memcached ignores it).
    pub reserved: u16,
}

impl FrameHeader {
    /// Reads the header at the front of `datagram`; `None` when it is shorter than a header.
    pub fn parse(datagram: &[u8]) -> Option<FrameHeader> {
        let header: &[u8; HEADER_BYTES] = datagram.first_chunk()?;
        let field = |at: usize| u16::from_be_bytes([header[at], header[at + 1]]);
        Some(FrameHeader { request_id: field(0), sequence: field(2), count: field(4), reserved: field(6) })
    }

    /// The header's bytes.
    pub fn to_bytes(self) -> [u8; HEADER_BYTES] {
        let mut bytes = [0; HEADER_BYTES];
        for (at, value) in [self.request_id, self.sequence, self.count, self.reserved].into_iter().enumerate()
        {
            bytes[at * 2..at * 2 + 2].copy_from_slice(&value.to_be_bytes());
        }
        bytes
    }

    /// Whether memcached serves a request carrying this header: the request must be a single
    /// datagram (count 1); sequence and reserved are not checked.
    pub fn is_single_request(self) -> bool {
        self.count == 1
    }
}

/// Datagram payloads of one message: chunks of at most [`PAYLOAD_BYTES_MAX`] bytes, each to be
/// sent after `FrameHeader { request_id, sequence: i, count, reserved: 0 }`. `None` for a
/// message too long to number (more than 65535 datagrams).
pub fn datagrams(message: &[u8]) -> Option<(u16, std::slice::Chunks<'_, u8>)> {
    let count = u16::try_from(message.len().div_ceil(PAYLOAD_BYTES_MAX)).ok()?;
    Some((count, message.chunks(PAYLOAD_BYTES_MAX)))
}

/// The messages of one command's reply.
pub enum Messages<'a> {
    /// A reply that is one message (or none, when empty).
    One(Option<&'a [u8]>),
    /// A get's reply, split at its `VALUE` blocks.
    Get {
        /// Reply bytes not yet returned.
        rest: &'a [u8],
        /// The last key the get asked for.
        last_key: &'a [u8],
    },
}

impl<'a> Messages<'a> {
    /// The messages of `reply`, the whole reply to one command; `last_key` is the get's last
    /// key when the command was a get/gets/gat/gats.
    pub fn new(reply: &'a [u8], last_key: Option<&'a [u8]>) -> Messages<'a> {
        match last_key {
            Some(last_key) => Messages::Get { rest: reply, last_key },
            None => Messages::One((!reply.is_empty()).then_some(reply)),
        }
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        match self {
            Messages::One(message) => message.take(),
            Messages::Get { rest, last_key } => {
                if rest.is_empty() {
                    return None;
                }
                let Some((len, key)) = value_block(rest) else {
                    // END, or anything else (an error line): the rest is one message.
                    return Some(std::mem::take(rest));
                };
                let (mut message, after) = rest.split_at(len);
                if after == b"END\r\n" && key == *last_key {
                    message = std::mem::take(rest);
                } else {
                    *rest = after;
                }
                Some(message)
            }
        }
    }
}

/// The length and key of the `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n` block at the
/// front of `reply`, if one is there whole.
fn value_block(reply: &[u8]) -> Option<(usize, &[u8])> {
    let line_end = reply.iter().position(|&b| b == b'\n')?;
    let line = reply[..line_end].strip_suffix(b"\r")?.strip_prefix(b"VALUE ")?;
    let mut fields = line.split(|&b| b == b' ');
    let key = fields.next()?;
    let _flags = fields.next()?;
    let bytes: usize = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    let len = bytes.checked_add(line_end + 3)?;
    (reply.len() >= len && &reply[len - 2..len] == b"\r\n").then_some((len, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_round_trips_big_endian() {
        let header = FrameHeader { request_id: 0x0102, sequence: 3, count: 0x0405, reserved: 9 };
        assert_eq!(header.to_bytes(), [1, 2, 0, 3, 4, 5, 0, 9]);
        assert_eq!(FrameHeader::parse(&header.to_bytes()), Some(header));
        assert_eq!(FrameHeader::parse(&[0; 7]), None);
        assert!(!FrameHeader { count: 2, ..header }.is_single_request());
        assert!(FrameHeader { count: 1, sequence: 1, ..header }.is_single_request());
    }

    fn messages<'a>(reply: &'a [u8], last_key: Option<&'a [u8]>) -> Vec<&'a [u8]> {
        Messages::new(reply, last_key).collect()
    }

    #[test]
    fn a_get_is_split_like_memcached() {
        let a = b"VALUE a 0 1\r\nA\r\n".as_slice();
        let b = b"VALUE b 5 2 9\r\nBB\r\n".as_slice();
        let both = [a, b, b"END\r\n"].concat();
        // The last key hit: END rides with its block.
        assert_eq!(messages(&both, Some(b"b")), vec![a, &both[a.len()..]]);
        // The last key missed: END alone.
        assert_eq!(messages(&both, Some(b"c")), vec![a, b, b"END\r\n"]);
        assert_eq!(messages(b"END\r\n", Some(b"a")), vec![b"END\r\n".as_slice()]);
        // A single hit is one message.
        let one = [a, b"END\r\n"].concat();
        assert_eq!(messages(&one, Some(b"a")), vec![one.as_slice()]);
        // Errors pass as they are.
        let error = b"CLIENT_ERROR bad command line format\r\n".as_slice();
        assert_eq!(messages(error, Some(b"a")), vec![error]);
        // A value that itself contains "\r\nEND\r\n" or "VALUE " is not split inside.
        let tricky = b"VALUE k 0 13\r\nx\r\nEND\r\nVALUE \r\nEND\r\n".as_slice();
        assert_eq!(messages(tricky, Some(b"k")), vec![tricky]);
    }

    #[test]
    fn other_replies_are_one_message_and_empty_ones_none() {
        assert_eq!(messages(b"STORED\r\n", None), vec![b"STORED\r\n".as_slice()]);
        assert!(messages(b"", None).is_empty());
        assert!(messages(b"", Some(b"k")).is_empty());
    }

    #[test]
    fn datagrams_are_numbered_and_bounded() {
        let message = vec![b'x'; PAYLOAD_BYTES_MAX * 2 + 1];
        let (count, chunks) = datagrams(&message).unwrap();
        let chunks: Vec<_> = chunks.collect();
        assert_eq!(count, 3);
        assert_eq!(
            chunks.iter().map(|c| c.len()).collect::<Vec<_>>(),
            [PAYLOAD_BYTES_MAX, PAYLOAD_BYTES_MAX, 1]
        );
        assert!(datagrams(&vec![0; PAYLOAD_BYTES_MAX * 65536]).is_none());
    }

    proptest! {
        /// Whatever the reply, the messages put back together are the reply.
        #[test]
        fn messages_concatenate_to_the_reply(reply in proptest::collection::vec(prop_oneof![
            Just(b"VALUE a 0 1\r\nA\r\n".to_vec()), Just(b"VALUE b 0 3 7\r\nB\rB\r\n".to_vec()),
            Just(b"END\r\n".to_vec()), Just(b"VALUE c 0 9\r\nshort\r\n".to_vec()),
            proptest::collection::vec(any::<u8>(), 0..20)], 0..8), last in prop_oneof![Just(b"a"), Just(b"b"), Just(b"c")]) {
            let reply = reply.concat();
            let joined: Vec<u8> = messages(&reply, Some(last)).concat();
            prop_assert_eq!(&joined, &reply);
            prop_assert!(messages(&reply, Some(last)).iter().all(|m| !m.is_empty()));
        }
    }
}
