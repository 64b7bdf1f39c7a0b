//! Starting control: load and check everything, then serve until SIGTERM or Ctrl-C.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use hearth_shared::keys::{RecoveryPublic, Role};

use crate::app::{App, now};
use crate::config::{Config, Tls};
use crate::keyring::Paths;
use crate::publish::Signer;
use crate::secrets::Vault;
use crate::store::{self, Db};

/// Loads the configuration, the database and the signer: what every command needs. The
/// run-time settings (the edge, the link base, the subscription profile) are the ones in
/// force, which `serve` keeps in the database: a command run beside it, in whatever
/// environment, publishes exactly as it does and changes none of them.
pub(crate) fn open(dir: &Path) -> Result<(Config, Db, Signer)> {
    let (config, db, signer, _) = open_with(dir, false)?;
    Ok((config, db, signer))
}

/// [`open`] for `serve` (and `restore`, which makes a new database), which settles the run-time
/// settings first: a configuration file or environment that changed since the last start
/// wins (see `settings::settle_value`).
pub(crate) fn open_to_serve(dir: &Path) -> Result<(Config, Db, Signer, Vec<String>)> {
    open_with(dir, true)
}

/// Also returns what to warn of once logging runs (see `settings::settle_addresses`).
fn open_with(dir: &Path, settle: bool) -> Result<(Config, Db, Signer, Vec<String>)> {
    open_in(dir, settle, &|name: &str| std::env::var(name).ok())
}

/// [`open_with`], with the environment read through `env`.
fn open_in(
    dir: &Path,
    settle: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, Db, Signer, Vec<String>)> {
    let mut config = Config::load(dir, env)?;
    let paths = Paths::new(dir);

    let recovery_path = paths.public(Role::Recovery);
    let recovery: RecoveryPublic = std::fs::read_to_string(&recovery_path)
        .with_context(|| format!("reading {}", recovery_path.display()))?
        .trim()
        .parse()
        .with_context(|| format!("{} is not a recovery key", recovery_path.display()))?;
    let vault = Vault::load(&paths.master())?;
    let db = Db::open(&paths.database()).with_context(|| format!("opening {}", paths.database().display()))?;
    // What nodes' sets list of the edges, before the configuration may move the main edge.
    let prefix = config.edge.api_prefix.clone();
    let fallbacks = |db: &Db| db.read_blocking(|c| crate::publish::fallbacks(c, &prefix));
    let listed = if settle { Some(fallbacks(&db)?) } else { None };
    let warnings = if settle {
        crate::settings::settle_addresses(&db, &mut config)?
    } else {
        crate::settings::addresses_in_force(&db, &mut config)?;
        Vec::new()
    };
    // Checks the records against the root before anything is signed with them.
    let serial = db.read_blocking(|c| store::get_state(c, "keys_serial"))?;
    let online = crate::keyring::load_online(dir, serial, now())?;
    let signer = Signer {
        online: std::sync::RwLock::new(Arc::new(online)),
        dir: dir.to_owned(),
        recovery,
        vault,
        profile: std::sync::RwLock::new(config.profile.clone()),
        epoch: 1,
        root: config.root,
        api_prefix: config.edge.api_prefix.clone(),
        wrapping: std::sync::Mutex::new(None),
    };
    if settle {
        crate::settings::settle(&db, &signer, &config.profile, now())?;
    } else {
        *signer.profile.write().expect("profile lock") = crate::settings::profile_in_force(&db, &config.profile)?;
    }
    if let Some(listed) = listed {
        // The main edge may have moved with the configuration: nodes learn whom to fall back
        // to. Their sets are built again only when what they list of the edges changed: at
        // 100,000 users that is most of a start's time.
        if fallbacks(&db)? == listed {
            db.write_blocking(|tx| crate::publish::publish_edge_settings(tx, &signer, now()))?;
        } else {
            db.write_blocking(|tx| crate::publish::edges_changed(tx, &signer, now()))?;
        }
    }
    if let Some(signed) = db.write_blocking(|tx| crate::publish::settle_keys(tx, &signer, now()))?
        && signed > 0
    {
        tracing::info!(signed, "the key records changed; every stream was signed again");
    }
    Ok((config, db, signer, warnings))
}

