//! `hearth-node`: a Hysteria2 server on quinn that serves the users of its signed credential
//! set, and applies new sets live.
//!
//! `serve` starts from the state directory alone: its settings, TLS identity, the trust it
//! holds and the last good credential set (so a node restarted while control and the edge
//! are unreachable serves its users as before).

mod agent;
mod capped;
mod congestion;
mod enroll;
mod guard;
mod hop;
mod https;
mod identity;
mod limit;
mod masquerade;
mod metrics;
mod outbound;
mod pin;
mod route;
mod server;
mod settings;
mod state;
mod stats;
mod streams;
mod supervise;
mod table;
mod update;
mod usage;

// The wire formats and Salamander live in the library (node/src/lib.rs), where the fuzz
// targets reach them too.
use hearth_node::{proto, salamander};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

use crate::state::StateDir;
use crate::table::Live;

/// Hearth node: a Hysteria2 server that applies signed credential sets live.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// The node's state directory.
    #[arg(long, env = "HEARTH_NODE_STATE", default_value = "/var/lib/hearth-node", global = true)]
    state: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Join control: make the node's key and TLS identity and register them with the
    /// one-time token (the command `hearth-control node add` printed).
    Enroll {
        /// Control's URL.
        #[arg(long)]
        control: String,
        /// The secret path of control's node API.
        #[arg(long)]
        api_prefix: String,
        /// The one-time enrollment token.
        #[arg(long)]
        token: String,
        /// SHA-256 of control's (self-signed) certificate, hex.
        #[arg(long)]
        control_pin: Option<String>,
        /// Listen here instead of 0.0.0.0 on the port control assigned.
        #[arg(long)]
        listen: Option<String>,
        /// Let clients reach private and loopback addresses (for tests on one machine).
        #[arg(long, hide = true)]
        allow_private: bool,
    },
    /// Serve Hysteria2 clients from the state directory.
    Serve,
    /// Run `serve` and keep it running: start it again when it exits, start a new release
    /// after a self-update, and put the previous binary back when a new one fails (how
    /// systemd runs the node).
    Supervise,
}

pub(crate) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A TLS server config with `versions` and the ALPN `protocols`, whose certificate each
/// handshake gets from `certs`: HTTP/3 over QUIC (TLS 1.3) and the masquerade over HTTPS
/// share them (the node's own certificate, its public one for its domain).
fn server_tls(
    certs: &Arc<hearth_acme::Certs>,
    versions: &[&'static rustls::SupportedProtocolVersion],
    protocols: &[&[u8]],
) -> Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .context("TLS versions")?
        .with_no_client_auth()
        .with_cert_resolver(certs.clone());
    tls.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
    Ok(tls)
}

/// How the endpoint makes and recognizes connection IDs, from the saved reset key: a restarted
/// node still recognizes the IDs of connections it no longer has, and answers their packets with
/// a stateless reset, so their clients learn at once that the connection is gone and connect
/// again (with a key drawn at each start, those packets were dropped as noise and clients
/// waited out their idle timeout, 30 s).
fn endpoint_config(state: &StateDir) -> Result<quinn::EndpointConfig> {
    let key = reset_key(state)?;
    let derived = ring::hmac::sign(&key, b"hearth connection ids");
    let cid_key = u64::from_le_bytes(derived.as_ref()[..8].try_into().expect("a 32-byte tag"));
    let mut config = quinn::EndpointConfig::new(Arc::new(key));
    config.cid_generator(move || Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key)));
    Ok(config)
}

/// The stateless-reset key, made once: clients of a restarted node learn at once that their
/// connection is gone.
fn reset_key(state: &StateDir) -> Result<ring::hmac::Key> {
    let path = state.path("reset.key");
    let secret = match std::fs::read(&path) {
        Ok(secret) if secret.len() == 32 => secret,
        _ => {
            let mut secret = vec![0u8; 32];
            rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut secret);
            state.write("reset.key", &secret)?;
            secret
        }
    };
    Ok(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret))
}

