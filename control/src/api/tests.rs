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
mod releases;
mod roles;
mod routing;
mod spans;

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

/// Enrolls a node through the node API; returns its id and key.
async fn enroll(client: &Client, groups: Value) -> (u64, SecretKey) {
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
const CONTROL_HOST: &str = "panel.example.net:8443";

/// A node's signed request header for `method` on `path` (under the API prefix) at
/// [`CONTROL_HOST`] with `body`.
fn node_signature(node: u64, key: &SecretKey, method: &str, path: &str, body: &[u8]) -> String {
    let request = nodeauth::Request { method, host: CONTROL_HOST, path_and_query: path, body };
    nodeauth::sign(key, node, &request, now(), &mut rand_core::OsRng)
}

/// A node's request to control: `path` (under the API prefix), at `host`, with `auth` and
/// `body` (a `GET` when it is empty).
async fn node_request(client: &Client, host: &str, path: &str, auth: &str, body: Vec<u8>) -> Answer {
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

async fn node_get(client: &Client, node: u64, key: &SecretKey, path_and_query: &str) -> Answer {
    let path = format!("/{}{path_and_query}", client.app().config.edge.api_prefix);
    let auth = node_signature(node, key, "GET", &path, b"");
    node_request(client, CONTROL_HOST, &path, &auth, Vec::new()).await
}

async fn node_usage(client: &Client, node: u64, key: &SecretKey, body: Vec<u8>) -> Answer {
    let path = format!("/{}/nodes/{node}/usage", client.app().config.edge.api_prefix);
    let auth = node_signature(node, key, "POST", &path, &body);
    node_request(client, CONTROL_HOST, &path, &auth, body).await
}

fn report(key: &SecretKey, node: u64, seq: u64, users: Vec<UserUsage>) -> Vec<u8> {
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

fn set_of(answer: &Answer) -> CredentialSet {
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
fn presence_report(key: &SecretKey, node: u64, seq: u64, presence: &[(u64, u32, u32, u32)]) -> Vec<u8> {
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
