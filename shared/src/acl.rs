//! Routing rules in the official Hysteria 2 server's ACL syntax, so owners can paste the rules
//! they already have: one rule a line, `outbound(address)`, `outbound(address, proto/port)` or
//! `outbound(address, proto/port, hijack_address)`, `#` starting a comment.
//!
//! - **address**: an IP (`1.1.1.1`, `2606:4700:4700::1111`), a CIDR (`73.0.0.0/8`), an exact
//!   domain (`example.com`, not its subdomains), a domain with `*` wildcards (`*.example.com`,
//!   `*.google.*`), a suffix (`suffix:example.com`: the domain and its subdomains),
//!   `geoip:XX`, `geosite:name` or `geosite:name@attr`, or `all` (also `*`).
//! - **proto/port**: `tcp`, `udp`, `tcp/80`, `udp/20000-30000`, `*/443`; `*`, `*/*` or nothing
//!   for both protocols and every port.
//! - **hijack_address**: an IP the connection goes to instead.
//!
//! Rules are tried from the top; the first that matches names the outbound. Names and
//! addresses are case-insensitive. The outbounds `direct`, `reject` and `default` exist unless
//! the owner defines their own of the same name. A request is matched by the domain the client
//! asked for (Hysteria 2 requests carry it) and by every address it resolved to, so an IP rule
//! holds whichever name led there.
//!
//! This module parses and matches; it reads no files. GeoIP and GeoSite rules name a country
//! or category that the node resolves from the databases the owner points it at ([`Geo`]).
//!
//! The outbounds rules name are the owner's [`Outbound`]s: `direct` (optionally bound to an
//! interface or a source address, with an IPv4/IPv6 preference), `socks5` (TCP, and UDP
//! through UDP ASSOCIATE) and `http` (CONNECT: TCP only, so a rule that would send UDP through
//! one is refused, [`check`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

mod matcher;
mod rule;
pub use matcher::Matcher;
pub use rule::{Address, Geo, NoGeo, Proto, Request, Rule, route};

/// The most rules a set holds.
pub const MAX_RULES: usize = 4096;
/// The longest rule set, in bytes of text.
pub const MAX_TEXT: usize = 256 * 1024;

/// Why a rule set was refused: where (line and column, from 1) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct AclError {
    /// The line, counted from 1 (0: the whole set).
    pub line: usize,
    /// The column in characters, counted from 1, where the fault starts (0: the whole line).
    pub column: usize,
    /// What is wrong.
    pub problem: String,
}

impl AclError {
    fn describe(&self) -> String {
        match (self.line, self.column) {
            (0, _) => self.problem.clone(),
            (line, 0) => format!("line {line}: {}", self.problem),
            (line, column) => format!("line {line}, column {column}: {}", self.problem),
        }
    }
}

fn refuse(line: usize, problem: impl Into<String>) -> AclError {
    AclError { line, column: 0, problem: problem.into() }
}

fn refuse_at(line: usize, column: usize, problem: impl Into<String>) -> AclError {
    AclError { line, column, problem: problem.into() }
}

/// Parses a rule set. Every line is checked; the first bad one refuses the set. `outbounds`
/// are the names the owner defined (beside the built-in `direct`, `reject` and `default`):
/// a rule naming any other is refused.
pub fn parse(text: &str, outbounds: &[&str]) -> Result<Vec<Rule>, AclError> {
    parse_with(text, Some(outbounds))
}

/// Parses a rule set whatever outbounds it names: the node's reading of a set control
/// already checked, where an outbound the node does not have refuses what the rule matches.
pub fn parse_any(text: &str) -> Result<Vec<Rule>, AclError> {
    parse_with(text, None)
}

fn parse_with(text: &str, outbounds: Option<&[&str]>) -> Result<Vec<Rule>, AclError> {
    if text.len() > MAX_TEXT {
        return Err(refuse(0, format!("the rules are over {} KiB", MAX_TEXT / 1024)));
    }
    let mut rules = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.split('#').next().unwrap_or_default();
        if line.trim().is_empty() {
            continue;
        }
        if rules.len() == MAX_RULES {
            return Err(refuse(number, format!("more than {MAX_RULES} rules")));
        }
        rules.push(rule(line, number, outbounds)?);
    }
    Ok(rules)
}

