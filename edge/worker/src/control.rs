//! The `Control` Durable Object (one per deployment): the trust learned from pushes, node
//! credential sets and registrations, the usage queue and control's archive. It takes every
//! API route; the Worker in front has already checked control's push token (a Durable
//! Object cannot be reached from outside), and node routes are checked here, where the node
//! keys are.

use std::collections::BTreeMap;

use hearth_edge::config::EdgeConfig;
use hearth_edge::push::{self, Target, Write, apply_node_record, decide};
use hearth_edge::routes::{Route, route};
use hearth_edge::{Reply, api};
use hearth_shared::nodeauth;
use hearth_shared::trust::{StreamState, Trust};
use hearth_shared::wire::{ExportItem, ExportPage, UsageDrain, decode, encode, stream};
use serde::Deserialize;
use worker::{
    DurableObject, Env, Method, Request, Response, Result, SqlStorage, SqlStorageValue, State, durable_object,
};

use crate::runtime::{call, config, int, now_ms, reply_of, respond, transaction};

/// How many usage reports one drain hands out (fewer when their bytes fill it first).
const DRAIN_LIMIT: i64 = UsageDrain::MAX_REPORTS as i64;

#[durable_object]
pub struct Control {
    state: State,
    env: Env,
}

#[derive(Deserialize)]
struct StreamRow {
    version: i64,
    digest: serde_bytes::ByteBuf,
    envelope: Option<serde_bytes::ByteBuf>,
}

#[derive(Deserialize)]
struct ValueRow {
    value: serde_bytes::ByteBuf,
}

#[derive(Deserialize)]
struct ChunkRow {
    bytes: serde_bytes::ByteBuf,
}

#[derive(Deserialize)]
struct ExportRow {
    name: String,
    version: i64,
    envelope: Option<serde_bytes::ByteBuf>,
}

/// The largest piece of the archive one row holds (rows are capped at 2 MB).
const ARCHIVE_CHUNK: usize = 1 << 20;

#[derive(Deserialize)]
struct QueueRow {
    id: i64,
    envelope: serde_bytes::ByteBuf,
}

fn stream_row(sql: &SqlStorage, name: &str) -> Result<Option<(StreamState, Option<Vec<u8>>)>> {
    let rows: Vec<StreamRow> =
        sql.exec("SELECT version, digest, envelope FROM streams WHERE name = ?", vec![name.into()])?.to_array()?;
    Ok(rows.into_iter().next().and_then(|row| {
        let digest = row.digest.into_vec().try_into().ok()?;
        Some((StreamState { version: row.version as u64, digest }, row.envelope.map(|e| e.into_vec())))
    }))
}

fn put_stream(sql: &SqlStorage, write: &Write) -> Result<()> {
    let envelope = write.envelope.clone().map_or(SqlStorageValue::Null, SqlStorageValue::Blob);
    sql.exec(
        "INSERT INTO streams (name, version, digest, envelope) VALUES (?, ?, ?, ?)
         ON CONFLICT (name) DO UPDATE SET version = excluded.version, digest = excluded.digest,
            envelope = excluded.envelope",
        vec![
            write.stream.as_str().into(),
            int(write.version).into(),
            SqlStorageValue::Blob(write.digest.to_vec()),
            envelope,
        ],
    )?;
    Ok(())
}

/// The release the rollout tells `node` to run, when this object holds that release.
fn release_for(sql: &SqlStorage, node: u64) -> Result<Option<u64>> {
    let Some((_, Some(rollout))) = stream_row(sql, stream::ROLLOUT)? else { return Ok(None) };
    let Some(release) = push::release_for(&rollout, node) else { return Ok(None) };
    let held = stream_row(sql, stream::RELEASE)?.map(|(state, _)| state.version);
    Ok((held == Some(release)).then_some(release))
}

fn value(sql: &SqlStorage, key: &str) -> Result<Option<Vec<u8>>> {
    let rows: Vec<ValueRow> = sql.exec("SELECT value FROM state WHERE key = ?", vec![key.into()])?.to_array()?;
    Ok(rows.into_iter().next().map(|row| row.value.into_vec()))
}

