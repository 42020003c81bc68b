//! Quicksilver's native protocol: binary, versioned, little-endian, a batch of requests per
//! datagram, each carrying the client's keyhash so it can be sent straight to the partition that
//! owns it (MICA's client-assisted direction). The specification is docs/PROTOCOL.md; this
//! module is its codec, pure functions over byte slices.
//!
//! ```text
//! datagram   header (24 bytes) | message | message | ...
//! header     magic u16 | version u8 | kind u8 | count u16 | flags u16 | epoch u32 | reserved u32 | cookie u64
//! request    opcode u8 | opflags u8 | key_len u16 | request_id u32 | keyhash u64 | value_len u32
//!            | flags u32 | exptime i32 | reserved u32 | operand u64 | key | value
//! response   status u8 | opcode u8 | reserved u16 | request_id u32 | value_len u32 | flags u32
//!            | number u64 | value
//! ```

/// The first two bytes of every datagram: "QS".
pub const MAGIC: u16 = u16::from_le_bytes(*b"QS");
/// The protocol version this codec speaks.
pub const VERSION: u8 = 1;
/// Bytes of the datagram header.
pub const HEADER_BYTES: usize = 24;
/// Bytes of a request's fixed part (key and value follow).
pub const REQUEST_BYTES: usize = 40;
/// Bytes of a response's fixed part (the value follows).
pub const RESPONSE_BYTES: usize = 24;
/// Largest datagram either side sends or accepts.
pub const DATAGRAM_BYTES_MAX: usize = 8192;
/// Smallest directory request the server answers (padding: the reply is never much larger).
pub const DIRECTORY_REQUEST_BYTES_MIN: usize = 256;
/// A reply to a client that has not proven its address is at most this many times the size of
/// the datagram it answers.
pub const UNPROVEN_REPLY_FACTOR: usize = 4;
/// Bytes of the directory's fixed part (the per-partition entries follow).
pub const DIRECTORY_BYTES: usize = 24;
/// Longest key.
pub const KEY_BYTES_MAX: usize = crate::KEY_BYTES_MAX;
/// Hash function code for xxh3-64 with seed 0 (the only one so far).
pub const HASH_XXH3_64: u8 = 1;

/// What a datagram carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Requests, client to server.
    Requests = 1,
    /// Responses, server to client.
    Responses = 2,
    /// A directory request (no messages; padded).
    DirectoryRequest = 3,
    /// The directory.
    Directory = 4,
}

impl Kind {
    fn from_u8(byte: u8) -> Option<Kind> {
        Some(match byte {
            1 => Kind::Requests,
            2 => Kind::Responses,
            3 => Kind::DirectoryRequest,
            4 => Kind::Directory,
            _ => return None,
        })
    }
}

/// A request's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// Read the value, flags and CAS.
    Get = 1,
    /// Store unconditionally (or, with a non-zero operand, only if the CAS matches).
    Set = 2,
    /// Store only if absent.
    Add = 3,
    /// Store only if present.
    Replace = 4,
    /// Remove (with a non-zero operand, only if the CAS matches).
    Delete = 5,
    /// Add the operand to a decimal counter (wraps at 2^64).
    Incr = 6,
    /// Subtract the operand from a decimal counter (stops at 0).
    Decr = 7,
    /// Set a new expiry.
    Touch = 8,
}

impl Opcode {
    /// The opcode for a byte, if any.
    pub fn from_u8(byte: u8) -> Option<Opcode> {
        Some(match byte {
            1 => Opcode::Get,
            2 => Opcode::Set,
            3 => Opcode::Add,
            4 => Opcode::Replace,
            5 => Opcode::Delete,
            6 => Opcode::Incr,
            7 => Opcode::Decr,
            8 => Opcode::Touch,
            _ => return None,
        })
    }

    /// Whether repeating the request after a lost reply gives the same result (incr and decr
    /// do not: the server de-duplicates them by request id).
    pub fn idempotent(self) -> bool {
        !matches!(self, Opcode::Incr | Opcode::Decr)
    }

