//! Pages of the manual that the code makes (the settings tables, the commands, the admin API's
//! operations): the tests that make them compare them with the ones in the repository, and
//! write them instead under `HEARTH_BLESS`. Only the tests use this (the `made` feature).

use std::path::PathBuf;

/// Checks that `relative` (a path from the repository's root, `docs/...`) holds `made`, after
/// writing it there when `HEARTH_BLESS` is set. Panics naming the first line that differs and
/// `bless` (the command that writes the page again).
pub fn check(relative: &str, made: &str, bless: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(relative);
    if std::env::var_os("HEARTH_BLESS").is_some() {
        std::fs::write(&path, made).unwrap_or_else(|e| panic!("writing {relative}: {e}"));
    }
    let shown = std::fs::read_to_string(&path).unwrap_or_default();
    if shown != made {
        let line = shown.lines().zip(made.lines()).position(|(a, b)| a != b);
        let line = line.unwrap_or_else(|| shown.lines().count().min(made.lines().count()));
        panic!(
            "{relative} is not what the code makes (line {}: {:?} in the file, {:?} made); after a \
             deliberate change: {bless}",
            line + 1,
            shown.lines().nth(line),
            made.lines().nth(line)
        );
    }
}
