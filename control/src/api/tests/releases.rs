//! Node releases through the API: the install script and binaries for the one-line install,
//! the binaries shipped with control published in one click, which release new nodes install,
//! and which one an edge is offered.

use axum::http::{Method, StatusCode, header};
use hearth_shared::keys::Role;
use serde_json::json;

use super::{Client, enroll};
use crate::app::now;

/// The downloads under way are counted in one place for the whole program
/// (`INSTALL_DOWNLOADS`): the tests that take its permits, or download, go one at a time.
static DOWNLOADS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A rollout of `release` in `state`, started at `started`, as the API would have left it.
async fn rollout(client: &Client, release: u64, state: &'static str, node: u64, started: u64) {
    client
        .app()
        .db
        .write(move |tx| {
            tx.execute(
                "INSERT INTO rollouts (release, state, canary, current, since, started, updated) VALUES (?1, ?2, ?3, ?3, 0, ?4, 0)",
                rusqlite::params![release, state, node, started],
            )?;
            Ok(())
        })
        .await
        .unwrap();
}

/// The install script and the release in force's binaries, for the one-line node install:
/// public under the node API's prefix, the script as the command's hash names it, a binary
/// only of a release in force, and two downloads at a time.
#[tokio::test]
async fn the_node_install_script_and_binaries_are_served_within_bounds() {
    let client = Client::signed_in(false).await;
    let prefix = client.app().config.edge.api_prefix.clone();
    let script = client.send(Method::GET, &format!("/{prefix}/install/node.sh"), None, &[]).await;
    assert_eq!(script.status, StatusCode::OK);
    assert_eq!(script.body, crate::install::SCRIPT.as_bytes());
    let binary = format!("/{prefix}/install/hearth-node-linux-x86_64");
    assert_eq!(client.send(Method::GET, &binary, None, &[]).await.status, StatusCode::NOT_FOUND, "no release yet");
    let _one_at_a_time = DOWNLOADS.lock().await;
    let held = crate::api::nodes::INSTALL_DOWNLOADS.try_acquire_many(2).unwrap();
    let busy = client.send(Method::GET, &binary, None, &[]).await;
    assert_eq!(busy.status, StatusCode::SERVICE_UNAVAILABLE, "a third download at once waits");
    assert_eq!(busy.headers[header::RETRY_AFTER], "5");
    drop(held);
    assert_eq!(client.send(Method::GET, &binary, None, &[]).await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        client.send(Method::GET, &format!("/{prefix}/install/../../control.toml"), None, &[]).await.status.as_u16()
            / 100,
        4
    );
}

/// An ELF executable's first bytes for `machine` (62 x86_64, 183 aarch64), then `rest`.
fn elf(machine: u16, rest: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0u8; 64];
    bytes[..4].copy_from_slice(b"\x7fELF");
    bytes[4] = 2;
    bytes[5] = 1;
    bytes[18..20].copy_from_slice(&machine.to_le_bytes());
    bytes.extend_from_slice(rest);
    bytes
}

/// New nodes install only what nodes run already (issue 46, 12): with nodes enrolled, a
/// release signed but never rolled out is not in force; one every enrolled node runs is, and
/// so is one a completed rollout put on them; before any node is enrolled, the newest is.
#[tokio::test]
async fn new_nodes_install_only_a_release_the_nodes_run() {
    let shipped = tempfile::tempdir().unwrap();
    let client = Client::signed_in_with(false, &[("HEARTH_NODE_BINARIES", shipped.path().to_str().unwrap())]).await;
    let app = client.app().clone();
    let in_force = || {
        let app = app.clone();
        async move { app.db.read(|c| crate::releases::in_force(c, now())).await.unwrap().map(|(version, _)| version) }
    };
    std::fs::write(shipped.path().join("hearth-node"), elf(62, b"the first node")).unwrap();
    let first = client.post("/releases/shipped", json!({})).await.json()["release"].as_u64().unwrap();
    assert_eq!(in_force().await, Some(first), "no node yet: the first node installs the newest");
    let (node, _) = enroll(&client, json!(["default"])).await;
    assert_eq!(in_force().await, None, "a node runs another build: this one was never rolled out");
    let runs = |release: u64| {
        let app = app.clone();
        async move {
            app.db
                .write(move |tx| {
                    tx.execute(
                        "UPDATE nodes SET release_running = ?2 WHERE id = ?1",
                        rusqlite::params![node, release],
                    )?;
                    Ok(())
                })
                .await
                .unwrap()
        }
    };
    runs(first).await;
    assert_eq!(in_force().await, Some(first), "every enrolled node runs it");
    std::fs::write(shipped.path().join("hearth-node"), elf(62, b"the next node")).unwrap();
    let next = client.post("/releases/shipped", json!({})).await.json()["release"].as_u64().unwrap();
    assert!(next > first);
    assert_eq!(in_force().await, Some(first), "signed, not rolled out: not installed");
    rollout(&client, next, "done", node, 0).await;
    assert_eq!(in_force().await, Some(next), "a completed rollout puts it in force");
}

