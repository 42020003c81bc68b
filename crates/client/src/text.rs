//! A memcached text-protocol client over TCP with pipelining: a batch of operations is written
//! as one stream of requests per connection and the replies are read back in order. It works
//! with memcached and any compatible server (gets/cas/add/replace/delete/incr/decr/touch; a
//! delete with a CAS uses the meta command `md`, which memcached 1.6 has).
//!
//! Partition-aware mode ([`TextClient::connect_partition_aware`]) reads Quicksilver's partition
//! map from `stats settings` and `stats partitions`, opens one connection to every worker's own
//! port (`--worker-port-base`) and sends each request to the worker that owns its key, so the
//! server never hands a request from one core to another.
//!
//! Fleet mode ([`TextClient::connect_fleet`]) spreads keys over many servers with ketama
//! consistent hashing compatible with libmemcached's ([`crate::ketama`]).

use crate::ketama::{Continuum, Flavor, Server};
use crate::native::{Error, Op, Reply};
use qs_proto::native::Status;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long to wait for a reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

struct Conn {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    out: Vec<u8>,
}

impl Conn {
    fn open(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        Ok(Conn { reader: BufReader::new(stream.try_clone()?), writer: stream, out: Vec::new() })
    }

    fn line(&mut self) -> io::Result<Vec<u8>> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line)?;
        if !line.ends_with(b"\r\n") {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed mid-reply"));
        }
        line.truncate(line.len() - 2);
        Ok(line)
    }

    fn exact(&mut self, len: usize) -> io::Result<Vec<u8>> {
        let mut data = vec![0; len + 2];
        io::Read::read_exact(&mut self.reader, &mut data)?;
        if !data.ends_with(b"\r\n") {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "data block without its \\r\\n"));
        }
        data.truncate(len);
        Ok(data)
    }
}

/// Which worker owns which partition, and how keys map to partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionMap {
    /// A key's partition is its keyhash's top `partition_bits` bits (`qs_store::KeyHash`:
    /// xxh3-64, a hash-tagged key's taken from its tag).
    pub partition_bits: u32,
    /// Owner worker of each partition.
    pub owners: Vec<usize>,
}

impl PartitionMap {
    fn worker_of(&self, key: &[u8]) -> usize {
        let partition = qs_store::KeyHash::of(key).partition(self.partition_bits);
        self.owners[partition]
    }
}

/// Which connection a key's requests go to.
enum Routing {
    /// One server.
    Single,
    /// A Quicksilver server's workers, by partition owner.
    Partitions(PartitionMap),
    /// A fleet of servers, by ketama consistent hashing (as libmemcached places keys).
    Ketama(Continuum),
}

/// A pipelining memcached text-protocol client.
pub struct TextClient {
    conns: Vec<Conn>,
    routing: Routing,
}

impl TextClient {
    /// One connection to `addr`.
    pub fn connect(addr: SocketAddr) -> Result<TextClient, Error> {
        Ok(TextClient { conns: vec![Conn::open(addr)?], routing: Routing::Single })
    }

