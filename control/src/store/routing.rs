//! Routing per user: the outbounds the owner defines (for every node, or one node), the
//! named rule sets in the official Hysteria 2 server's ACL syntax, and which rule set each
//! user is given (its own, else its groups').
//!
//! Every rule set is checked here, against the outbounds, whenever either changes: a rule set
//! that does not parse, names an outbound nobody defined or would send UDP through an HTTP
//! proxy is refused with its line and column, so a node never meets one. A node gets the
//! outbounds defined for it (its own over the shared ones of the same name) and every rule
//! set, sealed for its key in its credential set ([`sealed_for`]); each user's entry names its
//! rule set by id.

use hearth_shared::acl::{self, IpMode, Login, Outbound, OutboundKind};
use hearth_shared::routing::{self, Routing, RuleSet};
use hearth_shared::wire::NodeId;
use rusqlite::{Connection, OptionalExtension as _, params};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::secrets::{Purpose, Vault};

/// The most rule text all sets hold together, in bytes: every node is sent every set.
pub(crate) const MAX_ALL_RULES: usize = 1024 * 1024;

/// An outbound as the API shows and takes it (the password is never shown).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutboundInput {
    /// Its name, which rules give it.
    #[serde(default)]
    pub(crate) name: Option<String>,
    /// The node it is for (`None` or 0: every node).
    #[serde(default)]
    pub(crate) node: Option<NodeId>,
    /// `direct`, `socks5` or `http`.
    #[serde(default, rename = "type")]
    pub(crate) kind: Option<String>,
    /// A proxy's `host:port`.
    #[serde(default)]
    pub(crate) server: Option<String>,
    /// A proxy's username (empty: none).
    #[serde(default)]
    pub(crate) username: Option<String>,
    /// A proxy's password (left out: kept).
    #[serde(default)]
    pub(crate) password: Option<String>,
    /// Direct: `auto`, `v4`, `v6`, `prefer_v4` or `prefer_v6`.
    #[serde(default)]
    pub(crate) ip_mode: Option<String>,
    /// Direct: the interface to send from (empty: any).
    #[serde(default)]
    pub(crate) interface: Option<String>,
    /// Direct: the IPv4 source address (empty: any).
    #[serde(default)]
    pub(crate) source_v4: Option<String>,
    /// Direct: the IPv6 source address (empty: any).
    #[serde(default)]
    pub(crate) source_v6: Option<String>,
}

/// An outbound as stored: its id, the node it is for (0: every node) and what it is.
#[derive(Clone, Debug)]
pub(crate) struct StoredOutbound {
    pub(crate) id: i64,
    pub(crate) node: NodeId,
    pub(crate) outbound: Outbound,
}

impl StoredOutbound {
    /// What the panel and the API show: everything but the password (only whether there is
    /// one).
    pub(crate) fn view(&self) -> serde_json::Value {
        let mut view = serde_json::json!({
            "id": self.id,
            "name": self.outbound.name,
            "node": (self.node != 0).then_some(self.node),
        });
        let login = |view: &mut serde_json::Value, login: &Option<Login>| {
            view["username"] = login.as_ref().map(|l| l.username.clone()).unwrap_or_default().into();
            view["password_set"] = login.as_ref().is_some_and(|l| !l.password.is_empty()).into();
        };
        match &self.outbound.kind {
            OutboundKind::Direct { mode, interface, source_v4, source_v6 } => {
                view["type"] = "direct".into();
                view["ip_mode"] = mode_name(*mode).into();
                view["interface"] = interface.clone().unwrap_or_default().into();
                view["source_v4"] = source_v4.map(|ip| ip.to_string()).unwrap_or_default().into();
                view["source_v6"] = source_v6.map(|ip| ip.to_string()).unwrap_or_default().into();
            }
            OutboundKind::Socks5 { server, login: l } | OutboundKind::Http { server, login: l } => {
                let socks = matches!(self.outbound.kind, OutboundKind::Socks5 { .. });
                view["type"] = if socks { "socks5" } else { "http" }.into();
                view["server"] = server.clone().into();
                login(&mut view, l);
            }
        }
        view
    }
}

fn mode_name(mode: IpMode) -> &'static str {
    match mode {
        IpMode::Auto => "auto",
        IpMode::V4 => "v4",
        IpMode::V6 => "v6",
        IpMode::PreferV4 => "prefer_v4",
        IpMode::PreferV6 => "prefer_v6",
    }
}

