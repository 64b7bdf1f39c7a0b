//! Nodes through the API: enrollment, pulls of their sets (whole, or as a delta on the set a
//! node holds), usage and presence reports taken once, and what each user's settings and
//! groups put in the sets (speed limits, slow-downs, caps, devices, kicks, guards).

use super::*;

/// Enrolls a node through the node API; returns its id and key.
pub(super) async fn enroll(client: &Client, groups: Value) -> (u64, SecretKey) {
    let node = client.post("/nodes", json!({ "name": format!("node-{}", rand_core::RngCore::next_u32(&mut rand_core::OsRng)), "host": "203.0.113.5", "port": 8443, "hop": "20000-20099", "obfs": "pw", "masquerade": "https://www.example.net/", "groups": groups })).await;
    assert_eq!(node.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&node.body));
    let command = node.json()["enroll_command"].as_str().unwrap().to_owned();
    let token = command.split_whitespace().find_map(|w| w.strip_prefix("--token=")).unwrap().to_owned();
    let key = SecretKey::generate(Role::Node, &mut rand_core::OsRng).unwrap();
    let path = format!("/{}/enroll", client.app().config.edge.api_prefix);
    let body = json!({ "token": token, "key": key.public().to_string(), "cert_sha256": hex::encode([5u8; 32]), "version": "0.1.0" });
    let answer = client.send(Method::POST, &path, Some(body.clone()), &[]).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    let said = answer.json();
    assert_eq!((said["port"].as_u64(), said["hop"].as_str()), (Some(8443), Some("20000-20099")));
    assert_eq!(said["masquerade"], "https://www.example.net/");
    let again = client.send(Method::POST, &path, Some(body), &[]).await;
    assert_eq!(again.code(), "bad_enroll_token", "a token works once");
    // An enrollment far longer than one can be is not read.
    let huge = json!({ "token": "x".repeat(64 * 1024), "key": key.public().to_string() });
    let refused = client.send(Method::POST, &path, Some(huge), &[]).await;
    assert_eq!((refused.status, refused.code().as_str()), (StatusCode::PAYLOAD_TOO_LARGE, "too_large"));
    (answer.json()["node"].as_u64().unwrap(), key)
}

/// The host nodes dial control at in these tests.
pub(super) const CONTROL_HOST: &str = "panel.example.net:8443";

/// A node's signed request header for `method` on `path` (under the API prefix) at
/// [`CONTROL_HOST`] with `body`.
pub(super) fn node_signature(node: u64, key: &SecretKey, method: &str, path: &str, body: &[u8]) -> String {
    let request = nodeauth::Request { method, host: CONTROL_HOST, path_and_query: path, body };
    nodeauth::sign(key, node, &request, now(), &mut rand_core::OsRng)
}

/// A node's request to control: `path` (under the API prefix), at `host`, with `auth` and
/// `body` (a `GET` when it is empty).
pub(super) async fn node_request(client: &Client, host: &str, path: &str, auth: &str, body: Vec<u8>) -> Answer {
    let method = if body.is_empty() { Method::GET } else { Method::POST };
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, host)
        .header(nodeauth::HEADER, auth)
        .body(HttpBody::from(body))
        .unwrap();
    client.raw(request).await
}

pub(super) async fn node_get(client: &Client, node: u64, key: &SecretKey, path_and_query: &str) -> Answer {
    let path = format!("/{}{path_and_query}", client.app().config.edge.api_prefix);
    let auth = node_signature(node, key, "GET", &path, b"");
    node_request(client, CONTROL_HOST, &path, &auth, Vec::new()).await
}

pub(super) async fn node_usage(client: &Client, node: u64, key: &SecretKey, body: Vec<u8>) -> Answer {
    let path = format!("/{}/nodes/{node}/usage", client.app().config.edge.api_prefix);
    let auth = node_signature(node, key, "POST", &path, &body);
    node_request(client, CONTROL_HOST, &path, &auth, body).await
}

pub(super) fn report(key: &SecretKey, node: u64, seq: u64, users: Vec<UserUsage>) -> Vec<u8> {
    let now = now();
    UsageReport {
        node,
        seq,
        period_start: now - 60,
        period_end: now,
        users,
        presence: Vec::new(),
        release: None,
        kicked: Vec::new(),
    }
    .sign(key, now)
    .encode()
}

pub(super) fn set_of(answer: &Answer) -> CredentialSet {
    let envelope = Envelope::decode(&answer.body, Kind::CredentialSet.max_len()).unwrap();
    CredentialSet::decode(&envelope.body).unwrap()
}

