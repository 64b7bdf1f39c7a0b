//! Prometheus metrics: what `/<admin prefix>/metrics` answers (see `api::admin::overview`),
//! for the owner's session, an API token with the read scope, or `Authorization: Bearer
//! <metrics_token>`.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use crate::app::{App, now};
use crate::error::Error;

/// The most users the per-user refusal counts list (those refused most).
const MAX_USER_SERIES: u64 = 500;

/// A label value as the Prometheus text format writes it.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The metrics as Prometheus text (version 0.0.4).
pub(crate) async fn text(app: &App) -> Result<String, Error> {
    let read = app.db.read(move |c| {
        let (_, online, devices) = crate::store::nodes::online(c, 0)?;
        Ok((
            crate::store::overview::overview(c, now())?,
            crate::store::users::refusals(c, MAX_USER_SERIES)?,
            online,
            devices,
        ))
    });
    let (overview, refusals, online, devices) = read.await?;
    let mut out = Text::default();
    out.users_and_nodes(&overview, online, devices);
    out.refusals(&refusals);
    out.edges(&overview);
    out.counters(&app.counters);
    Ok(out.0)
}

/// The text being written.
#[derive(Default)]
struct Text(String);

/// One series of a metric: its labels (`{name="value",...}`, or none) and its value.
type Series = (String, u64);

/// A metric's one series, without labels.
fn one(value: u64) -> Vec<Series> {
    vec![(String::new(), value)]
}

impl Text {
    /// A metric: its help, type and series.
    fn metric(&mut self, name: &str, kind: &str, help: &str, values: &[Series]) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in values {
            let _ = writeln!(self.0, "{name}{labels} {value}");
        }
    }

    /// Users by status, nodes, and who is online.
    fn users_and_nodes(&mut self, overview: &crate::store::overview::Overview, online: u64, devices: u64) {
        self.metric(
            "hearth_users",
            "gauge",
            "Users by status.",
            &overview.users.iter().map(|(status, n)| (format!("{{status=\"{status}\"}}"), *n)).collect::<Vec<_>>(),
        );
        self.metric("hearth_nodes", "gauge", "Nodes registered.", &one(overview.nodes));
        self.metric("hearth_nodes_online", "gauge", "Nodes seen in the last 3 minutes.", &one(overview.online));
        self.metric(
            "hearth_nodes_limited",
            "gauge",
            "Nodes over their monthly traffic cap (they carry nobody until the month ends).",
            &one(overview.limited.len() as u64),
        );
        self.metric("hearth_users_online", "gauge", "Users connected, from the nodes' last reports.", &one(online));
        self.metric("hearth_devices_online", "gauge", "Devices connected, summed over nodes.", &one(devices));
    }

    /// What the nodes refused each user (those refused most).
    fn refusals(&mut self, refusals: &[(String, u64, u64, u64)]) {
        let mut refused = Vec::new();
        for (user, devices, torrent, smtp) in refusals {
            let user = label(user);
            for (reason, n) in [("devices", devices), ("torrent", torrent), ("smtp", smtp)] {
                if *n > 0 {
                    refused.push((format!("{{user=\"{user}\",reason=\"{reason}\"}}"), *n));
                }
            }
        }
        self.metric(
            "hearth_user_refused_total",
            "counter",
            "What the nodes refused a user: devices over its limit (or dropped for a new one), BitTorrent and \
             port 25 (the abuse guard); users with none are left out.",
            &refused,
        );
    }

    /// The outbox and each edge.
    fn edges(&mut self, overview: &crate::store::overview::Overview) {
        self.metric(
            "hearth_outbox_pending",
            "gauge",
            "Changes not yet accepted by the edges (summed).",
            &one(overview.pending),
        );
        let per_edge = |value: &dyn Fn(&crate::store::overview::EdgeStatus) -> u64| -> Vec<(String, u64)> {
            overview.edges.iter().map(|s| (format!("{{edge=\"{}\"}}", s.edge.name), value(s))).collect()
        };
        self.metric(
            "hearth_edge_pending",
            "gauge",
            "Changes one edge has not accepted yet.",
            &per_edge(&|s| s.pending),
        );
        self.metric("hearth_edge_held", "gauge", "Streams one edge refused, set aside.", &per_edge(&|s| s.held));
        self.metric(
            "hearth_edge_up",
            "gauge",
            "1 when the last push to the edge succeeded (or none failed yet).",
            &per_edge(&|s| u64::from(s.edge.last_error.is_none())),
        );
        self.metric(
            "hearth_edge_last_push_timestamp_seconds",
            "gauge",
            "When the edge last accepted a push.",
            &per_edge(&|s| s.edge.last_push),
        );
        self.metric(
            "hearth_outbox_held",
            "gauge",
            "Streams an edge refused, set aside so the rest goes on (see the status; summed).",
            &one(overview.held),
        );
        self.metric(
            "hearth_credential_sets_expiring",
            "gauge",
            "Node credential sets that expire within 7 days (signing again is failing).",
            &one(overview.expiring),
        );
        let last_push = overview.edges.iter().map(|s| s.edge.last_push).max().unwrap_or(0);
        self.metric(
            "hearth_last_push_timestamp_seconds",
            "gauge",
            "When an edge last accepted a push.",
            &one(last_push),
        );
    }

    /// Control's own counters since it started.
    fn counters(&mut self, c: &crate::app::Counters) {
        self.metric(
            "hearth_pushes_total",
            "counter",
            "Pushes the edge accepted.",
            &one(c.pushes.load(Ordering::Relaxed)),
        );
        self.metric(
            "hearth_push_failures_total",
            "counter",
            "Push attempts that failed.",
            &one(c.push_failures.load(Ordering::Relaxed)),
        );
        self.metric(
            "hearth_pushed_items_total",
            "counter",
            "Outbox entries delivered.",
            &one(c.pushed_items.load(Ordering::Relaxed)),
        );
        self.metric(
            "hearth_pushed_bytes_total",
            "counter",
            "Bytes of the pushes the edge accepted.",
            &one(c.pushed_bytes.load(Ordering::Relaxed)),
        );
        self.metric(
            "hearth_usage_reports_total",
            "counter",
            "Usage reports applied.",
            &one(c.usage_reports.load(Ordering::Relaxed)),
        );
        self.metric(
            "hearth_usage_refused_total",
            "counter",
            "Usage reports refused.",
            &one(c.usage_refused.load(Ordering::Relaxed)),
        );
        self.metric(
            "hearth_logins_failed_total",
            "counter",
            "Failed sign-ins.",
            &one(c.logins_failed.load(Ordering::Relaxed)),
        );
        self.metric(
            "hearth_subscriptions_total",
            "counter",
            "Subscriptions served by control.",
            &one(c.subscriptions.load(Ordering::Relaxed)),
        );
    }
}
