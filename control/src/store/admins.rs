//! Admin accounts besides the owner (see `admins.sql`): their roles, a reseller's limits and
//! the users a reseller may reach.
//!
//! A reseller sells traffic and time, so the owner grants them an allowance of each:
//! - users: how many at once;
//! - traffic: the bytes their users may use in all, resets counted. What a reseller has given
//!   is what their users may still use in this period (their quotas) plus what they used
//!   before a reset or a deletion (`spent`): resetting a user's usage, by hand or by its
//!   monthly reset, and deleting and making a user again all draw on it. A user without a
//!   quota is refused to a reseller with a traffic allowance;
//! - slowed speed: a user of theirs over quota may be slowed (instead of cut off) at most to
//!   this rate (with a traffic allowance and no rate granted: cut off only);
//! - time: how far ahead a user's expiry (or days from first use) may reach; no end date is
//!   refused to a reseller with a time allowance;
//! - groups: which ones their users may be in.
//!
//! They hold at every change made through them: a change that would take them past one is
//! refused and nothing of it is kept (the check runs in the change's own transaction, after
//! it). A change that does not grow what they use is never refused, so a reseller the owner
//! cut back can still disable, shorten or delete. A periodic reset the traffic allowance has
//! no room for is skipped (the user stays used up until the reseller frees some or the owner
//! grants more), and the audit log says so.

use hearth_shared::Rate;
use rusqlite::{Connection, OptionalExtension as _, params};
use serde::{Deserialize, Serialize};

use super::groups::group_ids;
use super::users::{MAX_NAME, Mbps, check_name};
use crate::error::Error;
use crate::store::audit_log::{FieldChange, audit, audit_edit};

/// An admin's role. The owner (created by the setup link) holds every right; the others are
/// accounts the owner adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Role {
    /// The owner: everything, admin accounts too.
    Owner,
    /// Everything but admin accounts.
    Admin,
    /// Users only: look at everything, change users.
    Operator,
    /// Look only.
    ReadOnly,
    /// Only the users they created, within the limits the owner set.
    Reseller,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::ReadOnly => "read-only",
            Role::Reseller => "reseller",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Role> {
        Some(match name {
            "admin" => Role::Admin,
            "operator" => Role::Operator,
            "read-only" => Role::ReadOnly,
            "reseller" => Role::Reseller,
            _ => return None,
        })
    }
}

/// The most admin accounts (besides the owner).
pub(crate) const MAX_ADMINS: u64 = 1000;

/// An admin account as listed (never its password hash).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct AdminView {
    pub(crate) id: i64,
    pub(crate) login: String,
    pub(crate) role: Role,
    /// A reseller's limits (`None`: no limit): users; bytes given in all, resets counted; the
    /// rate users over quota may be slowed to; days ahead an expiry may reach; groups.
    pub(crate) max_users: Option<u64>,
    pub(crate) max_traffic: Option<u64>,
    pub(crate) max_slow_speed: Option<Mbps>,
    pub(crate) max_days: Option<u64>,
    pub(crate) groups: Vec<String>,
    /// Users they created; the quota those hold now, and the bytes used before resets and
    /// deletions (`allotted + spent` is what counts against `max_traffic`).
    pub(crate) users: u64,
    pub(crate) allotted: u64,
    pub(crate) spent: u64,
    /// Their passkeys.
    pub(crate) passkeys: u64,
    pub(crate) created: u64,
}

/// A new admin, or a change to one (fields left out stay as they are; a new one needs a login,
/// a role and a password). `max_users` and
/// `max_traffic` take `null` for no limit, so a change tells "no limit" from "unchanged" by
/// the field being there.
/// No `Debug`: it may hold a password.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdminInput {
    pub(crate) login: Option<String>,
    pub(crate) role: Option<Role>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) max_users: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) max_traffic: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) max_slow_speed: Option<Option<Mbps>>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) max_days: Option<Option<u64>>,
    pub(crate) groups: Option<Vec<String>>,
    /// A new password (hashed by the caller before the store sees the change).
    pub(crate) password: Option<String>,
    /// End their API tokens too (with their sessions): for a password reset after a leak.
    #[serde(default)]
    pub(crate) end_tokens: bool,
}

