//! memcached's tokenizer: a command line split on single spaces (runs of spaces give no empty
//! tokens), at most `TOKENS_MAX - 1` real tokens; what follows them is left unread (memcached's
//! terminal token), which makes a command with too many arguments fail its token-count check.

/// memcached's MAX_TOKENS, counting its terminal empty token: 23 real tokens at most.
pub const TOKENS_MAX: usize = 24;

/// Enough tokens for every command but a get, gat or stats with many arguments: a line with
/// no more than `SHORT - 1` tokens is split without setting up memcached's full 24.
pub const SHORT: usize = 8;

/// The tokens of one line, borrowed from it: at most `N - 1` read (memcached's split with
/// `N` as its MAX_TOKENS).
#[derive(Clone, Copy)]
pub struct Tokens<'a, const N: usize = TOKENS_MAX> {
    items: [&'a [u8]; N],
    len: usize,
    /// Whether bytes followed the last token read.
    more: bool,
}

impl<'a, const N: usize> Tokens<'a, N> {
    /// Splits `line` (without its line ending).
    pub fn split(line: &'a [u8]) -> Tokens<'a, N> {
        let mut items: [&'a [u8]; N] = [&[]; N];
        let mut len = 0;
        let mut at = 0;
        // Index scans: tokens are short, and a plain loop beats memchr's vector set-up (and
        // the slice-pattern form of this loop compiled to twice the instructions).
        loop {
            while at < line.len() && line[at] == b' ' {
                at += 1;
            }
            if at == line.len() {
                return Tokens { items, len, more: false };
            }
            if len == N - 1 {
                return Tokens { items, len, more: true };
            }
            let start = at;
            while at < line.len() && line[at] != b' ' {
                at += 1;
            }
            items[len] = &line[start..at];
            len += 1;
        }
    }

    /// Real tokens (memcached's `ntokens` is this plus one).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the line had more tokens than were read.
    pub fn has_more(&self) -> bool {
        self.more
    }

    /// Whether the line had no tokens.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Token `index`, or empty past the end.
    pub fn get(&self, index: usize) -> &'a [u8] {
        self.items[index]
    }

    /// All tokens.
    pub fn as_slice(&self) -> &[&'a [u8]] {
        &self.items[..self.len]
    }

    /// Whether the last token is `noreply` (memcached's `set_noreply_maybe`).
    pub fn noreply(&self) -> bool {
        self.len > 0 && self.items[self.len - 1] == b"noreply"
    }
}

/// Whether `line` holds a space, asked a word at a time ([`qs_store::keyhash::holds_byte`]):
/// a get's line of one key, the common one, is a few dozen bytes with none.
#[inline(always)]
pub fn has_space(line: &[u8]) -> bool {
    qs_store::keyhash::holds_byte(line, b' ')
}

/// The only token of `line`, if it has exactly one (the common single-key get), found
/// without the iterator machinery of [`words`].
pub fn single_word(line: &[u8]) -> Option<&[u8]> {
    let start = line.iter().position(|&byte| byte != b' ')?;
    let rest = &line[start..];
    let end = rest.iter().position(|&byte| byte == b' ').unwrap_or(rest.len());
    rest[end..].iter().all(|&byte| byte == b' ').then_some(&rest[..end])
}

/// A guess at the key of the text or meta request at the start of `buf` ([`crate::key_guess`]
/// for either protocol), made without parsing it: the second word of its first line, where every single-key text and meta command but
/// `gat`/`gats` keeps its key (`get k`, `set k 0 0 1`, `mg k v`, ...). For prefetching only:
/// a wrong guess costs one wasted memory load, never a wrong answer, so the command is not
/// checked. `None` when the line does not have a whole second word within a key's length.
pub fn key_guess(buf: &[u8]) -> Option<&[u8]> {
    // The longest command word is 9 bytes (`verbosity`), the longest key 250.
    let head = &buf[..buf.len().min(10 + crate::KEY_BYTES_MAX + 1)];
    let command_end = head.iter().position(|&byte| byte == b' ')?;
    let rest = &head[command_end + 1..];
    let end = rest.iter().position(|&byte| matches!(byte, b' ' | b'\r' | b'\n'))?;
    (end > 0).then_some(&rest[..end])
}

/// Iterates the space-separated tokens of `line` without any count limit (for multi-key gets).
pub fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&byte| byte == b' ').filter(|word| !word.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_space_is_found_wherever_it_is() {
        for len in 0..40 {
            let line = vec![b'k'; len];
            assert!(!has_space(&line));
            for at in 0..len {
                let mut spaced = line.clone();
                spaced[at] = b' ';
                assert!(has_space(&spaced), "{len} {at}");
            }
        }
        // Bytes that borrow into their neighbours: 0x21 is a space plus one, 0xa0 with its top bit.
        assert!(!has_space(b"\x21\xa0\x21\xa0\x21\xa0\x21\xa0\x21"));
    }

    #[test]
    fn a_single_word_is_found_only_when_alone() {
        assert_eq!(single_word(b"  key  "), Some(&b"key"[..]));
        assert_eq!(single_word(b"key"), Some(&b"key"[..]));
        assert_eq!(single_word(b"a b"), None);
        assert_eq!(single_word(b"   "), None);
        assert_eq!(single_word(b""), None);
        assert_eq!(single_word(b"a\tb"), Some(&b"a\tb"[..]));
    }

    #[test]
    fn the_key_guess_is_the_second_word_of_a_whole_line() {
        assert_eq!(key_guess(b"get foo\r\n"), Some(&b"foo"[..]));
        assert_eq!(key_guess(b"set foo 0 0 1\r\nx\r\n"), Some(&b"foo"[..]));
        assert_eq!(key_guess(b"mg foo v\r\n"), Some(&b"foo"[..]));
        assert_eq!(key_guess(b"get foo\n"), Some(&b"foo"[..]));
        // Not yet known: the key may go on in the next read.
        assert_eq!(key_guess(b"get fo"), None);
        assert_eq!(key_guess(b"get"), None);
        assert_eq!(key_guess(b"get  foo\r\n"), None);
        assert_eq!(key_guess(b""), None);
        let long = [b"get ".to_vec(), vec![b'k'; 300], b"\r\n".to_vec()].concat();
        assert_eq!(key_guess(&long), None);
        let longest = [b"get ".to_vec(), vec![b'k'; 250], b"\r\n".to_vec()].concat();
        assert_eq!(key_guess(&longest).map(<[u8]>::len), Some(250));
    }

    #[test]
    fn splits_on_spaces_only() {
        let tokens = Tokens::<TOKENS_MAX>::split(b"get  a\tb   c ");
        assert_eq!(tokens.as_slice(), &[&b"get"[..], b"a\tb", b"c"]);
    }

    proptest::proptest! {
        /// A short split that read the whole line agrees with memcached's full split.
        #[test]
        fn a_short_split_that_read_everything_is_the_full_split(
            line in proptest::collection::vec(proptest::sample::select(b"ab  \t".to_vec()), 0..40),
        ) {
            let short = Tokens::<SHORT>::split(&line);
            let full = Tokens::<TOKENS_MAX>::split(&line);
            if !short.has_more() {
                proptest::prop_assert_eq!(short.as_slice(), full.as_slice());
                proptest::prop_assert!(!full.has_more());
            } else {
                proptest::prop_assert!(full.len() >= SHORT);
            }
        }
    }

    #[test]
    fn reading_stops_after_23_tokens() {
        let line: Vec<u8> = (0..30).flat_map(|i| format!("t{i} ").into_bytes()).collect();
        let tokens = Tokens::<TOKENS_MAX>::split(&line);
        assert_eq!(tokens.len(), TOKENS_MAX - 1);
        assert_eq!(tokens.get(TOKENS_MAX - 2), b"t22");
        assert!(tokens.has_more());
        assert!(!Tokens::<TOKENS_MAX>::split(b"a b").has_more());
    }
}