/// A node that says which full set it holds (`base`) is sent a change to one user as a delta
/// on that set, a few hundred bytes however many users the set has, which makes the set
/// control built; one that does not (a node from before deltas) is sent the whole set, and a
/// node that goes back to an older release gets the whole set signed again.
#[tokio::test]
async fn a_change_to_one_user_reaches_a_node_as_a_delta_on_the_set_it_holds() {
    let client = Client::signed_in(true).await;
    let names: Vec<String> = (0..300).map(|i| format!("family-{i:03}")).collect();
    let created = client.post("/users/bulk", json!({ "names": names })).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&created.body));
    let (node, key) = enroll(&client, json!(["default"])).await;
    let pulled = node_get(&client, node, &key, &format!("/nodes/{node}/creds?after=0&base=0")).await;
    assert_eq!(pulled.status, StatusCode::OK);
    let full = Envelope::decode(&pulled.body, Kind::CredentialSet.max_len()).unwrap();
    let base = CredentialSet::decode(&full.body).unwrap();
    assert_eq!(base.users().len(), 300);
    let mut on = full.header.version;

    // While an edge has not said it keeps deltas, a change is signed whole (an edge from
    // before deltas would refuse them); once every edge has, as deltas.
    let edges = |c: &rusqlite::Connection| {
        Ok(c.query_row("SELECT count(*), sum(deltas) FROM edges", [], |row| {
            Ok((row.get::<_, u64>(0)?, row.get::<_, u64>(1)?))
        })?)
    };
    assert!(matches!(client.app().db.read(edges).await.unwrap(), (n, 0) if n > 0));
    let first = base.users()[3].user;
    client.patch(&format!("/users/{first}"), json!({ "enabled": false })).await;
    let whole = node_get(&client, node, &key, &format!("/nodes/{node}/creds?after={on}&base={on}")).await;
    let whole = Envelope::decode(&whole.body, Kind::CredentialSet.max_len()).unwrap();
    let base = CredentialSet::decode(&whole.body).unwrap();
    assert_eq!(base.users().len(), 299);
    on = whole.header.version;
    client.app().db.write(|tx| Ok(tx.execute("UPDATE edges SET deltas = 1", [])?)).await.unwrap();
    let full = whole;

    // One user disabled: the long poll wakes with a delta on the full set held.
    let victim = base.users()[7].user;
    let wait_path = format!("/nodes/{node}/creds?after={on}&base={on}&wait=10");
    let waiter = node_get(&client, node, &key, &wait_path);
    let disabler = async {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        client.post(&format!("/users/{victim}/disable"), json!({})).await
    };
    let (woken, _) = tokio::join!(waiter, disabler);
    assert_eq!(woken.status, StatusCode::OK);
    let envelope = Envelope::decode(&woken.body, Kind::CredDelta.max_len()).unwrap();
    assert_eq!((envelope.header.kind, envelope.header.stream.as_str()), (Kind::CredDelta, &*stream::creds_delta(node)));
    assert!(woken.body.len() < 1024, "a delta of {} bytes for one user of 300", woken.body.len());
    let delta = hearth_shared::wire::CredDelta::decode(&envelope.body).unwrap();
    assert_eq!(
        (delta.base, delta.base_digest, delta.diff.removed.as_slice()),
        (on, full.header.body_hash, &[victim][..])
    );
    let now_set = base.patched(&delta).unwrap();
    assert_eq!(now_set.users().len(), 298);
    let at = envelope.header.version;
    assert!(at > on);
    // What the node holds now: nothing newer.
    let held = node_get(&client, node, &key, &format!("/nodes/{node}/creds?after={at}&base={on}")).await;
    assert_eq!(held.status, StatusCode::NO_CONTENT);
    // A second change: the delta still runs from the full set, and names both users.
    let other = base.users()[9].user;
    client.post(&format!("/users/{other}/disable"), json!({})).await;
    let second = node_get(&client, node, &key, &format!("/nodes/{node}/creds?after={at}&base={on}")).await;
    let second = Envelope::decode(&second.body, Kind::CredDelta.max_len()).unwrap();
    let delta = hearth_shared::wire::CredDelta::decode(&second.body).unwrap();
    assert_eq!((delta.base, delta.diff.removed.as_slice()), (on, &[victim, other][..]));
    assert_eq!(base.patched(&delta).unwrap().users().len(), 297);
    // Made from the delta before by the entries of the user the change touched, not from
    // every user (a debug build checks each set made so against the whole set built).
    let app = client.app().clone();
    let (base_digest, users) = (full.header.body_hash, std::collections::BTreeSet::from([other, victim]));
    let made = client
        .app()
        .db
        .read(move |c| {
            let delta_stream = stream::creds_delta(node);
            crate::publish::by_entries(
                c,
                &app.signer,
                node,
                &stream::creds(node),
                (on, base_digest),
                Some(&delta_stream),
                &users,
            )
        })
        .await
        .unwrap();
    assert_eq!(made, Some((base.patched(&delta).unwrap(), delta.diff.clone())));

    // A node on that release again, pulling without `base`: the whole set, signed above both.
    let whole = node_get(&client, node, &key, &format!("/nodes/{node}/creds?after={on}")).await;
    assert_eq!(whole.status, StatusCode::OK);
    let envelope = Envelope::decode(&whole.body, Kind::CredentialSet.max_len()).unwrap();
    assert!(envelope.header.version > second.header.version);
    assert_eq!(set_of(&whole), base.patched(&delta).unwrap());
    // And it goes on getting whole sets: a change signs the whole set again.
    let third = base.users()[11].user;
    client.post(&format!("/users/{third}/disable"), json!({})).await;
    let after = envelope.header.version;
    let next = node_get(&client, node, &key, &format!("/nodes/{node}/creds?after={after}")).await;
    assert_eq!(set_of(&next).users().len(), 296);
}

/// A node's request is taken once, for the method, host, path and body it was signed for: a
/// captured request sent again (same header, same body) is refused as a replay, and its
/// header with another body, at another host or on another path, is refused. A header signed
/// the old way (no nonce) still pulls; a usage upload signed so is refused and applies nothing.
#[tokio::test]
async fn a_node_request_is_taken_once_and_only_as_signed() {
    let client = Client::signed_in(true).await;
    let alice = client.post("/users", json!({ "name": "alice" })).await.json();
    let alice_id = alice["id"].as_u64().unwrap();
    let (node, key) = enroll(&client, json!(["default"])).await;
    let prefix = client.app().config.edge.api_prefix.clone();
    // The status and the error's code (or the length of a body that is not an error).
    let said = |answer: Answer| {
        let code = serde_json::from_slice::<Value>(&answer.body)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_owned));
        (answer.status, code.unwrap_or_else(|| format!("{} bytes", answer.body.len())))
    };
    let refused = |code: &str| (StatusCode::UNAUTHORIZED, code.to_owned());
    let used = || async {
        let user = client.get(&format!("/users/{alice_id}")).await.json();
        (user["used_up"].as_u64().unwrap(), user["used_down"].as_u64().unwrap())
    };

    // A pull, taken once.
    let pull = format!("/{prefix}/nodes/{node}/creds?after=0");
    let header = node_signature(node, &key, "GET", &pull, b"");
    assert_eq!(node_request(&client, CONTROL_HOST, &pull, &header, Vec::new()).await.status, StatusCode::OK);
    assert_eq!(said(node_request(&client, CONTROL_HOST, &pull, &header, Vec::new()).await), refused("replayed"));

    // A usage upload, taken once.
    let usage = format!("/{prefix}/nodes/{node}/usage");
    let first = report(&key, node, 1, vec![UserUsage { user: alice_id, up: 10, down: 20 }]);
    let second = report(&key, node, 2, vec![UserUsage { user: alice_id, up: 1000, down: 2000 }]);
    let header = node_signature(node, &key, "POST", &usage, &first);
    assert_eq!(node_request(&client, CONTROL_HOST, &usage, &header, first.clone()).await.status, StatusCode::OK);
    assert_eq!(said(node_request(&client, CONTROL_HOST, &usage, &header, first.clone()).await), refused("replayed"));
    // Its header with another body (a valid report of the node's), at another host, on
    // another path.
    let fresh = node_signature(node, &key, "POST", &usage, &first);
    let other_body = node_request(&client, CONTROL_HOST, &usage, &fresh, second.clone()).await;
    assert_eq!(said(other_body), refused("node_auth"));
    let other_host = node_request(&client, "edge.example.net", &usage, &fresh, first.clone()).await;
    assert_eq!(said(other_host), refused("node_auth"));
    let for_manifest = format!("/{prefix}/nodes/{node}/release");
    let header = node_signature(node, &key, "GET", &for_manifest, b"");
    assert_eq!(said(node_request(&client, CONTROL_HOST, &pull, &header, Vec::new()).await), refused("node_auth"));
    assert_eq!(used().await, (10, 20), "only the first report counted");

    // A node of an earlier release signs without a nonce: its pull is taken, its upload is not.
    let old = nodeauth::sign_v1(&key, node, "GET", &pull, now());
    assert_eq!(node_request(&client, CONTROL_HOST, &pull, &old, Vec::new()).await.status, StatusCode::OK);
    let old = nodeauth::sign_v1(&key, node, "POST", &usage, now());
    assert_eq!(said(node_request(&client, CONTROL_HOST, &usage, &old, second.clone()).await), refused("node_auth"));
    assert_eq!(used().await, (10, 20), "the old-style upload applied nothing");
    // Signed as it is now, the same report is taken.
    assert_eq!(node_usage(&client, node, &key, second).await.status, StatusCode::OK);
    assert_eq!(used().await, (1010, 2020));
}

