//! The `Control` Durable Object (one per deployment): the trust learned from pushes, node
//! credential sets and registrations, the usage queue, control's archive and the release. It
//! takes every API route and answers it with `hearth-edge`'s [`service`], over this object's
//! SQLite and the `Links` shards ([`ControlStore`]). A Durable Object cannot be reached from
//! outside: the Worker in front sends it every API request as it came.
//!
//! A push is decided whole before anything is stored: the streams this object holds are read
//! here, the links' states are asked of their shards (which store nothing then), and only
//! when every write applies does each shard store its links and this object its streams and
//! the batch. Pushes are taken one at a time (a second one while a push is being stored is
//! answered 503, to be sent again), so no other push can change a link between its decision
//! and its storing. What remains: this object stopping (a deploy, a crash) after some shards
//! stored their links and before it recorded the batch. Every write was decided then, none
//! refused; control sends the batch again, the shards that stored it find the same envelopes
//! (no-ops) and the rest is stored.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use hearth_edge::Reply;
use hearth_edge::api::{self, NamedFile};
use hearth_edge::config::EdgeConfig;
use hearth_edge::push::{Stored, Target, Write};
use hearth_edge::routes::{BodyRead, Route, body_read, route};
use hearth_edge::service::{self, Call};
use hearth_edge::storage::{
    Changed, Fill, NONCES_LIVE, NONCES_PRUNED_EVERY, Plan, Planned, Storage, StoredStream, VALUE_BATCH, VALUE_KEYS,
    VALUE_TRUST, take_report,
};
use hearth_shared::nodeauth::{self, NodeAuthError, Nonce, Seen};
use hearth_shared::trust::{ItemDigest, StreamState, Trust};
use hearth_shared::wire::{ExportItem, UsageDrain, decode, encode, stream};
use serde::Deserialize;
use worker::{
    DurableObject, Env, Method, Request, Response, Result, SqlStorage, SqlStorageValue, State, Url, durable_object,
};

use crate::runtime::{call, config, int, now_ms, reply_of, respond, transaction};
use crate::values::{put_value, value};

#[durable_object]
pub struct Control {
    state: State,
    env: Env,
    /// A push is being stored.
    pushing: Cell<bool>,
    /// API requests refused for their token or signature.
    refused: RefCell<api::RefusalLog>,
    /// When expired node nonces were last dropped (unix seconds).
    nonces_pruned: Cell<u64>,
}

#[derive(Deserialize)]
struct StreamRow {
    version: i64,
    digest: serde_bytes::ByteBuf,
    envelope: Option<serde_bytes::ByteBuf>,
}

#[derive(Deserialize)]
struct StateRow {
    version: i64,
    digest: serde_bytes::ByteBuf,
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
struct LiveNonces {
    live: i64,
    seen: i64,
}

#[derive(Deserialize)]
struct QueueRow {
    id: i64,
    envelope: serde_bytes::ByteBuf,
}

fn state_of(version: i64, digest: serde_bytes::ByteBuf) -> Result<Stored> {
    let digest = digest.into_vec().try_into().map_err(|_| worker::Error::RustError("a stored digest".into()))?;
    Ok(Stored { version: version as u64, digest: ItemDigest(digest) })
}

fn stream_row(sql: &SqlStorage, name: &str) -> Result<Option<StoredStream>> {
    let rows: Vec<StreamRow> =
        sql.exec("SELECT version, digest, envelope FROM streams WHERE name = ?", vec![name.into()])?.to_array()?;
    rows.into_iter()
        .next()
        .map(|row| Ok((state_of(row.version, row.digest)?, row.envelope.map(serde_bytes::ByteBuf::into_vec))))
        .transpose()
}

fn stream_state(sql: &SqlStorage, name: &str) -> Result<Option<Stored>> {
    let rows: Vec<StateRow> =
        sql.exec("SELECT version, digest FROM streams WHERE name = ?", vec![name.into()])?.to_array()?;
    rows.into_iter().next().map(|row| state_of(row.version, row.digest)).transpose()
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
            SqlStorageValue::Blob(write.digest.0.to_vec()),
            envelope,
        ],
    )?;
    Ok(())
}

