//! Real certificates by ACME, against a real CA (Debian's Pebble, `hearth_tests::acme`): a
//! node gets one by HTTP-01 and by TLS-ALPN-01, serves it on QUIC and TCP to clients that ask
//! for its domain (its own self-signed one to anyone else), renews it at two thirds of its
//! life and when told (SIGHUP) without dropping a transfer, and keeps serving the one it has
//! when the CA does not answer, saying so.

use std::path::Path;
use std::time::{Duration, Instant};

use hearth_shared::sha256;
use hearth_shared::wire::{CredEntry, CredentialSet};
use hearth_tests::acme::Pebble;
use hearth_tests::control_sim::ControlSim;
use hearth_tests::node::{H3Client, NodeProcess, ProxyClient, fetch, fetch_eventually, http_server_paced, metric};

/// The node's domain (Pebble's DNS answers 127.0.0.1 for every name).
const DOMAIN: &str = "node1.hearth.test";
/// The name of the node's own certificate.
const OWN: &str = "own.hearth.test";

/// Whether `chain` (DER, leaf first) is valid for `name` under the root `root` (PEM) now.
fn verifies(chain: &[Vec<u8>], name: &str, root: &str) -> bool {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(root.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider).build().unwrap();
    let Some((leaf, rest)) = chain.split_first() else { return false };
    let rest: Vec<CertificateDer<'_>> = rest.iter().map(|c| CertificateDer::from(c.as_slice())).collect();
    let name = ServerName::try_from(name.to_owned()).unwrap();
    rustls::client::danger::ServerCertVerifier::verify_server_cert(
        verifier.as_ref(),
        &CertificateDer::from(leaf.as_slice()),
        &rest,
        &name,
        &[],
        UnixTime::now(),
    )
    .is_ok()
}

/// The chain the node shows over QUIC to a client asking for `name`.
async fn over_quic(node: &NodeProcess, name: &str) -> Vec<Vec<u8>> {
    H3Client::connect_as(node.addr, std::net::Ipv4Addr::LOCALHOST.into(), name).await.unwrap().certificates.clone()
}

