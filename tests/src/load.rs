//! Hearth's HTTP load generator (tokio + hyper), for the benchmarks and the whole-system
//! scenarios.
//!
//! - **Closed loop** ([`closed`]): `clients` connections, each sending its next request when the
//!   last is answered (keep-alive). It finds the most a server answers.
//! - **Open loop** ([`open`]): requests sent at a fixed rate whatever the server does, each on
//!   a new connection from one of `sources` loopback addresses (127.1.x.y, as that many
//!   clients), and each request's latency counted from the moment it was *meant* to be sent,
//!   so a stalled server shows up as latency instead of hiding it (coordinated omission).
//!
//! Only 200s count as successes; every other status and every error is counted apart.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use serde::Serialize;
use tokio::net::{TcpSocket, TcpStream};

/// The `i`-th loopback source address of a run (never 127.0.0.1): consecutive ones are in
/// different /24 networks (127.1.0.1, 127.1.1.1, ... 127.1.255.1, 127.1.0.2, ...), as clients
/// all over the Internet are, so per-network limits see many networks.
pub fn source(i: usize) -> IpAddr {
    let i = i as u32;
    let host = (i >> 8) % 254 + 1;
    let second = 1 + i / (256 * 254);
    IpAddr::V4(Ipv4Addr::new(127, second as u8, (i & 0xff) as u8, host as u8))
}

/// What a run sends: one server, and the paths (with query) it cycles through.
#[derive(Clone, Debug)]
pub struct Target {
    /// The server's address.
    pub addr: SocketAddr,
    /// Paths to request in turn.
    pub paths: Arc<Vec<String>>,
    /// The User-Agent sent.
    pub user_agent: String,
}

impl Target {
    /// A target from URLs on one `http://host:port` server.
    pub fn from_urls(urls: &[String], user_agent: &str) -> Result<Target> {
        let first = urls.first().context("no URL to load")?;
        let rest = first.strip_prefix("http://").context("only http:// URLs are loaded")?;
        let host = rest.split('/').next().unwrap_or_default();
        let addr: SocketAddr = host.parse().with_context(|| format!("{host} is not an address and port"))?;
        let paths = urls
            .iter()
            .map(|u| {
                u.strip_prefix(&format!("http://{host}"))
                    .map(str::to_owned)
                    .with_context(|| format!("{u} is on another server"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Target { addr, paths: Arc::new(paths), user_agent: user_agent.to_owned() })
    }
}

/// A run's outcome.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Outcome {
    /// Requests sent.
    pub sent: u64,
    /// Answers by status.
    pub statuses: BTreeMap<u16, u64>,
    /// Requests that got no answer (connection refused or reset, timeout).
    pub errors: u64,
    /// The first few errors, to say what went wrong.
    pub error_samples: Vec<String>,
    /// How long the run took.
    pub seconds: f64,
    /// Latency of the 200s, in microseconds: p50, p95, p99, max.
    pub latency_us: Percentiles,
    /// Latency of every answer, whatever its status.
    pub answer_latency_us: Percentiles,
}

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: u64,
    /// 95th.
    pub p95: u64,
    /// 99th.
    pub p99: u64,
    /// Slowest.
    pub max: u64,
}

impl Percentiles {
    fn of(mut micros: Vec<u64>) -> Percentiles {
        if micros.is_empty() {
            return Percentiles::default();
        }
        micros.sort_unstable();
        let at = |p: f64| micros[((micros.len() as f64 * p).ceil() as usize).clamp(1, micros.len()) - 1];
        Percentiles { p50: at(0.50), p95: at(0.95), p99: at(0.99), max: *micros.last().unwrap_or(&0) }
    }
}

impl Outcome {
    /// The 200s.
    pub fn ok(&self) -> u64 {
        self.statuses.get(&200).copied().unwrap_or(0)
    }

    /// 200s a second.
    pub fn ok_per_second(&self) -> f64 {
        self.ok() as f64 / self.seconds.max(f64::EPSILON)
    }

