//! Replies, byte for byte as memcached 1.6 writes them.

use crate::out::append;
use crate::request::Meta;

/// `STORED`.
pub const STORED: &[u8] = b"STORED\r\n";
/// `NOT_STORED`.
pub const NOT_STORED: &[u8] = b"NOT_STORED\r\n";
/// `EXISTS`.
pub const EXISTS: &[u8] = b"EXISTS\r\n";
/// `NOT_FOUND`.
pub const NOT_FOUND: &[u8] = b"NOT_FOUND\r\n";
/// `DELETED`.
pub const DELETED: &[u8] = b"DELETED\r\n";
/// `TOUCHED`.
pub const TOUCHED: &[u8] = b"TOUCHED\r\n";
/// `END`.
pub const END: &[u8] = b"END\r\n";
/// `OK`.
pub const OK: &[u8] = b"OK\r\n";
/// `ERROR`.
pub const ERROR: &[u8] = b"ERROR\r\n";
/// The reply to a store whose item exceeds the item size limit.
pub const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
/// The reply to a store that finds no memory (store mode).
pub const OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";
/// memcached's reply when incr/decr cannot allocate the longer number (store mode, full).
pub const ARITH_OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory\r\n";
/// incr/decr on a value that is not a number.
pub const NON_NUMERIC: &[u8] = b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
/// A key longer than allowed, or otherwise malformed.
pub const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";

/// Appends `value` in decimal.
#[inline(always)]
pub fn push_u64(out: &mut Vec<u8>, value: u64) {
    // Flags are usually 0 and most values' lengths a few digits: those skip the formatter
    // (and the copy of its digits, a call where these are a store or two).
    let digit = |of: u64| b'0' + (of % 10) as u8;
    if value < 10 {
        out.push(b'0' + value as u8);
    } else if value < 100 {
        append(out, &[digit(value / 10), digit(value)]);
    } else if value < 10_000 {
        let (high, low) = (value / 100, value % 100);
        if high < 10 {
            append(out, &[digit(high), digit(low / 10), digit(low)]);
        } else {
            append(out, &[digit(high / 10), digit(high), digit(low / 10), digit(low)]);
        }
    } else {
        // The formatter's two-digit table beats digits by hand here (59 against 33 a get of
        // a 16 KiB value, callgrind).
        append(out, itoa::Buffer::new().format(value).as_bytes());
    }
}

/// Appends `value` in decimal.
#[inline]
pub fn push_i64(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Appends `bytes` URI-encoded as memcached's `uriencode` does: letters, digits and `-._~`
/// stay, every other byte becomes `%XX` (upper-case hex).
pub fn push_uri_encoded(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &byte in bytes {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 15)]]);
        }
    }
}

/// One item of `lru_crawler metadump`, as memcached 1.6 lists it.
#[derive(Clone, Copy, Debug)]
pub struct DumpItem<'a> {
    /// The key (any bytes; written URI-encoded).
    pub key: &'a [u8],
    /// Unix second it expires at, `None` for never (`exp=-1`).
    pub expires: Option<u32>,
    /// Unix second of its last access.
    pub last_access: u32,
    /// CAS unique.
    pub cas: u64,
    /// Fetched since it was stored.
    pub fetched: bool,
    /// Size in memory.
    pub size: u64,
    /// Client flags.
    pub flags: u32,
}

/// `key=<key> exp=<unix|-1> la=<unix> cas=<cas> fetch=<yes|no> cls=1 size=<bytes>\n` (the dump's
/// lines end in a bare newline in memcached 1.6; only the closing `END` has `\r\n`).
pub fn metadump_line(out: &mut Vec<u8>, item: &DumpItem<'_>) {
    out.extend_from_slice(b"key=");
    push_uri_encoded(out, item.key);
    out.extend_from_slice(b" exp=");
    match item.expires {
        Some(unix) => push_u64(out, u64::from(unix)),
        None => out.extend_from_slice(b"-1"),
    }
    out.extend_from_slice(b" la=");
    push_u64(out, u64::from(item.last_access));
    out.extend_from_slice(b" cas=");
    push_u64(out, item.cas);
    out.extend_from_slice(if item.fetched { b" fetch=yes" } else { b" fetch=no" });
    out.extend_from_slice(b" cls=1 size=");
    push_u64(out, item.size);
    // memcached 1.6.24 adds the flags, and ends every field with a space.
    out.extend_from_slice(b" flags=");
    push_u64(out, u64::from(item.flags));
    out.extend_from_slice(b" \n");
}

