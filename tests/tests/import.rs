//! Moving in from another panel, end to end: the real control binary's `import` (dry run,
//! then for real, then again), a native edge and the Worker in workerd serving the imported
//! users' old subscription paths, and the real sing-box client connecting through a real node
//! with the Hysteria2 password the user had before.

use std::time::Duration;

use hearth_tests::control::{WithEdge, add_worker_edge};
use hearth_tests::eventually;
use hearth_tests::node::{NodeProcess, ProxyClient, fetch_eventually, http_server, profile_outbounds};
use serde_json::json;

#[tokio::test]
async fn imported_users_keep_their_old_links_and_passwords_through_both_edges_and_a_node() {
    let temp = tempfile::tempdir().unwrap();
    let WithEdge { dir, main, control, http, api } = WithEdge::start(temp.path()).await.unwrap();
    let plain = hearth_tests::http().build().unwrap();
    let (port, _) = control.enroll_node(&http, &api.token, &temp.path().join("node")).await.unwrap();
    let worker = add_worker_edge(&api, &control, &dir, &temp.path().join("worker"), "worker").await.unwrap();

    // A Hearth users document, as a script moving off another panel writes it.
    let document = json!({
        "format": "hearth-users",
        "version": 1,
        "source": "old-panel",
        "users": [
            { "id": "alice@old", "name": "alice", "password": "alice-old-hy2-password", "quota": 50_000_000_000u64,
              "aliases": ["/sub/AliceOld123", "/api/sub/aLiCe-short", "/aLiCeAtTheRoot9"] },
            { "id": "bob@old", "name": "bob", "password": "alice-old-hy2-password" },
        ],
    });
    let file = temp.path().join("users.json");
    std::fs::write(&file, document.to_string()).unwrap();
    let file = file.to_str().unwrap();
    let dry = dir.cli(&["import", "hearth", "--file", file, "--dry-run"]).unwrap();
    assert!(dry.contains("dry run from old-panel: would import 1 users"), "{dry}");
    assert!(dry.contains("bob (bob@old): its Hysteria2 password is another user's"), "{dry}");
    assert_eq!(api.get(&control, "/users").await["total"], 0, "a dry run keeps nothing");
    let done = dir.cli(&["import", "hearth", "--file", file]).unwrap();
    assert!(done.contains("import from old-panel: imported 1 users"), "{done}");
    assert!(done.contains("alice (alice@old): password kept, 3 aliases"), "{done}");
    let again = dir.cli(&["import", "hearth", "--file", file]).unwrap();
    assert!(again.contains("imported 0 users") && again.contains("already imported, left as they are: 1"), "{again}");
    let broken = temp.path().join("broken.json");
    std::fs::write(&broken, b"{\"format\": \"hearth-users\", \"version\": 1, \"users\": [{").unwrap();
    let refused = dir.cli(&["import", "hearth", "--file", broken.to_str().unwrap()]).unwrap_err().to_string();
    assert!(refused.contains("not a Hearth users document"), "{refused}");

    // A 3x-ui database too: carol's subscription id holds a space and a letter beyond ASCII.
    let xui = hearth_tests::repo_root().join("tests/fixtures/import/3x-ui/x-ui-v3.6.0.db");
    let done = dir.cli(&["import", "3x-ui", "--file", xui.to_str().unwrap()]).unwrap();
    assert!(done.contains("carol (carol): password kept, 3 aliases"), "{done}");
    assert!(done.contains("its old link is served as carol%20sub%20%C3%BC"), "{done}");

    // Each edge, once it holds the push, serves alice's old paths (on the old domain, pointed
    // at the edge) with her old password.
    for (edge, url) in [("main", &main.url), ("worker", &worker.url)] {
        eventually(&format!("{edge} up to date"), Duration::from_secs(60), || async {
            let status = api.get(&control, "/status").await;
            status["edges"].as_array().unwrap().iter().any(|e| e["name"] == edge && e["pending"] == 0)
        })
        .await;
        // (At the root, as a subscription page on a domain of its own serves links.)
        for path in ["/sub/AliceOld123", "/api/sub/aLiCe-short/", "/aLiCeAtTheRoot9"] {
            let outbounds = profile_outbounds(&plain, &format!("{url}{path}")).await.unwrap();
            assert_eq!(outbounds[0]["password"], "alice-old-hy2-password", "{edge}{path}");
        }
        // Carol's link as the old panel showed it, which an app requests escaped.
        let outbounds = profile_outbounds(&plain, &format!("{url}/feed/carol sub \u{fc}")).await.unwrap();
        assert_eq!(outbounds[0]["password"], "car0l-hy2-pass", "{edge}: carol's escaped path");
        let other = plain.get(format!("{url}/sub/AliceOld124")).send().await.unwrap();
        assert_eq!(other.status(), 404, "{edge}: another path under the prefix is the decoy");
        for other in ["/aLiCeAtTheRoot8", "/aLiCeAtTheRoot9/json"] {
            let other = plain.get(format!("{url}{other}")).send().await.unwrap();
            assert_eq!(other.status(), 404, "{edge}: another path at the root is the decoy");
        }
    }

    // The app holding alice's old single link (her password, the node's address) connects.
    let node = NodeProcess::start(&temp.path().join("node")).unwrap();
    let outbounds = profile_outbounds(&plain, &format!("{}/sub/AliceOld123", worker.url)).await.unwrap();
    let outbound = outbounds.iter().find(|o| o["server_port"] == port).unwrap().clone();
    let web = http_server(b"moved in".to_vec()).await.unwrap();
    let client = ProxyClient::sing_box(outbound).unwrap();
    assert_eq!(fetch_eventually(&client, web).await.unwrap(), b"moved in");
    drop(client);
    node.stop().unwrap();
}

