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
    let env = |name: &str| std::env::var(name).ok();
    let mut config = Config::load(dir, &env)?;
    let paths = Paths::new(dir);

    let recovery_path = paths.public(Role::Recovery);
    let recovery: RecoveryPublic = std::fs::read_to_string(&recovery_path)
        .with_context(|| format!("reading {}", recovery_path.display()))?
        .trim()
        .parse()
        .with_context(|| format!("{} is not a recovery key", recovery_path.display()))?;
    let vault = Vault::load(&paths.master())?;
    let db = Db::open(&paths.database()).with_context(|| format!("opening {}", paths.database().display()))?;
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
    };
    if settle {
        crate::settings::settle(&db, &signer, &config.profile, now())?;
    } else {
        *signer.profile.write().expect("profile lock") = crate::settings::profile_in_force(&db, &config.profile)?;
    }
    if settle {
        // The main edge may have moved with the configuration: nodes learn whom to fall back to.
        db.write_blocking(|tx| crate::publish::edges_changed(tx, &signer, now()))?;
    }
    if let Some(signed) = db.write_blocking(|tx| crate::publish::settle_keys(tx, &signer, now()))?
        && signed > 0
    {
        tracing::info!(signed, "the key records changed; every stream was signed again");
    }
    Ok((config, db, signer, warnings))
}

/// `hearth-control serve`.
pub(crate) fn run(dir: &Path) -> Result<()> {
    let (mut config, db, signer, warnings) = open_to_serve(dir)?;
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
                shutdown_signal().await;
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

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
