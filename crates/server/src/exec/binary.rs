//! The binary protocol on the engine: the same partitions, counters, `stats detail` and
//! `watch` lines as the text commands, with memcached 1.6.18's binary replies (proto_bin.c):
//! errors are sent even for quiet commands, successes of quiet commands are not, a quiet get
//! sends only hits.

use super::get::Head;
use super::{Engine, Exec, Key, Located};
use qs_proto::binary::{self as bin, status, Binary, Command as Bin, Reply};
use qs_proto::StoreMode;
use qs_store::{Command, Expiry, Outcome};

impl Engine {
    /// memcached's binary exptime (unsigned) as an expiry, by this turn's clock.
    fn binary_expiry(&self, exptime: u32) -> Expiry {
        Expiry::from_exptime(i64::from(exptime), self.now_secs)
    }

    /// Runs a binary request here, appending its reply to `out`.
    pub(super) fn binary(&mut self, request: &Binary<'_>, at: Option<Located>, out: &mut Vec<u8>) -> Exec {
        let Binary { opcode, opaque, cas, command } = *request;
        let reply =
            Reply { opcode, opaque, status: status::NO_ERROR, cas: 0, extras: &[], key: &[], value_len: 0 };
        let error = |out: &mut Vec<u8>, status| bin::write_error(out, opcode, opaque, status);
        match command {
            Bin::Get { key, quiet, with_key, touch } => {
                self.binary_get(reply, self.key(key, at), quiet, with_key, touch, out)
            }
            Bin::Touch { key, exptime } => self.binary_touch(reply, self.key(key, at), exptime, out),
            Bin::Store { mode, key, flags, exptime, value, quiet } => {
                let key = self.key(key, at);
                self.binary_store(reply, (mode, key, flags, exptime, value), quiet, out);
            }
            Bin::TooLarge { key, set } => {
                self.refuse_too_large(super::TooLarge::Binary, key, set);
                error(out, status::E2BIG);
            }
            Bin::Delete { key, quiet } => {
                let key = self.key(key, at);
                self.shared.detail.record_delete(&key);
                let cas = if cas == 0 { 0 } else { self.cas_expected(key, cas) };
                match self.delete(key, cas, None) {
                    Outcome::Deleted if quiet => {}
                    Outcome::Deleted => reply.write_head(out),
                    Outcome::Exists => error(out, status::KEY_EEXISTS),
                    _ => error(out, status::KEY_ENOENT),
                }
            }
            Bin::Arith { key, delta, initial, exptime, decrement, quiet } => {
                let key = self.key(key, at);
                self.binary_arith(reply, cas, (key, delta, initial, exptime, decrement), quiet, out);
            }
            Bin::Quit { quiet } => {
                if !quiet {
                    reply.write_head(out);
                }
                return Exec::Close;
            }
            // -F: memcached answers a refused flush with AUTH_ERROR.
            Bin::Flush { .. } if self.shared.config.disable_flush_all => error(out, status::AUTH_ERROR),
            Bin::Flush { exptime, quiet } => {
                self.flush_local(i32::try_from(exptime).unwrap_or(i32::MAX), true);
                if !quiet {
                    reply.write_head(out);
                }
            }
            Bin::Noop => reply.write_head(out),
            Bin::Version => {
                let version = super::VERSION.as_bytes();
                Reply { value_len: version.len(), ..reply }.write_head(out);
                out.extend_from_slice(version);
            }
            Bin::Stat { group } => self.binary_stat(reply, group, out),
            // With SASL on, the worker answers these; without it memcached does not know them.
            Bin::SaslListMechs | Bin::SaslAuth { .. } => error(out, status::UNKNOWN_COMMAND),
            Bin::Refuse { status, close } => {
                error(out, status);
                if close {
                    return Exec::Close;
                }
            }
        }
        Exec::Done
    }

    /// Touch: the item's flags in the reply, or KEY_ENOENT.
    fn binary_touch(&mut self, reply: Reply<'_>, key: Key<'_>, exptime: u32, out: &mut Vec<u8>) {
        let error = |out: &mut Vec<u8>, status| bin::write_error(out, reply.opcode, reply.opaque, status);
        self.counters.cmd_touch += 1;
        let expiry = self.binary_expiry(exptime);
        self.log_lookup(&key);
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        match self.run(key, Command::GetAndTouch { expiry }, &mut value) {
            Outcome::Hit(hit) => {
                let flags = hit.flags.to_be_bytes();
                Reply { cas: self.cas_out(hit.cas), extras: &flags, ..reply }.write_head(out);
            }
            _ => error(out, status::KEY_ENOENT),
        }
        self.scratch = value;
    }

