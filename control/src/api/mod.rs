//! Control's HTTP surface: everything lives under secret prefixes; anything else gets the
//! same decoy as an unknown subscription link.
//!
//! - `/<admin prefix>/`: the admin panel (`setup` is its first-run page; `assets/` its files).
//! - `/<admin prefix>/api/...`: the admin API (JSON), for the owner's session or an API token.
//! - `/<admin prefix>/metrics`: Prometheus metrics (admin session, read token, or the
//!   configured metrics token).
//! - `/<api prefix>/...`: what nodes call (enroll, pull their credential set, report usage),
//!   the same paths as on the edge.
//! - `/<sub prefix>/<token>`: subscription links, served by control itself.
//! - `/healthz`.

mod admin;
mod nodes;
mod request;

use request::MAX_BODY;
use request::{client_ip, decoy};

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::response::Response;
use axum::routing::get;

use crate::app::App;

/// Builds the router.
pub(crate) fn router(app: Arc<App>) -> Router {
    let admin = format!("/{}", app.config.admin_prefix);
    let node_api = format!("/{}", app.config.edge.api_prefix);
    let sub = format!("/{}", app.config.edge.sub_prefix);
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        // The admin panel: its page, and its files by hashed name.
        .route(&admin, get(crate::ui::to_slash))
        .route(&format!("{admin}/"), get(crate::ui::index))
        .route(&format!("{admin}/setup"), get(crate::ui::index))
        .route(&format!("{admin}/assets/{{name}}"), get(asset))
        .nest(&admin, admin::router().layer(axum::middleware::from_fn_with_state(app.clone(), admin_span)))
        .nest(&node_api, nodes::router())
        .route(&format!("{sub}/{{token}}"), get(nodes::subscription))
        // Anything else: an alias (an imported user's old subscription path), or the decoy.
        .fallback(nodes::alias)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(app)
}

/// Runs an admin API request in a span naming its method, its route (the pattern it matched,
/// `/api/users/{id}`, without the secret admin prefix and never the path as sent) and the
/// client's address: what the handler logs carries them. Nothing of the request's headers or
/// body is recorded.
async fn admin_span(
    axum::extract::State(app): axum::extract::State<Arc<App>>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    use tracing::Instrument as _;
    let (parts, body) = request.into_parts();
    let client = client_ip(&parts, &app);
    let admin = format!("/{}", app.config.admin_prefix);
    let route = parts
        .extensions
        .get::<axum::extract::MatchedPath>()
        .and_then(|matched| matched.as_str().strip_prefix(&admin))
        .filter(|route| route.starts_with('/'))
        .unwrap_or("-")
        .to_owned();
    let span = tracing::warn_span!("request", method = %parts.method, route = %route, %client);
    next.run(Request::from_parts(parts, body)).instrument(span).await
}

/// The decoy answer.
/// A script or style sheet of the panel by its hashed name; any other name gets the decoy.
async fn asset(axum::extract::Path(name): axum::extract::Path<String>, headers: axum::http::HeaderMap) -> Response {
    crate::ui::asset(&name, &headers).unwrap_or_else(decoy)
}

#[cfg(test)]
mod tests;
