//! A worker's requests that wait for flash reads (`-o ext_path`).
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

use super::{queue, Worker};
use crate::direct::{run_op, Batch, Handed, Op, Task};
use crate::exec::{Engine, FlashKey, FlashResolved};
use crate::flashio::{Done, Job, Uring};
use crate::shared::Shared;
use qs_proto::packed::Packed;
use qs_store::flash::Place;
use qs_store::Resolved;
use std::collections::{HashMap, VecDeque};

/// Bits of a read's ticket that number the key within its wait.
const KEY_BITS: u32 = 16;
/// A ticket with this bit names a read started ahead ([`FlashWaits::prefetch`]), by its slot.
const PREFETCH: u64 = 1 << 63;
/// Reads started ahead that a worker keeps at most.
const PREFETCH_MAX: usize = 256;

/// A read started ahead of its request.
struct Prefetch {
    /// Partition and flash offset.
    at: (usize, u64),
    /// In flight, or read.
    state: KeyState,
    /// The wait's key ticket that asked for it while it was in flight.
    waiter: Option<u64>,
}

/// How a read began.
enum Started {
    /// In flight on the ring ([`KeyState::InFlight`] or `InFlightDirect`, holding its buffer)
    /// or on a reader thread ([`KeyState::Reading`]).
    Reading(KeyState),
    /// Already here: from the page in memory, or nothing (the record is gone).
    Done(Vec<u8>),
}

/// Starts reading `read` of `partition` as `ticket`.
fn start_read(
    uring: Option<&mut Uring>,
    partition: &mut qs_store::Partition,
    read: qs_store::FlashRead,
    worker: usize,
    ticket: u64,
    shared: &Shared,
) -> Started {
    let direct = partition.flash_is_direct();
    let place = match partition.flash_place(read.offset, read.len) {
        None => return Started::Done(Vec::new()),
        Some(Place::Buffer(bytes)) => {
            let bytes = bytes.to_vec();
            partition.flash_count_read(bytes.len(), true);
            return Started::Done(bytes);
        }
        Some(Place::File(position)) => position,
    };
    let Some(file) = partition.flash_file() else { return Started::Done(Vec::new()) };
    if let Some(uring) = uring {
        if direct {
            let (start, span) = qs_store::flash::direct_span(place, read.len);
            let mut buf = qs_store::flash::AlignedBuf::zeroed(span);
            // SAFETY: the aligned buffer's blocks stay where they are, in the state returned
            // (a wait's key or a prefetch slot), until `collect` takes the completion; the
            // ring is dropped before the waits and the prefetches (field order).
            if unsafe { uring.push_read(&file, &mut buf.bytes_mut()[..span], start, ticket) } {
                let skip = (place - start) as usize;
                return Started::Reading(KeyState::InFlightDirect { buf, skip, len: read.len });
            }
        } else {
            let mut buf = vec![0u8; read.len];
            // SAFETY: as above: a Vec's heap memory stays where it is while the Vec moves into
            // the returned state, untouched until its completion is taken.
            if unsafe { uring.push_read(&file, &mut buf, place, ticket) } {
                return Started::Reading(KeyState::InFlight(buf));
            }
        }
    }
    match shared.rings.flash_io() {
        Some(io) => {
            io.submit(Job { file, position: place, len: read.len, worker, ticket, direct });
            Started::Reading(KeyState::Reading)
        }
        None => Started::Done(Vec::new()),
    }
}

