//! What a Worker isolate keeps in memory so that a warm subscription fetch makes no Durable
//! Object call: the links it served (their sealed envelopes), the set of every live link (so
//! an unknown token is refused without storage), the links over their hourly limit, its own
//! count of each link's fetches, and each client network's bucket. Runtime-free and pure
//! (time is passed in); the Worker's front keeps one per isolate.
//!
//! **Changes reach it through a feed.** The `Control` object counts every change to a link in
//! a generation number; an isolate asks it "what changed since generation g" at most once
//! every [`Isolate::feed_ms`] (and once at most at a time), and drops what changed. Served from
//! memory only while its last answer is younger than that: a disabled, expired or deleted user
//! stops being served within `feed_ms` on every isolate. Older than half of it, a fetch is
//! answered from memory and the feed is asked behind it; older than all of it, the feed is
//! asked first (or, while another fetch is asking, storage is read directly).
//!
//! **Per-link limits are counted here and summed by the link's shard.** A fetch is counted in
//! the isolate; the counts go to the shards in batches, at most once every [`FLUSH_MS`], and
//! each shard answers with the link's count in the window (all isolates together) and
//! publishes a link that went over its limit through the feed. An isolate lets a link through
//! while the count it last heard plus its own since stay under the limit: worst case, a link
//! is fetched `limit` times in the window on every isolate that had not heard of the others'
//! fetches yet (see docs/running/edges.md).
//!
//! **A client network's budget is this isolate's own** (a token bucket and the unknown-link
//! guard, as the native edge keeps them for the whole edge): checked without a call. A network
//! is held to its budget on each isolate it reaches.

use std::collections::{HashMap, HashSet};

use hearth_shared::Digest;
use hearth_shared::ratelimit::{Decision, MissLimit, Network, WindowLimit};
use serde::{Deserialize, Serialize};

/// How often an isolate's per-link counts go to the shards, at most.
pub const FLUSH_MS: u64 = 1_000;
/// The most bytes of envelopes an isolate keeps (past it, the tenth stored longest ago go):
/// an isolate has 128 MB in all on Cloudflare, and a link's envelope is a few KB.
pub const MAX_ENVELOPE_BYTES: usize = 16 << 20;
/// The most client networks an isolate keeps budgets of (past it, new ones share one).
pub const MAX_NETWORKS: usize = 10_000;

/// A link as the feed and the isolate name it: the first eight bytes of its token hash.
pub fn key(hash: &Digest) -> u64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash[..8]);
    u64::from_be_bytes(first)
}

/// The feed's answer to "what changed since generation g".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Feed {
    /// The generation the answer brings the isolate to.
    pub generation: u64,
    /// Whether `links` is every live link (the answer to generation 0, or to one the
    /// `Control` object does not know: the isolate replaces its set).
    pub whole: bool,
    /// Links stored, changed or deleted since: (key, whether it is live now).
    pub links: Vec<(u64, bool)>,
    /// Links over their limit: (key, until when, ms since the epoch).
    pub limited: Vec<(u64, u64)>,
}

/// A batch of one isolate's fetches of the links of one shard: (token hash, fetches).
pub type Hits = Vec<(Digest, u32)>;

/// A shard's answer to [`Hits`]: for each link, in order, its count in the window that
/// `start_ms` begins (every isolate's fetches together).
pub type Counted = Vec<(u32, u64)>;

/// When the feed should be asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeedDue {
    /// Not yet.
    No,
    /// Behind this fetch (what is in memory is still fresh enough to serve).
    Behind,
    /// Before this fetch is answered from memory.
    First,
}

/// What memory says of a link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Its envelope, fresh enough to serve.
    Held(Vec<u8>),
    /// No live link has this hash (the set is fresh): the decoy, with no storage call.
    Unknown,
    /// Storage must say.
    Ask,
}

#[derive(Clone, Copy, Debug, Default)]
struct Count {
    /// The window (aligned, as the shard's), and when it ends.
    start_ms: u64,
    end_ms: u64,
    /// Fetches in it the shard last told of (every isolate's), and this isolate's sent since.
    heard: u32,
    /// This isolate's fetches not sent yet.
    pending: u32,
}

