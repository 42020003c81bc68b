//! The Redis protocol's commands that read a key and then write it, run at the key's owner
//! ([`qs_proto::resp::owned`]): the current item is read as it stands, then stored, touched or
//! deleted through the one executor. Only the owner writes its partitions, so no other write
//! comes between the read and the write; a CREW reader sees the item before or after.

use super::*;
use qs_proto::command::{self as cmd, Answer, RespReply};
use qs_proto::resp::owned::{format_float, Owned, Step, When};
use qs_proto::resp::reply;

/// The item as it stood: its value, flags and expiry (0: never).
pub(super) struct Current {
    pub value: Vec<u8>,
    pub flags: u32,
    pub expiry: Expiry,
    /// Last read or written, unix seconds.
    pub last_access: u32,
}

/// OBJECT FREQ's refusal, as redis-server's under an LRU policy (CONFIG GET maxmemory-policy
/// answers allkeys-lru here).
const LFU_NOT_SELECTED: &[u8] = b"-ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.\r\n";

/// RENAME or COPY of keys that more than one worker owns.
pub(super) const SPREAD: &[u8] = b"-ERR RENAME, COPY, LMOVE and SMOVE of keys owned by more than one worker are not served (give both keys one hash tag, or run with -t 1)\r\n";

impl Engine {
    /// Runs a RESP command of a few steps on one key (routed to its owner; GETRANGE and
    /// EXPIRETIME, which only read, may run at a CREW reader).
    /// `resp3`: the connection speaks RESP3 (its nulls are `_`); `fd` is its descriptor
    /// (`watch` lines).
    pub(in crate::exec) fn resp_owned(
        &mut self,
        owned: &Owned<'_>,
        (resp3, fd): (bool, i32),
        out: &mut Vec<u8>,
    ) {
        let Owned { key, step } = *owned;
        if key.is_empty() || key.len() > qs_proto::RESP_KEY_BYTES_MAX {
            return out.extend_from_slice(reply::BAD_KEY);
        }
        let key = self.key(key, None);
        let readable =
            self.owns(key.partition) || self.crew && self.shared.map.reader(key.partition).is_some();
        if !readable {
            // A RENAME or COPY of keys of several workers where its source cannot be read.
            return out.extend_from_slice(SPREAD);
        }
        let current = self.current(key);
        let string_only = matches!(
            step,
            Step::GetDel
                | Step::Set { get: true, .. }
                | Step::GetRange { .. }
                | Step::SetRange { .. }
                | Step::IncrByFloat(_)
                | Step::GetExRefused { .. }
        );
        if string_only
            && current.as_ref().is_some_and(|item| qs_proto::resp::collection::is_collection(item.flags))
        {
            return out.extend_from_slice(qs_proto::resp::collection::WRONGTYPE);
        }
        match step {
            Step::GetDel => {
                self.counters.cmd_get += 1;
                if current.is_some() {
                    let answer = Answer::Resp(RespReply::Deleted);
                    self.delete_command(key, &cmd::Delete::default(), (answer, fd));
                }
                bulk_or_null(current.as_ref().map(|item| &item.value[..]), resp3, out);
            }
            Step::Set { value, mode, exptime, get } => {
                let exptime = exptime.unwrap_or_else(|| keep(current.as_ref()));
                let outcome = self.put(key, value, (mode, fd), exptime);
                match (get, reply::refused(&outcome)) {
                    (_, Some(text)) => out.extend_from_slice(text),
                    (true, None) => bulk_or_null(current.as_ref().map(|item| &item.value[..]), resp3, out),
                    (false, None) => {
                        let wording = if resp3 { RespReply::Ok3 } else { RespReply::Ok };
                        reply::store(wording, &outcome, value.len(), out);
                    }
                }
            }
            Step::MemoryUsage | Step::IdleTime | Step::Freq | Step::Encoding | Step::RefCount => {
                self.describe(step, key.bytes.len(), current.as_ref(), resp3, out);
            }
            Step::GetExRefused { not_integer } => match current {
                None => out.extend_from_slice(reply::null(resp3)),
                Some(_) if not_integer => out.extend_from_slice(reply::NOT_INTEGER),
                Some(_) => out.extend_from_slice(b"-ERR invalid expire time in 'getex' command\r\n"),
            },
            Step::Persist => {
                let had = current.as_ref().is_some_and(|item| item.expiry != Expiry::NEVER);
                if had {
                    self.run(key, PartitionCommand::SetExpiry { expiry: Expiry::NEVER }, &mut Vec::new());
                }
                reply::integer(i64::from(had), out);
            }
            Step::Expire { exptime, when } => {
                self.expire_when((key, fd), current.as_ref(), (exptime, when), out)
            }
            Step::ExpireTime { millis } => {
                let at = match &current {
                    None => -2,
                    Some(item) if item.expiry == Expiry::NEVER => -1,
                    // EXPIRETIME rounds to the nearest second, as redis-server does.
                    Some(item) if millis => item.expiry.ms() as i64,
                    Some(item) => (item.expiry.ms() as i64 + 500) / 1000,
                };
                reply::integer(at, out);
            }
            Step::GetRange { start, end } => {
                let value = current.as_ref().map_or(&[][..], |item| &item.value[..]);
                reply::bulk(range(value, start, end), out);
            }
            Step::SetRange { offset, value } => self.setrange((key, fd), current, (offset, value), out),
            Step::IncrByFloat(by) => self.incrbyfloat((key, fd), current, by, out),
            Step::Rename { to, nx, moving } => self.rename((key, fd), current, (to, nx, moving), out),
            Step::Copy { to, replace } => self.copy(current, (to, replace), fd, out),
            Step::Collection(command) => match command.kind() {
                qs_proto::resp::collection::Kind::Hash => {
                    self.hash_command((key, fd), current, (command, resp3), out)
                }
                qs_proto::resp::collection::Kind::List => {
                    self.list_command((key, fd), current, (command, resp3), out)
                }
                qs_proto::resp::collection::Kind::Set => {
                    self.set_command((key, fd), current, (command, resp3), out)
                }
                qs_proto::resp::collection::Kind::Zset => {
                    self.zset_command((key, fd), current, (command, resp3), out)
                }
            },
        }
    }

