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
