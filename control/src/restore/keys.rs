//! The keys of a restore: what the owner kept (the edge settings, which name the root key and
//! the push token, and the recovery key), the key records the edge holds (verified against the
//! root key, and written into the data directory as the trust took them), and control's online
//! keys certified anew where there are none or the archive's were retired.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use hearth_shared::envelope::{Envelope, Kind};
use hearth_shared::keys::{PublicKey, RecoverySecret, Role};
use hearth_shared::trust::{KeyRecord, RoleKeys, Trust};
use hearth_shared::wire;

use crate::config::EdgeSettings as EdgeToml;
use crate::keyring::{self, Paths};

/// What the owner kept for a restore, read and checked.
pub(super) struct Owner {
    /// The `edge.toml`, as written (a keyring made anew keeps it).
    pub(super) edge_text: String,
    /// The `edge.toml`, read: root key, push token, API prefix.
    pub(super) edge: EdgeToml,
    /// The root key the edge settings name: what the edge's key records must verify against.
    pub(super) anchor: PublicKey,
    pub(super) recovery: RecoverySecret,
    /// The edge's base URL, checked.
    pub(super) edge_url: String,
}

impl Owner {
    /// Reads the edge settings at `edge_settings` and the recovery key at `recovery_key`, and
    /// checks the edge's URL.
    pub(super) fn read(edge_settings: &Path, recovery_key: &Path, edge_url: &str) -> Result<Owner> {
        let edge_text =
            std::fs::read_to_string(edge_settings).with_context(|| format!("reading {}", edge_settings.display()))?;
        let edge: EdgeToml =
            toml::from_str(&edge_text).with_context(|| format!("{} is not valid", edge_settings.display()))?;
        let anchor: PublicKey = edge.root_key.parse().context("root_key in the edge settings is not a public key")?;
        let recovery = crate::keyring::load_recovery(recovery_key).context("loading the recovery key")?;
        let edge_url = crate::config::check_url("the edge's URL", edge_url)?;
        Ok(Owner { edge_text, edge, anchor, recovery, edge_url })
    }
}

/// The key records the edge holds (`chain`), verified against the owner's root key. An edge
/// that holds none was never pushed to: there is nothing to restore.
pub(super) fn trusted(anchor: PublicKey, chain: &[Vec<u8>], now: u64) -> Result<Trust> {
    let mut trust = Trust::new(RoleKeys::single(anchor));
    trust.accept_chain(chain, now).context("the key records the edge holds do not verify against the root key")?;
    if trust.role(Role::Signing).is_none() {
        bail!("the edge holds no key records: control never pushed to it, so there is nothing to restore");
    }
    Ok(trust)
}

/// Writes the key records the edge holds, as the trust took them (never as the edge sent
/// them), into the data directory, by role (the root rotations in order, the latest signing
/// and release records).
fn write_chain(dir: &Path, trust: &Trust) -> Result<()> {
    let paths = Paths::new(dir);
    let mut roots = String::new();
    for record in trust.chain() {
        let envelope = Envelope::decode(record, Kind::KeyRecord.max_len()).context("a malformed key record")?;
        let body: KeyRecord = wire::decode(&envelope.body, "key record").context("a malformed key record")?;
        match body.role {
            Role::Root => {
                roots.push_str(&hex::encode(record));
                roots.push('\n');
            }
            role => keyring::replace(&paths.record(role), record)?,
        }
    }
    if !roots.is_empty() {
        keyring::replace(&paths.root_chain(), roots.as_bytes())?;
    }
    Ok(())
}

/// From snapshots: a keyring made anew (the owner's root and recovery keys and edge settings,
/// the edge's key records), with new signing and release keys certified by the root key at
/// `root_key`.
pub(super) fn certify_anew(
    dir: &Path,
    owner: &Owner,
    trust: &Trust,
    root_key: &Path,
    now: u64,
    notes: &mut Vec<String>,
) -> Result<()> {
    keyring::write_fresh(dir, &owner.anchor, &owner.recovery.public(), &owner.edge_text)?;
    write_chain(dir, trust)?;
    for role in [Role::Signing, Role::Release] {
        keyring::rotate(dir, role, root_key, None, now).with_context(|| format!("certifying a new {role} key"))?;
    }
    notes.push("new signing and release keys were certified by the root key".into());
    Ok(())
}

/// From an archive: the edge's key records over the archive's (rotations after it was made),
/// a new signing key certified by the root key at `root_key` when the archive's was retired
/// since, and a note when its release key was.
pub(super) fn bring_archived_up_to_date(
    dir: &Path,
    trust: &Trust,
    root_key: Option<&Path>,
    now: u64,
    notes: &mut Vec<String>,
) -> Result<()> {
    let paths = Paths::new(dir);
    // Rotations after the archive was made: the edge's records are the newer ones.
    write_chain(dir, trust)?;
    let certified = keyring::load_online(dir, 0, now).is_ok();
    if !certified {
        let root_key = root_key.context(
            "the archive's signing key was retired by a later rotation; add --root-key <file> to certify a new one",
        )?;
        keyring::rotate(dir, Role::Signing, root_key, None, now)?;
        notes.push("the archive's signing key was retired since: a new one was certified".into());
    }
    let release = keyring::load_trust(dir, now)?;
    let release_key = keyring::load_key(&paths.secret(Role::Release), Role::Release);
    if release_key.is_ok_and(|key| !release.role(Role::Release).is_some_and(|r| r.keys.contains(&key.public()))) {
        notes.push(
            "the release key in the archive was retired since; rotate it with `keys rotate --role release`".into(),
        );
    }
    Ok(())
}
