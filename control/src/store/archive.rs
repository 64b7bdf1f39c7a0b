//! What the state archive (`crate::archive`) reads to tell whether the state moved on since
//! the last archive: the newest audit entry, and how far the nodes' usage reports have come.
//! And the copy of the database it holds: made whole, then trimmed of the envelopes (the edge
//! holds them) but for what each stream was at, which a restore (`crate::restore`) takes back
//! out of it to compare the edge's envelopes with.
//!
//! The copy's functions give SQLite's own errors: their callers report them as they are.

use std::collections::BTreeMap;

use hearth_shared::Digest;
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

/// Copies the whole database into a new file at `path`.
pub(crate) fn copy_into(conn: &Connection, path: &str) -> rusqlite::Result<()> {
    conn.execute("VACUUM INTO ?1", [path])?;
    Ok(())
}

/// Trims the copy `staged` for the archive: the envelopes stay out (the edge holds them), but
/// not what each stream was at (`archived_streams`: a restore takes an envelope from the edge
/// only at that version or above); sessions stay out too.
pub(crate) fn trim_copy(staged: &Connection) -> rusqlite::Result<()> {
    staged.execute_batch(
        "DROP TABLE IF EXISTS archived_streams;
             CREATE TABLE archived_streams (name TEXT PRIMARY KEY, version INTEGER NOT NULL, digest BLOB) STRICT;
             INSERT INTO archived_streams SELECT name, version, iif(envelope IS NULL, NULL, digest) FROM streams;
             DELETE FROM streams; DELETE FROM sessions; PRAGMA journal_mode = DELETE; VACUUM;",
    )
}

/// Each stream's version and envelope digest (none once deleted) when an archive was made, by
/// name.
pub(crate) type ArchivedStreams = BTreeMap<String, (u64, Option<Digest>)>;

/// What each stream was at when the archive whose database `conn` is was made, taken out of it
/// (the table is dropped: the restored database keeps no such table). An archive from before
/// Hearth kept them has none: `None`.
pub(crate) fn take_archived_streams(conn: &Connection) -> rusqlite::Result<Option<ArchivedStreams>> {
    let kept: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'archived_streams')",
        [],
        |row| row.get(0),
    )?;
    if !kept {
        return Ok(None);
    }
    let archived = conn
        .prepare("SELECT name, version, digest FROM archived_streams")?
        .query_map([], |row| Ok((row.get::<_, String>(0)?, (row.get(1)?, row.get(2)?))))?
        .collect::<Result<_, _>>()?;
    conn.execute_batch("DROP TABLE archived_streams")?;
    Ok(Some(archived))
}