    /// Whether the request carries a value.
    pub fn has_value(self) -> bool {
        matches!(self, Opcode::Set | Opcode::Add | Opcode::Replace)
    }
}

/// A response's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Done: found, stored, deleted, touched, counted.
    Ok = 0,
    /// No such item.
    NotFound = 1,
    /// add found the key, replace did not.
    NotStored = 2,
    /// The CAS did not match.
    Exists = 3,
    /// incr/decr on a value that is not a decimal number.
    NonNumeric = 4,
    /// The item is larger than the server's item size limit.
    TooLarge = 5,
    /// Store mode: no memory for the item (nothing is evicted).
    OutOfMemory = 6,
    /// This port's worker does not own the key's partition: the client's directory is stale
    /// (the datagram header carries the current epoch).
    Redirect = 7,
    /// The request or its reply does not fit a datagram: use TCP.
    UseTcp = 8,
    /// Malformed: unknown opcode, bad key length, a value where none belongs, a keyhash that
    /// is not the key's, or a message cut short (the rest of the datagram is not read).
    BadRequest = 9,
    /// The reply would exceed the bound for clients that have not proven their address: fetch
    /// the directory (it carries the cookie) and send the cookie.
    ProveAddress = 10,
}

impl Status {
    /// The status for a byte, if any.
    pub fn from_u8(byte: u8) -> Option<Status> {
        Some(match byte {
            0 => Status::Ok,
            1 => Status::NotFound,
            2 => Status::NotStored,
            3 => Status::Exists,
            4 => Status::NonNumeric,
            5 => Status::TooLarge,
            6 => Status::OutOfMemory,
            7 => Status::Redirect,
            8 => Status::UseTcp,
            9 => Status::BadRequest,
            10 => Status::ProveAddress,
            _ => return None,
        })
    }
}

/// A datagram's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What follows.
    pub kind: Kind,
    /// Messages in the datagram.
    pub count: u16,
    /// Requests: the directory epoch the client used (0: none). Replies: the server's.
    pub epoch: u32,
    /// Requests: the address proof from the directory (0: none). Replies: 0, except in the
    /// directory, which carries it in its body.
    pub cookie: u64,
}

impl Header {
    /// Reads the header at the front of `datagram`; `None` when it is not a native datagram of
    /// this version.
    pub fn parse(datagram: &[u8]) -> Option<Header> {
        let bytes = datagram.get(..HEADER_BYTES)?;
        if u16_at(bytes, 0) != MAGIC || bytes[2] != VERSION {
            return None;
        }
        Some(Header {
            kind: Kind::from_u8(bytes[3])?,
            count: u16_at(bytes, 4),
            epoch: u32_at(bytes, 8),
            cookie: u64_at(bytes, 16),
        })
    }

    /// Appends the header's bytes.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.push(VERSION);
        out.push(self.kind as u8);
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.cookie.to_le_bytes());
    }

    /// Rewrites the message count of a datagram whose header was written with [`Header::write`].
    pub fn set_count(datagram: &mut [u8], count: u16) {
        datagram[4..6].copy_from_slice(&count.to_le_bytes());
    }
}

/// One request, borrowed from its datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestMsg<'a> {
    /// The operation.
    pub opcode: Opcode,
    /// Chosen by the client; the response carries it back.
    pub request_id: u32,
    /// The client's xxh3-64 of the key (the server checks it and places by its own).
    pub keyhash: u64,
    /// Client flags (set, add, replace).
    pub flags: u32,
    /// memcached's exptime (set, add, replace, touch).
    pub exptime: i32,
    /// CAS to compare (set, add, replace, delete; 0 = none) or the delta (incr, decr).
    pub operand: u64,
    /// The key.
    pub key: &'a [u8],
    /// The value (set, add, replace; empty otherwise).
    pub value: &'a [u8],
}

impl RequestMsg<'_> {
    /// Bytes the request takes in a datagram.
    pub fn encoded_len(&self) -> usize {
        REQUEST_BYTES + self.key.len() + self.value.len()
    }

    /// Appends the request's bytes.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.opcode as u8);
        out.push(0);
        out.extend_from_slice(&(self.key.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.request_id.to_le_bytes());
        out.extend_from_slice(&self.keyhash.to_le_bytes());
        out.extend_from_slice(&(self.value.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&self.exptime.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.operand.to_le_bytes());
        out.extend_from_slice(self.key);
        out.extend_from_slice(self.value);
    }
}

