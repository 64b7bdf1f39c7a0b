//! What the state archive's database says of the streams: each one's version and envelope
//! digest when the archive was made, taken out of the restored database (which keeps no such
//! table) to compare the edge's envelopes with.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, Result};
use hearth_shared::Digest;
use rusqlite::Connection;

/// A stream's version and envelope digest in the archive's database (no digest once deleted).
pub(super) type Archived = BTreeMap<String, (u64, Option<Digest>)>;

/// What each stream was at when the archive in `database` was made (taken out of it here:
/// the restored database keeps no such table). An archive from before Hearth kept them has
/// none: `None`.
pub(super) fn archived_streams(database: &Path) -> Result<Option<Archived>> {
    let conn = Connection::open(database).with_context(|| format!("opening {}", database.display()))?;
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