/// The column (in characters, from 1) at which `part`, a slice of `line`, starts.
fn column_of(line: &str, part: &str) -> usize {
    let offset = (part.as_ptr() as usize).saturating_sub(line.as_ptr() as usize).min(line.len());
    line[..offset].chars().count() + 1
}

fn rule(line: &str, number: usize, outbounds: Option<&[&str]>) -> Result<Rule, AclError> {
    let trimmed = line.trim();
    let at = |part: &str| column_of(line, part);
    let syntax =
        || refuse_at(number, at(trimmed), format!("not a rule (outbound(address[, proto/port[, hijack]])): {trimmed}"));
    let (name, rest) = trimmed.split_once('(').ok_or_else(syntax)?;
    let name = name.trim();
    let inner = rest.strip_suffix(')').ok_or_else(syntax)?;
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return Err(syntax());
    }
    let fields: Vec<&str> = inner.split(',').map(str::trim).collect();
    if fields.len() > 3 || fields.iter().any(|field| field.contains(['(', ')'])) || fields[0].is_empty() {
        return Err(syntax());
    }
    let outbound = name.to_lowercase();
    let builtin = ["direct", "reject", "default"].contains(&outbound.as_str());
    if let Some(outbounds) = outbounds
        && !builtin
        && !outbounds.iter().any(|defined| defined.eq_ignore_ascii_case(&outbound))
    {
        return Err(refuse_at(number, at(name), format!("no outbound named {name}")));
    }
    let address =
        address(&fields[0].to_lowercase()).map_err(|problem| refuse_at(number, at(fields[0]), problem.to_string()))?;
    let (proto, ports) = proto_port(fields.get(1).copied().unwrap_or(""))
        .ok_or_else(|| refuse_at(number, at(fields[1]), format!("not a protocol/port: {}", fields[1])))?;
    let hijack = match fields.get(2) {
        None => None,
        Some(ip) => Some(
            ip.parse()
                .map_err(|_| refuse_at(number, at(ip), format!("a hijack address must be an IP address: {ip}")))?,
        ),
    };
    Ok(Rule { outbound, address, proto, ports, hijack, line: number, column: at(trimmed) })
}

fn address(text: &str) -> Result<Address, AddressError> {
    if text == "all" || text == "*" {
        return Ok(Address::All);
    }
    if let Some(code) = text.strip_prefix("geoip:") {
        if code.is_empty() {
            return Err(AddressError::EmptyGeoIp);
        }
        return Ok(Address::GeoIp(code.to_owned()));
    }
    if let Some(site) = text.strip_prefix("geosite:") {
        let mut parts = site.split('@').map(str::trim);
        let name = parts.next().unwrap_or_default().to_owned();
        if name.is_empty() {
            return Err(AddressError::EmptyGeoSite);
        }
        return Ok(Address::GeoSite { name, attrs: parts.map(str::to_owned).collect() });
    }
    if let Some(suffix) = text.strip_prefix("suffix:") {
        if suffix.is_empty() {
            return Err(AddressError::EmptySuffix);
        }
        return Ok(Address::Suffix(suffix.to_owned()));
    }
    if let Some((ip, bits)) = text.split_once('/') {
        let ip: IpAddr = ip.parse().map_err(|_| AddressError::NotCidr(text.to_owned()))?;
        let most = if ip.is_ipv4() { 32 } else { 128 };
        let bits: u8 =
            bits.parse().ok().filter(|bits| *bits <= most).ok_or_else(|| AddressError::NotCidr(text.to_owned()))?;
        return Ok(Address::Cidr(ip, bits));
    }
    if let Ok(ip) = text.parse() {
        return Ok(Address::Ip(ip));
    }
    if text.contains('*') {
        return Ok(Address::Wildcard(text.to_owned()));
    }
    Ok(Address::Domain(text.to_owned()))
}

/// What is wrong with a rule's address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// `geoip:` with no country.
    #[error("an empty GeoIP country code")]
    EmptyGeoIp,
    /// `geosite:` with no name.
    #[error("an empty GeoSite name")]
    EmptyGeoSite,
    /// `suffix:` with no suffix.
    #[error("an empty domain suffix")]
    EmptySuffix,
    /// An address with a `/` that is not a range.
    #[error("not a CIDR: {0}")]
    NotCidr(String),
}

type ProtoPort = (Option<Proto>, Option<(u16, u16)>);

