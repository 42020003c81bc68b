//! The flash tier's reads (`-o ext_path`): workers never wait for the device. A
//! worker that needs a record on flash queues a [`Job`] here; one of `ext_threads` reader
//! threads reads it with `pread` and leaves the bytes in the worker's completion queue, then
//! wakes the worker (the same wake-up the rings use). The worker meanwhile serves everything
//! else; the request that waits keeps its place in its connection's order
//! (`worker::flash`).
//!
//! Where the kernel offers io_uring, each worker has its own ring ([`Uring`]) instead: reads
//! are queued during the loop turn and submitted with one system call, a read the page cache
//! holds completes in that call (no thread hop), and one the device must serve completes
//! later; either way an eventfd in the worker's epoll set says so. The thread pool
//! is the fallback (`io_uring_setup` refused, as under some seccomp profiles).

use std::fs::File;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the reader threads need of the server they serve.
pub trait Host: Send + Sync + 'static {
    /// The queues (`None`: the server has no flash tier).
    fn flash_io(&self) -> Option<&FlashIo>;
    /// Wakes worker `worker` if it sleeps (its read is done).
    fn wake(&self, worker: usize);
    /// The server is stopping: idle threads end.
    fn stopping(&self) -> bool;
}

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
    /// The file is opened with O_DIRECT: read an aligned span.
    pub direct: bool,
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
    pub fn start<H: Host>(shared: &Arc<H>, threads: usize) -> std::io::Result<()> {
        for index in 0..threads {
            let shared = Arc::clone(shared);
            std::thread::Builder::new().name(format!("qs-flash-{index}")).spawn(move || {
                let Some(io) = shared.flash_io() else { return };
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
                            shared.wake(worker);
                        }
                        Err(RecvTimeoutError::Timeout) if !shared.stopping() => {}
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

/// Reads a job's bytes (fewer at the end of the file; none when the read failed).
fn read(job: Job) -> Done {
    let mut bytes = Vec::with_capacity(job.len);
    if !qs_store::flash::read_at(&job.file, job.position, job.len, job.direct, &mut bytes) {
        bytes.clear();
    }
    Done { ticket: job.ticket, bytes }
}

/// A worker's io_uring for flash reads.
pub struct Uring {
    ring: io_uring::IoUring,
    eventfd: std::os::fd::OwnedFd,
    /// Reads submitted or queued whose completion has not been taken.
    in_flight: usize,
    /// Reads queued since the last submit.
    queued: usize,
}

impl Uring {
    /// A ring of `entries` with an eventfd told of completions the kernel finishes later.
    pub fn new(entries: u32) -> std::io::Result<Uring> {
        use std::os::fd::{AsRawFd, FromRawFd};
        let ring = io_uring::IoUring::new(entries)?;
        // SAFETY: eventfd takes no pointers; a negative result is an error, checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let eventfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // Every completion signals, not only those of io-wq's threads (the `_async` kind):
        // an O_DIRECT read completes from the device's interrupt through task work, which
        // the kernel may run in any system call the worker makes between its last look at
        // the ring and its epoll wait; only the eventfd then says the read is back. A read
        // the page cache held signals too, and costs one more loop turn.
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        Ok(Uring { ring, eventfd, in_flight: 0, queued: 0 })
    }

    /// The eventfd to watch in epoll.
    pub fn eventfd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.eventfd.as_raw_fd()
    }

    /// Queues a read of `buf.len()` bytes of `file` at `position` into `buf`, named `ticket`;
    /// false when the ring is full even after submitting what it holds.
    ///
    /// # Safety
    /// `buf`'s memory must stay allocated and untouched until this ticket's completion has
    /// been taken with [`Uring::reap`] (dropping the ring waits for every read in flight, so
    /// the buffers must be dropped after it).
    pub unsafe fn push_read(&mut self, file: &File, buf: &mut [u8], position: u64, ticket: u64) -> bool {
        use std::os::fd::AsRawFd;
        let entry = io_uring::opcode::Read::new(
            io_uring::types::Fd(file.as_raw_fd()),
            buf.as_mut_ptr(),
            buf.len() as u32,
        )
        .offset(position)
        .build()
        .user_data(ticket);
        for _ in 0..2 {
            // SAFETY: the caller keeps `buf` alive and untouched until the completion, and
            // `file` outlives it (the partition holds it for the worker's life).
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                self.in_flight += 1;
                self.queued += 1;
                return true;
            }
            self.submit();
        }
        false
    }

    /// Submits the queued reads (one system call; reads the page cache holds complete in it).
    pub fn submit(&mut self) {
        if self.queued > 0 {
            self.queued = 0;
            let _ = self.ring.submit();
        }
    }

    /// Takes the finished reads: (ticket, bytes read or a negative errno).
    pub fn reap(&mut self, into: &mut Vec<(u64, i32)>) {
        for entry in self.ring.completion() {
            into.push((entry.user_data(), entry.result()));
            self.in_flight -= 1;
        }
    }

    /// Whether reads are queued unsubmitted or finished untaken (the worker must not sleep).
    pub fn has_work(&mut self) -> bool {
        self.queued > 0 || !self.ring.completion().is_empty()
    }

    /// Clears the eventfd after it woke the worker.
    pub fn clear_eventfd(&self) {
        let mut count = [0u8; 8];
        // SAFETY: reads 8 bytes into an 8-byte buffer from a descriptor this ring owns.
        unsafe { libc::read(self.eventfd(), count.as_mut_ptr().cast(), 8) };
    }
}

impl Drop for Uring {
    fn drop(&mut self) {
        // The kernel may still write into the buffers of reads in flight: wait for them.
        let mut done = Vec::new();
        while self.in_flight > 0 {
            if self.ring.submit_and_wait(self.in_flight).is_err() {
                break;
            }
            done.clear();
            self.reap(&mut done);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_past_the_end_of_the_file_returns_what_is_there() {
        let path = std::env::temp_dir().join(format!("qs-flashio-{}", std::process::id()));
        std::fs::write(&path, b"0123456789").unwrap();
        let file = Arc::new(File::open(&path).unwrap());
        let done =
            read(Job { file: Arc::clone(&file), position: 4, len: 100, worker: 0, ticket: 7, direct: false });
        assert_eq!((done.ticket, done.bytes.as_slice()), (7, &b"456789"[..]));
        let done = read(Job { file, position: 50, len: 4, worker: 0, ticket: 8, direct: false });
        assert!(done.bytes.is_empty());
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_ring_reads_what_the_file_holds() {
        let Ok(mut ring) = Uring::new(8) else {
            eprintln!("skipped: no io_uring here");
            return;
        };
        let path = std::env::temp_dir().join(format!("qs-flashio-ring-{}", std::process::id()));
        std::fs::write(&path, b"abcdefghij").unwrap();
        let file = File::open(&path).unwrap();
        let mut first = vec![0u8; 4];
        let mut second = vec![0u8; 100];
        // SAFETY: both buffers live until their completions are reaped below.
        unsafe {
            assert!(ring.push_read(&file, &mut first, 2, 1));
            assert!(ring.push_read(&file, &mut second, 6, 2));
        }
        assert!(ring.has_work());
        ring.submit();
        let mut done = Vec::new();
        while done.len() < 2 {
            ring.reap(&mut done);
        }
        done.sort();
        assert_eq!(done, vec![(1, 4), (2, 4)]);
        assert_eq!((&first[..], &second[..4]), (&b"cdef"[..], &b"ghij"[..]));
        std::fs::remove_file(path).unwrap();
    }
}
