//! Running the real `hearth-node` for a test, and the real sing-box client in front of it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use hearth_shared::keys::SecretKey;
use hearth_shared::trust::{RoleKeys, Trust};
use hearth_shared::wire;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::control_sim::ControlSim;

/// A node's state directory as enrollment leaves it: settings (plus `extra` lines of
/// `node.toml`) and the trust in `sim`'s keys.
pub fn state_dir(dir: &Path, sim: &ControlSim, node: u64) -> Result<()> {
    state_dir_with(dir, sim, node, "")
}

/// [`state_dir`] with more settings.
pub fn state_dir_with(dir: &Path, sim: &ControlSim, node: u64, extra: &str) -> Result<()> {
    write_state_dir(dir, sim, node, "allow_private = true\n", extra)
}

/// [`state_dir_with`] for a node that keeps the default outbound policy: clients may not
/// reach loopback, private or link-local addresses through it.
pub fn state_dir_public_only(dir: &Path, sim: &ControlSim, node: u64, extra: &str) -> Result<()> {
    write_state_dir(dir, sim, node, "", extra)
}

fn write_state_dir(dir: &Path, sim: &ControlSim, node: u64, private: &str, extra: &str) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("node.toml"),
        format!("node = {node}\nlisten = \"127.0.0.1:0\"\n{private}metrics_listen = \"127.0.0.1:0\"\n{extra}"),
    )?;
    let mut trust = Trust::new(RoleKeys::single(sim.root.public()));
    trust.accept_chain(&sim.key_records(), crate::control_sim::now())?;
    std::fs::write(dir.join("trust.bin"), wire::encode(&trust))?;
    Ok(())
}

/// Writes a node's own key into its state directory as enrollment does (`node.key`, 0600).
pub fn save_node_key(dir: &Path, key: &SecretKey) -> Result<()> {
    crate::write_private(&dir.join("node.key"), key.to_file_text().as_bytes())
}

/// A running `hearth-node serve`.
pub struct NodeProcess {
    child: Child,
    /// The UDP address it listens on.
    pub addr: std::net::SocketAddr,
    state: PathBuf,
    lines: std::sync::mpsc::Receiver<String>,
}

impl NodeProcess {
    /// Starts `serve` on a state directory, logging warnings (or what `HEARTH_SUITE_NODE_LOG`
    /// asks for, a log filter: the benchmark suite's).
    pub fn start(state: &Path) -> Result<NodeProcess> {
        let mut child = crate::cgroup::command(&crate::binary("hearth-node")?)
            .arg("serve")
            .arg("--state")
            .arg(state)
            .env("HEARTH_LOG", std::env::var("HEARTH_SUITE_NODE_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting hearth-node")?;
        let rx = crate::stdout_lines(&mut child);
        let line = rx.recv_timeout(Duration::from_secs(60)).context("hearth-node did not start")?;
        let addr = line
            .strip_prefix("hearth-node listening on ")
            .with_context(|| format!("unexpected first line {line:?}"))?
            .parse()?;
        Ok(NodeProcess { child, addr, state: state.to_owned(), lines: rx })
    }

    /// SIGTERM and wait.
    pub fn stop(mut self) -> Result<()> {
        crate::stop_gracefully(&mut self.child, "hearth-node")
    }

    /// SIGKILL: the node dies wherever it is, telling no client (a crash, the OOM killer, a
    /// power cut).
    pub fn kill9(mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// The URL of its metrics (`/metrics`; `/healthz` beside it), once it says it.
    pub fn metrics_url(&self) -> Result<String> {
        self.said("hearth-node metrics on ")
    }

    /// What follows `prefix` in the next line of the node's standard output that starts with
    /// it, once the node prints it (within 10 s); the lines before it are passed over. The node
    /// says so when each of its listeners is bound.
    pub fn said(&self, prefix: &str) -> Result<String> {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(10))
                .with_context(|| format!("the node did not print {prefix:?}"))?;
            if let Some(rest) = line.strip_prefix(prefix) {
                return Ok(rest.to_owned());
            }
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The state directory.
    pub fn state(&self) -> &Path {
        &self.state
    }

    /// The SHA-256 of the certificate the node serves (what profiles pin), from its state
    /// directory.
    pub fn certificate_sha256(&self) -> Result<[u8; 32]> {
        certificate_sha256(&self.state)
    }
}

/// A mihomo profile as the edge renders it: `password`'s Hysteria2 proxy to a server on
/// loopback `port` (SNI `localhost`), pinned to the certificate whose SHA-256 is `cert`.
pub fn mihomo_profile(port: u16, cert: [u8; 32], password: &str) -> String {
    let mut snapshot = crate::control_sim::demo_snapshot(1);
    snapshot.credential = password.into();
    snapshot.endpoints = vec![wire::Endpoint {
        name: "Home".into(),
        host: "127.0.0.1".into(),
        port,
        hop: None,
        sni: Some("localhost".into()),
        cert_sha256: Some(cert),
        spki_sha256: None,
        insecure: true,
        obfs: None,
        identity: Default::default(),
    }];
    hearth_shared::render::mihomo::render(&snapshot)
}

/// `profile` (a mihomo profile) with its Hysteria2 proxy's `up` and `down` set in Mbit/s, as a
/// user sets them in Clash Verge: mihomo then announces `down` as its receive rate, and a node
/// sends to it with Brutal.
pub fn mihomo_announcing(profile: &str, up: u64, down: u64) -> String {
    let proxy = "  type: hysteria2\n";
    assert!(profile.contains(proxy), "no Hysteria2 proxy in the profile: {profile}");
    profile.replacen(proxy, &format!("{proxy}  up: {up}\n  down: {down}\n"), 1)
}

/// The SHA-256 of the certificate in a node's state directory `state`.
pub fn certificate_sha256(state: &Path) -> Result<[u8; 32]> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let der = CertificateDer::from_pem_file(state.join("tls.crt")).context("the node's certificate")?;
    Ok(hearth_shared::sha256(der.as_ref()))
}

impl NodeProcess {
    /// A sing-box Hysteria2 outbound to this node with `password`.
    pub fn outbound(&self, password: &str) -> serde_json::Value {
        serde_json::json!({
            "type": "hysteria2",
            "server": self.addr.ip().to_string(),
            "server_port": self.addr.port(),
            "password": password,
            "tls": { "enabled": true, "server_name": "localhost", "insecure": true, "alpn": ["h3"] }
        })
    }

