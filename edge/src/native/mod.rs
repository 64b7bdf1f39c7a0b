//! The native edge: the same routes as the Worker, served by axum on tokio, stored in an
//! embedded libSQL database ([`store`]). Rate-limit state lives in memory here (one process
//! serves every request, so its counts are exact); on Cloudflare it lives in Durable Objects.

pub mod store;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use hearth_shared::Digest;
use hearth_shared::ratelimit::{Decision, FixedWindow, MissGuard, Network, TokenBucket};
use hearth_shared::trust::Trust;
use hearth_shared::wire::{SubToken, encode, stream};
use hearth_shared::{nodeauth, sha256};

use crate::config::EdgeConfig;
use crate::push;
use crate::routes::{Route, route};
use crate::serve::{self, Gate};
use crate::{Reply, api};
pub use store::Replica;
use store::{Store, StoreError};

/// How many usage reports one drain hands out.
const DRAIN_LIMIT: u32 = hearth_shared::wire::UsageDrain::MAX_REPORTS as u32;

#[derive(Default)]
struct Limiter {
    networks: HashMap<Network, (MissGuard, TokenBucket)>,
    links: HashMap<Digest, FixedWindow>,
}

/// The native edge's state.
pub struct Edge {
    config: EdgeConfig,
    store: Store,
    trust: RwLock<Trust>,
    limiter: Mutex<Limiter>,
    /// The User-Agent rules in force: the edge's own, then the owner's from control.
    rules: RwLock<Arc<Vec<hearth_shared::agent::UaRule>>>,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn internal(error: &StoreError) -> Reply {
    tracing::error!(%error, "storage failed");
    api::unavailable()
}

/// One request, as the edge needs it.
pub struct Request<'a> {
    /// GET, HEAD, POST, PUT...
    pub method: &'a str,
    /// The path.
    pub path: &'a str,
    /// The query, without `?`.
    pub query: &'a str,
    /// Request headers.
    pub headers: &'a HeaderMap,
    /// The client's address.
    pub client: IpAddr,
    /// The body.
    pub body: &'a [u8],
}

impl Request<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl Edge {
    /// Opens the edge's database (a replica of `replica`, if given) and loads its trust; up to
    /// `cache_bytes` of recently served links are kept in memory.
    pub async fn open(
        config: EdgeConfig,
        db: &std::path::Path,
        cache_bytes: usize,
        replica: Option<&Replica>,
    ) -> Result<Edge, StoreError> {
        let store = Store::open(db, cache_bytes, replica).await?;
        let trust = config.trust(store.trust().await?);
        let pushed = match store.stream(stream::EDGE_SETTINGS).await? {
            Some((_, Some(envelope))) => push::settings_rules(&envelope),
            _ => Vec::new(),
        };
        let rules = RwLock::new(Arc::new(serve::rules(&config, pushed)));
        Ok(Edge { config, store, trust: RwLock::new(trust), limiter: Mutex::new(Limiter::default()), rules })
    }

    /// Brings a replica up to date with its server, and takes the trust other edges stored.
    /// Returns whether anything changed.
    pub async fn sync(&self) -> Result<bool, StoreError> {
        if !self.store.sync().await? {
            return Ok(false);
        }
        let trust = self.config.trust(self.store.trust().await?);
        *self.trust.write().expect("trust lock") = trust;
        if let Some((_, Some(envelope))) = self.store.stream(stream::EDGE_SETTINGS).await? {
            *self.rules.write().expect("rules lock") =
                Arc::new(serve::rules(&self.config, push::settings_rules(&envelope)));
        }
        Ok(true)
    }

    fn trust(&self) -> Trust {
        self.trust.read().expect("trust lock").clone()
    }

