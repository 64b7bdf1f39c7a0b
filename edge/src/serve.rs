//! Answering a subscription fetch, the 429, and the decoy.
//!
//! A fetch goes: the client network's guard and bucket ([`network_gate`]), then the link's
//! stored envelope and its hourly window (on Cloudflare both from the isolate's memory when
//! it holds them: [`crate::isolate`]), then [`open`]: the sealed snapshot, with the token from the request; when
//! the link limits devices and the app names its device, [`admit_device`] by the link's
//! registry; then [`subscription`]: pick the format by `?format=` or User-Agent, render.
//! Unknown tokens, unknown paths and networks that tried too many unknown tokens all get the
//! same [`decoy`].

use hearth_shared::agent::{Wants, format_override, match_user_agent};
use hearth_shared::devices::{self, Admission, DeviceReport, HwidPolicy, Seen};
use hearth_shared::envelope::Envelope;
use hearth_shared::ratelimit::{BucketLimit, Decision, MissGuard, MissLimit, Network, TokenBucket};
use hearth_shared::render::answer_at;
use hearth_shared::render::page::Viewer;
use hearth_shared::seal;
use hearth_shared::wire::{EdgeSettings, Snapshot, SubToken};

use crate::Reply;
use crate::config::EdgeConfig;

/// What the owner set that changes answers: the User-Agent rules in force (the edge's own,
/// `HEARTH_UA_RULES`, first, then those control pushed) and where every edge serves links.
#[derive(Clone, Debug, Default)]
pub struct Owner {
    pub rules: Vec<hearth_shared::agent::UaRule>,
    pub settings: EdgeSettings,
}

/// The owner's settings in force, from the edge's own and what control pushed.
pub fn owner(config: &EdgeConfig, pushed: EdgeSettings) -> Owner {
    Owner { rules: config.ua_rules.iter().cloned().chain(pushed.ua_rules.iter().cloned()).collect(), settings: pushed }
}

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

impl Gate {
    /// The answer a closed gate gives (the [`decoy`] or [`too_many`]); `None` when it is open.
    pub fn refusal(self) -> Option<Reply> {
        match self {
            Gate::Open => None,
            Gate::Decoy => Some(decoy()),
            Gate::Limited(retry_after) => Some(too_many(retry_after)),
        }
    }
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

/// Client networks' budgets and unknown-link guards, as an edge keeps them in memory (the
/// native edge for all of it, the Worker per isolate). Bounded: past its cap, networks not
/// seen before share one entry (until a pruning makes room), so they are still limited,
/// together; what no longer holds anything back is dropped every minute (every second while
/// full).
#[derive(Debug)]
pub struct Networks {
    map: std::collections::HashMap<Network, (MissGuard, TokenBucket)>,
    cap: usize,
    pruned_ms: u64,
}

impl Networks {
    /// How often entries that no longer hold anything back are dropped.
    const PRUNE_EVERY_MS: u64 = 60_000;
    /// How often when full: sooner, but not on every request (a map full of live entries, a
    /// flood from many networks, would make each fetch walk all of it).
    const PRUNE_FULL_EVERY_MS: u64 = 1_000;

    /// Budgets for at most `cap` networks.
    pub fn new(cap: usize) -> Networks {
        Networks { map: std::collections::HashMap::new(), cap: cap.max(1), pruned_ms: 0 }
    }

    /// Whether the map is at its cap.
    pub fn full(&self) -> bool {
        self.map.len() >= self.cap
    }

    /// How many networks are tracked.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Drops, when it is time, what no longer limits anything: buckets full again with no
    /// unknown-link window or block running.
    fn prune(&mut self, now_ms: u64, misses: MissLimit) {
        let every = if self.full() { Self::PRUNE_FULL_EVERY_MS } else { Self::PRUNE_EVERY_MS };
        if now_ms < self.pruned_ms + every {
            return;
        }
        self.pruned_ms = now_ms;
        let now_us = now_ms.saturating_mul(1000);
        self.map.retain(|_, (guard, bucket)| {
            guard.is_blocked(now_ms)
                || bucket.tat_us > now_us
                || guard.window.start_ms + misses.misses.window_ms > now_ms
        });
    }

    /// The key `network` is counted under.
    fn key(&self, network: Network) -> Network {
        // A network no real client is in (a /24 of the IPv4 "this network" block) holds the
        // networks past the cap.
        const OVERFLOW: Network = Network::V4([0, 0, 0]);
        if self.full() && !self.map.contains_key(&network) { OVERFLOW } else { network }
    }

    /// The entry `network` is counted in.
    fn entry(&mut self, network: Network) -> &mut (MissGuard, TokenBucket) {
        let key = self.key(network);
        self.map.entry(key).or_default()
    }

    /// What [`Networks::gate`] would say at `now_ms`, counting nothing (pruning drops only
    /// entries that say what a new one would).
    pub fn peek(&self, network: Network, now_ms: u64, limits: crate::config::Limits) -> Gate {
        let (guard, mut bucket) = self.map.get(&self.key(network)).copied().unwrap_or_default();
        network_gate(&guard, &mut bucket, limits.network, now_ms)
    }