/// Marzban and PasarGuard sign a new link each time one is shown, so the links apps hold come
/// from the old web server's access log: each is checked with the database's secret (as the
/// panel checks it) and served as an alias. The fixtures are made from the panels' own models
/// (`tests/fixtures/import/marzban/make_fixtures.py`), with each token's verdict in the panel.
#[tokio::test]
async fn marzban_and_pasarguard_links_from_the_access_log_keep_working() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/import/marzban");
    let fixture = |name: &str| fixtures.join(name).to_str().unwrap().to_owned();
    let tokens: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures.join("tokens.json")).unwrap()).unwrap();
    let temp = tempfile::tempdir().unwrap();
    let WithEdge { dir, main, control, http, api } = WithEdge::start(temp.path()).await.unwrap();
    let plain = hearth_tests::http().build().unwrap();
    let (port, _) = control.enroll_node(&http, &api.token, &temp.path().join("node")).await.unwrap();

    // Marzban from a MySQL dump: no Hysteria2 there, so new passwords; its valid links kept.
    let dry = dir
        .cli(&[
            "import",
            "marzban",
            "--file",
            &fixture("marzban-v0.8.4.mysqldump.sql"),
            "--links",
            &fixture("marzban-v0.8.4.access.log"),
            "--dry-run",
        ])
        .unwrap();
    assert!(dry.contains("dry run from marzban: would import 3 users"), "{dry}");
    assert!(dry.contains("alice (alice): password new, 3 aliases"), "{dry}");
    assert!(dry.contains("bob (bob): password new, 1 alias\n"), "{dry}");
    assert!(dry.contains("old links: 2 links not signed by this panel"), "{dry}");
    assert!(dry.contains("old links: 3 links revoked in the panel"), "{dry}");
    let refused = dir.cli(&["import", "marzban", "--file", &fixture("pasarguard-v5.2.1.sqlite3")]).unwrap_err();
    assert!(refused.to_string().contains("import it as pasarguard"), "{refused}");

    // PasarGuard from its SQLite file: passwords kept.
    let args = [
        "import",
        "pasarguard",
        "--file",
        &fixture("pasarguard-v5.2.1.sqlite3"),
        "--links",
        &fixture("pasarguard-v5.2.1.access.log"),
    ];
    let done = dir.cli(&args).unwrap();
    assert!(done.contains("import from pasarguard: imported 3 users"), "{done}");
    assert!(done.contains("alice (1): password kept, 5 aliases"), "{done}");
    let again = dir.cli(&args).unwrap();
    assert!(again.contains("imported 0 users") && again.contains("already imported, left as they are: 3"), "{again}");

    eventually("the edge up to date", Duration::from_secs(60), || async {
        let status = api.get(&control, "/status").await;
        status["edges"].as_array().unwrap().iter().all(|e| e["pending"] == 0)
    })
    .await;
    // Each request of the old panel's access log again, at the edge: what the panel served is
    // served (but its `info` pages, which are no subscription), what it refused is the decoy.
    let log = std::fs::read_to_string(fixtures.join("pasarguard-v5.2.1.access.log")).unwrap();
    let mut served = 0;
    for line in log.lines().filter(|l| l.contains("\"GET /sub/")) {
        let path = line.split("\"GET ").nth(1).unwrap().split(' ').next().unwrap();
        let was = line.split("\" ").nth(1).unwrap().split(' ').next().unwrap();
        let token = tokens["tokens"].as_array().unwrap().iter().find(|t| path.contains(t["token"].as_str().unwrap()));
        let user = token.unwrap()["user"].as_str().unwrap();
        if was == "404" || path.ends_with("/info") {
            let answer = plain.get(format!("{}{path}", main.url)).send().await.unwrap();
            assert_eq!(answer.status(), 404, "{line}");
        } else if user != "carol" {
            // (carol is disabled: her profile says so and lists no servers.)
            let outbounds = profile_outbounds(&plain, &format!("{}{path}", main.url)).await.unwrap();
            let n = if user == "alice" { 1 } else { 2 };
            assert_eq!(outbounds[0]["password"], format!("hy2-{user}-auth-000{n}").as_str(), "{line}");
            served += 1;
        }
    }
    assert!(served >= 6, "{served}");

    // An app holding alice's old single link connects with her PasarGuard password.
    let node = NodeProcess::start(&temp.path().join("node")).unwrap();
    let valid = tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["panel"] == "pasarguard-v5.2.1" && t["user"] == "alice" && t["valid"] == true)
        .unwrap();
    let outbounds =
        profile_outbounds(&plain, &format!("{}{}", main.url, valid["path"].as_str().unwrap())).await.unwrap();
    let outbound = outbounds.iter().find(|o| o["server_port"] == port).unwrap().clone();
    assert_eq!(outbound["password"], "hy2-alice-auth-0001");
    let web = http_server(b"moved from pasarguard".to_vec()).await.unwrap();
    let client = ProxyClient::sing_box(outbound).unwrap();
    assert_eq!(fetch_eventually(&client, web).await.unwrap(), b"moved from pasarguard");
    drop(client);
    node.stop().unwrap();
}