/// Replaces the pieces of a large value (the archive, a release's binaries) kept in `table`.
fn put_chunks(sql: &SqlStorage, table: &str, name: Option<&str>, bytes: &[u8]) -> Result<()> {
    for (seq, chunk) in bytes.chunks(ARCHIVE_CHUNK).enumerate() {
        let chunk = SqlStorageValue::Blob(chunk.to_vec());
        match name {
            None => sql.exec(
                &format!("INSERT INTO {table} (seq, bytes) VALUES (?, ?)"),
                vec![int(seq as u64).into(), chunk],
            )?,
            Some(name) => sql.exec(
                &format!("INSERT INTO {table} (name, seq, bytes) VALUES (?, ?, ?)"),
                vec![name.into(), int(seq as u64).into(), chunk],
            )?,
        };
    }
    Ok(())
}

fn chunks(rows: Vec<ChunkRow>) -> Vec<u8> {
    rows.into_iter().flat_map(|row| row.bytes.into_vec()).collect()
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
            "CREATE TABLE IF NOT EXISTS node_nonces (node INTEGER NOT NULL, nonce BLOB NOT NULL,
                expires INTEGER NOT NULL, PRIMARY KEY (node, nonce)) STRICT",
            "CREATE INDEX IF NOT EXISTS node_nonces_expires ON node_nonces (expires)",
        ] {
            sql.exec(table, None).expect("creating the control tables");
        }
        for table in crate::feed::TABLES {
            sql.exec(table, None).expect("creating the feed's tables");
        }
        Control { state, env, pushing: Cell::new(false), refused: RefCell::default(), nonces_pruned: Cell::new(0) }
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
        if let Some(response) = self.internal(&mut req, &url, &config).await? {
            return Ok(response);
        }
        self.api(&mut req, &url, &config).await
    }
}

impl Control {
    /// Answers the Worker's own requests to this object, `None` for the others (the API's).
    async fn internal(&self, req: &mut Request, url: &Url, config: &EdgeConfig) -> Result<Option<Response>> {
        let post = req.method() == Method::Post;
        Ok(Some(match url.path() {
            // Only this Worker reaches a Durable Object: the front asks here for the owner's edge
            // settings (then keeps them a minute)...
            SETTINGS_PATH => self.settings()?,
            // ...what changed among the links since the generation an isolate holds...
            crate::feed::FEED_PATH => {
                let since = crate::runtime::query_u64(url, "since");
                crate::feed::since(&self.state, &self.env, config.shards, since, now_ms()).await?
            }
            // ...takes the links a shard found over their limit...
            crate::feed::LIMITED_PATH if post => self.limited(req).await?,
            // ...and queues a link's changed device registry for control (in place of the one
            // queued before for that link, if control has not taken it yet).
            DEVICES_PATH if post => self.queue_devices(req).await?,
            _ => return Ok(None),
        }))
    }

    /// The owner's edge settings, as pushed (204 when none were).
    fn settings(&self) -> Result<Response> {
        respond(
            match stream_row(&self.state.storage().sql(), stream::EDGE_SETTINGS)? {
                Some((_, Some(envelope))) => Reply::bytes(200, envelope),
                _ => Reply { status: 204, headers: Vec::new(), body: Vec::new() },
            },
            false,
        )
    }

    /// Takes the links a shard found over their limit, into the feed.
    async fn limited(&self, req: &mut Request) -> Result<Response> {
        let Ok(links) = decode::<Vec<(u64, u64)>>(&req.bytes().await?, "limited links") else {
            return Response::error("not a list of links", 400);
        };
        crate::feed::limited(&self.state, links, now_ms())?;
        Response::empty()
    }

