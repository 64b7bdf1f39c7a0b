//! The streams after a restore: seeded with the versions the edge holds, so that everything
//! signed from then on is above them, and every user, credential set, node record and the edge
//! settings signed again.

use hearth_shared::keys::PublicKey;
use hearth_shared::wire::NodeId;
use rusqlite::{Connection, params};

use super::screen::Screened;
use crate::error::Error;
use crate::publish::{self, Signer};

/// The kept envelopes become the streams' current versions (and deletions their deleted
/// versions), so everything signed from now on is above what the edge and nodes hold. A
/// stream the archive holds newer keeps the archive's.
pub(super) fn seed_streams(tx: &Connection, screened: &Screened) -> Result<(), Error> {
    let mut insert = tx.prepare(
        "INSERT INTO streams (name, version, digest, body_sha256, envelope, expires, seq)
         VALUES (?1, ?2, ?3, NULL, ?4, 0, (SELECT ifnull(max(seq), 0) + 1 FROM streams))
         ON CONFLICT (name) DO UPDATE SET version = excluded.version, digest = excluded.digest,
           body_sha256 = NULL, envelope = excluded.envelope, seq = excluded.seq
         WHERE excluded.version > streams.version",
    )?;
    for kept in &screened.kept {
        insert.execute(params![kept.stream, kept.version, kept.digest, kept.bytes])?;
    }
    for (name, version) in &screened.deleted {
        insert.execute(params![name, version, None::<Vec<u8>>, None::<Vec<u8>>])?;
    }
    Ok(())
}

/// Signs every user, credential set, node record and the edge settings again.
pub(super) fn republish(tx: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    let mut signed = publish::republish_users(tx, signer, now)?;
    let nodes: Vec<(NodeId, Option<[u8; 32]>)> = tx
        .prepare("SELECT id, public_key FROM nodes")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (node, key) in nodes {
        signed += usize::from(publish::publish_creds(tx, signer, node, now, true)?);
        let key = key.and_then(|k| PublicKey::from_bytes(&k).ok());
        if key.is_some() {
            publish::publish_node_record(tx, signer, node, key, now)?;
            signed += 1;
        }
    }
    publish::publish_edge_settings(tx, signer, now)?;
    Ok(signed + 1)
}
