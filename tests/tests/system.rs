//! The whole system on loopback: control (SQLite) pushing to the native edge, a node
//! enrolled with the command control prints, and the real sing-box client configured from
//! the profile the edge serves, sending traffic through the node; usage comes back to control.

use std::process::Command;
use std::time::{Duration, Instant};

use hearth_tests::control::{ControlDir, ControlProcess};
use hearth_tests::edge::{Backend, EdgeProcess, free_port};
use hearth_tests::node::{
    NodeProcess, ProxyClient, Streams, fetch, fetch_eventually, held_set, http_server, profile_outbound, tcp_echo,
};
use serde_json::{Value, json};

/// Control (with its own data directory) pushing to an edge, set up and signed in with an
/// admin token.
struct System {
    temp: tempfile::TempDir,
    dir: ControlDir,
    edge: EdgeProcess,
    env: Vec<(&'static str, String)>,
    control: Option<ControlProcess>,
    https: reqwest::Client,
    token: String,
}

impl System {
    /// Starts it; `env` adds to control's environment.
    async fn start(backend: Backend, env: &[(&'static str, String)]) -> System {
        let temp = tempfile::tempdir().unwrap();
        let dir = ControlDir::init(&temp.path().join("control")).unwrap();
        let state = temp.path().join(if backend == Backend::Native { "edge.db" } else { "worker" });
        let edge = EdgeProcess::start(backend, &state, &dir.edge_vars().unwrap()).unwrap();
        let mut env = env.to_vec();
        env.push(("HEARTH_EDGE_URL", edge.url.clone()));
        let control = ControlProcess::start(&dir, &env).unwrap();
        let https = dir.client().unwrap();
        let token = control.setup(&https, "admin").await.unwrap();
        System { temp, dir, edge, env, control: Some(control), https, token }
    }

    fn control(&self) -> &ControlProcess {
        self.control.as_ref().expect("control is running")
    }

    /// Stops control (SIGTERM).
    fn stop_control(&mut self) {
        self.control.take().expect("control is running").stop().unwrap();
    }

    /// Starts control again on the same data and settings.
    fn start_control(&mut self) {
        self.control = Some(ControlProcess::start(&self.dir, &self.env).unwrap());
        // A fresh client: pooled connections went to the process that stopped.
        self.https = self.dir.client().unwrap();
    }

    /// An admin API call's JSON answer.
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.control().call(&self.https, &self.token, method, path, body.as_ref()).await.unwrap()
    }

    /// Creates a user; returns it with its link.
    async fn user(&self, name: &str) -> Value {
        self.call(reqwest::Method::POST, "/users", Some(json!({ "name": name }))).await
    }

    /// Waits until control counts `expected` bytes down for user `id`, and no more than the
    /// HTTP heads on top (anything counted twice would be far more).
    async fn assert_counted(&self, id: u64, expected: u64) {
        let started = Instant::now();
        loop {
            let user = self.call(reqwest::Method::GET, &format!("/users/{id}"), None).await;
            let down = user["used_down"].as_u64().unwrap();
            if down >= expected {
                assert!(down < expected + 4096, "counted {down}, moved {expected}: something was counted twice");
                return;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "usage lost: counted {down} of {expected}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// A node added and enrolled into `state` ([`ControlProcess::enroll_node`]); its port and
/// the enrollment command's arguments.
async fn enrolled_node(s: &System, state: &std::path::Path) -> (u16, Vec<String>) {
    s.control().enroll_node(&s.https, &s.token, state).await.unwrap()
}

/// The system with control on a fixed address (so a restart keeps it, as the node's
/// `control_url` needs), an enrolled node running, a user `alice` and a sing-box client on
/// her profile.
async fn with_a_running_node() -> (System, Value, NodeProcess, ProxyClient) {
    let s = System::start(Backend::Native, &[("HEARTH_LISTEN", format!("127.0.0.1:{}", free_port().unwrap()))]).await;
    let state = s.temp.path().join("node");
    enrolled_node(&s, &state).await;
    let alice = s.user("alice").await;
    let node = NodeProcess::start(&state).unwrap();
    let client = ProxyClient::sing_box(profile_outbound(alice["link"].as_str().unwrap()).await.unwrap()).unwrap();
    (s, alice, node, client)
}

#[tokio::test]
async fn a_link_from_the_native_edge_carries_traffic_through_an_enrolled_node() {
    through_a_node(Backend::Native).await;
}

#[tokio::test]
async fn a_link_from_the_worker_in_workerd_carries_traffic_through_an_enrolled_node() {
    through_a_node(Backend::Worker).await;
}

async fn through_a_node(backend: Backend) {
    let mut s = System::start(backend, &[]).await;

    // A node, enrolled with exactly the command control printed.
    let state = s.temp.path().join("node");
    let (port, args) = enrolled_node(&s, &state).await;
    let again = Command::new(hearth_tests::binary("hearth-node").unwrap())
        .args(&args)
        .arg("--state")
        .arg(s.temp.path().join("other"))
        .output()
        .unwrap();
    assert!(!again.status.success(), "an enrollment token works once");
    let node = NodeProcess::start(&state).unwrap();

    // A user; the edge serves the link; sing-box runs the profile it gets.
    let alice = s.user("alice").await;
    let link = alice["link"].as_str().unwrap().to_owned();
    assert!(link.starts_with(&s.edge.url));
    let outbound = profile_outbound(&link).await.unwrap();
    assert_eq!(outbound["server_port"], port);
    let client = ProxyClient::sing_box(outbound).unwrap();
    let body: Vec<u8> = (0..(512u32 << 10)).map(|i| (i % 249) as u8).collect();
    let web = http_server(body.clone()).await.unwrap();
    let got = fetch_eventually(&client, web).await.unwrap();
    assert!(got == body, "bytes through the node differ");

    // The node reports usage to control, which counts it for alice.
    let id = alice["id"].as_u64().unwrap();
    s.assert_counted(id, body.len() as u64).await;

    // Disabled at control, alice's link stops offering the node within the Worker's feed
    // window (5 s) and a second, on either edge.
    let offers_the_node = |body: &str| {
        let profile: Value = serde_json::from_str(body).unwrap();
        profile["outbounds"].as_array().is_some_and(|outbounds| {
            outbounds.iter().any(|o| o["type"] == "hysteria2" && o["server_port"] == json!(port))
        })
    };
    assert!(offers_the_node(&bodies(std::slice::from_ref(&link)).await[0]));
    s.call(reqwest::Method::POST, &format!("/users/{id}/disable"), Some(json!({}))).await;
    let started = Instant::now();
    while offers_the_node(&bodies(std::slice::from_ref(&link)).await[0]) {
        assert!(started.elapsed() < Duration::from_secs(6), "a disabled user's link still offers the node");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    node.stop().unwrap();
    s.stop_control();
}

/// Usage through an outage and a hard kill: bytes moved while control was down reach it
/// through the edge and the node's on-disk queue, each counted once.
#[tokio::test]
async fn usage_survives_control_going_away_and_a_kill_9_of_the_node() {
    // Control restarts on the same address: the node's `control_url` must stay right.
    let (mut s, alice, node, client) = with_a_running_node().await;
    let id = alice["id"].as_u64().unwrap();
    let first: Vec<u8> = vec![1; 300_000];
    let second: Vec<u8> = vec![2; 700_000];
    let (web1, web2) = (http_server(first.clone()).await.unwrap(), http_server(second.clone()).await.unwrap());
    fetch_eventually(&client, web1).await.unwrap();
    let mut expected = first.len() as u64;
    // The first transfer is counted and acknowledged: the node's queue is empty, so whatever
    // it queues from now on is the second transfer's.
    let state_dir = node.state().to_owned();
    s.assert_counted(id, expected).await;
    let started = Instant::now();
    while !queued_reports(&state_dir).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30), "control never acknowledged the first transfer's report");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Control goes away; traffic goes on; the node queues reports on disk and at the edge,
    // and the link keeps serving the very same profile from the edge.
    let link = alice["link"].as_str().unwrap().to_owned();
    let before = bodies(std::slice::from_ref(&link)).await;
    s.stop_control();
    assert_eq!(bodies(std::slice::from_ref(&link)).await, before, "the link changed while control was away");
    assert_eq!(fetch(&client, web2).await.unwrap().len(), second.len());
    expected += second.len() as u64;
    // The node has the second transfer in its queue on disk (nobody acknowledges it now).
    let started = Instant::now();
    loop {
        let queued: u64 = queued_reports(&state_dir)
            .iter()
            .flat_map(|report| &report.users)
            .filter(|usage| usage.user == id)
            .map(|usage| usage.down)
            .sum();
        if queued >= second.len() as u64 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the node queued {queued} of {} bytes", second.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A hard kill, wherever the reporter is.
    drop(node);
    // Back again: control first, then the node with its queue.
    s.start_control();
    let node = NodeProcess::start(&state_dir).unwrap();
    s.assert_counted(id, expected).await;
    // Both copies of the second transfer's report have arrived (the node's queue is
    // acknowledged, and the restarted control drained the edge's): still counted once.
    let started = Instant::now();
    loop {
        let drained = s.call(reqwest::Method::GET, "/status", None).await["edge"]["last_drain"].as_u64() > Some(0);
        if drained && queued_reports(&state_dir).is_empty() {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the node's queue or the edge's was never taken in");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.assert_counted(id, expected).await;
    node.stop().unwrap();
    s.stop_control();
}

/// The usage reports a node holds in its queue on disk (not acknowledged yet).
fn queued_reports(state: &std::path::Path) -> Vec<hearth_shared::wire::UsageReport> {
    use hearth_shared::envelope::{Envelope, Kind};
    let Ok(entries) = std::fs::read_dir(state.join("usage")) else { return Vec::new() };
    entries
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "report"))
        .filter_map(|path| std::fs::read(path).ok())
        .filter_map(|bytes| Envelope::decode(&bytes, Kind::UsageReport.max_len()).ok())
        .filter_map(|envelope| hearth_shared::wire::UsageReport::decode(&envelope.body).ok())
        .collect()
}

/// A node that never reaches control (a control at home behind NAT): its set comes from the
/// edge, its reports reach control through the edge, and control's acknowledgements come
/// back through the edge, so the node's queue empties.
#[tokio::test]
async fn a_node_that_reaches_only_the_edge_gets_its_reports_acknowledged() {
    let mut s = System::start(Backend::Native, &[]).await;
    let state = s.temp.path().join("node");
    enrolled_node(&s, &state).await;
    let settings = std::fs::read_to_string(state.join("node.toml")).unwrap();
    let edge_only: String = settings.lines().filter(|l| !l.starts_with("control_")).map(|l| format!("{l}\n")).collect();
    std::fs::write(state.join("node.toml"), edge_only).unwrap();

    let alice = s.user("alice").await;
    let node = NodeProcess::start(&state).unwrap();
    let client = ProxyClient::sing_box(profile_outbound(alice["link"].as_str().unwrap()).await.unwrap()).unwrap();
    let body = vec![7u8; 200_000];
    let web = http_server(body.clone()).await.unwrap();
    fetch_eventually(&client, web).await.unwrap();
    s.assert_counted(alice["id"].as_u64().unwrap(), body.len() as u64).await;
    let queued = || std::fs::read_dir(state.join("usage")).map_or(0, |d| d.count());
    let started = Instant::now();
    while queued() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} reports never acknowledged through the edge",
            queued()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    node.stop().unwrap();
    s.stop_control();
}

/// The edge moves (control restarted with a new `edge_url`): the node learns it from
/// control's next answer, keeps it on disk, and turns to it when control is away — no new
/// enrollment.
#[tokio::test]
async fn a_node_follows_control_to_a_new_edge() {
    let (mut s, _alice, node, client) = with_a_running_node().await;
    let state = node.state().to_owned();
    fetch_eventually(&client, http_server(vec![1; 1000]).await.unwrap()).await.unwrap();

    let second =
        EdgeProcess::start(Backend::Native, &s.temp.path().join("edge2.db"), &s.dir.edge_vars().unwrap()).unwrap();
    s.stop_control();
    s.env.retain(|(name, _)| *name != "HEARTH_EDGE_URL");
    s.env.push(("HEARTH_EDGE_URL", second.url.clone()));
    s.start_control();
    // A change wakes the node's long poll at once; the answer names the new edge.
    s.user("bob").await;
    let named = state.join("edge.url");
    let started = Instant::now();
    while std::fs::read_to_string(&named).ok().as_deref() != Some(second.url.as_str()) {
        assert!(started.elapsed() < Duration::from_secs(30), "the node never learned the new edge");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Control and the old edge go away: the node's usage reports land at the new edge.
    s.stop_control();
    let _ = Command::new("kill").args(["-KILL", &s.edge.server_pid().unwrap().to_string()]).status();
    fetch(&client, http_server(vec![2; 50_000]).await.unwrap()).await.unwrap();
    let api = s.dir.edge_setting("api_prefix").unwrap();
    let push_token = s.dir.edge_setting("push_token").unwrap();
    let plain = hearth_tests::http().build().unwrap();
    let started = Instant::now();
    loop {
        let answer = plain
            .get(format!("{}/{api}/usage?after=0", second.url))
            .bearer_auth(&push_token)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let drain: hearth_shared::wire::UsageDrain = hearth_shared::wire::decode(&answer, "drain").unwrap();
        if !drain.reports.is_empty() {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no usage report reached the new edge");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    node.stop().unwrap();
}

/// The id of the signing key in control's data directory.
fn signing_id(dir: &ControlDir) -> String {
    let key: hearth_shared::keys::PublicKey =
        std::fs::read_to_string(dir.path.join("signing.pub")).unwrap().parse().unwrap();
    key.id().to_string()
}

/// Waits until the node at `state` holds a set signed by `key` that lets `user` in.
async fn until_signed_by(state: &std::path::Path, key: &str, user: u64, what: &str) {
    let started = Instant::now();
    loop {
        if let Some((signer, users)) = held_set(state)
            && signer == key
            && users.contains(&user)
        {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(40), "{what}: held {:?}", held_set(state));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Rotating the signing key, then the root, then the signing key again under the new root,
/// while control, the edge and two nodes run (one talking to control, one only to the edge):
/// both nodes take each rotation without enrolling again, users stay connected, a node
/// restarted afterwards comes back from disk, and the edge refuses the retired key and a
/// rotation record the root did not sign.
#[tokio::test]
async fn keys_rotate_while_nodes_run() {
    use hearth_shared::envelope::{Audience, Draft, Kind};
    use hearth_shared::keys::{Role, SecretKey};
    let (s, alice, node, client) = with_a_running_node().await;
    let state = node.state().to_owned();
    let edge_state = s.temp.path().join("edge-node");
    enrolled_node(&s, &edge_state).await;
    let settings = std::fs::read_to_string(edge_state.join("node.toml")).unwrap();
    let edge_only: String = settings.lines().filter(|l| !l.starts_with("control_")).map(|l| format!("{l}\n")).collect();
    std::fs::write(edge_state.join("node.toml"), edge_only).unwrap();
    let edge_node = NodeProcess::start(&edge_state).unwrap();
    let web = http_server(vec![3; 100_000]).await.unwrap();
    fetch_eventually(&client, web).await.unwrap();
    let retired =
        SecretKey::from_file_text(&std::fs::read(s.dir.path.join("signing.key")).unwrap(), Role::Signing).unwrap();
    let root = s.dir.path.join("root.key");
    let new_root = s.temp.path().join("new-root.key");

    let steps: [(&str, Vec<&str>); 3] = [
        ("signing", vec!["keys", "rotate", "--role", "signing", "--root-key", root.to_str().unwrap()]),
        (
            "root",
            vec![
                "keys",
                "rotate",
                "--role",
                "root",
                "--root-key",
                root.to_str().unwrap(),
                "--new-root-key",
                new_root.to_str().unwrap(),
            ],
        ),
        (
            "signing under the new root",
            vec!["keys", "rotate", "--role", "signing", "--root-key", new_root.to_str().unwrap()],
        ),
    ];
    for (at, (what, args)) in steps.iter().enumerate() {
        let printed = s.dir.cli(args).unwrap();
        assert!(printed.contains("signed again"), "{printed}");
        // A change made after the rotation is signed by the running control with the new key.
        let user = s.user(&format!("user{at}")).await;
        let id = user["id"].as_u64().unwrap();
        let key = signing_id(&s.dir);
        until_signed_by(&state, &key, id, &format!("the node pulling from control missed the {what} rotation")).await;
        until_signed_by(&edge_state, &key, id, &format!("the edge-only node missed the {what} rotation")).await;
        assert_eq!(fetch(&client, web).await.unwrap().len(), 100_000, "alice was cut off by the {what} rotation");
    }
    // The old root no longer certifies anything.
    let refused = s.dir.cli(&["keys", "rotate", "--role", "signing", "--root-key", root.to_str().unwrap()]);
    assert!(refused.unwrap_err().to_string().contains("is not the current root key"));

    // A node restarted now reads its set with the rotated trust it kept on disk.
    node.stop().unwrap();
    let node = NodeProcess::start(&state).unwrap();
    assert_eq!(fetch_eventually(&client, web).await.unwrap().len(), 100_000);

    // The edge refuses a push signed by the retired key, and a rotation record it signed.
    let push = |records: Vec<Vec<u8>>, signer: &SecretKey| {
        let manifest = hearth_shared::wire::BatchManifest::new(vec![]).unwrap();
        let now = hearth_tests::control_sim::now();
        let signed = Draft {
            kind: Kind::Batch,
            stream: "batch".into(),
            version: 1 << 40,
            epoch: 1,
            issued: now,
            expires: now + 600,
            audience: Audience::Edge,
            prev: [0; 32],
        }
        .sign(manifest.encode(), &[signer]);
        hearth_tests::control_sim::bundle(records, signed.encode(), vec![])
    };
    let forged_record = Draft {
        kind: Kind::KeyRecord,
        stream: "keys/signing".into(),
        version: 1 << 30,
        epoch: 1,
        issued: hearth_tests::control_sim::now(),
        expires: hearth_tests::control_sim::now() + 600,
        audience: Audience::Any,
        prev: [0; 32],
    }
    .sign(
        hearth_shared::wire::encode(&hearth_shared::trust::KeyRecord {
            role: Role::Signing,
            keys: hearth_shared::trust::RoleKeys::single(retired.public()),
        }),
        &[&retired],
    )
    .encode();
    let api = s.dir.edge_setting("api_prefix").unwrap();
    let push_token = s.dir.edge_setting("push_token").unwrap();
    let plain = hearth_tests::http().build().unwrap();
    for (bundle, expected) in [
        (push(vec![], &retired), "batch manifest refused"),
        (push(vec![forged_record], &retired), "key record refused"),
    ] {
        let answer = plain
            .post(format!("{}/{api}/push", s.edge.url))
            .bearer_auth(&push_token)
            .body(bundle)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 400);
        let text = answer.text().await.unwrap();
        assert!(text.contains(expected), "{text}");
    }
    // Both nodes still serve alice.
    assert_eq!(fetch(&client, web).await.unwrap().len(), 100_000);
    let _ = alice;
    node.stop().unwrap();
    edge_node.stop().unwrap();
}

/// One round trip on a connection held open through the tunnel.
async fn echo(stream: &mut tokio::net::TcpStream, round: u8) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let sent = [round; 1000];
    stream.write_all(&sent).await.unwrap();
    let mut got = [0u8; 1000];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut got))
        .await
        .unwrap_or_else(|_| panic!("round {round}: the held connection stalled"))
        .unwrap_or_else(|e| panic!("round {round}: the held connection dropped: {e}"));
    assert_eq!(got, sent);
}

/// Every link's sing-box profile, as the edge serves it.
async fn bodies(links: &[String]) -> Vec<String> {
    let plain = hearth_tests::http().build().unwrap();
    let mut bodies = Vec::with_capacity(links.len());
    for link in links {
        let response = plain.get(link).header("user-agent", "SFA/1.13.0 (sing-box 1.13.0)").send().await.unwrap();
        assert_eq!(response.status(), 200, "{link} does not serve");
        bodies.push(response.text().await.unwrap());
    }
    bodies
}

/// The recovery drill: control, the edge and a node with 1000 users, a client connected;
/// control's data directory is lost; control is rebuilt on a new directory from the edge
/// (from the archive, or from the snapshots alone). The same links serve the same bodies,
/// the client's connection never drops, no user is lost, and a user made after the restore
/// reaches the node.
async fn drill(from_snapshots: bool) {
    let listen = format!("127.0.0.1:{}", free_port().unwrap());
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let mut edge_vars = dir.edge_vars().unwrap();
    edge_vars.push(("HEARTH_LIMITS".into(), "off".into()));
    let edge = EdgeProcess::start(Backend::Native, &temp.path().join("edge.db"), &edge_vars).unwrap();
    let env = vec![
        ("HEARTH_LISTEN", listen),
        ("HEARTH_EDGE_URL", edge.url.clone()),
        ("HEARTH_ARCHIVE_AFTER_SECS", "1".into()),
    ];
    let control = ControlProcess::start(&dir, &env).unwrap();
    let https = dir.client().unwrap();
    let token = control.setup(&https, "admin").await.unwrap();
    let mut s = System { temp, dir, edge, env, control: Some(control), https, token };
    let state = s.temp.path().join("node");
    enrolled_node(&s, &state).await;
    let alice = s.user("alice").await;
    let names: Vec<String> = (1..1000).map(|i| format!("user{i:04}")).collect();
    let bulk = s.call(reqwest::Method::POST, "/users/bulk", Some(json!({ "names": names }))).await;
    let mut links = vec![alice["link"].as_str().unwrap().to_owned()];
    links.extend(bulk["users"].as_array().unwrap().iter().map(|u| u["link"].as_str().unwrap().to_owned()));
    assert_eq!(links.len(), 1000);
    let node = NodeProcess::start(&state).unwrap();
    let client = ProxyClient::sing_box(profile_outbound(&links[0]).await.unwrap()).unwrap();
    let echo_at = tcp_echo().await.unwrap();
    fetch_eventually(&client, http_server(vec![1; 10_000]).await.unwrap()).await.unwrap();
    let mut held = client.connect(echo_at).await.unwrap();
    echo(&mut held, 1).await;
    let before = bodies(&links).await;

    // The owner kept three files offline; the box with the data directory is gone.
    let safe = s.temp.path().join("safe");
    std::fs::create_dir(&safe).unwrap();
    for file in ["root.key", "recovery.key", "edge.toml"] {
        std::fs::copy(s.dir.path.join(file), safe.join(file)).unwrap();
    }
    // From the archive: the one at the edge holds the last change (the bulk create).
    let archived = if from_snapshots {
        None
    } else {
        let archive = s.dir.archive_holding(&s.edge.url, "SELECT count(*) FROM users", 1000).await.unwrap();
        Some(archive.version)
    };
    s.control.take().unwrap().kill9().unwrap();
    std::fs::remove_dir_all(&s.dir.path).unwrap();
    echo(&mut held, 2).await;

    let new_dir = ControlDir { path: s.temp.path().join("restored") };
    // A wrong recovery key opens nothing, and leaves nothing behind.
    let stranger = s.temp.path().join("stranger.key");
    let stranger_key = hearth_shared::keys::RecoverySecret::generate(&mut rand_core::OsRng);
    hearth_tests::write_private(&stranger, stranger_key.to_file_text().as_bytes()).unwrap();
    let err = new_dir.restore(&s.edge.url, &safe, &stranger, from_snapshots).unwrap_err().to_string();
    let expected =
        if from_snapshots { "opens none of the 1000 snapshots" } else { "recovery key does not open the archive" };
    assert!(err.contains(expected), "{err}");
    assert!(!new_dir.path.exists(), "a failed restore left {}", new_dir.path.display());
    let printed = new_dir.restore(&s.edge.url, &safe, &safe.join("recovery.key"), from_snapshots).unwrap();
    assert!(printed.contains("1000 users, 1 nodes"), "{printed}");
    assert_eq!(printed.contains("from archive v"), !from_snapshots, "{printed}");
    if let Some(version) = archived {
        let used: u64 = printed.split("from archive v").nth(1).and_then(|v| v.split(',').next()?.parse().ok()).unwrap();
        assert!(used >= version, "restored from archive v{used}, older than v{version} which holds every user");
    }
    eprintln!("{printed}");
    s.dir = new_dir;
    s.control = Some(ControlProcess::start(&s.dir, &s.env).unwrap());
    s.https = s.dir.client().unwrap();
    if from_snapshots {
        // The owner account is not in snapshots: a new setup link, a new admin token.
        s.token = s.control().setup(&s.https, "admin").await.unwrap();
    }
    echo(&mut held, 3).await;

    // No user lost, every link serves what it served.
    let listed = s.call(reqwest::Method::GET, "/users?per_page=1", None).await;
    assert_eq!(listed["total"], 1000, "{listed}");
    assert_eq!(bodies(&links).await, before, "a link serves another body after the restore");

    // A user made now reaches the node (through control, or through the edge when the node
    // cannot check the new control's certificate).
    let after = s.user("after-restore").await;
    let second = ProxyClient::sing_box(profile_outbound(after["link"].as_str().unwrap()).await.unwrap()).unwrap();
    let body = vec![9u8; 50_000];
    assert_eq!(fetch_eventually(&second, http_server(body.clone()).await.unwrap()).await.unwrap(), body);
    echo(&mut held, 4).await;
    // Usage keeps being counted for a user of before.
    let id = alice["id"].as_u64().unwrap();
    let counted = s.call(reqwest::Method::GET, &format!("/users/{id}"), None).await["used_down"].as_u64().unwrap();
    let more = vec![5u8; 300_000];
    fetch(&client, http_server(more.clone()).await.unwrap()).await.unwrap();
    s.assert_counted(id, counted + more.len() as u64).await;
    node.stop().unwrap();
    s.stop_control();
}

#[tokio::test]
async fn the_recovery_drill_from_the_archive() {
    drill(false).await;
}

#[tokio::test]
async fn the_recovery_drill_from_snapshots_alone() {
    drill(true).await;
}

/// The releases and their rollouts, as the admin API lists them.
async fn releases(s: &System) -> Vec<Value> {
    s.call(reqwest::Method::GET, "/releases", None).await["releases"].as_array().unwrap().clone()
}

/// Waits until release `version`'s rollout reaches `state`; returns the release.
async fn rollout_reaches(s: &System, version: u64, state: &str) -> Value {
    let started = Instant::now();
    loop {
        let release = releases(s).await.into_iter().find(|r| r["version"] == version).unwrap();
        if release["rollout"]["state"] == state {
            return release;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "the rollout never reached {state}: {release}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A release signed with `hearth-control release sign` rolls out from the admin API: the
/// canary first, then the other node; both run it under their supervisors. A release whose
/// binary was altered on control's disk is refused by the canary, and the rollout stops
/// there: the other node is never told.
#[tokio::test]
async fn a_release_rolls_out_canary_first_and_stops_at_the_first_failure() {
    let s = System::start(Backend::Native, &[("HEARTH_LISTEN", format!("127.0.0.1:{}", free_port().unwrap()))]).await;
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        let state = s.temp.path().join(name);
        enrolled_node(&s, &state).await;
        let settings = std::fs::read_to_string(state.join("node.toml")).unwrap();
        std::fs::write(state.join("node.toml"), settings + "update_health_secs = 2\n").unwrap();
        let exe = s.temp.path().join(format!("bin-{name}"));
        std::fs::create_dir(&exe).unwrap();
        let exe = exe.join("hearth-node");
        std::fs::copy(hearth_tests::binary("hearth-node").unwrap(), &exe).unwrap();
        nodes.push(hearth_tests::node::Supervised::start(&exe, &state).unwrap());
    }
    let listed = s.call(reqwest::Method::GET, "/nodes", None).await;
    let ids: Vec<u64> = listed["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_u64().unwrap()).collect();
    let (first, canary) = (ids[0], ids[1]);

    let binary = hearth_tests::binary("hearth-node").unwrap();
    let signed =
        s.dir.cli(&["release", "sign", "--version", "0.2.0", "--expires", "1d", binary.to_str().unwrap()]).unwrap();
    let version: u64 = signed
        .lines()
        .find_map(|l| l.strip_prefix("release ")?.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{signed}"));
    let started =
        s.call(reqwest::Method::POST, &format!("/releases/{version}/rollout"), Some(json!({ "canary": canary }))).await;
    assert_eq!(started["releases"][0]["rollout"]["state"], "canary", "{started}");
    let again = s
        .https
        .post(s.control().api(&format!("/releases/{version}/rollout")))
        .bearer_auth(&s.token)
        .json(&json!({ "canary": first }))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409, "one rollout at a time");
    // The canary runs it before the other node is told.
    let begun = Instant::now();
    loop {
        let release = releases(&s).await.into_iter().find(|r| r["version"] == version).unwrap();
        let done = release["rollout"]["done"].as_array().unwrap().clone();
        if !done.is_empty() {
            assert_eq!(done, vec![json!(canary)], "the canary first: {release}");
            break;
        }
        assert!(begun.elapsed() < Duration::from_secs(90), "the canary never ran the release: {release}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let done = rollout_reaches(&s, version, "done").await;
    assert_eq!(done["rollout"]["done"], json!([first, canary]));
    let listed = s.call(reqwest::Method::GET, "/nodes", None).await;
    assert!(listed["nodes"].as_array().unwrap().iter().all(|n| n["version"] == "0.2.0"), "{listed}");

    // A binary altered on control's disk after signing: the canary refuses it, nobody else
    // is told.
    let signed = s.dir.cli(&["release", "sign", "--version", "0.3.0", binary.to_str().unwrap()]).unwrap();
    let next: u64 =
        signed.lines().find_map(|l| l.strip_prefix("release ")?.split_whitespace().next()?.parse().ok()).unwrap();
    assert!(next > version);
    let stored = s
        .dir
        .path
        .join("releases")
        .join(next.to_string())
        .join(format!("hearth-node-linux-{}", std::env::consts::ARCH));
    let mut bytes = std::fs::read(&stored).unwrap();
    bytes[4096] ^= 0xff;
    std::fs::write(&stored, bytes).unwrap();
    s.call(reqwest::Method::POST, &format!("/releases/{next}/rollout"), Some(json!({ "canary": canary }))).await;
    let failed = rollout_reaches(&s, next, "failed").await;
    assert!(failed["rollout"]["detail"].as_str().unwrap().contains("tampered"), "{failed}");
    assert_eq!(failed["rollout"]["current"], canary);
    assert_eq!(failed["rollout"]["done"], json!([]));
    // Two changes reach both nodes: each pull's answer carries the release control tells that
    // node to run, and the pull after it carries what the node made of it. Had the other node
    // been told, it would say so (every node refuses this binary, so its version alone could
    // not tell).
    for name in ["after-failure-1", "after-failure-2"] {
        let id = s.user(name).await["id"].as_u64().unwrap();
        for state in ["a", "b"] {
            let state = s.temp.path().join(state);
            let started = Instant::now();
            while !node_users(&state).contains(&id) {
                assert!(started.elapsed() < Duration::from_secs(30), "{name} never reached node {}", state.display());
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    let said = update_statuses(&s.dir).await;
    assert!(!said[&first].starts_with(&format!("{next} ")), "the other node was told of {next}: {said:?}");
    assert!(said[&canary].starts_with(&format!("{next} ")), "the canary said nothing of {next}: {said:?}");
    let listed = s.call(reqwest::Method::GET, "/nodes", None).await;
    assert!(listed["nodes"].as_array().unwrap().iter().all(|n| n["version"] == "0.2.0"), "{listed}");
    drop(nodes);
}

/// A node that reaches only the edge (a control at home behind NAT) takes a rollout there, and
/// control hears what it runs and what it refused through the edge, in its signed usage
/// reports (issue 46, 12): the rollout completes instead of timing out, and a release whose
/// binary cannot start stops the rollout at once with the node's own reason. A release the
/// edge refuses (a debug build, over its size limit) is not offered to it again, and the next
/// one is.
#[tokio::test]
async fn a_node_that_reaches_only_the_edge_is_heard_through_it_in_a_rollout() {
    let s = System::start(Backend::Native, &[]).await;
    let state = s.temp.path().join("node");
    enrolled_node(&s, &state).await;
    let settings = std::fs::read_to_string(state.join("node.toml")).unwrap();
    let edge_only: String = settings.lines().filter(|l| !l.starts_with("control_")).map(|l| format!("{l}\n")).collect();
    std::fs::write(state.join("node.toml"), format!("update_health_secs = 2\n{edge_only}")).unwrap();
    let exe = s.temp.path().join("bin");
    std::fs::create_dir(&exe).unwrap();
    let exe = exe.join("hearth-node");
    let binary = hearth_tests::binary("hearth-node").unwrap();
    std::fs::copy(&binary, &exe).unwrap();
    let node = hearth_tests::node::Supervised::start(&exe, &state).unwrap();
    let alice = s.user("alice").await;
    let client = ProxyClient::sing_box(profile_outbound(alice["link"].as_str().unwrap()).await.unwrap()).unwrap();
    // Nobody has used the node yet, so it has sent no usage report: what it says of a
    // release must go out on its own.
    let id = s.call(reqwest::Method::GET, "/nodes", None).await["nodes"][0]["id"].as_u64().unwrap();
    let started = Instant::now();
    while !node_users(&state).contains(&alice["id"].as_u64().unwrap()) {
        assert!(started.elapsed() < Duration::from_secs(30), "the node never took its set from the edge");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!state.join("usage.release").exists() && !state.join("usage").exists(), "the node reported already");
    let sign = |version: &str, file: &std::path::Path| -> u64 {
        let signed = s.dir.cli(&["release", "sign", "--version", version, "--expires", "1d", file.to_str().unwrap()]);
        let signed = signed.unwrap();
        signed
            .lines()
            .find_map(|l| l.strip_prefix("release ")?.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{signed}"))
    };

    // A debug build is over what an edge takes: the edge refuses it (413), and control marks
    // it as handled for that edge rather than offer it again and again.
    let oversized = sign("0.1.9", &binary);
    s.call(reqwest::Method::POST, &format!("/releases/{oversized}/rollout"), Some(json!({ "canary": id }))).await;
    let db = libsql::Builder::new_local(s.dir.path.join("control.db")).build().await.unwrap();
    let conn = db.connect().unwrap();
    let started = Instant::now();
    loop {
        let mut rows = conn.query("SELECT release FROM edges", ()).await.unwrap();
        if rows.next().await.unwrap().unwrap().get::<u64>(0).unwrap() == oversized {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "control never heard the edge refuse the release");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.call(reqwest::Method::POST, &format!("/releases/{oversized}/stop"), None).await;

    // A good release: the node takes it from the edge and says so through it. (Its debug
    // info stripped, as in a release build.)
    let stripped = s.temp.path().join("hearth-node-stripped");
    std::fs::copy(&binary, &stripped).unwrap();
    let strip = Command::new("strip").arg("--strip-debug").arg(&stripped).status().unwrap();
    assert!(strip.success());
    let good = sign("0.2.0", &stripped);
    s.call(reqwest::Method::POST, &format!("/releases/{good}/rollout"), Some(json!({ "canary": id }))).await;
    let done = rollout_reaches(&s, good, "done").await;
    assert_eq!(done["rollout"]["done"], json!([id]), "{done}");
    let listed = s.call(reqwest::Method::GET, "/nodes", None).await;
    assert_eq!(listed["nodes"][0]["version"], "0.2.0", "{listed}");
    assert!(std::fs::read(s.temp.path().join("bin").join("hearth-node.prev")).is_ok(), "the node never swapped");
    let web = http_server(vec![4u8; 20_000]).await.unwrap();
    fetch_eventually(&client, web).await.unwrap();

    // A release whose binary exits at once (a real program for this machine): the node rolls
    // it back, and the rollout stops on its word, long before the 900 s timeout.
    let broken = sign("0.3.0", std::path::Path::new("/bin/false"));
    s.call(reqwest::Method::POST, &format!("/releases/{broken}/rollout"), Some(json!({ "canary": id }))).await;
    let failed = rollout_reaches(&s, broken, "failed").await;
    let detail = failed["rollout"]["detail"].as_str().unwrap();
    assert!(detail.starts_with(&format!("node {id}: rolled back")), "{failed}");
    let listed = s.call(reqwest::Method::GET, "/nodes", None).await;
    assert_eq!(listed["nodes"][0]["version"], "0.2.0", "{listed}");
    fetch_eventually(&client, web).await.unwrap();
    drop(node);
}

/// What each node last said of its update in its pulls (`hearth-node-update`), as control
/// stored it (read from its database: the admin API shows only the canary's, in the rollout).
async fn update_statuses(dir: &ControlDir) -> std::collections::HashMap<u64, String> {
    let db = libsql::Builder::new_local(dir.path.join("control.db")).build().await.unwrap();
    let mut rows = db.connect().unwrap().query("SELECT id, update_status FROM nodes", ()).await.unwrap();
    let mut said = std::collections::HashMap::new();
    while let Some(row) = rows.next().await.unwrap() {
        said.insert(row.get::<u64>(0).unwrap(), row.get::<String>(1).unwrap());
    }
    said
}

/// The users in the set the node holds on disk.
fn node_users(state: &std::path::Path) -> Vec<u64> {
    held_set(state).map(|(_, users)| users).unwrap_or_default()
}

/// The storm (BENCH.md, D): 1000 users; 64 streams through one node; 300 subscription requests
/// a second from 1000 addresses; one user added and one removed every second through the admin
/// API, for 60 s. No stream of a user who stays drops and every one keeps echoing, every
/// subscription request is answered 200 (the load stays under the edge's limits, so a 429 is a
/// limiter counting wrong), and every change reaches the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storm_drops_no_stream_answers_every_request_and_every_change_reaches_the_node() {
    let seconds: u64 = std::env::var("HEARTH_STORM_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let s = System::start(Backend::Native, &[]).await;
    let state = s.temp.path().join("node");
    enrolled_node(&s, &state).await;
    let names: Vec<String> = (0..1000).map(|i| format!("user{i:04}")).collect();
    let bulk = s.call(reqwest::Method::POST, "/users/bulk", Some(json!({ "names": names }))).await;
    let users = bulk["users"].as_array().unwrap().clone();
    let links: Vec<String> = users.iter().map(|u| u["link"].as_str().unwrap().to_owned()).collect();
    let node = NodeProcess::start(&state).unwrap();

    // 64 streams: 16 through each of four users' clients.
    let mut clients = Vec::new();
    for link in &links[..4] {
        clients.push(ProxyClient::sing_box(profile_outbound(link).await.unwrap()).unwrap());
    }
    let echo_at = tcp_echo().await.unwrap();
    for client in &clients {
        fetch_eventually(client, http_server(vec![1; 1000]).await.unwrap()).await.unwrap();
    }
    let streams = Streams::hold(&clients.iter().collect::<Vec<_>>(), 16, echo_at).await.unwrap();

    // The subscription load, open loop, over every link.
    // (Not the links of the users removed below: a removed link is a 404 by the rules.)
    let (rate, sources) = (300u64, 1000usize);
    let staying: Vec<String> = links[..100].iter().chain(&links[100 + seconds as usize..]).cloned().collect();
    under_the_edge_limits(rate, seconds, staying.len(), sources);
    let target = hearth_tests::load::Target::from_urls(&staying, "SFA/1.13.0 (sing-box 1.13.0)").unwrap();
    let load = tokio::spawn(async move {
        hearth_tests::load::open(&target, rate as f64, Duration::from_secs(seconds), sources).await.unwrap()
    });
    let echoed_before = streams.rounds();
    // One user added and one removed a second (never one of the four streaming).
    let (mut added, mut removed) = (Vec::new(), Vec::new());
    let started = Instant::now();
    for second in 0..seconds {
        let user = s.user(&format!("storm{second:02}")).await;
        added.push(user["id"].as_u64().unwrap());
        let gone = users[100 + second as usize]["id"].as_u64().unwrap();
        let status = s
            .https
            .delete(s.control().api(&format!("/users/{gone}")))
            .bearer_auth(&s.token)
            .send()
            .await
            .unwrap()
            .status();
        assert!(status.is_success(), "removing user {gone}: {status}");
        removed.push(gone);
        tokio::time::sleep_until((started + Duration::from_secs(second + 1)).into()).await;
    }
    let load = load.await.unwrap();
    let echoed_after = streams.rounds();
    let (rounds, failures) = streams.finish().await.unwrap();
    assert!(failures.is_empty(), "streams dropped: {failures:?}");
    let still: Vec<usize> = (0..echoed_after.len()).filter(|&i| echoed_after[i] <= echoed_before[i]).collect();
    assert!(still.is_empty(), "streams {still:?} echoed nothing during the storm");
    assert_eq!(load.sent, rate * seconds);
    assert_eq!(
        (load.errors, load.statuses.clone()),
        (0, std::collections::BTreeMap::from([(200, load.sent)])),
        "every request answered 200: {load:?}"
    );
    eprintln!(
        "storm: {} requests, all 200, p95 {} us, p99 {} us; {rounds} stream echoes",
        load.sent, load.answer_latency_us.p95, load.answer_latency_us.p99
    );

    // Every change reaches the node.
    let started = Instant::now();
    loop {
        let held = node_users(&state);
        if added.iter().all(|id| held.contains(id)) && removed.iter().all(|id| !held.contains(id)) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the node's set missed a change");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    node.stop().unwrap();
}

/// Checks that the storm's load stays under the edge's default limits, so that any 429 is
/// wrong: `rate` requests a second for `seconds`, cycling over `links` links and, one request
/// each in turn, over `sources` addresses ([`hearth_tests::load::source`]).
fn under_the_edge_limits(rate: u64, seconds: u64, links: usize, sources: usize) {
    use hearth_shared::ratelimit::{BucketLimit, Network, WindowLimit};
    // Per link: its share of the requests, and the one fetch of the profile before the storm,
    // all within one window at most (a clock-aligned window starting mid-run only resets it).
    let per_link = (rate * seconds).div_ceil(links as u64) + 1;
    assert!(
        per_link <= u64::from(WindowLimit::PER_LINK.limit),
        "{per_link} fetches per link are over the per-link limit {:?}: shorten HEARTH_STORM_SECS",
        WindowLimit::PER_LINK
    );
    // Per /24 network: the addresses in the busiest one take their share of the rate, evenly
    // spread (each address's requests are `sources` requests apart).
    let mut networks = std::collections::BTreeMap::<Network, u64>::new();
    for i in 0..sources {
        *networks.entry(Network::of(hearth_tests::load::source(i))).or_default() += 1;
    }
    let busiest = networks.values().copied().max().unwrap_or(0);
    let per_minute = rate * 60 * busiest / sources as u64;
    let limit = BucketLimit::PER_NETWORK;
    assert!(
        per_minute <= u64::from(limit.per_minute),
        "{per_minute} a minute from one network is over the per-network limit {limit:?}"
    );
}

/// Waits until every stream of `streams` has echoed `n` rounds more than `since` (what
/// [`Streams::rounds`] said at some point).
async fn every_stream_echoes(streams: &Streams, since: &[u64], n: u64, what: &str) {
    let started = Instant::now();
    loop {
        let now = streams.rounds();
        let behind: Vec<usize> = (0..now.len()).filter(|&i| now[i] < since[i] + n).collect();
        if behind.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: streams {behind:?} stopped echoing (rounds {now:?}, from {since:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The restart (BENCH.md, E): control restarted during 64 streams drops none of them; the
/// node takes a change from the new control, and every stream goes on echoing after it.
#[tokio::test]
async fn restarting_control_drops_no_stream() {
    let (mut s, _alice, node, client) = with_a_running_node().await;
    let state = node.state().to_owned();
    fetch_eventually(&client, http_server(vec![1; 1000]).await.unwrap()).await.unwrap();
    let streams = Streams::hold(&[&client], 64, tcp_echo().await.unwrap()).await.unwrap();
    every_stream_echoes(&streams, &[0; 64], 3, "before the restart").await;
    s.stop_control();
    s.start_control();
    // The node hears from the restarted control: a change made on it reaches the node.
    let bob = s.user("bob").await["id"].as_u64().unwrap();
    let started = Instant::now();
    while !node_users(&state).contains(&bob) {
        assert!(started.elapsed() < Duration::from_secs(30), "the node never took a change from the new control");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let since = streams.rounds();
    every_stream_echoes(&streams, &since, 3, "after the restart").await;
    let (rounds, failures) = streams.finish().await.unwrap();
    assert!(failures.is_empty(), "streams dropped across the restart: {failures:?}");
    eprintln!("restart: {rounds} echoes, none dropped");
    node.stop().unwrap();
    s.stop_control();
}
