//! What control tells: events once per crossing, webhooks taking the kinds they ask for,
//! device refusals and new sign-in addresses.

use super::*;

/// Events are told once per crossing, in the transaction of what caused them: a quota's 80 %
/// and 95 % (not again after, nor on the way over it), over quota, expired; a node gone silent
/// and back; an edge failing and recovered.
#[tokio::test]
async fn events_tell_each_crossing_once() {
    let client = Client::signed_in(true).await;
    let app = client.app().clone();
    let alice = client.post("/users", json!({ "name": "alice", "quota": 1000 })).await.json();
    let alice_id = alice["id"].as_u64().unwrap();
    let (node, key) = enroll(&client, json!(["default"])).await;
    let sweep = || {
        let (app, state) = (app.clone(), app.clone());
        async move { app.db.write(move |tx| crate::tasks::sweep(tx, &state, now(), true, false)).await.unwrap() }
    };
    let kinds = || async {
        let events = client.get("/events?limit=100").await.json();
        let mut kinds: Vec<String> = events["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| format!("{} {}", e["kind"].as_str().unwrap(), e["data"]["percent"].as_u64().unwrap_or(0)))
            .collect();
        kinds.reverse();
        kinds
    };
    assert_eq!(kinds().await, ["user.created 0"]);
    for (seq, bytes) in [(1, 850), (2, 100), (3, 10), (4, 100)] {
        let body = report(&key, node, seq, vec![UserUsage { user: alice_id, up: 0, down: bytes }]);
        assert_eq!(node_usage(&client, node, &key, body).await.status, StatusCode::OK);
        sweep().await;
    }
    assert_eq!(kinds().await, ["user.created 0", "user.near_quota 80", "user.near_quota 95", "user.over_quota 0"]);
    // Both shares crossed between two sweeps (a minute apart): each told, lowest first, once.
    let bob = client.post("/users", json!({ "name": "bob", "quota": 1000 })).await.json();
    let body = report(&key, node, 5, vec![UserUsage { user: bob["id"].as_u64().unwrap(), up: 0, down: 960 }]);
    assert_eq!(node_usage(&client, node, &key, body).await.status, StatusCode::OK);
    sweep().await;
    sweep().await;
    let told = kinds().await;
    assert_eq!(&told[4..], ["user.created 0", "user.near_quota 80", "user.near_quota 95"], "{told:?}");
    // A larger quota: back under, tellable again, and nothing told for it but the change.
    client.patch(&format!("/users/{alice_id}"), json!({ "quota": 100_000 })).await;
    client.patch(&format!("/users/{alice_id}"), json!({ "expires_at": now() - 1 })).await;
    let told = kinds().await;
    assert_eq!(&told[7..], ["user.changed 0", "user.changed 0", "user.expired 0"], "{told:?}");

    // A node silent for long, then back; an edge failing for long, then taking a push.
    let long_ago = now() - crate::tasks::NODE_ONLINE_SECS - 10;
    app.db
        .write(move |tx| {
            tx.execute("UPDATE nodes SET last_seen = ?2 WHERE id = ?1", rusqlite::params![node, long_ago])?;
            tx.execute("UPDATE edges SET error_since = ?1, last_error = 'refused'", [long_ago])?;
            Ok(())
        })
        .await
        .unwrap();
    sweep().await;
    sweep().await;
    let told = kinds().await;
    assert_eq!(&told[10..], ["node.offline 0", "edge.failing 0"], "once each: {told:?}");
    assert_eq!(node_get(&client, node, &key, &format!("/nodes/{node}/creds?after=0")).await.status, StatusCode::OK);
    sweep().await;
    let edge: i64 = app.db.read(|c| Ok(c.query_row("SELECT id FROM edges", [], |r| r.get(0))?)).await.unwrap();
    app.db.write(move |tx| crate::store::edges::pushed(tx, edge, 0, &[], now())).await.unwrap();
    let told = kinds().await;
    assert_eq!(&told[12..], ["node.online 0", "edge.recovered 0"], "{told:?}");
    let events = client.get("/events?limit=1").await.json();
    assert_eq!(events["events"][0]["data"]["edge"]["name"], "main");
}

/// Webhooks: bad input refused with a clear error, the secret shown once, deliveries queued
/// only for the kinds a webhook takes (the test event only where it is sent).
#[tokio::test]
async fn webhooks_take_the_kinds_they_ask_for() {
    let client = Client::signed_in(false).await;
    for (body, code) in [
        (json!({ "url": "mailto:x", "events": ["*"] }), "bad_url"),
        (json!({ "url": "https://hooks.example/a", "events": [] }), "bad_events"),
        (json!({ "url": "https://hooks.example/a", "events": ["user.made"] }), "bad_events"),
        (json!({ "url": "https://hooks.example/a", "events": ["*"], "more": 1 }), "bad_json"),
    ] {
        let answer = client.post("/webhooks", body.clone()).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(answer.json()["error"]["code"], code, "{body}");
    }
    let users = client.post("/webhooks", json!({ "url": "https://hooks.example/u", "events": ["user.*"] })).await;
    assert_eq!(users.status, StatusCode::CREATED);
    let users = users.json();
    assert!(users["secret"].as_str().unwrap().starts_with("whsec_"));
    let nodes = client.post("/webhooks", json!({ "url": "https://hooks.example/n", "events": ["node.offline"] })).await;
    let nodes = nodes.json()["id"].as_i64().unwrap();
    let users = users["id"].as_i64().unwrap();
    client.post("/users", json!({ "name": "bob" })).await;
    client.post(&format!("/webhooks/{nodes}/test"), json!({})).await;
    let client = &client;
    let queued = |id: i64| async move {
        let list = client.get(&format!("/webhooks/{id}/deliveries")).await.json();
        list["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["kind"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(queued(users).await, ["user.created"]);
    assert_eq!(queued(nodes).await, ["test"]);
    let listed = client.get("/webhooks").await.json();
    assert!(!listed.to_string().contains("whsec_"), "the secret never comes back");
    assert_eq!(listed["webhooks"][0]["pending"], 1);
    assert_eq!(
        client.send(Method::DELETE, &client.admin(&format!("/webhooks/{users}")), None, &[]).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(client.get(&format!("/webhooks/{users}/deliveries")).await.status, StatusCode::NOT_FOUND);
}

/// A node turning a user's device away is told once an hour; a sign-in from an address the
/// owner has not used is told, one from a known address is not.
#[tokio::test]
async fn device_refusals_and_new_sign_in_addresses_are_told() {
    let client = Client::signed_in(true).await;
    let alice = client.post("/users", json!({ "name": "alice", "device_limit": 1 })).await.json();
    let alice_id = alice["id"].as_u64().unwrap();
    let (node, key) = enroll(&client, json!(["default"])).await;
    let told = |kind: &'static str| {
        let client = &client;
        async move {
            let events = client.get("/events?limit=100").await.json();
            events["events"].as_array().unwrap().iter().filter(|e| e["kind"] == kind).cloned().collect::<Vec<Value>>()
        }
    };
    for seq in [1, 2] {
        let body = presence_report(&key, node, seq, &[(alice_id, 1, 1, 2)]);
        assert_eq!(node_usage(&client, node, &key, body).await.status, StatusCode::OK);
    }
    let refused = told("user.over_device_limit").await;
    assert_eq!(refused.len(), 1, "once an hour: {refused:?}");
    assert_eq!(
        (refused[0]["data"]["user"]["name"].as_str(), refused[0]["data"]["by"].as_str()),
        (Some("alice"), Some("node"))
    );

    let body = json!({ "login": "owner", "password": "a long password" });
    assert_eq!(client.login_from("198.51.100.23", body.clone()).await.status, StatusCode::OK);
    assert_eq!(client.login_from("198.51.100.23", body).await.status, StatusCode::OK);
    let signed_in = told("signin.new_address").await;
    assert_eq!(signed_in.len(), 1, "{signed_in:?}");
    assert_eq!(signed_in[0]["data"]["address"], "198.51.100.23");
}
