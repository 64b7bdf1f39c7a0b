//! Signed node releases: signing them (`hearth-control release sign`, with the release key,
//! which may live offline), keeping them in the data directory (`releases/<version>/`), and
//! rolling them out: the canary node first, then every other node one at a time, stopping at
//! the first that refuses the release, rolls it back, or does not run it in time.
//!
//! Nodes learn their release in the answer to their pull ([`hearth_shared::nodeauth::RELEASE_HEADER`]),
//! from control or, through the signed [`Rollout`] stream, from the edge; they fetch the
//! manifest and their binary from either, and say what they run (or why they refused) in
//! their next pulls.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use hearth_shared::envelope::{Audience, Draft, Envelope, Kind};
use hearth_shared::keys::SecretKey;
use hearth_shared::release::{ReleaseFile, ReleaseManifest};
use hearth_shared::trust::{Expect, verify};
use hearth_shared::wire::{self, NodeId, stream};
use rusqlite::Connection;
use serde::Serialize;

use crate::error::Error;

use crate::publish::Signer;
use crate::store::audit;
use crate::store::releases::{self as release_store, NodeRelease, Rolling};
// Read as they are kept: a release's manifest and what a node is told to run.
pub(crate) use crate::store::releases::{manifest, target};

/// A binary to sign, with the os and architecture it is for.
pub(crate) struct Binary {
    pub(crate) os: String,
    pub(crate) arch: String,
    pub(crate) bytes: Vec<u8>,
}

/// The os and architecture of an ELF executable.
fn elf_target(bytes: &[u8]) -> Option<&'static str> {
    if bytes.len() < 20 || &bytes[..4] != b"\x7fELF" {
        return None;
    }
    let machine = if bytes[5] == 2 {
        u16::from_be_bytes([bytes[18], bytes[19]])
    } else {
        u16::from_le_bytes([bytes[18], bytes[19]])
    };
    Some(match machine {
        62 => "x86_64",
        183 => "aarch64",
        40 => "arm",
        243 => "riscv64",
        _ => return None,
    })
}

/// Reads a binary named as `path` (an ELF executable: its architecture is read from it) or
/// `os-arch=path`.
pub(crate) fn read_binary(spec: &str) -> Result<Binary> {
    let (target, path) = match spec.split_once('=') {
        Some((target, path)) => (Some(target), path),
        None => (None, spec),
    };
    let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
    let (os, arch) = match target {
        Some(target) => {
            let (os, arch) = target.split_once('-').with_context(|| format!("{target:?} is not like linux-x86_64"))?;
            (os.to_owned(), arch.to_owned())
        }
        None => {
            let arch = elf_target(&bytes)
                .with_context(|| format!("cannot tell what {path} runs on; name it as linux-x86_64={path}"))?;
            ("linux".to_owned(), arch.to_owned())
        }
    };
    Ok(Binary { os, arch, bytes })
}

/// What to tell whoever signs `binaries` when, bundled, they are over what an edge takes:
/// nodes that reach only an edge could never get the release.
pub(crate) fn too_large_for_edges(binaries: &[Binary]) -> Option<String> {
    // The manifest and the bundle's framing, with room to spare.
    let total = binaries.iter().map(|b| b.bytes.len()).sum::<usize>() + 64 * 1024;
    (total > hearth_shared::release::MAX_BUNDLE_BYTES).then(|| {
        format!(
            "these binaries weigh {} MiB, over the {} MiB an edge takes: nodes that reach only an edge \
             cannot get this release (ship release builds, or strip their debug info: strip --strip-debug)",
            total >> 20,
            hearth_shared::release::MAX_BUNDLE_BYTES >> 20
        )
    })
}

/// Parses a lifetime like `30d`, `12h`, `90m` or `3600` (seconds).
pub(crate) fn parse_lifetime(text: &str) -> Result<u64> {
    let (number, unit) = match text.char_indices().last() {
        Some((at, 'd')) => (&text[..at], 86_400),
        Some((at, 'h')) => (&text[..at], 3_600),
        Some((at, 'm')) => (&text[..at], 60),
        Some((at, 's')) => (&text[..at], 1),
        _ => (text, 1),
    };
    let number: u64 = number.parse().with_context(|| format!("{text:?} is not a lifetime like 30d or 12h"))?;
    number.checked_mul(unit).filter(|secs| *secs > 0).with_context(|| format!("{text:?} is not a usable lifetime"))
}

