//! `redis.call` and `redis.pcall` as Lua C functions, as redis-server's own are: the
//! arguments are read off the Lua stack into a RESP frame, the command runs on the current
//! caller (current.rs), and its reply is pushed back as Lua values by redis-server's rules
//! (convert.rs has them in full). mlua's callbacks would make a `Value` of each argument and
//! of the reply, each a reference slot of its own: about 2,500 instructions a call, more than
//! the command costs (docs/BENCHMARKS.md, "Scripts").
//!
//! Lua raises errors with `longjmp`. A C function may be left that way only while it holds
//! nothing with a destructor, so each call runs in two halves: [`prepare`] (Rust: the frame,
//! the command, its reply; it touches Lua only to read the stack, which never raises) ends
//! and drops what it held before [`push_reply`] touches Lua in ways that may raise (an
//! allocation past the script's memory limit), and before `lua_error` raises a failed
//! `redis.call`'s error table.

use super::convert::g17;
use mlua::ffi;
use std::cell::{Cell, UnsafeCell};
use std::mem::ManuallyDrop;
use std::os::raw::c_int;

/// Replies nested deeper than this become `false` (no command's reply nests past a few).
const DEPTH_MAX: usize = 64;

thread_local! {
    /// The RESP version this thread's running script asked for (`redis.setresp`).
    static RESP: Cell<u8> = const { Cell::new(2) };
    /// This thread's frame and reply buffers, kept between calls.
    static BUFFERS: UnsafeCell<Buffers> = const { UnsafeCell::new(Buffers { frame: Vec::new(), reply: Vec::new() }) };
}

struct Buffers {
    frame: Vec<u8>,
    reply: Vec<u8>,
}

/// The RESP version the running script's calls speak (2 when a script starts).
pub(super) fn set_resp(version: u8) {
    RESP.set(version);
}

/// The RESP version the running script asked for last.
pub(super) fn resp() -> u8 {
    RESP.get()
}

/// Sets `call` and `pcall` in `table` (prelude.lua's `H`): `redis.call` and `redis.pcall`.
pub(super) fn register(lua: &mlua::Lua, table: &mlua::Table) -> mlua::Result<()> {
    // SAFETY: both are Lua C functions that keep Lua's rules (this module's comment).
    table.raw_set("call", unsafe { lua.create_c_function(raising)? })?;
    // SAFETY: as above.
    table.raw_set("pcall", unsafe { lua.create_c_function(protected)? })
}

/// `redis.call`: a command that fails raises its error.
unsafe extern "C-unwind" fn raising(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua calls this with its own state.
    unsafe { call(state, true) }
}

/// `redis.pcall`: a command that fails returns its error table.
unsafe extern "C-unwind" fn protected(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua calls this with its own state.
    unsafe { call(state, false) }
}

/// # Safety
/// `state` is the running Lua state, which called this as a C function.
unsafe fn call(state: *mut ffi::lua_State, raise: bool) -> c_int {
    let buffers = BUFFERS.with(UnsafeCell::get);
    // The reply is taken out of the thread's buffers while it is pushed: a call made in the
    // meantime (a script's __gc function, run by a collection that an allocation starts)
    // finds the buffers without it. ManuallyDrop: if a push raises, the buffer is lost, not
    // dropped by a frame that `longjmp` skips.
    // SAFETY: the buffers are this thread's, and no reference to them outlives this line.
    let mut reply = ManuallyDrop::new(std::mem::take(unsafe { &mut (*buffers).reply }));
    // SAFETY: as above; `prepare` is done with the frame when it returns.
    unsafe { prepare(state, &mut (*buffers).frame, &mut reply) };
    let failed = reply.first() == Some(&b'-');
    // SAFETY: `reply` is one whole RESP value or an error line; nothing this frame holds has
    // a destructor from here on.
    unsafe { push_reply(state, &reply) };
    // SAFETY: the buffers are this thread's; the Vec a call made meanwhile left is dropped.
    unsafe { (*buffers).reply = ManuallyDrop::into_inner(reply) };
    if failed && raise {
        // SAFETY: the error table is on top; nothing this frame holds has a destructor.
        unsafe { ffi::lua_error(state) };
    }
    1
}

/// Reads the call's arguments off the stack into `frame` and runs it: its reply (or why it
/// did not run, as an error line) in `reply`.
///
/// # Safety
/// `state` is the running Lua state, the call's arguments on its stack.
unsafe fn prepare(state: *mut ffi::lua_State, frame: &mut Vec<u8>, reply: &mut Vec<u8>) {
    reply.clear();
    // SAFETY: reading the stack of `state` (the caller's promise) never raises.
    let name = match unsafe { write_frame(state, frame) } {
        Ok(name) => name,
        Err(text) => return error_line(text, reply),
    };
    let resp3 = RESP.get() == 3;
    let ran = super::current::with_current(|caller| caller.call(frame, &frame[name], resp3, reply));
    if ran.is_none() {
        error_line("ERR redis.call/pcall can only be called inside a script invocation", reply);
    }
}

