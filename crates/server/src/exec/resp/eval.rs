//! EVAL, EVALSHA and SCRIPT on the engine: a script runs in this worker's Lua state
//! (script/vm.rs) over partitions held here, and each `redis.call` runs as the connection's
//! own command would, checked first as redis-server checks a script's calls (script.c): known,
//! of the right arity, not one scripts may not call, not a write in a read-only script, and
//! on keys whose partitions this worker holds for the script's step.
//!
//! The keys a script declares (KEYS) are held for it: the worker's turn runs the script as a
//! step over their partitions (exec/resp/tx.rs), as EXEC runs a transaction, so no other
//! client sees half of what it does. A key it did not declare is served where its partition
//! is held here anyway (this worker owns it, or it shares a partition with a declared key),
//! and refused otherwise: reaching another worker's partition in the middle of a step could
//! wait on that worker's own step (a deadlock), and would not be isolated.

use super::tx::{names, Names};
use super::*;
use crate::codec::Dialect;
use crate::script::{self, vm};
use qs_proto::resp::script::{called, Eval, Script};

/// Whether a script's run may be made again, over every partition, when it reaches a key no
/// partition held here has: only a script run alone (not inside EXEC), and only while it has
/// written nothing; the run that reaches such a key makes no call after it, and its reply is
/// dropped (exec/resp/tx.rs runs it again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::exec) enum Retry {
    /// Not this run: such a key is refused.
    Off,
    /// This run may be made again.
    Possible,
    /// This run reached such a key: made again over every partition.
    Wanted,
}

/// A call after its run reached a key no partition held here has (the run is made again).
const RETRYING: &[u8] = b"-ERR the script runs again over every partition\r\n";

/// A script's call of a key no partition held here has.
const NOT_HELD: &[u8] =
    b"-ERR Script attempted to access a key another worker owns that it did not declare in KEYS (declare it, or run with -t 1)\r\n";

impl Engine {
    /// EVAL and its forms, for the connection `fd` (its replies RESP3 if `resp3`).
    pub(super) fn eval(&mut self, eval: &Eval<'_>, (resp3, fd): (bool, i32), out: &mut Vec<u8>) {
        let sha = if eval.sha {
            match script::sha_named(eval.body()) {
                Some(sha) => sha,
                None => return out.extend_from_slice(vm::NOSCRIPT),
            }
        } else {
            script::sha1_hex(eval.body())
        };
        let scripts = self.shared.scripts.clone();
        // A call's reply must be bytes the script reads, never a value sent from a shared copy.
        let shares = std::mem::replace(&mut self.shares.on, false);
        // A SELECT the script makes is its own (redis-server 7.0): the connection's database
        // is as it was after it.
        let (db, selected) = (self.db, self.selected);
        let ran = vm::with(&scripts, self.worker, |state| {
            let source = (!eval.sha).then(|| eval.body());
            let compiled = match state.compiled(&sha, source) {
                Ok(compiled) => compiled,
                Err(reply) => return out.extend_from_slice(&reply),
            };
            let read_only = eval.read_only || compiled.read_only;
            let refusing = self.shared.memory.refusing();
            if refusing && compiled.allow_oom == Some(false) && !read_only {
                // A script with flags that do not allow it, while out of memory.
                return out.extend_from_slice(reply::OOM);
            }
            let oom = refusing && compiled.allow_oom != Some(true);
            let mut calls = Calls { engine: self, fd, read_only, oom };
            state.run((&compiled, &sha), (eval.keys(), eval.argv()), resp3, &mut calls, out);
        });
        self.shares.on = shares;
        (self.db, self.selected) = (db, selected);
        if let Err(error) = ran {
            out.extend_from_slice(format!("-ERR scripts cannot run here: {error}\r\n").as_bytes());
        }
    }

