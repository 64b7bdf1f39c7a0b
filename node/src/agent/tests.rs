//! The agent's tests: sets and deltas taken, refused and stored, and what pulls log.

use std::path::Path;
use std::sync::atomic::Ordering;

use hearth_shared::envelope::Draft;
use hearth_shared::sha256;
use hearth_shared::trust::{KeyRecord, RoleKeys};
use hearth_shared::wire::CredEntry;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use hearth_shared::envelope::{Audience, Kind};
use hearth_shared::keys::{Role, SecretKey};
use hearth_shared::trust::{Trust, VerifyError};
use hearth_shared::wire::{self, CredentialSet, NodeId, stream};

use super::accept::AcceptError;
use super::edges::Base;
use super::edges::Edges;
use super::state::Agent;
use crate::now;
use crate::state::{DELTA_FILE, DeltaError, StateDir};
use crate::table::Live;

/// The node the agent runs as.
const NODE: NodeId = 3;

/// Control's keys, as a node that enrolled trusts them: the root, and the signing key it
/// certified.
struct Control {
    root: SecretKey,
    signing: SecretKey,
}

impl Control {
    fn new() -> Control {
        Control {
            root: SecretKey::from_seed(Role::Root, &[1; 32]),
            signing: SecretKey::from_seed(Role::Signing, &[2; 32]),
        }
    }

    /// What the node trusts after enrollment and the signing key's record.
    fn trust(&self) -> Trust {
        let body = KeyRecord { role: Role::Signing, keys: RoleKeys::single(self.signing.public()) };
        let draft = self.draft(Kind::KeyRecord, stream::keys(Role::Signing), 1, Audience::Any);
        let record = draft.sign(wire::encode(&body), &[&self.root]).encode();
        let mut trust = Trust::new(RoleKeys::single(self.root.public()));
        trust.accept_key_record(&record, now()).expect("the signing key's record");
        trust
    }

    fn draft(&self, kind: Kind, stream: String, version: u64, audience: Audience) -> Draft {
        Draft { kind, stream, version, epoch: 1, issued: now() - 10, expires: now() + 3600, audience, prev: [0; 32] }
    }

    /// `body` signed by `key` as version `version` of this node's credential set.
    fn sign(&self, key: &SecretKey, version: u64, body: Vec<u8>) -> Vec<u8> {
        self.draft(Kind::CredentialSet, stream::creds(NODE), version, Audience::Node(NODE)).sign(body, &[key]).encode()
    }

    /// Version `version` of the set for `node`, with `users` (id, password).
    fn set(&self, node: NodeId, version: u64, users: &[(u64, &str)]) -> Vec<u8> {
        let entries = users.iter().map(|(user, password)| CredEntry::new(*user, sha256(password.as_bytes())));
        let set = CredentialSet::new(node, entries.collect()).expect("a set");
        self.sign(&self.signing, version, set.encode())
    }
}

/// The users (id, password) as a set for [`NODE`].
fn users(users: &[(u64, &str)]) -> CredentialSet {
    let entries = users.iter().map(|(user, password)| CredEntry::new(*user, sha256(password.as_bytes())));
    CredentialSet::new(NODE, entries.collect()).expect("a set")
}

impl Control {
    /// Version `version` of the delta from `base` (signed at `on`) to `new`.
    fn delta(&self, version: u64, base: &CredentialSet, on: u64, new: &CredentialSet) -> Vec<u8> {
        let (from, to) = (sha256(&base.encode()), sha256(&new.encode()));
        let delta = wire::CredDelta::between(base, on, from, new, to).expect("a delta");
        self.draft(Kind::CredDelta, stream::creds_delta(NODE), version, Audience::Node(NODE))
            .sign(delta.encode(), &[&self.signing])
            .encode()
    }
}

