//! Running the real `hearth-control` binary for a test: `init` in a temporary directory,
//! `serve` on a loopback port chosen at run time, over HTTPS with the self-signed
//! certificate `init` made (the test's client trusts exactly that certificate).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use hearth_shared::keys::{Role, SecretKey};
use serde_json::{Value, json};

/// A data directory made by `hearth-control init`.
pub struct ControlDir {
    /// The directory.
    pub path: PathBuf,
}

impl ControlDir {
    /// Runs `hearth-control restore` into this (new) directory from the edge at `edge_url`,
    /// with the owner's offline copies in `safe` (`edge.toml`, and `root.key` for
    /// `from_snapshots`) and the recovery key at `recovery`; returns what it printed.
    pub fn restore(&self, edge_url: &str, safe: &Path, recovery: &Path, from_snapshots: bool) -> Result<String> {
        let path = |p: &Path| p.to_str().map(str::to_owned).context("a path that is not UTF-8");
        let mut args = vec![
            "restore".to_owned(),
            "--from-edge".to_owned(),
            edge_url.to_owned(),
            "--edge-settings".to_owned(),
            path(&safe.join("edge.toml"))?,
            "--recovery-key".to_owned(),
            path(recovery)?,
        ];
        if from_snapshots {
            args.extend(["--from-snapshots".to_owned(), "--root-key".to_owned(), path(&safe.join("root.key"))?]);
        }
        self.cli(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// Runs `hearth-control init` in `path`.
    pub fn init(path: &Path) -> Result<ControlDir> {
        let out = Command::new(crate::binary("hearth-control")?)
            .arg("init")
            .arg("--data-dir")
            .arg(path)
            .output()
            .context("running hearth-control init")?;
        if !out.status.success() {
            bail!("init failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(ControlDir { path: path.to_owned() })
    }

    /// A value of `control.toml` (a string).
    pub fn setting(&self, key: &str) -> Result<String> {
        let text = std::fs::read_to_string(self.path.join("control.toml"))?;
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{key} = \"")).and_then(|rest| rest.strip_suffix('"')))
            .map(str::to_owned)
            .with_context(|| format!("{key} is missing from control.toml"))
    }

    /// A value of `edge.toml`.
    pub fn edge_setting(&self, key: &str) -> Result<String> {
        let text = std::fs::read_to_string(self.path.join("edge.toml"))?;
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{key} = \"")).and_then(|rest| rest.strip_suffix('"')))
            .map(str::to_owned)
            .with_context(|| format!("{key} is missing from edge.toml"))
    }

    /// The settings a native edge or the Worker needs to trust this control.
    pub fn edge_vars(&self) -> Result<Vec<(String, String)>> {
        Ok(vec![
            ("HEARTH_ROOT_KEY".into(), self.edge_setting("root_key")?),
            ("HEARTH_PUSH_TOKEN".into(), self.edge_setting("push_token")?),
            ("HEARTH_API_PREFIX".into(), self.edge_setting("api_prefix")?),
            ("HEARTH_SUB_PREFIX".into(), self.edge_setting("sub_prefix")?),
        ])
    }

    /// Runs a CLI command on this directory; returns its standard output.
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        // In the benchmark's cgroup when one is active (`Cgroup::start`).
        let out = crate::cgroup::command(&crate::binary("hearth-control")?)
            .args(args)
            .arg("--data-dir")
            .arg(&self.path)
            .output()
            .context("running hearth-control")?;
        if !out.status.success() {
            bail!("hearth-control {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8(out.stdout)?)
    }

    /// An HTTPS client that trusts exactly this control's certificate.
    pub fn client(&self) -> Result<reqwest::Client> {
        let pem = std::fs::read(self.path.join("tls.crt"))?;
        Ok(crate::http()
            .tls_certs_only([reqwest::Certificate::from_pem(&pem)?])
            .timeout(Duration::from_secs(60))
            .build()?)
    }
}

