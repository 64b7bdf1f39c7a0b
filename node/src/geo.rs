//! The GeoIP and GeoSite lists routing rules name (`geoip:cn`, `geosite:netflix@cn`), read
//! from the v2fly `geoip.dat` and `geosite.dat` files owners already download for v2ray,
//! Xray, sing-box and the official Hysteria server (protobuf: v2fly's
//! `app/router/routercommon/common.proto`), or for GeoIP from a MaxMind DB
//! (`GeoLite2-Country.mmdb`, the `Country.mmdb` Clash users have: a country's `iso_code`).
//!
//! Only what a rule set names is kept: a file is decoded once, the countries and categories
//! the rules use are compiled (addresses into sorted ranges, domains into exact and suffix
//! sets, substrings and regular expressions), and the rest is dropped.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use hearth_shared::acl::{Address, Geo, Rule};

/// The largest file read (v2fly's full lists are a few MB to tens of MB).
pub const MAX_FILE: usize = 64 << 20;

/// The messages of v2fly's `common.proto` that the files hold.
mod v2fly {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Domain {
        /// 0 plain (a substring), 1 regex, 2 root domain (it and its subdomains), 3 full.
        #[prost(int32, tag = "1")]
        pub(super) kind: i32,
        #[prost(string, tag = "2")]
        pub(super) value: String,
        #[prost(message, repeated, tag = "3")]
        pub(super) attribute: Vec<Attribute>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Attribute {
        #[prost(string, tag = "1")]
        pub(super) key: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Cidr {
        #[prost(bytes = "vec", tag = "1")]
        pub(super) ip: Vec<u8>,
        #[prost(uint32, tag = "2")]
        pub(super) prefix: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct GeoIp {
        #[prost(string, tag = "1")]
        pub(super) country_code: String,
        #[prost(message, repeated, tag = "2")]
        pub(super) cidr: Vec<Cidr>,
        #[prost(bool, tag = "3")]
        pub(super) inverse_match: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct GeoIpList {
        #[prost(message, repeated, tag = "1")]
        pub(super) entry: Vec<GeoIp>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct GeoSite {
        #[prost(string, tag = "1")]
        pub(super) country_code: String,
        #[prost(message, repeated, tag = "2")]
        pub(super) domain: Vec<Domain>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct GeoSiteList {
        #[prost(message, repeated, tag = "1")]
        pub(super) entry: Vec<GeoSite>,
    }
}

/// Why a list could not be used.
#[derive(Debug, thiserror::Error)]
pub enum GeoError {
    /// The file is over [`MAX_FILE`].
    #[error("{0} is over {max} MiB", max = MAX_FILE >> 20)]
    TooLarge(&'static str),
    /// Not a v2fly list.
    #[error("{0} is not a v2fly list: {1}")]
    Malformed(&'static str, prost::DecodeError),
    /// A rule names what the file does not have.
    #[error("{0}")]
    Missing(String),
    /// A regular expression in the file does not compile.
    #[error("geosite:{0} has a regular expression that does not compile: {1}")]
    Regex(String, regex::Error),
    /// A MaxMind DB that does not read.
    #[error("the GeoIP file is not a MaxMind DB that reads: {0}")]
    Mmdb(String),
}

/// Whether `bytes` are a MaxMind DB: its metadata starts with this marker, within the last
/// 128 KiB of the file.
fn is_mmdb(bytes: &[u8]) -> bool {
    const MARKER: &[u8] = b"\xab\xcd\xefMaxMind.com";
    let tail = &bytes[bytes.len().saturating_sub(128 << 10)..];
    tail.windows(MARKER.len()).any(|window| window == MARKER)
}

/// Addresses of a country: sorted, merged ranges.
#[derive(Debug, Default)]
struct Ranges {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
    inverse: bool,
}

fn merged<T: Ord + Copy>(mut ranges: Vec<(T, T)>, next: impl Fn(T) -> Option<T>) -> Vec<(T, T)> {
    ranges.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match out.last_mut() {
            Some(last) if next(last.1).is_none_or(|after| start <= after) => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

fn within<T: Ord + Copy>(ranges: &[(T, T)], value: T) -> bool {
    let i = ranges.partition_point(|(start, _)| *start <= value);
    i > 0 && value <= ranges[i - 1].1
}

impl Ranges {
    fn of(entry: &v2fly::GeoIp) -> Ranges {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for cidr in &entry.cidr {
            match (<[u8; 4]>::try_from(cidr.ip.as_slice()), <[u8; 16]>::try_from(cidr.ip.as_slice())) {
                (Ok(ip), _) if cidr.prefix <= 32 => {
                    let mask = u32::MAX.checked_shl(32 - cidr.prefix).unwrap_or(0);
                    let start = u32::from_be_bytes(ip) & mask;
                    v4.push((start, start | !mask));
                }
                (_, Ok(ip)) if cidr.prefix <= 128 => {
                    let mask = u128::MAX.checked_shl(128 - cidr.prefix).unwrap_or(0);
                    let start = u128::from_be_bytes(ip) & mask;
                    v6.push((start, start | !mask));
                }
                // (A malformed entry is skipped, as v2ray does.)
                _ => {}
            }
        }
        Ranges {
            v4: merged(v4, |n: u32| n.checked_add(1)),
            v6: merged(v6, |n: u128| n.checked_add(1)),
            inverse: entry.inverse_match,
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let inside = match ip {
            IpAddr::V4(v4) => within(&self.v4, u32::from(v4)),
            IpAddr::V6(v6) => within(&self.v6, u128::from(v6)),
        };
        inside != self.inverse
    }
}

/// Domains of a category (with the attributes asked for).
#[derive(Debug, Default)]
struct Domains {
    full: HashSet<String>,
    root: HashSet<String>,
    plain: Vec<String>,
    regex: Option<regex::RegexSet>,
}

impl Domains {
    fn of(entry: &v2fly::GeoSite, attrs: &[String]) -> Result<Domains, GeoError> {
        let mut domains = Domains::default();
        let mut patterns = Vec::new();
        let wanted = entry.domain.iter().filter(|domain| {
            attrs.iter().all(|attr| domain.attribute.iter().any(|a| a.key.eq_ignore_ascii_case(attr)))
        });
        for domain in wanted {
            let value = domain.value.to_lowercase();
            match domain.kind {
                0 => domains.plain.push(value),
                1 => patterns.push(domain.value.clone()),
                2 => _ = domains.root.insert(value),
                3 => _ = domains.full.insert(value),
                _ => {}
            }
        }
        if !patterns.is_empty() {
            let set =
                regex::RegexSet::new(&patterns).map_err(|e| GeoError::Regex(entry.country_code.to_lowercase(), e))?;
            domains.regex = Some(set);
        }
        Ok(domains)
    }

    fn contains(&self, domain: &str) -> bool {
        if self.full.contains(domain) {
            return true;
        }
        // The domain and each parent: `a.b.example.com`, `b.example.com`, `example.com`, `com`.
        let mut rest = domain;
        loop {
            if self.root.contains(rest) {
                return true;
            }
            match rest.split_once('.') {
                Some((_, parent)) => rest = parent,
                None => break,
            }
        }
        self.plain.iter().any(|plain| domain.contains(plain.as_str()))
            || self.regex.as_ref().is_some_and(|set| set.is_match(domain))
    }
}

/// A MaxMind DB's countries, by address.
pub struct MmdbCountries(maxminddb::Reader<Vec<u8>>);

impl std::fmt::Debug for MmdbCountries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MmdbCountries")
    }
}

impl MmdbCountries {
    /// The ISO code of the country `ip` is in (`country.iso_code`), if the file says.
    fn country(&self, ip: IpAddr) -> Option<String> {
        use maxminddb::PathElement::Key;
        self.0.lookup(ip.to_canonical()).ok()?.decode_path::<String>(&[Key("country"), Key("iso_code")]).ok()?
    }
}

/// The countries and categories a rule set names, ready to match.
#[derive(Debug, Default)]
pub struct GeoData {
    countries: HashMap<String, Ranges>,
    /// A MaxMind DB, when the GeoIP file is one: looked up address by address.
    mmdb: Option<MmdbCountries>,
    categories: HashMap<(String, Vec<String>), Domains>,
}

impl GeoData {
    /// Compiles what `rules` name from the files' bytes (`None`: no file given; a rule that
    /// names one then refuses the set, as does a country or category the file lacks).
    pub fn for_rules(rules: &[Rule], geoip: Option<&[u8]>, geosite: Option<&[u8]>) -> Result<GeoData, GeoError> {
        let mut countries: HashSet<&str> = HashSet::new();
        let mut categories: HashSet<(&str, &[String])> = HashSet::new();
        for rule in rules {
            match &rule.address {
                Address::GeoIp(code) => _ = countries.insert(code),
                Address::GeoSite { name, attrs } => _ = categories.insert((name, attrs)),
                _ => {}
            }
        }
        let mut data = GeoData::default();
        if !countries.is_empty() {
            let bytes = geoip.ok_or_else(|| GeoError::Missing("a rule names geoip: but no geoip.dat is set".into()))?;
            if is_mmdb(bytes) {
                if bytes.len() > MAX_FILE {
                    return Err(GeoError::TooLarge("the GeoIP file"));
                }
                let reader =
                    maxminddb::Reader::from_source(bytes.to_vec()).map_err(|e| GeoError::Mmdb(e.to_string()))?;
                data.mmdb = Some(MmdbCountries(reader));
                return GeoData::categories_for(data, &categories, geosite);
            }
            let list: v2fly::GeoIpList = decode(bytes, "geoip.dat")?;
            for code in countries {
                let entry = list
                    .entry
                    .iter()
                    .find(|entry| entry.country_code.eq_ignore_ascii_case(code))
                    .ok_or_else(|| GeoError::Missing(format!("geoip.dat has no country {code}")))?;
                data.countries.insert(code.to_owned(), Ranges::of(entry));
            }
        }
        GeoData::categories_for(data, &categories, geosite)
    }

    fn categories_for(
        mut data: GeoData,
        categories: &HashSet<(&str, &[String])>,
        geosite: Option<&[u8]>,
    ) -> Result<GeoData, GeoError> {
        if !categories.is_empty() {
            let bytes =
                geosite.ok_or_else(|| GeoError::Missing("a rule names geosite: but no geosite.dat is set".into()))?;
            let list: v2fly::GeoSiteList = decode(bytes, "geosite.dat")?;
            for &(name, attrs) in categories {
                let entry = list
                    .entry
                    .iter()
                    .find(|entry| entry.country_code.eq_ignore_ascii_case(name))
                    .ok_or_else(|| GeoError::Missing(format!("geosite.dat has no category {name}")))?;
                data.categories.insert((name.to_owned(), attrs.to_vec()), Domains::of(entry, attrs)?);
            }
        }
        Ok(data)
    }
}

fn decode<T: prost::Message + Default>(bytes: &[u8], what: &'static str) -> Result<T, GeoError> {
    if bytes.len() > MAX_FILE {
        return Err(GeoError::TooLarge(what));
    }
    T::decode(bytes).map_err(|e| GeoError::Malformed(what, e))
}

impl Geo for GeoData {
    fn in_country(&self, ip: IpAddr, code: &str) -> bool {
        match &self.mmdb {
            Some(mmdb) => mmdb.country(ip).is_some_and(|found| found.eq_ignore_ascii_case(code)),
            None => self.countries.get(code).is_some_and(|ranges| ranges.contains(ip)),
        }
    }

    fn in_category(&self, domain: &str, name: &str, attrs: &[String]) -> bool {
        self.categories.get(&(name.to_owned(), attrs.to_vec())).is_some_and(|domains| domains.contains(domain))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_shared::acl::{Proto, Request, route};
    use prost::Message as _;

    fn cidr(ip: &str, prefix: u32) -> v2fly::Cidr {
        let ip: IpAddr = ip.parse().unwrap();
        let ip = match ip {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        v2fly::Cidr { ip, prefix }
    }

    fn domain(kind: i32, value: &str, attrs: &[&str]) -> v2fly::Domain {
        v2fly::Domain {
            kind,
            value: value.into(),
            attribute: attrs.iter().map(|key| v2fly::Attribute { key: (*key).into() }).collect(),
        }
    }

    /// Files as v2fly's tools write them: the same messages, encoded.
    fn files() -> (Vec<u8>, Vec<u8>) {
        let geoip = v2fly::GeoIpList {
            entry: vec![
                v2fly::GeoIp {
                    country_code: "CN".into(),
                    cidr: vec![cidr("1.0.1.0", 24), cidr("1.0.2.0", 23), cidr("240e::", 18)],
                    inverse_match: false,
                },
                v2fly::GeoIp { country_code: "PRIVATE".into(), cidr: vec![cidr("10.0.0.0", 8)], inverse_match: true },
            ],
        };
        let geosite = v2fly::GeoSiteList {
            entry: vec![
                v2fly::GeoSite {
                    country_code: "GOOGLE".into(),
                    domain: vec![
                        domain(2, "google.com", &[]),
                        domain(3, "www.gstatic.cn", &["cn"]),
                        domain(2, "googleapis.cn", &["cn", "ads"]),
                        domain(0, "googlevideo", &[]),
                        domain(1, r"^r\d+---sn-[a-z0-9]+\.c\.pack\.example$", &[]),
                    ],
                },
                v2fly::GeoSite { country_code: "NETFLIX".into(), domain: vec![domain(2, "netflix.com", &[])] },
            ],
        };
        (geoip.encode_to_vec(), geosite.encode_to_vec())
    }

    #[test]
    fn countries_and_categories_match_as_v2fly_lists_them() {
        let rules = hearth_shared::acl::parse(
            "reject(geoip:cn)\ndirect(geoip:private)\nhome(geosite:google@cn)\nwarp(geosite:google)\nwarp(geosite:netflix)",
            &["home", "warp"],
        )
        .unwrap();
        let (geoip, geosite) = files();
        let geo = GeoData::for_rules(&rules, Some(&geoip), Some(&geosite)).unwrap();
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        assert!(geo.in_country(ip("1.0.1.255"), "cn"));
        assert!(geo.in_country(ip("1.0.3.1"), "cn"), "1.0.2.0/23 reaches 1.0.3.255");
        assert!(!geo.in_country(ip("1.0.4.0"), "cn"));
        assert!(geo.in_country(ip("240e:1::1"), "cn"));
        assert!(geo.in_country(ip("::ffff:1.0.1.1"), "cn"), "an IPv4-mapped address is its IPv4");
        assert!(geo.in_country(ip("192.0.2.1"), "private"), "an inverse list matches what it does not hold");
        assert!(!geo.in_country(ip("10.1.2.3"), "private"));
        let google = |domain: &str, attrs: &[&str]| {
            geo.in_category(domain, "google", &attrs.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>())
        };
        assert!(google("google.com", &[]) && google("mail.google.com", &[]));
        assert!(!google("notgoogle.com", &[]), "a root domain is not a bare suffix");
        assert!(google("rr1---sn-ab.googlevideo.com", &[]), "plain is a substring");
        assert!(google("r12---sn-x9.c.pack.example", &[]), "regex");
        assert!(google("www.gstatic.cn", &["cn"]) && google("x.googleapis.cn", &["cn"]));
        assert!(!google("google.com", &["cn"]), "only the domains with the attribute");
        assert!(!google("gstatic.cn", &["cn"]), "full is exact");
        // Routing through them, first rule first.
        let request = |domain, ips: &'static [IpAddr]| Request { domain, ips, proto: Proto::Tcp, port: 443 };
        static CN: [IpAddr; 1] = [IpAddr::V4(std::net::Ipv4Addr::new(1, 0, 1, 9))];
        static US: [IpAddr; 1] = [IpAddr::V4(std::net::Ipv4Addr::new(10, 9, 9, 9))];
        assert_eq!(route(&rules, &request(Some("x.cn"), &CN), &geo).unwrap().outbound, "reject");
        assert_eq!(route(&rules, &request(Some("www.gstatic.cn"), &US), &geo).unwrap().outbound, "home");
        assert_eq!(route(&rules, &request(Some("www.netflix.com"), &US), &geo).unwrap().outbound, "warp");
        assert!(route(&rules, &request(Some("example.org"), &US), &geo).is_none());
    }

    #[test]
    fn what_a_rule_names_must_be_there() {
        let (geoip, geosite) = files();
        let rules = |text: &str| hearth_shared::acl::parse(text, &[]).unwrap();
        let error = GeoData::for_rules(&rules("reject(geoip:zz)"), Some(&geoip), None).unwrap_err();
        assert!(error.to_string().contains("no country zz"), "{error}");
        let error = GeoData::for_rules(&rules("reject(geosite:nope)"), None, Some(&geosite)).unwrap_err();
        assert!(error.to_string().contains("no category nope"), "{error}");
        let error = GeoData::for_rules(&rules("reject(geoip:cn)"), None, None).unwrap_err();
        assert!(error.to_string().contains("no geoip.dat"), "{error}");
        let error = GeoData::for_rules(&rules("reject(geoip:cn)"), Some(b"\xff\xff\xff"), None).unwrap_err();
        assert!(error.to_string().contains("not a v2fly list"), "{error}");
        // Rules without geo names need no file.
        assert!(GeoData::for_rules(&rules("reject(all)"), None, None).is_ok());
    }

    /// A MaxMind DB (made by `node/tests/fixtures/make-country-mmdb.py` with PyPI's
    /// mmdb-writer) answers `geoip:` by each address's `country.iso_code`, IPv4 (mapped too)
    /// and IPv6; a file that claims to be one and is not is refused.
    #[test]
    fn a_maxmind_db_answers_geoip_by_country_code() {
        let mmdb = include_bytes!("../tests/fixtures/country.mmdb");
        let rules = hearth_shared::acl::parse("reject(geoip:cn)\nhome(geoip:ir)\ndirect(geoip:us)", &["home"]).unwrap();
        let geo = GeoData::for_rules(&rules, Some(mmdb), None).unwrap();
        let ip = |text: &str| -> IpAddr { text.parse().unwrap() };
        assert!(geo.in_country(ip("1.0.1.200"), "cn"));
        assert!(geo.in_country(ip("::ffff:1.0.1.7"), "cn"), "an IPv4-mapped address");
        assert!(!geo.in_country(ip("1.0.2.1"), "cn"));
        assert!(geo.in_country(ip("2001:db8:1:ff::1"), "ir"));
        assert!(geo.in_country(ip("93.184.215.14"), "us") && !geo.in_country(ip("93.184.215.14"), "cn"));
        let request = |ips: &[IpAddr]| {
            route(&rules, &Request { domain: None, ips, proto: Proto::Udp, port: 53 }, &geo)
                .map(|rule| rule.outbound.clone())
        };
        assert_eq!(request(&[ip("1.0.1.1")]).as_deref(), Some("reject"));
        assert_eq!(request(&[ip("2001:db8:1::5")]).as_deref(), Some("home"));
        assert_eq!(request(&[ip("8.8.8.8")]), None);
        let mut broken = mmdb.to_vec();
        broken[..64].fill(0xff);
        broken.truncate(broken.len() - 40);
        let error = GeoData::for_rules(&rules, Some(&broken), None).unwrap_err();
        assert!(error.to_string().contains("MaxMind"), "{error}");
    }
}
