//! The Redis protocol's gate before authentication (with -Y or -S, a `proto[resp]` listener's
//! connections authenticate with AUTH against the same users): as redis-server 7.0 with a
//! password, only AUTH, HELLO with AUTH, QUIT and RESET run; every other known command is answered
//! `-NOAUTH Authentication required.` and the connection stays (one with the wrong argument
//! count gets that error first, as redis-server checks it first). What a connection may send
//! before it has authenticated is bounded as redis-server bounds it: at most 10 arguments, each
//! at most 16 KiB, so a stranger holds almost nothing.

use super::auth::{resp_credentials, Admission, Modes, RespAuth};
use super::names::name_client;
use super::{Input, State};
use crate::observe::counters::WorkerCounters;
use crate::observe::registry::Info;
use qs_proto::resp::command::{call, Call, Refusal};
use qs_proto::resp::{reply, Frame};
use qs_proto::{Parsed, Request};

/// Most arguments a request may have before authentication (redis-server's).
const ARGS_MAX: i64 = 10;
/// Longest argument before authentication (redis-server's).
const BULK_BYTES_MAX: usize = 16384;

/// Runs the requests at the front of the input of a RESP connection that has not
/// authenticated: `Parse` once AUTH (or HELLO's AUTH) succeeded, what follows it then runs as
/// any request; the bool says whether anything was answered. `HELLO 3` with its AUTH records
/// in the connection's registry entry that it speaks RESP3 from then on.
pub fn admit_resp(
    input: &mut Input,
    (state, eof): (&mut State, bool),
    modes: Modes<'_>,
    (counters, info): (&mut WorkerCounters, Option<&Info>),
    out: &mut Vec<u8>,
) -> (Admission, bool) {
    let mut answered = false;
    loop {
        let pending = input.pending();
        if let Some(why) = oversized(pending) {
            out.extend_from_slice(why);
            input.consume(input.end - input.start);
            state.close();
            return (Admission::Done, true);
        }
        let limits = qs_proto::Limits { item_bytes_max: BULK_BYTES_MAX, now_ms: 0, databases: 16 };
        let (frame, len) = match qs_proto::resp::parse(pending, &limits) {
            Parsed::Incomplete => {
                if eof {
                    state.close();
                }
                return (Admission::Wait, answered);
            }
            Parsed::Request { request: Request::Resp(frame), len } => (frame, len),
            // A command on one key: none runs before authentication.
            Parsed::Request { request: Request::RespKey(_), len } => {
                answered = true;
                out.extend_from_slice(reply::NOAUTH);
                input.consume(len);
                continue;
            }
            Parsed::Request { request: Request::RespProtocolError(why), .. } => {
                why.write(out);
                input.consume(input.end - input.start);
                state.close();
                return (Admission::Done, true);
            }
            // An empty request: nothing to answer.
            Parsed::Refused { len, .. } => {
                input.consume(len);
                continue;
            }
            _ => {
                state.close();
                return (Admission::Done, answered);
            }
        };
        answered = true;
        let step = gate(&frame, modes, (counters, info), out);
        input.consume(len);
        match step {
            Step::Authenticated => return (Admission::Parse, true),
            Step::Quit => {
                input.consume(input.end - input.start);
                state.close();
                return (Admission::Done, true);
            }
            Step::Refused => {}
        }
    }
}

/// What one request before authentication did.
enum Step {
    /// AUTH or HELLO's AUTH succeeded.
    Authenticated,
    /// QUIT: `+OK`, then close.
    Quit,
    /// Answered with a refusal; the connection waits for more.
    Refused,
}

/// Answers one request before authentication.
fn gate(
    frame: &Frame<'_>,
    modes: Modes<'_>,
    (counters, info): (&mut WorkerCounters, Option<&Info>),
    out: &mut Vec<u8>,
) -> Step {
    let (user, password, hello) =
        match call(frame, &qs_proto::Limits { item_bytes_max: BULK_BYTES_MAX, now_ms: 0, databases: 16 }) {
            Call::Auth { user, password } => (user, password, None),
            Call::Hello { proto, auth: Some((user, password)), name } => {
                (Some(user), password, Some((proto, name)))
            }
            Call::Hello { auth: None, .. } => {
                out.extend_from_slice(reply::NOAUTH_HELLO);
                return Step::Refused;
            }
            Call::Quit => {
                out.extend_from_slice(reply::OK);
                return Step::Quit;
            }
            Call::Reset => {
                // As redis-server, which runs RESET unauthenticated: back to RESP2, no name.
                if let Some(info) = info {
                    info.set_resp(2);
                    info.set_name(b"");
                }
                out.extend_from_slice(reply::RESET);
                return Step::Refused;
            }
            // As redis-server: a wrong argument count is refused as such before the
            // authentication check; AUTH's and HELLO's own errors too. (A command this server
            // does not serve gets NOAUTH, as redis-server answers for every command it has.)
            Call::Error(refusal @ Refusal::Arity(_)) => {
                reply::refusal(&refusal, out);
                return Step::Refused;
            }
            Call::Error(refusal) if is_auth_or_hello(frame) => {
                reply::refusal(&refusal, out);
                return Step::Refused;
            }
            _ => {
                out.extend_from_slice(reply::NOAUTH);
                return Step::Refused;
            }
        };
    counters.auth_cmds += 1;
    if resp_credentials(modes, user, password) != RespAuth::Valid {
        counters.auth_errors += 1;
        out.extend_from_slice(reply::WRONGPASS);
        return Step::Refused;
    }
    match hello {
        // As redis-server: authenticated even where the name is then refused.
        Some((proto, name)) => {
            if name.map_or(true, |name| name_client(info, name, out)) {
                let resp3 = proto == Some(3);
                if let Some(info) = info {
                    info.set_resp(if resp3 { 3 } else { 2 });
                }
                reply::hello(info.map_or(0, |info| info.id), resp3, out);
            }
        }
        None => out.extend_from_slice(reply::OK),
    }
    Step::Authenticated
}

fn is_auth_or_hello(frame: &Frame<'_>) -> bool {
    let name = frame.arg(0).unwrap_or_default();
    name.eq_ignore_ascii_case(b"auth") || name.eq_ignore_ascii_case(b"hello")
}

/// Why a request arriving before authentication is refused before it is read whole: more
/// than [`ARGS_MAX`] arguments, or one longer than [`BULK_BYTES_MAX`] (redis-server's
/// `unauthenticated multibulk length` and `unauthenticated bulk length`, which close).
fn oversized(pending: &[u8]) -> Option<&'static [u8]> {
    if pending.first() != Some(&b'*') {
        return None;
    }
    let line_end = pending.iter().position(|&byte| byte == b'\r')?;
    let count = std::str::from_utf8(&pending[1..line_end]).ok()?.parse::<i64>().ok()?;
    if count > ARGS_MAX {
        return Some(b"-ERR Protocol error: unauthenticated multibulk length\r\n");
    }
    // The bulk length lines seen so far.
    let mut at = line_end + 2;
    for _ in 0..count {
        let rest = pending.get(at..)?;
        let cr = rest.iter().position(|&byte| byte == b'\r')?;
        if rest.first() != Some(&b'$') {
            return None;
        }
        let len = std::str::from_utf8(&rest[1..cr]).ok()?.parse::<usize>().ok()?;
        if len > BULK_BYTES_MAX {
            return Some(b"-ERR Protocol error: unauthenticated bulk length\r\n");
        }
        at += cr + 2 + len + 2;
    }
    None
}
