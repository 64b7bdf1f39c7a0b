//! Signing in and who is signed in (`/api/setup`, `/api/login`, two-step sign-in, sessions,
//! `/api/me`) and API tokens. See [`crate::auth`] for the limits on guessing.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hearth_shared::ct_eq;
use serde::Deserialize;
use serde_json::json;

use super::input::{Bounded, Input, MAX_CODE, MAX_SECRET, Refusal, Reply, bytes, chars, ok};
use crate::api::request::{Auth, client_ip, refuse};
use crate::app::{App, Counters, now};
use crate::auth::{self, Role, Scope, Via};
use crate::error::Error;
use crate::store::users::{self as user_store, MAX_NAME};

pub(super) fn session_cookie(value: &str, max_age: u64) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{}={value}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age={max_age}",
        auth::COOKIE
    ))
    .expect("a cookie of URL-safe characters")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SetupRequest {
    token: String,
    login: String,
    password: String,
}

impl Bounded for SetupRequest {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("token", &self.token, MAX_SECRET)?;
        chars("login", &self.login, MAX_NAME)?;
        bytes("password", &self.password, auth::MAX_PASSWORD)
    }
}

/// First-run setup: the one-time token printed at start creates the owner.
pub(super) async fn setup(
    State(app): State<Arc<App>>,
    parts: axum::http::request::Parts,
    Input(req): Input<SetupRequest>,
) -> Reply {
    let ip = client_ip(&parts, &app);
    let agent = browser(&parts);
    app.spend(ip).map_err(Error::TooMany)?;
    let expected = app.setup_token.lock().expect("setup lock").clone();
    let Some(expected) = expected else {
        return Err(Error::conflict("setup_done", "setup is already done; sign in instead").into());
    };
    if !ct_eq(expected.as_bytes(), req.token.as_bytes()) {
        return Err(refuse(StatusCode::FORBIDDEN, "bad_setup_token", "this setup link is not valid").into());
    }
    let login = user_store::check_name(&req.login, "login")?;
    let hash = app.hasher.hash(req.password).await?;
    let now = now();
    let address = auth::address_hash(ip);
    let cookie = app
        .db
        .write(move |tx| {
            auth::create_owner(tx, &login, &hash, now)?;
            auth::remember_address(tx, &address, now)?;
            auth::start_session(tx, now, None, &ip.to_string(), &agent)
        })
        .await?;
    *app.setup_token.lock().expect("setup lock") = None;
    tracing::info!("setup done: the owner exists");
    let mut response = axum::Json(json!({ "ok": true })).into_response();
    response.headers_mut().insert(header::SET_COOKIE, session_cookie(&cookie, auth::SESSION_ABSOLUTE));
    Ok(response)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LoginRequest {
    login: String,
    password: String,
    /// The authenticator app's code (or a recovery code), when two-step sign-in is on.
    #[serde(default)]
    code: Option<String>,
}

impl Bounded for LoginRequest {
    fn check_bounds(&self) -> Result<(), Error> {
        chars("login", &self.login, MAX_NAME)?;
        bytes("password", &self.password, auth::MAX_PASSWORD)?;
        bytes("code", self.code.as_deref().unwrap_or_default(), MAX_CODE)
    }
}

/// What sign-in knows before it checks the password.
pub(super) struct SignInFacts {
    /// The owner's login and password hash.
    owner: Option<(String, String)>,
    /// The admin of that login (id, password hash, role), if it is not the owner's.
    admin: Option<(i64, String, Role)>,
    /// The passkeys of that login's account: a password sign-in needs one of them too.
    passkeys: Vec<webauthn_rs::prelude::Passkey>,
    /// Two-step sign-in's state.
    totp: auth::TotpState,
    /// Whether the owner signed in from this address recently.
    known: bool,
    /// Whether the code is an unspent recovery code.
    recovery: bool,
}

/// A second factor that checked out, not yet spent.
#[derive(Clone, Copy)]
pub(super) enum GoodCode {
    /// An authenticator code, for this time step.
    Totp(u64),
    /// A recovery code (its hash).
    Recovery([u8; 32]),
}

/// Signing in (see [`crate::auth`] for the limits): the address's lockout, then (two-step
/// sign-in on and a code sent) the code, checked without spending it; then, from an address
/// the owner has not signed in from and without a good code (an authenticator code gets past
/// once), a check from the login's hourly budget; then the password; then the code is spent
/// and the session starts.
pub(super) async fn login(
    State(app): State<Arc<App>>,
    parts: axum::http::request::Parts,
    Input(req): Input<LoginRequest>,
) -> Reply {
    let (ip, agent, now) = sign_in_gate(&app, &parts)?;
    let code = req.code.as_deref().map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned);
    let recovery_hash = code.as_deref().filter(|c| c.len() > 8).map(crate::totp::recovery_hash);
    let facts = sign_in_facts(&app, req.login.trim().to_owned(), auth::address_hash(ip), recovery_hash, now).await?;
    let good_code = match (&facts.totp.secret, &code) {
        (Some(sealed), Some(code)) => {
            Some(second_factor(&app, ip, now, &facts, sealed, code, recovery_hash, &req.login).await?)
        }
        _ => None,
    };
    let past_budget = facts.known
        || match good_code {
            Some(GoodCode::Totp(step)) => app.lockouts.pass_code(step),
            Some(GoodCode::Recovery(_)) => true,
            None => false,
        };
    if !past_budget {
        app.lockouts.take(&req.login, now).map_err(Error::TooMany)?;
    }
    let admin = facts.admin.as_ref().map(|(id, _, _)| *id);
    let stored = match (&facts.owner, &facts.admin) {
        (Some((_, hash)), _) | (None, Some((_, hash, _))) => Some(hash.clone()),
        (None, None) => None,
    };
    let good = app.hasher.verify(req.password, stored, past_budget).await?;
    if !good {
        return Err(refused(&app, ip, now, "bad_login", "wrong login or password").await.into());
    }
    second_factor_missing(&app, admin, &facts, good_code.is_some())?;
    let cookie = app.db.write(move |tx| spend_and_open(tx, good_code, now, ip, &agent, admin)).await?;
    // Spent by a sign-in at the same moment.
    let Some(cookie) = cookie else {
        return Err(refused(&app, ip, now, "bad_totp", "that code is wrong, expired or already used").await.into());
    };
    Ok(signed_in(&app, ip, admin, &cookie))
}