    /// Queues a link's device registry for control, in the slot of that link's.
    async fn queue_devices(&self, req: &mut Request) -> Result<Response> {
        let body = req.bytes().await?;
        let Some(report) = hearth_shared::devices::DeviceReport::decode(&body) else {
            return Response::error("not a device report", 400);
        };
        let (node, seq) = hearth_edge::serve::device_slot(&report.token_hash);
        let sql = self.state.storage().sql();
        // (Writes with no `await` between them are stored together.)
        sql.exec("DELETE FROM usage_queue WHERE node = ? AND seq = ?", vec![int(node).into(), int(seq).into()])?;
        sql.exec(
            "INSERT INTO usage_queue (node, seq, envelope) VALUES (?, ?, ?)",
            vec![int(node).into(), int(seq).into(), SqlStorageValue::Blob(body)],
        )?;
        Response::empty()
    }

    /// Answers an API request with `hearth-edge`'s [`service`], over this object's storage.
    async fn api(&self, req: &mut Request, url: &Url, config: &EdgeConfig) -> Result<Response> {
        let method = req.method().to_string();
        let authorization = req.headers().get("authorization")?;
        let node_signature = req.headers().get(nodeauth::HEADER)?;
        let route = route(config, &method, url.path(), url.query().unwrap_or(""));
        if route == Route::Health {
            return respond(self.refused.borrow().health(), false);
        }
        let authorized = config.push_token.matches(authorization.as_deref());
        let body = match read_body(req, &route, authorized).await? {
            Ok(body) => body,
            Err(too_large) => return respond(too_large, false),
        };
        // The authority as the request reached the Worker (Cloudflare routes by it).
        let host = service::authority(url.host_str(), url.port());
        // (A push without the token is refused by the service, whether or not one is stored.)
        let _pushing = match self.one_push(&route, authorized) {
            Ok(pushing) => pushing,
            Err(busy) => return respond(busy, false),
        };
        let sql = self.state.storage().sql();
        let trust = config.trust(value(&sql, VALUE_TRUST)?.and_then(|bytes| Trust::from_stored(&bytes).ok()));
        let call = Call {
            method: &method,
            path: url.path(),
            query: url.query().unwrap_or(""),
            authorization: authorization.as_deref(),
            node_signature: node_signature.as_deref(),
            host: &host,
            body: &body,
            now: now_ms() / 1000,
        };
        let store =
            ControlStore { state: &self.state, nonces_pruned: &self.nonces_pruned, sql, env: &self.env, config };
        let reply = match service::handle(&store, config, &trust, route.clone(), &call).await {
            Ok(reply) => reply,
            Err(e) => {
                worker::console_error!("storage failed: {e}");
                api::unavailable()
            }
        };
        self.log_answer(&route, &call, &reply);
        respond(reply, false)
    }

    /// Takes pushes one at a time: a push with the token marks one as being stored (until the
    /// mark is dropped), or is answered 503 (`Err`) while another is.
    fn one_push(&self, route: &Route, authorized: bool) -> std::result::Result<Option<Pushing<'_>>, Reply> {
        match route {
            Route::Push if !authorized => Ok(None),
            Route::Push if self.pushing.replace(true) => {
                let mut reply = api::error(503, "busy", "another push is being stored; send this one again shortly");
                reply.headers.push(("retry-after", "1".to_owned()));
                Err(reply)
            }
            Route::Push => Ok(Some(Pushing(&self.pushing))),
            _ => Ok(None),
        }
    }

    /// Logs what an answer tells the owner: requests refused for their token or signature
    /// (counted, a line now and then), and a node signing the old way.
    fn log_answer(&self, route: &Route, call: &Call<'_>, reply: &Reply) {
        if matches!(reply.status, 401 | 403)
            && let Some(refused) = self.refused.borrow_mut().count(now_ms())
        {
            worker::console_log!(
                "{refused} API requests refused (bad push token or node signature) since the last such line"
            );
        }
        if let Some(node) = service::signed_the_old_way(route, call, reply) {
            worker::console_warn!(
                "node {node} signs its requests the old way (no nonce): only its reads are taken until it runs a newer release"
            );
        }
    }
}

