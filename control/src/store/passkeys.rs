//! The admins' passkeys (see `passkeys.sql`): listed, added, found by credential, their
//! signature counter kept, removed.

use rusqlite::{Connection, OptionalExtension as _, params};
use serde::Serialize;
use webauthn_rs::prelude::Passkey;

use super::users::check_name;
use crate::error::Error;
use crate::store::audit_log::audit;

/// The most passkeys one admin keeps.
pub(crate) const MAX_PER_ADMIN: u64 = 20;

/// A passkey as its admin sees it (never its key).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub(crate) struct PasskeyView {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) created: u64,
    pub(crate) last_used: u64,
}

/// A stored passkey: whose (`None`: the owner's), its user handle and credential.
pub(crate) struct Stored {
    pub(crate) id: i64,
    pub(crate) admin: Option<i64>,
    pub(crate) user_handle: Vec<u8>,
    pub(crate) passkey: Passkey,
}

fn parse(json: &str) -> rusqlite::Result<Passkey> {
    serde_json::from_str(json)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, e.into()))
}

/// One admin's passkeys (`None`: the owner's), oldest first.
pub(crate) fn list(conn: &Connection, admin: Option<i64>) -> Result<Vec<PasskeyView>, Error> {
    let mut query =
        conn.prepare_cached("SELECT id, name, created, last_used FROM passkeys WHERE admin_id IS ?1 ORDER BY id")?;
    let rows = query
        .query_map([admin], |row| {
            Ok(PasskeyView { id: row.get(0)?, name: row.get(1)?, created: row.get(2)?, last_used: row.get(3)? })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// One admin's passkeys, to sign them in with.
pub(crate) fn of(conn: &Connection, admin: Option<i64>) -> Result<Vec<Passkey>, Error> {
    let mut query = conn.prepare_cached("SELECT passkey FROM passkeys WHERE admin_id IS ?1 ORDER BY id")?;
    let rows = query.query_map([admin], |row| parse(&row.get::<_, String>(0)?))?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The account's WebAuthn user handle: the one its passkeys have, else `new`.
pub(crate) fn user_handle(conn: &Connection, admin: Option<i64>, new: [u8; 16]) -> Result<[u8; 16], Error> {
    let found: Option<Vec<u8>> = conn
        .query_row("SELECT user_handle FROM passkeys WHERE admin_id IS ?1 LIMIT 1", [admin], |row| row.get(0))
        .optional()?;
    Ok(found.and_then(|h| h.try_into().ok()).unwrap_or(new))
}

/// The passkey of a credential id.
pub(crate) fn by_credential(conn: &Connection, credential: &[u8]) -> Result<Option<Stored>, Error> {
    Ok(conn
        .prepare_cached("SELECT id, admin_id, user_handle, passkey FROM passkeys WHERE credential_id = ?1")?
        .query_row([credential], |row| {
            Ok(Stored {
                id: row.get(0)?,
                admin: row.get(1)?,
                user_handle: row.get(2)?,
                passkey: parse(&row.get::<_, String>(3)?)?,
            })
        })
        .optional()?)
}

/// Adds a passkey to an admin's (`None`: the owner's).
pub(crate) fn add(
    conn: &Connection,
    actor: &str,
    admin: Option<i64>,
    user_handle: &[u8; 16],
    name: &str,
    passkey: &Passkey,
    now: u64,
) -> Result<PasskeyView, Error> {
    let name = check_name(name, "passkey")?;
    let count: u64 = conn.query_row("SELECT count(*) FROM passkeys WHERE admin_id IS ?1", [admin], |row| row.get(0))?;
    if count >= MAX_PER_ADMIN {
        return Err(Error::invalid("too_many_passkeys", format!("an admin keeps at most {MAX_PER_ADMIN} passkeys")));
    }
    let json = serde_json::to_string(passkey).map_err(|e| Error::Internal(format!("a passkey serializes: {e}")))?;
    let credential: &[u8] = passkey.cred_id().as_ref();
    let added = conn.execute(
        "INSERT INTO passkeys (admin_id, user_handle, credential_id, passkey, name, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (credential_id) DO NOTHING",
        params![admin, user_handle.as_slice(), credential, json, name, now],
    )?;
    if added == 0 {
        return Err(Error::conflict("passkey_added", "this passkey is already added"));
    }
    let id = conn.last_insert_rowid();
    audit(conn, now, actor, "passkey.add", &format!("passkey {id} ({name})"), "")?;
    Ok(PasskeyView { id, name, created: now, last_used: 0 })
}

/// Records a sign-in with a passkey, and its new signature counter when it moved.
pub(crate) fn used(conn: &Connection, id: i64, updated: Option<&Passkey>, now: u64) -> Result<(), Error> {
    conn.execute("UPDATE passkeys SET last_used = ?2 WHERE id = ?1", params![id, now])?;
    if let Some(passkey) = updated {
        let json = serde_json::to_string(passkey).map_err(|e| Error::Internal(format!("a passkey serializes: {e}")))?;
        conn.execute("UPDATE passkeys SET passkey = ?2 WHERE id = ?1", params![id, json])?;
    }
    Ok(())
}

/// Removes one of an admin's passkeys.
pub(crate) fn remove(conn: &Connection, actor: &str, admin: Option<i64>, id: i64, now: u64) -> Result<(), Error> {
    let name: String = conn
        .query_row("SELECT name FROM passkeys WHERE id = ?1 AND admin_id IS ?2", params![id, admin], |row| row.get(0))
        .optional()?
        .ok_or(Error::NotFound("passkey"))?;
    conn.execute("DELETE FROM passkeys WHERE id = ?1", [id])?;
    audit(conn, now, actor, "passkey.remove", &format!("passkey {id} ({name})"), "")
}

/// Removes every passkey of an admin (one who lost theirs); how many.
pub(crate) fn forget_all(
    conn: &Connection,
    actor: &str,
    admin: Option<i64>,
    who: &str,
    now: u64,
) -> Result<usize, Error> {
    let removed = conn.execute("DELETE FROM passkeys WHERE admin_id IS ?1", [admin])?;
    audit(conn, now, actor, "passkey.forget_all", who, &removed.to_string())?;
    Ok(removed)
}