fn proto_port(text: &str) -> Option<ProtoPort> {
    let text = text.to_lowercase();
    let (proto, port) = match text.split_once('/') {
        Some((proto, port)) => (proto.to_owned(), port.trim().to_owned()),
        None => (text.clone(), "*".to_owned()),
    };
    let proto = match proto.as_str() {
        "" | "*" => None,
        "tcp" => Some(Proto::Tcp),
        "udp" => Some(Proto::Udp),
        _ => return None,
    };
    let ports = match port.as_str() {
        "*" => None,
        port => {
            let (first, last) = port.split_once('-').unwrap_or((port, port));
            let (first, last): (u16, u16) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
            if first > last {
                return None;
            }
            Some((first, last))
        }
    };
    Some((proto, ports))
}

/// An outbound the owner defines, by the name rules give it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbound {
    /// Its name (letters, digits and `_`; case does not matter).
    pub name: String,
    /// What it is.
    pub kind: OutboundKind,
}

/// The kinds of outbound.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutboundKind {
    /// Straight out from the node.
    Direct {
        /// Which addresses to use.
        mode: IpMode,
        /// The interface to send from (`SO_BINDTODEVICE`), if any.
        interface: Option<String>,
        /// The IPv4 source address, if any.
        source_v4: Option<Ipv4Addr>,
        /// The IPv6 source address, if any.
        source_v6: Option<Ipv6Addr>,
    },
    /// A SOCKS5 proxy (TCP, and UDP through UDP ASSOCIATE).
    Socks5 {
        /// `host:port`.
        server: String,
        /// Username and password (RFC 1929), if it asks for them.
        login: Option<Login>,
    },
    /// An HTTP proxy, through CONNECT: TCP only.
    Http {
        /// `host:port`.
        server: String,
        /// Basic authentication, if it asks for it.
        login: Option<Login>,
    },
}

/// A proxy's username and password. `Debug` does not show the password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Login {
    /// The username.
    pub username: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login").field("username", &self.username).field("password", &"****").finish()
    }
}

/// Which addresses a direct outbound uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum IpMode {
    /// Both, as resolved (IPv6 first where it works).
    #[default]
    Auto,
    /// IPv4 only.
    V4,
    /// IPv6 only.
    V6,
    /// IPv4 first, IPv6 when there is none.
    PreferV4,
    /// IPv6 first, IPv4 when there is none.
    PreferV6,
}

/// The longest outbound name.
pub const MAX_NAME: usize = 32;
/// The most outbounds a node has.
pub const MAX_OUTBOUNDS: usize = 64;

/// What is wrong with an outbound the owner wrote.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OutboundError {
    /// Its name is empty, too long, or not letters, digits and `_`.
    #[error("an outbound's name is 1 to {MAX_NAME} letters, digits or '_': {0:?}")]
    Name(String),
    /// It is named `reject`, which is built in.
    #[error("'reject' is built in and cannot be redefined")]
    Reject,
    /// Its interface is not a name Linux takes.
    #[error("{name}: not an interface name: {interface:?}")]
    Interface {
        /// The outbound's name.
        name: String,
        /// The interface it names.
        interface: String,
    },
    /// Its server is not `host:port`.
    #[error("{name}: the server is host:port: {server:?}")]
    Server {
        /// The outbound's name.
        name: String,
        /// The server it names.
        server: String,
    },
    /// Its login cannot be sent to a proxy (RFC 1929 holds each part to 255 bytes).
    #[error("{0}: a username of 1 to 255 bytes and a password of at most 255")]
    Login(String),
}

