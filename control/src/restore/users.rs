//! The users after a restore, brought up to date with their snapshots at the edge: added or
//! changed (link, credential, limits, usage, the nodes they reach through their groups), their
//! aliases served again, those deleted since the archive left deleted; and the subscription
//! profile the snapshots carry.

use std::collections::BTreeMap;

use hearth_shared::wire::{Endpoint, NodeId, Profile, Snapshot, Status, SubToken, UserId};
use hearth_shared::{Digest, sha256};
use rusqlite::Connection;

use super::edge::Edge;
use crate::error::Error;
use crate::publish::{self, Signer};
use crate::secrets::Purpose;
use crate::store;
use crate::store::restoring::{self, RestoredUser};

/// The subscription profile every snapshot carries becomes the one in force (the one of the
/// configuration file stays recorded as it was when the state was opened).
pub(super) fn restore_profile(tx: &Connection, signer: &Signer, profile: &Profile) -> Result<(), Error> {
    store::set_state(tx, "profile", serde_json::to_string(profile).expect("profile serializes"))?;
    *signer.profile.write().expect("profile lock") = profile.clone();
    Ok(())
}

/// Brings users up to date with their snapshots: new ones are added, changed ones take the
/// snapshot's link, credential, limits, usage (usage never goes down) and the nodes it names
/// (through their groups), and users whose link was deleted with no other snapshot of theirs
/// were deleted after the archive. Returns how many users there are.
pub(super) fn merge_users(
    tx: &Connection,
    signer: &Signer,
    edge: &Edge,
    notes: &mut Vec<String>,
    now: u64,
) -> Result<usize, Error> {
    let names = restoring::node_ids_by_name(tx)?;
    let mut renamed = 0;
    for (user, (token, snapshot)) in &edge.snapshots {
        if merge_user(tx, signer, &names, *user, token, snapshot, now)? {
            renamed += 1;
        }
    }
    if renamed > 0 {
        notes.push(format!(
            "{renamed} users had a name another user took since; they were renamed \"<name> (restored <id>)\""
        ));
    }
    // Aliases of users who have their link back are served again.
    for (path, user, hash) in served_aliases(edge) {
        restoring::serve_alias(tx, path, user, &hash, now)?;
    }
    // Deleted after the archive: the link is gone from the edge and no snapshot has the user.
    let stale = restoring::user_links(tx)?;
    let mut deleted = 0;
    for user in deleted_since(stale, edge) {
        restoring::delete_user(tx, user)?;
        deleted += 1;
    }
    if deleted > 0 {
        notes.push(format!("{deleted} users in the archive were deleted after it was made, and stay deleted"));
    }
    let missing = restoring::user_count(tx)?;
    let without_link = missing.saturating_sub(edge.snapshots.len());
    if without_link > 0 {
        notes.push(format!(
            "{without_link} users have no snapshot at the edge (never pushed?); they were kept as archived"
        ));
    }
    Ok(missing)
}

/// Brings one user up to date with its snapshot (see [`merge_users`]); `names` are the nodes
/// by name. Whether it was renamed, its name being another user's since.
fn merge_user(
    tx: &Connection,
    signer: &Signer,
    names: &BTreeMap<String, NodeId>,
    user: UserId,
    token: &SubToken,
    snapshot: &Snapshot,
    now: u64,
) -> Result<bool, Error> {
    let known = restoring::user_exists(tx, user)?;
    let taken = restoring::name_taken(tx, &snapshot.name, user)?;
    let name = restored_name(&snapshot.name, user, taken.is_some());
    write_user(tx, signer, user, &name, token, snapshot, now)?;
    let reach = reach(&snapshot.endpoints, names);
    if !known {
        join_groups(tx, user, &reach)?;
    } else if reach.len() == snapshot.endpoints.len() {
        regroup(tx, user, &reach)?;
    }
    Ok(taken.is_some())
}

/// The name a restored user takes: its snapshot's, or, when another user took it since, the
/// snapshot's marked as restored.
fn restored_name(name: &str, user: UserId, taken: bool) -> String {
    if taken { format!("{name} (restored {user})") } else { name.to_owned() }
}

/// Adds the user, or gives a known one the snapshot's values.
fn write_user(
    tx: &Connection,
    signer: &Signer,
    user: UserId,
    name: &str,
    token: &SubToken,
    snapshot: &Snapshot,
    now: u64,
) -> Result<(), Error> {
    let credential = snapshot.credential.as_bytes();
    let enabled = snapshot.status != Status::Disabled;
    let reset = crate::store::users::reset_name(snapshot.reset);
    // New users are added; known ones take the snapshot's values (usage never goes down;
    // their notes stay, their next reset too unless the reset changed since).
    let row = RestoredUser {
        id: user,
        name,
        token_hash: token.hash(),
        token_enc: signer.vault.seal(Purpose::Token, token.as_bytes()),
        credential_enc: signer.vault.seal(Purpose::Credential, credential),
        credential_hash: sha256(credential),
        quota: snapshot.quota,
        used_up: snapshot.used_up,
        used_down: snapshot.used_down,
        reset,
        next_reset: crate::clock::next_reset(snapshot.reset, now),
        expires_at: snapshot.expires_at,
        enabled,
    };
    restoring::write_user(tx, &row, now)
}

