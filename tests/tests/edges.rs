//! Many edges behind one control, all real processes: two native edges and the Worker in
//! workerd, each with its own push token and API prefix. Every link serves the same bodies
//! from all of them; an edge added at run time (from the CLI, or the API) is brought up to
//! date within seconds; an edge that is down while users change catches up when it returns;
//! a removed edge gets nothing more; marking a domain blocked moves every primary link, and
//! what the blocked or retired domain still answers names the new link; a node falls back to
//! the second edge when control and the first are gone.

use std::time::{Duration, Instant};

use hearth_tests::control::{Api, ControlDir, ControlProcess, WithEdge, own_edge_vars};
use hearth_tests::edge::{Backend, EdgeProcess, free_port};
use hearth_tests::eventually;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The body an app (sing-box) gets from `link`, if it gets one.
async fn body(http: &reqwest::Client, link: &str) -> Option<String> {
    let response = http.get(link).header("user-agent", "SFA/1.12.0").send().await.ok()?;
    if response.status() != StatusCode::OK {
        return None;
    }
    response.text().await.ok()
}

/// Each of the user's links (one per edge offering links), by edge name.
async fn links(api: &Api, control: &ControlProcess, id: u64) -> Vec<(String, String)> {
    let answer = api.get(control, &format!("/users/{id}/link")).await;
    answer["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["edge"].as_str().unwrap().to_owned(), l["link"].as_str().unwrap().to_owned()))
        .collect()
}

/// Whether every link of the user serves the same body, at every edge named in `at`.
async fn same_everywhere(http: &reqwest::Client, links: &[(String, String)], at: &[&str]) -> bool {
    let mut first: Option<String> = None;
    for name in at {
        let Some((_, link)) = links.iter().find(|(edge, _)| edge == name) else { return false };
        let Some(got) = body(http, link).await else { return false };
        match &first {
            None => first = Some(got),
            Some(first) if *first != got => return false,
            Some(_) => {}
        }
    }
    true
}

#[tokio::test]
async fn three_edges_serve_every_link_alike_and_each_catches_up() {
    let temp = tempfile::tempdir().unwrap();
    let WithEdge { dir, main, control, api, .. } = WithEdge::start(temp.path()).await.unwrap();
    let plain = hearth_tests::http().build().unwrap();
    let mut ids = Vec::new();
    for name in ["alice", "bob", "carol"] {
        ids.push(api.post(&control, "/users", json!({ "name": name })).await["id"].as_u64().unwrap());
    }

    // A second native edge on another "host", added from the CLI while control serves; its
    // push token comes from a file, never the command line.
    let mirror_vars = own_edge_vars(&dir, "mirror").unwrap();
    let mirror_port = free_port().unwrap();
    let mirror_db = temp.path().join("mirror.db");
    let mirror = EdgeProcess::start_on(Backend::Native, &mirror_db, &mirror_vars, mirror_port).unwrap();
    let token_file = temp.path().join("mirror.token");
    std::fs::write(&token_file, format!("{}\n", mirror_vars[1].1)).unwrap();
    let added = Instant::now();
    dir.cli(&[
        "edge",
        "add",
        "mirror",
        "--url",
        &mirror.url,
        "--api-prefix",
        &mirror_vars[2].1,
        "--push-token-file",
        token_file.to_str().unwrap(),
        "--link-base",
        &format!("{}/mirror-links", mirror.url),
    ])
    .unwrap();
    eventually("control serving shows the mirror the CLI added", Duration::from_secs(5), || async {
        let alice = links(&api, &control, ids[0]).await;
        alice.iter().map(|(edge, _)| edge.as_str()).collect::<Vec<_>>() == ["main", "mirror"]
    })
    .await;
    eventually("every link served alike by main and the mirror added at run time", Duration::from_secs(20), || async {
        for &id in &ids {
            if !same_everywhere(&plain, &links(&api, &control, id).await, &["main", "mirror"]).await {
                return false;
            }
        }
        true
    })
    .await;
    eprintln!("an edge added at run time served every link after {:?}", added.elapsed());

    // The Worker in workerd, on its own account's token and prefix, added through the API.
    let worker_vars = own_edge_vars(&dir, "worker").unwrap();
    let worker = EdgeProcess::start(Backend::Worker, &temp.path().join("worker"), &worker_vars).unwrap();
    let answer = api
        .post(
            &control,
            "/edges",
            json!({
                "name": "worker",
                "url": worker.url,
                "api_prefix": worker_vars[2].1,
                "push_token": worker_vars[1].1,
                "link_base": format!("{}/worker-links", worker.url),
            }),
        )
        .await;
    let worker_id = answer["id"].as_i64().unwrap();
    let all = ["main", "mirror", "worker"];
    eventually("every link served alike by all three edges", Duration::from_secs(60), || async {
        for &id in &ids {
            if !same_everywhere(&plain, &links(&api, &control, id).await, &all).await {
                return false;
            }
        }
        true
    })
    .await;

    // The mirror goes down while users change: it shows as failing and behind, and when it
    // comes back (same address, same data) it catches up.
    mirror.stop().unwrap();
    api.post(&control, &format!("/users/{}/disable", ids[0]), json!({})).await;
    let dave = api.post(&control, "/users", json!({ "name": "dave" })).await["id"].as_u64().unwrap();
    eventually("the mirror shown failing and behind", Duration::from_secs(30), || async {
        let status = api.get(&control, "/status").await;
        let mirror = status["edges"].as_array().unwrap().iter().find(|e| e["name"] == "mirror").cloned().unwrap();
        mirror["pending"].as_u64().unwrap() >= 2 && mirror["last_error"].is_string()
    })
    .await;
    let metrics = api.http.get(format!("{}/{}/metrics", control.url, control.admin)).bearer_auth(&api.token);
    let metrics = metrics.send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("hearth_edge_up{edge=\"mirror\"} 0"), "{metrics}");
    assert!(metrics.contains("hearth_edge_up{edge=\"main\"} 1"), "{metrics}");
    let dave_links = links(&api, &control, dave).await;
    eventually("the other edges go on meanwhile", Duration::from_secs(20), || async {
        same_everywhere(&plain, &dave_links, &["main", "worker"]).await
    })
    .await;
    // Down for a minute in all (pushes back off to 32 s meanwhile).
    tokio::time::sleep(Duration::from_secs(50)).await;
    let mirror = EdgeProcess::start_on(Backend::Native, &mirror_db, &mirror_vars, mirror_port).unwrap();
    // Asked through control's status, not by fetching links the mirror does not hold yet: an
    // edge answers a network that keeps asking for unknown links with decoys for a while.
    let back = Instant::now();
    eventually("the mirror caught up after its outage", Duration::from_secs(90), || async {
        let status = api.get(&control, "/status").await;
        let mirror = status["edges"].as_array().unwrap().iter().find(|e| e["name"] == "mirror").cloned().unwrap();
        mirror["pending"] == 0 && mirror["last_error"].is_null()
    })
    .await;
    let alice = links(&api, &control, ids[0]).await;
    assert!(same_everywhere(&plain, &dave_links, &all).await, "dave's link everywhere");
    assert!(same_everywhere(&plain, &alice, &all).await, "alice's link everywhere");
    eprintln!("the mirror caught up {:?} after it came back", back.elapsed());
    let alice_body = body(&plain, &links(&api, &control, ids[0]).await[1].1).await.unwrap();
    assert!(alice_body.contains("Account disabled"), "the change made while it was down: {alice_body}");

    // The main domain is blocked: every primary link moves to the mirror, the main edge's
    // links are still listed (some people still reach it) and still served.
    let main_id = api.get(&control, "/edges").await["edges"][0]["id"].as_i64().unwrap();
    let change = json!({ "state": "blocked" });
    api.ok(&control, reqwest::Method::PATCH, &format!("/edges/{main_id}"), Some(change)).await;
    let primary = api.get(&control, &format!("/users/{}/link", ids[1])).await["link"].as_str().unwrap().to_owned();
    assert!(primary.starts_with(&format!("{}/mirror-links/", mirror.url)), "{primary}");
    let shown = dir.cli(&["user", "show", "bob"]).unwrap();
    assert!(shown.contains(&format!("link: {primary}")), "the CLI shows the same primary: {shown}");
    // Apps that still reach the blocked domain learn the new link there: the announcement
    // and the web page header (Happ shows both, Clash Verge Rev the page), Stash's
    // `#SUBSCRIBED` line, and the browser page offers the new link.
    let bob_main = format!("{}/s/{}", main.url, primary.rsplit('/').next().unwrap());
    eventually("the blocked domain names the new link", Duration::from_secs(20), || async {
        let Ok(answer) = plain.get(&bob_main).header("user-agent", "Happ/1.0").send().await else { return false };
        answer.headers().get("profile-web-page-url").is_some_and(|v| v.to_str().unwrap() == primary)
    })
    .await;
    let answer = plain.get(&bob_main).header("user-agent", "Happ/1.0").send().await.unwrap();
    let announce = answer.headers()["announce"].to_str().unwrap().strip_prefix("base64:").unwrap().to_owned();
    let announce = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, announce).unwrap();
    assert_eq!(String::from_utf8(announce).unwrap(), format!("This link moved: {primary}"));
    let clash = plain.get(&bob_main).header("user-agent", "clash-verge/v2.0").send().await.unwrap();
    assert!(clash.text().await.unwrap().starts_with(&format!("#SUBSCRIBED {primary}\n")));
    let page = plain
        .get(&bob_main)
        .header(
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
        )
        .send();
    let page = page.await.unwrap().text().await.unwrap();
    assert!(page.contains("This link moved.") && page.contains(&primary), "{page}");

    // A retired domain sends every fetch to the new link (308): every open-source app
    // follows it (none keeps the new address, so the redirect must stay up). On the Worker,
    // which reads the owner's settings at most once a minute.
    let change = json!({ "state": "retired" });
    api.ok(&control, reqwest::Method::PATCH, &format!("/edges/{worker_id}"), Some(change)).await;
    // A new user's link: every fetch counts against a link's hourly limit (60), so the
    // Worker is asked every 3 s for a minute and a half, and not with links fetched above.
    let frank = api.post(&control, "/users", json!({ "name": "frank" })).await;
    let primary = frank["link"].as_str().unwrap().to_owned();
    let frank_worker = format!("{}/worker-links/{}", worker.url, primary.rsplit('/').next().unwrap());
    let manual = hearth_tests::http().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let started = Instant::now();
    loop {
        let answer = manual.get(&frank_worker).header("user-agent", "SFA/1.12.0").send().await.unwrap();
        if answer.status() == StatusCode::PERMANENT_REDIRECT {
            assert_eq!(answer.headers()["location"].to_str().unwrap(), primary);
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "the retired domain never redirected");
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let followed = body(&plain, &frank_worker).await.expect("an app following the redirect gets its profile");
    assert_eq!(Some(followed), body(&plain, &primary).await);

    // The Worker is removed: it gets nothing more; the others do.
    api.ok(&control, reqwest::Method::DELETE, &format!("/edges/{worker_id}"), None).await;
    let erin = api.post(&control, "/users", json!({ "name": "erin" })).await;
    let erin_links = links(&api, &control, erin["id"].as_u64().unwrap()).await;
    assert_eq!(erin_links.len(), 2, "no link at a removed edge: {erin_links:?}");
    eventually("erin served by the edges that remain", Duration::from_secs(20), || async {
        same_everywhere(&plain, &erin_links, &["main", "mirror"]).await
    })
    .await;
    let token = erin_links[0].1.rsplit('/').next().unwrap();
    let at_worker = format!("{}/worker-links/{token}", worker.url);
    assert_eq!(plain.get(&at_worker).send().await.unwrap().status(), StatusCode::NOT_FOUND, "nothing more pushed");
    let listed = dir.cli(&["edge", "list"]).unwrap();
    assert!(listed.contains("mirror") && !listed.contains("worker"), "{listed}");
    control.stop().unwrap();
}

