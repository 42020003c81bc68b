//! The meta commands' replies to what the executor did ([`crate::command::Answer::Meta`]): a
//! status code, then the return flags in the order the request gave them.

use crate::command::Created;
use crate::response::{self as reply, meta_flags, MetaItem};
use crate::Meta;
use qs_store::{Expiry, Hit, Now, Outcome};

/// Remaining seconds of an expiry, -1 for none (`t`).
pub fn ttl_secs(expiry: Expiry, now: Now) -> i64 {
    if expiry == Expiry::NEVER {
        -1
    } else {
        (i64::from(expiry.secs()) - i64::from(now.secs())).max(0)
    }
}

/// The expiry `t` reports: memcached applies N (only to an item this request `created`) and
/// T in the order the request lists them, starting from `start`, and `t` reads it where the
/// `t` flag stands.
fn shown_expiry(meta: &Meta<'_>, start: Expiry, created: bool, now: Now) -> Expiry {
    let options = &meta.options;
    let mut expiry = start;
    let at = |ttl: Option<i32>, expiry| ttl.map_or(expiry, |ttl| Expiry::from_exptime(i64::from(ttl), now));
    for token in meta.flag_tokens() {
        match token[0] {
            b'N' if created => expiry = at(options.vivify, expiry),
            b'T' => expiry = at(options.ttl, expiry),
            b't' => return expiry,
            _ => {}
        }
    }
    expiry
}

/// A code and the flags that reflect only the request (`O`, `k`), as a miss or a failure
/// reports them.
fn bare(meta: &Meta<'_>, code: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(code);
    meta_flags(out, meta, None, b"");
    out.extend_from_slice(b"\r\n");
}

/// ms: `HD` (nothing with q), `NS`, `EX`, `NF`, with `c` and `s` (`size`: the item's size once
/// stored, appended data included), or a refusal for size or memory.
pub(crate) fn store(meta: &Meta<'_>, outcome: &Outcome, cas: u64, size: usize, out: &mut Vec<u8>) {
    let code: &[u8] = match outcome {
        Outcome::Stored { .. } if meta.options.quiet() => return,
        Outcome::Stored { .. } => b"HD",
        Outcome::NotStored => b"NS",
        Outcome::Exists => b"EX",
        Outcome::NotFound => b"NF",
        Outcome::TooLarge => return out.extend_from_slice(reply::TOO_LARGE),
        Outcome::OutOfMemory => return out.extend_from_slice(reply::OUT_OF_MEMORY),
        _ => return out.extend_from_slice(reply::BAD_FORMAT),
    };
    out.extend_from_slice(code);
    let item = MetaItem { cas, value_len: size, ..MetaItem::default() };
    meta_flags(out, meta, Some(&item), b"cs");
    out.extend_from_slice(b"\r\n");
}

/// md: `HD` (nothing with q), `EX` or `NF`.
pub(crate) fn delete(meta: &Meta<'_>, outcome: &Outcome, out: &mut Vec<u8>) {
    match outcome {
        Outcome::Deleted if meta.options.quiet() => {}
        Outcome::Deleted => bare(meta, b"HD", out),
        Outcome::Exists => bare(meta, b"EX", out),
        _ => bare(meta, b"NF", out),
    }
}