/// A field that is there (`Some`, its value possibly `null`), as opposed to left out (`None`).
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// What a reseller uses, against their limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Allotment {
    users: u64,
    /// Bytes given: their users' quotas now and what was used before resets and deletions.
    traffic: u64,
    /// Users of theirs with no quota (unlimited).
    unlimited: u64,
    /// kbit/s their users' own slowed rates go past the rate granted, summed.
    too_fast: u64,
    /// Users of theirs with no end date (nor days from first use).
    endless: u64,
    /// Seconds their users' expiries (and days from first use) reach past the time granted,
    /// summed.
    too_long: u64,
    /// Memberships of their users in groups they may not use.
    outside: u64,
}

/// Days, in seconds, a time allowance may grant: 100 years.
const MAX_DAYS: u64 = 36_500;

const VIEW: &str = "SELECT a.id, a.login, a.role, a.max_users, a.max_traffic, a.created,
        (SELECT count(*) FROM users u WHERE u.admin_id = a.id),
        (SELECT coalesce(sum(u.quota), 0) FROM users u WHERE u.admin_id = a.id),
        (SELECT coalesce(group_concat(g.name, char(10)), '') FROM
            (SELECT g.name FROM admin_groups ag JOIN groups g ON g.id = ag.group_id
             WHERE ag.admin_id = a.id ORDER BY g.name) g),
        (SELECT count(*) FROM passkeys p WHERE p.admin_id = a.id),
        a.max_slow_kbps, a.max_days, a.spent
    FROM admins a";

fn view_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<AdminView> {
    let role: String = row.get(2)?;
    let groups: String = row.get(8)?;
    Ok(AdminView {
        id: row.get(0)?,
        login: row.get(1)?,
        role: Role::parse(&role).unwrap_or(Role::ReadOnly),
        max_users: row.get(3)?,
        max_traffic: row.get(4)?,
        created: row.get(5)?,
        users: row.get(6)?,
        allotted: row.get(7)?,
        groups: groups.split('\n').filter(|g| !g.is_empty()).map(str::to_owned).collect(),
        passkeys: row.get(9)?,
        max_slow_speed: row.get::<_, Option<u64>>(10)?.map(Mbps::from_stored),
        max_days: row.get(11)?,
        spent: row.get(12)?,
    })
}

/// Every admin account, by login.
pub(crate) fn list(conn: &Connection) -> Result<Vec<AdminView>, Error> {
    let mut query = conn.prepare_cached(&format!("{VIEW} ORDER BY a.login"))?;
    let rows = query.query_map([], view_of)?.collect::<Result<_, _>>()?;
    Ok(rows)
}

pub(crate) fn get(conn: &Connection, id: i64) -> Result<AdminView, Error> {
    conn.prepare_cached(&format!("{VIEW} WHERE a.id = ?1"))?
        .query_row([id], view_of)
        .optional()?
        .ok_or(Error::NotFound("admin"))
}

/// An admin's login (an error when there is no such admin).
pub(crate) fn login(conn: &Connection, id: i64) -> Result<String, Error> {
    Ok(conn.query_row("SELECT login FROM admins WHERE id = ?1", [id], |row| row.get(0))?)
}

/// An admin's password hash (an error when there is no such admin).
pub(crate) fn password_hash(conn: &Connection, id: i64) -> Result<String, Error> {
    Ok(conn.query_row("SELECT password_hash FROM admins WHERE id = ?1", [id], |row| row.get(0))?)
}

/// Sets an admin's password hash (nothing when there is no such admin).
pub(crate) fn set_password_hash(conn: &Connection, id: i64, hash: &str) -> Result<(), Error> {
    conn.execute("UPDATE admins SET password_hash = ?2 WHERE id = ?1", params![id, hash])?;
    Ok(())
}

/// An admin's id by login (any case).
pub(crate) fn id_of(conn: &Connection, login: &str) -> Result<i64, Error> {
    conn.query_row("SELECT id FROM admins WHERE login = ?1", [login.trim()], |row| row.get(0))
        .optional()?
        .ok_or(Error::NotFound("admin"))
}

