//! The admin API (JSON), under `/<admin prefix>/api`. Reads need the `read` scope, changes
//! to users `users`, to nodes and groups `operate`, settings, edges and the like `admin`. A
//! request holds its admin's role's scope (see [`crate::auth::Role`]), cut to its token's; a
//! reseller reaches only their own users (the routes open to them ask [`Auth::reach`]); admin
//! accounts are the owner's alone.
//!
//! This file holds the routes and what every handler shares (bounded bodies, answers, a change
//! in one transaction); the handlers live by resource: `access` (sign-in, two-step sign-in,
//! sessions, tokens), `admins`, `users`, `nodes` (with groups and releases), `settings`, `edges`,
//! `overview` (status, usage, audit), `webhooks` (events too) and `telegram`.

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};

use super::{Auth, Body, Reach};
use crate::app::{App, now};
use crate::auth::Scope;
use crate::error::Error;
use crate::store::nodes::{GroupInput, MAX_HOST, MAX_TEXT, NodeInput};
use crate::store::users::{MAX_NAME, MAX_NOTE, UserInput};

mod access;
mod admins;
mod edges;
mod nodes;
mod overview;
mod passkeys;
mod routing;
mod settings;
mod telegram;
mod users;
mod webhooks;

use access::{
    change_password, create_token, end_other_sessions, end_session, list_sessions, list_tokens, login, logout, me,
    revoke_token, setup, totp_confirm, totp_disable, totp_enroll, totp_status,
};
use nodes::{
    create_group, create_node, delete_group, delete_node, enroll_token, get_node, list_groups, list_nodes,
    list_releases, sign_shipped, start_rollout, stop_rollout, update_group, update_node,
};
use overview::{audit, edge_json, node_usage, online, status, usage, user_usage};
use settings::{get_settings, update_settings};
use users::{
    bulk_create, create_user, delete_user, disable_user, enable_user, export_users, extend_user, forget_hwid, get_user,
    import_users, kick_user, list_users, reset_traffic, retire_alias, rotate_link, update_user, user_aliases,
    user_hwid, user_link, user_preview,
};

/// Why a handler answers no: one of control's errors (its status and code), or an answer made
/// already (a refusal of authentication or sign-in). Either comes with `?`.
pub(super) enum Refusal {
    Error(Error),
    Answer(Response),
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Refusal {
        Refusal::Error(e)
    }
}

impl From<Response> for Refusal {
    fn from(answer: Response) -> Refusal {
        Refusal::Answer(answer)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Error(e) => e.into_response(),
            Refusal::Answer(answer) => answer,
        }
    }
}

type Reply = Result<Response, Refusal>;

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
        value.check_bounds().map_err(IntoResponse::into_response)?;
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
        bytes("rule_set", opt(&self.rule_set), hearth_shared::routing::MAX_SET_NAME)?;
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
        bytes("domain", opt(&self.domain), MAX_HOST)?;
        list("groups", self.groups.as_deref().unwrap_or_default(), MAX_GROUPS, MAX_NAME)
    }
}

impl Bounded for GroupInput {
    fn check_bounds(&self) -> Result<(), Error> {
        chars("name", opt(&self.name), MAX_NAME)?;
        bytes("note", opt(&self.note), MAX_TEXT)?;
        bytes("on_quota", opt(&self.on_quota), 16)?;
        bytes("rule_set", opt(&self.rule_set), hearth_shared::routing::MAX_SET_NAME)
    }
}

/// Whether a request that gives a rule set comes from the owner: who is routed where is the
/// owner's alone to say (refused before the input is looked at further).
fn rule_set_by_owner(auth: &Auth, rule_set: &Option<String>) -> Result<(), Response> {
    if rule_set.is_some() {
        auth.need_owner()?;
    }
    Ok(())
}

fn ok(value: serde_json::Value) -> Reply {
    Ok(axum::Json(value).into_response())
}

