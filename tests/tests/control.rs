//! The real `hearth-control` binary over HTTPS, pushing to the real native edge: publishing
//! and the durable outbox across an edge outage and a control restart, kill -9 during a bulk
//! create, expiry and quota enforcement, usage reports counted once whichever way they come,
//! and bounded argon2 memory under a burst of sign-ins.

use std::time::{Duration, Instant};

use hearth_shared::envelope::{Envelope, Kind};
use hearth_shared::keys::SecretKey;
use hearth_shared::nodeauth;
use hearth_shared::wire::{CredentialSet, UsageReport, UserUsage};
use hearth_tests::control::{Api, ControlDir, ControlProcess};
use hearth_tests::control_sim::now;
use hearth_tests::edge::{Backend, EdgeProcess, free_port};
use hearth_tests::eventually;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A new control, set up, and an API token of `scope`.
async fn fresh_control(scope: &str) -> (tempfile::TempDir, ControlDir, ControlProcess, Api) {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let control = ControlProcess::start(&dir, &[]).unwrap();
    let http = dir.client().unwrap();
    let api = Api { token: control.setup(&http, scope).await.unwrap(), http };
    (temp, dir, control, api)
}

async fn served(http: &reqwest::Client, link: &str) -> bool {
    match http.get(link).header("user-agent", "SFA/1.12.0").send().await {
        Ok(response) => response.status() == StatusCode::OK,
        Err(_) => false,
    }
}

#[tokio::test]
async fn the_outbox_survives_an_edge_outage_and_a_control_restart() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let edge_db = temp.path().join("edge.db");
    let port = free_port().unwrap();
    let edge = EdgeProcess::start_on(Backend::Native, &edge_db, &dir.edge_vars().unwrap(), port).unwrap();
    let env = [("HEARTH_EDGE_URL", edge.url.clone())];
    let control = ControlProcess::start(&dir, &env).unwrap();
    let http = dir.client().unwrap();
    let plain = hearth_tests::http().build().unwrap();
    let api = Api { token: control.setup(&http, "operate").await.unwrap(), http };

    let names: Vec<String> = (0..1000).map(|i| format!("user-{i:04}")).collect();
    let started = Instant::now();
    let bulk = api.post(&control, "/users/bulk", json!({ "names": names, "settings": { "quota": 1 << 30 } })).await;
    eprintln!("bulk create of 1000 users: {:?}", started.elapsed());
    let links: Vec<String> =
        bulk["users"].as_array().unwrap().iter().map(|u| u["link"].as_str().unwrap().to_owned()).collect();
    assert_eq!(links.len(), 1000);
    assert!(links[0].starts_with(&edge.url), "links point at the edge: {}", links[0]);
    eventually("the first and last link served by the edge", Duration::from_secs(30), || async {
        served(&plain, &links[0]).await && served(&plain, &links[999]).await
    })
    .await;
    eventually("the outbox drained", Duration::from_secs(30), || async {
        api.get(&control, "/status").await["edge"]["pending"] == 0
    })
    .await;

    // The edge goes down: changes queue, and the failure shows in the status.
    edge.stop().unwrap();
    let late = api.post(&control, "/users", json!({ "name": "late" })).await;
    let late_link = late["link"].as_str().unwrap().to_owned();
    let first_id = bulk["users"][0]["id"].as_u64().unwrap();
    api.post(&control, &format!("/users/{first_id}/disable"), json!({})).await;
    eventually("the push failure reported", Duration::from_secs(10), || async {
        let status = api.get(&control, "/status").await;
        status["edge"]["pending"].as_u64().unwrap() >= 2 && status["edge"]["last_error"].is_string()
    })
    .await;
    let status = api.get(&control, "/status").await;
    let error = status["edge"]["last_error"].as_str().unwrap();
    assert!(!error.contains(&dir.edge_setting("api_prefix").unwrap()), "no secret path in errors: {error}");

    // Control restarts while the edge is still down: the queue is on disk.
    control.stop().unwrap();
    let control = ControlProcess::start(&dir, &env).unwrap();
    assert!(control.setup_token.is_none(), "setup is done once");
    assert!(api.get(&control, "/status").await["edge"]["pending"].as_u64().unwrap() >= 2);

    // The edge comes back on the same address and data: the queue drains, in order.
    let edge = EdgeProcess::start_on(Backend::Native, &edge_db, &dir.edge_vars().unwrap(), port).unwrap();
    eventually("the late user served after the outage", Duration::from_secs(30), || served(&plain, &late_link)).await;
    eventually("the outbox drained again", Duration::from_secs(30), || async {
        api.get(&control, "/status").await["edge"]["pending"] == 0
    })
    .await;
    // The user disabled during the outage: one entry that cannot connect, named for the reason.
    let disabled = plain.get(&links[0]).header("user-agent", "v2rayN/7.0").send().await.unwrap();
    assert_eq!(disabled.status(), StatusCode::OK);
    let body = disabled.text().await.unwrap();
    let listed = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, body.trim()).unwrap();
    assert_eq!(
        String::from_utf8(listed).unwrap().trim_end(),
        "hysteria2://inactive@127.0.0.1:1/#Account%20disabled",
        "the link of the user disabled while the edge was down"
    );

    // Control goes away for good: every link keeps serving from the edge.
    control.stop().unwrap();
    for link in [&links[1], &links[500], &late_link] {
        assert!(served(&plain, link).await, "{link} stopped serving without control");
    }
    drop(edge);
}

/// What control's database file holds of the users whose names start with `bulk-`: the users,
/// those with a snapshot stream signed by control's signing key for their own link, and those
/// whose snapshot waits in the outbox for the edge; and the bulk create's audit entries.
#[derive(Debug, PartialEq, Eq)]
struct Held {
    users: u64,
    signed_snapshots: u64,
    queued_snapshots: u64,
    audited: u64,
}

async fn held_in(dir: &ControlDir) -> Held {
    use hearth_shared::envelope::signed_message;
    let signing: hearth_shared::keys::PublicKey =
        std::fs::read_to_string(dir.path.join("signing.pub")).unwrap().trim().parse().unwrap();
    let db = libsql::Builder::new_local(dir.path.join("control.db")).build().await.unwrap();
    let conn = db.connect().unwrap();
    let count = |sql: &'static str| {
        let conn = conn.clone();
        async move {
            let mut rows = conn.query(sql, ()).await.unwrap();
            rows.next().await.unwrap().unwrap().get::<u64>(0).unwrap()
        }
    };
    let users = count("SELECT count(*) FROM users WHERE name LIKE 'bulk-%'").await;
    // Queued: changed after what the edge holds (its `pushed`).
    let queued_snapshots = count(
        "SELECT count(DISTINCT u.id) FROM users u JOIN streams s ON s.name = 'sub/' || lower(hex(u.token_hash)) \
         WHERE u.name LIKE 'bulk-%' AND s.seq > (SELECT pushed FROM edges WHERE name = 'main')",
    )
    .await;
    let audited = count("SELECT count(*) FROM audit WHERE action = 'user.bulk_create'").await;
    let mut rows = conn
        .query(
            "SELECT 'sub/' || lower(hex(u.token_hash)), s.envelope FROM users u \
             LEFT JOIN streams s ON s.name = 'sub/' || lower(hex(u.token_hash)) WHERE u.name LIKE 'bulk-%'",
            (),
        )
        .await
        .unwrap();
    let mut signed_snapshots = 0;
    while let Some(row) = rows.next().await.unwrap() {
        let (stream, stored) = (row.get::<String>(0).unwrap(), row.get::<Option<Vec<u8>>>(1).unwrap());
        let Some(stored) = stored else { continue };
        let envelope = Envelope::decode(&stored, Kind::Snapshot.max_len()).expect("a stored snapshot decodes");
        let message = signed_message(&envelope.header);
        let signed = envelope.signatures.iter().any(|s| s.key == signing.id() && signing.verify(&message, &s.sig));
        if envelope.header.kind == Kind::Snapshot
            && envelope.header.stream == stream
            && envelope.body_matches()
            && signed
        {
            signed_snapshots += 1;
        }
    }
    Held { users, signed_snapshots, queued_snapshots, audited }
}

