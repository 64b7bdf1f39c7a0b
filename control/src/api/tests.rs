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

mod edits;
mod identity;
mod nodes;
mod releases;
mod roles;
mod routing;
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

/// Decodes the base32 secret an enrollment shows (what the authenticator app does).
fn base32_decode(text: &str) -> Vec<u8> {
    let (mut out, mut buffer, mut bits) = (Vec::new(), 0u32, 0u32);
    for c in text.bytes() {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'2'..=b'7' => c - b'2' + 26,
            _ => panic!("not base32: {text}"),
        };
        buffer = (buffer << 5) | u32::from(value);
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
        }
    }
    out
}

#[tokio::test]
async fn two_step_sign_in_needs_a_fresh_code_or_a_recovery_code() {
    let mut client = Client::signed_in(false).await;
    let code_at = |secret: &[u8], step: u64| format!("{:06}", crate::totp::code_at(secret, step));
    assert_eq!(client.get("/totp").await.json()["enabled"], false);

    let enrollment = client.post("/totp/enroll", json!({})).await.json();
    let uri = enrollment["uri"].as_str().unwrap();
    assert!(uri.starts_with("otpauth://totp/Hearth:owner?secret="), "{uri}");
    assert!(enrollment["qr_svg"].as_str().unwrap().starts_with("<svg"));
    let secret = base32_decode(enrollment["secret"].as_str().unwrap());
    let step = now() / crate::totp::STEP;
    let answer = client.post("/totp/confirm", json!({ "code": "000000" })).await;
    if code_at(&secret, step) != "000000" {
        assert_eq!((answer.status, answer.code().as_str()), (StatusCode::BAD_REQUEST, "bad_totp"));
        assert_eq!(client.get("/totp").await.json()["enabled"], false, "a wrong code changes nothing");
    }
    let answer = client.post("/totp/confirm", json!({ "code": code_at(&secret, step) })).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    let recovery: Vec<String> =
        answer.json()["recovery_codes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_owned()).collect();
    assert_eq!(recovery.len(), crate::totp::RECOVERY_CODES);
    assert_eq!(client.get("/totp").await.json()["recovery_left"], 10);

    // The password alone is not enough any more; a wrong code counts like a wrong password.
    let login = |code: Option<&str>| {
        let mut body = json!({ "login": "owner", "password": "a long password" });
        if let Some(code) = code {
            body["code"] = json!(code);
        }
        body
    };
    let answer = client.post("/login", login(None)).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::UNAUTHORIZED, "totp_required"));
    assert!(!answer.headers.contains_key(header::SET_COOKIE));
    let answer = client.post("/login", login(Some("12345x"))).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::UNAUTHORIZED, "bad_totp"));
    // The code that confirmed the enrollment was used: the next step's code (a phone a little
    // ahead) works, once.
    let next = code_at(&secret, step + 1);
    let answer = client.post("/login", login(Some(&next))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    let answer = client.post("/login", login(Some(&next))).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::UNAUTHORIZED, "bad_totp"), "no replay");
    // A recovery code, typed loosely, works once.
    let typed = recovery[3].to_uppercase().replace('-', " ");
    assert_eq!(client.post("/login", login(Some(&typed))).await.status, StatusCode::OK);
    let answer = client.post("/login", login(Some(&recovery[3]))).await;
    assert_eq!(answer.code(), "bad_totp");
    assert_eq!(client.get("/totp").await.json()["recovery_left"], 9);

    // API tokens cannot touch it; turning it off needs the password.
    let token = client.post("/tokens", json!({ "name": "t", "scope": "admin" })).await.json()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut scripted = Client { control: client.control, cookie: None, bearer: Some(token) };
    assert_eq!(scripted.post("/totp/enroll", json!({})).await.status, StatusCode::FORBIDDEN);
    std::mem::swap(&mut scripted.cookie, &mut client.cookie);
    scripted.bearer = None;
    let answer = scripted.post("/totp/disable", json!({ "password": "wrong" })).await;
    assert_eq!((answer.status, answer.code().as_str()), (StatusCode::UNAUTHORIZED, "bad_password"));
    assert_eq!(scripted.post("/totp/disable", json!({ "password": "a long password" })).await.status, StatusCode::OK);
    assert_eq!(scripted.post("/login", login(None)).await.status, StatusCode::OK);
    let audit = scripted.get("/audit").await.json();
    let actions: Vec<&str> =
        audit["entries"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    for action in ["owner.totp_on", "owner.recovery_code_used", "owner.totp_off"] {
        assert!(actions.contains(&action), "{action} in {actions:?}");
    }
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
async fn huge_sign_in_fields_are_refused_before_anything_is_counted() {
    let client = Client::signed_in(false).await;
    let lockouts = &client.app().lockouts;
    assert_eq!((lockouts.entries(), lockouts.memory()), (0, 0));
    // 3.9 MB logins, from 60 addresses: refused unread past the sign-in body's size.
    let huge = "x".repeat(3_900_000);
    for i in 0..60 {
        let answer = client
            .login_from(&format!("198.51.100.{i}"), json!({ "login": huge, "password": "not the password" }))
            .await;
        assert_eq!((answer.status, answer.code().as_str()), (StatusCode::PAYLOAD_TOO_LARGE, "too_large"));
    }
    // A login longer than any the owner can have, a password or code too long: a 400 naming
    // the field, neither counted nor hashed.
    for (i, (body, field)) in [
        (json!({ "login": "x".repeat(65), "password": "not the password" }), "login"),
        (json!({ "login": "owner", "password": "x".repeat(257) }), "password"),
        (json!({ "login": "owner", "password": "not the password", "code": "1".repeat(65) }), "code"),
    ]
    .into_iter()
    .cycle()
    .take(60)
    .enumerate()
    {
        let answer = client.login_from(&format!("203.0.113.{i}"), body).await;
        assert_eq!((answer.status, answer.code().as_str()), (StatusCode::BAD_REQUEST, "too_long"));
        assert!(answer.json()["error"]["message"].as_str().unwrap().starts_with(field));
    }
    assert_eq!((lockouts.entries(), lockouts.memory()), (0, 0), "nothing was kept");
    assert_eq!(client.app().counters.logins_failed.load(std::sync::atomic::Ordering::Relaxed), 0);
    // The longest login is checked as usual, and counted by a fixed-size key.
    let answer = client.login_from("203.0.113.99", json!({ "login": "x".repeat(64), "password": "nope" })).await;
    assert_eq!(answer.code(), "bad_login");
    assert_eq!(lockouts.entries(), 2, "the address and the login");
    assert!(lockouts.memory() < 4096, "{}", lockouts.memory());
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

/// Turns two-step sign-in on for the signed-in owner; gives the secret and recovery codes.
async fn turn_two_step_on(client: &Client) -> (Vec<u8>, Vec<String>) {
    let enrollment = client.post("/totp/enroll", json!({})).await.json();
    let secret = base32_decode(enrollment["secret"].as_str().unwrap());
    let code = format!("{:06}", crate::totp::code_at(&secret, now() / crate::totp::STEP));
    let answer = client.post("/totp/confirm", json!({ "code": code })).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    let recovery =
        answer.json()["recovery_codes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_owned()).collect();
    (secret, recovery)
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_client_is_locked_out_alone() {
    // A reverse proxy at 10.0.0.5 (or anything in 10.0.1.0/24) in front of control.
    let client = Client::signed_in_with(false, &[("HEARTH_TRUSTED_PROXIES", "10.0.0.5, 10.0.1.0/24")]).await;
    let guess = |login: &str| json!({ "login": login, "password": "not the password" });
    let right = json!({ "login": "owner", "password": "a long password" });
    // Ten wrong passwords from one client through the proxy lock that client out...
    for i in 0..10 {
        let login = if i % 2 == 0 { "owner" } else { "someone" };
        let answer = client.login_via("10.0.0.5", &[("x-forwarded-for", "198.51.100.7")], guess(login)).await;
        assert_eq!(answer.code(), "bad_login");
    }
    let answer = client.login_via("10.0.0.5", &[("x-forwarded-for", "198.51.100.7")], right.clone()).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "the guessing client is locked out");
    // ...and no one else behind the same proxy: the owner at another address gets in, whether
    // the proxy names the client in X-Forwarded-For (right-most hop not itself a proxy, over
    // every header line) or CF-Connecting-IP (which wins).
    for headers in [
        [("x-forwarded-for", "198.51.100.7, 203.0.113.9"), ("x-forwarded-for", "10.0.1.20")],
        [("cf-connecting-ip", "203.0.113.10"), ("x-forwarded-for", "198.51.100.7")],
    ] {
        let answer = client.login_via("10.0.0.5", &headers, right.clone()).await;
        assert_eq!(answer.status, StatusCode::OK, "{headers:?}: {}", String::from_utf8_lossy(&answer.body));
    }
    // The locked client cannot pass for someone else by adding hops of its own to the left.
    let answer = client.login_via("10.0.0.5", &[("x-forwarded-for", "203.0.113.9, 198.51.100.7")], right.clone()).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);

    // A client reaching control directly: its forwarding headers are ignored, so changing them
    // neither spreads its guesses over made-up addresses nor frees it once locked.
    for i in 0..10 {
        let forged = format!("192.0.2.{i}");
        let headers = [("x-forwarded-for", forged.as_str()), ("cf-connecting-ip", forged.as_str())];
        assert_eq!(client.login_via("198.51.100.99", &headers, guess("someone")).await.code(), "bad_login");
    }
    let headers = [("x-forwarded-for", "203.0.113.50"), ("cf-connecting-ip", "203.0.113.50")];
    let answer = client.login_via("198.51.100.99", &headers, right.clone()).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "a stranger's headers are not believed");
    // Nor can it lock out the address it names.
    let answer = client.login_from("203.0.113.50", right).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
}

#[tokio::test]
async fn strangers_can_slow_guessing_but_never_keep_the_owner_out() {
    let client = Client::signed_in(false).await;
    let password = |password: &str, code: Option<&str>| {
        let mut body = json!({ "login": "owner", "password": password });
        if let Some(code) = code {
            body["code"] = json!(code);
        }
        body
    };
    // The owner signs in from home once (one check of the budget for unknown addresses): that
    // address is known from then on.
    let answer = client.login_from("192.0.2.1", password("a long password", None)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));

    // 100 wrong passwords for the owner's login from ten other addresses: the login's budget
    // for unknown addresses lets the rest of its 30 be checked, then 429 with the time to wait.
    let mut checked = 0;
    for i in 0..100 {
        let answer = client.login_from(&format!("198.51.100.{}", i / 10), password("a guess", None)).await;
        match answer.status {
            StatusCode::UNAUTHORIZED => checked += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                let retry: u64 = answer.headers[header::RETRY_AFTER].to_str().unwrap().parse().unwrap();
                assert!((1..=120).contains(&retry), "{retry}");
            }
            other => panic!("{other}: {}", String::from_utf8_lossy(&answer.body)),
        }
    }
    assert_eq!(checked, crate::auth::LOGIN_CHECKS_PER_HOUR - 1, "guessing from unknown addresses is capped");
    // A new address with the right password: held to the spent budget too.
    let answer = client.login_from("198.51.100.51", password("a long password", None)).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    // The owner still gets in from home.
    let answer = client.login_from("192.0.2.1", password("a long password", None)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));

    // With two-step sign-in on, the owner gets in from anywhere with a valid code.
    let (secret, recovery) = turn_two_step_on(&client).await;
    let answer = client.login_from("198.51.100.52", password("a long password", None)).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "no code: held to the budget");
    // Wrong codes from unknown addresses take from the budget too: no way around it.
    let answer = client.login_from("198.51.100.50", password("a guess", Some("123456"))).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    let step = now() / crate::totp::STEP;
    let code = format!("{:06}", crate::totp::code_at(&secret, step + 1));
    let answer = client.login_from("203.0.113.7", password("a long password", Some(&code))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    let answer = client.login_from("203.0.113.8", password("a long password", Some(&code))).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "a spent code is no way past the budget");
    // A valid code with a wrong password is not spent: the owner mistyping keeps the code.
    let answer = client.login_from("203.0.113.9", password("a typo", Some(&recovery[2]))).await;
    assert_eq!(answer.code(), "bad_login");
    let answer = client.login_from("203.0.113.9", password("a long password", Some(&recovery[2]))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    // From home, the password and a code, as ever.
    let answer = client.login_from("192.0.2.1", password("a long password", None)).await;
    assert_eq!(answer.code(), "totp_required");
    let answer = client.login_from("192.0.2.1", password("a long password", Some(&recovery[0]))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
    // Only hashes of the owner's addresses are stored.
    let stored: Vec<Vec<u8>> = client
        .app()
        .db
        .read(|c| {
            Ok(c.prepare("SELECT address_hash FROM known_addresses")?
                .query_map([], |row| row.get(0))?
                .collect::<Result<_, _>>()?)
        })
        .await
        .unwrap();
    for ip in ["192.0.2.1", "203.0.113.7", "203.0.113.9"] {
        assert!(stored.contains(&crate::auth::address_hash(ip.parse().unwrap()).to_vec()), "{ip}");
    }
    assert!(!stored.contains(&crate::auth::address_hash("198.51.100.1".parse().unwrap()).to_vec()));
}

#[tokio::test]
async fn wrong_codes_count_for_their_address_even_past_a_spent_budget() {
    let client = Client::signed_in(false).await;
    let (secret, _) = turn_two_step_on(&client).await;
    let body = |password: &str, code: &str| json!({ "login": "owner", "password": password, "code": code });
    // Strangers spend the owner's login's budget for unknown addresses.
    for i in 0..crate::auth::LOGIN_CHECKS_PER_HOUR {
        let answer = client
            .login_from(&format!("198.51.100.{}", i / 5), json!({ "login": "owner", "password": "a guess" }))
            .await;
        assert_eq!(answer.code(), "bad_login");
    }
    // From one more address, ten wrong codes: each refused by the spent budget, and each
    // counted for the address, which they lock.
    let failed = || client.app().counters.logins_failed.load(std::sync::atomic::Ordering::Relaxed);
    let before = failed();
    for _ in 0..10 {
        let answer = client.login_from("203.0.113.20", body("a guess", "000000")).await;
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(failed() - before, 10, "every wrong code is counted");
    // The confirmation spent this step's code: the next one is valid too.
    let code = format!("{:06}", crate::totp::code_at(&secret, now() / crate::totp::STEP + 1));
    let answer = client.login_from("203.0.113.20", body("a long password", &code)).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "the address is locked: no more codes from there");
    // From elsewhere, the owner's valid code still gets in.
    let answer = client.login_from("203.0.113.21", body("a long password", &code)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
}

#[tokio::test]
async fn an_authenticator_code_gets_past_a_spent_budget_once() {
    let client = Client::signed_in(false).await;
    let (secret, recovery) = turn_two_step_on(&client).await;
    let body = |password: &str, code: &str| json!({ "login": "owner", "password": password, "code": code });
    for i in 0..crate::auth::LOGIN_CHECKS_PER_HOUR {
        let answer = client
            .login_from(&format!("198.51.100.{}", i / 5), json!({ "login": "owner", "password": "a guess" }))
            .await;
        assert_eq!(answer.code(), "bad_login");
    }
    // A valid code (say, one found by guessing) buys one password check past the spent budget...
    let code = format!("{:06}", crate::totp::code_at(&secret, now() / crate::totp::STEP + 1));
    let answer = client.login_from("203.0.113.30", body("a guess", &code)).await;
    assert_eq!(answer.code(), "bad_login");
    // ...not more, from anywhere, even with the right password (the owner's next code will do).
    let answer = client.login_from("203.0.113.31", body("another guess", &code)).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    let answer = client.login_from("203.0.113.32", body("a long password", &code)).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    // A recovery code, which cannot be guessed, still gets the owner in.
    let answer = client.login_from("203.0.113.32", body("a long password", &recovery[0])).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer.body));
}