/// The edges a node's held set lists, by URL.
fn listed_edges(state: &std::path::Path) -> Vec<String> {
    use hearth_shared::envelope::{Envelope, Kind};
    let Ok(bytes) = std::fs::read(state.join("creds.envelope")) else { return Vec::new() };
    let envelope = Envelope::decode(&bytes, Kind::CredentialSet.max_len()).unwrap();
    let set = hearth_shared::wire::CredentialSet::decode(&envelope.body).unwrap();
    set.edges().iter().map(|edge| edge.url.clone()).collect()
}

/// A node gets the list of edges signed in its set; when control and the first edge are
/// gone it pulls from the second (a user added meanwhile can connect) and leaves its usage
/// reports there, which control collects when it is back, counted once.
#[tokio::test]
async fn a_node_falls_back_to_the_second_edge_when_control_and_the_first_are_gone() {
    use hearth_tests::node::{NodeProcess, ProxyClient, fetch_eventually, http_server, profile_outbound};
    let temp = tempfile::tempdir().unwrap();
    let dir = ControlDir::init(&temp.path().join("control")).unwrap();
    let main = EdgeProcess::start(Backend::Native, &temp.path().join("main.db"), &dir.edge_vars().unwrap()).unwrap();
    let mirror_vars = own_edge_vars(&dir, "mirror").unwrap();
    let mirror = EdgeProcess::start(Backend::Native, &temp.path().join("mirror.db"), &mirror_vars).unwrap();
    let env = [("HEARTH_EDGE_URL", main.url.clone()), ("HEARTH_LISTEN", format!("127.0.0.1:{}", free_port().unwrap()))];
    let control = ControlProcess::start(&dir, &env).unwrap();
    let http = dir.client().unwrap();
    let plain = hearth_tests::http().build().unwrap();
    let api = Api { token: control.setup(&http, "admin").await.unwrap(), http };
    let state = temp.path().join("node");
    control.enroll_node(&api.http, &api.token, &state).await.unwrap();
    let body = json!({
        "name": "mirror",
        "url": mirror.url,
        "api_prefix": mirror_vars[2].1,
        "push_token": mirror_vars[1].1,
        "link_base": format!("{}/mirror-links", mirror.url),
    });
    api.post(&control, "/edges", body).await;
    let alice = api.post(&control, "/users", json!({ "name": "alice" })).await;
    let node = NodeProcess::start(&state).unwrap();
    eventually("the node holds the list of edges", Duration::from_secs(30), || async {
        listed_edges(&state) == [main.url.clone(), mirror.url.clone()]
    })
    .await;

    // While the node is down, bob is added; then control and the first edge go away.
    node.stop().unwrap();
    let bob = api.post(&control, "/users", json!({ "name": "bob" })).await;
    eventually("bob at both edges", Duration::from_secs(20), || async {
        let status = api.get(&control, "/status").await;
        status["edge"]["pending"] == 0
    })
    .await;
    control.stop().unwrap();
    main.stop().unwrap();

    // The node starts with neither: it pulls from the mirror and lets bob in.
    let node = NodeProcess::start(&state).unwrap();
    let bob_link = links_at_mirror(&bob, &mirror.url);
    let client = ProxyClient::sing_box(profile_outbound(&bob_link).await.unwrap()).unwrap();
    let bytes: Vec<u8> = (0..(256u32 << 10)).map(|i| (i % 251) as u8).collect();
    let web = http_server(bytes.clone()).await.unwrap();
    let got = fetch_eventually(&client, web).await.unwrap();
    assert!(got == bytes, "bob's bytes through the node that pulled from the mirror");

    // Its usage waits at the mirror for control.
    let queued = || async {
        let drain = plain
            .get(format!("{}/{}/usage?after=0", mirror.url, mirror_vars[2].1))
            .bearer_auth(&mirror_vars[1].1)
            .send()
            .await
            .unwrap();
        let drain: hearth_shared::wire::UsageDrain =
            hearth_shared::wire::decode(&drain.bytes().await.unwrap(), "drain").unwrap();
        drain.reports.len()
    };
    eventually("the node's usage left at the mirror", Duration::from_secs(30), || async { queued().await > 0 }).await;

    // Control comes back (the first edge does not): it collects the usage from the mirror.
    let control = ControlProcess::start(&dir, &env).unwrap();
    let id = bob["id"].as_u64().unwrap();
    eventually("bob's traffic counted by control", Duration::from_secs(30), || async {
        let user = api.get(&control, &format!("/users/{id}")).await;
        user["used_down"].as_u64().unwrap() >= bytes.len() as u64
    })
    .await;
    let user = api.get(&control, &format!("/users/{id}")).await;
    assert!(user["used_down"].as_u64().unwrap() < bytes.len() as u64 + 4096, "counted once: {user}");
    drop(alice);
    node.stop().unwrap();
    control.stop().unwrap();
}