/// The QUIC endpoint on `settings.listen` (and the ports of `settings.hop`); `hopped` counts
/// the datagrams that arrive on hop ports. Must run inside the runtime.
fn endpoint(
    state: &StateDir,
    settings: &state::Settings,
    certs: &Arc<hearth_acme::Certs>,
    hopped: &Arc<std::sync::atomic::AtomicU64>,
) -> Result<quinn::Endpoint> {
    let (listen, obfs, congestion) = (settings.listen.as_str(), settings.obfs.as_deref(), settings.congestion);
    let hop = settings.hop.as_deref().map(hop::parse_range).transpose()?;
    let mut tls = server_tls(certs, &[&rustls::version::TLS13], &[b"h3"])?;
    tls.max_early_data_size = u32::MAX;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).context("QUIC TLS")?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport
        .stream_receive_window((8u32 << 20).into())
        .receive_window((20u32 << 20).into())
        .max_idle_timeout(Some(std::time::Duration::from_secs(30).try_into().expect("30 s")))
        .max_concurrent_bidi_streams(1024u32.into())
        .datagram_receive_buffer_size(Some(4 << 20));
    transport.congestion_controller_factory(Arc::new(congestion::Factory { default: congestion }));
    if obfs.is_some() {
        // Salamander adds 8 bytes to every packet: keep them inside a 1500-byte path.
        let mut mtu = quinn::MtuDiscoveryConfig::default();
        mtu.upper_bound(1452 - 8);
        transport.mtu_discovery_config(Some(mtu));
    }
    config.transport_config(Arc::new(transport));
    let socket = std::net::UdpSocket::bind(listen).with_context(|| format!("binding UDP {listen}"))?;
    let endpoint_config = endpoint_config(state)?;
    let runtime = Arc::new(quinn::TokioRuntime);
    let socket = quinn::Runtime::wrap_udp_socket(runtime.as_ref(), socket).context("the UDP socket")?;
    let socket: Arc<dyn quinn::AsyncUdpSocket> = match hop {
        Some(range) => {
            let ip = socket.local_addr()?.ip();
            Arc::new(hop::Hopping::bind(socket, ip, range, hopped)?)
        }
        None => socket,
    };
    let socket: Arc<dyn quinn::AsyncUdpSocket> = match obfs {
        Some(password) => Arc::new(salamander::Salamander::new(socket, password)),
        None => socket,
    };
    quinn::Endpoint::new_with_abstract_socket(endpoint_config, Some(config), socket, runtime)
        .context("starting the QUIC endpoint")
}

