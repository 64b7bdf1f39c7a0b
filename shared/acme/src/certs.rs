//! The certificate each TLS handshake gets.

use std::sync::{Arc, RwLock};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::settings::AcmeError;

/// The ALPN protocol of a TLS-ALPN-01 validation (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The certificates a program's listeners serve, chosen at each handshake by the name the
/// client asks for (SNI): the public certificate for the domain (once there is one); the
/// program's own, self-signed one for any other name or none (what pinned clients ask for,
/// so they keep working whatever happens to the public one); and to a client that asks for
/// `acme-tls/1`, the certificate of the TLS-ALPN-01 challenge under way, if any (else the
/// handshake fails, as a server without one would).
#[derive(Debug)]
pub struct Certs {
    own: RwLock<Arc<CertifiedKey>>,
    domain: Option<String>,
    public: RwLock<Option<Arc<CertifiedKey>>>,
    challenge: RwLock<Option<Arc<CertifiedKey>>>,
}

impl Certs {
    /// Serves `own` to everyone until a public certificate for `domain` is set.
    pub fn new(own: CertifiedKey, domain: Option<String>) -> Certs {
        Certs {
            own: RwLock::new(Arc::new(own)),
            domain: domain.map(|d| d.to_ascii_lowercase()),
            public: RwLock::new(None),
            challenge: RwLock::new(None),
        }
    }

    /// The domain the public certificate is for.
    pub fn domain(&self) -> Option<&str> {
        self.domain.as_deref()
    }

    /// The public certificate served now.
    pub fn public(&self) -> Option<Arc<CertifiedKey>> {
        self.public.read().expect("certs lock").clone()
    }

    /// Serves `certificate` to clients that ask for the domain, from the next handshake on.
    pub fn set_public(&self, certificate: Option<CertifiedKey>) {
        *self.public.write().expect("certs lock") = certificate.map(Arc::new);
    }

    /// Serves `certificate` to clients that ask for anything but the domain.
    pub fn set_own(&self, certificate: CertifiedKey) {
        *self.own.write().expect("certs lock") = Arc::new(certificate);
    }

    /// The TLS-ALPN-01 challenge's certificate, while one is under way.
    pub(crate) fn set_challenge(&self, certificate: Option<CertifiedKey>) {
        *self.challenge.write().expect("certs lock") = certificate.map(Arc::new);
    }

    fn for_domain(&self, name: Option<&str>) -> bool {
        matches!((name, &self.domain), (Some(name), Some(domain)) if name.eq_ignore_ascii_case(domain))
    }
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let for_domain = self.for_domain(hello.server_name());
        if hello.alpn().is_some_and(|mut offered| offered.any(|p| p == ACME_TLS_ALPN)) {
            return if for_domain { self.challenge.read().expect("certs lock").clone() } else { None };
        }
        if for_domain && let Some(public) = self.public() {
            return Some(public);
        }
        Some(self.own.read().expect("certs lock").clone())
    }
}