/// The nodes of `names` (nodes by name) that a snapshot's endpoints name, in their order.
fn reach(endpoints: &[Endpoint], names: &BTreeMap<String, NodeId>) -> Vec<NodeId> {
    endpoints.iter().filter_map(|e| names.get(publish::node_name_of(&e.name)).copied()).collect()
}

/// A new user joins the groups of the nodes its snapshot names (`default` when none).
fn join_groups(tx: &Connection, user: UserId, reach: &[NodeId]) -> Result<(), Error> {
    let mut groups = restoring::groups_of_nodes(tx, reach)?;
    if groups.is_empty() {
        groups.insert(restoring::default_group(tx)?);
    }
    for group in groups {
        restoring::join_group(tx, user, group)?;
    }
    Ok(())
}

/// Groups changed since the archive: the user gets the groups of the nodes its snapshot
/// names, as a new user does.
fn regroup(tx: &Connection, user: UserId, reach: &[NodeId]) -> Result<(), Error> {
    let had = restoring::enrolled_nodes_of_user(tx, user)?;
    if had != reach.iter().copied().collect() {
        restoring::leave_groups(tx, user)?;
        for group in restoring::groups_of_nodes(tx, reach)? {
            restoring::join_group(tx, user, group)?;
        }
    }
    Ok(())
}

/// The aliases served again (path, user, token hash): those of users who have their link
/// back, but for an alias whose link was deleted.
fn served_aliases(edge: &Edge) -> Vec<(&str, UserId, Digest)> {
    let mut served = Vec::new();
    for (user, paths) in &edge.aliases {
        if !edge.snapshots.contains_key(user) {
            continue;
        }
        for path in paths {
            let Some(token) = SubToken::for_alias(path) else { continue };
            if edge.deleted_links.contains(&token.hash()) {
                continue;
            }
            served.push((path.as_str(), *user, token.hash()));
        }
    }
    served
}

/// Of the users `stored` (id, token hash), those deleted after the archive was made: the link
/// is gone from the edge and no snapshot has the user.
fn deleted_since(stored: Vec<(UserId, Digest)>, edge: &Edge) -> Vec<UserId> {
    stored
        .into_iter()
        .filter(|(user, hash)| !edge.snapshots.contains_key(user) && edge.deleted_links.contains(hash))
        .map(|(user, _)| user)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use hearth_shared::wire::{HwidPolicy, ResetStrategy};

    use super::*;

    fn snapshot(user: UserId) -> Snapshot {
        Snapshot {
            user,
            name: format!("user {user}"),
            status: Status::Active,
            used_up: 0,
            used_down: 0,
            quota: 0,
            expires_at: 0,
            reset: ResetStrategy::Never,
            credential: String::new(),
            endpoints: Vec::new(),
            profile: Profile {
                title: String::new(),
                announce: None,
                support_url: None,
                web_page_url: None,
                update_interval_hours: 12,
            },
            hwid: HwidPolicy::default(),
            alias: None,
            telegram: None,
        }
    }

    /// An edge with snapshots of `users` (each under a link of its own) and the links of
    /// `deleted` deleted.
    fn edge(users: &[UserId], deleted: &[Digest]) -> Edge {
        let mut edge = Edge::default();
        for &user in users {
            edge.snapshots.insert(user, (SubToken::generate(&mut rand_core::OsRng), snapshot(user)));
        }
        edge.deleted_links.extend(deleted);
        edge
    }

    #[test]
    fn a_name_another_user_took_since_is_marked_restored() {
        assert_eq!(restored_name("alice", 7, false), "alice");
        assert_eq!(restored_name("alice", 7, true), "alice (restored 7)");
    }

    /// A snapshot reaches the nodes its endpoints name, by their names (a limited node's
    /// endpoint too), in the endpoints' order; a node gone since is no node.
    #[test]
    fn a_snapshot_reaches_the_nodes_its_endpoints_name() {
        let names = BTreeMap::from([("tokyo".to_owned(), 2), ("oslo".to_owned(), 1)]);
        let endpoints = ["tokyo", "gone", "oslo"].map(Endpoint::placeholder);
        assert_eq!(reach(&endpoints, &names), [2, 1]);
        assert!(reach(&[], &names).is_empty());
    }

    /// Aliases come back for users who have their link back, but for one whose link was
    /// deleted; users whose link was deleted and who have no snapshot were deleted since.
    #[test]
    fn aliases_come_back_with_their_users_and_deletions_stay() {
        let dropped = SubToken::for_alias("/sub/dropped-alias").unwrap().hash();
        let mut edge = edge(&[1], &[dropped, [9; 32]]);
        edge.aliases.insert(1, BTreeSet::from(["/sub/old-link".to_owned(), "/sub/dropped-alias".to_owned()]));
        edge.aliases.insert(2, BTreeSet::from(["/sub/no-snapshot".to_owned()]));
        let old = SubToken::for_alias("/sub/old-link").unwrap().hash();
        assert_eq!(served_aliases(&edge), [("/sub/old-link", 1, old)]);
        let stored = vec![(1, [9; 32]), (2, [9; 32]), (3, [8; 32])];
        assert_eq!(deleted_since(stored, &edge), [2], "1 has a snapshot, 3 a link the edge did not delete");
    }
}