    /// [`NodeProcess::start`] with its log read line by line (warnings and errors; each line
    /// is also written to the test's standard error).
    pub fn start_logged(state: &Path) -> Result<(NodeProcess, std::sync::mpsc::Receiver<String>)> {
        NodeProcess::start_logged_at(state, "warn")
    }

    /// [`NodeProcess::start_logged`] with the log filter `filter` (`HEARTH_LOG`).
    pub fn start_logged_at(state: &Path, filter: &str) -> Result<(NodeProcess, std::sync::mpsc::Receiver<String>)> {
        NodeProcess::start_logged_as(state, filter, "text")
    }

    /// [`NodeProcess::start_logged_at`] with the log format `format` (`HEARTH_LOG_FORMAT`).
    /// Nothing asks for plain text: the node writes no colours into a pipe by itself.
    pub fn start_logged_as(
        state: &Path,
        filter: &str,
        format: &str,
    ) -> Result<(NodeProcess, std::sync::mpsc::Receiver<String>)> {
        use std::io::BufRead as _;
        let mut child = crate::cgroup::command(&crate::binary("hearth-node")?)
            .arg("serve")
            .arg("--state")
            .arg(state)
            .env("HEARTH_LOG", filter)
            .env("HEARTH_LOG_FORMAT", format)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting hearth-node")?;
        let stderr = child.stderr.take().context("a piped standard error")?;
        let (tx, log) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("{line}");
                let _ = tx.send(line);
            }
        });
        let rx = crate::stdout_lines(&mut child);
        let line = rx.recv_timeout(Duration::from_secs(60)).context("hearth-node did not start")?;
        let addr = line
            .strip_prefix("hearth-node listening on ")
            .with_context(|| format!("unexpected first line {line:?}"))?
            .parse()?;
        Ok((NodeProcess { child, addr, state: state.to_owned(), lines: rx }, log))
    }
}

