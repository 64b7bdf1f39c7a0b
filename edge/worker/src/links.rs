//! The `Links` Durable Objects: links sharded by token hash, each row with its envelope and
//! its per-link window, which sums the fetches the isolates count.
//!
//! A shard only reads and writes rows: what a push stores is decided by the `Control` object
//! ([`hearth_edge::service`]), before anything is stored anywhere.
//!
//! `GET /get?hash=<hex>`: 200 with the envelope, 404 for an unknown or deleted link. `POST
//! /hits` with a postcard [`HitsCall`]: adds an isolate's fetches to each link's window and
//! answers each link's count in it (postcard [`Counted`]); a link that went over its limit is
//! published through the `Control` object's feed. `GET /keys`: the keys of every live link
//! (postcard), for the feed's first fill. `POST /states` with postcard token hashes: their
//! stored states (postcard). `POST /apply` with postcard [`Planned`] writes: every write or
//! none, in one transaction, if each link still holds what it was decided against; answers a
//! postcard `Result<(), Changed>`. `GET /export?after=<hex>&limit=`: a [`Fill`] of the links
//! after a token hash, for a restore of control. `POST /device` with a postcard
//! [`DeviceCall`]: admits a device by the link's registry (sealed, in `devices`) and answers a
//! postcard [`DeviceAnswer`].

use hearth_edge::isolate::{Counted, Hits};
use hearth_edge::push::{Stored, Target};
use hearth_edge::storage::{Changed, Fill, Planned};
use hearth_shared::devices::{Admission, HwidPolicy, Seen};
use hearth_shared::ratelimit::WindowLimit;
use hearth_shared::trust::ItemDigest;
use hearth_shared::wire::SubToken;
use hearth_shared::wire::{ExportItem, decode, encode};
use serde::{Deserialize, Serialize};
use worker::{
    DurableObject, Env, Method, Request, Response, Result, SqlStorage, SqlStorageValue, State, durable_object,
};

use crate::runtime::{int, query, query_u64, transaction};

#[durable_object]
pub struct Links {
    state: State,
    env: Env,
}

/// An isolate's fetches of this shard's links in one window: the fetches, the window's start,
/// and the limit.
#[derive(Serialize, Deserialize)]
pub(crate) struct HitsCall {
    pub hits: Hits,
    pub start_ms: u64,
    pub limit: WindowLimit,
}

#[derive(Deserialize)]
struct KeyRow {
    token_hash: serde_bytes::ByteBuf,
}

#[derive(Deserialize)]
struct EnvelopeRow {
    envelope: Option<serde_bytes::ByteBuf>,
}

