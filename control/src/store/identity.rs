//! A node's TLS identity as apps check it: the self-signed certificate the node registers (at
//! enrollment, and again whenever it makes a new one), checked here and kept as what links
//! carry: its SHA-256 and its public key's (the pins), the certificate itself (for apps that
//! trust one certificate as their only root, sing-box before 1.13) and the names it is made
//! out to (which those apps check).

use hearth_shared::wire::NodeId;
use hearth_shared::{Digest, sha256};
use rusqlite::{Connection, params};

use super::changes::Changes;
use crate::error::Error;
use crate::store::audit_log::audit;

/// The largest certificate a node registers (a self-signed one is well under 1 KiB; every
/// user's snapshot carries it once for each node the user reaches).
pub(crate) const MAX_CERTIFICATE: usize = 4 * 1024;

/// A node's certificate, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Certificate {
    /// The certificate (DER).
    pub(crate) der: Vec<u8>,
    /// Its SHA-256 (share links' `pinSHA256`, mihomo's `fingerprint`).
    pub(crate) sha256: Digest,
    /// The SHA-256 of its SubjectPublicKeyInfo (sing-box's `certificate_public_key_sha256`).
    pub(crate) spki_sha256: Digest,
    /// The DNS names and IP addresses it is made out to (its subjectAltName), in its order.
    pub(crate) names: Vec<String>,
    /// When it expires, in Unix seconds.
    pub(crate) not_after: u64,
}

impl Certificate {
    /// The first certificate of a PEM text.
    pub(crate) fn from_pem(pem: &str) -> Result<Certificate, Error> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject as _;
        if pem.len() > 2 * MAX_CERTIFICATE {
            return Err(bad("the certificate is too long"));
        }
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|_| bad("the certificate is not PEM"))?;
        Certificate::from_der(&der)
    }

    /// A certificate (DER) that parses whole, with at least one name apps can check.
    pub(crate) fn from_der(der: &[u8]) -> Result<Certificate, Error> {
        use x509_parser::extensions::GeneralName;
        if der.len() > MAX_CERTIFICATE {
            return Err(bad("the certificate is too long"));
        }
        let (rest, parsed) =
            x509_parser::parse_x509_certificate(der).map_err(|_| bad("the certificate is malformed"))?;
        if !rest.is_empty() {
            return Err(bad("the certificate is followed by other bytes"));
        }
        let mut names = Vec::new();
        if let Ok(Some(san)) = parsed.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(dns) => names.push(dns.to_ascii_lowercase()),
                    GeneralName::IPAddress(ip) => {
                        if let Ok(v4) = <[u8; 4]>::try_from(*ip) {
                            names.push(std::net::Ipv4Addr::from(v4).to_string());
                        } else if let Ok(v6) = <[u8; 16]>::try_from(*ip) {
                            names.push(std::net::Ipv6Addr::from(v6).to_string());
                        }
                    }
                    _ => {}
                }
            }
        }
        if names.is_empty() || names.iter().any(|name| name.is_empty() || name.contains(char::is_whitespace)) {
            return Err(bad("the certificate names no host (its subjectAltName holds no DNS name or IP address)"));
        }
        Ok(Certificate {
            der: der.to_vec(),
            sha256: sha256(der),
            spki_sha256: sha256(parsed.tbs_certificate.subject_pki.raw),
            names,
            not_after: u64::try_from(parsed.validity().not_after.timestamp()).unwrap_or(0),
        })
    }
}

fn bad(message: &str) -> Error {
    Error::invalid("bad_certificate", message)
}

/// The name apps check a node's certificate by (`names`, one a line, as stored): the node's
/// SNI when the certificate is made out to it, else its host, else the certificate's first
/// name; none without names.
pub(crate) fn check_name<'n>(names: &'n str, sni: &str, host: &str) -> Option<&'n str> {
    let mut all = names.lines().filter(|name| !name.is_empty());
    let find = |wanted: &str| names.lines().find(|name| !wanted.is_empty() && name.eq_ignore_ascii_case(wanted));
    find(sni).or_else(|| find(host)).or_else(|| all.next())
}

