//! What nodes call (the same paths as on the edge, under the edge's API prefix), and
//! subscription links served by control itself.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{OriginalUri, Path, Query, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hearth_shared::agent::{format_override, match_user_agent};
use hearth_shared::devices::{Admission, Seen};
use hearth_shared::envelope::Envelope;
use hearth_shared::keys::PublicKey;
use hearth_shared::ratelimit::Decision;
use hearth_shared::wire::{NodeId, SubToken, stream};
use hearth_shared::{nodeauth, seal};
use serde::Deserialize;
use serde_json::json;

use super::request::{Body, decoy, refuse};
use crate::app::{App, Counters, now};
use crate::error::Error;
use crate::publish;
use crate::store::nodes::{self as node_store, EnrollRequest, UsageOutcome};

/// The longest a credential-set pull waits for a change.
const MAX_WAIT: u64 = 60;

/// The largest enrollment: a token, a key, two hashes, a certificate and a version fit in
/// far less.
const ENROLL_BODY: usize = 16 * 1024;

/// The largest report of a node's TLS identity (a certificate in PEM).
const TLS_BODY: usize = 16 * 1024;

pub(super) fn router() -> Router<Arc<App>> {
    use axum::extract::DefaultBodyLimit;
    use hearth_shared::envelope::Kind;
    Router::new()
        .route("/enroll", post(enroll).layer(DefaultBodyLimit::max(ENROLL_BODY)))
        .route("/nodes/{id}/creds", get(creds))
        .route("/nodes/{id}/usage", post(usage).layer(DefaultBodyLimit::max(Kind::UsageReport.max_len())))
        .route("/nodes/{id}/tls", post(tls).layer(DefaultBodyLimit::max(TLS_BODY)))
        .route("/nodes/{id}/release", get(release_manifest))
        .route("/nodes/{id}/release/{file}", get(release_file))
        .route(&format!("/{}", crate::install::SCRIPT_PATH), get(install_script))
        .route("/install/{file}", get(install_file))
}

