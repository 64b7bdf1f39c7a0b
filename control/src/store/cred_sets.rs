//! What a node's credential set is read from: whether the node is enrolled, takes deltas or
//! is over its monthly cap; the rows of the users it carries (a user once per group it
//! reaches the node through) and the devices they have elsewhere; and the digest of what each
//! user puts in sets, kept to tell when that changed. Merging the rows into entries and
//! signing the set are [`crate::publish`]'s; these functions only read and write rows.

use std::collections::HashMap;

use hearth_shared::wire::{NodeId, UserId};
use hearth_shared::{Digest, sha256};
use rusqlite::{Connection, OptionalExtension as _, params};

use crate::error::Error;

/// Whether a node is enrolled (only an enrolled node gets a set) and takes deltas.
pub(crate) struct NodeSetting {
    pub(crate) enrolled: bool,
    pub(crate) deltas: bool,
}

/// `node`'s [`NodeSetting`], `None` when there is no such node.
pub(crate) fn node_setting(conn: &Connection, node: NodeId) -> Result<Option<NodeSetting>, Error> {
    Ok(conn
        .prepare_cached("SELECT public_key IS NOT NULL, deltas FROM nodes WHERE id = ?1")?
        .query_row([node], |row| Ok(NodeSetting { enrolled: row.get(0)?, deltas: row.get(1)? }))
        .optional()?)
}

/// Keeps whether `node` takes deltas.
pub(crate) fn set_takes_deltas(conn: &Connection, node: NodeId, takes: bool) -> Result<(), Error> {
    conn.prepare_cached("UPDATE nodes SET deltas = ?2 WHERE id = ?1 AND deltas != ?2")?
        .execute(params![node, takes])?;
    Ok(())
}

/// Whether a node is over its monthly cap: it carries nobody until the month ends.
pub(crate) fn node_limited(conn: &Connection, node: NodeId) -> Result<bool, Error> {
    Ok(conn
        .prepare_cached("SELECT limited FROM nodes WHERE id = ?1")?
        .query_row([node], |row| row.get(0))
        .optional()?
        .unwrap_or(false))
}

/// One row of a user's on a node: the user's own settings and those of one group it reaches
/// the node through. Speeds are in kbit/s (0: no limit).
pub(crate) struct EntryRow {
    pub(crate) user: UserId,
    pub(crate) credential_hash: Digest,
    pub(crate) over_quota: bool,
    /// The user's own speeds and quota action (`None`: its groups').
    pub(crate) speed_up: Option<u64>,
    pub(crate) speed_down: Option<u64>,
    pub(crate) on_quota: Option<String>,
    /// The user's own rate when slowed.
    pub(crate) slow_kbps: u64,
    /// The group's speeds, and the rate it slows a user over quota to (0: it cuts them off).
    pub(crate) group_up: u64,
    pub(crate) group_down: u64,
    pub(crate) group_slow: u64,
    /// The user's own device limit (`None`: its groups') and kick count.
    pub(crate) device_limit: Option<u32>,
    pub(crate) kick: u32,
    /// The group's device limit (0: none) and abuse guards.
    pub(crate) group_devices: u32,
    pub(crate) block_torrent: bool,
    pub(crate) block_smtp: bool,
    /// The user's own rule set, and the group's (with the group's id) when it has one.
    pub(crate) rule_set: Option<u16>,
    pub(crate) group_rule_set: Option<(i64, u16)>,
}

