//! Fair use end to end: the real control binary, two real nodes enrolled with the command
//! control prints, and real sing-box clients bound to their own loopback addresses (each
//! one device). A device limit holds across nodes; a node's multiplier counts its traffic
//! twice; a node's monthly cap, reached live, stops it carrying anyone.

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
