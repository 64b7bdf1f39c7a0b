//! The node's outbounds: how a client's TCP stream or UDP datagrams leave the node once a
//! routing rule (`hearth_shared::acl`) has chosen where they go. Straight out
//! ([`OutboundKind::Direct`]: an IP mode, source addresses, an interface), through a SOCKS5
//! proxy (RFC 1928 with RFC 1929 logins; UDP through UDP ASSOCIATE, [`SocksUdp`]), or through
//! an HTTP proxy's CONNECT (TCP only).
//!
//! Proxies are other people's servers: everything they send is read in bounded pieces, every
//! step waits at most the timeout it is given, and errors say which step failed, never
//! holding a password.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use hearth_shared::acl::{IpMode, Login, OutboundKind};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream, UdpSocket};
use zeroize::Zeroizing;

/// Where a client asked to go, as routing hands it to an outbound.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target<'a> {
    /// The name the client asked for, if it named one: proxies are sent the name (they
    /// resolve it themselves), with [`Target::port`].
    pub(crate) domain: Option<&'a str>,
    /// The addresses (with the port) the node resolved and checked against its safety
    /// policy: a direct outbound connects to these; a proxy is sent the first when there is
    /// no name.
    pub(crate) addrs: &'a [SocketAddr],
    /// The port the client asked for.
    pub(crate) port: u16,
}

/// Connects to `target` through `kind`, each attempt or handshake step within `timeout`,
/// and returns the stream ready to relay, with the bytes an HTTP proxy sent after its answer
/// (the caller writes them to the client first; empty for the other kinds).
pub(crate) async fn connect_tcp(
    kind: &OutboundKind,
    target: &Target<'_>,
    timeout: Duration,
) -> io::Result<(TcpStream, Bytes)> {
    match kind {
        OutboundKind::Direct { mode, interface, source_v4, source_v6 } => {
            let source = (*source_v4, *source_v6);
            Ok((connect_direct(*mode, interface.as_deref(), source, target.addrs, timeout).await?, Bytes::new()))
        }
        OutboundKind::Socks5 { server, login } => {
            let mut stream = socks5_open(server, login.as_ref(), timeout).await?;
            socks5_request(&mut stream, CONNECT, &Dest::of(target)?, timeout).await?;
            Ok((stream, Bytes::new()))
        }
        OutboundKind::Http { server, login } => http_connect(server, login.as_ref(), &Dest::of(target)?, timeout).await,
    }
}

/// The order a direct outbound tries `addrs` in under `mode` (IPv4-mapped addresses count as
/// IPv4), or an error when the mode leaves none.
fn ordered(mode: IpMode, addrs: &[SocketAddr]) -> io::Result<Vec<SocketAddr>> {
    let all = addrs.iter().map(|addr| SocketAddr::new(addr.ip().to_canonical(), addr.port()));
    let (v4, v6) = (all.clone().filter(SocketAddr::is_ipv4), all.clone().filter(SocketAddr::is_ipv6));
    let order: Vec<SocketAddr> = match mode {
        IpMode::Auto => all.collect(),
        IpMode::V4 => v4.collect(),
        IpMode::V6 => v6.collect(),
        IpMode::PreferV4 => v4.chain(v6).collect(),
        IpMode::PreferV6 => v6.chain(v4).collect(),
    };
    if order.is_empty() {
        let why = match mode {
            IpMode::V4 => "the outbound is IPv4 only and the target has no IPv4 address",
            IpMode::V6 => "the outbound is IPv6 only and the target has no IPv6 address",
            _ => "the target has no address",
        };
        return Err(io::Error::new(io::ErrorKind::HostUnreachable, why));
    }
    Ok(order)
}

/// `SO_BINDTODEVICE` on a tokio socket (Linux only; elsewhere an error).
#[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
macro_rules! bind_device {
    ($socket:expr, $interface:expr) => {
        $socket.bind_device(Some($interface.as_bytes()))
    };
}
/// `SO_BINDTODEVICE` on a tokio socket (Linux only; elsewhere an error).
#[cfg(not(any(target_os = "android", target_os = "fuchsia", target_os = "linux")))]
macro_rules! bind_device {
    ($socket:expr, $interface:expr) => {{
        let _ = (&$socket, $interface);
        Err(io::Error::new(io::ErrorKind::Unsupported, "binding to an interface works on Linux only"))
    }};
}

