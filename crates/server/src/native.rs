//! The native protocol's server side (docs/PROTOCOL.md). Partition i answers on UDP port
//! BASE + i, bound only by its owner, so a client that knows the directory reaches the owning
//! core with no software hop (MICA's client-assisted direction). A port is read in bursts (one
//! `recvmmsg` of up to [`BURST`] datagrams), every request of the burst goes through the
//! prefetch pipeline (all buckets, then all items, then execution), and the replies leave in
//! one `sendmmsg`.
//!
//! The server hashes every key itself: a keyhash that is not the key's is refused, and a key
//! whose partition another worker owns (a stale directory) is answered [`Status::Redirect`]
//! with the current epoch, never served by the wrong owner. Replies to a client that has not
//! proven its address (the directory's cookie) are at most [`wire::UNPROVEN_REPLY_FACTOR`]
//! times the size of its datagram, so the port cannot amplify spoofed traffic.

use crate::exec::Engine;
use crate::observe::counters::WorkerCounters;
use crate::shared::Shared;
use crate::sys::Burst;
use qs_proto::native::{self as wire, Directory, Header, Kind, Opcode, RequestMsg, Requests, Status};
use qs_store::KeyHash;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// Datagrams per receive call.
pub const BURST: usize = 32;
/// Bursts one port may take per loop turn before the worker attends to its other work.
const BURSTS_PER_TURN: usize = 4;
/// incr/decr replies remembered so that a retransmission is not applied twice.
const DEDUPE_ENTRIES: usize = 4096;
/// How long an incr/decr answer stands for a retransmission of its request (a client
/// retransmits within its timeout, a few hundred milliseconds).
const DEDUPE_SECONDS: u32 = 5;

/// One partition's native port.
pub struct Port {
    /// The socket (bound by this worker only).
    pub socket: mio::net::UdpSocket,
    /// Datagrams may be waiting.
    pub ready: bool,
}

/// A request of the burst waiting for execution: its datagram, its parsed fields (the key and
/// value as places in the datagram, so nothing is parsed twice), its key's place.
struct Pending {
    slot: usize,
    opcode: Opcode,
    request_id: u32,
    flags: u32,
    exptime: i32,
    operand: u64,
    /// The key's start in the datagram; the value follows it.
    key_at: u32,
    key_len: u16,
    value_len: u32,
    hash: KeyHash,
    partition: usize,
}

impl Pending {
    /// The request again, borrowing its datagram's `bytes`.
    fn request<'a>(&self, bytes: &'a [u8]) -> RequestMsg<'a> {
        let key_at = self.key_at as usize;
        let value_at = key_at + usize::from(self.key_len);
        RequestMsg {
            opcode: self.opcode,
            request_id: self.request_id,
            keyhash: self.hash.0,
            flags: self.flags,
            exptime: self.exptime,
            operand: self.operand,
            key: &bytes[key_at..value_at],
            value: &bytes[value_at..value_at + self.value_len as usize],
        }
    }
}

/// The replies to one received datagram: datagrams of at most [`wire::DATAGRAM_BYTES_MAX`].
struct Reply {
    peer: Option<SocketAddr>,
    datagrams: Vec<Vec<u8>>,
    /// Messages in the last datagram.
    count: u16,
    /// Bytes of replies still allowed (unproven clients).
    budget: usize,
    epoch: u32,
}

impl Reply {
    fn reset(&mut self, spare: &mut Vec<Vec<u8>>) {
        for mut datagram in self.datagrams.drain(..) {
            datagram.clear();
            spare.push(datagram);
        }
        self.peer = None;
        self.count = 0;
    }

