//! Control's keys on disk: made once by `init`, rotated by `keys rotate`, read by everything
//! else.
//!
//! A data directory holds the online signing and release keys with their root-signed key
//! records, and the public halves of the two keys the owner must keep offline: the root key
//! and the recovery key. `init` writes those two secret keys into the directory too, once,
//! and tells the owner to move them away.
//!
//! `root.pub` is the trust anchor and never changes: a root rotation appends a record signed
//! by the old and the new root to `root.chain`, and every verifier (control, the edge, nodes
//! enrolled before or after) walks the chain from the anchor. The chain control hands out is
//! those root records in order, then the current signing and release records.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

pub(crate) use crate::private_file::{read_private, write_private};
use hearth_shared::envelope::{Audience, Draft, Kind};
use hearth_shared::keys::{MAX_KEY_FILE, PublicKey, RecoveryPublic, RecoverySecret, Role, SecretKey};
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
    /// The root rotations, one hex-encoded record a line, oldest first (absent before the
    /// first rotation).
    pub(crate) fn root_chain(&self) -> PathBuf {
        self.dir.join("root.chain")
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
        let record = record_envelope(role, RoleKeys::single(key.public()), 1, now, &[&root]);
        save_key(&paths.secret(role), &key)?;
        write_new(&paths.record(role), &record)?;
        write_new(&paths.public(role), format!("{}\n", key.public()).as_bytes())?;
        online.push(key.public());
    }
    save_key(&paths.secret(Role::Root), &root)?;
    write_private(&paths.secret(Role::Recovery), recovery.to_file_text().as_bytes())?;
    write_new(&paths.public(Role::Recovery), format!("{}\n", recovery.public()).as_bytes())?;
    write_edge_settings(&paths.edge_settings(), &root.public())?;
    crate::secrets::Vault::create(&paths.master())?;
    write_control_settings(dir, hosts)?;
    // Written last: its presence marks a complete data directory.
    write_new(&paths.public(Role::Root), format!("{}\n", root.public()).as_bytes())?;
    Ok(Created { root: root.public(), signing: online[0], release: online[1], recovery: recovery.public() })
}