/// The size of control's write-ahead log: an open write transaction larger than SQLite's page
/// cache (1 MiB in control) spills its pages there before it commits.
fn wal_len(dir: &ControlDir) -> u64 {
    std::fs::metadata(dir.path.join("control.db-wal")).map_or(0, |m| m.len())
}

/// kill -9 of control during a bulk create of 3000 users leaves nothing of it, and right after
/// the create is acknowledged leaves all of it: every user with a snapshot signed for their
/// link and queued for the edge (which is down, so it takes none).
#[tokio::test]
async fn kill_9_during_a_bulk_create_leaves_all_or_nothing() {
    const BULK: u64 = 3000;
    for acknowledge in [false, true] {
        let temp = tempfile::tempdir().unwrap();
        let dir = ControlDir::init(&temp.path().join("control")).unwrap();
        // An edge that is down: every change waits for it.
        let env = [("HEARTH_EDGE_URL", format!("http://127.0.0.1:{}", free_port().unwrap()))];
        let control = ControlProcess::start(&dir, &env).unwrap();
        let http = dir.client().unwrap();
        let api = Api { token: control.setup(&http, "operate").await.unwrap(), http };
        api.post(&control, "/users", json!({ "name": "before" })).await;
        assert_eq!(held_in(&dir).await, Held { users: 0, signed_snapshots: 0, queued_snapshots: 0, audited: 0 });

        let names: Vec<String> = (0..BULK).map(|i| format!("bulk-{i:04}")).collect();
        let request =
            api.http.post(control.api("/users/bulk")).bearer_auth(&api.token).json(&json!({ "names": names }));
        if acknowledge {
            let answer = request.send().await.unwrap();
            assert_eq!(answer.status(), StatusCode::CREATED);
            control.kill9().unwrap();
        } else {
            // Killed once the create's transaction has written 256 KiB to the log while the users
            // are still not there for a reader: it is open, and has not committed.
            let wal_before = wal_len(&dir);
            let mut request = Box::pin(request.send());
            let started = Instant::now();
            loop {
                tokio::select! {
                    answer = &mut request => panic!("the bulk create finished before it was seen in progress: {answer:?}"),
                    () = tokio::time::sleep(Duration::from_millis(5)) => {}
                }
                let total = api.get(&control, "/users?per_page=1").await["total"].as_u64().unwrap();
                assert!(
                    total == 1 || total == BULK + 1,
                    "a reader saw {total} users: part of the bulk create committed"
                );
                if total == 1 && wal_len(&dir) > wal_before + (256 << 10) {
                    break;
                }
                assert!(started.elapsed() < Duration::from_secs(60), "the bulk create was never seen in progress");
            }
            control.kill9().unwrap();
            assert!(request.await.is_err(), "no answer from a killed control");
        }

        let held = held_in(&dir).await;
        let expected = if acknowledge { (BULK, 1) } else { (0, 0) };
        assert_eq!(
            held,
            Held { users: expected.0, signed_snapshots: expected.0, queued_snapshots: expected.0, audited: expected.1 },
            "acknowledged: {acknowledge}"
        );
        // Control starts again on it, sees the same, and takes writes.
        let control = ControlProcess::start(&dir, &env).unwrap();
        assert_eq!(api.get(&control, "/users?per_page=1").await["total"], expected.0 + 1);
        assert_eq!(api.get(&control, "/users?q=bulk-2999").await["total"], expected.1);
        let after = api.post(&control, "/users", json!({ "name": "after" })).await;
        assert_eq!(after["name"], "after");
        control.stop().unwrap();
    }
}

/// A push is found again after a crash at every point of it: once a batch number is taken
/// (before anything is sent) and once the edge took the push (before control wrote down that
/// it did, a write committed without waiting for the disk). Control starts again, the user
/// created just before the crash reaches the edge, under a batch number the edge never saw
/// (one given twice is refused as a conflict: no push may fail after the restart), and so does
/// one created after.
#[tokio::test]
async fn a_push_is_found_again_after_a_crash_at_every_point() {
    use hearth_tests::control::WithEdge;
    for point in ["batch-taken", "pushed"] {
        let temp = tempfile::tempdir().unwrap();
        let WithEdge { dir, main, control, api, .. } = WithEdge::start(temp.path()).await.unwrap();
        let plain = hearth_tests::http().build().unwrap();
        let served = |link: String| {
            let plain = plain.clone();
            async move { plain.get(&link).send().await.is_ok_and(|answer| answer.status() == StatusCode::OK) }
        };
        let first = api.post(&control, "/users", json!({ "name": "before" })).await;
        let link = first["link"].as_str().unwrap().to_owned();
        hearth_tests::eventually("the first user at the edge", Duration::from_secs(30), || served(link.clone())).await;
        control.stop().unwrap();

        let env = [("HEARTH_EDGE_URL", main.url.clone())];
        let crashing = [("HEARTH_EDGE_URL", main.url.clone()), ("HEARTH_CRASH_AT", point.to_owned())];
        let control = ControlProcess::start(&dir, &crashing).unwrap();
        // The push the creation starts may crash control before its answer is written (the
        // user is committed first: a push starts only after the change's commit).
        let second =
            api.http.post(control.api("/users")).bearer_auth(&api.token).json(&json!({ "name": "crashed-on" }));
        let answered = match second.send().await {
            Ok(answer) => answer.json::<Value>().await.ok(),
            Err(_) => None,
        };
        let status = control.ended(Duration::from_secs(30)).unwrap();
        assert!(!status.success(), "{point}: control crashed ({status})");
        if point == "batch-taken"
            && let Some(link) = answered.as_ref().and_then(|user| user["link"].as_str())
        {
            assert!(!served(link.to_owned()).await, "{point}: nothing was sent before the crash");
        }

        // A second on, so a batch number given again is another manifest than the one the edge
        // took (signed in the same second it would be the same bytes, which the edge takes as
        // taken).
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let (control, log) = ControlProcess::start_logged(&dir, &env).unwrap();
        let kept = api.get(&control, "/users?q=crashed-on").await;
        let id = kept["users"][0]["id"].as_u64().unwrap_or_else(|| panic!("{point}: the user is kept: {kept}"));
        let link = api.get(&control, &format!("/users/{id}/link")).await["link"].as_str().unwrap().to_owned();
        hearth_tests::eventually(
            &format!("{point}: the user created before the crash at the edge"),
            Duration::from_secs(30),
            || served(link.clone()),
        )
        .await;
        let third = api.post(&control, "/users", json!({ "name": "after" })).await;
        let link = third["link"].as_str().unwrap().to_owned();
        hearth_tests::eventually(
            &format!("{point}: a user created after the restart at the edge"),
            Duration::from_secs(30),
            || served(link.clone()),
        )
        .await;
        control.stop().unwrap();
        let refused: Vec<String> = log.try_iter().filter(|line| line.contains("push to the edge failed")).collect();
        assert!(refused.is_empty(), "{point}: the edge refused a push after the restart: {refused:?}");
    }
}

