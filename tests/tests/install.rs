//! The one-line installs. A node: the command the panel prints, run as an operator would paste
//! it, against a real control pushing to a local native edge, into a temporary root
//! (`HEARTH_INSTALL_ROOT`: every path the script writes, the system user in its `etc/passwd`),
//! with systemctl stood in for (systemd cannot run here) by a script that writes down what it
//! was asked. Each refusal (not Linux, an architecture without a binary, no systemd, the port in
//! use, a binary missing from control, a binary or a script that is not the one the command
//! names) says why and leaves nothing behind; the install then works, a second run changes
//! nothing, and the installed node carries a real sing-box client's traffic. Control: see its
//! test below.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use hearth_tests::control::WithEdge;
use hearth_tests::node::{ProxyClient, fetch_eventually, http_server, profile_outbounds};
use serde_json::{Value, json};

/// A temporary root to install into.
struct Root {
    dir: tempfile::TempDir,
    systemctl: PathBuf,
}

impl Root {
    fn new(systemd: bool) -> Root {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc");
        std::fs::create_dir_all(&etc).unwrap();
        // What `useradd --prefix` reads and writes.
        for (file, text) in [
            ("passwd", "root:x:0:0:root:/root:/bin/sh\n"),
            ("group", "root:x:0:\n"),
            ("shadow", "root:*:19000:0:99999:7:::\n"),
            ("gshadow", "root:*::\n"),
        ] {
            std::fs::write(etc.join(file), text).unwrap();
        }
        if systemd {
            std::fs::create_dir_all(dir.path().join("run/systemd/system")).unwrap();
        }
        let systemctl = dir.path().join("systemctl");
        let log = dir.path().join("systemctl.log");
        std::fs::write(&systemctl, format!("#!/bin/sh\necho \"$*\" >> '{}'\n", log.display())).unwrap();
        Command::new("chmod").arg("755").arg(&systemctl).status().unwrap();
        Root { dir, systemctl }
    }

    fn path(&self, inside: &str) -> PathBuf {
        self.dir.path().join(inside)
    }

    /// Runs `command` (with `more` after it) as the operator would, in this root.
    fn run(&self, command: &str, more: &str, env: &[(&str, &str)]) -> (bool, String) {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{command}{more}"))
            .env("HEARTH_INSTALL_ROOT", self.dir.path())
            .env("HEARTH_SYSTEMCTL", &self.systemctl)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), said)
    }

    /// What the install left: nothing, after a refusal.
    fn installed(&self) -> Vec<&'static str> {
        ["opt/hearth-node", "var/lib/hearth-node", "etc/systemd/system/hearth-node.service", "systemctl.log"]
            .into_iter()
            .filter(|p| self.path(p).exists())
            .collect()
    }
}

fn mode(path: &Path) -> u32 {
    std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(path).unwrap().permissions()) & 0o777
}

