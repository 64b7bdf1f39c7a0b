//! What the agent's duties share: the node's keys, trust, state directory and live table,
//! what it serves, where it falls back to, and how every request it makes is signed.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use hearth_shared::keys::SecretKey;
use hearth_shared::nodeauth;
use hearth_shared::trust::{StreamState, Trust};
use hearth_shared::wire::CredentialSet;

use super::edges::{Base, Edges, Named};
use crate::state::{Basis, Settings, StateDir};
use crate::table::Live;

/// The agent's state.
pub(crate) struct Agent {
    pub(crate) state: StateDir,
    pub(crate) settings: Settings,
    pub(crate) key: SecretKey,
    pub(crate) trust: Mutex<Trust>,
    pub(crate) live: Arc<Live>,
    /// What the node serves: the set or delta applied last, and the full set under it.
    pub(crate) held: Mutex<Held>,
    pub(crate) control: Option<reqwest::Client>,
    pub(crate) edge: reqwest::Client,
    /// The edges to fall back to when control does not answer: those the held set lists,
    /// else the one enrolled with or named by control since (kept in [`EDGE_FILE`], which
    /// wins over `node.toml`).
    pub(crate) edges: Mutex<Edges>,
    /// The release the last pull named.
    pub(crate) offered: AtomicU64,
    /// Set when a new binary is in place: the server stops and asks to be started again.
    pub(crate) restart: tokio::sync::watch::Sender<bool>,
    /// Set while a new binary is in place and the transfers under way finish before the
    /// restart ([`crate::update`]'s drain).
    pub(crate) draining: Arc<std::sync::atomic::AtomicBool>,
    /// When this process started (a new release must run healthy for a while).
    pub(crate) started: std::time::Instant,
    /// Who was on the node at the last report (user, devices, connections), and when it was
    /// made: a report goes out when that changed, or every [`crate::usage::PRESENCE_EVERY`]
    /// while someone is on, so control's view of who is online stays fresh.
    pub(crate) reported: Mutex<Reported>,
    /// The public certificate's keeper, when the node has a domain (its state is reported
    /// to control with the node's own certificate, [`crate::identity`]).
    pub(crate) acme: Option<Arc<hearth_acme::Manager>>,
}

/// What the node serves: the version and digest of the set or delta applied last, and the
/// full set under it (deltas apply to it). Changed together, under one lock.
#[derive(Default)]
pub(crate) struct Held {
    pub(crate) state: Option<StreamState>,
    pub(crate) basis: Option<Basis>,
}

/// What the last usage report said.
#[derive(Default)]
pub(crate) struct Reported {
    /// Who was on the node (user, devices, connections).
    pub(crate) on: Vec<(u64, u32, u32)>,
    /// When it was made.
    pub(crate) at: u64,
    /// The release the node said it runs (`None`: not read yet from the state directory).
    pub(crate) release: Option<hearth_shared::wire::NodeRelease>,
}

/// The file that keeps the edge control last named (empty: none).
pub(crate) const EDGE_FILE: &str = "edge.url";

/// The edge to start with: the one control last named, else the one in `node.toml`.
pub(crate) fn initial_edge(state: &StateDir, from_settings: Option<&String>) -> Option<String> {
    match std::fs::read_to_string(state.path(EDGE_FILE)) {
        Ok(named) => Some(named.trim().to_owned()).filter(|url| !url.is_empty()),
        Err(_) => from_settings.cloned(),
    }
}

impl Agent {
    /// A request to `base` (control or an edge) for `rest` of the node API, with `body`,
    /// signed with the node's key over its method, the host it goes to, its path and body,
    /// and a fresh nonce (a verifier takes each request once).
    pub(crate) fn signed(
        &self,
        client: &reqwest::Client,
        method: reqwest::Method,
        base: &Base,
        rest: &str,
        body: Vec<u8>,
    ) -> reqwest::RequestBuilder {
        let path = format!("/{}{rest}", base.prefix);
        let url = format!("{}{path}", base.url.trim_end_matches('/'));
        let host = nodeauth::authority_of_url(&url);
        let request = nodeauth::Request { method: method.as_str(), host: &host, path_and_query: &path, body: &body };
        let auth = nodeauth::sign(&self.key, self.settings.node, &request, crate::now(), &mut rand_core::OsRng);
        let builder = client.request(method, url).header(nodeauth::HEADER, auth);
        if body.is_empty() { builder } else { builder.body(body) }
    }

    /// Control, when the node has one.
    pub(crate) fn control_base(&self) -> Option<Base> {
        let url = self.settings.control_url.clone()?;
        Some(Base { url, prefix: self.settings.api_prefix.clone() })
    }

    /// The edges to fall back to, the one that answered last first ([`Edges::fallbacks`]).
    pub(crate) fn fallbacks(&self) -> Vec<Base> {
        self.edges.lock().expect("edges lock").fallbacks()
    }

    /// Remembers which edge answered: tried first next time.
    pub(crate) fn answered(&self, base: &Base) {
        self.edges.lock().expect("edges lock").answered(&base.url);
    }

    /// Takes the edges a new set lists.
    pub(crate) fn take_edges(&self, set: &CredentialSet) {
        if self.edges.lock().expect("edges lock").take_listed(set.edges()) {
            tracing::info!(edges = set.edges().len(), "control listed the edges to fall back to");
        }
    }

    /// Takes the edge control named in its answer, if it is not the one in use: kept on disk
    /// first, so a restart keeps it too.
    pub(crate) fn learn_edge(&self, named: &str) {
        let mut edges = self.edges.lock().expect("edges lock");
        match edges.named(named) {
            Named::NotAUrl => tracing::warn!("control named an edge that is not a URL; keeping the one in use"),
            Named::Same => {}
            Named::New(named) => {
                if let Err(e) = self.state.write(EDGE_FILE, named.as_deref().unwrap_or_default().as_bytes()) {
                    tracing::warn!(error = %e, "could not keep the edge control named; using it until a restart");
                }
                tracing::info!(edge = named.as_deref().unwrap_or("none"), "control named a new edge");
                edges.learn(named);
            }
        }
    }
}
