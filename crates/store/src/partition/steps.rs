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
