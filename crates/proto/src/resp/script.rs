//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, checked as redis-server 7.0 checks them
//! (eval.c): the number of keys first, then the script's form; what the scripts do runs in
//! the server (its script component).

use super::command::{integer, Call, Refusal};
use super::Frame;

/// EVAL script numkeys key... arg..., or one of its forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eval<'a> {
    /// The frame: the script (or its SHA1) is its argument 1, the keys from argument 3 on.
    pub frame: Frame<'a>,
    /// EVALSHA: argument 1 is the SHA1 of a script loaded before.
    pub sha: bool,
    /// EVAL_RO or EVALSHA_RO: the script may not write.
    pub read_only: bool,
    /// How many of the arguments after numkeys are keys.
    pub keys: usize,
}

impl<'a> Eval<'a> {
    /// The script's source (EVAL) or its SHA1 as sent (EVALSHA).
    pub fn body(&self) -> &'a [u8] {
        self.frame.arg(1).unwrap_or_default()
    }

    /// The keys it declares (KEYS).
    pub fn keys(&self) -> impl Iterator<Item = &'a [u8]> + Clone {
        self.frame.args().skip(3).take(self.keys)
    }

    /// The arguments after its keys (ARGV).
    pub fn argv(&self) -> impl Iterator<Item = &'a [u8]> + Clone {
        self.frame.args().skip(3 + self.keys)
    }
}

/// SCRIPT's subcommands served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Script<'a> {
    /// SCRIPT LOAD script: compiled and kept, its SHA1 answered.
    Load(&'a [u8]),
    /// SCRIPT EXISTS sha1...: the frame, the SHA1s from argument 2 on.
    Exists(Frame<'a>),
    /// SCRIPT FLUSH [SYNC|ASYNC]: every script goes.
    Flush,
    /// SCRIPT KILL: the script running too long is stopped, if it has not written.
    Kill,
    /// SCRIPT HELP.
    Help,
}

/// SCRIPT HELP's lines, as redis-server 7.0 writes them.
pub const HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DEBUG (YES|SYNC|NO)",
    "    Set the debug mode for subsequent scripts executed.",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];

/// EVAL or one of its forms, told from the name `name` of `frame` without the command
/// table's scan; `None` for any other command.
#[inline]
pub(super) fn early<'a>(frame: &Frame<'a>, name: &[u8]) -> Option<Call<'a>> {
    if name.len() < 4 || name[0] | 0x20 != b'e' {
        return None;
    }
    let forms = ["eval", "evalsha", "eval_ro", "evalsha_ro"];
    let spelled = forms.into_iter().find(|spelled| name.eq_ignore_ascii_case(spelled.as_bytes()))?;
    Some(if frame.argc() < 3 { Call::Error(Refusal::Arity(spelled)) } else { eval(frame, spelled) })
}

/// EVAL and its forms (`spelled`: the command's name; the arity is checked).
pub(super) fn eval<'a>(frame: &Frame<'a>, spelled: &str) -> Call<'a> {
    let Some(keys) = integer(frame.arg(2).unwrap_or_default()) else {
        return Call::Error(Refusal::NotInteger);
    };
    if keys > (frame.argc() - 3) as i64 {
        return Call::Error(Refusal::Message("Number of keys can't be greater than number of args"));
    }
    if keys < 0 {
        return Call::Error(Refusal::Message("Number of keys can't be negative"));
    }
    let sha = spelled.starts_with("evalsha");
    let eval = Eval { frame: *frame, sha, read_only: spelled.ends_with("_ro"), keys: keys as usize };
    Call::Eval(eval)
}

