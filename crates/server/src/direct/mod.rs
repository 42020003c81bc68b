//! Request direction between workers: single-producer rings of batches, one pair per pair of
//! workers. A worker hands a request whose key another worker owns to that owner in this
//! turn's batch (at most one batch per owner per turn); the owner runs the batch and sends the
//! replies back in a batch of its own; each reply is placed by its id in the connection's
//! ordered output.

use crate::codec::Dialect;
use crate::exec::{Engine, Located};
use crate::session::Output;
use qs_proto::command::Command;
use qs_proto::packed::Packed;
use qs_proto::{GetKind, Meta, Parsed, Request};
use rtrb::{Consumer, Producer};

/// What one handed-over operation asks of its owner. Its bytes in the batch are a command's
/// slices for `Command`, a client's request for `Request` and `Everywhere`, a key for `Get`
/// and `Drop`, nothing for `Chunk`.
#[derive(Clone, Copy, Debug)]
pub enum Task {
    /// A client's command on one key, parsed by the asking worker and packed with its slices
    /// (`qs_proto::packed`): run as it is, nothing parsed again, its reply sent as it is. The
    /// packed command is this one of the batch's `packed`.
    Command(u32),
    /// A client's request as it arrived, in its dialect: run whole, its reply sent as it is.
    Request(Dialect),
    /// A client's request that every worker runs on its own partitions (`flush_all`,
    /// `cache_memlimit`): the reply the asking worker sends is its own, so this one is dropped.
    Everywhere(Dialect),
    /// A get of one key: its VALUE block (nothing on a miss); with `end`, and `END` after it
    /// (a get of that key alone), without, as one key of a multi-key get split between owners.
    Get {
        /// Which get.
        kind: GetKind,
        /// The reply ends the get.
        end: bool,
    },
    /// A store refused as too large drops the key's old value here, as memcached drops it;
    /// no reply (the asking worker answers).
    Drop,
    /// A chunk of an `lru_crawler metadump`: the items of `partition`'s buckets `start..end`.
    Chunk {
        /// The partition.
        partition: u32,
        /// Its first bucket.
        start: u32,
        /// One past its last bucket.
        end: u32,
        /// `mgdump`: keys only.
        keys: bool,
    },
}

/// What a handed-over operation runs, read from its bytes once ([`Task::decode`]): what its
/// flash reads are probed from and what runs.
#[derive(Debug)]
pub enum Handed<'b> {
    /// A packed command, unpacked.
    Command(Command<'b>),
    /// A request, parsed (a client's as it arrived), or built (a get of one key, a drop).
    Request(Request<'b>),
    /// A dump chunk: it reads no keys.
    Chunk,
}

impl Task {
    /// What the task runs, with its bytes and its batch's packed commands (a meta command's
    /// request rebuilt in `meta`).
    pub fn decode<'b>(
        self,
        (bytes, packed): (&'b [u8], &[Packed]),
        limits: &qs_proto::Limits,
        meta: &'b mut Option<Meta<'b>>,
    ) -> Handed<'b> {
        match self {
            Task::Command(index) => Handed::Command(packed[index as usize].unpack(bytes, meta)),
            Task::Request(dialect) | Task::Everywhere(dialect) => match dialect.parse(bytes, limits) {
                Parsed::Request { request, .. } => Handed::Request(request),
                other => panic!("handed-over request did not parse: {other:?}"),
            },
            Task::Get { kind, .. } => Handed::Request(Request::Get { kind, keys: bytes, single: true }),
            Task::Drop => Handed::Request(Request::Delete { key: bytes, noreply: true }),
            Task::Chunk { .. } => Handed::Chunk,
        }
    }
}

/// One handed-over operation.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    pub conn: u32,
    pub generation: u32,
    /// The connection's descriptor (`watch` lines name it).
    pub fd: i32,
    pub id: u64,
    pub task: Task,
    /// Its bytes in the batch's `requests`: start and length.
    pub bytes: (u32, u32),
    /// Where the asking worker located its one key (so the owner need not hash it again).
    pub at: Option<Located>,
    /// Its reply in the batch's `responses`: start and length.
    pub response: (u32, u32),
    /// `-o front_cache`: a plain `get` of one key answered under these write epochs and
    /// second, for the asking worker's front cache.
    pub front: Option<(qs_store::front::Epoch, u32)>,
}