/// `hearth-control serve`; `unsettled` says why glibc's allocator could not be set up
/// ([`crate::allocator::settle`]), logged as a warning.
pub(crate) fn run(dir: &Path, unsettled: Option<String>) -> Result<()> {
    let (mut config, db, signer, mut warnings) = open_to_serve(dir)?;
    warnings.extend(unsettled);
    hearth_io::logs::init(config.log_json).expect("no other logger was set");
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let panel = config.acme.panel.clone();
    let (tls, acme) = match &config.tls {
        Tls::Files { cert, key } => {
            let (tls, certs) = crate::tls::server_config(cert, key, panel.as_ref().map(|(settings, _)| settings))?;
            // The panel's own domain: a certificate from the CA, kept in `acme/`.
            let acme = match &panel {
                Some((settings, _)) => Some(hearth_acme::Manager::new(settings.clone(), &dir.join("acme"), certs)?),
                None => None,
            };
            (Some(tls), acme)
        }
        Tls::Off => (None, None),
    };
    let http = reqwest::Client::builder()
        .user_agent(concat!("hearth-control/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(std::time::Duration::from_secs(10))
        .build()
        .context("making the HTTP client")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(16)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let tcp = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("listening on {}", config.listen))?;
        let mut acme_tasks = Vec::new();
        if let (Some(acme), Some((_, http))) = (&acme, &panel) {
            if acme.settings().challenge == hearth_acme::Challenge::Http01 {
                let listener = tokio::net::TcpListener::bind(http)
                    .await
                    .with_context(|| format!("binding TCP {http} for ACME's HTTP-01"))?;
                println!("hearth-control ACME HTTP-01 on {}", listener.local_addr()?);
                acme_tasks.push(tokio::spawn(hearth_acme::http01::serve(listener, acme.tokens())));
            }
            acme_tasks.push(tokio::spawn(acme.clone().run()));
            acme_tasks.push(tokio::spawn(acme.clone().renew_on_sighup()));
        }
        let local = tcp.local_addr()?;
        config.bound(local);
        let listener = crate::tls::HearthListener::new(tcp, tls)?;
        let has_owner = db.read(crate::auth::has_owner).await?;
        let app = Arc::new(App::new(config, db, signer, crate::auth::Hasher::new(), http));
        if let Some(acme) = &acme {
            let _ = app.panel_acme.set(acme.clone());
        }
        let shutdown = shutdown_signal();
        announce(&app, local, has_owner);
        let stop = app.stopping.clone();
        let stopped = stop.subscribe();
        let tasks = vec![
            tokio::spawn(crate::outbox::supervisor(app.clone(), stopped.clone())),
            tokio::spawn(crate::tasks::sweeper(app.clone(), stopped.clone())),
            tokio::spawn(crate::tasks::watch_external(app.clone(), stopped.clone())),
            tokio::spawn(crate::archive::archiver(app.clone(), stopped.clone())),
            tokio::spawn(crate::webhooks::deliverer(app.clone(), stopped.clone())),
            tokio::spawn(crate::telegram::notifier(app.clone(), stopped.clone())),
            tokio::spawn(crate::telegram::poller(app.clone(), stopped.clone())),
        ];
        let router = crate::api::router(app.clone());
        let mut on_stop = stopped.clone();
        axum::serve(listener, router.into_make_service_with_connect_info::<crate::tls::ClientAddr>())
            .with_graceful_shutdown(async move {
                shutdown.await;
                tracing::info!("shutting down");
                let _ = stop.send(true);
                let _ = on_stop.wait_for(|s| *s).await;
            })
            .await
            .context("serving")?;
        for task in tasks {
            let _ = task.await;
        }
        for task in acme_tasks {
            task.abort();
        }
        Ok(())
    })
}

