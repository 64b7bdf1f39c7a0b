//! What every request handler and background task shares.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use hearth_shared::Digest;
use hearth_shared::ratelimit::{BucketLimit, Decision, FixedWindow, TokenBucket, WindowLimit};
use tokio::sync::watch;

use crate::auth::{Hasher, Lockouts};
use crate::config::Config;
use crate::publish::Signer;
use crate::store::Db;

/// The per-address budget for requests that are not authenticated (sign-in attempts, probes,
/// bad tokens): it stops abuse; signed-in owners and valid API tokens never spend it, so a
/// legitimate bulk job is never slowed.
pub(crate) const ANONYMOUS_BUDGET: BucketLimit = BucketLimit { burst: 60, per_minute: 120 };

// The clock, for the surfaces that take it with the app.
pub(crate) use crate::clock::{now, now_ms};

/// Counters for `/metrics`.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) pushes: AtomicU64,
    pub(crate) push_failures: AtomicU64,
    pub(crate) pushed_items: AtomicU64,
    pub(crate) pushed_bytes: AtomicU64,
    pub(crate) usage_reports: AtomicU64,
    pub(crate) usage_refused: AtomicU64,
    pub(crate) logins_failed: AtomicU64,
    pub(crate) subscriptions: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// The application.
pub(crate) struct App {
    pub(crate) config: Config,
    pub(crate) db: Db,
    pub(crate) signer: Signer,
    pub(crate) hasher: std::sync::Arc<Hasher>,
    pub(crate) lockouts: Lockouts,
    /// The one-time setup token while no owner exists.
    pub(crate) setup_token: Mutex<Option<String>>,
    /// Bumped whenever something was committed that may need publishing: wakes the edges'
    /// workers.
    pub(crate) published: watch::Sender<u64>,
    /// Bumped whenever a credential set may have changed: wakes node long-polls.
    pub(crate) creds: watch::Sender<u64>,
    /// Turns true when control is shutting down: long polls answer at once.
    pub(crate) stopping: watch::Sender<bool>,
    pub(crate) counters: Counters,
    /// By address (IPv6: its /64, one host's share).
    budget: Mutex<HashMap<[u8; 16], TokenBucket>>,
    links: Mutex<HashMap<Digest, FixedWindow>>,
    /// The nonces of node requests taken, until their time is out of reach: a request is
    /// taken once.
    pub(crate) node_nonces: Mutex<hearth_shared::nodeauth::Seen>,
    pub(crate) http: reqwest::Client,
    /// Where pushes and links go now; starts as configured, the owner can change it.
    addresses: std::sync::RwLock<Addresses>,
    /// The bases of links, one per edge, in the owner's order (see [`App::refresh_links`]).
    link_bases: std::sync::RwLock<Vec<LinkBase>>,
    /// The owner's User-Agent rules (also pushed to the edge).
    pub(crate) ua_rules: std::sync::RwLock<Vec<hearth_shared::agent::UaRule>>,
    /// Passkeys: the relying party (control's public URL) and the ceremonies under way.
    pub(crate) passkeys: crate::passkeys::Passkeys,
    /// The panel's own certificate from a CA, when it has a domain (`[acme] domain`).
    pub(crate) panel_acme: std::sync::OnceLock<std::sync::Arc<hearth_acme::Manager>>,
    /// A peer that is not one of `trusted_proxies` but sent forwarding headers (the first
    /// seen): warned of once, and shown in the status.
    pub(crate) untrusted_forwarding: std::sync::OnceLock<std::net::IpAddr>,
    /// The batch numbers reserved for pushes.
    pub(crate) batches: crate::batches::BatchNumbers,
}

/// Where one edge serves links.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct LinkBase {
    /// The edge's name.
    pub(crate) edge: String,
    /// The base a token is appended to.
    pub(crate) base: String,
    pub(crate) state: crate::store::edges::LinkState,
}

/// Where each edge serves links: its own link base, the `main` edge's the one in force
/// (`main_base`: `sub_url`, or derived from `edge_url`), any other's its URL and the sub prefix.
pub(crate) fn link_bases(config: &Config, main_base: &str, edges: Vec<crate::store::edges::Edge>) -> Vec<LinkBase> {
    edges
        .into_iter()
        .map(|edge| LinkBase {
            base: match (&edge.link_base, edge.name == crate::store::edges::MAIN) {
                (Some(base), _) => base.clone(),
                (None, true) => main_base.to_owned(),
                (None, false) => format!("{}/{}", edge.url.trim_end_matches('/'), config.edge.sub_prefix),
            },
            edge: edge.name,
            state: edge.state,
        })
        .collect()
}

/// The primary link base: the first edge in the owner's order whose links are offered.
pub(crate) fn primary(links: &[LinkBase]) -> Option<String> {
    links.iter().find(|link| link.state == crate::store::edges::LinkState::Active).map(|link| link.base.clone())
}