/// ma: the counter (`VA` with v, else `HD`; nothing with q) with `c` and `t`, or why not.
pub(crate) fn arith(
    meta: &Meta<'_>,
    (outcome, created): (&Outcome, Created),
    cas: u64,
    now: Now,
    out: &mut Vec<u8>,
) {
    if created == Created::NoMemory {
        return out.extend_from_slice(b"SERVER_ERROR Out of memory allocating new item\r\n");
    }
    let (value, expiry) = match *outcome {
        Outcome::Counter { value, expiry, .. } => (value, expiry),
        Outcome::NonNumeric => return out.extend_from_slice(reply::NON_NUMERIC),
        Outcome::OutOfMemory => return out.extend_from_slice(reply::ARITH_OUT_OF_MEMORY),
        Outcome::Exists => return bare(meta, b"EX", out),
        Outcome::NotStored => return bare(meta, b"NS", out),
        _ => return bare(meta, b"NF", out),
    };
    // memcached 1.6.40: q silences a counter created on a miss (N) too.
    if meta.options.quiet() {
        return;
    }
    // A created counter already has its final expiry; `t` reads it where the flag stands.
    let created = created == Created::Yes;
    let start = if created { Expiry::NEVER } else { expiry };
    let ttl_secs = ttl_secs(shown_expiry(meta, start, created, now), now);
    let mut digits = itoa::Buffer::new();
    let number = digits.format(value).as_bytes();
    let with_value = meta.options.has(b'v');
    if with_value {
        out.extend_from_slice(b"VA ");
        reply::push_u64(out, number.len() as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    let item = MetaItem { cas, ttl_secs, ..MetaItem::default() };
    meta_flags(out, meta, Some(&item), b"ct");
    out.extend_from_slice(b"\r\n");
    if with_value {
        out.extend_from_slice(number);
        out.extend_from_slice(b"\r\n");
    }
}

/// mg's hit, what goes before its value: `VA <len>` (v, unless its `C` names the version the
/// client has), else `HD`; the item's figures, then `Z` (a win token was already out), `X`
/// (stale) and `W` (this request won). Whether the value follows (then `\r\n` after it).
pub(crate) fn hit_head(meta: &Meta<'_>, hit: &Hit, cas: u64, now_secs: u32, out: &mut Vec<u8>) -> bool {
    // A meta request's times are memcached's, whole seconds (the reading sink keeps only the
    // second, which keeps it small enough to be moved without a call).
    let now = Now::from_secs(now_secs);
    let mut item = MetaItem {
        cas,
        flags: hit.flags,
        value_len: hit.value_len,
        ttl_secs: ttl_secs(hit.expiry, now),
        idle_secs: now.secs().saturating_sub(hit.last_access_secs),
        fetched_before: hit.fetched_before,
    };
    if meta.options.has(b't') && meta.options.ttl.is_some() {
        // `t` before `T` reads the expiry before the touch.
        item.ttl_secs = ttl_secs(shown_expiry(meta, hit.expiry_before, false, now), now);
    }
    found_head(meta, &item, (hit.won, hit.stale, hit.win_sent), out)
}

/// mg N's miss, which created an empty item and won the right to fill it.
pub(crate) fn vivified(meta: &Meta<'_>, cas: u64, now: Now, out: &mut Vec<u8>) {
    let ttl_secs = ttl_secs(shown_expiry(meta, Expiry::NEVER, true, now), now);
    let item = MetaItem { cas, ttl_secs, ..MetaItem::default() };
    if found_head(meta, &item, (true, false, false), out) {
        out.extend_from_slice(b"\r\n");
    }
}

/// A found item's line; whether its value follows it.
fn found_head(
    meta: &Meta<'_>,
    item: &MetaItem,
    (won, stale, win_sent): (bool, bool, bool),
    out: &mut Vec<u8>,
) -> bool {
    // memcached 1.6.40: a `C` that matches the item's CAS means the client has this version
    // already, so the value is not sent.
    let with_value = meta.options.has(b'v') && meta.options.cas != Some(item.cas);
    if with_value {
        out.extend_from_slice(b"VA ");
        reply::push_u64(out, item.value_len as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    meta_flags(out, meta, Some(item), b"cfstlh");
    for (set, flag) in [(win_sent, &b" Z"[..]), (stale, b" X"), (won, b" W")] {
        if set {
            out.extend_from_slice(flag);
        }
    }
    out.extend_from_slice(b"\r\n");
    with_value
}

/// mg's miss: `EN` with only the request's key (k) and opaque (O); nothing with q.
pub(crate) fn miss(meta: &Meta<'_>, out: &mut Vec<u8>) {
    if !meta.options.quiet() {
        bare(meta, b"EN", out);
    }
}

/// me: memcached's debug line for the item (`size`: its bytes as memcached counts them), or `EN`.
pub(crate) fn inspect(meta: &Meta<'_>, found: Option<(&Hit, u64, usize)>, now: Now, out: &mut Vec<u8>) {
    let Some((hit, cas, size)) = found else {
        return out.extend_from_slice(b"EN\r\n");
    };
    out.extend_from_slice(b"ME ");
    out.extend_from_slice(meta.key_token);
    out.extend_from_slice(b" exp=");
    reply::push_i64(out, ttl_secs(hit.expiry, now));
    out.extend_from_slice(b" la=");
    reply::push_u64(out, u64::from(now.secs().saturating_sub(hit.last_access_secs)));
    out.extend_from_slice(b" cas=");
    reply::push_u64(out, cas);
    out.extend_from_slice(if hit.fetched_before { b" fetch=yes" } else { b" fetch=no" });
    out.extend_from_slice(b" cls=1 size=");
    reply::push_u64(out, size as u64);
    out.extend_from_slice(b"\r\n");
}
