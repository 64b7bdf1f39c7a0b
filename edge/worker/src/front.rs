//! The Worker in front: routes every request, serves subscriptions, and hands every API
//! request to the Control object.

use std::net::{IpAddr, Ipv4Addr};

use hearth_edge::config::EdgeConfig;
use hearth_edge::isolate::{Counted, Feed, FeedDue, Isolate, Lookup};
use hearth_edge::routes::{Route, route};
use hearth_edge::serve::{self, decoy, too_many};
use hearth_edge::{Reply, api};
use hearth_shared::devices::{Admission, HwidPolicy, Seen};
use hearth_shared::ratelimit::{Decision, Network};
use hearth_shared::sha256;
use hearth_shared::wire::{SubToken, decode, encode};
use worker::{Context, Env, Method, Request, Response, Result, event};

use crate::links::{DeviceAnswer, DeviceCall, HitsCall};
use crate::memory::{OWNER, isolate, owner_read};
use crate::runtime::{call, config, links_shard, now_ms, reply_of, respond};

/// The owner's settings in force: the edge's own rules, then the owner's (pushed by control),
/// and the link bases. When the Control object cannot answer, the link is still served, with
/// the settings read last (or the edge's own rules), and it is asked again at the next fetch.
async fn owner(env: &Env, config: &EdgeConfig) -> std::rc::Rc<serve::Owner> {
    let now = now_ms();
    if let Some(fresh) = owner_read(now) {
        return fresh;
    }
    let (read, cached) = OWNER.with_borrow(|(read, owner)| (*read, owner.clone()));
    let url = format!("https://control{}", crate::control::SETTINGS_PATH);
    let stored = async { reply_of(call(&control(env)?, Method::Get, &url, None).await?).await };
    let pushed = match stored.await {
        Ok(reply) if reply.status == 200 => hearth_edge::push::stored_settings(&reply.body),
        Ok(reply) if reply.status == 204 => Default::default(),
        Ok(_) | Err(_) if read != 0 => return cached,
        Ok(_) | Err(_) => return std::rc::Rc::new(serve::owner(config, Default::default())),
    };
    let owner = std::rc::Rc::new(serve::owner(config, pushed));
    OWNER.with_borrow_mut(|slot| *slot = (now, owner.clone()));
    owner
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    let config = match config(&env) {
        Ok(config) => config,
        Err(e) => {
            // The setting's name and problem go to the operator's log, not to the public.
            worker::console_error!("hearth edge misconfigured: {e}");
            return respond(api::error(500, "misconfigured", "the edge is not configured"), false);
        }
    };
    let url = req.url()?;
    let head = req.method() == Method::Head;
    let method = req.method().to_string();
    let reply = match route(&config, &method, url.path(), url.query().unwrap_or("")) {
        // (A path under the link prefix that is no token may be an alias: an old panel's links
        // could live under the same folder.)
        Route::Subscription(None) => {
            let alias = owner(&env, &config).await.settings.alias(url.path());
            subscription(&req, &url, &env, &ctx, &config, alias).await?
        }
        Route::Subscription(token) => subscription(&req, &url, &env, &ctx, &config, token).await?,
        // An old subscription path of a user taken over from another panel (an alias) is
        // served like a link, when it is under a prefix the owner's aliases use. Anything
        // else gets the decoy with no storage call: a flood of random paths must not spend the
        // operator's Durable Object requests (the owner's settings are asked at most once a
        // minute per isolate). (The link prefix is public anyway; the API prefix is a secret
        // too long to guess, so timing tells nothing.)
        Route::Unknown if matches!(req.method(), Method::Get | Method::Head) => {
            match owner(&env, &config).await.settings.alias(url.path()) {
                Some(token) => subscription(&req, &url, &env, &ctx, &config, Some(token)).await?,
                None => decoy(),
            }
        }
        Route::Unknown => decoy(),
        // The health answer is the Control object's (with its count of refused tokens), and
        // this isolate's memory beside it.
        Route::Health => {
            let mut health = reply_of(control(&env)?.fetch_with_request(req).await?).await?;
            if health.status == 200 {
                let (held, live, calls, batches) = isolate(&config, |i| {
                    let (held, live) = i.held();
                    (held, live, i.storage_calls, i.count_batches)
                });
                let at_once = crate::memory::ANSWERED_AT_ONCE.with(std::cell::Cell::get);
                let lines = format!(
                    "isolate: {held} links held, {live} live, {calls} storage calls for links, {batches} batches of counts, {at_once} answered at once\n"
                );
                health.body.extend_from_slice(lines.as_bytes());
            }
            health
        }
        // Every other API route is the Control object's, push token and node signatures
        // included. A push this isolate relayed and control's token got taken means the links
        // changed: it asks what changed before it serves from memory again.
        Route::Push => {
            let answer = control(&env)?.fetch_with_request(req).await?;
            if answer.status_code() == 200 {
                isolate(&config, Isolate::stale);
            }
            return Ok(answer);
        }
        _ => return control(&env)?.fetch_with_request(req).await,
    };
    respond(reply, head)
}

