//! The agent: pulls the node's signed credential set and applies it live, and reports usage.
//!
//! Pulls long-poll control; when control does not answer they go to the edge. A new set is
//! verified (signature, role, audience = this node, stream, version, expiry), written to disk
//! atomically, then swapped into the live table. A refused envelope changes nothing and is
//! logged as what it is.
//!
//! Usage is taken from the live counters every `report_secs`, signed as the next report in
//! sequence and written to the on-disk queue before it is sent, so a crash or an outage loses
//! nothing already taken; reports go oldest first to control (which answers with a signed
//! acknowledgement; acknowledged reports are deleted) or, when control does not answer, to
//! the edge, which queues them for control. Control applies each sequence number once.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::keys::{Role, SecretKey};
use hearth_shared::trust::{self, Expect, StreamState, Trust, VerifyError};
use hearth_shared::wire::{self, CredentialSet, EdgeAddress, UsageAck, UsageReport, stream};
use hearth_shared::{Digest, nodeauth};

use crate::capped;
use crate::state::{Settings, StateDir};
use crate::table::Live;

/// The agent's state.
pub(crate) struct Agent {
    pub(crate) state: StateDir,
    pub(crate) settings: Settings,
    pub(crate) key: SecretKey,
    pub(crate) trust: Mutex<Trust>,
    pub(crate) live: Arc<Live>,
    /// The version and digest of the set held.
    pub(crate) held: Mutex<Option<StreamState>>,
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
    /// When this process started (a new release must run healthy for a while).
    pub(crate) started: std::time::Instant,
    /// Who was on the node at the last report (user, devices, connections), and when it was
    /// made: a report goes out when that changed, or every [`PRESENCE_EVERY`] while someone
    /// is on, so control's view of who is online stays fresh.
    pub(crate) reported: Mutex<Reported>,
}

/// Who was on the node at the last report (user, devices, connections), and when.
pub(crate) type Reported = (Vec<(u64, u32, u32)>, u64);

/// The longest a node goes without reporting who is on it while anyone is.
pub(crate) const PRESENCE_EVERY: u64 = 300;

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

/// A TLS verifier that accepts exactly one certificate (control's self-signed one, by the
/// SHA-256 pin the enrollment command carried), and checks the handshake signature with it.
#[derive(Debug)]
struct Pinned {
    pin: Digest,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if hearth_shared::ct_eq(&hearth_shared::sha256(end_entity), &self.pin) {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General("control's certificate does not match its pin".into()))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The HTTP client for control: pinned to its certificate when a pin is set.
pub(crate) fn control_client(pin: Option<&str>) -> Result<reqwest::Client> {
    let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
    let builder = match pin {
        Some(pin) => {
            let pin: Digest = hex::decode(pin)
                .ok()
                .and_then(|p| p.try_into().ok())
                .context("control_pin must be 64 hex characters")?;
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .context("TLS versions")?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Pinned { pin, provider }))
                .with_no_client_auth();
            builder.tls_backend_preconfigured(config)
        }
        None => builder,
    };
    builder.build().context("making the HTTP client")
}

/// Whether a request failed because its answer was longer than it can be: the peer's doing,
/// said at warn (a peer out of reach is usual, behind NAT, and said at debug).
fn refused_for_size(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref(), Some(capped::ReadError::TooLarge { .. }))
}

/// A pull's answer, with the key records control (or the edge) sent alongside.
enum Pulled {
    New(Vec<u8>, Option<Vec<Vec<u8>>>),
    Unchanged(Option<Vec<Vec<u8>>>),
}

/// Where a node request goes: control, or an edge, and the API prefix it answers under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Base {
    pub(crate) url: String,
    pub(crate) prefix: String,
}

