//! What every request of the HTTP surface meets: who is asking and what they may do (the
//! API's description says what each route needs), the client's address, a JSON body within
//! its size, and how a refusal looks.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::app::App;
use crate::auth::{self, Principal, Role, Scope, Via};
use crate::error::Error;
use crate::tls::ClientAddr;

/// The largest request body: what nodes send, and a bulk create of 10,000 names of 64
/// characters (2.6 MB at four bytes a character).
pub(super) const MAX_BODY: usize = 4 * 1024 * 1024;
/// The largest body of the admin API's other calls: a user, node, group or settings change
/// (50 User-Agent rules and a profile, 100 groups of 64 characters) is well under.
pub(super) const ADMIN_BODY: usize = 64 * 1024;
/// The largest body of setup and sign-in, which anyone can send: a login of 64 characters,
/// a password of 256 bytes and a code, even with every character escaped, fit.
pub(super) const SIGN_IN_BODY: usize = 8 * 1024;

/// The admin API's description, served as it is and read for what each route needs.
pub(crate) const OPENAPI: &str = include_str!("../../../docs/admin-api.openapi.json");

pub(crate) fn decoy() -> Response {
    use hearth_shared::render::{DECOY_BODY, DECOY_HEADERS, DECOY_STATUS};
    let mut response = (StatusCode::from_u16(DECOY_STATUS).expect("valid status"), DECOY_BODY).into_response();
    for (name, value) in DECOY_HEADERS {
        response.headers_mut().insert(name, HeaderValue::from_static(value));
    }
    response
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (status, code, message) = match &self {
            Error::Invalid { code, message } => (StatusCode::BAD_REQUEST, *code, message.clone()),
            Error::NotFound(_) => (StatusCode::NOT_FOUND, "not_found", self.to_string()),
            Error::Conflict { code, message } => (StatusCode::CONFLICT, *code, message.clone()),
            Error::Names { code, message, names } => {
                let status = if *code == "names_taken" { StatusCode::CONFLICT } else { StatusCode::BAD_REQUEST };
                let body = serde_json::json!({ "error": { "code": code, "message": message, "names": names } });
                return (status, axum::Json(body)).into_response();
            }
            Error::Rules { set, error } => {
                let body = serde_json::json!({ "error": {
                    "code": "bad_routing_rules",
                    "message": self.to_string(),
                    "rule_set": set,
                    "line": error.line,
                    "column": error.column,
                } });
                return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
            }
            Error::TooMany(_) => (StatusCode::TOO_MANY_REQUESTS, "too_many", self.to_string()),
            Error::Db(_) | Error::Internal(_) => {
                tracing::error!(error = %self, "request failed");
                (StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error; see control's log".to_owned())
            }
        };
        let body = serde_json::json!({ "error": { "code": code, "message": message } });
        let mut response = (status, axum::Json(body)).into_response();
        if let Error::TooMany(retry_after) = self {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
        }
        response
    }
}

/// An error with its own status and code (401, 403).
pub(crate) fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(serde_json::json!({ "error": { "code": code, "message": message } }))).into_response()
}

/// A JSON body; a malformed one is a 400 with the parser's reason, one larger than its route
/// takes a 413 (read no further than that).
pub(crate) struct Body<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Body(value)),
            Err(rejection) => Err(match rejection {
                JsonRejection::MissingJsonContentType(_) => {
                    Error::invalid("bad_content_type", "send JSON with content-type: application/json").into_response()
                }
                JsonRejection::BytesRejection(too_large) if too_large.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                    refuse(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "too_large",
                        "the request body is larger than this call takes",
                    )
                }
                other => Error::invalid("bad_json", other.body_text()).into_response(),
            }),
        }
    }
}

