//! How a node proves who it is on a plain HTTP request (a credential-set pull, a usage
//! upload): a header carrying its id, the time, a random nonce and its ed25519 signature over
//! the method, the host it dialed, the path with query, the SHA-256 of the body, its id, the
//! time and the nonce. The verifier knows the node's key only from a control-signed node
//! record, never from the node itself, and takes each nonce once: it keeps the nonces it
//! accepted ([`Seen`], or the edge's storage) until their request's time is out of reach.
//!
//! `hearth-node-auth: <node id>.<unix seconds>.<base64url nonce>.<base64url signature>`
//!
//! Nodes of earlier releases sign `<node id>.<unix seconds>.<base64url signature>` over the
//! method, path with query, id and time only ([`sign_v1`]): such a header can be sent again
//! within the time window, to another host, with another body. Verifiers take it only on the
//! read-only routes (`GET`: a pull, an acknowledgement, a release, all of whose answers are
//! signed), so such a node still learns of the release that updates it; a usage upload signed
//! so is refused (the node keeps its reports and sends them once it runs the new release).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use rand_core::CryptoRngCore;

use crate::keys::{PublicKey, SecretKey};
use crate::wire::NodeId;

/// The header's name.
pub const HEADER: &str = "hearth-node-auth";

/// The response header that carries control's key records (see
/// [`crate::trust::chain_to_header`]) on every answer to a node's pull.
pub const KEYS_HEADER: &str = "hearth-key-records";

/// The response header that tells a node, on an answer to its pull, the release it should
/// run (the version of its [`crate::envelope::Kind::Release`] envelope).
pub const RELEASE_HEADER: &str = "hearth-release";

/// The request header of a node's pull that says which release it runs.
pub const NODE_VERSION_HEADER: &str = "hearth-node-version";

/// The request header of a node's pull that says why it refused or rolled back a release
/// (`<release> <reason>`), until it runs another one.
pub const NODE_UPDATE_HEADER: &str = "hearth-node-update";

/// The header of control's answers to a node's pull that names the edge in force (empty:
/// none), so nodes follow a moved edge without enrolling again.
pub const EDGE_HEADER: &str = "hearth-edge-url";

/// How far a request's time may be from the verifier's clock, in seconds.
pub const MAX_SKEW_SECS: u64 = 300;

const DOMAIN_V1: &[u8] = b"hearth node request v1\0";
const DOMAIN: &[u8] = b"hearth node request v2\0";

/// How many random bytes a request's nonce has.
pub const NONCE_LEN: usize = 16;

/// A request's nonce.
pub type Nonce = [u8; NONCE_LEN];

/// A node's request, as its signature covers it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// GET, POST...
    pub method: &'a str,
    /// The authority: as the node dialed it ([`authority`] of its URL), or as the verifier
    /// received it (the `Host` header, or the request URL's host and port).
    pub host: &'a str,
    /// The path with its query.
    pub path_and_query: &'a str,
    /// The body (empty for a `GET`).
    pub body: &'a [u8],
}

/// An authority as signed and compared: lowercased, without the port when it is a default one
/// (80, 443), so `Example.net:443` and `example.net` are the same host.
pub fn authority(host: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    match host.strip_suffix(":443").or_else(|| host.strip_suffix(":80")) {
        Some(bare) => bare.to_owned(),
        None => host,
    }
}

/// The authority of `url` (`scheme://authority/path...`), as [`authority`] makes it: what a
/// node signs for the request it sends there.
pub fn authority_of_url(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    authority(rest.split(['/', '?', '#']).next().unwrap_or_default())
}

fn message_v1(method: &str, path_and_query: &str, node: NodeId, time: u64) -> Vec<u8> {
    let mut message = DOMAIN_V1.to_vec();
    for part in [method, path_and_query, &node.to_string(), &time.to_string()] {
        message.extend_from_slice(part.as_bytes());
        message.push(0);
    }
    message
}

fn message(request: &Request<'_>, node: NodeId, time: u64, nonce: &Nonce) -> Vec<u8> {
    let mut message = DOMAIN.to_vec();
    let host = authority(request.host);
    let body = hex::encode(crate::sha256(request.body));
    let nonce = B64URL.encode(nonce);
    for part in [request.method, &host, request.path_and_query, &body, &node.to_string(), &time.to_string(), &nonce] {
        message.extend_from_slice(part.as_bytes());
        message.push(0);
    }
    message
}

