//! Authentication, as memcached 1.6 does it: SASL PLAIN over the binary protocol (-S, users
//! from the `user:password` file named by `MEMCACHED_SASL_PWDB`) and ASCII authentication (-Y,
//! the first command of a text connection is `set <any> <any> <any> <len>` carrying
//! `user password`). Passwords are compared in constant time, every entry always, so neither
//! the timing nor the reply tells a wrong user from a wrong password.

use crate::observe::counters::WorkerCounters;
use crate::session::{Input, State};
use qs_proto::binary::{self as bin, opcode, status, Binary, BinaryCommand};

/// Longest authentication token memcached 1.6.42 waits for (its `MAX_AUTH_REQ_LEN`).
const AUTH_TOKEN_BYTES_MAX: usize = 16384;
/// Shortest authentication line, ending excluded (its `MIN_AUTH_REQ_LEN`).
const AUTH_LINE_BYTES_MIN: usize = 6;
/// Most entries memcached reads from an auth file (its `MAX_ENTRIES`).
const ENTRIES_MAX: usize = 8;
/// Longest line memcached reads from an auth file (its `MAX_ENTRY_LEN`).
const ENTRY_BYTES_MAX: usize = 256;

/// The users and passwords of an auth file.
#[derive(Clone, Debug, Default)]
pub struct Passwords {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Passwords {
    /// Reads `user:password` lines (memcached's format: the user ends at the first `:`, the
    /// password at the end of the line; at most 8 entries). The message is memcached's.
    pub fn load(path: &std::path::Path) -> Result<Passwords, String> {
        let data = std::fs::read(path)
            .map_err(|e| format!("Could not open authfile [{}] for reading, error {e}", path.display()))?;
        Passwords::parse(&data).ok_or_else(|| {
            format!("Authfile [{}] has a malformed entry. Should be 'user:password'", path.display())
        })
    }

    /// Parses an auth file's bytes; `None` when a line has no `:`.
    pub fn parse(data: &[u8]) -> Option<Passwords> {
        let mut entries = Vec::new();
        for line in data.split(|&byte| byte == b'\n') {
            if line.is_empty() {
                continue;
            }
            let line = &line[..line.len().min(ENTRY_BYTES_MAX - 1)];
            let colon = line.iter().position(|&byte| byte == b':')?;
            let password = &line[colon + 1..];
            let end = password.iter().position(|&byte| byte == b'\r').unwrap_or(password.len());
            entries.push((line[..colon].to_vec(), password[..end].to_vec()));
            if entries.len() == ENTRIES_MAX {
                break;
            }
        }
        Some(Passwords { entries })
    }

    /// The first user and password: what the server's own client (`--warm-from`) logs in with.
    pub fn first(&self) -> Option<(&[u8], &[u8])> {
        self.entries.first().map(|(user, password)| (&user[..], &password[..]))
    }

    /// Whether `user` and `password` match an entry. Every entry is compared in full.
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        let mut found = false;
        for (entry_user, entry_password) in &self.entries {
            // Both halves are always compared: `&` does not short-circuit.
            found |= constant_time_eq(user, entry_user) & constant_time_eq(password, entry_password);
        }
        found
    }
}

/// What an AUTH (or HELLO's AUTH) of the Redis protocol meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespAuth {
    /// No users are configured (neither -S nor -Y): redis-server's default user, no password.
    Open,
    /// The user and password match an entry.
    Valid,
    /// They do not.
    Invalid,
}

/// Checks a Redis AUTH against -Y's users, or else SASL's: `AUTH user password`, or `AUTH
/// password` for the one user of a file that has one (else the user `default`).
pub fn resp_credentials(modes: Modes<'_>, user: Option<&[u8]>, password: &[u8]) -> RespAuth {
    let Some(passwords) = modes.ascii.or(modes.sasl) else {
        return RespAuth::Open;
    };
    let user = match (user, passwords.entries.as_slice()) {
        (Some(user), _) => user,
        (None, [(only, _)]) => only,
        (None, _) => b"default",
    };
    if passwords.check(user, password) {
        RespAuth::Valid
    } else {
        RespAuth::Invalid
    }
}

/// Compares in time that depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut difference = (a.len() != b.len()) as u8;
    for (index, &byte) in a.iter().enumerate() {
        difference |= byte ^ b.get(index).copied().unwrap_or(!byte);
    }
    std::hint::black_box(difference) == 0
}

