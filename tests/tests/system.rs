//! The whole system on loopback: control (SQLite) pushing to the native edge, a node
//! enrolled with the command control prints, and the real sing-box client configured from
//! the profile the edge serves, sending traffic through the node; usage comes back to control.

use std::process::Command;
use std::time::{Duration, Instant};

use hearth_tests::control::{ControlDir, ControlProcess};
use hearth_tests::edge::{Backend, EdgeProcess, free_port};
use hearth_tests::node::{NodeProcess, SingBoxClient, fetch, fetch_eventually, http_server};
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
        let mut request = self.https.request(method, self.control().api(path)).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.unwrap().json().await.unwrap()
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

/// Adds a node through the admin API and enrolls it with exactly the command control
/// printed (on loopback, reporting every second); returns its port and the command's
/// arguments.
async fn enrolled_node(s: &System, state: &std::path::Path) -> (u16, Vec<String>) {
    let port = free_port().unwrap();
    let node = s
        .call(reqwest::Method::POST, "/nodes", Some(json!({ "name": "Home", "host": "127.0.0.1", "port": port })))
        .await;
    let args: Vec<String> =
        node["enroll_command"].as_str().unwrap().split_whitespace().skip(1).map(str::to_owned).collect();
    let out = Command::new(hearth_tests::binary("hearth-node").unwrap())
        .args(&args)
        .arg("--state")
        .arg(state)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--allow-private"])
        .output()
        .unwrap();
    assert!(out.status.success(), "enroll failed: {}", String::from_utf8_lossy(&out.stderr));
    let settings = std::fs::read_to_string(state.join("node.toml")).unwrap();
    std::fs::write(state.join("node.toml"), settings + "report_secs = 1\nedge_poll_secs = 1\nmetrics_listen = \"\"\n")
        .unwrap();
    (port, args)
}

/// The system with control on a fixed address (so a restart keeps it, as the node's
/// `control_url` needs), an enrolled node running, a user `alice` and a sing-box client on
/// her profile.
async fn with_a_running_node() -> (System, Value, NodeProcess, SingBoxClient) {
    let s = System::start(Backend::Native, &[("HEARTH_LISTEN", format!("127.0.0.1:{}", free_port().unwrap()))]).await;
    let state = s.temp.path().join("node");
    enrolled_node(&s, &state).await;
    let alice = s.user("alice").await;
    let node = NodeProcess::start(&state).unwrap();
    let client = SingBoxClient::start(profile_outbound(alice["link"].as_str().unwrap()).await).unwrap();
    (s, alice, node, client)
}

/// The hysteria2 outbound of the sing-box profile the edge serves for `link`.
async fn profile_outbound(link: &str) -> Value {
    let plain = hearth_tests::http().build().unwrap();
    let started = Instant::now();
    loop {
        if let Ok(response) = plain.get(link).header("user-agent", "SFA/1.13.0 (sing-box 1.13.0)").send().await
            && response.status() == 200
            && let Ok(profile) = response.json::<Value>().await
            && let Some(outbound) =
                profile["outbounds"].as_array().and_then(|o| o.iter().find(|o| o["type"] == "hysteria2").cloned())
        {
            return outbound;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the edge never served a profile with the node");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
    let outbound = profile_outbound(&link).await;
    assert_eq!(outbound["server_port"], port);
    let client = SingBoxClient::start(outbound).unwrap();
    let body: Vec<u8> = (0..(512u32 << 10)).map(|i| (i % 249) as u8).collect();
    let web = http_server(body.clone()).await.unwrap();
    let got = fetch_eventually(&client, web).await.unwrap();
    assert!(got == body, "bytes through the node differ");

    // The node reports usage to control, which counts it for alice.
    let id = alice["id"].as_u64().unwrap();
    s.assert_counted(id, body.len() as u64).await;
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
    // Control goes away; traffic goes on; the node queues reports on disk and at the edge.
    s.stop_control();
    assert_eq!(fetch(&client, web2).await.unwrap().len(), second.len());
    expected += second.len() as u64;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // A hard kill, wherever the reporter is.
    let state_dir = node.state().to_owned();
    drop(node);
    // Back again: control first, then the node with its queue.
    s.start_control();
    let node = NodeProcess::start(&state_dir).unwrap();
    s.assert_counted(id, expected).await;
    node.stop().unwrap();
    s.stop_control();
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
    let client = SingBoxClient::start(profile_outbound(alice["link"].as_str().unwrap()).await).unwrap();
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
