//! The Redis protocol's commands that are not one command on one key: the connection's own
//! (PING, ECHO, QUIT, SELECT), refusals, and the reads of several keys (MGET, EXISTS), each
//! key read as a get or an inspect of the one vocabulary would read it. The rest of RESP's
//! executor is beside it: commands over several keys and on every worker (keys.rs), the
//! commands the owner runs on one key's value (owned.rs), KEYS, SCAN and RANDOMKEY
//! (scan.rs).

mod collection;
mod eval;
mod hash;
mod list;
mod set;
mod zset;
pub(super) use eval::Retry;
mod keys;
mod owned;
mod scan;
mod tx;

use super::*;
use qs_proto::command::{Answer, Get, RespReply};
use qs_proto::resp::command::{call, Call};
use qs_proto::resp::{connection, glob, reply, Frame};

/// TIME: the unix time as two bulk strings, seconds and microseconds.
fn time(out: &mut Vec<u8>) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    out.extend_from_slice(b"*2\r\n");
    reply::bulk(now.as_secs().to_string().as_bytes(), out);
    reply::bulk(now.subsec_micros().to_string().as_bytes(), out);
}

use qs_proto::resp::collection::SETTINGS;

impl Engine {
    /// Runs a RESP frame that is not a single-key command, for the connection `fd`.
    pub(super) fn resp_keyless(&mut self, frame: &Frame<'_>, fd: i32, out: &mut Vec<u8>) -> Exec {
        let resp3 = frame.resp3();
        match call(frame, &self.limits) {
            Call::Ping(None) => out.extend_from_slice(reply::PONG),
            Call::Ping(Some(message)) | Call::Echo(message) => reply::bulk(message, out),
            Call::Select(db) => {
                // The turn reads it back into the connection (worker/turn.rs).
                self.db = self.shared.db_spaces.space(db);
                self.selected = Some(db);
                out.extend_from_slice(reply::OK);
            }
            Call::Reset => {
                out.extend_from_slice(reply::RESET);
                return Exec::Reset;
            }
            Call::Shutdown if self.shared.config.enable_shutdown => {
                // As memcached's `shutdown` under -A: the graceful stop of SIGTERM.
                self.shared.request_stop();
                return Exec::Close;
            }
            Call::Shutdown => {
                out.extend_from_slice(b"-ERR shutdown not enabled (memcached's -A allows it)\r\n")
            }
            Call::Quit => {
                out.extend_from_slice(reply::OK);
                return Exec::Close;
            }
            Call::Error(refusal) => reply::refusal(&refusal, out),
            Call::Mget(frame) => self.resp_keys(&frame, (true, fd), out),
            Call::ExistsMany(frame) => self.resp_keys(&frame, (false, fd), out),
            Call::DbSize => reply::integer(self.db_size(self.db) as i64, out),
            Call::Hello { proto, auth, name } => {
                // As redis-server: authenticated first, then named, then the protocol switched.
                let authenticated =
                    auth.map_or(true, |(user, password)| self.resp_auth(Some(user), password, out));
                let info = self.shared.observers.registry.get(fd);
                let named =
                    authenticated && name.map_or(true, |name| name_client(info.as_deref(), name, out));
                if named {
                    let speaks3 = proto.map_or(resp3, |proto| proto == 3);
                    reply::hello(info.as_ref().map_or(0, |info| info.id), speaks3, out);
                    return Exec::Resp3(speaks3);
                }
            }
            Call::Auth { user, password } => {
                if self.resp_auth(user, password, out) {
                    out.extend_from_slice(reply::OK);
                }
            }
            call @ (Call::ClientId
            | Call::ClientSetName(_)
            | Call::ClientGetName
            | Call::ClientList(_)
            | Call::ClientInfo
            | Call::ClientKill { .. }) => return self.resp_client(call, (resp3, fd), out),
            Call::ConfigGet(frame) => self.config_get(&frame, out),
            Call::SwapDb(a, b) => {
                // Routed to every worker: each writes the watched keys it holds.
                self.swap_dbs((a, b), true);
                out.extend_from_slice(reply::OK);
            }
            Call::ResetStat => out.extend_from_slice(crate::admin::stats::reset_for_redis(&self.shared)),
            Call::ConfigSet(frame) => match self.config_set(&frame, true) {
                Ok(()) => out.extend_from_slice(reply::OK),
                Err(error) => out.extend_from_slice(error.as_bytes()),
            },
            Call::CommandCount => reply::integer(qs_proto::resp::command::served_count() as i64, out),
            Call::Accepted => out.extend_from_slice(reply::OK),
            Call::CommandDocs => reply::map_head(0, resp3, out),
            Call::CommandInfo(names) => connection::command_info(names.as_ref(), resp3, out),
            Call::Flush { .. } if self.shared.config.disable_flush_all => {
                out.extend_from_slice(b"-ERR flush_all not allowed\r\n");
            }
            Call::Flush { db } => {
                // Routed to every worker: each empties its own partitions.
                self.flush_db(db, fd, true);
                out.extend_from_slice(reply::OK);
            }
            Call::Owned(owned) => self.resp_owned(&owned, (resp3, fd), out),
            Call::DelMany(frame) => self.del_many(&frame, fd, out),
            Call::Mset { frame, nx: false } => self.mset(&frame, fd, out),
            Call::Mset { frame, nx: true } => self.msetnx(&frame, fd, out),
            Call::Time => time(out),
            Call::Keys(pattern) => self.resp_keys_matching(pattern, out),
            Call::Scan(scan) => self.resp_scan(&scan, out),
            Call::RandomKey => self.resp_random_key(resp3, out),
            Call::Info(frame) => {
                // This worker's figures as of now, the others' as of their last loop turn.
                self.publish();
                let sections: Vec<&[u8]> = frame.args().skip(1).collect();
                let keyspace = self.shared.databases_used().then(|| self.db_sizes());
                let mut text = Vec::new();
                crate::admin::info::write(&self.shared, &sections, keyspace.as_deref(), &mut text);
                reply::text(&text, resp3, out);
            }
            // The connection's turn runs these (worker/tx.rs): they never reach the engine.
            // Queued inside MULTI, run by its EXEC: the watched keys go with the EXEC anyway.
            Call::Unwatch => out.extend_from_slice(reply::OK),
            Call::Multi | Call::Exec | Call::Discard | Call::Watch(_) => {
                debug_assert!(false, "a transaction's command reached the engine: {frame:?}");
                out.extend_from_slice(b"-ERR transaction commands run on the connection\r\n");
            }
            Call::Eval(eval) => self.eval(&eval, (resp3, fd), out),
            Call::Script(script) => self.script(script, out),
            // The parser makes these `Request::RespKey`; a frame built otherwise runs the same.
            Call::Key(command) => return self.run_command(&command, (None, fd), out),
        }
        Exec::Done
    }

