//! Datagram bursts over kernel sockets: [`Burst`] receives up to [`BURST_MAX`] datagrams with
//! one `recvmmsg`, [`send_burst`] sends many, each to its own address, with one `sendmmsg`.
//! The server reads and answers its UDP ports with them, the client sends a batch's datagrams
//! with them. Each `unsafe` block is one libc call or one write of a C socket address, on
//! memory this module owns.

use std::io;
use std::net::SocketAddr;

pub mod uring;

/// Most datagrams one [`Burst`] call moves.
pub const BURST_MAX: usize = 64;

/// Buffers for bursts of datagrams: `slots` receive slots of `slot_bytes` each, filled by one
/// `recvmmsg`, and [`send_burst`] for the replies. Plain memory (no pointers kept between
/// calls), so it may move between threads.
pub struct Burst {
    buf: Vec<u8>,
    slot_bytes: usize,
    lens: Vec<usize>,
    truncated: Vec<bool>,
    peers: Vec<Option<SocketAddr>>,
    /// Where the kernel writes the senders' addresses.
    names: Vec<libc::sockaddr_storage>,
}

impl Burst {
    /// Room for `slots` (at most [`BURST_MAX`]) datagrams of up to `slot_bytes` each.
    pub fn new(slots: usize, slot_bytes: usize) -> Burst {
        let slots = slots.clamp(1, BURST_MAX);
        Burst {
            buf: vec![0; slots * slot_bytes],
            slot_bytes,
            lens: vec![0; slots],
            truncated: vec![false; slots],
            peers: vec![None; slots],
            // SAFETY: sockaddr_storage is plain data; zeroed is a valid value.
            names: vec![unsafe { std::mem::zeroed() }; slots],
        }
    }

    /// Datagrams one receive can take.
    pub fn slots(&self) -> usize {
        self.lens.len()
    }

