//! What a rule is and how it matches a request (the syntax that makes rules is the parent's).

use std::net::IpAddr;

/// Which transport a rule (or a request) is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// What a rule matches by address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// Everything.
    All,
    /// One address.
    Ip(IpAddr),
    /// A network: its address and prefix length.
    Cidr(IpAddr, u8),
    /// Exactly this domain (lower case).
    Domain(String),
    /// A domain pattern in which `*` stands for any run of characters, dots included.
    Wildcard(String),
    /// This domain and its subdomains.
    Suffix(String),
    /// Addresses of a country, by its ISO code (lower case).
    GeoIp(String),
    /// Domains of a category, with the attributes a domain must carry (lower case).
    GeoSite {
        /// The category.
        name: String,
        /// Its attributes to match (`@cn`); none: every domain of the category.
        attrs: Vec<String>,
    },
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The outbound it names (lower case).
    pub outbound: String,
    /// What it matches.
    pub address: Address,
    /// Only this protocol (`None`: both).
    pub proto: Option<Proto>,
    /// Only these ports, first to last (`None`: every port).
    pub ports: Option<(u16, u16)>,
    /// Where a matching connection goes instead.
    pub hijack: Option<IpAddr>,
    /// Its line in the text.
    pub line: usize,
    /// The column at which it starts.
    pub column: usize,
}

/// A request as the rules see it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The domain the client asked for (lower case), if it asked for one.
    pub domain: Option<&'a str>,
    /// The addresses it resolved to (or the one the client asked for).
    pub ips: &'a [IpAddr],
    /// Its protocol.
    pub proto: Proto,
    /// Its port.
    pub port: u16,
}

/// The country and category lookups GeoIP and GeoSite rules need.
pub trait Geo {
    /// Whether `ip` is in the country `code` (lower case).
    fn in_country(&self, ip: IpAddr, code: &str) -> bool;
    /// Whether `domain` is in the category `name`, carrying every one of `attrs`.
    fn in_category(&self, domain: &str, name: &str, attrs: &[String]) -> bool;
}

/// No databases: GeoIP and GeoSite rules match nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoGeo;

impl Geo for NoGeo {
    fn in_country(&self, _: IpAddr, _: &str) -> bool {
        false
    }
    fn in_category(&self, _: &str, _: &str, _: &[String]) -> bool {
        false
    }
}

impl Rule {
    /// Whether this rule matches `request`.
    pub fn matches(&self, request: &Request<'_>, geo: &impl Geo) -> bool {
        if self.proto.is_some_and(|proto| proto != request.proto) {
            return false;
        }
        if self.ports.is_some_and(|(first, last)| request.port < first || request.port > last) {
            return false;
        }
        let domain = request.domain;
        match &self.address {
            Address::All => true,
            Address::Ip(ip) => request.ips.contains(ip),
            Address::Cidr(network, bits) => request.ips.iter().any(|ip| in_network(*ip, *network, *bits)),
            Address::Domain(name) => domain == Some(name.as_str()),
            Address::Wildcard(pattern) => domain.is_some_and(|domain| wildcard(pattern.as_bytes(), domain.as_bytes())),
            Address::Suffix(suffix) => domain.is_some_and(|domain| {
                domain == suffix || domain.strip_suffix(suffix.as_str()).is_some_and(|head| head.ends_with('.'))
            }),
            Address::GeoIp(code) => request.ips.iter().any(|ip| geo.in_country(*ip, code)),
            Address::GeoSite { name, attrs } => domain.is_some_and(|domain| geo.in_category(domain, name, attrs)),
        }
    }
}

/// The first rule of `rules` that matches `request`: the outbound to use and where to go
/// instead, if it hijacks. `None`: no rule matched (the default outbound).
pub fn route<'r>(rules: &'r [Rule], request: &Request<'_>, geo: &impl Geo) -> Option<&'r Rule> {
    rules.iter().find(|rule| rule.matches(request, geo))
}

pub(super) fn in_network(ip: IpAddr, network: IpAddr, bits: u8) -> bool {
    let ip = match (ip, network) {
        (IpAddr::V6(v6), IpAddr::V4(_)) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        _ => ip,
    };
    match (ip, network) {
        (IpAddr::V4(ip), IpAddr::V4(network)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(network) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(network)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(network) & mask
        }
        _ => false,
    }
}

/// Whether `text` matches `pattern`, in which `*` stands for any run of bytes. Linear in the
/// text for each `*` (no backtracking blow-up on patterns like `*a*a*a*b`).
pub(super) fn wildcard(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|b| *b == b'*')
}
