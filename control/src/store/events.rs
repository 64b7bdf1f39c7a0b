//! Events (what happened, for the owner to be told) and the webhooks they are delivered to.
//!
//! An event is written by [`emit`] in the transaction of the change that causes it, with one
//! queued delivery for each webhook that takes its kind: a change committed always has its
//! event and its deliveries, whatever becomes of control or a receiver afterwards, and a change
//! rolled back has none. The deliverer (`crate::webhooks`) sends each webhook's deliveries in
//! order.

use rusqlite::{Connection, OptionalExtension as _, params};
use serde::Serialize;
use serde_json::Value;

use crate::error::Error;
use crate::secrets::Purpose;
use crate::secrets::Vault;

/// Every kind of event, as receivers see it.
pub(crate) const KINDS: &[&str] = &[
    "user.created",
    "user.changed",
    "user.deleted",
    "user.disabled",
    "user.expired",
    "user.over_quota",
    "user.near_quota",
    "user.over_device_limit",
    "node.offline",
    "node.online",
    "node.certificate_expiring",
    "edge.failing",
    "edge.disk_full",
    "edge.failover",
    "edge.recovered",
    "signin.new_address",
    "key.rotated",
    "release.rolled_out",
    "release.stopped",
    "test",
];

/// How long events (and finished deliveries) are kept.
pub(crate) const KEEP: u64 = 30 * 86_400;
/// How long a delivery is retried before it is marked failed.
pub(crate) const RETRY_FOR: u64 = 86_400;
/// The most webhooks.
pub(crate) const MAX_WEBHOOKS: usize = 16;
/// The most bytes of a receiver's answer kept.
pub(crate) const ANSWER_BYTES: usize = 512;

/// Writes an event (and a delivery for each webhook that takes it) in the caller's
/// transaction; returns its id.
pub(crate) fn emit(conn: &Connection, now: u64, kind: &str, subject: &str, data: &Value) -> Result<i64, Error> {
    debug_assert!(KINDS.contains(&kind), "{kind}");
    conn.prepare_cached("INSERT INTO events (at, kind, subject, data) VALUES (?1, ?2, ?3, ?4)")?.execute(params![
        now,
        kind,
        subject,
        data.to_string()
    ])?;
    let id = conn.last_insert_rowid();
    let hooks: Vec<(i64, String)> = conn
        .prepare_cached("SELECT id, events FROM webhooks")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (hook, filter) in hooks {
        if takes(&filter, kind) {
            queue(conn, hook, id, now)?;
        }
    }
    Ok(id)
}

fn queue(conn: &Connection, hook: i64, event: i64, now: u64) -> Result<(), Error> {
    conn.prepare_cached("INSERT INTO deliveries (webhook_id, event_id, queued, next_at) VALUES (?1, ?2, ?3, ?3)")?
        .execute(params![hook, event, now])?;
    Ok(())
}

/// A user's event: its id and name, and `more` (an object's fields).
pub(crate) fn user_event(
    conn: &Connection,
    now: u64,
    kind: &str,
    user: u64,
    name: &str,
    more: Value,
) -> Result<(), Error> {
    let mut data = serde_json::json!({ "user": { "id": user, "name": name } });
    if let (Some(data), Value::Object(more)) = (data.as_object_mut(), more) {
        data.extend(more);
    }
    emit(conn, now, kind, &format!("user {user}"), &data)?;
    Ok(())
}

/// A user's event, the user named by its id (nothing when it is gone).
pub(crate) fn user_event_of(conn: &Connection, now: u64, kind: &str, user: u64, more: Value) -> Result<(), Error> {
    let name: Option<String> =
        conn.prepare_cached("SELECT name FROM users WHERE id = ?1")?.query_row([user], |row| row.get(0)).optional()?;
    match name {
        Some(name) => user_event(conn, now, kind, user, &name, more),
        None => Ok(()),
    }
}

/// Whether a webhook's filter (kinds, comma-separated; `user.*`; `*`) takes `kind`. The test
/// event goes only where it is sent.
pub(crate) fn takes(filter: &str, kind: &str) -> bool {
    kind != "test"
        && filter.split(',').map(str::trim).any(|want| {
            want == "*"
                || want == kind
                || want.strip_suffix(".*").is_some_and(|group| kind.split('.').next() == Some(group))
        })
}

