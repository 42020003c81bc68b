//! The transports a connection's bytes move over: stream sockets (TCP, UNIX domain, TLS over
//! TCP), the listeners that accept them, and the io_uring ring that reads and writes them
//! ([`ring`]). What the bytes mean, and what a connection holds between them, is session/'s.

mod listener;
pub mod ring;
pub mod tls;

pub use listener::{Listener, Listening, Security};

use crate::observe::registry::Addr;

/// A connected stream socket: TCP, or a UNIX domain socket (memcached's `-s`).
pub enum Stream {
    /// TCP.
    Tcp(mio::net::TcpStream),
    /// A UNIX domain socket.
    Unix(mio::net::UnixStream),
    /// TCP with TLS (-Z).
    Tls(Box<tls::TlsStream>),
}

impl std::io::Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(buf),
            Stream::Unix(stream) => stream.read(buf),
            Stream::Tls(stream) => stream.read(buf),
        }
    }
}

impl std::io::Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.write(buf),
            Stream::Unix(stream) => stream.write(buf),
            Stream::Tls(stream) => stream.write(buf),
        }
    }

    /// One `writev` for a plain socket; TLS takes the first slice.
    fn write_vectored(&mut self, slices: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.write_vectored(slices),
            Stream::Unix(stream) => stream.write_vectored(slices),
            Stream::Tls(stream) => stream.write_vectored(slices),
        }
    }

    /// Sends what TLS still holds (nothing to do for a plain socket).
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tls(stream) => stream.flush(),
            _ => Ok(()),
        }
    }
}

impl Stream {
    /// The socket the poll watches.
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(socket) => socket,
            Stream::Unix(socket) => socket,
            Stream::Tls(stream) => stream.socket_mut(),
        }
    }
}

/// `mio::event::Source` for a type whose `source()` gives the socket the poll watches.
macro_rules! via_source {
    ($type:ident) => {
        impl mio::event::Source for $type {
            fn register(
                &mut self,
                registry: &mio::Registry,
                token: mio::Token,
                interests: mio::Interest,
            ) -> std::io::Result<()> {
                self.source().register(registry, token, interests)
            }

            fn reregister(
                &mut self,
                registry: &mio::Registry,
                token: mio::Token,
                interests: mio::Interest,
            ) -> std::io::Result<()> {
                self.source().reregister(registry, token, interests)
            }

            fn deregister(&mut self, registry: &mio::Registry) -> std::io::Result<()> {
                self.source().deregister(registry)
            }
        }
    };
}

via_source!(Stream);
via_source!(Listener);

impl Stream {
    /// Its file descriptor.
    pub fn fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        match self {
            Stream::Tcp(stream) => stream.as_raw_fd(),
            Stream::Unix(stream) => stream.as_raw_fd(),
            Stream::Tls(stream) => stream.socket().as_raw_fd(),
        }
    }

    /// The address the peer connected to: the listener's, or the socket's own where the
    /// listener takes any address (`listener` is the listener's address).
    pub fn local_addr(&self, listener: &Addr) -> Addr {
        match (self, listener) {
            (Stream::Tcp(stream), Addr::Inet(addr)) if addr.ip().is_unspecified() => {
                stream.local_addr().map_or_else(|_| listener.clone(), Addr::Inet)
            }
            (Stream::Tls(stream), Addr::Inet(addr)) if addr.ip().is_unspecified() => {
                stream.socket().local_addr().map_or_else(|_| listener.clone(), Addr::Inet)
            }
            _ => listener.clone(),
        }
    }
}

/// Where a connection's requests come from.
pub enum Transport {
    /// A stream connection (TCP or UNIX domain socket).
    Tcp(Stream),
    /// One UDP datagram's requests: answered to `peer` through the worker's UDP socket, then
    /// the connection ends.
    Udp {
        /// The client's address.
        peer: std::net::SocketAddr,
        /// The frame header's request id, echoed in every reply datagram.
        request_id: u16,
        /// Which of the worker's UDP sockets it came in on (the replies leave from it).
        socket: usize,
    },
}