pub(super) fn router() -> Router<Arc<App>> {
    // Sign-in takes small bodies, limited before anything is read.
    let sign_in = || DefaultBodyLimit::max(super::SIGN_IN_BODY);
    Router::new()
        .route("/api/openapi.json", get(openapi))
        .route("/api/setup", post(setup).layer(sign_in()))
        .route("/api/login", post(login).layer(sign_in()))
        .route("/api/login/passkey", post(passkeys::start_sign_in).layer(sign_in()))
        .route("/api/login/passkey/finish", post(passkeys::finish_sign_in).layer(sign_in()))
        .route("/api/logout", post(logout))
        .route("/api/me", get(me))
        .route("/api/sessions", get(list_sessions).delete(end_other_sessions))
        .route("/api/password", post(change_password).layer(sign_in()))
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
        .route("/api/releases/shipped", post(sign_shipped))
        .route("/api/releases/{version}/rollout", post(start_rollout))
        .route("/api/releases/{version}/stop", post(stop_rollout))
        .route("/api/groups", get(list_groups).post(create_group))
        .route("/api/groups/{id}", axum::routing::patch(update_group).delete(delete_group))
        .route("/api/tokens", get(list_tokens).post(create_token))
        .route("/api/tokens/{id}", delete(revoke_token))
        .route("/api/admins", get(admins::list_admins).post(admins::add_admin))
        .route("/api/admins/{id}", axum::routing::patch(admins::update_admin).delete(admins::remove_admin))
        .route("/api/admins/{id}/passkeys", delete(passkeys::forget_admin_passkeys))
        .route("/api/passkeys", get(passkeys::list_passkeys).post(passkeys::start_add))
        .route("/api/passkeys/finish", post(passkeys::finish_add))
        .route("/api/passkeys/{id}", delete(passkeys::remove_passkey))
        .route("/api/audit", get(audit))
        .route("/api/settings", get(get_settings).patch(update_settings))
        .route("/api/routing", get(routing::get_routing))
        .route("/api/outbounds", post(routing::add_outbound))
        .route("/api/outbounds/{id}", axum::routing::patch(routing::update_outbound).delete(routing::remove_outbound))
        .route("/api/rule-sets", post(routing::add_rule_set).layer(DefaultBodyLimit::max(routing::RULES_BODY)))
        .route("/api/rule-sets/{id}", routing::one_rule_set().layer(DefaultBodyLimit::max(routing::RULES_BODY)))
        .route("/api/edges", get(edges::list_edges).post(edges::add_edge))
        .route("/api/edges/{id}", axum::routing::patch(edges::update_edge).delete(edges::remove_edge))
        .route("/api/events", get(webhooks::list_events))
        .route("/api/webhooks", get(webhooks::list_webhooks).post(webhooks::add_webhook))
        .route("/api/webhooks/{id}", delete(webhooks::remove_webhook))
        .route("/api/webhooks/{id}/deliveries", get(webhooks::deliveries))
        .route("/api/webhooks/{id}/test", post(webhooks::test_webhook))
        .route("/api/telegram", get(telegram::get).put(telegram::set).delete(telegram::clear))
        .route("/api/users/{id}/telegram", axum::routing::put(telegram::set_user_chat))
        .route("/metrics", get(overview::metrics))
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

/// Runs a change as `auth` (who must hold `scope`) in one write transaction, then wakes the
/// publisher and the nodes' long polls.
async fn change<T: Send + 'static>(
    app: &Arc<App>,
    auth: &Auth,
    scope: Scope,
    change: impl FnOnce(&rusqlite::Connection, &App, &str, u64) -> Result<T, Error> + Send + 'static,
) -> Result<T, Refusal> {
    let actor = auth.need(scope)?.actor();
    let now = now();
    let state = app.clone();
    let value = app.db.write(move |tx| change(tx, &state, &actor, now)).await?;
    app.changed();
    Ok(value)
}

/// Runs a change to users as `auth` in one write transaction: over everyone, or for a reseller
/// only to `user` if they created it (any other is not found) and only within their limits
/// (see [`crate::store::admins`]); then wakes the publisher.
async fn change_users<T: Send + 'static>(
    app: &Arc<App>,
    auth: &Auth,
    user: Option<u64>,
    change: impl FnOnce(&rusqlite::Connection, &App, &str, u64) -> Result<T, Error> + Send + 'static,
) -> Result<T, Refusal> {
    use crate::store::admins;
    let reach = auth.reach(Scope::Users)?;
    let actor = auth.0.actor();
    let now = now();
    let state = app.clone();
    let value = app
        .db
        .write(move |tx| match reach {
            Reach::All => change(tx, &state, &actor, now),
            Reach::Reseller(admin) => {
                if let Some(user) = user {
                    admins::check_owns(tx, admin, user)?;
                }
                let before = admins::allotment(tx, admin, now)?;
                let value = change(tx, &state, &actor, now)?;
                admins::check_within(tx, admin, before, now)?;
                Ok(value)
            }
        })
        .await?;
    app.changed();
    Ok(value)
}

/// Reads about one user as `auth` (who must hold `scope`): a reseller only about their own.
async fn read_user<T: Send + 'static>(
    app: &Arc<App>,
    auth: &Auth,
    scope: Scope,
    user: u64,
    read: impl FnOnce(&rusqlite::Connection, &App) -> Result<T, Error> + Send + 'static,
) -> Result<T, Refusal> {
    let reach = auth.reach(scope)?;
    let state = app.clone();
    Ok(app
        .db
        .read(move |c| {
            if let Reach::Reseller(admin) = reach {
                crate::store::admins::check_owns(c, admin, user)?;
            }
            read(c, &state)
        })
        .await?)
}