#[tokio::test]
async fn nodes_enroll_pull_and_report_usage_exactly_once() {
    let client = Client::signed_in(true).await;
    let alice = client.post("/users", json!({ "name": "alice", "quota": 10_000 })).await.json();
    let alice_id = alice["id"].as_u64().unwrap();
    let (node, key) = enroll(&client, json!(["default"])).await;

    // The snapshot now lists the node, pinned to the certificate it reported.
    let snapshot = snapshot_of(client.app(), alice["link"].as_str().unwrap()).await.unwrap();
    assert_eq!(snapshot.endpoints.len(), 1);
    assert_eq!((snapshot.endpoints[0].port, snapshot.endpoints[0].cert_sha256), (8443, Some([5; 32])));

    let pulled = node_get(&client, node, &key, &format!("/nodes/{node}/creds?after=0")).await;
    assert_eq!(pulled.status, StatusCode::OK);
    // Control names the edge in force, for the node to fall back to.
    let edge = client.app().config.edge_url.clone().unwrap();
    assert_eq!(pulled.headers[nodeauth::EDGE_HEADER], edge.as_str());
    let set = set_of(&pulled);
    assert_eq!(set.users().len(), 1);
    assert_eq!(set.users()[0].user, alice_id);
    let held = Envelope::decode(&pulled.body, Kind::CredentialSet.max_len()).unwrap().header.version;
    let status = client.get("/status").await.json();
    assert_eq!((status["nodes"]["total"].as_u64(), status["nodes"]["online"].as_u64()), (Some(1), Some(1)), "{status}");
    assert_eq!(status["nodes"]["sets_expiring"], 0);
    assert_eq!(status["nodes"]["offline"], json!([]));
    // A node whose command was never run is named as such; a new command says the one before
    // it no longer works (an enrolled node's had been used up).
    let waiting = client.post("/nodes", json!({ "name": "Frankfurt 1", "host": "203.0.113.50" })).await.json();
    let waiting_id = waiting["id"].as_u64().unwrap();
    let offline = client.get("/status").await.json()["nodes"]["offline"].clone();
    assert_eq!(offline, json!([{ "id": waiting_id, "name": "Frankfurt 1", "never": true, "last_seen": 0 }]));
    let again = client.post(&format!("/nodes/{waiting_id}/enroll-token"), json!({})).await.json();
    assert_eq!(again["replaced"], true, "{again}");
    let enrolled = client.post(&format!("/nodes/{node}/enroll-token"), json!({})).await.json();
    assert_eq!(enrolled["replaced"], false, "{enrolled}");
    let seen_long_ago = move |tx: &rusqlite::Transaction<'_>| {
        Ok(tx.execute("UPDATE nodes SET last_seen = 1000 WHERE id = ?1", [node])?)
    };
    let seen_now = move |tx: &rusqlite::Transaction<'_>| {
        Ok(tx.execute("UPDATE nodes SET last_seen = ?2 WHERE id = ?1", [node, now()])?)
    };
    client.app().db.write(seen_long_ago).await.unwrap();
    let offline = client.get("/status").await.json()["nodes"]["offline"].clone();
    assert_eq!(offline[0]["name"], "Frankfurt 1", "never enrolled first: {offline}");
    assert_eq!(
        (offline[1]["id"].as_u64(), &offline[1]["never"], &offline[1]["last_seen"]),
        (Some(node), &json!(false), &json!(1000))
    );
    client.app().db.write(seen_now).await.unwrap();
    client.send(Method::DELETE, &client.admin(&format!("/nodes/{waiting_id}")), None, &[]).await;
    // A set that was not signed again in time shows as an alert (and a metric).
    let name = stream::creds(node);
    let soon = now() + 3600;
    let stored_expiry = client
        .app()
        .db
        .write(move |tx| {
            let old: u64 = tx.query_row("SELECT expires FROM streams WHERE name = ?1", [&name], |row| row.get(0))?;
            tx.execute("UPDATE streams SET expires = ?2 WHERE name = ?1", rusqlite::params![name, soon])?;
            Ok(old)
        })
        .await
        .unwrap();
    assert_eq!(client.get("/status").await.json()["nodes"]["sets_expiring"], 1);
    let name = stream::creds(node);
    client
        .app()
        .db
        .write(move |tx| {
            Ok(tx.execute("UPDATE streams SET expires = ?2 WHERE name = ?1", rusqlite::params![name, stored_expiry])?)
        })
        .await
        .unwrap();
    let unchanged = node_get(&client, node, &key, &format!("/nodes/{node}/creds?after={held}")).await;
    assert_eq!(unchanged.status, StatusCode::NO_CONTENT);
    // A node that holds a later set than control (control restored from an older state) gets
    // the set signed again above it.
    let ahead = held + 50;
    let raised = node_get(&client, node, &key, &format!("/nodes/{node}/creds?after={ahead}")).await;
    assert_eq!(raised.status, StatusCode::OK);
    let held = Envelope::decode(&raised.body, Kind::CredentialSet.max_len()).unwrap().header.version;
    assert_eq!(held, ahead + 1);
    assert_eq!(set_of(&raised).users().len(), 1);
    // A forged or missing signature is refused.
    let other = SecretKey::generate(Role::Node, &mut rand_core::OsRng).unwrap();
    assert_eq!(node_get(&client, node, &other, &format!("/nodes/{node}/creds")).await.status, StatusCode::UNAUTHORIZED);

    // A long poll wakes when a user is added.
    let wait_path = format!("/nodes/{node}/creds?after={held}&wait=10");
    let waiter = node_get(&client, node, &key, &wait_path);
    let adder = async {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        client.post("/users", json!({ "name": "bob" })).await
    };
    let (woken, _) = tokio::join!(waiter, adder);
    assert_eq!(woken.status, StatusCode::OK);
    assert_eq!(set_of(&woken).users().len(), 2);

    // Usage: applied once, replays and resends counted once, gaps refused.
    let first = report(&key, node, 1, vec![UserUsage { user: alice_id, up: 3000, down: 4000 }]);
    assert_eq!(node_usage(&client, node, &key, first.clone()).await.status, StatusCode::OK);
    assert_eq!(node_usage(&client, node, &key, first).await.status, StatusCode::OK, "a resend is acknowledged");
    let gap = node_usage(&client, node, &key, report(&key, node, 3, vec![])).await;
    assert_eq!(gap.status, StatusCode::CONFLICT);
    let forged =
        node_usage(&client, node, &key, report(&other, node, 2, vec![UserUsage { user: alice_id, up: 1, down: 1 }]))
            .await;
    assert_eq!(forged.status, StatusCode::BAD_REQUEST);
    let user = client.get(&format!("/users/{alice_id}")).await.json();
    assert_eq!((user["used_up"].as_u64(), user["used_down"].as_u64()), (Some(3000), Some(4000)));

    // The charts: today's bar holds the report; other days are zeros; another user's is empty.
    let usage = client.get("/usage?days=7").await.json();
    let days = usage["days"].as_array().unwrap();
    assert_eq!(days.len(), 7);
    assert_eq!((days[6]["up"].as_u64(), days[6]["down"].as_u64()), (Some(3000), Some(4000)));
    assert!(days[..6].iter().all(|d| d["up"] == 0 && d["down"] == 0));
    assert_eq!(days[6]["day"].as_u64().unwrap(), now() / 86_400 * 86_400);
    assert_eq!((usage["today"]["up"].as_u64(), usage["month"]["down"].as_u64()), (Some(3000), Some(4000)));
    // The node's own: users who reach it, traffic today, and its series.
    let listed = client.get("/nodes").await.json();
    let listed = listed["nodes"].as_array().unwrap().iter().find(|n| n["id"] == node).unwrap().clone();
    assert_eq!((listed["users"].as_u64(), listed["traffic_today"].as_u64()), (Some(2), Some(7000)), "{listed}");
    assert_eq!(client.get(&format!("/nodes/{node}")).await.json()["traffic_today"], 7000);
    let series = client.get(&format!("/nodes/{node}/usage?days=3")).await.json();
    assert_eq!((series["days"][2]["up"].as_u64(), series["days"][2]["down"].as_u64()), (Some(3000), Some(4000)));
    assert_eq!(client.get("/nodes/999/usage").await.status, StatusCode::NOT_FOUND);
    let mine = client.get(&format!("/users/{alice_id}/usage")).await.json();
    assert_eq!(mine["days"].as_array().unwrap().len(), 30);
    assert_eq!(mine["days"][29]["down"].as_u64(), Some(4000));
    let bob = client.get("/users?q=bob").await.json()["users"][0]["id"].as_u64().unwrap();
    let theirs = client.get(&format!("/users/{bob}/usage?days=2")).await.json();
    assert!(theirs["days"].as_array().unwrap().iter().all(|d| d["up"] == 0));
    assert_eq!(client.get("/users/999999/usage").await.status, StatusCode::NOT_FOUND);
    assert_eq!(client.get("/usage?days=x").await.status, StatusCode::BAD_REQUEST);

    // Crossing the quota removes alice from the set at once, and her snapshot says why.
    let second =
        node_usage(&client, node, &key, report(&key, node, 2, vec![UserUsage { user: alice_id, up: 0, down: 3000 }]))
            .await;
    assert_eq!(second.status, StatusCode::OK);
    let ack = Envelope::decode(&second.body, Kind::UsageAck.max_len()).unwrap();
    assert_eq!(ack.header.audience, Audience::Node(node));
    assert_eq!(wire::decode::<hearth_shared::wire::UsageAck>(&ack.body, "ack").unwrap().seq, 2);
    let set = set_of(&node_get(&client, node, &key, &format!("/nodes/{node}/creds")).await);
    assert!(set.users().iter().all(|u| u.user != alice_id), "over quota: cut off");
    assert_eq!(client.get(&format!("/users/{alice_id}")).await.json()["status"], "over_quota");
    assert_eq!(snapshot_of(client.app(), alice["link"].as_str().unwrap()).await.unwrap().status, Status::OverQuota);
    // A reset brings her back.
    client.post(&format!("/users/{alice_id}/reset-traffic"), json!({})).await;
    let set = set_of(&node_get(&client, node, &key, &format!("/nodes/{node}/creds")).await);
    assert!(set.users().iter().any(|u| u.user == alice_id));
}

