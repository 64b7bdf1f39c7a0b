//! The nodes after a restore: from an archive, the node keys enrolled (or nodes removed)
//! since; from snapshots, nodes and their groups rebuilt from the credential sets and the
//! endpoints of the users they let in. Either way, the usage each node's acknowledgement
//! confirmed.

use std::collections::BTreeMap;

use hearth_shared::keys::PublicKey;
use hearth_shared::wire::{Endpoint, NodeId, UserId};
use rusqlite::Connection;

use super::edge::Edge;
use crate::error::Error;
use crate::publish;
use crate::store::restoring::{self, RestoredNode};

/// From an archive: node keys enrolled (or nodes removed) after it was made.
pub(super) fn update_nodes(tx: &Connection, edge: &Edge) -> Result<(), Error> {
    for (node, key) in &edge.node_keys {
        match key {
            Some(key) => restoring::set_node_key(tx, *node, &key.to_bytes())?,
            None => restoring::delete_node(tx, *node)?,
        }
    }
    Ok(())
}

/// The address of each node, from the snapshots of the users it lets in (the first such
/// user's).
fn endpoints_of(edge: &Edge) -> BTreeMap<NodeId, Endpoint> {
    // An active user's endpoints are the enrolled nodes whose sets hold it, in node order.
    let mut endpoints: BTreeMap<NodeId, Endpoint> = BTreeMap::new();
    for (user, (_, snapshot)) in &edge.snapshots {
        let reach: Vec<NodeId> =
            edge.creds.iter().filter(|(_, users)| users.iter().any(|(u, _)| u == user)).map(|(n, _)| *n).collect();
        if !reach.is_empty() && reach.len() == snapshot.endpoints.len() {
            for (node, endpoint) in reach.iter().zip(&snapshot.endpoints) {
                endpoints.entry(*node).or_insert_with(|| endpoint.clone());
            }
        }
    }
    endpoints
}

/// The enrolled nodes, grouped by the users they let in: the most nodes first (then the most
/// users, then in the order of their users).
fn node_groups(edge: &Edge) -> Vec<Vec<NodeId>> {
    // Nodes with the same users share a group; the largest set is `default`.
    let mut sets: BTreeMap<Vec<UserId>, Vec<NodeId>> = BTreeMap::new();
    for (node, key) in &edge.node_keys {
        if key.is_none() {
            continue;
        }
        let users: Vec<UserId> =
            edge.creds.get(node).map(|u| u.iter().map(|(id, _)| *id).collect()).unwrap_or_default();
        sets.entry(users).or_default().push(*node);
    }
    let mut order: Vec<(Vec<UserId>, Vec<NodeId>)> = sets.into_iter().collect();
    order.sort_by_key(|(users, nodes)| std::cmp::Reverse((nodes.len(), users.len())));
    order.into_iter().map(|(_, nodes)| nodes).collect()
}

/// From snapshots: nodes, with their addresses from the endpoints of the users they let in,
/// and groups that give every user the nodes it had.
pub(super) fn rebuild_nodes(tx: &Connection, edge: &Edge, notes: &mut Vec<String>, now: u64) -> Result<(), Error> {
    let endpoints = endpoints_of(edge);
    let default = restoring::default_group(tx)?;
    for (at, nodes) in node_groups(edge).iter().enumerate() {
        let group = if at == 0 { default } else { restoring::add_rebuilt_group(tx, &format!("restored-{at}"))? };
        for node in nodes {
            let key = edge.node_keys[node].expect("only enrolled nodes are grouped");
            let (row, note) = node_row(*node, &key, endpoints.get(node));
            notes.extend(note);
            restoring::insert_node(tx, &row, now)?;
            restoring::group_node(tx, *node, group)?;
        }
    }
    Ok(())
}

/// The row of enrolled node `node` (its key `key`) rebuilt from `endpoint`, the address the
/// users it lets in have of it; with no such user, a placeholder and a note for the owner to
/// set its address.
fn node_row(node: NodeId, key: &PublicKey, endpoint: Option<&Endpoint>) -> (RestoredNode, Option<String>) {
    let Some(e) = endpoint else {
        let row = RestoredNode {
            id: node,
            name: format!("node-{node}"),
            host: "unknown.invalid".to_owned(),
            port: 443,
            hop_start: 0,
            hop_end: 0,
            sni: String::new(),
            tls: "self_signed",
            cert_sha256: None,
            spki_sha256: None,
            obfs: String::new(),
            public_key: key.to_bytes(),
            cert_der: None,
            cert_names: String::new(),
            allow_unverified: false,
        };
        let note = format!(
            "node {node}: no user reaches it, so no snapshot holds its address; set it with PATCH /nodes/{node}"
        );
        return (row, Some(note));
    };
    // The certificate apps check is taken back only when it is the one pinned.
    let certificate = e
        .identity
        .certificate
        .as_deref()
        .and_then(|der| crate::store::identity::Certificate::from_der(der).ok())
        .filter(|certificate| Some(certificate.sha256) == e.cert_sha256);
    let row = RestoredNode {
        id: node,
        name: publish::node_name_of(&e.name).to_owned(),
        host: e.host.clone(),
        port: e.port,
        hop_start: e.hop.map_or(0, |h| h.start),
        hop_end: e.hop.map_or(0, |h| h.end),
        sni: e.sni.clone().unwrap_or_default(),
        tls: if e.insecure { "self_signed" } else { "operator" },
        cert_sha256: e.cert_sha256,
        spki_sha256: e.spki_sha256,
        obfs: e.obfs.clone().unwrap_or_default(),
        public_key: key.to_bytes(),
        cert_names: certificate.as_ref().map(|c| c.names.join("\n")).unwrap_or_default(),
        cert_der: certificate.map(|c| c.der),
        allow_unverified: e.identity.unverified,
    };
    (row, None)
}

