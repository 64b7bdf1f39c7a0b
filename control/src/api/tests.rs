//! Handler tests on the router (`oneshot`), over a real SQLite file.

use std::sync::Arc;

use axum::body::Body as HttpBody;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use hearth_shared::envelope::{Audience, Envelope, Kind};
use hearth_shared::keys::{Role, SecretKey};
use hearth_shared::wire::{self, CredentialSet, Status, SubToken, UsageReport, UserUsage, stream};
use hearth_shared::{nodeauth, seal};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::app::{App, now};
use crate::testing::TestControl;

mod edges;
mod edits;
mod events;
mod identity;
mod import;
mod nodes;
mod releases;
mod roles;
mod routing;
mod sign_in;
mod spans;

use nodes::{
    CONTROL_HOST, enroll, node_get, node_request, node_signature, node_usage, presence_report, report, set_of,
};

struct Client {
    control: Arc<TestControl>,
    cookie: Option<String>,
    bearer: Option<String>,
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&self.body)))
    }
    fn code(&self) -> String {
        self.json()["error"]["code"].as_str().unwrap_or_default().to_owned()
    }
}

impl Client {
    fn new(edge: bool) -> Client {
        Client { control: Arc::new(TestControl::new(edge)), cookie: None, bearer: None }
    }

    fn app(&self) -> &Arc<App> {
        &self.control.app
    }

    fn admin(&self, path: &str) -> String {
        format!("/{}/api{path}", self.app().config.admin_prefix)
    }

    async fn raw(&self, request: Request<HttpBody>) -> Answer {
        let response = super::router(self.app().clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap().to_vec();
        Answer { status, headers, body }
    }

    async fn send(&self, method: Method, path: &str, body: Option<Value>, extra: &[(&str, &str)]) -> Answer {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(cookie) = &self.cookie {
            request = request.header(header::COOKIE, format!("{}={cookie}", crate::auth::COOKIE));
        }
        if let Some(bearer) = &self.bearer {
            request = request.header(header::AUTHORIZATION, format!("Bearer {bearer}"));
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        let request = match body {
            Some(body) => {
                request.header(header::CONTENT_TYPE, "application/json").body(HttpBody::from(body.to_string())).unwrap()
            }
            None => request.body(HttpBody::empty()).unwrap(),
        };
        self.raw(request).await
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(Method::GET, &self.admin(path), None, &[]).await
    }
    async fn post(&self, path: &str, body: Value) -> Answer {
        self.send(Method::POST, &self.admin(path), Some(body), &[]).await
    }
    async fn patch(&self, path: &str, body: Value) -> Answer {
        self.send(Method::PATCH, &self.admin(path), Some(body), &[]).await
    }

    /// Signs in (or tries to) from `ip`.
    async fn login_from(&self, ip: &str, body: Value) -> Answer {
        self.login_via(ip, &[], body).await
    }

    /// Signs in (or tries to) over a connection from `ip` carrying `headers` (a proxy's, say).
    async fn login_via(&self, ip: &str, headers: &[(&str, &str)], body: Value) -> Answer {
        let address = std::net::SocketAddr::new(ip.parse().unwrap(), 40_000);
        let mut request = Request::post(self.admin("/login")).header(header::CONTENT_TYPE, "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut request = request.body(HttpBody::from(body.to_string())).unwrap();
        request.extensions_mut().insert(axum::extract::ConnectInfo(crate::tls::ClientAddr(address)));
        self.raw(request).await
    }

    /// Runs setup and keeps the owner's session.
    async fn signed_in(edge: bool) -> Client {
        Client::signed_in_with(edge, &[]).await
    }

    /// As [`Client::signed_in`], with more settings (`HEARTH_*` name, value).
    async fn signed_in_with(edge: bool, settings: &[(&str, &str)]) -> Client {
        let mut client =
            Client { control: Arc::new(TestControl::with_env(edge, settings)), cookie: None, bearer: None };
        *client.app().setup_token.lock().unwrap() = Some("setup-token".into());
        let answer = client
            .post("/setup", json!({ "token": "setup-token", "login": "owner", "password": "a long password" }))
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
        client.cookie = Some(cookie_of(&answer.headers));
        client
    }
}

fn cookie_of(headers: &HeaderMap) -> String {
    let set = headers.get(header::SET_COOKIE).expect("a cookie").to_str().unwrap();
    for attribute in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "{set}");
    }
    set.split(';').next().unwrap().split_once('=').unwrap().1.to_owned()
}

#[tokio::test]
async fn setup_once_then_sign_in_with_lockout() {
    let mut client = Client::new(false);
    // Without a setup token (an owner exists, or the process never printed one): refused.
    let answer = client.post("/setup", json!({ "token": "x", "login": "owner", "password": "a long password" })).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    *client.app().setup_token.lock().unwrap() = Some("right".into());
    let answer =
        client.post("/setup", json!({ "token": "wrong", "login": "owner", "password": "a long password" })).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::FORBIDDEN, "bad_setup_token"));
    let answer = client.post("/setup", json!({ "token": "right", "login": "owner", "password": "short" })).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::BAD_REQUEST, "bad_password"));
    let answer =
        client.post("/setup", json!({ "token": "right", "login": "owner", "password": "a long password" })).await;
    assert_eq!(answer.status, StatusCode::OK);
    let answer =
        client.post("/setup", json!({ "token": "right", "login": "owner", "password": "a long password" })).await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "setup works once");

    // Wrong passwords: 401 nine times, whatever the login; the tenth locks the address.
    for i in 0..10 {
        let login = if i % 2 == 0 { "owner" } else { "someone" };
        let answer = client.post("/login", json!({ "login": login, "password": "not the password" })).await;
        assert_eq!((answer.status, answer.code().as_str()), (StatusCode::UNAUTHORIZED, "bad_login"));
        assert_eq!(answer.json()["tries_left"], 9 - i, "the sign-in page says how many tries are left");
    }
    let answer = client.post("/login", json!({ "login": "owner", "password": "a long password" })).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "locked even with the right password");
    assert!(answer.headers.contains_key(header::RETRY_AFTER));
    // Not the login: from elsewhere, the owner's login is checked (and refused) as before.
    let elsewhere = client.login_from("192.0.2.1", json!({ "login": "owner", "password": "not the password" })).await;
    assert_eq!(elsewhere.code(), "bad_login");
    client.app().lockouts.succeed(std::net::Ipv4Addr::UNSPECIFIED.into());
    // An unknown login is refused the same way.
    let answer = client.post("/login", json!({ "login": "nobody", "password": "a long password" })).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);

    let answer = client.post("/login", json!({ "login": "Owner", "password": "a long password" })).await;
    assert_eq!(answer.status, StatusCode::OK);
    client.cookie = Some(cookie_of(&answer.headers));
    assert_eq!(client.get("/me").await.json()["scope"], "admin");
    // Sign-ins are in the audit log with their address: the failed ones with the reason, never
    // the login typed (it may be a password typed in the wrong field).
    let audit = client.get("/audit").await.json();
    let entries = audit["entries"].as_array().unwrap();
    let failed: Vec<&Value> = entries.iter().filter(|e| e["action"] == "signin.failed").collect();
    assert_eq!(failed.len(), 12, "{audit}");
    assert!(failed.iter().all(|e| e["detail"] == "bad_login" && e["actor"] == ""), "{audit}");
    assert!(failed.iter().any(|e| e["target"] == "192.0.2.1"), "{audit}");
    assert!(!audit.to_string().contains("someone") && !audit.to_string().contains("nobody"), "{audit}");
    let signins: Vec<&Value> = entries.iter().filter(|e| e["action"] == "signin").collect();
    assert_eq!(signins.len(), 1, "{audit}");
    assert_eq!((&signins[0]["actor"], &signins[0]["target"]), (&json!("owner"), &json!("0.0.0.0")));
    assert_eq!(client.post("/logout", json!({})).await.status, StatusCode::OK);
    assert_eq!(client.get("/me").await.status, StatusCode::UNAUTHORIZED, "the session ended");
}

