//! Publishing to the edges: every envelope control signs is in `streams` with the order of its
//! change (`seq`), and each edge has a worker that pushes it whatever is newer than what that
//! edge acknowledged ([`edges`]), in signed batches, whoever made the change (the API,
//! the CLI in another process, a sweep, a restore); the same worker drains the usage reports
//! nodes left at that edge. Edges are added and removed at run time: [`supervisor`] keeps one
//! worker per edge.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hearth_shared::envelope::{Audience, Draft, Kind};
use hearth_shared::sha256;
use hearth_shared::wire::{self, BatchEntry, BatchManifest, PushBundle, Stream, UsageDrain, stream};
use tokio::sync::watch;

use crate::app::{App, Counters, now};
use crate::error::Error;
use crate::publish;
use crate::store::edges::{self, Edge};
use crate::store::nodes as node_store;
use crate::tasks::stopped;

/// Streams one push takes at most.
const PUSH_ROWS: usize = 2000;
/// Bytes of item envelopes one push carries at most (the edge takes 32 MiB).
const PUSH_BYTES: usize = 16 * 1024 * 1024;
/// The longest wait between two push attempts after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How often control asks each edge for queued usage reports.
const DRAIN_EVERY: Duration = Duration::from_secs(5);
/// Drain pages one pass takes at most (a backlog of 50,000 reports): the rest waits for the
/// next pass, so an edge that never stops handing out pages keeps the drainer no busier than
/// a large backlog does.
const DRAIN_PAGES: usize = 100;

/// Where and how control reaches one edge.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) id: i64,
    pub(crate) url: String,
    pub(crate) api_prefix: String,
    push_token: String,
}

impl Target {
    /// The edge as stored, with edge.toml's token and prefix where it has none of its own.
    pub(crate) fn of(app: &App, edge: &Edge) -> Target {
        Target {
            id: edge.id,
            url: edge.url.trim_end_matches('/').to_owned(),
            api_prefix: edge.api_prefix.clone().unwrap_or_else(|| app.config.edge.api_prefix.clone()),
            push_token: edge.push_token.clone().unwrap_or_else(|| app.config.edge.push_token.clone()),
        }
    }

    /// The URL of `path` under the edge's API.
    fn api(&self, path: &str) -> String {
        format!("{}/{}/{path}", self.url, self.api_prefix)
    }
}

/// Every edge control publishes to now.
pub(crate) async fn targets(app: &Arc<App>) -> Result<Vec<(Edge, Target)>, Error> {
    let list = app.db.read(edges::list).await?;
    Ok(list
        .into_iter()
        .map(|edge| {
            let target = Target::of(app, &edge);
            (edge, target)
        })
        .collect())
}

/// What one push takes: the streams after the edge's position, with the `seq` it reaches.
struct Chunk {
    /// `(stream, version, envelope)`; a deleted stream has no envelope.
    items: Vec<(String, u64, Option<Vec<u8>>)>,
    /// The edge holds everything up to here once the push is taken.
    to: i64,
}

fn chunk(conn: &rusqlite::Connection, edge: i64, pushed: i64) -> Result<Option<Chunk>, Error> {
    // Credential deltas go only to an edge that said it keeps them (an older edge would refuse
    // the whole push); they are queued again once it says so (`edges::said_deltas`).
    let deltas = edges::takes_deltas(conn, edge)?;
    // A stream set aside at its current version is not sent again: the rest goes on past it.
    let (mut items, mut to, mut bytes) = (Vec::new(), pushed, 0);
    edges::lacking(conn, edge, pushed, PUSH_ROWS, |edges::Lacking { name, version, envelope, seq, held }| {
        let size = envelope.as_ref().map_or(0, Vec::len);
        // A chunk over the byte budget stops short: the edge's position moves only as far as
        // what it took, so order is never broken.
        if !items.is_empty() && bytes + size > PUSH_BYTES {
            return false;
        }
        to = seq;
        let parsed = name.parse::<Stream>().ok();
        if held
            || parsed.and_then(|s| s.pushed()).is_none()
            || (!deltas && matches!(parsed, Some(Stream::CredsDelta(_))))
        {
            return true;
        }
        bytes += size;
        items.push((name, version, envelope));
        true
    })?;
    Ok((to > pushed).then_some(Chunk { items, to }))
}

