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

use std::net::{IpAddr, SocketAddr};
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

mod udp;
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
/// How long a TCP connect to a target may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A UDP session closes after this long without a packet either way.
const UDP_IDLE: Duration = Duration::from_secs(60);
/// UDP sessions one connection may hold.
const MAX_UDP_SESSIONS: usize = 256;
/// How long the abuse guard waits for the rest of what may be a BitTorrent handshake.
const OPENING_WAIT: Duration = Duration::from_secs(1);
/// UDP destinations whose judgement by the abuse guard one connection remembers.
const MAX_JUDGED: usize = 4096;
/// The most one relay read takes, per direction.
const RELAY_BUFFER: usize = 64 * 1024;

/// How the server behaves.
#[derive(Clone, Debug, Default)]
pub(crate) struct Options {
    /// Let clients reach private, loopback and link-local addresses (tests on loopback).
    pub(crate) allow_private: bool,
    /// The node's own address that the client reached (set per connection): refused as a
    /// destination too, unless `allow_private`.
    pub(crate) own: Option<IpAddr>,
    /// The node's own rates (`bandwidth` in `node.toml`).
    pub(crate) bandwidth: crate::state::Bandwidth,
    /// Keep the node's controller whatever clients announce, and tell them `auto`.
    pub(crate) ignore_client_bandwidth: bool,
    /// What anyone who does not authenticate gets.
    pub(crate) site: Arc<crate::masquerade::Site>,
}

impl Options {
    /// What the node answers in `Hysteria-CC-RX`: `auto` when it ignores clients' rates (they
    /// use their own controller then), else the rate it receives at in bytes a second (0: no
    /// limit, a Brutal client sends at its own `up`).
    /// A user limited to `limit_up` bytes a second is told the smaller of the two.
    fn announced(&self, limit_up: u64) -> String {
        if self.ignore_client_bandwidth {
            return "auto".to_owned();
        }
        let down = self.bandwidth.down.unwrap_or(0);
        if down == 0 || limit_up == 0 { down.max(limit_up) } else { down.min(limit_up) }.to_string()
    }

    /// Brutal's rate for a client that announced it receives `client_rx` bytes a second (0:
    /// not given): that, held to `bandwidth.up`; 0 (the default controller) when the client
    /// gave none or the node ignores it.
    fn brutal_rate(&self, client_rx: u64) -> u64 {
        if self.ignore_client_bandwidth { 0 } else { self.bandwidth.up.map_or(client_rx, |up| client_rx.min(up)) }
    }
}

/// Whether an outbound destination is refused by default: every address the IANA
/// special-purpose registries (IPv4 and IPv6) do not mark as globally reachable — loopback,
/// private, shared (CGN), link-local, documentation, benchmarking, reserved, multicast and
/// the like — so a client cannot reach the node's own network. IPv6 forms that carry an IPv4
/// address (mapped, NAT64's well-known prefix, 6to4) are judged by that address; the
/// deprecated forms (IPv4-compatible, site-local) and Teredo are refused outright.
pub(crate) fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_broadcast()
                || v4.is_multicast()
                || a == 0 // this network
                || (a == 100 && (64..128).contains(&b)) // shared address space (CGN)
                || (a, b, c) == (192, 0, 0) // IETF protocol assignments
                || (a, b, c) == (192, 0, 2) // TEST-NET-1
                || (a, b, c) == (192, 88, 99) // the retired 6to4 relay anycast
                || (a == 198 && (b == 18 || b == 19)) // benchmarking
                || (a, b, c) == (198, 51, 100) // TEST-NET-2
                || (a, b, c) == (203, 0, 113) // TEST-NET-3
                || a >= 240 // reserved
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let embedded =
                |hi: u16, lo: u16| IpAddr::V4(std::net::Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)));
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal(IpAddr::V4(v4));
            }
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                // NAT64's well-known prefix: the IPv4 address it translates to.
                return is_internal(embedded(s[6], s[7]));
            }
            if s[0] == 0x2002 {
                // 6to4: the IPv4 address of the relay it goes through.
                return is_internal(embedded(s[1], s[2]));
            }
            s[..6] == [0; 6] // unspecified, loopback and the deprecated IPv4-compatible form
                || (s[0], s[1], s[2]) == (0x64, 0xff9b, 1) // local-use NAT64
                || s[..4] == [0x100, 0, 0, 0] // discard-only
                || (s[0] == 0x2001 && s[1] < 0x200) // IETF protocol assignments (Teredo included)
                || (s[0], s[1]) == (0x2001, 0xdb8) // documentation
                || (s[0] & 0xfff0) == 0x3ff0 // documentation (3fff::/20)
                || s[0] == 0x5f00 // segment routing identifiers
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0 // the deprecated site-local
                || v6.is_multicast()
        }
    }
}

