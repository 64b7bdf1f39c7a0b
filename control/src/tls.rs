//! Control's listener: HTTPS by default (an operator certificate, or the self-signed one
//! `init` made, whose SHA-256 pin nodes and browsers can check), or plain HTTP behind a
//! reverse proxy that terminates TLS.
//!
//! TLS handshakes run in their own tasks with a timeout, so a slow or silent client never
//! holds up the accept loop.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::{Context as _, Result};
use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes a self-signed certificate for `names` (DNS names or IP addresses); returns the
/// certificate and key as PEM, and the certificate's SHA-256.
pub(crate) fn self_signed(names: Vec<String>) -> Result<(String, String, [u8; 32])> {
    let certified = rcgen::generate_simple_self_signed(names).context("making a self-signed certificate")?;
    let pin = hearth_shared::sha256(certified.cert.der());
    Ok((certified.cert.pem(), certified.signing_key.serialize_pem(), pin))
}

/// The SHA-256 of the first certificate in a PEM file (what a client pins).
pub(crate) fn pin_of(cert: &Path) -> Result<[u8; 32]> {
    let first = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .next()
        .with_context(|| format!("{} holds no certificate", cert.display()))?
        .with_context(|| format!("{} is not a PEM certificate", cert.display()))?;
    Ok(hearth_shared::sha256(&first))
}

/// A rustls server configuration from PEM files, whose certificate each handshake gets from
/// the [`hearth_acme::Certs`] returned: those files' for any name, and for `panel` (a domain
/// with ACME) its public certificate once there is one; with TLS-ALPN-01, the CA's validator
/// is answered on this listener too.
pub(crate) fn server_config(
    cert: &Path,
    key: &Path,
    panel: Option<&hearth_acme::Settings>,
) -> Result<(Arc<rustls::ServerConfig>, Arc<hearth_acme::Certs>)> {
    let chain = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{} is not a PEM certificate chain", cert.display()))?;
    let key =
        PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading the private key {}", key.display()))?;
    let key = rustls::crypto::ring::sign::any_supported_type(&key)
        .context("the certificate and key do not make a TLS identity")?;
    let own = rustls::sign::CertifiedKey::new(chain, key);
    own.keys_match().context("the certificate and key do not make a TLS identity")?;
    let certs = Arc::new(hearth_acme::Certs::new(own, panel.map(|p| p.domain.clone())));
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_no_client_auth()
        .with_cert_resolver(certs.clone());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if panel.is_some_and(|p| p.challenge == hearth_acme::Challenge::TlsAlpn01) {
        config.alpn_protocols.push(hearth_acme::ACME_TLS_ALPN.to_vec());
    }
    Ok((Arc::new(config), certs))
}

/// A connection: plain TCP or TLS over TCP.
pub(crate) enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// Control's listener, for `axum::serve`.
pub(crate) struct HearthListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(Conn, SocketAddr)>,
}

/// The client's address, for handlers (`ConnectInfo<ClientAddr>`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientAddr(pub(crate) SocketAddr);

impl Connected<IncomingStream<'_, HearthListener>> for ClientAddr {
    fn connect_info(stream: IncomingStream<'_, HearthListener>) -> Self {
        ClientAddr(*stream.remote_addr())
    }
}

impl HearthListener {
    /// Accepts on `tcp`, with TLS when `tls` is given.
    pub(crate) fn new(tcp: TcpListener, tls: Option<Arc<rustls::ServerConfig>>) -> io::Result<HearthListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let acceptor = tls.map(TlsAcceptor::from);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: wait instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                match &acceptor {
                    None => {
                        if tx.send((Conn::Plain(stream), peer)).await.is_err() {
                            return;
                        }
                    }
                    Some(acceptor) => {
                        let (acceptor, tx) = (acceptor.clone(), tx.clone());
                        tokio::spawn(async move {
                            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                                // A TLS-ALPN-01 validator is done once it saw the challenge.
                                Ok(Ok(tls)) if tls.get_ref().1.alpn_protocol() == Some(hearth_acme::ACME_TLS_ALPN) => {}
                                Ok(Ok(tls)) => {
                                    let _ = tx.send((Conn::Tls(Box::new(tls)), peer)).await;
                                }
                                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                            }
                        });
                    }
                }
            }
        });
        Ok(HearthListener { local, ready })
    }
}

impl Listener for HearthListener {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept task only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}
