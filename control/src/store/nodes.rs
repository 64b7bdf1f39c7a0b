//! Nodes, groups, enrollment and usage reports.

use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::keys::PublicKey;
use hearth_shared::trust::{self, EnvelopeDigest, Expect, RoleKeys, StreamState, Trust, VerifyError};
use hearth_shared::wire::{self, NodeId, UsageReport, UserId, stream};
use hearth_shared::{Digest, sha256};
use rusqlite::{Connection, OptionalExtension as _, params};
use serde::{Deserialize, Serialize};

use super::changes::Changes;
use super::users::{status_name, status_of};
use crate::error::Error;
use crate::secrets;
use crate::store::audit_log::audit;
use crate::store::users::{Mbps, check_name, check_slow, group_ids};

/// A node seen within this many seconds is online.
pub(crate) const NODE_ONLINE_SECS: u64 = 180;

/// How long a node's report of who is on it counts: it reports at least every 5 minutes
/// while anyone is on it (see the node's agent), so a node silent for longer is taken to
/// have nobody (it is down, or cut off), and its users' devices count on other nodes again.
pub(crate) const PRESENCE_TTL: u64 = 11 * 60;

/// How long an enrollment token works.
pub(crate) const ENROLL_LIFETIME: u64 = 24 * 3600;
/// The longest host, in bytes (a DNS name's limit).
pub(crate) const MAX_HOST: usize = 253;
/// The longest text of a node or group (SNI, obfuscation password, masquerade, a group's
/// note), in bytes.
pub(crate) const MAX_TEXT: usize = 255;

/// A node's settings as the API and CLI give them.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodeInput {
    /// Shown to users in their apps.
    pub(crate) name: Option<String>,
    /// The public host name or IP address clients connect to.
    pub(crate) host: Option<String>,
    /// The UDP port.
    pub(crate) port: Option<u16>,
    /// Port hopping: `"20000-30000"`, or `""` for none.
    pub(crate) hop: Option<String>,
    /// The TLS server name clients send (empty: the host).
    pub(crate) sni: Option<String>,
    /// `self_signed` (clients pin the node's certificate) or `operator` (a CA-issued one).
    pub(crate) tls: Option<String>,
    /// The Salamander obfuscation password (empty: none).
    pub(crate) obfs: Option<String>,
    /// What a non-Hysteria visitor sees: empty for the built-in site, or a URL to proxy.
    pub(crate) masquerade: Option<String>,
    /// Groups (by name) whose users this node serves; new nodes default to `default`.
    pub(crate) groups: Option<Vec<String>>,
    /// What its traffic counts for against users' quotas: 2 counts each byte twice, 0.5 half
    /// (0.001 to 100; 1 by default).
    pub(crate) multiplier: Option<f64>,
    /// Its monthly traffic cap in bytes, up and down together (0: none).
    pub(crate) quota: Option<u64>,
    /// The day of the month (1 to 28, UTC) the cap's month starts.
    pub(crate) quota_day: Option<u32>,
    /// Let apps that can check nothing about a self-signed node connect to it unchecked
    /// (anyone on their path can then pose as the node to them). Off by default.
    pub(crate) allow_unverified: Option<bool>,
    /// The node's domain: it gets a certificate for it from a public CA by ACME, and apps
    /// check that one the usual way once it has it (empty: none).
    pub(crate) domain: Option<String>,
}

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

/// A node's domain: empty, or a DNS name a CA issues for.
fn check_domain(domain: &str) -> Result<String, Error> {
    let domain = domain.trim().to_ascii_lowercase();
    if domain.is_empty() || hearth_acme::is_domain(&domain) {
        return Ok(domain);
    }
    Err(Error::invalid("bad_domain", "domain must be empty or a DNS name (node1.example.net) that points at the node"))
}

fn check_host(host: &str) -> Result<String, Error> {
    let host = host.trim();
    let ok = !host.is_empty()
        && host.len() <= MAX_HOST
        && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    if !ok {
        return Err(Error::invalid("bad_host", "host must be a DNS name or an IP address"));
    }
    Ok(host.to_owned())
}

fn parse_hop(hop: &str) -> Result<(u16, u16), Error> {
    if hop.trim().is_empty() {
        return Ok((0, 0));
    }
    let bad = || Error::invalid("bad_hop", "hop must be a port range like 20000-30000 (start below end)");
    let (start, end) = hop.trim().split_once('-').ok_or_else(bad)?;
    let start: u16 = start.trim().parse().map_err(|_| bad())?;
    let end: u16 = end.trim().parse().map_err(|_| bad())?;
    if start == 0 || start >= end {
        return Err(bad());
    }
    // What a node opens at most (one socket a port).
    if end - start >= MAX_HOP_PORTS {
        return Err(Error::invalid("bad_hop", format!("a hop range holds at most {MAX_HOP_PORTS} ports")));
    }
    Ok((start, end))
}