/// `lru_crawler mgdump`'s line: `mg <key>\r\n`, or `mg <base64> b\r\n` for a key that a
/// text line cannot carry (memcached marks the keys clients sent in base64; every key
/// here with a space, a control byte or DEL is written so).
pub fn mgdump_line(out: &mut Vec<u8>, key: &[u8]) {
    use base64::Engine;
    out.extend_from_slice(b"mg ");
    if key.iter().all(|&byte| byte > b' ' && byte != 0x7f) {
        out.extend_from_slice(key);
        out.extend_from_slice(b"\r\n");
    } else {
        out.extend_from_slice(base64::engine::general_purpose::STANDARD.encode(key).as_bytes());
        out.extend_from_slice(b" b\r\n");
    }
}

/// `VALUE <key> <flags> <bytes>[ <cas>]\r\n`; the caller appends the data and `\r\n`.
#[inline]
pub fn value_line(out: &mut Vec<u8>, key: &[u8], flags: u32, value_len: usize, cas: Option<u64>) {
    // One reservation up front, so the pushes below never reallocate.
    out.reserve(b"VALUE ".len() + key.len() + 3 * 21 + 2);
    append(out, b"VALUE ");
    append(out, key);
    out.push(b' ');
    push_u64(out, flags as u64);
    out.push(b' ');
    push_u64(out, value_len as u64);
    if let Some(cas) = cas {
        out.push(b' ');
        push_u64(out, cas);
    }
    append(out, b"\r\n");
}

/// What a meta reply may report about an item.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetaItem {
    /// CAS unique.
    pub cas: u64,
    /// Client flags.
    pub flags: u32,
    /// Value bytes.
    pub value_len: usize,
    /// Remaining TTL in seconds, -1 for none.
    pub ttl_secs: i64,
    /// Seconds since the last access before this request.
    pub idle_secs: u32,
    /// Fetched before this request.
    pub fetched_before: bool,
}

/// Appends the return flags of `meta`, in request order: `O` and `k` always, the item's
/// figures (`c f s t l h`) when `item` is known. `letters` limits which item figures this
/// command reports.
pub fn meta_flags(out: &mut Vec<u8>, meta: &Meta<'_>, item: Option<&MetaItem>, letters: &[u8]) {
    for token in meta.flag_tokens() {
        let letter = token[0];
        match letter {
            b'O' => {
                out.push(b' ');
                out.extend_from_slice(token);
            }
            b'k' => {
                out.extend_from_slice(b" k");
                out.extend_from_slice(meta.key_token);
                if meta.options.base64() {
                    out.extend_from_slice(b" b");
                }
            }
            _ => {
                let Some(item) = item.filter(|_| letters.contains(&letter)) else {
                    continue;
                };
                out.push(b' ');
                out.push(letter);
                match letter {
                    b'c' => push_u64(out, item.cas),
                    b'f' => push_u64(out, item.flags as u64),
                    b's' => push_u64(out, item.value_len as u64),
                    b't' => push_i64(out, item.ttl_secs),
                    b'l' => push_u64(out, item.idle_secs as u64),
                    b'h' => out.push(if item.fetched_before { b'1' } else { b'0' }),
                    _ => unreachable!("letters lists only item figures"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn numbers_are_written_in_decimal(
            value in prop_oneof![0u64..20, 90u64..110, 990u64..1010, 9990u64..10_010, 99_990u64..100_010, any::<u64>()],
        ) {
            let mut out = b"x".to_vec();
            push_u64(&mut out, value);
            prop_assert_eq!(out, format!("x{value}").into_bytes());
        }

        #[test]
        fn value_lines_are_memcached_s(
            key in proptest::collection::vec(33u8..127, 1..250),
            flags: u32,
            value_len in prop_oneof![0usize..20_000, any::<usize>()],
            cas: Option<u64>,
        ) {
            let mut out = b"before".to_vec();
            value_line(&mut out, &key, flags, value_len, cas);
            let key = String::from_utf8(key).unwrap();
            let cas = cas.map_or(String::new(), |cas| format!(" {cas}"));
            prop_assert_eq!(String::from_utf8(out).unwrap(), format!("beforeVALUE {key} {flags} {value_len}{cas}\r\n"));
        }
    }

    #[test]
    fn metadump_lines_are_memcached_s() {
        let mut out = Vec::new();
        let item = DumpItem {
            key: "a/b:c?d=e&f+g\"'<>\u{e9} ~._-%".as_bytes(),
            expires: None,
            last_access: 1_795_386_087,
            cas: 4,
            fetched: false,
            size: 79,
            flags: 5,
        };
        metadump_line(&mut out, &item);
        metadump_line(
            &mut out,
            &DumpItem { key: b"\0\x01\xff", expires: Some(1_795_386_187), fetched: true, ..item },
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "key=a%2Fb%3Ac%3Fd%3De%26f%2Bg%22%27%3C%3E%C3%A9%20~._-%25 exp=-1 la=1795386087 cas=4 fetch=no cls=1 size=79 flags=5 \n\
             key=%00%01%FF exp=1795386187 la=1795386087 cas=4 fetch=yes cls=1 size=79 flags=5 \n"
        );
    }
}