/// One push to `target`: what it lacks, under one signed batch manifest. Returns how many
/// streams it took (0: it holds everything).
#[tracing::instrument(name = "push", level = "debug", skip_all)]
async fn push_once(app: &Arc<App>, target: &Target) -> Result<usize, OutboxError> {
    let id = target.id;
    let found = app
        .db
        .read(move |c| {
            let Some(edge) = edges::get(c, id)? else { return Ok(None) };
            chunk(c, id, edge.pushed)
        })
        .await?;
    let Some(Chunk { items, to }) = found else { return Ok(0) };
    let sent: Vec<(String, u64)> = items.iter().map(|(name, version, _)| (name.clone(), *version)).collect();
    let names: Vec<String> = sent.iter().map(|(name, _)| name.clone()).collect();
    let mut deltas = None;
    let mut forwarding = None;
    if !items.is_empty() {
        let size = push_bundle(app, target, items).await.map_err(|e| (e, &sent));
        match size {
            Ok((size, takes, peer)) => {
                deltas = Some(takes);
                forwarding = Some(peer);
                Counters::add(&app.counters.pushes, 1);
                Counters::add(&app.counters.pushed_bytes, size);
                Counters::add(&app.counters.pushed_items, sent.len() as u64);
            }
            // One stream the edge will not take (its version is behind what the edge holds,
            // say, after a restore from an older state) must not hold back every change after
            // it: it is set aside, with an alert, and the rest goes out at once.
            Err((EdgeError { stream: Some(stream), text, refused }, sent)) => {
                let Some(&(_, version)) = sent.iter().find(|(name, _)| *name == stream) else {
                    return Err(EdgeError { text, stream: Some(stream), refused }.into());
                };
                tracing::warn!(%stream, version, reason = %text, "the edge refused one stream: set aside, the rest goes on");
                app.db.write(move |tx| edges::hold(tx, id, &stream, version, &text, now())).await?;
                return Ok(1);
            }
            Err((e, _)) => return Err(e.into()),
        }
    }
    let taken = names.len();
    crate::crash::point("pushed");
    // Safe to lose (`a_push_is_found_again_after_a_crash_at_every_point`, tests/tests/control.rs):
    // an edge whose position did not move is pushed the same streams again, which it takes as
    // it took them.
    app.db
        .write_unsynced(move |tx| {
            edges::pushed(tx, id, to, &names, now())?;
            if let Some(peer) = &forwarding {
                edges::said_forwarding(tx, id, peer.as_deref())?;
            }
            match deltas {
                Some(takes) => edges::said_deltas(tx, id, takes),
                None => Ok(()),
            }
        })
        .await?;
    Ok(taken.max(1))
}

/// Signs a batch manifest over `items` and pushes it with them; returns the bytes sent,
/// whether the edge said it keeps credential deltas, and the address of a proxy it does not
/// trust that it said sends it forwarding headers.
async fn push_bundle(
    app: &Arc<App>,
    target: &Target,
    items: Vec<(String, u64, Option<Vec<u8>>)>,
) -> Result<(u64, bool, Option<String>), EdgeError> {
    let now = now();
    let internal = |e: Error| EdgeError { text: e.to_string(), stream: None, refused: false };
    let batch = crate::batches::next(&app.db, &app.batches).await.map_err(internal)?;
    crate::crash::point("batch-taken");
    let state = app.clone();
    let online = app.db.read(move |c| state.signer.online(c)).await.map_err(internal)?;
    let entries = items
        .iter()
        .map(|(name, version, envelope)| BatchEntry {
            stream: name.clone(),
            version: *version,
            digest: envelope.as_ref().map(|e| sha256(e)),
        })
        .collect();
    let manifest =
        BatchManifest::new(entries).map_err(|e| EdgeError { text: e.to_string(), stream: None, refused: false })?;
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
    let bundle = PushBundle {
        key_records: online.chain.iter().cloned().map(Into::into).collect(),
        manifest: signed.encode(),
        items: items.into_iter().filter_map(|(_, _, envelope)| envelope.map(Into::into)).collect(),
    };
    let body = wire::encode(&bundle);
    let size = body.len() as u64;
    let answer = send_to_edge(app, target, reqwest::Method::POST, "push", body, Duration::from_secs(60)).await?;
    // (An address, checked as one: the edge's words are not shown as they came.)
    let forwarding = answer
        .get(wire::UNTRUSTED_FORWARDING_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<std::net::IpAddr>().ok())
        .map(|ip| ip.to_string());
    Ok((size, answer.contains_key(wire::DELTAS_HEADER), forwarding))
}

