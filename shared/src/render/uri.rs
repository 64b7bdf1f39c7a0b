//! `hysteria2://` share links and the base64 list of them.
//!
//! `hysteria2://<auth>@<host>:<port>/?obfs=salamander&obfs-password=..&sni=..&pinSHA256=..&pcs=..&mport=a-b#<name>`
//! The port stays numeric even with port hopping (v2rayN and v2rayNG refuse the spec's
//! multi-port form); the range goes in `mport`.
//!
//! A self-signed node's links carry its pin twice (`pinSHA256`, the spec's; `pcs`, which
//! v2rayN reads first) and never `insecure=1`, which apps that read no pin (NekoBox,
//! Hiddify's link reader, v2rayN on its sing-box core) take as "accept any certificate":
//! such apps refuse the node instead. Only a node whose owner allows unverified clients gets
//! `insecure=1` beside its pin.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::entries::{Entry, entries};
use crate::wire::Snapshot;

/// Everything but RFC 3986's unreserved characters is escaped.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// The share link of one entry.
pub fn link(entry: &Entry<'_>) -> String {
    let mut out = String::with_capacity(256);
    write_link(&mut out, entry);
    out
}

/// Appends the share link of one entry to `out`.
fn write_link(out: &mut String, entry: &Entry<'_>) {
    use std::fmt::Write as _;
    let endpoint = &entry.endpoint;
    // Writing to a String cannot fail.
    let _ = write!(out, "hysteria2://{}@", utf8_percent_encode(entry.credential, COMPONENT));
    if endpoint.host.contains(':') {
        let _ = write!(out, "[{}]", endpoint.host);
    } else {
        out.push_str(&endpoint.host);
    }
    let _ = write!(out, ":{}/", endpoint.port);
    let mut separator = '?';
    let mut param = |out: &mut String, key: &str, value: std::fmt::Arguments<'_>| {
        out.push(separator);
        separator = '&';
        let _ = write!(out, "{key}={value}");
    };
    if let Some(password) = &endpoint.obfs {
        param(out, "obfs", format_args!("salamander"));
        param(out, "obfs-password", format_args!("{}", utf8_percent_encode(password, COMPONENT)));
    }
    if let Some(sni) = &endpoint.sni {
        param(out, "sni", format_args!("{}", utf8_percent_encode(sni, COMPONENT)));
    }
    // A self-signed node is checked by its pin; `insecure=1` (no check at all in the apps
    // that read no pin) only where the owner allows unverified clients.
    if endpoint.insecure && endpoint.identity.unverified {
        param(out, "insecure", format_args!("1"));
    }
    if let Some(pin) = &endpoint.cert_sha256 {
        let pin = hex::encode(pin);
        param(out, "pinSHA256", format_args!("{pin}"));
        // v2rayN reads `pcs` first; read from `pinSHA256` alone, a pin turns its own insecure on.
        param(out, "pcs", format_args!("{pin}"));
    }
    if let Some(hop) = endpoint.hop {
        param(out, "mport", format_args!("{}-{}", hop.start, hop.end));
    }
    let _ = write!(out, "#{}", utf8_percent_encode(&entry.name, COMPONENT));
}

/// The share links of a snapshot, one per line.
pub fn links(snapshot: &Snapshot) -> String {
    let entries = entries(snapshot, &[]);
    let mut out = String::with_capacity(256 * entries.len());
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        write_link(&mut out, entry);
    }
    out
}

/// The base64 list: standard base64 of the newline-joined links.
pub fn base64_list(snapshot: &Snapshot) -> String {
    B64.encode(links(snapshot))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::tests::sample_snapshot;

    #[test]
    fn links_escape_and_carry_every_option() {
        let lines = links(&sample_snapshot());
        let lines: Vec<&str> = lines.lines().collect();
        assert_eq!(
            lines[0],
            format!(
                "hysteria2://s3cret%20pass%2Fwith%3Aodd%40chars@tokyo.example.net:443/?obfs=salamander\
                 &obfs-password=salamander%20pw&sni=cdn.example.net&pinSHA256={pin}&pcs={pin}\
                 &mport=20000-30000#Tokyo%20%F0%9F%87%AF%F0%9F%87%B5",
                pin = "ab".repeat(32)
            )
        );
        assert!(lines[1].starts_with("hysteria2://s3cret%20pass%2Fwith%3Aodd%40chars@[2001:db8::7]:8443/#"));
        assert!(lines[1].ends_with("#tokyo%20%F0%9F%87%AF%F0%9F%87%B5%20%282%29"));
        assert!(lines[2].ends_with("#Quote%20%22%20colon%3A%20hash%20%23"), "{}", lines[2]);
    }

    /// A self-signed node's link never says `insecure=1` (apps that read no pin would check
    /// nothing), unless its owner allows unverified clients; a node with a CA's certificate
    /// carries no pin and no `insecure`.
    #[test]
    fn insecure_only_where_the_owner_allows_it() {
        let snapshot = sample_snapshot();
        let entry = |endpoint: &crate::wire::Endpoint| Entry {
            name: "n".into(),
            endpoint: std::borrow::Cow::Owned(endpoint.clone()),
            credential: "c",
        };
        let mut pinned = snapshot.endpoints[0].clone();
        assert!(!link(&entry(&pinned)).contains("insecure"));
        pinned.identity.unverified = true;
        assert!(link(&entry(&pinned)).contains(&format!("&insecure=1&pinSHA256={}", "ab".repeat(32))));
        let mut public = snapshot.endpoints[2].clone();
        public.identity.unverified = true;
        let public = link(&entry(&public));
        assert!(!public.contains("insecure") && !public.contains("pin") && !public.contains("pcs"), "{public}");
    }
}