/// A delta applies to the full set the node holds and makes the set control built; one
/// on another full set, one that makes anything else, or one older than what the node
/// applied is refused and changes nothing; a restart serves the full set with its delta,
/// and a full set replaces both.
#[test]
fn deltas_apply_to_the_full_set_held_and_survive_a_restart() {
    let control = Control::new();
    let dir = tempfile::tempdir().unwrap();
    let agent = agent(dir.path(), control.trust());
    let alice = users(&[(1, "alice")]);
    let bob = users(&[(2, "bob")]);
    let both = users(&[(1, "alice"), (2, "bob")]);
    // Before any full set, a delta has nothing to apply to.
    let early = control.delta(2, &alice, 1, &both);
    assert!(matches!(agent.accept(&early, None), Err(AcceptError::Delta(DeltaError::OtherBase { base: 1 }))));
    assert!(agent.accept(&control.sign(&control.signing, 1, alice.encode()), None).unwrap());
    assert_eq!(serving(&agent), (1, Some(1), Some(1), None));

    // Bob joins, then alice leaves: each delta runs from the full set at 1.
    assert!(agent.accept(&early, None).unwrap());
    assert_eq!(serving(&agent), (2, Some(2), Some(1), Some(2)));
    let later = control.delta(3, &alice, 1, &bob);
    assert!(agent.accept(&later, None).unwrap());
    assert_eq!(serving(&agent), (3, Some(3), None, Some(2)));
    assert!(!agent.accept(&later, None).unwrap(), "the same delta again is no news");

    // Refused, changing nothing: an older delta, one on another full set, one that does
    // not make the set it names, one for another node's stream.
    assert!(matches!(agent.accept(&early, None), Err(AcceptError::Verify(VerifyError::Stale { .. }))));
    let elsewhere = control.delta(4, &alice, 7, &both);
    assert!(matches!(agent.accept(&elsewhere, None), Err(AcceptError::Delta(DeltaError::OtherBase { base: 7 }))));
    let (from, to) = (sha256(&alice.encode()), sha256(&both.encode()));
    let mut lying = wire::CredDelta::between(&alice, 1, from, &alice, to).unwrap();
    lying.diff.added.push(CredEntry::new(3, sha256(b"mallory")));
    let lying = control
        .draft(Kind::CredDelta, stream::creds_delta(NODE), 4, Audience::Node(NODE))
        .sign(lying.encode(), &[&control.signing])
        .encode();
    assert!(matches!(agent.accept(&lying, None), Err(AcceptError::Delta(DeltaError::Apply(_)))));
    assert_eq!(agent.live.authenticate(b"mallory"), None);
    assert_eq!(serving(&agent), (3, Some(3), None, Some(2)));

    // A restart serves the full set with the delta on it, and holds the delta's version.
    let last = agent.state.last_good(&control.trust(), NODE, now()).unwrap().unwrap();
    assert_eq!((last.held.version, last.basis.version, last.set.as_ref()), (3, 1, &bob));
    // A delta on disk that does not verify is left out: the full set is served.
    std::fs::write(dir.path().join(DELTA_FILE), &lying[..lying.len() - 1]).unwrap();
    let last = agent.state.last_good(&control.trust(), NODE, now()).unwrap().unwrap();
    assert_eq!((last.held.version, last.set.as_ref()), (1, &alice));
    std::fs::write(dir.path().join(DELTA_FILE), &later).unwrap();

    // A full set replaces the basis and the delta on disk.
    assert!(agent.accept(&control.sign(&control.signing, 5, both.encode()), None).unwrap());
    assert_eq!(serving(&agent), (5, Some(5), Some(1), Some(2)));
    assert!(!dir.path().join(DELTA_FILE).exists());
    assert!(matches!(agent.accept(&later, None), Err(AcceptError::Verify(VerifyError::Stale { .. }))));

    // Deltas on it are applied by the users they touch, against what the one before
    // made: bob leaves, then comes back as alice leaves, then the full set again.
    assert!(agent.accept(&control.delta(6, &both, 5, &alice), None).unwrap());
    assert_eq!(serving(&agent), (6, Some(6), Some(1), None));
    assert!(agent.accept(&control.delta(7, &both, 5, &bob), None).unwrap());
    assert_eq!(serving(&agent), (7, Some(7), None, Some(2)));
    assert!(agent.accept(&control.delta(8, &both, 5, &both), None).unwrap());
    assert_eq!(serving(&agent), (8, Some(8), Some(1), Some(2)));
}

/// An agent for node [`NODE`] with its state in `dir`, trusting `trust`, holding no set; it
/// talks to nobody (these tests hand it sets directly).
fn agent(dir: &Path, trust: Trust) -> Agent {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Agent {
        state: StateDir::new(dir),
        settings: toml::from_str(&format!("node = {NODE}")).expect("settings"),
        key: SecretKey::from_seed(Role::Node, &[3; 32]),
        trust: Mutex::new(trust),
        live: Arc::new(Live::default()),
        held: Mutex::default(),
        control: None,
        edge: reqwest::Client::builder().build().expect("an HTTP client"),
        edges: Mutex::new(Edges::new(Vec::new(), None, String::new())),
        offered: AtomicU64::new(0),
        restart: tokio::sync::watch::channel(false).0,
        draining: Default::default(),
        started: std::time::Instant::now(),
        reported: Mutex::default(),
        acme: None,
    }
}

/// The version served and held, and who of alice (1) and bob (2) may connect.
fn serving(agent: &Agent) -> (u64, Option<u64>, Option<u64>, Option<u64>) {
    let held = agent.held.lock().unwrap().state.map(|held| held.version);
    let live = &agent.live;
    (live.version.load(Ordering::Relaxed), held, live.authenticate(b"alice"), live.authenticate(b"bob"))
}

