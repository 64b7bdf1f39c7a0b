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

use crate::app::App;

mod access;
mod admins;
mod edges;
mod input;
mod nodes;
mod overview;
mod passkeys;
mod routing;
mod settings;
mod telegram;
mod users;
mod webhooks;
mod write;

use access::{
    change_password, create_token, end_other_sessions, end_session, list_sessions, list_tokens, login, logout, me,
    revoke_token, setup, totp_confirm, totp_disable, totp_enroll, totp_status,
};
use nodes::{
    create_group, create_node, delete_group, delete_node, enroll_token, get_node, list_groups, list_nodes,
    list_releases, sign_shipped, start_rollout, stop_rollout, update_group, update_node,
};
use overview::{audit, node_usage, online, status, usage, user_usage};
use settings::{get_settings, update_settings};
use users::{
    bulk_create, create_user, delete_user, disable_user, enable_user, export_users, extend_user, forget_hwid, get_user,
    import_users, kick_user, list_users, reset_traffic, retire_alias, rotate_link, update_user, user_aliases,
    user_hwid, user_link, user_preview,
};

pub(super) fn router() -> Router<Arc<App>> {
    // Sign-in takes small bodies, limited before anything is read.
    let sign_in = || DefaultBodyLimit::max(crate::api::request::SIGN_IN_BODY);
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
        .route("/api/users/bulk", post(bulk_create).layer(DefaultBodyLimit::max(crate::api::request::MAX_BODY)))
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
        .layer(DefaultBodyLimit::max(crate::api::request::ADMIN_BODY))
        .layer(axum::middleware::map_response(|mut response: Response| async move {
            response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }))
}

/// The OpenAPI description of this API (`docs/admin-api.openapi.json`).
pub(super) use crate::api::request::OPENAPI;

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}