/// Wraps an error from binding to `interface` so that it names it.
fn device_error(interface: &str, e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("binding to interface {interface:?}: {e}"))
}

/// Wraps an error from binding to the source address `ip` so that it names it.
fn source_error(ip: IpAddr, e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("binding to source address {ip}: {e}"))
}

/// A direct outbound's TCP connection: `addrs` in `mode`'s order until one connects, each
/// from the source address of its family (if set) and out of `interface` (if set), each
/// attempt within `timeout`. The error is the last attempt's.
async fn connect_direct(
    mode: IpMode,
    interface: Option<&str>,
    (source_v4, source_v6): (Option<Ipv4Addr>, Option<Ipv6Addr>),
    addrs: &[SocketAddr],
    timeout: Duration,
) -> io::Result<TcpStream> {
    let mut last = None;
    for addr in ordered(mode, addrs)? {
        let attempt = async {
            let (socket, source) = match addr {
                SocketAddr::V4(_) => (TcpSocket::new_v4()?, source_v4.map(IpAddr::V4)),
                SocketAddr::V6(_) => (TcpSocket::new_v6()?, source_v6.map(IpAddr::V6)),
            };
            if let Some(interface) = interface {
                bind_device!(socket, interface).map_err(|e| device_error(interface, &e))?;
            }
            if let Some(ip) = source {
                socket.bind(SocketAddr::new(ip, 0)).map_err(|e| source_error(ip, &e))?;
            }
            socket.connect(addr).await
        };
        last = Some(match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => io::Error::new(e.kind(), format!("connecting to {addr}: {e}")),
            Err(_) => {
                io::Error::new(io::ErrorKind::TimedOut, format!("connecting to {addr}: no answer within {timeout:?}"))
            }
        });
    }
    Err(last.unwrap_or_else(|| io::Error::other("no address to connect to")))
}

/// Binds the UDP socket of a client's UDP session through a direct outbound. A source
/// address fixes the family (with both set, the mode's: IPv6 for `Auto`); `V4` and `V6` fix
/// it too; otherwise the socket is dual-stack `[::]:0` (or `0.0.0.0:0` where the host has no
/// IPv6). `interface`, if set, is bound with `SO_BINDTODEVICE`. [`udp_destination`] picks,
/// for each datagram, the target address this socket reaches.
pub(crate) async fn bind_udp_direct(
    mode: IpMode,
    interface: Option<&str>,
    source_v4: Option<Ipv4Addr>,
    source_v6: Option<Ipv6Addr>,
) -> io::Result<UdpSocket> {
    let v4 = IpAddr::V4(source_v4.unwrap_or(Ipv4Addr::UNSPECIFIED));
    let v6 = IpAddr::V6(source_v6.unwrap_or(Ipv6Addr::UNSPECIFIED));
    let ip = match (mode, source_v4, source_v6) {
        (IpMode::V6, ..) => v6,
        (IpMode::V4, ..) | (IpMode::PreferV4, Some(_), _) | (_, Some(_), None) => v4,
        _ => v6,
    };
    let socket = match UdpSocket::bind(SocketAddr::new(ip, 0)).await {
        Err(_) if ip == IpAddr::V6(Ipv6Addr::UNSPECIFIED) && mode != IpMode::V6 => {
            UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))).await
        }
        bound => bound,
    }
    .map_err(|e| source_error(ip, &e))?;
    if let Some(interface) = interface {
        bind_device!(socket, interface).map_err(|e| device_error(interface, &e))?;
    }
    Ok(socket)
}

/// The address a datagram for `addrs` goes to from a socket [`bind_udp_direct`] bound to
/// `local`: the first, in `mode`'s order, of a family the socket reaches. A dual-stack
/// socket (`[::]`) reaches IPv4 as IPv4-mapped addresses, from which the answers come too
/// (`IpAddr::to_canonical` turns them back).
pub(crate) fn udp_destination(mode: IpMode, addrs: &[SocketAddr], local: SocketAddr) -> io::Result<SocketAddr> {
    let dual = local.is_ipv6() && local.ip().is_unspecified();
    ordered(mode, addrs)?
        .into_iter()
        .find_map(|addr| match (addr, local) {
            (SocketAddr::V4(_), SocketAddr::V4(_)) | (SocketAddr::V6(_), SocketAddr::V6(_)) => Some(addr),
            (SocketAddr::V4(v4), SocketAddr::V6(_)) if dual => Some((v4.ip().to_ipv6_mapped(), v4.port()).into()),
            _ => None,
        })
        .ok_or_else(|| {
            let family = if local.is_ipv4() { "IPv4" } else { "IPv6" };
            io::Error::new(
                io::ErrorKind::HostUnreachable,
                format!("the outbound sends UDP over {family} alone and the target has no {family} address"),
            )
        })
}

