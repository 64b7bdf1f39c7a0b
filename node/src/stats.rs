//! The official Hysteria2 server's Traffic Stats API, on the node: the same paths and JSON,
//! so the scripts, exporters and bots written for it work against a Hearth node unchanged.
//! Off unless `[traffic_stats]` in `node.toml` says where it listens.
//!
//! - `GET /traffic` (`?clear=1` zeroes this view after answering): bytes each user sent
//!   (`tx`) and received (`rx`), by user id. The view has counters of its own: clearing it
//!   changes nothing that the node reports to control.
//! - `GET /online`: each user with an app connected, and how many apps (connections).
//! - `POST /kick` with `["id", ...]`: closes those users' connections here at once, and the
//!   next usage report has control kick them as the panel does (every node, in the audit log).
//! - `GET /dump/streams`: every TCP stream relayed now (`Accept: text/plain` for a table).
//!
//! Users are named by their id at control, as text. With a `secret`, a request must carry it
//! as its `Authorization` header, else it gets 401 and changes nothing; without one the API
//! may only listen on a loopback address. Bounded like the node's other listeners: at most
//! [`CONNECTIONS`] connections, request heads of [`HEADER_BYTES`] within [`HEADERS`], bodies
//! of [`BODY_BYTES`], no connection held longer than [`LIFETIME`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use zeroize::Zeroizing;

use crate::table::Live;

use crate::streams;

/// Connections held at once.
const CONNECTIONS: usize = 64;
/// The time a client has to send a request's head.
const HEADERS: Duration = Duration::from_secs(10);
/// The largest request head.
const HEADER_BYTES: usize = 16 * 1024;
/// The largest request body (a kick list).
pub(crate) const BODY_BYTES: usize = 256 * 1024;
/// The longest a connection is held.
const LIFETIME: Duration = Duration::from_secs(120);

/// Serves the API on `listener` forever.
pub(crate) async fn serve(listener: tokio::net::TcpListener, live: Arc<Live>, secret: String) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let secret = Arc::new(Zeroizing::new(secret));
    let connections = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "the traffic stats API could not accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else { continue };
        let (live, secret) = (live.clone(), secret.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let (live, secret) = (live.clone(), secret.clone());
                async move { Ok::<_, std::convert::Infallible>(answer(request, &live, &secret).await) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(HEADERS).max_buf_size(HEADER_BYTES);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(LIFETIME, connection).await;
            drop(permit);
        });
    }
}

/// The answer to one request.
async fn answer<B>(request: Request<B>, live: &Live, secret: &str) -> Response<Full<Bytes>>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if !secret.is_empty() {
        let given = request.headers().get(http::header::AUTHORIZATION).map(|v| v.as_bytes()).unwrap_or_default();
        if !hearth_shared::ct_eq(given, secret.as_bytes()) {
            return plain(StatusCode::UNAUTHORIZED, "unauthorized\n");
        }
    }
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    match (method, path.as_str()) {
        (Method::GET, "/") => plain(StatusCode::OK, "This is a Hysteria Traffic Stats API server (a Hearth node).\n"),
        (Method::GET, "/traffic") => {
            let clear = request
                .uri()
                .query()
                .is_some_and(|query| query.split('&').filter_map(|pair| pair.strip_prefix("clear=")).any(parse_bool));
            json(render_traffic(&live.traffic(clear)))
        }
        (Method::GET, "/online") => json(render_online(&live.online())),
        (Method::GET, "/dump/streams") => {
            let human = request
                .headers()
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|accept| accept.contains("text/plain"));
            let streams = live.streams.dump();
            if human {
                text(&render_streams_text(&streams, streams::now_nanos()))
            } else {
                json(render_streams(&streams))
            }
        }
        (Method::POST, "/kick") => {
            let body = match Limited::new(request.into_body(), BODY_BYTES).collect().await {
                Ok(body) => body.to_bytes(),
                Err(_) => return plain(StatusCode::PAYLOAD_TOO_LARGE, "the request body is over 256 KiB\n"),
            };
            let ids: Vec<String> = match serde_json::from_slice(&body) {
                Ok(ids) => ids,
                Err(e) => return plain(StatusCode::BAD_REQUEST, &format!("expected a JSON list of user ids: {e}\n")),
            };
            // Ids that are not numbers name nobody here, as unknown ids name nobody.
            let users: Vec<u64> = ids.iter().filter_map(|id| id.parse().ok()).collect();
            let (kicked, closed) = live.kick_here(&users);
            tracing::info!(asked = ids.len(), kicked, closed, "users kicked through the traffic stats API");
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = StatusCode::OK;
            response
        }
        _ => plain(StatusCode::NOT_FOUND, "404 page not found\n"),
    }
}

/// A query value as Go's `strconv.ParseBool` reads it (anything else is false).
fn parse_bool(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// A user's bytes in `/traffic`, fields in the official order.
#[derive(serde::Serialize)]
struct Bytes2 {
    tx: u64,
    rx: u64,
}

/// One stream in `/dump/streams`, fields in the official order.
#[derive(serde::Serialize)]
struct Stream<'a> {
    state: &'a str,
    auth: String,
    connection: u32,
    stream: u64,
    req_addr: &'a str,
    hooked_req_addr: &'a str,
    tx: u64,
    rx: u64,
    initial_at: String,
    last_active_at: String,
}

