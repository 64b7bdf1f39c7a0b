//! A hostile edge against the programs that read from it: a node pulling its set, reading
//! acknowledgements and fetching a release; control draining usage and pushing; a restore
//! paging through the export. The edge answers with bodies far longer than the answer can be
//! (saying so, or chunked and never ending) and with an export that never ends or does not
//! advance. Each program reads only what the answer can hold, keeps its memory (the kernel's
//! high-water mark of the process) far below what the answer would take, says why, and goes
//! on: a node keeps serving its last good set to the real sing-box client and takes a good
//! set after; control drains and pushes again once the edge answers well; a restore stops
//! with a clear error and leaves nothing behind.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hearth_shared::envelope::{Audience, Envelope, Kind};
use hearth_shared::keys::{Role, SecretKey};
use hearth_shared::nodeauth;
use hearth_shared::sha256;
use hearth_shared::wire::{self, CredEntry, CredentialSet, ExportItem, ExportPage, UsageDrain, UsageReport, UserUsage};
use hearth_tests::control::{Archiving, ControlDir, ControlProcess};
use hearth_tests::control_sim::{ControlSim, now, release};
use hearth_tests::node::{NodeProcess, ProxyClient, fetch, fetch_eventually, http_server, metric, until_logged};
use hearth_tests::stand_in::{Answer, Body, RISE_KIB, Request, Seen, peak, stand_in, until};

const API: &str = "api-hostile-edge-0123456789";

fn set(users: &[(u64, &str)]) -> CredentialSet {
    CredentialSet::new(1, users.iter().map(|(user, cred)| CredEntry::new(*user, sha256(cred.as_bytes()))).collect())
        .unwrap()
}

/// What the stand-in edge answers node 1 with.
struct NodeEdge {
    /// The set offered and its version: answered when newer than the one the node holds.
    set: (Vec<u8>, u64),
    /// A hostile answer to pulls, in place of the set.
    pull: Option<Body>,
    /// A hostile answer for an acknowledgement (else: none yet, 204).
    ack: Option<Body>,
    /// The release pulls name, its manifest and its file.
    release: Option<u64>,
    manifest: Body,
    file: Body,
}

fn node_answer(edge: &NodeEdge, request: &Request) -> Answer {
    let tail = request.path.strip_prefix(&format!("/{API}/nodes/1")).unwrap_or_default();
    let after: u64 = request.param("after").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut answer = match tail {
        "/creds" => match &edge.pull {
            Some(body) => Answer::new(200, body.clone()),
            None if edge.set.1 > after => Answer::bytes(200, &edge.set.0),
            None => Answer::bytes(204, b""),
        },
        "/usage" => Answer::bytes(202, b"queued\n"),
        "/ack" => edge.ack.clone().map_or_else(|| Answer::bytes(204, b""), |body| Answer::new(200, body)),
        "/release" if edge.release.is_some() => Answer::new(200, edge.manifest.clone()),
        file if file.starts_with("/release/") => Answer::new(200, edge.file.clone()),
        _ => Answer::bytes(404, b"not here\n"),
    };
    if tail == "/creds"
        && let Some(release) = edge.release
    {
        answer.headers.push((nodeauth::RELEASE_HEADER, release.to_string()));
    }
    answer
}

/// A node (serving alice from the set it holds) that pulls from a stand-in edge every
/// second and reports usage every second; its log, metrics, the stand-in's state, and alice
/// with the web server she fetches from through the node.
struct NodeLab {
    _temp: tempfile::TempDir,
    sim: ControlSim,
    dir: std::path::PathBuf,
    node: NodeProcess,
    log: std::sync::mpsc::Receiver<String>,
    metrics: String,
    edge: Arc<Mutex<NodeEdge>>,
    seen: Arc<Seen>,
    alice: ProxyClient,
    web: std::net::SocketAddr,
    /// The node's memory at its peak once it served alice and pulled well.
    baseline: u64,
}

