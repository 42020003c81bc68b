//! `-e FILE` with `-o ext_path`: the flash tier's state across a graceful restart.
//!
//! The memory file brings the DRAM items back after any stop (`memfile`); the index, which
//! holds the flash slots, is rebuilt from the DRAM logs. So at a graceful stop each worker writes,
//! per partition, `FILE.flash.<partition>`: which log it was (file, place, shape), the page to
//! fill next, and every flash slot pointing at a live record. A start takes those files (and
//! removes them, as memcached reads `FILE.meta` once) and puts the slots back. After a kill -9
//! there are none: the DRAM items come back and the flash tier starts empty, so a flash record
//! that a later write or delete made obsolete is never served.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// First line of a state file.
const MAGIC: &str = "quicksilver flash state 1";

/// What a graceful stop saved for one partition.
pub struct Saved {
    /// The log it describes (checked against the log the new server builds).
    pub identity: String,
    /// The page to fill next.
    pub page: u64,
    /// Flash slots: (bucket, slot word).
    pub slots: Vec<(u64, u64)>,
}

/// The state file of `partition` beside memory file `path`.
pub fn state_path(path: &Path, partition: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".flash.{partition}"));
    PathBuf::from(name)
}

/// What identifies a partition's flash log: its file, size and place, and the log's shape.
pub fn identity(ext_path: &Path, ext_bytes: u64, shape: (u64, u64, u64)) -> String {
    let (base, pages, page_bytes) = shape;
    format!("{}:{ext_bytes} base {base} pages {pages} page_bytes {page_bytes}", ext_path.display())
}

/// Writes `partition`'s state (at a graceful stop).
pub fn save(path: &Path, partition: usize, saved: &Saved) -> std::io::Result<()> {
    let mut bytes =
        format!("{MAGIC}\n{}\n{}\n{}\n", saved.identity, saved.page, saved.slots.len()).into_bytes();
    for &(bucket, word) in &saved.slots {
        bytes.extend_from_slice(&bucket.to_le_bytes());
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    // Whole or not at all: a stop interrupted mid-write leaves no state file.
    let target = state_path(path, partition);
    let mut staging = target.clone().into_os_string();
    staging.push(".new");
    let staging = PathBuf::from(staging);
    std::fs::File::create(&staging)?.write_all(&bytes)?;
    std::fs::rename(staging, target)
}

/// Takes the saved state of partitions `0..partitions` beside `path`, removing the files;
/// `None` for a partition without a readable one.
pub fn take_all(path: &Path, partitions: usize) -> Vec<Option<Saved>> {
    (0..partitions)
        .map(|partition| {
            let file = state_path(path, partition);
            let mut bytes = Vec::new();
            let read = std::fs::File::open(&file).and_then(|mut f| f.read_to_end(&mut bytes)).is_ok();
            let _ = std::fs::remove_file(&file);
            if read {
                parse(&bytes)
            } else {
                None
            }
        })
        .collect()
}

fn parse(bytes: &[u8]) -> Option<Saved> {
    let mut lines = Vec::new();
    let mut at = 0;
    while lines.len() < 4 {
        let end = at + bytes[at..].iter().position(|&b| b == b'\n')?;
        lines.push(std::str::from_utf8(&bytes[at..end]).ok()?);
        at = end + 1;
    }
    if lines[0] != MAGIC {
        return None;
    }
    let page = lines[2].parse().ok()?;
    let count: usize = lines[3].parse().ok()?;
    let body = &bytes[at..];
    if body.len() != count.checked_mul(16)? {
        return None;
    }
    let word = |chunk: &[u8]| u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
    let slots = body.chunks_exact(16).map(|pair| (word(&pair[..8]), word(&pair[8..]))).collect();
    Some(Saved { identity: lines[1].to_string(), page, slots })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_state_reads_back_once() {
        let path = std::env::temp_dir().join(format!("qs-flashsave-{}", std::process::id()));
        let saved =
            Saved { identity: "id".into(), page: 42, slots: vec![(1, 0x8001_0000_0000_0040), (7, 9)] };
        save(&path, 3, &saved).unwrap();
        let mut all = take_all(&path, 4);
        let got = all[3].take().expect("saved");
        assert_eq!((got.identity.as_str(), got.page, got.slots), ("id", 42, saved.slots));
        assert!(all.iter().all(Option::is_none));
        assert!(take_all(&path, 4)[3].is_none(), "read once");
    }

    #[test]
    fn a_damaged_state_is_ignored() {
        assert!(parse(b"quicksilver flash state 1\nid\n4\n2\n0123456789abcdef").is_none());
        assert!(parse(b"something else\nid\n4\n0\n").is_none());
        assert!(parse(b"quicksilver flash state 1\nid\n").is_none());
        assert!(parse(b"quicksilver flash state 1\nid\n4\n0\n").is_some());
    }
}
