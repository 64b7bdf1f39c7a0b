//! A node's self-update, under its supervisor, against an edge the test controls (as a
//! compromised or broken edge would be): only a release signed by the release key, not
//! expired, newer than what runs, for this machine, with the very bytes the manifest names is
//! installed; a new binary that cannot start is rolled back; the node keeps serving its users
//! through all of it and says what happened in its pulls.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hearth_shared::nodeauth;
use hearth_shared::sha256;
use hearth_shared::wire::{CredEntry, CredentialSet};
use hearth_tests::control_sim::{ControlSim, now, release};
use hearth_tests::node::{ProxyClient, Supervised, fetch, fetch_eventually, http_server};
use hearth_tests::stand_in::{Answer, stand_in};

const API: &str = "api-0123456789abcdef";

/// What the stand-in edge serves, and what the node said to it.
#[derive(Default)]
struct Served {
    creds: Vec<u8>,
    keys: String,
    release: Option<u64>,
    manifest: Vec<u8>,
    files: HashMap<String, Vec<u8>>,
    /// The node's last `hearth-node-version` and `hearth-node-update`.
    running: String,
    update: String,
    /// How many pulls the node made, and how many times it asked for a manifest.
    pulls: u64,
    manifests: u64,
}

/// An edge that answers the node API from `served`, over plain HTTP/1.1.
async fn stand_in_edge(served: Arc<Mutex<Served>>) -> String {
    let prefix = format!("/{API}/nodes/1");
    let (url, _) = stand_in(move |request| {
        let after: u64 = request.param("after").and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut s = served.lock().unwrap();
        let answer = |status, headers, body: Vec<u8>| Answer { headers, ..Answer::bytes(status, &body) };
        match request.path.strip_prefix(&prefix).unwrap_or("") {
            "/creds" => {
                s.pulls += 1;
                s.running = request.header(nodeauth::NODE_VERSION_HEADER).unwrap_or_default();
                s.update = request.header(nodeauth::NODE_UPDATE_HEADER).unwrap_or_default();
                let mut headers = vec![(nodeauth::KEYS_HEADER, s.keys.clone())];
                if let Some(r) = s.release {
                    headers.push((nodeauth::RELEASE_HEADER, r.to_string()));
                }
                // As the edge answers: the set only when it is newer than the one held.
                let version = hearth_shared::envelope::Envelope::decode(&s.creds, 1 << 22)
                    .map_or(0, |envelope| envelope.header.version);
                if version > after { answer(200, headers, s.creds.clone()) } else { answer(204, headers, vec![]) }
            }
            "/release" if s.release.is_some() => {
                s.manifests += 1;
                answer(200, vec![], s.manifest.clone())
            }
            "/usage" => answer(202, vec![], b"queued\n".to_vec()),
            "/ack" => answer(204, vec![], vec![]),
            other => match other.strip_prefix("/release/").and_then(|name| s.files.get(name)) {
                Some(bytes) => answer(200, vec![], bytes.clone()),
                None => answer(404, vec![], b"not here\n".to_vec()),
            },
        }
    })
    .await;
    url
}

