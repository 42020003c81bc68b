//! Where the server listens: memcached's `-p`, `-U` and `-l` turned into addresses.
//!
//! memcached's rules, which service lines and its t/issue_67.t rely on: `-p 0` turns TCP
//! off and `-p -1` picks a free port; `-U` likewise for UDP (off unless given); `-U N`
//! without `-p` moves TCP to port N too. `-l` takes a list separated by `,` or `;` of
//! `host`, `host:port`, `[v6]:port`, `*` (every interface), each optionally prefixed by
//! `proto[ascii|binary|negotiating]:` (that listener's protocol) or `tag[NAME]:`.

use crate::config::Protocol;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

/// A TCP address to listen on (port 0: a free one) and the protocol it speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub addr: SocketAddr,
    pub protocol: Protocol,
    /// `notls:`: plaintext even with -Z.
    pub notls: bool,
    /// `mtls:` (memcached 1.6.45): TLS that requires the client's certificate.
    pub mtls: bool,
}

/// The addresses the command line asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// TCP listeners, in command-line order.
    pub tcp: Vec<Endpoint>,
    /// UDP sockets (port 0: a free one).
    pub udp: Vec<SocketAddr>,
}

impl Plan {
    /// Without -Z: memcached refuses `notls:` and `mtls:` (which 1.6.45 calls "otls" there).
    pub fn refuse_tls_prefixes(&self) -> Result<(), String> {
        for (given, name) in
            [(self.tcp.iter().any(|e| e.notls), "notls"), (self.tcp.iter().any(|e| e.mtls), "otls")]
        {
            if given {
                return Err(format!("'{name}' option is valid only when SSL is enabled"));
            }
        }
        Ok(())
    }

    /// The address UDP, the worker ports and the native ports bind: the first listener's.
    pub fn interface(&self) -> IpAddr {
        self.tcp
            .first()
            .map(|endpoint| endpoint.addr.ip())
            .or_else(|| self.udp.first().map(SocketAddr::ip))
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
    }
}

/// memcached's port numbers: -1 picks a free port, 0 is off.
fn socket_port(port: i32, what: &str) -> Result<Option<u16>, String> {
    match port {
        0 => Ok(None),
        -1 => Ok(Some(0)),
        1..=65535 => Ok(Some(port as u16)),
        _ => Err(format!("failed to listen on {what} port {port}: not a port number")),
    }
}

/// The plan for `-l` specs (already split at commas by clap), TCP port `tcp` and UDP port
/// `udp` in memcached's numbering (the `-U`-moves-TCP rule already applied).
pub fn plan(specs: &[String], tcp: i32, udp: i32, default_protocol: Protocol) -> Result<Plan, String> {
    let tcp = socket_port(tcp, "TCP")?;
    let udp = socket_port(udp, "UDP")?;
    let mut plan = Plan::default();
    for spec in specs.iter().flat_map(|spec| spec.split(';')).filter(|spec| !spec.is_empty()) {
        let Spec { addrs, port, protocol, notls, mtls } = parse_spec(spec)?;
        let protocol = protocol.unwrap_or(default_protocol);
        for ip in addrs {
            if let Some(port) = port.or(tcp) {
                let endpoint = Endpoint { addr: SocketAddr::new(ip, port), protocol, notls, mtls };
                if !plan.tcp.iter().any(|seen| seen.addr == endpoint.addr) {
                    plan.tcp.push(endpoint);
                }
            }
            if let Some(port) = udp.map(|udp| port.unwrap_or(udp)) {
                let addr = SocketAddr::new(ip, port);
                if !plan.udp.contains(&addr) {
                    plan.udp.push(addr);
                }
            }
        }
    }
    Ok(plan)
}

/// One `-l` entry.
struct Spec {
    addrs: Vec<IpAddr>,
    port: Option<u16>,
    protocol: Option<Protocol>,
    notls: bool,
    mtls: bool,
}

/// Strips `name[value]:` from the front of `spec`, returning the value.
fn bracketed<'a>(spec: &mut &'a str, name: &str) -> Result<Option<&'a str>, String> {
    let Some(rest) = spec.strip_prefix(name).and_then(|rest| rest.strip_prefix('[')) else {
        return Ok(None);
    };
    let Some((value, rest)) = rest.split_once(']') else {
        return Err(format!("Invalid {name} spec: \"{spec}\""));
    };
    *spec = rest.strip_prefix(':').unwrap_or(rest);
    Ok(Some(value))
}

