//! sing-box JSON profiles: a TUN inbound, one hysteria2 outbound per entry, a selector over
//! them, and rules that sniff, hijack DNS and keep private addresses direct.
//!
//! Everything written here is accepted by sing-box 1.11 and later (rule actions, `address`
//! on TUN, `server_ports` and `hop_interval` on hysteria2). sing-box refuses unknown fields,
//! so what newer clients understand is only written for them: from 1.13 on, a self-signed
//! endpoint is pinned by `certificate_public_key_sha256`; before, its certificate is given
//! inline (`certificate`, which every version Hearth writes for takes as the only root it
//! trusts). `insecure` (no check at all) is written only for a self-signed node whose owner
//! allows unverified clients, and only where neither check can be made.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Serialize;

use super::entries::entries;
use super::format::SingBoxVersion;
use crate::wire::{Endpoint, Snapshot};

/// The selector every outbound is in; the route's final outbound.
pub const SELECTOR: &str = "proxy";
const DIRECT: &str = "direct";

#[derive(Serialize)]
struct Config<'a> {
    log: Log,
    inbounds: [Inbound; 1],
    outbounds: Vec<Outbound<'a>>,
    route: Route,
}

#[derive(Serialize)]
struct Log {
    level: &'static str,
}

#[derive(Serialize)]
struct Inbound {
    #[serde(rename = "type")]
    kind: &'static str,
    tag: &'static str,
    address: [&'static str; 2],
    auto_route: bool,
    strict_route: bool,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Outbound<'a> {
    Selector { tag: &'static str, outbounds: Vec<String>, interrupt_exist_connections: bool },
    Hysteria2(Box<Hysteria2<'a>>),
    Direct { tag: &'static str },
}

#[derive(Serialize)]
struct Hysteria2<'a> {
    tag: String,
    server: &'a str,
    server_port: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    server_ports: Option<[String; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hop_interval: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    obfs: Option<Obfs<'a>>,
    password: &'a str,
    tls: Tls<'a>,
}

#[derive(Serialize)]
struct Obfs<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    password: &'a str,
}

#[derive(Serialize)]
struct Tls<'a> {
    enabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    server_name: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    insecure: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    certificate: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    certificate_public_key_sha256: Option<[String; 1]>,
    alpn: [&'static str; 1],
}

#[derive(Serialize)]
struct Route {
    rules: [Rule; 3],
    #[serde(rename = "final")]
    final_outbound: &'static str,
    auto_detect_interface: bool,
}

#[derive(Serialize, Default)]
struct Rule {
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ip_is_private: Option<bool>,
    action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    outbound: Option<&'static str>,
}

/// The lines of a certificate's PEM.
fn pem_lines(der: &[u8]) -> Vec<String> {
    let body = B64.encode(der);
    let mut lines = vec!["-----BEGIN CERTIFICATE-----".to_owned()];
    // Base64 is ASCII: 64-byte pieces are whole characters.
    lines.extend(body.as_bytes().chunks(64).map(|line| String::from_utf8_lossy(line).into_owned()));
    lines.push("-----END CERTIFICATE-----".to_owned());
    lines
}

fn hysteria2<'a>(name: String, endpoint: &'a Endpoint, credential: &'a str, version: SingBoxVersion) -> Hysteria2<'a> {
    // A self-signed node: from 1.13 its public key is pinned; before, its certificate is the
    // one root the client trusts (checked with the name it is made out to); a client with
    // neither check is told to check nothing only where the owner allows unverified clients.
    let pin = endpoint
        .spki_sha256
        .filter(|_| endpoint.insecure && version >= SingBoxVersion::PINS_PUBLIC_KEY)
        .map(|pin| [B64.encode(pin)]);
    let certificate = match &endpoint.identity.certificate {
        Some(der) if endpoint.insecure && pin.is_none() => Some(pem_lines(der)),
        _ => None,
    };
    // A server name only where it means something: the certificate's own name when the
    // certificate is checked, else an explicit SNI, or a host name.
    let server_name = endpoint
        .identity
        .name
        .as_deref()
        .filter(|_| certificate.is_some())
        .or(endpoint.sni.as_deref())
        .or_else(|| endpoint.host.parse::<std::net::IpAddr>().is_err().then_some(endpoint.host.as_str()));
    Hysteria2 {
        tag: name,
        server: &endpoint.host,
        server_port: endpoint.port,
        server_ports: endpoint.hop.map(|hop| [format!("{}:{}", hop.start, hop.end)]),
        hop_interval: endpoint.hop.map(|_| "30s"),
        obfs: endpoint.obfs.as_deref().map(|password| Obfs { kind: "salamander", password }),
        password: credential,
        tls: Tls {
            enabled: true,
            server_name,
            insecure: endpoint.insecure && pin.is_none() && certificate.is_none() && endpoint.identity.unverified,
            certificate,
            certificate_public_key_sha256: pin,
            alpn: ["h3"],
        },
    }
}

/// The JSON profile for a client of `version`.
pub fn render(snapshot: &Snapshot, version: SingBoxVersion) -> String {
    let version = version.at_least_oldest();
    let entries = entries(snapshot, &[SELECTOR, DIRECT]);
    let mut outbounds = vec![Outbound::Selector {
        tag: SELECTOR,
        outbounds: entries.iter().map(|entry| entry.name.clone()).collect(),
        interrupt_exist_connections: true,
    }];
    outbounds.extend(entries.iter().map(|entry| {
        Outbound::Hysteria2(Box::new(hysteria2(entry.name.clone(), &entry.endpoint, entry.credential, version)))
    }));
    outbounds.push(Outbound::Direct { tag: DIRECT });
    let config = Config {
        log: Log { level: "warn" },
        inbounds: [Inbound {
            kind: "tun",
            tag: "tun-in",
            address: ["172.19.0.1/30", "fdfe:dcba:9876::1/126"],
            auto_route: true,
            strict_route: true,
        }],
        outbounds,
        route: Route {
            rules: [
                Rule { action: "sniff", ..Rule::default() },
                Rule { protocol: Some("dns"), action: "hijack-dns", ..Rule::default() },
                Rule { ip_is_private: Some(true), action: "route", outbound: Some(DIRECT), ..Rule::default() },
            ],
            final_outbound: SELECTOR,
            auto_detect_interface: true,
        },
    };
    let mut json = serde_json::to_string_pretty(&config).expect("a profile always serializes to JSON");
    json.push('\n');
    json
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::tests::sample_snapshot;

    fn tls_of(endpoint: &Endpoint, version: SingBoxVersion) -> serde_json::Value {
        serde_json::to_value(hysteria2("n".into(), endpoint, "c", version)).unwrap()["tls"].clone()
    }

    /// A self-signed node: pinned by its key from 1.13, trusted as the only root (by the name
    /// it is made out to) before; `insecure` only where neither can be done and the owner
    /// allows it. A node with a CA's certificate is checked the usual way.
    #[test]
    fn a_self_signed_node_is_always_checked() {
        let (v1_11, v1_13) = (SingBoxVersion::OLDEST, SingBoxVersion::PINS_PUBLIC_KEY);
        let mut node = sample_snapshot().endpoints[0].clone();
        node.sni = Some("other.example".into());
        let old = tls_of(&node, v1_11);
        assert_eq!(old["certificate"][0], "-----BEGIN CERTIFICATE-----");
        assert_eq!(old["server_name"], "cdn.example.net", "the certificate's name, not the SNI");
        assert!(old.get("insecure").is_none() && old.get("certificate_public_key_sha256").is_none());
        let new = tls_of(&node, v1_13);
        assert_eq!(new["certificate_public_key_sha256"][0], B64.encode([0xcd; 32]));
        assert_eq!(new["server_name"], "other.example");
        assert!(new.get("insecure").is_none() && new.get("certificate").is_none());
        // Without the certificate (a node that has not registered it), an old client checks
        // the chain, which fails: closed, never open, unless the owner allows it.
        node.identity.certificate = None;
        assert!(tls_of(&node, v1_11).get("insecure").is_none());
        node.identity.unverified = true;
        assert_eq!(tls_of(&node, v1_11)["insecure"], true);
        assert!(tls_of(&node, v1_13).get("insecure").is_none(), "the pin still holds");
        // A CA's certificate: no pin, no certificate, no insecure, whatever the node allows.
        let mut public = sample_snapshot().endpoints[2].clone();
        public.identity.unverified = true;
        for version in [v1_11, v1_13] {
            let tls = tls_of(&public, version);
            assert_eq!(tls, serde_json::json!({ "enabled": true, "server_name": "h.example.org", "alpn": ["h3"] }));
        }
    }
}