/// Why a request could not be read; the response is [`Status::BadRequest`] for `request_id`
/// (0 when even that could not be read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed {
    /// The request id, when the fixed part was complete.
    pub request_id: u32,
    /// The opcode byte, echoed.
    pub opcode: u8,
    /// Whether the following requests can still be found (the lengths were sound).
    pub resumable: bool,
}

/// The requests of a datagram's body, in order; after a malformed request whose lengths cannot
/// be trusted, nothing more.
pub struct Requests<'a> {
    body: &'a [u8],
    left: u16,
}

impl<'a> Requests<'a> {
    /// The requests of `body` (the datagram after its header), of which `count` are announced.
    pub fn new(body: &'a [u8], count: u16) -> Requests<'a> {
        Requests { body, left: count }
    }

    /// Bytes of the body not read yet (the next request starts this far from the end).
    pub fn remaining(&self) -> usize {
        self.body.len()
    }
}

impl<'a> Iterator for Requests<'a> {
    type Item = Result<RequestMsg<'a>, Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let body = self.body;
        let Some(fixed) = body.get(..REQUEST_BYTES) else {
            self.left = 0;
            let request_id = if body.len() >= 8 { u32_at(body, 4) } else { 0 };
            let opcode = body.first().copied().unwrap_or(0);
            return Some(Err(Malformed { request_id, opcode, resumable: false }));
        };
        let opcode_byte = fixed[0];
        let key_len = u16_at(fixed, 2) as usize;
        let request_id = u32_at(fixed, 4);
        let value_len = u32_at(fixed, 16) as usize;
        let total = REQUEST_BYTES.saturating_add(key_len).saturating_add(value_len);
        if total > body.len() {
            self.left = 0;
            return Some(Err(Malformed { request_id, opcode: opcode_byte, resumable: false }));
        }
        self.body = &body[total..];
        let malformed = Err(Malformed { request_id, opcode: opcode_byte, resumable: true });
        let Some(opcode) = Opcode::from_u8(opcode_byte) else { return Some(malformed) };
        if key_len == 0 || key_len > KEY_BYTES_MAX || (value_len > 0 && !opcode.has_value()) {
            return Some(malformed);
        }
        Some(Ok(RequestMsg {
            opcode,
            request_id,
            keyhash: u64_at(fixed, 8),
            flags: u32_at(fixed, 20),
            exptime: u32_at(fixed, 24) as i32,
            operand: u64_at(fixed, 32),
            key: &body[REQUEST_BYTES..REQUEST_BYTES + key_len],
            value: &body[REQUEST_BYTES + key_len..total],
        }))
    }
}

/// One response, borrowed from its datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseMsg<'a> {
    /// The outcome.
    pub status: Status,
    /// The request's opcode byte, echoed.
    pub opcode: u8,
    /// The request's id.
    pub request_id: u32,
    /// Client flags (get).
    pub flags: u32,
    /// The item's CAS (get, and every store), or the counter's new value (incr, decr).
    pub number: u64,
    /// The value (get).
    pub value: &'a [u8],
}

impl ResponseMsg<'_> {
    /// Bytes the response takes in a datagram.
    pub fn encoded_len(&self) -> usize {
        RESPONSE_BYTES + self.value.len()
    }

    /// Appends the response's bytes.
    pub fn write(&self, out: &mut Vec<u8>) {
        write_response_fixed(
            out,
            self.status,
            self.opcode,
            self.request_id,
            self.value.len(),
            self.flags,
            self.number,
        );
        out.extend_from_slice(self.value);
    }
}