/// The bounds the description gives users, nodes and groups are the ones the API checks: one
/// over is a 400 `too_long` naming the field, at the bound it is not.
#[tokio::test]
async fn the_described_bounds_are_the_ones_checked() {
    let client = Client::signed_in(false).await;
    let doc: Value = serde_json::from_str(super::admin::OPENAPI).unwrap();
    let mut checked = 0;
    for (schema, path) in [("UserInput", "/users"), ("NodeInput", "/nodes"), ("GroupInput", "/groups")] {
        for (field, spec) in doc["components"]["schemas"][schema]["properties"].as_object().unwrap() {
            let Some(max) = spec["maxLength"].as_u64().or(spec["maxItems"].as_u64()) else {
                continue;
            };
            let value = |n: u64| {
                let n = n as usize;
                if spec["maxLength"].is_u64() { json!("x".repeat(n)) } else { json!(vec!["g"; n]) }
            };
            let mut cases = vec![(value(max + 1), true), (value(max), false)];
            if let Some(item) = spec["items"]["maxLength"].as_u64() {
                cases.push((json!(["x".repeat(item as usize + 1)]), true));
                cases.push((json!(["x".repeat(item as usize)]), false));
            }
            for (value, over) in cases {
                let answer = client.post(path, json!({ field: value })).await;
                let refused = answer.code() == "too_long";
                assert_eq!(refused, over, "{schema}.{field}: {}", String::from_utf8_lossy(&answer.body));
                if over {
                    assert!(answer.json()["error"]["message"].as_str().unwrap().starts_with(field.as_str()));
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 38, "every bounded field of the three was tried");
}

/// The anonymous budget of an IPv6 address is its /64's: one host holds a /64, and its
/// addresses do not each get a budget of their own.
#[tokio::test]
async fn an_ipv6_hosts_addresses_share_one_anonymous_budget() {
    let client = Client::new(false);
    let app = client.app();
    let host = |n: u16| std::net::IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 1, 0, 0, 0, n));
    let burst = crate::app::ANONYMOUS_BUDGET.burst;
    for n in 0..burst as u16 {
        assert!(app.spend(host(n)).is_ok(), "spend {n} of the burst");
    }
    assert!(app.spend(host(9999)).is_err(), "another address of the same /64 got a budget of its own");
    let neighbour = std::net::IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, 1));
    assert!(app.spend(neighbour).is_ok(), "the next /64 is another host's");
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
    let mirror = json!({
        "name": "mirror",
        "url": "https://mirror.example",
        "api_prefix": "mirror_prefix_0123456789",
        "push_token": "a-push-token-of-the-mirror-0123",
        "link_base": "https://sub.mirror.example/s",
    });
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

    let mirror = json!({
        "name": "mirror",
        "url": "https://mirror.example",
        "api_prefix": "mirror_prefix_0123456789",
        "push_token": "a-push-token-of-the-mirror-0123",
        "link_base": "https://sub.mirror.example/s",
    });
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

