//! Admins and their roles: every route refuses what a role (or a token's scope) may not do,
//! and a reseller reaches only their own users, within their limits.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use super::{Answer, Client, cookie_of};
use crate::app::now;
use crate::auth::{Role, Scope};

const PASSWORD: &str = "a long password";
/// An id no user, token, session or admin has: a route that lets the asker in answers 404 or
/// 400 for it, never 403.
const NOBODY: &str = "999999";

impl Client {
    async fn delete(&self, path: &str) -> super::Answer {
        self.send(Method::DELETE, &self.admin(path), None, &[]).await
    }

    /// Another client on the same control, signed in as `login`.
    pub(super) async fn as_admin(&self, login: &str) -> Client {
        let answer = self.post("/login", json!({ "login": login, "password": PASSWORD })).await;
        assert_eq!(answer.status, StatusCode::OK, "{login}: {}", String::from_utf8_lossy(&answer.body));
        Client { control: self.control.clone(), cookie: Some(cookie_of(&answer.headers)), bearer: None }
    }

    /// Another client on the same control, with a token of `self`'s of `scope`.
    async fn token_of(&self, scope: &str) -> Client {
        let answer = self.post("/tokens", json!({ "name": format!("{scope} token"), "scope": scope })).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&answer.body));
        let token = answer.json()["token"].as_str().unwrap().to_owned();
        Client { control: self.control.clone(), cookie: None, bearer: Some(token) }
    }

    async fn add_admin(&self, login: &str, role: &str, extra: Value) -> Value {
        let mut body = json!({ "login": login, "role": role, "password": PASSWORD });
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let answer = self.post("/admins", body).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&answer.body));
        answer.json()
    }
}

/// What the description of a call says it needs (the gate the API applies before a body is
/// read: the handlers' own checks must agree with it).
use crate::api::request::may;

/// A body the call takes: its schema's required fields, each of a plausible value.
fn body_for(doc: &Value, operation: &Value) -> Value {
    let resolve = |schema: &Value| -> Value {
        match schema["$ref"].as_str() {
            Some(path) => doc.pointer(path.trim_start_matches('#')).cloned().unwrap(),
            None => schema.clone(),
        }
    };
    let schema = resolve(&operation["requestBody"]["content"]["application/json"]["schema"]);
    let mut body = serde_json::Map::new();
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap();
        let field = resolve(&schema["properties"][name]);
        // A type may be a list (`["integer", "null"]`): its first.
        let kind = field["type"].as_str().or_else(|| field["type"][0].as_str());
        let value = match (field["enum"].get(0), kind) {
            (Some(first), _) => first.clone(),
            (None, Some("integer")) => json!(1),
            (None, Some("boolean")) => json!(false),
            (None, Some("array")) => json!([]),
            (None, Some("object")) => json!({}),
            _ => json!("some text, long enough"),
        };
        body.insert(name.to_owned(), value);
    }
    Value::Object(body)
}

