//! Other panels' users moving in through the API: a JSON import all or nothing, with their
//! passwords and old subscription paths, and 3x-ui, Marzban and PasarGuard databases uploaded
//! to the panel, previewed, then imported.

use super::*;

#[tokio::test]
async fn users_move_in_with_their_passwords_and_old_paths_and_an_import_is_all_or_nothing() {
    let client = Client::signed_in(false).await;
    enroll(&client, json!(["default"])).await;
    client.post("/users", json!({ "name": "resident" })).await;
    let resident_password = {
        let link = client.get("/users/1/link").await.json()["link"].as_str().unwrap().to_owned();
        snapshot_of(client.app(), &link).await.unwrap().credential
    };
    let document = json!({
        "format": "hearth-users",
        "version": 1,
        "source": "3x-ui",
        "users": [
            { "id": "alice@home", "name": "alice", "password": "alice-hy2-pass", "quota": 10_737_418_240u64,
              "used_up": 1000, "used_down": 2000, "expires_at": 4_102_444_800u64, "reset": "monthly",
              "aliases": ["/sub/alice123", "/json/alice123"], "telegram_id": 4242 },
            { "id": "bob@home", "name": "bob", "days_from_first_use": 30, "enabled": false },
            { "id": "copycat", "name": "copycat", "password": "alice-hy2-pass" },
            { "id": "squatter", "name": "squatter", "password": resident_password },
            { "id": "climber", "name": "climber", "password": "x-pass", "aliases": ["/sub/../etc"] },
            { "id": "resident-again", "name": "resident", "password": "other-pass" },
        ],
    });
    let users_before = client.get("/users").await.json()["total"].clone();
    // A dry run says what would happen and changes nothing.
    let dry = client.post("/import?source=hearth&dry_run=true", document.clone()).await;
    assert_eq!(dry.status, StatusCode::OK, "{}", String::from_utf8_lossy(&dry.body));
    let dry = dry.json();
    assert_eq!(dry["dry_run"], true);
    let names: Vec<&str> = dry["imported"].as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alice", "bob"]);
    let reasons: Vec<(String, String)> = dry["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap().to_owned(), s["reason"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    assert!(reasons[0].0 == "copycat" && reasons[0].1.contains("another user's"), "{reasons:?}");
    assert!(reasons[1].0 == "squatter" && reasons[1].1.contains("another user's"), "{reasons:?}");
    assert!(reasons[2].0 == "climber" && reasons[2].1.contains("an alias is a path under a folder"), "{reasons:?}");
    // Named as people know it, with its id at the source beside it (issue 47, 8).
    assert!(reasons[3].0 == "resident (resident-again)" && reasons[3].1.contains("already exists"), "{reasons:?}");
    assert_eq!(client.get("/users").await.json()["total"], users_before, "a dry run keeps nothing");

    // Bad documents: a clear error, nothing changed.
    for (body, code) in [
        (json!({ "format": "hearth-users", "version": 9, "users": [] }), "unknown_version"),
        (json!({ "format": "marzban", "version": 1, "users": [] }), "bad_document"),
        (json!({ "format": "hearth-users", "version": 1, "users": [{ "name": "no id" }] }), "bad_document"),
        (json!([1, 2, 3]), "bad_document"),
    ] {
        let answer = client.post("/import?source=hearth", body).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST);
        assert_eq!(answer.json()["error"]["code"], code, "{}", String::from_utf8_lossy(&answer.body));
    }
    let unknown = client.post("/import?source=nowhere", document.clone()).await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);

    let done = client.post("/import?source=hearth", document.clone()).await.json();
    assert_eq!(done["imported"].as_array().unwrap().len(), 2);
    let alice_id = done["imported"][0]["user"].as_u64().unwrap();
    let alice = client.get(&format!("/users/{alice_id}")).await.json();
    assert_eq!(
        (alice["quota"].as_u64(), alice["used_up"].as_u64(), alice["reset"].as_str()),
        (Some(10_737_418_240), Some(1000), Some("monthly"))
    );
    let bob = client.get(&format!("/users/{}", done["imported"][1]["user"])).await.json();
    assert_eq!((bob["enabled"].as_bool(), bob["duration_days"].as_u64()), (Some(false), Some(30)));
    // Alice's password is the one her apps hold, in her profile and in the nodes' sets.
    let link = client.get(&format!("/users/{alice_id}/link")).await.json()["link"].as_str().unwrap().to_owned();
    let snapshot = snapshot_of(client.app(), &link).await.unwrap();
    assert_eq!(snapshot.credential, "alice-hy2-pass");
    // Her old paths are served like her link (control serves links itself here).
    for path in ["/sub/alice123", "/sub/alice123/", "/json/alice123"] {
        let old =
            client.send(Method::GET, &format!("{path}?format=mihomo"), None, &[("user-agent", "mihomo/1.19")]).await;
        assert_eq!(old.status, StatusCode::OK, "{path}");
        assert!(String::from_utf8(old.body).unwrap().contains("alice-hy2-pass"), "{path}");
    }
    let wrong = client.send(Method::GET, "/sub/alice124", None, &[]).await;
    assert_eq!(wrong.body, hearth_shared::render::DECOY_BODY);
    let aliases = client.get(&format!("/users/{alice_id}/aliases")).await.json();
    assert_eq!(aliases["aliases"].as_array().unwrap().len(), 2);
    assert_eq!(aliases["aliases"][0]["source"], "3x-ui");

    // Run again: nothing changes.
    let again = client.post("/import?source=hearth", document.clone()).await.json();
    assert_eq!((again["imported"].as_array().unwrap().len(), again["unchanged"].as_u64()), (0, Some(2)));

    // The export is the same format, passwords, links and aliases included, and reads back.
    let export = client.get("/export").await.json();
    assert_eq!((export["format"].as_str(), export["version"].as_u64()), (Some("hearth-users"), Some(1)));
    let exported = export["users"].as_array().unwrap().iter().find(|u| u["name"] == "alice").unwrap().clone();
    assert_eq!(exported["password"], "alice-hy2-pass");
    assert_eq!(exported["id"], "alice@home");
    assert_eq!(exported["link"].as_str(), link.rsplit('/').next());
    assert_eq!(exported["aliases"], json!(["/json/alice123", "/sub/alice123"]));
    // Her monthly cycle and her own Telegram chat travel with her.
    let next_reset = crate::clock::next_reset(hearth_shared::wire::ResetStrategy::Monthly, now());
    assert_eq!((exported["next_reset"].as_u64(), &exported["telegram_id"]), (Some(next_reset), &json!(4242)));
    let read_back = crate::import::json::read(export.to_string().as_bytes()).unwrap();
    let alice = read_back.users.iter().find(|u| u.name == "alice").unwrap();
    assert_eq!((alice.next_reset, alice.telegram_id), (next_reset, Some(4242)));
    // A next reset no schedule has (beyond a year, past what SQLite keeps) is dropped and
    // said; the user still comes.
    let far = json!({ "format": "hearth-users", "version": 1, "source": "script", "users": [
        { "id": "far", "name": "far", "reset": "monthly", "next_reset": u64::MAX } ] });
    let answer = client.post("/import?source=hearth&dry_run=true", far).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    let changed = answer.json()["imported"][0]["changed"].clone();
    assert_eq!(changed, json!(["its next reset was more than a year away: its cycle counts from the import"]));

    // Retiring an alias: the decoy from then on.
    let retired = client
        .send(Method::DELETE, &client.admin(&format!("/users/{alice_id}/aliases?path=/json/alice123")), None, &[])
        .await;
    assert_eq!(retired.status, StatusCode::OK, "{}", String::from_utf8_lossy(&retired.body));
    let gone = client.send(Method::GET, "/json/alice123", None, &[]).await;
    assert_eq!(gone.body, hearth_shared::render::DECOY_BODY);
    let missing = client
        .send(Method::DELETE, &client.admin(&format!("/users/{alice_id}/aliases?path=/json/alice123")), None, &[])
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    // Deleting the user takes its aliases along.
    client.send(Method::DELETE, &client.admin(&format!("/users/{alice_id}")), None, &[]).await;
    let gone = client.send(Method::GET, "/sub/alice123", None, &[]).await;
    assert_eq!(gone.body, hearth_shared::render::DECOY_BODY);
}

