//! HTTP-01 (RFC 8555, 8.3): the tokens of the challenges under way, and a listener on TCP 80
//! that answers them. Anyone else is sent to the same address over HTTPS, as web servers on
//! port 80 do (nginx's words, `Server: nginx`).
//!
//! Bounded like the program's other listeners: at most [`CONNECTIONS`] connections, request
//! headers of at most [`HEADER_BYTES`] read within [`HEADERS`], no connection held longer than
//! [`LIFETIME`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;

/// Connections held at once.
const CONNECTIONS: usize = 64;
/// The time a client has to send a request's headers.
const HEADERS: Duration = Duration::from_secs(10);
/// The largest request head.
const HEADER_BYTES: usize = 8 * 1024;
/// The longest a connection is held.
const LIFETIME: Duration = Duration::from_secs(30);
/// Where the CA looks for a token.
const PREFIX: &str = "/.well-known/acme-challenge/";

/// The key authorizations of the HTTP-01 challenges under way, by token.
#[derive(Debug, Default)]
pub struct Tokens(Mutex<HashMap<String, String>>);

impl Tokens {
    /// Answers `token` with `key_authorization` until it is removed.
    pub(crate) fn insert(&self, token: &str, key_authorization: &str) {
        self.0.lock().expect("tokens lock").insert(token.to_owned(), key_authorization.to_owned());
    }

    /// Stops answering `token`.
    pub(crate) fn remove(&self, token: &str) {
        self.0.lock().expect("tokens lock").remove(token);
    }

    /// The answer to a request for `path`, if it names a token under way.
    pub fn answer(&self, path: &str) -> Option<String> {
        let token = path.strip_prefix(PREFIX)?;
        self.0.lock().expect("tokens lock").get(token).cloned()
    }
}

/// Answers HTTP on `listener` forever: tokens under way, else a redirect to HTTPS.
pub async fn serve(listener: tokio::net::TcpListener, tokens: Arc<Tokens>) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let connections = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::debug!(%error, "HTTP-01: accepting failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else { continue };
        let tokens = tokens.clone();
        tokio::spawn(async move {
            let _held = permit;
            let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let answer = answer(&tokens, &request);
                async move { Ok::<_, std::convert::Infallible>(answer) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADERS)
                .max_buf_size(HEADER_BYTES)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(LIFETIME, connection).await;
        });
    }
}

fn answer<B>(tokens: &Tokens, request: &http::Request<B>) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    if let Some(key_authorization) = tokens.answer(path) {
        tracing::info!("HTTP-01: the CA fetched its token");
        return page(StatusCode::OK, "application/octet-stream", Bytes::from(key_authorization), None);
    }
    // The host the client asked for, if it is one (no header can be made of anything else).
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).filter(|h| {
        !h.is_empty() && h.len() <= 255 && h.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
    });
    let target = host.map(|host| {
        let host =
            host.rsplit_once(':').filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit())).map_or(host, |(h, _)| h);
        let path_and_query = request.uri().path_and_query().map_or("/", |p| p.as_str());
        format!("https://{host}{path_and_query}")
    });
    match target.and_then(|t| HeaderValue::from_str(&t).ok()) {
        Some(location) => page(StatusCode::MOVED_PERMANENTLY, "text/html", Bytes::from_static(MOVED), Some(location)),
        None => page(StatusCode::NOT_FOUND, "text/html", Bytes::from_static(NOT_FOUND), None),
    }
}

fn page(status: StatusCode, kind: &'static str, body: Bytes, location: Option<HeaderValue>) -> Response<Full<Bytes>> {
    let length = body.len();
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::SERVER, HeaderValue::from_static("nginx"));
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    if let Some(location) = location {
        headers.insert(header::LOCATION, location);
    }
    response
}

const MOVED: &[u8] = b"<html>\r\n<head><title>301 Moved Permanently</title></head>\r\n<body>\r\n<center><h1>301 Moved Permanently</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n";
const NOT_FOUND: &[u8] = b"<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn request(path: &str, host: Option<&str>) -> http::Request<()> {
        let mut request = http::Request::builder().uri(path);
        if let Some(host) = host {
            request = request.header(header::HOST, host);
        }
        request.body(()).unwrap()
    }

    #[test]
    fn tokens_are_answered_and_everything_else_goes_to_https() {
        let tokens = Tokens::default();
        tokens.insert("tok-1", "tok-1.thumbprint");
        let ok = answer(&tokens, &request("/.well-known/acme-challenge/tok-1", Some("node1.example.net")));
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()[header::CONTENT_LENGTH], "16");
        let other = answer(&tokens, &request("/.well-known/acme-challenge/tok-2", Some("node1.example.net:80")));
        assert_eq!(other.status(), StatusCode::MOVED_PERMANENTLY);
        assert_eq!(other.headers()[header::LOCATION], "https://node1.example.net/.well-known/acme-challenge/tok-2");
        let page = answer(&tokens, &request("/menu?day=1", Some("bakery.example")));
        assert_eq!(page.headers()[header::LOCATION], "https://bakery.example/menu?day=1");
        assert_eq!(page.headers()[header::SERVER], "nginx");
        for host in [None, Some("evil.example\" onload=x"), Some("a b")] {
            assert_eq!(answer(&tokens, &request("/", host)).status(), StatusCode::NOT_FOUND, "{host:?}");
        }
        tokens.remove("tok-1");
        assert_eq!(tokens.answer("/.well-known/acme-challenge/tok-1"), None);
    }
}
