//! From a change in the database to signed envelopes for the edges and nodes.
//!
//! Every change runs inside one write transaction that also signs what it affects: the
//! user's sealed snapshot, and the credential set of each node whose set it changes. Work is
//! proportional to what a change touches: a user's snapshot, and one query per affected node.
//! The latest envelope of each stream is kept in `streams` (nodes pull from there) with the
//! order of its change (`seq`), written in the same transaction: every edge gets what is newer
//! than what it holds, so nothing committed is ever left unpublished, whichever process
//! committed it (see [`crate::outbox`]).

use std::collections::HashMap;

use hearth_shared::envelope::{Audience, Draft, Kind};
use hearth_shared::keys::{PublicKey, RecoveryPublic};
use hearth_shared::wire::{
    self, CredDiff, CredEntry, CredentialSet, DevicePolicy, Endpoint, Identity, NodeId, NodeRecord, PortRange, Profile,
    ResetStrategy, Snapshot, SpeedLimit, Status, Stream, SubToken, TelegramLink, UserId, stream,
};
use hearth_shared::{Digest, seal, sha256};
use rand_core::OsRng;
use rusqlite::{Connection, OptionalExtension as _, params};

use crate::clock::civil_date;
use crate::error::Error;
use crate::keyring::Online;
use crate::secrets::{Purpose, Vault};
use crate::store::changes::{Changes, nodes_of_user};
use crate::store::users::{parse_reset, status_name, status_of};
use crate::store::{edges, identity};

/// How long a snapshot envelope is accepted by the edge. The edge serves a stored snapshot
/// for as long as it holds it; this bounds only how late a push may arrive.
const SNAPSHOT_LIFETIME: u64 = 365 * 86_400;
/// How long a credential set is valid. Control re-signs sets well before (see
/// [`REFRESH_BEFORE`]); a node holding an expired set keeps serving it and raises an alarm.
pub(crate) const CREDS_LIFETIME: u64 = 30 * 86_400;
/// Sets that expire sooner than this are signed again by the sweep.
pub(crate) const REFRESH_BEFORE: u64 = 23 * 86_400;
/// How long a node record is valid.
const RECORD_LIFETIME: u64 = 10 * 365 * 86_400;

/// What control signs with, and where it publishes.
pub(crate) struct Signer {
    /// The online signing key and the key records certifying it (sent with every push and
    /// every answer to a node's pull). Swapped when `keys rotate` moved the database's
    /// `keys_serial`: see [`Signer::online`].
    pub(crate) online: std::sync::RwLock<std::sync::Arc<Online>>,
    /// The data directory the keys are read from.
    pub(crate) dir: std::path::PathBuf,
    /// The owner's recovery key: every sealed snapshot is also readable with it.
    pub(crate) recovery: RecoveryPublic,
    /// Secrets at rest.
    pub(crate) vault: Vault,
    /// The subscription headers every snapshot carries (the owner can change them at run
    /// time: [`crate::settings`]).
    pub(crate) profile: std::sync::RwLock<Profile>,
    /// Control's incarnation.
    pub(crate) epoch: u32,
    /// The root key (to verify what nodes sign, next to their own keys).
    pub(crate) root: PublicKey,
    /// The API prefix of `edge.toml` (the `main` edge's, and control's node API's).
    pub(crate) api_prefix: String,
}

impl Signer {
    /// The signing key in force. A rotation (`hearth-control keys rotate`, another process)
    /// commits a new `keys_serial` with everything it signed again; the first signature after
    /// that, in any transaction, loads the new key from the data directory, so no envelope is
    /// signed with a retired key once the rotation is committed.
    pub(crate) fn online(&self, conn: &Connection) -> Result<std::sync::Arc<Online>, Error> {
        let serial = crate::store::get_state(conn, "keys_serial")?;
        let held = self.online.read().expect("keys lock").clone();
        if held.serial == serial {
            return Ok(held);
        }
        let fresh = crate::keyring::load_online(&self.dir, serial, crate::clock::now())
            .map_err(|e| Error::Internal(format!("loading the rotated signing key: {e:#}")))?;
        let fresh = std::sync::Arc::new(fresh);
        tracing::info!(key = %fresh.key.id(), "the signing key was rotated; signing with the new key");
        *self.online.write().expect("keys lock") = fresh.clone();
        Ok(fresh)
    }
}

/// Signs what a transaction changed (see [`Changes`]), inside it: node records first, then
/// withdrawn streams, users' snapshots, the nodes' sets (those the users reach too), and the
/// edge's settings. Returns how many envelopes were signed.
#[tracing::instrument(name = "publish", level = "debug", skip_all, fields(users = changes.users.len(), nodes = changes.nodes.len()))]
pub(crate) fn changes(conn: &Connection, signer: &Signer, changes: Changes, now: u64) -> Result<usize, Error> {
    let mut signed = 0;
    for (node, key) in changes.node_records {
        publish_node_record(conn, signer, node, key, now)?;
        signed += 1;
    }
    for stream in &changes.gone {
        delete_stream(conn, stream)?;
    }
    // A user's entries in the sets of the nodes it reaches: checked only when one changed
    // (or the user is gone).
    let mut by_entries = changes.creds;
    let mut entries_changed = false;
    for user in changes.users {
        match publish_user(conn, signer, user, now)? {
            Some(published) => {
                signed += 1;
                if published.entries_changed {
                    entries_changed = true;
                    by_entries.extend(published.reach);
                }
            }
            None => entries_changed = true,
        }
    }
    if entries_changed {
        by_entries.extend(changes.reach);
    }
    for &node in &changes.nodes {
        signed += usize::from(publish_creds(conn, signer, node, now, false)?);
    }
    for node in by_entries.difference(&changes.nodes) {
        signed += usize::from(publish_creds_of(conn, signer, *node, &changes.entries, now)?);
    }
    if changes.edge_settings {
        publish_edge_settings(conn, signer, now)?;
        signed += 1;
    }
    Ok(signed)
}

/// Runs a change of the store's in the caller's transaction, then signs what it changed.
pub(crate) fn changed<T>(
    conn: &Connection,
    signer: &Signer,
    now: u64,
    change: impl FnOnce(&mut Changes) -> Result<T, Error>,
) -> Result<T, Error> {
    let mut touched = Changes::default();
    let value = change(&mut touched)?;
    changes(conn, signer, touched, now)?;
    Ok(value)
}

