//! Aliases: old subscription paths (`/sub/<token>` of the panel users were imported from)
//! that every edge, and control when it serves links itself, answers like the user's link.
//!
//! Each alias's snapshot is the user's, sealed under a token derived from the path
//! ([`SubToken::for_alias`]): the path is the secret, as a link's token is, and the edge's
//! storage holds only its hash. The edges look up only paths under the prefixes aliases use
//! (pushed in the edge settings), so random paths still cost no lookup on Cloudflare.

use hearth_shared::wire::{EdgeSettings, SubToken, UserId, alias_path, is_alias_prefix, stream};
use rusqlite::{Connection, OptionalExtension as _, params};
use serde::Serialize;

use super::changes::Changes;
use crate::error::Error;
use crate::store::audit_log::audit;

/// One alias, as the panel and the API show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct AliasView {
    pub path: String,
    pub user: UserId,
    /// Where it came from (`3x-ui`, `marzban`...).
    pub source: String,
    pub created: u64,
}

/// The prefix an alias path lives under: its first folder (`/sub/` of `/sub/<id>`, `/api/` of
/// `/api/sub/<id>/json`), so the users of one panel share one; the root, `/`, for a path of one
/// segment (`/<id>` of a subscription page at the root of its domain).
fn prefix_of(path: &str) -> &str {
    match path[1..].find('/') {
        Some(at) => &path[..at + 2],
        None => "/",
    }
}

/// An alias path for the audit log: its first folder and the first characters of the rest
/// (the path is a secret, as a link is).
pub(crate) fn redacted(path: &str) -> String {
    let prefix = prefix_of(path);
    let rest: String = path[prefix.len()..].chars().take(4).collect();
    format!("{prefix}{rest}…")
}

/// Checks an alias path as an importer hands it: the path as matched (no trailing `/`).
pub(crate) fn check(path: &str) -> Result<String, Error> {
    let bad = || {
        Error::invalid(
            "bad_alias",
            format!(
                "an alias is a path under a folder, like /sub/<token>: at most {} bytes of letters, digits and -._~%+=:@,!$&'()*;",
                hearth_shared::wire::MAX_ALIAS_PATH
            ),
        )
    };
    let path = alias_path(path).ok_or_else(bad)?;
    if !is_alias_prefix(prefix_of(path)) {
        return Err(bad());
    }
    Ok(path.to_owned())
}

/// The paths of a user's aliases.
pub(crate) fn paths_of_user(conn: &Connection, user: UserId) -> Result<Vec<String>, Error> {
    let mut query = conn.prepare_cached("SELECT path FROM aliases WHERE user_id = ?1 ORDER BY path")?;
    let paths = query.query_map([user], |row| row.get(0))?.collect::<Result<_, _>>()?;
    Ok(paths)
}

/// The prefixes the aliases live under, for the edge settings (the column is [`prefix_of`]
/// each path, computed by SQLite).
pub(crate) fn prefixes(conn: &Connection) -> Result<Vec<String>, Error> {
    let mut query = conn.prepare_cached("SELECT DISTINCT prefix FROM aliases ORDER BY prefix LIMIT ?1")?;
    let prefixes = query
        .query_map([EdgeSettings::MAX_ALIAS_PREFIXES], |row| row.get::<_, String>(0))?
        .collect::<Result<_, _>>()?;
    Ok(prefixes)
}

/// Adds an alias of `user` (checked with [`check`]); the caller publishes the user and the
/// edge settings. Refuses a path taken, and a prefix past the most the edges take.
pub(crate) fn add(conn: &Connection, user: UserId, path: &str, source: &str, now: u64) -> Result<(), Error> {
    let path = check(path)?;
    let token = SubToken::for_alias(&path).ok_or_else(|| Error::Internal("a checked alias has a token".into()))?;
    let known: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM aliases WHERE prefix = ?1)")?
        .query_row([prefix_of(&path)], |row| row.get(0))?;
    // A new folder is counted against the most the edges take (the only time all are read).
    if !known && prefixes(conn)?.len() >= EdgeSettings::MAX_ALIAS_PREFIXES {
        return Err(Error::invalid(
            "too_many_alias_prefixes",
            format!("aliases live under at most {} folders", EdgeSettings::MAX_ALIAS_PREFIXES),
        ));
    }
    conn.prepare_cached(
        "INSERT INTO aliases (path, user_id, token_hash, source, created) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![path, user, token.hash(), source, now])
    .map_err(|e| Error::from(e).unique(&format!("the alias {path}")))?;
    Ok(())
}

