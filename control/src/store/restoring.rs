//! What a restore (`crate::restore`) writes over the database it rebuilt, taking the edge as
//! the newer truth: the streams seeded with the versions the edge holds, every edge brought up
//! to date from nothing, the nodes (keys enrolled or nodes removed since an archive, nodes and
//! their groups rebuilt from snapshots, the usage the edge acknowledged), and the users (merged
//! with their snapshots, their groups and aliases, those deleted since left deleted).
//!
//! These functions only read and write rows, with none of the checks, audit or publishing of
//! the rest of the store: what to write is the restore's to decide, and everything is signed
//! again after.

use std::collections::{BTreeMap, BTreeSet};

use hearth_shared::Digest;
use hearth_shared::wire::{NodeId, UserId};
use rusqlite::{Connection, OptionalExtension as _, params};

use crate::error::Error;

/// A stream at the version the edge holds: its envelope (and that envelope's digest), or none
/// for a stream deleted at that version.
pub(crate) struct Seed<'a> {
    pub(crate) name: &'a str,
    pub(crate) version: u64,
    pub(crate) digest: Option<&'a Digest>,
    pub(crate) envelope: Option<&'a [u8]>,
}

/// The streams at the versions `seeds` say become the current ones, in that order, so
/// everything signed from now on is above them. A stream the database holds newer keeps its
/// own.
pub(crate) fn seed_streams<'a>(tx: &Connection, seeds: impl IntoIterator<Item = Seed<'a>>) -> Result<(), Error> {
    let mut insert = tx.prepare(
        "INSERT INTO streams (name, version, digest, body_sha256, envelope, expires, seq)
         VALUES (?1, ?2, ?3, NULL, ?4, 0, (SELECT ifnull(max(seq), 0) + 1 FROM streams))
         ON CONFLICT (name) DO UPDATE SET version = excluded.version, digest = excluded.digest,
           body_sha256 = NULL, envelope = excluded.envelope, seq = excluded.seq
         WHERE excluded.version > streams.version",
    )?;
    for seed in seeds {
        insert.execute(params![seed.name, seed.version, seed.digest, seed.envelope])?;
    }
    Ok(())
}

/// Every edge is to be brought up to date from nothing: the streams are numbered anew (what
/// an edge already holds, it takes again as a no-op).
pub(crate) fn edges_from_nothing(tx: &Connection) -> Result<(), Error> {
    tx.execute("UPDATE edges SET pushed = 0, release = 0, archive = 0", [])?;
    Ok(())
}

/// A node and its enrolled key.
pub(crate) struct NodeKey {
    pub(crate) id: NodeId,
    /// None: not enrolled.
    pub(crate) public_key: Option<[u8; 32]>,
}

/// Every node and its enrolled key.
pub(crate) fn node_keys(tx: &Connection) -> Result<Vec<NodeKey>, Error> {
    let nodes = tx
        .prepare("SELECT id, public_key FROM nodes")?
        .query_map([], |row| Ok(NodeKey { id: row.get(0)?, public_key: row.get(1)? }))?
        .collect::<Result<_, _>>()?;
    Ok(nodes)
}

/// How many nodes there are.
pub(crate) fn node_count(tx: &Connection) -> Result<usize, Error> {
    Ok(tx.query_row("SELECT count(*) FROM nodes", [], |row| row.get(0))?)
}

/// Every node's id, by its name.
pub(crate) fn node_ids_by_name(tx: &Connection) -> Result<BTreeMap<String, NodeId>, Error> {
    let names = tx
        .prepare("SELECT name, id FROM nodes")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    Ok(names)
}

/// Node `node` was enrolled with `key` (its enrollment token spent).
pub(crate) fn set_node_key(tx: &Connection, node: NodeId, key: &[u8; 32]) -> Result<(), Error> {
    tx.execute("UPDATE nodes SET public_key = ?2, enroll_hash = NULL WHERE id = ?1", params![node, key])?;
    Ok(())
}

/// Removes node `node`.
pub(crate) fn delete_node(tx: &Connection, node: NodeId) -> Result<(), Error> {
    tx.execute("DELETE FROM nodes WHERE id = ?1", [node])?;
    Ok(())
}

