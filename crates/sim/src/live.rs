//! A stream replayed to a live server over memcached's text protocol, and the server's own
//! miss-ratio estimate (`stats mrc`) read back: `qs-sim mrc --live HOST:PORT` holds it against
//! the exact curve of the same stream.
//!
//! Requests go in batches of up to `depth` (pipelined; a batch ends early rather than hold a
//! key twice); a get that misses is followed by the client's set, as a look-aside client fills
//! a miss, before the next batch, so the server sees the requests in the stream's order. Sets and deletes
//! are sent `noreply`. A TTL becomes a 30-day exptime: the item keeps its expiry field (and so
//! its size in the log) but the stream's simulated time is not replayed in real time.

use crate::engine::key_bytes;
use crate::stream::{Access, Op};
use serde::Serialize;
use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;

/// What a replay did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Replayed {
    /// Requests sent from the stream.
    pub requests: u64,
    /// Gets among them.
    pub gets: u64,
    /// Gets the server answered with a value.
    pub hits: u64,
}

/// The server's `stats mrc` answer.
#[derive(Clone, Debug, Serialize)]
pub struct LiveCurve {
    /// The server's item memory (limit_maxbytes).
    pub item_memory: u64,
    /// Its sampling rate.
    pub sample_rate: f64,
    /// Keys in its sample.
    pub sampled_keys: u64,
    /// Its estimate of the working set.
    pub working_set_bytes: u64,
    /// (multiple of the item memory, estimated LRU hit ratio).
    pub points: Vec<(f64, f64)>,
}

impl LiveCurve {
    /// The cache size at `multiple` of the item memory, in bytes.
    pub fn size(&self, multiple: f64) -> u64 {
        (self.item_memory as f64 * multiple) as u64
    }
}

/// A replay and what the server estimated from it.
#[derive(Clone, Debug, Serialize)]
pub struct LiveReport {
    /// What the replay did.
    pub replayed: Replayed,
    /// The server's `stats mrc`.
    pub curve: LiveCurve,
}

/// A text-protocol connection.
pub struct Server {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    line: String,
}

impl Server {
    /// Connects to `address`.
    pub fn connect(address: &str) -> io::Result<Server> {
        let stream = TcpStream::connect(address)?;
        stream.set_nodelay(true)?;
        Ok(Server {
            reader: BufReader::with_capacity(1 << 20, stream.try_clone()?),
            writer: stream,
            line: String::new(),
        })
    }

    /// Sends `command` and reads `STAT name value` lines up to END (or one other line).
    pub fn stats(&mut self, command: &str) -> io::Result<Vec<(String, String)>> {
        self.writer.write_all(format!("{command}\r\n").as_bytes())?;
        let mut stats = Vec::new();
        loop {
            let line = self.read_line()?;
            match line.strip_prefix("STAT ") {
                Some(stat) => {
                    let (name, value) = stat.split_once(' ').unwrap_or((stat, ""));
                    stats.push((name.to_string(), value.to_string()));
                }
                None if line == "END" => return Ok(stats),
                None if stats.is_empty() && !line.contains("ERROR") => {
                    stats.push((line.clone(), String::new()));
                    return Ok(stats);
                }
                None => return Err(io::Error::other(format!("{command}: {line}"))),
            }
        }
    }

    fn read_line(&mut self) -> io::Result<String> {
        self.line.clear();
        if self.reader.read_line(&mut self.line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection"));
        }
        Ok(self.line.trim_end_matches(['\r', '\n']).to_string())
    }

    /// Reads one get's reply: whether it held a value.
    fn read_get(&mut self) -> io::Result<bool> {
        let mut hit = false;
        loop {
            let line = self.read_line()?;
            if line == "END" {
                return Ok(hit);
            }
            let length = line
                .strip_prefix("VALUE ")
                .and_then(|rest| rest.split(' ').nth(2))
                .and_then(|length| length.parse::<usize>().ok())
                .ok_or_else(|| io::Error::other(format!("get: {line}")))?;
            let mut data = vec![0; length + 2];
            io::Read::read_exact(&mut self.reader, &mut data)?;
            hit = true;
        }
    }