/// What sign-in needs of an admin: id, password hash, role.
pub(crate) fn for_sign_in(conn: &Connection, login: &str) -> Result<Option<(i64, String, Role)>, Error> {
    let row: Option<(i64, String, String)> = conn
        .prepare_cached("SELECT id, password_hash, role FROM admins WHERE login = ?1")?
        .query_row([login.trim()], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    Ok(row.and_then(|(id, hash, role)| Role::parse(&role).map(|role| (id, hash, role))))
}

/// Creates an admin with a password hash made by the caller.
pub(crate) fn create(
    conn: &Connection,
    actor: &str,
    input: &AdminInput,
    password_hash: &str,
    now: u64,
) -> Result<AdminView, Error> {
    let login = check_name(input.login.as_deref().unwrap_or_default(), "login")?;
    let role = input
        .role
        .filter(|&role| role != Role::Owner)
        .ok_or_else(|| Error::invalid("bad_role", "give a role: admin, operator, read-only or reseller"))?;
    let count: u64 = conn.query_row("SELECT count(*) FROM admins", [], |row| row.get(0))?;
    if count >= MAX_ADMINS {
        return Err(Error::invalid("too_many_admins", format!("there can be at most {MAX_ADMINS} admins")));
    }
    let owner: Option<String> = conn.query_row("SELECT login FROM owner", [], |row| row.get(0)).optional()?;
    let taken: bool =
        conn.query_row("SELECT count(*) FROM admins WHERE login = ?1", [&login], |row| row.get::<_, i64>(0))? > 0;
    if taken || owner.is_some_and(|owner| owner.eq_ignore_ascii_case(&login)) {
        return Err(Error::conflict("conflict", format!("the login {login:?} is taken")));
    }
    conn.execute(
        "INSERT INTO admins (login, password_hash, role, created) VALUES (?1, ?2, ?3, ?4)",
        params![login, password_hash, role.as_str(), now],
    )?;
    let id = conn.last_insert_rowid();
    set_limits(conn, id, role, input)?;
    audit(conn, now, actor, "admin.create", &format!("admin {login}"), role.as_str())?;
    get(conn, id)
}

/// Applies a change's role-dependent fields: a reseller's limits and groups (others have none).
fn set_limits(conn: &Connection, id: i64, role: Role, input: &AdminInput) -> Result<(), Error> {
    if role != Role::Reseller {
        if input.max_users.flatten().is_some()
            || input.max_traffic.flatten().is_some()
            || input.max_slow_speed.flatten().is_some()
            || input.max_days.flatten().is_some()
            || input.groups.is_some()
        {
            return Err(Error::invalid("not_a_reseller", "only a reseller has limits and groups"));
        }
        conn.execute(
            "UPDATE admins SET max_users = NULL, max_traffic = NULL, max_slow_kbps = NULL, max_days = NULL WHERE id = ?1",
            [id],
        )?;
        conn.execute("DELETE FROM admin_groups WHERE admin_id = ?1", [id])?;
        return Ok(());
    }
    for (field, max) in [("max_users", input.max_users), ("max_traffic", input.max_traffic)] {
        if max.flatten().is_some_and(|max| max > i64::MAX as u64) {
            return Err(Error::invalid("bad_limit", format!("{field} must be at most {}", i64::MAX)));
        }
    }
    if input.max_days.flatten().is_some_and(|days| days > MAX_DAYS) {
        return Err(Error::invalid("bad_limit", format!("max_days must be at most {MAX_DAYS}")));
    }
    if let Some(max) = input.max_slow_speed {
        conn.execute("UPDATE admins SET max_slow_kbps = ?2 WHERE id = ?1", params![id, max.map(Mbps::stored)])?;
    }
    if let Some(max) = input.max_days {
        conn.execute("UPDATE admins SET max_days = ?2 WHERE id = ?1", params![id, max])?;
    }
    if let Some(max) = input.max_users {
        conn.execute("UPDATE admins SET max_users = ?2 WHERE id = ?1", params![id, max])?;
    }
    if let Some(max) = input.max_traffic {
        conn.execute("UPDATE admins SET max_traffic = ?2 WHERE id = ?1", params![id, max])?;
    }
    if let Some(groups) = &input.groups {
        if groups.len() > 100 || groups.iter().any(|g| g.chars().count() > MAX_NAME) {
            return Err(Error::invalid("bad_groups", "give at most 100 group names"));
        }
        let ids = group_ids(conn, groups)?;
        conn.execute("DELETE FROM admin_groups WHERE admin_id = ?1", [id])?;
        for group in ids {
            conn.execute("INSERT INTO admin_groups (admin_id, group_id) VALUES (?1, ?2)", params![id, group])?;
        }
    }
    Ok(())
}

/// Changes an admin's role, limits or password (a new hash made by the caller). A new role
/// or password ends their sessions; their tokens keep working within the new role unless the
/// change ends them too (`end_tokens`, which also ends their sessions).
pub(crate) fn update(
    conn: &Connection,
    actor: &str,
    id: i64,
    input: &AdminInput,
    password_hash: Option<&str>,
    now: u64,
) -> Result<AdminView, Error> {
    let before = get(conn, id)?;
    if input.login.is_some() {
        return Err(Error::invalid("bad_login", "a login cannot be changed; add a new admin instead"));
    }
    let role = input.role.unwrap_or(before.role);
    if role == Role::Owner {
        return Err(Error::invalid("bad_role", "there is one owner; give admin, operator, read-only or reseller"));
    }
    conn.execute("UPDATE admins SET role = ?2 WHERE id = ?1", params![id, role.as_str()])?;
    set_limits(conn, id, role, input)?;
    let mut changed = Vec::new();
    if role != before.role {
        changed.push(FieldChange::shown("role", before.role.as_str().into(), role.as_str().into()));
    }
    if let Some(hash) = password_hash {
        conn.execute("UPDATE admins SET password_hash = ?2 WHERE id = ?1", params![id, hash])?;
        changed.push(FieldChange::hidden("password"));
    }
    if role != before.role || password_hash.is_some() || input.end_tokens {
        conn.execute("DELETE FROM sessions WHERE admin_id = ?1", [id])?;
    }
    if input.end_tokens {
        let ended = conn.execute("DELETE FROM api_tokens WHERE admin_id = ?1", [id])?;
        if ended > 0 {
            changed.push(FieldChange::shown("api_tokens", ended.into(), 0.into()));
        }
    }
    audit_edit(conn, now, actor, "admin.update", &format!("admin {}", before.login), &changed)?;
    get(conn, id)
}

/// Removes an admin: their sessions and tokens end; the users they created stay, the owner's.
pub(crate) fn remove(conn: &Connection, actor: &str, id: i64, now: u64) -> Result<(), Error> {
    let admin = get(conn, id)?;
    conn.execute("DELETE FROM admins WHERE id = ?1", [id])?;
    audit(conn, now, actor, "admin.remove", &format!("admin {}", admin.login), &format!("{} users kept", admin.users))
}

/// Refuses (as not found, so nothing is told of others' users) unless `user` was created by
/// `reseller`.
pub(crate) fn check_owns(conn: &Connection, reseller: i64, user: u64) -> Result<(), Error> {
    let theirs = conn
        .prepare_cached("SELECT 1 FROM users WHERE id = ?1 AND admin_id = ?2")?
        .query_row(params![user, reseller], |_| Ok(()))
        .optional()?;
    theirs.ok_or(Error::NotFound("user"))
}

/// Marks a user as created by `admin`.
pub(crate) fn set_creator(conn: &Connection, admin: i64, user: u64) -> Result<(), Error> {
    conn.prepare_cached("UPDATE users SET admin_id = ?1 WHERE id = ?2")?.execute(params![admin, user])?;
    Ok(())
}

/// Whether the traffic allowance of `user`'s reseller has room for resetting its usage (the
/// owner's users: always).
pub(crate) fn room_to_reset(conn: &Connection, user: u64) -> Result<bool, Error> {
    let row: Option<(i64, Option<u64>, u64)> = conn
        .prepare_cached("SELECT a.id, a.max_traffic, u.used_up + u.used_down FROM users u JOIN admins a ON a.id = u.admin_id WHERE u.id = ?1")?
        .query_row([user], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    let Some((admin, Some(max), used)) = row else { return Ok(true) };
    let given = allotment(conn, admin, 0)?.traffic;
    Ok(given.saturating_add(used) <= max)
}

/// The names of the groups a reseller may use.
pub(crate) fn groups_of(conn: &Connection, admin: i64) -> Result<Vec<String>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT g.name FROM admin_groups ag JOIN groups g ON g.id = ag.group_id WHERE ag.admin_id = ?1 ORDER BY g.name",
    )?;
    let names = query.query_map([admin], |row| row.get(0))?.collect::<Result<_, _>>()?;
    Ok(names)
}

