//! What the request path records besides its reply: the front cache (`-o front_cache`), hot
//! keys (`stats hotkeys`), the live miss-ratio sample (`stats mrc`), `watch` lines, and the
//! counters published once per loop turn.

use super::*;

impl Engine {
    /// `-o front_cache`: answers a plain `get` of `key` (another worker's), or RESP's plain
    /// GET (`resp`), from this worker's front cache when it holds a reply still valid;
    /// `false` otherwise (hand it over). A reply kept in either protocol answers a RESP GET
    /// (RESP shows no flags); a text `get` takes only a text one, which has the flags.
    pub fn front_serve(&mut self, key: Key<'_>, resp: bool, out: &mut Vec<u8>) -> bool {
        if self.front.is_none() {
            return false;
        }
        let Key { bytes: key, hash, partition } = key;
        let front = self.front.as_mut().expect("checked");
        let Some(reply) = front.get(hash.0, key, &self.shared.front_epochs[partition], self.now.secs())
        else {
            return false;
        };
        match (resp, reply.starts_with(b"VALUE ")) {
            (false, true) | (true, false) => out.extend_from_slice(reply),
            (true, true) => {
                let Some(value) = text_hit_value(reply) else { return false };
                qs_proto::resp::reply::bulk(value, out);
            }
            (false, false) => return false,
        }
        // Counted as a hit of a read served here, as a CREW read is.
        self.counters.cmd_get += 1;
        self.counters.remote_get_hits += 1;
        self.counters.front_hits += 1;
        let counts = &mut self.remote_reads[partition];
        counts.0 += 1;
        counts.1 += 1;
        self.offer(hash, key, &PartitionCommand::Get);
        true
    }

    /// `-o front_cache`, at the owner: what a handed-over plain `get` of `key` was answered
    /// under (the key's write epochs and this second), for the asking worker's front cache.
    /// `None` (not cached) for an item that expires before this second ends: a front-cache
    /// entry lives to the end of its second, and a Redis expiry may fall within one.
    pub fn front_tag(&self, key: Key<'_>) -> Option<(qs_store::front::Epoch, u32)> {
        let epochs = self.shared.front_epochs.get(key.partition)?;
        let owned = self.partitions[key.partition].as_ref()?;
        let second_ends = (u64::from(self.now.secs()) + 1) * 1000;
        match owned.peek_expiry(key.hash, key.bytes, self.now) {
            Some(expiry) if expiry != Expiry::NEVER && expiry.ms() < second_ends => None,
            _ => Some((epochs.read(key.hash.0), self.now.secs())),
        }
    }

    /// `-o front_cache`: keeps the owner's reply to a plain `get` (or RESP's GET) of `key`, a
    /// hit, tagged by [`Engine::front_tag`].
    pub fn front_fill(&mut self, key: &[u8], reply: &[u8], tag: (qs_store::front::Epoch, u32)) {
        let hit = reply.starts_with(b"VALUE ") || (reply.starts_with(b"$") && !reply.starts_with(b"$-"));
        if self.front.is_none() || reply.len() > FRONT_REPLY_BYTES_MAX || !hit {
            return;
        }
        let hash = self.locate(key).0;
        if let Some(front) = self.front.as_mut() {
            front.insert(hash.0, key, reply, tag.0, tag.1);
        }
    }

    /// Shows a command's key to `stats hotkeys` and `stats mrc`.
    #[inline(always)]
    pub(super) fn offer(&mut self, hash: KeyHash, key: &[u8], command: &PartitionCommand<'_>) {
        use crate::observe::mrc::LiveMrc;
        self.offer_access(hash, key, (LiveMrc::is_get(command), || LiveMrc::access_of(key, command)));
    }

    /// [`Engine::offer`] for an access already told apart: whether it is a get, and what it
    /// is to the miss-ratio curve (asked only for a sampled key).
    #[inline(always)]
    pub(super) fn offer_access(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        (is_get, access): (bool, impl FnOnce() -> qs_store::mrc::Access),
    ) {
        if self.hot_every != 0 {
            self.hot_countdown -= 1;
            if self.hot_countdown == 0 {
                self.hot_countdown = self.hot_gap();
                self.hot.offer(hash, key);
            }
        }
        if self.mrc_threshold != 0 {
            self.mrc_gets += u64::from(is_get);
            if qs_store::mrc::sample_hash(hash.0) < self.mrc_threshold {
                self.mrc_batch.push((hash.0, access()));
                if self.mrc_batch.len() == MRC_BATCH_MAX {
                    self.shared.observers.mrc.record(&mut self.mrc_batch);
                }
            }
        }
    }

