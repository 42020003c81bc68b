//! Every open socket by file descriptor, for `stats conns` (memcached's list of connections:
//! listeners, UDP sockets and clients, with their addresses, states and idle seconds).
//!
//! Workers add a socket when they open or accept it and remove it before they close it; a
//! client's state and last command time are atomics the owning worker writes only when they
//! change, so the request path takes no lock.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};

/// The next socket's id: counted from 1 for the life of the process, never reused (where a
/// descriptor is reused as soon as its socket closes).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
use std::sync::{Arc, Mutex};

/// A socket's address as memcached prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Addr {
    /// An IP address and port.
    Inet(SocketAddr),
    /// A UNIX domain socket's path (a client's end has none).
    Unix(Option<Arc<Path>>),
}

/// What kind of socket an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A TCP or UNIX listener.
    Listener,
    /// A UDP socket.
    Udp,
    /// A client's stream connection.
    Client,
}

/// A client connection's state, as `stats conns` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Accepted, no command yet.
    New = 0,
    /// Waiting for (the rest of) a command line.
    Read = 1,
    /// A command line has arrived, its data block has not.
    Nread = 2,
    /// A `watch` connection receiving log lines.
    Watch = 3,
}

impl State {
    fn name(code: u8) -> &'static str {
        match code {
            0 => "conn_new_cmd",
            2 => "conn_nread",
            3 => "conn_watch",
            _ => "conn_read",
        }
    }
}

/// One socket's entry; a client's is shared with its connection, which updates it.
#[derive(Debug)]
pub struct Info {
    /// Its id, unique for the life of the process: Redis's CLIENT ID.
    pub id: u64,
    /// Listener, UDP socket or client.
    pub kind: Kind,
    /// The peer's address (clients) or the socket's own (listeners and UDP sockets).
    pub addr: Addr,
    /// The address the client connected to (clients only).
    pub local: Option<Addr>,
    state: AtomicU8,
    last_cmd_secs: AtomicU32,
    /// -Z: the common name of the client's certificate, once its handshake has finished.
    tls_peer_cn: std::sync::OnceLock<Box<str>>,
    /// When it was opened or accepted (unix seconds): CLIENT LIST's age.
    pub created_secs: u32,
    /// A RESP connection's protocol version (2, or 3 after `HELLO 3`); 0 for memcached's.
    resp: AtomicU8,
    /// A RESP connection's name (CLIENT SETNAME; empty for none).
    name: Mutex<Box<[u8]>>,
    /// CLIENT KILL shut its socket down: it is leaving (its worker closes it on its next turn).
    pub killed: std::sync::atomic::AtomicBool,
    /// A RESP connection's database (SELECT): CLIENT LIST's `db`.
    db: AtomicU8,
}

impl Info {
    /// A socket opened or accepted at `now_secs`.
    pub fn new(kind: Kind, addr: Addr, local: Option<Addr>, now_secs: u32) -> Info {
        Info {
            id: NEXT_ID.fetch_add(1, Relaxed),
            kind,
            addr,
            local,
            state: AtomicU8::new(0),
            last_cmd_secs: AtomicU32::new(now_secs),
            tls_peer_cn: std::sync::OnceLock::new(),
            created_secs: now_secs,
            resp: AtomicU8::new(0),
            name: Mutex::new(Box::default()),
            killed: std::sync::atomic::AtomicBool::new(false),
            db: AtomicU8::new(0),
        }
    }

    /// Records a RESP connection's database (SELECT).
    pub fn set_db(&self, db: u8) {
        self.db.store(db, Relaxed);
    }

    /// A RESP connection's database.
    pub fn db(&self) -> u8 {
        self.db.load(Relaxed)
    }

    /// Records a RESP connection's protocol version (2 or 3).
    pub fn set_resp(&self, version: u8) {
        self.resp.store(version, Relaxed);
    }

    /// A RESP connection's protocol version; 0 for a connection of memcached's protocols.
    pub fn resp(&self) -> u8 {
        self.resp.load(Relaxed)
    }

    /// Names the connection (an empty name clears it).
    pub fn set_name(&self, name: &[u8]) {
        *self.name.lock().unwrap_or_else(|e| e.into_inner()) = name.into();
    }

