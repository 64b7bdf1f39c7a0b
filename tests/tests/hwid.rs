//! HWID at the edge, end to end: the real control binary pushing to a native edge and to the
//! Worker in workerd. Apps that name their device (`x-hwid`, as Happ does) are registered per
//! link at each edge; over the user's limit, a new device gets one entry named "Device limit
//! reached" and no credential, and the page says so; the registries reach control, which
//! lists the devices, and a device the owner deletes frees its room at both edges.

use std::time::Duration;

use hearth_tests::control::{WithEdge, add_worker_edge};
use hearth_tests::eventually;
use serde_json::json;

/// What a link answers an app on `device` (Happ's headers; read as mihomo YAML here).
async fn fetch(http: &reqwest::Client, link: &str, device: &str, format: &str) -> String {
    let response = http
        .get(format!("{link}?format={format}"))
        .header("user-agent", "Happ/3.4.1")
        .header("x-hwid", device)
        .header("x-device-os", "iOS")
        .header("x-ver-os", "18.1")
        .header("x-device-model", "iPhone15,2")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{link}");
    response.text().await.unwrap()
}

/// Whether a profile is the user's own (a server and the user's credential), not the one a
/// device over the limit gets.
fn served(profile: &str) -> bool {
    profile.contains("password:") && !profile.contains("Device limit reached") && !profile.contains("device-limit")
}

fn refused(profile: &str) -> bool {
    profile.contains("Device limit reached") && profile.contains("password: device-limit-reached")
}

#[tokio::test]
async fn devices_over_the_limit_are_turned_away_at_both_edges_and_deleting_one_frees_its_room() {
    let temp = tempfile::tempdir().unwrap();
    let WithEdge { dir, main: _main, control, http, api } = WithEdge::start(temp.path()).await.unwrap();
    let plain = hearth_tests::http().build().unwrap();
    control.enroll_node(&http, &api.token, &temp.path().join("node")).await.unwrap();
    let _worker = add_worker_edge(&api, &control, &dir, &temp.path().join("worker"), "worker").await.unwrap();
    let id = api.post(&control, "/users", json!({ "name": "family", "device_limit": 2 })).await["id"].as_u64().unwrap();
    let answer = api.get(&control, &format!("/users/{id}/link")).await;
    let links: Vec<(String, String)> = answer["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["edge"].as_str().unwrap().to_owned(), l["link"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(links.len(), 2, "{answer}");
    for (edge, link) in &links {
        // Control's status says when the edge holds everything (an edge answers a network
        // that keeps asking for links it does not hold with decoys for a while).
        eventually(&format!("{edge} up to date"), Duration::from_secs(60), || async {
            let status = api.get(&control, "/status").await;
            status["edges"].as_array().unwrap().iter().any(|e| e["name"] == edge.as_str() && e["pending"] == 0)
        })
        .await;
        assert!(served(&fetch(&plain, link, "phone-1", "mihomo").await), "{edge}: the first device");
        assert!(served(&fetch(&plain, link, "phone-2", "mihomo").await), "{edge}: the second");
        let third = fetch(&plain, link, "tablet", "mihomo").await;
        assert!(refused(&third), "{edge}: the third device gets no server: {third}");
        assert!(served(&fetch(&plain, link, "phone-1", "mihomo").await), "{edge}: a known device still is");
        let page = fetch(&plain, link, "laptop", "page").await;
        assert!(page.contains("Device limit reached: this subscription works on at most 2 devices"), "{edge}: {page}");
        // An app that names no device (Hiddify, v2rayNG) is served: the nodes' limit holds it.
        let hiddify = plain.get(format!("{link}?format=mihomo")).header("user-agent", "HiddifyNext/2.5.7");
        assert!(served(&hiddify.send().await.unwrap().text().await.unwrap()), "{edge}: no device id");
    }

    // Both edges' registries reach control with the usage drain: the two phones, and that a
    // device was turned away.
    let hwid = format!("/users/{id}/hwid");
    eventually("control lists the registered devices", Duration::from_secs(30), || async {
        let listed = api.get(&control, &hwid).await;
        listed["devices"].as_array().is_some_and(|d| d.len() == 2) && listed["refused_at"].as_u64() > Some(0)
    })
    .await;
    let listed = api.get(&control, &hwid).await;
    let devices = listed["devices"].as_array().unwrap();
    assert!(devices.iter().all(|d| d["os"] == "iOS" && d["os_version"] == "18.1" && d["app"] == "Happ/3.4.1"));
    assert_eq!(devices[0]["model"], "iPhone15,2");
    let phone_2 = hex::encode(hearth_shared::devices::key_of("phone-2"));
    assert!(devices.iter().any(|d| d["key"] == phone_2.as_str()), "{listed}");

    // The owner deletes phone-2: each edge, once it has the snapshot again, lets the tablet in
    // (and phone-2, registered before the deletion, is now the one over the limit).
    let after = api.call(&control, reqwest::Method::DELETE, &format!("{hwid}/{phone_2}"), None).await;
    assert_eq!(after.0, 200, "{:?}", after.1);
    for (edge, link) in &links {
        eventually(&format!("{edge} lets the tablet in"), Duration::from_secs(30), || async {
            served(&fetch(&plain, link, "tablet", "mihomo").await)
        })
        .await;
        assert!(refused(&fetch(&plain, link, "phone-2", "mihomo").await), "{edge}: the deleted phone is a new device");
    }
    eventually("control lists phone-1 and the tablet", Duration::from_secs(30), || async {
        let listed = api.get(&control, &hwid).await;
        let keys: Vec<String> =
            listed["devices"].as_array().unwrap().iter().map(|d| d["key"].as_str().unwrap().to_owned()).collect();
        keys.len() == 2 && keys.contains(&hex::encode(hearth_shared::devices::key_of("tablet")))
    })
    .await;
}
