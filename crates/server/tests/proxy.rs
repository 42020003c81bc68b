//! quicksilver behind memcached 1.6.45's own proxy (routelib; scripts/build-memcached-proxy.sh
//! builds it, scripts/test.sh exports QS_MEMCACHED_PROXY): a sharded pool of three whose
//! text and meta transcripts through the proxy equal those with memcached backends, a replicated
//! pair (`route_allsync` writes, `route_failover` reads) that loses no read when a backend is
//! killed and holds its items after a warm restart (`-e`), and zones (`route_zfailover`) that
//! read from the local zone and fail over to the other.

mod common;

use common::{mask_reply, Client, MemoryFile, ServerProcess};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// memcached's proxy on a free port, routing as `routes` (routelib's Lua) says; killed when dropped.
struct Proxy {
    child: Child,
    port: u16,
    config: std::path::PathBuf,
}

impl Proxy {
    fn start(name: &str, routes: &str) -> Proxy {
        let program = std::env::var("QS_MEMCACHED_PROXY").unwrap_or_else(|_| {
            let home = std::env::var("HOME").unwrap_or_default();
            format!("{home}/.cache/quicksilver/proxy/memcached-1.6.45/memcached")
        });
        let config = std::env::temp_dir().join(format!("qs-proxy-{name}-{}.lua", std::process::id()));
        std::fs::write(&config, routes).unwrap();
        let port = common::free_port();
        let mut command = Command::new(&program);
        command.args(["-p", &port.to_string(), "-l", "127.0.0.1", "-U", "0", "-t", "1"]);
        command.arg("-o").arg(format!("proxy_config=routelib,proxy_arg={}", config.display()));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            command.args(["-u", "nobody"]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program} (scripts/build-memcached-proxy.sh): {e}"));
        let proxy = Proxy { child, port, config };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the proxy did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The proxy connects to its backends as its first requests arrive.
        std::thread::sleep(Duration::from_millis(200));
        proxy
    }

    fn connect(&self) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to the proxy");
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client::from_stream(stream)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config);
    }
}

/// routelib's Lua for one pool named `main` of `ports`, every command sent by key hash.
fn sharded(ports: &[u16]) -> String {
    let backends: Vec<String> = ports.iter().map(|port| format!("\"127.0.0.1:{port}\"")).collect();
    format!(
        "pools{{\n  main = {{ backends = {{ {} }} }}\n}}\nroutes{{\n  default = route_direct{{ child = \"main\" }}\n}}\n",
        backends.join(", ")
    )
}

/// The requests every setup runs through its proxy: text and meta commands, their errors.
const TRANSCRIPT: &[&str] = &[
    "set a 5 0 3\r\nabc\r\n",
    "get a\r\n",
    "gets a\r\n",
    "add a 0 0 1\r\nx\r\n",
    "replace a 7 0 2\r\nxy\r\n",
    "append a 0 0 1\r\nz\r\n",
    "prepend a 0 0 1\r\nw\r\n",
    "get a\r\n",
    "incr n 1\r\n",
    "set n 0 0 2\r\n10\r\n",
    "incr n 5\r\n",
    "decr n 20\r\n",
    "touch a 100\r\n",
    "touch none 100\r\n",
    "delete a\r\n",
    "delete a\r\n",
    "get a b c\r\n",
    "ms m 2 T0 F3\r\nhi\r\n",
    "mg m v f t s\r\n",
    "mg m k v c\r\n",
    "mg none v\r\n",
    "mg none v q\r\n",
    "ma cnt N0 J13\r\n",
    "ma cnt MI D4 v\r\n",
    "ma cnt MD D100 v\r\n",
    "ms m 2 MA\r\n!!\r\n",
    "mg m v\r\n",
    "ms m 1 I\r\nx\r\n",
    "mg m v c\r\n",
    "md m q\r\n",
    "mg m v\r\n",
    "ms add 1 ME\r\nx\r\n",
    "ms add 1 ME\r\ny\r\n",
    "md add I T30\r\n",
    "mg add v\r\n",
    "mg add v Q\r\n",
];