fn put_value(sql: &SqlStorage, key: &str, bytes: Vec<u8>) -> Result<()> {
    sql.exec(
        "INSERT INTO state (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        vec![key.into(), SqlStorageValue::Blob(bytes)],
    )?;
    Ok(())
}

impl DurableObject for Control {
    fn new(state: State, env: Env) -> Self {
        let sql = state.storage().sql();
        for table in [
            "CREATE TABLE IF NOT EXISTS streams (name TEXT PRIMARY KEY, version INTEGER NOT NULL,
                digest BLOB NOT NULL, envelope BLOB) STRICT",
            "CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value BLOB NOT NULL) STRICT",
            "CREATE TABLE IF NOT EXISTS archive_chunks (seq INTEGER PRIMARY KEY, bytes BLOB NOT NULL) STRICT",
            "CREATE TABLE IF NOT EXISTS release_chunks (name TEXT NOT NULL, seq INTEGER NOT NULL, bytes BLOB NOT NULL,
                PRIMARY KEY (name, seq)) STRICT",
            "CREATE TABLE IF NOT EXISTS usage_queue (id INTEGER PRIMARY KEY AUTOINCREMENT,
                node INTEGER NOT NULL, seq INTEGER NOT NULL, envelope BLOB NOT NULL, UNIQUE (node, seq)) STRICT",
        ] {
            sql.exec(table, None).expect("creating the control tables");
        }
        Control { state, env }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let config = match config(&self.env) {
            Ok(config) => config,
            Err(e) => {
                worker::console_error!("hearth edge misconfigured: {e}");
                return respond(api::error(500, "misconfigured", "the edge is not configured"), false);
            }
        };
        let url = req.url()?;
        let method = req.method().to_string();
        let path_and_query = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        let body = if matches!(req.method(), Method::Post | Method::Put) { req.bytes().await? } else { Vec::new() };
        let auth = req.headers().get(nodeauth::HEADER)?;
        let sql = self.state.storage().sql();
        let trust = config.trust(value(&sql, "trust")?.and_then(|bytes| decode::<Trust>(&bytes, "trust").ok()));
        let now = now_ms() / 1000;
        // Only this Worker reaches a Durable Object: the front asks here for the owner's edge
        // settings (then keeps them a minute).
        if url.path() == SETTINGS_PATH {
            return respond(
                match stream_row(&sql, stream::EDGE_SETTINGS)? {
                    Some((_, Some(envelope))) => Reply::bytes(200, envelope),
                    _ => Reply { status: 204, headers: Vec::new(), body: Vec::new() },
                },
                false,
            );
        }
        let reply = match route(&config, &method, url.path(), url.query().unwrap_or("")) {
            Route::Push => self.push(&config, &trust, &body).await?,
            Route::NodeCreds { node, after } => {
                match api::authorize_node(auth.as_deref(), &trust, &method, &path_and_query, node, now) {
                    Err(reply) => reply,
                    Ok(()) => {
                        let mut reply = match stream_row(&sql, &stream::creds(node))? {
                            Some((state, Some(envelope))) if state.version > after => Reply::bytes(200, envelope),
                            _ => Reply { status: 204, headers: Vec::new(), body: Vec::new() },
                        };
                        if let Some(keys) = value(&sql, "keys")?.and_then(|bytes| String::from_utf8(bytes).ok()) {
                            reply.headers.push((nodeauth::KEYS_HEADER, keys));
                        }
                        if let Some(release) = release_for(&sql, node)? {
                            reply.headers.push((nodeauth::RELEASE_HEADER, release.to_string()));
                        }
                        reply
                    }
                }
            }
            Route::NodeAck(node) => {
                match api::authorize_node(auth.as_deref(), &trust, &method, &path_and_query, node, now) {
                    Err(reply) => reply,
                    Ok(()) => match stream_row(&sql, &stream::usage_ack(node))? {
                        Some((_, Some(envelope))) => Reply::bytes(200, envelope),
                        _ => Reply { status: 204, headers: Vec::new(), body: Vec::new() },
                    },
                }
            }
            Route::NodeUsage(node) => {
                match api::authorize_node(auth.as_deref(), &trust, &method, &path_and_query, node, now)
                    .and_then(|()| api::check_usage(&body, &trust, node, now))
                {
                    Err(reply) => reply,
                    Ok(seq) => {
                        sql.exec(
                            "INSERT INTO usage_queue (node, seq, envelope) VALUES (?, ?, ?)
                             ON CONFLICT (node, seq) DO NOTHING",
                            vec![int(node).into(), int(seq).into(), SqlStorageValue::Blob(body)],
                        )?;
                        Reply::text(202, "queued\n")
                    }
                }
            }
            Route::UsageDrain { after } => {
                sql.exec("DELETE FROM usage_queue WHERE id <= ?", vec![int(after).into()])?;
                let rows: Vec<QueueRow> = sql
                    .exec(
                        "SELECT id, envelope FROM usage_queue WHERE id > ? ORDER BY id LIMIT ?",
                        vec![int(after).into(), DRAIN_LIMIT.into()],
                    )?
                    .to_array()?;
                let mut drain = UsageDrain { cursor: after, reports: Vec::new() };
                for row in rows {
                    if !drain.room_for(row.envelope.len()) {
                        break;
                    }
                    drain.cursor = row.id as u64;
                    drain.reports.push(row.envelope);
                }
                Reply::bytes(200, encode(&drain))
            }
            Route::ArchivePut => {
                let stored = stream_row(&sql, stream::ARCHIVE)?.map(|(state, _)| state);
                match api::check_archive(&body, &trust, stored.as_ref(), now) {
                    Err(reply) => reply,
                    Ok(write) if stored == Some(write.state()) => Reply::text(200, "unchanged\n"),
                    Ok(write) => {
                        // A row holds at most 2 MB: the archive is kept in chunks, its stream
                        // row (version and digest) without the envelope.
                        let envelope = write.envelope.clone().unwrap_or_default();
                        let marker = Write { envelope: None, ..write };
                        transaction(&self.state.storage(), move |sql| {
                            sql.exec("DELETE FROM archive_chunks", None)?;
                            for (seq, chunk) in envelope.chunks(ARCHIVE_CHUNK).enumerate() {
                                sql.exec(
                                    "INSERT INTO archive_chunks (seq, bytes) VALUES (?, ?)",
                                    vec![int(seq as u64).into(), SqlStorageValue::Blob(chunk.to_vec())],
                                )?;
                            }
                            put_stream(sql, &marker)
                        })?;
                        Reply::text(200, "stored\n")
                    }
                }
            }
            Route::ArchiveGet => match stream_row(&sql, stream::ARCHIVE)? {
                Some(_) => {
                    let chunks: Vec<ChunkRow> =
                        sql.exec("SELECT bytes FROM archive_chunks ORDER BY seq", None)?.to_array()?;
                    Reply::bytes(200, chunks.into_iter().flat_map(|row| row.bytes.into_vec()).collect())
                }
                None => api::error(404, "no_archive", "no archive has been pushed yet"),
            },
            Route::NodeRelease(node) | Route::NodeReleaseFile(node, _) => {
                match api::authorize_node(auth.as_deref(), &trust, &method, &path_and_query, node, now) {
                    Err(reply) => reply,
                    Ok(()) if release_for(&sql, node)?.is_none() => {
                        api::error(404, "no_release", "this node is not told to run a release")
                    }
                    Ok(()) => match route(&config, &method, url.path(), "") {
                        Route::NodeReleaseFile(_, name) => {
                            let chunks: Vec<ChunkRow> = sql
                                .exec(
                                    "SELECT bytes FROM release_chunks WHERE name = ? ORDER BY seq",
                                    vec![name.as_str().into()],
                                )?
                                .to_array()?;
                            if chunks.is_empty() {
                                api::error(404, "no_release", "the release has no such file")
                            } else {
                                Reply::bytes(200, chunks.into_iter().flat_map(|row| row.bytes.into_vec()).collect())
                            }
                        }
                        _ => match stream_row(&sql, stream::RELEASE)? {
                            Some((_, Some(manifest))) => Reply::bytes(200, manifest),
                            _ => api::error(404, "no_release", "no release is held"),
                        },
                    },
                }
            }
            Route::ReleasePut => {
                let stored = stream_row(&sql, stream::RELEASE)?.map(|(state, _)| state);
                if body.len() > api::MAX_RELEASE_BYTES {
                    api::error(413, "too_large", "the release is over the size limit")
                } else {
                    match api::check_release(&body, &trust, stored.as_ref(), now) {
                        Err(reply) => reply,
                        Ok((write, _)) if stored == Some(write.state()) => Reply::text(200, "unchanged\n"),
                        Ok((write, files)) => {
                            // Rows hold at most 2 MB: each binary is kept in pieces.
                            transaction(&self.state.storage(), move |sql| {
                                sql.exec("DELETE FROM release_chunks", None)?;
                                for (name, bytes) in &files {
                                    for (seq, chunk) in bytes.chunks(ARCHIVE_CHUNK).enumerate() {
                                        sql.exec(
                                            "INSERT INTO release_chunks (name, seq, bytes) VALUES (?, ?, ?)",
                                            vec![
                                                name.as_str().into(),
                                                int(seq as u64).into(),
                                                SqlStorageValue::Blob(chunk.to_vec()),
                                            ],
                                        )?;
                                    }
                                }
                                put_stream(sql, &write)
                            })?;
                            Reply::text(200, "stored\n")
                        }
                    }
                }
            }
            Route::Export { after } => match api::ExportCursor::parse(&after) {
                None => api::bad_cursor(),
                Some(cursor) => self.export(&config, &sql, cursor).await?,
            },
            _ => api::error(404, "no_route", "no such route"),
        };
        respond(reply, false)
    }
}

