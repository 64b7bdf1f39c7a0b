//! A node's settings as the API and CLI give them, and the checks each passes before it is
//! stored; a group's note is checked as a node's texts are ([`check_text`]).

use serde::Deserialize;

use crate::error::Error;

/// The longest host, in bytes (a DNS name's limit).
pub(crate) const MAX_HOST: usize = 253;

/// The longest text of a node or group (SNI, obfuscation password, masquerade, a group's
/// note), in bytes.
pub(crate) const MAX_TEXT: usize = 255;

/// A node's settings as the API and CLI give them.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodeInput {
    /// Shown to users in their apps.
    pub(crate) name: Option<String>,
    /// The public host name or IP address clients connect to.
    pub(crate) host: Option<String>,
    /// The UDP port.
    pub(crate) port: Option<u16>,
    /// Port hopping: `"20000-30000"`, or `""` for none.
    pub(crate) hop: Option<String>,
    /// The TLS server name clients send (empty: the host).
    pub(crate) sni: Option<String>,
    /// `self_signed` (clients pin the node's certificate) or `operator` (a CA-issued one).
    pub(crate) tls: Option<String>,
    /// The Salamander obfuscation password (empty: none).
    pub(crate) obfs: Option<String>,
    /// What a non-Hysteria visitor sees: empty for the built-in site, or a URL to proxy.
    pub(crate) masquerade: Option<String>,
    /// Groups (by name) whose users this node serves; new nodes default to `default`.
    pub(crate) groups: Option<Vec<String>>,
    /// What its traffic counts for against users' quotas: 2 counts each byte twice, 0.5 half
    /// (0.001 to 100; 1 by default).
    pub(crate) multiplier: Option<f64>,
    /// Its monthly traffic cap in bytes, up and down together (0: none).
    pub(crate) quota: Option<u64>,
    /// The day of the month (1 to 28, UTC) the cap's month starts.
    pub(crate) quota_day: Option<u32>,
    /// Let apps that can check nothing about a self-signed node connect to it unchecked
    /// (anyone on their path can then pose as the node to them). Off by default.
    pub(crate) allow_unverified: Option<bool>,
    /// The node's domain: it gets a certificate for it from a public CA by ACME, and apps
    /// check that one the usual way once it has it (empty: none).
    pub(crate) domain: Option<String>,
}

/// A node's domain: empty, or a DNS name a CA issues for.
pub(super) fn check_domain(domain: &str) -> Result<String, Error> {
    let domain = domain.trim().to_ascii_lowercase();
    if domain.is_empty() || hearth_acme::is_domain(&domain) {
        return Ok(domain);
    }
    Err(Error::invalid("bad_domain", "domain must be empty or a DNS name (node1.example.net) that points at the node"))
}

pub(super) fn check_host(host: &str) -> Result<String, Error> {
    let host = host.trim();
    let ok = !host.is_empty()
        && host.len() <= MAX_HOST
        && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    if !ok {
        return Err(Error::invalid("bad_host", "host must be a DNS name or an IP address"));
    }
    Ok(host.to_owned())
}

pub(super) fn parse_hop(hop: &str) -> Result<(u16, u16), Error> {
    if hop.trim().is_empty() {
        return Ok((0, 0));
    }
    let bad = || Error::invalid("bad_hop", "hop must be a port range like 20000-30000 (start below end)");
    let (start, end) = hop.trim().split_once('-').ok_or_else(bad)?;
    let start: u16 = start.trim().parse().map_err(|_| bad())?;
    let end: u16 = end.trim().parse().map_err(|_| bad())?;
    if start == 0 || start >= end {
        return Err(bad());
    }
    // What a node opens at most (one socket a port).
    if end - start >= MAX_HOP_PORTS {
        return Err(Error::invalid("bad_hop", format!("a hop range holds at most {MAX_HOP_PORTS} ports")));
    }
    Ok((start, end))
}

/// The most ports a hop range holds (the node opens a socket for each).
const MAX_HOP_PORTS: u16 = 16_384;

/// A node's masquerade: empty (nginx's 404 page) or the `http(s)://` address of a web server
/// whose answers the node gives anyone without a credential.
pub(super) fn check_masquerade(value: &str) -> Result<String, Error> {
    let value = check_text(value, "bad_masquerade", "masquerade")?;
    if value.is_empty() {
        return Ok(value);
    }
    let host = value.strip_prefix("https://").or_else(|| value.strip_prefix("http://")).map(|rest| {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        authority.rsplit_once('@').map_or(authority, |(_, host)| host)
    });
    match host {
        Some(host) if !host.is_empty() && !value.contains(char::is_whitespace) && !value.contains('@') => Ok(value),
        _ => Err(Error::invalid(
            "bad_masquerade",
            "masquerade is empty (a 404 page) or the http:// or https:// address of a web site to show",
        )),
    }
}

pub(super) fn check_text(value: &str, code: &'static str, what: &str) -> Result<String, Error> {
    if value.len() > MAX_TEXT || value.chars().any(char::is_control) {
        return Err(Error::invalid(
            code,
            format!("{what} must be at most {MAX_TEXT} bytes, without control characters"),
        ));
    }
    Ok(value.trim().to_owned())
}

pub(super) fn check_tls(tls: &str) -> Result<(), Error> {
    if tls != "self_signed" && tls != "operator" {
        return Err(Error::invalid("bad_tls", "tls must be self_signed or operator"));
    }
    Ok(())
}
