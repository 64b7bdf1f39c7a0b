//! Events and the webhooks they go to (`/api/events`, `/api/webhooks`): the owner registers
//! URLs with the kinds of events each takes, sees each delivery's state and answer, and sends
//! a test event. Reading needs the `read` scope, changes `admin` (a webhook receives what
//! happens to every user). A webhook's secret is shown once, when it is made.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::input::{Bounded, Input, MAX_URL, Reply, bytes, ok};
use super::write::change;
use crate::app::App;
use crate::auth::Scope;
use crate::error::Error;
use crate::store::{self, events};

/// A new webhook.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::api) struct WebhookInput {
    url: String,
    events: Vec<String>,
}

impl Bounded for WebhookInput {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("url", &self.url, MAX_URL)?;
        if self.events.len() > events::KINDS.len() {
            return Err(Error::invalid("too_long", format!("events must be at most {}", events::KINDS.len())));
        }
        self.events.iter().try_for_each(|kind| bytes("events", kind, 64))
    }
}

#[derive(Deserialize)]
pub(super) struct Page {
    before: Option<i64>,
    limit: Option<u64>,
}

pub(super) async fn list_events(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Query(page): Query<Page>,
) -> Reply {
    auth.need(Scope::Read)?;
    let (before, limit) = (page.before.unwrap_or(0).max(0), page.limit.unwrap_or(100).clamp(1, 500));
    let list = app.db.read(move |c| events::recent(c, before, limit)).await?;
    ok(json!({ "events": list, "kinds": &events::KINDS[..events::KINDS.len() - 1] }))
}

pub(super) async fn list_webhooks(State(app): State<Arc<App>>, auth: crate::api::request::Auth) -> Reply {
    auth.need(Scope::Read)?;
    let hooks = app.db.read(events::webhooks).await?;
    ok(json!({ "webhooks": hooks }))
}

pub(super) async fn add_webhook(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Input(input): Input<WebhookInput>,
) -> Reply {
    auth.need(Scope::Admin)?;
    let url = crate::config::check_url("url", &input.url).map_err(|e| Error::invalid("bad_url", format!("{e:#}")))?;
    let (id, secret) = change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let (id, secret) = events::add_webhook(tx, &app.signer.vault, &url, &input.events, now)?;
        store::audit(tx, now, actor, "webhook.create", &format!("webhook {id}"), &url)?;
        Ok((id, secret))
    })
    .await?;
    let hooks = app.db.read(events::webhooks).await?;
    let mut value = serde_json::to_value(hooks.into_iter().find(|h| h.id == id)).expect("a webhook serializes");
    value["secret"] = json!(secret);
    Ok((StatusCode::CREATED, axum::Json(value)).into_response())
}

pub(super) async fn remove_webhook(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Path(id): Path<i64>,
) -> Reply {
    change(&app, &auth, Scope::Admin, move |tx, _, actor, now| {
        let url = events::delete_webhook(tx, id)?;
        store::audit(tx, now, actor, "webhook.delete", &format!("webhook {id}"), &url)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(super) async fn test_webhook(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Path(id): Path<i64>,
) -> Reply {
    let event =
        change(&app, &auth, Scope::Admin, move |tx, _, actor, now| events::test_webhook(tx, id, actor, now)).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(json!({ "event": event }))).into_response())
}

pub(super) async fn deliveries(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Path(id): Path<i64>,
    Query(page): Query<Page>,
) -> Reply {
    auth.need(Scope::Read)?;
    let limit = page.limit.unwrap_or(50).clamp(1, 200);
    let list = app.db.read(move |c| events::deliveries(c, id, limit)).await?;
    ok(json!({ "deliveries": list }))
}
