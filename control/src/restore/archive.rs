//! What the state archive's database says of the streams: each one's version and envelope
//! digest when the archive was made, taken out of the restored database (which keeps no such
//! table) to compare the edge's envelopes with.

use std::path::Path;

use anyhow::{Context as _, Result};
use rusqlite::Connection;

use crate::store;

/// A stream's version and envelope digest in the archive's database (no digest once deleted).
pub(super) type Archived = store::archive::ArchivedStreams;

/// What each stream was at when the archive in `database` was made (taken out of it here:
/// the restored database keeps no such table). An archive from before Hearth kept them has
/// none: `None`.
pub(super) fn archived_streams(database: &Path) -> Result<Option<Archived>> {
    let conn = Connection::open(database).with_context(|| format!("opening {}", database.display()))?;
    Ok(store::archive::take_archived_streams(&conn)?)
}