fn usage_report(key: &SecretKey, node: u64, seq: u64, users: Vec<UserUsage>) -> Vec<u8> {
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

async fn pull(http: &reqwest::Client, base: &str, prefix: &str, node: u64, key: &SecretKey) -> CredentialSet {
    let url = format!("{base}/{prefix}/nodes/{node}/creds?after=0");
    let auth = hearth_tests::node_signature(key, node, "GET", &url, b"");
    let bytes = http.get(&url).header(nodeauth::HEADER, auth).send().await.unwrap().bytes().await.unwrap();
    let envelope = Envelope::decode(&bytes, Kind::CredentialSet.max_len()).expect("a credential set envelope");
    CredentialSet::decode(&envelope.body).unwrap()
}

async fn post_usage(
    http: &reqwest::Client,
    base: &str,
    prefix: &str,
    node: u64,
    key: &SecretKey,
    body: Vec<u8>,
) -> StatusCode {
    let url = format!("{base}/{prefix}/nodes/{node}/usage");
    let auth = hearth_tests::node_signature(key, node, "POST", &url, &body);
    http.post(&url).header(nodeauth::HEADER, auth).body(body).send().await.unwrap().status()
}

/// A node added through the API and enrolled with a key made here.
async fn enroll(api: &Api, control: &ControlProcess, prefix: &str) -> (u64, SecretKey) {
    control.enroll_key(&api.http, &api.token, prefix).await.unwrap()
}

/// The `expire=` of a link's `subscription-userinfo`, as an app reads it.
async fn link_expiry(http: &reqwest::Client, link: &str) -> u64 {
    let response = http.get(link).header("user-agent", "v2rayN/7.12.5").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let info = response.headers()["subscription-userinfo"].to_str().unwrap().to_owned();
    info.split("; ").find_map(|part| part.strip_prefix("expire=")).unwrap().parse().unwrap()
}

/// A user whose days start on first use connects before they start (the node's set holds
/// them), does not start on a report without their traffic, and starts at the first report
/// that carries some: the expiry is then the report's arrival plus the days, on the link too.
#[tokio::test]
async fn days_start_at_the_first_traffic_a_node_reports() {
    let (_temp, dir, control, api) = fresh_control("admin").await;
    let prefix = dir.edge_setting("api_prefix").unwrap();
    let (node, key) = enroll(&api, &control, &prefix).await;
    let later = api.post(&control, "/users", json!({ "name": "later", "days": 30, "start_on_first_use": true })).await;
    let other = api.post(&control, "/users", json!({ "name": "other" })).await;
    let (id, other_id) = (later["id"].as_u64().unwrap(), other["id"].as_u64().unwrap());
    let link = later["link"].as_str().unwrap().to_owned();
    let user = api.get(&control, &format!("/users/{id}")).await;
    assert_eq!(
        (&user["status"], &user["expires_at"], &user["started_at"], &user["duration_days"]),
        (&json!("not_started"), &json!(0), &json!(0), &json!(30)),
        "{user}"
    );
    assert_eq!(link_expiry(&api.http, &link).await, 0, "no expiry on the link before the first use");
    let set = pull(&api.http, &control.url, &prefix, node, &key).await;
    assert!(set.users().iter().any(|u| u.user == id), "a user not started yet may connect");

    // A report of someone else's traffic (and of none of theirs) starts nothing.
    let report = usage_report(
        &key,
        node,
        1,
        vec![UserUsage { user: other_id, up: 10, down: 10 }, UserUsage { user: id, up: 0, down: 0 }],
    );
    assert_eq!(post_usage(&api.http, &control.url, &prefix, node, &key, report).await, StatusCode::OK);
    assert_eq!(api.get(&control, &format!("/users/{id}")).await["status"], "not_started");

    // Their first bytes start the days.
    let before = now();
    let report = usage_report(&key, node, 2, vec![UserUsage { user: id, up: 100, down: 900 }]);
    assert_eq!(post_usage(&api.http, &control.url, &prefix, node, &key, report).await, StatusCode::OK);
    let after = now();
    let user = api.get(&control, &format!("/users/{id}")).await;
    let started = user["started_at"].as_u64().unwrap();
    assert!((before..=after).contains(&started), "started at {started}, reported between {before} and {after}");
    assert_eq!((&user["status"], user["expires_at"].as_u64()), (&json!("active"), Some(started + 30 * 86_400)));
    assert_eq!(link_expiry(&api.http, &link).await, started + 30 * 86_400, "the link shows the expiry");
    // More traffic later does not move the start.
    let report = usage_report(&key, node, 3, vec![UserUsage { user: id, up: 1, down: 1 }]);
    assert_eq!(post_usage(&api.http, &control.url, &prefix, node, &key, report).await, StatusCode::OK);
    assert_eq!(api.get(&control, &format!("/users/{id}")).await["started_at"], started);
    let set = pull(&api.http, &control.url, &prefix, node, &key).await;
    assert!(set.users().iter().any(|u| u.user == id), "a started user stays in the set");
    control.stop().unwrap();
}

#[tokio::test]
async fn expiry_quota_and_usage_through_control_and_the_edge() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let edge = EdgeProcess::start(Backend::Native, &temp.path().join("edge.db"), &dir.edge_vars().unwrap()).unwrap();
    let control = ControlProcess::start(&dir, &[("HEARTH_EDGE_URL", edge.url.clone())]).unwrap();
    let http = dir.client().unwrap();
    let plain = hearth_tests::http().build().unwrap();
    let api = Api { token: control.setup(&http, "admin").await.unwrap(), http };
    let prefix = dir.edge_setting("api_prefix").unwrap();

    let (node, key) = enroll(&api, &control, &prefix).await;

    let soon = now() + 3;
    let expiring = api.post(&control, "/users", json!({ "name": "expiring", "expires_at": soon })).await;
    let capped = api.post(&control, "/users", json!({ "name": "capped", "quota": 10_000 })).await;
    let (expiring_id, capped_id) = (expiring["id"].as_u64().unwrap(), capped["id"].as_u64().unwrap());
    let set = pull(&api.http, &control.url, &prefix, node, &key).await;
    assert_eq!(set.users().len(), 2);

    // Expiry: the sweep removes the user from the set within seconds of the time passing.
    eventually("the expired user cut off", Duration::from_secs(15), || async {
        let set = pull(&api.http, &control.url, &prefix, node, &key).await;
        set.users().iter().all(|u| u.user != expiring_id)
    })
    .await;
    assert_eq!(api.get(&control, &format!("/users/{expiring_id}")).await["status"], "expired");

    // Usage straight to control, then the same report again through the edge: counted once.
    let first = usage_report(&key, node, 1, vec![UserUsage { user: capped_id, up: 1000, down: 2000 }]);
    assert_eq!(post_usage(&api.http, &control.url, &prefix, node, &key, first.clone()).await, StatusCode::OK);
    eventually("the edge knows the node", Duration::from_secs(20), || async {
        post_usage(&plain, &edge.url, &prefix, node, &key, first.clone()).await.is_success()
    })
    .await;
    // The next report only through the edge (a control behind NAT): it crosses the quota.
    let second = usage_report(&key, node, 2, vec![UserUsage { user: capped_id, up: 0, down: 9000 }]);
    assert!(post_usage(&plain, &edge.url, &prefix, node, &key, second).await.is_success());
    eventually("the drained report applied", Duration::from_secs(20), || async {
        api.get(&control, &format!("/users/{capped_id}")).await["status"] == "over_quota"
    })
    .await;
    let user = api.get(&control, &format!("/users/{capped_id}")).await;
    assert_eq!((user["used_up"].as_u64(), user["used_down"].as_u64()), (Some(1000), Some(11_000)), "each report once");
    let set = pull(&api.http, &control.url, &prefix, node, &key).await;
    assert!(set.users().iter().all(|u| u.user != capped_id), "over quota: cut off");
    // The edge holds the same set for nodes that cannot reach control.
    eventually("the edge serves the new set", Duration::from_secs(20), || async {
        pull(&plain, &edge.url, &prefix, node, &key).await.users().is_empty()
    })
    .await;
    control.stop().unwrap();
}

