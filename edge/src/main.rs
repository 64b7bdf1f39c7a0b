//! `hearth-edge`: the native edge, serving the same routes as the Cloudflare Worker from an
//! embedded libSQL database. See the manual, docs/running/edges.md, for its settings.

#[cfg(not(target_arch = "wasm32"))]
mod cli {
    use std::net::SocketAddr;
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Duration;

    use anyhow::{Context as _, Result, bail};
    use clap::Parser;
    use hearth_edge::config::{EdgeConfig, is_setting};
    use hearth_edge::native::{Edge, Replica, serve};

    /// Hearth's self-hosted edge: subscription links, pushes from control, node pulls.
    #[derive(Parser)]
    #[command(version, about)]
    struct Cli {
        /// Address to listen on (port 0 picks a free port; the address is printed).
        #[arg(long, env = "HEARTH_EDGE_LISTEN", default_value = "127.0.0.1:8787")]
        listen: SocketAddr,
        /// The database file.
        #[arg(long, env = "HEARTH_EDGE_DB", default_value = "hearth-edge.db")]
        db: PathBuf,
        /// Memory for recently served links, in MiB (0: read every fetch from the database).
        #[arg(long, env = "HEARTH_EDGE_CACHE_MIB", default_value_t = 64)]
        cache_mib: usize,
        /// Run as a replica of this remote libSQL server (sqld or Turso): links are read from
        /// the local file, writes go to the server. Needs a build with `--features remote-replica`.
        #[arg(long, env = "HEARTH_EDGE_REPLICA_URL")]
        replica_url: Option<String>,
        /// The remote libSQL server's auth token.
        #[arg(long, env = "HEARTH_EDGE_REPLICA_TOKEN", hide_env_values = true, default_value = "")]
        replica_token: String,
        /// How often a replica pulls what other edges wrote, in seconds.
        #[arg(long, env = "HEARTH_EDGE_REPLICA_SYNC_SECS", default_value_t = 2)]
        replica_sync_secs: u64,
        /// A TOML file of settings (`root_key = "..."`, `api_prefix = "..."`, ...);
        /// `HEARTH_*` environment variables override it.
        #[arg(long, env = "HEARTH_EDGE_CONFIG")]
        config: Option<PathBuf>,
    }

    fn settings(file: Option<&PathBuf>) -> Result<EdgeConfig> {
        let mut from_file = std::collections::HashMap::new();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let table: toml::Table = text.parse().with_context(|| format!("{} is not TOML", path.display()))?;
            for (key, value) in table {
                let name = format!("HEARTH_{}", key.to_ascii_uppercase());
                if !is_setting(&name) {
                    bail!("{}: unknown setting {key:?}", path.display());
                }
                let value = match value {
                    toml::Value::String(s) => s,
                    // A list (trusted_proxies) as the environment variable writes it.
                    toml::Value::Array(items) => items
                        .iter()
                        .map(|item| item.as_str().map_or_else(|| item.to_string(), str::to_owned))
                        .collect::<Vec<_>>()
                        .join(","),
                    other => other.to_string(),
                };
                from_file.insert(name, value);
            }
        }
        Ok(EdgeConfig::from_vars(|name| std::env::var(name).ok().or_else(|| from_file.get(name).cloned()))?)
    }

    pub(crate) fn main() -> Result<()> {
        let cli = Cli::parse();
        hearth_io::logs::init(false).context("setting up the log")?;
        let config = settings(cli.config.as_ref())?;
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        runtime.block_on(async {
            let replica = cli.replica_url.clone().map(|url| Replica { url, auth_token: cli.replica_token.clone() });
            let edge =
                Edge::open(config, &cli.db, cli.cache_mib << 20, replica.as_ref()).await.with_context(
                    || match &replica {
                        Some(replica) => format!("opening {} as a replica of {}", cli.db.display(), replica.url),
                        None => format!("opening {}", cli.db.display()),
                    },
                )?;
            let edge = Arc::new(edge);
            if replica.is_some() {
                tokio::spawn(sync_loop(edge.clone(), Duration::from_secs(cli.replica_sync_secs.max(1))));
            }
            let listener = tokio::net::TcpListener::bind(cli.listen)
                .await
                .with_context(|| format!("listening on {}", cli.listen))?;
            println!("hearth-edge listening on http://{}", listener.local_addr()?);
            serve(listener, edge, shutdown()).await?;
            Ok(())
        })
    }

    /// Pulls what other edges wrote to the shared server, every `every`.
    async fn sync_loop(edge: Arc<Edge>, every: Duration) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Err(error) = edge.sync().await {
                tracing::warn!(%error, "syncing from the replica's server failed; serving what is here");
            }
        }
    }

    async fn shutdown() {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down");
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn main() -> anyhow::Result<()> {
    cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