    /// The connection's name (empty: none).
    pub fn name(&self) -> Box<[u8]> {
        self.name.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Seconds since its last command at `now_secs`.
    pub fn idle_secs(&self, now_secs: u32) -> u32 {
        now_secs.saturating_sub(self.last_cmd_secs.load(Relaxed))
    }

    /// Records the common name of the client's TLS certificate (`stats conns` shows it).
    pub fn set_tls_peer_cn(&self, name: String) {
        let _ = self.tls_peer_cn.set(name.into_boxed_str());
    }

    /// Records the connection's state (a store only when it changes).
    #[inline]
    pub fn set_state(&self, state: State) {
        if self.state.load(Relaxed) != state as u8 {
            self.state.store(state as u8, Relaxed);
        }
    }

    /// Whether the connection waits for a command (`conn_new_cmd` or `conn_read`: no data
    /// block half-read, not a watcher), silent since before `since_secs`.
    pub fn idle_since(&self, since_secs: u32) -> bool {
        let state = self.state.load(Relaxed);
        (state == State::New as u8 || state == State::Read as u8)
            && self.last_cmd_secs.load(Relaxed) < since_secs
    }

    /// Records that commands arrived at `now_secs` (stores only when something changes).
    #[inline]
    pub fn touch(&self, now_secs: u32) {
        if self.last_cmd_secs.load(Relaxed) != now_secs {
            self.last_cmd_secs.store(now_secs, Relaxed);
        }
        if self.state.load(Relaxed) == State::New as u8 {
            self.state.store(State::Read as u8, Relaxed);
        }
    }

    /// Records that the connection's input ran dry holding `pending` (a partial request).
    #[inline]
    pub fn ran_dry(&self, pending: &[u8]) {
        if pending.is_empty() {
            if self.state.load(Relaxed) == State::Nread as u8 {
                self.state.store(State::Read as u8, Relaxed);
            }
            return;
        }
        // A command line whose data block is still arriving, or part of a line.
        let line = &pending[..pending.len().min(qs_proto::LINE_BYTES_MAX + 2)];
        self.set_state(if line.contains(&b'\n') { State::Nread } else { State::Read });
    }
}

/// The open sockets by file descriptor.
#[derive(Debug, Default)]
pub struct Registry {
    entries: Mutex<BTreeMap<i32, Arc<Info>>>,
}

impl Registry {
    /// Adds socket `fd` (replacing what a closed socket of the same number left).
    pub fn add(&self, fd: i32, info: Arc<Info>) {
        self.lock().insert(fd, info);
    }

    /// Removes socket `fd`, before it is closed.
    pub fn remove(&self, fd: i32) {
        self.lock().remove(&fd);
    }

    /// Sockets registered (listeners, UDP sockets and client connections).
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Socket `fd`'s entry.
    pub fn get(&self, fd: i32) -> Option<Arc<Info>> {
        self.lock().get(&fd).cloned()
    }

