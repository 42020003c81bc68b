//! The partition map every worker routes by: how many workers, which worker owns each
//! partition (MICA's request direction: partition *p* belongs to worker *p mod workers*), the
//! partition of a key's hash, and the CREW readers of every partition (none under EREW).

use qs_store::{KeyHash, Reader};

/// Workers, partitions and their owners, and the CREW readers.
pub struct PartitionMap {
    workers: usize,
    /// log2 of the partition count.
    partition_bits: u32,
    /// The owner of each partition.
    owner: Vec<usize>,
    /// One per partition under CREW; none under EREW.
    readers: Vec<Reader>,
}

impl PartitionMap {
    /// `partitions` (a power of two) over `workers`, each partition owned by worker
    /// `partition mod workers`; `readers`: one per partition (CREW) or none (EREW).
    pub fn new(workers: usize, partitions: usize, readers: Vec<Reader>) -> PartitionMap {
        debug_assert!(partitions.is_power_of_two() && (readers.is_empty() || readers.len() == partitions));
        let owner = (0..partitions).map(|partition| partition % workers).collect();
        PartitionMap { workers, partition_bits: partitions.trailing_zeros(), owner, readers }
    }

    /// Workers.
    #[inline(always)]
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Partitions.
    #[inline(always)]
    pub fn partitions(&self) -> usize {
        self.owner.len()
    }

    /// log2 of the partition count (the native protocol's directory tells clients).
    pub fn partition_bits(&self) -> u32 {
        self.partition_bits
    }

    /// The partition of a key with hash `hash`.
    #[inline(always)]
    pub fn partition_of(&self, hash: KeyHash) -> usize {
        hash.partition(self.partition_bits)
    }

    /// The worker that owns `partition`.
    #[inline(always)]
    pub fn owner(&self, partition: usize) -> usize {
        self.owner[partition]
    }

    /// Whether other workers may read partitions they do not own (CREW).
    #[inline(always)]
    pub fn crew(&self) -> bool {
        !self.readers.is_empty()
    }

    /// `partition`'s CREW reader (`None` under EREW).
    #[inline(always)]
    pub fn reader(&self, partition: usize) -> Option<&Reader> {
        self.readers.get(partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_go_round_the_workers_and_a_hash_picks_one() {
        let map = PartitionMap::new(3, 8, Vec::new());
        assert_eq!((map.workers(), map.partitions(), map.partition_bits()), (3, 8, 3));
        assert_eq!((0..8).map(|p| map.owner(p)).collect::<Vec<_>>(), [0, 1, 2, 0, 1, 2, 0, 1]);
        assert!(!map.crew() && map.reader(0).is_none());
        let hash = KeyHash::of(b"key");
        assert_eq!(map.partition_of(hash), hash.partition(3));
    }
}
