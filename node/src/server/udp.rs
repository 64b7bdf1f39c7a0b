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
use super::reach::{CONNECT_TIMEOUT, checked, lookup, proxy_is_local, resolve};
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
async fn routed_udp(address: &str, options: &Options, set: u16, routes: &Routes) -> Result<UdpWay, String> {
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
pub(super) async fn udp_relay(connection: quinn::Connection, counter: Arc<Counter>, live: Arc<Live>, options: Options) {
    let sessions: Arc<Mutex<HashMap<u32, Session>>> = Arc::default();
    let mut resolved: HashMap<String, SocketAddr> = HashMap::new();
    // A routed user's ways, by destination, with the rule set and routing they were found by.
    let mut routed: HashMap<String, (u16, usize, UdpWay)> = HashMap::new();
    // The guard's judgement of each session's destinations (true: BitTorrent), from the
    // first datagram the client sent there.
    let mut judged: HashMap<(u32, SocketAddr), bool> = HashMap::new();
    while let Ok(datagram) = connection.read_datagram().await {
        let Ok(message) = UdpMessage::parse(&datagram) else { continue };
        let id = message.session;
        let mut guard = sessions.lock().await;
        if !guard.contains_key(&id) {
            if guard.len() >= MAX_UDP_SESSIONS {
                continue;
            }
            let bind: SocketAddr = if options.allow_private { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("address");
            let Ok(socket) = UdpSocket::bind(bind).await.or(UdpSocket::bind("0.0.0.0:0").await) else { continue };
            let socket = Arc::new(socket);
            let back = Back::Socket(socket.clone());
            let task = tokio::spawn(udp_back(connection.clone(), back, id, counter.clone(), sessions.clone(), None));
            guard.insert(id, Session { socket, reassembly: Reassembly::default(), task, outs: HashMap::new() });
        }
        let session = guard.get_mut(&id).expect("inserted above");
        let Some((address, payload)) = session.reassembly.push(message) else { continue };
        let socket = session.socket.clone();
        drop(guard);
        let set = counter.rules();
        let way = if set == 0 {
            match resolved.get(&address) {
                Some(addr) => UdpWay::Plain(*addr),
                None => match resolve(&address, &options).await {
                    Ok(addr) => {
                        if resolved.len() > 1024 {
                            resolved.clear();
                        }
                        resolved.insert(address.clone(), addr);
                        UdpWay::Plain(addr)
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "UDP destination refused");
                        continue;
                    }
                },
            }
        } else {
            let routes = live.routes();
            let version = Arc::as_ptr(&routes) as usize;
            match routed.get(&address) {
                Some((was, at, way)) if *was == set && *at == version => way.clone(),
                _ => match routed_udp(&address, &options, set, &routes).await {
                    Ok(way) => {
                        if routed.len() > 1024 {
                            routed.clear();
                        }
                        routed.insert(address.clone(), (set, version, way.clone()));
                        way
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "UDP destination refused");
                        continue;
                    }
                },
            }
        };
        let judged_at = match &way {
            UdpWay::Refused => {
                live.refusals.routing.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            UdpWay::Plain(addr) => *addr,
            UdpWay::Out { addrs, .. } => addrs[0],
        };
        if counter.guard().torrent {
            if judged.len() >= MAX_JUDGED && !judged.contains_key(&(id, judged_at)) {
                judged.clear();
            }
            let torrent = *judged.entry((id, judged_at)).or_insert_with(|| crate::guard::is_torrent_datagram(&payload));
            if torrent {
                counter.refuse(&live, false);
                continue;
            }
        }
        if !counter.pace_up.admit(payload.len()) {
            continue;
        }
        let sent = match way {
            UdpWay::Plain(target) => {
                let target = if socket.local_addr().is_ok_and(|a| a.is_ipv6()) && target.is_ipv4() {
                    SocketAddr::new(IpAddr::V6(to_v6(target.ip())), target.port())
                } else {
                    target
                };
                socket.send_to(&payload, target).await.is_ok()
            }
            UdpWay::Out { via, addrs, name, port } => {
                let Some(back) = way_out(&connection, &sessions, id, &via, &counter).await else { continue };
                let target = crate::outbound::Target { domain: name.as_deref(), addrs: &addrs, port };
                let sent = match (&back, &via.kind) {
                    (Back::Socks(socks), _) => socks.send_to(&payload, &target).await.is_ok(),
                    (Back::Socket(socket), OutboundKind::Direct { mode, .. }) => {
                        match socket
                            .local_addr()
                            .and_then(|local| crate::outbound::udp_destination(*mode, &addrs, local))
                        {
                            Ok(to) => socket.send_to(&payload, to).await.is_ok(),
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
            UdpWay::Refused => false,
        };
        if sent {
            counter.sent(payload.len() as u64);
        }
    }
    sessions.lock().await.clear();
}

fn to_v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
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
