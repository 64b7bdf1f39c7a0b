//! Loon profiles: one `Hysteria2` node per entry, a select group over them, and a rule that
//! sends everything through it, imported as a remote configuration (`loon://import?sub=`).
//!
//! ```text
//! [General]
//! dns-server = system
//! skip-proxy = 192.168.0.0/16,10.0.0.0/8,172.16.0.0/12,localhost,*.local
//! bypass-tun = 10.0.0.0/8,100.64.0.0/10,127.0.0.0/8,169.254.0.0/16,172.16.0.0/12,192.168.0.0/16,224.0.0.0/4,255.255.255.255/32
//!
//! [Proxy]
//! Tokyo = Hysteria2,tokyo.example.net,443,"...",sni=cdn.example.net,tls-cert-sha256=<hex>,tls-pubkey-sha256=<hex>,salamander-password="...",server-ports="20000-30000",hop-interval=30,udp=true
//!
//! [Proxy Group]
//! Proxy = select,Tokyo
//!
//! [Rule]
//! FINAL,Proxy
//! ```
//!
//! Where each piece comes from: Loon's manual (nsloon.app, from its source
//! Loon0x00/Loon0x00.github.io, read 2026-08) unless said otherwise.
//!
//! - `[General]` (General): `dns-server` (`system`, the device's own), `skip-proxy` and
//!   `bypass-tun` (local networks stay off the proxy and the tunnel, the ranges of Loon's own
//!   example configuration, Loon0x00/LoonExampleConfig `example.conf`).
//! - `[Proxy]` (Node, "Hysteria 2"): `Name = Hysteria2,<host>,<port>,"<password>"`, then
//!   `sni`, `salamander-password` (quoted, as in the manual's example) and `udp=true` (lets
//!   the node carry UDP: Hysteria 2 does).
//! - Pins (Node, "TLS options"): `tls-cert-sha256`, the SHA-256 of the server's certificate,
//!   the pin the share links carry as `pinSHA256`; and `tls-pubkey-sha256`, the SHA-256 of its
//!   public key (SubjectPublicKeyInfo, hex, as `openssl pkey -pubin -outform DER | openssl
//!   dgst -sha256` prints it), which Loon prefers when both are given. `skip-cert-verify` is
//!   never written (its default is false). The manual does not say whether Loon accepts a
//!   self-signed certificate on a matching pin alone or still checks its chain first; if it
//!   checks the chain, Loon refuses a self-signed node rather than trusting it, and the person
//!   uses another app: never an unchecked connection.
//! - Port hopping: `server-ports="a-b"` and `hop-interval=<seconds>` are not in Loon's manual;
//!   they are what Sub-Store writes and reads for Loon since May 2026 (sub-store-org/Sub-Store
//!   commit 049f468, "Loon Hysteria 2 supports server-ports, hop-interval",
//!   `producers/loon.js` and `parsers/peggy/loon.js`). The main port stays numeric, so a Loon
//!   that does not know them still reaches the node on it.
//! - `[Proxy Group]` `Proxy = select,...` (Policy groups, `select`) and `[Rule]` `FINAL,Proxy`
//!   (Rules, FINAL). Names are the ones every format gives ([`super::entries`]), made safe for
//!   a line ([`super::conf`]), and never one of Loon's built-in policies.

use std::fmt::Write as _;

use super::conf::{profile_entries, proxies_and_group};
use super::entries::Entry;
use crate::wire::Snapshot;

/// The select group every node is in.
pub const GROUP: &str = "Proxy";

/// Loon's built-in policies (Policies: `DIRECT`, the reject family; `PROXY`, which its example
/// configuration describes as built in), plus [`GROUP`]: no node may take their names.
const RESERVED: &[&str] = &[
    GROUP,
    "PROXY",
    "DIRECT",
    "REJECT",
    "REJECT-IMG",
    "REJECT-DICT",
    "REJECT-ARRAY",
    "REJECT-DROP",
    "REJECT-NO-DROP",
    "REJECT-VIDEO",
];