fn parse_mode(text: &str) -> Result<IpMode, Error> {
    Ok(match text {
        "" | "auto" => IpMode::Auto,
        "v4" => IpMode::V4,
        "v6" => IpMode::V6,
        "prefer_v4" => IpMode::PreferV4,
        "prefer_v6" => IpMode::PreferV6,
        _ => return Err(Error::invalid("bad_outbound", "ip_mode is auto, v4, v6, prefer_v4 or prefer_v6")),
    })
}

/// `input` over `base` (a new outbound: `None`): the outbound it makes, checked.
fn outbound_of(input: &OutboundInput, base: Option<&Outbound>) -> Result<Outbound, Error> {
    let bad = |message: String| Error::invalid("bad_outbound", message);
    let name = input.name.clone().or_else(|| base.map(|b| b.name.clone())).unwrap_or_default();
    let base_kind = base.map(|b| match b.kind {
        OutboundKind::Direct { .. } => "direct",
        OutboundKind::Socks5 { .. } => "socks5",
        OutboundKind::Http { .. } => "http",
    });
    let kind = input.kind.as_deref().or(base_kind).unwrap_or_default();
    // What the base has of a field, when it is of the same kind.
    let same = base.filter(|_| Some(kind) == base_kind).map(|b| &b.kind);
    let text = |given: &Option<String>, had: Option<String>| given.clone().or(had).unwrap_or_default();
    let kind = match kind {
        "direct" => {
            let (had_mode, had_interface, had_v4, had_v6) = match same {
                Some(OutboundKind::Direct { mode, interface, source_v4, source_v6 }) => {
                    (Some(*mode), interface.clone(), *source_v4, *source_v6)
                }
                _ => (None, None, None, None),
            };
            let mode = match &input.ip_mode {
                Some(mode) => parse_mode(mode.trim())?,
                None => had_mode.unwrap_or_default(),
            };
            let interface = text(&input.interface, had_interface);
            let source = |given: &Option<String>, had: Option<String>| {
                let value = text(given, had);
                let value = value.trim();
                (!value.is_empty()).then(|| value.to_owned())
            };
            let v4 = source(&input.source_v4, had_v4.map(|ip| ip.to_string()))
                .map(|ip| ip.parse().map_err(|_| bad(format!("source_v4 is not an IPv4 address: {ip}"))))
                .transpose()?;
            let v6 = source(&input.source_v6, had_v6.map(|ip| ip.to_string()))
                .map(|ip| ip.parse().map_err(|_| bad(format!("source_v6 is not an IPv6 address: {ip}"))))
                .transpose()?;
            OutboundKind::Direct {
                mode,
                interface: (!interface.trim().is_empty()).then(|| interface.trim().to_owned()),
                source_v4: v4,
                source_v6: v6,
            }
        }
        "socks5" | "http" => {
            let (had_server, had_login) = match same {
                Some(OutboundKind::Socks5 { server, login } | OutboundKind::Http { server, login }) => {
                    (Some(server.clone()), login.clone())
                }
                _ => (None, None),
            };
            let server = text(&input.server, had_server).trim().to_owned();
            let username = text(&input.username, had_login.as_ref().map(|l| l.username.clone()));
            let password = text(&input.password, had_login.map(|l| l.password));
            let login = (!username.is_empty()).then_some(Login { username, password });
            if login.is_none() && input.password.as_deref().is_some_and(|p| !p.is_empty()) {
                return Err(bad("a password needs a username".into()));
            }
            if kind == "socks5" { OutboundKind::Socks5 { server, login } } else { OutboundKind::Http { server, login } }
        }
        "" => return Err(bad("an outbound's type is direct, socks5 or http".into())),
        other => return Err(bad(format!("an outbound's type is direct, socks5 or http, not {other:?}"))),
    };
    let outbound = Outbound { name: name.trim().to_owned(), kind };
    // The owner may define their own `direct` (say, bound to an interface) or `default`.
    outbound.check().map_err(|e| bad(e.to_string()))?;
    Ok(outbound)
}

