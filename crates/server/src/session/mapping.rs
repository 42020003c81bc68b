//! A RESP connection's requests put into its database before they are parsed
//! (qs_proto::resp::db): the requests at the front of its input rewritten in place, each
//! once, up to the first one that may change the database.

use super::Input;
use qs_proto::resp::db::{map, Mapped, Namespaces};
use qs_proto::resp::{frame_of, Framing};

impl Input {
    /// Maps the whole RESP requests after those already mapped into database `db` (of
    /// `databases`), stopping after one that may change it (and at one not all here, or one
    /// the parser refuses). True when one was rewritten. The bytes a rewrite adds (a key's
    /// three-byte prefix and its length's digits) are not asked of the client memory budget:
    /// at most three sevenths more than the request it rewrites, which was.
    pub fn map_databases(&mut self, db: u8, spaces: &dyn Namespaces) -> bool {
        let from = self.start + self.mapped;
        let mut at = from;
        let mut out = Vec::new();
        let mut rewrote = false;
        let mut frame_out = Vec::new();
        while !self.map_fence && at < self.end {
            let Some((framed, len)) = frame_of(&self.buf[at..self.end]) else { break };
            let frame = match framed {
                Ok(frame) => frame,
                Err(Framing::Empty) => {
                    out.extend_from_slice(&self.buf[at..at + len]);
                    at += len;
                    continue;
                }
                Err(Framing::Error(_)) => break,
            };
            frame_out.clear();
            match map(&frame, db, spaces, &mut frame_out) {
                Mapped::Same => out.extend_from_slice(&self.buf[at..at + len]),
                Mapped::Fence => {
                    out.extend_from_slice(&self.buf[at..at + len]);
                    self.map_fence = true;
                }
                Mapped::Rewritten => {
                    out.extend_from_slice(&frame_out);
                    rewrote = true;
                }
            }
            at += len;
        }
        if rewrote {
            // One move of what follows, however many requests were rewritten.
            let (old, new) = (at - from, out.len());
            self.buf.splice(from..at, out);
            self.end = self.end + new - old;
            self.mapped += new;
        } else {
            self.mapped += at - from;
        }
        self.map_next = false;
        rewrote
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(bytes: &[u8]) -> Input {
        let mut input = Input::new(1 << 20);
        input.buf = bytes.to_vec();
        input.buf.extend_from_slice(&[0; 16]);
        input.end = bytes.len();
        input
    }

    #[test]
    fn requests_are_mapped_once_up_to_a_select() {
        let mut input = input(b"GET a\r\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\nSELECT 0\r\nGET c\r\n*1\r\n$4\r\nPI");
        assert!(input.map_databases(1, &16u32));
        let expect = b"*2\r\n$3\r\nGET\r\n$4\r\n\xff\xff\x01a\r\n*2\r\n$3\r\nGET\r\n$4\r\n\xff\xff\x01b\r\nSELECT 0\r\n";
        assert_eq!(&input.buf[..input.mapped], &expect[..]);
        assert!(input.map_fence);
        // Nothing more until the SELECT has run.
        assert!(!input.map_databases(2, &16u32));
        assert_eq!(&input.pending()[input.mapped..], b"GET c\r\n*1\r\n$4\r\nPI");
        input.consume(input.mapped);
        assert!(!input.map_fence);
        assert!(!input.map_databases(0, &16u32));
        assert_eq!(input.mapped, 7, "GET c in database 0 stays as it is; the half request waits");
        input.consume(7);
        assert_eq!(input.pending(), b"*1\r\n$4\r\nPI");
    }
}
