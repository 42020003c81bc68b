//! The gates a connection passes, loaded once at start: SASL (-S) and ASCII (-Y) passwords,
//! and TLS (-Z).

use crate::config::{Config, Extended};
use crate::net::tls;
use crate::session::auth;
use crate::sys;
use std::sync::Arc;

/// The gates a connection passes: SASL (-S) and ASCII (-Y) passwords, and TLS (-Z).
pub struct Credentials {
    sasl_passwords: Option<auth::Passwords>,
    ascii_passwords: Option<auth::Passwords>,
    tls: Option<Arc<tls::Context>>,
}

impl Credentials {
    /// Loads the password files and the TLS context the command line names.
    pub fn load(config: &Config, extended: &Extended) -> Result<Credentials, String> {
        let sasl_passwords = match config.sasl {
            true => {
                let path = std::env::var_os("MEMCACHED_SASL_PWDB").ok_or(
                        "-S: set MEMCACHED_SASL_PWDB to a file of user:password lines (quicksilver's SASL is PLAIN against that file)",
                    )?;
                Some(auth::Passwords::load(std::path::Path::new(&path))?)
            }
            false => None,
        };
        let ascii_passwords = config.auth_file.as_deref().map(auth::Passwords::load).transpose()?;
        let tls = match config.enable_ssl {
            true => Some(Arc::new(tls::Context::new(&extended.ssl, sys::now_secs())?)),
            false => None,
        };
        if tls.is_some() && (config.udp_port() != 0 || config.native_port != 0) {
            eprintln!(
                "quicksilver: -Z with -o ssl_allow_plaintext: UDP{} serve plaintext (TLS covers TCP only)",
                if config.native_port != 0 { " and the native ports" } else { "" }
            );
        }
        Ok(Credentials { sasl_passwords, ascii_passwords, tls })
    }

    /// The server's authentication mode (-Y, -S), as connections meet it.
    pub fn modes(&self) -> auth::Modes<'_> {
        auth::Modes { ascii: self.ascii_passwords.as_ref(), sasl: self.sasl_passwords.as_ref() }
    }

    /// -S: the SASL users (MEMCACHED_SASL_PWDB).
    pub fn sasl(&self) -> Option<&auth::Passwords> {
        self.sasl_passwords.as_ref()
    }

    /// -Z: the TLS configuration and its figures.
    pub fn tls(&self) -> Option<&Arc<tls::Context>> {
        self.tls.as_ref()
    }
}
