//! Restores of control checked field by field: users with varied quota, expiry, usage, status,
//! groups and reset; the owner's profile and User-Agent rules; what every link serves. A
//! restore from the snapshots alone must give back everything it does not name as lost, and
//! lose what it names; a restore from an archive older than the edge's snapshots must catch up
//! every change made after the archive.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hearth_tests::control::{Archiving, ControlDir, ControlProcess, EdgeArchive};
use hearth_tests::edge::EdgeProcess;
use hearth_tests::node::{NodeProcess, ProxyClient, fetch_eventually, http_server, profile_outbound};
use reqwest::Method;
use serde_json::{Value, json};

/// The clients a link is fetched with: sing-box, Clash Meta, a browser (the page), an app
/// only the owner's rule knows, and one no rule names (the default format).
const AGENTS: &[&str] = &[
    "SFA/1.13.0 (sing-box 1.13.0)",
    "clash.meta/1.19.0",
    "Mozilla/5.0 (X11; Linux x86_64) Firefox/130.0",
    "HearthTestApp/2.1",
    "curl/8.5.0",
];

/// The owner's User-Agent rule: an app no built-in rule knows gets Clash Meta's format.
fn owner_rules() -> Value {
    json!([{ "contains": "HearthTestApp", "target": "mihomo" }])
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// Control, the edge and two enrolled nodes (`a` in `default`, `b` in `staff`; `a` runs),
/// with users of every kind.
struct Lab {
    temp: tempfile::TempDir,
    dir: ControlDir,
    edge: EdgeProcess,
    env: Vec<(&'static str, String)>,
    control: Option<ControlProcess>,
    https: reqwest::Client,
    token: String,
    /// Users by name: their ids and links.
    users: BTreeMap<String, (u64, String)>,
    node: Option<NodeProcess>,
    _node_b: std::path::PathBuf,
}

impl Lab {
    fn control(&self) -> &ControlProcess {
        self.control.as_ref().expect("control is running")
    }

    /// An admin API call that must succeed.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        self.control().call(&self.https, &self.token, method, path, body.as_ref()).await.unwrap()
    }

    /// The status of an admin API call with `token`.
    async fn status_with(&self, token: &str, path: &str) -> u16 {
        self.https.get(self.control().api(path)).bearer_auth(token).send().await.unwrap().status().as_u16()
    }

    fn id(&self, name: &str) -> u64 {
        self.users[name].0
    }

    /// Creates a user from `body` (its name included); keeps its id and link.
    async fn user(&mut self, body: Value) -> u64 {
        let name = body["name"].as_str().unwrap().to_owned();
        let user = self.call(Method::POST, "/users", Some(body)).await;
        let id = user["id"].as_u64().unwrap();
        self.users.insert(name, (id, user["link"].as_str().unwrap().to_owned()));
        id
    }

    /// Moves `bytes` down through node `a` for the user `name`, and waits until control
    /// counts them.
    async fn traffic(&self, name: &str, bytes: usize) {
        let (id, link) = &self.users[name];
        let counted = |user: &Value| user["used_down"].as_u64().unwrap();
        let before = counted(&self.call(Method::GET, &format!("/users/{id}"), None).await);
        let client = ProxyClient::sing_box(profile_outbound(link).await.unwrap()).unwrap();
        let body = vec![7u8; bytes];
        assert_eq!(fetch_eventually(&client, http_server(body).await.unwrap()).await.unwrap().len(), bytes);
        let started = Instant::now();
        while counted(&self.call(Method::GET, &format!("/users/{id}"), None).await) < before + bytes as u64 {
            assert!(started.elapsed() < Duration::from_secs(30), "{name}'s {bytes} bytes were never counted");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The id of the last entry of the audit log (the last change).
    async fn last_change(&self) -> i64 {
        self.call(Method::GET, "/audit?limit=1", None).await["entries"][0]["id"].as_i64().unwrap()
    }

    /// Keeps the three files the owner keeps offline; loses control and its data directory.
    fn lose_control(&mut self) -> std::path::PathBuf {
        let safe = self.temp.path().join("safe");
        std::fs::create_dir_all(&safe).unwrap();
        for file in ["root.key", "recovery.key", "edge.toml"] {
            std::fs::copy(self.dir.path.join(file), safe.join(file)).unwrap();
        }
        self.control.take().unwrap().kill9().unwrap();
        std::fs::remove_dir_all(&self.dir.path).unwrap();
        safe
    }

    /// `hearth-control restore` into a new directory; returns what it printed.
    fn restore(&mut self, safe: &std::path::Path, from_snapshots: bool) -> String {
        let dir = ControlDir { path: self.temp.path().join("restored") };
        let printed = dir.restore(&self.edge.url, safe, &safe.join("recovery.key"), from_snapshots).unwrap();
        eprintln!("{printed}");
        self.dir = dir;
        printed
    }

    /// Starts control on its directory with the lab's settings.
    fn start_control(&mut self) {
        self.control = Some(ControlProcess::start(&self.dir, &self.env).unwrap());
        self.https = self.dir.client().unwrap();
    }

    /// Everything the admin API and the links show that a restore must keep.
    async fn state(&self) -> State {
        let mut users = BTreeMap::new();
        let mut served = BTreeMap::new();
        for (name, (id, link)) in &self.users {
            users.insert(name.clone(), self.call(Method::GET, &format!("/users/{id}"), None).await);
            for agent in AGENTS {
                served.insert((name.clone(), (*agent).to_owned()), serve(link, agent).await);
            }
        }
        let nodes = self.call(Method::GET, "/nodes", None).await["nodes"].clone();
        let settings = self.call(Method::GET, "/settings", None).await;
        State { users, served, nodes, profile: settings["profile"].clone(), ua_rules: settings["ua_rules"].clone() }
    }

    /// Waits until this control has pushed everything to the edge, and the edge serves every
    /// user what control holds now: usage, quota and expiry in the headers, and the profile's
    /// title.
    async fn until_the_edge_serves_control(&self) {
        let started = Instant::now();
        loop {
            let edge = self.call(Method::GET, "/status", None).await["edge"].clone();
            if edge["pending"] == 0 && edge["last_push"].as_u64() > Some(0) {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "control never pushed everything: {edge}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let title = self.call(Method::GET, "/settings", None).await["profile"]["title"].as_str().unwrap().to_owned();
        for (name, (id, link)) in &self.users {
            let started = Instant::now();
            loop {
                let user = self.call(Method::GET, &format!("/users/{id}"), None).await;
                let expected = format!(
                    "upload={}; download={}; total={}; expire={}",
                    user["used_up"], user["used_down"], user["quota"], user["expires_at"]
                );
                let (status, headers, _) = serve(link, AGENTS[0]).await;
                let shown = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
                let titled = shown("profile-title").is_some_and(|t| t == format!("base64:{}", base64_of(&title)));
                if status == 200 && shown("subscription-userinfo").as_deref() == Some(&expected) && titled {
                    break;
                }
                // Usage reaches the snapshots at control's sweep, once a minute.
                assert!(
                    started.elapsed() < Duration::from_secs(90),
                    "the edge never served {name} what control holds ({expected}): {status} {headers:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// What a link answers a client: the status, the headers (but the date) and the body.
type Served = (u16, Vec<(String, String)>, String);

/// What a link answers a client with `agent` as its User-Agent.
async fn serve(link: &str, agent: &str) -> Served {
    let plain = hearth_tests::http().build().unwrap();
    let response = plain.get(link).header("user-agent", agent).send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .filter(|(name, _)| *name != "date")
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap_or("(not text)").to_owned()))
        .collect();
    (status, headers, response.text().await.unwrap())
}

/// What the admin API and the links show.
#[derive(Clone, Debug)]
struct State {
    users: BTreeMap<String, Value>,
    /// By user name and User-Agent.
    served: BTreeMap<(String, String), Served>,
    nodes: Value,
    profile: Value,
    ua_rules: Value,
}

/// The users' fields, as the admin API shows them.
const USER_FIELDS: &[&str] = &[
    "id",
    "name",
    "status",
    "enabled",
    "quota",
    "used_up",
    "used_down",
    "reset",
    "next_reset",
    "expires_at",
    "duration_days",
    "started_at",
    "note",
    "groups",
    "created",
    "updated",
];

/// What a field must be after a restore, when not what it was.
enum Expect {
    /// This value.
    Is(Value),
    /// A time within these bounds (Unix seconds): one the restore set.
    Between(u64, u64),
}

impl Expect {
    fn holds(&self, value: &Value) -> bool {
        match self {
            Expect::Is(expected) => value == expected,
            Expect::Between(low, high) => value.as_u64().is_some_and(|v| (*low..=*high).contains(&v)),
        }
    }
}

/// What a field of a user (by name) must be after the restore, given what it was; `None`:
/// what it was.
type Rule<'a> = &'a dyn Fn(&str, &str, &Value) -> Option<Expect>;

/// Compares `after` with `before` field by field, by the `rule`. Returns every difference, to
/// show them all.
fn differences(before: &State, after: &State, rule: Rule<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for (name, was) in &before.users {
        let Some(now) = after.users.get(name) else {
            out.push(format!("{name}: gone"));
            continue;
        };
        for field in USER_FIELDS {
            let expected = rule(name, field, &was[*field]).unwrap_or_else(|| Expect::Is(was[*field].clone()));
            if !expected.holds(&now[*field]) {
                let want = match &expected {
                    Expect::Is(value) => value.to_string(),
                    Expect::Between(low, high) => format!("{low} to {high}"),
                };
                out.push(format!("{name}.{field}: {} (expected {want}; before {})", now[*field], was[*field]));
            }
        }
    }
    for (key, was) in &before.served {
        let now = &after.served[key];
        if now.0 != was.0 || now.1 != was.1 {
            out.push(format!("{key:?} serves {} {:?}, served {} {:?}", now.0, now.1, was.0, was.1));
        } else if now.2 != was.2 {
            out.push(format!("{key:?} serves another body"));
        }
    }
    for (what, was, now) in
        [("profile", &before.profile, &after.profile), ("ua_rules", &before.ua_rules, &after.ua_rules)]
    {
        if was != now {
            out.push(format!("{what}: {now} (before {was})"));
        }
    }
    out
}

/// A control archiving to a native edge, with no users or nodes yet.
async fn bare_lab() -> Lab {
    let temp = tempfile::tempdir().unwrap();
    let Archiving { dir, edge, env, control, https, token } = Archiving::start(temp.path()).await.unwrap();
    let node_b = temp.path().join("b");
    Lab {
        temp,
        dir,
        edge,
        env,
        control: Some(control),
        https,
        token,
        users: BTreeMap::new(),
        node: None,
        _node_b: node_b,
    }
}

/// The lab: control (archiving 1 s after a change), the edge (without rate limits: every
/// link is fetched many times), nodes `a` (running) and `b`, group `staff` (node `b`), the
/// owner's profile and rules, and users:
///
/// - alice: quota, 30 days, monthly reset, a note, traffic;
/// - bob: over quota (traffic past it);
/// - carol: disabled, in both groups, a weekly reset and a date of expiry;
/// - dave: expired, in `staff` only;
/// - erin: 7 days from the first connection, not started;
/// - frank: `staff` only, a quota;
/// - gina: a rolling 30-day reset.
async fn lab() -> Lab {
    let mut lab = bare_lab().await;
    let (node_a, node_b) = (lab.temp.path().join("a"), lab.temp.path().join("b"));
    for state in [&node_a, &node_b] {
        lab.control().enroll_node(&lab.https, &lab.token, state).await.unwrap();
    }
    let nodes = lab.call(Method::GET, "/nodes", None).await["nodes"].as_array().unwrap().clone();
    let (a, b) = (nodes[0]["id"].as_u64().unwrap(), nodes[1]["id"].as_u64().unwrap());
    lab.call(Method::POST, "/groups", Some(json!({ "name": "staff", "note": "the household" }))).await;
    lab.call(Method::PATCH, &format!("/nodes/{b}"), Some(json!({ "groups": ["staff"] }))).await;
    // A node takes a new masquerade site at its next enrollment: the owner plans one.
    lab.call(Method::POST, &format!("/nodes/{a}/enroll-token"), Some(json!({}))).await;
    lab.call(Method::PATCH, &format!("/nodes/{a}"), Some(json!({ "masquerade": "https://www.example.com/" }))).await;
    let profile = json!({
        "title": "Hearth Home",
        "announce": "Maintenance on Sunday, 02:00 UTC",
        "support_url": "https://help.example.com/",
        "web_page_url": "https://home.example.com/",
        "update_interval_hours": 6
    });
    lab.call(Method::PATCH, "/settings", Some(json!({ "profile": profile, "ua_rules": owner_rules() }))).await;

    let now = unix_now();
    lab.user(
        json!({ "name": "alice", "quota": 10_000_000_000u64, "days": 30, "reset": "monthly", "note": "pays yearly" }),
    )
    .await;
    lab.user(json!({ "name": "bob", "quota": 100_000, "reset": "none" })).await;
    let carol = lab
        .user(json!({
            "name": "carol", "groups": ["default", "staff"], "reset": "weekly", "expires_at": now + 90 * 86_400
        }))
        .await;
    lab.call(Method::POST, &format!("/users/{carol}/disable"), None).await;
    lab.user(json!({ "name": "dave", "groups": ["staff"], "expires_at": now - 3600 })).await;
    lab.user(json!({ "name": "erin", "days": 7, "start_on_first_use": true })).await;
    lab.user(json!({ "name": "frank", "groups": ["staff"], "quota": 5_000_000, "reset": "none" })).await;
    lab.user(json!({ "name": "gina", "reset": "rolling30" })).await;

    lab.node = Some(NodeProcess::start(&node_a).unwrap());
    lab.traffic("alice", 200_000).await;
    lab.traffic("bob", 150_000).await;
    let statuses: BTreeMap<String, String> = {
        let mut statuses = BTreeMap::new();
        for name in lab.users.keys() {
            let user = lab.call(Method::GET, &format!("/users/{}", lab.id(name)), None).await;
            statuses.insert(name.clone(), user["status"].as_str().unwrap().to_owned());
        }
        statuses
    };
    let expected: BTreeMap<String, String> = [
        ("alice", "active"),
        ("bob", "over_quota"),
        ("carol", "disabled"),
        ("dave", "expired"),
        ("erin", "not_started"),
        ("frank", "active"),
        ("gina", "active"),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_owned(), s.to_owned()))
    .collect();
    assert_eq!(statuses, expected);
    lab.until_the_edge_serves_control().await;
    lab
}

/// The lines of a restore's output that are notes.
fn notes(printed: &str) -> Vec<String> {
    printed.lines().filter_map(|l| l.trim().strip_prefix("note: ")).map(str::to_owned).collect()
}

/// The groups of a user or node after a restore from snapshots: groups are rebuilt from the
/// nodes each user reaches, the largest set of nodes keeping `default` and the others named
/// `restored-N` (here `staff`, with node `b`, becomes `restored-1`).
fn rebuilt_groups(was: &Value) -> Value {
    let mut groups: Vec<String> = was
        .as_array()
        .unwrap()
        .iter()
        .map(|g| if g == "staff" { "restored-1".to_owned() } else { g.as_str().unwrap().to_owned() })
        .collect();
    groups.sort();
    json!(groups)
}

/// A restore from the snapshots alone: every field the restore does not name as lost comes
/// back as it was, the links serve the same answers to every client, and what it names as
/// lost (the owner account, API tokens, notes, the duration of users not started, daily
/// usage, masquerade settings, the audit log, group names, when users and nodes were made,
/// the next reset of a rolling 30-day reset) is lost, nothing more.
#[tokio::test]
async fn a_restore_from_snapshots_gives_back_every_field_it_does_not_name_as_lost() {
    let mut lab = lab().await;
    let before = lab.state().await;
    let alice = lab.id("alice");
    let days = lab.call(Method::GET, &format!("/users/{alice}/usage"), None).await["days"].clone();
    assert!(days.as_array().unwrap().iter().any(|d| d["down"].as_u64() > Some(0)), "no daily usage: {days}");
    let old_token = lab.token.clone();

    let safe = lab.lose_control();
    let restored_at = unix_now();
    let printed = lab.restore(&safe, true);
    assert!(printed.contains("7 users, 2 nodes"), "{printed}");
    assert_eq!(
        notes(&printed),
        vec![
            "new signing and release keys were certified by the root key".to_owned(),
            "not in snapshots, so not recovered: the owner account and its second factor (a new setup link is \
             printed at start), API tokens, user notes, the duration of users not started yet, daily usage history, \
             node masquerade settings, node domains (a node whose links checked its public certificate comes back \
             as one with a CA's certificate: set its domain again, and enroll it again for its certificate to be \
             renewed under control's eye), the audit log, group names (users keep the nodes they had, in groups named \
             restored-N), when users and nodes were created, the next reset of users on a rolling 30-day reset \
             (counted again from the restore), device limits and abuse guards, node multipliers and monthly caps, \
             users' traffic as measured before multipliers (taken as what it counted for), and what nodes refused \
             users"
                .to_owned(),
        ],
        "{printed}"
    );
    lab.start_control();
    // The owner account is lost: a new setup link; the old API token is refused.
    assert!(lab.control().setup_token.is_some(), "no setup link after a restore from snapshots");
    lab.token = lab.control().setup(&lab.https, "admin").await.unwrap();
    assert_eq!(lab.status_with(&old_token, "/users").await, 401, "an API token survived the restore");

    lab.until_the_edge_serves_control().await;
    let after = lab.state().await;
    let checked = unix_now();
    const DAYS_30: u64 = 30 * 86_400;
    let rule = |name: &str, field: &str, was: &Value| -> Option<Expect> {
        match (name, field) {
            (_, "note") => Some(Expect::Is(json!(""))),
            (_, "groups") => Some(Expect::Is(rebuilt_groups(was))),
            // Made and last changed by the restore.
            (_, "created" | "updated") => Some(Expect::Between(restored_at, checked)),
            ("gina", "next_reset") => Some(Expect::Between(restored_at + DAYS_30, checked + DAYS_30)),
            // Without its duration, a user not started is one without an expiry.
            ("erin", "duration_days") => Some(Expect::Is(json!(0))),
            ("erin", "status") => Some(Expect::Is(json!("active"))),
            _ => None,
        }
    };
    let diff = differences(&before, &after, &rule);
    assert!(diff.is_empty(), "the restore from snapshots changed:\n{}", diff.join("\n"));
    // Nodes: the same, but their masquerade settings, group names and when they were made
    // (what a node did lately, `last_seen`, `online`, `version`, `usage_seq`, is not the
    // owner's data).
    let (was, now) = (before.nodes.as_array().unwrap(), after.nodes.as_array().unwrap());
    assert_eq!(was.len(), now.len(), "{now:?}");
    for (was, now) in was.iter().zip(now) {
        for (field, value) in was.as_object().unwrap() {
            let expected = match field.as_str() {
                "last_seen" | "online" | "version" | "usage_seq" => continue,
                "masquerade" => Expect::Is(json!("")),
                // Daily usage history.
                "traffic_today" => Expect::Is(json!(0)),
                "groups" => Expect::Is(rebuilt_groups(value)),
                "created" => Expect::Between(restored_at, checked),
                _ => Expect::Is(value.clone()),
            };
            assert!(expected.holds(&now[field]), "node {}: {field} is {}, was {value}", was["id"], now[field]);
        }
    }
    // Daily usage and the audit log are gone.
    let days = lab.call(Method::GET, &format!("/users/{alice}/usage"), None).await["days"].clone();
    assert!(days.as_array().unwrap().iter().all(|d| d["down"] == 0 && d["up"] == 0), "daily usage kept: {days}");
    let audit = lab.call(Method::GET, "/audit?limit=1000", None).await["entries"].clone();
    assert!(
        audit.as_array().unwrap().iter().all(|e| e["at"].as_u64() >= Some(restored_at)),
        "the audit log of before the restore is there: {audit}"
    );
    drop(lab.node.take());
}

/// Waits until the archive at the edge holds the audit log up to `change`, and is newer than
/// `after` (a version); returns it.
async fn until_archived(lab: &Lab, change: i64, after: u64) -> EdgeArchive {
    let started = Instant::now();
    loop {
        if let Some(archive) = lab.dir.archive_at_edge(&lab.edge.url).await.unwrap()
            && archive.version > after
            && archive.number("SELECT ifnull(max(id), 0) FROM audit").await.unwrap() >= change
        {
            return archive;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no archive above v{after} holds change {change}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A restore from an archive older than the snapshots at the edge: every change made after the
/// archive (limits, expiry, status, a rename, groups, a reset, usage, a new link, a user added
/// and one deleted, the profile, the rules) is caught up from the edge, field by field, and
/// every link serves what it served.
#[tokio::test]
async fn a_restore_from_an_older_archive_catches_up_every_change_since() {
    let mut lab = lab().await;
    // The archive holds everything so far. Then control archives only hourly, so what follows
    // reaches the edge as snapshots and not in an archive.
    let archive = until_archived(&lab, lab.last_change().await, 0).await;
    lab.control.take().unwrap().stop().unwrap();
    lab.env.retain(|(name, _)| *name != "HEARTH_ARCHIVE_AFTER_SECS");
    lab.env.push(("HEARTH_ARCHIVE_AFTER_SECS", "3600".into()));
    lab.start_control();
    // A start with nothing changed uploads no archive: the edge holds the one made before.
    lab.until_the_edge_serves_control().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = lab.dir.archive_at_edge(&lab.edge.url).await.unwrap().unwrap();
    assert_eq!(held.version, archive.version, "control archived again as it started, with nothing changed");

    let now = unix_now();
    let id = |name: &str| lab.id(name);
    let (alice, bob, carol, dave, erin, frank, gina) =
        (id("alice"), id("bob"), id("carol"), id("dave"), id("erin"), id("frank"), id("gina"));
    let changes = [
        (alice, json!({ "quota": 20_000_000_000u64, "expires_at": now + 60 * 86_400 })),
        (bob, json!({ "quota": 1_000_000 })),
        (dave, json!({ "name": "david", "groups": ["default"], "expires_at": 0 })),
        (gina, json!({ "reset": "monthly" })),
    ];
    for (user, change) in changes {
        lab.call(Method::PATCH, &format!("/users/{user}"), Some(change)).await;
    }
    let (_, link) = lab.users.remove("dave").unwrap();
    lab.users.insert("david".into(), (dave, link));
    lab.call(Method::POST, &format!("/users/{frank}/disable"), None).await;
    lab.call(Method::POST, &format!("/users/{carol}/enable"), None).await;
    let rotated = lab.call(Method::POST, &format!("/users/{bob}/rotate"), None).await;
    let old_bob_link = lab.users["bob"].1.clone();
    let new_bob_link = rotated["link"].as_str().unwrap().to_owned();
    assert_ne!(new_bob_link, old_bob_link);
    lab.users.insert("bob".into(), (bob, new_bob_link));
    lab.call(Method::DELETE, &format!("/users/{erin}"), None).await;
    let (_, erin_link) = lab.users.remove("erin").unwrap();
    lab.user(json!({ "name": "hank", "groups": ["staff"], "quota": 3_000_000, "reset": "weekly" })).await;
    let profile = json!({ "title": "Hearth Home 2", "announce": "A second node soon" });
    let rules =
        json!([{ "contains": "HearthTestApp", "target": "sing-box" }, { "contains": "Kiosk", "target": "page" }]);
    lab.call(Method::PATCH, "/settings", Some(json!({ "profile": profile, "ua_rules": rules }))).await;
    lab.traffic("alice", 120_000).await;
    lab.until_the_edge_serves_control().await;
    let before = lab.state().await;

    // The archive at the edge is still the one from before the changes: the restore has them
    // to catch up on.
    let held = lab.dir.archive_at_edge(&lab.edge.url).await.unwrap().unwrap();
    assert_eq!(held.version, archive.version, "control archived again: nothing left to catch up on");
    for (query, expected) in [
        (format!("SELECT quota FROM users WHERE id = {alice}"), 10_000_000_000),
        (format!("SELECT count(*) FROM users WHERE id = {erin}"), 1),
        ("SELECT count(*) FROM users WHERE name = 'hank'".to_owned(), 0),
    ] {
        assert_eq!(held.number(&query).await.unwrap(), expected, "the archive holds a change made after it: {query}");
    }

    let safe = lab.lose_control();
    let restored_at = unix_now();
    let printed = lab.restore(&safe, false);
    assert!(printed.contains(&format!("from archive v{},", archive.version)), "{printed}");
    assert!(printed.contains("7 users, 2 nodes"), "{printed}");
    assert_eq!(
        notes(&printed),
        vec!["1 users in the archive were deleted after it was made, and stay deleted".to_owned()],
        "{printed}"
    );
    lab.start_control();
    // The owner signs in as before: the archive holds the account and its tokens.
    assert_eq!(lab.status_with(&lab.token, "/users").await, 200);
    lab.until_the_edge_serves_control().await;
    let after = lab.state().await;
    let checked = unix_now();
    // The restore changed every user (it took each snapshot's values); hank, made after the
    // archive, is made by it.
    let rule = |name: &str, field: &str, _: &Value| match (name, field) {
        (_, "updated") | ("hank", "created") => Some(Expect::Between(restored_at, checked)),
        _ => None,
    };
    let diff = differences(&before, &after, &rule);
    assert!(diff.is_empty(), "the restore from the archive missed changes:\n{}", diff.join("\n"));
    assert_eq!(serve(&erin_link, AGENTS[0]).await.0, 404, "a user deleted after the archive is back");
    assert_eq!(serve(&old_bob_link, AGENTS[0]).await.0, 404, "a link rotated after the archive is back");
    let listed = lab.call(Method::GET, "/users?per_page=100", None).await;
    assert_eq!(listed["total"], 7, "{listed}");
    drop(lab.node.take());
}

/// An imported user's old subscription paths (aliases) come back with a restore from the
/// snapshots: the user's own link is its link again (not an alias's), the aliases are listed
/// and kept at the edge, and the restored control can still retire one.
#[tokio::test]
async fn aliases_come_back_with_a_restore_from_snapshots() {
    let mut lab = bare_lab().await;
    lab.control().enroll_node(&lab.https, &lab.token, &lab.temp.path().join("a")).await.unwrap();
    let document = json!({
        "format": "hearth-users", "version": 1, "source": "3x-ui",
        "users": [{ "id": "hank@old", "name": "hank", "password": "hank-old-password",
                    "aliases": ["/sub/hank0000sub", "/json/hank0000sub"] }],
    });
    let imported = lab.call(Method::POST, "/import?source=hearth", Some(document)).await;
    let hank = imported["imported"][0]["user"].as_u64().unwrap();
    let link = lab.call(Method::GET, &format!("/users/{hank}/link"), None).await["link"].as_str().unwrap().to_owned();
    lab.users.insert("hank".into(), (hank, link.clone()));
    lab.until_the_edge_serves_control().await;
    let old = format!("{}/sub/hank0000sub", lab.edge.url);
    assert_eq!(serve(&old, AGENTS[0]).await.0, 200);

    let safe = lab.lose_control();
    let printed = lab.restore(&safe, true);
    assert!(printed.contains("1 users"), "{printed}");
    lab.start_control();
    lab.token = lab.control().setup(&lab.https, "admin").await.unwrap();
    let restored = lab.call(Method::GET, &format!("/users/{hank}/link"), None).await;
    assert_eq!(restored["link"].as_str(), Some(link.as_str()), "the user's own link, not an alias's");
    let aliases = lab.call(Method::GET, &format!("/users/{hank}/aliases"), None).await;
    let paths: Vec<&str> = aliases["aliases"].as_array().unwrap().iter().map(|a| a["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/json/hank0000sub", "/sub/hank0000sub"]);
    lab.until_the_edge_serves_control().await;
    assert_eq!(serve(&old, AGENTS[0]).await.0, 200, "the alias still served once the restored control pushed");
    lab.call(Method::DELETE, &format!("/users/{hank}/aliases?path=/json/hank0000sub"), None).await;
    lab.until_the_edge_serves_control().await;
    assert_eq!(serve(&format!("{}/json/hank0000sub", lab.edge.url), AGENTS[0]).await.0, 404);
    assert_eq!(serve(&old, AGENTS[0]).await.0, 200);
}