/// The client's address: the TCP peer, or, when the peer is one of `trusted_proxies`, the
/// client it names ([`hearth_shared::forwarded::client`]). Anyone else's forwarding headers are
/// ignored.
pub(crate) fn client_ip(parts: &Parts, app: &App) -> IpAddr {
    let peer = parts
        .extensions
        .get::<ConnectInfo<ClientAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |ConnectInfo(ClientAddr(addr))| addr.ip());
    let values = |name: &'static str| parts.headers.get_all(name).into_iter().filter_map(|v| v.to_str().ok());
    let peer_ip = peer.to_canonical();
    if !hearth_shared::forwarded::trusted(&app.config.trusted_proxies, peer_ip)
        && hearth_shared::forwarded::FORWARDING_HEADERS.iter().any(|name| parts.headers.contains_key(*name))
        && app.untrusted_forwarding.set(peer_ip).is_ok()
    {
        tracing::warn!(
            peer = %peer_ip,
            "requests from this address name the client they forward for, but it is not in \
             trusted_proxies: every admin and client behind it counts as this one address (their \
             sign-in failures and link fetches add up); add the proxy to trusted_proxies"
        );
    }
    hearth_shared::forwarded::client(
        &app.config.trusted_proxies,
        peer,
        values("cf-connecting-ip"),
        values("x-forwarded-for"),
    )
}

/// The session cookie's value, if any.
pub(crate) fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(auth::COOKIE)?.strip_prefix('='))
}

/// Whether a cookie-authenticated unsafe request comes from the panel itself. Browsers send
/// `Sec-Fetch-Site` (and `Origin`) on every such request; a cross-site one is refused.
fn same_origin(parts: &Parts) -> bool {
    if matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return true;
    }
    let headers = &parts.headers;
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return site == "same-origin" || site == "none";
    }
    match headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        Some(origin) => {
            let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
            let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
            !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
        }
        // Not a browser: cookies are a browser's; nothing cross-site to fear.
        None => true,
    }
}

/// A request that is signed in (session or API token), with the scope it holds.
pub(crate) struct Auth(pub(crate) Principal);

impl FromRequestParts<Arc<App>> for Auth {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Response> {
        let ip = client_ip(parts, app);
        let now = crate::app::now();
        let bearer = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned);
        let cookie = session_cookie(&parts.headers).map(str::to_owned);
        let principal = match (bearer, cookie) {
            (Some(token), _) => app.db.read(move |c| auth::check_token(c, &token, now)).await,
            (None, Some(cookie)) => {
                if !same_origin(parts) {
                    return Err(refuse(StatusCode::FORBIDDEN, "cross_site", "cross-site requests are refused"));
                }
                app.db.read(move |c| auth::check_session(c, &cookie, now)).await
            }
            (None, None) => Ok(None),
        };
        let principal = match principal {
            Ok(Some((principal, stale))) => {
                if stale {
                    let who = principal.clone();
                    let touched = app
                        .db
                        .write(move |tx| match who.via {
                            Via::Session(session) => auth::touch_session(tx, &session, now),
                            Via::Token { id, .. } => auth::touch_token(tx, id, now),
                        })
                        .await;
                    if let Err(e) = touched {
                        return Err(e.into_response());
                    }
                }
                Ok(Some(principal))
            }
            other => other.map(|_| None),
        };
        match principal {
            // What the route's description says it needs is checked here, before the body is
            // read: a principal who may not call it learns nothing from its validation.
            Ok(Some(principal)) => match documented_need(parts) {
                Some(need) if !may(need, principal.account.role, principal.scope(), principal.session().is_some()) => {
                    let code = if need.starts_with("Any admin's session only") || need.starts_with("Owner session only")
                    {
                        "session_only"
                    } else if need.starts_with("Owner") {
                        "owner_only"
                    } else {
                        "forbidden"
                    };
                    Err(refuse(StatusCode::FORBIDDEN, code, "your role, or this token's scope, may not do this"))
                }
                _ => Ok(Auth(principal)),
            },
            Ok(None) => {
                if let Err(retry_after) = app.spend(ip) {
                    return Err(Error::TooMany(retry_after).into_response());
                }
                Err(refuse(StatusCode::UNAUTHORIZED, "unauthorized", "sign in, or send a valid API token"))
            }
            Err(e) => Err(e.into_response()),
        }
    }
}