/// One isolate's memory.
#[derive(Debug)]
pub struct Isolate {
    /// How long an answer of the feed is believed.
    pub feed_ms: u64,
    generation: u64,
    /// When the feed last answered (`None`: never).
    heard_ms: Option<u64>,
    asking: bool,
    /// Counts the pushes this isolate relayed ([`Isolate::stale`]); an answer to an ask made
    /// before the last of them may not hold it, so it does not make memory fresh.
    pushes: u64,
    asked_at_push: u64,
    /// Every live link (valid while the feed is fresh).
    live: HashSet<u64>,
    /// Envelopes served: key -> (token hash, envelope, when stored), and their bytes.
    envelopes: HashMap<u64, (Digest, Vec<u8>, u64)>,
    envelope_bytes: usize,
    limited: HashMap<u64, u64>,
    counts: HashMap<u64, (Digest, Count)>,
    /// Whether a fetch was counted since the last batch (refusals count nothing).
    unsent: bool,
    flushed_ms: u64,
    networks: crate::serve::Networks,
    /// Storage calls made for subscription fetches (reads, devices, the feed), for the health
    /// answer (and its tests).
    pub storage_calls: u64,
    /// Batches of counted fetches sent to the shards (behind answers, at most one a second).
    pub count_batches: u64,
}

impl Isolate {
    /// An isolate that believes the feed for `feed_ms`.
    pub fn new(feed_ms: u64) -> Isolate {
        Isolate {
            feed_ms: feed_ms.max(1),
            generation: 0,
            heard_ms: None,
            asking: false,
            pushes: 0,
            asked_at_push: 0,
            live: HashSet::new(),
            envelopes: HashMap::new(),
            envelope_bytes: 0,
            limited: HashMap::new(),
            counts: HashMap::new(),
            unsent: false,
            flushed_ms: 0,
            networks: crate::serve::Networks::new(MAX_NETWORKS),
            storage_calls: 0,
            count_batches: 0,
        }
    }

    fn fresh(&self, now_ms: u64) -> bool {
        self.heard_ms.is_some_and(|heard| now_ms < heard + self.feed_ms)
    }

    /// When the feed should be asked at `now_ms`.
    pub fn feed_due(&self, now_ms: u64) -> FeedDue {
        match self.heard_ms {
            Some(heard) if now_ms < heard + self.feed_ms / 2 => FeedDue::No,
            Some(heard) if now_ms < heard + self.feed_ms => FeedDue::Behind,
            _ => FeedDue::First,
        }
    }

    /// The generation to ask the feed from, when nobody in this isolate is asking (then the
    /// caller asks, and hands the answer to [`Isolate::heard`] or says it failed with
    /// [`Isolate::not_heard`]).
    pub fn ask(&mut self) -> Option<u64> {
        if self.asking {
            return None;
        }
        self.asking = true;
        self.asked_at_push = self.pushes;
        Some(self.generation)
    }

    /// The feed could not be asked: memory is believed no longer than it was.
    pub fn not_heard(&mut self) {
        self.asking = false;
    }

    /// Takes the feed's answer, asked at `asked_ms`.
    pub fn heard(&mut self, feed: Feed, asked_ms: u64) {
        self.asking = false;
        if feed.whole {
            self.live = feed.links.iter().filter(|(_, live)| *live).map(|(key, _)| *key).collect();
            // Anything held may have changed unseen.
            self.envelopes.clear();
            self.envelope_bytes = 0;
            self.limited.clear();
        } else {
            for (key, live) in &feed.links {
                self.drop_envelope(*key);
                if *live {
                    self.live.insert(*key);
                } else {
                    self.live.remove(key);
                    self.counts.remove(key);
                }
            }
        }
        for (key, until) in feed.limited {
            self.limited.insert(key, until);
        }
        self.limited.retain(|_, until| *until > asked_ms);
        self.generation = feed.generation;
        // Believed from when it was asked, not from when it came; not at all if this isolate
        // relayed a push since (the answer may be from before it).
        if self.asked_at_push == self.pushes {
            self.heard_ms = Some(self.heard_ms.map_or(asked_ms, |heard| heard.max(asked_ms)));
        }
    }

    /// Marks memory stale: this isolate relayed a push, so the feed has news (asked at the
    /// next fetch, before it is answered from memory).
    pub fn stale(&mut self) {
        self.heard_ms = None;
        self.pushes += 1;
    }

