//! `-e FILE` (memcached's `--memory-file`): the partitions' logs live in a file (on tmpfs or a
//! DAX file system, as memcached recommends), so a restarted server serves what the last one
//! held. The file is a header page that names the layout, then each partition's part
//! ([`qs_store::persist`]: a state page and the log). A restart with the same layout takes every
//! partition back (each scans and indexes its log again); another layout starts with a clean
//! cache and says so.
//!
//! Beyond memcached, whose `-e` survives only a graceful stop (SIGUSR1), nothing here waits for
//! a stop: the state pages are kept current as the logs are written, so a `kill -9` or a crash
//! at any moment restarts warm too, losing only writes in flight. memcached's metadata file
//! (`FILE.meta`, written at a graceful stop) is kept for its tools and tests: a graceful stop
//! writes one, and a start refuses one it cannot read, as memcached does.

use qs_store::persist::{segment_bytes, Recovered};
use qs_store::Partition;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes of the header page.
const HEADER_BYTES: u64 = 4096;
/// First line of the header page and of the metadata file.
const MAGIC: &str = "quicksilver memory file 1";

/// What opening the memory file did.
pub struct Opened {
    /// The partitions, their logs in the file.
    pub partitions: Vec<Partition>,
    /// What they took back (summed).
    pub recovered: Recovered,
    /// Whether the file was laid out for this configuration (a warm start).
    pub warm: bool,
}

/// The metadata file beside `path` (memcached's name).
pub fn meta_path(path: &Path) -> PathBuf {
    let mut meta = path.as_os_str().to_owned();
    meta.push(".meta");
    PathBuf::from(meta)
}

/// The index file beside `path` (`-o ext_path` with `-e`).
pub fn index_path(path: &Path) -> PathBuf {
    let mut index = path.as_os_str().to_owned();
    index.push(".index");
    PathBuf::from(index)
}

/// The header page's text for partitions of these configurations.
fn layout(configs: &[qs_store::Config]) -> String {
    let mut text = format!("{MAGIC}\npartitions {}\n", configs.len());
    for config in configs {
        text.push_str(&format!(
            "partition {} log_bytes {} offset_bits {}\n",
            config.partition_index,
            qs_store::persist::log_bytes(config.log_bytes),
            config.offset_bits
        ));
    }
    text
}

/// Opens (or makes) the memory file at `path` for partitions of `configs` and builds them
/// there. Messages for the operator go to standard error, in memcached's `[restart]` form.
pub fn open(path: &Path, configs: &[qs_store::Config], flash_index: bool) -> Result<Opened, String> {
    take_meta(path)?;
    let (file, warm) = open_file(path, configs)?;
    let index_file = open_index_file(path, configs, warm, flash_index)?;
    let started = std::time::Instant::now();
    let (partitions, recovered) = open_partitions(path, configs, &file, index_file.as_ref())?;
    if warm {
        eprintln!(
            "[restart] {}: {} items ({} bytes) taken back in {} ms{}",
            path.display(),
            recovered.items,
            recovered.bytes,
            started.elapsed().as_millis(),
            if recovered.cut_bytes > 0 {
                format!("; {} bytes that failed their checks were dropped", recovered.cut_bytes)
            } else {
                String::new()
            }
        );
        if recovered.misplaced > 0 {
            eprintln!(
                "[restart] {}: {} items whose keys have a {{...}} hash tag were dropped: an older release placed them by the whole key",
                path.display(),
                recovered.misplaced
            );
        }
    }
    Ok(Opened { partitions, recovered, warm })
}

/// How a failed step on the memory file is reported.
fn fail(path: &Path, what: &str, error: std::io::Error) -> String {
    format!("-e {}: {what}: {error}", path.display())
}

/// memcached's metadata file beside the memory file: read once (the next start decides from
/// the memory file itself); a corrupt one refuses the start.
fn take_meta(path: &Path) -> Result<(), String> {
    let meta = meta_path(path);
    if meta.exists() {
        let mut text = String::new();
        let readable = File::open(&meta).and_then(|mut file| file.read_to_string(&mut text)).is_ok();
        if !readable || !text.starts_with(MAGIC) {
            return Err(format!("[restart] corrupt metadata file {}", meta.display()));
        }
        // Read once, as memcached does: the next start decides from the file itself.
        let _ = std::fs::remove_file(&meta);
    }
    Ok(())
}

/// The memory file, locked, laid out for `configs`; whether it was already (a warm start).
fn open_file(path: &Path, configs: &[qs_store::Config]) -> Result<(File, bool), String> {
    let fail = |what: &str, error: std::io::Error| fail(path, what, error);
    let layout = layout(configs);
    let total = HEADER_BYTES + configs.iter().map(|config| segment_bytes(config.log_bytes)).sum::<u64>();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|error| fail("cannot open", error))?;
    // Two servers on one file would write each other's logs: the second refuses to start.
    // The lock lives as long as the mappings' file (the process), a kill -9 included.
    if !crate::sys::try_lock_exclusive(&file).map_err(|error| fail("cannot lock", error))? {
        return Err(format!("-e {}: the memory file is in use by another server", path.display()));
    }
    let length = file.metadata().map_err(|error| fail("cannot stat", error))?.len();
    let mut header = vec![0u8; HEADER_BYTES as usize];
    let warm = length == total
        && file.read_exact_at(&mut header, 0).is_ok()
        && header.starts_with(layout.as_bytes())
        && header[layout.len()..].iter().all(|&byte| byte == 0);
    if !warm {
        if length > 0 {
            eprintln!(
                "[restart] {} was laid out for another configuration (memory, threads or partitions); \
                 starting with a clean cache",
                path.display()
            );
        } else {
            eprintln!("[restart] no memory file at {}, starting with a clean cache", path.display());
        }
        // Emptied first so that no page of the old layout is read as this one's.
        file.set_len(0).map_err(|error| fail("cannot truncate", error))?;
        file.set_len(total).map_err(|error| fail("cannot size", error))?;
        file.write_all_at(layout.as_bytes(), 0).map_err(|error| fail("cannot write", error))?;
    }
    check_room(&file, path, total)?;
    Ok((file, warm))
}