/// A control set up with an admin token, pushing to a native edge (its limits off) and
/// archiving to it a second after each change: where restore tests start.
pub struct Archiving {
    /// Control's data directory.
    pub dir: ControlDir,
    /// The edge.
    pub edge: crate::edge::EdgeProcess,
    /// Control's environment (to start it again).
    pub env: Vec<(&'static str, String)>,
    /// Control.
    pub control: ControlProcess,
    /// A client that trusts control's certificate.
    pub https: reqwest::Client,
    /// The admin token.
    pub token: String,
}

impl Archiving {
    /// Starts it all under `root` (`control/`, `edge.db`).
    pub async fn start(root: &Path) -> Result<Archiving> {
        use crate::edge::{Backend, EdgeProcess, free_port};
        let dir = ControlDir::init(&root.join("control"))?;
        let mut vars = dir.edge_vars()?;
        vars.push(("HEARTH_LIMITS".into(), "off".into()));
        let edge = EdgeProcess::start(Backend::Native, &root.join("edge.db"), &vars)?;
        let env = vec![
            ("HEARTH_LISTEN", format!("127.0.0.1:{}", free_port()?)),
            ("HEARTH_EDGE_URL", edge.url.clone()),
            ("HEARTH_ARCHIVE_AFTER_SECS", "1".into()),
        ];
        let control = ControlProcess::start(&dir, &env)?;
        let https = dir.client()?;
        let token = control.setup(&https, "admin").await?;
        Ok(Archiving { dir, edge, env, control, https, token })
    }
}

/// Control's state archive as the edge holds it, opened with the owner's recovery key.
pub struct EdgeArchive {
    /// Its version (the envelope's; a restore prints it).
    pub version: u64,
    /// When control made it (Unix seconds).
    pub created: u64,
    /// The database it holds, as one SQLite file.
    pub database: Vec<u8>,
}

impl EdgeArchive {
    /// A number `query` gives on the database the archive holds (the first column of its
    /// first row).
    pub async fn number(&self, query: &str) -> Result<i64> {
        let file = tempfile::NamedTempFile::new()?;
        std::fs::write(file.path(), &self.database)?;
        let db = libsql::Builder::new_local(file.path()).build().await?;
        let mut rows = db.connect()?.query(query, ()).await?;
        Ok(rows.next().await?.context("no row")?.get::<i64>(0)?)
    }
}

/// The payload of an archive, as control writes it (`control/src/archive.rs`).
#[derive(serde::Serialize, serde::Deserialize)]
struct ArchivePayload {
    format: u32,
    created: u64,
    files: Vec<(String, Vec<u8>)>,
    database: Vec<u8>,
}

impl ControlDir {
    /// The archive the edge at `edge_url` holds (`None` while it holds none), opened with
    /// this directory's `recovery.key` and the push token of its `edge.toml`.
    pub async fn archive_at_edge(&self, edge_url: &str) -> Result<Option<EdgeArchive>> {
        self.archive_at(edge_url, &self.edge_setting("api_prefix")?, &self.edge_setting("push_token")?).await
    }

    /// [`ControlDir::archive_at_edge`] at an edge of its own API prefix and push token (one
    /// [`own_edge_vars`] set up, say).
    pub async fn archive_at(&self, edge_url: &str, api: &str, push_token: &str) -> Result<Option<EdgeArchive>> {
        use hearth_shared::envelope::{Envelope, Kind};
        use std::io::Read as _;
        let answer =
            crate::http().build()?.get(format!("{edge_url}/{api}/archive")).bearer_auth(push_token).send().await?;
        if answer.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let bytes = answer.error_for_status()?.bytes().await?;
        let envelope = Envelope::decode(&bytes, Kind::Archive.max_len()).context("the archive's envelope")?;
        let recovery =
            hearth_shared::keys::RecoverySecret::from_file_text(&std::fs::read(self.path.join("recovery.key"))?)?;
        let compressed = hearth_shared::seal::open_archive(&envelope.body, &recovery).context("opening the archive")?;
        let mut inflated = Vec::new();
        flate2::read::DeflateDecoder::new(compressed.as_slice()).read_to_end(&mut inflated)?;
        let payload: ArchivePayload = hearth_shared::wire::decode(&inflated, "archive")?;
        Ok(Some(EdgeArchive { version: envelope.header.version, created: payload.created, database: payload.database }))
    }