/// Serves until SIGTERM (exit code 0) or until a new release is in place
/// ([`update::RESTART_CODE`]).
fn serve(dir: &Path) -> Result<i32> {
    let state = StateDir::new(dir);
    let settings = state.settings()?;
    let trust = state.trust()?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let site = masquerade::Site::new(&settings.masquerade)?;
    // The certificates every handshake picks from: the node's own, and its public one for its
    // domain once ACME has it.
    let acme_settings = settings.acme(dir)?;
    let own = identity::certified(&state, settings.tls_name.as_deref())?;
    let certs = Arc::new(hearth_acme::Certs::new(own, acme_settings.as_ref().map(|a| a.domain.clone())));
    let acme = match acme_settings {
        Some(acme) => Some(hearth_acme::Manager::new(acme, &state.path("acme"), certs.clone())?),
        None => None,
    };
    let traffic_stats = match &settings.traffic_stats {
        Some(stats) => Some((stats.address()?, stats.secret.clone())),
        None => None,
    };
    let live = Arc::new(Live::default());
    if traffic_stats.is_some() {
        live.streams.enable();
    }
    let mut held = None;
    let mut edges = Vec::new();
    let last_good = match (state.last_good(&trust, settings.node, now()), state.previous_trust()) {
        (Err(e), Some(previous)) => state.last_good(&previous, settings.node, now()).map_err(|_| e),
        (result, _) => result,
    };
    let mut basis = None;
    match last_good {
        Ok(Some(last)) => {
            live.expires.store(last.expires, std::sync::atomic::Ordering::Relaxed);
            let started = std::time::Instant::now();
            live.apply(&last.set);
            if last.set.routing().is_some() {
                live.route_by(last.set.routing(), &state.key()?, &settings.geo_files());
            }
            edges = last.set.edges().to_vec();
            let micros = started.elapsed().as_micros() as u64;
            held = Some(last.held);
            live.version.store(last.held.version, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(
                version = last.held.version,
                full = last.basis.version,
                users = live.users(),
                micros,
                "serving the last good credential set"
            );
            basis = Some(last.basis);
        }
        Ok(None) => tracing::warn!("no credential set yet: nobody can connect until one arrives"),
        // Start anyway: the agent fetches a good set, which replaces the file.
        Err(e) => tracing::error!(error = %format!("{e:#}"), "ignoring the stored credential set"),
    }
    let (restart, mut restarting) = tokio::sync::watch::channel(false);
    let agent = if settings.control_url.is_some() || settings.edge_url.is_some() {
        let key = state.key()?;
        let control = match settings.control_url {
            Some(_) => Some(pin::control_client(settings.control_pin.as_deref())?),
            None => None,
        };
        let edge = reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(10)).build()?;
        let edge_url = agent::initial_edge(&StateDir::new(dir), settings.edge_url.as_ref());
        Some(Arc::new(agent::Agent {
            offered: Default::default(),
            restart: restart.clone(),
            draining: Default::default(),
            started: std::time::Instant::now(),
            reported: Default::default(),
            acme: acme.clone(),
            edges: std::sync::Mutex::new(agent::Edges::new(edges, edge_url, settings.api_prefix.clone())),
            state: StateDir::new(dir),
            settings: settings.clone(),
            key,
            trust: std::sync::Mutex::new(trust),
            live: live.clone(),
            held: std::sync::Mutex::new(agent::Held { state: held, basis }),
            control,
            edge,
        }))
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    runtime.block_on(async move {
        // Before the node says it listens: a SIGTERM right after that must stop it cleanly.
        let shutdown = shutdown_signal()?;
        let endpoint = endpoint(&state, &settings, &certs, &live.hopped)?;
        println!("hearth-node listening on {}", endpoint.local_addr()?);
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        let site = Arc::new(site);
        let https = match &settings.masquerade_tcp {
            Some(listen) => {
                let listener = tokio::net::TcpListener::bind(listen)
                    .await
                    .with_context(|| format!("binding TCP {listen} for the masquerade over HTTPS"))?;
                println!("hearth-node masquerade over HTTPS on {}", listener.local_addr()?);
                // A TLS-ALPN-01 validator asks for `acme-tls/1` (and gets a certificate only
                // while a challenge is under way).
                let alpn_01 =
                    acme.as_ref().is_some_and(|a| a.settings().challenge == hearth_acme::Challenge::TlsAlpn01);
                let mut protocols = https::ALPN.to_vec();
                if alpn_01 {
                    protocols.push(hearth_acme::ACME_TLS_ALPN);
                }
                let tls = Arc::new(server_tls(&certs, rustls::DEFAULT_VERSIONS, &protocols)?);
                let port = endpoint.local_addr()?.port();
                Some(tokio::spawn(https::serve(listener, tls, site.clone(), port)))
            }
            None => None,
        };
        let options = server::Options {
            allow_private: settings.allow_private,
            own: None,
            bandwidth: settings.bandwidth,
            ignore_client_bandwidth: settings.ignore_client_bandwidth,
            site,
        };
        let server = tokio::spawn(server::serve(endpoint.clone(), live.clone(), options));
        let mut tasks = match &agent {
            Some(agent) => vec![
                tokio::spawn(agent.clone().pull_loop()),
                tokio::spawn(agent.clone().report_loop()),
                tokio::spawn(agent.clone().register_loop()),
            ],
            None => Vec::new(),
        };
        tasks.extend(https);
        if let Some(acme) = &acme {
            if acme.settings().challenge == hearth_acme::Challenge::Http01 {
                let listen = &settings.acme.as_ref().expect("ACME settings").http_listen;
                let listener = tokio::net::TcpListener::bind(listen)
                    .await
                    .with_context(|| format!("binding TCP {listen} for ACME's HTTP-01"))?;
                println!("hearth-node ACME HTTP-01 on {}", listener.local_addr()?);
                tasks.push(tokio::spawn(hearth_acme::http01::serve(listener, acme.tokens())));
            }
            tasks.push(tokio::spawn(acme.clone().run()));
            tasks.push(tokio::spawn(acme.clone().renew_on_sighup()));
        }
        if let Some((address, secret)) = traffic_stats {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("binding TCP {address} for the traffic stats API (traffic_stats.listen)"))?;
            println!("hearth-node traffic stats API on http://{}", listener.local_addr()?);
            tasks.push(tokio::spawn(stats::serve(listener, live.clone(), secret)));
        }
        if !settings.metrics_listen.is_empty() {
            match tokio::net::TcpListener::bind(&settings.metrics_listen).await {
                Ok(listener) => {
                    println!("hearth-node metrics on http://{}/metrics", listener.local_addr()?);
                    let sources = Arc::new(metrics::Sources {
                        live: live.clone(),
                        state: StateDir::new(dir),
                        acme: acme.clone(),
                    });
                    tasks.push(tokio::spawn(metrics::serve(listener, sources)));
                }
                // Taken (another hearth-node on this machine, or an exporter on 9464): said
                // plainly, and the node does not start half-watched.
                Err(e) => anyhow::bail!(
                    "the metrics port {} cannot be bound ({e}): another program (another hearth-node on this \
                     machine?) holds it; set metrics_listen in node.toml to a free address, or to \"\" for none",
                    settings.metrics_listen
                ),
            }
        }
        let code = tokio::select! {
            () = shutdown => 0,
            _ = restarting.wait_for(|restart| *restart) => update::RESTART_CODE,
        };
        tracing::info!("shutting down");
        for task in tasks {
            task.abort();
        }
        if let Some(agent) = &agent {
            agent.flush();
        }
        endpoint.close(0x100u32.into(), b"shutting down");
        server.abort();
        // The close goes out at once; waiting for peers to take it in is bounded, as peers that
        // vanished (or a flood of strangers) would otherwise hold the exit for 3 PTOs each.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), endpoint.wait_idle()).await;
        Ok(code)
    })
}

