//! The flash tier seen from the engine: which keys of a request must be read from flash first,
//! the reads resolved for the request about to run again, and the partial page written out.

use super::*;

impl Engine {
    /// Whether the partitions have flash tiers.
    #[inline]
    pub fn flash_on(&self) -> bool {
        self.flash_on
    }

    /// The keys of `request` (to run here) whose records are on flash and must be read before
    /// it runs, appended to `keys`; none without a flash tier.
    pub fn flash_probe(&self, request: &Request<'_>, keys: &mut Vec<FlashKey>) {
        if !self.flash_on {
            return;
        }
        if let Request::Get { kind, keys: line, .. } = *request {
            let plain_get = matches!(kind, GetKind::Get | GetKind::Gets);
            qs_proto::tokens::words(line).for_each(|key| self.probe_key(key, plain_get, keys));
        } else if let Some(command) = request.key_command(&self.limits) {
            self.flash_probe_command(&command, keys);
        }
    }

    /// As [`Engine::flash_probe`], for a command on one key. A text `set` needs no read (it
    /// drops the key's flash copies), nor does a store refused for its size.
    pub fn flash_probe_command(&self, command: &qs_proto::command::Command<'_>, keys: &mut Vec<FlashKey>) {
        use qs_proto::command::{Answer, Get, Op};
        if !self.flash_on {
            return;
        }
        let text = matches!(command.answer, Answer::Text { .. });
        let plain_get = match command.op {
            Op::Get(get) => get == Get::default() && !matches!(command.answer, Answer::Meta(_)),
            Op::Store(store) if text && store.mode == StoreMode::Set => return,
            Op::TooLarge { .. } => return,
            _ => false,
        };
        self.probe_key(command.key, plain_get, keys);
    }

    /// Appends `key` to `keys` when its record is on flash (and it is not known already).
    fn probe_key(&self, key: &[u8], plain_get: bool, keys: &mut Vec<FlashKey>) {
        if key.len() > qs_proto::KEY_BYTES_MAX {
            return;
        }
        let (hash, partition) = self.locate(key);
        if self.flash_resolved.iter().any(|resolved| resolved.hash == hash)
            || keys.iter().any(|known| known.hash == hash)
        {
            return;
        }
        let Some(owned) = &self.partitions[partition] else { return };
        if let Some(read) = owned.flash_probe(hash, key, self.now) {
            keys.push(FlashKey { partition, hash, key: key.to_vec(), read, plain_get });
        }
    }

    /// `-e` with a flash tier: writes each owned partition's flash page as far as it holds
    /// (see [`qs_store::Partition::flash_write_partial`]).
    pub fn flash_write_partial(&mut self) {
        if self.flash_on {
            for partition in self.partitions.iter_mut().flatten() {
                partition.flash_write_partial();
            }
        }
    }

    /// The native protocol's flash path: when `key`'s record is on flash, reads it now (the
    /// worker waits for this one read: a page-cache copy, or the device's latency) and brings
    /// the item back to DRAM, so that the command run next finds it. A failed read counts as
    /// a flash miss and leaves the key as it was.
    pub fn flash_load_now(&mut self, hash: KeyHash, partition: usize, key: &[u8]) {
        if !self.flash_on {
            return;
        }
        let now = self.now;
        let Some(owned) = self.partitions[partition].as_mut() else { return };
        let Some(mut read) = owned.flash_probe(hash, key, now) else { return };
        // A record longer than the first read asks for one more read of its whole length.
        for _ in 0..2 {
            let record = match owned.flash_place(read.offset, read.len) {
                None => Vec::new(),
                Some(qs_store::flash::Place::Buffer(bytes)) => {
                    let bytes = bytes.to_vec();
                    owned.flash_count_read(bytes.len(), true);
                    bytes
                }
                Some(qs_store::flash::Place::File(position)) => {
                    let mut bytes = Vec::with_capacity(read.len);
                    let direct = owned.flash_is_direct();
                    let read_ok = owned.flash_file().is_some_and(|file| {
                        qs_store::flash::read_at(&file, position, read.len, direct, &mut bytes)
                    });
                    if read_ok {
                        owned.flash_count_read(bytes.len(), false);
                    } else {
                        bytes.clear();
                    }
                    bytes
                }
            };
            if record.is_empty() {
                owned.flash_read_failed();
                return;
            }
            match owned.flash_resolve(hash, key, read, &record, now, false) {
                qs_store::Resolved::NeedBytes(len) if len > read.len => read.len = len,
                _ => return,
            }
        }
    }

    /// Forgets the flash keys resolved for the request that has now run.
    #[inline]
    pub fn flash_forget(&mut self) {
        if !self.flash_resolved.is_empty() {
            self.flash_resolved.clear();
        }
    }

    /// A plain get of a key whose record was read from flash and is to be served from it;
    /// `None` when there is none (or it stopped being the key's: run as usual).
    pub(super) fn read_flash(
        &mut self,
        hash: KeyHash,
        partition: usize,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<Outcome> {
        let at = self
            .flash_resolved
            .iter()
            .position(|resolved| resolved.hash == hash && resolved.serve.is_some())?;
        let (read, record) = self.flash_resolved[at].serve.take()?;
        let owned = self.partitions[partition].as_mut()?;
        let request = qs_store::PartitionRequest { key, hash, command: PartitionCommand::Get };
        match owned.serve_from_flash(&request, read, &record, self.now, out) {
            Some(Ok(outcome)) => Some(outcome),
            _ => None,
        }
    }
}