/// What a sign-in as `login` is checked against, read in one go: whose login it is and its
/// password hash, passkeys and second factor, whether the address is known to be the owner's,
/// and whether a recovery code given (by its hash) is unspent.
async fn sign_in_facts(
    app: &App,
    login: String,
    address: [u8; 32],
    recovery_hash: Option<[u8; 32]>,
    now: u64,
) -> Result<SignInFacts, Error> {
    app.db
        .read(move |c| {
            let owner = auth::owner(c)?;
            let is_owner = owner.as_ref().is_some_and(|(name, _)| name.eq_ignore_ascii_case(&login));
            let admin = if is_owner { None } else { crate::store::admins::for_sign_in(c, &login)? };
            let passkeys = match (is_owner, &admin) {
                (true, _) => crate::store::passkeys::of(c, None)?,
                (false, Some((id, _, _))) => crate::store::passkeys::of(c, Some(*id))?,
                (false, None) => Vec::new(),
            };
            Ok(SignInFacts {
                passkeys,
                admin,
                owner: owner.filter(|_| is_owner),
                // Two-step sign-in is the owner's; an admin signs in with a password.
                totp: if is_owner { auth::totp_state(c)? } else { auth::TotpState::default() },
                known: auth::known_address(c, &address, now)?,
                recovery: match &recovery_hash {
                    Some(hash) => auth::recovery_code_exists(c, hash)?,
                    None => false,
                },
            })
        })
        .await
}

/// Checks the second factor `code` given with a sign-in against the owner's authenticator
/// (`sealed`) or unspent recovery codes, without spending it. A wrong code is a guess like a
/// wrong password: it counts for the address (even when the budget is spent, or codes could
/// be tried there without end) and, from an unknown one, takes a check from the login's
/// budget.
#[allow(clippy::too_many_arguments)]
async fn second_factor(
    app: &App,
    ip: std::net::IpAddr,
    now: u64,
    facts: &SignInFacts,
    sealed: &[u8],
    code: &str,
    recovery_hash: Option<[u8; 32]>,
    login: &str,
) -> Result<GoodCode, Refusal> {
    let secret = app.signer.vault.open(crate::secrets::Purpose::Totp, sealed)?;
    if let Some(step) = crate::totp::check(&secret, code, now, facts.totp.last_step) {
        return Ok(GoodCode::Totp(step));
    }
    match recovery_hash.filter(|_| facts.recovery) {
        Some(hash) => Ok(GoodCode::Recovery(hash)),
        None => {
            let wrong = refused(app, ip, now, "bad_totp", "that code is wrong, expired or already used").await;
            if !facts.known {
                app.lockouts.take(login, now).map_err(Error::TooMany)?;
            }
            Err(wrong.into())
        }
    }
}