/// What the API's description (`docs/admin-api.openapi.json`) says the route of `parts` needs:
/// its operation's description, which starts with it ("Scope: users; a reseller: their own.",
/// "Owner only."...). `None` for a route it does not describe.
fn documented_need(parts: &Parts) -> Option<&'static str> {
    static NEEDS: std::sync::LazyLock<std::collections::HashMap<(String, String), String>> =
        std::sync::LazyLock::new(|| {
            let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("the API's description is JSON");
            let mut needs = std::collections::HashMap::new();
            for (path, operations) in doc["paths"].as_object().into_iter().flatten() {
                for (method, operation) in operations.as_object().into_iter().flatten() {
                    if let Some(description) = operation["description"].as_str() {
                        needs.insert((method.to_ascii_uppercase(), shape(path)), description.to_owned());
                    }
                }
            }
            needs
        });
    let matched = parts.extensions.get::<axum::extract::MatchedPath>()?.as_str();
    let path = &matched[matched.find("/api/")? + "/api".len()..];
    NEEDS.get(&(parts.method.as_str().to_owned(), shape(path))).map(String::as_str)
}

/// A route's path with its parameters unnamed (`/users/{}`), to compare the router's with the
/// description's.
fn shape(path: &str) -> String {
    let mut shaped = String::with_capacity(path.len());
    let mut in_param = false;
    for c in path.chars() {
        match c {
            '{' => {
                in_param = true;
                shaped.push_str("{}");
            }
            '}' => in_param = false,
            _ if !in_param => shaped.push(c),
            _ => {}
        }
    }
    shaped
}

/// Whether a principal of `role`, holding `scope` (its role's, cut to its token's), by a
/// session or not, may call a route whose description says `need`.
pub(crate) fn may(need: &str, role: Role, scope: Scope, session: bool) -> bool {
    if need.starts_with("Owner session only") {
        return role == Role::Owner && session;
    }
    if need.starts_with("Any admin's session only") {
        return session;
    }
    if need.starts_with("Owner only") {
        return role == Role::Owner && scope == Scope::Admin;
    }
    if need.starts_with("Scope: any admin") {
        return session || scope == Scope::Admin;
    }
    if need.starts_with("Scope: any.") || need.starts_with("Scope: none") || need.starts_with("Scope: the token") {
        return true;
    }
    let Some(needed) = need
        .strip_prefix("Scope: ")
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_alphabetic()).next())
        .and_then(Scope::parse)
    else {
        // A description that says nothing the gate knows: the handler's own check decides.
        return true;
    };
    if role == Role::Reseller && !need.contains("a reseller:") {
        return false;
    }
    scope >= needed
}

/// Whose users a request reaches: everyone's, or only those a reseller created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    All,
    Reseller(i64),
}

impl Auth {
    /// Refuses (403) unless the principal holds `scope` over everyone: a reseller never does
    /// (the routes open to resellers ask [`Auth::reach`] instead).
    pub(crate) fn need(&self, scope: Scope) -> Result<&Principal, Response> {
        if self.0.reseller().is_some() {
            return Err(refuse(StatusCode::FORBIDDEN, "forbidden", "a reseller manages only their own users"));
        }
        self.reach(scope)?;
        Ok(&self.0)
    }

    /// Refuses (403) unless the principal holds `scope`, over everyone or (a reseller) over
    /// their own users; says which.
    pub(crate) fn reach(&self, scope: Scope) -> Result<Reach, Response> {
        if self.0.scope() < scope {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                "forbidden",
                &format!(
                    "this needs the {} scope; {} has {}",
                    scope.as_str(),
                    match self.0.via {
                        Via::Token { .. } => "the token",
                        Via::Session(_) => "your role",
                    },
                    self.0.scope().as_str()
                ),
            ));
        }
        Ok(match self.0.reseller() {
            Some(id) => Reach::Reseller(id),
            None => Reach::All,
        })
    }

    /// Refuses (403) unless the owner is asking (signed in, or with one of their tokens of the
    /// admin scope).
    pub(crate) fn need_owner(&self) -> Result<&Principal, Response> {
        if self.0.account.role != Role::Owner || self.0.scope() < Scope::Admin {
            return Err(refuse(StatusCode::FORBIDDEN, "owner_only", "only the owner manages admin accounts"));
        }
        Ok(&self.0)
    }
}