#[tokio::test]
async fn every_route_refuses_what_the_role_or_the_token_may_not_do() {
    let owner = Client::signed_in(false).await;
    assert_eq!(owner.post("/groups", json!({ "name": "sold" })).await.status, StatusCode::CREATED);
    for (login, role) in [("ada", "admin"), ("otto", "operator"), ("rudy", "read-only"), ("rita", "reseller")] {
        let extra = if role == "reseller" { json!({ "groups": ["sold"] }) } else { json!({}) };
        owner.add_admin(login, role, extra).await;
    }
    // Each role signed in, and with a token of each scope it may have.
    let mut askers = Vec::new();
    for (login, role) in [
        ("", Role::Owner),
        ("ada", Role::Admin),
        ("otto", Role::Operator),
        ("rudy", Role::ReadOnly),
        ("rita", Role::Reseller),
    ] {
        let session = if login.is_empty() {
            Client { control: owner.control.clone(), cookie: owner.cookie.clone(), bearer: None }
        } else {
            owner.as_admin(login).await
        };
        for scope in [Scope::Read, Scope::Users, Scope::Operate, Scope::Admin] {
            if scope <= role.scope() {
                askers.push((role, scope, false, session.token_of(scope.as_str()).await));
            } else {
                let refused = session.post("/tokens", json!({ "name": "more", "scope": scope.as_str() })).await;
                assert_eq!((refused.status, refused.code().as_str()), (StatusCode::BAD_REQUEST, "bad_scope"));
            }
        }
        askers.push((role, role.scope(), true, session));
    }

    let doc: Value = serde_json::from_str(crate::api::admin::OPENAPI).unwrap();
    let mut calls: Vec<(&String, &String, &Value)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        // Signing in and out are not a role's to be refused.
        .filter(|(path, _)| !["/setup", "/logout"].contains(&path.as_str()) && !path.starts_with("/login"))
        .flat_map(|(path, methods)| methods.as_object().unwrap().iter().map(move |(m, op)| (path, m, op)))
        .collect();
    // Ending one's other sessions comes last, signed-in askers first (an owner's token ends the
    // owner's sessions).
    calls.sort_by_key(|(path, method, _)| (path.as_str(), method.as_str()) == ("/sessions", "delete"));
    let mut checked = 0;
    for (path, method, operation) in calls {
        let last = (path.as_str(), method.as_str()) == ("/sessions", "delete");
        {
            let description = operation["description"].as_str().unwrap();
            let mut uri = path.replace("{id}", NOBODY).replace("{key}", &"0".repeat(32)).replace("{version}", NOBODY);
            let query: Vec<String> = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query" && p["required"] == true)
                .map(|p| {
                    format!(
                        "{}={}",
                        p["name"].as_str().unwrap(),
                        p["schema"]["enum"].get(0).and_then(Value::as_str).unwrap_or("x")
                    )
                })
                .collect();
            if !query.is_empty() {
                uri = format!("{uri}?{}", query.join("&"));
            }
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let body = operation.get("requestBody").map(|_| body_for(&doc, operation));
            let mut order: Vec<_> = askers.iter().collect();
            if last {
                order.sort_by_key(|(_, _, session, _)| !session);
            }
            for (role, scope, session, asker) in order {
                let answer = asker.send(method.clone(), &asker.admin(&uri), body.clone(), &[]).await;
                let what = format!("{method} {uri} as {role:?} ({scope:?}, session {session}): {}", answer.status);
                if may(description, *role, *scope, *session) {
                    assert_ne!(
                        answer.status,
                        StatusCode::FORBIDDEN,
                        "{what} {}",
                        String::from_utf8_lossy(&answer.body)
                    );
                } else {
                    assert_eq!(
                        answer.status,
                        StatusCode::FORBIDDEN,
                        "{what} {}",
                        String::from_utf8_lossy(&answer.body)
                    );
                }
                // Still signed in (a wrong password is a 401 of its own).
                assert_ne!(answer.code(), "unauthorized", "{what}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 70 * askers.len(), "{checked}");
    // The metrics text (outside the API's description) is a reader's.
    for (role, _, _, asker) in &askers {
        let answer =
            asker.send(Method::GET, &asker.admin("/metrics").replace("/api/metrics", "/metrics"), None, &[]).await;
        assert_eq!(answer.status == StatusCode::FORBIDDEN, *role == Role::Reseller, "{role:?}");
    }
}

#[tokio::test]
async fn a_reseller_reaches_only_their_users_within_their_limits() {
    let owner = Client::signed_in(false).await;
    for group in ["sold", "family"] {
        assert_eq!(owner.post("/groups", json!({ "name": group })).await.status, StatusCode::CREATED);
    }
    let gib = 1u64 << 30;
    let rita = owner
        .add_admin("rita", "reseller", json!({ "max_users": 3, "max_traffic": 10 * gib, "groups": ["sold"] }))
        .await;
    let family = owner.post("/users", json!({ "name": "grandma" })).await.json();
    let reseller = owner.as_admin("rita").await;

    // Their first user joins the groups they may use; a quota is needed under a traffic limit.
    let refused = reseller.post("/users", json!({ "name": "free" })).await;
    assert_eq!((refused.status, refused.code().as_str()), (StatusCode::BAD_REQUEST, "reseller_limit"));
    let first = reseller.post("/users", json!({ "name": "first", "quota": 6 * gib })).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&first.body));
    let first = first.json();
    assert_eq!(first["groups"], json!(["sold"]));
    let id = first["id"].as_u64().unwrap();
    // Not past the traffic they may give out, nor into a group not theirs.
    let over = reseller.post("/users", json!({ "name": "second", "quota": 5 * gib })).await;
    assert_eq!((over.status, over.code().as_str()), (StatusCode::BAD_REQUEST, "reseller_limit"));
    let grow = reseller.patch(&format!("/users/{id}"), json!({ "quota": 11 * gib })).await;
    assert_eq!(grow.code(), "reseller_limit");
    let elsewhere = reseller.post("/users", json!({ "name": "second", "quota": gib, "groups": ["family"] })).await;
    assert_eq!(elsewhere.code(), "reseller_limit");
    assert!(elsewhere.json()["error"]["message"].as_str().unwrap().contains("sold"));
    // Not past their number of users: a bulk create is all or none.
    let bulk = reseller.post("/users/bulk", json!({ "names": ["a", "b", "c"], "settings": { "quota": gib } })).await;
    assert_eq!(bulk.code(), "reseller_limit");
    let bulk = reseller.post("/users/bulk", json!({ "names": ["a", "b"], "settings": { "quota": gib } })).await;
    assert_eq!(bulk.status, StatusCode::CREATED);
    assert_eq!(reseller.post("/users", json!({ "name": "d", "quota": gib })).await.code(), "reseller_limit");

    // They see theirs only; another's user is not found, whatever the call.
    let list = reseller.get("/users").await.json();
    assert_eq!(list["total"], 3, "{list}");
    assert!(!list.to_string().contains("grandma"));
    let other = family["id"].as_u64().unwrap();
    for (method, path) in [
        (Method::GET, format!("/users/{other}")),
        (Method::GET, format!("/users/{other}/link")),
        (Method::GET, format!("/users/{other}/usage")),
        (Method::POST, format!("/users/{other}/disable")),
        (Method::POST, format!("/users/{other}/rotate")),
        (Method::DELETE, format!("/users/{other}")),
    ] {
        let body = (method == Method::POST).then(|| json!({}));
        let answer = reseller.send(method.clone(), &reseller.admin(&path), body, &[]).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{method} {path}");
    }
    assert_eq!(owner.get(&format!("/users/{other}")).await.json()["enabled"], true, "grandma is untouched");
    assert_eq!(reseller.get("/groups").await.json()["groups"].as_array().unwrap().len(), 1);
    assert_eq!(reseller.get(&format!("/users/{id}/link")).await.status, StatusCode::OK);

    // The owner cuts the limits back: what grows is refused, the rest still works.
    let cut = owner.patch(&format!("/admins/{}", rita["id"]), json!({ "max_users": 1, "max_traffic": gib })).await;
    assert_eq!(cut.status, StatusCode::OK);
    assert_eq!(cut.json()["users"], 3);
    assert_eq!(reseller.post(&format!("/users/{id}/disable"), json!({})).await.status, StatusCode::OK);
    assert_eq!(reseller.patch(&format!("/users/{id}"), json!({ "quota": gib })).await.status, StatusCode::OK);
    assert_eq!(reseller.patch(&format!("/users/{id}"), json!({ "quota": 2 * gib })).await.code(), "reseller_limit");
    let me = reseller.get("/me").await.json();
    assert_eq!((me["role"].as_str(), me["limits"]["users"].as_u64()), (Some("reseller"), Some(3)), "{me}");

    // A token of theirs reaches what they do, no more.
    let token = reseller.token_of("users").await;
    assert_eq!(token.get("/users").await.json()["total"], 3);
    assert_eq!(token.get(&format!("/users/{other}")).await.status, StatusCode::NOT_FOUND);
    assert_eq!(token.post(&format!("/users/{id}/enable"), json!({})).await.status, StatusCode::OK);

    // The audit log names them; removing them ends their sessions and tokens, their users stay.
    let audit = owner.get("/audit").await.json().to_string();
    assert!(audit.contains("admin rita") && audit.contains("token 1 (users token) of admin rita"), "{audit}");
    assert_eq!(owner.delete(&format!("/admins/{}", rita["id"])).await.status, StatusCode::NO_CONTENT);
    assert_eq!(reseller.get("/users").await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(token.get("/users").await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(owner.get("/users").await.json()["total"], 4);
}

/// A reseller's allowance bounds the traffic and time they sell, every way round (issue 46, 3):
/// resets by hand and by period and deleting and making a user again draw on the traffic
/// allowance; users over quota are slowed at most to the rate granted (cut off with none); no
/// user's time reaches past the days granted; the owner's own changes are never refused.
#[tokio::test]
async fn a_resellers_allowance_bounds_traffic_speed_and_time_every_way_round() {
    let owner = Client::signed_in(false).await;
    let app = owner.app().clone();
    let gib = 1u64 << 30;
    let rita = owner.add_admin("rita", "reseller", json!({ "max_traffic": 3 * gib, "max_days": 31 })).await;
    assert_eq!((rita["max_days"].as_u64(), rita["max_slow_speed"].is_null()), (Some(31), true), "{rita}");
    let reseller = owner.as_admin("rita").await;
    let made = reseller.post("/users", json!({ "name": "ann", "quota": gib, "days": 30 })).await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&made.body));
    let ann = made.json()["id"].as_u64().unwrap();
    let used = |user: u64, bytes: u64| {
        let app = app.clone();
        async move {
            app.db
                .write(move |tx| {
                    tx.execute("UPDATE users SET used_down = ?2 WHERE id = ?1", rusqlite::params![user, bytes])?;
                    Ok(())
                })
                .await
                .unwrap()
        }
    };
    let code = |answer: Answer| (answer.status, answer.code());
    let refused = (StatusCode::BAD_REQUEST, "reseller_limit".to_owned());

    // Time: no 100-year expiry, no endless user, no extension past 31 days; 30 days is fine.
    let far = now() + 100 * 365 * 86_400;
    assert_eq!(code(reseller.patch(&format!("/users/{ann}"), json!({ "expires_at": far })).await), refused);
    assert_eq!(code(reseller.patch(&format!("/users/{ann}"), json!({ "expires_at": 0 })).await), refused);
    assert_eq!(code(reseller.post(&format!("/users/{ann}/extend"), json!({ "days": 30 })).await), refused);
    let later = json!({ "name": "later", "quota": gib, "days": 365, "start_on_first_use": true });
    assert_eq!(code(reseller.post("/users", later).await), refused);
    assert_eq!(code(reseller.post("/users", json!({ "name": "forever", "quota": gib })).await), refused);

    // Speed: with a traffic allowance and no slowed rate granted, users over quota are cut off.
    let slow = json!({ "on_quota": "slow", "slow_speed": 2.0 });
    assert_eq!(code(reseller.patch(&format!("/users/{ann}"), slow.clone()).await), refused);
    owner.patch(&format!("/admins/{}", rita["id"]), json!({ "max_slow_speed": 1.0 })).await;
    assert_eq!(code(reseller.patch(&format!("/users/{ann}"), slow).await), refused);
    let ok = reseller.patch(&format!("/users/{ann}"), json!({ "on_quota": "slow", "slow_speed": 1.0 })).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", String::from_utf8_lossy(&ok.body));

    // Traffic, resets counted: ann used 1 GiB; a reset by hand gives 1 GiB more (2 of 3).
    used(ann, gib).await;
    assert_eq!(reseller.post(&format!("/users/{ann}/reset-traffic"), json!({})).await.status, StatusCode::OK);
    let rita_now = || async {
        let admins = owner.get("/admins").await.json();
        admins["admins"].as_array().unwrap().iter().find(|a| a["login"] == "rita").unwrap().clone()
    };
    assert_eq!(rita_now().await["spent"], gib);
    // Deleting a user who used 1 GiB and making one again: what she used stays counted.
    used(ann, gib).await;
    assert_eq!(reseller.delete(&format!("/users/{ann}")).await.status, StatusCode::NO_CONTENT);
    let again = json!({ "name": "ann", "quota": 2 * gib, "days": 30 });
    assert_eq!(code(reseller.post("/users", again).await), refused, "2 GiB used + 2 GiB is over 3");
    let bea = reseller.post("/users", json!({ "name": "bea", "quota": gib, "days": 30, "reset": "daily" })).await;
    assert_eq!(bea.status, StatusCode::CREATED);
    let bea = bea.json()["id"].as_u64().unwrap();
    // Now 3 GiB are given: another reset by hand has no room.
    used(bea, gib / 2).await;
    assert_eq!(code(reseller.post(&format!("/users/{bea}/reset-traffic"), json!({})).await), refused);
    // Nor has bea's daily reset: it is skipped, and the audit log says so.
    let reset_due = || {
        let app = app.clone();
        async move {
            let state = app.clone();
            app.db
                .write(move |tx| {
                    tx.execute("UPDATE users SET next_reset = ?2 WHERE id = ?1", rusqlite::params![bea, now() - 1])?;
                    crate::tasks::sweep(tx, &state, now(), true, false)
                })
                .await
                .unwrap();
        }
    };
    reset_due().await;
    assert_eq!(owner.get(&format!("/users/{bea}")).await.json()["used_down"], gib / 2, "not reset");
    let skipped = owner.get("/audit?action=user.reset_skipped").await.json();
    assert_eq!(skipped["entries"].as_array().unwrap().len(), 1, "{skipped}");
    // The owner grants more: the next reset goes through and counts.
    owner.patch(&format!("/admins/{}", rita["id"]), json!({ "max_traffic": 4 * gib })).await;
    reset_due().await;
    assert_eq!(owner.get(&format!("/users/{bea}")).await.json()["used_down"], 0);
    let rita_now = rita_now().await;
    assert_eq!((rita_now["spent"].as_u64(), rita_now["allotted"].as_u64()), (Some(2 * gib + gib / 2), Some(gib)));

    // The owner's own changes to a reseller's users are never refused.
    let long = json!({ "expires_at": far });
    assert_eq!(owner.patch(&format!("/users/{bea}"), long).await.status, StatusCode::OK);
}

/// A reseller cannot tell whether a name is used outside their own users (issue 46, 4): their
/// users' names are theirs alone, so a name another tenant holds is taken as any free one,
/// on a create, a bulk create and a rename; within their own it is refused as before. The
/// owner sees both, and a name two tenants share is given by its id on the command line.
#[tokio::test]
async fn a_reseller_learns_nothing_of_the_names_others_use() {
    let owner = Client::signed_in(false).await;
    let grandma = owner.post("/users", json!({ "name": "grandma" })).await.json();
    owner.add_admin("rita", "reseller", json!({})).await;
    owner.add_admin("sam", "reseller", json!({})).await;
    let (rita, sam) = (owner.as_admin("rita").await, owner.as_admin("sam").await);
    let made = rita.post("/users", json!({ "name": "Grandma" })).await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&made.body));
    assert_eq!(sam.post("/users", json!({ "name": "grandma" })).await.status, StatusCode::CREATED);
    let again = rita.post("/users", json!({ "name": "GRANDMA" })).await;
    assert_eq!((again.status, again.code().as_str()), (StatusCode::CONFLICT, "conflict"), "their own name, twice");
    let bulk = sam.post("/users/bulk", json!({ "names": ["ann", "bob"], "settings": {} })).await;
    assert_eq!(bulk.status, StatusCode::CREATED);
    let bulk = rita.post("/users/bulk", json!({ "names": ["ann", "bob"], "settings": {} })).await;
    assert_eq!(bulk.status, StatusCode::CREATED, "sam's names tell rita nothing");
    let bulk = rita.post("/users/bulk", json!({ "names": ["carl", "ann"], "settings": {} })).await;
    assert_eq!((bulk.status, bulk.code().as_str()), (StatusCode::CONFLICT, "names_taken"));
    assert_eq!(bulk.json()["error"]["names"], json!(["ann"]));
    let carl = rita.post("/users", json!({ "name": "carl" })).await.json();
    let renamed = rita.patch(&format!("/users/{}", carl["id"]), json!({ "name": "zoe" })).await;
    assert_eq!(renamed.status, StatusCode::OK);
    owner.post("/users", json!({ "name": "yan" })).await;
    let renamed = rita.patch(&format!("/users/{}", carl["id"]), json!({ "name": "yan" })).await;
    assert_eq!(renamed.status, StatusCode::OK, "the owner's name tells rita nothing");
    // The owner's own names are still one namespace.
    let taken = owner.post("/users", json!({ "name": "Grandma" })).await;
    assert_eq!(taken.code(), "conflict");
    let listed = owner.get("/users?q=grandma").await.json();
    assert_eq!(listed["total"], 3, "{listed}");
    // The command line names them by id where a name is shared.
    let app = owner.app().clone();
    let ambiguous = app.db.read(|c| crate::store::users::id_by_name(c, "grandma")).await.unwrap_err();
    assert!(ambiguous.to_string().contains("give one by its id"), "{ambiguous}");
    let id = grandma["id"].as_u64().unwrap();
    let by_id = app.db.read(move |c| crate::store::users::id_by_name(c, &format!("#{id}"))).await.unwrap();
    assert_eq!(by_id, id);
    // A user named like an id is found by that name first.
    let hashed = owner.post("/users", json!({ "name": format!("#{id}") })).await.json();
    let by_name = app.db.read(move |c| crate::store::users::id_by_name(c, &format!("#{id}"))).await.unwrap();
    assert_eq!(by_name, hashed["id"].as_u64().unwrap());
}