    /// Requests until the next counted one: 1 when every request is counted, else uniform in
    /// 1..2N (mean N), so that no periodic pattern of requests aliases with the sampling.
    #[inline(never)]
    pub(super) fn hot_gap(&mut self) -> u32 {
        if self.hot_every <= 1 {
            return 1;
        }
        // xorshift64
        self.hot_rng ^= self.hot_rng << 13;
        self.hot_rng ^= self.hot_rng >> 7;
        self.hot_rng ^= self.hot_rng << 17;
        1 + (self.hot_rng % u64::from(2 * self.hot_every - 1)) as u32
    }

    /// Once per loop turn, before the worker waits: hands `stats mrc` this worker's sampled
    /// accesses and count of gets, and picks up its threshold (on, off, lowered).
    pub fn turn_mrc(&mut self) {
        self.shared.observers.mrc.record(&mut self.mrc_batch);
        self.shared.observers.mrc.publish_gets(self.worker, self.mrc_gets);
        self.mrc_threshold = self.shared.observers.mrc.threshold();
    }

    /// `watch fetchers`: a lookup of `key` that found a value of `size` bytes, or nothing.
    pub(super) fn log_get(&self, key: &[u8], size: Option<usize>) {
        let status = if size.is_some() { "found" } else { "not_found" };
        self.shared.log(
            watch::FETCHERS,
            format_args!(
                "type=item_get key={} status={status} clsid={} cfd={} size={}",
                UriKey(key),
                size.map_or(0, |size| watch::slab_class(key.len(), size)),
                self.asking_fd,
                size.unwrap_or(0)
            ),
        );
    }

    /// `watch fetchers`: memcached logs the lookup a store, delete, incr/decr or touch makes
    /// of the key's current item; so does this (a look that changes nothing, only while
    /// someone watches).
    pub(super) fn log_lookup(&self, key: &[u8]) {
        if !self.shared.observers.watchers.wants(watch::FETCHERS) || key.len() > qs_proto::KEY_BYTES_MAX {
            return;
        }
        let (hash, partition) = self.locate(key);
        if let Some(owned) = &self.partitions[partition] {
            self.log_get(key, owned.peek(hash, key, self.now));
        }
    }

    /// `watch deletions`: the value size of the item `key` names now, looked at before a
    /// delete that may log it (`None`: nobody watches, or no item).
    pub(super) fn peek_for_deletion(&self, key: &[u8]) -> Option<usize> {
        if !self.shared.observers.watchers.wants(watch::DELETIONS) || key.len() > qs_proto::KEY_BYTES_MAX {
            return None;
        }
        let (hash, partition) = self.locate(key);
        self.partitions[partition].as_ref()?.peek(hash, key, self.now)
    }

    /// `watch deletions`: memcached 1.6.20's line for an item `delete` or `md` (`command`)
    /// removed.
    pub(super) fn log_deleted(&self, key: &[u8], size: Option<usize>, command: &str) {
        let Some(size) = size else { return };
        self.shared.log(
            watch::DELETIONS,
            format_args!(
                "type=deleted key={} cmd={command} clsid={} size={size}",
                UriKey(key),
                watch::slab_class(key.len(), size),
            ),
        );
    }

    /// `watch mutations`: a store's outcome, as memcached's `item_store` line.
    pub(super) fn log_store(
        &self,
        key: &[u8],
        outcome: &Outcome,
        mode: qs_store::StoreMode,
        expiry: Expiry,
        size: usize,
    ) {
        if !self.shared.observers.watchers.wants(watch::MUTATIONS) {
            return;
        }
        let status = match outcome {
            Outcome::Stored { .. } => "stored",
            Outcome::Exists => "exists",
            Outcome::NotFound => "not_found",
            Outcome::TooLarge => "too_large",
            Outcome::OutOfMemory => "no_memory",
            _ => "not_stored",
        };
        let command = match mode {
            qs_store::StoreMode::Set => "set",
            qs_store::StoreMode::Add => "add",
            qs_store::StoreMode::Replace => "replace",
            qs_store::StoreMode::Append | qs_store::StoreMode::AppendCas(_) => "append",
            qs_store::StoreMode::Prepend | qs_store::StoreMode::PrependCas(_) => "prepend",
            _ => "cas",
        };
        let ttl = qs_proto::meta::ttl_secs(expiry, self.now).max(0);
        // An append or prepend that stored logs the joined item's size, as memcached does.
        let joined = matches!(command, "append" | "prepend") && matches!(outcome, Outcome::Stored { .. });
        let size = if joined {
            let (hash, partition) = self.locate(key);
            let peeked =
                self.partitions[partition].as_ref().and_then(|owned| owned.peek(hash, key, self.now));
            peeked.unwrap_or(size)
        } else {
            size
        };
        self.shared.log(
            watch::MUTATIONS,
            format_args!(
                "type=item_store key={} status={status} cmd={command} ttl={ttl} clsid={} cfd={} size={size}",
                UriKey(key),
                watch::slab_class(key.len(), size),
                self.asking_fd
            ),
        );
    }