    /// What memory says of the link `hash` at `now_ms`.
    pub fn lookup(&self, hash: &Digest, now_ms: u64) -> Lookup {
        if !self.fresh(now_ms) {
            return Lookup::Ask;
        }
        let key = key(hash);
        if !self.live.contains(&key) {
            return Lookup::Unknown;
        }
        match self.envelopes.get(&key) {
            Some((held, envelope, _)) if held == hash => Lookup::Held(envelope.clone()),
            _ => Lookup::Ask,
        }
    }

    /// The generation memory is at: a read from storage that began at one generation is kept
    /// only if memory is still at it when the read ends ([`Isolate::keep`]).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Keeps the envelope storage gave for `hash` at `now_ms`, if the feed has not moved
    /// since the read began (at `generation`): what changed meanwhile is not kept stale.
    pub fn keep(&mut self, hash: &Digest, envelope: Vec<u8>, generation: u64, now_ms: u64) {
        if generation != self.generation || !self.fresh(now_ms) || !self.live.contains(&key(hash)) {
            return;
        }
        if envelope.len() > MAX_ENVELOPE_BYTES / 16 {
            return;
        }
        self.drop_envelope(key(hash));
        if self.envelope_bytes + envelope.len() > MAX_ENVELOPE_BYTES {
            // The tenth stored longest ago goes.
            let mut stored: Vec<u64> = self.envelopes.values().map(|(_, _, at)| *at).collect();
            stored.sort_unstable();
            let cut = stored[stored.len() / 10];
            self.envelopes.retain(|_, (_, _, at)| *at > cut);
            self.envelope_bytes = self.envelopes.values().map(|(_, envelope, _)| envelope.len()).sum();
        }
        self.envelope_bytes += envelope.len();
        self.envelopes.insert(key(hash), (*hash, envelope, now_ms));
    }

    fn drop_envelope(&mut self, key: u64) {
        if let Some((_, envelope, _)) = self.envelopes.remove(&key) {
            self.envelope_bytes -= envelope.len();
        }
    }

    /// Counts a fetch of `hash` at `now_ms` against `limit`, from what this isolate heard of
    /// the link's count and its own fetches since; a refused fetch is not counted.
    pub fn hit(&mut self, hash: &Digest, now_ms: u64, limit: WindowLimit) -> Decision {
        let window = limit.window_ms.max(1);
        let start = now_ms - now_ms % window;
        let retry_after = |until: u64| until.saturating_sub(now_ms).div_ceil(1000).max(1);
        let key = key(hash);
        if let Some(until) = self.limited.get(&key).copied().filter(|until| *until > now_ms) {
            return Decision::Deny { retry_after: retry_after(until) };
        }
        let fresh = Count { start_ms: start, end_ms: start + window, ..Count::default() };
        let (_, count) = self.counts.entry(key).or_insert((*hash, fresh));
        if count.start_ms != start {
            *count = fresh;
        }
        if count.heard.saturating_add(count.pending) >= limit.limit {
            return Decision::Deny { retry_after: retry_after(start + window) };
        }
        count.pending += 1;
        self.unsent = true;
        Decision::Allow { remaining: limit.limit - count.heard - count.pending }
    }

    /// Whether [`Isolate::hit`] would refuse a fetch of `hash` at `now_ms`, counting nothing.
    pub fn hit_refused(&self, hash: &Digest, now_ms: u64, limit: WindowLimit) -> bool {
        let window = limit.window_ms.max(1);
        let start = now_ms - now_ms % window;
        let key = key(hash);
        if self.limited.get(&key).is_some_and(|until| *until > now_ms) {
            return true;
        }
        let counted = match self.counts.get(&key) {
            Some((_, count)) if count.start_ms == start => count.heard.saturating_add(count.pending),
            _ => 0,
        };
        counted >= limit.limit
    }

    /// Whether [`Isolate::flush`] has counts to send at `now_ms` (a fetch answered where
    /// counts cannot be sent must not come when they are due). Refusals count nothing, so a
    /// link over its limit, fetched on and on, leaves nothing due.
    pub fn flush_due(&self, now_ms: u64) -> bool {
        self.unsent && now_ms >= self.flushed_ms + FLUSH_MS
    }