/// The most ports a hop range holds (the node opens a socket for each).
const MAX_HOP_PORTS: u16 = 16_384;

/// A node's masquerade: empty (nginx's 404 page) or the `http(s)://` address of a web server
/// whose answers the node gives anyone without a credential.
fn check_masquerade(value: &str) -> Result<String, Error> {
    let value = check_text(value, "bad_masquerade", "masquerade")?;
    if value.is_empty() {
        return Ok(value);
    }
    let host = value.strip_prefix("https://").or_else(|| value.strip_prefix("http://")).map(|rest| {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        authority.rsplit_once('@').map_or(authority, |(_, host)| host)
    });
    match host {
        Some(host) if !host.is_empty() && !value.contains(char::is_whitespace) && !value.contains('@') => Ok(value),
        _ => Err(Error::invalid(
            "bad_masquerade",
            "masquerade is empty (a 404 page) or the http:// or https:// address of a web site to show",
        )),
    }
}

fn check_text(value: &str, code: &'static str, what: &str) -> Result<String, Error> {
    if value.len() > MAX_TEXT || value.chars().any(char::is_control) {
        return Err(Error::invalid(
            code,
            format!("{what} must be at most {MAX_TEXT} bytes, without control characters"),
        ));
    }
    Ok(value.trim().to_owned())
}

