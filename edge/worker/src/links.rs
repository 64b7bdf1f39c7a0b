//! The `Links` Durable Objects: links sharded by token hash, each row with its envelope and
//! its per-link window, so one call checks the limit and reads the snapshot.
//!
//! `GET /get?hash=<hex>&limit=&window_ms=` (limit 0: not counted): 200 with the envelope, 404
//! for an unknown or deleted link, 429 with `Retry-After`. `POST /apply` with postcard
//! [`Write`]s: every write or none, in one transaction; `POST /check`: whether they would.
//! `GET /export?after=<hex>&limit=`: the links after a token hash, for a restore of control.

use hearth_edge::push::{Write, decide};
use hearth_shared::ratelimit::{Decision, FixedWindow, WindowLimit};
use hearth_shared::trust::StreamState;
use serde::Deserialize;
use worker::{DurableObject, Env, Method, Request, Response, Result, SqlStorageValue, State, durable_object};

use crate::runtime::{int, now_ms, query, query_u64, transaction};

#[durable_object]
pub struct Links {
    state: State,
}

#[derive(Deserialize)]
struct Row {
    envelope: Option<serde_bytes::ByteBuf>,
    win_start_ms: i64,
    win_count: i64,
}

#[derive(Deserialize)]
struct LinkRow {
    token_hash: serde_bytes::ByteBuf,
    version: i64,
    envelope: Option<serde_bytes::ByteBuf>,
}

#[derive(Deserialize)]
struct Version {
    version: i64,
    digest: serde_bytes::ByteBuf,
}

impl DurableObject for Links {
    fn new(state: State, _env: Env) -> Self {
        state
            .storage()
            .sql()
            .exec(
                "CREATE TABLE IF NOT EXISTS links (
                    token_hash BLOB PRIMARY KEY,
                    version INTEGER NOT NULL,
                    digest BLOB NOT NULL,
                    envelope BLOB,
                    win_start_ms INTEGER NOT NULL DEFAULT 0,
                    win_count INTEGER NOT NULL DEFAULT 0
                ) STRICT",
                None,
            )
            .expect("creating the links table");
        Links { state }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let url = req.url()?;
        match (req.method(), url.path()) {
            (Method::Get, "/get") => {
                let hash = query(&url, "hash").and_then(|h| hex::decode(h).ok()).unwrap_or_default();
                let limit = u32::try_from(query_u64(&url, "limit")).unwrap_or(0);
                let window_ms = query_u64(&url, "window_ms").max(1);
                self.get(hash, WindowLimit { limit, window_ms })
            }
            (Method::Post, path @ ("/check" | "/apply")) => {
                let check_only = path == "/check";
                let body = req.bytes().await?;
                let Ok(writes) = hearth_shared::wire::decode::<Vec<Write>>(&body, "writes") else {
                    return Response::error("not a list of writes", 400);
                };
                self.apply(writes, check_only)
            }
            (Method::Get, "/export") => {
                let after = query(&url, "after").and_then(|h| hex::decode(h).ok()).unwrap_or_default();
                self.export(after, query_u64(&url, "limit").clamp(1, 1000))
            }
            _ => Response::error("no such route", 404),
        }
    }
}

impl Links {
    fn get(&self, hash: Vec<u8>, limit: WindowLimit) -> Result<Response> {
        let sql = self.state.storage().sql();
        let rows: Vec<Row> = sql
            .exec(
                "SELECT envelope, win_start_ms, win_count FROM links WHERE token_hash = ?",
                vec![SqlStorageValue::Blob(hash.clone())],
            )?
            .to_array()?;
        let Some(row) = rows.into_iter().next() else {
            return Response::error("unknown", 404);
        };
        let Some(envelope) = row.envelope else {
            return Response::error("unknown", 404);
        };
        if limit.limit > 0 {
            let before = FixedWindow { start_ms: row.win_start_ms as u64, count: row.win_count as u32 };
            let mut window = before;
            let decision = window.hit(now_ms(), limit);
            // A refused fetch leaves the window as it was: a flood on one link writes nothing.
            if window != before {
                sql.exec(
                    "UPDATE links SET win_start_ms = ?, win_count = ? WHERE token_hash = ?",
                    vec![int(window.start_ms).into(), i64::from(window.count).into(), SqlStorageValue::Blob(hash)],
                )?;
            }
            if let Decision::Deny { retry_after } = decision {
                let response = Response::error("limited", 429)?;
                response.headers().set("retry-after", &retry_after.to_string())?;
                return Ok(response);
            }
        }
        Response::from_bytes(envelope.into_vec())
    }

