//! What control's periodic sweeps (`crate::tasks`) read and write: users whose expiry or
//! traffic reset is due or whose usage waits to be published, credential sets near their
//! expiry, and the nodes and edges whose silence or failure is yet to be told (or whose
//! return is).

use hearth_shared::wire::{NodeId, UserId};
use rusqlite::{Connection, params};

use crate::error::Error;

/// The ids a query selects.
fn ids(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<Vec<u64>, Error> {
    let ids = conn.prepare_cached(sql)?.query_map(params, |row| row.get(0))?.collect::<Result<_, _>>()?;
    Ok(ids)
}

/// Users (at most `limit`) expired by `now` whose status does not say so yet.
pub(crate) fn expired_users(conn: &Connection, now: u64, limit: usize) -> Result<Vec<UserId>, Error> {
    ids(
        conn,
        "SELECT id FROM users WHERE expires_at > 0 AND expires_at <= ?1 AND status IN ('active', 'not_started') LIMIT ?2",
        params![now, limit],
    )
}

/// A user whose traffic reset is due, and how it resets (`users.reset`).
pub(crate) struct DueReset {
    pub(crate) id: UserId,
    pub(crate) reset: String,
}

/// Users (at most `limit`) whose traffic reset is due at `now`.
pub(crate) fn resets_due(conn: &Connection, now: u64, limit: usize) -> Result<Vec<DueReset>, Error> {
    let mut resets =
        conn.prepare_cached("SELECT id, reset FROM users WHERE next_reset > 0 AND next_reset <= ?1 LIMIT ?2")?;
    let due = resets
        .query_map(params![now, limit], |row| Ok(DueReset { id: row.get(0)?, reset: row.get(1)? }))?
        .collect::<Result<_, _>>()?;
    Ok(due)
}

/// Puts a user's traffic reset off to `next`, its traffic as it is.
pub(crate) fn postpone_reset(conn: &Connection, user: UserId, next: u64) -> Result<(), Error> {
    conn.execute("UPDATE users SET next_reset = ?2 WHERE id = ?1", params![user, next])?;
    Ok(())
}

/// Resets a user's traffic to zero, the next reset at `next`.
pub(crate) fn reset_traffic(conn: &Connection, user: UserId, next: u64) -> Result<(), Error> {
    conn.execute(
        "UPDATE users SET used_up = 0, used_down = 0, raw_up = 0, raw_down = 0, next_reset = ?2 WHERE id = ?1",
        params![user, next],
    )?;
    Ok(())
}

/// Users (at most `limit`) whose usage changed since it was last published.
pub(crate) fn usage_dirty(conn: &Connection, limit: usize) -> Result<Vec<UserId>, Error> {
    ids(conn, "SELECT id FROM users WHERE usage_dirty = 1 LIMIT ?1", [limit])
}

/// The credential set streams (`creds/<node>`) signed to expire before `before`.
pub(crate) fn creds_expiring(conn: &Connection, before: u64) -> Result<Vec<String>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT name FROM streams WHERE name LIKE 'creds/%' AND envelope IS NOT NULL AND expires < ?1",
    )?;
    let names = query.query_map([before], |row| row.get(0))?.collect::<Result<_, _>>()?;
    Ok(names)
}

/// An enrolled node gone silent or back since it was last told.
pub(crate) struct NodeSilence {
    pub(crate) id: NodeId,
    pub(crate) name: String,
    pub(crate) last_seen: u64,
    /// When it was told offline (0: it was not, or was told back online).
    pub(crate) offline_told: u64,
}

/// Enrolled nodes not told offline though unheard of since before `offline_before`, and
/// nodes told offline that were heard of since.
pub(crate) fn silences(conn: &Connection, offline_before: u64) -> Result<Vec<NodeSilence>, Error> {
    let nodes = conn
        .prepare_cached(
            "SELECT id, name, last_seen, offline_told FROM nodes WHERE public_key IS NOT NULL AND last_seen > 0
               AND ((offline_told = 0 AND last_seen < ?1) OR (offline_told > 0 AND last_seen >= offline_told))",
        )?
        .query_map([offline_before], |row| {
            Ok(NodeSilence { id: row.get(0)?, name: row.get(1)?, last_seen: row.get(2)?, offline_told: row.get(3)? })
        })?
        .collect::<Result<_, _>>()?;
    Ok(nodes)
}

/// Notes that a node was told offline at `told` (0: told back online).
pub(crate) fn set_offline_told(conn: &Connection, node: NodeId, told: u64) -> Result<(), Error> {
    conn.prepare_cached("UPDATE nodes SET offline_told = ?2 WHERE id = ?1")?.execute(params![node, told])?;
    Ok(())
}

/// An edge failing, not yet told.
pub(crate) struct FailingEdge {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) last_error: Option<String>,
    pub(crate) error_since: u64,
}

/// Edges failing since `since_before` or earlier, not yet told.
pub(crate) fn failing_edges(conn: &Connection, since_before: u64) -> Result<Vec<FailingEdge>, Error> {
    let edges = conn
        .prepare_cached(
            "SELECT id, name, last_error, error_since FROM edges
             WHERE failing_told = 0 AND error_since > 0 AND error_since <= ?1",
        )?
        .query_map([since_before], |row| {
            Ok(FailingEdge { id: row.get(0)?, name: row.get(1)?, last_error: row.get(2)?, error_since: row.get(3)? })
        })?
        .collect::<Result<_, _>>()?;
    Ok(edges)
}

/// Notes that an edge was told failing at `now`.
pub(crate) fn set_failing_told(conn: &Connection, edge: i64, now: u64) -> Result<(), Error> {
    conn.prepare_cached("UPDATE edges SET failing_told = ?2 WHERE id = ?1")?.execute(params![edge, now])?;
    Ok(())
}
