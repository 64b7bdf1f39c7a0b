//! The Hearth JSON format: what `hearth-control export` writes and every importer can read,
//! so users move between Hearth installations (or from a panel no importer knows, by a
//! script that writes it) with their links, passwords and aliases.
//!
//! ```json
//! {"format": "hearth-users", "version": 1, "users": [
//!   {"id": "alice@example", "name": "alice", "password": "…", "quota": 107374182400,
//!    "used_up": 0, "used_down": 0, "expires_at": 1798675200, "enabled": true,
//!    "reset": "monthly", "note": "", "aliases": ["/sub/abcd1234"]}
//! ]}
//! ```
//!
//! Every field but `id` and `name` may be left out (see [`IncomingUser`]).

use serde::{Deserialize, Serialize};

use super::incoming::{Incoming, IncomingUser};
use crate::error::Error;

/// The format's name, in every document.
pub(crate) const FORMAT: &str = "hearth-users";
/// The version written and read.
pub(crate) const VERSION: u32 = 1;
/// The largest document read.
pub(crate) const MAX_BYTES: usize = 64 << 20;

/// A document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Document {
    pub format: String,
    pub version: u32,
    /// Where its users come from (what an import calls the source; `hearth` when left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub users: Vec<IncomingUser>,
}

/// Reads a document.
pub(crate) fn read(bytes: &[u8]) -> Result<Incoming, Error> {
    if bytes.len() > MAX_BYTES {
        return Err(Error::invalid("too_large", format!("a document is at most {} MiB", MAX_BYTES >> 20)));
    }
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::invalid("bad_document", format!("not a Hearth users document (JSON): {e}")))?;
    if value.get("format").and_then(serde_json::Value::as_str) != Some(FORMAT) {
        return Err(Error::invalid(
            "bad_document",
            format!("not a Hearth users document: \"format\" is not \"{FORMAT}\""),
        ));
    }
    let version = value.get("version").and_then(serde_json::Value::as_u64);
    if version != Some(u64::from(VERSION)) {
        return Err(Error::invalid(
            "unknown_version",
            format!("a Hearth users document of version {version:?}: this Hearth reads version {VERSION}"),
        ));
    }
    let document: Document = serde_json::from_value(value)
        .map_err(|e| Error::invalid("bad_document", format!("a Hearth users document with a wrong field: {e}")))?;
    let source = document.source.unwrap_or_else(|| "hearth".to_owned());
    if source.is_empty() || source.len() > 32 || !source.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(Error::invalid("bad_document", "\"source\" is 1 to 32 letters, digits or '-'"));
    }
    for user in &document.users {
        if user.id.is_empty() || user.id.len() > 256 {
            return Err(Error::invalid("bad_document", format!("user {:?}: \"id\" is 1 to 256 bytes", user.name)));
        }
    }
    Ok(Incoming { source, users: document.users, ..Incoming::default() })
}

/// Every user, as a document: links, passwords and aliases included (it is as secret as
/// the links themselves).
pub(crate) fn export(conn: &rusqlite::Connection, signer: &crate::publish::Signer) -> Result<Document, Error> {
    use crate::secrets::Purpose;
    let rows = crate::store::user_import::exported(conn)?;
    let mut users = Vec::with_capacity(rows.len());
    for row in rows {
        let token = signer.vault.open(Purpose::Token, &row.token_enc)?;
        let token: [u8; 32] =
            token.as_slice().try_into().map_err(|_| Error::Internal("a stored token has the wrong length".into()))?;
        let password = String::from_utf8(signer.vault.open(Purpose::Credential, &row.credential_enc)?.to_vec())
            .map_err(|_| Error::Internal("a stored credential is not text".into()))?;
        let not_started = row.duration_secs > 0 && row.started_at == 0;
        users.push(IncomingUser {
            // A user Hearth took over keeps the id it had there, so a move on keeps track.
            id: row.imported_from.map_or_else(
                || row.id.to_string(),
                |from| from.split_once(':').map_or(from.clone(), |(_, id)| id.to_owned()),
            ),
            name: row.name,
            password: Some(password),
            link: Some(hearth_shared::wire::SubToken::from_bytes(token).to_link_form()),
            quota: row.quota,
            used_up: row.used_up,
            used_down: row.used_down,
            expires_at: if not_started { 0 } else { row.expires_at },
            days_from_first_use: if not_started { row.duration_secs.div_ceil(86_400) } else { 0 },
            enabled: row.enabled,
            reset: row.reset,
            note: row.note,
            device_limit: row.device_limit,
            aliases: crate::store::aliases::paths_of_user(conn, row.id)?,
            telegram_id: row.telegram_id,
            // The cycle a periodic reset is in carries on where the users are taken (0 with
            // no reset: the store keeps none then).
            next_reset: row.next_reset,
            ..IncomingUser::default()
        });
    }
    Ok(Document { format: FORMAT.to_owned(), version: VERSION, source: None, users })
}
