//! The log entry: a two-word header, an optional extension word, then key and value bytes,
//! padded to whole words.
//!
//! ```text
//! word 0  63      56 55      48  47  46                                          0
//!        +----------+----------+---+---------------------------------------------+
//!        |   bits   | key len  | P |         CAS sequence (per partition)        |
//!        +----------+----------+---+---------------------------------------------+
//! word 1  63                        32 31  28 27                                 0
//!        +----------------------------+------+-----------------------------------+
//!        |  last access (unix secs)   |slack |           value length            |
//!        +----------------------------+------+-----------------------------------+
//! ext     63                        32 31                                        0
//! (if    +----------------------------+------------------------------------------+
//!  EXT)  | expiry (unix secs, rounded |            client flags                 |
//!        |   up; 0 = never)           |                                         |
//!        +----------------------------+------------------------------------------+
//! (if P) |        expiry (unix milliseconds, when not a whole second)            |
//!        +-----------------------------------------------------------------------+
//! (long  |        key length (a key over 254 bytes: word 0's key len is 255)     |
//!  key)  +-----------------------------------------------------------------------+
//! then   key bytes, value bytes, zero padding to a word, `slack` spare words
//! ```
//! Flags and expiry are stored only when either is non-zero, so a tiny item (8-byte key, 8-byte
//! value) takes 32 bytes: 16 of header and 16 of data. An expiry that falls within a second
//! (Redis's PX, PEXPIREAT, and any relative Redis TTL) adds the precise word `P` marks; the
//! extension's whole seconds, rounded up, still tell the coarse readers (the crawler, the
//! flash tier's index) when it goes. `slack` keeps the item's initial size after an in-place
//! update that shrank it, so it may grow back in place.

/// Bytes in the fixed header.
pub const HEADER_BYTES: usize = 16;
/// Bytes of the optional flags/expiry extension.
pub const EXT_BYTES: usize = 8;
/// Bytes of the optional precise expiry after the extension (word 0's `P`).
pub const PRECISE_BYTES: usize = 8;
/// Bytes after the header of every item in store mode, which keeps both words on each so a
/// new expiry never moves one.
pub const STORE_EXT_BYTES: usize = EXT_BYTES + PRECISE_BYTES;
/// Longest key, as memcached (its protocols refuse longer ones before the store sees them).
pub const KEY_BYTES_MAX: usize = 250;
/// Longest key the store keeps: a Redis key of 64 KiB in its database (qs_proto::resp::db's
/// prefix) with room to spare. A key over [`SHORT_KEY_BYTES_MAX`] is a long key: word 0's key
/// length says [`KEY_LEN_LONG`] and a word after the extension holds its length.
pub const LONG_KEY_BYTES_MAX: usize = 64 * 1024 + 64;
/// Longest key whose length word 0 holds itself.
pub const SHORT_KEY_BYTES_MAX: usize = 254;
/// Word 0's key length of a long key.
pub const KEY_LEN_LONG: usize = 255;
/// Bytes of a long key's length word.
pub const LONG_KEY_WORD_BYTES: usize = 8;

/// Bytes a key of `key_len` adds before itself: its length word, if it is a long key.
#[inline(always)]
pub const fn long_key_bytes(key_len: usize) -> usize {
    if key_len > SHORT_KEY_BYTES_MAX {
        LONG_KEY_WORD_BYTES
    } else {
        0
    }
}
/// Longest value the header can describe.
pub const VALUE_BYTES_MAX: usize = (1 << VALUE_LEN_BITS) - 1;
/// Most spare words an item keeps after shrinking in place.
pub const SLACK_WORDS_MAX: usize = (1 << SLACK_BITS) - 1;
/// Bits of the per-partition CAS sequence.
pub const CAS_BITS: u32 = 47;

const VALUE_LEN_BITS: u32 = 28;
const SLACK_BITS: u32 = 4;
const PRECISE_BIT: u64 = 1 << CAS_BITS;
const CAS_MASK: u64 = (1 << CAS_BITS) - 1;