/// The `[General]` section.
const GENERAL: &str = "[General]\n\
    dns-server = system\n\
    skip-proxy = 192.168.0.0/16,10.0.0.0/8,172.16.0.0/12,localhost,*.local\n\
    bypass-tun = 10.0.0.0/8,100.64.0.0/10,127.0.0.0/8,169.254.0.0/16,172.16.0.0/12,192.168.0.0/16,224.0.0.0/4,255.255.255.255/32\n";

/// The `[Proxy]` line of one entry.
fn node(out: &mut String, entry: &Entry<'_>) {
    let endpoint = &entry.endpoint;
    // Writing to a String cannot fail.
    let _ = write!(out, "{} = Hysteria2,{},{},\"{}\"", entry.name, endpoint.host, endpoint.port, entry.credential);
    if let Some(sni) = &endpoint.sni {
        let _ = write!(out, ",sni={sni}");
    }
    if let Some(pin) = &endpoint.cert_sha256 {
        let _ = write!(out, ",tls-cert-sha256={}", hex::encode(pin));
    }
    if let Some(pin) = &endpoint.spki_sha256 {
        let _ = write!(out, ",tls-pubkey-sha256={}", hex::encode(pin));
    }
    if let Some(password) = &endpoint.obfs {
        let _ = write!(out, ",salamander-password=\"{password}\"");
    }
    if let Some(hop) = endpoint.hop {
        let _ = write!(out, ",server-ports=\"{}-{}\",hop-interval=30", hop.start, hop.end);
    }
    out.push_str(",udp=true\n");
}

