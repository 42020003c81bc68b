//! Real traces, read as streams (a trace larger than memory replays in constant memory):
//!
//! - Twitter's cache traces (github.com/twitter/cache-trace): CSV lines of timestamp,
//!   anonymised key, key size, value size, client id, operation, TTL.
//! - libCacheSim's oracleGeneral binary format: little-endian 24-byte records of a u32
//!   timestamp, a u64 object id, a u32 object size and an i64 next-access time (ignored). Every
//!   record is a read. Compressed files (`.zst`) must be decompressed first (`zstd -d`).
//! - The server's own `watch fetchers mutations` stream (memcached's format): `type=item_get`
//!   lines are gets, `type=item_store` lines with `status=stored` are sets. As memcached does,
//!   the server logs the lookup a store makes as an `item_get` line just before its
//!   `item_store`; that lookup is not a client's get and is dropped. A get that found nothing
//!   logs `size=0`: the key's last known size is used for it.

use crate::stream::{Access, Op};
use std::io::{self, BufRead};

/// Which format a trace is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Twitter's CSV.
    Twitter,
    /// libCacheSim's oracleGeneral.
    OracleGeneral,
    /// quicksilver's (and memcached's) `watch fetchers mutations` lines.
    Watch,
}

/// A trace being read. Timestamps start at 0 with the first record.
pub struct Trace<R> {
    input: R,
    format: Format,
    /// Key bytes for formats that do not record them.
    key_size: u16,
    first_time: Option<u64>,
    line: String,
    line_number: u64,
    /// Watch: a get held back until the next line shows whether it was a store's lookup.
    pending: Option<(Access, u64)>,
    /// Watch: each key's last known value size.
    sizes: std::collections::HashMap<u64, u32>,
}

impl<R: BufRead> Trace<R> {
    /// Reads `format` from `input`; `key_size` is used where the format has no key size.
    pub fn new(input: R, format: Format, key_size: u16) -> Trace<R> {
        Trace {
            input,
            format,
            key_size,
            first_time: None,
            line: String::new(),
            line_number: 0,
            pending: None,
            sizes: std::collections::HashMap::new(),
        }
    }

    fn relative(&mut self, time: u64) -> u32 {
        let first = *self.first_time.get_or_insert(time);
        time.saturating_sub(first).min(u64::from(u32::MAX)) as u32
    }

    fn next_twitter(&mut self) -> Option<io::Result<Access>> {
        loop {
            self.line.clear();
            match self.input.read_line(&mut self.line) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(error) => return Some(Err(error)),
            }
            self.line_number += 1;
            let line = self.line.trim_end();
            if line.is_empty() {
                continue;
            }
            return Some(self.parse_twitter().map_err(|what| {
                io::Error::new(io::ErrorKind::InvalidData, format!("trace line {}: {what}", self.line_number))
            }));
        }
    }

    fn parse_twitter(&mut self) -> Result<Access, String> {
        let line = self.line.trim_end().to_string();
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != 7 {
            return Err(format!("{} fields, not the 7 of Twitter's format: {line:?}", fields.len()));
        }
        let number = |index: usize, name: &str| {
            fields[index].parse::<u64>().map_err(|_| format!("{name} {:?} is not a number", fields[index]))
        };
        let time = number(0, "timestamp")?;
        let key_size = number(2, "key size")?;
        let value_size = number(3, "value size")?;
        let ttl = number(6, "TTL")?;
        let op = match fields[5] {
            "get" | "gets" => Op::Get,
            "set" | "add" | "replace" | "cas" | "append" | "prepend" | "incr" | "decr" => Op::Set,
            "delete" => Op::Delete,
            other => return Err(format!("unknown operation {other:?}")),
        };
        Ok(Access {
            time: self.relative(time),
            key: xxhash_rust::xxh3::xxh3_64(fields[1].as_bytes()),
            key_size: key_size.clamp(1, 250) as u16,
            value_size: value_size.min(u64::from(u32::MAX)) as u32,
            op,
            ttl: ttl.min(u64::from(u32::MAX)) as u32,
        })
    }

    fn next_oracle(&mut self) -> Option<io::Result<Access>> {
        let mut record = [0u8; 24];
        let mut filled = 0;
        while filled < record.len() {
            match self.input.read(&mut record[filled..]) {
                Ok(0) if filled == 0 => return None,
                Ok(0) => {
                    return Some(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("trace ends inside a record ({filled} of 24 bytes)"),
                    )))
                }
                Ok(n) => filled += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Some(Err(error)),
            }
        }
        let time = u32::from_le_bytes(record[0..4].try_into().expect("4 bytes"));
        let id = u64::from_le_bytes(record[4..12].try_into().expect("8 bytes"));
        let size = u32::from_le_bytes(record[12..16].try_into().expect("4 bytes"));
        let time = self.relative(u64::from(time));
        Some(Ok(Access { time, key: id, key_size: self.key_size, value_size: size, op: Op::Get, ttl: 0 }))
    }
}

