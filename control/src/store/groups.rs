//! Groups: what ties users to nodes (a user reaches the nodes of its groups), and the defaults
//! a group gives its users on its nodes (speed, what a used-up quota does, devices, the abuse
//! guard, a rule set).

use hearth_shared::wire::{NodeId, UserId};
use rusqlite::{Connection, OptionalExtension as _, params};
use serde::{Deserialize, Serialize};

use super::changes::Changes;
use super::node_input::check_text;
use super::user_input::{MAX_DEVICES, Mbps, check_name, check_slow};
use crate::error::Error;
use crate::store::audit_log::audit;

/// A group as the API shows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct GroupView {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) note: String,
    pub(crate) users: u64,
    pub(crate) nodes: u64,
    /// The default speed limit of its users on its nodes (0 each way: none).
    pub(crate) speed_limit: GroupSpeed,
    /// What a used-up quota does to its users by default: `cut` or `slow`.
    pub(crate) on_quota: String,
    /// The rate `slow` slows to.
    pub(crate) slow_speed: Mbps,
    /// The default device limit of its users (0: none).
    pub(crate) device_limit: u32,
    /// Its nodes refuse its users BitTorrent (the abuse guard).
    pub(crate) block_torrent: bool,
    /// Its nodes refuse its users connections to port 25 (the abuse guard).
    pub(crate) block_smtp: bool,
    /// The rule set its users' traffic is routed by, unless their own or a newer group's
    /// says otherwise (`null`: none).
    pub(crate) rule_set: Option<String>,
}

/// A group's default speed limit, Mbit/s each way (0: none).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupSpeed {
    #[serde(default)]
    pub(crate) up: Mbps,
    #[serde(default)]
    pub(crate) down: Mbps,
}

/// A group's settings.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupInput {
    pub(crate) name: Option<String>,
    pub(crate) note: Option<String>,
    /// The default speed limit of its users on its nodes, Mbit/s (0: none).
    pub(crate) speed_limit: Option<GroupSpeed>,
    /// `cut` or `slow`.
    pub(crate) on_quota: Option<String>,
    /// The rate `slow` slows to, Mbit/s.
    pub(crate) slow_speed: Option<Mbps>,
    /// The default device limit of its users (0: none).
    pub(crate) device_limit: Option<u32>,
    /// Its nodes refuse its users BitTorrent.
    pub(crate) block_torrent: Option<bool>,
    /// Its nodes refuse its users connections to port 25.
    pub(crate) block_smtp: Option<bool>,
    /// The rule set (by name) its users are routed by (empty: none); the owner's to set.
    pub(crate) rule_set: Option<String>,
}

const GROUP_COLUMNS: &str = "g.id, g.name, g.note,
    (SELECT count(*) FROM user_groups ug WHERE ug.group_id = g.id),
    (SELECT count(*) FROM node_groups ng WHERE ng.group_id = g.id),
    g.speed_up, g.speed_down, g.on_quota, g.slow_kbps, g.device_limit, g.block_torrent, g.block_smtp,
    (SELECT r.name FROM rule_sets r WHERE r.id = g.rule_set_id)";

fn group_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<GroupView> {
    Ok(GroupView {
        id: row.get(0)?,
        name: row.get(1)?,
        note: row.get(2)?,
        users: row.get(3)?,
        nodes: row.get(4)?,
        speed_limit: GroupSpeed { up: Mbps::from_stored(row.get(5)?), down: Mbps::from_stored(row.get(6)?) },
        on_quota: row.get(7)?,
        slow_speed: Mbps::from_stored(row.get(8)?),
        device_limit: row.get(9)?,
        block_torrent: row.get(10)?,
        block_smtp: row.get(11)?,
        rule_set: row.get(12)?,
    })
}

/// Every group.
pub(crate) fn groups(conn: &Connection) -> Result<Vec<GroupView>, Error> {
    let groups = conn
        .prepare_cached(&format!("SELECT {GROUP_COLUMNS} FROM groups g ORDER BY g.name"))?
        .query_map([], group_of)?
        .collect::<Result<_, _>>()?;
    Ok(groups)
}

/// One group.
pub(crate) fn group(conn: &Connection, id: i64) -> Result<GroupView, Error> {
    conn.prepare_cached(&format!("SELECT {GROUP_COLUMNS} FROM groups g WHERE g.id = ?1"))?
        .query_row([id], group_of)
        .optional()?
        .ok_or(Error::NotFound("group"))
}