#[derive(Deserialize)]
struct WindowRow {
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
struct RegistryRow {
    registry: serde_bytes::ByteBuf,
}

/// What the front asks a shard to admit: the link's token (the registry is sealed under it),
/// the snapshot's device policy, the device, and the time (Unix seconds).
#[derive(Serialize, Deserialize)]
pub(crate) struct DeviceCall {
    pub token: [u8; 32],
    pub policy: HwidPolicy,
    pub seen: Seen,
    pub now: u64,
}

/// A shard's answer to a [`DeviceCall`]: the admission, and the report to queue for control
/// when the registry changed.
#[derive(Serialize, Deserialize)]
pub(crate) struct DeviceAnswer {
    pub admission: Admission,
    pub report: Option<serde_bytes::ByteBuf>,
}

#[derive(Deserialize)]
struct Version {
    version: i64,
    digest: serde_bytes::ByteBuf,
}

impl DurableObject for Links {
    fn new(state: State, env: Env) -> Self {
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
        state
            .storage()
            .sql()
            .exec(
                "CREATE TABLE IF NOT EXISTS devices (token_hash BLOB PRIMARY KEY, registry BLOB NOT NULL) STRICT",
                None,
            )
            .expect("creating the devices table");
        Links { state, env }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let url = req.url()?;
        match (req.method(), url.path()) {
            (Method::Get, "/get") => {
                let hash = query(&url, "hash").and_then(|h| hex::decode(h).ok()).unwrap_or_default();
                self.get(hash)
            }
            (Method::Post, "/states") => {
                let Ok(hashes) = decode::<Vec<hearth_shared::Digest>>(&req.bytes().await?, "hashes") else {
                    return Response::error("not a list of token hashes", 400);
                };
                let sql = self.state.storage().sql();
                let states = hashes.iter().map(|hash| state(&sql, hash)).collect::<Result<Vec<_>>>()?;
                Response::from_bytes(encode(&states))
            }
            (Method::Post, "/apply") => {
                let Ok(writes) = decode::<Vec<Planned>>(&req.bytes().await?, "writes") else {
                    return Response::error("not a list of writes", 400);
                };
                self.apply(writes)
            }
            (Method::Post, "/device") => {
                let Ok(call) = decode::<DeviceCall>(&req.bytes().await?, "device call") else {
                    return Response::error("not a device call", 400);
                };
                self.device(call)
            }
            (Method::Post, "/hits") => {
                let Ok(call) = decode::<HitsCall>(&req.bytes().await?, "hits") else {
                    return Response::error("not a list of fetches", 400);
                };
                self.hits(call).await
            }
            (Method::Get, "/keys") => {
                let rows: Vec<KeyRow> = self
                    .state
                    .storage()
                    .sql()
                    .exec("SELECT token_hash FROM links WHERE envelope IS NOT NULL", None)?
                    .to_array()?;
                let keys: Vec<u64> = rows
                    .iter()
                    .filter_map(|row| <[u8; 32]>::try_from(row.token_hash.as_slice()).ok())
                    .map(|hash| hearth_edge::isolate::key(&hash))
                    .collect();
                Response::from_bytes(encode(&keys))
            }
            (Method::Get, "/export") => {
                let after = query(&url, "after").and_then(|h| hex::decode(h).ok()).unwrap_or_default();
                self.export(after, query_u64(&url, "limit").clamp(1, 1000) as u32)
            }
            _ => Response::error("no such route", 404),
        }
    }
}

impl Links {
    fn get(&self, hash: Vec<u8>) -> Result<Response> {
        let rows: Vec<EnvelopeRow> = self
            .state
            .storage()
            .sql()
            .exec("SELECT envelope FROM links WHERE token_hash = ?", vec![SqlStorageValue::Blob(hash)])?
            .to_array()?;
        match rows.into_iter().next().and_then(|row| row.envelope) {
            Some(envelope) => Response::from_bytes(envelope.into_vec()),
            None => Response::error("unknown", 404),
        }
    }

    /// Adds an isolate's fetches to each link's window, answers each link's count in it (every
    /// isolate's), and publishes the links that went over their limit through the feed.
    async fn hits(&self, call: HitsCall) -> Result<Response> {
        let HitsCall { hits, start_ms, limit } = call;
        let sql = self.state.storage().sql();
        let mut counted: Counted = Vec::with_capacity(hits.len());
        let mut over = Vec::new();
        for (hash, fetches) in &hits {
            let rows: Vec<WindowRow> = sql
                .exec(
                    "SELECT win_start_ms, win_count FROM links WHERE token_hash = ?",
                    vec![SqlStorageValue::Blob(hash.to_vec())],
                )?
                .to_array()?;
            let Some(row) = rows.into_iter().next() else {
                counted.push((*fetches, start_ms));
                continue;
            };
            let before = if row.win_start_ms as u64 == start_ms { row.win_count as u32 } else { 0 };
            if (row.win_start_ms as u64) > start_ms {
                // A window that ended: nothing to add to.
                counted.push((before, row.win_start_ms as u64));
                continue;
            }
            let count = before.saturating_add(*fetches);
            sql.exec(
                "UPDATE links SET win_start_ms = ?, win_count = ? WHERE token_hash = ?",
                vec![int(start_ms).into(), i64::from(count).into(), SqlStorageValue::Blob(hash.to_vec())],
            )?;
            if count >= limit.limit && before < limit.limit {
                over.push((hearth_edge::isolate::key(hash), start_ms + limit.window_ms.max(1)));
            }
            counted.push((count, start_ms));
        }
        if !over.is_empty() {
            let stub = self.env.durable_object("CONTROL")?.id_from_name("control")?.get_stub()?;
            let url = format!("https://control{}", crate::feed::LIMITED_PATH);
            let published = crate::runtime::call(&stub, Method::Post, &url, Some(&encode(&over))).await?;
            if published.status_code() != 200 {
                worker::console_error!("publishing links over their limit failed ({})", published.status_code());
            }
        }
        Response::from_bytes(encode(&counted))
    }

