//! A lossy path in user space (the kernel's netem is not available here): a UDP forwarder
//! between QUIC clients and a server that adds delay, jitter, random loss and a bottleneck
//! with a drop-tail queue, each way.
//!
//! Clients send to [`LossyPath::addr`]; each client address gets a socket of its own toward
//! the server, so the server sees one peer per client as it would. Each direction is a link:
//! a packet is lost at random (a fixed seed, so runs lose the same packets), else it waits
//! its turn at the bottleneck (`rate`), is dropped when the queue already holds more than
//! `queue` of sending time, and arrives `delay` (plus up to `jitter`) after it left the
//! bottleneck. Packets keep their order. Delivery runs on tokio's timer, to the millisecond.
//! Its sockets ask for 4 MiB of receive buffer (with the kernel's default, 208 KiB, bursts were
//! dropped before the forwarder read them: losses no shaped link had, and that the counts
//! missed).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How one direction of the path treats packets.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// One-way delay.
    pub delay: Duration,
    /// Up to this much more delay, at random (order is kept).
    pub jitter: Duration,
    /// The share of packets lost at random, 0 to 1.
    pub loss: f64,
    /// The bottleneck in bits a second (`None`: none).
    pub rate: Option<u64>,
    /// The most sending time the bottleneck's queue holds before it drops.
    pub queue: Duration,
}

impl Shape {
    /// A path of `rtt` (half each way), losing `loss` of packets at random each way, with a
    /// bottleneck of `mbps` and a queue of one RTT (a common buffer size).
    pub fn symmetric(rtt: Duration, loss: f64, mbps: u64) -> Shape {
        Shape { delay: rtt / 2, jitter: Duration::ZERO, loss, rate: Some(mbps * 1_000_000), queue: rtt }
    }
}

/// What a link did.
#[derive(Debug, Default)]
pub struct Counts {
    /// Packets delivered.
    pub delivered: std::sync::atomic::AtomicU64,
    /// Packets lost at random.
    pub lost: std::sync::atomic::AtomicU64,
    /// Packets dropped by a full queue.
    pub dropped: std::sync::atomic::AtomicU64,
    /// Microseconds the delivered packets waited in the bottleneck's queue, summed.
    pub queued_us: std::sync::atomic::AtomicU64,
}

impl Counts {
    /// Takes the counts so far (and starts again from zero): packets delivered, lost at
    /// random or dropped, and microseconds queued.
    pub fn take(&self) -> (u64, u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.delivered.swap(0, Relaxed),
            self.lost.swap(0, Relaxed),
            self.dropped.swap(0, Relaxed),
            self.queued_us.swap(0, Relaxed),
        )
    }
}

