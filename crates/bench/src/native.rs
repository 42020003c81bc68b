//! `qs-bench native`: closed-loop load over Quicksilver's native UDP protocol with qs-client
//! (client-assisted direction: each request goes to its partition's port, `--per-datagram`
//! requests per datagram), every GET answer checked, the server's CPU time per request and per
//! datagram from /proc. With `--echo-probe`, the same datagrams (same size, same number in
//! flight) are bounced off a bare recvmmsg/sendmmsg echo server first, pinned to the same cores,
//! so the report can say how close the server comes to what the kernel's UDP path allows.

use crate::cpu::process_cpu_secs;
use crate::workload::{
    value_matches, write_key, write_value, Arrivals, Dataset, Distribution, KeyChooser, Rng,
};
use clap::Args;
use hdrhistogram::Histogram;
use qs_client::native::Datagrams;
use qs_client::{NativeClient, Op, Socket, Status};
use serde::Serialize;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Options of `qs-bench native`.
#[derive(Args, Debug, Clone)]
pub struct NativeArgs {
    /// The server's native base port (partition 0's port).
    #[arg(long, default_value = "127.0.0.1:11300")]
    pub server: SocketAddr,
    /// Key and value sizes.
    #[arg(long, value_enum, default_value_t = Dataset::Tiny)]
    pub dataset: Dataset,
    /// Distinct keys (all loaded before the run).
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Fraction of GETs (the rest are SETs).
    #[arg(long, default_value_t = 0.95)]
    pub get_ratio: f64,
    /// Key distribution.
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    pub dist: Distribution,
    /// Zipf exponent (below 1: YCSB's generator; 1 or more: rejection-inversion).
    #[arg(long, default_value_t = 0.99)]
    pub theta: f64,
    /// Requests per datagram on average: a batch is this many times the partition count
    /// times the window.
    #[arg(long, default_value_t = 32)]
    pub per_datagram: usize,
    /// Datagrams in flight per partition (each batch sends this many to every partition).
    #[arg(long, default_value_t = 1)]
    pub window: usize,
    /// Open loop: offered requests per second (Poisson arrivals); each request's latency counts
    /// from its scheduled time, and a batch takes what is due (at most the closed-loop batch).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Unmeasured seconds first.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// The server's PID, to report its CPU time per request.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Skip loading the keys first.
    #[arg(long)]
    pub no_load: bool,
    /// Also measure a bare recvmmsg/sendmmsg echo server with the same datagrams.
    #[arg(long)]
    pub echo_probe: bool,
    /// Cores the echo server is pinned to (taskset syntax).
    #[arg(long, default_value = "0")]
    pub echo_cores: String,
    /// The client (and the echo probe's client) polls its socket for up to this many
    /// microseconds before sleeping, as MICA's clients poll their NICs: a reply that finds the
    /// client polling needs no wake-up, which on loopback the server's send would pay for.
    /// 0: the client sleeps at once.
    #[arg(long, default_value_t = 0)]
    pub busy_poll_us: u64,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print a JSON line after the table.
    #[arg(long)]
    pub json: bool,
}

/// What a native run measured.
#[derive(Debug, Clone, Serialize)]
pub struct NativeReport {
    /// Dataset.
    pub dataset: Dataset,
    /// GET fraction.
    pub get_ratio: f64,
    /// Partitions (from the directory).
    pub partitions: usize,
    /// Requests per batch.
    pub batch: usize,
    /// Datagrams in flight per partition.
    pub window: usize,
    /// Requests answered in the measured window.
    pub requests: u64,
    /// Requests per second.
    pub requests_per_sec: f64,
    /// Request datagrams sent in the window (retransmissions included).
    pub datagrams: u64,
    /// Requests per datagram.
    pub requests_per_datagram: f64,
    /// GET hit ratio.
    pub hit_ratio: f64,
    /// Answers that were errors or carried another key's value.
    pub wrong: u64,
    /// Requests sent again after a timeout.
    pub retransmitted: u64,
    /// Requests the server redirected (should be 0 with a fresh directory).
    pub redirected: u64,
    /// Offered requests per second (open loop), or none (closed loop).
    pub offered_rate: Option<f64>,
    /// Request latency percentiles, microseconds: sent to answered in a closed loop (every
    /// request of a batch takes the batch's time), scheduled to answered in an open loop.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Server CPU nanoseconds per request (with --server-pid).
    pub server_cpu_ns_per_request: Option<f64>,
    /// Server CPU microseconds per request datagram.
    pub server_cpu_us_per_datagram: Option<f64>,
    /// The echo server's CPU microseconds per datagram (with --echo-probe).
    pub echo_cpu_us_per_datagram: Option<f64>,
    /// Echo datagrams per second.
    pub echo_datagrams_per_sec: Option<f64>,
    /// The server's datagrams per CPU-second over the echo server's.
    pub server_over_echo: Option<f64>,
}

