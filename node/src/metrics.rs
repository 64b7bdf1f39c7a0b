//! `/healthz` and Prometheus metrics on a local port (`metrics_listen`, default
//! `127.0.0.1:9464`). A plain HTTP/1.1 answer per connection: nothing else listens here.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::route::Carried;
use crate::table::{Live, Refused};

/// What the metrics read besides the live table.
pub(crate) struct Sources {
    pub(crate) live: Arc<Live>,
    pub(crate) state: crate::state::StateDir,
    /// The public certificate's keeper, when the node has a domain.
    pub(crate) acme: Option<Arc<hearth_acme::Manager>>,
}

/// The metrics, in Prometheus's text format, a section at a time.
fn render(sources: &Sources) -> String {
    let live = &sources.live;
    let queued = std::fs::read_dir(sources.state.path("usage")).map_or(0, |entries| entries.count());
    let mut out = String::new();
    connections(&mut out, live);
    refusals(&mut out, &live.refusals);
    let routes = live.routes();
    outbounds(&mut out, routes.carried().collect());
    clients(&mut out, live);
    credentials(&mut out, live, queued as u64);
    if let Some(acme) = &sources.acme {
        certificate(&mut out, &acme.status());
    }
    out
}

/// One metric with its help and type lines.
fn metric(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
}

/// Who is connected: users who may, connections, devices, Brutal senders, hopped datagrams.
fn connections(out: &mut String, live: &Live) {
    metric(out, "hearth_node_users", "gauge", "Users who may connect.", live.users() as u64);
    metric(out, "hearth_node_connections", "gauge", "Open authenticated connections.", live.connections() as u64);
    metric(
        out,
        "hearth_node_devices",
        "gauge",
        "Devices connected (distinct client addresses of each user).",
        live.devices() as u64,
    );
    metric(
        out,
        "hearth_node_brutal_connections",
        "gauge",
        "Open connections sending with Brutal at the rate their client announced.",
        live.brutal.load(Ordering::Relaxed),
    );
    metric(
        out,
        "hearth_node_hop_datagrams_total",
        "counter",
        "Datagrams received on the ports of the hop range (port hopping).",
        live.hopped.load(Ordering::Relaxed),
    );
}

/// What the node refused users, by reason.
fn refusals(out: &mut String, refusals: &Refused) {
    let _ = writeln!(
        out,
        "# HELP hearth_node_refused_total Connections and packets refused users: over their device allowance \
         (or dropped for a new device), BitTorrent and port 25 (the abuse guard), and what the routing \
         rules refused.\n\
         # TYPE hearth_node_refused_total counter"
    );
    let reasons = [
        ("devices", &refusals.devices),
        ("torrent", &refusals.torrent),
        ("smtp", &refusals.smtp),
        ("routing", &refusals.routing),
    ];
    for (reason, count) in reasons {
        let _ = writeln!(out, "hearth_node_refused_total{{reason=\"{reason}\"}} {}", count.load(Ordering::Relaxed));
    }
}

