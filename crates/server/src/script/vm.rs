//! A worker thread's Lua state: redis-server's script environment (prelude.lua) over Lua 5.1,
//! the scripts this worker compiled, and one script's run.

use super::run::{self, Ended, Refs};
use super::{call, sha1_hex, Scripts, Sha};
use mlua::{Function, HookTriggers, Lua, LuaOptions, StdLib, Table, VmState};
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::os::raw::c_int;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Lua instructions between two looks at SCRIPT KILL (redis-server's count hook's).
const HOOK_INSTRUCTIONS: u32 = 100_000;
/// The error a script stopped by SCRIPT KILL ends with.
const KILLED: &str = "ERR Script killed by user with SCRIPT KILL...";

thread_local! {
    /// This worker thread's state, made at its first script.
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
    /// Its hook runs at every instruction (a script was killed): set back at the next run.
    static HOOK_TIGHT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` on this thread's Lua state (made now if it has none), for worker `worker`.
pub(crate) fn with<R>(
    scripts: &Arc<Scripts>,
    worker: usize,
    f: impl FnOnce(&mut Vm) -> R,
) -> Result<R, String> {
    VM.with(|cell| {
        let mut held = cell.borrow_mut();
        if held.is_none() {
            *held = Some(Vm::new(scripts.clone(), worker).map_err(|error| error.to_string())?);
        }
        Ok(f(held.as_mut().expect("made above")))
    })
}

/// A script compiled here.
pub(crate) struct Compiled {
    /// Its function's reference in the state's registry.
    reference: c_int,
    /// Its shebang's `flags=no-writes`.
    pub read_only: bool,
    /// What redis-server calls its flags' out-of-memory rule: `None` for a script without a
    /// shebang (its calls that may use memory are refused while out of memory); `Some(true)`
    /// for one whose flags say `allow-oom` or `no-writes` (it runs, and may write); `Some(false)`
    /// for any other (refused as a whole while out of memory).
    pub allow_oom: Option<bool>,
}

/// Hashes a script's name by its first eight hex digits: it is a SHA1 already (a map from
/// names to scripts needs no keyed hash; SipHash cost 190 instructions a lookup).
#[derive(Default)]
pub(crate) struct ShaHasher(u64);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut word = [0u8; 8];
        let len = bytes.len().min(8);
        word[..len].copy_from_slice(&bytes[..len]);
        self.0 = self.0.rotate_left(29) ^ u64::from_le_bytes(word);
    }
}

/// A worker's Lua state.
pub(crate) struct Vm {
    lua: Lua,
    /// prelude.lua's error handler and the environment scripts run in, in the registry.
    handler: c_int,
    env_ref: c_int,
    /// The environment scripts run in.
    env: Table,
    compiled: HashMap<Sha, Rc<Compiled>, BuildHasherDefault<ShaHasher>>,
    /// The cache's generation when `compiled` was last emptied.
    generation: u64,
    scripts: Arc<Scripts>,
    worker: usize,
}

/// What a run needs of its caller: the command each `redis.call` asks for, run, and its
/// reply's bytes.
pub(crate) trait Caller {
    /// Runs `frame` (a RESP array of the command's name, `name`, and its arguments) as the
    /// script's `redis.call` asks, speaking RESP3 if `resp3`: its reply's bytes, or an error
    /// where the script may not call it, written to `out`.
    fn call(&mut self, frame: &[u8], name: &[u8], resp3: bool, out: &mut Vec<u8>);
}

impl Vm {
    fn new(scripts: Arc<Scripts>, worker: usize) -> mlua::Result<Vm> {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH;
        let lua = Lua::new_with(libs, LuaOptions::default())?;
        super::libs::register(&lua)?;
        let hidden = lua.create_table()?;
        hidden.raw_set(
            "sha1hex",
            lua.create_function(|lua, text: mlua::LuaString| lua.create_string(sha1_hex(&text.as_bytes())))?,
        )?;
        hidden.raw_set(
            "log",
            lua.create_function(|_, (level, text): (i64, String)| {
                if level >= 2 {
                    eprintln!("quicksilver: script: {text}");
                }
                Ok(())
            })?,
        )?;
        hidden.raw_set(
            "known",
            lua.create_function(|_, name: mlua::LuaString| {
                Ok(qs_proto::resp::script::called(&name.as_bytes()).is_some())
            })?,
        )?;
        hidden.raw_set("where", lua.create_function(|lua, ()| Ok(script_line(lua)))?)?;
        call::register(&lua, &hidden)?;
        hidden.raw_set(
            "setresp",
            lua.create_function(|_, version: u8| {
                call::set_resp(version);
                Ok(())
            })?,
        )?;
        let prelude = lua.load(include_str!("prelude.lua")).set_name("@prelude");
        let (handler, env): (Function, Table) = prelude.call((hidden.clone(), lua.globals()))?;
        let (handler, env_ref) = (run::refer(&lua, handler)?, run::refer(&lua, &env)?);
        let watched = scripts.clone();
        lua.set_hook(HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS), move |lua, _| {
            let (killed, stopping) = (watched.running[worker].killed(), watched.stopping());
            if killed || stopping {
                // At every instruction from now on: a pcall in the script catches this error,
                // and the next instruction outside it raises it again.
                if !HOOK_TIGHT.replace(true) {
                    run::hook_every(lua, 1);
                }
                let error = if killed { KILLED } else { "ERR the server is stopping" };
                return Err(mlua::Error::runtime(error));
            }
            if watched.busy(worker, crate::sys::clock::now().ms()) {
                // Past lua-time-limit: every worker's RESP clients are answered -BUSY, this
                // worker's from here (a SCRIPT KILL among them is looked at next).
                watched.overdue(worker);
                super::door::serve();
            }
            Ok(VmState::Continue)
        })?;
        let generation = scripts.generation();
        Ok(Vm { lua, handler, env_ref, env, compiled: HashMap::default(), generation, scripts, worker })
    }

    /// The script `sha`, compiled from `source` if this state has not compiled it (from the
    /// server's cache when `source` is `None`: EVALSHA); `Err` is the reply: NOSCRIPT, or why
    /// it does not compile.
    pub fn compiled(&mut self, sha: &Sha, source: Option<&[u8]>) -> Result<Rc<Compiled>, Vec<u8>> {
        let generation = self.scripts.generation();
        if generation != self.generation {
            // No run holds one of them: this is not called while a script runs (scripts may
            // not call EVAL or SCRIPT).
            for (_, compiled) in self.compiled.drain() {
                run::forget(&self.lua, compiled.reference);
            }
            self.generation = generation;
        }
        if let Some(compiled) = self.compiled.get(sha) {
            return Ok(compiled.clone());
        }
        let cached;
        let source = match source {
            Some(source) => source,
            None => {
                cached = self.scripts.source(sha).ok_or_else(|| NOSCRIPT.to_vec())?;
                &cached[..]
            }
        };
        let compiled = Rc::new(self.compile(source)?);
        self.scripts.keep(*sha, source);
        self.compiled.insert(*sha, compiled.clone());
        Ok(compiled)
    }

    fn compile(&self, source: &[u8]) -> Result<Compiled, Vec<u8>> {
        let (body, (read_only, allow_oom)) = shebang(source).map_err(|text| error_line(&text))?;
        let chunk = self.lua.load(&body[..]).set_name("@user_script").set_mode(mlua::chunk::ChunkMode::Text);
        match chunk.set_environment(self.env.clone()).into_function() {
            Ok(function) => {
                let reference = run::refer(&self.lua, function)
                    .map_err(|error| error_line(&format!("ERR Error compiling script: {error}")))?;
                Ok(Compiled { reference, read_only, allow_oom })
            }
            Err(error) => {
                let text = match error {
                    mlua::Error::SyntaxError { message, .. } => message,
                    other => other.to_string(),
                };
                Err(error_line(&format!("ERR Error compiling script (new function): {text}")))
            }
        }
    }

    /// Runs `script` (named `sha`) over `keys` and `argv`, its reply written to `out` for a
    /// connection that speaks RESP3 if `resp3`; each `redis.call` goes to `caller`.
    pub fn run<'k>(
        &mut self,
        (script, sha): (&Compiled, &Sha),
        (keys, argv): (impl Iterator<Item = &'k [u8]>, impl Iterator<Item = &'k [u8]>),
        resp3: bool,
        caller: &mut dyn Caller,
        out: &mut Vec<u8>,
    ) {
        if HOOK_TIGHT.take() {
            run::hook_every(&self.lua, HOOK_INSTRUCTIONS as c_int);
        }
        let running = &self.scripts.running[self.worker];
        running.start(crate::sys::clock::now().ms());
        call::set_resp(2);
        let refs = Refs { handler: self.handler, env: self.env_ref, script: script.reference };
        let ended = super::current::with_caller(caller, || {
            run::run(&self.lua, refs, (keys, argv), self.scripts.memory_max, (call::resp, resp3), out)
        });
        let killed = running.killed();
        self.scripts.ended(self.worker);
        let failed = matches!(ended, Ended::Failed(_));
        if let Ended::Failed(error) = ended {
            failure(error, (sha, killed), out);
        }
        // What a failed or greedy script left goes now, not when the collector gets to it: the
        // next script must find the room it had.
        if failed || self.lua.used_memory() > self.scripts.memory_max / 2 {
            let _ = self.lua.gc_collect();
        }
        self.scripts.memory[self.worker].store(self.lua.used_memory(), Relaxed);
    }
}

/// The line the innermost function of the running script is at (`None`: no script's
/// function is on the stack), as redis-server's error handler finds it.
fn script_line(lua: &Lua) -> Option<usize> {
    (1..256).find_map(|level| {
        lua.inspect_stack(level, |debug| {
            (debug.source().source.as_deref() == Some("@user_script")).then(|| debug.current_line()).flatten()
        })?
    })
}

/// EVALSHA of a script the cache does not hold.
pub(crate) const NOSCRIPT: &[u8] = b"-NOSCRIPT No matching script. Please use EVAL.\r\n";

fn text(sha: &Sha) -> &str {
    std::str::from_utf8(sha).unwrap_or_default()
}

/// `-` + `text` + `\r\n`, its line ends made spaces.
fn error_line(text: &str) -> Vec<u8> {
    let mut line = Vec::with_capacity(text.len() + 3);
    line.push(b'-');
    line.extend(text.bytes().map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
    line.extend_from_slice(b"\r\n");
    line
}

/// The reply of a script that failed: prelude.lua's handler's table's fields (`err`,
/// `source`, `line`), or the text of an error no handler saw (out of memory).
fn failure(
    error: Result<[Option<String>; 3], Option<String>>,
    (sha, killed): (&Sha, bool),
    out: &mut Vec<u8>,
) {
    let [err, source, line] = match error {
        Ok(fields) => fields,
        Err(what) => {
            let what = what.unwrap_or_else(|| "execution failure".to_string());
            let text = if what.contains("not enough memory") {
                "OOM the script ran out of memory (-o lua_memory_max)".to_string()
            } else {
                format!("ERR Error running script {}, {what}", text(sha))
            };
            return out.extend_from_slice(&error_line(&text));
        }
    };
    let mut message = if killed { KILLED.to_string() } else { err.unwrap_or_default() };
    if let Some(stripped) = message.strip_prefix('-') {
        message = stripped.to_string();
    }
    if let (Some(source), Some(line)) = (source, line) {
        message = format!("{message} script: {}, on {source}:{line}.", text(sha));
    }
    out.extend_from_slice(&error_line(&message));
}

/// A script's `#!lua` line read: the body to compile (the line blanked, its line end kept so
/// line numbers hold), whether its flags say `no-writes`, and its out-of-memory rule
/// ([`Compiled::allow_oom`]); `Err` is why it is refused.
type Flags = (bool, Option<bool>);
fn shebang(source: &[u8]) -> Result<(std::borrow::Cow<'_, [u8]>, Flags), String> {
    if !source.starts_with(b"#!") {
        return Ok((source.into(), (false, None)));
    }
    let end = source.iter().position(|&b| b == b'\n').ok_or("ERR Invalid script shebang")?;
    let line = String::from_utf8_lossy(&source[..end]);
    let mut parts = line.split_ascii_whitespace();
    let engine = parts.next().unwrap_or_default();
    if engine != "#!lua" {
        return Err(format!("ERR Unexpected engine in script shebang: {engine}"));
    }
    let (mut read_only, mut allow_oom) = (false, false);
    for part in parts {
        let Some(flags) = part.strip_prefix("flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {part}"));
        };
        for flag in flags.split(',').filter(|flag| !flag.is_empty()) {
            match flag {
                "no-writes" => read_only = true,
                "allow-oom" => allow_oom = true,
                "allow-stale" | "no-cluster" | "allow-cross-slot-keys" => {}
                other => return Err(format!("ERR Unexpected flag in script shebang: {other}")),
            }
        }
    }
    Ok((source[end..].to_vec().into(), (read_only, Some(allow_oom || read_only))))
}
