//! The agent: pulls the node's signed credential set and applies it live.
//!
//! Pulls long-poll control; when control does not answer they go to the edges the set lists
//! (or the one edge the node learned), in turn. A new set is verified (signature, role,
//! audience = this node, stream, version, expiry), written to disk atomically, then swapped
//! into the live table. A refused envelope changes nothing and is logged as what it is
//! ([`AcceptError`]); a set that could not be stored is not applied, and the next pull tries
//! again. The key records that come with a pull are taken here too (a key rotation).
//!
//! The agent's other duties live beside it, as more methods on [`Agent`]: usage reports in
//! [`crate::usage`], self-updates after each answered pull in `crate::update::drive`, and the
//! TLS pin to control in [`crate::pin`]. Every request they make is signed here
//! ([`Agent::signed`]) and goes to control or to the edges this module picks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, bail};
use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::keys::{Role, SecretKey};
use hearth_shared::nodeauth;
use hearth_shared::trust::{self, Expect, StreamState, Trust, VerifyError};
use hearth_shared::wire::{self, CredentialSet, EdgeAddress, NodeId, stream};

use crate::capped;
use crate::state::{Basis, CREDS_FILE, DELTA_FILE, DeltaError, Settings, StateDir};
use crate::table::Live;

/// The agent's state.
pub(crate) struct Agent {
    pub(crate) state: StateDir,
    pub(crate) settings: Settings,
    pub(crate) key: SecretKey,
    pub(crate) trust: Mutex<Trust>,
    pub(crate) live: Arc<Live>,
    /// The version and digest of the set or delta applied last.
    pub(crate) held: Mutex<Option<StreamState>>,
    /// The full set under what the node serves (deltas apply to it).
    pub(crate) basis: Mutex<Option<Basis>>,
    pub(crate) control: Option<reqwest::Client>,
    pub(crate) edge: reqwest::Client,
    /// The edge to fall back to: the one enrolled with, or the one control named since
    /// (kept in `edge.url`, which wins over `node.toml`), when the set lists no edges.
    pub(crate) edge_url: Mutex<Option<String>>,
    /// The edges the held set lists, in control's order: fallen back through in turn.
    pub(crate) edges: Mutex<Vec<EdgeAddress>>,
    /// Which of the fallbacks answered last: tried first next time.
    pub(crate) edge_at: std::sync::atomic::AtomicUsize,
    /// The release the last pull named.
    pub(crate) offered: Mutex<u64>,
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

fn now() -> u64 {
    crate::now()
}

/// A pull's answer, with the key records control (or the edge) sent alongside.
enum Pulled {
    New(Vec<u8>, Option<Vec<Vec<u8>>>),
    Unchanged(Option<Vec<Vec<u8>>>),
}

/// What an answered pull came to.
enum Taken {
    /// A new set was sent: applied (or the one held, sent again).
    New,
    /// A set was sent and refused, or could not be stored: the set held stays.
    Refused,
    /// Nothing new.
    Unchanged,
}

/// Why a pulled credential set was not applied. In every case the live table, the set held
/// and the set on disk are as they were: the node goes on serving the set it holds.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AcceptError {
    /// The envelope does not verify (size, form, signer and role, audience, stream, version,
    /// expiry, body hash): not control's, not for this node, or not newer than the set held.
    #[error(transparent)]
    Verify(#[from] VerifyError),
    /// The envelope verifies but its body is not a credential set.
    #[error("bad body: not a credential set: {0}")]
    NotASet(wire::WireError),
    /// A credential set in a format newer than this node reads: the node needs an update.
    #[error(
        "a credential set in format {0}, newer than this node reads (format {max} at most): update the node",
        max = wire::CREDS_FORMAT
    )]
    NewerFormat(u64),
    /// A delta that verifies but does not apply: its body, the full set it is on (the next
    /// pull brings the full set), or the set it makes.
    #[error(transparent)]
    Delta(#[from] DeltaError),
    /// A credential set, addressed to this node and on its stream, that names another node.
    #[error("a set for another node (node {found})")]
    OtherNode {
        /// The node the set names.
        found: NodeId,
    },
    /// The set is good but could not be written to the state directory (a full or read-only
    /// disk, a missing directory): the node's problem, not the set's. It was not applied, as
    /// a set is applied only once a restart would read it back.
    #[error("could not write it to the state directory: {0:#}")]
    Store(anyhow::Error),
}

