//! The admin HTTP listener (`-o metrics_port=PORT` on -l's first address, or
//! `-o metrics_listen=HOST:PORT`): `GET /metrics` (Prometheus or OpenMetrics text),
//! `GET /healthz` (the process serves) and `GET /readyz` (it takes traffic: not while a
//! memory file or a flash tier is being loaded, nor while `--warm-from` copies items); anything
//! else is a 404.
//!
//! It runs on threads of its own, never on a worker's loop: a scrape formats thousands of
//! lines, which on a worker would stall that worker's clients. One thread accepts; each
//! connection gets a short-lived thread with a small stack that answers one request and
//! closes. What they can cost is bounded: at most [`CONNECTIONS_MAX`] at once, a request head
//! of at most [`HEAD_BYTES_MAX`], and [`DEADLINE`] for the whole exchange; a waiting one sleeps
//! in a blocking read, costing no CPU. When all are taken, a new connection takes the place of
//! the oldest that has not sent its request head yet (scrapers that connect and stay silent
//! cannot lock `/healthz` and `/readyz` out); only when every one is busy answering is it
//! closed at accept.
//!
//! With -Z it speaks TLS with the server's certificate. Under -S or -Y, `/metrics` asks for
//! HTTP Basic credentials of one of their users; `/healthz` and `/readyz` answer anyone, and
//! say nothing but whether the server is up and ready.

use crate::net::tls;
use crate::session::auth::Modes;
use crate::shared::Shared;
use base64::Engine as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Connections served at once; more are closed as they are accepted.
pub const CONNECTIONS_MAX: usize = 16;
/// How long a new connection waits, at most, for evicted connections' threads to leave.
const LEAVING_WAIT_MS: u32 = 500;
/// The largest request head read (line and headers).
pub const HEAD_BYTES_MAX: usize = 8192;
/// How long one connection may take, from accept to its reply written.
pub const DEADLINE: Duration = Duration::from_secs(10);
/// A connection thread's stack.
const STACK_BYTES: usize = 256 << 10;

/// What the listener's threads share with the server.
struct State {
    /// The server's state, once its partitions are loaded.
    shared: OnceLock<Arc<Shared>>,
    /// Whether the workers take traffic.
    ready: AtomicBool,
    /// -Z's context.
    tls: Option<Arc<tls::Context>>,
    /// Connections being served now.
    open: AtomicUsize,
    /// The connections still reading their request head, oldest first: the ones a new
    /// connection may take the place of.
    waiting: Mutex<std::collections::VecDeque<Waiting>>,
}

/// A connection still reading its request head.
struct Waiting {
    /// Its accept number.
    id: u64,
    /// Its socket, to shut down.
    socket: TcpStream,
}

impl State {
    /// Shuts down the oldest connection still waiting for its request head (its thread's read
    /// ends, and it leaves); whether there was one.
    fn evict_oldest_waiting(&self) -> bool {
        let oldest = self.waiting.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
        oldest.is_some_and(|waiting| waiting.socket.shutdown(std::net::Shutdown::Both).is_ok())
    }

    /// Connection `id` has its head (or has ended): no longer one to take the place of.
    fn done_waiting(&self, id: u64) {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).retain(|waiting| waiting.id != id);
    }
}

/// The running admin listener.
pub struct Endpoint {
    state: Arc<State>,
    addr: SocketAddr,
}

