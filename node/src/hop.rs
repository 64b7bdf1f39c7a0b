//! Server-side port hopping: the node answers on every port of its `hop` range as well as on
//! its own port, without firewall rules.
//!
//! A hopping client (sing-box's `server_ports`, mihomo's `ports`, the official client's
//! `host:20000-30000`) sends each period to another port of the range, from another local
//! port of its own, and expects answers from the port it sent to. [`Hopping`] is one QUIC
//! socket made of the node's own socket (the fast path, with the kernel's segmentation
//! offloads) and one plain socket per port of the range: each of those has a small task that
//! waits until its socket is readable and hands what arrives to the endpoint through a
//! queue, and remembers which port each client address last sent to, so that what the node
//! sends that address leaves from that port.
//!
//! A range holds at most [`MAX_PORTS`] ports; each is an open file (the systemd unit allows
//! plenty), a task and no buffer while it is idle.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use anyhow::{Context as _, Result, bail};
use hearth_shared::wire::PortRange;
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

/// The most ports a hop range may hold.
pub(crate) const MAX_PORTS: usize = 16_384;

/// The largest datagram taken on a hop port (QUIC's are at most the path MTU).
const DATAGRAM: usize = 4096;

/// Datagrams waiting for the endpoint, from all hop ports together.
const QUEUE: usize = 4096;

/// Client addresses remembered with the hop port they last sent to; past this many the
/// memory starts again (a client then hears from the node's own port until its next packet).
const ROUTES: usize = 65_536;

/// Parses `"20000-30000"` (or `"20000:30000"`, as sing-box writes it).
pub(crate) fn parse_range(text: &str) -> Result<PortRange> {
    let bad = || anyhow::anyhow!("hop must be a port range like \"20000-30000\", not {text:?}");
    let (start, end) = text.trim().split_once(['-', ':']).ok_or_else(bad)?;
    let (start, end): (u16, u16) = (start.trim().parse().map_err(|_| bad())?, end.trim().parse().map_err(|_| bad())?);
    if start == 0 || end < start {
        bail!(bad());
    }
    if usize::from(end - start) + 1 > MAX_PORTS {
        bail!("hop range {start}-{end} holds {} ports, more than the {MAX_PORTS} a node opens", end - start + 1);
    }
    Ok(PortRange { start, end })
}

/// One datagram from a hop port.
struct Hopped {
    from: SocketAddr,
    port: u16,
    data: bytes::BytesMut,
}

/// The node's socket and its hop ports as one QUIC socket.
pub(crate) struct Hopping {
    main: Arc<dyn AsyncUdpSocket>,
    ports: HashMap<u16, Arc<tokio::net::UdpSocket>>,
    incoming: Mutex<tokio::sync::mpsc::Receiver<Hopped>>,
    routes: Mutex<HashMap<SocketAddr, u16>>,
    /// Whether `routes` holds anything (the node's own port then skips its lock).
    routed: AtomicBool,
    /// Which of the two sources `poll_recv` asks first (so neither starves the other).
    hop_first: AtomicBool,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl fmt::Debug for Hopping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hopping").field("main", &self.main).field("ports", &self.ports.len()).finish_non_exhaustive()
    }
}

