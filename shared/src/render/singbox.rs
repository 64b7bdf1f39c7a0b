//! sing-box JSON profiles: a TUN inbound, one hysteria2 outbound per entry, a selector over
//! them, and rules that sniff, hijack DNS and keep private addresses direct.
//!
//! Everything written here is accepted by sing-box 1.11 and later (rule actions, `address`
//! on TUN, `server_ports` and `hop_interval` on hysteria2). sing-box refuses unknown fields,
//! so what newer clients understand is only written for them: from 1.13 on, an endpoint with
//! a public-key pin gets `certificate_public_key_sha256` instead of `insecure`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Serialize;

use super::{SingBoxVersion, entries};
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

fn hysteria2<'a>(name: String, endpoint: &'a Endpoint, credential: &'a str, version: SingBoxVersion) -> Hysteria2<'a> {
    let pin = endpoint.spki_sha256.filter(|_| version >= SingBoxVersion::PINS_PUBLIC_KEY).map(|pin| [B64.encode(pin)]);
    // A server name only where it means something: an explicit SNI, or a host name.
    let server_name = endpoint
        .sni
        .as_deref()
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
            insecure: endpoint.insecure && pin.is_none(),
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
