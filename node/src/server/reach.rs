//! Where a client's streams and datagrams may go: the safety policy (no internal address, not
//! the node's own) and the lookups the relays make to apply it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::options::Options;
use crate::route;

/// How long a TCP connect to a target may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether an outbound destination is refused by default: every address the IANA
/// special-purpose registries (IPv4 and IPv6) do not mark as globally reachable — loopback,
/// private, shared (CGN), link-local, documentation, benchmarking, reserved, multicast and
/// the like — so a client cannot reach the node's own network. IPv6 forms that carry an IPv4
/// address (mapped, NAT64's well-known prefix, 6to4) are judged by that address; the
/// deprecated forms (IPv4-compatible, site-local) and Teredo are refused outright.
pub(crate) fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_broadcast()
                || v4.is_multicast()
                || a == 0 // this network
                || (a == 100 && (64..128).contains(&b)) // shared address space (CGN)
                || (a, b, c) == (192, 0, 0) // IETF protocol assignments
                || (a, b, c) == (192, 0, 2) // TEST-NET-1
                || (a, b, c) == (192, 88, 99) // the retired 6to4 relay anycast
                || (a == 198 && (b == 18 || b == 19)) // benchmarking
                || (a, b, c) == (198, 51, 100) // TEST-NET-2
                || (a, b, c) == (203, 0, 113) // TEST-NET-3
                || a >= 240 // reserved
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let embedded =
                |hi: u16, lo: u16| IpAddr::V4(std::net::Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)));
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal(IpAddr::V4(v4));
            }
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                // NAT64's well-known prefix: the IPv4 address it translates to.
                return is_internal(embedded(s[6], s[7]));
            }
            if s[0] == 0x2002 {
                // 6to4: the IPv4 address of the relay it goes through.
                return is_internal(embedded(s[1], s[2]));
            }
            s[..6] == [0; 6] // unspecified, loopback and the deprecated IPv4-compatible form
                || (s[0], s[1], s[2]) == (0x64, 0xff9b, 1) // local-use NAT64
                || s[..4] == [0x100, 0, 0, 0] // discard-only
                || (s[0] == 0x2001 && s[1] < 0x200) // IETF protocol assignments (Teredo included)
                || (s[0], s[1]) == (0x2001, 0xdb8) // documentation
                || (s[0] & 0xfff0) == 0x3ff0 // documentation (3fff::/20)
                || s[0] == 0x5f00 // segment routing identifiers
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0 // the deprecated site-local
                || v6.is_multicast()
        }
    }
}

/// Why a destination a client asked for cannot be reached: what the client is told.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReachError {
    /// Not `host:port`.
    #[error("not a host and port: {0}")]
    NotHostPort(String),
    /// The name does not resolve.
    #[error("cannot resolve {address}: {source}")]
    Resolve { address: String, source: std::io::Error },
    /// The name resolves to nothing.
    #[error("{0} has no address")]
    NoAddress(String),
    /// The safety policy refuses every address it reaches (`why`: an internal address, the
    /// node's own ...).
    #[error("{address} is {why}")]
    Refused { address: String, why: &'static str },
}

/// Resolves `host:port` and applies the outbound policy.
pub(super) async fn resolve(address: &str, options: &Options) -> Result<SocketAddr, ReachError> {
    let mut addrs = tokio::net::lookup_host(address)
        .await
        .map_err(|source| ReachError::Resolve { address: address.to_owned(), source })?;
    let addr = addrs.next().ok_or_else(|| ReachError::NoAddress(address.to_owned()))?;
    refused(addr.ip(), options).map_or(Ok(addr), |why| Err(ReachError::Refused { address: address.to_owned(), why }))
}

/// Why the outbound policy refuses `ip`, if it does.
pub(super) fn refused(ip: IpAddr, options: &Options) -> Option<&'static str> {
    let canonical = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    if options.allow_private {
        None
    } else if is_internal(ip) {
        Some("an internal address")
    } else if options.own.is_some_and(|own| canonical(own) == canonical(ip)) {
        Some("the node's own address")
    } else {
        None
    }
}

