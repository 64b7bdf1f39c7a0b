//! `hearth-control init`: a new data directory (keys, master key, TLS certificate,
//! `control.toml`), and what to do with the keys to keep offline.

use std::path::Path;

use anyhow::Result;
use hearth_shared::keys::Role;

use crate::app::now;
use crate::{config, keyring, tls};

/// Makes the data directory `dir`, its certificate valid for `hosts` too, and says what it made.
pub(crate) fn run(dir: &Path, hosts: &[String]) -> Result<()> {
    let created = keyring::init(dir, hosts, now())?;
    let paths = keyring::Paths::new(dir);
    out!("Initialised {}", dir.display());
    out!("  root key      {} ({})", created.root.id(), created.root);
    out!("  signing key   {} (certified by root)", created.signing.id());
    out!("  release key   {} (certified by root)", created.release.id());
    out!("  recovery key  {} ({})", created.recovery.id(), created.recovery);
    let pin = tls::pin_of(&dir.join("tls.crt"))?;
    out!("  TLS pin       sha256/{}", hex::encode(pin));
    out!();
    out!("Keep these two files offline, then delete them from this machine:");
    out!("  {}  (certifies and rotates every other key)", paths.secret(Role::Root).display());
    out!("  {}  (opens the recovery archive and snapshots)", paths.secret(Role::Recovery).display());
    out!();
    out!("Settings: {} (then `hearth-control serve`)", dir.join(config::FILE).display());
    Ok(())
}
