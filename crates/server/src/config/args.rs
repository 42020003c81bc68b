//! memcached's argument syntaxes: sizes, counts, numbers as strtol and atoi read them, and
//! the messages memcached gives for each.

/// memcached's -I syntax: bytes, or a number with a k or m suffix.
pub(super) fn parse_size(text: &str) -> Result<usize, String> {
    let lower = text.to_ascii_lowercase();
    let (digits, unit) = match lower.as_bytes().last() {
        Some(b'k') => (&lower[..lower.len() - 1], 1 << 10),
        Some(b'm') => (&lower[..lower.len() - 1], 1 << 20),
        _ => (&lower[..], 1),
    };
    let value: usize = digits.parse().map_err(|_| format!("not a size: {text}"))?;
    // The bounds are checked with memcached's messages in `Config::validate`.
    value.checked_mul(unit).ok_or_else(|| "Cannot set item size limit higher than a gigabyte.".into())
}

/// memcached's -t: a positive count.
pub(super) fn parse_threads(text: &str) -> Result<usize, String> {
    match atoi(text) {
        n if n > 0 => Ok(n as usize),
        _ => Err("Number of threads must be greater than 0".into()),
    }
}

/// memcached's -R: a positive count.
pub(super) fn parse_reqs_per_event(text: &str) -> Result<u32, String> {
    match atoi(text) {
        n if n > 0 => Ok(n.min(i64::from(u32::MAX)) as u32),
        _ => Err("Number of requests per event must be greater than 0".into()),
    }
}

/// memcached's -D: one character.
pub(super) fn parse_delimiter(text: &str) -> Result<u8, String> {
    match text.as_bytes() {
        [byte] => Ok(*byte),
        _ => Err("-D takes a single character".into()),
    }
}

/// memcached's safe_strtol: the whole argument is a number (spaces around allowed).
pub(super) fn strtol(text: &str) -> Option<i64> {
    text.trim().parse().ok()
}

/// C's atoi: an optional sign and the digits after leading spaces, 0 when there are none.
pub(super) fn atoi(text: &str) -> i64 {
    let text = text.trim_start();
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let value = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |value, digit| value.saturating_mul(10).saturating_add(i64::from(digit - b'0')));
    if negative {
        -value
    } else {
        value
    }
}

/// A number argument, with memcached's messages for a missing or unreadable one.
pub(super) fn number(name: &str, value: Option<&str>) -> Result<u32, String> {
    let value = value.ok_or_else(|| format!("Missing {name} argument"))?;
    value.trim().parse::<u32>().map_err(|_| format!("could not parse argument to {name}"))
}

/// A number of kilobytes, in bytes.
pub(super) fn kilobytes(name: &str, value: Option<&str>) -> Result<usize, String> {
    number(name, value).map(|kb| kb as usize * 1024)
}

/// A text argument (memcached's TLS options).
pub(super) fn text(name: &str, value: Option<&str>) -> Result<String, String> {
    value.map(str::to_string).ok_or_else(|| format!("Missing {name} argument"))
}

/// A signed number, read as strtol reads it.
pub(super) fn signed(name: &str, value: Option<&str>) -> Result<i64, String> {
    strtol(&text(name, value)?).ok_or_else(|| format!("could not parse argument to {name}"))
}

/// A choice of `0..=max`.
pub(super) fn choice(name: &str, value: Option<&str>, max: u8) -> Result<u8, String> {
    u8::try_from(signed(name, value)?)
        .ok()
        .filter(|choice| *choice <= max)
        .ok_or_else(|| format!("Invalid {name}. Use help to see valid options."))
}

/// An octal permission mask such as 700 or 0766.
pub(super) fn parse_octal(text: &str) -> Result<u32, String> {
    u32::from_str_radix(text, 8)
        .ok()
        .filter(|mask| *mask <= 0o777)
        .ok_or_else(|| format!("{text:?} is not an octal permission mask (e.g. 700)"))
}
