//! `qs-bench probe`: what this machine allows, as a reference for server figures. A bare
//! epoll echo server (a child process, pinned with `taskset` like the servers the benchmarks
//! measure) answers fixed-size messages from a closed-loop client over loopback TCP; its CPU
//! time per message is the floor a memcached-protocol server's CPU per operation is compared
//! against: the kernel's TCP work plus the least user work a server can do.
//!
//! The echo server comes in two kinds: epoll readiness with one read and one write per
//! ready connection, and io_uring completions with a receive always posted on every
//! connection and one `io_uring_enter` per loop turn submitting every send and re-posted
//! receive at once — the two ways a server can drive the kernel's sockets.
//!
//! Over UDP the same is measured with a bare echo server reading one datagram per `recvfrom`
//! and answering with one `sendto` (plain, as memcached's UDP does) or reading and answering up
//! to 32 per `recvmmsg`/`sendmmsg` (batched, as quicksilver's native port does). And memory:
//! DRAM random-access latency (one chain of dependent loads over a large region) and throughput
//! (16 independent chains, as a prefetching batch keeps in flight), on the same kind of pages
//! the engine gets.

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
    /// Echo server kinds to measure.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [EchoIo::Epoll, EchoIo::Uring, EchoIo::UringMultishot])]
    pub io: Vec<EchoIo>,
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
    /// UDP echo kinds to measure (none: a bare `--udp`).
    #[arg(long, value_enum, value_delimiter = ',', num_args = 0.., default_values_t = [UdpEcho::Plain, UdpEcho::Batched])]
    pub udp: Vec<UdpEcho>,
    /// UDP sockets of the UDP load.
    #[arg(long, default_value_t = 16)]
    pub udp_sockets: usize,
    /// MiB of memory for the DRAM probe (0: skip it).
    #[arg(long, default_value_t = 1024)]
    pub dram_mib: usize,
    /// Print a JSON line after the table.
    #[arg(long)]
    pub json: bool,
}

/// How the echo server drives its sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum EchoIo {
    /// epoll readiness, one read and one write per ready connection.
    Epoll,
    /// io_uring completions, one submission per loop turn for every connection.
    Uring,
    /// io_uring as `uring`, with multishot receives into a provided-buffer ring and
    /// registered (fixed) files.
    #[value(name = "uring-multishot")]
    #[serde(rename = "uring-multishot")]
    UringMultishot,
}

impl EchoIo {
    fn name(self) -> &'static str {
        match self {
            EchoIo::Epoll => "epoll",
            EchoIo::Uring => "uring",
            EchoIo::UringMultishot => "uring-multishot",
        }
    }
}

/// What the echo server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Answer {
    /// The bytes received, as received.
    #[default]
    Echo,
    /// `END\r\n` for every line received: a memcached miss for each text request, so that
    /// memcached-protocol load generators (memtier_benchmark with `--ratio 0:1`) can drive
    /// the bare servers and measure the floor under their own traffic pattern.
    End,
}

impl Answer {
    /// Appends the answer to `input` to `out`.
    fn answer(self, input: &[u8], out: &mut Vec<u8>) {
        match self {
            Answer::Echo => out.extend_from_slice(input),
            Answer::End => {
                for _ in input.iter().filter(|&&byte| byte == b'\n') {
                    out.extend_from_slice(b"END\r\n");
                }
            }
        }
    }
}

/// One measured depth.
#[derive(Debug, Clone, Serialize)]
pub struct EchoFigure {
    /// The echo server's kind.
    pub io: EchoIo,
    /// Messages in flight per connection.
    pub depth: usize,
    /// Messages echoed per second.
    pub messages_per_sec: f64,
    /// Echo server user+system CPU microseconds per message.
    pub server_cpu_us_per_message: f64,
}

/// How the UDP echo server reads and answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum UdpEcho {
    /// One `recvfrom` and one `sendto` per datagram.
    Plain,
    /// Up to 32 datagrams per `recvmmsg` and per `sendmmsg`.
    Batched,
}

/// One measured UDP depth.
#[derive(Debug, Clone, Serialize)]
pub struct UdpFigure {
    /// The echo server's kind.
    pub io: UdpEcho,
    /// Datagrams in flight per socket.
    pub depth: usize,
    /// Datagrams echoed per second.
    pub datagrams_per_sec: f64,
    /// Echo server user+system CPU microseconds per datagram.
    pub server_cpu_us_per_datagram: f64,
}

