//! Redis's CLIENT LIST, CLIENT INFO and CLIENT KILL over the connection registry: the RESP
//! listeners' connections, a line each in redis-server 7.0's fields, and killing by its
//! filters. A connection's id is its registry entry's, never reused (CLIENT ID's answer).
//!
//! What a connection holds in its buffers is its worker's alone, so the memory fields
//! (qbuf, argv-mem, obl, tot-mem...) are 0 here, and the last command is known only for the
//! asking connection (`NULL` for the others, as redis-server writes for a connection that
//! has sent none).

use super::registry::{Addr, Info, Kind, Registry};
use qs_proto::resp::connection::Clients;
use std::fmt::Write as _;
use std::net::SocketAddr;

/// An address as redis-server writes a connection's: `ip:port`, `[ipv6]:port`... as
/// getClientPeerId does (`ip:port` for both families), a UNIX socket as `path:0`.
fn redis_addr(addr: &Addr) -> String {
    match addr {
        Addr::Inet(SocketAddr::V4(v4)) => format!("{}:{}", v4.ip(), v4.port()),
        Addr::Inet(SocketAddr::V6(v6)) => format!("{}:{}", v6.ip(), v6.port()),
        Addr::Unix(path) => {
            format!("{}:0", path.as_deref().map(|p| p.display().to_string()).unwrap_or_default())
        }
    }
}

/// Whether connection `fd` is one of `clients` (`asking`: the connection that asked).
fn picked(fd: i32, info: &Info, clients: &Clients<'_>, asking: i32) -> bool {
    let is_addr = |want: Option<&[u8]>, addr: Option<&Addr>| {
        want.map_or(true, |want| addr.is_some_and(|addr| redis_addr(addr).as_bytes() == want))
    };
    info.kind == Kind::Client
        && info.resp() != 0
        && !info.killed.load(std::sync::atomic::Ordering::Relaxed)
        && !clients.other_type
        && !(clients.skip_me && fd == asking)
        && clients.ids.as_ref().map_or(true, |ids| ids.contains(&info.id))
        && is_addr(clients.addr, Some(&info.addr))
        && is_addr(clients.laddr, info.local.as_ref())
        && clients.user.map_or(true, |user| user == b"default")
}

/// One connection's line, as clientcmd's catClientInfoString writes it (with its `\n`).
fn line(fd: i32, info: &Info, (now_secs, asking, command): (u32, i32, &str), out: &mut String) {
    let local = info.local.as_ref().map(redis_addr).unwrap_or_default();
    let name = String::from_utf8_lossy(&info.name()).into_owned();
    let cmd = if fd == asking { command } else { "NULL" };
    let _ = writeln!(
        out,
        "id={} addr={} laddr={local} fd={fd} name={name} age={} idle={} flags=N db={} sub=0 psub=0 \
         ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 \
         tot-mem=0 events=r cmd={cmd} user=default redir=-1 resp={}",
        info.id,
        redis_addr(&info.addr),
        now_secs.saturating_sub(info.created_secs),
        info.idle_secs(now_secs),
        info.db(),
        info.resp(),
    );
}

/// CLIENT LIST's text: the RESP connections `clients` picks (by descriptor, or in the order
/// of LIST's IDs), as connection `asking` sees them at `now_secs`.
pub fn list(registry: &Registry, clients: &Clients<'_>, (now_secs, asking): (u32, i32)) -> String {
    let mut text = String::new();
    let at = (now_secs, asking, "client|list");
    match &clients.ids {
        Some(ids) => {
            let mut by_id = std::collections::HashMap::new();
            registry.for_each(|fd, info| {
                if picked(fd, info, clients, asking) {
                    let mut one = String::new();
                    line(fd, info, at, &mut one);
                    by_id.insert(info.id, one);
                }
            });
            for id in ids {
                if let Some(one) = by_id.remove(id) {
                    text.push_str(&one);
                }
            }
        }
        None => registry.for_each(|fd, info| {
            if picked(fd, info, clients, asking) {
                line(fd, info, at, &mut text);
            }
        }),
    }
    text
}