/// Waits until the node says `what` (checked on the stand-in edge's record of its pulls).
async fn until_said(served: &Arc<Mutex<Served>>, what: &str, check: impl Fn(&Served) -> bool) {
    let started = Instant::now();
    loop {
        {
            let s = served.lock().unwrap();
            if check(&s) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the node never said {what}: it runs {:?}, update {:?}",
                s.running,
                s.update
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn offer(served: &Arc<Mutex<Served>>, number: u64, (manifest, files): (Vec<u8>, Vec<(String, Vec<u8>)>)) {
    let mut s = served.lock().unwrap();
    s.release = Some(number);
    s.manifest = manifest;
    s.files = files.into_iter().collect();
}

/// A node under its supervisor, run from a copy of the binary (an update replaces it),
/// pulling from a stand-in edge, with alice in its set and through it.
struct Setup {
    served: Arc<Mutex<Served>>,
    bin: PathBuf,
    exe: PathBuf,
    /// The binary it started with.
    original: Vec<u8>,
    node: Supervised,
    alice: ProxyClient,
    /// A web server alice reaches through the node (20,000 bytes).
    web: std::net::SocketAddr,
}

/// Starts a [`Setup`] in `temp`, with `extra` lines of `node.toml`.
async fn supervised(temp: &std::path::Path, sim: &mut ControlSim, extra: &str) -> Setup {
    let set = CredentialSet::new(1, vec![CredEntry::new(1, sha256(b"alice-pw"))]).unwrap();
    let served = Arc::new(Mutex::new(Served {
        creds: sim.creds(&set).envelope().unwrap().to_vec(),
        keys: hearth_shared::trust::chain_to_header(&sim.key_records()),
        ..Served::default()
    }));
    let edge = stand_in_edge(served.clone()).await;

    let bin = temp.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let exe: PathBuf = bin.join("hearth-node");
    std::fs::copy(hearth_tests::binary("hearth-node").unwrap(), &exe).unwrap();
    let original = std::fs::read(&exe).unwrap();
    let state = temp.join("node");
    let port = hearth_tests::edge::free_port().unwrap();
    let settings = format!(
        "edge_url = \"{edge}\"\napi_prefix = \"{API}\"\nedge_poll_secs = 1\nreport_secs = 1\nupdate_health_secs = 2\n{extra}"
    );
    hearth_tests::node::state_dir_with(&state, sim, 1, &settings).unwrap();
    let toml = std::fs::read_to_string(state.join("node.toml")).unwrap();
    std::fs::write(
        state.join("node.toml"),
        toml.replace("127.0.0.1:0\"\nallow", &format!("127.0.0.1:{port}\"\nallow")),
    )
    .unwrap();
    let key = hearth_shared::keys::SecretKey::generate(hearth_shared::keys::Role::Node, &mut rand_core::OsRng).unwrap();
    hearth_tests::node::save_node_key(&state, &key).unwrap();
    let node = Supervised::start(&exe, &state).unwrap();

    let outbound = serde_json::json!({
        "type": "hysteria2", "server": "127.0.0.1", "server_port": port, "password": "alice-pw",
        "tls": { "enabled": true, "server_name": "localhost", "insecure": true, "alpn": ["h3"] }
    });
    let alice = ProxyClient::sing_box(outbound).unwrap();
    let web = http_server(vec![4; 20_000]).await.unwrap();
    fetch_eventually(&alice, web).await.unwrap();
    until_said(&served, "what it runs", |s| s.running == format!("{}@0", env!("CARGO_PKG_VERSION"))).await;
    Setup { served, bin, exe, original, node, alice, web }
}

/// A release's manifest and files, as the stand-in edge serves them, from what
/// [`release`] makes.
fn bundle((manifest, bundle): (Vec<u8>, Vec<u8>)) -> (Vec<u8>, Vec<(String, Vec<u8>)>) {
    let bundle: hearth_shared::release::ReleaseBundle = hearth_shared::wire::decode(&bundle, "bundle").unwrap();
    (manifest, bundle.files.into_iter().map(|(n, b)| (n, b.into_vec())).collect())
}

#[tokio::test]
async fn a_node_installs_only_a_good_release_and_rolls_back_one_that_cannot_start() {
    let temp = tempfile::tempdir().unwrap();
    let mut sim = ControlSim::new();
    let Setup { served, bin, exe, original, node, alice, web } = supervised(temp.path(), &mut sim, "").await;

    let arch = std::env::consts::ARCH;
    let later = now() + 3600;
    let files = |bytes: Vec<u8>| vec![("linux", arch, bytes)];
    let other_arch = if arch == "aarch64" { "x86_64" } else { "aarch64" };
    let mut tampered = bundle(release(&sim.release, 1005, "0.2.0", &files(original.clone()), later));
    tampered.1[0].1[1000] ^= 1;
    let refusals = [
        (1001, bundle(release(&sim.signing, 1001, "0.2.0", &files(original.clone()), later)), "release role"),
        (1002, bundle(release(&sim.release, 1002, "0.0.9", &files(original.clone()), later)), "not newer"),
        (
            1003,
            bundle(release(&sim.release, 1003, "0.2.0", &[("linux", other_arch, original.clone())], later)),
            "no binary for",
        ),
        (1004, bundle(release(&sim.release, 1004, "0.2.0", &files(original.clone()), now() - 5)), "expired"),
        (1005, tampered, "tampered"),
    ];
    for (number, offered, reason) in refusals {
        offer(&served, number, offered);
        until_said(&served, reason, |s| s.update.starts_with(&format!("{number} ")) && s.update.contains(reason)).await;
        assert!(std::fs::read(&exe).unwrap() == original, "release {number} changed the binary");
        assert_eq!(fetch(&alice, web).await.unwrap().len(), 20_000, "alice was cut off by release {number}");
    }

    // A good release: installed, the server restarts into it, and keeps it once healthy.
    offer(&served, 1006, bundle(release(&sim.release, 1006, "0.2.0", &files(original.clone()), later)));
    until_said(&served, "that it runs 0.2.0", |s| s.running == "0.2.0@1006" && s.update.is_empty()).await;
    assert!(std::fs::read(bin.join("hearth-node.prev")).unwrap() == original);
    assert_eq!(fetch_eventually(&alice, web).await.unwrap().len(), 20_000);

    // A release whose binary exits at start: swapped in, then the previous one put back.
    let broken = b"#!/bin/sh\nexit 3\n".to_vec();
    offer(&served, 1007, bundle(release(&sim.release, 1007, "0.3.0", &files(broken), later)));
    until_said(&served, "that it rolled 0.3.0 back", |s| {
        s.update.starts_with("1007 rolled back") && s.running == "0.2.0@1006"
    })
    .await;
    assert!(std::fs::read(&exe).unwrap() == original, "the previous binary is back");
    assert!(!bin.join("hearth-node.prev").exists(), "the previous binary was moved back, not copied");
    assert_eq!(fetch_eventually(&alice, web).await.unwrap().len(), 20_000);
    // It is not tried again: over the next pulls (each names release 1007 again) nothing is
    // fetched, swapped or restarted.
    let server = node.server_pid().expect("the supervisor runs a server");
    let (pulls, manifests) = {
        let s = served.lock().unwrap();
        (s.pulls, s.manifests)
    };
    until_said(&served, "three more pulls", |s| s.pulls >= pulls + 3).await;
    {
        let s = served.lock().unwrap();
        assert_eq!(s.manifests, manifests, "the rolled-back release was fetched again");
        assert!(
            s.update.starts_with("1007 rolled back") && s.running == "0.2.0@1006",
            "it says {:?}, runs {:?}",
            s.update,
            s.running
        );
    }
    assert!(std::fs::read(&exe).unwrap() == original, "the binary was swapped again");
    assert!(!bin.join("hearth-node.prev").exists(), "a binary was swapped in again");
    assert_eq!(node.server_pid(), Some(server), "the server was restarted");
    let _ = &mut sim;
}

/// A download under way when a new release is in place is not cut: the node keeps serving it
/// and restarts into the release once its clients go quiet (issue 46, 12).
#[tokio::test]
async fn a_download_under_way_finishes_before_the_node_restarts_into_a_release() {
    let temp = tempfile::tempdir().unwrap();
    let mut sim = ControlSim::new();
    let Setup { served, original, node: _node, alice, .. } = supervised(temp.path(), &mut sim, "").await;
    // 2 MiB in 16 KiB pieces 40 ms apart: about five seconds.
    let body: Vec<u8> = (0..(2u32 << 20)).map(|i| (i % 251) as u8).collect();
    let slow = hearth_tests::node::http_server_paced(body.clone(), Duration::from_millis(40)).await.unwrap();
    let download = {
        let alice = std::sync::Arc::new(alice);
        let client = alice.clone();
        (tokio::spawn(async move { fetch(&client, slow).await }), alice)
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let files = vec![("linux", std::env::consts::ARCH, original)];
    offer(&served, 1006, bundle(release(&sim.release, 1006, "0.2.0", &files, now() + 3600)));
    let got = download.0.await.unwrap().expect("the download was cut by the restart");
    assert!(got == body, "the download arrived changed");
    until_said(&served, "that it runs 0.2.0", |s| s.running == "0.2.0@1006").await;
    drop(download.1);
}

/// A release whose binary starts and keeps running but never becomes healthy (it never serves
/// nor pulls) is put back by the supervisor once `update_health_secs` + `update_grace_secs`
/// have passed; the node runs its previous binary again and says why.
#[tokio::test]
async fn a_release_that_runs_but_never_becomes_healthy_is_rolled_back() {
    let temp = tempfile::tempdir().unwrap();
    let mut sim = ControlSim::new();
    let Setup { served, bin, exe, original, node: _node, alice, web } =
        supervised(temp.path(), &mut sim, "update_grace_secs = 3\n").await;

    // It records its process id at each start, then sleeps.
    let started = temp.path().join("started");
    let stuck = format!("#!/bin/sh\necho $$ >> '{}'\nexec sleep 600\n", started.display()).into_bytes();
    let files = vec![("linux", std::env::consts::ARCH, stuck)];
    offer(&served, 2001, bundle(release(&sim.release, 2001, "0.2.0", &files, now() + 3600)));
    let begun = Instant::now();
    let stuck_pid: u32 = loop {
        if let Some(pid) = std::fs::read_to_string(&started).ok().and_then(|s| s.lines().next()?.parse().ok()) {
            break pid;
        }
        assert!(begun.elapsed() < Duration::from_secs(60), "the new release never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(std::fs::read(&exe).unwrap() != original, "the new binary is in place while it proves itself");

    until_said(&served, "that it rolled 2001 back", |s| {
        s.update.starts_with("2001 rolled back") && s.running == format!("{}@0", env!("CARGO_PKG_VERSION"))
    })
    .await;
    let said = served.lock().unwrap().update.clone();
    assert!(said.contains("was not healthy within 5 s"), "the node must say why: {said}");
    let starts = std::fs::read_to_string(&started).unwrap();
    assert_eq!(starts.lines().count(), 1, "started once and kept running, not a crash loop: {starts}");
    assert!(!std::path::Path::new(&format!("/proc/{stuck_pid}")).exists(), "the stuck release still runs");
    assert!(std::fs::read(&exe).unwrap() == original, "the previous binary is back");
    assert!(!bin.join("hearth-node.prev").exists());
    assert_eq!(fetch_eventually(&alice, web).await.unwrap().len(), 20_000);
}
