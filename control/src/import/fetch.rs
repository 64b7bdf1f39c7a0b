//! How the readers reach another panel's users: its API, a page at a time, or its database
//! file, checked whole before it is read.

use rusqlite::Connection;

/// Users asked for in one page of a panel's API.
pub(super) const PAGE: usize = 500;
/// The most bytes of one page read.
pub(super) const PAGE_BYTES: usize = 32 << 20;
/// The most pages read (a million users).
pub(super) const PAGES: usize = 2_000;

/// A panel's address (`https://panel.example`, no trailing `/`) checked, and the client its API
/// is read with: answers within a minute, redirects not followed (a token goes nowhere else).
pub(super) fn api_client(base: &str) -> anyhow::Result<(&str, reqwest::Client)> {
    use anyhow::Context as _;
    let base = base.trim().trim_end_matches('/');
    anyhow::ensure!(hearth_shared::is_web_address(base), "the panel's address must be an http:// or https:// URL");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("an HTTP client")?;
    Ok((base, http))
}

/// A file, refused when it is over `cap` bytes.
pub(super) fn read_capped(path: &std::path::Path, cap: usize) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context as _;
    let len = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?.len();
    anyhow::ensure!(len <= cap as u64, "{} is {len} bytes: over the {} MiB an import reads", path.display(), cap >> 20);
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// Checks that an SQLite database a panel wrote is whole (`PRAGMA quick_check`): a damaged
/// page would make rows vanish or read wrong, and an import must never take a part of the
/// users, or wrong values, as if they were all.
pub(crate) fn intact(conn: &Connection, path: &std::path::Path) -> anyhow::Result<()> {
    let problems: Vec<String> = conn
        .prepare("PRAGMA quick_check(5)")
        .and_then(|mut check| check.query_map([], |row| row.get(0))?.collect())
        .unwrap_or_else(|e| vec![e.to_string()]);
    anyhow::ensure!(
        problems == ["ok"],
        "{} is damaged ({}): nothing is imported. Copy it again from the panel's server (stop the panel first), \
         or repair it with sqlite3's .recover",
        path.display(),
        problems.join("; ")
    );
    Ok(())
}

/// A warning when the SQLite database at `path` is in write-ahead-log mode (its header says
/// so) and its log, `<file>-wal`, is not beside it: the changes since the panel's last
/// checkpoint are in that log, so a copy made while the panel ran may be behind. Asked before
/// the database is opened (opening it makes an empty log).
pub(crate) fn wal_without_log(path: &std::path::Path) -> Option<String> {
    let mut header = [0u8; 20];
    let mut file = std::fs::File::open(path).ok()?;
    std::io::Read::read_exact(&mut file, &mut header).ok()?;
    let wal = header.starts_with(b"SQLite format 3\0") && header[18] == 2 && header[19] == 2;
    let mut log = path.as_os_str().to_owned();
    log.push("-wal");
    (wal && !std::path::Path::new(&log).exists()).then(|| {
        format!(
            "{} is in write-ahead-log mode and its -wal file is not beside it: if the panel was running when it \
             was copied, its latest changes are missing. Copy the -wal file too, or stop the panel and copy again.",
            path.file_name().map_or_else(|| path.display().to_string(), |name| name.to_string_lossy().into_owned())
        )
    })
}
