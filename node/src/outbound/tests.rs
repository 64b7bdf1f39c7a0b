//! The outbounds against real peers: microsocks (SOCKS5 CONNECT, with and without a login)
//! and Dante (UDP ASSOCIATE), plus in-test stand-ins where a real proxy cannot be made to
//! misbehave on purpose (an HTTP proxy, a SOCKS5 relay that answers `0.0.0.0`). A missing
//! peer fails its test, saying what to install; it never skips it.

use std::path::Path;
use std::process::Stdio;

use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

use super::*;

/// How long any step may take here.
const T: Duration = Duration::from_secs(5);

/// The path of a peer these tests need, failing when it is not installed.
fn tool<'a>(path: &'a str, package: &str) -> &'a str {
    assert!(Path::new(path).exists(), "{path} is missing: install it (`apt-get install {package}`) to run these tests");
    path
}

/// Starts `program` with the arguments `args` gives for a free port of 127.0.0.1 and waits
/// until it accepts there; it is killed when the child is dropped.
async fn spawn_proxy(program: &str, args: impl Fn(u16) -> Vec<String>) -> (Child, u16) {
    for _ in 0..5 {
        let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        let mut child = Command::new(program)
            .args(args(port))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {program}: {e}"));
        for _ in 0..100 {
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return (child, port);
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = child.kill().await;
    }
    panic!("{program} did not start listening");
}

/// microsocks on a free port, requiring `login` (username, password) if given.
async fn microsocks(login: Option<(&str, &str)>) -> (Child, String) {
    let program = tool("/usr/bin/microsocks", "microsocks");
    let (child, port) = spawn_proxy(program, |port| {
        let mut args: Vec<String> = vec!["-i".into(), "127.0.0.1".into(), "-p".into(), port.to_string()];
        if let Some((user, pass)) = login {
            args.extend(["-u".into(), user.into(), "-P".into(), pass.into()]);
        }
        args
    })
    .await;
    (child, format!("127.0.0.1:{port}"))
}

/// Dante (no authentication, CONNECT and UDP ASSOCIATE) on a free port, its files in `dir`.
async fn dante(dir: &Path) -> (Child, String) {
    let program = tool("/usr/sbin/danted", "dante-server");
    let root =
        std::fs::read_to_string("/proc/self/status").is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:\t0\t")));
    let users = if root { "user.privileged: root\nuser.unprivileged: nobody\n" } else { "" };
    let (child, port) = spawn_proxy(program, |port| {
        let (conf, log, pid) =
            (dir.join(format!("{port}.conf")), dir.join(format!("{port}.log")), dir.join(format!("{port}.pid")));
        let text = format!(
            "logoutput: {}\ninternal: 127.0.0.1 port = {port}\nexternal: 127.0.0.1\nsocksmethod: none\n\
             clientmethod: none\n{users}client pass {{ from: 0.0.0.0/0 to: 0.0.0.0/0 }}\n\
             socks pass {{ from: 0.0.0.0/0 to: 0.0.0.0/0 command: connect udpassociate udpreply }}\n",
            log.display()
        );
        std::fs::write(&conf, text).unwrap();
        vec!["-f".into(), conf.display().to_string(), "-p".into(), pid.display().to_string()]
    })
    .await;
    (child, format!("127.0.0.1:{port}"))
}

/// A TCP echo server on `addr`.
async fn tcp_echo(addr: SocketAddr) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut reader, mut writer) = stream.split();
                let _ = tokio::io::copy(&mut reader, &mut writer).await;
            });
        }
    });
    Ok(local)
}

/// A TCP echo server on the same port of 127.0.0.1 and ::1 (for a target named `localhost`,
/// whichever the proxy resolves it to); its IPv4 address.
async fn dual_echo() -> SocketAddr {
    for _ in 0..20 {
        let v4 = tcp_echo((Ipv4Addr::LOCALHOST, 0).into()).await.unwrap();
        if tcp_echo((Ipv6Addr::LOCALHOST, v4.port()).into()).await.is_ok() {
            return v4;
        }
    }
    panic!("no port free on both 127.0.0.1 and ::1");
}

/// A UDP echo socket on 127.0.0.1.
async fn udp_echo() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let local = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0; 2048];
        while let Ok((len, from)) = socket.recv_from(&mut buf).await {
            let _ = socket.send_to(&buf[..len], from).await;
        }
    });
    local
}

