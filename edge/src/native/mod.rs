//! The native edge: the same routes as the Worker, served by hyper on tokio, stored in an
//! embedded libSQL database ([`store`]). Rate-limit state lives in memory here (one process
//! serves every request, so its counts are exact); on Cloudflare it lives in Durable Objects.

mod archive;
pub mod store;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use hearth_shared::Digest;
use hearth_shared::ratelimit::{Decision, FixedWindow, Network, PerNetwork};
use hearth_shared::trust::Trust;
use hearth_shared::wire::{SubToken, stream};
use hearth_shared::{nodeauth, sha256};

use crate::config::EdgeConfig;
use crate::push;
use crate::routes::{Route, route};
use crate::serve;
use crate::service::{self, Call};
use crate::storage::Storage as _;
use crate::{Reply, api};
pub use store::Replica;
use store::{Store, StoreError, now_ms};

struct Limiter {
    networks: serve::Networks,
    links: HashMap<Digest, FixedWindow>,
    pruned_ms: u64,
}

impl Default for Limiter {
    fn default() -> Limiter {
        Limiter { networks: serve::Networks::new(Self::NETWORKS), links: HashMap::new(), pruned_ms: 0 }
    }
}

impl Limiter {
    /// At most this many networks are tracked ([`serve::Networks`]).
    const NETWORKS: usize = 100_000;
    /// At most this many link windows; past it, a link not seen before is not counted until
    /// windows end (its fetches are still limited by its network's bucket).
    const LINKS: usize = 200_000;
    /// How often link windows that have ended are dropped.
    const PRUNE_EVERY_MS: u64 = 60_000;
    /// How often when the map is full: sooner, but not on every request.
    const PRUNE_FULL_EVERY_MS: u64 = 1_000;

    /// Drops the link windows that have ended.
    fn prune(&mut self, now_ms: u64, limits: crate::config::Limits) {
        let every = if self.links.len() >= Self::LINKS { Self::PRUNE_FULL_EVERY_MS } else { Self::PRUNE_EVERY_MS };
        if now_ms < self.pruned_ms + every {
            return;
        }
        self.pruned_ms = now_ms;
        self.links.retain(|_, window| window.start_ms + limits.link.window_ms > now_ms);
    }
}

/// The native edge's state.
pub struct Edge {
    config: EdgeConfig,
    store: Store,
    trust: RwLock<Trust>,
    limiter: Mutex<Limiter>,
    /// API requests refused for their token or signature, for the health answer and the log.
    token_refusals: Mutex<api::RefusalLog>,
    /// The User-Agent rules in force: the edge's own, then the owner's from control.
    owner: RwLock<Arc<serve::Owner>>,
    /// A peer that is not a trusted proxy but sent forwarding headers (the first one seen):
    /// logged once, and told to control with every push answer.
    untrusted_forwarding: Mutex<Option<IpAddr>>,
}