/// Why the edge did not take what control sent.
#[derive(Debug)]
pub(crate) struct EdgeError {
    /// What to tell the owner (never the URL: it holds the secret API prefix).
    pub(crate) text: String,
    /// The one stream the edge refused, when it named one.
    pub(crate) stream: Option<String>,
    /// Whether the edge answered and refused (4xx): sending the same again will not help.
    pub(crate) refused: bool,
}

impl std::fmt::Display for EdgeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for EdgeError {}

/// Why a push, a drain of usage reports or a release handed to an edge came to nothing: what
/// the owner is told (never the edge's URL, which holds the secret API prefix).
#[derive(Debug, thiserror::Error)]
pub(crate) enum OutboxError {
    /// Control's own store failed.
    #[error(transparent)]
    Store(#[from] Error),
    /// The edge did not take what control sent.
    #[error(transparent)]
    Edge(#[from] EdgeError),
    /// The edge did not answer a drain.
    #[error("the edge did not answer: {0}")]
    NoAnswer(String),
    /// The edge answered a drain with an error.
    #[error("the edge refused the drain ({0})")]
    DrainRefused(reqwest::StatusCode),
    /// The edge's answer could not be read (too long, cut short).
    #[error(transparent)]
    Read(#[from] hearth_io::capped::ReadError),
    /// The edge's answer is not what it should be.
    #[error(transparent)]
    Wire(#[from] wire::WireError),
    /// The edge named a position past any control keeps.
    #[error("the edge's cursor is out of range")]
    Cursor,
}

/// Sends `body` to the edge's `path` (under its API prefix: `push`, `archive`, `release`, which
/// also names it in errors) with the push token.
pub(crate) async fn send_to_edge(
    app: &App,
    target: &Target,
    method: reqwest::Method,
    path: &str,
    body: impl Into<reqwest::Body>,
    timeout: Duration,
) -> Result<reqwest::header::HeaderMap, EdgeError> {
    let response = app
        .http
        .request(method, target.api(path))
        .bearer_auth(&target.push_token)
        .header("content-type", "application/octet-stream")
        .body(body)
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| EdgeError {
            text: format!("the edge did not answer: {}", hearth_io::capped::without_url(&e)),
            stream: None,
            refused: false,
        })?;
    let status = response.status();
    if !status.is_success() {
        let (message, stream) = hearth_io::capped::refusal(response).await;
        let refused = status.is_client_error();
        return Err(EdgeError { text: format!("the edge refused the {path} ({status}): {message}"), stream, refused });
    }
    Ok(response.headers().clone())
}

/// Keeps one worker per edge until shutdown: edges the owner adds get one within a second of
/// the change that added them, removed ones lose theirs.
pub(crate) async fn supervisor(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let mut workers: HashMap<i64, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut changes = app.published.subscribe();
    loop {
        match app.db.read(|c| Ok(edges::list(c)?.into_iter().map(|e| (e.id, e.name)).collect::<Vec<_>>())).await {
            Ok(edges) => {
                workers.retain(|id, worker| {
                    let keep = edges.iter().any(|(edge, _)| edge == id) && !worker.is_finished();
                    if !keep {
                        worker.abort();
                    }
                    keep
                });
                for (id, name) in edges {
                    workers.entry(id).or_insert_with(|| tokio::spawn(worker(app.clone(), id, name, shutdown.clone())));
                }
            }
            Err(error) => tracing::warn!(%error, "reading the edges"),
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = shutdown.wait_for(|stop| *stop) => break,
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
    for (_, worker) in workers {
        let _ = worker.await;
    }
}

/// Publishes to one edge until it is removed or control stops: pushes at once when something
/// changed, retrying with backoff (1 s doubling to 60 s) while the edge is down or refuses,
/// and drains its usage reports every few seconds. Nothing counts as at the edge until the
/// edge accepted it. What it logs is in the edge's span, which names it (an edge keeps its
/// name).
#[tracing::instrument(name = "edge", level = "warn", skip_all, fields(edge = %name))]
async fn worker(app: Arc<App>, id: i64, name: String, mut shutdown: watch::Receiver<bool>) {
    let mut changes = app.published.subscribe();
    let mut backoff = Duration::from_secs(1);
    let mut next_drain = tokio::time::Instant::now();
    loop {
        // The edge as it is now: the owner may change its URL, or remove it.
        let edge = match app.db.read(move |c| edges::get(c, id)).await {
            Ok(Some(edge)) => edge,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, "reading an edge");
                if stopped(&mut shutdown, backoff).await {
                    return;
                }
                continue;
            }
        };
        let target = Target::of(&app, &edge);
        if tokio::time::Instant::now() >= next_drain {
            next_drain = tokio::time::Instant::now() + DRAIN_EVERY;
            if let Err(error) = drain_once(&app, &target, edge.drained).await {
                tracing::warn!(%error, "usage drain from the edge failed");
            }
        }
        match push_once(&app, &target).await {
            Ok(0) => {
                backoff = Duration::from_secs(1);
                tokio::select! {
                    _ = changes.changed() => {}
                    _ = shutdown.wait_for(|stop| *stop) => return,
                    () = tokio::time::sleep_until(next_drain) => {}
                }
            }
            Ok(_) => backoff = Duration::from_secs(1),
            Err(error) => {
                Counters::add(&app.counters.push_failures, 1);
                tracing::warn!(%error, retry_in = backoff.as_secs(), "push to the edge failed");
                let error = error.to_string();
                let _ = app.db.write(move |tx| edges::failed(tx, id, &error, now())).await;
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
/// nodes directly) and applies each exactly once (a report a node sent to two edges too),
/// and the device registries of links the edge queued with them.
#[tracing::instrument(name = "drain", level = "debug", skip_all)]
async fn drain_once(app: &Arc<App>, target: &Target, mut cursor: i64) -> Result<(), OutboxError> {
    let id = target.id;
    for _ in 0..DRAIN_PAGES {
        let response = app
            .http
            .get(format!("{}?after={cursor}", target.api("usage")))
            .bearer_auth(&target.push_token)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| OutboxError::NoAnswer(hearth_io::capped::without_url(&e)))?;
        if !response.status().is_success() {
            return Err(OutboxError::DrainRefused(response.status()));
        }
        let bytes = hearth_io::capped::read(response, UsageDrain::MAX_LEN, "a drain of usage reports").await?;
        let drain: UsageDrain = wire::decode(&bytes, "usage drain")?;
        let next = i64::try_from(drain.cursor).map_err(|_| OutboxError::Cursor)?;
        let count = drain.reports.len();
        let state = app.clone();
        let applied = app
            .db
            .write(move |tx| {
                let (mut applied, mut listed) = (0, 0);
                let mut acked = std::collections::BTreeMap::new();
                for report in &drain.reports {
                    // A link's device registry, queued with the reports.
                    if let Some(devices) = hearth_shared::devices::DeviceReport::decode(report) {
                        if crate::store::hwid::apply_report(tx, &state.signer.vault, &devices, now())? {
                            listed += 1;
                        }
                        continue;
                    }
                    let Some(node) = report_node(report) else { continue };
                    match crate::nodes::apply_usage(tx, &state.signer, node, report, now()) {
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
                edges::drained(tx, id, next, now())?;
                Ok((applied, listed))
            })
            .await?;
        let (applied, listed) = applied;
        Counters::add(&app.counters.usage_reports, applied);
        if applied > 0 || listed > 0 {
            app.changed();
        }
        if count == 0 || next <= cursor {
            return Ok(());
        }
        cursor = next;
    }
    Ok(())
}

/// The node a usage report's stream names (checked again when it is verified).
fn report_node(bytes: &[u8]) -> Option<u64> {
    let envelope = hearth_shared::envelope::Envelope::decode(bytes, Kind::UsageReport.max_len()).ok()?;
    stream::parse_usage(&envelope.header.stream)
}

/// Hands an edge the release being rolled out (nodes that reach only the edges fetch it
/// there), once. Returns whether it sent one.
pub(crate) async fn sync_release(app: &Arc<App>, edge: &Edge, target: &Target) -> Result<bool, OutboxError> {
    let (state, held) = (app.clone(), edge.release);
    let bundle = app.db.read(move |c| crate::releases::bundle_for_edge(c, &state.config.data_dir, held)).await?;
    let Some((release, bundle)) = bundle else { return Ok(false) };
    let sent = match send_to_edge(app, target, reqwest::Method::PUT, "release", bundle, Duration::from_secs(300)).await
    {
        Ok(_) => true,
        // Refused (a rollback to an older release, a key the edge no longer takes): offered
        // again, it would be refused again and hold back the next release behind the backoff.
        // It is marked as the edge's and not offered again; a newer release is.
        Err(EdgeError { refused: true, text, .. }) => {
            tracing::warn!(edge = %edge.name, release, reason = %text, "the edge refused the release: not offered to it again");
            false
        }
        Err(e) => return Err(e.into()),
    };
    let id = edge.id;
    app.db
        .write(move |tx| {
            let release = i64::try_from(release).unwrap_or(i64::MAX);
            crate::store::edges::set_marker(tx, id, crate::store::edges::Marker::Release, release)
        })
        .await?;
    if sent {
        tracing::info!(edge = %edge.name, release, "handed the release to the edge");
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Logs, TestControl};

    /// A credential delta goes only to an edge that said it keeps them: held back from one
    /// that has not (it moves past it), and queued again once it says so.
    #[test]
    fn deltas_go_only_to_an_edge_that_keeps_them() {
        let control = TestControl::new(true);
        let db = &control.app.db;
        let id = db.read_blocking(|c| Ok(edges::list(c)?[0].id)).unwrap();
        let seq = db.read_blocking(|c| Ok(c.query_row("SELECT ifnull(max(seq), 0) FROM streams", [], |r| r.get(0))?));
        let seq: i64 = seq.unwrap();
        db.write_blocking(|tx| {
            let stream = |name: &str, seq: i64| {
                tx.execute(
                    "INSERT INTO streams (name, version, digest, body_sha256, envelope, expires, seq)
                     VALUES (?1, 2, zeroblob(32), zeroblob(32), x'00', 0, ?2)",
                    rusqlite::params![name, seq],
                )
            };
            stream(&stream::creds(7), seq + 1)?;
            stream(&stream::creds_delta(7), seq + 2)?;
            Ok(())
        })
        .unwrap();
        let names = |after: i64| {
            db.read_blocking(move |c| {
                let chunk = chunk(c, id, after)?.expect("a chunk");
                Ok((chunk.items.into_iter().map(|(name, _, _)| name).collect::<Vec<_>>(), chunk.to))
            })
            .unwrap()
        };
        assert_eq!(names(seq), (vec![stream::creds(7)], seq + 2), "the delta is moved past, not sent");
        db.write_blocking(|tx| edges::said_deltas(tx, id, true)).unwrap();
        assert!(db.read_blocking(edges::all_take_deltas).unwrap());
        assert_eq!(names(seq + 2), (vec![stream::creds_delta(7)], seq + 3), "queued again once the edge keeps them");
        db.write_blocking(|tx| edges::said_deltas(tx, id, false)).unwrap();
        assert!(!db.read_blocking(edges::all_take_deltas).unwrap());
    }

    /// What an edge's worker logs is in the edge's span, which names it: its events do not
    /// repeat it, and nothing of the edge's API prefix or push token is logged.
    #[tokio::test]
    async fn what_an_edge_worker_logs_names_the_edge() {
        // The main edge, at an address nothing answers at.
        let control = TestControl::new(true);
        let app = control.app.clone();
        let state = app.clone();
        app.db.write(move |tx| publish::publish_edge_settings(tx, &state.signer, now())).await.unwrap();
        let (id, name) =
            app.db.read(|c| Ok(edges::list(c)?.into_iter().map(|e| (e.id, e.name)).next())).await.unwrap().unwrap();
        assert_eq!(name, edges::MAIN);

        let logs = Logs::new(false, "hearth_control=info");
        let guard = tracing::dispatcher::set_default(&logs.dispatch);
        let (stop, shutdown) = watch::channel(false);
        let running = tokio::spawn(worker(app.clone(), id, name, shutdown));
        let started = std::time::Instant::now();
        while !logs.text().contains("push to the edge failed") {
            assert!(started.elapsed() < Duration::from_secs(30), "no push failed:\n{}", logs.text());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.send(true).unwrap();
        running.await.unwrap();
        drop(guard);

        for message in ["usage drain from the edge failed", "push to the edge failed"] {
            let line = logs.line(message);
            let (span, event) = line.split_once(message).unwrap();
            assert!(span.contains("edge{edge=main}:"), "{line}");
            assert!(!event.contains("edge=main"), "{line}");
        }
        let log = logs.text();
        for secret in [&app.config.edge.api_prefix, &app.config.edge.push_token] {
            assert!(!log.contains(secret.as_str()), "{secret:?} is in the log:\n{log}");
        }
    }
}
