//! `hearth-control keys`: showing the data directory's keys, and rotating the signing,
//! release or root key.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Subcommand;
use hearth_shared::keys::Role;

use crate::app::now;
use crate::{keyring, serve, store};

/// What `keys` does.
#[derive(Subcommand)]
pub(crate) enum KeysCommand {
    /// Show every key's id and public key, after checking the records against the root.
    Show,
    /// Replace the signing, release or root key. The root key (kept offline) certifies the
    /// new key; control, the edge and every node take it without enrolling again, and refuse
    /// the retired key from then on. Works while control runs.
    Rotate {
        /// signing, release or root.
        #[arg(long)]
        role: Role,
        /// The current root's secret key file.
        #[arg(long)]
        root_key: PathBuf,
        /// Rotating the root: where to write the new root's secret key (a new file; keep it
        /// offline). The old and the new root both sign the rotation.
        #[arg(long)]
        new_root_key: Option<PathBuf>,
    },
}

/// Runs a `keys` command on the data directory `dir`.
pub(crate) fn run(dir: &Path, command: KeysCommand) -> Result<()> {
    match command {
        KeysCommand::Rotate { role, root_key, new_root_key } => rotate(dir, role, &root_key, new_root_key),
        KeysCommand::Show => show(dir),
    }
}

/// `keys rotate`: the new keys, certified by the root, and every stream signed again.
fn rotate(dir: &Path, role: Role, root_key: &Path, new_root_key: Option<PathBuf>) -> Result<()> {
    let rotated = keyring::rotate(dir, role, root_key, new_root_key.as_deref(), now())?;
    for r in &rotated {
        out!("{:<8} {}  {}  (key record v{})", r.role, r.key.id(), r.key, r.version);
    }
    // Signs every stream again with the key in force; a running control switches at
    // its next signature.
    let (_, db, signer) = serve::open(dir)?;
    let serial = db.read_blocking(|c| store::get_state(c, "keys_serial"))?;
    drop(signer);
    out!("Rotation {serial} recorded; every stream was signed again.");
    out!("The edge takes the new records with the next push, nodes with their next pull.");
    if let Some(path) = new_root_key {
        out!("Keep {} offline with the recovery key; the old root key is retired.", path.display());
    }
    Ok(())
}

/// `keys show`: every key in force, after checking the records against the root.
fn show(dir: &Path) -> Result<()> {
    let trust = keyring::load_trust(dir, now())?;
    for role in [Role::Root, Role::Signing, Role::Release] {
        let source = match trust.role_version(role).unwrap_or(0) {
            0 => "trust anchor".to_owned(),
            version => format!("key record v{version}"),
        };
        let keys = trust.role(role).map(|keys| keys.keys.as_slice()).unwrap_or_default();
        for key in keys {
            out!("{role:<8} {}  {key}  ({source})", key.id());
        }
    }
    Ok(())
}