    /// Calls `each` with every socket by descriptor, the registry held: no socket listed is
    /// closed meanwhile (a worker removes a socket before it closes it).
    pub fn for_each(&self, mut each: impl FnMut(i32, &Info)) {
        for (&fd, info) in self.lock().iter() {
            each(fd, info);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, Arc<Info>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `stats conns` (without its END) as memcached 1.6.18 does: by descriptor, each
    /// socket's address, a client's local address, its state and seconds since its last
    /// command (and, beyond memcached, a TLS client's certificate name). `asking` is the descriptor of the connection that asked (it is parsing a
    /// command).
    pub fn write_stats(&self, asking: i32, now_secs: u32, out: &mut Vec<u8>) {
        let entries = self.lock();
        let mut text = String::new();
        for (fd, info) in entries.iter() {
            if info.kind == Kind::Udp {
                let _ = write!(text, "STAT {fd}:UDP UDP\r\n");
            }
            let _ = write!(text, "STAT {fd}:addr {}\r\n", addr_text(&info.addr, info.kind == Kind::Udp));
            if let Some(local) = &info.local {
                let _ = write!(text, "STAT {fd}:listen_addr {}\r\n", addr_text(local, false));
            }
            let state = match info.kind {
                Kind::Listener => "conn_listening",
                Kind::Udp => "conn_read",
                Kind::Client if *fd == asking => "conn_parse_cmd",
                Kind::Client => State::name(info.state.load(Relaxed)),
            };
            let _ = write!(text, "STAT {fd}:state {state}\r\n");
            let idle = now_secs.saturating_sub(info.last_cmd_secs.load(Relaxed));
            let _ = write!(text, "STAT {fd}:secs_since_last_cmd {idle}\r\n");
            if let Some(name) = info.tls_peer_cn.get() {
                // Beyond memcached 1.6.18 (its proxy reads the same name: tls_peer_cn).
                let _ = write!(text, "STAT {fd}:tls_peer_cn {}\r\n", name.replace(['\r', '\n'], " "));
            }
        }
        out.extend_from_slice(text.as_bytes());
    }
}

/// memcached's form: `tcp:127.0.0.1:11211`, `tcp6:[::1]:11211`, `udp:...`, `unix:/path`.
pub fn addr_text(addr: &Addr, udp: bool) -> String {
    match addr {
        Addr::Inet(SocketAddr::V4(v4)) => {
            format!("{}:{}:{}", if udp { "udp" } else { "tcp" }, v4.ip(), v4.port())
        }
        Addr::Inet(SocketAddr::V6(v6)) => {
            format!("{}:[{}]:{}", if udp { "udp6" } else { "tcp6" }, v6.ip(), v6.port())
        }
        Addr::Unix(path) => {
            format!("unix:{}", path.as_deref().map(|p| p.display().to_string()).unwrap_or_default())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_sockets_by_descriptor_as_memcached_does() {
        let registry = Registry::default();
        let listen: SocketAddr = "0.0.0.0:11211".parse().unwrap();
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:11211".parse().unwrap();
        registry.add(9, Arc::new(Info::new(Kind::Client, Addr::Inet(peer), Some(Addr::Inet(local)), 100)));
        registry.add(5, Arc::new(Info::new(Kind::Listener, Addr::Inet(listen), None, 90)));
        registry.add(6, Arc::new(Info::new(Kind::Udp, Addr::Inet(listen), None, 90)));
        let client = Arc::new(Info::new(Kind::Client, Addr::Unix(None), Some(Addr::Unix(None)), 100));
        client.ran_dry(b"set a 0 0 5\r\nab");
        registry.add(11, client);
        let mut out = Vec::new();
        registry.write_stats(9, 102, &mut out);
        let expected = "STAT 5:addr tcp:0.0.0.0:11211\r\nSTAT 5:state conn_listening\r\n\
            STAT 5:secs_since_last_cmd 12\r\n\
            STAT 6:UDP UDP\r\nSTAT 6:addr udp:0.0.0.0:11211\r\nSTAT 6:state conn_read\r\n\
            STAT 6:secs_since_last_cmd 12\r\n\
            STAT 9:addr tcp:127.0.0.1:40000\r\nSTAT 9:listen_addr tcp:127.0.0.1:11211\r\n\
            STAT 9:state conn_parse_cmd\r\nSTAT 9:secs_since_last_cmd 2\r\n\
            STAT 11:addr unix:\r\nSTAT 11:listen_addr unix:\r\nSTAT 11:state conn_nread\r\n\
            STAT 11:secs_since_last_cmd 2\r\n";
        assert_eq!(String::from_utf8(out).unwrap(), expected);
        registry.remove(9);
        let mut out = Vec::new();
        registry.write_stats(0, 102, &mut out);
        assert!(!String::from_utf8(out).unwrap().contains("STAT 9:"));
    }

    #[test]
    fn ipv6_addresses_are_bracketed() {
        let addr: SocketAddr = "[::1]:11211".parse().unwrap();
        assert_eq!(addr_text(&Addr::Inet(addr), false), "tcp6:[::1]:11211");
        assert_eq!(addr_text(&Addr::Inet(addr), true), "udp6:[::1]:11211");
        assert_eq!(addr_text(&Addr::Unix(Some(Path::new("/tmp/s").into())), false), "unix:/tmp/s");
    }
}