/// Waits (up to `within`) for the node to show, to a client asking for the domain, a chain
/// that `root` vouches for and that is not `before`; returns it.
async fn public_chain(node: &NodeProcess, root: &str, before: Option<&[Vec<u8>]>, within: Duration) -> Vec<Vec<u8>> {
    let started = Instant::now();
    loop {
        let chain = over_quic(node, DOMAIN).await;
        if verifies(&chain, DOMAIN, root) && before.is_none_or(|before| before != chain.as_slice()) {
            return chain;
        }
        assert!(started.elapsed() < within, "no new certificate for {DOMAIN} within {within:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A node holding user 7 (`alice-password`) with `settings` in its `node.toml`.
fn node(dir: &Path, settings: &str) -> NodeProcess {
    let mut sim = ControlSim::new();
    hearth_tests::node::state_dir_with(dir, &sim, 1, &format!("tls_name = \"{OWN}\"\n{settings}")).unwrap();
    let set = CredentialSet::new(1, vec![CredEntry::new(7, sha256(b"alice-password"))]).unwrap();
    std::fs::write(dir.join("creds.envelope"), sim.creds(&set).envelope().unwrap()).unwrap();
    NodeProcess::start(dir).unwrap()
}

fn hup(node: &NodeProcess) {
    assert!(std::process::Command::new("kill").args(["-HUP", &node.pid().to_string()]).status().unwrap().success());
}

/// HTTP-01 on a listener of the node's own, from a CA that asks for External Account Binding
/// (as ZeroSSL does); certificates that live 30 s, renewed at two thirds of their life with
/// nothing asked.
#[tokio::test]
async fn a_node_gets_a_certificate_by_http_01_and_renews_it_in_time() {
    let temp = tempfile::tempdir().unwrap();
    let http = hearth_tests::edge::free_port().unwrap();
    let (kid, key) = ("hearth-kid", "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W");
    let pebble =
        Pebble::start_with(http, hearth_tests::edge::free_port().unwrap(), Some(30), Some((kid, key))).unwrap();
    let node = node(
        &temp.path().join("node"),
        &format!(
            "[acme]\ndomain = \"{DOMAIN}\"\ndirectory = \"{}\"\nchallenge = \"http-01\"\n\
             http_listen = \"127.0.0.1:{http}\"\nca_root = \"{}\"\neab_kid = \"{kid}\"\neab_hmac_key = \"{key}\"\n",
            pebble.directory,
            pebble.api_root.display()
        ),
    );
    assert_eq!(node.said("hearth-node ACME HTTP-01 on ").unwrap(), format!("127.0.0.1:{http}"));
    let metrics = node.metrics_url().unwrap();
    let root = pebble.root().await.unwrap();
    let first = public_chain(&node, &root, None, Duration::from_secs(30)).await;
    // Anyone asking for another name, or none, gets the node's own certificate.
    let own = over_quic(&node, OWN).await;
    assert_eq!(own[0], std::fs::read(node.state().join("tls.crt")).map(|pem| der_of(&pem)).unwrap());
    assert!(!verifies(&own, OWN, &root));
    let expiry = metric(&metrics, "hearth_node_certificate_expiry_seconds").await.unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!((now..now + 40).contains(&expiry), "a 30 s certificate: {expiry}");
    // Kept as keys are kept.
    let key = std::fs::metadata(node.state().join("acme/key.pem")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&key.permissions()) & 0o777, 0o600);
    // Two thirds into its 30 s, a new one, unasked.
    let second = public_chain(&node, &root, Some(&first), Duration::from_secs(40)).await;
    assert_ne!(first[0], second[0]);
    assert_eq!(metric(&metrics, "hearth_node_acme_failures").await.unwrap(), 0);
    node.stop().unwrap();
}

/// TLS-ALPN-01 on the masquerade's TCP port; a renewal asked for (SIGHUP) swaps the
/// certificate while a transfer through a client that checks it the usual way goes on whole;
/// a CA that does not answer leaves the node serving the one it has, and counting failures.
#[tokio::test]
async fn a_node_gets_a_certificate_by_tls_alpn_01_and_swaps_it_live() {
    let temp = tempfile::tempdir().unwrap();
    let tcp = hearth_tests::edge::free_port().unwrap();
    let mut pebble = Pebble::start(hearth_tests::edge::free_port().unwrap(), tcp, None).unwrap();
    let node = node(
        &temp.path().join("node"),
        &format!(
            "masquerade_tcp = \"127.0.0.1:{tcp}\"\n[acme]\ndomain = \"{DOMAIN}\"\n\
             directory = \"{}\"\nca_root = \"{}\"\n",
            pebble.directory,
            pebble.api_root.display()
        ),
    );
    let metrics = node.metrics_url().unwrap();
    let root = pebble.root().await.unwrap();
    let roots = temp.path().join("roots.pem");
    std::fs::write(&roots, &root).unwrap();
    let first = public_chain(&node, &root, None, Duration::from_secs(30)).await;

    // A client checking the domain the usual way, trusting the CA's root as a phone trusts
    // public CAs: through the node, while the certificate is renewed under it.
    let outbound = serde_json::json!({
        "type": "hysteria2",
        "server": "127.0.0.1",
        "server_port": node.addr.port(),
        "password": "alice-password",
        "tls": { "enabled": true, "server_name": DOMAIN, "alpn": ["h3"] }
    });
    let alice = ProxyClient::sing_box_trusting(&hearth_tests::sing_box().unwrap(), outbound, Some(&roots)).unwrap();
    // 8 MB in 16 KiB pieces 10 ms apart: some 5 s.
    let body: Vec<u8> = (0..8_000_000u32).map(|i| (i * 13 + i / 7) as u8).collect();
    let web = http_server_paced(body.clone(), Duration::from_millis(10)).await.unwrap();
    let ready = http_server_paced(b"ready".to_vec(), Duration::ZERO).await.unwrap();
    fetch_eventually(&alice, ready).await.unwrap();
    let transfer = tokio::spawn(async move { fetch(&alice, web).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    hup(&node);
    let second = public_chain(&node, &root, Some(&first), Duration::from_secs(30)).await;
    assert!(!transfer.is_finished(), "the renewal came while the transfer ran");
    let got = transfer.await.unwrap().unwrap();
    assert!(got == body, "the transfer came whole across the renewal");

    // The CA goes away: asked again, the node keeps the certificate it has and says why not.
    pebble.stop();
    hup(&node);
    let started = Instant::now();
    while metric(&metrics, "hearth_node_acme_failures").await.unwrap() == 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "the failure was not counted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(over_quic(&node, DOMAIN).await, second, "still the certificate it had");
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(node.state().join("acme/status.json")).unwrap()).unwrap();
    let error = status["error"].as_str().unwrap();
    assert!(error.starts_with("the CA: ") && error.contains("Connection refused"), "{status}");
    node.stop().unwrap();
}

/// The DER of the first certificate of a PEM file's bytes.
fn der_of(pem: &[u8]) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject as _;
    rustls::pki_types::CertificateDer::from_pem_slice(pem).unwrap().to_vec()
}

/// What an app is served at `link` when it says `user_agent`.
async fn served(http: &reqwest::Client, link: &str, user_agent: &str) -> String {
    let answer = http.get(link).header("user-agent", user_agent).send().await.unwrap();
    assert_eq!(answer.status(), 200, "{user_agent}");
    answer.text().await.unwrap()
}

/// The one hysteria2 outbound of a sing-box profile.
fn outbound(profile: &str) -> serde_json::Value {
    let profile: serde_json::Value = serde_json::from_str(profile).unwrap();
    profile["outbounds"].as_array().unwrap().iter().find(|o| o["type"] == "hysteria2").unwrap().clone()
}

/// A node added with a domain through control gets its certificate (control names the CA),
/// and the profiles control serves then check it the usual way: real sing-box (1.12, 1.13,
/// 1.14) and mihomo, trusting the CA's root as phones trust public CAs, connect with no pin.
/// The CA refusing is said in the panel's view of the node; the owner dropping the domain
/// pins the node's own certificate again, and clients still connect.
#[tokio::test]
async fn served_profiles_check_a_nodes_public_certificate_the_usual_way() {
    use hearth_tests::control::{Api, ControlDir, ControlProcess};
    let temp = tempfile::tempdir().unwrap();
    let http_01 = hearth_tests::edge::free_port().unwrap();
    let mut pebble = Pebble::start(http_01, hearth_tests::edge::free_port().unwrap(), None).unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let settings = std::fs::read_to_string(dir.path.join("control.toml")).unwrap();
    let acme = format!("\n[acme]\ndirectory = \"{}\"\nca_root = \"{}\"\n", pebble.directory, pebble.api_root.display());
    std::fs::write(dir.path.join("control.toml"), settings + &acme).unwrap();
    let control = ControlProcess::start(&dir, &[]).unwrap();
    let http = dir.client().unwrap();
    let api = Api { token: control.setup(&http, "admin").await.unwrap(), http: http.clone() };
    let state = temp.path().join("node");
    let domain = serde_json::json!({ "domain": DOMAIN });
    let (port, _, printed) = control.enroll_node_with(&http, &api.token, &state, domain).await.unwrap();
    // What the owner must set up, as the one-line install shows it.
    assert!(
        printed.contains(&format!(
            "point {DOMAIN} at this server (a DNS A or AAAA record) and open UDP {port} and TCP 80"
        )),
        "{printed}"
    );
    // HTTP-01 where this test's CA looks (a real node listens on TCP 80).
    let settings = std::fs::read_to_string(state.join("node.toml")).unwrap();
    assert!(settings.contains(&format!("[acme]\ndomain = \"{DOMAIN}\"")), "{settings}");
    std::fs::write(state.join("node.toml"), format!("{settings}http_listen = \"127.0.0.1:{http_01}\"\n")).unwrap();
    let alice = api.post(&control, "/users", serde_json::json!({ "name": "alice" })).await;
    let link = alice["link"].as_str().unwrap().to_owned();
    let node = NodeProcess::start(&state).unwrap();
    let id = api.get(&control, "/nodes").await["nodes"][0]["id"].as_u64().unwrap();
    let view = async || api.get(&control, &format!("/nodes/{id}")).await;
    let started = Instant::now();
    while view().await["acme"]["public"] != true {
        assert!(started.elapsed() < Duration::from_secs(40), "no public certificate: {}", view().await);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let roots = temp.path().join("roots.pem");
    pebble.write_root(&roots).await.unwrap();

    // The profiles check the domain the usual way: no pin, no certificate, never insecure.
    let old = served(&http, &link, "SFA/1.11.9 (Android 14; sing-box 1.11.9)").await;
    let new = served(&http, &link, "SFI/1.13.0 (Apple iOS 18.1; sing-box 1.13.0)").await;
    for profile in [&old, &new] {
        let tls = outbound(profile)["tls"].clone();
        assert_eq!(tls, serde_json::json!({ "enabled": true, "server_name": DOMAIN, "alpn": ["h3"] }));
    }
    let yaml = served(&http, &link, "mihomo/1.19.32").await;
    assert!(yaml.contains(&format!("sni: {DOMAIN}")) && yaml.contains("skip-cert-verify: false"), "{yaml}");
    assert!(!yaml.contains("fingerprint"), "{yaml}");
    let web = hearth_tests::node::http_server(b"checked the usual way".to_vec()).await.unwrap();
    let sing_box = |version: Option<&str>| match version {
        Some(version) => hearth_tests::sing_box_release(version).unwrap(),
        None => hearth_tests::sing_box().unwrap(),
    };
    for (version, profile) in [(Some("1.12.23"), &old), (Some("1.13.21"), &new), (None, &new)] {
        let client = ProxyClient::sing_box_trusting(&sing_box(version), outbound(profile), Some(&roots)).unwrap();
        assert_eq!(fetch_eventually(&client, web).await.unwrap(), b"checked the usual way", "sing-box {version:?}");
    }
    let client = ProxyClient::mihomo_trusting(&yaml, Some(&roots)).unwrap();
    assert_eq!(fetch_eventually(&client, web).await.unwrap(), b"checked the usual way", "mihomo");
    drop(client);
    // Without the CA's root, the same profile gets nowhere: it is the check that lets it in.
    let untrusting = ProxyClient::sing_box(outbound(&new)).unwrap();
    assert!(tokio::time::timeout(Duration::from_secs(8), fetch(&untrusting, web)).await.map_or(true, |r| r.is_err()));
    drop(untrusting);

    // The CA stops answering: a renewal asked for fails, the panel says why, links stay.
    pebble.stop();
    hup(&node);
    let started = Instant::now();
    while view().await["acme"]["error"].as_str().unwrap_or_default().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30), "the failure never reached control");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(view().await["acme"]["error"].as_str().unwrap().contains("Connection refused"));
    assert_eq!(view().await["acme"]["public"], true, "the certificate held is still good");

    // The owner drops the domain: links pin the node's own certificate, and clients connect.
    api.patch(&control, &format!("/nodes/{id}"), serde_json::json!({ "domain": "" })).await;
    let pinned = served(&http, &link, "SFI/1.13.0 (Apple iOS 18.1; sing-box 1.13.0)").await;
    let tls = outbound(&pinned)["tls"].clone();
    assert!(tls["certificate_public_key_sha256"].is_array() && tls["server_name"] != DOMAIN, "{tls}");
    let client = ProxyClient::sing_box(outbound(&pinned)).unwrap();
    assert_eq!(fetch_eventually(&client, web).await.unwrap(), b"checked the usual way", "pinned again");
    node.stop().unwrap();
}

/// Control's panel gets its certificate for its domain the same way (TLS-ALPN-01 on its own
/// HTTPS port), and Chromium, trusting the CA's root (in its certificate store, as a browser
/// trusts public CAs) and nothing else, loads the panel; asked by another name, control shows
/// its self-signed certificate, which the browser refuses.
#[tokio::test]
async fn chromium_loads_the_panel_on_its_certificate_by_acme() {
    use hearth_tests::control::{ControlDir, ControlProcess};
    const PANEL: &str = "panel.hearth.test";
    let temp = tempfile::tempdir().unwrap();
    let port = hearth_tests::edge::free_port().unwrap();
    let mut pebble = Pebble::start(hearth_tests::edge::free_port().unwrap(), port, None).unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let settings = std::fs::read_to_string(dir.path.join("control.toml")).unwrap();
    let acme = format!(
        "\n[acme]\ndirectory = \"{}\"\nca_root = \"{}\"\ndomain = \"{PANEL}\"\n",
        pebble.directory,
        pebble.api_root.display()
    );
    std::fs::write(dir.path.join("control.toml"), settings + &acme).unwrap();
    let env =
        [("HEARTH_LISTEN", format!("127.0.0.1:{port}")), ("HEARTH_PUBLIC_URL", format!("https://{PANEL}:{port}"))];
    let control = ControlProcess::start(&dir, &env).unwrap();
    let admin = format!("https://{PANEL}:{port}/{}/", dir.setting("admin_prefix").unwrap());

    // A browser profile that trusts the CA's root and nothing else of this test's.
    let home = tempfile::tempdir().unwrap();
    let nssdb = home.path().join(".pki/nssdb");
    std::fs::create_dir_all(&nssdb).unwrap();
    let certutil = |args: &[&str]| {
        let out = std::process::Command::new("certutil")
            .arg("-d")
            .arg(format!("sql:{}", nssdb.display()))
            .args(args)
            .output();
        let out = out.expect("certutil (libnss3-tools: tests/run installs it)");
        assert!(out.status.success(), "certutil {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    certutil(&["-N", "--empty-password"]);
    let root = home.path().join("root.pem");
    pebble.write_root(&root).await.unwrap();
    certutil(&["-A", "-t", "C,,", "-n", "hearth test CA", "-i", root.to_str().unwrap()]);
    let (_driver, browser) = browser(home.path()).await;

    // Once control holds its certificate, the panel loads for its domain.
    let started = Instant::now();
    loop {
        browser.goto(&admin).await.unwrap();
        if browser.source().await.unwrap().contains("<div id=\"app\">") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(40), "the panel never loaded on a certificate the CA issued");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(browser.title().await.unwrap(), "Hearth");
    // Asked by another name, control shows its self-signed certificate: the browser refuses it.
    let other = admin.replace(PANEL, "other.hearth.test");
    browser.goto(&other).await.unwrap();
    assert!(
        !browser.source().await.unwrap().contains("<div id=\"app\">"),
        "the browser took a self-signed certificate"
    );
    pebble.stop();
    drop(control);
}

/// chromedriver and a headless Chromium whose home (its certificate store) is `home`, that
/// checks certificates (unlike the panel's other tests) and finds the test's names on loopback.
async fn browser(home: &Path) -> (Driver, fantoccini::Client) {
    use std::os::unix::process::CommandExt as _;
    let port = hearth_tests::edge::free_port().unwrap();
    let chromedriver = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
    let child = std::process::Command::new(&chromedriver)
        .process_group(0)
        .arg(format!("--port={port}"))
        .env("HOME", home)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {chromedriver} (tests/run installs it): {e}"));
    let profile = home.join("profile");
    let driver = Driver(child);
    let mut capabilities = serde_json::Map::new();
    capabilities.insert("acceptInsecureCerts".into(), serde_json::json!(false));
    capabilities.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--host-resolver-rules=MAP *.hearth.test 127.0.0.1",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let started = Instant::now();
    loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let url = format!("http://127.0.0.1:{port}");
        match fantoccini::ClientBuilder::new(connector).capabilities(capabilities.clone()).connect(&url).await {
            Ok(client) => return (driver, client),
            Err(e) if started.elapsed() > Duration::from_secs(30) => panic!("no browser session: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// chromedriver and the browser it started (one process group).
struct Driver(std::process::Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").args(["-KILL", "--", &format!("-{}", self.0.id())]).status();
        let _ = self.0.wait();
    }
}