/// The profile.
pub fn render(snapshot: &Snapshot) -> String {
    let (entries, left_out) = profile_entries(snapshot, RESERVED);
    let mut out = String::with_capacity(512 + 256 * entries.len());
    out.push_str(GENERAL);
    proxies_and_group(&mut out, (&entries, &left_out), GROUP, ",", node);
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::render::conf::tests::{Line, sections, split_line};
    use crate::render::tests::sample_snapshot;
    use crate::wire::Status;

    /// The `[General]` keys Loon's manual documents that this profile writes (General).
    const GENERAL_KEYS: &[&str] = &["dns-server", "skip-proxy", "bypass-tun"];
    /// The keys Loon's manual documents for a Hysteria 2 node (Node: its example, the common
    /// options and the TLS options)...
    const MANUAL_KEYS: &[&str] = &[
        "sni",
        "skip-cert-verify",
        "tls-cert-sha256",
        "tls-pubkey-sha256",
        "tls-profile",
        "fast-open",
        "udp",
        "salamander-password",
    ];
    /// ...and the two Sub-Store writes for Loon's port hopping, which the manual does not list.
    const SUB_STORE_KEYS: &[&str] = &["server-ports", "hop-interval"];

    /// Checks a profile against Loon's syntax: the sections in order, every `[General]` and
    /// node key known, the group listing exactly the nodes, FINAL last, and no check ever
    /// turned off. Gives the nodes' lines.
    pub(crate) fn check(profile: &str) -> Vec<Line> {
        let sections = sections(profile);
        let names: Vec<&str> = sections.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["", "General", "Proxy", "Proxy Group", "Rule"], "{profile}");
        assert!(sections[0].1.is_empty());
        for line in &sections[1].1 {
            let (key, value) = line.split_once(" = ").unwrap_or_else(|| panic!("{line}"));
            assert!(GENERAL_KEYS.contains(&key) && !value.is_empty(), "[General] {line}");
        }
        let nodes: Vec<Line> = sections[2].1.iter().map(|line| split_line(line)).collect();
        for node in &nodes {
            assert_eq!(node.plain.len(), 4, "{node:?}");
            assert_eq!(node.plain[0], "Hysteria2");
            assert!(node.plain[2].parse::<u16>().is_ok(), "{node:?}");
            assert!(!node.name.contains([',', '"', '#']) && !node.name.contains("//"), "{node:?}");
            assert!(!node.name.starts_with([';', '/', '[']), "{node:?}");
            assert!(node.plain[3].len() >= 2 && node.plain[3].starts_with('"') && node.plain[3].ends_with('"'));
            for (key, value) in &node.keys {
                assert!(
                    MANUAL_KEYS.contains(&key.as_str()) || SUB_STORE_KEYS.contains(&key.as_str()),
                    "{key} is not a Loon Hysteria2 key: {node:?}"
                );
                assert!(!value.is_empty(), "{key}");
            }
            assert!(!node.keys.iter().any(|(key, value)| key == "skip-cert-verify" && value != "false"));
        }
        let group = split_line(&sections[3].1[0]);
        assert_eq!(sections[3].1.len(), 1);
        assert_eq!((group.name.as_str(), group.plain[0].as_str()), (GROUP, "select"));
        let members: Vec<&str> = group.plain[1..].iter().map(String::as_str).collect();
        let node_names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(members, node_names);
        assert_eq!(sections[4].1, [format!("FINAL,{GROUP}")]);
        nodes
    }

    fn key<'a>(line: &'a Line, key: &str) -> Option<&'a str> {
        line.keys.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    #[test]
    fn every_endpoint_with_its_pins_sni_obfuscation_and_hopping() {
        let profile = render(&sample_snapshot());
        let nodes = check(&profile);
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["Tokyo 🇯🇵", "tokyo 🇯🇵 (2)", "Quote ＂ colon: hash ＃"]);
        let tokyo = &nodes[0];
        assert_eq!(tokyo.plain, ["Hysteria2", "tokyo.example.net", "443", "\"s3cret pass/with:odd@chars\""]);
        assert_eq!(key(tokyo, "sni"), Some("cdn.example.net"));
        assert_eq!(key(tokyo, "tls-cert-sha256"), Some("ab".repeat(32).as_str()));
        assert_eq!(key(tokyo, "tls-pubkey-sha256"), Some("cd".repeat(32).as_str()));
        assert_eq!(key(tokyo, "salamander-password"), Some("\"salamander pw\""));
        assert_eq!(key(tokyo, "server-ports"), Some("\"20000-30000\""));
        assert_eq!(key(tokyo, "hop-interval"), Some("30"));
        assert_eq!(key(tokyo, "udp"), Some("true"));
        assert_eq!(nodes[1].plain[1..3], ["2001:db8::7", "8443"]);
        assert_eq!(nodes[1].keys, [("udp".to_owned(), "true".to_owned())]);
        assert_eq!(key(&nodes[2], "sni"), Some("h.example.org"));
    }

    /// A self-signed node carries both pins Loon reads and is never told to skip the check,
    /// not even where its owner allows unverified clients; one with no pin is refused by
    /// Loon's usual check, not trusted.
    #[test]
    fn a_self_signed_node_is_pinned_and_never_unchecked() {
        let mut snapshot = sample_snapshot();
        for endpoint in &mut snapshot.endpoints {
            endpoint.identity.unverified = true;
        }
        snapshot.endpoints[1].insecure = true;
        let profile = render(&snapshot);
        let nodes = check(&profile);
        assert_eq!(key(&nodes[0], "tls-pubkey-sha256"), Some("cd".repeat(32).as_str()));
        assert!(!profile.contains("skip-cert-verify"), "{profile}");
        assert_eq!(key(&nodes[1], "tls-cert-sha256"), None);
    }

    /// What a line cannot carry leaves its server out (never written altered); a user who
    /// cannot connect gets one entry named after the reason, without their credential.
    #[test]
    fn unwritable_servers_are_left_out_and_inactive_users_told_why() {
        let mut snapshot = sample_snapshot();
        snapshot.endpoints[0].name = "PROXY".into();
        snapshot.endpoints[1].sni = Some("x,udp=false".into());
        let profile = render(&snapshot);
        let nodes = check(&profile);
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["PROXY (2)", "Quote ＂ colon: hash ＃"]);
        assert!(profile.contains("# tokyo 🇯🇵: left out, its server name has a character"), "{profile}");
        assert!(!profile.contains("udp=false"));

        snapshot.status = Status::Disabled;
        let profile = render(&snapshot);
        let nodes = check(&profile);
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].name, "Account disabled");
        assert_eq!(nodes[0].plain[3], "\"inactive\"");
        assert!(!profile.contains("s3cret") && !profile.contains("tokyo.example"));
    }
}