impl Outbound {
    /// Checks what the owner wrote: a name, a server as `host:port`, an interface name Linux
    /// takes, and a login a proxy can be sent (RFC 1929 holds each part to 255 bytes).
    pub fn check(&self) -> Result<(), OutboundError> {
        let name = &self.name;
        if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(OutboundError::Name(name.clone()));
        }
        if name.eq_ignore_ascii_case("reject") {
            return Err(OutboundError::Reject);
        }
        let login = match &self.kind {
            OutboundKind::Direct { interface, .. } => {
                if let Some(interface) = interface
                    && (interface.is_empty()
                        || interface.len() > 15
                        || interface.contains(['/', ' ', '\0'])
                        || interface == "."
                        || interface == "..")
                {
                    return Err(OutboundError::Interface { name: name.clone(), interface: interface.clone() });
                }
                None
            }
            OutboundKind::Socks5 { server, login } | OutboundKind::Http { server, login } => {
                let port = server.rsplit_once(':').and_then(|(host, port)| {
                    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
                    (!host.is_empty() && !host.contains(['/', ' ', '@'])).then_some(port)
                });
                if port.and_then(|port| port.parse::<u16>().ok()).is_none_or(|port| port == 0) {
                    return Err(OutboundError::Server { name: name.clone(), server: server.clone() });
                }
                login.as_ref()
            }
        };
        if let Some(login) = login
            && (login.username.is_empty() || login.username.len() > 255 || login.password.len() > 255)
        {
            return Err(OutboundError::Login(name.clone()));
        }
        Ok(())
    }

    /// Whether it carries UDP.
    pub fn carries_udp(&self) -> bool {
        !matches!(self.kind, OutboundKind::Http { .. })
    }
}

/// Parses `text` against `outbounds` (each checked, names distinct, at most
/// [`MAX_OUTBOUNDS`]) and refuses a rule that would send UDP through an outbound that cannot
/// carry it, saying which and how to fix it.
pub fn check(text: &str, outbounds: &[Outbound]) -> Result<Vec<Rule>, AclError> {
    check_with(text, outbounds, true)
}

/// [`check`], but a rule may name an outbound not among `outbounds` (a node reading a set
/// control checked against the outbounds of every node; it refuses what such a rule matches).
pub fn check_lenient(text: &str, outbounds: &[Outbound]) -> Result<Vec<Rule>, AclError> {
    check_with(text, outbounds, false)
}

