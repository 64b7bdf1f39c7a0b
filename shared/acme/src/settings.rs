//! What the crate is told (the CA, the domain, the challenge) and how it says it failed.

use std::path::PathBuf;

/// Let's Encrypt's directory, the default CA.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// How the CA checks that the program answers for the domain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Challenge {
    /// A token over plain HTTP on TCP 80 (`http-01`).
    #[serde(rename = "http-01")]
    Http01,
    /// A certificate over TLS on TCP 443, asked for by ALPN `acme-tls/1` (`tls-alpn-01`):
    /// nothing to open beside the HTTPS port.
    #[default]
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
}

impl std::fmt::Display for Challenge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Challenge::Http01 => "http-01",
            Challenge::TlsAlpn01 => "tls-alpn-01",
        })
    }
}

/// What a [`Manager`] needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The domain the certificate is for.
    pub domain: String,
    /// The CA's directory URL.
    pub directory: String,
    /// Where the CA may write about the account (expiry notices), if anywhere.
    pub email: Option<String>,
    /// External Account Binding: the key id and the HMAC key (base64url), for CAs that ask
    /// for it (ZeroSSL).
    pub eab: Option<(String, String)>,
    /// How the CA checks the domain.
    pub challenge: Challenge,
    /// A root certificate (PEM file) to trust for the CA's own HTTPS, in place of the system's
    /// roots (a private CA; Pebble in tests).
    pub ca_root: Option<PathBuf>,
}

/// Why getting a certificate failed.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    /// The CA refused, or could not be reached.
    #[error("the CA: {0}")]
    Ca(#[from] instant_acme::Error),
    /// The CA checked the domain and found it wanting (its own words).
    #[error("the CA could not check the domain: {0}")]
    Refused(String),
    /// What the CA issued is not a certificate for the domain.
    #[error("the CA issued what cannot be used: {0}")]
    Issued(String),
    /// The settings cannot work (a bad EAB key, a missing root file).
    #[error("the ACME settings: {0}")]
    Settings(String),
    /// Reading or writing the directory.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Whether `name` is a DNS name a CA issues for: letters, digits and hyphens in labels of at
/// most 63, at least two labels, no IP address.
pub fn is_domain(name: &str) -> bool {
    name.len() <= 253
        && name.contains('.')
        && name.parse::<std::net::IpAddr>().is_err()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn domains_are_names_a_ca_issues_for() {
        for good in ["node1.example.net", "a-b.example", "xn--80ak6aa92e.example"] {
            assert!(super::is_domain(good), "{good}");
        }
        for bad in ["localhost", "203.0.113.7", "-a.example", "a..example", "a b.example", "", "a.example/x"] {
            assert!(!super::is_domain(bad), "{bad}");
        }
    }
}
