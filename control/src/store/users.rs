//! Users: what the API shows of them (one, by name, a page), the changes that republish them
//! (kick, extend, reset, rotate, delete) and their status. Their settings as given
//! ([`super::user_input`]) and creating them ([`super::user_create`]) have files of their
//! own; what callers use of them is named here too, so that they reach it as `store::users`.
//! An edit is [`super::user_edit`].

use hearth_shared::wire::{Status, SubToken, UserId};
use hearth_shared::{Digest, sha256};
use rand_core::OsRng;
use rusqlite::{Connection, OptionalExtension as _, params, params_from_iter};
use serde::{Deserialize, Serialize};

use super::changes::Changes;
use crate::error::Error;
use crate::secrets::Vault;
use crate::secrets::{self, Purpose};
use crate::store::audit_log::audit;
use crate::store::events;

pub(crate) use super::user_create::{Created, MAX_BULK, create, create_many, insert_imported};
pub(crate) use super::user_input::{
    DeviceLimit, MAX_DEVICES, MAX_NAME, MAX_NOTE, Mbps, SpeedInput, UserInput, check_name, parse_reset, reset_name,
};

/// A user as the API shows it. No secret: the link has its own call.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct UserView {
    pub(crate) id: UserId,
    pub(crate) name: String,
    pub(crate) status: String,
    pub(crate) enabled: bool,
    pub(crate) quota: u64,
    pub(crate) used_up: u64,
    pub(crate) used_down: u64,
    /// Traffic as the nodes measured it, before their multipliers (`used_up`/`used_down`
    /// are what it counted for).
    pub(crate) raw_up: u64,
    pub(crate) raw_down: u64,
    pub(crate) reset: String,
    pub(crate) next_reset: u64,
    pub(crate) expires_at: u64,
    pub(crate) duration_days: u64,
    pub(crate) started_at: u64,
    pub(crate) note: String,
    pub(crate) groups: Vec<String>,
    pub(crate) created: u64,
    pub(crate) updated: u64,
    /// The user's own limit (`null` each way: its groups' default).
    pub(crate) speed_limit: SpeedInput,
    /// `cut`, `slow` or `group`.
    pub(crate) on_quota: String,
    /// The rate a slowed user gets (with `on_quota` `slow`).
    pub(crate) slow_speed: Mbps,
    /// The user's own device limit (0: none; `null`: its groups' default).
    pub(crate) device_limit: Option<u32>,
    /// Who of the user is on the nodes now, and what the nodes refused the user.
    pub(crate) devices: DevicesView,
    /// The user's own Telegram chat, which the bot tells of its quota and expiry.
    pub(crate) telegram_id: Option<i64>,
    /// The user's own rule set (`null`: its groups').
    pub(crate) rule_set: Option<String>,
    /// The rule set its traffic is routed by: its own, else that of its newest group with
    /// one (`null`: none, straight out).
    pub(crate) routed_by: Option<String>,
}

/// A user's devices on the nodes, from their last reports.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct DevicesView {
    /// The limit in force: the user's own, else the most generous of its groups' (0: none).
    pub(crate) limit: u32,
    /// Devices connected now, summed over nodes (a device on two nodes counts twice).
    pub(crate) online: u32,
    /// Open connections now.
    pub(crate) connections: u32,
    /// The nodes it is connected to.
    pub(crate) nodes: Vec<String>,
    /// Devices refused (or dropped for a newer one) over the limit, all told.
    pub(crate) refused: u64,
    /// When a device was last refused (0: never).
    pub(crate) refused_at: u64,
    /// BitTorrent connections and packets the abuse guard refused, all told.
    pub(crate) refused_torrent: u64,
    /// Connections to port 25 the abuse guard refused, all told.
    pub(crate) refused_smtp: u64,
}

/// Filters and paging for a list.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    /// Substring of the name or note.
    pub(crate) q: Option<String>,
    /// One status (active, disabled, expired, over_quota, not_started).
    pub(crate) status: Option<String>,
    /// A group's name.
    pub(crate) group: Option<String>,
    /// From 1.
    pub(crate) page: Option<u64>,
    /// At most 500; 50 by default.
    pub(crate) per_page: Option<u64>,
    /// Only the users this admin created (a reseller's view; never from the query string).
    #[serde(skip)]
    pub(crate) admin: Option<i64>,
}