/// The rows of the users `node` carries (or `only` that user's), each as `each` makes it of
/// its [`EntryRow`]: every user who can connect, once per group of the node it is in.
pub(crate) fn entry_rows<T>(
    conn: &Connection,
    node: NodeId,
    only: Option<UserId>,
    mut each: impl FnMut(EntryRow) -> T,
) -> Result<Vec<T>, Error> {
    // A user in two of the node's groups comes twice, merged by the caller: no DISTINCT here.
    const QUERY: &str =
        "SELECT u.id, u.credential_hash, u.status = 'over_quota', u.speed_up, u.speed_down, u.on_quota, u.slow_kbps,
                g.speed_up, g.speed_down, CASE g.on_quota WHEN 'slow' THEN g.slow_kbps ELSE 0 END,
                u.device_limit, u.kick, g.device_limit, g.block_torrent, g.block_smtp,
                u.rule_set_id, g.id, g.rule_set_id
         FROM node_groups ng JOIN user_groups ug ON ug.group_id = ng.group_id JOIN users u ON u.id = ug.user_id
         JOIN groups g ON g.id = ng.group_id
         WHERE ng.node_id = ?1 AND u.status IN ('active', 'not_started', 'over_quota')";
    let read = |row: &rusqlite::Row<'_>| -> rusqlite::Result<T> {
        Ok(each(EntryRow {
            user: row.get(0)?,
            credential_hash: row.get(1)?,
            over_quota: row.get(2)?,
            speed_up: row.get(3)?,
            speed_down: row.get(4)?,
            on_quota: row.get(5)?,
            slow_kbps: row.get(6)?,
            group_up: row.get(7)?,
            group_down: row.get(8)?,
            group_slow: row.get(9)?,
            device_limit: row.get(10)?,
            kick: row.get(11)?,
            group_devices: row.get(12)?,
            block_torrent: row.get(13)?,
            block_smtp: row.get(14)?,
            rule_set: row.get(15)?,
            group_rule_set: row.get::<_, Option<u16>>(17)?.map(|set| (row.get(16).unwrap_or(0), set)),
        }))
    };
    let rows = match only {
        None => conn.prepare_cached(QUERY)?.query_map([node], read)?.collect::<Result<Vec<T>, _>>()?,
        Some(user) => conn
            .prepare_cached(&format!("{QUERY} AND u.id = ?2"))?
            .query_map(params![node, user], read)?
            .collect::<Result<Vec<T>, _>>()?,
    };
    Ok(rows)
}

/// Devices each user (or `only` that user) has on nodes other than `node`, from their last
/// reports.
pub(crate) fn devices_elsewhere(
    conn: &Connection,
    node: NodeId,
    only: Option<UserId>,
) -> Result<HashMap<UserId, u32>, Error> {
    const QUERY: &str = "SELECT user_id, sum(devices) FROM presence WHERE node_id != ?1 AND devices > 0";
    let read = |row: &rusqlite::Row<'_>| -> rusqlite::Result<(UserId, u32)> { Ok((row.get(0)?, row.get(1)?)) };
    let rows: rusqlite::Result<HashMap<UserId, u32>> = match only {
        None => conn.prepare_cached(&format!("{QUERY} GROUP BY user_id"))?.query_map([node], read)?.collect(),
        Some(user) => conn
            .prepare_cached(&format!("{QUERY} AND user_id = ?2 GROUP BY user_id"))?
            .query_map(params![node, user], read)?
            .collect(),
    };
    Ok(rows?)
}

/// The columns of what `user` puts in the sets of the nodes it reaches (the user's own
/// fields and those of each group it has on each node: see [`entry_rows`]).
const ENTRY_COLUMNS: usize = 19;

/// Whether what `user` puts in nodes' sets changed since it was last recorded; records it. A
/// user's entry in a node's set comes from its row and its groups' on that node, so a change
/// to neither (a quota, a name, a note, usage) leaves every set as it was.
pub(crate) fn entries_changed(conn: &Connection, user: UserId) -> Result<bool, Error> {
    use std::fmt::Write as _;
    let mut query = conn.prepare_cached(
        "SELECT ng.node_id, g.id, u.credential_hash, u.status, u.speed_up, u.speed_down, u.on_quota, u.slow_kbps,
                u.device_limit, u.kick, g.speed_up, g.speed_down, g.on_quota, g.slow_kbps, g.device_limit,
                g.block_torrent, g.block_smtp, u.rule_set_id, g.rule_set_id
         FROM user_groups ug JOIN groups g ON g.id = ug.group_id JOIN node_groups ng ON ng.group_id = ug.group_id
         JOIN users u ON u.id = ug.user_id
         WHERE ug.user_id = ?1 ORDER BY ng.node_id, g.id",
    )?;
    let mut rows = query.query([user])?;
    let mut entries = String::new();
    while let Some(row) = rows.next()? {
        for column in 0..ENTRY_COLUMNS {
            let value: rusqlite::types::Value = row.get(column)?;
            let _ = write!(entries, "{value:?}\u{1f}");
        }
        entries.push('\n');
    }
    let digest = sha256(entries.as_bytes()).to_vec();
    let changed = conn
        .prepare_cached(
            "UPDATE users SET creds_digest = ?2 WHERE id = ?1 AND (creds_digest IS NULL OR creds_digest != ?2)",
        )?
        .execute(params![user, digest])?;
    Ok(changed > 0)
}
