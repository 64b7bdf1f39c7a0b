//! The Hysteria2 server: QUIC (quinn) with TLS 1.3 and ALPN `h3`, one HTTP/3 request to
//! authenticate, then TCP over bidirectional streams and UDP over datagrams.
//!
//! Anything that is not a valid authentication gets what an ordinary web server answers: a
//! 404 page over HTTP/3. What a client without a credential can make the node do is bounded:
//! a connection that does not authenticate within [`AUTH_TIMEOUT`], or within
//! [`MAX_REQUESTS_BEFORE_AUTH`] requests, is closed; request headers are capped
//! ([`MAX_HEADERS`]); at most [`MAX_UNAUTHENTICATED`] connections wait to authenticate at
//! once (more are refused before the handshake), and past [`VALIDATE_ABOVE`] of them a new
//! one must first prove its address with a QUIC retry (a spoofed source gets nothing). Of
//! those, one client network holds at most [`UNAUTHENTICATED_PER_NETWORK`] once its handshake
//! is done (a finished handshake proves the address): one host cannot take them all, and its
//! next connections are refused before the handshake, after a retry proves their address.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use hearth_shared::acl::{IpMode, OutboundKind, Proto, Request};
use hearth_shared::sha256;
use http::{Method, Response, StatusCode};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::proto;
use crate::route::{self, Carried, Decision, Routes};
use crate::streams::{State as StreamState, Traced};

mod options;
mod reach;
mod udp;
pub(crate) use options::Options;
use reach::{CONNECT_TIMEOUT, ReachError, checked, lookup, proxy_is_local, resolve};

use crate::table::{Counter, Live};

/// How long a client has to authenticate.
pub(crate) const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests a connection may make before it authenticates (a client authenticates first).
pub(crate) const MAX_REQUESTS_BEFORE_AUTH: usize = 8;
/// The most bytes of headers one HTTP/3 request may carry.
const MAX_HEADERS: u64 = 16 * 1024;
/// Connections that may wait to authenticate at once.
pub(crate) const MAX_UNAUTHENTICATED: usize = 512;
/// Connections from one network (IPv4 /24, IPv6 /48) that may wait to authenticate at once,
/// counted from the end of their handshake; more are closed then.
pub(crate) const UNAUTHENTICATED_PER_NETWORK: usize = 32;
/// Past this many waiting connections, a new one must prove its address first.
const VALIDATE_ABOVE: usize = 64;
/// How long the abuse guard waits for the rest of what may be a BitTorrent handshake.
const OPENING_WAIT: Duration = Duration::from_secs(1);
/// The most one relay read takes, per direction.
const RELAY_BUFFER: usize = 64 * 1024;

/// Serves clients on `endpoint` until it is closed.
pub(crate) async fn serve(endpoint: quinn::Endpoint, live: Arc<Live>, options: Options) {
    let waiting = Arc::new(tokio::sync::Semaphore::new(MAX_UNAUTHENTICATED));
    let per_network = hearth_shared::ratelimit::PerNetwork::new(UNAUTHENTICATED_PER_NETWORK);
    while let Some(incoming) = endpoint.accept().await {
        let Ok(permit) = waiting.clone().try_acquire_owned() else {
            live.refused_unauthenticated.fetch_add(1, Ordering::Relaxed);
            incoming.refuse();
            continue;
        };
        // A network holding all its slots: refused before the handshake, once the address is
        // proved (a spoofed source cannot get a network refused, nor make the node work).
        let network_full = per_network.holding(incoming.remote_address().ip()) >= UNAUTHENTICATED_PER_NETWORK;
        if network_full && incoming.remote_address_validated() {
            live.refused_unauthenticated.fetch_add(1, Ordering::Relaxed);
            incoming.refuse();
            continue;
        }
        if (network_full || MAX_UNAUTHENTICATED - waiting.available_permits() > VALIDATE_ABOVE)
            && !incoming.remote_address_validated()
        {
            // Stateless: the client comes back with a token that proves its address.
            let _ = incoming.retry();
            continue;
        }
        let (live, options, per_network) = (live.clone(), options.clone(), per_network.clone());
        tokio::spawn(async move {
            let peer = incoming.remote_address();
            match incoming.await {
                Ok(connection) => {
                    let Some(slot) = per_network.take(peer.ip()) else {
                        live.refused_unauthenticated.fetch_add(1, Ordering::Relaxed);
                        connection.close(0x100u32.into(), b"");
                        return;
                    };
                    let options = Options { own: connection.local_ip(), ..options };
                    if let Err(e) = handle(connection, live, options, (permit, slot)).await {
                        tracing::debug!(%peer, error = %e, "connection ended");
                    }
                }
                Err(e) => tracing::debug!(%peer, error = %e, "handshake failed"),
            }
        });
    }
}