    /// Admits a device by the link's registry, stores the registry when it changed, and
    /// answers the admission with the report to queue for control (postcard).
    fn device(&self, call: DeviceCall) -> Result<Response> {
        let token = SubToken::from_bytes(call.token);
        let hash = token.hash();
        let sql = self.state.storage().sql();
        let rows: Vec<RegistryRow> = sql
            .exec("SELECT registry FROM devices WHERE token_hash = ?", vec![SqlStorageValue::Blob(hash.to_vec())])?
            .to_array()?;
        let stored = rows.into_iter().next().map(|row| row.registry.into_vec());
        let (admission, changed) =
            hearth_edge::serve::admit_device(stored.as_deref(), &call.policy, &token, &call.seen, call.now);
        let report = match changed {
            Some(hearth_edge::serve::Registered { report, sealed }) => {
                sql.exec(
                    "INSERT INTO devices (token_hash, registry) VALUES (?, ?)
                     ON CONFLICT (token_hash) DO UPDATE SET registry = excluded.registry",
                    vec![SqlStorageValue::Blob(hash.to_vec()), SqlStorageValue::Blob(sealed)],
                )?;
                Some(serde_bytes::ByteBuf::from(report))
            }
            None => None,
        };
        Response::from_bytes(encode(&DeviceAnswer { admission, report }))
    }

    /// Up to `limit` links after the token hash `after` (fewer when their bytes fill a page).
    fn export(&self, after: Vec<u8>, limit: u32) -> Result<Response> {
        let rows: Vec<LinkRow> = self
            .state
            .storage()
            .sql()
            .exec(
                "SELECT token_hash, version, envelope FROM links WHERE token_hash > ? ORDER BY token_hash LIMIT ?",
                vec![SqlStorageValue::Blob(after), i64::from(limit).into()],
            )?
            .to_array()?;
        let mut fill = Fill::new(limit);
        for row in rows {
            let Some(stream) = hearth_edge::api::link_stream(&row.token_hash) else { continue };
            let envelope = row.envelope.map(serde_bytes::ByteBuf::into_vec);
            if !fill.take(ExportItem { stream, version: row.version as u64, envelope }) {
                break;
            }
        }
        Response::from_bytes(encode(&fill))
    }

    /// Stores `writes`, every one or none: none when a link no longer holds what its write was
    /// decided against.
    fn apply(&self, writes: Vec<Planned>) -> Result<Response> {
        let outcome: std::result::Result<(), Changed> = transaction(&self.state.storage(), move |sql| {
            for planned in &writes {
                let Target::Link(hash) = &planned.write.target else {
                    return Err("only links are stored here".into());
                };
                if let Err(changed) = planned.still(state(sql, hash)?.as_ref()) {
                    return Ok(Err(changed));
                }
                let write = &planned.write;
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
                        SqlStorageValue::Blob(write.digest.0.to_vec()),
                        envelope,
                    ],
                )?;
                // A link deleted (its user deleted, or given a new link) takes its devices along.
                if write.envelope.is_none() {
                    sql.exec("DELETE FROM devices WHERE token_hash = ?", vec![SqlStorageValue::Blob(hash.to_vec())])?;
                }
            }
            Ok(Ok(()))
        })?;
        Response::from_bytes(encode(&outcome))
    }
}

/// A link's stored state.
fn state(sql: &SqlStorage, hash: &hearth_shared::Digest) -> Result<Option<Stored>> {
    let rows: Vec<Version> = sql
        .exec("SELECT version, digest FROM links WHERE token_hash = ?", vec![SqlStorageValue::Blob(hash.to_vec())])?
        .to_array()?;
    rows.into_iter()
        .next()
        .map(|row| {
            let digest = row.digest.into_vec().try_into().map_err(|_| worker::Error::from("a stored digest"))?;
            Ok(Stored { version: row.version as u64, digest: ItemDigest(digest) })
        })
        .transpose()
}