/// Signs a release manifest over `binaries` with the release key. Its envelope's version
/// orders releases for nodes and must grow: the signing time, or `sequence` when that is
/// later (one past the newest release a control holds, for two signed within one second).
pub(crate) fn sign(
    key: &SecretKey,
    version: &str,
    lifetime: u64,
    binaries: &[Binary],
    now: u64,
    sequence: u64,
) -> Result<Vec<u8>> {
    let manifest = ReleaseManifest {
        version: version.to_owned(),
        built: now,
        files: binaries
            .iter()
            .map(|b| ReleaseFile {
                os: b.os.clone(),
                arch: b.arch.clone(),
                len: b.bytes.len() as u64,
                sha256: hearth_shared::sha256(&b.bytes),
            })
            .collect(),
    };
    let body = wire::encode(&manifest);
    ReleaseManifest::decode(&body).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Draft {
        kind: Kind::Release,
        stream: stream::RELEASE.to_owned(),
        version: sequence.max(now),
        epoch: 1,
        issued: now,
        expires: now + lifetime,
        audience: Audience::Any,
        prev: [0; 32],
    }
    .sign(body, &[key])
    .encode())
}

/// A node binary shipped with control, found by [`shipped`].
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Shipped {
    pub(crate) os: String,
    pub(crate) arch: String,
    pub(crate) len: u64,
    #[serde(skip)]
    path: PathBuf,
    /// Named for its architecture (`hearth-node-linux-<arch>`), which wins over a plain
    /// `hearth-node` of the same architecture.
    #[serde(skip)]
    named: bool,
}

/// The most a shipped binary may weigh (a debug build of the node is under 100 MiB).
const SHIPPED_MAX: u64 = 256 << 20;

/// How long a release signed from the shipped binaries is accepted: a quarter of a year,
/// so that new nodes keep their one-line install for months after one click.
pub(crate) const SHIPPED_LIFETIME: u64 = 90 * 86_400;

/// The node binaries shipped with control in `dir` (`node_binaries`: by default the
/// directory of control's own executable, where a build and `deploy/install.sh` put
/// `hearth-node`): `hearth-node`, its architecture read from its ELF header, and
/// `hearth-node-linux-<arch>`; one per architecture, sorted. Nothing else in `dir` is read.
pub(crate) fn shipped(dir: &Path) -> Vec<Shipped> {
    use std::io::Read as _;
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let named = name.strip_prefix("hearth-node-linux-").filter(|arch| {
            (1..=16).contains(&arch.len()) && arch.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        });
        if name != "hearth-node" && named.is_none() {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if !meta.is_file() || meta.len() > SHIPPED_MAX {
            continue;
        }
        let mut head = [0u8; 20];
        let read = std::fs::File::open(&path).and_then(|mut f| f.read_exact(&mut head));
        let Some(elf_arch) = read.ok().and_then(|()| elf_target(&head)) else { continue };
        // A name that says another architecture than the file is a mistake: leave it out.
        if named.is_some_and(|arch| arch != elf_arch) {
            continue;
        }
        found.push(Shipped {
            os: "linux".to_owned(),
            arch: elf_arch.to_owned(),
            len: meta.len(),
            path,
            named: named.is_some(),
        });
    }
    found.sort_by(|a, b| a.arch.cmp(&b.arch).then(b.named.cmp(&a.named)));
    found.dedup_by(|later, first| later.arch == first.arch);
    found
}

/// What the one click of the panel needs, read outside the database's writer: the release
/// key (from the data directory) and the shipped binaries.
pub(crate) fn load_shipped(data_dir: &Path, dir: &Path) -> Result<(SecretKey, Vec<Binary>), Error> {
    let key_path = crate::keyring::Paths::new(data_dir).secret(hearth_shared::keys::Role::Release);
    if !key_path.exists() {
        return Err(Error::conflict(
            "release_key_offline",
            "the release key is not on this server: sign on the machine that keeps it (hearth-control release sign \
             --key release.key --out DIR hearth-node), then run hearth-control release add DIR here",
        ));
    }
    let found = shipped(dir);
    if found.is_empty() {
        return Err(Error::conflict(
            "no_node_binary",
            format!(
                "there is no hearth-node beside control (in {}): build it (sh deploy/build-release.sh) and sign \
                 target/dist/hearth-node with hearth-control release sign",
                dir.display()
            ),
        ));
    }
    let key = crate::keyring::load_key(&key_path, hearth_shared::keys::Role::Release)?;
    let mut binaries = Vec::with_capacity(found.len());
    for file in found {
        let bytes =
            std::fs::read(&file.path).map_err(|e| Error::Internal(format!("reading {}: {e}", file.path.display())))?;
        binaries.push(Binary { os: file.os, arch: file.arch, bytes });
    }
    Ok((key, binaries))
}

