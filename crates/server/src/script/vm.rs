//! A worker thread's Lua state: redis-server's script environment (prelude.lua) over Lua 5.1,
//! the scripts this worker compiled, and one script's run.

use super::convert::{lua_to_reply, reply_to_lua};
use super::{sha1_hex, Scripts, Sha};
use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
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
#[derive(Clone)]
pub(crate) struct Compiled {
    function: Function,
    /// Its shebang's `flags=no-writes`.
    pub read_only: bool,
}

/// A worker's Lua state.
pub(crate) struct Vm {
    lua: Lua,
    /// prelude.lua's runner: (script) -> ok, value.
    run: Function,
    /// The RESP version the running script asked for (`redis.setresp`).
    resp: Rc<Cell<u8>>,
    /// The environment scripts run in.
    env: Table,
    compiled: HashMap<Sha, Compiled>,
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
        let resp = Rc::new(Cell::new(2u8));
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
        hidden
            .raw_set("call", redis_call(&lua, (resp.clone(), hidden.clone(), scripts.memory_max), true)?)?;
        hidden
            .raw_set("pcall", redis_call(&lua, (resp.clone(), hidden.clone(), scripts.memory_max), false)?)?;
        let asked = resp.clone();
        hidden.raw_set(
            "setresp",
            lua.create_function(move |_, version: u8| {
                asked.set(version);
                Ok(())
            })?,
        )?;
        let prelude = lua.load(include_str!("prelude.lua")).set_name("@prelude");
        let (run, env): (Function, Table) = prelude.call((hidden.clone(), lua.globals()))?;
        let watched = scripts.clone();
        lua.set_hook(HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS), move |_, _| {
            if watched.running[worker].killed() {
                return Err(mlua::Error::runtime(KILLED));
            }
            if watched.stopping() {
                return Err(mlua::Error::runtime("ERR the server is stopping"));
            }
            Ok(VmState::Continue)
        })?;
        let generation = scripts.generation();
        Ok(Vm { lua, run, resp, env, compiled: HashMap::new(), generation, scripts, worker })
    }

    /// The script `sha`, compiled from `source` if this state has not compiled it (from the
    /// server's cache when `source` is `None`: EVALSHA); `Err` is the reply: NOSCRIPT, or why
    /// it does not compile.
    pub fn compiled(&mut self, sha: &Sha, source: Option<&[u8]>) -> Result<Compiled, Vec<u8>> {
        let generation = self.scripts.generation();
        if generation != self.generation {
            self.compiled.clear();
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
        let compiled = self.compile(source)?;
        self.scripts.keep(*sha, source);
        self.compiled.insert(*sha, compiled.clone());
        Ok(compiled)
    }

    fn compile(&self, source: &[u8]) -> Result<Compiled, Vec<u8>> {
        let (body, read_only) = shebang(source).map_err(|text| error_line(&text))?;
        let chunk = self.lua.load(&body[..]).set_name("@user_script").set_mode(mlua::chunk::ChunkMode::Text);
        match chunk.set_environment(self.env.clone()).into_function() {
            Ok(function) => Ok(Compiled { function, read_only }),
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
        let running = &self.scripts.running[self.worker];
        running.start(crate::sys::clock::now().ms());
        let outcome = self.run_inner(&script.function, (keys, argv), caller);
        let killed = running.killed();
        running.end();
        // What a failed or greedy script left goes now, not when the collector gets to it: the
        // next script must find the room it had.
        if !matches!(outcome, Ok((true, _))) || self.lua.used_memory() > self.scripts.memory_max / 2 {
            let _ = self.lua.gc_collect();
        }
        self.scripts.memory[self.worker].store(self.lua.used_memory(), Relaxed);
        match outcome {
            Ok((true, value)) => lua_to_reply(&value, (self.resp.get() == 3, resp3), out),
            Ok((false, value)) => failure(&value, (sha, killed), out),
            Err(error) => out
                .extend_from_slice(&error_line(&format!("ERR Error running script {}: {error}", text(sha)))),
        }
    }

    fn run_inner<'k>(
        &self,
        function: &Function,
        (keys, argv): (impl Iterator<Item = &'k [u8]>, impl Iterator<Item = &'k [u8]>),
        caller: &mut dyn Caller,
    ) -> mlua::Result<(bool, Value)> {
        let lua = &self.lua;
        // The runner makes KEYS and ARGV of its arguments (tables made in Lua cost less than
        // mlua's calls that would make them here).
        let mut args = vec![Value::Function(function.clone()), Value::Integer(0)];
        for key in keys {
            args.push(Value::String(lua.create_string(key)?));
        }
        args[1] = Value::Integer(args.len() as i64 - 2);
        for arg in argv {
            args.push(Value::String(lua.create_string(arg)?));
        }
        self.resp.set(2);
        super::current::with_caller(caller, || {
            // The script's own allocations are held to its limit; the server's (made while
            // no limit is set) are not, and `redis.call` lifts it while it runs: mlua guards
            // each of its own allocations with a protected call while a limit is set.
            lua.set_memory_limit(self.scripts.memory_max)?;
            let ran = self.run.call::<(bool, Value)>(MultiValue::from_iter(args));
            lua.set_memory_limit(0)?;
            ran
        })
    }
}

