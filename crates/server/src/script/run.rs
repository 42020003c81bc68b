//! One script's run on the Lua stack, as redis-server's `luaCallFunction`: KEYS and ARGV made
//! as tables in the scripts' environment, the script called under prelude.lua's error handler,
//! and what it returned (or the error it raised) read off the stack. The values are pushed and
//! read here rather than made mlua values (a reference slot each) and run through mlua's
//! protected calls: those cost about 3,000 instructions a run (docs/BENCHMARKS.md, "Scripts").
//!
//! Nothing here may be left by `longjmp` holding a value with a destructor: KEYS and ARGV are
//! made while no memory limit is set (an allocation then never fails: a failure aborts, and
//! scripts cannot make a userdata whose `__gc` could raise: prelude.lua takes `newproxy`
//! away), and the script runs under `lua_pcall`, which catches whatever it raises.

use super::convert::lua_to_reply;
use mlua::{ffi, Lua};
use std::os::raw::c_int;

/// What a run needs of the state: prelude.lua's error handler, the scripts' environment and
/// the script, each a reference into the registry.
#[derive(Clone, Copy)]
pub(super) struct Refs {
    pub handler: c_int,
    pub env: c_int,
    pub script: c_int,
}

/// Keeps `value` in `lua`'s registry: its reference.
pub(super) fn refer(lua: &Lua, value: impl mlua::IntoLua) -> mlua::Result<c_int> {
    // SAFETY: `value` is the one value on the stack; luaL_ref pops it and the pushed integer
    // is the one result. Nothing here has a destructor.
    unsafe {
        lua.exec_raw::<c_int>(value, |state| {
            let reference = ffi::luaL_ref(state, ffi::LUA_REGISTRYINDEX);
            ffi::lua_pushinteger(state, ffi::lua_Integer::from(reference));
        })
    }
}

/// Lets the registry drop what `reference` kept.
pub(super) fn forget(lua: &Lua, reference: c_int) {
    // SAFETY: luaL_unref only clears a registry slot; it pushes nothing and never raises.
    unsafe { ffi::luaL_unref(lua.state(), ffi::LUA_REGISTRYINDEX, reference) };
}

/// Makes the hook set on `lua`'s main state run every `count` instructions (its function and
/// what it does kept): a killed script's hook runs at every one, so the script's own `pcall`
/// cannot catch its end for good (redis-server's hook does the same, at every line).
pub(super) fn hook_every(lua: &Lua, count: c_int) {
    // SAFETY: lua_gethook and lua_sethook only read and set the state's hook fields; they push
    // nothing and never raise. The main state is valid while `lua` lives.
    unsafe {
        let state = lua.state();
        ffi::lua_sethook(state, ffi::lua_gethook(state), ffi::LUA_MASKCOUNT, count);
    }
}

/// How a run ended.
pub(super) enum Ended {
    /// Its reply is written.
    Replied,
    /// It raised: the error table's `err`, `source` and `line` ([`error_fields`]), or the
    /// text of an error no handler saw (out of memory).
    Failed(Result<[Option<String>; 3], Option<String>>),
}

/// Runs the script of `refs` over `keys` and `argv`, its own allocations held to `memory_max`
/// bytes, and writes what it returned to `out` as its reply: for a script whose RESP version
/// `resp()` answers once it ran, to a connection that speaks RESP3 if `resp3`.
pub(super) fn run<'k>(
    lua: &Lua,
    refs: Refs,
    args: (impl Iterator<Item = &'k [u8]>, impl Iterator<Item = &'k [u8]>),
    memory_max: usize,
    (resp, resp3): (fn() -> u8, bool),
    out: &mut Vec<u8>,
) -> Ended {
    let state = lua.state();
    // SAFETY: the main state of `lua`, which no mlua call uses while this runs; what the run
    // leaves is read (no memory limit is set then) and the top restored before returning.
    unsafe {
        let (status, top) = call((lua, state), refs, args, memory_max);
        let ended = if status == ffi::LUA_OK {
            lua_to_reply(state, -1, (resp() == 3, resp3), out);
            Ended::Replied
        } else {
            Ended::Failed(error_fields(state))
        };
        ffi::lua_settop(state, top);
        ended
    }
}

