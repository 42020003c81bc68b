//! What the request path records besides its reply: the front cache (`-o front_cache`), hot
//! keys and the live miss-ratio sample (handed to the worker's `observe::sampler::Sampler`),
//! `watch` lines, and the counters published once per loop turn.

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
        access: (bool, impl FnOnce() -> qs_store::mrc::Access),
    ) {
        self.sampler.offer(&self.shared.observers.mrc, hash, key, access);
    }

    /// Once per loop turn, before the worker waits: hands `stats mrc` this worker's sampled
    /// accesses and count of gets, and picks up its threshold.
    pub fn turn_mrc(&mut self) {
        self.sampler.turn_mrc(&self.shared.observers.mrc);
    }

    /// `watch fetchers`: a lookup of `key` for the connection `fd` that found a value of
    /// `size` bytes, or nothing.
    pub(super) fn log_get(&self, key: &[u8], size: Option<usize>, fd: i32) {
        let status = if size.is_some() { "found" } else { "not_found" };
        self.shared.log(
            watch::FETCHERS,
            format_args!(
                "type=item_get key={} status={status} clsid={} cfd={} size={}",
                UriKey(key),
                size.map_or(0, |size| watch::slab_class(key.len(), size)),
                fd,
                size.unwrap_or(0)
            ),
        );
    }

    /// `watch fetchers`: memcached logs the lookup a store, delete, incr/decr or touch makes
    /// of the key's current item; so does this (a look that changes nothing, only while
    /// someone watches), for the connection `fd`.
    pub(super) fn log_lookup(&self, key: &[u8], fd: i32) {
        if !self.shared.observers.watchers.wants(watch::FETCHERS) || key.len() > qs_proto::KEY_BYTES_MAX {
            return;
        }
        let (hash, partition) = self.locate(key);
        if let Some(owned) = &self.partitions[partition] {
            self.log_get(key, owned.peek(hash, key, self.now), fd);
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

    /// `watch mutations`: a store's outcome, as memcached's `item_store` line, for the
    /// connection `fd`.
    pub(super) fn log_store(
        &self,
        key: &[u8],
        (outcome, mode): (&Outcome, qs_store::StoreMode),
        expiry: Expiry,
        size: usize,
        fd: i32,
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
                fd
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

    /// Whether keys were counted since the last publish ([`crate::observe::sampler::Sampler::hot_dirty`]).
    pub fn hot_dirty(&self) -> bool {
        self.sampler.hot_dirty()
    }

    /// Once per loop turn (`now`: at once): publishes this worker's hot keys when due
    /// ([`crate::observe::sampler::Sampler::publish_hot`]).
    pub fn publish_hot(&mut self, now: bool) {
        self.sampler.publish_hot(&self.shared.observers.hotkeys, now);
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
