//! The admin panel's files (`control/ui/`), embedded in the binary.
//!
//! The script and style sheet are served under names that carry a hash of their content
//! (`app.3f2a9c1b7d.js`), cached for a year as `immutable`; the page that names them is
//! `no-cache`, so a new binary's files reach every browser at its next load. Text is gzipped
//! once, at start. The page runs under a strict Content-Security-Policy: scripts, styles and
//! API calls from this origin only, no inline code, no framing.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::LazyLock;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// What the page may load and do.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The files, as written in `control/ui/`.
const SOURCES: [(&str, &str, &str); 3] = [
    ("app.js", include_str!("../ui/app.js"), "text/javascript; charset=utf-8"),
    ("strings.js", include_str!("../ui/strings.js"), "text/javascript; charset=utf-8"),
    ("app.css", include_str!("../ui/app.css"), "text/css; charset=utf-8"),
];
const INDEX: &str = include_str!("../ui/index.html");

/// One file, ready to send.
pub(crate) struct Asset {
    pub(crate) body: Bytes,
    pub(crate) gzip: Bytes,
    pub(crate) content_type: &'static str,
}

impl Asset {
    fn new(body: Vec<u8>, content_type: &'static str) -> Asset {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&body).expect("gzip into memory cannot fail");
        let gzip = encoder.finish().expect("gzip into memory cannot fail");
        Asset { body: body.into(), gzip: gzip.into(), content_type }
    }
}

/// The page and its files by hashed name.
pub(crate) struct Assets {
    pub(crate) index: Asset,
    pub(crate) files: HashMap<String, Asset>,
}

pub(crate) static ASSETS: LazyLock<Assets> = LazyLock::new(|| {
    let mut index = INDEX.to_owned();
    let mut files = HashMap::new();
    for (name, text, content_type) in SOURCES {
        let hash = hex::encode(&hearth_shared::sha256(text.as_bytes())[..5]);
        let (stem, extension) = name.rsplit_once('.').expect("asset names have an extension");
        let hashed = format!("{stem}.{hash}.{extension}");
        index = index.replace(&format!("{{{{{name}}}}}"), &hashed);
        files.insert(hashed, Asset::new(text.as_bytes().to_vec(), content_type));
    }
    Assets { index: Asset::new(index.into_bytes(), "text/html; charset=utf-8"), files }
});

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).any(|v| {
        v.split(',').any(|coding| {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| matches!(p.trim(), "q=0" | "q=0.0" | "q=0.00" | "q=0.000"));
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
    })
}

fn send(asset: &Asset, headers: &HeaderMap, cache: &'static str) -> Response {
    let gzip = accepts_gzip(headers);
    let body = if gzip { asset.gzip.clone() } else { asset.body.clone() };
    let mut response = body.into_response();
    let out = response.headers_mut();
    out.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    out.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    out.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if gzip {
        out.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

/// The page (also at `setup`, whose link carries the one-time token after `#`).
pub(crate) async fn index(headers: HeaderMap) -> Response {
    let mut response = send(&ASSETS.index, &headers, "no-cache");
    let out = response.headers_mut();
    out.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    out.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    out.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    out.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    response
}

/// A script or style sheet by its hashed name (`None`: no such file; the caller answers with
/// the decoy).
pub(crate) fn asset(name: &str, headers: &HeaderMap) -> Option<Response> {
    ASSETS.files.get(name).map(|asset| send(asset, headers, "public, max-age=31536000, immutable"))
}

/// `/<admin prefix>` without the slash: the page's relative links need it.
pub(crate) async fn to_slash(uri: axum::http::Uri) -> Response {
    let location = format!("{}/", uri.path());
    (StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, location)]).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_every_file_by_its_hash_and_everything_is_small() {
        let page = String::from_utf8(ASSETS.index.body.to_vec()).unwrap();
        assert!(!page.contains("{{"), "every placeholder is filled: {page}");
        for name in ASSETS.files.keys() {
            assert!(page.contains(&format!("assets/{name}")), "{name} is linked");
        }
        assert_eq!(ASSETS.files.len(), SOURCES.len());
        let total: usize = ASSETS.files.values().map(|a| a.gzip.len()).sum::<usize>() + ASSETS.index.gzip.len();
        // The issue's budget for the whole panel is 150 KB gzipped.
        assert!(total < 150 * 1024, "{total} bytes gzipped");
    }

    #[test]
    fn gzip_is_sent_only_to_who_accepts_it() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(value).unwrap());
            accepts_gzip(&headers)
        };
        assert!(with("gzip, deflate, br"));
        assert!(with("br;q=1.0, gzip;q=0.8"));
        assert!(!with("br"));
        assert!(!with("gzip;q=0"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