/// A running path; dropping it stops it.
pub struct LossyPath {
    /// Where clients send.
    pub addr: SocketAddr,
    /// Client to server.
    pub up: Arc<Counts>,
    /// Server to client.
    pub down: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LossyPath {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A small deterministic generator (xorshift64*): the same losses every run.
struct Random(u64);

impl Random {
    /// A number in [0, 1).
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One direction: takes packets in, sends each out on `out` to `to` when its time comes.
struct Link {
    shape: Shape,
    random: Random,
    /// When the bottleneck is free again.
    free_at: Instant,
    /// When the last packet arrives (to keep the order).
    last_arrival: Instant,
    counts: Arc<Counts>,
}

impl Link {
    fn new(shape: Shape, seed: u64, counts: Arc<Counts>) -> Link {
        let now = Instant::now();
        Link { shape, random: Random(seed | 1), free_at: now, last_arrival: now, counts }
    }

    /// When a packet of `len` bytes that entered at `now` arrives, or `None` if it is lost.
    fn admit(&mut self, now: Instant, len: usize) -> Option<Instant> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.shape.loss > 0.0 && self.random.next() < self.shape.loss {
            self.counts.lost.fetch_add(1, Relaxed);
            return None;
        }
        let mut left = now;
        if let Some(rate) = self.shape.rate {
            let start = self.free_at.max(now);
            if start - now > self.shape.queue {
                self.counts.dropped.fetch_add(1, Relaxed);
                return None;
            }
            left = start + Duration::from_secs_f64(len as f64 * 8.0 / rate as f64);
            self.free_at = left;
            self.counts.queued_us.fetch_add((start - now).as_micros() as u64, Relaxed);
        }
        let jitter = self.shape.jitter.mul_f64(self.random.next());
        let arrival = (left + self.shape.delay + jitter).max(self.last_arrival);
        self.last_arrival = arrival;
        self.counts.delivered.fetch_add(1, Relaxed);
        Some(arrival)
    }
}

/// Sends what `packets` holds on `socket` to its address, each at its time.
async fn deliver(socket: Arc<UdpSocket>, mut packets: mpsc::UnboundedReceiver<(Instant, SocketAddr, Vec<u8>)>) {
    let mut waiting: VecDeque<(Instant, SocketAddr, Vec<u8>)> = VecDeque::new();
    loop {
        match waiting.front() {
            Some((due, _, _)) => {
                let due = *due;
                tokio::select! {
                    () = tokio::time::sleep_until(due) => {
                        let now = Instant::now();
                        while waiting.front().is_some_and(|(due, _, _)| *due <= now) {
                            let (_, to, bytes) = waiting.pop_front().expect("a packet");
                            let _ = socket.send_to(&bytes, to).await;
                        }
                    }
                    packet = packets.recv() => match packet {
                        Some(packet) => waiting.push_back(packet),
                        None => return,
                    },
                }
            }
            None => match packets.recv().await {
                Some(packet) => waiting.push_back(packet),
                None => return,
            },
        }
    }
}

/// The bytes each of the forwarder's sockets asks to buffer each way. The kernel holds a
/// socket to `net.core.rmem_max` / `wmem_max` (4 MiB on this machine); where those are lower,
/// the suite's rows of datagrams dropped for want of buffer say so.
const SOCKET_BUFFER: usize = 4 << 20;

/// A UDP socket on loopback with [`SOCKET_BUFFER`] of room each way.
fn bind() -> Result<UdpSocket> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    socket.set_recv_buffer_size(SOCKET_BUFFER)?;
    socket.set_send_buffer_size(SOCKET_BUFFER)?;
    socket.set_nonblocking(true)?;
    socket.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())?;
    Ok(UdpSocket::from_std(socket.into())?)
}

