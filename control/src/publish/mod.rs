//! From a change in the database to signed envelopes for the edges and nodes.
//!
//! Every change runs inside one write transaction that also signs what it affects: the
//! user's sealed snapshot, and the credential set of each node whose set it changes. Work is
//! proportional to what a change touches: a user's snapshot, and one query per affected node.
//! The latest envelope of each stream is kept in `streams` (nodes pull from there) with the
//! order of its change (`seq`), written in the same transaction: every edge gets what is newer
//! than what it holds, so nothing committed is ever left unpublished, whichever process
//! committed it (see [`crate::outbox`]).

mod entries;
mod records;
mod sets;
mod signer;
mod snapshot;
mod streams;
mod user;

use hearth_shared::keys::PublicKey;
use hearth_shared::sha256;
use hearth_shared::wire::Stream;
use rusqlite::Connection;

pub(crate) use records::{publish_edge_settings, publish_node_record, publish_rollout, usage_ack};
#[cfg(test)]
pub(crate) use sets::{CREDS_LIFETIME, by_entries};
pub(crate) use sets::{
    REFRESH_BEFORE, fallbacks, node_creds, publish_creds, publish_creds_of, raise_creds, takes_deltas,
};
pub(crate) use signer::Signer;
pub(crate) use snapshot::node_name_of;
use user::publish_user;

use crate::error::Error;
use crate::store::changes::Changes;
use crate::store::enrollment::{self, enrolled_ids};
use crate::store::streams::{delete_stream, forget_contents, signed_versions};
use crate::store::users;

/// Signs what a transaction changed (see [`Changes`]), inside it: node records first, then
/// withdrawn streams, users' snapshots, the nodes' sets (those the users reach too), and the
/// edge's settings. Returns how many envelopes were signed.
#[tracing::instrument(name = "publish", level = "debug", skip_all, fields(users = changes.users.len(), nodes = changes.nodes.len()))]
pub(crate) fn changes(conn: &Connection, signer: &Signer, changes: Changes, now: u64) -> Result<usize, Error> {
    let mut signed = 0;
    for (node, key) in changes.node_records {
        publish_node_record(conn, signer, node, key, now)?;
        signed += 1;
    }
    for stream in &changes.gone {
        delete_stream(conn, stream)?;
    }
    // A user's entries in the sets of the nodes it reaches: checked only when one changed
    // (or the user is gone).
    let mut by_entries = changes.creds;
    let mut entries_changed = false;
    // A bulk create's users after its first share what the first's snapshot read (the first
    // has the smallest id, and users are published in the order of their ids).
    let first_alike = changes.alike.first().copied();
    let mut shared: Option<user::Shared> = None;
    for user in changes.users {
        let alike = if first_alike == Some(user) {
            user::Alike::Keep(&mut shared)
        } else if changes.alike.contains(&user) {
            shared.as_ref().map_or(user::Alike::No, user::Alike::Use)
        } else {
            user::Alike::No
        };
        match publish_user(conn, signer, user, now, alike)? {
            Some(entries) => {
                signed += 1;
                // The nodes the user reaches now; those of a bulk create's users are in
                // `changes.reach` already.
                if entries && !changes.alike.contains(&user) {
                    by_entries.extend(crate::store::changes::nodes_of_user(conn, user)?);
                }
                entries_changed |= entries;
            }
            None => entries_changed = true,
        }
    }
    if entries_changed {
        by_entries.extend(changes.reach);
    }
    for &node in &changes.nodes {
        signed += usize::from(publish_creds(conn, signer, node, now, false)?);
    }
    for node in by_entries.difference(&changes.nodes) {
        signed += usize::from(publish_creds_of(conn, signer, *node, &changes.entries, now)?);
    }
    if changes.edge_settings {
        publish_edge_settings(conn, signer, now)?;
        signed += 1;
    }
    Ok(signed)
}

/// Runs a change of the store's in the caller's transaction, then signs what it changed.
pub(crate) fn changed<T>(
    conn: &Connection,
    signer: &Signer,
    now: u64,
    change: impl FnOnce(&mut Changes) -> Result<T, Error>,
) -> Result<T, Error> {
    let mut touched = Changes::default();
    let value = change(&mut touched)?;
    changes(conn, signer, touched, now)?;
    Ok(value)
}