/// Signs `binaries` (shipped with control) as a release of control's own version and adds
/// it, unless the release in force has these very binaries already.
pub(crate) fn add_shipped(
    data_dir: &Path,
    conn: &Connection,
    key: &SecretKey,
    binaries: Vec<Binary>,
    actor: &str,
    now: u64,
) -> Result<(u64, ReleaseManifest), Error> {
    let hashes: Vec<(&str, [u8; 32])> =
        binaries.iter().map(|b| (b.arch.as_str(), hearth_shared::sha256(&b.bytes))).collect();
    if let Some((release, manifest)) = in_force(conn, now)?
        && same_files(&manifest, &hashes)
    {
        return Err(Error::conflict(
            "release_same",
            format!("release {release} ({}), in force, has these very binaries", manifest.version),
        ));
    }
    let sequence = release_store::next_sequence(conn)?;
    let envelope = sign(key, env!("CARGO_PKG_VERSION"), SHIPPED_LIFETIME, &binaries, now, sequence)?;
    let files: Vec<NamedFile> = binaries
        .into_iter()
        .map(|b| (ReleaseFile { os: b.os, arch: b.arch, len: 0, sha256: [0; 32] }.name(), b.bytes))
        .collect();
    Ok(import(data_dir, conn, &envelope, &files, actor, now)?)
}

/// Whether `manifest` lists exactly these files: one for each architecture of `hashes`, each
/// with its SHA-256.
fn same_files(manifest: &ReleaseManifest, hashes: &[(&str, [u8; 32])]) -> bool {
    manifest.files.len() == hashes.len()
        && hashes.iter().all(|(arch, sha)| manifest.files.iter().any(|f| f.arch == *arch && f.sha256 == *sha))
}

/// Where a release's files live in the data directory.
fn release_dir(data_dir: &Path, release: u64) -> PathBuf {
    data_dir.join("releases").join(release.to_string())
}

/// Writes a signed release into `out`: `manifest` and the binaries by their names.
pub(crate) fn write_dir(out: &Path, envelope: &[u8], binaries: &[Binary]) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    std::fs::write(out.join("manifest"), envelope)?;
    for b in binaries {
        let file = ReleaseFile { os: b.os.clone(), arch: b.arch.clone(), len: 0, sha256: [0; 32] };
        std::fs::write(out.join(file.name()), &b.bytes)?;
    }
    Ok(())
}

/// A release binary by its name.
pub(crate) type NamedFile = (String, Vec<u8>);

/// A release as a directory holds it.
pub(crate) fn read_dir(dir: &Path) -> Result<(Vec<u8>, Vec<NamedFile>)> {
    let envelope =
        std::fs::read(dir.join("manifest")).with_context(|| format!("reading {}/manifest", dir.display()))?;
    let body = Envelope::decode(&envelope, Kind::Release.max_len()).context("the manifest is not a signed release")?;
    let manifest = ReleaseManifest::decode(&body.body).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut files = Vec::new();
    for file in &manifest.files {
        let path = dir.join(file.name());
        files.push((file.name(), std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?));
    }
    Ok((envelope, files))
}

