//! The streams after a restore: seeded with the versions the edge holds, so that everything
//! signed from then on is above them, and every user, credential set, node record and the edge
//! settings signed again.

use hearth_shared::keys::PublicKey;
use rusqlite::Connection;

use super::screen::Screened;
use crate::error::Error;
use crate::publish::{self, Signer};
use crate::store::restoring::{self, Seed};

/// The kept envelopes become the streams' current versions (and deletions their deleted
/// versions), so everything signed from now on is above what the edge and nodes hold. A
/// stream the archive holds newer keeps the archive's.
pub(super) fn seed_streams(tx: &Connection, screened: &Screened) -> Result<(), Error> {
    let kept = screened.kept.iter().map(|kept| Seed {
        name: &kept.stream,
        version: kept.version,
        digest: Some(&kept.digest),
        envelope: Some(&kept.bytes),
    });
    let deleted =
        screened.deleted.iter().map(|(name, version)| Seed { name, version: *version, digest: None, envelope: None });
    restoring::seed_streams(tx, kept.chain(deleted))
}

/// Signs every user, credential set, node record and the edge settings again.
pub(super) fn republish(tx: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    let mut signed = publish::republish_users(tx, signer, now)?;
    for restoring::NodeKey { id: node, public_key: key } in restoring::node_keys(tx)? {
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
