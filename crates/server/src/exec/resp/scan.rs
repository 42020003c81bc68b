//! The Redis protocol's walks of the keyspace: KEYS, SCAN and RANDOMKEY. Every partition's
//! index is walked bucket by bucket, the worker's own partitions directly and the others'
//! through their CREW readers (without CREW another worker's keys are not seen here), as
//! `lru_crawler metadump` walks them. A SCAN cursor names the partition and bucket to go on
//! from: keys there the whole time are listed at least once, whatever is written meanwhile
//! (an index that grows splits a bucket into one at a higher number, which is walked later).
//!
//! A SCAN call costs its keys, not the memory: the buckets of groups that never held a slot
//! (the index's occupancy summary) are passed without being read, and a call reads at most
//! [`SCAN_BUCKETS_MIN`] or ten times COUNT buckets (redis-server reads up to ten times COUNT
//! empty ones), stopping once it has seen COUNT keys. A few keys in a large memory come back
//! in one call.

use super::*;
use qs_proto::resp::command::Scan;
use qs_proto::resp::glob;
use qs_proto::resp::reply;

/// The fewest buckets a SCAN call may read (more with a COUNT over a tenth of it): a
/// keyspace of a few keys spread over that many buckets' groups comes back in one call.
const SCAN_BUCKETS_MIN: usize = 1024;

impl Engine {
    /// Calls `visit` with each key held in buckets `buckets` of partition `partition`.
    fn walk(&self, partition: usize, buckets: std::ops::Range<usize>, visit: &mut dyn FnMut(&[u8])) {
        self.walk_items(partition, buckets, &mut |key, _| visit(key));
    }

    /// [`Engine::walk`], each key with its item's client flags (a collection's type).
    fn walk_items(
        &self,
        partition: usize,
        buckets: std::ops::Range<usize>,
        visit: &mut dyn FnMut(&[u8], u32),
    ) {
        let mut visit_item = |item: &qs_store::Dumped<'_>| visit(item.key, item.flags);
        match (&self.partitions[partition], self.shared.map.reader(partition)) {
            (Some(owned), _) => owned.dump(buckets, self.now, &mut visit_item),
            (None, Some(reader)) if self.crew => reader.dump(buckets, self.now, &mut visit_item),
            _ => {}
        }
    }

    /// [`Engine::walk`] of the keys of the connection's database, as its clients name them.
    fn walk_db(&self, partition: usize, buckets: std::ops::Range<usize>, visit: &mut dyn FnMut(&[u8])) {
        let db = self.db;
        self.walk(partition, buckets, &mut |stored| {
            if let Some(key) = qs_proto::resp::db::in_db(stored, db) {
                visit(key);
            }
        });
    }

    /// DBSIZE of the database whose keys are in namespace `db`: every item when no other database is in use (this worker's
    /// figures as of now, the others' as of their last loop turn), else its keys counted.
    pub(super) fn db_size(&mut self, db: u8) -> u64 {
        if db == 0 && !self.shared.databases_used() {
            self.publish();
            return crate::admin::stats::current_items(&self.shared);
        }
        // `db` is a namespace: the database whose keys are there.
        let database = self.shared.db_spaces.database_of(db);
        self.db_sizes().get(usize::from(database)).copied().unwrap_or(0)
    }

    /// How many keys each database holds, counted over every partition this worker reads.
    pub(super) fn db_sizes(&self) -> Vec<u64> {
        let mut spaces = vec![0; self.shared.config.databases as usize];
        for partition in 0..self.partitions.len() {
            self.walk(partition, 0..self.shared.memory.main_buckets(), &mut |stored| {
                if let Some(size) = spaces.get_mut(usize::from(qs_proto::resp::db::split(stored).0)) {
                    *size += 1;
                }
            });
        }
        // Each database's keys are where its namespace is (SWAPDB exchanges them).
        (0..spaces.len()).map(|db| spaces[usize::from(self.shared.db_spaces.space(db as u8))]).collect()
    }

    /// SWAPDB `a` `b` on this worker's partitions: the watched keys of either database that
    /// either holds (here) are written, as redis-server's `touchAllWatchedKeysInDb`; where the
    /// client asked (`asked_here`), the two databases' namespaces are exchanged.
    pub(in crate::exec) fn swap_dbs(&mut self, (a, b): (u8, u8), asked_here: bool) {
        let spaces = &self.shared.db_spaces;
        let (space_a, space_b) = (spaces.space(a), spaces.space(b));
        if space_a != space_b {
            let watches = self.shared.watches.clone();
            watches.touch_each(|stored| {
                let (space, key) = qs_proto::resp::db::split(stored);
                let other = match space {
                    _ if space == space_a => space_b,
                    _ if space == space_b => space_a,
                    _ => return false,
                };
                let counterpart = [qs_proto::resp::db::prefix(other), key].concat();
                self.holds(stored) || self.holds(&counterpart)
            });
        }
        if asked_here {
            // The connection's database stays its own: its namespace is the one it names now
            // (a transaction's requests after it see the swap).
            let spaces = &self.shared.db_spaces;
            let database = spaces.database_of(self.db);
            spaces.swap(a, b);
            self.db = spaces.space(database);
            self.shared.use_databases();
        }
    }

    /// Whether the store's key `stored` is on a partition held here, and there.
    fn holds(&self, stored: &[u8]) -> bool {
        let key = self.key(stored, None);
        key.len() <= qs_proto::RESP_KEY_BYTES_MAX && self.owns(key.partition) && self.look(key).is_some()
    }

