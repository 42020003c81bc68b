//! The io_uring backend of a worker's stream connections (`-o io_backend=uring`): one
//! multishot receive per connection drawing from a provided-buffer ring
//! ([`qs_net::uring::BufRing`]), so an idle connection holds no receive buffer and epoll never
//! reports its reads; every send of a loop turn goes in one `io_uring_enter`, and a socket
//! that refuses one is polled by the ring. Completions are cooperative task work, run when the
//! worker next enters the kernel; an eventfd the worker's epoll watches says there is some.
//!
//! A receive's bytes are copied into the connection's own input at once and the buffer is
//! given back in the same turn: a slow or silent client never holds ring buffers.
//!
//! Each connection's socket is installed in the ring's table of registered files at the
//! connection's slot, and its operations name it there: the kernel then takes no reference on
//! the file per operation. A slot past the table (more connections than `-c` allows a
//! worker, or a kernel that refused the table) names its descriptor instead.

use io_uring::{cqueue, opcode, types, IoUring};
use qs_net::uring::BufRing;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Buffers in the ring.
const BUFFERS: u16 = 256;
/// Bytes of each (a request line, or a piece of a larger request).
const BUFFER_BYTES: usize = 2048;
/// The buffer group receives draw from.
const GROUP: u16 = 0;
/// `io_uring_enter`'s flag to run task work and post completions (linux/io_uring.h).
const IORING_ENTER_GETEVENTS: u32 = 1;

/// What an operation's `user_data` names: its kind in the low bits, its connection's slot and
/// generation above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A connection's multishot receive.
    Receive,
    /// A connection's send.
    Send,
    /// A cancel of a connection's receive, or of all its operations (its completion says
    /// nothing).
    Cancel,
    /// A connection whose socket refused a send has room again (a one-shot poll).
    Writable,
}

/// One completion: the operation, its connection (slot, generation), its result (bytes, or a
/// negative errno), the buffer a receive filled, and whether a multishot receive goes on.
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    pub op: Op,
    pub slot: usize,
    pub generation: u32,
    pub result: i32,
    pub buffer: Option<u16>,
    pub more: bool,
}

fn user_data(op: Op, slot: usize, generation: u32) -> u64 {
    let kind = match op {
        Op::Receive => 1,
        Op::Send => 2,
        Op::Cancel => 3,
        Op::Writable => 4,
    };
    (u64::from(generation) << 32) | ((slot as u64 & 0x1fff_ffff) << 3) | kind
}

fn decode(user_data: u64) -> (Op, usize, u32) {
    let op = match user_data & 7 {
        1 => Op::Receive,
        2 => Op::Send,
        4 => Op::Writable,
        _ => Op::Cancel,
    };
    (op, ((user_data >> 3) & 0x1fff_ffff) as usize, (user_data >> 32) as u32)
}

/// How an operation names a connection's socket: by its slot in the ring's registered files,
/// or by its descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Socket {
    /// Installed at this slot of the registered files.
    Fixed(u32),
    /// Not installed: the descriptor.
    Fd(RawFd),
}

/// Builds an operation on `$socket` from `$build`, a function of `types::Fixed` or `types::Fd`
/// (io-uring names the two as different types).
macro_rules! on_socket {
    ($socket:expr, |$target:ident| $build:expr) => {
        match $socket {
            Socket::Fixed(slot) => {
                let $target = types::Fixed(slot);
                $build
            }
            Socket::Fd(fd) => {
                let $target = types::Fd(fd);
                $build
            }
        }
    };
}

/// What one send takes: a buffer, or slices gathered from several (one `sendmsg`).
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// One buffer.
    One(&'a [u8]),
    /// Several, in order.
    Gathered(&'a [io::IoSlice<'a>]),
}