impl Drop for Hopping {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Hopping {
    /// Opens every port of `range` on `ip` (but `main`'s own) beside `main`. Must run inside
    /// the runtime.
    /// `packets` counts the datagrams they receive.
    pub(crate) fn bind(
        main: Arc<dyn AsyncUdpSocket>,
        ip: IpAddr,
        range: PortRange,
        packets: &Arc<AtomicU64>,
    ) -> Result<Hopping> {
        let own = main.local_addr()?.port();
        let (sender, receiver) = tokio::sync::mpsc::channel(QUEUE);
        let mut ports = HashMap::new();
        let mut tasks = Vec::new();
        for port in (range.start..=range.end).filter(|port| *port != own) {
            let address = SocketAddr::new(ip, port);
            let socket = std::net::UdpSocket::bind(address).map_err(|e| {
                let hint = if e.raw_os_error() == Some(24) {
                    " (too many open files: raise the limit, e.g. LimitNOFILE in the systemd unit)"
                } else {
                    ""
                };
                anyhow::anyhow!("binding UDP {address} of the hop range {}-{}: {e}{hint}", range.start, range.end)
            })?;
            socket.set_nonblocking(true)?;
            let socket = Arc::new(tokio::net::UdpSocket::from_std(socket).context("a hop port")?);
            tasks.push(tokio::spawn(receive(socket.clone(), port, sender.clone(), packets.clone())));
            ports.insert(port, socket);
        }
        Ok(Hopping {
            main,
            ports,
            incoming: Mutex::new(receiver),
            routes: Mutex::new(HashMap::new()),
            routed: AtomicBool::new(false),
            hop_first: AtomicBool::new(false),
            tasks,
        })
    }

    /// Datagrams waiting from hop ports, into `bufs`; how many.
    fn poll_hopped(&self, cx: &mut Context<'_>, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta]) -> usize {
        let mut incoming = self.incoming.lock().expect("hop queue lock");
        let mut taken = 0;
        let mut learned = Vec::new();
        while taken < bufs.len().min(meta.len()) {
            let Poll::Ready(Some(hopped)) = incoming.poll_recv(cx) else { break };
            let len = hopped.data.len().min(bufs[taken].len());
            bufs[taken][..len].copy_from_slice(&hopped.data[..len]);
            meta[taken] = RecvMeta { addr: hopped.from, len, stride: len, ecn: None, dst_ip: None };
            learned.push((hopped.from, hopped.port));
            taken += 1;
        }
        drop(incoming);
        if !learned.is_empty() {
            let mut routes = self.routes.lock().expect("routes lock");
            for (from, port) in learned {
                if routes.get(&from) != Some(&port) {
                    if routes.len() >= ROUTES {
                        routes.clear();
                    }
                    routes.insert(from, port);
                }
            }
            self.routed.store(true, Ordering::Relaxed);
        }
        taken
    }

    /// After datagrams arrived on the node's own port: their senders hear from it again.
    fn forget(&self, meta: &[RecvMeta]) {
        if self.routed.load(Ordering::Relaxed) {
            let mut routes = self.routes.lock().expect("routes lock");
            for m in meta {
                routes.remove(&m.addr);
            }
            self.routed.store(!routes.is_empty(), Ordering::Relaxed);
        }
    }

