//! A user's snapshot signed: its row and what else it needs read from the store, its status
//! and quota warnings kept, and the snapshot (built by [`super::snapshot`], with no IO)
//! sealed to the link's token and to each of the user's aliases.

use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::wire::{Endpoint, NodeId, Snapshot, Status, SubToken, TelegramLink, UserId, stream};
use hearth_shared::{seal, sha256};
use rand_core::OsRng;
use rusqlite::{Connection, OptionalExtension as _, params};

use super::entries::{Speed, own_over};
use super::signer::Signer;
use super::snapshot::{self, NodeRow, Parts, UserRow};
use super::streams::{Item, put};
use crate::error::Error;
use crate::secrets::Purpose;
use crate::store::changes::nodes_of_user;
use crate::store::users::status_name;

/// How long a snapshot envelope is accepted by the edge. The edge serves a stored snapshot
/// for as long as it holds it; this bounds only how late a push may arrive.
const SNAPSHOT_LIFETIME: u64 = 365 * 86_400;

/// Builds, seals and signs a user's snapshot; updates the stored status. Returns the nodes
/// the user reaches and whether its entries in their sets changed, or `None` when the user
/// no longer exists.
#[tracing::instrument(level = "debug", skip_all, fields(user = user))]
pub(super) fn publish_user(
    conn: &Connection,
    signer: &Signer,
    user: UserId,
    now: u64,
) -> Result<Option<Published>, Error> {
    let Some(row) = user_row(conn, user)? else { return Ok(None) };
    let status = row.status(now);
    keep_status(conn, user, &row, status, now)?;
    tell_quota(conn, user, &row, status, now)?;
    let token = open_token(signer, &row.token_enc)?;
    let snapshot = snapshot::build(parts(conn, signer, user, row, status, now)?, status, now);
    sign(conn, signer, &snapshot, &token, now)?;
    // The user's aliases (old subscription paths) serve the same snapshot, each sealed under
    // its own token.
    for path in crate::store::aliases::paths_of_user(conn, user)? {
        let Some(alias) = SubToken::for_alias(&path) else { continue };
        let mut snapshot = snapshot.clone();
        snapshot.alias = Some(path);
        sign(conn, signer, &snapshot, &alias, now)?;
    }
    conn.prepare_cached("UPDATE users SET usage_dirty = 0 WHERE id = ?1 AND usage_dirty = 1")?.execute([user])?;
    Ok(Some(Published { reach: nodes_of_user(conn, user)?, entries_changed: entries_changed(conn, user)? }))
}

