//! Large values sent from one shared copy (session::budget::SharedValue): a get whose value is
//! at least [`SHARED_VALUE_BYTES_MIN`] long leaves it out of the reply buffer, and the worker
//! puts the copy in the connection's output ([`crate::session::Output::adopt`]). Copies of the
//! same version of a key (its CAS sequence is unique per version) are reused while any reply
//! still holds one, so many clients fetching one large value hold it once.

#[cfg(test)]
use crate::session::budget::ClientMemory;
use crate::session::budget::{
    ClientMemory as Budget, LogBytes, SharedValue, WeakShared, SHARED_VALUE_BYTES_MIN,
};
use crate::session::SegmentPool;
use qs_store::LogValue;
#[cfg(test)]
use std::sync::Arc;

/// Recent shared copies kept for reuse (weakly: they live as long as a reply holds them), in
/// a table indexed by the version's CAS sequence (unique per version in the process).
const RECENT: usize = 16;

/// Keys at most this long are remembered with their copies (kept inline: remembering a copy
/// allocates nothing); a longer key's copies are not reused.
const RECENT_KEY_BYTES_MAX: usize = qs_store::KEY_BYTES_MAX;

/// A recent copy: its key, CAS sequence and the copy.
struct Recent {
    key: [u8; RECENT_KEY_BYTES_MAX],
    key_len: u8,
    cas: u64,
    copy: WeakShared,
}

