//! The feed of link changes, kept in the `Control` object: every change to a link (stored,
//! changed, deleted) and every link a shard found over its limit moves a generation number,
//! and an isolate asks what changed since the generation it holds
//! ([`hearth_edge::isolate`]).
//!
//! `GET /internal/feed?since=<g>` answers a postcard [`Feed`]: the links changed after `g`
//! (each once, as it is now) and the links over their limit; from 0 (an isolate's first ask),
//! or from a generation this object does not know, every live link (`whole`). `POST
//! /internal/limited` with a postcard list of (link, until) publishes links over their limit.
//!
//! A push's links are fed twice, before the shards store them and after: an isolate that
//! read a link between the two finds it changed again, so it never keeps what was stored
//! before the push. A deployment whose links were stored before the feed existed fills it
//! from the shards once, at the first ask.

use hearth_edge::isolate::Feed;
use hearth_shared::wire::{decode, encode};
use serde::Deserialize;
use worker::{Env, Method, Response, Result, SqlStorage, SqlStorageValue, State};

use crate::runtime::{call, reply_of, transaction};

/// Where the front asks what changed.
pub(crate) const FEED_PATH: &str = "/internal/feed";
/// Where a shard publishes links over their limit.
pub(crate) const LIMITED_PATH: &str = "/internal/limited";

/// The `state` row holding the generation (8 bytes, big-endian); missing: the feed was never
/// filled.
const GENERATION: &str = "feed_generation";

pub(crate) const TABLES: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS link_feed (key BLOB PRIMARY KEY, generation INTEGER NOT NULL,
        live INTEGER NOT NULL) STRICT",
    "CREATE INDEX IF NOT EXISTS link_feed_generation ON link_feed (generation)",
    "CREATE TABLE IF NOT EXISTS link_limited (key BLOB PRIMARY KEY, until_ms INTEGER NOT NULL,
        generation INTEGER NOT NULL) STRICT",
];

#[derive(Deserialize)]
struct LinkRow {
    key: serde_bytes::ByteBuf,
    live: i64,
}

#[derive(Deserialize)]
struct LimitedRow {
    key: serde_bytes::ByteBuf,
    until_ms: i64,
}

/// A link's key as stored: 8 bytes, big-endian (a JavaScript number holds 53 bits, not 64).
fn stored(key: u64) -> SqlStorageValue {
    SqlStorageValue::Blob(key.to_be_bytes().to_vec())
}

fn read(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.try_into().ok()?))
}

fn generation(sql: &SqlStorage) -> Result<Option<u64>> {
    Ok(crate::values::value(sql, GENERATION)?.and_then(|bytes| Some(u64::from_be_bytes(bytes.try_into().ok()?))))
}

fn advance(sql: &SqlStorage) -> Result<u64> {
    let next = generation(sql)?.unwrap_or(0) + 1;
    crate::values::put_value(sql, GENERATION, next.to_be_bytes().to_vec())?;
    Ok(next)
}

/// Records `links` (key, live) as changed, in one transaction.
pub(crate) fn changed(state: &State, links: Vec<(u64, bool)>) -> Result<()> {
    if links.is_empty() {
        return Ok(());
    }
    transaction(&state.storage(), move |sql| {
        // Before the feed is filled from the shards, rows wait at generation 0 (the fill
        // keeps them: they are newer than what it read).
        let at = if generation(sql)?.is_some() { advance(sql)? as i64 } else { 0 };
        for (key, live) in &links {
            sql.exec(
                "INSERT INTO link_feed (key, generation, live) VALUES (?, ?, ?)
                 ON CONFLICT (key) DO UPDATE SET generation = excluded.generation, live = excluded.live",
                vec![stored(*key), at.into(), i64::from(*live).into()],
            )?;
        }
        Ok(Ok::<(), ()>(()))
    })?
    .map_err(|()| "the feed's transaction".into())
}

/// Publishes links over their limit until the times given (ms since the epoch).
pub(crate) fn limited(state: &State, links: Vec<(u64, u64)>, now_ms: u64) -> Result<()> {
    transaction(&state.storage(), move |sql| {
        let at = if generation(sql)?.is_some() { advance(sql)? as i64 } else { 0 };
        sql.exec("DELETE FROM link_limited WHERE until_ms <= ?", vec![crate::runtime::int(now_ms).into()])?;
        for (key, until) in &links {
            sql.exec(
                "INSERT INTO link_limited (key, until_ms, generation) VALUES (?, ?, ?)
                 ON CONFLICT (key) DO UPDATE SET until_ms = MAX(until_ms, excluded.until_ms),
                    generation = excluded.generation",
                vec![stored(*key), crate::runtime::int(*until).into(), at.into()],
            )?;
        }
        Ok(Ok::<(), ()>(()))
    })?
    .map_err(|()| "the feed's transaction".into())
}

/// What changed after `since`, at `now_ms`; fills the feed from the shards first when it never
/// was.
pub(crate) async fn since(state: &State, env: &Env, shards: u32, since: u64, now_ms: u64) -> Result<Response> {
    let sql = state.storage().sql();
    if generation(&sql)?.is_none() {
        fill(state, env, shards).await?;
    }
    let current = generation(&sql)?.unwrap_or(0);
    let whole = since == 0 || since > current;
    let links: Vec<LinkRow> = if whole {
        sql.exec("SELECT key, live FROM link_feed WHERE live = 1", None)?.to_array()?
    } else {
        sql.exec("SELECT key, live FROM link_feed WHERE generation > ?", vec![(since as i64).into()])?.to_array()?
    };
    let after = if whole { -1 } else { since as i64 };
    let limited: Vec<LimitedRow> = sql
        .exec(
            "SELECT key, until_ms FROM link_limited WHERE generation > ? AND until_ms > ?",
            vec![after.into(), crate::runtime::int(now_ms).into()],
        )?
        .to_array()?;
    let feed = Feed {
        generation: current,
        whole,
        links: links.iter().filter_map(|row| Some((read(&row.key)?, row.live != 0))).collect(),
        limited: limited.iter().filter_map(|row| Some((read(&row.key)?, row.until_ms as u64))).collect(),
    };
    Response::from_bytes(encode(&feed))
}

/// Fills the feed with every live link the shards hold (a deployment from before the feed).
async fn fill(state: &State, env: &Env, shards: u32) -> Result<()> {
    let mut links = Vec::new();
    for shard in 0..shards.max(1) {
        let stub = crate::runtime::links_shard(env, shard)?;
        let reply = reply_of(call(&stub, Method::Get, "https://links/keys", None).await?).await?;
        if reply.status != 200 {
            return Err(format!("links shard {shard} answered {} for its keys", reply.status).into());
        }
        let keys: Vec<u64> = decode(&reply.body, "a shard's keys").map_err(|_| "a shard's keys are malformed")?;
        links.extend(keys.into_iter().map(|key| (key, true)));
    }
    let sql = state.storage().sql();
    if generation(&sql)?.is_some() {
        // Filled meanwhile (another ask, while this one waited on the shards).
        return Ok(());
    }
    transaction(&state.storage(), move |sql| {
        for (key, live) in &links {
            sql.exec(
                "INSERT INTO link_feed (key, generation, live) VALUES (?, 1, ?) ON CONFLICT (key) DO NOTHING",
                vec![stored(*key), i64::from(*live).into()],
            )?;
        }
        crate::values::put_value(sql, GENERATION, 1u64.to_be_bytes().to_vec())?;
        Ok(Ok::<(), ()>(()))
    })?
    .map_err(|()| "the feed's transaction".into())
}
