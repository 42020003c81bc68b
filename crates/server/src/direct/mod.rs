//! Request direction between workers: single-producer rings of batches, one pair per pair of
//! workers. A worker hands a request whose key another worker owns to that owner in this
//! turn's batch (at most one batch per owner per turn); the owner runs the batch and sends the
//! replies back in a batch of its own; each reply is placed by its id in the connection's
//! ordered output.

use crate::exec::Engine;
use crate::session::Output;
use qs_proto::{GetKind, Parsed, Request};
use rtrb::{Consumer, Producer};

/// What happens to a forwarded request's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Sent to the client as is.
    Reply,
    /// One key of a split multi-get: the VALUE block without the END line.
    StripEnd,
    /// Not sent (flush_all on other workers, the delete after a refused set).
    Discard,
    /// Held by the owner for flash reads: answered in a later batch (never on a ring).
    Held,
}

/// One forwarded request.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    pub conn: u32,
    pub generation: u32,
    /// The connection's descriptor (`watch` lines name it).
    pub fd: i32,
    pub id: u64,
    pub kind: OpKind,
    pub request: (u32, u32),
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
    pub responses: Vec<u8>,
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
/// Spare batches kept for reuse.
pub const SPARE_BATCHES_MAX: usize = 16;
/// Bytes a spare batch keeps of its buffers (a batch of large values gives the rest back).
pub const SPARE_BATCH_BYTES: usize = 64 << 10;
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
}

impl Hand<'_> {
    /// Adds `request` (complete request bytes) to this turn's batch for `owner` and reserves
    /// its reply's place in `output`.
    pub fn over(
        &mut self,
        owner: usize,
        request: &[u8],
        kind: OpKind,
        output: &mut Output,
        engine: &mut Engine,
    ) {
        let id = output.wait_for(owner);
        let batch = self.outgoing[owner].get_or_insert_with(|| self.spare.pop().unwrap_or_default());
        let start = batch.requests.len();
        batch.requests.extend_from_slice(request);
        self.full |= batch.requests.len() >= BATCH_BYTES_MAX;
        let request = (start as u32, request.len() as u32);
        batch.ops.push(Op {
            conn: self.conn,
            generation: self.generation,
            fd: self.fd,
            id,
            kind,
            request,
            response: (0, 0),
            front: None,
        });
        engine.counters.forwarded += 1;
    }
}

/// Parses a handed-over request's bytes (either protocol).
pub fn parse_handed<'a>(request: &'a [u8], limits: &qs_proto::Limits) -> Parsed<'a> {
    match request.first() {
        Some(&qs_proto::binary::REQUEST_MAGIC) => qs_proto::binary::parse(request, limits),
        _ => qs_proto::parse(request, limits),
    }
}

/// Runs one handed-over request (or dump chunk) and appends its reply to `responses`.
pub fn run_op(engine: &mut Engine, op: &mut Op, request: &[u8], responses: &mut Vec<u8>) {
    let response_start = responses.len();
    engine.conn_fd = op.fd;
    if let Some((partition, buckets)) = crate::session::dump::decode_chunk(request) {
        engine.dump_chunk(partition, buckets, responses);
        op.response = (response_start as u32, (responses.len() - response_start) as u32);
        return;
    }
    match parse_handed(request, &engine.limits) {
        Parsed::Request { request, .. } => {
            // Every key of a handed-over request is owned here, so nothing is handed on.
            engine.for_other = true;
            engine.execute(&request, responses);
            engine.for_other = false;
            op.front = match request {
                Request::Get { kind: GetKind::Get, keys } if op.kind == OpKind::Reply => {
                    qs_proto::tokens::single_word(keys).and_then(|key| engine.front_tag(key))
                }
                _ => None,
            };
        }
        other => panic!("handed-over request did not parse: {other:?}"),
    }
    match op.kind {
        OpKind::Reply | OpKind::Held => {}
        OpKind::StripEnd => {
            if responses[response_start..].ends_with(qs_proto::response::END) {
                responses.truncate(responses.len() - qs_proto::response::END.len());
            }
        }
        OpKind::Discard => responses.truncate(response_start),
    }
    op.response = (response_start as u32, (responses.len() - response_start) as u32);
    engine.counters.executed_for_others += 1;
}
