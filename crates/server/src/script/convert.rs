//! Values between Redis and Lua, by redis-server 7.0's rules (script_lua.c): a command's RESP
//! reply becomes what `redis.call` returns, and what a script returns becomes its reply.
//!
//! Reply to Lua: an integer is a number, a bulk string a string, a null bulk or null array
//! `false`, an array a table, a status `{ok=...}`, an error `{err=...}`; RESP3's null is
//! `nil`, its booleans booleans, its double `{double=n}`, big number `{big_number=s}`,
//! verbatim string `{verbatim_string={format=f, string=s}}`, map `{map={...}}` and set
//! `{set={...}}`. Lua to reply: the other way, a number truncated to an integer, `true` 1 and
//! `false` null (or RESP3 booleans, once the script called `redis.setresp(3)`), an array up to
//! its first `nil`.

use mlua::{Lua, Result, Table, Value};

/// Tables nested deeper than this in a script's reply are cut off with an error in their
/// place (redis-server stops where its Lua stack runs out: a table that holds itself).
const DEPTH_MAX: usize = 128;

/// The reply `bytes` (one whole RESP value) as `redis.call` returns it.
pub(crate) fn reply_to_lua(lua: &Lua, bytes: &[u8]) -> Result<Value> {
    let mut at = 0;
    value(lua, bytes, &mut at)
}

/// The line at `*at` without its `\r\n`, and `*at` moved past it.
fn read_line<'b>(bytes: &'b [u8], at: &mut usize) -> &'b [u8] {
    let rest = &bytes[(*at).min(bytes.len())..];
    let end = rest.windows(2).position(|pair| pair == b"\r\n").unwrap_or(rest.len());
    *at += end + 2;
    &rest[..end]
}

fn number(text: &[u8]) -> i64 {
    std::str::from_utf8(text).ok().and_then(|text| text.parse().ok()).unwrap_or(0)
}

fn field(lua: &Lua, name: &str, value: Value) -> Result<Value> {
    let table = lua.create_table_with_capacity(0, 1)?;
    table.raw_set(name, value)?;
    Ok(Value::Table(table))
}

/// The RESP value at `*at`.
fn value(lua: &Lua, bytes: &[u8], at: &mut usize) -> Result<Value> {
    let Some(&kind) = bytes.get(*at) else { return Ok(Value::Nil) };
    *at += 1;
    let head = read_line(bytes, at);
    Ok(match kind {
        b':' => Value::Number(number(head) as f64),
        b'$' | b'=' if head.first() == Some(&b'-') => Value::Boolean(false),
        b'$' | b'=' => {
            let len = usize::try_from(number(head)).unwrap_or(0);
            let data = &bytes[(*at).min(bytes.len())..(*at + len).min(bytes.len())];
            *at += len + 2;
            if kind == b'$' {
                Value::String(lua.create_string(data)?)
            } else {
                let (format, text) = data.split_at(data.len().min(4));
                let verbatim = lua.create_table_with_capacity(0, 2)?;
                verbatim.raw_set("string", lua.create_string(text)?)?;
                verbatim.raw_set("format", lua.create_string(&format[..format.len().min(3)])?)?;
                field(lua, "verbatim_string", Value::Table(verbatim))?
            }
        }
        b'+' => field(lua, "ok", Value::String(lua.create_string(head)?))?,
        b'-' => error_table(lua, head)?,
        b'*' | b'>' if head.first() == Some(&b'-') => Value::Boolean(false),
        b'*' | b'>' => {
            let count = usize::try_from(number(head)).unwrap_or(0);
            let table = lua.create_table_with_capacity(count.min(1 << 16), 0)?;
            for index in 1..=count {
                table.raw_set(index, value(lua, bytes, at)?)?;
            }
            Value::Table(table)
        }
        b'%' | b'~' => {
            let count = usize::try_from(number(head)).unwrap_or(0);
            let inner = lua.create_table()?;
            for _ in 0..count {
                let key = value(lua, bytes, at)?;
                let member = if kind == b'%' { value(lua, bytes, at)? } else { Value::Boolean(true) };
                if !key.is_nil() {
                    inner.raw_set(key, member)?;
                }
            }
            field(lua, if kind == b'%' { "map" } else { "set" }, Value::Table(inner))?
        }
        b'|' => {
            // An attribute: read past, then the value it qualifies.
            for _ in 0..usize::try_from(number(head)).unwrap_or(0) * 2 {
                value(lua, bytes, at)?;
            }
            value(lua, bytes, at)?
        }
        b'_' => Value::Nil,
        b'#' => Value::Boolean(head == b"t"),
        b',' => {
            let parsed = std::str::from_utf8(head).ok().and_then(|text| text.parse::<f64>().ok());
            field(lua, "double", Value::Number(parsed.unwrap_or(0.0)))?
        }
        b'(' => field(lua, "big_number", Value::String(lua.create_string(head)?))?,
        _ => Value::Nil,
    })
}

/// An error reply's text (after `-`) as the table `redis.pcall` returns: `{err="CODE msg"}`.
pub(crate) fn error_table(lua: &Lua, text: &[u8]) -> Result<Value> {
    let message = error_text(text);
    field(lua, "err", Value::String(lua.create_string(&message)?))
}

/// redis-server's form of an error's text: its code, a space, its message (`ERR` where the
/// text has no code), without a line end.
pub(crate) fn error_text(text: &[u8]) -> Vec<u8> {
    let text = text.strip_suffix(b"\r\n").unwrap_or(text);
    match text.iter().position(|&byte| byte == b' ') {
        Some(_) => text.to_vec(),
        None => [&b"ERR "[..], text].concat(),
    }
}