/// Appends a response's fixed part; `value_len` bytes of value must follow.
pub fn write_response_fixed(
    out: &mut Vec<u8>,
    status: Status,
    opcode: u8,
    request_id: u32,
    value_len: usize,
    flags: u32,
    number: u64,
) {
    let mut fixed = [0u8; RESPONSE_BYTES];
    fixed[0] = status as u8;
    fixed[1] = opcode;
    fixed[4..8].copy_from_slice(&request_id.to_le_bytes());
    fixed[8..12].copy_from_slice(&(value_len as u32).to_le_bytes());
    fixed[12..16].copy_from_slice(&flags.to_le_bytes());
    fixed[16..24].copy_from_slice(&number.to_le_bytes());
    out.extend_from_slice(&fixed);
}

/// Rewrites the value length of the response whose fixed part starts at `at` in `out`.
pub fn set_response_value_len(out: &mut [u8], at: usize, value_len: usize) {
    out[at + 8..at + 12].copy_from_slice(&(value_len as u32).to_le_bytes());
}

/// The responses of a datagram's body, in order; `Err(())` for a body cut short (then nothing more).
pub struct Responses<'a> {
    body: &'a [u8],
    left: u16,
}

impl<'a> Responses<'a> {
    /// The responses of `body`, of which `count` are announced.
    pub fn new(body: &'a [u8], count: u16) -> Responses<'a> {
        Responses { body, left: count }
    }
}

impl<'a> Iterator for Responses<'a> {
    type Item = Result<ResponseMsg<'a>, ()>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let body = self.body;
        let parsed = (|| {
            let fixed = body.get(..RESPONSE_BYTES)?;
            let value_len = u32_at(fixed, 8) as usize;
            let value = body.get(RESPONSE_BYTES..RESPONSE_BYTES.checked_add(value_len)?)?;
            let response = ResponseMsg {
                status: Status::from_u8(fixed[0])?,
                opcode: fixed[1],
                request_id: u32_at(fixed, 4),
                flags: u32_at(fixed, 12),
                number: u64_at(fixed, 16),
                value,
            };
            Some((response, RESPONSE_BYTES + value_len))
        })();
        match parsed {
            Some((response, len)) => {
                self.body = &body[len..];
                Some(Ok(response))
            }
            None => {
                self.left = 0;
                Some(Err(()))
            }
        }
    }
}

/// Access mode codes in the directory.
pub const ACCESS_EREW: u8 = 0;
/// CREW: any worker reads any partition; the owner writes.
pub const ACCESS_CREW: u8 = 1;
/// Storage mode codes: cache (evicts).
pub const MODE_CACHE: u8 = 0;
/// Store (never evicts).
pub const MODE_STORE: u8 = 1;

/// Where every partition lives: the body of a [`Kind::Directory`] datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Directory {
    /// Changes whenever the map changes (a restart with another layout).
    pub epoch: u32,
    /// Worker threads.
    pub workers: u16,
    /// Hash function ([`HASH_XXH3_64`]).
    pub hash: u8,
    /// A key's partition is its keyhash's top `partition_bits` bits.
    pub partition_bits: u8,
    /// [`ACCESS_EREW`] or [`ACCESS_CREW`].
    pub access: u8,
    /// [`MODE_CACHE`] or [`MODE_STORE`].
    pub mode: u8,
    /// Largest datagram the server accepts and sends.
    pub datagram_max: u16,
    /// The asking client's address proof, to send in its request headers.
    pub cookie: u64,
    /// Per partition: its owning worker and its UDP port.
    pub partitions: Vec<(u16, u16)>,
}

impl Directory {
    /// The partition of a keyhash.
    pub fn partition_of(&self, keyhash: u64) -> usize {
        if self.partition_bits == 0 {
            0
        } else {
            (keyhash >> (64 - u32::from(self.partition_bits))) as usize
        }
    }