/// Usage acknowledged by the edge: each node's usage counts from the sequence its
/// acknowledgement confirmed (never back).
pub(super) fn take_acks(tx: &Connection, edge: &Edge) -> Result<(), Error> {
    for (node, seq) in &edge.acks {
        restoring::acknowledge_usage(tx, *node, *seq)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use hearth_shared::keys::{Role, SecretKey};
    use hearth_shared::wire::{Identity, PortRange};

    use super::*;

    /// Nodes that let in the same users share a group, the most nodes first; a node no longer
    /// enrolled is in none.
    #[test]
    fn nodes_with_the_same_users_share_a_group() {
        let key = Some(SecretKey::from_seed(Role::Signing, &[3; 32]).public());
        let edge = Edge {
            node_keys: BTreeMap::from([(1, key), (2, key), (3, key), (4, None), (5, key)]),
            creds: BTreeMap::from([
                (1, vec![(10, [0; 32]), (11, [0; 32])]),
                (2, vec![(10, [0; 32])]),
                (3, vec![(10, [0; 32]), (11, [0; 32])]),
                (4, vec![(10, [0; 32]), (11, [0; 32])]),
            ]),
            ..Edge::default()
        };
        assert_eq!(node_groups(&edge), [vec![1, 3], vec![2], vec![5]]);
    }

    /// A node comes back with the address its users had of it (its own name, not what a cap
    /// reached adds), and the certificate apps check only when it is the one pinned; a node no
    /// user reaches is a placeholder, and the owner is told to set its address.
    #[test]
    fn a_node_is_rebuilt_from_its_users_endpoint_or_as_a_placeholder() {
        let key = SecretKey::from_seed(Role::Signing, &[3; 32]).public();
        let (pem, _, pin) = crate::tls::self_signed(vec!["node.example".to_owned()]).unwrap();
        let der = crate::store::identity::Certificate::from_pem(&pem).unwrap().der;
        let endpoint = Endpoint {
            name: "tokyo (traffic limit reached until 2030-01-31)".to_owned(),
            host: "203.0.113.7".to_owned(),
            port: 8443,
            hop: Some(PortRange { start: 20_000, end: 30_000 }),
            sni: Some("node.example".to_owned()),
            cert_sha256: Some(pin),
            spki_sha256: Some([5; 32]),
            insecure: true,
            obfs: Some("salt".to_owned()),
            identity: Identity { certificate: Some(der.clone()), name: None, unverified: true },
        };
        let (row, note) = node_row(2, &key, Some(&endpoint));
        assert_eq!(note, None);
        assert_eq!((row.id, row.name.as_str(), row.host.as_str(), row.port), (2, "tokyo", "203.0.113.7", 8443));
        assert_eq!(
            (row.hop_start, row.hop_end, row.sni.as_str(), row.tls),
            (20_000, 30_000, "node.example", "self_signed")
        );
        assert_eq!((row.cert_sha256, row.spki_sha256, row.obfs.as_str()), (Some(pin), Some([5; 32]), "salt"));
        assert_eq!(
            (row.public_key, row.cert_der, row.cert_names.as_str()),
            (key.to_bytes(), Some(der), "node.example")
        );
        assert!(row.allow_unverified);

        let unpinned = Endpoint { cert_sha256: Some([6; 32]), insecure: false, ..endpoint };
        let (row, _) = node_row(2, &key, Some(&unpinned));
        assert_eq!((row.tls, row.cert_der, row.cert_names.as_str()), ("operator", None, ""), "not the one pinned");

        let (row, note) = node_row(4, &key, None);
        assert_eq!(
            (row.name.as_str(), row.host.as_str(), row.port, row.tls),
            ("node-4", "unknown.invalid", 443, "self_signed")
        );
        assert_eq!((row.hop_start, row.hop_end, row.sni.as_str(), row.obfs.as_str()), (0, 0, "", ""));
        assert_eq!((row.cert_sha256, row.cert_der, row.allow_unverified), (None, None, false));
        assert_eq!(
            note.as_deref(),
            Some("node 4: no user reaches it, so no snapshot holds its address; set it with PATCH /nodes/4")
        );
    }
}
