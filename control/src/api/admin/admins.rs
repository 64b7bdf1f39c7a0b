//! Admin accounts (`/api/admins`), the owner's alone: add one with a role (and a reseller's
//! limits), change it, remove it. See [`crate::store::admins`].

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;

use super::input::{Bounded, Input, MAX_GROUPS, Reply, bytes, chars, list, ok};
use crate::api::request::Auth;
use crate::app::{App, now};
use crate::auth;
use crate::error::Error;
use crate::store::admins::{self, AdminInput};
use crate::store::users::MAX_NAME;

impl Bounded for AdminInput {
    fn check_bounds(&self) -> Result<(), Error> {
        chars("login", self.login.as_deref().unwrap_or_default(), MAX_NAME)?;
        bytes("password", self.password.as_deref().unwrap_or_default(), auth::MAX_PASSWORD)?;
        list("groups", self.groups.as_deref().unwrap_or_default(), MAX_GROUPS, MAX_NAME)
    }
}

pub(super) async fn list_admins(State(app): State<Arc<App>>, auth: Auth) -> Reply {
    auth.need_owner()?;
    let admins = app.db.read(admins::list).await?;
    ok(json!({ "admins": admins }))
}

pub(super) async fn add_admin(State(app): State<Arc<App>>, auth: Auth, Input(mut input): Input<AdminInput>) -> Reply {
    let actor = auth.need_owner()?.actor();
    let Some(password) = input.password.take() else {
        return Err(Error::invalid("bad_password", "give the new admin a password").into());
    };
    let hash = app.hasher.hash(password).await?;
    let now = now();
    let admin = app.db.write(move |tx| admins::create(tx, &actor, &input, &hash, now)).await?;
    Ok((StatusCode::CREATED, axum::Json(admin)).into_response())
}

/// Changes an admin's role, limits or password; a new role or password signs them out.
pub(super) async fn update_admin(
    State(app): State<Arc<App>>,
    auth: Auth,
    Path(id): Path<i64>,
    Input(mut input): Input<AdminInput>,
) -> Reply {
    let actor = auth.need_owner()?.actor();
    let hash = match input.password.take() {
        Some(password) => Some(app.hasher.hash(password).await?),
        None => None,
    };
    let now = now();
    let admin = app.db.write(move |tx| admins::update(tx, &actor, id, &input, hash.as_deref(), now)).await?;
    app.changed();
    ok(serde_json::to_value(admin).expect("an admin serializes"))
}

/// Removes an admin: signed out, tokens revoked; the users they created stay.
pub(super) async fn remove_admin(State(app): State<Arc<App>>, auth: Auth, Path(id): Path<i64>) -> Reply {
    let actor = auth.need_owner()?.actor();
    let now = now();
    app.db.write(move |tx| admins::remove(tx, &actor, id, now)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
