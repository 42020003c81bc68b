//! memcached's UDP framing over arbitrary bytes: the frame header, a message split into
//! numbered datagrams, and a get's reply split at its VALUE blocks. Invariants: no panic; the
//! header reads back what it wrote; datagrams and messages put together are the message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qs_proto::udp::{datagrams, FrameHeader, Messages, PAYLOAD_BYTES_MAX};

fuzz_target!(|input: &[u8]| {
    if let Some(header) = FrameHeader::parse(input) {
        assert_eq!(FrameHeader::parse(&header.to_bytes()), Some(header));
    }
    // The first byte says where the last key ends (a get's reply) or that there is none.
    let (split, reply) = match input {
        [split, reply @ ..] => (usize::from(*split), reply),
        [] => return,
    };
    if let Some((count, chunks)) = datagrams(reply) {
        let chunks: Vec<&[u8]> = chunks.collect();
        assert_eq!(chunks.len(), usize::from(count));
        assert!(chunks.iter().all(|chunk| chunk.len() <= PAYLOAD_BYTES_MAX && !chunk.is_empty()));
        assert_eq!(chunks.concat(), reply);
    }
    let last_key = (split < 64).then(|| &reply[..split.min(reply.len())]);
    let messages: Vec<&[u8]> = Messages::new(reply, last_key).collect();
    assert!(messages.iter().all(|message| !message.is_empty()));
    assert_eq!(messages.concat(), reply, "messages lose or add bytes");
});