/// Where a node request goes: control, or an edge, and the API prefix it answers under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Base {
    pub(crate) url: String,
    pub(crate) prefix: String,
}

impl Base {
    /// The host (and port) of the URL alone, for logs: never its path, which holds the API
    /// prefix, nor anything before an `@`.
    pub(crate) fn host(&self) -> String {
        let authority = nodeauth::authority_of_url(&self.url);
        authority.rsplit_once('@').map_or_else(|| authority.clone(), |(_, host)| host.to_owned())
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
        let auth = nodeauth::sign(&self.key, self.settings.node, &request, now(), &mut rand_core::OsRng);
        let builder = client.request(method, url).header(nodeauth::HEADER, auth);
        if body.is_empty() { builder } else { builder.body(body) }
    }

    /// Control, when the node has one.
    pub(crate) fn control_base(&self) -> Option<Base> {
        let url = self.settings.control_url.clone()?;
        Some(Base { url, prefix: self.settings.api_prefix.clone() })
    }

    /// The edges to fall back to, the one that answered last first, then the others in
    /// control's order: the set's list, else the one edge the node learned.
    pub(crate) fn fallbacks(&self) -> Vec<Base> {
        let listed = self.edges.lock().expect("edges lock").clone();
        let mut bases: Vec<Base> = if listed.is_empty() {
            let url = self.edge_url.lock().expect("edge lock").clone();
            url.into_iter().map(|url| Base { url, prefix: self.settings.api_prefix.clone() }).collect()
        } else {
            listed.into_iter().map(|edge| Base { url: edge.url, prefix: edge.api_prefix }).collect()
        };
        let at = self.edge_at.load(std::sync::atomic::Ordering::Relaxed);
        if at < bases.len() {
            bases.rotate_left(at);
        }
        bases
    }

