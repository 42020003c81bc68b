//! A TLS client's settings for the tests: trusts tests/tls/ca.pem (tests/tls/gen.sh).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

pub fn cert_path(name: &str) -> String {
    format!("{}/tests/tls/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A client's TLS settings: trusts tests/tls/ca.pem, presents `identity` (a name in tests/tls/:
/// `client`, `rogue`) if given, speaks `versions`.
pub fn client_config(
    identity: Option<&str>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(cert_path("ca.pem")).expect("ca.pem") {
        roots.add(cert.expect("ca cert")).expect("root");
    }
    let builder =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)
            .expect("versions")
            .with_root_certificates(roots);
    let config = match identity {
        Some(name) => {
            let chain = CertificateDer::pem_file_iter(cert_path(&format!("{name}.pem")))
                .expect("client pem")
                .collect::<Result<Vec<_>, _>>()
                .expect("client cert");
            let key = PrivateKeyDer::from_pem_file(cert_path(&format!("{name}.key"))).expect("client key");
            builder.with_client_auth_cert(chain, key).expect("client auth")
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

pub const ALL_VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// A TLS stream to 127.0.0.1:`port` with `config`, its handshake done (from the client's side).
pub fn connect_with(
    port: u16,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    let name = ServerName::try_from("localhost").expect("name").to_owned();
    let session = rustls::ClientConnection::new(config, name).map_err(std::io::Error::other)?;
    let socket = TcpStream::connect(("127.0.0.1", port))?;
    socket.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut stream = rustls::StreamOwned::new(session, socket);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock)?;
    }
    Ok(stream)
}

/// A TLS stream to 127.0.0.1:`port`, trusting tests/tls/ca.pem, presenting no certificate.
pub fn connect(port: u16) -> std::io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    connect_with(port, client_config(None, ALL_VERSIONS))
}
