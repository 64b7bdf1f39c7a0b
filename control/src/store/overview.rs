//! What the overview, the metrics and the bot's /status show: users by status, nodes online,
//! changes waiting for the edges, and each edge's state.

use rusqlite::Connection;

use super::{edges, nodes, users};
use crate::error::Error;

/// What the overview and the metrics show.
pub(crate) struct Overview {
    /// Users by status.
    pub(crate) users: Vec<(String, u64)>,
    /// Nodes registered.
    pub(crate) nodes: u64,
    /// Enrolled nodes seen within [`nodes::NODE_ONLINE_SECS`].
    pub(crate) online: u64,
    /// Changes the edges have not accepted yet (summed over the edges).
    pub(crate) pending: u64,
    /// Streams an edge refused, set aside (see [`crate::outbox`]), summed over the edges.
    pub(crate) held: u64,
    /// Each edge, with what it lacks and what it set aside.
    pub(crate) edges: Vec<EdgeStatus>,
    /// Credential sets that expire within [`EXPIRING_SOON`]: the sweep signs them again long
    /// before, so any here means signing is failing, and those nodes will stop accepting
    /// everyone when they expire.
    pub(crate) expiring: u64,
    /// Nodes over their monthly traffic cap: `(id, name, when the month ends)`.
    pub(crate) limited: Vec<(u64, String, u64)>,
}

/// A node that is not online, as the overview names it.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct OfflineNode {
    pub(crate) id: u64,
    pub(crate) name: String,
    /// It never enrolled: its enrollment command was never run (or not yet).
    pub(crate) never: bool,
    /// When it last reported (0: never).
    pub(crate) last_seen: u64,
}

/// How near an expiry counts as soon, for the overview's alert.
pub(crate) const EXPIRING_SOON: u64 = 7 * 86_400;

/// Counts for the overview and the metrics, at `now`.
pub(crate) fn overview(conn: &Connection, now: u64) -> Result<Overview, Error> {
    let (nodes, online) = conn.query_row(
        "SELECT count(*), count(*) FILTER (WHERE public_key IS NOT NULL AND last_seen + ?1 > ?2) FROM nodes",
        rusqlite::params![nodes::NODE_ONLINE_SECS, now],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    let mut statuses = Vec::new();
    for edge in edges::list(conn)? {
        let pending = edges::pending(conn, edge.pushed)?;
        let held = conn
            .prepare_cached("SELECT count(*) FROM outbox_held WHERE edge = ?1")?
            .query_row([edge.id], |row| row.get(0))?;
        statuses.push(EdgeStatus { edge, pending, held });
    }
    let pending = statuses.iter().map(|s| s.pending).sum();
    let held = statuses.iter().map(|s| s.held).sum();
    let expiring = conn.query_row(
        // A range on the key, not LIKE: it reads the node sets only, not every user's snapshot.
        "SELECT count(*) FROM streams WHERE name >= 'creds/' AND name < 'creds0'
         AND envelope IS NOT NULL AND expires > 0 AND expires < ?1",
        [now + EXPIRING_SOON],
        |row| row.get(0),
    )?;
    let limited = conn
        .prepare_cached("SELECT id, name, quota_next FROM nodes WHERE limited = 1 ORDER BY name")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<Result<_, _>>()?;
    Ok(Overview { users: users::counts(conn)?, nodes, online, pending, held, edges: statuses, expiring, limited })
}

/// The nodes not online at `now` (the first 20, those never enrolled first), which the
/// panel's overview names.
pub(crate) fn offline_nodes(conn: &Connection, now: u64) -> Result<Vec<OfflineNode>, Error> {
    Ok(conn
        .prepare_cached(
            "SELECT id, name, public_key IS NULL, last_seen FROM nodes
             WHERE public_key IS NULL OR last_seen + ?1 <= ?2 ORDER BY public_key IS NOT NULL, name LIMIT 20",
        )?
        .query_map(rusqlite::params![nodes::NODE_ONLINE_SECS, now], |row| {
            Ok(OfflineNode { id: row.get(0)?, name: row.get(1)?, never: row.get(2)?, last_seen: row.get(3)? })
        })?
        .collect::<Result<_, _>>()?)
}

/// How one edge is doing.
pub(crate) struct EdgeStatus {
    pub(crate) edge: edges::Edge,
    /// Changes it has not accepted yet.
    pub(crate) pending: u64,
    /// Streams it refused, set aside.
    pub(crate) held: u64,
}

/// The streams edges refused and control set aside, oldest first (the first 20).
pub(crate) fn held(conn: &Connection) -> Result<Vec<serde_json::Value>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT h.stream, h.version, h.reason, h.held_at, e.name FROM outbox_held h JOIN edges e ON e.id = h.edge
         ORDER BY h.held_at, h.stream LIMIT 20",
    )?;
    let rows = query.query_map([], |row| {
        Ok(serde_json::json!({
            "stream": row.get::<_, String>(0)?,
            "version": row.get::<_, u64>(1)?,
            "reason": row.get::<_, String>(2)?,
            "since": row.get::<_, u64>(3)?,
            "edge": row.get::<_, String>(4)?,
        }))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