/// What a proxy is asked to reach: a name it resolves, or an address.
#[derive(Clone, Copy, Debug)]
enum Dest<'a> {
    /// A host name and port.
    Domain(&'a str, u16),
    /// An address.
    Addr(SocketAddr),
}

impl<'a> Dest<'a> {
    /// The target's name if it has one (an IP literal counts as the address), else its first
    /// address. Names are letters, digits, `.`, `-` and `_` (at most 255), so none carries
    /// a line break into an HTTP head.
    fn of(target: &Target<'a>) -> io::Result<Self> {
        match target.domain {
            Some(name) => {
                let bare = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')).unwrap_or(name);
                if let Ok(ip) = bare.parse::<IpAddr>() {
                    return Ok(Dest::Addr(SocketAddr::new(ip, target.port)));
                }
                let fine = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_');
                if name.is_empty() || name.len() > 255 || !name.bytes().all(|b| fine(&b)) {
                    return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a host name: {name:?}")));
                }
                Ok(Dest::Domain(name, target.port))
            }
            None => target.addrs.first().map(|addr| Dest::Addr(*addr)).ok_or_else(|| {
                io::Error::new(io::ErrorKind::HostUnreachable, "the target has neither a name nor an address")
            }),
        }
    }

    /// Appends RFC 1928's ATYP, address and port.
    fn put(&self, out: &mut Vec<u8>) {
        let port = match *self {
            // `of` holds names to 255 bytes.
            Dest::Domain(name, port) => {
                out.extend([3, name.len() as u8]);
                out.extend_from_slice(name.as_bytes());
                port
            }
            Dest::Addr(SocketAddr::V4(addr)) => {
                out.push(1);
                out.extend(addr.ip().octets());
                addr.port()
            }
            Dest::Addr(SocketAddr::V6(addr)) => {
                out.push(4);
                out.extend(addr.ip().octets());
                addr.port()
            }
        };
        out.extend(port.to_be_bytes());
    }
}

/// Runs one handshake step within `timeout`; an error or the timeout says `what` it was.
async fn step<T>(timeout: Duration, what: &str, fut: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
            Err(io::Error::new(e.kind(), format!("{what}: the connection closed")))
        }
        Ok(Err(e)) => Err(io::Error::new(e.kind(), format!("{what}: {e}"))),
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, format!("{what}: no answer within {timeout:?}"))),
    }
}

/// Reads exactly `N` bytes.
async fn read_array<const N: usize>(stream: &mut (impl AsyncRead + Unpin)) -> io::Result<[u8; N]> {
    let mut bytes = [0; N];
    stream.read_exact(&mut bytes).await?;
    Ok(bytes)
}

/// Connects to a proxy's `server` (`host:port`, resolved here), trying its addresses in
/// turn, each within `timeout`. `what` names the proxy in errors.
async fn connect_server(server: &str, what: &str, timeout: Duration) -> io::Result<TcpStream> {
    let addrs = step(timeout, &format!("resolving the {what} {server}"), tokio::net::lookup_host(server)).await?;
    let mut last = io::Error::new(io::ErrorKind::NotFound, format!("the {what} {server} resolves to no address"));
    for addr in addrs {
        match step(timeout, &format!("connecting to the {what} {server} ({addr})"), TcpStream::connect(addr)).await {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The SOCKS5 command that opens a TCP connection.
const CONNECT: u8 = 1;
/// The SOCKS5 command that opens a UDP relay.
const UDP_ASSOCIATE: u8 = 3;

/// Connects to a SOCKS5 proxy and gets past its greeting, offering no authentication, and
/// username and password when there is a `login` (RFC 1929).
async fn socks5_open(server: &str, login: Option<&Login>, timeout: Duration) -> io::Result<TcpStream> {
    let mut stream = connect_server(server, "SOCKS5 proxy", timeout).await?;
    let greeting: &[u8] = if login.is_some() { &[5, 2, 0, 2] } else { &[5, 1, 0] };
    step(timeout, "sending the SOCKS5 greeting", stream.write_all(greeting)).await?;
    let [version, method] =
        step(timeout, "reading the SOCKS5 proxy's answer to the greeting", read_array(&mut stream)).await?;
    let refuse = |why: String| Err(io::Error::new(io::ErrorKind::PermissionDenied, why));
    match (version, method, login) {
        (5, 0, _) => Ok(stream),
        (5, 2, Some(login)) => {
            socks5_login(&mut stream, login, timeout).await?;
            Ok(stream)
        }
        (5, 2, None) => refuse("the SOCKS5 proxy asks for a username and password, and the outbound has none".into()),
        (5, 0xff, _) => {
            let offered = if login.is_some() { "no authentication, username/password" } else { "no authentication" };
            refuse(format!("the SOCKS5 proxy accepts none of the authentication methods offered ({offered})"))
        }
        (5, other, _) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the SOCKS5 proxy chose authentication method {other:#04x}, which was not offered"),
        )),
        (other, ..) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{server} is not a SOCKS5 proxy: it answered the greeting with version {other}"),
        )),
    }
}