    /// FLUSHALL (`db` None) or FLUSHDB of database `db`, on this worker's partitions: every
    /// item goes at once where that is every key, else the database's keys are deleted one
    /// by one, for the connection `fd`.
    pub(in crate::exec) fn flush_db(&mut self, db: Option<u8>, fd: i32, asked_here: bool) {
        let db = match db {
            Some(db) if db != 0 || self.shared.databases_used() => db,
            _ => return self.flush_now(asked_here),
        };
        if asked_here {
            self.counters.cmd_flush += 1;
        }
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for partition in (0..self.partitions.len()).filter(|&partition| self.owns(partition)) {
            self.walk(partition, 0..self.shared.memory.main_buckets(), &mut |stored| {
                if qs_proto::resp::db::split(stored).0 == db {
                    keys.push(stored.to_vec());
                }
            });
        }
        self.delete_owned(keys.iter().map(Vec::as_slice), fd);
    }

    /// KEYS: every key matching `pattern`, in one array (as redis-server: SCAN walks a
    /// large keyspace in steps).
    pub(super) fn resp_keys_matching(&self, pattern: &[u8], out: &mut Vec<u8>) {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let every = pattern == b"*";
        for partition in 0..self.partitions.len() {
            self.walk_db(partition, 0..self.shared.memory.main_buckets(), &mut |key| {
                if every || glob::matches(pattern, key, false) {
                    keys.push(key.to_vec());
                }
            });
        }
        array(keys.iter().map(Vec::as_slice), keys.len(), out);
    }

    /// SCAN: the keys from the cursor on, bucket by bucket, until COUNT keys were seen or the
    /// call's buckets are read; the cursor after them (0 once every partition is walked).
    pub(in crate::exec) fn resp_scan(&self, scan: &Scan<'_>, out: &mut Vec<u8>) {
        let buckets = self.shared.memory.main_buckets() as u64;
        let total = buckets * self.partitions.len() as u64;
        let mut at = scan.cursor;
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let (mut seen, mut budget) = (0, (10 * scan.count).max(SCAN_BUCKETS_MIN));
        while at < total && budget > 0 && seen < scan.count {
            let (partition, bucket) = ((at / buckets) as usize, (at % buckets) as usize);
            let Some(next) = self.next_occupied(partition, bucket) else {
                at = (partition as u64 + 1) * buckets;
                continue;
            };
            let db = self.db;
            self.walk_items(partition, next..next + 1, &mut |stored, flags| {
                let Some(key) = qs_proto::resp::db::in_db(stored, db) else { return };
                seen += 1;
                let kind =
                    qs_proto::resp::collection::Kind::of_flags(flags).map_or("string", |kind| kind.name());
                let typed = scan.kind.map_or(true, |wanted| wanted.eq_ignore_ascii_case(kind.as_bytes()));
                if typed && scan.pattern.map_or(true, |pattern| glob::matches(pattern, key, false)) {
                    keys.push(key.to_vec());
                }
            });
            budget -= 1;
            at = partition as u64 * buckets + next as u64 + 1;
        }
        let next = if at >= total { 0 } else { at };
        out.extend_from_slice(b"*2\r\n");
        reply::bulk(next.to_string().as_bytes(), out);
        array(keys.iter().map(Vec::as_slice), keys.len(), out);
    }

    /// The first bucket from `bucket` of `partition` that may hold a key, as this worker
    /// reads it (`None`: none does, or its keys are not seen here).
    fn next_occupied(&self, partition: usize, bucket: usize) -> Option<usize> {
        let (next, end) = match (&self.partitions[partition], self.shared.map.reader(partition)) {
            (Some(owned), _) => (owned.next_occupied(bucket), owned.main_buckets()),
            (None, Some(reader)) if self.crew => (reader.next_occupied(bucket), reader.main_buckets()),
            _ => return None,
        };
        (next < end).then_some(next)
    }

    /// RANDOMKEY: the first key found from a random partition and bucket on (null when
    /// there is none).
    pub(super) fn resp_random_key(&self, resp3: bool, out: &mut Vec<u8>) {
        let buckets = self.shared.memory.main_buckets();
        let total = buckets * self.partitions.len();
        let start = random_below(total);
        // Buckets a chunk at a time, wrapping round once.
        let mut walked = 0;
        while walked < total {
            let at = (start + walked) % total;
            let (partition, bucket) = (at / buckets, at % buckets);
            let chunk = (buckets - bucket).min(total - walked).min(4096);
            let mut found = None;
            self.walk_db(partition, bucket..bucket + chunk, &mut |key| {
                if found.is_none() {
                    found = Some(key.to_vec());
                }
            });
            if let Some(key) = found {
                return reply::bulk(&key, out);
            }
            walked += chunk;
        }
        out.extend_from_slice(reply::null(resp3));
    }
}

/// An array of `len` bulk strings.
fn array<'a>(items: impl Iterator<Item = &'a [u8]>, len: usize, out: &mut Vec<u8>) {
    out.push(b'*');
    qs_proto::response::push_u64(out, len as u64);
    out.extend_from_slice(b"\r\n");
    for item in items {
        reply::bulk(item, out);
    }
}

/// A number below `bound` (not 0), from the clock's nanoseconds mixed (splitmix64): RANDOMKEY
/// needs spread, not secrecy.
pub(super) fn random_below(bound: usize) -> usize {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut z = nanos.as_nanos() as u64 ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % bound.max(1) as u64) as usize
}
