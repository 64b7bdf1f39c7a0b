//! Users: create (one or many), change, list, and everything that republishes them.

use hearth_shared::sha256;
use hearth_shared::wire::{ResetStrategy, Status, SubToken, UserId};
use rand_core::OsRng;
use rusqlite::{Connection, OptionalExtension as _, params, params_from_iter};
use serde::{Deserialize, Serialize};

use super::changes::Changes;
use crate::error::Error;
use crate::secrets::Vault;
use crate::secrets::{self, Purpose};
use crate::store::audit_log::audit;
use crate::store::events;

/// The most users one bulk call creates.
pub(crate) const MAX_BULK: usize = 10_000;
/// The longest name of anything (a user, node, group, token, the owner's login), in
/// characters.
pub(crate) const MAX_NAME: usize = 64;
/// The longest note on a user, in bytes.
pub(crate) const MAX_NOTE: usize = 1000;

/// A user's settings as the API and CLI give them; every field is optional on a change.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UserInput {
    /// The name shown in the panel and in apps (1 to 64 characters).
    pub(crate) name: Option<String>,
    /// Traffic quota in bytes, up and down together (0: unlimited).
    pub(crate) quota: Option<u64>,
    /// Expiry as Unix seconds (0: never). Conflicts with `days`.
    pub(crate) expires_at: Option<u64>,
    /// Valid for this many days from now, or from first use with `start_on_first_use`.
    pub(crate) days: Option<u64>,
    /// Start the `days` at the first connection instead of now.
    pub(crate) start_on_first_use: Option<bool>,
    /// When used traffic goes back to zero: none, daily, weekly, monthly, rolling30.
    pub(crate) reset: Option<String>,
    /// A note for the operator.
    pub(crate) note: Option<String>,
    /// The groups (by name) whose nodes the user gets; new users default to `default`.
    pub(crate) groups: Option<Vec<String>>,
    /// Whether the user may connect.
    pub(crate) enabled: Option<bool>,
    /// Speed limit in Mbit/s each way: a number (0: none) or null (its groups' default, also
    /// for a side left out); absent: unchanged (a new user takes its groups' default).
    pub(crate) speed_limit: Option<SpeedInput>,
    /// When the quota is used up: `cut` (the user can no longer connect), `slow` (slowed
    /// to `slow_speed`) or `group` (what its groups say; the default).
    pub(crate) on_quota: Option<String>,
    /// The rate a user whose quota is used up is slowed to, in Mbit/s.
    pub(crate) slow_speed: Option<Mbps>,
    /// How many devices may be connected at once over all nodes: a number (0: no limit) or
    /// `"group"` (its groups' default; what a new user takes).
    pub(crate) device_limit: Option<DeviceLimit>,
    /// The rule set (by name) the user's traffic is routed by on every node (empty: its
    /// groups'; the owner's alone to set).
    pub(crate) rule_set: Option<String>,
    /// Whose names a new user's must differ from: a reseller's own (their id), or everyone
    /// else's (0). Set by control for a reseller's new users, never from a request.
    #[serde(skip)]
    pub(crate) tenant: i64,
}

/// A user's own device limit, or its groups'.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeviceLimit {
    /// Its groups' default.
    Group,
    /// Its own: at most this many (0: no limit).
    Own(u32),
}

/// The most devices a limit names (a number above is surely a mistake).
pub(crate) const MAX_DEVICES: u32 = 1000;

impl DeviceLimit {
    /// As stored: `NULL` for the groups'.
    fn stored(self) -> Option<u32> {
        match self {
            DeviceLimit::Group => None,
            DeviceLimit::Own(n) => Some(n),
        }
    }
}

impl<'de> Deserialize<'de> for DeviceLimit {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<DeviceLimit, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Number(u64),
            Word(String),
        }
        match Given::deserialize(deserializer)? {
            Given::Number(n) if n <= u64::from(MAX_DEVICES) => Ok(DeviceLimit::Own(n as u32)),
            Given::Word(word) if word == "group" => Ok(DeviceLimit::Group),
            _ => Err(serde::de::Error::custom(format!(
                "device_limit is a number of devices from 0 (no limit) to {MAX_DEVICES}, or \"group\""
            ))),
        }
    }
}

/// A user's own speed limit, Mbit/s each way; `None`: its groups' default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpeedInput {
    #[serde(default)]
    pub(crate) up: Option<Mbps>,
    #[serde(default)]
    pub(crate) down: Option<Mbps>,
}

/// A rate as the API gives and shows it, in Mbit/s (a number, fractions allowed), kept in
/// kbit/s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Mbps(pub(crate) u64);

/// The fastest rate anything is limited to: 100 Gbit/s.
const MAX_KBPS: u64 = 100_000_000;

impl Mbps {
    /// From Mbit/s; refuses what is not a rate from 0 to 100,000 Mbit/s.
    pub(crate) fn parse(mbps: f64) -> Result<Mbps, String> {
        if !mbps.is_finite() || !(0.0..=(MAX_KBPS / 1000) as f64).contains(&mbps) {
            return Err(format!("a speed is a number of Mbit/s from 0 to {}", MAX_KBPS / 1000));
        }
        let kbps = (mbps * 1000.0).round() as u64;
        if mbps > 0.0 && kbps == 0 {
            return Err("a speed is at least 0.001 Mbit/s (or 0 for none)".into());
        }
        Ok(Mbps(kbps))
    }
}

impl Serialize for Mbps {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.0 as f64 / 1000.0)
    }
}

