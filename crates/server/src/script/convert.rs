//! Values between Redis and Lua, by redis-server 7.0's rules (script_lua.c): a command's RESP
//! reply becomes what `redis.call` returns (pushed onto Lua's stack by call.rs), and what a
//! script returns becomes its reply (here).
//!
//! Reply to Lua: an integer is a number, a bulk string a string, a null bulk or null array
//! `false`, an array a table, a status `{ok=...}`, an error `{err=...}`; RESP3's null is
//! `nil`, its booleans booleans, its double `{double=n}`, big number `{big_number=s}`,
//! verbatim string `{verbatim_string={format=f, string=s}}`, map `{map={...}}` and set
//! `{set={...}}`. Lua to reply: the other way, a number truncated to an integer, `true` 1 and
//! `false` null (or RESP3 booleans, once the script called `redis.setresp(3)`), an array up to
//! its first `nil`.

use mlua::ffi;
use std::os::raw::c_int;

/// Tables nested deeper than this in a script's reply are cut off with an error in their
/// place (redis-server stops where its Lua stack runs out: a table that holds itself).
const DEPTH_MAX: usize = 128;

/// Writes the value at `index` of Lua's stack, what the script returned, as its reply:
/// `script_resp3` once the script called `redis.setresp(3)`, `resp3` for a connection that
/// speaks RESP3. Read off the stack, not made an mlua `Value` (a reference slot for each
/// table and string).
///
/// # Safety
/// `state` is a valid Lua state with a value at `index`, run by this thread, whose
/// allocations cannot fail (no memory limit is set): this only reads, and pushes the names
/// of the fields it reads (interned already).
pub(crate) unsafe fn lua_to_reply(
    state: *mut ffi::lua_State,
    index: c_int,
    protocols: (bool, bool),
    out: &mut Vec<u8>,
) {
    // SAFETY: the caller's promise.
    unsafe { write_value(state, ffi::lua_absindex(state, index), protocols, 0, out) }
}

/// # Safety
/// As [`lua_to_reply`]; `index` is absolute.
unsafe fn write_value(
    state: *mut ffi::lua_State,
    index: c_int,
    protocols: (bool, bool),
    depth: usize,
    out: &mut Vec<u8>,
) {
    let (script_resp3, resp3) = protocols;
    // SAFETY: each Lua call below: reading a valid index of a valid state, with room for the
    // values a table's fields push (checked first).
    unsafe {
        match ffi::lua_type(state, index) {
            ffi::LUA_TSTRING => bulk(string_at(state, index), out),
            ffi::LUA_TBOOLEAN => {
                let truth = ffi::lua_toboolean(state, index) != 0;
                out.extend_from_slice(match (script_resp3, truth, resp3) {
                    (false, true, _) => b":1\r\n",
                    (false, false, false) => b"$-1\r\n",
                    (false, false, true) => b"_\r\n",
                    (true, true, false) => b":1\r\n",
                    (true, false, false) => b":0\r\n",
                    (true, true, true) => b"#t\r\n",
                    (true, false, true) => b"#f\r\n",
                })
            }
            ffi::LUA_TNUMBER => integer(c_cast(ffi::lua_tonumber(state, index)), out),
            ffi::LUA_TTABLE if depth >= DEPTH_MAX || ffi::lua_checkstack(state, 4) == 0 => {
                out.extend_from_slice(b"-ERR reached lua stack limit\r\n")
            }
            ffi::LUA_TTABLE => write_table(state, index, protocols, depth, out),
            _ => null(resp3, out),
        }
    }
}

/// The bytes of the string at `index`, valid while it stays on the stack.
///
/// # Safety
/// The value at `index` of the valid `state` is a string.
unsafe fn string_at<'s>(state: *mut ffi::lua_State, index: c_int) -> &'s [u8] {
    let mut len = 0;
    // SAFETY: a string's bytes, `len` of them (the caller's promise).
    unsafe { std::slice::from_raw_parts(ffi::lua_tolstring(state, index, &mut len).cast::<u8>(), len) }
}