#[tokio::test]
async fn everything_outside_the_prefixes_is_the_decoy() {
    let client = Client::signed_in(false).await;
    for path in
        ["/", "/admin", "/api/users", "/s/not-a-token", &format!("/s/{}", SubToken::from_bytes([9; 32]).to_link_form())]
    {
        let answer = client.send(Method::GET, path, None, &[]).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(answer.body, hearth_shared::render::DECOY_BODY, "{path}");
        assert_eq!(answer.headers["server"], "nginx");
    }
    let anonymous = Client { control: Arc::new(TestControl::new(false)), cookie: None, bearer: None };
    let answer = anonymous.get("/users").await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::UNAUTHORIZED, "unauthorized"));
    assert_eq!(client.send(Method::GET, "/healthz", None, &[]).await.status, StatusCode::OK);
}

#[tokio::test]
async fn cross_site_requests_with_the_cookie_are_refused() {
    let client = Client::signed_in(false).await;
    let body = json!({ "name": "alice" });
    let path = client.admin("/users");
    let cross = client.send(Method::POST, &path, Some(body.clone()), &[("sec-fetch-site", "cross-site")]).await;
    assert_eq!((cross.status, cross.code().as_str()), (StatusCode::FORBIDDEN, "cross_site"));
    let foreign = client
        .send(Method::POST, &path, Some(body.clone()), &[("origin", "https://evil.example"), ("host", "panel")])
        .await;
    assert_eq!(foreign.status, StatusCode::FORBIDDEN);
    assert_eq!(client.get("/users").await.json()["total"], 0, "nothing was created");
    let same = client.send(Method::POST, &path, Some(body), &[("sec-fetch-site", "same-origin")]).await;
    assert_eq!(same.status, StatusCode::CREATED);
}

