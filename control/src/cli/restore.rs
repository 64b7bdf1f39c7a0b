//! `hearth-control restore`: control rebuilt in a new data directory from what the edge holds.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::restore;

/// Rebuilds control in the data directory `dir` from the edge at `from_edge` (with the kept
/// `edge_settings`, the `recovery_key` and, from snapshots or past a key rotation, the
/// `root_key`), and says what it did.
pub(crate) fn run(
    dir: &Path,
    from_edge: String,
    edge_settings: PathBuf,
    recovery_key: PathBuf,
    from_snapshots: bool,
    root_key: Option<PathBuf>,
) -> Result<()> {
    let options = restore::Options { edge_url: from_edge, edge_settings, recovery_key, root_key, from_snapshots };
    let report = restore::run(dir, &options)?;
    restore::print(&report, dir);
    Ok(())
}