/// Checks that bytes written to `stream` come back.
async fn round_trip(stream: &mut TcpStream) {
    stream.write_all(b"through the outbound").await.unwrap();
    let mut back = [0; 20];
    tokio::time::timeout(T, stream.read_exact(&mut back)).await.unwrap().unwrap();
    assert_eq!(&back, b"through the outbound");
}

/// A target by address.
fn at(addrs: &[SocketAddr]) -> Target<'_> {
    Target { domain: None, addrs, port: addrs[0].port() }
}

/// A direct outbound.
fn direct(mode: IpMode, interface: Option<&str>, source_v4: Option<Ipv4Addr>) -> OutboundKind {
    OutboundKind::Direct { mode, interface: interface.map(str::to_owned), source_v4, source_v6: None }
}

/// A port on 127.0.0.1 nothing listens on (just freed).
async fn closed_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap()
}

#[test]
fn the_mode_orders_the_addresses() {
    let (v4, v6): (SocketAddr, SocketAddr) = ("192.0.2.1:80".parse().unwrap(), "[2001:db8::1]:80".parse().unwrap());
    let mapped: SocketAddr = "[::ffff:192.0.2.1]:80".parse().unwrap();
    assert_eq!(ordered(IpMode::Auto, &[v6, v4]).unwrap(), [v6, v4]);
    assert_eq!(ordered(IpMode::PreferV4, &[v6, mapped]).unwrap(), [v4, v6]);
    assert_eq!(ordered(IpMode::PreferV6, &[v4, v6]).unwrap(), [v6, v4]);
    assert_eq!(ordered(IpMode::V4, &[v6, v4]).unwrap(), [v4]);
    let local: SocketAddr = "[::]:5000".parse().unwrap();
    assert_eq!(udp_destination(IpMode::V4, &[v4], local).unwrap(), mapped);
    assert!(udp_destination(IpMode::Auto, &[v6], "0.0.0.0:1".parse().unwrap()).is_err());
}

#[tokio::test]
async fn direct_v6_alone_refuses_an_ipv4_only_target() {
    let echo = tcp_echo((Ipv4Addr::LOCALHOST, 0).into()).await.unwrap();
    let e = connect_tcp(&direct(IpMode::V6, None, None), &at(&[echo]), T).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::HostUnreachable);
    assert!(e.to_string().contains("IPv6 only and the target has no IPv6 address"), "{e}");
}

#[tokio::test]
async fn direct_binds_the_source_and_interface_and_tries_each_address() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    let refused = closed_port().await;
    let kind = direct(IpMode::Auto, Some("lo"), Some(Ipv4Addr::new(127, 0, 0, 2)));
    let (_stream, leftover) = connect_tcp(&kind, &at(&[refused, target]), T).await.unwrap();
    assert!(leftover.is_empty());
    let (_, peer) = listener.accept().await.unwrap();
    assert_eq!(peer.ip(), Ipv4Addr::new(127, 0, 0, 2));

    let kind = direct(IpMode::Auto, Some("hearthnope0"), None);
    let e = connect_tcp(&kind, &at(&[target]), T).await.unwrap_err();
    assert!(e.to_string().contains("interface \"hearthnope0\""), "{e}");
}

#[tokio::test]
async fn direct_udp_binds_the_source_and_reaches_the_target() {
    let echo = udp_echo().await;
    for (mode, source) in [(IpMode::V4, Some(Ipv4Addr::new(127, 0, 0, 3))), (IpMode::Auto, None)] {
        let socket = bind_udp_direct(mode, Some("lo"), source, None).await.unwrap();
        let local = socket.local_addr().unwrap();
        if let Some(source) = source {
            assert_eq!(local.ip(), source);
        }
        let to = udp_destination(mode, &[echo], local).unwrap();
        socket.send_to(b"datagram", to).await.unwrap();
        let mut buf = [0; 64];
        let (len, from) = tokio::time::timeout(T, socket.recv_from(&mut buf)).await.unwrap().unwrap();
        assert_eq!((&buf[..len], SocketAddr::new(from.ip().to_canonical(), from.port())), (&b"datagram"[..], echo));
    }
}