fn check_tls(tls: &str) -> Result<(), Error> {
    if tls != "self_signed" && tls != "operator" {
        return Err(Error::invalid("bad_tls", "tls must be self_signed or operator"));
    }
    Ok(())
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

/// Starts a new cap month for every node whose month ended: nothing carried yet, and not
/// limited; their users are signed again (the node is back). Returns how many nodes.
pub(crate) fn roll_quotas(conn: &Connection, changes: &mut Changes, now: u64) -> Result<usize, Error> {
    let due: Vec<(NodeId, u32)> = conn
        .prepare_cached("SELECT id, quota_day FROM nodes WHERE quota_next > 0 AND quota_next <= ?1")?
        .query_map([now], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (node, day) in &due {
        let was_limited: bool = conn.query_row("SELECT limited FROM nodes WHERE id = ?1", [node], |row| row.get(0))?;
        conn.execute(
            "UPDATE nodes SET quota_used = 0, limited = 0, quota_next = ?2 WHERE id = ?1",
            params![node, crate::clock::next_on_day(*day, now)],
        )?;
        if was_limited {
            changes.users_of_node(conn, *node)?;
        }
    }
    Ok(due.len())
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

/// What a node sends to enroll.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnrollRequest {
    /// The one-time token from `node enroll-command`.
    pub(crate) token: String,
    /// The node's public key.
    pub(crate) key: String,
    /// SHA-256 of the node's TLS certificate (self-signed nodes), hex.
    #[serde(default)]
    pub(crate) cert_sha256: Option<String>,
    /// SHA-256 of its public key (SPKI), hex.
    #[serde(default)]
    pub(crate) spki_sha256: Option<String>,
    /// Its self-signed certificate, PEM (nodes of earlier releases send only the two pins).
    #[serde(default)]
    pub(crate) certificate: Option<String>,
    /// The node's version.
    #[serde(default)]
    pub(crate) version: String,
}

fn parse_digest(value: Option<&str>) -> Result<Option<Digest>, Error> {
    value
        .map(|v| {
            hex::decode(v)
                .ok()
                .and_then(|d| <[u8; 32]>::try_from(d).ok())
                .ok_or_else(|| Error::invalid("bad_pin", "pins are 64 hex characters"))
        })
        .transpose()
}

/// What an enrolled node is told about itself.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Enrolled {
    /// Its id.
    pub(crate) node: NodeId,
    /// The UDP port it serves on.
    pub(crate) port: u16,
    /// Its Salamander password, if it uses one.
    pub(crate) obfs: Option<String>,
    /// The port range it also answers on (port hopping), as `"20000-30000"`.
    pub(crate) hop: Option<String>,
    /// The web site it shows anyone without a credential (none: nginx's 404 page).
    pub(crate) masquerade: Option<String>,
    /// The name its self-signed certificate is made out to: its SNI, else its host (what
    /// apps that check the certificate itself check), never its domain (empty: the node
    /// names it after itself).
    pub(crate) tls_name: String,
    /// Its domain, for a public certificate by ACME.
    pub(crate) domain: Option<String>,
}

/// Registers a node's key in exchange for its one-time token.
pub(crate) fn enroll(
    conn: &Connection,
    changes: &mut Changes,
    request: &EnrollRequest,
    now: u64,
) -> Result<Enrolled, Error> {
    let key: PublicKey =
        request.key.parse().map_err(|_| Error::invalid("bad_key", "key must be a Hearth public key"))?;
    let certificate = request.certificate.as_deref().map(super::identity::Certificate::from_pem).transpose()?;
    let cert = parse_digest(request.cert_sha256.as_deref())?;
    let spki = parse_digest(request.spki_sha256.as_deref())?;
    if let Some(certificate) = &certificate
        && (cert.is_some_and(|pin| pin != certificate.sha256) || spki.is_some_and(|pin| pin != certificate.spki_sha256))
    {
        return Err(Error::invalid("bad_pin", "the pins are not the certificate's"));
    }
    let version = check_text(&request.version, "bad_version", "version")?;
    let found: Option<(NodeId, String)> = conn
        .query_row(
            "SELECT id, name FROM nodes WHERE enroll_hash = ?1 AND enroll_expires > ?2",
            params![sha256(request.token.as_bytes()), now],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?;
    let Some((id, name)) = found else {
        return Err(Error::invalid("bad_enroll_token", "this enrollment token is unknown, used or expired"));
    };
    conn.execute(
        "UPDATE nodes SET public_key = ?2, cert_sha256 = ?3, spki_sha256 = ?4, version = ?5, enroll_hash = NULL,
                          enroll_expires = 0, last_seen = ?6, usage_seq = 0, usage_digest = NULL, cert_der = NULL,
                          cert_names = ''
         WHERE id = ?1",
        params![id, key.to_bytes(), cert, spki, version, now],
    )?;
    if let Some(certificate) = &certificate {
        super::identity::register(conn, changes, id, certificate, now)?;
    }
    changes.node_record(id, Some(key));
    changes.users_of_node(conn, id)?;
    // A node enrolled again starts a new usage stream: its old acknowledgement is deleted
    // (at the edge too), so the new node never takes it for its own.
    changes.gone(stream::usage_ack(id));
    audit(conn, now, "node", "node.enroll", &format!("node {id} ({name})"), &key.id().to_string())?;
    type Row = (u16, String, u16, u16, String, String, String, String);
    let (port, obfs, hop_start, hop_end, masquerade, sni, host, domain): Row = conn.query_row(
        "SELECT port, obfs, hop_start, hop_end, masquerade, sni, host, domain FROM nodes WHERE id = ?1",
        [id],
        |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?, row.get(7)?))
        },
    )?;
    let hop = (hop_start != 0).then(|| format!("{hop_start}-{hop_end}"));
    let masquerade = (!masquerade.is_empty()).then_some(masquerade);
    // The self-signed certificate is never made out to the domain: a client asking for the
    // domain gets the public certificate, one pinning the node's own asks for this name.
    let tls_name = [sni, host].into_iter().find(|name| !name.is_empty() && !name.eq_ignore_ascii_case(&domain));
    Ok(Enrolled {
        node: id,
        port,
        obfs: (!obfs.is_empty()).then_some(obfs),
        hop,
        masquerade,
        tls_name: tls_name.unwrap_or_default(),
        domain: (!domain.is_empty()).then_some(domain),
    })
}

/// A node's registered key.
pub(crate) fn key_of(conn: &Connection, id: NodeId) -> Result<Option<PublicKey>, Error> {
    let key: Option<Option<[u8; 32]>> =
        conn.query_row("SELECT public_key FROM nodes WHERE id = ?1", [id], |row| row.get(0)).optional()?;
    Ok(key.flatten().and_then(|k| PublicKey::from_bytes(&k).ok()))
}

/// Marks a node as seen now.
pub(crate) fn seen(conn: &Connection, id: NodeId, now: u64) -> Result<(), Error> {
    conn.execute("UPDATE nodes SET last_seen = ?2 WHERE id = ?1 AND last_seen < ?2", params![id, now])?;
    Ok(())
}

/// What became of a usage report.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum UsageOutcome {
    /// Applied now.
    Applied(u64),
    /// Applied before (a replay, or a resend after a lost acknowledgement): counted once.
    Duplicate(u64),
}

impl UsageOutcome {
    /// The highest sequence number applied for the node.
    pub(crate) fn acked(&self) -> u64 {
        match self {
            UsageOutcome::Applied(seq) | UsageOutcome::Duplicate(seq) => *seq,
        }
    }
}