/// What a reseller uses now (expiries measured from `now`).
pub(crate) fn allotment(conn: &Connection, admin: i64, now: u64) -> Result<Allotment, Error> {
    let (spent, max_traffic, max_slow, max_days): (u64, Option<u64>, Option<u64>, Option<u64>) = conn
        .prepare_cached("SELECT spent, max_traffic, max_slow_kbps, max_days FROM admins WHERE id = ?1")?
        .query_row([admin], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?;
    // With a traffic allowance and no slowed rate granted, users over quota are cut off.
    let slow_ceiling = max_slow.or(max_traffic.map(|_| 0)).map(|kbps| kbps as i64).unwrap_or(i64::MAX);
    let horizon = max_days.map(|days| days * 86_400);
    let reach = horizon.map(|secs| (now + secs) as i64).unwrap_or(i64::MAX);
    let (users, quotas, unlimited, too_fast, endless, too_long): (u64, u64, u64, u64, u64, u64) = conn
        .prepare_cached(
            "SELECT count(*), coalesce(sum(quota), 0), coalesce(sum(quota = 0), 0),
                    coalesce(sum(CASE WHEN on_quota = 'slow' AND slow_kbps > ?2 THEN slow_kbps - ?2 ELSE 0 END), 0),
                    coalesce(sum(expires_at = 0 AND duration_secs = 0), 0),
                    coalesce(sum(CASE WHEN expires_at > ?3 THEN expires_at - ?3 ELSE 0 END), 0)
                      + coalesce(sum(CASE WHEN expires_at = 0 AND duration_secs > ?4 THEN duration_secs - ?4 ELSE 0 END), 0)
             FROM users WHERE admin_id = ?1",
        )?
        .query_row(params![admin, slow_ceiling, reach, horizon.map(|h| h as i64).unwrap_or(i64::MAX)], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?))
        })?;
    let outside = conn
        .prepare_cached(
            "SELECT count(*) FROM user_groups ug JOIN users u ON u.id = ug.user_id
             WHERE u.admin_id = ?1 AND ug.group_id NOT IN (SELECT group_id FROM admin_groups WHERE admin_id = ?1)",
        )?
        .query_row([admin], |row| row.get(0))?;
    Ok(Allotment {
        users,
        traffic: quotas.saturating_add(spent),
        unlimited,
        too_fast,
        endless: if horizon.is_some() { endless } else { 0 },
        too_long,
        outside,
    })
}

