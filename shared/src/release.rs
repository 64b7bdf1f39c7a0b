//! Signed node releases.
//!
//! A release is a [`ReleaseManifest`] in a [`Kind::Release`](crate::envelope::Kind::Release)
//! envelope signed by the release key (which can stay offline): its version and build time,
//! and for each binary the os, architecture, length and SHA-256. A node takes a release only
//! after [`check`] passes, in the order a node must check: the signature (by the caller,
//! through [`crate::trust::verify`]), the format, the expiry, that it is newer than what the
//! node runs, and that it has a file for the node's os and architecture. The file's length
//! and hash are checked once it is downloaded ([`ReleaseFile::matches`]).
//!
//! Control tells nodes which release to run with a [`Rollout`] (signed by the signing key):
//! one canary node first, then the others.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::Digest;
use crate::wire::NodeId;

/// The body of a release envelope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseManifest {
    /// The version, like `0.2.0` (compared as dotted numbers, a `-pre` suffix before the
    /// release).
    pub version: String,
    /// When it was built (Unix seconds).
    pub built: u64,
    /// The binaries, one per os and architecture.
    pub files: Vec<ReleaseFile>,
}

/// One binary of a release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseFile {
    /// `linux`.
    pub os: String,
    /// `x86_64`, `aarch64`, ...
    pub arch: String,
    /// Its length in bytes.
    pub len: u64,
    /// Its SHA-256.
    pub sha256: Digest,
}

impl ReleaseFile {
    /// The name a node asks for it by: `hearth-node-<os>-<arch>`.
    pub fn name(&self) -> String {
        format!("hearth-node-{}-{}", self.os, self.arch)
    }

    /// Whether downloaded bytes are this file.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        bytes.len() as u64 == self.len && crate::sha256(bytes) == self.sha256
    }
}

/// What a node runs: a release's version and build time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    /// The version.
    pub version: String,
    /// The build time (0 when unknown: a binary built outside a release).
    pub built: u64,
}

/// Which nodes control told to run the release `release` (the version of its envelope).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollout {
    /// The release envelope's version (0: none).
    pub release: u64,
    /// The nodes, sorted.
    pub nodes: Vec<NodeId>,
}

/// The largest [`ReleaseBundle`] an edge takes (a Cloudflare Worker takes a request of at
/// most 100 MB): a few release builds of the node, never a debug build.
pub const MAX_BUNDLE_BYTES: usize = 64 * 1024 * 1024;

/// A release as control hands it to the edge (`PUT /<api>/release`), for nodes that reach
/// only the edge: the signed manifest and its binaries by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseBundle {
    /// The release envelope.
    #[serde(with = "serde_bytes")]
    pub manifest: Vec<u8>,
    /// The binaries, by [`ReleaseFile::name`].
    pub files: Vec<(String, serde_bytes::ByteBuf)>,
}

/// Why a node does not take a release. Each is logged and reported to control as is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The manifest is not one (after the signature passed).
    #[error("malformed manifest: {0}")]
    Malformed(&'static str),
    /// Past its expiry.
    #[error("the manifest expired")]
    Expired,
    /// Not newer than what runs: a downgrade or a replay.
    #[error("version {offered} is not newer than the running {running}")]
    NotNewer {
        /// The manifest's version.
        offered: String,
        /// What the node runs.
        running: String,
    },
    /// No binary for this node.
    #[error("no binary for {os}/{arch}")]
    NoFile {
        /// The node's os.
        os: String,
        /// The node's architecture.
        arch: String,
    },
    /// The downloaded file is not the one the manifest names.
    #[error("the binary does not match the manifest's length and SHA-256: tampered")]
    Tampered,
}

/// Parses a version into its numbers and whether it is a pre-release.
fn parse(version: &str) -> Option<(Vec<u64>, bool)> {
    let version = version.split('+').next()?;
    let (core, pre) = match version.split_once('-') {
        Some((core, _)) => (core, true),
        None => (version, false),
    };
    let numbers = core.split('.').map(|n| n.parse().ok()).collect::<Option<Vec<u64>>>()?;
    (!numbers.is_empty()).then_some((numbers, pre))
}

/// Orders two versions (`None` when either is not a version).
pub fn compare_versions(a: &str, b: &str) -> Option<Ordering> {
    let ((mut a, a_pre), (mut b, b_pre)) = (parse(a)?, parse(b)?);
    let len = a.len().max(b.len());
    a.resize(len, 0);
    b.resize(len, 0);
    // A pre-release comes before its release.
    Some(a.cmp(&b).then(b_pre.cmp(&a_pre)))
}