/// Keeps `certificate` as node `id`'s; when it is not the one kept already, the node's users
/// get new snapshots (their apps check the new one). Returns whether it changed.
pub(crate) fn register(
    conn: &Connection,
    changes: &mut Changes,
    id: NodeId,
    certificate: &Certificate,
    now: u64,
) -> Result<bool, Error> {
    let (kept, name): (Option<Vec<u8>>, String) =
        conn.query_row("SELECT cert_der, name FROM nodes WHERE id = ?1", [id], |row| Ok((row.get(0)?, row.get(1)?)))?;
    if kept.as_deref() == Some(certificate.der.as_slice()) {
        return Ok(false);
    }
    conn.execute(
        "UPDATE nodes SET cert_der = ?2, cert_sha256 = ?3, spki_sha256 = ?4, cert_names = ?5 WHERE id = ?1",
        params![id, certificate.der, certificate.sha256, certificate.spki_sha256, certificate.names.join("\n")],
    )?;
    changes.users_of_node(conn, id)?;
    audit(conn, now, "node", "node.certificate", &format!("node {id} ({name})"), &hex::encode(certificate.sha256))?;
    Ok(true)
}

/// Links check a node's public certificate the usual way until a day before it expires;
/// from then on they pin its own again (apps refresh profiles twice a day by default).
pub(crate) const PUBLIC_MARGIN: u64 = 86_400;

/// An expiry this near, with renewals failing, is told (the `node.certificate_expiring` event).
pub(crate) const EXPIRY_WARNING: u64 = 14 * 86_400;

/// What a node says of its public certificate (`hearth_acme::Status`, as it reports it).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AcmeReport {
    /// The domain.
    pub(crate) domain: String,
    /// The certificate it serves for it (PEM; empty: none).
    #[serde(default)]
    pub(crate) certificate: String,
    #[serde(default)]
    pub(crate) not_before: u64,
    #[serde(default)]
    pub(crate) not_after: u64,
    /// When it was issued to the node.
    #[serde(default)]
    pub(crate) renewed: u64,
    /// Why its last attempt failed (empty: it did not).
    #[serde(default)]
    pub(crate) error: String,
    /// When.
    #[serde(default)]
    pub(crate) error_at: u64,
    /// Attempts failed in a row.
    #[serde(default)]
    pub(crate) failures: u32,
}

/// The most of a renewal error kept (the CA's words).
const MAX_ERROR: usize = 500;

/// Whether links check the node's public certificate the usual way at `now`: it has a domain,
/// and a certificate for it valid past [`PUBLIC_MARGIN`].
pub(crate) fn is_public(domain: &str, certificate: Option<&[u8]>, now: u64) -> bool {
    if domain.is_empty() {
        return false;
    }
    let Some(certificate) = certificate.and_then(|der| Certificate::from_der(der).ok()) else { return false };
    certificate.names.iter().any(|name| name.eq_ignore_ascii_case(domain))
        && certificate.not_after > now + PUBLIC_MARGIN
}

/// Keeps what node `id` says of its public certificate, and brings its links in line.
pub(crate) fn report_acme(
    conn: &Connection,
    changes: &mut Changes,
    id: NodeId,
    report: &AcmeReport,
    now: u64,
) -> Result<(), Error> {
    if !hearth_acme::is_domain(&report.domain) {
        return Err(bad("the public certificate's domain is not a DNS name"));
    }
    let certificate = match report.certificate.trim() {
        "" => None,
        pem => Some(Certificate::from_pem(pem)?),
    };
    if let Some(certificate) = &certificate
        && !certificate.names.iter().any(|name| name.eq_ignore_ascii_case(&report.domain))
    {
        return Err(bad("the public certificate is not for the domain reported"));
    }
    let error: String = report.error.chars().filter(|c| !c.is_control()).take(MAX_ERROR).collect();
    conn.execute(
        "UPDATE nodes SET acme_cert = ?2, acme_not_after = ?3, acme_renewed = ?4, acme_error = ?5, acme_error_at = ?6,
                          acme_domain = ?7
         WHERE id = ?1",
        params![
            id,
            certificate.as_ref().map(|c| c.der.as_slice()),
            certificate.as_ref().map_or(0, |c| c.not_after),
            report.renewed.min(now),
            error,
            if error.is_empty() { 0 } else { report.error_at.min(now) },
            report.domain.to_ascii_lowercase()
        ],
    )?;
    refresh_public(conn, changes, id, now)?;
    Ok(())
}