#[tokio::test]
async fn a_node_installs_from_its_one_line_command_and_carries_traffic() {
    // Control pushing to a local native edge: the link the client fetches is the edge's.
    let temp = tempfile::tempdir().unwrap();
    let s = WithEdge::start(temp.path()).await.unwrap();
    let (dir, http) = (&s.dir, &s.http);
    let call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let (s, path) = (&s, path.to_owned());
        async move { s.api.ok(&s.control, method, &path, body).await }
    };

    // Without a release there is no one-line install: the panel says how to publish one.
    let early = call(reqwest::Method::POST, "/nodes", Some(json!({ "name": "Early", "host": "127.0.0.1" }))).await;
    assert!(early["install_command"].is_null(), "{early}");
    let listing = dir.cli(&["node", "enroll-command", "Early"]).unwrap();
    assert!(listing.starts_with("hearth-node enroll"), "{listing}");

    // A release of this build's node binary.
    let binary = hearth_tests::binary("hearth-node").unwrap();
    dir.cli(&["release", "sign", "--version", "0.1.0", "--expires", "30d", binary.to_str().unwrap()]).unwrap();
    let port = hearth_tests::edge::free_port().unwrap();
    let body = json!({ "name": "Frankfurt 1", "host": "127.0.0.1", "port": port });
    let node = call(reqwest::Method::POST, "/nodes", Some(body)).await;
    let command = node["install_command"].as_str().unwrap_or_else(|| panic!("no install command: {node}")).to_owned();
    assert!(!command.contains('\n'), "one line: {command}");
    let binary_hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(std::fs::read(&binary).unwrap()));
    assert!(command.ends_with(&format!("--sha256 x86_64={binary_hash}")), "{command}");
    // On loopback here, where a node listens on a port of the test's.
    let here = format!(" --listen 127.0.0.1:{port} --allow-private");

    // Each refusal says why and leaves nothing behind (and keeps the one-time token).
    type Refusal<'a> = (Root, String, Vec<(&'a str, &'a str)>, &'a str);
    let refusals: Vec<Refusal<'_>> = vec![
        (Root::new(true), command.clone(), vec![("HEARTH_INSTALL_OS", "FreeBSD")], "this server runs FreeBSD"),
        (Root::new(true), command.clone(), vec![("HEARTH_INSTALL_ARCH", "mips64")], "architecture is mips64"),
        (Root::new(true), command.clone(), vec![("HEARTH_INSTALL_ARCH", "aarch64")], "has no aarch64 binary"),
        (Root::new(false), command.clone(), vec![], "does not run systemd"),
        (
            Root::new(true),
            command.replace("x86_64=", "aarch64="),
            vec![("HEARTH_INSTALL_ARCH", "aarch64")],
            "could not download hearth-node-linux-aarch64 from control",
        ),
        (
            Root::new(true),
            command.replace(&binary_hash, &"0".repeat(64)),
            vec![],
            "the command expects 0000000000000000000000000000000000000000000000000000000000000000: nothing installed",
        ),
    ];
    for (root, command, env, says) in &refusals {
        let (ok, said) = root.run(command, &here, env);
        assert!(!ok && said.contains(says), "{says}: {said}");
        assert_eq!(root.installed(), Vec::<&str>::new(), "{says}: {said}");
    }
    // A script that is not the one the command names never runs.
    let root = Root::new(true);
    let script_hash = command.split("echo \"").nth(1).unwrap().split(' ').next().unwrap().to_owned();
    let (ok, said) = root.run(&command.replace(&script_hash, &"f".repeat(64)), &here, &[]);
    assert!(!ok && said.contains("FAILED"), "{said}");
    assert_eq!(root.installed(), Vec::<&str>::new());
    // The node's port in use.
    let taken = std::net::UdpSocket::bind(("127.0.0.1", port)).unwrap();
    let (ok, said) = root.run(&command, &here, &[]);
    assert!(!ok && said.contains(&format!("UDP port {port} is in use")), "{said}");
    assert_eq!(root.installed(), Vec::<&str>::new());
    drop(taken);

    // The install: binary, user, state, unit; enrolled; started through systemctl.
    let (ok, said) = root.run(&command, &here, &[]);
    assert!(ok, "{said}");
    assert!(said.contains("the node is enrolled and running"), "{said}");
    let installed = root.path("opt/hearth-node/hearth-node");
    assert_eq!(std::fs::read(&installed).unwrap(), std::fs::read(&binary).unwrap());
    assert_eq!(mode(&installed), 0o755);
    assert_eq!(mode(&root.path("var/lib/hearth-node")), 0o700);
    let passwd = std::fs::read_to_string(root.path("etc/passwd")).unwrap();
    let user = passwd.lines().find(|l| l.starts_with("hearth-node:")).unwrap_or_else(|| panic!("no user: {passwd}"));
    let uid: u32 = user.split(':').nth(2).unwrap().parse().unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(root.path("var/lib/hearth-node/node.toml")).unwrap()),
        uid
    );
    let unit = std::fs::read_to_string(root.path("etc/systemd/system/hearth-node.service")).unwrap();
    assert_eq!(unit.trim_end(), include_str!("../../deploy/hearth-node.service").trim_end());
    let systemctl = std::fs::read_to_string(root.path("systemctl.log")).unwrap();
    assert_eq!(systemctl, "daemon-reload\nenable --now hearth-node\n");
    let nodes = call(reqwest::Method::GET, &format!("/nodes/{}", node["id"]), None).await;
    assert_eq!(nodes["enrolled"], true, "{nodes}");

    // Again: it says so and changes nothing.
    let before = std::fs::metadata(&installed).unwrap().modified().unwrap();
    let (ok, said) = root.run(&command, &here, &[]);
    assert!(ok && said.contains("a Hearth node already"), "{said}");
    assert_eq!(std::fs::read_to_string(root.path("systemctl.log")).unwrap(), systemctl);
    assert_eq!(std::fs::metadata(&installed).unwrap().modified().unwrap(), before);

    // The installed node, run as its unit runs it, carries a sing-box client's traffic.
    let mut child = Command::new(&installed)
        .arg("serve")
        .env("HEARTH_NODE_STATE", root.path("var/lib/hearth-node"))
        .env("HEARTH_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let lines = hearth_tests::stdout_lines(&mut child);
    let first = lines.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(first.starts_with("hearth-node listening on "), "{first}");
    let user = call(reqwest::Method::POST, "/users", Some(json!({ "name": "Grandma" }))).await;
    let link = user["link"].as_str().unwrap();
    assert!(link.starts_with(&s.main.url), "the edge serves the link: {link}");
    let outbounds = profile_outbounds(http, link).await.unwrap();
    let outbound =
        outbounds.iter().find(|o| o["server_port"] == port).cloned().unwrap_or_else(|| panic!("{outbounds:?}"));
    let phone = ProxyClient::sing_box(outbound).unwrap();
    let web = http_server(b"through the installed node".to_vec()).await.unwrap();
    assert_eq!(fetch_eventually(&phone, web).await.unwrap(), b"through the installed node");
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
}