type H3 = h3::server::Connection<h3_quinn::Connection, Bytes>;

/// Who authenticated and was let in.
struct Authenticated {
    user: u64,
    /// The user's counters.
    counter: Arc<Counter>,
    /// Keeps the connection among the user's while it lives.
    _registration: crate::table::Registration,
    /// Whether it sends with Brutal.
    on_brutal: bool,
    /// The HTTP/3 connection, which must stay alive with the QUIC connection.
    _h3: H3,
}

/// Answers HTTP/3 requests until one authenticates.
async fn authenticate(
    connection: &quinn::Connection,
    live: &Arc<Live>,
    options: &Options,
) -> anyhow::Result<Authenticated> {
    let mut h3: H3 = h3::server::builder()
        .max_field_section_size(MAX_HEADERS)
        .build(h3_quinn::Connection::new(connection.clone()))
        .await?;
    let mut answered = 0;
    loop {
        let Some(resolver) = h3.accept().await? else { anyhow::bail!("closed before authenticating") };
        if answered == MAX_REQUESTS_BEFORE_AUTH {
            anyhow::bail!("{answered} requests without authenticating");
        }
        answered += 1;
        let (request, mut stream) = resolver.resolve_request().await?;
        let credential = request.headers().get("hysteria-auth").map(|v| v.as_bytes().to_vec());
        let user = match (request.method(), request.uri().path(), &credential) {
            (&Method::POST, "/auth", Some(credential)) => live.authenticate(credential),
            _ => None,
        };
        match user {
            Some(user) => {
                let hash = sha256(credential.as_deref().unwrap_or_default());
                // A rate that is not a number counts as none, as for the official server.
                let client_rx = request.headers().get("hysteria-cc-rx").and_then(|v| v.to_str().ok()?.parse().ok());
                // Brutal sends at the client's rate held to the node's and to the user's limit
                // (which `Live::apply` changes live).
                let brutal = options.brutal_rate(client_rx.unwrap_or(0));
                let counter = live.counter(user);
                let device = crate::table::Device::of(connection.remote_address().ip());
                let (registration, on_brutal) = match live.admit(user, hash, connection, device, brutal, &counter) {
                    Ok(admitted) => admitted,
                    Err(refusal) => {
                        // The client reports the status as a failed authentication; the
                        // user's page says why.
                        let response = Response::builder().status(StatusCode::TOO_MANY_REQUESTS).body(())?;
                        stream.send_response(response).await?;
                        stream.finish().await?;
                        // The client reads the 429 and hangs up itself; closed at once, it
                        // would see the close first and report that instead.
                        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), connection.closed()).await;
                        connection.close(crate::table::CLOSE_DEVICE.into(), b"device limit");
                        anyhow::bail!("user {user} refused: {refusal:?}");
                    }
                };
                let response = Response::builder()
                    .status(StatusCode::from_u16(233).expect("233 is a valid status"))
                    .header("hysteria-udp", "true")
                    .header("hysteria-cc-rx", options.announced(counter.pace_up.rate()))
                    .header("hysteria-padding", padding())
                    .body(())?;
                stream.send_response(response).await?;
                stream.finish().await?;
                return Ok(Authenticated { user, counter, _registration: registration, on_brutal, _h3: h3 });
            }
            None => {
                if credential.is_some() {
                    live.auth_failures.fetch_add(1, Ordering::Relaxed);
                }
                // What the masquerade answers (by default, a web server without this page).
                let (method, uri, headers) = (request.method(), request.uri(), request.headers());
                let answer =
                    options.site.answer(method, uri, headers, async |limit| read_body(&mut stream, limit).await);
                let answer = answer.await;
                let mut response = Response::builder().status(answer.status);
                for (name, value) in answer.headers {
                    response = response.header(name, value);
                }
                stream.send_response(response.body(())?).await?;
                if !answer.body.is_empty() {
                    stream.send_data(answer.body).await?;
                }
                stream.finish().await?;
            }
        }
    }
}

