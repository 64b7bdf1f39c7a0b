//! The README's first command, run as written: `bash deploy/local.sh` makes a data directory,
//! brings the whole of Hearth up on loopback (edge, control, an enrolled node, a demo user),
//! and prints a sing-box configuration that carries traffic through the node.

use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
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
        .process_group(0)
        .arg(repo_root().join("deploy/local.sh"))
        .env("HEARTH_DATA_DIR", &data)
        .env("HEARTH_CARGO_BUILD_ARGS", hearth_tests::BUILD_ARGS)
        .env("HEARTH_EDGE_LISTEN", "127.0.0.1:0")
        .env("HEARTH_LISTEN", "127.0.0.1:0")
        .env("HEARTH_NODE_PORT", hearth_tests::edge::free_port().unwrap().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // Whatever happens, nothing the script started outlives the test.
    struct Group(u32);
    impl Drop for Group {
        fn drop(&mut self) {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.0)]).status();
        }
    }
    let _group = Group(child.id());
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
    let wait_for = |prefix: &str| loop {
        let line = rx.recv_timeout(Duration::from_secs(120)).unwrap_or_else(|_| panic!("no line starting {prefix:?}"));
        if let Some(rest) = line.strip_prefix(prefix) {
            break rest.to_owned();
        }
    };
    wait_for("hearth-node listening on ");
    let link = wait_for("Demo user's subscription link: ");
    assert!(link.starts_with(&url), "the demo link is served by the edge: {link}");
    let config = wait_for("sing-box client configuration (SOCKS on 127.0.0.1:1080): ");
    wait_for("Hearth is running.");
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
    // The edge's health answer is under its secret API prefix (edge.toml's api_prefix).
    let edge_toml = std::fs::read_to_string(data.join("edge.toml")).unwrap();
    let api_prefix = edge_toml
        .lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix("api_prefix")?
                .trim()
                .strip_prefix('=')?
                .trim()
                .strip_prefix('"')?
                .strip_suffix('"')
        })
        .expect("edge.toml names the api_prefix")
        .to_owned();
    let health = hearth_tests::http().build().unwrap().get(format!("{url}/{api_prefix}/healthz")).send().await.unwrap();
    assert!(health.text().await.unwrap().starts_with("ok\n"));
    let pem = std::fs::read(data.join("tls.crt")).unwrap();
    let https = hearth_tests::http().tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()]).build().unwrap();
    let health = https.get(format!("{control}/healthz")).send().await.unwrap();
    assert_eq!(health.text().await.unwrap(), "ok\n", "control answers over HTTPS with the certificate init made");
    // The printed setup link opens the admin panel.
    let setup_url = setup.split_whitespace().find(|word| word.starts_with("https://")).expect("a setup URL");
    let page = https.get(setup_url).send().await.unwrap();
    assert_eq!(page.status(), reqwest::StatusCode::OK);
    assert!(page.headers()["content-security-policy"].to_str().unwrap().contains("default-src 'none'"));
    assert!(page.text().await.unwrap().contains("<div id=\"app\"></div>"), "the admin panel's page");
    // The printed sing-box configuration carries traffic through the node (on another SOCKS
    // port, so the test never collides with a real one).
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let outbound = config["outbounds"][0].take();
    let client = hearth_tests::node::ProxyClient::sing_box(outbound).unwrap();
    let web = hearth_tests::node::http_server(b"through the node".to_vec()).await.unwrap();
    // The demo user was added from the shell a moment ago; the node has it within seconds.
    let got = hearth_tests::node::fetch_eventually(&client, web).await.expect("no traffic through the node");
    assert_eq!(got, b"through the node");
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let status = child.wait().unwrap();
    assert!(status.success(), "Hearth did not stop cleanly on SIGTERM: {status}");
}
