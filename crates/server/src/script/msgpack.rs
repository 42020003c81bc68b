//! `cmsgpack`, as redis-server 7.0 gives scripts (lua_cmsgpack 0.4): `pack` of Lua values
//! into MessagePack, and `unpack`, `unpack_one` and `unpack_limit` back. A table whose keys
//! are 1..n is an array, any other a map (in the order Lua's `next` walks it); tables nested
//! deeper than 16 are packed as nil; a number that is an integer is packed in the fewest
//! bytes, any other as a float when a float holds it exactly, else as a double.

use mlua::{Lua, MultiValue, Result, Table, Value, Variadic};

/// Tables nested deeper than this are packed as nil (lua_cmsgpack's LUACMSGPACK_MAX_NESTING).
const NESTING_MAX: usize = 16;

/// Registers `cmsgpack` as a global of `lua`.
pub(super) fn register(lua: &Lua) -> Result<()> {
    let table = lua.create_table()?;
    table.raw_set(
        "pack",
        lua.create_function(|lua, values: Variadic<Value>| {
            if values.is_empty() {
                return Err(mlua::Error::runtime("MessagePack pack needs input."));
            }
            let mut out = Vec::new();
            for value in values.iter() {
                pack(value, 0, &mut out)?;
            }
            lua.create_string(&out)
        })?,
    )?;
    table.raw_set(
        "unpack",
        lua.create_function(|lua, text: mlua::LuaString| unpack(lua, &text.as_bytes(), (0, 0), true))?,
    )?;
    table.raw_set(
        "unpack_one",
        lua.create_function(|lua, (text, offset): (mlua::LuaString, Option<i64>)| {
            unpack(lua, &text.as_bytes(), (1, offset.unwrap_or(0)), false)
        })?,
    )?;
    table.raw_set(
        "unpack_limit",
        lua.create_function(|lua, (text, limit, offset): (mlua::LuaString, i64, Option<i64>)| {
            unpack(lua, &text.as_bytes(), (limit, offset.unwrap_or(0)), false)
        })?,
    )?;
    lua.globals().raw_set("cmsgpack", table)
}

/// Packs one value at nesting `level`.
fn pack(value: &Value, level: usize, out: &mut Vec<u8>) -> Result<()> {
    match value {
        Value::Boolean(true) => out.push(0xc3),
        Value::Boolean(false) => out.push(0xc2),
        Value::Integer(n) => integer(*n, out),
        Value::Number(n) => number(*n, out),
        Value::String(text) => bytes(&text.as_bytes(), out),
        Value::Table(table) if level < NESTING_MAX => self::table(table, level, out)?,
        _ => out.push(0xc0),
    }
    Ok(())
}

