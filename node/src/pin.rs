//! Reaching control over TLS pinned to its certificate.
//!
//! Control usually runs with a self-signed certificate: no CA vouches for it, so the node
//! trusts exactly the certificate whose SHA-256 the enrollment command carried (`control_pin`
//! in `node.toml`), and checks the handshake signature with it. A control that has since got a
//! certificate from a public CA for its domain (ACME) may show that one instead: a certificate
//! that is not the pinned one is checked the usual way, as a browser would. Without a pin,
//! control's certificate is checked the usual way. Enrollment, pulls, usage reports and
//! self-updates all reach control through [`control_client`].

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use hearth_shared::Digest;

/// A TLS verifier that accepts exactly one certificate (control's self-signed one, by the
/// SHA-256 pin the enrollment command carried), and checks the handshake signature with it.
#[derive(Debug)]
struct Pinned {
    pin: Digest,
    provider: Arc<rustls::crypto::CryptoProvider>,
    /// How any other certificate is checked: the system's roots, as a browser would.
    usual: rustls_platform_verifier::Verifier,
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if hearth_shared::ct_eq(&hearth_shared::sha256(end_entity), &self.pin) {
            return Ok(rustls::client::danger::ServerCertVerified::assertion());
        }
        self.usual.verify_server_cert(end_entity, intermediates, server_name, ocsp, now).map_err(|e| {
            rustls::Error::General(format!("control's certificate is not its pin, nor one a CA vouches for ({e})"))
        })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The HTTP client for control: pinned to its certificate when a pin is set.
pub(crate) fn control_client(pin: Option<&str>) -> Result<reqwest::Client> {
    let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
    let builder = match pin {
        Some(pin) => {
            let pin: Digest = hex::decode(pin)
                .ok()
                .and_then(|p| p.try_into().ok())
                .context("control_pin must be 64 hex characters")?;
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .context("TLS versions")?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Pinned {
                    pin,
                    usual: rustls_platform_verifier::Verifier::new(provider.clone()).context("the system's roots")?,
                    provider,
                }))
                .with_no_client_auth();
            builder.tls_backend_preconfigured(config)
        }
        None => builder,
    };
    builder.build().context("making the HTTP client")
}