impl NodeLab {
    async fn start() -> NodeLab {
        let temp = tempfile::tempdir().unwrap();
        let mut sim = ControlSim::new();
        let first = sim.creds(&set(&[(1, "alice-pw")])).envelope().unwrap().to_vec();
        let edge = Arc::new(Mutex::new(NodeEdge {
            set: (first.clone(), 1),
            pull: None,
            ack: None,
            release: None,
            manifest: Body::Endless,
            file: Body::Endless,
        }));
        let answers = edge.clone();
        let (url, seen) = stand_in(move |request| node_answer(&answers.lock().unwrap(), request)).await;
        let dir = temp.path().join("node");
        let settings = format!("edge_url = \"{url}\"\napi_prefix = \"{API}\"\nedge_poll_secs = 1\nreport_secs = 1\n");
        hearth_tests::node::state_dir_with(&dir, &sim, 1, &settings).unwrap();
        hearth_tests::node::save_node_key(&dir, &SecretKey::generate(Role::Node, &mut rand_core::OsRng).unwrap())
            .unwrap();
        std::fs::write(dir.join("creds.envelope"), &first).unwrap();
        let (node, log) = NodeProcess::start_logged(&dir).unwrap();
        let metrics = node.metrics_url().unwrap();
        let web = http_server(b"through the node".to_vec()).await.unwrap();
        let alice = ProxyClient::sing_box(node.outbound("alice-pw")).unwrap();
        assert_eq!(fetch(&alice, web).await.unwrap(), b"through the node");
        let pulls = seen.requests("creds");
        until("two pulls answered well", node.pid(), u64::MAX, || seen.requests("creds") >= pulls + 2).await;
        let baseline = peak(node.pid());
        seen.pid.store(node.pid(), Ordering::Relaxed);
        NodeLab { _temp: temp, sim, dir, node, log, metrics, edge, seen, alice, web, baseline }
    }

    /// Waits for `done`, with the node's memory kept within its bound.
    async fn until(&self, what: &str, done: impl FnMut() -> bool) {
        until(what, self.node.pid(), self.baseline + RISE_KIB, done).await;
    }

    /// Alice still gets through, with the set the node held before (version 1, alice alone).
    async fn still_serving(&self, what: &str) {
        assert_eq!(fetch(&self.alice, self.web).await.unwrap(), b"through the node", "alice was cut off by {what}");
        assert_eq!(metric(&self.metrics, "hearth_node_set_version").await.unwrap(), 1, "{what} replaced the set");
        assert_eq!(hearth_tests::node::held_set(&self.dir).unwrap().1, vec![1], "{what} reached the disk");
    }

    /// What the node read whole, and its memory against its bound.
    fn check_memory(&self) {
        self.seen.check_memory("the node", self.node.pid(), self.baseline);
    }
}

#[tokio::test]
async fn a_node_keeps_serving_its_set_through_oversized_and_endless_answers_to_its_pulls() {
    let mut lab = NodeLab::start().await;
    let said = format!("an answer over {} bytes, more than a credential set can be", Kind::CredentialSet.max_len());
    for (what, body) in [("an oversized answer", Body::Oversized), ("an endless answer", Body::Endless)] {
        let before = lab.seen.hung_up("creds");
        while lab.log.try_recv().is_ok() {}
        lab.edge.lock().unwrap().pull = Some(body);
        lab.until(&format!("the node hung up on {what} to two pulls"), || lab.seen.hung_up("creds") >= before + 2)
            .await;
        let line =
            until_logged(&lab.log, &said, Duration::from_secs(60)).await.unwrap_or_else(|e| panic!("{what}: {e:#}"));
        assert!(line.contains("refused the edge's answer to a pull; serving the set held"), "{what}: {line}");
        lab.still_serving(what).await;
    }

    // A good set is taken after: the pulls go on.
    let next = lab.sim.creds(&set(&[(1, "alice-pw"), (2, "bob-pw")])).envelope().unwrap().to_vec();
    {
        let mut edge = lab.edge.lock().unwrap();
        (edge.set, edge.pull) = ((next, 2), None);
    }
    let bob = ProxyClient::sing_box(lab.node.outbound("bob-pw")).unwrap();
    assert_eq!(fetch_eventually(&bob, lab.web).await.unwrap(), b"through the node");
    assert_eq!(metric(&lab.metrics, "hearth_node_set_version").await.unwrap(), 2);
    assert_eq!(fetch(&lab.alice, lab.web).await.unwrap(), b"through the node");
    lab.check_memory();
    lab.node.stop().unwrap();
}