/// A number: an integer where it is one (and fits 64 bits), else a float or a double.
fn number(n: f64, out: &mut Vec<u8>) {
    if n.fract() == 0.0 && n.is_finite() && n >= i64::MIN as f64 && n < 9.223_372_036_854_776e18 {
        return integer(n as i64, out);
    }
    if f64::from(n as f32) == n {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// An integer in the fewest bytes MessagePack has for it.
fn integer(n: i64, out: &mut Vec<u8>) {
    match n {
        0..=127 => out.push(n as u8),
        128..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
        0x100..=0xffff => {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        0x1_0000_0000.. => {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
        -32..=-1 => out.push(n as i8 as u8),
        -128..=-33 => out.extend_from_slice(&[0xd0, n as i8 as u8]),
        -32768..=-129 => {
            out.push(0xd1);
            out.extend_from_slice(&(n as i16).to_be_bytes());
        }
        -2_147_483_648..=-32769 => {
            out.push(0xd2);
            out.extend_from_slice(&(n as i32).to_be_bytes());
        }
        _ => {
            out.push(0xd3);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// A string (MessagePack's str types, as lua_cmsgpack writes every Lua string).
fn bytes(text: &[u8], out: &mut Vec<u8>) {
    let len = text.len();
    match len {
        0..=31 => out.push(0xa0 | len as u8),
        32..=0xff => out.extend_from_slice(&[0xd9, len as u8]),
        0x100..=0xffff => {
            out.push(0xda);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(0xdb);
            out.extend_from_slice(&(len as u32).to_be_bytes());
        }
    }
    out.extend_from_slice(text);
}

/// A table: an array when its keys are exactly 1..n, else a map.
fn table(table: &Table, level: usize, out: &mut Vec<u8>) -> Result<()> {
    let (mut count, mut max, mut array) = (0usize, 0f64, true);
    for pair in table.pairs::<Value, Value>() {
        let (key, _) = pair?;
        count += 1;
        let index = match key {
            Value::Integer(n) => n as f64,
            Value::Number(n) => n,
            _ => -1.0,
        };
        if index > 0.0 && index.fract() == 0.0 {
            max = f64::max(max, index);
        } else {
            array = false;
        }
    }
    if array && max == count as f64 {
        head(count, (0x90, 0xdc, 0xdd), out);
        for index in 1..=count {
            pack(&table.raw_get::<Value>(index)?, level + 1, out)?;
        }
        return Ok(());
    }
    head(count, (0x80, 0xde, 0xdf), out);
    for pair in table.pairs::<Value, Value>() {
        let (key, value) = pair?;
        pack(&key, level + 1, out)?;
        pack(&value, level + 1, out)?;
    }
    Ok(())
}

/// An array's or a map's head: its fix form, 16-bit or 32-bit count.
fn head(count: usize, (fix, short, long): (u8, u8, u8), out: &mut Vec<u8>) {
    if count <= 15 {
        out.push(fix | count as u8);
    } else if count <= 0xffff {
        out.push(short);
        out.extend_from_slice(&(count as u16).to_be_bytes());
    } else {
        out.push(long);
        out.extend_from_slice(&(count as u32).to_be_bytes());
    }
}

/// Up to `limit` values (0: all) from `offset` on; unless `all`, the offset after them comes
/// first (-1 at the end of the input).
fn unpack(lua: &Lua, text: &[u8], (limit, offset): (i64, i64), all: bool) -> Result<MultiValue> {
    if offset < 0 || limit < 0 {
        return Err(mlua::Error::runtime(format!(
            "Invalid request to unpack with offset of {offset} and limit of {limit}."
        )));
    }
    if offset as usize > text.len() {
        return Err(mlua::Error::runtime(format!(
            "Start offset {offset} greater than input length {}.",
            text.len()
        )));
    }
    let limit = if limit == 0 { usize::MAX } else { limit as usize };
    let mut cursor = Cursor { text, at: offset as usize };
    let mut values = Vec::new();
    while cursor.at < text.len() && values.len() < limit {
        values.push(cursor.value(lua)?);
    }
    if !all {
        let next = if cursor.at == text.len() { -1 } else { cursor.at as i64 };
        values.insert(0, Value::Integer(next));
    }
    Ok(values.into_iter().collect())
}

/// Where unpacking is in its input.
struct Cursor<'t> {
    text: &'t [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, len: usize) -> Result<&[u8]> {
        let bytes = self
            .text
            .get(self.at..self.at + len)
            .ok_or_else(|| mlua::Error::runtime("Missing bytes in input."))?;
        self.at += len;
        Ok(bytes)
    }

    fn uint(&mut self, len: usize) -> Result<u64> {
        Ok(self.take(len)?.iter().fold(0u64, |n, &byte| n << 8 | u64::from(byte)))
    }

    fn value(&mut self, lua: &Lua) -> Result<Value> {
        let kind = self.take(1)?[0];
        let number = |n: f64| Value::Number(n);
        Ok(match kind {
            0x00..=0x7f => number(f64::from(kind)),
            0xe0..=0xff => number(f64::from(kind as i8)),
            0xcc => number(self.uint(1)? as f64),
            0xcd => number(self.uint(2)? as f64),
            0xce => number(self.uint(4)? as f64),
            0xcf => number(self.uint(8)? as f64),
            0xd0 => number(f64::from(self.uint(1)? as u8 as i8)),
            0xd1 => number(f64::from(self.uint(2)? as u16 as i16)),
            0xd2 => number(f64::from(self.uint(4)? as u32 as i32)),
            0xd3 => number(self.uint(8)? as i64 as f64),
            0xc0 => Value::Nil,
            0xc2 => Value::Boolean(false),
            0xc3 => Value::Boolean(true),
            0xca => number(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => number(f64::from_bits(self.uint(8)?)),
            0xa0..=0xbf => self.string(lua, usize::from(kind & 0x1f))?,
            0xd9 | 0xc4 => self.sized_string(lua, 1)?,
            0xda | 0xc5 => self.sized_string(lua, 2)?,
            0xdb | 0xc6 => self.sized_string(lua, 4)?,
            0x90..=0x9f => self.array(lua, usize::from(kind & 0x0f))?,
            0xdc => self.sized(lua, 2, Self::array)?,
            0xdd => self.sized(lua, 4, Self::array)?,
            0x80..=0x8f => self.map(lua, usize::from(kind & 0x0f))?,
            0xde => self.sized(lua, 2, Self::map)?,
            0xdf => self.sized(lua, 4, Self::map)?,
            _ => return Err(mlua::Error::runtime("Bad data format in input.")),
        })
    }

    fn string(&mut self, lua: &Lua, len: usize) -> Result<Value> {
        let bytes = self.take(len)?;
        Ok(Value::String(lua.create_string(bytes)?))
    }

    fn sized_string(&mut self, lua: &Lua, width: usize) -> Result<Value> {
        let len = self.uint(width)? as usize;
        self.string(lua, len)
    }

    fn sized(
        &mut self,
        lua: &Lua,
        width: usize,
        read: fn(&mut Self, &Lua, usize) -> Result<Value>,
    ) -> Result<Value> {
        let count = self.uint(width)? as usize;
        read(self, lua, count)
    }

    fn array(&mut self, lua: &Lua, count: usize) -> Result<Value> {
        let table = lua.create_table()?;
        for index in 1..=count {
            table.raw_set(index, self.value(lua)?)?;
        }
        Ok(Value::Table(table))
    }

    fn map(&mut self, lua: &Lua, count: usize) -> Result<Value> {
        let table = lua.create_table()?;
        for _ in 0..count {
            let key = self.value(lua)?;
            let value = self.value(lua)?;
            if !key.is_nil() {
                table.raw_set(key, value)?;
            }
        }
        Ok(Value::Table(table))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(code: &str) -> String {
        let lua = Lua::new();
        register(&lua).expect("registered");
        let packed: mlua::LuaString = lua.load(code).eval().expect("runs");
        packed.as_bytes().iter().map(|byte| format!("{byte:02x}")).collect()
    }

    #[test]
    fn packs_as_lua_cmsgpack() {
        assert_eq!(hex("return cmsgpack.pack(0.1)"), "cb3fb999999999999a");
        assert_eq!(hex("return cmsgpack.pack(-1099511627776)"), "d3ffffff0000000000");
        assert_eq!(hex("return cmsgpack.pack(1, -1, 200, -200, 1.5)"), "01ffccc8d1ff38ca3fc00000");
        assert_eq!(hex("return cmsgpack.pack({1, 2}, {a = true}, 'hi', nil)"), "92010281a161c3a26869c0");
    }

    #[test]
    fn unpacks_what_it_packs() {
        let lua = Lua::new();
        register(&lua).expect("registered");
        let code = "local t = cmsgpack.unpack(cmsgpack.pack({x = {1, 'two', false}, y = 2.5}))
            local o, v = cmsgpack.unpack_one(cmsgpack.pack(7, 8), 0)
            local o2, w = cmsgpack.unpack_limit(cmsgpack.pack(7, 8), 1, o)
            return t.x[2] .. t.y .. tostring(t.x[3]) .. o .. v .. o2 .. w";
        let out: String = lua.load(code).eval().expect("runs");
        assert_eq!(out, "two2.5false17-18");
        let bad: mlua::Result<Value> = lua.load("return cmsgpack.unpack('\\193')").eval();
        assert!(bad.unwrap_err().to_string().contains("Bad data format in input."));
    }
}