fn control(env: &Env) -> Result<worker::Stub> {
    env.durable_object("CONTROL")?.id_from_name("control")?.get_stub()
}

/// Reads a link's envelope from its shard (its fetches are counted in the isolate).
async fn link(env: &Env, config: &EdgeConfig, hash: &[u8; 32]) -> Result<Reply> {
    isolate(config, |i| i.storage_calls += 1);
    let stub = links_shard(env, config.shard_of(hash))?;
    let url = format!("https://links/get?hash={}", hex::encode(hash));
    reply_of(call(&stub, Method::Get, &url, None).await?).await
}

/// Asks the Control object what changed among the links since `since`, at `asked_ms`, and
/// takes the answer in.
async fn ask_feed(env: Env, config: std::rc::Rc<EdgeConfig>, since: u64, asked_ms: u64) {
    isolate(&config, |i| i.storage_calls += 1);
    let url = format!("https://control{}?since={since}", crate::feed::FEED_PATH);
    let asked = async { reply_of(call(&control(&env)?, Method::Get, &url, None).await?).await };
    let feed = match asked.await {
        Ok(reply) if reply.status == 200 => decode::<Feed>(&reply.body, "the feed").ok(),
        Ok(reply) => {
            worker::console_error!("the feed answered {}", reply.status);
            None
        }
        Err(e) => {
            worker::console_error!("asking the feed failed: {e}");
            None
        }
    };
    isolate(&config, |i| match feed {
        Some(feed) => i.heard(feed, asked_ms),
        None => i.not_heard(),
    });
}

/// Sends this isolate's counted fetches to their shards, when it is time (after the answer).
fn flush(env: &Env, ctx: &Context, config: &std::rc::Rc<EdgeConfig>, now: u64) {
    let batches = isolate(config, |i| i.flush(now, |hash| config.shard_of(hash)));
    for (number, hits, start_ms) in batches {
        let (env, config) = (env.clone(), config.clone());
        ctx.wait_until(async move {
            isolate(&config, |i| i.count_batches += 1);
            let asking = HitsCall { hits, start_ms, limit: config.limits.link };
            let sent = async {
                let reply = reply_of(
                    call(&links_shard(&env, number)?, Method::Post, "https://links/hits", Some(&encode(&asking)))
                        .await?,
                )
                .await?;
                decode::<Counted>(&reply.body, "counts").map_err(|_| worker::Error::from("a shard's counts"))
            };
            match sent.await {
                Ok(counted) => isolate(&config, |i| i.counted(&asking.hits, &counted)),
                Err(e) => worker::console_error!("sending a batch of link fetches failed: {e}"),
            }
        });
    }
}

/// Admits a device by its link's registry (in the link's shard), and queues a changed
/// registry for control with the Control object (after the answer is sent). Storage trouble
/// never takes a link away: the fetch is then served as if the device were known.
async fn device(
    env: &Env,
    ctx: &Context,
    config: &EdgeConfig,
    token: &SubToken,
    policy: &HwidPolicy,
    seen: Seen,
) -> Option<Admission> {
    let hash = token.hash();
    isolate(config, |i| i.storage_calls += 1);
    let asking = DeviceCall { token: *token.as_bytes(), policy: policy.clone(), seen, now: now_ms() / 1000 };
    let asked = async {
        let stub = links_shard(env, config.shard_of(&hash))?;
        reply_of(call(&stub, Method::Post, "https://links/device", Some(&encode(&asking))).await?).await
    };
    let answer = match asked.await {
        Ok(reply) if reply.status == 200 => decode::<DeviceAnswer>(&reply.body, "device answer").ok(),
        Ok(reply) => {
            worker::console_error!("a link's shard refused a device ({})", reply.status);
            None
        }
        Err(e) => {
            worker::console_error!("admitting a device failed: {e}");
            None
        }
    }?;
    if let Some(report) = answer.report.map(serde_bytes::ByteBuf::into_vec) {
        let stub = control(env).ok()?;
        let url = format!("https://control{}", crate::control::DEVICES_PATH);
        ctx.wait_until(async move {
            if let Err(e) = call(&stub, Method::Post, &url, Some(&report)).await {
                worker::console_error!("queueing a link's devices failed: {e}");
            }
        });
    }
    Some(answer.admission)
}