/// Verifies and applies a node's signed usage report exactly once. Reports must come in
/// order (the node keeps every report until it is acknowledged); a gap is refused.
pub(crate) fn apply_usage(
    conn: &Connection,
    root: PublicKey,
    changes: &mut Changes,
    node: NodeId,
    bytes: &[u8],
    now: u64,
) -> Result<UsageOutcome, Error> {
    type Row = (Option<[u8; 32]>, u64, Option<[u8; 32]>);
    let row: Option<Row> = conn
        .query_row("SELECT public_key, usage_seq, usage_digest FROM nodes WHERE id = ?1", [node], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()?;
    let Some((Some(key), applied, digest)) = row else {
        return Err(Error::invalid("unknown_node", "no enrolled node has this id"));
    };
    let key = PublicKey::from_bytes(&key).map_err(|_| Error::Internal("a stored node key is invalid".into()))?;
    let mut trust = Trust::new(RoleKeys::single(root));
    trust.set_node(node, key);
    let name = stream::usage(node);
    let stored = digest.map(|digest| StreamState { version: applied, digest: EnvelopeDigest(digest) });
    let expect = Expect { kind: Kind::UsageReport, audience: Audience::Control, stream: &name };
    let verified = match trust::verify(bytes, &trust, &expect, stored.as_ref(), now) {
        Ok(verified) => verified,
        Err(VerifyError::Stale { .. }) => return Ok(UsageOutcome::Duplicate(applied)),
        Err(e) => return Err(Error::invalid("refused", format!("usage report refused: {e}"))),
    };
    let seq = verified.envelope.header.version;
    // A restore may raise the applied sequence to what the edge acknowledged, without the
    // report's digest: anything at or below it was counted already.
    if verified.unchanged || seq <= applied {
        return Ok(UsageOutcome::Duplicate(applied));
    }
    if seq != applied + 1 {
        return Err(Error::conflict(
            "out_of_order",
            format!("usage report {seq} out of order: send report {} first", applied + 1),
        ));
    }
    let report = UsageReport::decode(&verified.envelope.body)
        .map_err(|_| Error::invalid("refused", "usage report refused: bad body"))?;
    if report.node != node || report.seq != seq {
        return Err(Error::invalid("refused", "usage report refused: its body names another node or sequence"));
    }
    let day = now / 86_400;
    // A month that ended starts again before this traffic counts into it.
    roll_quotas(conn, changes, now)?;
    let multiplier: u64 = conn.query_row("SELECT multiplier FROM nodes WHERE id = ?1", [node], |row| row.get(0))?;
    let counted = |bytes: u64| (u128::from(bytes) * u128::from(multiplier) / 1000).min(i64::MAX as u128) as u64;
    for usage in &report.users {
        let raw = (usage.up, usage.down);
        if apply_user_usage(conn, usage.user, (counted(usage.up), counted(usage.down)), raw, day, now)? {
            changes.user(conn, usage.user)?;
        }
    }
    conn.execute(
        "UPDATE nodes SET usage_seq = ?2, usage_digest = ?3, last_seen = max(last_seen, ?4) WHERE id = ?1",
        params![node, seq, verified.digest.0, now],
    )?;
    let (up, down) =
        report.users.iter().fold((0u64, 0u64), |(up, down), u| (up.saturating_add(u.up), down.saturating_add(u.down)));
    conn.prepare_cached(
        "INSERT INTO node_usage_daily (node_id, day, up, down) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (node_id, day) DO UPDATE SET up = up + excluded.up, down = down + excluded.down",
    )?
    .execute(params![node, day, up.min(i64::MAX as u64), down.min(i64::MAX as u64)])?;
    // Over its monthly cap: limited (it carries nobody; its users are told) until the month ends.
    let before: bool = conn.query_row("SELECT limited FROM nodes WHERE id = ?1", [node], |row| row.get(0))?;
    let limited: bool = conn
        .prepare_cached(
            "UPDATE nodes SET quota_used = CASE WHEN quota > 0 THEN min(quota_used + ?2, 9223372036854775807) ELSE 0 END,
                    limited = CASE WHEN quota > 0 AND quota_used + ?2 >= quota THEN 1 ELSE limited END
             WHERE id = ?1 RETURNING limited",
        )?
        .query_row(params![node, up.saturating_add(down).min(i64::MAX as u64)], |row| row.get(0))?;
    if limited && !before {
        changes.users_of_node(conn, node)?;
        audit(conn, now, "control", "node.limited", &format!("node {node}"), "its monthly traffic cap is reached")?;
    }
    apply_presence(conn, node, &report.presence, now, changes)?;
    // Users kicked through the node's traffic stats API are kicked as the panel kicks them
    // (on every node, recorded in the audit log); a node kicks only users it serves.
    let actor = format!("node {node} (traffic stats API)");
    for &user in &report.kicked {
        if super::changes::nodes_of_user(conn, user)?.contains(&node) {
            super::users::kick(conn, changes, &actor, user, now)?;
        }
    }
    // What it runs, as it says in its pulls: a node that reaches only an edge is heard here.
    if let Some(release) = &report.release {
        let update = Some(release.update.as_str()).filter(|u| !u.is_empty());
        let said_at = report.period_end.min(now);
        crate::releases::node_says(conn, node, Some(&release.running), update, said_at)?;
    }
    Ok(UsageOutcome::Applied(seq))
}

/// Takes a node's report of who is on it: its rows replace the node's; a user whose device
/// count here changed has the other nodes' sets checked (its allowance there moves); what
/// was refused is added to the user's counts, and a device refused over the limit puts a
/// notice in the user's profile (signed again at most once an hour for it).
fn apply_presence(
    conn: &Connection,
    node: NodeId,
    presence: &[wire::Presence],
    now: u64,
    changes: &mut Changes,
) -> Result<(), Error> {
    let before: std::collections::HashMap<UserId, u32> = conn
        .prepare_cached("SELECT user_id, devices FROM presence WHERE node_id = ?1")?
        .query_map([node], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    conn.prepare_cached("DELETE FROM presence WHERE node_id = ?1")?.execute([node])?;
    let mut insert = conn.prepare_cached(
        "INSERT INTO presence (node_id, user_id, devices, connections)
         SELECT ?1, id, ?3, ?4 FROM users WHERE id = ?2",
    )?;
    let mut moved: Vec<UserId> = Vec::new();
    for p in presence {
        if p.devices > 0 {
            insert.execute(params![node, p.user, p.devices, p.connections])?;
        }
        if before.get(&p.user).copied().unwrap_or(0) != p.devices {
            moved.push(p.user);
        }
        if p.refused_devices + p.refused_torrent + p.refused_smtp > 0 {
            let noticed: Option<u64> = conn
                .prepare_cached(
                    "UPDATE users SET refused_devices = refused_devices + ?2, refused_torrent = refused_torrent + ?3,
                            refused_smtp = refused_smtp + ?4,
                            devices_refused_at = CASE WHEN ?2 > 0 THEN ?5 ELSE devices_refused_at END
                     WHERE id = ?1 RETURNING devices_refused_at",
                )?
                .query_row(params![p.user, p.refused_devices, p.refused_torrent, p.refused_smtp, now], |row| row.get(0))
                .optional()?;
            let previously = before_refusal(conn, p.user)?;
            if p.refused_devices > 0 && noticed.is_some() && previously + 3600 <= now {
                conn.prepare_cached("UPDATE users SET refusal_noticed = ?2 WHERE id = ?1")?
                    .execute(params![p.user, now])?;
                changes.user(conn, p.user)?;
                let more = serde_json::json!({ "node": node, "refused": p.refused_devices, "by": "node" });
                crate::store::events::user_event_of(conn, now, "user.over_device_limit", p.user, more)?;
            }
        }
    }
    moved.extend(before.keys().filter(|user| !presence.iter().any(|p| p.user == **user)));
    for user in moved {
        changes.creds_of_user(conn, user)?;
    }
    conn.prepare_cached("UPDATE nodes SET presence_at = ?2 WHERE id = ?1")?.execute(params![node, now])?;
    Ok(())
}

/// When the user's profile last got the notice of a refused device (0: never).
fn before_refusal(conn: &Connection, user: UserId) -> Result<u64, Error> {
    Ok(conn
        .prepare_cached("SELECT refusal_noticed FROM users WHERE id = ?1")?
        .query_row([user], |row| row.get(0))
        .optional()?
        .unwrap_or(0))
}

/// One user connected now, from the nodes' last reports.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Online {
    pub(crate) id: UserId,
    pub(crate) name: String,
    /// Devices, summed over nodes.
    pub(crate) devices: u32,
    pub(crate) connections: u32,
    /// The nodes it is on.
    pub(crate) nodes: Vec<String>,
}

/// Who is connected now (the most devices first, at most `limit` of them), and how many
/// users and devices in all.
pub(crate) fn online(conn: &Connection, limit: u64) -> Result<(Vec<Online>, u64, u64), Error> {
    let list = conn
        .prepare_cached(
            "SELECT u.id, u.name, sum(p.devices), sum(p.connections), group_concat(n.name, char(31))
             FROM presence p JOIN users u ON u.id = p.user_id JOIN nodes n ON n.id = p.node_id
             GROUP BY u.id ORDER BY sum(p.devices) DESC, u.name LIMIT ?1",
        )?
        .query_map([limit], |row| {
            let nodes: String = row.get(4)?;
            Ok(Online {
                id: row.get(0)?,
                name: row.get(1)?,
                devices: row.get(2)?,
                connections: row.get(3)?,
                nodes: nodes.split('\u{1f}').map(str::to_owned).collect(),
            })
        })?
        .collect::<Result<_, _>>()?;
    let (users, devices) =
        conn.query_row("SELECT count(DISTINCT user_id), coalesce(sum(devices), 0) FROM presence", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
    Ok((list, users, devices))
}

/// Forgets who is on nodes that have not reported for [`PRESENCE_TTL`]:
/// their users' devices stop counting against them elsewhere. Returns how many nodes.
pub(crate) fn expire_presence(conn: &Connection, changes: &mut Changes, now: u64) -> Result<usize, Error> {
    let stale: Vec<(NodeId, UserId)> = conn
        .prepare_cached(
            "SELECT p.node_id, p.user_id FROM presence p JOIN nodes n ON n.id = p.node_id
             WHERE n.presence_at + ?1 < ?2",
        )?
        .query_map(params![PRESENCE_TTL, now], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    if stale.is_empty() {
        return Ok(0);
    }
    let mut nodes: Vec<NodeId> = stale.iter().map(|(node, _)| *node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    for node in &nodes {
        conn.prepare_cached("DELETE FROM presence WHERE node_id = ?1")?.execute([node])?;
    }
    for (_, user) in stale {
        changes.creds_of_user(conn, user)?;
    }
    Ok(nodes.len())
}

/// Adds one user's traffic, `counted` (what it counts for on the node, multiplied) and `raw`
/// (as measured); returns whether the user's status changed (or it just started).
fn apply_user_usage(
    conn: &Connection,
    user: UserId,
    counted: (u64, u64),
    raw: (u64, u64),
    day: u64,
    now: u64,
) -> Result<bool, Error> {
    let (up, down) = counted;
    type Row = (bool, u64, u64, u64, u64, u64, u64, String);
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT enabled, expires_at, quota, used_up, used_down, duration_secs, started_at, status
             FROM users WHERE id = ?1",
        )?
        .query_row([user], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?, row.get(7)?))
        })
        .optional()?;
    // Traffic of a user deleted since is dropped: there is nobody to count it for.
    let Some((enabled, mut expires_at, quota, used_up, used_down, duration, mut started, stored)) = row else {
        return Ok(false);
    };
    let (up, down) = (up.min(i64::MAX as u64), down.min(i64::MAX as u64));
    let used_up = used_up.saturating_add(up).min(i64::MAX as u64);
    let used_down = used_down.saturating_add(down).min(i64::MAX as u64);
    let starts = duration != 0 && started == 0 && up.saturating_add(down) > 0;
    if starts {
        started = now;
        expires_at = now + duration;
    }
    conn.prepare_cached(
        "UPDATE users SET used_up = ?2, used_down = ?3, started_at = ?4, expires_at = ?5, usage_dirty = 1,
                raw_up = min(raw_up + ?6, 9223372036854775807), raw_down = min(raw_down + ?7, 9223372036854775807)
         WHERE id = ?1",
    )?
    .execute(params![
        user,
        used_up,
        used_down,
        started,
        expires_at,
        raw.0.min(i64::MAX as u64),
        raw.1.min(i64::MAX as u64)
    ])?;
    conn.prepare_cached(
        "INSERT INTO usage_daily (user_id, day, up, down) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (user_id, day) DO UPDATE SET up = up + excluded.up, down = down + excluded.down",
    )?
    .execute(params![user, day, up, down])?;
    let status = status_of(enabled, expires_at, quota, used_up.saturating_add(used_down), duration, started, now);
    Ok(starts || status_name(status) != stored)
}

