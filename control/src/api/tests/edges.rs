//! Edges through the API: added, marked and removed with links following, and links moving
//! off a primary edge that keeps failing.

use super::*;

/// The second edge the tests add.
fn mirror_edge() -> Value {
    json!({
        "name": "mirror",
        "url": "https://mirror.example",
        "api_prefix": "mirror_prefix_0123456789",
        "push_token": "a-push-token-of-the-mirror-0123",
        "link_base": "https://sub.mirror.example/s",
    })
}

/// Edges added, reordered, marked and removed through the API: a new edge lacks everything
/// and is counted so; every user has a link at each edge; marking the primary's domain
/// blocked moves every primary link to the next active edge; bad input changes nothing.
/// The primary edge follows health, not only the owner's order (issue 46, 9): failing for the
/// failover period while another edge takes pushes, its links move to that one as if the owner
/// had marked it blocked, told once and audited; they move back only when the owner says so,
/// and that gives it a whole period again.
#[tokio::test]
async fn links_move_off_a_primary_edge_that_keeps_failing() {
    let client = Client::signed_in(true).await;
    let app = client.app().clone();
    let mirror = mirror_edge();
    assert_eq!(client.post("/edges", mirror).await.status, StatusCode::CREATED);
    let alice = client.post("/users", json!({ "name": "alice" })).await.json();
    let id = alice["id"].as_u64().unwrap();
    let primary =
        || async { client.get(&format!("/users/{id}/link")).await.json()["link"].as_str().unwrap().to_owned() };
    assert!(primary().await.starts_with("http://127.0.0.1:9/"), "the main edge first");
    let health = move |main_since: u64, mirror_push: u64| {
        let app = app.clone();
        async move {
            app.db
                .write(move |tx| {
                    tx.execute(
                        "UPDATE edges SET last_error = iif(?1 > 0, 'the edge did not answer', NULL), error_since = ?1 WHERE name = 'main'",
                        [main_since],
                    )?;
                    tx.execute("UPDATE edges SET last_error = NULL, error_since = 0, last_push = ?1 WHERE name = 'mirror'", [mirror_push])?;
                    Ok(())
                })
                .await
                .unwrap();
        }
    };
    let fail_over = || {
        let app = client.app().clone();
        async move {
            let state = app.clone();
            let moved = app.db.write(move |tx| crate::tasks::fail_over(tx, &state, now())).await.unwrap();
            if moved {
                app.refresh_links().unwrap();
            }
            moved
        }
    };
    let period = client.app().config.edge_failover_secs;
    assert_eq!(period, 600, "ten minutes by default");
    // Failing, but not for long: nothing moves; nor while no other edge takes pushes.
    health(now() - period / 2, now()).await;
    assert!(!fail_over().await);
    health(now() - period - 1, 0).await;
    assert!(!fail_over().await, "nowhere healthy to move to");
    // Failing for the whole period, the mirror healthy: links move there, once.
    health(now() - period - 1, now()).await;
    assert!(fail_over().await);
    assert!(!fail_over().await, "moved once");
    assert!(primary().await.starts_with("https://sub.mirror.example/s/"), "{}", primary().await);
    let edges = client.get("/edges").await.json();
    assert_eq!(edges["edges"][0]["state"], "blocked", "{edges}");
    let events = client.get("/events?limit=10").await.json();
    let told: Vec<&Value> =
        events["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "edge.failover").collect();
    assert_eq!(told.len(), 1, "{events}");
    assert_eq!(told[0]["data"]["to"]["name"], "mirror");
    let audit = client.get("/audit?action=edge.failover").await.json();
    assert_eq!(audit["entries"][0]["actor"], "control", "{audit}");
    // The owner moves them back: the main edge is primary again, with a whole period to heal.
    let main_id = edges["edges"][0]["id"].as_i64().unwrap();
    let back = client.patch(&format!("/edges/{main_id}"), json!({ "state": "active" })).await;
    assert_eq!(back.status, StatusCode::OK);
    assert!(primary().await.starts_with("http://127.0.0.1:9/"));
    assert!(!fail_over().await, "a whole period again from the owner's act");
}

#[tokio::test]
async fn edges_are_added_marked_and_removed_and_links_follow() {
    let client = Client::signed_in(true).await;
    let (node, _) = enroll(&client, json!(["default"])).await;
    let listed = || async {
        let set = client
            .app()
            .db
            .read(move |c| crate::store::streams::envelope(c, &hearth_shared::wire::stream::creds(node)))
            .await
            .unwrap()
            .unwrap()
            .1;
        let envelope = Envelope::decode(&set, Kind::CredentialSet.max_len()).unwrap();
        let set = CredentialSet::decode(&envelope.body).unwrap();
        set.edges().iter().map(|edge| (edge.url.clone(), edge.api_prefix.clone())).collect::<Vec<_>>()
    };
    assert_eq!(listed().await, [], "one main edge: nodes use the edge control names, the set lists none");
    let alice = client.post("/users", json!({ "name": "alice" })).await.json();
    let token = alice["link"].as_str().unwrap().rsplit('/').next().unwrap().to_owned();
    assert_eq!(alice["links"].as_array().unwrap().len(), 1, "{alice}");
    let main = client.get("/edges").await.json();
    assert_eq!(main["edges"][0]["name"], "main", "{main}");
    assert_eq!(main["primary"], format!("http://127.0.0.1:9/{}", client.app().config.edge.sub_prefix));

    let mirror = mirror_edge();
    for (field, value, code) in [
        ("name", json!("Main Two"), "bad_edge_name"),
        ("name", json!("main"), "bad_edge_name"),
        ("url", json!("ftp://mirror.example"), "bad_url"),
        ("api_prefix", json!("short"), "bad_api_prefix"),
        ("push_token", json!("short"), "bad_push_token"),
        ("link_base", json!("https://x.example/?q"), "bad_url"),
    ] {
        let mut body = mirror.clone();
        body[field] = value;
        let answer = client.post("/edges", body).await;
        assert_eq!((answer.status, answer.json()["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some(code)));
    }
    assert_eq!(client.get("/edges").await.json()["edges"].as_array().unwrap().len(), 1, "nothing was added");
    let added = client.post("/edges", mirror.clone()).await;
    assert_eq!(added.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&added.body));
    let added = added.json();
    assert!(added["pending"].as_u64().unwrap() >= 1, "a new edge lacks everything: {added}");
    assert!(!String::from_utf8_lossy(&client.get("/edges").await.body).contains("a-push-token"), "no token shown");
    assert_eq!(client.post("/edges", mirror.clone()).await.status, StatusCode::CONFLICT);

    let main_prefix = client.app().config.edge.api_prefix.clone();
    let both = vec![
        ("http://127.0.0.1:9".to_owned(), main_prefix.clone()),
        ("https://mirror.example".to_owned(), "mirror_prefix_0123456789".to_owned()),
    ];
    assert_eq!(listed().await, both, "two edges: every node's set lists them, in order");
    let links = client.get(&format!("/users/{}/link", alice["id"])).await.json();
    let at: Vec<&str> = links["links"].as_array().unwrap().iter().map(|l| l["link"].as_str().unwrap()).collect();
    assert_eq!(at[1], format!("https://sub.mirror.example/s/{token}"), "{links}");
    assert!(links["link"].as_str().unwrap().starts_with("http://127.0.0.1:9/"), "main stays primary");

    // The main domain is blocked: every primary link moves to the mirror.
    let main_id = main["edges"][0]["id"].as_i64().unwrap();
    let answer = client.patch(&format!("/edges/{main_id}"), json!({ "state": "blocked" })).await;
    assert_eq!(answer.status, StatusCode::OK);
    let links = client.get(&format!("/users/{}/link", alice["id"])).await.json();
    assert_eq!(links["link"], format!("https://sub.mirror.example/s/{token}"), "{links}");
    assert_eq!(listed().await, [both[1].clone(), both[0].clone()], "nodes try the edge offering links first");
    assert_eq!(links["links"].as_array().unwrap().len(), 2, "a blocked edge's link is still listed");
    let answer = client.patch(&format!("/edges/{main_id}"), json!({ "state": "gone" })).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    client.patch(&format!("/edges/{main_id}"), json!({ "state": "retired" })).await;
    let links = client.get(&format!("/users/{}/link", alice["id"])).await.json();
    assert_eq!(links["links"].as_array().unwrap().len(), 1, "a retired edge's link is not offered: {links}");

    // The main edge is removed through the settings only; the mirror goes with DELETE.
    let answer = client.send(Method::DELETE, &client.admin(&format!("/edges/{main_id}")), None, &[]).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    // With the main edge gone, the one left has its own prefix: nodes are told it in the set.
    assert_eq!(client.patch("/settings", json!({ "edge_url": "" })).await.status, StatusCode::OK);
    assert_eq!(listed().await, [both[1].clone()], "a lone edge with its own prefix is listed");
    let id = added["id"].as_i64().unwrap();
    let answer = client.send(Method::DELETE, &client.admin(&format!("/edges/{id}")), None, &[]).await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    assert_eq!(client.get("/edges").await.json()["edges"].as_array().unwrap().len(), 0);
    assert_eq!(listed().await, [], "no edge: nothing listed");
    let audit = String::from_utf8_lossy(&client.get("/audit").await.body).into_owned();
    for action in ["edge.add", "edge.state", "edge.remove"] {
        assert!(audit.contains(action), "{action} audited: {audit}");
    }
}