/// Pushes the table at `table`'s field `name` (raw: no metamethod runs), and its type.
///
/// # Safety
/// `table` is an absolute index of a table of the valid `state`, with room for one value.
unsafe fn field(state: *mut ffi::lua_State, table: c_int, name: &std::ffi::CStr) -> c_int {
    // SAFETY: the caller's promise; the name is a constant of prelude.lua's (interned).
    unsafe {
        ffi::lua_pushstring(state, name.as_ptr());
        ffi::lua_rawget(state, table);
        ffi::lua_type(state, -1)
    }
}

/// # Safety
/// As [`write_value`], with room for four more values.
unsafe fn write_table(
    state: *mut ffi::lua_State,
    table: c_int,
    protocols: (bool, bool),
    depth: usize,
    out: &mut Vec<u8>,
) {
    let (_, resp3) = protocols;
    // SAFETY: each Lua call below: `table` is a table of the valid `state`; each field pushed is
    // popped before the next (`lua_settop` back to `top`).
    unsafe {
        let top = ffi::lua_gettop(state);
        let done = 'special: {
            if field(state, table, c"err") == ffi::LUA_TSTRING {
                line(b'-', string_at(state, -1), out);
                break 'special true;
            }
            ffi::lua_settop(state, top);
            if field(state, table, c"ok") == ffi::LUA_TSTRING {
                line(b'+', string_at(state, -1), out);
                break 'special true;
            }
            ffi::lua_settop(state, top);
            if field(state, table, c"double") == ffi::LUA_TNUMBER {
                double(ffi::lua_tonumber(state, -1), resp3, out);
                break 'special true;
            }
            ffi::lua_settop(state, top);
            if field(state, table, c"big_number") == ffi::LUA_TSTRING {
                let digits: Vec<u8> = string_at(state, -1)
                    .iter()
                    .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
                    .collect();
                if resp3 {
                    line(b'(', &digits, out)
                } else {
                    bulk(&digits, out)
                }
                break 'special true;
            }
            ffi::lua_settop(state, top);
            if field(state, table, c"verbatim_string") == ffi::LUA_TTABLE {
                let verbatim = top + 1;
                if field(state, verbatim, c"format") == ffi::LUA_TSTRING
                    && field(state, verbatim, c"string") == ffi::LUA_TSTRING
                {
                    verbatim_string(string_at(state, -2), string_at(state, -1), resp3, out);
                    break 'special true;
                }
            }
            ffi::lua_settop(state, top);
            for (name, map) in [(c"map", true), (c"set", false)] {
                if field(state, table, name) == ffi::LUA_TTABLE {
                    break 'special write_pairs(state, top + 1, map, (protocols, depth), out);
                }
                ffi::lua_settop(state, top);
            }
            false
        };
        ffi::lua_settop(state, top);
        if done {
            return;
        }
        // An array, up to its first nil.
        let mut items = 0;
        while {
            ffi::lua_rawgeti(state, table, items as ffi::lua_Integer + 1);
            ffi::lua_type(state, -1) != ffi::LUA_TNIL
        } {
            ffi::lua_settop(state, top);
            items += 1;
        }
        ffi::lua_settop(state, top);
        head(b'*', items, out);
        for item in 1..=items {
            ffi::lua_rawgeti(state, table, item as ffi::lua_Integer);
            write_value(state, top + 1, protocols, depth + 1, out);
            ffi::lua_settop(state, top);
        }
    }
}

/// A `{map=...}` table's pairs (`map`) or a `{set=...}` table's members, at `table`; `true`.
///
/// # Safety
/// As [`write_table`].
unsafe fn write_pairs(
    state: *mut ffi::lua_State,
    table: c_int,
    map: bool,
    (protocols, depth): ((bool, bool), usize),
    out: &mut Vec<u8>,
) -> bool {
    let (_, resp3) = protocols;
    // SAFETY: each Lua call below: `lua_next` over a table of the valid `state`, its key left as
    // it is between steps (only read, never converted in place).
    unsafe {
        let mut count = 0;
        ffi::lua_pushnil(state);
        while ffi::lua_next(state, table) != 0 {
            count += 1;
            ffi::lua_settop(state, -2);
        }
        match (map, resp3) {
            (true, true) => head(b'%', count, out),
            (true, false) => head(b'*', count * 2, out),
            (false, true) => head(b'~', count, out),
            (false, false) => head(b'*', count, out),
        }
        ffi::lua_pushnil(state);
        while ffi::lua_next(state, table) != 0 {
            let value = ffi::lua_gettop(state);
            write_value(state, value - 1, protocols, depth + 1, out);
            if map {
                write_value(state, value, protocols, depth + 1, out);
            }
            ffi::lua_settop(state, -2);
        }
    }
    true
}