/// DRAM random access.
#[derive(Debug, Clone, Serialize)]
pub struct DramFigure {
    /// Bytes of the region walked.
    pub bytes: usize,
    /// Pages the region got (hugetlb, thp, 4k).
    pub pages: String,
    /// Nanoseconds per load when each depends on the last.
    pub dependent_ns: f64,
    /// Independent chains walked together.
    pub chains: usize,
    /// Nanoseconds per load with `chains` loads in flight.
    pub parallel_ns_per_access: f64,
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
    /// UDP echo, one entry per kind and depth.
    pub udp_echo: Vec<UdpFigure>,
    /// DRAM random access (when measured).
    pub dram: Option<DramFigure>,
}

/// Runs the echo server on `listener` until the process is killed: read what arrived, write its
/// answer, one read and one write per readable connection (a short read means drained).
pub fn echo_server(listener: std::net::TcpListener, answer: Answer) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let mut poll = Poll::new()?;
    poll.registry().register(&mut listener, Token(usize::MAX), Interest::READABLE)?;
    let mut conns: Vec<TcpStream> = Vec::new();
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 64 << 10];
    let mut reply = Vec::new();
    loop {
        retry_interrupted(|| poll.poll(&mut events, None))?;
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
                        reply.clear();
                        answer.answer(&buf[..n], &mut reply);
                        // A client that went away ends only its own connection.
                        if stream.write_all(&reply).is_err() || n < buf.len() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        }
    }
}

/// What `user_data` of an io_uring completion names.
const UD_ACCEPT: u64 = 0;
const UD_RECV: u64 = 1;
const UD_SEND: u64 = 2;
/// Receive/send `ioprio` flag: arm the poll before trying the socket.
const IORING_RECVSEND_POLL_FIRST: u16 = 1;

/// Queues `entry` on `ring`, submitting what is queued first when the queue is full.
///
/// # Safety
/// Every buffer `entry` points to must stay allocated, and unchanged (a send's) or untouched
/// (a receive's), until the entry's completion arrives.
#[allow(unsafe_code)]
unsafe fn submit_entry(ring: &mut io_uring::IoUring, entry: &io_uring::squeue::Entry) -> io::Result<()> {
    // SAFETY: the caller keeps `entry`'s buffers as the kernel needs them (this function's
    // contract).
    while unsafe { ring.submission().push(entry) }.is_err() {
        ring.submit()?;
    }
    Ok(())
}

/// One connection of the io_uring echo server.
struct UringConn {
    stream: std::net::TcpStream,
    /// The posted receive writes here: never touched while `receiving`.
    incoming: Box<[u8]>,
    /// Received, not yet handed to a send.
    outgoing: Vec<u8>,
    /// The posted send reads from here: never touched while `sending` is set.
    in_flight: Vec<u8>,
    sending: bool,
    receiving: bool,
}

/// Runs `wait` again while a signal interrupts it (callgrind_control's requests, a profiler's
/// timer): an interrupted wait has waited for nothing.
fn retry_interrupted<T>(mut wait: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match wait() {
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            done => return done,
        }
    }
}