/// A set that cannot be written to disk is the node's failure to store it, not a bad
/// body: nothing of it is applied, and the same set is taken once the disk is back.
#[test]
fn a_set_that_cannot_be_stored_is_a_store_failure_and_is_not_applied() {
    let control = Control::new();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let agent = agent(&state, control.trust());
    assert!(agent.accept(&control.set(NODE, 1, &[(1, "alice")]), None).unwrap());
    assert_eq!(serving(&agent), (1, Some(1), Some(1), None));

    // A file where the state directory was: no write succeeds, even as root.
    std::fs::remove_dir_all(&state).unwrap();
    std::fs::write(&state, b"not a directory").unwrap();
    let v2 = control.set(NODE, 2, &[(2, "bob")]);
    match agent.accept(&v2, None) {
        Err(AcceptError::Store(e)) => assert!(format!("{e:#}").contains("creds"), "{e:#}"),
        other => panic!("a failed write must be a store failure, not {other:?}"),
    }
    assert_eq!(serving(&agent), (1, Some(1), Some(1), None), "the live table was changed");

    // The disk is back: the next pull takes the set.
    std::fs::remove_file(&state).unwrap();
    std::fs::create_dir(&state).unwrap();
    assert!(agent.accept(&v2, None).unwrap());
    assert_eq!(serving(&agent), (2, Some(2), None, Some(2)));
    assert_eq!(std::fs::read(state.join("creds.envelope")).unwrap(), v2);
}

/// Each refusal says what was wrong with what was sent, and changes nothing.
#[test]
fn refused_sets_say_why_and_change_nothing() {
    let control = Control::new();
    let dir = tempfile::tempdir().unwrap();
    let agent = agent(dir.path(), control.trust());
    let stranger = SecretKey::from_seed(Role::Signing, &[9; 32]);
    let unknown = control.sign(&stranger, 1, CredentialSet::new(NODE, Vec::new()).unwrap().encode());
    assert!(matches!(agent.accept(&unknown, None), Err(AcceptError::Verify(VerifyError::UnknownKey))));
    assert!(matches!(
        agent.accept(&control.set(NODE + 1, 1, &[(1, "alice")]), None),
        Err(AcceptError::OtherNode { found }) if found == NODE + 1
    ));
    let garbage = control.sign(&control.signing, 1, b"not a set".to_vec());
    assert!(matches!(agent.accept(&garbage, None), Err(AcceptError::NotASet(_))));
    assert_eq!(serving(&agent), (0, None, None, None));
    assert!(!dir.path().join("creds.envelope").exists());
}

/// Logs written through the node's own log setup ([`hearth_io::logs`]) into memory.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Text (or JSON) logs of the node's own events, at `debug`.
    fn dispatch(&self, json: bool) -> tracing::Dispatch {
        // With a single dispatcher alive in the process, tracing decides whether a
        // callsite is enabled with the dispatcher of the thread that reaches it first (in
        // another test, none): a second one, alive for good, makes it ask every live one.
        static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
        SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
        let writer = self.clone();
        hearth_io::logs::logs(json, tracing_subscriber::EnvFilter::new("hearth_node=debug"), false, move || {
            writer.clone()
        })
    }

    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }

    /// The first line logged with `message`.
    fn line(&self, message: &str) -> String {
        let text = self.text();
        text.lines()
            .find(|line| line.contains(message))
            .unwrap_or_else(|| panic!("no {message:?} in:\n{text}"))
            .to_owned()
    }
}

/// What taking a set logs is in a span that names the set's version, in text and in JSON;
/// the line still says `version=<n>` itself, which the test suite reads.
#[test]
fn what_accept_logs_is_in_a_span_naming_the_version() {
    let control = Control::new();
    for json in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let agent = agent(dir.path(), control.trust());
        let logs = Logs::default();
        let set = control.set(NODE, 7, &[(1, "alice")]);
        tracing::dispatcher::with_default(&logs.dispatch(json), || assert!(agent.accept(&set, None).unwrap()));
        let line = logs.line("applied a new credential set");
        if json {
            let line: serde_json::Value = serde_json::from_str(&line).unwrap();
            let span = serde_json::json!({ "name": "accept", "version": 7 });
            assert_eq!((&line["span"], &line["spans"]), (&span, &serde_json::json!([span])), "{line}");
            assert_eq!(line["fields"]["version"], 7, "{line}");
        } else {
            assert!(line.contains("accept{version=7}:"), "{line}");
            assert!(line.split_whitespace().any(|word| word == "version=7"), "{line}");
        }
    }
}

/// A pull logs where it asked by host alone: never the API prefix in its URL's path.
#[tokio::test]
async fn a_pull_names_where_it_asked_and_never_the_api_prefix() {
    let control = Control::new();
    let dir = tempfile::tempdir().unwrap();
    let agent = agent(dir.path(), control.trust());
    // A port nothing listens at: the edge does not answer.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = Base { url: format!("http://127.0.0.1:{port}"), prefix: "the-secret-api-prefix".into() };
    let logs = Logs::default();
    let guard = tracing::dispatcher::set_default(&logs.dispatch(false));
    assert!(agent.pull(&agent.edge, &base, 0, false).await.is_none());
    drop(guard);
    let line = logs.line("the edge did not answer the pull");
    assert!(line.contains(&format!("pull{{from=\"edge\" host=127.0.0.1:{port}}}:")), "{line}");
    assert!(!logs.text().contains("the-secret-api-prefix"), "{}", logs.text());
    let named = Base { url: "https://someone:a-password@Edge.example:443/x".into(), prefix: "p".into() };
    assert_eq!(named.host(), "edge.example");
}
