//! The one-line install of a node: the script control serves (`deploy/install-node.sh` with
//! the systemd unit written into it) and the command that fetches it, checks its SHA-256 and
//! runs it with the node's enrollment token and the SHA-256 of each binary of the release in
//! force. The command comes from the panel, which the operator trusts; the bytes it fetches
//! are checked against it, so whoever sits between the server and control can only make the
//! install fail.

use std::sync::LazyLock;

use hearth_shared::release::ReleaseManifest;
use sha2::Digest as _;

/// The install script, as served: the template with the node's systemd unit in it.
pub(crate) static SCRIPT: LazyLock<String> = LazyLock::new(|| {
    include_str!("../../deploy/install-node.sh")
        .replace("@UNIT@", include_str!("../../deploy/hearth-node.service").trim_end())
});

/// The path of the script under the node API's prefix.
pub(crate) const SCRIPT_PATH: &str = "install/node.sh";

/// The command that installs and enrolls a node with `token` on a fresh Linux server (as root),
/// from control at `control` (`pin`: its self-signed certificate's SHA-256), the node to
/// listen on UDP `port`; `None` when no release is in force or it has no Linux binary.
pub(crate) fn command(
    control: &str,
    api_prefix: &str,
    token: &str,
    pin: Option<&str>,
    port: u16,
    release: Option<&ReleaseManifest>,
) -> Option<String> {
    let hashes: Vec<String> = release?
        .files
        .iter()
        .filter(|f| f.os == "linux")
        .map(|f| format!("{}={}", f.arch, hex::encode(f.sha256)))
        .collect();
    if hashes.is_empty() {
        return None;
    }
    let script = hex::encode(sha2::Sha256::digest(SCRIPT.as_bytes()));
    let pin = pin.map(|pin| format!(" --control-pin {pin}")).unwrap_or_default();
    // `-k`: control's certificate may be its own; what is fetched is checked by its hash. The
    // script goes to a file of its own (`mktemp`), checked before it runs.
    Some(format!(
        "f=$(mktemp) && curl -fsSLk {control}/{api_prefix}/{SCRIPT_PATH} -o \"$f\" && echo \"{script}  $f\" | sha256sum -c --quiet && sh \"$f\" \
         --control {control} --api-prefix {api_prefix} --token={token}{pin} --port {port} --sha256 {hashes}",
        hashes = hashes.join(","),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_shared::release::ReleaseFile;

    #[test]
    fn the_script_carries_the_unit_and_the_command_its_hash() {
        assert!(!SCRIPT.contains("@UNIT@"));
        assert!(SCRIPT.contains("ExecStart=/opt/hearth-node/hearth-node supervise"));
        let file =
            |os: &str, arch: &str, byte| ReleaseFile { os: os.into(), arch: arch.into(), len: 1, sha256: [byte; 32] };
        let release = ReleaseManifest {
            version: "0.2.0".into(),
            built: 1,
            files: vec![file("linux", "x86_64", 1), file("linux", "aarch64", 2), file("freebsd", "x86_64", 3)],
        };
        let line = command("https://c.example:8443", "api-x", "-tok", Some("ab"), 443, Some(&release)).unwrap();
        assert!(line.contains(&hex::encode(sha2::Sha256::digest(SCRIPT.as_bytes()))));
        assert!(line.contains("--token=-tok --control-pin ab --port 443"));
        assert!(line.ends_with(&format!("--sha256 x86_64={},aarch64={}", hex::encode([1; 32]), hex::encode([2; 32]))));
        assert!(!line.contains('\n'), "one line");
        assert_eq!(command("https://c", "a", "t", None, 443, None), None, "no release, no command");
        let bsd = ReleaseManifest { files: vec![file("freebsd", "x86_64", 3)], ..release };
        assert_eq!(command("https://c", "a", "t", None, 443, Some(&bsd)), None, "no Linux binary, no command");
    }
}
