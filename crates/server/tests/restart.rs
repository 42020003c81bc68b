//! `-e FILE`: a restart serves what the last server held, after a graceful stop (SIGUSR1, as
//! memcached) and after `kill -9` at any moment (beyond memcached), with flags, CAS and TTLs;
//! a fault-injection loop kills the server under write load and checks every answer against
//! what was acknowledged.

mod common;

use common::{Client, MemoryFile, ServerProcess};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Starts quicksilver with `args` expecting it to refuse; its standard error.
fn refusal(args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_quicksilver"))
        .args(["-p", "0", "-l", "127.0.0.1"])
        .args(args)
        .output()
        .expect("runs");
    assert!(!output.status.success(), "{args:?} started");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn kill9(server: ServerProcess) {
    drop(server); // SIGKILL, then reaped
}

fn usr1(mut server: ServerProcess) {
    // SAFETY: kill with a child pid we own.
    unsafe { libc::kill(server.pid() as i32, libc::SIGUSR1) };
    let status = server.wait_exit(Duration::from_secs(10)).expect("stops on SIGUSR1");
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_graceful_stop_and_a_kill_both_restart_warm_with_flags_cas_and_ttl() {
    let file = MemoryFile::new("basic");
    // EREW: every read runs on its key's owner, which marks the item fetched (a CREW reader
    // of another worker's partition does no bookkeeping, so `h` would depend on which worker
    // took the connection).
    let args = ["-t", "2", "--access", "erew", "-m", "32", "-e", file.arg()];
    let server = ServerProcess::quicksilver(&args);
    let mut client = server.connect();
    for n in 0..3000 {
        let value = format!("value-{n}-").repeat(1 + n % 40);
        client.send(
            format!("set key{n} {n} {} {}\r\n{value}\r\n", if n % 2 == 0 { 0 } else { 1000 }, value.len())
                .as_bytes(),
        );
        assert_eq!(client.read_until(b"\r\n"), b"STORED\r\n");
    }
    assert_eq!(client.call(b"delete key7\r\n"), b"DELETED\r\n");
    let gets = client.call(b"gets key5 key6\r\n");
    assert_eq!(
        client.call(b"cache_memlimit 16\r\n"),
        b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n",
        "the file fixes the logs' size"
    );
    let settings = common::stats(&mut client, "settings");
    assert!(
        settings.iter().any(|(name, value)| name == "memory_file" && value == file.arg()),
        "{settings:?}"
    );
    usr1(server);
    assert!(file.meta().exists(), "a graceful stop writes memcached's metadata file");

    let check = |client: &mut Client| {
        assert_eq!(client.call(b"gets key5 key6\r\n"), gets, "flags and CAS kept");
        assert_eq!(client.call(b"get key7\r\n"), b"END\r\n", "a delete is kept");
        let ttl = client.call(b"mg key5 t\r\n");
        let remaining: u32 =
            String::from_utf8_lossy(&ttl).trim().trim_start_matches("HD t").parse().expect("ttl");
        assert!((990..=1000).contains(&remaining), "time kept running: {remaining}");
        assert_eq!(client.call(b"mg key4 t\r\n"), b"HD t-1\r\n");
        for n in (0..3000).filter(|&n| n != 7) {
            let value = format!("value-{n}-").repeat(1 + n % 40);
            let expected = format!("VALUE key{n} {n} {}\r\n{value}\r\nEND\r\n", value.len());
            assert_eq!(client.call(format!("get key{n}\r\n").as_bytes()), expected.as_bytes());
        }
    };
    let server = ServerProcess::quicksilver(&args);
    assert!(!file.meta().exists(), "the metadata file is read once");
    let mut client = server.connect();
    assert_eq!(client.call(b"mg key6 h\r\n"), b"HD h1\r\n", "fetched before the stop");
    assert_eq!(client.call(b"mg key8 h\r\n"), b"HD h0\r\n", "never fetched");
    check(&mut client);
    assert_eq!(common::stat(&mut client, "curr_items"), 2999);
    kill9(server);

    let server = ServerProcess::quicksilver(&args);
    check(&mut server.connect());
    kill9(server);

    // Another layout (more memory): a clean cache, said on standard error.
    let server = ServerProcess::quicksilver(&["-t", "2", "--access", "erew", "-m", "48", "-e", file.arg()]);
    let mut client = server.connect();
    assert_eq!(client.call(b"get key5\r\n"), b"END\r\n");
    assert_eq!(common::stat(&mut client, "curr_items"), 0);
}

#[test]
fn an_unreadable_metadata_file_stops_the_start_as_memcacheds_does() {
    let file = MemoryFile::new("meta");
    std::fs::write(file.meta(), b"").unwrap();
    assert!(refusal(&["-e", file.arg()]).contains("corrupt metadata file"));
}

#[test]
fn a_second_server_on_the_same_memory_file_refuses_to_start() {
    let file = MemoryFile::new("lock");
    let first = ServerProcess::quicksilver(&["-e", file.arg()]);
    assert!(refusal(&["-e", file.arg()]).contains("in use by another server"));
    kill9(first);
    // A killed server's lock goes with it.
    let again = ServerProcess::quicksilver(&["-e", file.arg()]);
    assert_eq!(again.connect().call(b"get nothing\r\n"), b"END\r\n");
}

#[test]
fn store_mode_refuses_a_memory_file() {
    let file = MemoryFile::new("store");
    assert!(refusal(&["-M", "-e", file.arg()]).contains("-e"));
}

/// The value of version `version` of key `key`: its length and bytes follow from both, so a
/// torn, stale or misplaced value cannot pass for an acknowledged one.
fn versioned(key: u64, version: u64) -> Vec<u8> {
    let unit = format!("{key}:{version};");
    unit.repeat(1 + ((key * 31 + version * 17) % 150) as usize).into_bytes()
}

/// An in-flight "version" that is a delete.
const DELETE: u64 = u64::MAX;

/// What a writer knows of one key: the last version acknowledged, and one sent whose reply
/// had not come back when the server died.
#[derive(Clone, Copy, Default)]
struct KeyState {
    acked: Option<u64>,
    in_flight: Option<u64>,
    next: u64,
}

const KEYS: u64 = 2000;
const WRITERS: u64 = 4;
const ROUNDS: usize = 20;

#[test]
fn kill_minus_9_under_write_load_never_serves_a_wrong_value() {
    let file = MemoryFile::new("faults");
    // 8 partitions of 8 MiB: the rounds' writes (at most ~12 MB) never wrap a log, so an item
    // missing after a restart was lost, not evicted.
    let args = ["-t", "2", "-m", "64", "-e", file.arg()];
    let (kept, lost) = fault_loop(&args);
    assert!(kept > 0, "the loop checked nothing");
    // Only writes in flight may be lost: at most one per writer per kill, and an item whose
    // old version was retired as its new one was being written.
    assert!(lost <= WRITERS * ROUNDS as u64, "lost {lost}");
}

/// With a flash tier: 2 MiB of memory per partition, so most items live on flash when the
/// server is killed. What was demoted since the workers last wrote their flash page out (when
/// idle, or a second before) may be lost with the crash; nothing may come back wrong.
#[test]
fn kill_minus_9_under_write_load_with_a_flash_tier_never_serves_a_wrong_value() {
    let file = MemoryFile::new("faults-flash");
    let flash = std::env::temp_dir().join(format!("qs-restart-flash-{}", std::process::id()));
    let option = format!("ext_path={}:256m,ext_item_size=0", flash.display());
    let args = ["-t", "2", "-m", "16", "-o", &option, "-e", file.arg()];
    let (kept, _lost) = fault_loop(&args);
    let _ = std::fs::remove_file(&flash);
    assert!(kept > 0, "the loop checked nothing");
}

/// Rounds of: restart, check every key against the model, write under load, kill -9 at a
/// random moment. Returns (kept, lost); panics on a wrong value.
fn fault_loop(args: &[&str]) -> (u64, u64) {
    let model = Arc::new(Mutex::new(vec![KeyState::default(); KEYS as usize]));
    let (mut kept, mut lost, mut wrong, mut in_flight_seen) = (0u64, 0u64, 0u64, 0u64);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(std::process::id());
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let started = Instant::now();
    for round in 0..ROUNDS {
        let server = ServerProcess::quicksilver(args);
        // Every key's answer against the model.
        if round > 0 {
            let mut client = server.connect();
            let mut model = model.lock().unwrap();
            for key in 0..KEYS {
                let state = &mut model[key as usize];
                let reply = client.call(format!("get k{key}\r\n").as_bytes());
                let value = parse_get(&reply, key);
                match value {
                    None if state.acked.is_none() || state.in_flight == Some(DELETE) => state.acked = None,
                    None => {
                        lost += 1;
                        state.acked = None;
                    }
                    Some(bytes) => {
                        let matches =
                            |version: Option<u64>| version.is_some_and(|v| versioned(key, v) == bytes);
                        if matches(state.acked) {
                            kept += 1;
                        } else if matches(state.in_flight) {
                            in_flight_seen += 1;
                            state.acked = state.in_flight;
                        } else {
                            wrong += 1;
                            eprintln!(
                                "key {key}: {:?}",
                                String::from_utf8_lossy(&bytes[..bytes.len().min(60)])
                            );
                        }
                    }
                }
                state.in_flight = None;
            }
        }
        // Writers, each over its own keys, one set at a time; killed after a random time.
        let stop = Arc::new(AtomicBool::new(false));
        let acked_sets = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let (model, stop, acked_sets, port) =
                    (model.clone(), stop.clone(), acked_sets.clone(), server.port);
                let seed = next();
                std::thread::spawn(move || {
                    write_until_killed(writer, port, seed, &model, &stop, &acked_sets, KEYS, WRITERS)
                })
            })
            .collect();
        let until = Duration::from_millis(30 + next() % 250);
        let deadline = Instant::now() + until;
        while Instant::now() < deadline && acked_sets.load(Relaxed) < 3000 {
            std::thread::sleep(Duration::from_millis(2));
        }
        kill9(server);
        stop.store(true, Relaxed);
        for writer in writers {
            writer.join().expect("writer");
        }
    }
    eprintln!(
        "kill -9 under load, {ROUNDS} rounds in {:.1} s: kept {kept}, in flight and kept {in_flight_seen}, lost {lost}, wrong {wrong}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(wrong, 0, "a torn, stale or misplaced value was served");
    (kept, lost)
}

fn parse_get(reply: &[u8], key: u64) -> Option<Vec<u8>> {
    if reply == b"END\r\n" {
        return None;
    }
    let header_end = reply.windows(2).position(|w| w == b"\r\n").expect("a header line");
    let header = String::from_utf8_lossy(&reply[..header_end]).into_owned();
    let fields: Vec<&str> = header.split(' ').collect();
    assert_eq!(&fields[..3], &["VALUE", &format!("k{key}"), "0"], "{header}");
    let len: usize = fields[3].parse().expect("length");
    let body = &reply[header_end + 2..];
    assert_eq!(&body[len..], b"\r\nEND\r\n", "{header}");
    Some(body[..len].to_vec())
}

#[allow(clippy::too_many_arguments)]
fn write_until_killed(
    writer: u64,
    port: u16,
    mut seed: u64,
    model: &Mutex<Vec<KeyState>>,
    stop: &AtomicBool,
    acked_sets: &AtomicU64,
    keys: u64,
    writers: u64,
) {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_nodelay(true);
    let mut reply = [0u8; 64];
    while !stop.load(Relaxed) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let key = (seed % (keys / writers)) * writers + writer;
        // One request in ten a delete, the rest sets of the key's next version.
        let delete = (seed >> 32) % 10 == 0;
        let version = {
            let mut model = model.lock().unwrap();
            let state = &mut model[key as usize];
            if delete {
                state.in_flight = Some(DELETE);
                DELETE
            } else {
                state.next += 1;
                state.in_flight = Some(state.next);
                state.next
            }
        };
        let request = if delete {
            format!("delete k{key}\r\n").into_bytes()
        } else {
            let value = versioned(key, version);
            let mut request = format!("set k{key} 0 0 {}\r\n", value.len()).into_bytes();
            request.extend_from_slice(&value);
            request.extend_from_slice(b"\r\n");
            request
        };
        if stream.write_all(&request).is_err() {
            return;
        }
        let mut got = 0;
        while !reply[..got].ends_with(b"\r\n") {
            match stream.read(&mut reply[got..]) {
                Ok(0) | Err(_) => return,
                Ok(n) => got += n,
            }
        }
        let expected: &[&[u8]] = if delete { &[b"DELETED\r\n", b"NOT_FOUND\r\n"] } else { &[b"STORED\r\n"] };
        assert!(expected.contains(&&reply[..got]), "{:?}", String::from_utf8_lossy(&reply[..got]));
        let mut model = model.lock().unwrap();
        let state = &mut model[key as usize];
        state.acked = (!delete).then_some(version);
        state.in_flight = None;
        acked_sets.fetch_add(1, Relaxed);
    }
}
