//! Control's background work: the outbox pusher, the usage drain from the edge, and the
//! sweeps that enforce expiry, reset traffic, republish usage and renew credential sets.

use std::sync::Arc;
use std::time::Duration;

use hearth_shared::envelope::{Audience, Draft, Kind};
use hearth_shared::sha256;
use hearth_shared::wire::{self, BatchEntry, BatchManifest, PushBundle, UsageDrain, stream};
use tokio::sync::watch;

use crate::app::{App, Counters, now};
use crate::error::Error;
use crate::publish::{self, Changes, REFRESH_BEFORE};
use crate::store::{self, nodes as node_store};

/// A node seen within this many seconds is online.
pub(crate) const NODE_ONLINE_SECS: u64 = 180;
/// Outbox rows one push takes at most.
const PUSH_ROWS: usize = 2000;
/// Bytes of item envelopes one push carries at most (the edge takes 32 MiB).
const PUSH_BYTES: usize = 16 * 1024 * 1024;
/// The longest wait between two push attempts after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How often control asks the edge for queued usage reports.
const DRAIN_EVERY: Duration = Duration::from_secs(5);
/// Drain pages one pass takes at most (a backlog of 50,000 reports): the rest waits for the
/// next pass, so an edge that never stops handing out pages keeps the drainer no busier than
/// a large backlog does.
const DRAIN_PAGES: usize = 100;
/// Users one sweep transaction handles at most.
const SWEEP_BATCH: usize = 1000;

pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>, wait: Duration) -> bool {
    tokio::select! {
        _ = shutdown.wait_for(|stop| *stop) => true,
        () = tokio::time::sleep(wait) => false,
    }
}

