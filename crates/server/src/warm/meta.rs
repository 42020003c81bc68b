//! The text a warm reads and writes: `lru_crawler metadump` lines from the source, `mg`
//! requests to it and their `VA`/`EN` replies, and `ms ... ME` (add) requests to this node. The
//! source may be memcached (1.6 and later) or quicksilver: both speak these.

use base64::Engine as _;

/// One item a metadump lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its key, decoded.
    pub key: Box<[u8]>,
    /// Its last access, unix seconds (`la=`).
    pub last_access: u32,
    /// Whether it was read since it was stored (`fetch=yes`).
    pub fetched: bool,
    /// Its size as the source counts it (`size=`: key, value and overhead).
    pub size: u32,
}

/// Parses one metadump line (without its line end). `None` for a line that lists no item, and
/// for an item that expires within `margin` seconds of `now` (unix seconds).
pub fn dump_line(line: &[u8], now: u32, margin: u32) -> Option<Listed> {
    let mut key = None;
    let (mut last_access, mut fetched, mut size, mut expires) = (0, false, 0, -1i64);
    for field in line.split(|&byte| byte == b' ').filter(|field| !field.is_empty()) {
        let eq = field.iter().position(|&byte| byte == b'=')?;
        let (name, value) = (&field[..eq], &field[eq + 1..]);
        match name {
            b"key" => key = Some(uri_decode(value)?),
            b"exp" => expires = number(value)?,
            b"la" => last_access = u32::try_from(number(value)?).ok()?,
            b"fetch" => fetched = value == b"yes",
            b"size" => size = u32::try_from(number(value)?).ok()?,
            _ => {}
        }
    }
    if expires >= 0 && expires <= i64::from(now) + i64::from(margin) {
        return None;
    }
    let key = key.filter(|key| !key.is_empty())?;
    Some(Listed { key: key.into_boxed_slice(), last_access, fetched, size })
}

/// A decimal number, possibly negative.
fn number(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// memcached's URI encoding undone: `%XX` is the byte XX, anything else itself.
pub fn uri_decode(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut at = 0;
    while at < text.len() {
        if text[at] == b'%' {
            let hex = std::str::from_utf8(text.get(at + 1..at + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            at += 3;
        } else {
            out.push(text[at]);
            at += 1;
        }
    }
    Some(out)
}

/// Writes `key` as a meta command's key token: as it is where a text line can carry it, else
/// in base64, which the command's `b` flag must then announce (memcached's rule for binary
/// keys); the flag to add, if any.
fn push_key(out: &mut Vec<u8>, key: &[u8]) -> &'static [u8] {
    if key.len() <= qs_proto::KEY_BYTES_MAX && key.iter().all(|&byte| byte > b' ' && byte != 0x7f) {
        out.extend_from_slice(key);
        b""
    } else {
        out.extend_from_slice(base64::engine::general_purpose::STANDARD.encode(key).as_bytes());
        b" b"
    }
}

/// Whether a meta command can name `key`: as it is, or in base64 within 250 bytes.
pub fn askable(key: &[u8]) -> bool {
    let plain = key.len() <= qs_proto::KEY_BYTES_MAX && key.iter().all(|&byte| byte > b' ' && byte != 0x7f);
    plain || key.len().div_ceil(3) * 4 <= qs_proto::KEY_BYTES_MAX
}

/// `mg <key> v f t`: the value, its flags and its remaining TTL.
pub fn push_get(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"mg ");
    let base64 = push_key(out, key);
    out.extend_from_slice(base64);
    out.extend_from_slice(b" v f t\r\n");
}

/// The line of `ms <key> <len> F<flags> T<exptime> ME`, to be followed by the value and
/// `\r\n`: stored only if absent (memcached's add), so an item a client stored here first is
/// kept. `ttl` is the seconds left (`None`: never expires); past memcached's 30 days an exptime
/// is a unix time, so a longer one is sent as `now` plus it.
pub fn push_add_line(out: &mut Vec<u8>, key: &[u8], len: usize, flags: u32, (ttl, now): (Option<u32>, u32)) {
    use std::io::Write;
    let exptime = match ttl {
        None => 0,
        Some(secs) if i64::from(secs) > qs_store::item::RELATIVE_EXPTIME_SECS_MAX => now.saturating_add(secs),
        Some(secs) => secs,
    };
    out.extend_from_slice(b"ms ");
    let base64 = push_key(out, key);
    let _ = write!(out, " {len}");
    out.extend_from_slice(base64);
    let _ = write!(out, " F{flags} T{exptime} ME\r\n");
}

/// What an `mg <key> v f t` reply line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// `VA <len> f<flags> t<ttl>`: `len` bytes of value follow, then `\r\n`. `ttl` is `None`
    /// for an item that never expires (`t-1`).
    Value { len: usize, flags: u32, ttl: Option<u32> },
    /// `EN`: the source no longer has it.
    Miss,
}

