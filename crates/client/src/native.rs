//! The native protocol's client (docs/PROTOCOL.md): fetches the directory, hashes each key,
//! sends each request straight to the port of the partition that owns it, batches requests per
//! partition per datagram, matches responses by request id, retransmits what is unanswered
//! (incr and decr keep their request id, which the server de-duplicates), and refreshes the
//! directory when the server says it is stale.

use qs_proto::native::{self as wire, Directory, Header, Kind, Opcode, RequestMsg, Responses, Status};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How datagrams move: a UDP socket, or a test's shim around one that drops and reorders.
pub trait Datagrams {
    /// Sends one datagram to `to`.
    fn send_to(&mut self, datagram: &[u8], to: SocketAddr) -> io::Result<()>;
    /// Sends every datagram, each to its address, in order; a transport that can hands them
    /// to the kernel together.
    fn send_all(&mut self, datagrams: &[(SocketAddr, &[u8])]) -> io::Result<()> {
        datagrams.iter().try_for_each(|&(to, datagram)| self.send_to(datagram, to))
    }
    /// Receives one datagram into `buf`, waiting at most `timeout`; an error of kind
    /// WouldBlock or TimedOut when none came.
    fn recv_from(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<(usize, SocketAddr)>;
}

impl Datagrams for UdpSocket {
    fn send_to(&mut self, datagram: &[u8], to: SocketAddr) -> io::Result<()> {
        UdpSocket::send_to(self, datagram, to).map(|_| ())
    }

    fn recv_from(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<(usize, SocketAddr)> {
        self.set_read_timeout(Some(timeout.max(Duration::from_micros(1))))?;
        UdpSocket::recv_from(self, buf)
    }
}

/// The client's own socket: remembers its read timeout (no `setsockopt` per receive) and can
/// busy-poll for a while before it sleeps in the kernel.
///
/// Busy-polling is what MICA's clients do (they poll their NIC queues): a reply that arrives
/// while the client polls needs no wake-up, and on loopback that wake-up (an inter-processor
/// interrupt) is paid inside the *server's* send. It costs the client's core its idle time,
/// so it is off unless asked for ([`NativeClient::set_busy_poll`]).
pub struct Socket {
    socket: UdpSocket,
    /// The read timeout set on the socket (when it is blocking).
    timeout: Option<Duration>,
    /// How long a receive polls before it blocks; zero: it blocks at once.
    spin: Duration,
    /// The socket is in non-blocking mode (switched only when a receive changes mode).
    nonblocking: bool,
}

impl Socket {
    /// Wraps a bound socket.
    pub fn new(socket: UdpSocket) -> Socket {
        Socket { socket, timeout: None, spin: Duration::ZERO, nonblocking: false }
    }

    /// Polls for up to `spin` in every receive before sleeping (zero: sleep at once).
    pub fn set_busy_poll(&mut self, spin: Duration) {
        self.spin = spin;
    }

    fn recv_blocking(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<(usize, SocketAddr)> {
        let timeout = timeout.max(Duration::from_micros(1));
        self.set_nonblocking(false)?;
        // Timeouts are rounded to 100 µs steps, so a run of receives sets it once.
        let rounded = Duration::from_micros(timeout.as_micros().div_ceil(100) as u64 * 100);
        if self.timeout != Some(rounded) {
            self.socket.set_read_timeout(Some(rounded))?;
            self.timeout = Some(rounded);
        }
        self.socket.recv_from(buf)
    }

    fn set_nonblocking(&mut self, nonblocking: bool) -> io::Result<()> {
        if self.nonblocking != nonblocking {
            self.socket.set_nonblocking(nonblocking)?;
            self.nonblocking = nonblocking;
        }
        Ok(())
    }
}

impl Datagrams for Socket {
    fn send_to(&mut self, datagram: &[u8], to: SocketAddr) -> io::Result<()> {
        match self.socket.send_to(datagram, to) {
            // A full send buffer while polling: wait for room as a blocking socket would.
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                self.set_nonblocking(false)?;
                self.socket.send_to(datagram, to).map(|_| ())
            }
            result => result.map(|_| ()),
        }
    }

    /// One `sendmmsg` per 64 datagrams (so they reach the server as one burst); what a
    /// full send buffer refuses goes out blocking, one at a time.
    fn send_all(&mut self, datagrams: &[(SocketAddr, &[u8])]) -> io::Result<()> {
        let sent = match qs_net::send_burst(self.socket.as_raw_fd(), datagrams) {
            Ok(sent) => sent,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => 0,
            Err(error) => return Err(error),
        };
        if sent < datagrams.len() {
            self.set_nonblocking(false)?;
            for &(to, datagram) in &datagrams[sent..] {
                self.socket.send_to(datagram, to)?;
            }
        }
        Ok(())
    }

