//! `-o io_backend`: the io_uring backend (the default) serves, `stats settings` says which
//! backend runs, a bad value refuses to start, and where the kernel refuses io_uring the
//! server says so once and serves on epoll. The whole suites run on the epoll backend too
//! (`QS_IO_BACKEND=epoll` in scripts/test.sh).

mod common;
use common::*;

/// The tests here take turns: one of them turns io_uring off for the whole machine.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn setting(client: &mut Client, name: &str) -> String {
    stats(client, "settings").into_iter().find(|(key, _)| key == name).map(|(_, value)| value).expect(name)
}

#[test]
fn the_uring_backend_serves_and_stats_settings_names_it() {
    let _turn = serial();
    let server = ServerProcess::quicksilver(&["-t", "2", "-o", "io_backend=uring"]);
    let mut client = server.connect();
    assert_eq!(setting(&mut client, "io_backend"), "uring");
    let value = vec![b'v'; 100_000];
    let mut request = format!("set big 0 0 {}\r\n", value.len()).into_bytes();
    request.extend_from_slice(&value);
    request.extend_from_slice(b"\r\n");
    assert_eq!(client.call(&request), b"STORED\r\n");
    // A pipeline of gets whose replies outgrow the socket: they go out as the client reads.
    let gets = "get big\r\n".repeat(64);
    client.send(gets.as_bytes());
    let mut expected = format!("VALUE big 0 {}\r\n", value.len()).into_bytes();
    expected.extend_from_slice(&value);
    expected.extend_from_slice(b"\r\nEND\r\n");
    for _ in 0..64 {
        assert_eq!(client.read_until(b"END\r\n"), expected);
    }
    let default = ServerProcess::quicksilver(&[]);
    assert_eq!(setting(&mut default.connect(), "io_backend"), "uring", "the default");
    let other = ServerProcess::quicksilver(&["-o", "io_backend=epoll"]);
    assert_eq!(setting(&mut other.connect(), "io_backend"), "epoll");
}

#[test]
fn a_bad_backend_refuses_to_start() {
    let _turn = serial();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver"))
        .args(["-p", "0", "-o", "io_backend=kqueue"])
        .output()
        .expect("run quicksilver");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("io_backend must be epoll or uring"));
}

/// Sets `kernel.io_uring_disabled` while it lives, and puts the old value back.
struct UringDisabled(String);

impl UringDisabled {
    const PATH: &'static str = "/proc/sys/kernel/io_uring_disabled";

    fn set() -> Option<UringDisabled> {
        let old = std::fs::read_to_string(Self::PATH).ok()?;
        std::fs::write(Self::PATH, "2").ok()?;
        Some(UringDisabled(old.trim().to_string()))
    }
}

impl Drop for UringDisabled {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, &self.0);
    }
}