/// Parses an `mg` reply line (without its line end); the error names what came instead.
pub fn get_head(line: &[u8]) -> Result<Head, String> {
    if line == b"EN" {
        return Ok(Head::Miss);
    }
    let bad = || format!("unexpected reply to mg: {:?}", String::from_utf8_lossy(line));
    let rest = line.strip_prefix(b"VA ").ok_or_else(bad)?;
    let mut tokens = rest.split(|&byte| byte == b' ').filter(|token| !token.is_empty());
    let len = tokens.next().and_then(number).and_then(|len| usize::try_from(len).ok()).ok_or_else(bad)?;
    let (mut flags, mut ttl) = (0, None);
    for token in tokens {
        match token.split_first() {
            Some((b'f', value)) => {
                flags = number(value).and_then(|f| u32::try_from(f).ok()).ok_or_else(bad)?
            }
            Some((b't', value)) => {
                let seconds = number(value).ok_or_else(bad)?;
                ttl = (seconds >= 0).then_some(u32::try_from(seconds).unwrap_or(u32::MAX));
            }
            _ => {}
        }
    }
    Ok(Head::Value { len, flags, ttl })
}

/// What an `ms ... ME` reply line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreReply {
    /// `HD`: stored.
    Stored,
    /// `NS`: this node holds the key already (a client stored it since: theirs stays).
    Present,
    /// `SERVER_ERROR`: out of memory, too large.
    Refused,
}

/// Parses an `ms` reply line (without its line end); any reply but these means the requests
/// and replies are no longer in step, and the error says what came.
pub fn store_reply(line: &[u8]) -> Result<StoreReply, String> {
    match line {
        b"HD" => Ok(StoreReply::Stored),
        b"NS" => Ok(StoreReply::Present),
        _ if line.starts_with(b"SERVER_ERROR ") => Ok(StoreReply::Refused),
        _ => Err(format!("unexpected reply to ms: {:?}", String::from_utf8_lossy(line))),
    }
}

/// The order to copy in: the most recently read first (MICA's and memcached's LRU alike keep
/// those), items read since they were stored before those never read, then by key so the
/// order is one.
pub fn hottest_first(items: &mut [Listed]) {
    items.sort_unstable_by(|a, b| {
        b.last_access.cmp(&a.last_access).then(b.fetched.cmp(&a.fetched)).then_with(|| a.key.cmp(&b.key))
    });
}