/// A filter checked: each entry a kind, `<group>.*` of a known group, or `*`.
pub(crate) fn check_filter(events: &[String]) -> Result<String, Error> {
    let bad = |what: &str| {
        Error::invalid(
            "bad_events",
            format!("{what}: events are kinds ({}), `<group>.*` or `*`", KINDS[..KINDS.len() - 1].join(", ")),
        )
    };
    if events.is_empty() || events.len() > KINDS.len() {
        return Err(bad("give at least one"));
    }
    for want in events {
        let known = want == "*"
            || (KINDS.contains(&want.as_str()) && want != "test")
            || want.strip_suffix(".*").is_some_and(|group| KINDS.iter().any(|k| k.split('.').next() == Some(group)));
        if !known {
            return Err(bad(&format!("{want:?} is not one")));
        }
    }
    Ok(events.join(","))
}

/// One webhook, as the panel and the API show it (never its secret).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct WebhookView {
    pub id: i64,
    pub url: String,
    pub events: Vec<String>,
    pub created: u64,
    pub pending: u64,
    pub failed: u64,
    pub delivered: u64,
}

/// Adds a webhook; returns its id and the secret its deliveries are signed with (shown once).
pub(crate) fn add_webhook(
    conn: &Connection,
    vault: &Vault,
    url: &str,
    events: &[String],
    now: u64,
) -> Result<(i64, String), Error> {
    let filter = check_filter(events)?;
    let count: usize = conn.query_row("SELECT count(*) FROM webhooks", [], |row| row.get(0))?;
    if count >= MAX_WEBHOOKS {
        return Err(Error::invalid("too_many_webhooks", format!("at most {MAX_WEBHOOKS} webhooks")));
    }
    let secret = format!("whsec_{}", crate::secrets::random_credential());
    conn.execute(
        "INSERT INTO webhooks (url, events, secret_enc, created) VALUES (?1, ?2, ?3, ?4)",
        params![url, filter, vault.seal(Purpose::Webhook, secret.as_bytes()), now],
    )?;
    Ok((conn.last_insert_rowid(), secret))
}