/// The header value for `request` by `node`, at `now`, with a fresh nonce from `rng`.
pub fn sign(key: &SecretKey, node: NodeId, request: &Request<'_>, now: u64, rng: &mut impl CryptoRngCore) -> String {
    let mut nonce = [0; NONCE_LEN];
    rng.fill_bytes(&mut nonce);
    let signature = key.sign(&message(request, node, now, &nonce));
    format!("{node}.{now}.{}.{}", B64URL.encode(nonce), B64URL.encode(signature))
}

/// The header value nodes of earlier releases send (no nonce, neither host nor body covered):
/// what a verifier meets until every node has updated.
pub fn sign_v1(key: &SecretKey, node: NodeId, method: &str, path_and_query: &str, now: u64) -> String {
    let signature = key.sign(&message_v1(method, path_and_query, node, now));
    format!("{node}.{now}.{}", B64URL.encode(signature))
}

/// Whether a header is of the old form ([`sign_v1`]: no nonce), for a verifier's log.
pub fn is_old_form(header: &str) -> bool {
    header.split('.').count() == 3
}

/// Why a node's request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeAuthError {
    /// No header, or not of the form above.
    #[error("missing or malformed node authentication")]
    Malformed,
    /// The node has no registered key.
    #[error("unknown node")]
    UnknownNode,
    /// The time is too far from the verifier's clock.
    #[error("request time is off by more than {MAX_SKEW_SECS} s")]
    Skew,
    /// The signature does not verify.
    #[error("bad node signature")]
    BadSignature,
    /// Signed the old way (no nonce, neither host nor body covered), on a route that changes
    /// something: only reads are taken so.
    #[error("signed without a nonce: only a newer release of the node may send this")]
    Outdated,
    /// The nonce was taken before: the request was sent again.
    #[error("replayed node request")]
    Replayed,
    /// The node sent more requests in the time window than any node does.
    #[error("too many node requests")]
    TooMany,
}

/// A request that verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The node it proves.
    pub node: NodeId,
    /// The time it was signed at.
    pub time: u64,
    /// Its nonce; `None` when it was signed the old way ([`sign_v1`], taken on reads only):
    /// the verifier says so in its log.
    pub nonce: Option<Nonce>,
}

impl Verified {
    /// Until when (unix seconds) the verifier must remember the nonce: after that, the time
    /// check refuses the request anyway.
    pub fn expires(&self) -> u64 {
        self.time.saturating_add(MAX_SKEW_SECS)
    }
}

/// Checks a request's header against the node keys `key_of` knows (from control-signed node
/// records). The caller then takes the nonce once ([`Seen::take`], or its storage's). A
/// header signed the old way is taken for a `GET` only.
pub fn verify(
    header: Option<&str>,
    key_of: impl FnOnce(NodeId) -> Option<PublicKey>,
    request: &Request<'_>,
    now: u64,
) -> Result<Verified, NodeAuthError> {
    let parts: Vec<&str> = header.ok_or(NodeAuthError::Malformed)?.splitn(5, '.').collect();
    let (node, time, nonce, signature) = match parts[..] {
        [node, time, signature] => (node, time, None, signature),
        [node, time, nonce, signature] => (node, time, Some(nonce), signature),
        _ => return Err(NodeAuthError::Malformed),
    };
    let node: NodeId = node.parse().map_err(|_| NodeAuthError::Malformed)?;
    let time: u64 = time.parse().map_err(|_| NodeAuthError::Malformed)?;
    let nonce: Option<Nonce> = match nonce {
        None => None,
        Some(nonce) => {
            Some(B64URL.decode(nonce).ok().and_then(|bytes| bytes.try_into().ok()).ok_or(NodeAuthError::Malformed)?)
        }
    };
    let signature: [u8; 64] =
        B64URL.decode(signature).ok().and_then(|bytes| bytes.try_into().ok()).ok_or(NodeAuthError::Malformed)?;
    let key = key_of(node).ok_or(NodeAuthError::UnknownNode)?;
    if now.abs_diff(time) > MAX_SKEW_SECS {
        return Err(NodeAuthError::Skew);
    }
    let signed = match &nonce {
        Some(nonce) => message(request, node, time, nonce),
        None => message_v1(request.method, request.path_and_query, node, time),
    };
    if !key.verify(&signed, &signature) {
        return Err(NodeAuthError::BadSignature);
    }
    if nonce.is_none() && request.method != "GET" {
        return Err(NodeAuthError::Outdated);
    }
    Ok(Verified { node, time, nonce })
}