    /// CLIENT's subcommands: the connections are the registry's entries (names, protocol
    /// versions), so any worker answers for all of them; `fd` is the asking connection's.
    fn resp_client(&mut self, call: Call<'_>, (resp3, fd): (bool, i32), out: &mut Vec<u8>) -> Exec {
        use crate::observe::clients;
        let registry = &self.shared.observers.registry;
        let asking = (self.now.secs(), fd);
        match call {
            Call::ClientId => reply::integer(registry.get(fd).map_or(0, |info| info.id) as i64, out),
            Call::ClientSetName(name) => {
                if name_client(registry.get(fd).as_deref(), name, out) {
                    out.extend_from_slice(reply::OK);
                }
            }
            Call::ClientGetName => match registry.get(fd).map(|info| info.name()) {
                Some(name) if !name.is_empty() => reply::bulk(&name, out),
                _ => out.extend_from_slice(reply::null(resp3)),
            },
            Call::ClientList(clients) => {
                reply::text(clients::list(registry, &clients, asking).as_bytes(), resp3, out)
            }
            Call::ClientInfo => reply::text(clients::info(registry, asking).as_bytes(), resp3, out),
            Call::ClientKill { clients, old_form } => {
                if clients.user.is_some_and(|user| user != b"default") {
                    let user =
                        String::from_utf8_lossy(clients.user.unwrap_or_default()).replace(['\r', '\n'], " ");
                    out.extend_from_slice(format!("-ERR No such user '{user}'\r\n").as_bytes());
                    return Exec::Done;
                }
                let (killed, itself) = clients::kill(registry, &clients, fd);
                match (old_form, killed) {
                    (true, 0) => out.extend_from_slice(b"-ERR No such client\r\n"),
                    (true, _) => out.extend_from_slice(reply::OK),
                    (false, killed) => reply::integer(killed as i64, out),
                }
                if itself {
                    return Exec::Close;
                }
            }
            _ => unreachable!("resp_client is given CLIENT's subcommands"),
        }
        Exec::Done
    }