/// One parsed watch line: (access, its connection, whether a store stored), or nothing for
/// lines that are neither gets nor stores.
type WatchLine = Option<(Access, u64, bool)>;

impl<R: BufRead> Trace<R> {
    fn next_watch(&mut self) -> Option<io::Result<Access>> {
        loop {
            self.line.clear();
            match self.input.read_line(&mut self.line) {
                Ok(0) => return self.pending.take().map(|(access, _)| Ok(access)),
                Ok(_) => {}
                Err(error) => return Some(Err(error)),
            }
            self.line_number += 1;
            let parsed = match self.parse_watch() {
                Ok(parsed) => parsed,
                Err(what) => {
                    return Some(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("watch line {}: {what}", self.line_number),
                    )))
                }
            };
            let Some((access, connection, stored)) = parsed else { continue };
            let held = self.pending.take();
            if access.op == Op::Get {
                self.pending = Some((access, connection));
                if let Some((get, _)) = held {
                    return Some(Ok(get));
                }
                continue;
            }
            // A store: the get just before it on its connection, of its key, was its lookup.
            // A store that stored nothing is no access of its own.
            match held {
                Some((get, from)) if get.key == access.key && from == connection => {}
                Some((get, _)) if stored => {
                    self.pending = Some((access, connection));
                    return Some(Ok(get));
                }
                Some((get, _)) => return Some(Ok(get)),
                None => {}
            }
            if stored {
                return Some(Ok(access));
            }
        }
    }

    fn parse_watch(&mut self) -> Result<WatchLine, String> {
        let line = self.line.trim_end();
        let field = |name: &str| {
            line.split(' ').find_map(|part| part.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
        };
        let (op, stored) = match (field("type"), field("status")) {
            (Some("item_get"), _) => (Op::Get, false),
            (Some("item_store"), status) => (Op::Set, status == Some("stored")),
            (Some(_), _) => return Ok(None),
            (None, _) if line.is_empty() || !line.starts_with("ts=") => return Ok(None),
            (None, _) => return Err(format!("no type= in {line:?}")),
        };
        let key = field("key").ok_or_else(|| format!("no key= in {line:?}"))?;
        let seconds = field("ts").and_then(|ts| ts.split('.').next()?.parse::<u64>().ok());
        let seconds = seconds.ok_or_else(|| format!("no ts= in {line:?}"))?;
        let size: u32 = field("size").and_then(|size| size.parse().ok()).unwrap_or(0);
        let ttl: u32 = field("ttl").and_then(|ttl| ttl.parse().ok()).unwrap_or(0);
        let connection: u64 = field("cfd").and_then(|fd| fd.parse().ok()).unwrap_or(0);
        // Keys are URI-encoded: each %XX is one byte.
        let key_size = (key.len() - 2 * key.matches('%').count()).clamp(1, 250) as u16;
        let id = xxhash_rust::xxh3::xxh3_64(key.as_bytes());
        let size = if size == 0 { self.sizes.get(&id).copied().unwrap_or(0) } else { size };
        if size > 0 {
            self.sizes.insert(id, size);
        }
        let time = self.relative(seconds);
        Ok(Some((Access { time, key: id, key_size, value_size: size, op, ttl }, connection, stored)))
    }
}

impl<R: BufRead> Iterator for Trace<R> {
    type Item = io::Result<Access>;

