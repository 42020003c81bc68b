//! The listening sockets a worker accepts from: TCP or the UNIX domain socket, each with the
//! protocol and the security its connections start with.

use super::Stream;
use crate::observe::registry::Addr;

/// What a listener's connections speak under their protocol: plain bytes, TLS (-Z), or TLS
/// that requires the client's certificate (`mtls:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Security {
    /// Plain TCP (`notls:`, or no -Z), or the UNIX domain socket.
    Plain,
    /// TLS (-Z).
    Tls,
    /// TLS, the client's certificate required (`mtls:`).
    MutualTls,
}

impl Security {
    /// A listener's, under a server with `tls` (-Z) and a listen address marked `notls:` or
    /// `mtls:`.
    pub fn of(tls: bool, notls: bool, mtls: bool) -> Security {
        match (tls && !notls, mtls) {
            (false, _) => Security::Plain,
            (true, false) => Security::Tls,
            (true, true) => Security::MutualTls,
        }
    }
}

/// A listening socket, its address as `stats conns` names it, and what the connections it
/// accepts start with.
pub struct Listening {
    pub socket: Listener,
    pub addr: Addr,
    /// -B, or the listen address's `proto[...]`.
    pub protocol: crate::config::Protocol,
    pub security: Security,
}

impl Listening {
    /// `socket`, named with `path` when it is the UNIX domain socket (-s).
    pub fn new(
        socket: Listener,
        path: Option<&std::path::Path>,
        protocol: crate::config::Protocol,
        security: Security,
    ) -> Listening {
        Listening { addr: socket.addr(path), socket, protocol, security }
    }
}

/// A listening socket: TCP, or a UNIX domain socket (memcached's `-s`).
pub enum Listener {
    /// TCP.
    Tcp(mio::net::TcpListener),
    /// A UNIX domain socket.
    Unix(mio::net::UnixListener),
}

impl Listener {
    /// The socket the poll watches.
    pub(super) fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Listener::Tcp(socket) => socket,
            Listener::Unix(socket) => socket,
        }
    }

    /// Accepts one connection (TCP without Nagle's delay, as memcached sets it), with the
    /// peer's address.
    pub fn accept(&self) -> std::io::Result<(Stream, Addr)> {
        match self {
            Listener::Tcp(listener) => {
                let (stream, peer) = listener.accept()?;
                let _ = stream.set_nodelay(true);
                Ok((Stream::Tcp(stream), Addr::Inet(peer)))
            }
            Listener::Unix(listener) => Ok((Stream::Unix(listener.accept()?.0), Addr::Unix(None))),
        }
    }

    /// The address it listens on (`path` names a UNIX socket's).
    pub fn addr(&self, path: Option<&std::path::Path>) -> Addr {
        match self {
            Listener::Tcp(listener) => match listener.local_addr() {
                Ok(addr) => Addr::Inet(addr),
                Err(_) => Addr::Unix(None),
            },
            Listener::Unix(_) => Addr::Unix(path.map(Into::into)),
        }
    }

    /// Its file descriptor.
    pub fn fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        match self {
            Listener::Tcp(listener) => listener.as_raw_fd(),
            Listener::Unix(listener) => listener.as_raw_fd(),
        }
    }
}
