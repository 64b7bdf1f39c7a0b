//! Keeping a certificate: on disk, in [`Certs`], renewed in time, and what happened last.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::certs::{Certs, certified_key};
use crate::http01::Tokens;
use crate::private::write_private;
use crate::settings::{AcmeError, Settings};

/// The account's file in the directory.
const ACCOUNT: &str = "account.json";
/// The certificate chain's file (PEM).
const CHAIN: &str = "cert.pem";
/// Its key's file (PEM, 0600).
const KEY: &str = "key.pem";
/// What happened last (JSON).
const STATUS: &str = "status.json";

/// The first wait after a failed attempt; it doubles at each failure in a row.
const FIRST_BACKOFF: u64 = 60;
/// The longest wait between two attempts while they fail.
const LONGEST_BACKOFF: u64 = 6 * 3600;

/// What a [`Manager`] knows of its certificate, as it is reported (to control, to metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The domain.
    pub domain: String,
    /// The certificate in use (its chain's first, PEM); empty: none yet.
    pub certificate: String,
    /// When it became valid and when it expires, Unix seconds (0: none).
    pub not_before: u64,
    /// When it expires.
    pub not_after: u64,
    /// When it was issued to this program, Unix seconds (0: never).
    pub renewed: u64,
    /// Why the last attempt failed (empty: it did not).
    pub error: String,
    /// When it failed.
    pub error_at: u64,
    /// Attempts that failed in a row.
    pub failures: u32,
}

impl Status {
    /// When the next attempt is due, at `now`: two thirds into the certificate's lifetime; with
    /// none (or an expired one), now; after a failure, not before the backoff has passed
    /// (a minute, doubling to six hours), whichever of the two is later.
    pub fn next_attempt(&self, now: u64) -> u64 {
        let due = if self.not_after > now { self.not_before + (self.not_after - self.not_before) * 2 / 3 } else { now };
        if self.failures == 0 {
            return due;
        }
        let backoff = FIRST_BACKOFF.saturating_mul(1 << (self.failures - 1).min(20)).min(LONGEST_BACKOFF);
        due.max(self.error_at + backoff)
    }
}

/// Keeps one certificate for one domain in a directory, served through [`Certs`].
#[derive(Debug)]
pub struct Manager {
    settings: Settings,
    dir: PathBuf,
    certs: Arc<Certs>,
    tokens: Arc<Tokens>,
    status: Mutex<Status>,
    renew: tokio::sync::Notify,
    attempts: tokio::sync::watch::Sender<u64>,
}

impl Manager {
    /// A manager keeping its files in `dir` (made, 0700), serving through `certs` the
    /// certificate found there if it has not expired.
    pub fn new(settings: Settings, dir: &Path, certs: Arc<Certs>) -> Result<Arc<Manager>, AcmeError> {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir)?;
        #[cfg(unix)]
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        let mut status: Status = std::fs::read(dir.join(STATUS))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .filter(|status: &Status| status.domain == settings.domain)
            .unwrap_or_default();
        status.domain = settings.domain.clone();
        let manager = Manager {
            settings,
            dir: dir.to_owned(),
            certs,
            tokens: Arc::default(),
            status: Mutex::new(status),
            renew: tokio::sync::Notify::new(),
            attempts: tokio::sync::watch::channel(0).0,
        };
        if let (Ok(chain), Ok(key)) = (std::fs::read(dir.join(CHAIN)), std::fs::read(dir.join(KEY))) {
            match manager.take(&chain, &key, now()) {
                Ok(()) => {}
                Err(e) => tracing::warn!(error = %e, "ACME: the certificate kept is not used"),
            }
        }
        Ok(Arc::new(manager))
    }

    /// The HTTP-01 tokens under way (for the program's listener on TCP 80).
    pub fn tokens(&self) -> Arc<Tokens> {
        self.tokens.clone()
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// What it knows now.
    pub fn status(&self) -> Status {
        self.status.lock().expect("status lock").clone()
    }

    /// Tries again now, whenever the certificate is due (SIGHUP).
    pub fn renew_now(&self) {
        self.renew.notify_one();
    }

    /// Asks for a new certificate now at every SIGHUP (`systemctl reload`), forever.
    pub async fn renew_on_sighup(self: Arc<Self>) {
        let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else { return };
        while hup.recv().await.is_some() {
            tracing::info!(domain = %self.settings.domain, "SIGHUP: renewing the certificate now");
            self.renew_now();
        }
    }

    /// Counts the attempts made: changes after each one, successful or not.
    pub fn attempts(&self) -> tokio::sync::watch::Receiver<u64> {
        self.attempts.subscribe()
    }

    /// Serves `chain` (PEM) with `key` for the domain, when it is a certificate for it that
    /// has not expired at `now`; notes its dates.
    fn take(&self, chain: &[u8], key: &[u8], now: u64) -> Result<(), AcmeError> {
        let certified = certified_key(chain, key)?;
        let leaf = certified.cert.first().ok_or_else(|| AcmeError::Issued("no certificate".into()))?;
        let (not_before, not_after) = dates(leaf.as_ref(), &self.settings.domain)?;
        if not_after <= now {
            return Err(AcmeError::Issued("it has expired".into()));
        }
        let pem = pem(leaf.as_ref());
        self.certs.set_public(Some(certified));
        let mut status = self.status.lock().expect("status lock");
        status.certificate = pem;
        status.not_before = not_before;
        status.not_after = not_after;
        Ok(())
    }

    /// Obtains and renews the certificate forever: each attempt when it is due
    /// ([`Status::next_attempt`]) or asked for ([`Manager::renew_now`]). The certificate
    /// served stays until a new one has been issued and kept.
    pub async fn run(self: Arc<Self>) {
        loop {
            let now = now();
            let next = self.status().next_attempt(now);
            if self.status().not_after != 0 && self.status().not_after <= now {
                self.certs.set_public(None);
            }
            let wait = Duration::from_secs(next.saturating_sub(now));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.renew.notified() => {}
            }
            self.attempt().await;
        }
    }

    /// One attempt: a new certificate served and kept, or the error noted.
    async fn attempt(&self) {
        let domain = &self.settings.domain;
        tracing::info!(%domain, challenge = %self.settings.challenge, "ACME: asking the CA for a certificate");
        let result = async {
            let account = crate::issue::account(&self.settings, &self.dir.join(ACCOUNT)).await?;
            let issued = crate::issue::issue(&self.settings, &account, &self.certs, &self.tokens).await?;
            self.take(issued.chain_pem.as_bytes(), issued.key_pem.as_bytes(), now())?;
            // Kept only once served: a certificate that does not do is never left on disk.
            write_private(&self.dir.join(KEY), issued.key_pem.as_bytes())?;
            write_private(&self.dir.join(CHAIN), issued.chain_pem.as_bytes())?;
            Ok::<(), AcmeError>(())
        }
        .await;
        let now = now();
        {
            let mut status = self.status.lock().expect("status lock");
            match &result {
                Ok(()) => {
                    status.renewed = now;
                    status.error.clear();
                    status.error_at = 0;
                    status.failures = 0;
                    tracing::info!(%domain, not_after = status.not_after, "ACME: a new certificate is served");
                }
                Err(e) => {
                    status.error = chain(e).chars().take(500).collect();
                    status.error_at = now;
                    status.failures = status.failures.saturating_add(1);
                    tracing::warn!(%domain, error = %status.error, failures = status.failures, "ACME: no certificate");
                }
            }
            if let Ok(bytes) = serde_json::to_vec(&*status)
                && let Err(e) = write_private(&self.dir.join(STATUS), &bytes)
            {
                tracing::warn!(error = %e, "ACME: could not keep the status");
            }
        }
        self.attempts.send_modify(|n| *n += 1);
    }
}

