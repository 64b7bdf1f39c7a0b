//! Every profile Hearth serves makes the app check the node it reaches. Real clients, each
//! on the profile served to the apps it stands for (sing-box 1.12 on what sing-box apps
//! before 1.13, HiddifyNext and Karing get; sing-box 1.13 on the key pin; sing-box 1.14 on
//! both; mihomo on the Clash profile and on the share links), reach the real node, enrolled
//! as the install does; then an impostor takes the node's address, holding the node's own
//! settings and credential set (so it lets the user in) but a certificate of its own made
//! out to the same name, and every one of them refuses it, while a client that checks
//! nothing goes through it (so it is the check that refuses, not the impostor that fails).
//!
//! Before the profiles carried a check for every app (issue 44), the profile of sing-box apps
//! before 1.13, HiddifyNext and Karing said `insecure: true` with no pin: sing-box 1.12 and
//! 1.14 on it went through the impostor; the others refused it already.

use std::path::Path;
use std::time::Duration;

use hearth_tests::control::{Api, ControlDir, ControlProcess};
use hearth_tests::node::{NodeProcess, ProxyClient, fetch, fetch_eventually, http_server};
use serde_json::{Value, json};

/// What an app is served at `link` when it says `user_agent`.
async fn served(http: &reqwest::Client, link: &str, user_agent: &str) -> String {
    let answer = http.get(link).header("user-agent", user_agent).send().await.unwrap();
    assert_eq!(answer.status(), 200, "{user_agent}");
    answer.text().await.unwrap()
}

/// The one hysteria2 outbound of a sing-box profile.
fn outbound(profile: &str) -> Value {
    let profile: Value = serde_json::from_str(profile).unwrap();
    let outbounds: Vec<&Value> =
        profile["outbounds"].as_array().unwrap().iter().filter(|o| o["type"] == "hysteria2").collect();
    assert_eq!(outbounds.len(), 1, "{profile}");
    outbounds[0].clone()
}

/// A served profile and the client that runs it.
struct App {
    name: &'static str,
    start: Box<dyn Fn() -> anyhow::Result<ProxyClient>>,
}