    /// Appends one response, starting a new datagram when the current one is full. A response
    /// that fits no datagram becomes [`Status::UseTcp`], one over an unproven client's budget
    /// [`Status::ProveAddress`].
    fn push(
        &mut self,
        spare: &mut Vec<Vec<u8>>,
        status: Status,
        request: (u8, u32),
        flags: u32,
        number: u64,
        value: &[u8],
    ) {
        let (opcode, request_id) = request;
        let mut len = wire::RESPONSE_BYTES + value.len();
        let (status, flags, number, value) = if wire::HEADER_BYTES + len > wire::DATAGRAM_BYTES_MAX {
            len = wire::RESPONSE_BYTES;
            (Status::UseTcp, 0, 0, &[][..])
        } else if len > self.budget && !value.is_empty() {
            len = wire::RESPONSE_BYTES;
            (Status::ProveAddress, 0, 0, &[][..])
        } else {
            (status, flags, number, value)
        };
        self.budget = self.budget.saturating_sub(len);
        let full = match self.datagrams.last() {
            Some(last) => last.len() + len > wire::DATAGRAM_BYTES_MAX,
            None => true,
        };
        if full {
            self.close_datagram();
            let mut datagram = spare.pop().unwrap_or_default();
            Header { kind: Kind::Responses, count: 0, epoch: self.epoch, cookie: 0 }.write(&mut datagram);
            self.datagrams.push(datagram);
        }
        let datagram = self.datagrams.last_mut().expect("a datagram was just opened");
        wire::write_response_fixed(datagram, status, opcode, request_id, value.len(), flags, number);
        datagram.extend_from_slice(value);
        self.count += 1;
    }

    /// Takes `datagram` (a closed response datagram to the same peer) into this reply: its
    /// responses appended to the last datagram when they fit, else as a datagram of its own.
    fn absorb(&mut self, mut datagram: Vec<u8>, spare: &mut Vec<Vec<u8>>) {
        let added = Header::parse(&datagram).map_or(0, |header| header.count);
        if let Some(last) = self.datagrams.last_mut() {
            let fits = last.len() + datagram.len() - wire::HEADER_BYTES <= wire::DATAGRAM_BYTES_MAX;
            if let (true, Some(header)) = (fits, Header::parse(last)) {
                if let Some(count) = header.count.checked_add(added) {
                    last.extend_from_slice(&datagram[wire::HEADER_BYTES..]);
                    Header::set_count(last, count);
                    datagram.clear();
                    spare.push(datagram);
                    return;
                }
            }
        }
        self.datagrams.push(datagram);
    }

    /// Whether this reply answers requests (not a directory request).
    fn answers_requests(&self) -> bool {
        self.datagrams.first().and_then(|datagram| Header::parse(datagram)).map(|header| header.kind)
            == Some(Kind::Responses)
    }

    /// Writes the message count into the last datagram.
    fn close_datagram(&mut self) {
        if let Some(last) = self.datagrams.last_mut() {
            Header::set_count(last, self.count);
        }
        self.count = 0;
    }
}

/// The last [`DEDUPE_ENTRIES`] incr/decr answers by (client address, request id), each with
/// the request it answered, so that a retransmission is answered without being applied again.
/// A repeat is one whose key, direction and operand match too, within
/// [`DEDUPE_SECONDS`]: a client that restarts its ids (a reused port, a NAT) sends a new request
/// under an old id, and it runs.
#[derive(Default)]
struct Dedupe {
    answers: HashMap<(SocketAddr, u32), Answered>,
    order: VecDeque<(SocketAddr, u32)>,
}

/// An incr/decr and what it was answered.
struct Answered {
    key: Box<[u8]>,
    decrement: bool,
    delta: u64,
    /// When it ran (the engine's clock, seconds).
    at: u32,
    answer: (Status, u64),
}

impl Dedupe {
    /// The answer to `request` (key, decrement, delta) from `from` if it repeats one made at
    /// most [`DEDUPE_SECONDS`] before `now`.
    fn get(&self, from: (SocketAddr, u32), request: (&[u8], bool, u64), now: u32) -> Option<(Status, u64)> {
        let seen = self.answers.get(&from)?;
        let same = (&*seen.key, seen.decrement, seen.delta) == request;
        (same && now.wrapping_sub(seen.at) <= DEDUPE_SECONDS).then_some(seen.answer)
    }

