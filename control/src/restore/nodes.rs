//! The nodes after a restore: from an archive, the node keys enrolled (or nodes removed)
//! since; from snapshots, nodes and their groups rebuilt from the credential sets and the
//! endpoints of the users they let in. Either way, the usage each node's acknowledgement
//! confirmed.

use std::collections::BTreeMap;

use hearth_shared::wire::{Endpoint, NodeId, UserId};
use rusqlite::{Connection, params};

use super::edge::Edge;
use crate::error::Error;
use crate::publish;

/// From an archive: node keys enrolled (or nodes removed) after it was made.
pub(super) fn update_nodes(tx: &Connection, edge: &Edge) -> Result<(), Error> {
    for (node, key) in &edge.node_keys {
        match key {
            Some(key) => {
                tx.execute(
                    "UPDATE nodes SET public_key = ?2, enroll_hash = NULL WHERE id = ?1",
                    params![node, key.to_bytes()],
                )?;
            }
            None => {
                tx.execute("DELETE FROM nodes WHERE id = ?1", [node])?;
            }
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
    let default: i64 = tx.query_row("SELECT id FROM groups WHERE name = 'default'", [], |row| row.get(0))?;
    for (at, nodes) in node_groups(edge).iter().enumerate() {
        let group = if at == 0 {
            default
        } else {
            tx.execute(
                "INSERT INTO groups (name, note) VALUES (?1, 'rebuilt by a restore')",
                [format!("restored-{at}")],
            )?;
            tx.last_insert_rowid()
        };
        for node in nodes {
            let key = edge.node_keys[node].expect("only enrolled nodes are grouped");
            let (name, host, port, hop, sni, insecure, cert, spki, obfs, identity) = match endpoints.get(node) {
                Some(e) => (
                    publish::node_name_of(&e.name).to_owned(),
                    e.host.clone(),
                    e.port,
                    e.hop,
                    e.sni.clone().unwrap_or_default(),
                    e.insecure,
                    e.cert_sha256,
                    e.spki_sha256,
                    e.obfs.clone().unwrap_or_default(),
                    e.identity.clone(),
                ),
                None => {
                    notes.push(format!(
                        "node {node}: no user reaches it, so no snapshot holds its address; set it with PATCH /nodes/{node}"
                    ));
                    (
                        format!("node-{node}"),
                        "unknown.invalid".to_owned(),
                        443,
                        None,
                        String::new(),
                        true,
                        None,
                        None,
                        String::new(),
                        Default::default(),
                    )
                }
            };
            // The certificate apps check is taken back only when it is the one pinned.
            let certificate = identity
                .certificate
                .as_deref()
                .and_then(|der| crate::store::identity::Certificate::from_der(der).ok())
                .filter(|certificate| Some(certificate.sha256) == cert);
            tx.execute(
                "INSERT INTO nodes (id, name, host, port, hop_start, hop_end, sni, tls, cert_sha256, spki_sha256, obfs,
                                    public_key, created, cert_der, cert_names, allow_unverified)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
                params![
                    node,
                    name,
                    host,
                    port,
                    hop.map_or(0, |h| h.start),
                    hop.map_or(0, |h| h.end),
                    sni,
                    if insecure { "self_signed" } else { "operator" },
                    cert,
                    spki,
                    obfs,
                    key.to_bytes(),
                    now,
                    certificate.as_ref().map(|c| c.der.as_slice()),
                    certificate.as_ref().map(|c| c.names.join("\n")).unwrap_or_default(),
                    identity.unverified,
                ],
            )?;
            tx.execute("INSERT INTO node_groups (node_id, group_id) VALUES (?1, ?2)", params![node, group])?;
        }
    }
    Ok(())
}

/// Usage acknowledged by the edge: each node's usage counts from the sequence its
/// acknowledgement confirmed (never back).
pub(super) fn take_acks(tx: &Connection, edge: &Edge) -> Result<(), Error> {
    for (node, seq) in &edge.acks {
        tx.execute(
            "UPDATE nodes SET usage_digest = NULL, usage_seq = ?2 WHERE id = ?1 AND usage_seq < ?2",
            params![node, seq],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use hearth_shared::keys::{Role, SecretKey};

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
}