/// Runs the script of `refs` over `keys` and `argv`, its own allocations held to `memory_max`
/// bytes: Lua's status (`LUA_OK`: what it returned is on top of the stack, else the error),
/// and the stack's top before the run, to restore with `lua_settop` once that is read.
///
/// # Safety
/// `state` is `lua`'s main state, run by this thread, which no mlua call is using now; the
/// caller restores the top it is given back before the next mlua call that could see it.
unsafe fn call<'k>(
    (lua, state): (&Lua, *mut ffi::lua_State),
    refs: Refs,
    (keys, argv): (impl Iterator<Item = &'k [u8]>, impl Iterator<Item = &'k [u8]>),
    memory_max: usize,
) -> (c_int, c_int) {
    // SAFETY: each Lua call below: `state` is valid (the caller's promise); room is made before
    // each push; no memory limit is set until the script itself runs, so nothing raises.
    unsafe {
        let top = ffi::lua_gettop(state);
        ffi::lua_checkstack(state, 4);
        ffi::lua_rawgeti(state, ffi::LUA_REGISTRYINDEX, refs.env.into());
        array(state, c"KEYS", keys);
        array(state, c"ARGV", argv);
        ffi::lua_settop(state, top);
        ffi::lua_rawgeti(state, ffi::LUA_REGISTRYINDEX, refs.handler.into());
        ffi::lua_rawgeti(state, ffi::LUA_REGISTRYINDEX, refs.script.into());
        let _ = lua.set_memory_limit(memory_max);
        let status = ffi::lua_pcall(state, 0, 1, top + 1);
        let _ = lua.set_memory_limit(0);
        (status, top)
    }
}

/// Sets `name` in the table on top of the stack to an array of `items`.
///
/// # Safety
/// The table is on top of the valid `state`'s stack, with room for three more values.
unsafe fn array<'k>(
    state: *mut ffi::lua_State,
    name: &std::ffi::CStr,
    items: impl Iterator<Item = &'k [u8]>,
) {
    // SAFETY: each Lua call below: as the caller promises.
    unsafe {
        ffi::lua_pushstring(state, name.as_ptr());
        let (count, _) = items.size_hint();
        ffi::lua_createtable(state, count.min(1 << 16) as c_int, 0);
        for (index, item) in items.enumerate() {
            ffi::lua_pushlstring(state, item.as_ptr().cast(), item.len());
            ffi::lua_rawseti_(state, -2, (index + 1).min(c_int::MAX as usize) as c_int);
        }
        ffi::lua_rawset(state, -3);
    }
}

/// The fields of the error table on top of the stack that a failure's reply needs: its `err`,
/// `source` and `line`, as text (`None` where missing); `None` if the top is no table, with
/// its text if it is a string.
///
/// # Safety
/// `state` is valid and has a value on top, and room for one more; no memory limit is set.
unsafe fn error_fields(state: *mut ffi::lua_State) -> Result<[Option<String>; 3], Option<String>> {
    // SAFETY: each Lua call below: reading the top of a valid state; each field pushed is popped.
    unsafe {
        let top = ffi::lua_gettop(state);
        match ffi::lua_type(state, top) {
            ffi::LUA_TTABLE => {}
            ffi::LUA_TSTRING => return Err(Some(text_at(state, top))),
            _ => return Err(None),
        }
        let mut fields = [None, None, None];
        for (field, name) in fields.iter_mut().zip([c"err", c"source", c"line"]) {
            ffi::lua_pushstring(state, name.as_ptr());
            ffi::lua_rawget(state, top);
            *field = match ffi::lua_type(state, -1) {
                ffi::LUA_TSTRING => Some(text_at(state, -1)),
                ffi::LUA_TNUMBER => Some((ffi::lua_tonumber(state, -1) as i64).to_string()),
                _ => None,
            };
            ffi::lua_settop(state, top);
        }
        Ok(fields)
    }
}

/// The string at `index`, as text.
///
/// # Safety
/// The value at `index` of the valid `state` is a string.
unsafe fn text_at(state: *mut ffi::lua_State, index: c_int) -> String {
    let mut len = 0;
    // SAFETY: a string's `len` bytes (the caller's promise), copied before anything else runs.
    let bytes =
        unsafe { std::slice::from_raw_parts(ffi::lua_tolstring(state, index, &mut len).cast::<u8>(), len) };
    String::from_utf8_lossy(bytes).into_owned()
}