    fn next(&mut self) -> Option<io::Result<Access>> {
        match self.format {
            Format::Twitter => self.next_twitter(),
            Format::OracleGeneral => self.next_oracle(),
            Format::Watch => self.next_watch(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twitter_lines_become_accesses() {
        let text = "100,keyA,10,200,3,get,0\n101,keyB,12,50,3,set,3600\n\n103,keyA,10,0,4,delete,0\n";
        let accesses: Vec<Access> =
            Trace::new(text.as_bytes(), Format::Twitter, 16).map(Result::unwrap).collect();
        assert_eq!(accesses.len(), 3);
        assert_eq!(
            (accesses[0].time, accesses[0].op, accesses[0].key_size, accesses[0].value_size),
            (0, Op::Get, 10, 200)
        );
        assert_eq!((accesses[1].time, accesses[1].op, accesses[1].ttl), (1, Op::Set, 3600));
        assert_eq!((accesses[2].time, accesses[2].op), (3, Op::Delete));
        assert_eq!(accesses[0].key, accesses[2].key);
        assert_ne!(accesses[0].key, accesses[1].key);
    }

    #[test]
    fn a_bad_twitter_line_is_named() {
        let text = "100,keyA,10,200,3,get,0\n101,keyB,x,50,3,set,0\n";
        let results: Vec<_> = Trace::new(text.as_bytes(), Format::Twitter, 16).collect();
        let error = results[1].as_ref().unwrap_err().to_string();
        assert!(error.contains("line 2") && error.contains("key size"), "{error}");
        let text = "1,k,1,1,1,frobnicate,0\n";
        let error = Trace::new(text.as_bytes(), Format::Twitter, 16).next().unwrap().unwrap_err().to_string();
        assert!(error.contains("frobnicate"), "{error}");
    }

    #[test]
    fn watch_lines_become_gets_and_sets_without_the_stores_lookups() {
        let text = "\
ts=100.5 gid=1 type=item_get key=a status=not_found clsid=0 cfd=7 size=0
ts=100.6 gid=2 type=item_get key=b status=not_found clsid=0 cfd=8 size=0
ts=100.6 gid=3 type=item_store key=b status=stored cmd=set ttl=60 clsid=1 cfd=8 size=30
ts=101.0 gid=4 type=item_get key=b status=found clsid=1 cfd=7 size=30
ts=101.1 gid=5 type=item_get key=c status=found clsid=1 cfd=7 size=5
ts=101.1 gid=6 type=item_store key=c status=not_stored cmd=add ttl=0 clsid=1 cfd=7 size=5
ts=102.0 gid=6 type=item_get key=b status=not_found clsid=0 cfd=9 size=0
skipped=3
";
        let accesses: Vec<Access> =
            Trace::new(text.as_bytes(), Format::Watch, 16).map(Result::unwrap).collect();
        let ops: Vec<(u32, Op, u32)> = accesses.iter().map(|a| (a.time, a.op, a.value_size)).collect();
        // a's get; b's lookup dropped, its store; b's get; c's add, which stored nothing, and
        // its lookup ignored; b's miss with b's last known size.
        assert_eq!(ops, [(0, Op::Get, 0), (0, Op::Set, 30), (1, Op::Get, 30), (2, Op::Get, 30)]);
        assert_eq!(accesses[1].ttl, 60);
        assert_eq!(accesses[1].key, accesses[2].key);
        let error = Trace::new("ts=1.0 gid=1 type=item_get status=found\n".as_bytes(), Format::Watch, 16)
            .next()
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(error.contains("watch line 1") && error.contains("key="), "{error}");
    }

    #[test]
    fn oracle_general_records_become_reads() {
        let mut bytes = Vec::new();
        for (time, id, size) in [(50u32, 7u64, 1000u32), (52, 9, 20), (53, 7, 1000)] {
            bytes.extend_from_slice(&time.to_le_bytes());
            bytes.extend_from_slice(&id.to_le_bytes());
            bytes.extend_from_slice(&size.to_le_bytes());
            bytes.extend_from_slice(&(-1i64).to_le_bytes());
        }
        let accesses: Vec<Access> =
            Trace::new(&bytes[..], Format::OracleGeneral, 16).map(Result::unwrap).collect();
        assert_eq!(accesses.len(), 3);
        assert_eq!((accesses[1].time, accesses[1].key, accesses[1].value_size), (2, 9, 20));
        assert!(accesses.iter().all(|a| a.op == Op::Get && a.key_size == 16));
        let error = Trace::new(&bytes[..30], Format::OracleGeneral, 16).nth(1).unwrap().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }
}
