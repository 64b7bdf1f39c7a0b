//! Surge profiles (Surge iOS 5.8 and Surge Mac 5.4 on, the first with Hysteria 2): a managed
//! profile with one `hysteria2` proxy per entry, a select group over them, and a rule that
//! sends everything through it.
//!
//! ```text
//! #!MANAGED-CONFIG https://edge.example/s/TOKEN interval=43200 strict=false
//! [General]
//! loglevel = notify
//! dns-server = system
//! skip-proxy = 127.0.0.1, 192.168.0.0/16, 10.0.0.0/8, 172.16.0.0/12, 100.64.0.0/10, localhost, *.local
//!
//! [Proxy]
//! Tokyo = hysteria2, tokyo.example.net, 443, password="...", sni=cdn.example.net, server-cert-fingerprint-sha256=<hex>, salamander-password="...", port-hopping="20000-30000", port-hopping-interval=30
//!
//! [Proxy Group]
//! Proxy = select, Tokyo
//!
//! [Rule]
//! FINAL,Proxy
//! ```
//!
//! Where each piece comes from (Surge's manual, manual.nssurge.com, read 2026):
//!
//! - `#!MANAGED-CONFIG <url> interval=<seconds> strict=false` (profile/managed-profile): the
//!   first line of a profile Surge fetches again from `<url>`; every update must carry it
//!   again, or the profile stops being managed. `interval` is the profile's update interval;
//!   `strict=false` lets a person keep using the profile when an update fails. It names the
//!   link as the edge was asked for it (the link at the primary once a domain is blocked), so it
//!   is written by [`super::answer_at`]; [`super::render`] alone leaves it out.
//! - `[General]` (profile/general): `loglevel` (`notify`, the default), `dns-server`
//!   (`system`: the device's own, as in the manual's quick start), `skip-proxy` (the local
//!   networks and `*.local` stay off the proxy, as in the manual's example). Every other key is
//!   optional and left to Surge's defaults.
//! - `[Proxy]` (policies/hysteria2): `Name = hysteria2, <host>, <port>`, then `password`,
//!   `port-hopping` (ports or ranges separated by `;`: the node's range `a-b`; the main port
//!   is then ignored) with `port-hopping-interval` (seconds; Hearth's 30, Surge's default),
//!   and `salamander-password` (Salamander obfuscation; the manual marks it Mac 6.4.3 and
//!   later: an older Surge cannot reach a node that obfuscates). Values are quoted where they
//!   may hold a comma (policies/overview: "Quote a value if it contains commas"). No
//!   `download-bandwidth`: like the sing-box profile, Hearth leaves congestion control to BBR.
//! - TLS (policies/tls, shared by every protocol over TLS or QUIC, Hysteria 2 named among
//!   them): `sni` (the endpoint's server name; Surge sends the host name without it), and
//!   `server-cert-fingerprint-sha256` (64 hexadecimal characters, "a pinned server
//!   certificate instead of the standard X.509 validation"): the SHA-256 of the certificate,
//!   the pin the share links carry as `pinSHA256` and mihomo as `fingerprint`. Surge checks a
//!   self-signed node by it alone, so `skip-cert-verify` is never written: a self-signed node
//!   without a pin is refused by Surge rather than trusted blindly, whatever the node allows.
//!   No `alpn`: it needs iOS 5.20 and Mac 6.7, and the Hysteria 2 page has a note on the
//!   default ALPN (`h3`, as for Surge's other QUIC protocols).
//! - `[Proxy Group]` `Proxy = select, ...` and `[Rule]` `FINAL,Proxy`
//!   (getting-started/quick-start, rule/final). Names are the ones every format gives
//!   ([`super::entries`]), made safe for a line ([`super::conf`]) and never one of Surge's
//!   built-in policies.
//!
//! Sub-Store's Surge producer (sub-store-org/Sub-Store, `producers/surge.js`) writes the same
//! keys for Hysteria 2, which was read to confirm how they are written in practice.

use std::fmt::Write as _;

use super::conf::{profile_entries, proxies_and_group};
use super::entries::Entry;
use crate::wire::Snapshot;

/// The select group every proxy is in.
pub const GROUP: &str = "Proxy";

/// Surge's built-in policies (policies/built-in, policy/reject), plus [`GROUP`]: no proxy
/// may take their names.
const RESERVED: &[&str] = &[
    GROUP,
    "DIRECT",
    "REJECT",
    "REJECT-TINYGIF",
    "REJECT-DROP",
    "REJECT-NO-DROP",
    "CELLULAR",
    "CELLULAR-ONLY",
    "HYBRID",
    "NO-HYBRID",
];

/// The `[General]` section.
const GENERAL: &str = "[General]\n\
    loglevel = notify\n\
    dns-server = system\n\
    skip-proxy = 127.0.0.1, 192.168.0.0/16, 10.0.0.0/8, 172.16.0.0/12, 100.64.0.0/10, localhost, *.local\n";