/// `serve` runs with glibc told to give the free top of its arenas back past 128 KiB
/// (`control/src/allocator.rs`): started without it, control starts itself again with it, once,
/// keeping what the operator set; started with the operator's own threshold, it keeps that.
#[test]
fn serve_runs_with_glibcs_arenas_trimmed() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    // The environment it started with, its items joined by ':' (glibc, parsing the tunables
    // in place, ends each one with a NUL).
    let environment = |control: &ControlProcess| {
        let environ = std::fs::read(format!("/proc/{}/environ", control.pid())).unwrap();
        String::from_utf8_lossy(&environ).replace('\0', ":")
    };
    // start() returns once control says where it listens: after it started again.
    let started = |env: &[(&str, String)]| ControlProcess::start(&dir, env).unwrap();
    let control = started(&[]);
    assert!(environment(&control).contains("GLIBC_TUNABLES=glibc.malloc.trim_threshold=131072:"));
    control.stop().unwrap();
    let control = started(&[("GLIBC_TUNABLES", "glibc.malloc.arena_max=4".into())]);
    let env = environment(&control);
    assert!(env.contains("GLIBC_TUNABLES=glibc.malloc.arena_max=4:glibc.malloc.trim_threshold=131072:"), "{env}");
    control.stop().unwrap();
    let own = "glibc.malloc.trim_threshold=1048576";
    let control = started(&[("GLIBC_TUNABLES", own.into())]);
    let env = environment(&control);
    assert!(env.contains(&format!("GLIBC_TUNABLES={own}:")) && !env.contains("131072"), "{env}");
    control.stop().unwrap();
}

#[tokio::test]
async fn ten_sign_ins_at_once_hold_one_hash_in_memory() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let control = ControlProcess::start(&dir, &[]).unwrap();
    let http = dir.client().unwrap();
    control.setup(&http, "read").await.unwrap();
    let before = hearth_tests::proc_status_kib(control.pid(), "VmHWM:").unwrap();
    let logins: Vec<_> = (0..10)
        .map(|i| {
            let http = http.clone();
            let url = control.api("/login");
            tokio::spawn(async move {
                let login = if i % 2 == 0 { "owner" } else { "someone" };
                let body = json!({ "login": login, "password": format!("wrong password {i}") });
                http.post(url).json(&body).send().await.unwrap().status()
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for login in logins {
        statuses.push(login.await.unwrap());
    }
    for status in &statuses {
        assert!(matches!(*status, StatusCode::UNAUTHORIZED | StatusCode::TOO_MANY_REQUESTS), "{status}");
    }
    // Hashes ran: every sign-in that may wait for the hasher (eight at once) was checked and
    // refused as wrong, not turned away unchecked; only the ones beyond may get 429.
    let checked = statuses.iter().filter(|s| **s == StatusCode::UNAUTHORIZED).count();
    assert!(checked >= 8, "only {checked} of 10 sign-ins were checked: {statuses:?}");
    let grown = hearth_tests::proc_status_kib(control.pid(), "VmHWM:").unwrap().saturating_sub(before);
    eprintln!("peak memory grew {grown} KiB for 10 concurrent sign-ins");
    // One argon2 hash is 19 MiB; ten at once would be 190 MiB.
    assert!(grown < 40 * 1024, "peak memory grew {grown} KiB: more than one hash at a time?");
    control.stop().unwrap();
}

#[tokio::test]
async fn sign_in_lockout_scopes_and_cross_site_refusal_over_https() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let control = ControlProcess::start(&dir, &[]).unwrap();
    let http = dir.client().unwrap();
    let read_token = control.setup(&http, "read").await.unwrap();
    // A second setup with the same link is refused.
    let again = http
        .post(control.api("/setup"))
        .json(&json!({ "token": control.setup_token.clone().unwrap(), "login": "x", "password": "another long one" }))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT);

    let login = |password: &'static str| {
        http.post(control.api("/login")).json(&json!({ "login": "owner", "password": password })).send()
    };
    let good = login("correct horse battery").await.unwrap();
    assert_eq!(good.status(), StatusCode::OK);
    let cookie = good.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    assert!(cookie.starts_with("__Host-hearth="));
    // Wrong passwords from the owner's own address never lock the owner's login...
    for _ in 0..5 {
        assert_eq!(login("wrong password here").await.unwrap().status(), StatusCode::UNAUTHORIZED);
    }
    let again = login("correct horse battery").await.unwrap();
    assert_eq!(again.status(), StatusCode::OK, "five failures lock nobody out");
    // ...but ten lock the address, whatever the login, even for the right password.
    for _ in 0..10 {
        assert_eq!(login("wrong password here").await.unwrap().status(), StatusCode::UNAUTHORIZED);
    }
    let locked = login("correct horse battery").await.unwrap();
    assert_eq!(locked.status(), StatusCode::TOO_MANY_REQUESTS, "the address is locked after ten failures");
    assert!(locked.headers().contains_key("retry-after"));

    // The session from before the lockout still works; a cross-site request with it does not.
    let create = |site: &'static str| {
        http.post(control.api("/users"))
            .header("cookie", &cookie)
            .header("sec-fetch-site", site)
            .json(&json!({ "name": format!("from-{site}") }))
            .send()
    };
    assert_eq!(create("cross-site").await.unwrap().status(), StatusCode::FORBIDDEN);
    assert_eq!(create("same-origin").await.unwrap().status(), StatusCode::CREATED);

    // A read token reads but cannot change anything.
    let api = Api { http: http.clone(), token: read_token };
    assert_eq!(api.get(&control, "/users").await["total"], 1);
    let (status, body) = api.call(&control, reqwest::Method::POST, "/users", Some(json!({ "name": "nope" }))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("forbidden")));
    // Outside the secret prefix: the decoy, even for the real API paths.
    let decoy = http.get(format!("{}/api/users", control.url)).send().await.unwrap();
    assert_eq!((decoy.status(), decoy.headers()["server"].to_str().unwrap()), (StatusCode::NOT_FOUND, "nginx"));
    control.stop().unwrap();
}