/// RFC 1929's username/password subnegotiation.
async fn socks5_login(stream: &mut TcpStream, login: &Login, timeout: Duration) -> io::Result<()> {
    let (user, pass) = (login.username.as_bytes(), login.password.as_bytes());
    let (Ok(user_len), Ok(pass_len)) = (u8::try_from(user.len()), u8::try_from(pass.len())) else {
        let why = "a SOCKS5 login's username and password are at most 255 bytes each";
        return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
    };
    let mut message = Zeroizing::new(Vec::with_capacity(3 + user.len() + pass.len()));
    message.extend([1, user_len]);
    message.extend_from_slice(user);
    message.push(pass_len);
    message.extend_from_slice(pass);
    step(timeout, "sending the SOCKS5 login", stream.write_all(&message)).await?;
    let refused =
        |how: &str| io::Error::new(io::ErrorKind::PermissionDenied, format!("the SOCKS5 proxy refused the login{how}"));
    match step(timeout, "reading the SOCKS5 proxy's answer to the login", read_array(stream)).await {
        Ok([_, 0]) => Ok(()),
        Ok(_) => Err(refused("")),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(refused(" (it closed the connection)")),
        Err(e) => Err(e),
    }
}

/// What a SOCKS5 reply code means (RFC 1928 section 6), and the error kind that fits it.
fn socks5_reply_meaning(code: u8) -> (&'static str, io::ErrorKind) {
    use io::ErrorKind as K;
    match code {
        1 => ("general SOCKS server failure", K::Other),
        2 => ("connection not allowed by ruleset", K::PermissionDenied),
        3 => ("network unreachable", K::NetworkUnreachable),
        4 => ("host unreachable", K::HostUnreachable),
        5 => ("connection refused", K::ConnectionRefused),
        6 => ("TTL expired", K::TimedOut),
        7 => ("command not supported", K::Unsupported),
        8 => ("address type not supported", K::Unsupported),
        _ => ("unassigned", K::Other),
    }
}

/// An address a SOCKS5 proxy reports.
#[derive(Debug)]
enum Reported {
    /// An address.
    Addr(SocketAddr),
    /// A name (at most 255 bytes) and port.
    Domain(String, u16),
}

/// Sends a SOCKS5 request (`command` for `dest`) and reads the reply through its bound
/// address, leaving the stream at the data; the reported address is returned.
async fn socks5_request(
    stream: &mut TcpStream,
    command: u8,
    dest: &Dest<'_>,
    timeout: Duration,
) -> io::Result<Reported> {
    let name = if command == CONNECT { "CONNECT" } else { "UDP ASSOCIATE" };
    let mut request = Vec::with_capacity(262);
    request.extend([5, command, 0]);
    dest.put(&mut request);
    step(timeout, &format!("sending SOCKS5 {name}"), stream.write_all(&request)).await?;
    let what = format!("reading the SOCKS5 proxy's answer to {name}");
    let [version, code, _, kind] = step(timeout, &what, read_array(stream)).await?;
    if version != 5 {
        let why = format!("the SOCKS5 proxy answered {name} with version {version}");
        return Err(io::Error::new(io::ErrorKind::InvalidData, why));
    }
    if code != 0 {
        let (meaning, kind) = socks5_reply_meaning(code);
        return Err(io::Error::new(kind, format!("the SOCKS5 proxy answered {name} with {code:#04x} ({meaning})")));
    }
    step(timeout, &what, async {
        Ok(match kind {
            1 => {
                let [a, b, c, d, p, q] = read_array(stream).await?;
                Reported::Addr((Ipv4Addr::new(a, b, c, d), u16::from_be_bytes([p, q])).into())
            }
            4 => {
                let bytes: [u8; 18] = read_array(stream).await?;
                let mut ip = [0; 16];
                ip.copy_from_slice(&bytes[..16]);
                Reported::Addr((Ipv6Addr::from(ip), u16::from_be_bytes([bytes[16], bytes[17]])).into())
            }
            3 => {
                let [len] = read_array(stream).await?;
                let mut name = [0; 257];
                let name = &mut name[..usize::from(len) + 2];
                stream.read_exact(name).await?;
                let (host, port) = name.split_at(usize::from(len));
                Reported::Domain(String::from_utf8_lossy(host).into_owned(), u16::from_be_bytes([port[0], port[1]]))
            }
            other => {
                let why = format!("the answer has address type {other:#04x}");
                return Err(io::Error::new(io::ErrorKind::InvalidData, why));
            }
        })
    })
    .await
}

