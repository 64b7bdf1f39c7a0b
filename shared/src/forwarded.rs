//! Who a request is from when a reverse proxy stands in front of control or the native edge.
//!
//! Behind a proxy every connection comes from the proxy's address, so limits per address would
//! count everyone as one client. The operator names the proxies (`trusted_proxies`, CIDR
//! ranges); for a connection from one of them the client is the address it names in
//! `CF-Connecting-IP`, else the right-most `X-Forwarded-For` hop that is not itself a trusted
//! proxy. Those headers from anyone else are ignored: a client reaching the server directly
//! cannot pass for another.

use std::net::IpAddr;

/// An address range, `192.0.2.0/24` or `2001:db8::/32` (a bare address is one address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl Cidr {
    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.bits)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl std::str::FromStr for Cidr {
    type Err = ();

    fn from_str(text: &str) -> Result<Cidr, ()> {
        let (addr, bits) = text.trim().split_once('/').map_or((text.trim(), None), |(a, b)| (a, Some(b)));
        let addr: IpAddr = addr.parse().map_err(|_| ())?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(bits) => bits.parse().ok().filter(|b| *b <= max).ok_or(())?,
        };
        Ok(Cidr { addr, bits })
    }
}

/// The most ranges a `trusted_proxies` list may name (Cloudflare publishes 22).
pub const MAX_RANGES: usize = 256;

/// What is wrong with a list of ranges.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// An item that is neither an address nor a range.
    #[error("{0:?} is not an address or a CIDR range")]
    NotARange(String),
    /// More than [`MAX_RANGES`] ranges.
    #[error("names {0} ranges; at most {MAX_RANGES}")]
    TooMany(usize),
}

/// A list of ranges as an operator writes it: comma-separated, blanks ignored. The error
/// names the first item that is not an address or a range.
pub fn parse_list<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<Vec<Cidr>, RangeError> {
    let ranges = items
        .into_iter()
        .flat_map(|item| item.split(','))
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| item.parse::<Cidr>().map_err(|()| RangeError::NotARange(item.to_owned())))
        .collect::<Result<Vec<_>, _>>()?;
    if ranges.len() > MAX_RANGES {
        return Err(RangeError::TooMany(ranges.len()));
    }
    Ok(ranges)
}

/// Whether `ip` is in any of `ranges`.
pub fn trusted(ranges: &[Cidr], ip: IpAddr) -> bool {
    ranges.iter().any(|range| range.contains(ip))
}

/// The client a request is from: the TCP `peer`, or, when the peer is one of `proxies`, the
/// address it names: the last `CF-Connecting-IP` value that is an address, else the right-most
/// `X-Forwarded-For` hop (over all its values, in order) that is not itself a trusted proxy
/// (the left-most hop when every one is). Anything that does not parse is skipped; with
/// nothing usable, the peer.
pub fn client<'a>(
    proxies: &[Cidr],
    peer: IpAddr,
    cf_connecting_ip: impl IntoIterator<Item = &'a str>,
    x_forwarded_for: impl IntoIterator<Item = &'a str>,
) -> IpAddr {
    let peer = peer.to_canonical();
    if !trusted(proxies, peer) {
        return peer;
    }
    if let Some(ip) = cf_connecting_ip.into_iter().filter_map(|v| v.trim().parse::<IpAddr>().ok()).last() {
        return ip.to_canonical();
    }
    let hops: Vec<IpAddr> = x_forwarded_for
        .into_iter()
        .flat_map(|v| v.split(','))
        .filter_map(|hop| hop.trim().parse::<IpAddr>().ok())
        .map(|ip| ip.to_canonical())
        .collect();
    hops.iter().rev().find(|ip| !trusted(proxies, **ip)).or(hops.first()).copied().unwrap_or(peer)
}

/// The headers a proxy names the client it forwards for in: a request carrying one from a peer
/// that is not trusted comes through a proxy nobody declared, and every client behind it looks
/// like that proxy.
pub const FORWARDING_HEADERS: [&str; 4] = ["cf-connecting-ip", "x-forwarded-for", "forwarded", "x-real-ip"];

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn ranges_hold_what_they_say() {
        let proxies = parse_list(["10.0.0.0/8, 2001:db8::/32,192.0.2.7", " ", "0.0.0.0/0"]).unwrap();
        assert_eq!(proxies.len(), 4);
        let proxies = &proxies[..3];
        for (address, inside) in [
            ("10.200.3.4", true),
            ("11.0.0.1", false),
            ("::ffff:10.1.1.1", true),
            ("2001:db8:5::1", true),
            ("2001:db9::1", false),
            ("192.0.2.7", true),
            ("192.0.2.8", false),
        ] {
            assert_eq!(trusted(proxies, ip(address)), inside, "{address}");
        }
        assert!(trusted(&parse_list(["0.0.0.0/0"]).unwrap(), ip("203.0.113.1")));
        assert!(!trusted(&parse_list(["0.0.0.0/0"]).unwrap(), ip("2001:db8::1")));
        for bad in ["10.0.0.0/33", "2001:db8::/129", "example.net", "10.0.0.0/", "10.0.0.0/x"] {
            let err = parse_list([bad]).unwrap_err();
            assert!(err.to_string().contains("is not an address"), "{bad}: {err}");
        }
        let many = vec!["192.0.2.1"; MAX_RANGES + 1].join(",");
        assert!(parse_list([many.as_str()]).unwrap_err().to_string().contains("at most"));
    }

    #[test]
    fn only_a_trusted_peer_names_the_client() {
        let proxies = parse_list(["127.0.0.5", "10.0.0.0/8"]).unwrap();
        let none: [&str; 0] = [];
        // A stranger's headers are ignored.
        assert_eq!(client(&proxies, ip("127.0.2.9"), ["198.51.100.7"], ["198.51.100.8"]), ip("127.0.2.9"));
        // The proxy's CF-Connecting-IP, else the right-most hop it does not trust.
        assert_eq!(client(&proxies, ip("127.0.0.5"), ["junk", "198.51.100.7"], ["1.1.1.1"]), ip("198.51.100.7"));
        assert_eq!(
            client(&proxies, ip("127.0.0.5"), ["junk"], ["203.0.113.50, 198.51.100.7", "10.1.2.3"]),
            ip("198.51.100.7")
        );
        // Every hop trusted: the left-most; nothing usable: the proxy itself.
        assert_eq!(client(&proxies, ip("127.0.0.5"), none, ["10.9.9.9, 10.1.2.3"]), ip("10.9.9.9"));
        assert_eq!(client(&proxies, ip("127.0.0.5"), none, ["unknown"]), ip("127.0.0.5"));
        // Mapped addresses are their IPv4 address, on both sides.
        assert_eq!(client(&proxies, ip("::ffff:127.0.0.5"), none, ["::ffff:192.0.2.1"]), ip("192.0.2.1"));
        // No proxies named: the peer, whatever it sends.
        assert_eq!(client(&[], ip("127.0.0.5"), ["198.51.100.7"], none), ip("127.0.0.5"));
    }
}
