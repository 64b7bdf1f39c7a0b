//! Driving a self-update from the agent's pulls.
//!
//! After every answered pull the agent comes here: a new release still proving itself is
//! kept once it has run healthy for `update_health_secs` (only by the new binary itself, never
//! by the process on its way out); otherwise the release the answer named, when the node
//! wants it, is fetched from where the answer came (control or an edge), checked and
//! installed, and the node restarts into it. How a release is checked, installed, kept and
//! rolled back is the parent module's.

use std::time::Duration;

use hearth_shared::envelope::Kind;

use super::Outcome;
use crate::agent::{Agent, Base};
use crate::capped;

/// Waits until the node's clients go quiet (fewer than a keepalive's worth of packets sent
/// to them over two seconds) or `most` has passed; returns how long it waited.
async fn drain(live: &crate::table::Live, most: Duration) -> Duration {
    let started = std::time::Instant::now();
    let mut last = live.packets().0;
    while started.elapsed() < most {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = live.packets().0;
        if now.saturating_sub(last) < 32 {
            break;
        }
        last = now;
    }
    started.elapsed()
}

/// What an answered pull does about releases.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Nothing now.
    Nothing,
    /// Keep the new release still proving itself: it ran healthy long enough.
    Keep,
    /// Fetch, check and install this release.
    Take(u64),
}

/// How long this process has run, and how long a new release must run healthy to be kept.
#[derive(Clone, Copy)]
struct Ran {
    so_far: Duration,
    healthy: Duration,
}

/// What to do about releases after an answered pull: with a new release still proving itself
/// (`pending`), keep it once it `ran` healthy long enough, but only as the new binary itself:
/// a process that swapped it in and is on its way out (`leaving`) never vouches for it;
/// otherwise take the release the answer `offered` when the node `wants` it.
fn step(pending: bool, leaving: bool, ran: Ran, offered: u64, wants: impl FnOnce(u64) -> bool) -> Step {
    if pending {
        return if leaving || ran.so_far < ran.healthy { Step::Nothing } else { Step::Keep };
    }
    if wants(offered) { Step::Take(offered) } else { Step::Nothing }
}

impl Agent {
    /// After an answered pull: keeps a new release that ran healthy long enough, or takes the
    /// release the answer named, from where the answer came ([`step`] decides which).
    pub(crate) async fn after_pull(&self, client: &reqwest::Client, base: &Base) {
        let pending = super::pending(&self.state);
        let leaving = *self.restart.borrow() || self.draining.load(std::sync::atomic::Ordering::Relaxed);
        let ran =
            Ran { so_far: self.started.elapsed(), healthy: Duration::from_secs(self.settings.update_health_secs) };
        let offered = self.offered.load(std::sync::atomic::Ordering::Relaxed);
        match step(pending.is_some(), leaving, ran, offered, |release| super::wants(&self.state, release)) {
            Step::Nothing => {}
            Step::Keep => {
                if let Some(pending) = pending
                    && let Err(e) = super::confirm(&self.state, &pending)
                {
                    tracing::error!(error = %e, "could not keep the new release");
                }
            }
            Step::Take(release) => self.take_release(client, base, release).await,
        }
    }

    /// Takes `release`, the one the answer named: installed (then the node restarts into it),
    /// refused for good, or fetched again at a later pull. What it logs is in a span that
    /// names the release.
    #[tracing::instrument(name = "update", level = "warn", skip_all, fields(release = release))]
    async fn take_release(&self, client: &reqwest::Client, base: &Base, release: u64) {
        match self.update(client, base, release).await {
            Outcome::Installed => {
                // The transfers under way finish first (a download is not cut), up to
                // `update_drain_secs`; meanwhile the node serves and pulls as ever.
                self.draining.store(true, std::sync::atomic::Ordering::Relaxed);
                let (live, restart) = (self.live.clone(), self.restart.clone());
                let most = Duration::from_secs(self.settings.update_drain_secs);
                tokio::spawn(async move {
                    let waited = drain(&live, most).await;
                    tracing::info!(waited_secs = waited.as_secs(), "the new release is in place; restarting into it");
                    let _ = restart.send(true);
                });
            }
            // (The refusal is recorded, and logged with the release, as a roll-back is.)
            Outcome::Refused(reason) => super::refused(&self.state, release, &reason),
            Outcome::Retry(why) => tracing::warn!(%why, "could not fetch the release yet"),
        }
    }

    /// Fetches, checks and installs `release`.
    async fn update(&self, client: &reqwest::Client, base: &Base, release: u64) -> Outcome {
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
        let (running, _) = super::running(&self.state);
        let trust = self.trust.lock().expect("trust lock").clone();
        let (manifest, file) = match super::check_manifest(&manifest, &trust, release, &running, crate::now()) {
            Ok(checked) => checked,
            Err(reason) => return Outcome::Refused(reason.to_string()),
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
        let installed = super::executable().and_then(|exe| super::install(&exe, &bytes));
        if let Err(e) = installed {
            return Outcome::Refused(format!("could not install the binary: {e:#}"));
        }
        let pending = super::Pending { release, version: manifest.version, built: manifest.built };
        match super::mark_pending(&self.state, &pending) {
            Ok(()) => Outcome::Installed,
            Err(e) => Outcome::Refused(format!("could not record the update: {e:#}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_release_is_kept_only_by_itself_once_healthy_and_otherwise_the_offered_one_is_taken() {
        let ran = |secs| Ran { so_far: Duration::from_secs(secs), healthy: Duration::from_secs(60) };
        let never = |_| -> bool { panic!("a release proving itself asks for no other") };
        assert_eq!(step(true, false, ran(59), 7, never), Step::Nothing);
        assert_eq!(step(true, false, ran(60), 7, never), Step::Keep);
        assert_eq!(step(true, true, ran(600), 7, never), Step::Nothing, "the process on its way out");
        assert_eq!(step(false, false, ran(0), 7, |release| release == 7), Step::Take(7));
        assert_eq!(step(false, false, ran(600), 7, |_| false), Step::Nothing);
    }
}
