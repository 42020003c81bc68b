//! TLS as memcached 1.6 does it: `-Z` and the `-o ssl_*` options, `refresh_certs`, and the
//! `ssl_*` statistics, over rustls (its `ring` provider) instead of OpenSSL.
//!
//! The handshake runs inside the worker's event loop like any other read: a connection's
//! `Stream::Tls` feeds what the socket holds to rustls and writes rustls's answer back, never
//! waiting. A handshake that does not finish within `ssl_handshake_timeout` seconds
//! ([`crate::config::ssl::HANDSHAKE_SECS`] unless set) is closed and counted
//! (`ssl_handshake_errors`), as are handshakes that fail.
//!
//! What differs from memcached's OpenSSL build (docs/COMPATIBILITY.md): TLS 1.2 and 1.3 only
//! (`ssl_min_version=0` or `1` still allow 1.2 and up), `ssl_ciphers` picks among rustls's TLS 1.2
//! suites by OpenSSL's names, `ssl_kernel_tls` is refused as by a memcached built without it.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
};
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

/// Sessions the server-side cache keeps (`-o ssl_session_cache`): OpenSSL's default size.
const SESSION_CACHE_ENTRIES: usize = 20 * 1024;

pub use crate::config::ssl::{Settings, KEYFORMAT_ASN1, KEYFORMAT_PEM};

/// The server's TLS state: the configuration new connections take (swapped by
/// `refresh_certs`), and the figures `stats` shows.
pub struct Context {
    settings: Settings,
    config: RwLock<Arc<rustls::ServerConfig>>,
    /// The configuration of `mtls:` listeners (memcached 1.6.45): a client certificate is
    /// required, verified against `ssl_ca_cert` (or, without one, the server's own chain).
    mutual: RwLock<Arc<rustls::ServerConfig>>,
    sessions: Arc<SessionCache>,
    /// `ssl_handshake_errors`.
    pub handshake_errors: AtomicU64,
    /// Handshakes that finished (`/metrics`: quicksilver_tls_handshakes_total).
    pub handshakes: AtomicU64,
    /// `ssl_proto_errors` (memcached 1.6.45): sessions that broke after their handshake.
    pub proto_errors: AtomicU64,
    /// When the certificates were last loaded (the server's clock, seconds).
    refreshed_secs: AtomicU32,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Context {
    /// Loads the certificates and builds the configuration; the error is memcached's message.
    pub fn new(settings: &Settings, now_secs: u32) -> Result<Context, String> {
        let sessions = Arc::new(SessionCache {
            inner: rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES),
            new_sessions: AtomicU64::new(0),
        });
        let config = build(settings, &sessions)?;
        let mutual = build(&mutual_settings(settings), &sessions)?;
        Ok(Context {
            settings: settings.clone(),
            config: RwLock::new(config),
            mutual: RwLock::new(mutual),
            sessions,
            handshake_errors: AtomicU64::new(0),
            handshakes: AtomicU64::new(0),
            proto_errors: AtomicU64::new(0),
            refreshed_secs: AtomicU32::new(now_secs),
        })
    }

    /// The options it was built with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// `refresh_certs`: reads the certificate, key and CA files again. Connections already
    /// open keep what they negotiated; new ones get the new files. On failure nothing changes
    /// and the error is memcached's message.
    pub fn refresh(&self, now_secs: u32) -> Result<(), String> {
        let config = build(&self.settings, &self.sessions)?;
        let mutual = build(&mutual_settings(&self.settings), &self.sessions)?;
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
        *self.mutual.write().unwrap_or_else(|e| e.into_inner()) = mutual;
        self.refreshed_secs.store(now_secs, Relaxed);
        Ok(())
    }

    /// `time_since_server_cert_refresh`.
    pub fn secs_since_refresh(&self, now_secs: u32) -> u32 {
        now_secs.saturating_sub(self.refreshed_secs.load(Relaxed))
    }

    /// `ssl_new_sessions`: sessions the cache stored (resumed ones are not new).
    pub fn new_sessions(&self) -> u64 {
        self.sessions.new_sessions.load(Relaxed)
    }