    fn insert(
        &mut self,
        from: (SocketAddr, u32),
        request: (&[u8], bool, u64),
        now: u32,
        answer: (Status, u64),
    ) {
        let (key, decrement, delta) = request;
        let answered = Answered { key: key.into(), decrement, delta, at: now, answer };
        if self.answers.insert(from, answered).is_some() {
            // An id reused for a new request: it keeps its place in the order.
            return;
        }
        if self.order.len() == DEDUPE_ENTRIES {
            if let Some(oldest) = self.order.pop_front() {
                self.answers.remove(&oldest);
            }
        }
        self.order.push_back(from);
    }
}

/// A worker's native ports and the buffers to serve them.
pub struct Native {
    /// The ports of the partitions this worker owns.
    pub ports: Vec<Port>,
    burst: Burst,
    pending: Vec<Pending>,
    replies: Vec<Reply>,
    spare: Vec<Vec<u8>>,
    dedupe: Dedupe,
    scratch: Vec<u8>,
    /// The burst's senders and the reply slot of each one's first datagram.
    senders: Vec<(SocketAddr, usize)>,
    shared: Arc<Shared>,
}

impl Native {
    /// Serves `ports` (this worker's partitions' native ports).
    pub fn new(ports: Vec<Port>, shared: Arc<Shared>) -> Native {
        let epoch = shared.native.epoch();
        Native {
            ports,
            burst: Burst::new(BURST, wire::DATAGRAM_BYTES_MAX),
            pending: Vec::new(),
            replies: (0..BURST)
                .map(|_| Reply { peer: None, datagrams: Vec::new(), count: 0, budget: 0, epoch })
                .collect(),
            spare: Vec::new(),
            dedupe: Dedupe::default(),
            scratch: Vec::new(),
            senders: Vec::with_capacity(BURST),
            shared,
        }
    }

    /// Whether any port may have datagrams waiting.
    pub fn ready(&self) -> bool {
        self.ports.iter().any(|port| port.ready)
    }

    /// Serves every ready port for a few bursts; returns whether any request ran.
    pub fn serve(&mut self, engine: &mut Engine) -> bool {
        let mut served = false;
        for index in 0..self.ports.len() {
            for _ in 0..BURSTS_PER_TURN {
                if !self.ports[index].ready {
                    break;
                }
                let fd = self.ports[index].socket.as_raw_fd();
                match self.burst.recv(fd) {
                    Ok(count) => {
                        self.process(count, engine);
                        self.send(index, count, &mut engine.counters);
                        served = true;
                        // A short burst drained the socket: epoll reports every later
                        // arrival, so no second call just to hear "would block".
                        if count < self.burst.slots() {
                            self.ports[index].ready = false;
                        }
                    }
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    // WouldBlock: drained (edge-triggered epoll reports what arrives next).
                    Err(_) => self.ports[index].ready = false,
                }
            }
        }
        served
    }