/// The io_uring echo server: a receive always posted on every connection; each loop turn
/// collects the completions, queues a send for every connection with output and no send in
/// flight, and submits everything with one `io_uring_enter` that also waits for the next
/// completion. Runs until the process is killed.
#[allow(unsafe_code)] // io_uring's submission contract: buffers outlive their operations.
pub fn echo_server_uring(listener: std::net::TcpListener, answer: Answer) -> io::Result<()> {
    use io_uring::{opcode, squeue, types, IoUring};
    use std::os::fd::AsRawFd;

    fn push(ring: &mut IoUring, entry: &squeue::Entry) -> io::Result<()> {
        // SAFETY: every entry built here points into a buffer of a `UringConn` that is
        // neither dropped, moved out of its box/vector allocation, nor written (receive
        // buffer) or changed (send buffer) until the entry's completion arrives: the
        // `receiving`/`sending` flags guard them, and connections are never removed.
        unsafe { submit_entry(ring, entry) }
    }

    // Completions are reaped only in `io_uring_enter` (no interrupting task work), and a
    // receive re-posted on an empty socket waits for data instead of trying first: the
    // cheapest of the variants measured (docs/benchmarks/HISTORY.md).
    let mut ring: IoUring =
        IoUring::builder().setup_single_issuer().setup_defer_taskrun().setup_cqsize(4096).build(1024)?;
    let listen_fd = types::Fd(listener.as_raw_fd());
    let accept = opcode::Accept::new(listen_fd, std::ptr::null_mut(), std::ptr::null_mut())
        .build()
        .user_data(UD_ACCEPT);
    push(&mut ring, &accept)?;
    let mut conns: Vec<UringConn> = Vec::new();
    let mut completions: Vec<(u64, i32)> = Vec::new();
    let mut dirty: Vec<usize> = Vec::new();
    loop {
        retry_interrupted(|| ring.submit_and_wait(1))?;
        completions.extend(ring.completion().map(|cqe| (cqe.user_data(), cqe.result())));
        for (user_data, result) in completions.drain(..) {
            let (index, kind) = ((user_data >> 2) as usize, user_data & 3);
            match kind {
                UD_ACCEPT => {
                    push(&mut ring, &accept)?;
                    if result < 0 {
                        continue;
                    }
                    // SAFETY: a successful accept completion's result is a new descriptor
                    // that nothing else owns.
                    let stream =
                        unsafe { <std::net::TcpStream as std::os::fd::FromRawFd>::from_raw_fd(result) };
                    stream.set_nodelay(true)?;
                    conns.push(UringConn {
                        stream,
                        incoming: vec![0u8; 64 << 10].into_boxed_slice(),
                        outgoing: Vec::new(),
                        in_flight: Vec::new(),
                        sending: false,
                        receiving: false,
                    });
                    dirty.push(conns.len() - 1);
                }
                UD_RECV => {
                    let conn = &mut conns[index];
                    conn.receiving = false;
                    if result > 0 {
                        answer.answer(&conn.incoming[..result as usize], &mut conn.outgoing);
                        dirty.push(index);
                    }
                }
                _ => {
                    let conn = &mut conns[index];
                    conn.sending = false;
                    if result > 0 {
                        conn.in_flight.drain(..result as usize);
                        dirty.push(index);
                    }
                }
            }
        }
        for index in dirty.drain(..) {
            let conn = &mut conns[index];
            let fd = types::Fd(conn.stream.as_raw_fd());
            if !conn.receiving {
                conn.receiving = true;
                let recv = opcode::Recv::new(fd, conn.incoming.as_mut_ptr(), conn.incoming.len() as u32)
                    .ioprio(IORING_RECVSEND_POLL_FIRST)
                    .build()
                    .user_data((index as u64) << 2 | UD_RECV);
                push(&mut ring, &recv)?;
            }
            if !conn.sending && (!conn.in_flight.is_empty() || !conn.outgoing.is_empty()) {
                if conn.in_flight.is_empty() {
                    std::mem::swap(&mut conn.in_flight, &mut conn.outgoing);
                }
                conn.sending = true;
                let send = opcode::Send::new(fd, conn.in_flight.as_ptr(), conn.in_flight.len() as u32)
                    .build()
                    .user_data((index as u64) << 2 | UD_SEND);
                push(&mut ring, &send)?;
            }
        }
    }
}

