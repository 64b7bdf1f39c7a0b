//! What a change must have published before its transaction commits: the store's functions
//! that change users and nodes say here what they touched, and [`crate::publish::changes`]
//! signs it (see [`crate::users`] and [`crate::nodes`], which run the two in one transaction).
//! The store never publishes itself.

use std::collections::BTreeSet;

use hearth_shared::keys::PublicKey;
use hearth_shared::wire::{NodeId, UserId};
use rusqlite::Connection;

use crate::error::Error;

/// The users, nodes and streams a transaction changed, to publish before it commits.
#[derive(Default)]
pub(crate) struct Changes {
    /// Users whose snapshot must be signed again.
    pub(crate) users: BTreeSet<UserId>,
    /// Nodes whose credential set must be built again (the node changed, or who it carries).
    pub(crate) nodes: BTreeSet<NodeId>,
    /// Nodes the changed users reach (before and after the change): their sets are checked
    /// only when a user's entry in them changed (a quota or a name changes no set).
    pub(crate) reach: BTreeSet<NodeId>,
    /// Nodes whose sets must be checked for the entries of `entries` alone.
    pub(crate) creds: BTreeSet<NodeId>,
    /// The users whose entries in node sets the change may have changed: a set that changes
    /// by them alone is made from the last one by their entries (see
    /// [`crate::publish::changes`]).
    pub(crate) entries: BTreeSet<UserId>,
    /// Node key records to sign: the node and its key (`None`: the node is gone).
    pub(crate) node_records: Vec<(NodeId, Option<PublicKey>)>,
    /// Users of `users` made in this change with the same settings in the same groups (a bulk
    /// create's): the nodes they reach are in `reach` already, and their snapshots share what
    /// the first's (the smallest id) reads.
    pub(crate) alike: BTreeSet<UserId>,
    /// Streams to withdraw from the edges (a deleted user's snapshot, say).
    pub(crate) gone: Vec<String>,
    /// The edge's settings (aliases, rules) must be signed again.
    pub(crate) edge_settings: bool,
}

impl Changes {
    /// The user's snapshot must be signed again, and the sets of the nodes it can reach
    /// checked if its entry in them changed (call before and after a change of the user's
    /// groups).
    pub(crate) fn user(&mut self, conn: &Connection, user: UserId) -> Result<(), Error> {
        self.users.insert(user);
        self.entries.insert(user);
        self.reach.extend(nodes_of_user(conn, user)?);
        Ok(())
    }

    /// As [`Changes::user`], for a user made in this change with the same settings in the
    /// same groups as `first`, which was noted before it (a bulk create's users).
    pub(crate) fn user_alike(&mut self, first: UserId, user: UserId) {
        self.alike.insert(first);
        self.users.insert(user);
        self.entries.insert(user);
        self.alike.insert(user);
    }

    /// The sets of the nodes the user can reach must be checked (its allowance or kick
    /// count changed), not its snapshot.
    pub(crate) fn creds_of_user(&mut self, conn: &Connection, user: UserId) -> Result<(), Error> {
        self.entries.insert(user);
        self.creds.extend(nodes_of_user(conn, user)?);
        Ok(())
    }

    /// The node's set must be checked (its groups changed, or it enrolled).
    pub(crate) fn node(&mut self, node: NodeId) {
        self.nodes.insert(node);
    }

    /// Every user who can reach `node` (its endpoint changed) must be signed again.
    pub(crate) fn users_of_node(&mut self, conn: &Connection, node: NodeId) -> Result<(), Error> {
        let mut query = conn.prepare_cached(
            "SELECT DISTINCT ug.user_id FROM node_groups ng JOIN user_groups ug ON ug.group_id = ng.group_id
             WHERE ng.node_id = ?1",
        )?;
        for user in query.query_map([node], |row| row.get(0))? {
            self.users.insert(user?);
        }
        self.nodes.insert(node);
        Ok(())
    }

    /// A node's key record must be signed (`None`: the node is removed).
    pub(crate) fn node_record(&mut self, node: NodeId, key: Option<PublicKey>) {
        self.node_records.push((node, key));
    }

    /// A stream must be withdrawn.
    pub(crate) fn gone(&mut self, stream: String) {
        self.gone.push(stream);
    }

    /// The edge's settings must be signed again.
    pub(crate) fn edge_settings(&mut self) {
        self.edge_settings = true;
    }
}

/// The nodes a user reaches through its groups.
pub(crate) fn nodes_of_user(conn: &Connection, user: UserId) -> Result<Vec<NodeId>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT DISTINCT ng.node_id FROM user_groups ug JOIN node_groups ng ON ng.group_id = ug.group_id
         WHERE ug.user_id = ?1",
    )?;
    let nodes = query.query_map([user], |row| row.get(0))?.collect::<Result<_, _>>()?;
    Ok(nodes)
}
