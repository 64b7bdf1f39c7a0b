//! The README's first command, run as written: `bash deploy/local.sh` makes a data directory
//! and brings Hearth up on loopback.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use hearth_tests::repo_root;

#[tokio::test]
async fn deploy_local_brings_hearth_up_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut command = Command::new("bash");
    hearth_tests::plain_cargo_env(&mut command);
    let mut child = command
        .arg(repo_root().join("deploy/local.sh"))
        .env("HEARTH_DATA_DIR", &data)
        .env("HEARTH_EDGE_LISTEN", "127.0.0.1:0")
        .env("HEARTH_LISTEN", "127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let url = loop {
        let line = rx.recv_timeout(Duration::from_secs(300)).expect("deploy/local.sh said nothing for 5 minutes");
        if let Some(url) = line.strip_prefix("hearth-edge listening on ") {
            break url.to_owned();
        }
        seen.push(line);
    };
    let control = loop {
        let line = rx.recv_timeout(Duration::from_secs(120)).expect("control did not start");
        if let Some(url) = line.strip_prefix("hearth-control listening on ") {
            break url.to_owned();
        }
        seen.push(line);
    };
    let setup = rx.recv_timeout(Duration::from_secs(10)).expect("no setup link");
    assert!(setup.contains("/setup#"), "{setup}");
    let output = seen.join("\n");
    assert!(output.contains("Keep these two files offline"), "{output}");
    assert!(output.contains("(key record v1)"), "{output}");
    for file in [
        "root.pub",
        "signing.record",
        "release.record",
        "recovery.pub",
        "edge.toml",
        "edge.db",
        "control.db",
        "master.key",
    ] {
        assert!(data.join(file).exists(), "{file} missing");
    }
    let health = hearth_tests::http().build().unwrap().get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(health.text().await.unwrap(), "ok\n");
    let pem = std::fs::read(data.join("tls.crt")).unwrap();
    let https = hearth_tests::http().tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()]).build().unwrap();
    let health = https.get(format!("{control}/healthz")).send().await.unwrap();
    assert_eq!(health.text().await.unwrap(), "ok\n", "control answers over HTTPS with the certificate init made");
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let status = child.wait().unwrap();
    assert!(status.success(), "Hearth did not stop cleanly on SIGTERM: {status}");
}
