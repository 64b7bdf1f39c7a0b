//! Changes to users, each published in the caller's transaction: the store makes the change
//! and says what it touched ([`crate::store::changes`]), [`crate::publish`] signs it. The
//! API, the CLI, imports and the background tasks change users through here.

use hearth_shared::wire::{SubToken, UserId};
use rusqlite::Connection;

use crate::error::Error;
use crate::publish::{self, Signer};
use crate::store;
use crate::store::aliases::AliasView;
use crate::store::hwid::HwidView;
use crate::store::users::{Created, UserInput, UserView};

/// Creates one user and publishes it.
pub(crate) fn create(
    conn: &Connection,
    signer: &Signer,
    actor: &str,
    input: &UserInput,
    now: u64,
) -> Result<Created, Error> {
    publish::changed(conn, signer, now, |changes| store::users::create(conn, &signer.vault, changes, actor, input, now))
}

/// Creates many users with the same settings in one transaction: all or none. Each node's
/// set is signed once for the whole call.
pub(crate) fn create_many(
    conn: &Connection,
    signer: &Signer,
    actor: &str,
    names: &[String],
    settings: &UserInput,
    now: u64,
) -> Result<Vec<(String, Created)>, Error> {
    publish::changed(conn, signer, now, |changes| {
        store::users::create_many(conn, &signer.vault, changes, actor, names, settings, now)
    })
}

/// Changes a user's settings; publishes what changed.
pub(crate) fn update(
    conn: &Connection,
    signer: &Signer,
    actor: &str,
    id: UserId,
    input: &UserInput,
    now: u64,
) -> Result<UserView, Error> {
    publish::changed(conn, signer, now, |changes| store::user_edit::update(conn, changes, actor, id, input, now))?;
    // Read after publishing: it settles the status the view shows.
    store::users::get(conn, id)
}

/// Raises the user's kick count: every node closes the user's open connections at its next
/// pull (its apps connect again if they may).
pub(crate) fn kick(conn: &Connection, signer: &Signer, actor: &str, id: UserId, now: u64) -> Result<UserView, Error> {
    publish::changed(conn, signer, now, |changes| store::users::kick(conn, changes, actor, id, now))?;
    // Read after publishing: it settles the status the view shows.
    store::users::get(conn, id)
}

/// Extends a user's expiry by `days` (from now when already expired or never set).
pub(crate) fn extend(
    conn: &Connection,
    signer: &Signer,
    actor: &str,
    id: UserId,
    days: u64,
    now: u64,
) -> Result<UserView, Error> {
    publish::changed(conn, signer, now, |changes| store::users::extend(conn, changes, actor, id, days, now))?;
    // Read after publishing: it settles the status the view shows.
    store::users::get(conn, id)
}

/// Sets a user's used traffic back to zero.
pub(crate) fn reset_traffic(
    conn: &Connection,
    signer: &Signer,
    actor: &str,
    id: UserId,
    now: u64,
) -> Result<UserView, Error> {
    publish::changed(conn, signer, now, |changes| store::users::reset_traffic(conn, changes, actor, id, now))?;
    // Read after publishing: it settles the status the view shows.
    store::users::get(conn, id)
}

/// Gives a user a new subscription link (and a new credential, so an old profile stops
/// working too); the old link is deleted from the edge.
pub(crate) fn rotate(conn: &Connection, signer: &Signer, actor: &str, id: UserId, now: u64) -> Result<SubToken, Error> {
    publish::changed(conn, signer, now, |changes| store::users::rotate(conn, &signer.vault, changes, actor, id, now))
}

/// Deletes a user: its link stops, its nodes drop it.
pub(crate) fn delete(conn: &Connection, signer: &Signer, actor: &str, id: UserId, now: u64) -> Result<(), Error> {
    publish::changed(conn, signer, now, |changes| store::users::delete(conn, changes, actor, id, now))
}

/// Deletes a registered device: off the list, and (through the user's snapshot) off every
/// edge's registry, so its room is free; the device is a new one if it fetches again.
pub(crate) fn forget_device(
    conn: &Connection,
    signer: &Signer,
    actor: &str,
    user: UserId,
    key: &str,
    now: u64,
) -> Result<HwidView, Error> {
    publish::changed(conn, signer, now, |changes| store::hwid::forget(conn, changes, actor, user, key, now))
}

/// Retires an alias of `user`: every edge stops serving it (the decoy, as for any unknown
/// path).
pub(crate) fn retire_alias(
    conn: &Connection,
    signer: &Signer,
    actor: &str,
    user: UserId,
    path: &str,
    now: u64,
) -> Result<Vec<AliasView>, Error> {
    publish::changed(conn, signer, now, |changes| store::aliases::retire(conn, changes, actor, user, path, now))
}

#[cfg(test)]
mod tests {
    use crate::store::user_input::DeviceLimit;
    use crate::store::users::UserInput;

    /// A bulk create's users after its first take what their snapshots share from the first's
    /// (the nodes they reach, their device limit and policy): every snapshot is what signing
    /// the user alone makes, so signing them all again alone signs nothing new.
    #[test]
    fn a_bulk_create_signs_each_snapshot_as_it_would_alone() {
        let control = crate::testing::TestControl::new(true);
        let app = &control.app;
        let now = crate::app::now();
        app.db.write_blocking(|tx| crate::testing::enrolled_node(tx, &app.signer, now)).unwrap();
        let settings =
            UserInput { device_limit: Some(DeviceLimit::Own(3)), quota: Some(1 << 30), ..UserInput::default() };
        let names: Vec<String> = (0..20).map(|i| format!("kin-{i:02}")).collect();
        let streams = |c: &rusqlite::Connection| -> Result<Vec<(String, u64, Vec<u8>)>, crate::error::Error> {
            let mut query = c.prepare("SELECT name, version, digest FROM streams ORDER BY name")?;
            let rows = query.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            Ok(rows.collect::<Result<_, _>>()?)
        };
        let (made, again) = app
            .db
            .write_blocking(|tx| {
                let created = super::create_many(tx, &app.signer, "test", &names, &settings, now)?;
                assert_eq!(created.len(), 20);
                let made = streams(tx)?;
                crate::publish::republish_users(tx, &app.signer, now)?;
                Ok((made, streams(tx)?))
            })
            .unwrap();
        assert!(made.len() > 20, "every user's snapshot and the nodes' sets");
        assert_eq!(made, again, "signing each user alone made another snapshot");
    }
}
