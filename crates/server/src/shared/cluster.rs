//! ElastiCache-style cluster discovery (`-o cluster_config=FILE`): `config get cluster` answers
//! the fleet's nodes and a version that grows each time the list changes, as AWS's cluster
//! clients poll it; the file is read again on SIGHUP or `config reload cluster`.
//!
//! The file lists one node a line, as ElastiCache writes them (`host|ip|port`) or as
//! `host:port`; blank lines and lines starting with `#` are skipped.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Mutex;

/// The fleet as last read, and its version.
#[derive(Debug, Default)]
struct Fleet {
    version: u64,
    nodes: Vec<String>,
}

/// Cluster discovery's state: off without a fleet file.
#[derive(Debug, Default)]
pub struct Cluster {
    path: Option<PathBuf>,
    fleet: Mutex<Fleet>,
}

/// The nodes of a fleet file's text, each as `host|ip|port`.
pub fn parse(text: &str) -> Result<Vec<String>, String> {
    let mut nodes = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || format!("line {}: {line:?} is neither host|ip|port nor host:port", number + 1);
        let (host, ip, port) = match line.split('|').collect::<Vec<_>>()[..] {
            [host, ip, port] => (host, ip.to_string(), port),
            [one] => {
                let (host, port) = one.rsplit_once(':').ok_or_else(bad)?;
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let ip = host.parse::<IpAddr>().map(|ip| ip.to_string()).unwrap_or_default();
                (host, ip, port)
            }
            _ => return Err(bad()),
        };
        if host.is_empty() || host.contains(char::is_whitespace) || port.parse::<u16>().is_err() {
            return Err(bad());
        }
        nodes.push(format!("{host}|{ip}|{port}"));
    }
    Ok(nodes)
}

impl Cluster {
    /// Reads the fleet file, if one is given (a file that cannot be read or parsed refuses the
    /// start); its version starts at 1.
    pub fn load(path: Option<PathBuf>) -> Result<Cluster, String> {
        let cluster = Cluster { path, fleet: Mutex::default() };
        if cluster.path.is_some() {
            cluster.reload()?;
        }
        Ok(cluster)
    }

    /// Whether a fleet file was given.
    pub fn enabled(&self) -> bool {
        self.path.is_some()
    }

    /// Reads the fleet file again; the version grows when the list changed. Whether it changed;
    /// on an error the fleet stays as it was.
    pub fn reload(&self) -> Result<bool, String> {
        let Some(path) = &self.path else { return Err("no cluster_config".into()) };
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cluster_config {}: {error}", path.display()))?;
        let nodes = parse(&text).map_err(|error| format!("cluster_config {}: {error}", path.display()))?;
        let mut fleet = self.fleet.lock().unwrap_or_else(|e| e.into_inner());
        if fleet.version > 0 && fleet.nodes == nodes {
            return Ok(false);
        }
        fleet.version += 1;
        fleet.nodes = nodes;
        Ok(true)
    }

    /// The reply to `config get cluster` (`reload`: `config reload cluster`); memcached's
    /// `ERROR` without a fleet file.
    pub fn answer(&self, reload: bool, out: &mut Vec<u8>) {
        if !self.enabled() {
            out.extend_from_slice(b"ERROR\r\n");
            return;
        }
        if reload {
            match self.reload() {
                Ok(_) => out.extend_from_slice(b"OK\r\n"),
                Err(error) => out.extend_from_slice(format!("SERVER_ERROR {error}\r\n").as_bytes()),
            }
            return;
        }
        let fleet = self.fleet.lock().unwrap_or_else(|e| e.into_inner());
        let body = format!("{}\n{}\n", fleet.version, fleet.nodes.join(" "));
        out.extend_from_slice(format!("CONFIG cluster 0 {}\r\n{body}\r\nEND\r\n", body.len()).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_of_a_node_are_read() {
        let nodes = parse("# the fleet\n\ncache-1.example|10.0.0.1|11211\n127.0.0.1:11212\n  cache-3:11213  \n[::1]:11214\n")
            .unwrap();
        assert_eq!(
            nodes,
            [
                "cache-1.example|10.0.0.1|11211",
                "127.0.0.1|127.0.0.1|11212",
                "cache-3||11213",
                "::1|::1|11214"
            ]
        );
        assert!(parse("cache-1 11211\n").is_err());
        assert!(parse("a|b\n").is_err());
        assert!(parse("host:port\n").is_err());
        assert!(parse("|10.0.0.1|11211\n").is_err());
    }

    #[test]
    fn the_version_grows_only_when_the_fleet_changes() {
        let path = std::env::temp_dir().join(format!("qs-fleet-{}", std::process::id()));
        std::fs::write(&path, "127.0.0.1:11211\n").unwrap();
        let cluster = Cluster::load(Some(path.clone())).unwrap();
        let answer = |reload| {
            let mut out = Vec::new();
            cluster.answer(reload, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(answer(false), "CONFIG cluster 0 28\r\n1\n127.0.0.1|127.0.0.1|11211\n\r\nEND\r\n");
        assert_eq!(answer(true), "OK\r\n");
        assert!(answer(false).contains("\r\n1\n"));
        std::fs::write(&path, "127.0.0.1:11211\n127.0.0.1:11212\n").unwrap();
        assert!(cluster.reload().unwrap());
        assert!(answer(false).contains("\r\n2\n127.0.0.1|127.0.0.1|11211 127.0.0.1|127.0.0.1|11212\n\r\nEND"));
        std::fs::write(&path, "not a node\n").unwrap();
        assert!(answer(true).starts_with("SERVER_ERROR cluster_config"));
        assert!(answer(false).contains("\r\n2\n"), "a bad file keeps the fleet");
        std::fs::remove_file(&path).unwrap();
        let mut out = Vec::new();
        Cluster::default().answer(false, &mut out);
        assert_eq!(out, b"ERROR\r\n");
    }
}
