//! A user's snapshot signed: its row and what else it needs read from the store, its status
//! and quota warnings kept, and the snapshot (built by [`super::snapshot`], with no IO)
//! sealed to the link's token and to each of the user's aliases.

use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::wire::{Snapshot, Status, SubToken, TelegramLink, UserId, stream};
use hearth_shared::{Rate, seal, sha256};
use rand_core::OsRng;
use rusqlite::Connection;

use super::entries::{Speed, own_over};
use super::signer::Signer;
use super::snapshot::{self, Parts};
use super::streams::{Item, put};
use crate::error::Error;
use crate::secrets::Purpose;
use crate::store::cred_sets::entries_changed;
use crate::store::snapshots::{self, SlowSettings, UserRow};
use crate::store::users::status_name;

/// How long a snapshot envelope is accepted by the edge. The edge serves a stored snapshot
/// for as long as it holds it; this bounds only how late a push may arrive.
const SNAPSHOT_LIFETIME: u64 = 365 * 86_400;

/// Builds, seals and signs a user's snapshot; updates the stored status. Returns whether the
/// user's entries in the sets of the nodes it reaches changed, or `None` when the user no
/// longer exists.
///
/// `alike`: for a bulk create's users after its first, what they share with it, read for
/// the first (`Alike::Keep`) and used for the others (`Alike::Use`).
#[tracing::instrument(level = "debug", skip_all, fields(user = user))]
pub(super) fn publish_user(
    conn: &Connection,
    signer: &Signer,
    user: UserId,
    now: u64,
    alike: Alike<'_>,
) -> Result<Option<bool>, Error> {
    let Some(row) = snapshots::user_row(conn, user)? else { return Ok(None) };
    let status = row.status(now);
    keep_status(conn, user, &row, status, now)?;
    tell_quota(conn, user, &row, status, now)?;
    let token = open_token(signer, &row.token_enc)?;
    let parts = parts(conn, signer, user, row, status, now, alike.shared())?;
    // The user's aliases (old subscription paths) serve the same snapshot, each sealed under
    // its own token (a user just created has none).
    let paths = match alike {
        Alike::Use(_) => Vec::new(),
        Alike::Keep(kept) => {
            *kept =
                Some(Shared { endpoints: parts.endpoints.clone(), refused: parts.refused, hwid: parts.hwid.clone() });
            crate::store::aliases::paths_of_user(conn, user)?
        }
        Alike::No => crate::store::aliases::paths_of_user(conn, user)?,
    };
    let snapshot = snapshot::build(parts, status, now);
    sign(conn, signer, &snapshot, &token, now)?;
    for path in paths {
        let Some(alias) = SubToken::for_alias(&path) else { continue };
        let mut snapshot = snapshot.clone();
        snapshot.alias = Some(path);
        sign(conn, signer, &snapshot, &alias, now)?;
    }
    snapshots::usage_published(conn, user)?;
    Ok(Some(entries_changed(conn, user)?))
}

/// What a bulk create's users share with its first, made with the same settings in the same
/// groups in the same transaction: the nodes they reach, their device limit (none of them was
/// ever refused a device), their device policy (none has deleted devices) and no aliases.
#[derive(Clone, Debug)]
pub(super) struct Shared {
    endpoints: Vec<hearth_shared::wire::Endpoint>,
    refused: (u64, u32),
    hwid: hearth_shared::wire::HwidPolicy,
}

/// Whether a user's snapshot is made with what it shares with others (see [`Shared`]).
pub(super) enum Alike<'a> {
    /// A user alone: everything read for it.
    No,
    /// The first of a bulk create's users: everything read for it, and kept here.
    Keep(&'a mut Option<Shared>),
    /// One of the others: what it shares, taken from the first.
    Use(&'a Shared),
}

impl Alike<'_> {
    fn shared(&self) -> Option<&Shared> {
        match self {
            Alike::Use(shared) => Some(shared),
            _ => None,
        }
    }
}

/// Stores the user's status when it changed, and tells the owner of the changes they hear of.
fn keep_status(conn: &Connection, user: UserId, row: &UserRow, status: Status, now: u64) -> Result<(), Error> {
    if status_name(status) == row.stored_status {
        return Ok(());
    }
    snapshots::set_status(conn, user, status)?;
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
    snapshots::set_quota_warned(conn, user, reached)?;
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
    shared: Option<&Shared>,
) -> Result<Parts, Error> {
    let credential = String::from_utf8(signer.vault.open(Purpose::Credential, &row.credential_enc)?.to_vec())
        .map_err(|_| Error::Internal("a stored credential is not text".into()))?;
    let profile = signer.profile.read().expect("profile lock").clone();
    let slowed = if status == Status::OverQuota { slow_rate(conn, user)? } else { Rate::ZERO };
    let telegram = crate::store::telegram::taking_users(conn)?.map(|bot| TelegramLink {
        bot,
        code: crate::store::telegram::bind_code(&signer.vault, user, row.telegram_binds),
    });
    let (endpoints, refused, hwid) = match shared {
        Some(shared) => (shared.endpoints.clone(), shared.refused, shared.hwid.clone()),
        None => {
            let refused = snapshots::device_refusal(conn, user)?;
            let endpoints = snapshots::nodes_reached(conn, user, snapshot::endpoint)?;
            (endpoints, refused, crate::store::hwid::policy(conn, user, refused.1, now)?)
        }
    };
    Ok(Parts { user, credential, endpoints, profile, slowed, refused, hwid, telegram, row })
}

/// Seals `snapshot` to `token` and signs it on the token's stream, when it changed.
fn sign(conn: &Connection, signer: &Signer, snapshot: &Snapshot, token: &SubToken, now: u64) -> Result<(), Error> {
    let content = sha256(&snapshot.encode());
    let body = || seal::seal_with(snapshot, token, &signer.wrapper(), &mut OsRng);
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

/// The rate a user over quota is slowed to on the nodes of its groups (0: cut off), from its
/// own setting or the most generous of its groups'.
fn slow_rate(conn: &Connection, user: UserId) -> Result<Rate, Error> {
    let SlowSettings { on_quota: own, slow_kbps: slow, groups_slow_kbps: groups } =
        snapshots::slow_settings(conn, user)?;
    let groups = Speed { slow: Rate::from_kbps(groups.unwrap_or(0)), ..Speed::default() };
    Ok(own_over(groups, (None, None, own, Rate::from_kbps(slow))).slow)
}