/// Header bit: the item is superseded (overwritten, deleted, re-appended or dropped by the
/// index); when the head passes it, it is not counted as an eviction.
pub const BIT_DEAD: u8 = 1 << 0;
/// Header bit: meta `md I` marked it stale; it answers with a new CAS and the X flag.
pub const BIT_STALE: u8 = 1 << 1;
/// Header bit: fetched at least once since stored (meta `h`, `evicted_unfetched`).
pub const BIT_FETCHED: u8 = 1 << 2;
/// Header bit: a win token (meta `W`) was handed out for it; later readers get `Z`.
pub const BIT_WIN_SENT: u8 = 1 << 3;
/// Header bit: the flags/expiry extension word follows the header.
pub const BIT_EXT: u8 = 1 << 4;
/// Header bit: not an item but padding to the end of the log's memory (padded wrap).
pub const BIT_PAD: u8 = 1 << 5;
/// Header bits 6-7: reads since the item was written or last kept at the head, up to
/// [`FREQ_MAX`] (the clock policy's counter, [`crate::Eviction::Clock`]).
pub const FREQ_BITS: u8 = 0b1100_0000;
/// The largest read count the header keeps.
pub const FREQ_MAX: u8 = 3;
const FREQ_SHIFT: u32 = 6;

/// Word 0 of a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Word0(pub u64);

impl Word0 {
    /// Packs the fields (a long key's length as [`KEY_LEN_LONG`]).
    pub const fn new(cas_seq: u64, key_len: usize, bits: u8) -> Word0 {
        let key_len = if key_len > SHORT_KEY_BYTES_MAX { KEY_LEN_LONG } else { key_len };
        Word0((cas_seq & CAS_MASK) | (key_len as u64) << 48 | (bits as u64) << 56)
    }
    /// A padding record.
    pub const PAD: Word0 = Word0((BIT_PAD as u64) << 56);
    /// The CAS sequence number.
    pub const fn cas_seq(self) -> u64 {
        self.0 & CAS_MASK
    }
    /// Key length in bytes, or [`KEY_LEN_LONG`] for a long key (whose length
    /// [`crate::log::Header::key_len`] reads).
    pub const fn key_len(self) -> usize {
        (self.0 >> 48) as u8 as usize
    }
    /// Whether the key is a long key (its length in a word of its own).
    pub const fn long_key(self) -> bool {
        self.key_len() == KEY_LEN_LONG
    }
    /// Header bits (`BIT_*`).
    pub const fn bits(self) -> u8 {
        (self.0 >> 56) as u8
    }
    /// This word with `bit` set.
    pub const fn with_bit(self, bit: u8) -> Word0 {
        Word0(self.0 | (bit as u64) << 56)
    }
    /// This word with `bit` cleared.
    pub const fn without_bit(self, bit: u8) -> Word0 {
        Word0(self.0 & !((bit as u64) << 56))
    }
    /// This word with a new CAS sequence.
    pub const fn with_cas_seq(self, cas_seq: u64) -> Word0 {
        Word0(self.0 & !CAS_MASK | cas_seq & CAS_MASK)
    }
    /// Whether `bit` is set.
    pub const fn has(self, bit: u8) -> bool {
        self.bits() & bit != 0
    }
    /// Whether the precise expiry word follows the extension (`P`).
    pub const fn precise(self) -> bool {
        self.0 & PRECISE_BIT != 0
    }
    /// This word saying whether the precise expiry word follows the extension.
    pub const fn with_precise(self, precise: bool) -> Word0 {
        Word0(self.0 & !PRECISE_BIT | if precise { PRECISE_BIT } else { 0 })
    }
    /// The clock policy's read count (0 to [`FREQ_MAX`]).
    pub const fn freq(self) -> u8 {
        (self.bits() & FREQ_BITS) >> FREQ_SHIFT
    }
    /// This word with the read count `freq` (at most [`FREQ_MAX`]).
    pub const fn with_freq(self, freq: u8) -> Word0 {
        let bits = self.bits() & !FREQ_BITS | ((if freq > FREQ_MAX { FREQ_MAX } else { freq }) << FREQ_SHIFT);
        Word0(self.0 & !(0xff << 56) | (bits as u64) << 56)
    }
}

