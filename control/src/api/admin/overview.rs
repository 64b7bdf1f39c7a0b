//! What the overview and the usage charts read (`/api/status`, `/api/online`, `/api/usage`,
//! a user's and a node's daily traffic) and the audit log.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::json;

use super::input::{Reply, ok};
use crate::api::request::Auth;
use crate::app::{App, now};
use crate::auth::Scope;
use crate::store::nodes::{self as node_store};
use crate::store::usage::{self, Traffic};
use crate::store::users::{self as user_store};

pub(super) async fn status(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Read)?;
    let now = now();
    let (overview, held, offline) = app
        .db
        .read(move |c| {
            Ok((
                crate::store::overview::overview(c, now)?,
                crate::store::overview::held(c)?,
                crate::store::overview::offline_nodes(c, now)?,
            ))
        })
        .await?;
    let edges: Vec<serde_json::Value> = overview.edges.iter().map(|s| edge_json(&app, s)).collect();
    // The first failing edge, named: the overview's alert.
    let last_error =
        overview.edges.iter().find_map(|s| s.edge.last_error.as_ref().map(|error| format!("{}: {error}", s.edge.name)));
    ok(json!({
        "users": overview.users.into_iter().map(|(k, v)| (k, json!(v))).collect::<serde_json::Map<String, serde_json::Value>>(),
        "nodes": {
            "total": overview.nodes,
            "online": overview.online,
            "offline": offline,
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
        // A proxy in front of control that is not in trusted_proxies.
        "untrusted_forwarding": app.untrusted_forwarding.get().map(|ip| ip.to_string()),
        "certificate": app.panel_acme.get().map(|acme| {
            let status = acme.status();
            json!({
                "domain": status.domain,
                "expires": status.not_after,
                "renewed": status.renewed,
                "error": status.error,
                "error_at": status.error_at,
            })
        }),
    }))
}

/// One edge as the API shows it (never its push token).
pub(super) fn edge_json(app: &App, status: &crate::store::overview::EdgeStatus) -> serde_json::Value {
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
        "untrusted_forwarding": edge.untrusted_forwarding,
        "disk_full_since": edge.disk_full,
        "added": edge.added,
    })
}

/// The offline keys `init` wrote that are still in the data directory (file names only).
pub(super) fn offline_keys_here(dir: &std::path::Path) -> Vec<String> {
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
pub(super) struct UsageQuery {
    days: Option<u64>,
}

/// One node's traffic per day.
pub(super) async fn node_usage(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Query(query): Query<UsageQuery>,
) -> Reply {
    series_of(&app, &auth, &query, Traffic::Node(id)).await
}

/// The daily series of one user or node (404 if there is no such one).
pub(super) async fn series_of(app: &Arc<App>, auth: &Auth, query: &UsageQuery, whose: Traffic) -> Reply {
    // A reseller sees the traffic of their own users, nobody else's.
    let reseller = match whose {
        Traffic::User(_) => match auth.reach(Scope::Read)? {
            crate::api::request::Reach::Reseller(admin) => Some(admin),
            crate::api::request::Reach::All => None,
        },
        Traffic::Node(_) | Traffic::Everyone => {
            auth.need(Scope::Read)?;
            None
        }
    };
    let days = query.days.unwrap_or(30).clamp(1, 366);
    let now = now();
    let series = app
        .db
        .read(move |c| {
            match whose {
                Traffic::User(id) => {
                    if let Some(admin) = reseller {
                        crate::store::admins::check_owns(c, admin, id)?;
                    }
                    user_store::get(c, id)?;
                }
                Traffic::Node(id) => {
                    node_store::get(c, id)?;
                }
                Traffic::Everyone => {}
            }
            usage::daily(c, whose, days, now)
        })
        .await?;
    ok(json!({ "days": series }))
}

/// Who is connected now, from the nodes' last reports: the 200 users with the most devices
/// first, and how many users and devices in all.
pub(super) async fn online(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need(Scope::Read)?;
    let (list, users, devices) = app.db.read(|c| crate::store::nodes::online(c, 200)).await?;
    ok(json!({ "users": users, "devices": devices, "online": list }))
}

/// Everyone's traffic: per day, today and this month (UTC).
pub(super) async fn usage(State(app): State<Arc<App>>, auth: Auth, Query(query): Query<UsageQuery>) -> Reply {
    auth.need(Scope::Read)?;
    let days = query.days.unwrap_or(30).clamp(1, 366);
    let now = now();
    let (series, month) = app
        .db
        .read(move |c| {
            let series = usage::daily(c, Traffic::Everyone, days, now)?;
            Ok((series, usage::since(c, crate::clock::month_start_day(now))?))
        })
        .await?;
    let today = series.last().copied().unwrap_or_default();
    ok(json!({
        "days": series,
        "today": { "up": today.up, "down": today.down },
        "month": { "up": month.0, "down": month.1 },
    }))
}

/// One user's traffic per day.
pub(super) async fn user_usage(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<u64>,
    Query(query): Query<UsageQuery>,
) -> Reply {
    series_of(&app, &auth, &query, Traffic::User(id)).await
}

#[derive(Deserialize)]
pub(super) struct AuditQuery {
    before: Option<i64>,
    limit: Option<i64>,
    actor: Option<String>,
    action: Option<String>,
    user: Option<u64>,
}

/// The audit log, newest first, narrowed by who (`actor`), what (`action`, or `user.*`) and
/// which user (`user`, an id); with every actor and action it holds, for the panel's filters.
pub(super) async fn audit(State(app): State<Arc<App>>, auth: Auth, Query(query): Query<AuditQuery>) -> Reply {
    auth.need(Scope::Read)?;
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let words = |value: Option<String>, name: &str| match value.filter(|v| !v.is_empty()) {
        Some(v) if v.len() > 200 => {
            Err(crate::error::Error::invalid("bad_filter", format!("{name} is at most 200 bytes")))
        }
        v => Ok(v),
    };
    let filter = crate::store::AuditFilter {
        before: query.before,
        actor: words(query.actor, "actor")?,
        action: words(query.action, "action")?,
        user: query.user,
    };
    let (entries, (actors, actions)) = app
        .db
        .read(move |c| Ok((crate::store::audit_page(c, &filter, limit)?, crate::store::audit_facets(c)?)))
        .await?;
    ok(json!({ "entries": entries, "actors": actors, "actions": actions }))
}

/// Prometheus metrics ([`crate::metrics`]): for the read scope, or a scraper with the metrics
/// token.
pub(super) async fn metrics(
    State(app): State<Arc<App>>,
    headers: axum::http::HeaderMap,
    auth: Result<Auth, axum::response::Response>,
) -> Reply {
    use axum::http::{HeaderValue, header};
    use axum::response::IntoResponse as _;
    let scraper = app.config.metrics_token.as_ref().is_some_and(|token| {
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| hearth_shared::ct_eq(given.as_bytes(), token.as_bytes()))
    });
    if !scraper {
        auth?.need(Scope::Read)?;
    }
    let mut response = crate::metrics::text(&app).await?.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    Ok(response)
}