#[tokio::test]
async fn groups_decide_which_nodes_a_user_gets() {
    let client = Client::signed_in(false).await;
    assert_eq!(client.post("/groups", json!({ "name": "friends" })).await.status, StatusCode::CREATED);
    let (family_node, key_a) = enroll(&client, json!(["default"])).await;
    let (friends_node, key_b) = enroll(&client, json!(["friends"])).await;
    let carol = client.post("/users", json!({ "name": "carol", "groups": ["friends"] })).await.json();
    let snapshot = snapshot_of(client.app(), carol["link"].as_str().unwrap()).await.unwrap();
    assert_eq!(snapshot.endpoints.len(), 1);
    let a = set_of(&node_get(&client, family_node, &key_a, &format!("/nodes/{family_node}/creds")).await);
    let b = set_of(&node_get(&client, friends_node, &key_b, &format!("/nodes/{friends_node}/creds")).await);
    assert!(a.users().is_empty());
    assert_eq!(b.users().len(), 1);
    // Moving carol moves her credential between nodes.
    let id = carol["id"].as_u64().unwrap();
    client.patch(&format!("/users/{id}"), json!({ "groups": ["default"] })).await;
    let a = set_of(&node_get(&client, family_node, &key_a, &format!("/nodes/{family_node}/creds")).await);
    let b = set_of(&node_get(&client, friends_node, &key_b, &format!("/nodes/{friends_node}/creds")).await);
    assert_eq!((a.users().len(), b.users().len()), (1, 0));
    assert_eq!(a.users()[0].hash.len(), 32);
    // A node in two groups and a user in both: the user is in its set once.
    let (both_node, key_c) = enroll(&client, json!(["default", "friends"])).await;
    let both = client.patch(&format!("/users/{id}"), json!({ "groups": ["default", "friends"] })).await;
    assert_eq!(both.status, StatusCode::OK, "{}", String::from_utf8_lossy(&both.body));
    let c = set_of(&node_get(&client, both_node, &key_c, &format!("/nodes/{both_node}/creds")).await);
    assert_eq!(c.users().iter().map(|e| e.user).collect::<Vec<_>>(), vec![id]);
    // An enrolled node keeps its port and Salamander password: changing them is refused.
    let refused = client.patch(&format!("/nodes/{family_node}"), json!({ "port": 9999 })).await;
    assert_eq!((refused.status, refused.code().as_str()), (StatusCode::BAD_REQUEST, "needs_enrollment"));
    let refused = client.patch(&format!("/nodes/{family_node}"), json!({ "obfs": "new" })).await;
    assert_eq!(refused.code(), "needs_enrollment");
    let refused = client.patch(&format!("/nodes/{family_node}"), json!({ "hop": "20000-20100" })).await;
    assert_eq!(refused.code(), "needs_enrollment", "the node opens the range it enrolled with");
    let same = client.patch(&format!("/nodes/{family_node}"), json!({ "hop": " 20000-20099" })).await;
    assert_eq!(same.status, StatusCode::OK, "the same range is not a change");
    let huge = client.post("/nodes", json!({ "name": "huge", "host": "203.0.113.6", "hop": "10000-40000" })).await;
    assert_eq!(huge.code(), "bad_hop");
    let refused =
        client.patch(&format!("/nodes/{family_node}"), json!({ "masquerade": "https://other.example/" })).await;
    assert_eq!(refused.code(), "needs_enrollment", "the node shows the site it enrolled with");
    for bad in ["ftp://example.net/", "https://", "https://user@example.net/", "example.net", "https://a b/"] {
        let refused = client.post("/nodes", json!({ "name": "site", "host": "203.0.113.7", "masquerade": bad })).await;
        assert_eq!(refused.code(), "bad_masquerade", "{bad}");
    }
    let renamed = client.patch(&format!("/nodes/{family_node}"), json!({ "name": "Family", "port": 8443 })).await;
    assert_eq!(renamed.status, StatusCode::OK, "the same port is not a change");
    // With a new enrollment command pending, the change is the operator's plan: allowed.
    assert_eq!(client.post(&format!("/nodes/{family_node}/enroll-token"), json!({})).await.status, StatusCode::OK);
    assert_eq!(client.patch(&format!("/nodes/{family_node}"), json!({ "port": 9999 })).await.status, StatusCode::OK);
    // Deleting a group takes its nodes from its users.
    let groups = client.get("/groups").await.json();
    let friends =
        groups["groups"].as_array().unwrap().iter().find(|g| g["name"] == "friends").unwrap()["id"].as_i64().unwrap();
    assert_eq!(
        client.send(Method::DELETE, &client.admin(&format!("/groups/{friends}")), None, &[]).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(client.get(&format!("/nodes/{friends_node}")).await.json()["groups"], json!([]));
}

/// A change to a user that leaves its entries in the nodes' sets as they were (a quota, a
/// name, a note, an expiry) signs no node's set again; one that changes them (a speed limit,
/// disabling, enabling, its groups) does.
#[tokio::test]
async fn only_a_change_to_a_users_entry_signs_the_nodes_sets_again() {
    let client = Client::signed_in(false).await;
    let (node, key) = enroll(&client, json!(["default"])).await;
    let alice = client.post("/users", json!({ "name": "alice" })).await.json();
    let id = alice["id"].as_u64().unwrap();
    let version = || async {
        let read = client.app().db.read(move |c| crate::store::streams::envelope(c, &stream::creds(node))).await;
        read.unwrap().unwrap().0
    };
    let users = || async {
        let set = set_of(&node_get(&client, node, &key, &format!("/nodes/{node}/creds")).await);
        set.users().iter().map(|e| (e.user, e.limit.up)).collect::<Vec<_>>()
    };
    assert_eq!(users().await, vec![(id, 0)]);
    let signed = version().await;
    // Nor is the set even built again (at 100,000 users that took 35 ms).
    let logs = crate::testing::Logs::new(false, "hearth_control::publish=debug");
    let guard = tracing::dispatcher::set_default(&logs.dispatch);
    for change in [
        json!({ "quota": 5u64 << 30 }),
        json!({ "name": "alice b" }),
        json!({ "note": "a note" }),
        json!({ "days": 30 }),
        json!({ "reset": "monthly" }),
    ] {
        let answer = client.patch(&format!("/users/{id}"), change.clone()).await;
        assert_eq!(answer.status, StatusCode::OK, "{change}: {}", String::from_utf8_lossy(&answer.body));
        assert_eq!(version().await, signed, "{change} signed the node's set again");
    }
    drop(guard);
    assert!(!logs.text().contains("node set checked"), "{}", logs.text());
    let logs = crate::testing::Logs::new(false, "hearth_control::publish=debug");
    let guard = tracing::dispatcher::set_default(&logs.dispatch);
    for (change, expected) in [
        (json!({ "speed_limit": { "up": 3 } }), vec![(id, 3 * 125_000)]),
        (json!({ "enabled": false }), vec![]),
        (json!({ "enabled": true }), vec![(id, 3 * 125_000)]),
        (json!({ "groups": [] }), vec![]),
    ] {
        let before = version().await;
        let answer = client.patch(&format!("/users/{id}"), change.clone()).await;
        assert_eq!(answer.status, StatusCode::OK, "{change}: {}", String::from_utf8_lossy(&answer.body));
        assert!(version().await > before, "{change} did not sign the node's set again");
        assert_eq!(users().await, expected, "{change}");
    }
    drop(guard);
    assert!(logs.text().contains("node set checked"), "{}", logs.text());
}

/// Speed limits reach the nodes' sets: a user's own (each way, or its groups' default for a
/// side left null), a group's default for its users on its nodes; a used-up quota cuts a
/// user off, or slows it down where the user or its group says so (and its profile says
/// why); bad settings are refused and change nothing.
#[tokio::test]
async fn speed_limits_and_quota_slowdowns_reach_the_nodes_sets() {
    let client = Client::signed_in(false).await;
    let (node, key) = enroll(&client, json!(["default"])).await;
    let alice = client.post("/users", json!({ "name": "alice", "quota": 1000 })).await.json();
    let bob = client.post("/users", json!({ "name": "bob", "speed_limit": { "down": 20 } })).await;
    assert_eq!(bob.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&bob.body));
    let bob = bob.json();
    let (alice_id, bob_id) = (alice["id"].as_u64().unwrap(), bob["id"].as_u64().unwrap());
    assert_eq!(bob["speed_limit"], json!({ "up": null, "down": 20.0 }));
    assert_eq!((bob["on_quota"].as_str(), bob["slow_speed"].as_f64()), (Some("group"), Some(0.0)));
    let limits = || async {
        let set = set_of(&node_get(&client, node, &key, &format!("/nodes/{node}/creds")).await);
        set.users().iter().map(|e| (e.user, e.limit.up, e.limit.down)).collect::<Vec<_>>()
    };
    let mbit = |m: u64| m * 125_000;
    assert_eq!(limits().await, vec![(alice_id, 0, 0), (bob_id, 0, mbit(20))]);

    // The group's default: for alice both ways, for bob the side he left to it.
    let groups = client.get("/groups").await.json();
    let default = groups["groups"][0]["id"].as_i64().unwrap();
    let patched = client.patch(&format!("/groups/{default}"), json!({ "speed_limit": { "up": 5, "down": 10 } })).await;
    assert_eq!(patched.status, StatusCode::OK, "{}", String::from_utf8_lossy(&patched.body));
    assert_eq!(patched.json()["speed_limit"], json!({ "up": 5.0, "down": 10.0 }));
    assert_eq!(limits().await, vec![(alice_id, mbit(5), mbit(10)), (bob_id, mbit(5), mbit(20))]);
    // 0 is no limit, said of one's own; a fraction of a Mbit/s is kept.
    client.patch(&format!("/users/{bob_id}"), json!({ "speed_limit": { "up": 0, "down": 0.5 } })).await;
    assert_eq!(limits().await, vec![(alice_id, mbit(5), mbit(10)), (bob_id, 0, 62_500)]);

    // Over quota: cut off by default.
    let first = report(&key, node, 1, vec![UserUsage { user: alice_id, up: 600, down: 600 }]);
    assert_eq!(node_usage(&client, node, &key, first).await.status, StatusCode::OK);
    assert_eq!(client.get(&format!("/users/{alice_id}")).await.json()["status"], "over_quota");
    assert_eq!(limits().await, vec![(bob_id, 0, 62_500)]);
    let link = client.get(&format!("/users/{alice_id}/link")).await.json()["link"].as_str().unwrap().to_owned();
    assert_eq!(snapshot_of(client.app(), &link).await.unwrap().status, Status::OverQuota);

    // Slowing down needs a rate: refused, nothing changed.
    let refused = client.patch(&format!("/users/{alice_id}"), json!({ "on_quota": "slow", "note": "x" })).await;
    assert_eq!((refused.status, refused.code().as_str()), (StatusCode::BAD_REQUEST, "bad_slow_speed"));
    assert_eq!(client.get(&format!("/users/{alice_id}")).await.json()["note"], "");
    for bad in
        [json!({ "speed_limit": { "up": -1 } }), json!({ "speed_limit": { "up": 1e9 } }), json!({ "on_quota": "stop" })]
    {
        let refused = client.patch(&format!("/users/{alice_id}"), bad.clone()).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{bad}");
    }
    assert_eq!(limits().await, vec![(bob_id, 0, 62_500)]);

    // Slowed to 1 Mbit/s: back in the set at the stricter of that and her limit; her profile
    // lets her connect and says why she is slow.
    let slowed = client.patch(&format!("/users/{alice_id}"), json!({ "on_quota": "slow", "slow_speed": 1 })).await;
    assert_eq!(slowed.status, StatusCode::OK, "{}", String::from_utf8_lossy(&slowed.body));
    assert_eq!(
        (slowed.json()["status"].as_str(), slowed.json()["on_quota"].as_str()),
        (Some("over_quota"), Some("slow"))
    );
    assert_eq!(limits().await, vec![(alice_id, mbit(1), mbit(1)), (bob_id, 0, 62_500)]);
    let snapshot = snapshot_of(client.app(), &link).await.unwrap();
    assert_eq!(snapshot.status, Status::Active);
    assert!(snapshot.profile.announce.unwrap().contains("limited to 1 Mbit/s"));

    // Back to her group's choice (cut), then the group slows its users down to 2 Mbit/s.
    client.patch(&format!("/users/{alice_id}"), json!({ "on_quota": "group" })).await;
    assert_eq!(limits().await, vec![(bob_id, 0, 62_500)]);
    let refused = client.patch(&format!("/groups/{default}"), json!({ "on_quota": "slow" })).await;
    assert_eq!(refused.code(), "bad_slow_speed");
    client.patch(&format!("/groups/{default}"), json!({ "on_quota": "slow", "slow_speed": 2 })).await;
    assert_eq!(limits().await, vec![(alice_id, mbit(2), mbit(2)), (bob_id, 0, 62_500)]);
    let group = &client.get("/groups").await.json()["groups"][0];
    assert_eq!((group["on_quota"].as_str(), group["slow_speed"].as_f64()), (Some("slow"), Some(2.0)));
    // Her quota raised: no longer slowed, her group's limit again.
    client.patch(&format!("/users/{alice_id}"), json!({ "quota": 0 })).await;
    assert_eq!(limits().await, vec![(alice_id, mbit(5), mbit(10)), (bob_id, 0, 62_500)]);
    assert!(snapshot_of(client.app(), &link).await.unwrap().profile.announce.is_none());
}