    /// Checks (and counts) a fetch from `network` at `now_ms` ([`network_gate`]).
    pub fn gate(&mut self, network: Network, now_ms: u64, limits: crate::config::Limits) -> Gate {
        self.prune(now_ms, limits.misses);
        let (guard, bucket) = self.entry(network);
        network_gate(guard, bucket, limits.network, now_ms)
    }

    /// Counts an unknown link tried from `network`; true when the network is now blocked.
    pub fn miss(&mut self, network: Network, now_ms: u64, misses: MissLimit) -> bool {
        self.entry(network).0.miss(now_ms, misses)
    }
}

/// The snapshot of a known link whose stored envelope is `envelope`, opened with the `token`
/// the client presented; `None` when it does not open (the fetch gets the [`decoy`]).
pub fn open(envelope: &[u8], token: &SubToken) -> Option<Snapshot> {
    // The envelope was verified when it was pushed; a row that no longer opens is treated
    // like an unknown link rather than an error that tells it apart.
    seal::open(Envelope::stored_body(envelope)?, token).ok()
}

/// The device a fetch comes from, when the link limits devices and the app says which it is
/// (`header` gives a request header by its lower-case name).
pub fn device(snapshot: &Snapshot, header: impl Fn(&str) -> Option<String>) -> Option<Seen> {
    if snapshot.hwid.limit == 0 {
        return None;
    }
    let headers: Vec<(&str, Option<String>)> = ["x-hwid", "x-device-os", "x-ver-os", "x-device-model", "user-agent"]
        .into_iter()
        .map(|n| (n, header(n)))
        .collect();
    Seen::from_headers(|name| headers.iter().find(|(n, _)| *n == name).and_then(|(_, v)| v.as_deref()))
}

/// Admits `seen` at `now` (Unix seconds) by the link's stored registry (`stored`, sealed;
/// `None`: none yet) under `policy`: the answer, and the registry to store and queue for
/// control when it changed. A stored registry that no longer opens (it cannot, but for a
/// broken row) starts over.
pub fn admit_device(
    stored: Option<&[u8]>,
    policy: &HwidPolicy,
    token: &SubToken,
    seen: &Seen,
    now: u64,
) -> (Admission, Option<Registered>) {
    let mut registry = stored.and_then(|bytes| devices::open(bytes, token)).unwrap_or_default();
    let (admission, changed) = registry.admit(policy, seen, now);
    if !changed {
        return (admission, None);
    }
    let sealed = devices::seal(&registry, token);
    let report = DeviceReport { token_hash: token.hash(), sealed: sealed.clone() }.encode();
    (admission, Some(Registered { report, sealed }))
}

/// A link's registry that changed: what to queue for control, and what to store.
pub struct Registered {
    /// The [`DeviceReport`], encoded.
    pub report: Vec<u8>,
    /// The registry, sealed.
    pub sealed: Vec<u8>,
}

/// Where a link's device report waits in the usage queue: node 0 (no node has it) and a
/// sequence number from the link's token hash, so a newer registry replaces the one queued.
pub fn device_slot(token_hash: &hearth_shared::Digest) -> (u64, u64) {
    let mut first = [0u8; 8];
    first.copy_from_slice(&token_hash[..8]);
    (0, u64::from_be_bytes(first) >> 1)
}

/// The answer for a known link: its `snapshot` (what [`open`] gave), in the format the
/// operator's rules (the edge's own first, then the owner's from control) or the built-in
/// table pick; a device over the link's limit (`admission`) gets [`devices::refused`].
/// `sub_url` is the link as fetched (for the page, and to know whether its domain was blocked
/// or retired: then the answer names the link at the primary; a retired one is redirected
/// there, 308). A browser's page speaks the language of `accept_language` (or `?lang=`).
#[allow(clippy::too_many_arguments)]
pub fn subscription(
    owner: &Owner,
    snapshot: &Snapshot,
    admission: Option<Admission>,
    token: &SubToken,
    user_agent: &str,
    accept_language: &str,
    query: &str,
    sub_url: &str,
) -> Reply {
    let mobility = owner.settings.mobility(sub_url, token);
    if mobility.retired
        && let Some(to) = &mobility.moved_to
    {
        let location = if query.is_empty() { to.clone() } else { format!("{to}?{query}") };
        let mut reply = Reply::text(308, format!("This link moved to {to}\n"));
        reply.headers.push(("location", location));
        reply.headers.push(("cache-control", "no-store".to_owned()));
        return reply;
    }
    let wants = format_override(query).unwrap_or_else(|| match_user_agent(user_agent, &owner.rules));
    // Only a browser's page speaks a language and names a device: apps' profiles skip it.
    let viewer = if wants == Wants::Page { Viewer::of(user_agent, accept_language, query) } else { Viewer::default() };
    let answer = if admission == Some(Admission::Refused) {
        answer_at(&devices::refused(snapshot), wants, sub_url, &mobility, viewer)
    } else {
        answer_at(snapshot, wants, sub_url, &mobility, viewer)
    };
    Reply { status: 200, headers: answer.headers, body: answer.body.into_bytes() }
}