/// Sets whether node `id`'s links check its public certificate at `now`; when that changed,
/// its users get new snapshots. Returns whether it changed.
pub(crate) fn refresh_public(conn: &Connection, changes: &mut Changes, id: NodeId, now: u64) -> Result<bool, Error> {
    let (domain, certificate, was): (String, Option<Vec<u8>>, bool) =
        conn.query_row("SELECT domain, acme_cert, acme_public FROM nodes WHERE id = ?1", [id], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?;
    let public = is_public(&domain, certificate.as_deref(), now);
    if public == was {
        return Ok(false);
    }
    conn.execute("UPDATE nodes SET acme_public = ?2 WHERE id = ?1", params![id, public])?;
    changes.users_of_node(conn, id)?;
    let what = if public { "links check the public certificate" } else { "links pin the node's own certificate" };
    audit(conn, now, "node", "node.certificate", &format!("node {id}"), what)?;
    Ok(true)
}

/// Brings every node with a domain in line at `now` (a public certificate near its expiry
/// goes back to pinning), and tells once per certificate of one whose renewals fail within
/// [`EXPIRY_WARNING`] of its expiry. Returns how many nodes changed.
pub(crate) fn sweep(conn: &Connection, changes: &mut Changes, now: u64) -> Result<usize, Error> {
    let nodes: Vec<(NodeId, String, u64, String, u64)> = conn
        .prepare_cached(
            "SELECT id, name, acme_not_after, acme_error, acme_warned FROM nodes WHERE domain != '' OR acme_public = 1",
        )?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)))?
        .collect::<Result<_, _>>()?;
    let mut changed = 0;
    for (id, name, not_after, error, warned) in nodes {
        if refresh_public(conn, changes, id, now)? {
            changed += 1;
        }
        if !error.is_empty() && not_after > 0 && not_after <= now + EXPIRY_WARNING && warned != not_after {
            let data = serde_json::json!({
                "node": { "id": id, "name": name },
                "expires": not_after,
                "error": error,
            });
            crate::store::events::emit(conn, now, "node.certificate_expiring", &format!("node {id}"), &data)?;
            conn.execute("UPDATE nodes SET acme_warned = ?2 WHERE id = ?1", params![id, not_after])?;
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made(names: &[&str]) -> Certificate {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let parsed = Certificate::from_pem(&cert.pem()).unwrap();
        assert_eq!(parsed.der, cert.der().as_ref());
        assert_eq!(parsed.spki_sha256, sha256(&rcgen::PublicKeyData::subject_public_key_info(&key)));
        parsed
    }

    #[test]
    fn certificates_are_read_with_their_names_and_pins() {
        let cert = made(&["node1.example.net", "203.0.113.7", "2001:db8::1"]);
        assert_eq!(cert.names, ["node1.example.net", "203.0.113.7", "2001:db8::1"]);
        assert_eq!(cert.sha256, sha256(&cert.der));
        assert!(cert.not_after > 4_000_000_000, "rcgen's default lasts to 4096");
        assert!(Certificate::from_pem("not a certificate").is_err());
        assert!(Certificate::from_der(&cert.der[..cert.der.len() - 1]).is_err(), "cut short");
        let mut longer = cert.der.clone();
        longer.push(0);
        assert!(Certificate::from_der(&longer).is_err(), "bytes after it");
        assert!(Certificate::from_der(&vec![0x30; MAX_CERTIFICATE + 1]).is_err());
    }

    #[test]
    fn the_name_checked_is_the_sni_the_host_or_the_first() {
        let names = "node1.example.net\n203.0.113.7";
        assert_eq!(check_name(names, "NODE1.example.net", "203.0.113.7"), Some("node1.example.net"));
        assert_eq!(check_name(names, "", "203.0.113.7"), Some("203.0.113.7"));
        assert_eq!(check_name(names, "cdn.example.org", "other.example"), Some("node1.example.net"));
        assert_eq!(check_name("", "a", "b"), None);
    }
}