/// Word 1 of a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Word1(pub u64);

impl Word1 {
    /// Packs the fields.
    pub const fn new(value_len: usize, slack_words: usize, last_access: u32) -> Word1 {
        Word1(value_len as u64 | (slack_words as u64) << VALUE_LEN_BITS | (last_access as u64) << 32)
    }
    /// Value length in bytes.
    pub const fn value_len(self) -> usize {
        (self.0 & ((1 << VALUE_LEN_BITS) - 1)) as usize
    }
    /// Spare words after the data.
    pub const fn slack_words(self) -> usize {
        ((self.0 >> VALUE_LEN_BITS) & ((1 << SLACK_BITS) - 1)) as usize
    }
    /// Last access, unix seconds.
    pub const fn last_access(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// This word with a new last access.
    pub const fn with_last_access(self, now_secs: u32) -> Word1 {
        Word1(self.0 & 0xFFFF_FFFF | (now_secs as u64) << 32)
    }
}

/// The extension: flags and expiry, in one word or, for an expiry within a second, two.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Ext {
    word: u64,
    /// The expiry in unix milliseconds when it is not a whole second, else 0.
    precise_ms: u64,
}

impl Ext {
    /// No flags, no expiry: an item without the extension.
    pub const NONE: Ext = Ext { word: 0, precise_ms: 0 };

    /// Packs the fields. An expiry that is not a whole second, or is past what the word's
    /// 32-bit seconds hold, is kept whole in the precise word.
    pub const fn new(flags: u32, expiry: Expiry) -> Ext {
        let precise_ms = if expiry.0 % 1000 != 0 || expiry.0 > u32::MAX as u64 * 1000 { expiry.0 } else { 0 };
        Ext { word: flags as u64 | (expiry.secs() as u64) << 32, precise_ms }
    }
    /// The extension as read from the log: its word and, if word 0 says one follows, the
    /// precise word (else 0).
    pub const fn from_words(word: u64, precise_word: u64) -> Ext {
        Ext { word, precise_ms: precise_word }
    }
    /// The extension word.
    pub const fn word(self) -> u64 {
        self.word
    }
    /// Whether the expiry needs the precise word.
    pub const fn is_precise(self) -> bool {
        self.precise_ms != 0
    }
    /// Bytes after the header: 0 for no flags and no expiry, else the extension word and the
    /// precise word if the expiry needs it.
    pub const fn bytes(self) -> usize {
        if self.precise_ms != 0 {
            EXT_BYTES + PRECISE_BYTES
        } else if self.word != 0 {
            EXT_BYTES
        } else {
            0
        }
    }
    /// memcached client flags.
    pub const fn flags(self) -> u32 {
        self.word as u32
    }
    /// Expiry.
    pub const fn expiry(self) -> Expiry {
        if self.precise_ms != 0 {
            Expiry(self.precise_ms)
        } else {
            Expiry::at_secs((self.word >> 32) as u32)
        }
    }
}

/// Bytes an item with these lengths occupies in the log, slack excluded; `ext_bytes` is
/// [`Ext::bytes`].
#[inline(always)]
pub const fn item_bytes(key_len: usize, value_len: usize, ext_bytes: usize) -> usize {
    HEADER_BYTES + ext_bytes + long_key_bytes(key_len) + (key_len + value_len).next_multiple_of(8)
}

/// Now, as the store reads it: one reading of the clock in unix seconds and milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    secs: u32,
    ms: u64,
}

