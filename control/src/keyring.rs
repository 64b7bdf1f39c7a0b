//! Control's keys on disk: made once by `init`, read by everything else.
//!
//! A data directory holds the online signing and release keys with their root-signed key
//! records, and the public halves of the two keys the owner must keep offline: the root key
//! and the recovery key. `init` writes those two secret keys into the directory too, once,
//! and tells the owner to move them away.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use hearth_shared::envelope::{Audience, Draft, Kind};
use hearth_shared::keys::{PublicKey, RecoveryPublic, RecoverySecret, Role, SecretKey};
use hearth_shared::trust::{KeyRecord, RoleKeys, Trust};
use hearth_shared::wire::{self, stream};
use rand_core::OsRng;

/// How long a key record stays valid: rotation replaces it long before.
const RECORD_LIFETIME_SECS: u64 = 10 * 365 * 24 * 3600;

/// The files of a data directory.
pub(crate) struct Paths {
    dir: PathBuf,
}

impl Paths {
    pub(crate) fn new(dir: &Path) -> Paths {
        Paths { dir: dir.to_owned() }
    }
    pub(crate) fn secret(&self, role: Role) -> PathBuf {
        self.dir.join(format!("{role}.key"))
    }
    pub(crate) fn public(&self, role: Role) -> PathBuf {
        self.dir.join(format!("{role}.pub"))
    }
    pub(crate) fn record(&self, role: Role) -> PathBuf {
        self.dir.join(format!("{role}.record"))
    }
    /// The edge's settings: its root key, push token and API prefix, as a TOML file for a
    /// self-hosted edge (`hearth-edge --config`) or to copy into the Worker's secrets.
    pub(crate) fn edge_settings(&self) -> PathBuf {
        self.dir.join("edge.toml")
    }
    /// The master key that encrypts secrets in the database.
    pub(crate) fn master(&self) -> PathBuf {
        self.dir.join("master.key")
    }
    /// The database.
    pub(crate) fn database(&self) -> PathBuf {
        self.dir.join("control.db")
    }
}

/// What `init` made, for the owner to read once.
pub(crate) struct Created {
    pub(crate) root: PublicKey,
    pub(crate) signing: PublicKey,
    pub(crate) release: PublicKey,
    pub(crate) recovery: RecoveryPublic,
}

/// Makes every key of a new data directory. Refuses a directory that already has keys.
pub(crate) fn init(dir: &Path, hosts: &[String], now: u64) -> Result<Created> {
    let paths = Paths::new(dir);
    if paths.public(Role::Root).exists() {
        bail!("{} already holds Hearth keys; refusing to replace them", dir.display());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).with_context(|| format!("creating {}", dir.display()))?;
    let root = SecretKey::generate(Role::Root, &mut OsRng)?;
    let recovery = RecoverySecret::generate(&mut OsRng);
    let mut online = Vec::new();
    for role in [Role::Signing, Role::Release] {
        let key = SecretKey::generate(role, &mut OsRng)?;
        let record = KeyRecord { role, keys: RoleKeys::single(key.public()) };
        let envelope = Draft {
            kind: Kind::KeyRecord,
            stream: stream::keys(role),
            version: 1,
            epoch: 1,
            issued: now,
            expires: now + RECORD_LIFETIME_SECS,
            audience: Audience::Any,
            prev: [0; 32],
        }
        .sign(wire::encode(&record), &[&root]);
        key.save(&paths.secret(role))?;
        write_new(&paths.record(role), &envelope.encode())?;
        write_new(&paths.public(role), format!("{}\n", key.public()).as_bytes())?;
        online.push(key.public());
    }
    root.save(&paths.secret(Role::Root))?;
    recovery.save(&paths.secret(Role::Recovery))?;
    write_new(&paths.public(Role::Recovery), format!("{}\n", recovery.public()).as_bytes())?;
    write_edge_settings(&paths.edge_settings(), &root.public())?;
    crate::secrets::Vault::create(&paths.master())?;
    write_control_settings(dir, hosts)?;
    // Written last: its presence marks a complete data directory.
    write_new(&paths.public(Role::Root), format!("{}\n", root.public()).as_bytes())?;
    Ok(Created { root: root.public(), signing: online[0], release: online[1], recovery: recovery.public() })
}

