//! An exact S3-FIFO cache of a byte capacity (Yang et al., SOSP'23), simulated directly: a
//! small FIFO of a tenth of the bytes that new keys enter, a main FIFO that keys read while in
//! the small one move to, and a ghost FIFO of the keys the small one dropped (keys only, as
//! many as the main FIFO holds), whose keys enter the main FIFO directly when they come back.
//! Reads count up to three; the main FIFO's oldest item goes back in with one less if it has a
//! count, else it leaves. A set of a cached key rewrites it where it is and a get miss fills
//! the cache (look-aside), as in [`crate::fifo`]. The engine's `clock` policy is the main FIFO
//! alone.

use crate::stream::{Access, Op};
use hashbrown::HashMap;
use std::collections::VecDeque;

/// The small FIFO's share of the bytes.
const SMALL_SHARE: f64 = 0.1;
/// The read count at most.
const FREQ_MAX: u8 = 3;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
}

struct Entry {
    bytes: u64,
    freq: u8,
    queue: Queue,
    /// Matches the generation of its one live queue entry.
    generation: u64,
}

/// One S3-FIFO cache.
pub struct S3FifoCache {
    capacity: u64,
    small_capacity: u64,
    small_bytes: u64,
    main_bytes: u64,
    items: HashMap<u64, Entry>,
    small: VecDeque<(u64, u64)>,
    main: VecDeque<(u64, u64)>,
    /// Ghost keys with the generation of their ghost entry.
    ghost: HashMap<u64, u64>,
    ghost_queue: VecDeque<(u64, u64)>,
    main_items: usize,
    generation: u64,
    gets: u64,
    hits: u64,
}

impl S3FifoCache {
    /// An empty cache of `capacity` bytes.
    pub fn new(capacity: u64) -> S3FifoCache {
        S3FifoCache {
            capacity,
            small_capacity: ((capacity as f64 * SMALL_SHARE) as u64).max(1),
            small_bytes: 0,
            main_bytes: 0,
            items: HashMap::new(),
            small: VecDeque::new(),
            main: VecDeque::new(),
            ghost: HashMap::new(),
            ghost_queue: VecDeque::new(),
            main_items: 0,
            generation: 0,
            gets: 0,
            hits: 0,
        }
    }

    /// Replays one request; `bytes` is what the item takes.
    pub fn access(&mut self, access: &Access, bytes: u64) {
        match access.op {
            Op::Get => {
                self.gets += 1;
                match self.items.get_mut(&access.key) {
                    Some(entry) => {
                        self.hits += 1;
                        entry.freq = (entry.freq + 1).min(FREQ_MAX);
                    }
                    None => self.insert(access.key, bytes),
                }
            }
            Op::Set => match self.items.get_mut(&access.key) {
                Some(entry) => {
                    let old = entry.bytes;
                    entry.bytes = bytes;
                    match entry.queue {
                        Queue::Small => self.small_bytes = self.small_bytes - old + bytes,
                        Queue::Main => self.main_bytes = self.main_bytes - old + bytes,
                    }
                    self.evict_to_fit();
                }
                None => self.insert(access.key, bytes),
            },
            Op::Delete => {
                if let Some(entry) = self.items.remove(&access.key) {
                    self.forget(&entry);
                    self.trim_ghost();
                }
            }
        }
    }

    fn forget(&mut self, entry: &Entry) {
        match entry.queue {
            Queue::Small => self.small_bytes -= entry.bytes,
            Queue::Main => {
                self.main_bytes -= entry.bytes;
                self.main_items -= 1;
            }
        }
    }

    fn insert(&mut self, key: u64, bytes: u64) {
        if bytes > self.capacity {
            return;
        }
        self.generation += 1;
        let queue = if self.ghost.remove(&key).is_some() { Queue::Main } else { Queue::Small };
        self.items.insert(key, Entry { bytes, freq: 0, queue, generation: self.generation });
        match queue {
            Queue::Small => {
                self.small.push_back((key, self.generation));
                self.small_bytes += bytes;
            }
            Queue::Main => {
                self.main.push_back((key, self.generation));
                self.main_bytes += bytes;
                self.main_items += 1;
            }
        }
        self.evict_to_fit();
    }

    fn evict_to_fit(&mut self) {
        self.make_room();
        self.trim_ghost();
    }

    /// Keeps the ghost to as many keys as the main FIFO holds.
    fn trim_ghost(&mut self) {
        while self.ghost.len() > self.main_items.max(1) {
            let Some((old, generation)) = self.ghost_queue.pop_front() else { break };
            if self.ghost.get(&old) == Some(&generation) {
                self.ghost.remove(&old);
            }
        }
        // Keys that came back left their entries behind: dropped once they are half the queue.
        if self.ghost_queue.len() > 2 * self.ghost.len() + 64 {
            let ghost = &self.ghost;
            self.ghost_queue.retain(|(key, generation)| ghost.get(key) == Some(generation));
        }
    }

