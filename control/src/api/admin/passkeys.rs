//! Passkeys (`/api/passkeys`, `/api/login/passkey`): an admin adds passkeys to their account
//! (in the panel, signed in), lists and removes them, and signs in with one alone; the owner
//! removes the passkeys of an admin who lost theirs. See [`crate::passkeys`].

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;
use webauthn_rs::prelude::{PublicKeyCredential, RegisterPublicKeyCredential};

use super::access::{open_session, own_change, refused, sign_in_gate, signed_in, whose};
use super::input::{Bounded, Input, MAX_SECRET, Reply, bytes, chars, ok};
use crate::api::request::{Auth, refuse};
use crate::app::{App, now};
use crate::error::Error;
use crate::store::passkeys as store;
use crate::store::users::MAX_NAME;

/// The asker's passkeys (the owner's too are the owner's own).
pub(super) async fn list_passkeys(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    whose(&auth)?;
    let admin = auth.0.account.id;
    let list = app.db.read(move |c| store::list(c, admin)).await?;
    ok(json!({ "passkeys": list, "available": app.passkeys.available() }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AddRequest {
    name: String,
}

impl Bounded for AddRequest {
    fn check_bounds(&self) -> Result<(), Error> {
        chars("name", &self.name, MAX_NAME)
    }
}

/// Only a person signed in adds a passkey (in a browser, with their device).
fn session_only(auth: &Auth) -> Result<(), super::input::Refusal> {
    match auth.0.session() {
        Some(_) => Ok(()),
        None => Err(refuse(StatusCode::FORBIDDEN, "session_only", "a passkey is added in the panel, signed in").into()),
    }
}

/// Starts adding a passkey: the options for `navigator.credentials.create` and a ticket.
pub(super) async fn start_add(State(app): State<Arc<App>>, auth: Auth, Input(req): Input<AddRequest>) -> Reply {
    session_only(&auth)?;
    let name = crate::store::users::check_name(&req.name, "passkey")?;
    let admin = auth.0.account.id;
    let login = match admin {
        Some(_) => auth.0.account.login.clone(),
        None => app.db.read(crate::auth::owner).await?.map(|(login, _)| login).unwrap_or_default(),
    };
    let fresh = crate::secrets::random_bytes::<16>();
    let (handle, existing) = app
        .db
        .read(move |c| {
            let existing = store::of(c, admin)?.iter().map(|p| p.cred_id().clone()).collect();
            Ok((store::user_handle(c, admin, fresh)?, existing))
        })
        .await?;
    let (ticket, options) = app.passkeys.start_add(admin, &login, name, handle, existing)?;
    ok(json!({ "ticket": ticket, "options": options }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AddFinish {
    ticket: String,
    /// A `RegisterPublicKeyCredential`, read once the asker is known to be signed in.
    credential: serde_json::Value,
}

impl Bounded for AddFinish {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("ticket", &self.ticket, MAX_SECRET)
    }
}

/// Finishes adding a passkey with the browser's answer.
pub(super) async fn finish_add(State(app): State<Arc<App>>, auth: Auth, Input(req): Input<AddFinish>) -> Reply {
    session_only(&auth)?;
    let credential: RegisterPublicKeyCredential =
        serde_json::from_value(req.credential).map_err(|e| Error::invalid("bad_json", format!("credential: {e}")))?;
    let admin = auth.0.account.id;
    let (name, handle, passkey) = app.passkeys.finish_add(&req.ticket, admin, &credential)?;
    let view =
        own_change(&app, &auth, move |tx, _, actor, now| store::add(tx, actor, admin, &handle, &name, &passkey, now))
            .await?;
    Ok((StatusCode::CREATED, axum::Json(view)).into_response())
}

/// Removes one of the asker's passkeys.
pub(super) async fn remove_passkey(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<i64>) -> Reply {
    let admin = auth.0.account.id;
    own_change(&app, &auth, move |tx, _, actor, now| store::remove(tx, actor, admin, id, now)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The owner removes every passkey of an admin who lost theirs (they sign in with their
/// password alone again).
pub(super) async fn forget_admin_passkeys(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<i64>) -> Reply {
    let actor = auth.need_owner()?.actor();
    let now = now();
    let removed = app
        .db
        .write(move |tx| {
            let admin = crate::store::admins::get(tx, id)?;
            store::forget_all(tx, &actor, Some(id), &format!("admin {}", admin.login), now)
        })
        .await?;
    ok(json!({ "removed": removed }))
}

/// Starts a sign-in with a passkey alone (no login typed): options for
/// `navigator.credentials.get` and a ticket.
pub(super) async fn start_sign_in(State(app): State<Arc<App>>, parts: axum::http::request::Parts) -> Reply {
    sign_in_gate(&app, &parts)?;
    let (ticket, options) = app.passkeys.start_sign_in()?;
    ok(json!({ "ticket": ticket, "options": options }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SignInFinish {
    ticket: String,
    credential: PublicKeyCredential,
}

impl Bounded for SignInFinish {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("ticket", &self.ticket, MAX_SECRET)
    }
}

/// Finishes a sign-in with a passkey: alone (after `/login/passkey`) or confirming a password
/// (the ticket of a `passkey_required` answer). A refused passkey counts as a failed sign-in.
pub(super) async fn finish_sign_in(
    State(app): State<Arc<App>>,
    parts: axum::http::request::Parts,
    Input(req): Input<SignInFinish>,
) -> Reply {
    let (ip, agent, now) = sign_in_gate(&app, &parts)?;
    let credential = req.credential.get_credential_id().to_vec();
    let found = app.db.read(move |c| store::by_credential(c, &credential)).await?;
    let verified = match app.passkeys.finish_sign_in(&req.ticket, &req.credential, found) {
        Ok(verified) => verified,
        Err(Error::Invalid { code, message }) if code == "bad_passkey" => {
            return Err(refused(&app, ip, now, code, &message).await.into());
        }
        Err(e) => return Err(e.into()),
    };
    let admin = verified.admin;
    let cookie = app
        .db
        .write(move |tx| {
            store::used(tx, verified.id, verified.updated.as_ref(), now)?;
            open_session(tx, now, ip, &agent, admin)
        })
        .await?;
    Ok(signed_in(&app, ip, admin, &cookie))
}