    /// Up to `limit` links after the token hash `after` (fewer when their bytes fill a page),
    /// as export items, with the last hash and whether the page is full (more may follow).
    fn export(&self, after: Vec<u8>, limit: u64) -> Result<Response> {
        let rows: Vec<LinkRow> = self
            .state
            .storage()
            .sql()
            .exec(
                "SELECT token_hash, version, envelope FROM links WHERE token_hash > ? ORDER BY token_hash LIMIT ?",
                vec![SqlStorageValue::Blob(after), int(limit).into()],
            )?
            .to_array()?;
        let mut last = Vec::new();
        let mut full = rows.len() as u64 == limit;
        let mut items = Vec::with_capacity(rows.len());
        for row in rows {
            let Some(stream) = hearth_edge::api::link_stream(&row.token_hash) else { continue };
            let item = hearth_shared::wire::ExportItem {
                stream,
                version: row.version as u64,
                envelope: row.envelope.map(serde_bytes::ByteBuf::into_vec),
            };
            if !hearth_shared::wire::ExportPage::room_for(&items, &item) {
                full = true;
                break;
            }
            items.push(item);
            last = row.token_hash.into_vec();
        }
        Response::from_bytes(hearth_shared::wire::encode(&(items, last, full)))
    }

    /// Applies `writes` (or, with `check_only`, only says whether they would apply).
    fn apply(&self, writes: Vec<Write>, check_only: bool) -> Result<Response> {
        let outcome = transaction(&self.state.storage(), move |sql| {
            let (mut written, mut unchanged) = (0usize, 0usize);
            for write in &writes {
                let hearth_edge::push::Target::Link(hash) = &write.target else {
                    return Err("only links are stored here".into());
                };
                let stored: Vec<Version> = sql
                    .exec(
                        "SELECT version, digest FROM links WHERE token_hash = ?",
                        vec![SqlStorageValue::Blob(hash.to_vec())],
                    )?
                    .to_array()?;
                let stored = stored.first().and_then(|row| {
                    Some(StreamState { version: row.version as u64, digest: row.digest.to_vec().try_into().ok()? })
                });
                // A refusal is thrown, which rolls the whole shard back.
                if !decide(write, stored.as_ref()).map_err(|e| worker::Error::RustError(format!("refused: {e}")))? {
                    unchanged += 1;
                    continue;
                }
                if check_only {
                    continue;
                }
                let envelope = match &write.envelope {
                    Some(bytes) => SqlStorageValue::Blob(bytes.clone()),
                    None => SqlStorageValue::Null,
                };
                sql.exec(
                    "INSERT INTO links (token_hash, version, digest, envelope) VALUES (?, ?, ?, ?)
                     ON CONFLICT (token_hash) DO UPDATE SET version = excluded.version,
                        digest = excluded.digest, envelope = excluded.envelope",
                    vec![
                        SqlStorageValue::Blob(hash.to_vec()),
                        int(write.version).into(),
                        SqlStorageValue::Blob(write.digest.to_vec()),
                        envelope,
                    ],
                )?;
                written += 1;
            }
            Ok((written, unchanged))
        });
        match outcome {
            Ok((written, unchanged)) => {
                Response::from_json(&serde_json::json!({ "applied": written, "unchanged": unchanged }))
            }
            Err(e) => {
                let message = e.to_string();
                match message.find("refused: ") {
                    Some(at) => Response::error(message[at + "refused: ".len()..].to_owned(), 409),
                    None => Err(e),
                }
            }
        }
    }
}