    /// Answers one request.
    pub async fn handle(&self, request: &Request<'_>) -> Reply {
        match route(&self.config, request.method, request.path, request.query) {
            Route::Subscription(token) => self.subscription(request, token).await,
            Route::Health => Reply::text(200, "ok\n"),
            Route::Unknown => {
                // Look something up anyway, so an unknown path takes as long as an unknown link.
                let _ = self.store.link(&sha256(request.path.as_bytes())).await;
                serve::decoy()
            }
            Route::NodeCreds { node, after } => self.node_creds(request, node, after).await,
            Route::NodeUsage(node) => self.node_usage(request, node).await,
            Route::NodeAck(node) => self.node_ack(request, node).await,
            Route::NodeRelease(node) => self.node_release(request, node, None).await,
            Route::NodeReleaseFile(node, file) => self.node_release(request, node, Some(&file)).await,
            api if !self.config.push_token.matches(request.header("authorization")) => {
                tracing::info!(route = ?api, client = %request.client, "refused: bad push token");
                api::error(401, "unauthorized", "a valid push token is required")
            }
            Route::Push => self.push(request.body).await,
            Route::UsageDrain { after } => match self.store.drain_usage(after, DRAIN_LIMIT).await {
                Ok(drain) => Reply::bytes(200, encode(&drain)),
                Err(e) => internal(&e),
            },
            Route::ArchivePut => self.put_archive(request.body).await,
            Route::ReleasePut => self.put_release(request.body).await,
            Route::Export { after } => match api::ExportCursor::parse(&after) {
                None => api::bad_cursor(),
                Some(cursor) => match self.store.export(&cursor, api::EXPORT_PAGE).await {
                    Ok(page) => Reply::bytes(200, encode(&page)),
                    Err(e) => internal(&e),
                },
            },
            Route::ArchiveGet => match self.store.stream(stream::ARCHIVE).await {
                Ok(Some((_, Some(bytes)))) => Reply::bytes(200, bytes),
                Ok(_) => api::error(404, "no_archive", "no archive has been pushed yet"),
                Err(e) => internal(&e),
            },
        }
    }

    async fn subscription(&self, request: &Request<'_>, token: Option<SubToken>) -> Reply {
        let now = now_ms();
        let limits = self.config.limits;
        let network = Network::of(request.client);
        if limits.enabled {
            let mut limiter = self.limiter.lock().expect("limiter lock");
            let (guard, bucket) = limiter.networks.entry(network).or_default();
            match serve::network_gate(guard, bucket, limits.network, now) {
                Gate::Open => {}
                Gate::Decoy => return serve::decoy(),
                Gate::Limited(retry_after) => return serve::too_many(retry_after),
            }
        }
        let hash = token.as_ref().map_or_else(|| sha256(request.path.as_bytes()), SubToken::hash);
        // Only links that exist have a window, so a link already over its limit is refused
        // here, before the database is asked.
        let mut counted = false;
        if limits.enabled {
            let mut limiter = self.limiter.lock().expect("limiter lock");
            if let Some(window) = limiter.links.get_mut(&hash) {
                if let Decision::Deny { retry_after } = window.hit(now, limits.link) {
                    return serve::too_many(retry_after);
                }
                counted = true;
            }
        }
        let envelope = match self.store.link(&hash).await {
            Ok(envelope) => envelope,
            Err(e) => return internal(&e),
        };
        let (Some(token), Some(envelope)) = (token, envelope) else {
            if limits.enabled {
                let mut limiter = self.limiter.lock().expect("limiter lock");
                let (guard, _) = limiter.networks.entry(network).or_default();
                if guard.miss(now, limits.misses) {
                    tracing::info!(%network, "network sent too many unknown links: decoys for a while");
                }
            }
            return serve::decoy();
        };
        if limits.enabled && !counted {
            let mut limiter = self.limiter.lock().expect("limiter lock");
            let window = limiter.links.entry(hash).or_default();
            if let Decision::Deny { retry_after } = window.hit(now, limits.link) {
                return serve::too_many(retry_after);
            }
        }
        let scheme = request.header("x-forwarded-proto").unwrap_or("http");
        let host = request.header("host").unwrap_or("localhost");
        let sub_url = format!("{scheme}://{host}{}", request.path);
        let rules = self.rules.read().expect("rules lock").clone();
        serve::subscription(
            &rules,
            &envelope,
            &token,
            request.header("user-agent").unwrap_or(""),
            request.query,
            &sub_url,
        )
    }

