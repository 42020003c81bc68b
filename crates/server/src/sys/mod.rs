//! The few operating-system calls the standard library and mio do not offer. Each `unsafe`
//! block is one libc call on values this module owns.

pub mod clock;
pub mod daemon;
pub mod memfile;

pub use qs_net::{send_burst, Burst, BURST_MAX};
use std::io;
use std::net::SocketAddr;

/// Pins the calling thread to `core` (modulo the cores this process may use). Failing to pin
/// is not fatal: the worker runs unpinned.
pub fn pin_to_core(core: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `allowed` is a valid, writable cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let cores: Vec<usize> =
        // SAFETY: CPU_ISSET reads the set within its fixed size (index < CPU_SETSIZE).
        (0..libc::CPU_SETSIZE as usize).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &allowed) }).collect();
    if cores.is_empty() {
        return Ok(());
    }
    // SAFETY: as above.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the index comes from the allowed set, below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cores[core % cores.len()], &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Allocations at least this large are mapped on their own and unmapped when freed.
const MMAP_THRESHOLD_BYTES: libc::c_int = 128 << 10;

/// Fixes glibc's mmap threshold at its default of 128 KiB. Left alone, glibc raises it to the
/// size of each mapped block freed (up to 32 MiB): after the first large value or `stats mrc`
/// tree of a few hundred KiB is freed, the next ones come from a heap instead, and the heap
/// keeps its high-water mark. Fixed, a large block is mapped and given back as it comes and
/// goes. Call before threads start; elsewhere nothing.
pub fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes no pointers; M_MMAP_THRESHOLD with a value under its 32 MiB
    // maximum only sets the threshold.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    }
}

/// Gives the allocator's free memory back to the system (glibc's `malloc_trim`: free pages in
/// every arena, not only at a heap's top); elsewhere nothing.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers and may be called at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// This process's user and system CPU time, in seconds.
pub fn cpu_times_secs() -> (f64, f64) {
    // SAFETY: rusage is plain data; zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
}

/// Fails when another socket holds `addr` (TCP when `stream`, else UDP). The workers bind
/// their shared ports with `SO_REUSEPORT`, which lets any later process of the same user join
/// the group and silently take a share of the traffic (a second server started on the same
/// port would split the clients between two caches). A plain bind, which conflicts with any
/// listening or bound socket there, is tried first, so such a port is refused as memcached
/// refuses it.
pub fn ensure_port_free(addr: SocketAddr, stream: bool) -> io::Result<()> {
    use socket2::{Domain, Socket, Type};
    let kind = if stream { Type::STREAM } else { Type::DGRAM };
    let socket = Socket::new(Domain::for_address(addr), kind, None)?;
    only_v6(&socket, addr)?;
    if stream {
        // As the listeners do: connections of an earlier run in TIME_WAIT do not hold the port.
        socket.set_reuse_address(true)?;
    }
    socket.bind(&addr.into())
}

/// memcached's `-s`: a non-blocking UNIX domain socket listening at `path` with permissions
/// `mask`. A socket file already there (left by an earlier server) is replaced; any other file
/// is not touched and the bind fails.
pub fn unix_listener(path: &std::path::Path, mask: u32) -> io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_socket()) {
        std::fs::remove_file(path)?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mask))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// An IPv6 socket serves IPv6 only, as memcached's do (`-l *` binds 0.0.0.0 and :: apart).
fn only_v6(socket: &socket2::Socket, addr: SocketAddr) -> io::Result<()> {
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    Ok(())
}

/// A non-blocking listener; with `reuse_port` several workers can bind the same port and the
/// kernel spreads connections over them.
pub fn listener(addr: SocketAddr, reuse_port: bool, backlog: i32) -> io::Result<mio::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    only_v6(&socket, addr)?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    Ok(mio::net::TcpListener::from_std(socket.into()))
}

