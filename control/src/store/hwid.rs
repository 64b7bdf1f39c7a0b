//! Devices registered by the headers apps send when they fetch a link (HWID): what the edges'
//! registries report, what control registers itself when it serves links, the owner's list
//! and deletions, and the policy each user's snapshot carries (see
//! [`hearth_shared::devices`]).
//!
//! An edge is not trusted: its report is opened with the user's token (so it is a registry
//! sealed for that link), checked for bounds, and merged into the list, which only shows and
//! limits: the limit itself is control's, and nothing a report says grants anything.

use hearth_shared::devices::{self, Admission, DeviceKey, DeviceReport, Forgotten, HwidPolicy, Seen};
use hearth_shared::wire::UserId;
use rusqlite::{Connection, OptionalExtension as _, params};
use serde::Serialize;

use super::changes::Changes;
use crate::error::Error;
use crate::secrets::Vault;
use crate::store::audit_log::audit;

/// How long a deletion is remembered (and told to the edges): a link not fetched for this
/// long by the deleted device's app may list it again.
pub(crate) const FORGET_FOR: u64 = 180 * 86_400;

/// One registered device, as the panel and the API show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct HwidDevice {
    /// Its key (hex): what deleting it names.
    pub key: String,
    pub os: String,
    pub os_version: String,
    pub model: String,
    pub app: String,
    pub first_seen: u64,
    pub last_seen: u64,
}

/// A user's registered devices, their limit at the edge and when one was last turned away.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct HwidView {
    /// The device limit the edges hold apps to (0: none; a limit over
    /// [`devices::MAX_DEVICES`] is held only by the nodes).
    pub limit: u32,
    pub devices: Vec<HwidDevice>,
    /// When an edge last turned a new device away (0: never).
    pub refused_at: u64,
}

/// The device limit the edges hold `user`'s apps to (0: none).
pub(crate) fn edge_limit(limit_in_force: u32) -> u32 {
    if limit_in_force as usize <= devices::MAX_DEVICES { limit_in_force } else { 0 }
}

/// The deletions a user's snapshot carries, the latest first. Its LIMIT is written into the
/// SQL, not bound: SQLite plans with a bound LIMIT's value, so it parses the statement again
/// each time the value is bound, and this runs for every user signed (a bulk create of
/// 10,000 users parsed it 10,000 times).
static FORGOTTEN_OF_USER: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT key, before FROM hwid_forgotten WHERE user_id = ?1 AND before > ?2 ORDER BY before DESC, key LIMIT {}",
        devices::MAX_FORGOTTEN
    )
});