    /// Receives up to the burst's slots of datagrams from `fd` without blocking, in one
    /// `recvmmsg`; returns how many (an error of kind WouldBlock when none are waiting).
    pub fn recv(&mut self, fd: std::os::fd::RawFd) -> io::Result<usize> {
        use std::mem::MaybeUninit;
        let slots = self.lens.len();
        let mut iovecs = [MaybeUninit::<libc::iovec>::uninit(); BURST_MAX];
        let mut headers = [MaybeUninit::<libc::mmsghdr>::uninit(); BURST_MAX];
        let chunks = self.buf.chunks_exact_mut(self.slot_bytes);
        for (slot, (chunk, name)) in chunks.zip(self.names.iter_mut()).enumerate() {
            let iovec =
                iovecs[slot].write(libc::iovec { iov_base: chunk.as_mut_ptr().cast(), iov_len: chunk.len() });
            // SAFETY: mmsghdr is plain data; zeroed is valid (null pointers, zero lengths).
            let header = headers[slot].write(unsafe { std::mem::zeroed() });
            header.msg_hdr.msg_iov = iovec;
            header.msg_hdr.msg_iovlen = 1;
            header.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
            header.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        }
        // SAFETY: the first `slots` headers were initialised above, each pointing at its own
        // initialised iovec (one slot of `self.buf`) and its own sockaddr_storage in
        // `self.names`, with their lengths; both outlive the call and are not otherwise
        // borrowed during it. The kernel reads and writes only those `slots` headers.
        let received = unsafe {
            libc::recvmmsg(
                fd,
                headers.as_mut_ptr().cast::<libc::mmsghdr>(),
                slots as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if received < 0 {
            return Err(io::Error::last_os_error());
        }
        let received = received as usize;
        for (slot, header) in headers[..received].iter().enumerate() {
            // SAFETY: initialised above (slot < received <= slots).
            let header = unsafe { header.assume_init_ref() };
            self.lens[slot] = (header.msg_len as usize).min(self.slot_bytes);
            self.truncated[slot] = header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            let len = header.msg_hdr.msg_namelen;
            // SAFETY: the kernel wrote a socket address of `len` bytes into the storage.
            self.peers[slot] = unsafe { socket2::SockAddr::new(self.names[slot], len) }.as_socket();
        }
        Ok(received)
    }

    /// Datagram `slot` of the last receive: its bytes, whether it was longer than a slot (and
    /// cut), and its sender (`None` for an address that is not IP).
    pub fn datagram(&self, slot: usize) -> (&[u8], bool, Option<SocketAddr>) {
        let start = slot * self.slot_bytes;
        (&self.buf[start..start + self.lens[slot]], self.truncated[slot], self.peers[slot])
    }
}

/// Writes `peer` as a C socket address into `storage` (big enough for either family); returns
/// the pointer and length for a `msghdr`.
fn socket_address(
    storage: &mut std::mem::MaybeUninit<libc::sockaddr_in6>,
    peer: SocketAddr,
) -> (*mut libc::c_void, libc::socklen_t) {
    match peer {
        SocketAddr::V4(v4) => {
            let address = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v4.ip().octets()) },
                sin_zero: [0; 8],
            };
            let place = storage.as_mut_ptr().cast::<libc::sockaddr_in>();
            const _: () = assert!(
                std::mem::size_of::<libc::sockaddr_in>() <= std::mem::size_of::<libc::sockaddr_in6>()
                    && std::mem::align_of::<libc::sockaddr_in>()
                        <= std::mem::align_of::<libc::sockaddr_in6>()
            );
            // SAFETY: `storage` is valid for writes of a sockaddr_in6, which is at least as large
            // and as aligned as a sockaddr_in (checked at compile time above).
            unsafe { place.write(address) };
            (place.cast(), std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(v6) => {
            let address = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr { s6_addr: v6.ip().octets() },
                sin6_scope_id: v6.scope_id(),
            };
            let place = storage.write(address);
            (
                (place as *mut libc::sockaddr_in6).cast(),
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}

/// Sends `datagrams` (peer, bytes) from `fd` with `sendmmsg`, up to [`BURST_MAX`] per call,
/// without blocking; returns how many were sent (fewer when the socket's buffer filled).
pub fn send_burst(fd: std::os::fd::RawFd, datagrams: &[(SocketAddr, &[u8])]) -> io::Result<usize> {
    use std::mem::MaybeUninit;
    let mut sent = 0;
    while sent < datagrams.len() {
        let chunk = &datagrams[sent..(sent + BURST_MAX).min(datagrams.len())];
        // Only the chunk's entries are written (no zeroing of the whole arrays per call).
        let mut iovecs = [MaybeUninit::<libc::iovec>::uninit(); BURST_MAX];
        let mut headers = [MaybeUninit::<libc::mmsghdr>::uninit(); BURST_MAX];
        let mut names = [MaybeUninit::<libc::sockaddr_in6>::uninit(); BURST_MAX];
        for (slot, (peer, bytes)) in chunk.iter().enumerate() {
            let (name, name_len) = socket_address(&mut names[slot], *peer);
            let iovec = iovecs[slot]
                .write(libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() });
            // SAFETY: mmsghdr is plain data; zeroed is valid (null pointers, zero lengths).
            let header = &mut headers[slot].write(unsafe { std::mem::zeroed() }).msg_hdr;
            header.msg_iov = iovec;
            header.msg_iovlen = 1;
            header.msg_name = name;
            header.msg_namelen = name_len;
        }
        // SAFETY: the first `chunk.len()` headers were initialised above, each pointing at its
        // own initialised iovec over a borrowed byte slice that lives through the call (the
        // kernel only reads it) and at its own initialised address of the stated length;
        // `chunk.len()` headers are passed.
        let done = unsafe {
            libc::sendmmsg(
                fd,
                headers.as_mut_ptr().cast::<libc::mmsghdr>(),
                chunk.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if done < 0 {
            let error = io::Error::last_os_error();
            if sent > 0 && error.kind() == io::ErrorKind::WouldBlock {
                return Ok(sent);
            }
            return Err(error);
        }
        sent += done as usize;
        if (done as usize) < chunk.len() {
            return Ok(sent);
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_burst_reaches_ipv6_peers() {
        // Where the machine has IPv6 loopback: the address is written in the IPv6 form.
        let Ok(sender) = std::net::UdpSocket::bind("[::1]:0") else { return };
        let v6 = std::net::UdpSocket::bind("[::1]:0").unwrap();
        let datagrams = [(v6.local_addr().unwrap(), &b"six"[..]), (v6.local_addr().unwrap(), &b"again"[..])];
        assert_eq!(send_burst(sender.as_raw_fd(), &datagrams).unwrap(), 2);
        let mut burst = Burst::new(4, 64);
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while seen.len() < 2 {
            assert!(std::time::Instant::now() < deadline, "the datagrams arrive");
            let Ok(count) = burst.recv(v6.as_raw_fd()) else { continue };
            for slot in 0..count {
                let (bytes, _, peer) = burst.datagram(slot);
                assert_eq!(peer, Some(sender.local_addr().unwrap()));
                seen.push(bytes.to_vec());
            }
        }
        assert_eq!(seen, [b"six".to_vec(), b"again".to_vec()]);
    }

    #[test]
    fn a_burst_sends_and_receives_many_datagrams_in_one_call_each() {
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = server.local_addr().unwrap();
        let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 1 + i as usize * 10]).collect();
        let datagrams: Vec<(SocketAddr, &[u8])> = payloads.iter().map(|p| (to, p.as_slice())).collect();
        assert_eq!(send_burst(client.as_raw_fd(), &datagrams).unwrap(), 40);
        // One more, longer than a slot.
        client.send_to(&[7; 600], to).unwrap();
        let mut burst = Burst::new(32, 512);
        let mut seen = Vec::new();
        let mut truncated = 0;
        while seen.len() < 41 {
            let count = burst.recv(server.as_raw_fd()).unwrap();
            assert!(count <= 32);
            for slot in 0..count {
                let (bytes, cut, peer) = burst.datagram(slot);
                assert_eq!(peer, Some(client.local_addr().unwrap()));
                truncated += usize::from(cut);
                seen.push(bytes.to_vec());
            }
        }
        for (i, payload) in payloads.iter().enumerate() {
            assert_eq!(&seen[i], payload, "datagram {i}");
        }
        assert_eq!(seen[40].len(), 512);
        assert_eq!(truncated, 1);
        let error = burst.recv(server.as_raw_fd()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
    }
}
