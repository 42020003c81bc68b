//! The Redis protocol's connection and server commands (HELLO, AUTH, CLIENT, CONFIG, COMMAND,
//! FUNCTION), checked as redis-server 7.0 checks them.

use super::command::{integer, Call, Refusal};
use super::Frame;

/// HELLO [protover [AUTH user pass] [SETNAME name]], as networking.c's helloCommand reads it:
/// protocol 2 or 3.
pub(super) fn hello<'a>(frame: &Frame<'a>) -> Call<'a> {
    let argc = frame.argc();
    let mut proto = None;
    if argc >= 2 {
        match integer(frame.arg(1).unwrap_or_default()) {
            None => {
                return Call::Error(Refusal::Message("Protocol version is not an integer or out of range"))
            }
            Some(version @ (2 | 3)) => proto = Some(version as u8),
            Some(_) => return Call::Error(Refusal::NoProto),
        }
    }
    let (mut auth, mut name) = (None, None);
    let mut options = frame.args().skip(2);
    while let Some(option) = options.next() {
        let more = options.len();
        if option.eq_ignore_ascii_case(b"auth") && more >= 2 {
            let (user, password) = (options.next().unwrap_or_default(), options.next().unwrap_or_default());
            auth = Some((user, password));
        } else if option.eq_ignore_ascii_case(b"setname") && more >= 1 {
            name = options.next();
        } else {
            return Call::Error(Refusal::HelloOption(option));
        }
    }
    Call::Hello { proto, auth, name }
}

/// Whether `name` may name a connection: redis-server's rule, printable ASCII without spaces
/// (an empty name clears the connection's name).
pub fn client_name_valid(name: &[u8]) -> bool {
    name.iter().all(|byte| (b'!'..=b'~').contains(byte))
}

/// `AUTH [user] password`: checked by the server against -Y's or SASL's users (with none, as
/// redis-server's default user without a password).
pub(super) fn auth<'a>(argc: usize, args: [&'a [u8]; 3]) -> Call<'a> {
    match argc {
        2 => Call::Auth { user: None, password: args[0] },
        3 => Call::Auth { user: Some(args[0]), password: args[1] },
        _ => Call::Error(Refusal::Syntax),
    }
}

/// Which connections CLIENT LIST or CLIENT KILL picks, by redis-server's filters (each given
/// one must match).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Clients<'a> {
    /// ID: these connections (LIST's, in this order; KILL's, one).
    pub ids: Option<Vec<u64>>,
    /// ADDR: the peer's `ip:port`.
    pub addr: Option<&'a [u8]>,
    /// LADDR: the `ip:port` it connected to.
    pub laddr: Option<&'a [u8]>,
    /// USER: connections of this user.
    pub user: Option<&'a [u8]>,
    /// TYPE master, replica (slave) or pubsub: no connection here is of those.
    pub other_type: bool,
    /// KILL's SKIPME (yes unless said, or in the old form): not the asking connection.
    pub skip_me: bool,
}

/// A client type as redis-server's getClientTypeByName reads it: whether it is `normal`, or
/// an error for a name it does not know.
fn normal_type(name: &[u8]) -> Result<bool, Refusal<'_>> {
    let known = ["normal", "slave", "replica", "pubsub", "master"];
    match known.iter().position(|known| name.eq_ignore_ascii_case(known.as_bytes())) {
        Some(at) => Ok(at == 0),
        None => Err(Refusal::ClientType(name)),
    }
}

/// CLIENT LIST [TYPE type | ID id...] (networking.c's clientCommand).
fn client_list<'a>(frame: &Frame<'a>, argc: usize) -> Call<'a> {
    let option = frame.arg(2).unwrap_or_default();
    let mut clients = Clients::default();
    if argc == 4 && option.eq_ignore_ascii_case(b"type") {
        match normal_type(frame.arg(3).unwrap_or_default()) {
            Ok(normal) => clients.other_type = !normal,
            Err(refusal) => return Call::Error(refusal),
        }
    } else if argc > 3 && option.eq_ignore_ascii_case(b"id") {
        let ids: Option<Vec<u64>> = frame.args().skip(3).map(|id| integer(id).map(|id| id as u64)).collect();
        match ids {
            Some(ids) => clients.ids = Some(ids),
            None => return Call::Error(Refusal::Message("Invalid client ID")),
        }
    } else if argc != 2 {
        return Call::Error(Refusal::Syntax);
    }
    Call::ClientList(clients)
}