    /// The second key of RENAME or COPY, when this worker owns it too.
    pub(super) fn second_key<'k>(&self, to: &'k [u8], out: &mut Vec<u8>) -> Option<Key<'k>> {
        if to.is_empty() || to.len() > qs_proto::RESP_KEY_BYTES_MAX {
            out.extend_from_slice(reply::BAD_KEY);
            return None;
        }
        let to = self.key(to, None);
        if !self.owns(to.partition) {
            out.extend_from_slice(SPREAD);
            return None;
        }
        Some(to)
    }

    /// RENAME and RENAMENX: the item moves to `to` (flags and expiry with it).
    fn rename(
        &mut self,
        (key, fd): (Key<'_>, i32),
        current: Option<Current>,
        (to, nx, moving): (&[u8], bool, bool),
        out: &mut Vec<u8>,
    ) {
        let Some(to) = self.second_key(to, out) else { return };
        if !self.owns(key.partition) {
            return out.extend_from_slice(SPREAD);
        }
        let Some(current) = current else {
            if moving {
                return reply::integer(0, out);
            }
            return out.extend_from_slice(b"-ERR no such key\r\n");
        };
        if key.bytes == to.bytes {
            return out.extend_from_slice(if nx { b":0\r\n" } else { reply::OK });
        }
        if nx && self.current(to).is_some() {
            return reply::integer(0, out);
        }
        let outcome = self.put_item(to, &current, (StoreMode::Set, fd));
        if let Some(text) = reply::refused(&outcome) {
            return out.extend_from_slice(text);
        }
        self.delete_command(key, &cmd::Delete::default(), (Answer::Resp(RespReply::Deleted), fd));
        if nx {
            reply::integer(1, out);
        } else {
            out.extend_from_slice(reply::OK);
        }
    }

    /// COPY: `:1` when the item was copied to `to` (flags and expiry with it).
    fn copy(&mut self, current: Option<Current>, (to, replace): (&[u8], bool), fd: i32, out: &mut Vec<u8>) {
        let Some(to) = self.second_key(to, out) else { return };
        let Some(current) = current else {
            return reply::integer(0, out);
        };
        let mode = if replace { StoreMode::Set } else { StoreMode::Add };
        let outcome = self.put_item(to, &current, (mode, fd));
        match reply::refused(&outcome) {
            Some(text) => out.extend_from_slice(text),
            None => reply::integer(i64::from(matches!(outcome, Outcome::Stored { .. })), out),
        }
    }

    /// Stores `item`'s value, flags and expiry under `key`.
    fn put_item(&mut self, key: Key<'_>, item: &Current, asked: (StoreMode, i32)) -> Outcome {
        self.store_value(key, (&item.value, item.flags), asked, keep(Some(item)))
    }

    /// The key's item as it stands, if it is there.
    pub(super) fn current(&mut self, key: Key<'_>) -> Option<Current> {
        match self.read_unchanged(key) {
            Outcome::Hit(hit) => {
                let (flags, expiry, last_access) = (hit.flags, hit.expiry, hit.last_access_secs);
                Some(Current { value: self.scratch.clone(), flags, expiry, last_access })
            }
            _ => None,
        }
    }

    /// MEMORY USAGE (the bytes its item takes in the log: header, flags and expiry where set,
    /// key and value to a whole word), OBJECT IDLETIME and OBJECT FREQ of a key (`current`, or
    /// none: null).
    fn describe(
        &self,
        step: Step<'_>,
        key_len: usize,
        current: Option<&Current>,
        resp3: bool,
        out: &mut Vec<u8>,
    ) {
        let Some(item) = current else { return out.extend_from_slice(reply::null(resp3)) };
        match step {
            Step::MemoryUsage => {
                let ext = qs_store::item::Ext::new(item.flags, item.expiry).bytes();
                reply::integer(qs_store::item::item_bytes(key_len, item.value.len(), ext) as i64, out);
            }
            Step::IdleTime => {
                reply::integer(i64::from(self.now.secs().saturating_sub(item.last_access)), out)
            }
            Step::RefCount => reply::integer(1, out),
            Step::Encoding => {
                let setting = |slot: usize| {
                    self.shared.encoding_settings[slot].load(std::sync::atomic::Ordering::Relaxed)
                };
                reply::bulk(
                    encoding(item, [setting(0), setting(1), setting(2), setting(3), setting(4)]).as_bytes(),
                    out,
                )
            }
            _ => out.extend_from_slice(LFU_NOT_SELECTED),
        }
    }

    /// A store of `value` with flags 0, counted and logged as any store.
    fn put(&mut self, key: Key<'_>, value: &[u8], asked: (StoreMode, i32), exptime: i64) -> Outcome {
        self.store_value(key, (value, 0), asked, exptime)
    }

    /// A store of `value` and its client `flags` for a Redis command (0 unless an item's own are kept),
    /// through the one executor: counted and logged as any store (for the connection `fd`).
    pub(super) fn store_value(
        &mut self,
        key: Key<'_>,
        (value, flags): (&[u8], u32),
        (mode, fd): (StoreMode, i32),
        exptime: i64,
    ) -> Outcome {
        let store = cmd::Store {
            mode,
            flags,
            exptime,
            data: value,
            vivify: None,
            cas_in: None,
            drops_refused: false,
        };
        self.store(key, &store, (Answer::Resp(RespReply::Ok), fd), &mut Vec::new())
    }

    /// EXPIRE with NX, XX, GT or LT: `:1` when the key took the new expiry (one in the past
    /// deletes it, as redis-server does).
    fn expire_when(
        &mut self,
        (key, fd): (Key<'_>, i32),
        current: Option<&Current>,
        (exptime, when): (i64, When),
        out: &mut Vec<u8>,
    ) {
        let Some(current) = current else {
            return reply::integer(0, out);
        };
        let expiry = self.exptime(exptime);
        if !when.allows(current.expiry.ms(), expiry.ms()) {
            return reply::integer(0, out);
        }
        if expiry.is_expired(self.now) {
            self.delete_command(key, &cmd::Delete::default(), (Answer::Resp(RespReply::Deleted), fd));
        } else {
            self.counters.cmd_touch += 1;
            self.run(key, PartitionCommand::Touch { expiry }, &mut Vec::new());
        }
        reply::integer(1, out);
    }

    /// SETRANGE: the value with `value` written at `offset` (zero bytes up to it), its expiry
    /// kept; an empty `value` changes nothing. The length after.
    fn setrange(
        &mut self,
        (key, fd): (Key<'_>, i32),
        current: Option<Current>,
        (offset, value): (usize, &[u8]),
        out: &mut Vec<u8>,
    ) {
        let exptime = keep(current.as_ref());
        let mut bytes = current.map_or_else(Vec::new, |item| item.value);
        if value.is_empty() {
            return reply::integer(bytes.len() as i64, out);
        }
        let end = offset + value.len();
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[offset..end].copy_from_slice(value);
        match reply::refused(&self.put(key, &bytes, (StoreMode::Set, fd), exptime)) {
            Some(text) => out.extend_from_slice(text),
            None => reply::integer(bytes.len() as i64, out),
        }
    }

    /// INCRBYFLOAT: the value read as a float plus `by`, stored as redis-server writes it,
    /// its expiry kept.
    fn incrbyfloat(
        &mut self,
        (key, fd): (Key<'_>, i32),
        current: Option<Current>,
        by: f64,
        out: &mut Vec<u8>,
    ) {
        let exptime = keep(current.as_ref());
        let base = match &current {
            None => 0.0,
            Some(item) => match qs_proto::resp::owned::float(&item.value) {
                Some(value) => value,
                None => return out.extend_from_slice(b"-ERR value is not a valid float\r\n"),
            },
        };
        let sum = base + by;
        if !sum.is_finite() {
            return out.extend_from_slice(b"-ERR increment would produce NaN or Infinity\r\n");
        }
        let mut text = Vec::with_capacity(24);
        format_float(sum, &mut text);
        match reply::refused(&self.put(key, &text, (StoreMode::Set, fd), exptime)) {
            Some(refusal) => out.extend_from_slice(refusal),
            None => reply::bulk(&text, out),
        }
    }
}

/// The exptime that keeps an item's expiry: its unix time in milliseconds (which the store
/// reads as one), or 0 for none.
pub(super) fn keep(current: Option<&Current>) -> i64 {
    current.map_or(0, |item| item.expiry.ms() as i64)
}

/// OBJECT ENCODING's answer: the encoding redis-server would report for the value as it is now
/// (this server keeps every collection in one compact form, qs_proto::resp::collection). A
/// hash is `listpack` while it has at most `hash-max-listpack-entries` fields and no field
/// or value longer than `hash-max-listpack-value` bytes (`limits`), else `hashtable`; a
/// string is named by its length and whether it is an integer, as SET stores it (`int` for an
/// integer of at most 20 characters, `embstr` up to 44 bytes, longer `raw`).
fn encoding(item: &Current, limits: [i64; 5]) -> &'static str {
    use qs_proto::resp::collection::{elements, Kind};
    match Kind::of_flags(item.flags) {
        Some(Kind::List) => return "quicklist",
        Some(Kind::Set) => {
            let members = elements(&item.value).unwrap_or_default();
            let intset = members.len() <= limits[2].max(0) as usize
                && members.iter().all(|member| qs_proto::resp::command::integer(member).is_some());
            return if intset { "intset" } else { "hashtable" };
        }
        Some(Kind::Zset) => {
            let elements = elements(&item.value).unwrap_or_default();
            let small = elements.len() / 2 <= limits[3].max(0) as usize
                && elements.iter().step_by(2).all(|member| member.len() <= limits[4].max(0) as usize);
            return if small { "listpack" } else { "skiplist" };
        }
        _ => {}
    }
    if qs_proto::resp::collection::is_collection(item.flags) {
        let elements = qs_proto::resp::collection::elements(&item.value).unwrap_or_default();
        let small = elements.len() / 2 <= limits[0].max(0) as usize
            && elements.iter().all(|element| element.len() <= limits[1].max(0) as usize);
        return if small { "listpack" } else { "hashtable" };
    }
    match item.value.len() {
        0..=20 if qs_proto::resp::command::integer(&item.value).is_some() => "int",
        0..=44 => "embstr",
        _ => "raw",
    }
}

fn bulk_or_null(value: Option<&[u8]>, resp3: bool, out: &mut Vec<u8>) {
    match value {
        Some(value) => reply::bulk(value, out),
        None => out.extend_from_slice(reply::null(resp3)),
    }
}

/// GETRANGE's bytes of `value`, as t_string.c's getrangeCommand picks them: negative indexes
/// count from the end, both ends inclusive, clamped to the value.
fn range(value: &[u8], start: i64, end: i64) -> &[u8] {
    let len = value.len() as i64;
    if start < 0 && end < 0 && start > end {
        return &[];
    }
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { (len + end).max(0) } else { end };
    let end = end.min(len - 1);
    if len == 0 || start > end {
        return &[];
    }
    &value[start as usize..=end as usize]
}

#[cfg(test)]
mod tests {
    use super::range;

    #[test]
    fn ranges_are_picked_as_redis_picks_them() {
        assert_eq!(range(b"Hello World", 0, 3), b"Hell");
        assert_eq!(range(b"Hello World", 0, -1), b"Hello World");
        assert_eq!(range(b"Hello World", -3, -1), b"rld");
        assert_eq!(range(b"Hello World", 5, 3), b"");
        assert_eq!(range(b"Hello World", 5, 5000), b" World");
        assert_eq!(range(b"Hello World", -5000, 10000), b"Hello World");
        assert_eq!(range(b"Hello World", -1, -5), b"");
        assert_eq!(range(b"", 0, -1), b"");
        assert_eq!(range(b"abc", 3, 3), b"");
    }
}