/// Installs the SIGTERM handler now; the future ends at SIGTERM or Ctrl-C.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>> {
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("a SIGTERM handler")?;
    Ok(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    })
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let json =
        hearth_io::logs::json_from(std::env::var("HEARTH_LOG_FORMAT").ok().as_deref()).map_err(anyhow::Error::msg)?;
    hearth_io::logs::init(json).context("setting up the log")?;
    match cli.command {
        Command::Serve => {
            let code = serve(&cli.state)?;
            if code != 0 {
                std::process::exit(code);
            }
            Ok(())
        }
        Command::Supervise => supervise::run(&cli.state),
        Command::Enroll { control, api_prefix, token, control_pin, listen, allow_private } => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let request = enroll::Request {
                control: &control,
                api_prefix: &api_prefix,
                token: &token,
                control_pin: control_pin.as_deref(),
                listen: listen.as_deref(),
                allow_private,
            };
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let node = runtime.block_on(enroll::enroll(&cli.state, &request))?;
            println!(
                "Enrolled as node {node} in {}. Start it with: hearth-node serve --state {}",
                cli.state.display(),
                cli.state.display()
            );
            let settings = StateDir::new(&cli.state).settings()?;
            if let Some(acme) = &settings.acme {
                let port = settings.listen.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap_or(443);
                println!("{}", enroll::acme_needs(&acme.domain, port, settings.masquerade_tcp.is_some()));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enrollment_tokens_starting_with_a_dash_parse() {
        // Tokens are base64url: one in 32 starts with '-'. Control prints `--token=...`.
        let cli = Cli::try_parse_from([
            "hearth-node",
            "enroll",
            "--control",
            "https://c",
            "--api-prefix",
            "p",
            "--token=-_abc",
        ])
        .expect("parses");
        let Command::Enroll { token, .. } = cli.command else { panic!("not enroll") };
        assert_eq!(token, "-_abc");
    }
}