#[tokio::test]
async fn token_scopes() {
    let mut client = Client::signed_in(false).await;
    let mut tokens = std::collections::HashMap::new();
    for scope in ["read", "operate", "admin"] {
        let answer = client.post("/tokens", json!({ "name": scope, "scope": scope })).await;
        assert_eq!(answer.status, StatusCode::CREATED);
        let token = answer.json()["token"].as_str().unwrap().to_owned();
        assert!(token.starts_with("hth_"));
        tokens.insert(scope, token);
    }
    let listed = client.get("/tokens").await.json();
    assert!(!listed.to_string().contains(&tokens["read"]), "tokens are shown once");
    client.cookie = None;
    client.bearer = Some(tokens["read"].clone());
    assert_eq!(client.get("/users").await.status, StatusCode::OK);
    let denied = client.post("/users", json!({ "name": "bob" })).await;
    assert_eq!((denied.status, denied.code().as_str()), (StatusCode::FORBIDDEN, "forbidden"));
    client.bearer = Some(tokens["operate"].clone());
    assert_eq!(client.post("/users", json!({ "name": "bob" })).await.status, StatusCode::CREATED);
    assert_eq!(client.get("/tokens").await.status, StatusCode::FORBIDDEN);
    client.bearer = Some(tokens["admin"].clone());
    let id = client.get("/tokens").await.json()["tokens"][0]["id"].as_i64().unwrap();
    assert_eq!(
        client.send(Method::DELETE, &client.admin(&format!("/tokens/{id}")), None, &[]).await.status,
        StatusCode::NO_CONTENT
    );
    client.bearer = Some(tokens["read"].clone());
    assert_eq!(client.get("/users").await.status, StatusCode::UNAUTHORIZED, "a revoked token stops working");
    client.bearer = Some("hth_forged".into());
    assert_eq!(client.get("/users").await.status, StatusCode::UNAUTHORIZED);
    let audit = {
        client.bearer = Some(tokens["admin"].clone());
        client.get("/audit").await.json()
    };
    let text = audit.to_string();
    assert!(text.contains("token.create") && text.contains("user.create") && text.contains("token.revoke"), "{text}");
    for token in tokens.values() {
        assert!(!text.contains(token.as_str()), "no secret in the audit log");
    }
}

#[tokio::test]
async fn malformed_input_is_a_4xx_that_changes_nothing() {
    let client = Client::signed_in(true).await;
    let path = client.admin("/users");
    let not_json = client
        .raw(
            Request::post(&path)
                .header(header::COOKIE, format!("{}={}", crate::auth::COOKIE, client.cookie.as_ref().unwrap()))
                .header(header::CONTENT_TYPE, "application/json")
                .body(HttpBody::from("{\"name\": "))
                .unwrap(),
        )
        .await;
    assert_eq!(not_json.status, StatusCode::BAD_REQUEST);
    assert_eq!(not_json.code(), "bad_json");
    for (body, code) in [
        (json!({ "name": "" }), "bad_name"),
        (json!({ "name": "x", "bogus": 1 }), "bad_json"),
        (json!({ "name": "x", "reset": "hourly" }), "bad_reset"),
        (json!({ "name": "x", "days": 3, "expires_at": 5 }), "bad_expiry"),
        (json!({ "name": "x", "groups": ["nope"] }), "unknown_group"),
        (json!({ "name": "x", "quota": -1 }), "bad_json"),
    ] {
        let answer = client.post("/users", body.clone()).await;
        assert_eq!((answer.status, answer.code()), (StatusCode::BAD_REQUEST, code.to_owned()), "{body}");
    }
    // A bulk create with one bad name creates none of them.
    let answer = client.post("/users/bulk", json!({ "names": ["a", "b", "", "c"] })).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    // Names repeated in the list are named, whatever their case; so are names already taken.
    let answer = client.post("/users/bulk", json!({ "names": ["a", "b", "a", "Mom", "mom", "MOM", "c"] })).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::BAD_REQUEST, "duplicate_names"));
    assert_eq!(answer.json()["error"]["names"], json!(["a", "mom"]));
    assert_eq!(client.get("/users").await.json()["total"], 0);
    assert_eq!(client.get("/users").await.json()["total"], 0);
    let (streams, pending): (i64, u64) = client
        .app()
        .db
        .read(|c| {
            Ok((
                c.query_row("SELECT count(*) FROM streams", [], |r| r.get(0))?,
                crate::store::overview::overview(c, 0)?.pending,
            ))
        })
        .await
        .unwrap();
    assert_eq!((streams, pending), (0, 0), "nothing signed, nothing queued");
    assert_eq!(client.post("/users", json!({ "name": "Grandpa" })).await.status, StatusCode::CREATED);
    let answer = client.post("/users/bulk", json!({ "names": ["x", "grandpa"] })).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::CONFLICT, "names_taken"));
    assert_eq!(answer.json()["error"]["names"], json!(["Grandpa"]));
    let answer = client.post("/users", json!({ "name": "GRANDPA" })).await;
    assert_eq!(
        (answer.status, answer.code().as_str()),
        (StatusCode::CONFLICT, "conflict"),
        "one name whatever its case"
    );
    let other = client.post("/users", json!({ "name": "Nana" })).await.json();
    let renamed = client.patch(&format!("/users/{}", other["id"]), json!({ "name": "grandPA" })).await;
    assert_eq!(renamed.code(), "conflict");
    let same = client.patch(&format!("/users/{}", other["id"]), json!({ "name": "NANA" })).await;
    assert_eq!(same.status, StatusCode::OK, "a user's own name in another case is no conflict");
    for id in [other["id"].as_u64().unwrap(), client.get("/users").await.json()["users"][0]["id"].as_u64().unwrap()] {
        client.send(Method::DELETE, &client.admin(&format!("/users/{id}")), None, &[]).await;
    }
    assert_eq!(client.patch("/users/99", json!({ "note": "x" })).await.status, StatusCode::NOT_FOUND);
}