#[test]
fn the_cli_manages_users_and_nodes() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let added = dir.cli(&["user", "add", "bob", "--quota-gib", "2", "--days", "30", "--reset", "monthly"]).unwrap();
    let link = added.lines().find_map(|l| l.strip_prefix("link: ")).unwrap().to_owned();
    let listed = dir.cli(&["user", "list"]).unwrap();
    assert!(listed.lines().any(|l| l.contains("bob") && l.contains("active") && l.contains("2048")), "{listed}");
    dir.cli(&["user", "disable", "bob"]).unwrap();
    let shown = dir.cli(&["user", "show", "bob"]).unwrap();
    assert!(shown.contains("\"status\": \"disabled\""), "{shown}");
    assert!(shown.contains(&format!("link: {link}")), "{shown}");
    let rotated = dir.cli(&["user", "rotate", "bob"]).unwrap();
    let new_link = rotated.strip_prefix("new link: ").unwrap().trim();
    assert_ne!(new_link, link);
    assert!(dir.cli(&["user", "list", "--status", "active"]).unwrap().lines().all(|l| !l.contains("bob")));
    assert!(dir.cli(&["user", "add", "bob"]).is_err(), "names are unique");
    // Speed limits: set at creation, changed one side at a time, refused when wrong.
    dir.cli(&["user", "add", "carol", "--down", "20", "--on-quota", "slow", "--slow-speed", "1"]).unwrap();
    let shown = dir.cli(&["user", "show", "carol"]).unwrap();
    assert!(shown.contains("\"down\": 20.0") && shown.contains("\"on_quota\": \"slow\""), "{shown}");
    let limited = dir.cli(&["user", "limit", "carol", "--up", "2.5"]).unwrap();
    assert!(limited.contains("up 2.5 Mbit/s, down 20 Mbit/s") && limited.contains("slowed to 1 Mbit/s"), "{limited}");
    let limited = dir.cli(&["user", "limit", "carol", "--down", "group", "--on-quota", "cut"]).unwrap();
    assert!(limited.contains("down the groups' default") && limited.contains("cut off"), "{limited}");
    assert!(dir.cli(&["user", "limit", "carol", "--up", "fast"]).is_err());
    assert!(dir.cli(&["user", "limit", "carol", "--on-quota", "slow", "--slow-speed", "0"]).is_err());
    assert!(
        dir.cli(&["user", "show", "carol"]).unwrap().contains("\"on_quota\": \"cut\""),
        "a refused change changes nothing"
    );

    let masquerade = ["--masquerade", "ftp://files.example.net/"];
    let refused = dir.cli(&[&["node", "add", "Shop", "--host", "203.0.113.10"][..], &masquerade[..]].concat());
    assert!(refused.unwrap_err().to_string().contains("http:// or https://"), "a masquerade is a web site");
    let node = dir
        .cli(&[
            "node",
            "add",
            "Home",
            "--host",
            "203.0.113.9",
            "--port",
            "8443",
            "--obfs",
            "pw",
            "--masquerade",
            "https://www.example.net/",
        ])
        .unwrap();
    let first = node.lines().find(|l| l.contains("hearth-node enroll")).unwrap().trim().to_owned();
    let again = dir.cli(&["node", "enroll-command", "Home"]).unwrap();
    assert!(
        again.trim().starts_with("hearth-node enroll --control ") && again.trim() != first,
        "a fresh token each time"
    );
    let nodes = dir.cli(&["node", "list"]).unwrap();
    assert!(
        nodes.lines().any(|l| l.contains("Home") && l.contains("203.0.113.9:8443") && l.contains(" no ")),
        "{nodes}"
    );

    // Releases signed one after another, within the same second, are all added, in order.
    let binary = hearth_tests::binary("hearth-node").unwrap();
    let mut added = Vec::new();
    for version in ["0.2.0", "0.2.1", "0.2.2"] {
        let signed = dir.cli(&["release", "sign", "--version", version, binary.to_str().unwrap()]).unwrap();
        let release: u64 = signed
            .lines()
            .find_map(|l| l.strip_prefix("release ")?.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{signed}"));
        added.push(release);
    }
    assert!(added.windows(2).all(|w| w[0] < w[1]), "{added:?}");
    // A reader that goes away (`release list | head -1`) ends the listing quietly: no panic
    // (issue 46, 12). Here it is gone before the first line is written.
    let mut listing = std::process::Command::new(hearth_tests::binary("hearth-control").unwrap())
        .args(["release", "list", "--data-dir"])
        .arg(&dir.path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(listing.stdout.take());
    let mut said = String::new();
    std::io::Read::read_to_string(&mut listing.stderr.take().unwrap(), &mut said).unwrap();
    let status = listing.wait().unwrap();
    assert!(status.success() && !said.contains("panicked"), "{status}: {said}");
}

/// What the API does to users, nodes and groups, the CLI does too; bad input changes nothing.
#[test]
fn the_cli_covers_users_nodes_and_groups_as_the_api_does() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let show = |name: &str| -> serde_json::Value {
        let shown = dir.cli(&["user", "show", name]).unwrap();
        serde_json::from_str(shown.split("\nlink: ").next().unwrap()).unwrap()
    };
    dir.cli(&["user", "add", "ann"]).unwrap();
    dir.cli(&["group", "add", "family", "--device-limit", "3", "--block-torrent", "true", "--note", "home"]).unwrap();
    let groups = dir.cli(&["group", "list"]).unwrap();
    assert!(groups.lines().any(|l| l.starts_with("family") && l.contains("home")), "{groups}");
    let set = dir
        .cli(&[
            "user",
            "set",
            "ann",
            "--rename",
            "anne",
            "--quota-gib",
            "5",
            "--device-limit",
            "2",
            "--group",
            "family",
        ])
        .unwrap();
    assert!(set.contains("\"name\": \"anne\""), "{set}");
    let anne = show("anne");
    assert_eq!((anne["quota"].as_u64(), anne["device_limit"].as_u64()), (Some(5 << 30), Some(2)));
    assert_eq!(anne["groups"], serde_json::json!(["family"]));
    dir.cli(&["user", "set", "anne", "--days", "30"]).unwrap();
    assert!(show("anne")["expires_at"].as_u64().unwrap() > 0);
    let extended = dir.cli(&["user", "extend", "anne", "10"]).unwrap();
    assert!(extended.starts_with("user anne expires 20"), "{extended}");
    dir.cli(&["user", "set", "anne", "--no-expiry"]).unwrap();
    assert_eq!(show("anne")["expires_at"], 0);
    dir.cli(&["user", "disable", "anne"]).unwrap();
    assert_eq!(show("anne")["status"], "disabled");
    assert!(dir.cli(&["user", "enable", "anne"]).unwrap().contains("enabled (active)"));
    // Refused: an unknown user, a limit out of range, a delete without --yes; nothing changes.
    assert!(dir.cli(&["user", "set", "nobody", "--note", "x"]).is_err());
    assert!(dir.cli(&["user", "set", "anne", "--device-limit", "5000"]).is_err());
    assert!(dir.cli(&["user", "set", "anne", "--reset", "hourly"]).is_err());
    assert!(dir.cli(&["user", "delete", "anne"]).is_err());
    assert_eq!(show("anne")["quota"].as_u64(), Some(5 << 30));
    dir.cli(&["group", "set", "family", "--rename", "fam", "--block-smtp", "true"]).unwrap();
    assert_eq!(show("anne")["groups"], serde_json::json!(["fam"]));
    dir.cli(&["node", "add", "n1", "--host", "203.0.113.7"]).unwrap();
    dir.cli(&["node", "remove", "n1", "--yes"]).unwrap();
    assert!(!dir.cli(&["node", "list"]).unwrap().contains("n1"));
    dir.cli(&["group", "remove", "fam", "--yes"]).unwrap();
    assert!(!dir.cli(&["group", "list"]).unwrap().contains("fam"));
    dir.cli(&["user", "delete", "anne", "--yes"]).unwrap();
    assert!(dir.cli(&["user", "show", "anne"]).is_err());
}

