//! Signed self-updates.
//!
//! Control (or the edge) names, in the answer to a pull, the release this node should run.
//! The node fetches the manifest and checks, in order: the signature by the release key the
//! root certified, the format, the expiry, that it is newer than what runs (downgrades and
//! replays are refused), and that it has a binary for this os and architecture; then it
//! downloads the binary and checks its length and SHA-256. Only then is the binary swapped in
//! atomically (the running one kept as `<exe>.prev`) and the node exits with
//! [`RESTART_CODE`] for its supervisor (`hearth-node supervise`) to start the new one.
//!
//! The new binary must run healthy (serving, and a pull answered) for `update_health_secs`
//! before it is kept (`release.json`); the supervisor puts the previous binary back when it
//! crash-loops or does not get there in time. Every refusal and roll-back is written to
//! `update.status`, logged, and said to control in the next pulls.
//!
//! This module is the mechanics (the files, the checks, the swap); [`drive`] is the agent's
//! side: what it does about a release after each answered pull.

use std::path::{Path, PathBuf};

use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::release::{ReleaseManifest, Running};
use hearth_shared::trust::{self, Expect, VerifyError};
use hearth_shared::wire::stream;
use serde::{Deserialize, Serialize};

use crate::state::{StateDir, write_atomic};

mod drive;

/// The exit code that asks the supervisor to start the (new) binary again.
pub(crate) const RESTART_CODE: i32 = 75;

const RUNNING: &str = "release.json";
const PENDING: &str = "update.pending";
const STATUS: &str = "update.status";
const HANDLED: &str = "release.handled";

/// What runs, as `release.json` keeps it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct RunningFile {
    version: String,
    built: u64,
    release: u64,
}

/// A swapped-in binary that has not proven itself yet.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Pending {
    pub(crate) release: u64,
    pub(crate) version: String,
    pub(crate) built: u64,
}

/// What this node runs, and the release it came in (0: a binary installed by hand).
pub(crate) fn running(state: &StateDir) -> (Running, u64) {
    match std::fs::read(state.path(RUNNING)).ok().and_then(|b| serde_json::from_slice::<RunningFile>(&b).ok()) {
        Some(file) => (Running { version: file.version, built: file.built }, file.release),
        None => (Running { version: env!("CARGO_PKG_VERSION").to_owned(), built: 0 }, 0),
    }
}

/// The value of [`hearth_shared::nodeauth::NODE_VERSION_HEADER`]: `<version>@<release>`.
pub(crate) fn version_header(state: &StateDir) -> String {
    let (running, release) = running(state);
    format!("{}@{release}", running.version)
}

