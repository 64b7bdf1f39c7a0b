//! The streams envelopes travel on: what each carries and for whom ([`Stream`]), and their
//! names as strings, for the places that store or compare them (all made by [`Stream`]'s
//! `Display`).

use std::fmt;

use super::codec::{NodeId, WireError};
use crate::Digest;
use crate::keys::Role;

/// A stream, typed: what it carries and for whom. A version is strictly increasing within
/// one stream. Its name (`Display`) is what envelopes, batches and stores carry; `FromStr`
/// takes only the canonical name of each (a node id in decimal without leading zeros, a
/// link's token hash in 64 lowercase hex digits), so every stream has exactly one name and
/// every name is parsed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    /// The sealed snapshot behind one subscription link, by the SHA-256 of its token
    /// (`sub/<hex>`).
    Snapshot(Digest),
    /// A node's credential set (`creds/<node>`).
    Creds(NodeId),
    /// A node's set as a change to its last full set (`creds-delta/<node>`,
    /// [`CredDelta`](crate::wire::CredDelta)).
    CredsDelta(NodeId),
    /// A node's registration: its public key (`node/<node>`).
    Node(NodeId),
    /// A node's usage reports, version = sequence number (`usage/<node>`).
    Usage(NodeId),
    /// Control's acknowledgements to one node (`ack/<node>`).
    UsageAck(NodeId),
    /// The key record of a role (`keys/<role>`).
    Keys(crate::keys::Role),
    /// Control's batch manifests (`batch`).
    Batch,
    /// Control's state archive (`archive`).
    Archive,
    /// Node release manifests (`release`).
    Release,
    /// The operator's edge settings (`edge-settings`).
    EdgeSettings,
    /// Which nodes take which release (`rollout`).
    Rollout,
}

impl Stream {
    /// The kind and audience of what control pushes to the edge on this stream; `None` for
    /// a stream that never goes there that way.
    pub fn pushed(&self) -> Option<(crate::envelope::Kind, crate::envelope::Audience)> {
        use crate::envelope::{Audience, Kind};
        Some(match *self {
            Stream::Snapshot(_) => (Kind::Snapshot, Audience::Edge),
            Stream::Creds(node) => (Kind::CredentialSet, Audience::Node(node)),
            Stream::CredsDelta(node) => (Kind::CredDelta, Audience::Node(node)),
            Stream::UsageAck(node) => (Kind::UsageAck, Audience::Node(node)),
            Stream::Node(_) => (Kind::NodeRecord, Audience::Edge),
            Stream::EdgeSettings => (Kind::EdgeSettings, Audience::Edge),
            Stream::Rollout => (Kind::Rollout, Audience::Edge),
            Stream::Usage(_) | Stream::Keys(_) | Stream::Batch | Stream::Archive | Stream::Release => return None,
        })
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stream::Snapshot(hash) => write!(f, "sub/{}", hex::encode(hash)),
            Stream::Creds(node) => write!(f, "creds/{node}"),
            Stream::CredsDelta(node) => write!(f, "creds-delta/{node}"),
            Stream::Node(node) => write!(f, "node/{node}"),
            Stream::Usage(node) => write!(f, "usage/{node}"),
            Stream::UsageAck(node) => write!(f, "ack/{node}"),
            Stream::Keys(role) => write!(f, "keys/{role}"),
            Stream::Batch => f.write_str("batch"),
            Stream::Archive => f.write_str("archive"),
            Stream::Release => f.write_str("release"),
            Stream::EdgeSettings => f.write_str("edge-settings"),
            Stream::Rollout => f.write_str("rollout"),
        }
    }
}

impl std::str::FromStr for Stream {
    type Err = WireError;

    fn from_str(name: &str) -> Result<Stream, WireError> {
        const BAD: WireError = WireError::Malformed("stream name");
        let node = |id: &str| -> Result<NodeId, WireError> {
            let canonical =
                !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) && (!id.starts_with('0') || id == "0");
            canonical.then(|| id.parse().ok()).flatten().ok_or(BAD)
        };
        Ok(match name.split_once('/') {
            Some(("sub", hash)) => {
                let digest: Digest = hex::decode(hash).ok().and_then(|d| d.try_into().ok()).ok_or(BAD)?;
                if hex::encode(digest) != hash {
                    return Err(BAD);
                }
                Stream::Snapshot(digest)
            }
            Some(("creds", id)) => Stream::Creds(node(id)?),
            Some(("creds-delta", id)) => Stream::CredsDelta(node(id)?),
            Some(("node", id)) => Stream::Node(node(id)?),
            Some(("usage", id)) => Stream::Usage(node(id)?),
            Some(("ack", id)) => Stream::UsageAck(node(id)?),
            Some(("keys", role)) => {
                let parsed: crate::keys::Role = role.parse().map_err(|_| BAD)?;
                Stream::Keys(parsed)
            }
            Some(_) => return Err(BAD),
            None => match name {
                "batch" => Stream::Batch,
                "archive" => Stream::Archive,
                "release" => Stream::Release,
                "edge-settings" => Stream::EdgeSettings,
                "rollout" => Stream::Rollout,
                _ => return Err(BAD),
            },
        })
    }
}

