//! An edit through the API changes, tells and audits only what it really changes: a node or a
//! group given the values it has is not touched, and the audit log names what changed, old
//! and new.

use axum::http::StatusCode;
use serde_json::json;

use super::Client;

async fn last_audit(client: &Client) -> serde_json::Value {
    client.get("/audit?limit=1").await.json()["entries"][0].clone()
}

#[tokio::test]
async fn a_node_or_a_group_given_what_it_has_is_not_touched() {
    let client = Client::signed_in(true).await;
    let node =
        client.post("/nodes", json!({ "name": "Home", "host": "203.0.113.9", "sni": "cdn.example.net" })).await.json();
    let id = node["id"].as_u64().unwrap();
    let before = last_audit(&client).await;
    let same = client
        .patch(&format!("/nodes/{id}"), json!({ "host": "203.0.113.9", "sni": "cdn.example.net", "multiplier": 1 }))
        .await;
    assert_eq!(same.status, StatusCode::OK);
    assert_eq!(last_audit(&client).await, before, "nothing changed, nothing audited");
    client.patch(&format!("/nodes/{id}"), json!({ "host": "203.0.113.9", "multiplier": 2 })).await;
    let audit = last_audit(&client).await;
    assert_eq!(
        (audit["action"].as_str(), audit["detail"].as_str()),
        (Some("node.update"), Some("multiplier: 1.0 -> 2.0"))
    );

    let group = client.post("/groups", json!({ "name": "family", "note": "ours" })).await.json();
    let id = group["id"].as_u64().unwrap();
    let before = last_audit(&client).await;
    client.patch(&format!("/groups/{id}"), json!({ "name": "family", "note": "ours" })).await;
    assert_eq!(last_audit(&client).await, before);
    client.patch(&format!("/groups/{id}"), json!({ "note": "the family" })).await;
    let audit = last_audit(&client).await;
    assert_eq!(audit["detail"], "note: \"ours\" -> \"the family\"");
}

/// The audit log keeps an edit's changes field by field (old and new where shown, the note's
/// words never), and narrows by who, by what (an action or all under a prefix) and by user;
/// it lists the actors and actions it holds for the panel's filters.
#[tokio::test]
async fn the_audit_log_keeps_changes_and_narrows_by_who_what_and_user() {
    let client = Client::signed_in(false).await;
    let alice = client.post("/users", json!({ "name": "Alice", "quota": 1u64 << 30 })).await.json();
    let bob = client.post("/users", json!({ "name": "Bob" })).await.json();
    let (alice, bob) = (alice["id"].as_u64().unwrap(), bob["id"].as_u64().unwrap());
    client.patch(&format!("/users/{alice}"), json!({ "quota": 2u64 << 30, "note": "grandma's phone" })).await;
    let token = client.post("/tokens", json!({ "name": "script", "scope": "users" })).await.json()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let script = Client { control: client.control.clone(), cookie: None, bearer: Some(token) };
    assert_eq!(script.patch(&format!("/users/{bob}"), json!({ "quota": 5u64 << 30 })).await.status, StatusCode::OK);

    let edit = last_audit(&client).await;
    assert!(edit["actor"].as_str().unwrap().starts_with("token "), "{edit}");
    assert_eq!(edit["changes"], json!([{ "field": "quota", "from": 0, "to": 5u64 << 30 }]));
    let listed = client.get(&format!("/audit?user={alice}")).await.json();
    let entries = listed["entries"].as_array().unwrap();
    let actions: Vec<&str> = entries.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["user.update", "user.create"], "{listed}");
    assert_eq!(
        entries[0]["changes"],
        json!([{ "field": "quota", "from": 1u64 << 30, "to": 2u64 << 30 }, { "field": "note" }])
    );
    assert!(!listed.to_string().contains("grandma"), "a note's words stay out of the log");
    assert!(entries[1].get("changes").is_none(), "a creation is no edit");

    let by_owner = client.get("/audit?actor=owner&action=user.update").await.json();
    assert_eq!(by_owner["entries"].as_array().unwrap().len(), 1, "{by_owner}");
    assert_eq!(by_owner["entries"][0]["target"], format!("user {alice} (Alice)"));
    let users = client.get("/audit?action=user.*").await.json();
    assert!(users["entries"].as_array().unwrap().iter().all(|e| e["action"].as_str().unwrap().starts_with("user.")));
    assert_eq!(users["entries"].as_array().unwrap().len(), 4, "{users}");
    // A prefix's wildcard characters are taken as they are.
    assert_eq!(client.get("/audit?action=user_*").await.json()["entries"], json!([]));
    assert_eq!(client.get(&format!("/audit?user={}", bob + 1000)).await.json()["entries"], json!([]));
    assert!(listed["actors"].as_array().unwrap().iter().any(|a| a == "owner"), "{listed}");
    assert!(listed["actions"].as_array().unwrap().iter().any(|a| a == "user.update"), "{listed}");
    let long = client.get(&format!("/audit?actor={}", "a".repeat(201))).await;
    assert_eq!((long.status, long.code().as_str()), (StatusCode::BAD_REQUEST, "bad_filter"));
}