impl Agent {
    /// A request to `base` (control or an edge) for `rest` of the node API, with `body`,
    /// signed with the node's key over its method, the host it goes to, its path and body,
    /// and a fresh nonce (a verifier takes each request once).
    fn signed(
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
    fn control_base(&self) -> Option<Base> {
        let url = self.settings.control_url.clone()?;
        Some(Base { url, prefix: self.settings.api_prefix.clone() })
    }

    /// The edges to fall back to, the one that answered last first, then the others in
    /// control's order: the set's list, else the one edge the node learned.
    fn fallbacks(&self) -> Vec<Base> {
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
    fn answered(&self, base: &Base) {
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
        let node = self.settings.node;
        let mut request = self
            .signed(
                client,
                reqwest::Method::GET,
                base,
                &format!("/nodes/{node}/creds?after={after}&wait={wait}"),
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

    /// Verifies and applies a pulled set, with the key records that came with it. Returns
    /// whether it was new.
    pub(crate) fn accept(&self, bytes: &[u8], chain: Option<&[Vec<u8>]>) -> Result<bool, VerifyError> {
        // From the answer in hand to the live table: what a change waits for at the node.
        let received = std::time::Instant::now();
        let node = self.settings.node;
        let name = stream::creds(node);
        let expect = Expect { kind: Kind::CredentialSet, audience: Audience::Node(node), stream: &name };
        let held = *self.held.lock().expect("held lock");
        let candidate = self.with_chain(chain);
        let verified = trust::verify(bytes, &candidate, &expect, held.as_ref(), now())?;
        if verified.unchanged {
            self.take_chain(chain);
            return Ok(false);
        }
        let set = CredentialSet::decode(&verified.envelope.body).map_err(|e| match e {
            wire::WireError::NewerFormat(_) => {
                VerifyError::Body("a credential set in a newer format than this node reads: update the node")
            }
            _ => VerifyError::Body("credential set"),
        })?;
        if set.node != node {
            return Err(VerifyError::Body("a set for another node"));
        }
        let verified_in = received.elapsed();
        // The trust first: a set on disk signed by a retired key is still read at start with
        // the trust it replaced (`trust.prev.bin`), never a new set without its trust.
        self.adopt(candidate);
        if let Err(e) = self.state.write("creds.envelope", bytes) {
            // Not on disk, not applied: the next pull tries again.
            tracing::error!(error = %e, "could not store the new credential set");
            return Err(VerifyError::Body("could not be stored"));
        }
        let stored_in = received.elapsed() - verified_in;
        let started = std::time::Instant::now();
        let applied = self.live.apply(&set);
        self.take_edges(&set);
        *self.held.lock().expect("held lock") = Some(verified.state());
        self.live.version.store(verified.envelope.header.version, std::sync::atomic::Ordering::Relaxed);
        self.live.expires.store(verified.envelope.header.expires, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(
            version = verified.envelope.header.version,
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

    /// After an answered pull: keeps a new release that ran healthy long enough, or takes the
    /// release the answer named, from where the answer came.
    async fn after_pull(&self, client: &reqwest::Client, base: &Base) {
        if let Some(pending) = crate::update::pending(&self.state) {
            // The process that swapped the new binary in is on its way out: only the new
            // binary, started again by the supervisor, may vouch for itself.
            if *self.restart.borrow() {
                return;
            }
            if self.started.elapsed() >= Duration::from_secs(self.settings.update_health_secs)
                && let Err(e) = crate::update::confirm(&self.state, &pending)
            {
                tracing::error!(error = %e, "could not keep the new release");
            }
            return;
        }
        let release = *self.offered.lock().expect("offered lock");
        if crate::update::wants(&self.state, release) {
            match self.update(client, base, release).await {
                crate::update::Outcome::Installed => {
                    tracing::info!(release, "the new release is in place; restarting into it");
                    let _ = self.restart.send(true);
                }
                crate::update::Outcome::Refused(reason) => crate::update::refused(&self.state, release, &reason),
                crate::update::Outcome::Retry(why) => tracing::warn!(release, %why, "could not fetch the release yet"),
            }
        }
    }

    /// Fetches, checks and installs `release`.
    async fn update(&self, client: &reqwest::Client, base: &Base, release: u64) -> crate::update::Outcome {
        use crate::update::Outcome;
        let node = self.settings.node;
        // The request's failure (retried at a later pull), or what reading its body gave.
        let fetch = |rest: String, timeout: u64, max: usize, what: &'static str| async move {
            let response = self
                .signed(client, reqwest::Method::GET, base, &rest, Vec::new())
                .timeout(Duration::from_secs(timeout))
                .send()
                .await
                .map_err(|e| format!("{:#}", anyhow::Error::from(e.without_url())))?;
            if !response.status().is_success() {
                return Err(format!("answered {}", response.status()));
            }
            Ok(capped::read(response, max, what).await)
        };
        let manifest =
            match fetch(format!("/nodes/{node}/release"), 60, Kind::Release.max_len(), "a release manifest").await {
                Ok(Ok(bytes)) => bytes,
                Ok(Err(e)) => return Outcome::Retry(e.to_string()),
                Err(why) => return Outcome::Retry(why),
            };
        let (running, _) = crate::update::running(&self.state);
        let trust = self.trust.lock().expect("trust lock").clone();
        let (manifest, file) = match crate::update::check_manifest(&manifest, &trust, release, &running, now()) {
            Ok(checked) => checked,
            Err(reason) => return Outcome::Refused(reason),
        };
        // The file is as long as the signed manifest says, or it is not the release's.
        let len = usize::try_from(file.len).unwrap_or(usize::MAX);
        let what = "the release file its manifest names";
        let bytes = match fetch(format!("/nodes/{node}/release/{}", file.name()), 900, len, what).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e @ capped::ReadError::TooLarge { .. })) => return Outcome::Refused(e.to_string()),
            Ok(Err(e)) => return Outcome::Retry(e.to_string()),
            Err(why) => return Outcome::Retry(why),
        };
        if !file.matches(&bytes) {
            return Outcome::Refused(hearth_shared::release::Refusal::Tampered.to_string());
        }
        let installed = crate::update::executable().and_then(|exe| crate::update::install(&exe, &bytes));
        if let Err(e) = installed {
            return Outcome::Refused(format!("could not install the binary: {e:#}"));
        }
        let pending = crate::update::Pending { release, version: manifest.version, built: manifest.built };
        match crate::update::mark_pending(&self.state, &pending) {
            Ok(()) => Outcome::Installed,
            Err(e) => Outcome::Refused(format!("could not record the update: {e:#}")),
        }
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
            let mut pulled = None;
            let mut source = None;
            // A new release proving itself pulls without waiting, to be kept (and say so) soon.
            let wait = if crate::update::pending(&self.state).is_some() { 1 } else { 25 };
            if let (Some(client), Some(base)) = (&self.control, self.control_base()) {
                match self.pull_from(client, &base, wait, true).await {
                    Ok(result) => (pulled, source) = (Some(result), Some((client, base))),
                    Err(e) if refused_for_size(&e) => {
                        tracing::warn!(error = %e, "refused control's answer to a pull; serving the set held");
                    }
                    Err(e) => tracing::debug!(error = %e, "control did not answer the pull"),
                }
            }
            let from_edge = pulled.is_none();
            // Control does not answer: the edges in turn, until one does.
            for base in if from_edge { self.fallbacks() } else { Vec::new() } {
                match self.pull_from(&self.edge, &base, 0, false).await {
                    Ok(result) => {
                        self.answered(&base);
                        (pulled, source) = (Some(result), Some((&self.edge, base)));
                        break;
                    }
                    Err(e) if refused_for_size(&e) => {
                        tracing::warn!(error = %e, "refused the edge's answer to a pull; serving the set held");
                    }
                    Err(e) => tracing::debug!(error = %e, "the edge did not answer the pull"),
                }
            }
            if let Some((client, base)) = &source {
                self.after_pull(client, base).await;
            }
            match pulled {
                Some(Pulled::New(bytes, chain)) => {
                    failures = 0;
                    if let Err(e) = self.accept(&bytes, chain.as_deref()) {
                        tracing::warn!(error = %e, "refused a credential set");
                        tokio::time::sleep(Duration::from_secs(self.settings.edge_poll_secs)).await;
                    }
                    continue;
                }
                Some(Pulled::Unchanged(chain)) => {
                    failures = 0;
                    self.take_chain(chain.as_deref());
                }
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

    fn queue_dir(&self) -> PathBuf {
        self.state.path("usage")
    }

    /// The queued reports' sequence numbers, oldest first.
    fn queued(&self) -> Result<Vec<u64>> {
        let mut seqs: Vec<u64> = match std::fs::read_dir(self.queue_dir()) {
            Ok(entries) => {
                entries.filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".report")?.parse().ok()).collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).context("reading the usage queue"),
        };
        seqs.sort_unstable();
        Ok(seqs)
    }

    fn acked(&self) -> u64 {
        std::fs::read_to_string(self.state.path("usage.acked")).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
    }

    /// Takes the counters and who is on the node into a signed report on disk (nothing is
    /// taken if it cannot be written): when anyone moved traffic, something was refused, who
    /// is on changed, or someone is on and the last report is [`PRESENCE_EVERY`] old.
    fn snapshot(&self) -> Result<()> {
        let usage = self.live.take_usage();
        let presence = self.live.take_presence();
        let now = now();
        let on: Vec<(u64, u32, u32)> =
            presence.iter().filter(|p| p.devices > 0).map(|p| (p.user, p.devices, p.connections)).collect();
        let mut reported = self.reported.lock().expect("reported lock");
        let refused = presence.iter().any(|p| p.refused_devices + p.refused_torrent + p.refused_smtp > 0);
        let stale = !on.is_empty() && now >= reported.1 + PRESENCE_EVERY;
        if usage.is_empty() && !refused && on == reported.0 && !stale {
            return Ok(());
        }
        let seq = self.queued()?.last().copied().unwrap_or_else(|| self.acked()) + 1;
        let report = UsageReport {
            node: self.settings.node,
            seq,
            period_start: now.saturating_sub(self.settings.report_secs),
            period_end: now,
            users: usage.clone(),
            presence: presence.clone(),
        };
        let envelope = report.sign(&self.key, now).encode();
        let stored = std::fs::create_dir_all(self.queue_dir())
            .context("making the usage queue")
            .and_then(|()| crate::state::write_atomic(&self.queue_dir().join(format!("{seq}.report")), &envelope));
        if let Err(e) = stored {
            self.live.give_back(&usage, &presence);
            return Err(e);
        }
        *reported = (on, now);
        Ok(())
    }

    /// Sends queued reports to control (acknowledged ones are deleted), or to an edge. A
    /// report left at one edge and sent again to another is counted once.
    async fn send(&self, sent_to_edge: &mut Option<(String, u64)>) -> Result<()> {
        // Once control fails in a pass, the rest of the pass goes to the edge: a control that
        // drops packets (behind NAT) costs one connect timeout a pass, not one a report.
        let mut control_up = true;
        // Reports acknowledged before a crash cut their deletion short go first.
        let acked = self.acked();
        let (done, queue): (Vec<u64>, Vec<u64>) = self.queued()?.into_iter().partition(|seq| *seq <= acked);
        for seq in done {
            let _ = std::fs::remove_file(self.queue_dir().join(format!("{seq}.report")));
        }
        for &seq in &queue {
            let path = self.queue_dir().join(format!("{seq}.report"));
            let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            let node = self.settings.node;
            if let (Some(client), Some(base), true) = (&self.control, self.control_base(), control_up) {
                let answer = self
                    .signed(client, reqwest::Method::POST, &base, &format!("/nodes/{node}/usage"), bytes.clone())
                    .timeout(Duration::from_secs(30))
                    .send()
                    .await;
                if let Ok(answer) = answer {
                    if answer.status().is_success() {
                        let ack = capped::read(answer, Kind::UsageAck.max_len(), "an acknowledgement").await?;
                        let acked = self.verify_ack(&ack)?;
                        self.forget(acked, &queue)?;
                        continue;
                    }
                    bail!("control refused usage report {seq}: {}", answer.status());
                }
                control_up = false;
            }
            // Control does not answer: leave it at an edge for control to collect (from every
            // edge). It stays queued here until control acknowledges it; an edge that stops
            // answering gets none of the rest, the next one all of them.
            let mut left = false;
            let mut failure = None;
            for base in self.fallbacks() {
                if sent_to_edge.as_ref().is_some_and(|(url, sent)| *url == base.url && seq <= *sent) {
                    left = true;
                    break;
                }
                let answer = self
                    .signed(&self.edge, reqwest::Method::POST, &base, &format!("/nodes/{node}/usage"), bytes.clone())
                    .timeout(Duration::from_secs(30))
                    .send()
                    .await;
                match answer {
                    Ok(answer) if answer.status().is_success() => {
                        self.answered(&base);
                        *sent_to_edge = Some((base.url, seq));
                        left = true;
                        break;
                    }
                    Ok(answer) => failure = Some(format!("an edge refused usage report {seq}: {}", answer.status())),
                    Err(e) => {
                        failure = Some(format!("an edge did not answer: {:#}", anyhow::Error::from(e.without_url())));
                    }
                }
            }
            if !left {
                bail!("{}", failure.unwrap_or_else(|| "no edge to leave usage reports at".to_owned()));
            }
        }
        Ok(())
    }

    fn verify_ack(&self, bytes: &[u8]) -> Result<u64> {
        let node = self.settings.node;
        let name = stream::usage_ack(node);
        let expect = Expect { kind: Kind::UsageAck, audience: Audience::Node(node), stream: &name };
        let verified = trust::verify(bytes, &self.trust.lock().expect("trust lock"), &expect, None, now())
            .context("control's acknowledgement does not verify")?;
        let ack: UsageAck = wire::decode(&verified.envelope.body, "usage ack").context("the acknowledgement's body")?;
        if ack.node != node {
            bail!("an acknowledgement for another node");
        }
        Ok(ack.seq)
    }

    /// Deletes the reports of `queue` (the queue, oldest first) up to `acked`. An
    /// acknowledgement beyond the last report this node made is not about this node's reports
    /// (an old one, from before an enrollment): ignored.
    fn forget(&self, acked: u64, queue: &[u64]) -> Result<()> {
        let before = self.acked();
        let made = queue.last().copied().unwrap_or(0).max(before);
        if acked > made {
            tracing::warn!(acked, made, "ignoring an acknowledgement of reports this node never made");
            return Ok(());
        }
        if acked <= before {
            return Ok(());
        }
        self.state.write("usage.acked", acked.to_string().as_bytes())?;
        for seq in queue.iter().filter(|s| (before + 1..=acked).contains(*s)) {
            let _ = std::fs::remove_file(self.queue_dir().join(format!("{seq}.report")));
        }
        Ok(())
    }

    /// Asks an edge for control's latest acknowledgement (when control is out of reach).
    async fn ack_from_edge(&self) -> Result<()> {
        let Some(base) = self.fallbacks().into_iter().next() else { return Ok(()) };
        let node = self.settings.node;
        let answer = self
            .signed(&self.edge, reqwest::Method::GET, &base, &format!("/nodes/{node}/ack"), Vec::new())
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("the edge did not answer: {:#}", anyhow::Error::from(e.without_url())))?;
        if answer.status().as_u16() != 200 {
            return Ok(());
        }
        let acked = self.verify_ack(&capped::read(answer, Kind::UsageAck.max_len(), "an acknowledgement").await?)?;
        self.forget(acked, &self.queued()?)
    }

    /// Reports usage forever.
    pub(crate) async fn report_loop(self: Arc<Self>) {
        let mut sent_to_edge = None;
        let mut tick = tokio::time::interval(Duration::from_secs(self.settings.report_secs.max(1)));
        loop {
            tick.tick().await;
            if let Err(e) = self.snapshot() {
                tracing::error!(error = %e, "could not queue a usage report");
            }
            if let Err(e) = self.send(&mut sent_to_edge).await {
                if refused_for_size(&e) {
                    tracing::warn!(error = %e, "refused control's answer to a usage report; it stays queued");
                } else {
                    tracing::debug!(error = %e, "usage reports stay queued");
                }
            }
            // Reports that went to the edge are acknowledged there once control collected them.
            if sent_to_edge.is_some()
                && !self.queued().unwrap_or_default().is_empty()
                && let Err(e) = self.ack_from_edge().await
            {
                if refused_for_size(&e) {
                    tracing::warn!(error = %e, "refused the edge's answer for an acknowledgement");
                } else {
                    tracing::debug!(error = %e, "no acknowledgement from the edge");
                }
            }
        }
    }

    /// Takes the last counts into the queue (on shutdown).
    pub(crate) fn flush(&self) {
        if let Err(e) = self.snapshot() {
            tracing::error!(error = %e, "could not queue the last usage report");
        }
    }
}
