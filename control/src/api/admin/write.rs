//! How a handler of the admin API changes or reads what it may: one transaction as the
//! principal asking, a reseller held to their own users and their limits.

use std::sync::Arc;

use super::input::Refusal;
use crate::api::request::{Auth, Reach};
use crate::app::{App, now};
use crate::auth::Scope;
use crate::error::Error;

/// Runs a change as `auth` (who must hold `scope`) in one write transaction, then wakes the
/// publisher and the nodes' long polls.
pub(super) async fn change<T: Send + 'static>(
    app: &Arc<App>,
    auth: &Auth,
    scope: Scope,
    change: impl FnOnce(&rusqlite::Connection, &App, &str, u64) -> Result<T, Error> + Send + 'static,
) -> Result<T, Refusal> {
    let actor = auth.need(scope)?.actor();
    let now = now();
    let state = app.clone();
    let value = app.db.write(move |tx| change(tx, &state, &actor, now)).await?;
    app.changed();
    Ok(value)
}

/// Runs a change to users as `auth` in one write transaction: over everyone, or for a reseller
/// only to `user` if they created it (any other is not found) and only within their limits
/// (see [`crate::store::admins`]); then wakes the publisher.
pub(super) async fn change_users<T: Send + 'static>(
    app: &Arc<App>,
    auth: &Auth,
    user: Option<u64>,
    change: impl FnOnce(&rusqlite::Connection, &App, &str, u64) -> Result<T, Error> + Send + 'static,
) -> Result<T, Refusal> {
    use crate::store::admins;
    let reach = auth.reach(Scope::Users)?;
    let actor = auth.0.actor();
    let now = now();
    let state = app.clone();
    let value = app
        .db
        .write(move |tx| match reach {
            Reach::All => change(tx, &state, &actor, now),
            Reach::Reseller(admin) => {
                if let Some(user) = user {
                    admins::check_owns(tx, admin, user)?;
                }
                let before = admins::allotment(tx, admin, now)?;
                let value = change(tx, &state, &actor, now)?;
                admins::check_within(tx, admin, before, now)?;
                Ok(value)
            }
        })
        .await?;
    app.changed();
    Ok(value)
}

/// Reads about one user as `auth` (who must hold `scope`): a reseller only about their own.
pub(super) async fn read_user<T: Send + 'static>(
    app: &Arc<App>,
    auth: &Auth,
    scope: Scope,
    user: u64,
    read: impl FnOnce(&rusqlite::Connection, &App) -> Result<T, Error> + Send + 'static,
) -> Result<T, Refusal> {
    let reach = auth.reach(scope)?;
    let state = app.clone();
    Ok(app
        .db
        .read(move |c| {
            if let Reach::Reseller(admin) = reach {
                crate::store::admins::check_owns(c, admin, user)?;
            }
            read(c, &state)
        })
        .await?)
}