impl Payload<'_> {
    /// Bytes in all.
    pub fn len(&self) -> usize {
        match self {
            Payload::One(bytes) => bytes.len(),
            Payload::Gathered(slices) => slices.iter().map(|slice| slice.len()).sum(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A worker's network ring.
pub struct NetRing {
    ring: IoUring,
    /// Which slots of the registered files hold a connection's socket (empty where the
    /// kernel refused the table).
    installed: Vec<bool>,
    /// The receive buffers (taken out only to unregister them).
    buffers: Option<BufRing>,
    /// Signalled when task work is queued for the ring (epoll watches it).
    eventfd: OwnedFd,
    /// Entries queued since the last submit.
    queued: usize,
    /// Whether receives end after the bytes their connection has room for (Linux 6.17's
    /// multishot limit; off once the kernel refuses one).
    limited: bool,
    /// The allocation of `send_all`'s message headers, kept between calls (as plain words: a
    /// `msghdr` holds pointers, which would keep the worker from moving to its thread).
    headers: Vec<HeaderWords>,
}

/// A `msghdr`'s size and alignment in plain words, for keeping the allocation of a header
/// vector between calls with no header in it.
type HeaderWords = [usize; 7];
const _: () = assert!(
    std::mem::size_of::<HeaderWords>() == std::mem::size_of::<libc::msghdr>()
        && std::mem::align_of::<HeaderWords>() == std::mem::align_of::<libc::msghdr>()
);

/// An empty vector of `U` in `v`'s allocation: the standard library collects a mapped
/// `vec::IntoIter` in place where the two types have one size and alignment (else this
/// allocates anew). Lets a vector of borrows keep its capacity past the borrows.
pub fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().map(|_| unreachable!("cleared")).collect()
}

impl NetRing {
    /// Bytes of each receive buffer: a receive may take up to this many past its limit.
    pub const BUFFER_BYTES: usize = BUFFER_BYTES;

    /// A ring with its buffers, eventfd and a table of `files` registered files (none where the
    /// kernel refuses one); an error where the kernel refuses io_uring.
    pub fn new(files: u32) -> io::Result<NetRing> {
        // Completions are posted when the worker next enters the kernel (cooperative task
        // work: no interrupt of its epoll wait per message), and the eventfd says so. Deferred
        // task work (posted only when the worker enters the ring) left a worker asleep in
        // epoll_wait for ~16 ms a request on this machine's kernel (6.18): its eventfd signal
        // did not come for every receive. Made disabled: the worker thread enables it,
        // becoming its one issuer.
        let ring = IoUring::builder()
            .setup_cqsize(8192)
            .setup_single_issuer()
            .setup_coop_taskrun()
            .setup_taskrun_flag()
            .setup_r_disabled()
            .build(1024)?;
        let buffers = BufRing::register(&ring, GROUP, BUFFERS, BUFFER_BYTES)?;
        // SAFETY: eventfd takes no pointers; a negative result is an error, checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        // The table is only a saving (no file reference taken per operation): without it every
        // operation names its descriptor.
        let installed = match ring.submitter().register_files_sparse(files) {
            Ok(()) => vec![false; files as usize],
            Err(_) => Vec::new(),
        };
        Ok(NetRing {
            ring,
            installed,
            buffers: Some(buffers),
            eventfd,
            queued: 0,
            limited: true,
            headers: Vec::new(),
        })
    }

    /// Enables the ring on the calling thread, its only submitter from then on.
    pub fn enable(&self) -> io::Result<()> {
        self.ring.submitter().register_enable_rings()
    }

    /// Runs the ring's queued task work, posting its completions (no wait).
    pub fn run_work(&mut self) -> io::Result<()> {
        self.queued = 0;
        let queued = self.ring.submission().len() as u32;
        // SAFETY: no argument is passed; entering submits what is queued, whose buffers
        // follow `push`'s rules.
        unsafe { self.ring.submitter().enter::<libc::sigset_t>(queued, 0, IORING_ENTER_GETEVENTS, None)? };
        Ok(())
    }

    /// The eventfd to watch in epoll (never read: epoll reports each signal as an edge).
    pub fn eventfd(&self) -> RawFd {
        self.eventfd.as_raw_fd()
    }

    fn push(&mut self, entry: &io_uring::squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: receives write only into the ring's provided buffers, which stay
            // registered (never freed) while the ring lives; sends are pushed only by
            // `send_all`, which waits for their completions before its borrows end; cancels
            // point at nothing.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                self.queued += 1;
                return Ok(());
            }
            self.submit()?;
        }
    }

    /// Installs connection `slot`'s socket `fd` in the registered files where the table has
    /// room (one system call, at accept).
    pub fn install(&mut self, slot: usize, fd: RawFd) {
        if slot < self.installed.len() {
            let done = self.ring.submitter().register_files_update(slot as u32, &[fd]);
            self.installed[slot] = matches!(done, Ok(1));
        }
    }

    /// Removes connection `slot`'s socket from the registered files (at close, after its
    /// operations are cancelled: the table's reference would keep the socket open).
    pub fn uninstall(&mut self, slot: usize) {
        if self.installed.get(slot) == Some(&true) {
            self.installed[slot] = false;
            let _ = self.ring.submitter().register_files_update(slot as u32, &[-1]);
        }
    }

    /// How operations name connection `slot`'s socket `fd`.
    pub fn socket(&self, slot: usize, fd: RawFd) -> Socket {
        match self.installed.get(slot) {
            Some(true) => Socket::Fixed(slot as u32),
            _ => Socket::Fd(fd),
        }
    }

    /// Starts the multishot receive of connection (`slot`, `generation`) on `fd`, ended by the
    /// kernel once about `room` bytes have arrived (at most a buffer more), so a connection
    /// takes no more out of its socket than its input may hold; what else the client sent
    /// waits in the socket, as it does on epoll.
    pub fn receive(&mut self, fd: RawFd, slot: usize, generation: u32, room: usize) -> io::Result<()> {
        let mut entry =
            on_socket!(self.socket(slot, fd), |target| opcode::RecvMulti::new(target, GROUP).build());
        if self.limited {
            entry = qs_net::uring::limit_total(entry, room.clamp(1, u32::MAX as usize) as u32);
        }
        self.push(&entry.user_data(user_data(Op::Receive, slot, generation)))
    }

    /// A receive was refused with EINVAL: receives go unlimited from now on if they were
    /// limited (a kernel before 6.17), and the caller posts it again; false if they were not
    /// (the refusal is the connection's).
    pub fn unlimit(&mut self) -> bool {
        std::mem::replace(&mut self.limited, false)
    }

    /// Cancels the receive of connection (`slot`, `generation`) (bytes it delivers before the
    /// cancel lands still arrive).
    pub fn cancel(&mut self, slot: usize, generation: u32) -> io::Result<()> {
        let entry = opcode::AsyncCancel::new(user_data(Op::Receive, slot, generation))
            .build()
            .user_data(user_data(Op::Cancel, slot, generation));
        self.push(&entry)
    }

    /// Asks once to be told when connection (`slot`, `generation`)'s socket `fd` has room to
    /// write ([`Op::Writable`]).
    pub fn await_writable(&mut self, fd: RawFd, slot: usize, generation: u32) -> io::Result<()> {
        let entry = on_socket!(self.socket(slot, fd), |target| {
            opcode::PollAdd::new(target, libc::POLLOUT as u32).build()
        });
        self.push(&entry.user_data(user_data(Op::Writable, slot, generation)))
    }

    /// Cancels every operation on connection (`slot`, `generation`)'s socket `fd` (at close:
    /// its socket is released once they have ended).
    pub fn cancel_all(&mut self, fd: RawFd, slot: usize, generation: u32) -> io::Result<()> {
        let entry = on_socket!(self.socket(slot, fd), |target| {
            opcode::AsyncCancel2::new(types::CancelBuilder::fd(target).all()).build()
        });
        self.push(&entry.user_data(user_data(Op::Cancel, slot, generation)))
    }

    /// Submits what is queued (one system call, none when nothing is).
    pub fn submit(&mut self) -> io::Result<()> {
        if self.queued > 0 {
            self.queued = 0;
            self.ring.submit()?;
        }
        Ok(())
    }

    /// Sends each `(fd, slices, slot, generation)` without waiting for socket space
    /// (`MSG_DONTWAIT`: a full socket answers `-EAGAIN`), all in one `io_uring_enter` that
    /// waits for every send's completion; every completion reaped meanwhile goes to `into`.
    /// One slice goes as a send, several as one `sendmsg` (scatter-gather).
    pub fn send_all(
        &mut self,
        sends: &[(RawFd, Payload<'_>, usize, u32)],
        into: &mut Vec<Completion>,
    ) -> io::Result<()> {
        // The headers of the gathered sends, made before any is pushed (so none moves), kept
        // until every send is complete.
        let mut headers: Vec<libc::msghdr> = recycle(std::mem::take(&mut self.headers));
        headers.extend(
            sends
                .iter()
                .filter_map(|(_, payload, _, _)| match payload {
                    Payload::One(_) => None,
                    Payload::Gathered(slices) => Some(slices),
                })
                .map(|slices| libc::msghdr {
                    msg_name: std::ptr::null_mut(),
                    msg_namelen: 0,
                    // An `IoSlice` is an `iovec` (std guarantees the layout on Unix); the kernel
                    // only reads through it.
                    msg_iov: slices.as_ptr().cast::<libc::iovec>().cast_mut(),
                    msg_iovlen: slices.len(),
                    msg_control: std::ptr::null_mut(),
                    msg_controllen: 0,
                    msg_flags: 0,
                }),
        );
        let sent = self.send_with(sends, &headers, into);
        self.headers = recycle(headers);
        sent
    }

    /// `send_all` with the gathered sends' headers made, one per `Payload::Gathered` in order.
    fn send_with(
        &mut self,
        sends: &[(RawFd, Payload<'_>, usize, u32)],
        headers: &[libc::msghdr],
        into: &mut Vec<Completion>,
    ) -> io::Result<()> {
        let mut gathered = headers.iter();
        for &(fd, payload, slot, generation) in sends {
            let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
            let entry = match payload {
                Payload::One(bytes) => on_socket!(self.socket(slot, fd), |target| {
                    opcode::Send::new(target, bytes.as_ptr(), bytes.len() as u32).flags(flags).build()
                }),
                Payload::Gathered(_) => {
                    let header: *const libc::msghdr = gathered.next().expect("a header per gathered send");
                    on_socket!(self.socket(slot, fd), |target| {
                        opcode::SendMsg::new(target, header).flags(flags as u32).build()
                    })
                }
            };
            self.push(&entry.user_data(user_data(Op::Send, slot, generation)))?;
        }
        let mut left = sends.len();
        while left > 0 {
            self.queued = 0;
            // The sends' borrows end with this call: it returns once all are complete.
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(error) if error.raw_os_error() == Some(libc::EINTR) => {}
                Err(error) => return Err(error),
            }
            let before = into.len();
            self.reap(into);
            left -= into[before..].iter().filter(|done| done.op == Op::Send).count();
        }
        Ok(())
    }

    /// Whether completions wait to be taken (one posted inside a submit signals no eventfd).
    pub fn has_completions(&mut self) -> bool {
        !self.ring.completion().is_empty() || self.ring.submission().taskrun()
    }

    /// Takes the completions the kernel has posted (no system call).
    pub fn reap(&mut self, into: &mut Vec<Completion>) {
        for entry in self.ring.completion() {
            let (op, slot, generation) = decode(entry.user_data());
            into.push(Completion {
                op,
                slot,
                generation,
                result: entry.result(),
                buffer: cqueue::buffer_select(entry.flags()),
                more: cqueue::more(entry.flags()),
            });
        }
    }

    /// The `len` bytes a receive completion delivered in buffer `id`, ours until given back.
    pub fn take(&mut self, id: u16, len: usize) -> &[u8] {
        self.buffers.as_mut().expect("registered").take(id, len)
    }

    /// Gives buffer `id` back to the kernel.
    pub fn give_back(&mut self, id: u16) {
        self.buffers.as_mut().expect("registered").give_back(id);
    }
}

impl Drop for NetRing {
    fn drop(&mut self) {
        if let Some(buffers) = self.buffers.take() {
            // On failure the buffers are leaked (see BufRing), never freed under the kernel.
            let _ = buffers.unregister(&self.ring);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    #[test]
    fn a_recycled_vector_keeps_its_allocation_across_types_of_one_layout() {
        let mut headers: Vec<HeaderWords> = Vec::with_capacity(40);
        headers.push([1; 7]);
        let at = headers.as_ptr() as usize;
        let mut real: Vec<libc::msghdr> = recycle(headers);
        assert!(real.is_empty());
        assert_eq!((real.as_ptr() as usize, real.capacity()), (at, 40));
        real.push(libc::msghdr {
            msg_name: std::ptr::null_mut(),
            msg_namelen: 0,
            msg_iov: std::ptr::null_mut(),
            msg_iovlen: 0,
            msg_control: std::ptr::null_mut(),
            msg_controllen: 0,
            msg_flags: 0,
        });
        let back: Vec<HeaderWords> = recycle(real);
        assert_eq!((back.as_ptr() as usize, back.capacity(), back.len()), (at, 40, 0));
        let bytes: &[u8] = b"borrowed";
        let slices: Vec<io::IoSlice<'static>> = recycle(vec![io::IoSlice::new(bytes); 3]);
        assert_eq!((slices.len(), slices.capacity()), (0, 3));
    }

    fn wait(ring: &mut NetRing, into: &mut Vec<Completion>) {
        ring.submit().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while into.is_empty() {
            assert!(std::time::Instant::now() < deadline, "no completion");
            let _ = ring.ring.submit_and_wait(1);
            ring.reap(into);
        }
    }

    #[test]
    fn user_data_names_the_operation_and_the_connection() {
        for (op, slot, generation) in
            [(Op::Receive, 0, 0), (Op::Send, 12345, u32::MAX), (Op::Cancel, (1 << 29) - 1, 7)]
        {
            assert_eq!(decode(user_data(op, slot, generation)), (op, slot, generation));
        }
    }

    #[test]
    fn receives_arrive_sends_leave_and_a_cancel_ends_the_receive() {
        let Ok(mut ring) = NetRing::new(16) else { return };
        ring.enable().unwrap();
        let (mut client, server) = pair();
        ring.receive(server.as_raw_fd(), 3, 9, 1 << 20).unwrap();
        client.write_all(b"get a\r\n").unwrap();
        let mut done = Vec::new();
        wait(&mut ring, &mut done);
        let first = done[0];
        assert_eq!((first.op, first.slot, first.generation, first.more), (Op::Receive, 3, 9, true));
        let id = first.buffer.expect("a buffer");
        assert_eq!(ring.take(id, first.result as usize), b"get a\r\n");
        ring.give_back(id);
        done.clear();
        ring.send_all(&[(server.as_raw_fd(), Payload::One(b"END\r\n"), 3, 9)], &mut done).unwrap();
        let sent = done.iter().find(|done| done.op == Op::Send).expect("a send");
        assert_eq!(sent.result, 5);
        let mut reply = [0u8; 5];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"END\r\n");
        done.clear();
        ring.cancel(3, 9).unwrap();
        ring.submit().unwrap();
        while !done.iter().any(|done| done.op == Op::Receive && !done.more) {
            wait(&mut ring, &mut done);
            done.retain(|done| done.op != Op::Cancel);
        }
        let ended = done.iter().find(|done| done.op == Op::Receive).unwrap();
        assert_eq!(ended.result, -libc::ECANCELED);
    }

    #[test]
    fn an_installed_socket_is_named_by_its_slot_and_closes_once_uninstalled() {
        let Ok(mut ring) = NetRing::new(16) else { return };
        ring.enable().unwrap();
        let (mut client, server) = pair();
        ring.install(5, server.as_raw_fd());
        if ring.socket(5, server.as_raw_fd()) != Socket::Fixed(5) {
            return; // the kernel refused the table: descriptors are used, tested above
        }
        assert_eq!(ring.socket(16, 99), Socket::Fd(99), "past the table");
        ring.receive(server.as_raw_fd(), 5, 1, 1 << 20).unwrap();
        client.write_all(b"mn\r\n").unwrap();
        let mut done = Vec::new();
        wait(&mut ring, &mut done);
        let id = done[0].buffer.expect("a buffer");
        assert_eq!(ring.take(id, done[0].result as usize), b"mn\r\n");
        ring.give_back(id);
        done.clear();
        ring.send_all(
            &[(
                server.as_raw_fd(),
                Payload::Gathered(&[io::IoSlice::new(b"MN"), io::IoSlice::new(b"\r\n")]),
                5,
                1,
            )],
            &mut done,
        )
        .unwrap();
        assert_eq!(done.iter().find(|done| done.op == Op::Send).unwrap().result, 4);
        let mut reply = [0u8; 4];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"MN\r\n");
        // At close: cancel, uninstall, close the descriptor; the client then reads the end.
        ring.cancel_all(server.as_raw_fd(), 5, 1).unwrap();
        ring.submit().unwrap();
        ring.uninstall(5);
        assert_eq!(ring.socket(5, server.as_raw_fd()), Socket::Fd(server.as_raw_fd()));
        drop(server);
        // The cancelled receive lets go of the socket when its completion runs.
        ring.run_work().unwrap();
        client.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        assert_eq!(client.read(&mut reply).unwrap(), 0, "the socket closed");
    }

    #[test]
    fn a_send_to_a_full_socket_answers_eagain_at_once() {
        let Ok(mut ring) = NetRing::new(16) else { return };
        ring.enable().unwrap();
        let (_client, server) = pair();
        let block = vec![b'x'; 1 << 20];
        let mut done = Vec::new();
        // The client never reads: the socket fills, and a send then refuses instead of waiting.
        for _ in 0..64 {
            done.clear();
            ring.send_all(&[(server.as_raw_fd(), Payload::One(&block), 0, 0)], &mut done).unwrap();
            let result = done.iter().find(|done| done.op == Op::Send).unwrap().result;
            if result == -libc::EAGAIN {
                return;
            }
            assert!(result > 0, "{result}");
        }
        panic!("the socket never filled");
    }

    #[test]
    fn an_end_of_input_is_a_receive_of_nothing() {
        let Ok(mut ring) = NetRing::new(16) else { return };
        ring.enable().unwrap();
        let (client, server) = pair();
        ring.receive(server.as_raw_fd(), 1, 1, 1 << 20).unwrap();
        drop(client);
        let mut done = Vec::new();
        wait(&mut ring, &mut done);
        assert_eq!((done[0].op, done[0].result, done[0].more), (Op::Receive, 0, false));
    }
}