/// The nonces a verifier took, per node, each until its request's time is out of reach: an
/// in-memory [`Seen::take`] for a single process (control). At most [`Seen::PER_NODE`] a
/// node; only nodes whose signature verified get an entry, so it stays as small as the nodes.
#[derive(Debug, Default)]
pub struct Seen {
    nodes: std::collections::HashMap<NodeId, std::collections::HashMap<Nonce, u64>>,
}

impl Seen {
    /// The most nonces kept for one node: far above what a node sends within the window (a
    /// pull and a report every few seconds), so only a node gone wild reaches it.
    pub const PER_NODE: usize = 4096;

    /// Takes a verified request's nonce (a request signed the old way has none: nothing to
    /// take). [`NodeAuthError::Replayed`] when it was taken before and has not expired;
    /// [`NodeAuthError::TooMany`] when the node has [`Seen::PER_NODE`] nonces in the window.
    pub fn take(&mut self, verified: &Verified, now: u64) -> Result<(), NodeAuthError> {
        let Some(nonce) = verified.nonce else { return Ok(()) };
        let seen = self.nodes.entry(verified.node).or_default();
        if seen.get(&nonce).is_some_and(|expires| *expires >= now) {
            return Err(NodeAuthError::Replayed);
        }
        if seen.len() >= Self::PER_NODE {
            seen.retain(|_, expires| *expires >= now);
            if seen.len() >= Self::PER_NODE {
                return Err(NodeAuthError::TooMany);
            }
        }
        seen.insert(nonce, verified.expires());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rand_core::OsRng;

    use super::*;
    use crate::keys::Role;
    use crate::trust::{RoleKeys, Trust};

    const HOST: &str = "edge.example.net";
    const PATH: &str = "/api/nodes/3/usage";

    fn post(body: &[u8]) -> Request<'_> {
        Request { method: "POST", host: HOST, path_and_query: PATH, body }
    }

    fn setup() -> (Trust, SecretKey) {
        let root = SecretKey::from_seed(Role::Root, &[1; 32]);
        let node = SecretKey::from_seed(Role::Node, &[4; 32]);
        let mut trust = Trust::new(RoleKeys::single(root.public()));
        trust.set_node(3, node.public());
        (trust, node)
    }

