//! The Redis protocol's framing and command checks over arbitrary bytes: requests are parsed
//! one after another as a connection would; every frame's arguments are walked and its
//! command checked and answered. Invariants: a request never claims more bytes than it was
//! given (a protocol error takes the rest), a frame has as many arguments as it says, each
//! inside the buffer, and nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qs_proto::resp::{self, command, reply};
use qs_proto::{Limits, Parsed, Request};

fuzz_target!(|input: &[u8]| {
    // A small item limit so the invalid bulk length past it is reached with small inputs.
    let limits = Limits { item_bytes_max: 100, now_ms: 0, databases: 16 };
    // The prefetch's guess reads inside the buffer, whatever it holds.
    if let Some(key) = qs_proto::key_guess(input) {
        assert!(input.as_ptr_range().contains(&key.as_ptr()) || key.is_empty());
    }
    // Odd lengths parse as a RESP3 connection would (after `HELLO 3`).
    let parse: for<'a> fn(&'a [u8], &Limits) -> Parsed<'a> =
        if input.len() % 2 == 1 { resp::parse3 } else { resp::parse };
    let mut rest = input;
    while !rest.is_empty() {
        let len = match parse(rest, &limits) {
            Parsed::Incomplete => {
                // What is here does not yet frame a request: it says how long it is at least.
                if let resp::Walked::Arriving { progress, at_least } =
                    resp::progress(rest, resp::Progress::default())
                {
                    if let Some(at_least) = at_least {
                        assert!(at_least > rest.len(), "{at_least} for {} bytes", rest.len());
                    }
                    // Walking on from a walk over the first half finds what one walk finds.
                    let half = &rest[..rest.len() / 2];
                    if let resp::Walked::Arriving { progress: first, .. } =
                        resp::progress(half, resp::Progress::default())
                    {
                        match resp::progress(rest, first) {
                            resp::Walked::Arriving { progress: again, .. } => {
                                assert_eq!(again, progress, "walked on differs from one walk")
                            }
                            resp::Walked::Other => panic!("walked on, the request broke"),
                        }
                    }
                }
                break;
            }
            Parsed::Close => unreachable!("RESP answers every framing error"),
            Parsed::Refused { len, .. } => len,
            Parsed::Request { request: Request::Resp(frame), len } => {
                let range = rest.as_ptr_range();
                let args: Vec<&[u8]> = frame.args().collect();
                assert_eq!(args.len(), frame.argc());
                for arg in &args {
                    let inside = arg.is_empty() || range.contains(&arg.as_ptr());
                    assert!(inside && arg.len() <= len, "an argument outside its frame");
                }
                let mut out = Vec::new();
                if let command::Call::Error(refusal) = command::call(&frame, &limits) {
                    reply::refusal(&refusal, &mut out);
                    assert!(out.starts_with(b"-") && out.ends_with(b"\r\n"));
                }
                len
            }
            Parsed::Request { request: Request::RespKey(command), len } => {
                // A command on one key, read when it was parsed: its key lies in the frame.
                let range = rest.as_ptr_range();
                let key = command.key;
                assert!(key.is_empty() || (range.contains(&key.as_ptr()) && key.len() <= len));
                len
            }
            Parsed::Request { request: Request::RespProtocolError(error), len } => {
                assert_eq!(len, rest.len(), "a protocol error ends the connection's input");
                let mut out = Vec::new();
                error.write(&mut out);
                assert!(out.starts_with(b"-ERR Protocol error: "));
                len
            }
            Parsed::Request { request, .. } => panic!("not a RESP request: {request:?}"),
        };
        assert!(len > 0 && len <= rest.len(), "claimed {len} of {} bytes", rest.len());
        rest = &rest[len..];
    }
});