/// `/traffic`: `{"<id>": {"tx": sent, "rx": received}}`, keys sorted as text.
pub(crate) fn render_traffic(traffic: &[(u64, u64, u64)]) -> String {
    let map: BTreeMap<String, Bytes2> =
        traffic.iter().map(|&(user, tx, rx)| (user.to_string(), Bytes2 { tx, rx })).collect();
    serde_json::to_string(&map).expect("a map of numbers serializes")
}

/// `/online`: `{"<id>": connections}`.
pub(crate) fn render_online(online: &[(u64, usize)]) -> String {
    let map: BTreeMap<String, usize> = online.iter().map(|&(user, n)| (user.to_string(), n)).collect();
    serde_json::to_string(&map).expect("a map of numbers serializes")
}

/// `/dump/streams` as JSON, with a newline after it as Go's encoder writes.
pub(crate) fn render_streams(streams: &[streams::Seen]) -> String {
    #[derive(serde::Serialize)]
    struct All<'a> {
        streams: Vec<Stream<'a>>,
    }
    let streams = streams
        .iter()
        .map(|s| Stream {
            state: s.state,
            auth: s.user.to_string(),
            connection: s.connection,
            stream: s.stream,
            req_addr: &s.req_addr,
            hooked_req_addr: "",
            tx: s.tx,
            rx: s.rx,
            initial_at: rfc3339(s.initial),
            last_active_at: rfc3339(s.last_active),
        })
        .collect();
    let mut out = serde_json::to_string(&All { streams }).expect("streams serialize");
    out.push('\n');
    out
}

/// One line of the table, in the official server's columns and widths.
fn line(out: &mut String, cells: [&str; 10]) {
    let [state, auth, connection, stream, tx, rx, lifetime, last, req, hooked] = cells;
    let _ = writeln!(
        out,
        "{state:<8} {auth:<12} {connection:>12} {stream:>8} {tx:>12} {rx:>12} {lifetime:>12} {last:>12} {req:<16} {hooked}"
    );
}

/// `/dump/streams` for people (`Accept: text/plain`), as `ss -atn` lays out sockets, with
/// the lifetime and the time since the last byte at `now` (nanoseconds since the epoch).
pub(crate) fn render_streams_text(streams: &[streams::Seen], now: u64) -> String {
    let mut out = String::new();
    let head = ["State", "Auth", "Connection", "Stream", "TX-Bytes", "RX-Bytes", "Lifetime", "Last-Active"];
    let [state, auth, connection, stream, tx, rx, lifetime, last] = head;
    line(&mut out, [state, auth, connection, stream, tx, rx, lifetime, last, "Req-Addr", "Hooked-Req-Addr"]);
    for s in streams {
        let req = if s.req_addr.is_empty() { "-" } else { s.req_addr.as_str() };
        line(
            &mut out,
            [
                &s.state.to_uppercase(),
                &s.user.to_string(),
                &format!("{:08X}", s.connection),
                &s.stream.to_string(),
                &s.tx.to_string(),
                &s.rx.to_string(),
                &go_duration(now.saturating_sub(s.initial)),
                &go_duration(now.saturating_sub(s.last_active)),
                req,
                "-",
            ],
        );
    }
    out
}

/// A time (nanoseconds since the epoch) in RFC 3339, UTC, with as many fractional digits as
/// it needs (Go's `RFC3339Nano`).
pub(crate) fn rfc3339(nanos: u64) -> String {
    let at =
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(nanos)).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let mut out = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    );
    let fraction = format!("{:09}", at.nanosecond());
    let fraction = fraction.trim_end_matches('0');
    if !fraction.is_empty() {
        out.push('.');
        out.push_str(fraction);
    }
    out.push('Z');
    out
}

/// A duration as Go prints one (`"0s"`, `"450ms"`, `"2m3.5s"`, `"1h0m7s"`), rounded to the
/// millisecond under ten minutes and to the second above, as the official table does.
pub(crate) fn go_duration(nanos: u64) -> String {
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000 * MS;
    let step = if nanos < 600 * S { MS } else { S };
    let rounded = (nanos + step / 2) / step * step;
    if rounded == 0 {
        return "0s".to_owned();
    }
    if rounded < S {
        return format!("{}ms", rounded / MS);
    }
    let (hours, minutes, seconds, millis) =
        (rounded / (3600 * S), rounded / (60 * S) % 60, rounded / S % 60, rounded % S / MS);
    let mut out = String::new();
    if hours > 0 {
        let _ = write!(out, "{hours}h");
    }
    if hours > 0 || minutes > 0 {
        let _ = write!(out, "{minutes}m");
    }
    let _ = write!(out, "{seconds}");
    if millis > 0 {
        let fraction = format!("{millis:03}");
        let _ = write!(out, ".{}", fraction.trim_end_matches('0'));
    }
    out.push('s');
    out
}

fn plain(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_owned())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

fn text(body: &str) -> Response<Full<Bytes>> {
    plain(StatusCode::OK, body)
}

fn json(body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json; charset=utf-8"));
    response
}

#[cfg(test)]
mod tests;
