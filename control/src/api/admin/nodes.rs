//! Nodes, their groups and releases (`/api/nodes`, `/api/groups`, `/api/releases`): created
//! with their enrollment command, changed, deleted; rollouts started and stopped.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::input::{Input, Reply, ok};
use super::write::change;
use crate::api::request::{Auth, Body};
use crate::app::{App, now};
use crate::auth::Scope;
use crate::error::Error;
use crate::store::nodes::{self as node_store, GroupInput, NodeInput};

pub(super) async fn list_nodes(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Read)?;
    let now = now();
    let (nodes, reach) = app.db.read(move |c| Ok((node_store::list(c)?, node_store::reach(c, None, now)?))).await?;
    let nodes: Vec<_> = nodes.iter().map(|node| node_json(node, &reach, now)).collect();
    ok(json!({ "nodes": nodes }))
}

pub(super) async fn get_node(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    auth.need(Scope::Read)?;
    let now = now();
    let (node, reach) =
        app.db.read(move |c| Ok((node_store::get(c, id)?, node_store::reach(c, Some(id), now)?))).await?;
    ok(node_json(&node, &reach, now))
}

/// A node as the API shows it: its stored view, whether it reported in recently, the users
/// who reach it and its traffic today (from [`node_store::reach`]).
pub(super) fn node_json(
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

pub(super) async fn create_node(State(app): State<Arc<App>>, auth: Auth, Input(input): Input<NodeInput>) -> Reply {
    let (node, token) =
        change(&app, &auth, Scope::Operate, move |tx, _, actor, now| node_store::create(tx, actor, &input, now))
            .await?;
    let release = app.db.read(|c| crate::releases::in_force(c, now())).await?;
    let mut value = serde_json::to_value(&node).expect("a node serializes");
    value["enroll_command"] = json!(app.config.enroll_command(&token));
    value["install_command"] = json!(app.config.install_command(&token, node.port, release.as_ref().map(|(_, m)| m)));
    value["enroll_expires"] = json!(now() + node_store::ENROLL_LIFETIME);
    Ok((StatusCode::CREATED, axum::Json(value)).into_response())
}

pub(super) async fn update_node(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Input(input): Input<NodeInput>,
) -> Reply {
    let node = change(&app, &auth, Scope::Operate, move |tx, app, actor, now| {
        crate::nodes::update(tx, &app.signer, actor, id, &input, now)
    })
    .await?;
    ok(serde_json::to_value(node).expect("a node serializes"))
}

pub(super) async fn delete_node(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| crate::nodes::delete(tx, &app.signer, actor, id, now))
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(super) async fn enroll_token(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<u64>) -> Reply {
    let (token, replaced, port) = change(&app, &auth, Scope::Admin, move |tx, _, actor, now| {
        let (token, replaced) = node_store::new_enroll_token(tx, actor, id, now)?;
        Ok((token, replaced, node_store::get(tx, id)?.port))
    })
    .await?;
    let release = app.db.read(|c| crate::releases::in_force(c, now())).await?;
    ok(json!({
        "enroll_command": app.config.enroll_command(&token),
        "install_command": app.config.install_command(&token, port, release.as_ref().map(|(_, m)| m)),
        "enroll_expires": now() + node_store::ENROLL_LIFETIME,
        "replaced": replaced,
    }))
}

pub(super) async fn list_releases(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Read)?;
    let releases = app.db.read(crate::releases::list).await?;
    let (data, dir) = (app.config.data_dir.clone(), app.config.node_binaries.clone());
    let (binaries, key_here) = tokio::task::spawn_blocking(move || {
        let key = crate::keyring::Paths::new(&data).secret(hearth_shared::keys::Role::Release);
        (crate::releases::shipped(&dir), key.exists())
    })
    .await
    .map_err(|e| Error::Internal(e.to_string()))?;
    ok(json!({
        "releases": releases,
        // What one click can sign: the node binaries shipped with control, as a release of
        // control's own version, with the release key when it is on this server.
        "shipped": { "version": env!("CARGO_PKG_VERSION"), "binaries": binaries, "key_here": key_here },
    }))
}

/// Signs the node binaries shipped with control as a release and adds it: the way forward
/// for a control with no release, in one click. Nothing is uploaded: only binaries already on
/// the server, signed with the release key already on it.
pub(super) async fn sign_shipped(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Admin)?;
    let (data, dir) = (app.config.data_dir.clone(), app.config.node_binaries.clone());
    let (key, binaries) = tokio::task::spawn_blocking(move || crate::releases::load_shipped(&data, &dir))
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
    if let Some(warning) = crate::releases::too_large_for_edges(&binaries) {
        tracing::warn!("{warning}");
    }
    let (release, _) = change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        crate::releases::add_shipped(&app.config.data_dir, tx, &key, binaries, actor, now)
    })
    .await?;
    let releases = app.db.read(crate::releases::list).await?;
    Ok((StatusCode::CREATED, axum::Json(json!({ "release": release, "releases": releases }))).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RolloutRequest {
    /// The node that takes the release first.
    canary: u64,
}

pub(super) async fn start_rollout(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(version): Path<String>,
    Body(req): Body<RolloutRequest>,
) -> Reply {
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let version = crate::releases::version_of(tx, &version)?;
        crate::releases::start(tx, &app.signer, version, req.canary, actor, now)
    })
    .await?;
    let releases = app.db.read(crate::releases::list).await?;
    ok(json!({ "releases": releases }))
}

pub(super) async fn stop_rollout(State(app): State<Arc<App>>, auth: Auth, Path(version): Path<String>) -> Reply {
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let version = crate::releases::version_of(tx, &version)?;
        crate::releases::stop(tx, &app.signer, version, actor, now)
    })
    .await?;
    let releases = app.db.read(crate::releases::list).await?;
    ok(json!({ "releases": releases }))
}

/// Every group (a reseller's: those they may put users in).
pub(super) async fn list_groups(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    let reach = auth.reach(Scope::Read)?;
    let groups = app
        .db
        .read(move |c| {
            let mut groups = node_store::groups(c)?;
            if let crate::api::request::Reach::Reseller(admin) = reach {
                let theirs = crate::store::admins::groups_of(c, admin)?;
                groups.retain(|g| theirs.contains(&g.name));
            }
            Ok(groups)
        })
        .await?;
    ok(json!({ "groups": groups }))
}

pub(super) async fn create_group(State(app): State<Arc<App>>, auth: Auth, Input(input): Input<GroupInput>) -> Reply {
    super::input::rule_set_by_owner(&auth, &input.rule_set)?;
    let group =
        change(&app, &auth, Scope::Operate, move |tx, _, actor, now| node_store::create_group(tx, actor, &input, now))
            .await?;
    Ok((StatusCode::CREATED, axum::Json(group)).into_response())
}

pub(super) async fn update_group(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<i64>,
    Input(input): Input<GroupInput>,
) -> Reply {
    super::input::rule_set_by_owner(&auth, &input.rule_set)?;
    let group = change(&app, &auth, Scope::Operate, move |tx, app, actor, now| {
        crate::nodes::update_group(tx, &app.signer, actor, id, &input, now)
    })
    .await?;
    ok(serde_json::to_value(group).expect("a group serializes"))
}

pub(super) async fn delete_group(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<i64>) -> Reply {
    change(&app, &auth, Scope::Operate, move |tx, app, actor, now| {
        crate::nodes::delete_group(tx, &app.signer, actor, id, now)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
