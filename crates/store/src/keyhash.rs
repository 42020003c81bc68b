//! The keyhash: one 64-bit xxh3 hash of the key, computed once per request, whose disjoint bit
//! ranges choose the partition, the bucket and the tag (a hash-tagged key's partition bits are
//! its tag's: [`KeyHash::of`]). This is the only place that says which
//! hash bits feed which decision.
//!
//! ```text
//!  63          64-P                      16+B            16 15             0
//! +--------------+---------- ... --------+---------------+----------------+
//! |  partition   |       (unused)        |    bucket     |      tag       |
//! |   P bits     |                       |    B bits     |    16 bits     |
//! +--------------+---------- ... --------+---------------+----------------+
//! ```
//! `P + B + 16 <= 64` is checked when a partition is configured. The tag takes the low 15 of
//! its 16 bits: the top bit of a slot's tag says the item is on flash ([`FLASH_TAG`]), so a
//! DRAM lookup's tag compare never matches a flash slot.

/// Bits of the keyhash reserved for the tag.
pub const TAG_BITS: u32 = 16;
/// A slot's tag with this bit set points at the flash tier, not the DRAM log.
pub const FLASH_TAG: u16 = 0x8000;

/// The most partition bits a server uses (4,096 partitions).
pub const PARTITION_BITS_MAX: u32 = 12;
/// The bits of a tagged key's hash taken from its tag's: the partition's, never a bucket's
/// (buckets would need more than 2^36 of them to reach these bits).
const TAGGED_BITS: u64 = !(u64::MAX >> PARTITION_BITS_MAX);

/// A key's hash tag as Redis Cluster reads one: the bytes between its first `{` and the
/// first `}` after it, if there are any.
#[inline(always)]
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = find_open_brace(key)?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&byte| byte == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// Where the first `{` of `key` is. The whole key is looked at on every request (a key is at
/// most 250 bytes, most are a few dozen, and most have no brace), so whether it has one is
/// asked by [`holds_byte`]; only a key that has one is searched byte by byte.
#[inline(always)]
fn find_open_brace(key: &[u8]) -> Option<usize> {
    if !holds_byte(key, b'{') {
        return None;
    }
    key.iter().position(|&byte| byte == b'{')
}

/// Whether `bytes` holds `byte` (not 0), asked eight bytes a step with no branch but the
/// loop's, the last step the last eight bytes (a library `memchr` spends more setting up than
/// this spends on a key or a short line). The codecs ask it too (a get's line for a space).
#[inline(always)]
pub fn holds_byte(bytes: &[u8], byte: u8) -> bool {
    let found = if bytes.len() < 8 {
        let mut word = [0u8; 8];
        word[..bytes.len()].copy_from_slice(bytes);
        byte_in(word, byte)
    } else {
        let last = bytes.len() - 8;
        let mut found = byte_in(eight(bytes, last), byte);
        let mut at = 0;
        while at < last {
            found |= byte_in(eight(bytes, at), byte);
            at += 8;
        }
        found
    };
    found != 0
}

/// The eight bytes of `bytes` from `at` (`at + 8 <= bytes.len()`).
#[inline(always)]
fn eight(bytes: &[u8], at: usize) -> [u8; 8] {
    bytes[at..at + 8].try_into().unwrap_or_default()
}

/// Non-zero when these eight bytes hold `byte` (a zero byte, padding, is never one): the
/// classic test for a zero byte, on the bytes XORed with `byte`.
#[inline(always)]
fn byte_in(bytes: [u8; 8], byte: u8) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let word = u64::from_le_bytes(bytes) ^ (ONES * byte as u64);
    word.wrapping_sub(ONES) & !word & HIGHS
}

/// A key's 64-bit hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyHash(pub u64);

impl KeyHash {
    /// Hashes `key` with xxh3-64; a key with a hash tag (Redis Cluster's `{...}`:
    /// [`hash_tag`]) takes its top [`PARTITION_BITS_MAX`] bits from the tag's hash instead, so
    /// keys sharing a tag share a partition (and a worker: a write of several of them runs on
    /// one) while their buckets and tags stay the keys' own.
    #[inline(always)]
    pub fn of(key: &[u8]) -> KeyHash {
        let hash = xxhash_rust::xxh3::xxh3_64(key);
        match find_open_brace(key) {
            None => KeyHash(hash),
            Some(_) => KeyHash::tagged(key, hash),
        }
    }

