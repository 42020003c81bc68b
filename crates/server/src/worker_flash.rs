//! A worker's requests that wait for flash reads (`-o ext_path`, issue 26).
//!
//! Before a request runs here, [`Engine::flash_probe`] names its keys whose records are on
//! flash. Such a request waits while the worker serves everything else:
//! - a connection's own request stays unread in its input (the connection is paused, as one
//!   waiting for a handed-over reply is) and runs again once its keys are resolved;
//! - a request handed over by another worker is held here with the requests of the same
//!   connection that come after it (their order is kept), and their replies go back in a later
//!   batch (the asking worker places replies by id).
//!
//! Resolving a key ([`qs_store::Partition::flash_resolve`]) either brings the item back to
//! DRAM, where the request then finds it, or keeps the record to serve a plain get from it.

use super::{queue, run_op, Batch, Op, Worker};
use crate::engine::{Engine, FlashKey, FlashResolved};
use crate::flashio::{Done, Job, Uring};
use crate::shared::Shared;
use qs_store::flash::Place;
use qs_store::Resolved;
use std::collections::{HashMap, VecDeque};

/// Bits of a read's ticket that number the key within its wait.
const KEY_BITS: u32 = 16;

/// Who waits.
pub(super) enum Waiter {
    /// The request at the head of connection `conn`'s input.
    Local { conn: usize, generation: u32 },
    /// A request handed over by worker `from`, with its bytes.
    Handed { from: usize, op: Op, request: Vec<u8> },
}

/// Where one key of a waiting request stands.
enum KeyState {
    Reading,
    /// Being read by the worker's io_uring into this buffer (not to be touched until then).
    InFlight(Vec<u8>),
    /// The same for a file opened with O_DIRECT: an aligned span, of which the record's
    /// bytes start at `skip`.
    InFlightDirect {
        buf: qs_store::flash::AlignedBuf,
        skip: usize,
        len: usize,
    },
    Read(Vec<u8>),
    Resolved(FlashResolved),
}

/// A request waiting for its flash keys.
struct Wait {
    waiter: Waiter,
    keys: Vec<FlashKey>,
    states: Vec<KeyState>,
    /// Reads not back yet.
    reading: usize,
}

/// The requests a worker holds for flash.
#[derive(Default)]
pub(super) struct FlashWaits {
    /// The worker's io_uring (else reads go to the reader threads). First, so it is dropped
    /// first: its drop waits for the reads still writing into the waits' buffers.
    pub(super) uring: Option<Uring>,
    waits: Vec<Option<Wait>>,
    free: Vec<usize>,
    /// Waits whose reads are all back.
    ready: Vec<usize>,
    /// Per handed-over connection (worker, connection, generation): its requests held here,
    /// oldest first; only the first has reads in flight.
    held: HashMap<(usize, u32, u32), VecDeque<usize>>,
    done: Vec<Done>,
    reaped: Vec<(u64, i32)>,
    /// Scratch for probes.
    pub(super) keys: Vec<FlashKey>,
}

impl FlashWaits {
    /// Whether finished reads are waiting to be handled, or reads to be submitted (the worker
    /// must not sleep).
    pub(super) fn has_work(&mut self) -> bool {
        !self.ready.is_empty() || self.uring.as_mut().is_some_and(Uring::has_work)
    }

    /// Submits the reads queued on the ring.
    pub(super) fn submit(&mut self) {
        if let Some(uring) = self.uring.as_mut() {
            uring.submit();
        }
    }

    fn insert(&mut self, wait: Wait) -> usize {
        match self.free.pop() {
            Some(id) => {
                self.waits[id] = Some(wait);
                id
            }
            None => {
                self.waits.push(Some(wait));
                self.waits.len() - 1
            }
        }
    }

    /// Starts waiting for `self.keys` (taken) on behalf of `waiter`.
    pub(super) fn start(&mut self, waiter: Waiter, engine: &mut Engine, shared: &Shared) -> usize {
        let keys = std::mem::take(&mut self.keys);
        let states = keys.iter().map(|_| KeyState::Reading).collect();
        let id = self.insert(Wait { waiter, keys, states, reading: 0 });
        self.read_keys(id, engine, shared);
        id
    }