/// Longest body an unauthenticated binary frame may announce: a SASL mechanism and a PLAIN
/// token (an auth file's line is at most 256 bytes), or nothing. Longer ones are refused after
/// their header, before their body is read, so a connection that has not authenticated holds
/// almost nothing.
pub const UNAUTHENTICATED_BODY_BYTES_MAX: usize = AUTH_TOKEN_BYTES_MAX;

/// Where a connection stands with authentication (memcached swaps the connection's parser:
/// `try_read_command_asciiauth`, then `_ascii`). Chosen when the connection is accepted, from
/// the server's mode; it moves once, to `Authenticated`, when the client authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// No authentication is asked (neither -S nor -Y; UDP, which start-up keeps off under
    /// both): every request is parsed and run, no gate looked at.
    Open,
    /// Nothing is parsed but what may authenticate ([`admit`]), and a binary frame passes
    /// [`sasl_gate`] first.
    Unauthenticated,
    /// Authenticated: its requests run; under -S, SASL frames are still answered by the gate.
    Authenticated,
}

impl Phase {
    /// The phase a stream connection starts in under `modes`.
    pub fn at_accept(modes: Modes<'_>) -> Phase {
        if modes.ascii.is_none() && modes.sasl.is_none() {
            Phase::Open
        } else {
            Phase::Unauthenticated
        }
    }

    /// Whether its requests may be parsed and run.
    #[inline(always)]
    pub fn admitted(self) -> bool {
        self != Phase::Unauthenticated
    }
}

/// The server's authentication mode, as connections meet it.
#[derive(Clone, Copy)]
pub struct Modes<'a> {
    /// -Y: the ASCII authentication's users.
    pub ascii: Option<&'a Passwords>,
    /// -S: SASL's users.
    pub sasl: Option<&'a Passwords>,
}

/// Where a connection that has not authenticated stands once the gate has seen its input.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// Parse its requests: it has authenticated, or its first frame is one the per-request
    /// SASL gate ([`sasl_gate`]) answers.
    Parse,
    /// Waits for more input (or closed, its state says so).
    Wait,
    /// Answered (or closed) here; nothing to parse.
    Done,
}

/// The phase every connection passes before any request of its runs, whatever its listener
/// or dialect (memcached swaps the connection's parser once; the check is here once): -Y's
/// ASCII authentication for text; for binary under -S, a frame other than SASL or VERSION is
/// refused with its header, extras and key read and its body never buffered, as memcached's
/// `dispatch_bin_command` refuses it; a dialect the mode cannot authenticate (start-up refuses
/// such listeners; this holds all the same) is refused and closed.
pub fn admit(
    input: &mut Input,
    state: &mut State,
    eof: bool,
    binary: bool,
    modes: Modes<'_>,
    counters: &mut WorkerCounters,
    out: &mut Vec<u8>,
) -> (Admission, bool) {
    match (binary, modes.ascii, modes.sasl) {
        (false, Some(passwords), _) => admit_ascii(input, state, eof, passwords, counters, out),
        (true, _, Some(_)) => match sasl_header_gate(input.pending(), out) {
            Admission::Done => {
                refuse_all(input, state);
                (Admission::Done, true)
            }
            other => (other, false),
        },
        (false, None, _) => {
            if input.pending().is_empty() {
                return (Admission::Wait, false);
            }
            out.extend_from_slice(b"CLIENT_ERROR unauthenticated\r\n");
            refuse_all(input, state);
            (Admission::Done, true)
        }
        (true, _, None) => {
            let Some(head) = input.pending().first_chunk::<{ bin::HEADER_BYTES }>() else {
                return (Admission::Wait, false);
            };
            bin::write_error(out, head[1], [head[12], head[13], head[14], head[15]], status::AUTH_ERROR);
            refuse_all(input, state);
            (Admission::Done, true)
        }
    }
}

/// Drops what the connection sent and closes it once its reply is out.
fn refuse_all(input: &mut Input, state: &mut State) {
    input.consume(input.end - input.start);
    state.close();
}

/// -Y: runs the ASCII authentication over the front of the input.
fn admit_ascii(
    input: &mut Input,
    state: &mut State,
    eof: bool,
    passwords: &Passwords,
    counters: &mut WorkerCounters,
    out: &mut Vec<u8>,
) -> (Admission, bool) {
    let mut answered = false;
    loop {
        if !input.apply_skip() {
            return (Admission::Wait, answered);
        }
        let pending = input.pending();
        match ascii_auth(pending, passwords, counters, out) {
            AsciiAuth::Wait => {
                if pending.len() >= input.limit {
                    state.kill();
                } else if eof {
                    state.close();
                }
                return (Admission::Wait, answered);
            }
            AsciiAuth::Close => {
                state.kill();
                return (Admission::Done, answered);
            }
            AsciiAuth::Answered { consumed, authenticated } => {
                answered = true;
                input.consume(consumed);
                if authenticated {
                    return (Admission::Parse, answered);
                }
            }
        }
    }
}