#[tokio::test]
async fn socks5_connects_through_microsocks_by_address_and_by_name() {
    let (_proxy, server) = microsocks(None).await;
    let echo = dual_echo().await;
    let kind = OutboundKind::Socks5 { server, login: None };
    let (mut stream, _) = connect_tcp(&kind, &at(&[echo]), T).await.unwrap();
    round_trip(&mut stream).await;
    let by_name = Target { domain: Some("localhost"), addrs: &[], port: echo.port() };
    let (mut stream, _) = connect_tcp(&kind, &by_name, T).await.unwrap();
    round_trip(&mut stream).await;

    let e = connect_tcp(&kind, &at(&[closed_port().await]), T).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
    assert!(e.to_string().contains("answered CONNECT with 0x05 (connection refused)"), "{e}");
}

#[tokio::test]
async fn socks5_logs_in_to_microsocks_and_keeps_a_wrong_password_out_of_errors() {
    let (_proxy, server) = microsocks(Some(("hearth", "right-pw-4711"))).await;
    let echo = tcp_echo((Ipv4Addr::LOCALHOST, 0).into()).await.unwrap();
    let login = |password: &str| Some(Login { username: "hearth".into(), password: password.into() });
    let kind = OutboundKind::Socks5 { server: server.clone(), login: login("right-pw-4711") };
    let (mut stream, _) = connect_tcp(&kind, &at(&[echo]), T).await.unwrap();
    round_trip(&mut stream).await;

    let kind = OutboundKind::Socks5 { server: server.clone(), login: login("wrong-pw-0815") };
    let e = connect_tcp(&kind, &at(&[echo]), T).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("the SOCKS5 proxy refused the login"), "{e}");
    assert!(!format!("{e} {e:?}").contains("-pw-"), "{e:?}");

    let e = connect_tcp(&OutboundKind::Socks5 { server, login: None }, &at(&[echo]), T).await.unwrap_err();
    assert!(e.to_string().contains("accepts none of the authentication methods"), "{e}");
}

#[tokio::test]
async fn socks5_udp_and_connect_through_dante() {
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, server) = dante(dir.path()).await;
    let echo = udp_echo().await;
    let udp = SocksUdp::associate(&server, None, T).await.unwrap();
    for payload in [&b"first"[..], &[7; 1200][..]] {
        udp.send_to(payload, &at(&[echo])).await.unwrap();
        let mut buf = [0; 2048];
        let (len, from) = tokio::time::timeout(T, udp.recv_from(&mut buf)).await.unwrap().unwrap();
        assert_eq!((&buf[..len], from), (payload, echo));
    }

    let tcp = tcp_echo((Ipv4Addr::LOCALHOST, 0).into()).await.unwrap();
    let (mut stream, _) = connect_tcp(&OutboundKind::Socks5 { server, login: None }, &at(&[tcp]), T).await.unwrap();
    round_trip(&mut stream).await;
}

#[tokio::test]
async fn socks5_udp_takes_the_proxy_address_for_0000_filters_datagrams_and_sees_the_close() {
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let relay_port = relay.local_addr().unwrap().port();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap().to_string();
    let (close, closing) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut control, _) = listener.accept().await.unwrap();
        let greeting: [u8; 3] = read_array(&mut control).await.unwrap();
        assert_eq!(greeting, [5, 1, 0]);
        control.write_all(&[5, 0]).await.unwrap();
        let request: [u8; 10] = read_array(&mut control).await.unwrap();
        assert_eq!(request, [5, UDP_ASSOCIATE, 0, 1, 0, 0, 0, 0, 0, 0]);
        let port = relay_port.to_be_bytes();
        control.write_all(&[5, 0, 0, 1, 0, 0, 0, 0, port[0], port[1]]).await.unwrap();
        let _ = closing.await;
    });
    let udp = SocksUdp::associate(&server, None, T).await.unwrap();
    assert_eq!(udp.relay(), SocketAddr::from((Ipv4Addr::LOCALHOST, relay_port)));

    let name = Target { domain: Some("example.com"), addrs: &[], port: 53 };
    udp.send_to(b"query", &name).await.unwrap();
    let mut buf = [0; 64];
    let (len, client) = relay.recv_from(&mut buf).await.unwrap();
    assert_eq!(&buf[..len], b"\0\0\0\x03\x0bexample.com\0\x35query");

    let stranger = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let good = b"\0\0\0\x01\xc0\x00\x02\x07\x00\x35answer";
    stranger.send_to(b"\0\0\0\x01\xc0\x00\x02\x07\x00\x35forged", client).await.unwrap();
    relay.send_to(b"\0\0\x01\x01\xc0\x00\x02\x07\x00\x35fragment", client).await.unwrap();
    relay.send_to(b"\0\0\0\x03\x0bexample.com\0\x35named", client).await.unwrap();
    relay.send_to(b"\0\0\0\x01\xc0\x00", client).await.unwrap();
    relay.send_to(good, client).await.unwrap();
    let (len, from) = tokio::time::timeout(T, udp.recv_from(&mut buf)).await.unwrap().unwrap();
    assert_eq!((&buf[..len], from), (&b"answer"[..], "192.0.2.7:53".parse().unwrap()));

    let closed = udp.closed();
    tokio::pin!(closed);
    assert!(tokio::time::timeout(Duration::from_millis(200), &mut closed).await.is_err(), "closed while open");
    drop(close);
    tokio::time::timeout(T, closed).await.expect("the closed control connection went unnoticed");
}