/// The role comes before the body (issue 46, 8): an admin who may not call a route is refused
/// 403 whatever they send, and learns nothing from its validation; one who may gets the body's
/// errors.
#[tokio::test]
async fn the_role_is_checked_before_the_body_is_read() {
    let owner = Client::signed_in(false).await;
    owner.add_admin("rudy", "read-only", json!({})).await;
    owner.add_admin("otto", "operator", json!({})).await;
    owner.add_admin("rita", "reseller", json!({})).await;
    let (rudy, otto, rita) = (owner.as_admin("rudy").await, owner.as_admin("otto").await, owner.as_admin("rita").await);
    let long = json!({ "name": "n".repeat(1000) });
    let code = |answer: Answer| (answer.status, answer.code());
    assert_eq!(code(rudy.post("/users", long.clone()).await), (StatusCode::FORBIDDEN, "forbidden".to_owned()));
    assert_eq!(code(rudy.post("/users", json!({ "nonsense": true })).await).0, StatusCode::FORBIDDEN);
    assert_eq!(code(otto.post("/users", long.clone()).await), (StatusCode::BAD_REQUEST, "too_long".to_owned()));
    assert_eq!(code(otto.post("/nodes", long.clone()).await).0, StatusCode::FORBIDDEN);
    assert_eq!(code(rita.patch("/settings", json!({ "edge_url": "ftp://x" })).await).0, StatusCode::FORBIDDEN);
    assert_eq!(code(otto.post("/admins", long).await), (StatusCode::FORBIDDEN, "owner_only".to_owned()));
    // Where links are served is the owner's alone, as the security notes say: an admin adds
    // no edge and moves no link base (the rest of Settings is theirs).
    owner.add_admin("ada", "admin", json!({})).await;
    let ada = owner.as_admin("ada").await;
    let edge = json!({ "name": "mine", "url": "https://edge.example", "api_prefix": "a".repeat(20), "push_token": "p".repeat(20) });
    assert_eq!(code(ada.post("/edges", edge).await), (StatusCode::FORBIDDEN, "owner_only".to_owned()));
    let moved = ada.patch("/settings", json!({ "edge_url": "https://edge.example" })).await;
    assert_eq!(code(moved), (StatusCode::FORBIDDEN, "owner_only".to_owned()));
    let profile = ada.patch("/settings", json!({ "device_policy": "refuse" })).await;
    assert_eq!(profile.status, StatusCode::OK, "{}", String::from_utf8_lossy(&profile.body));
}