/// Who waits.
pub(super) enum Waiter {
    /// The request at the head of connection `conn`'s input.
    Local { conn: usize, generation: u32 },
    /// A request handed over by worker `from`.
    Handed { from: usize, held: Held },
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
    /// Reads started ahead, by slot, and their slots by (partition, flash offset).
    prefetches: Vec<Option<Prefetch>>,
    prefetch_free: Vec<usize>,
    prefetch_index: HashMap<(usize, u64), usize>,
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
    /// once, from a read started ahead for a later request (`prefetch`), else from the file
    /// through the ring or a reader thread.
    fn read_keys(&mut self, id: usize, engine: &mut Engine, shared: &Shared) {
        let worker = engine.worker;
        let wait = self.waits[id].as_mut().expect("a live wait");
        for (number, key) in wait.keys.iter().enumerate() {
            if !matches!(wait.states[number], KeyState::Reading) {
                continue;
            }
            let ticket = (id as u64) << KEY_BITS | number as u64;
            if let Some(slot) = self.prefetch_index.remove(&(key.partition, key.read.offset)) {
                let ahead = self.prefetches[slot].as_mut().expect("an indexed prefetch");
                if let KeyState::Read(bytes) = &mut ahead.state {
                    wait.states[number] = KeyState::Read(std::mem::take(bytes));
                    self.prefetches[slot] = None;
                    self.prefetch_free.push(slot);
                } else {
                    // Still reading: its bytes come to this key when they are back.
                    ahead.waiter = Some(ticket);
                    wait.reading += 1;
                }
                continue;
            }
            let Some(partition) = engine.owned_partition(key.partition) else { continue };
            match start_read(self.uring.as_mut(), partition, key.read, worker, ticket, shared) {
                Started::Reading(state) => {
                    wait.states[number] = state;
                    wait.reading += 1;
                }
                Started::Done(bytes) => wait.states[number] = KeyState::Read(bytes),
            }
        }
        if wait.reading == 0 {
            self.ready.push(id);
        }
    }

    /// With a connection's request waiting for flash: starts reading the flash keys of a
    /// later plain get of the same connection (parsed in the same window), so that its read
    /// overlaps the first one's instead of following it (MICA's prefetch, one tier down).
    pub(super) fn prefetch(&mut self, request: &qs_proto::Request<'_>, engine: &mut Engine, shared: &Shared) {
        if !matches!(
            request,
            qs_proto::Request::Get { kind: qs_proto::GetKind::Get | qs_proto::GetKind::Gets, .. }
        ) {
            return;
        }
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        engine.flash_probe(request, &mut keys);
        let worker = engine.worker;
        for key in keys.drain(..) {
            let at = (key.partition, key.read.offset);
            if self.prefetch_index.contains_key(&at) || !self.prefetch_room() {
                continue;
            }
            let Some(partition) = engine.owned_partition(key.partition) else { continue };
            if !matches!(partition.flash_place(key.read.offset, key.read.len), Some(Place::File(_))) {
                continue; // in memory: read when its turn comes
            }
            let slot = self.prefetch_free.pop().unwrap_or_else(|| {
                self.prefetches.push(None);
                self.prefetches.len() - 1
            });
            let ticket = PREFETCH | slot as u64;
            let state = match start_read(self.uring.as_mut(), partition, key.read, worker, ticket, shared) {
                Started::Reading(state) => state,
                Started::Done(_) => {
                    self.prefetch_free.push(slot);
                    continue;
                }
            };
            self.prefetches[slot] = Some(Prefetch { at, state, waiter: None });
            self.prefetch_index.insert(at, slot);
        }
        self.keys = keys;
    }

    /// Whether another read may start ahead: at most [`PREFETCH_MAX`] at once, the oldest
    /// finished ones unused so far given up for room.
    fn prefetch_room(&mut self) -> bool {
        if self.prefetch_index.len() < PREFETCH_MAX {
            return true;
        }
        let unused = self.prefetches.iter().position(|slot| {
            slot.as_ref()
                .is_some_and(|ahead| ahead.waiter.is_none() && matches!(ahead.state, KeyState::Read(_)))
        });
        let Some(slot) = unused else { return false };
        let ahead = self.prefetches[slot].take().expect("found");
        self.prefetch_index.remove(&ahead.at);
        self.prefetch_free.push(slot);
        true
    }

