//! Numbers as memcached's `safe_strto*` helpers read them (util.c): C's strtol/strtoul with
//! base 10, then memcached's own end and sign checks. Their quirks are part of the protocol
//! (a 64-bit value where 32 bits are expected is truncated, not refused), so they are kept.

/// C `isspace`.
fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// What C's `strtoull`/`strtoll` see in `text`: the sign, the digits' value (`None` on
/// overflow of 64 bits) and whether any digit was read. Trailing bytes must be the end or a
/// space (memcached's check), else `None` is returned for the whole parse.
#[derive(Debug, PartialEq, Eq)]
struct Scanned {
    negative: bool,
    magnitude: Option<u64>,
}

fn scan(text: &[u8]) -> Option<Scanned> {
    // The usual number (flags, exptime, length): a few plain digits, nothing to skip, no
    // overflow possible in 18 of them.
    if !text.is_empty() && text.len() <= 18 && text.iter().all(u8::is_ascii_digit) {
        let magnitude = text.iter().fold(0u64, |value, &digit| value * 10 + u64::from(digit - b'0'));
        return Some(Scanned { negative: false, magnitude: Some(magnitude) });
    }
    scan_any(text)
}

/// [`scan`] for any text: spaces, signs, overflow.
fn scan_any(text: &[u8]) -> Option<Scanned> {
    let mut at = text.iter().position(|&byte| !is_c_space(byte))?;
    let negative = match text[at] {
        b'-' => {
            at += 1;
            true
        }
        b'+' => {
            at += 1;
            false
        }
        _ => false,
    };
    let digits_start = at;
    let mut magnitude = Some(0u64);
    while let Some(&byte) = text.get(at) {
        if !byte.is_ascii_digit() {
            break;
        }
        magnitude =
            magnitude.and_then(|m| m.checked_mul(10)).and_then(|m| m.checked_add((byte - b'0') as u64));
        at += 1;
    }
    if at == digits_start {
        return None;
    }
    match text.get(at) {
        None => Some(Scanned { negative, magnitude }),
        Some(&byte) if is_c_space(byte) => Some(Scanned { negative, magnitude }),
        Some(_) => None,
    }
}

/// `safe_strtoull`: an unsigned 64-bit decimal. A minus sign is refused unless the value,
/// negated, still looks non-negative as a signed number (so `-0` passes, as in memcached).
pub fn strtoull(text: &[u8]) -> Option<u64> {
    let scanned = scan(text)?;
    let magnitude = scanned.magnitude?;
    let value = if scanned.negative { magnitude.wrapping_neg() } else { magnitude };
    if (value as i64) < 0 && text.contains(&b'-') {
        return None;
    }
    Some(value)
}

/// `safe_strtoul` on a 64-bit platform: as [`strtoull`], then truncated to 32 bits (memcached
/// stores the `unsigned long` into a `uint32_t`).
pub fn strtoul(text: &[u8]) -> Option<u32> {
    strtoull(text).map(|value| value as u32)
}

/// `safe_strtol`: a signed decimal read as a 64-bit `long` (refused on overflow), then
/// truncated to 32 bits.
pub fn strtol(text: &[u8]) -> Option<i32> {
    let scanned = scan(text)?;
    let magnitude = scanned.magnitude?;
    let value: i64 = if scanned.negative {
        if magnitude > 1 << 63 {
            return None;
        }
        (magnitude as i64).wrapping_neg()
    } else {
        i64::try_from(magnitude).ok()?
    };
    Some(value as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn plain_digits_scan_as_the_full_scanner_reads_them(text in "[0-9]{1,25}|[0-9 +-]{0,6}") {
            proptest::prop_assert_eq!(scan(text.as_bytes()), scan_any(text.as_bytes()));
        }
    }

    #[test]
    fn unsigned_64() {
        assert_eq!(strtoull(b"0"), Some(0));
        assert_eq!(strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(strtoull(b"18446744073709551616"), None);
        assert_eq!(strtoull(b"-1"), None);
        assert_eq!(strtoull(b"-0"), Some(0));
        assert_eq!(strtoull(b"+5"), Some(5));
        assert_eq!(strtoull(b"12abc"), None);
        assert_eq!(strtoull(b""), None);
        assert_eq!(strtoull(b"abc"), None);
    }

    #[test]
    fn unsigned_32_truncates_like_memcached() {
        assert_eq!(strtoul(b"4294967296"), Some(0));
        assert_eq!(strtoul(b"4294967295"), Some(u32::MAX));
        assert_eq!(strtoul(b"-1"), None);
    }

    #[test]
    fn signed_32_truncates_like_memcached() {
        assert_eq!(strtol(b"-1"), Some(-1));
        assert_eq!(strtol(b"99999999999"), Some(99999999999i64 as i32));
        assert_eq!(strtol(b"9223372036854775808"), None);
        assert_eq!(strtol(b"-9223372036854775808"), Some(0));
        assert_eq!(strtol(b"x"), None);
    }
}

/// memcached 1.6.40's token reader (mcmc `mcmc_toktou64`): decimal digits only, at most 22 of
/// them, no sign or space; nothing at all (a missing token, a flag letter alone) does not read.
pub fn token_u64(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 22 {
        return None;
    }
    text.iter().try_fold(0u64, |sum, &byte| {
        let digit = byte.checked_sub(b'0').filter(|digit| *digit < 10)?;
        sum.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// `mcmc_toktou32`: as [`token_u64`], at most 11 characters, within 32 bits.
pub fn token_u32(text: &[u8]) -> Option<u32> {
    if text.len() > 11 {
        return None;
    }
    token_u64(text).and_then(|value| u32::try_from(value).ok())
}

/// `mcmc_tokto32`: as [`token_u32`] with an optional leading `-`, within a signed 32 bits.
pub fn token_i32(text: &[u8]) -> Option<i32> {
    if text.len() > 11 {
        return None;
    }
    match text.strip_prefix(b"-") {
        // mcmc reads a lone `-` as 0.
        Some(b"") => Some(0),
        Some(digits) => token_u64(digits).and_then(|value| i32::try_from(-(value as i64)).ok()),
        None => token_u64(text).and_then(|value| i32::try_from(value).ok()),
    }
}

#[cfg(test)]
mod token_tests {
    use super::*;

    #[test]
    fn tokens_read_as_memcached_1_6_40_reads_them() {
        assert_eq!(token_u64(b""), None);
        assert_eq!(token_u64(b"007"), Some(7));
        assert_eq!(token_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(token_u64(b"18446744073709551616"), None);
        assert_eq!(token_u64(b"+1"), None);
        assert_eq!(token_u64(b"-1"), None);
        assert_eq!(token_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(token_u32(b"4294967301"), None);
        assert_eq!(token_u32(b"000000000001"), None);
        assert_eq!(token_i32(b"-2147483648"), Some(i32::MIN));
        assert_eq!(token_i32(b"2147483648"), None);
        assert_eq!(token_i32(b"-"), Some(0));
        assert_eq!(token_i32(b"1x"), None);
    }
}