/// An owner who resets an admin's password can end the admin's API tokens in the same step
/// (issue 46, 7): without it the tokens go on, with it they stop, and the audit says so.
#[tokio::test]
async fn a_password_reset_can_end_the_admins_tokens_too() {
    let owner = Client::signed_in(false).await;
    let otto = owner.add_admin("otto", "operator", json!({})).await;
    let session = owner.as_admin("otto").await;
    let token = session.token_of("users").await;
    let path = format!("/admins/{}", otto["id"]);
    // A new password alone: signed out, the token goes on.
    let reset = owner.patch(&path, json!({ "password": "another long password" })).await;
    assert_eq!(reset.status, StatusCode::OK);
    assert_eq!(session.get("/users").await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(token.get("/users").await.status, StatusCode::OK);
    // With end_tokens: the token ends too.
    let reset = owner.patch(&path, json!({ "password": "a third long password", "end_tokens": true })).await;
    assert_eq!(reset.status, StatusCode::OK);
    assert_eq!(token.get("/users").await.status, StatusCode::UNAUTHORIZED);
    let audit = owner.get("/audit?action=admin.update").await.json();
    assert_eq!(
        audit["entries"][0]["changes"],
        json!([{ "field": "password" }, { "field": "api_tokens", "from": 1, "to": 0 }])
    );
}

#[tokio::test]
async fn admins_are_the_owners_and_each_sees_their_own_sessions() {
    let owner = Client::signed_in(false).await;
    let ada = owner.add_admin("ada", "admin", json!({})).await;
    // Logins are one namespace, the owner's too; a weak password and a role of owner are refused.
    let taken = owner.post("/admins", json!({ "login": "OWNER", "role": "admin", "password": PASSWORD })).await;
    assert_eq!(taken.status, StatusCode::CONFLICT);
    let taken = owner.post("/admins", json!({ "login": "Ada", "role": "admin", "password": PASSWORD })).await;
    assert_eq!(taken.status, StatusCode::CONFLICT);
    let weak = owner.post("/admins", json!({ "login": "weak", "role": "admin", "password": "short" })).await;
    assert_eq!(weak.code(), "bad_password");
    let owned = owner.post("/admins", json!({ "login": "two", "role": "owner", "password": PASSWORD })).await;
    assert_eq!(owned.code(), "bad_role");
    let limits =
        owner.post("/admins", json!({ "login": "op", "role": "operator", "password": PASSWORD, "max_users": 3 })).await;
    assert_eq!(limits.code(), "not_a_reseller");
    let huge = json!({ "login": "big", "role": "reseller", "password": PASSWORD, "max_traffic": u64::MAX });
    assert_eq!(owner.post("/admins", huge).await.code(), "bad_limit", "past what is stored: a clear 400");
    let wrong = owner.post("/login", json!({ "login": "ada", "password": "not the password" })).await;
    assert_eq!(wrong.code(), "bad_login");

    // An admin's address is not the owner's: it never joins those exempt from strangers'
    // sign-in budget.
    let known = |client: &Client| {
        let app = client.app().clone();
        async move {
            app.db
                .read(|c| Ok(c.query_row("SELECT count(*) FROM known_addresses", [], |r| r.get::<_, i64>(0))?))
                .await
                .unwrap()
        }
    };
    let before = known(&owner).await;
    let elsewhere = owner.login_from("192.0.2.7", json!({ "login": "ada", "password": PASSWORD })).await;
    assert_eq!(elsewhere.status, StatusCode::OK);
    assert_eq!(known(&owner).await, before);

    let admin = owner.as_admin("ada").await;
    assert_eq!(admin.get("/me").await.json()["role"], "admin");
    // A full admin does everything but admin accounts.
    assert_eq!(admin.post("/nodes", json!({ "name": "n1", "host": "n1.example" })).await.status, StatusCode::CREATED);
    assert_eq!(admin.get("/admins").await.code(), "owner_only");
    // Sessions: an admin sees theirs, the owner everyone's and ends any.
    let theirs = admin.get("/sessions").await.json();
    assert_eq!(theirs["sessions"].as_array().unwrap().len(), 2, "{theirs}");
    assert_eq!(theirs["sessions"][0]["admin"], "ada");
    let all = owner.get("/sessions").await.json();
    let session = all["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["admin"] == "ada" && s["address"] != "192.0.2.7")
        .unwrap()["id"]
        .clone();
    let mine = all["sessions"].as_array().unwrap().iter().find(|s| s["admin"] == "owner").unwrap()["id"].clone();
    assert_eq!(admin.delete(&format!("/sessions/{mine}")).await.status, StatusCode::NOT_FOUND, "not theirs");
    assert_eq!(owner.delete(&format!("/sessions/{session}")).await.status, StatusCode::NO_CONTENT);
    assert_eq!(admin.get("/me").await.status, StatusCode::UNAUTHORIZED);

    // A new role signs them out; their token holds the new role's rights at most.
    let admin = owner.as_admin("ada").await;
    let token = admin.token_of("admin").await;
    assert_eq!(owner.get("/tokens").await.json()["tokens"][0]["admin"], "ada");
    let changed = owner.patch(&format!("/admins/{}", ada["id"]), json!({ "role": "read-only" })).await;
    assert_eq!(changed.json()["role"], "read-only");
    assert_eq!(admin.get("/me").await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(token.get("/me").await.json()["scope"], "read");
    assert_eq!(token.post("/users", json!({ "name": "x" })).await.status, StatusCode::FORBIDDEN);
    let audit = owner.get("/audit").await.json().to_string();
    assert!(audit.contains("admin ada") && audit.contains("admin.update"), "{audit}");
}

#[tokio::test]
async fn passkey_ceremonies_need_a_domain_a_session_and_a_good_answer() {
    // At an IP address (the default), passkeys are off, and say why.
    let here = Client::signed_in(false).await;
    assert_eq!(here.get("/passkeys").await.json()["available"], false);
    let off = here.post("/passkeys", json!({ "name": "laptop" })).await;
    assert_eq!(off.status, StatusCode::CONFLICT);
    assert!(off.json()["error"]["message"].as_str().unwrap().contains("public_url"));

    let owner = Client::signed_in_with(false, &[("HEARTH_PUBLIC_URL", "https://panel.example.net:8443")]).await;
    assert_eq!(owner.get("/passkeys").await.json()["available"], true);
    let started = owner.post("/passkeys", json!({ "name": "laptop" })).await.json();
    assert_eq!(started["options"]["publicKey"]["rp"]["id"], "panel.example.net", "{started}");
    assert_eq!(started["options"]["publicKey"]["user"]["name"], "owner");
    // Only a person signed in adds one; a token of the admin scope does not.
    let token = owner.token_of("admin").await;
    assert_eq!(token.post("/passkeys", json!({ "name": "x" })).await.code(), "session_only");
    // A sign-in's answer that is not a passkey of anyone's is refused as a failed sign-in, and
    // its ticket is spent.
    let ceremony = owner.post("/login/passkey", json!({})).await.json();
    let forged = json!({ "ticket": ceremony["ticket"], "credential": {
        "id": "AAAA", "rawId": "AAAA", "type": "public-key", "extensions": {},
        "response": { "authenticatorData": "AAAA", "clientDataJSON": "AAAA", "signature": "AAAA", "userHandle": null },
    }});
    let refused = owner.post("/login/passkey/finish", forged.clone()).await;
    assert_eq!((refused.status, refused.code().as_str()), (StatusCode::UNAUTHORIZED, "bad_passkey"));
    let again = owner.post("/login/passkey/finish", forged).await;
    assert_eq!(again.code(), "passkey_expired");
    assert_eq!(owner.app().counters.logins_failed.load(std::sync::atomic::Ordering::Relaxed), 1);
}
