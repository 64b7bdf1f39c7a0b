//! Nodes: their settings and what the API shows of them; adding, changing and removing one;
//! its enrollment tokens. What a node sends ([`super::enrollment`], [`super::usage_reports`],
//! [`super::presence`]), the groups that tie nodes to users ([`super::groups`]) and the checks
//! of a node's settings ([`super::node_input`]) have files of their own; what callers use of
//! them is named here too, so that they reach a node's store as `store::nodes`.

use hearth_shared::keys::PublicKey;
use hearth_shared::sha256;
use hearth_shared::wire::{NodeId, stream};
use rusqlite::{Connection, OptionalExtension as _, params};
use serde::{Deserialize, Serialize};

use super::changes::Changes;
use super::groups::group_ids;
use super::node_input::{check_domain, check_host, check_masquerade, check_text, check_tls, parse_hop};
use super::user_input::check_name;
use crate::error::Error;
use crate::secrets;
use crate::store::audit_log::audit;

pub(crate) use super::enrollment::{EnrollRequest, Enrolled, enroll, key_of};
pub(crate) use super::groups::{GroupInput, GroupView, create_group, delete_group, groups, update_group};
pub(crate) use super::node_input::{MAX_HOST, MAX_TEXT, NodeInput};
pub(crate) use super::presence::{expire_presence, online};
pub(crate) use super::usage_reports::{UsageOutcome, apply_usage, roll_quotas};

/// A node seen within this many seconds is online.
pub(crate) const NODE_ONLINE_SECS: u64 = 180;

/// How long an enrollment token works.
pub(crate) const ENROLL_LIFETIME: u64 = 24 * 3600;

/// What a node's traffic counts for, kept per mille and shown as a number (2, 0.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Multiplier(pub(crate) u64);

impl Serialize for Multiplier {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.0 as f64 / 1000.0)
    }
}

impl<'de> Deserialize<'de> for Multiplier {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Multiplier, D::Error> {
        Ok(Multiplier((f64::deserialize(deserializer)? * 1000.0).round() as u64))
    }
}

/// A node as the API shows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct NodeView {
    pub(crate) id: NodeId,
    pub(crate) name: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) hop: String,
    pub(crate) sni: String,
    pub(crate) tls: String,
    pub(crate) obfs: bool,
    pub(crate) masquerade: String,
    pub(crate) enrolled: bool,
    pub(crate) key_id: Option<String>,
    pub(crate) last_seen: u64,
    pub(crate) version: String,
    pub(crate) usage_seq: u64,
    pub(crate) groups: Vec<String>,
    pub(crate) created: u64,
    /// What its traffic counts for against users' quotas.
    pub(crate) multiplier: Multiplier,
    /// Its monthly traffic cap in bytes (0: none).
    pub(crate) quota: u64,
    /// The day of the month the cap's month starts.
    pub(crate) quota_day: u32,
    /// Bytes it carried this cap month (as measured, before the multiplier).
    pub(crate) quota_used: u64,
    /// When this cap month ends (0: no cap).
    pub(crate) quota_resets: u64,
    /// It reached its cap: it carries nobody until the month ends.
    pub(crate) limited: bool,
    /// Apps that can check nothing about its self-signed certificate connect unchecked.
    pub(crate) allow_unverified: bool,
    /// The SHA-256 of the self-signed certificate it registered (hex), what apps pin.
    pub(crate) cert_sha256: Option<String>,
    /// When that certificate expires (0: none registered).
    pub(crate) cert_expires: u64,
    /// Its domain (empty: none), for a certificate from a public CA by ACME.
    pub(crate) domain: String,
    /// Its public certificate, as the node last said.
    pub(crate) acme: AcmeView,
}

/// A node's public certificate, as the node last said.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct AcmeView {
    /// Apps check it the usual way now.
    pub(crate) public: bool,
    /// When the certificate the node serves expires (0: none yet).
    pub(crate) expires: u64,
    /// When it was issued.
    pub(crate) renewed: u64,
    /// Why the last renewal failed (empty: it did not).
    pub(crate) error: String,
    /// When.
    pub(crate) error_at: u64,
}