#[tokio::test]
async fn a_node_reads_acknowledgements_and_releases_from_the_edge_only_up_to_what_they_can_be() {
    let lab = NodeLab::start().await;
    // Alice's bytes make a report, which goes to the edge (there is no control here); the
    // node then asks the edge for control's acknowledgement.
    lab.edge.lock().unwrap().ack = Some(Body::Endless);
    assert_eq!(fetch(&lab.alice, lab.web).await.unwrap(), b"through the node");
    lab.until("the node hung up on an endless acknowledgement", || lab.seen.hung_up("ack") >= 1).await;
    let said = format!("an answer over {} bytes, more than an acknowledgement can be", Kind::UsageAck.max_len());
    let line = until_logged(&lab.log, &said, Duration::from_secs(60)).await.unwrap();
    assert!(line.contains("refused the edge's answer for an acknowledgement"), "{line}");
    lab.still_serving("an endless acknowledgement").await;

    // Pulls name release 7: its manifest never ends, then a good manifest names a file the
    // edge sends without end.
    lab.edge.lock().unwrap().release = Some(7);
    lab.until("the node hung up on an endless manifest", || lab.seen.hung_up("release") >= 1).await;
    let said = format!("an answer over {} bytes, more than a release manifest can be", Kind::Release.max_len());
    let line = until_logged(&lab.log, &said, Duration::from_secs(60)).await.unwrap();
    assert!(line.contains("could not fetch the release yet"), "{line}");
    lab.still_serving("an endless manifest").await;

    let binary = vec![0x7f; 100_000];
    let (manifest, _) = release(&lab.sim.release, 7, "9.9.9", &[("linux", "x86_64", binary)], now() + 86_400);
    lab.edge.lock().unwrap().manifest = Body::Bytes(manifest);
    let file = "hearth-node-linux-x86_64";
    lab.until("the node hung up on an endless release file", || lab.seen.hung_up(file) >= 1).await;
    let said = "an answer over 100000 bytes, more than the release file its manifest names can be";
    let line = until_logged(&lab.log, said, Duration::from_secs(60)).await.unwrap();
    assert!(line.contains("not taking the release"), "{line}");
    // The node writes down why after it logs it: read once it has (a loaded machine may be slow).
    let started = std::time::Instant::now();
    let status = loop {
        match std::fs::read_to_string(lab.dir.join("update.status")) {
            Ok(status) if status.contains(said) => break status,
            other => assert!(started.elapsed() < Duration::from_secs(10), "update.status: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.starts_with("7 ") && status.contains(said), "update.status: {status}");
    lab.still_serving("an endless release file").await;
    lab.check_memory();
    lab.node.stop().unwrap();
}

/// What the stand-in edge answers control with.
#[derive(Default)]
struct ControlEdge {
    /// A hostile answer to drains (else: an empty drain).
    drain: Option<Body>,
    /// A hostile refusal of pushes (else: accepted).
    push: Option<Body>,
}

fn control_answer(edge: &ControlEdge, api: &str, request: &Request) -> Answer {
    let after: u64 = request.param("after").and_then(|v| v.parse().ok()).unwrap_or(0);
    match request.path.strip_prefix(&format!("/{api}")).unwrap_or_default() {
        "/usage" => match &edge.drain {
            Some(body) => Answer::new(200, body.clone()),
            None => Answer::bytes(200, &wire::encode(&UsageDrain { cursor: after, reports: Vec::new() })),
        },
        "/push" => match &edge.push {
            Some(body) => Answer::new(503, body.clone()),
            None => Answer::bytes(200, br#"{"applied":1}"#),
        },
        "/archive" | "/release" => Answer::bytes(200, b"stored\n"),
        _ => Answer::bytes(404, b"not here\n"),
    }
}

/// A control data directory under `root`, and a stand-in edge for it that answers control's
/// routes as the returned [`ControlEdge`] says: the edge, its URL and what it saw.
async fn control_edge(root: &Path) -> (ControlDir, Arc<Mutex<ControlEdge>>, String, Arc<Seen>) {
    let dir = ControlDir::init(&root.join("control")).unwrap();
    let api = dir.edge_setting("api_prefix").unwrap();
    let edge = Arc::new(Mutex::new(ControlEdge::default()));
    let answers = edge.clone();
    let (url, seen) = stand_in(move |request| control_answer(&answers.lock().unwrap(), &api, request)).await;
    (dir, edge, url, seen)
}

#[tokio::test]
async fn control_drains_and_pushes_on_after_oversized_and_endless_answers() {
    let temp = tempfile::tempdir().unwrap();
    let (dir, edge, url, seen) = control_edge(temp.path()).await;
    let (control, log) = ControlProcess::start_logged(&dir, &[("HEARTH_EDGE_URL", url)]).unwrap();
    let https = dir.client().unwrap();
    let token = control.setup(&https, "admin").await.unwrap();
    let status =
        || async { control.call(&https, &token, reqwest::Method::GET, "/status", None).await.unwrap()["edge"].clone() };
    let user = |name: &'static str| {
        let body = serde_json::json!({ "name": name });
        let (control, https, token) = (&control, &https, &token);
        async move { control.call(https, token, reqwest::Method::POST, "/users", Some(&body)).await.unwrap() }
    };
    let pid = control.pid();
    // Drained and pushed well first.
    user("alice").await;
    let started = Instant::now();
    loop {
        let edge = status().await;
        if edge["last_drain"].as_u64() > Some(0) && edge["pending"] == 0 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "control never drained and pushed: {edge}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let baseline = peak(pid);
    seen.pid.store(pid, Ordering::Relaxed);
    let bound = baseline + RISE_KIB;

    let drain_said = format!("an answer over {} bytes, more than a drain of usage reports can be", UsageDrain::MAX_LEN);
    let push_said = "an answer over 4096 bytes, more than an error message can be";
    for (what, body, name) in
        [("an oversized answer", Body::Oversized, "bob"), ("an endless answer", Body::Endless, "carol")]
    {
        let (drains, pushes) = (seen.hung_up("usage"), seen.hung_up("push"));
        while log.try_recv().is_ok() {}
        {
            let mut edge = edge.lock().unwrap();
            (edge.drain, edge.push) = (Some(body.clone()), Some(body));
        }
        // A change to push.
        user(name).await;
        until(&format!("control hung up on {what} to a drain and to a push"), pid, bound, || {
            seen.hung_up("usage") > drains && seen.hung_up("push") > pushes
        })
        .await;
        let line =
            until_logged(&log, &drain_said, Duration::from_secs(60)).await.unwrap_or_else(|e| panic!("{what}: {e:#}"));
        assert!(line.contains("usage drain from the edge failed"), "{what}: {line}");
        let line =
            until_logged(&log, push_said, Duration::from_secs(120)).await.unwrap_or_else(|e| panic!("{what}: {e:#}"));
        assert!(line.contains("push to the edge failed") && line.contains("503"), "{what}: {line}");
    }

    // The edge answers well again: control drains and pushes what waited.
    let healed = now();
    {
        let mut edge = edge.lock().unwrap();
        (edge.drain, edge.push) = (None, None);
    }
    let started = Instant::now();
    loop {
        let edge = status().await;
        if edge["last_drain"].as_u64() > Some(healed) && edge["pending"] == 0 && edge["last_error"].is_null() {
            break;
        }
        // A push waits out the backoff its failures built up (at most 60 s).
        assert!(started.elapsed() < Duration::from_secs(150), "control did not drain and push again: {edge}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen.check_memory("control", pid, baseline);
    control.stop().unwrap();
}

/// How the stand-in edge answers a restore's export.
#[derive(Clone, Copy, Debug)]
enum Export {
    /// A page far longer than a page can be, saying so.
    Oversized,
    /// A page that never ends.
    Endless,
    /// Pages, each with one deleted link and a cursor never given before, without end.
    Unending,
    /// Every page gives the same cursor.
    Stuck,
    /// The cursors go round: a, b, a, ...
    Circling,
    /// One empty page; then an archive far longer than an archive can be, saying so.
    OversizedArchive,
    /// One empty page; then an archive that never ends.
    EndlessArchive,
}

impl Export {
    /// How far the restore's memory may rise: [`RISE_KIB`], over the most the answer may
    /// legitimately hold (an archive can be far longer than a page).
    fn rise_kib(self) -> u64 {
        match self {
            Export::OversizedArchive | Export::EndlessArchive => RISE_KIB + Kind::Archive.max_len() as u64 / 1024,
            _ => RISE_KIB,
        }
    }
}

fn export_answer(export: Export, api: &str, pages: &AtomicU64, request: &Request) -> Answer {
    match export {
        Export::OversizedArchive | Export::EndlessArchive if request.path == format!("/{api}/archive") => {
            let body = if matches!(export, Export::OversizedArchive) { Body::Oversized } else { Body::Endless };
            return Answer::new(200, body);
        }
        _ if request.path != format!("/{api}/export") => return Answer::bytes(404, b"not here\n"),
        _ => {}
    }
    let page = pages.fetch_add(1, Ordering::Relaxed);
    let next = match export {
        Export::Oversized => return Answer::new(200, Body::Oversized),
        Export::Endless => return Answer::new(200, Body::Endless),
        Export::OversizedArchive | Export::EndlessArchive => {
            return Answer::bytes(200, &wire::encode(&ExportPage { batch: 1, ..ExportPage::default() }));
        }
        Export::Unending => format!("l.0.{page:064x}"),
        Export::Stuck => "s.00".to_owned(),
        Export::Circling => format!("s.0{}", page % 2),
    };
    let item = ExportItem { stream: format!("sub/{page:064x}"), version: 1, envelope: None };
    Answer::bytes(200, &wire::encode(&ExportPage { items: vec![item], next: Some(next), keys: None, batch: 1 }))
}

/// Runs `hearth-control restore` from a stand-in edge that answers the export as `export`
/// says; returns what it said on standard error, with the restore's memory at its peak and
/// when it first asked for a page, in KiB.
async fn restore_from(control: &ControlDir, export: Export) -> (String, u64, u64) {
    let api = control.edge_setting("api_prefix").unwrap();
    let pages = Arc::new(AtomicU64::new(0));
    let served = pages.clone();
    let (url, seen) = stand_in(move |request| export_answer(export, &api, &served, request)).await;
    let into = control.path.with_file_name(format!("restored-{export:?}"));
    let mut child = std::process::Command::new(hearth_tests::binary("hearth-control").unwrap())
        .arg("restore")
        .arg("--from-edge")
        .arg(&url)
        .arg("--edge-settings")
        .arg(control.path.join("edge.toml"))
        .arg("--recovery-key")
        .arg(control.path.join("recovery.key"))
        .arg("--data-dir")
        .arg(&into)
        // A backtrace for its error would read the debug binary's symbols: tens of MiB that
        // are no part of reading the answer.
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let runaway = || {
        let served = pages.load(Ordering::Relaxed);
        (served > 2 * ExportPage::MAX_PAGES as u64).then(|| format!("{served} pages"))
    };
    let what = format!("{export:?}: the restore");
    let (status, said) = seen.watch(&mut child, &what, export.rise_kib(), Duration::from_secs(240), runaway).await;
    let (kib, baseline) = (seen.peak_kib.load(Ordering::Relaxed), seen.first_kib.load(Ordering::Relaxed));
    eprintln!("{export:?}: memory {baseline} KiB at start, {kib} KiB sampled; it said: {said}");
    assert!(baseline > 0, "{export:?}: the restore's memory was never sampled");
    assert!(!status.success(), "{export:?}: the restore succeeded");
    assert!(!Path::new(&into).exists(), "{export:?}: the restore left {}", into.display());
    assert_eq!(seen.whole(), Vec::<String>::new(), "{export:?}: the restore read a hostile page whole");
    (said, kib, baseline)
}

#[tokio::test]
async fn a_restore_stops_at_an_oversized_or_endless_export_page() {
    let temp = tempfile::tempdir().unwrap();
    let control = ControlDir::init(&temp.path().join("control")).unwrap();
    let said = format!("an answer over {} bytes, more than a page of the export can be", ExportPage::MAX_LEN);
    for export in [Export::Oversized, Export::Endless] {
        let (error, kib, baseline) = restore_from(&control, export).await;
        assert!(
            error.contains("reading a page of the export from the edge") && error.contains(&said),
            "{export:?}: {error}"
        );
        assert!(kib <= baseline + RISE_KIB, "{export:?}: memory at {} MiB from {} MiB", kib / 1024, baseline / 1024);
    }
}

#[tokio::test]
async fn a_restore_stops_at_an_oversized_or_endless_archive() {
    let temp = tempfile::tempdir().unwrap();
    let control = ControlDir::init(&temp.path().join("control")).unwrap();
    let said = format!("an answer over {} bytes, more than the archive can be", Kind::Archive.max_len());
    for export in [Export::OversizedArchive, Export::EndlessArchive] {
        let (error, kib, baseline) = restore_from(&control, export).await;
        assert!(error.contains("reading the archive from the edge") && error.contains(&said), "{export:?}: {error}");
        let (mib, from) = (kib / 1024, baseline / 1024);
        assert!(kib <= baseline + export.rise_kib(), "{export:?}: memory at {mib} MiB from {from} MiB");
    }
}

#[tokio::test]
async fn a_restore_stops_an_export_that_never_ends_or_does_not_advance() {
    let temp = tempfile::tempdir().unwrap();
    let control = ControlDir::init(&temp.path().join("control")).unwrap();
    let (error, _, _) = restore_from(&control, Export::Unending).await;
    let said = format!("the edge's export goes on past {} pages, more than an edge can hold", ExportPage::MAX_PAGES);
    assert!(error.contains(&said), "{error}");
    for (export, page) in [(Export::Stuck, 2), (Export::Circling, 3)] {
        let (error, _, _) = restore_from(&control, export).await;
        let said = format!("the edge's export does not advance: page {page} gives a cursor an earlier page gave");
        assert!(error.contains(&said), "{export:?}: {error}");
    }
}

/// The whole export of the edge at `url`, read with `dir`'s push token, as one page.
async fn export_of(url: &str, dir: &ControlDir) -> ExportPage {
    let client = hearth_tests::http().build().unwrap();
    let (api, token) = (dir.edge_setting("api_prefix").unwrap(), dir.edge_setting("push_token").unwrap());
    let (mut whole, mut after) = (ExportPage::default(), String::new());
    loop {
        let answer = client.get(format!("{url}/{api}/export?after={after}")).bearer_auth(&token).send().await.unwrap();
        let page: ExportPage =
            wire::decode(&answer.error_for_status().unwrap().bytes().await.unwrap(), "page").unwrap();
        whole.items.extend(page.items);
        whole.keys = whole.keys.or(page.keys);
        whole.batch = page.batch;
        match page.next {
            Some(next) => after = next,
            None => return whole,
        }
    }
}

/// The streams (name, version, envelope) of a control database.
async fn streams_of(database: &Path) -> HashMap<String, (u64, Option<Vec<u8>>)> {
    let db = libsql::Builder::new_local(database).build().await.unwrap();
    let mut rows = db.connect().unwrap().query("SELECT name, version, envelope FROM streams", ()).await.unwrap();
    let mut streams = HashMap::new();
    while let Some(row) = rows.next().await.unwrap() {
        let envelope = row.get::<Option<Vec<u8>>>(2).unwrap();
        streams.insert(row.get::<String>(0).unwrap(), (row.get::<u64>(1).unwrap(), envelope));
    }
    streams
}

/// The users a stored credential set lets in.
fn set_users(envelope: &[u8]) -> Vec<CredEntry> {
    let envelope = Envelope::decode(envelope, Kind::CredentialSet.max_len()).unwrap();
    CredentialSet::decode(&envelope.body).unwrap().users().to_vec()
}

/// A restore from an edge that doctored its export keeps only what control signed for each
/// stream and what agrees with the archive, and says what it left out: a credential set
/// signed by a key the root never certified (for an enrolled node, letting in the attacker's
/// password, and for a node that does not exist), a stream control never publishes, an item
/// listed at another version than it was signed at, a real envelope under another stream's
/// name, and a user's older snapshot (a rollback behind the archive). A later rotation of the
/// signing key then signs only what control's own state makes: a forged set planted in the
/// database is not signed, however it got there.
#[tokio::test]
async fn a_restore_keeps_only_what_verifies_and_agrees_with_the_archive_and_a_rotation_signs_only_control_state() {
    let temp = tempfile::tempdir().unwrap();
    let Archiving { dir, edge, control, https, token, .. } = Archiving::start(temp.path()).await.unwrap();
    control.enroll_node(&https, &token, &temp.path().join("node")).await.unwrap();
    let call = |method: reqwest::Method, path: String, body: Option<serde_json::Value>| {
        let (control, https, token) = (&control, &https, &token);
        async move { control.call(https, token, method, &path, body.as_ref()).await.unwrap() }
    };
    let node = call(reqwest::Method::GET, "/nodes".into(), None).await["nodes"][0]["id"].as_u64().unwrap();
    let alice =
        call(reqwest::Method::POST, "/users".into(), Some(serde_json::json!({ "name": "alice", "quota": 1000 }))).await
            ["id"]
            .as_u64()
            .unwrap();
    let settled = || async {
        let deadline = Instant::now() + Duration::from_secs(60);
        while call(reqwest::Method::GET, "/status".into(), None).await["edge"]["pending"] != 0 {
            assert!(Instant::now() < deadline, "control never pushed its changes");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    settled().await;
    let before = export_of(&edge.url, &dir).await.items;
    call(reqwest::Method::PATCH, format!("/users/{alice}"), Some(serde_json::json!({ "quota": 2000 }))).await;
    settled().await;
    let query = format!("SELECT quota FROM users WHERE id = {alice}");
    dir.archive_holding(&edge.url, &query, 2000).await.unwrap();
    let ExportPage { items: after, keys, batch, .. } = export_of(&edge.url, &dir).await;
    control.stop().unwrap();

    // The doctored export.
    let item = |items: &[ExportItem], name: &str| items.iter().find(|i| i.stream == name).cloned().unwrap();
    let (creds, record) = (format!("creds/{node}"), format!("node/{node}"));
    let real_creds = item(&after, &creds);
    let alice_stream = after
        .iter()
        .find(|i| i.stream.starts_with("sub/") && before.iter().any(|b| b.stream == i.stream && b.version < i.version))
        .unwrap()
        .stream
        .clone();
    let attacker = CredEntry::new(666, sha256(b"the attacker's password"));
    let mut users = set_users(real_creds.envelope.as_deref().unwrap());
    users.push(attacker);
    let sim = ControlSim::new();
    let forged = |node: u64, version: u64, users: Vec<CredEntry>| {
        let set = CredentialSet::new(node, users).unwrap();
        let item =
            sim.item_at(Kind::CredentialSet, format!("creds/{node}"), version, Audience::Node(node), set.encode());
        ExportItem { stream: format!("creds/{node}"), version, envelope: item.envelope().map(<[u8]>::to_vec) }
    };
    let mut doctored: Vec<ExportItem> =
        after.iter().filter(|i| i.stream != creds && i.stream != alice_stream && i.stream != record).cloned().collect();
    doctored.push(forged(node, real_creds.version + 5, users));
    doctored.push(forged(999, 3, vec![attacker]));
    doctored.push(item(&before, &alice_stream));
    doctored.push(ExportItem { stream: "junk/1".into(), version: 1 << 40, envelope: Some(vec![7; 64]) });
    let real_record = item(&after, &record);
    doctored.push(ExportItem { version: real_record.version + 1000, ..real_record.clone() });
    doctored.push(ExportItem { stream: "node/77".into(), ..real_record.clone() });
    doctored.sort_by(|a, b| a.stream.cmp(&b.stream));
    let archive_bytes = hearth_tests::http()
        .build()
        .unwrap()
        .get(format!("{}/{}/archive", edge.url, dir.edge_setting("api_prefix").unwrap()))
        .bearer_auth(dir.edge_setting("push_token").unwrap())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let api = dir.edge_setting("api_prefix").unwrap();
    let page = wire::encode(&ExportPage { items: doctored, next: None, keys, batch });
    let (url, _) = stand_in(move |request| {
        if request.path == format!("/{api}/export") {
            Answer::bytes(200, &page)
        } else if request.path == format!("/{api}/archive") {
            Answer::bytes(200, &archive_bytes)
        } else {
            Answer::bytes(404, b"not here\n")
        }
    })
    .await;

    let restored = ControlDir { path: temp.path().join("restored") };
    // On a thread of its own: the stand-in answers on this one.
    let printed = tokio::task::spawn_blocking({
        let (restored, safe) = (ControlDir { path: restored.path.clone() }, dir.path.clone());
        move || restored.restore(&url, &safe, &safe.join("recovery.key"), false).unwrap()
    })
    .await
    .unwrap();
    eprintln!("{printed}");
    let note = |said: &str| printed.lines().find(|line| line.contains(said)).unwrap_or_default().to_owned();
    let unverified = note("do not verify against the root key for their stream");
    for name in [&creds, "creds/999", "node/77"] {
        assert!(unverified.contains(&format!(" {name}")), "{name} not named as unverified: {printed}");
    }
    assert!(unverified.contains("3 items"), "{printed}");
    assert!(note("are not streams control publishes").contains("1 items of the edge's export"), "{printed}");
    assert!(note("are not streams control publishes").contains("junk/1"), "{printed}");
    assert!(note("another version than they were signed at").contains(&record), "{printed}");
    assert!(note("are older than the archive's").contains(&alice_stream), "{printed}");

    let streams = streams_of(&restored.path.join("control.db")).await;
    for name in ["creds/999", "junk/1", "node/77"] {
        assert!(!streams.contains_key(name), "the restore kept {name}");
    }
    assert!(streams[&record].0 < real_record.version + 1000, "the restore took a version nobody signed");
    let (_, Some(set)) = &streams[&creds] else { panic!("no set for node {node}") };
    assert!(!set_users(set).contains(&attacker), "the restored set lets the attacker in");
    let quota = {
        let db = libsql::Builder::new_local(restored.path.join("control.db")).build().await.unwrap();
        let mut rows = db.connect().unwrap().query(&format!("SELECT quota FROM users WHERE id = {alice}"), ()).await;
        rows.as_mut().unwrap().next().await.unwrap().unwrap().get::<u64>(0).unwrap()
    };
    assert_eq!(quota, 2000, "the restore took alice's snapshot from before the archive");

    // A forged set planted in the database is not what a rotation signs.
    let forged_set = forged(node, streams[&creds].0, vec![attacker]).envelope.unwrap();
    let planted = forged(999, 1, vec![attacker]).envelope.unwrap();
    {
        let db = libsql::Builder::new_local(restored.path.join("control.db")).build().await.unwrap();
        let conn = db.connect().unwrap();
        conn.execute("UPDATE streams SET envelope = ?1 WHERE name = ?2", libsql::params![forged_set, creds.clone()])
            .await
            .unwrap();
        conn.execute(
            "INSERT INTO streams (name, version, digest, envelope) VALUES ('creds/999', 1, zeroblob(32), ?1)",
            libsql::params![planted],
        )
        .await
        .unwrap();
    }
    let root = dir.path.join("root.key");
    restored.cli(&["keys", "rotate", "--role", "signing", "--root-key", root.to_str().unwrap()]).unwrap();
    let rotated = streams_of(&restored.path.join("control.db")).await;
    let (version, Some(set)) = &rotated[&creds] else { panic!("no set for node {node} after the rotation") };
    assert!(*version > streams[&creds].0, "the rotation did not sign node {node}'s set again");
    assert!(!set_users(set).contains(&attacker), "the rotation signed the forged set");
    let (_, planted) = &rotated["creds/999"];
    assert!(planted.is_none(), "the rotation signed a set for a node control does not have");
    edge.stop().unwrap();
}

/// Control counts from a drain only the reports its nodes signed, and each once: a hostile
/// edge's drain holds a report for node A signed by a key control never registered, one
/// signed by node B's key, one with a bit of its body changed after signing, the genuine
/// report, and the genuine report again (and the same drain at every pass, a replay of them
/// all). Alice's usage is the genuine report's, once.
#[tokio::test]
async fn control_counts_from_a_drain_only_what_its_nodes_signed_and_each_report_once() {
    let temp = tempfile::tempdir().unwrap();
    let (dir, edge, url, seen) = control_edge(temp.path()).await;
    let control = ControlProcess::start(&dir, &[("HEARTH_EDGE_URL", url)]).unwrap();
    let https = dir.client().unwrap();
    let token = control.setup(&https, "admin").await.unwrap();
    let prefix = dir.edge_setting("api_prefix").unwrap();
    let (a, key_a) = control.enroll_key(&https, &token, &prefix).await.unwrap();
    let (_, key_b) = control.enroll_key(&https, &token, &prefix).await.unwrap();
    let body = serde_json::json!({ "name": "alice" });
    let alice = control.call(&https, &token, reqwest::Method::POST, "/users", Some(&body)).await.unwrap()["id"]
        .as_u64()
        .unwrap();
    let report = |key: &SecretKey, seq: u64, down: u64| {
        let users = vec![UserUsage { user: alice, up: 1000, down }];
        UsageReport {
            node: a,
            seq,
            period_start: now() - 60,
            period_end: now(),
            users,
            presence: Vec::new(),
            release: None,
            kicked: Vec::new(),
        }
        .sign(key, now())
        .encode()
    };
    let genuine = report(&key_a, 1, 2000);
    let mut altered = Envelope::decode(&report(&key_a, 2, 2000), Kind::UsageReport.max_len()).unwrap();
    *altered.body.last_mut().unwrap() ^= 0x01;
    let stranger = SecretKey::generate(Role::Node, &mut rand_core::OsRng).unwrap();
    let reports = [report(&stranger, 2, 50_000), report(&key_b, 2, 60_000), altered.encode(), genuine.clone(), genuine];
    let drain = UsageDrain { cursor: 5, reports: reports.into_iter().map(Into::into).collect() };
    edge.lock().unwrap().drain = Some(Body::Bytes(wire::encode(&drain)));

    let used = || async {
        let user = control.call(&https, &token, reqwest::Method::GET, &format!("/users/{alice}"), None).await.unwrap();
        (user["used_up"].as_u64().unwrap(), user["used_down"].as_u64().unwrap())
    };
    let started = Instant::now();
    while used().await == (0, 0) {
        assert!(started.elapsed() < Duration::from_secs(60), "control never applied the drain");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Three more passes over the same drain.
    let drains = seen.requests("usage");
    let started = Instant::now();
    while seen.requests("usage") < drains + 3 {
        assert!(started.elapsed() < Duration::from_secs(60), "control stopped draining");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(used().await, (1000, 2000), "alice's usage is not the genuine report's, once");
    control.stop().unwrap();
}