/// After a good password: a missing second factor is a step of the flow, not a failure. With
/// passkeys, one of them (the owner may give an authenticator or recovery code instead).
fn second_factor_missing(app: &App, admin: Option<i64>, facts: &SignInFacts, good_code: bool) -> Result<(), Refusal> {
    if !facts.passkeys.is_empty() && !good_code {
        let (ticket, options) = app.passkeys.start_confirm(admin, &facts.passkeys)?;
        let body = json!({
            "error": { "code": "passkey_required", "message": "confirm with your passkey: finish at /login/passkey/finish with this ticket" },
            "ticket": ticket,
            "options": options,
        });
        return Err((StatusCode::UNAUTHORIZED, axum::Json(body)).into_response().into());
    }
    if facts.totp.secret.is_some() && !good_code {
        return Err(refuse(
            StatusCode::UNAUTHORIZED,
            "totp_required",
            "two-step sign-in is on: send the code from your authenticator app as `code`",
        )
        .into());
    }
    Ok(())
}

/// Spends the second factor a sign-in came with and opens its session, in one transaction;
/// `None` when the code was spent by another sign-in at the same moment.
fn spend_and_open(
    tx: &rusqlite::Connection,
    good_code: Option<GoodCode>,
    now: u64,
    ip: std::net::IpAddr,
    agent: &str,
    admin: Option<i64>,
) -> Result<Option<String>, Error> {
    let spent = match good_code {
        None => true,
        Some(GoodCode::Totp(step)) => auth::totp_use_step(tx, step)?,
        Some(GoodCode::Recovery(hash)) => {
            let spent = auth::use_recovery_code(tx, &hash, now)?;
            if spent {
                tracing::warn!("owner signed in with a recovery code");
            }
            spent
        }
    };
    if !spent {
        return Ok(None);
    }
    open_session(tx, now, ip, agent, admin).map(Some)
}

/// Starts a session for the owner (`admin` `None`) or an admin who signed in from `ip`. The owner's address, not seen before, is told as an event and
/// remembered (exempt from strangers' sign-in budget: see [`crate::auth`]); an admin's never
/// is, or an admin could lift that budget off the owner's login from their own address.
pub(super) fn open_session(
    tx: &rusqlite::Connection,
    now: u64,
    ip: std::net::IpAddr,
    agent: &str,
    admin: Option<i64>,
) -> Result<String, Error> {
    if let Some(id) = admin {
        let login = crate::store::admins::login(tx, id)?;
        crate::store::audit(tx, now, &format!("admin {login}"), "signin", &ip.to_string(), agent)?;
        return auth::start_session(tx, now, admin, &ip.to_string(), agent);
    }
    crate::store::audit(tx, now, "owner", "signin", &ip.to_string(), agent)?;
    let address = auth::address_hash(ip);
    if !auth::known_address(tx, &address, now)? {
        let data = json!({ "address": ip.to_string() });
        crate::store::events::emit(tx, now, "signin.new_address", "owner", &data)?;
    }
    auth::remember_address(tx, &address, now)?;
    auth::start_session(tx, now, admin, &ip.to_string(), agent)
}

/// The answer to a sign-in that succeeded: the session's cookie. (The log line's request span
/// names the client's address.)
pub(super) fn signed_in(app: &App, ip: std::net::IpAddr, admin: Option<i64>, cookie: &str) -> Response {
    app.lockouts.succeed(ip);
    tracing::info!(admin = admin.is_some(), "signed in");
    let mut response = axum::Json(json!({ "ok": true })).into_response();
    response.headers_mut().insert(header::SET_COOKIE, session_cookie(cookie, auth::SESSION_ABSOLUTE));
    response
}