/// Says where control listens and where the panel is: the first run's one-time setup link
/// when there is no owner yet.
fn announce(app: &App, local: std::net::SocketAddr, has_owner: bool) {
    let scheme = if app.config.tls == Tls::Off { "http" } else { "https" };
    println!("hearth-control listening on {scheme}://{local}");
    if !has_owner {
        let token = crate::secrets::random_token();
        *app.setup_token.lock().expect("setup lock") = Some(token.clone());
        println!(
            "First run: open {}/{}/setup#{token} to create the owner (this link works once).",
            app.config.public_url, app.config.admin_prefix
        );
    } else {
        println!("Admin: {}/{}/ (sign in as the owner)", app.config.public_url, app.config.admin_prefix);
    }
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
}

/// Waits for SIGINT or SIGTERM. The handlers are set when it is called, not when it is first
/// awaited: `serve` calls it before it says where it listens, so a stop sent as soon as it
/// does (an init system, a test) ends it gracefully rather than killing it.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt()).expect("a SIGINT handler");
        let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
        async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = term.recv() => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use hearth_shared::wire::stream;

    use super::*;
    use crate::store::edges::NewEdge;

    /// The version of `node`'s full credential set.
    fn set_version(db: &Db, node: u64) -> u64 {
        db.read_blocking(|c| crate::store::streams::envelope(c, &stream::creds(node))).unwrap().unwrap().0
    }

    /// A start signs the nodes' sets again when the configuration moved an edge they list,
    /// and not otherwise: at 100,000 users building a set is most of a start.
    #[test]
    fn a_start_signs_nodes_sets_again_only_when_the_edges_they_list_moved() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        crate::keyring::init(dir, &[], now()).unwrap();
        let edge = |url: &'static str| move |name: &str| (name == "HEARTH_EDGE_URL").then(|| url.to_owned());
        let (_, db, signer, _) = open_in(dir, true, &edge("http://127.0.0.1:9")).unwrap();
        let node = db
            .write_blocking(|tx| {
                // A second edge: nodes' sets list the edges once there are two.
                let second = NewEdge {
                    name: "second".into(),
                    url: "https://second.example.net".into(),
                    api_prefix: "api-second-0123456789".into(),
                    push_token: "t".repeat(40),
                    link_base: "https://second.example.net/s".into(),
                };
                crate::store::edges::add(tx, &second, now())?;
                Ok(crate::testing::enrolled_node(tx, &signer, now())?.id)
            })
            .unwrap();
        let enrolled = set_version(&db, node);
        drop((db, signer));

        // The same edge: the set is not even built (the node's set is logged when it is).
        let logs = crate::testing::Logs::new(false, "hearth_control=debug");
        let opened =
            tracing::dispatcher::with_default(&logs.dispatch, || open_in(dir, true, &edge("http://127.0.0.1:9")));
        let (_, db, signer, _) = opened.unwrap();
        assert!(
            !logs.text().contains("node set checked"),
            "a start with the same edges built the set: {}",
            logs.text()
        );
        assert_eq!(set_version(&db, node), enrolled, "a start with the same edges signed the set again");
        drop((db, signer));

        // Another main edge: the set lists it, signed again at this start.
        let logs = crate::testing::Logs::new(false, "hearth_control=debug");
        let opened =
            tracing::dispatcher::with_default(&logs.dispatch, || open_in(dir, true, &edge("http://127.0.0.1:10")));
        let (_, db, signer, _) = opened.unwrap();
        assert!(logs.text().contains("node set checked"), "{}", logs.text());
        assert!(set_version(&db, node) > enrolled, "the set does not list the edge the configuration moved to");
        let (_, bytes) =
            db.read_blocking(|c| crate::store::streams::envelope(c, &stream::creds(node))).unwrap().unwrap();
        let body = hearth_shared::envelope::Envelope::stored_body(&bytes).unwrap();
        let set = hearth_shared::wire::CredentialSet::decode(body).unwrap();
        let urls: Vec<String> = set.edges().iter().map(|edge| edge.url.clone()).collect();
        assert!(urls.contains(&"http://127.0.0.1:10".to_owned()), "{urls:?}");
        drop((db, signer));
    }
}