/// Signs every user's snapshot again (the profile they all carry changed). Returns how many
/// envelopes were signed.
pub(crate) fn republish_users(conn: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    let mut touched = Changes::default();
    users::ids(conn, &mut touched.users)?;
    changes(conn, signer, touched, now)
}

/// After the edges changed: the edge settings (where links are served) and every enrolled
/// node's set (whom to fall back to) are signed again if that changed them. Returns how many
/// node sets it signed.
pub(crate) fn edges_changed(conn: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    publish_edge_settings(conn, signer, now)?;
    all_nodes_changed(conn, signer, now)
}

/// Signs every enrolled node's set again where it changed. Returns how many were signed.
pub(crate) fn all_nodes_changed(conn: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    let mut signed = 0;
    for node in enrolled_ids(conn)? {
        signed += usize::from(publish_creds(conn, signer, node, now, false)?);
    }
    Ok(signed)
}

/// Signs every stream control publishes again, at its next version, with the signing key in
/// force (after a rotation: nodes and the edge then hold nothing signed by the retired key).
/// Each is rebuilt from control's own state (users, nodes, settings, rollouts), never from
/// a stored envelope: a stream that state does not make (a link no user holds, the set of a
/// node since removed, a name control never signs) is deleted at its next version instead.
/// Returns how many envelopes were signed.
#[tracing::instrument(level = "info", skip_all)]
pub(crate) fn resign_all(conn: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    let before: std::collections::BTreeMap<String, u64> = signed_versions(conn)?;
    // Forgetting what each stream's content was makes every publish below sign again.
    forget_contents(conn)?;
    let users = users::by_token_hash(conn)?;
    let nodes = enrollment::keys(conn)?;
    for name in before.keys() {
        match name.parse::<Stream>() {
            Ok(Stream::Snapshot(hash)) if users.contains_key(&hash) => {
                publish_user(conn, signer, users[&hash], now, user::Alike::No)?;
            }
            Ok(Stream::Creds(node)) if nodes.contains_key(&node) => {
                publish_creds(conn, signer, node, now, true)?;
            }
            Ok(Stream::Node(node)) => {
                let key = nodes.get(&node).and_then(|keys| keys.key.and_then(|k| PublicKey::from_bytes(&k).ok()));
                publish_node_record(conn, signer, node, key, now)?;
            }
            Ok(Stream::UsageAck(node)) if nodes.get(&node).is_some_and(|keys| keys.usage_seq > 0) => {
                usage_ack(conn, signer, node, nodes[&node].usage_seq, now)?;
            }
            Ok(Stream::EdgeSettings) => publish_edge_settings(conn, signer, now)?,
            Ok(Stream::Rollout) => publish_rollout(conn, signer, now)?,
            _ => delete_stream(conn, name)?,
        }
    }
    let after: Vec<(String, u64)> = signed_versions(conn)?;
    Ok(after.iter().filter(|(name, version)| before.get(name).is_some_and(|was| version > was)).count())
}

/// After the key records in the data directory changed (`keys rotate`, or a restore), bumps
/// `keys_serial` (a running control loads the new key at its next signature) and signs every
/// stream again; the next push hands the new records to the edge, the next pull to nodes.
/// Returns how many envelopes were signed, or `None` when the records had not changed.
pub(crate) fn settle_keys(conn: &Connection, signer: &Signer, now: u64) -> Result<Option<usize>, Error> {
    let chain = crate::keyring::chain(&signer.dir).map_err(|e| Error::Internal(format!("{e:#}")))?;
    let digest = hex::encode(sha256(&chain.concat()));
    let before = crate::store::get_state_text(conn, "keys_chain")?;
    if before.as_deref() == Some(digest.as_str()) {
        return Ok(None);
    }
    let serial = crate::store::get_state(conn, "keys_serial")? + 1;
    crate::store::set_state(conn, "keys_serial", serial)?;
    let signed = resign_all(conn, signer, now)?;
    // (The first records, at the first start, are no rotation.)
    if before.is_some() {
        let data = serde_json::json!({ "serial": serial, "records": chain.len(), "signed_again": signed });
        crate::store::events::emit(conn, now, "key.rotated", "keys", &data)?;
    }
    crate::store::set_state(conn, "keys_chain", digest)?;
    Ok(Some(signed))
}