/// Opens the stored snapshot of a link.
async fn snapshot_of(app: &App, link: &str) -> Option<hearth_shared::wire::Snapshot> {
    let token = SubToken::parse(link.rsplit('/').next().unwrap()).unwrap();
    let name = stream::snapshot(&token.hash());
    let stored = app.db.read(move |c| crate::store::streams::envelope(c, &name)).await.unwrap()?;
    let envelope = Envelope::decode(&stored.1, Kind::Snapshot.max_len()).unwrap();
    Some(seal::open(&envelope.body, &token).unwrap())
}

#[tokio::test]
async fn users_crud_bulk_list_and_rotate() {
    let client = Client::signed_in(true).await;
    let created = client
        .post("/users", json!({ "name": "alice", "quota": 1000, "days": 30, "reset": "monthly", "note": "family" }))
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let alice = created.json();
    let link = alice["link"].as_str().unwrap().to_owned();
    assert!(link.starts_with(&client.app().config.sub_url));
    let snapshot = snapshot_of(client.app(), &link).await.unwrap();
    assert_eq!((snapshot.name.as_str(), snapshot.quota, snapshot.status), ("alice", 1000, Status::Active));
    assert_eq!(client.get(&format!("/users/{}/link", alice["id"])).await.json()["link"], link.as_str());

    let bulk = client.post("/users/bulk", json!({ "names": (0..1000).map(|i| format!("guest-{i:04}")).collect::<Vec<_>>(), "settings": { "quota": 5 } })).await;
    assert_eq!(bulk.status, StatusCode::CREATED);
    assert_eq!(bulk.json()["created"], 1000);
    let page = client.get("/users?per_page=100&page=3").await.json();
    assert_eq!((page["total"].as_u64(), page["users"].as_array().unwrap().len()), (Some(1001), 100));
    assert_eq!(page["users"][0]["name"], "guest-0199");
    assert_eq!(client.get("/users?q=alice").await.json()["total"], 1);
    assert_eq!(client.get("/users?q=guest-09").await.json()["total"], 100);
    assert_eq!(client.get("/users?q=%25").await.json()["total"], 0, "% is searched for literally");
    // Through the trigram index (three characters or more) and without it, the same answers:
    // any part of the name or the note, whatever its case, kept in step with renames, new
    // notes and deletions.
    assert_eq!(client.get("/users?q=LIC").await.json()["total"], 1, "a part of a name, in another case");
    assert_eq!(client.get("/users?q=amil").await.json()["total"], 1, "a part of a note");
    assert_eq!(client.get("/users?q=st-0999").await.json()["users"][0]["name"], "guest-0999");
    assert_eq!(client.get("/users?q=%22x%22").await.json()["total"], 0, "quotes are text, not syntax");
    assert_eq!(client.get("/users?q=a%20OR%20b").await.json()["total"], 0, "operators are text, not syntax");
    assert_eq!(client.get("/users?q=-09").await.json()["total"], 100);
    assert_eq!(client.get("/users?q=ce").await.json()["total"], 1, "two characters: read without the index");
    let guest = client.get("/users?q=guest-0998").await.json()["users"][0]["id"].as_u64().unwrap();
    let renamed =
        client.patch(&format!("/users/{guest}"), json!({ "name": "grandma", "note": "Kitchen tablet" })).await;
    assert_eq!(renamed.status, StatusCode::OK);
    assert_eq!(client.get("/users?q=guest-0998").await.json()["total"], 0, "the old name is gone from the index");
    assert_eq!(client.get("/users?q=grandm").await.json()["total"], 1);
    assert_eq!(client.get("/users?q=kitchen").await.json()["total"], 1);
    let deleted = client.send(Method::DELETE, &client.admin(&format!("/users/{guest}")), None, &[]).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert_eq!(client.get("/users?q=kitchen").await.json()["total"], 0, "a deleted user is gone from the index");
    assert_eq!(client.get("/users?group=default").await.json()["total"], 1000);

    let id = alice["id"].as_u64().unwrap();
    let disabled = client.post(&format!("/users/{id}/disable"), json!({})).await.json();
    assert_eq!(disabled["status"], "disabled");
    assert_eq!(snapshot_of(client.app(), &link).await.unwrap().status, Status::Disabled);
    assert_eq!(client.get("/users?status=disabled").await.json()["total"], 1);
    let enabled = client.post(&format!("/users/{id}/enable"), json!({})).await.json();
    assert_eq!(enabled["status"], "active");
    let extended = client.post(&format!("/users/{id}/extend"), json!({ "days": 10 })).await.json();
    assert_eq!(extended["expires_at"].as_u64().unwrap(), alice["expires_at"].as_u64().unwrap() + 10 * 86_400);

    let rotated = client.post(&format!("/users/{id}/rotate"), json!({})).await.json();
    let new_link = rotated["link"].as_str().unwrap();
    assert_ne!(new_link, link);
    assert!(snapshot_of(client.app(), &link).await.is_none(), "the old link is deleted");
    assert_eq!(snapshot_of(client.app(), new_link).await.unwrap().name, "alice");
    // The rotated link serves from control itself; the old one is the decoy.
    let served = client
        .send(
            Method::GET,
            &format!("/s/{}", new_link.rsplit('/').next().unwrap()),
            None,
            &[("user-agent", "mihomo/1.19")],
        )
        .await;
    assert_eq!(served.status, StatusCode::OK);
    assert!(served.headers["subscription-userinfo"].to_str().unwrap().contains("total=1000"));
    let old = client.send(Method::GET, &format!("/s/{}", link.rsplit('/').next().unwrap()), None, &[]).await;
    assert_eq!(old.body, hearth_shared::render::DECOY_BODY);

    assert_eq!(
        client.send(Method::DELETE, &client.admin(&format!("/users/{id}")), None, &[]).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(client.get(&format!("/users/{id}")).await.status, StatusCode::NOT_FOUND);
    assert!(snapshot_of(client.app(), new_link).await.is_none());
    // Every change waits for the edge.
    let pending = client.app().db.read(|c| Ok(crate::store::overview::overview(c, 0)?.pending)).await.unwrap();
    assert!(pending > 1000, "{pending}");
}

#[tokio::test]
async fn recovery_key_opens_every_snapshot() {
    let client = Client::signed_in(false).await;
    let user = client.post("/users", json!({ "name": "dave" })).await.json();
    let link = user["link"].as_str().unwrap();
    let token = SubToken::parse(link.rsplit('/').next().unwrap()).unwrap();
    let name = stream::snapshot(&token.hash());
    let stored = client.app().db.read(move |c| crate::store::streams::envelope(c, &name)).await.unwrap().unwrap();
    let envelope = Envelope::decode(&stored.1, Kind::Snapshot.max_len()).unwrap();
    let (recovered, snapshot) = seal::recover(&envelope.body, &client.control.recovery()).unwrap();
    assert_eq!(recovered.to_link_form(), token.to_link_form());
    assert_eq!(snapshot.name, "dave");
}

#[tokio::test]
async fn the_openapi_description_matches_the_routes() {
    let client = Client::new(false);
    let doc: Value = serde_json::from_str(super::admin::OPENAPI).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    // Every route in the code is described...
    let source = include_str!("admin.rs");
    let mut routes = 0;
    for line in source.lines().filter(|l| l.trim_start().starts_with(".route(\"/api/")) {
        let path = line.split('"').nth(1).unwrap().trim_start_matches("/api");
        if path == "/openapi.json" {
            continue;
        }
        assert!(paths.contains_key(path), "{path} is not in docs/admin-api.openapi.json");
        routes += 1;
    }
    assert_eq!(routes, paths.len(), "the description lists a route the code does not have");
    // ...and every described call exists: unauthenticated, it is refused, not the decoy.
    for (path, methods) in paths {
        for method in methods.as_object().unwrap().keys() {
            let uri = client.admin(&path.replace("{id}", "1"));
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let body = (method != Method::GET && method != Method::DELETE).then(|| json!({}));
            let answer = client.send(method.clone(), &uri, body, &[]).await;
            assert_ne!(answer.status, StatusCode::NOT_FOUND, "{method} {path}");
            assert_ne!(answer.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        }
        // ...and no method the description leaves out is served (the manual's list of
        // operations is made from this document).
        for method in [Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            if methods.as_object().unwrap().contains_key(&method.as_str().to_ascii_lowercase()) {
                continue;
            }
            let uri = client.admin(&path.replace("{id}", "1"));
            let answer = client.send(method.clone(), &uri, Some(json!({})), &[]).await;
            assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path} is served but not described");
        }
    }
    let served = client.send(Method::GET, &client.admin("/openapi.json"), None, &[]).await;
    assert_eq!(served.json()["openapi"], "3.1.0");
}

#[tokio::test]
async fn metrics_for_the_owner_only() {
    let client = Client::signed_in(true).await;
    client.post("/users", json!({ "name": "alice" })).await;
    let path = format!("/{}/metrics", client.app().config.admin_prefix);
    let answer = client.send(Method::GET, &path, None, &[]).await;
    assert_eq!(answer.status, StatusCode::OK);
    let text = String::from_utf8(answer.body).unwrap();
    assert!(text.contains("hearth_users{status=\"active\"} 1\n"), "{text}");
    assert!(text.contains("hearth_outbox_pending 1\n"), "alice's snapshot waits for the edge: {text}");
    let anonymous = Client { control: Arc::new(TestControl::new(false)), cookie: None, bearer: None };
    let path = format!("/{}/metrics", anonymous.app().config.admin_prefix);
    assert_eq!(anonymous.send(Method::GET, &path, None, &[]).await.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_preview_is_what_each_app_gets_from_the_link() {
    use hearth_shared::render::page::{Lang, Platform, Viewer};
    let client = Client::signed_in(false).await;
    let alice = client.post("/users", json!({ "name": "alice" })).await.json();
    let id = alice["id"].as_u64().unwrap();
    let link = alice["link"].as_str().unwrap().to_owned();
    let snapshot = snapshot_of(client.app(), &link).await.unwrap();
    for (ua, format) in [
        ("v2rayN/7.12.5", "base64"),
        ("clash-verge/v2.2.3", "mihomo"),
        ("Surge iOS/3374", "surge"),
        ("Loon/877 CFNetwork/3826.500.131 Darwin/24.5.0", "loon"),
        ("SFA/1.12.4 (Android 14; sing-box 1.12.4; language en_US)", "sing-box 1.12"),
        ("Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0", "page"),
    ] {
        let query: String = url_escape(ua);
        let preview = client.get(&format!("/users/{id}/preview?ua={query}")).await.json();
        assert_eq!(preview["format"], format, "{ua}");
        let wants = hearth_shared::agent::match_user_agent(ua, &[]);
        // The page for the device the User-Agent names (Firefox on Linux here), in English.
        let linux = Viewer { lang: Lang::En, platform: Platform::Linux };
        let expected = hearth_shared::render::answer_at(&snapshot, wants, &link, &Default::default(), linux);
        assert_eq!(preview["body"], expected.body, "{ua}");
        assert_eq!(preview["headers"][0][0], expected.headers[0].0);
    }
    assert_eq!(client.get("/users/424242/preview?ua=x").await.status, StatusCode::NOT_FOUND);
}

fn url_escape(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A support link beyond ASCII reaches apps (issue 46, 10): its path is percent-encoded in the
/// header apps read, and a domain beyond ASCII is refused with how to write it, not dropped.
#[tokio::test]
async fn a_support_link_beyond_ascii_reaches_apps_or_is_refused_with_words() {
    let client = Client::signed_in(true).await;
    let alice = client.post("/users", json!({ "name": "alice" })).await.json();
    let link = client.get(&format!("/users/{}/link", alice["id"])).await.json()["link"].as_str().unwrap().to_owned();
    let refused = client.patch("/settings", json!({ "profile": { "support_url": "https://помощь.рф/чат" } })).await;
    assert_eq!((refused.status, refused.code().as_str()), (StatusCode::BAD_REQUEST, "bad_url"));
    assert!(refused.json()["error"]["message"].as_str().unwrap().contains("ASCII form"));
    let set = client.patch("/settings", json!({ "profile": { "support_url": "https://t.me/помощь" } })).await;
    assert_eq!(set.status, StatusCode::OK, "{}", String::from_utf8_lossy(&set.body));
    let snapshot = snapshot_of(client.app(), &link).await.unwrap();
    let headers = hearth_shared::render::headers(&snapshot, hearth_shared::render::Format::Base64);
    let support = headers.iter().find(|(name, _)| *name == "support-url").map(|(_, value)| value.as_str());
    assert_eq!(support, Some("https://t.me/%D0%BF%D0%BE%D0%BC%D0%BE%D1%89%D1%8C"));
}

#[tokio::test]
async fn user_agent_rules_are_checked_kept_signed_for_the_edge_and_used() {
    let client = Client::signed_in(true).await;
    let alice = client.post("/users", json!({ "name": "alice" })).await.json();
    let id = alice["id"].as_u64().unwrap();
    let preview = async |ua: &'static str| client.get(&format!("/users/{id}/preview?ua={}", url_escape(ua))).await;
    assert_eq!(preview("FamilyApp/2.0").await.json()["format"], "base64", "the built-in default");

    // A bad rule is refused, and nothing in the same call changes.
    let answer = client
        .patch(
            "/settings",
            json!({ "profile": { "title": "Changed" }, "ua_rules": [{ "contains": " ", "target": "mihomo" }] }),
        )
        .await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::BAD_REQUEST, "bad_rules"));
    assert_eq!(client.get("/settings").await.json()["profile"]["title"], "Hearth");
    let answer = client.patch("/settings", json!({ "ua_rules": [{ "contains": "x", "target": "telnet" }] })).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);

    let answer =
        client.patch("/settings", json!({ "ua_rules": [{ "contains": "FamilyApp", "target": "mihomo" }] })).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    assert_eq!(answer.json()["ua_rules"][0]["target"], "mihomo");
    assert_eq!(preview("FamilyApp/2.0").await.json()["format"], "mihomo");
    // Signed for the edge, and queued for it.
    let stored = client
        .app()
        .db
        .read(|c| {
            let queued: u64 = c.query_row(
                "SELECT count(*) FROM streams WHERE name = 'edge-settings'
                 AND seq > (SELECT pushed FROM edges WHERE name = 'main')",
                [],
                |row| row.get(0),
            )?;
            Ok((crate::store::streams::envelope(c, stream::EDGE_SETTINGS)?, queued))
        })
        .await
        .unwrap();
    let (version, bytes) = stored.0.expect("an edge-settings envelope");
    assert_eq!((version, stored.1), (1, 1));
    let envelope = Envelope::decode(&bytes, Kind::EdgeSettings.max_len()).unwrap();
    assert_eq!(envelope.header.audience, Audience::Edge);
    let settings: wire::EdgeSettings = wire::decode(&envelope.body, "edge settings").unwrap();
    assert_eq!(settings.ua_rules[0].contains, "FamilyApp");
}

#[tokio::test]
async fn every_admin_field_is_bounded_and_bulk_create_takes_its_most() {
    let client = Client::signed_in(false).await;
    let long = |n: usize| "x".repeat(n);
    for (method, path, body, field) in [
        (Method::POST, "/users", json!({ "name": long(65) }), "name"),
        (Method::POST, "/users", json!({ "name": "a", "note": long(1001) }), "note"),
        (Method::POST, "/users", json!({ "name": "a", "reset": long(17) }), "reset"),
        (Method::POST, "/users", json!({ "name": "a", "groups": vec!["default"; 101] }), "groups"),
        (Method::POST, "/users", json!({ "name": "a", "groups": [long(65)] }), "groups"),
        (Method::POST, "/users/bulk", json!({ "names": vec!["a"; 10_001] }), "names"),
        (Method::POST, "/users/bulk", json!({ "names": [long(65)] }), "names"),
        (Method::POST, "/users/bulk", json!({ "names": ["a"], "settings": { "note": long(1001) } }), "note"),
        (Method::POST, "/nodes", json!({ "name": "n", "host": long(254) }), "host"),
        (Method::POST, "/nodes", json!({ "name": "n", "host": "h", "obfs": long(256) }), "obfs"),
        (Method::POST, "/nodes", json!({ "name": "n", "host": "h", "masquerade": long(256) }), "masquerade"),
        (Method::POST, "/groups", json!({ "name": long(65) }), "name"),
        (Method::POST, "/tokens", json!({ "name": long(65), "scope": "read" }), "name"),
        (Method::POST, "/totp/confirm", json!({ "code": long(65) }), "code"),
        (Method::POST, "/totp/disable", json!({ "password": long(257) }), "password"),
        (Method::PATCH, "/settings", json!({ "edge_url": format!("https://{}", long(600)) }), "edge_url"),
        (Method::PATCH, "/settings", json!({ "profile": { "announce": long(201) } }), "announce"),
        (Method::PATCH, "/settings", json!({ "ua_rules": [{ "contains": long(65), "target": "mihomo" }] }), "ua_rules"),
    ] {
        let answer = client.send(method, &client.admin(path), Some(body), &[]).await;
        assert_eq!((answer.status, answer.code().as_str()), (StatusCode::BAD_REQUEST, "too_long"), "{path} {field}");
        assert!(answer.json()["error"]["message"].as_str().unwrap().starts_with(field), "{path} {field}");
    }
    let answer = client.get(&format!("/users/1/preview?ua={}", long(1025))).await;
    assert_eq!(answer.code(), "too_long");
    // A body far larger than a call can take is refused unread.
    let answer = client.post("/users", json!({ "name": "a", "note": long(70_000) })).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::PAYLOAD_TOO_LARGE, "too_large"));
    // A bulk create of the most names, each of the most characters (four bytes each), gets
    // past the size and the bounds to the store (which refuses the first, empty, name).
    let mut names: Vec<String> = (0..9_999).map(|i| format!("{}{i:04}", "\u{1d11e}".repeat(60))).collect();
    names.insert(0, String::new());
    let body = json!({ "names": names });
    assert!(body.to_string().len() > 2_400_000);
    let answer = client.post("/users/bulk", body).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::BAD_REQUEST, "bad_name"));
    assert_eq!(client.get("/users").await.json()["total"], 0, "nothing was created");
}

