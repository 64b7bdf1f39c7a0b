//! Routing per user at the node: the rule sets and outbounds control sealed into the
//! credential set, opened with the node's key and compiled once, then asked for every new
//! TCP stream and every new UDP destination.
//!
//! A user's entry names its rule set by id (0: none, every destination straight out). The
//! first rule that matches the domain the client asked for, or any address it resolved to,
//! names the outbound; no rule matching is the `default` outbound (the owner's of that name,
//! else `direct`). What cannot be routed as the owner meant is refused, never sent straight
//! out instead: a rule set the node does not have, routing that does not open, an outbound
//! this node was not given. The node's safety policy (private and special ranges refused
//! unless `allow_private`) is applied after routing, to whatever address a connection would
//! reach, through any outbound ([`crate::server`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hearth_shared::Digest;
use hearth_shared::acl::{self, OutboundKind, Request, Rule};
use hearth_shared::keys::SecretKey;
use hearth_shared::routing::Routing;

/// The message a refused request gets, as the client shows it.
pub(crate) const REJECTED: &str = "blocked by the server's rules";

/// Bytes carried through one outbound (for metrics), whoever's they were.
#[derive(Debug, Default)]
pub(crate) struct Carried {
    pub(crate) up: AtomicU64,
    pub(crate) down: AtomicU64,
}

/// Where a request goes.
#[derive(Clone, Debug)]
pub(crate) enum Decision {
    /// Refused, and why (for the log; the client is told [`REJECTED`]).
    Reject(&'static str),
    /// Out through `outbound` (`None`: the built-in direct one), to `hijack` instead of the
    /// address asked for when the rule says so.
    Out { outbound: Option<Arc<Outbound>>, hijack: Option<IpAddr> },
}

/// An outbound ready to carry: what it is and what it has carried.
#[derive(Debug)]
pub(crate) struct Outbound {
    pub(crate) name: String,
    pub(crate) kind: OutboundKind,
    pub(crate) carried: Arc<Carried>,
}

/// The routing in force: compiled rule sets by id, outbounds by name (lower case).
#[derive(Default)]
pub(crate) struct Routes {
    /// SHA-256 of the sealed routing this was made from (none: the set had none).
    pub(crate) from: Option<Digest>,
    sets: HashMap<u16, acl::Matcher>,
    outbounds: HashMap<String, Arc<Outbound>>,
    geo: Option<hearth_node::geo::GeoData>,
    /// Why the routing could not be used: every routed user is refused until it can.
    broken: Option<String>,
}

/// The GeoIP and GeoSite files the owner points the node at (`geoip`, `geosite` in
/// `node.toml`).
#[derive(Clone, Debug, Default)]
pub(crate) struct GeoFiles {
    pub(crate) geoip: Option<std::path::PathBuf>,
    pub(crate) geosite: Option<std::path::PathBuf>,
}

/// Why the routing a set carries cannot be used (every routed user is refused until it can).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RoutesError {
    /// A rule set does not parse against the outbounds.
    #[error("rule set {set}: {error}")]
    Rules { set: String, error: acl::AclError },
    /// A GeoIP or GeoSite file the rules need cannot be read.
    #[error(transparent)]
    GeoFile(#[from] GeoFileError),
    /// The GeoIP/GeoSite files do not hold what the rules name.
    #[error("the GeoIP/GeoSite files: {0}")]
    Geo(hearth_node::geo::GeoError),
}

/// Why a GeoIP or GeoSite file could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GeoFileError {
    /// It could not be opened or read.
    #[error("{}: {source}", path.display())]
    Read { path: std::path::PathBuf, source: std::io::Error },
    /// It is longer than any such file the node takes.
    #[error("{} is over {} MiB", path.display(), hearth_node::geo::MAX_FILE >> 20)]
    TooLarge { path: std::path::PathBuf },
}

impl GeoFiles {
    fn read(path: Option<&std::path::Path>) -> Result<Option<Vec<u8>>, GeoFileError> {
        let Some(path) = path else { return Ok(None) };
        let failed = |source| GeoFileError::Read { path: path.to_owned(), source };
        let file = std::fs::File::open(path).map_err(failed)?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(file, hearth_node::geo::MAX_FILE as u64 + 1), &mut bytes)
            .map_err(failed)?;
        if bytes.len() > hearth_node::geo::MAX_FILE {
            return Err(GeoFileError::TooLarge { path: path.to_owned() });
        }
        Ok(Some(bytes))
    }
}

