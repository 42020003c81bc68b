//! A long `set` received straight into the log (session::Arriving): started where this worker
//! owns the key, fed the value's bytes as they arrive, then linked, counted, logged and
//! answered as the one executor (run.rs) answers a text `set`.

use super::*;
use crate::session::Arriving;
use qs_proto::command::Answer;

impl Engine {
    /// Starts the text `set` at the front of `pending` (`request`, parsed from its command line
    /// alone, and `len`, its whole frame) as a value received into the log, when its key's
    /// partition is this worker's and takes it; `None` for the ordinary path (its bytes read
    /// into the connection's input). With it, the length of the command line, now done with.
    pub fn begin_arriving(
        &mut self,
        request: &Request<'_>,
        pending: &[u8],
        len: usize,
    ) -> Option<(Box<Arriving>, usize)> {
        let Request::TooLarge { mode: qs_proto::StoreMode::Set, key, noreply } = *request else {
            return None;
        };
        let line_len = pending.iter().position(|&byte| byte == b'\n')? + 1;
        let line = pending[..line_len - 1].strip_suffix(b"\r").unwrap_or(&pending[..line_len - 1]);
        let (flags, exptime) = qs_proto::text::store_fields(line)?;
        let value_len = len.checked_sub(line_len + 2)?;
        let key = self.key(key, None);
        let expiry = self.exptime(i64::from(exptime));
        let now = self.now;
        let partition = self.partitions[key.partition].as_mut()?;
        let record = partition.begin_arriving((key.hash, key.bytes), value_len, (flags, expiry), now)?;
        let arriving =
            Arriving { record, partition: key.partition, exptime: i64::from(exptime), noreply, lost: false };
        Some((Box::new(arriving), line_len))
    }

    /// Writes the next of the value's bytes into its record: how many of `bytes` it took (at
    /// most what remains of the value). Once the record is lost, the rest is swallowed.
    pub fn fill_arriving(&mut self, arriving: &mut Arriving, bytes: &[u8]) -> usize {
        let take = bytes.len().min(arriving.remaining());
        if !arriving.lost {
            let partition = self.partitions[arriving.partition].as_mut().expect("an owned partition");
            arriving.lost = !partition.fill_arriving(&mut arriving.record, &bytes[..take]);
        }
        if arriving.lost {
            arriving.record.skip(take);
        }
        take
    }

    /// Ends the set once its value is in and the two bytes after it have arrived (`ended`:
    /// they were `\r\n`), for the connection `fd`, appending its reply to `out`.
    pub fn finish_arriving(&mut self, arriving: Arriving, (ended, fd): (bool, i32), out: &mut Vec<u8>) {
        let Arriving { record, partition, exptime, noreply, lost } = arriving;
        if !ended {
            // As the parser refuses a whole frame: nothing is stored, nothing counted.
            if !noreply {
                out.extend_from_slice(qs_proto::text::BAD_DATA_CHUNK.as_bytes());
            }
            return;
        }
        let answer = Answer::Text { noreply, with_cas: false };
        let owned_key: Box<[u8]> = record.key().into();
        let key = Key { bytes: &owned_key, hash: record.hash(), partition };
        let value_len = record.len();
        self.counters.cmd_set += 1;
        self.shared.observers.detail.record_set(&key);
        self.log_lookup(&key, fd);
        let expiry = self.exptime(exptime);
        let ext = qs_store::item::Ext::new(0, expiry).bytes();
        let size = qs_store::item::item_bytes(key.len(), value_len, ext) as u64;
        self.offer_access(key.hash, &key, (false, || qs_store::mrc::Access::Set(size)));
        if let Some(epochs) = self.shared.front_epochs.get(partition) {
            epochs.bump(key.hash.0);
        }
        let now = self.now;
        let owner = self.partitions[partition].as_mut().expect("an owned partition");
        let outcome = if lost { Outcome::OutOfMemory } else { owner.finish_arriving(record, now) };
        if matches!(outcome, Outcome::Stored { .. }) {
            self.shared.watches.touch(&key);
        }
        if matches!(outcome, Outcome::OutOfMemory) {
            // As memcached, a set it cannot store leaves no old value behind.
            self.counters.store_no_memory += 1;
            self.drop_refused(&key);
        }
        self.log_store(&key, (&outcome, qs_store::StoreMode::Set), expiry, value_len, fd);
        let cas = match outcome {
            Outcome::Stored { cas } => self.cas_out(cas),
            _ => 0,
        };
        answer.store(&outcome, (cas, value_len, qs_store::StoreMode::Set), out);
    }
}
