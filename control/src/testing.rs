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
            wrapping: std::sync::Mutex::new(None),
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
        crate::keyring::load_recovery(&paths.secret(hearth_shared::keys::Role::Recovery)).expect("recovery")
    }
}

/// A node added and enrolled (with a key made here), in the default group.
pub(crate) fn enrolled_node(
    tx: &rusqlite::Connection,
    signer: &Signer,
    now: u64,
) -> Result<crate::store::nodes::NodeView, crate::error::Error> {
    use crate::store::nodes::{EnrollRequest, NodeInput};
    let key = hearth_shared::keys::SecretKey::generate(hearth_shared::keys::Role::Node, &mut rand_core::OsRng)
        .expect("a node key");
    let input = NodeInput { name: Some("n".into()), host: Some("203.0.113.1".into()), ..NodeInput::default() };
    let (node, token) = crate::store::nodes::create(tx, "test", &input, now)?;
    let request = EnrollRequest {
        token,
        key: key.public().to_string(),
        cert_sha256: None,
        spki_sha256: None,
        certificate: None,
        version: String::new(),
    };
    crate::nodes::enroll(tx, signer, &request, now)?;
    Ok(node)
}

/// Logs written through control's own log setup ([`hearth_io::logs`]) into memory, for a
/// test to read: install `dispatch` (`tracing::dispatcher::set_default`) around what logs.
pub(crate) struct Logs {
    pub(crate) dispatch: tracing::Dispatch,
    written: Written,
}

/// What [`Logs`] holds.
#[derive(Clone, Default)]
struct Written(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Written {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Text (or JSON) logs, filtered by `filter` (as `HEARTH_LOG`), without colours.
    pub(crate) fn new(json: bool, filter: &str) -> Logs {
        keep_a_second_dispatcher();
        let written = Written::default();
        let writer = written.clone();
        let dispatch =
            hearth_io::logs::logs(json, tracing_subscriber::EnvFilter::new(filter), false, move || writer.clone());
        Logs { dispatch, written }
    }

    /// Everything logged so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.written.0.lock().expect("log lock").clone()).expect("UTF-8 logs")
    }

    /// The first line logged with `message`.
    pub(crate) fn line(&self, message: &str) -> String {
        let text = self.text();
        text.lines()
            .find(|line| line.contains(message))
            .unwrap_or_else(|| panic!("no {message:?} in:\n{text}"))
            .to_owned()
    }
}

/// With a single dispatcher alive in the process, tracing decides whether a callsite is enabled
/// with the dispatcher of the thread that reaches it first: a log line another test's thread
/// reaches first (with none) would stay off for [`Logs`] too. A second dispatcher, alive for
/// good, makes tracing ask every live dispatcher instead.
fn keep_a_second_dispatcher() {
    static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
    SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
}