    /// The fetches to send to the shards at `now_ms`, by shard (`shard_of` a token hash), if
    /// it is time; they count as heard from then on.
    pub fn flush(&mut self, now_ms: u64, shard_of: impl Fn(&Digest) -> u32) -> Vec<(u32, Hits, u64)> {
        if !self.flush_due(now_ms) {
            return Vec::new();
        }
        self.flushed_ms = now_ms;
        self.unsent = false;
        let mut shards: HashMap<(u32, u64), Hits> = HashMap::new();
        for (hash, count) in self.counts.values_mut() {
            if count.pending > 0 {
                shards.entry((shard_of(hash), count.start_ms)).or_default().push((*hash, count.pending));
                count.heard = count.heard.saturating_add(count.pending);
                count.pending = 0;
            }
        }
        // Counts of windows that ended are of no use any more (all were sent just now).
        self.counts.retain(|_, (_, count)| count.end_ms > now_ms);
        shards.into_iter().map(|((shard, start), hits)| (shard, hits, start)).collect()
    }

    /// Takes a shard's answer to `hits`: each link's count in the window, every isolate's.
    pub fn counted(&mut self, hits: &Hits, counted: &Counted) {
        for ((hash, _), (count, start_ms)) in hits.iter().zip(counted) {
            if let Some((_, held)) = self.counts.get_mut(&key(hash))
                && held.start_ms == *start_ms
            {
                held.heard = held.heard.max(*count);
            }
        }
    }

    /// Checks (and counts) a fetch from `network` at `now_ms` against its bucket, and whether
    /// it tried too many unknown links ([`crate::serve::Networks`]).
    pub fn gate(&mut self, network: Network, now_ms: u64, limits: crate::config::Limits) -> crate::serve::Gate {
        self.networks.gate(network, now_ms, limits)
    }

    /// What [`Isolate::gate`] would say, counting nothing.
    pub fn gate_peek(&self, network: Network, now_ms: u64, limits: crate::config::Limits) -> crate::serve::Gate {
        self.networks.peek(network, now_ms, limits)
    }

    /// Counts an unknown link tried from `network`.
    pub fn miss(&mut self, network: Network, now_ms: u64, limit: MissLimit) {
        self.networks.miss(network, now_ms, limit);
    }