/// A group as the API shows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct GroupView {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) note: String,
    pub(crate) users: u64,
    pub(crate) nodes: u64,
    /// The default speed limit of its users on its nodes (0 each way: none).
    pub(crate) speed_limit: GroupSpeed,
    /// What a used-up quota does to its users by default: `cut` or `slow`.
    pub(crate) on_quota: String,
    /// The rate `slow` slows to.
    pub(crate) slow_speed: Mbps,
    /// The default device limit of its users (0: none).
    pub(crate) device_limit: u32,
    /// Its nodes refuse its users BitTorrent (the abuse guard).
    pub(crate) block_torrent: bool,
    /// Its nodes refuse its users connections to port 25 (the abuse guard).
    pub(crate) block_smtp: bool,
    /// The rule set its users' traffic is routed by, unless their own or a newer group's
    /// says otherwise (`null`: none).
    pub(crate) rule_set: Option<String>,
}

/// A group's default speed limit, Mbit/s each way (0: none).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupSpeed {
    #[serde(default)]
    pub(crate) up: Mbps,
    #[serde(default)]
    pub(crate) down: Mbps,
}

/// A group's settings.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupInput {
    pub(crate) name: Option<String>,
    pub(crate) note: Option<String>,
    /// The default speed limit of its users on its nodes, Mbit/s (0: none).
    pub(crate) speed_limit: Option<GroupSpeed>,
    /// `cut` or `slow`.
    pub(crate) on_quota: Option<String>,
    /// The rate `slow` slows to, Mbit/s.
    pub(crate) slow_speed: Option<Mbps>,
    /// The default device limit of its users (0: none).
    pub(crate) device_limit: Option<u32>,
    /// Its nodes refuse its users BitTorrent.
    pub(crate) block_torrent: Option<bool>,
    /// Its nodes refuse its users connections to port 25.
    pub(crate) block_smtp: Option<bool>,
    /// The rule set (by name) its users are routed by (empty: none); the owner's to set.
    pub(crate) rule_set: Option<String>,
}