/// The edge and the link base in force.
#[derive(Clone)]
pub(crate) struct Addresses {
    /// As set: the edge, and the link base when it is not derived.
    pub(crate) set: crate::settings::Addresses,
    /// The link base in force.
    pub(crate) sub_url: String,
}

impl App {
    pub(crate) fn new(
        config: Config,
        db: Db,
        signer: Signer,
        hasher: std::sync::Arc<Hasher>,
        http: reqwest::Client,
    ) -> App {
        let addresses = Addresses { set: crate::settings::Addresses::of(&config), sub_url: config.sub_url.clone() };
        let ua_rules = db.read_blocking(crate::store::ua_rules).unwrap_or_else(|e| {
            tracing::error!(error = %e, "reading the User-Agent rules");
            Vec::new()
        });
        let app = App {
            passkeys: crate::passkeys::Passkeys::new(&config.public_url, "Hearth"),
            ua_rules: std::sync::RwLock::new(ua_rules),
            addresses: std::sync::RwLock::new(addresses),
            config,
            db,
            signer,
            hasher,
            lockouts: Lockouts::default(),
            setup_token: Mutex::new(None),
            published: watch::channel(0).0,
            link_bases: std::sync::RwLock::new(Vec::new()),
            creds: watch::channel(0).0,
            stopping: watch::channel(false).0,
            counters: Counters::default(),
            budget: Mutex::new(HashMap::new()),
            links: Mutex::new(HashMap::new()),
            node_nonces: Mutex::new(hearth_shared::nodeauth::Seen::default()),
            panel_acme: std::sync::OnceLock::new(),
            untrusted_forwarding: std::sync::OnceLock::new(),
            batches: crate::batches::BatchNumbers::default(),
            http,
        };
        if let Err(error) = app.refresh_links() {
            tracing::error!(%error, "reading the edges");
        }
        app
    }

    /// The edge in force.
    pub(crate) fn edge_url(&self) -> Option<String> {
        self.addresses.read().expect("addresses lock").set.edge_url.clone()
    }

    /// The base of the primary link: the first edge in the owner's order whose links are
    /// offered; with none, the `main` edge's (or control's own) base in force.
    pub(crate) fn sub_url(&self) -> String {
        let links = self.link_bases.read().expect("links lock");
        primary(&links).unwrap_or_else(|| self.addresses.read().expect("addresses lock").sub_url.clone())
    }

    /// Every edge's link base, in the owner's order (none: control serves links itself).
    pub(crate) fn link_bases(&self) -> Vec<LinkBase> {
        self.link_bases.read().expect("links lock").clone()
    }

    /// Reads the edges again (after a change here, or by the CLI in another process).
    pub(crate) fn refresh_links(&self) -> Result<(), crate::error::Error> {
        let list = self.db.read_blocking(crate::store::edges::list)?;
        let main_base = self.addresses.read().expect("addresses lock").sub_url.clone();
        *self.link_bases.write().expect("links lock") = link_bases(&self.config, &main_base, list);
        Ok(())
    }

    /// The addresses in force.
    pub(crate) fn addresses(&self) -> Addresses {
        self.addresses.read().expect("addresses lock").clone()
    }

    /// Puts new addresses in force (already saved), deriving the link base as the
    /// configuration does.
    pub(crate) fn set_addresses(&self, set: crate::settings::Addresses) {
        let sub_url = self.config.link_base(set.edge_url.as_deref(), set.sub_url.as_deref());
        *self.addresses.write().expect("addresses lock") = Addresses { set, sub_url };
        if let Err(error) = self.refresh_links() {
            tracing::error!(%error, "reading the edges");
        }
        self.changed();
    }

    /// Something was committed that may need publishing: wake the pusher and node polls.
    pub(crate) fn changed(&self) {
        self.published.send_modify(|generation| *generation += 1);
        self.creds.send_modify(|generation| *generation += 1);
    }

    /// Spends one unit of an address's anonymous budget (an IPv6 address's is its /64's);
    /// `Err(retry_after)` when it is spent.
    pub(crate) fn spend(&self, ip: IpAddr) -> Result<(), u64> {
        let mut budget = self.budget.lock().expect("budget lock");
        if budget.len() > 100_000 {
            let now = now_ms() * 1000;
            budget.retain(|_, bucket| bucket.tat_us > now);
        }
        match budget.entry(crate::auth::address_key(ip)).or_default().take(now_ms(), ANONYMOUS_BUDGET) {
            Decision::Allow { .. } => Ok(()),
            Decision::Deny { retry_after } => Err(retry_after),
        }
    }

    /// Counts a fetch of a link against its hourly limit.
    pub(crate) fn link_hit(&self, hash: Digest) -> Decision {
        let mut links = self.links.lock().expect("links lock");
        if links.len() > 200_000 {
            links.clear();
        }
        links.entry(hash).or_default().hit(now_ms(), WindowLimit::PER_LINK)
    }
}
