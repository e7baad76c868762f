//! HTTPS for the sim ([`crate::SimBuilder::tls`]): a CA and a server certificate for
//! `127.0.0.1`, `::1` and `localhost`, made in memory at start, and the listener that serves
//! through them. kubectl (client-go) sends a kubeconfig's token and `--as` only over TLS, so
//! this is what lets kubectl authenticate to a sim with RBAC on.

use axum::serve::Listener;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The names the server certificate is valid for: every loopback name a client may use.
pub const SERVER_NAMES: [&str; 3] = ["127.0.0.1", "::1", "localhost"];

/// How long a client may take to finish its TLS handshake before its connection is dropped
/// (generous: a loaded machine; short enough that a stalled client does not linger).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the certificates or the TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Key or certificate generation failed.
    #[error("generating the sim's certificates: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the certificate or key.
    #[error("configuring TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// A fresh CA (its key is dropped once it signed) and the server certificate it issued.
pub struct Certificates {
    ca_der: CertificateDer<'static>,
    ca_pem: String,
    server_der: CertificateDer<'static>,
    server_key: PrivatePkcs8KeyDer<'static>,
}

impl Certificates {
    /// Generates a CA (`kubeplug-sim CA`) and a server certificate signed by it for
    /// [`SERVER_NAMES`], both ECDSA P-256.
    pub fn generate() -> Result<Self, TlsError> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "kubeplug-sim CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let server_key = KeyPair::generate()?;
        let mut params = CertificateParams::new(
            SERVER_NAMES
                .map(String::from)
                .into_iter()
                .collect::<Vec<_>>(),
        )?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kubeplug-sim");
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let server = params.signed_by(&server_key, &issuer)?;
        Ok(Self {
            ca_pem: ca.pem(),
            ca_der: ca.der().clone(),
            server_der: server.der().clone(),
            server_key: PrivatePkcs8KeyDer::from(server_key.serialize_der()),
        })
    }

    /// The CA certificate, DER (what `kube::Config::root_cert` takes).
    pub fn ca_der(&self) -> &[u8] {
        &self.ca_der
    }

    /// The CA certificate, PEM (what a kubeconfig's `certificate-authority-data` holds,
    /// base64-encoded).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The rustls server configuration: the server certificate, no client certificates,
    /// HTTP/1.1 only (the sim's server speaks nothing else).
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![self.server_der.clone()],
                PrivateKeyDer::Pkcs8(self.server_key.clone_key()),
            )?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Accepts TCP connections and hands axum those whose TLS handshake succeeded. Handshakes
/// run as tasks of their own so that one slow or silent client does not hold up the others.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Option<(TlsStream<TcpStream>, SocketAddr)>>,
}

impl TlsListener {
    /// Serves TLS with `config` on the connections `tcp` accepts.
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> Self {
        Self {
            tcp,
            acceptor: TlsAcceptor::from(config),
            handshakes: JoinSet::new(),
        }
    }

    fn start_handshake(&mut self, tcp: TcpStream, addr: SocketAddr) {
        // Watch events are small writes that follow each other: with Nagle's algorithm on,
        // one waits for the client's delayed ACK of the last (measured: 20–40 ms).
        let _ = tcp.set_nodelay(true);
        let acceptor = self.acceptor.clone();
        self.handshakes.spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => Some((stream, addr)),
                Ok(Err(err)) => {
                    tracing::debug!(%addr, %err, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(%addr, "TLS handshake timed out");
                    None
                }
            }
        });
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => match accepted {
                    Ok((tcp, addr)) => self.start_handshake(tcp, addr),
                    Err(err) => {
                        // As axum's own listener: out of file descriptors and the like pass;
                        // retrying at once would spin.
                        tracing::warn!(%err, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Ok(Some(connection)) = done {
                        return connection;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::RootCertStore;
    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{ServerName, UnixTime};

    fn verifier(ca: &Certificates) -> Arc<WebPkiServerVerifier> {
        let mut roots = RootCertStore::empty();
        roots.add(ca.ca_der.clone()).unwrap();
        WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap()
    }

    fn verify(verifier: &WebPkiServerVerifier, cert: &Certificates, name: &str) -> bool {
        let name = ServerName::try_from(name.to_string()).unwrap();
        verifier
            .verify_server_cert(&cert.server_der, &[], &name, &[], UnixTime::now())
            .is_ok()
    }

    #[test]
    fn the_server_certificate_verifies_against_its_ca_for_every_loopback_name() {
        let certs = Certificates::generate().unwrap();
        let ours = verifier(&certs);
        for name in SERVER_NAMES {
            assert!(verify(&ours, &certs, name), "{name}");
        }
        assert!(!verify(&ours, &certs, "example.com"));
        assert!(!verify(&ours, &certs, "10.0.0.1"));
        let other = Certificates::generate().unwrap();
        assert!(!verify(&verifier(&other), &certs, "127.0.0.1"));
        assert!(certs.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        certs.server_config().unwrap();
    }
}