    /// CONFIG SET of the settings that mean something here: maxmemory (as `cache_memlimit`, in
    /// whole megabytes up; each worker resizes its own partitions: routed to every worker; 0,
    /// redis-server's "no limit", is the size the server started with; below the smallest
    /// cache, 8 MiB, the size stays and commands that may use memory are refused, as
    /// redis-server refuses them when it cannot evict its way under the limit),
    /// and the values quicksilver has already (maxmemory-policy allkeys-lru, save "",
    /// appendonly no). Every pair is checked before any is applied, as redis-server does.
    pub(super) fn config_set(&mut self, frame: &Frame<'_>, asked_here: bool) -> Result<(), String> {
        let failed = |name: &[u8], why: &str| {
            let name = String::from_utf8_lossy(name);
            format!("-ERR CONFIG SET failed (possibly related to argument '{name}') - {why}\r\n")
        };
        let mut megabytes = None;
        let mut pairs = frame.args().skip(2);
        while let (Some(name), Some(value)) = (pairs.next(), pairs.next()) {
            let is = |setting: &str| name.eq_ignore_ascii_case(setting.as_bytes());
            if is("maxmemory") {
                let bytes = connection::memory_bytes(value)
                    .ok_or_else(|| failed(name, "argument must be a memory value"))?;
                megabytes = Some(match bytes {
                    0 => (0, self.shared.memory.started_megabytes()),
                    _ if bytes < crate::shared::FLOOR_BYTES => (bytes, 0),
                    _ => (0, u32::try_from(bytes.div_ceil(1 << 20)).unwrap_or(u32::MAX)),
                });
            } else if is("maxmemory-policy") && !value.eq_ignore_ascii_case(b"allkeys-lru") {
                return Err(failed(name, "quicksilver evicts by S3-FIFO, as allkeys-lru reads"));
            } else if (is("save") && !value.is_empty())
                || (is("appendonly") && !value.eq_ignore_ascii_case(b"no"))
            {
                return Err(failed(
                    name,
                    "quicksilver keeps no snapshot or append-only file (its warm restart is -e)",
                ));
            } else if is("lua-time-limit") || is("busy-reply-threshold") {
                let limit = qs_proto::resp::command::integer(value)
                    .filter(|&limit| limit >= 0)
                    .ok_or_else(|| failed(name, "argument couldn't be parsed into an integer"))?;
                self.shared.scripts.time_limit_ms.store(limit as u64, std::sync::atomic::Ordering::Relaxed);
            } else if let Some(&(_, slot)) = SETTINGS.iter().find(|(setting, _)| is(setting)) {
                // Kept for CONFIG GET, and no more: a collection is compact at every size here.
                let number = qs_proto::resp::command::integer(value)
                    .ok_or_else(|| failed(name, "argument couldn't be parsed into an integer"))?;
                self.shared.encoding_settings[slot].store(number, std::sync::atomic::Ordering::Relaxed);
            } else if !(is("maxmemory-policy") || is("save") || is("appendonly")) {
                let name = String::from_utf8_lossy(name);
                return Err(format!(
                    "-ERR Unknown option or number of arguments for CONFIG SET - '{name}'\r\n"
                ));
            }
        }
        if let Some((below_floor, megabytes)) = megabytes {
            let unchanged = u64::from(megabytes) << 20 == self.shared.memory.maxbytes();
            if megabytes > 0 && !unchanged {
                let said = self.cache_memlimit(megabytes, asked_here);
                if said != b"OK\r\n" {
                    let why = String::from_utf8_lossy(said).trim_end().to_owned();
                    return Err(failed(b"maxmemory", &why));
                }
            }
            self.shared.memory.set_below_floor(below_floor);
        }
        Ok(())
    }

    /// AUTH on a connection already admitted: true when it may go on (the reply is then the
    /// caller's); else the refusal is written.
    fn resp_auth(&mut self, user: Option<&[u8]>, password: &[u8], out: &mut Vec<u8>) -> bool {
        use crate::session::auth::{resp_credentials, RespAuth};
        match (resp_credentials(self.shared.auth_modes(), user, password), user) {
            (RespAuth::Open, None) => {
                out.extend_from_slice(reply::AUTH_WITHOUT_PASSWORD);
                false
            }
            (RespAuth::Open, Some(b"default")) => true,
            (RespAuth::Valid, _) => {
                self.counters.auth_cmds += 1;
                true
            }
            (RespAuth::Invalid, _) => {
                self.counters.auth_cmds += 1;
                self.counters.auth_errors += 1;
                out.extend_from_slice(reply::WRONGPASS);
                false
            }
            (RespAuth::Open, Some(_)) => {
                out.extend_from_slice(reply::WRONGPASS);
                false
            }
        }
    }