impl Routes {
    /// Compiles the sealed routing of a credential set (`None`: it has none) with the node's
    /// key. `carried` keeps each outbound's byte counts across changes, by name.
    pub(crate) fn open(
        sealed: Option<&[u8]>,
        key: &SecretKey,
        files: &GeoFiles,
        carried: &mut HashMap<String, Arc<Carried>>,
    ) -> Routes {
        let Some(sealed) = sealed else { return Routes::default() };
        let from = Some(hearth_shared::sha256(sealed));
        let broken = |why: String| Routes { from, broken: Some(why), ..Routes::default() };
        let routing = match hearth_shared::routing::open(sealed, key) {
            Ok(routing) => routing,
            Err(e) => return broken(e.to_string()),
        };
        match Routes::compile(&routing, files, carried) {
            Ok(mut routes) => {
                routes.from = from;
                routes
            }
            Err(why) => broken(why.to_string()),
        }
    }

    fn compile(
        routing: &Routing,
        files: &GeoFiles,
        carried: &mut HashMap<String, Arc<Carried>>,
    ) -> Result<Routes, RoutesError> {
        let mut sets = HashMap::new();
        for set in &routing.sets {
            let rules = acl::check_lenient(&set.text, &routing.outbounds)
                .map_err(|error| RoutesError::Rules { set: set.name.clone(), error })?;
            sets.insert(set.id, acl::Matcher::new(rules));
        }
        let outbounds = routing
            .outbounds
            .iter()
            .map(|o| {
                let name = o.name.to_lowercase();
                let carried = carried.entry(name.clone()).or_default().clone();
                (name.clone(), Arc::new(Outbound { name, kind: o.kind.clone(), carried }))
            })
            .collect();
        let all: Vec<Rule> = sets.values().flat_map(|set| set.rules()).cloned().collect();
        let names_geo =
            all.iter().any(|rule| matches!(rule.address, acl::Address::GeoIp(_) | acl::Address::GeoSite { .. }));
        let geo = if names_geo {
            let geoip = GeoFiles::read(files.geoip.as_deref())?;
            let geosite = GeoFiles::read(files.geosite.as_deref())?;
            Some(
                hearth_node::geo::GeoData::for_rules(&all, geoip.as_deref(), geosite.as_deref())
                    .map_err(RoutesError::Geo)?,
            )
        } else {
            None
        };
        Ok(Routes { from: None, sets, outbounds, geo, broken: None })
    }

    /// Why the routing in force cannot be used, if it cannot.
    pub(crate) fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// The outbounds and what each carried, by name (for metrics).
    pub(crate) fn carried(&self) -> impl Iterator<Item = (&str, &Carried)> {
        self.outbounds.values().map(|o| (o.name.as_str(), &*o.carried))
    }

    /// Where a request of a user routed by rule set `set` goes.
    pub(crate) fn decide(&self, set: u16, request: &Request<'_>) -> Decision {
        if set == 0 {
            return Decision::Out { outbound: None, hijack: None };
        }
        if self.broken.is_some() {
            return Decision::Reject("the node cannot read its routing");
        }
        let Some(rules) = self.sets.get(&set) else {
            return Decision::Reject("the user's rule set is not on this node");
        };
        let rule = match &self.geo {
            Some(geo) => rules.route(request, geo),
            None => rules.route(request, &acl::NoGeo),
        };
        let (name, hijack) = rule.map_or(("default", None), |rule| (rule.outbound.as_str(), rule.hijack));
        if name == "reject" {
            return Decision::Reject("a reject rule");
        }
        match self.outbounds.get(name) {
            Some(outbound) => Decision::Out { outbound: Some(outbound.clone()), hijack },
            None if name == "direct" || name == "default" => Decision::Out { outbound: None, hijack },
            None => Decision::Reject("an outbound this node was not given"),
        }
    }
}

/// A request as the rules see it, from what the client asked for (`host:port`).
pub(crate) fn host_of(address: &str) -> Option<(&str, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    Some((host, port.parse().ok()?))
}

