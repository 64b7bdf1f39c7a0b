//! The outbox and what empties it: every envelope control signs for the edge is written, as
//! `(stream, version)`, into the outbox in the same transaction as the change that made it
//! ([`enqueue`]), whichever process made the change; the pusher in `serve` pushes it to the
//! edge in signed batches and deletes what the edge accepted; the drainer takes the usage
//! reports nodes left at the edge. When the edge changes, everything is queued for the new
//! one ([`resync_edge`]).

use std::sync::Arc;
use std::time::Duration;

use hearth_shared::envelope::{Audience, Draft, Kind};
use hearth_shared::sha256;
use hearth_shared::wire::{self, BatchEntry, BatchManifest, PushBundle, UsageDrain, stream};
use rusqlite::{Connection, params};
use tokio::sync::watch;

use crate::app::{App, Counters, now};
use crate::error::Error;
use crate::publish::{self, Signer};
use crate::store::{self, nodes as node_store};
use crate::tasks::stopped;

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

/// Queues a signed stream version for the edge (when one is configured).
pub(crate) fn enqueue(conn: &Connection, signer: &Signer, name: &str, version: u64, now: u64) -> Result<(), Error> {
    if signer.edge.load(std::sync::atomic::Ordering::Relaxed) {
        conn.prepare_cached("INSERT INTO outbox (stream, version, created) VALUES (?1, ?2, ?3)")?
            .execute(params![name, version, now])?;
    }
    Ok(())
}

/// When the edge changed (or was just configured), every stream goes to the outbox again,
/// so the new edge holds everything; without an edge, the outbox empties.
pub(crate) fn resync_edge(
    tx: &rusqlite::Connection,
    edge_url: Option<&str>,
    now: u64,
) -> Result<(), crate::error::Error> {
    let edge = edge_url.unwrap_or_default();
    let synced = store::get_state_text(tx, "edge_url")?.unwrap_or_default();
    if synced == edge {
        return Ok(());
    }
    tx.execute("DELETE FROM outbox", [])?;
    if !edge.is_empty() {
        tx.execute(
            "INSERT INTO outbox (stream, version, created)
             SELECT name, version, ?1 FROM streams ORDER BY name",
            [now],
        )?;
    }
    store::set_state(tx, "edge_url", edge)
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