/// A UDP association through a SOCKS5 proxy (UDP ASSOCIATE), which carries one client's
/// UDP session when a rule sends it through the proxy. It lives while the TCP control
/// connection it holds is open: [`SocksUdp::closed`] says when the proxy ends it.
#[derive(Debug)]
pub(crate) struct SocksUdp {
    /// The control connection; dropping it ends the association.
    control: TcpStream,
    /// The local socket datagrams go to and come from the relay through.
    socket: UdpSocket,
    /// The proxy's relay.
    relay: SocketAddr,
}

impl SocksUdp {
    /// Opens an association with the SOCKS5 proxy `server` (`host:port`), logging in with
    /// `login` if it asks, each step within `timeout`. The client's address is sent as
    /// `0.0.0.0:0` (not yet known, RFC 1928); a relay host of `0.0.0.0` or `::` means the
    /// proxy's own address. The local socket is of the relay's family.
    pub(crate) async fn associate(server: &str, login: Option<&Login>, timeout: Duration) -> io::Result<Self> {
        let mut control = socks5_open(server, login, timeout).await?;
        let unknown = Dest::Addr((Ipv4Addr::UNSPECIFIED, 0).into());
        let relay = match socks5_request(&mut control, UDP_ASSOCIATE, &unknown, timeout).await? {
            Reported::Addr(addr) => addr,
            Reported::Domain(host, port) => {
                let what = format!("resolving the SOCKS5 proxy's UDP relay {host:?}");
                let mut addrs = step(timeout, &what, tokio::net::lookup_host((host.as_str(), port))).await?;
                addrs.next().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{what}: no address")))?
            }
        };
        let relay =
            if relay.ip().is_unspecified() { SocketAddr::new(control.peer_addr()?.ip(), relay.port()) } else { relay };
        if relay.port() == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the SOCKS5 proxy gave its UDP relay port 0"));
        }
        let local: IpAddr = if relay.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
        let socket = UdpSocket::bind((local, 0)).await?;
        Ok(Self { control, socket, relay })
    }

    /// Sends `payload` to `target` (its name if it has one, else its first address) through
    /// the relay, behind RFC 1928's UDP header (no fragmentation).
    pub(crate) async fn send_to(&self, payload: &[u8], target: &Target<'_>) -> io::Result<()> {
        let mut datagram = Vec::with_capacity(262 + payload.len());
        datagram.extend([0, 0, 0]);
        Dest::of(target)?.put(&mut datagram);
        datagram.extend_from_slice(payload);
        self.socket.send_to(&datagram, self.relay).await?;
        Ok(())
    }

    /// Receives the next datagram from the relay into `buf`: the payload's length (moved to
    /// the start of `buf`) and its source. Datagrams from elsewhere, fragments, malformed
    /// ones and those whose source is a name are dropped. `buf` must hold the header too (up
    /// to 22 bytes for an address), or the payload's end is cut off.
    pub(crate) async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        loop {
            let (len, from) = self.socket.recv_from(buf).await?;
            if from != self.relay {
                continue;
            }
            if let Some((start, source)) = parse_udp_header(&buf[..len]) {
                buf.copy_within(start..len, 0);
                return Ok((len - start, source));
            }
        }
    }

    /// Resolves when the proxy closes the control connection (or it fails), which ends the
    /// association: the session through it should end then. Whatever the proxy sends on it is
    /// read in small pieces and ignored. Cancel-safe, and several callers may wait at once.
    pub(crate) async fn closed(&self) {
        let mut scrap = [0; 64];
        loop {
            if self.control.readable().await.is_err() {
                return;
            }
            match self.control.try_read(&mut scrap) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }

    /// The proxy's relay, where datagrams go.
    #[cfg(test)]
    pub(crate) fn relay(&self) -> SocketAddr {
        self.relay
    }
}

