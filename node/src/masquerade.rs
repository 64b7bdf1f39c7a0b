//! What the node answers over HTTP/3 to anyone who does not authenticate (`masquerade` in
//! `node.toml`), as the official server offers: by default nginx's 404 page; or a fixed
//! answer; or the files of a directory; or what another web server answers (a reverse proxy).
//! A prober that finds a web site finds nothing to tell the node from one.
//!
//! Everything is bounded: a file over [`MAX_FILE`] is not served, a proxied request body is
//! read up to [`MAX_PROXY_REQUEST`] and an answer up to [`MAX_PROXY_ANSWER`], within
//! [`PROXY_TIMEOUT`], and at most [`MAX_LOADED`] such answers are held at once node-wide; the
//! connection's own limits (requests and time before authenticating) still hold.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use serde::Deserialize;

/// The largest file the directory mode serves.
pub(crate) const MAX_FILE: u64 = 8 << 20;
/// The largest request body passed on to the proxied server.
pub(crate) const MAX_PROXY_REQUEST: usize = 1 << 20;
/// The largest answer taken from the proxied server.
pub(crate) const MAX_PROXY_ANSWER: usize = 8 << 20;
/// How long the proxied server has to answer in full.
pub(crate) const PROXY_TIMEOUT: Duration = Duration::from_secs(8);
/// Answers read from a file or the proxied server held at once, node-wide: at most 64 MiB of
/// them in memory however many strangers ask (each of the 512 connections waiting to
/// authenticate could otherwise hold 8 MiB). More wait their turn, within the connection's
/// time to authenticate.
pub(crate) const MAX_LOADED: usize = 8;

/// The turns of [`MAX_LOADED`].
static LOADED: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_LOADED);

/// The `masquerade` table of `node.toml`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub(crate) enum Masquerade {
    /// nginx's 404 page.
    #[default]
    #[serde(rename = "404")]
    NotFound,
    /// The same answer to every request.
    String {
        content: String,
        #[serde(default = "default_status")]
        status: u16,
        #[serde(default = "default_content_type")]
        content_type: String,
    },
    /// The files under `dir` (a directory's `index.html` for the directory).
    File { dir: PathBuf },
    /// What the web server at `url` answers, for the same path and query.
    Proxy { url: String },
}

fn default_status() -> u16 {
    200
}

fn default_content_type() -> String {
    "text/html; charset=utf-8".to_owned()
}

/// An answer to send.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) body: Bytes,
    /// A turn of [`LOADED`] for a body read from a file or another server, given back once
    /// the answer is sent.
    pub(crate) _loaded: Option<tokio::sync::SemaphorePermit<'static>>,
}

impl Answer {
    /// An answer of the node's own, with the headers nginx sends with one, in its order:
    /// `Server`, `Date`, `Content-Type` (when there is a body), `Content-Length` (`length`:
    /// the body's, or on `HEAD` the body a `GET` gets).
    fn own(status: StatusCode, content_type: Option<HeaderValue>, body: Bytes, length: usize) -> Answer {
        let mut headers = vec![(http::header::SERVER, HeaderValue::from_static("nginx")), (http::header::DATE, date())];
        if let Some(content_type) = content_type {
            headers.push((http::header::CONTENT_TYPE, content_type));
        }
        headers.push((http::header::CONTENT_LENGTH, HeaderValue::from(length)));
        Answer { status, headers, body, _loaded: None }
    }

    fn empty(status: StatusCode) -> Answer {
        Answer::own(status, None, Bytes::new(), 0)
    }

    /// nginx's 404 page.
    pub(crate) fn not_found() -> Answer {
        let body = Bytes::from_static(hearth_shared::render::DECOY_BODY);
        Answer::own(StatusCode::NOT_FOUND, Some(HeaderValue::from_static("text/html")), body.clone(), body.len())
    }
}

/// `Date` now, as HTTP writes it (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn date() -> HeaderValue {
    HeaderValue::from_str(&httpdate::fmt_http_date(std::time::SystemTime::now()))
        .expect("an HTTP date is a header value")
}