/// The last refusal or roll-back, `<release> <reason>`, until another release runs.
pub(crate) fn status(state: &StateDir) -> Option<String> {
    std::fs::read_to_string(state.path(STATUS)).ok().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// What this node says of its release in a usage report: the two headers' values, each cut
/// to what a report may carry.
pub(crate) fn said(state: &StateDir) -> hearth_shared::wire::NodeRelease {
    let cut = |mut text: String| {
        hearth_shared::cut_to(&mut text, hearth_shared::wire::NodeRelease::MAX_LEN);
        text
    };
    hearth_shared::wire::NodeRelease {
        running: cut(version_header(state)),
        update: cut(status(state).unwrap_or_default()),
    }
}

/// Whether the node should look at `release`: not the one it runs, nor one it refused.
pub(crate) fn wants(state: &StateDir, release: u64) -> bool {
    let handled = std::fs::read_to_string(state.path(HANDLED)).ok().and_then(|s| s.trim().parse::<u64>().ok());
    release != 0 && release != running(state).1 && Some(release) != handled && !state.path(PENDING).exists()
}

/// Records that `release` was refused or rolled back, and why.
pub(crate) fn refused(state: &StateDir, release: u64, reason: &str) {
    tracing::error!(release, %reason, "not taking the release");
    let status = format!("{release} {}", reason.replace(['\n', '\r'], " "));
    if let Err(e) =
        state.write(STATUS, status.as_bytes()).and_then(|()| state.write(HANDLED, release.to_string().as_bytes()))
    {
        tracing::error!(error = %e, "could not record the refusal");
    }
}

/// The swap waiting to prove itself, if any.
pub(crate) fn pending(state: &StateDir) -> Option<Pending> {
    std::fs::read(state.path(PENDING)).ok().and_then(|b| serde_json::from_slice(&b).ok())
}

/// The new binary ran healthy long enough: it is kept.
pub(crate) fn confirm(state: &StateDir, pending: &Pending) -> anyhow::Result<()> {
    let running = RunningFile { version: pending.version.clone(), built: pending.built, release: pending.release };
    state.write(RUNNING, &serde_json::to_vec(&running)?)?;
    let _ = std::fs::remove_file(state.path(STATUS));
    std::fs::remove_file(state.path(PENDING))?;
    tracing::info!(release = pending.release, version = %pending.version, "the new release runs healthy and is kept");
    Ok(())
}

/// Why a release was not installed: for good (`Refused`, recorded) or for now (`Retry`).
pub(crate) enum Outcome {
    /// Installed: restart into it.
    Installed,
    /// Refused, with the reason.
    Refused(String),
    /// Could not be fetched; try again at a later pull.
    Retry(String),
}

/// Why a fetched release manifest is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ManifestError {
    /// It is past its expiry.
    #[error("the manifest expired")]
    Expired,
    /// It is not signed by a release key the node trusts (or not as a release manifest).
    #[error("the manifest does not verify: {0}")]
    Unverified(VerifyError),
    /// It is the manifest of another release than the one named.
    #[error("the manifest is release {found}, not {wanted}")]
    OtherRelease {
        /// The release it is.
        found: u64,
        /// The release the answer named.
        wanted: u64,
    },
    /// Its body is not a manifest, or not one this node may take.
    #[error(transparent)]
    Refused(#[from] hearth_shared::release::Refusal),
}

/// Checks a fetched manifest for `release` against the trust and what runs; gives the
/// manifest and the name of the file to download.
pub(crate) fn check_manifest(
    bytes: &[u8],
    trust: &trust::Trust,
    release: u64,
    running: &Running,
    now: u64,
) -> Result<(ReleaseManifest, hearth_shared::release::ReleaseFile), ManifestError> {
    let expect = Expect { kind: Kind::Release, audience: Audience::Any, stream: stream::RELEASE };
    let verified = match trust::verify(bytes, trust, &expect, None, now) {
        Ok(verified) => verified,
        Err(VerifyError::Expired { .. }) => return Err(ManifestError::Expired),
        Err(e) => return Err(ManifestError::Unverified(e)),
    };
    if verified.envelope.header.version != release {
        return Err(ManifestError::OtherRelease { found: verified.envelope.header.version, wanted: release });
    }
    let manifest = ReleaseManifest::decode(&verified.envelope.body)?;
    let file = manifest
        .check(verified.envelope.header.expires, now, running, std::env::consts::OS, std::env::consts::ARCH)?
        .clone();
    Ok((manifest, file))
}

/// Swaps `bytes` in for the running executable, keeping it as `<exe>.prev`.
pub(crate) fn install(exe: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let staged = sibling(exe, ".new");
    let _ = std::fs::remove_file(&staged);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o755).open(&staged)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    let previous = sibling(exe, ".prev");
    write_atomic(&previous, &std::fs::read(exe)?)?;
    std::fs::set_permissions(&previous, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    std::fs::rename(&staged, exe)?;
    if let Some(dir) = exe.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Marks the swap as waiting to prove itself.
pub(crate) fn mark_pending(state: &StateDir, pending: &Pending) -> anyhow::Result<()> {
    state.write(PENDING, &serde_json::to_vec(pending)?)
}

/// Puts the previous binary back after a failed swap; records why.
pub(crate) fn roll_back(state: &StateDir, exe: &Path, why: &str) -> anyhow::Result<()> {
    let previous = sibling(exe, ".prev");
    let release = pending(state).map_or(0, |p| p.release);
    std::fs::rename(&previous, exe)?;
    let _ = std::fs::remove_file(state.path(PENDING));
    refused(state, release, &format!("rolled back: {why}"));
    Ok(())
}

/// `<exe><suffix>`.
pub(crate) fn sibling(exe: &Path, suffix: &str) -> PathBuf {
    let mut name = exe.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The executable's path, as it was when the process started (`/proc/self/exe` reads
/// "(deleted)" once the file was swapped).
pub(crate) fn executable() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let text = exe.to_string_lossy();
    Ok(match text.strip_suffix(" (deleted)") {
        Some(path) => PathBuf::from(path),
        None => exe,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_keeps_the_previous_binary_and_rolls_back() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        let exe = dir.path().join("hearth-node");
        std::fs::write(&exe, b"old binary").unwrap();
        assert_eq!(running(&state).0.version, env!("CARGO_PKG_VERSION"));
        assert!(wants(&state, 7));
        install(&exe, b"new binary").unwrap();
        mark_pending(&state, &Pending { release: 7, version: "9.9.9".into(), built: 5 }).unwrap();
        assert_eq!(std::fs::read(&exe).unwrap(), b"new binary");
        assert_eq!(std::fs::read(sibling(&exe, ".prev")).unwrap(), b"old binary");
        assert!(!wants(&state, 8), "nothing new while a swap proves itself");

        roll_back(&state, &exe, "it crashed at start").unwrap();
        assert_eq!(std::fs::read(&exe).unwrap(), b"old binary");
        assert_eq!(status(&state).as_deref(), Some("7 rolled back: it crashed at start"));
        assert!(!wants(&state, 7), "a release rolled back is not taken again");
        assert!(wants(&state, 8));

        install(&exe, b"newer binary").unwrap();
        let next = Pending { release: 8, version: "9.9.10".into(), built: 6 };
        mark_pending(&state, &next).unwrap();
        confirm(&state, &next).unwrap();
        assert_eq!(version_header(&state), "9.9.10@8");
        assert_eq!(status(&state), None);
        assert!(!wants(&state, 8));
    }
}