/// The io_uring echo server with everything io_uring offers a TCP server: accepted sockets
/// registered as fixed files, one multishot receive per connection drawing from a
/// provided-buffer ring (no receive re-posted per message), and each loop turn's sends
/// submitted with one `io_uring_enter` that also waits. Runs until the process is killed.
#[allow(unsafe_code)] // io_uring's submission contract: buffers outlive their operations.
pub fn echo_server_uring_multishot(listener: std::net::TcpListener, answer: Answer) -> io::Result<()> {
    use io_uring::{cqueue, opcode, squeue, types, IoUring};
    use std::os::fd::AsRawFd;

    const FILES: u32 = 4096;
    fn push(ring: &mut IoUring, entry: &squeue::Entry) -> io::Result<()> {
        // SAFETY: receives write only into provided buffers (owned by the `BufRing`, which
        // stays registered, its memory never freed, while the ring is used); a send reads a connection's `in_flight`, which is
        // not changed while `sending` is set, and connections are never removed.
        unsafe { submit_entry(ring, entry) }
    }

    let mut ring: IoUring =
        IoUring::builder().setup_single_issuer().setup_defer_taskrun().setup_cqsize(8192).build(1024)?;
    ring.submitter().register_files_sparse(FILES)?;
    let mut provided = qs_net::uring::BufRing::register(&ring, 0, 1024, 4096)?;
    let group = provided.group();
    let accept =
        opcode::Accept::new(types::Fd(listener.as_raw_fd()), std::ptr::null_mut(), std::ptr::null_mut())
            .build()
            .user_data(UD_ACCEPT);
    push(&mut ring, &accept)?;
    let receive = |slot: usize| {
        opcode::RecvMulti::new(types::Fixed(slot as u32), group)
            .build()
            .user_data((slot as u64) << 2 | UD_RECV)
    };
    let mut conns: Vec<UringConn> = Vec::new();
    let mut completions: Vec<(u64, i32, u32)> = Vec::new();
    let mut dirty: Vec<usize> = Vec::new();
    loop {
        retry_interrupted(|| ring.submit_and_wait(1))?;
        completions.extend(ring.completion().map(|cqe| (cqe.user_data(), cqe.result(), cqe.flags())));
        for (user_data, result, flags) in completions.drain(..) {
            let (index, kind) = ((user_data >> 2) as usize, user_data & 3);
            match kind {
                UD_ACCEPT => {
                    push(&mut ring, &accept)?;
                    if result < 0 || conns.len() as u32 >= FILES {
                        continue;
                    }
                    // SAFETY: a successful accept completion's result is a new descriptor
                    // that nothing else owns.
                    let stream =
                        unsafe { <std::net::TcpStream as std::os::fd::FromRawFd>::from_raw_fd(result) };
                    stream.set_nodelay(true)?;
                    let slot = conns.len();
                    ring.submitter().register_files_update(slot as u32, &[stream.as_raw_fd()])?;
                    conns.push(UringConn {
                        stream,
                        incoming: Box::default(),
                        outgoing: Vec::new(),
                        in_flight: Vec::new(),
                        sending: false,
                        receiving: true,
                    });
                    push(&mut ring, &receive(slot))?;
                }
                UD_RECV => {
                    if let Some(id) = cqueue::buffer_select(flags) {
                        let bytes = provided.take(id, result.max(0) as usize);
                        if !bytes.is_empty() {
                            answer.answer(bytes, &mut conns[index].outgoing);
                            dirty.push(index);
                        }
                        provided.give_back(id);
                    }
                    // A multishot receive ends on an error, end of file, or no buffer left:
                    // re-post it unless the peer closed.
                    if !cqueue::more(flags) && result != 0 {
                        push(&mut ring, &receive(index))?;
                    }
                }
                _ => {
                    let conn = &mut conns[index];
                    conn.sending = false;
                    if result > 0 {
                        conn.in_flight.drain(..result as usize);
                        dirty.push(index);
                    }
                }
            }
        }
        for index in dirty.drain(..) {
            let conn = &mut conns[index];
            if !conn.sending && (!conn.in_flight.is_empty() || !conn.outgoing.is_empty()) {
                if conn.in_flight.is_empty() {
                    std::mem::swap(&mut conn.in_flight, &mut conn.outgoing);
                }
                conn.sending = true;
                let send = opcode::Send::new(
                    types::Fixed(index as u32),
                    conn.in_flight.as_ptr(),
                    conn.in_flight.len() as u32,
                )
                .build()
                .user_data((index as u64) << 2 | UD_SEND);
                push(&mut ring, &send)?;
            }
        }
    }
}

/// Kills the echo child however the probe ends.
pub(crate) struct EchoChild(pub(crate) Child);

impl Drop for EchoChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `qs-bench probe-echo` pinned to `cores` and returns it with its address.
fn start_echo(cores: &str, kind: EchoIo) -> io::Result<(EchoChild, SocketAddr)> {
    start_pinned(cores, &["probe-echo", "--io", kind.name()])
}

/// Starts this program with `args` pinned to `cores` (taskset); the child prints the address
/// it serves on its first line, which is returned with it.
pub(crate) fn start_pinned(cores: &str, args: &[&str]) -> io::Result<(EchoChild, SocketAddr)> {
    let (child, addresses) = start_pinned_many(cores, args)?;
    Ok((child, addresses[0]))
}

/// Starts `qs-bench <args>` pinned to `cores` and reads the addresses it prints on its first
/// line (at least one, separated by spaces).
pub(crate) fn start_pinned_many(cores: &str, args: &[&str]) -> io::Result<(EchoChild, Vec<SocketAddr>)> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new("taskset")
        .args(["-c", cores])
        .arg(exe)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .map(EchoChild)?;
    let mut stdout =
        child.0.stdout.take().ok_or_else(|| io::Error::other("no stdout from the echo server"))?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while stdout.read(&mut byte)? == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&line);
    let addresses: Vec<SocketAddr> = text
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()
        .filter(|addresses: &Vec<SocketAddr>| !addresses.is_empty())
        .ok_or_else(|| io::Error::other(format!("the echo server said {text:?}")))?;
    Ok((child, addresses))
}

