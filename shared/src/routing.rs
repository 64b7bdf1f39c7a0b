//! A node's routing: the outbounds its owner defined for it and the named rule sets its users
//! are given, sealed by control for that node alone.
//!
//! A credential set names each user's rule set by number ([`crate::wire::CredEntry::rules`])
//! and carries this routing sealed ([`crate::wire::CredentialSet::routing`]): wrapped for the
//! node's X25519 form of its identity key, so an edge that stores and serves the set learns
//! neither the proxies' addresses and passwords nor the rules, and the envelope's signature
//! keeps it from changing anyone's routing. The seal is drawn from a seed only control makes
//! ([`seal`]), so one routing always has one encoding and a set that did not change hashes the
//! same.

use serde::{Deserialize, Serialize};

use crate::acl::{self, AclError, Outbound};
use crate::keys::{PublicKey, SecretKey};
use crate::seal::{self, Wrapped};
use crate::wire::{self, MAX_ROUTING};

/// The most rule sets a node is sent.
pub const MAX_SETS: usize = 256;
/// The longest rule set name.
pub const MAX_SET_NAME: usize = 64;

/// One named rule set, as the owner wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleSet {
    /// Its id, from 1: what a user's entry names it by.
    pub id: u16,
    /// Its name.
    pub name: String,
    /// The rules, in the official Hysteria 2 server's ACL syntax ([`acl`]).
    pub text: String,
}

/// What a node routes by.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Routing {
    /// The outbounds defined for the node.
    pub outbounds: Vec<Outbound>,
    /// The rule sets its users are given: a user's entry names one by its id.
    pub sets: Vec<RuleSet>,
}

/// Why a sealed routing was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RoutingError {
    /// It does not open with the node's key (sealed for another node, or altered).
    #[error("the routing is not sealed for this node")]
    WrongKey,
    /// It opens but does not decode.
    #[error("the routing is malformed")]
    Malformed,
    /// A rule set or outbound does not pass the checks control makes.
    #[error("rule set {set}: {error}")]
    Rules {
        /// The set's name.
        set: String,
        /// What is wrong.
        error: AclError,
    },
}

/// A rule set's name that is not 1 to [`MAX_SET_NAME`] letters, digits, `-` or `_`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a rule set's name is 1 to {MAX_SET_NAME} letters, digits, '-' or '_'")]
pub struct SetNameError;

/// Checks a rule set's name: 1 to [`MAX_SET_NAME`] letters, digits, `-` or `_`.
pub fn check_set_name(name: &str) -> Result<(), SetNameError> {
    let fine = !name.is_empty()
        && name.len() <= MAX_SET_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    fine.then_some(()).ok_or(SetNameError)
}

impl Routing {
    /// Checks everything a node will read: the outbounds (as [`acl::check`] does), at most
    /// [`MAX_SETS`] sets with distinct ids (from 1) and good names, and every set's rules. A
    /// rule may name an outbound the node was not given (the owner defined it for other
    /// nodes): the node refuses what it matches. No rule sends UDP through an HTTP proxy.
    pub fn check(&self) -> Result<(), RoutingError> {
        let whole = |problem: String| RoutingError::Rules {
            set: String::new(),
            error: AclError { line: 0, column: 0, problem },
        };
        if self.sets.len() > MAX_SETS {
            return Err(whole(format!("more than {MAX_SETS} rule sets")));
        }
        acl::check("", &self.outbounds).map_err(|error| RoutingError::Rules { set: String::new(), error })?;
        for (i, set) in self.sets.iter().enumerate() {
            check_set_name(&set.name).map_err(|e| whole(e.to_string()))?;
            if self.sets[..i].iter().any(|other| other.name == set.name || other.id == set.id) || set.id == 0 {
                return Err(whole(format!("rule set {} has a name or id of another, or id 0", set.name)));
            }
            acl::check_lenient(&set.text, &self.outbounds)
                .map_err(|error| RoutingError::Rules { set: set.name.clone(), error })?;
        }
        Ok(())
    }

    /// The rule set of that id.
    pub fn set(&self, id: u16) -> Option<&RuleSet> {
        self.sets.iter().find(|set| set.id == id)
    }