const VIEW_COLUMNS: &str = "n.id, n.name, n.host, n.port, n.hop_start, n.hop_end, n.sni, n.tls, n.obfs, n.masquerade,
    n.public_key, n.last_seen, n.version, n.usage_seq, n.created,
    (SELECT group_concat(g.name, char(31)) FROM (SELECT g.name FROM node_groups ng JOIN groups g ON g.id = ng.group_id
     WHERE ng.node_id = n.id ORDER BY g.name) g),
    n.multiplier, n.quota, n.quota_day, n.quota_used, n.quota_next, n.limited, n.allow_unverified, n.cert_sha256,
    n.cert_der, n.domain, n.acme_public, n.acme_not_after, n.acme_renewed, n.acme_error, n.acme_error_at";

fn view_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<NodeView> {
    let hop_start: u16 = row.get(4)?;
    let hop_end: u16 = row.get(5)?;
    let key: Option<[u8; 32]> = row.get(10)?;
    let groups: Option<String> = row.get(15)?;
    Ok(NodeView {
        id: row.get(0)?,
        name: row.get(1)?,
        host: row.get(2)?,
        port: row.get(3)?,
        hop: if hop_start == 0 { String::new() } else { format!("{hop_start}-{hop_end}") },
        sni: row.get(6)?,
        tls: row.get(7)?,
        obfs: !row.get::<_, String>(8)?.is_empty(),
        masquerade: row.get(9)?,
        enrolled: key.is_some(),
        key_id: key.and_then(|k| PublicKey::from_bytes(&k).ok()).map(|k| k.id().to_string()),
        last_seen: row.get(11)?,
        version: row.get(12)?,
        usage_seq: row.get(13)?,
        created: row.get(14)?,
        groups: groups.map(|g| g.split('\u{1f}').map(str::to_owned).collect()).unwrap_or_default(),
        multiplier: Multiplier(row.get(16)?),
        quota: row.get(17)?,
        quota_day: row.get(18)?,
        quota_used: row.get(19)?,
        quota_resets: row.get(20)?,
        limited: row.get(21)?,
        allow_unverified: row.get(22)?,
        cert_sha256: row.get::<_, Option<Vec<u8>>>(23)?.map(hex::encode),
        cert_expires: row
            .get::<_, Option<Vec<u8>>>(24)?
            .and_then(|der| super::identity::Certificate::from_der(&der).ok())
            .map_or(0, |cert| cert.not_after),
        domain: row.get(25)?,
        acme: AcmeView {
            public: row.get(26)?,
            expires: row.get(27)?,
            renewed: row.get(28)?,
            error: row.get(29)?,
            error_at: row.get(30)?,
        },
    })
}

/// One node.
pub(crate) fn get(conn: &Connection, id: NodeId) -> Result<NodeView, Error> {
    conn.prepare_cached(&format!("SELECT {VIEW_COLUMNS} FROM nodes n WHERE n.id = ?1"))?
        .query_row([id], view_of)
        .optional()?
        .ok_or(Error::NotFound("node"))
}

/// Every node.
pub(crate) fn list(conn: &Connection) -> Result<Vec<NodeView>, Error> {
    let nodes = conn
        .prepare_cached(&format!("SELECT {VIEW_COLUMNS} FROM nodes n ORDER BY n.id"))?
        .query_map([], view_of)?
        .collect::<Result<_, _>>()?;
    Ok(nodes)
}

/// A node's id by name.
pub(crate) fn id_by_name(conn: &Connection, name: &str) -> Result<NodeId, Error> {
    conn.query_row("SELECT id FROM nodes WHERE name = ?1", [name], |row| row.get(0))
        .optional()?
        .ok_or(Error::NotFound("node"))
}