    async fn push(&self, body: &[u8]) -> Reply {
        let now = now_ms() / 1000;
        let batch = match self.store.batch().await {
            Ok(batch) => batch,
            Err(e) => return internal(&e),
        };
        let mut checked = match push::check(body, &self.trust(), batch.as_ref(), now) {
            Ok(checked) => checked,
            Err(e) => return refused(&e),
        };
        if checked.unchanged {
            return api::json(200, &serde_json::json!({ "applied": 0, "unchanged": "batch" }));
        }
        match self.store.apply(&mut checked).await {
            Ok(applied) => {
                let settings = checked.writes.iter().find(|write| write.target == push::Target::Settings);
                if let Some(envelope) = settings.and_then(|write| write.envelope.as_deref()) {
                    let rules = serve::rules(&self.config, push::settings_rules(envelope));
                    *self.rules.write().expect("rules lock") = Arc::new(rules);
                }
                *self.trust.write().expect("trust lock") = checked.trust;
                tracing::info!(written = applied.written, unchanged = applied.unchanged, "push applied");
                api::applied(applied.written, applied.unchanged)
            }
            Err(StoreError::Refused(e)) => refused(&e),
            Err(e) => internal(&e),
        }
    }

    fn node_auth(&self, request: &Request<'_>, node: u64) -> Result<Trust, Reply> {
        let trust = self.trust();
        let path = if request.query.is_empty() {
            request.path.to_owned()
        } else {
            format!("{}?{}", request.path, request.query)
        };
        let header = request.header(nodeauth::HEADER);
        if let Err(reply) = api::authorize_node(header, &trust, request.method, &path, node, now_ms() / 1000) {
            tracing::info!(node, "node request refused");
            return Err(reply);
        }
        Ok(trust)
    }

    async fn node_creds(&self, request: &Request<'_>, node: u64, after: u64) -> Reply {
        if let Err(reply) = self.node_auth(request, node) {
            return reply;
        }
        let mut reply = match self.store.stream(&stream::creds(node)).await {
            Ok(Some((state, Some(envelope)))) if state.version > after => Reply::bytes(200, envelope),
            Ok(_) => Reply { status: 204, headers: Vec::new(), body: Vec::new() },
            Err(e) => return internal(&e),
        };
        match self.store.keys_header().await {
            Ok(Some(keys)) => reply.headers.push((nodeauth::KEYS_HEADER, keys)),
            Ok(None) => {}
            Err(e) => return internal(&e),
        }
        match self.release_for(node).await {
            Ok(Some(release)) => reply.headers.push((nodeauth::RELEASE_HEADER, release.to_string())),
            Ok(None) => {}
            Err(e) => return internal(&e),
        }
        reply
    }

    /// The release the rollout tells `node` to run, if the edge holds it.
    async fn release_for(&self, node: u64) -> Result<Option<u64>, StoreError> {
        let Some((_, Some(rollout))) = self.store.stream(stream::ROLLOUT).await? else { return Ok(None) };
        let Some(release) = push::release_for(&rollout, node) else { return Ok(None) };
        let held = self.store.stream(stream::RELEASE).await?.map(|(state, _)| state.version);
        Ok((held == Some(release)).then_some(release))
    }

    async fn node_release(&self, request: &Request<'_>, node: u64, file: Option<&str>) -> Reply {
        if let Err(reply) = self.node_auth(request, node) {
            return reply;
        }
        match self.release_for(node).await {
            Ok(Some(_)) => {}
            Ok(None) => return api::error(404, "no_release", "this node is not told to run a release"),
            Err(e) => return internal(&e),
        }
        let found = match file {
            None => self.store.stream(stream::RELEASE).await.map(|row| row.and_then(|(_, envelope)| envelope)),
            Some(name) => self.store.release_file(name).await,
        };
        match found {
            Ok(Some(bytes)) => Reply::bytes(200, bytes),
            Ok(None) => api::error(404, "no_release", "the release has no such file"),
            Err(e) => internal(&e),
        }
    }