/// Every webhook, with its deliveries counted.
pub(crate) fn webhooks(conn: &Connection) -> Result<Vec<WebhookView>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT w.id, w.url, w.events, w.created,
                (SELECT count(*) FROM deliveries d WHERE d.webhook_id = w.id AND d.state = 'pending'),
                (SELECT count(*) FROM deliveries d WHERE d.webhook_id = w.id AND d.state = 'failed'),
                (SELECT count(*) FROM deliveries d WHERE d.webhook_id = w.id AND d.state = 'delivered')
         FROM webhooks w ORDER BY w.id",
    )?;
    let hooks = query
        .query_map([], |row| {
            Ok(WebhookView {
                id: row.get(0)?,
                url: row.get(1)?,
                events: row.get::<_, String>(2)?.split(',').map(str::to_owned).collect(),
                created: row.get(3)?,
                pending: row.get(4)?,
                failed: row.get(5)?,
                delivered: row.get(6)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(hooks)
}

/// A webhook's URL, or not found.
pub(crate) fn webhook_url(conn: &Connection, id: i64) -> Result<String, Error> {
    conn.prepare_cached("SELECT url FROM webhooks WHERE id = ?1")?
        .query_row([id], |row| row.get(0))
        .optional()?
        .ok_or(Error::NotFound("webhook"))
}

/// Deletes a webhook and its deliveries.
pub(crate) fn delete_webhook(conn: &Connection, id: i64) -> Result<String, Error> {
    let url = webhook_url(conn, id)?;
    conn.execute("DELETE FROM webhooks WHERE id = ?1", [id])?;
    Ok(url)
}

/// Queues a test event for one webhook only.
pub(crate) fn test_webhook(conn: &Connection, id: i64, actor: &str, now: u64) -> Result<i64, Error> {
    webhook_url(conn, id)?;
    let event = emit(conn, now, "test", &format!("webhook {id}"), &serde_json::json!({ "sent_by": actor }))?;
    queue(conn, id, event, now)?;
    Ok(event)
}

/// One delivery, as the panel shows it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct DeliveryView {
    pub id: i64,
    pub event: i64,
    pub kind: String,
    pub subject: String,
    pub state: String,
    pub attempts: u64,
    pub queued: u64,
    pub next_at: u64,
    pub done_at: u64,
    pub status: u16,
    pub answer: String,
    /// The event's data, for the panel to put the event in words.
    pub data: Value,
}

/// A webhook's deliveries, newest first.
pub(crate) fn deliveries(conn: &Connection, webhook: i64, limit: u64) -> Result<Vec<DeliveryView>, Error> {
    webhook_url(conn, webhook)?;
    let mut query = conn.prepare_cached(
        "SELECT d.id, d.event_id, e.kind, e.subject, d.state, d.attempts, d.queued, d.next_at, d.done_at, d.status,
                d.answer, e.data
         FROM deliveries d JOIN events e ON e.id = d.event_id
         WHERE d.webhook_id = ?1 ORDER BY d.id DESC LIMIT ?2",
    )?;
    let rows = query
        .query_map(params![webhook, limit.min(200)], |row| {
            Ok(DeliveryView {
                id: row.get(0)?,
                event: row.get(1)?,
                kind: row.get(2)?,
                subject: row.get(3)?,
                state: row.get(4)?,
                attempts: row.get(5)?,
                queued: row.get(6)?,
                next_at: row.get(7)?,
                done_at: row.get(8)?,
                status: row.get(9)?,
                answer: row.get(10)?,
                data: serde_json::from_str(&row.get::<_, String>(11)?).unwrap_or(Value::Null),
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// One event as receivers get it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct EventView {
    pub id: i64,
    pub kind: String,
    pub at: u64,
    pub subject: String,
    pub data: Value,
}

fn event_of(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<EventView> {
    let data: String = row.get(at + 4)?;
    Ok(EventView {
        id: row.get(at)?,
        kind: row.get(at + 1)?,
        at: row.get(at + 2)?,
        subject: row.get(at + 3)?,
        data: serde_json::from_str(&data).unwrap_or(Value::Null),
    })
}

/// Events, newest first, before `before` (an id; 0: from the newest).
pub(crate) fn recent(conn: &Connection, before: i64, limit: u64) -> Result<Vec<EventView>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT id, kind, at, subject, data FROM events WHERE ?1 = 0 OR id < ?1 ORDER BY id DESC LIMIT ?2",
    )?;
    let rows = query.query_map(params![before, limit.min(500)], |row| event_of(row, 0))?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Events after `after` (an id), oldest first, at most `limit`.
pub(crate) fn after(conn: &Connection, after: i64, limit: u64) -> Result<Vec<EventView>, Error> {
    let mut query =
        conn.prepare_cached("SELECT id, kind, at, subject, data FROM events WHERE id > ?1 ORDER BY id LIMIT ?2")?;
    let rows = query.query_map(params![after, limit], |row| event_of(row, 0))?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The next delivery of a webhook, due to be sent.
#[derive(Clone, Debug)]
pub(crate) struct Due {
    pub delivery: i64,
    pub url: String,
    pub secret: String,
    pub attempts: u64,
    pub event: EventView,
}

/// Each webhook's oldest pending delivery, when it is due: one at a time per webhook, so each
/// receiver gets its events in order.
pub(crate) fn due(conn: &Connection, vault: &Vault, now: u64) -> Result<Vec<Due>, Error> {
    let mut query = conn.prepare_cached(
        "SELECT d.id, w.url, w.secret_enc, d.attempts, e.id, e.kind, e.at, e.subject, e.data
         FROM deliveries d JOIN webhooks w ON w.id = d.webhook_id JOIN events e ON e.id = d.event_id
         WHERE d.id IN (SELECT min(id) FROM deliveries WHERE state = 'pending' GROUP BY webhook_id)
           AND d.next_at <= ?1",
    )?;
    let rows: Vec<(i64, String, Vec<u8>, u64, EventView)> = query
        .query_map([now], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, event_of(row, 4)?)))?
        .collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(|(delivery, url, secret, attempts, event)| {
            let secret = String::from_utf8(vault.open(Purpose::Webhook, &secret)?.to_vec())
                .map_err(|_| Error::Internal("a webhook secret is not text".into()))?;
            Ok(Due { delivery, url, secret, attempts, event })
        })
        .collect()
}

/// When the next pending delivery is due, if one is pending.
pub(crate) fn next_retry(conn: &Connection) -> Result<Option<u64>, Error> {
    Ok(conn.query_row("SELECT min(next_at) FROM deliveries WHERE state = 'pending'", [], |row| row.get(0))?)
}

/// The wait before attempt `attempts + 1`: 1 s doubling to an hour.
pub(crate) fn backoff(attempts: u64) -> u64 {
    (1u64 << attempts.min(12)).min(3600)
}

/// Records how a delivery went: `status` 2xx delivered; anything else retried after
/// [`backoff`], or failed once it has been retried for [`RETRY_FOR`].
pub(crate) fn settle(conn: &Connection, delivery: i64, status: u16, answer: &str, now: u64) -> Result<(), Error> {
    let answer: String = answer.chars().take(ANSWER_BYTES).collect();
    let row: Option<(u64, u64)> = conn
        .prepare_cached("SELECT attempts, queued FROM deliveries WHERE id = ?1")?
        .query_row([delivery], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    // Its webhook was deleted while it was being sent.
    let Some((attempts, queued)) = row else { return Ok(()) };
    let (state, next_at, done_at) = if (200..300).contains(&status) {
        ("delivered", now, now)
    } else if now >= queued + RETRY_FOR {
        ("failed", now, now)
    } else {
        ("pending", now + backoff(attempts), 0)
    };
    conn.prepare_cached(
        "UPDATE deliveries SET state = ?2, attempts = attempts + 1, next_at = ?3, done_at = ?4, status = ?5, answer = ?6
         WHERE id = ?1",
    )?
    .execute(params![delivery, state, next_at, done_at, status, answer])?;
    Ok(())
}

/// Forgets events (and deliveries) older than [`KEEP`], but never one still to be delivered.
pub(crate) fn prune(conn: &Connection, now: u64) -> Result<usize, Error> {
    let before = now.saturating_sub(KEEP);
    Ok(conn.execute(
        "DELETE FROM events WHERE at < ?1 AND id NOT IN (SELECT event_id FROM deliveries WHERE state = 'pending')",
        [before],
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_take_kinds_groups_or_all_and_never_the_test_event() {
        assert!(takes("*", "user.created"));
        assert!(takes("user.*", "user.near_quota"));
        assert!(!takes("user.*", "node.offline"));
        assert!(takes("node.offline,user.created", "user.created"));
        assert!(!takes("node.offline", "node.online"));
        assert!(!takes("*", "test"));
        assert_eq!(check_filter(&["user.*".into(), "node.offline".into()]).unwrap(), "user.*,node.offline");
        for bad in [vec![], vec!["users.*".to_owned()], vec!["test".to_owned()], vec!["user.made".to_owned()]] {
            assert!(check_filter(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_delivery_is_retried_for_a_day_then_failed_and_a_gone_one_is_no_error() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::store::Db::open(&dir.path().join("control.db")).unwrap();
        db.write_blocking(|tx| {
            tx.execute_batch(
                "INSERT INTO events (id, at, kind, subject, data) VALUES (1, 0, 'test', '', '{}');
                 INSERT INTO webhooks (id, url, events, secret_enc, created) VALUES (1, 'https://x', '*', x'', 0);
                 INSERT INTO deliveries (webhook_id, event_id, queued, next_at) VALUES (1, 1, 1000, 1000);",
            )?;
            let state = || -> rusqlite::Result<(String, u64, u64)> {
                tx.query_row("SELECT state, attempts, next_at FROM deliveries", [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
            };
            settle(tx, 1, 500, "busy", 1000)?;
            assert_eq!(state()?, ("pending".into(), 1, 1001));
            settle(tx, 1, 0, "no answer", 1001)?;
            assert_eq!(state()?, ("pending".into(), 2, 1003));
            settle(tx, 1, 503, "", 1000 + RETRY_FOR)?;
            assert_eq!(state()?.0, "failed");
            settle(tx, 7, 200, "", 1000)
        })
        .unwrap();
    }

    #[test]
    fn retries_back_off_to_an_hour() {
        assert_eq!((backoff(0), backoff(1), backoff(5)), (1, 2, 32));
        assert_eq!(backoff(12), 3600);
        assert_eq!(backoff(40), 3600);
    }
}