    /// Reads the keys of wait `id` still in [`KeyState::Reading`]: from the page in memory at
    /// once, from the file on a reader thread.
    fn read_keys(&mut self, id: usize, engine: &mut Engine, shared: &Shared) {
        let worker = engine.worker;
        let wait = self.waits[id].as_mut().expect("a live wait");
        for (number, key) in wait.keys.iter().enumerate() {
            if !matches!(wait.states[number], KeyState::Reading) {
                continue;
            }
            let Some(partition) = engine.partitions[key.partition].as_mut() else { continue };
            let ticket = (id as u64) << KEY_BITS | number as u64;
            let direct = partition.flash_is_direct();
            if let (Some(uring), Some(Place::File(position)), Some(file), true) = (
                self.uring.as_mut(),
                partition.flash_place(key.read.offset, key.read.len),
                partition.flash_file(),
                direct,
            ) {
                let (start, span) = qs_store::flash::direct_span(position, key.read.len);
                let mut buf = qs_store::flash::AlignedBuf::zeroed(span);
                // SAFETY: as below: the aligned buffer's blocks stay where they are, in the
                // key's state, until `collect` takes the completion.
                if unsafe { uring.push_read(&file, &mut buf.bytes_mut()[..span], start, ticket) } {
                    let skip = (position - start) as usize;
                    wait.states[number] = KeyState::InFlightDirect { buf, skip, len: key.read.len };
                    wait.reading += 1;
                    continue;
                }
            }
            if let (Some(uring), Some(Place::File(position)), Some(file), false) = (
                self.uring.as_mut(),
                partition.flash_place(key.read.offset, key.read.len),
                partition.flash_file(),
                direct,
            ) {
                let mut buf = vec![0u8; key.read.len];
                // SAFETY: the buffer moves into the key's state untouched (a Vec's heap memory
                // stays where it is) and stays there until `collect` takes its completion;
                // the ring is dropped before the waits (field order).
                if unsafe { uring.push_read(&file, &mut buf, position, ticket) } {
                    wait.states[number] = KeyState::InFlight(buf);
                    wait.reading += 1;
                    continue;
                }
            }
            let job = match partition.flash_place(key.read.offset, key.read.len) {
                None => None,
                Some(Place::Buffer(bytes)) => {
                    let bytes = bytes.to_vec();
                    partition.flash_count_read(bytes.len(), true);
                    wait.states[number] = KeyState::Read(bytes);
                    None
                }
                Some(Place::File(position)) => partition.flash_file().map(|file| Job {
                    file,
                    position,
                    len: key.read.len,
                    worker,
                    ticket,
                    direct,
                }),
            };
            match (job, shared.flash_io.as_ref()) {
                (Some(job), Some(io)) => {
                    io.submit(job);
                    wait.reading += 1;
                }
                _ => {
                    if matches!(wait.states[number], KeyState::Reading) {
                        // Gone from the log (or no reader): nothing to read, a DRAM miss.
                        wait.states[number] = KeyState::Read(Vec::new());
                    }
                }
            }
        }
        if wait.reading == 0 {
            self.ready.push(id);
        }
    }