/// Writes the script's returned `value` as its reply: `script_resp3` once the script called
/// `redis.setresp(3)`, `resp3` for a connection that speaks RESP3.
pub(crate) fn lua_to_reply(value: &Value, (script_resp3, resp3): (bool, bool), out: &mut Vec<u8>) {
    write_value(value, (script_resp3, resp3), 0, out);
}

fn write_value(value: &Value, protocols: (bool, bool), depth: usize, out: &mut Vec<u8>) {
    let (script_resp3, resp3) = protocols;
    match value {
        Value::String(text) => bulk(&text.as_bytes(), out),
        Value::Boolean(truth) if !script_resp3 => out.extend_from_slice(match (truth, resp3) {
            (true, _) => b":1\r\n",
            (false, false) => b"$-1\r\n",
            (false, true) => b"_\r\n",
        }),
        Value::Boolean(truth) => out.extend_from_slice(match (truth, resp3) {
            (true, false) => b":1\r\n",
            (false, false) => b":0\r\n",
            (true, true) => b"#t\r\n",
            (false, true) => b"#f\r\n",
        }),
        Value::Integer(number) => integer(*number, out),
        Value::Number(number) => integer(c_cast(*number), out),
        Value::Table(_) if depth >= DEPTH_MAX => out.extend_from_slice(b"-ERR reached lua stack limit\r\n"),
        Value::Table(table) => write_table(table, protocols, depth, out),
        _ => null(resp3, out),
    }
}

fn write_table(table: &Table, protocols: (bool, bool), depth: usize, out: &mut Vec<u8>) {
    let (_, resp3) = protocols;
    let get = |name: &str| table.raw_get::<Value>(name).unwrap_or(Value::Nil);
    if let Value::String(text) = get("err") {
        return line(b'-', &text.as_bytes(), out);
    }
    if let Value::String(text) = get("ok") {
        return line(b'+', &text.as_bytes(), out);
    }
    match get("double") {
        Value::Number(number) => return double(number, resp3, out),
        Value::Integer(number) => return double(number as f64, resp3, out),
        _ => {}
    }
    if let Value::String(text) = get("big_number") {
        let digits: Vec<u8> =
            text.as_bytes().iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }).collect();
        return if resp3 { line(b'(', &digits, out) } else { bulk(&digits, out) };
    }
    if let Value::Table(verbatim) = get("verbatim_string") {
        let format = verbatim.raw_get::<Value>("format").unwrap_or(Value::Nil);
        let text = verbatim.raw_get::<Value>("string").unwrap_or(Value::Nil);
        if let (Value::String(format), Value::String(text)) = (format, text) {
            return verbatim_string(&format.as_bytes(), &text.as_bytes(), resp3, out);
        }
    }
    if let Value::Table(map) = get("map") {
        let pairs: Vec<(Value, Value)> = map.pairs::<Value, Value>().filter_map(Result::ok).collect();
        head(if resp3 { b'%' } else { b'*' }, pairs.len() * if resp3 { 1 } else { 2 }, out);
        for (key, value) in &pairs {
            write_value(key, protocols, depth + 1, out);
            write_value(value, protocols, depth + 1, out);
        }
        return;
    }
    if let Value::Table(set) = get("set") {
        let members: Vec<Value> =
            set.pairs::<Value, Value>().filter_map(|pair| pair.ok().map(|(key, _)| key)).collect();
        head(if resp3 { b'~' } else { b'*' }, members.len(), out);
        for member in &members {
            write_value(member, protocols, depth + 1, out);
        }
        return;
    }
    let mut items = Vec::new();
    for index in 1.. {
        match table.raw_get::<Value>(index) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(item) => items.push(item),
        }
    }
    head(b'*', items.len(), out);
    for item in &items {
        write_value(item, protocols, depth + 1, out);
    }
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

    #[test]
    fn replies_become_lua_values_and_back() {
        let lua = Lua::new();
        let roundtrip = |bytes: &[u8], resp3: bool| {
            let value = reply_to_lua(&lua, bytes).unwrap();
            let mut out = Vec::new();
            lua_to_reply(&value, (resp3, resp3), &mut out);
            String::from_utf8(out).unwrap()
        };
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
        assert_eq!(roundtrip(b",1.5\r\n", true), ",1.5\r\n");
        assert_eq!(roundtrip(b",1.5\r\n", false), "$3\r\n1.5\r\n");
        assert_eq!(roundtrip(b"%1\r\n$1\r\na\r\n:1\r\n", true), "%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(roundtrip(b"~1\r\n$1\r\na\r\n", true), "~1\r\n$1\r\na\r\n");
        assert_eq!(roundtrip(b"=8\r\ntxt:abcd\r\n", true), "=8\r\ntxt:abcd\r\n");
        let error = reply_to_lua(&lua, b"-NOCODE\r\n").unwrap();
        let Value::Table(error) = error else { panic!() };
        assert_eq!(error.raw_get::<String>("err").unwrap(), "ERR NOCODE");
    }

    #[test]
    fn a_table_that_holds_itself_is_cut_off() {
        let lua = Lua::new();
        let table: Value = lua.load("local t = {} t[1] = t return t").eval().unwrap();
        let mut out = Vec::new();
        lua_to_reply(&table, (false, false), &mut out);
        assert!(out.ends_with(b"-ERR reached lua stack limit\r\n"));
    }
}