#[tokio::test]
async fn a_3x_ui_database_uploaded_to_the_panel_is_previewed_then_imported() {
    let client = Client::signed_in(false).await;
    let db =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/import/3x-ui/x-ui-v2.9.4.db")).unwrap();
    let upload = |path: String, body: Vec<u8>| {
        let client = &client;
        async move {
            let request = Request::post(client.admin(&path))
                .header(header::COOKIE, format!("{}={}", crate::auth::COOKIE, client.cookie.as_deref().unwrap()))
                .header(header::CONTENT_TYPE, "application/octet-stream")
                .body(HttpBody::from(body))
                .unwrap();
            client.raw(request).await
        }
    };
    let preview = upload("/import?source=3x-ui&dry_run=true".into(), db.clone()).await;
    assert_eq!(preview.status, StatusCode::OK, "{}", String::from_utf8_lossy(&preview.body));
    let preview = preview.json();
    let names: Vec<&str> =
        preview["imported"].as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alice", "bob", "carol", "erin"]);
    assert_eq!(preview["skipped"].as_array().unwrap().len(), 2);
    assert_eq!(client.get("/users").await.json()["total"], 0);
    // The report says what came over changed, per user, and what became of every field.
    let changed = |name: &str| -> Vec<String> {
        let user = preview["imported"].as_array().unwrap().iter().find(|u| u["name"] == name).unwrap();
        user["changed"].as_array().map_or_else(Vec::new, |c| c.iter().map(|c| c.as_str().unwrap().to_owned()).collect())
    };
    assert!(changed("alice").is_empty(), "{:?}", changed("alice"));
    let carol = changed("carol");
    assert!(carol.iter().any(|c| c == "its note was cut to 1000 bytes (Hearth's most)"), "{carol:?}");
    assert!(carol.iter().any(|c| c.contains("renewed it for 7 days")), "{carol:?}");
    assert!(changed("erin").iter().any(|c| c.contains("bob's too")), "{:?}", changed("erin"));
    let fields: Vec<(&str, &str)> = preview["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["field"].as_str().unwrap(), f["fate"].as_str().unwrap()))
        .collect();
    assert!(fields.contains(&("limitIp", "kept")) && fields.contains(&("reset", "mapped")), "{fields:?}");
    assert!(fields.iter().any(|(_, fate)| *fate == "dropped"), "{fields:?}");
    // Not a database: a clear error, nothing changed.
    let wrong = upload("/import?source=3x-ui".into(), b"SQLite format 3\0 but not really".to_vec()).await;
    assert_eq!(wrong.status, StatusCode::BAD_REQUEST);
    assert_eq!(wrong.json()["error"]["code"], "bad_source_file");
    let unknown = upload("/import?source=xui".into(), db.clone()).await;
    assert!(unknown.json()["error"]["message"].as_str().unwrap().contains("one of hearth, 3x-ui, remnawave"));
    // A panel read over its API: one that does not answer is a clear error.
    let nowhere = client
        .post("/import?source=remnawave&dry_run=true", json!({ "url": "http://127.0.0.1:9", "token": "t" }))
        .await;
    assert_eq!(nowhere.status, StatusCode::BAD_REQUEST);
    assert!(nowhere.json()["error"]["message"].as_str().unwrap().contains("did not answer"));
    let done = upload("/import?source=3x-ui".into(), db).await.json();
    assert_eq!(done["imported"].as_array().unwrap().len(), 4);
    let users = client.get("/users").await.json();
    assert_eq!(users["total"], 4);
    let alice = done["imported"][0]["user"].as_u64().unwrap();
    let aliases = client.get(&format!("/users/{alice}/aliases")).await.json();
    assert_eq!(aliases["aliases"].as_array().unwrap().len(), 3, "{aliases}");
}

#[tokio::test]
async fn marzban_and_pasarguard_databases_uploaded_to_the_panel() {
    let client = Client::signed_in(false).await;
    let fixture = |name: &str| {
        std::fs::read(format!("{}/../tests/fixtures/import/marzban/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    };
    let upload = |path: &'static str, body: Vec<u8>| {
        let client = &client;
        async move {
            let request = Request::post(client.admin(path))
                .header(header::COOKIE, format!("{}={}", crate::auth::COOKIE, client.cookie.as_deref().unwrap()))
                .header(header::CONTENT_TYPE, "application/octet-stream")
                .body(HttpBody::from(body))
                .unwrap();
            client.raw(request).await
        }
    };
    // A MySQL dump of Marzban: users with new passwords (Marzban has no Hysteria2).
    let preview = upload("/import?source=marzban&dry_run=true", fixture("marzban-v0.8.4.mysqldump.sql")).await;
    assert_eq!(preview.status, StatusCode::OK, "{}", String::from_utf8_lossy(&preview.body));
    let preview = preview.json();
    assert_eq!(preview["imported"].as_array().unwrap().len(), 3, "{preview}");
    assert!(preview["imported"].as_array().unwrap().iter().all(|u| u["password_kept"] == false));
    // The wrong panel's database, or a broken dump: a clear error, nothing changed.
    let wrong = upload("/import?source=marzban", fixture("pasarguard-v5.2.1.sqlite3")).await;
    assert_eq!(wrong.status, StatusCode::BAD_REQUEST);
    assert!(wrong.json()["error"]["message"].as_str().unwrap().contains("import it as pasarguard"));
    let mut broken = fixture("marzban-v0.8.4.mysqldump.sql");
    let cut = broken.windows(20).position(|w| w == b"INSERT INTO `users` ").unwrap() + 60;
    broken.truncate(cut);
    let broken = upload("/import?source=marzban", broken).await;
    assert_eq!(broken.json()["error"]["code"], "bad_source_file");
    assert_eq!(client.get("/users").await.json()["total"], 0);
    // PasarGuard's SQLite file: passwords kept.
    let done = upload("/import?source=pasarguard", fixture("pasarguard-v5.2.1.sqlite3")).await.json();
    let imported = done["imported"].as_array().unwrap();
    assert_eq!(imported.len(), 3, "{done}");
    assert!(imported.iter().all(|u| u["password_kept"] == true));
    assert_eq!(client.get("/users").await.json()["total"], 3);
    // Their API, when it does not answer: a clear error.
    let nowhere = client
        .post("/import?source=pasarguard&dry_run=true", json!({ "url": "http://127.0.0.1:9", "token": "t" }))
        .await;
    assert!(nowhere.json()["error"]["message"].as_str().unwrap().contains("did not answer"));
}