impl ReleaseManifest {
    /// Decodes a manifest and checks its form.
    pub fn decode(bytes: &[u8]) -> Result<ReleaseManifest, Refusal> {
        let manifest: ReleaseManifest =
            crate::wire::decode(bytes, "release manifest").map_err(|_| Refusal::Malformed("undecodable"))?;
        if parse(&manifest.version).is_none() || manifest.version.len() > 64 {
            return Err(Refusal::Malformed("the version is not like 1.2.3"));
        }
        let mut targets: Vec<(&str, &str)> = manifest.files.iter().map(|f| (f.os.as_str(), f.arch.as_str())).collect();
        targets.sort_unstable();
        targets.dedup();
        let named =
            |s: &str| !s.is_empty() && s.len() <= 32 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if targets.len() != manifest.files.len() || !manifest.files.iter().all(|f| named(&f.os) && named(&f.arch)) {
            return Err(Refusal::Malformed("files must name distinct os/arch pairs of letters, digits and '_'"));
        }
        Ok(manifest)
    }

    /// Whether a node running `running` on `os`/`arch` takes this release at `now`, given its
    /// envelope's expiry (the signature was checked). Returns the file to download.
    pub fn check(
        &self,
        expires: u64,
        now: u64,
        running: &Running,
        os: &str,
        arch: &str,
    ) -> Result<&ReleaseFile, Refusal> {
        if now > expires {
            return Err(Refusal::Expired);
        }
        let newer = match compare_versions(&self.version, &running.version) {
            Some(Ordering::Greater) => true,
            Some(Ordering::Equal) => self.built > running.built,
            _ => false,
        };
        if !newer {
            return Err(Refusal::NotNewer { offered: self.version.clone(), running: running.version.clone() });
        }
        self.files
            .iter()
            .find(|f| f.os == os && f.arch == arch)
            .ok_or_else(|| Refusal::NoFile { os: os.to_owned(), arch: arch.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(version: &str, built: u64) -> ReleaseManifest {
        ReleaseManifest {
            version: version.into(),
            built,
            files: vec![ReleaseFile {
                os: "linux".into(),
                arch: "x86_64".into(),
                len: 3,
                sha256: crate::sha256(b"abc"),
            }],
        }
    }

    #[test]
    fn versions_order_as_numbers_with_pre_releases_first() {
        use Ordering::*;
        for (a, b, order) in [
            ("0.2.0", "0.1.9", Greater),
            ("0.10.0", "0.9.0", Greater),
            ("1.0", "1.0.0", Equal),
            ("1.0.0-rc1", "1.0.0", Less),
            ("1.0.0+build7", "1.0.0", Equal),
        ] {
            assert_eq!(compare_versions(a, b), Some(order), "{a} vs {b}");
        }
        assert_eq!(compare_versions("one", "1.0"), None);
    }

    #[test]
    fn a_node_takes_only_a_newer_release_for_itself_in_time() {
        let running = Running { version: "0.1.0".into(), built: 100 };
        let m = manifest("0.2.0", 200);
        assert_eq!(m.check(1000, 500, &running, "linux", "x86_64").unwrap().name(), "hearth-node-linux-x86_64");
        assert!(m.files[0].matches(b"abc") && !m.files[0].matches(b"abd") && !m.files[0].matches(b"abcd"));
        assert_eq!(m.check(400, 500, &running, "linux", "x86_64"), Err(Refusal::Expired));
        assert_eq!(
            m.check(1000, 500, &running, "linux", "aarch64"),
            Err(Refusal::NoFile { os: "linux".into(), arch: "aarch64".into() })
        );
        let older = manifest("0.0.9", 900);
        assert!(matches!(older.check(1000, 500, &running, "linux", "x86_64"), Err(Refusal::NotNewer { .. })));
        // The same version is newer only when built later.
        assert!(manifest("0.1.0", 101).check(1000, 500, &running, "linux", "x86_64").is_ok());
        assert!(manifest("0.1.0", 100).check(1000, 500, &running, "linux", "x86_64").is_err());
    }

    #[test]
    fn malformed_manifests_are_refused() {
        let good = manifest("1.2.3", 1);
        assert_eq!(ReleaseManifest::decode(&crate::wire::encode(&good)), Ok(good.clone()));
        let mut twice = good.clone();
        twice.files.push(twice.files[0].clone());
        let mut odd = good.clone();
        odd.files[0].arch = "../x".into();
        let mut unversioned = good;
        unversioned.version = "latest".into();
        for bad in [twice, odd, unversioned] {
            assert!(matches!(ReleaseManifest::decode(&crate::wire::encode(&bad)), Err(Refusal::Malformed(_))));
        }
        assert!(ReleaseManifest::decode(b"junk").is_err());
    }
}