/// -S, before authentication: looks at the binary frame at the front of `pending` once its
/// header, extras and key are in. `Parse`: let the parser and [`sasl_gate`] have it (a SASL
/// frame or VERSION of a sane length, or a malformed frame, which the parser refuses as
/// memcached does whatever the authentication); `Wait`: for more; `Done`: refused into `out`
/// (close the connection).
fn sasl_header_gate(pending: &[u8], out: &mut Vec<u8>) -> Admission {
    if pending.first() != Some(&bin::REQUEST_MAGIC) {
        // Nothing yet, or not a binary frame (the parser closes the connection).
        return Admission::Parse;
    }
    let Some(head) = pending.first_chunk::<{ bin::HEADER_BYTES }>() else {
        return Admission::Wait;
    };
    let key_len = u16::from_be_bytes([head[2], head[3]]) as usize;
    let extras_len = head[4] as usize;
    let body_len = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
    if pending.len() < bin::HEADER_BYTES + extras_len + key_len {
        return Admission::Wait;
    }
    if key_len + extras_len > body_len || key_len > qs_proto::KEY_BYTES_MAX {
        return Admission::Parse;
    }
    let code = head[1];
    let allowed =
        matches!(code, opcode::SASL_LIST_MECHS | opcode::SASL_AUTH | opcode::SASL_STEP | opcode::VERSION);
    if allowed && body_len <= UNAUTHENTICATED_BODY_BYTES_MAX {
        return Admission::Parse;
    }
    bin::write_error(out, code, [head[12], head[13], head[14], head[15]], status::AUTH_ERROR);
    Admission::Done
}

/// What the SASL gate did with a binary request.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// Not an authentication matter: run it.
    Pass,
    /// Answered here; close the connection after the reply when `close`.
    Answered {
        /// Close after the reply.
        close: bool,
    },
}

/// With -S: answers the SASL opcodes, and refuses (then closes) every other request but
/// VERSION before the connection has authenticated, as memcached does.
pub fn sasl_gate(
    request: &Binary<'_>,
    phase: &mut Phase,
    passwords: &Passwords,
    counters: &mut WorkerCounters,
    out: &mut Vec<u8>,
) -> Gate {
    let Binary { opcode: code, opaque, .. } = *request;
    match request.command {
        BinaryCommand::SaslListMechs => {
            bin::write_simple(out, code, opaque, status::NO_ERROR, 0, b"PLAIN");
            Gate::Answered { close: false }
        }
        BinaryCommand::SaslAuth { mechanism, data, step } => {
            // PLAIN is one step: authzid NUL user NUL password.
            let mut parts = data.splitn(3, |&byte| byte == 0);
            let (_, user, password) = (parts.next(), parts.next(), parts.next());
            let ok = match (step, mechanism, user, password) {
                (false, b"PLAIN", Some(user), Some(password)) => passwords.check(user, password),
                _ => false,
            };
            counters.auth_cmds += 1;
            if ok {
                *phase = Phase::Authenticated;
                bin::write_simple(out, code, opaque, status::NO_ERROR, 0, b"Authenticated");
            } else {
                counters.auth_errors += 1;
                bin::write_error(out, code, opaque, status::AUTH_ERROR);
            }
            Gate::Answered { close: false }
        }
        _ if phase.admitted() || code == opcode::VERSION => Gate::Pass,
        // memcached checks lengths before authentication: a malformed frame gets its own reply.
        BinaryCommand::Refuse { status: status::UNKNOWN_COMMAND, close: true } => Gate::Pass,
        _ => {
            bin::write_error(out, code, opaque, status::AUTH_ERROR);
            Gate::Answered { close: true }
        }
    }
}

/// What ASCII authentication did with the front of a connection's input.
#[derive(Debug, PartialEq, Eq)]
pub enum AsciiAuth {
    /// The authentication command is not all here yet.
    Wait,
    /// Close now (no newline in the first 2048 bytes, as memcached).
    Close,
    /// Answered (`reply`); `consumed` bytes are done with.
    Answered {
        /// Bytes used.
        consumed: usize,
        /// The connection is now authenticated.
        authenticated: bool,
    },
}