const GROUP_COLUMNS: &str = "g.id, g.name, g.note,
    (SELECT count(*) FROM user_groups ug WHERE ug.group_id = g.id),
    (SELECT count(*) FROM node_groups ng WHERE ng.group_id = g.id),
    g.speed_up, g.speed_down, g.on_quota, g.slow_kbps, g.device_limit, g.block_torrent, g.block_smtp,
    (SELECT r.name FROM rule_sets r WHERE r.id = g.rule_set_id)";

fn group_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<GroupView> {
    Ok(GroupView {
        id: row.get(0)?,
        name: row.get(1)?,
        note: row.get(2)?,
        users: row.get(3)?,
        nodes: row.get(4)?,
        speed_limit: GroupSpeed { up: Mbps(row.get(5)?), down: Mbps(row.get(6)?) },
        on_quota: row.get(7)?,
        slow_speed: Mbps(row.get(8)?),
        device_limit: row.get(9)?,
        block_torrent: row.get(10)?,
        block_smtp: row.get(11)?,
        rule_set: row.get(12)?,
    })
}

/// Every group.
pub(crate) fn groups(conn: &Connection) -> Result<Vec<GroupView>, Error> {
    let groups = conn
        .prepare_cached(&format!("SELECT {GROUP_COLUMNS} FROM groups g ORDER BY g.name"))?
        .query_map([], group_of)?
        .collect::<Result<_, _>>()?;
    Ok(groups)
}