    fn merge(parts: Vec<Part>, seconds: f64) -> Outcome {
        let mut outcome = Outcome { seconds, ..Outcome::default() };
        let (mut ok, mut all) = (Vec::new(), Vec::new());
        for part in parts {
            outcome.sent += part.sent;
            outcome.errors += part.errors;
            for (status, n) in part.statuses {
                *outcome.statuses.entry(status).or_default() += n;
            }
            for sample in part.error_samples {
                if outcome.error_samples.len() < 5 {
                    outcome.error_samples.push(sample);
                }
            }
            ok.extend(part.ok_micros);
            all.extend(part.all_micros);
        }
        outcome.latency_us = Percentiles::of(ok);
        outcome.answer_latency_us = Percentiles::of(all);
        outcome
    }
}

#[derive(Default)]
struct Part {
    sent: u64,
    errors: u64,
    statuses: BTreeMap<u16, u64>,
    error_samples: Vec<String>,
    ok_micros: Vec<u64>,
    all_micros: Vec<u64>,
}

impl Part {
    fn record(&mut self, answer: Result<u16>, since: Instant) {
        self.record_after(answer, since.elapsed());
    }

    fn record_after(&mut self, answer: Result<u16>, took: Duration) {
        self.sent += 1;
        let micros = took.as_micros() as u64;
        match answer {
            Ok(status) => {
                *self.statuses.entry(status).or_default() += 1;
                if status == 200 {
                    self.ok_micros.push(micros);
                }
                self.all_micros.push(micros);
            }
            Err(e) => {
                self.errors += 1;
                if self.error_samples.len() < 5 {
                    self.error_samples.push(format!("{e:#}"));
                }
            }
        }
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect(target: SocketAddr, from: Option<IpAddr>) -> Result<Sender> {
    let stream = match from {
        Some(ip) => {
            let socket = TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(ip, 0)).with_context(|| format!("binding {ip}"))?;
            socket.connect(target).await?
        }
        None => TcpStream::connect(target).await?,
    };
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

async fn send(sender: &mut Sender, target: &Target, path: &str, from: Option<IpAddr>) -> Result<u16> {
    sender.ready().await?;
    let mut request = http::Request::get(path)
        .header(http::header::HOST, target.addr.to_string())
        .header(http::header::USER_AGENT, &target.user_agent);
    if let Some(ip) = from {
        // As Cloudflare tells a Worker who is asking (workerd on loopback sees no other way);
        // the native edge takes the socket's address and ignores it.
        request = request.header("cf-connecting-ip", ip.to_string());
    }
    let request = request.body(Empty::<Bytes>::new())?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    // The whole body is read: an answer counts once it has arrived.
    response.into_body().collect().await?;
    Ok(status)
}

/// Keeps `clients` keep-alive connections busy for `duration`; connection `i` comes from
/// [`source`]`(i)` when `spread` is set.
pub async fn closed(target: &Target, clients: usize, duration: Duration, spread: bool) -> Result<Outcome> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(clients);
    for client in 0..clients {
        let target = target.clone();
        tasks.push(tokio::spawn(async move {
            let mut part = Part::default();
            let from = spread.then(|| source(client));
            let mut sender = None;
            let mut i = client;
            while Instant::now() < deadline {
                let since = Instant::now();
                if sender.is_none() {
                    match connect(target.addr, from).await {
                        Ok(s) => sender = Some(s),
                        Err(e) => {
                            part.record(Err(e), since);
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    }
                }
                let path = &target.paths[i % target.paths.len()];
                i += clients;
                let answer = send(sender.as_mut().expect("connected"), &target, path, from).await;
                if answer.is_err() {
                    sender = None;
                }
                part.record(answer, since);
            }
            part
        }));
    }
    let mut parts = Vec::with_capacity(clients);
    for task in tasks {
        parts.push(task.await?);
    }
    Ok(Outcome::merge(parts, started.elapsed().as_secs_f64()))
}

/// Sends `rate` requests a second for `duration`, each on a new connection from one of
/// `sources` loopback addresses in turn; latency counts from each request's intended time.
pub async fn open(target: &Target, rate: f64, duration: Duration, sources: usize) -> Result<Outcome> {
    open_from(target, rate, duration, 0..sources).await
}

/// [`open`] from the source addresses [`source`]`(i)` for `i` in `sources` (0..0: 127.0.0.1),
/// so that two runs at once can come from networks apart.
pub async fn open_from(
    target: &Target,
    rate: f64,
    duration: Duration,
    sources: std::ops::Range<usize>,
) -> Result<Outcome> {
    if rate.is_nan() || rate <= 0.0 {
        bail!("the rate must be above 0");
    }
    let total = (rate * duration.as_secs_f64()).round() as u64;
    let started = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for n in 0..total {
        let intended = started + Duration::from_secs_f64(n as f64 / rate);
        tokio::time::sleep_until(intended.into()).await;
        let (target, tx, sources) = (target.clone(), tx.clone(), sources.clone());
        tokio::spawn(async move {
            let path = &target.paths[n as usize % target.paths.len()];
            let from = (!sources.is_empty()).then(|| source(sources.start + n as usize % sources.len()));
            let answer = async {
                let mut sender = connect(target.addr, from).await?;
                send(&mut sender, &target, path, from).await
            };
            let answer = match tokio::time::timeout(Duration::from_secs(30), answer).await {
                Ok(answer) => answer,
                Err(_) => Err(anyhow::anyhow!("no answer within 30 s")),
            };
            // Timed here, when the answer arrived, from when it was meant to be sent.
            let _ = tx.send((answer, intended.elapsed()));
        });
    }
    drop(tx);
    let mut part = Part::default();
    while let Some((answer, took)) = rx.recv().await {
        part.record_after(answer, took);
    }
    Ok(Outcome::merge(vec![part], started.elapsed().as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_distinct_loopback_addresses() {
        let all: std::collections::BTreeSet<IpAddr> = (0..200_000).map(source).collect();
        assert_eq!(all.len(), 200_000);
        assert!(all.iter().all(|ip| ip.is_loopback() && *ip != IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert_eq!(source(0), IpAddr::V4(Ipv4Addr::new(127, 1, 0, 1)));
        assert_eq!(source(1), IpAddr::V4(Ipv4Addr::new(127, 1, 1, 1)));
        assert_eq!(source(256), IpAddr::V4(Ipv4Addr::new(127, 1, 0, 2)));
    }

    #[test]
    fn percentiles() {
        let p = Percentiles::of((1..=100).collect());
        assert_eq!((p.p50, p.p95, p.p99, p.max), (50, 95, 99, 100));
        assert_eq!(Percentiles::of(vec![]).max, 0);
    }

    #[tokio::test]
    async fn both_loops_count_statuses_and_errors() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Answers 200 to /ok, 429 to anything else.
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut seen = Vec::new();
                    loop {
                        let Ok(n) = stream.read(&mut buf).await else { return };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&seen[..end]).to_string();
                            seen.drain(..end + 4);
                            let status = if head.starts_with("GET /ok ") { "200 OK" } else { "429 Too Many" };
                            let reply = format!("HTTP/1.1 {status}\r\ncontent-length: 2\r\n\r\nhi");
                            if stream.write_all(reply.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        let urls = vec![format!("http://{addr}/ok"), format!("http://{addr}/limited")];
        let target = Target::from_urls(&urls, "hearth-load").unwrap();
        let run = closed(&target, 4, Duration::from_millis(300), true).await.unwrap();
        assert!(run.ok() > 10 && run.statuses[&429] > 10 && run.errors == 0, "{run:?}");
        let run = open(&target, 200.0, Duration::from_millis(500), 50).await.unwrap();
        assert_eq!(run.sent, 100);
        assert_eq!(run.ok() + run.statuses[&429], 100, "{run:?}");
        assert!(run.latency_us.max > 0);
        assert!(run.answer_latency_us.p99 < 200_000, "a loopback answer is not late: {run:?}");
        // Nobody listening: every request is an error, none a success.
        let nobody = Target::from_urls(&["http://127.0.0.1:9/".to_owned()], "hearth-load").unwrap();
        let run = open(&nobody, 100.0, Duration::from_millis(100), 4).await.unwrap();
        assert_eq!((run.ok(), run.errors), (0, 10));
    }
}
