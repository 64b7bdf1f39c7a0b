//! The Worker in front: routes every request, serves subscriptions, and hands every API
//! request to the Control object.

use std::net::{IpAddr, Ipv4Addr};

use hearth_edge::config::EdgeConfig;
use hearth_edge::routes::{Route, route};
use hearth_edge::serve::{self, Refusals, decoy, too_many};
use hearth_edge::{Reply, api};
use hearth_shared::devices::{Admission, HwidPolicy, Seen};
use hearth_shared::ratelimit::Network;
use hearth_shared::sha256;
use hearth_shared::wire::{SubToken, decode, encode};
use worker::{Context, Env, Method, Request, Response, Result, event};

use crate::links::{DeviceAnswer, DeviceCall};
use crate::runtime::{call, config, now_ms, reply_of, respond};

thread_local! {
    /// Links and networks this isolate saw refused, until their windows end: a client retrying
    /// a link over its limit, or a network flooding past its budget, costs no Durable Object
    /// call.
    static REFUSALS: std::cell::RefCell<Refusals> = std::cell::RefCell::new(Refusals::default());
    /// The owner's settings in force (User-Agent rules, link bases) and when they were read:
    /// asked of the Control object at most once a minute per isolate.
    static OWNER: std::cell::RefCell<(u64, std::rc::Rc<serve::Owner>)> = std::cell::RefCell::new((0, std::rc::Rc::new(serve::Owner::default())));
}

/// How long an isolate keeps the owner's settings before asking again.
const OWNER_FOR_MS: u64 = 60_000;

/// The owner's settings in force: the edge's own rules, then the owner's (pushed by control),
/// and the link bases. When the Control object cannot answer, the link is still served, with
/// the settings read last (or the edge's own rules), and it is asked again at the next fetch.
async fn owner(env: &Env, config: &EdgeConfig) -> std::rc::Rc<serve::Owner> {
    let now = now_ms();
    let (read, cached) = OWNER.with_borrow(|(read, owner)| (*read, owner.clone()));
    if read != 0 && now < read + OWNER_FOR_MS {
        return cached;
    }
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
            subscription(&req, &env, &ctx, &config, alias).await?
        }
        Route::Subscription(token) => subscription(&req, &env, &ctx, &config, token).await?,
        // An old subscription path of a user taken over from another panel (an alias) is
        // served like a link, when it is under a prefix the owner's aliases use. Anything
        // else gets the decoy with no storage call: a flood of random paths must not spend the
        // operator's Durable Object requests (the owner's settings are asked at most once a
        // minute per isolate). (The link prefix is public anyway; the API prefix is a secret
        // too long to guess, so timing tells nothing.)
        Route::Unknown if matches!(req.method(), Method::Get | Method::Head) => {
            match owner(&env, &config).await.settings.alias(url.path()) {
                Some(token) => subscription(&req, &env, &ctx, &config, Some(token)).await?,
                None => decoy(),
            }
        }
        Route::Unknown => decoy(),
        // Every API route is the Control object's, push token and node signatures included
        // (and the health answer, with its count of refused tokens).
        _ => return control(&env)?.fetch_with_request(req).await,
    };
    respond(reply, head)
}

fn control(env: &Env) -> Result<worker::Stub> {
    env.durable_object("CONTROL")?.id_from_name("control")?.get_stub()
}

fn network(env: &Env, network: &Network) -> Result<worker::Stub> {
    env.durable_object("NETWORK")?.id_from_name(&network.to_string())?.get_stub()
}

/// Reads a link from its shard, counting the fetch against its window when `count`.
async fn link(env: &Env, config: &EdgeConfig, hash: &[u8; 32], count: bool) -> Result<Reply> {
    let stub = env.durable_object("LINKS")?.id_from_name(&format!("links-{}", config.shard_of(hash)))?.get_stub()?;
    let link = config.limits.link;
    let limit = if count && config.limits.enabled { link.limit } else { 0 };
    let url = format!("https://links/get?hash={}&limit={limit}&window_ms={}", hex::encode(hash), link.window_ms);
    reply_of(call(&stub, Method::Get, &url, None).await?).await
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
    let asking = DeviceCall { token: *token.as_bytes(), policy: policy.clone(), seen, now: now_ms() / 1000 };
    let asked = async {
        let stub =
            env.durable_object("LINKS")?.id_from_name(&format!("links-{}", config.shard_of(&hash)))?.get_stub()?;
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
    env: &Env,
    ctx: &Context,
    config: &EdgeConfig,
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
    let url = req.url()?;
    let hash = token.as_ref().map_or_else(|| sha256(url.path().as_bytes()), SubToken::hash);
    if limits.enabled
        && let Some(retry) = REFUSALS.with_borrow(|refusals| refusals.check(&hash, now_ms()))
    {
        return Ok(too_many(retry));
    }
    // A network refused is remembered for the `Retry-After` it was told (whole seconds: a
    // little longer than its bucket takes to refill a token).
    let network_key = sha256(format!("network {client_network}").as_bytes());
    if limits.enabled
        && let Some(retry) = REFUSALS.with_borrow(|refusals| refusals.check(&network_key, now_ms()))
    {
        return Ok(too_many(retry));
    }
    if limits.enabled {
        let url =
            format!("https://network/gate?burst={}&per_minute={}", limits.network.burst, limits.network.per_minute);
        let gate = reply_of(call(&network(env, &client_network)?, Method::Get, &url, None).await?).await?;
        match gate.status {
            200 => {}
            429 => {
                let retry = gate.headers.iter().find(|(n, _)| *n == "retry-after").and_then(|(_, v)| v.parse().ok());
                let retry = retry.unwrap_or(60);
                REFUSALS.with_borrow_mut(|refusals| refusals.remember(network_key, now_ms(), retry));
                return Ok(too_many(retry));
            }
            // The network tried too many unknown links; and storage trouble fails closed.
            _ => return Ok(decoy()),
        }
    }
    let found = link(env, config, &hash, true).await?;
    match (token, found.status) {
        (Some(token), 200) => {
            let Some(snapshot) = serve::open(&found.body, &token) else {
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
        (Some(_), 429) => {
            let retry = found.headers.iter().find(|(n, _)| *n == "retry-after").and_then(|(_, v)| v.parse().ok());
            let retry = retry.unwrap_or(60);
            REFUSALS.with_borrow_mut(|refusals| refusals.remember(hash, now_ms(), retry));
            Ok(too_many(retry))
        }
        (_, 404) | (None, _) => {
            if limits.enabled {
                let misses = limits.misses;
                let url = format!(
                    "https://network/miss?limit={}&window_ms={}&block_ms={}",
                    misses.misses.limit, misses.misses.window_ms, misses.block_ms
                );
                let stub = network(env, &client_network)?;
                ctx.wait_until(async move {
                    let _ = call(&stub, Method::Post, &url, None).await;
                });
            }
            Ok(decoy())
        }
        _ => Ok(api::unavailable()),
    }
}
