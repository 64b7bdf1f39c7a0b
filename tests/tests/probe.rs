//! What a prober finds at a node: on its TCP port (TLS, HTTP/2 or HTTP/1.1, as ALPN offers)
//! and on its UDP port (HTTP/3) the same certificate, made like a server's own (its name, a
//! positive serial, valid ten years from a few hours back), and the same site, whose answers
//! carry the headers the site itself sends (`Content-Length` among them) whichever way they
//! are asked for; and nginx's own 404 with `Date` and `Content-Length`, as nginx sends it.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use bytes::Bytes;
use hearth_tests::control_sim::ControlSim;
use hearth_tests::node::{H3Client, NodeProcess, probing_tls, state_dir_with};
use http_body_util::BodyExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The node's name, as its certificate says it.
const NAME: &str = "www.bakery.example";

/// The page and the chunked answer of the site the node stands for.
const PAGE: &str = "<!doctype html><title>Bakery</title><h1>Fresh bread every morning</h1>";

/// A site as nginx serves it, over plain HTTP on loopback: `/` with a length, `/live`
/// chunked, anything else a 404; `HEAD` as `GET` without the body. One request a connection.
async fn site() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let mut words = head.split_whitespace();
                let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
                let date = httpdate::fmt_http_date(std::time::SystemTime::now());
                let (status, rest, body) = match path {
                    "/" => (
                        "200 OK",
                        format!(
                            "Content-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n\
                             Last-Modified: Tue, 01 Dec 2026 10:00:00 GMT\r\nETag: \"674c3a20-48\"\r\n\
                             Accept-Ranges: bytes\r\n",
                            PAGE.len()
                        ),
                        PAGE.to_owned(),
                    ),
                    "/live" => (
                        "200 OK",
                        "Content-Type: text/plain\r\nTransfer-Encoding: chunked\r\nCache-Control: no-cache\r\n"
                            .to_owned(),
                        "5\r\nfresh\r\n6\r\n bread\r\n0\r\n\r\n".to_owned(),
                    ),
                    _ => (
                        "404 Not Found",
                        "Content-Type: text/html\r\nContent-Length: 9\r\n".to_owned(),
                        "not found".into(),
                    ),
                };
                let body = if method == "HEAD" { String::new() } else { body };
                let answer = format!(
                    "HTTP/1.1 {status}\r\nServer: nginx/1.24.0\r\nDate: {date}\r\n{rest}Connection: close\r\n\r\n{body}"
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

/// An answer as compared: status, the header names (without those of one connection, and
/// `Alt-Svc`, which the node adds over TCP), `Content-Length` and `Content-Type`, and the body.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: u16,
    names: BTreeSet<String>,
    length: Option<String>,
    kind: Option<String>,
    body: Vec<u8>,
}

fn seen(status: u16, headers: &http::HeaderMap, body: Vec<u8>) -> Seen {
    let names = headers
        .keys()
        .map(|name| name.as_str().to_owned())
        .filter(|name| !matches!(name.as_str(), "connection" | "keep-alive" | "transfer-encoding" | "alt-svc"))
        .collect();
    let value = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_owned());
    Seen { status, names, length: value("content-length"), kind: value("content-type"), body }
}

/// A TLS connection to the node's TCP port offering `alpn`: the protocol it chose and the
/// chain it showed.
async fn tls(
    port: u16,
    alpn: &[&[u8]],
) -> (tokio_rustls::client::TlsStream<tokio::net::TcpStream>, Option<Vec<u8>>, Vec<Vec<u8>>) {
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(probing_tls(alpn).unwrap()));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let stream = connector.connect(NAME.try_into().unwrap(), tcp).await.unwrap();
    let (_, session) = stream.get_ref();
    let protocol = session.alpn_protocol().map(<[u8]>::to_vec);
    let chain = session.peer_certificates().unwrap_or_default().iter().map(|c| c.to_vec()).collect();
    (stream, protocol, chain)
}

fn request(method: &http::Method, path: &str) -> http::Request<http_body_util::Empty<Bytes>> {
    http::Request::builder()
        .method(method.clone())
        .uri(format!("https://{NAME}{path}"))
        .header(http::header::HOST, NAME)
        .body(http_body_util::Empty::new())
        .unwrap()
}

async fn read(response: http::Response<hyper::body::Incoming>) -> Seen {
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes().to_vec();
    seen(parts.status.as_u16(), &parts.headers, body)
}

/// One request over HTTP/1.1 on the node's TCP port.
async fn over_http1(port: u16, method: &http::Method, path: &str) -> Seen {
    let (stream, protocol, _) = tls(port, &[b"http/1.1"]).await;
    assert_eq!(protocol.as_deref(), Some(&b"http/1.1"[..]));
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    read(sender.send_request(request(method, path)).await.unwrap()).await
}

/// One request over HTTP/2 on the node's TCP port.
async fn over_http2(port: u16, method: &http::Method, path: &str) -> Seen {
    let (stream, protocol, _) = tls(port, &[b"h2", b"http/1.1"]).await;
    assert_eq!(protocol.as_deref(), Some(&b"h2"[..]), "a client offering h2 gets it, as from a web server");
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    read(sender.send_request(request(method, path)).await.unwrap()).await
}

