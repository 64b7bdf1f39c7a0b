//! One Durable Object per client network (IPv4 /24, IPv6 /48): its token bucket and its
//! unknown-link guard, so the limits hold worldwide.
//!
//! The state lives in the object's memory, read from its SQLite row when the object starts.
//! The guard (whose 15-minute block must outlive the object) is written back whenever it
//! changes; the bucket only with it. A bucket lost with an evicted object is a full one, and
//! an object is evicted only after the network has been quiet, when its bucket has refilled
//! anyway: so a fetch that the gate lets through costs no storage write.
//!
//! `GET /gate?burst=&per_minute=` takes a token: 200, 429 with `Retry-After`, or 404 when the
//! network only gets decoys. `POST /miss?limit=&window_ms=&block_ms=` records an unknown link.

use hearth_edge::serve::{Gate, network_gate};
use hearth_shared::ratelimit::{BucketLimit, FixedWindow, MissGuard, MissLimit, TokenBucket, WindowLimit};
use serde::Deserialize;
use worker::{DurableObject, Env, Request, Response, Result, State, durable_object};

use crate::runtime::{int, now_ms, query_u64 as query};

#[durable_object]
pub struct Network {
    state: State,
    cached: std::cell::Cell<Option<(TokenBucket, MissGuard)>>,
}

#[derive(Deserialize)]
struct Row {
    tat_us: i64,
    miss_start_ms: i64,
    miss_count: i64,
    blocked_until_ms: i64,
}

impl DurableObject for Network {
    fn new(state: State, _env: Env) -> Self {
        state
            .storage()
            .sql()
            .exec(
                "CREATE TABLE IF NOT EXISTS network (
                    id INTEGER PRIMARY KEY CHECK (id = 1),
                    tat_us INTEGER NOT NULL,
                    miss_start_ms INTEGER NOT NULL,
                    miss_count INTEGER NOT NULL,
                    blocked_until_ms INTEGER NOT NULL
                ) STRICT",
                None,
            )
            .expect("creating the network table");
        Network { state, cached: std::cell::Cell::new(None) }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        let url = req.url()?;
        let sql = self.state.storage().sql();
        let (mut bucket, mut guard) = match self.cached.get() {
            Some(cached) => cached,
            None => {
                let rows: Vec<Row> = sql
                    .exec("SELECT tat_us, miss_start_ms, miss_count, blocked_until_ms FROM network WHERE id = 1", None)?
                    .to_array()?;
                rows.first().map_or_else(Default::default, |row| {
                    (
                        TokenBucket { tat_us: row.tat_us as u64 },
                        MissGuard {
                            window: FixedWindow { start_ms: row.miss_start_ms as u64, count: row.miss_count as u32 },
                            blocked_until_ms: row.blocked_until_ms as u64,
                        },
                    )
                })
            }
        };
        let guard_before = guard;
        let now = now_ms();
        let response = match url.path() {
            "/gate" => {
                let limit =
                    BucketLimit { burst: query(&url, "burst") as u32, per_minute: query(&url, "per_minute") as u32 };
                match network_gate(&guard, &mut bucket, limit, now) {
                    Gate::Open => Response::ok("open")?,
                    Gate::Decoy => Response::error("decoy", 404)?,
                    Gate::Limited(retry_after) => {
                        let response = Response::error("limited", 429)?;
                        response.headers().set("retry-after", &retry_after.to_string())?;
                        response
                    }
                }
            }
            "/miss" => {
                let limit = MissLimit {
                    misses: WindowLimit { limit: query(&url, "limit") as u32, window_ms: query(&url, "window_ms") },
                    block_ms: query(&url, "block_ms"),
                };
                guard.miss(now, limit);
                Response::ok("counted")?
            }
            _ => return Response::error("no such route", 404),
        };
        self.cached.set(Some((bucket, guard)));
        if guard == guard_before {
            return Ok(response);
        }
        sql.exec(
            "INSERT INTO network (id, tat_us, miss_start_ms, miss_count, blocked_until_ms) VALUES (1, ?, ?, ?, ?)
             ON CONFLICT (id) DO UPDATE SET tat_us = excluded.tat_us, miss_start_ms = excluded.miss_start_ms,
                miss_count = excluded.miss_count, blocked_until_ms = excluded.blocked_until_ms",
            vec![
                int(bucket.tat_us).into(),
                int(guard.window.start_ms).into(),
                i64::from(guard.window.count).into(),
                int(guard.blocked_until_ms).into(),
            ],
        )?;
        Ok(response)
    }
}
