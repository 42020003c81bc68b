//! The names RESP connections give themselves (CLIENT SETNAME, HELLO's SETNAME), kept in
//! the connection's registry entry (CLIENT LIST shows them) until it closes.

use crate::observe::registry::Info;

/// The longest name kept: what every connection may hold for its name stays small beside its
/// buffers (redis-server sets no limit; a name is a label such as `web-7`).
pub const NAME_BYTES_MAX: usize = 1024;

/// The refusal of a name over [`NAME_BYTES_MAX`].
const NAME_TOO_LONG: &[u8] = b"-ERR Client names longer than 1024 bytes are not kept\r\n";

/// Names the connection whose entry is `info` `name` (an empty name clears it), or answers
/// redis-server's refusal of the name: true when named (or when the connection has no entry,
/// which only a connection already closing lacks).
pub fn name_client(info: Option<&Info>, name: &[u8], out: &mut Vec<u8>) -> bool {
    if !qs_proto::resp::connection::client_name_valid(name) {
        out.extend_from_slice(qs_proto::resp::reply::BAD_CLIENT_NAME);
        return false;
    }
    if name.len() > NAME_BYTES_MAX {
        out.extend_from_slice(NAME_TOO_LONG);
        return false;
    }
    if let Some(info) = info {
        info.set_name(name);
    }
    true
}
