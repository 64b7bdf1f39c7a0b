//! What control logs while it serves a request is in that request's span: an admin call's
//! method, route and client; a node's id. Never a secret prefix, a password or a signature.

use axum::http::StatusCode;
use serde_json::json;

use super::{CONTROL_HOST, Client, enroll, node_request, node_signature, node_usage};
use crate::testing::Logs;

#[tokio::test]
async fn what_a_request_logs_names_its_route_or_node_and_no_secret() {
    let client = Client::signed_in(true).await;
    let (node, key) = enroll(&client, json!(["default"])).await;
    let (admin_prefix, api_prefix) =
        (client.app().config.admin_prefix.clone(), client.app().config.edge.api_prefix.clone());
    let logs = Logs::new(false, "hearth_control=debug");
    let guard = tracing::dispatcher::set_default(&logs.dispatch);

    // A refused sign-in, from an address of its own.
    let refused = client.login_from("192.0.2.7", json!({ "login": "owner", "password": "not the password" })).await;
    assert_eq!(refused.code(), "bad_login");
    // A node's pull, sent twice: the second is a replay.
    let pull = format!("/{api_prefix}/nodes/{node}/creds?after=0");
    let header = node_signature(node, &key, "GET", &pull, b"");
    assert_eq!(node_request(&client, CONTROL_HOST, &pull, &header, Vec::new()).await.status, StatusCode::OK);
    let replayed = node_request(&client, CONTROL_HOST, &pull, &header, Vec::new()).await;
    assert_eq!(replayed.status, StatusCode::UNAUTHORIZED);
    // A usage upload that is no report.
    let refused = node_usage(&client, node, &key, b"not a report".to_vec()).await;
    assert!(refused.status.is_client_error(), "{}", String::from_utf8_lossy(&refused.body));
    drop(guard);

    let log = logs.text();
    let line = logs.line("sign-in refused");
    assert!(line.contains("request{method=POST route=/api/login client=192.0.2.7}:"), "{line}");
    let line = logs.line("node request refused");
    assert!(line.contains(&format!("pull{{node={node} after=0}}:")), "{line}");
    let line = logs.line("usage report refused");
    assert!(line.contains(&format!("usage{{node={node}}}:")), "{line}");
    // The events no longer repeat what their spans say.
    assert!(!line.contains(" node="), "{line}");
    for secret in [admin_prefix.as_str(), api_prefix.as_str(), "not the password", header.as_str()] {
        assert!(!log.contains(secret), "{secret:?} is in the log:\n{log}");
    }
}

/// The same spans in the JSON format: `span` (the innermost) and `spans`.
#[tokio::test]
async fn the_json_log_carries_the_spans_too() {
    let client = Client::signed_in(true).await;
    let logs = Logs::new(true, "hearth_control=info");
    let guard = tracing::dispatcher::set_default(&logs.dispatch);
    let refused = client.login_from("192.0.2.8", json!({ "login": "owner", "password": "not the password" })).await;
    assert_eq!(refused.code(), "bad_login");
    drop(guard);
    let line: serde_json::Value = serde_json::from_str(&logs.line("sign-in refused")).expect("a JSON line");
    let span = json!({ "name": "request", "method": "POST", "route": "/api/login", "client": "192.0.2.8" });
    assert_eq!(line["span"], span, "{line}");
    assert_eq!(line["spans"], json!([span]), "{line}");
    assert_eq!(line["fields"]["reason"], "bad_login", "{line}");
}