/// Checks a signed release against this control's trust (the release key the root
/// certified) and keeps it. Returns its version and manifest.
pub(crate) fn import(
    data_dir: &Path,
    conn: &Connection,
    envelope: &[u8],
    files: &[NamedFile],
    actor: &str,
    now: u64,
) -> Result<(u64, ReleaseManifest)> {
    let trust = crate::keyring::load_trust(data_dir, now)?;
    let expect = Expect { kind: Kind::Release, audience: Audience::Any, stream: stream::RELEASE };
    let verified = verify(envelope, &trust, &expect, None, now).context("the release does not verify")?;
    let manifest = ReleaseManifest::decode(&verified.envelope.body).map_err(|e| anyhow::anyhow!("{e}"))?;
    let version = verified.envelope.header.version;
    let dir = release_dir(data_dir, version);
    for file in &manifest.files {
        let bytes = files
            .iter()
            .find(|(name, _)| *name == file.name())
            .map(|(_, bytes)| bytes)
            .with_context(|| format!("the release has no file {}", file.name()))?;
        if !file.matches(bytes) {
            bail!("{} does not match its length and SHA-256 in the manifest", file.name());
        }
    }
    if release_store::exists(conn, version)? {
        bail!("release {version} was added already");
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, bytes) in files {
        if manifest.files.iter().any(|f| f.name() == *name) {
            std::fs::write(dir.join(name), bytes).with_context(|| format!("writing {name}"))?;
        }
    }
    let row = release_store::Release {
        version,
        name: manifest.version.clone(),
        built: manifest.built,
        expires: verified.envelope.header.expires,
        manifest: envelope.to_vec(),
    };
    release_store::add(conn, &row, now)?;
    audit(conn, now, actor, "release.add", &format!("release {version} ({})", manifest.version), "")?;
    Ok((version, manifest))
}

/// The release in force, which new nodes install: the newest that has not expired and that
/// nodes run already: a completed rollout put it on every node, or every enrolled node runs it.
/// Before any node is enrolled (nothing to roll out to), the newest that has not expired and
/// whose rollout did not fail or stop, for the first node. A release signed but never rolled
/// out is never installed beside nodes that run another.
pub(crate) fn in_force(conn: &Connection, now: u64) -> Result<Option<(u64, ReleaseManifest)>, Error> {
    let Some((version, envelope)) = release_store::in_force(conn, now)? else { return Ok(None) };
    let body = Envelope::decode(&envelope, Kind::Release.max_len()).map_err(|e| Error::Internal(e.to_string()))?;
    let manifest = ReleaseManifest::decode(&body.body).map_err(|e| Error::Internal(e.to_string()))?;
    Ok(Some((version, manifest)))
}

/// A release's file, when the release has it (names are checked against the manifest, never
/// used as paths as given).
pub(crate) fn file(data_dir: &Path, conn: &Connection, release: u64, name: &str) -> Result<Option<Vec<u8>>, Error> {
    let Some(envelope) = manifest(conn, release)? else { return Ok(None) };
    let body = Envelope::decode(&envelope, Kind::Release.max_len()).map_err(|e| Error::Internal(e.to_string()))?;
    let manifest = ReleaseManifest::decode(&body.body).map_err(|e| Error::Internal(e.to_string()))?;
    let Some(file) = manifest.files.iter().find(|f| f.name() == name) else { return Ok(None) };
    let bytes = std::fs::read(release_dir(data_dir, release).join(file.name()))
        .map_err(|e| Error::Internal(format!("reading release {release}'s {name}: {e}")))?;
    Ok(Some(bytes))
}

/// A release and its rollout, as the API shows them.
#[derive(Serialize)]
pub(crate) struct ReleaseView {
    version: u64,
    name: String,
    built: u64,
    expires: u64,
    files: Vec<String>,
    rollout: Option<RolloutView>,
}

#[derive(Serialize)]
pub(crate) struct RolloutView {
    state: String,
    canary: NodeId,
    current: NodeId,
    detail: String,
    started: u64,
    updated: u64,
    /// Nodes running this release.
    done: Vec<NodeId>,
}

/// The release a path names: its version number (`1733300000`), or its name as the manifest
/// gives it (`0.2.0`: the newest release of that name).
pub(crate) fn version_of(conn: &Connection, given: &str) -> Result<u64, Error> {
    let given = given.trim();
    if given.len() > 64 {
        return Err(Error::NotFound("release"));
    }
    let found: Option<u64> = match given.parse::<u64>() {
        Ok(version) => release_store::by_version(conn, version)?,
        Err(_) => release_store::newest_named(conn, given)?,
    };
    found.ok_or(Error::NotFound("release"))
}