    /// The configuration a new plain `-l` connection takes (the admin HTTP listener's too).
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.config.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A server-side TLS session for an accepted socket.
    /// `mutual`: an `mtls:` listener's, which requires the client's certificate.
    pub fn accept(&self, socket: mio::net::TcpStream, now_secs: u32, mutual: bool) -> io::Result<TlsStream> {
        let config = if mutual { &self.mutual } else { &self.config };
        let config = config.read().unwrap_or_else(|e| e.into_inner()).clone();
        let mut session = rustls::ServerConnection::new(config).map_err(io::Error::other)?;
        session.set_buffer_limit(Some(self.settings.wbuf_bytes.max(1024)));
        let deadline_secs = now_secs.saturating_add(self.settings.handshake_secs.max(1));
        Ok(TlsStream { socket, session, deadline_secs, handshaken: false, failed: false })
    }
}

/// The server-side session store behind `ssl_session_cache`, counting what it stores.
#[derive(Debug)]
struct SessionCache {
    inner: Arc<rustls::server::ServerSessionMemoryCache>,
    new_sessions: AtomicU64,
}

impl rustls::server::StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let stored = self.inner.put(key, value);
        if stored {
            self.new_sessions.fetch_add(1, Relaxed);
        }
        stored
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.get(key)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.take(key)
    }

    fn can_cache(&self) -> bool {
        self.inner.can_cache()
    }
}

/// rustls's TLS 1.2 suites and OpenSSL's names for them (what `ssl_ciphers` lists).
const OPENSSL_NAMES: &[(rustls::CipherSuite, &str)] = &[
    (rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, "ECDHE-ECDSA-AES256-GCM-SHA384"),
    (rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, "ECDHE-ECDSA-AES128-GCM-SHA256"),
    (rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, "ECDHE-ECDSA-CHACHA20-POLY1305"),
    (rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, "ECDHE-RSA-AES256-GCM-SHA384"),
    (rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, "ECDHE-RSA-AES128-GCM-SHA256"),
    (rustls::CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, "ECDHE-RSA-CHACHA20-POLY1305"),
];

/// Whether an OpenSSL cipher-list word names `name`: the name itself, a keyword for every
/// suite, or one of the name's parts (`ECDHE`, `AES256`, `CHACHA20`, `ECDSA`, ...).
fn names(word: &str, name: &str) -> bool {
    let word = word.strip_prefix('a').filter(|rest| *rest == "RSA" || *rest == "ECDSA").unwrap_or(word);
    let word = match word {
        "ALL" | "DEFAULT" | "HIGH" | "SECURE" | "TLSv1.2" | "kEECDH" | "EECDH" | "kECDHE" => return true,
        "AESGCM" => "GCM",
        "CHACHA20-POLY1305" => "POLY1305",
        other => other,
    };
    word == name || name.split('-').any(|part| part == word)
}

/// The TLS 1.2 suites an OpenSSL cipher list picks (words split by `:` or spaces; `!WORD`
/// and `-WORD` remove, `+WORD` and `@STRENGTH` change only OpenSSL's order). TLS 1.3's suites
/// are not chosen by this list, in OpenSSL either.
fn pick_suites(list: &str, suites: &[rustls::SupportedCipherSuite]) -> Vec<rustls::SupportedCipherSuite> {
    let mut chosen: Vec<rustls::CipherSuite> = Vec::new();
    let mut removed: Vec<rustls::CipherSuite> = Vec::new();
    for word in list.split([':', ' ']).filter(|word| !word.is_empty()) {
        let (remove, word) = match word.as_bytes()[0] {
            b'!' | b'-' => (true, &word[1..]),
            b'+' | b'@' => continue,
            _ => (false, word),
        };
        for &(suite, name) in OPENSSL_NAMES {
            if names(word, name) {
                if remove {
                    removed.push(suite);
                } else if !chosen.contains(&suite) {
                    chosen.push(suite);
                }
            }
        }
    }
    suites
        .iter()
        .filter(|suite| {
            let id = suite.suite();
            suite.version() == &rustls::version::TLS13 || (chosen.contains(&id) && !removed.contains(&id))
        })
        .copied()
        .collect()
}

