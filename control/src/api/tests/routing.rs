//! Routing per user through the API: outbounds and rule sets are checked (a bad rule is
//! refused with its line and column), sealed for each node in its credential set, and each
//! user's entry names the rule set it is routed by; only the owner says who goes where.

use axum::http::{Method, StatusCode};
use serde_json::json;

use super::{Client, enroll, node_get, set_of};

#[tokio::test]
async fn rule_sets_are_checked_sealed_for_the_node_and_given_per_user() {
    let client = Client::signed_in(false).await;
    let warp = client
        .post(
            "/outbounds",
            json!({ "name": "warp", "type": "socks5", "server": "127.0.0.1:40000", "username": "u", "password": "proxy-secret" }),
        )
        .await;
    assert_eq!(warp.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&warp.body));
    assert_eq!(warp.json()["password_set"], true);
    let office =
        client.post("/outbounds", json!({ "name": "office", "type": "http", "server": "10.1.1.1:3128" })).await;
    assert_eq!(office.status, StatusCode::CREATED);
    let listed = client.get("/routing").await;
    assert!(!String::from_utf8_lossy(&listed.body).contains("proxy-secret"), "the password is never shown");

    // Rules that do not check: refused with where, and nothing is stored.
    for (rules, line, column, why) in [
        ("direct(all)\n  warp(suffix:example.com, tcp/99999)", 2, 28, "protocol/port"),
        ("# ok\nnowhere(all)", 2, 1, "no outbound named nowhere"),
        ("office(all)", 1, 1, "carries TCP only"),
        ("direct(all", 1, 1, "not a rule"),
    ] {
        let refused = client.post("/rule-sets", json!({ "name": "bad", "rules": rules })).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{rules}");
        let error = &refused.json()["error"];
        assert_eq!(error["code"], "bad_routing_rules", "{rules}");
        assert_eq!((error["line"].as_u64(), error["column"].as_u64()), (Some(line), Some(column)), "{rules}: {error}");
        assert!(error["message"].as_str().unwrap().contains(why), "{error}");
    }
    assert_eq!(client.get("/routing").await.json()["rule_sets"], json!([]));

    let streaming = client
        .post("/rule-sets", json!({ "name": "streaming", "rules": "warp(suffix:netflix.com)\noffice(all, tcp/8080)" }))
        .await;
    assert_eq!(streaming.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&streaming.body));
    let set_id = streaming.json()["id"].as_u64().unwrap() as u16;
    let blocked = client.post("/rule-sets", json!({ "name": "no-ads", "rules": "reject(suffix:ads.example)" })).await;
    let blocked_id = blocked.json()["id"].as_u64().unwrap() as u16;
    // Turning an outbound the rules send UDP through into an HTTP proxy is refused.
    let warp_id = warp.json()["id"].as_i64().unwrap();
    let turned =
        client.patch(&format!("/outbounds/{warp_id}"), json!({ "type": "http", "server": "10.0.0.2:3128" })).await;
    assert_eq!(turned.json()["error"]["code"], "bad_routing_rules");
    let gone = client.send(Method::DELETE, &client.admin(&format!("/outbounds/{warp_id}")), None, &[]).await;
    assert_eq!(gone.json()["error"]["code"], "bad_routing_rules", "a rule set still names it");

    // A group's users are routed by its set; a user's own wins.
    assert_eq!(
        client.post("/groups", json!({ "name": "watchers", "rule_set": "streaming" })).await.status,
        StatusCode::CREATED
    );
    let alice = client.post("/users", json!({ "name": "alice", "groups": ["default", "watchers"] })).await.json();
    let bob = client.post("/users", json!({ "name": "bob" })).await.json();
    let carol =
        client.post("/users", json!({ "name": "carol", "groups": ["watchers"], "rule_set": "no-ads" })).await.json();
    assert_eq!((alice["routed_by"].as_str(), alice["rule_set"].as_str()), (Some("streaming"), None));
    assert_eq!(bob["routed_by"], serde_json::Value::Null);
    assert_eq!(carol["routed_by"], "no-ads");
    let (node, key) = enroll(&client, json!(["default", "watchers"])).await;
    let pulled = node_get(&client, node, &key, &format!("/nodes/{node}/creds?after=0")).await;
    assert_eq!(pulled.status, StatusCode::OK, "{}", String::from_utf8_lossy(&pulled.body));
    let set = set_of(&pulled);
    let rules_of = |set: &hearth_shared::wire::CredentialSet, user: &serde_json::Value| {
        set.entry(user["id"].as_u64().unwrap()).unwrap().rules
    };
    assert_eq!((rules_of(&set, &alice), rules_of(&set, &bob), rules_of(&set, &carol)), (set_id, 0, blocked_id));
    // Only this node opens its routing: the proxy's password travels sealed.
    let sealed = set.routing().expect("the set carries routing");
    assert!(!String::from_utf8_lossy(sealed).contains("proxy-secret"));
    let routing = hearth_shared::routing::open(sealed, &key).unwrap();
    assert_eq!(routing.set(set_id).unwrap().name, "streaming");
    let warp = routing.outbounds.iter().find(|o| o.name == "warp").unwrap();
    assert!(format!("{:?}", serde_json::to_value(warp).unwrap()).contains("proxy-secret"));
    let other =
        hearth_shared::keys::SecretKey::generate(hearth_shared::keys::Role::Node, &mut rand_core::OsRng).unwrap();
    assert!(hearth_shared::routing::open(sealed, &other).is_err());

    // Bob given a set: his entry alone changes.
    let on = pulled_version(&pulled);
    let moved = client.patch(&format!("/users/{}", bob["id"]), json!({ "rule_set": "no-ads" })).await;
    assert_eq!(moved.json()["routed_by"], "no-ads", "{}", String::from_utf8_lossy(&moved.body));
    let after = node_get(&client, node, &key, &format!("/nodes/{node}/creds?after={on}")).await;
    assert_eq!(after.status, StatusCode::OK, "{}", String::from_utf8_lossy(&after.body));
    let after = set_of(&after);
    assert_eq!(rules_of(&after, &bob), blocked_id);
    assert_eq!(after.routing(), set.routing(), "the routing did not change");
    // A set given to someone is not removed.
    let in_use = client.send(Method::DELETE, &client.admin(&format!("/rule-sets/{blocked_id}")), None, &[]).await;
    assert_eq!((in_use.status, in_use.code().as_str()), (StatusCode::CONFLICT, "in_use"));
    let unknown = client.patch(&format!("/users/{}", bob["id"]), json!({ "rule_set": "nope" })).await;
    assert_eq!(unknown.code(), "bad_rule_set");

    // Only the owner says who goes where.
    client.post("/admins", json!({ "login": "otto", "role": "operator", "password": "a long password" })).await;
    let otto = client.as_admin("otto").await;
    let refused = otto.patch("/groups/1", json!({ "rule_set": "no-ads" })).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let refused = otto.post("/rule-sets", json!({ "name": "mine", "rules": "direct(all)" })).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
}

fn pulled_version(answer: &super::Answer) -> u64 {
    let envelope =
        hearth_shared::envelope::Envelope::decode(&answer.body, hearth_shared::envelope::Kind::CredentialSet.max_len())
            .unwrap();
    envelope.header.version
}