/// Every release, newest first.
pub(crate) fn list(conn: &Connection) -> Result<Vec<ReleaseView>, Error> {
    let rows = release_store::list(conn)?;
    let mut views = Vec::with_capacity(rows.len());
    for release_store::Release { version, name, built, expires, manifest: envelope } in rows {
        let files = Envelope::decode(&envelope, Kind::Release.max_len())
            .ok()
            .and_then(|e| ReleaseManifest::decode(&e.body).ok())
            .map(|m| m.files.iter().map(ReleaseFile::name).collect())
            .unwrap_or_default();
        let rollout = release_store::rollout(conn, version)?
            .map(|rollout| {
                Ok::<_, Error>(RolloutView {
                    state: rollout.state,
                    canary: rollout.canary,
                    current: rollout.current,
                    detail: rollout.detail,
                    started: rollout.started,
                    updated: rollout.updated,
                    done: release_store::running(conn, version)?,
                })
            })
            .transpose()?;
        views.push(ReleaseView { version, name, built, expires, files, rollout });
    }
    Ok(views)
}

/// Starts rolling `release` out, with `canary` first.
pub(crate) fn start(
    conn: &Connection,
    signer: &Signer,
    release: u64,
    canary: NodeId,
    actor: &str,
    now: u64,
) -> Result<(), Error> {
    match release_store::expires(conn, release)? {
        None => return Err(Error::NotFound("release")),
        Some(expires) if expires <= now => {
            return Err(Error::invalid("release_expired", "this release has expired; sign a new one"));
        }
        Some(_) => {}
    }
    if let Some(other) = release_store::rolling_release(conn)? {
        return Err(Error::conflict("release_rolling", format!("release {other} is rolling out; stop it first")));
    }
    if release_store::enrolled(conn, canary)? != Some(true) {
        return Err(Error::invalid("bad_canary", "the canary must be an enrolled node"));
    }
    release_store::start(conn, release, canary, now)?;
    crate::publish::publish_rollout(conn, signer, now)?;
    audit(conn, now, actor, "release.rollout", &format!("release {release}"), &format!("canary node {canary}"))
}

/// Stops a rollout: nodes not running the release yet are no longer told to.
pub(crate) fn stop(conn: &Connection, signer: &Signer, release: u64, actor: &str, now: u64) -> Result<(), Error> {
    if !release_store::stop(conn, release, now)? {
        return Err(Error::conflict("release_not_rolling", "this release is not rolling out"));
    }
    crate::publish::publish_rollout(conn, signer, now)?;
    let data = serde_json::json!({ "release": release, "why": "stopped by the owner", "by": actor });
    crate::store::events::emit(conn, now, "release.stopped", &format!("release {release}"), &data)?;
    audit(conn, now, actor, "release.stop", &format!("release {release}"), "")
}

/// What the node told last of a rollout did with the release, as [`verdict`] reads it.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// It refused or rolled the release back, was removed, or did not run it in time: the
    /// rollout stops, for this reason.
    Fails(String),
    /// It does not run the release yet, and has time left.
    Waits,
    /// It runs the release: the next node is told, or, with none left, the rollout is done.
    RunsIt,
}

/// What became of the running rollout at its node told last (`node`: what that node runs and
/// said; `None` when it was removed), `timeout` seconds being its time to run the release.
fn verdict(rolling: &Rolling, node: Option<NodeRelease>, timeout: u64, now: u64) -> Verdict {
    let Rolling { release, current, since } = *rolling;
    let NodeRelease { running, status } = node.unwrap_or(NodeRelease { running: 0, status: "removed".to_owned() });
    if status.split_whitespace().next() == Some(release.to_string().as_str()) {
        Verdict::Fails(format!("node {current}: {}", status.split_once(' ').map_or("", |(_, why)| why)))
    } else if status == "removed" {
        Verdict::Fails(format!("node {current} was removed"))
    } else if running != release && now > since + timeout {
        Verdict::Fails(format!("node {current} did not run the release within {timeout} s"))
    } else if running != release {
        Verdict::Waits
    } else {
        Verdict::RunsIt
    }
}