/// What every sign-in passes first: the unauthenticated budget and the address's lockout.
/// Returns the address, the browser (for the session list) and the time.
pub(super) fn sign_in_gate(
    app: &App,
    parts: &axum::http::request::Parts,
) -> Result<(std::net::IpAddr, String, u64), Refusal> {
    let ip = client_ip(parts, app);
    let now = now();
    app.spend(ip).map_err(Error::TooMany)?;
    if let Some(retry) = app.lockouts.locked(ip, now) {
        return Err(Error::TooMany(retry).into());
    }
    Ok((ip, browser(parts), now))
}

/// A refused sign-in: counted for the address, logged without the login (the request's span
/// names the address), and recorded in the audit log with the address and the reason (never
/// the login typed, which may be a password typed in the wrong field), within
/// [`auth::FAILURES_AUDITED_PER_HOUR`]. The answer says how many tries the address has left
/// before it is locked out.
pub(super) async fn refused(app: &App, ip: std::net::IpAddr, now: u64, code: &str, message: &str) -> Response {
    app.lockouts.fail(ip, now);
    Counters::add(&app.counters.logins_failed, 1);
    tracing::info!(reason = code, "sign-in refused");
    if let Some(unrecorded) = app.lockouts.audit_failure(now) {
        let (address, reason) = (ip.to_string(), code.to_owned());
        let recorded = app
            .db
            .write(move |tx| {
                if unrecorded > 0 {
                    crate::store::audit(tx, now, "", "signin.unrecorded", "", &unrecorded.to_string())?;
                }
                crate::store::audit(tx, now, "", "signin.failed", &address, &reason)
            })
            .await;
        if let Err(e) = recorded {
            tracing::warn!(error = %e, "recording a failed sign-in in the audit log failed");
        }
    }
    let body = json!({
        "error": { "code": code, "message": message },
        "tries_left": app.lockouts.tries_left(ip, now),
    });
    (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
}

/// Only the owner, in a browser session, manages two-step sign-in (not API tokens).
pub(super) fn owner_only(auth: &Auth) -> Result<(), Refusal> {
    match (&auth.0.account.role, &auth.0.via) {
        (Role::Owner, Via::Session(_)) => Ok(()),
        _ => Err(refuse(StatusCode::FORBIDDEN, "owner_only", "only the owner, signed in, can change two-step sign-in")
            .into()),
    }
}

/// Whose sessions and tokens the asker sees and ends: the owner everyone's, an admin their
/// own. Refuses a token below the admin scope (a token cannot mint or end others).
pub(super) fn whose(auth: &Auth) -> Result<auth::Whose, Refusal> {
    let principal = &auth.0;
    if let Via::Token { scope, .. } = principal.via
        && scope < Scope::Admin
    {
        return Err(
            refuse(StatusCode::FORBIDDEN, "forbidden", "this needs a session or a token of the admin scope").into()
        );
    }
    Ok(match principal.account.role {
        Role::Owner => auth::Whose::All,
        _ => auth::Whose::Of(principal.account.id),
    })
}

/// Runs a change to one's own sessions or tokens (any role may), audited as the asker.
pub(super) async fn own_change<T: Send + 'static>(
    app: &Arc<App>,
    auth: &Auth,
    f: impl FnOnce(&rusqlite::Connection, auth::Whose, &str, u64) -> Result<T, Error> + Send + 'static,
) -> Result<T, Refusal> {
    let whose = whose(auth)?;
    let actor = auth.0.actor();
    let now = now();
    Ok(app.db.write(move |tx| f(tx, whose, &actor, now)).await?)
}

pub(super) async fn totp_status(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    owner_only(&auth)?;
    let state = app.db.read(auth::totp_state).await?;
    ok(json!({ "enabled": state.secret.is_some(), "recovery_left": state.recovery_left }))
}