/// `redis.call` (`raise`: its errors are raised) or `redis.pcall`, made once for a state
/// (`resp`: the version `redis.setresp` chose; `hidden`: prelude.lua's table; `max`: the
/// state's memory limit, lifted while the call runs).
fn redis_call(
    lua: &Lua,
    (resp, hidden, max): (Rc<Cell<u8>>, Table, usize),
    raise: bool,
) -> mlua::Result<Function> {
    let mut frame = Vec::new();
    let mut reply = Vec::new();
    lua.create_function_mut(move |lua, values: MultiValue| {
        lua.set_memory_limit(0)?;
        let answer = call_once(lua, (&mut frame, &mut reply), resp.get() == 3, values);
        let answer = answer.and_then(|(value, failed)| {
            if failed && raise {
                // Raised as the error table (prelude.lua's handler takes it from there).
                hidden.raw_set("raised", value)?;
                return Err(mlua::Error::runtime("redis.call failed"));
            }
            Ok(value)
        });
        lua.set_memory_limit(max)?;
        answer
    })
}

/// One call: `values` written as a RESP frame, run by the current caller, its reply made a
/// Lua value; and whether the reply is an error.
fn call_once(
    lua: &Lua,
    (frame, reply): (&mut Vec<u8>, &mut Vec<u8>),
    resp3: bool,
    values: MultiValue,
) -> mlua::Result<(Value, bool)> {
    if values.is_empty() {
        return failed(lua, "ERR Please specify at least one argument for this redis lib call");
    }
    frame.clear();
    frame.push(b'*');
    push_decimal(frame, values.len());
    let mut name = 0..0;
    for (at, value) in values.iter().enumerate() {
        let (text, number);
        let bytes: &[u8] = match value {
            Value::String(string) => {
                text = string.as_bytes();
                &text
            }
            Value::Integer(integer) => {
                number = integer.to_string();
                number.as_bytes()
            }
            Value::Number(float) => {
                number = super::convert::g17(*float);
                number.as_bytes()
            }
            _ => return failed(lua, "ERR Lua redis lib command arguments must be strings or integers"),
        };
        frame.push(b'$');
        push_decimal(frame, bytes.len());
        if at == 0 {
            name = frame.len()..frame.len() + bytes.len();
        }
        frame.extend_from_slice(bytes);
        frame.extend_from_slice(b"\r\n");
    }
    reply.clear();
    let ran = super::current::with_current(|caller| caller.call(frame, &frame[name.clone()], resp3, reply));
    if ran.is_none() {
        return failed(lua, "ERR redis.call/pcall can only be called inside a script invocation");
    }
    let value = reply_to_lua(lua, reply)?;
    Ok((value, reply.first() == Some(&b'-')))
}

/// `number` in decimal and a line end.
fn push_decimal(out: &mut Vec<u8>, number: usize) {
    out.extend_from_slice(itoa::Buffer::new().format(number).as_bytes());
    out.extend_from_slice(b"\r\n");
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

/// `redis.call`'s answer for a call refused before it ran: the error, raised.
fn failed(lua: &Lua, text: &str) -> mlua::Result<(Value, bool)> {
    Ok((super::convert::error_table(lua, text.as_bytes())?, true))
}

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

/// The reply of a script that failed with `value` (prelude.lua's handler's table, or the
/// text of an error no handler saw: out of memory).
fn failure(value: &Value, (sha, killed): (&Sha, bool), out: &mut Vec<u8>) {
    let Value::Table(error) = value else {
        let what = match value {
            Value::String(text) => text.to_string_lossy(),
            _ => "execution failure".to_string(),
        };
        let text = if what.contains("not enough memory") {
            "OOM the script ran out of memory (-o lua_memory_max)".to_string()
        } else {
            format!("ERR Error running script {}, {what}", text(sha))
        };
        return out.extend_from_slice(&error_line(&text));
    };
    let field = |name: &str| match error.raw_get::<Value>(name) {
        Ok(Value::String(text)) => Some(text.to_string_lossy()),
        Ok(Value::Integer(number)) => Some(number.to_string()),
        Ok(Value::Number(number)) => Some((number as i64).to_string()),
        _ => None,
    };
    let mut message = if killed { KILLED.to_string() } else { field("err").unwrap_or_default() };
    if let Some(stripped) = message.strip_prefix('-') {
        message = stripped.to_string();
    }
    if let (Some(source), Some(line)) = (field("source"), field("line")) {
        message = format!("{message} script: {}, on {source}:{line}.", text(sha));
    }
    out.extend_from_slice(&error_line(&message));
}

/// A script's `#!lua` line read: the body to compile (the line blanked, its line end kept so
/// line numbers hold) and whether its flags say `no-writes`; `Err` is why it is refused.
fn shebang(source: &[u8]) -> Result<(std::borrow::Cow<'_, [u8]>, bool), String> {
    if !source.starts_with(b"#!") {
        return Ok((source.into(), false));
    }
    let end = source.iter().position(|&b| b == b'\n').ok_or("ERR Invalid script shebang")?;
    let line = String::from_utf8_lossy(&source[..end]);
    let mut parts = line.split_ascii_whitespace();
    let engine = parts.next().unwrap_or_default();
    if engine != "#!lua" {
        return Err(format!("ERR Unexpected engine in script shebang: {engine}"));
    }
    let mut read_only = false;
    for part in parts {
        let Some(flags) = part.strip_prefix("flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {part}"));
        };
        for flag in flags.split(',').filter(|flag| !flag.is_empty()) {
            match flag {
                "no-writes" => read_only = true,
                "allow-oom" | "allow-stale" | "no-cluster" | "allow-cross-slot-keys" => {}
                other => return Err(format!("ERR Unexpected flag in script shebang: {other}")),
            }
        }
    }
    Ok((source[end..].to_vec().into(), read_only))
}