/// Resolves `host:port` and applies the outbound policy.
async fn resolve(address: &str, options: &Options) -> Result<SocketAddr, String> {
    let mut addrs = tokio::net::lookup_host(address).await.map_err(|e| format!("cannot resolve {address}: {e}"))?;
    let addr = addrs.next().ok_or_else(|| format!("{address} has no address"))?;
    refused(addr.ip(), options).map_or(Ok(addr), |why| Err(format!("{address} is {why}")))
}

/// Why the outbound policy refuses `ip`, if it does.
fn refused(ip: IpAddr, options: &Options) -> Option<&'static str> {
    let canonical = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    if options.allow_private {
        None
    } else if is_internal(ip) {
        Some("an internal address")
    } else if options.own.is_some_and(|own| canonical(own) == canonical(ip)) {
        Some("the node's own address")
    } else {
        None
    }
}

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
) -> Result<(TcpStream, Bytes, Option<Arc<Carried>>), String> {
    let (domain, ips, port) = lookup(address).await?;
    let request = Request { domain: domain.as_deref(), ips: &ips, proto: Proto::Tcp, port };
    let (outbound, hijack) = match routes.decide(set, &request) {
        Decision::Reject(why) => {
            tracing::debug!(why, "TCP request refused by routing");
            return Err(route::REJECTED.to_owned());
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
    let (stream, early) = connected.await.map_err(|_| format!("connecting to {address} timed out"))?.map_err(|e| {
        // A direct outbound's error names the address it tried; a proxy's says which step.
        let said = e.to_string();
        if said.starts_with("connecting to ") { said } else { format!("connecting to {address}: {said}") }
    })?;
    Ok((stream, early, outbound.map(|o| o.carried.clone())))
}

/// The built-in `direct` outbound.
static DIRECT: OutboundKind =
    OutboundKind::Direct { mode: IpMode::Auto, interface: None, source_v4: None, source_v6: None };

/// The name (lower case, if the client gave one), every address it resolves to, and the port
/// of `host:port`.
async fn lookup(address: &str) -> Result<(Option<String>, Vec<IpAddr>, u16), String> {
    let (host, port) = route::host_of(address).ok_or_else(|| format!("not a host and port: {address}"))?;
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok((None, vec![ip.to_canonical()], port));
    }
    let ips: Vec<IpAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve {address}: {e}"))?
        .map(|addr| addr.ip().to_canonical())
        .take(16)
        .collect();
    if ips.is_empty() {
        return Err(format!("{address} has no address"));
    }
    Ok((Some(host.to_ascii_lowercase()), ips, port))
}

/// The addresses of `ips` the safety policy lets a connection reach, with `port`; refused
/// (saying why) when it lets none.
fn checked(address: &str, ips: Vec<IpAddr>, port: u16, options: &Options) -> Result<Vec<SocketAddr>, String> {
    let mut why = None;
    let addrs: Vec<SocketAddr> = ips
        .into_iter()
        .filter(|ip| match refused(*ip, options) {
            Some(reason) => {
                why = Some(reason);
                false
            }
            None => true,
        })
        .map(|ip| SocketAddr::new(ip, port))
        .collect();
    if addrs.is_empty() {
        return Err(format!("{address} is {}", why.unwrap_or("without an address")));
    }
    Ok(addrs)
}

/// Whether a proxy's `host:port` is on the node's own network (loopback, private and the
/// like), where it would reach what the safety policy refuses.
async fn proxy_is_local(server: &str) -> bool {
    match route::host_of(server) {
        Some((host, _)) if host.parse::<IpAddr>().is_ok() => is_internal(host.parse().expect("checked")),
        Some((host, port)) => match tokio::net::lookup_host((host, port)).await {
            Ok(mut addrs) => addrs.any(|addr| is_internal(addr.ip())),
            Err(_) => true,
        },
        None => true,
    }
}

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
                .map_err(|_| format!("connecting to {address} timed out"))
                .and_then(|r| r.map_err(|e| format!("connecting to {address}: {e}")))
                .map(|stream| (stream, Bytes::new(), None)),
            Err(e) => Err(e),
        },
        set => routed_tcp(&address, &options, set, &live.routes()).await,
    };
    let (target, early, carried) = match target {
        Ok(target) => target,
        Err(message) => {
            if message == route::REJECTED {
                live.refusals.routing.fetch_add(1, Ordering::Relaxed);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_own_address_is_refused_unless_private_ones_are_allowed() {
        let own: IpAddr = "198.20.0.1".parse().unwrap();
        let options = Options { allow_private: false, own: Some(own), ..Options::default() };
        assert_eq!(refused(own, &options), Some("the node's own address"));
        assert_eq!(refused("::ffff:198.20.0.1".parse().unwrap(), &options), Some("the node's own address"));
        assert_eq!(refused("198.20.0.2".parse().unwrap(), &options), None);
        assert_eq!(refused("10.0.0.1".parse().unwrap(), &options), Some("an internal address"));
        let mapped = Options { own: Some("::ffff:198.20.0.1".parse().unwrap()), ..Options::default() };
        assert_eq!(refused(own, &mapped), Some("the node's own address"));
        assert_eq!(refused(own, &Options { allow_private: true, own: Some(own), ..Options::default() }), None);
    }

    #[test]
    fn brutal_rates_and_what_the_node_announces() {
        let plain = Options::default();
        assert_eq!(
            (plain.announced(0).as_str(), plain.brutal_rate(0), plain.brutal_rate(5_000_000)),
            ("0", 0, 5_000_000)
        );
        let capped = Options {
            bandwidth: crate::state::Bandwidth { up: Some(1_000_000), down: Some(2_500_000) },
            ..Options::default()
        };
        assert_eq!(capped.announced(0), "2500000");
        // A user's up limit, where it is lower: a Brutal client then sends no faster.
        assert_eq!((capped.announced(625_000), capped.announced(9_000_000)), ("625000".into(), "2500000".into()));
        assert_eq!(plain.announced(625_000), "625000");
        assert_eq!(
            (capped.brutal_rate(0), capped.brutal_rate(600_000), capped.brutal_rate(9_000_000)),
            (0, 600_000, 1_000_000)
        );
        let ignoring = Options { ignore_client_bandwidth: true, ..capped };
        assert_eq!((ignoring.announced(0).as_str(), ignoring.brutal_rate(9_000_000)), ("auto", 0));
    }

    #[test]
    fn internal_destinations() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.88.99.1",
            "198.18.0.1",
            "198.19.255.254",
            "198.51.100.7",
            "203.0.113.9",
            "240.0.0.1",
            "250.1.2.3",
            "64:ff9b::10.0.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b:1::1.1.1.1",
            "2002:a00:1::1",
            "2002:7f00:1::",
            "::127.0.0.1",
            "::1.1.1.1",
            "100::1",
            "2001::1",
            "2001:2::1",
            "2001:db8::1",
            "3fff::1",
            "5f00::1",
            "fec0::1",
            "ff02::1",
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::1.1.1.1",
            "2002:101:101::1",
            "192.0.1.1",
            "198.20.0.1",
            "2001:4860:4860::8888",
        ] {
            assert!(!is_internal(public.parse().unwrap()), "{public}");
        }
    }
}