/// Refuses a memory file its file system cannot hold. The file is sparse (memory is taken as
/// items fill it), and a store to a page that a full tmpfs cannot give is a SIGBUS, not an
/// error, so the room is checked at the start (another user of the file system can still take
/// it later, as with memcached's -e).
fn check_room(file: &File, path: &Path, total: u64) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let allocated = file.metadata().map_or(0, |metadata| metadata.blocks() * 512);
    let needed = total.saturating_sub(allocated);
    let free =
        crate::sys::free_bytes(file).map_err(|error| fail(path, "cannot stat the file system of", error))?;
    if free < needed {
        return Err(format!(
            "-e {}: the memory file needs {} MiB more than its file system has free ({} MiB): \
             free room there, or give it a larger tmpfs",
            path.display(),
            needed.div_ceil(1 << 20),
            free >> 20
        ));
    }
    Ok(())
}

/// With a flash tier, the indexes live in FILE.index (their flash slots survive a crash);
/// trusted only beside a warm memory file of this layout, emptied otherwise. Without one, a
/// stale index file is removed.
fn open_index_file(
    path: &Path,
    configs: &[qs_store::Config],
    warm: bool,
    flash_index: bool,
) -> Result<Option<File>, String> {
    let fail = |what: &str, error: std::io::Error| fail(path, what, error);
    Ok(if flash_index {
        let index_path = index_path(path);
        let index_total: u64 =
            configs.iter().map(|config| qs_store::index::Index::file_bytes(config.bucket_count) as u64).sum();
        let index_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&index_path)
            .map_err(|error| fail("cannot open the index file", error))?;
        let index_length =
            index_file.metadata().map_err(|error| fail("cannot stat the index file", error))?.len();
        if !warm || index_length != index_total {
            index_file.set_len(0).map_err(|error| fail("cannot truncate the index file", error))?;
            index_file.set_len(index_total).map_err(|error| fail("cannot size the index file", error))?;
        }
        Some(index_file)
    } else {
        let _ = std::fs::remove_file(index_path(path));
        None
    })
}

/// Each partition built on its segment of the file (and of the index file), scanning its
/// log: as many at once as there are cores. What they took back, summed.
fn open_partitions(
    path: &Path,
    configs: &[qs_store::Config],
    file: &File,
    index_file: Option<&File>,
) -> Result<(Vec<Partition>, Recovered), String> {
    let mut index_offsets = Vec::with_capacity(configs.len());
    let mut index_offset = 0;
    for config in configs {
        index_offsets.push(index_offset);
        index_offset += qs_store::index::Index::file_bytes(config.bucket_count) as u64;
    }
    let mut offsets = Vec::with_capacity(configs.len());
    let mut offset = HEADER_BYTES;
    for config in configs {
        offsets.push(offset);
        offset += segment_bytes(config.log_bytes);
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(configs.len()).max(1);
    let mut opened: Vec<Option<std::io::Result<(Partition, Recovered)>>> =
        (0..configs.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        for (chunk, slots) in opened.chunks_mut(configs.len().div_ceil(threads)).enumerate() {
            let first = chunk * configs.len().div_ceil(threads);
            let (configs, offsets) = (configs, &offsets);
            let index_offsets = &index_offsets;
            scope.spawn(move || {
                for (i, slot) in slots.iter_mut().enumerate() {
                    let index = index_file.map(|index_file| (index_file, index_offsets[first + i]));
                    *slot = Some(Partition::open(configs[first + i], file, offsets[first + i], index));
                }
            });
        }
    });
    let mut partitions = Vec::with_capacity(configs.len());
    let mut recovered = Recovered::default();
    for result in opened {
        let (partition, taken) = result.expect("opened").map_err(|error| fail(path, "cannot map", error))?;
        recovered.items += taken.items;
        recovered.bytes += taken.bytes;
        recovered.replaced += taken.replaced;
        recovered.cut_bytes += taken.cut_bytes;
        recovered.misplaced += taken.misplaced;
        partitions.push(partition);
    }
    Ok((partitions, recovered))
}

/// At a graceful stop: memcached's metadata file, for the tools that look for it (the state
/// itself is in the memory file, current at every moment).
pub fn write_meta(path: &Path, now_secs: u32) -> std::io::Result<()> {
    let mut file = File::create(meta_path(path))?;
    writeln!(file, "{MAGIC}\nstop_time {now_secs}")?;
    file.sync_all()
}