    fn recv_from(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<(usize, SocketAddr)> {
        if self.spin.is_zero() {
            return self.recv_blocking(buf, timeout);
        }
        let start = Instant::now();
        let spin = self.spin.min(timeout);
        self.set_nonblocking(true)?;
        let polled = loop {
            match self.socket.recv_from(buf) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    if start.elapsed() >= spin {
                        break None;
                    }
                    std::hint::spin_loop();
                }
                result => break Some(result),
            }
        };
        match polled {
            Some(result) => result,
            None => match timeout.checked_sub(start.elapsed()) {
                Some(left) if !left.is_zero() => self.recv_blocking(buf, left),
                _ => Err(io::ErrorKind::TimedOut.into()),
            },
        }
    }
}

/// One operation of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    /// Read a key.
    Get(&'a [u8]),
    /// Store a value; `cas` non-zero stores only over that version.
    Set {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
        /// Client flags.
        flags: u32,
        /// memcached's exptime.
        exptime: i32,
        /// CAS to compare, or 0.
        cas: u64,
    },
    /// Store only if absent.
    Add {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
        /// Client flags.
        flags: u32,
        /// memcached's exptime.
        exptime: i32,
    },
    /// Store only if present.
    Replace {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
        /// Client flags.
        flags: u32,
        /// memcached's exptime.
        exptime: i32,
    },
    /// Remove; `cas` non-zero removes only that version.
    Delete {
        /// The key.
        key: &'a [u8],
        /// CAS to compare, or 0.
        cas: u64,
    },
    /// Add to a decimal counter.
    Incr {
        /// The key.
        key: &'a [u8],
        /// The amount.
        delta: u64,
    },
    /// Subtract from a decimal counter (stops at 0).
    Decr {
        /// The key.
        key: &'a [u8],
        /// The amount.
        delta: u64,
    },
    /// Set a new expiry.
    Touch {
        /// The key.
        key: &'a [u8],
        /// memcached's exptime.
        exptime: i32,
    },
}

impl<'a> Op<'a> {
    /// The request this operation sends (request id and keyhash filled in by the client).
    fn request(&self) -> RequestMsg<'a> {
        let blank = |opcode, key| RequestMsg {
            opcode,
            request_id: 0,
            keyhash: 0,
            flags: 0,
            exptime: 0,
            operand: 0,
            key,
            value: b"",
        };
        match *self {
            Op::Get(key) => blank(Opcode::Get, key),
            Op::Set { key, value, flags, exptime, cas } => {
                RequestMsg { value, flags, exptime, operand: cas, ..blank(Opcode::Set, key) }
            }
            Op::Add { key, value, flags, exptime } => {
                RequestMsg { value, flags, exptime, ..blank(Opcode::Add, key) }
            }
            Op::Replace { key, value, flags, exptime } => {
                RequestMsg { value, flags, exptime, ..blank(Opcode::Replace, key) }
            }
            Op::Delete { key, cas } => RequestMsg { operand: cas, ..blank(Opcode::Delete, key) },
            Op::Incr { key, delta } => RequestMsg { operand: delta, ..blank(Opcode::Incr, key) },
            Op::Decr { key, delta } => RequestMsg { operand: delta, ..blank(Opcode::Decr, key) },
            Op::Touch { key, exptime } => RequestMsg { exptime, ..blank(Opcode::Touch, key) },
        }
    }
}

/// A server's answer to one operation. Outcomes such as a miss or a refused add are values
/// here, not errors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The outcome.
    pub status: Status,
    /// Client flags (get).
    pub flags: u32,
    /// The item's CAS (get and stores), or the counter's new value (incr, decr).
    pub number: u64,
    /// The value (get).
    pub value: Vec<u8>,
}

