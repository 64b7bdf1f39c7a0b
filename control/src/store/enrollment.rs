//! A node enrolling: what it sends (its one-time token, its key and certificate), what it is
//! told of itself, and the key it registered (the nodes enrolled, and their keys). The tokens
//! are made with the node ([`super::nodes::create`], [`super::nodes::new_enroll_token`]).

use hearth_shared::keys::PublicKey;
use hearth_shared::wire::{NodeId, stream};
use hearth_shared::{Digest, sha256};
use rusqlite::{Connection, OptionalExtension as _, params};
use serde::{Deserialize, Serialize};

use super::changes::Changes;
use super::node_input::check_text;
use crate::error::Error;
use crate::store::audit_log::audit;

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

/// The enrolled nodes (those with a key).
pub(crate) fn enrolled_ids(conn: &Connection) -> Result<Vec<NodeId>, Error> {
    Ok(conn
        .prepare("SELECT id FROM nodes WHERE public_key IS NOT NULL")?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?)
}

/// A node's key and the last usage report acknowledged to it: what its record and its
/// acknowledgement are signed again from.
pub(crate) struct NodeKeys {
    /// The node's key (`None`: not enrolled).
    pub(crate) key: Option<[u8; 32]>,
    /// The sequence of the last usage report of its applied (0: none).
    pub(crate) usage_seq: u64,
}

/// Every node's [`NodeKeys`].
pub(crate) fn keys(conn: &Connection) -> Result<std::collections::BTreeMap<NodeId, NodeKeys>, Error> {
    Ok(conn
        .prepare("SELECT id, public_key, usage_seq FROM nodes")?
        .query_map([], |row| Ok((row.get(0)?, NodeKeys { key: row.get(1)?, usage_seq: row.get(2)? })))?
        .collect::<Result<_, _>>()?)
}
