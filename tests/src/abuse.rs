//! Strangers misbehaving, for the benchmark suite's abuse rows: each attack runs until its
//! deadline from loopback addresses of its own (127.200.0.0/16 and up, apart from the load
//! generator's [`crate::load::source`]) and says what it did. They speak plain HTTP/1.1 over
//! raw sockets, so nothing on the client side tidies up what they send.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

/// What an attack did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Connections opened (and taken by the server's kernel).
    pub connections: u64,
    /// Bytes of request the server took.
    pub bytes_sent: u64,
    /// Connections the server answered (a status line came back, or for QUIC the handshake
    /// finished).
    pub answered: u64,
}

/// A [`Tally`] counted as the attack goes, so that what was cut off by the deadline counts.
#[derive(Default)]
pub struct Counters {
    connections: AtomicU64,
    bytes_sent: AtomicU64,
    answered: AtomicU64,
}

impl Counters {
    fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }
    fn sent(&self, bytes: usize) {
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    fn answered(&self) {
        self.answered.fetch_add(1, Ordering::Relaxed);
    }
    fn tally(&self) -> Tally {
        Tally {
            connections: self.connections.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            answered: self.answered.load(Ordering::Relaxed),
        }
    }
}

/// The address of attacking host `host` (0..254) in attacking network `network` (an IPv4
/// /24 of its own, 0..12,800).
pub fn attacker(network: usize, host: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 200 + (network / 256) as u8, (network % 256) as u8, 1 + (host % 254) as u8))
}

async fn connect_from(from: IpAddr, to: SocketAddr) -> Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0)).with_context(|| format!("binding {from}"))?;
    Ok(socket.connect(to).await?)
}