/// The key records control hands out, in the order a verifier takes them: the root
/// rotations, then the signing and release records.
pub(crate) fn chain(dir: &Path) -> Result<Vec<Vec<u8>>> {
    let paths = Paths::new(dir);
    let mut chain = Vec::new();
    match std::fs::read_to_string(paths.root_chain()) {
        Ok(text) => {
            for line in text.lines().filter(|line| !line.trim().is_empty()) {
                let record = hex::decode(line.trim())
                    .with_context(|| format!("{} holds a line that is not hex", paths.root_chain().display()))?;
                chain.push(record);
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", paths.root_chain().display())),
    }
    for role in [Role::Signing, Role::Release] {
        let path = paths.record(role);
        chain.push(std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?);
    }
    Ok(chain)
}

/// The root key `init` made (the anchor every verifier starts from).
pub(crate) fn anchor(dir: &Path) -> Result<PublicKey> {
    let root_path = Paths::new(dir).public(Role::Root);
    std::fs::read_to_string(&root_path)
        .with_context(|| format!("reading {} (run `hearth-control init` first)", root_path.display()))?
        .parse()
        .with_context(|| format!("{} is not a public key", root_path.display()))
}

/// The trust a verifier of this data directory's envelopes holds: the anchor from `root.pub`,
/// the root rotations, and the signing and release roles from their records, all checked.
pub(crate) fn load_trust(dir: &Path, now: u64) -> Result<Trust> {
    let paths = Paths::new(dir);
    let mut trust = Trust::new(RoleKeys::single(anchor(dir)?));
    let chain = chain(dir)?;
    let roots = chain.len() - 2;
    for (at, bytes) in chain.iter().enumerate() {
        let (path, expected) = match at.checked_sub(roots) {
            None => (paths.root_chain(), Role::Root),
            Some(0) => (paths.record(Role::Signing), Role::Signing),
            Some(_) => (paths.record(Role::Release), Role::Release),
        };
        let record = trust
            .accept_key_record(bytes, now)
            .with_context(|| format!("{} does not verify against the root key", path.display()))?;
        if record.role != expected {
            bail!("{} holds the {} key record, not the {expected} one", path.display(), record.role);
        }
    }
    Ok(trust)
}

/// The online signing key with the chain that certifies it.
pub(crate) struct Online {
    /// The signing key.
    pub(crate) key: SecretKey,
    /// The key records to hand out ([`chain`]).
    pub(crate) chain: Vec<Vec<u8>>,
    /// Which rotation this is (the database's `keys_serial` when it was loaded).
    pub(crate) serial: i64,
}

/// Loads the signing key and its chain, checked against the root, and refuses a key that the
/// signing record does not certify (a rotation interrupted half-way).
pub(crate) fn load_online(dir: &Path, serial: i64, now: u64) -> Result<Online> {
    let paths = Paths::new(dir);
    let trust = load_trust(dir, now)?;
    let key = load_key(&paths.secret(Role::Signing), Role::Signing)?;
    let certified = trust.role(Role::Signing).is_some_and(|keys| keys.keys.contains(&key.public()));
    if !certified {
        bail!(
            "{} is not the key {} certifies; finish the rotation with `hearth-control keys rotate --role signing`",
            paths.secret(Role::Signing).display(),
            paths.record(Role::Signing).display()
        );
    }
    Ok(Online { key, chain: chain(dir)?, serial })
}

/// What a rotation made.
pub(crate) struct Rotated {
    pub(crate) role: Role,
    pub(crate) key: PublicKey,
    pub(crate) version: u64,
}

fn record_envelope(role: Role, keys: RoleKeys, version: u64, now: u64, signers: &[&SecretKey]) -> Vec<u8> {
    Draft {
        kind: Kind::KeyRecord,
        stream: stream::keys(role),
        version,
        epoch: 1,
        issued: now,
        expires: now + RECORD_LIFETIME_SECS,
        audience: Audience::Any,
        prev: [0; 32],
    }
    .sign(wire::encode(&KeyRecord { role, keys }), signers)
    .encode()
}

/// Rotates `role`'s key: a new key, and a record at the next version signed by the root (for
/// the root itself, by the old and the new root; the signing and release records are then
/// signed again by the new root). `new_root` is where the new root's secret key is written.
pub(crate) fn rotate(
    dir: &Path,
    role: Role,
    root_key: &Path,
    new_root: Option<&Path>,
    now: u64,
) -> Result<Vec<Rotated>> {
    let paths = Paths::new(dir);
    let trust = load_trust(dir, now)?;
    let root = load_key(root_key, Role::Root).context("loading the root key")?;
    let roots = trust.role(Role::Root).map(|keys| keys.keys.clone()).unwrap_or_default();
    if !roots.contains(&root.public()) {
        bail!("{} is not the current root key (root key id {} is)", root_key.display(), roots[0].id());
    }
    let next = |role: Role| trust.role_version(role).unwrap_or(0) + 1;
    match role {
        Role::Signing | Role::Release => {
            if new_root.is_some() {
                bail!("--new-root-key is for rotating the root");
            }
            let key = SecretKey::generate(role, &mut OsRng)?;
            let version = next(role);
            let record = record_envelope(role, RoleKeys::single(key.public()), version, now, &[&root]);
            // The key first: a key without its record is refused at start with how to finish.
            replace_secret(&paths.secret(role), &key)?;
            replace(&paths.public(role), format!("{}\n", key.public()).as_bytes())?;
            replace(&paths.record(role), &record)?;
            Ok(vec![Rotated { role, key: key.public(), version }])
        }
        Role::Root => {
            let out =
                new_root.context("rotating the root needs --new-root-key <file> for the new root's secret key")?;
            let fresh = SecretKey::generate(Role::Root, &mut OsRng)?;
            save_key(out, &fresh).context("writing the new root key")?;
            let version = next(Role::Root);
            let root_record =
                record_envelope(Role::Root, RoleKeys::single(fresh.public()), version, now, &[&root, &fresh]);
            let mut rotated = vec![Rotated { role: Role::Root, key: fresh.public(), version }];
            let mut lines = std::fs::read_to_string(paths.root_chain()).unwrap_or_default();
            lines.push_str(&hex::encode(&root_record));
            lines.push('\n');
            // The online keys, certified again by the new root.
            let mut records = Vec::new();
            for role in [Role::Signing, Role::Release] {
                let keys = trust.role(role).context("a role without keys")?.clone();
                let key = keys.keys[0];
                let version = next(role);
                records.push((role, record_envelope(role, keys, version, now, &[&fresh])));
                rotated.push(Rotated { role, key, version });
            }
            replace(&paths.root_chain(), lines.as_bytes())?;
            for (role, record) in records {
                replace(&paths.record(role), &record)?;
            }
            Ok(rotated)
        }
        Role::Node | Role::Recovery => bail!("only the signing, release and root keys rotate"),
    }
}

/// Replaces a file atomically (a new file beside it, synced, then renamed over it).
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
    let staged = path.with_extension("staged");
    let _ = std::fs::remove_file(&staged);
    write_new(&staged, bytes)?;
    std::fs::rename(&staged, path).with_context(|| format!("replacing {}", path.display()))
}

fn replace_secret(path: &Path, key: &SecretKey) -> Result<()> {
    let staged = path.with_extension("staged");
    let _ = std::fs::remove_file(&staged);
    save_key(&staged, key)?;
    std::fs::rename(&staged, path).with_context(|| format!("replacing {}", path.display()))
}

/// A new data directory for a restore from snapshots: the anchor and recovery public keys,
/// the edge settings the owner kept, a new master key, TLS certificate and `control.toml`
/// (the key records and online keys come next, from the edge and the root key).
pub(crate) fn write_fresh(dir: &Path, root: &PublicKey, recovery: &RecoveryPublic, edge_toml: &str) -> Result<()> {
    let paths = Paths::new(dir);
    write_private(&paths.edge_settings(), edge_toml.as_bytes())?;
    write_new(&paths.public(Role::Recovery), format!("{recovery}\n").as_bytes())?;
    crate::secrets::Vault::create(&paths.master())?;
    write_control_settings(dir, &[])?;
    write_new(&paths.public(Role::Root), format!("{root}\n").as_bytes())
}

/// Writes `control.toml` with a random admin prefix, and a self-signed TLS certificate for
/// `hosts` (plus localhost).
fn write_control_settings(dir: &Path, hosts: &[String]) -> Result<()> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    names.extend(hosts.iter().cloned());
    let (cert, key, _) = crate::tls::self_signed(names)?;
    write_new(&dir.join("tls.crt"), cert.as_bytes())?;
    write_private(&dir.join("tls.key"), key.as_bytes())?;
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
    write_private(path, text.as_bytes())
}