fn error_line(text: &str, out: &mut Vec<u8>) {
    out.push(b'-');
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The stack's values as a RESP frame in `frame`: where the command's name lies in it, or why
/// the arguments cannot be a command.
///
/// # Safety
/// `state` is a Lua state whose stack holds the arguments.
unsafe fn write_frame(
    state: *mut ffi::lua_State,
    frame: &mut Vec<u8>,
) -> Result<std::ops::Range<usize>, &'static str> {
    // SAFETY: reading the stack of a valid state.
    let count = unsafe { ffi::lua_gettop(state) };
    if count <= 0 {
        return Err("ERR Please specify at least one argument for this redis lib call");
    }
    frame.clear();
    frame.push(b'*');
    push_decimal(frame, count as usize);
    let mut name = 0..0;
    let mut digits = itoa::Buffer::new();
    for index in 1..=count {
        let number;
        // SAFETY: index 1..=top of the stack of a valid state.
        let kind = unsafe { ffi::lua_type(state, index) };
        let bytes: &[u8] = match kind {
            ffi::LUA_TSTRING => {
                let mut len = 0;
                // SAFETY: a string at a valid index: Lua's `len` bytes, alive while it is on
                // the stack (read as it is, never converted).
                unsafe {
                    std::slice::from_raw_parts(ffi::lua_tolstring(state, index, &mut len).cast::<u8>(), len)
                }
            }
            ffi::LUA_TNUMBER => {
                // SAFETY: a number at a valid index.
                let float = unsafe { ffi::lua_tonumber(state, index) };
                // redis-server writes it with `%.17g`, which is the integer where it is one
                // of fewer than 17 digits.
                if float.fract() == 0.0 && float.abs() < 1e16 && !(float == 0.0 && float.is_sign_negative()) {
                    digits.format(float as i64).as_bytes()
                } else {
                    number = g17(float);
                    number.as_bytes()
                }
            }
            _ => return Err("ERR Lua redis lib command arguments must be strings or integers"),
        };
        frame.push(b'$');
        push_decimal(frame, bytes.len());
        if index == 1 {
            name = frame.len()..frame.len() + bytes.len();
        }
        frame.extend_from_slice(bytes);
        frame.extend_from_slice(b"\r\n");
    }
    Ok(name)
}

/// `number` in decimal and a line end.
fn push_decimal(out: &mut Vec<u8>, number: usize) {
    out.extend_from_slice(itoa::Buffer::new().format(number).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Pushes the reply `bytes` (one whole RESP value) as `redis.call` returns it.
///
/// # Safety
/// `state` is a Lua state this thread runs, with room for one more value on its stack. It may
/// raise (out of memory): the caller holds nothing with a destructor.
pub(super) unsafe fn push_reply(state: *mut ffi::lua_State, bytes: &[u8]) {
    let mut at = 0;
    // SAFETY: the caller's promise.
    unsafe { push_value(state, bytes, &mut at, 0) }
}

/// The line at `*at` without its `\r\n`, and `*at` moved past it.
fn read_line<'b>(bytes: &'b [u8], at: &mut usize) -> &'b [u8] {
    let rest = &bytes[(*at).min(bytes.len())..];
    let end = rest.iter().position(|&b| b == b'\r').unwrap_or(rest.len());
    *at += end + 2;
    &rest[..end]
}

fn number(text: &[u8]) -> i64 {
    std::str::from_utf8(text).ok().and_then(|text| text.parse().ok()).unwrap_or(0)
}

fn count(text: &[u8]) -> usize {
    usize::try_from(number(text)).unwrap_or(0)
}