    /// Takes the reads the ring and the reader threads finished.
    fn collect(&mut self, engine: &mut Engine, shared: &Shared) {
        let Some(io) = shared.flash_io.as_ref() else { return };
        if let Some(uring) = self.uring.as_mut() {
            let mut reaped = std::mem::take(&mut self.reaped);
            uring.reap(&mut reaped);
            for (ticket, result) in reaped.drain(..) {
                let id = (ticket >> KEY_BITS) as usize;
                let number = (ticket & ((1 << KEY_BITS) - 1)) as usize;
                let Some(wait) = self.waits.get_mut(id).and_then(Option::as_mut) else { continue };
                let got = result.max(0) as usize;
                let bytes = match &mut wait.states[number] {
                    KeyState::InFlight(buf) => {
                        let mut bytes = std::mem::take(buf);
                        bytes.truncate(got);
                        bytes
                    }
                    KeyState::InFlightDirect { buf, skip, len } => {
                        buf.bytes().get(*skip..got.min(*skip + *len)).map(<[u8]>::to_vec).unwrap_or_default()
                    }
                    _ => continue,
                };
                self.done.push(Done { ticket, bytes });
            }
            self.reaped = reaped;
        }
        io.take(engine.worker, &mut self.done);
        for done in self.done.drain(..) {
            let id = (done.ticket >> KEY_BITS) as usize;
            let number = (done.ticket & ((1 << KEY_BITS) - 1)) as usize;
            let Some(wait) = self.waits.get_mut(id).and_then(Option::as_mut) else { continue };
            if let Some(partition) = engine.partitions[wait.keys[number].partition].as_mut() {
                if !done.bytes.is_empty() {
                    partition.flash_count_read(done.bytes.len(), false);
                }
            }
            wait.states[number] = KeyState::Read(done.bytes);
            wait.reading -= 1;
            if wait.reading == 0 {
                self.ready.push(id);
            }
        }
    }

    /// Resolves the read keys of wait `id`; false when some must be read again (longer).
    fn resolve(&mut self, id: usize, engine: &mut Engine, shared: &Shared) -> bool {
        let now = engine.now_secs;
        let wait = self.waits[id].as_mut().expect("a live wait");
        let mut again = false;
        for (number, key) in wait.keys.iter_mut().enumerate() {
            let KeyState::Read(record) = &mut wait.states[number] else { continue };
            let record = std::mem::take(record);
            let Some(partition) = engine.partitions[key.partition].as_mut() else { continue };
            if record.is_empty() {
                partition.flash_read_failed();
                wait.states[number] = KeyState::Resolved(FlashResolved { hash: key.hash, serve: None });
                continue;
            }
            let serve =
                match partition.flash_resolve(key.hash, &key.key, key.read, &record, now, key.plain_get) {
                    Resolved::Done => None,
                    Resolved::Serve => Some((key.read, record)),
                    Resolved::NeedBytes(len) if len > key.read.len => {
                        key.read.len = len;
                        wait.states[number] = KeyState::Reading;
                        again = true;
                        continue;
                    }
                    Resolved::NeedBytes(_) => None,
                };
            wait.states[number] = KeyState::Resolved(FlashResolved { hash: key.hash, serve });
        }
        if again {
            self.read_keys(id, engine, shared);
        }
        !again
    }

    /// Takes wait `id` with its keys resolved, freeing its place.
    fn take(&mut self, id: usize) -> (Waiter, Vec<FlashResolved>) {
        let wait = self.waits[id].take().expect("a live wait");
        self.free.push(id);
        let resolved = wait
            .states
            .into_iter()
            .filter_map(|state| match state {
                KeyState::Resolved(resolved) => Some(resolved),
                _ => None,
            })
            .collect();
        (wait.waiter, resolved)
    }

    /// Whether requests of worker `from`'s connection are held here (a later one must wait
    /// behind them).
    pub(super) fn holds(&self, from: usize, op: &Op) -> bool {
        !self.held.is_empty() && self.held.contains_key(&(from, op.conn, op.generation))
    }

    /// Holds a handed-over request behind the connection's others, or (with `self.keys` to
    /// read) as the first.
    pub(super) fn hold(
        &mut self,
        from: usize,
        op: Op,
        request: Vec<u8>,
        engine: &mut Engine,
        shared: &Shared,
    ) {
        let key = (from, op.conn, op.generation);
        let waiter = Waiter::Handed { from, op, request };
        let id = if self.held.contains_key(&key) {
            // Probed when its turn comes.
            self.insert(Wait { waiter, keys: Vec::new(), states: Vec::new(), reading: 0 })
        } else {
            self.start(waiter, engine, shared)
        };
        self.held.entry(key).or_default().push_back(id);
    }
}