    #[test]
    fn node_requests_verify_only_as_signed() {
        let (mut trust, node) = setup();
        let now = 1_800_000_000;
        let header = sign(&node, 3, &post(b"report"), now, &mut OsRng);
        let check = |trust: &Trust, h: &str, request: &Request<'_>, at: u64| {
            verify(Some(h), |n| trust.node(n).copied(), request, at).map(|v| v.node)
        };
        assert_eq!(check(&trust, &header, &post(b"report"), now + 10), Ok(3));
        // The authority of the URL a node sends to is the host it signs.
        assert_eq!(authority_of_url("https://Edge.example.net:443/api/nodes/3/usage?x=1"), HOST);
        assert_eq!(authority_of_url("http://127.0.0.1:8080/api"), "127.0.0.1:8080");
        assert_eq!(authority_of_url("http://[::1]:8080"), "[::1]:8080");
        // The same host however it is written: case, and a default port.
        for host in ["EDGE.example.net", "edge.example.net:443", "edge.example.net:80"] {
            assert_eq!(check(&trust, &header, &Request { host, ..post(b"report") }, now), Ok(3), "{host}");
        }
        // Anything else the signature covers, changed.
        let changed = [
            Request { method: "PUT", ..post(b"report") },
            Request { host: "control.example.net", ..post(b"report") },
            Request { host: "edge.example.net:8443", ..post(b"report") },
            Request { path_and_query: "/api/nodes/3/usage?x=1", ..post(b"report") },
            post(b"report!"),
            post(b""),
        ];
        for request in &changed {
            assert_eq!(check(&trust, &header, request, now), Err(NodeAuthError::BadSignature), "{request:?}");
        }
        assert_eq!(check(&trust, &header, &post(b"report"), now + 301), Err(NodeAuthError::Skew));
        let as_other = header.replacen("3.", "4.", 1);
        assert_eq!(check(&trust, &as_other, &post(b"report"), now), Err(NodeAuthError::UnknownNode));
        trust.set_node(4, node.public());
        assert_eq!(check(&trust, &as_other, &post(b"report"), now), Err(NodeAuthError::BadSignature));
        // Another nonce in the same header: the signature covers it.
        let mut parts: Vec<String> = header.split('.').map(str::to_owned).collect();
        parts[2] = B64URL.encode([7u8; NONCE_LEN]);
        assert_eq!(check(&trust, &parts.join("."), &post(b"report"), now), Err(NodeAuthError::BadSignature));
        assert_eq!(verify(None, |_| None, &post(b""), now), Err(NodeAuthError::Malformed));
        for bad in ["3.x.y", "3.1.y", "3.1.AAAA.y", "3.1.a.b.c", "", "3"] {
            assert_eq!(check(&trust, bad, &post(b""), now), Err(NodeAuthError::Malformed), "{bad}");
        }
    }

    #[test]
    fn every_request_gets_its_own_nonce_and_a_verifier_takes_each_once() {
        let (trust, node) = setup();
        let now = 1_800_000_000;
        let request = post(b"report");
        let first = sign(&node, 3, &request, now, &mut OsRng);
        let second = sign(&node, 3, &request, now, &mut OsRng);
        assert_ne!(first, second, "two signings of one request differ");
        let verified = |h: &str| verify(Some(h), |n| trust.node(n).copied(), &request, now).unwrap();
        let (a, b) = (verified(&first), verified(&second));
        assert!(a.nonce.is_some() && a.nonce != b.nonce);
        assert_eq!(a.expires(), now + MAX_SKEW_SECS);

        let mut seen = Seen::default();
        assert_eq!(seen.take(&a, now), Ok(()));
        assert_eq!(seen.take(&a, now + 5), Err(NodeAuthError::Replayed));
        assert_eq!(seen.take(&b, now + 5), Ok(()));
        // The same nonce from another node is that node's.
        assert_eq!(seen.take(&Verified { node: 4, ..a }, now), Ok(()));
        // Remembered as long as the time check would take the request.
        assert_eq!(seen.take(&a, now + MAX_SKEW_SECS), Err(NodeAuthError::Replayed));
        assert_eq!(seen.take(&a, now + MAX_SKEW_SECS + 1), Ok(()));
    }

    #[test]
    fn a_verifier_keeps_a_bounded_number_of_nonces_a_node() {
        let now = 1_800_000_000;
        let mut seen = Seen::default();
        let at = |i: usize, time: u64| {
            let mut nonce = [0; NONCE_LEN];
            nonce[..8].copy_from_slice(&(i as u64).to_le_bytes());
            Verified { node: 3, time, nonce: Some(nonce) }
        };
        for i in 0..Seen::PER_NODE {
            assert_eq!(seen.take(&at(i, now), now), Ok(()));
        }
        assert_eq!(seen.take(&at(Seen::PER_NODE, now), now), Err(NodeAuthError::TooMany));
        assert_eq!(seen.take(&Verified { node: 4, ..at(0, now) }, now), Ok(()), "other nodes go on");
        // Once the window has passed, the old nonces go and room is made.
        let later = now + MAX_SKEW_SECS + 1;
        assert_eq!(seen.take(&at(Seen::PER_NODE, later), later), Ok(()));
        assert_eq!(seen.nodes[&3].len(), 1);
    }

    #[test]
    fn a_header_signed_the_old_way_is_taken_for_reads_only() {
        let (trust, node) = setup();
        let now = 1_800_000_000;
        let path = "/api/nodes/3/creds?after=5";
        let get = Request { method: "GET", host: HOST, path_and_query: path, body: b"" };
        let header = sign_v1(&node, 3, "GET", path, now);
        let verified = verify(Some(&header), |n| trust.node(n).copied(), &get, now).unwrap();
        assert_eq!(verified, Verified { node: 3, time: now, nonce: None });
        // No nonce: nothing to take, and it is refused only by the time check.
        assert_eq!(Seen::default().take(&verified, now), Ok(()));
        let elsewhere = Request { path_and_query: "/api/nodes/3/creds?after=4", ..get };
        assert_eq!(
            verify(Some(&header), |n| trust.node(n).copied(), &elsewhere, now),
            Err(NodeAuthError::BadSignature)
        );
        let upload = sign_v1(&node, 3, "POST", PATH, now);
        assert_eq!(
            verify(Some(&upload), |n| trust.node(n).copied(), &post(b"report"), now),
            Err(NodeAuthError::Outdated)
        );
        // A new header is never read as an old one: the old message has another domain.
        let new = sign(&node, 3, &get, now, &mut OsRng);
        let mut parts: Vec<&str> = new.split('.').collect();
        parts.remove(2);
        assert_eq!(
            verify(Some(&parts.join(".")), |n| trust.node(n).copied(), &get, now),
            Err(NodeAuthError::BadSignature)
        );
    }
}