/// A page of users.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct UserPage {
    pub(crate) total: u64,
    pub(crate) page: u64,
    pub(crate) per_page: u64,
    pub(crate) users: Vec<UserView>,
}

/// The device limit in force of the user `u` (SQL): its own, else the most generous of its
/// groups' (0, no limit, wins), else 0.
macro_rules! device_limit_in_force {
    () => {
        "coalesce(u.device_limit, (SELECT CASE WHEN min(g.device_limit) = 0 THEN 0 ELSE max(g.device_limit) END
                                  FROM user_groups ug JOIN groups g ON g.id = ug.group_id WHERE ug.user_id = u.id), 0)"
    };
}

pub(crate) use device_limit_in_force;

const VIEW_COLUMNS: &str = concat!(
    "u.id, u.name, u.status, u.enabled, u.quota, u.used_up, u.used_down, u.reset, u.next_reset,
    u.expires_at, u.duration_secs, u.started_at, u.note, u.created, u.updated,
    (SELECT group_concat(g.name, char(31)) FROM (SELECT g.name FROM user_groups ug JOIN groups g ON g.id = ug.group_id
     WHERE ug.user_id = u.id ORDER BY g.name) g),
    u.speed_up, u.speed_down, u.on_quota, u.slow_kbps, u.device_limit,
    ",
    device_limit_in_force!(),
    ",
    (SELECT coalesce(sum(p.devices), 0) || ',' || coalesce(sum(p.connections), 0) || ',' ||
            coalesce(group_concat(n.name, char(31)), '')
     FROM presence p JOIN nodes n ON n.id = p.node_id WHERE p.user_id = u.id),
    u.refused_devices, u.devices_refused_at, u.refused_torrent, u.refused_smtp, u.raw_up, u.raw_down, u.telegram_id,
    (SELECT r.name FROM rule_sets r WHERE r.id = u.rule_set_id),
    (SELECT r.name FROM rule_sets r WHERE r.id = coalesce(u.rule_set_id,
        (SELECT g.rule_set_id FROM user_groups ug JOIN groups g ON g.id = ug.group_id
         WHERE ug.user_id = u.id AND g.rule_set_id IS NOT NULL ORDER BY g.id DESC LIMIT 1)))"
);

fn view_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<UserView> {
    let groups: Option<String> = row.get(15)?;
    Ok(UserView {
        id: row.get(0)?,
        name: row.get(1)?,
        status: row.get(2)?,
        enabled: row.get(3)?,
        quota: row.get(4)?,
        used_up: row.get(5)?,
        used_down: row.get(6)?,
        raw_up: row.get(27)?,
        raw_down: row.get(28)?,
        reset: row.get(7)?,
        next_reset: row.get(8)?,
        expires_at: row.get(9)?,
        duration_days: row.get::<_, u64>(10)? / 86_400,
        started_at: row.get(11)?,
        note: row.get(12)?,
        created: row.get(13)?,
        updated: row.get(14)?,
        groups: groups.map(|g| g.split('\u{1f}').map(str::to_owned).collect()).unwrap_or_default(),
        speed_limit: SpeedInput {
            up: row.get::<_, Option<u64>>(16)?.map(Mbps::from_stored),
            down: row.get::<_, Option<u64>>(17)?.map(Mbps::from_stored),
        },
        on_quota: row.get::<_, Option<String>>(18)?.unwrap_or_else(|| "group".into()),
        slow_speed: Mbps::from_stored(row.get(19)?),
        device_limit: row.get(20)?,
        telegram_id: row.get(29)?,
        rule_set: row.get(30)?,
        routed_by: row.get(31)?,
        devices: {
            let present: String = row.get(22)?;
            let mut parts = present.splitn(3, ',');
            let mut number = || parts.next().and_then(|n| n.parse().ok()).unwrap_or(0);
            let (online, connections) = (number(), number());
            let nodes = parts.next().filter(|n| !n.is_empty());
            DevicesView {
                limit: row.get(21)?,
                online,
                connections,
                nodes: nodes.map(|n| n.split('\u{1f}').map(str::to_owned).collect()).unwrap_or_default(),
                refused: row.get(23)?,
                refused_at: row.get(24)?,
                refused_torrent: row.get(25)?,
                refused_smtp: row.get(26)?,
            }
        },
    })
}

