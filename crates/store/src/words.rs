//! Byte copies into and out of word memory shared with other threads.
//!
//! Logs and indexes are `[AtomicU64]`: concurrent readers (CREW) may read bytes the owner is
//! rewriting, which with plain memory would be a data race. Every access here is a relaxed atomic
//! load or store of a whole word, which on x86-64 compiles to an ordinary `mov`; torn *values* are
//! possible and are caught by the seqlock checks of the caller, torn *accesses* never happen.
//! Bytes are little-endian within a word: byte `i` of the memory is bits `8*(i%8)..` of word `i/8`.

use crate::sync::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

const WORD_BYTES: usize = 8;

/// Appends the `len` bytes at byte position `pos` to `out`: whole words are copied (fixed-size
/// 8-byte moves) and the excess cut off, which is cheaper than copying byte ranges.
#[inline(always)]
pub fn load_bytes(words: &[AtomicU64], pos: usize, len: usize, out: &mut Vec<u8>) {
    let start = out.len();
    if len <= 2 * WORD_BYTES && pos % WORD_BYTES == 0 {
        // Short aligned values (tiny items): one or two word appends.
        let mut at = pos;
        while at < pos + len {
            out.extend_from_slice(&words[at / WORD_BYTES].load(Relaxed).to_le_bytes());
            at += WORD_BYTES;
        }
        out.truncate(start + len);
        return;
    }
    // Whole words appended, each a fixed 8-byte move, and the excess cut off: no zeroing of
    // the room first and no shifting after (callgrind, 32 B values: resize, copy and
    // `copy_within` cost a `memset` and a `memmove` call a get; 16 KiB ones their bytes).
    let mut word = pos / WORD_BYTES;
    let skip = pos % WORD_BYTES;
    out.reserve(len + WORD_BYTES);
    let end = start + len;
    if skip != 0 {
        // The first word's bytes from `skip` on, moved to its front.
        let first = words[word].load(Relaxed) >> (8 * skip);
        out.extend_from_slice(&first.to_le_bytes());
        out.truncate(start + (WORD_BYTES - skip).min(len));
        word += 1;
    }
    while out.len() < end {
        out.extend_from_slice(&words[word].load(Relaxed).to_le_bytes());
        word += 1;
    }
    out.truncate(end);
}

/// Writes `src` at byte position `pos`. Bytes of partially covered words outside the range are
/// kept (read-modify-write, safe because only one thread ever writes a given region).
#[inline]
pub fn store_bytes(words: &[AtomicU64], pos: usize, src: &[u8]) {
    let mut word_index = pos / WORD_BYTES;
    let skip = pos % WORD_BYTES;
    let mut src = src;
    if skip != 0 && !src.is_empty() {
        let n = (WORD_BYTES - skip).min(src.len());
        let mut bytes = words[word_index].load(Relaxed).to_le_bytes();
        bytes[skip..skip + n].copy_from_slice(&src[..n]);
        words[word_index].store(u64::from_le_bytes(bytes), Relaxed);
        src = &src[n..];
        word_index += 1;
    }
    let whole = src.len() / WORD_BYTES;
    let (body, tail) = src.split_at(whole * WORD_BYTES);
    let targets = &words[word_index..word_index + whole];
    // Four words a step: one loop test per 32 bytes (a value of 16 KiB is 2,048 words).
    let mut blocks = body.chunks_exact(4 * WORD_BYTES);
    let mut target_blocks = targets.chunks_exact(4);
    for (block, target) in (&mut blocks).zip(&mut target_blocks) {
        for (i, word) in target.iter().enumerate() {
            word.store(word_at(block, i), Relaxed);
        }
    }
    for (i, word) in target_blocks.remainder().iter().enumerate() {
        word.store(word_at(blocks.remainder(), i), Relaxed);
    }
    if !tail.is_empty() {
        let at = word_index + whole;
        let mut bytes = words[at].load(Relaxed).to_le_bytes();
        bytes[..tail.len()].copy_from_slice(tail);
        words[at].store(u64::from_le_bytes(bytes), Relaxed);
    }
}

/// Word `i` of `bytes`, little-endian.
#[inline(always)]
fn word_at(bytes: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(bytes[i * WORD_BYTES..(i + 1) * WORD_BYTES].try_into().expect("8 bytes"))
}