/// What `user`'s snapshot tells the edges: the limit, and the devices deleted lately.
pub(crate) fn policy(conn: &Connection, user: UserId, limit_in_force: u32, now: u64) -> Result<HwidPolicy, Error> {
    let mut query = conn.prepare_cached(&FORGOTTEN_OF_USER)?;
    let rows = query
        .query_map(params![user, now.saturating_sub(FORGET_FOR)], |row| {
            Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, u64>(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut forgotten: Vec<Forgotten> =
        rows.into_iter().filter_map(|(key, before)| Some(Forgotten { key: key.try_into().ok()?, before })).collect();
    forgotten.sort_by_key(|gone| gone.key);
    Ok(HwidPolicy { limit: edge_limit(limit_in_force), forgotten })
}

fn forgotten(conn: &Connection, user: UserId, key: &DeviceKey) -> Result<Option<u64>, Error> {
    Ok(conn
        .prepare_cached("SELECT before FROM hwid_forgotten WHERE user_id = ?1 AND key = ?2")?
        .query_row(params![user, key.to_vec()], |row| row.get(0))
        .optional()?)
}

/// Merges one device into the user's list: first fetch the earliest, last the latest, the
/// details of the latest. A device the owner deleted is not listed again unless it came after.
fn merge(conn: &Connection, user: UserId, device: &devices::Device) -> Result<bool, Error> {
    if forgotten(conn, user, &device.key)?.is_some_and(|before| device.first_seen <= before) {
        return Ok(false);
    }
    let changed = conn
        .prepare_cached(
            "INSERT INTO hwid_devices (user_id, key, os, os_version, model, app, first_seen, last_seen)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (user_id, key) DO UPDATE SET
                os = CASE WHEN excluded.last_seen >= last_seen THEN excluded.os ELSE os END,
                os_version = CASE WHEN excluded.last_seen >= last_seen THEN excluded.os_version ELSE os_version END,
                model = CASE WHEN excluded.last_seen >= last_seen THEN excluded.model ELSE model END,
                app = CASE WHEN excluded.last_seen >= last_seen THEN excluded.app ELSE app END,
                first_seen = min(first_seen, excluded.first_seen),
                last_seen = max(last_seen, excluded.last_seen)
             WHERE excluded.last_seen > last_seen OR excluded.first_seen < first_seen",
        )?
        .execute(params![
            user,
            device.key.to_vec(),
            device.os,
            device.os_version,
            device.model,
            device.app,
            device.first_seen,
            device.last_seen
        ])?;
    Ok(changed > 0)
}

/// Applies a registry an edge queued: `Ok(true)` when the list changed. A report for no
/// user (a link since deleted or given anew), or one that does not open with the user's
/// token or is out of bounds, is dropped (`Ok(false)`).
pub(crate) fn apply_report(conn: &Connection, vault: &Vault, report: &DeviceReport, now: u64) -> Result<bool, Error> {
    let user: Option<UserId> = conn
        .prepare_cached("SELECT id FROM users WHERE token_hash = ?1")?
        .query_row([report.token_hash.to_vec()], |row| row.get(0))
        .optional()?;
    // The user's link, or one of its aliases (each has a registry of its own).
    let (user, token) = match user {
        Some(user) => (user, crate::store::users::token(conn, vault, user)?),
        None => match crate::store::aliases::by_hash(conn, &report.token_hash)? {
            Some(found) => found,
            None => return Ok(false),
        },
    };
    let Some(registry) = devices::open(&report.sealed, &token) else {
        tracing::info!(user, "an edge's device registry did not open with the user's token: dropped");
        return Ok(false);
    };
    let mut changed = false;
    // An edge's clock is not control's: nothing it reports happened after now.
    for device in &registry.devices {
        let device = devices::Device {
            first_seen: device.first_seen.min(now),
            last_seen: device.last_seen.min(now),
            ..device.clone()
        };
        changed |= merge(conn, user, &device)?;
    }
    let refused_at = registry.refused_at.min(now);
    let told_before: u64 =
        conn.prepare_cached("SELECT hwid_refused_at FROM users WHERE id = ?1")?.query_row([user], |row| row.get(0))?;
    let refused = conn
        .prepare_cached("UPDATE users SET hwid_refused_at = ?2 WHERE id = ?1 AND hwid_refused_at < ?2")?
        .execute(params![user, refused_at])?
        > 0;
    // Told at most hourly, as the refusal notice in the profile.
    if refused && told_before + devices::SEEN_EVERY <= refused_at {
        let more = serde_json::json!({ "by": "app", "at": refused_at });
        crate::store::events::user_event_of(conn, now, "user.over_device_limit", user, more)?;
    }
    Ok(changed || refused)
}

/// Admits a device fetching `user`'s link from control itself (no edge in front): control's
/// own list is the registry.
pub(crate) fn admit_here(
    conn: &Connection,
    user: UserId,
    limit: u32,
    seen: &Seen,
    now: u64,
) -> Result<Admission, Error> {
    let known: Option<u64> = conn
        .prepare_cached("SELECT last_seen FROM hwid_devices WHERE user_id = ?1 AND key = ?2")?
        .query_row(params![user, seen.key.to_vec()], |row| row.get(0))
        .optional()?;
    let device = seen.device(now);
    if let Some(last_seen) = known {
        if now >= last_seen.saturating_add(devices::SEEN_EVERY) {
            merge(conn, user, &device)?;
        }
        return Ok(Admission::Known);
    }
    let listed: u32 = conn
        .prepare_cached("SELECT count(*) FROM hwid_devices WHERE user_id = ?1")?
        .query_row([user], |row| row.get(0))?;
    if listed < edge_limit(limit) {
        merge(conn, user, &device)?;
        return Ok(Admission::Added);
    }
    conn.prepare_cached("UPDATE users SET hwid_refused_at = ?2 WHERE id = ?1 AND hwid_refused_at + ?3 <= ?2")?
        .execute(params![user, now, devices::SEEN_EVERY])?;
    Ok(Admission::Refused)
}

/// A user's registered devices, most recently seen first.
pub(crate) fn list(conn: &Connection, user: UserId) -> Result<HwidView, Error> {
    let (refused_at, limit): (u64, u32) = conn
        .prepare_cached(concat!(
            "SELECT u.hwid_refused_at, ",
            crate::store::users::device_limit_in_force!(),
            " FROM users u WHERE u.id = ?1"
        ))?
        .query_row([user], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?
        .ok_or(Error::NotFound("user"))?;
    let mut query = conn.prepare_cached(
        "SELECT key, os, os_version, model, app, first_seen, last_seen FROM hwid_devices WHERE user_id = ?1
         ORDER BY last_seen DESC, key",
    )?;
    let devices = query
        .query_map([user], |row| {
            Ok(HwidDevice {
                key: hex::encode(row.get::<_, Vec<u8>>(0)?),
                os: row.get(1)?,
                os_version: row.get(2)?,
                model: row.get(3)?,
                app: row.get(4)?,
                first_seen: row.get(5)?,
                last_seen: row.get(6)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(HwidView { limit: edge_limit(limit), devices, refused_at })
}

/// Deletes a registered device: off the list, and (through the user's snapshot) off every
/// edge's registry, so its room is free; the device is a new one if it fetches again.
pub(crate) fn forget(
    conn: &Connection,
    changes: &mut Changes,
    actor: &str,
    user: UserId,
    key: &str,
    now: u64,
) -> Result<HwidView, Error> {
    let user_view = crate::store::users::get(conn, user)?;
    let key: DeviceKey = hex::decode(key)
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or_else(|| Error::invalid("bad_device", "a device is named by its key: 32 hex digits"))?;
    let deleted = conn
        .prepare_cached("DELETE FROM hwid_devices WHERE user_id = ?1 AND key = ?2")?
        .execute(params![user, key.to_vec()])?;
    if deleted == 0 {
        return Err(Error::NotFound("device"));
    }
    conn.prepare_cached(
        "INSERT INTO hwid_forgotten (user_id, key, before) VALUES (?1, ?2, ?3)
         ON CONFLICT (user_id, key) DO UPDATE SET before = excluded.before",
    )?
    .execute(params![user, key.to_vec(), now])?;
    conn.prepare_cached("DELETE FROM hwid_forgotten WHERE before <= ?1")?.execute([now.saturating_sub(FORGET_FOR)])?;
    changes.user(conn, user)?;
    audit(conn, now, actor, "user.device.delete", &format!("user {user} ({})", user_view.name), &hex::encode(key))?;
    list(conn, user)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Signing a user's snapshot reads the deletions it carries with a statement parsed once
    /// for all users: with its LIMIT bound, SQLite parsed it again for every user signed.
    #[test]
    fn the_deletions_a_snapshot_carries_are_read_without_parsing_again() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::store::Db::open(&dir.path().join("control.db")).unwrap();
        let conn = db.connect().unwrap();
        for user in 1..=5 {
            assert!(policy(&conn, user, 3, 1_000_000).unwrap().forgotten.is_empty());
        }
        let statement = conn.prepare_cached(&FORGOTTEN_OF_USER).unwrap();
        assert_eq!(statement.get_status(rusqlite::StatementStatus::RePrepare), 0, "parsed again");
    }
}
