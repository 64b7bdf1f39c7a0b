//! Hearth's shared core.
//!
//! Everything that more than one of Hearth's programs needs lives here: the keys and their
//! roles ([`keys`]), the one signed container ([`envelope`]) and the trust it is checked
//! against ([`trust`]), the wire types that travel inside envelopes ([`wire`]), sealing of
//! per-user snapshots ([`seal`]), rendering of every subscription format ([`render`]),
//! User-Agent matching ([`agent`]), rate limiting ([`ratelimit`]), node request
//! authentication ([`nodeauth`]), signed node releases ([`release`]) and the client address
//! behind a trusted reverse proxy ([`forwarded`]).
//!
//! This crate must not depend on an IO runtime (no tokio, axum, rusqlite, quinn or the
//! Worker runtime) and must build for `wasm32-unknown-unknown`: the Cloudflare Worker links
//! it. Everything here is a pure function of its inputs: time comes in as an argument and
//! randomness as an RNG, so the logic is tested without clocks or sockets.
#![warn(missing_docs)]

pub mod agent;
pub mod devices;
pub mod envelope;
pub mod forwarded;
pub mod keys;
pub mod nodeauth;
pub mod ratelimit;
pub mod release;
pub mod render;
pub mod seal;
pub mod trust;
pub mod wire;

/// A SHA-256 digest.
pub type Digest = [u8; 32];

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> Digest {
    use sha2::Digest as _;
    sha2::Sha256::digest(data).into()
}

/// Whether `text` is a web address Hearth passes on (in headers, to nodes): `http://` or
/// `https://`, printable ASCII without spaces, at most 512 bytes.
pub fn is_web_address(text: &str) -> bool {
    (text.starts_with("https://") || text.starts_with("http://"))
        && text.len() <= 512
        && text.bytes().all(|b| b.is_ascii_graphic())
}

/// Compares two byte strings in constant time (for equal lengths). Use it for every secret.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    #[test]
    fn web_addresses() {
        assert!(super::is_web_address("https://edge.example.net/s"));
        assert!(super::is_web_address("http://127.0.0.1:8787"));
        for bad in ["javascript:alert(1)", "ftp://x", "https://a b", "https://ex\u{e4}mple.net", ""] {
            assert!(!super::is_web_address(bad), "{bad}");
        }
        assert!(!super::is_web_address(&format!("https://{}", "a".repeat(510))));
    }
}