/// A request's body, if it is at most `limit` bytes.
async fn read_body(
    stream: &mut h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>,
    limit: usize,
) -> Option<Bytes> {
    use bytes::{Buf as _, BufMut as _};
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = stream.recv_data().await.ok()? {
        if body.len() + chunk.remaining() > limit {
            return None;
        }
        body.put(chunk);
    }
    Some(body.freeze())
}

fn padding() -> String {
    let len = 64 + (rand_core::RngCore::next_u32(&mut rand_core::OsRng) % 512) as usize;
    "0".repeat(len)
}

async fn handle(
    connection: quinn::Connection,
    live: Arc<Live>,
    options: Options,
    waiting: (tokio::sync::OwnedSemaphorePermit, hearth_shared::ratelimit::NetworkSlot),
) -> anyhow::Result<()> {
    live.unauthenticated.fetch_add(1, Ordering::Relaxed);
    let authenticated = tokio::time::timeout(AUTH_TIMEOUT, authenticate(&connection, &live, &options)).await;
    live.unauthenticated.fetch_sub(1, Ordering::Relaxed);
    drop(waiting);
    let Authenticated { user, counter, _registration, on_brutal, _h3 } = match authenticated {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => {
            connection.close(0x100u32.into(), b"");
            return Err(e);
        }
        Err(_) => {
            connection.close(0x100u32.into(), b"");
            anyhow::bail!("no authentication within {AUTH_TIMEOUT:?}");
        }
    };
    let _brutal = on_brutal.then(|| live.brutal());
    tracing::debug!(user, peer = %connection.remote_address(), on_brutal, "authenticated");
    let udp = tokio::spawn(udp::udp_relay(connection.clone(), counter.clone(), live.clone(), options.clone()));
    let number = live.streams.connection();
    loop {
        let (send, recv) = match connection.accept_bi().await {
            Ok(streams) => streams,
            Err(_) => break,
        };
        let (counter, live, options) = (counter.clone(), live.clone(), options.clone());
        tokio::spawn(async move {
            let traced = live.streams.trace(user, number, u64::from(recv.id()));
            if let Err(e) = tcp_relay(send, recv, counter, &live, options, traced.as_deref()).await {
                tracing::debug!(user, error = %e, "TCP stream ended");
            }
        });
    }
    udp.abort();
    Ok(())
}

/// The first bytes a client sends on a stream, once they say whether it opens BitTorrent:
/// `None` when it does (the stream is refused), else what was read (empty if the stream
/// ended first). Bytes that could begin the handshake wait at most [`OPENING_WAIT`] for the
/// rest: a client that sent them and waits for an answer is not held.
async fn opening(from: &mut quinn::RecvStream) -> std::io::Result<Option<bytes::Bytes>> {
    let mut first = bytes::BytesMut::new();
    loop {
        let read = from.read_chunk(RELAY_BUFFER, true);
        let chunk = if first.is_empty() {
            read.await
        } else {
            match tokio::time::timeout(OPENING_WAIT, read).await {
                Ok(chunk) => chunk,
                Err(_) => break,
            }
        };
        let Some(chunk) = chunk.map_err(std::io::Error::from)? else { break };
        first.extend_from_slice(&chunk.bytes);
        match crate::guard::tcp_opening(&first) {
            crate::guard::Opening::Torrent => return Ok(None),
            crate::guard::Opening::Other => break,
            crate::guard::Opening::Undecided => {}
        }
    }
    Ok(Some(first.freeze()))
}

/// Where a stream's bytes are counted: the user's counter (reports and the traffic stats
/// API), the outbound that carries it (metrics), and the stream's own record (the API's
/// `/dump/streams`, while it is on).
#[derive(Clone, Copy)]
struct Tally<'a> {
    counter: &'a Counter,
    carried: Option<&'a Carried>,
    traced: Option<&'a Traced>,
}