/// Closed-loop echo load: `depth` messages in flight on each connection for `duration`.
fn echo_load(
    address: SocketAddr,
    pid: u32,
    args: &ProbeArgs,
    io: EchoIo,
    depth: usize,
) -> io::Result<EchoFigure> {
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
            measuring = Some(crate::cpu::process_cpu_secs(pid));
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
    let cpu_end = crate::cpu::process_cpu_secs(pid);
    let cpu = match (cpu_start, cpu_end) {
        (Some(a), Some(b)) => b - a,
        _ => return Err(io::Error::other("cannot read the echo server's CPU time from /proc")),
    };
    Ok(EchoFigure {
        io,
        depth,
        messages_per_sec: messages as f64 / args.duration,
        server_cpu_us_per_message: cpu * 1e6 / messages.max(1) as f64,
    })
}

/// Closed-loop UDP echo load: `depth` datagrams in flight on each of `udp_sockets` sockets. A
/// socket that hears nothing for 200 ms refills its window (datagrams may be dropped).
fn udp_load(
    address: SocketAddr,
    pid: u32,
    args: &ProbeArgs,
    io: UdpEcho,
    depth: usize,
) -> io::Result<UdpFigure> {
    let mut poll = Poll::new()?;
    let mut sockets = Vec::new();
    let message = vec![b'x'; args.message];
    for index in 0..args.udp_sockets {
        let mut socket = mio::net::UdpSocket::bind("127.0.0.1:0".parse().expect("an address"))?;
        socket.connect(address)?;
        poll.registry().register(&mut socket, Token(index), Interest::READABLE)?;
        for _ in 0..depth {
            socket.send(&message)?;
        }
        sockets.push((socket, Instant::now()));
    }
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 64 << 10];
    let warmup_end = Instant::now() + Duration::from_millis(500);
    let end = warmup_end + Duration::from_secs_f64(args.duration);
    let mut measuring = None;
    let mut datagrams = 0u64;
    loop {
        let now = Instant::now();
        if measuring.is_none() && now >= warmup_end {
            measuring = Some(crate::cpu::process_cpu_secs(pid));
            datagrams = 0;
        }
        if now >= end {
            break;
        }
        poll.poll(&mut events, Some(Duration::from_millis(10)))?;
        for event in events.iter() {
            let (socket, heard) = &mut sockets[event.token().0];
            loop {
                match socket.recv(&mut buf) {
                    Ok(_) => {
                        datagrams += 1;
                        *heard = now;
                        // A full socket buffer drops the datagram; the refill below recovers.
                        let _ = socket.send(&message);
                    }
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                    Err(error) => return Err(error),
                }
            }
        }
        for (socket, heard) in &mut sockets {
            if now.duration_since(*heard) > Duration::from_millis(200) {
                *heard = now;
                for _ in 0..depth {
                    let _ = socket.send(&message);
                }
            }
        }
    }
    let cpu = match (measuring.flatten(), crate::cpu::process_cpu_secs(pid)) {
        (Some(a), Some(b)) => b - a,
        _ => return Err(io::Error::other("cannot read the echo server's CPU time from /proc")),
    };
    Ok(UdpFigure {
        io,
        depth,
        datagrams_per_sec: datagrams as f64 / args.duration,
        server_cpu_us_per_datagram: cpu * 1e6 / datagrams.max(1) as f64,
    })
}

/// The plain UDP echo server: one `recvfrom` and one `sendto` per datagram, until killed.
pub fn udp_echo_plain() -> io::Result<()> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    println!("{}", socket.local_addr()?);
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, peer) = socket.recv_from(&mut buf)?;
        // A client gone away must not stop the server.
        let _ = socket.send_to(&buf[..n], peer);
    }
}

