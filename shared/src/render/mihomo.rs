//! Mihomo / Clash Meta YAML: the proxies, one select group, and a rule that sends everything
//! through it. Mihomo rejects a whole file with a repeated proxy name, so names come from
//! [`super::entries`] and never take the group's name or a built-in policy's.
//!
//! A self-signed node is pinned by the SHA-256 of its certificate under both names the apps
//! read: mihomo's `fingerprint` (which it checks even beside `skip-cert-verify: true`) and
//! Stash's `server-cert-fingerprint`; `skip-cert-verify` is true only where the owner allows
//! unverified clients.

use serde::Serialize;

use super::entries::entries;
use crate::wire::{Endpoint, Snapshot};

/// The select group every proxy is in.
pub const GROUP: &str = "Proxy";

/// Names mihomo keeps for its own policies, plus [`GROUP`].
const RESERVED: &[&str] = &[GROUP, "DIRECT", "REJECT", "REJECT-DROP", "PASS", "COMPATIBLE", "GLOBAL"];

#[derive(Serialize)]
struct Config<'a> {
    proxies: Vec<Proxy<'a>>,
    #[serde(rename = "proxy-groups")]
    groups: [Group; 1],
    rules: [String; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct Proxy<'a> {
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    server: &'a str,
    port: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    ports: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hop_interval: Option<u32>,
    password: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    obfs: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    obfs_password: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sni: Option<&'a str>,
    skip_cert_verify: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    fingerprint: Option<String>,
    /// Stash's name for the same pin (mihomo reads no key it does not know).
    #[serde(skip_serializing_if = "Option::is_none")]
    server_cert_fingerprint: Option<String>,
    alpn: [&'static str; 1],
}

#[derive(Serialize)]
struct Group {
    name: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    proxies: Vec<String>,
}

/// The YAML profile.
pub fn render(snapshot: &Snapshot) -> String {
    let entries = entries(snapshot, RESERVED);
    let proxies: Vec<Proxy<'_>> = entries
        .iter()
        .map(|entry| {
            let endpoint: &Endpoint = &entry.endpoint;
            Proxy {
                name: entry.name.clone(),
                kind: "hysteria2",
                server: &endpoint.host,
                port: endpoint.port,
                ports: endpoint.hop.map(|hop| format!("{}-{}", hop.start, hop.end)),
                hop_interval: endpoint.hop.map(|_| 30),
                password: entry.credential,
                obfs: endpoint.obfs.as_ref().map(|_| "salamander"),
                obfs_password: endpoint.obfs.as_deref(),
                sni: endpoint.sni.as_deref(),
                // mihomo checks a `fingerprint` whatever `skip-cert-verify` says; an app that
                // reads none of the two pins must not be told to skip the check.
                skip_cert_verify: endpoint.insecure && endpoint.identity.unverified,
                fingerprint: endpoint.cert_sha256.map(hex::encode),
                server_cert_fingerprint: endpoint.cert_sha256.map(hex::encode),
                alpn: ["h3"],
            }
        })
        .collect();
    let group =
        Group { name: GROUP, kind: "select", proxies: entries.iter().map(|entry| entry.name.clone()).collect() };
    let config = Config { proxies, groups: [group], rules: [format!("MATCH,{GROUP}")] };
    serde_yaml_ng::to_string(&config).expect("a profile always serializes to YAML")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::tests::sample_snapshot;

    /// The YAML parses back, proxy names are unique, and the group lists exactly them.
    #[test]
    fn profile_parses_back_with_unique_names() {
        let mut snapshot = sample_snapshot();
        snapshot.endpoints[2].name = "Proxy".into();
        snapshot.endpoints[1].name = "DIRECT".into();
        let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&render(&snapshot)).unwrap();
        let names: Vec<&str> =
            yaml["proxies"].as_sequence().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["Tokyo 🇯🇵", "DIRECT (2)", "Proxy (2)"]);
        let group = &yaml["proxy-groups"][0];
        assert_eq!(group["name"].as_str(), Some(GROUP));
        let members: Vec<&str> = group["proxies"].as_sequence().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
        assert_eq!(members, names);
        assert_eq!(yaml["proxies"][1]["server"].as_str(), Some("2001:db8::7"));
        assert_eq!(yaml["proxies"][0]["password"].as_str(), Some("s3cret pass/with:odd@chars"));
    }

    /// A self-signed node is pinned under mihomo's and Stash's names, and never skips the
    /// check unless its owner allows unverified clients.
    #[test]
    fn a_self_signed_node_is_pinned_and_checked() {
        let mut snapshot = sample_snapshot();
        let yaml = |snapshot: &crate::wire::Snapshot| -> serde_yaml_ng::Value {
            serde_yaml_ng::from_str(&render(snapshot)).unwrap()
        };
        let pinned = yaml(&snapshot)["proxies"][0].clone();
        assert_eq!(pinned["fingerprint"].as_str(), Some("ab".repeat(32).as_str()));
        assert_eq!(pinned["server-cert-fingerprint"], pinned["fingerprint"]);
        assert_eq!(pinned["skip-cert-verify"].as_bool(), Some(false));
        snapshot.endpoints[0].identity.unverified = true;
        snapshot.endpoints[2].identity.unverified = true;
        let allowed = yaml(&snapshot);
        assert_eq!(allowed["proxies"][0]["skip-cert-verify"].as_bool(), Some(true));
        assert_eq!(allowed["proxies"][2]["skip-cert-verify"].as_bool(), Some(false), "a CA's certificate");
    }
}