impl<'de> Deserialize<'de> for Mbps {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Mbps, D::Error> {
        Mbps::parse(f64::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// `on_quota` as stored: `None` for the groups' choice.
pub(crate) fn parse_on_quota(value: &str) -> Result<Option<&'static str>, Error> {
    match value {
        "group" => Ok(None),
        "cut" => Ok(Some("cut")),
        "slow" => Ok(Some("slow")),
        _ => Err(Error::invalid("bad_on_quota", "on_quota must be cut, slow or group")),
    }
}

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
            up: row.get::<_, Option<u64>>(16)?.map(Mbps),
            down: row.get::<_, Option<u64>>(17)?.map(Mbps),
        },
        on_quota: row.get::<_, Option<String>>(18)?.unwrap_or_else(|| "group".into()),
        slow_speed: Mbps(row.get(19)?),
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

/// Checks a user's name.
pub(crate) fn check_name(name: &str, what: &str) -> Result<String, Error> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(Error::invalid(
            "bad_name",
            format!("a {what} name must be 1 to {MAX_NAME} characters, without control characters"),
        ));
    }
    Ok(name.to_owned())
}

pub(super) fn check_note(note: &str) -> Result<(), Error> {
    if note.len() > MAX_NOTE {
        return Err(Error::invalid("bad_note", format!("a note must be at most {MAX_NOTE} bytes")));
    }
    Ok(())
}

/// Group ids of names; refuses unknown names.
pub(crate) fn group_ids(conn: &Connection, names: &[String]) -> Result<Vec<i64>, Error> {
    let mut query = conn.prepare_cached("SELECT id FROM groups WHERE name = ?1")?;
    let mut ids = Vec::with_capacity(names.len());
    for name in names {
        match query.query_row([name], |row| row.get(0)).optional()? {
            Some(id) => ids.push(id),
            None => return Err(Error::invalid("unknown_group", format!("there is no group named {name:?}"))),
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

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

/// A slowed user (or group) needs a rate to be slowed to.
pub(crate) fn check_slow(on_quota: Option<&str>, slow: Mbps) -> Result<(), Error> {
    if on_quota == Some("slow") && slow.0 == 0 {
        return Err(Error::invalid("bad_slow_speed", "on_quota slow needs a slow_speed above 0"));
    }
    Ok(())
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

/// Expiry and start-on-first-use duration from `expires_at` / `days` / `start_on_first_use`.
pub(super) fn expiry(input: &UserInput, now: u64) -> Result<(u64, u64), Error> {
    if input.quota.is_some_and(|q| q > i64::MAX as u64) {
        return Err(Error::invalid("bad_quota", "quota is too large"));
    }
    match (input.expires_at, input.days) {
        (Some(_), Some(_)) => Err(Error::invalid("bad_expiry", "give expires_at or days, not both")),
        (_, Some(days)) if days == 0 || days > 36_500 => {
            Err(Error::invalid("bad_expiry", "days must be between 1 and 36500"))
        }
        (Some(at), None) if at > 0 && at > now + 36_500 * 86_400 => {
            Err(Error::invalid("bad_expiry", "expires_at is too far away"))
        }
        (Some(_), None) if input.start_on_first_use == Some(true) => {
            Err(Error::invalid("bad_expiry", "start_on_first_use needs days, not expires_at"))
        }
        (Some(at), None) => Ok((at, 0)),
        (None, Some(days)) if input.start_on_first_use == Some(true) => Ok((0, days * 86_400)),
        (None, Some(days)) => Ok((now + days * 86_400, 0)),
        (None, None) => Ok((0, 0)),
    }
}

/// What creating a user hands back once: the user and its subscription link's token.
pub(crate) struct Created {
    pub(crate) id: UserId,
    pub(crate) token: SubToken,
}

fn insert(conn: &Connection, vault: &Vault, name: &str, new: &NewUser, now: u64) -> Result<Created, Error> {
    insert_with(conn, vault, name, new, SubToken::generate(&mut OsRng), &secrets::random_credential(), now)
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
    let created = insert_with(conn, vault, &name, &new, token, credential, now)?;
    conn.prepare_cached("UPDATE users SET imported_from = ?2 WHERE id = ?1")?
        .execute(params![created.id, imported_from])?;
    Ok(created.id)
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

fn insert_with(
    conn: &Connection,
    vault: &Vault,
    name: &str,
    new: &NewUser,
    token: SubToken,
    credential: &str,
    now: u64,
) -> Result<Created, Error> {
    if let Some(existing) = named_like(conn, name, None, new.tenant)? {
        return Err(Error::conflict("conflict", format!("a user named {existing:?} already exists")));
    }
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
        new.speed.up.map(|m| m.0),
        new.speed.down.map(|m| m.0),
        new.on_quota,
        new.slow.0,
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
    let mut created = Vec::with_capacity(names.len());
    for name in names {
        let user = insert(conn, vault, &name, &new, now)?;
        changes.user(conn, user.id)?;
        created.push((name, user));
    }
    audit(conn, now, actor, "user.bulk_create", &format!("{} users", created.len()), "")?;
    Ok(created)
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

/// The name of a reset strategy in the database and the API.
pub(crate) fn reset_name(reset: ResetStrategy) -> &'static str {
    match reset {
        ResetStrategy::Never => "none",
        ResetStrategy::Daily => "daily",
        ResetStrategy::Weekly => "weekly",
        ResetStrategy::Monthly => "monthly",
        ResetStrategy::Rolling30 => "rolling30",
    }
}

/// Parses a reset strategy's name.
pub(crate) fn parse_reset(name: &str) -> Option<ResetStrategy> {
    Some(match name {
        "none" => ResetStrategy::Never,
        "daily" => ResetStrategy::Daily,
        "weekly" => ResetStrategy::Weekly,
        "monthly" => ResetStrategy::Monthly,
        "rolling30" => ResetStrategy::Rolling30,
        _ => return None,
    })
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
