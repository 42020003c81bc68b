//! What the workers publish for `stats`, once per loop turn (never per request): each
//! partition's figures by its owner, each flash tier's, each worker's counters, store mode's
//! free space, and what `stats reset` zeroed. `stats` reads copies; nothing is held locked
//! while a reply is written.

use super::{StatsBaseline, WorkerFigures};
use qs_store::{Partition, PartitionStats};
use std::sync::{Arc, Mutex, MutexGuard};

/// A flash tier's figures: its log's and the tier's counters.
pub type FlashFigures = (qs_store::flash::FlashStats, qs_store::FlashCounters);

/// The figures workers publish.
pub struct Published {
    /// Per partition, by its owner.
    partitions: Vec<Mutex<PartitionStats>>,
    /// `-o ext_path`: per partition (empty without a flash tier).
    flash: Vec<Mutex<FlashFigures>>,
    /// Per worker.
    workers: Vec<Mutex<WorkerFigures>>,
    /// Store mode: each partition's free space by size (empty in cache mode).
    free_groups: Vec<Arc<qs_store::arena::FreeGroups>>,
    /// The counters at the last `stats reset`.
    baseline: Mutex<StatsBaseline>,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Published {
    /// As `partitions` were built (a memory file's start with the items they took back, which
    /// `stats` shows before their workers first publish), for `workers` workers.
    pub fn new(partitions: &[Partition], workers: usize) -> Published {
        Published {
            partitions: partitions.iter().map(|partition| Mutex::new(partition.stats_snapshot())).collect(),
            flash: partitions.iter().filter_map(Partition::flash_stats).map(Mutex::new).collect(),
            workers: (0..workers)
                .map(|_| {
                    Mutex::new(WorkerFigures {
                        remote_reads: vec![(0, 0); partitions.len()],
                        ..Default::default()
                    })
                })
                .collect(),
            free_groups: partitions.iter().filter_map(Partition::free_groups).collect(),
            baseline: Mutex::default(),
        }
    }

    /// Partitions.
    pub fn partition_count(&self) -> usize {
        self.partitions.len()
    }

    /// Publishes partition `index`'s figures (its owner).
    pub fn set_partition(&self, index: usize, figures: PartitionStats) {
        *locked(&self.partitions[index]) = figures;
    }

    /// Every partition's figures as last published.
    pub fn partitions(&self) -> Vec<PartitionStats> {
        self.partitions.iter().map(|figures| *locked(figures)).collect()
    }

    /// Whether the partitions have flash tiers.
    pub fn flash_on(&self) -> bool {
        !self.flash.is_empty()
    }

    /// Publishes partition `index`'s flash figures (its owner).
    pub fn set_flash(&self, index: usize, figures: FlashFigures) {
        if let Some(slot) = self.flash.get(index) {
            *locked(slot) = figures;
        }
    }

    /// Partition `index`'s flash figures (`None` without a flash tier).
    pub fn flash(&self, index: usize) -> Option<FlashFigures> {
        self.flash.get(index).map(|slot| *locked(slot))
    }

    /// Every flash tier's figures.
    pub fn flash_all(&self) -> Vec<FlashFigures> {
        self.flash.iter().map(|slot| *locked(slot)).collect()
    }

    /// Worker `index`'s figures, to publish them (its own worker).
    pub fn worker(&self, index: usize) -> MutexGuard<'_, WorkerFigures> {
        locked(&self.workers[index])
    }

    /// Every worker's figures as last published.
    pub fn workers(&self) -> Vec<WorkerFigures> {
        self.workers.iter().map(|figures| locked(figures).clone()).collect()
    }

    /// Store mode's free space, per partition.
    pub fn free_groups(&self) -> &[Arc<qs_store::arena::FreeGroups>] {
        &self.free_groups
    }

    /// The counters at the last `stats reset`.
    pub fn baseline(&self) -> StatsBaseline {
        locked(&self.baseline).clone()
    }

    /// `stats reset`: counts from `baseline` from now on.
    pub fn set_baseline(&self, baseline: StatsBaseline) {
        *locked(&self.baseline) = baseline;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_published_and_read_back_and_a_reset_is_kept() {
        let mut config = qs_store::Config::new(1 << 20, 256);
        config.huge_pages = qs_store::HugePages::Off;
        let partitions = [Partition::new(config), Partition::new(config)];
        let published = Published::new(&partitions, 2);
        assert_eq!((published.partition_count(), published.flash_on()), (2, false));
        assert_eq!(published.workers()[1].remote_reads, vec![(0, 0); 2]);
        let figures = PartitionStats { gets: 7, ..PartitionStats::default() };
        published.set_partition(1, figures);
        assert_eq!(published.partitions()[1].gets, 7);
        published.worker(0).remote_reads[1] = (3, 2);
        assert_eq!(published.workers()[0].remote_reads[1], (3, 2));
        published.set_flash(0, Default::default());
        assert!(published.flash(0).is_none(), "no flash tier, no figures");
        let baseline = StatsBaseline { total_connections: 5, ..StatsBaseline::default() };
        published.set_baseline(baseline);
        assert_eq!(published.baseline().total_connections, 5);
    }
}