/// Waits up to `within` for a line of `log` (from [`NodeProcess::start_logged`]) that holds
/// `needle`; returns it. Lines before it are passed over. It polls, so the test's runtime
/// keeps serving whatever the node talks to meanwhile. A line with a terminal's colour codes
/// fails it: written into a pipe, logs are plain.
pub async fn until_logged(log: &std::sync::mpsc::Receiver<String>, needle: &str, within: Duration) -> Result<String> {
    let started = std::time::Instant::now();
    loop {
        match log.try_recv() {
            Ok(line) if line.contains('\u{1b}') => bail!("a log line with colour codes, into a pipe: {line:?}"),
            Ok(line) if line.contains(needle) => return Ok(line),
            Ok(_) => {}
            Err(std::sync::mpsc::TryRecvError::Disconnected) => bail!("the node exited without logging {needle:?}"),
            Err(std::sync::mpsc::TryRecvError::Empty) if started.elapsed() > within => {
                bail!("the node did not log {needle:?} within {within:?}")
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The value of the gauge or counter `name` at a node's `/metrics` URL.
pub async fn metric(metrics_url: &str, name: &str) -> Result<u64> {
    let text = crate::http().build()?.get(metrics_url).send().await?.error_for_status()?.text().await?;
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .with_context(|| format!("no {name} in the node's metrics"))?
        .trim()
        .parse()
        .with_context(|| format!("{name} is not a whole number"))
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real Hysteria2 client program (sing-box, or mihomo) with a SOCKS inbound, connected to
/// a Hysteria2 server.
pub struct ProxyClient {
    child: Child,
    /// The SOCKS5 address of its inbound.
    pub socks: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl ProxyClient {
    /// Starts sing-box with `outbound` (a hysteria2 outbound object) behind a SOCKS inbound.
    pub fn sing_box(outbound: serde_json::Value) -> Result<ProxyClient> {
        ProxyClient::sing_box_of(&crate::sing_box()?, outbound)
    }

    /// [`ProxyClient::sing_box`] with the sing-box binary `program` (another release).
    pub fn sing_box_of(program: &Path, outbound: serde_json::Value) -> Result<ProxyClient> {
        ProxyClient::sing_box_trusting(program, outbound, None)
    }

    /// [`ProxyClient::sing_box_of`] trusting the root certificates in the PEM file `roots`
    /// (as the system's: Go reads `SSL_CERT_FILE`), as a phone trusts public CAs.
    pub fn sing_box_trusting(program: &Path, outbound: serde_json::Value, roots: Option<&Path>) -> Result<ProxyClient> {
        ProxyClient::sing_box_with(program, outbound, roots, false)
    }

    /// [`ProxyClient::sing_box`] writing its log to a file, for [`ProxyClient::log`]: what
    /// the app would show its user.
    pub fn sing_box_logged(outbound: serde_json::Value) -> Result<ProxyClient> {
        ProxyClient::sing_box_with(&crate::sing_box()?, outbound, None, true)
    }

    fn sing_box_with(
        program: &Path,
        outbound: serde_json::Value,
        roots: Option<&Path>,
        logged: bool,
    ) -> Result<ProxyClient> {
        let mut outbound = outbound;
        outbound["tag"] = "node".into();
        ProxyClient::start("sing-box", |dir, port| {
            let config = serde_json::json!({
                "log": { "level": if logged { "debug" } else { "warn" } },
                "inbounds": [{ "type": "socks", "tag": "in", "listen": "127.0.0.1", "listen_port": port }],
                "outbounds": [outbound.clone()],
                "route": { "final": "node" }
            });
            let path = dir.join("client.json");
            std::fs::write(&path, serde_json::to_vec_pretty(&config)?)?;
            let stderr =
                if logged { Stdio::from(std::fs::File::create(dir.join("client.log"))?) } else { Stdio::inherit() };
            trusting(&mut Command::new(program), roots)
                .args(["run", "-c"])
                .arg(&path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .context("starting sing-box")
        })
    }

    /// What a client started with its log in a file ([`ProxyClient::sing_box_logged`]) has
    /// logged so far (empty for the others).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("client.log")).unwrap_or_default()
    }

    /// Starts mihomo on `profile` (a Mihomo YAML profile, as the edge serves it), with a
    /// SOCKS port added; its home directory is a temporary one.
    pub fn mihomo(profile: &str) -> Result<ProxyClient> {
        ProxyClient::mihomo_trusting(profile, None)
    }

    /// [`ProxyClient::mihomo`] trusting the root certificates in the PEM file `roots` (as the
    /// system's: Go reads `SSL_CERT_FILE`).
    pub fn mihomo_trusting(profile: &str, roots: Option<&Path>) -> Result<ProxyClient> {
        ProxyClient::start("mihomo", |dir, port| {
            let config =
                format!("socks-port: {port}\nbind-address: 127.0.0.1\nlog-level: warning\nipv6: false\n{profile}");
            let path = dir.join("config.yaml");
            std::fs::write(&path, config)?;
            trusting(&mut Command::new(crate::mihomo()?), roots)
                .arg("-d")
                .arg(dir)
                .arg("-f")
                .arg(&path)
                .stdin(Stdio::null())
                .stdout(Stdio::inherit())
                .stderr(Stdio::inherit())
                .spawn()
                .context("starting mihomo")
        })
    }

    /// Starts mihomo on a list of share links (`list`, the base64 list as served), read as a
    /// proxy provider as the Clash apps read a V2Ray-style subscription: each link becomes a
    /// proxy (`pinSHA256` its `fingerprint`, `insecure` its `skip-cert-verify`).
    pub fn mihomo_links(list: &str) -> Result<ProxyClient> {
        ProxyClient::start("mihomo", |dir, port| {
            std::fs::write(dir.join("links.txt"), list)?;
            let config = format!(
                "socks-port: {port}\nbind-address: 127.0.0.1\nlog-level: warning\nipv6: false\n\
                 proxy-providers:\n  links:\n    type: file\n    path: ./links.txt\n\
                 proxy-groups:\n  - name: Proxy\n    type: select\n    use: [links]\n\
                 rules:\n  - MATCH,Proxy\n"
            );
            let path = dir.join("config.yaml");
            std::fs::write(&path, config)?;
            Command::new(crate::mihomo()?)
                .arg("-d")
                .arg(dir)
                .arg("-f")
                .arg(&path)
                .stdin(Stdio::null())
                .stdout(Stdio::inherit())
                .stderr(Stdio::inherit())
                .spawn()
                .context("starting mihomo")
        })
    }

    /// Starts a client with `spawn` (in a temporary directory, its SOCKS inbound on a free
    /// port) until one holds its port: a port found free can be taken by another test's
    /// process before the client binds it, and then the client exits while the port answers.
    fn start(name: &str, spawn: impl Fn(&Path, u16) -> Result<Child>) -> Result<ProxyClient> {
        let mut last = None;
        for _ in 0..5 {
            let dir = tempfile::tempdir()?;
            let port = crate::edge::free_port()?;
            let child = spawn(dir.path(), port)?;
            match ProxyClient::listening(child, port, dir, name) {
                Ok(client) => return Ok(client),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("five attempts"))
    }

    /// Waits for `child` to open its SOCKS port `port` (5 s at most), and to stay up: a port
    /// that answers while the child has exited is someone else's.
    fn listening(mut child: Child, port: u16, dir: tempfile::TempDir, name: &str) -> Result<ProxyClient> {
        let socks = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        for _ in 0..200 {
            if let Some(status) = child.try_wait()? {
                bail!("{name} exited ({status}) before it opened its SOCKS port");
            }
            if std::net::TcpStream::connect(socks).is_ok() {
                std::thread::sleep(Duration::from_millis(200));
                if let Some(status) = child.try_wait()? {
                    bail!("{name} exited ({status}): its SOCKS port {port} is another process's");
                }
                return Ok(ProxyClient { child, socks, _dir: dir });
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = child.kill();
        let _ = child.wait();
        bail!("{name} did not open its SOCKS port")
    }

    /// A TCP connection to `target` through the tunnel (SOCKS5 CONNECT).
    pub async fn connect(&self, target: std::net::SocketAddr) -> Result<TcpStream> {
        let std::net::IpAddr::V4(ip) = target.ip() else { bail!("IPv4 targets only") };
        let mut address = vec![1];
        address.extend_from_slice(&ip.octets());
        self.connect_with(address, target.port()).await
    }

    /// A TCP connection through the tunnel to `host` (a name: the node gets the name, as an
    /// app's request carries it) at `port`.
    pub async fn connect_to(&self, host: &str, port: u16) -> Result<TcpStream> {
        let mut address = vec![3, u8::try_from(host.len())?];
        address.extend_from_slice(host.as_bytes());
        self.connect_with(address, port).await
    }

    async fn connect_with(&self, address: Vec<u8>, port: u16) -> Result<TcpStream> {
        let mut stream = TcpStream::connect(self.socks).await?;
        stream.write_all(&[5, 1, 0]).await?;
        let mut reply = [0u8; 2];
        stream.read_exact(&mut reply).await?;
        if reply != [5, 0] {
            bail!("SOCKS greeting refused: {reply:?}");
        }
        let mut request = vec![5, 1, 0];
        request.extend_from_slice(&address);
        request.extend_from_slice(&port.to_be_bytes());
        stream.write_all(&request).await?;
        let mut head = [0u8; 10];
        stream.read_exact(&mut head).await?;
        if head[1] != 0 {
            bail!("SOCKS CONNECT failed with code {}", head[1]);
        }
        Ok(stream)
    }
}

impl ProxyClient {
    /// A UDP round trip through the tunnel (SOCKS5 UDP ASSOCIATE): sends `payload` to
    /// `target` and returns the first answer.
    pub async fn udp_round_trip(&self, target: std::net::SocketAddr, payload: &[u8]) -> Result<Vec<u8>> {
        let std::net::IpAddr::V4(ip) = target.ip() else { bail!("IPv4 targets only") };
        let mut address = vec![1];
        address.extend_from_slice(&ip.octets());
        self.udp_round_trip_with(address, target.port(), payload).await
    }

    /// [`ProxyClient::udp_round_trip`] to `host` (a name, which the node gets) at `port`.
    pub async fn udp_round_trip_to(&self, host: &str, port: u16, payload: &[u8]) -> Result<Vec<u8>> {
        let mut address = vec![3, u8::try_from(host.len())?];
        address.extend_from_slice(host.as_bytes());
        self.udp_round_trip_with(address, port, payload).await
    }

    async fn udp_round_trip_with(&self, address: Vec<u8>, port: u16, payload: &[u8]) -> Result<Vec<u8>> {
        let mut control = TcpStream::connect(self.socks).await?;
        control.write_all(&[5, 1, 0]).await?;
        let mut reply = [0u8; 2];
        control.read_exact(&mut reply).await?;
        control.write_all(&[5, 3, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
        let mut head = [0u8; 10];
        control.read_exact(&mut head).await?;
        if head[1] != 0 || head[3] != 1 {
            bail!("UDP ASSOCIATE refused: {head:?}");
        }
        let relay =
            std::net::SocketAddr::from(([head[4], head[5], head[6], head[7]], u16::from_be_bytes([head[8], head[9]])));
        let relay = if relay.ip().is_unspecified() {
            std::net::SocketAddr::from(([127, 0, 0, 1], relay.port()))
        } else {
            relay
        };
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
        let mut packet = vec![0, 0, 0];
        packet.extend_from_slice(&address);
        packet.extend_from_slice(&port.to_be_bytes());
        packet.extend_from_slice(payload);
        let mut buf = vec![0u8; 65_536];
        for _ in 0..10 {
            socket.send_to(&packet, relay).await?;
            if let Ok(Ok((n, _))) = tokio::time::timeout(Duration::from_millis(1000), socket.recv_from(&mut buf)).await
            {
                if n < 10 {
                    bail!("a short SOCKS UDP answer");
                }
                drop(control);
                return Ok(buf[10..n].to_vec());
            }
        }
        bail!("no UDP answer through the tunnel")
    }
}

/// `command` trusting the root certificates in the PEM file `roots` and no others (Go reads
/// `SSL_CERT_FILE`), when given.
fn trusting<'c>(command: &'c mut Command, roots: Option<&Path>) -> &'c mut Command {
    if let Some(roots) = roots {
        command.env("SSL_CERT_FILE", roots).env("SSL_CERT_DIR", "/nonexistent");
    }
    command
}

/// A local UDP echo server.
pub async fn udp_echo() -> Result<std::net::SocketAddr> {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
    let addr = socket.local_addr()?;
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let _ = socket.send_to(&buf[..n], from).await;
        }
    });
    Ok(addr)
}

impl Drop for ProxyClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A local HTTP server answering every request with `body`.
pub async fn http_server(body: Vec<u8>) -> Result<std::net::SocketAddr> {
    http_server_paced(body, Duration::ZERO).await
}

/// [`http_server`] that sends its body in 16 KiB pieces, `pause` apart (a long transfer).
pub async fn http_server_paced(body: Vec<u8>, pause: Duration) -> Result<std::net::SocketAddr> {
    Ok(http_server_at([127, 0, 0, 1], body, pause).await?.0)
}

/// [`http_server_paced`] on the loopback address `ip` (any port), and how many connections
/// it accepted.
pub async fn http_server_at(
    ip: [u8; 4],
    body: Vec<u8>,
    pause: Duration,
) -> Result<(std::net::SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>)> {
    let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::from(ip), 0)).await?;
    let addr = listener.local_addr()?;
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    let body = std::sync::Arc::new(body);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let body = body.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
                let _ = stream.write_all(head.as_bytes()).await;
                for piece in body.chunks(16 * 1024) {
                    if stream.write_all(piece).await.is_err() {
                        return;
                    }
                    if !pause.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                }
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok((addr, accepted))
}

/// [`fetch`], retried for up to 30 s: while a change (a new user, a first set) is still on its
/// way to the node.
pub async fn fetch_eventually(client: &ProxyClient, target: std::net::SocketAddr) -> Result<Vec<u8>> {
    let started = std::time::Instant::now();
    loop {
        match fetch(client, target).await {
            Ok(body) => return Ok(body),
            Err(e) if started.elapsed() > Duration::from_secs(30) => return Err(e.context("no traffic for 30 s")),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// GETs `/` from `target` through the tunnel; returns the body.
pub async fn fetch(client: &ProxyClient, target: std::net::SocketAddr) -> Result<Vec<u8>> {
    let mut stream = client.connect(target).await?;
    stream.write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n").await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let at = response.windows(4).position(|w| w == b"\r\n\r\n").context("no HTTP head")? + 4;
    if !response.starts_with(b"HTTP/1.1 200") {
        bail!("not a 200: {}", String::from_utf8_lossy(&response[..at]));
    }
    Ok(response[at..].to_vec())
}

/// [`fetch`] that tells `progress` how many bytes of the answer have come so far, as they
/// come (to act in the middle of a long transfer).
pub async fn fetch_watched(
    client: &ProxyClient,
    target: std::net::SocketAddr,
    progress: tokio::sync::watch::Sender<usize>,
) -> Result<Vec<u8>> {
    let mut stream = client.connect(target).await?;
    stream.write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n").await?;
    let mut response = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        response.extend_from_slice(&buf[..n]);
        progress.send_replace(response.len());
    }
    let at = response.windows(4).position(|w| w == b"\r\n\r\n").context("no HTTP head")? + 4;
    if !response.starts_with(b"HTTP/1.1 200") {
        bail!("not a 200: {}", String::from_utf8_lossy(&response[..at]));
    }
    Ok(response[at..].to_vec())
}

/// `hearth-node supervise` run from `exe` (give it a copy of the binary: an update replaces
/// it), in its own process group; stopped with SIGTERM to the group, as systemd stops it.
pub struct Supervised {
    child: Child,
}

impl Supervised {
    /// Starts it on a state directory.
    pub fn start(exe: &Path, state: &Path) -> Result<Supervised> {
        use std::os::unix::process::CommandExt as _;
        let child = Command::new(exe)
            .args(["supervise", "--state"])
            .arg(state)
            .env("HEARTH_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .context("starting hearth-node supervise")?;
        Ok(Supervised { child })
    }
}

impl Supervised {
    /// The process id of the server it runs now (its one child), if one runs.
    pub fn server_pid(&self) -> Option<u32> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.child.id())).ok()?;
        tasks
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("children")).ok())
            .find_map(|children| children.split_whitespace().next()?.parse().ok())
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let signal = |name: &str| {
            let _ = Command::new("kill").args([name, "--", &group]).stderr(Stdio::null()).status();
        };
        signal("-TERM");
        let started = std::time::Instant::now();
        while self.child.try_wait().ok().flatten().is_none() && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(100));
        }
        signal("-KILL");
        let _ = self.child.wait();
    }
}

