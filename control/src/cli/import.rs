//! `hearth-control import` and `export`: users taken over from another panel (or from a
//! Hearth users document), and every user written as one.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use crate::app::now;
use crate::import::{self, Source};
use crate::{keyring, serve};

/// Imports the users of `source`, read from `file`, `url` (with the token in `token_file`) and
/// the old `links`, into the data directory `dir` (with `dry_run`, only says what it would
/// do), and prints the report.
pub(crate) fn run(
    dir: &Path,
    source: Source,
    file: Option<PathBuf>,
    url: Option<String>,
    token_file: Option<PathBuf>,
    links: Option<PathBuf>,
    dry_run: bool,
) -> Result<()> {
    let from = import::From { file, url, token_file, links };
    let incoming = import::read(source, &from)?;
    let (_, db, signer) = serve::open(dir)?;
    let apply = move |tx: &rusqlite::Transaction<'_>| import::apply(tx, &signer, "cli", incoming, dry_run, now());
    let report = if dry_run { db.dry_run_blocking(apply)? } else { db.write_blocking(apply)? };
    print!("{}", report.text());
    Ok(())
}

/// Writes every user of the data directory `dir` as a Hearth users document to `out` (`-`:
/// standard output).
pub(crate) fn export(dir: &Path, out: &Path) -> Result<()> {
    let (_, db, signer) = serve::open(dir)?;
    let document = db.read_blocking(move |c| import::json::export(c, &signer))?;
    let mut text = serde_json::to_string_pretty(&document).context("writing the document")?;
    text.push('\n');
    if out.as_os_str() == "-" {
        print!("{text}");
    } else {
        keyring::write_private(out, text.as_bytes())?;
        eprintln!("{} users written to {} (as secret as their links)", document.users.len(), out.display());
    }
    Ok(())
}