#[tokio::test]
async fn apps_over_the_device_limit_get_no_server_and_deleted_devices_free_their_room() {
    use hearth_shared::devices::{self, DeviceReport, Registry};
    let client = Client::signed_in(false).await;
    enroll(&client, json!(["default"])).await;
    let id = client.post("/users", json!({ "name": "family", "device_limit": 2 })).await.json()["id"].as_u64().unwrap();
    let link = client.get(&format!("/users/{id}/link")).await.json()["link"].as_str().unwrap().to_owned();
    let token = link.rsplit('/').next().unwrap().to_owned();
    let snapshot = snapshot_of(client.app(), &link).await.unwrap();
    assert_eq!((snapshot.hwid.limit, snapshot.hwid.forgotten.len()), (2, 0));
    // Control serves the link itself here: an app naming its device is registered.
    let fetch = |hwid: &'static str| {
        let client = &client;
        // (As mihomo YAML, to read it here; Happ itself gets base64 links.)
        let path = format!("/s/{token}?format=mihomo");
        async move {
            let headers = [
                ("user-agent", "Happ/3.4.1"),
                ("x-hwid", hwid),
                ("x-device-os", "Android"),
                ("x-ver-os", "14"),
                ("x-device-model", "Pixel 8"),
            ];
            let answer = client.send(Method::GET, &path, None, &headers).await;
            assert_eq!(answer.status, StatusCode::OK);
            String::from_utf8(answer.body).unwrap()
        }
    };
    let credential = snapshot.credential.clone();
    assert!(fetch("phone-1").await.contains(&credential));
    assert!(fetch("phone-2").await.contains(&credential));
    let third = fetch("tablet").await;
    assert!(third.contains(devices::REFUSED_NAME), "{third}");
    assert!(!third.contains(&credential), "a device over the limit gets no credential");
    assert!(fetch("phone-1").await.contains(&credential), "a registered device is served");
    // Without a device id (Hiddify, a browser) the link is served: the nodes' limit holds it.
    let plain =
        client.send(Method::GET, &format!("/s/{token}?format=mihomo"), None, &[("user-agent", "Hiddify/2.5")]).await;
    assert!(String::from_utf8(plain.body).unwrap().contains(&credential));

    let listed = client.get(&format!("/users/{id}/hwid")).await.json();
    assert_eq!(listed["limit"], 2);
    let devices_listed = listed["devices"].as_array().unwrap();
    assert_eq!(devices_listed.len(), 2, "{listed}");
    assert!(listed["refused_at"].as_u64().unwrap() > 0);
    assert_eq!(
        (devices_listed[0]["os"].as_str(), devices_listed[0]["app"].as_str()),
        (Some("Android"), Some("Happ/3.4.1"))
    );
    assert_eq!(devices_listed[0]["model"], "Pixel 8");
    let phone_2 = hex::encode(devices::key_of("phone-2"));
    assert!(devices_listed.iter().any(|d| d["key"] == phone_2.as_str()));

    // Bad names change nothing.
    let bad = client.send(Method::DELETE, &client.admin(&format!("/users/{id}/hwid/zz")), None, &[]).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let unknown = hex::encode([9u8; 16]);
    let none = client.send(Method::DELETE, &client.admin(&format!("/users/{id}/hwid/{unknown}")), None, &[]).await;
    assert_eq!(none.status, StatusCode::NOT_FOUND);
    assert_eq!(client.get(&format!("/users/{id}/hwid")).await.json()["devices"].as_array().unwrap().len(), 2);

    // The owner deletes phone-2: the snapshot tells the edges, and the tablet gets in.
    let after = client.send(Method::DELETE, &client.admin(&format!("/users/{id}/hwid/{phone_2}")), None, &[]).await;
    assert_eq!(after.status, StatusCode::OK);
    assert_eq!(after.json()["devices"].as_array().unwrap().len(), 1);
    let snapshot = snapshot_of(client.app(), &link).await.unwrap();
    assert_eq!(snapshot.hwid.forgotten.iter().map(|f| f.key).collect::<Vec<_>>(), [devices::key_of("phone-2")]);
    assert!(fetch("tablet").await.contains(&credential));

    // An edge's report: a registry sealed for another link is not believed; one sealed for
    // this link still listing the deleted phone-2 (registered before the deletion) does not
    // bring it back; a new device it lists is.
    let app = client.app().clone();
    let hash = SubToken::parse(&token).unwrap().hash();
    let mut registry = Registry::default();
    let policy = devices::HwidPolicy { limit: 5, forgotten: Vec::new() };
    for (hwid, at) in [("phone-2", 1), ("laptop", now()), ("from-the-future", now() + 10 * 365 * 86_400)] {
        let seen = devices::Seen::from_headers(|name| (name == "x-hwid").then_some(hwid)).unwrap();
        registry.admit(&policy, &seen, at);
    }
    let forged = DeviceReport { token_hash: hash, sealed: devices::seal(&registry, &SubToken::from_bytes([3; 32])) };
    let genuine =
        DeviceReport { token_hash: hash, sealed: devices::seal(&registry, &SubToken::parse(&token).unwrap()) };
    let state = app.clone();
    let applied = app
        .db
        .write(move |tx| {
            Ok((
                crate::store::hwid::apply_report(tx, &state.signer.vault, &forged, now())?,
                crate::store::hwid::apply_report(tx, &state.signer.vault, &genuine, now())?,
            ))
        })
        .await
        .unwrap();
    assert_eq!(applied, (false, true));
    let listed = client.get(&format!("/users/{id}/hwid")).await.json();
    let keys: Vec<&str> = listed["devices"].as_array().unwrap().iter().map(|d| d["key"].as_str().unwrap()).collect();
    assert!(!keys.contains(&phone_2.as_str()), "{listed}");
    assert!(keys.contains(&hex::encode(devices::key_of("laptop")).as_str()), "{listed}");
    // An edge's clock does not put anything in the future.
    let future = hex::encode(devices::key_of("from-the-future"));
    let future = listed["devices"].as_array().unwrap().iter().find(|d| d["key"] == future.as_str()).unwrap().clone();
    assert!(
        future["first_seen"].as_u64().unwrap() <= now() && future["last_seen"].as_u64().unwrap() <= now(),
        "{future}"
    );
}