impl Worker {
    /// A graceful stop with `-e`: saves each owned partition's flash state beside the memory
    /// file (`flashsave`) so the next start finds its flash items.
    pub(super) fn save_flash(&mut self) {
        let Some(path) = self.shared.config.memory_file.clone() else { return };
        if self.shared.flash_io.is_none() {
            return;
        }
        for (index, partition) in self.engine.partitions.iter_mut().enumerate() {
            let Some(partition) = partition.as_mut() else { continue };
            let (Some(shape), Some((page, slots))) = (partition.flash_shape(), partition.flash_save()) else {
                continue;
            };
            let identity = crate::flash_identity(&self.shared.extended, index, shape);
            let saved = crate::flashsave::Saved { identity, page, slots };
            if let Err(error) = crate::flashsave::save(&path, index, &saved) {
                eprintln!("[restart] cannot save partition {index}'s flash state: {error}");
            }
        }
    }

    /// Runs the requests whose flash reads are back.
    pub(super) fn finish_flash(&mut self) {
        if self.shared.flash_io.is_none() {
            return;
        }
        self.flash.collect(&mut self.engine, &self.shared);
        while let Some(id) = self.flash.ready.pop() {
            if !self.flash.resolve(id, &mut self.engine, &self.shared) {
                continue;
            }
            self.executed = true;
            let (waiter, resolved) = self.flash.take(id);
            match waiter {
                Waiter::Local { conn: index, generation } => {
                    let Some(conn) = self.conns.get_mut(index).and_then(Option::as_mut) else { continue };
                    if conn.generation != generation {
                        continue;
                    }
                    conn.flash_wait = false;
                    self.engine.flash_resolved = resolved;
                    queue(&mut self.work, conn, index);
                    self.service(index);
                    self.engine.flash_forget();
                }
                Waiter::Handed { from, op, request } => {
                    let mut batch = self.spare.pop().unwrap_or_default();
                    self.engine.flash_resolved = resolved;
                    self.run_late(&mut batch, op, &request);
                    self.engine.flash_forget();
                    self.run_held_behind(from, op, &mut batch);
                    self.unsent_replies[from].push_back(batch);
                }
            }
        }
    }

    /// Runs a held request now and adds its reply to `batch` (a late reply batch: it carries
    /// no request bytes, so the asking worker's in-flight count is not charged twice).
    fn run_late(&mut self, batch: &mut Batch, mut op: Op, request: &[u8]) {
        op.front = None;
        run_op(&mut self.engine, &mut op, request, &mut batch.responses);
        batch.ops.push(op);
    }

    /// After the held request `first` of a connection ran: runs the ones held behind it, until
    /// one must read flash (it then waits as the connection's first).
    fn run_held_behind(&mut self, from: usize, first: Op, batch: &mut Batch) {
        let key = (from, first.conn, first.generation);
        if let Some(queue) = self.flash.held.get_mut(&key) {
            queue.pop_front();
        }
        while let Some(&id) = self.flash.held.get(&key).and_then(VecDeque::front) {
            let (op, request) = match &self.flash.waits[id] {
                Some(Wait { waiter: Waiter::Handed { op, request, .. }, .. }) => (*op, request.clone()),
                _ => unreachable!("held waits are handed over"),
            };
            if let Some(keys) = probe_bytes(&mut self.engine, &request) {
                let wait = self.flash.waits[id].as_mut().expect("a held wait");
                wait.states = keys.iter().map(|_| KeyState::Reading).collect();
                wait.keys = keys;
                self.flash.read_keys(id, &mut self.engine, &self.shared);
                return;
            }
            self.flash.waits[id] = None;
            self.flash.free.push(id);
            self.run_late(batch, op, &request);
            if let Some(queue) = self.flash.held.get_mut(&key) {
                queue.pop_front();
            }
        }
        self.flash.held.remove(&key);
    }
}

/// The flash keys of a handed-over request's bytes, if it has any.
fn probe_bytes(engine: &mut Engine, request: &[u8]) -> Option<Vec<FlashKey>> {
    let parse = match request.first() {
        Some(&qs_proto::binary::REQUEST_MAGIC) => qs_proto::binary::parse,
        _ => qs_proto::parse,
    };
    let qs_proto::Parsed::Request { request, .. } = parse(request, &engine.limits) else { return None };
    let mut keys = Vec::new();
    engine.flash_probe(&request, &mut keys);
    (!keys.is_empty()).then_some(keys)
}
