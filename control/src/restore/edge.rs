//! What the kept envelopes of the edge say, read: users' snapshots (opened with the recovery
//! key) and the aliases they were sealed for, deleted links, each node's credential set (its
//! full set with the delta on it), node keys, acknowledgements and the edge settings.

use std::collections::{BTreeMap, BTreeSet};

use hearth_shared::envelope::Envelope;
use hearth_shared::keys::{PublicKey, RecoverySecret};
use hearth_shared::wire::{
    self, CredentialSet, EdgeSettings, NodeId, NodeRecord, Snapshot, Stream, SubToken, UsageAck, UserId,
};
use hearth_shared::{Digest, sha256};

use super::screen::{Dropped, Screened};

/// What the edge's envelopes say, checked.
#[derive(Default)]
pub(super) struct Edge {
    pub(super) snapshots: BTreeMap<UserId, (SubToken, Snapshot)>,
    /// Aliases (old subscription paths) the snapshots were sealed for, by user.
    pub(super) aliases: BTreeMap<UserId, BTreeSet<String>>,
    /// Token hashes of links that were deleted.
    pub(super) deleted_links: BTreeSet<Digest>,
    pub(super) creds: BTreeMap<NodeId, Vec<(UserId, Digest)>>,
    pub(super) node_keys: BTreeMap<NodeId, Option<PublicKey>>,
    pub(super) acks: BTreeMap<NodeId, u64>,
    pub(super) settings: Option<EdgeSettings>,
}

/// Reads what the kept envelopes say. A snapshot the recovery key does not open, or that is
/// not its stream's link, is left out too (it is dropped from `screened`).
pub(super) fn read_edge(screened: &mut Screened, recovery: &RecoverySecret) -> Edge {
    let mut edge = Edge::default();
    for (name, _) in &screened.deleted {
        if let Ok(Stream::Snapshot(hash)) = name.parse() {
            edge.deleted_links.insert(hash);
        }
    }
    let mut unopened = BTreeSet::new();
    // Each node's full set, and the delta on it when there is a newer one.
    let mut full_sets = BTreeMap::new();
    let mut deltas = BTreeMap::new();
    for kept in &screened.kept {
        let name = kept.stream.as_str();
        let body = Envelope::stored_body(&kept.bytes).unwrap_or_default();
        let ok = match name.parse::<Stream>() {
            Ok(Stream::Snapshot(hash)) => hearth_shared::seal::recover(body, recovery)
                .ok()
                .filter(|(token, _)| token.hash() == hash)
                .map(|(token, snapshot)| match &snapshot.alias {
                    // An alias's snapshot (sealed under its path's token) is not the user's link.
                    Some(path) if SubToken::for_alias(path).is_some_and(|alias| alias == token) => {
                        edge.aliases.entry(snapshot.user).or_default().insert(path.clone());
                    }
                    Some(_) => {}
                    // Two links for one user: the newer one (a rotation the edge saw last).
                    None => {
                        edge.snapshots.insert(snapshot.user, (token, snapshot));
                    }
                }),
            Ok(Stream::Creds(node)) => CredentialSet::decode(body).ok().filter(|set| set.node == node).map(|set| {
                full_sets.insert(node, (kept.version, sha256(body), set));
            }),
            Ok(Stream::CredsDelta(node)) => {
                wire::CredDelta::decode(body).ok().filter(|delta| delta.node == node).map(|delta| {
                    deltas.insert(node, (kept.version, delta));
                })
            }
            Ok(Stream::Node(node)) => wire::decode::<NodeRecord>(body, "node record")
                .ok()
                .filter(|record| record.node == node)
                .map(|record| {
                    edge.node_keys.insert(node, record.key);
                }),
            Ok(Stream::UsageAck(node)) => {
                wire::decode::<UsageAck>(body, "ack").ok().filter(|ack| ack.node == node).map(|ack| {
                    edge.acks.insert(node, ack.seq);
                })
            }
            Ok(Stream::EdgeSettings) => EdgeSettings::decode(body).ok().map(|settings| edge.settings = Some(settings)),
            _ => Some(()),
        };
        if ok.is_none() {
            unopened.insert(name.to_owned());
        }
    }
    for (node, set) in with_deltas(full_sets, deltas) {
        edge.creds.insert(node, set.users().iter().map(|entry| (entry.user, entry.hash)).collect());
    }
    screened.kept.retain(|kept| !unopened.contains(&kept.stream));
    screened.dropped.entry(Dropped::Unverified).or_default().extend(unopened);
    // A link rotated twice keeps only the user's live link: a snapshot whose link was deleted
    // is not the user's any more.
    edge.snapshots.retain(|_, (token, _)| !edge.deleted_links.contains(&token.hash()));
    edge
}

/// Each node's set as the edge held it: its full set (version, body hash, set), with its
/// delta (version, delta) applied when the delta is newer and on that very set; a delta that
/// does not apply leaves the full set.
fn with_deltas(
    full_sets: BTreeMap<NodeId, (u64, Digest, CredentialSet)>,
    mut deltas: BTreeMap<NodeId, (u64, wire::CredDelta)>,
) -> BTreeMap<NodeId, CredentialSet> {
    full_sets
        .into_iter()
        .map(|(node, (version, digest, set))| match deltas.remove(&node) {
            Some((at, delta)) if at > version && delta.is_on(version, &digest) => {
                (node, set.patched(&delta).unwrap_or(set))
            }
            _ => (node, set),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use hearth_shared::wire::CredEntry;

    use super::*;

    /// What a restore reads of a node's set: the full set with the delta on it, never a delta
    /// on another full set, an older one, or one that does not make what it names.
    #[test]
    fn a_nodes_set_is_its_full_set_with_the_delta_on_it() {
        let set = |users: &[u64]| {
            CredentialSet::new(1, users.iter().map(|&u| CredEntry::new(u, [u as u8; 32])).collect()).unwrap()
        };
        let digest = |set: &CredentialSet| sha256(&set.encode());
        let (full, now) = (set(&[1, 2]), set(&[2, 3]));
        let delta = wire::CredDelta::between(&full, 5, digest(&full), &now, digest(&now)).unwrap();
        let read = |version: u64, at: u64, delta: &wire::CredDelta| {
            let full_sets = BTreeMap::from([(1, (version, digest(&full), full.clone()))]);
            with_deltas(full_sets, BTreeMap::from([(1, (at, delta.clone()))]))[&1].clone()
        };
        assert_eq!(read(5, 6, &delta), now, "the delta on the full set");
        assert_eq!(read(7, 8, &delta), full, "a delta on another full set");
        assert_eq!(read(5, 4, &delta), full, "a delta older than the full set");
        let lying = wire::CredDelta { result: digest(&full), ..delta };
        assert_eq!(read(5, 6, &lying), full, "a delta that does not make what it names");
    }
}