/// A certificate chain and its key, both PEM, as rustls serves them (signed with `ring`).
pub fn certified_key(chain_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, AcmeError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| AcmeError::Issued(format!("the chain is not PEM: {e}")))?;
    if chain.is_empty() {
        return Err(AcmeError::Issued("no certificate in the chain".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| AcmeError::Issued(format!("the key: {e}")))?;
    let key = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| AcmeError::Issued(format!("the key cannot sign: {e}")))?;
    Ok(CertifiedKey::new(chain, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made(name: &str) -> CertifiedKey {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap().self_signed(&key).unwrap();
        certified_key(cert.pem().as_bytes(), key.serialize_pem().as_bytes()).unwrap()
    }

    /// The handshake's certificate, for a client asking for `name` with `alpn`.
    fn served(certs: Arc<Certs>, name: Option<&str>, alpn: &[&[u8]]) -> Option<Vec<u8>> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let server = rustls::ServerConfig::builder().with_no_client_auth().with_cert_resolver(certs);
        let mut server = rustls::ServerConnection::new(Arc::new({
            let mut server = server;
            server.alpn_protocols = vec![b"h2".to_vec(), ACME_TLS_ALPN.to_vec()];
            server
        }))
        .unwrap();
        #[derive(Debug)]
        struct Any;
        impl rustls::client::danger::ServerCertVerifier for Any {
            fn verify_server_cert(
                &self,
                _: &rustls::pki_types::CertificateDer<'_>,
                _: &[rustls::pki_types::CertificateDer<'_>],
                _: &rustls::pki_types::ServerName<'_>,
                _: &[u8],
                _: rustls::pki_types::UnixTime,
            ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
                Ok(rustls::client::danger::ServerCertVerified::assertion())
            }
            fn verify_tls12_signature(
                &self,
                _: &[u8],
                _: &rustls::pki_types::CertificateDer<'_>,
                _: &rustls::DigitallySignedStruct,
            ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
                Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
            }
            fn verify_tls13_signature(
                &self,
                _: &[u8],
                _: &rustls::pki_types::CertificateDer<'_>,
                _: &rustls::DigitallySignedStruct,
            ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
                Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
            }
            fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
                rustls::crypto::ring::default_provider().signature_verification_algorithms.supported_schemes()
            }
        }
        let mut client = rustls::ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Any))
            .with_no_client_auth();
        client.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let server_name = match name {
            Some(name) => rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap(),
            None => rustls::pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
        };
        let mut client = rustls::ClientConnection::new(Arc::new(client), server_name).unwrap();
        for _ in 0..4 {
            let mut buf = Vec::new();
            client.write_tls(&mut buf).unwrap();
            server.read_tls(&mut buf.as_slice()).unwrap();
            if server.process_new_packets().is_err() {
                return None;
            }
            let mut buf = Vec::new();
            server.write_tls(&mut buf).unwrap();
            client.read_tls(&mut buf.as_slice()).unwrap();
            if client.process_new_packets().is_err() {
                return None;
            }
        }
        client.peer_certificates().map(|chain| chain[0].to_vec())
    }

    #[test]
    fn each_client_gets_the_certificate_for_what_it_asks() {
        let own = made("node-7.example");
        let own_der = own.cert[0].to_vec();
        let certs = Arc::new(Certs::new(own, Some("Node1.Example.net".into())));
        // No public certificate yet: everyone gets the node's own; nobody a challenge.
        assert_eq!(served(certs.clone(), Some("node1.example.net"), &[b"h2"]), Some(own_der.clone()));
        assert_eq!(served(certs.clone(), Some("node1.example.net"), &[ACME_TLS_ALPN]), None);
        let public = made("node1.example.net");
        let public_der = public.cert[0].to_vec();
        certs.set_public(Some(public));
        assert_eq!(served(certs.clone(), Some("NODE1.example.net"), &[b"h2"]), Some(public_der.clone()));
        assert_eq!(served(certs.clone(), Some("node-7.example"), &[b"h2"]), Some(own_der.clone()), "pinned");
        assert_eq!(served(certs.clone(), None, &[]), Some(own_der.clone()), "no name: the node's own");
        // A challenge under way answers the validator, for the domain only.
        let challenge = made("node1.example.net");
        let challenge_der = challenge.cert[0].to_vec();
        certs.set_challenge(Some(challenge));
        assert_eq!(served(certs.clone(), Some("node1.example.net"), &[ACME_TLS_ALPN]), Some(challenge_der));
        assert_eq!(served(certs.clone(), Some("other.example"), &[ACME_TLS_ALPN]), None);
        assert_eq!(served(certs.clone(), Some("node1.example.net"), &[b"h2"]), Some(public_der));
        certs.set_public(None);
        assert_eq!(served(certs, Some("node1.example.net"), &[b"h2"]), Some(own_der));
    }
}