    /// `watch evictions`: the items this worker's partitions evicted since the last call
    /// (recording starts when someone watches evictions, stops when no one does).
    pub fn log_evictions(&mut self) {
        let wanted = self.shared.observers.watchers.wants(watch::EVICTIONS);
        if !wanted && !self.recording_evictions {
            // The common case: one relaxed load per loop turn.
            return;
        }
        self.recording_evictions = wanted;
        for partition in self.partitions.iter_mut().flatten() {
            partition.record_evictions(wanted);
            for item in partition.take_evictions() {
                let ttl = qs_proto::meta::ttl_secs(item.expiry, self.now);
                self.shared.log(
                    watch::EVICTIONS,
                    format_args!(
                        "type=eviction key={} fetch={} ttl={ttl} la={} clsid={} size={}",
                        UriKey(&item.key),
                        if item.fetched { "yes" } else { "no" },
                        self.now.secs().saturating_sub(item.last_access_secs),
                        watch::slab_class(item.key.len(), item.value_len),
                        item.value_len
                    ),
                );
            }
        }
    }

    /// Whether keys were counted since the last publish (the worker then wakes within
    /// [`crate::observe::hotkeys::PUBLISH_EVERY`] to publish them even if it has nothing else to do).
    pub fn hot_dirty(&self) -> bool {
        self.hot.accesses() != self.hot_published_accesses
    }

    /// Once per loop turn (`now`: at once): publishes this worker's hot keys when they changed
    /// and the last publish is older than [`crate::observe::hotkeys::PUBLISH_EVERY`], and picks up
    /// `stats hotkeys on|off|sample|reset`. The clock is looked at every 16th turn while busy.
    /// Sampled counts are published scaled up by the sampling rate.
    pub fn publish_hot(&mut self, now: bool) {
        self.hot_turns = self.hot_turns.wrapping_add(1);
        if !now && self.hot_turns % 16 != 0 && self.hot_every == self.shared.observers.hotkeys.every() {
            return;
        }
        let every = self.shared.observers.hotkeys.every();
        if self.hot_every != every {
            self.hot_every = every;
            self.hot_countdown = self.hot_gap();
        }
        let generation = self.shared.observers.hotkeys.generation();
        if generation != self.hot_generation {
            self.hot_generation = generation;
            self.hot.clear();
            self.hot_published_accesses = 0;
            return;
        }
        if !self.hot_dirty()
            || !(now || self.hot_published.elapsed() >= crate::observe::hotkeys::PUBLISH_EVERY)
        {
            return;
        }
        self.hot_published = std::time::Instant::now();
        self.hot_published_accesses = self.hot.accesses();
        let scale = u64::from(self.hot_every.max(1));
        let mut top = self.hot.top();
        for hot in &mut top {
            hot.count *= scale;
            hot.error *= scale;
        }
        self.shared.observers.hotkeys.publish(self.worker, top);
    }

    /// Publishes this worker's partition figures and counters for `stats`.
    pub fn publish(&self) {
        for (index, partition) in self.partitions.iter().enumerate() {
            if let Some(partition) = partition {
                self.shared.published.set_partition(index, partition.stats_snapshot());
                if let Some(figures) = partition.flash_stats() {
                    let bit = 1u64 << (index % 64);
                    if figures.0.failed && self.flash_off_said.get() & bit == 0 {
                        self.flash_off_said.set(self.flash_off_said.get() | bit);
                        eprintln!(
                            "quicksilver: partition {index}: a flash write failed; its flash tier is off \
                             (items leaving DRAM are evicted, flash items still in place answer; stats: extstore_failed)"
                        );
                    }
                    self.shared.published.set_flash(index, figures);
                }
            }
        }
        let mut published = self.shared.published.worker(self.worker);
        published.counters = self.counters;
        published.remote_reads.clone_from(&self.remote_reads);
    }
}

/// The value of a text `get`'s hit (`VALUE <key> <flags> <bytes>\r\n<data>\r\nEND\r\n`), as the
/// front cache keeps it; `None` if it is not one.
fn text_hit_value(reply: &[u8]) -> Option<&[u8]> {
    let line_end = reply.windows(2).position(|pair| pair == b"\r\n")?;
    let bytes = reply[..line_end].rsplit(|&byte| byte == b' ').next()?;
    let len: usize = std::str::from_utf8(bytes).ok()?.parse().ok()?;
    reply.get(line_end + 2..line_end + 2 + len)
}
