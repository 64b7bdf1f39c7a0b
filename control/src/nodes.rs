//! Changes to nodes and groups, each published in the caller's transaction (as
//! [`crate::users`] does for users): edits, enrollment, removal, the nodes' usage reports
//! and presence, and the monthly caps.

use hearth_shared::wire::NodeId;
use rusqlite::Connection;

use crate::error::Error;
use crate::publish::{self, Signer};
use crate::store;
use crate::store::nodes::{EnrollRequest, Enrolled, GroupInput, GroupView, NodeInput, NodeView, UsageOutcome};

/// Changes a node's settings; users who reach it get new snapshots.
pub(crate) fn update(
    conn: &Connection,
    signer: &Signer,
    actor: &str,
    id: NodeId,
    input: &NodeInput,
    now: u64,
) -> Result<NodeView, Error> {
    publish::changed(conn, signer, now, |changes| store::nodes::update(conn, changes, actor, id, input, now))?;
    store::nodes::get(conn, id)
}

/// Starts a new cap month for every node whose month ended: nothing carried yet, and not
/// limited; their users are signed again (the node is back). Returns how many nodes.
pub(crate) fn roll_quotas(conn: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    publish::changed(conn, signer, now, |changes| store::nodes::roll_quotas(conn, changes, now))
}

/// Removes a node: the edge forgets its key, its users' snapshots drop it.
pub(crate) fn delete(conn: &Connection, signer: &Signer, actor: &str, id: NodeId, now: u64) -> Result<(), Error> {
    publish::changed(conn, signer, now, |changes| store::nodes::delete(conn, changes, actor, id, now))
}

/// Registers a node's key in exchange for its one-time token.
pub(crate) fn enroll(conn: &Connection, signer: &Signer, request: &EnrollRequest, now: u64) -> Result<Enrolled, Error> {
    publish::changed(conn, signer, now, |changes| store::nodes::enroll(conn, changes, request, now))
}

/// Keeps a node's (new) self-signed certificate, and what it says of its public one; its
/// users get snapshots that check what they should. Returns whether the self-signed one was
/// new.
pub(crate) fn register_certificate(
    conn: &Connection,
    signer: &Signer,
    node: NodeId,
    certificate: &store::identity::Certificate,
    acme: Option<&store::identity::AcmeReport>,
    now: u64,
) -> Result<bool, Error> {
    publish::changed(conn, signer, now, |changes| {
        let new = store::identity::register(conn, changes, node, certificate, now)?;
        if let Some(acme) = acme {
            store::identity::report_acme(conn, changes, node, acme, now)?;
        }
        Ok(new)
    })
}

/// Brings nodes' public certificates in line with the time (see
/// [`store::identity::sweep`]). Returns how many nodes changed.
pub(crate) fn sweep_certificates(conn: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    publish::changed(conn, signer, now, |changes| store::identity::sweep(conn, changes, now))
}

/// Verifies and applies a node's signed usage report exactly once. Reports must come in
/// order (the node keeps every report until it is acknowledged); a gap is refused.
pub(crate) fn apply_usage(
    conn: &Connection,
    signer: &Signer,
    node: NodeId,
    bytes: &[u8],
    now: u64,
) -> Result<UsageOutcome, Error> {
    publish::changed(conn, signer, now, |changes| {
        store::nodes::apply_usage(conn, signer.root, changes, node, bytes, now)
    })
}

/// Forgets who is on nodes that have not reported for [`crate::store::presence::PRESENCE_TTL`]:
/// their users' devices stop counting against them elsewhere. Returns how many nodes.
pub(crate) fn expire_presence(conn: &Connection, signer: &Signer, now: u64) -> Result<usize, Error> {
    publish::changed(conn, signer, now, |changes| store::nodes::expire_presence(conn, changes, now))
}

/// Renames a group, changes its note or its defaults (membership is set on users and
/// nodes); publishes its users and nodes again when a default changed.
pub(crate) fn update_group(
    conn: &Connection,
    signer: &Signer,
    actor: &str,
    id: i64,
    input: &GroupInput,
    now: u64,
) -> Result<GroupView, Error> {
    publish::changed(conn, signer, now, |changes| store::nodes::update_group(conn, changes, actor, id, input, now))
}

/// Deletes a group: its users lose its nodes.
pub(crate) fn delete_group(conn: &Connection, signer: &Signer, actor: &str, id: i64, now: u64) -> Result<(), Error> {
    publish::changed(conn, signer, now, |changes| store::nodes::delete_group(conn, changes, actor, id, now))
}