/// Node `node`'s usage counts from sequence `seq`, the one its acknowledgement confirmed
/// (never back).
pub(crate) fn acknowledge_usage(tx: &Connection, node: NodeId, seq: u64) -> Result<(), Error> {
    tx.execute(
        "UPDATE nodes SET usage_digest = NULL, usage_seq = ?2 WHERE id = ?1 AND usage_seq < ?2",
        params![node, seq],
    )?;
    Ok(())
}

/// A node rebuilt from the snapshots, as its row holds it.
pub(crate) struct RestoredNode {
    pub(crate) id: NodeId,
    pub(crate) name: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The port hopping range (0 to 0: none).
    pub(crate) hop_start: u16,
    pub(crate) hop_end: u16,
    pub(crate) sni: String,
    /// `self_signed` or `operator`.
    pub(crate) tls: &'static str,
    pub(crate) cert_sha256: Option<Digest>,
    pub(crate) spki_sha256: Option<Digest>,
    pub(crate) obfs: String,
    pub(crate) public_key: [u8; 32],
    /// The certificate apps check (DER), and the names it is made out to (one a line).
    pub(crate) cert_der: Option<Vec<u8>>,
    pub(crate) cert_names: String,
    pub(crate) allow_unverified: bool,
}

/// Adds a node rebuilt from the snapshots, created `now`.
pub(crate) fn insert_node(tx: &Connection, node: &RestoredNode, now: u64) -> Result<(), Error> {
    tx.execute(
        "INSERT INTO nodes (id, name, host, port, hop_start, hop_end, sni, tls, cert_sha256, spki_sha256, obfs,
                                    public_key, created, cert_der, cert_names, allow_unverified)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
        params![
            node.id,
            node.name,
            node.host,
            node.port,
            node.hop_start,
            node.hop_end,
            node.sni,
            node.tls,
            node.cert_sha256,
            node.spki_sha256,
            node.obfs,
            node.public_key,
            now,
            node.cert_der.as_deref(),
            node.cert_names,
            node.allow_unverified,
        ],
    )?;
    Ok(())
}

/// The id of the `default` group.
pub(crate) fn default_group(tx: &Connection) -> Result<i64, Error> {
    Ok(tx.query_row("SELECT id FROM groups WHERE name = 'default'", [], |row| row.get(0))?)
}

/// Adds a group a restore rebuilt, named `name`; returns its id.
pub(crate) fn add_rebuilt_group(tx: &Connection, name: &str) -> Result<i64, Error> {
    tx.execute("INSERT INTO groups (name, note) VALUES (?1, 'rebuilt by a restore')", [name])?;
    Ok(tx.last_insert_rowid())
}

/// Node `node` joins group `group`.
pub(crate) fn group_node(tx: &Connection, node: NodeId, group: i64) -> Result<(), Error> {
    tx.execute("INSERT INTO node_groups (node_id, group_id) VALUES (?1, ?2)", params![node, group])?;
    Ok(())
}

/// The groups of the nodes `nodes`.
pub(crate) fn groups_of_nodes(tx: &Connection, nodes: &[NodeId]) -> Result<BTreeSet<i64>, Error> {
    let mut groups = BTreeSet::new();
    let mut query = tx.prepare_cached("SELECT group_id FROM node_groups WHERE node_id = ?1")?;
    for node in nodes {
        for group in query.query_map([node], |row| row.get(0))? {
            groups.insert(group?);
        }
    }
    Ok(groups)
}

