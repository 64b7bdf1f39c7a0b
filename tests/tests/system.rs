//! The whole system on loopback: control (SQLite) pushing to the native edge, a node
//! enrolled with the command control prints, and the real sing-box client configured from
//! the profile the edge serves, sending traffic through the node; usage comes back to control.

use std::process::Command;
use std::time::{Duration, Instant};

use hearth_tests::control::{ControlDir, ControlProcess};
use hearth_tests::edge::{Backend, EdgeProcess, free_port};
use hearth_tests::node::{NodeProcess, SingBoxClient, fetch, http_server};
use serde_json::{Value, json};

#[tokio::test]
async fn a_link_from_the_native_edge_carries_traffic_through_an_enrolled_node() {
    through_a_node(Backend::Native).await;
}

#[tokio::test]
async fn a_link_from_the_worker_in_workerd_carries_traffic_through_an_enrolled_node() {
    through_a_node(Backend::Worker).await;
}

async fn through_a_node(backend: Backend) {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let state = temp.path().join(if backend == Backend::Native { "edge.db" } else { "worker" });
    let edge = EdgeProcess::start(backend, &state, &dir.edge_vars().unwrap()).unwrap();
    let control = ControlProcess::start(&dir, &[("HEARTH_EDGE_URL", edge.url.clone())]).unwrap();
    let https = dir.client().unwrap();
    let token = control.setup(&https, "admin").await.unwrap();
    let api = |method: reqwest::Method, path: &str, body: Value| {
        https.request(method, control.api(path)).bearer_auth(&token).json(&body).send()
    };

    // A node, enrolled with exactly the command control printed.
    let port = free_port().unwrap();
    let node: Value =
        api(reqwest::Method::POST, "/nodes", json!({ "name": "Home", "host": "127.0.0.1", "port": port }))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    let command = node["enroll_command"].as_str().unwrap();
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let state = temp.path().join("node");
    let out = Command::new(hearth_tests::binary("hearth-node").unwrap())
        .args(&args)
        .arg("--state")
        .arg(&state)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--allow-private"])
        .output()
        .unwrap();
    assert!(out.status.success(), "enroll failed: {}", String::from_utf8_lossy(&out.stderr));
    let again = Command::new(hearth_tests::binary("hearth-node").unwrap())
        .args(&args)
        .arg("--state")
        .arg(temp.path().join("other"))
        .output()
        .unwrap();
    assert!(!again.status.success(), "an enrollment token works once");
    std::fs::write(
        state.join("node.toml"),
        std::fs::read_to_string(state.join("node.toml")).unwrap() + "report_secs = 1\n",
    )
    .unwrap();
    let node = NodeProcess::start(&state).unwrap();

    // A user; the edge serves the link; sing-box runs the profile it gets.
    let alice: Value =
        api(reqwest::Method::POST, "/users", json!({ "name": "alice" })).await.unwrap().json().await.unwrap();
    let link = alice["link"].as_str().unwrap().to_owned();
    assert!(link.starts_with(&edge.url));
    let plain = hearth_tests::http().build().unwrap();
    let started = Instant::now();
    let profile: Value = loop {
        let response = plain.get(&link).header("user-agent", "SFA/1.13.0 (sing-box 1.13.0)").send().await.unwrap();
        if response.status() == 200 {
            let profile: Value = response.json().await.unwrap();
            if profile["outbounds"].as_array().is_some_and(|o| o.iter().any(|o| o["type"] == "hysteria2")) {
                break profile;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the edge never served alice's profile with the node");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let outbound = profile["outbounds"].as_array().unwrap().iter().find(|o| o["type"] == "hysteria2").unwrap().clone();
    assert_eq!(outbound["server_port"], port);
    let client = SingBoxClient::start(outbound).unwrap();
    let body: Vec<u8> = (0..(512u32 << 10)).map(|i| (i % 249) as u8).collect();
    let web = http_server(body.clone()).await.unwrap();
    let started = Instant::now();
    let got = loop {
        match fetch(&client, web).await {
            Ok(got) => break got,
            Err(e) => {
                assert!(started.elapsed() < Duration::from_secs(30), "no traffic through the node: {e}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    };
    assert!(got == body, "bytes through the node differ");

    // The node reports usage to control, which counts it for alice.
    let id = alice["id"].as_u64().unwrap();
    let started = Instant::now();
    loop {
        let user: Value = https
            .get(control.api(&format!("/users/{id}")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let down = user["used_down"].as_u64().unwrap();
        if down >= body.len() as u64 {
            assert!(down < body.len() as u64 + 4096, "counted {down} for {} bytes", body.len());
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "usage never reached control: {user}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    node.stop().unwrap();
    control.stop().unwrap();
}