    /// Takes the reads the ring and the reader threads finished.
    fn collect(&mut self, engine: &mut Engine, shared: &Shared) {
        let Some(io) = shared.rings.flash_io() else { return };
        if let Some(uring) = self.uring.as_mut() {
            let mut reaped = std::mem::take(&mut self.reaped);
            uring.reap(&mut reaped);
            for (ticket, result) in reaped.drain(..) {
                let got = result.max(0) as usize;
                let state = if ticket & PREFETCH != 0 {
                    self.prefetches
                        .get_mut((ticket & !PREFETCH) as usize)
                        .and_then(Option::as_mut)
                        .map(|ahead| &mut ahead.state)
                } else {
                    let id = (ticket >> KEY_BITS) as usize;
                    let number = (ticket & ((1 << KEY_BITS) - 1)) as usize;
                    self.waits.get_mut(id).and_then(Option::as_mut).map(|wait| &mut wait.states[number])
                };
                let bytes = match state {
                    Some(KeyState::InFlight(buf)) => {
                        let mut bytes = std::mem::take(buf);
                        bytes.truncate(got);
                        bytes
                    }
                    Some(KeyState::InFlightDirect { buf, skip, len }) => {
                        buf.bytes().get(*skip..got.min(*skip + *len)).map(<[u8]>::to_vec).unwrap_or_default()
                    }
                    _ => continue,
                };
                self.done.push(Done { ticket, bytes });
            }
            self.reaped = reaped;
        }
        io.take(engine.worker, &mut self.done);
        let mut done = std::mem::take(&mut self.done);
        for Done { ticket, bytes } in done.drain(..) {
            if ticket & PREFETCH != 0 {
                let slot = (ticket & !PREFETCH) as usize;
                let Some(ahead) = self.prefetches.get_mut(slot).and_then(Option::as_mut) else { continue };
                if let Some(partition) = engine.owned_partition(ahead.at.0) {
                    if !bytes.is_empty() {
                        partition.flash_count_read(bytes.len(), false);
                    }
                }
                match ahead.waiter {
                    // A request came for it meanwhile: its bytes are that key's.
                    Some(waiter) => {
                        self.prefetches[slot] = None;
                        self.prefetch_free.push(slot);
                        self.deliver(waiter, bytes, engine, false);
                    }
                    None => ahead.state = KeyState::Read(bytes),
                }
                continue;
            }
            self.deliver(ticket, bytes, engine, true);
        }
        self.done = done;
    }

    /// A wait's key read is back (`count`: a read of its own, counted here).
    fn deliver(&mut self, ticket: u64, bytes: Vec<u8>, engine: &mut Engine, count: bool) {
        let id = (ticket >> KEY_BITS) as usize;
        let number = (ticket & ((1 << KEY_BITS) - 1)) as usize;
        let Some(wait) = self.waits.get_mut(id).and_then(Option::as_mut) else { return };
        if count && !bytes.is_empty() {
            if let Some(partition) = engine.owned_partition(wait.keys[number].partition) {
                partition.flash_count_read(bytes.len(), false);
            }
        }
        wait.states[number] = KeyState::Read(bytes);
        wait.reading -= 1;
        if wait.reading == 0 {
            self.ready.push(id);
        }
    }

