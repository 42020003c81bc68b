//! Glob patterns as redis-server's `stringmatchlen` reads them (KEYS, SCAN's MATCH, CONFIG GET):
//! `*` any run, `?` one byte, `[abc]`, `[^abc]` and `[a-z]` one byte of (or not of) a set,
//! `\x` the byte x. Matched with one backtracking point, the last `*` (every other token takes
//! exactly one byte), so time is at most pattern times name, whatever the pattern.

/// Whether `name` matches `pattern` (`nocase`: ASCII letters match either case).
pub fn matches(pattern: &[u8], name: &[u8], nocase: bool) -> bool {
    let (mut p, mut n) = (0, 0);
    // Where the last `*` was, and the name's byte it stands at now.
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
            continue;
        }
        if n == name.len() {
            // What is left of the pattern must be stars.
            return pattern[p..].iter().all(|&byte| byte == b'*');
        }
        match one(pattern, p, name[n], nocase) {
            Some((true, next)) => (p, n) = (next, n + 1),
            _ => match star {
                // The last star takes one byte more.
                Some((star_p, star_n)) => {
                    (p, n) = (star_p + 1, star_n + 1);
                    star = Some((star_p, star_n + 1));
                }
                None => return false,
            },
        }
    }
}

/// Whether the token at `pattern[p..]` (not a `*`) matches `byte`, and where the next token
/// starts; `None` at the pattern's end.
fn one(pattern: &[u8], p: usize, byte: u8, nocase: bool) -> Option<(bool, usize)> {
    let same = |a: u8, b: u8| if nocase { a.eq_ignore_ascii_case(&b) } else { a == b };
    match *pattern.get(p)? {
        b'?' => Some((true, p + 1)),
        b'[' => Some(class(pattern, p + 1, byte, nocase)),
        b'\\' if p + 1 < pattern.len() => Some((same(pattern[p + 1], byte), p + 2)),
        literal => Some((same(literal, byte), p + 1)),
    }
}

/// A `[...]` set starting at `pattern[p..]` (after its `[`): whether `byte` is in it (or, with
/// `^`, not), and where the pattern goes on (after its `]`, or at its end if it has none).
fn class(pattern: &[u8], mut p: usize, byte: u8, nocase: bool) -> (bool, usize) {
    let fold = |c: u8| if nocase { c.to_ascii_lowercase() } else { c };
    let not = pattern.get(p) == Some(&b'^');
    if not {
        p += 1;
    }
    let mut found = false;
    while p < pattern.len() && pattern[p] != b']' {
        if pattern[p] == b'\\' && p + 1 < pattern.len() {
            found |= pattern[p + 1] == byte;
            p += 2;
        } else if p + 2 < pattern.len() && pattern[p + 1] == b'-' {
            let (low, high) = (fold(pattern[p].min(pattern[p + 2])), fold(pattern[p].max(pattern[p + 2])));
            found |= (low..=high).contains(&fold(byte));
            p += 3;
        } else {
            found |= fold(pattern[p]) == fold(byte);
            p += 1;
        }
    }
    (found != not, (p + 1).min(pattern.len()))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn patterns_match_as_redis_servers_stringmatch_does() {
        let yes = |pattern: &str, name: &str| matches(pattern.as_bytes(), name.as_bytes(), false);
        assert!(yes("*", ""));
        assert!(yes("foo*", "foobar"));
        assert!(!yes("foo*", "fo"));
        assert!(yes("h?llo", "hello"));
        assert!(yes("h[ae]llo", "hallo"));
        assert!(!yes("h[ae]llo", "hillo"));
        assert!(yes("h[^e]llo", "hallo"));
        assert!(!yes("h[^e]llo", "hello"));
        assert!(yes("h[a-b]llo", "hbllo"));
        assert!(yes("h[b-a]llo", "hallo"), "a reversed range is the same range");
        assert!(yes("h\\*llo", "h*llo"));
        assert!(!yes("h\\*llo", "hello"));
        assert!(yes("*a*b*c", "xxaxxbxxc"));
        assert!(!yes("*a*b*c", "xxaxxbxx"));
        assert!(yes("key:[0-9]*", "key:1234"));
        assert!(!yes("FOO*", "foobar"), "case counts");
        assert!(matches(b"FOO*", b"foobar", true));
        // A long run of stars stays linear.
        let stars = vec![b'*'; 10_000];
        assert!(!matches(&[&stars[..], b"q"].concat(), b"maxmemory-policy", false));
    }
}