/// Counts bytes carried by an outbound.
pub(crate) fn count(carried: Option<&Carried>, up: u64, down: u64) {
    if let Some(carried) = carried {
        carried.up.fetch_add(up, Ordering::Relaxed);
        carried.down.fetch_add(down, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_shared::acl::{Login, Outbound as Defined, Proto};
    use hearth_shared::keys::Role;
    use hearth_shared::routing::RuleSet;

    fn sealed(routing: &Routing, key: &SecretKey) -> Vec<u8> {
        hearth_shared::routing::seal(routing, &key.public(), &[7; 32]).unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn request<'a>(domain: Option<&'a str>, ips: &'a [IpAddr], proto: Proto, port: u16) -> Request<'a> {
        Request { domain, ips, proto, port }
    }

    fn outbound(decision: &Decision) -> Option<&str> {
        match decision {
            Decision::Out { outbound, .. } => Some(outbound.as_ref().map_or("direct", |o| o.name.as_str())),
            Decision::Reject(_) => None,
        }
    }

    #[test]
    fn each_user_is_routed_by_its_set_and_what_cannot_be_routed_is_refused() {
        let key = SecretKey::from_seed(Role::Node, &[1; 32]);
        let routing = Routing {
            outbounds: vec![Defined {
                name: "WARP".into(),
                kind: OutboundKind::Socks5 {
                    server: "127.0.0.1:40000".into(),
                    login: Some(Login { username: "u".into(), password: "p".into() }),
                },
            }],
            sets: vec![
                RuleSet {
                    id: 3,
                    name: "streaming".into(),
                    text: "warp(suffix:netflix.com)\nreject(all, udp/443)".into(),
                },
                RuleSet { id: 9, name: "elsewhere".into(), text: "home(all)".into() },
            ],
        };
        let mut carried = HashMap::new();
        let routes = Routes::open(Some(&sealed(&routing, &key)), &key, &GeoFiles::default(), &mut carried);
        assert!(routes.broken().is_none());
        let any = [ip("93.184.215.14")];
        let netflix = request(Some("www.netflix.com"), &any, Proto::Tcp, 443);
        assert_eq!(outbound(&routes.decide(3, &netflix)), Some("warp"));
        assert_eq!(outbound(&routes.decide(0, &netflix)), Some("direct"), "no rule set: straight out");
        assert_eq!(outbound(&routes.decide(3, &request(None, &any, Proto::Udp, 443))), None, "reject");
        assert_eq!(outbound(&routes.decide(3, &request(None, &any, Proto::Tcp, 80))), Some("direct"), "default");
        // An outbound defined for other nodes, or a set the node lacks: refused.
        assert_eq!(outbound(&routes.decide(9, &netflix)), None);
        assert_eq!(outbound(&routes.decide(4, &netflix)), None);
        assert!(carried.contains_key("warp"));

        // Routing sealed for another node: every routed user refused, the others untouched.
        let other = SecretKey::from_seed(Role::Node, &[2; 32]);
        let foreign = Routes::open(Some(&sealed(&routing, &other)), &key, &GeoFiles::default(), &mut carried);
        assert!(foreign.broken().is_some());
        assert_eq!(outbound(&foreign.decide(3, &netflix)), None);
        assert_eq!(outbound(&foreign.decide(0, &netflix)), Some("direct"));
        // No routing at all: only users without a set have somewhere to go.
        let none = Routes::open(None, &key, &GeoFiles::default(), &mut carried);
        assert_eq!(outbound(&none.decide(0, &netflix)), Some("direct"));
        assert_eq!(outbound(&none.decide(3, &netflix)), None);
    }

    #[test]
    fn a_geo_rule_without_its_file_breaks_routing_rather_than_routing_wrong() {
        let key = SecretKey::from_seed(Role::Node, &[1; 32]);
        let routing = Routing {
            outbounds: vec![],
            sets: vec![RuleSet { id: 1, name: "no-cn".into(), text: "reject(geoip:cn)".into() }],
        };
        let missing = GeoFiles { geoip: Some("/nonexistent/geoip.dat".into()), geosite: None };
        let routes = Routes::open(Some(&sealed(&routing, &key)), &key, &missing, &mut HashMap::new());
        assert!(routes.broken().unwrap().contains("geoip.dat"), "{:?}", routes.broken());
    }

    #[test]
    fn a_host_and_port_read_as_the_client_wrote_them() {
        assert_eq!(host_of("example.com:443"), Some(("example.com", 443)));
        assert_eq!(host_of("[2001:db8::1]:53"), Some(("2001:db8::1", 53)));
        assert_eq!(host_of("example.com"), None);
        assert_eq!(host_of("example.com:99999"), None);
    }
}