    /// One connection to each server of a fleet (memcached, Quicksilver, or a mix); each key's
    /// requests go to the server ketama places it on, the same server libmemcached-based
    /// clients (in the same [`Flavor`]), twemproxy and other ketama clients pick.
    pub fn connect_fleet(servers: &[Server], flavor: Flavor) -> Result<TextClient, Error> {
        if servers.is_empty() {
            return Err(Error::Protocol("a fleet needs at least one server".into()));
        }
        let conns = servers
            .iter()
            .map(|server| {
                let addr = std::net::ToSocketAddrs::to_socket_addrs(&(server.host.as_str(), server.port))?
                    .next()
                    .ok_or_else(|| io::Error::other(format!("{server} does not resolve")))?;
                Conn::open(addr)
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(TextClient { conns, routing: Routing::Ketama(Continuum::new(servers, flavor)) })
    }

    /// The index (in the fleet's list) of the server `key` goes to.
    pub fn server_for(&self, key: &[u8]) -> usize {
        match &self.routing {
            Routing::Single => 0,
            Routing::Partitions(map) => map.worker_of(key),
            Routing::Ketama(continuum) => continuum.server_for(key).unwrap_or(0),
        }
    }

    /// Connects to a Quicksilver server at `addr`, reads its partition map, and opens a
    /// connection to each worker's own port; requests then go to their key's owner.
    pub fn connect_partition_aware(addr: SocketAddr) -> Result<TextClient, Error> {
        let mut first = Conn::open(addr)?;
        let settings = stats(&mut first, "settings")?;
        let number = |name: &str| -> Result<usize, Error> {
            settings.iter().find(|(key, _)| key == name).and_then(|(_, value)| value.parse().ok()).ok_or_else(
                || Error::Protocol(format!("stats settings has no {name}: not a Quicksilver server?")),
            )
        };
        let (partitions, workers, base) =
            (number("partitions")?, number("num_threads")?, number("worker_port_base")?);
        if base == 0 {
            return Err(Error::Protocol("the server has no worker ports (--worker-port-base)".into()));
        }
        let listed = stats(&mut first, "partitions")?;
        let mut owners = vec![usize::MAX; partitions];
        for (key, value) in &listed {
            if let Some(partition) = key.strip_suffix(":owner_worker") {
                let partition: usize =
                    partition.parse().map_err(|_| Error::Protocol(format!("bad stat {key}")))?;
                if let (Some(slot), Ok(worker)) = (owners.get_mut(partition), value.parse()) {
                    *slot = worker;
                }
            }
        }
        if !partitions.is_power_of_two() || owners.iter().any(|&owner| owner >= workers) {
            return Err(Error::Protocol("stats partitions does not name every partition's owner".into()));
        }
        let conns = (0..workers)
            .map(|worker| Conn::open(SocketAddr::new(addr.ip(), (base + worker) as u16)))
            .collect::<io::Result<Vec<_>>>()?;
        let map = PartitionMap { partition_bits: partitions.trailing_zeros(), owners };
        Ok(TextClient { conns, routing: Routing::Partitions(map) })
    }

    /// The partition map in partition-aware mode.
    pub fn partition_map(&self) -> Option<&PartitionMap> {
        match &self.routing {
            Routing::Partitions(map) => Some(map),
            _ => None,
        }
    }

    /// Runs a batch: every request is written before any reply is read (one write per
    /// connection), and the replies come back in the order of `ops`. A connection that fails
    /// fails the operations sent on it.
    pub fn execute(&mut self, ops: &[Op<'_>]) -> Vec<Result<Reply, Error>> {
        let mut placed: Vec<Option<usize>> = Vec::with_capacity(ops.len());
        let mut results: Vec<Option<Result<Reply, Error>>> = (0..ops.len()).map(|_| None).collect();
        for (index, op) in ops.iter().enumerate() {
            let key = op_key(op);
            if key.is_empty()
                || key.len() > qs_proto::KEY_BYTES_MAX
                || key.iter().any(|&b| b <= b' ' || b == 0x7f)
            {
                results[index] = Some(Err(Error::BadKey));
                placed.push(None);
                continue;
            }
            let conn = self.server_for(key);
            write_request(&mut self.conns[conn].out, op);
            placed.push(Some(conn));
        }
        let mut failed: Vec<Option<String>> = vec![None; self.conns.len()];
        for (conn, failure) in self.conns.iter_mut().zip(&mut failed) {
            if !conn.out.is_empty() {
                if let Err(error) = conn.writer.write_all(&conn.out) {
                    *failure = Some(error.to_string());
                }
                conn.out.clear();
            }
        }
        for (index, op) in ops.iter().enumerate() {
            let Some(conn) = placed[index] else { continue };
            if let Some(error) = &failed[conn] {
                results[index] = Some(Err(Error::Io(io::Error::other(error.clone()))));
                continue;
            }
            match read_reply(&mut self.conns[conn], op) {
                Ok(reply) => results[index] = Some(reply),
                Err(error) => {
                    failed[conn] = Some(error.to_string());
                    results[index] = Some(Err(Error::Io(error)));
                }
            }
        }
        results.into_iter().map(|result| result.expect("every operation has a result")).collect()
    }
}

fn op_key<'a>(op: &Op<'a>) -> &'a [u8] {
    match *op {
        Op::Get(key) => key,
        Op::Set { key, .. }
        | Op::Add { key, .. }
        | Op::Replace { key, .. }
        | Op::Delete { key, .. }
        | Op::Incr { key, .. }
        | Op::Decr { key, .. }
        | Op::Touch { key, .. } => key,
    }
}

fn write_request(out: &mut Vec<u8>, op: &Op<'_>) {
    let storage =
        |out: &mut Vec<u8>, verb: &str, key: &[u8], flags: u32, exptime: i32, value: &[u8], cas: u64| {
            out.extend_from_slice(verb.as_bytes());
            out.push(b' ');
            out.extend_from_slice(key);
            let _ = write!(out, " {flags} {exptime} {}", value.len());
            if cas != 0 {
                let _ = write!(out, " {cas}");
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        };
    let simple = |out: &mut Vec<u8>, verb: &str, key: &[u8], tail: Option<std::fmt::Arguments<'_>>| {
        out.extend_from_slice(verb.as_bytes());
        out.push(b' ');
        out.extend_from_slice(key);
        if let Some(tail) = tail {
            let _ = out.write_fmt(tail);
        }
        out.extend_from_slice(b"\r\n");
    };
    match *op {
        Op::Get(key) => simple(out, "gets", key, None),
        Op::Set { key, value, flags, exptime, cas: 0 } => storage(out, "set", key, flags, exptime, value, 0),
        Op::Set { key, value, flags, exptime, cas } => storage(out, "cas", key, flags, exptime, value, cas),
        Op::Add { key, value, flags, exptime } => storage(out, "add", key, flags, exptime, value, 0),
        Op::Replace { key, value, flags, exptime } => storage(out, "replace", key, flags, exptime, value, 0),
        Op::Delete { key, cas: 0 } => simple(out, "delete", key, None),
        Op::Delete { key, cas } => simple(out, "md", key, Some(format_args!(" C{cas}"))),
        Op::Incr { key, delta } => simple(out, "incr", key, Some(format_args!(" {delta}"))),
        Op::Decr { key, delta } => simple(out, "decr", key, Some(format_args!(" {delta}"))),
        Op::Touch { key, exptime } => simple(out, "touch", key, Some(format_args!(" {exptime}"))),
    }
}

fn status_reply(status: Status) -> Result<Reply, Error> {
    Ok(Reply { status, flags: 0, number: 0, value: Vec::new() })
}

fn read_reply(conn: &mut Conn, op: &Op<'_>) -> io::Result<Result<Reply, Error>> {
    let line = conn.line()?;
    let reply = match line.as_slice() {
        b"STORED" | b"DELETED" | b"TOUCHED" | b"HD" => status_reply(Status::Ok),
        b"NOT_STORED" => status_reply(Status::NotStored),
        b"EXISTS" | b"EX" => status_reply(Status::Exists),
        b"NOT_FOUND" | b"NF" => status_reply(Status::NotFound),
        b"END" => status_reply(Status::NotFound),
        b"CLIENT_ERROR cannot increment or decrement non-numeric value" => status_reply(Status::NonNumeric),
        b"SERVER_ERROR object too large for cache" => status_reply(Status::TooLarge),
        b"SERVER_ERROR out of memory storing object" | b"SERVER_ERROR out of memory" => {
            status_reply(Status::OutOfMemory)
        }
        line if line.starts_with(b"VALUE ") => {
            let text = String::from_utf8_lossy(line).into_owned();
            let fields: Vec<&str> = text.split(' ').collect();
            let parse = |at: usize| fields.get(at).and_then(|field| field.parse::<u64>().ok());
            let (Some(flags), Some(len)) = (parse(2), parse(3)) else {
                return Ok(Err(Error::Protocol(text)));
            };
            let value = conn.exact(len as usize)?;
            let end = conn.line()?;
            if end != b"END" {
                return Ok(Err(Error::Protocol(String::from_utf8_lossy(&end).into_owned())));
            }
            Ok(Reply { status: Status::Ok, flags: flags as u32, number: parse(4).unwrap_or(0), value })
        }
        line if matches!(op, Op::Incr { .. } | Op::Decr { .. })
            && !line.is_empty()
            && line.iter().all(u8::is_ascii_digit) =>
        {
            match std::str::from_utf8(line).ok().and_then(|text| text.parse().ok()) {
                Some(number) => Ok(Reply { status: Status::Ok, flags: 0, number, value: Vec::new() }),
                None => Err(Error::Protocol(String::from_utf8_lossy(line).into_owned())),
            }
        }
        line => Err(Error::Protocol(String::from_utf8_lossy(line).into_owned())),
    };
    Ok(reply)
}

/// `stats GROUP` as (name, value) pairs.
fn stats(conn: &mut Conn, group: &str) -> Result<Vec<(String, String)>, Error> {
    conn.writer.write_all(format!("stats {group}\r\n").as_bytes())?;
    let mut pairs = Vec::new();
    loop {
        let line = conn.line()?;
        if line == b"END" {
            return Ok(pairs);
        }
        let text = String::from_utf8_lossy(&line).into_owned();
        let mut fields = text.splitn(3, ' ');
        match (fields.next(), fields.next(), fields.next()) {
            (Some("STAT"), Some(name), Some(value)) => pairs.push((name.to_string(), value.to_string())),
            _ => return Err(Error::Protocol(text)),
        }
    }
}