    /// How many envelopes and live links are held (for the health answer).
    pub fn held(&self) -> (usize, usize) {
        (self.envelopes.len(), self.live.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FEED_MS: u64 = 5_000;

    fn hash(n: u8) -> Digest {
        [n; 32]
    }

    fn synced(links: &[u8]) -> Isolate {
        let mut isolate = Isolate::new(FEED_MS);
        assert_eq!(isolate.ask(), Some(0));
        isolate.heard(
            Feed {
                generation: 3,
                whole: true,
                links: links.iter().map(|n| (key(&hash(*n)), true)).collect(),
                limited: vec![],
            },
            1_000,
        );
        isolate
    }

    /// The peeks say what the counting calls then do, and count nothing: the Worker answers
    /// a fetch at once only when it knows it will not hand it to the full handler after
    /// counting it.
    #[test]
    fn the_peeks_say_what_gate_and_hit_then_do_and_count_nothing() {
        let limits = crate::config::Limits {
            enabled: true,
            link: WindowLimit { limit: 4, window_ms: 60_000 },
            network: hearth_shared::ratelimit::BucketLimit { burst: 3, per_minute: 60 },
            misses: hearth_shared::ratelimit::MissLimit::DEFAULT,
        };
        let mut isolate = synced(&[1]);
        let network = Network::of("192.0.2.7".parse().unwrap());
        for now in (2_000..2_400).step_by(50) {
            let peeked = isolate.gate_peek(network, now, limits);
            assert_eq!(isolate.gate_peek(network, now, limits), peeked, "a peek counted");
            assert_eq!(isolate.gate(network, now, limits), peeked, "at {now}");
        }
        assert!(matches!(isolate.gate_peek(network, 2_400, limits), crate::serve::Gate::Limited(_)));
        for now in (2_000..2_500).step_by(50) {
            let refused = isolate.hit_refused(&hash(1), now, limits.link);
            assert_eq!(isolate.hit_refused(&hash(1), now, limits.link), refused, "a peek counted");
            let decision = isolate.hit(&hash(1), now, limits.link);
            assert_eq!(!decision.allowed(), refused, "at {now}: {decision:?}");
        }
        assert!(isolate.hit_refused(&hash(1), 2_500, limits.link));
        assert!(!isolate.hit_refused(&hash(1), 62_000, limits.link), "a new window");
    }

    #[test]
    fn memory_serves_while_the_feed_is_fresh_and_asks_storage_after() {
        let isolate = Isolate::new(FEED_MS);
        assert_eq!(isolate.lookup(&hash(1), 0), Lookup::Ask, "nothing heard yet");
        assert_eq!(isolate.feed_due(0), FeedDue::First);
        let mut isolate = synced(&[1, 2]);
        assert_eq!(isolate.lookup(&hash(9), 1_500), Lookup::Unknown, "not a live link: no storage call");
        assert_eq!(isolate.lookup(&hash(1), 1_500), Lookup::Ask, "live, not held yet");
        isolate.keep(&hash(1), b"one".to_vec(), isolate.generation(), 1_500);
        assert_eq!(isolate.lookup(&hash(1), 1_500), Lookup::Held(b"one".to_vec()));
        assert_eq!(isolate.feed_due(3_400), FeedDue::No);
        assert_eq!(isolate.feed_due(3_500), FeedDue::Behind, "half the window: asked behind the answer");
        assert_eq!(isolate.lookup(&hash(1), 5_999), Lookup::Held(b"one".to_vec()));
        assert_eq!(isolate.feed_due(6_000), FeedDue::First);
        assert_eq!(isolate.lookup(&hash(1), 6_000), Lookup::Ask, "the window is over: storage says");
        assert_eq!(isolate.lookup(&hash(9), 6_000), Lookup::Ask, "nor is an unknown link refused on stale memory");
    }

    #[test]
    fn an_answer_asked_before_a_relayed_push_does_not_make_memory_fresh() {
        let mut isolate = synced(&[1]);
        isolate.keep(&hash(1), b"old".to_vec(), 3, 1_100);
        let since = isolate.ask().unwrap();
        // A push goes through this isolate while that ask is on its way.
        isolate.stale();
        isolate.heard(Feed { generation: since, whole: false, links: vec![], limited: vec![] }, 1_200);
        assert_eq!(isolate.lookup(&hash(1), 1_300), Lookup::Ask, "the push may not be in that answer");
        assert_eq!(isolate.feed_due(1_300), FeedDue::First);
        // The next ask, made after the push, does.
        isolate.ask();
        isolate.heard(Feed { generation: 4, whole: false, links: vec![(key(&hash(1)), true)], limited: vec![] }, 1_400);
        assert_eq!(isolate.feed_due(1_500), FeedDue::No);
    }

    #[test]
    fn one_ask_at_a_time_and_a_failed_one_changes_nothing() {
        let mut isolate = synced(&[1]);
        assert_eq!(isolate.ask(), Some(3));
        assert_eq!(isolate.ask(), None, "one ask in flight");
        isolate.not_heard();
        assert_eq!(isolate.feed_due(6_000), FeedDue::First, "still stale");
        assert_eq!(isolate.ask(), Some(3));
    }

    #[test]
    fn a_change_drops_the_envelope_and_a_deletion_the_link() {
        let mut isolate = synced(&[1, 2]);
        isolate.keep(&hash(1), b"one".to_vec(), 3, 1_100);
        isolate.keep(&hash(2), b"two".to_vec(), 3, 1_100);
        isolate.ask();
        isolate.heard(
            Feed {
                generation: 5,
                whole: false,
                links: vec![(key(&hash(1)), true), (key(&hash(2)), false), (key(&hash(4)), true)],
                limited: vec![],
            },
            2_000,
        );
        assert_eq!(isolate.lookup(&hash(1), 2_000), Lookup::Ask, "changed: read again");
        assert_eq!(isolate.lookup(&hash(2), 2_000), Lookup::Unknown, "deleted (a disabled user's rotated link)");
        assert_eq!(isolate.lookup(&hash(4), 2_000), Lookup::Ask, "new: served on its first fetch");
        // A read that began before the change is not kept.
        isolate.keep(&hash(1), b"old".to_vec(), 3, 2_100);
        assert_eq!(isolate.lookup(&hash(1), 2_100), Lookup::Ask);
        isolate.keep(&hash(1), b"new".to_vec(), 5, 2_100);
        assert_eq!(isolate.lookup(&hash(1), 2_100), Lookup::Held(b"new".to_vec()));
        // A whole answer replaces the set.
        isolate.ask();
        isolate.heard(Feed { generation: 9, whole: true, links: vec![(key(&hash(4)), true)], limited: vec![] }, 3_000);
        assert_eq!(isolate.lookup(&hash(1), 3_000), Lookup::Unknown);
        assert_eq!(isolate.held(), (0, 1));
    }

    #[test]
    fn envelopes_held_stay_within_their_bytes() {
        let links: Vec<u8> = (0..=255).collect();
        let mut isolate = synced(&links);
        let envelope = vec![7u8; MAX_ENVELOPE_BYTES / 100];
        for (n, link) in links.iter().enumerate() {
            isolate.keep(&hash(*link), envelope.clone(), 3, 1_000 + n as u64);
            assert!(isolate.envelope_bytes <= MAX_ENVELOPE_BYTES);
        }
        let held = isolate.held().0;
        assert!((90..=100).contains(&held), "{held} held");
        assert_eq!(isolate.envelope_bytes, held * envelope.len());
        // The newest is held, the first ones went.
        assert_eq!(isolate.lookup(&hash(255), 1_500), Lookup::Held(envelope.clone()));
        assert_eq!(isolate.lookup(&hash(0), 1_500), Lookup::Ask);
        // Kept again, a link counts once; a change drops its bytes.
        isolate.keep(&hash(255), envelope.clone(), 3, 1_600);
        assert_eq!(isolate.envelope_bytes, held * envelope.len());
        isolate.ask();
        isolate
            .heard(Feed { generation: 4, whole: false, links: vec![(key(&hash(255)), true)], limited: vec![] }, 1_700);
        assert_eq!(isolate.envelope_bytes, (held - 1) * envelope.len());
    }

    #[test]
    fn a_link_is_counted_here_summed_by_its_shard_and_refused_when_published() {
        let limit = WindowLimit { limit: 3, window_ms: 3_600_000 };
        let mut isolate = synced(&[1]);
        let now = 10_000;
        assert!(isolate.hit(&hash(1), now, limit).allowed());
        assert!(isolate.hit(&hash(1), now, limit).allowed());
        let batches = isolate.flush(now, |_| 7);
        assert_eq!(batches.len(), 1);
        let (shard, hits, start) = &batches[0];
        assert_eq!((*shard, hits.clone(), *start), (7, vec![(hash(1), 2)], 0));
        assert!(isolate.flush(now + 10, |_| 7).is_empty(), "at most once a second, and nothing pending");
        // Refused fetches count nothing: nothing is due, however long they go on.
        for late in [now + 500, now + 2_000, now + 60_000] {
            assert!(!isolate.hit(&hash(1), late, WindowLimit { limit: 2, ..limit }).allowed());
            assert!(!isolate.flush_due(late), "refusals left counts to send");
        }
        assert!(isolate.flush(now + 60_000, |_| 7).is_empty());
        // Other isolates fetched it too: the shard says 3 in all, so this one refuses.
        isolate.counted(hits, &vec![(3, 0)]);
        assert_eq!(isolate.hit(&hash(1), now, limit), Decision::Deny { retry_after: 3_590 });
        // Published over its limit through the feed: refused until then, even in a new window.
        let mut other = synced(&[1]);
        other.ask();
        other.heard(
            Feed { generation: 4, whole: false, links: vec![], limited: vec![(key(&hash(1)), 3_600_000)] },
            2_000,
        );
        assert_eq!(other.hit(&hash(1), 3_000, limit), Decision::Deny { retry_after: 3_597 });
        assert!(other.hit(&hash(1), 3_600_000, limit).allowed(), "the next window");
        // Alone, an isolate lets `limit` through a window.
        let mut alone = synced(&[2]);
        let allowed = (0..10).filter(|_| alone.hit(&hash(2), now, limit).allowed()).count();
        assert_eq!(allowed, 3);
        // Once its window ended, a link's count goes at the next batch.
        let later = 3_600_000 + 5_000;
        assert!(alone.hit(&hash(1), later, limit).allowed());
        assert_eq!(alone.counts.len(), 2);
        alone.flush(later, |_| 0);
        assert_eq!(alone.counts.len(), 1, "the ended window's count went");
    }

    #[test]
    fn the_set_of_100000_links_is_small_to_send_and_to_hold() {
        // Keys as token hashes give them: uniformly random.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let links: Vec<(u64, bool)> = (0..100_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x, true)
            })
            .collect();
        let feed = Feed { generation: 1, whole: true, links, limited: vec![] };
        let sent = hearth_shared::wire::encode(&feed).len();
        let mut isolate = Isolate::new(FEED_MS);
        isolate.ask();
        isolate.heard(feed, 0);
        // A hash set of u64: the key and a control byte per bucket.
        let held = isolate.live.capacity() * (std::mem::size_of::<u64>() + 1);
        eprintln!("100,000 links: {sent} bytes sent, about {held} bytes held");
        assert!(sent < 1_200_000, "{sent} bytes");
        assert!(held < 2_000_000, "{held} bytes");
    }