/// Whether `client` gets nothing through in two tries, 8 s each at most.
async fn refused(client: &ProxyClient, web: std::net::SocketAddr) -> Result<(), Vec<u8>> {
    for _ in 0..2 {
        if let Ok(Ok(body)) = tokio::time::timeout(Duration::from_secs(8), fetch(client, web)).await {
            return Err(body);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(())
}

/// The impostor's state directory: the node's settings without control or an edge (it
/// registers nothing, pulls nothing), its trust and credential set; no certificate, so it
/// makes its own for the node's name at its first start.
fn impostor_of(node: &Path, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let settings = std::fs::read_to_string(node.join("node.toml")).unwrap();
    let settings: String = settings
        .lines()
        .filter(|line| !line.starts_with("control_url") && !line.starts_with("edge_url"))
        .map(|line| format!("{line}\n"))
        .collect();
    assert!(settings.contains("tls_name = "), "enroll names the certificate: {settings}");
    std::fs::write(dir.join("node.toml"), settings).unwrap();
    for file in ["trust.bin", "creds.envelope", "creds.delta"] {
        if node.join(file).exists() {
            std::fs::copy(node.join(file), dir.join(file)).unwrap();
        }
    }
}

#[tokio::test]
async fn every_served_profile_refuses_an_impostor_and_reaches_the_node() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let control = ControlProcess::start(&dir, &[]).unwrap();
    let http = dir.client().unwrap();
    let api = Api { token: control.setup(&http, "admin").await.unwrap(), http: http.clone() };
    let state = temp.path().join("node");
    let (port, _) = control.enroll_node(&http, &api.token, &state).await.unwrap();
    let alice = api.post(&control, "/users", json!({ "name": "alice" })).await;
    let link = alice["link"].as_str().unwrap().to_owned();
    let node = NodeProcess::start(&state).unwrap();
    let pin = hex::encode(node.certificate_sha256().unwrap());

    // What each app is served. Apps that name no sing-box version get what 1.11 gets.
    let old = served(&http, &link, "SFA/1.11.9 (Android 14; sing-box 1.11.9; language en_US)").await;
    for same in ["HiddifyNext/2.5.7 (android) like ClashMeta v2rayNG v2rayN sing-box", "Karing/1.1.2.605 android"] {
        assert_eq!(outbound(&served(&http, &link, same).await), outbound(&old), "{same}");
    }
    let old_tls = outbound(&old)["tls"].clone();
    assert!(old_tls.get("insecure").is_none(), "{old_tls}");
    assert_eq!(old_tls["server_name"], "127.0.0.1", "the name the node's certificate is made out to");
    assert!(old_tls["certificate"][0].as_str().unwrap().starts_with("-----BEGIN CERTIFICATE"), "{old_tls}");
    let new = served(&http, &link, "SFI/1.13.0 (Apple iOS 18.1; sing-box 1.13.0)").await;
    let new_tls = outbound(&new)["tls"].clone();
    assert!(new_tls.get("insecure").is_none() && new_tls["certificate_public_key_sha256"].is_array(), "{new_tls}");
    let yaml = served(&http, &link, "mihomo/1.19.32").await;
    assert!(yaml.contains(&format!("fingerprint: {pin}")) && yaml.contains("skip-cert-verify: false"), "{yaml}");
    let list = served(&http, &link, "v2rayN/7.12.5").await;
    let links =
        String::from_utf8(base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &list).unwrap()).unwrap();
    assert!(links.contains(&format!("pinSHA256={pin}&pcs={pin}")) && !links.contains("insecure"), "{links}");

    let sing_box = |version: Option<&'static str>| match version {
        Some(version) => hearth_tests::sing_box_release(version).unwrap(),
        None => hearth_tests::sing_box().unwrap(),
    };
    let apps: Vec<App> = vec![
        ("sing-box 1.12 on the profile of sing-box apps before 1.13, HiddifyNext and Karing", Some("1.12.23"), &old),
        ("sing-box 1.14 on that profile", None, &old),
        ("sing-box 1.13 on the profile of sing-box apps from 1.13", Some("1.13.21"), &new),
        ("sing-box 1.14 on that profile", None, &new),
    ]
    .into_iter()
    .map(|(name, version, profile)| {
        let (program, outbound) = (sing_box(version), outbound(profile));
        App { name, start: Box::new(move || ProxyClient::sing_box_of(&program, outbound.clone())) }
    })
    .chain([
        App { name: "mihomo on the Clash profile", start: Box::new(move || ProxyClient::mihomo(&yaml)) },
        App { name: "mihomo on the share links", start: Box::new(move || ProxyClient::mihomo_links(&list)) },
    ])
    .collect();

    // Each reaches the real node.
    let web = http_server(b"the real node".to_vec()).await.unwrap();
    for app in &apps {
        let client = (app.start)().unwrap();
        let got = fetch_eventually(&client, web).await;
        assert_eq!(got.unwrap_or_else(|e| panic!("{}: {e:#}", app.name)), b"the real node", "{}", app.name);
    }

    // The impostor takes the node's address with a certificate of its own, for the same name.
    node.stop().unwrap();
    let forged = temp.path().join("impostor");
    impostor_of(&state, &forged);
    let impostor = NodeProcess::start(&forged).unwrap();
    assert_eq!(impostor.addr.port(), port, "on the node's address");
    assert_ne!(hex::encode(impostor.certificate_sha256().unwrap()), pin);
    // It lets alice in: a client that checks nothing goes through it.
    let mut unchecked = outbound(&old);
    unchecked["tls"] = json!({ "enabled": true, "insecure": true, "alpn": ["h3"] });
    let trusting = ProxyClient::sing_box(unchecked).unwrap();
    assert_eq!(fetch_eventually(&trusting, web).await.unwrap(), b"the real node", "the impostor carries alice");
    drop(trusting);
    // Every served profile refuses it.
    for app in &apps {
        let client = (app.start)().unwrap();
        if let Err(body) = refused(&client, web).await {
            panic!("{} went through the impostor: {}", app.name, String::from_utf8_lossy(&body));
        }
    }
    impostor.stop().unwrap();
}
