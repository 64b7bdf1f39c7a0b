//! Usage reports: what the node's users moved and who is on the node, delivered to control
//! exactly once.
//!
//! Usage is taken from the live counters every `report_secs`, signed as the next report in
//! sequence and written to the on-disk queue (`usage/<seq>.report`) before it is sent, so a
//! crash or an outage loses nothing already taken; reports go oldest first to control (which
//! answers with a signed acknowledgement; acknowledged reports are deleted and the last
//! sequence acknowledged kept in `usage.acked`) or, when control does not answer, to the
//! edge, which queues them for control. Control applies each sequence number once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::trust::{self, Expect};
use hearth_shared::wire::{self, UsageAck, UsageReport, stream};

use crate::agent::Agent;
use crate::capped;

/// The longest a node goes without reporting who is on it while anyone is.
pub(crate) const PRESENCE_EVERY: u64 = 300;

/// What the node last said of its release in a report (a [`wire::NodeRelease`]).
const SAID_FILE: &str = "usage.release";

impl Agent {
    /// The folder of reports waiting for control's acknowledgement, one file per report.
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

    /// The last report control acknowledged (0: none).
    fn acked(&self) -> u64 {
        std::fs::read_to_string(self.state.path("usage.acked")).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
    }

    /// Takes the counters and who is on the node into a signed report on disk (nothing is
    /// taken if it cannot be written): when anyone moved traffic, something was refused, who
    /// is on changed, someone is on and the last report is [`PRESENCE_EVERY`] old, or the
    /// release the node runs (or its last refusal) differs from what a report said before.
    /// A report carries the release whenever it differs, so control hears it through an edge
    /// too.
    fn snapshot(&self) -> Result<()> {
        let usage = self.live.take_usage();
        let presence = self.live.take_presence();
        let kicked = self.live.take_kicked();
        let now = crate::now();
        let on: Vec<(u64, u32, u32)> =
            presence.iter().filter(|p| p.devices > 0).map(|p| (p.user, p.devices, p.connections)).collect();
        let mut reported = self.reported.lock().expect("reported lock");
        let refused = presence.iter().any(|p| p.refused_devices + p.refused_torrent + p.refused_smtp > 0);
        let stale = !on.is_empty() && now >= reported.at + PRESENCE_EVERY;
        let release = crate::update::said(&self.state);
        if reported.release.is_none() {
            reported.release =
                std::fs::read(self.state.path(SAID_FILE)).ok().and_then(|b| wire::decode(&b, "said").ok());
        }
        // A change after something was said, or a release taken or refused at all, makes a
        // report of its own: a rollout waits on it. A node installed by hand that never said
        // anything says what it runs with its first report.
        let said_before = reported.release.is_some();
        let release = (reported.release.as_ref() != Some(&release)).then_some(release);
        let news = release.as_ref().is_some_and(|r| said_before || !r.update.is_empty() || !r.running.ends_with("@0"));
        if usage.is_empty() && !refused && on == reported.on && !stale && !news && kicked.is_empty() {
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
            release: release.clone(),
            kicked: kicked.clone(),
        };
        let envelope = report.sign(&self.key, now).encode();
        let stored = std::fs::create_dir_all(self.queue_dir())
            .context("making the usage queue")
            .and_then(|()| crate::state::write_atomic(&self.queue_dir().join(format!("{seq}.report")), &envelope));
        if let Err(e) = stored {
            self.live.give_back(&usage, &presence, &kicked);
            return Err(e);
        }
        reported.on = on;
        reported.at = now;
        if let Some(release) = release {
            // Kept, so a restart into the same release says nothing new (a report of its own
            // at every start would be noise); lost, it is only said once more.
            if let Err(e) = self.state.write(SAID_FILE, &wire::encode(&release)) {
                tracing::warn!(error = %e, "could not keep what the node said of its release");
            }
            reported.release = Some(release);
        }
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
        // The round's span ([`Agent::report`]) says how many reports wait.
        tracing::Span::current().record("queued", queue.len());
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

    /// Verifies control's signed acknowledgement of this node's reports; gives the last
    /// sequence number it acknowledges.
    fn verify_ack(&self, bytes: &[u8]) -> Result<u64> {
        let node = self.settings.node;
        let name = stream::usage_ack(node);
        let expect = Expect { kind: Kind::UsageAck, audience: Audience::Node(node), stream: &name };
        let verified = trust::verify(bytes, &self.trust.lock().expect("trust lock"), &expect, None, crate::now())
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
            self.report(&mut sent_to_edge).await;
        }
    }

    /// One round of reporting: the counters into the queue, the queue to control or an edge,
    /// and, after reports went to an edge, the acknowledgement asked there. What it logs is in
    /// a span that says how many reports were queued to send.
    #[tracing::instrument(name = "usage", level = "warn", skip_all, fields(queued = tracing::field::Empty))]
    async fn report(&self, sent_to_edge: &mut Option<(String, u64)>) {
        if let Err(e) = self.snapshot() {
            tracing::error!(error = %e, "could not queue a usage report");
        }
        if let Err(e) = self.send(sent_to_edge).await {
            if capped::refused_for_size(&e) {
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
            if capped::refused_for_size(&e) {
                tracing::warn!(error = %e, "refused the edge's answer for an acknowledgement");
            } else {
                tracing::debug!(error = %e, "no acknowledgement from the edge");
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
