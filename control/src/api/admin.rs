//! The admin API (JSON), under `/<admin prefix>/api`. Reads need the `read` scope, changes
//! to users, nodes and groups need `operate`, tokens need `admin`; the owner's session holds
//! every scope.

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use hearth_shared::ct_eq;
use serde::Deserialize;
use serde_json::json;

use super::{Auth, Body, client_ip, refuse};
use crate::app::{App, Counters, now};
use crate::auth::{self, Principal, Scope};
use crate::error::Error;
use crate::settings::{MAX_ANNOUNCE, MAX_RULE_TEXT, MAX_RULES, MAX_TITLE};
use crate::store::nodes::{self as node_store, GroupInput, MAX_HOST, MAX_TEXT, NodeInput};
use crate::store::users::{self as user_store, ListQuery, MAX_BULK, MAX_NAME, MAX_NOTE, UserInput};

mod edges;
mod telegram;
mod webhooks;

type Reply = Result<Response, Response>;

/// The longest setup token, in bytes (they are 43).
const MAX_SECRET: usize = 128;
/// The longest second-factor code, in bytes (a recovery code is 14, an app's code 6).
const MAX_CODE: usize = 64;
/// The most groups one user or node is put in at once.
const MAX_GROUPS: usize = 100;
/// The longest URL (the profile's links, the edge, the link base), in bytes.
const MAX_URL: usize = 512;
/// The longest User-Agent a preview takes, and the longest search, in bytes.
const MAX_QUERY: usize = 1024;

/// The bounds of a request body's fields, checked as soon as it is parsed, before any work is
/// done with it (the stores check the content again, in full, against the same limits).
trait Bounded {
    fn check_bounds(&self) -> Result<(), Error>;
}

/// A JSON body within its bounds: a field too long is a 400 naming it.
struct Input<T>(T);

impl<T: serde::de::DeserializeOwned + Bounded, S: Send + Sync> axum::extract::FromRequest<S> for Input<T> {
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Response> {
        let Body(value) = Body::<T>::from_request(req, state).await?;
        value.check_bounds().map_err(fail)?;
        Ok(Input(value))
    }
}

fn too_long(field: &str, limit: &str) -> Error {
    Error::invalid("too_long", format!("{field} must be at most {limit}"))
}

/// At most `max` characters (surrounding spaces aside, as names are trimmed).
fn chars(field: &str, value: &str, max: usize) -> Result<(), Error> {
    if value.trim().chars().nth(max).is_some() {
        return Err(too_long(field, &format!("{max} characters")));
    }
    Ok(())
}

/// At most `max` bytes.
fn bytes(field: &str, value: &str, max: usize) -> Result<(), Error> {
    if value.len() > max {
        return Err(too_long(field, &format!("{max} bytes")));
    }
    Ok(())
}

/// At most `max` entries, each of at most `max_chars` characters.
fn list(field: &str, values: &[String], max: usize, max_chars: usize) -> Result<(), Error> {
    if values.len() > max {
        return Err(too_long(field, &format!("{max} entries")));
    }
    values.iter().try_for_each(|value| chars(field, value, max_chars))
}

fn opt(value: &Option<String>) -> &str {
    value.as_deref().unwrap_or_default()
}

impl Bounded for UserInput {
    fn check_bounds(&self) -> Result<(), Error> {
        chars("name", opt(&self.name), MAX_NAME)?;
        bytes("reset", opt(&self.reset), 16)?;
        bytes("on_quota", opt(&self.on_quota), 16)?;
        bytes("note", opt(&self.note), MAX_NOTE)?;
        list("groups", self.groups.as_deref().unwrap_or_default(), MAX_GROUPS, MAX_NAME)
    }
}

impl Bounded for NodeInput {
    fn check_bounds(&self) -> Result<(), Error> {
        chars("name", opt(&self.name), MAX_NAME)?;
        bytes("host", opt(&self.host), MAX_HOST)?;
        bytes("hop", opt(&self.hop), 32)?;
        bytes("sni", opt(&self.sni), MAX_TEXT)?;
        bytes("tls", opt(&self.tls), 16)?;
        bytes("obfs", opt(&self.obfs), MAX_TEXT)?;
        bytes("masquerade", opt(&self.masquerade), MAX_TEXT)?;
        list("groups", self.groups.as_deref().unwrap_or_default(), MAX_GROUPS, MAX_NAME)
    }
}

impl Bounded for GroupInput {
    fn check_bounds(&self) -> Result<(), Error> {
        chars("name", opt(&self.name), MAX_NAME)?;
        bytes("note", opt(&self.note), MAX_TEXT)?;
        bytes("on_quota", opt(&self.on_quota), 16)
    }
}

fn ok(value: serde_json::Value) -> Reply {
    Ok(axum::Json(value).into_response())
}

fn fail(e: Error) -> Response {
    e.into_response()
}

pub(super) fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/api/openapi.json", get(openapi))
        .route("/api/setup", post(setup).layer(DefaultBodyLimit::max(super::SIGN_IN_BODY)))
        .route("/api/login", post(login).layer(DefaultBodyLimit::max(super::SIGN_IN_BODY)))
        .route("/api/logout", post(logout))
        .route("/api/me", get(me))
        .route("/api/sessions", get(list_sessions).delete(end_other_sessions))
        .route("/api/sessions/{id}", delete(end_session))
        .route("/api/totp", get(totp_status))
        .route("/api/totp/enroll", post(totp_enroll))
        .route("/api/totp/confirm", post(totp_confirm))
        .route("/api/totp/disable", post(totp_disable))
        .route("/api/status", get(status))
        .route("/api/users", get(list_users).post(create_user))
        .route("/api/users/bulk", post(bulk_create).layer(DefaultBodyLimit::max(super::MAX_BODY)))
        .route("/api/users/{id}", get(get_user).patch(update_user).delete(delete_user))
        .route("/api/users/{id}/link", get(user_link))
        .route("/api/users/{id}/usage", get(user_usage))
        .route("/api/users/{id}/preview", get(user_preview))
        .route("/api/usage", get(usage))
        .route("/api/online", get(online))
        .route("/api/users/{id}/extend", post(extend_user))
        .route("/api/users/{id}/reset-traffic", post(reset_traffic))
        .route("/api/users/{id}/rotate", post(rotate_link))
        .route("/api/users/{id}/disable", post(disable_user))
        .route("/api/users/{id}/enable", post(enable_user))
        .route("/api/users/{id}/kick", post(kick_user))
        .route("/api/users/{id}/hwid", get(user_hwid))
        .route("/api/users/{id}/aliases", get(user_aliases).delete(retire_alias))
        .route("/api/import", post(import_users).layer(DefaultBodyLimit::max(crate::import::json::MAX_BYTES)))
        .route("/api/export", get(export_users))
        .route("/api/users/{id}/hwid/{key}", delete(forget_hwid))
        .route("/api/nodes", get(list_nodes).post(create_node))
        .route("/api/nodes/{id}", get(get_node).patch(update_node).delete(delete_node))
        .route("/api/nodes/{id}/enroll-token", post(enroll_token))
        .route("/api/nodes/{id}/usage", get(node_usage))
        .route("/api/releases", get(list_releases))
        .route("/api/releases/{version}/rollout", post(start_rollout))
        .route("/api/releases/{version}/stop", post(stop_rollout))
        .route("/api/groups", get(list_groups).post(create_group))
        .route("/api/groups/{id}", axum::routing::patch(update_group).delete(delete_group))
        .route("/api/tokens", get(list_tokens).post(create_token))
        .route("/api/tokens/{id}", delete(revoke_token))
        .route("/api/audit", get(audit))
        .route("/api/settings", get(get_settings).patch(update_settings))
        .route("/api/edges", get(edges::list_edges).post(edges::add_edge))
        .route("/api/edges/{id}", axum::routing::patch(edges::update_edge).delete(edges::remove_edge))
        .route("/api/events", get(webhooks::list_events))
        .route("/api/webhooks", get(webhooks::list_webhooks).post(webhooks::add_webhook))
        .route("/api/webhooks/{id}", delete(webhooks::remove_webhook))
        .route("/api/webhooks/{id}/deliveries", get(webhooks::deliveries))
        .route("/api/webhooks/{id}/test", post(webhooks::test_webhook))
        .route("/api/telegram", get(telegram::get).put(telegram::set).delete(telegram::clear))
        .route("/api/users/{id}/telegram", axum::routing::put(telegram::set_user_chat))
        .route("/metrics", get(crate::metrics::handler))
        // Every other call takes a small body; the bulk create above and sign-in keep their own.
        .layer(DefaultBodyLimit::max(super::ADMIN_BODY))
        .layer(axum::middleware::map_response(|mut response: Response| async move {
            response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }))
}