/// Loads every key, in batches.
fn preload(client: &mut NativeClient, args: &NativeArgs) -> io::Result<()> {
    let (key_len, value_len) = args.dataset.sizes();
    let batch = 64 * client.directory().partitions.len() as u64;
    let mut keys = vec![0u8; key_len * batch as usize];
    let mut values = vec![0u8; value_len * batch as usize];
    let mut first = 0;
    while first < args.keys {
        let count = batch.min(args.keys - first) as usize;
        for i in 0..count {
            write_key(first + i as u64, &mut keys[i * key_len..(i + 1) * key_len]);
            write_value(first + i as u64, 0, &mut values[i * value_len..(i + 1) * value_len]);
        }
        let ops: Vec<Op<'_>> = (0..count)
            .map(|i| Op::Set {
                key: &keys[i * key_len..(i + 1) * key_len],
                value: &values[i * value_len..(i + 1) * value_len],
                flags: 0,
                exptime: 0,
                cas: 0,
            })
            .collect();
        for reply in client.execute(&ops) {
            match reply {
                Ok(reply) if reply.status == Status::Ok => {}
                other => return Err(io::Error::other(format!("loading: {other:?}"))),
            }
        }
        first += count as u64;
    }
    Ok(())
}

/// Runs the load (and the echo probe) and reports.
pub fn run(args: &NativeArgs) -> io::Result<NativeReport> {
    let mut client = NativeClient::connect(args.server).map_err(io::Error::other)?;
    client.set_busy_poll(Duration::from_micros(args.busy_poll_us));
    if !args.no_load {
        preload(&mut client, args)?;
    }
    client.set_requests_per_datagram(args.per_datagram.max(1));
    let partitions = client.directory().partitions.len();
    let batch = args.per_datagram.max(1) * partitions * args.window.max(1);
    let (key_len, value_len) = args.dataset.sizes();
    let chooser = KeyChooser::new(args.dist, args.keys, args.theta);
    let mut rng = Rng::new(args.seed);
    let mut keys = vec![0u8; key_len * batch];
    let mut values = vec![0u8; value_len * batch];
    let mut numbers = vec![(0u64, false); batch];
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let (mut requests, mut hits, mut gets, mut wrong) = (0u64, 0u64, 0u64, 0u64);
    let mut version = 1u32;
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let end = measure_from + Duration::from_secs_f64(args.duration);
    let mut measuring = false;
    let mut cpu_start = None;
    let mut stats_start = client.stats();
    let mut measured_from = measure_from;
    let mut arrivals = args.rate.map(|rate| Arrivals::new(rate, args.seed ^ 0x5A5A));
    let mut scheduled: Vec<Instant> = Vec::with_capacity(batch);
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        if !measuring && now >= measure_from {
            measuring = true;
            measured_from = now;
            cpu_start = args.server_pid.and_then(process_cpu_secs);
            stats_start = client.stats();
        }
        let count = match arrivals.as_mut() {
            None => batch,
            Some(arrivals) => {
                // What is due, in arrival order, at most a closed-loop batch at a time; the
                // rest waits and is charged for it.
                scheduled.clear();
                let since = now - start;
                while scheduled.len() < batch {
                    let Some(due) = arrivals.due(since) else { break };
                    scheduled.push(start + due);
                }
                if scheduled.is_empty() {
                    let wait = arrivals.next_at().saturating_sub(since);
                    if wait > Duration::from_micros(300) {
                        std::thread::sleep(wait - Duration::from_micros(200));
                    } else {
                        std::hint::spin_loop();
                    }
                    continue;
                }
                scheduled.len()
            }
        };
        for (i, slot) in numbers[..count].iter_mut().enumerate() {
            let number = chooser.next(&mut rng);
            let get = rng.next_f64() < args.get_ratio;
            *slot = (number, get);
            write_key(number, &mut keys[i * key_len..(i + 1) * key_len]);
            if !get {
                write_value(number, version, &mut values[i * value_len..(i + 1) * value_len]);
            }
        }
        version = version.wrapping_add(1);
        let ops: Vec<Op<'_>> = numbers[..count]
            .iter()
            .enumerate()
            .map(|(i, &(_, get))| {
                let key = &keys[i * key_len..(i + 1) * key_len];
                if get {
                    Op::Get(key)
                } else {
                    let value = &values[i * value_len..(i + 1) * value_len];
                    Op::Set { key, value, flags: 0, exptime: 0, cas: 0 }
                }
            })
            .collect();
        let sent = Instant::now();
        let replies = client.execute(&ops);
        let done = Instant::now();
        if !measuring {
            continue;
        }
        if arrivals.is_some() {
            for at in &scheduled {
                histogram.saturating_record(done.duration_since(*at).as_micros().max(1) as u64);
            }
        } else {
            let micros = done.duration_since(sent).as_micros().max(1) as u64;
            let _ = histogram.record_n(micros, count as u64);
        }
        for (reply, &(number, get)) in replies.iter().zip(&numbers) {
            requests += 1;
            match reply {
                Ok(reply) if get && reply.status == Status::Ok => {
                    gets += 1;
                    hits += 1;
                    wrong += u64::from(!value_matches(number, &reply.value));
                }
                Ok(reply) if get && reply.status == Status::NotFound => gets += 1,
                Ok(reply) if !get && reply.status == Status::Ok => {}
                _ => wrong += 1,
            }
        }
    }
    let secs = measured_from.elapsed().as_secs_f64().min(args.duration.max(1e-9) + 1.0);
    let cpu = match (cpu_start, args.server_pid.and_then(process_cpu_secs)) {
        (Some(before), Some(after)) => Some(after - before),
        _ => None,
    };
    let stats = client.stats();
    let datagrams = stats.datagrams_sent - stats_start.datagrams_sent;
    let server_cpu_ns_per_request = cpu.map(|cpu| cpu * 1e9 / requests.max(1) as f64);
    let server_cpu_us_per_datagram = cpu.map(|cpu| cpu * 1e6 / datagrams.max(1) as f64);
    let mut report = NativeReport {
        dataset: args.dataset,
        get_ratio: args.get_ratio,
        partitions,
        batch,
        window: args.window.max(1),
        requests,
        requests_per_sec: requests as f64 / secs,
        datagrams,
        requests_per_datagram: requests as f64 / datagrams.max(1) as f64,
        hit_ratio: hits as f64 / gets.max(1) as f64,
        wrong,
        retransmitted: stats.retransmitted - stats_start.retransmitted,
        redirected: stats.redirected - stats_start.redirected,
        offered_rate: args.rate,
        p50_us: histogram.value_at_quantile(0.5) as f64,
        p99_us: histogram.value_at_quantile(0.99) as f64,
        p999_us: histogram.value_at_quantile(0.999) as f64,
        server_cpu_ns_per_request,
        server_cpu_us_per_datagram,
        echo_cpu_us_per_datagram: None,
        echo_datagrams_per_sec: None,
        server_over_echo: None,
    };
    if args.echo_probe {
        // The same datagrams: a request datagram's average size, as many in flight.
        let request_bytes = qs_proto::native::REQUEST_BYTES + key_len + value_len;
        let size = qs_proto::native::HEADER_BYTES + request_bytes * args.per_datagram.max(1);
        let (echo_cpu, echo_rate) = udp_echo_probe(args, size, partitions, args.window.max(1))?;
        report.echo_cpu_us_per_datagram = Some(echo_cpu);
        report.echo_datagrams_per_sec = Some(echo_rate);
        report.server_over_echo = server_cpu_us_per_datagram.map(|server| echo_cpu / server);
    }
    Ok(report)
}