    /// [`KeyHash::of`] for a key with a `{`: kept out of the common path.
    #[cold]
    #[inline(never)]
    fn tagged(key: &[u8], hash: u64) -> KeyHash {
        match hash_tag(key) {
            None => KeyHash(hash),
            Some(tag) => KeyHash(xxhash_rust::xxh3::xxh3_64(tag) & TAGGED_BITS | hash & !TAGGED_BITS),
        }
    }

    /// The partition among `1 << partition_bits`.
    #[inline(always)]
    pub const fn partition(self, partition_bits: u32) -> usize {
        if partition_bits == 0 {
            0
        } else {
            (self.0 >> (64 - partition_bits)) as usize
        }
    }

    /// The bucket among `bucket_mask + 1` (a power of two).
    #[inline(always)]
    pub const fn bucket(self, bucket_mask: usize) -> usize {
        (self.0 >> TAG_BITS) as usize & bucket_mask
    }

    /// The tag: 15 bits, never 0 (an empty slot), never with [`FLASH_TAG`].
    #[inline(always)]
    pub const fn tag(self) -> u16 {
        let tag = self.0 as u16 & !FLASH_TAG;
        if tag == 0 {
            1
        } else {
            tag
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_ranges_are_disjoint() {
        let hash = KeyHash(0xABCD_0000_0012_3456);
        assert_eq!(hash.partition(4), 0xA);
        assert_eq!(hash.partition(0), 0);
        assert_eq!(hash.bucket(0xFF), 0x12);
        assert_eq!(hash.tag(), 0x3456);
        assert_eq!(KeyHash(0xFFFF_0000).tag(), 1, "tag 0 maps to 1");
        assert_eq!(KeyHash(0x8000).tag(), 1, "the flash bit is not a tag bit");
        assert_eq!(KeyHash(0xF00D).tag(), 0x700D);
    }

    #[test]
    fn keys_sharing_a_hash_tag_share_their_partition_bits_only() {
        assert_eq!(hash_tag(b"user:{42}:name"), Some(&b"42"[..]));
        assert_eq!(hash_tag(b"{a}{b}"), Some(&b"a"[..]));
        assert_eq!(hash_tag(b"a{}b{c}"), None, "an empty tag is no tag (Redis Cluster's rule)");
        assert_eq!(hash_tag(b"a}b{c"), None);
        assert_eq!(hash_tag(b"plain"), None);
        let (one, two) = (KeyHash::of(b"x{t}"), KeyHash::of(b"y{t}"));
        assert_eq!(one.partition(PARTITION_BITS_MAX), two.partition(PARTITION_BITS_MAX));
        assert_eq!(one.partition(PARTITION_BITS_MAX), KeyHash::of(b"t").partition(PARTITION_BITS_MAX));
        assert_ne!((one.bucket(usize::MAX >> 28), one.tag()), (two.bucket(usize::MAX >> 28), two.tag()));
        assert_eq!(one.0 & !TAGGED_BITS, xxhash_rust::xxh3::xxh3_64(b"x{t}") & !TAGGED_BITS);
    }

    proptest::proptest! {
        #[test]
        fn the_first_brace_is_found_where_a_plain_search_finds_it(
            key in proptest::collection::vec(proptest::prop_oneof![proptest::num::u8::ANY, proptest::strategy::Just(b'{')], 0..40)
        ) {
            proptest::prop_assert_eq!(find_open_brace(&key), key.iter().position(|&byte| byte == b'{'));
        }
    }

    #[test]
    fn hash_is_xxh3() {
        assert_eq!(KeyHash::of(b"").0, xxhash_rust::xxh3::xxh3_64(b""));
        assert_ne!(KeyHash::of(b"a"), KeyHash::of(b"b"));
    }
}