    /// CONFIG GET: the settings clients and tools ask for, as redis-server names them (each
    /// pattern a glob, without case).
    fn config_get(&self, frame: &Frame<'_>, out: &mut Vec<u8>) {
        let maxmemory = self.shared.memory.redis_maxmemory().to_string();
        let databases = self.shared.config.databases.to_string();
        let time_limit =
            self.shared.scripts.time_limit_ms.load(std::sync::atomic::Ordering::Relaxed).to_string();
        let kept: Vec<(&str, String)> = SETTINGS
            .iter()
            .map(|&(name, slot)| {
                (
                    name,
                    self.shared.encoding_settings[slot]
                        .load(std::sync::atomic::Ordering::Relaxed)
                        .to_string(),
                )
            })
            .collect();
        let mut settings: Vec<(&str, &str)> = vec![
            ("maxmemory", &maxmemory),
            // Every key may be evicted, the least useful first (S3-FIFO here).
            ("maxmemory-policy", "allkeys-lru"),
            ("save", ""),
            ("appendonly", "no"),
            ("databases", &databases),
            ("lua-time-limit", &time_limit),
            ("busy-reply-threshold", &time_limit),
        ];
        settings.extend(kept.iter().map(|(name, value)| (*name, value.as_str())));
        // A pattern without wildcards names one setting and is echoed as the client spelled
        // it; a glob shows the names it matches (redis-server 7.0's CONFIG GET).
        let mut shown: Vec<(&[u8], &str)> = Vec::new();
        for pattern in frame.args().skip(2) {
            let is_glob = pattern.iter().any(|byte| matches!(byte, b'*' | b'?' | b'['));
            for &(name, value) in &settings {
                let already = shown.iter().any(|(shown, _)| shown.eq_ignore_ascii_case(name.as_bytes()));
                if is_glob && glob::matches(pattern, name.as_bytes(), true) && !already {
                    shown.push((name.as_bytes(), value));
                } else if !is_glob && pattern.eq_ignore_ascii_case(name.as_bytes()) && !already {
                    shown.push((pattern, value));
                }
            }
        }
        reply::map_head(shown.len(), frame.resp3(), out);
        for (name, value) in shown {
            reply::bulk(name, out);
            reply::bulk(value.as_bytes(), out);
        }
    }

    /// MGET (`values`: an array of each key's value or null) or EXISTS (how many are there)
    /// of the frame's keys. Routed after the connection's pending replies
    /// ([`Engine::reach`]): with CREW any worker reads any partition; without it, keys another
    /// worker owns are refused.
    fn resp_keys(&mut self, frame: &Frame<'_>, (values, fd): (bool, i32), out: &mut Vec<u8>) {
        let keys = frame.args().skip(1);
        if !self.crew && keys.clone().any(|key| !self.owns(self.key(key, None).partition)) {
            out.extend_from_slice(b"-ERR keys of other workers are read only with --access crew\r\n");
            return;
        }
        if self.shared.map.workers() == 1 {
            // Every partition is this worker's: no step runs beside the read.
            return self.read_keys(frame, (values, fd), out);
        }
        // Other workers' partitions are read through CREW's readers: the keys are read again
        // if a step over several keys (a transaction) changed one of them meanwhile, so the
        // reply is of one moment (partition/steps.rs).
        let mut others: Vec<(usize, u64)> = Vec::new();
        let mark = out.len();
        loop {
            others.clear();
            for key in keys.clone() {
                let partition = self.locate(key).1;
                if !self.owns(partition) && !others.iter().any(|&(seen, _)| seen == partition) {
                    if let Some(reader) = self.shared.map.reader(partition) {
                        others.push((partition, reader.step()));
                    }
                }
            }
            self.read_keys(frame, (values, fd), out);
            let map = &self.shared.map;
            let unchanged = |&(partition, seen): &(usize, u64)| {
                map.reader(partition).map_or(true, |reader| reader.step_unchanged(seen))
            };
            if others.iter().all(unchanged) {
                return;
            }
            out.truncate(mark);
            self.shares.taken.retain(|(at, _)| *at < mark);
        }
    }

    /// [`Engine::resp_keys`]'s reads, once.
    fn read_keys(&mut self, frame: &Frame<'_>, (values, fd): (bool, i32), out: &mut Vec<u8>) {
        let keys = frame.args().skip(1);
        if values {
            out.push(b'*');
            qs_proto::response::push_u64(out, keys.len() as u64);
            out.extend_from_slice(b"\r\n");
        }
        let mut present = 0;
        let wording = if frame.resp3() { RespReply::Element3 } else { RespReply::Element };
        for key in keys {
            if key.is_empty() || key.len() > qs_proto::RESP_KEY_BYTES_MAX {
                // Never stored here: a miss.
                if values {
                    out.extend_from_slice(reply::null_of(wording));
                }
                continue;
            }
            let key = self.key(key, None);
            if values {
                self.get(key, &Get::default(), Answer::Resp(wording), fd, out);
            } else {
                present += i64::from(matches!(self.read_unchanged(key), Outcome::Hit(_)));
            }
        }
        if !values {
            reply::integer(present, out);
        }
    }
}