/// Moves the running rollout on: when the node told last runs the release, the next node is
/// told; a node that refused or rolled the release back, or did not run it within `timeout`
/// seconds, stops the rollout. Returns whether anything changed.
pub(crate) fn advance(conn: &Connection, signer: &Signer, timeout: u64, now: u64) -> Result<bool, Error> {
    let Some(rolling) = release_store::rolling(conn)? else {
        return Ok(false);
    };
    let Rolling { release, current, .. } = rolling;
    let node = release_store::node_release(conn, current)?;
    match verdict(&rolling, node, timeout, now) {
        Verdict::Fails(detail) => {
            release_store::fail(conn, release, current, &detail, now)?;
            crate::publish::publish_rollout(conn, signer, now)?;
            audit(conn, now, "control", "release.failed", &format!("release {release}"), &detail)?;
            let data = serde_json::json!({ "release": release, "why": detail, "node": current });
            crate::store::events::emit(conn, now, "release.stopped", &format!("release {release}"), &data)?;
            tracing::warn!(release, %detail, "the rollout stopped");
            return Ok(true);
        }
        Verdict::Waits => return Ok(false),
        Verdict::RunsIt => {}
    }
    match release_store::next_node(conn, release)? {
        Some(node) => {
            release_store::tell_next(conn, release, node, now)?;
            tracing::info!(release, node, "the release goes to the next node");
        }
        None => {
            release_store::finish(conn, release, now)?;
            audit(conn, now, "control", "release.done", &format!("release {release}"), "")?;
            let data = serde_json::json!({ "release": release });
            crate::store::events::emit(conn, now, "release.rolled_out", &format!("release {release}"), &data)?;
            tracing::info!(release, "every node runs the release");
        }
    }
    crate::publish::publish_rollout(conn, signer, now)?;
    Ok(true)
}

/// Text a node sent, as kept: printable ASCII and spaces, at most 300 characters.
fn clean(text: &str) -> String {
    text.chars().filter(|c| c.is_ascii_graphic() || *c == ' ').take(300).collect()
}

/// What a node says it runs, `<version>@<release>` (the version name, and the release envelope
/// it came in): the name, cleaned, and the release (0: none, or not a number).
fn running_release(running: &str) -> (String, u64) {
    let (name, release) = running.split_once('@').unwrap_or((running, "0"));
    (clean(name), release.parse::<u64>().unwrap_or(0))
}

/// What a node said about its release, at `said_at` (in a pull: now; in a usage report: the
/// end of its period, which may be long past when an edge relays it): what it runs, and why
/// it refused one. Something said before what was taken already is old news, and left.
pub(crate) fn node_says(
    conn: &Connection,
    node: NodeId,
    running: Option<&str>,
    update: Option<&str>,
    said_at: u64,
) -> Result<(), Error> {
    if !release_store::said_newer(conn, node, said_at)? {
        return Ok(());
    }
    if let Some(running) = running {
        let (name, release) = running_release(running);
        release_store::set_running(conn, node, &name, release)?;
    }
    release_store::set_update_status(conn, node, &update.map(clean).unwrap_or_default())?;
    Ok(())
}

