//! Answers this isolate's memory holds, made in one call from `js/entry.js` with no future,
//! no workers-rs request or response and no Durable Object: a warm subscription fetch, or its
//! 429. Anything else (a link not held, the feed or the owner's settings due, counts to send,
//! a link with a device limit, any other route) is left to [`crate::front`]'s handler, which
//! this path does exactly as it would have done for these fetches, nothing counted twice:
//! every check that can send the fetch there comes before anything is counted.

use std::net::{IpAddr, Ipv4Addr};

use hearth_edge::Reply;
use hearth_edge::isolate::{FeedDue, Lookup};
use hearth_edge::routes::{Route, route};
use hearth_edge::serve::{self, too_many};
use hearth_shared::ratelimit::{Decision, Network};
use worker::wasm_bindgen::{self, prelude::wasm_bindgen};

use crate::memory::{ANSWERED_AT_ONCE, isolate, owner_read};
use crate::runtime::{config_read, now_ms};

/// An answer for `js/entry.js` to send: its status, its headers and its body.
#[wasm_bindgen]
pub struct Held {
    status: u16,
    headers: String,
    body: Vec<u8>,
}

#[wasm_bindgen]
impl Held {
    #[wasm_bindgen(getter)]
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The headers' names and values in turn, each ended by a line feed
    /// ([`Reply::header_lines`]): one string to hand over, not one per name and value. Taken,
    /// not copied (read it once).
    pub fn take_headers(&mut self) -> String {
        std::mem::take(&mut self.headers)
    }

    /// The body, handed over as it is (this object is gone after it).
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }
}

/// The answer to a `method` fetch of `url` (as the runtime serialized it) from `ip` with these
/// headers, when memory holds it; `None` sends the fetch to the full handler. (`pub` for
/// wasm-bindgen, which exports it to JavaScript.)
#[allow(unreachable_pub)]
#[wasm_bindgen]
pub fn answer_held(
    method: &str,
    url: &str,
    ip: Option<String>,
    user_agent: Option<String>,
    accept_language: Option<String>,
) -> Option<Held> {
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return None,
    };
    let config = config_read()?;
    let url: worker::Url = url.parse().ok()?;
    let Route::Subscription(Some(token)) = route(&config, method, url.path(), url.query().unwrap_or("")) else {
        return None;
    };
    let now = now_ms();
    let limits = config.limits;
    let client: IpAddr = ip.and_then(|ip| ip.parse().ok()).unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let network = Network::of(client);
    // The handler's first step: a network over its budget (or trying unknown links) is
    // answered so whatever else holds. The peek says what `gate` then does; `gate` counts it.
    if limits.enabled
        && let Some(refusal) = isolate(&config, |i| i.gate_peek(network, now, limits)).refusal()
    {
        isolate(&config, |i| i.gate(network, now, limits));
        return Some(answered(refusal, head));
    }
    // Then what only the handler can do: the feed or the owner's settings to ask, counts to
    // send, a link memory does not hold. (Nothing is counted yet.)
    let owner = owner_read(now)?;
    let hash = token.hash();
    let envelope = isolate(&config, |i| {
        let ready = i.feed_due(now) == FeedDue::No && !(limits.enabled && i.flush_due(now));
        match i.lookup(&hash, now) {
            Lookup::Held(envelope) if ready => Some(envelope),
            _ => None,
        }
    })?;
    // A link over its limit is refused before its snapshot is opened, as in the handler; a
    // snapshot that does not open (the handler's decoy) or has a device limit (the link's
    // shard is asked) is the handler's.
    let refused = limits.enabled && isolate(&config, |i| i.hit_refused(&hash, now, limits.link));
    let snapshot =
        if refused { None } else { Some(serve::open(&envelope, &token).filter(|snapshot| snapshot.hwid.limit == 0)?) };
    if limits.enabled {
        if let Some(refusal) = isolate(&config, |i| i.gate(network, now, limits)).refusal() {
            return Some(answered(refusal, head));
        }
        if let Decision::Deny { retry_after } = isolate(&config, |i| i.hit(&hash, now, limits.link)) {
            return Some(answered(too_many(retry_after), head));
        }
    }
    let snapshot = snapshot?;
    let mut sub_url = url.clone();
    sub_url.set_query(None);
    let reply = serve::subscription(
        &owner,
        &snapshot,
        None,
        &token,
        &user_agent.unwrap_or_default(),
        &accept_language.unwrap_or_default(),
        url.query().unwrap_or(""),
        sub_url.as_str(),
    );
    Some(answered(reply, head))
}

/// A [`Reply`] as [`Held`] (no body on HEAD, which says the length GET sends), counted.
fn answered(mut reply: Reply, head: bool) -> Held {
    ANSWERED_AT_ONCE.with(|n| n.set(n.get() + 1));
    let body = if head {
        reply.headers.push(("content-length", reply.body.len().to_string()));
        Vec::new()
    } else {
        std::mem::take(&mut reply.body)
    };
    let headers = reply.header_lines();
    Held { status: reply.status, headers, body }
}
