//! The small streams: a node's registration, the owner's edge settings, the rollout of a
//! release and the acknowledgements of a node's usage reports.

use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::keys::PublicKey;
use hearth_shared::wire::{self, NodeId, NodeRecord, stream};
use rusqlite::Connection;

use super::signer::Signer;
use super::streams::put_plain;
use crate::error::Error;
use crate::store::streams::envelope;
use crate::store::{edges, releases};

/// How long a node record is valid.
const RECORD_LIFETIME: u64 = 10 * 365 * 86_400;

/// Signs the rollout stream: the newest rollout's release and the nodes told to run it (the
/// edge tells nodes that reach only it).
pub(crate) fn publish_rollout(conn: &Connection, signer: &Signer, now: u64) -> Result<(), Error> {
    let release = releases::newest_rollout(conn)?;
    let nodes = releases::told_to_run(conn, release)?;
    let body = wire::encode(&hearth_shared::release::Rollout { release, nodes });
    put_signed(conn, signer, (Kind::Rollout, stream::ROLLOUT.to_owned(), Audience::Edge), &body, now)
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
fn put_signed(
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