/// CLIENT KILL ip:port, or CLIENT KILL with filter-value pairs.
fn client_kill<'a>(frame: &Frame<'a>, argc: usize) -> Call<'a> {
    if argc == 3 {
        let clients = Clients { addr: frame.arg(2), ..Clients::default() };
        return Call::ClientKill { clients, old_form: true };
    }
    let mut clients = Clients { skip_me: true, ..Clients::default() };
    let mut args = frame.args().skip(2);
    while let Some(option) = args.next() {
        let Some(value) = args.next() else { return Call::Error(Refusal::Syntax) };
        let is = |name: &str| option.eq_ignore_ascii_case(name.as_bytes());
        if is("id") {
            match integer(value) {
                Some(id) if id > 0 => clients.ids = Some(vec![id as u64]),
                _ => return Call::Error(Refusal::Message("client-id should be greater than 0")),
            }
        } else if is("type") {
            match normal_type(value) {
                Ok(normal) => clients.other_type = !normal,
                Err(refusal) => return Call::Error(refusal),
            }
        } else if is("addr") {
            clients.addr = Some(value);
        } else if is("laddr") {
            clients.laddr = Some(value);
        } else if is("user") {
            clients.user = Some(value);
        } else if is("skipme") && value.eq_ignore_ascii_case(b"yes") {
            clients.skip_me = true;
        } else if is("skipme") && value.eq_ignore_ascii_case(b"no") {
            clients.skip_me = false;
        } else {
            return Call::Error(Refusal::Syntax);
        }
    }
    Call::ClientKill { clients, old_form: false }
}

/// CLIENT's subcommands served: ID, INFO, LIST, KILL, SETNAME and GETNAME, and NO-EVICT
/// accepted (as redis-server 7.0: SETINFO and NO-TOUCH came in 7.2 and are unknown
/// subcommands, which clients ignore).
pub(super) fn client<'a>(frame: &Frame<'a>, sub: &[u8], argc: usize) -> Call<'a> {
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    let switch = frame.arg(2).unwrap_or_default();
    match argc {
        2 if is("id") => Call::ClientId,
        2 if is("getname") => Call::ClientGetName,
        2 if is("info") => Call::ClientInfo,
        _ if is("list") => client_list(frame, argc),
        3.. if is("kill") => client_kill(frame, argc),
        3 if is("setname") => Call::ClientSetName(switch),
        3 if is("no-evict")
            && (switch.eq_ignore_ascii_case(b"on") || switch.eq_ignore_ascii_case(b"off")) =>
        {
            Call::Accepted
        }
        3 if is("no-evict") => Call::Error(Refusal::Syntax),
        _ if is("id") || is("no-evict") || is("getname") || is("setname") || is("info") || is("kill") => {
            Call::Error(Refusal::SubcommandArity(*frame))
        }
        _ => Call::Error(Refusal::UnknownSubcommand(*frame)),
    }
}

/// CONFIG GET pattern...
pub(super) fn config<'a>(frame: &Frame<'a>, sub: &[u8], argc: usize) -> Call<'a> {
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    match argc {
        2 if is("get") || is("set") => Call::Error(Refusal::SubcommandArity(*frame)),
        _ if is("get") => Call::ConfigGet(*frame),
        // Names and values in pairs.
        _ if is("set") && argc % 2 == 1 => Call::Error(Refusal::SubcommandArity(*frame)),
        _ if is("set") => Call::ConfigSet(*frame),
        // redis-server 7.0's other subcommands, refused by name; anything else is not one.
        2 if is("resetstat") => Call::ResetStat,
        _ if is("resetstat") => Call::Error(Refusal::SubcommandArity(*frame)),
        _ if is("rewrite") || is("help") => {
            Call::Error(Refusal::Unsupported("of CONFIG only GET, SET and RESETSTAT are served"))
        }
        _ => Call::Error(Refusal::UnknownSubcommand(*frame)),
    }
}

/// A memory size as redis-server's `memtoll` reads it: digits, then optionally b, k, kb, m, mb,
/// g or gb (without case; k is 1,000 and kb 1,024).
pub fn memory_bytes(text: &[u8]) -> Option<u64> {
    let digits = text.iter().take_while(|byte| byte.is_ascii_digit()).count();
    let number: u64 = std::str::from_utf8(&text[..digits]).ok()?.parse().ok()?;
    let unit = match text[digits..].to_ascii_lowercase().as_slice() {
        b"" | b"b" => 1,
        b"k" => 1_000,
        b"kb" => 1 << 10,
        b"m" => 1_000_000,
        b"mb" => 1 << 20,
        b"g" => 1_000_000_000,
        b"gb" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(unit)
}

/// COMMAND and COMMAND INFO (the served commands' entries, [`super::command_table`]),
/// COMMAND COUNT, and COMMAND DOCS (no documents yet: clients then use their own tables).
pub(super) fn command<'a>(frame: &Frame<'a>, sub: &[u8], argc: usize) -> Call<'a> {
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    match argc {
        1 => Call::CommandInfo(None),
        2 if is("count") => Call::CommandCount,
        _ if is("count") => Call::Error(Refusal::SubcommandArity(*frame)),
        2 if is("info") => Call::CommandInfo(None),
        _ if is("info") => Call::CommandInfo(Some(*frame)),
        _ if is("docs") => Call::CommandDocs,
        _ if is("list") || is("getkeys") || is("getkeysandflags") || is("help") => {
            Call::Error(Refusal::Unsupported("of COMMAND only INFO, COUNT and DOCS are served"))
        }
        _ => Call::Error(Refusal::UnknownSubcommand(*frame)),
    }
}