impl Tally<'_> {
    fn up(&self, bytes: u64) {
        self.counter.sent(bytes);
        route::count(self.carried, bytes, 0);
        if let Some(traced) = self.traced {
            traced.up(bytes);
        }
    }

    fn down(&self, bytes: u64) {
        self.counter.received(bytes);
        route::count(self.carried, 0, bytes);
        if let Some(traced) = self.traced {
            traced.down(bytes);
        }
    }
}

/// Client to target: quinn hands out what arrived as chunks, written on without a copy, each
/// when the user's budget allows (what waits backs up into the client's flow control).
/// `first` is what was read before (to judge the stream's opening).
async fn pump_up(
    mut from: quinn::RecvStream,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    tally: Tally<'_>,
    first: bytes::Bytes,
) -> std::io::Result<()> {
    if !first.is_empty() {
        tally.counter.pace_up.wait(first.len()).await;
        to.write_all(&first).await?;
        tally.up(first.len() as u64);
    }
    while let Some(chunk) = from.read_chunk(RELAY_BUFFER, true).await.map_err(std::io::Error::from)? {
        tally.counter.pace_up.wait(chunk.bytes.len()).await;
        to.write_all(&chunk.bytes).await?;
        tally.up(chunk.bytes.len() as u64);
    }
    to.shutdown().await
}

/// Target to client: read into a buffer that quinn then owns (no copy into its send buffer),
/// sent when the user's budget allows.
async fn pump_down(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: quinn::SendStream,
    tally: Tally<'_>,
    first: bytes::Bytes,
) -> std::io::Result<()> {
    if !first.is_empty() {
        tally.counter.pace_down.wait(first.len()).await;
        let n = first.len() as u64;
        to.write_chunk(first).await.map_err(std::io::Error::from)?;
        tally.down(n);
    }
    let mut buf = bytes::BytesMut::new();
    loop {
        buf.reserve(RELAY_BUFFER);
        let n = from.read_buf(&mut buf).await?;
        if n == 0 {
            to.shutdown().await?;
            return Ok(());
        }
        tally.counter.pace_down.wait(n).await;
        to.write_chunk(buf.split().freeze()).await.map_err(std::io::Error::from)?;
        tally.down(n as u64);
    }
}

/// A TCP stream to `address` for a user routed by rule set `set`: the target, the bytes an
/// HTTP proxy sent past its answer, and what the outbound carried (for metrics). Refused
/// as the rules say, and wherever the address it would reach is refused by the safety
/// policy, whichever outbound carries it.
async fn routed_tcp(
    address: &str,
    options: &Options,
    set: u16,
    routes: &Routes,
) -> Result<(TcpStream, Bytes, Option<Arc<Carried>>), ConnectError> {
    let (domain, ips, port) = lookup(address).await?;
    let request = Request { domain: domain.as_deref(), ips: &ips, proto: Proto::Tcp, port };
    let (outbound, hijack) = match routes.decide(set, &request) {
        Decision::Reject(why) => {
            tracing::debug!(why, "TCP request refused by routing");
            return Err(ConnectError::Rejected);
        }
        Decision::Out { outbound, hijack } => (outbound, hijack),
    };
    let addrs = checked(address, hijack.map_or(ips, |ip| vec![ip]), port, options)?;
    let kind = outbound.as_ref().map_or(&DIRECT, |o| &o.kind);
    // A proxy is sent the name (it resolves it near itself) unless the rule hijacks the
    // connection, or the proxy is on the node's own network: there a name could resolve,
    // for the proxy, to the node's own addresses the policy refuses.
    let name = match (hijack, domain.as_deref(), kind) {
        (None, Some(name), OutboundKind::Socks5 { server, .. } | OutboundKind::Http { server, .. }) => {
            (!proxy_is_local(server).await).then_some(name)
        }
        _ => None,
    };
    let target = crate::outbound::Target { domain: name, addrs: &addrs, port };
    // Each address or proxy step has CONNECT_TIMEOUT; the whole has twice that, however
    // many addresses the name has.
    let connected =
        tokio::time::timeout(2 * CONNECT_TIMEOUT, crate::outbound::connect_tcp(kind, &target, CONNECT_TIMEOUT));
    let (stream, early) = connected.await.map_err(|_| ConnectError::TimedOut(address.to_owned()))?.map_err(|e| {
        // A direct outbound's error names the address it tried; a proxy's says which step.
        let said = e.to_string();
        ConnectError::Failed(if said.starts_with("connecting to ") {
            said
        } else {
            format!("connecting to {address}: {said}")
        })
    })?;
    Ok((stream, early, outbound.map(|o| o.carried.clone())))
}