/// A TCP echo server on loopback, for connections held open through the tunnel.
pub async fn tcp_echo() -> Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    Ok(addr)
}

/// The id of the key that signed the credential set a node holds on disk, and the users in it:
/// the full set (`creds.envelope`), with the delta on it (`creds.delta`) applied when there
/// is one.
pub fn held_set(state: &Path) -> Option<(String, Vec<u64>)> {
    use hearth_shared::envelope::{Envelope, Kind};
    let bytes = std::fs::read(state.join("creds.envelope")).ok()?;
    let envelope = Envelope::decode(&bytes, Kind::CredentialSet.max_len()).ok()?;
    let mut set = wire::CredentialSet::decode(&envelope.body).ok()?;
    let mut signer = envelope.signatures[0].key.to_string();
    let delta = std::fs::read(state.join("creds.delta")).ok();
    if let Some(delta) = delta.and_then(|bytes| Envelope::decode(&bytes, Kind::CredDelta.max_len()).ok())
        && let Ok(change) = wire::CredDelta::decode(&delta.body)
        && change.is_on(envelope.header.version, &envelope.header.body_hash)
        && let Ok(patched) = set.patched(&change)
    {
        set = patched;
        signer = delta.signatures[0].key.to_string();
    }
    Some((signer, set.users().iter().map(|entry| entry.user).collect()))
}

