//! A provided-buffer ring for io_uring receives ([`BufRing`]): the kernel picks a buffer for
//! each message a multishot receive delivers, so a connection holds no receive buffer while it
//! is idle, and the buffers a turn's messages filled go back as soon as their bytes are read.
//!
//! The ring of entries is memory shared with the kernel. Every `unsafe` block here is one
//! access to it, one allocation, or one registration; the buffers it names are owned by the
//! [`BufRing`], and are freed only once the kernel no longer knows them
//! ([`BufRing::unregister`]). A ring dropped while still registered leaks its memory instead.

use io_uring::squeue::Entry;
use io_uring::types::BufRingEntry;
use io_uring::IoUring;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

/// Receive buffers registered with an io_uring as one buffer group.
pub struct BufRing {
    /// The ring of entries the kernel reads (page-aligned, `count` entries).
    entries: NonNull<BufRingEntry>,
    layout: std::alloc::Layout,
    /// The buffers, `size` bytes each, buffer `id` at `id * size`.
    buffers: Box<[u8]>,
    size: usize,
    count: u16,
    /// Entries published to the kernel so far (wrapping).
    tail: u16,
    group: u16,
    /// Which buffers a completion has handed back to us and we have not given back yet.
    held: Vec<bool>,
    /// Registered with a ring (the kernel may write into the buffers).
    registered: bool,
}

// SAFETY: the entries are reached only through `&mut self` (or `&self` for reads of our own
// buffers); the kernel side belongs to the ring the buffers are registered with, which is used
// from one thread at a time like the BufRing itself.
unsafe impl Send for BufRing {}

impl BufRing {
    /// Registers `count` buffers (a power of two, at most 32,768) of `size` bytes with `ring`
    /// as buffer group `group`, every one given to the kernel.
    pub fn register(ring: &IoUring, group: u16, count: u16, size: usize) -> io::Result<BufRing> {
        if !count.is_power_of_two() || count > 1 << 15 || size == 0 || size > u32::MAX as usize {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "buffer ring: bad count or size"));
        }
        let bytes = count as usize * std::mem::size_of::<BufRingEntry>();
        let layout = std::alloc::Layout::from_size_align(bytes, 4096).map_err(io::Error::other)?;
        // SAFETY: the layout's size is not zero; zeroed memory is a valid empty ring (tail 0).
        let entries = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
            .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "buffer ring"))?
            .cast::<BufRingEntry>();
        let mut ring_of = BufRing {
            entries,
            layout,
            // Written now, not left to calloc's untouched zero pages: the kernel goes through
            // every buffer in turn within the first few hundred receives, so they are resident
            // from the start rather than raising RSS then (as a burst of connections did).
            buffers: vec![0xa5u8; count as usize * size].into_boxed_slice(),
            size,
            count,
            tail: 0,
            group,
            held: vec![true; count as usize],
            registered: false,
        };
        // SAFETY: the entries are page-aligned and `count` long; they and the buffers they
        // will name stay allocated while registered (`unregister`, or leaked by `drop`).
        unsafe { ring.submitter().register_buf_ring_with_flags(entries.as_ptr() as u64, count, group, 0)? };
        ring_of.registered = true;
        for id in 0..count {
            ring_of.give_back(id);
        }
        Ok(ring_of)
    }

    /// The buffer group receives name to draw from this ring.
    pub fn group(&self) -> u16 {
        self.group
    }

    /// Bytes of each buffer.
    pub fn buffer_bytes(&self) -> usize {
        self.size
    }

    /// Buffers the kernel may fill now (given to it and not yet handed back by a completion).
    pub fn available(&self) -> usize {
        self.held.iter().filter(|&&held| !held).count()
    }

    /// The `len` bytes a completion says the kernel wrote into buffer `id`; the buffer is ours
    /// until [`BufRing::give_back`].
    ///
    /// # Panics
    /// If `id` or `len` is out of range, or the buffer was already taken.
    pub fn take(&mut self, id: u16, len: usize) -> &[u8] {
        assert!(id < self.count && len <= self.size, "buffer {id}, {len} bytes: out of range");
        assert!(!self.held[id as usize], "buffer {id} taken twice");
        self.held[id as usize] = true;
        &self.buffers[id as usize * self.size..][..len]
    }

    /// Gives buffer `id` back to the kernel.
    ///
    /// # Panics
    /// If the kernel has it already.
    pub fn give_back(&mut self, id: u16) {
        assert!(id < self.count && self.held[id as usize], "buffer {id} is not ours to give back");
        self.held[id as usize] = false;
        let index = (self.tail & (self.count - 1)) as usize;
        // SAFETY: `index` is within the ring. The kernel reads only entries before the tail it
        // has seen, and at most `count` buffers are ever given (each id once until a
        // completion hands it back), so this entry is not one the kernel has yet to read.
        let entry = unsafe { &mut *self.entries.as_ptr().add(index) };
        entry.set_addr(self.buffers[id as usize * self.size..].as_ptr() as u64);
        entry.set_len(self.size as u32);
        entry.set_bid(id);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail overlays the first entry's reserved field, a u16 the kernel reads
        // with acquire semantics; the ring is page-aligned, so the field is aligned for an
        // AtomicU16, and only this ring writes it.
        let tail = unsafe { &*BufRingEntry::tail(self.entries.as_ptr()).cast::<AtomicU16>() };
        // Published after the entry it covers.
        tail.store(self.tail, Ordering::Release);
    }

    /// Unregisters the buffers from `ring` (the one they were registered with) and frees them.
    pub fn unregister(mut self, ring: &IoUring) -> io::Result<()> {
        ring.submitter().unregister_buf_ring(self.group)?;
        self.registered = false;
        Ok(())
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if self.registered {
            // The kernel may still write into the buffers: they are leaked, not freed.
            std::mem::forget(std::mem::take(&mut self.buffers));
            return;
        }
        // SAFETY: allocated in `register` with this layout; no longer registered.
        unsafe { std::alloc::dealloc(self.entries.as_ptr().cast(), self.layout) };
    }
}