/// The transcript's replies through `proxy`, CAS values masked (each request is followed by
/// `mn`, so quiet ones answer nothing).
fn transcript(proxy: &Proxy) -> Vec<Vec<String>> {
    let mut client = proxy.connect();
    let mut cas = String::new();
    TRANSCRIPT.iter().map(|request| mask_reply(&client.call(request.as_bytes()), &mut cas, true)).collect()
}

#[test]
fn a_sharded_pool_behind_the_proxy_answers_as_memcached_backends_do() {
    let memcached: Vec<ServerProcess> = (0..3).map(|_| ServerProcess::memcached(&[])).collect();
    let quicksilver: Vec<ServerProcess> = (0..3).map(|_| ServerProcess::quicksilver(&["-t", "2"])).collect();
    let theirs = Proxy::start("mc", &sharded(&memcached.iter().map(|s| s.port).collect::<Vec<_>>()));
    let ours = Proxy::start("qs", &sharded(&quicksilver.iter().map(|s| s.port).collect::<Vec<_>>()));
    let (want, got) = (transcript(&theirs), transcript(&ours));
    for ((request, want), got) in TRANSCRIPT.iter().zip(&want).zip(&got) {
        assert_eq!(got, want, "{request:?} through the proxy");
    }
    // Keys spread over the three, and each reads back through the proxy.
    let mut client = ours.connect();
    for i in 0..300 {
        assert_eq!(client.call(format!("set key:{i} 0 0 1\r\nv\r\n").as_bytes()), b"STORED\r\n");
    }
    for i in 0..300 {
        assert_eq!(client.call(format!("mg key:{i} v\r\n").as_bytes()), b"VA 1\r\nv\r\n");
    }
    for server in &quicksilver {
        let items = common::stat(&mut server.connect(), "curr_items");
        assert!(items > 30, "a backend holds {items} of 300 keys");
    }
}

/// Two pools of one backend each: writes to both (`route_allsync`), reads from the first that
/// answers (`route_failover`).
fn replicated(a: u16, b: u16) -> String {
    format!(
        "pools{{\n  a = {{ backends = {{ \"127.0.0.1:{a}\" }} }},\n  b = {{ backends = {{ \"127.0.0.1:{b}\" }} }},\n}}\n\
         routes{{\n  cmap = {{\n    set = route_allsync{{ children = {{ \"a\", \"b\" }} }},\n    \
         ms = route_allsync{{ children = {{ \"a\", \"b\" }} }},\n    \
         delete = route_allsync{{ children = {{ \"a\", \"b\" }} }},\n    \
         md = route_allsync{{ children = {{ \"a\", \"b\" }} }},\n  }},\n  \
         default = route_failover{{ children = {{ \"a\", \"b\" }} }},\n}}\n"
    )
}