/// One user.
pub(crate) fn get(conn: &Connection, id: UserId) -> Result<UserView, Error> {
    conn.prepare_cached(&format!("SELECT {VIEW_COLUMNS} FROM users u WHERE u.id = ?1"))?
        .query_row([id], view_of)
        .optional()?
        .ok_or(Error::NotFound("user"))
}

/// A user's id by name (or by its id, for a name resellers' users share: `#12`, unless a
/// user is named so).
pub(crate) fn id_by_name(conn: &Connection, name: &str) -> Result<UserId, Error> {
    let ids: Vec<UserId> = conn
        .prepare_cached("SELECT id FROM users WHERE name = ?1 ORDER BY id")?
        .query_map([name], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    match ids.as_slice() {
        // A name nobody has: `#12` is user 12.
        [] => match name.strip_prefix('#').and_then(|id| id.parse::<UserId>().ok()) {
            Some(id) => get(conn, id).map(|user| user.id),
            None => Err(Error::NotFound("user")),
        },
        [id] => Ok(*id),
        several => Err(Error::invalid(
            "ambiguous_name",
            format!(
                "{} users are named {name:?} (resellers' users have names of their own): give one by its id, {}",
                several.len(),
                several.iter().map(|id| format!("#{id}")).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// A page of users, filtered.
pub(crate) fn list(conn: &Connection, query: &ListQuery) -> Result<UserPage, Error> {
    let per_page = query.per_page.unwrap_or(50).clamp(1, 500);
    let page = query.page.unwrap_or(1).max(1);
    let mut filters = Vec::new();
    let mut args: Vec<String> = Vec::new();
    if let Some(q) = query.q.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
        if q.chars().count() >= 3 {
            // The trigram index (search.sql): the text as one phrase, found anywhere in the
            // name or the note, whatever its case.
            args.push(format!("\"{}\"", q.replace('"', "\"\"")));
            filters.push(format!("u.id IN (SELECT rowid FROM user_search WHERE user_search MATCH ?{})", args.len()));
        } else {
            // Shorter than a trigram: every user is read.
            let escaped = q.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
            args.push(format!("%{escaped}%"));
            filters.push(format!("(u.name LIKE ?{n} ESCAPE '\\' OR u.note LIKE ?{n} ESCAPE '\\')", n = args.len()));
        }
    }
    if let Some(status) = query.status.as_deref().filter(|s| !s.is_empty()) {
        if !["active", "disabled", "expired", "over_quota", "not_started"].contains(&status) {
            return Err(Error::invalid(
                "bad_status",
                "status must be active, disabled, expired, over_quota or not_started",
            ));
        }
        args.push(status.to_owned());
        filters.push(format!("u.status = ?{}", args.len()));
    }
    if let Some(group) = query.group.as_deref().filter(|g| !g.is_empty()) {
        args.push(group.to_owned());
        filters.push(format!(
            "u.id IN (SELECT ug.user_id FROM user_groups ug JOIN groups g ON g.id = ug.group_id WHERE g.name = ?{})",
            args.len()
        ));
    }
    if let Some(admin) = query.admin {
        args.push(admin.to_string());
        filters.push(format!("u.admin_id = CAST(?{} AS INTEGER)", args.len()));
    }
    let filter = if filters.is_empty() { String::new() } else { format!("WHERE {}", filters.join(" AND ")) };
    let total: u64 =
        conn.query_row(&format!("SELECT count(*) FROM users u {filter}"), params_from_iter(&args), |row| row.get(0))?;
    let sql = format!(
        "SELECT {VIEW_COLUMNS} FROM users u {filter} ORDER BY u.id LIMIT {per_page} OFFSET {}",
        (page - 1).saturating_mul(per_page)
    );
    let users = conn.prepare(&sql)?.query_map(params_from_iter(&args), view_of)?.collect::<Result<_, _>>()?;
    Ok(UserPage { total, page, per_page, users })
}

/// Tells of a change to a user by `actor`: what changed (field names, never a value that is a
/// secret).
pub(super) fn changed_event(
    conn: &Connection,
    id: UserId,
    fields: &[&str],
    actor: &str,
    now: u64,
) -> Result<(), Error> {
    events::user_event_of(conn, now, "user.changed", id, serde_json::json!({ "fields": fields, "by": actor }))
}

/// Users the nodes refused anything, those refused most first (at most `limit`): name, and
/// devices, BitTorrent and port 25 refused, all told.
pub(crate) fn refusals(conn: &Connection, limit: u64) -> Result<Vec<(String, u64, u64, u64)>, Error> {
    let rows = conn
        .prepare_cached(
            "SELECT name, refused_devices, refused_torrent, refused_smtp FROM users
             WHERE refused_devices + refused_torrent + refused_smtp > 0
             ORDER BY refused_devices + refused_torrent + refused_smtp DESC, name LIMIT ?1",
        )?
        .query_map([limit], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Raises the user's kick count: every node closes the user's open connections at its next
/// pull (its apps connect again if they may).
pub(crate) fn kick(conn: &Connection, changes: &mut Changes, actor: &str, id: UserId, now: u64) -> Result<(), Error> {
    let user = get(conn, id)?;
    conn.execute("UPDATE users SET kick = (kick + 1) % 4294967296 WHERE id = ?1", [id])?;
    changes.creds_of_user(conn, id)?;
    audit(conn, now, actor, "user.kick", &format!("user {id} ({})", user.name), "")?;
    Ok(())
}

/// Extends a user's expiry by `days` (from now when already expired or never set).
pub(crate) fn extend(
    conn: &Connection,
    changes: &mut Changes,
    actor: &str,
    id: UserId,
    days: u64,
    now: u64,
) -> Result<(), Error> {
    if days == 0 || days > 36_500 {
        return Err(Error::invalid("bad_days", "days must be between 1 and 36500"));
    }
    let user = get(conn, id)?;
    if user.duration_days != 0 && user.started_at == 0 {
        // Not started yet: the extension lengthens the duration it will get.
        conn.execute("UPDATE users SET duration_secs = duration_secs + ?2 WHERE id = ?1", params![id, days * 86_400])?;
    } else {
        let from = if user.expires_at > now { user.expires_at } else { now };
        conn.execute("UPDATE users SET expires_at = ?2 WHERE id = ?1", params![id, from + days * 86_400])?;
    }
    conn.execute("UPDATE users SET updated = ?2 WHERE id = ?1", params![id, now])?;
    changed_event(conn, id, &["expiry"], actor, now)?;
    changes.user(conn, id)?;
    audit(conn, now, actor, "user.extend", &format!("user {id} ({})", user.name), &format!("{days} days"))?;
    Ok(())
}

/// Sets a user's used traffic back to zero.
pub(crate) fn reset_traffic(
    conn: &Connection,
    changes: &mut Changes,
    actor: &str,
    id: UserId,
    now: u64,
) -> Result<(), Error> {
    let user = get(conn, id)?;
    // What it used counts against its reseller's traffic allowance.
    spend(conn, id)?;
    conn.execute(
        "UPDATE users SET used_up = 0, used_down = 0, raw_up = 0, raw_down = 0, updated = ?2 WHERE id = ?1",
        params![id, now],
    )?;
    changed_event(conn, id, &["traffic"], actor, now)?;
    changes.user(conn, id)?;
    audit(conn, now, actor, "user.reset_traffic", &format!("user {id} ({})", user.name), "")?;
    Ok(())
}

/// Gives a user a new subscription link (and a new credential, so an old profile stops
/// working too); the old link is deleted from the edge.
pub(crate) fn rotate(
    conn: &Connection,
    vault: &Vault,
    changes: &mut Changes,
    actor: &str,
    id: UserId,
    now: u64,
) -> Result<SubToken, Error> {
    let user = get(conn, id)?;
    let old: Vec<u8> = conn.query_row("SELECT token_hash FROM users WHERE id = ?1", [id], |row| row.get(0))?;
    let old: [u8; 32] =
        old.try_into().map_err(|_| Error::Internal("a stored token hash has the wrong length".into()))?;
    let token = SubToken::generate(&mut OsRng);
    let credential = secrets::random_credential();
    conn.execute(
        "UPDATE users SET token_hash = ?2, token_enc = ?3, credential_enc = ?4, credential_hash = ?5, updated = ?6
         WHERE id = ?1",
        params![
            id,
            token.hash(),
            vault.seal(Purpose::Token, token.as_bytes()),
            vault.seal(Purpose::Credential, credential.as_bytes()),
            sha256(credential.as_bytes()),
            now
        ],
    )?;
    changes.gone(hearth_shared::wire::stream::snapshot(&old));
    changes.user(conn, id)?;
    audit(conn, now, actor, "user.rotate_link", &format!("user {id} ({})", user.name), "")?;
    changed_event(conn, id, &["link"], actor, now)?;
    Ok(token)
}

/// Deletes a user: its link stops, its nodes drop it.
pub(crate) fn delete(conn: &Connection, changes: &mut Changes, actor: &str, id: UserId, now: u64) -> Result<(), Error> {
    let user = get(conn, id)?;
    let hash: Vec<u8> =
        conn.prepare_cached("SELECT token_hash FROM users WHERE id = ?1")?.query_row([id], |row| row.get(0))?;
    let hash: [u8; 32] =
        hash.try_into().map_err(|_| Error::Internal("a stored token hash has the wrong length".into()))?;
    // Its nodes drop its entry (read before its groups go with it).
    changes.creds_of_user(conn, id)?;
    crate::store::aliases::delete_streams_of_user(conn, id, changes)?;
    let aliased = !crate::store::aliases::paths_of_user(conn, id)?.is_empty();
    // What it used stays counted against its reseller's traffic allowance.
    spend(conn, id)?;
    conn.prepare_cached("DELETE FROM users WHERE id = ?1")?.execute([id])?;
    changes.gone(hearth_shared::wire::stream::snapshot(&hash));
    if aliased {
        changes.edge_settings();
    }
    audit(conn, now, actor, "user.delete", &format!("user {id} ({})", user.name), "")?;
    events::user_event(conn, now, "user.deleted", id, &user.name, serde_json::json!({ "by": actor }))?;
    Ok(())
}

/// A user's subscription token (for its link).
pub(crate) fn token(conn: &Connection, vault: &Vault, id: UserId) -> Result<SubToken, Error> {
    let sealed: Vec<u8> = conn
        .query_row("SELECT token_enc FROM users WHERE id = ?1", [id], |row| row.get(0))
        .optional()?
        .ok_or(Error::NotFound("user"))?;
    let bytes = vault.open(Purpose::Token, &sealed)?;
    Ok(SubToken::from_bytes(
        bytes.as_slice().try_into().map_err(|_| Error::Internal("a stored token has the wrong length".into()))?,
    ))
}

/// Counts by status, for the overview and metrics.
pub(crate) fn counts(conn: &Connection) -> Result<Vec<(String, u64)>, Error> {
    let mut query = conn.prepare_cached("SELECT status, count(*) FROM users GROUP BY status ORDER BY status")?;
    let rows = query.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Puts every user's id in `into`.
pub(crate) fn ids(conn: &Connection, into: &mut std::collections::BTreeSet<UserId>) -> Result<(), Error> {
    let mut query = conn.prepare("SELECT id FROM users")?;
    for user in query.query_map([], |row| row.get(0))? {
        into.insert(user?);
    }
    Ok(())
}

/// Every user by the hash of its link's token (what names its snapshot's stream).
pub(crate) fn by_token_hash(conn: &Connection) -> Result<std::collections::BTreeMap<Digest, UserId>, Error> {
    Ok(conn
        .prepare("SELECT token_hash, id FROM users")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?)
}

/// A user's status at `now`, from its row.
pub(crate) fn status_of(
    enabled: bool,
    expires_at: u64,
    quota: u64,
    used: u64,
    duration: u64,
    started_at: u64,
    now: u64,
) -> Status {
    if !enabled {
        Status::Disabled
    } else if expires_at != 0 && now >= expires_at {
        Status::Expired
    } else if quota != 0 && used >= quota {
        Status::OverQuota
    } else if duration != 0 && started_at == 0 {
        Status::NotStarted
    } else {
        Status::Active
    }
}

/// The name of a status in the database and the API.
pub(crate) fn status_name(status: Status) -> &'static str {
    match status {
        Status::Active => "active",
        Status::Disabled => "disabled",
        Status::Expired => "expired",
        Status::OverQuota => "over_quota",
        Status::NotStarted => "not_started",
    }
}

/// Counts what `user` used so far against its reseller's traffic allowance (before its usage
/// is reset or it is deleted); nothing for the owner's users.
pub(crate) fn spend(conn: &Connection, user: u64) -> Result<(), Error> {
    conn.prepare_cached(
        "UPDATE admins SET spent = spent + (SELECT used_up + used_down FROM users WHERE id = ?1)
         WHERE id = (SELECT admin_id FROM users WHERE id = ?1)",
    )?
    .execute([user])?;
    Ok(())
}