/// One push: what the outbox holds (coalesced per stream to the latest version), under one
/// signed batch manifest. Returns how many outbox rows it cleared.
async fn push_once(app: &Arc<App>, base: &str) -> Result<usize, String> {
    let chunk = app
        .db
        .read(|c| {
            let rows: Vec<(i64, String)> = c
                .prepare_cached("SELECT id, stream FROM outbox ORDER BY id LIMIT ?1")?
                .query_map([PUSH_ROWS], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<_, _>>()?;
            let mut streams: Vec<String> = rows.iter().map(|(_, s)| s.clone()).collect();
            streams.sort_unstable();
            streams.dedup();
            let mut items = Vec::new();
            let mut bytes = 0;
            let mut last = 0;
            let mut query = c.prepare_cached("SELECT version, envelope FROM streams WHERE name = ?1")?;
            for name in &streams {
                let (version, envelope): (u64, Option<Vec<u8>>) =
                    query.query_row([name], |row| Ok((row.get(0)?, row.get(1)?)))?;
                bytes += envelope.as_ref().map_or(0, Vec::len);
                items.push((name.clone(), version, envelope));
            }
            if let Some((id, _)) = rows.last() {
                last = *id;
            }
            Ok::<_, Error>((rows.len(), last, items, bytes))
        })
        .await
        .map_err(|e| e.to_string())?;
    let (rows, last_id, mut items, bytes) = chunk;
    if rows == 0 {
        return Ok(0);
    }
    // A chunk over the byte budget goes out in halves: rows stay queued until their push is
    // accepted, and a stream's latest version is what is sent, so order is never broken.
    let mut clear_to = last_id;
    if bytes > PUSH_BYTES && items.len() > 1 {
        items.truncate(items.len() / 2);
        clear_to = 0;
    }
    let now = now();
    let state = app.clone();
    let (batch, online) = app
        .db
        .write(move |tx| {
            let version = store::get_state(tx, "batch")? + 1;
            store::set_state(tx, "batch", version)?;
            Ok((u64::try_from(version).expect("positive"), state.signer.online(tx)?))
        })
        .await
        .map_err(|e| e.to_string())?;
    let entries = items
        .iter()
        .map(|(name, version, envelope)| BatchEntry {
            stream: name.clone(),
            version: *version,
            digest: envelope.as_ref().map(|e| sha256(e)),
        })
        .collect();
    let manifest = BatchManifest::new(entries).map_err(|e| e.to_string())?;
    let signed = Draft {
        kind: Kind::Batch,
        stream: stream::BATCH.to_owned(),
        version: batch,
        epoch: app.signer.epoch,
        issued: now,
        expires: now + 3600,
        audience: Audience::Edge,
        prev: [0; 32],
    }
    .sign(manifest.encode(), &[&online.key]);
    let sent: Vec<(String, u64)> = items.iter().map(|(name, version, _)| (name.clone(), *version)).collect();
    let bundle = PushBundle {
        key_records: online.chain.iter().cloned().map(Into::into).collect(),
        manifest: signed.encode(),
        items: items.into_iter().filter_map(|(_, _, envelope)| envelope.map(Into::into)).collect(),
    };
    let body = wire::encode(&bundle);
    let size = body.len() as u64;
    match send_to_edge(app, reqwest::Method::POST, base, "push", body, Duration::from_secs(60)).await {
        Ok(()) => {}
        // One stream the edge will not take (its version is behind what the edge holds, say,
        // after a restore from an older state) must not hold back every change after it: it
        // is set aside, with an alert, and the rest goes out at once.
        Err(EdgeError { stream: Some(stream), text }) => {
            let Some(&(_, version)) = sent.iter().find(|(name, _)| *name == stream) else { return Err(text) };
            set_aside(app, stream, version, text, last_id).await?;
            return Ok(1);
        }
        Err(e) => return Err(e.text),
    }
    let cleared = app
        .db
        .write(move |tx| {
            // What the edge took clears what was set aside of those streams.
            let mut held = tx.prepare_cached("DELETE FROM outbox_held WHERE stream = ?1")?;
            for (name, _) in &sent {
                held.execute([name])?;
            }
            if clear_to > 0 {
                Ok(tx.execute("DELETE FROM outbox WHERE id <= ?1", [clear_to])?)
            } else {
                let mut delete = tx.prepare_cached("DELETE FROM outbox WHERE stream = ?1 AND id <= ?2")?;
                let mut cleared = 0;
                for (name, _) in &sent {
                    cleared += delete.execute(rusqlite::params![name, last_id])?;
                }
                Ok(cleared)
            }
        })
        .await
        .map_err(|e| e.to_string())?;
    Counters::add(&app.counters.pushes, 1);
    Counters::add(&app.counters.pushed_bytes, size);
    Counters::add(&app.counters.pushed_items, cleared as u64);
    Ok(cleared.max(1))
}

/// Takes `stream` (refused by the edge at `version`, for `reason`) out of the outbox, up to the
/// row `last_id`, and keeps it with the reason for the owner to see. A newer version of the
/// stream goes out as usual, and clears it once the edge takes it.
async fn set_aside(app: &Arc<App>, stream: String, version: u64, reason: String, last_id: i64) -> Result<(), String> {
    tracing::warn!(%stream, version, %reason, "the edge refused one stream: set aside, the rest goes on");
    let now = now();
    app.db
        .write(move |tx| {
            tx.execute(
                "INSERT INTO outbox_held (stream, version, reason, held_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (stream) DO UPDATE SET version = excluded.version, reason = excluded.reason,
                   held_at = excluded.held_at",
                rusqlite::params![stream, version, reason, now],
            )?;
            tx.execute("DELETE FROM outbox WHERE stream = ?1 AND id <= ?2", rusqlite::params![stream, last_id])?;
            Ok(())
        })
        .await
        .map_err(|e| e.to_string())
}

/// Why the edge did not take what control sent.
#[derive(Debug)]
pub(crate) struct EdgeError {
    /// What to tell the owner (never the URL: it holds the secret API prefix).
    pub(crate) text: String,
    /// The one stream the edge refused, when it named one.
    pub(crate) stream: Option<String>,
}

impl From<EdgeError> for String {
    fn from(error: EdgeError) -> String {
        error.text
    }
}

/// Sends `body` to the edge's `path` (under its API prefix: `push`, `archive`, `release`, which
/// also names it in errors) with the push token.
pub(crate) async fn send_to_edge(
    app: &App,
    method: reqwest::Method,
    base: &str,
    path: &str,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(), EdgeError> {
    let response = app
        .http
        .request(method, format!("{}/{}/{path}", base.trim_end_matches('/'), app.config.edge.api_prefix))
        .bearer_auth(&app.config.edge.push_token)
        .header("content-type", "application/octet-stream")
        .body(body)
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| EdgeError { text: format!("the edge did not answer: {}", without_url(&e)), stream: None })?;
    let status = response.status();
    if !status.is_success() {
        let (message, stream) = crate::capped::refusal(response).await;
        return Err(EdgeError { text: format!("the edge refused the {path} ({status}): {message}"), stream });
    }
    Ok(())
}

/// A reqwest error without its URL (which holds the edge's secret API path).
pub(crate) fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "<edge>");
    }
    text
}

