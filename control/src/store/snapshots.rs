//! What a user's snapshot is read from: the user's row, the nodes it reaches, its devices
//! refused and the rate it is slowed to over quota; and what signing the snapshot keeps (the
//! status and quota share last published, its usage published). What the snapshot says is
//! [`crate::publish`]'s; these functions only read and write rows.

use hearth_shared::Digest;
use hearth_shared::wire::{Status, UserId};
use rusqlite::{Connection, OptionalExtension as _, params};

use super::users::{status_name, status_of};
use crate::error::Error;

/// A user's row, as the snapshot needs it (secrets still sealed).
pub(crate) struct UserRow {
    pub(crate) name: String,
    pub(crate) token_enc: Vec<u8>,
    pub(crate) credential_enc: Vec<u8>,
    pub(crate) quota: u64,
    pub(crate) used_up: u64,
    pub(crate) used_down: u64,
    /// The reset strategy's stored name.
    pub(crate) reset: String,
    pub(crate) expires_at: u64,
    pub(crate) duration: u64,
    pub(crate) started: u64,
    pub(crate) enabled: bool,
    /// The status stored when it was last published.
    pub(crate) stored_status: String,
    /// The highest quota share the user was warned at (0: none).
    pub(crate) quota_warned: u64,
    /// How many times the user bound a Telegram chat (each code works once).
    pub(crate) telegram_binds: u64,
}

impl UserRow {
    /// Bytes used, both ways.
    pub(crate) fn used(&self) -> u64 {
        self.used_up.saturating_add(self.used_down)
    }

    /// The user's status at `now`.
    pub(crate) fn status(&self, now: u64) -> Status {
        status_of(self.enabled, self.expires_at, self.quota, self.used(), self.duration, self.started, now)
    }
}

/// A user's row, `None` when the user no longer exists.
pub(crate) fn user_row(conn: &Connection, user: UserId) -> Result<Option<UserRow>, Error> {
    let row = conn
        .prepare_cached(
            "SELECT name, token_enc, credential_enc, quota, used_up, used_down, reset, expires_at, duration_secs,
                    started_at, enabled, status, quota_warned, telegram_binds
             FROM users WHERE id = ?1",
        )?
        .query_row([user], |row| {
            Ok(UserRow {
                name: row.get(0)?,
                token_enc: row.get(1)?,
                credential_enc: row.get(2)?,
                quota: row.get(3)?,
                used_up: row.get(4)?,
                used_down: row.get(5)?,
                reset: row.get(6)?,
                expires_at: row.get(7)?,
                duration: row.get(8)?,
                started: row.get(9)?,
                enabled: row.get(10)?,
                stored_status: row.get(11)?,
                quota_warned: row.get(12)?,
                telegram_binds: row.get(13)?,
            })
        })
        .optional()?;
    Ok(row)
}

/// Stores the user's status, as its snapshot was last published with.
pub(crate) fn set_status(conn: &Connection, user: UserId, status: Status) -> Result<(), Error> {
    conn.prepare_cached("UPDATE users SET status = ?2 WHERE id = ?1")?.execute(params![user, status_name(status)])?;
    Ok(())
}

/// Stores the highest quota share the user was warned at (0: none).
pub(crate) fn set_quota_warned(conn: &Connection, user: UserId, reached: u64) -> Result<(), Error> {
    conn.prepare_cached("UPDATE users SET quota_warned = ?2 WHERE id = ?1")?.execute(params![user, reached])?;
    Ok(())
}

/// The user's usage is published (its snapshot was signed with it).
pub(crate) fn usage_published(conn: &Connection, user: UserId) -> Result<(), Error> {
    conn.prepare_cached("UPDATE users SET usage_dirty = 0 WHERE id = ?1 AND usage_dirty = 1")?.execute([user])?;
    Ok(())
}

