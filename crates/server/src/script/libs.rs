//! The libraries redis-server 7.0 gives scripts beyond Lua's own, as far as cache and lock
//! libraries use them: `bit` (LuaBitOp's operations on 32-bit integers) and `cjson`
//! (`encode`, `decode`, `null`); `cmsgpack` is in msgpack.rs. `struct` is not given
//! (docs/COMPATIBILITY.md).

use mlua::{LightUserData, Lua, Result, Table, Value, Variadic};
use std::cell::Cell;
use std::rc::Rc;

/// Registers `bit` and `cjson` as globals of `lua`.
pub(super) fn register(lua: &Lua) -> Result<()> {
    lua.globals().raw_set("bit", bit(lua)?)?;
    lua.globals().raw_set("cjson", cjson(lua)?)?;
    super::msgpack::register(lua)
}

/// LuaBitOp's conversion of a number to a 32-bit integer: rounded, then taken modulo 2^32.
fn tobit(number: f64) -> i32 {
    let rounded = number.round_ties_even();
    if !rounded.is_finite() {
        return 0;
    }
    rounded.rem_euclid(4_294_967_296.0) as u64 as u32 as i32
}

fn bit(lua: &Lua) -> Result<Table> {
    let table = lua.create_table()?;
    let fold = |start: i32, step: fn(i32, i32) -> i32| {
        move |_: &Lua, numbers: Variadic<f64>| Ok(numbers.iter().fold(start, |acc, &n| step(acc, tobit(n))))
    };
    table.raw_set("tobit", lua.create_function(|_, number: f64| Ok(tobit(number)))?)?;
    table.raw_set("bnot", lua.create_function(|_, number: f64| Ok(!tobit(number)))?)?;
    table.raw_set("band", lua.create_function(fold(-1, |a, b| a & b))?)?;
    table.raw_set("bor", lua.create_function(fold(0, |a, b| a | b))?)?;
    table.raw_set("bxor", lua.create_function(fold(0, |a, b| a ^ b))?)?;
    let shift = |op: fn(i32, u32) -> i32| {
        move |_: &Lua, (number, by): (f64, f64)| Ok(op(tobit(number), (tobit(by) & 31) as u32))
    };
    table.raw_set("lshift", lua.create_function(shift(|n, by| ((n as u32) << by) as i32))?)?;
    table.raw_set("rshift", lua.create_function(shift(|n, by| ((n as u32) >> by) as i32))?)?;
    table.raw_set("arshift", lua.create_function(shift(|n, by| n >> by))?)?;
    table.raw_set("rol", lua.create_function(shift(|n, by| (n as u32).rotate_left(by) as i32))?)?;
    table.raw_set("ror", lua.create_function(shift(|n, by| (n as u32).rotate_right(by) as i32))?)?;
    table.raw_set("bswap", lua.create_function(|_, number: f64| Ok(tobit(number).swap_bytes()))?)?;
    let tohex = |_: &Lua, (number, digits): (f64, Option<f64>)| {
        let digits = digits.map_or(8, tobit);
        let (upper, count) = (digits < 0, digits.unsigned_abs().min(8) as usize);
        let value = tobit(number) as u32 as u64;
        let text = if upper { format!("{value:08X}") } else { format!("{value:08x}") };
        Ok(text[8 - count..].to_string())
    };
    table.raw_set("tohex", lua.create_function(tohex)?)?;
    Ok(table)
}

/// cjson's `null`: a light userdata holding NULL, as lua-cjson's.
fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

/// lua-cjson's settings a script may change (they last for the Lua state, as lua-cjson's).
#[derive(Clone, Copy)]
struct Settings {
    encode_depth: usize,
    decode_depth: usize,
    invalid_numbers: bool,
}