    /// Appends the directory's bytes (the body; the header is separate).
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&(self.partitions.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.workers.to_le_bytes());
        out.extend_from_slice(&[self.hash, self.partition_bits, self.access, self.mode]);
        out.extend_from_slice(&self.datagram_max.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.cookie.to_le_bytes());
        for &(owner, port) in &self.partitions {
            out.extend_from_slice(&owner.to_le_bytes());
            out.extend_from_slice(&port.to_le_bytes());
        }
    }

    /// Reads a directory body; `None` when it is short or inconsistent.
    pub fn parse(body: &[u8]) -> Option<Directory> {
        let fixed = body.get(..DIRECTORY_BYTES)?;
        let count = u16_at(fixed, 4) as usize;
        let partition_bits = fixed[9];
        if count == 0 || partition_bits > 16 || count != 1 << partition_bits {
            return None;
        }
        let entries = body.get(DIRECTORY_BYTES..DIRECTORY_BYTES + 4 * count)?;
        Some(Directory {
            epoch: u32_at(fixed, 0),
            workers: u16_at(fixed, 6),
            hash: fixed[8],
            partition_bits,
            access: fixed[10],
            mode: fixed[11],
            datagram_max: u16_at(fixed, 12),
            cookie: u64_at(fixed, 16),
            partitions: entries.chunks_exact(4).map(|entry| (u16_at(entry, 0), u16_at(entry, 2))).collect(),
        })
    }

    /// Bytes of the body.
    pub fn encoded_len(&self) -> usize {
        DIRECTORY_BYTES + 4 * self.partitions.len()
    }
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_layout_is_as_specified() {
        let mut out = Vec::new();
        Header { kind: Kind::Requests, count: 3, epoch: 0x0102_0304, cookie: 0x1122_3344_5566_7788 }
            .write(&mut out);
        assert_eq!(out.len(), HEADER_BYTES);
        assert_eq!(&out[..4], b"QS\x01\x01");
        assert_eq!(&out[4..6], &[3, 0]);
        assert_eq!(&out[8..12], &[4, 3, 2, 1]);
        assert_eq!(&out[16..24], &[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
        let header = Header::parse(&out).unwrap();
        assert_eq!((header.kind, header.count, header.epoch), (Kind::Requests, 3, 0x0102_0304));
        Header::set_count(&mut out, 7);
        assert_eq!(Header::parse(&out).unwrap().count, 7);
    }

    #[test]
    fn foreign_datagrams_are_not_native() {
        assert_eq!(Header::parse(b"\x00\x01\x00\x00\x00\x01\x00\x00get foo\r\n"), None, "memcached UDP");
        let mut out = Vec::new();
        Header { kind: Kind::Requests, count: 0, epoch: 0, cookie: 0 }.write(&mut out);
        out[2] = 2;
        assert_eq!(Header::parse(&out), None, "another version");
        out[2] = VERSION;
        out[3] = 9;
        assert_eq!(Header::parse(&out), None, "unknown kind");
        assert_eq!(Header::parse(&out[..10]), None, "short");
    }

    #[test]
    fn request_layout_is_as_specified() {
        let request = RequestMsg {
            opcode: Opcode::Set,
            request_id: 7,
            keyhash: 9,
            flags: 5,
            exptime: -1,
            operand: 0,
            key: b"key",
            value: b"value",
        };
        let mut out = Vec::new();
        request.write(&mut out);
        assert_eq!(out.len(), request.encoded_len());
        assert_eq!(&out[..4], &[2, 0, 3, 0]);
        assert_eq!(&out[24..28], &[0xff; 4]);
        assert_eq!(&out[REQUEST_BYTES..], b"keyvalue");
    }

    #[test]
    fn malformed_requests_are_reported_and_reading_stops_only_when_it_must() {
        let good = RequestMsg {
            opcode: Opcode::Get,
            request_id: 1,
            keyhash: 0,
            flags: 0,
            exptime: 0,
            operand: 0,
            key: b"k",
            value: b"",
        };
        let mut body = Vec::new();
        RequestMsg { opcode: Opcode::Get, value: b"oops", request_id: 2, ..good }.write(&mut body);
        RequestMsg { key: b"", request_id: 3, ..good }.write(&mut body);
        good.write(&mut body);
        let mut unknown = Vec::new();
        RequestMsg { request_id: 4, ..good }.write(&mut unknown);
        unknown[0] = 99;
        body.extend_from_slice(&unknown);
        let long_key = [b'k'; 251];
        RequestMsg { key: &long_key, request_id: 5, ..good }.write(&mut body);
        let mut cut = Vec::new();
        RequestMsg { request_id: 6, ..good }.write(&mut cut);
        body.extend_from_slice(&cut[..cut.len() - 1]);
        // Seven announced; the sixth runs past the end of the datagram.
        let results: Vec<_> = Requests::new(&body, 7).collect();
        assert_eq!(results.len(), 6, "nothing after a request cut short");
        let ids: Vec<_> = results
            .iter()
            .map(|result| result.map_or_else(|bad| bad.request_id, |good| good.request_id))
            .collect();
        assert_eq!(ids, [2, 3, 1, 4, 5, 6]);
        assert!(results[2].is_ok());
        assert!(results.iter().enumerate().all(|(i, result)| i == 2 || result.is_err()));
        assert_eq!(results[5], Err(Malformed { request_id: 6, opcode: 1, resumable: false }));
    }

    #[test]
    fn a_directory_round_trips_and_places_keys_by_the_top_bits() {
        let directory = Directory {
            epoch: 42,
            workers: 2,
            hash: HASH_XXH3_64,
            partition_bits: 3,
            access: ACCESS_CREW,
            mode: MODE_CACHE,
            datagram_max: DATAGRAM_BYTES_MAX as u16,
            cookie: 99,
            partitions: (0..8).map(|p| (p % 2, 9000 + p)).collect(),
        };
        let mut out = Vec::new();
        directory.write(&mut out);
        assert_eq!(out.len(), directory.encoded_len());
        assert_eq!(Directory::parse(&out), Some(directory.clone()));
        assert_eq!(Directory::parse(&out[..out.len() - 1]), None);
        assert_eq!(directory.partition_of(0xE000_0000_0000_0000), 7);
        assert_eq!(directory.partition_of(0x1FFF_FFFF_FFFF_FFFF), 0);
    }

    fn opcode() -> impl Strategy<Value = Opcode> {
        (1u8..=8).prop_map(|byte| Opcode::from_u8(byte).unwrap())
    }

    proptest! {
        #[test]
        fn requests_round_trip(
            messages in proptest::collection::vec(
                (opcode(), any::<u32>(), any::<u64>(), any::<u32>(), any::<i32>(), any::<u64>(),
                 proptest::collection::vec(any::<u8>(), 1..=250), proptest::collection::vec(any::<u8>(), 0..100)),
                0..20)
        ) {
            let mut body = Vec::new();
            let mut written = Vec::new();
            for (opcode, request_id, keyhash, flags, exptime, operand, key, value) in &messages {
                let value: &[u8] = if opcode.has_value() { value } else { b"" };
                let request = RequestMsg { opcode: *opcode, request_id: *request_id, keyhash: *keyhash, flags: *flags,
                    exptime: *exptime, operand: *operand, key, value };
                request.write(&mut body);
                written.push(request);
            }
            let read: Vec<_> = Requests::new(&body, messages.len() as u16).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(read, written);
        }

        #[test]
        fn responses_round_trip(
            messages in proptest::collection::vec(
                (0u8..=10, any::<u8>(), any::<u32>(), any::<u32>(), any::<u64>(), proptest::collection::vec(any::<u8>(), 0..100)),
                0..20)
        ) {
            let mut body = Vec::new();
            let mut written = Vec::new();
            for (status, opcode, request_id, flags, number, value) in &messages {
                let response = ResponseMsg { status: Status::from_u8(*status).unwrap(), opcode: *opcode,
                    request_id: *request_id, flags: *flags, number: *number, value };
                response.write(&mut body);
                prop_assert_eq!(response.encoded_len(), RESPONSE_BYTES + value.len());
                written.push(response);
            }
            let read: Vec<_> = Responses::new(&body, messages.len() as u16).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(read, written);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), count in any::<u16>()) {
            let _ = Header::parse(&bytes);
            for request in Requests::new(&bytes, count).flatten() {
                prop_assert!(request.key.len() <= KEY_BYTES_MAX && !request.key.is_empty());
            }
            let _ = Responses::new(&bytes, count).count();
            let _ = Directory::parse(&bytes);
        }
    }
}