/// An API request's body, read as [`body_read`] says (a body is read only for a route that
/// takes one, once control's token, where the route needs it, was checked, and only up to the
/// route's cap); `Err` the 413 refusing it. `token`: the request carries control's token.
async fn read_body(req: &mut Request, route: &Route, token: bool) -> Result<std::result::Result<Vec<u8>, Reply>> {
    let declared = req.headers().get("content-length")?.and_then(|v| v.parse::<u64>().ok());
    let too_large = || api::error(413, "too_large", "the body is over this route's size limit");
    // (A body sent with control's token is read, up to Cloudflare's own cap, so that control is
    // told 413 rather than cut off.)
    Ok(match body_read(route, token, declared) {
        BodyRead::Skip => Ok(Vec::new()),
        BodyRead::TooLarge => Err(too_large()),
        BodyRead::UpTo(cap) => {
            let body = req.bytes().await?;
            if body.len() > cap { Err(too_large()) } else { Ok(body) }
        }
    })
}

/// Marks a push as being stored until dropped.
struct Pushing<'a>(&'a Cell<bool>);

impl Drop for Pushing<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// The Control object's internal path for the stored edge settings.
pub(crate) const SETTINGS_PATH: &str = "/internal/edge-settings";
/// The Control object's internal path where the front queues a link's device registry.
pub(crate) const DEVICES_PATH: &str = "/internal/devices";

/// The Worker's storage: this object's SQLite, and the links in their shards.
struct ControlStore<'a> {
    state: &'a State,
    nonces_pruned: &'a Cell<u64>,
    sql: SqlStorage,
    env: &'a Env,
    config: &'a EdgeConfig,
}

impl ControlStore<'_> {
    fn shard(&self, shard: u32) -> Result<worker::Stub> {
        crate::runtime::links_shard(self.env, shard)
    }

    /// Asks a shard, and decodes its answer.
    async fn ask<T: serde::Serialize + serde::de::DeserializeOwned>(
        &self,
        shard: u32,
        method: Method,
        url: &str,
        body: Option<&[u8]>,
    ) -> Result<T> {
        let reply = reply_of(call(&self.shard(shard)?, method, url, body).await?).await?;
        if reply.status != 200 {
            return Err(worker::Error::RustError(format!("links shard {shard} answered {}", reply.status)));
        }
        decode(&reply.body, "a shard's answer")
            .map_err(|_| worker::Error::RustError(format!("links shard {shard}'s answer is malformed")))
    }

    /// A put of one stream (and its pieces), in one transaction, if the stream still holds
    /// what it was decided against.
    fn put_one(
        &self,
        planned: &Planned,
        pieces: impl FnOnce(&SqlStorage) -> Result<()> + 'static,
    ) -> Result<std::result::Result<(), Changed>> {
        let planned = planned.clone();
        transaction(&self.state.storage(), move |sql| {
            if let Err(changed) = planned.still(stream_state(sql, &planned.write.stream)?.as_ref()) {
                return Ok(Err(changed));
            }
            pieces(sql)?;
            put_stream(sql, &planned.write)?;
            Ok(Ok(()))
        })
    }
}