/// Group ids of names; refuses unknown names.
pub(crate) fn group_ids(conn: &Connection, names: &[String]) -> Result<Vec<i64>, Error> {
    let mut query = conn.prepare_cached("SELECT id FROM groups WHERE name = ?1")?;
    let mut ids = Vec::with_capacity(names.len());
    for name in names {
        match query.query_row([name], |row| row.get(0)).optional()? {
            Some(id) => ids.push(id),
            None => return Err(Error::invalid("unknown_group", format!("there is no group named {name:?}"))),
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// Sets a group's speed limit and quota action from `input`; checks that `slow` has a rate.
/// Returns whether any of them was given.
fn set_group_speed(conn: &Connection, id: i64, input: &GroupInput) -> Result<bool, Error> {
    if let Some(speed) = input.speed_limit {
        conn.execute(
            "UPDATE groups SET speed_up = ?2, speed_down = ?3 WHERE id = ?1",
            params![id, speed.up.stored(), speed.down.stored()],
        )?;
    }
    if let Some(on_quota) = &input.on_quota {
        if !matches!(on_quota.as_str(), "cut" | "slow") {
            return Err(Error::invalid("bad_on_quota", "a group's on_quota is cut or slow"));
        }
        conn.execute("UPDATE groups SET on_quota = ?2 WHERE id = ?1", params![id, on_quota])?;
    }
    if let Some(slow) = input.slow_speed {
        conn.execute("UPDATE groups SET slow_kbps = ?2 WHERE id = ?1", params![id, slow.stored()])?;
    }
    if input.on_quota.is_some() || input.slow_speed.is_some() {
        let (on_quota, slow): (String, u64) =
            conn.query_row("SELECT on_quota, slow_kbps FROM groups WHERE id = ?1", [id], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        check_slow(Some(&on_quota), Mbps::from_stored(slow))?;
    }
    if let Some(devices) = input.device_limit {
        if devices > MAX_DEVICES {
            return Err(Error::invalid(
                "bad_device_limit",
                format!("a device limit is from 0 (no limit) to {MAX_DEVICES}"),
            ));
        }
        conn.execute("UPDATE groups SET device_limit = ?2 WHERE id = ?1", params![id, devices])?;
    }
    if let Some(block) = input.block_torrent {
        conn.execute("UPDATE groups SET block_torrent = ?2 WHERE id = ?1", params![id, block])?;
    }
    if let Some(block) = input.block_smtp {
        conn.execute("UPDATE groups SET block_smtp = ?2 WHERE id = ?1", params![id, block])?;
    }
    if let Some(name) = &input.rule_set {
        let set = crate::store::routing::named(conn, name)?;
        conn.execute("UPDATE groups SET rule_set_id = ?2 WHERE id = ?1", params![id, set])?;
    }
    Ok(input.speed_limit.is_some()
        || input.on_quota.is_some()
        || input.slow_speed.is_some()
        || input.device_limit.is_some()
        || input.block_torrent.is_some()
        || input.block_smtp.is_some()
        || input.rule_set.is_some())
}

/// The group's users and nodes must be published again (its defaults changed, or it is
/// going away).
fn group_changes(conn: &Connection, id: i64, changes: &mut Changes) -> Result<(), Error> {
    let users: Vec<UserId> = conn
        .prepare_cached("SELECT user_id FROM user_groups WHERE group_id = ?1")?
        .query_map([id], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let nodes: Vec<NodeId> = conn
        .prepare_cached("SELECT node_id FROM node_groups WHERE group_id = ?1")?
        .query_map([id], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    for user in &users {
        changes.user(conn, *user)?;
    }
    for node in nodes {
        changes.node(node);
    }
    Ok(())
}

/// Creates a group.
pub(crate) fn create_group(conn: &Connection, actor: &str, input: &GroupInput, now: u64) -> Result<GroupView, Error> {
    let name = check_name(input.name.as_deref().unwrap_or_default(), "group")?;
    let note = check_text(input.note.as_deref().unwrap_or_default(), "bad_note", "note")?;
    conn.execute("INSERT INTO groups (name, note) VALUES (?1, ?2)", params![name, note])
        .map_err(|e| Error::from(e).unique(&format!("a group named {name:?}")))?;
    let id = conn.last_insert_rowid();
    // A new group has no users or nodes yet: nothing to publish.
    set_group_speed(conn, id, input)?;
    audit(conn, now, actor, "group.create", &format!("group {id} ({name})"), "")?;
    group(conn, id)
}

/// Renames a group, changes its note or its defaults (membership is set on users and
/// nodes); its users and nodes are published again when a default changed.
pub(crate) fn update_group(
    conn: &Connection,
    changes: &mut Changes,
    actor: &str,
    id: i64,
    input: &GroupInput,
    now: u64,
) -> Result<GroupView, Error> {
    let before = group(conn, id)?;
    if let Some(name) = &input.name {
        let name = check_name(name, "group")?;
        conn.execute("UPDATE groups SET name = ?2 WHERE id = ?1", params![id, name])
            .map_err(|e| Error::from(e).unique(&format!("a group named {name:?}")))?;
    }
    if let Some(note) = &input.note {
        conn.execute("UPDATE groups SET note = ?2 WHERE id = ?1", params![id, check_text(note, "bad_note", "note")?])?;
    }
    if set_group_speed(conn, id, input)? {
        group_changes(conn, id, changes)?;
    }
    let after = group(conn, id)?;
    let changed = super::audit_log::differences(&before, &after, &["users", "nodes"]);
    if !changed.is_empty() {
        super::audit_log::audit_edit(
            conn,
            now,
            actor,
            "group.update",
            &format!("group {id} ({})", before.name),
            &changed,
        )?;
    }
    Ok(after)
}

/// Deletes a group: its users lose its nodes.
pub(crate) fn delete_group(
    conn: &Connection,
    changes: &mut Changes,
    actor: &str,
    id: i64,
    now: u64,
) -> Result<(), Error> {
    let before = group(conn, id)?;
    group_changes(conn, id, changes)?;
    conn.execute("DELETE FROM groups WHERE id = ?1", [id])?;
    audit(conn, now, actor, "group.delete", &format!("group {id} ({})", before.name), "")?;
    Ok(())
}