/// The manual's three routing examples (docs/users/routing.md) run as written (in a shell, `hearth-control` on the
/// path and the data directory from `HEARTH_DATA_DIR`), and do what they say: the group, the
/// user and everyone are routed by their rule sets. A rule set that does not check is refused
/// with its line and column, and changes nothing.
#[test]
fn the_manuals_routing_examples_run_as_written() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    dir.cli(&["group", "add", "watchers"]).unwrap();
    dir.cli(&["user", "add", "grandma"]).unwrap();
    dir.cli(&["user", "add", "cinephile", "--group", "default", "--group", "watchers"]).unwrap();
    let page = std::fs::read_to_string(hearth_tests::repo_root().join("docs/users/routing.md")).unwrap();
    let script = page.split("```sh\n").nth(1).unwrap().split("```").next().unwrap();
    assert!(script.contains("routing rules no-ads"), "the manual's routing examples moved: {script}");
    let binary = hearth_tests::binary("hearth-control").unwrap();
    let path = format!("{}:{}", binary.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let out = std::process::Command::new("sh")
        .arg("-ec")
        .arg(script)
        .env("PATH", path)
        .env("HEARTH_DATA_DIR", &dir.path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let routed_by = |name: &str| -> serde_json::Value {
        let shown = dir.cli(&["user", "show", name]).unwrap();
        let user: serde_json::Value = serde_json::from_str(shown.split("\nlink: ").next().unwrap()).unwrap();
        user["routed_by"].clone()
    };
    assert_eq!(routed_by("grandma"), "no-ir");
    assert_eq!(routed_by("cinephile"), "streaming", "the newer group wins over default");
    dir.cli(&["user", "add", "newcomer"]).unwrap();
    assert_eq!(routed_by("newcomer"), "no-ads");
    let listed = dir.cli(&["routing", "list"]).unwrap();
    assert!(listed.contains("\"server\":\"127.0.0.1:40000\""), "{listed}");
    // Bad rules: refused with where, the set as it was.
    let bad = temp.path().join("bad.acl");
    std::fs::write(&bad, "direct(all)\n  warp(suffix:x.com, tcp/0-99999)\n").unwrap();
    let refused = dir.cli(&["routing", "rules", "no-ads", bad.to_str().unwrap()]).unwrap_err().to_string();
    assert!(refused.contains("line 2, column 22"), "{refused}");
    assert!(dir.cli(&["routing", "list"]).unwrap().contains("no-ads (id 3): 0 users, 1 groups, 3 rules"));
    assert!(dir.cli(&["routing", "remove-rules", "no-ads"]).is_err(), "a rule set in use is not removed");
    // A file longer than a rule set may be is refused before it is read whole.
    let huge = temp.path().join("huge.acl");
    std::fs::write(&huge, "direct(all)\n".repeat(30_000)).unwrap();
    let refused = dir.cli(&["routing", "rules", "huge", huge.to_str().unwrap()]).unwrap_err().to_string();
    assert!(refused.contains("more than 256 KiB"), "{refused}");
}

#[tokio::test]
async fn an_admin_added_by_the_cli_signs_in_to_a_running_control_and_is_removed() {
    let (_temp, dir, control, api) = fresh_control("admin").await;
    api.post(&control, "/groups", json!({ "name": "sold" })).await;
    let added =
        dir.cli(&["admin", "add", "rita", "--role", "reseller", "--max-users", "5", "--group", "sold"]).unwrap();
    let password = added.lines().find_map(|l| l.trim().strip_prefix("password")).unwrap().trim().to_owned();
    assert!(password.len() >= 20, "{added}");
    // Refused: a role that is not one, an operator with a reseller's limits, a taken login.
    assert!(dir.cli(&["admin", "add", "x", "--role", "boss"]).is_err());
    assert!(dir.cli(&["admin", "add", "x", "--role", "operator", "--max-users", "3"]).is_err());
    assert!(dir.cli(&["admin", "add", "RITA", "--role", "admin"]).is_err());
    let listed = dir.cli(&["admin", "list"]).unwrap();
    assert!(listed.lines().any(|l| l.starts_with("rita") && l.contains("reseller") && l.contains("sold")), "{listed}");

    let http = dir.client().unwrap();
    let signed_in =
        http.post(control.api("/login")).json(&json!({ "login": "rita", "password": password })).send().await.unwrap();
    assert_eq!(signed_in.status(), StatusCode::OK);
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let me: serde_json::Value =
        http.get(control.api("/me")).header("cookie", &cookie).send().await.unwrap().json().await.unwrap();
    assert_eq!((me["role"].as_str(), me["limits"]["max_users"].as_u64()), (Some("reseller"), Some(5)), "{me}");
    let created = http
        .post(control.api("/users"))
        .header("cookie", &cookie)
        .json(&json!({ "name": "customer" }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);

    // A password that leaked: a new one from the CLI, and with --end-tokens their API tokens
    // end too (issue 46, 7).
    let made =
        http.post(control.api("/tokens")).header("cookie", &cookie).json(&json!({ "name": "t", "scope": "users" }));
    let token: serde_json::Value = made.send().await.unwrap().json().await.unwrap();
    let token = token["token"].as_str().unwrap().to_owned();
    let with_token = || http.get(control.api("/users")).bearer_auth(&token).send();
    assert_eq!(with_token().await.unwrap().status(), StatusCode::OK);
    let reset = dir.cli(&["admin", "reset-password", "rita", "--end-tokens"]).unwrap();
    assert!(reset.contains("API tokens ended"), "{reset}");
    let password = reset.lines().find_map(|l| l.trim().strip_prefix("password")).unwrap().trim().to_owned();
    assert_eq!(with_token().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    let old = http.get(control.api("/me")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(old.status(), StatusCode::UNAUTHORIZED, "signed out everywhere");
    let signed_in =
        http.post(control.api("/login")).json(&json!({ "login": "rita", "password": password })).send().await.unwrap();
    assert_eq!(signed_in.status(), StatusCode::OK);
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();

    // Passkeys lost: the owner's (by the owner's login) and an admin's can be forgotten.
    assert_eq!(dir.cli(&["admin", "forget-passkeys", "owner"]).unwrap().trim(), "0 passkeys of owner removed");
    assert!(dir.cli(&["admin", "forget-passkeys", "rita"]).unwrap().contains("0 passkeys"));
    assert!(dir.cli(&["admin", "forget-passkeys", "nobody"]).is_err());
    assert!(dir.cli(&["admin", "remove", "rita"]).is_err(), "removing takes --yes");
    dir.cli(&["admin", "remove", "rita", "--yes"]).unwrap();
    let after = http.get(control.api("/me")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(after.status(), StatusCode::UNAUTHORIZED, "their session ended with them");
    let users = api.get(&control, "/users").await;
    assert_eq!(users["users"][0]["name"], "customer", "their users stay");
    assert!(!dir.cli(&["admin", "list"]).unwrap().contains("rita"));
}

#[tokio::test]
async fn the_profile_set_in_the_panel_reaches_links_and_lasts_until_the_file_changes() {
    use base64::Engine as _;
    let (_temp, dir, mut control, api) = fresh_control("admin").await;
    let http = api.http.clone();
    let user = api.post(&control, "/users", json!({ "name": "ann" })).await;
    // Control serves the link itself here (no edge); it comes back on a new port after a
    // restart, so the link is rebuilt from the path.
    let path = user["link"].as_str().unwrap().strip_prefix(&control.url).unwrap().to_owned();
    let link_of = |control: &ControlProcess| format!("{}{path}", control.url);
    let title_of = |headers: &reqwest::header::HeaderMap| {
        let value = headers["profile-title"].to_str().unwrap().strip_prefix("base64:").unwrap().to_owned();
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(value).unwrap()).unwrap()
    };
    let fetch = |link: String| {
        let http = http.clone();
        async move { http.get(link).header("user-agent", "v2rayN/7.12.5").send().await.unwrap().headers().clone() }
    };
    assert_eq!(title_of(&fetch(link_of(&control)).await), "Hearth");

    // Set in the panel: the link carries it at once.
    let profile = json!({ "title": "Family VPN", "announce": "Maintenance on Sunday", "update_interval_hours": 6 });
    let (status, settings) =
        api.call(&control, reqwest::Method::PATCH, "/settings", Some(json!({ "profile": profile }))).await;
    assert_eq!(status, StatusCode::OK, "{settings}");
    let headers = fetch(link_of(&control)).await;
    assert_eq!(title_of(&headers), "Family VPN");
    assert_eq!(headers["profile-update-interval"], "6");
    assert!(headers.contains_key("announce"));
    // A bad value is refused and changes nothing.
    for bad in
        [json!({ "title": "" }), json!({ "support_url": "javascript:alert(1)" }), json!({ "update_interval_hours": 0 })]
    {
        let (status, _) =
            api.call(&control, reqwest::Method::PATCH, "/settings", Some(json!({ "profile": bad }))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }
    assert_eq!(api.get(&control, "/settings").await["profile"]["title"], "Family VPN");

    // A restart keeps it...
    control.stop().unwrap();
    control = ControlProcess::start(&dir, &[]).unwrap();
    assert_eq!(api.get(&control, "/settings").await["profile"]["title"], "Family VPN");
    assert_eq!(title_of(&fetch(link_of(&control)).await), "Family VPN");
    // ...until control.toml's [profile] is edited: the file is the newer change, and wins.
    control.stop().unwrap();
    let file = dir.path.join("control.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("title = \"Hearth\""), "{text}");
    std::fs::write(&file, text.replace("title = \"Hearth\"", "title = \"Our VPN\"")).unwrap();
    control = ControlProcess::start(&dir, &[]).unwrap();
    assert_eq!(api.get(&control, "/settings").await["profile"]["title"], "Our VPN");
    assert_eq!(title_of(&fetch(link_of(&control)).await), "Our VPN");
    control.stop().unwrap();
}

#[tokio::test]
async fn an_edge_set_in_the_panel_gets_everything_and_stays_set() {
    let (temp, dir, mut control, api) = fresh_control("admin").await;
    let ann = api.post(&control, "/users", json!({ "name": "ann" })).await;
    assert!(ann["link"].as_str().unwrap().starts_with(&control.url), "no edge: control serves links");
    let id = ann["id"].as_u64().unwrap();

    let edge = EdgeProcess::start(Backend::Native, &temp.path().join("edge.db"), &dir.edge_vars().unwrap()).unwrap();
    let patch = |body: Value| {
        let (api, control) = (&api, &control);
        async move { api.call(control, reqwest::Method::PATCH, "/settings", Some(body)).await }
    };
    let (status, settings) = patch(json!({ "edge_url": "ftp://edge.example" })).await;
    assert_eq!((status, settings["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("bad_url")));
    let (status, settings) = patch(json!({ "edge_url": edge.url })).await;
    assert_eq!(status, StatusCode::OK, "{settings}");
    assert_eq!(settings["sub_url"], format!("{}/s", edge.url));
    // Everything already made reaches the new edge, and links point there.
    let link = api.get(&control, &format!("/users/{id}/link")).await["link"].as_str().unwrap().to_owned();
    assert!(link.starts_with(&edge.url), "{link}");
    let plain = hearth_tests::http().build().unwrap();
    eventually("the edge serves the user made before it was set", Duration::from_secs(20), || served(&plain, &link))
        .await;
    // The owner's User-Agent rules reach the edge, signed.
    let (status, _) = patch(json!({ "ua_rules": [{ "contains": "FamilyApp", "target": "mihomo" }] })).await;
    assert_eq!(status, StatusCode::OK);
    eventually("the edge follows the owner's rule", Duration::from_secs(20), || async {
        match plain.get(&link).header("user-agent", "FamilyApp/1.0").send().await {
            Ok(response) => response.text().await.is_ok_and(|body| body.contains("proxies:")),
            Err(_) => false,
        }
    })
    .await;

    // A restart keeps it (the configuration did not change).
    control.stop().unwrap();
    control = ControlProcess::start(&dir, &[]).unwrap();
    let api = Api { http: dir.client().unwrap(), token: api.token };
    assert_eq!(api.get(&control, "/settings").await["edge_url"], edge.url.as_str());
    // Cleared: control serves links itself again.
    let (status, settings) =
        api.call(&control, reqwest::Method::PATCH, "/settings", Some(json!({ "edge_url": "" }))).await;
    assert_eq!((status, &settings["edge_url"]), (StatusCode::OK, &Value::Null));
    let link = api.get(&control, &format!("/users/{id}/link")).await["link"].as_str().unwrap().to_owned();
    assert!(link.starts_with(&control.url), "{link}");
    control.stop().unwrap();
}

/// A restart without `HEARTH_EDGE_URL` (given at the start before) keeps the edge: links still
/// point there and it still gets changes; the log says the setting stays as it was. Only
/// clearing it in Settings detaches the edge, audited (issue 46, 2: the edge was detached
/// silently and new links pointed at control while the edge answered 404).
#[tokio::test]
async fn a_restart_without_the_edge_setting_keeps_the_edge() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let edge = EdgeProcess::start(Backend::Native, &temp.path().join("edge.db"), &dir.edge_vars().unwrap()).unwrap();
    let control = ControlProcess::start(&dir, &[("HEARTH_EDGE_URL", edge.url.clone())]).unwrap();
    let http = dir.client().unwrap();
    let api = Api { token: control.setup(&http, "admin").await.unwrap(), http };
    control.stop().unwrap();

    let (control, log) = ControlProcess::start_logged(&dir, &[]).unwrap();
    let said = hearth_tests::node::until_logged(&log, "is not now: it stays", Duration::from_secs(30)).await.unwrap();
    assert!(said.contains("HEARTH_EDGE_URL") && said.contains(&edge.url), "{said}");
    assert_eq!(api.get(&control, "/settings").await["edge_url"], edge.url.as_str());
    let bea = api.post(&control, "/users", json!({ "name": "bea" })).await;
    let link = bea["link"].as_str().unwrap().to_owned();
    assert!(link.starts_with(&edge.url), "a new link points at the edge: {link}");
    let plain = hearth_tests::http().build().unwrap();
    eventually("the edge serves the new link", Duration::from_secs(20), || served(&plain, &link)).await;

    // Detached only by the owner, and the audit log says so.
    let clear = Some(json!({ "edge_url": "" }));
    let (status, _) = api.call(&control, reqwest::Method::PATCH, "/settings", clear).await;
    assert_eq!(status, StatusCode::OK);
    let audit = api.get(&control, "/audit?action=settings.addresses").await;
    assert_eq!(audit["entries"][0]["detail"], "edge none", "{audit}");
    control.stop().unwrap();
    // And it stays detached at the next start, with the setting still absent.
    let control = ControlProcess::start(&dir, &[]).unwrap();
    assert_eq!(api.get(&control, "/settings").await["edge_url"], Value::Null);
    control.stop().unwrap();
}

/// A proxy in front of an edge or control that is not among their trusted proxies (here the
/// test itself, on 127.0.0.1, sending `X-Forwarded-For`) is warned of: control's log says so
/// once, and the status names the address for control and for the edge, which tells control in
/// its answer to the next push (issue 46, 5).
#[tokio::test]
async fn a_proxy_nobody_trusts_is_warned_of_for_control_and_the_edge() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let edge = EdgeProcess::start(Backend::Native, &temp.path().join("edge.db"), &dir.edge_vars().unwrap()).unwrap();
    let (control, log) = ControlProcess::start_logged(&dir, &[("HEARTH_EDGE_URL", edge.url.clone())]).unwrap();
    let http = dir.client().unwrap();
    let api = Api { token: control.setup(&http, "admin").await.unwrap(), http: http.clone() };
    let status = api.get(&control, "/status").await;
    assert!(status["untrusted_forwarding"].is_null() && status["edges"][0]["untrusted_forwarding"].is_null());

    // Through a "proxy": control first.
    let answer = http.get(control.api("/status")).bearer_auth(&api.token).header("x-forwarded-for", "198.51.100.7");
    assert_eq!(answer.send().await.unwrap().status(), StatusCode::OK);
    let said = hearth_tests::node::until_logged(&log, "trusted_proxies", Duration::from_secs(10)).await.unwrap();
    assert!(said.contains("127.0.0.1"), "{said}");
    assert_eq!(api.get(&control, "/status").await["untrusted_forwarding"], "127.0.0.1");
    // Then the edge: a link fetched through the "proxy", and a change pushed after it.
    let ann = api.post(&control, "/users", json!({ "name": "ann" })).await;
    let plain = hearth_tests::http().build().unwrap();
    let link = ann["link"].as_str().unwrap().to_owned();
    eventually("the edge serves ann", Duration::from_secs(20), || served(&plain, &link)).await;
    let fetched = plain.get(&link).header("user-agent", "SFA/1.12.0").header("cf-connecting-ip", "203.0.113.9");
    assert_eq!(fetched.send().await.unwrap().status(), StatusCode::OK);
    api.post(&control, "/users", json!({ "name": "bea" })).await;
    eventually("the edge named the proxy", Duration::from_secs(20), || async {
        api.get(&control, "/status").await["edges"][0]["untrusted_forwarding"] == "127.0.0.1"
    })
    .await;
    // Once: more requests through it add no warning.
    for _ in 0..3 {
        let again = http.get(control.api("/status")).bearer_auth(&api.token).header("x-forwarded-for", "198.51.100.8");
        again.send().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(log.try_iter().all(|line| !line.contains("trusted_proxies")), "warned more than once");
    control.stop().unwrap();
}

/// An edge whose disk fills up says so: control's status and the overview say "the edge's
/// disk is full" (not "storage is unavailable"), an `edge.disk_full` event is raised once, and
/// the links the edge holds are still served (issue 46, 6).
#[tokio::test]
async fn an_edge_whose_disk_is_full_says_so_and_keeps_serving() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let edge = EdgeProcess::native_on_small_disk(&temp.path().join("disk"), 384, &dir.edge_vars().unwrap()).unwrap();
    let control = ControlProcess::start(&dir, &[("HEARTH_EDGE_URL", edge.url.clone())]).unwrap();
    let http = dir.client().unwrap();
    let api = Api { token: control.setup(&http, "admin").await.unwrap(), http };
    let first = api.post(&control, "/users", json!({ "name": "first" })).await;
    let link = first["link"].as_str().unwrap().to_owned();
    let plain = hearth_tests::http().build().unwrap();
    eventually("the edge serves the first link", Duration::from_secs(20), || served(&plain, &link)).await;

    // Users until the edge's disk is full.
    let mut made = 0;
    let full = loop {
        let names: Vec<String> = (0..500).map(|i| format!("u{made}-{i}")).collect();
        api.post(&control, "/users/bulk", json!({ "names": names, "settings": { "note": "x".repeat(400) } })).await;
        made += 500;
        let started = Instant::now();
        let status = loop {
            let status = api.get(&control, "/status").await;
            if status["edge"]["pending"] == 0 || status["edges"][0]["last_error"].is_string() {
                break status;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "pushes neither went through nor failed: {status}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        if status["edges"][0]["last_error"].is_string() {
            break status;
        }
        assert!(made < 20_000, "{made} users and the edge's disk is not full");
    };
    eprintln!("the edge's disk was full after {made} users");
    let error = full["edges"][0]["last_error"].as_str().unwrap();
    assert!(error.contains("the edge's disk is full") && !error.contains("unavailable"), "{error}");
    assert!(full["edges"][0]["disk_full_since"].as_u64().unwrap() > 0, "{full}");
    // Told once, however often the push is tried again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let events = api.get(&control, "/events?limit=100").await;
    let told = events["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "edge.disk_full").count();
    assert_eq!(told, 1, "{events}");
    // What the edge holds is still served.
    assert!(served(&plain, &link).await, "the first link is no longer served");
    control.stop().unwrap();
}

/// A stream the edge will not take (here control's copy of a user's link is behind the edge's,
/// as after putting back an older database) is set aside with the edge's reason, shown in the
/// status and the metrics, and every other change still goes out; a version the edge takes
/// clears it.
#[tokio::test]
async fn a_stream_the_edge_refuses_is_set_aside_and_the_rest_goes_out() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let edge = EdgeProcess::start(Backend::Native, &temp.path().join("edge.db"), &dir.edge_vars().unwrap()).unwrap();
    let env = [("HEARTH_EDGE_URL", edge.url.clone())];
    let control = ControlProcess::start(&dir, &env).unwrap();
    let http = dir.client().unwrap();
    let plain = hearth_tests::http().build().unwrap();
    let api = Api { token: control.setup(&http, "admin").await.unwrap(), http };
    let alice = api.post(&control, "/users", json!({ "name": "alice" })).await;
    let id = alice["id"].as_u64().unwrap();
    async fn quota(api: &Api, control: &ControlProcess, id: u64, quota: u64) {
        let change = Some(json!({ "quota": quota }));
        let (status, value) = api.call(control, reqwest::Method::PATCH, &format!("/users/{id}"), change).await;
        assert_eq!(status, StatusCode::OK, "{value}");
    }
    async fn pushed(api: &Api, control: &ControlProcess) -> bool {
        api.get(control, "/status").await["edge"]["pending"] == 0
    }
    quota(&api, &control, id, 1 << 30).await;
    quota(&api, &control, id, 3 << 30).await;
    eventually("alice's changes at the edge", Duration::from_secs(30), || pushed(&api, &control)).await;
    control.stop().unwrap();

    // Control's copy of alice's link goes back two versions behind the edge's.
    let hash: Vec<u8> = {
        let db = libsql::Builder::new_local(dir.path.join("control.db")).build().await.unwrap();
        let conn = db.connect().unwrap();
        let mut rows = conn.query(&format!("SELECT token_hash FROM users WHERE id = {id}"), ()).await.unwrap();
        let hash = rows.next().await.unwrap().unwrap().get::<Vec<u8>>(0).unwrap();
        let stream = format!("sub/{}", hex_of(&hash));
        assert_eq!(
            conn.execute("UPDATE streams SET version = version - 2 WHERE name = ?1", [stream]).await.unwrap(),
            1
        );
        hash
    };
    let stream = format!("sub/{}", hex_of(&hash));
    let control = ControlProcess::start(&dir, &env).unwrap();
    quota(&api, &control, id, 5 << 30).await;
    let bob = api.post(&control, "/users", json!({ "name": "bob" })).await;
    let bob_link = bob["link"].as_str().unwrap().to_owned();
    eventually("bob's link served while alice's change is refused", Duration::from_secs(30), || async {
        served(&plain, &bob_link).await && pushed(&api, &control).await
    })
    .await;
    let status = api.get(&control, "/status").await;
    assert_eq!(status["edge"]["held_total"], 1, "{status}");
    let held = &status["edge"]["held"][0];
    assert_eq!(held["stream"], stream.as_str(), "{status}");
    assert!(held["reason"].as_str().unwrap().contains("rollback"), "{status}");
    assert!(status["edge"]["last_error"].is_null(), "{status}");
    let metrics = api.http.get(format!("{}/{}/metrics", control.url, control.admin)).bearer_auth(&api.token);
    let metrics = metrics.send().await.unwrap().error_for_status().unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|line| line == "hearth_outbox_held 1"), "{metrics}");

    // Signed again at the version the edge holds, with other content: refused again, still
    // aside. One more, above the edge's: taken, and nothing is held.
    quota(&api, &control, id, 6 << 30).await;
    eventually("alice's conflicting change set aside", Duration::from_secs(30), || async {
        let status = api.get(&control, "/status").await;
        status["edge"]["held"][0]["reason"].as_str().is_some_and(|r| r.contains("already stored with other content"))
    })
    .await;
    quota(&api, &control, id, 7 << 30).await;
    eventually("alice's change taken by the edge", Duration::from_secs(30), || async {
        let status = api.get(&control, "/status").await;
        status["edge"]["held_total"] == 0 && status["edge"]["pending"] == 0
    })
    .await;
    control.stop().unwrap();
    edge.stop().unwrap();
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A change made with the CLI while control serves reaches the edge, whatever the CLI's own
/// environment: here control was given its edge by `HEARTH_EDGE_URL` and the CLI runs
/// without it (as the command `deploy/local.sh` prints does). Running the CLI changes no
/// setting: the edge stays the one in force.
#[tokio::test]
async fn a_user_added_with_the_cli_reaches_the_edge_control_was_given_elsewhere() {
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let edge = EdgeProcess::start(Backend::Native, &temp.path().join("edge.db"), &dir.edge_vars().unwrap()).unwrap();
    let control = ControlProcess::start(&dir, &[("HEARTH_EDGE_URL", edge.url.clone())]).unwrap();
    let http = dir.client().unwrap();
    let api = Api { token: control.setup(&http, "admin").await.unwrap(), http };
    let added = dir.cli(&["user", "add", "carol"]).unwrap();
    let link = added.lines().find_map(|l| l.strip_prefix("link: ")).unwrap().to_owned();
    assert!(link.starts_with(&edge.url), "the link is on the edge: {link}");
    let plain = hearth_tests::http().build().unwrap();
    eventually("carol's link served by the edge", Duration::from_secs(20), || async {
        plain.get(&link).send().await.is_ok_and(|r| r.status() == StatusCode::OK)
    })
    .await;
    let settings = api.get(&control, "/settings").await;
    assert_eq!(settings["edge_url"], edge.url.as_str(), "the CLI changed no setting: {settings}");
    // A second command, and a change after it: still served.
    dir.cli(&["user", "limit", "carol", "--down", "10"]).unwrap();
    let again = dir.cli(&["user", "add", "dave"]).unwrap();
    let dave = again.lines().find_map(|l| l.strip_prefix("link: ")).unwrap().to_owned();
    eventually("dave's link served by the edge", Duration::from_secs(20), || async {
        plain.get(&dave).send().await.is_ok_and(|r| r.status() == StatusCode::OK)
    })
    .await;
    control.stop().unwrap();
}