/// Every outbound, passwords opened.
pub(crate) fn outbounds(conn: &Connection, vault: &Vault) -> Result<Vec<StoredOutbound>, Error> {
    let rows: Vec<(i64, NodeId, String, Option<Vec<u8>>)> = conn
        .prepare_cached("SELECT id, node_id, spec, password FROM outbounds ORDER BY node_id, name, id")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?
        .collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(|(id, node, spec, password)| {
            let mut outbound: Outbound = serde_json::from_str(&spec)
                .map_err(|e| Error::Internal(format!("outbound {id} in the database does not read: {e}")))?;
            if let (
                OutboundKind::Socks5 { login: Some(login), .. } | OutboundKind::Http { login: Some(login), .. },
                Some(sealed),
            ) = (&mut outbound.kind, password)
            {
                let plain = vault.open(Purpose::Outbound, &sealed)?;
                login.password = String::from_utf8(plain.to_vec())
                    .map_err(|_| Error::Internal(format!("outbound {id}'s password is not text")))?;
            }
            Ok(StoredOutbound { id, node, outbound })
        })
        .collect()
}

fn store_outbound(
    conn: &Connection,
    vault: &Vault,
    id: Option<i64>,
    node: NodeId,
    outbound: &Outbound,
) -> Result<i64, Error> {
    let mut spec = outbound.clone();
    let mut password = None;
    if let OutboundKind::Socks5 { login: Some(login), .. } | OutboundKind::Http { login: Some(login), .. } =
        &mut spec.kind
    {
        password = Some(vault.seal(Purpose::Outbound, std::mem::take(&mut login.password).as_bytes()));
    }
    let spec = serde_json::to_string(&spec).expect("an outbound serializes");
    let taken =
        |e: rusqlite::Error| Error::from(e).unique(&format!("an outbound named {:?} for that node", outbound.name));
    match id {
        None => {
            conn.execute(
                "INSERT INTO outbounds (name, node_id, spec, password) VALUES (?1, ?2, ?3, ?4)",
                params![outbound.name, node, spec, password],
            )
            .map_err(taken)?;
            Ok(conn.last_insert_rowid())
        }
        Some(id) => {
            conn.execute(
                "UPDATE outbounds SET name = ?2, node_id = ?3, spec = ?4, password = ?5 WHERE id = ?1",
                params![id, outbound.name, node, spec, password],
            )
            .map_err(taken)?;
            Ok(id)
        }
    }
}

fn check_node(conn: &Connection, node: NodeId) -> Result<(), Error> {
    if node == 0 {
        return Ok(());
    }
    let found: Option<i64> = conn.query_row("SELECT id FROM nodes WHERE id = ?1", [node], |r| r.get(0)).optional()?;
    found.map(drop).ok_or(Error::NotFound("node"))
}

/// Adds an outbound; every rule set must still check. Returns its id.
pub(crate) fn add_outbound(conn: &Connection, vault: &Vault, input: &OutboundInput) -> Result<i64, Error> {
    let outbound = outbound_of(input, None)?;
    let node = input.node.unwrap_or(0);
    check_node(conn, node)?;
    let id = store_outbound(conn, vault, None, node, &outbound)?;
    check_all(conn, vault)?;
    Ok(id)
}

/// Changes an outbound (fields left out keep their value; a password left out is kept);
/// every rule set must still check. Returns what it was, for the audit log.
pub(crate) fn update_outbound(
    conn: &Connection,
    vault: &Vault,
    id: i64,
    input: &OutboundInput,
) -> Result<Outbound, Error> {
    let before = outbounds(conn, vault)?.into_iter().find(|o| o.id == id).ok_or(Error::NotFound("outbound"))?;
    let outbound = outbound_of(input, Some(&before.outbound))?;
    let node = input.node.unwrap_or(before.node);
    check_node(conn, node)?;
    store_outbound(conn, vault, Some(id), node, &outbound)?;
    check_all(conn, vault)?;
    Ok(before.outbound)
}

/// Removes an outbound; refused while a rule set names it and no other of its name is left.
pub(crate) fn remove_outbound(conn: &Connection, vault: &Vault, id: i64) -> Result<Outbound, Error> {
    let before = outbounds(conn, vault)?.into_iter().find(|o| o.id == id).ok_or(Error::NotFound("outbound"))?;
    conn.execute("DELETE FROM outbounds WHERE id = ?1", [id])?;
    check_all(conn, vault)?;
    Ok(before.outbound)
}

/// A rule set with how many users and groups are given it (as the API shows it: the text
/// as `rules`).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RuleSetView {
    pub(crate) id: u16,
    pub(crate) name: String,
    #[serde(rename = "rules")]
    pub(crate) text: String,
    pub(crate) users: u64,
    pub(crate) groups: u64,
}

