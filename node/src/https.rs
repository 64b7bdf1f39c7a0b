//! The masquerade over HTTPS on TCP (`masquerade_tcp` in `node.toml`, e.g. `0.0.0.0:443`):
//! the same site strangers get over HTTP/3, with the same certificate, in HTTP/2 or HTTP/1.1
//! (offered by ALPN in that order, as web servers do), and an `Alt-Svc` header naming the
//! node's UDP port for HTTP/3, as a web server that also speaks HTTP/3 sends. A prober that
//! knocks on TCP 443 of a Hysteria2 server finds a web site there too.
//!
//! Bounded like the edge: at most [`CONNECTIONS`] connections (16 from one client network),
//! request headers of [`HEADER_BYTES`] read within [`HEADERS`], a TLS handshake within
//! [`HANDSHAKE`], and no connection held longer than [`LIFETIME`]; bodies and answers as the
//! masquerade's own limits say.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hearth_shared::ratelimit::PerNetwork;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, Limited};

use crate::masquerade::Site;

/// Connections held at once.
const CONNECTIONS: usize = 256;
/// Connections held at once from one client network.
const PER_NETWORK: usize = 16;
/// The time a client has to finish the TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// The time a client has to send a request's headers.
const HEADERS: Duration = Duration::from_secs(10);
/// The largest request head.
const HEADER_BYTES: usize = 16 * 1024;
/// The longest a connection is held, however it is used.
const LIFETIME: Duration = Duration::from_secs(120);
/// Requests at once on one HTTP/2 connection.
const STREAMS: u32 = 16;

/// What the listener offers by ALPN, in order.
pub(crate) const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// Answers HTTPS on `listener` forever with `site`, naming `udp_port` in `Alt-Svc`.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    site: Arc<Site>,
    udp_port: u16,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(HEADERS).max_buf_size(HEADER_BYTES);
    builder.http2().timer(TokioTimer::new()).max_header_list_size(HEADER_BYTES as u32).max_concurrent_streams(STREAMS);
    let builder = Arc::new(builder);
    let connections = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS));
    let per_network = PerNetwork::new(PER_NETWORK);
    let alt_svc = http::HeaderValue::from_str(&format!("h3=\":{udp_port}\"; ma=2592000"))
        .expect("a port number makes a valid header");
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::debug!(%error, "masquerade over HTTPS: accepting failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else { continue };
        let Some(slot) = per_network.take(peer.ip()) else { continue };
        let (acceptor, site, alt_svc, builder) = (acceptor.clone(), site.clone(), alt_svc.clone(), builder.clone());
        tokio::spawn(async move {
            let _held = (permit, slot);
            let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await else { return };
            // A TLS-ALPN-01 validator is done once it has seen the challenge's certificate.
            if stream.get_ref().1.alpn_protocol() == Some(hearth_acme::ACME_TLS_ALPN) {
                return;
            }
            let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let (site, alt_svc) = (site.clone(), alt_svc.clone());
                async move { Ok::<_, std::convert::Infallible>(answer(&site, request, alt_svc).await) }
            });
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(LIFETIME, connection).await;
        });
    }
}

/// The site's answer to `request`. An answer read from a file or the proxied server keeps
/// its turn (see [`crate::masquerade::MAX_LOADED`]) until its body has gone out, however slowly
/// the client reads.
async fn answer(
    site: &Site,
    request: http::Request<hyper::body::Incoming>,
    alt_svc: http::HeaderValue,
) -> http::Response<BoxBody<Bytes, std::convert::Infallible>> {
    let (parts, body) = request.into_parts();
    let read = async move |limit: usize| Limited::new(body, limit).collect().await.ok().map(|all| all.to_bytes());
    let answer = site.answer(&parts.method, &parts.uri, &parts.headers, read).await;
    let turn = answer._loaded;
    let body = Full::new(answer.body).map_frame(move |frame| {
        let _ = &turn;
        frame
    });
    let mut response = http::Response::new(body.boxed());
    *response.status_mut() = answer.status;
    for (name, value) in answer.headers {
        response.headers_mut().append(name, value);
    }
    response.headers_mut().insert(http::header::ALT_SVC, alt_svc);
    response
}
