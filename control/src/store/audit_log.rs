//! The audit log: who changed what, when, and (for edits) each field's before and after, never
//! a secret.

use rusqlite::Connection;

use crate::error::Error;

/// Records a change in the audit log. `detail` must never hold a secret.
pub(crate) fn audit(
    conn: &Connection,
    now: u64,
    actor: &str,
    action: &str,
    target: &str,
    detail: &str,
) -> Result<(), Error> {
    conn.prepare_cached("INSERT INTO audit (at, actor, action, target, detail) VALUES (?1, ?2, ?3, ?4, ?5)")?
        .execute(rusqlite::params![now, actor, action, target, detail])?;
    Ok(())
}

/// One field an edit changed: what it was and became, or neither where the value is not
/// shown (a note's words).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct FieldChange {
    pub(crate) field: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) from: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) to: Option<serde_json::Value>,
}

impl FieldChange {
    pub(crate) fn shown(field: &str, from: serde_json::Value, to: serde_json::Value) -> FieldChange {
        FieldChange { field: field.to_owned(), from: Some(from), to: Some(to) }
    }

    pub(crate) fn hidden(field: &str) -> FieldChange {
        FieldChange { field: field.to_owned(), from: None, to: None }
    }
}

/// An edit's audit entry: `detail` in words for the CLI and old logs (`quota: 0 -> 1073741824,
/// note`), and the changes themselves for the panel to put in the admin's language.
pub(crate) fn audit_edit(
    conn: &Connection,
    now: u64,
    actor: &str,
    action: &str,
    target: &str,
    changes: &[FieldChange],
) -> Result<(), Error> {
    let detail = changes
        .iter()
        .map(|c| match (&c.from, &c.to) {
            (Some(from), Some(to)) => format!("{}: {from} -> {to}", c.field),
            _ => c.field.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let changes = serde_json::to_string(changes).map_err(|e| Error::Internal(e.to_string()))?;
    conn.prepare_cached(
        "INSERT INTO audit (at, actor, action, target, detail, changes) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(rusqlite::params![now, actor, action, target, detail, changes])?;
    Ok(())
}

/// The fields whose values differ between two views of an object, but for `volatile` ones
/// (counters and clocks that move on their own).
pub(crate) fn differences<T: serde::Serialize>(before: &T, after: &T, volatile: &[&str]) -> Vec<FieldChange> {
    let (before, after) = (serde_json::to_value(before), serde_json::to_value(after));
    let (Ok(serde_json::Value::Object(before)), Ok(serde_json::Value::Object(after))) = (before, after) else {
        return Vec::new();
    };
    after
        .iter()
        .filter(|(field, value)| !volatile.contains(&field.as_str()) && before.get(*field) != Some(value))
        .map(|(field, value)| {
            FieldChange::shown(field, before.get(field).cloned().unwrap_or(serde_json::Value::Null), value.clone())
        })
        .collect()
}

/// One entry of the audit log, as the panel shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct AuditEntry {
    pub(crate) id: i64,
    pub(crate) at: i64,
    pub(crate) actor: String,
    pub(crate) action: String,
    pub(crate) target: String,
    pub(crate) detail: String,
    /// An edit's changes, field by field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) changes: Option<Vec<FieldChange>>,
}

/// Which entries of the audit log to list.
#[derive(Clone, Debug, Default)]
pub(crate) struct AuditFilter {
    /// Entries before this one (an id).
    pub(crate) before: Option<i64>,
    /// By this actor, exactly (`owner`, `admin bob`, `token 3 (backup)`, `cli`...).
    pub(crate) actor: Option<String>,
    /// This action (`user.update`), or every action under a prefix (`user.*`).
    pub(crate) action: Option<String>,
    /// About this user (`user 5` and `user 5 (name)` targets).
    pub(crate) user: Option<u64>,
}

/// The audit log as `filter` narrows it, newest first, at most `limit`.
pub(crate) fn audit_page(conn: &Connection, filter: &AuditFilter, limit: i64) -> Result<Vec<AuditEntry>, Error> {
    let (action, prefix) = match filter.action.as_deref() {
        Some(action) => match action.strip_suffix('*') {
            Some(prefix) => (None, Some(prefix.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"))),
            None => (Some(action), None),
        },
        None => (None, None),
    };
    let user = filter.user.map(|id| format!("user {id}"));
    let mut query = conn.prepare_cached(
        "SELECT id, at, actor, action, target, detail, changes FROM audit
         WHERE id < ?1 AND (?2 IS NULL OR actor = ?2) AND (?3 IS NULL OR action = ?3)
           AND (?4 IS NULL OR action LIKE ?4 || '%' ESCAPE '\\')
           AND (?5 IS NULL OR target = ?5 OR target LIKE ?5 || ' (%')
         ORDER BY id DESC LIMIT ?6",
    )?;
    let rows = query
        .query_map(
            rusqlite::params![filter.before.unwrap_or(i64::MAX), filter.actor, action, prefix, user, limit],
            |row| {
                let changes: Option<String> = row.get(6)?;
                Ok(AuditEntry {
                    id: row.get(0)?,
                    at: row.get(1)?,
                    actor: row.get(2)?,
                    action: row.get(3)?,
                    target: row.get(4)?,
                    detail: row.get(5)?,
                    changes: changes.and_then(|c| serde_json::from_str(&c).ok()),
                })
            },
        )?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Who and what the audit log holds, for its filters: each actor and action once, at most
/// 200 of each.
pub(crate) fn audit_facets(conn: &Connection) -> Result<(Vec<String>, Vec<String>), Error> {
    let distinct = |sql: &str| -> Result<Vec<String>, Error> {
        Ok(conn.prepare_cached(sql)?.query_map([], |row| row.get(0))?.collect::<Result<_, _>>()?)
    };
    Ok((
        distinct("SELECT DISTINCT actor FROM audit ORDER BY actor LIMIT 200")?,
        distinct("SELECT DISTINCT action FROM audit ORDER BY action LIMIT 200")?,
    ))
}
