//! The edges control publishes to (`/api/edges`): listed with how far each has come, added
//! and removed at run time, their links marked active, blocked or retired. Changes need the
//! `admin` scope (an edge is handed a push token and everything control signs); the push
//! token never comes back out.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::input::{Bounded, Input, MAX_URL, Reply, bytes, ok, opt};
use super::overview::edge_json;
use super::write::change;
use crate::app::{App, now};
use crate::auth::Scope;
use crate::error::Error;
use crate::store::edges::{self, MAX_EDGE_NAME, MAX_PUSH_TOKEN, NewEdge};
use crate::store::{self, overview::EdgeStatus};

/// A new edge.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::api) struct EdgeInput {
    name: String,
    url: String,
    api_prefix: String,
    push_token: String,
    #[serde(default)]
    link_base: Option<String>,
}

impl Bounded for EdgeInput {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("name", &self.name, MAX_EDGE_NAME)?;
        bytes("url", &self.url, MAX_URL)?;
        bytes("api_prefix", &self.api_prefix, 64)?;
        bytes("push_token", &self.push_token, MAX_PUSH_TOKEN)?;
        bytes("link_base", opt(&self.link_base), MAX_URL)
    }
}

/// A change to an edge; fields left out keep their value.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::api) struct EdgeChange {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    position: Option<i64>,
    /// Empty: its URL and the sub prefix.
    #[serde(default)]
    link_base: Option<String>,
}

impl Bounded for EdgeChange {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("state", opt(&self.state), 16)?;
        bytes("link_base", opt(&self.link_base), MAX_URL)
    }
}

async fn statuses(app: &Arc<App>) -> Result<Vec<EdgeStatus>, Error> {
    Ok(app.db.read(move |c| store::overview::overview(c, now())).await?.edges)
}

async fn one(app: &Arc<App>, id: i64) -> Reply {
    let found = statuses(app).await?.into_iter().find(|s| s.edge.id == id);
    let status = found.ok_or_else(|| Error::NotFound("edge"))?;
    ok(edge_json(app, &status))
}

pub(super) async fn list_edges(State(app): State<Arc<App>>, auth: crate::api::request::Auth) -> Reply {
    auth.need(Scope::Read)?;
    let list: Vec<_> = statuses(&app).await?.iter().map(|s| edge_json(&app, s)).collect();
    ok(json!({ "edges": list, "primary": app.sub_url() }))
}

pub(super) async fn add_edge(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Input(input): Input<EdgeInput>,
) -> Reply {
    // Refused before the input is looked at: its checks tell nothing to whoever may not ask.
    // The owner's alone: an edge is handed every signed envelope and sees who fetches links.
    auth.need_owner()?;
    let edge = NewEdge::checked(
        &input.name,
        &input.url,
        &input.api_prefix,
        &input.push_token,
        input.link_base.as_deref(),
        &app.config.edge.sub_prefix,
    )?;
    let id = change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let id = edges::add(tx, &edge, now)?;
        store::audit(tx, now, actor, "edge.add", &edge.name, &edge.url)?;
        crate::publish::edges_changed(tx, &app.signer, now)?;
        Ok(id)
    })
    .await?;
    app.refresh_links()?;
    let reply = one(&app, id).await?;
    Ok((StatusCode::CREATED, reply).into_response())
}

pub(super) async fn update_edge(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Path(id): Path<i64>,
    Input(input): Input<EdgeChange>,
) -> Reply {
    auth.need_owner()?;
    let state = input.state.as_deref().map(edges::check_state).transpose()?;
    let link_base = match input.link_base.as_deref().map(str::trim) {
        None => None,
        Some("") => Some(None),
        Some(base) => Some(Some(edges::check_url("link_base", base)?)),
    };
    let main_base = app.addresses().sub_url;
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let edge = edges::get(tx, id)?.ok_or(Error::NotFound("edge"))?;
        // Empty: derived again, as for a new edge (the main edge's: the link base in force).
        let link_base = link_base.map(|base| {
            base.or_else(|| {
                Some(if edge.name == edges::MAIN {
                    main_base.clone()
                } else {
                    format!("{}/{}", edge.url.trim_end_matches('/'), app.config.edge.sub_prefix)
                })
            })
        });
        if let Some(state) = state {
            edges::set_state(tx, id, state)?;
            store::audit(tx, now, actor, "edge.state", &edge.name, state.as_str())?;
            // Made the primary again by the owner: a failing edge gets a whole failover period
            // from now before links move off it again.
            if state == edges::LinkState::Active && edge.error_since > 0 {
                edges::set_error_since(tx, id, now)?;
            }
        }
        if let Some(position) = input.position {
            edges::set_position(tx, id, position)?;
            store::audit(tx, now, actor, "edge.position", &edge.name, &position.to_string())?;
        }
        if let Some(base) = link_base {
            edges::set_link_base(tx, id, base.as_deref())?;
            store::audit(tx, now, actor, "edge.link_base", &edge.name, base.as_deref().unwrap_or("derived"))?;
        }
        crate::publish::edges_changed(tx, &app.signer, now)?;
        Ok(())
    })
    .await?;
    app.refresh_links()?;
    one(&app, id).await
}

pub(super) async fn remove_edge(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Path(id): Path<i64>,
) -> Reply {
    auth.need_owner()?;
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let edge = edges::get(tx, id)?.ok_or(Error::NotFound("edge"))?;
        if edge.name == edges::MAIN {
            return Err(Error::invalid("main_edge", "the main edge is edge_url: clear it in Settings"));
        }
        edges::remove(tx, id)?;
        store::audit(tx, now, actor, "edge.remove", &edge.name, &edge.url)?;
        crate::publish::edges_changed(tx, &app.signer, now).map(drop)
    })
    .await?;
    app.refresh_links()?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