/// Every rule set, by id.
pub(crate) fn rule_sets(conn: &Connection) -> Result<Vec<RuleSetView>, Error> {
    Ok(conn
        .prepare_cached(
            "SELECT r.id, r.name, r.text,
                    (SELECT count(*) FROM users u WHERE u.rule_set_id = r.id),
                    (SELECT count(*) FROM groups g WHERE g.rule_set_id = r.id)
             FROM rule_sets r ORDER BY r.id",
        )?
        .query_map([], |row| {
            Ok(RuleSetView {
                id: row.get(0)?,
                name: row.get(1)?,
                text: row.get(2)?,
                users: row.get(3)?,
                groups: row.get(4)?,
            })
        })?
        .collect::<Result<_, _>>()?)
}

/// The id of the rule set named `name`.
pub(crate) fn rule_set_id(conn: &Connection, name: &str) -> Result<u16, Error> {
    conn.prepare_cached("SELECT id FROM rule_sets WHERE name = ?1")?
        .query_row([name], |row| row.get(0))
        .optional()?
        .ok_or_else(|| Error::invalid("bad_rule_set", format!("no rule set is named {name:?}")))
}

/// The rule set a field names: `Some(None)` for `""` (none of its own).
pub(crate) fn named(conn: &Connection, name: &str) -> Result<Option<u16>, Error> {
    let name = name.trim();
    if name.is_empty() { Ok(None) } else { rule_set_id(conn, name).map(Some) }
}

fn checked_name(name: &str) -> Result<String, Error> {
    let name = name.trim();
    routing::check_set_name(name).map_err(|e| Error::invalid("bad_rule_set", e.to_string()))?;
    Ok(name.to_owned())
}

/// Adds a rule set; refused (with where) when its rules do not check. Returns its id.
pub(crate) fn add_rule_set(conn: &Connection, vault: &Vault, name: &str, text: &str, now: u64) -> Result<u16, Error> {
    let name = checked_name(name)?;
    let id: u16 = conn
        .query_row("SELECT coalesce(max(id), 0) + 1 FROM rule_sets", [], |r| r.get::<_, u32>(0))
        .map(|next| u16::try_from(next).unwrap_or(0))?;
    let id = if id == 0 {
        // Ids ran past 65,535: the lowest one free.
        conn.query_row(
            "SELECT min(id) + 1 FROM rule_sets r WHERE id < 65535 AND NOT EXISTS (SELECT 1 FROM rule_sets s WHERE s.id = r.id + 1)",
            [],
            |r| r.get::<_, Option<u16>>(0),
        )?
        .ok_or_else(|| Error::invalid("bad_rule_set", "no rule set id is free"))?
    } else {
        id
    };
    conn.execute(
        "INSERT INTO rule_sets (id, name, text, updated) VALUES (?1, ?2, ?3, ?4)",
        params![id, name, text, now],
    )
    .map_err(|e| Error::from(e).unique(&format!("a rule set named {name:?}")))?;
    check_all(conn, vault)?;
    Ok(id)
}

/// Changes a rule set's name or rules; refused (with where) when its rules do not check.
/// Returns what it was.
pub(crate) fn update_rule_set(
    conn: &Connection,
    vault: &Vault,
    id: u16,
    name: Option<&str>,
    text: Option<&str>,
    now: u64,
) -> Result<RuleSetView, Error> {
    let before = rule_sets(conn)?.into_iter().find(|r| r.id == id).ok_or(Error::NotFound("rule set"))?;
    if let Some(name) = name {
        let name = checked_name(name)?;
        conn.execute("UPDATE rule_sets SET name = ?2 WHERE id = ?1", params![id, name])
            .map_err(|e| Error::from(e).unique(&format!("a rule set named {name:?}")))?;
    }
    if let Some(text) = text {
        conn.execute("UPDATE rule_sets SET text = ?2, updated = ?3 WHERE id = ?1", params![id, text, now])?;
    }
    check_all(conn, vault)?;
    Ok(before)
}

/// Removes a rule set; refused while a user or group is given it.
pub(crate) fn remove_rule_set(conn: &Connection, id: u16) -> Result<RuleSetView, Error> {
    let before = rule_sets(conn)?.into_iter().find(|r| r.id == id).ok_or(Error::NotFound("rule set"))?;
    if before.users + before.groups > 0 {
        return Err(Error::conflict(
            "in_use",
            format!(
                "rule set {:?} is given to {} users and {} groups: give them another first",
                before.name, before.users, before.groups
            ),
        ));
    }
    conn.execute("DELETE FROM rule_sets WHERE id = ?1", [id])?;
    Ok(before)
}