/// The hysteria2 outbound of the sing-box profile the edge serves for `link` (asked until it
/// serves one, for up to 30 s).
pub async fn profile_outbound(link: &str) -> Result<serde_json::Value> {
    let outbounds = profile_outbounds(&crate::http().build()?, link).await?;
    Ok(outbounds.into_iter().next().expect("at least one"))
}

/// The hysteria2 outbounds of the sing-box profile served for `link`, fetched with `client`
/// (one that trusts control's certificate, for a link control serves itself), asked until one
/// is served, for up to 30 s.
pub async fn profile_outbounds(client: &reqwest::Client, link: &str) -> Result<Vec<serde_json::Value>> {
    let started = std::time::Instant::now();
    loop {
        if let Ok(response) = client.get(link).header("user-agent", "SFA/1.13.0 (sing-box 1.13.0)").send().await
            && response.status() == 200
            && let Ok(profile) = response.json::<serde_json::Value>().await
        {
            let outbounds: Vec<serde_json::Value> = profile["outbounds"]
                .as_array()
                .map(|o| o.iter().filter(|o| o["type"] == "hysteria2").cloned().collect())
                .unwrap_or_default();
            if !outbounds.is_empty() {
                return Ok(outbounds);
            }
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("{link} served no sing-box profile with a hysteria2 outbound within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Streams held open through sing-box clients, each echoing a message every 200 ms until
/// stopped; any stall or drop is recorded.
pub struct Streams {
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<(u64, Vec<String>)>>,
    /// Rounds echoed so far, per stream.
    echoed: Vec<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

impl Streams {
    /// Opens `per_client` streams through each client to the echo server at `echo_at`.
    pub async fn hold(clients: &[&ProxyClient], per_client: usize, echo_at: std::net::SocketAddr) -> Result<Streams> {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (mut tasks, mut echoed) = (Vec::new(), Vec::new());
        for (c, client) in clients.iter().enumerate() {
            for n in 0..per_client {
                let mut stream = client.connect(echo_at).await?;
                let mut stopped = stopped.clone();
                let name = format!("client {c} stream {n}");
                let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
                echoed.push(count.clone());
                tasks.push(tokio::spawn(async move {
                    let (mut rounds, mut failures) = (0u64, Vec::new());
                    while !*stopped.borrow() {
                        let sent = [(rounds % 251) as u8; 512];
                        let mut got = [0u8; 512];
                        let round = async {
                            stream.write_all(&sent).await?;
                            stream.read_exact(&mut got).await?;
                            Ok::<_, std::io::Error>(())
                        };
                        match tokio::time::timeout(Duration::from_secs(10), round).await {
                            Ok(Ok(())) if got == sent => {
                                rounds += 1;
                                count.store(rounds, std::sync::atomic::Ordering::Relaxed);
                            }
                            Ok(Ok(())) => failures.push(format!("{name}: other bytes came back")),
                            Ok(Err(e)) => failures.push(format!("{name}: {e}")),
                            Err(_) => failures.push(format!("{name}: stalled for 10 s")),
                        }
                        if !failures.is_empty() {
                            break;
                        }
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_millis(200)) => {}
                            _ = stopped.changed() => {}
                        }
                    }
                    (rounds, failures)
                }));
            }
        }
        Ok(Streams { stop, tasks, echoed })
    }

    /// The rounds each stream has echoed so far, in the order they were opened (a stream
    /// that failed stops counting).
    pub fn rounds(&self) -> Vec<u64> {
        self.echoed.iter().map(|count| count.load(std::sync::atomic::Ordering::Relaxed)).collect()
    }

    /// Stops them; the rounds they echoed and every failure (a stream stops at its first, so
    /// there is one per stream dropped).
    pub async fn finish(self) -> Result<(u64, Vec<String>)> {
        let _ = self.stop.send(true);
        let (mut rounds, mut failures) = (0, Vec::new());
        for task in self.tasks {
            let (r, f) = task.await?;
            rounds += r;
            failures.extend(f);
        }
        Ok((rounds, failures))
    }
}

/// A plain HTTP/3 client of a node, as a prober (or a browser) would be, on one QUIC
/// connection (no Salamander): what the node shows to anyone, and whether a password
/// authenticates (Hysteria2's `POST /auth`).
pub struct H3Client {
    sender: h3::client::SendRequest<h3_quinn::OpenStreams, bytes::Bytes>,
    driver: tokio::task::JoinHandle<()>,
    _endpoint: quinn::Endpoint,
    /// The certificate chain the node showed (DER).
    pub certificates: Vec<Vec<u8>>,
}

/// A TLS client that offers `alpn` and accepts any server certificate (a prober's: the test
/// looks at what the server shows, not who it is).
pub fn probing_tls(alpn: &[&[u8]]) -> Result<rustls::ClientConfig> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(tls)
}

/// Accepts any server certificate: the node's is self-signed, and the client checks what the
/// node answers, not who it is.
#[derive(Debug)]
struct AnyCertificate(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl H3Client {
    /// A QUIC connection to the node at `addr`.
    pub async fn connect(addr: std::net::SocketAddr) -> Result<H3Client> {
        H3Client::connect_from(addr, std::net::Ipv4Addr::LOCALHOST.into()).await
    }

    /// A QUIC connection to the node at `addr` from the loopback address `from`.
    pub async fn connect_from(addr: std::net::SocketAddr, from: std::net::IpAddr) -> Result<H3Client> {
        H3Client::connect_as(addr, from, "localhost").await
    }

    /// A QUIC connection to the node at `addr` from `from`, asking for `server_name` (SNI).
    pub async fn connect_as(addr: std::net::SocketAddr, from: std::net::IpAddr, server_name: &str) -> Result<H3Client> {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .dangerous()
            .with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
        let mut endpoint = quinn::Endpoint::client(std::net::SocketAddr::new(from, 0))?;
        endpoint.set_default_client_config(quinn::ClientConfig::new(std::sync::Arc::new(crypto)));
        let connection = endpoint.connect(addr, server_name)?.await?;
        let certificates = connection
            .peer_identity()
            .and_then(|identity| identity.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>().ok())
            .map(|chain| chain.iter().map(|c| c.to_vec()).collect())
            .unwrap_or_default();
        let (mut driver, sender) = h3::client::new(h3_quinn::Connection::new(connection)).await?;
        let driver = tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        Ok(H3Client { sender, driver, _endpoint: endpoint, certificates })
    }

    /// One request, with `auth` as the Hysteria2 credential if given: the status, headers
    /// and body of the answer.
    pub async fn request(
        &mut self,
        method: http::Method,
        path: &str,
        auth: Option<&str>,
    ) -> Result<(u16, http::HeaderMap, Vec<u8>)> {
        use bytes::Buf as _;
        let mut request = http::Request::builder().method(method).uri(format!("https://hysteria{path}"));
        if let Some(auth) = auth {
            request = request.header("hysteria-auth", auth).header("hysteria-cc-rx", "0");
        }
        let mut stream = self.sender.send_request(request.body(())?).await?;
        stream.finish().await?;
        let response = stream.recv_response().await?;
        let mut body = Vec::new();
        while let Some(mut chunk) = stream.recv_data().await? {
            while chunk.has_remaining() {
                let piece = chunk.chunk();
                let len = piece.len();
                body.extend_from_slice(piece);
                chunk.advance(len);
            }
        }
        Ok((response.status().as_u16(), response.headers().clone(), body))
    }

    /// Whether `password` authenticates now (233 lets the client in; anything else is the
    /// node's decoy 404).
    pub async fn authenticates(&mut self, password: &str) -> Result<bool> {
        Ok(self.request(http::Method::POST, "/auth", Some(password)).await?.0 == 233)
    }

    /// Waits until the connection is closed (by the node, or by an idle timeout).
    pub async fn closed(mut self) {
        let _ = (&mut self.driver).await;
    }
}

impl Drop for H3Client {
    fn drop(&mut self) {
        self.driver.abort();
    }
}