/// Binaries are read whole (tens of MB): two downloads at a time, whoever asks, so that
/// strangers who know the prefix cannot fill a small server's memory with them.
pub(super) static INSTALL_DOWNLOADS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// The node install script (what the install command checks by its hash and runs).
async fn install_script(State(app): State<Arc<App>>, parts: axum::http::request::Parts) -> Response {
    if let Err(retry) = app.spend(super::request::client_ip(&parts, &app)) {
        return Error::TooMany(retry).into_response();
    }
    let mut response = crate::install::SCRIPT.clone().into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/x-shellscript; charset=utf-8"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A binary of the release in force, by its name (`hearth-node-linux-x86_64`), for the
/// install script: public like the script (a release is no secret; the install command holds
/// its hash), within the budget of requests without a credential.
async fn install_file(
    State(app): State<Arc<App>>,
    Path(file): Path<String>,
    parts: axum::http::request::Parts,
) -> Response {
    if let Err(retry) = app.spend(super::request::client_ip(&parts, &app)) {
        return Error::TooMany(retry).into_response();
    }
    let Ok(_permit) = INSTALL_DOWNLOADS.try_acquire() else {
        let mut busy = (StatusCode::SERVICE_UNAVAILABLE, "busy: try again in a few seconds\n").into_response();
        busy.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return busy;
    };
    let data_dir = app.config.data_dir.clone();
    let found = app
        .db
        .read(move |c| match crate::releases::in_force(c, now())? {
            Some((version, _)) => crate::releases::file(&data_dir, c, version, &file),
            None => Ok(None),
        })
        .await;
    match found {
        Ok(Some(bytes)) => octets(StatusCode::OK, bytes),
        Ok(None) => (StatusCode::NOT_FOUND, "no release in force has this file\n").into_response(),
        Err(e) => e.into_response(),
    }
}

fn octets(status: StatusCode, bytes: Vec<u8>) -> Response {
    let mut response = (status, bytes).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn enroll(
    State(app): State<Arc<App>>,
    parts: axum::http::request::Parts,
    Body(req): Body<EnrollRequest>,
) -> Response {
    if let Err(retry) = app.spend(super::request::client_ip(&parts, &app)) {
        return Error::TooMany(retry).into_response();
    }
    let now = now();
    let state = app.clone();
    let enrolled = app
        .db
        .write(move |tx| Ok((crate::nodes::enroll(tx, &state.signer, &req, now)?, state.signer.online(tx)?)))
        .await;
    match enrolled {
        Ok((enrolled, online)) => {
            app.changed();
            tracing::info!(node = enrolled.node, "node enrolled");
            // A node with a domain gets its certificate from the CA control's settings name.
            let acme = enrolled.domain.as_ref().map(|domain| {
                let acme = &app.config.acme;
                let ca_root = acme.ca_root.as_ref().and_then(|path| std::fs::read_to_string(path).ok());
                json!({
                    "domain": domain,
                    "directory": acme.directory,
                    "email": acme.email,
                    "eab_kid": acme.eab.as_ref().map(|(kid, _)| kid),
                    "eab_hmac_key": acme.eab.as_ref().map(|(_, key)| key),
                    "ca_root": ca_root,
                })
            });
            axum::Json(json!({
                "node": enrolled.node,
                "port": enrolled.port,
                "obfs": enrolled.obfs,
                "hop": enrolled.hop,
                "masquerade": enrolled.masquerade,
                "tls_name": enrolled.tls_name,
                "acme": acme,
                "root_key": app.signer.root.to_string(),
                "key_records": online.chain.iter().map(hex::encode).collect::<Vec<_>>(),
                "api_prefix": app.config.edge.api_prefix,
                "edge_url": app.edge_url(),
            }))
            .into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// Checks a node's signed request (its header over the method, host, path with query and
/// body) and takes its nonce, so the request is taken once; returns the node's key. (Its
/// callers' spans name the node.)
async fn node_auth(
    app: &App,
    node: NodeId,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<PublicKey, Response> {
    let key = app.db.read(move |c| node_store::key_of(c, node)).await.map_err(IntoResponse::into_response)?;
    let header = headers.get(nodeauth::HEADER).and_then(|v| v.to_str().ok());
    let path = uri.path_and_query().map_or_else(|| uri.path().to_owned(), ToString::to_string);
    // An HTTP/2 request names its authority in the URI, not in a Host header.
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))
        .unwrap_or_default();
    let request = nodeauth::Request { method: method.as_str(), host, path_and_query: &path, body };
    let now = now();
    let verified = nodeauth::verify(header, |n| (n == node).then_some(key).flatten(), &request, now)
        .and_then(|verified| app.node_nonces.lock().expect("nonces lock").take(&verified, now).map(|()| verified));
    match verified {
        Ok(verified) => {
            if verified.nonce.is_none() {
                tracing::warn!(
                    "the node signs its requests the old way (no nonce): only its reads are taken until it runs a newer release"
                );
            }
            key.ok_or_else(|| refuse(StatusCode::UNAUTHORIZED, "unknown_node", "unknown node"))
        }
        Err(e) => {
            tracing::info!(error = %e, "node request refused");
            Err(match e {
                nodeauth::NodeAuthError::Replayed => refuse(StatusCode::UNAUTHORIZED, "replayed", &e.to_string()),
                nodeauth::NodeAuthError::TooMany => refuse(StatusCode::TOO_MANY_REQUESTS, "too_many", &e.to_string()),
                _ => refuse(StatusCode::UNAUTHORIZED, "node_auth", &e.to_string()),
            })
        }
    }
}

#[derive(Deserialize)]
struct CredsQuery {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    wait: u64,
    /// The version of the full set under what the node holds; given by nodes that take
    /// deltas ([`hearth_shared::wire::CredDelta`]).
    base: Option<u64>,
}

/// A node's credential set or its delta (see [`publish::node_creds`]), when newer than
/// `after`; with `wait`, held up to that many
/// seconds (at most 60) until there is one, else 204 (as the edge answers). What it logs is
/// in a span that names the node and the version it holds (never its signature).
#[tracing::instrument(name = "pull", level = "warn", skip_all, fields(node = node, after = query.after))]
async fn creds(
    State(app): State<Arc<App>>,
    Path(node): Path<NodeId>,
    Query(query): Query<CredsQuery>,
    method: Method,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = node_auth(&app, node, &method, &uri, &headers, &[]).await {
        return response;
    }
    let now_s = now();
    let state = app.clone();
    let (after, base) = (query.after, query.base);
    let said = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (running, update) = (said(nodeauth::NODE_VERSION_HEADER), said(nodeauth::NODE_UPDATE_HEADER));
    let seen = app
        .db
        .write(move |tx| {
            node_store::seen(tx, node, now_s)?;
            crate::releases::node_says(tx, node, running.as_deref(), update.as_deref(), now_s)?;
            // A node holding a later set than control has (control was restored from an older
            // state): the set is signed again above it, so the node takes it.
            publish::raise_creds(tx, &state.signer, node, after, now_s)?;
            publish::takes_deltas(tx, &state.signer, node, base.is_some(), now_s)
        })
        .await;
    if let Err(e) = seen {
        return e.into_response();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(query.wait.min(MAX_WAIT));
    let mut changes = app.creds.subscribe();
    let mut stopping = app.stopping.subscribe();
    let mut keys;
    let mut told: Option<u64> = None;
    let mut response = loop {
        changes.borrow_and_update();
        let state = app.clone();
        // The key records are read with the set, so a set signed by a rotated key always
        // travels with the record that certifies it.
        let read = move |c: &rusqlite::Connection| {
            Ok((publish::node_creds(c, node, after, base)?, state.signer.online(c)?, crate::releases::target(c, node)?))
        };
        match app.db.read(read).await {
            Ok((set, online, target)) => {
                keys = Some((online, target));
                if let Some(bytes) = set {
                    break octets(StatusCode::OK, bytes);
                }
                // A new release to run is news too: the answer names it.
                if told.is_some_and(|told| told != target) {
                    break StatusCode::NO_CONTENT.into_response();
                }
                told = Some(target);
            }
            Err(e) => return e.into_response(),
        }
        tokio::select! {
            changed = tokio::time::timeout_at(deadline, changes.changed()) => match changed {
                Ok(Ok(())) => continue,
                _ => break StatusCode::NO_CONTENT.into_response(),
            },
            // Shutting down: answer now, so a graceful stop never waits on a long poll.
            _ = stopping.wait_for(|stop| *stop) => break StatusCode::NO_CONTENT.into_response(),
        }
    };
    // Where the node should turn when control does not answer: the edge in force now, which
    // may not be the one the node enrolled with (the channel is control's pinned TLS).
    let edge = app.edge_url().unwrap_or_default();
    if let Ok(value) = HeaderValue::from_str(&edge) {
        response.headers_mut().insert(nodeauth::EDGE_HEADER, value);
    }
    if let Some((keys, release)) = keys {
        if let Ok(value) = HeaderValue::from_str(&hearth_shared::trust::chain_to_header(&keys.chain)) {
            response.headers_mut().insert(nodeauth::KEYS_HEADER, value);
        }
        if release != 0 {
            response.headers_mut().insert(nodeauth::RELEASE_HEADER, HeaderValue::from(release));
        }
    }
    response
}

/// The signed manifest of the release a node is told to run.
async fn release_manifest(
    State(app): State<Arc<App>>,
    Path(node): Path<NodeId>,
    method: Method,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> Response {
    release_answer(&app, node, &method, &uri, &headers, None).await
}

/// A binary of the release a node is told to run.
async fn release_file(
    State(app): State<Arc<App>>,
    Path((node, file)): Path<(NodeId, String)>,
    method: Method,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> Response {
    release_answer(&app, node, &method, &uri, &headers, Some(file)).await
}

/// The manifest (or, with `file`, that binary) of the release `node` is told to run.
#[tracing::instrument(name = "release", level = "warn", skip_all, fields(node = node, file = file.as_deref().unwrap_or("manifest")))]
async fn release_answer(
    app: &Arc<App>,
    node: NodeId,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    file: Option<String>,
) -> Response {
    if let Err(response) = node_auth(app, node, method, uri, headers, &[]).await {
        return response;
    }
    let state = app.clone();
    let what = if file.is_some() { "release file" } else { "release" };
    let found = app
        .db
        .read(move |c| {
            let target = crate::releases::target(c, node)?;
            match &file {
                None => crate::releases::manifest(c, target),
                Some(name) => crate::releases::file(&state.config.data_dir, c, target, name),
            }
        })
        .await;
    match found {
        Ok(Some(bytes)) => octets(StatusCode::OK, bytes),
        Ok(None) => Error::NotFound(what).into_response(),
        Err(e) => e.into_response(),
    }
}

/// A node's signed usage report: applied exactly once, answered with the signed
/// acknowledgement. What it logs is in a span that names the node (never the report).
#[tracing::instrument(name = "usage", level = "warn", skip_all, fields(node = node))]
async fn usage(
    State(app): State<Arc<App>>,
    Path(node): Path<NodeId>,
    method: Method,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(response) = node_auth(&app, node, &method, &uri, &headers, &body).await {
        return response;
    }
    let now = now();
    let state = app.clone();
    let result = app
        .db
        .write(move |tx| {
            let outcome = crate::nodes::apply_usage(tx, &state.signer, node, &body, now)?;
            let ack = publish::usage_ack(tx, &state.signer, node, outcome.acked(), now)?;
            Ok((outcome, ack))
        })
        .await;
    match result {
        Ok((outcome, ack)) => {
            if let UsageOutcome::Applied(seq) = outcome {
                Counters::add(&app.counters.usage_reports, 1);
                tracing::debug!(seq, "usage report applied");
                app.changed();
            }
            octets(StatusCode::OK, ack)
        }
        Err(e) => {
            Counters::add(&app.counters.usage_refused, 1);
            tracing::info!(error = %e, "usage report refused");
            e.into_response()
        }
    }
}

/// What a node says of its TLS identity.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsReport {
    /// Its self-signed certificate, PEM.
    certificate: String,
    /// Its public certificate by ACME, and how getting it went (a node with a domain).
    #[serde(default)]
    acme: Option<crate::store::identity::AcmeReport>,
}

/// A node registers its self-signed certificate (it makes one at enrollment, and nodes
/// enrolled by earlier releases send theirs once), and says how getting its public one goes:
/// signed by the node, so nobody else can make apps trust a certificate for it. When what
/// apps check changes, the node's users get new snapshots.
#[tracing::instrument(name = "tls", level = "warn", skip_all, fields(node = node))]
async fn tls(
    State(app): State<Arc<App>>,
    Path(node): Path<NodeId>,
    method: Method,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(response) = node_auth(&app, node, &method, &uri, &headers, &body).await {
        return response;
    }
    let report: TlsReport = match serde_json::from_slice(&body) {
        Ok(report) => report,
        Err(e) => return Error::invalid("bad_json", e.to_string()).into_response(),
    };
    let certificate = match crate::store::identity::Certificate::from_pem(&report.certificate) {
        Ok(certificate) => certificate,
        Err(e) => {
            tracing::info!(error = %e, "a node's certificate refused");
            return e.into_response();
        }
    };
    let (now, state, pin, acme) = (now(), app.clone(), hex::encode(certificate.sha256), report.acme);
    let written = app
        .db
        .write(move |tx| crate::nodes::register_certificate(tx, &state.signer, node, &certificate, acme.as_ref(), now))
        .await;
    match written {
        Ok(new) => {
            if new {
                tracing::info!(cert_sha256 = %pin, "the node registered a new certificate");
            }
            app.changed();
            axum::Json(json!({ "cert_sha256": pin })).into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// A subscription link served by control itself (the same answer as the edge's).
pub(super) async fn subscription(
    State(app): State<Arc<App>>,
    Path(token): Path<String>,
    RawQuery(query): RawQuery,
    uri: Uri,
    headers: HeaderMap,
    method: Method,
) -> Response {
    // (What is no token may be an alias: an old panel's links could live under the same
    // folder.)
    let Some(token) = SubToken::parse(&token).or_else(|| SubToken::for_alias(uri.path())) else { return decoy() };
    serve_link(app, token, query, headers, method).await
}

/// Any other path: an alias (an imported user's old subscription path) served like the
/// user's link, or the decoy.
pub(super) async fn alias(State(app): State<Arc<App>>, uri: Uri, headers: HeaderMap, method: Method) -> Response {
    if !matches!(method, Method::GET | Method::HEAD) {
        return decoy();
    }
    let Some(token) = SubToken::for_alias(uri.path()) else { return decoy() };
    serve_link(app, token, uri.query().map(str::to_owned), headers, method).await
}

async fn serve_link(
    app: Arc<App>,
    token: SubToken,
    query: Option<String>,
    headers: HeaderMap,
    method: Method,
) -> Response {
    let hash = token.hash();
    let name = stream::snapshot(&hash);
    let stored = match app.db.read(move |c| crate::store::streams::envelope(c, &name)).await {
        Ok(stored) => stored,
        Err(e) => return e.into_response(),
    };
    let Some((_, bytes)) = stored else { return decoy() };
    if let Decision::Deny { retry_after } = app.link_hit(hash) {
        let mut response =
            (StatusCode::TOO_MANY_REQUESTS, "Too many requests for this link. Your app will try again later.\n")
                .into_response();
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
        return response;
    }
    // Control signed and stored this envelope itself: its body is read in place.
    let Some(body) = Envelope::stored_body(&bytes) else { return decoy() };
    let Ok(snapshot) = seal::open(body, &token) else { return decoy() };
    // An app that names its device is held to the user's device limit, as at an edge.
    let seen = (snapshot.hwid.limit > 0)
        .then(|| Seen::from_headers(|name| headers.get(name).and_then(|v| v.to_str().ok())))
        .flatten();
    let refused = match seen {
        None => false,
        Some(seen) => {
            let (user, limit, now) = (snapshot.user, snapshot.hwid.limit, now());
            match app.db.write(move |tx| crate::store::hwid::admit_here(tx, user, limit, &seen, now)).await {
                Ok(admission) => admission == Admission::Refused,
                // Storage trouble never takes a link away.
                Err(e) => {
                    tracing::warn!(error = %e, "registering a device failed; served the link");
                    false
                }
            }
        }
    };
    let snapshot = if refused { hearth_shared::devices::refused(&snapshot) } else { snapshot };
    let query = query.unwrap_or_default();
    let user_agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let wants = format_override(&query)
        .unwrap_or_else(|| match_user_agent(user_agent, &app.ua_rules.read().expect("rules lock")));
    let url = format!("{}/{}", app.sub_url(), token.to_link_form());
    // Only a browser's page speaks a language and names a device: apps' profiles skip it.
    let viewer = match wants {
        hearth_shared::agent::Wants::Page => {
            let accept_language =
                headers.get(header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok()).unwrap_or_default();
            hearth_shared::render::page::Viewer::of(user_agent, accept_language, &query)
        }
        hearth_shared::agent::Wants::Profile(_) => Default::default(),
    };
    let answer = hearth_shared::render::answer_at(&snapshot, wants, &url, &Default::default(), viewer);
    Counters::add(&app.counters.subscriptions, 1);
    let mut response = if method == Method::HEAD {
        let mut response = StatusCode::OK.into_response();
        response.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(answer.body.len()));
        response
    } else {
        (StatusCode::OK, answer.body).into_response()
    };
    for (name, value) in answer.headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}