/// Why a client's TCP request was not connected: what the client is told.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    /// The destination cannot be reached ([`ReachError`]).
    #[error(transparent)]
    Reach(#[from] ReachError),
    /// The owner's routing refuses it.
    #[error("{}", route::REJECTED)]
    Rejected,
    /// No connection within the timeout.
    #[error("connecting to {0} timed out")]
    TimedOut(String),
    /// The connection failed, as its outbound says.
    #[error("{0}")]
    Failed(String),
}

/// The built-in `direct` outbound.
static DIRECT: OutboundKind =
    OutboundKind::Direct { mode: IpMode::Auto, interface: None, source_v4: None, source_v6: None };

async fn tcp_relay(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    counter: Arc<Counter>,
    live: &Live,
    options: Options,
    traced: Option<&Traced>,
) -> anyhow::Result<()> {
    let address = proto::read_tcp_request(&mut recv).await?;
    if let Some(traced) = traced {
        traced.requested(&address);
        traced.set(StreamState::Connecting);
    }
    let guard = counter.guard();
    if guard.smtp && crate::guard::is_smtp(&address) {
        counter.refuse(live, true);
        let message = "port 25 (mail) is blocked on this server";
        send.write_all(&proto::tcp_response(false, message)).await?;
        let _ = send.finish();
        anyhow::bail!(message);
    }
    let target = match counter.rules() {
        // No rule set: straight out, as before routing existed.
        0 => match resolve(&address, &options).await {
            Ok(addr) => tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
                .await
                .map_err(|_| ConnectError::TimedOut(address.clone()))
                .and_then(|r| r.map_err(|e| ConnectError::Failed(format!("connecting to {address}: {e}"))))
                .map(|stream| (stream, Bytes::new(), None)),
            Err(e) => Err(e.into()),
        },
        set => routed_tcp(&address, &options, set, &live.routes()).await,
    };
    let (target, early, carried) = match target {
        Ok(target) => target,
        Err(error) => {
            if matches!(error, ConnectError::Rejected) {
                live.refusals.routing.fetch_add(1, Ordering::Relaxed);
            }
            let message = error.to_string();
            send.write_all(&proto::tcp_response(false, &message)).await?;
            let _ = send.finish();
            anyhow::bail!(message);
        }
    };
    let _ = target.set_nodelay(true);
    send.write_all(&proto::tcp_response(true, "")).await?;
    if let Some(traced) = traced {
        traced.set(StreamState::Established);
    }
    let tally = Tally { counter: &counter, carried: carried.as_deref(), traced };
    let (target_read, target_write) = target.into_split();
    // Target to client from the start: a server that speaks first (mail, FTP, databases)
    // is heard while the guard waits for the client's first bytes.
    let down = pump_down(target_read, send, tally, early);
    // The guard reads what the client sends first before the target gets any of it (a
    // client may send it before the answer above, or after); BitTorrent ends both ways.
    let up = async {
        let first = if guard.torrent { opening(&mut recv).await? } else { Some(bytes::Bytes::new()) };
        let Some(first) = first else {
            counter.refuse(live, false);
            let _ = recv.stop(0u32.into());
            return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "BitTorrent refused"));
        };
        pump_up(recv, target_write, tally, first).await
    };
    tokio::pin!(up, down);
    let (up, down) = tokio::select! {
        up = &mut up => match up {
            // Dropping the other way ends the stream to the client and the target's socket.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => anyhow::bail!(e),
            up => (up, down.await),
        },
        down = &mut down => (up.await, down),
    };
    up.and(down)?;
    Ok(())
}
