//! Who is on the nodes: each node's report of the users and devices on it and what it refused
//! them, who is online now, and forgetting what nodes gone silent said.

use hearth_shared::wire::{self, NodeId, UserId};
use rusqlite::{Connection, OptionalExtension as _, params};
use serde::{Deserialize, Serialize};

use super::changes::Changes;
use crate::error::Error;

/// How long a node's report of who is on it counts: it reports at least every 5 minutes
/// while anyone is on it (see the node's agent), so a node silent for longer is taken to
/// have nobody (it is down, or cut off), and its users' devices count on other nodes again.
pub(crate) const PRESENCE_TTL: u64 = 11 * 60;

/// Takes a node's report of who is on it: its rows replace the node's; a user whose device
/// count here changed has the other nodes' sets checked (its allowance there moves); what
/// was refused is added to the user's counts, and a device refused over the limit puts a
/// notice in the user's profile (signed again at most once an hour for it).
pub(super) fn apply_presence(
    conn: &Connection,
    node: NodeId,
    presence: &[wire::Presence],
    now: u64,
    changes: &mut Changes,
) -> Result<(), Error> {
    let before: std::collections::HashMap<UserId, u32> = conn
        .prepare_cached("SELECT user_id, devices FROM presence WHERE node_id = ?1")?
        .query_map([node], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    conn.prepare_cached("DELETE FROM presence WHERE node_id = ?1")?.execute([node])?;
    let mut insert = conn.prepare_cached(
        "INSERT INTO presence (node_id, user_id, devices, connections)
         SELECT ?1, id, ?3, ?4 FROM users WHERE id = ?2",
    )?;
    let mut moved: Vec<UserId> = Vec::new();
    for p in presence {
        if p.devices > 0 {
            insert.execute(params![node, p.user, p.devices, p.connections])?;
        }
        if before.get(&p.user).copied().unwrap_or(0) != p.devices {
            moved.push(p.user);
        }
        if p.refused_devices + p.refused_torrent + p.refused_smtp > 0 {
            let noticed: Option<u64> = conn
                .prepare_cached(
                    "UPDATE users SET refused_devices = refused_devices + ?2, refused_torrent = refused_torrent + ?3,
                            refused_smtp = refused_smtp + ?4,
                            devices_refused_at = CASE WHEN ?2 > 0 THEN ?5 ELSE devices_refused_at END
                     WHERE id = ?1 RETURNING devices_refused_at",
                )?
                .query_row(params![p.user, p.refused_devices, p.refused_torrent, p.refused_smtp, now], |row| row.get(0))
                .optional()?;
            let previously = before_refusal(conn, p.user)?;
            if p.refused_devices > 0 && noticed.is_some() && previously + 3600 <= now {
                conn.prepare_cached("UPDATE users SET refusal_noticed = ?2 WHERE id = ?1")?
                    .execute(params![p.user, now])?;
                changes.user(conn, p.user)?;
                let more = serde_json::json!({ "node": node, "refused": p.refused_devices, "by": "node" });
                crate::store::events::user_event_of(conn, now, "user.over_device_limit", p.user, more)?;
            }
        }
    }
    moved.extend(before.keys().filter(|user| !presence.iter().any(|p| p.user == **user)));
    for user in moved {
        changes.creds_of_user(conn, user)?;
    }
    conn.prepare_cached("UPDATE nodes SET presence_at = ?2 WHERE id = ?1")?.execute(params![node, now])?;
    Ok(())
}

/// When the user's profile last got the notice of a refused device (0: never).
fn before_refusal(conn: &Connection, user: UserId) -> Result<u64, Error> {
    Ok(conn
        .prepare_cached("SELECT refusal_noticed FROM users WHERE id = ?1")?
        .query_row([user], |row| row.get(0))
        .optional()?
        .unwrap_or(0))
}

/// One user connected now, from the nodes' last reports.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Online {
    pub(crate) id: UserId,
    pub(crate) name: String,
    /// Devices, summed over nodes.
    pub(crate) devices: u32,
    pub(crate) connections: u32,
    /// The nodes it is on.
    pub(crate) nodes: Vec<String>,
}

/// Who is connected now (the most devices first, at most `limit` of them), and how many
/// users and devices in all.
pub(crate) fn online(conn: &Connection, limit: u64) -> Result<(Vec<Online>, u64, u64), Error> {
    let list = conn
        .prepare_cached(
            "SELECT u.id, u.name, sum(p.devices), sum(p.connections), group_concat(n.name, char(31))
             FROM presence p JOIN users u ON u.id = p.user_id JOIN nodes n ON n.id = p.node_id
             GROUP BY u.id ORDER BY sum(p.devices) DESC, u.name LIMIT ?1",
        )?
        .query_map([limit], |row| {
            let nodes: String = row.get(4)?;
            Ok(Online {
                id: row.get(0)?,
                name: row.get(1)?,
                devices: row.get(2)?,
                connections: row.get(3)?,
                nodes: nodes.split('\u{1f}').map(str::to_owned).collect(),
            })
        })?
        .collect::<Result<_, _>>()?;
    let (users, devices) =
        conn.query_row("SELECT count(DISTINCT user_id), coalesce(sum(devices), 0) FROM presence", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
    Ok((list, users, devices))
}

/// Forgets who is on nodes that have not reported for [`PRESENCE_TTL`]:
/// their users' devices stop counting against them elsewhere. Returns how many nodes.
pub(crate) fn expire_presence(conn: &Connection, changes: &mut Changes, now: u64) -> Result<usize, Error> {
    let stale: Vec<(NodeId, UserId)> = conn
        .prepare_cached(
            "SELECT p.node_id, p.user_id FROM presence p JOIN nodes n ON n.id = p.node_id
             WHERE n.presence_at + ?1 < ?2",
        )?
        .query_map(params![PRESENCE_TTL, now], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    if stale.is_empty() {
        return Ok(0);
    }
    let mut nodes: Vec<NodeId> = stale.iter().map(|(node, _)| *node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    for node in &nodes {
        conn.prepare_cached("DELETE FROM presence WHERE node_id = ?1")?.execute([node])?;
    }
    for (_, user) in stale {
        changes.creds_of_user(conn, user)?;
    }
    Ok(nodes.len())
}