    /// Resolves the read keys of wait `id`; false when some must be read again (longer).
    fn resolve(&mut self, id: usize, engine: &mut Engine, shared: &Shared) -> bool {
        let now = engine.now;
        let wait = self.waits[id].as_mut().expect("a live wait");
        let mut again = false;
        for (number, key) in wait.keys.iter_mut().enumerate() {
            let KeyState::Read(record) = &mut wait.states[number] else { continue };
            let record = std::mem::take(record);
            let Some(partition) = engine.owned_partition(key.partition) else { continue };
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

    /// Whether an operation handed over by worker `from` must wait: one of its connection's
    /// is held already, or its keys are on flash (then `self.keys` names them). A dump chunk
    /// reads no keys and never waits.
    pub(super) fn must_hold(&mut self, from: usize, op: &Op, handed: &Handed<'_>, engine: &Engine) -> bool {
        if matches!(op.task, Task::Chunk { .. }) {
            return false;
        }
        if self.holds(from, op) {
            return true;
        }
        self.keys.clear();
        probe_handed(engine, handed, &mut self.keys);
        !self.keys.is_empty()
    }

    /// Holds a handed-over request behind the connection's others, or (with `self.keys` to
    /// read) as the first.
    pub(super) fn hold(&mut self, from: usize, held: Held, engine: &mut Engine, shared: &Shared) {
        let key = (from, held.op.conn, held.op.generation);
        let waiter = Waiter::Handed { from, held };
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
    /// Runs the requests whose flash reads are back.
    pub(super) fn finish_flash(&mut self) {
        if self.shared.rings.flash_io().is_none() {
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
                    conn.session.state.unblock(crate::session::Wait::Flash);
                    self.engine.flash_resolved = resolved;
                    queue(&mut self.work, conn, index);
                    self.service(index);
                    self.engine.flash_forget();
                }
                Waiter::Handed { from, held } => {
                    let mut batch = self.handover.spare.pop().unwrap_or_default();
                    self.engine.flash_resolved = resolved;
                    self.run_late(&mut batch, &held);
                    self.engine.flash_forget();
                    self.run_held_behind(from, held.op, &mut batch);
                    self.handover.unsent_replies[from].push_back(batch);
                }
            }
        }
    }

    /// Runs a held request now and adds its reply to `batch` (a late reply batch: it carries
    /// no request bytes, so the asking worker's in-flight count is not charged twice).
    fn run_late(&mut self, batch: &mut Batch, held: &Held) {
        let mut op = held.op;
        let mut meta = None;
        let handed = op.task.decode((&held.bytes, held.packed()), &self.engine.limits, &mut meta);
        run_op(&mut self.engine, &mut op, &held.bytes, &handed, &mut batch.responses);
        // Without the key's bytes in the batch, the asking worker cannot fill its front cache.
        op.front = None;
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
            let held = match &self.flash.waits[id] {
                Some(Wait { waiter: Waiter::Handed { held, .. }, .. }) => held.clone(),
                _ => unreachable!("held waits are handed over"),
            };
            if let Some(keys) = probe_held(&mut self.engine, &held) {
                let wait = self.flash.waits[id].as_mut().expect("a held wait");
                wait.states = keys.iter().map(|_| KeyState::Reading).collect();
                wait.keys = keys;
                self.flash.read_keys(id, &mut self.engine, &self.shared);
                return;
            }
            self.flash.waits[id] = None;
            self.flash.free.push(id);
            self.run_late(batch, &held);
            if let Some(queue) = self.flash.held.get_mut(&key) {
                queue.pop_front();
            }
        }
        self.flash.held.remove(&key);
    }
}

/// A handed-over operation held for flash: the op, its bytes, and its packed command (the op's
/// task then names it as the first of `packed()`).
#[derive(Clone, Debug)]
pub(super) struct Held {
    pub op: Op,
    pub bytes: Vec<u8>,
    packed: Option<Box<Packed>>,
}

impl Held {
    /// `op`, with its `bytes`, of a batch whose packed commands are `packed`.
    pub(super) fn of(mut op: Op, bytes: &[u8], packed: &[Packed]) -> Held {
        let packed = match op.task {
            Task::Command(index) => {
                op.task = Task::Command(0);
                Some(Box::new(packed[index as usize]))
            }
            _ => None,
        };
        Held { op, bytes: bytes.to_vec(), packed }
    }

    /// Its packed command, as its task's batch of one.
    fn packed(&self) -> &[Packed] {
        self.packed.as_deref().map_or(&[], std::slice::from_ref)
    }
}

/// The flash keys of a held operation, if it has any.
fn probe_held(engine: &mut Engine, held: &Held) -> Option<Vec<FlashKey>> {
    let mut meta = None;
    let handed = held.op.task.decode((&held.bytes, held.packed()), &engine.limits, &mut meta);
    let mut keys = Vec::new();
    probe_handed(engine, &handed, &mut keys);
    (!keys.is_empty()).then_some(keys)
}

/// The flash keys of a handed-over operation, read from its bytes.
fn probe_handed(engine: &Engine, handed: &Handed<'_>, keys: &mut Vec<FlashKey>) {
    match handed {
        Handed::Command(command) => engine.flash_probe_command(command, keys),
        Handed::Request(request) => engine.flash_probe(request, keys),
        Handed::Chunk => {}
    }
}