/// # Safety
/// As [`push_reply`].
unsafe fn push_value(state: *mut ffi::lua_State, bytes: &[u8], at: &mut usize, depth: usize) {
    let Some(&kind) = bytes.get(*at) else {
        // SAFETY: each Lua call of this function: `state` is valid and has room (the
        // caller's promise; nested values check for theirs).
        return unsafe { ffi::lua_pushnil(state) };
    };
    *at += 1;
    let head = read_line(bytes, at);
    // SAFETY: each Lua call below: `state` is valid, with room for what it pushes (the
    // caller's promise for one value; a table checks for its elements).
    unsafe {
        match kind {
            b':' => ffi::lua_pushnumber(state, number(head) as f64),
            b'$' | b'=' | b'*' | b'>' if head.first() == Some(&b'-') => ffi::lua_pushboolean(state, 0),
            b'$' => {
                let data = take(bytes, at, count(head));
                ffi::lua_pushlstring(state, data.as_ptr().cast(), data.len());
            }
            b'=' => {
                let data = take(bytes, at, count(head));
                let (format, text) = data.split_at(data.len().min(4));
                ffi::lua_createtable(state, 0, 1);
                ffi::lua_createtable(state, 0, 2);
                ffi::lua_pushlstring(state, text.as_ptr().cast(), text.len());
                ffi::lua_setfield(state, -2, c"string".as_ptr());
                ffi::lua_pushlstring(state, format.as_ptr().cast(), format.len().min(3));
                ffi::lua_setfield(state, -2, c"format".as_ptr());
                ffi::lua_setfield(state, -2, c"verbatim_string".as_ptr());
            }
            b'+' => {
                ffi::lua_createtable(state, 0, 1);
                ffi::lua_pushlstring(state, head.as_ptr().cast(), head.len());
                ffi::lua_setfield(state, -2, c"ok".as_ptr());
            }
            b'-' => push_error(state, head),
            // Room for the table and what an element of it pushes (at most three values).
            b'*' | b'>' if depth >= DEPTH_MAX || ffi::lua_checkstack(state, 8) == 0 => {
                skip_values(bytes, at, count(head));
                ffi::lua_pushboolean(state, 0);
            }
            b'*' | b'>' => {
                // No reply holds more values than bytes.
                let items = count(head).min(bytes.len()).min(c_int::MAX as usize) as c_int;
                ffi::lua_createtable(state, items.min(1 << 16), 0);
                for index in 1..=items {
                    push_value(state, bytes, at, depth + 1);
                    ffi::lua_rawseti_(state, -2, index);
                }
            }
            b'%' | b'~' => push_map(state, (bytes, at), kind, count(head).min(bytes.len()), depth),
            b'|' => {
                // An attribute: read past, then the value it qualifies.
                skip_values(bytes, at, count(head) * 2);
                push_value(state, bytes, at, depth);
            }
            b'#' => ffi::lua_pushboolean(state, c_int::from(head == b"t")),
            b',' => {
                let parsed = std::str::from_utf8(head).ok().and_then(|text| text.parse::<f64>().ok());
                ffi::lua_createtable(state, 0, 1);
                ffi::lua_pushnumber(state, parsed.unwrap_or(0.0));
                ffi::lua_setfield(state, -2, c"double".as_ptr());
            }
            b'(' => {
                ffi::lua_createtable(state, 0, 1);
                ffi::lua_pushlstring(state, head.as_ptr().cast(), head.len());
                ffi::lua_setfield(state, -2, c"big_number".as_ptr());
            }
            _ => ffi::lua_pushnil(state),
        }
    }
}

/// A map's or a set's `pairs` as `{map={...}}` or `{set={...}}`.
///
/// # Safety
/// As [`push_reply`].
unsafe fn push_map(
    state: *mut ffi::lua_State,
    (bytes, at): (&[u8], &mut usize),
    kind: u8,
    pairs: usize,
    depth: usize,
) {
    // SAFETY: each Lua call below: `state` is valid; room for the tables, a key and a value (and
    // what they push themselves) is checked first.
    unsafe {
        if depth >= DEPTH_MAX || ffi::lua_checkstack(state, 8) == 0 {
            skip_values(bytes, at, pairs * if kind == b'%' { 2 } else { 1 });
            return ffi::lua_pushboolean(state, 0);
        }
        ffi::lua_createtable(state, 0, 1);
        ffi::lua_createtable(state, 0, pairs.min(1 << 16) as c_int);
        for _ in 0..pairs {
            push_value(state, bytes, at, depth + 1);
            if kind == b'%' {
                push_value(state, bytes, at, depth + 1);
            } else {
                ffi::lua_pushboolean(state, 1);
            }
            if ffi::lua_type(state, -2) == ffi::LUA_TNIL {
                ffi::lua_settop(state, -3);
            } else {
                ffi::lua_rawset(state, -3);
            }
        }
        let name = if kind == b'%' { c"map" } else { c"set" };
        ffi::lua_setfield(state, -2, name.as_ptr());
    }
}

/// `{err = text}`, the text in redis-server's form (a code first: `ERR` where it has none).
///
/// # Safety
/// As [`push_reply`].
unsafe fn push_error(state: *mut ffi::lua_State, text: &[u8]) {
    // SAFETY: each Lua call below: `state` is valid, with room for the three values (the table,
    // and the two parts of its text).
    unsafe {
        ffi::lua_createtable(state, 0, 1);
        if text.contains(&b' ') {
            ffi::lua_pushlstring(state, text.as_ptr().cast(), text.len());
        } else {
            ffi::lua_pushlstring(state, c"ERR ".as_ptr(), 4);
            ffi::lua_pushlstring(state, text.as_ptr().cast(), text.len());
            ffi::lua_concat(state, 2);
        }
        ffi::lua_setfield(state, -2, c"err".as_ptr());
    }
}

