//! The flash tier's reads (`-o ext_path`, issue 26): workers never wait for the device. A
//! worker that needs a record on flash queues a [`Job`] here; one of `ext_threads` reader
//! threads reads it with `pread` and leaves the bytes in the worker's completion queue, then
//! wakes the worker (the same wake-up the rings use). The worker meanwhile serves everything
//! else; the request that waits keeps its place in its connection's order
//! (`worker::flash`).
//!
//! io_uring would save the thread hop; on this machine a system call costs ~95 ns against the
//! microseconds of a device read, and the thread pool works on every kernel.

use crate::shared::Shared;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One read to make.
pub struct Job {
    /// The file and the byte position in it.
    pub file: Arc<File>,
    pub position: u64,
    /// Bytes to read (fewer come back at the end of the file).
    pub len: usize,
    /// The worker that waits, and its number for the read.
    pub worker: usize,
    pub ticket: u64,
}

/// A read made.
pub struct Done {
    /// The job's ticket.
    pub ticket: u64,
    /// What was read: empty when the read failed.
    pub bytes: Vec<u8>,
}

/// The reader threads' queue and the workers' completion queues.
pub struct FlashIo {
    jobs: Mutex<Sender<Job>>,
    receiver: Arc<Mutex<Receiver<Job>>>,
    done: Vec<Mutex<Vec<Done>>>,
}

impl FlashIo {
    /// Queues for `workers` workers (the threads start with [`FlashIo::start`]).
    pub fn new(workers: usize) -> FlashIo {
        let (sender, receiver) = std::sync::mpsc::channel();
        FlashIo {
            jobs: Mutex::new(sender),
            receiver: Arc::new(Mutex::new(receiver)),
            done: (0..workers).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    /// Starts `threads` reader threads; they end soon after the server stops.
    pub fn start(shared: &Arc<Shared>, threads: usize) -> std::io::Result<()> {
        for index in 0..threads {
            let shared = Arc::clone(shared);
            std::thread::Builder::new().name(format!("qs-flash-{index}")).spawn(move || {
                let Some(io) = shared.flash_io.as_ref() else { return };
                let receiver = Arc::clone(&io.receiver);
                loop {
                    let job = {
                        let queue = receiver.lock().unwrap_or_else(|e| e.into_inner());
                        queue.recv_timeout(Duration::from_millis(500))
                    };
                    match job {
                        Ok(job) => {
                            let worker = job.worker;
                            let done = read(job);
                            io.done[worker].lock().unwrap_or_else(|e| e.into_inner()).push(done);
                            shared.wake_if_sleeping(worker);
                        }
                        Err(RecvTimeoutError::Timeout) if !shared.stop.load(Relaxed) => {}
                        Err(_) => return,
                    }
                }
            })?;
        }
        Ok(())
    }

    /// Queues a read.
    pub fn submit(&self, job: Job) {
        // The receiver lives as long as `self`: a send cannot fail.
        let _ = self.jobs.lock().unwrap_or_else(|e| e.into_inner()).send(job);
    }

    /// Takes worker `worker`'s finished reads into `into` (appended).
    pub fn take(&self, worker: usize, into: &mut Vec<Done>) {
        let mut done = self.done[worker].lock().unwrap_or_else(|e| e.into_inner());
        into.append(&mut done);
    }

    /// Whether worker `worker` has finished reads waiting (checked before it sleeps).
    pub fn has_done(&self, worker: usize) -> bool {
        !self.done[worker].lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }
}

/// Reads a job's bytes, retrying short reads until the end of the file.
fn read(job: Job) -> Done {
    let mut bytes = vec![0; job.len];
    let mut got = 0;
    while got < job.len {
        match job.file.read_at(&mut bytes[got..], job.position + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => {
                got = 0;
                break;
            }
        }
    }
    bytes.truncate(got);
    Done { ticket: job.ticket, bytes }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_past_the_end_of_the_file_returns_what_is_there() {
        let path = std::env::temp_dir().join(format!("qs-flashio-{}", std::process::id()));
        std::fs::write(&path, b"0123456789").unwrap();
        let file = Arc::new(File::open(&path).unwrap());
        let done = read(Job { file: Arc::clone(&file), position: 4, len: 100, worker: 0, ticket: 7 });
        assert_eq!((done.ticket, done.bytes.as_slice()), (7, &b"456789"[..]));
        let done = read(Job { file, position: 50, len: 4, worker: 0, ticket: 8 });
        assert!(done.bytes.is_empty());
        std::fs::remove_file(path).unwrap();
    }
}