/// Bytes as the limits' messages say them.
fn gib(bytes: u64) -> String {
    let gib = bytes as f64 / 1_073_741_824.0;
    if gib.fract() == 0.0 { format!("{gib} GiB") } else { format!("{gib:.2} GiB") }
}

/// Refuses a change that took a reseller from `before` past one of their limits (a change
/// that grows nothing passes, whatever the limits are now).
pub(crate) fn check_within(conn: &Connection, admin: i64, before: Allotment, now: u64) -> Result<(), Error> {
    let after = allotment(conn, admin, now)?;
    let (max_users, max_traffic, max_slow, max_days): (Option<u64>, Option<u64>, Option<u64>, Option<u64>) = conn
        .prepare_cached("SELECT max_users, max_traffic, max_slow_kbps, max_days FROM admins WHERE id = ?1")?
        .query_row([admin], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?;
    if let Some(max) = max_users.filter(|&max| after.users > before.users && after.users > max) {
        return Err(Error::invalid("reseller_limit", format!("you may have at most {max} users")));
    }
    if let Some(max) = max_traffic {
        if after.unlimited > before.unlimited {
            return Err(Error::invalid("reseller_limit", "your users need a traffic quota (you have a traffic limit)"));
        }
        if after.traffic > before.traffic && after.traffic > max {
            return Err(Error::invalid(
                "reseller_limit",
                format!(
                    "your traffic allowance is {}, resets and deleted users counted; {} are given",
                    gib(max),
                    gib(before.traffic)
                ),
            ));
        }
    }
    if after.too_fast > before.too_fast {
        return Err(Error::invalid(
            "reseller_limit",
            match max_slow {
                Some(kbps) => format!("your users over quota may be slowed to at most {}", Rate::from_kbps(kbps)),
                None => "your users over quota are cut off, not slowed (ask the owner for a slowed rate)".to_owned(),
            },
        ));
    }
    if let Some(days) = max_days
        && (after.endless > before.endless || after.too_long > before.too_long)
    {
        return Err(Error::invalid(
            "reseller_limit",
            format!("your users' time may reach at most {days} days ahead (an end date is needed)"),
        ));
    }
    if after.outside > before.outside {
        let allowed = groups_of(conn, admin)?;
        return Err(Error::invalid(
            "reseller_limit",
            if allowed.is_empty() {
                "you may not put users in any group; ask the owner".to_owned()
            } else {
                format!("you may put users only in these groups: {}", allowed.join(", "))
            },
        ));
    }
    Ok(())
}