#[test]
fn a_replicated_pair_loses_no_read_when_a_backend_dies_and_comes_back_warm() {
    let file = MemoryFile::new("proxy-replica");
    let args = ["-m", "64", "-e", file.arg()];
    let a = ServerProcess::quicksilver(&[]);
    let b = ServerProcess::quicksilver(&args);
    let b_port = b.port;
    let proxy = Proxy::start("replicated", &replicated(a.port, b_port));
    let mut client = proxy.connect();
    for i in 0..200 {
        assert_eq!(client.call(format!("set key:{i} 0 0 1\r\nv\r\n").as_bytes()), b"STORED\r\n");
    }
    for server in [&a, &b] {
        assert_eq!(common::stat(&mut server.connect(), "curr_items"), 200);
    }
    // b dies: every read still hits (from a).
    drop(b);
    for i in 0..200 {
        let want = format!("VALUE key:{i} 0 1\r\nv\r\nEND\r\n").into_bytes();
        assert_eq!(client.call(format!("get key:{i}\r\n").as_bytes()), want, "get key:{i}");
    }
    // A write while b is down: a stores it, and route_allsync reports b's failure.
    let reply = client.call(b"set late 0 0 1\r\nx\r\n");
    assert!(reply.starts_with(b"SERVER_ERROR"), "{}", String::from_utf8_lossy(&reply));
    assert_eq!(a.connect().call(b"mg late v\r\n"), b"VA 1\r\nx\r\n");
    // b comes back on its port from its memory file: it holds what it held.
    let b = ServerProcess::quicksilver_on(b_port, &args).expect("b restarts on its port");
    assert_eq!(common::stat(&mut b.connect(), "curr_items"), 200);
    for i in (0..200).step_by(17) {
        assert_eq!(b.connect().call(format!("mg key:{i} v\r\n").as_bytes()), b"VA 1\r\nv\r\n");
    }
    // And the proxy sends it writes again.
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.call(b"set again 0 0 1\r\ny\r\n") != b"STORED\r\n" {
        assert!(Instant::now() < deadline, "the proxy did not take b back");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(b.connect().call(b"mg again v\r\n"), b"VA 1\r\ny\r\n");
}

#[test]
fn zones_read_locally_and_fail_over_to_the_other_zone() {
    let near = ServerProcess::quicksilver(&[]);
    let far = ServerProcess::quicksilver(&[]);
    let routes = format!(
        "local_zone(\"z1\")\npools{{\n  z1 = {{ backends = {{ \"127.0.0.1:{}\" }} }},\n  z2 = {{ backends = {{ \"127.0.0.1:{}\" }} }},\n}}\n\
         routes{{\n  cmap = {{\n    set = route_allsync{{ children = {{ \"z1\", \"z2\" }} }},\n  }},\n  \
         default = route_zfailover{{ children = {{ z1 = \"z1\", z2 = \"z2\" }} }},\n}}\n",
        near.port, far.port
    );
    let proxy = Proxy::start("zones", &routes);
    let mut client = proxy.connect();
    assert_eq!(client.call(b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n");
    // Reads go to the local zone only while it hits.
    let before = common::stat(&mut far.connect(), "cmd_get");
    for _ in 0..20 {
        assert_eq!(client.call(b"get k\r\n"), b"VALUE k 0 1\r\nv\r\nEND\r\n");
    }
    assert_eq!(common::stat(&mut near.connect(), "get_hits"), 20);
    assert_eq!(common::stat(&mut far.connect(), "cmd_get"), before);
    // A key only the far zone holds is found there.
    assert_eq!(far.connect().call(b"set only-far 0 0 1\r\nf\r\n"), b"STORED\r\n");
    assert_eq!(client.call(b"get only-far\r\n"), b"VALUE only-far 0 1\r\nf\r\nEND\r\n");
    // The local zone dies: reads fail over.
    drop(near);
    assert_eq!(client.call(b"get k\r\n"), b"VALUE k 0 1\r\nv\r\nEND\r\n");
}

/// Sends `signal` to `server`'s process.
fn signal(server: &ServerProcess, signal: i32) {
    // SAFETY: kill has no memory preconditions; the pid is our own child's.
    assert_eq!(unsafe { libc::kill(server.pid() as i32, signal) }, 0);
}

/// `request` through `client`, with how long its reply took.
fn timed(client: &mut Client, request: &[u8]) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let reply = client.call(request);
    (reply, started.elapsed())
}

/// A replicated pair whose first backend stops (SIGSTOP: it reads nothing, answers nothing)
/// and then turns slow (stopped 300 ms of every 350): the proxy's read timeout (0.5 s here)
/// fires, so every read is answered from the other backend within about a second and no
/// client waits on the stopped one; a write reports the stopped one's failure as `route_allsync`
/// does. What piles up meanwhile in the stopped backend's sockets (the proxy's requests, and a
/// client of its own that pipelines 48 MB of sets too large to store) is read once it runs
/// again within the client memory budget: its RSS grows by less than 16 MB, the connection
/// stays in step, and the proxy takes the backend back.
#[test]
fn a_stopped_or_slow_backend_times_out_at_the_proxy_and_its_backlog_stays_bounded() {
    let a = ServerProcess::quicksilver(&["-m", "64"]);
    let b = ServerProcess::quicksilver(&["-m", "64"]);
    let routes = format!("settings{{ backend_read_timeout = 0.5 }}\n{}", replicated(a.port, b.port));
    let proxy = Proxy::start("stopped", &routes);
    let mut client = proxy.connect();
    for i in 0..100 {
        assert_eq!(client.call(format!("set key:{i} 0 0 1\r\nv\r\n").as_bytes()), b"STORED\r\n");
    }
    let rss_before = common::rss_bytes(a.pid());
    let mut direct = a.connect();
    signal(&a, libc::SIGSTOP);
    for i in 0..10 {
        let (reply, took) = timed(&mut client, format!("get key:{i}\r\n").as_bytes());
        assert_eq!(reply, format!("VALUE key:{i} 0 1\r\nv\r\nEND\r\n").into_bytes(), "get key:{i}");
        assert!(took < Duration::from_secs(3), "get key:{i} waited {took:?} on the stopped backend");
    }
    let (reply, took) = timed(&mut client, b"set late 0 0 1\r\nx\r\n");
    // The write times out at the stopped backend (SERVER_ERROR), or, once the proxy has marked
    // that backend down after the reads' timeouts (which a busy machine's slower turns can
    // bring about), goes to the other alone (STORED): either way it does not wait.
    let answered = reply.starts_with(b"SERVER_ERROR") || reply == b"STORED\r\n";
    assert!(answered, "{}", String::from_utf8_lossy(&reply));
    assert!(took < Duration::from_secs(3), "the write waited {took:?}");
    // A client of its own pipelines 48 MB of sets too large to store at the stopped backend
    // (the socket buffers take what they can; the rest waits in the writer thread).
    let writer = std::thread::spawn(move || {
        let value = vec![b'x'; 2 << 20];
        for i in 0..24 {
            let mut request = format!("set big:{i} 0 0 {} noreply\r\n", value.len()).into_bytes();
            request.extend_from_slice(&value);
            request.extend_from_slice(b"\r\n");
            direct.send(&request);
        }
        direct
    });
    std::thread::sleep(Duration::from_millis(500));
    // Slow: stopped 300 ms of every 350 for three seconds, reads still answered in time.
    let slow = {
        let pid = a.pid() as i32;
        std::thread::spawn(move || {
            for _ in 0..9 {
                // SAFETY: as in `signal`.
                unsafe { libc::kill(pid, libc::SIGCONT) };
                std::thread::sleep(Duration::from_millis(50));
                // SAFETY: as in `signal`.
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                std::thread::sleep(Duration::from_millis(300));
            }
            // SAFETY: as in `signal`.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        })
    };
    let mut slowest = Duration::ZERO;
    for i in 10..40 {
        let (reply, took) = timed(&mut client, format!("get key:{i}\r\n").as_bytes());
        assert_eq!(reply, format!("VALUE key:{i} 0 1\r\nv\r\nEND\r\n").into_bytes(), "get key:{i}");
        assert!(took < Duration::from_secs(3), "get key:{i} waited {took:?} on the slow backend");
        slowest = slowest.max(took);
    }
    slow.join().unwrap();
    eprintln!("slow backend: the slowest read through the proxy took {slowest:?}");
    let mut direct = writer.join().unwrap();
    // Every one read to its end and refused (its error, if noreply lets one through, comes
    // first), the connection in step.
    let reply = direct.call(b"mg key:0 v\r\n");
    assert!(reply.ends_with(b"VA 1\r\nv\r\n"), "{}", String::from_utf8_lossy(&reply));
    let grown = common::rss_bytes(a.pid()).saturating_sub(rss_before);
    eprintln!("stopped and slow backend: RSS grew {} KB after 48 MB of backlog", grown >> 10);
    assert!(grown < 16 << 20, "48 MB of backlog grew the backend by {} MB", grown >> 20);
    // Running again, the backend is taken back: writes reach both.
    let deadline = Instant::now() + Duration::from_secs(15);
    while client.call(b"set again 0 0 1\r\ny\r\n") != b"STORED\r\n" {
        assert!(Instant::now() < deadline, "the proxy did not take the backend back");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(a.connect().call(b"mg again v\r\n"), b"VA 1\r\ny\r\n");
}
