//! A node's credential set signed: built from every user, or made from the last full set by
//! the entries of the users a change touched, and signed whole or as a delta to the full set
//! the node holds; and what answers a node's pull.

use std::collections::BTreeSet;

use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::wire::{self, CredDiff, CredentialSet, NodeId, UserId, stream};
use hearth_shared::{Digest, sha256};
use rusqlite::Connection;

use super::entries::{credential_set, entries, policy_for};
use super::signer::Signer;
use super::streams::{Item, put};
use crate::error::Error;
use crate::store::cred_sets::{NodeSetting, node_limited, node_setting, set_takes_deltas};
use crate::store::edges;
use crate::store::streams::{StreamRow, envelope, set_version, stream_state};

/// How long a credential set is valid. Control re-signs sets well before (see
/// [`REFRESH_BEFORE`]); a node holding an expired set keeps serving it and raises an alarm.
pub(crate) const CREDS_LIFETIME: u64 = 30 * 86_400;

/// Sets that expire sooner than this are signed again by the sweep.
pub(crate) const REFRESH_BEFORE: u64 = 23 * 86_400;

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
    users: &BTreeSet<UserId>,
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
    touched: Option<&BTreeSet<UserId>>,
    now: u64,
    force: bool,
) -> Result<bool, Error> {
    let Some(NodeSetting { enrolled: true, deltas }) = node_setting(conn, node)? else {
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
                .with_edges(fallbacks(conn, &signer.api_prefix)?)
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
    users: &BTreeSet<UserId>,
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
    if set.edges() != fallbacks(conn, &signer.api_prefix)?
        || set.policy() != policy_for(conn, &set)?
        || set.routing() != routing.as_deref()
    {
        return Ok(None);
    }
    // The tests hold every set made so to the set built from every user.
    #[cfg(debug_assertions)]
    {
        let built = credential_set(conn, node)?
            .with_edges(fallbacks(conn, &signer.api_prefix)?)
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
/// order. `prefix` is edge.toml's API prefix, for the edges that have none of their own.
pub(crate) fn fallbacks(conn: &Connection, prefix: &str) -> Result<Vec<wire::EdgeAddress>, Error> {
    let mut list = edges::list(conn)?;
    if list.len() < 2 && list.iter().all(|edge| edge.api_prefix.is_none()) {
        return Ok(Vec::new());
    }
    list.sort_by_key(|edge| edge.state != edges::LinkState::Active);
    Ok(list
        .into_iter()
        .map(|edge| wire::EdgeAddress {
            url: edge.url,
            api_prefix: edge.api_prefix.unwrap_or_else(|| prefix.to_owned()),
        })
        .collect())
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
    set_takes_deltas(conn, node, takes)?;
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
    set_version(conn, &name, held)?;
    publish_creds(conn, signer, node, now, true)
}