/// The Control object's internal path for the stored edge settings.
pub(crate) const SETTINGS_PATH: &str = "/internal/edge-settings";

impl Control {
    /// A page of everything stored, for a restore of control: this object's streams (but the
    /// archive), then each shard's links in turn.
    async fn export(&self, config: &EdgeConfig, sql: &SqlStorage, cursor: api::ExportCursor) -> Result<Reply> {
        let limit = api::EXPORT_PAGE;
        let keys = value(sql, "keys")?.and_then(|bytes| String::from_utf8(bytes).ok());
        let batch =
            value(sql, "batch")?.and_then(|bytes| decode::<StreamState>(&bytes, "batch").ok()).map_or(0, |s| s.version);
        let mut page = ExportPage { keys, batch, ..ExportPage::default() };
        match cursor {
            api::ExportCursor::Streams(after) => {
                let rows: Vec<ExportRow> = sql
                    .exec(
                        "SELECT name, version, envelope FROM streams WHERE name > ? AND name NOT IN (?, ?) ORDER BY name LIMIT ?",
                        vec![after.as_str().into(), stream::ARCHIVE.into(), stream::RELEASE.into(), i64::from(limit).into()],
                    )?
                    .to_array()?;
                // Full: as many items as asked for, or as many bytes as a page holds.
                let mut full = rows.len() == limit as usize;
                for row in rows {
                    let item = ExportItem {
                        stream: row.name,
                        version: row.version as u64,
                        envelope: row.envelope.map(serde_bytes::ByteBuf::into_vec),
                    };
                    if !ExportPage::room_for(&page.items, &item) {
                        full = true;
                        break;
                    }
                    page.items.push(item);
                }
                page.next = Some(
                    match page.items.last() {
                        Some(last) if full => api::ExportCursor::Streams(last.stream.clone()),
                        _ => api::ExportCursor::Links { shard: 0, after: Vec::new() },
                    }
                    .to_text(),
                );
            }
            api::ExportCursor::Links { shard, after } => {
                if shard >= config.shards.max(1) {
                    return Ok(api::bad_cursor());
                }
                let stub = self.env.durable_object("LINKS")?.id_from_name(&format!("links-{shard}"))?.get_stub()?;
                let url = format!("https://links/export?after={}&limit={limit}", hex::encode(&after));
                let reply = reply_of(call(&stub, Method::Get, &url, None).await?).await?;
                if reply.status != 200 {
                    return Ok(api::unavailable());
                }
                // The shard says whether it has more after `last` (it filled the page).
                let (items, last, full): (Vec<ExportItem>, Vec<u8>, bool) = decode(&reply.body, "export")
                    .map_err(|_| worker::Error::RustError("a shard's export is malformed".into()))?;
                page.items = items;
                page.next = if full {
                    Some(api::ExportCursor::Links { shard, after: last }.to_text())
                } else if shard + 1 < config.shards.max(1) {
                    Some(api::ExportCursor::Links { shard: shard + 1, after: Vec::new() }.to_text())
                } else {
                    None
                };
            }
        }
        Ok(Reply::bytes(200, encode(&page)))
    }