/// A node's multiplier: its traffic counts for that many times its bytes against quotas,
/// and the raw bytes are kept beside. A node's monthly cap: reached by a report, the node is
/// limited (its set is empty, its users' apps name it with the date it is back, the status
/// lists it), and the next month starts it again. Bad values are refused.
#[tokio::test]
async fn node_multipliers_count_and_node_caps_limit() {
    let client = Client::signed_in(false).await;
    let (node, key) = enroll(&client, json!(["default"])).await;
    let alice = client.post("/users", json!({ "name": "alice" })).await.json()["id"].as_u64().unwrap();
    let patched =
        client.patch(&format!("/nodes/{node}"), json!({ "multiplier": 2, "quota": 1000, "quota_day": 5 })).await;
    assert_eq!(patched.status, StatusCode::OK, "{}", String::from_utf8_lossy(&patched.body));
    let view = patched.json();
    assert_eq!(
        (view["multiplier"].as_f64(), view["quota"].as_u64(), view["quota_day"].as_u64()),
        (Some(2.0), Some(1000), Some(5))
    );
    let resets = view["quota_resets"].as_u64().unwrap();
    assert!(resets > now() && resets <= now() + 31 * 86_400, "the cap month ends within a month: {resets}");
    assert_eq!(crate::clock::civil_date(resets).split('-').nth(2), Some("05"));

    let first = report(&key, node, 1, vec![UserUsage { user: alice, up: 100, down: 300 }]);
    assert_eq!(node_usage(&client, node, &key, first).await.status, StatusCode::OK);
    let user = client.get(&format!("/users/{alice}")).await.json();
    assert_eq!(
        [&user["used_up"], &user["used_down"], &user["raw_up"], &user["raw_down"]].map(|v| v.as_u64().unwrap()),
        [200, 600, 100, 300],
        "counted twice, measured once"
    );
    let creds = || async { set_of(&node_get(&client, node, &key, &format!("/nodes/{node}/creds")).await) };
    assert_eq!(creds().await.users().len(), 1);

    // 400 + 700 measured: the cap of 1000 is reached (measured bytes, not counted ones).
    let second = report(&key, node, 2, vec![UserUsage { user: alice, up: 300, down: 400 }]);
    assert_eq!(node_usage(&client, node, &key, second).await.status, StatusCode::OK);
    let view = client.get(&format!("/nodes/{node}")).await.json();
    assert_eq!((view["quota_used"].as_u64(), view["limited"].as_bool()), (Some(1100), Some(true)));
    assert!(creds().await.users().is_empty(), "a limited node carries nobody");
    let link = client.get(&format!("/users/{alice}/link")).await.json()["link"].as_str().unwrap().to_owned();
    let endpoint = &snapshot_of(client.app(), &link).await.unwrap().endpoints[0];
    assert!(endpoint.name.contains("traffic limit reached until"), "{}", endpoint.name);
    let status = client.get("/status").await.json();
    assert_eq!(status["nodes"]["limited"][0]["id"].as_u64(), Some(node));

    // The next month: back, with nothing carried yet.
    let app = client.app();
    let rolled = app.db.write_blocking(|tx| crate::nodes::roll_quotas(tx, &app.signer, resets)).unwrap();
    assert_eq!(rolled, 1);
    let view = client.get(&format!("/nodes/{node}")).await.json();
    assert_eq!((view["quota_used"].as_u64(), view["limited"].as_bool()), (Some(0), Some(false)));
    assert!(view["quota_resets"].as_u64().unwrap() > resets);
    assert_eq!(creds().await.users().len(), 1);
    assert!(!snapshot_of(client.app(), &link).await.unwrap().endpoints[0].name.contains("limit"));
    // Raising the cap over what was carried lifts a limit at once, too; no cap, no month.
    let none = client.patch(&format!("/nodes/{node}"), json!({ "quota": 0 })).await.json();
    assert_eq!((none["quota_resets"].as_u64(), none["limited"].as_bool()), (Some(0), Some(false)));

    for bad in [
        json!({ "multiplier": 0 }),
        json!({ "multiplier": 101 }),
        json!({ "quota_day": 29 }),
        json!({ "quota_day": 0 }),
    ] {
        let refused = client.patch(&format!("/nodes/{node}"), bad.clone()).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{bad}");
    }
    assert_eq!(client.get(&format!("/nodes/{node}")).await.json()["multiplier"].as_f64(), Some(2.0));
}