/// A user's link at the mirror (from the links control answered with).
fn links_at_mirror(user: &Value, mirror: &str) -> String {
    user["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["link"].as_str().unwrap().to_owned())
        .find(|link| link.starts_with(mirror))
        .unwrap()
}

/// Control's state archive, sealed into a file and sent from it in pieces with its length said
/// first, reaches a Worker edge (workerd) whole: it opens with the recovery key and holds the
/// users made before it, at every edge alike.
#[tokio::test]
async fn the_archive_sent_from_its_file_reaches_a_worker_edge_whole() {
    let temp = tempfile::tempdir().unwrap();
    let env = [("HEARTH_ARCHIVE_AFTER_SECS", "1".to_owned())];
    let WithEdge { dir, main, control, api, .. } = WithEdge::start_with(temp.path(), &env).await.unwrap();
    let worker = hearth_tests::control::add_worker_edge(&api, &control, &dir, &temp.path().join("worker"), "worker")
        .await
        .unwrap();
    for name in ["alice", "bob", "carol"] {
        api.post(&control, "/users", json!({ "name": name })).await;
    }
    let at_main = dir.archive_holding(&main.url, "SELECT count(*) FROM users", 3).await.unwrap();
    let vars = own_edge_vars(&dir, "worker").unwrap();
    let started = Instant::now();
    let at_worker = loop {
        let archive = dir.archive_at(&worker.url, &vars[2].1, &vars[1].1).await.unwrap();
        if let Some(archive) = archive.filter(|a| a.version >= at_main.version) {
            break archive;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the Worker never got the archive");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(at_worker.number("SELECT count(*) FROM users").await.unwrap(), 3);
    if at_worker.version == at_main.version {
        assert_eq!(at_worker.database, at_main.database, "one archive, the same at both edges");
    }
    control.stop().unwrap();
}