fn load_key(path: &Path, format: i64) -> Result<PrivateKeyDer<'static>, String> {
    let failed = |why: String| format!("Error loading the key: {} : {why}", path.display());
    match format {
        KEYFORMAT_PEM => PrivateKeyDer::from_pem_file(path).map_err(|e| failed(e.to_string())),
        KEYFORMAT_ASN1 => {
            let der = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
            // DER carries no label: the first encoding a signing key can be made of.
            let provider = rustls::crypto::ring::default_provider();
            let candidates: [PrivateKeyDer<'static>; 3] = [
                PrivatePkcs8KeyDer::from(der.clone()).into(),
                PrivatePkcs1KeyDer::from(der.clone()).into(),
                PrivateSec1KeyDer::from(der).into(),
            ];
            candidates
                .into_iter()
                .find(|key| provider.key_provider.load_private_key(key.clone_key()).is_ok())
                .ok_or_else(|| failed("not a PKCS#8, PKCS#1 or SEC1 private key".into()))
        }
        other => Err(failed(format!("ssl_keyformat {other} is not supported (1: PEM, 2: DER)"))),
    }
}

fn load_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let failed = |why: String| format!("Error loading the {what}: {} : {why}", path.display());
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| failed(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| failed(e.to_string()))?;
    if certs.is_empty() {
        return Err(failed("no certificate in the file".into()));
    }
    Ok(certs)
}

/// The rustls configuration for `settings`, from the files as they are now.
/// The settings of `mtls:` listeners: peer verification required (memcached's
/// SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT), against the CA if one is given.
fn mutual_settings(settings: &Settings) -> Settings {
    let mut mutual = settings.clone();
    mutual.verify_mode = 3;
    if mutual.ca_cert.is_none() {
        mutual.ca_cert = settings.chain_cert.clone();
    }
    mutual
}

