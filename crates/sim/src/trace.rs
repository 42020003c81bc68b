//! Real traces, read as streams (a trace larger than memory replays in constant memory):
//!
//! - Twitter's cache traces (github.com/twitter/cache-trace): CSV lines of timestamp,
//!   anonymised key, key size, value size, client id, operation, TTL.
//! - libCacheSim's oracleGeneral binary format: little-endian 24-byte records of a u32
//!   timestamp, a u64 object id, a u32 object size and an i64 next-access time (ignored). Every
//!   record is a read. Compressed files (`.zst`) must be decompressed first (`zstd -d`).

use crate::stream::{Access, Op};
use std::io::{self, BufRead};

/// Which format a trace is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Twitter's CSV.
    Twitter,
    /// libCacheSim's oracleGeneral.
    OracleGeneral,
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
}

impl<R: BufRead> Trace<R> {
    /// Reads `format` from `input`; `key_size` is used where the format has no key size.
    pub fn new(input: R, format: Format, key_size: u16) -> Trace<R> {
        Trace { input, format, key_size, first_time: None, line: String::new(), line_number: 0 }
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

impl<R: BufRead> Iterator for Trace<R> {
    type Item = io::Result<Access>;

    fn next(&mut self) -> Option<io::Result<Access>> {
        match self.format {
            Format::Twitter => self.next_twitter(),
            Format::OracleGeneral => self.next_oracle(),
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