    /// Replays `stream` in batches of `depth` requests.
    pub fn replay(
        &mut self,
        stream: impl Iterator<Item = io::Result<Access>>,
        depth: usize,
    ) -> io::Result<Replayed> {
        let mut replayed = Replayed::default();
        let (mut batch, mut out, mut key) = (Vec::with_capacity(depth), Vec::new(), Vec::new());
        let mut stream = stream.peekable();
        let mut in_batch = std::collections::HashSet::new();
        let value = vec![b'x'; 1 << 20];
        while stream.peek().is_some() {
            batch.clear();
            out.clear();
            in_batch.clear();
            // A batch ends before a key it already has: a get after a miss of the same key
            // in one batch would miss again, where the client's set would have filled it.
            while batch.len() < depth.max(1) {
                match stream.peek() {
                    Some(Ok(next)) if !in_batch.contains(&next.key) => {}
                    Some(Err(_)) => return Err(stream.next().and_then(Result::err).expect("an error")),
                    _ => break,
                }
                let access = stream.next().expect("peeked")?;
                in_batch.insert(access.key);
                key_bytes(access.key, access.key_size, &mut key);
                match access.op {
                    Op::Get => out.extend_from_slice(b"get "),
                    Op::Set => out.extend_from_slice(b"set "),
                    Op::Delete => out.extend_from_slice(b"delete "),
                }
                out.extend_from_slice(&key);
                match access.op {
                    Op::Get => out.extend_from_slice(b"\r\n"),
                    Op::Delete => out.extend_from_slice(b" noreply\r\n"),
                    Op::Set => set_tail(&access, &value, &mut out),
                }
                batch.push(access);
            }
            self.writer.write_all(&out)?;
            out.clear();
            for access in batch.iter().filter(|access| access.op == Op::Get) {
                replayed.gets += 1;
                if self.read_get()? {
                    replayed.hits += 1;
                } else {
                    key_bytes(access.key, access.key_size, &mut key);
                    out.extend_from_slice(b"set ");
                    out.extend_from_slice(&key);
                    set_tail(access, &value, &mut out);
                }
            }
            replayed.requests += batch.len() as u64;
            if !out.is_empty() {
                self.writer.write_all(&out)?;
            }
        }
        // Every noreply request has run once a later request is answered.
        self.writer.write_all(b"mn\r\n")?;
        let line = self.read_line()?;
        if line != "MN" {
            return Err(io::Error::other(format!("mn: {line}")));
        }
        Ok(replayed)
    }

    /// The server's `stats mrc`.
    pub fn live_curve(&mut self) -> io::Result<LiveCurve> {
        let stats = self.stats("stats mrc")?;
        let find = |name: &str| stats.iter().find(|(stat, _)| stat == name).map(|(_, value)| value.as_str());
        let number = |name: &str| -> io::Result<f64> {
            find(name)
                .and_then(|value| value.parse::<f64>().ok())
                .ok_or_else(|| io::Error::other(format!("stats mrc: no {name} (is the server quicksilver?)")))
        };
        let points = stats
            .iter()
            .filter_map(|(name, value)| {
                let multiple = name.strip_prefix("mrc_hit_ratio_")?.strip_suffix('x')?.parse::<f64>().ok()?;
                Some((multiple, value.parse::<f64>().ok()?))
            })
            .collect();
        Ok(LiveCurve {
            item_memory: number("mrc_item_memory")? as u64,
            sample_rate: number("mrc_sample_rate")?,
            sampled_keys: number("mrc_sampled_keys")? as u64,
            working_set_bytes: number("mrc_working_set_bytes")? as u64,
            points,
        })
    }
}

/// ` <flags> <exptime> <bytes> noreply\r\n<data>\r\n` of a set of `access`.
fn set_tail(access: &Access, value: &[u8], out: &mut Vec<u8>) {
    const THIRTY_DAYS: u32 = 60 * 60 * 24 * 30;
    let length = (access.value_size as usize).min(value.len());
    let exptime = if access.ttl == 0 { 0 } else { THIRTY_DAYS };
    let _ = write!(out, " 0 {exptime} {length} noreply\r\n");
    out.extend_from_slice(&value[..length]);
    out.extend_from_slice(b"\r\n");
}