/// One group.
pub(crate) fn group(conn: &Connection, id: i64) -> Result<GroupView, Error> {
    conn.prepare_cached(&format!("SELECT {GROUP_COLUMNS} FROM groups g WHERE g.id = ?1"))?
        .query_row([id], group_of)
        .optional()?
        .ok_or(Error::NotFound("group"))
}

/// Sets a group's speed limit and quota action from `input`; checks that `slow` has a rate.
/// Returns whether any of them was given.
fn set_group_speed(conn: &Connection, id: i64, input: &GroupInput) -> Result<bool, Error> {
    if let Some(speed) = input.speed_limit {
        conn.execute(
            "UPDATE groups SET speed_up = ?2, speed_down = ?3 WHERE id = ?1",
            params![id, speed.up.0, speed.down.0],
        )?;
    }
    if let Some(on_quota) = &input.on_quota {
        if !matches!(on_quota.as_str(), "cut" | "slow") {
            return Err(Error::invalid("bad_on_quota", "a group's on_quota is cut or slow"));
        }
        conn.execute("UPDATE groups SET on_quota = ?2 WHERE id = ?1", params![id, on_quota])?;
    }
    if let Some(slow) = input.slow_speed {
        conn.execute("UPDATE groups SET slow_kbps = ?2 WHERE id = ?1", params![id, slow.0])?;
    }
    if input.on_quota.is_some() || input.slow_speed.is_some() {
        let (on_quota, slow): (String, u64) =
            conn.query_row("SELECT on_quota, slow_kbps FROM groups WHERE id = ?1", [id], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        check_slow(Some(&on_quota), Mbps(slow))?;
    }
    if let Some(devices) = input.device_limit {
        if devices > crate::store::users::MAX_DEVICES {
            return Err(Error::invalid(
                "bad_device_limit",
                format!("a device limit is from 0 (no limit) to {}", crate::store::users::MAX_DEVICES),
            ));
        }
        conn.execute("UPDATE groups SET device_limit = ?2 WHERE id = ?1", params![id, devices])?;
    }
    if let Some(block) = input.block_torrent {
        conn.execute("UPDATE groups SET block_torrent = ?2 WHERE id = ?1", params![id, block])?;
    }
    if let Some(block) = input.block_smtp {
        conn.execute("UPDATE groups SET block_smtp = ?2 WHERE id = ?1", params![id, block])?;
    }
    if let Some(name) = &input.rule_set {
        let set = crate::store::routing::named(conn, name)?;
        conn.execute("UPDATE groups SET rule_set_id = ?2 WHERE id = ?1", params![id, set])?;
    }
    Ok(input.speed_limit.is_some()
        || input.on_quota.is_some()
        || input.slow_speed.is_some()
        || input.device_limit.is_some()
        || input.block_torrent.is_some()
        || input.block_smtp.is_some()
        || input.rule_set.is_some())
}

/// The group's users and nodes must be published again (its defaults changed, or it is
/// going away).
fn group_changes(conn: &Connection, id: i64, changes: &mut Changes) -> Result<(), Error> {
    let users: Vec<UserId> = conn
        .prepare_cached("SELECT user_id FROM user_groups WHERE group_id = ?1")?
        .query_map([id], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let nodes: Vec<NodeId> = conn
        .prepare_cached("SELECT node_id FROM node_groups WHERE group_id = ?1")?
        .query_map([id], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    for user in &users {
        changes.user(conn, *user)?;
    }
    for node in nodes {
        changes.node(node);
    }
    Ok(())
}

/// Creates a group.
pub(crate) fn create_group(conn: &Connection, actor: &str, input: &GroupInput, now: u64) -> Result<GroupView, Error> {
    let name = check_name(input.name.as_deref().unwrap_or_default(), "group")?;
    let note = check_text(input.note.as_deref().unwrap_or_default(), "bad_note", "note")?;
    conn.execute("INSERT INTO groups (name, note) VALUES (?1, ?2)", params![name, note])
        .map_err(|e| Error::from(e).unique(&format!("a group named {name:?}")))?;
    let id = conn.last_insert_rowid();
    // A new group has no users or nodes yet: nothing to publish.
    set_group_speed(conn, id, input)?;
    audit(conn, now, actor, "group.create", &format!("group {id} ({name})"), "")?;
    group(conn, id)
}

/// Renames a group, changes its note or its defaults (membership is set on users and
/// nodes); its users and nodes are published again when a default changed.
pub(crate) fn update_group(
    conn: &Connection,
    changes: &mut Changes,
    actor: &str,
    id: i64,
    input: &GroupInput,
    now: u64,
) -> Result<GroupView, Error> {
    let before = group(conn, id)?;
    if let Some(name) = &input.name {
        let name = check_name(name, "group")?;
        conn.execute("UPDATE groups SET name = ?2 WHERE id = ?1", params![id, name])
            .map_err(|e| Error::from(e).unique(&format!("a group named {name:?}")))?;
    }
    if let Some(note) = &input.note {
        conn.execute("UPDATE groups SET note = ?2 WHERE id = ?1", params![id, check_text(note, "bad_note", "note")?])?;
    }
    if set_group_speed(conn, id, input)? {
        group_changes(conn, id, changes)?;
    }
    let after = group(conn, id)?;
    let changed = super::audit_log::differences(&before, &after, &["users", "nodes"]);
    if !changed.is_empty() {
        super::audit_log::audit_edit(
            conn,
            now,
            actor,
            "group.update",
            &format!("group {id} ({})", before.name),
            &changed,
        )?;
    }
    Ok(after)
}

/// Deletes a group: its users lose its nodes.
pub(crate) fn delete_group(
    conn: &Connection,
    changes: &mut Changes,
    actor: &str,
    id: i64,
    now: u64,
) -> Result<(), Error> {
    let before = group(conn, id)?;
    group_changes(conn, id, changes)?;
    conn.execute("DELETE FROM groups WHERE id = ?1", [id])?;
    audit(conn, now, actor, "group.delete", &format!("group {id} ({})", before.name), "")?;
    Ok(())
}
