//! The signed streams control keeps: each stream's latest envelope in `streams`
//! ([`crate::store::streams`]), signed at the stream's next version when its content changed,
//! with the order of its change (`seq`) that every edge is pushed by.

use hearth_shared::Digest;
use hearth_shared::envelope::{Audience, Draft, Kind};
use hearth_shared::sha256;
use rusqlite::Connection;

use super::signer::Signer;
use crate::error::Error;
use crate::store::streams::{Signed, put_envelope, stream_state};

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
    let signed = Signed {
        name: &item.name,
        version,
        digest: envelope.digest().0,
        content: item.content,
        envelope: &bytes,
        expires: now + item.lifetime,
    };
    put_envelope(conn, &signed)?;
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
