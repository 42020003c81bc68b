//! The native (MICA) protocol's frames over arbitrary bytes: a request datagram's header and
//! requests, and a response datagram's responses. Invariants: no panic; every request read is
//! written back to the bytes it was read from; the iterators stop within the datagram.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qs_proto::native::{Header, Requests, Responses, HEADER_BYTES};

fuzz_target!(|datagram: &[u8]| {
    let Some(header) = Header::parse(datagram) else { return };
    let body = &datagram[HEADER_BYTES..];
    let mut requests = Requests::new(body, header.count);
    let mut at = 0;
    for request in requests.by_ref() {
        let Ok(request) = request else { break };
        let mut written = Vec::new();
        request.write(&mut written);
        assert_eq!(written.len(), request.encoded_len());
        // The reserved bytes are not read: compare what the request says.
        let again = Requests::new(&written, 1).next().expect("one").expect("its own bytes parse");
        assert_eq!(again, request);
        at += written.len();
        assert!(at <= body.len(), "a request ran past its datagram");
    }
    assert!(requests.remaining() <= body.len());
    for response in Responses::new(body, header.count) {
        if response.is_err() {
            break;
        }
    }
});