/// Why an operation got no answer from the server.
#[derive(Debug)]
pub enum Error {
    /// No answer after every retransmission.
    Timeout,
    /// The request or its reply does not fit a datagram: use TCP.
    UseTcp,
    /// The key is empty or longer than 250 bytes.
    BadKey,
    /// The socket failed.
    Io(io::Error),
    /// The server's directory could not be read.
    NoDirectory,
    /// The server said something the client does not understand (an error line, a bad reply).
    Protocol(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Timeout => write!(f, "no reply from the server"),
            Error::UseTcp => write!(f, "too large for a datagram: use TCP"),
            Error::BadKey => write!(f, "keys are 1 to 250 bytes"),
            Error::Io(error) => write!(f, "{error}"),
            Error::NoDirectory => write!(f, "the server sent no directory"),
            Error::Protocol(what) => write!(f, "unexpected reply: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(error: io::Error) -> Error {
        Error::Io(error)
    }
}

/// Retransmission settings.
#[derive(Clone, Copy, Debug)]
pub struct Retry {
    /// How long to wait for the answers of one transmission.
    pub timeout: Duration,
    /// Transmissions after the first.
    pub retries: u32,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry { timeout: Duration::from_millis(50), retries: 8 }
    }
}

/// Figures of a client's traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Datagrams sent (retransmissions included).
    pub datagrams_sent: u64,
    /// Requests sent again after a timeout.
    pub retransmitted: u64,
    /// Requests the server redirected (stale directory).
    pub redirected: u64,
    /// Directory fetches.
    pub directory_fetches: u64,
}

/// A native-protocol client of one server.
pub struct NativeClient<D: Datagrams = Socket> {
    io: D,
    server: IpAddr,
    /// The port of partition 0, where the directory is asked for.
    base: SocketAddr,
    directory: Directory,
    next_id: u32,
    retry: Retry,
    /// Most requests packed into one datagram.
    per_datagram: usize,
    buf: Vec<u8>,
    /// Datagram buffers kept for the next send.
    spare: Vec<Vec<u8>>,
    stats: ClientStats,
}

impl NativeClient<Socket> {
    /// Connects to the server whose partition 0 answers at `base` (its `--native-port`), and
    /// fetches its directory.
    pub fn connect(base: SocketAddr) -> Result<NativeClient<Socket>, Error> {
        let bind: SocketAddr =
            if base.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("an address");
        NativeClient::with_datagrams(Socket::new(UdpSocket::bind(bind)?), base, Retry::default())
    }

    /// Lets every receive poll the socket for up to `spin` before it sleeps (zero, the default:
    /// sleep at once). See [`Socket`].
    pub fn set_busy_poll(&mut self, spin: Duration) {
        self.io.set_busy_poll(spin);
    }
}

impl<D: Datagrams> NativeClient<D> {
    /// A client over `io` (a socket or a shim around one).
    pub fn with_datagrams(io: D, base: SocketAddr, retry: Retry) -> Result<NativeClient<D>, Error> {
        let mut client = NativeClient {
            io,
            server: base.ip(),
            base,
            directory: Directory {
                epoch: 0,
                workers: 0,
                hash: wire::HASH_XXH3_64,
                partition_bits: 0,
                access: 0,
                mode: 0,
                datagram_max: wire::DATAGRAM_BYTES_MAX as u16,
                cookie: 0,
                partitions: vec![(0, base.port())],
            },
            next_id: 1,
            retry,
            per_datagram: usize::from(u16::MAX),
            buf: vec![0; 1 << 16],
            spare: Vec::new(),
            stats: ClientStats::default(),
        };
        client.refresh()?;
        Ok(client)
    }

    /// The directory in use.
    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// Packs at most `requests` requests into one datagram (by default as many as fit).
    pub fn set_requests_per_datagram(&mut self, requests: usize) {
        self.per_datagram = requests.clamp(1, usize::from(u16::MAX));
    }