/// The `[Proxy]` line of one entry.
fn proxy(out: &mut String, entry: &Entry<'_>) {
    let endpoint = &entry.endpoint;
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "{} = hysteria2, {}, {}, password=\"{}\"",
        entry.name, endpoint.host, endpoint.port, entry.credential
    );
    if let Some(sni) = &endpoint.sni {
        let _ = write!(out, ", sni={sni}");
    }
    if let Some(pin) = &endpoint.cert_sha256 {
        let _ = write!(out, ", server-cert-fingerprint-sha256={}", hex::encode(pin));
    }
    if let Some(password) = &endpoint.obfs {
        let _ = write!(out, ", salamander-password=\"{password}\"");
    }
    if let Some(hop) = endpoint.hop {
        let _ = write!(out, ", port-hopping=\"{}-{}\", port-hopping-interval=30", hop.start, hop.end);
    }
    out.push('\n');
}

/// The profile; `managed`, when given, is the link Surge fetches it from again (the
/// `#!MANAGED-CONFIG` line).
pub fn render(snapshot: &Snapshot, managed: Option<&str>) -> String {
    let (entries, left_out) = profile_entries(snapshot, RESERVED);
    let mut out = String::with_capacity(512 + 256 * entries.len());
    if let Some(url) = managed {
        let interval = u64::from(snapshot.profile.update_interval_hours.max(1)) * 3600;
        let _ = writeln!(out, "#!MANAGED-CONFIG {url} interval={interval} strict=false");
    }
    out.push_str(GENERAL);
    proxies_and_group(&mut out, (&entries, &left_out), GROUP, ", ", proxy);
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::render::conf::tests::{sections, split_line};
    use crate::render::tests::sample_snapshot;
    use crate::wire::Status;

    /// Every key Surge's manual documents for what this profile writes: `[General]`
    /// (profile/general), a `hysteria2` proxy (policies/hysteria2) and the TLS parameters of
    /// every protocol over QUIC (policies/tls). A key not here is a typo.
    const GENERAL_KEYS: &[&str] = &["loglevel", "dns-server", "skip-proxy"];
    const HYSTERIA2_KEYS: &[&str] = &[
        "password",
        "download-bandwidth",
        "port-hopping",
        "port-hopping-interval",
        "salamander-password",
        "gecko-password",
        "skip-cert-verify",
        "sni",
        "server-cert-verify-name",
        "server-cert-fingerprint-sha256",
        "alpn",
    ];

    /// Checks a profile against Surge's syntax: the sections in order, every `[General]` and
    /// proxy key documented, the group listing exactly the proxies, FINAL last, and no check
    /// ever turned off. Gives the proxies' lines.
    pub(crate) fn check(profile: &str) -> Vec<crate::render::conf::tests::Line> {
        let sections = sections(profile);
        let names: Vec<&str> = sections.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["", "General", "Proxy", "Proxy Group", "Rule"], "{profile}");
        assert!(sections[0].1.is_empty(), "nothing before [General] but the managed line");
        for line in &sections[1].1 {
            let (key, value) = line.split_once(" = ").unwrap_or_else(|| panic!("{line}"));
            assert!(GENERAL_KEYS.contains(&key) && !value.is_empty(), "[General] {line}");
        }
        let proxies: Vec<_> = sections[2].1.iter().map(|line| split_line(line)).collect();
        for proxy in &proxies {
            assert_eq!(proxy.plain.len(), 3, "{proxy:?}");
            assert_eq!(proxy.plain[0], "hysteria2");
            assert!(proxy.plain[2].parse::<u16>().is_ok(), "{proxy:?}");
            assert!(!proxy.name.contains([',', '"', '#']) && !proxy.name.contains("//"), "{proxy:?}");
            assert!(!proxy.name.starts_with([';', '/', '[']), "{proxy:?}");
            for (key, value) in &proxy.keys {
                assert!(HYSTERIA2_KEYS.contains(&key.as_str()), "{key} is not a Surge hysteria2 key: {proxy:?}");
                assert!(!value.is_empty(), "{key}");
            }
            assert!(proxy.keys.iter().any(|(key, _)| key == "password"), "{proxy:?}");
            assert!(!proxy.keys.iter().any(|(key, value)| key == "skip-cert-verify" && value != "false"));
        }
        let group = split_line(&sections[3].1[0]);
        assert_eq!(sections[3].1.len(), 1);
        assert_eq!((group.name.as_str(), group.plain[0].as_str()), (GROUP, "select"));
        let members: Vec<&str> = group.plain[1..].iter().map(String::as_str).collect();
        let proxy_names: Vec<&str> = proxies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(members, proxy_names);
        assert_eq!(sections[4].1, [format!("FINAL,{GROUP}")]);
        proxies
    }

    fn key<'a>(line: &'a crate::render::conf::tests::Line, key: &str) -> Option<&'a str> {
        line.keys.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    #[test]
    fn every_endpoint_with_its_pin_sni_obfuscation_and_hopping() {
        let snapshot = sample_snapshot();
        let profile = render(&snapshot, Some("https://edge.example/s/TOKEN"));
        assert!(profile.starts_with("#!MANAGED-CONFIG https://edge.example/s/TOKEN interval=43200 strict=false\n"));
        let proxies = check(&profile);
        let names: Vec<&str> = proxies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["Tokyo 🇯🇵", "tokyo 🇯🇵 (2)", "Quote ＂ colon: hash ＃"]);
        let tokyo = &proxies[0];
        assert_eq!(tokyo.plain, ["hysteria2", "tokyo.example.net", "443"]);
        assert_eq!(key(tokyo, "password"), Some("\"s3cret pass/with:odd@chars\""));
        assert_eq!(key(tokyo, "sni"), Some("cdn.example.net"));
        assert_eq!(key(tokyo, "server-cert-fingerprint-sha256"), Some("ab".repeat(32).as_str()));
        assert_eq!(key(tokyo, "salamander-password"), Some("\"salamander pw\""));
        assert_eq!(key(tokyo, "port-hopping"), Some("\"20000-30000\""));
        assert_eq!(key(tokyo, "port-hopping-interval"), Some("30"));
        assert_eq!(proxies[1].plain, ["hysteria2", "2001:db8::7", "8443"]);
        assert_eq!(proxies[1].keys.len(), 1, "no pin, no SNI, no obfuscation, no hopping");
        assert_eq!(key(&proxies[2], "sni"), Some("h.example.org"));
        assert!(!render(&snapshot, None).contains("MANAGED-CONFIG"));
    }

    /// A self-signed node is checked by its pin alone, which Surge reads for Hysteria 2; it is
    /// never told to skip the check, not even where its owner allows unverified clients. A
    /// self-signed node with no pin is refused by Surge, not trusted.
    #[test]
    fn a_self_signed_node_is_pinned_and_never_unchecked() {
        let mut snapshot = sample_snapshot();
        for endpoint in &mut snapshot.endpoints {
            endpoint.identity.unverified = true;
        }
        snapshot.endpoints[1].insecure = true;
        let profile = render(&snapshot, None);
        let proxies = check(&profile);
        assert_eq!(key(&proxies[0], "server-cert-fingerprint-sha256"), Some("ab".repeat(32).as_str()));
        assert!(!profile.contains("skip-cert-verify"), "{profile}");
        assert_eq!(key(&proxies[1], "server-cert-fingerprint-sha256"), None);
    }

    /// A name can neither end its value nor take a built-in policy's; a value the profile
    /// cannot carry leaves its server out with a comment (never written altered, never a line
    /// cut in two); with no server left, one entry that cannot connect says so.
    #[test]
    fn what_a_line_cannot_carry_is_never_written() {
        let mut snapshot = sample_snapshot();
        snapshot.endpoints[0].name = "DIRECT".into();
        snapshot.endpoints[1].name = "A, B = C".into();
        snapshot.endpoints[2].obfs = Some("pass\"word".into());
        let profile = render(&snapshot, None);
        let proxies = check(&profile);
        let names: Vec<&str> = proxies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["DIRECT (2)", "A， B ＝ C"]);
        assert!(profile.contains("# Quote ＂ colon: hash ＃: left out, its obfuscation password has a character"));
        assert!(!profile.contains("pass\"word"));

        snapshot.endpoints[0].host = "evil.example\nFINAL,DIRECT".into();
        snapshot.endpoints[1].sni = Some("a b".into());
        let profile = render(&snapshot, None);
        let proxies = check(&profile);
        assert_eq!(proxies.len(), 1);
        assert_eq!(proxies[0].name, crate::render::conf::NONE_READABLE);
        assert_eq!(proxies[0].plain, ["hysteria2", "127.0.0.1", "1"]);
        assert!(!profile.contains("evil.example") && !profile.contains("s3cret"), "{profile}");
    }

    /// A user who cannot connect gets one entry named after the reason, with no credential
    /// and no server of theirs.
    #[test]
    fn an_inactive_user_gets_one_entry_named_why() {
        let mut snapshot = sample_snapshot();
        snapshot.status = Status::OverQuota;
        let profile = render(&snapshot, None);
        let proxies = check(&profile);
        assert_eq!(proxies.len(), 1);
        assert_eq!(proxies[0].name, "Traffic quota used up");
        assert_eq!(key(&proxies[0], "password"), Some("\"inactive\""));
        assert!(!profile.contains("s3cret") && !profile.contains("tokyo.example"));
    }
}