/// A masquerade ready to answer: checked, with its directory resolved and its HTTP client.
#[derive(Debug, Default)]
pub(crate) enum Site {
    #[default]
    NotFound,
    String {
        status: StatusCode,
        content_type: HeaderValue,
        content: Bytes,
    },
    File {
        dir: PathBuf,
    },
    Proxy {
        url: reqwest::Url,
        client: reqwest::Client,
    },
}

impl Site {
    /// Checks `masquerade` (a clear error for what cannot work) and makes it ready.
    pub(crate) fn new(masquerade: &Masquerade) -> Result<Site> {
        Ok(match masquerade {
            Masquerade::NotFound => Site::NotFound,
            Masquerade::String { content, status, content_type } => Site::String {
                status: StatusCode::from_u16(*status)
                    .ok()
                    .filter(|s| (200..600).contains(&s.as_u16()) && s.as_u16() != 233)
                    .with_context(|| format!("masquerade: status {status} is not an HTTP status from 200 to 599"))?,
                content_type: HeaderValue::from_str(content_type)
                    .with_context(|| format!("masquerade: content_type {content_type:?} is not a header value"))?,
                content: Bytes::from(content.clone()),
            },
            Masquerade::File { dir } => {
                let canonical =
                    dir.canonicalize().with_context(|| format!("masquerade: the directory {}", dir.display()))?;
                if !canonical.is_dir() {
                    bail!("masquerade: {} is not a directory", dir.display());
                }
                Site::File { dir: canonical }
            }
            Masquerade::Proxy { url } => {
                let parsed = reqwest::Url::parse(url).with_context(|| format!("masquerade: {url:?} is not a URL"))?;
                if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
                    bail!("masquerade: {url:?} is not an http or https URL");
                }
                let client = reqwest::Client::builder()
                    .connect_timeout(PROXY_TIMEOUT)
                    .timeout(PROXY_TIMEOUT)
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .context("masquerade: the proxy's HTTP client")?;
                Site::Proxy { url: parsed, client }
            }
        })
    }

    /// The answer to a request for `uri` (`body` reads its body, when the mode needs it).
    pub(crate) async fn answer<B>(&self, method: &Method, uri: &http::Uri, headers: &HeaderMap, body: B) -> Answer
    where
        B: AsyncFnOnce(usize) -> Option<Bytes>,
    {
        match self {
            Site::NotFound => Answer::not_found(),
            Site::String { status, content_type, content } => {
                Answer::own(*status, Some(content_type.clone()), content.clone(), content.len())
            }
            Site::File { dir } => {
                if method != Method::GET && method != Method::HEAD {
                    return Answer::empty(StatusCode::METHOD_NOT_ALLOWED);
                }
                let Ok(loaded) = LOADED.acquire().await else { return Answer::empty(StatusCode::SERVICE_UNAVAILABLE) };
                let (dir, path) = (dir.clone(), uri.path().to_owned());
                match tokio::task::spawn_blocking(move || file(&dir, &path)).await.ok().flatten() {
                    Some((bytes, kind)) => {
                        let length = bytes.len();
                        let body = if method == Method::GET { bytes } else { Bytes::new() };
                        let mut answer =
                            Answer::own(StatusCode::OK, Some(HeaderValue::from_static(kind)), body, length);
                        answer._loaded = Some(loaded);
                        answer
                    }
                    None => Answer::not_found(),
                }
            }
            Site::Proxy { url, client } => {
                let Some(body) = body(MAX_PROXY_REQUEST).await else {
                    return Answer::empty(StatusCode::PAYLOAD_TOO_LARGE);
                };
                let Ok(loaded) = LOADED.acquire().await else { return Answer::empty(StatusCode::SERVICE_UNAVAILABLE) };
                let answer = proxy(client, url, method, uri, headers, body).await;
                answer.map(|answer| Answer { _loaded: Some(loaded), ..answer }).unwrap_or_else(|e| {
                    tracing::debug!(error = %e, "masquerade: the proxied server did not answer");
                    Answer::empty(StatusCode::BAD_GATEWAY)
                })
            }
        }
    }
}

