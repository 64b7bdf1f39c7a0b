//! The signed streams control keeps: each stream's latest envelope in `streams`, signed at
//! the stream's next version when its content changed, with the order of its change (`seq`)
//! that every edge is pushed by.

use hearth_shared::Digest;
use hearth_shared::envelope::{Audience, Draft, Kind};
use hearth_shared::sha256;
use rusqlite::{Connection, OptionalExtension as _, params};

use super::signer::Signer;
use crate::error::Error;
use crate::store::edges;

/// A stream's stored version, envelope digest (none once deleted) and content digest.
pub(super) type StreamRow = (u64, Option<Digest>, Option<Digest>);

/// The stored state of a stream.
pub(super) fn stream_state(conn: &Connection, name: &str) -> Result<Option<StreamRow>, Error> {
    let row = conn
        .prepare_cached("SELECT version, digest, body_sha256 FROM streams WHERE name = ?1")?
        .query_row([name], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    Ok(row)
}

/// What to sign on a stream.
pub(super) struct Item<'a> {
    pub(super) kind: Kind,
    pub(super) name: String,
    pub(super) audience: Audience,
    pub(super) lifetime: u64,
    /// A digest of the content (before sealing): unchanged content is not signed again.
    pub(super) content: Digest,
    /// Makes the body.
    pub(super) body: &'a dyn Fn() -> Vec<u8>,
    /// The version must be above this one as well as above the stream's (a node's set and
    /// its delta share one line of versions).
    pub(super) above: u64,
}

/// Signs `item` at the stream's next version unless its content is unchanged (and `force`
/// is off), stores it and queues it for the edge. Returns whether it signed.
pub(super) fn put(conn: &Connection, signer: &Signer, item: &Item<'_>, now: u64, force: bool) -> Result<bool, Error> {
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
pub(super) fn put_plain(
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

/// The latest envelope of a stream, if it has one.
pub(crate) fn envelope(conn: &Connection, name: &str) -> Result<Option<(u64, Vec<u8>)>, Error> {
    let row: Option<(u64, Option<Vec<u8>>)> = conn
        .prepare_cached("SELECT version, envelope FROM streams WHERE name = ?1")?
        .query_row([name], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    Ok(row.and_then(|(version, envelope)| envelope.map(|e| (version, e))))
}
