//! A connection's UDP: one socket a client session, and for a user with a rule set one way
//! out per outbound the session uses (a socket bound as the direct outbound says, or a SOCKS5
//! association), each relaying its answers back over the connection's datagrams.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::UdpSocket;
use tokio::sync::Mutex;

use super::options::Options;
use super::reach::{CONNECT_TIMEOUT, ReachError, checked, lookup, proxy_is_local, resolve};
use crate::proto::{Reassembly, UdpMessage};
use crate::route::{self, Carried, Decision, Routes};
use crate::table::{Counter, Live};
use hearth_shared::acl::{OutboundKind, Proto, Request};

/// A UDP session closes after this long without a packet either way.
const UDP_IDLE: Duration = Duration::from_secs(60);
/// UDP sessions one connection may hold.
const MAX_UDP_SESSIONS: usize = 256;
/// UDP destinations whose judgement by the abuse guard one connection remembers.
const MAX_JUDGED: usize = 4096;

struct Session {
    socket: Arc<UdpSocket>,
    reassembly: Reassembly,
    task: tokio::task::JoinHandle<()>,
    /// The session's ways out through the owner's outbounds (routed users), by name.
    outs: HashMap<String, Out>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
        for out in self.outs.values() {
            out.task.abort();
        }
    }
}

/// A session's way out through one outbound, and the task that relays its answers back.
struct Out {
    back: Back,
    task: tokio::task::JoinHandle<()>,
}

/// Where a session's answers come from.
#[derive(Clone)]
enum Back {
    /// A UDP socket (direct).
    Socket(Arc<UdpSocket>),
    /// A SOCKS5 proxy's UDP association.
    Socks(Arc<crate::outbound::SocksUdp>),
}

impl Back {
    async fn recv(&self, buf: &mut [u8]) -> std::io::Result<(usize, SocketAddr)> {
        match self {
            Back::Socket(socket) => socket.recv_from(buf).await,
            Back::Socks(socks) => tokio::select! {
                received = socks.recv_from(buf) => received,
                () = socks.closed() => Err(std::io::Error::other("the SOCKS5 proxy ended the association")),
            },
        }
    }
}

/// Where a routed user's datagrams for one destination go.
#[derive(Clone)]
enum UdpWay {
    /// Out of the session's own socket, to this address.
    Plain(SocketAddr),
    /// Through an outbound of the owner's, to these addresses (checked by the safety
    /// policy) or, for a proxy, by this name.
    Out { via: Arc<route::Outbound>, addrs: Vec<SocketAddr>, name: Option<String>, port: u16 },
    /// Refused by the rules.
    Refused,
}

/// How a routed user's datagrams for `address` leave, by rule set `set`.
async fn routed_udp(address: &str, options: &Options, set: u16, routes: &Routes) -> Result<UdpWay, ReachError> {
    let (domain, ips, port) = lookup(address).await?;
    let request = Request { domain: domain.as_deref(), ips: &ips, proto: Proto::Udp, port };
    let (outbound, hijack) = match routes.decide(set, &request) {
        Decision::Reject(why) => {
            tracing::debug!(why, "UDP destination refused by routing");
            return Ok(UdpWay::Refused);
        }
        Decision::Out { outbound, hijack } => (outbound, hijack),
    };
    let addrs = checked(address, hijack.map_or(ips, |ip| vec![ip]), port, options)?;
    let Some(via) = outbound else { return Ok(UdpWay::Plain(addrs[0])) };
    let name = match (hijack, domain, &via.kind) {
        (None, Some(name), OutboundKind::Socks5 { server, .. }) => (!proxy_is_local(server).await).then_some(name),
        (_, _, OutboundKind::Http { .. }) => return Ok(UdpWay::Refused),
        _ => None,
    };
    Ok(UdpWay::Out { via, addrs, name, port })
}