impl Endpoint {
    /// Binds `addr` and starts accepting; `/readyz` says not ready until [`Endpoint::ready`].
    pub fn start(addr: SocketAddr, tls: Option<Arc<tls::Context>>) -> Result<Endpoint, String> {
        let listener =
            TcpListener::bind(addr).map_err(|error| format!("metrics listener {addr}: {error}"))?;
        let addr = listener.local_addr().map_err(|error| error.to_string())?;
        let state = Arc::new(State {
            shared: OnceLock::new(),
            ready: AtomicBool::new(false),
            tls,
            open: AtomicUsize::new(0),
            waiting: Default::default(),
        });
        let accepting = state.clone();
        std::thread::Builder::new()
            .name("metrics-http".into())
            .stack_size(STACK_BYTES)
            .spawn(move || accept(listener, accepting))
            .map_err(|error| format!("metrics listener thread: {error}"))?;
        Ok(Endpoint { state, addr })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's state, once its partitions are loaded: `/metrics` serves from then on.
    pub fn attach(&self, shared: Arc<Shared>) {
        let _ = self.state.shared.set(shared);
    }

    /// The workers take traffic: `/readyz` answers 200.
    pub fn ready(&self) {
        self.state.ready.store(true, Release);
    }
}

/// Accepts connections until the process ends, each served on a thread of its own.
fn accept(listener: TcpListener, state: Arc<State>) {
    for (id, stream) in (0u64..).zip(listener.incoming()) {
        let Ok(stream) = stream else {
            // EMFILE and the like: wait a little rather than spin on a full descriptor table.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        // Full: the new one takes the place of the oldest silent one (whose thread leaves at
        // once), within twice the bound while that thread is leaving.
        let full = state.open.load(Relaxed) >= CONNECTIONS_MAX;
        if full && !state.evict_oldest_waiting() {
            drop(stream);
            continue;
        }
        // Past twice the bound only while evicted threads are still leaving (a busy machine
        // schedules them late): wait for them a moment rather than drop a health probe.
        let mut waited = 0;
        while state.open.load(Relaxed) >= 2 * CONNECTIONS_MAX && waited < LEAVING_WAIT_MS {
            std::thread::sleep(Duration::from_millis(1));
            waited += 1;
        }
        if state.open.load(Relaxed) >= 2 * CONNECTIONS_MAX {
            drop(stream);
            continue;
        }
        let Ok(socket) = stream.try_clone() else { continue };
        state.open.fetch_add(1, Relaxed);
        state.waiting.lock().unwrap_or_else(|e| e.into_inner()).push_back(Waiting { id, socket });
        let serving = state.clone();
        let spawned = std::thread::Builder::new().name("metrics-conn".into()).stack_size(STACK_BYTES).spawn(
            move || {
                serve(stream, id, &serving);
                serving.done_waiting(id);
                serving.open.fetch_sub(1, Relaxed);
            },
        );
        if spawned.is_err() {
            state.done_waiting(id);
            state.open.fetch_sub(1, Relaxed);
        }
    }
}

/// Answers one request on `stream` (over TLS under -Z) and closes it.
fn serve(stream: TcpStream, id: u64, state: &State) {
    let deadline = Instant::now() + DEADLINE;
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(DEADLINE));
    match &state.tls {
        None => exchange(stream.try_clone().ok(), stream, (state, id), deadline),
        Some(context) => {
            let Ok(session) = rustls::ServerConnection::new(context.server_config()) else { return };
            let socket = stream.try_clone().ok();
            let mut tls = rustls::StreamOwned::new(session, stream);
            exchange(socket, &mut tls, (state, id), deadline);
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    }
}

/// Reads a request head from `io` within `deadline` (`socket` sets each read's timeout), and
/// writes the reply.
fn exchange(
    socket: Option<TcpStream>,
    mut io: impl Read + Write,
    (state, id): (&State, u64),
    deadline: Instant,
) {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let reply = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        if let Some(socket) = &socket {
            let _ = socket.set_read_timeout(Some(left));
        }
        let read = match io.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        head.extend_from_slice(&chunk[..read]);
        if head.len() > HEAD_BYTES_MAX {
            break Reply::text(431, "request head too large\n");
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&head) {
            Ok(httparse::Status::Complete(_)) => {
                state.done_waiting(id);
                break answer(&request, state);
            }
            Ok(httparse::Status::Partial) => continue,
            Err(_) => break Reply::text(400, "bad request\n"),
        }
    };
    let _ = io.write_all(&reply.bytes());
    let _ = io.flush();
}

/// An HTTP reply.
struct Reply {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    head_only: bool,
    extra: &'static str,
}

impl Reply {
    fn text(status: u16, body: &str) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
            head_only: false,
            extra: "",
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            401 => "Unauthorized",
            404 => "Not Found",
            405 => "Method Not Allowed",
            431 => "Request Header Fields Too Large",
            _ => "Service Unavailable",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
            self.status,
            self.content_type,
            self.body.len(),
            self.extra
        )
        .into_bytes();
        if !self.head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

/// The reply to a parsed request.
fn answer(request: &httparse::Request<'_, '_>, state: &State) -> Reply {
    let method = request.method.unwrap_or("");
    let path = request.path.unwrap_or("").split('?').next().unwrap_or("");
    let mut reply = match (method, path) {
        ("GET" | "HEAD", "/healthz") => Reply::text(200, "ok\n"),
        ("GET" | "HEAD", "/readyz") => match (state.ready.load(Acquire), warming(state)) {
            (true, false) => Reply::text(200, "ready\n"),
            (true, true) => Reply::text(503, "warming\n"),
            (false, _) => Reply::text(503, "loading\n"),
        },
        ("GET" | "HEAD", "/metrics") => metrics(request, state),
        (_, "/healthz" | "/readyz" | "/metrics") => {
            let mut reply = Reply::text(405, "method not allowed\n");
            reply.extra = "Allow: GET, HEAD\r\n";
            reply
        }
        _ => Reply::text(404, "not found\n"),
    };
    reply.head_only = method == "HEAD";
    reply
}

/// Whether the server still copies items from a live node (`--warm-from`): not ready yet,
/// so a rolling replacement waits for this node to be warm before it replaces the next.
fn warming(state: &State) -> bool {
    state.shared.get().is_some_and(|shared| shared.warming.running())
}

/// `/metrics`: the exposition the scraper accepts, once the server is loaded and the
/// scraper has authenticated where the server asks for it.
fn metrics(request: &httparse::Request<'_, '_>, state: &State) -> Reply {
    let Some(shared) = state.shared.get() else {
        return Reply::text(503, "loading\n");
    };
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|header| header.name.eq_ignore_ascii_case(name))
            .map(|header| String::from_utf8_lossy(header.value).into_owned())
    };
    if !authorized(shared.credentials.modes(), header("authorization").as_deref()) {
        let mut reply = Reply::text(401, "unauthorized\n");
        reply.extra = "WWW-Authenticate: Basic realm=\"quicksilver\"\r\n";
        return reply;
    }
    let open_metrics = header("accept").is_some_and(|accept| accept.contains("application/openmetrics-text"));
    let ready = state.ready.load(Acquire) && !warming(state);
    let body = super::metrics::render(shared, ready, open_metrics);
    Reply {
        status: 200,
        content_type: if open_metrics { super::metrics::OPENMETRICS_TYPE } else { super::metrics::TEXT_TYPE },
        body: body.into_bytes(),
        head_only: false,
        extra: "",
    }
}

