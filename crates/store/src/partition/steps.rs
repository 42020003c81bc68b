//! Steps over several keys, seen whole by readers on other threads: a transaction, or a write
//! of several keys, changes its partitions between [`Partition::begin_step`] and
//! [`Partition::end_step`], and a reader of one or several keys ([`crate::Reader::step`],
//! [`crate::Reader::step_unchanged`]) retries what it read while any of its partitions was in a
//! step, as it retries a bucket the owner was changing (reader.rs). A seqlock: the count is odd
//! during a step.
//!
//! The owner makes the count odd, then a release fence, then its changes (relaxed atomic
//! stores, as every change is), then the count even again (release). A reader loads the count
//! (acquire) and waits while it is odd, reads, then issues an acquire fence and loads the count
//! again: if anything it read was written in a step begun after its first load, the fences pair
//! and the second load sees the odd count or a later one, so the read is retried. A step never
//! waits for a reader, and a reader waits only for a step under way.

use super::Partition;
use crate::sync::fence;
use std::sync::atomic::Ordering::{Relaxed, Release};

impl Partition {
    /// Starts a step over several keys: readers of this partition on other threads wait until
    /// [`Partition::end_step`].
    pub fn begin_step(&self) {
        let steps = &self.shared.steps;
        debug_assert!(steps.load(Relaxed) & 1 == 0, "a step inside a step");
        steps.store(steps.load(Relaxed) + 1, Relaxed);
        fence(Release);
    }

    /// Ends the step [`Partition::begin_step`] started.
    pub fn end_step(&self) {
        let steps = &self.shared.steps;
        debug_assert!(steps.load(Relaxed) & 1 == 1, "no step to end");
        steps.store(steps.load(Relaxed) + 1, Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::item::Expiry;
    use crate::region::HugePages;
    use crate::{Access, Config, Outcome, Partition, PartitionCommand, PartitionRequest, StoreMode};

    fn crew() -> Partition {
        let mut config = Config::new(256, 2);
        config.access = Access::Crew;
        config.huge_pages = HugePages::Off;
        Partition::new(config)
    }

    fn set(partition: &mut Partition, key: &[u8], value: &[u8]) {
        let command =
            PartitionCommand::Store { mode: StoreMode::Set, value, flags: 0, expiry: Expiry::NEVER };
        let outcome = partition.execute(
            &PartitionRequest::new(key, command),
            crate::Now::from_secs(100),
            &mut Vec::new(),
        );
        assert!(matches!(outcome, Outcome::Stored { .. }), "{outcome:?}");
    }

    #[test]
    fn a_step_moves_the_count_by_two_and_a_read_across_it_is_told() {
        let mut partition = crew();
        let reader = partition.reader();
        let seen = reader.step();
        assert!(reader.step_unchanged(seen), "no step: the read stands");
        partition.begin_step();
        set(&mut partition, b"a", b"1");
        partition.end_step();
        assert!(!reader.step_unchanged(seen), "a step since: read again");
        assert_eq!(reader.step(), seen + 2);
    }

    #[test]
    fn a_reader_waits_for_the_step_under_way() {
        let mut partition = crew();
        let reader = partition.reader();
        partition.begin_step();
        let waiting = std::thread::spawn(move || reader.step());
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!waiting.is_finished(), "the reader waits while the step is under way");
        set(&mut partition, b"a", b"1");
        partition.end_step();
        assert_eq!(waiting.join().expect("the reader"), 2);
    }
}