/// Bounces `window` datagrams of `size` bytes at a time off each of `sockets` sockets of
/// `qs-bench udp-echo` pinned to the echo cores (the server's layout: one port per partition,
/// `window` datagrams in flight on each, so both read bursts of the same size); returns its CPU
/// microseconds per datagram and datagrams per second.
fn udp_echo_probe(args: &NativeArgs, size: usize, sockets: usize, window: usize) -> io::Result<(f64, f64)> {
    let count = sockets.max(1).to_string();
    let (child, addresses) =
        crate::probe::start_pinned_many(&args.echo_cores, &["udp-echo", "--sockets", &count])?;
    let mut socket = Socket::new(UdpSocket::bind("127.0.0.1:0")?);
    socket.set_busy_poll(Duration::from_micros(args.busy_poll_us));
    let datagram = vec![b'x'; size];
    let batch: Vec<(SocketAddr, &[u8])> = addresses
        .iter()
        .flat_map(|address| std::iter::repeat((*address, datagram.as_slice())).take(window))
        .collect();
    let mut buf = vec![0u8; 65536];
    let pid = child.0.id();
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let end = measure_from + Duration::from_secs_f64(args.duration);
    let (mut measuring, mut cpu_start, mut echoed, mut measured_from) = (false, None, 0u64, measure_from);
    while Instant::now() < end {
        if !measuring && Instant::now() >= measure_from {
            measuring = true;
            measured_from = Instant::now();
            cpu_start = process_cpu_secs(pid);
        }
        // One batch in one call, as qs-client sends its batches.
        socket.send_all(&batch)?;
        for _ in 0..window * addresses.len() {
            if socket.recv_from(&mut buf, Duration::from_millis(50)).is_err() {
                break;
            }
            if measuring {
                echoed += 1;
            }
        }
    }
    let secs = measured_from.elapsed().as_secs_f64();
    let cpu = match (cpu_start, process_cpu_secs(pid)) {
        (Some(before), Some(after)) => after - before,
        _ => return Err(io::Error::other("cannot read the echo server's CPU time")),
    };
    Ok((cpu * 1e6 / echoed.max(1) as f64, echoed as f64 / secs))
}