/// The enrolled nodes user `user` reaches through its groups.
pub(crate) fn enrolled_nodes_of_user(tx: &Connection, user: UserId) -> Result<BTreeSet<NodeId>, Error> {
    let nodes = tx
        .prepare_cached(
            "SELECT DISTINCT ng.node_id FROM user_groups ug JOIN node_groups ng ON ng.group_id = ug.group_id
                     JOIN nodes n ON n.id = ng.node_id WHERE ug.user_id = ?1 AND n.public_key IS NOT NULL",
        )?
        .query_map([user], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(nodes)
}

/// User `user` joins group `group`.
pub(crate) fn join_group(tx: &Connection, user: UserId, group: i64) -> Result<(), Error> {
    tx.execute("INSERT INTO user_groups (user_id, group_id) VALUES (?1, ?2)", params![user, group])?;
    Ok(())
}

/// User `user` leaves every group.
pub(crate) fn leave_groups(tx: &Connection, user: UserId) -> Result<(), Error> {
    tx.execute("DELETE FROM user_groups WHERE user_id = ?1", [user])?;
    Ok(())
}

/// Whether user `user` is in the database.
pub(crate) fn user_exists(tx: &Connection, user: UserId) -> Result<bool, Error> {
    Ok(tx.query_row("SELECT EXISTS (SELECT 1 FROM users WHERE id = ?1)", [user], |row| row.get(0))?)
}

/// Another user than `user` that has the name `name`, if any.
pub(crate) fn name_taken(tx: &Connection, name: &str, user: UserId) -> Result<Option<UserId>, Error> {
    Ok(tx
        .query_row("SELECT id FROM users WHERE name = ?1 AND id != ?2", params![name, user], |row| row.get(0))
        .optional()?)
}

/// A user as its snapshot has it, for its row: the link's token (its hash, and sealed), the
/// credential (its hash, and sealed), limits and usage.
pub(crate) struct RestoredUser<'a> {
    pub(crate) id: UserId,
    pub(crate) name: &'a str,
    pub(crate) token_hash: Digest,
    pub(crate) token_enc: Vec<u8>,
    pub(crate) credential_enc: Vec<u8>,
    pub(crate) credential_hash: Digest,
    pub(crate) quota: u64,
    pub(crate) used_up: u64,
    pub(crate) used_down: u64,
    /// `users.reset`, and the next reset it makes from now.
    pub(crate) reset: &'a str,
    pub(crate) next_reset: u64,
    pub(crate) expires_at: u64,
    pub(crate) enabled: bool,
}

/// Adds the user, or gives a known one the snapshot's values (usage never goes down; its notes
/// stay, its next reset too unless the reset changed), as of `now`.
pub(crate) fn write_user(tx: &Connection, user: &RestoredUser<'_>, now: u64) -> Result<(), Error> {
    let known = tx.prepare_cached("SELECT 1 FROM users WHERE id = ?1")?.exists([user.id])?;
    tx.execute(
        "INSERT INTO users (id, name, token_hash, token_enc, credential_enc, credential_hash, quota, used_up,
                                used_down, reset, next_reset, expires_at, enabled, created, updated, raw_up, raw_down)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14, ?8, ?9)
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, token_hash = excluded.token_hash,
               token_enc = excluded.token_enc, credential_enc = excluded.credential_enc,
               credential_hash = excluded.credential_hash, quota = excluded.quota,
               used_up = max(used_up, excluded.used_up), used_down = max(used_down, excluded.used_down),
               next_reset = CASE WHEN reset = excluded.reset THEN next_reset ELSE excluded.next_reset END,
               reset = excluded.reset, expires_at = excluded.expires_at, enabled = excluded.enabled,
               updated = excluded.updated",
        params![
            user.id,
            user.name,
            user.token_hash,
            user.token_enc,
            user.credential_enc,
            user.credential_hash,
            user.quota,
            user.used_up,
            user.used_down,
            user.reset,
            user.next_reset,
            user.expires_at,
            user.enabled,
            now
        ],
    )?;
    // A known user's new name is indexed by the trigger on its update.
    if !known {
        super::user_create::index_for_search(tx, user.id, user.id, 1)?;
    }
    Ok(())
}

/// Serves the alias `path` of user `user` (whose link's token hashes to `hash`) again, unless
/// the path is served already.
pub(crate) fn serve_alias(tx: &Connection, path: &str, user: UserId, hash: &Digest, now: u64) -> Result<(), Error> {
    tx.execute(
        "INSERT INTO aliases (path, user_id, token_hash, source, created) VALUES (?1, ?2, ?3, 'restored', ?4)
                 ON CONFLICT (path) DO NOTHING",
        params![path, user, hash, now],
    )?;
    Ok(())
}

/// Every user's id and link's token hash.
pub(crate) fn user_links(tx: &Connection) -> Result<Vec<(UserId, Digest)>, Error> {
    let users = tx
        .prepare("SELECT id, token_hash FROM users")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    Ok(users)
}

/// Deletes user `user` (its rows in other tables go with it).
pub(crate) fn delete_user(tx: &Connection, user: UserId) -> Result<(), Error> {
    tx.execute("DELETE FROM users WHERE id = ?1", [user])?;
    Ok(())
}

/// How many users there are.
pub(crate) fn user_count(tx: &Connection) -> Result<usize, Error> {
    Ok(tx.query_row("SELECT count(*) FROM users", [], |row| row.get::<_, i64>(0))? as usize)
}