/// COMMAND INFO's reply: the entries of the commands the frame names after `COMMAND INFO`
/// (null for one not served), or of every command served.
pub fn command_info(names: Option<&Frame<'_>>, resp3: bool, out: &mut Vec<u8>) {
    let entry = |row: &(&str, &'static [u8], &'static [u8])| -> &'static [u8] {
        if resp3 {
            row.2
        } else {
            row.1
        }
    };
    let Some(frame) = names else {
        out.push(b'*');
        crate::response::push_u64(out, super::command_table::INFO.len() as u64);
        out.extend_from_slice(b"\r\n");
        for row in super::command_table::INFO {
            out.extend_from_slice(entry(row));
        }
        return;
    };
    out.push(b'*');
    crate::response::push_u64(out, frame.argc() as u64 - 2);
    out.extend_from_slice(b"\r\n");
    for name in frame.args().skip(2) {
        match super::command_table::INFO.iter().find(|row| name.eq_ignore_ascii_case(row.0.as_bytes())) {
            Some(row) => out.extend_from_slice(entry(row)),
            None => out.extend_from_slice(super::reply::null(resp3)),
        }
    }
}

/// FUNCTION FLUSH [ASYNC|SYNC]: there are no functions (scripting is not served), so there is
/// nothing to flush; other subcommands are refused by name.
pub(super) fn function<'a>(frame: &Frame<'a>, sub: &[u8], argc: usize) -> Call<'a> {
    if !sub.eq_ignore_ascii_case(b"flush") {
        return Call::Error(Refusal::Unsupported("functions are not served (no scripting)"));
    }
    let mode = frame.arg(2).unwrap_or_default();
    match argc {
        2 => Call::Accepted,
        3 if mode.eq_ignore_ascii_case(b"sync") || mode.eq_ignore_ascii_case(b"async") => Call::Accepted,
        3 => Call::Error(Refusal::Message("FUNCTION FLUSH only supports SYNC|ASYNC option")),
        _ => Call::Error(Refusal::SubcommandArity(*frame)),
    }
}

/// redis-server 7.0's answer to DEBUG with its default `enable-debug-command no`.
const DEBUG_NOT_ALLOWED: &str = "DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.";

/// DEBUG: `DEBUG SLEEP 0`, which test suites send to wait for a server's pending work,
/// answers `+OK` as a server with DEBUG enabled does; anything else is refused as
/// redis-server refuses DEBUG by default.
pub(super) fn debug<'a>(frame: &Frame<'a>) -> Call<'a> {
    let sub = frame.arg(1).unwrap_or_default();
    let zero =
        |arg: &[u8]| std::str::from_utf8(arg).ok().and_then(|text| text.parse::<f64>().ok()) == Some(0.0);
    if frame.argc() == 3 && sub.eq_ignore_ascii_case(b"sleep") && zero(frame.arg(2).unwrap_or_default()) {
        return Call::Accepted;
    }
    Call::Error(Refusal::Message(DEBUG_NOT_ALLOWED))
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT], checked as server.c's shutdownCommand
/// checks it (there is never a shutdown in progress to abort).
pub(super) fn shutdown<'a>(frame: &Frame<'a>) -> Call<'a> {
    let (mut save, mut nosave, mut other, mut abort) = (false, false, false, false);
    for option in frame.args().skip(1) {
        let is = |name: &str| option.eq_ignore_ascii_case(name.as_bytes());
        if is("nosave") {
            nosave = true;
        } else if is("save") {
            save = true;
        } else if is("now") || is("force") {
            other = true;
        } else if is("abort") {
            abort = true;
        } else {
            return Call::Error(Refusal::Syntax);
        }
    }
    if abort && (save || nosave || other) || save && nosave {
        return Call::Error(Refusal::Syntax);
    }
    if abort {
        return Call::Error(Refusal::Message("No shutdown in progress."));
    }
    Call::Shutdown
}
