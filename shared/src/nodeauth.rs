//! How a node proves who it is on a plain HTTP request (a credential-set pull, a usage
//! upload): a header carrying its id, the time, and its ed25519 signature over the method,
//! the path with query, its id and the time. The verifier knows the node's key only from a
//! control-signed node record, never from the node itself.
//!
//! `hearth-node-auth: <node id>.<unix seconds>.<base64url signature>`

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;

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

const DOMAIN: &[u8] = b"hearth node request v1\0";

fn message(method: &str, path_and_query: &str, node: NodeId, time: u64) -> Vec<u8> {
    let mut message = DOMAIN.to_vec();
    for part in [method, path_and_query, &node.to_string(), &time.to_string()] {
        message.extend_from_slice(part.as_bytes());
        message.push(0);
    }
    message
}

/// The header value for a request by `node`.
pub fn sign(key: &SecretKey, node: NodeId, method: &str, path_and_query: &str, now: u64) -> String {
    let signature = key.sign(&message(method, path_and_query, node, now));
    format!("{node}.{now}.{}", B64URL.encode(signature))
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
}

/// Checks a request's header against the node keys `key_of` knows (from control-signed node
/// records); gives the node it proves.
pub fn verify(
    header: Option<&str>,
    key_of: impl FnOnce(NodeId) -> Option<PublicKey>,
    method: &str,
    path_and_query: &str,
    now: u64,
) -> Result<NodeId, NodeAuthError> {
    let mut parts = header.ok_or(NodeAuthError::Malformed)?.splitn(3, '.');
    let (Some(node), Some(time), Some(signature)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(NodeAuthError::Malformed);
    };
    let node: NodeId = node.parse().map_err(|_| NodeAuthError::Malformed)?;
    let time: u64 = time.parse().map_err(|_| NodeAuthError::Malformed)?;
    let signature: [u8; 64] =
        B64URL.decode(signature).ok().and_then(|bytes| bytes.try_into().ok()).ok_or(NodeAuthError::Malformed)?;
    let key = key_of(node).ok_or(NodeAuthError::UnknownNode)?;
    if now.abs_diff(time) > MAX_SKEW_SECS {
        return Err(NodeAuthError::Skew);
    }
    if !key.verify(&message(method, path_and_query, node, time), &signature) {
        return Err(NodeAuthError::BadSignature);
    }
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Role;
    use crate::trust::{RoleKeys, Trust};

    #[test]
    fn node_requests_verify_only_as_signed() {
        let root = SecretKey::from_seed(Role::Root, &[1; 32]);
        let node = SecretKey::from_seed(Role::Node, &[4; 32]);
        let mut trust = Trust::new(RoleKeys::single(root.public()));
        trust.set_node(3, node.public());
        let now = 1_800_000_000;
        let header = sign(&node, 3, "GET", "/api/nodes/3/creds?after=5", now);
        let ok =
            |trust: &Trust, h: &str, path: &str, at: u64| verify(Some(h), |n| trust.node(n).copied(), "GET", path, at);
        assert_eq!(ok(&trust, &header, "/api/nodes/3/creds?after=5", now + 10), Ok(3));
        assert_eq!(ok(&trust, &header, "/api/nodes/3/creds?after=4", now), Err(NodeAuthError::BadSignature));
        assert_eq!(
            verify(Some(&header), |n| trust.node(n).copied(), "POST", "/api/nodes/3/creds?after=5", now),
            Err(NodeAuthError::BadSignature)
        );
        assert_eq!(ok(&trust, &header, "/api/nodes/3/creds?after=5", now + 301), Err(NodeAuthError::Skew));
        let as_other = header.replacen("3.", "4.", 1);
        assert_eq!(ok(&trust, &as_other, "/api/nodes/3/creds?after=5", now), Err(NodeAuthError::UnknownNode));
        trust.set_node(4, node.public());
        assert_eq!(ok(&trust, &as_other, "/api/nodes/3/creds?after=5", now), Err(NodeAuthError::BadSignature));
        assert_eq!(verify(None, |_| None, "GET", "/", now), Err(NodeAuthError::Malformed));
        assert_eq!(ok(&trust, "3.x.y", "/", now), Err(NodeAuthError::Malformed));
    }
}
