//! The pull loop: long polls to control, else polls of the edges in turn, each answer
//! applied ([`super::accept`]) and followed by the release it names ([`crate::update`]);
//! when to ask again is [`super::pulls`]'s to say.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Result, bail};
use hearth_shared::envelope::Kind;
use hearth_shared::nodeauth;

use super::accept::AcceptError;
use super::edges::Base;
use super::pulls::{Pulls, Taken, long_poll_secs};
use super::state::Agent;
use crate::capped;

/// A pull's answer, with the key records control (or the edge) sent alongside.
enum Pulled {
    New(Vec<u8>, Option<Vec<Vec<u8>>>),
    Unchanged(Option<Vec<Vec<u8>>>),
}

impl Agent {
    /// Pulls the set from control (`from_control`, long-polled `wait` seconds) or the edge.
    async fn pull_from(&self, client: &reqwest::Client, base: &Base, wait: u64, from_control: bool) -> Result<Pulled> {
        // What the node serves, and the full set under it: control and the edge answer with a
        // delta on it when they can.
        let (after, on) = {
            let held = self.held.lock().expect("held lock");
            (held.state.map_or(0, |s| s.version), held.basis.as_ref().map_or(0, |basis| basis.version))
        };
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
        self.offered.store(offered.unwrap_or(0), Ordering::Relaxed);
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

    /// Pulls forever: long polls to control, else polls of the edges in turn.
    pub(crate) async fn pull_loop(self: Arc<Self>) {
        let mut pulls = Pulls::default();
        loop {
            let expires = self.live.expires.load(Ordering::Relaxed);
            if pulls.alarm(expires, crate::now()) {
                tracing::error!(
                    expires,
                    "the credential set has expired; serving it until control or the edge sends a new one"
                );
            }
            let mut answered = None;
            let wait = long_poll_secs(crate::update::pending(&self.state).is_some());
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
            let next = pulls.after(answered, from_edge, self.settings.edge_poll_secs);
            if next.warn {
                tracing::warn!("neither control nor the edge answers; serving the last good set");
            }
            if !next.pause.is_zero() {
                tokio::time::sleep(next.pause).await;
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
    pub(super) async fn pull(
        &self,
        client: &reqwest::Client,
        base: &Base,
        wait: u64,
        from_control: bool,
    ) -> Option<Taken> {
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
