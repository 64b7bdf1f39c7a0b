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

    /// The error codes control's source can answer with: the literal code of every
    /// `invalid(`, `refuse(`, `refused(` and `code: "`/`"code": "` outside tests, and the four
    /// the error type gives itself.
    fn error_codes() -> std::collections::BTreeSet<String> {
        fn literal(rest: &str) -> Option<String> {
            let rest = rest.trim_start().strip_prefix('"')?;
            let code = &rest[..rest.find('"')?];
            (!code.is_empty() && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')).then(|| code.to_owned())
        }
        fn after_commas(rest: &str, commas: usize) -> Option<&str> {
            let mut rest = rest;
            for _ in 0..commas {
                rest = &rest[rest.find(',')? + 1..];
            }
            Some(rest)
        }
        let mut codes: std::collections::BTreeSet<String> =
            ["not_found", "conflict", "too_many", "internal"].map(str::to_owned).into();
        let mut dirs = vec![std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    if name != "tests" {
                        dirs.push(path);
                    }
                    continue;
                }
                if !name.ends_with(".rs") || name == "tests.rs" {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
                for (needle, commas) in [
                    ("invalid(", 0),
                    ("conflict(", 0),
                    ("refuse(", 1),
                    ("refused(", 3),
                    ("code: ", 0),
                    ("\"code\": ", 0),
                ] {
                    for (at, _) in text.match_indices(needle) {
                        if let Some(code) = after_commas(&text[at + needle.len()..], commas).and_then(literal) {
                            codes.insert(code);
                        }
                    }
                }
            }
        }
        codes
    }

    /// Every error code control can answer with has words in every language of the panel, so
    /// an admin reads each in their language (`strings.js`, `err.<code>`).
    #[test]
    fn every_error_code_has_words_in_every_language() {
        let codes = error_codes();
        for known in ["bad_name", "bad_login", "names_taken", "bad_current", "session_only", "passkey_required"] {
            assert!(codes.contains(known), "the scan finds {known}: {codes:?}");
        }
        let strings = include_str!("../ui/strings.js");
        let mut languages = 0;
        // A language's block runs from its line `  xx: {` to the next `  },`.
        for (at, _) in strings.match_indices("\n  ") {
            let rest = &strings[at + 3..];
            let Some(lang) = rest.get(..2).filter(|l| l.bytes().all(|b| b.is_ascii_lowercase())) else { continue };
            if !rest[2..].starts_with(": {\n") {
                continue;
            }
            languages += 1;
            let body = &rest[..rest.find("\n  },").unwrap()];
            let missing: Vec<&String> = codes.iter().filter(|code| !body.contains(&format!("'err.{code}':"))).collect();
            assert!(missing.is_empty(), "{lang} has no words for {missing:?}");
        }
        assert_eq!(languages, 4, "en, ru, fa and zh");
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