/// Pushes the outbox to the edge until shutdown: at once when woken, retrying with backoff
/// (1 s doubling to 60 s) while the edge is down or refuses. Nothing leaves the outbox
/// until the edge accepted it.
pub(crate) async fn pusher(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let mut backoff = Duration::from_secs(1);
    loop {
        // The edge in force now: the owner may set, change or remove it at any time.
        let Some(edge) = app.edge_url() else {
            tokio::select! {
                () = app.outbox.notified() => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
            continue;
        };
        match push_once(&app, &edge).await {
            Ok(0) => {
                tokio::select! {
                    () = app.outbox.notified() => {}
                    _ = shutdown.wait_for(|stop| *stop) => return,
                    // Changes made by the CLI in another process land in the outbox too.
                    () = tokio::time::sleep(Duration::from_secs(2)) => {}
                }
            }
            Ok(_) => {
                backoff = Duration::from_secs(1);
                let mut status = app.push_status.lock().expect("status lock");
                status.last_push = now();
                status.last_error = None;
            }
            Err(error) => {
                Counters::add(&app.counters.push_failures, 1);
                tracing::warn!(%error, retry_in = backoff.as_secs(), "push to the edge failed");
                app.push_status.lock().expect("status lock").last_error = Some(error);
                if stopped(&mut shutdown, backoff).await {
                    return;
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

/// Takes the usage reports nodes left at the edge (a control behind NAT never hears from
/// nodes directly) and applies each exactly once.
pub(crate) async fn drainer(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    loop {
        if let Some(edge) = app.edge_url() {
            let base = format!("{edge}/{}/usage", app.config.edge.api_prefix);
            if let Err(error) = drain_once(&app, &base).await {
                tracing::warn!(%error, "usage drain from the edge failed");
            }
        }
        if stopped(&mut shutdown, DRAIN_EVERY).await {
            return;
        }
    }
}

async fn drain_once(app: &Arc<App>, base: &str) -> Result<(), String> {
    for _ in 0..DRAIN_PAGES {
        let cursor = app.db.read(|c| store::get_state(c, "drain_cursor")).await.map_err(|e| e.to_string())?;
        let response = app
            .http
            .get(format!("{base}?after={cursor}"))
            .bearer_auth(&app.config.edge.push_token)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| format!("the edge did not answer: {}", without_url(&e)))?;
        if !response.status().is_success() {
            return Err(format!("the edge refused the drain ({})", response.status()));
        }
        let bytes = crate::capped::read(response, UsageDrain::MAX_LEN, "a drain of usage reports")
            .await
            .map_err(|e| e.to_string())?;
        let drain: UsageDrain = wire::decode(&bytes, "usage drain").map_err(|e| e.to_string())?;
        let next = i64::try_from(drain.cursor).map_err(|_| "the edge's cursor is out of range".to_owned())?;
        let count = drain.reports.len();
        let state = app.clone();
        let applied = app
            .db
            .write(move |tx| {
                let mut applied = 0;
                let mut acked = std::collections::BTreeMap::new();
                for report in &drain.reports {
                    let Some(node) = report_node(report) else { continue };
                    match node_store::apply_usage(tx, &state.signer, node, report, now()) {
                        Ok(outcome) => {
                            if matches!(outcome, node_store::UsageOutcome::Applied(_)) {
                                applied += 1;
                            }
                            acked.insert(node, outcome.acked());
                        }
                        // Out of order or refused: the node still holds it and sends it again.
                        Err(e) => tracing::info!(node, error = %e, "usage report from the edge not applied"),
                    }
                }
                // The acknowledgements go back through the edge, to nodes that reach only it.
                for (node, seq) in acked {
                    publish::usage_ack(tx, &state.signer, node, seq, now())?;
                }
                store::set_state(tx, "drain_cursor", next)?;
                Ok(applied)
            })
            .await
            .map_err(|e| e.to_string())?;
        Counters::add(&app.counters.usage_reports, applied);
        app.push_status.lock().expect("status lock").last_drain = now();
        if applied > 0 {
            app.changed();
        }
        if count == 0 || next <= cursor {
            return Ok(());
        }
    }
    Ok(())
}

/// The node a usage report's stream names (checked again when it is verified).
fn report_node(bytes: &[u8]) -> Option<u64> {
    let envelope = hearth_shared::envelope::Envelope::decode(bytes, Kind::UsageReport.max_len()).ok()?;
    stream::parse_usage(&envelope.header.stream)
}

/// The ids a query selects.
fn ids(conn: &rusqlite::Connection, sql: &str, params: impl rusqlite::Params) -> Result<Vec<u64>, Error> {
    let ids = conn.prepare_cached(sql)?.query_map(params, |row| row.get(0))?.collect::<Result<_, _>>()?;
    Ok(ids)
}

/// One pass of every sweep; returns how many users it republished.
pub(crate) fn sweep(
    conn: &rusqlite::Connection,
    app: &App,
    now: u64,
    usage: bool,
    renew: bool,
) -> Result<usize, Error> {
    let mut changes = Changes::default();
    let mut touched = 0;
    // Expired since the last publish.
    for id in ids(
        conn,
        "SELECT id FROM users WHERE expires_at > 0 AND expires_at <= ?1 AND status IN ('active', 'not_started') LIMIT ?2",
        rusqlite::params![now, SWEEP_BATCH],
    )? {
        changes.user(conn, id)?;
        touched += 1;
    }
    // Traffic resets that are due.
    let mut resets =
        conn.prepare_cached("SELECT id, reset FROM users WHERE next_reset > 0 AND next_reset <= ?1 LIMIT ?2")?;
    let due: Vec<(u64, String)> = resets
        .query_map(rusqlite::params![now, SWEEP_BATCH], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (id, reset) in due {
        let strategy = publish::parse_reset(&reset).unwrap_or(hearth_shared::wire::ResetStrategy::Never);
        conn.execute(
            "UPDATE users SET used_up = 0, used_down = 0, next_reset = ?2 WHERE id = ?1",
            rusqlite::params![id, publish::next_reset(strategy, now)],
        )?;
        changes.user(conn, id)?;
        touched += 1;
    }
    if usage {
        for id in ids(conn, "SELECT id FROM users WHERE usage_dirty = 1 LIMIT ?1", [SWEEP_BATCH])? {
            changes.user(conn, id)?;
            touched += 1;
        }
    }
    changes.publish(conn, &app.signer, now)?;
    if crate::releases::advance(conn, &app.signer, app.config.release_timeout_secs, now)? {
        touched += 1;
    }
    if renew {
        let mut query = conn.prepare_cached(
            "SELECT name FROM streams WHERE name LIKE 'creds/%' AND envelope IS NOT NULL AND expires < ?1",
        )?;
        let names: Vec<String> =
            query.query_map([now + REFRESH_BEFORE], |row| row.get(0))?.collect::<Result<_, _>>()?;
        for name in names {
            if let Ok(hearth_shared::wire::Stream::Creds(node)) = name.parse() {
                publish::publish_creds(conn, &app.signer, node, now, true)?;
            }
        }
    }
    Ok(touched)
}

/// Runs the sweeps until shutdown: expiry and resets every 5 s, usage every minute, renewal
/// of credential sets every hour.
pub(crate) async fn sweeper(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let mut round: u64 = 0;
    loop {
        let usage = round.is_multiple_of(12);
        let renew = round.is_multiple_of(720);
        let state = app.clone();
        match app.db.write(move |tx| sweep(tx, &state, now(), usage, renew)).await {
            Ok(0) => {}
            Ok(touched) => {
                tracing::debug!(touched, "sweep republished users");
                app.changed();
            }
            Err(e) => tracing::error!(error = %e, "sweep failed"),
        }
        round += 1;
        if stopped(&mut shutdown, Duration::from_secs(5)).await {
            return;
        }
    }
}

/// Notices commits made by other processes (the CLI on the same database) and wakes the
/// pusher and the nodes' long polls, so a user added from the shell reaches nodes at once.
pub(crate) async fn watch_external(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let conn = match app.db.connect() {
        Ok(conn) => Arc::new(std::sync::Mutex::new(conn)),
        Err(e) => {
            tracing::error!(error = %e, "cannot watch the database for outside changes");
            return;
        }
    };
    let mut last: Option<i64> = None;
    loop {
        let watcher = conn.clone();
        let version = tokio::task::spawn_blocking(move || {
            watcher.lock().expect("watcher lock").query_row("PRAGMA data_version", [], |row| row.get::<_, i64>(0))
        })
        .await;
        if let Ok(Ok(version)) = version {
            if last.is_some_and(|last| last != version) {
                app.changed();
            }
            last = Some(version);
        }
        if stopped(&mut shutdown, Duration::from_millis(500)).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::nodes::{EnrollRequest, NodeInput};
    use crate::store::users::{self, UserInput};
    use crate::testing::TestControl;

    /// A node added and enrolled (with a key made here), in the default group.
    fn enrolled_node(tx: &rusqlite::Connection, app: &App, now: u64) -> Result<node_store::NodeView, Error> {
        let key =
            hearth_shared::keys::SecretKey::generate(hearth_shared::keys::Role::Node, &mut rand_core::OsRng).unwrap();
        let (node, token) = node_store::create(
            tx,
            "test",
            &NodeInput { name: Some("n".into()), host: Some("203.0.113.1".into()), ..NodeInput::default() },
            now,
        )?;
        let request = EnrollRequest {
            token,
            key: key.public().to_string(),
            cert_sha256: None,
            spki_sha256: None,
            version: String::new(),
        };
        node_store::enroll(tx, &app.signer, &request, now)?;
        Ok(node)
    }

    #[test]
    fn sweeps_expire_reset_republish_and_renew() {
        let t = TestControl::new(false);
        let app = &t.app;
        let now = crate::app::now();
        let (node, creds_version) = app
            .db
            .write_blocking(|tx| {
                let node = enrolled_node(tx, app, now)?;
                let daily =
                    UserInput { name: Some("daily".into()), reset: Some("daily".into()), ..UserInput::default() };
                users::create(tx, &app.signer, "test", &daily, now)?;
                let brief =
                    UserInput { name: Some("brief".into()), expires_at: Some(now + 10), ..UserInput::default() };
                users::create(tx, &app.signer, "test", &brief, now)?;
                tx.execute("UPDATE users SET used_up = 5, used_down = 7, usage_dirty = 1 WHERE name = 'daily'", [])?;
                let version = publish::envelope(tx, &stream::creds(node.id))?.map(|(v, _)| v).unwrap();
                Ok((node.id, version))
            })
            .unwrap();
        let status = |name: &'static str| {
            app.db
                .read_blocking(|c| {
                    Ok(c.query_row(
                        "SELECT status, used_up + used_down, usage_dirty FROM users WHERE name = ?1",
                        [name],
                        |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?, r.get::<_, bool>(2)?)),
                    )?)
                })
                .unwrap()
        };
        // Nothing is due yet: only the dirty usage is republished.
        let touched = app.db.write_blocking(|tx| sweep(tx, app, now, true, false)).unwrap();
        assert_eq!(touched, 1);
        assert_eq!(status("daily"), ("active".into(), 12, false));
        // Two days on: the brief user has expired and leaves the set; the daily one is reset;
        // the set, signed two days ago, is renewed when renewal runs.
        let later = now + 2 * 86_400;
        app.db.write_blocking(|tx| sweep(tx, app, later, false, false)).unwrap();
        assert_eq!(status("brief").0, "expired");
        assert_eq!(status("daily"), ("active".into(), 0, false));
        let set_after = |c: &rusqlite::Connection| publish::envelope(c, &stream::creds(node)).map(|e| e.unwrap().0);
        let expired_version = app.db.read_blocking(set_after).unwrap();
        assert_eq!(expired_version, creds_version + 1, "the expiry re-signed the set");
        let far = later + publish::CREDS_LIFETIME - REFRESH_BEFORE + 60;
        app.db.write_blocking(|tx| sweep(tx, app, far, false, true)).unwrap();
        assert_eq!(app.db.read_blocking(set_after).unwrap(), expired_version + 1, "renewed before it expires");
        app.db.write_blocking(|tx| sweep(tx, app, far, false, true)).unwrap();
        assert_eq!(app.db.read_blocking(set_after).unwrap(), expired_version + 1, "renewed once");
    }

    /// A user over quota is out of the node's set until the traffic reset the sweep runs when
    /// it is due; then the user is back in a newly signed set, and stays out of it before.
    #[test]
    fn a_due_reset_brings_an_over_quota_user_back_into_the_set() {
        let t = TestControl::new(false);
        let app = &t.app;
        let now = crate::app::now();
        let (node, capped) = app
            .db
            .write_blocking(|tx| {
                let node = enrolled_node(tx, app, now)?;
                let input = UserInput {
                    name: Some("capped".into()),
                    quota: Some(1000),
                    reset: Some("daily".into()),
                    ..UserInput::default()
                };
                let capped = users::create(tx, &app.signer, "test", &input, now)?.id;
                Ok((node.id, capped))
            })
            .unwrap();
        // The set the node would pull: its version, and whether the user is in it.
        let held = || {
            app.db
                .read_blocking(|c| {
                    let (version, bytes) = publish::envelope(c, &stream::creds(node))?.expect("a signed set");
                    let envelope = hearth_shared::envelope::Envelope::decode(&bytes, usize::MAX).expect("an envelope");
                    let set = hearth_shared::wire::CredentialSet::decode(&envelope.body).expect("a set");
                    Ok((version, set.users().iter().any(|u| u.user == capped)))
                })
                .unwrap()
        };
        let status = || {
            app.db
                .read_blocking(|c| {
                    Ok(c.query_row("SELECT status FROM users WHERE id = ?1", [capped], |r| r.get::<_, String>(0))?)
                })
                .unwrap()
        };
        assert!(held().1, "a new user is in the set");
        // 1200 bytes counted (by a report, which marks usage to publish): over quota, out of the set.
        app.db
            .write_blocking(|tx| {
                tx.execute("UPDATE users SET used_down = 1200, usage_dirty = 1 WHERE id = ?1", [capped])?;
                sweep(tx, app, now, true, false)
            })
            .unwrap();
        assert_eq!(status(), "over_quota");
        let (cut, in_set) = held();
        assert!(!in_set, "over quota: out of the set");
        // Until the next midnight (UTC) no reset is due: still out. (The test may run at any
        // time of day: a fixed step such as an hour would cross midnight late in the day.)
        let midnight = publish::next_reset(hearth_shared::wire::ResetStrategy::Daily, now);
        app.db.write_blocking(|tx| sweep(tx, app, midnight - 1, true, false)).unwrap();
        assert_eq!((status().as_str(), held()), ("over_quota", (cut, false)));
        // Past the next midnight the reset is due: usage back to zero, the user back in a set
        // signed again.
        app.db.write_blocking(|tx| sweep(tx, app, midnight + 60, true, false)).unwrap();
        assert_eq!(status(), "active");
        let (version, in_set) = held();
        assert!(in_set && version > cut, "the reset put the user back (set {cut} -> {version})");
    }
}