/// The OpenAPI description of this API (`docs/admin-api.openapi.json`).
pub(super) const OPENAPI: &str = include_str!("../../../docs/admin-api.openapi.json");

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

fn session_cookie(value: &str, max_age: u64) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{}={value}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age={max_age}",
        auth::COOKIE
    ))
    .expect("a cookie of URL-safe characters")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetupRequest {
    token: String,
    login: String,
    password: String,
}

impl Bounded for SetupRequest {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("token", &self.token, MAX_SECRET)?;
        chars("login", &self.login, MAX_NAME)?;
        bytes("password", &self.password, auth::MAX_PASSWORD)
    }
}

/// First-run setup: the one-time token printed at start creates the owner.
async fn setup(
    State(app): State<Arc<App>>,
    parts: axum::http::request::Parts,
    Input(req): Input<SetupRequest>,
) -> Reply {
    let ip = client_ip(&parts, &app);
    let agent = browser(&parts);
    app.spend(ip).map_err(|retry| fail(Error::TooMany(retry)))?;
    let expected = app.setup_token.lock().expect("setup lock").clone();
    let Some(expected) = expected else {
        return Err(fail(Error::Conflict("setup is already done; sign in instead".into())));
    };
    if !ct_eq(expected.as_bytes(), req.token.as_bytes()) {
        return Err(refuse(StatusCode::FORBIDDEN, "bad_setup_token", "this setup link is not valid"));
    }
    let login = user_store::check_name(&req.login, "login").map_err(fail)?;
    let hash = app.hasher.hash(req.password).await.map_err(fail)?;
    let now = now();
    let address = auth::address_hash(ip);
    let cookie = app
        .db
        .write(move |tx| {
            auth::create_owner(tx, &login, &hash, now)?;
            auth::remember_address(tx, &address, now)?;
            auth::start_session(tx, now, &ip.to_string(), &agent)
        })
        .await
        .map_err(fail)?;
    *app.setup_token.lock().expect("setup lock") = None;
    tracing::info!("setup done: the owner exists");
    let mut response = axum::Json(json!({ "ok": true })).into_response();
    response.headers_mut().insert(header::SET_COOKIE, session_cookie(&cookie, auth::SESSION_ABSOLUTE));
    Ok(response)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginRequest {
    login: String,
    password: String,
    /// The authenticator app's code (or a recovery code), when two-step sign-in is on.
    #[serde(default)]
    code: Option<String>,
}

impl Bounded for LoginRequest {
    fn check_bounds(&self) -> Result<(), Error> {
        chars("login", &self.login, MAX_NAME)?;
        bytes("password", &self.password, auth::MAX_PASSWORD)?;
        bytes("code", self.code.as_deref().unwrap_or_default(), MAX_CODE)
    }
}

/// What sign-in knows before it checks the password.
struct SignInFacts {
    /// The owner's login and password hash.
    owner: Option<(String, String)>,
    /// Two-step sign-in's state.
    totp: auth::TotpState,
    /// Whether the owner signed in from this address recently.
    known: bool,
    /// Whether the code is an unspent recovery code.
    recovery: bool,
}

/// A second factor that checked out, not yet spent.
enum GoodCode {
    /// An authenticator code, for this time step.
    Totp(u64),
    /// A recovery code (its hash).
    Recovery([u8; 32]),
}

/// Signing in (see [`crate::auth`] for the limits): the address's lockout, then (two-step
/// sign-in on and a code sent) the code, checked without spending it; then, from an address
/// the owner has not signed in from and without a good code (an authenticator code gets past
/// once), a check from the login's hourly budget; then the password; then the code is spent
/// and the session starts.
async fn login(
    State(app): State<Arc<App>>,
    parts: axum::http::request::Parts,
    Input(req): Input<LoginRequest>,
) -> Reply {
    let ip = client_ip(&parts, &app);
    let agent = browser(&parts);
    let now = now();
    app.spend(ip).map_err(|retry| fail(Error::TooMany(retry)))?;
    if let Some(retry) = app.lockouts.locked(ip, now) {
        return Err(fail(Error::TooMany(retry)));
    }
    let code = req.code.as_deref().map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned);
    let address = auth::address_hash(ip);
    let recovery_hash = code.as_deref().filter(|c| c.len() > 8).map(crate::totp::recovery_hash);
    let facts = app
        .db
        .read(move |c| {
            Ok(SignInFacts {
                owner: auth::owner(c)?,
                totp: auth::totp_state(c)?,
                known: auth::known_address(c, &address, now)?,
                recovery: match &recovery_hash {
                    Some(hash) => auth::recovery_code_exists(c, hash)?,
                    None => false,
                },
            })
        })
        .await
        .map_err(fail)?;
    let good_code = match (&facts.totp.secret, &code) {
        (Some(sealed), Some(code)) => {
            let secret = app.signer.vault.open(crate::secrets::Purpose::Totp, sealed).map_err(fail)?;
            match crate::totp::check(&secret, code, now, facts.totp.last_step) {
                Some(step) => Some(GoodCode::Totp(step)),
                None if facts.recovery => recovery_hash.map(GoodCode::Recovery),
                None => {
                    // A wrong code is a guess like a wrong password: it counts for the address
                    // (even when the budget is spent, or codes could be tried there without
                    // end) and, from an unknown one, takes a check from the login's budget.
                    let wrong = refused(&app, ip, now, "bad_totp", "that code is wrong, expired or already used");
                    if !facts.known {
                        app.lockouts.take(&req.login, now).map_err(|retry| fail(Error::TooMany(retry)))?;
                    }
                    return Err(wrong);
                }
            }
        }
        _ => None,
    };
    let past_budget = facts.known
        || match good_code {
            Some(GoodCode::Totp(step)) => app.lockouts.pass_code(step),
            Some(GoodCode::Recovery(_)) => true,
            None => false,
        };
    if !past_budget {
        app.lockouts.take(&req.login, now).map_err(|retry| fail(Error::TooMany(retry)))?;
    }
    let stored = facts.owner.filter(|(login, _)| login.eq_ignore_ascii_case(req.login.trim())).map(|(_, hash)| hash);
    let good = app.hasher.verify(req.password, stored, past_budget).await.map_err(fail)?;
    if !good {
        return Err(refused(&app, ip, now, "bad_login", "wrong login or password"));
    }
    // A missing code is a step of the flow, not a failure.
    if facts.totp.secret.is_some() && good_code.is_none() {
        return Err(refuse(
            StatusCode::UNAUTHORIZED,
            "totp_required",
            "two-step sign-in is on: send the code from your authenticator app as `code`",
        ));
    }
    let cookie = app
        .db
        .write(move |tx| {
            let spent = match good_code {
                None => true,
                Some(GoodCode::Totp(step)) => auth::totp_use_step(tx, step)?,
                Some(GoodCode::Recovery(hash)) => {
                    let spent = auth::use_recovery_code(tx, &hash, now)?;
                    if spent {
                        tracing::warn!("owner signed in with a recovery code");
                    }
                    spent
                }
            };
            if !spent {
                return Ok(None);
            }
            if !auth::known_address(tx, &address, now)? {
                let data = json!({ "address": ip.to_string() });
                crate::store::events::emit(tx, now, "signin.new_address", "owner", &data)?;
            }
            auth::remember_address(tx, &address, now)?;
            auth::start_session(tx, now, &ip.to_string(), &agent).map(Some)
        })
        .await
        .map_err(fail)?;
    // Spent by a sign-in at the same moment.
    let Some(cookie) = cookie else {
        return Err(refused(&app, ip, now, "bad_totp", "that code is wrong, expired or already used"));
    };
    app.lockouts.succeed(ip);
    tracing::info!(client = %ip, "owner signed in");
    let mut response = axum::Json(json!({ "ok": true })).into_response();
    response.headers_mut().insert(header::SET_COOKIE, session_cookie(&cookie, auth::SESSION_ABSOLUTE));
    Ok(response)
}