    /// Whether there is nothing to route by.
    pub fn is_empty(&self) -> bool {
        self.outbounds.is_empty() && self.sets.is_empty()
    }
}

/// Seals `routing` for the node whose identity key is `node`, drawn from `seed` (control
/// derives it from its own secret and the routing, so nobody else can make or predict it).
/// `None` when it would be over [`MAX_ROUTING`] bytes.
pub fn seal(routing: &Routing, node: &PublicKey, seed: &[u8; 32]) -> Option<Vec<u8>> {
    let plain = zeroize::Zeroizing::new(wire::encode(routing));
    let sealed = wire::encode(&seal::wrap_seeded(&plain, &node.to_x25519(), seed));
    (sealed.len() <= MAX_ROUTING).then_some(sealed)
}

/// Opens routing sealed for the node holding `key`, and checks it.
pub fn open(sealed: &[u8], key: &SecretKey) -> Result<Routing, RoutingError> {
    let wrapped: Wrapped = wire::decode(sealed, "sealed routing").map_err(|_| RoutingError::Malformed)?;
    let plain = seal::unwrap(&wrapped, &key.to_x25519()).map_err(|_| RoutingError::WrongKey)?;
    let routing: Routing = wire::decode(&plain, "routing").map_err(|_| RoutingError::Malformed)?;
    routing.check()?;
    Ok(routing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{Login, OutboundKind};
    use crate::keys::Role;

    fn sample() -> Routing {
        Routing {
            outbounds: vec![Outbound {
                name: "warp".into(),
                kind: OutboundKind::Socks5 {
                    server: "127.0.0.1:40000".into(),
                    login: Some(Login { username: "u".into(), password: "hunter2-secret".into() }),
                },
            }],
            sets: vec![RuleSet {
                id: 1,
                name: "streaming".into(),
                text: "warp(suffix:netflix.com)\ndirect(all)".into(),
            }],
        }
    }

    #[test]
    fn only_the_node_opens_its_routing_and_one_routing_seals_one_way() {
        let node = SecretKey::from_seed(Role::Node, &[3; 32]);
        let other = SecretKey::from_seed(Role::Node, &[4; 32]);
        let routing = sample();
        let sealed = seal(&routing, &node.public(), &[9; 32]).unwrap();
        assert_eq!(seal(&routing, &node.public(), &[9; 32]).unwrap(), sealed, "same seed, same bytes");
        assert_ne!(seal(&routing, &node.public(), &[8; 32]).unwrap(), sealed);
        assert_eq!(open(&sealed, &node).unwrap(), routing);
        assert_eq!(open(&sealed, &other), Err(RoutingError::WrongKey));
        // What the edge stores shows neither the password nor the proxy nor the rules.
        let shown = String::from_utf8_lossy(&sealed);
        for secret in ["hunter2", "127.0.0.1", "netflix", "warp"] {
            assert!(!shown.contains(secret), "{secret} readable in the sealed routing");
        }
        let mut altered = sealed.clone();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        assert_eq!(open(&altered, &node), Err(RoutingError::WrongKey));
        assert_eq!(open(b"junk", &node), Err(RoutingError::Malformed));
    }

    #[test]
    fn a_routing_that_would_not_check_is_refused_when_opened() {
        let node = SecretKey::from_seed(Role::Node, &[3; 32]);
        let mut bad = sample();
        bad.sets[0].text = "direct(all)\n  warp(all, udp".into();
        let sealed = seal(&bad, &node.public(), &[1; 32]).unwrap();
        let Err(RoutingError::Rules { set, error }) = open(&sealed, &node) else { panic!("accepted") };
        assert_eq!((set.as_str(), error.line, error.column), ("streaming", 2, 3));
        // An outbound defined for other nodes only: the node reads the set.
        let mut elsewhere = sample();
        elsewhere.sets[0].text = "home(all)".into();
        assert!(elsewhere.check().is_ok());
        let mut twice = sample();
        twice.sets.push(twice.sets[0].clone());
        assert!(twice.check().unwrap_err().to_string().contains("of another"));
        assert!(check_set_name("ok-name_1").is_ok());
        for name in ["", "has space", "ü", &"x".repeat(MAX_SET_NAME + 1)] {
            assert!(check_set_name(name).is_err(), "{name}");
        }
    }
}
