//! `hearth-control release`: signing node binaries as a release, adding one signed
//! elsewhere, and listing releases.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Subcommand;
use hearth_shared::keys::Role;

use crate::app::now;
use crate::{keyring, releases, serve};

/// What `release` does.
#[derive(Subcommand)]
pub(crate) enum ReleaseCommand {
    /// Sign node binaries as a release. Without --out it is added to this control at once;
    /// with --out (on the machine that keeps the release key) it is written to a directory
    /// for `release add`.
    Sign {
        /// The release key file (default: the data directory's).
        #[arg(long)]
        key: Option<PathBuf>,
        /// The version, like 0.2.0: nodes take only a newer one.
        #[arg(long)]
        version: String,
        /// How long nodes accept it, like 30d.
        #[arg(long, default_value = "30d")]
        expires: String,
        /// Write the signed release here instead of adding it.
        #[arg(long)]
        out: Option<PathBuf>,
        /// The hearth-node binaries: paths to ELF executables, or os-arch=path.
        #[arg(required = true)]
        binaries: Vec<String>,
    },
    /// Add a release signed elsewhere (a directory `release sign --out` wrote).
    Add {
        /// The directory.
        dir: PathBuf,
    },
    /// List releases and their rollouts.
    List,
}

/// Runs a `release` command on the data directory `dir`.
pub(crate) fn run(dir: &Path, command: ReleaseCommand) -> Result<()> {
    let now = now();
    match command {
        ReleaseCommand::Sign { key, version, expires, out, binaries } => {
            let key_path = key.unwrap_or_else(|| keyring::Paths::new(dir).secret(Role::Release));
            let key = keyring::load_key(&key_path, Role::Release).context("loading the release key")?;
            let binaries = binaries.iter().map(|spec| releases::read_binary(spec)).collect::<Result<Vec<_>>>()?;
            if let Some(warning) = releases::too_large_for_edges(&binaries) {
                eprintln!("warning: {warning}");
            }
            let lifetime = releases::parse_lifetime(&expires)?;
            // Added here at once: sign past the newest release this control holds, so two
            // releases signed within one second are both taken.
            let sequence = match &out {
                Some(_) => now,
                None => {
                    let (_, db, _) = serve::open(dir)?;
                    db.read_blocking(crate::store::releases::next_sequence)?
                }
            };
            let envelope = releases::sign(&key, &version, lifetime, &binaries, now, sequence)?;
            for b in &binaries {
                out!(
                    "{}/{}  {} bytes  sha256 {}",
                    b.os,
                    b.arch,
                    b.bytes.len(),
                    hex::encode(hearth_shared::sha256(&b.bytes))
                );
            }
            match out {
                Some(out) => {
                    releases::write_dir(&out, &envelope, &binaries)?;
                    out!(
                        "release {version} signed into {}; on control: hearth-control release add {}",
                        out.display(),
                        out.display()
                    );
                }
                None => {
                    let files: Vec<(String, Vec<u8>)> = binaries
                        .into_iter()
                        .map(|b| {
                            (
                                hearth_shared::release::ReleaseFile { os: b.os, arch: b.arch, len: 0, sha256: [0; 32] }
                                    .name(),
                                b.bytes,
                            )
                        })
                        .collect();
                    let (_, db, _) = serve::open(dir)?;
                    let (release, _) =
                        db.write_blocking(|tx| Ok(releases::import(dir, tx, &envelope, &files, "cli", now)?))?;
                    out!(
                        "release {release} ({version}) added; roll it out from the admin panel or POST /api/releases/{release}/rollout"
                    );
                }
            }
        }
        ReleaseCommand::Add { dir: from } => {
            let (envelope, files) = releases::read_dir(&from)?;
            let (_, db, _) = serve::open(dir)?;
            let (release, manifest) =
                db.write_blocking(|tx| Ok(releases::import(dir, tx, &envelope, &files, "cli", now)?))?;
            out!("release {release} ({}) added", manifest.version);
        }
        ReleaseCommand::List => {
            let (_, db, _) = serve::open(dir)?;
            for r in db.read_blocking(releases::list)? {
                out!("{}", serde_json::to_string(&r)?);
            }
        }
    }
    Ok(())
}