    /// Traffic figures.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// Fetches the directory again (after a redirect, or to follow a restarted server).
    pub fn refresh(&mut self) -> Result<(), Error> {
        let mut request = Vec::with_capacity(1024);
        Header { kind: Kind::DirectoryRequest, count: 0, epoch: self.directory.epoch, cookie: 0 }
            .write(&mut request);
        // Padding: the server answers only requests large enough that its reply is no amplifier.
        request.resize(1024, 0);
        for _ in 0..=self.retry.retries {
            self.stats.directory_fetches += 1;
            self.io.send_to(&request, self.base)?;
            let deadline = Instant::now() + self.retry.timeout;
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                let (len, from) = match self.io.recv_from(&mut self.buf, left) {
                    Ok(received) => received,
                    Err(error) if is_timeout(&error) => break,
                    Err(error) => return Err(error.into()),
                };
                let datagram = &self.buf[..len];
                match Header::parse(datagram) {
                    Some(header) if header.kind == Kind::Directory && from == self.base => {
                        let directory =
                            Directory::parse(&datagram[wire::HEADER_BYTES..]).ok_or(Error::NoDirectory)?;
                        if directory.hash != wire::HASH_XXH3_64 {
                            return Err(Error::NoDirectory);
                        }
                        self.directory = directory;
                        return Ok(());
                    }
                    // Late answers to earlier requests: not wanted now.
                    _ => continue,
                }
            }
        }
        Err(Error::Timeout)
    }

    /// Runs a batch: every operation is sent to its partition's port, several per datagram,
    /// and the replies come back in the order of `ops`.
    pub fn execute(&mut self, ops: &[Op<'_>]) -> Vec<Result<Reply, Error>> {
        let mut results: Vec<Option<Result<Reply, Error>>> = (0..ops.len()).map(|_| None).collect();
        let mut requests: Vec<RequestMsg<'_>> = Vec::with_capacity(ops.len());
        let mut outstanding: HashMap<u32, usize> = HashMap::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            let mut request = op.request();
            request.request_id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            // The server's keyhash: a hash-tagged key's partition is its tag's.
            request.keyhash = qs_store::KeyHash::of(request.key).0;
            if request.key.is_empty() || request.key.len() > wire::KEY_BYTES_MAX {
                results[index] = Some(Err(Error::BadKey));
            } else if wire::HEADER_BYTES + request.encoded_len() > self.datagram_max() {
                results[index] = Some(Err(Error::UseTcp));
            } else {
                outstanding.insert(request.request_id, index);
            }
            requests.push(request);
        }
        let mut transmissions = 0;
        while !outstanding.is_empty() {
            if transmissions > self.retry.retries {
                break;
            }
            if transmissions > 0 {
                self.stats.retransmitted += outstanding.len() as u64;
            }
            transmissions += 1;
            if let Err(error) = self.send(&requests, &outstanding) {
                for (_, index) in outstanding.drain() {
                    results[index] = Some(Err(Error::Io(io::Error::new(error.kind(), error.to_string()))));
                }
                break;
            }
            let stale = match self.receive(&mut outstanding, &mut results) {
                Ok(stale) => stale,
                Err(error) => {
                    for (_, index) in outstanding.drain() {
                        results[index] =
                            Some(Err(Error::Io(io::Error::new(error.kind(), error.to_string()))));
                    }
                    break;
                }
            };
            if stale {
                let before = self.directory.clone();
                if self.refresh().is_ok() && self.directory != before {
                    // Redirected requests go again at once, to the new owners; not a retry.
                    transmissions -= 1;
                }
            }
        }
        for (_, index) in outstanding {
            results[index] = Some(Err(Error::Timeout));
        }
        results.into_iter().map(|result| result.expect("every operation has a result")).collect()
    }

    fn datagram_max(&self) -> usize {
        usize::from(self.directory.datagram_max)
            .clamp(wire::HEADER_BYTES + wire::REQUEST_BYTES, wire::DATAGRAM_BYTES_MAX)
    }

    /// Sends the outstanding requests, grouped by partition, packed into datagrams.
    fn send(&mut self, requests: &[RequestMsg<'_>], outstanding: &HashMap<u32, usize>) -> io::Result<()> {
        let mut by_partition: Vec<Vec<usize>> = vec![Vec::new(); self.directory.partitions.len()];
        let mut indexes: Vec<usize> = outstanding.values().copied().collect();
        indexes.sort_unstable();
        for index in indexes {
            let partition = self.directory.partition_of(requests[index].keyhash);
            by_partition[partition].push(index);
        }
        let max = self.datagram_max();
        let header = Header {
            kind: Kind::Requests,
            count: 0,
            epoch: self.directory.epoch,
            cookie: self.directory.cookie,
        };
        // Every datagram is built first, then all leave together.
        let mut built: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        for (partition, indexes) in by_partition.iter().enumerate() {
            if indexes.is_empty() {
                continue;
            }
            let to = SocketAddr::new(self.server, self.directory.partitions[partition].1);
            let mut count = 0u16;
            let mut datagram = self.spare.pop().unwrap_or_default();
            header.write(&mut datagram);
            for &index in indexes {
                let request = &requests[index];
                if count > 0
                    && (datagram.len() + request.encoded_len() > max
                        || usize::from(count) == self.per_datagram)
                {
                    Header::set_count(&mut datagram, count);
                    built.push((to, datagram));
                    datagram = self.spare.pop().unwrap_or_default();
                    header.write(&mut datagram);
                    count = 0;
                }
                request.write(&mut datagram);
                count += 1;
            }
            Header::set_count(&mut datagram, count);
            built.push((to, datagram));
        }
        let datagrams: Vec<(SocketAddr, &[u8])> =
            built.iter().map(|(to, bytes)| (*to, bytes.as_slice())).collect();
        let sent = self.io.send_all(&datagrams);
        if sent.is_ok() {
            self.stats.datagrams_sent += built.len() as u64;
        }
        self.spare.extend(built.into_iter().map(|(_, mut bytes)| {
            bytes.clear();
            bytes
        }));
        sent
    }

    /// Collects replies until every outstanding request is answered or redirected, or the
    /// timeout passes. Returns whether the directory is stale (a redirect, a new epoch, or a
    /// request for the address cookie).
    fn receive(
        &mut self,
        outstanding: &mut HashMap<u32, usize>,
        results: &mut [Option<Result<Reply, Error>>],
    ) -> io::Result<bool> {
        let deadline = Instant::now() + self.retry.timeout;
        let mut stale = false;
        let mut waiting_on_stale = 0;
        while outstanding.len() > waiting_on_stale {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { break };
            let (len, from) = match self.io.recv_from(&mut self.buf, left) {
                Ok(received) => received,
                Err(error) if is_timeout(&error) => break,
                Err(error) => return Err(error),
            };
            if from.ip() != self.server {
                continue;
            }
            let datagram = &self.buf[..len];
            let Some(header) = Header::parse(datagram) else { continue };
            if header.kind != Kind::Responses {
                continue;
            }
            if header.epoch != self.directory.epoch {
                stale = true;
            }
            for response in Responses::new(&datagram[wire::HEADER_BYTES..], header.count) {
                let Ok(response) = response else { break };
                let Some(&index) = outstanding.get(&response.request_id) else { continue };
                match response.status {
                    Status::Redirect | Status::ProveAddress => {
                        self.stats.redirected += u64::from(response.status == Status::Redirect);
                        stale = true;
                        waiting_on_stale += 1;
                        continue;
                    }
                    Status::UseTcp => results[index] = Some(Err(Error::UseTcp)),
                    status => {
                        results[index] = Some(Ok(Reply {
                            status,
                            flags: response.flags,
                            number: response.number,
                            value: response.value.to_vec(),
                        }))
                    }
                }
                outstanding.remove(&response.request_id);
            }
        }
        Ok(stale)
    }

    /// Reads `key`: `Ok(None)` when it is not there.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Reply>, Error> {
        let reply = self.execute(&[Op::Get(key)]).pop().expect("one result")?;
        Ok((reply.status == Status::Ok).then_some(reply))
    }

    /// Stores `value` under `key`; the reply's status says whether it was stored.
    pub fn set(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i32) -> Result<Reply, Error> {
        self.execute(&[Op::Set { key, value, flags, exptime, cas: 0 }]).pop().expect("one result")
    }

    /// Removes `key`.
    pub fn delete(&mut self, key: &[u8]) -> Result<Reply, Error> {
        self.execute(&[Op::Delete { key, cas: 0 }]).pop().expect("one result")
    }

    /// Adds `delta` to the counter at `key`; the reply's number is the new value.
    pub fn incr(&mut self, key: &[u8], delta: u64) -> Result<Reply, Error> {
        self.execute(&[Op::Incr { key, delta }]).pop().expect("one result")
    }
}

fn is_timeout(error: &io::Error) -> bool {
    matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_sends_a_batch_whole_and_in_order() {
        // 200 datagrams: more than one sendmmsg takes (64), each to one of two receivers.
        let receivers = [UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap()];
        let payloads: Vec<Vec<u8>> =
            (0..200u32).map(|i| i.to_le_bytes().repeat(1 + i as usize % 50)).collect();
        let to: Vec<SocketAddr> = receivers.iter().map(|socket| socket.local_addr().unwrap()).collect();
        let batch: Vec<(SocketAddr, &[u8])> =
            payloads.iter().enumerate().map(|(i, bytes)| (to[i % 2], bytes.as_slice())).collect();
        let mut socket = Socket::new(UdpSocket::bind("127.0.0.1:0").unwrap());
        socket.send_all(&batch).unwrap();
        let mut buf = [0u8; 512];
        for (i, payload) in payloads.iter().enumerate() {
            let receiver = &receivers[i % 2];
            receiver.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let (len, _) = receiver.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..len], payload.as_slice(), "datagram {i}");
        }
    }
}