/// Whether `authorization` (the header's value) admits a scraper: always without -S and -Y,
/// else HTTP Basic credentials of one of their users.
fn authorized(modes: Modes<'_>, authorization: Option<&str>) -> bool {
    if modes.ascii.is_none() && modes.sasl.is_none() {
        return true;
    }
    let Some(encoded) = authorization.and_then(|value| value.trim().strip_prefix("Basic ")) else {
        return false;
    };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
        return false;
    };
    let Some(colon) = decoded.iter().position(|&byte| byte == b':') else { return false };
    let (user, password) = (&decoded[..colon], &decoded[colon + 1..]);
    modes.ascii.is_some_and(|passwords| passwords.check(user, password))
        | modes.sasl.is_some_and(|passwords| passwords.check(user, password))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::auth::Passwords;

    #[test]
    fn basic_credentials_are_checked_against_the_users() {
        let passwords = Passwords::parse(b"alice:secret\n").unwrap();
        let open = Modes { ascii: None, sasl: None };
        assert!(authorized(open, None));
        let sasl = Modes { ascii: None, sasl: Some(&passwords) };
        let basic = |text: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(text));
        assert!(authorized(sasl, Some(&basic("alice:secret"))));
        assert!(!authorized(sasl, Some(&basic("alice:wrong"))));
        assert!(!authorized(sasl, Some(&basic("alicesecret"))));
        assert!(!authorized(sasl, Some("Bearer x")));
        assert!(!authorized(sasl, None));
        let ascii = Modes { ascii: Some(&passwords), sasl: None };
        assert!(authorized(ascii, Some(&basic("alice:secret"))));
    }

    #[test]
    fn replies_carry_their_length_and_close() {
        let reply = Reply::text(404, "not found\n");
        let text = String::from_utf8(reply.bytes()).unwrap();
        assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"), "{text}");
        assert!(text.contains("Content-Length: 10\r\nConnection: close\r\n\r\nnot found\n"), "{text}");
    }
}