    /// The hop port `to` last sent to, if any.
    fn route(&self, to: &SocketAddr) -> Option<u16> {
        if !self.routed.load(Ordering::Relaxed) {
            return None;
        }
        self.routes.lock().expect("routes lock").get(to).copied()
    }
}

/// Hands what arrives on one hop port to the endpoint; no buffer is held while it is idle.
async fn receive(
    socket: Arc<tokio::net::UdpSocket>,
    port: u16,
    queue: tokio::sync::mpsc::Sender<Hopped>,
    packets: Arc<AtomicU64>,
) {
    loop {
        if socket.readable().await.is_err() {
            return;
        }
        loop {
            let mut data = bytes::BytesMut::with_capacity(DATAGRAM);
            match socket.try_recv_buf_from(&mut data) {
                Ok((_, from)) => {
                    packets.fetch_add(1, Ordering::Relaxed);
                    if queue.send(Hopped { from, port, data }).await.is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                // An ICMP error for an earlier send, and the like: the socket goes on.
                Err(_) => continue,
            }
        }
    }
}

impl AsyncUdpSocket for Hopping {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.main.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        let Some(socket) = self.route(&transmit.destination).and_then(|port| self.ports.get(&port)) else {
            return self.main.try_send(transmit);
        };
        let segment = transmit.segment_size.unwrap_or(transmit.contents.len()).max(1);
        for datagram in transmit.contents.chunks(segment) {
            match socket.try_send_to(datagram, transmit.destination) {
                // A full hop socket drops the datagram, as a full queue would: QUIC sends
                // it again, and the endpoint never waits on a socket it cannot poll.
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let hop_first = !self.hop_first.fetch_xor(true, Ordering::Relaxed);
        if hop_first {
            let taken = self.poll_hopped(cx, bufs, meta);
            if taken > 0 {
                return Poll::Ready(Ok(taken));
            }
        }
        match self.main.poll_recv(cx, bufs, meta) {
            Poll::Ready(Ok(count)) => {
                self.forget(&meta[..count]);
                Poll::Ready(Ok(count))
            }
            Poll::Pending if !hop_first => {
                let taken = self.poll_hopped(cx, bufs, meta);
                if taken > 0 { Poll::Ready(Ok(taken)) } else { Poll::Pending }
            }
            other => other,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.main.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.main.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.main.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.main.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_are_bounded() {
        assert_eq!(parse_range("20000-20999").unwrap(), PortRange { start: 20000, end: 20999 });
        assert_eq!(parse_range(" 443:443 ").unwrap(), PortRange { start: 443, end: 443 });
        for bad in ["", "20000", "30000-20000", "0-10", "a-b", "1-70000"] {
            assert!(parse_range(bad).is_err(), "{bad:?}");
        }
        let err = parse_range("10000-40000").unwrap_err().to_string();
        assert!(err.contains("30001 ports"), "{err}");
    }

    /// Datagrams to any hop port reach the endpoint with their sender; what the endpoint
    /// sends back leaves from the port that sender last used; a sender heard again on the
    /// node's own port is answered from it.
    #[tokio::test]
    async fn every_port_of_the_range_is_heard_and_answers_from_itself() {
        let main = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let main = quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, main).unwrap();
        let own = main.local_addr().unwrap();
        let start = {
            // Three free ports in a row (others may hold some: try a few places).
            let mut start = 0;
            for base in (30_000u16..60_000).step_by(997) {
                if (base..base + 3).all(|p| std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok()) {
                    start = base;
                    break;
                }
            }
            start
        };
        let range = PortRange { start, end: start + 2 };
        let packets = Arc::new(AtomicU64::new(0));
        let hopping = Arc::new(Hopping::bind(main, own.ip(), range, &packets).unwrap());
        let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let from = client.local_addr().unwrap();
        client.send_to(b"hello", ("127.0.0.1", start + 1)).await.unwrap();
        let mut buf = vec![0u8; 2048];
        let mut meta = [RecvMeta::default()];
        let got = std::future::poll_fn(|cx| {
            let mut bufs = [IoSliceMut::new(&mut buf)];
            hopping.poll_recv(cx, &mut bufs, &mut meta)
        })
        .await
        .unwrap();
        assert_eq!((got, meta[0].addr, &buf[..meta[0].len]), (1, from, &b"hello"[..]));
        assert_eq!(packets.load(Ordering::Relaxed), 1);
        let answer = Transmit { destination: from, ecn: None, contents: b"back", segment_size: None, src_ip: None };
        hopping.try_send(&answer).unwrap();
        let (n, sender) = client.recv_from(&mut buf).await.unwrap();
        assert_eq!((&buf[..n], sender.port()), (&b"back"[..], start + 1), "answered from the hop port");
        // Heard on the node's own port: answered from it.
        client.send_to(b"own", own).await.unwrap();
        std::future::poll_fn(|cx| {
            let mut bufs = [IoSliceMut::new(&mut buf)];
            hopping.poll_recv(cx, &mut bufs, &mut meta)
        })
        .await
        .unwrap();
        assert_eq!(&buf[..meta[0].len], b"own");
        hopping.try_send(&answer).unwrap();
        let (_, sender) = client.recv_from(&mut buf).await.unwrap();
        assert_eq!(sender, own);
    }
}
