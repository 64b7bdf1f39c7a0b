//! Creating users: one, many with the same settings (all or none), or one taken over from
//! another panel with the link and password it had there.

use hearth_shared::sha256;
use hearth_shared::wire::{ResetStrategy, SubToken, UserId};
use rand_core::OsRng;
use rusqlite::{Connection, OptionalExtension as _, params};

use super::changes::Changes;
use super::groups::group_ids;
use super::user_input::{
    DeviceLimit, Mbps, SpeedInput, UserInput, check_name, check_note, check_slow, expiry, parse_on_quota, parse_reset,
    reset_name,
};
use crate::error::Error;
use crate::secrets::Vault;
use crate::secrets::{self, Purpose};
use crate::store::audit_log::audit;
use crate::store::events;

/// The most users one bulk call creates.
pub(crate) const MAX_BULK: usize = 10_000;

/// The validated, resolved settings of a new user.
struct NewUser {
    tenant: i64,
    quota: u64,
    reset: ResetStrategy,
    expires_at: u64,
    duration: u64,
    note: String,
    groups: Vec<i64>,
    enabled: bool,
    speed: SpeedInput,
    on_quota: Option<&'static str>,
    slow: Mbps,
    devices: Option<u32>,
    rule_set: Option<u16>,
}

fn resolve_new(conn: &Connection, input: &UserInput, now: u64) -> Result<NewUser, Error> {
    let reset = match &input.reset {
        Some(name) => parse_reset(name)
            .ok_or_else(|| Error::invalid("bad_reset", "reset must be none, daily, weekly, monthly or rolling30"))?,
        None => ResetStrategy::Never,
    };
    let (expires_at, duration) = expiry(input, now)?;
    let note = input.note.clone().unwrap_or_default();
    check_note(&note)?;
    let groups = group_ids(conn, input.groups.as_deref().unwrap_or(&["default".to_owned()]))?;
    Ok(NewUser {
        tenant: input.tenant,
        quota: input.quota.unwrap_or(0),
        reset,
        expires_at,
        duration,
        note,
        groups,
        enabled: input.enabled.unwrap_or(true),
        speed: input.speed_limit.unwrap_or_default(),
        on_quota: input.on_quota.as_deref().map(parse_on_quota).transpose()?.flatten(),
        slow: input.slow_speed.unwrap_or_default(),
        devices: input.device_limit.and_then(DeviceLimit::stored),
        rule_set: input.rule_set.as_deref().map(|name| super::routing::named(conn, name)).transpose()?.flatten(),
    })
    .and_then(|new| check_slow(new.on_quota, new.slow).map(|()| new))
}

/// What creating a user hands back once: the user and its subscription link's token.
pub(crate) struct Created {
    pub(crate) id: UserId,
    pub(crate) token: SubToken,
}

fn insert(conn: &Connection, vault: &Vault, name: &str, new: &NewUser, now: u64) -> Result<Created, Error> {
    if let Some(existing) = named_like(conn, name, None, new.tenant)? {
        return Err(Error::conflict("conflict", format!("a user named {existing:?} already exists")));
    }
    insert_named(conn, vault, name, new, SubToken::generate(&mut OsRng), &secrets::random_credential(), now)
}

/// Adds a user taken over from another panel, with the link token and Hysteria2 password it
/// had there (each checked by the caller: the token unused, the password no other user's),
/// and where it came from. Not published: the caller publishes the whole import.
pub(crate) fn insert_imported(
    conn: &Connection,
    vault: &Vault,
    input: &UserInput,
    token: SubToken,
    credential: &str,
    imported_from: &str,
    now: u64,
) -> Result<UserId, Error> {
    let name = check_name(input.name.as_deref().unwrap_or_default(), "user")?;
    let new = resolve_new(conn, input, now)?;
    if let Some(existing) = named_like(conn, &name, None, new.tenant)? {
        return Err(Error::conflict("conflict", format!("a user named {existing:?} already exists")));
    }
    let created = insert_named(conn, vault, &name, &new, token, credential, now)?;
    index_for_search(conn, created.id, created.id, 1)?;
    conn.prepare_cached("UPDATE users SET imported_from = ?2 WHERE id = ?1")?
        .execute(params![created.id, imported_from])?;
    Ok(created.id)
}

/// Adds the users `first` to `last` (`count` of them, all added in this transaction) to the
/// search index, which every user added must be in before the transaction ends (deleting a
/// user, or changing its name or note, takes its old words out of the index).
///
/// Not a trigger on each row: SQLite opens a savepoint around every statement that could
/// fail halfway, and at each one the trigram index writes out what it holds, so indexing each
/// user as its row went in wrote one small segment of the index for every user, then merged
/// them (a tenth of a bulk create's time); a bulk create indexes its users a hundred to a
/// statement (all of a call's 10,000 in one held all their terms in memory at once, and
/// control kept more memory after a burst of creations).
pub(crate) fn index_for_search(conn: &Connection, first: UserId, last: UserId, count: usize) -> Result<(), Error> {
    const AT_ONCE: u64 = 100;
    let mut index = conn.prepare_cached(
        "INSERT INTO user_search (rowid, name, note) SELECT id, name, note FROM users WHERE id BETWEEN ?1 AND ?2",
    )?;
    let mut indexed = 0;
    let mut from = first;
    while from <= last {
        let to = last.min(from.saturating_add(AT_ONCE - 1));
        indexed += index.execute(params![from, to])?;
        from = to + 1;
    }
    if indexed != count {
        return Err(Error::Internal(format!("{indexed} users indexed for search where {count} were added")));
    }
    Ok(())
}