    fn make_room(&mut self) {
        while self.small_bytes + self.main_bytes > self.capacity {
            if self.small_bytes >= self.small_capacity || self.main.is_empty() {
                if !self.evict_small() && !self.evict_main() {
                    break;
                }
            } else if !self.evict_main() && !self.evict_small() {
                break;
            }
        }
    }

    /// The small FIFO's oldest: to the main FIFO if it was read, else out (its key to the ghost).
    fn evict_small(&mut self) -> bool {
        while let Some((key, generation)) = self.small.pop_front() {
            let Some(entry) = self.items.get_mut(&key) else { continue };
            if entry.generation != generation || entry.queue != Queue::Small {
                continue;
            }
            self.small_bytes -= entry.bytes;
            if entry.freq > 0 {
                self.generation += 1;
                entry.queue = Queue::Main;
                entry.freq = 0;
                entry.generation = self.generation;
                self.main.push_back((key, self.generation));
                self.main_bytes += entry.bytes;
                self.main_items += 1;
            } else {
                self.items.remove(&key);
                self.generation += 1;
                self.ghost.insert(key, self.generation);
                self.ghost_queue.push_back((key, self.generation));
            }
            return true;
        }
        false
    }

    /// The main FIFO's oldest: back in with one read less if it has one, else out.
    fn evict_main(&mut self) -> bool {
        while let Some((key, generation)) = self.main.pop_front() {
            let Some(entry) = self.items.get_mut(&key) else { continue };
            if entry.generation != generation || entry.queue != Queue::Main {
                continue;
            }
            if entry.freq > 0 {
                entry.freq -= 1;
                self.generation += 1;
                entry.generation = self.generation;
                self.main.push_back((key, self.generation));
                continue;
            }
            self.main_bytes -= entry.bytes;
            self.main_items -= 1;
            self.items.remove(&key);
            return true;
        }
        false
    }

    /// Hit ratio of gets.
    pub fn hit_ratio(&self) -> f64 {
        if self.gets == 0 {
            0.0
        } else {
            self.hits as f64 / self.gets as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fifo::FifoCache;

    fn request(op: Op, key: u64) -> Access {
        Access { time: 0, key, key_size: 8, value_size: 0, op, ttl: 0 }
    }

    fn get(key: u64) -> Access {
        request(Op::Get, key)
    }

    #[test]
    fn one_hit_wonders_do_not_push_out_what_is_read_again() {
        // A hot set read again and again, with a scan of keys read once through it: the scan
        // passes through the small FIFO only, so the hot keys stay; plain FIFO loses them.
        let (mut s3, mut fifo) = (S3FifoCache::new(100 * 10), FifoCache::new(100 * 10));
        let mut scan = 1_000_000;
        for round in 0..200u64 {
            for key in 0..50 {
                s3.access(&get(key), 10);
                fifo.access(&get(key), 10);
            }
            for _ in 0..(if round > 10 { 100 } else { 0 }) {
                scan += 1;
                s3.access(&get(scan), 10);
                fifo.access(&get(scan), 10);
            }
        }
        assert!(s3.hit_ratio() > 0.3, "{}", s3.hit_ratio());
        assert!(s3.hit_ratio() > fifo.hit_ratio() + 0.2, "{} against {}", s3.hit_ratio(), fifo.hit_ratio());
    }

    #[test]
    fn bytes_stay_within_the_capacity_and_the_counts_agree() {
        let mut cache = S3FifoCache::new(1000);
        let mut state = 7u64;
        for _ in 0..20_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = (state >> 33) % 300;
            let op = match (state >> 20) % 10 {
                0 => Op::Delete,
                1 | 2 => Op::Set,
                _ => Op::Get,
            };
            cache.access(&request(op, key), 8 + (state >> 40) % 60);
            assert!(cache.small_bytes + cache.main_bytes <= 1000);
            let (small, main): (Vec<&Entry>, Vec<&Entry>) =
                cache.items.values().partition(|entry| entry.queue == Queue::Small);
            assert_eq!(small.iter().map(|entry| entry.bytes).sum::<u64>(), cache.small_bytes);
            assert_eq!(main.iter().map(|entry| entry.bytes).sum::<u64>(), cache.main_bytes);
            assert_eq!(main.len(), cache.main_items);
            assert!(cache.ghost.len() <= cache.main_items.max(1));
        }
    }
}