/// Where a submission entry keeps `optlen` (the union with `splice_fd_in` and `file_index`):
/// bytes 44..48 of the 64-byte `io_uring_sqe` (linux/io_uring.h).
const OPTLEN_OFFSET: usize = 44;

/// `entry`, a multishot receive ([`io_uring::opcode::RecvMulti`]), ended by the kernel once
/// `total` bytes have arrived (`sqe->optlen`, Linux 6.17's multishot receive limit): its last
/// completion comes without `IORING_CQE_F_MORE`, and what else the socket holds waits there
/// until a receive is posted again. A last buffer may overshoot `total` by at most its size.
/// Older kernels refuse such an entry with `EINVAL`; `total` 0 means no limit. (The io-uring
/// crate builds the receive but does not set this field.)
pub fn limit_total(entry: Entry, total: u32) -> Entry {
    // SAFETY: `Entry` is `#[repr(C)]` around `io_uring_sqe`, 64 bytes of integers and unions
    // of integers, so it and `[u8; 64]` have the same size and every byte pattern is a valid
    // value of either.
    let mut bytes: [u8; 64] = unsafe { std::mem::transmute::<Entry, [u8; 64]>(entry) };
    bytes[OPTLEN_OFFSET..OPTLEN_OFFSET + 4].copy_from_slice(&total.to_ne_bytes());
    // SAFETY: as above; only the optlen field's bytes changed.
    unsafe { std::mem::transmute::<[u8; 64], Entry>(bytes) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use io_uring::{cqueue, opcode, types};
    use std::io::Write;
    use std::os::fd::AsRawFd;

    /// A ring, a connected pair of TCP sockets, and a multishot receive on the server side
    /// drawing from a ring of `count` buffers of `size` bytes.
    fn setup(count: u16, size: usize) -> (IoUring, BufRing, std::net::TcpStream, std::net::TcpStream) {
        let ring = IoUring::new(64).expect("io_uring");
        let buffers = BufRing::register(&ring, 7, count, size).expect("buffer ring");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (ring, buffers, client, server)
    }

    fn post_receive(ring: &mut IoUring, socket: &std::net::TcpStream, group: u16) {
        let entry = opcode::RecvMulti::new(types::Fd(socket.as_raw_fd()), group).build().user_data(1);
        // SAFETY: the receive writes only into the ring's provided buffers, which outlive it.
        unsafe { ring.submission().push(&entry).expect("room in the queue") };
        ring.submit().unwrap();
    }

    /// Waits for `n` completions: (result, buffer id, more to come).
    fn completions(ring: &mut IoUring, n: usize) -> Vec<(i32, Option<u16>, bool)> {
        let mut seen = Vec::new();
        while seen.len() < n {
            ring.submit_and_wait(1).unwrap();
            seen.extend(ring.completion().map(|entry| {
                (entry.result(), cqueue::buffer_select(entry.flags()), cqueue::more(entry.flags()))
            }));
        }
        seen
    }

    #[test]
    fn a_multishot_receive_fills_given_buffers_and_reuses_one_given_back() {
        let (mut ring, mut buffers, mut client, server) = setup(2, 64);
        assert_eq!(buffers.available(), 2);
        post_receive(&mut ring, &server, buffers.group());
        client.write_all(b"get a\r\n").unwrap();
        let first = completions(&mut ring, 1);
        let (result, Some(id), more) = first[0] else { panic!("no buffer: {first:?}") };
        assert!(more, "the receive goes on");
        assert_eq!(buffers.take(id, result as usize), b"get a\r\n");
        assert_eq!(buffers.available(), 1);
        buffers.give_back(id);
        assert_eq!(buffers.available(), 2);
        // Every buffer goes round again once given back.
        for round in 0..6 {
            let message = format!("get {round}\r\n");
            client.write_all(message.as_bytes()).unwrap();
            let done = completions(&mut ring, 1);
            let (result, Some(id), _) = done[0] else { panic!("no buffer: {done:?}") };
            assert_eq!(buffers.take(id, result as usize), message.as_bytes());
            buffers.give_back(id);
        }
        buffers.unregister(&ring).unwrap();
    }

    #[test]
    fn an_exhausted_ring_ends_the_receive_and_the_bytes_wait_in_the_socket() {
        let (mut ring, mut buffers, mut client, server) = setup(2, 16);
        post_receive(&mut ring, &server, buffers.group());
        let mut taken = Vec::new();
        let mut bytes = Vec::new();
        for message in [&b"first\r\n"[..], b"second\r\n"] {
            client.write_all(message).unwrap();
            let done = completions(&mut ring, 1);
            let (result, Some(id), more) = done[0] else { panic!("no buffer: {done:?}") };
            assert!(more);
            bytes.extend_from_slice(buffers.take(id, result as usize));
            taken.push(id);
        }
        assert_eq!(buffers.available(), 0);
        // No buffer left: the next message ends the multishot receive with ENOBUFS.
        client.write_all(b"third\r\n").unwrap();
        let done = completions(&mut ring, 1);
        assert_eq!(done[0].0, -libc::ENOBUFS, "{done:?}");
        assert!(!done[0].2, "an exhausted ring ends the receive");
        // Given back and re-posted, the bytes that waited in the socket arrive.
        for id in taken {
            buffers.give_back(id);
        }
        post_receive(&mut ring, &server, buffers.group());
        let done = completions(&mut ring, 1);
        let (result, Some(id), _) = done[0] else { panic!("no buffer: {done:?}") };
        bytes.extend_from_slice(buffers.take(id, result as usize));
        assert_eq!(bytes, b"first\r\nsecond\r\nthird\r\n");
        buffers.give_back(id);
        buffers.unregister(&ring).unwrap();
    }

    #[test]
    fn a_message_longer_than_a_buffer_arrives_in_several() {
        let (mut ring, mut buffers, mut client, server) = setup(4, 8);
        post_receive(&mut ring, &server, buffers.group());
        client.write_all(b"set key 0 0 5\r\nhello\r\n").unwrap();
        let mut bytes = Vec::new();
        while bytes.len() < 22 {
            // One completion per buffer filled, possibly several at once.
            for (result, id, _) in completions(&mut ring, 1) {
                let id = id.expect("a buffer");
                bytes.extend_from_slice(buffers.take(id, result as usize));
                buffers.give_back(id);
            }
        }
        assert_eq!(bytes, b"set key 0 0 5\r\nhello\r\n");
        buffers.unregister(&ring).unwrap();
    }

    /// The offset is where the crate itself writes optlen (a setsockopt's), and nothing else
    /// of the entry moves (no system call: Miri runs it).
    #[test]
    fn miri_a_total_limit_lands_in_optlen_and_leaves_the_rest() {
        let optval = 0u32;
        let setsockopt =
            opcode::SetSockOpt::new(types::Fd(3), 1, 2, (&optval as *const u32).cast(), 0xA1B2_C3D4).build();
        // SAFETY: as in limit_total: a repr(C) entry of plain integers.
        let crate_bytes: [u8; 64] = unsafe { std::mem::transmute::<Entry, [u8; 64]>(setsockopt) };
        assert_eq!(crate_bytes[OPTLEN_OFFSET..OPTLEN_OFFSET + 4], 0xA1B2_C3D4u32.to_ne_bytes());
        let receive = opcode::RecvMulti::new(types::Fd(5), 7).build().user_data(99);
        // SAFETY: as above.
        let before: [u8; 64] = unsafe { std::mem::transmute::<Entry, [u8; 64]>(receive.clone()) };
        let limited = limit_total(receive, 16_384);
        // SAFETY: as above.
        let after: [u8; 64] = unsafe { std::mem::transmute::<Entry, [u8; 64]>(limited.clone()) };
        assert_eq!(after[OPTLEN_OFFSET..OPTLEN_OFFSET + 4], 16_384u32.to_ne_bytes());
        assert_eq!(before[..OPTLEN_OFFSET], after[..OPTLEN_OFFSET]);
        assert_eq!(before[OPTLEN_OFFSET + 4..], after[OPTLEN_OFFSET + 4..]);
        assert_eq!(limited.get_user_data(), 99);
    }

    /// A limited receive takes about its limit and ends; the rest waits in the socket (on a
    /// kernel before 6.17 the entry is refused with EINVAL, and nothing is received).
    #[test]
    fn a_limited_multishot_receive_ends_after_its_total_and_the_rest_waits() {
        let (mut ring, mut buffers, mut client, server) = setup(16, 64);
        let entry =
            limit_total(opcode::RecvMulti::new(types::Fd(server.as_raw_fd()), buffers.group()).build(), 100);
        // SAFETY: the receive writes only into the ring's provided buffers, which outlive it.
        unsafe { ring.submission().push(&entry.user_data(1)).expect("room in the queue") };
        ring.submit().unwrap();
        client.write_all(&[b'x'; 600]).unwrap();
        let mut received = 0;
        let mut ended = false;
        while !ended {
            for (result, id, more) in completions(&mut ring, 1) {
                if result == -libc::EINVAL {
                    eprintln!("this kernel has no multishot receive limit");
                    return;
                }
                let id = id.expect("a buffer");
                received += buffers.take(id, result as usize).len();
                buffers.give_back(id);
                ended = !more;
            }
        }
        // One buffer may overshoot the limit; the other bytes wait for the next receive.
        assert!((100..164).contains(&received), "{received} bytes received");
        post_receive(&mut ring, &server, buffers.group());
        while received < 600 {
            for (result, id, _) in completions(&mut ring, 1) {
                let id = id.expect("a buffer");
                received += buffers.take(id, result as usize).len();
                buffers.give_back(id);
            }
        }
        assert_eq!(received, 600);
        buffers.unregister(&ring).unwrap();
    }

    #[test]
    #[should_panic(expected = "not ours to give back")]
    fn a_buffer_the_kernel_has_cannot_be_given_twice() {
        let ring = IoUring::new(8).expect("io_uring");
        let mut buffers = BufRing::register(&ring, 1, 2, 16).unwrap();
        buffers.give_back(0);
    }

    #[test]
    fn bad_shapes_are_refused() {
        let ring = IoUring::new(8).expect("io_uring");
        assert!(BufRing::register(&ring, 1, 3, 16).is_err());
        assert!(BufRing::register(&ring, 1, 4, 0).is_err());
    }
}
