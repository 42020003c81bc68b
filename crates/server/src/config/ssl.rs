//! The `-o ssl_*` options (`-Z`), as memcached reads them; the TLS itself is
//! `net::tls`.

use std::path::PathBuf;

/// Seconds a connection may take to finish its handshake before it is closed (the default of
/// `-o ssl_handshake_timeout`).
pub const HANDSHAKE_SECS: u32 = 10;

/// memcached's `SSL_FILETYPE_PEM` and `SSL_FILETYPE_ASN1` (`ssl_keyformat`).
pub const KEYFORMAT_PEM: i64 = 1;
pub const KEYFORMAT_ASN1: i64 = 2;

/// The `-o ssl_*` options, as memcached reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `ssl_chain_cert`: the server's certificate chain (PEM).
    pub chain_cert: Option<PathBuf>,
    /// `ssl_key`: its private key.
    pub key: Option<PathBuf>,
    /// `ssl_keyformat`: 1 (PEM) or 2 (DER).
    pub keyformat: i64,
    /// `ssl_verify_mode`: 0 none, 1 request, 2 require, 3 once.
    pub verify_mode: u8,
    /// `ssl_ciphers`: an OpenSSL cipher list.
    pub ciphers: Option<String>,
    /// `ssl_ca_cert`: the CAs client certificates must be signed by.
    pub ca_cert: Option<PathBuf>,
    /// `ssl_wbuf_size` in bytes: the most a connection's TLS output holds before the socket
    /// takes it.
    pub wbuf_bytes: usize,
    /// `ssl_session_cache`: resume sessions (TLS 1.2 session ids, TLS 1.3 tickets).
    pub session_cache: bool,
    /// `ssl_kernel_tls`.
    pub kernel_tls: bool,
    /// `ssl_min_version`: 0 (TLS 1.0) to 3 (TLS 1.3).
    pub min_version: u8,
    /// `ssl_allow_plaintext` (quicksilver's): UDP and the native ports may run beside -Z,
    /// without TLS.
    pub allow_plaintext: bool,
    /// `ssl_handshake_timeout` (quicksilver's): seconds a handshake may take.
    pub handshake_secs: u32,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            chain_cert: None,
            key: None,
            keyformat: KEYFORMAT_PEM,
            verify_mode: 0,
            ciphers: None,
            ca_cert: None,
            wbuf_bytes: 16 * 1024,
            session_cache: false,
            kernel_tls: false,
            min_version: 2,
            allow_plaintext: false,
            handshake_secs: HANDSHAKE_SECS,
        }
    }
}

impl Settings {
    /// memcached's `ssl_verify_mode` figure in `stats settings`: OpenSSL's flags
    /// (PEER 1, FAIL_IF_NO_PEER_CERT 2, CLIENT_ONCE 4).
    pub fn verify_flags(&self) -> u8 {
        match self.verify_mode {
            0 => 0,
            1 => 1,
            2 => 3,
            _ => 7,
        }
    }

    /// memcached's name for `ssl_min_version`.
    pub fn min_version_text(&self) -> &'static str {
        ["tlsv1.0", "tlsv1.1", "tlsv1.2", "tlsv1.3"]
            .get(self.min_version as usize)
            .copied()
            .unwrap_or("unknown")
    }
}