/// Per node (or just `only`): how many users reach it through their groups, and its traffic
/// today (UTC).
pub(crate) fn reach(
    conn: &Connection,
    only: Option<u64>,
    now: u64,
) -> Result<std::collections::HashMap<u64, (u64, u64)>, Error> {
    let mut out = std::collections::HashMap::new();
    let mut users = conn.prepare_cached(
        "SELECT ng.node_id, count(DISTINCT ug.user_id) FROM node_groups ng JOIN user_groups ug ON ug.group_id = ng.group_id
         WHERE ?1 IS NULL OR ng.node_id = ?1 GROUP BY ng.node_id",
    )?;
    for row in users.query_map([only], |row| Ok((row.get(0)?, row.get(1)?)))? {
        let (node, count) = row?;
        out.entry(node).or_insert((0, 0)).0 = count;
    }
    let mut traffic = conn.prepare_cached(
        "SELECT node_id, up + down FROM node_usage_daily WHERE day = ?1 AND (?2 IS NULL OR node_id = ?2)",
    )?;
    for row in traffic.query_map(params![now / 86_400, only], |row| Ok((row.get(0)?, row.get(1)?)))? {
        let (node, bytes) = row?;
        out.entry(node).or_insert((0, 0)).1 = bytes;
    }
    Ok(out)
}

/// Adds a node; returns it and its one-time enrollment token.
pub(crate) fn create(conn: &Connection, actor: &str, input: &NodeInput, now: u64) -> Result<(NodeView, String), Error> {
    let name = check_name(input.name.as_deref().unwrap_or_default(), "node")?;
    let host = check_host(input.host.as_deref().unwrap_or_default())?;
    let port = input.port.filter(|p| *p != 0).unwrap_or(443);
    let (hop_start, hop_end) = parse_hop(input.hop.as_deref().unwrap_or_default())?;
    let tls = input.tls.clone().unwrap_or_else(|| "self_signed".to_owned());
    check_tls(&tls)?;
    let sni = check_text(input.sni.as_deref().unwrap_or_default(), "bad_sni", "sni")?;
    let obfs = check_text(input.obfs.as_deref().unwrap_or_default(), "bad_obfs", "obfs")?;
    let masquerade = check_masquerade(input.masquerade.as_deref().unwrap_or_default())?;
    let groups = group_ids(conn, input.groups.as_deref().unwrap_or(&["default".to_owned()]))?;
    let token = secrets::random_token();
    conn.execute(
        "INSERT INTO nodes (name, host, port, hop_start, hop_end, sni, tls, obfs, masquerade, enroll_hash,
                            enroll_expires, created)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![
            name,
            host,
            port,
            hop_start,
            hop_end,
            sni,
            tls,
            obfs,
            masquerade,
            sha256(token.as_bytes()),
            now + ENROLL_LIFETIME,
            now
        ],
    )
    .map_err(|e| Error::from(e).unique(&format!("a node named {name:?}")))?;
    let id: NodeId = conn.last_insert_rowid().try_into().expect("row ids are positive");
    for group in groups {
        conn.execute("INSERT INTO node_groups (node_id, group_id) VALUES (?1, ?2)", params![id, group])?;
    }
    set_traffic(conn, id, input, now)?;
    if let Some(allow) = input.allow_unverified {
        conn.execute("UPDATE nodes SET allow_unverified = ?2 WHERE id = ?1", params![id, allow])?;
    }
    let domain = check_domain(input.domain.as_deref().unwrap_or_default())?;
    conn.execute("UPDATE nodes SET domain = ?2 WHERE id = ?1", params![id, domain])?;
    audit(conn, now, actor, "node.create", &format!("node {id} ({name})"), &host)?;
    Ok((get(conn, id)?, token))
}