/// The echo server: `sockets` UDP sockets on 127.0.0.1 (their addresses printed on one line),
/// each read in bursts of up to 32 datagrams with one recvmmsg and answered with one sendmmsg,
/// at most four bursts per socket before the next ready one (as the server serves its ports),
/// waiting in epoll when idle.
pub fn udp_echo_server(sockets: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut poll = mio::Poll::new()?;
    let mut bound = Vec::new();
    for token in 0..sockets.max(1) {
        let mut socket = mio::net::UdpSocket::bind("127.0.0.1:0".parse().expect("an address"))?;
        poll.registry().register(&mut socket, mio::Token(token), mio::Interest::READABLE)?;
        bound.push((socket, false));
    }
    let addresses: Vec<String> = bound
        .iter()
        .map(|(socket, _)| socket.local_addr().map(|a| a.to_string()))
        .collect::<io::Result<_>>()?;
    println!("{}", addresses.join(" "));
    let mut events = mio::Events::with_capacity(64);
    let mut burst = qs_net::Burst::new(32, 65536);
    loop {
        let busy = bound.iter().any(|(_, ready)| *ready);
        poll.poll(&mut events, busy.then_some(Duration::ZERO))?;
        for event in events.iter() {
            bound[event.token().0].1 = true;
        }
        for (socket, ready) in bound.iter_mut().filter(|(_, ready)| *ready) {
            for _ in 0..4 {
                let count = match burst.recv(socket.as_raw_fd()) {
                    Ok(count) => count,
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                        *ready = false;
                        break;
                    }
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                    Err(error) => return Err(error),
                };
                let replies: Vec<(SocketAddr, &[u8])> = (0..count)
                    .filter_map(|slot| {
                        let (bytes, _, peer) = burst.datagram(slot);
                        Some((peer?, bytes))
                    })
                    .collect();
                qs_net::send_burst(socket.as_raw_fd(), &replies)?;
            }
        }
    }
}
