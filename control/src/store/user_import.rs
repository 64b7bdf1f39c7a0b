//! What an import of users (`crate::import`) asks and writes of the users table beyond
//! creating them ([`super::user_create::insert_imported`]): whether a user was imported
//! before, whether a link or Hysteria2 password is taken, the usage and next reset a user
//! comes with, and the savepoint each user is taken in; and what an export in the Hearth
//! format reads of every user.

use hearth_shared::wire::UserId;
use rusqlite::{Connection, OptionalExtension as _};

use crate::error::Error;

/// The user imported from `key` (`<source>:<id there>`), if any.
pub(crate) fn imported_as(conn: &Connection, key: &str) -> Result<Option<UserId>, Error> {
    Ok(conn
        .prepare_cached("SELECT id FROM users WHERE imported_from = ?1")?
        .query_row([key], |row| row.get(0))
        .optional()?)
}

/// Whether a user has the Hysteria2 password whose SHA-256 is `hash`.
pub(crate) fn credential_taken(conn: &Connection, hash: &[u8; 32]) -> Result<bool, Error> {
    Ok(conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM users WHERE credential_hash = ?1)")?
        .query_row([hash.to_vec()], |row| row.get(0))?)
}

/// Whether a user has the link whose token hashes to `hash`.
pub(crate) fn token_taken(conn: &Connection, hash: &[u8; 32]) -> Result<bool, Error> {
    Ok(conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM users WHERE token_hash = ?1)")?
        .query_row([hash.to_vec()], |row| row.get(0))?)
}

/// Runs `f`, which takes one user, in a savepoint: what it wrote stays when it succeeds and is
/// undone when it fails, the rest of the caller's transaction kept either way. The outer error
/// is the savepoint's own; the inner result is `f`'s.
pub(crate) fn in_savepoint<T>(
    conn: &Connection,
    f: impl FnOnce() -> Result<T, Error>,
) -> Result<Result<T, Error>, Error> {
    conn.execute_batch("SAVEPOINT import_user")?;
    let result = f();
    match &result {
        Ok(_) => conn.execute_batch("RELEASE import_user")?,
        Err(_) => conn.execute_batch("ROLLBACK TO import_user; RELEASE import_user")?,
    }
    Ok(result)
}

/// User `id`'s traffic so far, as its source counted it (raw and counted alike).
pub(crate) fn set_usage(conn: &Connection, id: UserId, up: u64, down: u64) -> Result<(), Error> {
    conn.prepare_cached("UPDATE users SET used_up = ?2, used_down = ?3, raw_up = ?2, raw_down = ?3 WHERE id = ?1")?
        .execute(rusqlite::params![id, up, down])?;
    Ok(())
}

/// When user `id`'s traffic next goes back to zero.
pub(crate) fn set_next_reset(conn: &Connection, id: UserId, next_reset: u64) -> Result<(), Error> {
    conn.prepare_cached("UPDATE users SET next_reset = ?2 WHERE id = ?1")?
        .execute(rusqlite::params![id, next_reset])?;
    Ok(())
}

/// A user as an export reads it: its link and password sealed, limits, usage and what else
/// moves with it.
pub(crate) struct ExportedUser {
    pub(crate) id: UserId,
    pub(crate) name: String,
    pub(crate) token_enc: Vec<u8>,
    pub(crate) credential_enc: Vec<u8>,
    pub(crate) quota: u64,
    pub(crate) used_up: u64,
    pub(crate) used_down: u64,
    pub(crate) expires_at: u64,
    /// Days from the first use, in seconds (0: none), and when that use was (0: not yet).
    pub(crate) duration_secs: u64,
    pub(crate) started_at: u64,
    pub(crate) enabled: bool,
    pub(crate) reset: String,
    pub(crate) note: String,
    pub(crate) device_limit: Option<u32>,
    /// `<source>:<id there>` for a user taken over from another panel.
    pub(crate) imported_from: Option<String>,
    pub(crate) telegram_id: Option<i64>,
    pub(crate) next_reset: u64,
}

/// Every user, by id, as an export reads it.
pub(crate) fn exported(conn: &Connection) -> Result<Vec<ExportedUser>, Error> {
    let mut query = conn.prepare(
        "SELECT id, name, token_enc, credential_enc, quota, used_up, used_down, expires_at, duration_secs, started_at,
                enabled, reset, note, device_limit, imported_from, telegram_id, next_reset
         FROM users ORDER BY id",
    )?;
    let users = query
        .query_map([], |row| {
            Ok(ExportedUser {
                id: row.get(0)?,
                name: row.get(1)?,
                token_enc: row.get(2)?,
                credential_enc: row.get(3)?,
                quota: row.get(4)?,
                used_up: row.get(5)?,
                used_down: row.get(6)?,
                expires_at: row.get(7)?,
                duration_secs: row.get(8)?,
                started_at: row.get(9)?,
                enabled: row.get(10)?,
                reset: row.get(11)?,
                note: row.get(12)?,
                device_limit: row.get(13)?,
                imported_from: row.get(14)?,
                telegram_id: row.get(15)?,
                next_reset: row.get(16)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(users)
}
