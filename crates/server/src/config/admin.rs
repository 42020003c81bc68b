//! The admin plane's options: the HTTP listener's `-o metrics_port=PORT` (on -l's first
//! address) and `-o metrics_listen=HOST:PORT` (an address of its own; neither given: no
//! listener), cluster discovery's fleet file, `-o cluster_config=FILE`, and warming from a live
//! node, `--warm-from HOST:PORT` (or `-o warm_from=`) at `-o warm_rate=MB` a second.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};

/// Where the admin HTTP listener binds, and the fleet file, as the options say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `metrics_port`: the port, on the first TCP listener's address.
    pub port: Option<u16>,
    /// `metrics_listen`: an address of its own (wins over `metrics_port`).
    pub listen: Option<SocketAddr>,
    /// `cluster_config`: the fleet file `config get cluster` serves.
    pub cluster_config: Option<std::path::PathBuf>,
    /// `warm_from` (`--warm-from`): the live node to copy items from at start, as given.
    pub warm_from: Option<String>,
    /// `warm_rate`: value bytes a second that warming copies at most (0: no limit).
    pub warm_rate: u64,
}

/// Warming's rate unless `-o warm_rate` says otherwise: 32 MB of values a second, a GiB in
/// about half a minute (docs/BENCHMARKS.md, "Replacing a node").
pub const WARM_RATE_DEFAULT: u64 = 32 << 20;

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            port: None,
            listen: None,
            cluster_config: None,
            warm_from: None,
            warm_rate: WARM_RATE_DEFAULT,
        }
    }
}

impl Settings {
    /// Takes the option `name` if it is one of these: `Ok(true)`.
    pub fn option(&mut self, name: &str, value: Option<&str>) -> Result<bool, String> {
        match name {
            "metrics_port" => {
                let value = value.ok_or("Missing numeric argument for metrics_port")?;
                self.port =
                    Some(value.trim().parse::<u16>().map_err(|_| format!("metrics_port: bad port {value}"))?);
            }
            "metrics_listen" => {
                let value = value.ok_or("Missing argument for metrics_listen (HOST:PORT)")?;
                let addr = value
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut addrs| addrs.next())
                    .ok_or_else(|| format!("metrics_listen: {value} is not HOST:PORT"))?;
                self.listen = Some(addr);
            }
            "cluster_config" => {
                let value = value
                    .filter(|value| !value.is_empty())
                    .ok_or("Missing argument for cluster_config (FILE)")?;
                self.cluster_config = Some(value.into());
            }
            "warm_from" => self.warm_from = Some(warm_source(value)?),
            "warm_rate" => {
                let value = value.ok_or("Missing numeric argument for warm_rate (MB a second)")?;
                let megabytes =
                    value.trim().parse::<u64>().map_err(|_| format!("warm_rate: bad number {value}"))?;
                self.warm_rate = megabytes.saturating_mul(1 << 20);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The address to bind, given the first TCP listener's (`None`: no listener asked for).
    pub fn addr(&self, first_tcp: Option<SocketAddr>) -> Option<SocketAddr> {
        if let Some(addr) = self.listen {
            return Some(addr);
        }
        let ip = first_tcp.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |addr| addr.ip());
        self.port.map(|port| SocketAddr::new(ip, port))
    }
}

/// `--warm-from`'s value: HOST:PORT, checked for its form (resolved when warming starts).
pub fn warm_source(value: Option<&str>) -> Result<String, String> {
    let value = value.unwrap_or_default().trim();
    match value.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|port| port > 0) => {
            Ok(value.to_string())
        }
        _ => Err(format!("warm_from: {value:?} is not HOST:PORT")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_follows_the_first_listener_and_an_address_of_its_own_wins() {
        let mut settings = Settings::default();
        assert_eq!(settings.addr(None), None);
        assert!(settings.option("metrics_port", Some("9150")).unwrap());
        let first: SocketAddr = "127.0.0.2:11211".parse().unwrap();
        assert_eq!(settings.addr(Some(first)), Some("127.0.0.2:9150".parse().unwrap()));
        assert_eq!(settings.addr(None), Some("0.0.0.0:9150".parse().unwrap()));
        assert!(settings.option("metrics_listen", Some("127.0.0.1:9999")).unwrap());
        assert_eq!(settings.addr(Some(first)), Some("127.0.0.1:9999".parse().unwrap()));
        assert!(settings.option("metrics_port", Some("x")).is_err());
        assert!(settings.option("metrics_listen", Some("nowhere")).is_err());
        assert!(!settings.option("other", None).unwrap());
        assert!(settings.option("cluster_config", Some("/etc/fleet")).unwrap());
        assert_eq!(settings.cluster_config.as_deref(), Some(std::path::Path::new("/etc/fleet")));
        assert!(settings.option("cluster_config", None).is_err());
    }

    #[test]
    fn warming_takes_a_host_and_port_and_a_rate_in_megabytes() {
        let mut settings = Settings::default();
        assert_eq!(settings.warm_rate, WARM_RATE_DEFAULT);
        assert!(settings.option("warm_from", Some("cache-3.internal:11211")).unwrap());
        assert_eq!(settings.warm_from.as_deref(), Some("cache-3.internal:11211"));
        assert!(settings.option("warm_from", Some("[::1]:11211")).is_ok());
        for bad in ["", "host", "host:", ":11211", "host:0", "host:port"] {
            assert!(settings.option("warm_from", Some(bad)).is_err(), "{bad}");
        }
        assert!(settings.option("warm_rate", Some("0")).unwrap());
        assert_eq!(settings.warm_rate, 0);
        assert!(settings.option("warm_rate", Some("8")).unwrap());
        assert_eq!(settings.warm_rate, 8 << 20);
        assert!(settings.option("warm_rate", Some("fast")).is_err());
    }
}