/// Control on a fresh server in one line (`deploy/install.sh`), into a temporary root: systemctl
/// stood in for by a script that starts the installed unit's command as the unit would (its
/// output is the stand-in journal). It refuses a server that is not Linux, has no systemd, a
/// binary that is not there, and any data directory already there (untouched); it installs the
/// binary, the user, the data directory and the unit, starts control and prints the one-time
/// setup link, which works; run again, it changes nothing.
#[tokio::test]
async fn control_installs_in_one_line_and_prints_a_setup_link_that_works() {
    let binary = hearth_tests::binary("hearth-control").unwrap();
    let script = hearth_tests::repo_root().join("deploy/install.sh");
    let port = hearth_tests::edge::free_port().unwrap();
    let root = Root::new(true);
    // The stand-ins: `enable --now hearth-control` runs the unit's command with its
    // environment, in the background; journalctl prints what it said.
    let journal = root.path("journal.log");
    let pid = root.path("control.pid");
    std::fs::write(
        &root.systemctl,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{log}'\nif [ \"$*\" = 'enable --now hearth-control' ]; then\n\
             HEARTH_DATA_DIR='{data}' HEARTH_LOG_FORMAT=json '{bin}' serve > '{journal}' 2>&1 &\necho $! > '{pid}'\nfi\n",
            log = root.path("systemctl.log").display(),
            data = root.path("var/lib/hearth").display(),
            bin = root.path("usr/local/bin/hearth-control").display(),
            journal = journal.display(),
            pid = pid.display(),
        ),
    )
    .unwrap();
    let journalctl = root.path("journalctl");
    std::fs::write(&journalctl, format!("#!/bin/sh\ncat '{}' 2>/dev/null\n", journal.display())).unwrap();
    Command::new("chmod").arg("755").arg(&journalctl).status().unwrap();
    let journalctl = journalctl.to_str().unwrap().to_owned();
    let install = |root: &Root, args: &str, env: &[(&str, &str)]| {
        let mut env = env.to_vec();
        env.push(("HEARTH_JOURNALCTL", &journalctl));
        root.run(&format!("sh '{}' {args}", script.display()), "", &env)
    };
    let args = format!("--host panel.example.net --port {port} --bind 127.0.0.1 --binary '{}'", binary.display());

    // Refusals: nothing written.
    let control_files = |root: &Root| {
        [
            "usr/local/bin/hearth-control",
            "usr/local/lib/hearth",
            "var/lib/hearth",
            "etc/systemd/system/hearth-control.service",
        ]
        .into_iter()
        .filter(|p| root.path(p).exists())
        .collect::<Vec<_>>()
    };
    for (root, args, env, says) in [
        (Root::new(true), args.clone(), vec![("HEARTH_INSTALL_OS", "Darwin")], "this server runs Darwin"),
        (Root::new(false), args.clone(), vec![], "does not run systemd"),
        (
            Root::new(true),
            "--host panel.example.net --binary /nonexistent/hearth-control".to_owned(),
            vec![],
            "no binary at",
        ),
        (Root::new(true), format!("{args} --node-binary /nonexistent/hearth-node"), vec![], "no node binary at"),
        (Root::new(true), "--binary x".to_owned(), vec![], "--host panel.example.net"),
        (Root::new(true), "--host 'a|b&c' --binary x".to_owned(), vec![], "a DNS name or an IPv4 address"),
    ] {
        let (ok, said) = install(&root, &args, &env);
        assert!(!ok && said.contains(says), "{says}: {said}");
        assert_eq!(control_files(&root), Vec::<&str>::new(), "{says}");
    }
    let occupied = Root::new(true);
    std::fs::create_dir_all(occupied.path("var/lib/hearth")).unwrap();
    std::fs::write(occupied.path("var/lib/hearth/control.db"), b"someone's data").unwrap();
    let (ok, said) = install(&occupied, &args, &[]);
    assert!(!ok && said.contains("never touches a data directory"), "{said}");
    assert_eq!(std::fs::read(occupied.path("var/lib/hearth/control.db")).unwrap(), b"someone's data");
    assert!(!occupied.path("usr/local/bin/hearth-control").exists());

    // The install.
    let (ok, said) = install(&root, &args, &[]);
    let started: Option<u32> = std::fs::read_to_string(&pid).ok().and_then(|p| p.trim().parse().ok());
    let stop = || {
        if let Some(pid) = started {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    };
    if !ok {
        stop();
        panic!("{said}");
    }
    let link = said
        .split_whitespace()
        .find(|w| w.contains("/setup#"))
        .unwrap_or_else(|| {
            stop();
            panic!("no setup link: {said}")
        })
        .to_owned();
    assert!(link.starts_with(&format!("https://panel.example.net:{port}/")), "{link}");
    assert!(said.contains(&format!("TCP port {port}")) && said.contains("root.key"), "{said}");
    assert_eq!(mode(&root.path("usr/local/bin/hearth-control")), 0o755);
    assert_eq!(mode(&root.path("var/lib/hearth")), 0o700);
    let settings = std::fs::read_to_string(root.path("var/lib/hearth/control.toml")).unwrap();
    assert!(settings.contains(&format!("listen = \"127.0.0.1:{port}\"")), "{settings}");
    assert!(settings.contains(&format!("public_url = \"https://panel.example.net:{port}\"")), "{settings}");
    let unit = std::fs::read_to_string(root.path("etc/systemd/system/hearth-control.service")).unwrap();
    assert_eq!(unit, include_str!("../../deploy/hearth-control.service"));
    assert!(std::fs::read_to_string(root.path("etc/passwd")).unwrap().contains("\nhearth:"));

    // The link works: its page answers, and its token creates the owner.
    let (path, token) = link.split_once('#').unwrap();
    let local = path.replace("panel.example.net", "127.0.0.1");
    let http = hearth_tests::http().danger_accept_invalid_certs(true).build().unwrap();
    let page = http.get(&local).send().await.unwrap();
    assert_eq!(page.status(), reqwest::StatusCode::OK);
    let api = local.replace("/setup", "/api/setup");
    let body = json!({ "token": token, "login": "owner", "password": "correct horse battery" });
    let setup = http.post(&api).json(&body).send().await.unwrap();
    assert_eq!(setup.status(), reqwest::StatusCode::OK, "{:?}", setup.text().await);

    // The node binary beside the one given came with it, where control finds it: the panel
    // offers to publish it as a release (its architecture read, the release key here).
    let shipped = root.path("usr/local/lib/hearth/hearth-node");
    assert_eq!(mode(&shipped), 0o755);
    let node_binary = hearth_tests::binary("hearth-node").unwrap();
    assert_eq!(std::fs::read(&shipped).unwrap(), std::fs::read(&node_binary).unwrap());
    let settings = std::fs::read_to_string(root.path("var/lib/hearth/control.toml")).unwrap();
    assert!(settings.contains(&format!("node_binaries = \"{}\"", root.path("usr/local/lib/hearth").display())));
    assert!(said.contains("publishes it as the first node release in one click"), "{said}");
    let cookie = setup.headers()[reqwest::header::SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_owned();
    let releases = api.replace("/api/setup", "/api/releases");
    let listed: Value =
        http.get(&releases).header(reqwest::header::COOKIE, cookie).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        listed["shipped"]["binaries"],
        json!([{ "os": "linux", "arch": std::env::consts::ARCH, "len": std::fs::metadata(&shipped).unwrap().len() }]),
        "{listed}"
    );
    assert_eq!(listed["shipped"]["key_here"], true);

    // Again: installed already, nothing changed.
    let log = std::fs::read_to_string(root.path("systemctl.log")).unwrap();
    let (ok, said) = install(&root, &args, &[]);
    assert!(ok && said.contains("installed here already"), "{said}");
    assert_eq!(std::fs::read_to_string(root.path("systemctl.log")).unwrap(), log);
    stop();
}
