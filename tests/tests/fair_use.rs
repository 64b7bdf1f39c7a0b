//! Fair use end to end: the real control binary, two real nodes enrolled with the command
//! control prints, and real sing-box clients bound to their own loopback addresses (each
//! one device). A device limit holds across nodes; a node's multiplier counts its traffic
//! twice; a node's monthly cap, reached live, stops it carrying anyone. The official server's
//! traffic stats API on a node answers a client written for it, and its kicks are the panel's.

use std::time::{Duration, Instant};

use hearth_tests::control::{Api, ControlDir, ControlProcess};
use hearth_tests::node::{NodeProcess, ProxyClient, fetch, fetch_eventually, http_server, profile_outbounds};
use serde_json::{Value, json};

/// Waits (up to `within`) until `check` holds of what `GET path` answers; returns it.
async fn until(
    api: &Api,
    control: &ControlProcess,
    path: &str,
    within: Duration,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        let value = api.get(control, path).await;
        if check(&value) {
            return value;
        }
        assert!(started.elapsed() < within, "{path} never got there: {value}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The sing-box outbound to the node on `port` from the profile control serves at `link`,
/// dialling from `from` (a loopback address: one device).
async fn outbound(http: &reqwest::Client, link: &str, port: u16, from: &str) -> Value {
    let outbounds = profile_outbounds(http, link).await.unwrap();
    let mut outbound = outbounds
        .iter()
        .find(|o| o["server_port"] == port)
        .unwrap_or_else(|| panic!("no outbound to port {port} in {outbounds:?}"))
        .clone();
    outbound["inet4_bind_address"] = from.into();
    outbound
}

#[tokio::test]
async fn a_device_limit_holds_across_nodes_and_node_caps_stop_a_node_live() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let control = ControlProcess::start(&dir, &[]).unwrap();
    let http = dir.client().unwrap();
    let api = Api { token: control.setup(&http, "admin").await.unwrap(), http: http.clone() };
    let (port_a, _) = control.enroll_node(&http, &api.token, &temp.path().join("a")).await.unwrap();
    let (port_b, _) = control.enroll_node(&http, &api.token, &temp.path().join("b")).await.unwrap();
    let nodes = api.get(&control, "/nodes").await;
    let id_of = |port: u16| {
        nodes["nodes"].as_array().unwrap().iter().find(|n| n["port"] == port).unwrap()["id"].as_u64().unwrap()
    };
    let a = id_of(port_a);
    let family =
        api.post(&control, "/users", json!({ "name": "family", "device_limit": 1 })).await["id"].as_u64().unwrap();
    let heavy = api.post(&control, "/users", json!({ "name": "heavy" })).await["id"].as_u64().unwrap();
    let link_of = |id: u64| {
        let api = &api;
        let control = &control;
        async move { api.get(control, &format!("/users/{id}/link")).await["link"].as_str().unwrap().to_owned() }
    };
    let (family_link, heavy_link) = (link_of(family).await, link_of(heavy).await);
    let node_a = NodeProcess::start(&temp.path().join("a")).unwrap();
    let node_b = NodeProcess::start(&temp.path().join("b")).unwrap();
    let web = http_server(b"hello".to_vec()).await.unwrap();

    // The family's one device is on node a; control hears of it from a's report.
    let phone = ProxyClient::sing_box(outbound(&http, &family_link, port_a, "127.0.0.2").await).unwrap();
    assert_eq!(fetch_eventually(&phone, web).await.unwrap(), b"hello");
    let user = format!("/users/{family}");
    until(&api, &control, &user, Duration::from_secs(20), |u| u["devices"]["online"] == 1).await;
    // Node b's set now holds no room for another of the family's devices: a second device
    // there is refused (once b has its new set), and control hears of the refusal.
    let laptop = ProxyClient::sing_box(outbound(&http, &family_link, port_b, "127.0.0.3").await).unwrap();
    let started = Instant::now();
    let mut refused = 0;
    while refused < 3 {
        match fetch(&laptop, web).await {
            Err(_) => refused += 1,
            Ok(_) => {
                assert!(started.elapsed() < Duration::from_secs(10), "node b never held the family to one device");
                refused = 0;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
    let seen =
        until(&api, &control, &user, Duration::from_secs(20), |u| u["devices"]["refused"].as_u64() >= Some(1)).await;
    assert_eq!(seen["devices"]["nodes"], json!([format!("Home {port_a}")]));
    // The phone leaves (its connection idles out at node a): the laptop gets in at b.
    drop(phone);
    let started = Instant::now();
    while fetch(&laptop, web).await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(75), "the laptop never got in after the phone left");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    until(&api, &control, &user, Duration::from_secs(20), |u| {
        u["devices"]["nodes"] == json!([format!("Home {port_b}")])
    })
    .await;

    // Node a counts twice, and may carry 3 MiB a month.
    let node = format!("/nodes/{a}");
    let body = json!({ "multiplier": 2, "quota": 3u64 << 20 });
    api.ok(&control, reqwest::Method::PATCH, &node, Some(body)).await;
    let large: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    let big = http_server(large.clone()).await.unwrap();
    let heavy_client = ProxyClient::sing_box(outbound(&http, &heavy_link, port_a, "127.0.0.4").await).unwrap();
    assert!(fetch_eventually(&heavy_client, big).await.unwrap() == large);
    let counted = until(&api, &control, &format!("/users/{heavy}"), Duration::from_secs(20), |u| {
        u["raw_down"].as_u64() >= Some(1 << 20)
    })
    .await;
    assert_eq!(counted["used_down"].as_u64(), counted["raw_down"].as_u64().map(|raw| raw * 2), "{counted}");
    assert_eq!(counted["used_up"].as_u64(), counted["raw_up"].as_u64().map(|raw| raw * 2), "{counted}");
    // Past the cap: node a stops carrying anyone; the overview says so; b goes on.
    for _ in 0..3 {
        let _ = fetch(&heavy_client, big).await;
    }
    until(&api, &control, &node, Duration::from_secs(20), |n| n["limited"] == true).await;
    let status = api.get(&control, "/status").await;
    assert_eq!(status["nodes"]["limited"][0]["id"].as_u64(), Some(a));
    let started = Instant::now();
    while fetch(&heavy_client, web).await.is_ok() {
        assert!(started.elapsed() < Duration::from_secs(15), "node a still carries traffic past its cap");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(fetch(&laptop, web).await.unwrap(), b"hello", "node b stopped with a");
    node_a.stop().unwrap();
    node_b.stop().unwrap();
}

/// GETs `path` of a node's traffic stats API with `secret` (none: no header).
async fn stats(http: &reqwest::Client, api: &str, path: &str, secret: Option<&str>) -> (u16, String) {
    let mut request = http.get(format!("{api}{path}"));
    if let Some(secret) = secret {
        request = request.header("authorization", secret);
    }
    let answer = request.send().await.unwrap();
    (answer.status().as_u16(), answer.text().await.unwrap())
}

/// The official server's traffic stats API on a real node, asked by hysteria2-api (a client
/// written for the official server, from PyPI) and by hand: per-user bytes with `?clear=1`
/// clearing only its view (control's counts stay), who is online, every relayed TCP stream;
/// a kick closes the user's connections at once and nobody else's, reaches control in the
/// next report and is recorded in the audit log; a wrong secret gets 401 and changes nothing.
#[tokio::test]
async fn the_official_traffic_stats_api_answers_its_clients_and_kicks_as_the_panel_does() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let python_path = std::env::var("HEARTH_HYSTERIA2_API")
        .expect("HEARTH_HYSTERIA2_API is unset: tests/tools/toolchain.sh's hearth_install_stats_client installs it");
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let control = ControlProcess::start(&dir, &[]).unwrap();
    let http = dir.client().unwrap();
    let api = Api { token: control.setup(&http, "admin").await.unwrap(), http: http.clone() };
    let state = temp.path().join("node");
    let (port, _) = control.enroll_node(&http, &api.token, &state).await.unwrap();
    let node_id = api.get(&control, "/nodes").await["nodes"][0]["id"].as_u64().unwrap();
    let stats_port = hearth_tests::edge::free_port().unwrap();
    let secret = "a stats secret";
    let mut settings = std::fs::read_to_string(state.join("node.toml")).unwrap();
    settings += &format!("\n[traffic_stats]\nlisten = \"127.0.0.1:{stats_port}\"\nsecret = \"{secret}\"\n");
    std::fs::write(state.join("node.toml"), settings).unwrap();
    let alice = api.post(&control, "/users", json!({ "name": "alice" })).await["id"].as_u64().unwrap();
    let bob = api.post(&control, "/users", json!({ "name": "bob" })).await["id"].as_u64().unwrap();
    let link_of = |id: u64| {
        let (api, control) = (&api, &control);
        async move { api.get(control, &format!("/users/{id}/link")).await["link"].as_str().unwrap().to_owned() }
    };
    let (alice_link, bob_link) = (link_of(alice).await, link_of(bob).await);
    let node = NodeProcess::start(&state).unwrap();
    let stats_api = format!("http://127.0.0.1:{stats_port}");
    let plain = reqwest::Client::new();
    let web = http_server(b"hello".to_vec()).await.unwrap();
    let alices = ProxyClient::sing_box(outbound(&http, &alice_link, port, "127.0.0.2").await).unwrap();
    let bobs = ProxyClient::sing_box(outbound(&http, &bob_link, port, "127.0.0.3").await).unwrap();
    assert_eq!(fetch_eventually(&alices, web).await.unwrap(), b"hello");
    assert_eq!(fetch_eventually(&bobs, web).await.unwrap(), b"hello");

    // A stream each, open: /dump/streams lists them as the official server does.
    let echo = hearth_tests::node::tcp_echo().await.unwrap();
    let mut alice_stream = alices.connect(echo).await.unwrap();
    let mut bob_stream = bobs.connect(echo).await.unwrap();
    for stream in [&mut alice_stream, &mut bob_stream] {
        stream.write_all(b"ping").await.unwrap();
        let mut back = [0u8; 4];
        stream.read_exact(&mut back).await.unwrap();
    }
    let (status, dump) = stats(&plain, &stats_api, "/dump/streams", Some(secret)).await;
    assert_eq!(status, 200, "{dump}");
    let dump: Value = serde_json::from_str(&dump).unwrap();
    let mine = dump["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["auth"].as_str() == Some(&alice.to_string()) && s["req_addr"].as_str() == Some(&echo.to_string()))
        .unwrap_or_else(|| panic!("no stream of alice to {echo} in {dump}"))
        .clone();
    assert_eq!((mine["state"].as_str(), mine["tx"].as_u64(), mine["rx"].as_u64()), (Some("estab"), Some(4), Some(4)));
    assert!(mine["initial_at"].as_str().unwrap().ends_with('Z') && mine["connection"].as_u64().unwrap() > 0);
    let table = plain
        .get(format!("{stats_api}/dump/streams"))
        .header("authorization", secret)
        .header("accept", "text/plain")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(table.starts_with("State    Auth ") && table.contains(&echo.to_string()), "{table}");

    // A wrong secret, or none: 401 for every path, a kick changes nothing, nothing is cleared.
    for wrong in [None, Some("a stats secreT")] {
        for path in ["/traffic?clear=1", "/online", "/dump/streams", "/"] {
            assert_eq!(stats(&plain, &stats_api, path, wrong).await.0, 401, "{path} with {wrong:?}");
        }
        let mut kick = plain.post(format!("{stats_api}/kick")).json(&json!([bob.to_string()]));
        if let Some(wrong) = wrong {
            kick = kick.header("authorization", wrong);
        }
        assert_eq!(kick.send().await.unwrap().status().as_u16(), 401);
    }

    // hysteria2-api, as a script or a bot built on it would use it.
    let script = r#"
import json, sys
from hysteria2_api import Hysteria2Client
from hysteria2_api.exceptions import Hysteria2AuthError
url, secret, kick = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    Hysteria2Client(url, secret="wrong").get_online_clients()
    refused = False
except Hysteria2AuthError:
    refused = True
client = Hysteria2Client(url, secret=secret)
online = {k: v.connections for k, v in client.get_online_clients().items()}
traffic = {k: [v.upload_bytes, v.download_bytes] for k, v in client.get_traffic_stats(clear=True).items()}
after = {k: [v.tx, v.rx] for k, v in client.get_traffic_stats().items()}
kicked = client.kick_clients([kick])
print(json.dumps({"refused": refused, "online": online, "traffic": traffic, "after": after, "kicked": kicked}))
"#;
    let run = std::process::Command::new("python3")
        .env("PYTHONPATH", &python_path)
        .args(["-c", script, &stats_api, secret, &alice.to_string()])
        .output()
        .unwrap();
    assert!(run.status.success(), "hysteria2-api: {}", String::from_utf8_lossy(&run.stderr));
    let said: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(said["refused"], true, "{said}");
    assert_eq!(said["online"], json!({ alice.to_string(): 1, bob.to_string(): 1 }), "{said}");
    for user in [alice, bob] {
        let [up, down] = [0, 1].map(|i| said["traffic"][user.to_string()][i].as_u64().unwrap());
        assert!(up >= 4 && down >= 4 + 5, "{user}: {said}");
    }
    assert_eq!(said["after"], json!({}), "?clear=1 cleared the view: {said}");
    assert_eq!(said["kicked"], true);

    // The kick closed alice's connection here at once, not bob's; her app connects again.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), alice_stream.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "alice's stream stayed open after the kick");
    bob_stream.write_all(b"pong").await.unwrap();
    let mut back = [0u8; 4];
    bob_stream.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"pong", "the kick of alice touched bob");
    // Control heard of it in the node's next report: the audit log names the node, and
    // alice's counted bytes were not cleared with the API's view.
    let audit = until(&api, &control, "/audit?action=user.kick", Duration::from_secs(20), |a| {
        a["entries"].as_array().is_some_and(|e| !e.is_empty())
    })
    .await;
    let entries = audit["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "bob was never kicked: {audit}");
    assert_eq!(entries[0]["actor"], format!("node {node_id} (traffic stats API)"));
    assert_eq!(entries[0]["target"], format!("user {alice} (alice)"));
    let [shown_up, shown_down] = [0, 1].map(|i| said["traffic"][alice.to_string()][i].as_u64().unwrap());
    until(&api, &control, &format!("/users/{alice}"), Duration::from_secs(20), |u| {
        u["raw_up"].as_u64() >= Some(shown_up) && u["raw_down"].as_u64() >= Some(shown_down)
    })
    .await;
    assert_eq!(fetch_eventually(&alices, web).await.unwrap(), b"hello", "a kick is not a ban");
    node.stop().unwrap();
}
