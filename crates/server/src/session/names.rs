//! The names RESP connections give themselves (CLIENT SETNAME, HELLO's SETNAME), kept per
//! worker by descriptor until the connection closes.

/// RESP connections' names by descriptor.
pub type ClientNames = std::collections::HashMap<i32, Box<[u8]>>;

/// The longest name kept: what every connection may hold for its name stays small beside its
/// buffers (redis-server sets no limit; a name is a label such as `web-7`).
pub const NAME_BYTES_MAX: usize = 1024;

/// The refusal of a name over [`NAME_BYTES_MAX`].
const NAME_TOO_LONG: &[u8] = b"-ERR Client names longer than 1024 bytes are not kept\r\n";

/// Names connection `fd` `name` (an empty name clears it), or answers redis-server's refusal
/// of the name: true when named.
pub fn name_client(names: &mut ClientNames, fd: i32, name: &[u8], out: &mut Vec<u8>) -> bool {
    if !qs_proto::resp::connection::client_name_valid(name) {
        out.extend_from_slice(qs_proto::resp::reply::BAD_CLIENT_NAME);
        return false;
    }
    if name.len() > NAME_BYTES_MAX {
        out.extend_from_slice(NAME_TOO_LONG);
        return false;
    }
    if name.is_empty() {
        names.remove(&fd);
    } else {
        names.insert(fd, name.into());
    }
    true
}
