//! Hearth's shared core.
//!
//! Everything that more than one of Hearth's programs needs lives here: the keys and their
//! roles ([`keys`]), the one signed container ([`envelope`]) and the trust it is checked
//! against ([`trust`]), the wire types that travel inside envelopes ([`wire`]), sealing of
//! per-user snapshots ([`seal`]), rendering of every subscription format ([`render`]),
//! User-Agent matching ([`agent`]), rates in every unit ([`Rate`]), rate limiting
//! ([`ratelimit`]), node request authentication ([`nodeauth`]), signed node releases
//! ([`release`]), the client address behind a trusted reverse proxy ([`forwarded`]) and the
//! programs' settings as data, which the manual's tables are made from ([`settings`]).
//!
//! This crate must not depend on an IO runtime (no tokio, axum, rusqlite, quinn or the
//! Worker runtime) and must build for `wasm32-unknown-unknown`: the Cloudflare Worker links
//! it. Everything here is a pure function of its inputs: time comes in as an argument,
//! randomness as an RNG and files as their bytes (the programs read and write them), so the
//! logic is tested without clocks, sockets or disks.
#![warn(missing_docs)]

pub mod acl;
pub mod agent;
pub mod devices;
pub mod envelope;
pub mod forwarded;
pub mod keys;
pub mod nodeauth;
pub mod rate;
pub mod ratelimit;
pub mod release;
pub mod render;
pub mod routing;
pub mod seal;
pub mod settings;
pub mod trust;
pub mod wire;

pub use rate::{Rate, RateError};

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

/// `text` with every character beyond ASCII percent-encoded (as UTF-8), as a browser sends a
/// link with such letters in its path: what a header may carry.
pub fn encode_beyond_ascii(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, &percent_encoding::AsciiSet::EMPTY).to_string()
}

/// `text` cut to at most `max` bytes, on a character boundary (never in a letter's middle).
/// Returns whether anything was cut.
pub fn cut_to(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let at = (0..=max).rev().find(|&at| text.is_char_boundary(at)).unwrap_or(0);
    text.truncate(at);
    true
}

/// Compares two byte strings in constant time (for equal lengths). Use it for every secret.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    #[test]
    fn cuts_fall_between_letters() {
        let mut text = "ab\u{e4}\u{44f}".to_owned(); // 2 + 2 + 2 bytes
        assert!(!super::cut_to(&mut text, 6));
        assert!(super::cut_to(&mut text, 5) && text == "ab\u{e4}");
        assert!(super::cut_to(&mut text, 3) && text == "ab");
        assert!(super::cut_to(&mut text, 0) && text.is_empty());
    }

    #[test]
    fn web_addresses() {
        assert!(super::is_web_address("https://edge.example.net/s"));
        assert!(super::is_web_address("http://127.0.0.1:8787"));
        for bad in ["javascript:alert(1)", "ftp://x", "https://a b", "https://ex\u{e4}mple.net", ""] {
            assert!(!super::is_web_address(bad), "{bad}");
        }
        assert!(!super::is_web_address(&format!("https://{}", "a".repeat(510))));
    }

    /// Nothing outside tests reads files, opens sockets, starts processes or reads the
    /// clock: the Worker links this crate, and its logic stays a function of its inputs.
    #[test]
    fn the_crate_does_no_io() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![src];
        let mut checked = 0;
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|entry| entry.unwrap().path()));
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // Test modules (from `#[cfg(test)]` to the end of their top-level item, and the
            // golden files' test module) may use the disk.
            let mut code = String::new();
            let mut rest = text.as_str();
            while let Some(at) = rest.find("#[cfg(test)]") {
                code.push_str(&rest[..at]);
                let item = &rest[at..];
                let end = if item.lines().nth(1).is_some_and(|line| line.ends_with('{')) {
                    item.find("\n}\n").map_or(item.len(), |end| end + 3)
                } else {
                    item.find(";\n").map_or(item.len(), |end| end + 2)
                };
                rest = &item[end..];
            }
            code.push_str(rest);
            if path.ends_with("render/golden.rs") {
                continue;
            }
            for io in [
                "std::fs",
                "TcpStream",
                "TcpListener",
                "UdpSocket",
                "std::process",
                "std::env::var",
                "SystemTime::now",
                "Instant::now",
                "File::open",
                "File::create",
            ] {
                assert!(!code.contains(io), "{} uses {io} outside its tests", path.display());
            }
            checked += 1;
        }
        assert!(checked > 10, "read {checked} files");
    }
}