/// An error and its causes, as a person reads them (`the CA: client error (Connect): tcp
/// connect error: Connection refused`): the HTTP client's own words say little alone.
fn chain(error: &AcmeError) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// A certificate's dates, when it names `domain`.
fn dates(der: &[u8], domain: &str) -> Result<(u64, u64), AcmeError> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|_| AcmeError::Issued("the certificate does not parse".into()))?;
    let names = cert.subject_alternative_name().ok().flatten();
    let for_domain = names.is_some_and(|names| {
        names.value.general_names.iter().any(|n| matches!(n, GeneralName::DNSName(d) if d.eq_ignore_ascii_case(domain)))
    });
    if !for_domain {
        return Err(AcmeError::Issued(format!("the certificate is not for {domain}")));
    }
    let time = |t: x509_parser::time::ASN1Time| u64::try_from(t.timestamp()).unwrap_or(0);
    Ok((time(cert.validity().not_before), time(cert.validity().not_after)))
}

/// A certificate's PEM.
fn pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_come_at_two_thirds_and_back_off_after_failures() {
        let now = 1_800_000_000;
        let mut status = Status::default();
        assert_eq!(status.next_attempt(now), now, "none yet: now");
        status.not_before = now - 30 * 86_400;
        status.not_after = now + 60 * 86_400;
        assert_eq!(status.next_attempt(now), now + 30 * 86_400, "two thirds of 90 days");
        // Failing once due: a minute, then two, doubling to six hours.
        let due = status.next_attempt(now);
        status.failures = 1;
        status.error_at = due;
        assert_eq!(status.next_attempt(due), due + 60);
        status.failures = 3;
        assert_eq!(status.next_attempt(due), due + 240);
        status.failures = 40;
        assert_eq!(status.next_attempt(due), due + 6 * 3600);
        // Expired: now, after the backoff.
        status.not_after = now - 1;
        status.failures = 0;
        assert_eq!(status.next_attempt(now), now);
    }

    #[test]
    fn a_kept_certificate_is_served_at_start_only_for_its_domain_and_unexpired() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert =
            rcgen::CertificateParams::new(vec!["node1.example.net".to_owned()]).unwrap().self_signed(&key).unwrap();
        write_private(&dir.path().join(CHAIN), cert.pem().as_bytes()).unwrap();
        write_private(&dir.path().join(KEY), key.serialize_pem().as_bytes()).unwrap();
        let own = {
            let key = rcgen::KeyPair::generate().unwrap();
            let cert =
                rcgen::CertificateParams::new(vec!["own.example".to_owned()]).unwrap().self_signed(&key).unwrap();
            certified_key(cert.pem().as_bytes(), key.serialize_pem().as_bytes()).unwrap()
        };
        let settings = |domain: &str| Settings {
            domain: domain.into(),
            directory: crate::LETS_ENCRYPT.into(),
            email: None,
            eab: None,
            challenge: crate::Challenge::TlsAlpn01,
            ca_root: None,
        };
        let certs = Arc::new(Certs::new(own.clone(), Some("node1.example.net".into())));
        let manager = Manager::new(settings("node1.example.net"), dir.path(), certs.clone()).unwrap();
        assert!(certs.public().is_some());
        let status = manager.status();
        assert!(status.certificate.starts_with("-----BEGIN CERTIFICATE-----\n") && status.not_after > now());
        let certs = Arc::new(Certs::new(own, Some("other.example".into())));
        Manager::new(settings("other.example"), dir.path(), certs.clone()).unwrap();
        assert!(certs.public().is_none(), "not a certificate for this domain");
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir.path()).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o700);
    }
}