/// The name of another user (not `except`) of `tenant` that is `name` but for its case:
/// names are unique whatever the case of their Latin letters, so "Mom" and "mom" are never two
/// people in the panel. (SQLite's NOCASE folds ASCII only: "Мама" and "мама" stay two names.)
/// A reseller's users are a tenant of their own: their names never meet anyone else's, so a
/// reseller learns nothing of the names others use.
pub(super) fn named_like(
    conn: &Connection,
    name: &str,
    except: Option<UserId>,
    tenant: i64,
) -> Result<Option<String>, Error> {
    Ok(conn
        .prepare_cached(
            "SELECT name FROM users WHERE name = ?1 COLLATE NOCASE AND id IS NOT ?2 AND tenant = ?3 LIMIT 1",
        )?
        .query_row(params![name, except, tenant], |row| row.get(0))
        .optional()?)
}

/// Adds a user whose name the caller found free.
fn insert_named(
    conn: &Connection,
    vault: &Vault,
    name: &str,
    new: &NewUser,
    token: SubToken,
    credential: &str,
    now: u64,
) -> Result<Created, Error> {
    conn.prepare_cached(
        "INSERT INTO users (name, token_hash, token_enc, credential_enc, credential_hash, quota, reset, next_reset,
                            expires_at, duration_secs, enabled, note, created, updated,
                            speed_up, speed_down, on_quota, slow_kbps, device_limit, tenant, rule_set_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
    )?
    .execute(params![
        name,
        token.hash(),
        vault.seal(Purpose::Token, token.as_bytes()),
        vault.seal(Purpose::Credential, credential.as_bytes()),
        sha256(credential.as_bytes()),
        new.quota,
        reset_name(new.reset),
        crate::clock::next_reset(new.reset, now),
        new.expires_at,
        new.duration,
        new.enabled,
        new.note,
        now,
        new.speed.up.map(Mbps::stored),
        new.speed.down.map(Mbps::stored),
        new.on_quota,
        new.slow.stored(),
        new.devices,
        new.tenant,
        new.rule_set,
    ])
    .map_err(|e| Error::from(e).unique(&format!("a user named {name:?}")))?;
    let id: UserId = conn.last_insert_rowid().try_into().expect("row ids are positive");
    let mut add = conn.prepare_cached("INSERT INTO user_groups (user_id, group_id) VALUES (?1, ?2)")?;
    for group in &new.groups {
        add.execute(params![id, group])?;
    }
    let more = serde_json::json!({ "quota": new.quota, "expires_at": new.expires_at, "enabled": new.enabled });
    events::user_event(conn, now, "user.created", id, name, more)?;
    Ok(Created { id, token })
}

/// Creates one user (to be published: see [`crate::users::create`]).
pub(crate) fn create(
    conn: &Connection,
    vault: &Vault,
    changes: &mut Changes,
    actor: &str,
    input: &UserInput,
    now: u64,
) -> Result<Created, Error> {
    let name = check_name(input.name.as_deref().unwrap_or_default(), "user")?;
    let new = resolve_new(conn, input, now)?;
    let created = insert(conn, vault, &name, &new, now)?;
    index_for_search(conn, created.id, created.id, 1)?;
    changes.user(conn, created.id)?;
    audit(conn, now, actor, "user.create", &format!("user {} ({name})", created.id), "")?;
    Ok(created)
}