fn cjson(lua: &Lua) -> Result<Table> {
    let table = lua.create_table()?;
    let settings =
        Rc::new(Cell::new(Settings { encode_depth: 1000, decode_depth: 1000, invalid_numbers: false }));
    table.raw_set("null", null())?;
    let with = settings.clone();
    table.raw_set(
        "encode",
        lua.create_function(move |lua, value: Value| {
            let mut out = Vec::new();
            encode(&value, (0, with.get()), &mut out)?;
            lua.create_string(&out)
        })?,
    )?;
    let with = settings.clone();
    table.raw_set(
        "decode",
        lua.create_function(move |lua, text: mlua::LuaString| {
            let json: serde_json::Value = serde_json::from_slice(&text.as_bytes()).map_err(|error| {
                mlua::Error::runtime(format!("Expected value but found invalid token: {error}"))
            })?;
            if depth(&json) > with.get().decode_depth {
                return Err(mlua::Error::runtime("Found too many nested data structures"));
            }
            decode(lua, &json)
        })?,
    )?;
    let set = |change: fn(&mut Settings, Option<f64>)| {
        let settings = settings.clone();
        move |_: &Lua, value: Value| {
            let mut now = settings.get();
            let number = match value {
                Value::Integer(number) => Some(number as f64),
                Value::Number(number) => Some(number),
                Value::Boolean(truth) => Some(f64::from(u8::from(truth))),
                _ => None,
            };
            change(&mut now, number);
            settings.set(now);
            Ok(())
        }
    };
    table.raw_set("encode_keep_buffer", lua.create_function(|_, _: Value| Ok(()))?)?;
    table.raw_set(
        "encode_max_depth",
        lua.create_function(set(|s, n| s.encode_depth = n.map_or(1000, |n| n as usize)))?,
    )?;
    table.raw_set(
        "decode_max_depth",
        lua.create_function(set(|s, n| s.decode_depth = n.map_or(1000, |n| n as usize)))?,
    )?;
    table.raw_set(
        "encode_invalid_numbers",
        lua.create_function(set(|s, n| s.invalid_numbers = n.unwrap_or(0.0) != 0.0))?,
    )?;
    Ok(table)
}

/// How deeply `json` nests (a scalar: 0).
fn depth(json: &serde_json::Value) -> usize {
    match json {
        serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(fields) => 1 + fields.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// lua-cjson's `encode`: a table whose keys are 1..n is an array, any other an object;
/// numbers as `%.14g`.
fn encode(value: &Value, (depth, settings): (usize, Settings), out: &mut Vec<u8>) -> Result<()> {
    if matches!(value, Value::Table(_)) && depth >= settings.encode_depth.min(128) {
        return Err(mlua::Error::runtime(format!("Cannot serialise, excessive nesting ({})", depth + 1)));
    }
    match value {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(data) if data.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(truth) => out.extend_from_slice(if *truth { b"true" } else { b"false" }),
        Value::Integer(number) => out.extend_from_slice(number.to_string().as_bytes()),
        Value::Number(number) if !number.is_finite() && settings.invalid_numbers => {
            out.extend_from_slice(if number.is_nan() {
                b"nan"
            } else if *number > 0.0 {
                b"inf"
            } else {
                b"-inf"
            })
        }
        Value::Number(number) => out.extend_from_slice(g14(*number)?.as_bytes()),
        Value::String(text) => string(&text.as_bytes(), out),
        Value::Table(table) => {
            let pairs: Vec<(Value, Value)> = table.pairs::<Value, Value>().collect::<Result<_>>()?;
            let length = table.raw_len();
            if length == pairs.len() && length > 0 {
                out.push(b'[');
                for index in 1..=length {
                    if index > 1 {
                        out.push(b',');
                    }
                    encode(&table.raw_get::<Value>(index)?, (depth + 1, settings), out)?;
                }
                out.push(b']');
            } else {
                out.push(b'{');
                for (at, (key, value)) in pairs.iter().enumerate() {
                    if at > 0 {
                        out.push(b',');
                    }
                    match key {
                        Value::String(text) => string(&text.as_bytes(), out),
                        Value::Integer(number) => string(number.to_string().as_bytes(), out),
                        Value::Number(number) => string(g14(*number)?.as_bytes(), out),
                        _ => {
                            return Err(mlua::Error::runtime(
                                "Cannot serialise table: table key must be a number or string",
                            ))
                        }
                    }
                    out.push(b':');
                    encode(value, (depth + 1, settings), out)?;
                }
                out.push(b'}');
            }
        }
        other => {
            return Err(mlua::Error::runtime(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            )))
        }
    }
    Ok(())
}

/// `%.14g`, lua-cjson's number format (and Lua 5.1's own).
fn g14(number: f64) -> Result<String> {
    if !number.is_finite() {
        return Err(mlua::Error::runtime("Cannot serialise number: must not be NaN or Inf"));
    }
    if number == number.trunc() && number.abs() < 1e15 {
        return Ok(format!("{}", number as i64));
    }
    let scientific = format!("{number:.13e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let trim = |text: &str| text.trim_end_matches('0').trim_end_matches('.').to_string();
    if !(-4..14).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return Ok(format!("{}e{sign}{:02}", trim(mantissa), exponent.abs()));
    }
    Ok(trim(&format!("{number:.*}", (13 - exponent) as usize)))
}

/// A JSON string, escaped as lua-cjson escapes it (`/` too).
fn string(text: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &byte in text {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{byte:04x}").as_bytes()),
            _ => out.push(byte),
        }
    }
    out.push(b'"');
}

