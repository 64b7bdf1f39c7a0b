//! The node's TLS identity: the self-signed certificate it serves (`tls.crt`, `tls.key`) and
//! registers with control, which puts it in users' profiles for their apps to check.
//!
//! The certificate looks like the one a web server makes for itself on a fresh machine (a
//! "snakeoil" certificate): made out to the node's name (its common name and its only
//! subjectAltName, a DNS name or an IP address), valid from about a day before it was made
//! for ten years, a random positive serial, for server authentication. Apps check it by its
//! SHA-256 (share links, mihomo, Stash), by its public key's (sing-box from 1.13), or trust it
//! as their only root and check the name (sing-box before 1.13), so the name is the one the
//! links send: the node's SNI, else its host.
//!
//! Control learns the certificate when the node enrolls, and whenever the node holds one
//! control has not acknowledged (a node enrolled by an earlier release, or an enrollment
//! whose registration did not get through): `serve` registers it until control says it has
//! it, and keeps the SHA-256 control acknowledged in `tls.registered`.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use hearth_shared::keys::SecretKey;
use hearth_shared::nodeauth;
use hearth_shared::wire::NodeId;

use crate::state::StateDir;

/// The certificate's file (PEM).
pub(crate) const CERT_FILE: &str = "tls.crt";
/// Its key's file (PEM, 0600).
pub(crate) const KEY_FILE: &str = "tls.key";
/// The SHA-256 (hex) of the certificate control acknowledged.
const REGISTERED_FILE: &str = "tls.registered";

/// The name a certificate is made out to when nothing names the node (a state directory
/// made by hand).
pub(crate) const DEFAULT_NAME: &str = "localhost";

/// How long a certificate the node makes is valid.
const LIFETIME_DAYS: i64 = 3650;

/// A certificate and its key, made in memory.
pub(crate) struct Made {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
}

/// Makes a self-signed certificate for `name` (a DNS name or an IP address) at `now`.
pub(crate) fn self_signed(name: &str, now: u64) -> Result<Made> {
    use rand_core::RngCore as _;
    let dns = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty() && label.len() <= 63 && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if !dns && name.parse::<std::net::IpAddr>().is_err() {
        bail!("{name:?} is not a DNS name or an IP address");
    }
    let key = rcgen::KeyPair::generate().context("making the TLS key")?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()])
        .with_context(|| format!("{name:?} is not a DNS name or an IP address"))?;
    let mut subject = rcgen::DistinguishedName::new();
    subject.push(rcgen::DnType::CommonName, name);
    params.distinguished_name = subject;
    // Made "a while ago", as certificates met in the wild are, by a random part of a day.
    let mut random = [0u8; 20];
    rand_core::OsRng.fill_bytes(&mut random);
    let back = 3600 + i64::from(u16::from_be_bytes([random[0], random[1]])) % (23 * 3600);
    let made = i64::try_from(now).unwrap_or(i64::MAX) - back;
    params.not_before = time::OffsetDateTime::from_unix_timestamp(made).context("the clock")?;
    params.not_after = params.not_before + time::Duration::days(LIFETIME_DAYS);
    // A positive serial of up to 20 bytes (RFC 5280, 4.1.2.2; Go refuses negative ones).
    let mut serial = random[2..].to_vec();
    serial[0] = (serial[0] & 0x7f) | 0x40;
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.self_signed(&key).context("making the certificate")?;
    Ok(Made { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
}

/// Writes a new certificate for `name` into the state directory (the key first).
pub(crate) fn make(state: &StateDir, name: &str, now: u64) -> Result<()> {
    let made = self_signed(name, now)?;
    state.write(KEY_FILE, made.key_pem.as_bytes())?;
    state.write(CERT_FILE, made.cert_pem.as_bytes())
}

/// The certificate chain and key the node serves, made on the first start of a node whose
/// state directory holds none.
pub(crate) fn load(
    state: &StateDir,
    name: Option<&str>,
) -> Result<(Vec<rustls::pki_types::CertificateDer<'static>>, rustls::pki_types::PrivateKeyDer<'static>)> {
    use rustls::pki_types::pem::PemObject as _;
    let (cert, key) = (state.path(CERT_FILE), state.path(KEY_FILE));
    if !cert.exists() {
        make(state, name.unwrap_or(DEFAULT_NAME), crate::now())?;
    }
    let chain = rustls::pki_types::CertificateDer::pem_file_iter(&cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{} is not a PEM certificate", cert.display()))?;
    if chain.is_empty() {
        bail!("{} holds no certificate", cert.display());
    }
    let key =
        rustls::pki_types::PrivateKeyDer::from_pem_file(&key).with_context(|| format!("reading {}", key.display()))?;
    Ok((chain, key))
}

/// The node's own certificate as rustls serves it (made on the first start of a node whose
/// state directory holds none).
pub(crate) fn certified(state: &StateDir, name: Option<&str>) -> Result<rustls::sign::CertifiedKey> {
    let (chain, key) = load(state, name)?;
    let key = rustls::crypto::ring::sign::any_supported_type(&key).context("the node's TLS key cannot sign")?;
    Ok(rustls::sign::CertifiedKey::new(chain, key))
}

/// The largest answer read from control to a registration.
const ANSWER_MAX: usize = 16 * 1024;

/// What the node tells control of its TLS identity.
#[derive(serde::Serialize)]
pub(crate) struct Report {
    /// Its self-signed certificate (PEM).
    pub(crate) certificate: String,
    /// Its public certificate by ACME, and how getting it went, when it has a domain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) acme: Option<hearth_acme::Status>,
}

impl Report {
    /// The SHA-256 (hex) of what is reported: a report sent is not sent again.
    fn digest(&self) -> Result<String> {
        Ok(hex::encode(hearth_shared::sha256(&serde_json::to_vec(self)?)))
    }
}

/// Registers `report` with control at `url` (under `prefix`), signed with the node's key;
/// control must answer with the SHA-256 of the certificate reported.
pub(crate) async fn register(
    client: &reqwest::Client,
    url: &str,
    prefix: &str,
    node: NodeId,
    key: &SecretKey,
    report: &Report,
) -> Result<()> {
    let pin = pin_of(&report.certificate)?;
    let body = serde_json::to_vec(report)?;
    let path = format!("/{prefix}/nodes/{node}/tls");
    let url = format!("{}{path}", url.trim_end_matches('/'));
    let host = nodeauth::authority_of_url(&url);
    let request = nodeauth::Request { method: "POST", host: &host, path_and_query: &path, body: &body };
    let auth = nodeauth::sign(key, node, &request, crate::now(), &mut rand_core::OsRng);
    let response = client
        .post(url)
        .header(nodeauth::HEADER, auth)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("control did not answer: {:#}", anyhow::Error::from(e.without_url())))?;
    let status = response.status();
    let answer = crate::capped::read(response, ANSWER_MAX, "control's answer to a registration").await?;
    if !status.is_success() {
        let said: serde_json::Value = serde_json::from_slice(&answer).unwrap_or_default();
        bail!(
            "control refused the node's certificate ({status}): {}",
            said["error"]["message"].as_str().unwrap_or("no reason given")
        );
    }
    let said: serde_json::Value = serde_json::from_slice(&answer).context("control's answer")?;
    if said["cert_sha256"].as_str() != Some(pin.as_str()) {
        bail!("control keeps another certificate than the one registered");
    }
    Ok(())
}

/// The SHA-256 (hex) of the first certificate of a PEM text.
pub(crate) fn pin_of(pem: &str) -> Result<String> {
    use rustls::pki_types::pem::PemObject as _;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .context("the node's certificate is not PEM")?;
    Ok(hex::encode(hearth_shared::sha256(&der)))
}

impl crate::agent::Agent {
    /// What the node tells control now: its certificate, and its public one's state.
    fn tls_report(&self) -> Result<Report> {
        let certificate =
            std::fs::read_to_string(self.state.path(CERT_FILE)).context("reading the node's certificate")?;
        Ok(Report { certificate, acme: self.acme.as_ref().map(|acme| acme.status()) })
    }

    /// Tells control of the node's TLS identity whenever it is news (control never heard it:
    /// a new node, one enrolled by an earlier release; an ACME attempt was made): at once,
    /// then, while control does not take it, after a minute, doubling up to an hour. A node
    /// without control does nothing.
    pub(crate) async fn register_loop(self: std::sync::Arc<Self>) {
        let (Some(client), Some(base)) = (self.control.clone(), self.control_base()) else { return };
        let mut attempts = self.acme.as_ref().map(|acme| acme.attempts());
        let mut pause = Duration::from_secs(60);
        loop {
            let report = match self.tls_report() {
                Ok(report) => report,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "the node's certificate cannot be registered");
                    return;
                }
            };
            let digest = report.digest().unwrap_or_default();
            let registered = std::fs::read_to_string(self.state.path(REGISTERED_FILE)).unwrap_or_default();
            if registered.trim() != digest {
                match register(&client, &base.url, &base.prefix, self.settings.node, &self.key, &report).await {
                    Ok(()) => {
                        tracing::info!("control has the node's certificate");
                        if let Err(e) = registered_as(&self.state, &report) {
                            tracing::warn!(error = %format!("{e:#}"), "could not note the registration");
                        }
                        pause = Duration::from_secs(60);
                    }
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "registering the node's certificate failed");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(3600));
                        continue;
                    }
                }
            }
            // Nothing new until the next ACME attempt.
            let Some(attempts) = &mut attempts else { return };
            if attempts.changed().await.is_err() {
                return;
            }
        }
    }
}