/// Relays a connection's UDP: one outbound socket per client session (and, for a routed
/// user, one way out per outbound the session uses), closed after [`UDP_IDLE`] without
/// traffic.
///
/// Each datagram the client sends goes through the same steps: into its session
/// ([`Relay::reassemble`]), its way found ([`Ways`]), the routing's and the abuse guard's
/// refusals ([`Judged`]), the user's pace, then out ([`Relay::send`]).
pub(super) async fn udp_relay(connection: quinn::Connection, counter: Arc<Counter>, live: Arc<Live>, options: Options) {
    let relay = Relay { connection, counter, live, options, sessions: Arc::default() };
    let mut ways = Ways::default();
    let mut judged = Judged::default();
    while let Ok(datagram) = relay.connection.read_datagram().await {
        let Ok(message) = UdpMessage::parse(&datagram) else { continue };
        let id = message.session;
        let Some((address, payload, socket)) = relay.reassemble(message).await else { continue };
        let set = relay.counter.rules();
        let way = if set == 0 {
            ways.plain(address, &relay.options).await
        } else {
            let routes = relay.live.routes();
            ways.routed(address, set, &routes, &relay.options).await
        };
        let Some(way) = way else { continue };
        let Some(judged_at) = way.judged_at() else {
            relay.live.refusals.routing.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        if relay.counter.guard().torrent && judged.is_torrent(id, judged_at, &payload) {
            relay.counter.refuse(&relay.live, false);
            continue;
        }
        if !relay.counter.pace_up.admit(payload.len()) {
            continue;
        }
        if relay.send(way, id, &socket, &payload).await {
            relay.counter.sent(payload.len() as u64);
        }
    }
    relay.sessions.lock().await.clear();
}

/// A connection's sessions, shared with the tasks relaying their answers back.
type Sessions = Arc<Mutex<HashMap<u32, Session>>>;

/// What a connection's UDP relay works with (held for the connection's life: nothing in it
/// is made per datagram).
struct Relay {
    connection: quinn::Connection,
    counter: Arc<Counter>,
    live: Arc<Live>,
    options: Options,
    sessions: Sessions,
}

impl Relay {
    /// Takes a client's fragment into its session (opened on first use, unless the connection
    /// holds [`MAX_UDP_SESSIONS`]): once its datagram is whole, the datagram (address and
    /// payload) and the session's socket.
    async fn reassemble(&self, message: UdpMessage) -> Option<(String, Vec<u8>, Arc<UdpSocket>)> {
        let id = message.session;
        let mut guard = self.sessions.lock().await;
        if !guard.contains_key(&id) {
            if guard.len() >= MAX_UDP_SESSIONS {
                return None;
            }
            let session = self.open(id).await?;
            guard.insert(id, session);
        }
        let session = guard.get_mut(&id).expect("inserted above");
        let (address, payload) = session.reassembly.push(message)?;
        Some((address, payload, session.socket.clone()))
    }

    /// A new session `id`: its socket (`[::]`, or `0.0.0.0` with private destinations allowed
    /// or where `[::]` cannot be bound), and the task relaying what it receives back to the
    /// client.
    async fn open(&self, id: u32) -> Option<Session> {
        let bind: SocketAddr =
            if self.options.allow_private { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("address");
        // The fallback is bound only when the first bind fails (`or` would bind it every time).
        let socket = match UdpSocket::bind(bind).await {
            Ok(socket) => socket,
            Err(_) => UdpSocket::bind("0.0.0.0:0").await.ok()?,
        };
        let socket = Arc::new(socket);
        let back = Back::Socket(socket.clone());
        let (connection, counter, sessions) = (self.connection.clone(), self.counter.clone(), self.sessions.clone());
        let task = tokio::spawn(udp_back(connection, back, id, counter, sessions, None));
        Some(Session { socket, reassembly: Reassembly::default(), task, outs: HashMap::new() })
    }

    /// Sends session `id`'s `payload` its way: out of the session's `socket`, or through one
    /// of the owner's outbounds. Whether it went.
    async fn send(&self, way: UdpWay, id: u32, socket: &UdpSocket, payload: &[u8]) -> bool {
        match way {
            UdpWay::Plain(target) => {
                let target = plain_target(socket.local_addr().is_ok_and(|a| a.is_ipv6()), target);
                socket.send_to(payload, target).await.is_ok()
            }
            UdpWay::Out { via, addrs, name, port } => {
                let target = crate::outbound::Target { domain: name.as_deref(), addrs: &addrs, port };
                self.send_out(id, &via, &target, payload).await
            }
            UdpWay::Refused => false,
        }
    }

    /// Sends session `id`'s `payload` to `target` through outbound `via` (the session's way
    /// out through it opened on first use), counted as the outbound's. Whether it went.
    async fn send_out(
        &self,
        id: u32,
        via: &Arc<route::Outbound>,
        target: &crate::outbound::Target<'_>,
        payload: &[u8],
    ) -> bool {
        let Some(back) = way_out(&self.connection, &self.sessions, id, via, &self.counter).await else { return false };
        let sent = match (&back, &via.kind) {
            (Back::Socks(socks), _) => socks.send_to(payload, target).await.is_ok(),
            (Back::Socket(socket), OutboundKind::Direct { mode, .. }) => {
                let to =
                    socket.local_addr().and_then(|local| crate::outbound::udp_destination(*mode, target.addrs, local));
                match to {
                    Ok(to) => socket.send_to(payload, to).await.is_ok(),
                    Err(_) => false,
                }
            }
            (Back::Socket(_), _) => false,
        };
        if sent {
            route::count(Some(&via.carried), payload.len() as u64, 0);
        }
        sent
    }
}

/// Where a datagram for `target` leaves the session's own socket: an IPv4 address mapped
/// into IPv6 when the socket is IPv6 (`local_v6`), else `target` itself.
#[inline]
fn plain_target(local_v6: bool, target: SocketAddr) -> SocketAddr {
    if local_v6 && target.is_ipv4() { SocketAddr::new(IpAddr::V6(to_v6(target.ip())), target.port()) } else { target }
}

fn to_v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Destinations one connection remembers the way to (all forgotten at once past this).
const MAX_WAYS: usize = 1024;

/// The ways a connection's datagrams took, by destination, so that only a destination's
/// first datagram (or the first after the user's rules change) is resolved and routed.
#[derive(Default)]
struct Ways {
    /// Where each destination resolved, for a user without a rule set.
    resolved: HashMap<String, SocketAddr>,
    /// A routed user's ways, by destination, with the rule set and routing they were found by.
    routed: HashMap<String, (u16, usize, UdpWay)>,
}

impl Ways {
    /// The way to `address` for a user without a rule set: where it resolves, if the safety
    /// policy lets it be reached (`None`, logged, if not).
    async fn plain(&mut self, address: String, options: &Options) -> Option<UdpWay> {
        if let Some(addr) = self.resolved.get(&address) {
            return Some(UdpWay::Plain(*addr));
        }
        match resolve(&address, options).await {
            Ok(addr) => {
                remember(&mut self.resolved, address, addr);
                Some(UdpWay::Plain(addr))
            }
            Err(e) => {
                tracing::debug!(error = %e, "UDP destination refused");
                None
            }
        }
    }

    /// The way to `address` for a user routed by rule set `set` in `routes` (the owner's
    /// routing now): as remembered if found by the same set and routing, else decided anew
    /// (`None`, logged, for a destination that cannot be reached).
    async fn routed(&mut self, address: String, set: u16, routes: &Arc<Routes>, options: &Options) -> Option<UdpWay> {
        let version = Arc::as_ptr(routes) as usize;
        if let Some((was, at, way)) = self.routed.get(&address)
            && *was == set
            && *at == version
        {
            return Some(way.clone());
        }
        match routed_udp(&address, options, set, routes).await {
            Ok(way) => {
                remember(&mut self.routed, address, (set, version, way.clone()));
                Some(way)
            }
            Err(e) => {
                tracing::debug!(error = %e, "UDP destination refused");
                None
            }
        }
    }
}

/// Remembers `value` for `address`, forgetting everything first when over [`MAX_WAYS`].
#[inline]
fn remember<V>(map: &mut HashMap<String, V>, address: String, value: V) {
    if map.len() > MAX_WAYS {
        map.clear();
    }
    map.insert(address, value);
}

impl UdpWay {
    /// The address the abuse guard judges a datagram sent this way by (its first); `None` for
    /// a way the rules refused.
    #[inline]
    fn judged_at(&self) -> Option<SocketAddr> {
        match self {
            UdpWay::Refused => None,
            UdpWay::Plain(addr) => Some(*addr),
            UdpWay::Out { addrs, .. } => Some(addrs[0]),
        }
    }
}

/// The guard's judgement of each session's destinations (true: BitTorrent), from the first
/// datagram the client sent there; at most [`MAX_JUDGED`] (all forgotten at once past it).
#[derive(Default)]
struct Judged(HashMap<(u32, SocketAddr), bool>);

impl Judged {
    /// Whether session `id`'s datagrams to `at` are BitTorrent's: as judged before, else by
    /// `payload`, the first there.
    #[inline]
    fn is_torrent(&mut self, id: u32, at: SocketAddr, payload: &[u8]) -> bool {
        if self.0.len() >= MAX_JUDGED && !self.0.contains_key(&(id, at)) {
            self.0.clear();
        }
        *self.0.entry((id, at)).or_insert_with(|| crate::guard::is_torrent_datagram(payload))
    }
}

/// Session `id`'s way out through `via`, opened on first use (a socket bound as the direct
/// outbound says, or a SOCKS5 UDP association) with a task relaying its answers back.
async fn way_out(
    connection: &quinn::Connection,
    sessions: &Arc<Mutex<HashMap<u32, Session>>>,
    id: u32,
    via: &Arc<route::Outbound>,
    counter: &Arc<Counter>,
) -> Option<Back> {
    if let Some(out) = sessions.lock().await.get(&id).and_then(|s| s.outs.get(&via.name)) {
        return Some(out.back.clone());
    }
    let back = match &via.kind {
        OutboundKind::Direct { mode, interface, source_v4, source_v6 } => {
            match crate::outbound::bind_udp_direct(*mode, interface.as_deref(), *source_v4, *source_v6).await {
                Ok(socket) => Back::Socket(Arc::new(socket)),
                Err(e) => {
                    tracing::warn!(outbound = via.name, error = %e, "cannot open a UDP socket for the outbound");
                    return None;
                }
            }
        }
        OutboundKind::Socks5 { server, login } => {
            match crate::outbound::SocksUdp::associate(server, login.as_ref(), CONNECT_TIMEOUT).await {
                Ok(socks) => Back::Socks(Arc::new(socks)),
                Err(e) => {
                    tracing::warn!(outbound = via.name, error = %e, "the SOCKS5 proxy refused a UDP association");
                    return None;
                }
            }
        }
        OutboundKind::Http { .. } => return None,
    };
    let mut guard = sessions.lock().await;
    let session = guard.get_mut(&id)?;
    if let Some(out) = session.outs.get(&via.name) {
        // Another datagram opened one meanwhile: keep that one.
        return Some(out.back.clone());
    }
    let which = Some((via.name.clone(), via.carried.clone()));
    let task = tokio::spawn(udp_back(connection.clone(), back.clone(), id, counter.clone(), sessions.clone(), which));
    session.outs.insert(via.name.clone(), Out { back: back.clone(), task });
    Some(back)
}

/// Sends what a session's socket (or one of its ways out, `which`: the outbound's name and
/// counts) receives back to the client, fragmented to fit. Ends after [`UDP_IDLE`] without
/// an answer, closing the session (or that way out).
async fn udp_back(
    connection: quinn::Connection,
    back: Back,
    id: u32,
    counter: Arc<Counter>,
    sessions: Arc<Mutex<HashMap<u32, Session>>>,
    which: Option<(String, Arc<Carried>)>,
) {
    let mut buf = vec![0u8; 65_536];
    let mut packet: u16 = 0;
    loop {
        let (n, from) = match tokio::time::timeout(UDP_IDLE, back.recv(&mut buf)).await {
            Ok(Ok(received)) => received,
            _ => break,
        };
        let from = SocketAddr::new(from.ip().to_canonical(), from.port());
        let Some(max) = connection.max_datagram_size() else { break };
        if !counter.pace_down.admit(n) {
            continue;
        }
        packet = packet.wrapping_add(1);
        let Some(parts) = UdpMessage::split(id, packet, &from.to_string(), &buf[..n], max) else { continue };
        for part in parts {
            if connection.send_datagram(Bytes::from(part.encode())).is_err() {
                break;
            }
        }
        counter.received(n as u64);
        route::count(which.as_ref().map(|(_, carried)| &**carried), 0, n as u64);
    }
    let mut guard = sessions.lock().await;
    match which {
        // The session's own socket went quiet: the session ends (its Drop ends this task).
        None => drop(guard.remove(&id)),
        Some((name, _)) => {
            // This task's own handle: dropped, not aborted (it ends here).
            drop(guard.get_mut(&id).and_then(|session| session.outs.remove(&name)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_socket_sends_to_ipv4_mapped() {
        let v4: SocketAddr = "192.0.2.1:53".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:53".parse().unwrap();
        assert_eq!(plain_target(true, v4), "[::ffff:192.0.2.1]:53".parse::<SocketAddr>().unwrap());
        assert_eq!(plain_target(false, v4), v4);
        assert_eq!(plain_target(true, v6), v6);
    }

    /// The ways remembered are bounded: past [`MAX_WAYS`] they are all forgotten at once.
    #[test]
    fn ways_are_forgotten_all_at_once_when_too_many() {
        let mut map = HashMap::new();
        for n in 0..=MAX_WAYS {
            remember(&mut map, format!("host{n}:53"), n);
        }
        assert_eq!(map.len(), MAX_WAYS + 1);
        remember(&mut map, "last:53".to_owned(), 0);
        assert_eq!(map.len(), 1);
        assert_eq!(map.get("last:53"), Some(&0));
    }

    #[test]
    fn a_refused_way_is_not_judged() {
        let at: SocketAddr = "192.0.2.1:6881".parse().unwrap();
        assert_eq!(UdpWay::Plain(at).judged_at(), Some(at));
        assert_eq!(UdpWay::Refused.judged_at(), None);
    }

    /// A destination is judged by the first datagram a session sends there, and the
    /// judgements are bounded by [`MAX_JUDGED`].
    #[test]
    fn the_first_datagram_judges_a_destination() {
        let tracker = [0, 0, 0x04, 0x17, 0x27, 0x10, 0x19, 0x80, 0, 0, 0, 0, 1, 2, 3, 4];
        let (a, b): (SocketAddr, SocketAddr) = ("192.0.2.1:6881".parse().unwrap(), "192.0.2.2:443".parse().unwrap());
        let mut judged = Judged::default();
        assert!(judged.is_torrent(1, a, &tracker));
        assert!(judged.is_torrent(1, a, b"hello"), "judged by the first datagram");
        assert!(!judged.is_torrent(1, b, b"hello"));
        assert!(!judged.is_torrent(1, b, &tracker), "judged by the first datagram");
        assert!(judged.is_torrent(2, b, &tracker), "each session's judged on its own");
        for port in 0..MAX_JUDGED as u16 {
            judged.is_torrent(3, SocketAddr::new(a.ip(), port), b"hello");
        }
        assert!(judged.0.len() <= MAX_JUDGED);
        assert!(!judged.is_torrent(1, a, b"hello"), "forgotten once full, judged anew");
    }
}