/// How many of `items` (hottest first) fit in `capacity` bytes, as the source counts sizes.
pub fn fitting(items: &[Listed], capacity: u64) -> usize {
    let mut total = 0u64;
    items
        .iter()
        .take_while(|item| {
            total += u64::from(item.size);
            total <= capacity
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn dump_lines_of_memcached_and_quicksilver_parse() {
        // memcached 1.6.18 (no flags field) and 1.6.24 on (flags, a trailing space).
        let old = b"key=a%2Fb exp=-1 la=1700000000 cas=4 fetch=no cls=1 size=70";
        let new = b"key=k exp=1700000100 la=1700000050 cas=9 fetch=yes cls=1 size=80 flags=5 ";
        assert_eq!(
            dump_line(old, 1_700_000_000, 2),
            Some(Listed { key: b"a/b"[..].into(), last_access: 1_700_000_000, fetched: false, size: 70 })
        );
        assert_eq!(
            dump_line(new, 1_700_000_000, 2),
            Some(Listed { key: b"k"[..].into(), last_access: 1_700_000_050, fetched: true, size: 80 })
        );
        // About to expire, or no item at all.
        assert_eq!(dump_line(new, 1_700_000_099, 2), None);
        assert_eq!(dump_line(b"END", 0, 0), None);
        assert_eq!(dump_line(b"key=%zz exp=-1 la=1 size=1", 0, 0), None);
    }

    #[test]
    fn keys_a_text_line_cannot_carry_go_in_base64() {
        let mut out = Vec::new();
        push_get(&mut out, b"plain:key");
        push_get(&mut out, b"has space");
        assert_eq!(out, b"mg plain:key v f t\r\nmg aGFzIHNwYWNl b v f t\r\n");
        let mut out = Vec::new();
        push_add_line(&mut out, b"k", 5, 7, (None, 1_700_000_000));
        push_add_line(&mut out, b"k", 5, 0, (Some(60), 1_700_000_000));
        push_add_line(&mut out, b"k", 5, 0, (Some(40 * 86_400), 1_700_000_000));
        push_add_line(&mut out, b"a b", 1, 0, (None, 0));
        let want =
            "ms k 5 F7 T0 ME\r\nms k 5 F0 T60 ME\r\nms k 5 F0 T1703456000 ME\r\nms YSBi 1 b F0 T0 ME\r\n";
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }

    #[test]
    fn get_replies_parse() {
        assert_eq!(get_head(b"EN"), Ok(Head::Miss));
        assert_eq!(get_head(b"VA 5 f7 t-1"), Ok(Head::Value { len: 5, flags: 7, ttl: None }));
        assert_eq!(get_head(b"VA 0 t30 f0"), Ok(Head::Value { len: 0, flags: 0, ttl: Some(30) }));
        assert!(get_head(b"SERVER_ERROR out of memory").is_err());
        assert!(get_head(b"VA x f1").is_err());
        assert_eq!(store_reply(b"HD"), Ok(StoreReply::Stored));
        assert_eq!(store_reply(b"NS"), Ok(StoreReply::Present));
        assert_eq!(store_reply(b"SERVER_ERROR out of memory storing object"), Ok(StoreReply::Refused));
        assert!(store_reply(b"CLIENT_ERROR bad command line format").is_err());
        assert!(store_reply(b"ERROR").is_err());
    }

    #[test]
    fn the_hottest_that_fit_are_chosen() {
        let item =
            |key: &[u8], last_access, fetched| Listed { key: key.into(), last_access, fetched, size: 100 };
        let mut items = vec![item(b"old", 10, true), item(b"new", 30, false), item(b"read", 30, true)];
        hottest_first(&mut items);
        let keys: Vec<&[u8]> = items.iter().map(|item| &item.key[..]).collect();
        assert_eq!(keys, [&b"read"[..], b"new", b"old"]);
        assert_eq!(fitting(&items, 250), 2);
        assert_eq!(fitting(&items, 300), 3);
        assert_eq!(fitting(&items, 99), 0);
    }

    proptest! {
        /// Any key survives memcached's URI encoding (quicksilver's metadump writes it) and the
        /// meta key token (base64 where needed).
        #[test]
        fn any_key_comes_back_from_a_dump_line(key in proptest::collection::vec(any::<u8>(), 1..250)) {
            let mut line = Vec::new();
            qs_proto::response::metadump_line(&mut line, &qs_proto::response::DumpItem {
                key: &key, expires: None, last_access: 5, cas: 1, fetched: true, size: 9, flags: 0,
            });
            let listed = dump_line(line.trim_ascii_end(), 0, 0).expect("a listed item");
            prop_assert_eq!(&listed.key[..], &key[..]);
            let mut request = Vec::new();
            push_get(&mut request, &key);
            // The tokens after `mg`: the key, then `b` only where the key went in base64 (a
            // plain key `b` is followed by `v`, so the flag is told by its place, not its text).
            let tokens: Vec<&[u8]> = request[3..].trim_ascii_end().split(|&b| b == b' ').collect();
            let token = tokens[0].to_vec();
            let decoded = if tokens[1] == b"b" {
                base64::engine::general_purpose::STANDARD.decode(&token).unwrap()
            } else {
                token
            };
            prop_assert_eq!(decoded, key);
        }
    }
}
