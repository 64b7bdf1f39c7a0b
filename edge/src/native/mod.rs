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
use hearth_shared::wire::{SubToken, stream};
use hearth_shared::{nodeauth, sha256};

use crate::config::EdgeConfig;
use crate::push;
use crate::routes::{Route, route};
use crate::serve::{self, Gate};
use crate::service::{self, Call};
use crate::storage::Storage as _;
use crate::{Reply, api};
pub use store::Replica;
use store::{Store, StoreError};

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
        let edge = Edge {
            trust: RwLock::new(config.trust(None)),
            rules: RwLock::new(Arc::new(serve::rules(&config, Vec::new()))),
            config,
            store,
            limiter: Mutex::new(Limiter::default()),
        };
        edge.reload().await?;
        Ok(edge)
    }

    /// Takes the trust and the owner's rules from the database (after a push, or what other
    /// edges stored).
    async fn reload(&self) -> Result<(), StoreError> {
        let trust = self.config.trust(self.store.trust().await?);
        *self.trust.write().expect("trust lock") = trust;
        let pushed = match self.store.stream(stream::EDGE_SETTINGS).await? {
            Some((_, Some(envelope))) => push::settings_rules(&envelope),
            _ => Vec::new(),
        };
        *self.rules.write().expect("rules lock") = Arc::new(serve::rules(&self.config, pushed));
        Ok(())
    }

    /// Brings a replica up to date with its server, and takes the trust other edges stored.
    /// Returns whether anything changed.
    pub async fn sync(&self) -> Result<bool, StoreError> {
        if !self.store.sync().await? {
            return Ok(false);
        }
        self.reload().await?;
        Ok(true)
    }

    fn trust(&self) -> Trust {
        self.trust.read().expect("trust lock").clone()
    }

    /// Answers one request.
    pub async fn handle(&self, request: &Request<'_>) -> Reply {
        let route = route(&self.config, request.method, request.path, request.query);
        match route {
            Route::Subscription(token) => return self.subscription(request, token).await,
            Route::Health => return Reply::text(200, "ok\n"),
            Route::Unknown => {
                // Look something up anyway, so an unknown path takes as long as an unknown link.
                let _ = self.store.link(&sha256(request.path.as_bytes())).await;
                return serve::decoy();
            }
            _ => {}
        }
        let call = Call {
            method: request.method,
            path: request.path,
            query: request.query,
            authorization: request.header("authorization"),
            node_signature: request.header(nodeauth::HEADER),
            host: request.header("host").unwrap_or_default(),
            body: request.body,
            now: now_ms() / 1000,
        };
        let pushed = route == Route::Push;
        let reply = match service::handle(&self.store, &self.config, &self.trust(), route.clone(), &call).await {
            Ok(reply) => reply,
            Err(e) => return internal(&e),
        };
        if let Some(node) = service::signed_the_old_way(&route, &call, &reply) {
            tracing::warn!(
                node,
                "the node signs its requests the old way (no nonce): only its reads are taken until it runs a newer release"
            );
        }
        match reply.status {
            200 if pushed => {
                tracing::info!(answer = %String::from_utf8_lossy(&reply.body), "push applied");
                if let Err(e) = self.reload().await {
                    return internal(&e);
                }
            }
            401 | 403 => tracing::info!(route = ?route, client = %request.client, "API request refused"),
            400 | 409 | 413 => {
                tracing::warn!(route = ?route, answer = %String::from_utf8_lossy(&reply.body), "refused");
            }
            _ => {}
        }
        reply
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
    mut headers: HeaderMap,
    body: Bytes,
) -> Response {
    // An HTTP/2 request names its authority in the URI, not in a Host header.
    if !headers.contains_key(header::HOST)
        && let Some(value) = uri.authority().and_then(|a| header::HeaderValue::from_str(a.as_str()).ok())
    {
        headers.insert(header::HOST, value);
    }
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