/// Parses RFC 1928's UDP header at the start of `datagram`: where the payload starts and its
/// source; `None` for a fragment, a source that is a name, or a malformed header.
fn parse_udp_header(datagram: &[u8]) -> Option<(usize, SocketAddr)> {
    let (&[_, _, fragment, kind], rest) = datagram.split_first_chunk::<4>()?;
    match (fragment, kind) {
        (0, 1) => {
            let (&[a, b, c, d, p, q], _) = rest.split_first_chunk::<6>()?;
            Some((10, (Ipv4Addr::new(a, b, c, d), u16::from_be_bytes([p, q])).into()))
        }
        (0, 4) => {
            let (bytes, _) = rest.split_first_chunk::<18>()?;
            let mut ip = [0; 16];
            ip.copy_from_slice(&bytes[..16]);
            Some((22, (Ipv6Addr::from(ip), u16::from_be_bytes([bytes[16], bytes[17]])).into()))
        }
        _ => None,
    }
}

/// The longest answer head an HTTP proxy may send to CONNECT.
const MAX_HEAD: usize = 16 * 1024;

/// Opens a tunnel to `dest` through the HTTP proxy `server` (CONNECT, with Basic
/// authentication when there is a `login`): the stream, and the bytes that came after the
/// answer's head (the target's, to be passed on first).
async fn http_connect(
    server: &str,
    login: Option<&Login>,
    dest: &Dest<'_>,
    timeout: Duration,
) -> io::Result<(TcpStream, Bytes)> {
    let mut stream = connect_server(server, "HTTP proxy", timeout).await?;
    let authority = match dest {
        Dest::Domain(name, port) => format!("{name}:{port}"),
        Dest::Addr(addr) => addr.to_string(),
    };
    let mut head = Zeroizing::new(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"));
    if let Some(login) = login {
        let credentials = Zeroizing::new(format!("{}:{}", login.username, login.password));
        head.push_str("Proxy-Authorization: Basic ");
        base64::engine::general_purpose::STANDARD.encode_string(credentials.as_bytes(), &mut head);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    step(timeout, "sending CONNECT to the HTTP proxy", stream.write_all(head.as_bytes())).await?;
    let mut buf = vec![0; MAX_HEAD];
    let (end, len) = step(timeout, "reading the HTTP proxy's answer to CONNECT", async {
        let mut len = 0;
        loop {
            if let Some(at) = buf[..len].windows(4).position(|w| w == b"\r\n\r\n") {
                return Ok((at + 4, len));
            }
            if len == buf.len() {
                let why = format!("the head is longer than {} KiB", MAX_HEAD / 1024);
                return Err(io::Error::new(io::ErrorKind::InvalidData, why));
            }
            match stream.read(&mut buf[len..]).await? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => len += n,
            }
        }
    })
    .await?;
    let line = &buf[..buf.iter().position(|b| *b == b'\r').unwrap_or(end)];
    let status = line.split(|b| *b == b' ').nth(1).and_then(|code| std::str::from_utf8(code).ok()?.parse::<u16>().ok());
    let shown: String =
        String::from_utf8_lossy(line).chars().take(200).map(|c| if c.is_control() { '?' } else { c }).collect();
    match status {
        Some(200..=299) if line.starts_with(b"HTTP/1.") => Ok((stream, Bytes::copy_from_slice(&buf[end..len]))),
        Some(code) if line.starts_with(b"HTTP/1.") => {
            let (kind, hint) = match (code, login) {
                (407, None) => (io::ErrorKind::PermissionDenied, " (it asks for a login, and the outbound has none)"),
                (407, Some(_)) => (io::ErrorKind::PermissionDenied, " (it refused the login)"),
                _ => (io::ErrorKind::ConnectionRefused, ""),
            };
            Err(io::Error::new(kind, format!("the HTTP proxy answered CONNECT with {shown:?}{hint}")))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{server} is not an HTTP proxy: it answered {shown:?}"),
        )),
    }
}

#[cfg(test)]
mod tests;
