//! twemproxy (nutcracker) in front of servers started by a test: ketama over their ports,
//! memcached's protocol or, with `redis`, Redis's.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A nutcracker process, stopped when dropped; `port` is where it listens.
pub struct Twemproxy {
    child: Child,
    pub port: u16,
}

impl Drop for Twemproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts nutcracker with ketama over `ports` (Redis's protocol with `redis`), its config in
/// `dir`. Ports are picked free, then bound by nutcracker: it is retried if another process
/// took one first.
pub fn start(ports: &[u16], redis: bool, dir: &std::path::Path) -> Twemproxy {
    (0..5)
        .find_map(|_| start_once(ports, redis, dir))
        .expect("nutcracker did not start (scripts/test.sh installs it)")
}

fn start_once(ports: &[u16], redis: bool, dir: &std::path::Path) -> Option<Twemproxy> {
    let (proxy_port, stats_port) = (super::free_port(), super::free_port());
    let mut config = format!(
        "pool:\n  listen: 127.0.0.1:{proxy_port}\n  hash: md5\n  distribution: ketama\n  \
         timeout: 4000\n  auto_eject_hosts: false\n  redis: {redis}\n  servers:\n"
    );
    for port in ports {
        config.push_str(&format!("   - 127.0.0.1:{port}:1\n"));
    }
    let config_path = dir.join("nutcracker.yml");
    std::fs::write(&config_path, config).expect("config");
    let child = Command::new("nutcracker")
        .args(["-c", config_path.to_str().expect("path"), "-s", &stats_port.to_string()])
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot run nutcracker (scripts/test.sh installs it)");
    let mut proxy = Twemproxy { child, port: proxy_port };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", proxy_port)).is_ok() {
            return Some(proxy);
        }
        if let Ok(Some(_)) = proxy.child.try_wait() {
            return None;
        }
        assert!(Instant::now() < deadline, "nutcracker did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}