/// A refused sign-in: counted for the address, logged without the login.
fn refused(app: &App, ip: std::net::IpAddr, now: u64, code: &str, message: &str) -> Response {
    app.lockouts.fail(ip, now);
    Counters::add(&app.counters.logins_failed, 1);
    tracing::info!(client = %ip, reason = code, "sign-in refused");
    refuse(StatusCode::UNAUTHORIZED, code, message)
}

/// Only the owner, in a browser session, manages two-step sign-in (not API tokens).
fn owner_only(auth: &Auth) -> Result<(), Response> {
    match auth.0 {
        Principal::Owner { .. } => Ok(()),
        Principal::Token { .. } => {
            Err(refuse(StatusCode::FORBIDDEN, "owner_only", "only the owner, signed in, can change two-step sign-in"))
        }
    }
}

async fn totp_status(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    owner_only(&auth)?;
    let state = app.db.read(auth::totp_state).await.map_err(fail)?;
    ok(json!({ "enabled": state.secret.is_some(), "recovery_left": state.recovery_left }))
}

/// Starts turning two-step sign-in on: a new secret, as a QR code for the app.
async fn totp_enroll(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    owner_only(&auth)?;
    let secret = crate::secrets::random_bytes::<20>();
    let sealed = app.signer.vault.seal(crate::secrets::Purpose::Totp, &secret);
    app.db.write(move |tx| auth::totp_begin(tx, &sealed)).await.map_err(fail)?;
    let login = app.db.read(auth::owner).await.map_err(fail)?.map(|(login, _)| login).unwrap_or_default();
    let title = app.signer.profile.read().expect("profile lock").title.clone();
    let uri = crate::totp::uri(&secret, &title, &login);
    let qr_svg = hearth_shared::render::page::qr_svg(&uri);
    ok(json!({ "secret": crate::totp::base32(&secret), "uri": uri, "qr_svg": qr_svg }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TotpConfirm {
    code: String,
}

impl Bounded for TotpConfirm {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("code", &self.code, MAX_CODE)
    }
}

/// Finishes turning two-step sign-in on with a first code; answers with the recovery codes,
/// once.
async fn totp_confirm(State(app): State<Arc<App>>, auth: Auth, Input(req): Input<TotpConfirm>) -> Reply {
    owner_only(&auth)?;
    let now = now();
    let state = app.db.read(auth::totp_state).await.map_err(fail)?;
    let Some(pending) = state.pending else {
        return Err(fail(Error::Conflict("no enrollment is under way; start again".into())));
    };
    let secret = app.signer.vault.open(crate::secrets::Purpose::Totp, &pending).map_err(fail)?;
    let Some(step) = crate::totp::check(&secret, &req.code, now, 0) else {
        return Err(fail(Error::invalid("bad_totp", "that code is wrong or expired; check the phone's clock")));
    };
    let codes = crate::totp::recovery_codes();
    let hashes: Vec<[u8; 32]> = codes.iter().map(|code| crate::totp::recovery_hash(code)).collect();
    app.db.write(move |tx| auth::totp_enable(tx, step, &hashes, now)).await.map_err(fail)?;
    tracing::info!("two-step sign-in turned on");
    ok(json!({ "recovery_codes": codes }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TotpDisable {
    password: String,
}

impl Bounded for TotpDisable {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("password", &self.password, auth::MAX_PASSWORD)
    }
}

/// Turns two-step sign-in off; needs the password again.
async fn totp_disable(State(app): State<Arc<App>>, auth: Auth, Input(req): Input<TotpDisable>) -> Reply {
    owner_only(&auth)?;
    let owner = app.db.read(auth::owner).await.map_err(fail)?;
    if !app.hasher.verify(req.password, owner.map(|(_, hash)| hash), true).await.map_err(fail)? {
        return Err(refuse(StatusCode::UNAUTHORIZED, "bad_password", "that is not the owner's password"));
    }
    let now = now();
    app.db.write(move |tx| auth::totp_disable(tx, now)).await.map_err(fail)?;
    tracing::info!("two-step sign-in turned off");
    ok(json!({ "enabled": false }))
}

/// The User-Agent a session is started with, for the owner's list of sessions.
fn browser(parts: &axum::http::request::Parts) -> String {
    parts.headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

/// The owner's sessions (address, browser, last seen); the asking one marked.
async fn list_sessions(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    let current = match auth.need(Scope::Admin)? {
        Principal::Owner { session } => Some(*session),
        Principal::Token { .. } => None,
    };
    let list = app.db.read(move |c| auth::sessions(c, current.as_ref(), now())).await.map_err(fail)?;
    ok(json!({ "sessions": list }))
}

/// Ends one session (the asking one too: that is signing out).
async fn end_session(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<i64>) -> Reply {
    change(&app, &auth, Scope::Admin, move |tx, _, actor, now| {
        if !auth::end_session_id(tx, id)? {
            return Err(Error::NotFound("session"));
        }
        crate::store::audit(tx, now, actor, "session.end", &format!("session {id}"), "")
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Ends every session but the asking one (every one, asked with a token).
async fn end_other_sessions(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    let keep = match &auth.0 {
        Principal::Owner { session } => Some(*session),
        Principal::Token { .. } => None,
    };
    let ended = change(&app, &auth, Scope::Admin, move |tx, _, actor, now| {
        let ended = auth::end_other_sessions(tx, keep.as_ref())?;
        crate::store::audit(tx, now, actor, "session.end_others", "", &ended.to_string())?;
        Ok(ended)
    })
    .await?;
    ok(json!({ "ended": ended }))
}

async fn logout(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    if let Principal::Owner { session } = auth.0 {
        app.db.write(move |tx| auth::end_session(tx, &session)).await.map_err(fail)?;
    }
    let mut response = axum::Json(json!({ "ok": true })).into_response();
    response.headers_mut().insert(header::SET_COOKIE, session_cookie("", 0));
    Ok(response)
}

async fn me(auth: Auth) -> Reply {
    let scope = match &auth.0 {
        Principal::Owner { .. } => Scope::Admin,
        Principal::Token { scope, .. } => *scope,
    };
    ok(json!({ "actor": auth.0.actor(), "scope": scope }))
}

async fn status(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Read)?;
    let now = now();
    let (overview, held) =
        app.db.read(move |c| Ok((crate::store::overview(c, now)?, crate::store::held(c)?))).await.map_err(fail)?;
    let edges: Vec<serde_json::Value> = overview.edges.iter().map(|s| edge_json(&app, s)).collect();
    // The first failing edge, named: the overview's alert.
    let last_error =
        overview.edges.iter().find_map(|s| s.edge.last_error.as_ref().map(|error| format!("{}: {error}", s.edge.name)));
    ok(json!({
        "users": overview.users.into_iter().map(|(k, v)| (k, json!(v))).collect::<serde_json::Map<String, serde_json::Value>>(),
        "nodes": {
            "total": overview.nodes,
            "online": overview.online,
            "sets_expiring": overview.expiring,
            "limited": overview.limited.iter().map(|(id, name, until)| json!({ "id": id, "name": name, "until": until })).collect::<Vec<_>>(),
        },
        "keys": {
            "root": app.config.root.to_string(),
            "offline_here": offline_keys_here(&app.config.data_dir),
        },
        "edge": {
            "url": app.edge_url(),
            "pending": overview.pending,
            "held": held,
            "held_total": overview.held,
            "last_push": overview.edges.iter().map(|s| s.edge.last_push).max().unwrap_or(0),
            "last_error": last_error,
            "last_drain": overview.edges.iter().map(|s| s.edge.last_drain).max().unwrap_or(0),
        },
        "edges": edges,
    }))
}

/// One edge as the API shows it (never its push token).
pub(super) fn edge_json(app: &App, status: &crate::store::EdgeStatus) -> serde_json::Value {
    let edge = &status.edge;
    let base = app.link_bases().into_iter().find(|link| link.edge == edge.name).map(|link| link.base);
    json!({
        "id": edge.id,
        "name": edge.name,
        "url": edge.url,
        "link_base": base,
        "state": edge.state,
        "position": edge.position,
        "own_credentials": edge.push_token.is_some(),
        "pending": status.pending,
        "held": status.held,
        "last_push": edge.last_push,
        "last_error": edge.last_error,
        "last_drain": edge.last_drain,
        "failing_since": edge.error_since,
        "added": edge.added,
    })
}

/// The offline keys `init` wrote that are still in the data directory (file names only).
fn offline_keys_here(dir: &std::path::Path) -> Vec<String> {
    let paths = crate::keyring::Paths::new(dir);
    [hearth_shared::keys::Role::Root, hearth_shared::keys::Role::Recovery]
        .into_iter()
        .map(|role| paths.secret(role))
        .filter(|path| path.exists())
        .filter_map(|path| path.file_name().map(|name| name.to_string_lossy().into_owned()))
        .collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageQuery {
    days: Option<u64>,
}

/// Whose traffic a series sums.
#[derive(Clone, Copy)]
enum Traffic {
    Everyone,
    User(u64),
    Node(u64),
}

/// Traffic per day for the last `days` (1 to 366, default 30), oldest first, days without
/// traffic included as zeros.
fn daily_usage(
    conn: &rusqlite::Connection,
    whose: Traffic,
    days: u64,
    now: u64,
) -> Result<Vec<serde_json::Value>, Error> {
    let today = now / 86_400;
    let first = today + 1 - days;
    let (sql, id) = match whose {
        Traffic::Everyone => (
            "SELECT day, sum(up), sum(down) FROM usage_daily WHERE day >= ?1 AND ?2 IS NULL GROUP BY day ORDER BY day",
            None,
        ),
        Traffic::User(id) => {
            ("SELECT day, up, down FROM usage_daily WHERE day >= ?1 AND user_id = ?2 ORDER BY day", Some(id))
        }
        Traffic::Node(id) => {
            ("SELECT day, up, down FROM node_usage_daily WHERE day >= ?1 AND node_id = ?2 ORDER BY day", Some(id))
        }
    };
    let mut statement = conn.prepare_cached(sql)?;
    let rows: Vec<(u64, u64, u64)> = statement
        .query_map(rusqlite::params![first, id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<Result<_, _>>()?;
    let mut out = Vec::with_capacity(days as usize);
    let mut rows = rows.into_iter().peekable();
    for day in first..=today {
        let (up, down) = match rows.peek() {
            Some((d, up, down)) if *d == day => {
                let value = (*up, *down);
                rows.next();
                value
            }
            _ => (0, 0),
        };
        out.push(json!({ "day": day * 86_400, "up": up, "down": down }));
    }
    Ok(out)
}

/// One node's traffic per day.
async fn node_usage(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Query(query): Query<UsageQuery>,
) -> Reply {
    series_of(&app, &auth, &query, Traffic::Node(id)).await
}

/// The daily series of one user or node (404 if there is no such one).
async fn series_of(app: &Arc<App>, auth: &Auth, query: &UsageQuery, whose: Traffic) -> Reply {
    auth.need(Scope::Read)?;
    let days = query.days.unwrap_or(30).clamp(1, 366);
    let now = now();
    let series = app
        .db
        .read(move |c| {
            match whose {
                Traffic::User(id) => {
                    user_store::get(c, id)?;
                }
                Traffic::Node(id) => {
                    node_store::get(c, id)?;
                }
                Traffic::Everyone => {}
            }
            daily_usage(c, whose, days, now)
        })
        .await
        .map_err(fail)?;
    ok(json!({ "days": series }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PreviewQuery {
    #[serde(default)]
    ua: String,
}

/// What an app sending `ua` receives from the user's link: the format chosen, the headers
/// and the body, exactly as the edge renders them (from the same signed snapshot).
async fn user_preview(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Query(query): Query<PreviewQuery>,
) -> Reply {
    use hearth_shared::agent::Wants;
    use hearth_shared::render::Format;
    // It shows the credential, as the link does.
    auth.need(Scope::Operate)?;
    bytes("ua", &query.ua, MAX_QUERY).map_err(fail)?;
    let state = app.clone();
    let (token, stored) = app
        .db
        .read(move |c| {
            let token = user_store::token(c, &state.signer, id)?;
            let stored = crate::publish::envelope(c, &hearth_shared::wire::stream::snapshot(&token.hash()))?;
            Ok((token, stored))
        })
        .await
        .map_err(fail)?;
    let snapshot = stored
        .and_then(|(_, bytes)| {
            let body = hearth_shared::envelope::Envelope::stored_body(&bytes)?.to_vec();
            hearth_shared::seal::open(&body, &token).ok()
        })
        .ok_or_else(|| fail(Error::Internal("the user's snapshot does not open".into())))?;
    let wants = hearth_shared::agent::match_user_agent(query.ua.trim(), &app.ua_rules.read().expect("rules lock"));
    let url = format!("{}/{}", app.sub_url(), token.to_link_form());
    let answer = hearth_shared::render::answer(&snapshot, wants, &url);
    let format = match wants {
        Wants::Page => "page".to_owned(),
        Wants::Profile(Format::Base64) => "base64".to_owned(),
        Wants::Profile(Format::Mihomo) => "mihomo".to_owned(),
        Wants::Profile(Format::SingBox(v)) => format!("sing-box {}.{}", v.major, v.minor),
    };
    ok(json!({ "format": format, "headers": answer.headers, "body": answer.body }))
}

fn settings_json(app: &App) -> serde_json::Value {
    let profile = app.signer.profile.read().expect("profile lock").clone();
    let addresses = app.addresses();
    json!({
        "profile": profile,
        "edge_url": addresses.set.edge_url,
        "sub_url": addresses.sub_url,
        "sub_url_set": addresses.set.sub_url,
        "primary": app.sub_url(),
        "ua_rules": *app.ua_rules.read().expect("rules lock"),
        "public_url": app.config.public_url,
    })
}

async fn get_settings(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Read)?;
    settings_reply(&app).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsInput {
    #[serde(default)]
    profile: Option<crate::settings::ProfileInput>,
    /// The edge's URL; empty: none (control serves links itself).
    #[serde(default)]
    edge_url: Option<String>,
    /// The base of links; empty: derived from the edge (or control's public URL).
    #[serde(default)]
    sub_url: Option<String>,
    /// The owner's User-Agent rules (replaces them all).
    #[serde(default)]
    ua_rules: Option<Vec<hearth_shared::agent::UaRule>>,
    /// What nodes do with a device over a user's limit: `refuse` or `drop_oldest`.
    #[serde(default)]
    device_policy: Option<String>,
}

impl Bounded for SettingsInput {
    fn check_bounds(&self) -> Result<(), Error> {
        if let Some(profile) = &self.profile {
            chars("title", opt(&profile.title), MAX_TITLE)?;
            chars("announce", opt(&profile.announce), MAX_ANNOUNCE)?;
            bytes("support_url", opt(&profile.support_url), MAX_URL)?;
            bytes("web_page_url", opt(&profile.web_page_url), MAX_URL)?;
        }
        bytes("edge_url", opt(&self.edge_url), MAX_URL)?;
        bytes("sub_url", opt(&self.sub_url), MAX_URL)?;
        bytes("device_policy", opt(&self.device_policy), 16)?;
        let rules = self.ua_rules.as_deref().unwrap_or_default();
        if rules.len() > MAX_RULES {
            return Err(too_long("ua_rules", &format!("{MAX_RULES} entries")));
        }
        rules.iter().try_for_each(|rule| chars("ua_rules", &rule.contains, MAX_RULE_TEXT))
    }
}

/// An address from the owner: empty clears it, anything else must be an http(s) URL.
fn address(what: &str, value: Option<String>, current: Option<String>) -> Result<Option<String>, Response> {
    match value {
        None => Ok(current),
        Some(value) if value.trim().is_empty() => Ok(None),
        Some(value) => {
            crate::config::check_url(what, &value).map(Some).map_err(|e| fail(Error::invalid("bad_url", e.to_string())))
        }
    }
}

/// Changes the subscription profile (every link carries it at once: each snapshot is signed
/// again, and pushed) and where pushes and links go (a new edge gets everything; nodes learn
/// it from control's next answer).
async fn update_settings(State(app): State<Arc<App>>, auth: Auth, Input(input): Input<SettingsInput>) -> Reply {
    auth.need(Scope::Admin)?;
    let current = app.addresses().set;
    let edge_url = address("edge_url", input.edge_url, current.edge_url.clone())?;
    let sub_url = address("sub_url", input.sub_url, current.sub_url.clone())?;
    // Everything is checked before anything changes.
    if let Some(rules) = &input.ua_rules {
        crate::settings::check_rules(rules).map_err(fail)?;
    }
    let policy = match input.device_policy.as_deref() {
        Some(name) => Some(
            hearth_shared::wire::DevicePolicy::from_name(name)
                .ok_or_else(|| fail(Error::invalid("bad_device_policy", "device_policy is refuse or drop_oldest")))?,
        ),
        None => None,
    };
    let profile = match input.profile {
        Some(change) => {
            let current = app.signer.profile.read().expect("profile lock").clone();
            Some(crate::settings::apply(&current, change).map_err(fail)?)
        }
        None => None,
    };
    if let Some(profile) = profile {
        let signed = change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
            crate::settings::set_profile(tx, &app.signer, &profile, actor, now)
        })
        .await?;
        tracing::info!(signed, "subscription profile changed");
    }
    if let Some(rules) = input.ua_rules {
        let rules: Vec<_> = rules
            .into_iter()
            .map(|rule| hearth_shared::agent::UaRule { contains: rule.contains.trim().to_owned(), target: rule.target })
            .collect();
        let saved = rules.clone();
        change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
            crate::settings::set_ua_rules(tx, &app.signer, &saved, actor, now)
        })
        .await?;
        *app.ua_rules.write().expect("rules lock") = rules;
    }
    if let Some(policy) = policy {
        change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
            crate::settings::set_device_policy(tx, &app.signer, policy, actor, now)
        })
        .await?;
    }
    let addresses = crate::settings::Addresses { edge_url, sub_url };
    if addresses != current {
        let saved = addresses.clone();
        change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
            crate::settings::save_addresses(tx, &app.config, &saved, actor, now)?;
            crate::publish::edges_changed(tx, &app.signer, now).map(drop)
        })
        .await?;
        app.set_addresses(addresses);
        tracing::info!(edge = app.edge_url().as_deref().unwrap_or("none"), "addresses changed");
    }
    settings_reply(&app).await
}

/// The settings, with those kept only in the database.
async fn settings_reply(app: &App) -> Reply {
    let policy = app.db.read(crate::settings::device_policy).await.map_err(fail)?;
    let mut settings = settings_json(app);
    settings["device_policy"] = json!(policy.as_str());
    ok(settings)
}

/// Who is connected now, from the nodes' last reports: the 200 users with the most devices
/// first, and how many users and devices in all.
async fn online(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Read)?;
    let (list, users, devices) = app.db.read(|c| crate::store::nodes::online(c, 200)).await.map_err(fail)?;
    ok(json!({ "users": users, "devices": devices, "online": list }))
}

/// Everyone's traffic: per day, today and this month (UTC).
async fn usage(State(app): State<Arc<App>>, auth: Auth, Query(query): Query<UsageQuery>) -> Reply {
    auth.need(Scope::Read)?;
    let days = query.days.unwrap_or(30).clamp(1, 366);
    let now = now();
    let (series, month) = app
        .db
        .read(move |c| {
            let series = daily_usage(c, Traffic::Everyone, days, now)?;
            let month: (u64, u64) = c.query_row(
                "SELECT coalesce(sum(up), 0), coalesce(sum(down), 0) FROM usage_daily WHERE day >= ?1",
                [crate::publish::month_start_day(now)],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?;
            Ok((series, month))
        })
        .await
        .map_err(fail)?;
    let today = series.last().cloned().unwrap_or_else(|| json!({ "up": 0, "down": 0 }));
    ok(json!({
        "days": series,
        "today": { "up": today["up"], "down": today["down"] },
        "month": { "up": month.0, "down": month.1 },
    }))
}

/// One user's traffic per day.
async fn user_usage(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Query(query): Query<UsageQuery>,
) -> Reply {
    series_of(&app, &auth, &query, Traffic::User(id)).await
}

async fn list_users(State(app): State<Arc<App>>, auth: Auth, Query(query): Query<ListQuery>) -> Reply {
    auth.need(Scope::Read)?;
    bytes("q", opt(&query.q), MAX_QUERY).map_err(fail)?;
    bytes("status", opt(&query.status), 16).map_err(fail)?;
    chars("group", opt(&query.group), MAX_NAME).map_err(fail)?;
    let page = app.db.read(move |c| user_store::list(c, &query)).await.map_err(fail)?;
    ok(serde_json::to_value(page).expect("a page serializes"))
}

/// A user's view and its subscription link.
fn with_link(app: &App, user: user_store::UserView, token: &hearth_shared::wire::SubToken) -> serde_json::Value {
    let mut value = serde_json::to_value(user).expect("a user serializes");
    value["link"] = json!(format!("{}/{}", app.sub_url(), token.to_link_form()));
    value["links"] = mirrors(app, token);
    value
}

/// A user's link at every edge that still offers links (blocked ones too, for the people
/// who still reach them), in the owner's order.
fn mirrors(app: &App, token: &hearth_shared::wire::SubToken) -> serde_json::Value {
    let links: Vec<_> = app
        .link_bases()
        .into_iter()
        .filter(|base| base.state != crate::store::edges::LinkState::Retired)
        .map(|base| json!({ "edge": base.edge, "state": base.state, "link": format!("{}/{}", base.base, token.to_link_form()) }))
        .collect();
    json!(links)
}

async fn create_user(State(app): State<Arc<App>>, auth: Auth, Input(input): Input<UserInput>) -> Reply {
    let (user, token) = change(&app, &auth, Scope::Operate, move |tx, app, actor, now| {
        let created = user_store::create(tx, &app.signer, actor, &input, now)?;
        Ok((user_store::get(tx, created.id)?, created.token))
    })
    .await?;
    Ok((StatusCode::CREATED, axum::Json(with_link(&app, user, &token))).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkRequest {
    names: Vec<String>,
    #[serde(default)]
    settings: UserInput,
}

impl Bounded for BulkRequest {
    fn check_bounds(&self) -> Result<(), Error> {
        list("names", &self.names, MAX_BULK, MAX_NAME)?;
        self.settings.check_bounds()
    }
}

async fn bulk_create(State(app): State<Arc<App>>, auth: Auth, Input(req): Input<BulkRequest>) -> Reply {
    let created = change(&app, &auth, Scope::Operate, move |tx, app, actor, now| {
        user_store::create_many(tx, &app.signer, actor, &req.names, &req.settings, now)
    })
    .await?;
    let users: Vec<_> = created
        .iter()
        .map(|(name, c)| json!({ "id": c.id, "name": name, "link": format!("{}/{}", app.sub_url(), c.token.to_link_form()) }))
        .collect();
    Ok((StatusCode::CREATED, axum::Json(json!({ "created": users.len(), "users": users }))).into_response())
}

async fn get_user(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    auth.need(Scope::Read)?;
    let user = app.db.read(move |c| user_store::get(c, id)).await.map_err(fail)?;
    ok(serde_json::to_value(user).expect("a user serializes"))
}

async fn user_link(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    auth.need(Scope::Operate)?;
    let state = app.clone();
    let token = app.db.read(move |c| user_store::token(c, &state.signer, id)).await.map_err(fail)?;
    let link = format!("{}/{}", app.sub_url(), token.to_link_form());
    let qr_svg = hearth_shared::render::page::qr_svg(&link);
    ok(json!({ "link": link, "qr_svg": qr_svg, "links": mirrors(&app, &token) }))
}

/// Runs a change as `auth` (who must hold `scope`) in one write transaction, then wakes the
/// publisher and the nodes' long polls.
async fn change<T: Send + 'static>(
    app: &Arc<App>,
    auth: &Auth,
    scope: Scope,
    change: impl FnOnce(&rusqlite::Connection, &App, &str, u64) -> Result<T, Error> + Send + 'static,
) -> Result<T, Response> {
    let actor = auth.need(scope)?.actor();
    let now = now();
    let state = app.clone();
    let value = app.db.write(move |tx| change(tx, &state, &actor, now)).await.map_err(fail)?;
    app.changed();
    Ok(value)
}

/// Runs a user change and answers with the user.
async fn change_user(
    app: Arc<App>,
    auth: &Auth,
    f: impl FnOnce(&rusqlite::Connection, &App, &str, u64) -> Result<user_store::UserView, Error> + Send + 'static,
) -> Reply {
    let user = change(&app, auth, Scope::Operate, f).await?;
    ok(serde_json::to_value(user).expect("a user serializes"))
}

async fn update_user(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Input(input): Input<UserInput>,
) -> Reply {
    change_user(app, &auth, move |c, app, actor, now| user_store::update(c, &app.signer, actor, id, &input, now)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExtendRequest {
    days: u64,
}

async fn extend_user(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Body(req): Body<ExtendRequest>,
) -> Reply {
    change_user(app, &auth, move |c, app, actor, now| user_store::extend(c, &app.signer, actor, id, req.days, now))
        .await
}

async fn reset_traffic(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    change_user(app, &auth, move |c, app, actor, now| user_store::reset_traffic(c, &app.signer, actor, id, now)).await
}

async fn disable_user(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    let input = UserInput { enabled: Some(false), ..UserInput::default() };
    change_user(app, &auth, move |c, app, actor, now| user_store::update(c, &app.signer, actor, id, &input, now)).await
}

async fn enable_user(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    let input = UserInput { enabled: Some(true), ..UserInput::default() };
    change_user(app, &auth, move |c, app, actor, now| user_store::update(c, &app.signer, actor, id, &input, now)).await
}

/// Closes the user's open connections at every node (at its next pull); the user's apps
/// connect again at once if they still may.
async fn kick_user(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    change_user(app, &auth, move |c, app, actor, now| user_store::kick(c, &app.signer, actor, id, now)).await
}

/// The apps registered by their device id when they fetched the user's link (HWID).
async fn user_hwid(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    auth.need(Scope::Read)?;
    let view = app.db.read(move |c| crate::store::hwid::list(c, id)).await.map_err(fail)?;
    ok(serde_json::to_value(view).expect("a device list serializes"))
}

/// Deletes a registered device: its room is free at every edge once they have the user's
/// snapshot again.
async fn forget_hwid(State(app): State<Arc<App>>, auth: Auth, Path((id, key)): Path<(u64, String)>) -> Reply {
    let view = change(&app, &auth, Scope::Operate, move |c, app, actor, now| {
        crate::store::hwid::forget(c, &app.signer, actor, id, &key, now)
    })
    .await?;
    ok(serde_json::to_value(view).expect("a device list serializes"))
}

/// A user's aliases: old subscription paths (from the panel it was imported from) that every
/// edge serves like its link.
async fn user_aliases(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    auth.need(Scope::Operate)?;
    let aliases = app
        .db
        .read(move |c| {
            crate::store::users::get(c, id)?;
            crate::store::aliases::list(c, Some(id))
        })
        .await
        .map_err(fail)?;
    ok(json!({ "aliases": aliases }))
}

#[derive(Deserialize)]
struct AliasQuery {
    path: String,
}

/// Retires an alias: the edges stop serving it.
async fn retire_alias(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Query(query): Query<AliasQuery>,
) -> Reply {
    let aliases = change(&app, &auth, Scope::Operate, move |c, app, actor, now| {
        crate::store::aliases::retire(c, &app.signer, actor, id, &query.path, now)
    })
    .await?;
    ok(json!({ "aliases": aliases }))
}

#[derive(Deserialize)]
struct ImportQuery {
    source: String,
    #[serde(default)]
    dry_run: bool,
}

/// Takes users over from another panel (the body: the source's file), or with `dry_run`
/// says what it would do.
async fn import_users(
    State(app): State<Arc<App>>,
    auth: Auth,
    Query(query): Query<ImportQuery>,
    body: axum::body::Bytes,
) -> Reply {
    let actor = auth.need(Scope::Admin)?.actor();
    let source = crate::import::Source::named(&query.source).map_err(fail)?;
    let incoming = crate::import::read_bytes(source, body.to_vec()).await.map_err(fail)?;
    let now = now();
    let apply = move |tx: &rusqlite::Transaction<'_>, app: Arc<App>| {
        crate::import::apply(tx, &app.signer, &actor, incoming, query.dry_run, now)
    };
    let state = app.clone();
    let report = if query.dry_run {
        app.db.dry_run(move |tx| apply(tx, state)).await.map_err(fail)?
    } else {
        let report = app.db.write(move |tx| apply(tx, state)).await.map_err(fail)?;
        app.changed();
        report
    };
    ok(serde_json::to_value(report).expect("a report serializes"))
}

/// Every user as a Hearth users document (links and passwords included).
async fn export_users(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Admin)?;
    let state = app.clone();
    let document = app.db.read(move |c| crate::import::json::export(c, &state.signer)).await.map_err(fail)?;
    ok(serde_json::to_value(document).expect("a document serializes"))
}

async fn rotate_link(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    let (user, token) = change(&app, &auth, Scope::Operate, move |tx, app, actor, now| {
        let token = user_store::rotate(tx, &app.signer, actor, id, now)?;
        Ok((user_store::get(tx, id)?, token))
    })
    .await?;
    ok(with_link(&app, user, &token))
}

async fn delete_user(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    change(&app, &auth, Scope::Operate, move |tx, app, actor, now| user_store::delete(tx, &app.signer, actor, id, now))
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn list_nodes(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Read)?;
    let now = now();
    let (nodes, reach) =
        app.db.read(move |c| Ok((node_store::list(c)?, node_reach(c, None, now)?))).await.map_err(fail)?;
    let nodes: Vec<_> = nodes.iter().map(|node| node_json(node, &reach, now)).collect();
    ok(json!({ "nodes": nodes }))
}

async fn get_node(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    auth.need(Scope::Read)?;
    let now = now();
    let (node, reach) =
        app.db.read(move |c| Ok((node_store::get(c, id)?, node_reach(c, Some(id), now)?))).await.map_err(fail)?;
    ok(node_json(&node, &reach, now))
}

/// Per node (or just `only`): how many users reach it through their groups, and its traffic
/// today (UTC).
fn node_reach(
    conn: &rusqlite::Connection,
    only: Option<u64>,
    now: u64,
) -> Result<std::collections::HashMap<u64, (u64, u64)>, Error> {
    let mut out = std::collections::HashMap::new();
    let mut users = conn.prepare_cached(
        "SELECT ng.node_id, count(DISTINCT ug.user_id) FROM node_groups ng JOIN user_groups ug ON ug.group_id = ng.group_id
         WHERE ?1 IS NULL OR ng.node_id = ?1 GROUP BY ng.node_id",
    )?;
    for row in users.query_map([only], |row| Ok((row.get(0)?, row.get(1)?)))? {
        let (node, count) = row?;
        out.entry(node).or_insert((0, 0)).0 = count;
    }
    let mut traffic = conn.prepare_cached(
        "SELECT node_id, up + down FROM node_usage_daily WHERE day = ?1 AND (?2 IS NULL OR node_id = ?2)",
    )?;
    for row in traffic.query_map(rusqlite::params![now / 86_400, only], |row| Ok((row.get(0)?, row.get(1)?)))? {
        let (node, bytes) = row?;
        out.entry(node).or_insert((0, 0)).1 = bytes;
    }
    Ok(out)
}

/// A node as the API shows it: its stored view, whether it reported in recently, the users
/// who reach it and its traffic today (from [`node_reach`]).
fn node_json(
    node: &node_store::NodeView,
    reach: &std::collections::HashMap<u64, (u64, u64)>,
    now: u64,
) -> serde_json::Value {
    let mut value = serde_json::to_value(node).expect("a node serializes");
    let (users, today) = reach.get(&node.id).copied().unwrap_or((0, 0));
    value["online"] = json!(node.enrolled && node.last_seen + crate::tasks::NODE_ONLINE_SECS > now);
    value["users"] = json!(users);
    value["traffic_today"] = json!(today);
    value
}

async fn create_node(State(app): State<Arc<App>>, auth: Auth, Input(input): Input<NodeInput>) -> Reply {
    let (node, token) =
        change(&app, &auth, Scope::Operate, move |tx, _, actor, now| node_store::create(tx, actor, &input, now))
            .await?;
    let mut value = serde_json::to_value(node).expect("a node serializes");
    value["enroll_command"] = json!(app.config.enroll_command(&token));
    value["enroll_expires"] = json!(now() + node_store::ENROLL_LIFETIME);
    Ok((StatusCode::CREATED, axum::Json(value)).into_response())
}

async fn update_node(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Input(input): Input<NodeInput>,
) -> Reply {
    let node = change(&app, &auth, Scope::Operate, move |tx, app, actor, now| {
        node_store::update(tx, &app.signer, actor, id, &input, now)
    })
    .await?;
    ok(serde_json::to_value(node).expect("a node serializes"))
}

async fn delete_node(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| node_store::delete(tx, &app.signer, actor, id, now))
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn enroll_token(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    let token =
        change(&app, &auth, Scope::Admin, move |tx, _, actor, now| node_store::new_enroll_token(tx, actor, id, now))
            .await?;
    ok(
        json!({ "enroll_command": app.config.enroll_command(&token), "enroll_expires": now() + node_store::ENROLL_LIFETIME }),
    )
}

async fn list_releases(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Read)?;
    let releases = app.db.read(crate::releases::list).await.map_err(fail)?;
    ok(json!({ "releases": releases }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RolloutRequest {
    /// The node that takes the release first.
    canary: u64,
}

async fn start_rollout(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(version): Path<u64>,
    Body(req): Body<RolloutRequest>,
) -> Reply {
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        crate::releases::start(tx, &app.signer, version, req.canary, actor, now)
    })
    .await?;
    let releases = app.db.read(crate::releases::list).await.map_err(fail)?;
    ok(json!({ "releases": releases }))
}

async fn stop_rollout(State(app): State<Arc<App>>, auth: Auth, Path(version): Path<u64>) -> Reply {
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        crate::releases::stop(tx, &app.signer, version, actor, now)
    })
    .await?;
    let releases = app.db.read(crate::releases::list).await.map_err(fail)?;
    ok(json!({ "releases": releases }))
}

async fn list_groups(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Read)?;
    let groups = app.db.read(node_store::groups).await.map_err(fail)?;
    ok(json!({ "groups": groups }))
}

async fn create_group(State(app): State<Arc<App>>, auth: Auth, Input(input): Input<GroupInput>) -> Reply {
    let group =
        change(&app, &auth, Scope::Operate, move |tx, _, actor, now| node_store::create_group(tx, actor, &input, now))
            .await?;
    Ok((StatusCode::CREATED, axum::Json(group)).into_response())
}

async fn update_group(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<i64>,
    Input(input): Input<GroupInput>,
) -> Reply {
    let group = change(&app, &auth, Scope::Operate, move |tx, app, actor, now| {
        node_store::update_group(tx, &app.signer, actor, id, &input, now)
    })
    .await?;
    ok(serde_json::to_value(group).expect("a group serializes"))
}

async fn delete_group(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<i64>) -> Reply {
    change(&app, &auth, Scope::Operate, move |tx, app, actor, now| {
        node_store::delete_group(tx, &app.signer, actor, id, now)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn list_tokens(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Admin)?;
    let tokens = app.db.read(auth::tokens).await.map_err(fail)?;
    ok(json!({ "tokens": tokens }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenRequest {
    name: String,
    scope: Scope,
}

impl Bounded for TokenRequest {
    fn check_bounds(&self) -> Result<(), Error> {
        chars("name", &self.name, MAX_NAME)
    }
}

async fn create_token(State(app): State<Arc<App>>, auth: Auth, Input(req): Input<TokenRequest>) -> Reply {
    let (token, view) = change(&app, &auth, Scope::Admin, move |tx, _, actor, now| {
        auth::create_token(tx, actor, &req.name, req.scope, now)
    })
    .await?;
    let mut value = serde_json::to_value(view).expect("a token serializes");
    value["token"] = json!(token);
    Ok((StatusCode::CREATED, axum::Json(value)).into_response())
}

async fn revoke_token(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<i64>) -> Reply {
    change(&app, &auth, Scope::Admin, move |tx, _, actor, now| auth::revoke_token(tx, actor, id, now)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
struct AuditQuery {
    before: Option<i64>,
    limit: Option<i64>,
}

async fn audit(State(app): State<Arc<App>>, auth: Auth, Query(query): Query<AuditQuery>) -> Reply {
    auth.need(Scope::Read)?;
    let before = query.before.unwrap_or(i64::MAX);
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let entries = app
        .db
        .read(move |c| {
            let mut q = c.prepare(
                "SELECT id, at, actor, action, target, detail FROM audit WHERE id < ?1 ORDER BY id DESC LIMIT ?2",
            )?;
            let rows = q
                .query_map([before, limit], |row| {
                    Ok(json!({
                        "id": row.get::<_, i64>(0)?, "at": row.get::<_, i64>(1)?, "actor": row.get::<_, String>(2)?,
                        "action": row.get::<_, String>(3)?, "target": row.get::<_, String>(4)?,
                        "detail": row.get::<_, String>(5)?,
                    }))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
        .map_err(fail)?;
    ok(json!({ "entries": entries }))
}