/// The snapshot behind one subscription link, named by the token's hash (hex).
pub fn snapshot(token_hash: &crate::Digest) -> String {
    Stream::Snapshot(*token_hash).to_string()
}
/// A node's credential set.
pub fn creds(node: NodeId) -> String {
    Stream::Creds(node).to_string()
}
/// A node's set as a change to its last full set.
pub fn creds_delta(node: NodeId) -> String {
    Stream::CredsDelta(node).to_string()
}
/// A node's registration (its public key).
pub fn node(node: NodeId) -> String {
    Stream::Node(node).to_string()
}
/// A node's usage reports (version = sequence number).
pub fn usage(node: NodeId) -> String {
    Stream::Usage(node).to_string()
}
/// The node whose usage stream this is.
pub fn parse_usage(name: &str) -> Option<NodeId> {
    match name.parse() {
        Ok(Stream::Usage(node)) => Some(node),
        _ => None,
    }
}
/// Acknowledgements to one node.
pub fn usage_ack(node: NodeId) -> String {
    Stream::UsageAck(node).to_string()
}
/// The key record of a role.
pub fn keys(role: Role) -> String {
    Stream::Keys(role).to_string()
}
/// Control's batch manifests.
pub const BATCH: &str = "batch";
/// Control's state archive.
pub const ARCHIVE: &str = "archive";
/// Node release manifests.
pub const RELEASE: &str = "release";
/// The operator's edge settings.
pub const EDGE_SETTINGS: &str = "edge-settings";
/// Which nodes take which release.
pub const ROLLOUT: &str = "rollout";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::stream;

    /// Every stream's name parses back to it; a name that is not the canonical one of a
    /// stream does not parse; the string constants are the streams' names.
    #[test]
    fn stream_names_parse_back_and_only_canonically() {
        use crate::keys::Role;
        let all = [
            Stream::Snapshot([0xab; 32]),
            Stream::Creds(0),
            Stream::Creds(17),
            Stream::CredsDelta(17),
            Stream::Node(u64::MAX),
            Stream::Usage(3),
            Stream::UsageAck(4),
            Stream::Keys(Role::Signing),
            Stream::Batch,
            Stream::Archive,
            Stream::Release,
            Stream::EdgeSettings,
            Stream::Rollout,
        ];
        for stream in all {
            assert_eq!(stream.to_string().parse::<Stream>(), Ok(stream), "{stream}");
        }
        let constants = [stream::BATCH, stream::ARCHIVE, stream::RELEASE, stream::EDGE_SETTINGS, stream::ROLLOUT];
        for (name, parsed) in constants.iter().zip([
            Stream::Batch,
            Stream::Archive,
            Stream::Release,
            Stream::EdgeSettings,
            Stream::Rollout,
        ]) {
            assert_eq!(name.parse::<Stream>(), Ok(parsed));
        }
        let upper = format!("sub/{}", "AB".repeat(32));
        for bad in [
            "creds/01",
            "creds/",
            "creds/+1",
            "creds/1/2",
            "creds-delta/01",
            "ack/x",
            "sub/ab",
            upper.as_str(),
            "keys/god",
            "Batch",
            "stuff/1",
            "",
        ] {
            assert!(bad.parse::<Stream>().is_err(), "{bad:?}");
        }
        assert_eq!(
            Stream::Creds(5).pushed(),
            Some((crate::envelope::Kind::CredentialSet, crate::envelope::Audience::Node(5)))
        );
        assert_eq!(
            Stream::CredsDelta(5).pushed(),
            Some((crate::envelope::Kind::CredDelta, crate::envelope::Audience::Node(5)))
        );
        assert_eq!(Stream::Usage(5).pushed(), None, "reports go the other way");
    }

    #[test]
    fn usage_streams_parse_canonically() {
        assert_eq!(stream::parse_usage(&stream::usage(42)), Some(42));
        assert_eq!(stream::parse_usage("usage/0"), Some(0));
        assert_eq!(stream::parse_usage("usage/042"), None);
        assert_eq!(stream::parse_usage("usage/+4"), None);
        assert_eq!(stream::parse_usage("creds/4"), None);
    }
}