/// An edge is never offered a release older than the one it holds (issue 46, 12): after a
/// failed rollout the newest rollout standing is an older release, which the edge refuses as a
/// rollback; offering it again held back the next release behind the backoff.
#[tokio::test]
async fn an_edge_is_never_offered_an_older_release_than_it_holds() {
    let shipped = tempfile::tempdir().unwrap();
    let client = Client::signed_in_with(false, &[("HEARTH_NODE_BINARIES", shipped.path().to_str().unwrap())]).await;
    let app = client.app().clone();
    let mut made = Vec::new();
    for body in [&b"first"[..], b"second"] {
        std::fs::write(shipped.path().join("hearth-node"), elf(62, body)).unwrap();
        made.push(client.post("/releases/shipped", json!({})).await.json()["release"].as_u64().unwrap());
    }
    let (first, second) = (made[0], made[1]);
    rollout(&client, first, "done", 0, 1).await;
    rollout(&client, second, "failed", 0, 2).await;
    let dir = app.config.data_dir.clone();
    let offered = |held: u64| {
        let (app, dir) = (app.clone(), dir.clone());
        async move {
            app.db
                .read(move |c| crate::releases::bundle_for_edge(c, &dir, held as i64))
                .await
                .unwrap()
                .map(|(release, _)| release)
        }
    };
    assert_eq!(offered(0).await, Some(first), "an edge with none gets the rollout standing");
    assert_eq!(offered(first).await, None, "it holds it already");
    assert_eq!(offered(second).await, None, "it holds a newer one: no rollback offered");
}

/// With no release in force, one click signs the hearth-node binaries shipped beside control
/// (and nothing else there) as a release of control's version, with the release key on the
/// server: an admin's act; refused with its own code when there is no binary, the key is
/// offline, or the release in force has these very binaries.
#[tokio::test]
async fn the_node_binaries_shipped_with_control_become_a_release_in_one_click() {
    let shipped = tempfile::tempdir().unwrap();
    let client = Client::signed_in_with(false, &[("HEARTH_NODE_BINARIES", shipped.path().to_str().unwrap())]).await;
    let listed = client.get("/releases").await.json();
    assert_eq!(listed["shipped"], json!({ "version": env!("CARGO_PKG_VERSION"), "binaries": [], "key_here": true }));
    let none = client.post("/releases/shipped", json!({})).await;
    assert_eq!((none.status, none.code().as_str()), (StatusCode::CONFLICT, "no_node_binary"), "{}", none.json());
    assert!(none.json()["error"]["message"].as_str().unwrap().contains("deploy/build-release.sh"));

    let x86 = elf(62, b"the x86_64 node");
    let arm = elf(183, b"the aarch64 node");
    std::fs::write(shipped.path().join("hearth-node"), &x86).unwrap();
    std::fs::write(shipped.path().join("hearth-node-linux-aarch64"), &arm).unwrap();
    // Neither a file named for another architecture than it is, nor anything else, is taken.
    std::fs::write(shipped.path().join("hearth-node-linux-riscv64"), elf(62, b"mislabelled")).unwrap();
    std::fs::write(shipped.path().join("hearth-control"), elf(62, b"control")).unwrap();
    let listed = client.get("/releases").await.json();
    assert_eq!(
        listed["shipped"]["binaries"],
        json!([
            { "os": "linux", "arch": "aarch64", "len": arm.len() },
            { "os": "linux", "arch": "x86_64", "len": x86.len() },
        ])
    );

    let token = client.post("/tokens", json!({ "name": "ops", "scope": "operate" })).await.json()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let operator = Client { control: client.control.clone(), cookie: None, bearer: Some(token) };
    assert_eq!(operator.post("/releases/shipped", json!({})).await.status, StatusCode::FORBIDDEN);
    assert!(client.get("/releases").await.json()["releases"].as_array().unwrap().is_empty());

    let published = client.post("/releases/shipped", json!({})).await;
    assert_eq!(published.status, StatusCode::CREATED, "{}", published.json());
    let release = published.json()["release"].as_u64().unwrap();
    let views = published.json()["releases"].clone();
    assert_eq!(views[0]["name"], env!("CARGO_PKG_VERSION"));
    assert_eq!(views[0]["files"], json!(["hearth-node-linux-aarch64", "hearth-node-linux-x86_64"]));
    let lifetime = views[0]["expires"].as_u64().unwrap() - views[0]["built"].as_u64().unwrap();
    assert_eq!(lifetime, crate::releases::SHIPPED_LIFETIME);
    // In force: new nodes get the one-line install, and its binary is the shipped one.
    let node = client.post("/nodes", json!({ "name": "Oslo", "host": "203.0.113.7" })).await.json();
    assert!(
        node["install_command"]
            .as_str()
            .unwrap()
            .contains(&format!("x86_64={}", hex::encode(hearth_shared::sha256(&x86))))
    );
    let prefix = client.app().config.edge.api_prefix.clone();
    let served = {
        let _one_at_a_time = DOWNLOADS.lock().await;
        client.send(Method::GET, &format!("/{prefix}/install/hearth-node-linux-aarch64"), None, &[]).await
    };
    assert_eq!(served.body, arm);
    let audit = client.get("/audit").await.json().to_string();
    assert!(audit.contains("release.add") && audit.contains(&format!("release {release}")), "{audit}");

    let again = client.post("/releases/shipped", json!({})).await;
    assert_eq!((again.status, again.code().as_str()), (StatusCode::CONFLICT, "release_same"));
    // A newer binary shipped: a newer release.
    std::fs::write(shipped.path().join("hearth-node"), elf(62, b"the next x86_64 node")).unwrap();
    let next = client.post("/releases/shipped", json!({})).await;
    assert_eq!(next.status, StatusCode::CREATED, "{}", next.json());
    assert!(next.json()["release"].as_u64().unwrap() > release);
    // A rollout names the release by its number or by its name, and a wrong one is told in
    // JSON, as every other answer (issue 46, 12: a name got axum's plain-text 400).
    for path in ["/releases/9.9.9/rollout", "/releases/0/stop", "/releases/a%20name/rollout"] {
        let unknown = client.post(path, json!({ "canary": 1 })).await;
        assert_eq!((unknown.status, unknown.code().as_str()), (StatusCode::NOT_FOUND, "not_found"), "{path}");
    }
    let by_name =
        client.post(&format!("/releases/{}/rollout", env!("CARGO_PKG_VERSION")), json!({ "canary": 999 })).await;
    assert_ne!(by_name.code(), "not_found", "the release is found by its name");
    assert_eq!(by_name.status, StatusCode::BAD_REQUEST, "{}", String::from_utf8_lossy(&by_name.body));

    // The release key kept offline: the click is refused with the commands to run instead.
    let key = crate::keyring::Paths::new(&client.app().config.data_dir).secret(Role::Release);
    std::fs::remove_file(&key).unwrap();
    assert_eq!(client.get("/releases").await.json()["shipped"]["key_here"], false);
    let offline = client.post("/releases/shipped", json!({})).await;
    assert_eq!((offline.status, offline.code().as_str()), (StatusCode::CONFLICT, "release_key_offline"));
    assert!(offline.json()["error"]["message"].as_str().unwrap().contains("release add"));
    assert_eq!(client.get("/releases").await.json()["releases"].as_array().unwrap().len(), 2);
}