impl LossyPath {
    /// A path to `server` shaped `up` (client to server) and `down` (server to client).
    pub async fn start(server: SocketAddr, up: Shape, down: Shape) -> Result<LossyPath> {
        let front = Arc::new(bind()?);
        let addr = front.local_addr()?;
        let (up_counts, down_counts) = (Arc::new(Counts::default()), Arc::new(Counts::default()));
        let (up_c, down_c) = (up_counts.clone(), down_counts.clone());
        let task = tokio::spawn(async move {
            let (to_client, client_queue) = mpsc::unbounded_channel();
            let delivering = tokio::spawn(deliver(front.clone(), client_queue));
            let down = Arc::new(std::sync::Mutex::new(Link::new(down, 0x5eed_d0e1, down_c)));
            let mut uplink = Link::new(up, 0x5eed_0017, up_c);
            let mut backs: HashMap<SocketAddr, mpsc::UnboundedSender<(Instant, SocketAddr, Vec<u8>)>> = HashMap::new();
            let mut tasks = vec![delivering];
            let mut buf = vec![0u8; 65_536];
            while let Ok((n, client)) = front.recv_from(&mut buf).await {
                if let std::collections::hash_map::Entry::Vacant(entry) = backs.entry(client) {
                    // A socket of the client's own toward the server, and what comes back on it.
                    let Ok(back) = bind() else { continue };
                    let back = Arc::new(back);
                    let (to_server, server_queue) = mpsc::unbounded_channel();
                    tasks.push(tokio::spawn(deliver(back.clone(), server_queue)));
                    let (down, to_client) = (down.clone(), to_client.clone());
                    tasks.push(tokio::spawn(async move {
                        let mut buf = vec![0u8; 65_536];
                        while let Ok((n, _)) = back.recv_from(&mut buf).await {
                            let arrival = down.lock().expect("down link").admit(Instant::now(), n);
                            if let Some(arrival) = arrival {
                                let _ = to_client.send((arrival, client, buf[..n].to_vec()));
                            }
                        }
                    }));
                    entry.insert(to_server);
                }
                if let Some(arrival) = uplink.admit(Instant::now(), n) {
                    let _ = backs[&client].send((arrival, server, buf[..n].to_vec()));
                }
            }
            for task in tasks {
                task.abort();
            }
        });
        Ok(LossyPath { addr, up: up_counts, down: down_counts, task })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_random_numbers_are_spread_and_repeat() {
        let mut a = Random(7);
        let draws: Vec<f64> = (0..10_000).map(|_| a.next()).collect();
        assert!(draws.iter().all(|x| (0.0..1.0).contains(x)));
        let below = draws.iter().filter(|x| **x < 0.05).count();
        assert!((400..600).contains(&below), "{below} of 10,000 under 0.05");
        let mut b = Random(7);
        assert!(draws.iter().all(|x| *x == b.next()));
    }

    #[tokio::test]
    async fn a_link_delays_loses_queues_and_drops_as_shaped() {
        let counts = Arc::new(Counts::default());
        let shape = Shape {
            delay: Duration::from_millis(20),
            jitter: Duration::ZERO,
            loss: 0.0,
            rate: Some(8_000_000), // 1 MB/s: a 1,000-byte packet takes 1 ms
            queue: Duration::from_millis(5),
        };
        let mut link = Link::new(shape, 1, counts.clone());
        let now = Instant::now();
        // Back to back: 1 ms apart at the bottleneck, then 20 ms on the way.
        let arrivals: Vec<Option<Instant>> = (0..8).map(|_| link.admit(now, 1000)).collect();
        for (i, arrival) in arrivals.iter().take(6).enumerate() {
            assert_eq!(arrival.unwrap() - now, Duration::from_millis(21 + i as u64));
        }
        // The queue holds 5 ms: the seventh waits 6 ms and is dropped, as is the eighth.
        assert_eq!(&arrivals[6..], &[None, None]);
        assert_eq!(counts.dropped.load(std::sync::atomic::Ordering::Relaxed), 2);
        // The six delivered waited 0 to 5 ms in the queue: 15 ms in all.
        assert_eq!(counts.take(), (6, 0, 2, 15_000));
        assert_eq!(counts.take(), (0, 0, 0, 0), "taken");

        let lossy = Arc::new(Counts::default());
        let mut link = Link::new(Shape { loss: 0.1, rate: None, ..shape }, 3, lossy.clone());
        let kept = (0..10_000).filter(|_| link.admit(now, 1000).is_some()).count();
        assert!((8_800..9_200).contains(&kept), "{kept} of 10,000 kept at 10 % loss");
    }

    #[tokio::test]
    async fn packets_cross_the_path_both_ways_after_their_delay() {
        let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let shape = Shape {
            delay: Duration::from_millis(30),
            jitter: Duration::ZERO,
            loss: 0.0,
            rate: None,
            queue: Duration::ZERO,
        };
        let path = LossyPath::start(server.local_addr().unwrap(), shape, shape).await.unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let started = std::time::Instant::now();
        client.send_to(b"ping", path.addr).await.unwrap();
        let mut buf = [0u8; 16];
        let (n, from) = server.recv_from(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"ping");
        assert_ne!(from, client.local_addr().unwrap(), "the server sees the path's socket");
        server.send_to(b"pong", from).await.unwrap();
        let (n, from) = client.recv_from(&mut buf).await.unwrap();
        assert_eq!((&buf[..n], from), (&b"pong"[..], path.addr));
        let rtt = started.elapsed();
        assert!(rtt >= Duration::from_millis(60) && rtt < Duration::from_millis(500), "{rtt:?}");
    }
}