/// Creates many users with the same settings in one transaction: all or none. Each node's
/// set is signed once for the whole call.
pub(crate) fn create_many(
    conn: &Connection,
    vault: &Vault,
    changes: &mut Changes,
    actor: &str,
    names: &[String],
    settings: &UserInput,
    now: u64,
) -> Result<Vec<(String, Created)>, Error> {
    if names.is_empty() || names.len() > MAX_BULK {
        return Err(Error::invalid("bad_bulk", format!("give 1 to {MAX_BULK} names")));
    }
    if settings.name.is_some() {
        return Err(Error::invalid("bad_bulk", "the shared settings of a bulk create take no name"));
    }
    let new = resolve_new(conn, settings, now)?;
    let names = names.iter().map(|name| check_name(name, "user")).collect::<Result<Vec<_>, _>>()?;
    // Names repeated in the list, then names other users have: each listed (names are one
    // whatever the case of their Latin letters, as the database's NOCASE index compares them).
    let (mut seen, mut told) =
        (std::collections::HashSet::with_capacity(names.len()), std::collections::HashSet::new());
    let mut repeated: Vec<String> = Vec::new();
    for name in &names {
        let key = name.to_ascii_lowercase();
        if !seen.insert(key.clone()) && told.insert(key) {
            repeated.push(name.clone());
        }
    }
    if !repeated.is_empty() {
        repeated.truncate(20);
        let message = format!("these names are in the list more than once: {}", repeated.join(", "));
        return Err(Error::Names { code: "duplicate_names", message, names: repeated });
    }
    let mut taken: Vec<String> = Vec::new();
    for name in &names {
        if let Some(existing) = named_like(conn, name, None, new.tenant)? {
            taken.push(existing);
            if taken.len() == 20 {
                break;
            }
        }
    }
    if !taken.is_empty() {
        let message = format!("users with these names exist already: {}", taken.join(", "));
        return Err(Error::Names { code: "names_taken", message, names: taken });
    }
    // Every name is free (checked above), and every user has the first's settings and groups.
    let mut created: Vec<(String, Created)> = Vec::with_capacity(names.len());
    for name in names {
        let user =
            insert_named(conn, vault, &name, &new, SubToken::generate(&mut OsRng), &secrets::random_credential(), now)?;
        match created.first() {
            None => changes.user(conn, user.id)?,
            Some((_, first)) => changes.user_alike(first.id, user.id),
        }
        created.push((name, user));
    }
    if let (Some((_, first)), Some((_, last))) = (created.first(), created.last()) {
        index_for_search(conn, first.id, last.id, created.len())?;
    }
    audit(conn, now, actor, "user.bulk_create", &format!("{} users", created.len()), "")?;
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::restoring::{RestoredUser, write_user};

    /// The users found by `text` through the trigram index.
    fn found(conn: &Connection, text: &str) -> Vec<UserId> {
        conn.prepare("SELECT rowid FROM user_search WHERE user_search MATCH ?1 ORDER BY rowid")
            .unwrap()
            .query_map([format!("\"{text}\"")], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// Every way a user is added (alone, in bulk, imported, restored) puts it in the search
    /// index in the same transaction, and the index stays what the users table says through
    /// renames and deletions (FTS5's own check, which compares the two).
    #[test]
    fn every_user_added_is_found_by_search() {
        let control = crate::testing::TestControl::new(false);
        let app = &control.app;
        let vault = &app.signer.vault;
        let now = crate::app::now();
        let check = |conn: &Connection| {
            conn.execute("INSERT INTO user_search (user_search, rank) VALUES ('integrity-check', 1)", []).unwrap();
        };
        let ids = app
            .db
            .write_blocking(|tx| {
                let mut changes = Changes::default();
                let input = UserInput { name: Some("alone-one".into()), ..UserInput::default() };
                let alone = create(tx, vault, &mut changes, "test", &input, now)?;
                // More than the hundred indexed at a time.
                let names: Vec<String> = (0..1500).map(|i| format!("bulk-{i:04}")).collect();
                let bulk = create_many(tx, vault, &mut changes, "test", &names, &UserInput::default(), now)?;
                let input = UserInput { name: Some("imported-one".into()), ..UserInput::default() };
                let token = SubToken::generate(&mut OsRng);
                let imported = insert_imported(tx, vault, &input, token, "a-password", "3x-ui:7", now)?;
                let restored = RestoredUser {
                    id: 100_000,
                    name: "restored-one",
                    token_hash: sha256(b"restored token"),
                    token_enc: Vec::new(),
                    credential_enc: Vec::new(),
                    credential_hash: sha256(b"restored credential"),
                    quota: 0,
                    used_up: 0,
                    used_down: 0,
                    reset: "none",
                    next_reset: 0,
                    expires_at: 0,
                    enabled: true,
                };
                write_user(tx, &restored, now)?;
                // The same user restored again is an update: indexed once, not twice.
                write_user(tx, &RestoredUser { name: "restored-again", ..restored }, now)?;
                Ok((alone.id, bulk.iter().map(|(_, c)| c.id).collect::<Vec<_>>(), imported))
            })
            .unwrap();
        let (alone, bulk, imported) = ids;
        app.db
            .write_blocking(|tx| {
                assert_eq!(found(tx, "alone-one"), [alone]);
                assert_eq!(found(tx, "bulk-"), bulk);
                assert_eq!(found(tx, "imported-one"), [imported]);
                assert_eq!(found(tx, "restored-again"), [100_000]);
                assert!(found(tx, "restored-one").is_empty(), "the name it had before is gone");
                check(tx);
                tx.execute("UPDATE users SET name = 'renamed' WHERE id = ?1", [bulk[3]])?;
                tx.execute("DELETE FROM users WHERE id IN (?1, ?2, 100000)", [alone, imported])?;
                assert_eq!(found(tx, "renamed"), [bulk[3]]);
                assert!(found(tx, "alone-one").is_empty() && found(tx, "imported").is_empty());
                check(tx);
                Ok(())
            })
            .unwrap();
    }
}