/// The slot of version `cas` in the recent copies.
#[inline(always)]
fn recent_slot(cas: u64) -> usize {
    // The low bits of a CAS sequence name its partition: the multiply spreads the rest.
    (cas.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % RECENT
}

/// A worker's shared values.
#[derive(Default)]
pub struct Shares {
    /// Whether replies now may share values (a stream connection's requests, run here).
    pub on: bool,
    /// The values the last execution left out of its reply buffer: (where, the copy).
    pub taken: Vec<(usize, SharedValue)>,
    /// Recent copies, [`RECENT`] of them once the first is remembered.
    recent: Vec<Recent>,
    /// Segments for the reply bytes behind shared values.
    pub segments: SegmentPool,
}

impl Shares {
    /// Whether a value of `len` bytes goes out shared.
    pub fn wants(&self, len: usize) -> bool {
        self.on && len >= SHARED_VALUE_BYTES_MIN
    }

    /// Bytes of the values taken since the worker last adopted them (what the reply holds
    /// besides its buffer).
    pub fn taken_bytes(&self) -> usize {
        self.taken.iter().map(|(_, copy)| copy.len()).sum()
    }

    /// Leaves `value` (the version `cas` of `key`) out of `out` at its end, to be sent from a
    /// shared copy: a recent one of the same version, or a new one charged to `budget`.
    #[cfg(test)]
    fn take(&mut self, key: &[u8], cas: u64, value: &[u8], out: &[u8], budget: &Arc<ClientMemory>) {
        match self.recent_copy(key, cas, value.len(), budget) {
            Some(copy) => self.taken.push((out.len(), copy)),
            None => {
                let copy = SharedValue::new(value, budget.clone());
                self.take_new_copy(key, cas, copy, out.len());
            }
        }
    }

    /// Leaves the value at byte `at` of the reply buffer out, to be sent from `copy`, a new
    /// copy of the version `cas` of `key`, kept for reuse while a reply holds it.
    pub fn take_new_copy(&mut self, key: &[u8], cas: u64, copy: SharedValue, at: usize) {
        self.remember(key, cas, &copy);
        self.taken.push((at, copy));
    }

    /// A recent shared copy of the version `cas` of `key`, `len` bytes long, that a reply still holds.
    pub fn recent_copy(&self, key: &[u8], cas: u64, len: usize, budget: &Budget) -> Option<SharedValue> {
        let recent = self.recent.get(recent_slot(cas))?;
        if recent.cas != cas || recent.key.get(..usize::from(recent.key_len)) != Some(key) {
            return None;
        }
        recent.copy.upgrade(budget).filter(|copy| copy.len() == len)
    }

    /// Keeps `copy` (the version `cas` of `key`) for reuse while a reply holds it, in place
    /// of the copy in its slot.
    fn remember(&mut self, key: &[u8], cas: u64, copy: &SharedValue) {
        if key.len() > RECENT_KEY_BYTES_MAX {
            return;
        }
        if self.recent.is_empty() {
            self.recent = (0..RECENT)
                .map(|_| Recent {
                    key: [0; RECENT_KEY_BYTES_MAX],
                    key_len: 0,
                    cas: 0,
                    copy: WeakShared::Copy(std::sync::Weak::new()),
                })
                .collect();
        }
        let recent = &mut self.recent[recent_slot(cas)];
        recent.key[..key.len()].copy_from_slice(key);
        recent.key_len = key.len() as u8;
        recent.cas = cas;
        recent.copy = copy.downgrade();
    }
}

impl LogBytes for super::Engine {
    /// Only the owner reads a value left in its log: its partition is this engine's.
    fn log_bytes<'a>(&'a self, partition: usize, value: &'a LogValue) -> &'a [u8] {
        self.partitions[partition]
            .as_ref()
            .expect("a value is left in the log only by the partition's owner")
            .value_bytes(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_version_of_a_key_is_copied_once_and_another_version_again() {
        let budget = Arc::new(ClientMemory::default());
        let mut shares = Shares { on: true, ..Shares::default() };
        let value = vec![7u8; SHARED_VALUE_BYTES_MIN];
        assert!(shares.wants(value.len()) && !shares.wants(value.len() - 1));
        shares.take(b"big", 5, &value, b"VALUE big 0 16384\r\n", &budget);
        shares.take(b"big", 5, &value, b"", &budget);
        assert_eq!(budget.used(), value.len(), "the same version shares one copy");
        let (SharedValue::Copy(first), SharedValue::Copy(second)) = (&shares.taken[0].1, &shares.taken[1].1)
        else {
            panic!("copies")
        };
        assert!(Arc::ptr_eq(first, second));
        assert_eq!((shares.taken[0].0, shares.taken[1].0), (19, 0));
        shares.take(b"big", 6, &value, b"", &budget);
        assert_eq!(budget.used(), 2 * value.len(), "a new version is a new copy");
        shares.taken.clear();
        assert_eq!(budget.used(), 0, "freed with the last reply holding them");
        shares.take(b"big", 5, &value, b"", &budget);
        assert_eq!(budget.used(), value.len(), "a copy no reply holds is not kept");
    }

    #[test]
    fn a_recent_copy_answers_only_its_own_key_version_and_length() {
        let budget = Arc::new(ClientMemory::default());
        let mut shares = Shares { on: true, ..Shares::default() };
        let value = vec![7u8; SHARED_VALUE_BYTES_MIN];
        shares.take(b"big", 5, &value, b"", &budget);
        assert!(shares.recent_copy(b"big", 5, value.len(), &budget).is_some());
        assert!(shares.recent_copy(b"bog", 5, value.len(), &budget).is_none(), "another key");
        assert!(shares.recent_copy(b"bi", 5, value.len(), &budget).is_none(), "a prefix of the key");
        assert!(shares.recent_copy(b"big", 7, value.len(), &budget).is_none(), "another version");
        assert!(shares.recent_copy(b"big", 5, value.len() + 1, &budget).is_none(), "another length");
        // Copies of many versions: each slot keeps the last one remembered there.
        for cas in 100..200 {
            shares.take(b"big", cas, &value, b"", &budget);
        }
        for cas in 100..200 {
            let kept = (cas + 1..200).all(|later| recent_slot(later) != recent_slot(cas));
            assert_eq!(
                shares.recent_copy(b"big", cas, value.len(), &budget).is_some(),
                kept,
                "version {cas}"
            );
        }
        let long = vec![b'k'; RECENT_KEY_BYTES_MAX + 1];
        shares.take(&long, 300, &value, b"", &budget);
        assert!(
            shares.recent_copy(&long, 300, value.len(), &budget).is_none(),
            "a long key is not remembered"
        );
    }
}
