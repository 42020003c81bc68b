//! The authentication gates over arbitrary bytes: the admission phase every connection passes
//! (-Y's ASCII authentication for text; -S's header check, then the SASL gate on each binary
//! frame), fed the stream in pieces. Invariants: no panic; a connection authenticates only
//! when the auth file's credentials (foo, bar) are in what it sent; what the gate consumes
//! stays within what arrived.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qs_proto::{binary, Limits, Parsed, Request};
use qs_server::observe::counters::WorkerCounters;
use qs_server::session::auth::{admit, sasl_gate, Admission, Gate, Modes, Passwords, Phase};
use qs_server::session::{Input, State};

fuzz_target!(|input: &[u8]| {
    let [control, cut, data @ ..] = input else { return };
    let passwords = Passwords::parse(b"foo:bar\n").expect("auth file");
    let sasl = control & 1 == 1;
    let binary = control & 2 == 2;
    let modes = if sasl {
        Modes { ascii: None, sasl: Some(&passwords) }
    } else {
        Modes { ascii: Some(&passwords), sasl: None }
    };
    let credentials: &[u8] = if sasl { b"\0foo\0bar" } else { b"foo bar" };
    let cut = usize::from(*cut).max(1);
    let mut stream = Input::new(64 << 10);
    let mut state = State::Open;
    let mut counters = WorkerCounters::default();
    let mut out = Vec::new();
    let mut authenticated = false;
    let mut fed = 0;
    while fed < data.len() && !authenticated && !state.is_ending() {
        let piece = &data[fed..(fed + cut).min(data.len())];
        fed += piece.len();
        stream.buf.truncate(stream.end);
        stream.buf.extend_from_slice(piece);
        stream.end = stream.buf.len();
        let eof = fed == data.len();
        loop {
            let before = stream.end - stream.start;
            let (admission, _) = admit(&mut stream, &mut state, eof, binary, modes, &mut counters, &mut out);
            assert!(stream.start <= stream.end && stream.end <= stream.buf.len());
            match admission {
                Admission::Wait | Admission::Done => break,
                Admission::Parse if !sasl => {
                    authenticated = !binary;
                    break;
                }
                Admission::Parse => {}
            }
            // -S: the parser and the SASL gate take the frame the header check let through.
            let pending = &stream.buf[stream.start..stream.end];
            let len = match binary::parse(pending, &Limits::default()) {
                Parsed::Request { request: Request::Binary(request), len } => {
                    let mut phase = Phase::Unauthenticated;
                    let gate = sasl_gate(&request, &mut phase, &passwords, &mut counters, &mut out);
                    authenticated = phase == Phase::Authenticated;
                    if gate == (Gate::Answered { close: true }) {
                        state.close();
                    }
                    len
                }
                Parsed::Request { len, .. } | Parsed::Refused { len, .. } => len,
                Parsed::Incomplete => break,
                Parsed::Close => {
                    state.kill();
                    break;
                }
            };
            stream.consume(len);
            if authenticated || state.is_ending() || before == 0 {
                break;
            }
        }
    }
    if authenticated {
        let sent = &data[..fed];
        assert!(
            sent.windows(credentials.len()).any(|window| window == credentials),
            "authenticated without the credentials"
        );
    }
});