/// memcached's `try_read_command_asciiauth`: until a connection authenticates, its input
/// must be `set <key> <flags> <exptime> <len>\r\n<user> <password>\r\n`; anything else is
/// answered `CLIENT_ERROR unauthenticated` (its line consumed).
pub fn ascii_auth(
    pending: &[u8],
    passwords: &Passwords,
    counters: &mut WorkerCounters,
    out: &mut Vec<u8>,
) -> AsciiAuth {
    if pending.len() < 2 {
        return AsciiAuth::Wait;
    }
    let Some(newline) = pending.iter().position(|&byte| byte == b'\n') else {
        return if pending.len() > qs_proto::LINE_BYTES_MAX { AsciiAuth::Close } else { AsciiAuth::Wait };
    };
    // memcached 1.6.45: no authentication line is this short; one is closed on.
    if newline < AUTH_LINE_BYTES_MIN {
        return AsciiAuth::Close;
    }
    let line = &pending[..newline];
    let line_len = newline + 1;
    let tokens = qs_proto::tokens::Tokens::<{ qs_proto::tokens::TOKENS_MAX }>::split(line);
    let size = (tokens.len() >= 5 && line.starts_with(b"set"))
        .then(|| qs_proto::number::token_u32(tokens.get(4).strip_suffix(b"\r").unwrap_or(tokens.get(4))))
        .flatten();
    let Some(size) = size else {
        out.extend_from_slice(b"CLIENT_ERROR unauthenticated\r\n");
        return AsciiAuth::Answered { consumed: line_len, authenticated: false };
    };
    // memcached 1.6.42: a token longer than any user and password is refused at once, not
    // waited for (a client announcing 2 GB would otherwise hold the connection reading it).
    if size as usize > AUTH_TOKEN_BYTES_MAX {
        out.extend_from_slice(b"CLIENT_ERROR auth token too long\r\n");
        return AsciiAuth::Answered { consumed: line_len, authenticated: false };
    }
    let data_len = size as usize + 2;
    if pending.len() - line_len < data_len {
        return AsciiAuth::Wait;
    }
    let data = &pending[line_len..line_len + data_len];
    let consumed = line_len + data_len;
    let Some(payload) = data.strip_suffix(b"\r\n") else {
        out.extend_from_slice(b"CLIENT_ERROR bad command line termination\r\n");
        return AsciiAuth::Answered { consumed, authenticated: false };
    };
    let words = qs_proto::tokens::Tokens::<{ qs_proto::tokens::TOKENS_MAX }>::split(payload);
    if words.len() < 2 {
        out.extend_from_slice(b"CLIENT_ERROR bad authentication token format\r\n");
        return AsciiAuth::Answered { consumed, authenticated: false };
    }
    counters.auth_cmds += 1;
    if passwords.check(words.get(0), words.get(1)) {
        out.extend_from_slice(b"STORED\r\n");
        AsciiAuth::Answered { consumed, authenticated: true }
    } else {
        counters.auth_errors += 1;
        out.extend_from_slice(b"CLIENT_ERROR authentication failure\r\n");
        AsciiAuth::Answered { consumed, authenticated: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passwords() -> Passwords {
        Passwords::parse(b"foo:bar\nbaaaz:quux\r\nempty:\n").unwrap()
    }

    #[test]
    fn redis_auth_checks_the_users_of_either_mode_and_a_lone_users_password_alone() {
        let (many, one) = (passwords(), Passwords::parse(b"alice:pw\n").unwrap());
        let open = Modes { ascii: None, sasl: None };
        assert_eq!(resp_credentials(open, None, b"x"), RespAuth::Open);
        for modes in [Modes { ascii: Some(&many), sasl: None }, Modes { ascii: None, sasl: Some(&many) }] {
            assert_eq!(resp_credentials(modes, Some(b"foo"), b"bar"), RespAuth::Valid);
            assert_eq!(resp_credentials(modes, Some(b"foo"), b"quux"), RespAuth::Invalid);
            // Several users: a password alone is the user `default`'s, which is not one.
            assert_eq!(resp_credentials(modes, None, b"bar"), RespAuth::Invalid);
        }
        let lone = Modes { ascii: Some(&one), sasl: None };
        assert_eq!(resp_credentials(lone, None, b"pw"), RespAuth::Valid);
        assert_eq!(resp_credentials(lone, None, b"nope"), RespAuth::Invalid);
    }

    #[test]
    fn an_auth_file_reads_as_memcached_reads_it() {
        let p = passwords();
        assert!(p.check(b"foo", b"bar"));
        assert!(p.check(b"baaaz", b"quux"));
        assert!(p.check(b"empty", b""));
        assert!(!p.check(b"foo", b"bab"));
        assert!(!p.check(b"foo", b"barr"));
        assert!(!p.check(b"fo", b"bar"));
        assert!(!p.check(b"baaaz", b"bar"));
        assert!(Passwords::parse(b"no colon here\n").is_none());
    }

    #[test]
    fn ascii_auth_follows_memcached() {
        let p = passwords();
        let mut counters = WorkerCounters::default();
        let mut run = |input: &[u8]| {
            let mut out = Vec::new();
            let result = ascii_auth(input, &p, &mut counters, &mut out);
            (result, String::from_utf8(out).unwrap())
        };
        assert_eq!(
            run(b"get foo\r\n"),
            (
                AsciiAuth::Answered { consumed: 9, authenticated: false },
                "CLIENT_ERROR unauthenticated\r\n".into()
            )
        );
        assert_eq!(run(b"set foo 0 0 7\r\nfoo ba"), (AsciiAuth::Wait, String::new()));
        assert_eq!(
            run(b"set foo 0 0 7\r\nfoo bab\r\n"),
            (
                AsciiAuth::Answered { consumed: 24, authenticated: false },
                "CLIENT_ERROR authentication failure\r\n".into()
            )
        );
        assert_eq!(
            run(b"set foo 0 0 7\r\nfoo bar\r\nget x\r\n"),
            (AsciiAuth::Answered { consumed: 24, authenticated: true }, "STORED\r\n".into())
        );
        assert_eq!(run(b"set foo 0 0 3\r\nfoo\r\n").1, "CLIENT_ERROR bad authentication token format\r\n");
        assert_eq!(run(b"set foo 0 0 3\r\nfooxx").1, "CLIENT_ERROR bad command line termination\r\n");
        assert_eq!(run(&[b'x'; 3000]).0, AsciiAuth::Close);
        assert_eq!((counters.auth_cmds, counters.auth_errors), (2, 1));
    }

    #[test]
    fn sasl_refuses_everything_but_authentication_until_it_succeeds() {
        let p = passwords();
        let mut counters = WorkerCounters::default();
        assert_eq!(Phase::at_accept(Modes { ascii: None, sasl: None }), Phase::Open);
        assert!(Phase::Open.admitted() && Phase::Authenticated.admitted());
        let mut phase = Phase::at_accept(Modes { ascii: None, sasl: Some(&p) });
        assert_eq!(phase, Phase::Unauthenticated);
        assert_eq!(Phase::at_accept(Modes { ascii: Some(&p), sasl: None }), Phase::Unauthenticated);
        let frame = |op, key: &[u8], value: &[u8]| bin::request_frame(op, 7, 0, &[], key, value);
        let mut gate = |buf: &[u8], phase: &mut Phase| {
            let qs_proto::Parsed::Request { request: qs_proto::Request::Binary(request), .. } =
                bin::parse(buf, &qs_proto::Limits::default())
            else {
                panic!()
            };
            let mut out = Vec::new();
            let gate = sasl_gate(&request, phase, &p, &mut counters, &mut out);
            (gate, u16::from_be_bytes([out[6], out[7]]), out[24..].to_vec())
        };
        let get = frame(opcode::GET, b"k", b"");
        assert_eq!(
            gate(&get, &mut phase),
            (Gate::Answered { close: true }, status::AUTH_ERROR, b"Auth failure.".to_vec())
        );
        let list = frame(opcode::SASL_LIST_MECHS, b"", b"");
        assert_eq!(gate(&list, &mut phase).2, b"PLAIN");
        let wrong = frame(opcode::SASL_AUTH, b"PLAIN", b"\0foo\0bab");
        assert_eq!(gate(&wrong, &mut phase).1, status::AUTH_ERROR);
        assert_eq!(phase, Phase::Unauthenticated);
        let right = frame(opcode::SASL_AUTH, b"PLAIN", b"\0foo\0bar");
        assert_eq!(gate(&right, &mut phase), (Gate::Answered { close: false }, 0, b"Authenticated".to_vec()));
        assert_eq!(phase, Phase::Authenticated, "the phase moves once, on success");
        let mut out = Vec::new();
        let parsed = bin::parse(&get, &qs_proto::Limits::default());
        let qs_proto::Parsed::Request { request: qs_proto::Request::Binary(request), .. } = parsed else {
            panic!()
        };
        assert_eq!(sasl_gate(&request, &mut phase, &p, &mut counters, &mut out), Gate::Pass);
        assert_eq!((counters.auth_cmds, counters.auth_errors), (2, 1));
    }
}
