//! API tokens (`hth_` and 43 characters) of a scope: only each token's SHA-256 is stored,
//! and a token is shown once.

use hearth_shared::sha256;
use rusqlite::{Connection, OptionalExtension as _, params};
use serde::{Deserialize, Serialize};

use crate::auth::principal::{Account, Principal, Scope, Via, Whose, account_of};
use crate::error::Error;
use crate::secrets;
use crate::store::audit_log::audit;

/// An API token as listed (never the token itself).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct TokenView {
    pub(crate) id: i64,
    /// Whose it is: "owner" or the admin's login.
    pub(crate) admin: String,
    pub(crate) name: String,
    pub(crate) scope: Scope,
    pub(crate) created: u64,
    pub(crate) last_used: u64,
}

/// The prefix of every API token, so secret scanners can find leaked ones.
pub(crate) const TOKEN_PREFIX: &str = "hth_";

/// Creates an API token of `account`'s, with at most the scope their role allows; returns it
/// (shown once) and its listing.
pub(crate) fn create_token(
    conn: &Connection,
    actor: &str,
    account: &Account,
    name: &str,
    scope: Scope,
    now: u64,
) -> Result<(String, TokenView), Error> {
    let name = crate::store::users::check_name(name, "token")?;
    let most = account.role.scope();
    if scope > most {
        return Err(Error::invalid(
            "bad_scope",
            format!("a token of a {} has at most the {} scope", account.role.as_str(), most.as_str()),
        ));
    }
    let token = format!("{TOKEN_PREFIX}{}", secrets::random_token());
    conn.execute(
        "INSERT INTO api_tokens (name, hash, scope, created, admin_id) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![name, sha256(token.as_bytes()), scope.as_str(), now, account.id],
    )?;
    let id = conn.last_insert_rowid();
    audit(conn, now, actor, "token.create", &format!("token {id} ({name})"), scope.as_str())?;
    let admin = if account.id.is_some() { account.login.clone() } else { "owner".to_owned() };
    Ok((token, TokenView { id, admin, name, scope, created: now, last_used: 0 }))
}

/// The API tokens of `whose`.
pub(crate) fn tokens(conn: &Connection, whose: Whose) -> Result<Vec<TokenView>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT t.id, coalesce(a.login, 'owner'), t.name, t.scope, t.created, t.last_used
         FROM api_tokens t LEFT JOIN admins a ON a.id = t.admin_id
         WHERE ?1 OR t.admin_id IS ?2 ORDER BY t.id",
    )?;
    let (all, admin) = whose.params();
    let rows = query
        .query_map(params![all, admin], |row| {
            let scope: String = row.get(3)?;
            Ok(TokenView {
                id: row.get(0)?,
                admin: row.get(1)?,
                name: row.get(2)?,
                scope: Scope::parse(&scope).unwrap_or(Scope::Read),
                created: row.get(4)?,
                last_used: row.get(5)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Revokes an API token of `whose`.
pub(crate) fn revoke_token(conn: &Connection, actor: &str, whose: Whose, id: i64, now: u64) -> Result<(), Error> {
    let (all, admin) = whose.params();
    let name: String = conn
        .query_row(
            "SELECT name FROM api_tokens WHERE id = ?1 AND (?2 OR admin_id IS ?3)",
            params![id, all, admin],
            |row| row.get(0),
        )
        .optional()?
        .ok_or(Error::NotFound("token"))?;
    conn.execute("DELETE FROM api_tokens WHERE id = ?1", [id])?;
    audit(conn, now, actor, "token.revoke", &format!("token {id} ({name})"), "")?;
    Ok(())
}

/// Looks an API token up (by its SHA-256: the lookup needs no constant-time compare, as the
/// hash of a guess says nothing about the stored token). Returns the principal and whether
/// its last-used time should be refreshed (by [`touch_token`]).
pub(crate) fn check_token(conn: &Connection, token: &str, now: u64) -> Result<Option<(Principal, bool)>, Error> {
    if !token.starts_with(TOKEN_PREFIX) || token.len() > 100 {
        return Ok(None);
    }
    let hash = sha256(token.as_bytes());
    type Row = (i64, String, String, u64, Option<i64>, Option<String>, Option<String>);
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT t.id, t.name, t.scope, t.last_used, t.admin_id, a.login, a.role
             FROM api_tokens t LEFT JOIN admins a ON a.id = t.admin_id WHERE t.hash = ?1",
        )?
        .query_row([hash], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?))
        })
        .optional()?;
    let Some((id, name, scope, last_used, admin, login, role)) = row else { return Ok(None) };
    let (Some(scope), Some(account)) = (Scope::parse(&scope), account_of(admin, login, role)) else {
        return Ok(None);
    };
    Ok(Some((Principal { account, via: Via::Token { id, name, scope } }, now >= last_used + 60)))
}

/// Records when a token was last used.
pub(crate) fn touch_token(conn: &Connection, id: i64, now: u64) -> Result<(), Error> {
    conn.execute("UPDATE api_tokens SET last_used = ?2 WHERE id = ?1", params![id, now])?;
    Ok(())
}