/// SCRIPT's subcommands (the arity of SCRIPT itself is checked), each with its own arity as
/// redis-server 7.0's table has them (`script|load` 3, `script|exists` -3, ...).
pub(super) fn script<'a>(frame: &Frame<'a>, sub: &[u8], argc: usize) -> Call<'a> {
    let is = |name: &[u8]| sub.eq_ignore_ascii_case(name);
    let mode = frame.arg(2).unwrap_or_default();
    let (call, fits) = if is(b"help") {
        (Call::Script(Script::Help), argc == 2)
    } else if is(b"flush") {
        let known = argc == 2 || mode.eq_ignore_ascii_case(b"sync") || mode.eq_ignore_ascii_case(b"async");
        let call = if known && argc <= 3 {
            Call::Script(Script::Flush)
        } else {
            Call::Error(Refusal::Message("SCRIPT FLUSH only support SYNC|ASYNC option"))
        };
        (call, true)
    } else if is(b"exists") {
        (Call::Script(Script::Exists(*frame)), argc >= 3)
    } else if is(b"load") {
        (Call::Script(Script::Load(mode)), argc == 3)
    } else if is(b"kill") {
        (Call::Script(Script::Kill), argc == 2)
    } else if is(b"debug") {
        let known = [&b"yes"[..], b"sync", b"no"].iter().any(|word| mode.eq_ignore_ascii_case(word));
        let text = if known { "SCRIPT DEBUG is not served" } else { "Use SCRIPT DEBUG YES/SYNC/NO" };
        (Call::Error(Refusal::Message(text)), argc == 3)
    } else {
        return Call::Error(Refusal::UnknownSubcommand(*frame));
    };
    if fits {
        call
    } else {
        Call::Error(Refusal::SubcommandArity(*frame))
    }
}

/// What redis-server's command table says of a command a script calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Called {
    /// Its arity: exactly N arguments (the name counted), or at least -N.
    pub arity: i32,
    /// It writes (`write`): refused in a read-only script.
    pub write: bool,
    /// Scripts may not call it (`noscript`: EVAL, MULTI, AUTH, ...).
    pub noscript: bool,
    /// It may use memory (`denyoom`): refused while the server is out of memory.
    pub denyoom: bool,
}

impl Called {
    /// Whether `argc` arguments (the name counted) fit its arity.
    pub fn fits(&self, argc: usize) -> bool {
        if self.arity > 0 {
            argc == self.arity as usize
        } else {
            argc >= self.arity.unsigned_abs() as usize
        }
    }
}

/// The command `name` as a script may call it; `None` when it is not served.
pub fn called(name: &[u8]) -> Option<Called> {
    // The blocking pops are not served, and a script may not call them anyway. CLUSTER is not
    // served yet (Redis Cluster, a later issue), and its subcommands that change the cluster
    // (RESET, FAILOVER, ...) a script may not call: refused as redis-server refuses those.
    if super::collection::BLOCKING.iter().any(|blocking| name.eq_ignore_ascii_case(blocking.as_bytes())) {
        return Some(Called { arity: -2, write: true, noscript: true, denyoom: true });
    }
    if name.eq_ignore_ascii_case(b"cluster") {
        return Some(Called { arity: -2, write: false, noscript: true, denyoom: false });
    }
    static TABLE: std::sync::OnceLock<Vec<(&'static str, Called)>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        super::command_table::INFO
            .iter()
            .filter_map(|(spelled, entry, _)| Some((*spelled, read_entry(entry)?)))
            .collect()
    });
    table.iter().find(|(spelled, _)| name.eq_ignore_ascii_case(spelled.as_bytes())).map(|(_, called)| *called)
}

/// Whether the command `name` may use memory (redis-server's `denyoom` flag): refused while
/// the server is out of memory. False for a command not served.
pub fn denies_oom(name: &[u8]) -> bool {
    called(name).is_some_and(|called| called.denyoom)
}

/// Whether a RESP request may use memory (redis-server's `denyoom`): a store or a count on
/// one key, or a command so flagged.
pub fn uses_memory(request: &crate::Request<'_>) -> bool {
    use crate::command::Op;
    match request {
        crate::Request::RespKey(command) => {
            matches!(command.op, Op::Store(_) | Op::Count { .. } | Op::Arith(_))
        }
        crate::Request::Resp(frame) => frame.arg(0).is_some_and(denies_oom),
        _ => false,
    }
}

/// The arity and flags of a COMMAND INFO entry.
fn read_entry(entry: &[u8]) -> Option<Called> {
    // `*10`, `$len`, the name, `:arity`, `*flags`, then a `+flag` line each.
    let mut lines = entry.split(|&byte| byte == b'\n').map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    let arity = lines.nth(3)?.strip_prefix(b":")?;
    let arity = integer(arity).or_else(|| integer(arity.strip_prefix(b"-")?).map(|n| -n))? as i32;
    let count = integer(lines.next()?.strip_prefix(b"*")?)? as usize;
    let mut called = Called { arity, write: false, noscript: false, denyoom: false };
    for flag in lines.take(count) {
        called.write |= flag == b"+write";
        called.noscript |= flag == b"+noscript";
        called.denyoom |= flag == b"+denyoom";
    }
    Some(called)
}
