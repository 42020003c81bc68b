//! `qs-bench probe`: what this machine allows, as a reference for server figures. A bare
//! epoll echo server (a child process, pinned with `taskset` like the servers the benchmarks
//! measure) answers fixed-size messages from a closed-loop client over loopback TCP; its CPU
//! time per message is the floor a memcached-protocol server's CPU per operation is compared
//! against: the kernel's TCP work plus the least user work a server can do.

use clap::Args;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use serde::Serialize;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Options of `qs-bench probe`.
#[derive(Args, Debug, Clone)]
pub struct ProbeArgs {
    /// Connections.
    #[arg(long, default_value_t = 50)]
    pub connections: usize,
    /// Message size in bytes (a tiny GET and its reply are about this size).
    #[arg(long, default_value_t = 24)]
    pub message: usize,
    /// Pipeline depths to measure.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 16])]
    pub depths: Vec<usize>,
    /// Measured seconds per depth.
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// Cores the echo server is pinned to (taskset syntax); run the probe itself on others,
    /// e.g. `taskset -c 1 qs-bench probe`.
    #[arg(long, default_value = "0")]
    pub server_cores: String,
    /// Print a JSON line after the table.
    #[arg(long)]
    pub json: bool,
}

/// One measured depth.
#[derive(Debug, Clone, Serialize)]
pub struct EchoFigure {
    /// Messages in flight per connection.
    pub depth: usize,
    /// Messages echoed per second.
    pub messages_per_sec: f64,
    /// Echo server user+system CPU microseconds per message.
    pub server_cpu_us_per_message: f64,
}

/// What the probe measured.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    /// Connections.
    pub connections: usize,
    /// Message bytes.
    pub message: usize,
    /// One entry per depth.
    pub tcp_echo: Vec<EchoFigure>,
}

/// Runs the echo server on `listener` until the process is killed: read what arrived, write it
/// back, one read and one write per readable connection (a short read means drained).
pub fn echo_server(listener: std::net::TcpListener) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let mut poll = Poll::new()?;
    poll.registry().register(&mut listener, Token(usize::MAX), Interest::READABLE)?;
    let mut conns: Vec<TcpStream> = Vec::new();
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        poll.poll(&mut events, None)?;
        for event in events.iter() {
            if event.token() == Token(usize::MAX) {
                while let Ok((mut stream, _)) = listener.accept() {
                    stream.set_nodelay(true)?;
                    poll.registry().register(&mut stream, Token(conns.len()), Interest::READABLE)?;
                    conns.push(stream);
                }
                continue;
            }
            let stream = &mut conns[event.token().0];
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        stream.write_all(&buf[..n])?;
                        if n < buf.len() {
                            break;
                        }
                    }
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                    Err(error) => return Err(error),
                }
            }
        }
    }
}

/// Kills the echo child however the probe ends.
struct EchoChild(Child);

impl Drop for EchoChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `qs-bench probe-echo` pinned to `cores` and returns it with its address.
fn start_echo(cores: &str) -> io::Result<(EchoChild, SocketAddr)> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new("taskset")
        .args(["-c", cores])
        .arg(exe)
        .arg("probe-echo")
        .stdout(Stdio::piped())
        .spawn()
        .map(EchoChild)?;
    // The child prints its address on its first line.
    let mut stdout =
        child.0.stdout.take().ok_or_else(|| io::Error::other("no stdout from the echo server"))?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while stdout.read(&mut byte)? == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let address = String::from_utf8_lossy(&line).trim().parse().map_err(|_| {
        io::Error::other(format!("the echo server said {:?}", String::from_utf8_lossy(&line)))
    })?;
    Ok((child, address))
}

/// Closed-loop echo load: `depth` messages in flight on each connection for `duration`.
fn echo_load(address: SocketAddr, pid: u32, args: &ProbeArgs, depth: usize) -> io::Result<EchoFigure> {
    let mut poll = Poll::new()?;
    let mut conns = Vec::new();
    let message = vec![b'x'; args.message];
    for index in 0..args.connections {
        let stream = std::net::TcpStream::connect(address)?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        let mut stream = TcpStream::from_std(stream);
        poll.registry().register(&mut stream, Token(index), Interest::READABLE)?;
        conns.push((stream, 0usize));
    }
    let burst = message.repeat(depth);
    for (stream, _) in &mut conns {
        stream.write_all(&burst)?;
    }
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 64 << 10];
    let warmup_end = Instant::now() + Duration::from_millis(500);
    let end = warmup_end + Duration::from_secs_f64(args.duration);
    let mut measuring = None;
    let mut messages = 0u64;
    loop {
        let now = Instant::now();
        if measuring.is_none() && now >= warmup_end {
            measuring = Some(crate::load::process_cpu_secs(pid));
            messages = 0;
        }
        if now >= end {
            break;
        }
        poll.poll(&mut events, Some(Duration::from_millis(10)))?;
        for event in events.iter() {
            let (stream, partial) = &mut conns[event.token().0];
            let mut echoed = 0;
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => return Err(io::Error::other("the echo server closed a connection")),
                    Ok(n) => {
                        *partial += n;
                        echoed += *partial / args.message;
                        *partial %= args.message;
                    }
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                    Err(error) => return Err(error),
                }
            }
            if echoed > 0 {
                messages += echoed as u64;
                stream.write_all(&message.repeat(echoed))?;
            }
        }
    }
    let cpu_start = measuring.flatten();
    let cpu_end = crate::load::process_cpu_secs(pid);
    let cpu = match (cpu_start, cpu_end) {
        (Some(a), Some(b)) => b - a,
        _ => return Err(io::Error::other("cannot read the echo server's CPU time from /proc")),
    };
    Ok(EchoFigure {
        depth,
        messages_per_sec: messages as f64 / args.duration,
        server_cpu_us_per_message: cpu * 1e6 / messages.max(1) as f64,
    })
}

/// Runs the probe.
pub fn run(args: &ProbeArgs) -> io::Result<ProbeReport> {
    let mut tcp_echo = Vec::new();
    for &depth in &args.depths {
        // A fresh server per depth, so one depth's connections do not linger into the next.
        let (child, address) = start_echo(&args.server_cores)?;
        tcp_echo.push(echo_load(address, child.0.id(), args, depth)?);
    }
    Ok(ProbeReport { connections: args.connections, message: args.message, tcp_echo })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_echo_server_echoes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || echo_server(listener));
        let mut client = std::net::TcpStream::connect(address).unwrap();
        client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        client.write_all(b"hello, echo").unwrap();
        let mut reply = [0u8; 11];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"hello, echo");
    }
}
