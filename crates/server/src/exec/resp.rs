//! The Redis protocol's commands that are not one command on one key: the connection's own
//! (PING, ECHO, QUIT, SELECT), refusals, and the reads of several keys (MGET, EXISTS), each
//! key read as a get or an inspect of the one vocabulary would read it.

use super::*;
use qs_proto::command::{Answer, Get, RespReply};
use qs_proto::resp::command::{call, Call};
use qs_proto::resp::{reply, Frame};

impl Engine {
    /// Runs a RESP frame that is not a single-key command.
    pub(super) fn resp_keyless(&mut self, frame: &Frame<'_>, out: &mut Vec<u8>) -> Exec {
        match call(frame) {
            Call::Ping(None) => out.extend_from_slice(reply::PONG),
            Call::Ping(Some(message)) | Call::Echo(message) => reply::bulk(message, out),
            Call::Select => out.extend_from_slice(reply::OK),
            Call::Quit => {
                out.extend_from_slice(reply::OK);
                return Exec::Close;
            }
            Call::Error(refusal) => reply::refusal(&refusal, out),
            Call::Mget(frame) => self.resp_keys(&frame, true, out),
            Call::ExistsMany(frame) => self.resp_keys(&frame, false, out),
            Call::DbSize => {
                // This worker's figures as of now, the others' as of their last loop turn.
                self.publish();
                reply::integer(crate::admin::stats::current_items(&self.shared) as i64, out);
            }
            Call::Flush if self.shared.config.disable_flush_all => {
                out.extend_from_slice(b"-ERR flush_all not allowed\r\n");
            }
            Call::Flush => {
                // Routed to every worker: each empties its own partitions.
                self.flush_local(0, true);
                out.extend_from_slice(reply::OK);
            }
            Call::Key(_) => unreachable!("key commands run in Engine::execute"),
        }
        Exec::Done
    }

    /// MGET (`values`: an array of each key's value or null) or EXISTS (how many are there)
    /// of the frame's keys. Routed after the connection's pending replies
    /// ([`Engine::reach`]): with CREW any worker reads any partition; without it, keys another
    /// worker owns are refused.
    fn resp_keys(&mut self, frame: &Frame<'_>, values: bool, out: &mut Vec<u8>) {
        let keys = frame.args().skip(1);
        if !self.crew && keys.clone().any(|key| !self.owns(self.key(key, None).partition)) {
            out.extend_from_slice(b"-ERR keys of other workers are read only with --access crew\r\n");
            return;
        }
        if values {
            out.push(b'*');
            qs_proto::response::push_u64(out, keys.len() as u64);
            out.extend_from_slice(b"\r\n");
        }
        let mut present = 0;
        let mut scratch = Vec::new();
        for key in keys {
            if key.is_empty() || key.len() > qs_proto::KEY_BYTES_MAX {
                // Never stored here: a miss.
                if values {
                    out.extend_from_slice(reply::NULL);
                }
                continue;
            }
            let key = self.key(key, None);
            if values {
                self.get(key, &Get::default(), Answer::Resp(RespReply::Bulk), out);
            } else {
                scratch.clear();
                self.inspect(key, Answer::Resp(RespReply::Exists), &mut scratch);
                present += i64::from(scratch.as_slice() == b":1\r\n");
            }
        }
        if !values {
            reply::integer(present, out);
        }
    }
}