/// The file a request path names under `dir` (canonical), its bytes and content type; none
/// for a path that leaves `dir` (`..`, a link pointing out), a missing or unreadable file, or
/// one over [`MAX_FILE`].
fn file(dir: &Path, path: &str) -> Option<(Bytes, &'static str)> {
    let decoded = percent_decode(path)?;
    let mut at = dir.to_path_buf();
    for part in decoded.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            part if part.contains('\\') => return None,
            part => at.push(part),
        }
    }
    let mut at = at.canonicalize().ok()?;
    if at.is_dir() {
        at = at.join("index.html").canonicalize().ok()?;
    }
    if !at.starts_with(dir) {
        return None;
    }
    let metadata = std::fs::metadata(&at).ok()?;
    if !metadata.is_file() || metadata.len() > MAX_FILE {
        return None;
    }
    let bytes = std::fs::read(&at).ok()?;
    Some((Bytes::from(bytes), content_type(&at)))
}

/// `%XX` decoded; none for a bad escape, a NUL or what is not UTF-8.
fn percent_decode(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    if out.contains(&0) {
        return None;
    }
    String::from_utf8(out).ok()
}

/// The content type of a file, by its extension.
fn content_type(path: &Path) -> &'static str {
    let extension = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    match extension.as_deref() {
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("json") => "application/json",
        Some("txt") => "text/plain; charset=utf-8",
        Some("xml") => "application/xml",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("ico") => "image/x-icon",
        Some("woff2") => "font/woff2",
        Some("woff") => "font/woff",
        Some("pdf") => "application/pdf",
        _ => "application/octet-stream",
    }
}

/// Headers that belong to one connection, never passed on (RFC 9110, 7.6.1), and Hysteria2's
/// own.
fn passed_on(name: &HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "connection" | "keep-alive" | "proxy-connection" | "te" | "trailer" | "transfer-encoding" | "upgrade" | "host"
    ) && !name.as_str().starts_with("hysteria-")
}