/// Events are told once per crossing, in the transaction of what caused them: a quota's 80 %
/// and 95 % (not again after, nor on the way over it), over quota, expired; a node gone silent
/// and back; an edge failing and recovered.
#[tokio::test]
async fn events_tell_each_crossing_once() {
    let client = Client::signed_in(true).await;
    let app = client.app().clone();
    let alice = client.post("/users", json!({ "name": "alice", "quota": 1000 })).await.json();
    let alice_id = alice["id"].as_u64().unwrap();
    let (node, key) = enroll(&client, json!(["default"])).await;
    let sweep = || {
        let (app, state) = (app.clone(), app.clone());
        async move { app.db.write(move |tx| crate::tasks::sweep(tx, &state, now(), true, false)).await.unwrap() }
    };
    let kinds = || async {
        let events = client.get("/events?limit=100").await.json();
        let mut kinds: Vec<String> = events["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| format!("{} {}", e["kind"].as_str().unwrap(), e["data"]["percent"].as_u64().unwrap_or(0)))
            .collect();
        kinds.reverse();
        kinds
    };
    assert_eq!(kinds().await, ["user.created 0"]);
    for (seq, bytes) in [(1, 850), (2, 100), (3, 10), (4, 100)] {
        let body = report(&key, node, seq, vec![UserUsage { user: alice_id, up: 0, down: bytes }]);
        assert_eq!(node_usage(&client, node, &key, body).await.status, StatusCode::OK);
        sweep().await;
    }
    assert_eq!(kinds().await, ["user.created 0", "user.near_quota 80", "user.near_quota 95", "user.over_quota 0"]);
    // Both shares crossed between two sweeps (a minute apart): each told, lowest first, once.
    let bob = client.post("/users", json!({ "name": "bob", "quota": 1000 })).await.json();
    let body = report(&key, node, 5, vec![UserUsage { user: bob["id"].as_u64().unwrap(), up: 0, down: 960 }]);
    assert_eq!(node_usage(&client, node, &key, body).await.status, StatusCode::OK);
    sweep().await;
    sweep().await;
    let told = kinds().await;
    assert_eq!(&told[4..], ["user.created 0", "user.near_quota 80", "user.near_quota 95"], "{told:?}");
    // A larger quota: back under, tellable again, and nothing told for it but the change.
    client.patch(&format!("/users/{alice_id}"), json!({ "quota": 100_000 })).await;
    client.patch(&format!("/users/{alice_id}"), json!({ "expires_at": now() - 1 })).await;
    let told = kinds().await;
    assert_eq!(&told[7..], ["user.changed 0", "user.changed 0", "user.expired 0"], "{told:?}");

    // A node silent for long, then back; an edge failing for long, then taking a push.
    let long_ago = now() - crate::tasks::NODE_ONLINE_SECS - 10;
    app.db
        .write(move |tx| {
            tx.execute("UPDATE nodes SET last_seen = ?2 WHERE id = ?1", rusqlite::params![node, long_ago])?;
            tx.execute("UPDATE edges SET error_since = ?1, last_error = 'refused'", [long_ago])?;
            Ok(())
        })
        .await
        .unwrap();
    sweep().await;
    sweep().await;
    let told = kinds().await;
    assert_eq!(&told[10..], ["node.offline 0", "edge.failing 0"], "once each: {told:?}");
    assert_eq!(node_get(&client, node, &key, &format!("/nodes/{node}/creds?after=0")).await.status, StatusCode::OK);
    sweep().await;
    let edge: i64 = app.db.read(|c| Ok(c.query_row("SELECT id FROM edges", [], |r| r.get(0))?)).await.unwrap();
    app.db.write(move |tx| crate::store::edges::pushed(tx, edge, 0, &[], now())).await.unwrap();
    let told = kinds().await;
    assert_eq!(&told[12..], ["node.online 0", "edge.recovered 0"], "{told:?}");
    let events = client.get("/events?limit=1").await.json();
    assert_eq!(events["events"][0]["data"]["edge"]["name"], "main");
}

/// Webhooks: bad input refused with a clear error, the secret shown once, deliveries queued
/// only for the kinds a webhook takes (the test event only where it is sent).
#[tokio::test]
async fn webhooks_take_the_kinds_they_ask_for() {
    let client = Client::signed_in(false).await;
    for (body, code) in [
        (json!({ "url": "mailto:x", "events": ["*"] }), "bad_url"),
        (json!({ "url": "https://hooks.example/a", "events": [] }), "bad_events"),
        (json!({ "url": "https://hooks.example/a", "events": ["user.made"] }), "bad_events"),
        (json!({ "url": "https://hooks.example/a", "events": ["*"], "more": 1 }), "bad_json"),
    ] {
        let answer = client.post("/webhooks", body.clone()).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(answer.json()["error"]["code"], code, "{body}");
    }
    let users = client.post("/webhooks", json!({ "url": "https://hooks.example/u", "events": ["user.*"] })).await;
    assert_eq!(users.status, StatusCode::CREATED);
    let users = users.json();
    assert!(users["secret"].as_str().unwrap().starts_with("whsec_"));
    let nodes = client.post("/webhooks", json!({ "url": "https://hooks.example/n", "events": ["node.offline"] })).await;
    let nodes = nodes.json()["id"].as_i64().unwrap();
    let users = users["id"].as_i64().unwrap();
    client.post("/users", json!({ "name": "bob" })).await;
    client.post(&format!("/webhooks/{nodes}/test"), json!({})).await;
    let client = &client;
    let queued = |id: i64| async move {
        let list = client.get(&format!("/webhooks/{id}/deliveries")).await.json();
        list["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["kind"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(queued(users).await, ["user.created"]);
    assert_eq!(queued(nodes).await, ["test"]);
    let listed = client.get("/webhooks").await.json();
    assert!(!listed.to_string().contains("whsec_"), "the secret never comes back");
    assert_eq!(listed["webhooks"][0]["pending"], 1);
    assert_eq!(
        client.send(Method::DELETE, &client.admin(&format!("/webhooks/{users}")), None, &[]).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(client.get(&format!("/webhooks/{users}/deliveries")).await.status, StatusCode::NOT_FOUND);
}

/// The owner sees each session (address, browser, the asking one marked) and ends one, or all
/// the others; an ended session's cookie is refused.
#[tokio::test]
async fn the_owner_sees_and_ends_sessions() {
    let client = Client::signed_in(false).await;
    let sign_in = |ip: &'static str, agent: &'static str| {
        let client = &client;
        async move {
            let body = json!({ "login": "owner", "password": "a long password" });
            let answer = client.login_via(ip, &[("user-agent", agent)], body).await;
            assert_eq!(answer.status, StatusCode::OK);
            cookie_of(&answer.headers)
        }
    };
    let with_cookie = |cookie: String| {
        let client = &client;
        async move {
            let request = Request::get(client.admin("/me"))
                .header(header::COOKIE, format!("{}={cookie}", crate::auth::COOKIE))
                .body(HttpBody::empty())
                .unwrap();
            client.raw(request).await.status
        }
    };
    let phone = sign_in("198.51.100.7", "Mozilla/5.0 (Android 15) Firefox/140.0").await;
    let list = client.get("/sessions").await.json();
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{list}");
    let other = sessions.iter().find(|s| s["current"] == false).unwrap();
    assert_eq!(
        (other["address"].as_str(), other["browser"].as_str()),
        (Some("198.51.100.7"), Some("Mozilla/5.0 (Android 15) Firefox/140.0"))
    );
    assert!(sessions.iter().any(|s| s["current"] == true));
    assert!(!list.to_string().contains(&phone), "no cookie in the list");
    assert_eq!(with_cookie(phone.clone()).await, StatusCode::OK);
    let id = other["id"].as_i64().unwrap();
    let path = client.admin(&format!("/sessions/{id}"));
    assert_eq!(client.send(Method::DELETE, &path, None, &[]).await.status, StatusCode::NO_CONTENT);
    assert_eq!(with_cookie(phone).await, StatusCode::UNAUTHORIZED, "an ended session is refused");
    assert_eq!(client.send(Method::DELETE, &path, None, &[]).await.status, StatusCode::NOT_FOUND);
    // Everywhere else: the others end, the asking one stays.
    let laptop = sign_in("203.0.113.9", "Mozilla/5.0 (X11; Linux x86_64) Chrome/142.0").await;
    let tablet = sign_in("203.0.113.10", "Mozilla/5.0 (iPad) Safari/605.1").await;
    let ended = client.send(Method::DELETE, &client.admin("/sessions"), None, &[]).await.json();
    assert_eq!(ended["ended"], 2);
    assert_eq!(
        (with_cookie(laptop).await, with_cookie(tablet).await),
        (StatusCode::UNAUTHORIZED, StatusCode::UNAUTHORIZED)
    );
    assert_eq!(client.get("/me").await.status, StatusCode::OK);
    assert_eq!(client.get("/sessions").await.json()["sessions"].as_array().unwrap().len(), 1);
}

/// A node turning a user's device away is told once an hour; a sign-in from an address the
/// owner has not used is told, one from a known address is not.
#[tokio::test]
async fn device_refusals_and_new_sign_in_addresses_are_told() {
    let client = Client::signed_in(true).await;
    let alice = client.post("/users", json!({ "name": "alice", "device_limit": 1 })).await.json();
    let alice_id = alice["id"].as_u64().unwrap();
    let (node, key) = enroll(&client, json!(["default"])).await;
    let told = |kind: &'static str| {
        let client = &client;
        async move {
            let events = client.get("/events?limit=100").await.json();
            events["events"].as_array().unwrap().iter().filter(|e| e["kind"] == kind).cloned().collect::<Vec<Value>>()
        }
    };
    for seq in [1, 2] {
        let body = presence_report(&key, node, seq, &[(alice_id, 1, 1, 2)]);
        assert_eq!(node_usage(&client, node, &key, body).await.status, StatusCode::OK);
    }
    let refused = told("user.over_device_limit").await;
    assert_eq!(refused.len(), 1, "once an hour: {refused:?}");
    assert_eq!(
        (refused[0]["data"]["user"]["name"].as_str(), refused[0]["data"]["by"].as_str()),
        (Some("alice"), Some("node"))
    );

    let body = json!({ "login": "owner", "password": "a long password" });
    assert_eq!(client.login_from("198.51.100.23", body.clone()).await.status, StatusCode::OK);
    assert_eq!(client.login_from("198.51.100.23", body).await.status, StatusCode::OK);
    let signed_in = told("signin.new_address").await;
    assert_eq!(signed_in.len(), 1, "{signed_in:?}");
    assert_eq!(signed_in[0]["data"]["address"], "198.51.100.23");
}

/// An admin changes their own password with the current one: a wrong current one counts as a
/// failed sign-in, the new one keeps the rules, every other session ends, a token cannot.
#[tokio::test]
async fn a_password_is_changed_with_the_current_one_and_other_sessions_end() {
    let mut client = Client::signed_in(false).await;
    let login = |password: &str| json!({ "login": "owner", "password": password });
    let elsewhere = client.post("/login", login("a long password")).await;
    let other = Client { control: client.control.clone(), cookie: Some(cookie_of(&elsewhere.headers)), bearer: None };
    assert_eq!(other.get("/me").await.status, StatusCode::OK);

    let wrong = client.post("/password", json!({ "current": "not it at all", "new": "another long one" })).await;
    assert_eq!((wrong.status, wrong.code().as_str()), (StatusCode::UNAUTHORIZED, "bad_current"));
    assert_eq!(wrong.json()["tries_left"], 9, "a wrong current password counts as a failed sign-in");
    let short = client.post("/password", json!({ "current": "a long password", "new": "short" })).await;
    assert_eq!((short.status, short.code().as_str()), (StatusCode::BAD_REQUEST, "bad_password"));
    let same = client.post("/password", json!({ "current": "a long password", "new": "a long password" })).await;
    assert_eq!(same.code(), "same_password");
    let token = client.post("/tokens", json!({ "name": "t", "scope": "admin" })).await.json()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let scripted = Client { control: client.control.clone(), cookie: None, bearer: Some(token) };
    let by_token = scripted.post("/password", json!({ "current": "a long password", "new": "another long one" })).await;
    assert_eq!((by_token.status, by_token.code().as_str()), (StatusCode::FORBIDDEN, "session_only"));

    let changed = client.post("/password", json!({ "current": "a long password", "new": "another long one" })).await;
    assert_eq!(changed.status, StatusCode::OK, "{}", String::from_utf8_lossy(&changed.body));
    assert_eq!(changed.json()["sessions_ended"], 1);
    assert_eq!(other.get("/me").await.status, StatusCode::UNAUTHORIZED, "the other session ended");
    assert_eq!(client.get("/me").await.status, StatusCode::OK, "this one goes on");
    assert_eq!(client.post("/login", login("a long password")).await.code(), "bad_login");
    let again = client.post("/login", login("another long one")).await;
    assert_eq!(again.status, StatusCode::OK);
    client.cookie = Some(cookie_of(&again.headers));
    let audit = client.get("/audit").await.json().to_string();
    assert!(audit.contains("password.change") && !audit.contains("another long one"), "{audit}");
}