/// Starts turning two-step sign-in on: a new secret, as a QR code for the app.
pub(super) async fn totp_enroll(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    owner_only(&auth)?;
    let secret = crate::secrets::random_bytes::<20>();
    let sealed = app.signer.vault.seal(crate::secrets::Purpose::Totp, &secret);
    app.db.write(move |tx| auth::totp_begin(tx, &sealed)).await?;
    let login = app.db.read(auth::owner).await?.map(|(login, _)| login).unwrap_or_default();
    let title = app.signer.profile.read().expect("profile lock").title.clone();
    let uri = crate::totp::uri(&secret, &title, &login);
    let qr_svg = hearth_shared::render::page::qr_svg(&uri);
    ok(json!({ "secret": crate::totp::base32(&secret), "uri": uri, "qr_svg": qr_svg }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TotpConfirm {
    code: String,
}

impl Bounded for TotpConfirm {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("code", &self.code, MAX_CODE)
    }
}

/// Finishes turning two-step sign-in on with a first code; answers with the recovery codes,
/// once.
pub(super) async fn totp_confirm(State(app): State<Arc<App>>, auth: Auth, Input(req): Input<TotpConfirm>) -> Reply {
    owner_only(&auth)?;
    let now = now();
    let state = app.db.read(auth::totp_state).await?;
    let Some(pending) = state.pending else {
        return Err(Error::conflict("no_enrollment", "no enrollment is under way; start again").into());
    };
    let secret = app.signer.vault.open(crate::secrets::Purpose::Totp, &pending)?;
    let Some(step) = crate::totp::check(&secret, &req.code, now, 0) else {
        return Err(Error::invalid("bad_totp", "that code is wrong or expired; check the phone's clock").into());
    };
    let codes = crate::totp::recovery_codes();
    let hashes: Vec<[u8; 32]> = codes.iter().map(|code| crate::totp::recovery_hash(code)).collect();
    app.db.write(move |tx| auth::totp_enable(tx, step, &hashes, now)).await?;
    tracing::info!("two-step sign-in turned on");
    ok(json!({ "recovery_codes": codes }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TotpDisable {
    password: String,
}

impl Bounded for TotpDisable {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("password", &self.password, auth::MAX_PASSWORD)
    }
}

/// Turns two-step sign-in off; needs the password again.
pub(super) async fn totp_disable(State(app): State<Arc<App>>, auth: Auth, Input(req): Input<TotpDisable>) -> Reply {
    owner_only(&auth)?;
    let owner = app.db.read(auth::owner).await?;
    if !app.hasher.verify(req.password, owner.map(|(_, hash)| hash), true).await? {
        return Err(refuse(StatusCode::UNAUTHORIZED, "bad_password", "that is not the owner's password").into());
    }
    let now = now();
    app.db.write(move |tx| auth::totp_disable(tx, now)).await?;
    tracing::info!("two-step sign-in turned off");
    ok(json!({ "enabled": false }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PasswordChange {
    current: String,
    new: String,
}

impl Bounded for PasswordChange {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("current", &self.current, auth::MAX_PASSWORD)?;
        bytes("new", &self.new, auth::MAX_PASSWORD)
    }
}

/// Changes the signed-in admin's own password (the owner's too), in a browser session: the
/// current password first (a wrong one counts as a failed sign-in for the address, which a
/// lockout holds as at sign-in), then the new one's rules. Every other session of theirs ends.
pub(super) async fn change_password(
    State(app): State<Arc<App>>,
    auth: Auth,
    parts: axum::http::request::Parts,
    Input(req): Input<PasswordChange>,
) -> Reply {
    let Some(keep) = auth.0.session() else {
        return Err(
            refuse(StatusCode::FORBIDDEN, "session_only", "a password is changed signed in, not with a token").into()
        );
    };
    let (ip, _, now) = sign_in_gate(&app, &parts)?;
    let admin = auth.0.account.id;
    let stored = app
        .db
        .read(move |c| match admin {
            None => Ok(auth::owner(c)?.map(|(_, hash)| hash)),
            Some(id) => Ok(Some(crate::store::admins::password_hash(c, id)?)),
        })
        .await?;
    if !app.hasher.verify(req.current.clone(), stored, true).await? {
        return Err(refused(&app, ip, now, "bad_current", "that is not your current password").await.into());
    }
    auth::check_password(&req.new)?;
    if req.new == req.current {
        return Err(Error::invalid("same_password", "the new password is the one in use").into());
    }
    let hash = app.hasher.hash(req.new).await?;
    let actor = auth.0.actor();
    let ended = app
        .db
        .write(move |tx| {
            match admin {
                None => crate::store::owner::set_password_hash(tx, &hash)?,
                Some(id) => crate::store::admins::set_password_hash(tx, id, &hash)?,
            }
            let ended = auth::end_other_sessions(tx, admin, Some(&keep))?;
            crate::store::audit(tx, now, &actor, "password.change", "", &format!("{ended} other sessions ended"))?;
            Ok(ended)
        })
        .await?;
    tracing::info!(ended, "password changed");
    ok(json!({ "ok": true, "sessions_ended": ended }))
}

/// The User-Agent a session is started with, for the owner's list of sessions.
pub(super) fn browser(parts: &axum::http::request::Parts) -> String {
    parts.headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

/// The asker's sessions (address, browser, last seen), everyone's for the owner; the asking
/// one marked.
pub(super) async fn list_sessions(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    let whose = whose(&auth)?;
    let current = auth.0.session();
    let list = app.db.read(move |c| auth::sessions(c, whose, current.as_ref(), now())).await?;
    ok(json!({ "sessions": list }))
}

/// Ends one session (the asking one too: that is signing out); an admin's own, anyone's for
/// the owner.
pub(super) async fn end_session(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<i64>) -> Reply {
    own_change(&app, &auth, move |tx, whose, actor, now| {
        if !auth::end_session_id(tx, whose, id)? {
            return Err(Error::NotFound("session"));
        }
        crate::store::audit(tx, now, actor, "session.end", &format!("session {id}"), "")
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Ends every session of the asker's but the asking one (every one, asked with a token).
pub(super) async fn end_other_sessions(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    let keep = auth.0.session();
    let admin = auth.0.account.id;
    let ended = own_change(&app, &auth, move |tx, _, actor, now| {
        let ended = auth::end_other_sessions(tx, admin, keep.as_ref())?;
        crate::store::audit(tx, now, actor, "session.end_others", "", &ended.to_string())?;
        Ok(ended)
    })
    .await?;
    ok(json!({ "ended": ended }))
}

pub(super) async fn logout(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    if let Some(session) = auth.0.session() {
        app.db.write(move |tx| auth::end_session(tx, &session)).await?;
    }
    let mut response = axum::Json(json!({ "ok": true })).into_response();
    response.headers_mut().insert(header::SET_COOKIE, session_cookie("", 0));
    Ok(response)
}

/// Who is asking: their name in the audit log, role and scope, and a reseller's limits.
pub(super) async fn me(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    let principal = &auth.0;
    let mut value = json!({
        "actor": principal.actor(),
        "login": principal.account.login,
        "role": principal.account.role,
        "scope": principal.scope(),
    });
    if let Some(id) = principal.reseller() {
        let admin = app.db.read(move |c| crate::store::admins::get(c, id)).await?;
        value["limits"] = json!({
            "max_users": admin.max_users,
            "max_traffic": admin.max_traffic,
            "max_slow_speed": admin.max_slow_speed,
            "max_days": admin.max_days,
            "groups": admin.groups,
            "users": admin.users,
            "allotted": admin.allotted,
            "spent": admin.spent,
        });
    }
    ok(value)
}

/// The asker's API tokens (everyone's for the owner).
pub(super) async fn list_tokens(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    let whose = whose(&auth)?;
    let tokens = app.db.read(move |c| auth::tokens(c, whose)).await?;
    ok(json!({ "tokens": tokens }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TokenRequest {
    name: String,
    scope: Scope,
}

impl Bounded for TokenRequest {
    fn check_bounds(&self) -> Result<(), Error> {
        chars("name", &self.name, MAX_NAME)
    }
}

/// A new API token of the asker's, within their role.
pub(super) async fn create_token(State(app): State<Arc<App>>, auth: Auth, Input(req): Input<TokenRequest>) -> Reply {
    let account = auth.0.account.clone();
    let (token, view) = own_change(&app, &auth, move |tx, _, actor, now| {
        auth::create_token(tx, actor, &account, &req.name, req.scope, now)
    })
    .await?;
    let mut value = serde_json::to_value(view).expect("a token serializes");
    value["token"] = json!(token);
    Ok((StatusCode::CREATED, axum::Json(value)).into_response())
}

/// Revokes one of the asker's tokens (anyone's for the owner).
pub(super) async fn revoke_token(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<i64>) -> Reply {
    own_change(&app, &auth, move |tx, whose, actor, now| auth::revoke_token(tx, actor, whose, id, now)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