    async fn push(&self, config: &EdgeConfig, trust: &Trust, body: &[u8]) -> Result<Reply> {
        let sql = self.state.storage().sql();
        let batch = value(&sql, "batch")?.and_then(|bytes| decode::<StreamState>(&bytes, "batch").ok());
        let checked = match push::check(body, trust, batch.as_ref(), now_ms() / 1000) {
            Ok(checked) => checked,
            Err(e) => return Ok(api::refused(&e)),
        };
        if checked.unchanged {
            return Ok(api::json(200, &serde_json::json!({ "applied": 0, "unchanged": "batch" })));
        }
        let mut shards: BTreeMap<u32, Vec<Write>> = BTreeMap::new();
        let mut own = Vec::new();
        for write in checked.writes {
            match &write.target {
                Target::Link(hash) => shards.entry(config.shard_of(hash)).or_default().push(write),
                _ => own.push(write),
            }
        }
        // Every shard first checks its writes, then applies them (all or none per shard), so
        // a refusal found anywhere changes nothing. If a shard still refuses while applying
        // (another push came between), the batch is not recorded: control sends it again and
        // the shards that took it see no-ops.
        let links = self.env.durable_object("LINKS")?;
        let mut stubs = Vec::with_capacity(shards.len());
        for (shard, writes) in &shards {
            stubs.push((links.id_from_name(&format!("links-{shard}"))?.get_stub()?, encode(writes)));
        }
        let (mut written, mut unchanged) = (0u64, 0u64);
        for phase in ["https://links/check", "https://links/apply"] {
            for (stub, writes) in &stubs {
                let reply = reply_of(call(stub, Method::Post, phase, Some(writes)).await?).await?;
                match reply.status {
                    200 if phase.ends_with("apply") => {
                        let counts: serde_json::Value = serde_json::from_slice(&reply.body)?;
                        written += counts["applied"].as_u64().unwrap_or(0);
                        unchanged += counts["unchanged"].as_u64().unwrap_or(0);
                    }
                    200 => {}
                    409 => return Ok(api::error(409, "refused", &String::from_utf8_lossy(&reply.body))),
                    _ => return Ok(api::unavailable()),
                }
            }
        }
        let mut trust = checked.trust;
        let batch = checked.batch;
        let keys_header = checked.keys_header;
        let outcome = transaction(&self.state.storage(), move |sql| {
            let (mut written, mut unchanged) = (0u64, 0u64);
            for write in &own {
                let stored = stream_row(sql, &write.stream)?.map(|(state, _)| state);
                if !decide(write, stored.as_ref()).map_err(|e| worker::Error::RustError(format!("refused: {e}")))? {
                    unchanged += 1;
                    continue;
                }
                put_stream(sql, write)?;
                apply_node_record(&mut trust, write).map_err(|e| worker::Error::RustError(format!("refused: {e}")))?;
                written += 1;
            }
            put_value(sql, "trust", encode(&trust))?;
            put_value(sql, "batch", encode(&batch))?;
            if let Some(keys) = &keys_header {
                put_value(sql, "keys", keys.clone().into_bytes())?;
            }
            Ok((written, unchanged))
        });
        match outcome {
            Ok((own_written, own_unchanged)) => {
                Ok(api::applied((written + own_written) as usize, (unchanged + own_unchanged) as usize))
            }
            Err(e) => {
                let message = e.to_string();
                match message.find("refused: ") {
                    Some(at) => Ok(api::error(409, "refused", &message[at + "refused: ".len()..])),
                    None => Err(e),
                }
            }
        }
    }
}