fn parse_spec(mut spec: &str) -> Result<Spec, String> {
    // memcached's `notls:`, `btls:` (plain TLS, the default) or `mtls:` (1.6.45) comes
    // first, before `proto[...]:`.
    let mut notls = false;
    let mut mtls = false;
    if let Some(rest) = spec.strip_prefix("notls:") {
        (spec, notls) = (rest, true);
    } else if let Some(rest) = spec.strip_prefix("btls:") {
        spec = rest;
    } else if let Some(rest) = spec.strip_prefix("mtls:") {
        (spec, mtls) = (rest, true);
    }
    let whole = spec;
    let protocol = match bracketed(&mut spec, "proto")? {
        None => None,
        Some("ascii") => Some(Protocol::Ascii),
        Some("binary") => Some(Protocol::Binary),
        Some("negotiating") => Some(Protocol::Auto),
        Some("resp") => Some(Protocol::Resp),
        Some("proxy") => return Err(format!("Server not built with proxy: \"{whole}\"")),
        Some(other) => return Err(format!("Invalid protocol spec: \"{other}\"")),
    };
    if let Some(tag) = bracketed(&mut spec, "tag")? {
        if tag.is_empty() || tag.len() > 8 {
            return Err(format!("Listener tags must be between 1 and 8 characters: \"{tag}\""));
        }
    }
    // "[v6]:port", "v4-or-name:port", a bare v6 address (several colons) or a bare host.
    let (host, port) = if let Some(rest) = spec.strip_prefix('[') {
        let Some((host, rest)) = rest.split_once(']') else {
            return Err(format!("Invalid IPV6 address: \"{spec}\""));
        };
        (host, rest.strip_prefix(':'))
    } else {
        match spec.split_once(':') {
            Some((host, port)) if !port.contains(':') => (host, Some(port)),
            _ => (spec, None),
        }
    };
    let port = match port {
        None => None,
        Some(text) => {
            let number: i32 = text.trim().parse().map_err(|_| format!("Invalid port number: \"{text}\""))?;
            // A listener's own port 0 (or -1) is a free one: it cannot turn itself off.
            Some(socket_port(number, "TCP")?.unwrap_or(0))
        }
    };
    let addrs = if host == "*" {
        vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED), IpAddr::V6(Ipv6Addr::UNSPECIFIED)]
    } else if let Ok(ip) = host.parse::<IpAddr>() {
        vec![ip]
    } else {
        let mut found: Vec<IpAddr> = (host, 0)
            .to_socket_addrs()
            .map_err(|e| format!("getaddrinfo(): {host}: {e}"))?
            .map(|addr| addr.ip())
            .collect();
        found.dedup();
        if found.is_empty() {
            return Err(format!("getaddrinfo(): {host}: no address"));
        }
        found
    };
    Ok(Spec { addrs, port, protocol, notls, mtls })
}

/// memcached's `MEMCACHED_PORT_FILENAME`: once listening, the ports are written there
/// ("TCP INET: 11211", one line per socket) through a `.lck` file renamed into place, so a
/// script that waits for the file reads it whole.
pub fn write_port_file(
    path: &std::path::Path,
    tcp: &[SocketAddr],
    udp: &[SocketAddr],
) -> std::io::Result<()> {
    use std::fmt::Write;
    let mut text = String::new();
    for (kind, addrs) in [("TCP", tcp), ("UDP", udp)] {
        for addr in addrs {
            let family = if addr.is_ipv4() { "INET" } else { "INET6" };
            let _ = writeln!(text, "{kind} {family}: {}", addr.port());
        }
    }
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lck");
    std::fs::write(&lock, text)?;
    std::fs::rename(&lock, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(specs: &[&str], tcp: i32, udp: i32) -> Plan {
        let specs: Vec<String> = specs.iter().map(ToString::to_string).collect();
        plan(&specs, tcp, udp, Protocol::Auto).unwrap()
    }

    fn addrs(plan: &Plan) -> (Vec<String>, Vec<String>) {
        (
            plan.tcp.iter().map(|endpoint| endpoint.addr.to_string()).collect(),
            plan.udp.iter().map(ToString::to_string).collect(),
        )
    }

    #[test]
    fn ports_follow_memcached_numbering() {
        assert_eq!(addrs(&plan_of(&["127.0.0.1"], 11211, 0)), (vec!["127.0.0.1:11211".into()], vec![]));
        assert_eq!(
            addrs(&plan_of(&["127.0.0.1"], -1, -1)),
            (vec!["127.0.0.1:0".into()], vec!["127.0.0.1:0".into()])
        );
        assert_eq!(addrs(&plan_of(&["127.0.0.1"], 0, 5)), (vec![], vec!["127.0.0.1:5".into()]));
        assert!(plan(&["127.0.0.1".into()], 70000, 0, Protocol::Auto).is_err());
        assert!(plan(&["127.0.0.1".into()], -2, 0, Protocol::Auto).is_err());
    }

    #[test]
    fn specs_take_ports_brackets_and_prefixes() {
        let plan = plan_of(
            &["127.0.0.1:7000", "[::1]:7001", "proto[binary]:127.0.0.2", "tag[a]:127.0.0.3;::1"],
            11211,
            0,
        );
        assert_eq!(
            addrs(&plan).0,
            ["127.0.0.1:7000", "[::1]:7001", "127.0.0.2:11211", "127.0.0.3:11211", "[::1]:11211"]
        );
        assert_eq!(plan.tcp[2].protocol, Protocol::Binary);
        assert_eq!(plan.tcp[0].protocol, Protocol::Auto);
        assert_eq!(addrs(&plan_of(&["*"], 11211, 0)).0, ["0.0.0.0:11211", "[::]:11211"]);
        // A host's own port applies to UDP as well, as in memcached.
        assert_eq!(addrs(&plan_of(&["127.0.0.1:7000"], 11211, 9)).1, ["127.0.0.1:7000"]);
        // Repeats are bound once.
        assert_eq!(plan_of(&["127.0.0.1", "127.0.0.1"], 11211, 0).tcp.len(), 1);
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (spec, message) in [
            ("127.0.0.1:x", "Invalid port number"),
            ("[::1:7000", "Invalid IPV6 address"),
            ("proto[quic]:127.0.0.1", "Invalid protocol spec"),
            ("proto[proxy]:127.0.0.1", "Server not built with proxy"),
            ("tag[toolongtag]:127.0.0.1", "Listener tags"),
        ] {
            let error = plan(&[spec.into()], 11211, 0, Protocol::Auto).unwrap_err();
            assert!(error.contains(message), "{spec}: {error}");
        }
    }

    #[test]
    fn port_file_is_written_whole() {
        let dir = std::env::temp_dir().join(format!("qs-ports-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ports");
        let tcp = ["127.0.0.1:7000".parse().unwrap(), "[::1]:7000".parse().unwrap()];
        write_port_file(&path, &tcp, &["127.0.0.1:7001".parse().unwrap()]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "TCP INET: 7000\nTCP INET6: 7000\nUDP INET: 7001\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