    async fn put_release(&self, body: &[u8]) -> Reply {
        if body.len() > api::MAX_RELEASE_BYTES {
            return api::error(413, "too_large", "the release is over the size limit");
        }
        let stored = match self.store.stream(stream::RELEASE).await {
            Ok(stored) => stored.map(|(state, _)| state),
            Err(e) => return internal(&e),
        };
        let (write, files) = match api::check_release(body, &self.trust(), stored.as_ref(), now_ms() / 1000) {
            Ok(checked) => checked,
            Err(reply) => return reply,
        };
        match self.store.put_release(&write, &files).await {
            Ok(true) => Reply::text(200, "stored\n"),
            Ok(false) => Reply::text(200, "unchanged\n"),
            Err(StoreError::Refused(e)) => refused(&e),
            Err(e) => internal(&e),
        }
    }

    async fn node_ack(&self, request: &Request<'_>, node: u64) -> Reply {
        if let Err(reply) = self.node_auth(request, node) {
            return reply;
        }
        match self.store.stream(&stream::usage_ack(node)).await {
            Ok(Some((_, Some(envelope)))) => Reply::bytes(200, envelope),
            Ok(_) => Reply { status: 204, headers: Vec::new(), body: Vec::new() },
            Err(e) => internal(&e),
        }
    }

    async fn node_usage(&self, request: &Request<'_>, node: u64) -> Reply {
        let trust = match self.node_auth(request, node) {
            Ok(trust) => trust,
            Err(reply) => return reply,
        };
        let seq = match api::check_usage(request.body, &trust, node, now_ms() / 1000) {
            Ok(seq) => seq,
            Err(reply) => return reply,
        };
        match self.store.enqueue_usage(node, seq, request.body).await {
            Ok(_) => Reply::text(202, "queued\n"),
            Err(e) => internal(&e),
        }
    }

    async fn put_archive(&self, body: &[u8]) -> Reply {
        let stored = match self.store.stream(stream::ARCHIVE).await {
            Ok(stored) => stored.map(|(state, _)| state),
            Err(e) => return internal(&e),
        };
        let write = match api::check_archive(body, &self.trust(), stored.as_ref(), now_ms() / 1000) {
            Ok(write) => write,
            Err(reply) => return reply,
        };
        match self.store.put_archive(&write).await {
            Ok(true) => Reply::text(200, "stored\n"),
            Ok(false) => Reply::text(200, "unchanged\n"),
            Err(StoreError::Refused(e)) => refused(&e),
            Err(e) => internal(&e),
        }
    }
}

fn refused(error: &push::PushError) -> Reply {
    tracing::warn!(%error, "push refused");
    api::refused(error)
}

fn to_response(reply: Reply, head: bool) -> Response {
    let mut builder = Response::builder().status(StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK));
    for (name, value) in reply.headers {
        builder = builder.header(name, value);
    }
    let length = reply.body.len();
    let body = if head { Body::empty() } else { Body::from(reply.body) };
    builder
        .header(header::CONTENT_LENGTH, length)
        .body(body)
        .unwrap_or_else(|_| Response::new(Body::from("internal error")))
}

async fn handle(
    State(edge): State<Arc<Edge>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = Request {
        method: method.as_str(),
        path: uri.path(),
        query: uri.query().unwrap_or(""),
        headers: &headers,
        client: peer.ip(),
        body: &body,
    };
    let reply = edge.handle(&request).await;
    to_response(reply, method == Method::HEAD)
}

/// The edge's HTTP service.
pub fn router(edge: Arc<Edge>) -> Router {
    // The largest body any route takes: a push, control's archive, or a release.
    let limit = push::MAX_PUSH_BYTES.max(hearth_shared::envelope::Kind::Archive.max_len()).max(api::MAX_RELEASE_BYTES);
    Router::new().fallback(handle).layer(DefaultBodyLimit::max(limit)).with_state(edge)
}