    /// SCRIPT's subcommands.
    pub(super) fn script(&mut self, script: Script<'_>, out: &mut Vec<u8>) {
        let scripts = self.shared.scripts.clone();
        match script {
            Script::Load(source) => {
                let sha = script::sha1_hex(source);
                let loaded =
                    vm::with(&scripts, self.worker, |state| state.compiled(&sha, Some(source)).map(drop));
                match loaded {
                    Ok(Ok(())) => reply::bulk(&sha, out),
                    Ok(Err(reply)) => out.extend_from_slice(&reply),
                    Err(error) => {
                        out.extend_from_slice(format!("-ERR scripts cannot run here: {error}\r\n").as_bytes())
                    }
                }
            }
            Script::Exists(frame) => {
                out.push(b'*');
                out.extend_from_slice((frame.argc() - 2).to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
                for sha in frame.args().skip(2) {
                    let known = script::sha_named(sha).is_some_and(|sha| scripts.exists(&sha));
                    out.extend_from_slice(if known { b":1\r\n" } else { b":0\r\n" });
                }
            }
            Script::Flush => {
                scripts.flush();
                out.extend_from_slice(reply::OK);
            }
            Script::Kill => out.extend_from_slice(scripts.kill(self.worker).reply()),
            Script::Help => {
                let lines = qs_proto::resp::script::HELP;
                out.push(b'*');
                out.extend_from_slice(lines.len().to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
                for line in lines {
                    out.push(b'+');
                    out.extend_from_slice(line.as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
            }
        }
    }
}

/// Whether a script's call may reach `key` here: its partition is held (a key too long to
/// be one is refused by its command).
fn key_held(engine: &Engine, key: &[u8]) -> bool {
    key.len() > qs_proto::RESP_KEY_BYTES_MAX || engine.owns(engine.locate(key).1)
}

/// A running script's calls into the engine.
struct Calls<'e> {
    engine: &'e mut Engine,
    fd: i32,
    read_only: bool,
    /// Calls that may use memory are refused (out of memory, and the script's flags do not
    /// allow it).
    oom: bool,
}

impl vm::Caller for Calls<'_> {
    fn call(&mut self, frame: &[u8], name: &[u8], resp3: bool, out: &mut Vec<u8>) {
        if self.engine.retry == Retry::Wanted {
            return out.extend_from_slice(RETRYING);
        }
        let refuse = |out: &mut Vec<u8>, text: &[u8]| {
            out.push(b'-');
            out.extend_from_slice(text);
            out.extend_from_slice(b"\r\n");
        };
        let Some(command) = called(name) else {
            return refuse(out, b"ERR Unknown Redis command called from script");
        };
        let argc = frame
            .iter()
            .skip(1)
            .take_while(|&&b| b != b'\r')
            .fold(0usize, |n, &b| n * 10 + usize::from(b - b'0'));
        if !command.fits(argc) {
            return refuse(out, b"ERR Wrong number of args calling Redis command from script");
        }
        if command.noscript {
            return refuse(out, b"ERR This Redis command is not allowed from script");
        }
        if command.write && self.read_only {
            return refuse(out, b"ERR Write commands are not allowed from read-only scripts.");
        }
        if command.denyoom && self.oom && self.engine.shared.memory.refusing() {
            return out.extend_from_slice(reply::OOM);
        }
        let engine = &mut *self.engine;
        let dialect = if resp3 { Dialect::Resp3 } else { Dialect::Resp };
        // Its keys into the script's database, as a connection's requests are
        // (qs_proto::resp::db): in database 0 only a MOVE's or a COPY's.
        let mut mapped = Vec::new();
        let mappable =
            engine.db != 0 || name.eq_ignore_ascii_case(b"move") || name.eq_ignore_ascii_case(b"copy");
        let parsed = if mappable { qs_proto::resp::frame_of(frame) } else { None };
        let frame = match parsed {
            Some((Ok(parsed), _)) if engine.db != 0 || qs_proto::resp::db::needs_map(&parsed) => {
                let spaces = &engine.shared.db_spaces;
                match qs_proto::resp::db::map(&parsed, engine.db, spaces, &mut mapped) {
                    qs_proto::resp::db::Mapped::Rewritten => {
                        engine.shared.use_databases();
                        &mapped[..]
                    }
                    _ => frame,
                }
            }
            _ => frame,
        };
        let request = match dialect.parse(frame, &engine.limits) {
            qs_proto::Parsed::Request { request, .. } => request,
            qs_proto::Parsed::Refused { reply, .. } => return out.extend_from_slice(reply.as_bytes()),
            _ => return refuse(out, b"ERR the script's call could not be read"),
        };
        let held = match &request {
            // One key (what most calls name), without making a list of it.
            qs_proto::Request::RespKey(command) => key_held(engine, command.key),
            _ => match names(&request, &engine.limits, 0) {
                Names::Nothing => true,
                Names::Keys(keys) => keys.iter().all(|key| key_held(engine, key)),
                Names::Everything => engine.partitions.iter().all(Option::is_some),
            },
        };
        if !held {
            let running = &engine.shared.scripts.running[engine.worker];
            if engine.retry == Retry::Possible && !running.has_written() {
                engine.retry = Retry::Wanted;
                return out.extend_from_slice(RETRYING);
            }
            return out.extend_from_slice(NOT_HELD);
        }
        if command.write && !engine.shared.scripts.running[engine.worker].writes() {
            // SCRIPT KILL came first: the script ends at its next look, having written nothing.
            return refuse(out, b"ERR Script killed by user with SCRIPT KILL...");
        }
        let _ = engine.execute(&request, (None, self.fd), out);
    }
}