/// Writes a secret key to a new file with 0600 permissions; refuses to overwrite a file.
pub(crate) fn save_key(path: &Path, key: &SecretKey) -> Result<()> {
    write_private(path, key.to_file_text().as_bytes())
}

/// Loads a secret key file made for `role`.
pub(crate) fn load_key(path: &Path, role: Role) -> Result<SecretKey> {
    let text = read_private(path, MAX_KEY_FILE)?;
    SecretKey::from_file_text(&text, role).with_context(|| format!("key file {}", path.display()))
}

/// Loads the owner's recovery key file.
pub(crate) fn load_recovery(path: &Path) -> Result<RecoverySecret> {
    let text = read_private(path, MAX_KEY_FILE)?;
    RecoverySecret::from_file_text(&text).with_context(|| format!("key file {}", path.display()))
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
    fn key_files_are_private_never_overwritten_and_named_in_errors() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("release.key");
        let key = SecretKey::generate(Role::Release, &mut OsRng).unwrap();
        save_key(&path, &key).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(load_key(&path, Role::Release).unwrap().public(), key.public());
        let err = save_key(&path, &key).unwrap_err().to_string();
        assert!(err.contains("already exists; refusing to overwrite it"), "{err}");

        let err = format!("{:#}", load_key(&path, Role::Signing).unwrap_err());
        assert!(err.contains("release.key") && err.contains("holds a release key, but a signing key"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = format!("{:#}", load_key(&path, Role::Release).unwrap_err());
        assert!(err.contains("readable by others"), "{err}");

        let big = dir.path().join("big.key");
        write_private(&big, &[b'x'; MAX_KEY_FILE + 1]).unwrap();
        assert!(format!("{:#}", load_key(&big, Role::Release).unwrap_err()).contains("more than a Hearth key file"));
        assert!(load_recovery(&dir.path().join("missing.key")).is_err());
    }

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

    #[test]
    fn rotations_chain_from_the_anchor() {
        let now = 1_700_000_000;
        let dir = tempfile::tempdir().unwrap();
        let created = init(dir.path(), &[], now).unwrap();
        let paths = Paths::new(dir.path());
        let root = paths.secret(Role::Root);

        // The signing key: a new key at version 2, certified by the root.
        let rotated = rotate(dir.path(), Role::Signing, &root, None, now).unwrap();
        assert_eq!((rotated[0].role, rotated[0].version), (Role::Signing, 2));
        let online = load_online(dir.path(), 0, now).unwrap();
        assert_eq!(online.key.public(), rotated[0].key);
        assert_ne!(online.key.public(), created.signing);
        assert_eq!(online.chain.len(), 2, "no root rotation yet: the signing and release records");

        // Only the root may rotate; the other keys are refused with a clear reason.
        let err = rotate(dir.path(), Role::Release, &paths.secret(Role::Signing), None, now).err().unwrap();
        assert!(format!("{err:#}").contains("holds a signing key, but a root key is needed"), "{err:#}");
        assert!(rotate(dir.path(), Role::Root, &root, None, now).is_err(), "a root rotation needs the new root's file");

        // The root: the old and the new root sign; the online records are signed again by it.
        let new_root = dir.path().join("new-root.key");
        let rotated = rotate(dir.path(), Role::Root, &root, Some(&new_root), now).unwrap();
        assert_eq!(
            rotated.iter().map(|r| (r.role, r.version)).collect::<Vec<_>>(),
            [(Role::Root, 1), (Role::Signing, 3), (Role::Release, 2)]
        );
        let trust = load_trust(dir.path(), now).unwrap();
        let new_root_key = load_key(&new_root, Role::Root).unwrap();
        assert_eq!(trust.role(Role::Root).unwrap().keys, vec![new_root_key.public()]);
        // A verifier that knows only the anchor walks the whole chain.
        let mut fresh = Trust::new(RoleKeys::single(created.root));
        assert!(fresh.accept_chain(&chain(dir.path()).unwrap(), now).unwrap());
        assert_eq!(fresh, trust);
        // The retired root no longer rotates anything.
        let err = rotate(dir.path(), Role::Signing, &root, None, now).err().unwrap();
        assert!(format!("{err:#}").contains("is not the current root key"), "{err:#}");
        rotate(dir.path(), Role::Release, &new_root, None, now).unwrap();
        assert_eq!(load_trust(dir.path(), now).unwrap().role_version(Role::Release), Some(3));

        // A signing key its record does not certify (a rotation cut short) is refused at start.
        std::fs::remove_file(paths.secret(Role::Signing)).unwrap();
        save_key(&paths.secret(Role::Signing), &SecretKey::generate(Role::Signing, &mut OsRng).unwrap()).unwrap();
        let err = load_online(dir.path(), 0, now).err().unwrap().to_string();
        assert!(err.contains("is not the key"), "{err}");
    }
}