    /// Remembers which edge answered (by its place in [`Agent::fallbacks`]' order).
    pub(crate) fn answered(&self, base: &Base) {
        let listed = self.edges.lock().expect("edges lock");
        if let Some(index) = listed.iter().position(|edge| edge.url == base.url) {
            self.edge_at.store(index, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Takes the edges a new set lists.
    pub(crate) fn take_edges(&self, set: &CredentialSet) {
        let mut listed = self.edges.lock().expect("edges lock");
        if listed.as_slice() != set.edges() {
            tracing::info!(edges = set.edges().len(), "control listed the edges to fall back to");
            *listed = set.edges().to_vec();
            self.edge_at.store(0, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Takes the edge control named in its answer, if it is not the one in use: kept on disk
    /// first, so a restart keeps it too.
    fn learn_edge(&self, named: &str) {
        let named = named.trim();
        if !named.is_empty() && !hearth_shared::is_web_address(named) {
            tracing::warn!("control named an edge that is not a URL; keeping the one in use");
            return;
        }
        let named = Some(named.to_owned()).filter(|url| !url.is_empty());
        let mut current = self.edge_url.lock().expect("edge lock");
        if *current == named {
            return;
        }
        if let Err(e) = self.state.write(EDGE_FILE, named.as_deref().unwrap_or_default().as_bytes()) {
            tracing::warn!(error = %e, "could not keep the edge control named; using it until a restart");
        }
        tracing::info!(edge = named.as_deref().unwrap_or("none"), "control named a new edge");
        *current = named;
    }

    /// Pulls the set from control (`from_control`, long-polled `wait` seconds) or the edge.
    async fn pull_from(&self, client: &reqwest::Client, base: &Base, wait: u64, from_control: bool) -> Result<Pulled> {
        let after = self.held.lock().expect("held lock").map_or(0, |s| s.version);
        // The full set under it: control and the edge answer with a delta on it when they can.
        let on = self.basis.lock().expect("basis lock").as_ref().map_or(0, |basis| basis.version);
        let node = self.settings.node;
        let mut request = self
            .signed(
                client,
                reqwest::Method::GET,
                base,
                &format!("/nodes/{node}/creds?after={after}&base={on}&wait={wait}"),
                Vec::new(),
            )
            .header(nodeauth::NODE_VERSION_HEADER, crate::update::version_header(&self.state))
            .timeout(Duration::from_secs(wait + 15));
        if let Some(status) = crate::update::status(&self.state) {
            request = request.header(nodeauth::NODE_UPDATE_HEADER, status);
        }
        let response =
            request.send().await.map_err(|e| anyhow::anyhow!("{:#}", anyhow::Error::from(e.without_url())))?;
        let offered = response.headers().get(nodeauth::RELEASE_HEADER).and_then(|v| v.to_str().ok()?.parse().ok());
        *self.offered.lock().expect("offered lock") = offered.unwrap_or(0);
        if from_control && let Some(named) = response.headers().get(nodeauth::EDGE_HEADER).and_then(|v| v.to_str().ok())
        {
            self.learn_edge(named);
        }
        let chain = match response.headers().get(nodeauth::KEYS_HEADER).map(|v| v.to_str()) {
            None => None,
            Some(value) => {
                let chain = value.ok().and_then(hearth_shared::trust::chain_from_header);
                if chain.is_none() {
                    tracing::warn!("the key records sent with the pull are malformed; ignoring them");
                }
                chain
            }
        };
        match response.status().as_u16() {
            200 => {
                let set = capped::read(response, Kind::CredentialSet.max_len(), "a credential set").await?;
                Ok(Pulled::New(set, chain))
            }
            204 | 304 => Ok(Pulled::Unchanged(chain)),
            status => bail!("answered {status}: {}", capped::message(response).await),
        }
    }

    /// The trust after the key records that came with a pull (the held trust when there are
    /// none, or they do not verify: a rotation only ever comes signed by the root).
    fn with_chain(&self, chain: Option<&[Vec<u8>]>) -> Trust {
        let mut trust = self.trust.lock().expect("trust lock").clone();
        if let Some(chain) = chain
            && let Err(e) = trust.accept_chain(chain, now())
        {
            tracing::warn!(error = %e, "refused the key records sent with the pull");
            return self.trust.lock().expect("trust lock").clone();
        }
        trust
    }

    /// Keeps a trust that took a rotation: on disk first, so a restart verifies with it.
    fn adopt(&self, trust: Trust) {
        let mut held = self.trust.lock().expect("trust lock");
        if *held == trust {
            return;
        }
        let kept = self
            .state
            .write("trust.prev.bin", &hearth_shared::wire::encode(&*held))
            .and_then(|()| self.state.write("trust.bin", &hearth_shared::wire::encode(&trust)));
        if let Err(e) = kept {
            tracing::error!(error = %e, "could not keep the rotated keys; trying again at the next pull");
            return;
        }
        for role in [Role::Root, Role::Signing, Role::Release] {
            if trust.role(role) != held.role(role) {
                tracing::info!(role = %role, version = trust.role_version(role), "took a key rotation");
            }
        }
        *held = trust;
    }

    /// Takes the key records of an answer that brought no new set. A new signing key waits
    /// for the set it signs: the set on disk must stay verifiable by the trust on disk.
    fn take_chain(&self, chain: Option<&[Vec<u8>]>) {
        let trust = self.with_chain(chain);
        if trust.role(Role::Signing) == self.trust.lock().expect("trust lock").role(Role::Signing) {
            self.adopt(trust);
        }
    }

    /// Verifies and applies a pulled set or delta, with the key records that came with it.
    /// Returns whether it was new. When it is refused, or cannot be stored, the live table
    /// and the set held are as they were ([`AcceptError`] says which). A full set becomes the
    /// basis deltas apply to; a delta applies to that basis and must make the very set
    /// control built. What it logs is in a span that names the version once it verifies.
    #[tracing::instrument(level = "warn", skip_all, fields(version = tracing::field::Empty))]
    pub(crate) fn accept(&self, bytes: &[u8], chain: Option<&[Vec<u8>]>) -> Result<bool, AcceptError> {
        // From the answer in hand to the live table: what a change waits for at the node.
        let received = std::time::Instant::now();
        let node = self.settings.node;
        let held = *self.held.lock().expect("held lock");
        let candidate = self.with_chain(chain);
        // Versions run across both streams, so what was applied last is held against either.
        let verify = |kind, name: &str| {
            let expect = Expect { kind, audience: Audience::Node(node), stream: name };
            trust::verify(bytes, &candidate, &expect, held.as_ref(), now())
        };
        let (verified, is_delta) = match verify(Kind::CredentialSet, &stream::creds(node)) {
            Err(VerifyError::WrongType { found: Kind::CredDelta, .. }) => {
                (verify(Kind::CredDelta, &stream::creds_delta(node))?, true)
            }
            verified => (verified?, false),
        };
        let version = verified.envelope.header.version;
        tracing::Span::current().record("version", version);
        if verified.unchanged {
            self.take_chain(chain);
            return Ok(false);
        }
        // A delta is applied by the users it touches, and becomes what the basis serves; a
        // full set becomes the basis.
        let (set, basis, touched) = if is_delta {
            let basis = self.basis.lock().expect("basis lock").clone();
            let Some(basis) = basis else {
                let base = wire::CredDelta::base_of(&verified.envelope.body).map_or(0, |(_, base)| base);
                return Err(DeltaError::OtherBase { base }.into());
            };
            let (set, diff) = basis.take(&verified.envelope.body)?;
            let touched = basis.touched(&diff);
            (Arc::new(set), Basis { served: Some(Arc::new(diff)), ..basis }, Some(touched))
        } else {
            let set = CredentialSet::decode(&verified.envelope.body).map_err(|e| match e {
                wire::WireError::NewerFormat(format) => AcceptError::NewerFormat(format),
                e => AcceptError::NotASet(e),
            })?;
            if set.node != node {
                return Err(AcceptError::OtherNode { found: set.node });
            }
            let set = Arc::new(set);
            let basis = Basis { version, digest: verified.envelope.header.body_hash, set: set.clone(), served: None };
            (set, basis, None)
        };
        let verified_in = received.elapsed();
        // The trust first: a set on disk signed by a retired key is still read at start with
        // the trust it replaced (`trust.prev.bin`), never a new set without its trust.
        self.adopt(candidate);
        // Not on disk, not applied: the next pull tries again. A full set replaces the delta
        // on the set before it (one left by a crash here names an older base: not read).
        if is_delta {
            self.state.write(DELTA_FILE, bytes).map_err(AcceptError::Store)?;
        } else {
            self.state.write(CREDS_FILE, bytes).map_err(AcceptError::Store)?;
            let _ = std::fs::remove_file(self.state.path(DELTA_FILE));
        }
        let stored_in = received.elapsed() - verified_in;
        let started = std::time::Instant::now();
        let applied = match &touched {
            Some(touched) => self.live.apply_touched(&set, touched),
            None => self.live.apply(&set),
        };
        self.live.route_by(set.routing(), &self.key, &self.settings.geo_files());
        self.take_edges(&set);
        *self.held.lock().expect("held lock") = Some(verified.state());
        *self.basis.lock().expect("basis lock") = Some(basis);
        self.live.version.store(version, std::sync::atomic::Ordering::Relaxed);
        self.live.expires.store(verified.envelope.header.expires, std::sync::atomic::Ordering::Relaxed);
        // `version` stays on the line as well as in the span: the suite's tools read it there,
        // as `version=<n>` (tests/src/bin/hearth-suite.rs).
        tracing::info!(
            version,
            delta = is_delta,
            bytes = bytes.len(),
            users = applied.users,
            removed = applied.removed,
            closed = applied.closed,
            limits_changed = applied.limited,
            micros = started.elapsed().as_micros() as u64,
            verify_micros = verified_in.as_micros() as u64,
            store_micros = stored_in.as_micros() as u64,
            total_micros = received.elapsed().as_micros() as u64,
            "applied a new credential set"
        );
        Ok(true)
    }

    /// Pulls forever: long polls to control, else polls of the edge.
    pub(crate) async fn pull_loop(self: Arc<Self>) {
        let mut failures = 0u32;
        let mut alarmed = 0u64;
        loop {
            // An expired set is kept (users stay online) and alarmed, once an hour.
            let expires = self.live.expires.load(std::sync::atomic::Ordering::Relaxed);
            if expires != 0 && now() > expires && now() >= alarmed + 3600 {
                alarmed = now();
                tracing::error!(
                    expires,
                    "the credential set has expired; serving it until control or the edge sends a new one"
                );
            }
            let mut answered = None;
            // A new release proving itself pulls without waiting, to be kept (and say so) soon.
            let wait = if crate::update::pending(&self.state).is_some() { 1 } else { 25 };
            if let (Some(client), Some(base)) = (&self.control, self.control_base()) {
                answered = self.pull(client, &base, wait, true).await;
            }
            let from_edge = answered.is_none();
            // Control does not answer: the edges in turn, until one does.
            for base in if from_edge { self.fallbacks() } else { Vec::new() } {
                answered = self.pull(&self.edge, &base, 0, false).await;
                if answered.is_some() {
                    break;
                }
            }
            match answered {
                Some(Taken::New) => {
                    failures = 0;
                    continue;
                }
                Some(Taken::Refused) => {
                    failures = 0;
                    tokio::time::sleep(Duration::from_secs(self.settings.edge_poll_secs)).await;
                    continue;
                }
                Some(Taken::Unchanged) => failures = 0,
                None => {
                    failures = failures.saturating_add(1);
                    if failures == 3 {
                        tracing::warn!("neither control nor the edge answers; serving the last good set");
                    }
                }
            }
            if from_edge {
                tokio::time::sleep(Duration::from_secs(self.settings.edge_poll_secs.max(1))).await;
            }
        }
    }

    /// One pull from control (`from_control`, long-polled `wait` seconds) or an edge, and what
    /// its answer brought: a release to take, a set to apply (or refuse), key records. `None`
    /// when it did not answer (or its answer was refused whole). What it logs is in a span
    /// naming where it asked, by host alone: the URL's path holds the secret API prefix.
    #[tracing::instrument(
        name = "pull",
        level = "warn",
        skip_all,
        fields(from = if from_control { "control" } else { "edge" }, host = %base.host())
    )]
    async fn pull(&self, client: &reqwest::Client, base: &Base, wait: u64, from_control: bool) -> Option<Taken> {
        let pulled = match self.pull_from(client, base, wait, from_control).await {
            Ok(pulled) => pulled,
            Err(e) => {
                match (from_control, capped::refused_for_size(&e)) {
                    (true, true) => {
                        tracing::warn!(error = %e, "refused control's answer to a pull; serving the set held");
                    }
                    (true, false) => tracing::debug!(error = %e, "control did not answer the pull"),
                    (false, true) => {
                        tracing::warn!(error = %e, "refused the edge's answer to a pull; serving the set held");
                    }
                    (false, false) => tracing::debug!(error = %e, "the edge did not answer the pull"),
                }
                return None;
            }
        };
        if !from_control {
            self.answered(base);
        }
        self.after_pull(client, base).await;
        Some(match pulled {
            Pulled::New(bytes, chain) => match self.accept(&bytes, chain.as_deref()) {
                Ok(_) => Taken::New,
                Err(e) => {
                    match &e {
                        AcceptError::Store(_) => tracing::error!(
                            error = %e,
                            "could not store the new credential set; the next pull tries again"
                        ),
                        AcceptError::NewerFormat(_) => tracing::error!(
                            error = %e,
                            "refused a credential set this node cannot read yet; serving the set held"
                        ),
                        AcceptError::Verify(_)
                        | AcceptError::NotASet(_)
                        | AcceptError::Delta(_)
                        | AcceptError::OtherNode { .. } => {
                            tracing::warn!(error = %e, "refused a credential set")
                        }
                    }
                    Taken::Refused
                }
            },
            Pulled::Unchanged(chain) => {
                self.take_chain(chain.as_deref());
                Taken::Unchanged
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::Ordering;

    use hearth_shared::envelope::Draft;
    use hearth_shared::sha256;
    use hearth_shared::trust::{KeyRecord, RoleKeys};
    use hearth_shared::wire::CredEntry;

    use super::*;

    /// The node the agent runs as.
    const NODE: NodeId = 3;

    /// Control's keys, as a node that enrolled trusts them: the root, and the signing key it
    /// certified.
    struct Control {
        root: SecretKey,
        signing: SecretKey,
    }

    impl Control {
        fn new() -> Control {
            Control {
                root: SecretKey::from_seed(Role::Root, &[1; 32]),
                signing: SecretKey::from_seed(Role::Signing, &[2; 32]),
            }
        }

        /// What the node trusts after enrollment and the signing key's record.
        fn trust(&self) -> Trust {
            let body = KeyRecord { role: Role::Signing, keys: RoleKeys::single(self.signing.public()) };
            let draft = self.draft(Kind::KeyRecord, stream::keys(Role::Signing), 1, Audience::Any);
            let record = draft.sign(wire::encode(&body), &[&self.root]).encode();
            let mut trust = Trust::new(RoleKeys::single(self.root.public()));
            trust.accept_key_record(&record, now()).expect("the signing key's record");
            trust
        }

        fn draft(&self, kind: Kind, stream: String, version: u64, audience: Audience) -> Draft {
            Draft {
                kind,
                stream,
                version,
                epoch: 1,
                issued: now() - 10,
                expires: now() + 3600,
                audience,
                prev: [0; 32],
            }
        }

        /// `body` signed by `key` as version `version` of this node's credential set.
        fn sign(&self, key: &SecretKey, version: u64, body: Vec<u8>) -> Vec<u8> {
            self.draft(Kind::CredentialSet, stream::creds(NODE), version, Audience::Node(NODE))
                .sign(body, &[key])
                .encode()
        }

        /// Version `version` of the set for `node`, with `users` (id, password).
        fn set(&self, node: NodeId, version: u64, users: &[(u64, &str)]) -> Vec<u8> {
            let entries = users.iter().map(|(user, password)| CredEntry::new(*user, sha256(password.as_bytes())));
            let set = CredentialSet::new(node, entries.collect()).expect("a set");
            self.sign(&self.signing, version, set.encode())
        }
    }

    /// The users (id, password) as a set for [`NODE`].
    fn users(users: &[(u64, &str)]) -> CredentialSet {
        let entries = users.iter().map(|(user, password)| CredEntry::new(*user, sha256(password.as_bytes())));
        CredentialSet::new(NODE, entries.collect()).expect("a set")
    }

    impl Control {
        /// Version `version` of the delta from `base` (signed at `on`) to `new`.
        fn delta(&self, version: u64, base: &CredentialSet, on: u64, new: &CredentialSet) -> Vec<u8> {
            let (from, to) = (sha256(&base.encode()), sha256(&new.encode()));
            let delta = wire::CredDelta::between(base, on, from, new, to).expect("a delta");
            self.draft(Kind::CredDelta, stream::creds_delta(NODE), version, Audience::Node(NODE))
                .sign(delta.encode(), &[&self.signing])
                .encode()
        }
    }

    /// A delta applies to the full set the node holds and makes the set control built; one
    /// on another full set, one that makes anything else, or one older than what the node
    /// applied is refused and changes nothing; a restart serves the full set with its delta,
    /// and a full set replaces both.
    #[test]
    fn deltas_apply_to_the_full_set_held_and_survive_a_restart() {
        let control = Control::new();
        let dir = tempfile::tempdir().unwrap();
        let agent = agent(dir.path(), control.trust());
        let alice = users(&[(1, "alice")]);
        let bob = users(&[(2, "bob")]);
        let both = users(&[(1, "alice"), (2, "bob")]);
        // Before any full set, a delta has nothing to apply to.
        let early = control.delta(2, &alice, 1, &both);
        assert!(matches!(agent.accept(&early, None), Err(AcceptError::Delta(DeltaError::OtherBase { base: 1 }))));
        assert!(agent.accept(&control.sign(&control.signing, 1, alice.encode()), None).unwrap());
        assert_eq!(serving(&agent), (1, Some(1), Some(1), None));

        // Bob joins, then alice leaves: each delta runs from the full set at 1.
        assert!(agent.accept(&early, None).unwrap());
        assert_eq!(serving(&agent), (2, Some(2), Some(1), Some(2)));
        let later = control.delta(3, &alice, 1, &bob);
        assert!(agent.accept(&later, None).unwrap());
        assert_eq!(serving(&agent), (3, Some(3), None, Some(2)));
        assert!(!agent.accept(&later, None).unwrap(), "the same delta again is no news");

        // Refused, changing nothing: an older delta, one on another full set, one that does
        // not make the set it names, one for another node's stream.
        assert!(matches!(agent.accept(&early, None), Err(AcceptError::Verify(VerifyError::Stale { .. }))));
        let elsewhere = control.delta(4, &alice, 7, &both);
        assert!(matches!(agent.accept(&elsewhere, None), Err(AcceptError::Delta(DeltaError::OtherBase { base: 7 }))));
        let (from, to) = (sha256(&alice.encode()), sha256(&both.encode()));
        let mut lying = wire::CredDelta::between(&alice, 1, from, &alice, to).unwrap();
        lying.diff.added.push(CredEntry::new(3, sha256(b"mallory")));
        let lying = control
            .draft(Kind::CredDelta, stream::creds_delta(NODE), 4, Audience::Node(NODE))
            .sign(lying.encode(), &[&control.signing])
            .encode();
        assert!(matches!(agent.accept(&lying, None), Err(AcceptError::Delta(DeltaError::Apply(_)))));
        assert_eq!(agent.live.authenticate(b"mallory"), None);
        assert_eq!(serving(&agent), (3, Some(3), None, Some(2)));

        // A restart serves the full set with the delta on it, and holds the delta's version.
        let last = agent.state.last_good(&control.trust(), NODE, now()).unwrap().unwrap();
        assert_eq!((last.held.version, last.basis.version, last.set.as_ref()), (3, 1, &bob));
        // A delta on disk that does not verify is left out: the full set is served.
        std::fs::write(dir.path().join(DELTA_FILE), &lying[..lying.len() - 1]).unwrap();
        let last = agent.state.last_good(&control.trust(), NODE, now()).unwrap().unwrap();
        assert_eq!((last.held.version, last.set.as_ref()), (1, &alice));
        std::fs::write(dir.path().join(DELTA_FILE), &later).unwrap();

        // A full set replaces the basis and the delta on disk.
        assert!(agent.accept(&control.sign(&control.signing, 5, both.encode()), None).unwrap());
        assert_eq!(serving(&agent), (5, Some(5), Some(1), Some(2)));
        assert!(!dir.path().join(DELTA_FILE).exists());
        assert!(matches!(agent.accept(&later, None), Err(AcceptError::Verify(VerifyError::Stale { .. }))));

        // Deltas on it are applied by the users they touch, against what the one before
        // made: bob leaves, then comes back as alice leaves, then the full set again.
        assert!(agent.accept(&control.delta(6, &both, 5, &alice), None).unwrap());
        assert_eq!(serving(&agent), (6, Some(6), Some(1), None));
        assert!(agent.accept(&control.delta(7, &both, 5, &bob), None).unwrap());
        assert_eq!(serving(&agent), (7, Some(7), None, Some(2)));
        assert!(agent.accept(&control.delta(8, &both, 5, &both), None).unwrap());
        assert_eq!(serving(&agent), (8, Some(8), Some(1), Some(2)));
    }

    /// An agent for node [`NODE`] with its state in `dir`, trusting `trust`, holding no set; it
    /// talks to nobody (these tests hand it sets directly).
    fn agent(dir: &Path, trust: Trust) -> Agent {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Agent {
            state: StateDir::new(dir),
            settings: toml::from_str(&format!("node = {NODE}")).expect("settings"),
            key: SecretKey::from_seed(Role::Node, &[3; 32]),
            trust: Mutex::new(trust),
            live: Arc::new(Live::default()),
            held: Mutex::new(None),
            basis: Mutex::new(None),
            control: None,
            edge: reqwest::Client::builder().build().expect("an HTTP client"),
            edge_url: Mutex::new(None),
            edges: Mutex::new(Vec::new()),
            edge_at: std::sync::atomic::AtomicUsize::new(0),
            offered: Mutex::new(0),
            restart: tokio::sync::watch::channel(false).0,
            draining: Default::default(),
            started: std::time::Instant::now(),
            reported: Mutex::default(),
            acme: None,
        }
    }

    /// The version served and held, and who of alice (1) and bob (2) may connect.
    fn serving(agent: &Agent) -> (u64, Option<u64>, Option<u64>, Option<u64>) {
        let held = agent.held.lock().unwrap().map(|held| held.version);
        let live = &agent.live;
        (live.version.load(Ordering::Relaxed), held, live.authenticate(b"alice"), live.authenticate(b"bob"))
    }

    /// A set that cannot be written to disk is the node's failure to store it, not a bad
    /// body: nothing of it is applied, and the same set is taken once the disk is back.
    #[test]
    fn a_set_that_cannot_be_stored_is_a_store_failure_and_is_not_applied() {
        let control = Control::new();
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let agent = agent(&state, control.trust());
        assert!(agent.accept(&control.set(NODE, 1, &[(1, "alice")]), None).unwrap());
        assert_eq!(serving(&agent), (1, Some(1), Some(1), None));

        // A file where the state directory was: no write succeeds, even as root.
        std::fs::remove_dir_all(&state).unwrap();
        std::fs::write(&state, b"not a directory").unwrap();
        let v2 = control.set(NODE, 2, &[(2, "bob")]);
        match agent.accept(&v2, None) {
            Err(AcceptError::Store(e)) => assert!(format!("{e:#}").contains("creds"), "{e:#}"),
            other => panic!("a failed write must be a store failure, not {other:?}"),
        }
        assert_eq!(serving(&agent), (1, Some(1), Some(1), None), "the live table was changed");

        // The disk is back: the next pull takes the set.
        std::fs::remove_file(&state).unwrap();
        std::fs::create_dir(&state).unwrap();
        assert!(agent.accept(&v2, None).unwrap());
        assert_eq!(serving(&agent), (2, Some(2), None, Some(2)));
        assert_eq!(std::fs::read(state.join("creds.envelope")).unwrap(), v2);
    }

    /// Each refusal says what was wrong with what was sent, and changes nothing.
    #[test]
    fn refused_sets_say_why_and_change_nothing() {
        let control = Control::new();
        let dir = tempfile::tempdir().unwrap();
        let agent = agent(dir.path(), control.trust());
        let stranger = SecretKey::from_seed(Role::Signing, &[9; 32]);
        let unknown = control.sign(&stranger, 1, CredentialSet::new(NODE, Vec::new()).unwrap().encode());
        assert!(matches!(agent.accept(&unknown, None), Err(AcceptError::Verify(VerifyError::UnknownKey))));
        assert!(matches!(
            agent.accept(&control.set(NODE + 1, 1, &[(1, "alice")]), None),
            Err(AcceptError::OtherNode { found }) if found == NODE + 1
        ));
        let garbage = control.sign(&control.signing, 1, b"not a set".to_vec());
        assert!(matches!(agent.accept(&garbage, None), Err(AcceptError::NotASet(_))));
        assert_eq!(serving(&agent), (0, None, None, None));
        assert!(!dir.path().join("creds.envelope").exists());
    }

    /// Logs written through the node's own log setup ([`hearth_io::logs`]) into memory.
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Logs {
        /// Text (or JSON) logs of the node's own events, at `debug`.
        fn dispatch(&self, json: bool) -> tracing::Dispatch {
            // With a single dispatcher alive in the process, tracing decides whether a
            // callsite is enabled with the dispatcher of the thread that reaches it first (in
            // another test, none): a second one, alive for good, makes it ask every live one.
            static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
            SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
            let writer = self.clone();
            hearth_io::logs::logs(json, tracing_subscriber::EnvFilter::new("hearth_node=debug"), false, move || {
                writer.clone()
            })
        }

        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }

        /// The first line logged with `message`.
        fn line(&self, message: &str) -> String {
            let text = self.text();
            text.lines()
                .find(|line| line.contains(message))
                .unwrap_or_else(|| panic!("no {message:?} in:\n{text}"))
                .to_owned()
        }
    }

    /// What taking a set logs is in a span that names the set's version, in text and in JSON;
    /// the line still says `version=<n>` itself, which the test suite reads.
    #[test]
    fn what_accept_logs_is_in_a_span_naming_the_version() {
        let control = Control::new();
        for json in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let agent = agent(dir.path(), control.trust());
            let logs = Logs::default();
            let set = control.set(NODE, 7, &[(1, "alice")]);
            tracing::dispatcher::with_default(&logs.dispatch(json), || assert!(agent.accept(&set, None).unwrap()));
            let line = logs.line("applied a new credential set");
            if json {
                let line: serde_json::Value = serde_json::from_str(&line).unwrap();
                let span = serde_json::json!({ "name": "accept", "version": 7 });
                assert_eq!((&line["span"], &line["spans"]), (&span, &serde_json::json!([span])), "{line}");
                assert_eq!(line["fields"]["version"], 7, "{line}");
            } else {
                assert!(line.contains("accept{version=7}:"), "{line}");
                assert!(line.split_whitespace().any(|word| word == "version=7"), "{line}");
            }
        }
    }

    /// A pull logs where it asked by host alone: never the API prefix in its URL's path.
    #[tokio::test]
    async fn a_pull_names_where_it_asked_and_never_the_api_prefix() {
        let control = Control::new();
        let dir = tempfile::tempdir().unwrap();
        let agent = agent(dir.path(), control.trust());
        // A port nothing listens at: the edge does not answer.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let base = Base { url: format!("http://127.0.0.1:{port}"), prefix: "the-secret-api-prefix".into() };
        let logs = Logs::default();
        let guard = tracing::dispatcher::set_default(&logs.dispatch(false));
        assert!(agent.pull(&agent.edge, &base, 0, false).await.is_none());
        drop(guard);
        let line = logs.line("the edge did not answer the pull");
        assert!(line.contains(&format!("pull{{from=\"edge\" host=127.0.0.1:{port}}}:")), "{line}");
        assert!(!logs.text().contains("the-secret-api-prefix"), "{}", logs.text());
        let named = Base { url: "https://someone:a-password@Edge.example:443/x".into(), prefix: "p".into() };
        assert_eq!(named.host(), "edge.example");
    }
}