fn build(settings: &Settings, sessions: &Arc<SessionCache>) -> Result<Arc<rustls::ServerConfig>, String> {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(list) = &settings.ciphers {
        provider.cipher_suites = pick_suites(list, &provider.cipher_suites);
        let tls12 = provider.cipher_suites.iter().any(|suite| suite.version() == &rustls::version::TLS12);
        if !tls12 {
            return Err(format!("Error setting the provided cipher(s): {list}"));
        }
    }
    let provider = Arc::new(provider);
    let versions: &[&'static rustls::SupportedProtocolVersion] = if settings.min_version >= 3 {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS12, &rustls::version::TLS13]
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| format!("Error setting up TLS: {e}"))?;
    let chain_path = settings
        .chain_cert
        .as_deref()
        .ok_or("Error loading the certificate chain: (null) : no ssl_chain_cert given")?;
    let chain = load_certs(chain_path, "certificate chain")?;
    let key_path = settings.key.as_deref().unwrap_or(chain_path);
    let key = load_key(key_path, settings.keyformat)?;
    let builder = if settings.verify_mode == 0 {
        builder.with_no_client_auth()
    } else {
        let ca_path = settings.ca_cert.as_deref().ok_or_else(|| {
            format!(
                "ssl_verify_mode={} verifies client certificates: give the CA that signs them (-o ssl_ca_cert=FILE)",
                settings.verify_mode
            )
        })?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in load_certs(ca_path, "CA certificate")? {
            roots
                .add(cert)
                .map_err(|e| format!("Error loading the CA certificate: {} : {e}", ca_path.display()))?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        let verifier = if settings.verify_mode == 1 { verifier.allow_unauthenticated() } else { verifier };
        let verifier = verifier
            .build()
            .map_err(|e| format!("Error loading the CA certificate: {} : {e}", ca_path.display()))?;
        builder.with_client_cert_verifier(verifier)
    };
    let mut config =
        builder.with_single_cert(chain, key).map_err(|e| format!("Error validating the certificate: {e}"))?;
    if settings.session_cache {
        config.session_storage = sessions.clone();
    } else {
        // memcached's SSL_SESS_CACHE_OFF: no session is resumed.
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
    }
    Ok(Arc::new(config))
}

/// A TLS connection: the socket and its rustls session.
pub struct TlsStream {
    socket: mio::net::TcpStream,
    session: rustls::ServerConnection,
    /// When its handshake must have finished (the server's clock, seconds).
    deadline_secs: u32,
    /// Its handshake finished (and was seen by the worker).
    handshaken: bool,
    /// Its handshake failed.
    failed: bool,
}

impl TlsStream {
    /// The socket.
    pub fn socket(&self) -> &mio::net::TcpStream {
        &self.socket
    }

    /// The socket, to register with the poll.
    pub fn socket_mut(&mut self) -> &mut mio::net::TcpStream {
        &mut self.socket
    }

    /// Whether the handshake is still running after its time (`now_secs`).
    pub fn handshake_overdue(&self, now_secs: u32) -> bool {
        self.session.is_handshaking() && now_secs >= self.deadline_secs
    }

    /// Whether a read failed in the handshake since the last call (a counted error).
    pub fn take_handshake_failure(&mut self) -> bool {
        std::mem::take(&mut self.failed)
    }

    /// Once, when the handshake has finished: the client certificate's common name (`None`
    /// without a client certificate or a common name). `Some(None)` when it finished
    /// without a client name; `None` while it runs or after the first report.
    pub fn take_handshake(&mut self) -> Option<Option<String>> {
        if self.handshaken || self.session.is_handshaking() {
            return None;
        }
        self.handshaken = true;
        Some(
            self.session
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(|cert| common_name(cert)),
        )
    }

    /// Writes what rustls holds for the socket (handshake messages, records, alerts).
    fn flush_records(&mut self) -> io::Result<()> {
        while self.session.wants_write() {
            if self.session.write_tls(&mut self.socket)? == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
        }
        Ok(())
    }

    /// Tells the peer the connection ends (close_notify), if the socket takes it now.
    pub fn close(&mut self) {
        if !self.session.is_handshaking() {
            self.session.send_close_notify();
        }
        let _ = self.flush_records();
    }
}

impl Read for TlsStream {
    /// Fills `buf` with plaintext until it is full or the socket has nothing more, so that a
    /// short read still means "drained" to the edge-triggered caller.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        loop {
            match self.session.reader().read(&mut buf[filled..]) {
                Ok(0) if filled < buf.len() => return Ok(filled), // close_notify
                Ok(read) => {
                    filled += read;
                    if filled == buf.len() {
                        return Ok(filled);
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                // The socket closed without close_notify: the end of input all the same.
                Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => {
                    if self.session.is_handshaking() {
                        self.failed = true;
                    }
                    return Ok(filled);
                }
                Err(error) => return if filled > 0 { Ok(filled) } else { Err(error) },
            }
            match self.session.read_tls(&mut self.socket) {
                Ok(_) => {}
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    // Handshake messages the socket could not take yet wait for writable.
                    match self.flush_records() {
                        Ok(()) => {}
                        Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                        Err(error) => return Err(error),
                    }
                    return if filled > 0 { Ok(filled) } else { Err(error) };
                }
                Err(error) => return Err(error),
            }
            let handshaking = self.session.is_handshaking();
            if let Err(error) = self.session.process_new_packets() {
                if self.session.is_handshaking() {
                    self.failed = true;
                }
                // The alert rustls queued goes out if the socket takes it.
                let _ = self.flush_records();
                return Err(io::Error::new(io::ErrorKind::InvalidData, error));
            }
            if handshaking && !self.session.is_handshaking() {
                // The client's last flight is acknowledged now, not by the delayed ACK: a
                // client with Nagle on holds its first request until it is (40 ms), where
                // memcached's OpenSSL sends session tickets that carry the ACK.
                let _ = socket2::SockRef::from(&self.socket).set_quickack(true);
            }
            match self.flush_records() {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Err(error),
            }
        }
    }
}

