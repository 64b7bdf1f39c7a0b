//! What the state archive (`crate::archive`) reads to tell whether the state moved on since
//! the last archive: the newest audit entry, and how far the nodes' usage reports have come.

use rusqlite::Connection;

use crate::error::Error;

/// The id of the newest audit entry (0: none), which every audited change moves on.
pub(crate) fn last_audit(conn: &Connection) -> Result<i64, Error> {
    Ok(conn.query_row("SELECT ifnull(max(id), 0) FROM audit", [], |row| row.get(0))?)
}

/// The usage reports taken, summed over every node's sequence (0: none).
pub(crate) fn usage_reports(conn: &Connection) -> Result<i64, Error> {
    Ok(conn.query_row("SELECT ifnull(sum(usage_seq), 0) FROM nodes", [], |row| row.get(0))?)
}