/// Signs the rollout stream: the newest rollout's release and the nodes told to run it (the
/// edge tells nodes that reach only it).
pub(crate) fn publish_rollout(conn: &Connection, signer: &Signer, now: u64) -> Result<(), Error> {
    let release: u64 = conn
        .query_row("SELECT release FROM rollouts ORDER BY started DESC, release DESC LIMIT 1", [], |row| row.get(0))
        .optional()?
        .unwrap_or(0);
    let nodes = conn
        .prepare("SELECT id FROM nodes WHERE release_target = ?1 AND ?1 != 0 ORDER BY id")?
        .query_map([release], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let body = wire::encode(&hearth_shared::release::Rollout { release, nodes });
    put_signed(conn, signer, (Kind::Rollout, stream::ROLLOUT.to_owned(), Audience::Edge), &body, now)
}

/// Signs every user's snapshot again (the profile they all carry changed). Returns how many
/// envelopes were signed.
pub(crate) fn republish_users(conn: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    let mut touched = Changes::default();
    let mut query = conn.prepare("SELECT id FROM users")?;
    for user in query.query_map([], |row| row.get(0))? {
        touched.users.insert(user?);
    }
    changes(conn, signer, touched, now)
}

/// A stream's stored version, envelope digest (none once deleted) and content digest.
type StreamRow = (u64, Option<Digest>, Option<Digest>);

/// The stored state of a stream.
fn stream_state(conn: &Connection, name: &str) -> Result<Option<StreamRow>, Error> {
    let row = conn
        .prepare_cached("SELECT version, digest, body_sha256 FROM streams WHERE name = ?1")?
        .query_row([name], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    Ok(row)
}

/// What to sign on a stream.
struct Item<'a> {
    kind: Kind,
    name: String,
    audience: Audience,
    lifetime: u64,
    /// A digest of the content (before sealing): unchanged content is not signed again.
    content: Digest,
    /// Makes the body.
    body: &'a dyn Fn() -> Vec<u8>,
    /// The version must be above this one as well as above the stream's (a node's set and
    /// its delta share one line of versions).
    above: u64,
}

/// Signs `item` at the stream's next version unless its content is unchanged (and `force`
/// is off), stores it and queues it for the edge. Returns whether it signed.
fn put(conn: &Connection, signer: &Signer, item: &Item<'_>, now: u64, force: bool) -> Result<bool, Error> {
    let stored = stream_state(conn, &item.name)?;
    if let Some((_, Some(_), Some(content))) = &stored
        && *content == item.content
        && !force
    {
        return Ok(false);
    }
    let (version, prev) = stored.map_or((1, [0; 32]), |(v, digest, _)| (v + 1, digest.unwrap_or([0; 32])));
    let version = version.max(item.above + 1);
    let envelope = Draft {
        kind: item.kind,
        stream: item.name.clone(),
        version,
        epoch: signer.epoch,
        issued: now,
        expires: now + item.lifetime,
        audience: item.audience.clone(),
        prev,
    }
    .sign((item.body)(), &[&signer.online(conn)?.key]);
    let bytes = envelope.encode();
    let seq = edges::next_seq(conn)?;
    conn.prepare_cached(
        "INSERT INTO streams (name, version, digest, body_sha256, envelope, expires, seq)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (name) DO UPDATE SET version = excluded.version, digest = excluded.digest,
           body_sha256 = excluded.body_sha256, envelope = excluded.envelope, expires = excluded.expires,
           seq = excluded.seq",
    )?
    .execute(params![item.name, version, envelope.digest().0, item.content, bytes, now + item.lifetime, seq])?;
    Ok(true)
}

/// Signs a plain (unsealed) body on a stream if it changed, or `force`; returns whether it
/// signed.
#[allow(clippy::too_many_arguments)]
fn put_plain(
    conn: &Connection,
    signer: &Signer,
    (kind, name, audience): (Kind, String, Audience),
    lifetime: u64,
    body: &[u8],
    now: u64,
    force: bool,
) -> Result<bool, Error> {
    let content = sha256(body);
    let make = || body.to_vec();
    put(conn, signer, &Item { kind, name, audience, lifetime, content, body: &make, above: 0 }, now, force)
}

/// Deletes a stream at its next version (a rotated or deleted link): the edge drops it and
/// can never be made to serve an older version again.
pub(crate) fn delete_stream(conn: &Connection, name: &str) -> Result<(), Error> {
    let Some((version, digest, _)) = stream_state(conn, name)? else { return Ok(()) };
    conn.execute(
        "UPDATE streams SET version = ?2, digest = ?3, body_sha256 = NULL, envelope = NULL, seq = ?4 WHERE name = ?1",
        params![name, version + 1, digest, edges::next_seq(conn)?],
    )?;
    Ok(())
}

/// The endpoints a user reaches: enrolled nodes of the user's groups.
fn endpoints(conn: &Connection, user: UserId) -> Result<Vec<Endpoint>, Error> {
    // A node over its monthly cap carries nobody: listed last, its name says until when.
    let mut query = conn.prepare_cached(
        "SELECT DISTINCT n.id, n.name, n.host, n.port, n.hop_start, n.hop_end, n.sni, n.tls, n.cert_sha256,
                n.spki_sha256, n.obfs, n.limited, n.quota_next, n.cert_der, n.cert_names, n.allow_unverified, n.domain,
                n.acme_public, n.acme_domain
         FROM user_groups ug JOIN node_groups ng ON ng.group_id = ug.group_id JOIN nodes n ON n.id = ng.node_id
         WHERE ug.user_id = ?1 AND n.public_key IS NOT NULL ORDER BY n.limited, n.id",
    )?;
    let rows = query.query_map([user], |row| {
        let hop_start: u16 = row.get(4)?;
        let hop_end: u16 = row.get(5)?;
        let sni: String = row.get(6)?;
        let domain: String = row.get(16)?;
        // A node with its public certificate for its domain is checked the usual way, by the
        // domain; until then (and a day before it expires) it is pinned like any other.
        let public = row.get::<_, bool>(17)?;
        let self_signed = row.get::<_, String>(7)? == "self_signed" && !public;
        let obfs: String = row.get(10)?;
        let name: String = row.get(1)?;
        let limited: bool = row.get(11)?;
        let host: String = row.get(2)?;
        // A self-signed node is checked by its pins, or by its certificate and the name it is
        // made out to; the owner may let apps that can do neither connect unchecked.
        let identity = if self_signed {
            let names: String = row.get(14)?;
            Identity {
                certificate: row.get(13)?,
                name: identity::check_name(&names, &sni, &host).map(str::to_owned),
                unverified: row.get(15)?,
            }
        } else {
            Identity::default()
        };
        // The domain the node may hold a public certificate for (the owner's, or the one it
        // still says it has once the owner dropped it).
        let held: String = row.get(18)?;
        let sni = if public {
            Some(domain)
        } else if !domain.is_empty() || !held.is_empty() {
            // Pinned while the node may hold a public certificate: the name its own is made
            // out to, never the domain (which gets the public one).
            identity.name.clone().filter(|name| name.parse::<std::net::IpAddr>().is_err())
        } else {
            (!sni.is_empty()).then_some(sni)
        };
        Ok(Endpoint {
            name: if limited { limited_name(&name, row.get(12)?) } else { name },
            host,
            port: row.get(3)?,
            hop: (hop_start != 0).then_some(PortRange { start: hop_start, end: hop_end }),
            sni,
            cert_sha256: if self_signed { row.get(8)? } else { None },
            spki_sha256: if self_signed { row.get(9)? } else { None },
            insecure: self_signed,
            obfs: (!obfs.is_empty()).then_some(obfs),
            identity,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// What apps show for a node over its monthly cap until `until`.
fn limited_name(name: &str, until: u64) -> String {
    format!("{name}{LIMITED}{})", civil_date(until))
}

/// What [`limited_name`] puts between a node's name and the date.
const LIMITED: &str = " (traffic limit reached until ";

/// The node's own name in an endpoint's name (without what a cap reached adds).
pub(crate) fn node_name_of(endpoint: &str) -> &str {
    match endpoint.rfind(LIMITED) {
        Some(at) if endpoint.ends_with(')') && endpoint.len() - at == LIMITED.len() + 11 => &endpoint[..at],
        _ => endpoint,
    }
}

/// A rate in kbit/s as people read it: "1 Mbit/s", "0.5 Mbit/s".
fn mbit(kbps: u64) -> String {
    format!("{} Mbit/s", kbps as f64 / 1000.0)
}

/// The shares of a quota a user is warned at, as it crosses them, lowest first.
const QUOTA_WARNINGS: [u64; 2] = [80, 95];

/// Tells once that a user's usage crossed 80 % and 95 % of its quota, each share crossed its
/// own event, lowest first, even when one sweep crosses both (once over the quota, the status
/// change tells); a reset or a larger quota makes them tellable again.
#[allow(clippy::too_many_arguments)]
fn tell_quota(
    conn: &Connection,
    user: UserId,
    name: &str,
    quota: u64,
    used: u64,
    warned: u64,
    status: Status,
    now: u64,
) -> Result<(), Error> {
    let share = if quota == 0 { 0 } else { u64::try_from(u128::from(used) * 100 / u128::from(quota)).unwrap_or(100) };
    let reached = QUOTA_WARNINGS.into_iter().filter(|at| share >= *at).max().unwrap_or(0);
    if reached == warned {
        return Ok(());
    }
    conn.prepare_cached("UPDATE users SET quota_warned = ?2 WHERE id = ?1")?.execute(params![user, reached])?;
    if status != Status::OverQuota && share < 100 {
        for percent in QUOTA_WARNINGS.into_iter().filter(|at| (warned + 1..=reached).contains(at)) {
            let more = serde_json::json!({ "percent": percent, "used": used, "quota": quota });
            crate::store::events::user_event(conn, now, "user.near_quota", user, name, more)?;
        }
    }
    Ok(())
}

/// A user's snapshot signed: the nodes it reaches, and whether its entries in their sets
/// changed since it was last published.
struct Published {
    reach: Vec<NodeId>,
    entries_changed: bool,
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

/// Builds, seals and signs a user's snapshot; updates the stored status. Returns the nodes
/// the user reaches and whether its entries in their sets changed, or `None` when the user
/// no longer exists.
#[tracing::instrument(level = "debug", skip_all, fields(user = user))]
fn publish_user(conn: &Connection, signer: &Signer, user: UserId, now: u64) -> Result<Option<Published>, Error> {
    let row = conn
        .prepare_cached(
            "SELECT name, token_enc, credential_enc, quota, used_up, used_down, reset, expires_at, duration_secs,
                    started_at, enabled, status, quota_warned, telegram_binds
             FROM users WHERE id = ?1",
        )?
        .query_row([user], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, Vec<u8>>(1)?,
                row.get::<_, Vec<u8>>(2)?,
                row.get::<_, u64>(3)?,
                row.get::<_, u64>(4)?,
                row.get::<_, u64>(5)?,
                row.get::<_, String>(6)?,
                row.get::<_, u64>(7)?,
                row.get::<_, u64>(8)?,
                row.get::<_, u64>(9)?,
                row.get::<_, bool>(10)?,
                row.get::<_, String>(11)?,
                row.get::<_, u64>(12)?,
                row.get::<_, u64>(13)?,
            ))
        })
        .optional()?;
    let Some((
        name,
        token_enc,
        cred_enc,
        quota,
        up,
        down,
        reset,
        expires_at,
        duration,
        started,
        enabled,
        stored,
        warned,
        binds,
    )) = row
    else {
        return Ok(None);
    };
    let status = status_of(enabled, expires_at, quota, up.saturating_add(down), duration, started, now);
    if status_name(status) != stored {
        conn.prepare_cached("UPDATE users SET status = ?2 WHERE id = ?1")?
            .execute(params![user, status_name(status)])?;
        let told = match status {
            Status::Disabled => Some("user.disabled"),
            Status::Expired => Some("user.expired"),
            Status::OverQuota => Some("user.over_quota"),
            _ => None,
        };
        if let Some(kind) = told {
            let more = serde_json::json!({ "was": stored, "used": up.saturating_add(down), "quota": quota });
            crate::store::events::user_event(conn, now, kind, user, &name, more)?;
        }
    }
    tell_quota(conn, user, &name, quota, up.saturating_add(down), warned, status, now)?;
    let token_bytes = signer.vault.open(Purpose::Token, &token_enc)?;
    let token = SubToken::from_bytes(
        token_bytes.as_slice().try_into().map_err(|_| Error::Internal("a stored token has the wrong length".into()))?,
    );
    let credential = String::from_utf8(signer.vault.open(Purpose::Credential, &cred_enc)?.to_vec())
        .map_err(|_| Error::Internal("a stored credential is not text".into()))?;
    // A user slowed down rather than cut off can still connect: the profile says so and why.
    let mut profile = signer.profile.read().expect("profile lock").clone();
    let slowed = if status == Status::OverQuota { slow_rate(conn, user)? } else { 0 };
    if slowed > 0 {
        let notice =
            format!("Your traffic allowance is used up: your speed is limited to {} until it resets.", mbit(slowed));
        profile.announce = Some(match profile.announce.take() {
            Some(announce) if !announce.is_empty() => format!("{notice}\n{announce}"),
            _ => notice,
        });
    }
    // A device refused over the limit in the last day: the profile says so, and what to do.
    let (refused_at, limit) = device_refusal(conn, user)?;
    if refused_at + 86_400 > now && limit > 0 && status.can_connect() {
        let notice = format!(
            "Device limit reached: at most {limit} device{} at once, and another was refused. \
             Disconnect one you are not using, or ask for a higher limit.",
            if limit == 1 { "" } else { "s" }
        );
        profile.announce = Some(match profile.announce.take() {
            Some(announce) if !announce.is_empty() => format!("{notice}\n{announce}"),
            _ => notice,
        });
    }
    let snapshot = Snapshot {
        user,
        name,
        status: if slowed > 0 { Status::Active } else { status },
        used_up: up,
        used_down: down,
        quota,
        expires_at,
        reset: parse_reset(&reset).unwrap_or(ResetStrategy::Never),
        credential,
        endpoints: endpoints(conn, user)?,
        profile,
        hwid: crate::store::hwid::policy(conn, user, limit, now)?,
        alias: None,
        telegram: crate::store::telegram::taking_users(conn)?
            .map(|bot| TelegramLink { bot, code: crate::store::telegram::bind_code(&signer.vault, user, binds) }),
    };
    let content = sha256(&snapshot.encode());
    let body = || seal::seal(&snapshot, &token, &signer.recovery, &mut OsRng);
    put(
        conn,
        signer,
        &Item {
            kind: Kind::Snapshot,
            name: stream::snapshot(&token.hash()),
            audience: Audience::Edge,
            lifetime: SNAPSHOT_LIFETIME,
            content,
            body: &body,
            above: 0,
        },
        now,
        false,
    )?;
    // The user's aliases (old subscription paths) serve the same snapshot, each sealed under
    // its own token.
    for path in crate::store::aliases::paths_of_user(conn, user)? {
        let Some(alias) = SubToken::for_alias(&path) else { continue };
        let mut snapshot = snapshot.clone();
        snapshot.alias = Some(path);
        let content = sha256(&snapshot.encode());
        let body = || seal::seal(&snapshot, &alias, &signer.recovery, &mut OsRng);
        let item = Item {
            kind: Kind::Snapshot,
            name: stream::snapshot(&alias.hash()),
            audience: Audience::Edge,
            lifetime: SNAPSHOT_LIFETIME,
            content,
            body: &body,
            above: 0,
        };
        put(conn, signer, &item, now, false)?;
    }
    conn.prepare_cached("UPDATE users SET usage_dirty = 0 WHERE id = ?1 AND usage_dirty = 1")?.execute([user])?;
    Ok(Some(Published { reach: nodes_of_user(conn, user)?, entries_changed: entries_changed(conn, user)? }))
}

/// Two limits, the more generous (0 is none, the most generous of all).
fn generous(a: u64, b: u64) -> u64 {
    if a == 0 || b == 0 { 0 } else { a.max(b) }
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

/// Two limits, the stricter (0 is none).
fn stricter(a: u64, b: u64) -> u64 {
    if a == 0 || b == 0 { a.max(b) } else { a.min(b) }
}

/// One user's speed on one node, in kbit/s, from its own settings and those of the groups
/// it reaches the node through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Speed {
    up: u64,
    down: u64,
    /// Slowed to this when over quota (0: cut off).
    slow: u64,
}

impl Speed {
    /// The groups' defaults, the most generous of them (the user reaches the node through
    /// any of them).
    fn merge(self, other: Speed) -> Speed {
        Speed {
            up: generous(self.up, other.up),
            down: generous(self.down, other.down),
            slow: self.slow.max(other.slow),
        }
    }
}

/// A user's own settings over its groups': `(speed_up, speed_down, on_quota, slow_kbps)`.
fn own_over(group: Speed, own: (Option<u64>, Option<u64>, Option<String>, u64)) -> Speed {
    let (up, down, on_quota, slow) = own;
    Speed {
        up: up.unwrap_or(group.up),
        down: down.unwrap_or(group.down),
        slow: match on_quota.as_deref() {
            Some("slow") => slow,
            Some(_) => 0,
            None => group.slow,
        },
    }
}

/// The rule set a user is given on a node: its own, else that of the newest group (the
/// highest id) it reaches the node through that has one; `default`, the oldest, gives way to
/// any group made for a purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rules {
    own: Option<u16>,
    /// The group and its rule set.
    group: Option<(i64, u16)>,
}

impl Rules {
    fn merge(self, other: Rules) -> Rules {
        Rules { own: self.own, group: self.group.max(other.group) }
    }

    fn in_force(self) -> u16 {
        self.own.or(self.group.map(|(_, set)| set)).unwrap_or(0)
    }
}

/// A user's fair-use settings from the groups it reaches a node through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fair {
    /// The groups' device limit, the most generous (0: none, which wins).
    devices: u32,
    guard: wire::Guard,
}

impl Fair {
    fn merge(self, other: Fair) -> Fair {
        Fair {
            devices: if self.devices == 0 || other.devices == 0 { 0 } else { self.devices.max(other.devices) },
            // Refused only if every group the user reaches the node through refuses it.
            guard: wire::Guard {
                torrent: self.guard.torrent && other.guard.torrent,
                smtp: self.guard.smtp && other.guard.smtp,
            },
        }
    }
}

/// Devices each user (or `only` that user) has on nodes other than `node`, from their last
/// reports.
fn devices_elsewhere(conn: &Connection, node: NodeId, only: Option<UserId>) -> Result<HashMap<UserId, u32>, Error> {
    const QUERY: &str = "SELECT user_id, sum(devices) FROM presence WHERE node_id != ?1 AND devices > 0";
    let read = |row: &rusqlite::Row<'_>| -> rusqlite::Result<(UserId, u32)> { Ok((row.get(0)?, row.get(1)?)) };
    let rows: rusqlite::Result<HashMap<UserId, u32>> = match only {
        None => conn.prepare_cached(&format!("{QUERY} GROUP BY user_id"))?.query_map([node], read)?.collect(),
        Some(user) => conn
            .prepare_cached(&format!("{QUERY} AND user_id = ?2 GROUP BY user_id"))?
            .query_map(params![node, user], read)?
            .collect(),
    };
    Ok(rows?)
}

/// The credential set `node` should hold now: every user who can connect, in its groups,
/// and every user over quota whose quota action is to slow down, with their speed limits,
/// device allowances (the user's limit less the devices other nodes reported), kick counts
/// and abuse guards, and the owner's device policy when any user has an allowance.
pub(crate) fn credential_set(conn: &Connection, node: NodeId) -> Result<CredentialSet, Error> {
    let users = if node_limited(conn, node)? { Vec::new() } else { entries(conn, node, None)? };
    let set = CredentialSet::new(node, users).map_err(|e| Error::Internal(e.to_string()))?;
    let policy = policy_for(conn, &set)?;
    Ok(set.with_policy(policy))
}

/// Whether a node is over its monthly cap: it carries nobody until the month ends.
fn node_limited(conn: &Connection, node: NodeId) -> Result<bool, Error> {
    Ok(conn
        .prepare_cached("SELECT limited FROM nodes WHERE id = ?1")?
        .query_row([node], |row| row.get(0))
        .optional()?
        .unwrap_or(false))
}

/// The owner's device policy when any user of the set has a device allowance, else the
/// default (which keeps older set formats).
fn policy_for(conn: &Connection, set: &CredentialSet) -> Result<DevicePolicy, Error> {
    Ok(if set.users().iter().any(|entry| entry.devices.is_some()) {
        crate::store::device_policy(conn)?
    } else {
        DevicePolicy::default()
    })
}

/// The users of `node`'s set, sorted (see [`credential_set`]); with `only`, that user's
/// entry alone (none when it has no place in the set).
fn entries(conn: &Connection, node: NodeId, only: Option<UserId>) -> Result<Vec<CredEntry>, Error> {
    // A user in two of the node's groups comes twice: merged here, as SQLite's DISTINCT
    // would build a temporary b-tree of every row at each change.
    const QUERY: &str =
        "SELECT u.id, u.credential_hash, u.status = 'over_quota', u.speed_up, u.speed_down, u.on_quota, u.slow_kbps,
                g.speed_up, g.speed_down, CASE g.on_quota WHEN 'slow' THEN g.slow_kbps ELSE 0 END,
                u.device_limit, u.kick, g.device_limit, g.block_torrent, g.block_smtp,
                u.rule_set_id, g.id, g.rule_set_id
         FROM node_groups ng JOIN user_groups ug ON ug.group_id = ng.group_id JOIN users u ON u.id = ug.user_id
         JOIN groups g ON g.id = ng.group_id
         WHERE ng.node_id = ?1 AND u.status IN ('active', 'not_started', 'over_quota')";
    type Row =
        (UserId, Digest, bool, (Option<u64>, Option<u64>, Option<String>, u64), Speed, (Option<u32>, u32), Fair, Rules);
    let read = |row: &rusqlite::Row<'_>| -> rusqlite::Result<Row> {
        Ok((
            row.get(0)?,
            row.get(1)?,
            row.get(2)?,
            (row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?),
            Speed { up: row.get(7)?, down: row.get(8)?, slow: row.get(9)? },
            (row.get(10)?, row.get(11)?),
            Fair { devices: row.get(12)?, guard: wire::Guard { torrent: row.get(13)?, smtp: row.get(14)? } },
            Rules {
                own: row.get(15)?,
                group: row.get::<_, Option<u16>>(17)?.map(|set| (row.get(16).unwrap_or(0), set)),
            },
        ))
    };
    let mut rows = match only {
        None => conn.prepare_cached(QUERY)?.query_map([node], read)?.collect::<Result<Vec<Row>, _>>()?,
        Some(user) => conn
            .prepare_cached(&format!("{QUERY} AND u.id = ?2"))?
            .query_map(params![node, user], read)?
            .collect::<Result<Vec<Row>, _>>()?,
    };
    rows.sort_unstable_by_key(|row| row.0);
    let elsewhere = devices_elsewhere(conn, node, only)?;
    let mut users: Vec<CredEntry> = Vec::with_capacity(rows.len());
    let mut rows = rows.into_iter().peekable();
    while let Some((user, hash, over_quota, own, mut group, (own_devices, kick), mut fair, mut rules)) = rows.next() {
        while let Some(next) = rows.next_if(|next| next.0 == user) {
            group = group.merge(next.4);
            fair = fair.merge(next.6);
            rules = rules.merge(next.7);
        }
        let limit = own_devices.unwrap_or(fair.devices);
        let devices = (limit > 0).then(|| limit.saturating_sub(elsewhere.get(&user).copied().unwrap_or(0)));
        let speed = own_over(group, own);
        let (up, down) = if over_quota {
            if speed.slow == 0 {
                continue;
            }
            (stricter(speed.up, speed.slow), stricter(speed.down, speed.slow))
        } else {
            (speed.up, speed.down)
        };
        users.push(CredEntry {
            limit: SpeedLimit { up: up * 125, down: down * 125 },
            devices,
            kick,
            guard: fair.guard,
            rules: rules.in_force(),
            ..CredEntry::new(user, hash)
        });
    }
    Ok(users)
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

/// Signs `node`'s credential set if it changed (or `force`, to renew its expiry). Nodes that
/// were never enrolled get no set. A change that touches few users is signed as a delta to
/// the last full set ([`wire::CredDelta`], on `creds-delta/<node>`), which nodes apply to the
/// full set they hold; the whole set is signed again when the change since the last one
/// grows past [`delta_room`], when its edges or device policy change, and when `force`d.
/// The set and its delta share one line of versions: each is signed above both.
pub(crate) fn publish_creds(
    conn: &Connection,
    signer: &Signer,
    node: NodeId,
    now: u64,
    force: bool,
) -> Result<bool, Error> {
    publish_set(conn, signer, node, None, now, force)
}

/// [`publish_creds`] after a change to the entries of `users` alone (nothing else of the
/// node's set changed): the set is made from the last full set and the delta on it by
/// those users' entries, read again, instead of from every user (a change to one user of
/// 100,000 reads one user's rows). The whole set is built when it cannot be made so.
pub(crate) fn publish_creds_of(
    conn: &Connection,
    signer: &Signer,
    node: NodeId,
    users: &std::collections::BTreeSet<UserId>,
    now: u64,
) -> Result<bool, Error> {
    publish_set(conn, signer, node, Some(users), now, false)
}

/// The most users whose entries are read one by one to make a set from the last one; past
/// it, the whole set is built (one query).
const BY_ENTRIES_MAX: usize = 64;

#[tracing::instrument(level = "debug", skip_all, fields(node = node, force = force))]
fn publish_set(
    conn: &Connection,
    signer: &Signer,
    node: NodeId,
    touched: Option<&std::collections::BTreeSet<UserId>>,
    now: u64,
    force: bool,
) -> Result<bool, Error> {
    let enrolled: Option<(bool, bool)> = conn
        .prepare_cached("SELECT public_key IS NOT NULL, deltas FROM nodes WHERE id = ?1")?
        .query_row([node], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let Some((true, deltas)) = enrolled else {
        return Ok(false);
    };
    let started = std::time::Instant::now();
    let (full_name, delta_name) = (stream::creds(node), stream::creds_delta(node));
    let full = stream_state(conn, &full_name)?;
    let delta = stream_state(conn, &delta_name)?;
    let versions = |row: Option<StreamRow>| row.map_or(0, |(version, _, _)| version);
    let (full_version, delta_version) = (versions(full), versions(delta));
    let deltas = deltas && !force && edges::all_take_deltas(conn)?;
    // The full set nodes apply deltas to: its version and the digest of its body.
    let base = full.and_then(|(version, _, digest)| Some((version, digest?))).filter(|_| deltas);
    // The set from the last one by the users touched, with its change from the full set,
    // or else the set built from every user.
    let by_entries = match (touched, base) {
        (Some(users), Some(base)) if users.len() <= BY_ENTRIES_MAX => {
            let on = (delta_version > full_version).then_some(delta_name.as_str());
            by_entries(conn, signer, node, &full_name, base, on, users)?
        }
        _ => None,
    };
    let (set, diff) = match by_entries {
        Some((set, diff)) => (set, Some(diff)),
        None => {
            let set = credential_set(conn, node)?
                .with_edges(fallbacks(conn, signer)?)
                .map_err(|e| Error::Internal(format!("the edges nodes fall back to: {e}")))?
                .with_routing(crate::store::routing::sealed_for(conn, &signer.vault, node)?)
                .map_err(|e| Error::Internal(format!("node {node}'s routing: {e}")))?;
            (set, None)
        }
    };
    let built = started.elapsed();
    let encoded = set.encode();
    let content = sha256(&encoded);
    // What nodes make of the two streams now: the delta when it is the newer.
    let latest = if delta_version > full_version { delta } else { full };
    let made_by_entries = diff.is_some();
    let log = |signed: &str, bytes: usize| {
        tracing::debug!(
            users = set.users().len(),
            signed,
            by_entries = made_by_entries,
            bytes,
            build_micros = built.as_micros() as u64,
            total_micros = started.elapsed().as_micros() as u64,
            "node set checked"
        );
    };
    // (A deleted stream keeps no content.)
    if !force && latest.is_some_and(|(_, _, held)| held == Some(content)) {
        log("no", 0);
        return Ok(false);
    }
    let above = full_version.max(delta_version);
    let delta = match (base, diff) {
        (Some((version, base_digest)), Some(diff)) => (diff.len() <= delta_room(set.users().len()))
            .then_some(wire::CredDelta { node, base: version, base_digest, diff, result: content }),
        (Some((version, base_digest)), None) => delta_of(conn, &full_name, version, base_digest, &set, content)?,
        (None, _) => None,
    };
    if let Some(delta) = delta {
        let body = delta.encode();
        let item = Item {
            kind: Kind::CredDelta,
            name: delta_name,
            audience: Audience::Node(node),
            lifetime: CREDS_LIFETIME,
            content,
            body: &|| body.clone(),
            above,
        };
        put(conn, signer, &item, now, true)?;
        log("delta", body.len());
        return Ok(true);
    }
    let item = Item {
        kind: Kind::CredentialSet,
        name: full_name,
        audience: Audience::Node(node),
        lifetime: CREDS_LIFETIME,
        content,
        body: &|| encoded.clone(),
        above,
    };
    put(conn, signer, &item, now, true)?;
    log("whole", encoded.len());
    Ok(true)
}

/// `node`'s set made from the full set stored on `full_name` (`base`: its version and the
/// digest of its body) and the latest delta on it (stored on `delta`, when it is newer than
/// the full set), with the entries of `users` read again; and its change from the full set.
/// `None` when it cannot be made so, for the whole set to be built instead: no full set, a
/// delta on another, a node over its monthly cap, or edges or a device policy that changed.
pub(crate) fn by_entries(
    conn: &Connection,
    signer: &Signer,
    node: NodeId,
    full_name: &str,
    base: (u64, Digest),
    delta: Option<&str>,
    users: &std::collections::BTreeSet<UserId>,
) -> Result<Option<(CredentialSet, CredDiff)>, Error> {
    if node_limited(conn, node)? {
        return Ok(None);
    }
    let Some(full) = stored_set(conn, full_name)? else { return Ok(None) };
    let mut diff = match delta {
        None => CredDiff::default(),
        Some(name) => {
            let stored = envelope(conn, name)?;
            let body = stored.as_ref().and_then(|(_, bytes)| hearth_shared::envelope::Envelope::stored_body(bytes));
            match body.map(wire::CredDelta::decode) {
                Some(Ok(delta)) if delta.is_on(base.0, &base.1) => delta.diff,
                _ => return Ok(None),
            }
        }
    };
    for &user in users {
        let now = entries(conn, node, Some(user))?.pop();
        diff.restate(user, full.entry(user), now);
    }
    let set = full.apply(&diff).map_err(|e| Error::Internal(format!("a node's set from its last delta: {e}")))?;
    let routing = crate::store::routing::sealed_for(conn, &signer.vault, node)?;
    if set.edges() != fallbacks(conn, signer)?
        || set.policy() != policy_for(conn, &set)?
        || set.routing() != routing.as_deref()
    {
        return Ok(None);
    }
    // The tests hold every set made so to the set built from every user.
    #[cfg(debug_assertions)]
    {
        let built = credential_set(conn, node)?
            .with_edges(fallbacks(conn, signer)?)
            .and_then(|set| set.with_routing(routing))
            .expect("edges and routing checked above");
        assert_eq!(set, built, "node {node}'s set made by the entries of {users:?} is not the set built whole");
    }
    Ok(Some((set, diff)))
}

/// The most users a delta names before the whole set is signed again: a sixteenth of the
/// set, and at least 64 (a delta entry is about twice a set's, and every change re-signs the
/// delta since the last full set).
fn delta_room(users: usize) -> usize {
    (users / 16).max(64)
}

/// The delta from the full set stored on `name` (signed at `version`, its body hashing to
/// `base_digest`) to `set`, when one can say it within [`delta_room`].
fn delta_of(
    conn: &Connection,
    name: &str,
    version: u64,
    base_digest: Digest,
    set: &CredentialSet,
    content: Digest,
) -> Result<Option<wire::CredDelta>, Error> {
    let Some(base) = stored_set(conn, name)? else { return Ok(None) };
    Ok(wire::CredDelta::between(&base, version, base_digest, set, content)
        .filter(|delta| delta.diff.len() <= delta_room(base.users().len())))
}

/// The full set stored on `name` (`None`: none stored). Its body hashes to the digest kept
/// beside it: control wrote both in one transaction.
fn stored_set(conn: &Connection, name: &str) -> Result<Option<CredentialSet>, Error> {
    let Some((_, envelope)) = envelope(conn, name)? else { return Ok(None) };
    let body = hearth_shared::envelope::Envelope::stored_body(&envelope);
    Ok(body.and_then(|body| CredentialSet::decode(body).ok()))
}

/// The edges nodes fall back to when control does not answer, listed in their sets when
/// there are two or more, or one with its own API prefix (with only the `main` edge, a node
/// uses the edge control names in its answers, under edge.toml's prefix, and the set keeps
/// the format older nodes read): those whose links are offered first, then in the owner's
/// order.
fn fallbacks(conn: &Connection, signer: &Signer) -> Result<Vec<wire::EdgeAddress>, Error> {
    let mut list = edges::list(conn)?;
    if list.len() < 2 && list.iter().all(|edge| edge.api_prefix.is_none()) {
        return Ok(Vec::new());
    }
    list.sort_by_key(|edge| edge.state != edges::LinkState::Active);
    Ok(list
        .into_iter()
        .map(|edge| wire::EdgeAddress {
            url: edge.url,
            api_prefix: edge.api_prefix.unwrap_or_else(|| signer.api_prefix.clone()),
        })
        .collect())
}

/// After the edges changed: the edge settings (where links are served) and every enrolled
/// node's set (whom to fall back to) are signed again if that changed them. Returns how many
/// node sets it signed.
pub(crate) fn edges_changed(conn: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    publish_edge_settings(conn, signer, now)?;
    all_nodes_changed(conn, signer, now)
}

/// Signs every enrolled node's set again where it changed. Returns how many were signed.
pub(crate) fn all_nodes_changed(conn: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    let nodes: Vec<NodeId> = conn
        .prepare("SELECT id FROM nodes WHERE public_key IS NOT NULL")?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let mut signed = 0;
    for node in nodes {
        signed += usize::from(publish_creds(conn, signer, node, now, false)?);
    }
    Ok(signed)
}

/// What answers a node's pull, as the edge answers it ([`wire::creds_answer`]): the latest
/// delta when the node holds the full set under it, else the full set when newer than what
/// the node holds (`after`), else nothing.
pub(crate) fn node_creds(
    conn: &Connection,
    node: NodeId,
    after: u64,
    base: Option<u64>,
) -> Result<Option<Vec<u8>>, Error> {
    // A deleted stream keeps its version and digest, and no content.
    let full = stream_state(conn, &stream::creds(node))?.filter(|(_, _, content)| content.is_some());
    let delta = envelope(conn, &stream::creds_delta(node))?.and_then(|(version, bytes)| {
        let (of, on) = hearth_shared::envelope::Envelope::stored_body(&bytes).and_then(wire::CredDelta::base_of)?;
        (of == node).then_some((version, on, bytes))
    });
    let versions = delta.as_ref().map(|(version, on, _)| (*version, *on));
    Ok(match wire::creds_answer(after, base, full.map(|(version, _, _)| version), versions) {
        Some(wire::CredsAnswer::Delta) => delta.map(|(_, _, bytes)| bytes),
        Some(wire::CredsAnswer::Full) => envelope(conn, &stream::creds(node))?.map(|(_, bytes)| bytes),
        None => None,
    })
}

/// Keeps whether `node` takes deltas, as its pull says (`base` given or not). A node that
/// stopped taking them (it runs an older release again) while its delta is newer than its
/// full set gets the whole set signed again. Returns whether it signed.
pub(crate) fn takes_deltas(
    conn: &Connection,
    signer: &Signer,
    node: NodeId,
    takes: bool,
    now: u64,
) -> Result<bool, Error> {
    conn.prepare_cached("UPDATE nodes SET deltas = ?2 WHERE id = ?1 AND deltas != ?2")?
        .execute(params![node, takes])?;
    let version = |name: &str| Ok::<_, Error>(stream_state(conn, name)?.map_or(0, |(version, _, _)| version));
    if takes || version(&stream::creds_delta(node))? <= version(&stream::creds(node))? {
        return Ok(false);
    }
    publish_creds(conn, signer, node, now, true)
}

/// Signs `node`'s set again above `held`, the version the node says it holds, when that is
/// above the stream's (after a restore from a state older than what nodes saw). Returns
/// whether it signed.
pub(crate) fn raise_creds(
    conn: &Connection,
    signer: &Signer,
    node: NodeId,
    held: u64,
    now: u64,
) -> Result<bool, Error> {
    let name = stream::creds(node);
    let version = |name: &str| Ok::<_, Error>(stream_state(conn, name)?.map_or(0, |(version, _, _)| version));
    // The set and its delta share one line of versions.
    let current = version(&name)?.max(version(&stream::creds_delta(node))?);
    // Far above anything signed here is not a set this control's keys made: left alone.
    if held <= current || held > current.saturating_add(1 << 32) {
        return Ok(false);
    }
    conn.prepare_cached("UPDATE streams SET version = ?2 WHERE name = ?1")?.execute(params![name, held])?;
    publish_creds(conn, signer, node, now, true)
}

/// Signs the node's registration for the edge (its key, or `None` once removed).
pub(crate) fn publish_node_record(
    conn: &Connection,
    signer: &Signer,
    node: NodeId,
    key: Option<PublicKey>,
    now: u64,
) -> Result<(), Error> {
    let target = (Kind::NodeRecord, stream::node(node), Audience::Edge);
    put_plain(conn, signer, target, RECORD_LIFETIME, &wire::encode(&NodeRecord { node, key }), now, false)?;
    Ok(())
}

/// Signs `body` on a stream for the edge, when it changed.
pub(crate) fn put_signed(
    conn: &Connection,
    signer: &Signer,
    target: (Kind, String, Audience),
    body: &[u8],
    now: u64,
) -> Result<(), Error> {
    put_plain(conn, signer, target, RECORD_LIFETIME, body, now, false)?;
    Ok(())
}

/// Signs the owner's edge settings for the edges, as the database holds them (when they
/// changed): the User-Agent rules, where every edge serves links, and where aliases live.
pub(crate) fn publish_edge_settings(conn: &Connection, signer: &Signer, now: u64) -> Result<(), Error> {
    let settings = wire::EdgeSettings {
        ua_rules: crate::store::ua_rules(conn)?,
        links: edges::list(conn)?
            .into_iter()
            .filter_map(|edge| Some(wire::LinkBase { base: edge.link_base?, state: edge.state }))
            .collect(),
        alias_prefixes: crate::store::aliases::prefixes(conn)?,
    };
    let target = (Kind::EdgeSettings, wire::stream::EDGE_SETTINGS.to_owned(), Audience::Edge);
    put_plain(conn, signer, target, RECORD_LIFETIME, &settings.encode(), now, false)?;
    Ok(())
}

/// Signs the acknowledgement of a node's usage reports up to `seq` (or returns the one
/// already signed for it). Nodes get it in the answer to their report.
#[tracing::instrument(level = "debug", skip_all, fields(node = node, seq = seq))]
pub(crate) fn usage_ack(
    conn: &Connection,
    signer: &Signer,
    node: NodeId,
    seq: u64,
    now: u64,
) -> Result<Vec<u8>, Error> {
    let name = stream::usage_ack(node);
    let body = wire::encode(&hearth_shared::wire::UsageAck { node, seq });
    // Acknowledgements go to nodes in the answer to their report, and to the edge for nodes
    // that reach only the edge (a control at home behind NAT).
    put_plain(conn, signer, (Kind::UsageAck, name.clone(), Audience::Node(node)), RECORD_LIFETIME, &body, now, false)?;
    envelope(conn, &name)?
        .map(|(_, bytes)| bytes)
        .ok_or_else(|| Error::Internal("the acknowledgement was not stored".into()))
}

/// Signs every stream control publishes again, at its next version, with the signing key in
/// force (after a rotation: nodes and the edge then hold nothing signed by the retired key).
/// Each is rebuilt from control's own state (users, nodes, settings, rollouts), never from
/// a stored envelope: a stream that state does not make (a link no user holds, the set of a
/// node since removed, a name control never signs) is deleted at its next version instead.
/// Returns how many envelopes were signed.
#[tracing::instrument(level = "info", skip_all)]
pub(crate) fn resign_all(conn: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    let before: std::collections::BTreeMap<String, u64> = conn
        .prepare("SELECT name, version FROM streams WHERE envelope IS NOT NULL")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    // Forgetting what each stream's content was makes every publish below sign again.
    conn.execute("UPDATE streams SET body_sha256 = NULL", [])?;
    let users: std::collections::BTreeMap<Digest, UserId> = conn
        .prepare("SELECT token_hash, id FROM users")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let nodes: std::collections::BTreeMap<NodeId, (Option<[u8; 32]>, u64)> = conn
        .prepare("SELECT id, public_key, usage_seq FROM nodes")?
        .query_map([], |row| Ok((row.get(0)?, (row.get(1)?, row.get(2)?))))?
        .collect::<Result<_, _>>()?;
    for name in before.keys() {
        match name.parse::<Stream>() {
            Ok(Stream::Snapshot(hash)) if users.contains_key(&hash) => {
                publish_user(conn, signer, users[&hash], now)?;
            }
            Ok(Stream::Creds(node)) if nodes.contains_key(&node) => {
                publish_creds(conn, signer, node, now, true)?;
            }
            Ok(Stream::Node(node)) => {
                let key = nodes.get(&node).and_then(|(key, _)| key.and_then(|k| PublicKey::from_bytes(&k).ok()));
                publish_node_record(conn, signer, node, key, now)?;
            }
            Ok(Stream::UsageAck(node)) if nodes.get(&node).is_some_and(|(_, seq)| *seq > 0) => {
                usage_ack(conn, signer, node, nodes[&node].1, now)?;
            }
            Ok(Stream::EdgeSettings) => publish_edge_settings(conn, signer, now)?,
            Ok(Stream::Rollout) => publish_rollout(conn, signer, now)?,
            _ => delete_stream(conn, name)?,
        }
    }
    let after: Vec<(String, u64)> = conn
        .prepare("SELECT name, version FROM streams WHERE envelope IS NOT NULL")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    Ok(after.iter().filter(|(name, version)| before.get(name).is_some_and(|was| version > was)).count())
}

/// After the key records in the data directory changed (`keys rotate`, or a restore), bumps
/// `keys_serial` (a running control loads the new key at its next signature) and signs every
/// stream again; the next push hands the new records to the edge, the next pull to nodes.
/// Returns how many envelopes were signed, or `None` when the records had not changed.
pub(crate) fn settle_keys(conn: &Connection, signer: &Signer, now: u64) -> Result<Option<usize>, Error> {
    let chain = crate::keyring::chain(&signer.dir).map_err(|e| Error::Internal(format!("{e:#}")))?;
    let digest = hex::encode(sha256(&chain.concat()));
    let before = crate::store::get_state_text(conn, "keys_chain")?;
    if before.as_deref() == Some(digest.as_str()) {
        return Ok(None);
    }
    let serial = crate::store::get_state(conn, "keys_serial")? + 1;
    crate::store::set_state(conn, "keys_serial", serial)?;
    let signed = resign_all(conn, signer, now)?;
    // (The first records, at the first start, are no rotation.)
    if before.is_some() {
        let data = serde_json::json!({ "serial": serial, "records": chain.len(), "signed_again": signed });
        crate::store::events::emit(conn, now, "key.rotated", "keys", &data)?;
    }
    crate::store::set_state(conn, "keys_chain", digest)?;
    Ok(Some(signed))
}

/// The latest envelope of a stream, if it has one.
pub(crate) fn envelope(conn: &Connection, name: &str) -> Result<Option<(u64, Vec<u8>)>, Error> {
    let row: Option<(u64, Option<Vec<u8>>)> = conn
        .prepare_cached("SELECT version, envelope FROM streams WHERE name = ?1")?
        .query_row([name], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    Ok(row.and_then(|(version, envelope)| envelope.map(|e| (version, e))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::users::status_of;

    /// A limited node's endpoint name gives back the node's name, and only such a name.
    #[test]
    fn a_limited_name_gives_back_the_node() {
        let limited = limited_name("Frankfurt", 1_796_083_200);
        assert_eq!(limited, "Frankfurt (traffic limit reached until 2026-12-01)");
        assert_eq!(node_name_of(&limited), "Frankfurt");
        for plain in ["Frankfurt", "A (traffic limit reached until soon)", "B (traffic limit reached until 2026-12-01"]
        {
            assert_eq!(node_name_of(plain), plain);
        }
    }

    #[test]
    fn status_order() {
        assert_eq!(status_of(false, 1, 1, 5, 0, 0, 10), Status::Disabled);
        assert_eq!(status_of(true, 10, 1, 5, 0, 0, 10), Status::Expired);
        assert_eq!(status_of(true, 11, 5, 5, 0, 0, 10), Status::OverQuota);
        assert_eq!(status_of(true, 0, 0, 5, 100, 0, 10), Status::NotStarted);
        assert_eq!(status_of(true, 0, 6, 5, 100, 3, 10), Status::Active);
    }
}
