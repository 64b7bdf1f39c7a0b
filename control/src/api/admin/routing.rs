//! Routing per user (`/api/routing`, `/api/outbounds`, `/api/rule-sets`): the outbounds the
//! owner defines, the named rule sets in the official Hysteria 2 server's ACL syntax, and
//! (through a user's or group's `rule_set`) who is given which. The owner's alone: an
//! outbound holds a proxy's password, and a rule set decides where everyone's traffic goes.
//! A rule set that does not check is refused with its line and column (`bad_routing_rules`); every
//! change is signed into the credential sets of the nodes it reaches before it is answered.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::input::{Bounded, Input, Reply, bytes, ok, opt};
use super::write::change;
use crate::app::App;
use crate::auth::Scope;
use crate::error::Error;
use crate::store::{self, routing};

/// The largest body a rule set's request may have: its rules at their longest, escaped.
pub(super) const RULES_BODY: usize = 2 * hearth_shared::acl::MAX_TEXT;

/// `PATCH` and `DELETE` of one rule set.
pub(super) fn one_rule_set() -> axum::routing::MethodRouter<Arc<App>> {
    axum::routing::patch(update_rule_set).delete(remove_rule_set)
}

/// The longest field of an outbound (a server, a username, a password).
const MAX_FIELD: usize = 255;

impl Bounded for routing::OutboundInput {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("name", opt(&self.name), hearth_shared::acl::MAX_NAME)?;
        bytes("type", opt(&self.kind), 16)?;
        bytes("server", opt(&self.server), MAX_FIELD)?;
        bytes("username", opt(&self.username), MAX_FIELD)?;
        bytes("password", opt(&self.password), MAX_FIELD)?;
        bytes("ip_mode", opt(&self.ip_mode), 16)?;
        bytes("interface", opt(&self.interface), 15)?;
        bytes("source_v4", opt(&self.source_v4), 64)?;
        bytes("source_v6", opt(&self.source_v6), 64)
    }
}

/// A rule set: its name and rules (left out: kept).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::api) struct RuleSetInput {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    rules: Option<String>,
}

impl Bounded for RuleSetInput {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("name", opt(&self.name), hearth_shared::routing::MAX_SET_NAME)?;
        bytes("rules", opt(&self.rules), hearth_shared::acl::MAX_TEXT)
    }
}

/// Everything routing is made of: the outbounds (no password shown) and the rule sets with
/// how many users and groups are given each.
pub(super) async fn get_routing(State(app): State<Arc<App>>, auth: crate::api::request::Auth) -> Reply {
    auth.need_owner()?;
    let state = app.clone();
    let (outbounds, sets) =
        app.db.read(move |c| Ok((routing::outbounds(c, &state.signer.vault)?, routing::rule_sets(c)?))).await?;
    let outbounds: Vec<_> = outbounds.iter().map(routing::StoredOutbound::view).collect();
    ok(json!({ "outbounds": outbounds, "rule_sets": sets }))
}

/// What was written, for the audit log: the outbound without its password.
fn described(outbound: &hearth_shared::acl::Outbound) -> String {
    format!("{outbound:?}")
}

pub(super) async fn add_outbound(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Input(input): Input<routing::OutboundInput>,
) -> Reply {
    auth.need_owner()?;
    let id = change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let id = routing::add_outbound(tx, &app.signer.vault, &input)?;
        let name = input.name.clone().unwrap_or_default();
        store::audit(tx, now, actor, "outbound.add", &format!("outbound {id} ({name})"), "")?;
        crate::publish::all_nodes_changed(tx, &app.signer, now)?;
        Ok(id)
    })
    .await?;
    let reply = outbound_reply(&app, id).await?;
    Ok((StatusCode::CREATED, reply).into_response())
}

async fn outbound_reply(app: &Arc<App>, id: i64) -> Reply {
    let state = app.clone();
    let all = app.db.read(move |c| routing::outbounds(c, &state.signer.vault)).await?;
    let found = all.into_iter().find(|o| o.id == id).ok_or(Error::NotFound("outbound"))?;
    ok(found.view())
}

pub(super) async fn update_outbound(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Path(id): Path<i64>,
    Input(input): Input<routing::OutboundInput>,
) -> Reply {
    auth.need_owner()?;
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let before = routing::update_outbound(tx, &app.signer.vault, id, &input)?;
        store::audit(tx, now, actor, "outbound.update", &format!("outbound {id} ({})", before.name), "")?;
        crate::publish::all_nodes_changed(tx, &app.signer, now).map(drop)
    })
    .await?;
    outbound_reply(&app, id).await
}

pub(super) async fn remove_outbound(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Path(id): Path<i64>,
) -> Reply {
    auth.need_owner()?;
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let before = routing::remove_outbound(tx, &app.signer.vault, id)?;
        let what = format!("outbound {id} ({})", before.name);
        store::audit(tx, now, actor, "outbound.remove", &what, &described(&before))?;
        crate::publish::all_nodes_changed(tx, &app.signer, now).map(drop)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A rule set's id from a path (one past any id is none).
fn set_id(id: i64) -> Result<u16, Error> {
    u16::try_from(id).map_err(|_| Error::NotFound("rule set"))
}

async fn rule_set_reply(app: &Arc<App>, id: u16) -> Reply {
    let sets = app.db.read(routing::rule_sets).await?;
    let set = sets.into_iter().find(|set| set.id == id).ok_or(Error::NotFound("rule set"))?;
    ok(serde_json::to_value(set).expect("a rule set serializes"))
}

pub(super) async fn add_rule_set(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Input(input): Input<RuleSetInput>,
) -> Reply {
    auth.need_owner()?;
    let id = change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let name = input.name.as_deref().unwrap_or_default();
        let id = routing::add_rule_set(tx, &app.signer.vault, name, input.rules.as_deref().unwrap_or_default(), now)?;
        store::audit(tx, now, actor, "rule_set.add", &format!("rule set {id} ({})", name.trim()), "")?;
        crate::publish::all_nodes_changed(tx, &app.signer, now)?;
        Ok(id)
    })
    .await?;
    let reply = rule_set_reply(&app, id).await?;
    Ok((StatusCode::CREATED, reply).into_response())
}

pub(super) async fn update_rule_set(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Path(id): Path<i64>,
    Input(input): Input<RuleSetInput>,
) -> Reply {
    auth.need_owner()?;
    let id = set_id(id)?;
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let (name, rules) = (input.name.as_deref(), input.rules.as_deref());
        let before = routing::update_rule_set(tx, &app.signer.vault, id, name, rules, now)?;
        store::audit(tx, now, actor, "rule_set.update", &format!("rule set {id} ({})", before.name), "")?;
        crate::publish::all_nodes_changed(tx, &app.signer, now).map(drop)
    })
    .await?;
    rule_set_reply(&app, id).await
}

pub(super) async fn remove_rule_set(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Path(id): Path<i64>,
) -> Reply {
    auth.need_owner()?;
    let id = set_id(id)?;
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let before = routing::remove_rule_set(tx, id)?;
        store::audit(tx, now, actor, "rule_set.remove", &format!("rule set {id} ({})", before.name), "")?;
        crate::publish::all_nodes_changed(tx, &app.signer, now).map(drop)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