/// A non-blocking UDP socket bound to `addr`; with `reuse_port` every worker binds the same
/// port and the kernel spreads clients over them (by address, so a client's datagrams stay
/// with one worker).
pub fn udp_socket(addr: SocketAddr, reuse_port: bool) -> io::Result<mio::net::UdpSocket> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, None)?;
    only_v6(&socket, addr)?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    // Room for bursts (the kernel caps it at net.core.rmem_max).
    let _ = socket.set_recv_buffer_size(4 << 20);
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(mio::net::UdpSocket::from_std(socket.into()))
}

/// Takes `file`'s exclusive advisory lock without waiting (released when the file is closed,
/// or the process dies): false when another process holds it.
pub fn try_lock_exclusive(file: &std::fs::File) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor the File owns and keeps open for the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(error)
    }
}

/// Bytes an unprivileged user may still allocate on `file`'s file system (fstatvfs's
/// f_bavail blocks of f_frsize bytes).
pub fn free_bytes(file: &std::fs::File) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    // SAFETY: statvfs is plain data; zeroed is a valid value for fstatvfs to fill.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatvfs on a descriptor the File owns and keeps open for the call, into a
    // writable statvfs.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Unix seconds now (as moved by `debugtime`).
pub fn now_secs() -> u32 {
    crate::sys::clock::now().secs()
}

/// A reading of the CPU's time-stamp counter (one instruction, a few nanoseconds: the
/// latency histograms read it twice a request); elsewhere, and under Miri, nanoseconds since
/// the first call. [`ns_per_tick_q32`] converts.
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        // SAFETY: RDTSC reads a counter; it touches no memory and every x86-64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        monotonic_ns()
    }
}

/// Nanoseconds since the first call (the fallback clock, and the reference [`ticks`] is
/// measured against).
fn monotonic_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

/// Nanoseconds per [`ticks`] tick, times 2^32: measured against the monotonic clock over
/// `window` (once, at start). Linux keeps the time-stamp counter at one rate across cores
/// and sleep states where the CPU says it is invariant (`constant_tsc`, `nonstop_tsc`).
pub fn ns_per_tick_q32(window: std::time::Duration) -> u64 {
    if cfg!(not(all(target_arch = "x86_64", not(miri)))) {
        return 1 << 32;
    }
    let (ns0, ticks0) = (monotonic_ns(), ticks());
    std::thread::sleep(window);
    let (ns1, ticks1) = (monotonic_ns(), ticks());
    let ticks = ticks1.saturating_sub(ticks0).max(1) as u128;
    (((ns1.saturating_sub(ns0) as u128) << 32) / ticks).max(1) as u64
}

/// `debugtime`: moves the clock every worker reads by `delta` seconds.
pub fn shift_clock(delta: i32) {
    clock::shift(delta);
}

/// memcached's -r: raises the core-file limit to unlimited, or else to its hard limit. Returns
/// whether core files can be written afterwards (a soft limit above zero).
pub fn raise_core_limit() -> bool {
    let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: `unlimited` is a valid rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &unlimited) } != 0 {
        // SAFETY: rlimit is plain data; zeroed is a valid value.
        let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
        // SAFETY: `limit` is a valid, writable rlimit.
        if unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut limit) } == 0 {
            limit.rlim_cur = limit.rlim_max;
            // SAFETY: `limit` is a valid rlimit with cur <= max.
            unsafe { libc::setrlimit(libc::RLIMIT_CORE, &limit) };
        }
    }
    // SAFETY: rlimit is plain data; zeroed is a valid value.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `limit` is a valid, writable rlimit.
    unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut limit) == 0 && limit.rlim_cur > 0 }
}

/// memcached's -k: locks the process's pages, present and future, in memory.
pub fn lock_memory() -> io::Result<()> {
    // SAFETY: mlockall takes flags only.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Raises the open-file limit to at least `wanted` (up to the hard limit), as memcached does
/// for its connection limit. Returns the soft limit in force afterwards.
pub fn raise_fd_limit(wanted: u64) -> u64 {
    // SAFETY: rlimit is plain data; zeroed is a valid value.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `limit` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    if limit.rlim_cur < wanted {
        limit.rlim_cur = wanted.min(limit.rlim_max);
        // SAFETY: `limit` is a valid rlimit with cur <= max.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    }
    limit.rlim_cur
}