/// CLIENT INFO's text: connection `asking`'s line.
pub fn info(registry: &Registry, (now_secs, asking): (u32, i32)) -> String {
    let mut text = String::new();
    if let Some(info) = registry.get(asking) {
        line(asking, &info, (now_secs, asking, "client|info"), &mut text);
    }
    text
}

/// CLIENT KILL: ends the connections `clients` picks other than `asking` by shutting their
/// sockets down (each one's worker then sees its end and closes it, as for a client that
/// left); the count, and whether `asking` is picked too (it closes after its reply).
pub fn kill(registry: &Registry, clients: &Clients<'_>, asking: i32) -> (usize, bool) {
    let (mut killed, mut itself) = (0, false);
    registry.for_each(|fd, info| {
        if !picked(fd, info, clients, asking) {
            return;
        }
        killed += 1;
        info.killed.store(true, std::sync::atomic::Ordering::Relaxed);
        if fd == asking {
            itself = true;
        } else {
            // SAFETY: shutdown takes no pointers. `fd` is open: the registry is held, and a
            // worker removes a socket from it before closing the socket, so the number has
            // not been reused for another file.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    });
    (killed, itself)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn resp_client(peer: &str, now_secs: u32) -> Arc<Info> {
        let local: SocketAddr = "127.0.0.1:6379".parse().unwrap();
        let info =
            Info::new(Kind::Client, Addr::Inet(peer.parse().unwrap()), Some(Addr::Inet(local)), now_secs);
        info.set_resp(2);
        Arc::new(info)
    }

    #[test]
    fn lists_resp_connections_in_redis_servers_fields_and_picks_by_its_filters() {
        let registry = Registry::default();
        let first = resp_client("127.0.0.1:40000", 100);
        let first_id = first.id;
        registry.add(7, first);
        let other = resp_client("127.0.0.1:40001", 90);
        let other_id = other.id;
        assert!(other_id > first_id, "ids are counted up");
        other.set_name(b"web");
        other.set_resp(3);
        registry.add(9, other);
        // A memcached connection is not a Redis client.
        let local: SocketAddr = "127.0.0.1:11211".parse().unwrap();
        let peer: SocketAddr = "127.0.0.1:40002".parse().unwrap();
        registry.add(11, Arc::new(Info::new(Kind::Client, Addr::Inet(peer), Some(Addr::Inet(local)), 90)));
        let all = list(&registry, &Clients::default(), (102, 7));
        let lines: Vec<&str> = all.lines().collect();
        assert_eq!(lines.len(), 2, "{all}");
        let expected = format!(
            "id={first_id} addr=127.0.0.1:40000 laddr=127.0.0.1:6379 fd=7 name= age=2 idle=2 flags=N db=0"
        );
        assert!(lines[0].starts_with(&expected), "{}", lines[0]);
        assert!(lines[0].ends_with("cmd=client|list user=default redir=-1 resp=2"), "{}", lines[0]);
        assert!(
            lines[1].contains(" name=web age=12 ")
                && lines[1].contains("cmd=NULL")
                && lines[1].ends_with("resp=3")
        );
        let by_id = Clients { ids: Some(vec![other_id, other_id + 1000, first_id]), ..Clients::default() };
        let text = list(&registry, &by_id, (102, 7));
        let (first_line, other_line) = (format!("\nid={first_id} "), format!("id={other_id} "));
        assert!(
            text.starts_with(&other_line) && text.contains(&first_line) && text.ends_with('\n'),
            "{text}"
        );
        let by_addr = Clients { addr: Some(b"127.0.0.1:40001"), skip_me: true, ..Clients::default() };
        assert_eq!(list(&registry, &by_addr, (102, 7)).lines().count(), 1);
        let pubsub = Clients { other_type: true, ..Clients::default() };
        assert_eq!(list(&registry, &pubsub, (102, 7)), "");
        assert!(info(&registry, (102, 9)).contains("cmd=client|info"));
        // Only the asking connection picked: it is not shut down here, it closes after its reply.
        let me = Clients { ids: Some(vec![first_id]), ..Clients::default() };
        assert_eq!(kill(&registry, &me, 7), (1, true));
    }
}