/// Whether the bytes at byte position `pos` equal `expected`, without copying them out.
#[inline(always)]
pub fn bytes_equal(words: &[AtomicU64], pos: usize, expected: &[u8]) -> bool {
    let (mut at, mut rest) = (pos, expected);
    while !rest.is_empty() {
        let word = words[at / WORD_BYTES].load(Relaxed);
        let skip = at % WORD_BYTES;
        if skip == 0 && rest.len() >= WORD_BYTES {
            let (chunk, tail) = rest.split_at(WORD_BYTES);
            if word != u64::from_le_bytes(chunk.try_into().expect("8 bytes")) {
                return false;
            }
            at += WORD_BYTES;
            rest = tail;
            continue;
        }
        // A part of a word (the key's first bytes past an unaligned start, or its tail): both
        // sides as masked words, the expected bytes read as whole words from the key where it
        // is that long (its tail from the last eight bytes, shifted), not byte by byte.
        let take = (WORD_BYTES - skip).min(rest.len());
        let mask = (1u64 << (8 * take)) - 1;
        let want = if rest.len() >= WORD_BYTES {
            u64::from_le_bytes(rest[..WORD_BYTES].try_into().expect("8 bytes"))
        } else if expected.len() >= WORD_BYTES {
            // `rest` is the end of `expected`.
            let last = &expected[expected.len() - WORD_BYTES..];
            u64::from_le_bytes(last.try_into().expect("8 bytes")) >> (8 * (WORD_BYTES - rest.len()))
        } else {
            let mut bytes = [0u8; WORD_BYTES];
            bytes[..take].copy_from_slice(&rest[..take]);
            u64::from_le_bytes(bytes)
        };
        if (word >> (8 * skip)) & mask != want & mask {
            return false;
        }
        at += take;
        rest = &rest[take..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn memory(words_len: usize) -> Vec<AtomicU64> {
        (0..words_len).map(|i| AtomicU64::new(0x0101_0101_0101_0101 * (i as u64 % 7))).collect()
    }

    proptest! {
        #[test]
        fn miri_store_then_load_round_trips_and_spares_neighbours(
            pos in 0usize..40, data in proptest::collection::vec(any::<u8>(), 0..70)
        ) {
            let words = memory(16);
            let mut before = Vec::new();
            load_bytes(&words, 0, 128, &mut before);
            store_bytes(&words, pos, &data);
            let mut back = Vec::new();
            load_bytes(&words, pos, data.len(), &mut back);
            prop_assert_eq!(&back, &data);
            prop_assert!(bytes_equal(&words, pos, &data));
            let mut after = Vec::new();
            load_bytes(&words, 0, 128, &mut after);
            prop_assert_eq!(&after[..pos], &before[..pos]);
            prop_assert_eq!(&after[pos + data.len()..], &before[pos + data.len()..]);
        }
    }

    proptest! {
        #[test]
        fn miri_loads_append_after_what_the_buffer_holds(
            pos in 0usize..40, len in 0usize..80, held in 0usize..20
        ) {
            let words = memory(16);
            let mut whole = Vec::new();
            load_bytes(&words, 0, 128, &mut whole);
            let mut out = vec![0xEE; held];
            load_bytes(&words, pos, len, &mut out);
            prop_assert_eq!(&out[..held], &vec![0xEE; held][..]);
            prop_assert_eq!(&out[held..], &whole[pos..pos + len]);
        }
    }

    proptest! {
        #[test]
        fn miri_bytes_equal_is_a_comparison_of_the_bytes(
            pos in 0usize..40,
            data in proptest::collection::vec(any::<u8>(), 0..40),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let words = memory(16);
            store_bytes(&words, pos, &data);
            prop_assert!(bytes_equal(&words, pos, &data));
            if !data.is_empty() {
                let mut other = data.clone();
                other[flip.index(data.len())] ^= 1 << bit;
                prop_assert!(!bytes_equal(&words, pos, &other));
                // A neighbour's byte differing is no difference.
                let mut shorter = data.clone();
                shorter.pop();
                prop_assert!(bytes_equal(&words, pos, &shorter));
                prop_assert!(bytes_equal(&words, pos + 1, &data[1..]));
            }
        }
    }

    #[test]
    fn miri_unequal_bytes_are_detected_past_the_first_chunk() {
        let words = memory(40);
        let data: Vec<u8> = (0..200).map(|i| i as u8).collect();
        store_bytes(&words, 3, &data);
        let mut other = data.clone();
        other[150] ^= 1;
        assert!(bytes_equal(&words, 3, &data));
        assert!(!bytes_equal(&words, 3, &other));
    }
}