fn check_with(text: &str, outbounds: &[Outbound], names_known: bool) -> Result<Vec<Rule>, AclError> {
    if outbounds.len() > MAX_OUTBOUNDS {
        return Err(refuse(0, format!("more than {MAX_OUTBOUNDS} outbounds")));
    }
    for (i, outbound) in outbounds.iter().enumerate() {
        outbound.check().map_err(|problem| refuse(0, problem.to_string()))?;
        if outbounds[..i].iter().any(|other| other.name.eq_ignore_ascii_case(&outbound.name)) {
            return Err(refuse(0, format!("two outbounds are named {}", outbound.name)));
        }
    }
    let names: Vec<&str> = outbounds.iter().map(|outbound| outbound.name.as_str()).collect();
    let rules = parse_with(text, names_known.then_some(names.as_slice()))?;
    for rule in &rules {
        let through = outbounds.iter().find(|outbound| outbound.name.eq_ignore_ascii_case(&rule.outbound));
        if let Some(outbound) = through
            && !outbound.carries_udp()
            && rule.proto != Some(Proto::Tcp)
        {
            return Err(refuse_at(
                rule.line,
                rule.column,
                format!(
                    "{} is an HTTP proxy, which carries TCP only: give the rule tcp ({}(…, tcp)) or send UDP \
                     through another outbound",
                    outbound.name, rule.outbound
                ),
            ));
        }
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::rule::{in_network, wildcard};
    use super::*;

    /// The examples of the official server's ACL documentation, as an owner would paste them.
    const DOCUMENTED: &str = "\
# Route by site
v4_only(suffix:google.com)
v6_only(*.youtube.com)
some_proxy(geosite:netflix)
reject(geoip:cn)
reject(all, udp/443)   # no QUIC
direct(8.8.8.8, udp/53, 1.1.1.1)
Direct(73.0.0.0/8)
direct(2001:db8::/32, TCP/1000-2000)
default(*.google.*)
direct(all)
";

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn request<'a>(domain: Option<&'a str>, ips: &'a [IpAddr], proto: Proto, port: u16) -> Request<'a> {
        Request { domain, ips, proto, port }
    }

    /// A country and a category to look up, as the node's databases would answer.
    struct TestGeo;

    impl Geo for TestGeo {
        fn in_country(&self, ip: IpAddr, code: &str) -> bool {
            code == "cn" && in_network(ip, "1.0.1.0".parse().unwrap(), 24)
        }
        fn in_category(&self, domain: &str, name: &str, attrs: &[String]) -> bool {
            name == "netflix" && attrs.is_empty() && domain.ends_with("netflix.com")
        }
    }

    #[test]
    fn the_documented_rules_parse_as_written() {
        let rules = parse(DOCUMENTED, &["v4_only", "V6_ONLY", "some_proxy"]).unwrap();
        assert_eq!(rules.len(), 10);
        assert_eq!(rules[0].address, Address::Suffix("google.com".into()));
        assert_eq!(rules[1].address, Address::Wildcard("*.youtube.com".into()));
        assert_eq!(rules[1].outbound, "v6_only");
        assert_eq!(rules[2].address, Address::GeoSite { name: "netflix".into(), attrs: vec![] });
        assert_eq!(rules[3].address, Address::GeoIp("cn".into()));
        assert_eq!((rules[4].proto, rules[4].ports), (Some(Proto::Udp), Some((443, 443))));
        assert_eq!(rules[5].hijack, Some(ip("1.1.1.1")));
        assert_eq!((rules[6].outbound.as_str(), &rules[6].address), ("direct", &Address::Cidr(ip("73.0.0.0"), 8)));
        assert_eq!((rules[7].proto, rules[7].ports), (Some(Proto::Tcp), Some((1000, 2000))));
        assert_eq!(rules[9].address, Address::All);
        assert_eq!(rules[9].line, 11, "lines are counted as written, comments and blanks included");
        let attrs = parse("direct(geosite:google@cn@ads)", &[]).unwrap();
        assert_eq!(
            attrs[0].address,
            Address::GeoSite { name: "google".into(), attrs: vec!["cn".into(), "ads".into()] }
        );
    }

    #[test]
    fn the_first_rule_that_matches_routes() {
        let rules = parse(DOCUMENTED, &["v4_only", "v6_only", "some_proxy"]).unwrap();
        let outbound = |domain: Option<&str>, ips: &[IpAddr], proto, port| {
            route(&rules, &request(domain, ips, proto, port), &TestGeo).map(|rule| rule.outbound.clone())
        };
        let any = [ip("93.184.215.14")];
        assert_eq!(outbound(Some("google.com"), &any, Proto::Tcp, 443).as_deref(), Some("v4_only"));
        assert_eq!(outbound(Some("mail.google.com"), &any, Proto::Tcp, 443).as_deref(), Some("v4_only"));
        assert_eq!(outbound(Some("notgoogle.com"), &any, Proto::Tcp, 443).as_deref(), Some("direct"));
        assert_eq!(outbound(Some("www.youtube.com"), &any, Proto::Tcp, 443).as_deref(), Some("v6_only"));
        assert_eq!(outbound(Some("youtube.com"), &any, Proto::Tcp, 443).as_deref(), Some("direct"), "*. needs a label");
        assert_eq!(outbound(Some("www.netflix.com"), &any, Proto::Tcp, 443).as_deref(), Some("some_proxy"));
        // By the address it resolved to, whatever the name.
        assert_eq!(outbound(Some("example.cn"), &[ip("1.0.1.7")], Proto::Tcp, 80).as_deref(), Some("reject"));
        assert_eq!(outbound(None, &[ip("1.0.1.7")], Proto::Tcp, 80).as_deref(), Some("reject"));
        assert_eq!(outbound(Some("example.com"), &any, Proto::Udp, 443).as_deref(), Some("reject"), "QUIC");
        assert_eq!(outbound(Some("example.com"), &any, Proto::Tcp, 443).as_deref(), Some("direct"));
        let dns = route(&rules, &request(None, &[ip("8.8.8.8")], Proto::Udp, 53), &TestGeo).unwrap();
        assert_eq!(dns.hijack, Some(ip("1.1.1.1")));
        assert_eq!(outbound(None, &[ip("73.9.9.9")], Proto::Tcp, 22).as_deref(), Some("direct"));
        assert_eq!(outbound(None, &[ip("2001:db8::1")], Proto::Tcp, 1500).as_deref(), Some("direct"));
        assert_eq!(outbound(Some("www.google.co.uk"), &any, Proto::Tcp, 443).as_deref(), Some("default"));
        // Without databases, GeoIP and GeoSite rules match nothing.
        let rule = route(&rules, &request(Some("www.netflix.com"), &any, Proto::Tcp, 443), &NoGeo).unwrap();
        assert_eq!(rule.outbound, "direct");
        // No rule at all: the default outbound.
        assert!(route(&[], &request(None, &any, Proto::Tcp, 1), &NoGeo).is_none());
    }

    #[test]
    fn the_index_picks_the_rule_the_list_does() {
        let text = "\
reject(*.ads.example)
warp(suffix:example.com, tcp)
direct(www.example.com)
home(10.0.0.0/8, */53)
reject(::ffff:0:0/96)
reject(10.1.2.3)
warp(*.google.*)
reject(*ads*)
home(ads.*, udp)
direct(2001:db8::/32)
reject(geoip:cn)
direct(suffix:.odd)
warp(all, udp)
";
        let rules = parse(text, &["warp", "home"]).unwrap();
        let matcher = Matcher::new(rules.clone());
        let domains = [
            None,
            Some("example.com"),
            Some("www.example.com"),
            Some("x.ads.example"),
            Some("ads.example"),
            Some("a..ads.example"),
            Some("mail.google.co.uk"),
            Some("google.com"),
            Some("x..odd"),
            Some(".odd"),
            Some("x.odd"),
            Some("ads.net"),
            Some("myads.net"),
        ];
        let ips = [
            vec![],
            vec![ip("10.1.2.3")],
            vec![ip("::ffff:10.1.2.3")],
            vec![ip("10.9.9.9"), ip("2001:db8::1")],
            vec![ip("1.0.1.7")],
            vec![ip("::ffff:1.2.3.4")],
        ];
        let mut checked = 0;
        for domain in domains {
            for ips in &ips {
                for proto in [Proto::Tcp, Proto::Udp] {
                    for port in [53, 443] {
                        let request = request(domain, ips, proto, port);
                        let linear = route(&rules, &request, &TestGeo).map(|rule| rule.line);
                        assert_eq!(matcher.route(&request, &TestGeo).map(|rule| rule.line), linear, "{request:?}");
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 13 * 6 * 4);
    }

    #[test]
    fn addresses_and_ports_match_at_their_edges() {
        let rules =
            parse("direct(10.0.0.0/8, */1000-2000)\nreject(::ffff:0:0/96)\ndirect(0.0.0.0/0, tcp)", &[]).unwrap();
        let first = &rules[0];
        assert!(first.matches(&request(None, &[ip("10.255.255.255")], Proto::Udp, 1000), &NoGeo));
        assert!(first.matches(&request(None, &[ip("10.0.0.1")], Proto::Tcp, 2000), &NoGeo));
        assert!(!first.matches(&request(None, &[ip("10.0.0.1")], Proto::Tcp, 2001), &NoGeo));
        assert!(!first.matches(&request(None, &[ip("11.0.0.1")], Proto::Tcp, 1500), &NoGeo));
        // An IPv4-mapped IPv6 address is the IPv4 address it maps.
        assert!(first.matches(&request(None, &[ip("::ffff:10.1.2.3")], Proto::Tcp, 1500), &NoGeo));
        assert!(rules[2].matches(&request(None, &[ip("192.0.2.1")], Proto::Tcp, 1), &NoGeo));
        assert!(!rules[2].matches(&request(None, &[ip("192.0.2.1")], Proto::Udp, 1), &NoGeo));
        assert!(!rules[2].matches(&request(None, &[ip("2001:db8::1")], Proto::Tcp, 1), &NoGeo));
    }

    #[test]
    fn wildcards_match_any_run_and_stay_linear() {
        assert!(wildcard(b"*.google.*", b"www.google.com"));
        assert!(wildcard(b"*.google.*", b"a.b.google.co.uk"));
        assert!(!wildcard(b"*.google.*", b"google.com"));
        assert!(wildcard(b"a*b*c", b"abc"));
        assert!(wildcard(b"*", b""));
        assert!(!wildcard(b"a*", b"b"));
        // A pattern that backtracks exponentially in a naive matcher.
        let text = "a".repeat(10_000);
        assert!(!wildcard(b"*a*a*a*a*a*a*a*a*b", text.as_bytes()));
    }

    fn socks(name: &str, server: &str) -> Outbound {
        Outbound { name: name.into(), kind: OutboundKind::Socks5 { server: server.into(), login: None } }
    }

    #[test]
    fn outbounds_are_checked_and_http_carries_no_udp() {
        let http = Outbound {
            name: "office".into(),
            kind: OutboundKind::Http {
                server: "proxy.example:3128".into(),
                login: Some(Login { username: "u".into(), password: "secret".into() }),
            },
        };
        let warp = Outbound {
            name: "warp".into(),
            kind: OutboundKind::Direct {
                mode: IpMode::V4,
                interface: Some("wg0".into()),
                source_v4: None,
                source_v6: None,
            },
        };
        let outbounds = [http.clone(), warp, socks("home", "[2001:db8::1]:1080")];
        let rules = check("office(suffix:example.com, tcp)\nhome(all, udp/53)\nwarp(all)", &outbounds).unwrap();
        assert_eq!(rules.len(), 3);
        let error = check("office(suffix:example.com)", &outbounds).unwrap_err();
        assert_eq!(error.line, 1);
        assert!(error.problem.contains("carries TCP only"), "{error}");
        assert!(check("office(all, udp/53)", &outbounds).is_err());
        assert!(!format!("{http:?}").contains("secret"), "the password stays out of logs");
        let bad = [
            (socks("", "a:1"), "name"),
            (socks("two words", "a:1"), "name"),
            (socks("reject", "a:1"), "built in"),
            (socks("p", "a"), "host:port"),
            (socks("p", "a:0"), "host:port"),
            (socks("p", ":80"), "host:port"),
            (socks("p", "a:99999"), "host:port"),
            (socks("p", "user@a:80"), "host:port"),
        ];
        for (outbound, why) in bad {
            let error = check("", std::slice::from_ref(&outbound)).unwrap_err();
            assert!(error.problem.contains(why), "{outbound:?}: {error}");
        }
        let long = Outbound {
            name: "p".into(),
            kind: OutboundKind::Direct {
                mode: IpMode::Auto,
                interface: Some("a-very-long-interface".into()),
                source_v4: None,
                source_v6: None,
            },
        };
        assert!(long.check().unwrap_err().to_string().contains("interface"));
        let twice = check("", &[socks("p", "a:1"), socks("P", "b:2")]).unwrap_err();
        assert!(twice.problem.contains("two outbounds"), "{twice}");
    }

    #[test]
    fn a_bad_line_refuses_the_set_and_says_where() {
        let bad = [
            ("direct(all", 1, "not a rule"),
            ("direct all", 1, "not a rule"),
            ("direct()", 1, "not a rule"),
            ("direct(all, tcp/80, 1.1.1.1, extra)", 1, "not a rule"),
            ("direct(a(b))", 1, "not a rule"),
            ("# fine\nwarp(all)", 2, "no outbound named warp"),
            ("direct(all, icmp)", 1, "not a protocol/port"),
            ("direct(all, tcp/70000)", 1, "not a protocol/port"),
            ("direct(all, tcp/2000-1000)", 1, "not a protocol/port"),
            ("direct(all, tcp/80, example.com)", 1, "hijack address must be an IP"),
            ("direct(10.0.0.0/33)", 1, "not a CIDR"),
            ("direct(geoip:)", 1, "empty GeoIP"),
            ("direct(geosite:@cn)", 1, "empty GeoSite"),
            ("direct(suffix:)", 1, "empty domain suffix"),
        ];
        for (text, line, why) in bad {
            let error = parse(text, &[]).unwrap_err();
            assert_eq!(error.line, line, "{text}");
            assert!(error.problem.contains(why), "{text}: {error}");
            assert!(error.column >= 1, "{text}: {error}");
        }
        // The column points at the fault, counted in characters.
        let columns = [
            ("direct(all, tcp/70000)", 13),
            ("  direct(10.0.0.0/33)", 10),
            ("direct(all, tcp/80, example.com)", 21),
            ("\u{e9}t\u{e9}(all)", 1),
            ("  nowhere(all)", 3),
            ("direct(all", 1),
            ("  direct(all", 3),
        ];
        for (text, column) in columns {
            let error = parse(text, &[]).unwrap_err();
            assert_eq!(error.column, column, "{text}: {error}");
            assert!(error.to_string().starts_with(&format!("line 1, column {column}: ")), "{error}");
        }
        assert!(parse_any("  nowhere(all)").is_ok(), "the node reads any outbound's name");
        let long = "direct(all)\n".repeat(MAX_RULES + 1);
        assert!(parse(&long, &[]).unwrap_err().problem.contains("more than"));
        let huge = "#".repeat(MAX_TEXT + 1);
        assert_eq!(parse(&huge, &[]).unwrap_err().line, 0);
        assert_eq!(parse("  # only a comment\n\n", &[]).unwrap(), vec![]);
    }
}