/// C's `(long long)` of a double on x86-64, as redis-server converts a Lua number: truncated,
/// and the "integer indefinite" (the smallest) where it does not fit.
fn c_cast(number: f64) -> i64 {
    // 2^63: the doubles from -2^63 up to, not including, 2^63 fit.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if number.is_nan() || !(-LIMIT..LIMIT).contains(&number) {
        i64::MIN
    } else {
        number as i64
    }
}

fn head(kind: u8, count: usize, out: &mut Vec<u8>) {
    out.push(kind);
    out.extend_from_slice(count.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn bulk(data: &[u8], out: &mut Vec<u8>) {
    head(b'$', data.len(), out);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

fn integer(number: i64, out: &mut Vec<u8>) {
    head(b':', 0, out);
    out.truncate(out.len() - 3);
    out.extend_from_slice(number.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn null(resp3: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" });
}

/// A status or error line: its line ends become spaces (redis-server's `Safe` forms), and an
/// error without a code gets `ERR`.
fn line(kind: u8, text: &[u8], out: &mut Vec<u8>) {
    out.push(kind);
    let text = text.strip_suffix(b"\r\n").unwrap_or(text);
    if kind == b'-' && text.first() == Some(&b'-') {
        out.extend(text[1..].iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
    } else {
        out.extend(text.iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
    }
    out.extend_from_slice(b"\r\n");
}

fn double(number: f64, resp3: bool, out: &mut Vec<u8>) {
    let text = if number.is_infinite() {
        if number > 0.0 {
            "inf".to_string()
        } else {
            "-inf".to_string()
        }
    } else {
        g17(number)
    };
    if resp3 {
        line(b',', text.as_bytes(), out);
    } else {
        bulk(text.as_bytes(), out);
    }
}

fn verbatim_string(format: &[u8], text: &[u8], resp3: bool, out: &mut Vec<u8>) {
    if !resp3 {
        return bulk(text, out);
    }
    head(b'=', text.len() + 4, out);
    for at in 0..3 {
        out.push(format.get(at).copied().unwrap_or(b' '));
    }
    out.push(b':');
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

/// C's `%.17g`: how redis-server writes a Lua number it passes to a command, and a double.
pub(crate) fn g17(number: f64) -> String {
    if number.is_nan() {
        return if number.is_sign_negative() { "-nan".into() } else { "nan".into() };
    }
    if number.is_infinite() {
        return if number > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if number == 0.0 {
        return if number.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let scientific = format!("{number:.16e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..17).contains(&exponent) {
        let mantissa = trim_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let fixed = format!("{number:.*}", (16 - exponent) as usize);
    trim_zeros(&fixed).to_string()
}

fn trim_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::Lua;

    #[test]
    fn g17_is_c_printf() {
        for (number, text) in [
            (1.0, "1"),
            (3.5, "3.5"),
            (0.1, "0.10000000000000001"),
            (-2.25, "-2.25"),
            (1e17, "1e+17"),
            (12345678901234567.0, "12345678901234568"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (1e100, "1e+100"),
        ] {
            assert_eq!(g17(number), text, "{number}");
        }
    }

    /// The reply `bytes` as `redis.call` returns it to a script.
    fn reply_to_lua(lua: &Lua, bytes: &[u8]) -> mlua::Result<mlua::Value> {
        // SAFETY: push_reply's one value is all this pushes; it holds nothing with a destructor.
        unsafe { lua.exec_raw((), |state| super::super::call::push_reply(state, bytes)) }
    }

    /// `value` as a script's reply.
    fn reply_of(lua: &Lua, value: mlua::Value, protocols: (bool, bool)) -> String {
        let mut out = Vec::new();
        // SAFETY: `value` is the one value on the stack; no memory limit is set.
        unsafe { lua.exec_raw::<()>(value, |state| lua_to_reply(state, -1, protocols, &mut out)) }.unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn replies_become_lua_values_and_back() {
        let lua = Lua::new();
        let roundtrip =
            |bytes: &[u8], resp3: bool| reply_of(&lua, reply_to_lua(&lua, bytes).unwrap(), (resp3, resp3));
        assert_eq!(roundtrip(b":42\r\n", false), ":42\r\n");
        assert_eq!(roundtrip(b"$3\r\nabc\r\n", false), "$3\r\nabc\r\n");
        assert_eq!(roundtrip(b"$-1\r\n", false), "$-1\r\n");
        assert_eq!(roundtrip(b"+OK\r\n", false), "+OK\r\n");
        assert_eq!(roundtrip(b"-WRONGTYPE bad\r\n", false), "-WRONGTYPE bad\r\n");
        assert_eq!(
            roundtrip(b"*3\r\n:1\r\n$1\r\nx\r\n*1\r\n+OK\r\n", false),
            "*3\r\n:1\r\n$1\r\nx\r\n*1\r\n+OK\r\n"
        );
        assert_eq!(roundtrip(b"_\r\n", true), "_\r\n");
        assert_eq!(roundtrip(b"#t\r\n", true), "#t\r\n");
        assert_eq!(roundtrip(b"#f\r\n", false), "$-1\r\n");
        assert_eq!(roundtrip(b",1.5\r\n", true), ",1.5\r\n");
        assert_eq!(roundtrip(b",1.5\r\n", false), "$3\r\n1.5\r\n");
        assert_eq!(roundtrip(b"%1\r\n$1\r\na\r\n:1\r\n", true), "%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(roundtrip(b"%1\r\n$1\r\na\r\n:1\r\n", false), "*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(roundtrip(b"~1\r\n$1\r\na\r\n", true), "~1\r\n$1\r\na\r\n");
        assert_eq!(roundtrip(b"=8\r\ntxt:abcd\r\n", true), "=8\r\ntxt:abcd\r\n");
        assert_eq!(roundtrip(b"(12345678901234567890\r\n", true), "(12345678901234567890\r\n");
        assert_eq!(roundtrip(b"*-1\r\n", false), "$-1\r\n");
        let error = reply_to_lua(&lua, b"-NOCODE\r\n").unwrap();
        let mlua::Value::Table(error) = error else { panic!() };
        assert_eq!(error.raw_get::<String>("err").unwrap(), "ERR NOCODE");
    }

    #[test]
    fn lua_values_become_replies() {
        let lua = Lua::new();
        let reply = |source: &str, protocols| reply_of(&lua, lua.load(source).eval().unwrap(), protocols);
        assert_eq!(reply("return 3.99", (false, false)), ":3\r\n");
        assert_eq!(reply("return -0.5", (false, false)), ":0\r\n");
        assert_eq!(reply("return true", (false, false)), ":1\r\n");
        assert_eq!(reply("return false", (false, true)), "_\r\n");
        assert_eq!(reply("return nil", (false, false)), "$-1\r\n");
        assert_eq!(reply("return {1, 'a', nil, 4}", (false, false)), "*2\r\n:1\r\n$1\r\na\r\n");
        assert_eq!(reply("return {err='bad\\r\\nline'}", (false, false)), "-bad  line\r\n");
        assert_eq!(reply("return {ok='fine'}", (false, false)), "+fine\r\n");
        assert_eq!(reply("return {double=2.5}", (true, true)), ",2.5\r\n");
        assert_eq!(reply("return {map={a=1}}", (true, true)), "%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(reply("return {set={b=true}}", (true, false)), "*1\r\n$1\r\nb\r\n");
        assert_eq!(
            reply("return setmetatable({}, {__index = function() error('no') end})", (false, false)),
            "*0\r\n"
        );
    }

    #[test]
    fn a_table_that_holds_itself_is_cut_off() {
        let lua = Lua::new();
        let table = lua.load("local t = {} t[1] = t return t").eval().unwrap();
        assert!(reply_of(&lua, table, (false, false)).ends_with("-ERR reached lua stack limit\r\n"));
    }
}