/// What a node runs reaches control in its signed usage reports too, as in its pulls (issue
/// 46, 12: the edge relays the reports of a node that reaches only it), and an older word
/// that an edge passes on later never undoes a newer one.
#[tokio::test]
async fn what_a_node_runs_is_heard_in_its_reports_and_an_older_word_never_wins() {
    use hearth_shared::wire::{NodeRelease, UsageReport};
    let client = Client::signed_in(false).await;
    let (node, key) = enroll(&client, json!(["default"])).await;
    let said = || {
        let app = client.app().clone();
        async move {
            app.db
                .read(move |c| {
                    Ok(c.query_row(
                        "SELECT version, release_running, update_status FROM nodes WHERE id = ?1",
                        [node],
                        |row| Ok((row.get::<_, String>(0)?, row.get::<_, u64>(1)?, row.get::<_, String>(2)?)),
                    )?)
                })
                .await
                .unwrap()
        }
    };
    let report = |seq: u64, end: u64, running: &str, update: &str| {
        let release = NodeRelease { running: running.into(), update: update.into() };
        let report = UsageReport {
            node,
            seq,
            period_start: end - 10,
            period_end: end,
            users: Vec::new(),
            presence: Vec::new(),
            release: Some(release),
            kicked: Vec::new(),
        };
        report.sign(&key, now()).encode()
    };
    let at = now();
    let sent = super::node_usage(&client, node, &key, report(1, at - 60, "0.2.0@7", "8 rolled back: it crashed")).await;
    assert_eq!(sent.status, StatusCode::OK);
    assert_eq!(said().await, ("0.2.0".to_owned(), 7, "8 rolled back: it crashed".to_owned()));
    // A pull says the node moved on; then the edge relays a report made before that pull.
    let app = client.app().clone();
    app.db.write(move |tx| crate::releases::node_says(tx, node, Some("0.3.0@9"), None, at - 20)).await.unwrap();
    let late = super::node_usage(&client, node, &key, report(2, at - 30, "0.2.0@7", "8 rolled back: it crashed")).await;
    assert_eq!(late.status, StatusCode::OK, "the report itself is taken");
    assert_eq!(said().await, ("0.3.0".to_owned(), 9, String::new()), "an older word undid a newer one");
    let newer = super::node_usage(&client, node, &key, report(3, at, "0.3.0@9", "10 tampered")).await;
    assert_eq!(newer.status, StatusCode::OK);
    assert_eq!(said().await, ("0.3.0".to_owned(), 9, "10 tampered".to_owned()));
}