/// The trust a verifier of this data directory's envelopes holds: the root from `root.pub`,
/// and the signing and release roles from their records, checked against it.
pub(crate) fn load_trust(dir: &Path, now: u64) -> Result<Trust> {
    let paths = Paths::new(dir);
    let root_path = paths.public(Role::Root);
    let root: PublicKey = std::fs::read_to_string(&root_path)
        .with_context(|| format!("reading {} (run `hearth-control init` first)", root_path.display()))?
        .parse()
        .with_context(|| format!("{} is not a public key", root_path.display()))?;
    let mut trust = Trust::new(RoleKeys::single(root));
    for role in [Role::Signing, Role::Release] {
        let path = paths.record(role);
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let record = trust
            .accept_key_record(&bytes, now)
            .with_context(|| format!("{} does not verify against the root key", path.display()))?;
        if record.role != role {
            bail!("{} holds the {} key record, not the {role} one", path.display(), record.role);
        }
    }
    Ok(trust)
}

/// Writes `control.toml` with a random admin prefix, and a self-signed TLS certificate for
/// `hosts` (plus localhost).
fn write_control_settings(dir: &Path, hosts: &[String]) -> Result<()> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    names.extend(hosts.iter().cloned());
    let (cert, key, _) = crate::tls::self_signed(names)?;
    write_new(&dir.join("tls.crt"), cert.as_bytes())?;
    write_secret(&dir.join("tls.key"), key.as_bytes())?;
    write_new(
        &dir.join(crate::config::FILE),
        crate::config::initial_file(&format!("admin-{}", random_hex(12))).as_bytes(),
    )
}

/// A random hex string of `bytes` bytes.
fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand_core::RngCore::fill_bytes(&mut OsRng, &mut buf);
    hex::encode(buf)
}

/// Makes the secrets control and its edge share: a 256-bit push token and a random API path.
fn write_edge_settings(path: &Path, root: &PublicKey) -> Result<()> {
    let text = format!(
        "# Settings of Hearth's edge, made by `hearth-control init`. Secret: keep this file 0600.\n\
         root_key = \"{root}\"\npush_token = \"{}\"\napi_prefix = \"api-{}\"\nsub_prefix = \"s\"\n",
        random_hex(32),
        random_hex(12),
    );
    write_secret(path, text.as_bytes())
}

/// Writes a new file only its owner can read.
fn write_secret(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).with_context(|| format!("creating {}", path.display()))?;
    file.write_all(bytes).and_then(|()| file.sync_all()).with_context(|| format!("writing {}", path.display()))
}

fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(bytes).and_then(|()| file.sync_all()).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_then_load_trust() {
        let dir = tempfile::tempdir().unwrap();
        let created = init(dir.path(), &[], 1_700_000_000).unwrap();
        let trust = load_trust(dir.path(), 1_700_000_100).unwrap();
        assert_eq!(trust.role(Role::Signing).unwrap().keys, vec![created.signing]);
        assert_eq!(trust.role(Role::Release).unwrap().keys, vec![created.release]);
        assert!(init(dir.path(), &[], 1_700_000_000).is_err(), "a second init must not replace keys");

        // A record swapped for another role's is refused, with a clear reason.
        let paths = Paths::new(dir.path());
        std::fs::remove_file(paths.record(Role::Signing)).unwrap();
        std::fs::copy(paths.record(Role::Release), paths.record(Role::Signing)).unwrap();
        let err = load_trust(dir.path(), 1_700_000_100).err().unwrap().to_string();
        assert!(err.contains("holds the release key record, not the signing one"), "{err}");
    }
}