async fn proxy(
    client: &reqwest::Client,
    base: &reqwest::Url,
    method: &Method,
    uri: &http::Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Answer> {
    let mut url = base.clone();
    let path = format!("{}{}", base.path().trim_end_matches('/'), uri.path());
    url.set_path(&path);
    url.set_query(uri.query());
    let mut request = client.request(method.clone(), url).body(body);
    for (name, value) in headers.iter().filter(|(name, _)| passed_on(name)) {
        request = request.header(name, value);
    }
    let mut response = request.send().await?;
    // The site's own headers, `Content-Length` among them: the body goes out whole, as it came.
    let mut answer = Answer { status: response.status(), headers: Vec::new(), body: Bytes::new(), _loaded: None };
    for (name, value) in response.headers().iter().filter(|(name, _)| passed_on(name)) {
        answer.headers.push((name.clone(), value.clone()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > MAX_PROXY_ANSWER {
            bail!("the answer is over {MAX_PROXY_ANSWER} bytes");
        }
        body.extend_from_slice(&chunk);
    }
    answer.body = Bytes::from(body);
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(toml_text: &str) -> Result<Masquerade, toml::de::Error> {
        #[derive(Deserialize)]
        struct Holder {
            masquerade: Masquerade,
        }
        toml::from_str::<Holder>(toml_text).map(|h| h.masquerade)
    }

    #[test]
    fn the_modes_read_from_node_toml_and_are_checked() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        assert_eq!(read("masquerade.type = \"404\"").unwrap(), Masquerade::NotFound);
        let string = read("masquerade = { type = \"string\", content = \"hi\" }").unwrap();
        assert_eq!(
            string,
            Masquerade::String { content: "hi".into(), status: 200, content_type: "text/html; charset=utf-8".into() }
        );
        assert!(read("masquerade = { type = \"ftp\" }").is_err());
        assert!(read("masquerade = { type = \"string\", content = \"hi\", colour = 1 }").is_err());
        let bad_status = Masquerade::String { content: String::new(), status: 233, content_type: "text/plain".into() };
        assert!(Site::new(&bad_status).is_err(), "233 is what authentication answers");
        let bad_type = Masquerade::String { content: String::new(), status: 200, content_type: "a\nb".into() };
        assert!(Site::new(&bad_type).is_err());
        assert!(Site::new(&Masquerade::File { dir: "/no/such/dir".into() }).is_err());
        assert!(Site::new(&Masquerade::Proxy { url: "ftp://example.net".into() }).is_err());
        assert!(Site::new(&Masquerade::Proxy { url: "not a url".into() }).is_err());
        assert!(Site::new(&Masquerade::Proxy { url: "https://example.net/blog".into() }).is_ok());
    }

    #[tokio::test]
    async fn a_file_held_in_memory_holds_a_turn_until_it_is_sent() {
        let temp = tempfile::tempdir().unwrap();
        std::fs::write(temp.path().join("index.html"), "<h1>home</h1>").unwrap();
        let site = Site::new(&Masquerade::File { dir: temp.path().to_owned() }).unwrap();
        let (uri, headers): (http::Uri, HeaderMap) = ("/".parse().unwrap(), HeaderMap::new());
        let ask = || site.answer(&Method::GET, &uri, &headers, async |_| None);
        let mut held = Vec::new();
        for _ in 0..MAX_LOADED {
            held.push(ask().await);
        }
        assert_eq!(LOADED.available_permits(), 0);
        assert!(held.iter().all(|a| a.body.as_ref() == b"<h1>home</h1>"));
        // One more waits until an answer is sent (dropped).
        let more = tokio::time::timeout(Duration::from_millis(200), ask()).await;
        assert!(more.is_err(), "a ninth file was loaded while eight were held");
        held.pop();
        assert_eq!(ask().await.status, StatusCode::OK);
        drop(held);
        assert_eq!(LOADED.available_permits(), MAX_LOADED);
    }

    #[test]
    fn paths_decode_and_types_follow_extensions() {
        assert_eq!(percent_decode("/a%20b/c.html").as_deref(), Some("/a b/c.html"));
        assert_eq!(percent_decode("/%2e%2e/etc").as_deref(), Some("/../etc"));
        for bad in ["/%zz", "/%4", "/a%00b", "/%ff"] {
            assert_eq!(percent_decode(bad), None, "{bad}");
        }
        assert_eq!(content_type(Path::new("a/INDEX.HTML")), "text/html; charset=utf-8");
        assert_eq!(content_type(Path::new("a/logo.svg")), "image/svg+xml");
        assert_eq!(content_type(Path::new("a/blob")), "application/octet-stream");
    }

    #[test]
    fn files_are_served_from_the_directory_and_nothing_outside_it() {
        let temp = tempfile::tempdir().unwrap();
        let site = temp.path().join("site");
        std::fs::create_dir_all(site.join("docs")).unwrap();
        std::fs::write(site.join("index.html"), "<h1>home</h1>").unwrap();
        std::fs::write(site.join("docs/a b.txt"), "spaced").unwrap();
        std::fs::write(temp.path().join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(temp.path().join("secret.txt"), site.join("link.txt")).unwrap();
        std::fs::write(site.join("big.bin"), vec![0u8; MAX_FILE as usize + 1]).unwrap();
        let dir = site.canonicalize().unwrap();
        let served =
            |path: &str| file(&dir, path).map(|(bytes, kind)| (String::from_utf8_lossy(&bytes).into_owned(), kind));
        assert_eq!(served("/"), Some(("<h1>home</h1>".into(), "text/html; charset=utf-8")));
        assert_eq!(served("/index.html").unwrap().0, "<h1>home</h1>");
        assert_eq!(served("/docs/a%20b.txt").unwrap().0, "spaced");
        for outside in [
            "/../secret.txt",
            "/docs/../../secret.txt",
            "/%2e%2e/secret.txt",
            "/link.txt",
            "/docs/",
            "/big.bin",
            "/none",
        ] {
            assert_eq!(served(outside), None, "{outside}");
        }
    }
}