    /// Waits (a minute at most) until the archive at the edge holds a database on which
    /// `query` gives `expected`; returns that archive.
    pub async fn archive_holding(&self, edge_url: &str, query: &str, expected: i64) -> Result<EdgeArchive> {
        let started = std::time::Instant::now();
        loop {
            let archive = self.archive_at_edge(edge_url).await?;
            let got = match &archive {
                // An archive made before the row existed holds none yet: not an error.
                Some(archive) => archive.number(query).await.ok(),
                None => None,
            };
            if let Some(archive) = archive.filter(|_| got == Some(expected)) {
                return Ok(archive);
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!("the edge's archive never held {expected} for {query:?} (it holds {got:?})");
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// A running `hearth-control serve`.
pub struct ControlProcess {
    child: Child,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The one-time setup token, on a first run.
    pub setup_token: Option<String>,
    /// The admin prefix.
    pub admin: String,
    lines: std::sync::mpsc::Receiver<String>,
}

impl ControlProcess {
    /// Starts `serve` on `dir` with extra environment (`HEARTH_EDGE_URL`, ...).
    pub fn start(dir: &ControlDir, env: &[(&str, String)]) -> Result<ControlProcess> {
        Ok(ControlProcess::spawn(dir, env, false)?.0)
    }

    /// [`ControlProcess::start`] with its log read line by line (warnings and errors, without
    /// colours; each line is also written to the test's standard error).
    pub fn start_logged(
        dir: &ControlDir,
        env: &[(&str, String)],
    ) -> Result<(ControlProcess, std::sync::mpsc::Receiver<String>)> {
        let (control, log) = ControlProcess::spawn(dir, env, true)?;
        Ok((control, log.context("control's log")?))
    }

    /// [`ControlProcess::start`] of another build of `hearth-control` (the static one, say).
    pub fn start_program(dir: &ControlDir, program: &Path) -> Result<ControlProcess> {
        Ok(ControlProcess::spawn_program(dir, program, &[], false)?.0)
    }

    fn spawn(
        dir: &ControlDir,
        env: &[(&str, String)],
        logged: bool,
    ) -> Result<(ControlProcess, Option<std::sync::mpsc::Receiver<String>>)> {
        ControlProcess::spawn_program(dir, &crate::binary("hearth-control")?, env, logged)
    }

    fn spawn_program(
        dir: &ControlDir,
        program: &Path,
        env: &[(&str, String)],
        logged: bool,
    ) -> Result<(ControlProcess, Option<std::sync::mpsc::Receiver<String>>)> {
        let mut command = crate::cgroup::command(program);
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(&dir.path)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HEARTH_LISTEN", "127.0.0.1:0")
            // The suite's runs can ask for more (`HEARTH_SUITE_CONTROL_LOG`, e.g. the write
            // transactions' timings at `hearth_control::store=debug`) when profiling.
            .env("HEARTH_LOG", std::env::var("HEARTH_SUITE_CONTROL_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if logged { Stdio::piped() } else { Stdio::inherit() });
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().context("starting hearth-control")?;
        let log = child.stderr.take().map(|stderr| {
            use std::io::BufRead as _;
            let (tx, log) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                    eprintln!("{line}");
                    let _ = tx.send(line);
                }
            });
            log
        });
        let lines = crate::stdout_lines(&mut child);
        let first = match lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                bail!("hearth-control did not say where it listens within 60 s");
            }
        };
        let url = first
            .strip_prefix("hearth-control listening on ")
            .with_context(|| format!("unexpected first line {first:?}"))?
            .to_owned();
        let config = std::fs::read_to_string(dir.path.join("control.toml"))?;
        let admin = config
            .lines()
            .find_map(|l| l.strip_prefix("admin_prefix = \"").and_then(|r| r.strip_suffix('"')))
            .context("admin_prefix")?
            .to_owned();
        // The second line is the one-time setup link on a first run, else where to sign in.
        let second = lines.recv_timeout(Duration::from_secs(10)).context("control printed one line only")?;
        let setup_token =
            second.split_once("/setup#").and_then(|(_, token)| token.split_whitespace().next()).map(str::to_owned);
        Ok((ControlProcess { child, url, setup_token, admin, lines }, log))
    }

    /// The admin API's URL for `path`.
    pub fn api(&self, path: &str) -> String {
        format!("{}/{}/api{path}", self.url, self.admin)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lines control printed after start.
    pub fn printed(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    /// SIGTERM, then waits; an error if it does not stop cleanly within 10 s.
    pub fn stop(mut self) -> Result<()> {
        crate::stop_gracefully(&mut self.child, "control")
    }

    /// Waits (at most `within`) until the process ends by itself: a crash point, say.
    pub fn ended(mut self, within: Duration) -> Result<std::process::ExitStatus> {
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if started.elapsed() > within {
                let _ = self.child.kill();
                bail!("hearth-control did not end within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: the process dies wherever it is.
    pub fn kill9(mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// An admin API call with `token` that must succeed: its JSON answer (`null` when it has
    /// no body).
    pub async fn call(
        &self,
        client: &reqwest::Client,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value> {
        let mut request = client.request(method.clone(), self.api(path)).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            bail!("{method} {path}: {status} {text}");
        }
        if text.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).with_context(|| format!("{method} {path} answered no JSON"))
    }

    /// Adds a node through the admin API and enrolls it with its one-time command's token, as
    /// the node agent does it, with a key made here (no node process): its id and key, to
    /// pull sets and sign reports. `prefix` is the API prefix nodes use.
    pub async fn enroll_key(&self, client: &reqwest::Client, token: &str, prefix: &str) -> Result<(u64, SecretKey)> {
        let port = crate::edge::free_port()?;
        let body = json!({ "name": format!("Home {port}"), "host": "127.0.0.1", "port": port });
        let node = self.call(client, token, reqwest::Method::POST, "/nodes", Some(&body)).await?;
        let command = node["enroll_command"].as_str().context("no enroll command")?;
        if !command.contains("--control-pin") {
            bail!("the enroll command pins no certificate: {command}");
        }
        let enroll = command.split_whitespace().find_map(|w| w.strip_prefix("--token=")).context("no token")?;
        let key = SecretKey::generate(Role::Node, &mut rand_core::OsRng)?;
        let body = json!({ "token": enroll, "key": key.public().to_string(), "cert_sha256": "ab".repeat(32), "version": "test" });
        let enrolled: Value = client
            .post(format!("{}/{prefix}/enroll", self.url))
            .json(&body)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok((enrolled["node"].as_u64().context("no node id")?, key))
    }

    /// Adds a node through the admin API and enrolls it into `state` with exactly the command
    /// control printed (on loopback, reporting every second); returns its port and the
    /// command's arguments.
    pub async fn enroll_node(&self, client: &reqwest::Client, token: &str, state: &Path) -> Result<(u16, Vec<String>)> {
        let (port, args, _) = self.enroll_node_with(client, token, state, json!({})).await?;
        Ok((port, args))
    }

    /// [`ControlProcess::enroll_node`] with `settings` (the API's node fields) added; also
    /// what `enroll` printed.
    pub async fn enroll_node_with(
        &self,
        client: &reqwest::Client,
        token: &str,
        state: &Path,
        settings: Value,
    ) -> Result<(u16, Vec<String>, String)> {
        let port = crate::edge::free_port()?;
        let mut body = json!({ "name": format!("Home {port}"), "host": "127.0.0.1", "port": port });
        for (key, value) in settings.as_object().context("settings are an object")? {
            body[key] = value.clone();
        }
        let node = self.call(client, token, reqwest::Method::POST, "/nodes", Some(&body)).await?;
        let args: Vec<String> = node["enroll_command"]
            .as_str()
            .context("no enroll command")?
            .split_whitespace()
            .skip(1)
            .map(str::to_owned)
            .collect();
        let out = Command::new(crate::binary("hearth-node")?)
            .args(&args)
            .arg("--state")
            .arg(state)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--allow-private"])
            .output()?;
        if !out.status.success() {
            bail!("enroll failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        // First, where they are the file's own (tables may follow).
        let settings = std::fs::read_to_string(state.join("node.toml"))?;
        std::fs::write(
            state.join("node.toml"),
            "report_secs = 1\nedge_poll_secs = 1\nmetrics_listen = \"\"\n".to_owned() + &settings,
        )?;
        Ok((port, args, String::from_utf8_lossy(&out.stdout).into_owned()))
    }

    /// `n` sign-ins at once with wrong passwords (argon2id runs for each); their statuses.
    pub async fn wrong_sign_ins(&self, client: &reqwest::Client, n: usize) -> Result<Vec<u16>> {
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let (client, url) = (client.clone(), self.api("/login"));
                tokio::spawn(async move {
                    let body = json!({ "login": "owner", "password": format!("not the password {i}") });
                    client.post(url).json(&body).send().await.map(|r| r.status().as_u16())
                })
            })
            .collect();
        let mut statuses = Vec::with_capacity(n);
        for task in tasks {
            statuses.push(task.await??);
        }
        Ok(statuses)
    }

    /// Runs setup with the printed token, then makes an API token of `scope`; returns it.
    pub async fn setup(&self, client: &reqwest::Client, scope: &str) -> Result<String> {
        let token = self.setup_token.clone().context("no setup link was printed")?;
        let answer = client
            .post(self.api("/setup"))
            .json(&json!({ "token": token, "login": "owner", "password": "correct horse battery" }))
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!("setup failed: {}", answer.text().await?);
        }
        self.token_in_session(client, &answer, scope).await
    }

    /// Signs `login` in with `password` and makes an API token of `scope` in that session.
    pub async fn token_for(
        &self,
        client: &reqwest::Client,
        login: &str,
        password: &str,
        scope: &str,
    ) -> Result<String> {
        let answer =
            client.post(self.api("/login")).json(&json!({ "login": login, "password": password })).send().await?;
        if !answer.status().is_success() {
            bail!("signing {login} in failed: {}", answer.text().await?);
        }
        self.token_in_session(client, &answer, scope).await
    }

    /// An API token of `scope`, made in the session a sign-in's `answer` opened.
    async fn token_in_session(
        &self,
        client: &reqwest::Client,
        answer: &reqwest::Response,
        scope: &str,
    ) -> Result<String> {
        let cookie = answer
            .headers()
            .get("set-cookie")
            .context("no session cookie")?
            .to_str()?
            .split(';')
            .next()
            .context("cookie")?
            .to_owned();
        let answer: Value = client
            .post(self.api("/tokens"))
            .header("cookie", cookie)
            .json(&json!({ "name": "test", "scope": scope }))
            .send()
            .await?
            .json()
            .await?;
        answer["token"].as_str().map(str::to_owned).context("no token in the answer")
    }
}

impl Drop for ControlProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A client of control's admin API with a token, for tests that drive control as an
/// operator's script would.
pub struct Api {
    pub http: reqwest::Client,
    pub token: String,
}

impl Api {
    /// A call's status and JSON answer (`Null` when it has none).
    pub async fn call(
        &self,
        control: &ControlProcess,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (reqwest::StatusCode, Value) {
        let mut request = self.http.request(method, control.api(path)).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("control answers");
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A call that must succeed: its JSON answer.
    pub async fn ok(
        &self,
        control: &ControlProcess,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        let (status, value) = self.call(control, method, path, body).await;
        assert!(status.is_success(), "{path}: {status} {value}");
        value
    }

    /// `GET` that must answer 200.
    pub async fn get(&self, control: &ControlProcess, path: &str) -> Value {
        let (status, value) = self.call(control, reqwest::Method::GET, path, None).await;
        assert_eq!(status, reqwest::StatusCode::OK, "{path}: {value}");
        value
    }

    /// `POST` that must succeed.
    pub async fn post(&self, control: &ControlProcess, path: &str, body: Value) -> Value {
        self.ok(control, reqwest::Method::POST, path, Some(body)).await
    }

    /// `PATCH` that must succeed.
    pub async fn patch(&self, control: &ControlProcess, path: &str, body: Value) -> Value {
        self.ok(control, reqwest::Method::PATCH, path, Some(body)).await
    }
}

/// An edge's own settings: control's root key, and a push token, API prefix and link folder of
/// its own, named after it.
pub fn own_edge_vars(dir: &ControlDir, name: &str) -> Result<Vec<(String, String)>> {
    Ok(vec![
        ("HEARTH_ROOT_KEY".into(), dir.edge_setting("root_key")?),
        ("HEARTH_PUSH_TOKEN".into(), format!("{name}-push-token-0123456789abcdef")),
        ("HEARTH_API_PREFIX".into(), format!("{name}-api-0123456789abcdef")),
        ("HEARTH_SUB_PREFIX".into(), format!("{name}-links")),
    ])
}

/// Starts the Worker in workerd as the edge `name`, on settings of its own
/// ([`own_edge_vars`]) and its state under `state`, and adds it to `control` through the API
/// (offering links at its link folder).
pub async fn add_worker_edge(
    api: &Api,
    control: &ControlProcess,
    dir: &ControlDir,
    state: &Path,
    name: &str,
) -> Result<crate::edge::EdgeProcess> {
    let vars = own_edge_vars(dir, name)?;
    let worker = crate::edge::EdgeProcess::start(crate::edge::Backend::Worker, state, &vars)?;
    let body = serde_json::json!({
        "name": name,
        "url": worker.url,
        "api_prefix": vars[2].1,
        "push_token": vars[1].1,
        "link_base": format!("{}/{}-links", worker.url, name),
    });
    let added = api.post(control, "/edges", body).await;
    anyhow::ensure!(added["id"].is_i64(), "control did not add the edge: {added}");
    Ok(worker)
}

/// Control on its own (serving links and the node API itself), set up, with an admin API
/// token. Its state is under `temp`.
pub struct Alone {
    pub temp: tempfile::TempDir,
    pub dir: ControlDir,
    pub control: ControlProcess,
    /// Trusts control's certificate.
    pub http: reqwest::Client,
    pub api: Api,
}

impl Alone {
    pub async fn start() -> Result<Alone> {
        let temp = tempfile::tempdir()?;
        let dir = ControlDir::init(&temp.path().join("control"))?;
        let control = ControlProcess::start(&dir, &[])?;
        let http = dir.client()?;
        let api = Api { token: control.setup(&http, "admin").await?, http: http.clone() };
        Ok(Alone { temp, dir, control, http, api })
    }

    /// A `GET` of the admin API that must answer 200.
    pub async fn get(&self, path: &str) -> Value {
        self.api.get(&self.control, path).await
    }

    /// A call of the admin API that must succeed.
    pub async fn ok(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.api.ok(&self.control, method, path, body).await
    }
}

/// Control pushing to a native edge ("main"), both running, with an admin API token: where
/// tests of many edges start. Its state is under `root`.
pub struct WithEdge {
    pub dir: ControlDir,
    pub main: crate::edge::EdgeProcess,
    pub control: ControlProcess,
    /// Trusts control's certificate.
    pub http: reqwest::Client,
    pub api: Api,
}

impl WithEdge {
    pub async fn start(root: &Path) -> Result<WithEdge> {
        WithEdge::start_with(root, &[]).await
    }

    /// With more of control's environment (`HEARTH_TELEGRAM_API`, say).
    pub async fn start_with(root: &Path, env: &[(&str, String)]) -> Result<WithEdge> {
        let dir = ControlDir::init(&root.join("control"))?;
        let main =
            crate::edge::EdgeProcess::start(crate::edge::Backend::Native, &root.join("main.db"), &dir.edge_vars()?)?;
        let mut env = env.to_vec();
        env.push(("HEARTH_EDGE_URL", main.url.clone()));
        let control = ControlProcess::start(&dir, &env)?;
        let http = dir.client()?;
        let api = Api { token: control.setup(&http, "admin").await?, http: http.clone() };
        Ok(WithEdge { dir, main, control, http, api })
    }
}
