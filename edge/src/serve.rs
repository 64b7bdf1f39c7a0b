//! Answering a subscription fetch, the 429, and the decoy.
//!
//! A fetch goes: the client network's guard and bucket ([`network_gate`]), then the link's
//! stored envelope and its hourly window (one storage call on Cloudflare: both live in the
//! link's shard), then [`subscription`]: open the sealed snapshot with the token from the
//! request, pick the format by `?format=` or User-Agent, render. Unknown tokens, unknown paths
//! and networks that tried too many unknown tokens all get the same [`decoy`].

use hearth_shared::agent::{format_override, match_user_agent};
use hearth_shared::envelope::Envelope;
use hearth_shared::ratelimit::{BucketLimit, Decision, MissGuard, TokenBucket};
use hearth_shared::render::answer;
use hearth_shared::seal;
use hearth_shared::wire::SubToken;

use crate::Reply;
use crate::config::EdgeConfig;

/// The decoy: what a stock nginx answers for a path it does not have.
pub fn decoy() -> Reply {
    use hearth_shared::render::{DECOY_BODY, DECOY_HEADERS, DECOY_STATUS};
    Reply {
        status: DECOY_STATUS,
        headers: DECOY_HEADERS.iter().map(|(name, value)| (*name, (*value).to_owned())).collect(),
        body: DECOY_BODY.to_vec(),
    }
}

/// Too many requests, with `Retry-After`.
pub fn too_many(retry_after: u64) -> Reply {
    let mut reply = Reply::text(429, "Too many requests for this link. Your app will try again later.\n");
    reply.headers.push(("retry-after", retry_after.to_string()));
    reply.headers.push(("cache-control", "no-store".to_owned()));
    reply
}

/// What the client network's state says before the link is even looked up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Go on.
    Open,
    /// The network tried too many unknown tokens: decoy, whatever it asks.
    Decoy,
    /// The network is over its rate: 429.
    Limited(u64),
}

/// Checks (and counts) a fetch from a client network at `now_ms`. Only called when limits
/// are on.
pub fn network_gate(guard: &MissGuard, bucket: &mut TokenBucket, limit: BucketLimit, now_ms: u64) -> Gate {
    if guard.is_blocked(now_ms) {
        return Gate::Decoy;
    }
    match bucket.take(now_ms, limit) {
        Decision::Allow { .. } => Gate::Open,
        Decision::Deny { retry_after } => Gate::Limited(retry_after),
    }
}

/// The answer for a known link whose stored envelope is `envelope`: the snapshot opened with
/// the `token` the client presented. `sub_url` is the link as fetched (for the page).
pub fn subscription(
    config: &EdgeConfig,
    envelope: &[u8],
    token: &SubToken,
    user_agent: &str,
    query: &str,
    sub_url: &str,
) -> Reply {
    // The envelope was verified when it was pushed; a row that no longer opens is treated
    // like an unknown link rather than an error that tells it apart.
    let Some(body) = Envelope::stored_body(envelope) else {
        return decoy();
    };
    let Ok(snapshot) = seal::open(body, token) else {
        return decoy();
    };
    let wants = format_override(query).unwrap_or_else(|| match_user_agent(user_agent, &config.ua_rules));
    let answer = answer(&snapshot, wants, sub_url);
    Reply { status: 200, headers: answer.headers, body: answer.body.into_bytes() }
}