    /// The address proof of `peer`: a keyed hash of its address and port (not a MAC; it only
    /// has to be unguessable for a sender that never sees the directory reply).
    fn cookie(&self, peer: SocketAddr) -> u64 {
        let mut bytes = [0u8; 18];
        match peer.ip() {
            std::net::IpAddr::V4(ip) => bytes[..4].copy_from_slice(&ip.octets()),
            std::net::IpAddr::V6(ip) => bytes[..16].copy_from_slice(&ip.octets()),
        }
        bytes[16..].copy_from_slice(&peer.port().to_le_bytes());
        xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, self.shared.native.secret()).max(1)
    }

    fn directory(&self, cookie: u64) -> Directory {
        let shared = &self.shared;
        let base = shared.config.native_port;
        Directory {
            epoch: shared.native.epoch(),
            workers: shared.map.workers() as u16,
            hash: wire::HASH_XXH3_64,
            partition_bits: shared.map.partition_bits() as u8,
            access: if shared.map.crew() { wire::ACCESS_CREW } else { wire::ACCESS_EREW },
            mode: if shared.config.store_mode() { wire::MODE_STORE } else { wire::MODE_CACHE },
            datagram_max: wire::DATAGRAM_BYTES_MAX as u16,
            cookie,
            partitions: (0..shared.map.partitions())
                .map(|p| (shared.map.owner(p) as u16, (base as usize + p) as u16))
                .collect(),
        }
    }

    /// Runs the `count` datagrams of the burst: parse and locate every request (prefetching
    /// its bucket), prefetch every item, execute in order.
    fn process(&mut self, count: usize, engine: &mut Engine) {
        engine.counters.native_datagrams_in += count as u64;
        self.pending.clear();
        for slot in 0..count {
            self.replies[slot].reset(&mut self.spare);
            let (bytes, truncated, peer) = self.burst.datagram(slot);
            engine.counters.bytes_read += bytes.len() as u64;
            let (Some(peer), Some(header)) = (peer, Header::parse(bytes)) else {
                engine.counters.native_bad += 1;
                continue;
            };
            match header.kind {
                Kind::DirectoryRequest => {
                    let len = bytes.len();
                    self.answer_directory(slot, len, peer, &mut engine.counters);
                }
                Kind::Requests => {
                    let proven = header.cookie != 0 && header.cookie == self.cookie(peer);
                    let reply = &mut self.replies[slot];
                    reply.peer = Some(peer);
                    reply.budget =
                        if proven { usize::MAX } else { wire::UNPROVEN_REPLY_FACTOR * bytes.len() };
                    let body = &bytes[wire::HEADER_BYTES..];
                    let mut requests = Requests::new(body, header.count);
                    loop {
                        // Where the next request starts: its key follows its fixed part.
                        let at = wire::HEADER_BYTES + body.len() - requests.remaining();
                        let Some(request) = requests.next() else { break };
                        engine.counters.native_requests += 1;
                        let request = match request {
                            Ok(request) => request,
                            Err(bad) => {
                                // A request cut by the receive buffer: it was too large to send.
                                let status = if truncated && !bad.resumable {
                                    Status::UseTcp
                                } else {
                                    Status::BadRequest
                                };
                                engine.counters.native_bad += u64::from(status == Status::BadRequest);
                                reply.push(&mut self.spare, status, (bad.opcode, bad.request_id), 0, 0, b"");
                                continue;
                            }
                        };
                        let hash = KeyHash::of(request.key);
                        let id = (request.opcode as u8, request.request_id);
                        if hash.0 != request.keyhash {
                            engine.counters.native_bad += 1;
                            reply.push(&mut self.spare, Status::BadRequest, id, 0, 0, b"");
                            continue;
                        }
                        let partition = self.shared.map.partition_of(hash);
                        if !engine.owns(partition) {
                            engine.counters.native_redirects += 1;
                            reply.push(&mut self.spare, Status::Redirect, id, 0, 0, b"");
                            continue;
                        }
                        engine.prefetch_bucket((hash, partition));
                        self.pending.push(Pending {
                            slot,
                            opcode: request.opcode,
                            request_id: request.request_id,
                            flags: request.flags,
                            exptime: request.exptime,
                            operand: request.operand,
                            key_at: (at + wire::REQUEST_BYTES) as u32,
                            key_len: request.key.len() as u16,
                            value_len: request.value.len() as u32,
                            hash,
                            partition,
                        });
                    }
                }
                Kind::Responses | Kind::Directory => engine.counters.native_bad += 1,
            }
        }
        self.run_pending(engine);
        for reply in &mut self.replies[..count] {
            reply.close_datagram();
        }
    }

    /// Answers a directory request of `len` bytes from `peer` in reply slot `slot`: the
    /// directory with the peer's cookie, unless the reply would outgrow what an unproven
    /// peer may be sent.
    fn answer_directory(&mut self, slot: usize, len: usize, peer: SocketAddr, counters: &mut WorkerCounters) {
        let directory = self.directory(self.cookie(peer));
        let reply_bytes = wire::HEADER_BYTES + directory.encoded_len();
        if len < wire::DIRECTORY_REQUEST_BYTES_MIN || reply_bytes > wire::UNPROVEN_REPLY_FACTOR * len {
            counters.native_bad += 1;
            return;
        }
        let mut datagram = self.spare.pop().unwrap_or_default();
        let header = Header { kind: Kind::Directory, count: 1, epoch: directory.epoch, cookie: 0 };
        header.write(&mut datagram);
        directory.write(&mut datagram);
        let reply = &mut self.replies[slot];
        reply.peer = Some(peer);
        reply.datagrams.push(datagram);
    }

    /// The burst's located requests: every item prefetched, then each run in order.
    #[inline]
    fn run_pending(&mut self, engine: &mut Engine) {
        for pending in &self.pending {
            engine.prefetch_item((pending.hash, pending.partition));
        }
        for index in 0..self.pending.len() {
            let pending = &self.pending[index];
            let (slot, hash, partition) = (pending.slot, pending.hash, pending.partition);
            let request = pending.request(self.burst.datagram(slot).0);
            let peer = self.replies[slot].peer.expect("a request datagram has a peer");
            answer_request(
                engine,
                (&request, (hash, partition), peer),
                &mut self.scratch,
                &mut self.dedupe,
                (&mut self.replies[slot], &mut self.spare),
            );
        }
    }

    /// Sends the replies to the burst's `count` datagrams from port `index` in one `sendmmsg`
    /// (more if over [`crate::sys::BURST_MAX`]); what the socket cannot take is dropped
    /// (clients retransmit). Reply slots past `count` hold an earlier, larger burst's replies,
    /// already sent.
    fn send(&mut self, index: usize, count: usize, counters: &mut WorkerCounters) {
        merge(&mut self.replies[..count], &mut self.senders, &mut self.spare);
        let datagrams: Vec<(SocketAddr, &[u8])> = self.replies[..count]
            .iter()
            .filter_map(|reply| Some((reply.peer?, &reply.datagrams)))
            .flat_map(|(peer, datagrams)| datagrams.iter().map(move |datagram| (peer, datagram.as_slice())))
            .collect();
        if datagrams.is_empty() {
            return;
        }
        let fd = self.ports[index].socket.as_raw_fd();
        let sent = crate::sys::send_burst(fd, &datagrams).unwrap_or(0);
        let bytes: usize = datagrams[..sent].iter().map(|(_, bytes)| bytes.len()).sum();
        counters.bytes_written += bytes as u64;
        counters.native_datagrams_out += sent as u64;
        counters.native_replies_dropped += (datagrams.len() - sent) as u64;
    }
}

