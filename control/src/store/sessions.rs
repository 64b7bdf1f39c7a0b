//! Sign-in sessions: only each cookie's SHA-256 is stored, with idle and absolute timeouts.

use hearth_shared::sha256;
use rusqlite::{Connection, OptionalExtension as _, params};
use serde::Serialize;

use crate::auth::principal::{Principal, Via, Whose, account_of};
use crate::error::Error;
use crate::secrets;

/// A session ends after this long without a request.
pub(crate) const SESSION_IDLE: u64 = 12 * 3600;
/// A session ends this long after sign-in, whatever happens.
pub(crate) const SESSION_ABSOLUTE: u64 = 7 * 86_400;

/// Starts a session for the owner (`admin` `None`) or an admin; returns the cookie value.
pub(crate) fn start_session(
    conn: &Connection,
    now: u64,
    admin: Option<i64>,
    address: &str,
    agent: &str,
) -> Result<String, Error> {
    let id = secrets::random_token();
    let agent: String = agent.chars().filter(|c| !c.is_control()).take(MAX_AGENT).collect();
    conn.execute(
        "INSERT INTO sessions (id_hash, created, last_seen, address, agent, admin_id) VALUES (?1, ?2, ?2, ?3, ?4, ?5)",
        params![sha256(id.as_bytes()), now, address, agent, admin],
    )?;
    conn.execute(
        "DELETE FROM sessions WHERE last_seen < ?1 OR created < ?2",
        params![now.saturating_sub(SESSION_IDLE), now.saturating_sub(SESSION_ABSOLUTE)],
    )?;
    Ok(id)
}

/// Checks a session cookie. Returns who it is and whether its idle timer should be refreshed
/// (done at most once a minute, by [`touch_session`]).
pub(crate) fn check_session(conn: &Connection, cookie: &str, now: u64) -> Result<Option<(Principal, bool)>, Error> {
    let hash = sha256(cookie.as_bytes());
    type Row = (u64, u64, Option<i64>, Option<String>, Option<String>);
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT s.created, s.last_seen, s.admin_id, a.login, a.role
             FROM sessions s LEFT JOIN admins a ON a.id = s.admin_id WHERE s.id_hash = ?1",
        )?
        .query_row([hash], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)))
        .optional()?;
    match row {
        Some((created, last_seen, admin, login, role))
            if now < created + SESSION_ABSOLUTE && now < last_seen + SESSION_IDLE =>
        {
            Ok(account_of(admin, login, role)
                .map(|account| (Principal { account, via: Via::Session(hash) }, now >= last_seen + 60)))
        }
        _ => Ok(None),
    }
}

/// Refreshes a session's idle timer.
pub(crate) fn touch_session(conn: &Connection, hash: &[u8; 32], now: u64) -> Result<(), Error> {
    conn.execute("UPDATE sessions SET last_seen = ?2 WHERE id_hash = ?1", params![hash, now])?;
    Ok(())
}

/// Ends a session.
pub(crate) fn end_session(conn: &Connection, hash: &[u8; 32]) -> Result<(), Error> {
    conn.execute("DELETE FROM sessions WHERE id_hash = ?1", [hash])?;
    Ok(())
}

/// The most characters of a browser's User-Agent kept with its session.
const MAX_AGENT: usize = 256;

/// A session as an admin sees it (never its cookie or hash).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub(crate) struct SessionView {
    pub(crate) id: i64,
    /// Whose it is: "owner" or the admin's login.
    pub(crate) admin: String,
    pub(crate) created: u64,
    pub(crate) last_seen: u64,
    pub(crate) address: String,
    pub(crate) browser: String,
    /// The session asking.
    pub(crate) current: bool,
}

/// The sessions still valid at `now` of `whose`, the most recently used first.
pub(crate) fn sessions(
    conn: &Connection,
    whose: Whose,
    current: Option<&[u8; 32]>,
    now: u64,
) -> Result<Vec<SessionView>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT s.rowid, coalesce(a.login, 'owner'), s.created, s.last_seen, s.address, s.agent, s.id_hash = ?1
         FROM sessions s LEFT JOIN admins a ON a.id = s.admin_id
         WHERE s.last_seen >= ?2 AND s.created >= ?3 AND (?4 OR s.admin_id IS ?5)
         ORDER BY s.last_seen DESC, s.rowid DESC",
    )?;
    let (all, admin) = whose.params();
    let rows = query
        .query_map(
            params![
                current.map(|h| h.to_vec()),
                now.saturating_sub(SESSION_IDLE),
                now.saturating_sub(SESSION_ABSOLUTE),
                all,
                admin
            ],
            |row| {
                Ok(SessionView {
                    id: row.get(0)?,
                    admin: row.get(1)?,
                    created: row.get(2)?,
                    last_seen: row.get(3)?,
                    address: row.get(4)?,
                    browser: row.get(5)?,
                    current: row.get::<_, Option<bool>>(6)?.unwrap_or(false),
                })
            },
        )?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Ends one session of `whose` by its id; whether it existed.
pub(crate) fn end_session_id(conn: &Connection, whose: Whose, id: i64) -> Result<bool, Error> {
    let (all, admin) = whose.params();
    Ok(conn.execute("DELETE FROM sessions WHERE rowid = ?1 AND (?2 OR admin_id IS ?3)", params![id, all, admin])? > 0)
}

/// Ends every session of one admin (`None`: the owner) but `keep` (all of them with none); how
/// many ended.
pub(crate) fn end_other_sessions(
    conn: &Connection,
    admin: Option<i64>,
    keep: Option<&[u8; 32]>,
) -> Result<usize, Error> {
    Ok(conn.execute(
        "DELETE FROM sessions WHERE admin_id IS ?1 AND (?2 IS NULL OR id_hash != ?2)",
        params![admin, keep.map(|h| h.to_vec())],
    )?)
}