/// The name (lower case, if the client gave one), every address it resolves to, and the port
/// of `host:port`.
pub(super) async fn lookup(address: &str) -> Result<(Option<String>, Vec<IpAddr>, u16), ReachError> {
    let (host, port) = route::host_of(address).ok_or_else(|| ReachError::NotHostPort(address.to_owned()))?;
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok((None, vec![ip.to_canonical()], port));
    }
    let ips: Vec<IpAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|source| ReachError::Resolve { address: address.to_owned(), source })?
        .map(|addr| addr.ip().to_canonical())
        .take(16)
        .collect();
    if ips.is_empty() {
        return Err(ReachError::NoAddress(address.to_owned()));
    }
    Ok((Some(host.to_ascii_lowercase()), ips, port))
}

/// The addresses of `ips` the safety policy lets a connection reach, with `port`; refused
/// (saying why) when it lets none.
pub(super) fn checked(
    address: &str,
    ips: Vec<IpAddr>,
    port: u16,
    options: &Options,
) -> Result<Vec<SocketAddr>, ReachError> {
    let mut why = None;
    let addrs: Vec<SocketAddr> = ips
        .into_iter()
        .filter(|ip| match refused(*ip, options) {
            Some(reason) => {
                why = Some(reason);
                false
            }
            None => true,
        })
        .map(|ip| SocketAddr::new(ip, port))
        .collect();
    if addrs.is_empty() {
        return Err(ReachError::Refused { address: address.to_owned(), why: why.unwrap_or("without an address") });
    }
    Ok(addrs)
}

/// Whether a proxy's `host:port` is on the node's own network (loopback, private and the
/// like), where it would reach what the safety policy refuses.
pub(super) async fn proxy_is_local(server: &str) -> bool {
    match route::host_of(server) {
        Some((host, _)) if host.parse::<IpAddr>().is_ok() => is_internal(host.parse().expect("checked")),
        Some((host, port)) => match tokio::net::lookup_host((host, port)).await {
            Ok(mut addrs) => addrs.any(|addr| is_internal(addr.ip())),
            Err(_) => true,
        },
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_own_address_is_refused_unless_private_ones_are_allowed() {
        let own: IpAddr = "198.20.0.1".parse().unwrap();
        let options = Options { allow_private: false, own: Some(own), ..Options::default() };
        assert_eq!(refused(own, &options), Some("the node's own address"));
        assert_eq!(refused("::ffff:198.20.0.1".parse().unwrap(), &options), Some("the node's own address"));
        assert_eq!(refused("198.20.0.2".parse().unwrap(), &options), None);
        assert_eq!(refused("10.0.0.1".parse().unwrap(), &options), Some("an internal address"));
        let mapped = Options { own: Some("::ffff:198.20.0.1".parse().unwrap()), ..Options::default() };
        assert_eq!(refused(own, &mapped), Some("the node's own address"));
        assert_eq!(refused(own, &Options { allow_private: true, own: Some(own), ..Options::default() }), None);
    }

    #[test]
    fn internal_destinations() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.88.99.1",
            "198.18.0.1",
            "198.19.255.254",
            "198.51.100.7",
            "203.0.113.9",
            "240.0.0.1",
            "250.1.2.3",
            "64:ff9b::10.0.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b:1::1.1.1.1",
            "2002:a00:1::1",
            "2002:7f00:1::",
            "::127.0.0.1",
            "::1.1.1.1",
            "100::1",
            "2001::1",
            "2001:2::1",
            "2001:db8::1",
            "3fff::1",
            "5f00::1",
            "fec0::1",
            "ff02::1",
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::1.1.1.1",
            "2002:101:101::1",
            "192.0.1.1",
            "198.20.0.1",
            "2001:4860:4860::8888",
        ] {
            assert!(!is_internal(public.parse().unwrap()), "{public}");
        }
    }
}