/// Moves the responses to a sender's later datagrams in the burst into the replies to its
/// first one, as far as they fit: fewer, fuller datagrams, as the kernel charges per
/// datagram (the client matches responses by request id, docs/PROTOCOL.md). Each merged
/// reply stays within the sum of its requests' reply budgets.
/// `senders` is room for the burst's distinct senders.
fn merge(replies: &mut [Reply], senders: &mut Vec<(SocketAddr, usize)>, spare: &mut Vec<Vec<u8>>) {
    senders.clear();
    for slot in 0..replies.len() {
        let Some(peer) = replies[slot].peer else { continue };
        if !replies[slot].answers_requests() {
            continue;
        }
        let Some(&(_, first)) = senders.iter().find(|(sender, _)| *sender == peer) else {
            senders.push((peer, slot));
            continue;
        };
        let (head, tail) = replies.split_at_mut(slot);
        let later = &mut tail[0];
        for datagram in later.datagrams.drain(..) {
            head[first].absorb(datagram, spare);
        }
        later.peer = None;
    }
}

/// Runs one request on its (owned) partition (the executor's [`Engine::run_native`]) and
/// appends its response; a retransmitted incr or decr is answered as it was the first time,
/// not run again.
fn answer_request(
    engine: &mut Engine,
    (request, located, peer): (&RequestMsg<'_>, (KeyHash, usize), SocketAddr),
    scratch: &mut Vec<u8>,
    dedupe: &mut Dedupe,
    (reply, spare): (&mut Reply, &mut Vec<Vec<u8>>),
) {
    let id = (request.opcode as u8, request.request_id);
    let counter = matches!(request.opcode, Opcode::Incr | Opcode::Decr);
    let seen = (peer, request.request_id);
    let asked = (request.key, request.opcode == Opcode::Decr, request.operand);
    if counter {
        if let Some((status, value)) = dedupe.get(seen, asked, engine.now.secs()) {
            engine.counters.native_duplicates += 1;
            reply.push(spare, status, id, 0, value, b"");
            return;
        }
    }
    let answer = engine.run_native(request, located, scratch);
    if counter {
        dedupe.insert(seen, asked, engine.now.secs(), (answer.status, answer.number));
    }
    let value = if answer.value.is_empty() { &b""[..] } else { &scratch[answer.value] };
    reply.push(spare, answer.status, id, answer.flags, answer.number, value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use qs_proto::native::Responses;

    #[test]
    fn a_repeat_matches_its_key_operation_and_operand_within_the_window() {
        let mut dedupe = Dedupe::default();
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let answer = (Status::Ok, 11);
        dedupe.insert((peer, 7), (b"ctrA", false, 1), 100, answer);
        assert_eq!(dedupe.get((peer, 7), (b"ctrA", false, 1), 100), Some(answer), "a retransmission");
        assert_eq!(dedupe.get((peer, 7), (b"ctrA", false, 1), 100 + DEDUPE_SECONDS), Some(answer));
        assert_eq!(dedupe.get((peer, 7), (b"ctrB", false, 1), 100), None, "another key");
        assert_eq!(dedupe.get((peer, 7), (b"ctrA", true, 1), 100), None, "decr, not incr");
        assert_eq!(dedupe.get((peer, 7), (b"ctrA", false, 5), 100), None, "another operand");
        assert_eq!(dedupe.get((peer, 8), (b"ctrA", false, 1), 100), None, "another id");
        let other: SocketAddr = "127.0.0.1:5001".parse().unwrap();
        assert_eq!(dedupe.get((other, 7), (b"ctrA", false, 1), 100), None, "another sender");
        assert_eq!(dedupe.get((peer, 7), (b"ctrA", false, 1), 101 + DEDUPE_SECONDS), None, "aged out");
        // The id reused for a new request: that one is what repeats now.
        dedupe.insert((peer, 7), (b"ctrB", false, 1), 102, (Status::Ok, 1));
        assert_eq!(dedupe.get((peer, 7), (b"ctrA", false, 1), 102), None);
        assert_eq!(dedupe.get((peer, 7), (b"ctrB", false, 1), 102), Some((Status::Ok, 1)));
        assert_eq!(dedupe.order.len(), 1);
    }

    #[test]
    fn the_dedupe_keeps_its_last_entries_only() {
        let mut dedupe = Dedupe::default();
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        for id in 0..DEDUPE_ENTRIES as u32 + 10 {
            dedupe.insert((peer, id), (b"k", false, 1), 0, (Status::Ok, id as u64));
        }
        assert_eq!((dedupe.answers.len(), dedupe.order.len()), (DEDUPE_ENTRIES, DEDUPE_ENTRIES));
        assert_eq!(dedupe.get((peer, 9), (b"k", false, 1), 0), None);
        assert_eq!(dedupe.get((peer, 10), (b"k", false, 1), 0), Some((Status::Ok, 10)));
    }

    fn reply_to(peer: SocketAddr) -> Reply {
        Reply { peer: Some(peer), datagrams: Vec::new(), count: 0, budget: usize::MAX, epoch: 7 }
    }

    /// Every response in `reply`'s datagrams: (request id, value length), checking each
    /// datagram's size and count.
    fn responses(reply: &Reply) -> Vec<(u32, usize)> {
        let mut found = Vec::new();
        for datagram in &reply.datagrams {
            assert!(datagram.len() <= wire::DATAGRAM_BYTES_MAX, "{} bytes", datagram.len());
            let header = Header::parse(datagram).expect("a header");
            assert_eq!((header.kind, header.epoch), (Kind::Responses, 7));
            let mut count = 0;
            for response in Responses::new(&datagram[wire::HEADER_BYTES..], header.count) {
                let response = response.expect("a whole response");
                found.push((response.request_id, response.value.len()));
                count += 1;
            }
            assert_eq!(count, header.count);
        }
        found
    }

    proptest! {
        /// Merging keeps every response, each in a reply to its own sender, in no more
        /// datagrams than before, none over the limit; directory replies are left alone.
        #[test]
        fn merged_replies_keep_every_response_with_its_sender(
            datagrams in proptest::collection::vec((0..3usize, proptest::collection::vec(0..3000usize, 0..12)), 1..32),
        ) {
            let peers: Vec<SocketAddr> =
                (0..3).map(|port| SocketAddr::from(([127, 0, 0, 1], 4000 + port))).collect();
            let mut spare = Vec::new();
            let mut replies = Vec::new();
            let mut expected: Vec<Vec<(u32, usize)>> = vec![Vec::new(); peers.len()];
            let mut id = 0;
            for (sender, values) in &datagrams {
                let mut reply = reply_to(peers[*sender]);
                if values.is_empty() {
                    // A directory reply.
                    let mut datagram = Vec::new();
                    Header { kind: Kind::Directory, count: 1, epoch: 7, cookie: 0 }.write(&mut datagram);
                    reply.datagrams.push(datagram);
                }
                for &len in values {
                    id += 1;
                    reply.push(&mut spare, Status::Ok, (1, id), 0, 0, &vec![b'v'; len]);
                    expected[*sender].push((id, len));
                }
                reply.close_datagram();
                replies.push(reply);
            }
            let before: usize = replies.iter().map(|reply| reply.datagrams.len()).sum();
            merge(&mut replies, &mut Vec::new(), &mut spare);
            let after: usize =
                replies.iter().filter(|reply| reply.peer.is_some()).map(|reply| reply.datagrams.len()).sum();
            prop_assert!(after <= before);
            let mut found: Vec<Vec<(u32, usize)>> = vec![Vec::new(); peers.len()];
            for (reply, (sender, values)) in replies.iter().zip(&datagrams) {
                if values.is_empty() {
                    prop_assert_eq!(reply.peer, Some(peers[*sender]));
                    prop_assert_eq!(reply.datagrams.len(), 1);
                    continue;
                }
                match reply.peer {
                    Some(peer) => {
                        prop_assert_eq!(peer, peers[*sender]);
                        found[*sender].extend(responses(reply));
                    }
                    None => prop_assert!(reply.datagrams.is_empty()),
                }
            }
            prop_assert_eq!(found, expected);
        }
    }

    #[test]
    fn one_senders_small_replies_leave_as_one_datagram() {
        let (a, b) = (SocketAddr::from(([127, 0, 0, 1], 1)), SocketAddr::from(([127, 0, 0, 1], 2)));
        let mut spare = Vec::new();
        let mut replies: Vec<Reply> = [a, b, a, a].into_iter().map(reply_to).collect();
        for (id, reply) in replies.iter_mut().enumerate() {
            reply.push(&mut spare, Status::NotFound, (1, id as u32), 0, 0, b"");
            reply.close_datagram();
        }
        merge(&mut replies, &mut Vec::new(), &mut spare);
        assert_eq!(responses(&replies[0]), [(0, 0), (2, 0), (3, 0)]);
        assert_eq!(replies[0].datagrams.len(), 1);
        assert_eq!(responses(&replies[1]), [(1, 0)]);
        assert!(replies[2..].iter().all(|reply| reply.peer.is_none() && reply.datagrams.is_empty()));
    }
}