/// Changes a node's settings; users who reach it get new snapshots.
pub(crate) fn update(
    conn: &Connection,
    changes: &mut Changes,
    actor: &str,
    id: NodeId,
    input: &NodeInput,
    now: u64,
) -> Result<(), Error> {
    let before = get(conn, id)?;
    changes.users_of_node(conn, id)?;
    if let Some(name) = &input.name {
        let name = check_name(name, "node")?;
        conn.execute("UPDATE nodes SET name = ?2 WHERE id = ?1", params![id, name])
            .map_err(|e| Error::from(e).unique(&format!("a node named {name:?}")))?;
    }
    if let Some(host) = &input.host {
        conn.execute("UPDATE nodes SET host = ?2 WHERE id = ?1", params![id, check_host(host)?])?;
    }
    // The node process reads its port, hop range and Salamander password at enrollment:
    // changing them here alone would point every user at a door the node does not open.
    let (obfs_now, pending): (String, bool) =
        conn.query_row("SELECT obfs, enroll_hash IS NOT NULL FROM nodes WHERE id = ?1", [id], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
    let moves_port = input.port.is_some_and(|p| p != before.port);
    let moves_obfs = input.obfs.as_deref().is_some_and(|o| o.trim() != obfs_now);
    let moves_hop = match &input.hop {
        Some(hop) => parse_hop(hop)? != parse_hop(&before.hop)?,
        None => false,
    };
    let moves_masquerade = match &input.masquerade {
        Some(masquerade) => check_masquerade(masquerade)? != before.masquerade,
        None => false,
    };
    // A node takes its domain at enrollment too; dropping it needs nothing of the node (its
    // links pin its own certificate again at once).
    let moves_domain = match &input.domain {
        Some(domain) => {
            let domain = check_domain(domain)?;
            !domain.is_empty() && domain != before.domain
        }
        None => false,
    };
    if before.enrolled && !pending && (moves_port || moves_obfs || moves_hop || moves_masquerade || moves_domain) {
        return Err(Error::invalid(
            "needs_enrollment",
            "an enrolled node keeps the port, hop range, Salamander password, masquerade and domain it enrolled \
             with: make a new enrollment command first, then change them and enroll the node again with it",
        ));
    }
    if let Some(domain) = &input.domain {
        conn.execute("UPDATE nodes SET domain = ?2 WHERE id = ?1", params![id, check_domain(domain)?])?;
        super::identity::refresh_public(conn, changes, id, now)?;
    }
    if let Some(port) = input.port {
        if port == 0 {
            return Err(Error::invalid("bad_port", "port must be 1 to 65535"));
        }
        conn.execute("UPDATE nodes SET port = ?2 WHERE id = ?1", params![id, port])?;
    }
    if let Some(hop) = &input.hop {
        let (start, end) = parse_hop(hop)?;
        conn.execute("UPDATE nodes SET hop_start = ?2, hop_end = ?3 WHERE id = ?1", params![id, start, end])?;
    }
    if let Some(sni) = &input.sni {
        conn.execute("UPDATE nodes SET sni = ?2 WHERE id = ?1", params![id, check_text(sni, "bad_sni", "sni")?])?;
    }
    if let Some(tls) = &input.tls {
        check_tls(tls)?;
        conn.execute("UPDATE nodes SET tls = ?2 WHERE id = ?1", params![id, tls])?;
    }
    if let Some(obfs) = &input.obfs {
        conn.execute("UPDATE nodes SET obfs = ?2 WHERE id = ?1", params![id, check_text(obfs, "bad_obfs", "obfs")?])?;
    }
    if let Some(masquerade) = &input.masquerade {
        let masquerade = check_masquerade(masquerade)?;
        conn.execute("UPDATE nodes SET masquerade = ?2 WHERE id = ?1", params![id, masquerade])?;
    }
    set_traffic(conn, id, input, now)?;
    if let Some(allow) = input.allow_unverified {
        conn.execute("UPDATE nodes SET allow_unverified = ?2 WHERE id = ?1", params![id, allow])?;
    }
    if let Some(groups) = &input.groups {
        let ids = group_ids(conn, groups)?;
        conn.execute("DELETE FROM node_groups WHERE node_id = ?1", [id])?;
        for group in ids {
            conn.execute("INSERT INTO node_groups (node_id, group_id) VALUES (?1, ?2)", params![id, group])?;
        }
    }
    // What really changed (a field given the value it had is no change), from the views.
    let changed =
        super::audit_log::differences(&before, &get(conn, id)?, &["last_seen", "version", "usage_seq", "quota_used"]);
    if changed.is_empty() {
        return Ok(());
    }
    changes.users_of_node(conn, id)?;
    super::audit_log::audit_edit(conn, now, actor, "node.update", &format!("node {id} ({})", before.name), &changed)?;
    Ok(())
}

/// Sets a node's multiplier and monthly cap from `input`. Bytes count against a cap from when
/// it is set (a node without one counts none) until its month ends at midnight UTC on its
/// day; a node that no longer reaches its cap is not limited. Returns whether any was given.
fn set_traffic(conn: &Connection, id: NodeId, input: &NodeInput, now: u64) -> Result<bool, Error> {
    if let Some(multiplier) = input.multiplier {
        let permille = (multiplier * 1000.0).round();
        if !multiplier.is_finite() || !(1.0..=100_000.0).contains(&permille) {
            return Err(Error::invalid("bad_multiplier", "a multiplier is from 0.001 to 100"));
        }
        conn.execute("UPDATE nodes SET multiplier = ?2 WHERE id = ?1", params![id, permille as u64])?;
    }
    if let Some(day) = input.quota_day {
        if !(1..=28).contains(&day) {
            return Err(Error::invalid("bad_quota_day", "quota_day is a day of the month from 1 to 28"));
        }
        conn.execute("UPDATE nodes SET quota_day = ?2 WHERE id = ?1", params![id, day])?;
    }
    let capped_before: bool = conn.query_row("SELECT quota > 0 FROM nodes WHERE id = ?1", [id], |row| row.get(0))?;
    if let Some(quota) = input.quota {
        if quota > i64::MAX as u64 {
            return Err(Error::invalid("bad_quota", "quota is too large"));
        }
        conn.execute("UPDATE nodes SET quota = ?2 WHERE id = ?1", params![id, quota])?;
    }
    if input.quota.is_some() || input.quota_day.is_some() {
        let (quota, day, used): (u64, u32, u64) =
            conn.query_row("SELECT quota, quota_day, quota_used FROM nodes WHERE id = ?1", [id], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })?;
        let next = if quota == 0 { 0 } else { crate::clock::next_on_day(day, now) };
        // A cap set in the middle of its month counts what the node already carried since
        // the month began (its daily traffic), not from nothing.
        let used = match (quota, capped_before) {
            (0, _) => 0,
            (_, true) => used,
            (_, false) => conn.query_row(
                "SELECT coalesce(sum(up + down), 0) FROM node_usage_daily WHERE node_id = ?1 AND day >= ?2",
                params![id, crate::clock::last_on_day(day, now) / 86_400],
                |row| row.get::<_, i64>(0),
            )? as u64,
        };
        conn.execute(
            "UPDATE nodes SET quota_next = ?2, limited = ?3, quota_used = ?4 WHERE id = ?1",
            params![id, next, quota > 0 && used >= quota, used],
        )?;
    }
    Ok(input.multiplier.is_some() || input.quota.is_some() || input.quota_day.is_some())
}

