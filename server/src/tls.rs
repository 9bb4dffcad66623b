//! TLS for the server's one port, with rustls. tonic's own TLS setting offers only
//! HTTP/2 in ALPN, which would lock out HTTP/1.1 JSON clients; this acceptor offers
//! both, and hands tonic already-decrypted connections. Handshakes run in their own
//! tasks, so a slow or silent client cannot hold up the others.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::{Error, Result};

/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for the server to take them.
const ACCEPTED_BACKLOG: usize = 128;

/// An acceptor for the PEM certificate chain and key in these files.
pub fn acceptor(cert_path: &Path, key_path: &Path) -> Result<TlsAcceptor> {
    let certs = CertificateDer::pem_file_iter(cert_path)
        .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| Error::Config(format!("--tls-cert {}: {e}", cert_path.display())))?;
    if certs.is_empty() {
        return Err(Error::Config(format!("--tls-cert {}: no certificate in the file", cert_path.display())));
    }
    let key = PrivateKeyDer::from_pem_file(key_path)
        .map_err(|e| Error::Config(format!("--tls-key {}: {e}", key_path.display())))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| Error::Config(format!("--tls-cert/--tls-key: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// TLS connections accepted on `listener`, with TCP_NODELAY set.
pub fn incoming(listener: TcpListener, acceptor: TlsAcceptor) -> ReceiverStream<io::Result<TlsStream<TcpStream>>> {
    let (sender, receiver) = mpsc::channel(ACCEPTED_BACKLOG);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if sender.is_closed() {
                return;
            }
            let _ = stream.set_nodelay(true);
            let acceptor = acceptor.clone();
            let sender = sender.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let _ = sender.send(Ok(tls)).await;
                    }
                    Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(receiver)
}