/// A node a user reaches, as the store holds it.
pub(crate) struct NodeRow {
    pub(crate) name: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The port hopping range (`0, 0`: none).
    pub(crate) hop: (u16, u16),
    /// The server name the owner set ("": the host).
    pub(crate) sni: String,
    /// `self_signed` or how else the node gets its certificate.
    pub(crate) tls: String,
    pub(crate) cert_sha256: Option<Digest>,
    pub(crate) spki_sha256: Option<Digest>,
    /// The Salamander password ("": none).
    pub(crate) obfs: String,
    /// Over its monthly cap until `quota_next`.
    pub(crate) limited: bool,
    pub(crate) quota_next: u64,
    /// The node's own certificate (DER) and the names it is made out to, one a line.
    pub(crate) cert_der: Option<Vec<u8>>,
    pub(crate) cert_names: String,
    pub(crate) allow_unverified: bool,
    /// The owner's domain for the node's public certificate ("": none).
    pub(crate) domain: String,
    /// The node holds its public certificate for `domain`.
    pub(crate) acme_public: bool,
    /// The domain the node says it may hold a public certificate for.
    pub(crate) acme_domain: String,
}

/// The nodes a user reaches (enrolled nodes of its groups), as apps list them: a node over
/// its monthly cap last; each as `each` makes it of the node's row.
pub(crate) fn nodes_reached<T>(
    conn: &Connection,
    user: UserId,
    mut each: impl FnMut(NodeRow) -> T,
) -> Result<Vec<T>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT DISTINCT n.id, n.name, n.host, n.port, n.hop_start, n.hop_end, n.sni, n.tls, n.cert_sha256,
                n.spki_sha256, n.obfs, n.limited, n.quota_next, n.cert_der, n.cert_names, n.allow_unverified, n.domain,
                n.acme_public, n.acme_domain
         FROM user_groups ug JOIN node_groups ng ON ng.group_id = ug.group_id JOIN nodes n ON n.id = ng.node_id
         WHERE ug.user_id = ?1 AND n.public_key IS NOT NULL ORDER BY n.limited, n.id",
    )?;
    let rows = query.query_map([user], |row| {
        Ok(each(NodeRow {
            name: row.get(1)?,
            host: row.get(2)?,
            port: row.get(3)?,
            hop: (row.get(4)?, row.get(5)?),
            sni: row.get(6)?,
            tls: row.get(7)?,
            cert_sha256: row.get(8)?,
            spki_sha256: row.get(9)?,
            obfs: row.get(10)?,
            limited: row.get(11)?,
            quota_next: row.get(12)?,
            cert_der: row.get(13)?,
            cert_names: row.get(14)?,
            allow_unverified: row.get(15)?,
            domain: row.get(16)?,
            acme_public: row.get(17)?,
            acme_domain: row.get(18)?,
        }))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// When a device of the user was last refused over its limit (0: never), and its device
/// limit in force: its own, else the most generous of its groups' (0: none).
pub(crate) fn device_refusal(conn: &Connection, user: UserId) -> Result<(u64, u32), Error> {
    Ok(conn
        .prepare_cached(concat!(
            "SELECT u.devices_refused_at, ",
            super::users::device_limit_in_force!(),
            " FROM users u WHERE u.id = ?1"
        ))?
        .query_row([user], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?
        .unwrap_or((0, 0)))
}

/// What a user over quota is slowed to: its own quota action and rate, and the highest rate
/// of its groups whose action is to slow down.
pub(crate) struct SlowSettings {
    /// The user's own quota action (`None`: its groups').
    pub(crate) on_quota: Option<String>,
    /// The user's own rate when slowed, in kbit/s.
    pub(crate) slow_kbps: u64,
    /// The most generous rate of its groups that slow down, in kbit/s (`None`: none does).
    pub(crate) groups_slow_kbps: Option<u64>,
}

/// The settings a user over quota is slowed by, its own and its groups'.
pub(crate) fn slow_settings(conn: &Connection, user: UserId) -> Result<SlowSettings, Error> {
    Ok(conn
        .prepare_cached(
            "SELECT u.on_quota, u.slow_kbps,
                    (SELECT max(g.slow_kbps) FROM user_groups ug JOIN groups g ON g.id = ug.group_id
                     WHERE ug.user_id = u.id AND g.on_quota = 'slow')
             FROM users u WHERE u.id = ?1",
        )?
        .query_row([user], |row| {
            Ok(SlowSettings { on_quota: row.get(0)?, slow_kbps: row.get(1)?, groups_slow_kbps: row.get(2)? })
        })?)
}
