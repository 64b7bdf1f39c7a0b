//! Test support: a complete control (keys, config, database) in a temporary directory.

use std::sync::Arc;

use crate::app::App;
use crate::auth::Hasher;
use crate::config::Config;
use crate::publish::Signer;
use crate::secrets::Vault;
use crate::store::Db;

/// A control in a temporary directory, with fast argon2 parameters.
pub(crate) struct TestControl {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) app: Arc<App>,
}

impl TestControl {
    /// `edge`: whether an edge URL is configured (the `main` edge, which changes go to).
    pub(crate) fn new(edge: bool) -> TestControl {
        TestControl::with_env(edge, &[])
    }

    /// As [`TestControl::new`], with more settings from the environment (`HEARTH_*` name, value).
    pub(crate) fn with_env(edge: bool, settings: &[(&str, &str)]) -> TestControl {
        let settings: Vec<(String, String)> =
            settings.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect();
        let dir = tempfile::tempdir().expect("a temporary directory");
        crate::keyring::init(dir.path(), &[], crate::app::now()).expect("init");
        let env = move |name: &str| match name {
            "HEARTH_EDGE_URL" if edge => Some("http://127.0.0.1:9".to_owned()),
            _ => settings.iter().find(|(key, _)| key == name).map(|(_, value)| value.clone()),
        };
        let config = Config::load(dir.path(), &env).expect("config");
        let paths = crate::keyring::Paths::new(dir.path());
        let signer = Signer {
            online: std::sync::RwLock::new(Arc::new(
                crate::keyring::load_online(dir.path(), 0, crate::app::now()).expect("keys"),
            )),
            dir: dir.path().to_owned(),
            recovery: std::fs::read_to_string(paths.public(hearth_shared::keys::Role::Recovery))
                .expect("recovery key")
                .trim()
                .parse()
                .expect("a recovery key"),
            vault: Vault::load(&paths.master()).expect("master key"),
            profile: std::sync::RwLock::new(config.profile.clone()),
            epoch: 1,
            root: config.root,
            api_prefix: config.edge.api_prefix.clone(),
        };
        let db = Db::open(&paths.database()).expect("database");
        db.write_blocking(|tx| {
            crate::store::edges::sync_main(tx, config.edge_url.as_deref(), &config.sub_url, crate::app::now())
        })
        .expect("the main edge");
        let hasher = Hasher::with_params(argon2::Params::new(256, 1, 1, Some(32)).expect("params"));
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        TestControl { app: Arc::new(App::new(config, db, signer, hasher, http)), dir }
    }

    /// The recovery secret key `init` left in the directory.
    pub(crate) fn recovery(&self) -> hearth_shared::keys::RecoverySecret {
        let paths = crate::keyring::Paths::new(self.dir.path());
        hearth_shared::keys::RecoverySecret::load(&paths.secret(hearth_shared::keys::Role::Recovery)).expect("recovery")
    }
}