async fn subscription(
    req: &Request,
    url: &worker::Url,
    env: &Env,
    ctx: &Context,
    config: &std::rc::Rc<EdgeConfig>,
    token: Option<SubToken>,
) -> Result<Reply> {
    let limits = config.limits;
    // Set by Cloudflare on every request (a client cannot forge it there).
    let client: IpAddr = req
        .headers()
        .get("cf-connecting-ip")?
        .and_then(|ip| ip.parse().ok())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let client_network = Network::of(client);
    let hash = token.as_ref().map_or_else(|| sha256(url.path().as_bytes()), SubToken::hash);
    let now = now_ms();
    if limits.enabled {
        // (The decoy: the network tried too many unknown links.)
        if let Some(refusal) = isolate(config, |i| i.gate(client_network, now, limits)).refusal() {
            return Ok(refusal);
        }
    }
    // What changed among the links: asked before this answer when memory is too old to serve
    // from, behind it when it is getting old (one ask at a time: while another fetch asks,
    // memory too old is not used and storage is read).
    match isolate(config, |i| i.feed_due(now)) {
        FeedDue::No => {}
        FeedDue::Behind => {
            if let Some(since) = isolate(config, Isolate::ask) {
                ctx.wait_until(ask_feed(env.clone(), config.clone(), since, now));
            }
        }
        FeedDue::First => {
            if let Some(since) = isolate(config, Isolate::ask) {
                ask_feed(env.clone(), config.clone(), since, now).await;
            }
        }
    }
    let envelope = match (&token, isolate(config, |i| i.lookup(&hash, now))) {
        (None, _) | (_, Lookup::Unknown) => return Ok(miss(config, client_network, now)),
        (Some(_), Lookup::Held(envelope)) => envelope,
        (Some(_), Lookup::Ask) => {
            let generation = isolate(config, |i| i.generation());
            let found = link(env, config, &hash).await?;
            match found.status {
                200 => {
                    isolate(config, |i| i.keep(&hash, found.body.clone(), generation, now));
                    found.body
                }
                404 => return Ok(miss(config, client_network, now)),
                _ => return Ok(api::unavailable()),
            }
        }
    };
    let Some(token) = token else { return Ok(decoy()) };
    if limits.enabled {
        let decision = isolate(config, |i| i.hit(&hash, now, limits.link));
        flush(env, ctx, config, now);
        if let Decision::Deny { retry_after } = decision {
            return Ok(too_many(retry_after));
        }
    }
    let Some(snapshot) = serve::open(&envelope, &token) else {
        return Ok(decoy());
    };
    let mut sub_url = url.clone();
    sub_url.set_query(None);
    let user_agent = req.headers().get("user-agent")?.unwrap_or_default();
    let accept_language = req.headers().get("accept-language")?.unwrap_or_default();
    let admission = match serve::device(&snapshot, |name| req.headers().get(name).ok().flatten()) {
        None => None,
        Some(seen) => device(env, ctx, config, &token, &snapshot.hwid, seen).await,
    };
    let owner = owner(env, config).await;
    Ok(serve::subscription(
        &owner,
        &snapshot,
        admission,
        &token,
        &user_agent,
        &accept_language,
        url.query().unwrap_or(""),
        sub_url.as_str(),
    ))
}

/// An unknown link: the decoy, counted against the client network's tries.
fn miss(config: &EdgeConfig, network: Network, now: u64) -> Reply {
    if config.limits.enabled {
        isolate(config, |i| i.miss(network, now, config.limits.misses));
    }
    decoy()
}
