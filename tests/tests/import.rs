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
              "aliases": ["/sub/AliceOld123", "/api/sub/aLiCe-short"] },
            { "id": "bob@old", "name": "bob", "password": "alice-old-hy2-password" },
        ],
    });
    let file = temp.path().join("users.json");
    std::fs::write(&file, document.to_string()).unwrap();
    let file = file.to_str().unwrap();
    let dry = dir.cli(&["import", "hearth", "--file", file, "--dry-run"]).unwrap();
    assert!(dry.contains("dry run from old-panel: would import 1 users"), "{dry}");
    assert!(dry.contains("bob@old: its Hysteria2 password is another user's"), "{dry}");
    assert_eq!(api.get(&control, "/users").await["total"], 0, "a dry run keeps nothing");
    let done = dir.cli(&["import", "hearth", "--file", file]).unwrap();
    assert!(done.contains("import from old-panel: imported 1 users"), "{done}");
    assert!(done.contains("alice (alice@old): password kept, 2 aliases"), "{done}");
    let again = dir.cli(&["import", "hearth", "--file", file]).unwrap();
    assert!(again.contains("imported 0 users") && again.contains("already imported, left as they are: 1"), "{again}");
    let broken = temp.path().join("broken.json");
    std::fs::write(&broken, b"{\"format\": \"hearth-users\", \"version\": 1, \"users\": [{").unwrap();
    let refused = dir.cli(&["import", "hearth", "--file", broken.to_str().unwrap()]).unwrap_err().to_string();
    assert!(refused.contains("not a Hearth users document"), "{refused}");

    // Each edge, once it holds the push, serves alice's old paths (on the old domain, pointed
    // at the edge) with her old password.
    for (edge, url) in [("main", &main.url), ("worker", &worker.url)] {
        eventually(&format!("{edge} up to date"), Duration::from_secs(60), || async {
            let status = api.get(&control, "/status").await;
            status["edges"].as_array().unwrap().iter().any(|e| e["name"] == edge && e["pending"] == 0)
        })
        .await;
        for path in ["/sub/AliceOld123", "/api/sub/aLiCe-short/"] {
            let outbounds = profile_outbounds(&plain, &format!("{url}{path}")).await.unwrap();
            assert_eq!(outbounds[0]["password"], "alice-old-hy2-password", "{edge}{path}");
        }
        let other = plain.get(format!("{url}/sub/AliceOld124")).send().await.unwrap();
        assert_eq!(other.status(), 404, "{edge}: another path under the prefix is the decoy");
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