/// The `len` bytes of a bulk string's data at `*at`, and `*at` moved past them and their
/// line end.
fn take<'b>(bytes: &'b [u8], at: &mut usize, len: usize) -> &'b [u8] {
    let start = (*at).min(bytes.len());
    let data = &bytes[start..(start + len).min(bytes.len())];
    *at = start + len + 2;
    data
}

/// Moves `*at` past `values` whole RESP values.
fn skip_values(bytes: &[u8], at: &mut usize, values: usize) {
    for _ in 0..values {
        let Some(&kind) = bytes.get(*at) else { return };
        *at += 1;
        let head = read_line(bytes, at);
        match kind {
            b'$' | b'=' | b'!' if head.first() != Some(&b'-') => {
                take(bytes, at, count(head));
            }
            b'*' | b'>' | b'~' => skip_values(bytes, at, count(head)),
            b'%' | b'|' => skip_values(bytes, at, count(head) * 2),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::current::with_caller;
    use super::super::vm::Caller;
    use mlua::{Lua, Table};

    /// Keeps each frame it is called with, and answers with `reply`.
    struct Recorder {
        frames: Vec<String>,
        reply: &'static [u8],
    }

    impl Caller for Recorder {
        fn call(&mut self, frame: &[u8], name: &[u8], _resp3: bool, out: &mut Vec<u8>) {
            assert!(frame.windows(name.len()).any(|window| window == name));
            self.frames.push(String::from_utf8_lossy(frame).into_owned());
            out.extend_from_slice(self.reply);
        }
    }

    fn state() -> (Lua, Table) {
        let lua = Lua::new();
        let table = lua.create_table().unwrap();
        super::register(&lua, &table).unwrap();
        lua.globals().set("H", table.clone()).unwrap();
        (lua, table)
    }

    #[test]
    fn arguments_become_a_frame_as_redis_server_writes_them() {
        let (lua, _) = state();
        let mut recorder = Recorder { frames: Vec::new(), reply: b"+OK\r\n" };
        let answer: String = with_caller(&mut recorder, || {
            lua.load("return H.call('set', 'k', 1.5, 3, -0.0, 1e20, 2^53).ok").eval().unwrap()
        });
        assert_eq!(answer, "OK");
        assert_eq!(
            recorder.frames,
            ["*7\r\n$3\r\nset\r\n$1\r\nk\r\n$3\r\n1.5\r\n$1\r\n3\r\n$2\r\n-0\r\n$5\r\n1e+20\r\n$16\r\n9007199254740992\r\n"]
        );
        let refused: String = with_caller(&mut recorder, || {
            lua.load("local ok, err = pcall(H.call, 'set', {}) return err.err").eval().unwrap()
        });
        assert_eq!(refused, "ERR Lua redis lib command arguments must be strings or integers");
        let empty: String = with_caller(&mut recorder, || lua.load("return H.pcall().err").eval().unwrap());
        assert_eq!(empty, "ERR Please specify at least one argument for this redis lib call");
        assert_eq!(recorder.frames.len(), 1, "refused calls reach no command");
    }

    #[test]
    fn a_failed_call_raises_its_error_table_and_pcall_returns_it() {
        let (lua, _) = state();
        let mut recorder = Recorder { frames: Vec::new(), reply: b"-WRONGTYPE Operation against a key\r\n" };
        let (raised, returned): (String, String) = with_caller(&mut recorder, || {
            lua.load(
                "local ok, err = pcall(H.call, 'get', 'k') assert(not ok)
                 return err.err, H.pcall('get', 'k').err",
            )
            .eval()
            .unwrap()
        });
        assert_eq!(raised, "WRONGTYPE Operation against a key");
        assert_eq!(returned, "WRONGTYPE Operation against a key");
        // Inside a coroutine too (its own Lua thread's stack).
        let in_coroutine: String = with_caller(&mut recorder, || {
            lua.load("return coroutine.wrap(function() return H.pcall('get', 'k').err end)()").eval().unwrap()
        });
        assert_eq!(in_coroutine, "WRONGTYPE Operation against a key");
    }

    #[test]
    fn outside_a_run_a_call_is_refused() {
        let (lua, _) = state();
        let text: String = lua.load("return H.pcall('get', 'k').err").eval().unwrap();
        assert_eq!(text, "ERR redis.call/pcall can only be called inside a script invocation");
    }
}