/// Requests handed to one worker in one loop turn, and (on the way back) their replies.
#[derive(Default)]
pub struct Batch {
    pub ops: Vec<Op>,
    pub requests: Vec<u8>,
    /// The packed commands of the ops whose task is `Task::Command`, by index.
    pub packed: Vec<Packed>,
    pub responses: Vec<u8>,
    /// It holds a request for every worker (`Task::Everywhere`).
    pub everywhere: bool,
}

/// Ring ends a worker holds, indexed by the other worker.
pub struct Rings {
    /// Requests to each worker.
    pub to: Vec<Option<Producer<Batch>>>,
    /// Requests from each worker.
    pub from: Vec<Option<Consumer<Batch>>>,
    /// Replies to each worker.
    pub reply_to: Vec<Option<Producer<Batch>>>,
    /// Replies from each worker.
    pub reply_from: Vec<Option<Consumer<Batch>>>,
}

/// Ring capacity in batches (one batch per loop turn per pair).
pub const RING_BATCHES: usize = 64;
/// A batch stops taking requests at this many request bytes until it has been sent; the
/// connections that wanted to add to it wait (bounds memory when an owner falls behind).
pub const BATCH_BYTES_MAX: usize = 2 << 20;
/// Spare batches kept for reuse, each worker's allocated when it starts ([`Batch::prefilled`]).
pub const SPARE_BATCHES_MAX: usize = 8;
/// Bytes a spare batch keeps of each of its buffers, and what a prefilled one has (a batch
/// of large values gives the rest back).
pub const SPARE_BATCH_BYTES: usize = 16 << 10;
/// Operations a prefilled batch has room for.
const SPARE_BATCH_OPS: usize = 64;

impl Batch {
    /// An empty batch whose buffers are allocated and their pages written (a worker starts
    /// with [`SPARE_BATCHES_MAX`] of them: the batches of an ordinary turn then take no new
    /// memory however many connections it serves).
    pub fn prefilled() -> Batch {
        let touched = crate::session::touched;
        Batch {
            ops: Vec::with_capacity(SPARE_BATCH_OPS),
            requests: touched(SPARE_BATCH_BYTES),
            packed: Vec::with_capacity(SPARE_BATCH_OPS),
            responses: touched(SPARE_BATCH_BYTES),
            everywhere: false,
        }
    }
}
/// Request bytes handed to one owner and not yet answered; beyond this, connections that want
/// to hand it more wait for its replies (with the batch limit, this bounds the memory an owner
/// that falls behind can make its peers hold).
pub const INFLIGHT_BYTES_MAX: usize = 4 << 20;

/// Builds the rings between `workers` workers.
pub fn rings(workers: usize) -> Vec<Rings> {
    let mut all: Vec<Rings> = (0..workers)
        .map(|_| Rings {
            to: (0..workers).map(|_| None).collect(),
            from: (0..workers).map(|_| None).collect(),
            reply_to: (0..workers).map(|_| None).collect(),
            reply_from: (0..workers).map(|_| None).collect(),
        })
        .collect();
    for a in 0..workers {
        for b in 0..workers {
            if a == b {
                continue;
            }
            let (producer, consumer) = rtrb::RingBuffer::new(RING_BATCHES);
            all[a].to[b] = Some(producer);
            all[b].from[a] = Some(consumer);
            let (producer, consumer) = rtrb::RingBuffer::new(RING_BATCHES);
            all[b].reply_to[a] = Some(producer);
            all[a].reply_from[b] = Some(consumer);
        }
    }
    all
}

/// Hands requests of one connection over to their owners.
pub struct Hand<'a> {
    pub outgoing: &'a mut Vec<Option<Batch>>,
    pub spare: &'a mut Vec<Batch>,
    pub conn: u32,
    pub generation: u32,
    pub fd: i32,
    /// Some owner's batch reached [`BATCH_BYTES_MAX`] this turn.
    pub full: bool,
    /// A request for every worker was added to this turn's batches.
    pub broadcast: &'a mut bool,
}

