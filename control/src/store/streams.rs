//! The signed streams control keeps (`streams`): each stream's latest envelope with its
//! version, the digests of the envelope and of its content, and the order of its change
//! (`seq`) that every edge is pushed by. What is signed, and when, is [`crate::publish`]'s;
//! these functions only read and write rows.

use hearth_shared::Digest;
use rusqlite::{Connection, OptionalExtension as _, params};

use super::edges;
use crate::error::Error;

/// A stream's stored version, envelope digest (none once deleted) and content digest.
pub(crate) type StreamRow = (u64, Option<Digest>, Option<Digest>);

/// The stored state of a stream.
pub(crate) fn stream_state(conn: &Connection, name: &str) -> Result<Option<StreamRow>, Error> {
    let row = conn
        .prepare_cached("SELECT version, digest, body_sha256 FROM streams WHERE name = ?1")?
        .query_row([name], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    Ok(row)
}

/// An envelope signed on a stream, as it is stored.
pub(crate) struct Signed<'a> {
    pub(crate) name: &'a str,
    pub(crate) version: u64,
    /// The envelope's digest (the next version's `prev`).
    pub(crate) digest: Digest,
    /// A digest of the content (before sealing): unchanged content is not signed again.
    pub(crate) content: Digest,
    /// The envelope, encoded.
    pub(crate) envelope: &'a [u8],
    pub(crate) expires: u64,
}

/// Stores `signed` as its stream's latest envelope, queued for the edges after every change
/// stored before it.
pub(crate) fn put_envelope(conn: &Connection, signed: &Signed<'_>) -> Result<(), Error> {
    let seq = edges::next_seq(conn)?;
    conn.prepare_cached(
        "INSERT INTO streams (name, version, digest, body_sha256, envelope, expires, seq)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (name) DO UPDATE SET version = excluded.version, digest = excluded.digest,
           body_sha256 = excluded.body_sha256, envelope = excluded.envelope, expires = excluded.expires,
           seq = excluded.seq",
    )?
    .execute(params![
        signed.name,
        signed.version,
        signed.digest,
        signed.content,
        signed.envelope,
        signed.expires,
        seq
    ])?;
    Ok(())
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

/// The name and version of every stream that holds an envelope (not deleted).
pub(crate) fn signed_versions<C: FromIterator<(String, u64)>>(conn: &Connection) -> Result<C, Error> {
    Ok(conn
        .prepare("SELECT name, version FROM streams WHERE envelope IS NOT NULL")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?)
}

/// Forgets what every stream's content was: the next publish of each signs it again.
pub(crate) fn forget_contents(conn: &Connection) -> Result<(), Error> {
    conn.execute("UPDATE streams SET body_sha256 = NULL", [])?;
    Ok(())
}

/// Sets a stream's version to `version` (its next is signed above it).
pub(crate) fn set_version(conn: &Connection, name: &str, version: u64) -> Result<(), Error> {
    conn.prepare_cached("UPDATE streams SET version = ?2 WHERE name = ?1")?.execute(params![name, version])?;
    Ok(())
}