/// A cap set in the middle of its month counts what the node already carried that month (its
/// daily traffic since the month's first day), not from nothing (issue 46, 13): a node that
/// carried 900 bytes before a cap of 1000 was set is limited by the next 200.
#[tokio::test]
async fn a_cap_set_mid_month_counts_what_the_node_carried_that_month() {
    let client = Client::signed_in(false).await;
    let (node, key) = enroll(&client, json!(["default"])).await;
    let alice = client.post("/users", json!({ "name": "alice" })).await.json()["id"].as_u64().unwrap();
    let first = report(&key, node, 1, vec![UserUsage { user: alice, up: 400, down: 500 }]);
    assert_eq!(node_usage(&client, node, &key, first).await.status, StatusCode::OK);
    // Traffic from before this cap month is not counted: a day long before it.
    let app = client.app().clone();
    app.db
        .write(move |tx| {
            tx.execute(
                "INSERT INTO node_usage_daily (node_id, day, up, down) VALUES (?1, ?2, 5000, 5000)",
                rusqlite::params![node, now() / 86_400 - 40],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    // The month began on today's day of the month: everything carried today counts.
    let today: u32 = crate::clock::civil_date(now()).rsplit('-').next().unwrap().parse().unwrap();
    let day = today.min(28);
    let capped = client.patch(&format!("/nodes/{node}"), json!({ "quota": 1000, "quota_day": day })).await.json();
    let expected = if today <= 28 { 900 } else { capped["quota_used"].as_u64().unwrap() };
    assert_eq!((capped["quota_used"].as_u64(), capped["limited"].as_bool()), (Some(expected), Some(false)), "{capped}");
    if today <= 28 {
        let second = report(&key, node, 2, vec![UserUsage { user: alice, up: 100, down: 100 }]);
        assert_eq!(node_usage(&client, node, &key, second).await.status, StatusCode::OK);
        let view = client.get(&format!("/nodes/{node}")).await.json();
        assert_eq!((view["quota_used"].as_u64(), view["limited"].as_bool()), (Some(1100), Some(true)));
    }
    // A change of a cap already set keeps what it counted.
    let raised = client.patch(&format!("/nodes/{node}"), json!({ "quota": 5000 })).await.json();
    assert_eq!(raised["limited"].as_bool(), Some(false), "{raised}");
    assert!(raised["quota_used"].as_u64().unwrap() >= 900);
}

/// A report of who is on a node, signed by `key`, with `presence` (user, devices,
/// connections, devices refused).
pub(super) fn presence_report(key: &SecretKey, node: u64, seq: u64, presence: &[(u64, u32, u32, u32)]) -> Vec<u8> {
    let now = now();
    let presence = presence
        .iter()
        .map(|&(user, devices, connections, refused_devices)| hearth_shared::wire::Presence {
            user,
            devices,
            connections,
            refused_devices,
            ..Default::default()
        })
        .collect();
    UsageReport {
        node,
        seq,
        period_start: now - 60,
        period_end: now,
        users: Vec::new(),
        presence,
        release: None,
        kicked: Vec::new(),
    }
    .sign(key, now)
    .encode()
}

/// Device limits across nodes: each node's set carries the user's limit less the devices
/// the other nodes reported (never below zero, its own not counted); a user's own limit
/// wins over its groups' (the most generous of them); the owner's policy rides along only
/// in sets with an allowance; a report with refusals shows on the user and in its profile; a
/// node silent for long stops counting; a kick raises the count in every set of the user's
/// nodes; the group's abuse guard reaches the sets; bad limits are refused.
#[tokio::test]
async fn device_limits_are_shared_across_nodes_and_kicks_and_guards_reach_the_sets() {
    use hearth_shared::wire::DevicePolicy;
    let client = Client::signed_in(false).await;
    let (a, key_a) = enroll(&client, json!(["default"])).await;
    let (b, key_b) = enroll(&client, json!(["default"])).await;
    let family = client.post("/users", json!({ "name": "family", "device_limit": 2 })).await;
    assert_eq!(family.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&family.body));
    let family = family.json()["id"].as_u64().unwrap();
    let bob = client.post("/users", json!({ "name": "bob" })).await.json()["id"].as_u64().unwrap();
    async fn current(client: &Client, node: u64, key: &SecretKey) -> CredentialSet {
        set_of(&node_get(client, node, key, &format!("/nodes/{node}/creds")).await)
    }
    let allowance = |set: &CredentialSet, user: u64| set.users().iter().find(|e| e.user == user).unwrap().devices;
    let (set_a, set_b) = (current(&client, a, &key_a).await, current(&client, b, &key_b).await);
    assert_eq!((allowance(&set_a, family), allowance(&set_a, bob)), (Some(2), None));
    assert_eq!((allowance(&set_b, family), set_b.policy()), (Some(2), DevicePolicy::Refuse));

    // One device on a: b may let in one more, a still two (its own are not counted).
    let on_a = presence_report(&key_a, a, 1, &[(family, 1, 2, 0)]);
    assert_eq!(node_usage(&client, a, &key_a, on_a).await.status, StatusCode::OK);
    assert_eq!(
        (allowance(&current(&client, a, &key_a).await, family), allowance(&current(&client, b, &key_b).await, family)),
        (Some(2), Some(1))
    );
    // Two on b, and one refused there: a may let in none (never below zero).
    let on_b = presence_report(&key_b, b, 1, &[(family, 2, 2, 1)]);
    assert_eq!(node_usage(&client, b, &key_b, on_b).await.status, StatusCode::OK);
    assert_eq!(
        (allowance(&current(&client, a, &key_a).await, family), allowance(&current(&client, b, &key_b).await, family)),
        (Some(0), Some(1))
    );
    let user = client.get(&format!("/users/{family}")).await.json();
    assert_eq!(user["device_limit"], 2);
    let devices = &user["devices"];
    assert_eq!(
        (devices["limit"].as_u64(), devices["online"].as_u64(), devices["connections"].as_u64()),
        (Some(2), Some(3), Some(4))
    );
    assert_eq!((devices["refused"].as_u64(), devices["nodes"].as_array().map(Vec::len)), (Some(1), Some(2)));
    assert!(devices["refused_at"].as_u64().unwrap() > 0);
    let link = client.get(&format!("/users/{family}/link")).await.json()["link"].as_str().unwrap().to_owned();
    let announce = snapshot_of(client.app(), &link).await.unwrap().profile.announce.unwrap_or_default();
    assert!(announce.contains("Device limit reached: at most 2 devices"), "{announce}");
    let path = format!("/{}/metrics", client.app().config.admin_prefix);
    let metrics = String::from_utf8(client.send(Method::GET, &path, None, &[]).await.body).unwrap();
    for line in [
        "hearth_user_refused_total{user=\"family\",reason=\"devices\"} 1\n",
        "hearth_users_online 1\n",
        "hearth_devices_online 3\n",
    ] {
        assert!(metrics.contains(line), "no {line:?} in {metrics}");
    }
    let online = client.get("/online").await.json();
    assert_eq!((online["users"].as_u64(), online["online"][0]["name"].as_str()), (Some(1), Some("family")));

    // Everyone left a: b's allowance is the whole limit again.
    let left = presence_report(&key_a, a, 2, &[]);
    assert_eq!(node_usage(&client, a, &key_a, left).await.status, StatusCode::OK);
    assert_eq!(allowance(&current(&client, b, &key_b).await, family), Some(2));

    // b goes silent: what it reported stops counting at the next sweep past the time.
    let later = now() + crate::store::presence::PRESENCE_TTL + 5;
    client.app().db.write_blocking(|tx| crate::nodes::expire_presence(tx, &client.app().signer, later)).unwrap();
    assert_eq!(allowance(&current(&client, a, &key_a).await, family), Some(2));

    // Its own limit over its groups': "group" takes the most generous of its groups'.
    let groups = client.get("/groups").await.json();
    let default = groups["groups"][0]["id"].as_i64().unwrap();
    let patched = client
        .patch(&format!("/groups/{default}"), json!({ "device_limit": 3, "block_torrent": true, "block_smtp": true }))
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", String::from_utf8_lossy(&patched.body));
    assert_eq!(
        (patched.json()["device_limit"].as_u64(), patched.json()["block_torrent"].as_bool()),
        (Some(3), Some(true))
    );
    assert_eq!(allowance(&current(&client, a, &key_a).await, bob), Some(3));
    client.patch(&format!("/users/{family}"), json!({ "device_limit": "group" })).await;
    assert_eq!(allowance(&current(&client, a, &key_a).await, family), Some(3));
    client.patch(&format!("/users/{family}"), json!({ "device_limit": 0 })).await;
    assert_eq!(allowance(&current(&client, a, &key_a).await, family), None, "0 is no limit");
    let guard = current(&client, a, &key_a).await.users()[0].guard;
    assert!(guard.torrent && guard.smtp, "the group's guard is in the set");
    for bad in [json!({ "device_limit": -1 }), json!({ "device_limit": 1001 }), json!({ "device_limit": "all" })] {
        let refused = client.patch(&format!("/users/{family}"), bad.clone()).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{bad}");
    }
    let refused = client.patch(&format!("/groups/{default}"), json!({ "device_limit": 5000 })).await;
    assert_eq!(refused.code(), "bad_device_limit");

    // The owner's policy; refused when not one of the two.
    let changed = client.patch("/settings", json!({ "device_policy": "drop_oldest" })).await;
    assert_eq!(changed.json()["device_policy"], "drop_oldest");
    assert_eq!(current(&client, a, &key_a).await.policy(), DevicePolicy::DropOldest);
    assert_eq!(client.patch("/settings", json!({ "device_policy": "both" })).await.code(), "bad_device_policy");

    // A kick: the count goes up in every set of the user's nodes, nobody else's.
    let kick = |set: &CredentialSet, user: u64| set.users().iter().find(|e| e.user == user).unwrap().kick;
    assert_eq!(client.post(&format!("/users/{bob}/kick"), json!({})).await.status, StatusCode::OK);
    let (set_a, set_b) = (current(&client, a, &key_a).await, current(&client, b, &key_b).await);
    assert_eq!((kick(&set_a, bob), kick(&set_b, bob), kick(&set_a, family)), (1, 1, 0));
    assert_eq!(client.post("/users/999999/kick", json!({})).await.status, StatusCode::NOT_FOUND);
}

/// A kick a node reports (through its traffic stats API) is the panel's kick: the user's
/// count goes up in every set of the user's nodes and the audit log names the node; users the
/// node does not serve, or that do not exist, are left alone; the same report sent again
/// kicks nobody twice.
#[tokio::test]
async fn kicks_a_node_reports_are_the_panels_kicks_for_users_it_serves() {
    let client = Client::signed_in(false).await;
    assert_eq!(client.post("/groups", json!({ "name": "elsewhere" })).await.status, StatusCode::CREATED);
    let (a, key_a) = enroll(&client, json!(["default"])).await;
    let (b, key_b) = enroll(&client, json!(["default", "elsewhere"])).await;
    let alice = client.post("/users", json!({ "name": "alice" })).await.json()["id"].as_u64().unwrap();
    let bob = client.post("/users", json!({ "name": "bob", "groups": ["elsewhere"] })).await;
    assert_eq!(bob.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&bob.body));
    let bob = bob.json()["id"].as_u64().unwrap();
    let kick_in = |set: &CredentialSet, user: u64| set.users().iter().find(|e| e.user == user).map(|e| e.kick);
    let sets = || async {
        let a = set_of(&node_get(&client, a, &key_a, &format!("/nodes/{a}/creds")).await);
        let b = set_of(&node_get(&client, b, &key_b, &format!("/nodes/{b}/creds")).await);
        (a, b)
    };
    let (set_a, set_b) = sets().await;
    assert_eq!((kick_in(&set_a, alice), kick_in(&set_a, bob), kick_in(&set_b, bob)), (Some(0), None, Some(0)));

    let now = now();
    let mut kicked = vec![alice, bob, 999_999];
    kicked.sort_unstable();
    let report = UsageReport {
        node: a,
        seq: 1,
        period_start: now - 60,
        period_end: now,
        users: Vec::new(),
        presence: Vec::new(),
        release: None,
        kicked,
    }
    .sign(&key_a, now)
    .encode();
    assert_eq!(node_usage(&client, a, &key_a, report.clone()).await.status, StatusCode::OK);
    assert_eq!(node_usage(&client, a, &key_a, report).await.status, StatusCode::OK, "a report sent again");
    let (set_a, set_b) = sets().await;
    assert_eq!(
        (kick_in(&set_a, alice), kick_in(&set_b, alice), kick_in(&set_b, bob)),
        (Some(1), Some(1), Some(0)),
        "alice kicked everywhere, once; bob, whom node a does not serve, nowhere"
    );
    let audit = client.get("/audit?action=user.kick").await.json();
    let entries: Vec<(&str, &str)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["actor"].as_str().unwrap(), e["target"].as_str().unwrap()))
        .collect();
    let actor = format!("node {a} (traffic stats API)");
    assert_eq!(entries, vec![(actor.as_str(), format!("user {alice} (alice)").as_str())]);
}

/// A bulk create reaches the set of a node enrolled before it, every user in it (the call's
/// users share their groups: the nodes they reach are read once for the change).
#[tokio::test]
async fn a_bulk_create_reaches_an_enrolled_node_whole() {
    let client = Client::signed_in(true).await;
    let (node, key) = enroll(&client, json!(["default"])).await;
    let names: Vec<String> = (0..50).map(|i| format!("cousin-{i:02}")).collect();
    let created = client.post("/users/bulk", json!({ "names": names })).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&created.body));
    let pulled = node_get(&client, node, &key, &format!("/nodes/{node}/creds?after=0&base=0")).await;
    assert_eq!(pulled.status, StatusCode::OK);
    let ids: Vec<u64> = created.json()["users"].as_array().unwrap().iter().map(|u| u["id"].as_u64().unwrap()).collect();
    let set: Vec<u64> = set_of(&pulled).users().iter().map(|entry| entry.user).collect();
    assert_eq!(set, ids);
}