#[test]
fn where_io_uring_is_refused_the_server_says_so_and_serves_on_epoll() {
    let _turn = serial();
    // Root only, for as long as the server takes to start (its rings are made then); this
    // test binary runs alone, so no other test's server starts meanwhile.
    let Some(disabled) = UringDisabled::set() else {
        eprintln!("skipped: kernel.io_uring_disabled cannot be set here (not root?)");
        return;
    };
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver"))
        .args(["-p", "0", "-l", "127.0.0.1", "-t", "1", "-o", "io_backend=uring"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run quicksilver");
    let mut child = KillOnDrop(output);
    std::thread::sleep(std::time::Duration::from_millis(500));
    drop(disabled);
    let _ = child.0.kill();
    let output = std::mem::replace(&mut child.0, dummy()).wait_with_output().expect("its output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("io_uring refused"), "{stderr}");
    // And served: the same start, checked over the wire.
    let Some(_disabled) = UringDisabled::set() else { return };
    let server = ServerProcess::quicksilver(&["-t", "1", "-o", "io_backend=uring"]);
    drop(_disabled);
    let mut client = server.connect();
    assert_eq!(setting(&mut client, "io_backend"), "epoll");
    assert_eq!(client.call(b"set k 0 0 1\r\nx\r\n"), b"STORED\r\n");
    assert_eq!(client.call(b"get k\r\n"), b"VALUE k 0 1\r\nx\r\nEND\r\n");
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn dummy() -> std::process::Child {
    std::process::Command::new("true").spawn().expect("true")
}

/// Each version of the value is one byte repeated: a reply whose bytes differ is torn.
const TORN_VALUE_BYTES: usize = 100_000;

/// A get's reply is sent from the log where the owner read it, so a value must reach the
/// client whole however the log changes while the reply waits in a full socket: the key
/// rewritten in place (same size) and the log wrapped over its old versions, by another
/// client, while slow clients hold pipelines of large gets of it. On both I/O backends (the
/// io_uring sends are where a send could read the log late), at -t 1 (every read the
/// owner's) and -t 2 (some read through CREW).
#[test]
fn values_sent_from_the_log_are_never_torn_by_writes_while_their_replies_wait() {
    let _turn = serial();
    for backend in ["epoll", "uring"] {
        for threads in ["1", "2"] {
            let backend = format!("io_backend={backend}");
            let server = ServerProcess::quicksilver(&["-t", threads, "-m", "8", "-o", &backend]);
            let checked = overwrite_while_reading(&server);
            assert_eq!(checked, 4 * 3 * 64, "{backend} -t {threads}");
        }
    }
}

/// Slow readers pipeline gets of `k` while a writer rewrites it and wraps the log; returns
/// the replies checked whole.
fn overwrite_while_reading(server: &ServerProcess) -> usize {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let mut writer = server.connect();
    set(&mut writer, "k", &[b'A'; TORN_VALUE_BYTES]);
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let mut client = server.connect();
            shrink_receive_buffer(&client.stream);
            std::thread::spawn(move || {
                let mut checked = 0;
                for _ in 0..3 {
                    // More than the socket buffers hold (a few MB), read slowly: the replies
                    // wait in the server meanwhile.
                    client.send("get k\r\n".repeat(64).as_bytes());
                    for _ in 0..64 {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        let head = format!("VALUE k 0 {TORN_VALUE_BYTES}\r\n");
                        let mut reply = vec![0; head.len() + TORN_VALUE_BYTES + b"\r\nEND\r\n".len()];
                        std::io::Read::read_exact(&mut client.stream, &mut reply).expect("a whole reply");
                        assert!(
                            reply.starts_with(head.as_bytes()),
                            "{:?}",
                            String::from_utf8_lossy(&reply[..40])
                        );
                        assert!(reply.ends_with(b"\r\nEND\r\n"));
                        let value = &reply[head.len()..reply.len() - b"\r\nEND\r\n".len()];
                        assert_eq!(value.len(), TORN_VALUE_BYTES);
                        let first = value[0];
                        let torn = value.iter().position(|&byte| byte != first);
                        assert_eq!(torn, None, "a torn value: {first} then {:?}", torn.map(|at| value[at]));
                        checked += 1;
                    }
                }
                checked
            })
        })
        .collect();
    let writes = std::thread::spawn({
        let done = done.clone();
        let mut writer = writer;
        move || {
            let mut version = 0u8;
            while !done.load(Relaxed) {
                version = version.wrapping_add(1);
                set(&mut writer, "k", &[b'A' + version % 26; TORN_VALUE_BYTES]);
                set(&mut writer, &format!("filler{}", version % 64), &[b'f'; TORN_VALUE_BYTES]);
            }
        }
    });
    let checked = readers.into_iter().map(|reader| reader.join().expect("a reader failed")).sum();
    done.store(true, Relaxed);
    writes.join().expect("the writer failed");
    checked
}

/// A receive buffer of 32 KiB, so a reply of 100 KB waits in the server's socket.
fn shrink_receive_buffer(stream: &std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let bytes: libc::c_int = 32 << 10;
    // SAFETY: setsockopt on a socket this stream owns, with a pointer to a live c_int of the
    // length given.
    let result = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(result, 0, "setsockopt SO_RCVBUF");
}

/// Long sets whose values go into the log as they arrive (issue 58): many at once, each in
/// small pieces interleaved with the others', on both I/O backends, at -t 1 (every key owned
/// where it is read) and -t 2 (half read into the input and handed over): every value is stored
/// whole and read back as sent, with `watch mutations` and `stats` counting each set.
#[test]
fn values_arriving_in_pieces_on_many_connections_are_stored_whole() {
    let _turn = serial();
    const LEN: usize = 200_000;
    for backend in ["epoll", "uring"] {
        for threads in ["1", "2"] {
            let backend = format!("io_backend={backend}");
            let server = ServerProcess::quicksilver(&["-t", threads, "-m", "64", "-o", &backend]);
            // 32 values of 200 KB in flight: more than S3-FIFO's small ring (a tenth of each
            // partition's 16 MiB log) holds.
            let mut clients: Vec<Client> = (0..32).map(|_| server.connect()).collect();
            let value =
                |index: usize| -> Vec<u8> { (0..LEN).map(|at| (at * (index + 3) % 251) as u8).collect() };
            for (index, client) in clients.iter_mut().enumerate() {
                client.send(format!("set arriving{index} {index} 0 {LEN}\r\n").as_bytes());
            }
            for piece in 0..LEN.div_ceil(3_001) {
                for (index, client) in clients.iter_mut().enumerate() {
                    let value = value(index);
                    client.send(&value[piece * 3_001..((piece + 1) * 3_001).min(LEN)]);
                }
            }
            for client in &mut clients {
                client.send(b"\r\n");
                assert_eq!(client.read_until(b"\r\n"), b"STORED\r\n", "{backend} -t {threads}");
            }
            let mut reader = server.connect();
            for index in 0..32 {
                let reply = reader.call(format!("get arriving{index}\r\n").as_bytes());
                let mut expected = format!("VALUE arriving{index} {index} {LEN}\r\n").into_bytes();
                expected.extend_from_slice(&value(index));
                expected.extend_from_slice(b"\r\nEND\r\n");
                assert!(reply == expected, "arriving{index} read back otherwise ({backend} -t {threads})");
            }
            assert_eq!(stat(&mut reader, "cmd_set"), 32);
            assert_eq!(stat(&mut reader, "curr_items"), 32);
        }
    }
}

/// A set whose value arrives slower than the log turns over: its record is passed by the
/// log's head before the value is in, so the set is refused as one memcached cannot store
/// (the old value goes, as memcached drops it), the items written meanwhile are whole, and the
/// connection goes on.
#[test]
fn a_value_the_log_turns_over_before_it_arrives_is_refused_and_harms_nothing() {
    let _turn = serial();
    const FILLER: usize = 100_000;
    for backend in ["epoll", "uring"] {
        let backend = format!("io_backend={backend}");
        // Four partitions of 2 MiB: each turns over with about 20 fillers.
        let server = ServerProcess::quicksilver(&["-t", "1", "-m", "8", "-o", &backend]);
        let mut slow = server.connect();
        assert_eq!(slow.call(b"set slow 0 0 3\r\nold\r\n"), b"STORED\r\n");
        slow.send(b"set slow 0 0 300000\r\n");
        // More than half a read buffer: the server sees a long set and starts its record.
        slow.send(&[b's'; 20_000]);
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut writer = server.connect();
        for round in 0..200u32 {
            set(&mut writer, &format!("filler{round}"), &[round as u8; FILLER]);
        }
        slow.send(&[b's'; 280_000]);
        slow.send(b"\r\nget slow\r\n");
        assert_eq!(
            slow.read_until(b"END\r\n"),
            b"SERVER_ERROR out of memory storing object\r\nEND\r\n",
            "{backend}"
        );
        for round in 190..200u32 {
            let reply = writer.call(format!("get filler{round}\r\n").as_bytes());
            let head = format!("VALUE filler{round} 0 {FILLER}\r\n");
            assert!(reply.starts_with(head.as_bytes()), "filler{round} lost ({backend})");
            let value = &reply[head.len()..head.len() + FILLER];
            assert!(value.iter().all(|&byte| byte == round as u8), "filler{round} overwritten ({backend})");
        }
        assert_eq!(slow.call(b"set slow 0 0 3\r\nnew\r\n"), b"STORED\r\n");
    }
}