impl Now {
    /// The start of unix second `secs`.
    pub const fn from_secs(secs: u32) -> Now {
        Now { secs, ms: secs as u64 * 1000 }
    }
    /// Unix millisecond `ms`.
    pub const fn from_ms(ms: u64) -> Now {
        let secs = ms / 1000;
        Now { secs: if secs > u32::MAX as u64 { u32::MAX } else { secs as u32 }, ms }
    }
    /// Unix seconds.
    #[inline(always)]
    pub const fn secs(self) -> u32 {
        self.secs
    }
    /// Unix milliseconds.
    #[inline(always)]
    pub const fn ms(self) -> u64 {
        self.ms
    }
}

/// When an item stops answering: 0 = never, otherwise the unix millisecond from which it is
/// expired. memcached's expiries are whole seconds; Redis's may fall within one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct Expiry(u64);

/// memcached's bound between relative and absolute exptimes: 30 days in seconds.
pub const RELATIVE_EXPTIME_SECS_MAX: i64 = 60 * 60 * 24 * 30;
/// From here up an exptime is a unix time in milliseconds: how Redis's deadlines reach the
/// store. memcached's exptimes are 32-bit, so none is read this way.
pub const MILLIS_EXPTIME_MIN: i64 = 1 << 32;

impl Expiry {
    /// Never expires.
    pub const NEVER: Expiry = Expiry(0);
    /// Already expired at any `now` after 1970-01-01T00:00:01.
    pub const PAST: Expiry = Expiry(1000);

    /// Expires at the start of unix second `secs` (0: never).
    pub const fn at_secs(secs: u32) -> Expiry {
        Expiry(secs as u64 * 1000)
    }
    /// Expires at unix millisecond `ms` (0: never): past 2106 too (Redis's EXPIREAT takes
    /// any time), where the items's precise word keeps it ([`Ext::new`]).
    pub const fn at_ms(ms: u64) -> Expiry {
        Expiry(ms)
    }
    /// The unix second it expires at, rounded up (0: never), as memcached's 32-bit times hold
    /// it: [`u32::MAX`] for any time after that second (February 2106).
    pub const fn secs(self) -> u32 {
        let secs = self.0.div_ceil(1000);
        if secs > u32::MAX as u64 {
            u32::MAX
        } else {
            secs as u32
        }
    }
    /// The unix millisecond it expires at (0: never).
    pub const fn ms(self) -> u64 {
        self.0
    }

    /// memcached's rules: 0 never; negative already expired; up to 30 days relative to now;
    /// beyond that an absolute unix time (in the past: already expired); from
    /// [`MILLIS_EXPTIME_MIN`] up, a unix time in milliseconds.
    pub fn from_exptime(exptime: i64, now: Now) -> Expiry {
        let now_secs = now.secs();
        if exptime == 0 {
            Expiry::NEVER
        } else if exptime < 0 {
            Expiry::PAST
        } else if exptime >= MILLIS_EXPTIME_MIN {
            if exptime as u64 <= now.ms() {
                Expiry::PAST
            } else {
                Expiry::at_ms(exptime as u64)
            }
        } else if exptime <= RELATIVE_EXPTIME_SECS_MAX {
            Expiry::at_secs(now_secs.saturating_add(exptime as u32))
        } else if exptime <= now_secs as i64 {
            Expiry::PAST
        } else {
            Expiry::at_secs(exptime.min(u32::MAX as i64) as u32)
        }
    }

    /// Whether the item no longer answers at `now`.
    #[inline(always)]
    pub const fn is_expired(self, now: Now) -> bool {
        self.0 != 0 && self.0 <= now.ms()
    }
}

/// Parses a stored value as Redis's INCRBY does (`string2ll`), trailing spaces (memcached's
/// decr pads a shorter number) aside. `None`: not a signed 64-bit integer.
pub fn parse_signed_counter(value: &[u8]) -> Option<i64> {
    let mut text = value;
    while let [rest @ .., b' '] = text {
        text = rest;
    }
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    // Redis's string2ll: `0` alone or digits without a leading zero, no sign but `-`.
    if digits.is_empty() || (digits[0] == b'0' && (negative || digits.len() > 1)) {
        return None;
    }
    digits.iter().try_fold(0i64, |value, &byte| {
        let digit = i64::from(byte.checked_sub(b'0').filter(|digit| *digit <= 9)?);
        let value = value.checked_mul(10)?;
        if negative {
            value.checked_sub(digit)
        } else {
            value.checked_add(digit)
        }
    })
}