fn decode(lua: &Lua, json: &serde_json::Value) -> Result<Value> {
    Ok(match json {
        serde_json::Value::Null => null(),
        serde_json::Value::Bool(truth) => Value::Boolean(*truth),
        serde_json::Value::Number(number) => Value::Number(number.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(text) => Value::String(lua.create_string(text)?),
        serde_json::Value::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (at, item) in items.iter().enumerate() {
                table.raw_set(at + 1, decode(lua, item)?)?;
            }
            Value::Table(table)
        }
        serde_json::Value::Object(fields) => {
            let table = lua.create_table_with_capacity(0, fields.len())?;
            for (name, item) in fields {
                table.raw_set(name.as_str(), decode(lua, item)?)?;
            }
            Value::Table(table)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(code: &str) -> String {
        let lua = Lua::new();
        register(&lua).unwrap();
        let value: Value = lua.load(code).eval().unwrap();
        match value {
            Value::String(text) => text.to_string_lossy(),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn bit_is_luabitops() {
        assert_eq!(eval("return tostring(bit.band(7, 3))"), "3");
        assert_eq!(eval("return tostring(bit.bor(1, 2, 4))"), "7");
        assert_eq!(eval("return tostring(bit.bnot(0))"), "-1");
        assert_eq!(eval("return tostring(bit.lshift(1, 31))"), "-2147483648");
        assert_eq!(eval("return tostring(bit.rshift(-1, 28))"), "15");
        assert_eq!(eval("return tostring(bit.tobit(4294967297))"), "1");
        assert_eq!(eval("return bit.tohex(255)"), "000000ff");
        assert_eq!(eval("return bit.tohex(-1, -4)"), "FFFF");
    }

    #[test]
    fn cjson_encodes_and_decodes() {
        assert_eq!(eval("return cjson.encode({1, 2, 'a/b'})"), r#"[1,2,"a\/b"]"#);
        assert_eq!(eval("return cjson.encode({a = 1.5})"), r#"{"a":1.5}"#);
        assert_eq!(eval("return cjson.encode({})"), "{}");
        assert_eq!(eval("return cjson.decode('{\"a\":[1,2,null]}').a[2] .. ''"), "2");
        assert_eq!(eval("return tostring(cjson.decode('[null]')[1] == cjson.null)"), "true");
    }
}
