//! A command packed to travel to another thread ([`Command::pack`]): its byte slices (key,
//! value, and a meta command's key token and flags) are copied into a buffer and become spans
//! of it, the rest travels as plain values, so the receiver runs the command without parsing
//! anything again ([`Packed::unpack`]).

use crate::command::{Answer, Command, Op, Store};
use crate::request::{Meta, MetaCommand, MetaOptions};

/// Where a slice lies in the bytes a command was packed into: start and length.
pub type Span = (u32, u32);

/// A packed command: plain values, and spans of the bytes it was packed into.
#[derive(Clone, Copy, Debug)]
pub struct Packed {
    key: Span,
    /// The operation, a store's value left empty (it is `data`).
    op: Op<'static>,
    data: Span,
    answer: PackedAnswer,
}

/// An [`Answer`] with a meta command's slices as spans.
#[derive(Clone, Copy, Debug)]
enum PackedAnswer {
    Text { noreply: bool, with_cas: bool },
    Binary { opcode: u8, opaque: [u8; 4], quiet: bool, with_key: bool },
    Meta { command: MetaCommand, key_token: Span, flags_line: Span, options: MetaOptions, value_len: usize },
    Resp(crate::command::RespReply),
}

impl Command<'_> {
    /// Appends the command's slices to `bytes` and returns the command with their spans,
    /// counted from where it started appending.
    pub fn pack(&self, bytes: &mut Vec<u8>) -> Packed {
        let base = bytes.len();
        let mut put = |slice: &[u8]| -> Span {
            let start = bytes.len() - base;
            bytes.extend_from_slice(slice);
            (start as u32, slice.len() as u32)
        };
        let key = put(self.key);
        let (op, data) = match self.op {
            Op::Store(store) => (Op::Store(Store { data: &[], ..store }), put(store.data)),
            Op::Get(get) => (Op::Get(get), (0, 0)),
            Op::TooLarge { drops } => (Op::TooLarge { drops }, (0, 0)),
            Op::Delete(delete) => (Op::Delete(delete), (0, 0)),
            Op::Arith(arith) => (Op::Arith(arith), (0, 0)),
            Op::Count { by } => (Op::Count { by }, (0, 0)),
            Op::Touch { exptime, read } => (Op::Touch { exptime, read }, (0, 0)),
            Op::Inspect => (Op::Inspect, (0, 0)),
        };
        let answer = match self.answer {
            Answer::Text { noreply, with_cas } => PackedAnswer::Text { noreply, with_cas },
            Answer::Binary { opcode, opaque, quiet, with_key } => {
                PackedAnswer::Binary { opcode, opaque, quiet, with_key }
            }
            Answer::Resp(reply) => PackedAnswer::Resp(reply),
            Answer::Meta(meta) => PackedAnswer::Meta {
                command: meta.command,
                key_token: put(meta.key_token),
                flags_line: put(meta.flags_line),
                options: meta.options,
                value_len: meta.value_len,
            },
        };
        Packed { key, op, data, answer }
    }
}

impl Packed {
    /// The command again, its slices in `bytes` (what [`Command::pack`] appended, from where it
    /// started); a meta command's request is rebuilt in `meta`.
    pub fn unpack<'b>(&self, bytes: &'b [u8], meta: &'b mut Option<Meta<'b>>) -> Command<'b> {
        let at = |(start, len): Span| &bytes[start as usize..][..len as usize];
        let op = match self.op {
            Op::Store(store) => Op::Store(Store { data: at(self.data), ..store }),
            other => other,
        };
        let answer = match self.answer {
            PackedAnswer::Text { noreply, with_cas } => Answer::Text { noreply, with_cas },
            PackedAnswer::Binary { opcode, opaque, quiet, with_key } => {
                Answer::Binary { opcode, opaque, quiet, with_key }
            }
            PackedAnswer::Meta { command, key_token, flags_line, options, value_len } => {
                let data = if let Op::Store(store) = op { store.data } else { &[] };
                let rebuilt = Meta {
                    command,
                    key_token: at(key_token),
                    // The command's key is the decoded one: the reply needs only the token.
                    decoded: None,
                    flags_line: at(flags_line),
                    value_len,
                    options,
                    data,
                };
                Answer::Meta(meta.insert(rebuilt))
            }
            PackedAnswer::Resp(reply) => Answer::Resp(reply),
        };
        Command { key: at(self.key), op, answer }
    }

    /// The key's span.
    pub fn key(&self) -> Span {
        self.key
    }
}

#[cfg(test)]
mod tests {
    use crate::{parse, Limits, Parsed};

    /// Every dialect's command comes back from its packed form as it went in, and its reply
    /// is the same.
    #[test]
    fn a_command_unpacks_as_it_was_packed() {
        let limits = Limits::default();
        let frames: Vec<Vec<u8>> = vec![
            b"set k 5 10 3 noreply\r\nabc\r\n".to_vec(),
            b"delete k\r\n".to_vec(),
            b"ms a2V5 2 b T5 F3 k O9 c MA N7\r\nhi\r\n".to_vec(),
            b"mg k v t T30 N30 k O1 q\r\n".to_vec(),
            b"ma k D5 N0 J3 v t\r\n".to_vec(),
            crate::binary::request_frame(crate::binary::opcode::APPENDQ, 7, 9, &[], b"key", b"value"),
            crate::binary::request_frame(crate::binary::opcode::GATK, 7, 0, &5u32.to_be_bytes(), b"key", b""),
        ];
        for frame in &frames {
            let parse = if frame[0] == crate::binary::REQUEST_MAGIC { crate::binary::parse } else { parse };
            let Parsed::Request { request, .. } = parse(frame, &limits) else { panic!("{frame:?}") };
            let command = request.key_command(&limits).expect("a command on a key");
            let mut bytes = b"before".to_vec();
            let packed = command.pack(&mut bytes);
            let mut meta = None;
            let unpacked = packed.unpack(&bytes[6..], &mut meta);
            assert_eq!((unpacked.key, unpacked.op), (command.key, command.op), "{frame:?}");
            let outcome = qs_store::Outcome::Stored { cas: 3 };
            let (mut want, mut got) = (Vec::new(), Vec::new());
            command.answer.store(&outcome, (3, 2, crate::StoreMode::Set), &mut want);
            unpacked.answer.store(&outcome, (3, 2, crate::StoreMode::Set), &mut got);
            assert_eq!(got, want, "{frame:?}");
            let (mut want, mut got) = (Vec::new(), Vec::new());
            command.answer.miss(command.key, &mut want);
            unpacked.answer.miss(unpacked.key, &mut got);
            assert_eq!(got, want, "{frame:?}");
        }
    }
}