/// One request straight to the site, over HTTP/1.1.
async fn from_the_site(site: SocketAddr, method: &http::Method, path: &str) -> Seen {
    let tcp = tokio::net::TcpStream::connect(site).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::builder()
        .method(method.clone())
        .uri(path)
        .header(http::header::HOST, NAME)
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    read(sender.send_request(request).await.unwrap()).await
}

/// A node showing `masquerade` (a line of `node.toml`), its masquerade over HTTPS on a TCP
/// port of its own; the node and that port.
fn node_with(temp: &tempfile::TempDir, masquerade: &str) -> (NodeProcess, u16) {
    let port = hearth_tests::edge::free_port().unwrap();
    let dir = temp.path().join(format!("node-{port}"));
    let settings = format!("tls_name = \"{NAME}\"\nmasquerade_tcp = \"127.0.0.1:{port}\"\n{masquerade}");
    state_dir_with(&dir, &ControlSim::new(), 1, &settings).unwrap();
    let node = NodeProcess::start(&dir).unwrap();
    assert_eq!(node.said("hearth-node masquerade over HTTPS on ").unwrap(), format!("127.0.0.1:{port}"));
    (node, port)
}

#[tokio::test]
async fn a_prober_finds_one_site_with_one_certificate_on_tcp_and_udp() {
    let temp = tempfile::tempdir().unwrap();
    let site = site().await;
    let (node, port) = node_with(&temp, &format!("masquerade = {{ type = \"proxy\", url = \"http://{site}/\" }}\n"));

    // One chain on both ports: the node's certificate, made like a server's own.
    let (_, _, on_tcp) = tls(port, &[b"h2", b"http/1.1"]).await;
    let h3 = H3Client::connect_as(node.addr, std::net::Ipv4Addr::LOCALHOST.into(), NAME).await.unwrap();
    assert_eq!(on_tcp, h3.certificates, "the same chain over TCP and QUIC");
    assert_eq!(on_tcp.len(), 1);
    let (_, certificate) = x509_parser::parse_x509_certificate(&on_tcp[0]).unwrap();
    assert_eq!(certificate.subject().to_string(), format!("CN={NAME}"), "not rcgen's name");
    let names = certificate.subject_alternative_name().unwrap().unwrap();
    assert_eq!(names.value.general_names, [x509_parser::extensions::GeneralName::DNSName(NAME)]);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let (from, to) = (certificate.validity().not_before.timestamp(), certificate.validity().not_after.timestamp());
    assert!((now - 25 * 3600..now).contains(&from), "valid from a few hours back, not 1975: {from}");
    assert_eq!((to - from) / 86_400, 3650, "for ten years, not until 4096");
    assert!(certificate.raw_serial()[0] & 0x80 == 0 && certificate.raw_serial().len() > 8);
    drop(h3);

    // The site's answers, however they are asked for, carry what the site sends.
    for (method, path) in [(http::Method::GET, "/"), (http::Method::HEAD, "/"), (http::Method::GET, "/live")] {
        let original = from_the_site(site, &method, path).await;
        assert_eq!(original.status, 200);
        let http1 = over_http1(port, &method, path).await;
        let http2 = over_http2(port, &method, path).await;
        let mut h3 = H3Client::connect_as(node.addr, std::net::Ipv4Addr::LOCALHOST.into(), NAME).await.unwrap();
        let (status, headers, body) = h3.request(method.clone(), path, None).await.unwrap();
        let http3 = seen(status, &headers, body);
        for (how, answer) in [("HTTP/1.1", &http1), ("HTTP/2", &http2), ("HTTP/3", &http3)] {
            assert_eq!(answer, &original, "{method} {path} over {how}");
        }
    }
    // The site's length where it sent one (also on HEAD), none where it sent its body chunked.
    let head = over_http2(port, &http::Method::HEAD, "/").await;
    assert_eq!(head.length, Some(PAGE.len().to_string()));
    assert_eq!(over_http2(port, &http::Method::GET, "/live").await.length, None);
    node.stop().unwrap();

    // nginx's own 404, with the headers nginx sends with it, over HTTP/3 and both TCP ones.
    let (node, port) = node_with(&temp, "");
    let mut h3 = H3Client::connect_as(node.addr, std::net::Ipv4Addr::LOCALHOST.into(), NAME).await.unwrap();
    let (status, headers, body) = h3.request(http::Method::GET, "/", None).await.unwrap();
    let over_h3 = seen(status, &headers, body);
    let expected = Seen {
        status: 404,
        names: ["server", "date", "content-type", "content-length"].map(str::to_owned).into(),
        length: Some(hearth_shared::render::DECOY_BODY.len().to_string()),
        kind: Some("text/html".into()),
        body: hearth_shared::render::DECOY_BODY.to_vec(),
    };
    assert_eq!(over_h3, expected);
    assert_eq!(over_http1(port, &http::Method::GET, "/").await, expected);
    assert_eq!(over_http2(port, &http::Method::GET, "/").await, expected);
    let date = httpdate::parse_http_date(headers["date"].to_str().unwrap()).unwrap();
    let off = date.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs().abs_diff(now as u64);
    assert!(off < 60, "Date is now: {:?}", headers["date"]);
    node.stop().unwrap();
}