/// The outbounds a rule names anywhere, one of each name, an HTTP proxy's over any other's
/// (so a rule that would send UDP through one on any node is refused).
fn names_for_checking(all: &[StoredOutbound]) -> Vec<Outbound> {
    let mut chosen: Vec<Outbound> = Vec::new();
    for stored in all {
        let outbound = &stored.outbound;
        match chosen.iter_mut().find(|o| o.name.eq_ignore_ascii_case(&outbound.name)) {
            Some(held) if !outbound.carries_udp() => *held = outbound.clone(),
            Some(_) => {}
            None => chosen.push(outbound.clone()),
        }
    }
    chosen
}

/// Checks every rule set against the outbounds: the first that fails is refused with where.
pub(crate) fn check_all(conn: &Connection, vault: &Vault) -> Result<(), Error> {
    let outbounds = names_for_checking(&outbounds(conn, vault)?);
    let sets = rule_sets(conn)?;
    let total: usize = sets.iter().map(|set| set.text.len()).sum();
    if total > MAX_ALL_RULES {
        return Err(Error::invalid(
            "bad_routing_rules",
            format!("the rule sets hold {total} bytes together; at most {MAX_ALL_RULES}"),
        ));
    }
    for set in sets {
        acl::check(&set.text, &outbounds).map_err(|error| Error::Rules { set: set.name.clone(), error })?;
    }
    Ok(())
}

/// What `node` routes by: the outbounds defined for it (its own over the shared ones of the
/// same name) and every rule set. Empty when the owner defined neither.
pub(crate) fn routing_for(conn: &Connection, vault: &Vault, node: NodeId) -> Result<Routing, Error> {
    let mut outbounds: Vec<Outbound> = Vec::new();
    for stored in outbounds_for(conn, vault, node)? {
        outbounds.push(stored.outbound);
    }
    let sets = rule_sets(conn)?.into_iter().map(|set| RuleSet { id: set.id, name: set.name, text: set.text }).collect();
    Ok(Routing { outbounds, sets })
}

fn outbounds_for(conn: &Connection, vault: &Vault, node: NodeId) -> Result<Vec<StoredOutbound>, Error> {
    let all = outbounds(conn, vault)?;
    let own: Vec<&StoredOutbound> = all.iter().filter(|o| o.node == node && node != 0).collect();
    let shared = all
        .iter()
        .filter(|o| o.node == 0 && !own.iter().any(|n| n.outbound.name.eq_ignore_ascii_case(&o.outbound.name)));
    let mut list: Vec<StoredOutbound> = shared.cloned().collect();
    list.extend(own.into_iter().cloned());
    list.sort_by_key(|a| a.outbound.name.to_lowercase());
    Ok(list)
}

/// `node`'s routing sealed for its key (`None`: nothing to route by), drawn from a seed only
/// this control makes, so the same routing always seals to the same bytes.
pub(crate) fn sealed_for(conn: &Connection, vault: &Vault, node: NodeId) -> Result<Option<Vec<u8>>, Error> {
    let routing = routing_for(conn, vault, node)?;
    if routing.is_empty() {
        return Ok(None);
    }
    let key: Option<Vec<u8>> = conn
        .prepare_cached("SELECT public_key FROM nodes WHERE id = ?1")?
        .query_row([node], |r| r.get(0))
        .optional()?
        .flatten();
    let Some(key) = key else { return Ok(None) };
    let key = <[u8; 32]>::try_from(key.as_slice())
        .ok()
        .and_then(|bytes| hearth_shared::keys::PublicKey::from_bytes(&bytes).ok())
        .ok_or_else(|| Error::Internal(format!("node {node}'s key in the database does not read")))?;
    let plain = hearth_shared::wire::encode(&routing);
    let mut data = node.to_be_bytes().to_vec();
    data.extend_from_slice(&hearth_shared::sha256(&plain));
    let seed = vault.seed(Purpose::Outbound, &data);
    routing::seal(&routing, &key, &seed)
        .map(Some)
        .ok_or_else(|| Error::invalid("bad_routing_rules", "the node's routing is too large to send"))
}