/// The release being rolled out as an edge takes it (manifest and files, one bundle), unless
/// the edge holds it already (`held`, its marker): the release and the bundle.
pub(crate) fn bundle_for_edge(conn: &Connection, dir: &Path, held: i64) -> Result<Option<(u64, Vec<u8>)>, Error> {
    let Some(release) = release_store::for_edge(conn)? else { return Ok(None) };
    // Never older than what the edge holds: it refuses a rollback (after a failed rollout the
    // newest rollout still standing may be an older release), and asking again would only
    // hold back the next one.
    if held >= i64::try_from(release).unwrap_or(i64::MAX) {
        return Ok(None);
    }
    let Some(envelope) = manifest(conn, release)? else { return Ok(None) };
    let body = Envelope::decode(&envelope, Kind::Release.max_len()).map_err(|e| Error::Internal(e.to_string()))?;
    let parsed = ReleaseManifest::decode(&body.body).map_err(|e| Error::Internal(e.to_string()))?;
    let mut files = Vec::new();
    for f in &parsed.files {
        let bytes = file(dir, conn, release, &f.name())?.unwrap_or_default();
        files.push((f.name(), serde_bytes::ByteBuf::from(bytes)));
    }
    Ok(Some((release, wire::encode(&hearth_shared::release::ReleaseBundle { manifest: envelope, files }))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_and_targets_parse() {
        assert_eq!(parse_lifetime("30d").unwrap(), 30 * 86_400);
        assert_eq!(parse_lifetime("12h").unwrap(), 12 * 3600);
        assert_eq!(parse_lifetime("90").unwrap(), 90);
        assert!(parse_lifetime("0d").is_err() && parse_lifetime("soon").is_err());
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[5] = 1;
        elf[18] = 62;
        assert_eq!(elf_target(&elf), Some("x86_64"));
        elf[18] = 183;
        assert_eq!(elf_target(&elf), Some("aarch64"));
        assert_eq!(elf_target(b"#!/bin/sh\nexit 1\n"), None);
        let binary = |len| Binary { os: "linux".into(), arch: "x86_64".into(), bytes: vec![0; len] };
        assert_eq!(too_large_for_edges(&[binary(20 << 20), binary(20 << 20)]), None);
        let over = too_large_for_edges(&[binary(40 << 20), binary(30 << 20)]).unwrap();
        assert!(over.contains("70 MiB") && over.contains("64 MiB"), "{over}");
        // The test binary itself is an ELF for this machine.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(elf_target(&me), Some(std::env::consts::ARCH));
    }

    /// The node told last decides a rollout's next step: a refusal or rollback of this release
    /// (its status names it), its removal or its time running out stop the rollout; running the
    /// release moves it on; anything else waits.
    #[test]
    fn a_rollout_fails_waits_or_moves_on_by_what_its_node_did() {
        let rolling = Rolling { release: 9, current: 4, since: 1000 };
        let node = |running: u64, status: &str| Some(NodeRelease { running, status: status.to_owned() });
        let at = |node, now| verdict(&rolling, node, 600, now);
        assert_eq!(at(node(9, ""), 1001), Verdict::RunsIt);
        assert_eq!(at(node(9, ""), 9999), Verdict::RunsIt, "running it, however late");
        assert_eq!(at(node(3, ""), 1600), Verdict::Waits, "within its time");
        assert_eq!(at(node(3, "8 bad signature"), 1001), Verdict::Waits, "what it said of another release");
        assert_eq!(at(node(3, ""), 1601), Verdict::Fails("node 4 did not run the release within 600 s".into()));
        assert_eq!(at(node(3, "9 bad signature"), 1001), Verdict::Fails("node 4: bad signature".into()));
        assert_eq!(at(node(9, "9 rolled back"), 1001), Verdict::Fails("node 4: rolled back".into()));
        assert_eq!(at(node(3, "9"), 1001), Verdict::Fails("node 4: ".into()), "a refusal without a reason");
        assert_eq!(at(None, 1001), Verdict::Fails("node 4 was removed".into()));
    }

    /// A node's word on what it runs is `<version>@<release>`, kept printable and short.
    #[test]
    fn what_a_node_runs_is_read_and_cleaned() {
        assert_eq!(running_release("0.3.0@9"), ("0.3.0".to_owned(), 9));
        assert_eq!(running_release("0.3.0"), ("0.3.0".to_owned(), 0), "a build that came with no release");
        assert_eq!(running_release("0.3.0@soon"), ("0.3.0".to_owned(), 0));
        assert_eq!(running_release("0.3\n.0\u{7}@2"), ("0.3.0".to_owned(), 2));
        assert_eq!(clean(&"x".repeat(400)).len(), 300);
        assert_eq!(clean("bad signature: é"), "bad signature: ");
    }

    /// The release in force has the same binaries only when it lists exactly these, each
    /// architecture with its hash.
    #[test]
    fn the_same_binaries_are_the_same_files() {
        let file =
            |arch: &str, sha: u8| ReleaseFile { os: "linux".into(), arch: arch.into(), len: 1, sha256: [sha; 32] };
        let manifest =
            ReleaseManifest { version: "0.3.0".into(), built: 0, files: vec![file("x86_64", 1), file("aarch64", 2)] };
        assert!(same_files(&manifest, &[("aarch64", [2; 32]), ("x86_64", [1; 32])]));
        assert!(!same_files(&manifest, &[("aarch64", [2; 32]), ("x86_64", [3; 32])]), "another build");
        assert!(!same_files(&manifest, &[("x86_64", [1; 32])]), "fewer");
        assert!(!same_files(&manifest, &[("x86_64", [1; 32]), ("aarch64", [2; 32]), ("riscv64", [4; 32])]), "more");
    }
}