/// A user's row, `None` when the user no longer exists.
fn user_row(conn: &Connection, user: UserId) -> Result<Option<UserRow>, Error> {
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

/// Stores the user's status when it changed, and tells the owner of the changes they hear of.
fn keep_status(conn: &Connection, user: UserId, row: &UserRow, status: Status, now: u64) -> Result<(), Error> {
    if status_name(status) == row.stored_status {
        return Ok(());
    }
    conn.prepare_cached("UPDATE users SET status = ?2 WHERE id = ?1")?.execute(params![user, status_name(status)])?;
    if let Some(kind) = snapshot::status_event(status) {
        let more = serde_json::json!({ "was": row.stored_status, "used": row.used(), "quota": row.quota });
        crate::store::events::user_event(conn, now, kind, user, &row.name, more)?;
    }
    Ok(())
}

/// Keeps the quota share the user was warned at and tells each share crossed, once
/// ([`snapshot::quota_warnings`]).
fn tell_quota(conn: &Connection, user: UserId, row: &UserRow, status: Status, now: u64) -> Result<(), Error> {
    let Some((reached, tell)) = snapshot::quota_warnings(row.quota, row.used(), row.quota_warned, status) else {
        return Ok(());
    };
    conn.prepare_cached("UPDATE users SET quota_warned = ?2 WHERE id = ?1")?.execute(params![user, reached])?;
    for percent in tell {
        let more = serde_json::json!({ "percent": percent, "used": row.used(), "quota": row.quota });
        crate::store::events::user_event(conn, now, "user.near_quota", user, &row.name, more)?;
    }
    Ok(())
}

/// The user's link token, opened from the vault.
fn open_token(signer: &Signer, sealed: &[u8]) -> Result<SubToken, Error> {
    let bytes = signer.vault.open(Purpose::Token, sealed)?;
    let bytes =
        bytes.as_slice().try_into().map_err(|_| Error::Internal("a stored token has the wrong length".into()))?;
    Ok(SubToken::from_bytes(bytes))
}

/// Everything else the user's snapshot is made of, read from the store and the vault.
fn parts(
    conn: &Connection,
    signer: &Signer,
    user: UserId,
    row: UserRow,
    status: Status,
    now: u64,
) -> Result<Parts, Error> {
    let credential = String::from_utf8(signer.vault.open(Purpose::Credential, &row.credential_enc)?.to_vec())
        .map_err(|_| Error::Internal("a stored credential is not text".into()))?;
    let profile = signer.profile.read().expect("profile lock").clone();
    let slowed = if status == Status::OverQuota { slow_rate(conn, user)? } else { 0 };
    let refused = device_refusal(conn, user)?;
    let telegram = crate::store::telegram::taking_users(conn)?.map(|bot| TelegramLink {
        bot,
        code: crate::store::telegram::bind_code(&signer.vault, user, row.telegram_binds),
    });
    Ok(Parts {
        user,
        credential,
        endpoints: endpoints(conn, user)?,
        profile,
        slowed,
        refused,
        hwid: crate::store::hwid::policy(conn, user, refused.1, now)?,
        telegram,
        row,
    })
}

/// Seals `snapshot` to `token` and signs it on the token's stream, when it changed.
fn sign(conn: &Connection, signer: &Signer, snapshot: &Snapshot, token: &SubToken, now: u64) -> Result<(), Error> {
    let content = sha256(&snapshot.encode());
    let body = || seal::seal(snapshot, token, &signer.recovery, &mut OsRng);
    let item = Item {
        kind: Kind::Snapshot,
        name: stream::snapshot(&token.hash()),
        audience: Audience::Edge,
        lifetime: SNAPSHOT_LIFETIME,
        content,
        body: &body,
        above: 0,
    };
    put(conn, signer, &item, now, false)?;
    Ok(())
}

/// The nodes a user reaches (enrolled nodes of its groups), as apps list them: a node over
/// its monthly cap last.
fn endpoints(conn: &Connection, user: UserId) -> Result<Vec<Endpoint>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT DISTINCT n.id, n.name, n.host, n.port, n.hop_start, n.hop_end, n.sni, n.tls, n.cert_sha256,
                n.spki_sha256, n.obfs, n.limited, n.quota_next, n.cert_der, n.cert_names, n.allow_unverified, n.domain,
                n.acme_public, n.acme_domain
         FROM user_groups ug JOIN node_groups ng ON ng.group_id = ug.group_id JOIN nodes n ON n.id = ng.node_id
         WHERE ug.user_id = ?1 AND n.public_key IS NOT NULL ORDER BY n.limited, n.id",
    )?;
    let rows = query.query_map([user], |row| {
        Ok(snapshot::endpoint(NodeRow {
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

/// A user's snapshot signed: the nodes it reaches, and whether its entries in their sets
/// changed since it was last published.
pub(super) struct Published {
    pub(super) reach: Vec<NodeId>,
    pub(super) entries_changed: bool,
}

/// The columns of what `user` puts in the sets of the nodes it reaches (see
/// [`credential_set`]: the user's own fields and those of each group it has on each node).
const ENTRY_COLUMNS: usize = 19;

/// Whether what `user` puts in nodes' sets changed since it was last recorded; records it. A
/// user's entry in a node's set comes from its row and its groups' on that node, so a change
/// to neither (a quota, a name, a note, usage) leaves every set as it was.
fn entries_changed(conn: &Connection, user: UserId) -> Result<bool, Error> {
    use std::fmt::Write as _;
    let mut query = conn.prepare_cached(
        "SELECT ng.node_id, g.id, u.credential_hash, u.status, u.speed_up, u.speed_down, u.on_quota, u.slow_kbps,
                u.device_limit, u.kick, g.speed_up, g.speed_down, g.on_quota, g.slow_kbps, g.device_limit,
                g.block_torrent, g.block_smtp, u.rule_set_id, g.rule_set_id
         FROM user_groups ug JOIN groups g ON g.id = ug.group_id JOIN node_groups ng ON ng.group_id = ug.group_id
         JOIN users u ON u.id = ug.user_id
         WHERE ug.user_id = ?1 ORDER BY ng.node_id, g.id",
    )?;
    let mut rows = query.query([user])?;
    let mut entries = String::new();
    while let Some(row) = rows.next()? {
        for column in 0..ENTRY_COLUMNS {
            let value: rusqlite::types::Value = row.get(column)?;
            let _ = write!(entries, "{value:?}\u{1f}");
        }
        entries.push('\n');
    }
    let digest = sha256(entries.as_bytes()).to_vec();
    let changed = conn
        .prepare_cached(
            "UPDATE users SET creds_digest = ?2 WHERE id = ?1 AND (creds_digest IS NULL OR creds_digest != ?2)",
        )?
        .execute(params![user, digest])?;
    Ok(changed > 0)
}

/// When a device of the user was last refused over its limit (0: never), and its device
/// limit in force: its own, else the most generous of its groups' (0: none).
pub(crate) fn device_refusal(conn: &Connection, user: UserId) -> Result<(u64, u32), Error> {
    Ok(conn
        .prepare_cached(concat!(
            "SELECT u.devices_refused_at, ",
            crate::store::users::device_limit_in_force!(),
            " FROM users u WHERE u.id = ?1"
        ))?
        .query_row([user], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?
        .unwrap_or((0, 0)))
}

/// The rate a user over quota is slowed to on the nodes of its groups, in kbit/s (0: cut
/// off), from its own setting or the most generous of its groups'.
fn slow_rate(conn: &Connection, user: UserId) -> Result<u64, Error> {
    let (own, slow, groups): (Option<String>, u64, Option<u64>) = conn
        .prepare_cached(
            "SELECT u.on_quota, u.slow_kbps,
                    (SELECT max(g.slow_kbps) FROM user_groups ug JOIN groups g ON g.id = ug.group_id
                     WHERE ug.user_id = u.id AND g.on_quota = 'slow')
             FROM users u WHERE u.id = ?1",
        )?
        .query_row([user], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
    Ok(own_over(Speed { slow: groups.unwrap_or(0), ..Speed::default() }, (None, None, own, slow)).slow)
}