/// Runs `one(address, counters)` as `networks` × `per_network` loops at once, each from an
/// address of its own and starting again when the last ended, until `until`. A loop whose
/// attempt connected nowhere waits a moment before the next (the server is gone).
async fn swarm<F, Fut>(networks: usize, per_network: usize, until: Instant, one: F) -> Result<Tally>
where
    F: Fn(IpAddr, Arc<Counters>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let counters = Arc::new(Counters::default());
    let mut tasks = Vec::with_capacity(networks * per_network);
    for network in 0..networks {
        for host in 0..per_network {
            let (one, from, counters) = (one.clone(), attacker(network, host), counters.clone());
            tasks.push(tokio::spawn(async move {
                while Instant::now() < until {
                    match tokio::time::timeout_at(until.into(), one(from, counters.clone())).await {
                        Ok(true) => {}
                        Ok(false) => tokio::time::sleep(Duration::from_millis(50)).await,
                        Err(_) => break,
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await?;
    }
    Ok(counters.tally())
}

static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// Requests to `paths` (in turn), each declaring a body of `length` bytes and sending zeros
/// as fast as the server takes them, from `networks` × `per_network` connections at once;
/// each connection reopened when the server has answered and hung up (or taken the whole
/// body), until `until`.
pub async fn large_bodies(
    to: SocketAddr,
    paths: Vec<String>,
    networks: usize,
    per_network: usize,
    length: u64,
    until: Instant,
) -> Result<Tally> {
    let paths = Arc::new(paths);
    let next = Arc::new(AtomicUsize::new(0));
    swarm(networks, per_network, until, move |from, counters| {
        let (paths, next) = (paths.clone(), next.clone());
        async move {
            let Ok(stream) = connect_from(from, to).await else { return false };
            counters.connected();
            let path = &paths[next.fetch_add(1, Ordering::Relaxed) % paths.len()];
            let (mut reader, mut writer) = stream.into_split();
            let head = format!("POST {path} HTTP/1.1\r\nHost: {to}\r\nContent-Length: {length}\r\n\r\n");
            let send = async {
                if writer.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let mut sent = 0u64;
                while sent < length {
                    let n = ZEROS.len().min((length - sent) as usize);
                    match writer.write(&ZEROS[..n]).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            sent += n as u64;
                            counters.sent(n);
                        }
                    }
                }
            };
            let receive = async {
                let (mut first, mut buf) = (Vec::new(), [0u8; 4096]);
                loop {
                    match reader.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) if first.len() < 16 => {
                            first.extend_from_slice(&buf[..n]);
                            if first.starts_with(b"HTTP/1.1 ") {
                                counters.answered();
                                first.resize(16, 0);
                            }
                        }
                        Ok(_) => {}
                    }
                }
            };
            tokio::join!(send, receive);
            true
        }
    })
    .await
}

/// Slow-loris: `networks` × `per_network` connections at once, each sending a request line
/// and then one more header line every `every`, never ending its headers; each reopened when
/// the server hangs up, until `until`.
pub async fn slow_loris(
    to: SocketAddr,
    networks: usize,
    per_network: usize,
    every: Duration,
    until: Instant,
) -> Result<Tally> {
    swarm(networks, per_network, until, move |from, counters| async move {
        let Ok(mut stream) = connect_from(from, to).await else { return false };
        counters.connected();
        let head = format!("GET / HTTP/1.1\r\nHost: {to}\r\n");
        if stream.write_all(head.as_bytes()).await.is_err() {
            return true;
        }
        counters.sent(head.len());
        let mut buf = [0u8; 1024];
        loop {
            // Hung up on (a 408 first, or not): done with this one.
            match tokio::time::timeout(every, stream.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(n)) if buf[..n].starts_with(b"HTTP/1.1 ") => counters.answered(),
                Ok(Ok(_)) | Err(_) => {}
            }
            if stream.write_all(b"X-Wait: 1\r\n").await.is_err() {
                return true;
            }
            counters.sent(11);
        }
    })
    .await
}

/// `GET` of each of `paths` (unknown links, say) once, at `rate` a second, each on a new
/// connection from a network of its own ([`attacker`]`(i, 0)`), until all were sent or `until`.
/// `answered` counts the answers that came back.
pub async fn one_request_each(to: SocketAddr, paths: Vec<String>, rate: f64, until: Instant) -> Result<Tally> {
    let counters = Arc::new(Counters::default());
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(paths.len());
    for (i, path) in paths.into_iter().enumerate() {
        let intended = started + Duration::from_secs_f64(i as f64 / rate);
        if intended >= until {
            break;
        }
        tokio::time::sleep_until(intended.into()).await;
        let counters = counters.clone();
        tasks.push(tokio::spawn(async move {
            let Ok(mut stream) = connect_from(attacker(i, 0), to).await else { return };
            counters.connected();
            let request = format!("GET {path} HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n\r\n");
            if stream.write_all(request.as_bytes()).await.is_err() {
                return;
            }
            counters.sent(request.len());
            let mut answer = Vec::new();
            if stream.read_to_end(&mut answer).await.is_ok() && answer.starts_with(b"HTTP/1.1 ") {
                counters.answered();
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    Ok(counters.tally())
}

/// QUIC handshakes that never authenticate, at a Hysteria2 node: `networks` × `per_network`
/// loops at once, each connecting (TLS 1.3, ALPN h3) and then holding the connection without
/// a request until the node closes it, then connecting again, until `until`. A refused
/// connection is tried again 200 ms later: past the node's caps, a steady flood of
/// handshakes. `answered` counts connections that were up.
pub async fn handshakes(to: SocketAddr, networks: usize, per_network: usize, until: Instant) -> Result<Tally> {
    swarm(networks, per_network, until, move |from, counters| async move {
        counters.connected();
        match crate::node::H3Client::connect_from(to, from).await {
            Ok(client) => {
                counters.answered();
                client.closed().await;
            }
            // Refused: again after a moment (5 a second a loop), so that the flood's own cost
            // leaves this program's one CPU to the valid clients it is measured against.
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
        true
    })
    .await
}