    /// Set, add, replace, append, prepend (a frame's CAS is in its mode, checked): the new
    /// CAS, or why not.
    fn binary_store(
        &mut self,
        reply: Reply<'_>,
        (mode, key, flags, exptime, value): (StoreMode, Key<'_>, u32, u32, &[u8]),
        quiet: bool,
        out: &mut Vec<u8>,
    ) {
        let error = |out: &mut Vec<u8>, status| bin::write_error(out, reply.opcode, reply.opaque, status);
        let expiry = self.binary_expiry(exptime);
        let failure = match self.store_outcome(mode, key, flags, expiry, value) {
            Outcome::Stored { cas } => {
                if !quiet {
                    Reply { cas: self.cas_out(cas), ..reply }.write_head(out);
                }
                return;
            }
            Outcome::Exists => status::KEY_EEXISTS,
            Outcome::NotFound => status::KEY_ENOENT,
            Outcome::TooLarge => status::E2BIG,
            Outcome::OutOfMemory => status::ENOMEM,
            _ => match mode {
                qs_store::StoreMode::Add => status::KEY_EEXISTS,
                qs_store::StoreMode::Replace => status::KEY_ENOENT,
                _ => status::NOT_STORED,
            },
        };
        error(out, failure);
    }

    /// Increment and decrement, creating the counter with its initial value unless the
    /// exptime says not to (all ones): the counter's new value, or why not.
    fn binary_arith(
        &mut self,
        reply: Reply<'_>,
        cas: u64,
        (key, delta, initial, exptime, decrement): (Key<'_>, u64, u64, u32, bool),
        quiet: bool,
        out: &mut Vec<u8>,
    ) {
        let error = |out: &mut Vec<u8>, status| bin::write_error(out, reply.opcode, reply.opaque, status);
        // All ones: a miss creates nothing.
        let create = (exptime != u32::MAX).then(|| (initial, self.binary_expiry(exptime)));
        let (outcome, _) = self.arith(key, (delta, decrement), cas, create);
        let failure = match outcome {
            Outcome::Counter { value, cas, .. } => {
                if !quiet {
                    Reply { cas: self.cas_out(cas), value_len: 8, ..reply }.write_head(out);
                    out.extend_from_slice(&value.to_be_bytes());
                }
                return;
            }
            Outcome::NonNumeric => status::DELTA_BADVAL,
            Outcome::Exists => status::KEY_EEXISTS,
            Outcome::NotStored => status::NOT_STORED,
            Outcome::OutOfMemory => status::ENOMEM,
            _ => status::KEY_ENOENT,
        };
        error(out, failure);
    }

    fn binary_get(
        &mut self,
        reply: Reply<'_>,
        key: Key<'_>,
        quiet: bool,
        with_key: bool,
        touch: Option<u32>,
        out: &mut Vec<u8>,
    ) {
        let touch = touch.map(|exptime| self.binary_expiry(exptime));
        let key_out = if with_key { key.bytes } else { &[] };
        let head = Head::Binary { opcode: reply.opcode, opaque: reply.opaque, key: key_out };
        match self.fetch(key, touch, head, out) {
            Outcome::Hit(_) => {}
            _ if quiet => {}
            // A key-returning miss carries the key instead of memcached's "Not found".
            _ if with_key => Reply { status: status::KEY_ENOENT, key: key.bytes, ..reply }.write_head(out),
            _ => bin::write_error(out, reply.opcode, reply.opaque, status::KEY_ENOENT),
        }
    }

    /// STAT: one packet per statistic, then an empty one; memcached's groups (and ours).
    fn binary_stat(&mut self, reply: Reply<'_>, group: &[u8], out: &mut Vec<u8>) {
        let mut text = Vec::new();
        if group.starts_with(b"detail") {
            match &group[6..] {
                rest if rest.starts_with(b" dump") => {
                    self.shared.detail.command(b"dump", &mut text);
                    Reply { key: b"detailed", value_len: text.len(), ..reply }.write_head(out);
                    out.extend_from_slice(&text);
                }
                rest if rest.starts_with(b" on") => self.shared.detail.command(b"on", &mut text),
                rest if rest.starts_with(b" off") => self.shared.detail.command(b"off", &mut text),
                _ => return bin::write_error(out, reply.opcode, reply.opaque, status::KEY_ENOENT),
            }
            return reply.write_head(out);
        }
        let group = if group.starts_with(b"reset") {
            &b"reset"[..]
        } else if group.starts_with(b"settings") {
            &b"settings"[..]
        } else {
            group
        };
        match group {
            b"" | b"reset" | b"settings" | b"items" | b"slabs" | b"sizes" | b"partitions" | b"arena" => {}
            _ => return bin::write_error(out, reply.opcode, reply.opaque, status::KEY_ENOENT),
        }
        self.publish();
        crate::admin::stats::write(&self.shared, group, &mut text);
        for line in text.split(|&byte| byte == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(stat) = line.strip_prefix(b"STAT ") else { continue };
            let space = stat.iter().position(|&byte| byte == b' ').unwrap_or(stat.len());
            let (name, value) = (&stat[..space], stat.get(space + 1..).unwrap_or_default());
            Reply { key: name, value_len: value.len(), ..reply }.write_head(out);
            out.extend_from_slice(value);
        }
        reply.write_head(out);
    }
}