/// Parses a stored value as memcached's incr/decr do (`safe_strtoull`): optional leading white
/// space, an optional sign, decimal digits that fit in 64 bits, then the end or white space.
/// A minus sign is accepted only for zero. `None` means "non-numeric value".
pub fn parse_counter(value: &[u8]) -> Option<u64> {
    let mut rest = value;
    while let [first, tail @ ..] = rest {
        if !first.is_ascii_whitespace() {
            break;
        }
        rest = tail;
    }
    let negative = match rest.first() {
        Some(b'-') => true,
        Some(b'+') => false,
        _ => {
            return parse_digits(rest);
        }
    };
    let number = parse_digits(&rest[1..])?;
    (!negative || number == 0).then_some(number)
}

fn parse_digits(text: &[u8]) -> Option<u64> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    if let Some(after) = text.get(digits) {
        if !after.is_ascii_whitespace() {
            return None;
        }
    }
    text[..digits].iter().try_fold(0u64, |n, d| n.checked_mul(10)?.checked_add((d - b'0') as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_words_round_trip() {
        let word0 = Word0::new(0x7FFF_FFFF_FFFF, 250, BIT_EXT | BIT_FETCHED);
        assert_eq!(word0.cas_seq(), 0x7FFF_FFFF_FFFF);
        assert!(!word0.precise() && word0.with_precise(true).precise());
        assert_eq!(word0.with_precise(true).with_cas_seq(5).cas_seq(), 5);
        assert!(word0.with_precise(true).with_cas_seq(5).with_bit(BIT_DEAD).precise());
        assert_eq!(word0.with_precise(true).key_len(), 250);
        assert_eq!(word0.key_len(), 250);
        assert!(word0.has(BIT_EXT) && word0.has(BIT_FETCHED) && !word0.has(BIT_DEAD));
        assert_eq!(word0.with_bit(BIT_DEAD).without_bit(BIT_DEAD), word0);
        assert_eq!(word0.with_cas_seq(5).cas_seq(), 5);
        assert_eq!(word0.with_cas_seq(5).key_len(), 250);
        let word1 = Word1::new(VALUE_BYTES_MAX, SLACK_WORDS_MAX, u32::MAX);
        assert_eq!(word1.value_len(), VALUE_BYTES_MAX);
        assert_eq!(word1.slack_words(), SLACK_WORDS_MAX);
        assert_eq!(word1.last_access(), u32::MAX);
        assert_eq!(word1.with_last_access(3).value_len(), VALUE_BYTES_MAX);
        let ext = Ext::new(0xDEAD_BEEF, Expiry::at_secs(77));
        assert_eq!((ext.flags(), ext.expiry(), ext.bytes()), (0xDEAD_BEEF, Expiry::at_secs(77), EXT_BYTES));
        assert!(Word0::PAD.has(BIT_PAD));
    }

    #[test]
    fn an_expiry_within_a_second_takes_the_precise_word() {
        let ext = Ext::new(7, Expiry::at_ms(1_700_000_000_250));
        assert!(ext.is_precise());
        assert_eq!(ext.bytes(), EXT_BYTES + PRECISE_BYTES);
        // The extension word keeps the second, rounded up, for the coarse readers.
        assert_eq!(ext.word() >> 32, 1_700_000_001);
        let read = Ext::from_words(ext.word(), 1_700_000_000_250);
        assert_eq!((read.flags(), read.expiry()), (7, Expiry::at_ms(1_700_000_000_250)));
        // A whole second needs no precise word; a precise word holding one reads the same.
        let whole = Ext::new(0, Expiry::at_ms(1_700_000_001_000));
        assert_eq!((whole.is_precise(), whole.bytes()), (false, EXT_BYTES));
        assert_eq!(Ext::from_words(whole.word(), 1_700_000_001_000).expiry(), whole.expiry());
        assert_eq!(Ext::from_words(whole.word(), 0).expiry(), whole.expiry());
        assert_eq!(Ext::new(0, Expiry::NEVER).bytes(), 0);
    }

    #[test]
    fn tiny_item_is_32_bytes() {
        assert_eq!(item_bytes(8, 8, 0), 32);
        assert_eq!(item_bytes(8, 8, EXT_BYTES), 40);
        assert_eq!(item_bytes(1, 0, 0), 24);
        assert_eq!(item_bytes(254, 2, 0), 16 + 256);
        assert_eq!(item_bytes(255, 1, 0), 16 + 8 + 256);
        assert_eq!(Word0::new(7, 300, BIT_EXT).key_len(), KEY_LEN_LONG);
        assert!(Word0::new(7, 300, BIT_EXT).long_key() && Word0::new(7, 300, BIT_EXT).has(BIT_EXT));
        assert_eq!(Word0::new(7, 300, BIT_EXT).cas_seq(), 7);
        assert_eq!(item_bytes(0, 0, 0), 16);
    }

    #[test]
    fn exptime_follows_memcached() {
        let secs = 1_700_000_000;
        let now = Now::from_secs(secs);
        assert_eq!(Expiry::from_exptime(0, now), Expiry::NEVER);
        assert!(Expiry::from_exptime(-1, now).is_expired(now));
        assert_eq!(Expiry::from_exptime(10, now), Expiry::at_secs(secs + 10));
        assert_eq!(Expiry::from_exptime(RELATIVE_EXPTIME_SECS_MAX, now).secs(), secs + 2_592_000);
        assert_eq!(Expiry::from_exptime(RELATIVE_EXPTIME_SECS_MAX + 1, now), Expiry::PAST);
        assert_eq!(Expiry::from_exptime(secs as i64 + 5, now), Expiry::at_secs(secs + 5));
        assert!(!Expiry::at_secs(secs + 1).is_expired(now));
        assert!(Expiry::at_secs(secs + 1).is_expired(Now::from_secs(secs + 1)));
        // Late in a second, a whole-second expiry is still a second away.
        assert!(!Expiry::at_secs(secs + 1).is_expired(Now::from_ms(u64::from(secs) * 1000 + 999)));
        assert!(!Expiry::NEVER.is_expired(Now::from_secs(u32::MAX)));
    }

    #[test]
    fn a_millisecond_exptime_expires_to_the_millisecond() {
        let now = Now::from_ms(1_700_000_000_400);
        let expiry = Expiry::from_exptime(1_700_000_000_500, now);
        assert_eq!((expiry.ms(), expiry.secs()), (1_700_000_000_500, 1_700_000_001));
        assert!(!expiry.is_expired(now));
        assert!(!expiry.is_expired(Now::from_ms(1_700_000_000_499)));
        assert!(expiry.is_expired(Now::from_ms(1_700_000_000_500)));
        assert_eq!(Expiry::from_exptime(1_700_000_000_400, now), Expiry::PAST);
        assert!(MILLIS_EXPTIME_MIN > i64::from(u32::MAX), "no memcached exptime reads as milliseconds");
        assert_eq!(Expiry::at_ms(u64::MAX).secs(), u32::MAX);
    }

    #[test]
    fn counters_parse_as_strtoull() {
        let cases: &[(&[u8], Option<u64>)] = &[
            (b"0", Some(0)),
            (b"42", Some(42)),
            (b"  7", Some(7)),
            (b"99 ", Some(99)),
            (b"+5", Some(5)),
            (b"-0", Some(0)),
            (b"-1", None),
            (b"18446744073709551615", Some(u64::MAX)),
            (b"18446744073709551616", None),
            (b"", None),
            (b"abc", None),
            (b"12abc", None),
            (b"12 abc", Some(12)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_counter(text), *expected, "{:?}", String::from_utf8_lossy(text));
        }
    }
}