impl Write for TlsStream {
    /// Takes up to `ssl_wbuf_size` of plaintext once what rustls held before has gone to the
    /// socket; `WouldBlock` while it has not.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.flush_records()?;
        let taken = self.session.writer().write(buf)?;
        match self.flush_records() {
            Ok(()) => Ok(taken),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => Ok(taken),
            Err(error) => Err(error),
        }
    }

    /// Sends what rustls still holds; `WouldBlock` when the socket cannot take all of it.
    fn flush(&mut self) -> io::Result<()> {
        self.flush_records()
    }
}

/// The subject common name of a DER certificate (X.509's 2.5.4.3), as memcached's
/// `ssl_get_peer_cn` reads it. A small DER walk: certificate, tbsCertificate, then the
/// sixth element (subject) after the optional version.
pub fn common_name(cert: &[u8]) -> Option<String> {
    let (_, certificate, _) = der(cert)?;
    let (_, mut tbs, _) = der(certificate)?;
    let mut field = 0;
    let mut subject = None;
    while !tbs.is_empty() {
        let (tag, body, rest) = der(tbs)?;
        tbs = rest;
        if field == 0 && tag == 0xa0 {
            continue; // [0] version
        }
        // serial, signature, issuer, validity, subject
        if field == 4 {
            subject = Some(body);
            break;
        }
        field += 1;
    }
    let mut names = subject?;
    while !names.is_empty() {
        let (_, set, rest) = der(names)?;
        names = rest;
        let mut set = set;
        while !set.is_empty() {
            let (_, attribute, rest) = der(set)?;
            set = rest;
            let (tag, oid, value) = der(attribute)?;
            if tag == 0x06 && oid == [0x55, 0x04, 0x03] {
                let (_, text, _) = der(value)?;
                return Some(String::from_utf8_lossy(text).into_owned());
            }
        }
    }
    None
}

/// One DER element: its tag, its contents and what follows it.
fn der(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let count = (first & 0x7f) as usize;
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count].iter().fold(0usize, |len, &byte| (len << 8) | byte as usize);
        (len, &rest[count..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cipher_lists_pick_by_openssl_names() {
        let all = rustls::crypto::ring::default_provider().cipher_suites;
        let tls12 = |list: &str| {
            pick_suites(list, &all)
                .iter()
                .filter(|suite| suite.version() == &rustls::version::TLS12)
                .map(|suite| suite.suite())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            tls12("ECDHE-RSA-AES128-GCM-SHA256"),
            vec![rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
        );
        assert_eq!(tls12("HIGH:!ECDSA:!CHACHA20").len(), 2);
        assert_eq!(tls12("ALL").len(), 6);
        assert!(tls12("RC4-MD5").is_empty());
        // TLS 1.3's suites stay whatever the list says.
        assert_eq!(pick_suites("RC4-MD5", &all).len(), all.len() - 6);
    }

    #[test]
    fn der_walk_finds_the_common_name() {
        // SEQUENCE { SEQUENCE { [0]{INT 2}, INT 1, SEQ{}, SEQ{}, SEQ{}, subject } }
        let cn = b"client.test.com";
        let mut atv = vec![0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, cn.len() as u8];
        atv.extend_from_slice(cn);
        let mut seq = vec![0x30, atv.len() as u8];
        seq.extend_from_slice(&atv);
        let mut set = vec![0x31, seq.len() as u8];
        set.extend_from_slice(&seq);
        let mut subject = vec![0x30, set.len() as u8];
        subject.extend_from_slice(&set);
        let mut tbs_body = vec![0xa0, 3, 2, 1, 2, 0x02, 1, 1, 0x30, 0, 0x30, 0, 0x30, 0];
        tbs_body.extend_from_slice(&subject);
        let mut tbs = vec![0x30, tbs_body.len() as u8];
        tbs.extend_from_slice(&tbs_body);
        let mut cert = vec![0x30, 0x81, tbs.len() as u8];
        cert.extend_from_slice(&tbs);
        assert_eq!(common_name(&cert).as_deref(), Some("client.test.com"));
        assert_eq!(common_name(&cert[..cert.len() - 3]), None);
        assert_eq!(common_name(b""), None);
    }
}