/// The bytes carried through each of the owner's outbounds, by name (nothing without one).
fn outbounds(out: &mut String, mut carried: Vec<(&str, &Carried)>) {
    if carried.is_empty() {
        return;
    }
    carried.sort_by_key(|(name, _)| *name);
    let _ = writeln!(
        out,
        "# HELP hearth_node_outbound_bytes_total Bytes carried through each of the owner's outbounds, \
         every user's together (each user's own traffic is counted whatever carried it).\n\
         # TYPE hearth_node_outbound_bytes_total counter"
    );
    for (name, bytes) in carried {
        for (direction, count) in [("up", &bytes.up), ("down", &bytes.down)] {
            let _ = writeln!(
                out,
                "hearth_node_outbound_bytes_total{{outbound=\"{name}\",direction=\"{direction}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
    }
}

/// How the node does with clients: packets sent and lost, authentications refused, and the
/// connections not authenticated yet.
fn clients(out: &mut String, live: &Live) {
    let (sent, lost) = live.packets();
    metric(out, "hearth_node_packets_sent_total", "counter", "QUIC packets sent to authenticated clients.", sent);
    metric(
        out,
        "hearth_node_packets_lost_total",
        "counter",
        "QUIC packets to authenticated clients declared lost (their data sent again).",
        lost,
    );
    metric(
        out,
        "hearth_node_auth_failures_total",
        "counter",
        "Refused authentications.",
        live.auth_failures.load(Ordering::Relaxed),
    );
    metric(
        out,
        "hearth_node_unauthenticated_connections",
        "gauge",
        "Connections that have not authenticated yet.",
        live.unauthenticated.load(Ordering::Relaxed),
    );
    metric(
        out,
        "hearth_node_unauthenticated_refused_total",
        "counter",
        "Connections refused because too many had not authenticated yet.",
        live.refused_unauthenticated.load(Ordering::Relaxed),
    );
}

/// The credential set held, and the usage reports `queued` (not yet acknowledged).
fn credentials(out: &mut String, live: &Live, queued: u64) {
    metric(
        out,
        "hearth_node_set_version",
        "gauge",
        "Version of the credential set held.",
        live.version.load(Ordering::Relaxed),
    );
    metric(
        out,
        "hearth_node_set_expires_timestamp_seconds",
        "gauge",
        "When the credential set held expires.",
        live.expires.load(Ordering::Relaxed),
    );
    metric(out, "hearth_node_usage_reports_queued", "gauge", "Usage reports not yet acknowledged.", queued);
}

/// The public certificate's keeping, for a node with a domain.
fn certificate(out: &mut String, status: &hearth_acme::Status) {
    metric(
        out,
        "hearth_node_certificate_expiry_seconds",
        "gauge",
        "When the public certificate (by ACME) expires, Unix seconds (0: none yet).",
        status.not_after,
    );
    metric(
        out,
        "hearth_node_acme_failures",
        "gauge",
        "ACME attempts that failed in a row (0: the last one succeeded, or none was made).",
        u64::from(status.failures),
    );
}

/// Serves `/healthz` and `/metrics` on `listener` forever.
pub(crate) async fn serve(listener: tokio::net::TcpListener, sources: Arc<Sources>) {
    while let Ok((mut stream, _)) = listener.accept().await {
        let sources = sources.clone();
        tokio::spawn(async move {
            let mut request = vec![0u8; 1024];
            let Ok(Ok(n)) = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut request)).await
            else {
                return;
            };
            let line = String::from_utf8_lossy(&request[..n]);
            let path = line.split_whitespace().nth(1).unwrap_or_default();
            let (status, kind, body) = match path {
                "/healthz" => ("200 OK", "text/plain", "ok\n".to_owned()),
                "/metrics" => ("200 OK", "text/plain; version=0.0.4", render(&sources)),
                _ => ("404 Not Found", "text/plain", "not found\n".to_owned()),
            };
            let answer = format!(
                "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each outbound's bytes come in order of its name, up and down; no outbound, no lines.
    #[test]
    fn outbounds_are_listed_by_name() {
        let mut out = String::new();
        outbounds(&mut out, Vec::new());
        assert_eq!(out, "");
        let (warp, direct) = (Carried::default(), Carried::default());
        warp.up.store(5, Ordering::Relaxed);
        direct.down.store(7, Ordering::Relaxed);
        outbounds(&mut out, vec![("warp", &warp), ("direct", &direct)]);
        let lines: Vec<&str> = out.lines().filter(|line| !line.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "hearth_node_outbound_bytes_total{outbound=\"direct\",direction=\"up\"} 0",
                "hearth_node_outbound_bytes_total{outbound=\"direct\",direction=\"down\"} 7",
                "hearth_node_outbound_bytes_total{outbound=\"warp\",direction=\"up\"} 5",
                "hearth_node_outbound_bytes_total{outbound=\"warp\",direction=\"down\"} 0",
            ]
        );
    }

    #[test]
    fn a_metric_has_its_help_and_type() {
        let mut out = String::new();
        metric(&mut out, "hearth_node_users", "gauge", "Users who may connect.", 3);
        assert_eq!(
            out,
            "# HELP hearth_node_users Users who may connect.\n# TYPE hearth_node_users gauge\nhearth_node_users 3\n"
        );
    }
}