impl Hand<'_> {
    /// Adds `task` with its `bytes` to this turn's batch for `owner` and reserves its reply's
    /// place in `output`.
    pub fn over(
        &mut self,
        owner: usize,
        task: Task,
        (bytes, at): (&[u8], Option<Located>),
        output: &mut Output,
        engine: &mut Engine,
    ) {
        let everywhere = matches!(task, Task::Everywhere(_));
        *self.broadcast |= everywhere;
        self.add(owner, at, (output, engine), |batch| {
            batch.everywhere |= everywhere;
            batch.requests.extend_from_slice(bytes);
            task
        });
    }

    /// Adds `command` to this turn's batch for `owner`, packed with its slices (the owner
    /// parses nothing), and reserves its reply's place in `output`.
    pub fn command(
        &mut self,
        owner: usize,
        (command, at): (&Command<'_>, Option<Located>),
        output: &mut Output,
        engine: &mut Engine,
    ) {
        self.add(owner, at, (output, engine), |batch| {
            batch.packed.push(command.pack(&mut batch.requests));
            Task::Command(batch.packed.len() as u32 - 1)
        });
    }

    /// Adds an operation to this turn's batch for `owner`: `write` appends its bytes to the
    /// batch and names its task; its reply's place is reserved in `output`.
    fn add(
        &mut self,
        owner: usize,
        at: Option<Located>,
        (output, engine): (&mut Output, &mut Engine),
        write: impl FnOnce(&mut Batch) -> Task,
    ) {
        let id = output.wait_for(owner);
        let batch = self.outgoing[owner].get_or_insert_with(|| self.spare.pop().unwrap_or_default());
        let start = batch.requests.len();
        let task = write(batch);
        let len = batch.requests.len() - start;
        self.full |= batch.requests.len() >= BATCH_BYTES_MAX;
        batch.ops.push(Op {
            conn: self.conn,
            generation: self.generation,
            fd: self.fd,
            id,
            task,
            bytes: (start as u32, len as u32),
            at,
            response: (0, 0),
            front: None,
        });
        engine.counters.forwarded += 1;
    }
}

/// Runs one handed-over operation, whose bytes are `bytes` and which the caller read from
/// them once (`handed`: [`Task::decode`]), and appends its reply to `responses`.
pub fn run_op(engine: &mut Engine, op: &mut Op, bytes: &[u8], handed: &Handed<'_>, responses: &mut Vec<u8>) {
    let response_start = responses.len();
    op.front = None;
    match (op.task, handed) {
        // Every key of a handed-over command is owned here, so nothing is handed on.
        (Task::Command(_), Handed::Command(command)) => {
            engine.run_command(command, (op.at, op.fd), responses);
            if crate::exec::is_plain_resp_get(command) {
                // Its packed bytes are the key: the asking worker's front cache may keep it.
                op.front = engine.front_tag(engine.key(command.key, op.at));
            }
        }
        (Task::Request(_), Handed::Request(request)) => {
            engine.execute(request, (op.at, op.fd), responses);
        }
        (Task::Everywhere(_), Handed::Request(request)) => engine.run_everywhere(request, op.fd),
        (Task::Get { kind, end }, _) => {
            let key = engine.key(bytes, op.at);
            if !engine.get_one(kind, (key, op.fd), responses) {
                responses.extend_from_slice(qs_proto::response::BAD_FORMAT);
            } else if end {
                responses.extend_from_slice(crate::codec::END);
                if kind == GetKind::Get {
                    op.front = engine.front_tag(key);
                }
            }
        }
        (Task::Drop, _) => engine.drop_refused(bytes),
        (Task::Chunk { partition, start, end, keys }, _) => {
            engine.dump_chunk(partition as usize, start as usize..end as usize, keys, responses);
            op.response = (response_start as u32, (responses.len() - response_start) as u32);
            return;
        }
        (task, handed) => unreachable!("{task:?} decoded as {handed:?}"),
    }
    op.response = (response_start as u32, (responses.len() - response_start) as u32);
    engine.counters.executed_for_others += 1;
}