/// Walks a random cycle over the cache lines of a `bytes` region: first one dependent chain,
/// then `CHAINS` chains at once.
pub fn dram(bytes: usize, accesses: usize) -> DramFigure {
    use qs_store::region::{HugePages, Region};
    use std::sync::atomic::Ordering::Relaxed;
    const CHAINS: usize = 16;
    const WORDS_PER_LINE: usize = 8;
    let region = Region::new(bytes, HugePages::Auto);
    let words = region.words();
    let lines = words.len() / WORDS_PER_LINE;
    // Sattolo's shuffle: next[i] forms one cycle through every line.
    let mut next: Vec<u32> = (0..lines as u32).collect();
    let mut rng = crate::workload::Rng::new(0xD7A3);
    for i in (1..lines).rev() {
        let j = rng.below(i as u64) as usize;
        next.swap(i, j);
    }
    for (line, &to) in next.iter().enumerate() {
        words[line * WORDS_PER_LINE].store(u64::from(to), Relaxed);
    }
    let step = |line: usize| words[line * WORDS_PER_LINE].load(Relaxed) as usize;
    let mut at = 0;
    let started = Instant::now();
    for _ in 0..accesses {
        at = step(at);
    }
    let dependent_ns = started.elapsed().as_nanos() as f64 / accesses as f64;
    std::hint::black_box(at);
    let mut cursors = [0usize; CHAINS];
    for (chain, cursor) in cursors.iter_mut().enumerate() {
        *cursor = next[chain * (lines / CHAINS)] as usize;
    }
    let rounds = accesses * 4 / CHAINS;
    let started = Instant::now();
    for _ in 0..rounds {
        for cursor in &mut cursors {
            *cursor = step(*cursor);
        }
    }
    let parallel_ns_per_access = started.elapsed().as_nanos() as f64 / (rounds * CHAINS) as f64;
    std::hint::black_box(cursors);
    DramFigure {
        bytes: region.bytes(),
        pages: region.page_kind().name().to_string(),
        dependent_ns,
        chains: CHAINS,
        parallel_ns_per_access,
    }
}

/// Runs the probe.
pub fn run(args: &ProbeArgs) -> io::Result<ProbeReport> {
    let mut tcp_echo = Vec::new();
    for &depth in &args.depths {
        for &io in &args.io {
            // A fresh server per run, so one run's connections do not linger into the next.
            let (child, address) = start_echo(&args.server_cores, io)?;
            tcp_echo.push(echo_load(address, child.0.id(), args, io, depth)?);
        }
    }
    let mut udp_echo = Vec::new();
    for &depth in &args.depths {
        for &io in &args.udp {
            let kind = if io == UdpEcho::Plain { &["udp-echo", "--plain"][..] } else { &["udp-echo"] };
            let (child, address) = start_pinned(&args.server_cores, kind)?;
            udp_echo.push(udp_load(address, child.0.id(), args, io, depth)?);
        }
    }
    let dram = (args.dram_mib > 0).then(|| dram(args.dram_mib << 20, 2_000_000));
    Ok(ProbeReport { connections: args.connections, message: args.message, tcp_echo, udp_echo, dram })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echoes(server: fn(std::net::TcpListener, Answer) -> io::Result<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || server(listener, Answer::Echo));
        let mut clients: Vec<_> = (0..3).map(|_| std::net::TcpStream::connect(address).unwrap()).collect();
        for round in 0..3 {
            for (index, client) in clients.iter_mut().enumerate() {
                client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let message = format!("hello {index} {round}");
                client.write_all(message.as_bytes()).unwrap();
                let mut reply = vec![0u8; message.len()];
                client.read_exact(&mut reply).unwrap();
                assert_eq!(reply, message.as_bytes());
            }
        }
    }

    #[test]
    fn the_epoll_echo_server_echoes() {
        echoes(echo_server);
    }

    #[test]
    fn the_uring_echo_server_echoes() {
        echoes(echo_server_uring);
    }

    fn answers_misses(server: fn(std::net::TcpListener, Answer) -> io::Result<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || server(listener, Answer::End));
        let mut client = std::net::TcpStream::connect(address).unwrap();
        client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        client.write_all(b"get a\r\nget b\r\n").unwrap();
        let mut reply = vec![0u8; 10];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(reply, b"END\r\nEND\r\n");
    }

    #[test]
    fn the_epoll_echo_server_answers_misses() {
        answers_misses(echo_server);
    }

    #[test]
    fn the_uring_echo_server_answers_misses() {
        answers_misses(echo_server_uring);
    }

    #[test]
    fn the_multishot_uring_echo_server_echoes_and_answers_misses() {
        echoes(echo_server_uring_multishot);
        answers_misses(echo_server_uring_multishot);
    }

    #[test]
    fn the_dram_walk_visits_a_full_cycle_and_reports_its_pages() {
        let figure = dram(4 << 20, 10_000);
        assert!(figure.bytes >= 4 << 20);
        assert!(["hugetlb", "thp", "4k", "heap"].contains(&figure.pages.as_str()), "{figure:?}");
        assert!(figure.dependent_ns > 0.0 && figure.parallel_ns_per_access > 0.0, "{figure:?}");
    }
}