/// Removes a node: the edge forgets its key, its users' snapshots drop it.
pub(crate) fn delete(conn: &Connection, changes: &mut Changes, actor: &str, id: NodeId, now: u64) -> Result<(), Error> {
    let before = get(conn, id)?;
    changes.users_of_node(conn, id)?;
    conn.execute("DELETE FROM nodes WHERE id = ?1", [id])?;
    if before.enrolled {
        changes.node_record(id, None);
    }
    changes.gone(stream::creds(id));
    changes.gone(stream::creds_delta(id));
    audit(conn, now, actor, "node.delete", &format!("node {id} ({})", before.name), "")?;
    Ok(())
}

/// A new one-time enrollment token for a node (to enroll it again, e.g. on a new server).
/// Makes a node's enrollment token anew; the one before it, if any, stops working. Returns
/// the token and whether an unexpired command was voided by it (the panel says so).
pub(crate) fn new_enroll_token(conn: &Connection, actor: &str, id: NodeId, now: u64) -> Result<(String, bool), Error> {
    let node = get(conn, id)?;
    let replaced: bool = conn.query_row(
        "SELECT enroll_hash IS NOT NULL AND enroll_expires > ?2 FROM nodes WHERE id = ?1",
        params![id, now],
        |row| row.get(0),
    )?;
    let token = secrets::random_token();
    conn.execute(
        "UPDATE nodes SET enroll_hash = ?2, enroll_expires = ?3 WHERE id = ?1",
        params![id, sha256(token.as_bytes()), now + ENROLL_LIFETIME],
    )?;
    audit(conn, now, actor, "node.enroll_token", &format!("node {id} ({})", node.name), "")?;
    Ok((token, replaced))
}

/// Marks a node as seen now.
pub(crate) fn seen(conn: &Connection, id: NodeId, now: u64) -> Result<(), Error> {
    conn.execute("UPDATE nodes SET last_seen = ?2 WHERE id = ?1 AND last_seen < ?2", params![id, now])?;
    Ok(())
}