impl Storage for ControlStore<'_> {
    type Error = worker::Error;

    async fn stream(&self, name: &str) -> Result<Option<StoredStream>> {
        stream_row(&self.sql, name)
    }

    async fn state(&self, name: &str) -> Result<Option<Stored>> {
        stream_state(&self.sql, name)
    }

    async fn value(&self, key: &str) -> Result<Option<Vec<u8>>> {
        value(&self.sql, key)
    }

    async fn states(&self, writes: &[Write]) -> Result<Vec<Option<Stored>>> {
        let mut states = vec![None; writes.len()];
        let mut shards: BTreeMap<u32, (Vec<usize>, Vec<hearth_shared::Digest>)> = BTreeMap::new();
        for (at, write) in writes.iter().enumerate() {
            match &write.target {
                Target::Link(hash) => {
                    let (ats, hashes) = shards.entry(self.config.shard_of(hash)).or_default();
                    ats.push(at);
                    hashes.push(*hash);
                }
                _ => states[at] = stream_state(&self.sql, &write.stream)?,
            }
        }
        for (shard, (ats, hashes)) in shards {
            let found: Vec<Option<Stored>> =
                self.ask(shard, Method::Post, "https://links/states", Some(&encode(&hashes))).await?;
            if found.len() != ats.len() {
                return Err(worker::Error::RustError(format!("links shard {shard} gave the wrong number of states")));
            }
            for (at, state) in ats.into_iter().zip(found) {
                states[at] = state;
            }
        }
        Ok(states)
    }

    async fn apply(&self, plan: &Plan) -> Result<std::result::Result<(), Changed>> {
        let mut shards: BTreeMap<u32, Vec<&Planned>> = BTreeMap::new();
        let mut own = Vec::new();
        for planned in &plan.writes {
            match &planned.write.target {
                Target::Link(hash) => shards.entry(self.config.shard_of(hash)).or_default().push(planned),
                _ => own.push(planned.clone()),
            }
        }
        // The links go in the feed before the shards store them and again after (see
        // `feed`): an isolate never keeps what a shard held before the push.
        let fed: Vec<(u64, bool)> = shards
            .values()
            .flatten()
            .filter_map(|planned| match &planned.write.target {
                Target::Link(hash) => Some((hearth_edge::isolate::key(hash), planned.write.envelope.is_some())),
                _ => None,
            })
            .collect();
        crate::feed::changed(self.state, fed.clone())?;
        // Pushes are taken one at a time, and only pushes write links: no shard changed since
        // its states were read, so none refuses here (each still checks, in its transaction).
        for (shard, writes) in shards {
            let stored: std::result::Result<(), Changed> =
                self.ask(shard, Method::Post, "https://links/apply", Some(&encode(&writes))).await?;
            if let Err(changed) = stored {
                crate::feed::changed(self.state, fed)?;
                return Ok(Err(changed));
            }
        }
        crate::feed::changed(self.state, fed)?;
        let (trust, batch, keys) = (encode(&plan.trust), encode(&plan.batch), plan.keys_header.clone());
        let batch_before = plan.batch_before;
        transaction(&self.state.storage(), move |sql| {
            let stored = value(sql, VALUE_BATCH)?.and_then(|bytes| decode::<StreamState>(&bytes, "batch").ok());
            if stored != batch_before {
                return Ok(Err(Changed { stream: stream::BATCH.to_owned() }));
            }
            for planned in &own {
                if let Err(changed) = planned.still(stream_state(sql, &planned.write.stream)?.as_ref()) {
                    return Ok(Err(changed));
                }
                put_stream(sql, &planned.write)?;
            }
            put_value(sql, VALUE_TRUST, trust)?;
            put_value(sql, VALUE_BATCH, batch)?;
            if let Some(keys) = keys {
                put_value(sql, VALUE_KEYS, keys.into_bytes())?;
            }
            Ok(Ok(()))
        })
    }

    async fn put_archive(&self, planned: &Planned) -> Result<std::result::Result<(), Changed>> {
        // A row holds at most 2 MB: the archive is kept in pieces, its stream row (version and
        // digest) without the envelope.
        let envelope = planned.write.envelope.clone().unwrap_or_default();
        let marker = Planned { write: Write { envelope: None, ..planned.write.clone() }, before: planned.before };
        self.put_one(&marker, move |sql| {
            sql.exec("DELETE FROM archive_chunks", None)?;
            put_chunks(sql, "archive_chunks", None, &envelope)
        })
    }

    async fn archive(&self) -> Result<Option<Vec<u8>>> {
        if stream_state(&self.sql, stream::ARCHIVE)?.is_none() {
            return Ok(None);
        }
        Ok(Some(chunks(self.sql.exec("SELECT bytes FROM archive_chunks ORDER BY seq", None)?.to_array()?)))
    }

    async fn put_release(&self, planned: &Planned, files: &[NamedFile]) -> Result<std::result::Result<(), Changed>> {
        // Rows hold at most 2 MB: each binary is kept in pieces.
        let files = files.to_vec();
        self.put_one(planned, move |sql| {
            sql.exec("DELETE FROM release_chunks", None)?;
            for (name, bytes) in &files {
                put_chunks(sql, "release_chunks", Some(name), bytes)?;
            }
            Ok(())
        })
    }

    async fn release_file(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let rows: Vec<ChunkRow> = self
            .sql
            .exec("SELECT bytes FROM release_chunks WHERE name = ? ORDER BY seq", vec![name.into()])?
            .to_array()?;
        Ok((!rows.is_empty()).then(|| chunks(rows)))
    }

    async fn enqueue_usage(&self, node: u64, seq: u64, envelope: &[u8]) -> Result<()> {
        self.sql.exec(
            "INSERT INTO usage_queue (node, seq, envelope) VALUES (?, ?, ?) ON CONFLICT (node, seq) DO NOTHING",
            vec![int(node).into(), int(seq).into(), SqlStorageValue::Blob(envelope.to_vec())],
        )?;
        Ok(())
    }

    async fn drain_usage(&self, after: u64, drain: &mut UsageDrain) -> Result<()> {
        self.sql.exec("DELETE FROM usage_queue WHERE id <= ?", vec![int(after).into()])?;
        let rows: Vec<QueueRow> = self
            .sql
            .exec(
                "SELECT id, envelope FROM usage_queue WHERE id > ? ORDER BY id LIMIT ?",
                vec![int(after).into(), int(UsageDrain::MAX_REPORTS as u64).into()],
            )?
            .to_array()?;
        for row in rows {
            if !take_report(drain, row.id as u64, row.envelope.into_vec()) {
                break;
            }
        }
        Ok(())
    }

    async fn export_streams(&self, after: &str, except: &str, fill: &mut Fill) -> Result<()> {
        let rows: Vec<ExportRow> = self
            .sql
            .exec(
                "SELECT name, version, envelope FROM streams WHERE name > ? AND name != ? ORDER BY name LIMIT ?",
                vec![after.into(), except.into(), i64::from(fill.limit).into()],
            )?
            .to_array()?;
        for row in rows {
            let envelope = row.envelope.map(serde_bytes::ByteBuf::into_vec);
            if !fill.take(ExportItem { stream: row.name, version: row.version as u64, envelope }) {
                break;
            }
        }
        Ok(())
    }

    async fn take_nonce(
        &self,
        node: u64,
        nonce: &Nonce,
        expires: u64,
        now: u64,
    ) -> Result<std::result::Result<(), NodeAuthError>> {
        // No await between the read and the write: nothing else runs in this object between.
        if now >= self.nonces_pruned.get().saturating_add(NONCES_PRUNED_EVERY) {
            self.sql.exec("DELETE FROM node_nonces WHERE expires < ?", vec![int(now).into()])?;
            self.nonces_pruned.set(now);
        }
        let nonce = SqlStorageValue::Blob(nonce.to_vec());
        let live: LiveNonces =
            self.sql.exec(NONCES_LIVE, vec![int(node).into(), nonce.clone(), int(now).into()])?.one()?;
        if live.seen != 0 {
            return Ok(Err(NodeAuthError::Replayed));
        }
        if usize::try_from(live.live).unwrap_or(usize::MAX) >= Seen::PER_NODE {
            return Ok(Err(NodeAuthError::TooMany));
        }
        self.sql.exec(
            "INSERT INTO node_nonces (node, nonce, expires) VALUES (?, ?, ?)
             ON CONFLICT (node, nonce) DO UPDATE SET expires = excluded.expires",
            vec![int(node).into(), nonce, int(expires).into()],
        )?;
        Ok(Ok(()))
    }

    fn link_shards(&self) -> u32 {
        self.config.shards.max(1)
    }

    async fn export_links(&self, shard: u32, after: &[u8], fill: &mut Fill) -> Result<()> {
        let url = format!("https://links/export?after={}&limit={}", hex::encode(after), fill.limit);
        *fill = self.ask(shard, Method::Get, &url, None).await?;
        Ok(())
    }
}