    #[test]
    fn the_worst_burst_is_the_limit_on_each_isolate_until_the_counts_are_summed() {
        // Two isolates serve one link, limit 3, and a shard that sums their batches (as the
        // `Links` object does). Before either hears of the other: 3 each, the manual's worst
        // case. After one batch each, neither serves it again in the window.
        let limit = WindowLimit { limit: 3, window_ms: 3_600_000 };
        let (mut a, mut b) = (synced(&[1]), synced(&[1]));
        let now = 10_000;
        let mut shard = 0u32;
        let mut served = 0;
        for isolate in [&mut a, &mut b] {
            served += (0..10).filter(|_| isolate.hit(&hash(1), now, limit).allowed()).count();
        }
        assert_eq!(served, 6, "the limit on each isolate");
        for isolate in [&mut a, &mut b] {
            for (_, hits, start) in isolate.flush(now, |_| 0) {
                shard += hits.iter().map(|(_, n)| n).sum::<u32>();
                isolate.counted(&hits, &vec![(shard, start)]);
            }
        }
        assert_eq!(shard, 6);
        assert!(!a.hit(&hash(1), now + 1_000, limit).allowed());
        assert!(!b.hit(&hash(1), now + 1_000, limit).allowed());
        // A third isolate that hears nothing of the counts but the feed's publication refuses
        // it too; one that hears nothing at all is the worst case again (3 more).
        let mut c = synced(&[1]);
        c.ask();
        c.heard(Feed { generation: 4, whole: false, links: vec![], limited: vec![(key(&hash(1)), 3_600_000)] }, now);
        assert!(!c.hit(&hash(1), now + 1_000, limit).allowed());
    }