fn internal(error: &StoreError) -> Reply {
    if error.is_disk_full() {
        tracing::error!(%error, "the disk is full: nothing more is stored until space is freed");
        return api::disk_full();
    }
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
    /// Notes a peer that sent forwarding headers without being a trusted proxy: warned of
    /// once (every client behind it looks like it, so one prober's misses would send them all
    /// the decoy) and told to control.
    fn untrusted_forwarding(&self, peer: IpAddr) {
        let mut seen = self.untrusted_forwarding.lock().expect("forwarding lock");
        if seen.is_none() {
            *seen = Some(peer);
            tracing::warn!(
                %peer,
                "requests from this address name the client they forward for, but it is not in \
                 HEARTH_TRUSTED_PROXIES: every client behind it counts as this one address (one \
                 prober's misses would send them all the decoy); add the proxy to HEARTH_TRUSTED_PROXIES"
            );
        }
    }

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
            owner: RwLock::new(Arc::new(serve::owner(&config, Default::default()))),
            config,
            store,
            limiter: Mutex::new(Limiter::default()),
            token_refusals: Mutex::new(api::RefusalLog::default()),
            untrusted_forwarding: Mutex::new(None),
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
            Some((_, Some(envelope))) => push::stored_settings(&envelope),
            _ => Default::default(),
        };
        *self.owner.write().expect("owner lock") = Arc::new(serve::owner(&self.config, pushed));
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

    /// Forgets the windows of links a push changed or deleted: a rotated link gets the decoy
    /// at once rather than 429 for the rest of its window.
    fn forget_windows(&self) {
        let changed = self.store.take_changed_links();
        let mut limiter = self.limiter.lock().expect("limiter lock");
        for hash in &changed {
            limiter.links.remove(hash);
        }
    }

    /// Counts a refused API request, logging at most one line a minute (with how many were
    /// refused since the last), so a flood of bad tokens cannot flood the log.
    fn refused(&self, route: &Route, client: IpAddr) {
        if let Some(refused) = self.token_refusals.lock().expect("refusal log lock").count(now_ms()) {
            tracing::info!(route = ?route, %client, refused, "API requests refused (bad push token or node signature) since the last such line");
        }
    }

    fn trust(&self) -> Trust {
        self.trust.read().expect("trust lock").clone()
    }

    /// Answers one request.
    pub async fn handle(&self, request: &Request<'_>) -> Reply {
        self.handle_routed(route(&self.config, request.method, request.path, request.query), request).await
    }

    /// Answers one request, routed already (the server routes it first, to know what body it
    /// may read).
    async fn handle_routed(&self, route: Route, request: &Request<'_>) -> Reply {
        match route {
            // (A path under the link prefix that is no token may be an alias: an old panel's
            // links could live under the same folder.)
            Route::Subscription(None) => {
                let alias = self.owner.read().expect("owner lock").settings.alias(request.path);
                return self.subscription(request, alias).await;
            }
            Route::Subscription(token) => return self.subscription(request, token).await,
            Route::Health => return self.token_refusals.lock().expect("refusal log lock").health(),
            Route::Unknown => {
                // An old subscription path of a user taken over from another panel is served
                // like a link, when it is under a prefix the owner's aliases use.
                let alias = self.owner.read().expect("owner lock").settings.alias(request.path);
                if let Some(token) = alias.filter(|_| matches!(request.method, "GET" | "HEAD")) {
                    return self.subscription(request, Some(token)).await;
                }
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
        let mut reply = reply;
        if pushed && let Some(peer) = *self.untrusted_forwarding.lock().expect("forwarding lock") {
            reply.headers.push((hearth_shared::wire::UNTRUSTED_FORWARDING_HEADER, peer.to_string()));
        }
        match reply.status {
            200 if pushed => {
                tracing::info!(answer = %String::from_utf8_lossy(&reply.body), "push applied");
                self.forget_windows();
                if let Err(e) = self.reload().await {
                    return internal(&e);
                }
            }
            401 | 403 => self.refused(&route, request.client),
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
            limiter.prune(now, limits);
            if let Some(refusal) = limiter.networks.gate(network, now, limits).refusal() {
                return refusal;
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
                if limiter.networks.miss(network, now, limits.misses) {
                    tracing::info!(%network, "network sent too many unknown links: decoys for a while");
                }
            }
            return serve::decoy();
        };
        if limits.enabled && !counted {
            let mut limiter = self.limiter.lock().expect("limiter lock");
            if limiter.links.len() < Limiter::LINKS || limiter.links.contains_key(&hash) {
                let window = limiter.links.entry(hash).or_default();
                if let Decision::Deny { retry_after } = window.hit(now, limits.link) {
                    return serve::too_many(retry_after);
                }
            }
        }
        let scheme = request.header("x-forwarded-proto").unwrap_or("http");
        let host = request.header("host").unwrap_or("localhost");
        let sub_url = format!("{scheme}://{host}{}", request.path);
        let Some(snapshot) = serve::open(&envelope, &token) else {
            return serve::decoy();
        };
        let admission = match serve::device(&snapshot, |name| request.header(name).map(str::to_owned)) {
            None => None,
            Some(seen) => match self.store.admit_device(&hash, &token, &snapshot.hwid, &seen, now / 1000).await {
                Ok(admission) => Some(admission),
                // Storage trouble never takes a link away: it is served as if known.
                Err(e) => {
                    tracing::warn!(error = %e, "storing a link's devices failed; served it");
                    None
                }
            },
        };
        let owner = self.owner.read().expect("owner lock").clone();
        serve::subscription(
            &owner,
            &snapshot,
            admission,
            &token,
            request.header("user-agent").unwrap_or(""),
            request.header("accept-language").unwrap_or(""),
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

/// Bounds on what a connection or request may take before the edge has read and judged it.
pub mod bounds {
    use std::time::Duration;

    /// Connections open at once; more are closed as soon as they are accepted.
    pub const CONNECTIONS: usize = 1024;
    /// Connections open at once from one client network (IPv4 /24, IPv6 /48), so that one
    /// host holding connections open (slow-loris) cannot take all of [`CONNECTIONS`]. A
    /// trusted proxy's connections are not counted: it carries everyone's.
    pub const CONNECTIONS_PER_NETWORK: usize = 64;
    /// Request bodies being read at once (only routes that take one, once allowed to).
    pub const BODIES: usize = 16;
    /// Time to send a request's line and headers (also an idle kept-alive connection's limit).
    pub const HEADERS: Duration = Duration::from_secs(10);
    /// The most bytes of request line and headers buffered.
    pub const HEADER_BYTES: usize = 16 * 1024;
    /// Time to send a body, beyond [`BODY_BASE`](self::BODY_BASE): at least this many bytes a
    /// second.
    pub const BODY_RATE: u64 = 256 * 1024;
    /// Time any body may take.
    pub const BODY_BASE: Duration = Duration::from_secs(30);
    /// How long a body the edge does not want is read and thrown away (so the client sees
    /// the answer rather than a reset).
    pub const DISCARD: Duration = Duration::from_secs(10);
    /// How fast such a body is read, after its first [`DISCARD_BURST`]: a client sending more
    /// waits for the edge, which spends next to nothing on it (at most 10.25 MiB in all).
    pub const DISCARD_RATE: u64 = 1024 * 1024;
    /// See [`DISCARD_RATE`].
    pub const DISCARD_BURST: u64 = 256 * 1024;
}

/// The client a request is from: the TCP peer, or, when the peer is a trusted proxy, the
/// address it says it forwards for (`CF-Connecting-IP`, else the right-most `X-Forwarded-For`
/// hop that is not itself a trusted proxy).
pub fn client_of(config: &EdgeConfig, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
    let values = |name: &'static str| headers.get_all(name).into_iter().filter_map(|v| v.to_str().ok());
    hearth_shared::forwarded::client(
        &config.trusted_proxies,
        peer,
        values("cf-connecting-ip"),
        values("x-forwarded-for"),
    )
}

/// Shared between connections: the edge and the bodies being read.
struct Shared {
    edge: Arc<Edge>,
    bodies: tokio::sync::Semaphore,
}

fn is_empty(headers: &HeaderMap) -> bool {
    !headers.contains_key(header::TRANSFER_ENCODING)
        && headers.get(header::CONTENT_LENGTH).is_none_or(|v| v.as_bytes() == b"0")
}

/// Reads a body the edge does not want and throws it away, for a while, so the client gets
/// the answer rather than a reset; nothing of it is kept.
fn discard<B>(body: B)
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
{
    use http_body_util::BodyExt as _;
    tokio::spawn(async move {
        let mut body = body;
        let (mut seen, started) = (0u64, tokio::time::Instant::now());
        let _ = tokio::time::timeout(bounds::DISCARD, async {
            loop {
                seen += match body.frame().await {
                    Some(Ok(frame)) => frame.data_ref().map_or(0, |data| bytes::Buf::remaining(data) as u64),
                    _ => break,
                };
                // Paced: the next read waits until the bytes seen are within the allowance.
                let ahead = seen.saturating_sub(bounds::DISCARD_BURST);
                let due = started + std::time::Duration::from_secs_f64(ahead as f64 / bounds::DISCARD_RATE as f64);
                tokio::time::sleep_until(due).await;
            }
        })
        .await;
    });
}

/// The answer to a body over its route's cap.
fn too_large() -> Reply {
    api::error(413, "too_large", "the body is over this route's size limit")
}

/// Whether the request says its body is longer than `cap`.
fn declared_over(headers: &HeaderMap, cap: usize) -> bool {
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    declared.is_some_and(|length| length > cap as u64)
}

/// The time a body of up to `cap` bytes may take: [`bounds::BODY_BASE`], and
/// [`bounds::BODY_RATE`] for its bytes.
fn body_time(cap: usize) -> std::time::Duration {
    bounds::BODY_BASE + std::time::Duration::from_secs(cap as u64 / bounds::BODY_RATE)
}

/// Reads a body of at most `cap` bytes (413 past it, without reading the rest), in a time
/// that allows [`bounds::BODY_RATE`].
async fn read_body<B>(shared: &Shared, headers: &HeaderMap, body: B, cap: usize) -> Result<Bytes, Reply>
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    use http_body_util::BodyExt as _;
    if declared_over(headers, cap) {
        discard(body);
        return Err(too_large());
    }
    let Ok(_permit) = shared.bodies.acquire().await else {
        return Err(api::unavailable());
    };
    match tokio::time::timeout(body_time(cap), http_body_util::Limited::new(body, cap).collect()).await {
        Err(_) => Err(api::error(408, "timeout", "the body did not arrive in time")),
        Ok(Err(e)) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => Err(too_large()),
        Ok(Err(_)) => Err(api::error(400, "bad_body", "the body could not be read")),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

/// Answers one HTTP request: routed by its method and path first; a body is read only for a
/// route that takes one, once control's token (where the route needs it) was checked, and
/// only up to the route's cap. Everything else gets its answer without its body being read.
async fn answer<B>(shared: &Shared, peer: SocketAddr, request: axum::http::Request<B>) -> Response
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let edge = &shared.edge;
    let (parts, body) = request.into_parts();
    let mut headers = parts.headers;
    let (method, uri) = (parts.method, parts.uri);
    // An HTTP/2 request names its authority in the URI, not in a Host header.
    if !headers.contains_key(header::HOST)
        && let Some(value) = uri.authority().and_then(|a| header::HeaderValue::from_str(a.as_str()).ok())
    {
        headers.insert(header::HOST, value);
    }
    let client = client_of(&edge.config, peer.ip(), &headers);
    // The scheme the browser page writes links with: believed only from a trusted proxy.
    if !crate::config::trusted(&edge.config.trusted_proxies, peer.ip().to_canonical()) {
        headers.remove("x-forwarded-proto");
        if hearth_shared::forwarded::FORWARDING_HEADERS.iter().any(|name| headers.contains_key(*name)) {
            edge.untrusted_forwarding(peer.ip().to_canonical());
        }
    }
    let path = uri.path();
    let query = uri.query().unwrap_or("");
    let route = route(&edge.config, method.as_str(), path, query);
    let cap = crate::routes::max_body(&route);
    let allowed = !crate::routes::needs_push_token(&route)
        || edge.config.push_token.matches(headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()));
    // Control's archive streams in and out a piece at a time (see `archive`).
    match route {
        Route::ArchivePut if allowed => {
            let (reply, close) = shared.receive_archive(&headers, body).await;
            let mut response = to_response(reply, false);
            if close {
                response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            }
            return response;
        }
        Route::ArchiveGet if allowed && is_empty(&headers) => return edge.send_archive().await,
        _ => {}
    }
    let empty = is_empty(&headers);
    let mut close = false;
    let body = if cap == 0 || !allowed || empty {
        if !empty {
            // Not read: thrown away in the background, and the connection not reused.
            discard(body);
            close = true;
        }
        Bytes::new()
    } else {
        match read_body(shared, &headers, body, cap).await {
            Ok(bytes) => bytes,
            Err(reply) => {
                let mut response = to_response(reply, false);
                response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
                return response;
            }
        }
    };
    let request = Request { method: method.as_str(), path, query, headers: &headers, client, body: &body };
    let reply = edge.handle_routed(route, &request).await;
    let mut response = to_response(reply, method == Method::HEAD);
    if close {
        response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    }
    response
}

/// Serves the edge on `listener` until `shutdown` resolves: at most [`bounds::CONNECTIONS`]
/// connections, [`bounds::CONNECTIONS_PER_NETWORK`] from one network, each given
/// [`bounds::HEADERS`] to send a request's headers.
pub async fn serve(
    listener: tokio::net::TcpListener,
    edge: Arc<Edge>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let shared = Arc::new(Shared { edge, bodies: tokio::sync::Semaphore::new(bounds::BODIES) });
    let connections = Arc::new(tokio::sync::Semaphore::new(bounds::CONNECTIONS));
    let per_network = PerNetwork::new(bounds::CONNECTIONS_PER_NETWORK);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, or a connection reset before it was taken:
                    // wait a moment rather than spin.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let network = if crate::config::trusted(&shared.edge.config.trusted_proxies, peer.ip()) {
            None
        } else {
            let Some(slot) = per_network.take(peer.ip()) else {
                drop(stream);
                continue;
            };
            Some(slot)
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: axum::http::Request<hyper::body::Incoming>| {
                let shared = shared.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&shared, peer, request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(bounds::HEADERS)
                .max_buf_size(bounds::HEADER_BYTES)
                .serve_connection(TokioIo::new(stream), service);
            let _ = connection.await;
            drop((network, permit));
        });
    }
    // Give requests being answered a moment to finish.
    let all = u32::try_from(bounds::CONNECTIONS).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), connections.acquire_many(all)).await;
    Ok(())
}