/// A one-connection HTTP proxy on 127.0.0.1: sends the CONNECT head it reads on the channel,
/// answers `answer` and, if it is a 200, relays to the authority it was asked for.
async fn http_proxy(answer: &'static [u8]) -> (String, oneshot::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap().to_string();
    let (report, head) = oneshot::channel();
    tokio::spawn(async move {
        let (mut client, _) = listener.accept().await.unwrap();
        let mut bytes = Vec::new();
        while !bytes.ends_with(b"\r\n\r\n") && bytes.len() < MAX_HEAD {
            let [byte] = read_array(&mut client).await.unwrap();
            bytes.push(byte);
        }
        let text = String::from_utf8(bytes).unwrap();
        let authority = text.split(' ').nth(1).unwrap().to_owned();
        let _ = report.send(text);
        let _ = client.write_all(answer).await;
        if answer.starts_with(b"HTTP/1.1 200") {
            let mut target = TcpStream::connect(authority.as_str()).await.unwrap();
            let _ = tokio::io::copy_bidirectional(&mut client, &mut target).await;
        }
    });
    (server, head)
}

#[tokio::test]
async fn http_connect_keeps_the_bytes_after_the_answer_and_relays() {
    let (server, head) = http_proxy(b"HTTP/1.1 200 Connection established\r\n\r\nearly bytes").await;
    let echo = tcp_echo((Ipv4Addr::LOCALHOST, 0).into()).await.unwrap();
    let login = Some(Login { username: "user".into(), password: "pass word".into() });
    let (mut stream, leftover) = connect_tcp(&OutboundKind::Http { server, login }, &at(&[echo]), T).await.unwrap();
    assert_eq!(&leftover[..], b"early bytes");
    round_trip(&mut stream).await;
    let port = echo.port();
    let expected = format!(
        "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: Basic dXNlcjpwYXNzIHdvcmQ=\r\n\r\n"
    );
    assert_eq!(head.await.unwrap(), expected);

    let (server, head) = http_proxy(b"HTTP/1.1 200 OK\r\nVia: test\r\n\r\n").await;
    let v6: SocketAddr = "[::1]:443".parse().unwrap();
    let kind = OutboundKind::Http { server, login: None };
    let e = connect_tcp(&kind, &at(&[v6]), T).await;
    assert!(head.await.unwrap().starts_with("CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n"), "{e:?}");
    let evil = Target { domain: Some("a.example\r\nX-Evil: 1"), addrs: &[v6], port: 443 };
    assert_eq!(connect_tcp(&kind, &evil, T).await.unwrap_err().kind(), io::ErrorKind::InvalidInput);
}

#[tokio::test]
async fn http_connect_refusals_name_the_status_line() {
    let answer = b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\n\r\n";
    let (server, _head) = http_proxy(answer).await;
    let login = Some(Login { username: "user".into(), password: "secret-pw-99".into() });
    let e = connect_tcp(&OutboundKind::Http { server, login }, &at(&[closed_port().await]), T).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    let text = e.to_string();
    assert!(text.contains("\"HTTP/1.1 407 Proxy Authentication Required\" (it refused the login)"), "{text}");
    assert!(!text.contains("realm") && !text.contains("secret-pw"), "{text}");

    let (server, _head) = http_proxy(&[b'x'; MAX_HEAD + 10]).await;
    let e = connect_tcp(&OutboundKind::Http { server, login: None }, &at(&[closed_port().await]), T).await.unwrap_err();
    assert!(e.to_string().contains("longer than 16 KiB"), "{e}");
}