    #[test]
    fn a_network_is_held_to_its_bucket_and_the_map_stays_bounded() {
        let misses = MissLimit { misses: WindowLimit { limit: 1, window_ms: 60_000 }, block_ms: 60_000 };
        let limit = crate::config::Limits {
            enabled: true,
            link: WindowLimit { limit: 60, window_ms: 3_600_000 },
            network: hearth_shared::ratelimit::BucketLimit { burst: 2, per_minute: 60 },
            misses,
        };
        let mut isolate = Isolate::new(FEED_MS);
        let network = Network::of("192.0.2.7".parse().unwrap());
        assert_eq!(isolate.gate(network, 0, limit), crate::serve::Gate::Open);
        assert_eq!(isolate.gate(network, 0, limit), crate::serve::Gate::Open);
        assert!(matches!(isolate.gate(network, 0, limit), crate::serve::Gate::Limited(_)));
        isolate.miss(network, 0, misses);
        isolate.miss(network, 0, misses);
        assert_eq!(isolate.gate(network, 5_000, limit), crate::serve::Gate::Decoy);
        for n in 0..(MAX_NETWORKS as u32 + 10) {
            let ip = std::net::Ipv4Addr::from(n << 8);
            isolate.gate(Network::of(ip.into()), 10_000, limit);
        }
        assert!(isolate.networks.len() <= MAX_NETWORKS);
        // A flood of networks does not set a blocked one free.
        assert_eq!(isolate.gate(network, 10_000, limit), crate::serve::Gate::Decoy);
    }
}