/// Every alias (of one user, when given), by path.
pub(crate) fn list(conn: &Connection, user: Option<UserId>) -> Result<Vec<AliasView>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT path, user_id, source, created FROM aliases WHERE ?1 IS NULL OR user_id = ?1 ORDER BY path",
    )?;
    let aliases = query
        .query_map([user], |row| {
            Ok(AliasView { path: row.get(0)?, user: row.get(1)?, source: row.get(2)?, created: row.get(3)? })
        })?
        .collect::<Result<_, _>>()?;
    Ok(aliases)
}

/// The user an alias's token hash belongs to, and the alias's token.
pub(crate) fn by_hash(conn: &Connection, hash: &[u8; 32]) -> Result<Option<(UserId, SubToken)>, Error> {
    let found: Option<(UserId, String)> = conn
        .prepare_cached("SELECT user_id, path FROM aliases WHERE token_hash = ?1")?
        .query_row([hash.to_vec()], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    Ok(found.and_then(|(user, path)| Some((user, SubToken::for_alias(&path)?))))
}

/// Withdraws the alias snapshots of `user` (before the user is deleted).
pub(crate) fn delete_streams_of_user(conn: &Connection, user: UserId, changes: &mut Changes) -> Result<(), Error> {
    for path in paths_of_user(conn, user)? {
        if let Some(token) = SubToken::for_alias(&path) {
            changes.gone(stream::snapshot(&token.hash()));
        }
    }
    Ok(())
}

/// Retires an alias of `user`: every edge stops serving it (the decoy, as for any unknown
/// path).
pub(crate) fn retire(
    conn: &Connection,
    changes: &mut Changes,
    actor: &str,
    user: UserId,
    path: &str,
    now: u64,
) -> Result<Vec<AliasView>, Error> {
    let path = alias_path(path).ok_or(Error::NotFound("alias"))?;
    let deleted =
        conn.prepare_cached("DELETE FROM aliases WHERE path = ?1 AND user_id = ?2")?.execute(params![path, user])?;
    if deleted == 0 {
        return Err(Error::NotFound("alias"));
    }
    if let Some(token) = SubToken::for_alias(path) {
        changes.gone(stream::snapshot(&token.hash()));
    }
    changes.edge_settings();
    audit(conn, now, actor, "user.alias.retire", &format!("user {user}"), &redacted(path))?;
    list(conn, Some(user))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The folder SQLite computes for each alias (the indexed `prefix` column) is the one
    /// [`prefix_of`] names, so a folder is known, and counted, without reading every alias.
    #[test]
    fn the_folder_the_database_keeps_is_the_one_each_path_names() {
        let control = crate::testing::TestControl::new(false);
        let app = &control.app;
        let input = crate::store::users::UserInput { name: Some("moved".into()), ..Default::default() };
        let user =
            app.db.write_blocking(|tx| Ok(crate::users::create(tx, &app.signer, "test", &input, 1)?.id)).unwrap();
        let paths = ["/sub/abc", "/feed-json/a%20b", "/api/sub/x/json", "/rootlevel", "/s/", "/clash/q.y"];
        app.db
            .write_blocking(move |tx| {
                for path in paths {
                    add(tx, user, path, "3x-ui", 1)?;
                }
                Ok(())
            })
            .unwrap();
        let (kept, listed) = app
            .db
            .read_blocking(|c| {
                let kept: Vec<(String, String)> = c
                    .prepare("SELECT path, prefix FROM aliases ORDER BY path")?
                    .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                    .collect::<Result<_, _>>()?;
                Ok((kept, prefixes(c)?))
            })
            .unwrap();
        assert_eq!(kept.len(), paths.len());
        for (path, prefix) in &kept {
            assert_eq!(prefix, prefix_of(path), "{path}");
        }
        assert_eq!(listed, ["/", "/api/", "/clash/", "/feed-json/", "/sub/"].map(str::to_owned));
    }
}