/// Notes that control took `report`.
pub(crate) fn registered_as(state: &StateDir, report: &Report) -> Result<()> {
    state.write(REGISTERED_FILE, report.digest()?.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_certificate_looks_like_a_servers_own() {
        use rustls::pki_types::pem::PemObject as _;
        use x509_parser::extensions::GeneralName;
        let now = 1_800_000_000;
        for (name, san) in [
            ("node1.example.net", GeneralName::DNSName("node1.example.net")),
            ("203.0.113.7", GeneralName::IPAddress(&[203, 0, 113, 7])),
        ] {
            let made = self_signed(name, now).unwrap();
            let der = rustls::pki_types::CertificateDer::from_pem_slice(made.cert_pem.as_bytes()).unwrap();
            let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
            let start = cert.validity().not_before.timestamp();
            assert!((now as i64 - 24 * 3600..=now as i64 - 3600).contains(&start), "{start}");
            let days = (cert.validity().not_after.timestamp() - start) / 86_400;
            assert_eq!(days, LIFETIME_DAYS);
            assert_eq!(cert.subject().to_string(), format!("CN={name}"));
            assert_eq!(cert.issuer(), cert.subject(), "self-signed");
            let sans = cert.subject_alternative_name().unwrap().unwrap();
            assert_eq!(sans.value.general_names, [san]);
            let eku = cert.extended_key_usage().unwrap().unwrap();
            assert!(eku.value.server_auth && !eku.value.client_auth);
            let serial = cert.raw_serial();
            assert!(serial[0] & 0x80 == 0 && serial.len() == 18, "a positive serial: {serial:?}");
        }
        let a = self_signed("a.example", now).unwrap();
        let b = self_signed("a.example", now).unwrap();
        assert_ne!(a.cert_pem, b.cert_pem, "each its own key and serial");
        assert!(self_signed("not a name", now).is_err());
    }
}
