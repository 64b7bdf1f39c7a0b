//! `hearth-suite`: Hearth's benchmark suite (BENCH.md). `tests/bench` builds the release
//! binaries and runs it; `--quick` runs each scenario once and shorter.
//!
//! Every system under test runs in a cgroup of its own on CPU 1 with a 100 % quota and 1 GiB
//! (processes start inside it, so runtimes size themselves to one CPU); this program, its
//! load generator (`hearth_tests::load`) and the sing-box clients run on CPU 0. CPU time and
//! anonymous memory are read from the cgroup. Rate limits are off by configuration in the
//! throughput runs, and each 429 row measures one limiter with the other out of the way (said
//! in each row). Each run writes JSON to `target/bench/`; a full run
//! writes `docs/benchmarks.md`.
//!
//! For profiling one scenario: `--only system` (also `control`, `edge`, `scale`, `tunnel`, `lossy`, `node`, `routing`, `worker`, `import`,
//! `panel`, `abuse`;
//! comma-separated) prints its table and writes nothing; `HEARTH_SUITE_CONTROL_LOG` sets the
//! log filter of control in the system and scale scenarios (`hearth_control::store=debug` shows
//! how long each write transaction waited, worked and committed; `hearth_control::publish=debug`
//! how long each node set took to make and sign), and `HEARTH_SUITE_NODE_LOG` that of the nodes
//! it starts (`hearth_node=info`: how long each set took to verify, store and apply;
//! `hearth_node::congestion=trace`: BBR's modes and every round, startup's and ProbeBW's).
//! `HEARTH_SUITE_CASE` runs the lossy cases whose names start with it (`B4`, `B2 50 ms, 0 %`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use hearth_shared::wire::SubToken;
use hearth_tests::cgroup::Cgroup;
use hearth_tests::control::{ControlDir, ControlProcess};
use hearth_tests::control_sim::{ControlSim, demo_snapshot};
use hearth_tests::edge::{Backend, EdgeProcess, free_port};
use hearth_tests::load::{self, Target};
use hearth_tests::node::{H3Client, NodeProcess, ProxyClient, Streams, profile_outbound, tcp_echo};
use rand_core::OsRng;
use serde_json::{Value, json};

const GIB: u64 = 1 << 30;
const MIB: f64 = 1024.0 * 1024.0;
const SUT_CPU: usize = 1;
const API: &str = "api-bench-0123456789";
const PUSH_TOKEN: &str = "bench-push-token-0123456789-0123456789";
const SING_BOX_UA: &str = "SFA/1.13.0 (sing-box 1.13.0)";

/// One figure of the table: Hearth's values over the repetitions, the peer's when one ran.
#[derive(Default)]
struct Row {
    unit: String,
    ours: Vec<f64>,
    peer: Vec<f64>,
    published: String,
    note: String,
}

#[derive(Default)]
struct Table {
    rows: Vec<(String, Row)>,
}

impl Table {
    fn row(&mut self, metric: &str, unit: &str, published: &str) -> &mut Row {
        if let Some(at) = self.rows.iter().position(|(m, _)| m == metric) {
            return &mut self.rows[at].1;
        }
        let row = Row { unit: unit.to_owned(), published: published.to_owned(), ..Row::default() };
        self.rows.push((metric.to_owned(), row));
        &mut self.rows.last_mut().expect("just pushed").1
    }

    fn add(&mut self, metric: &str, unit: &'static str, value: f64, published: &'static str) {
        println!("  {metric}: {value:.3} {unit}");
        self.row(metric, unit, published).ours.push(value);
    }

    fn add_peer(&mut self, metric: &str, unit: &'static str, value: f64) {
        println!("  {metric} (peer): {value:.3} {unit}");
        self.row(metric, unit, "").peer.push(value);
    }

    /// The rows as a run's JSON records them.
    fn to_json(&self) -> Value {
        let rows = self.rows.iter().map(|(metric, r)| {
            json!({ "metric": metric, "unit": r.unit, "hearth": r.ours, "peer": r.peer, "published": r.published, "note": r.note })
        });
        Value::Array(rows.collect())
    }

    /// The rows of a run's JSON ([`Table::to_json`]).
    fn from_json(rows: &Value) -> Result<Table> {
        let mut t = Table::default();
        for row in rows.as_array().context("rows")? {
            let values = |key: &str| -> Vec<f64> {
                row[key].as_array().map(|v| v.iter().filter_map(Value::as_f64).collect()).unwrap_or_default()
            };
            let (unit, published) = (row["unit"].as_str().unwrap_or(""), row["published"].as_str().unwrap_or(""));
            let r = t.row(row["metric"].as_str().context("metric")?, unit, published);
            (r.ours, r.peer, r.note) =
                (values("hearth"), values("peer"), row["note"].as_str().unwrap_or("").to_owned());
        }
        Ok(t)
    }

    /// Notes a row once (the first repetition's note stands).
    fn note(&mut self, metric: &str, note: &str) {
        let row = self.row(metric, "", "");
        let kind = note.split(':').next().unwrap_or(note);
        if !row.note.contains(kind) {
            if !row.note.is_empty() {
                row.note.push_str("; ");
            }
            row.note.push_str(note);
        }
    }
}

/// The median (of an even count, the mean of the middle two), the lowest and the highest.
fn median(values: &[f64]) -> Option<(f64, f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some((quantile(&sorted, 0.5), sorted[0], sorted[sorted.len() - 1]))
}

/// What an issue asked of a row.
enum Bound {
    /// The median must be below this, in the row's unit.
    Below(f64),
    /// The median must not exceed this.
    AtMost(f64),
    /// The median must be at least this.
    AtLeast(f64),
    /// The median must be at least the peer's in the same run.
    AtLeastPeer,
    /// The median must be at most the peer's in the same run, plus this.
    AtMostPeer(f64),
    /// The median must be at least this share of the peer's in the same run.
    ShareOfPeer(f64),
    /// The median must be below this many times the median of the named row of the same run.
    TimesRow(&'static str, f64),
    /// No target (a row that a prefix in [`TARGETS`] would otherwise give one).
    Untargeted,
}

/// The numbers the issues asked for: (the metrics they apply to, by prefix; the bound; what
/// the table says). Each is shown beside its row, met or not.
const TARGETS: &[(&str, Bound, &str)] = &[
    ("P1 control idle, 1000 users", Bound::Below(10.0), "< 10 MiB (#4)"),
    // #4 asked < 50 ms; #54 tightened it, for both.
    ("P2 cold start to first 200", Bound::Below(40.0), "< 40 ms (#54)"),
    (
        "P8 10 sign-ins at once: memory above idle (peak",
        Bound::Below(38.0),
        "< 38 MiB: fewer than two 19 MiB hashes in memory (#4: one at a time)",
    ),
    ("P3 create 1000 users, one bulk call", Bound::Below(1.0), "< 1 s (#4)"),
    ("one user change, control alone (1000 users): p95", Bound::Below(2.0), "< 2 ms (#4)"),
    // #54 held the native edge's answers to the same server's cheapest answer, beside them in
    // the run (#3 had asked < 20 us an answer and < 5 us a 429, below this machine's HTTP).
    (
        "P4 subscription, kept in memory (limits off): server CPU",
        Bound::TimesRow(HEALTH_CPU, 1.5),
        "< 1.5 x the same server's health route (#54)",
    ),
    ("P4 edge logic in process, answer kept in memory: CPU", Bound::Below(20.0), "< 20 us (#3)"),
    // #3 asked for "CPU per 429 under 5 us" natively and "the 429 path under 0.3 ms" in
    // workerd, for no limiter in particular: each limiter's row, whole server and in
    // process, is held to it.
    (
        "P5 per-link limit (429; per-network limit out of the way): server CPU",
        Bound::TimesRow(HEALTH_CPU, 1.1),
        "< 1.1 x the same server's health route (#54)",
    ),
    (
        "P5 per-network limit (429; per-link limit out of the way): server CPU",
        Bound::TimesRow(HEALTH_CPU, 1.1),
        "< 1.1 x the same server's health route (#54)",
    ),
    ("P5 edge logic in process, per-link limit (429): CPU", Bound::Below(5.0), "< 5 us (#3)"),
    ("P5 edge logic in process, per-network limit (429): CPU", Bound::Below(5.0), "< 5 us (#3)"),
    // #23 tightened #3's bounds for the Worker (1 ms and 0.3 ms), and #49 tightened them again
    // once a warm answer came from the isolate's memory.
    ("P7 subscription in workerd (limits off): server CPU", Bound::Below(150.0), "< 150 us (#49)"),
    (
        "P7 per-link limit (429, counted in the isolate) in workerd; per-network limit out of the way: server CPU",
        Bound::Below(100.0),
        "< 100 us (#49)",
    ),
    (
        "P7 per-network limit (429, the isolate's bucket) in workerd; per-link limit out of the way: server CPU",
        Bound::Below(100.0),
        "< 100 us (#49)",
    ),
    ("a push of 1000 users accepted", Bound::Below(1000.0), "< 1 s (#3)"),
    ("the Worker's wasm, gzipped", Bound::Below(1.5), "< 1.5 MB (#3)"),
    ("P1 node idle, 1000 users", Bound::Below(12.0), "< 12 MiB (#5)"),
    (
        "node: a set of 10,000 users, one changed, from the pull answer to the live table: median",
        Bound::Below(10.0),
        "< 10 ms (#5)",
    ),
    ("B1 tunnel, Brutal at 500 Mbit/s", Bound::AtLeast(475.0), "within 5 % of 500 (#48)"),
    ("B1 tunnel, Brutal at 1000 Mbit/s", Bound::AtLeast(950.0), "within 5 % of 1,000 (#48)"),
    ("N1 routing: a new connection's rule match at 1,000 rules (the node's index)", Bound::Below(2.0), "< 2 us (#50)"),
    ("N1 routing: a new connection's rule match at 1,000 rules, each tried", Bound::Untargeted, ""),
    ("N1 tunnel", Bound::ShareOfPeer(0.95), "within 5 % of the same node without rules (#50)"),
    ("B1 tunnel, 1 stream", Bound::AtLeastPeer, "at least sing-box (#5, #17)"),
    ("B1 tunnel, 16 streams", Bound::AtLeastPeer, "at least sing-box (#5, #17)"),
    ("B1 tunnel, 64 streams", Bound::AtLeastPeer, "at least sing-box (#17)"),
    ("B2 ", Bound::AtLeastPeer, "at least sing-box (#17)"),
    ("B3 ", Bound::AtLeastPeer, "at least sing-box (#48)"),
    ("B4 ", Bound::AtLeastPeer, "at least sing-box (#48)"),
    ("panel, 10,000 users:", Bound::Below(50.0), "< 50 ms (#6)"),
    ("panel: what a first visit downloads", Bound::Below(150.0), "< 150 KB (#6)"),
    ("E restart: control's first 200", Bound::Below(100.0), "< 100 ms (#8)"),
    ("D storm: one user change through the API, p95", Bound::Below(2.0), "< 2 ms (#23)"),
    ("D storm: streams dropped", Bound::AtMost(0.0), "0 (#8)"),
    ("E restart: streams dropped", Bound::AtMost(0.0), "0 (#8)"),
    // The bound the node's tests held a cut to before timing left them (the node polls the
    // edge every second there and here).
    ("node: a removed user's transfer cut, from the push to the edge", Bound::Below(4.0), "< 4 s (node tests)"),
    ("A peak anonymous memory above idle", Bound::Below(64.0), "< 64 MiB (#16)"),
    ("edge (native): anonymous memory after", Bound::Below(32.0), "< 32 MiB (#23)"),
    ("scale, 100,000 users: control idle after the bulk create", Bound::Below(48.0), "< 48 MiB (#54)"),
    ("scale, 100,000 users: control idle", Bound::Below(32.0), "< 32 MiB (#23)"),
    ("scale, 100,000 users: control's cold start", Bound::Below(60.0), "< 60 ms (#54)"),
    ("scale, 100,000 users: control's peak above idle while", Bound::Below(64.0), "< 64 MiB (#54)"),
    ("scale, 100,000 users: bulk create until the edge", Bound::Below(10.0), "< 10 s (#54)"),
    ("scale, 100,000 users: a quota change, p95", Bound::Below(5.0), "< 5 ms (#23)"),
    ("scale, 100,000 users: a disable, until the node", Bound::Below(50.0), "< 50 ms (#23)"),
    ("scale, 100,000 users: a search", Bound::Below(5.0), "< 5 ms (#23)"),
    ("A p99 of valid requests", Bound::Below(50.0), "< 50 ms (#16)"),
    ("A valid requests not answered", Bound::AtMost(0.0), "0 (#16)"),
    ("M1 import 10,000 3x-ui users with their old links", Bound::Below(10.0), "< 10 s (#47)"),
];

/// Targets of rows by how their names start and end, before [`TARGETS`]: the data plane's
/// path rows (#48 held every row with the default controller to the first, B4 to the second).
const ENDING_TARGETS: &[(&str, &str, Bound, &str)] = &[
    ("B", ": packets lost or dropped on the way down", Bound::AtMostPeer(1.0), "at most sing-box's + 1 point (#48)"),
    ("B4 ", ": queueing at the bottleneck, mean", Bound::AtMostPeer(0.0), "at most sing-box's (#48)"),
    ("B", ": queueing at the bottleneck, mean", Bound::Untargeted, ""),
    ("B", ": datagrams the machine's sockets dropped, full", Bound::Untargeted, ""),
];

/// The native edge's cheapest answer over HTTP, the floor of its P4 and P5 rows.
const HEALTH_CPU: &str = "P4 the same server's health route (the HTTP floor): server CPU per answer";

/// The target of a row and whether its median meets it (`rows`: the run's, for a target
/// set by another row).
fn target(metric: &str, row: &Row, rows: &[(String, Row)]) -> (String, String) {
    let by_end = ENDING_TARGETS
        .iter()
        .find(|(start, ending, ..)| metric.starts_with(start) && metric.ends_with(ending))
        .map(|(_, _, bound, text)| (bound, text));
    let by_start =
        || TARGETS.iter().find(|(prefix, ..)| metric.starts_with(prefix)).map(|(_, bound, text)| (bound, text));
    let Some((bound, text)) = by_end.or_else(by_start).filter(|(bound, _)| !matches!(bound, Bound::Untargeted)) else {
        return (String::new(), String::new());
    };
    let ours = median(&row.ours).map(|(m, _, _)| m);
    let met = match (bound, ours, median(&row.peer)) {
        (Bound::Below(limit), Some(m), _) => m < *limit,
        (Bound::AtMost(limit), Some(m), _) => m <= *limit,
        (Bound::AtLeast(limit), Some(m), _) => m >= *limit,
        (Bound::AtLeastPeer, Some(m), Some((peer, _, _))) => m >= peer,
        (Bound::AtMostPeer(slack), Some(m), Some((peer, _, _))) => m <= peer + slack,
        (Bound::ShareOfPeer(share), Some(m), Some((peer, _, _))) => m >= peer * share,
        (Bound::TimesRow(other, times), Some(m), _) => {
            let floor = rows.iter().find(|(name, _)| name == other).and_then(|(_, row)| median(&row.ours));
            match floor {
                Some((floor, _, _)) => m < floor * times,
                None => return ((*text).to_owned(), String::new()),
            }
        }
        _ => return ((*text).to_owned(), String::new()),
    };
    ((*text).to_owned(), (if met { "met" } else { "not met" }).to_owned())
}

/// The value at `p` (0-1) of sorted values: between the two nearest ranks, in proportion
/// (so the 0.5 of an even count is the mean of the middle two, as [`median`] says).
fn quantile(sorted: &[f64], p: f64) -> f64 {
    let Some(last) = sorted.len().checked_sub(1) else { return f64::NAN };
    let at = last as f64 * p.clamp(0.0, 1.0);
    let (low, high) = (at.floor() as usize, at.ceil() as usize);
    sorted[low] + (sorted[high] - sorted[low]) * (at - low as f64)
}

fn shown(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// Puts this process (and what it starts outside a cgroup) on CPU 0.
fn pin_self() -> bool {
    std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", "0", &std::process::id().to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

async fn first_200(http: &reqwest::Client, url: &str, started: Instant) -> Result<Duration> {
    until_200(http, url, started, Duration::from_secs(30)).await
}

/// How long from `started` until `url` answers 200, asked every millisecond; at most `limit`.
async fn until_200(http: &reqwest::Client, url: &str, started: Instant, limit: Duration) -> Result<Duration> {
    loop {
        if let Ok(response) = http.get(url).send().await
            && response.status().is_success()
        {
            return Ok(started.elapsed());
        }
        if started.elapsed() > limit {
            bail!("{url} did not answer within {} s", limit.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// R1, R2: the server programs as `tests/bench` builds them, with glibc (what the suite runs)
/// and statically against musl (`deploy/build-release.sh`, into `target/dist/`): their size,
/// and a first start of each control on an empty data directory to its first 200 (P2's
/// measure), in the same cgroup.
async fn binaries(t: &mut Table) -> Result<()> {
    println!("binaries: sizes, and a first start of each build of control");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| hearth_tests::repo_root().join("target"), PathBuf::from);
    for (build, dir) in [("glibc", target.join("release")), ("static musl", target.join("dist"))] {
        for program in ["hearth-control", "hearth-node"] {
            let path = dir.join(program);
            let size = std::fs::metadata(&path)
                .with_context(|| format!("{} (tests/bench builds it: deploy/build-release.sh)", path.display()))?
                .len();
            t.add(&format!("R1 {program} binary, {build}"), "MiB", size as f64 / MIB, "");
        }
        let temp = tempfile::tempdir()?;
        let data = ControlDir::init(&temp.path().join("control"))?;
        let http = data.client()?;
        let cg = Cgroup::create("binaries", SUT_CPU, GIB)?;
        let program = dir.join("hearth-control");
        let started = Instant::now();
        let control = cg.start(|| ControlProcess::start_program(&data, &program))?;
        let cold = first_200(&http, &format!("{}/healthz", control.url), started).await?;
        t.add(&format!("R2 control cold start to first 200, empty, {build}"), "ms", cold.as_secs_f64() * 1000.0, "");
        control.stop()?;
    }
    Ok(())
}

/// M1: moving in. A 3x-ui database of 10,000 Hysteria clients, each with its subscription
/// id (built by the fixture's own script from 3x-ui's schema), imported by control's command
/// line in its cgroup: every user with three old links. Issue 47 asked < 10 s.
async fn import(t: &mut Table) -> Result<()> {
    println!("import: 10,000 3x-ui clients with their old links");
    let temp = tempfile::tempdir()?;
    let db = temp.path().join("x-ui.db");
    let script = hearth_tests::repo_root().join("tests/fixtures/import/3x-ui/make_fixture.py");
    let made = std::process::Command::new("python3")
        .arg(&script)
        .args(["--schema", "v3.6.0", "--clients", "10000", "--out"])
        .arg(&db)
        .output()?;
    anyhow::ensure!(made.status.success(), "make_fixture.py: {}", String::from_utf8_lossy(&made.stderr));
    let dir = ControlDir::init(&temp.path().join("control"))?;
    let cg = Cgroup::create("import", SUT_CPU, GIB)?;
    let (cpu, started) = (cg.cpu_ns()?, Instant::now());
    let said = cg.start(|| dir.cli(&["import", "3x-ui", "--file", db.to_str().unwrap_or_default()]))?;
    let seconds = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        said.starts_with("import from 3x-ui: imported 10004 users"),
        "the import said: {}",
        said.lines().next().unwrap_or("")
    );
    t.add("M1 import 10,000 3x-ui users with their old links (30,000 aliases)", "s", seconds, "");
    t.add("M1 control CPU for it", "s", (cg.cpu_ns()? - cpu) as f64 / 1e9, "");
    Ok(())
}

/// P1 (control), P2, P3, P8: control alone in its cgroup.
async fn control(t: &mut Table) -> Result<()> {
    println!("control: idle memory, cold start, creating users, sign-ins");
    let temp = tempfile::tempdir()?;
    let dir = ControlDir::init(&temp.path().join("control"))?;
    let http = dir.client()?;
    let cg = Cgroup::create("control", SUT_CPU, GIB)?;
    let started = Instant::now();
    let control = cg.start(|| ControlProcess::start(&dir, &[]))?;
    let cold = first_200(&http, &format!("{}/healthz", control.url), started).await?;
    t.add("P2 cold start to first 200, empty", "ms", cold.as_secs_f64() * 1000.0, "330 ms");
    let token = control.setup(&http, "operate").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    t.add("P1 control idle, 0 users (anon)", "MiB", cg.anon_bytes()? as f64 / MIB, "16 MiB");
    let rss = hearth_tests::proc_status_kib(control.pid(), "RssAnon:")? as f64 / 1024.0;
    t.note("P1 control idle, 0 users (anon)", &format!("the process's own RssAnon: {rss:.1} MiB"));

    let create = |name: String| {
        let (http, token, control) = (&http, &token, &control);
        async move { control.call(http, token, reqwest::Method::POST, "/users", Some(&json!({ "name": name }))).await }
    };
    let (cpu, started) = (cg.cpu_ns()?, Instant::now());
    for i in 0..200 {
        create(format!("one-{i:04}")).await?;
    }
    t.add("P3 create 200 users, one call at a time", "s", started.elapsed().as_secs_f64(), "0.3 s");
    t.add("P3 control CPU per user created (one call each)", "ms", (cg.cpu_ns()? - cpu) as f64 / 1e6 / 200.0, "");
    tokio::time::sleep(Duration::from_secs(2)).await;
    t.add("P1 control idle, 200 users (anon)", "MiB", cg.anon_bytes()? as f64 / MIB, "20 MiB");
    let started = Instant::now();
    for i in 200..1000 {
        create(format!("one-{i:04}")).await?;
    }
    let rest = started.elapsed().as_secs_f64();
    let first = t.row("P3 create 200 users, one call at a time", "s", "").ours.last().copied().unwrap_or(0.0);
    t.add("P3 create 1000 users, one call at a time", "s", first + rest, "49 s (its API rate limit)");
    tokio::time::sleep(Duration::from_secs(2)).await;
    t.add("P1 control idle, 1000 users (anon)", "MiB", cg.anon_bytes()? as f64 / MIB, "");

    // One user change with control alone (no edge, no node): a quota change signs the
    // user's snapshot again and checks every node's set. D measures it inside the storm.
    let (cpu, mut latencies) = (cg.cpu_ns()?, Vec::new());
    for i in 0..300u64 {
        let started = Instant::now();
        let path = format!("/users/{}", 1 + i % 1000);
        control.call(&http, &token, reqwest::Method::PATCH, &path, Some(&json!({ "quota": (i + 1) << 30 }))).await?;
        latencies.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    latencies.sort_by(f64::total_cmp);
    let metric = "one user change, control alone (1000 users)";
    t.add(&format!("{metric}: p50"), "ms", quantile(&latencies, 0.5), "");
    t.add(&format!("{metric}: p95"), "ms", quantile(&latencies, 0.95), "");
    t.add(&format!("{metric}: control CPU each"), "ms", (cg.cpu_ns()? - cpu) as f64 / 1e6 / 300.0, "");

    // P8: ten sign-ins at once (wrong passwords: argon2id runs for each), measured like with
    // like twice over. cgroup v1 keeps a high watermark only of all charged memory (anonymous
    // and page cache, `memory.max_usage_in_bytes`): it is set back to the usage of the moment
    // and compared with that usage. Anonymous memory has no watermark: it is read every
    // millisecond during the sign-ins and its highest value compared with its value before.
    let (anon_before, cache_before) = (cg.anon_bytes()?, cg.cache_bytes()?);
    cg.reset_peak()?;
    let usage_before = cg.usage_bytes()?;
    let sampler = cg.sample_anon(Duration::from_millis(1));
    let mut statuses = BTreeMap::new();
    for status in control.wrong_sign_ins(&http, 10).await? {
        *statuses.entry(status).or_insert(0u32) += 1;
    }
    let peak = cg.peak_bytes()?;
    let (anon_peak, samples) = sampler.stop()?;
    let cache_grew = cg.cache_bytes()?.saturating_sub(cache_before) as f64 / MIB;
    if cg.oom_kills()? > 0 {
        bail!("control was killed for memory during the sign-ins");
    }
    let metric = "P8 10 sign-ins at once: memory above idle (peak of anonymous + page cache)";
    t.add(metric, "MiB", peak.saturating_sub(usage_before) as f64 / MIB, "64 MiB spike (argon2 64 MiB)");
    t.note(
        metric,
        &format!(
            "measured: memory.max_usage_in_bytes, reset just before, minus memory.usage_in_bytes at the \
             reset (one counter, page cache in both; page cache grew {cache_grew:.2} MiB meanwhile)"
        ),
    );
    t.note(metric, &format!("answers: {statuses:?}, no OOM; argon2id 19 MiB, one hash at a time"));
    let metric = "P8 10 sign-ins at once: anonymous memory above idle (sampled peak)";
    t.add(metric, "MiB", anon_peak.saturating_sub(anon_before) as f64 / MIB, "");
    t.note(
        metric,
        &format!(
            "measured: total_rss of memory.stat read every 1 ms ({samples} reads) minus total_rss \
             before; a spike shorter than a read apart can be missed"
        ),
    );
    control.stop()?;

    // A fresh control: the bulk call, then a cold start with 1000 users.
    let dir = ControlDir::init(&temp.path().join("bulk"))?;
    let http = dir.client()?;
    let control = cg.start(|| ControlProcess::start(&dir, &[]))?;
    let token = control.setup(&http, "operate").await?;
    let names: Vec<String> = (0..1000).map(|i| format!("bulk-{i:04}")).collect();
    let started = Instant::now();
    control.call(&http, &token, reqwest::Method::POST, "/users/bulk", Some(&json!({ "names": names }))).await?;
    t.add("P3 create 1000 users, one bulk call", "s", started.elapsed().as_secs_f64(), "");
    control.stop()?;
    let started = Instant::now();
    let control = cg.start(|| ControlProcess::start(&dir, &[]))?;
    let cold = first_200(&http, &format!("{}/healthz", control.url), started).await?;
    t.add("P2 cold start to first 200, 1000 users", "ms", cold.as_secs_f64() * 1000.0, "");
    control.stop()?;
    Ok(())
}

/// 1000 users pushed to an edge (`backend`) started in `cg` with `extra` settings; their links
/// and how long the edge took to accept the push.
async fn edge_with_users(
    cg: &Cgroup,
    backend: Backend,
    temp: &std::path::Path,
    extra: &[(&str, &str)],
) -> Result<(EdgeProcess, Vec<String>, Duration)> {
    let mut sim = ControlSim::new();
    let state = temp.join(format!("edge-{}", free_port()?));
    let edge = cg.start(|| EdgeProcess::start(backend, &state, &sim.edge_vars(API, PUSH_TOKEN, extra)))?;
    let tokens: Vec<SubToken> = (0..1000).map(|_| SubToken::generate(&mut OsRng)).collect();
    let items: Vec<_> = tokens.iter().enumerate().map(|(i, t)| sim.snapshot(t, &demo_snapshot(i as u64))).collect();
    let http = hearth_tests::http().build()?;
    let push = sim.push(&items);
    let started = Instant::now();
    let answer = http.post(format!("{}/{API}/push", edge.url)).bearer_auth(PUSH_TOKEN).body(push).send().await?;
    if !answer.status().is_success() {
        bail!("push failed: {}", answer.text().await?);
    }
    let accepted = started.elapsed();
    let links = tokens.iter().map(|t| format!("{}/s/{}", edge.url, t.to_link_form())).collect();
    Ok((edge, links, accepted))
}

/// Warms a server up for an HTTP row, the same for every row: one request for each of the
/// target's paths (so every cache holds them, and for a 429 row every link's one fetch is
/// spent however slow the server), then [`WARM_SECS`] of the row's own closed loop (its
/// connections from as many networks, each of which spends its one fetch in a per-network
/// row).
async fn warm_up(target: &Target) -> Result<()> {
    let paths = target.paths.len();
    load::open(target, paths as f64, Duration::from_secs(1), CLIENTS).await?;
    load::closed(target, CLIENTS, Duration::from_secs(WARM_SECS), true).await?;
    Ok(())
}

/// Runs a closed loop against `target` for `seconds` after [`warm_up`]; records CPU per
/// answer of `status`.
async fn served(
    t: &mut Table,
    cg: &Cgroup,
    target: &Target,
    seconds: u64,
    status: u16,
    metric: &str,
    published: &'static str,
) -> Result<()> {
    warm_up(target).await?;
    let (cpu, started) = (cg.cpu_ns()?, Instant::now());
    let run = load::closed(target, CLIENTS, Duration::from_secs(seconds), true).await?;
    let wall = started.elapsed().as_secs_f64();
    let used = (cg.cpu_ns()? - cpu) as f64 / 1e9;
    let answers = run.statuses.get(&status).copied().unwrap_or(0);
    if answers == 0 || run.errors > 0 {
        bail!("{metric}: {answers} answers {status}, {} errors: {run:?}", run.errors);
    }
    // The row is what its label says only if (nearly) every answer was the one counted.
    let all: u64 = run.statuses.values().sum();
    if answers * 100 < all * 99 {
        bail!("{metric}: only {answers} of {all} answers were {status}: {:?}", run.statuses);
    }
    t.add(&format!("{metric}: server CPU per answer"), "us", used * 1e6 / answers as f64, published);
    t.add(&format!("{metric}: answers/s on one CPU"), "/s", answers as f64 / wall, "");
    t.add(&format!("{metric}: p99 latency"), "ms", run.answer_latency_us.p99 as f64 / 1000.0, "");
    let busy = used / wall;
    if busy < 0.95 {
        t.note(
            &format!("{metric}: answers/s on one CPU"),
            &format!("client-bound: the server was {:.0} % busy", busy * 100.0),
        );
    }
    Ok(())
}

/// Seconds of untimed load before every HTTP row ([`warm_up`]).
const WARM_SECS: u64 = 2;

/// Clients of the closed loop of every HTTP row, each from a network of its own.
const CLIENTS: usize = 32;

/// An edge (`backend`, `extra` settings) with 1000 users alone in a cgroup, measured under a
/// closed loop for answers of `status` (after [`WARM_SECS`] of the same load). Returns its
/// idle anonymous memory before the load, in MiB.
#[allow(clippy::too_many_arguments)]
async fn edge_run(
    t: &mut Table,
    name: &str,
    backend: Backend,
    extra: &[(&str, &str)],
    seconds: u64,
    status: u16,
    metric: &str,
    published: &'static str,
) -> Result<f64> {
    let temp = tempfile::tempdir()?;
    let cg = Cgroup::create(name, SUT_CPU, GIB)?;
    let (edge, links, accepted) = edge_with_users(&cg, backend, temp.path(), extra).await?;
    let edge_name = if backend == Backend::Native { "native edge" } else { "Worker in workerd" };
    t.add(&format!("a push of 1000 users accepted by the {edge_name}"), "ms", accepted.as_secs_f64() * 1000.0, "");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = cg.anon_bytes()? as f64 / MIB;
    let target = Target::from_urls(&links, SING_BOX_UA)?;
    served(t, &cg, &target, seconds, status, metric, published).await?;
    edge.stop()?;
    Ok(idle)
}

/// One fetch per link, with the per-network limit out of the way (a million a second from
/// one network): after a link's first fetch every answer is the per-link limit's 429.
const LINK_LIMIT_ONLY: [(&str, &str); 3] =
    [("HEARTH_LINK_LIMIT", "1"), ("HEARTH_NETWORK_BURST", "1000000000"), ("HEARTH_NETWORK_PER_MINUTE", "1000000000")];
/// One fetch a minute per network, with the per-link limit out of the way: after a
/// network's first fetch every answer is the per-network limit's 429, given before any link
/// is looked up.
const NETWORK_LIMIT_ONLY: [(&str, &str); 3] =
    [("HEARTH_LINK_LIMIT", "1000000000"), ("HEARTH_NETWORK_BURST", "1"), ("HEARTH_NETWORK_PER_MINUTE", "1")];

/// P1 (edge), P4, P5: the native edge in its cgroup.
async fn edge(t: &mut Table, seconds: u64) -> Result<()> {
    println!("edge: serving, the 429 path");
    let off = [("HEARTH_LIMITS", "off")];
    let metric = "P4 subscription, kept in memory (limits off)";
    let idle = edge_run(t, "edge", Backend::Native, &off, seconds, 200, metric, "51 us").await?;
    t.add("P1 edge (native) idle, 1000 users (anon)", "MiB", idle, "");
    // The same server's cheapest answer (its health route: no lookup, no limiter), the HTTP
    // floor the rows beside it sit on (#54).
    let temp = tempfile::tempdir()?;
    let cg = Cgroup::create("edge-health", SUT_CPU, GIB)?;
    let (health, _, _) = edge_with_users(&cg, Backend::Native, temp.path(), &off).await?;
    let target = Target::from_urls(&[format!("{}/{API}/healthz", health.url)], SING_BOX_UA)?;
    served(t, &cg, &target, seconds, 200, "P4 the same server's health route (the HTTP floor)", "").await?;
    health.stop()?;
    let uncached = [("HEARTH_LIMITS", "off"), ("HEARTH_EDGE_CACHE_MIB", "0")];
    let metric = "P4 subscription, read from SQLite each time (limits off)";
    edge_run(t, "edge-uncached", Backend::Native, &uncached, seconds, 200, metric, "614 us").await?;
    // Each limiter on its own: the warm-up spends every link's (or network's) one fetch;
    // from then on each answer is that limiter's 429.
    let metric = "P5 per-link limit (429; per-network limit out of the way)";
    edge_run(t, "edge-429-link", Backend::Native, &LINK_LIMIT_ONLY, seconds, 429, metric, "37 us (its 429)").await?;
    let metric = "P5 per-network limit (429; per-link limit out of the way)";
    edge_run(t, "edge-429-network", Backend::Native, &NETWORK_LIMIT_ONLY, seconds, 429, metric, "37 us (its 429)")
        .await?;
    for logic in [Logic::Answer, Logic::LinkLimit, Logic::NetworkLimit] {
        edge_logic(t, logic, seconds).await?;
    }
    archive_uploads(t, seconds < 8).await
}

/// The size of control's archive at 100,000 users, as measured for issue 23.
const ARCHIVE_BYTES: usize = 26_600_000;

/// The native edge's memory after control's archive was uploaded to it again and again, and
/// read back once: it must not keep what it read (it kept a 225 MiB peak before it stored the
/// archive in pieces).
async fn archive_uploads(t: &mut Table, quick: bool) -> Result<()> {
    use hearth_shared::envelope::{Audience, Kind};
    use hearth_shared::wire::stream;
    println!("edge: control's archive uploaded again and again");
    let temp = tempfile::tempdir()?;
    let cg = Cgroup::create("edge-archive", SUT_CPU, GIB)?;
    let mut sim = ControlSim::new();
    let state = temp.path().join("edge");
    let edge = cg.start(|| EdgeProcess::start(Backend::Native, &state, &sim.edge_vars(API, PUSH_TOKEN, &[])))?;
    let http = hearth_tests::http().build()?;
    // A first push: the edge learns control's signing key from it.
    let token = SubToken::generate(&mut OsRng);
    let item = sim.snapshot(&token, &demo_snapshot(0));
    push_to(&http, &edge.url, sim.push(&[item])).await?;
    // Sealed, an archive does not compress: bytes that do not repeat.
    let body: Vec<u8> =
        (0..ARCHIVE_BYTES as u64).map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8).collect();
    let uploads = if quick { 3 } else { 8 };
    let url = format!("{}/{API}/archive", edge.url);
    let mut last = Vec::new();
    for version in 1..=uploads {
        let envelope = sim
            .draft(Kind::Archive, stream::ARCHIVE.into(), version, Audience::Control)
            .sign(body.clone(), &[&sim.signing])
            .encode();
        let started = Instant::now();
        let answer = http.put(&url).bearer_auth(PUSH_TOKEN).body(envelope.clone()).send().await?;
        if !answer.status().is_success() {
            bail!("archive {version} refused: {}", answer.text().await?);
        }
        t.add(
            "edge (native): an archive upload of 26.6 MB, stored",
            "ms",
            started.elapsed().as_secs_f64() * 1000.0,
            "",
        );
        last = envelope;
    }
    let started = Instant::now();
    let stored = http.get(&url).bearer_auth(PUSH_TOKEN).send().await?.error_for_status()?.bytes().await?;
    if stored.as_ref() != last.as_slice() {
        bail!("the edge gave back another archive than the last one uploaded");
    }
    t.add("edge (native): the archive of 26.6 MB read back", "ms", started.elapsed().as_secs_f64() * 1000.0, "");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kept = cg.anon_bytes()? as f64 / MIB;
    t.add(&format!("edge (native): anonymous memory after {uploads} archive uploads of 26.6 MB"), "MiB", kept, "");
    edge.stop()?;
    Ok(())
}

/// What the in-process edge is asked to do.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Logic {
    /// Answer, limits off.
    Answer,
    /// Refuse by the per-link limit ([`LINK_LIMIT_ONLY`]).
    LinkLimit,
    /// Refuse by the per-network limit ([`NETWORK_LIMIT_ONLY`]).
    NetworkLimit,
}

/// One attack of the abuse rows, against the edge or control.
#[derive(Clone, Copy)]
enum Attack {
    /// 64 connections from 4 networks, each sending a 60 MB body to a link, an unknown path
    /// or the push route without its token, again and again.
    Bodies,
    /// 512 connections from 8 networks that never finish their headers.
    SlowLoris,
    /// 10,000 unknown links, each from a network of its own.
    UnknownTokens,
    /// 32 clients at once signing in with 1 MB login names and passwords, each from an
    /// address of its own.
    HugeSignIns,
    /// QUIC handshakes that never authenticate, 40 at a time from each of 8 networks.
    Handshakes,
}

impl Attack {
    fn name(self) -> &'static str {
        match self {
            Attack::Bodies => "edge, 64 bodies of 60 MB at once from 4 networks",
            Attack::SlowLoris => "edge, slow-loris: 512 connections from 8 networks",
            Attack::UnknownTokens => "edge, 10,000 unknown links from 10,000 networks",
            Attack::HugeSignIns => "control, sign-in flood: 32 at once with 1 MB fields",
            Attack::Handshakes => "node, QUIC handshakes never authenticating: 320 at once from 8 networks",
        }
    }
}

/// Valid requests a second during an attack: links for the edge (each from a network of its
/// own), an owner's API call for control.
const PROBE_RATE: f64 = 20.0;

/// Records an attack's rows: the peak anonymous memory of the cgroup above `idle`, and how
/// the valid requests sent meanwhile fared (the p99 of the 200s in ms, `failed` not answered
/// 200).
fn abuse_rows(t: &mut Table, attack: Attack, idle: u64, peak: u64, p99_ms: f64, failed: u64, what: &str) {
    let name = attack.name();
    t.add(&format!("A peak anonymous memory above idle: {name}"), "MiB", peak.saturating_sub(idle) as f64 / MIB, "");
    let metric = format!("A p99 of valid requests ({PROBE_RATE}/s): {name}");
    t.add(&metric, "ms", p99_ms, "");
    t.note(&metric, &format!("valid requests: {what}, timed from when each was meant to be sent"));
    t.add(&format!("A valid requests not answered 200: {name}"), "", failed as f64, "");
}

/// The abuse rows (issue 16): while strangers attack, the peak anonymous memory of the system
/// under test above its idle, and the p99 of valid requests sent at [`PROBE_RATE`] (links at
/// the native edge with 1000 users and its default limits; an API call at control; a new
/// connection authenticating at the node with 1000 users).
async fn abuse(t: &mut Table, quick: bool) -> Result<()> {
    use hearth_tests::abuse;
    println!("abuse: strangers at the edge and at control");
    let seconds = if quick { 8 } else { 20 };
    let temp = tempfile::tempdir()?;
    let cg = Cgroup::create("abuse-edge", SUT_CPU, GIB)?;
    let (edge, links, _) = edge_with_users(&cg, Backend::Native, temp.path(), &[]).await?;
    let valid = Target::from_urls(&links, SING_BOX_UA)?;
    let to = valid.addr;
    // Each link fetched once (from the networks the valid requests come from) before idle is read.
    load::open(&valid, 200.0, Duration::from_secs(5), links.len()).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = cg.anon_bytes()?;
    for attack in [Attack::Bodies, Attack::SlowLoris, Attack::UnknownTokens] {
        println!("  {}", attack.name());
        let duration = Duration::from_secs(seconds);
        let until = Instant::now() + duration;
        let sampler = cg.sample_anon(Duration::from_millis(1));
        let (cpu, cpu_started) = (cg.cpu_ns()?, Instant::now());
        let attacker = match attack {
            Attack::Bodies => {
                let paths = vec![
                    links[0].strip_prefix(&edge.url).context("a link")?.to_owned(),
                    "/wp-login.php".to_owned(),
                    format!("/{API}/push"),
                ];
                apart(abuse::large_bodies(to, paths, 4, 16, 60_000_000, until))
            }
            Attack::SlowLoris => apart(abuse::slow_loris(to, 8, 64, Duration::from_secs(1), until)),
            Attack::UnknownTokens => {
                let unknown: Vec<String> =
                    (0..10_000).map(|_| format!("/s/{}", SubToken::generate(&mut OsRng).to_link_form())).collect();
                let rate = unknown.len() as f64 / (seconds as f64 - 0.5);
                apart(abuse::one_request_each(to, unknown, rate, until))
            }
            Attack::HugeSignIns | Attack::Handshakes => unreachable!("not the edge's"),
        };
        // The valid requests start a moment after the attack, and end with it.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let run = load::open_from(&valid, PROBE_RATE, duration - Duration::from_secs(1), 0..links.len()).await?;
        let tally = attacker.finish().await?;
        let busy = busy_percent(&cg, cpu, cpu_started)?;
        let (peak, _) = sampler.stop()?;
        let p99 = run.latency_us.p99 as f64 / 1000.0;
        abuse_rows(t, attack, idle, peak, p99, run.sent - run.ok(), "links, each from a network of its own");
        abuse_note(
            t,
            attack,
            &format!(
                "the attack: {} connections, {} of them answered, {:.0} MB sent; the edge's CPU {busy:.0} % busy",
                tally.connections,
                tally.answered,
                tally.bytes_sent as f64 / 1e6
            ),
        );
        // Let the edge settle (connections closed, bodies thrown away) before the next.
        tokio::time::sleep(Duration::from_secs(11)).await;
    }
    edge.stop()?;

    // Control: the owner's API keeps answering while strangers sign in with huge fields.
    let dir = ControlDir::init(&temp.path().join("control"))?;
    let https = dir.client()?;
    let cg = Cgroup::create("abuse-control", SUT_CPU, GIB)?;
    let control = cg.start(|| ControlProcess::start(&dir, &[]))?;
    let token = control.setup(&https, "operate").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = cg.anon_bytes()?;
    let attack = Attack::HugeSignIns;
    println!("  {}", attack.name());
    let duration = Duration::from_secs(seconds);
    let until = Instant::now() + duration;
    let sampler = cg.sample_anon(Duration::from_millis(1));
    let (cpu, cpu_started) = (cg.cpu_ns()?, Instant::now());
    let pem = std::fs::read(dir.path.join("tls.crt"))?;
    let url = control.api("/login");
    let flood = apart(async move {
        let mut tasks = Vec::new();
        for i in 0..32 {
            let client = hearth_tests::http()
                .tls_certs_only([reqwest::Certificate::from_pem(&pem)?])
                .local_address(hearth_tests::abuse::attacker(100 + i, 1))
                .timeout(Duration::from_secs(30))
                .build()?;
            let url = url.clone();
            tasks.push(tokio::spawn(async move {
                let field = "x".repeat(1 << 20);
                let body = json!({ "login": field, "password": field }).to_string();
                let mut statuses = BTreeMap::<u16, u64>::new();
                while Instant::now() < until {
                    let sent = client.post(&url).header("content-type", "application/json").body(body.clone()).send();
                    let status = match sent.await {
                        Ok(answer) => answer.status().as_u16(),
                        Err(_) => 0,
                    };
                    *statuses.entry(status).or_default() += 1;
                }
                statuses
            }));
        }
        let mut statuses = BTreeMap::<u16, u64>::new();
        for task in tasks {
            for (status, n) in task.await? {
                *statuses.entry(status).or_default() += n;
            }
        }
        Ok(statuses)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut latencies, failed) =
        api_probe(&https, &control.api("/me"), &token, duration - Duration::from_secs(1)).await;
    latencies.sort_by(f64::total_cmp);
    let statuses = flood.finish().await?;
    let busy = busy_percent(&cg, cpu, cpu_started)?;
    let (peak, _) = sampler.stop()?;
    abuse_rows(t, attack, idle, peak, quantile(&latencies, 0.99), failed, "GET /api/me with an API token");
    abuse_note(
        t,
        attack,
        &format!("the flood's answers by status (0: none, cut off): {statuses:?}; control's CPU {busy:.0} % busy"),
    );
    control.stop()?;

    // The node: new users keep getting in while strangers' handshakes never authenticate.
    let cg = Cgroup::create("abuse-node", SUT_CPU, GIB)?;
    let (node, _) = node_with_users(&cg, temp.path(), "abuse-node", "")?;
    // One authentication first (the first connection's work out of the way), then idle.
    let mut first = H3Client::connect(node.addr).await?;
    if !first.authenticates("password-1").await? {
        bail!("the node refused a valid password");
    }
    drop(first);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = cg.anon_bytes()?;
    let attack = Attack::Handshakes;
    println!("  {}", attack.name());
    let until = Instant::now() + duration;
    let sampler = cg.sample_anon(Duration::from_millis(1));
    let (cpu, cpu_started, own_cpu) = (cg.cpu_ns()?, Instant::now(), own_cpu_seconds()?);
    let flood = apart(abuse::handshakes(node.addr, 8, 40, until));
    // The flood's 320 first handshakes at once take this program's CPU for most of a second
    // (the node's for far less): the valid clients start once they are done.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let total = (PROBE_RATE * (duration - Duration::from_millis(2500)).as_secs_f64()) as usize;
    let mut tasks = Vec::with_capacity(total);
    for n in 0..total {
        let intended = started + Duration::from_secs_f64(n as f64 / PROBE_RATE);
        tokio::time::sleep_until(intended.into()).await;
        let addr = node.addr;
        tasks.push(tokio::spawn(async move {
            let attempt = async {
                let mut client = H3Client::connect_from(addr, load::source(n)).await?;
                client.authenticates(&format!("password-{}", 1 + n % 1000)).await
            };
            let ok = matches!(tokio::time::timeout(Duration::from_secs(10), attempt).await, Ok(Ok(true)));
            (ok, intended.elapsed().as_secs_f64() * 1000.0)
        }));
    }
    let (mut latencies, mut failed) = (Vec::new(), 0u64);
    for task in tasks {
        match task.await {
            Ok((true, ms)) => latencies.push(ms),
            _ => failed += 1,
        }
    }
    let tally = flood.finish().await?;
    let busy = busy_percent(&cg, cpu, cpu_started)?;
    let own = (own_cpu_seconds()? - own_cpu) / cpu_started.elapsed().as_secs_f64() * 100.0;
    let (peak, _) = sampler.stop()?;
    latencies.sort_by(f64::total_cmp);
    let what = "a new QUIC connection authenticating with a user's password, each from a network of its own";
    abuse_rows(t, attack, idle, peak, quantile(&latencies, 0.99), failed, what);
    abuse_note(
        t,
        attack,
        &format!(
            "the flood: {} connections tried, {} of them up; the node's CPU {busy:.0} % busy, this \
             program's (the flood's and the valid clients') {own:.0} %",
            tally.connections, tally.answered
        ),
    );
    node.stop()?;
    Ok(())
}

/// An attack running on a thread and runtime of its own ([`apart`]).
struct Apart<T>(std::thread::JoinHandle<Result<T>>);

impl<T: Send + 'static> Apart<T> {
    /// Waits for the attack's end; what it returned.
    async fn finish(self) -> Result<T> {
        tokio::task::spawn_blocking(move || self.0.join()).await?.map_err(|_| anyhow::anyhow!("the attack panicked"))?
    }
}

/// Runs `attack` on a thread with a runtime of its own (on this program's CPU): sharing the
/// valid clients' runtime, an attack's tasks held theirs up (the node's flood of refused
/// connections stalled them for up to half a second at a time while the node was 6 % busy),
/// and the rows would have measured this program instead of the system under test.
fn apart<T: Send + 'static>(attack: impl std::future::Future<Output = Result<T>> + Send + 'static) -> Apart<T> {
    Apart(std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(attack)
    }))
}

/// What an attack did, noted on its memory row and printed.
fn abuse_note(t: &mut Table, attack: Attack, note: &str) {
    println!("  ({note})");
    t.note(&format!("A peak anonymous memory above idle: {}", attack.name()), note);
}

/// How busy the cgroup's CPU was since `cpu` (its CPU time then, in ns) at `since`, in %.
fn busy_percent(cg: &Cgroup, cpu: u64, since: Instant) -> Result<f64> {
    Ok((cg.cpu_ns()? - cpu) as f64 / 1e9 / since.elapsed().as_secs_f64() * 100.0)
}

/// `GET url` with `token` at [`PROBE_RATE`] for `duration`, each request timed from when it
/// was meant to be sent: the latencies of the 200s in ms, and how many were not a 200.
async fn api_probe(https: &reqwest::Client, url: &str, token: &str, duration: Duration) -> (Vec<f64>, u64) {
    let started = Instant::now();
    let total = (PROBE_RATE * duration.as_secs_f64()) as u64;
    let mut tasks = Vec::with_capacity(total as usize);
    for n in 0..total {
        let intended = started + Duration::from_secs_f64(n as f64 / PROBE_RATE);
        tokio::time::sleep_until(intended.into()).await;
        let request = https.get(url).bearer_auth(token).send();
        tasks.push(tokio::spawn(async move {
            let ok = matches!(request.await, Ok(answer) if answer.status() == reqwest::StatusCode::OK);
            (ok, intended.elapsed().as_secs_f64() * 1000.0)
        }));
    }
    let (mut latencies, mut failed) = (Vec::new(), 0);
    for task in tasks {
        match task.await {
            Ok((true, ms)) => latencies.push(ms),
            _ => failed += 1,
        }
    }
    (latencies, failed)
}

/// This process's CPU time (user + system), in seconds.
fn own_cpu_seconds() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let fields: Vec<&str> = stat[stat.rfind(')').context("stat")? + 2..].split(' ').collect();
    // In USER_HZ, 100 on every architecture Hearth runs on.
    Ok((fields[11].parse::<u64>()? + fields[12].parse::<u64>()?) as f64 / 100.0)
}

/// P4/P5 without HTTP: the edge's own work per request (`Edge::handle` called in this
/// process, the figure comparable with a Worker's CPU time), on 1000 links one after another,
/// all from one client address.
async fn edge_logic(t: &mut Table, logic: Logic, seconds: u64) -> Result<()> {
    use hearth_edge::config::EdgeConfig;
    use hearth_edge::native::{Edge, Request};
    use http::HeaderMap;
    let dir = tempfile::tempdir()?;
    let mut sim = ControlSim::new();
    let extra: &[(&str, &str)] = match logic {
        Logic::Answer => &[("HEARTH_LIMITS", "off")],
        Logic::LinkLimit => &LINK_LIMIT_ONLY,
        Logic::NetworkLimit => &NETWORK_LIMIT_ONLY,
    };
    let vars = sim.edge_vars(API, PUSH_TOKEN, extra);
    let config = EdgeConfig::from_vars(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))?;
    let edge = Edge::open(config, &dir.path().join("edge.db"), 64 << 20, None).await?;
    let tokens: Vec<SubToken> = (0..1000).map(|_| SubToken::generate(&mut OsRng)).collect();
    let items: Vec<_> = tokens.iter().zip(1..).map(|(token, user)| sim.snapshot(token, &demo_snapshot(user))).collect();
    let push = sim.push(&items);
    let mut headers = HeaderMap::new();
    headers.insert("authorization", format!("Bearer {PUSH_TOKEN}").parse()?);
    let client = "192.0.2.1".parse()?;
    let path = format!("/{API}/push");
    let request = Request { method: "POST", path: &path, query: "", headers: &headers, client, body: &push };
    let reply = edge.handle(&request).await;
    if reply.status != 200 {
        bail!("push refused: {}", String::from_utf8_lossy(&reply.body));
    }
    let mut headers = HeaderMap::new();
    headers.insert("user-agent", SING_BOX_UA.parse()?);
    headers.insert("host", "edge.example.net".parse()?);
    let paths: Vec<String> = tokens.iter().map(|t| format!("/s/{}", t.to_link_form())).collect();
    let expected = if logic == Logic::Answer { 200 } else { 429 };
    let run = async |paths: &[String]| -> u64 {
        let mut n = 0u64;
        for path in paths {
            let request = Request { method: "GET", path, query: "", headers: &headers, client, body: &[] };
            n += u64::from(edge.handle(&request).await.status == expected);
        }
        n
    };
    // Warm up: fills the link cache, and spends each link's (or the network's) one fetch.
    run(&paths).await;
    let (cpu, started) = (own_cpu_seconds()?, Instant::now());
    let (mut answers, mut requests) = (0u64, 0u64);
    while started.elapsed() < Duration::from_secs(seconds) {
        answers += run(&paths).await;
        requests += paths.len() as u64;
    }
    let used = own_cpu_seconds()? - cpu;
    if answers != requests {
        bail!("{} of {requests} requests did not get {expected}", requests - answers);
    }
    let (metric, what) = match logic {
        Logic::Answer => ("P4 edge logic in process, answer kept in memory", "limits off"),
        Logic::LinkLimit => ("P5 edge logic in process, per-link limit (429)", "per-network limit out of the way"),
        Logic::NetworkLimit => ("P5 edge logic in process, per-network limit (429)", "per-link limit out of the way"),
    };
    let metric = format!("{metric}: CPU per request");
    t.add(&metric, "us", used * 1e6 / answers as f64, "");
    t.note(&metric, &format!("Edge::handle called in process, no HTTP; {what}"));
    Ok(())
}

/// P7: the Worker in workerd (in the cgroup, the process that runs every isolate and Durable
/// Object), against a worker that only answers "ok", both under the same load.
async fn worker(t: &mut Table, seconds: u64) -> Result<()> {
    println!("worker: the edge in workerd, and an empty worker");
    let temp = tempfile::tempdir()?;
    let off = [("HEARTH_LIMITS", "off")];
    let metric = "P7 subscription in workerd (limits off)";
    edge_run(t, "workerd", Backend::Workerd, &off, seconds, 200, metric, "").await?;
    let metric = "P7 per-link limit (429, counted in the isolate) in workerd; per-network limit out of the way";
    edge_run(t, "workerd-429-link", Backend::Workerd, &LINK_LIMIT_ONLY, seconds, 429, metric, "").await?;
    let metric = "P7 per-network limit (429, the isolate's bucket) in workerd; per-link limit out of the way";
    edge_run(t, "workerd-429-network", Backend::Workerd, &NETWORK_LIMIT_ONLY, seconds, 429, metric, "").await?;
    // The floor of the Worker's own answers: the decoy for a path that is no link (the request
    // and the answer through workers-rs, no lookup, no rendering).
    {
        let cg = Cgroup::create("workerd-decoy", SUT_CPU, GIB)?;
        let (edge, _, _) = edge_with_users(&cg, Backend::Workerd, temp.path(), &off).await?;
        let paths: Vec<String> = (0..1000).map(|n| format!("{}/assets/{n}.css", edge.url)).collect();
        let target = Target::from_urls(&paths, SING_BOX_UA)?;
        served(t, &cg, &target, seconds, 404, "P7 the decoy for an unknown path in workerd (floor)", "").await?;
        edge.stop()?;
    }

    // What Cloudflare is sent: the Worker's wasm, gzipped.
    let wasm = std::fs::read(hearth_tests::repo_root().join("edge/worker/build/index_bg.wasm"))
        .context("the Worker's wasm (tests/bench builds it)")?;
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gzip, &wasm)?;
    // In MB (10^6 bytes), the unit of the target and of Mistgate's figure.
    t.add("the Worker's wasm, gzipped", "MB", gzip.finish()?.len() as f64 / 1e6, "8.9 MB (its edge)");
    t.note("the Worker's wasm, gzipped", &format!("{:.2} MB raw", wasm.len() as f64 / 1e6));

    // The empty worker: what any request costs workerd itself.
    let folder = temp.path().join("empty");
    std::fs::create_dir_all(&folder)?;
    std::fs::write(folder.join("empty.js"), "export default { fetch() { return new Response('ok'); } };\n")?;
    let port = free_port()?;
    std::fs::write(
        folder.join("config.capnp"),
        format!(
            "using Workerd = import \"/workerd/workerd.capnp\";\n\
             const config :Workerd.Config = (\n\
               services = [(name = \"empty\", worker = .empty)],\n\
               sockets = [(name = \"http\", address = \"127.0.0.1:{port}\", http = (), service = \"empty\")],\n\
             );\n\
             const empty :Workerd.Worker = (\n\
               modules = [(name = \"empty.js\", esModule = embed \"empty.js\")],\n\
               compatibilityDate = \"2024-09-23\",\n\
             );\n"
        ),
    )?;
    let cg = Cgroup::create("workerd-empty", SUT_CPU, GIB)?;
    let mut child = cg.start(|| {
        hearth_tests::cgroup::command(&hearth_tests::edge::workerd_binary())
            .args(["serve", "config.capnp"])
            .current_dir(&folder)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
    })?;
    let url = format!("http://127.0.0.1:{port}/");
    first_200(&hearth_tests::http().build()?, &url, Instant::now()).await?;
    let target = Target::from_urls(&[url], SING_BOX_UA)?;
    served(t, &cg, &target, seconds, 200, "P7 empty worker in workerd (baseline)", "").await?;
    let _ = child.kill();
    let _ = child.wait();
    Ok(())
}

/// `hearth-node serve` with its log at info, for what it logs about each set it applies.
struct LoggingNode {
    node: NodeProcess,
    /// The UDP address it listens on.
    addr: std::net::SocketAddr,
    log: std::sync::mpsc::Receiver<String>,
}

impl LoggingNode {
    /// Starts it on a state directory (in the cgroup of a [`Cgroup::start`] around it).
    fn start(state: &std::path::Path) -> Result<LoggingNode> {
        let (node, log) = NodeProcess::start_logged_at(state, "warn,hearth_node=info")?;
        Ok(LoggingNode { addr: node.addr, node, log })
    }

    /// The first log line from now on with `message` and `field=value`, within 30 s.
    fn logged(&self, message: &str, field: &str, value: u64) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.log.recv_timeout(left).with_context(|| format!("the node did not log {message:?}"))?;
            if line.contains(message) && log_field(&line, field) == Some(value) {
                return Ok(line);
            }
        }
    }

    fn stop(self) -> Result<()> {
        self.node.stop()
    }
}

/// The value of `name=<number>` in a log line.
fn log_field(line: &str, name: &str) -> Option<u64> {
    line.split_whitespace().find_map(|word| word.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
}

/// A set for node 1 of `users` (id, password).
fn credential_set(users: &BTreeMap<u64, String>) -> Result<hearth_shared::wire::CredentialSet> {
    use hearth_shared::wire::{CredEntry, CredentialSet};
    let entries = users.iter().map(|(u, p)| CredEntry::new(*u, hearth_shared::sha256(p.as_bytes())));
    Ok(CredentialSet::new(1, entries.collect())?)
}

/// Pushes a bundle to the edge at `url`.
async fn push_to(http: &reqwest::Client, url: &str, bundle: Vec<u8>) -> Result<()> {
    let answer = http.post(format!("{url}/{API}/push")).bearer_auth(PUSH_TOKEN).body(bundle).send().await?;
    if !answer.status().is_success() {
        bail!("push refused: {}", answer.text().await?);
    }
    Ok(())
}

/// Downloads `/` from `web` through `client`, counting the body's bytes as they arrive in
/// `got`; ends when the body is whole or the tunnel is cut. The body's bytes, and when it
/// ended.
async fn download(
    client: &ProxyClient,
    web: std::net::SocketAddr,
    got: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> Result<(u64, Instant)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = client.connect(web).await?;
    stream.write_all(b"GET / HTTP/1.1\r\nhost: bench\r\n\r\n").await?;
    let (mut buf, mut head) = (vec![0u8; 64 * 1024], Some(Vec::new()));
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return Ok((got.load(std::sync::atomic::Ordering::Relaxed), Instant::now())),
            Ok(n) => n,
        };
        let body = match head.as_mut() {
            None => n,
            Some(head_so_far) => {
                head_so_far.extend_from_slice(&buf[..n]);
                match head_so_far.windows(4).position(|w| w == b"\r\n\r\n") {
                    Some(end) => {
                        let body = head_so_far.len() - (end + 4);
                        head = None;
                        body
                    }
                    None => 0,
                }
            }
        };
        got.fetch_add(body as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The time from `started` until `password` authenticates at the node at `addr`, asked
/// every millisecond on one connection (a new one when the node closes it), within 30 s.
async fn until_authenticated(
    addr: std::net::SocketAddr,
    probe: H3Client,
    password: &str,
    started: Instant,
) -> Result<Duration> {
    until_authentication(addr, probe, password, started, true).await
}

/// How long from `started` until authenticating with `password` at the node at `addr` gives
/// `want` (asked every millisecond, on `probe`, then on new connections); at most 30 s.
async fn until_authentication(
    addr: std::net::SocketAddr,
    probe: H3Client,
    password: &str,
    started: Instant,
    want: bool,
) -> Result<Duration> {
    let mut probe = Some(probe);
    loop {
        let attempt = match probe.as_mut() {
            Some(p) => p.authenticates(password).await,
            None => match H3Client::connect(addr).await {
                Ok(p) => probe.insert(p).authenticates(password).await,
                Err(e) => Err(e),
            },
        };
        match attempt {
            Ok(got) if got == want => return Ok(started.elapsed()),
            Ok(_) => {}
            Err(_) => probe = None,
        }
        if started.elapsed() > Duration::from_secs(30) {
            match want {
                true => bail!("the node did not let the user in within 30 s"),
                false => bail!("the node still let the user in after 30 s"),
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The node's side of a change: a node alone in its cgroup, holding a set of 10,000 users,
/// pulls sets from a native edge (outside the cgroup, on CPU 0 with the load) every second.
/// Each new set changes one user against the full table; the node logs how long each took
/// from the answer in hand to the live table. Then two users download through it and one is
/// removed: the time from the push to the edge until that user's transfer is cut.
async fn node(t: &mut Table, quick: bool) -> Result<()> {
    use hearth_shared::keys::{Role, SecretKey};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    println!("node: sets of 10,000 users pulled and applied; a removed user cut off");
    let temp = tempfile::tempdir()?;
    let mut sim = ControlSim::new();
    let edge = EdgeProcess::start(Backend::Native, &temp.path().join("edge.db"), &sim.edge_vars(API, PUSH_TOKEN, &[]))?;
    let http = hearth_tests::http().build()?;
    let key = SecretKey::generate(Role::Node, &mut OsRng)?;
    let mut users: BTreeMap<u64, String> = (1..=10_000u64).map(|u| (u, format!("password-{u}"))).collect();
    let first = sim.creds(&credential_set(&users)?);
    let mut version = 1;
    let dir = temp.path().join("node");
    let settings = format!("edge_url = \"{}\"\napi_prefix = \"{API}\"\nedge_poll_secs = 1\n", edge.url);
    hearth_tests::node::state_dir_with(&dir, &sim, 1, &settings)?;
    hearth_tests::node::save_node_key(&dir, &key)?;
    // The node starts with the set on disk, as a running node holds it: each pull then
    // changes a full table.
    std::fs::write(dir.join("creds.envelope"), first.envelope().context("an envelope")?)?;
    let record = sim.node(1, Some(key.public()));
    push_to(&http, &edge.url, sim.push(&[record, first])).await?;
    let cg = Cgroup::create("node-sets", SUT_CPU, GIB)?;
    let node = cg.start(|| LoggingNode::start(&dir))?;
    node.logged("serving the last good credential set", "version", version)?;

    // One user removed and one added per set: 10,000 users before and after.
    let changes = if quick { 5 } else { 10 };
    let (mut total, mut verify, mut store, mut swap) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for k in 0..changes {
        users.remove(&(3 + k));
        users.insert(10_001 + k, format!("password-{}", 10_001 + k));
        let item = sim.creds(&credential_set(&users)?);
        version += 1;
        push_to(&http, &edge.url, sim.push(&[item])).await?;
        let line = node.logged("applied a new credential set", "version", version)?;
        let field = |name: &str| log_field(&line, name).map(|us| us as f64 / 1000.0).context("a timing in the log");
        let (users_held, removed) = (log_field(&line, "users"), log_field(&line, "removed"));
        if (users_held, removed) != (Some(10_000), Some(1)) {
            bail!("the node applied something else than one change among 10,000: {line}");
        }
        total.push(field("total_micros")?);
        verify.push(field("verify_micros")?);
        store.push(field("store_micros")?);
        swap.push(field("micros")?);
    }
    let metric = "node: a set of 10,000 users, one changed, from the pull answer to the live table";
    let (median_of, slowest) =
        (|v: &[f64]| median(v).map_or(0.0, |(m, _, _)| m), |v: &[f64]| v.iter().copied().fold(0.0, f64::max));
    t.add(&format!("{metric}: median"), "ms", median_of(&total), "");
    t.note(
        &format!("{metric}: median"),
        &format!(
            "measured: by the node (its log), from the pulled bytes in hand to the swapped table: verify, decode, \
             write to disk (fsync), diff against the 10,000 held, swap; {changes} sets a repetition, pulled from \
             the edge"
        ),
    );
    t.add(&format!("{metric}: slowest"), "ms", slowest(&total), "");
    t.add("node, the same sets: verify and decode, median", "ms", median_of(&verify), "");
    t.add("node, the same sets: written to disk (fsync), median", "ms", median_of(&store), "");
    t.add("node, the same sets: diff against the held table and swap, median", "ms", median_of(&swap), "");

    // Users 1 and 2 download through the node, paced (16 KiB every 10 ms, 8 MiB: 5 s); user 1
    // is removed once both are under way.
    let body: Vec<u8> = (0..(8u32 << 20)).map(|i| (i % 251) as u8).collect();
    let web = hearth_tests::node::http_server_paced(body.clone(), Duration::from_millis(10)).await?;
    let outbound = |password: &str| {
        json!({
            "type": "hysteria2", "server": "127.0.0.1", "server_port": node.addr.port(), "password": password,
            "tls": { "enabled": true, "server_name": "localhost", "insecure": true, "alpn": ["h3"] }
        })
    };
    let (alice, bob) = (ProxyClient::sing_box(outbound("password-1"))?, ProxyClient::sing_box(outbound("password-2"))?);
    let (alice_got, bob_got) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let alice_run = tokio::spawn({
        let got = alice_got.clone();
        async move { download(&alice, web, got).await }
    });
    let bob_run = tokio::spawn({
        let got = bob_got.clone();
        async move { download(&bob, web, got).await }
    });
    let started = Instant::now();
    while alice_got.load(Ordering::Relaxed) == 0 || bob_got.load(Ordering::Relaxed) == 0 {
        if started.elapsed() > Duration::from_secs(30) || alice_run.is_finished() || bob_run.is_finished() {
            bail!("the two downloads through the node did not start");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    users.remove(&1);
    let item = sim.creds(&credential_set(&users)?);
    let pushed_at = Instant::now();
    push_to(&http, &edge.url, sim.push(&[item])).await?;
    let (alice_bytes, cut_at) = alice_run.await??;
    let (bob_bytes, _) = bob_run.await??;
    if alice_bytes >= body.len() as u64 {
        bail!("the removed user's download was not cut");
    }
    if bob_bytes != body.len() as u64 {
        bail!("the other user's download was cut too ({bob_bytes} of {} bytes)", body.len());
    }
    let metric = "node: a removed user's transfer cut, from the push to the edge";
    t.add(metric, "s", cut_at.duration_since(pushed_at).as_secs_f64(), "");
    t.note(
        metric,
        "measured: the node polls the edge every 1 s (edge_poll_secs = 1); the other user's download completed",
    );
    node.stop()?;
    edge.stop()
}

/// The admin panel with 10,000 users: how long each page waits for its data (the API calls
/// it makes, in parallel as the page makes them) from the client over HTTPS on loopback, so
/// an upper bound of control's own time; and what a first visit downloads.
async fn panel(t: &mut Table, quick: bool) -> Result<()> {
    println!("panel: pages with 10,000 users");
    let temp = tempfile::tempdir()?;
    let dir = ControlDir::init(&temp.path().join("control"))?;
    let http = dir.client()?;
    let cg = Cgroup::create("panel", SUT_CPU, GIB)?;
    let control = cg.start(|| ControlProcess::start(&dir, &[]))?;
    let token = control.setup(&http, "operate").await?;
    let names: Vec<String> = (0..10_000).map(|i| format!("user-{i:05}")).collect();
    control.call(&http, &token, reqwest::Method::POST, "/users/bulk", Some(&json!({ "names": names }))).await?;
    let pages: &[(&str, &[&str])] = &[
        ("overview", &["/status", "/usage?days=30"]),
        ("users, first page", &["/users?page=1&per_page=50", "/groups"]),
        ("users, page 100", &["/users?page=100&per_page=50", "/groups"]),
        ("users, search", &["/users?q=user-0777&page=1&per_page=50", "/groups"]),
        ("users, status filter", &["/users?status=active&page=1&per_page=50", "/groups"]),
        ("one user", &["/users/5000", "/groups", "/users/5000/link", "/users/5000/usage?days=30"]),
        ("what apps receive", &["/users/5000/preview?ua=SFA%2F1.12.4"]),
        ("nodes", &["/nodes", "/groups"]),
        ("audit log", &["/audit?limit=100"]),
    ];
    for (page, calls) in pages {
        let mut times = Vec::new();
        let mut bytes = 0;
        // The first visit of each page is untimed (a warm-up, as every row has).
        for visit in 0..=if quick { 10 } else { 40 } {
            let started = Instant::now();
            let sent: Vec<_> =
                calls.iter().map(|call| tokio::spawn(http.get(control.api(call)).bearer_auth(&token).send())).collect();
            bytes = 0;
            for answer in sent {
                let answer = answer.await??;
                if !answer.status().is_success() {
                    bail!("{page}: {}", answer.text().await?);
                }
                bytes += answer.bytes().await?.len();
            }
            if visit > 0 {
                times.push(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
        times.sort_by(f64::total_cmp);
        let metric = format!("panel, 10,000 users: {page}, p95");
        t.add(&metric, "ms", quantile(&times, 0.95), "");
        t.note(&metric, &format!("data: {bytes} bytes"));
    }
    // What a first visit downloads: the page and its files, gzipped as browsers ask.
    let page_url = format!("{}/{}/", control.url, control.admin);
    let page_text = http.get(&page_url).header("accept-encoding", "identity").send().await?.text().await?;
    let mut urls = vec![page_url.clone()];
    for asset in page_text.split("assets/").skip(1).filter_map(|rest| rest.split('"').next()) {
        urls.push(format!("{}/{}/assets/{asset}", control.url, control.admin));
    }
    if urls.len() < 4 {
        bail!("the page names {} files, expected 3", urls.len() - 1);
    }
    let (mut gzipped, mut plain) = (0, 0);
    for url in &urls {
        gzipped += http.get(url).header("accept-encoding", "gzip").send().await?.bytes().await?.len();
        plain += http.get(url).header("accept-encoding", "identity").send().await?.bytes().await?.len();
    }
    // In KB (1000 bytes), the unit of the target.
    let metric = "panel: what a first visit downloads (gzip)";
    t.add(metric, "KB", gzipped as f64 / 1000.0, "");
    t.note(metric, &format!("{:.0} KB plain", plain as f64 / 1000.0));
    control.stop()
}

/// A node with 1000 users in `cg` (the benchmark's client is user 1), and its state dir in
/// `temp/<name>`; `extra` goes into its `node.toml`.
fn node_with_users(cg: &Cgroup, temp: &std::path::Path, name: &str, extra: &str) -> Result<(NodeProcess, PathBuf)> {
    node_routed(cg, temp, name, extra, None)
}

/// [`node_with_users`] whose user 1 is routed by `rules` (rule set 1), sealed for the node.
fn node_routed(
    cg: &Cgroup,
    temp: &std::path::Path,
    name: &str,
    extra: &str,
    rules: Option<&str>,
) -> Result<(NodeProcess, PathBuf)> {
    use hearth_shared::sha256;
    use hearth_shared::wire::{CredEntry, CredentialSet};
    let mut sim = ControlSim::new();
    let dir = temp.join(name);
    hearth_tests::node::state_dir_with(&dir, &sim, 1, extra)?;
    let mut users: Vec<CredEntry> =
        (1..=1000u64).map(|u| CredEntry::new(u, sha256(format!("password-{u}").as_bytes()))).collect();
    let mut set_routing = None;
    if let Some(rules) = rules {
        let key = hearth_shared::keys::SecretKey::generate(hearth_shared::keys::Role::Node, &mut rand_core::OsRng)?;
        hearth_tests::node::save_node_key(&dir, &key)?;
        let routing = hearth_shared::routing::Routing {
            outbounds: Vec::new(),
            sets: vec![hearth_shared::routing::RuleSet { id: 1, name: "bench".into(), text: rules.into() }],
        };
        set_routing = Some(hearth_shared::routing::seal(&routing, &key.public(), &[1; 32]).context("sealing")?);
        users[0].rules = 1;
    }
    let item = sim.creds(&CredentialSet::new(1, users)?.with_routing(set_routing)?);
    std::fs::write(dir.join("creds.envelope"), item.envelope().context("an envelope")?)?;
    let node = cg.start(|| NodeProcess::start(&dir))?;
    Ok((node, dir))
}

/// Datagrams the kernel has dropped so far because a UDP socket's receive buffer was full
/// (`RcvbufErrors` in `/proc/net/snmp`, every socket of the machine): in the lossy rows, loss
/// no shaped link decided, which should stay near none.
fn udp_buffer_drops() -> Result<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp")?;
    let mut udp = snmp.lines().filter(|line| line.starts_with("Udp: "));
    let (names, values) = (udp.next().context("Udp names")?, udp.next().context("Udp values")?);
    let at = names.split_whitespace().position(|name| name == "RcvbufErrors").context("RcvbufErrors")?;
    Ok(values.split_whitespace().nth(at).context("an RcvbufErrors value")?.parse()?)
}

/// A TCP source: every connection gets `bytes` zero bytes as fast as the reader takes them.
async fn source(bytes: u64) -> Result<std::net::SocketAddr> {
    use tokio::io::AsyncWriteExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let chunk = vec![0u8; 256 * 1024];
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if stream.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n as u64;
                }
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok(addr)
}

/// Downloads through `client` on `streams` connections; Gbit/s, and Gbit moved per second of
/// the server's CPU.
async fn throughput(client: &ProxyClient, cg: &Cgroup, streams: usize, per_stream: u64) -> Result<(f64, f64)> {
    use tokio::io::AsyncReadExt as _;
    let target = source(per_stream).await?;
    let (cpu, started) = (cg.cpu_ns()?, Instant::now());
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let mut stream = client.connect(target).await?;
        tasks.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 256 * 1024];
            let mut total = 0u64;
            loop {
                let n = stream.read(&mut buf).await?;
                if n == 0 {
                    return Ok::<u64, std::io::Error>(total);
                }
                total += n as u64;
            }
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    if total != per_stream * streams as u64 {
        bail!("received {total} of {} bytes", per_stream * streams as u64);
    }
    let seconds = started.elapsed().as_secs_f64();
    let gbit = total as f64 * 8.0 / 1e9;
    let cpu = (cg.cpu_ns()? - cpu) as f64 / 1e9;
    Ok((gbit / seconds, gbit / cpu.max(0.001)))
}

/// sing-box's Hysteria2 server in `cg` with the users of [`node_with_users`] and the node's
/// certificate (from its state directory `dir`), configured in `temp`; and its UDP port.
fn sing_box_server(cg: &Cgroup, temp: &std::path::Path, dir: &std::path::Path) -> Result<(std::process::Child, u16)> {
    let port = free_port()?;
    let users: Vec<Value> = (1..=1000).map(|u| json!({ "password": format!("password-{u}") })).collect();
    let config = json!({
        "log": { "level": "warn" },
        "inbounds": [{
            "type": "hysteria2", "listen": "127.0.0.1", "listen_port": port, "users": users,
            "tls": { "enabled": true, "alpn": ["h3"],
                     "certificate_path": dir.join("tls.crt"), "key_path": dir.join("tls.key") }
        }],
        "outbounds": [{ "type": "direct" }]
    });
    let file = temp.join("peer.json");
    std::fs::write(&file, serde_json::to_vec(&config)?)?;
    let sing_box = hearth_tests::sing_box()?;
    let child = cg.start(|| hearth_tests::cgroup::command(&sing_box).args(["run", "-c"]).arg(&file).spawn())?;
    Ok((child, port))
}

/// A sing-box client's Hysteria2 outbound to a server on loopback `port` as user 1.
fn outbound(port: u16) -> Value {
    json!({
        "type": "hysteria2", "server": "127.0.0.1", "server_port": port, "password": "password-1",
        "tls": { "enabled": true, "server_name": "localhost", "insecure": true, "alpn": ["h3"] }
    })
}

/// `rules` rules of the kinds owners paste (suffixes and exact domains from block lists,
/// networks, wildcards, a few addresses), none of which a bench request matches, then
/// `direct(all)`: the worst case for routing, every rule ruled out.
fn bench_rules(rules: usize) -> String {
    let mut text = String::new();
    for i in 0..rules.saturating_sub(1) {
        let rule = match i % 20 {
            0..=7 => format!("reject(suffix:ads{i}.example.com)"),
            8..=13 => format!("direct(site{i}.example.org)"),
            14 | 15 => format!("reject(10.{}.{}.0/{}, tcp/443)", i / 256 % 256, i % 256, 16 + i % 9),
            16 => format!("direct(2001:db8:{i:x}::/{})", 32 + i % 17),
            17 => format!("reject(*.cdn{i}.example.net)"),
            18 => format!("reject(*.tracker{i}.*)"),
            _ => format!("reject(8.{}.{}.{})", i % 256, i / 7 % 256, i % 13),
        };
        text.push_str(&rule);
        text.push('\n');
    }
    text.push_str("direct(all)\n");
    text
}

/// N1: routing per user (issue 50). What a new connection's rule match costs at 1,000 rules
/// (in process, as the node does it), and the tunnel through a node whose user is routed by
/// 100 rules against the same node without (B1's 1 and 16 streams).
async fn routing(t: &mut Table, quick: bool, rep: usize) -> Result<()> {
    use hearth_shared::acl::{self, Matcher, NoGeo, Proto, Request};
    println!("routing: rule matching, and the tunnel with rules loaded");
    let rules = acl::parse(&bench_rules(1000), &[])?;
    let matcher = Matcher::new(rules.clone());
    let ips: Vec<std::net::IpAddr> = vec!["93.184.215.14".parse()?, "2606:2800:220:1::1".parse()?];
    let request =
        Request { domain: Some("www.some-long-domain-name.example.net"), ips: &ips, proto: Proto::Tcp, port: 443 };
    let last = rules.last().map(|rule| rule.line);
    for (metric, indexed) in [
        ("N1 routing: a new connection's rule match at 1,000 rules (the node's index): CPU", true),
        ("N1 routing: a new connection's rule match at 1,000 rules, each tried in turn: CPU", false),
    ] {
        let rounds = 200_000 / if indexed { 1 } else { 20 };
        let (cpu, mut matched) = (own_cpu_seconds()?, 0u64);
        for _ in 0..rounds {
            let rule = if indexed {
                matcher.route(std::hint::black_box(&request), &NoGeo)
            } else {
                acl::route(&rules, std::hint::black_box(&request), &NoGeo)
            };
            matched += u64::from(rule.map(|rule| rule.line) == last);
        }
        let used = own_cpu_seconds()? - cpu;
        if matched != rounds {
            bail!("{} of {rounds} requests did not fall through to direct(all)", rounds - matched);
        }
        t.add(&format!("{metric} per connection"), "us", used * 1e6 / rounds as f64, "");
        t.note(&format!("{metric} per connection"), "in process; a request no rule but the last matches");
    }

    let temp = tempfile::tempdir()?;
    let plain_cg = Cgroup::create("node-plain", SUT_CPU, GIB)?;
    let (plain, _) = node_with_users(&plain_cg, temp.path(), "node-plain", "")?;
    let routed_cg = Cgroup::create("node-routed", SUT_CPU, GIB)?;
    let (routed, _) = node_routed(&routed_cg, temp.path(), "node-routed", "", Some(&bench_rules(100)))?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Both pairs, the routed one as Hearth's row and the plain one as its peer.
    let servers = [
        (ProxyClient::sing_box(outbound(routed.addr.port()))?, &routed_cg),
        (ProxyClient::sing_box(outbound(plain.addr.port()))?, &plain_cg),
    ];
    let scale = if quick { 4 } else { 1 };
    for (client, cg) in &servers {
        throughput(client, cg, 4, (64 << 20) / scale).await?;
    }
    for (case, (streams, per_stream)) in
        [(1usize, (1024u64 << 20) / scale), (16, (64 << 20) / scale)].into_iter().enumerate()
    {
        let metric =
            format!("N1 tunnel, {streams} stream{}, user routed by 100 rules", if streams == 1 { "" } else { "s" });
        let mut measured = [(0.0, 0.0); 2];
        for turn in 0..servers.len() {
            let which = (rep + case + turn) % servers.len();
            measured[which] = throughput(&servers[which].0, servers[which].1, streams, per_stream).await?;
        }
        let [(gbps, per_cpu), (peer_gbps, peer_per_cpu)] = measured;
        t.add(&format!("{metric}: Gbit/s"), "Gbit/s", gbps, "");
        t.add(&format!("{metric}: Gbit per server CPU-second"), "Gbit/CPU-s", per_cpu, "");
        t.add_peer(&format!("{metric}: Gbit/s"), "Gbit/s", peer_gbps);
        t.add_peer(&format!("{metric}: Gbit per server CPU-second"), "Gbit/CPU-s", peer_per_cpu);
        t.note(&format!("{metric}: Gbit/s"), "the peer is the same node without rules");
    }
    plain.stop()?;
    routed.stop()?;
    Ok(())
}

/// B2-B4: the node against sing-box's Hysteria2 server on shaped paths (`hearth_tests::lossy`,
/// the same shape both ways). B2: 50 ms RTT, 0, 1, 3 and 5 % of packets lost at random, a
/// 200 Mbit/s bottleneck with a queue of one RTT (and Brutal at 500 Mbit/s through a 1 Gbit/s
/// one); B3: 100 ms RTT give or take 25 ms of jitter; B4: a 30 Mbit/s bottleneck with a
/// shallow queue (10 ms), where BBR's probing overshoots (hysteria #1180). Each with the
/// client's own congestion control (no rate announced: both servers run BBR; the node with
/// CUBIC and with quinn's BBR beside them, their peer the same sing-box run) and, on B2, with
/// Brutal (the client announces the rate); the same client program, the servers taking turns
/// in a rotating order. Beside goodput and CPU: the share of the servers' packets the path
/// lost or dropped (what they had to send again) and how long packets queued at the
/// bottleneck (the RTT they added).
async fn lossy(t: &mut Table, quick: bool, rep: usize) -> Result<()> {
    use hearth_tests::lossy::{LossyPath, Shape};
    println!("lossy: hearth-node against sing-box's server on shaped paths");
    let temp = tempfile::tempdir()?;
    let ours = Cgroup::create("node-lossy", SUT_CPU, GIB)?;
    let (node, dir) = node_with_users(&ours, temp.path(), "node", "")?;
    let theirs = Cgroup::create("sing-box-lossy", SUT_CPU, GIB)?;
    let (mut peer, peer_port) = sing_box_server(&theirs, temp.path(), &dir)?;
    // The node with CUBIC and with quinn's BBR, for the rows without Brutal.
    let cubic_cg = Cgroup::create("node-cubic-lossy", SUT_CPU, GIB)?;
    let (cubic, _) = node_with_users(&cubic_cg, temp.path(), "node-cubic", "congestion = \"cubic\"\n")?;
    let quinn_cg = Cgroup::create("node-quinn-bbr-lossy", SUT_CPU, GIB)?;
    let (quinn, _) = node_with_users(&quinn_cg, temp.path(), "node-quinn-bbr", "congestion = \"quinn-bbr\"\n")?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let bytes = if quick { 8u64 << 20 } else { 48 << 20 };
    let ms = Duration::from_millis;
    let mut cases: Vec<(String, Shape, Vec<Option<u64>>)> = Vec::new();
    for loss in [0.0, 0.01, 0.03, 0.05] {
        let name = format!("B2 50 ms, {} % loss", loss * 100.0);
        cases.push((name, Shape::symmetric(ms(50), loss, 200), vec![None, Some(150)]));
    }
    cases.push((
        "B2 50 ms, 1 % loss, 1 Gbit/s bottleneck".into(),
        Shape::symmetric(ms(50), 0.01, 1000),
        vec![Some(500)],
    ));
    let jittery = Shape { delay: ms(75) / 2, jitter: ms(25), loss: 0.0, rate: Some(200_000_000), queue: ms(100) };
    cases.push(("B3 100 ms, 25 ms of jitter each way".into(), jittery, vec![None]));
    let shallow = Shape { delay: ms(25), jitter: Duration::ZERO, loss: 0.0, rate: Some(30_000_000), queue: ms(10) };
    cases.push(("B4 30 Mbit/s, 10 ms queue".into(), shallow, vec![None]));
    // `HEARTH_SUITE_CASE=<start of a case's name>`: that case alone (for profiling it).
    let only = std::env::var("HEARTH_SUITE_CASE").ok();
    for (case, (name, shape, modes)) in cases.into_iter().enumerate() {
        if only.as_ref().is_some_and(|only| !name.starts_with(only.as_str())) {
            continue;
        }
        for announced in modes {
            let mode = match announced {
                None => "client's congestion control".to_owned(),
                Some(mbps) => format!("Brutal at {mbps} Mbit/s"),
            };
            // The node, sing-box, and (without Brutal, where they matter) the node with CUBIC
            // and with quinn's BBR.
            let mut servers = vec![(node.addr.port(), &ours), (peer_port, &theirs)];
            if announced.is_none() {
                servers.push((cubic.addr.port(), &cubic_cg));
                servers.push((quinn.addr.port(), &quinn_cg));
            }
            let mut measured = vec![[0.0; 5]; servers.len()];
            for turn in 0..servers.len() {
                let which = (rep + case + turn) % servers.len();
                let (port, cg) = servers[which];
                let server = std::net::SocketAddr::from(([127, 0, 0, 1], port));
                let path = LossyPath::start(server, shape, shape).await?;
                let mut client = outbound(path.addr.port());
                if let Some(mbps) = announced {
                    client["up_mbps"] = mbps.into();
                    client["down_mbps"] = mbps.into();
                }
                let client = ProxyClient::sing_box(client)?;
                // Untimed: the QUIC connection made, the first RTTs of growth.
                throughput(&client, cg, 1, 1 << 20).await?;
                path.down.take();
                // CUBIC gets a few Mbit/s through random loss: a twelfth of the bytes there;
                // 30 Mbit/s takes a quarter.
                let mut bytes = if which == 2 && shape.loss > 0.0 { bytes / 12 } else { bytes };
                if shape.rate.is_some_and(|rate| rate < 100_000_000) {
                    bytes /= 4;
                }
                if shape.rate.is_some_and(|rate| rate >= 1_000_000_000) {
                    bytes *= 2;
                }
                let full = udp_buffer_drops()?;
                let (gbps, per_cpu) = throughput(&client, cg, 1, bytes).await?;
                let full = (udp_buffer_drops()? - full) as f64;
                let (delivered, lost, dropped, queued_us) = path.down.take();
                let missing = 100.0 * (lost + dropped) as f64 / (delivered + lost + dropped).max(1) as f64;
                let queued_ms = queued_us as f64 / delivered.max(1) as f64 / 1000.0;
                measured[which] = [gbps * 1000.0, per_cpu, missing, queued_ms, full];
            }
            let mut rows = vec![(format!("{name}, {mode}"), measured[0])];
            if announced.is_none() {
                rows.push((format!("{name}, node with CUBIC"), measured[2]));
                rows.push((format!("{name}, node with quinn's BBR"), measured[3]));
            }
            let theirs = measured[1];
            let units = [
                ("Mbit/s", "Mbit/s"),
                ("Gbit per server CPU-second", "Gbit/CPU-s"),
                ("packets lost or dropped on the way down", "%"),
                ("queueing at the bottleneck, mean", "ms"),
                ("datagrams the machine's sockets dropped, full", "datagrams"),
            ];
            for (metric, values) in rows {
                for (i, (what, unit)) in units.iter().enumerate() {
                    let row = format!("{metric}: {what}");
                    t.add(&row, unit, values[i], "");
                    t.add_peer(&row, unit, theirs[i]);
                }
            }
        }
    }
    quinn.stop()?;
    cubic.stop()?;
    let _ = peer.kill();
    let _ = peer.wait();
    node.stop()
}

/// P1 (node), B1: the node against sing-box's Hysteria2 server (and the node with CUBIC),
/// the same client, taking turns in an order that rotates (repetition `rep`).
async fn tunnel(t: &mut Table, quick: bool, rep: usize) -> Result<()> {
    println!("tunnel: hearth-node against sing-box's server");
    let temp = tempfile::tempdir()?;
    let ours = Cgroup::create("node", SUT_CPU, GIB)?;
    let (node, dir) = node_with_users(&ours, temp.path(), "node", "")?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    t.add("P1 node idle, 1000 users (anon)", "MiB", ours.anon_bytes()? as f64 / MIB, "");
    let rss = hearth_tests::proc_status_kib(node.pid(), "RssAnon:")? as f64 / 1024.0;
    t.note("P1 node idle, 1000 users (anon)", &format!("the process's own RssAnon: {rss:.1} MiB"));

    let theirs = Cgroup::create("sing-box", SUT_CPU, GIB)?;
    let (mut peer, peer_port) = sing_box_server(&theirs, temp.path(), &dir)?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    t.add_peer("P1 node idle, 1000 users (anon)", "MiB", theirs.anon_bytes()? as f64 / MIB);

    // The same node with CUBIC (`congestion = "cubic"`), in a cgroup of its own: where
    // quinn's BBR spends CPU, as a row of its own.
    let cubic_cg = Cgroup::create("node-cubic", SUT_CPU, GIB)?;
    let (cubic_node, _) = node_with_users(&cubic_cg, temp.path(), "node-cubic", "congestion = \"cubic\"\n")?;
    let quinn_cg = Cgroup::create("node-quinn-bbr", SUT_CPU, GIB)?;
    let (quinn_node, _) = node_with_users(&quinn_cg, temp.path(), "node-quinn-bbr", "congestion = \"quinn-bbr\"\n")?;
    // The four servers and their clients: the node (its own BBR), sing-box, the node with
    // CUBIC, the node with quinn's BBR.
    let servers = [
        (ProxyClient::sing_box(outbound(node.addr.port()))?, &ours),
        (ProxyClient::sing_box(outbound(peer_port))?, &theirs),
        (ProxyClient::sing_box(outbound(cubic_node.addr.port()))?, &cubic_cg),
        (ProxyClient::sing_box(outbound(quinn_node.addr.port()))?, &quinn_cg),
    ];
    let scale = if quick { 4 } else { 1 };
    // One untimed transfer through each (its client's QUIC connection made, the windows
    // grown, the buffers allocated), as every row is warmed.
    for (client, cg) in &servers {
        throughput(client, cg, 4, (64 << 20) / scale).await?;
    }
    let cases = [(1usize, (1024u64 << 20) / scale), (16, (64 << 20) / scale), (64, (16 << 20) / scale)];
    for (case, (streams, per_stream)) in cases.into_iter().enumerate() {
        let metric = format!("B1 tunnel, {streams} stream{}", if streams == 1 { "" } else { "s" });
        // The servers take turns in a rotating order: the first moves on by one with each
        // stream count and each repetition, so each goes first once in every repetition.
        let mut measured = [(0.0, 0.0); 4];
        for turn in 0..servers.len() {
            let which = (rep + case + turn) % servers.len();
            let (client, cg) = &servers[which];
            measured[which] = throughput(client, cg, streams, per_stream).await?;
        }
        let [(gbps, per_cpu), peer, cubic, quinn] = measured;
        t.add(&format!("{metric}: Gbit/s"), "Gbit/s", gbps, "");
        t.add(&format!("{metric}: Gbit per server CPU-second"), "Gbit/CPU-s", per_cpu, "");
        let mut rows = vec![metric];
        for (name, (gbps, per_cpu)) in [("CUBIC", cubic), ("quinn's BBR", quinn)] {
            let other = format!("{}, node with {name}", rows[0]);
            t.add(&format!("{other}: Gbit/s"), "Gbit/s", gbps, "");
            t.add(&format!("{other}: Gbit per server CPU-second"), "Gbit/CPU-s", per_cpu, "");
            t.note(&format!("{other}: Gbit/s"), "the peer is the same sing-box run (BBR)");
            rows.push(other);
        }
        for metric in rows {
            t.add_peer(&format!("{metric}: Gbit/s"), "Gbit/s", peer.0);
            t.add_peer(&format!("{metric}: Gbit per server CPU-second"), "Gbit/CPU-s", peer.1);
        }
    }
    // Brutal on loopback (#48): the client (sing-box's, then mihomo's) announces 500 and
    // 1,000 Mbit/s, and each server sends it three seconds' worth at that rate through one
    // stream.
    let cert = node.certificate_sha256()?;
    for (case, (app, mbps)) in [("", 500u64), ("", 1000), (", mihomo", 500), (", mihomo", 1000)].into_iter().enumerate()
    {
        let metric = format!("B1 tunnel, Brutal at {mbps} Mbit/s{app}: Mbit/s");
        let mut measured = [0.0; 2];
        for turn in 0..2 {
            let which = (rep + case + turn) % 2;
            let (port, cg) = [(node.addr.port(), &ours), (peer_port, &theirs)][which];
            let client = if app.is_empty() {
                let mut announcing = outbound(port);
                announcing["up_mbps"] = mbps.into();
                announcing["down_mbps"] = mbps.into();
                ProxyClient::sing_box(announcing)?
            } else {
                let profile = hearth_tests::node::mihomo_profile(port, cert, "password-1");
                ProxyClient::mihomo(&hearth_tests::node::mihomo_announcing(&profile, mbps, mbps))?
            };
            // mihomo opens its SOCKS port a moment before its proxies are loaded.
            let warmed = Instant::now();
            while let Err(e) = throughput(&client, cg, 1, 1 << 20).await {
                if warmed.elapsed() > Duration::from_secs(30) {
                    return Err(e.context("no traffic through the client for 30 s"));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            measured[which] = throughput(&client, cg, 1, mbps * 1_000_000 / 8 * 3 / scale).await?.0 * 1000.0;
        }
        t.add(&metric, "Mbit/s", measured[0], "");
        t.add_peer(&metric, "Mbit/s", measured[1]);
    }
    quinn_node.stop()?;
    cubic_node.stop()?;
    let _ = peer.kill();
    let _ = peer.wait();
    node.stop()
}

/// The Hysteria2 password of user `id`, from the sing-box profile control previews for it
/// (what the user's link serves).
async fn password_of<F, Fut>(call: &F, id: u64) -> Result<String>
where
    F: Fn(reqwest::Method, String, Option<Value>) -> Fut,
    Fut: std::future::Future<Output = Result<Value>>,
{
    let preview = call(reqwest::Method::GET, format!("/users/{id}/preview?ua=SFA%2F1.13.0"), None).await?;
    let profile: Value = serde_json::from_str(preview["body"].as_str().context("a preview's body")?)?;
    let outbounds = profile["outbounds"].as_array().context("outbounds in the profile")?;
    let hysteria2 = outbounds.iter().find(|o| o["type"] == "hysteria2").context("a hysteria2 outbound")?;
    Ok(hysteria2["password"].as_str().context("a password")?.to_owned())
}

/// Control and a native edge (with `edge_extra` settings) in `cg`, control pushing to the
/// edge and signed in as an admin, and a node enrolled with the command control printed (its
/// state in `<temp>/node`; not started). `HEARTH_SUITE_CONTROL_LOG` sets control's log filter.
struct OneBox {
    dir: ControlDir,
    env: Vec<(&'static str, String)>,
    edge: EdgeProcess,
    control: ControlProcess,
    https: reqwest::Client,
    token: String,
    state: PathBuf,
}

async fn one_box(cg: &Cgroup, temp: &std::path::Path, edge_extra: &[(&str, &str)]) -> Result<OneBox> {
    let dir = ControlDir::init(&temp.join("control"))?;
    let mut vars = dir.edge_vars()?;
    vars.extend(edge_extra.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())));
    let edge = cg.start(|| EdgeProcess::start(Backend::Native, &temp.join("edge.db"), &vars))?;
    let listen = format!("127.0.0.1:{}", free_port()?);
    let mut env = vec![("HEARTH_LISTEN", listen), ("HEARTH_EDGE_URL", edge.url.clone())];
    if let Ok(log) = std::env::var("HEARTH_SUITE_CONTROL_LOG") {
        env.push(("HEARTH_LOG", log));
    }
    let control = cg.start(|| ControlProcess::start(&dir, &env))?;
    let https = dir.client()?;
    let token = control.setup(&https, "admin").await?;
    let state = temp.join("node");
    control.enroll_node(&https, &token, &state).await?;
    Ok(OneBox { dir, env, edge, control, https, token, state })
}

/// The bytes control has pushed to edges so far (its `/metrics`).
async fn pushed_bytes(https: &reqwest::Client, token: &str, control: &ControlProcess) -> Result<u64> {
    let url = format!("{}/{}/metrics", control.url, control.admin);
    let text = https.get(&url).bearer_auth(token).send().await?.text().await?;
    text.lines()
        .find_map(|l| l.strip_prefix("hearth_pushed_bytes_total ")?.trim().parse::<u64>().ok())
        .context("hearth_pushed_bytes_total in /metrics")
}

/// Control, a native edge and a node together in one cgroup (one box), 1000 users, a node
/// enrolled; D (the storm) and E (a restart of control during 64 streams).
async fn system(t: &mut Table, storm_seconds: u64) -> Result<()> {
    println!("system: the storm, a restart of control");
    let temp = tempfile::tempdir()?;
    let cg = Cgroup::create("system", SUT_CPU, GIB)?;
    let OneBox { dir, env, edge, control, https, token, state } = one_box(&cg, temp.path(), &[]).await?;
    let call = |method: reqwest::Method, path: String, body: Option<Value>| {
        let (https, token, control) = (&https, &token, &control);
        async move { control.call(https, token, method, &path, body.as_ref()).await }
    };
    let pushed = || pushed_bytes(&https, &token, &control);
    // P6: 1000 users in one call, until the edge serves the last of them.
    let names: Vec<String> = (0..1000).map(|i| format!("user{i:04}")).collect();
    let (bytes, cpu, started) = (pushed().await?, cg.cpu_ns()?, Instant::now());
    let bulk = call(reqwest::Method::POST, "/users/bulk".into(), Some(json!({ "names": names }))).await?;
    let users = bulk["users"].as_array().context("users")?.clone();
    let links: Vec<String> = users.iter().filter_map(|u| u["link"].as_str().map(str::to_owned)).collect();
    let plain = hearth_tests::http().build()?;
    first_200(&plain, links.last().context("links")?, started).await?;
    t.add(
        "P6 1000 users created and pushed: until the edge serves the last",
        "ms",
        started.elapsed().as_secs_f64() * 1000.0,
        "",
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    t.add("P6 1000 users: bytes pushed", "KiB", (pushed().await? - bytes) as f64 / 1024.0, "");
    t.add("P6 1000 users: CPU of the box (control, edge)", "ms", (cg.cpu_ns()? - cpu) as f64 / 1e6, "");
    if std::fs::read_to_string(state.join("node.toml"))?.contains("obfs") {
        bail!("the node was enrolled with obfuscation: the suite's authentication probe speaks plain QUIC");
    }
    let node = cg.start(|| NodeProcess::start(&state))?;
    // The node holds the 1000 users once the last of them authenticates.
    let last = users.last().and_then(|u| u["id"].as_u64()).context("id")?;
    let probe = H3Client::connect(node.addr).await?;
    until_authenticated(node.addr, probe, &password_of(&call, last).await?, Instant::now()).await?;
    // P6: one change among 1000: until the edge serves it, and until the node lets the user
    // in, seen as a Hysteria2 client sees it: its authentication succeeds. The user's password
    // is read from control (what the link would give) right after the creation, on a QUIC
    // connection opened before, so the handshake is not counted but that read is.
    let probe = H3Client::connect(node.addr).await?;
    let (bytes, started) = (pushed().await?, Instant::now());
    let one = call(reqwest::Method::POST, "/users".into(), Some(json!({ "name": "p6-one" }))).await?;
    let id = one["id"].as_u64().context("id")?;
    let link = one["link"].as_str().context("link")?.to_owned();
    let password = password_of(&call, id).await?;
    let served = async {
        loop {
            if plain.get(&link).send().await.is_ok_and(|r| r.status() == 200) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("a new user did not reach the edge within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    let (served, let_in) = tokio::join!(served, until_authenticated(node.addr, probe, &password, started));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    t.add("P6 one new user among 1000: until the edge serves it", "ms", ms(served?), "");
    let metric = "P6 one new user among 1000: until the node lets it in";
    t.add(metric, "ms", ms(let_in?), "");
    t.note(
        metric,
        "measured: from the creation's call until a Hysteria2 authentication with the new password succeeds \
         (asked every ms; the password is read from control's preview first)",
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    t.add("P6 one new user: bytes pushed", "KiB", (pushed().await? - bytes) as f64 / 1024.0, "");
    tokio::time::sleep(Duration::from_secs(2)).await;
    t.add("P1 control + edge + node, 1000 users, idle (anon)", "MiB", cg.anon_bytes()? as f64 / MIB, "57 MiB");

    // Four users' clients; 16 streams each, echoing every 200 ms.
    let echo_at = tcp_echo().await?;
    let mut clients = Vec::new();
    for link in &links[..4] {
        clients.push(ProxyClient::sing_box(profile_outbound(link).await?)?);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let clients: Vec<&ProxyClient> = clients.iter().collect();
    // A stream echoes as soon as it is open: its rounds are counted from before the first opens.
    let held = Instant::now();
    let streams = Streams::hold(&clients, 16, echo_at).await?;

    // D: 300 links a second from 1000 addresses, a user added and one removed each second.
    let staying: Vec<String> = links[..100].iter().chain(&links[100 + storm_seconds as usize..]).cloned().collect();
    let target = Target::from_urls(&staying, SING_BOX_UA)?;
    let cpu = cg.cpu_ns()?;
    let storm = tokio::spawn(async move { load::open(&target, 300.0, Duration::from_secs(storm_seconds), 1000).await });
    let started = Instant::now();
    let mut changes = Vec::new();
    for second in 0..storm_seconds {
        let begun = Instant::now();
        call(reqwest::Method::POST, "/users".into(), Some(json!({ "name": format!("storm{second:03}") }))).await?;
        let gone = users[100 + second as usize]["id"].as_u64().context("id")?;
        call(reqwest::Method::DELETE, format!("/users/{gone}"), None).await?;
        changes.push(begun.elapsed().as_secs_f64() * 1000.0 / 2.0);
        tokio::time::sleep_until((started + Duration::from_secs(second + 1)).into()).await;
    }
    let storm = storm.await??;
    let used = (cg.cpu_ns()? - cpu) as f64 / 1e9 / storm.seconds;
    let others: u64 = storm.statuses.iter().filter(|(s, _)| **s != 200 && **s != 429).map(|(_, n)| n).sum();
    t.add(
        "D storm: subscription requests answered 200",
        "%",
        storm.ok() as f64 * 100.0 / storm.sent as f64,
        "all 300/s served",
    );
    t.add("D storm: p95 latency from intended send time", "ms", storm.answer_latency_us.p95 as f64 / 1000.0, "1 ms");
    t.add("D storm: p99 latency from intended send time", "ms", storm.answer_latency_us.p99 as f64 / 1000.0, "");
    changes.sort_by(f64::total_cmp);
    t.add("D storm: one user change through the API, p95", "ms", quantile(&changes, 0.95), "3-4 ms");
    t.add("D storm: the box's CPU busy", "%", used * 100.0, "");
    if storm.errors > 0 || others > 0 {
        t.note(
            "D storm: subscription requests answered 200",
            &format!("{} errors, {others} other statuses", storm.errors),
        );
    }
    // The storm's streams end with it. A stream stops at its first failure: one failure per
    // stream dropped. Each echoes 512 bytes, then waits 200 ms: about 5 rounds a second.
    let (rounds, dropped) = streams.finish().await?;
    let metric = "D storm: echo rounds a second on the 64 held streams";
    t.add(metric, "/s", rounds as f64 / held.elapsed().as_secs_f64(), "");
    t.note(
        metric,
        "measured: rounds echoed from opening the streams (just before the storm) to closing them (after \
         it); each stream echoes 512 bytes, then waits 200 ms: about 320 a second for 64 when nothing stalls",
    );
    t.add("D storm: streams dropped (of 64)", "", dropped.len() as f64, "0");

    // E: 64 streams held anew, control restarted among them; watched until 3 s after control
    // answers again.
    let held = Instant::now();
    let streams = Streams::hold(&clients, 16, echo_at).await?;
    control.stop()?;
    let started = Instant::now();
    let control = cg.start(|| ControlProcess::start(&dir, &env))?;
    let back = first_200(&https, &format!("{}/healthz", control.url), started).await?;
    t.add("E restart: control's first 200 after starting", "ms", back.as_secs_f64() * 1000.0, "0.2 s");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (rounds, dropped) = streams.finish().await?;
    let metric = "E restart: echo rounds a second on the 64 held streams";
    t.add(metric, "/s", rounds as f64 / held.elapsed().as_secs_f64(), "");
    t.note(
        metric,
        "measured: rounds echoed from opening the streams (just before control stops) to closing them, 3 s \
         after it answers again; about 320 a second for 64 when nothing stalls, a little more over so short \
         a window (each stream echoes once as it opens)",
    );
    t.add("E restart: streams dropped (of 64)", "", dropped.len() as f64, "0");
    control.stop()?;
    node.stop()?;
    edge.stop()?;
    Ok(())
}

/// Issue 23's rows at 1,000, 10,000 and (in a full run) 100,000 users: control, a native edge
/// and a node on one box, as an owner runs them, from the bulk creation to a restart.
async fn scale(t: &mut Table, quick: bool) -> Result<()> {
    let sizes: &[usize] = if quick { &[1_000, 10_000] } else { &[1_000, 10_000, 100_000] };
    for &users in sizes {
        scale_at(t, users).await?;
    }
    Ok(())
}

/// `n` with a comma between thousands.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A process's own anonymous memory, in MiB.
fn anon_of(pid: u32) -> Result<f64> {
    Ok(hearth_tests::proc_status_kib(pid, "RssAnon:")? as f64 / 1024.0)
}

async fn scale_at(t: &mut Table, n: usize) -> Result<()> {
    println!("scale: {n} users");
    let label = format!("scale, {} users", thousands(n));
    let temp = tempfile::tempdir()?;
    let cg = Cgroup::create(&format!("scale-{n}"), SUT_CPU, 4 * GIB)?;
    // The suite asks for the last link every millisecond until the edge has it: with limits
    // on, that would be a prober's doing, and end in the decoy.
    let limits_off = [("HEARTH_LIMITS", "off")];
    let OneBox { dir, env, edge, control, https, token, state } = one_box(&cg, temp.path(), &limits_off).await?;
    let call = |method: reqwest::Method, path: String, body: Option<Value>| {
        let (https, token, control) = (&https, &token, &control);
        async move { control.call(https, token, method, &path, body.as_ref()).await }
    };
    let pushed = || pushed_bytes(&https, &token, &control);
    let plain = hearth_tests::http().build()?;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;

    // The users, in bulk calls of 10,000 (the most one takes), until the edge serves the last.
    let names: Vec<String> = (0..n).map(|i| format!("user-{i:06}")).collect();
    let (bytes, started) = (pushed().await?, Instant::now());
    let mut users = Vec::with_capacity(n);
    for chunk in names.chunks(10_000) {
        let bulk = call(reqwest::Method::POST, "/users/bulk".into(), Some(json!({ "names": chunk }))).await?;
        users.extend(bulk["users"].as_array().context("users")?.iter().cloned());
    }
    let created = started.elapsed();
    let last_link = users.last().and_then(|u| u["link"].as_str()).context("a link")?.to_owned();
    until_200(&plain, &last_link, started, Duration::from_secs(600)).await?;
    t.add(&format!("{label}: bulk create (API calls)"), "s", created.as_secs_f64(), "");
    t.add(
        &format!("{label}: bulk create until the edge serves the last link"),
        "s",
        started.elapsed().as_secs_f64(),
        "",
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    t.add(&format!("{label}: first push, bytes"), "MiB", (pushed().await? - bytes) as f64 / MIB, "");
    t.add(&format!("{label}: control idle after the bulk create (anon)"), "MiB", anon_of(control.pid())?, "");

    // The node starts and takes the whole set: until the last user is let in.
    let started = Instant::now();
    let node = cg.start(|| NodeProcess::start(&state))?;
    let id = |i: usize| users[i]["id"].as_u64().context("id");
    let password = password_of(&call, id(n - 1)?).await?;
    let probe = loop {
        if let Ok(probe) = H3Client::connect(node.addr).await {
            break probe;
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the node did not answer QUIC within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let let_in = until_authenticated(node.addr, probe, &password, started).await?;
    t.add(&format!("{label}: a node starting, until the last user is let in"), "ms", ms(let_in), "");

    // A quota change: no node's set changes.
    let (bytes, mut latencies) = (pushed().await?, Vec::new());
    for i in 0..40u64 {
        let started = Instant::now();
        let user = id((i as usize * 7919) % n)?;
        call(reqwest::Method::PATCH, format!("/users/{user}"), Some(json!({ "quota": (i + 1) << 30 }))).await?;
        latencies.push(ms(started.elapsed()));
    }
    latencies.sort_by(f64::total_cmp);
    t.add(&format!("{label}: a quota change, p95"), "ms", quantile(&latencies, 0.95), "");
    tokio::time::sleep(Duration::from_secs(1)).await;
    t.add(
        &format!("{label}: a quota change, bytes pushed"),
        "KiB",
        (pushed().await? - bytes) as f64 / 1024.0 / 40.0,
        "",
    );

    // A disable: until the node refuses the user.
    let user = id(n / 2)?;
    let password = password_of(&call, user).await?;
    let probe = H3Client::connect(node.addr).await?;
    let (bytes, started) = (pushed().await?, Instant::now());
    call(reqwest::Method::PATCH, format!("/users/{user}"), Some(json!({ "enabled": false }))).await?;
    let refused = until_authentication(node.addr, probe, &password, started, false).await?;
    t.add(&format!("{label}: a disable, until the node refuses the user"), "ms", ms(refused), "");
    tokio::time::sleep(Duration::from_secs(1)).await;
    t.add(&format!("{label}: a disable, bytes pushed"), "KiB", (pushed().await? - bytes) as f64 / 1024.0, "");

    // The panel's users page, and a search, as the page asks them.
    for (page, path) in [
        ("the users page", "/users?page=1&per_page=50".to_owned()),
        ("a search", format!("/users?q=user-{:06}&page=1&per_page=50", n * 2 / 3)),
    ] {
        let mut times = Vec::new();
        for visit in 0..=20 {
            let started = Instant::now();
            call(reqwest::Method::GET, path.clone(), None).await?;
            if visit > 0 {
                times.push(ms(started.elapsed()));
            }
        }
        times.sort_by(f64::total_cmp);
        t.add(&format!("{label}: {page}, p95"), "ms", quantile(&times, 0.95), "");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    t.add(&format!("{label}: the native edge idle (anon)"), "MiB", anon_of(edge.pid())?, "");
    t.add(&format!("{label}: the node idle (anon)"), "MiB", anon_of(node.pid())?, "");

    // A restart: control's cold start, and its memory after.
    control.stop()?;
    let started = Instant::now();
    let control = cg.start(|| ControlProcess::start(&dir, &env))?;
    let cold = first_200(&https, &format!("{}/healthz", control.url), started).await?;
    t.add(&format!("{label}: control's cold start to first 200"), "ms", ms(cold), "");
    tokio::time::sleep(Duration::from_secs(3)).await;
    t.add(&format!("{label}: control idle after a restart (anon)"), "MiB", anon_of(control.pid())?, "");
    control.stop()?;

    // The state archive: control started again to archive a second after a change settles,
    // then one change, until the edge holds the archive made for it. The peak is the process's
    // own (VmHWM, reset just before the change: the file it writes is not in it).
    let mut archiving = env.clone();
    archiving.push(("HEARTH_ARCHIVE_AFTER_SECS", "1".into()));
    archiving.push(("HEARTH_LOG", "warn,hearth_control::archive=info".into()));
    let (control, log) = cg.start(|| ControlProcess::start_logged(&dir, &archiving))?;
    let pushed_archive = |within: Duration| {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match log.recv_timeout(left) {
                Ok(line) if line.contains("pushed the state archive") => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    };
    // What changed since the last archive is archived first (or nothing is).
    let _ = pushed_archive(Duration::from_secs(10));
    let before = hearth_tests::proc_status_kib(control.pid(), "VmRSS:")?;
    std::fs::write(format!("/proc/{}/clear_refs", control.pid()), "5").context("resetting control's peak")?;
    let user = id(n / 3)?;
    let quota = json!({ "quota": 7u64 << 30 });
    control.call(&https, &token, reqwest::Method::PATCH, &format!("/users/{user}"), Some(&quota)).await?;
    if !pushed_archive(Duration::from_secs(300)) {
        bail!("control did not push the state archive within 300 s of a change");
    }
    let peak = hearth_tests::proc_status_kib(control.pid(), "VmHWM:")?;
    t.add(
        &format!("{label}: control's peak above idle while it makes and pushes the state archive"),
        "MiB",
        peak.saturating_sub(before) as f64 / 1024.0,
        "",
    );
    control.stop()?;
    node.stop()?;
    edge.stop()?;
    Ok(())
}

fn git_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(hearth_tests::repo_root())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_owned()
}

fn markdown(t: &Table, reps: usize, commit: &str, when: &str) -> String {
    let mut out = String::new();
    out.push_str("# Benchmarks\n\n");
    out.push_str(&format!(
        "Made by `bash tests/bench` (commit `{commit}`, {when}, {reps} repetition{}) on this project's \
         machine: 2 cores, Debian, cgroup v1. Each system under test ran in a cgroup of its own on CPU 1 \
         (cpuset, a 100 % CPU quota, 1 GiB); in P6, D and E control, the edge and the node share one, as \
         on one box. The load generator (`hearth_tests::load`, tokio + hyper), the sing-box clients and \
         the helpers (the edge the node pulls from in the node rows, the servers the tunnels reach) ran on \
         CPU 0. CPU time and anonymous memory come from the cgroup, but for the in-process edge rows (this \
         program's own CPU time) and the node's set rows (the node's own log). \
         Rate limits were off by configuration in the P4 and P7 answer runs; each 429 row (P5, P7) \
         measures one limiter, the other set out of the way by configuration (a billion fetches), and \
         is named after the one it measures; D ran with the default limits. The peer is \
         sing-box {}'s Hysteria2 server with the same certificate, users and client; for each stream \
         count (and each path) the node, sing-box, the node with CUBIC and the node with quinn's BBR take turns in an order that rotates (each goes \
         first once a repetition), after one untimed transfer through each. Every row is warmed the same \
         way before it is timed: the HTTP rows by one request for each link and 2 s of their own load, \
         the panel's pages by one visit, the in-process edge by one pass over its links. A median of an \
         even count of values is the mean of the middle two. Mistgate's figures are its own publication \
         on another machine (BENCH.md): compare ratios and CPU time per request, not absolute rates. \
         R1 and R2 set the glibc build of the server programs (what every other row runs) beside the \
         static musl build of `deploy/build-release.sh`.\n\n",
        if reps == 1 { "" } else { "s" },
        "1.14"
    ));
    out.push_str(
        "| metric | Hearth median (min-max) | peer in the same run | ratio | target (issue) | met | Mistgate published | notes |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for (metric, row) in &t.rows {
        let ours = median(&row.ours).map_or("not run".to_owned(), |(m, lo, hi)| {
            if row.ours.len() > 1 {
                format!("{} {} ({}-{})", shown(m), row.unit, shown(lo), shown(hi))
            } else {
                format!("{} {}", shown(m), row.unit)
            }
        });
        let peer = median(&row.peer).map_or(String::new(), |(m, _, _)| format!("{} {}", shown(m), row.unit));
        let ratio = match (median(&row.ours), median(&row.peer)) {
            (Some((a, _, _)), Some((b, _, _))) if b > 0.0 => format!("{:.2}", a / b),
            _ => String::new(),
        };
        let (target, met) = target(metric, row, &t.rows);
        out.push_str(&format!(
            "| {metric} | {ours} | {peer} | {ratio} | {target} | {met} | {} | {} |\n",
            row.published, row.note
        ));
    }
    out.push_str(
        "\n## What these numbers do not say\n\n\
         - They come from one 2-core virtual machine whose neighbours make runs vary by a third; \
           the min-max range says how much. It is over the repetitions, except for a push of 1000 \
           users accepted, measured each time an edge starts (several times a repetition).\n\
         - The storm's latency percentiles are the load generator's (nearest rank); every other \
           p50 or p95 lies between the two nearest ranks.\n\
         - Loopback hides the network: no loss, no latency, no MTU limits. The tunnel figures \
           are CPU-bound on 2 cores (client, server and the traffic source share them); Gbit \
           moved per second of server CPU is the figure to compare. Both servers run BBR, \
           Hysteria2's choice when clients announce no bandwidth: the node its own \
           (`node/src/congestion/bbr.rs`, the default since #48), sing-box Chromium's. The rows \
           with quinn's BBR (`congestion = \"quinn-bbr\"`) show why the node has its own: \
           quinn's estimate is the largest rate between two consecutive acknowledgements, which \
           acknowledgements in bursts inflate, and its pacing rate and window follow it; on \
           loopback against sing-box's client it moved 0.79 of sing-box's throughput through one \
           stream at 0.80 of its bytes per CPU-second, and behind the lossy paths of B2 to B4 it \
           lost or had dropped a third to a half of what it sent (sing-box: what the path lost \
           at random, plus under 1 %). The CUBIC rows (`congestion = \"cubic\"`) show the node's \
           cost without a model of the path; B2 shows what CUBIC does on a path with random \
           loss.\n\
         - B2 to B4 run each server behind `hearth_tests::lossy`, a forwarder in this program \
           (CPU 0) that delays (B3: 37.5 ms each way and up to 25 ms more at random, packets \
           keeping their order), loses at random (the same packets every run) and queues at a \
           bottleneck (200 Mbit/s with a queue of one RTT; B4 30 Mbit/s with a queue of 10 ms; \
           the Brutal at 500 Mbit/s row 1 Gbit/s), each way; the sing-box client runs Brutal in \
           the Brutal rows (it announces the rate both ways). The forwarder counts what the \
           servers sent down: the share it lost at random or dropped from a full queue (what the \
           server had to send again), and how long the packets it delivered waited in the queue \
           (the RTT the server added). Its timer works to the millisecond; its sockets hold 4 MiB \
           each, and the rows count the datagrams any socket of the machine dropped for want of \
           buffer during the transfer (none is loss the path decided).\n\
         - The user changes (P3, one user change, D) are measured by the client over HTTPS on \
           loopback, so they include TLS and HTTP; every change is committed with a synced \
           write (SQLite WAL, `synchronous = FULL`) before the answer. In D the change shares \
           the one CPU with 300 link answers a second and with the pushes and pulls of the change \
           before it.\n\
         - P6 is seen from outside too: a new user is served once the edge answers its link (asked \
           every millisecond), and let in once a Hysteria2 authentication with its password succeeds \
           at the node (asked every millisecond on one QUIC connection, after the password is read \
           from control), so both include control's own work: its push to the edge, its answer to \
           the node's long poll.\n\
         - The node's set rows are the node's own timing (its log), from a pulled set's bytes in \
           hand to the swapped table: verify, decode, the write to disk (fsync), the diff against \
           the 10,000 users held and the swap. The wait for the pull is not in them; it is in the \
           cut row, where the node polls the edge every second.\n\
         - The panel rows are from the client, several API calls in parallel as the page makes \
           them: an upper bound of control's own time.\n\
         - P4 and P5 measure the native edge, whole server (HTTP and the kernel's loopback \
           included) and its logic alone (`Edge::handle` called in this program). P7 runs the \
           Worker in workerd, Cloudflare's runtime, on this machine: its CPU per answer includes \
           workerd's own HTTP and isolate work (the empty worker's row) and the Durable Object \
           calls, which on Cloudflare are billed apart; it is not the CPU time Cloudflare bills a \
           request.\n\
         - Memory is the anonymous memory of the cgroup: page cache (SQLite files, binaries) is \
           not counted, as it is not Hearth's to keep. The one exception is P8's first row: \
           cgroup v1 keeps a high watermark only of anonymous memory and page cache together, so \
           that row sets it back just before the sign-ins and subtracts the usage of that moment \
           (page cache on both sides); the row below it is anonymous memory alone, read every \
           millisecond.\n\
         - Mistgate's numbers are from a faster desktop CPU under WSL2; only ratios travel.\n",
    );
    out.push_str(NOT_MET);
    out
}

/// What the profiles of the rows still short of their targets showed (written with the
/// table, so that `--table` keeps it).
const NOT_MET: &str = "\n## The targets not met, and why\n\n\
Each was profiled; what the profile showed, and what would close the gap. The machine varies \
from day to day: the commit of the full run before this one (9b39048), run again within the \
hour of this one (`--only edge`), gave 32.4 us for P4 and 13.6-15.0 us for P5, where its own \
run a day before gave 21.0 and 7.8-8.0; its in-process rows moved the same way (8.8 to 12.9 \
us). Those rows moved with the machine, not with the code.\n\n\
- **P2, a first start (#4: < 50 ms; #54: < 40 ms, with 1,000 users too).** Met since a new \
  database is made in one step: it is made from `control/src/store/fresh.sql`, what every \
  migration leaves, where a first start replayed the 32 migrations (about 22 ms of SQLite's \
  own work on one CPU, strace of a first start). Since commit 4387b8c a start also computes no \
  argon2 hash (the dummy hash unknown logins are checked against was one: 19 MiB and two \
  passes, about 14 ms of CPU).\n\
- **P4, the native answer (#3, #23: < 20 us; #54: < 1.5 times the same server's health \
  route).** The health route, in the same run, is the HTTP floor: 7.40 us of server CPU an \
  answer (hyper, the kernel's loopback, no lookup), so #54's bound is 11.1 us; an answer costs \
  23.9, the floor and the edge's logic (10.8 us in process: the in-process row) and a body of \
  a few kilobytes where the health answer has a line. perf on the edge's CPU (commit cdb463e): \
  the kernel's TCP on loopback 38.6 %, malloc and free 11 %, rendering the sing-box profile \
  (serde_json) 8 %, opening the link's sealed snapshot (ChaCha20-Poly1305 and the token's \
  SHA-256) 5.5 %, hyper's parse and encode 5 %, the response's headers 2.6 %; the edge's logic \
  alone is the in-process row. Opening the snapshot is inherent (it is sealed per link, with \
  the link's token); caching rendered answers would keep snapshots in the clear in the edge's \
  memory, which the trust model does not want.\n\
- **P5, a native 429 (#3: < 5 us; #23 asked < 10 us).** The limiter's own work is under a \
  microsecond (the in-process rows); the rest is hyper and the kernel's loopback, what any \
  answer of this server costs on this machine: 7.97 and 8.07 us against 7.40 for the health \
  route in the same run, within #54's 1.1 times it.\n\
- **B1 to B4 against sing-box (#5, #17, #48).** The B rows were measured by `bash tests/bench \
  --only tunnel` and `--only lossy` at commit df0dbd9 (2026-12-07, the forwarder's sockets \
  holding 4 MiB), 3 repetitions each, and put in this table by hand. This machine's speed moves \
  from day to day (sing-box's one stream moved 3.26 Gbit/s on 2026-12-05, 1.79 on 2026-12-06 and \
  2.61 here): compare ratios within a run. B1: the node's BBR moves 1.01 to 1.73 times sing-box's \
  throughput at 1.41 to 1.54 times its bytes per CPU-second (1.08 to 1.97 and 1.27 to 1.39 at \
  commit 1674a17; in alternated quick runs the window handed to quinn's pacer at commit df0dbd9 \
  moved one stream 2.96 and 2.79 Gbit/s against 2.89 and 2.84 without it, within the runs' \
  spread); Brutal holds 491 of 500 and 982 of 1,000 Mbit/s announced by sing-box's client, as \
  sing-box's server does (491, 982). With mihomo's client both servers move less, and the same: \
  461 and 920 Mbit/s from the node against 461 and 922 from sing-box's server (mihomo reads \
  `down: 500` as 500,000,000 bits a second, as the node does): the client sets that figure, not \
  the server. B2 and B3 with the default controller: the node moves 0.98 to 1.02 of sing-box on \
  B2 (189, 185, 177 and 174 Mbit/s at 0, 1, 3 and 5 % loss against 189, 181, 180 and 171; at 3 % \
  173 to 180 over the repetitions) and 1.01 on B3 (162 Mbit/s against 160), at 2.0 to 2.3 times \
  its bytes per CPU-second, losing at most 0.5 points more on B2 (0.73 % against 0.35 at 0 %) and \
  nothing on B3, as sing-box; making up for random loss took B2 at 5 % from 0.90 to 0.98 of \
  sing-box at commit c347916, and queues more there (20.4 ms against 5.4 in this run). Until \
  commit df0dbd9 B3 moved 0.88 of sing-box (138 Mbit/s against 158 at commit 71ab87f; 0.90 at \
  commit 3b450f2) and B2 0.98 to 1.00: startup grew the rate about 1.25 times a round trip on B3, \
  not 2 (the node's trace, `HEARTH_SUITE_NODE_LOG=hearth_node::congestion=trace`). Counting in \
  each startup round what held a send back (a temporary count in `on_sent`) found neither the \
  window nor the budget: what was in flight stayed a quarter below the window in every round. It \
  was quinn's pacer: it paces at 1.25 windows per smoothed RTT, a burst of 2 ms of that at a \
  time, and sleeps until the next burst is due; tokio's timer wakes it about a millisecond late \
  (sleeps of 0.3 to 4 ms took 1.0 to 1.1 ms more on this machine), so it sends about 0.6 of its \
  rate, and handed a window of what is in flight and the budget's few packets it held the sender \
  to about 1.25 times what was in flight per RTT, the growth the trace showed. BBR now hands \
  quinn 1.5 RTTs of the pacing rate while the window and the budget leave room for a whole send \
  batch (ten packets, what quinn sends before it tells the controller), and the budget alone \
  holds the rate: B3 moved 162 to 164 Mbit/s (sing-box 156 to 160) where the code before moved \
  133 to 141 in the same hour, with one RTT of the rate handed over 158, and with two 160 but \
  losing 2.2 % of its packets (sing-box none). Startup then overshot more: its window counted the \
  ack aggregation since startup began, and the acknowledgements run ahead of an estimate \
  startup's growth leaves a round behind, so it ended with a third of a BDP over two BDPs in \
  flight, and B2 at 0 % lost 1.5 to 1.7 % of its packets (sing-box 0.5). Counted from the last \
  round that grew the estimate a quarter (as Chromium's BBR can, \
  `expire_ack_aggregation_in_startup`), it lost 0.75 and 0.98 % against 0.31 and 0.50 in \
  alternated runs, and B3 moved 163 Mbit/s against 158; without the ack aggregation in startup at \
  all, B3 fell to 148. The simulated link (`node/src/congestion/sim.rs`) now sleeps as quinn's \
  pacer does, a millisecond late: its jittery path held 124.5 of 200 Mbit/s without the window \
  handed to quinn and 200 with it (`jitter_does_not_hold_it_back` fails without it), where before \
  it paced faster than the node does and showed none of this. There a queue of 1 ms at 30 Mbit/s \
  (three packets) lets nearly nothing through (1.2 Mbit/s, with or without the change): quinn's \
  pacer wakes to send ten packets at a time, and the budget lets ten out at least (a budget that \
  let out fewer, clocked by the acknowledgements, is not tried); the policer case of the test is \
  2 ms now. Tried before the pacer was found, each under its limit: counting the ack aggregation \
  in startup's window took B3 from 0.78 to 0.81-0.91 (B2 at 0 % then loses 0.9 to 1.2 % of its \
  packets, against 0.5), and letting the first flight (sent before there is a rate) cost the \
  rate's budget nothing took it to 0.93: charged to it, those 32 packets held startup to a few \
  packets in flight for two round trips. BBR v1's startup window of 2.885 BDPs moved B3 1.10 \
  times sing-box in a quick run and lost 13 % of B2's packets, overflowing the queue of one BDP; \
  a startup window of two BDPs at the last round's mean RTT (at most 1.5 times the smallest) \
  moved B3 1.04 times sing-box but lost 2.1 % of B2's packets against 0.5, and held to rounds \
  without a standing queue it moved B3 0.80: neither kept. On the simulated link of \
  `node/src/congestion/sim.rs` (B3's path: 50 MB took 3.01 s, startup growing about 1.5 times \
  each 100 ms and cwnd-bound throughout), a startup window of two BDPs at the RTT the last round \
  that grew the estimate ran at (the smallest plus its jitter, at most half again) took 2.86 s \
  but overflowed the 100 ms queue at startup's end (2.1 % lost, sing-box loses none there), and \
  counting that jitter only in rounds whose smallest RTT stayed near the path's (no standing \
  queue) took 2.99 s; sampling the rate at every packet acknowledged, as Chromium's sampler does, \
  took 3.02 s: none kept. sing-quic's BBR paced at twice its estimate in every phase until \
  January 2026 (its `bandwidthForPacer` took the window's gain; commit c46312c made it the pacing \
  rate, and sing-box 1.13.21, measured here, carries sing-quic 0.6.5, which paces at the pacing \
  rate as the node does): this was once taken for the reason sing-box fills B3's pipe sooner. \
  Tried on 2026-12-06, none kept: pacing at twice the estimate in ProbeBW changed nothing on the \
  simulated B3 (2.99 s against 3.01: the time goes in startup, which there leaves at 2.19 s with \
  the pipe full from 1.2 s) and lost 39 % of the simulated B4's packets; a startup window of two \
  BDPs at the last round's mean RTT, with startup left after one round that did not grow the \
  estimate and whose smallest RTT stood a quarter above the path's (a standing queue), took the \
  simulated B3 to 2.84 s and the real one to 1.00 to 1.02 of sing-box (158.8 to 160 Mbit/s \
  against 157 to 160, three runs), but lost 2.4 to 3.0 % of B3's packets (sing-box none) and 1.8 \
  to 2.3 % of B2's at 0 % loss (sing-box 0.2 to 0.6); leaving startup on a standing queue of an \
  eighth, the mean RTT counted only in rounds without one, lost nothing on B3 but left startup on \
  jitter alone in two of three real runs (82 and 46 Mbit/s); the rate sample as Chromium's \
  sampler takes it (the lesser of the send rate, counting what was sent, and the acknowledgement \
  rate) changed nothing on the simulated paths. B4: the same goodput as sing-box (28.7 Mbit/s \
  against 28.8), 4.18 % lost or dropped against 3.24 % (within the bound of a point more; 4.00 \
  against 3.00 at commit 71ab87f, 6.0 against 4.1 at commit 3b450f2) and 6.07 ms of queueing \
  against 5.06: startup's last round overflows a 10 ms queue before the loss is seen (about 160 \
  of the 10,500 packets a run sends). A log of the node's rounds on B4 (a quick run) shows where \
  the rest goes: after startup's overflow (about 170 packets lost in two rounds), the pipe runs \
  below a BDP for two rounds while the losses are repaired, and the rounds after send at up to \
  1.35 times the estimate at a gain of 1.0 (250 packets in a round where the path carries 160), \
  which overflows the queue again (about 110 packets): quinn's pacer paces at a share of the \
  window over the RTT, so while little is in flight it sends below the rate, and what the rate's \
  budget banked meanwhile goes out once the window grows. Holding the budget to ten packets while \
  the window (or loss recovery) limits the sender, as first tried, changed nothing there and \
  slowed the simulated jittery path (187 Mbit/s against 200): not kept then. Built since (commit \
  c4c5f71) as a cap on what the budget banks between two events while what is in flight fills the \
  window the last event left (`Budget::hold_to`), it keeps the simulated jittery path at 200 \
  Mbit/s, and a trace of the gaps between acknowledgements on B4 shows what it stops: after a \
  recovery the acknowledgements stopped for a whole round trip (54 ms) while the recovery window \
  held the sender, the budget banked 102 packets meanwhile, and they left at once when the window \
  opened (105 lost in the next round). On B4, in alternated runs within an hour: 4.23 % lost \
  against 5.33 without it, and 5.05 in a later run (B4's loss moves by a point between runs of \
  the same code: 4.5 to 5.3 % in six runs of the commit before). What is left of that burst: a \
  recovery leaves a hole in the pipe, and a round later the acknowledgements stop for a round \
  trip (55 ms) while the window is open and the budget spent; the next acknowledgement finds a \
  round trip of the rate in the budget (120 packets), and it leaves at once (119 lost in the next \
  round; a quick run at commit 4077f14). Crediting the budget after a gap with no more than what \
  the gap's acknowledgements acknowledged and 2 ms of the rate (as a sender clocked by its \
  acknowledgements would) slowed the simulated jittery path to 182 Mbit/s and split two flows \
  59/41: not kept. A window of at least 0.8 of the pacing rate times the smallest RTT (so that \
  quinn's pacer, at 1.25 times the window over the RTT, never paces below the rate, and the \
  budget banks nothing) lost 4.60 % on B4 (4.18-4.78) with 6.14 ms of queueing, against 5.30 % \
  and 6.49 ms for the code without it in the same hour (sing-box 3.17 and 3.22 %), every \
  simulated-link test passing: not built: on the simulated link, whose sender paced as quinn does \
  but woke on time, it changed nothing on any path (a 30 Mbit/s path with a queue of 10, 5 or 1 \
  ms, acknowledgements every other packet or every 2, 5, 10 or 20 ms), so no test would fail \
  without it, and B4's loss moves by a point between runs of the same code. Learning the share of \
  random loss only from what the 0.75 phase sent (below the bottleneck's rate, so none of its \
  loss is the queue's) took the simulated 30 Mbit/s path with a 5 ms queue from 11.9 % lost to \
  3.1 % and one with a 1 ms queue (a policer) from 19.9 % to 4.4 %: there the queue overflows \
  before the RTT rises an eighth, so the overflow was taken for random loss and made up for, and \
  sending more lost more. But on B4 itself it lost 5.40 and 5.60 % against 4.86 and 4.87 for the \
  code before in the same hour (sing-box 2.9 to 3.3 %), B2's rows moving within their spread (1 \
  %: 0.99 of sing-box; 5 %: 0.95): not kept. Learning it instead from the lower half of the last \
  eight rounds without a standing queue (commit 71ab87f; random loss shows in every round, an \
  overflow in the one or two after a probe) took the simulated 5 ms and 1 ms queues to 2.8 and \
  6.0 % lost (9.5 and 19.9 before; 5.4 % with 3 % random loss on top, 16.3 before) while 5 % \
  random loss is still made up for (the 100 Mbit/s path holds 98.9 % of itself), and on B4 lost \
  4.30 % against 4.52 in alternated runs, B2 at 5 % moving within its spread (0.94 of sing-box \
  against 0.95). Still weak on the simulated link before it slept as quinn's pacer does: a 1 ms \
  queue with acknowledgements batched every 5 or 20 ms (11 to 15 Mbit/s of 30, 30 to 45 % lost: \
  each burst the acknowledgements release overflows the queue, and startup leaves in its second \
  round), which collapses to 0.5 Mbit/s with 3 % random loss on top. Brutal at 500 Mbit/s through \
  a 1 Gbit/s bottleneck 50 ms away: 402 Mbit/s against sing-box's 406 (218 against 283 at commit \
  71ab87f), both short of 500 where on loopback both hold it: the forwarder, one task of this \
  program on CPU 0 carrying every packet both ways, is the limit. With the kernel's default \
  socket buffers (208 KiB) it also let the kernel drop the servers' bursts before it read them, \
  102,485 datagrams in one run of that case, loss no shaped link decided and that its counts \
  missed (the node moved 0.88 of sing-box then); none since its sockets hold 4 MiB, and the rows \
  now count such drops. The node's Brutal queues more there (1.18 ms against 0.32): it sends in \
  quinn's pacing bursts, where quic-go paces packet by packet. With CUBIC the node moves more \
  than sing-box on a clean path; on random loss CUBIC collapses, as loss-based congestion control \
  does.\n\
- **P7, the Worker in workerd (#49: < 150 us an answer, < 100 us a 429). Met since commit \
  e5b8ef8:** 128 us an answer and 90.9 and 83.6 us the two 429s, against 50.3 us for the empty \
  JavaScript worker in the same run (`--only worker` at that commit, 2026-12-06, 3 repetitions; a \
  second run in the same hour: 131, 80.5 and 76.5 us against 49.5). A warm answer comes from the \
  isolate's memory (`hearth_edge::isolate`): no Durable Object call, where each answer made one \
  or two before (815 us an answer and 186 us a 429 then, commit f30979a). This machine's figures \
  move by a third from hour to hour, so each step below was measured against the one before it in \
  the same hour, runs alternated. (1) An entry module of Hearth's own (commit b054f9c): \
  worker-build's module exports the fetch handler as a class that workerd builds for every \
  request, wrapped in Proxies that start the wasm again after a crash; `edge/worker/js/entry.js` \
  (wrangler.toml's `main`) calls the same handler without building them, and through them only \
  once the wasm has crashed (worker-build's `__worker_init_state` says so), so that it is started \
  again first: the 429s went from 158 and 134 us to 134 and 113, the decoy from 116 to 95.6. (2) \
  A synchronous answer (commit 6a76d66): a warm fetch is answered by one call from the entry \
  module into Rust (`answer_held`, `edge/worker/src/held.rs`): the method, the URL and three \
  headers in, status, headers and body out, with no future, no workers-rs request or response and \
  no Durable Object; whatever only the full handler can do (a link memory does not hold, the feed \
  or the owner's settings due, counts to send to the shards, a device limit, any other route) \
  goes to it, with nothing counted twice: the network's budget and the link's count are peeked \
  before anything is counted (`Isolate::gate_peek`, `Isolate::hit_refused`, tested to say what \
  the counting calls then do); `worker_answers_warm_fetches_from_memory` counts the fetches \
  answered so (its health line; 0 of 20 without it). An answer went from 252 and 313 us to 193 \
  and 218. (3) A link over its limit refused from memory (commit 2f040ab): the isolate said \
  counts were due to the shards whenever a second had gone by since its last batch, whether or \
  not a fetch had been counted since; refusals count nothing, so once a link was over its limit \
  every fetch a second after the last batch went through the full handler (the per-link row cost \
  what the decoy did, 151 us). Counts are due now only when there are some (`Isolate::flush_due`; \
  its unit test, and `worker_refuses_a_link_over_its_limit_from_memory`, which says \"0 of 20 \
  refusals answered at once\" without the mend). (4) Built for speed (commit f624fc7): the \
  Worker's profile at opt-level 3 with wasm-opt -O3, where it was built for size (z, -Oz): \
  answers of 160, 197 and 176 us against 214, 277 and 254 in single runs alternated, the 429s \
  within their spread, the wasm 1.42 MB (0.53 gzipped) against 1.34 (0.48); a run of 3 \
  repetitions at that commit: 140, 91.7 and 104 us. (5) The headers as one string (commit \
  e5b8ef8): the synchronous answer hands them to JavaScript as one string, where each name and \
  value was a string of its own (decoded one by one), and the Response takes them as a plain \
  object, where a Headers object was built and then copied into the Response's own: two runs of 3 \
  repetitions alternated with the commit before gave 128 and 131 us an answer against 161 and \
  135, 90.9 and 80.5 us a per-link 429 against 115 and 92.6, and 83.6 and 76.5 us a per-network \
  429 against 92.1 and 92.9. What is left, from perf over one run with each row's window taken \
  apart (`perf record -k CLOCK_MONOTONIC -C 1`, `HEARTH_WORKERD_V8_FLAGS=--perf-basic-prof` names \
  the JIT's code): of an answer's CPU, 19 % is the wasm (ChaCha20-Poly1305 opening the snapshot, \
  SHA-256, rendering the profile, the URL's parse), 9 % the kernel and the rest workerd's own \
  (V8, tcmalloc, kj, its HTTP and the request's and response's objects); of a 429's, 5 % is the \
  wasm. Less of it per answer would take the snapshot opened and the profile rendered once per \
  change, which keeps snapshots in the clear in the edge's memory, which the trust model does not \
  want. Tried and not kept: reading the request's URL by splitting the runtime's serialization \
  instead of parsing it again, and the clock by `Date.now()` instead of a `Date` object (answers \
  204-207 us against 209, 429s 127-130 and 107-133 against 130 and 123); answering what memory \
  holds without a future but still through workers-rs (a resolved promise in place of \
  `#[event(fetch)]`: answer 232-239 us, 429s 148-149, the decoy 105); the headers as an array of \
  pairs in place of a Headers object (within the spread).\n\
- **D, a user change during the storm (#23: < 2 ms).** 3.99 ms (3.92-4.63) at commit \
  4c4a919, from 6.75 (4.49-7.31). Control's log of its write transactions during the storm \
  (`HEARTH_SUITE_CONTROL_LOG=warn,hearth_control::store=debug`, control of commit cdb463e) \
  showed each change committed with a synced write beside about three synced commits of the \
  edge's push bookkeeping a change, the node's pulls and its usage reports (about 17 synced \
  writes a second, to one disk), a change waiting for the writer up to 1.6 ms (p95) and \
  committing in 0.8-1.6 ms (p50) and 1.7-3.8 ms (p95). The push bookkeeping is now off the \
  synced path, each write shown safe to lose by a crash test (`tests/tests/control.rs`, \
  `a_push_is_found_again_after_a_crash_at_every_point`: control dies where the write is not \
  made yet, starts again, and the user created just before reaches the edge with no push \
  refused): batch numbers come from a block of 1,000 reserved with one synced write (the \
  variant that notes the number only after the push fails it: the edge refuses the push after \
  the restart, `version 3 seen before with different content`), and the note of what an edge \
  took is committed without waiting for the disk (`Db::write_unsynced`; the variant that notes \
  it before the push fails it: the user created before the crash never reaches the edge). That \
  took the row to 4.88 ms (4.37-5.04); every write on one thread (the scale note below) to \
  3.99. What is left is the change's own synced commit: in the same log of commit 4c4a919 (a \
  15 s storm) no change waited for the writer (0 us at p95 over 21 changes); each did 0.8 ms \
  of work (p50, 1.1 ms p95) and its commit, the WAL's fsync on this machine's disk with the \
  edge and the node on the same CPU, took 0.8 ms at p50 and 3.6 ms at p95. Under 2 ms at p95 \
  would take a disk that syncs faster, or acknowledging a change before it is on disk, which \
  Hearth does not do.\n\
- **Scale: a disable at 100,000 users until the node refuses the user (#23: < 50 ms).** Met in \
  some runs, not in others: one sample a run, 33 ms, 45 ms, 55 ms and 39 ms in the last four. What grows with the users is \
  the check that a delta makes the set control built, at both ends: the last full set decoded \
  and the new one encoded and hashed, about 13 ms at control and 13 ms at the node (the \
  manual's scale section); the rest is the push, the node's pull and its synced write, on the \
  one CPU the three programs share.\n\
- **Scale: 100,000 users created in bulk until the edge serves the last (#54: < 10 s).** Met in \
  some hours of this machine and not in others: 8.63, 8.75, 9.22, 9.53 and 9.67 s in five runs of \
  commit 0430a03 within one hour of 2026-12-06, and 13.2 to 13.8 s for the same code in a slower \
  hour later that day, beside 13.2 to 15.7 s for commit 76b9f88 (its 10,000 users took 1.08 to \
  1.56 s then, where the table's run took 0.83). Earlier: 10.13, 9.82 and 10.05 s in three runs \
  of `--only scale` at commit 02be51b (10.16, 10.03 and 9.96 s at 0a95902, before its search \
  index was filled a hundred users at a time), from 13.6 to 14.8 s (19.3 to 20.0 s the day before \
  that); the other scale rows above are the medians of three runs at commit 6179eb1 (10.5 s \
  then). perf over the bulk creation at 100,000 users (the whole machine, `perf record -a`) first \
  found half of control's own CPU in curve25519's Montgomery ladder: each snapshot's token was \
  wrapped for the owner's recovery key with an X25519 agreement of its own; the snapshots sealed \
  within a second now share one (`hearth_shared::seal::Wrapper`, every token under its own nonce, \
  the stored format unchanged), which took the row from 19-20 s to 14. perf on one call of 10,000 \
  users alone (a release build of control's own code, its writer thread) then found three wastes, \
  each mended with a test that fails without the mend: the search index was filled by a trigger \
  on each row, and SQLite opens a savepoint around every statement that could fail halfway, at \
  each of which FTS5 wrote out what it held, so every user added wrote and merged a segment of \
  the trigram index of its own (a tenth of the call); the users are now indexed by the code that \
  adds them, a bulk create's a hundred to a statement (`user_create::index_for_search`; migration \
  34 drops the trigger). The deletions each snapshot carries were read by a statement with a \
  bound `LIMIT`, which SQLite parses again every time the value is bound (it plans with it): once \
  for each user signed. Control's SQLite counted its memory, taking a global mutex at every \
  allocation (`SQLITE_DEFAULT_MEMSTATUS=0` in `.cargo/config.toml`). With each name of a bulk \
  call looked up once and its users' nodes read once too, the first three calls of 10,000 users \
  into one database went from 885-1047 ms each to 617-726 ms, and ten calls take 7.8 to 8.0 s \
  (each slower than the last as the indexes grow). A bulk call's users after its first, made with \
  its settings in its groups, take what their snapshots share from the first's (the nodes they \
  reach, their device limit and policy, no aliases: `publish::user::Alike`; signing each again \
  alone afterwards signs nothing new, tested): 10.5 to 10.0 s. perf over the whole run then put \
  71 % of the shared CPU in control's writer thread and 15 % in the native edge, an eighth of \
  whose time was SQLite parsing the same two statements for each of a push's 2,000 writes: they \
  are prepared once a push now. Tried and not kept: a 16 MiB page cache for a bulk call (11.3 s, \
  but control held 91 MiB right after, the cache's pages left in glibc's arena). What is left, on \
  the one CPU control, the edge and the node share: each snapshot's ed25519 signature (a fifth of \
  the writer's time; its point multiplication runs on the serial field arithmetic), SQLite \
  inserting each user into the six of the users table's indexes a new user's row is in and its \
  snapshot's envelope (a fifth, the kernel's copies of pages in and out of SQLite's 1 MiB cache \
  under it), reading back what a snapshot is made of (about a sixth: its row, nodes, devices, \
  aliases, the digest of its entries in node sets), and the edge storing 100 MiB. The node's \
  whole set, built at the end of each call, takes 11 to 90 ms of it (0.54 s over the ten calls): \
  signing a delta per call instead (the other idea of #54) would save at most that, and is not \
  built.\n\
- **Scale: control's cold start at 100,000 users (#54: < 60 ms).** Met: 46.0, 36.4, 32.4, \
  25.0, 56.3 and 37.6 ms over six runs (141 to 149 ms before). A start built every enrolled \
  node's whole set to see whether the edges it lists had moved (they move only with `edge_url` \
  in the configuration); it now compares what the sets list of the edges before and after the \
  configuration is settled, and builds the sets only when that changed \
  (`serve::tests::a_start_signs_nodes_sets_again_only_when_the_edges_they_list_moved`; the \
  hourly sweep still builds each set whole).\n\
- **Scale: control's peak while it makes and pushes the state archive (#54: < 64 MiB above \
  idle at 100,000 users).** Met: 9.29, 9.12 and 8.37 MiB at 100,000 users (a 48.5 MB archive) \
  and 7.62, 4.93 and 8.50 MiB at 10,000, three runs of commit 41ac89c; the same suite on the \
  commit before (22fae59) measured 184 and 40.8 MiB. The row: control started again to archive \
  a second after a change settles, its peak reset (`/proc/<pid>/clear_refs`), one change, and \
  the process's own peak (VmHWM, the file it writes is not in it) once its log says the edge \
  holds the archive. The archive used to be made whole in memory several times over (the \
  database read whole, the payload encoded, compressed, encrypted, signed into an envelope, \
  copied for each edge, and kept until every edge held it); now the database copy is read from \
  its file as it is written into the payload, which is compressed, sealed in chunks of 64 KiB \
  (`hearth_shared::seal::ArchiveSealer`, XChaCha20-Poly1305 in the STREAM construction) and \
  written to `archive.sealed` in the data directory as it goes; the envelope is signed around \
  the file (`Draft::sign_framed`, its length and SHA-256) and sent from it, a few chunks in \
  memory at a time. Archives sealed whole still open in a restore.\n\
- **Scale: control right after 100,000 creations (#23: < 32 MiB; #54: < 48 MiB).** Met since \
  commit 76b9f88: 19.6, 19.3, 22.1 and 22.2 MiB in four runs of `--only scale` (2026-12-06), \
  where the commit before measured 72.4, 69.4 and 72.8 MiB in three runs of the same hour; after \
  a restart control holds 3.8 to 4.2 MiB (3.9 before), and its cold start (32 to 46 ms) and its \
  archive's peak (4.7 to 9.1 MiB) stayed within the spread of the runs before. What control kept \
  was glibc's, not live data: an allocation shim loaded into control (`LD_PRELOAD`, calling \
  `malloc_info` when the suite read the row) found 89.7 MB in glibc's heaps right after the \
  creation, 85.5 MB of it free, most at the top of the writer's and the readers' arenas. glibc \
  gives the free top of an arena back to the system once it is past a threshold, and raises that \
  threshold (up to 64 MiB) to twice the largest block it has given back: a bulk create frees \
  buffers of megabytes (a node's set of 100,000 users, a push), after which tens of megabytes \
  stayed in each arena. `serve` now starts itself again once, as it starts, with \
  `glibc.malloc.trim_threshold=131072` added to `GLIBC_TUNABLES` (`control/src/allocator.rs`): \
  glibc reads its tunables only when a program starts, and setting them from within takes \
  `unsafe` code, which Hearth does not have. An operator's own setting of the threshold is kept, \
  the static musl build needs none, and `tests/tests/control.rs` \
  (`serve_runs_with_glibcs_arenas_trimmed`) reads the running control's environment (without the \
  second start it fails at its first case). A pinned threshold also stops glibc raising its mmap \
  threshold; the bulk create took 13.2 to 15.7 s with it and 13.2 to 13.8 s without in the same \
  hour (13.5 to 14.1 with the mmap threshold pinned at 32 MiB besides, not kept): within the \
  runs' spread. An earlier try of the same tunables (139 MiB) measured a control that never got \
  them: the suite starts control with an emptied environment. Before: 73.4, 77.2 and 73.6 MiB in \
  three runs of commit 6179eb1, from 151 to 188 MiB before every write transaction ran on one \
  thread of its own (`hearth-writer`: a bulk create's transactions ran on whichever thread of the \
  blocking pool was free, each of which kept an arena grown to a transaction's peak) and the bulk \
  answer was written straight from a struct (where it was a JSON value for each of a call's \
  10,000 users first). Tried and dropped before the cause was found: jemalloc (tikv-jemallocator, \
  purging in a background thread after 1 s: 44 MiB right after the creation, but 20 MiB after a \
  restart where glibc holds 4, and 4.7 MiB at 1,000 users against 3.4), mimalloc v2 (51 MiB after \
  a restart) and v3 (44 MiB idle at 1,000 users), glibc with one arena (`MALLOC_ARENA_MAX=1`: 180 \
  MiB), and cutting what one push reads at once from 16 to 4 MiB (101 MiB).\n";

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `--table <run.json>`: writes a full run's table again from its JSON (after a change to
    // the text around it), without running anything.
    if let Some(at) = args.iter().position(|a| a == "--table") {
        let path = args.get(at + 1).context("--table needs the JSON of a run")?;
        let record: Value = serde_json::from_slice(&std::fs::read(path)?)?;
        let t = Table::from_json(&record["rows"])?;
        let reps = record["repetitions"].as_u64().unwrap_or(1) as usize;
        let table = markdown(&t, reps, record["commit"].as_str().unwrap_or(""), record["when"].as_str().unwrap_or(""));
        let md_path = hearth_tests::repo_root().join("docs/benchmarks.md");
        std::fs::write(&md_path, table)?;
        println!("wrote {}", md_path.display());
        return Ok(());
    }
    let quick = args.iter().any(|a| a == "--quick");
    // `--only system,edge`: just those scenarios (for profiling one); such a run writes no table.
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .map(|at| args.get(at + 1).map(|s| s.split(',').map(str::to_owned).collect()).unwrap_or_default());
    let runs = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|n| n == name));
    hearth_tests::cgroup::require()?;
    // SAFETY of the environment: set before any thread reads it (the runtime's workers do not).
    if std::env::var("HEARTH_PROFILE").as_deref() != Ok("release") {
        bail!("run the suite through tests/bench (release binaries: HEARTH_PROFILE=release)");
    }
    // Counted before this process is pinned to one of them.
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    if !pin_self() {
        bail!("could not put the suite on CPU 0 (taskset, 2 CPUs needed)");
    }
    let reps = if quick { 1 } else { 3 };
    let (serve_secs, storm_secs) = if quick { (4, 15) } else { (10, 60) };
    let started = Instant::now();
    let load_before = loadavg();
    let mut t = Table::default();
    for rep in 0..reps {
        println!("== repetition {} of {reps}", rep + 1);
        if runs("control") {
            control(&mut t).await?;
        }
        if runs("binaries") {
            binaries(&mut t).await?;
        }
        if runs("edge") {
            edge(&mut t, serve_secs).await?;
        }
        if runs("scale") && rep == 0 {
            scale(&mut t, quick).await?;
        }
        if runs("tunnel") {
            tunnel(&mut t, quick, rep).await?;
        }
        if runs("lossy") {
            lossy(&mut t, quick, rep).await?;
        }
        if runs("node") {
            node(&mut t, quick).await?;
        }
        if runs("routing") {
            routing(&mut t, quick, rep).await?;
        }
        if runs("worker") {
            worker(&mut t, serve_secs).await?;
        }
        if runs("panel") {
            panel(&mut t, quick).await?;
        }
        if runs("system") {
            system(&mut t, storm_secs).await?;
        }
        if runs("abuse") {
            abuse(&mut t, quick).await?;
        }
        if runs("import") {
            import(&mut t).await?;
        }
    }
    if only.is_some() {
        println!("\n{}", markdown(&t, reps, "", ""));
        return Ok(());
    }
    let commit = git_commit();
    let when = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d %H:%M UTC")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let out = hearth_tests::repo_root().join("target/bench");
    std::fs::create_dir_all(&out)?;
    let rows = t.to_json();
    let record = json!({
        "commit": commit, "when": when, "quick": quick, "repetitions": reps,
        "parameters": { "sut_cpu": SUT_CPU, "memory_limit_bytes": GIB, "serve_seconds": serve_secs, "storm_seconds": storm_secs },
        "machine": { "cpus": cpus, "loadavg_before": load_before, "loadavg_after": loadavg() },
        "seconds": started.elapsed().as_secs(),
        "rows": rows,
    });
    let stamp = when.replace([' ', ':'], "-");
    let json_path = out.join(format!("bench-{stamp}{}.json", if quick { "-quick" } else { "" }));
    std::fs::write(&json_path, serde_json::to_vec_pretty(&record)?)?;
    let table = markdown(&t, reps, &commit, &when);
    let md_path =
        if quick { out.join("benchmarks-quick.md") } else { hearth_tests::repo_root().join("docs/benchmarks.md") };
    std::fs::write(&md_path, &table)?;
    println!("\n{table}\nwrote {} and {} in {} s", json_path.display(), md_path.display(), started.elapsed().as_secs());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_say_met_or_not_against_the_median_and_the_peer() {
        let mut t = Table::default();
        for v in [9.0, 30.0, 40.0] {
            t.add("P4 subscription, kept in memory (limits off): server CPU per answer", "us", v, "51 us");
        }
        for v in [18.0, 17.0, 50.0] {
            t.add(HEALTH_CPU, "us", v, "");
        }
        for (ours, peer) in [(1.0, 2.0), (3.0, 2.0), (3.0, 2.0)] {
            t.add("B1 tunnel, 1 stream: Gbit/s", "Gbit/s", ours, "");
            t.add_peer("B1 tunnel, 1 stream: Gbit/s", "Gbit/s", peer);
        }
        t.add("E restart: streams dropped (of 64)", "", 0.0, "0");
        t.add("P2 cold start to first 200, empty", "ms", 39.9, "330 ms");
        t.add("a row no issue set a number for", "ms", 1.0, "");
        // Path rows: lost at most a point above the peer's; B4's queueing at most the peer's.
        for (metric, ours, peer) in [
            ("B2 50 ms, 1 % loss, client's congestion control: packets lost or dropped on the way down", 2.9, 2.0),
            (
                "B4 30 Mbit/s, 10 ms queue, client's congestion control: packets lost or dropped on the way down",
                3.1,
                2.0,
            ),
            ("B4 30 Mbit/s, 10 ms queue, client's congestion control: queueing at the bottleneck, mean", 5.0, 5.0),
            ("B2 50 ms, 0 % loss, Brutal at 150 Mbit/s: queueing at the bottleneck, mean", 5.0, 1.0),
        ] {
            t.add(metric, "", ours, "");
            t.add_peer(metric, "", peer);
        }
        let verdict = |metric: &str| {
            let (_, row) = t.rows.iter().find(|(m, _)| m == metric).unwrap();
            target(metric, row, &t.rows)
        };
        // The median (30 us), not the best run (9 us), against 1.5 times the health route's
        // median (18 us, not its worst run: 50).
        let p4 = verdict("P4 subscription, kept in memory (limits off): server CPU per answer");
        assert_eq!(p4, ("< 1.5 x the same server's health route (#54)".to_owned(), "not met".to_owned()));
        assert_eq!(verdict("B1 tunnel, 1 stream: Gbit/s").1, "met");
        assert_eq!(verdict("E restart: streams dropped (of 64)").1, "met");
        assert_eq!(verdict("P2 cold start to first 200, empty").1, "met");
        assert_eq!(verdict("a row no issue set a number for"), (String::new(), String::new()));
        let lost = "at most sing-box's + 1 point (#48)".to_owned();
        assert_eq!(
            verdict("B2 50 ms, 1 % loss, client's congestion control: packets lost or dropped on the way down"),
            (lost.clone(), "met".to_owned())
        );
        assert_eq!(
            verdict("B4 30 Mbit/s, 10 ms queue, client's congestion control: packets lost or dropped on the way down"),
            (lost, "not met".to_owned())
        );
        assert_eq!(
            verdict("B4 30 Mbit/s, 10 ms queue, client's congestion control: queueing at the bottleneck, mean").1,
            "met"
        );
        // Only B4's queueing has a target; a B2 row's has none (not B2's goodput one either).
        assert_eq!(
            verdict("B2 50 ms, 0 % loss, Brutal at 150 Mbit/s: queueing at the bottleneck, mean"),
            (String::new(), String::new())
        );
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[5.0]), Some((5.0, 5.0, 5.0)));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some((2.5, 1.0, 4.0)));
        assert_eq!(median(&[10.0, 20.0]), Some((15.0, 10.0, 20.0)));
        // A target is judged on that median: 18 and 21 have 19.5, under 1.5 times 13.1 (19.65;
        // the upper middle one alone, 21, is not).
        let mut t = Table::default();
        for v in [21.0, 18.0] {
            t.add("P4 subscription, kept in memory (limits off): server CPU per answer", "us", v, "");
        }
        // No health row in the run: the target is shown, with no verdict.
        assert_eq!(target(&t.rows[0].0, &t.rows[0].1, &t.rows).1, "");
        t.add(HEALTH_CPU, "us", 13.1, "");
        assert_eq!(target(&t.rows[0].0, &t.rows[0].1, &t.rows).1, "met");
    }

    #[test]
    fn quantiles_lie_between_the_nearest_ranks() {
        let five = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile(&five, 0.0), 1.0);
        assert_eq!(quantile(&five, 0.25), 2.0);
        assert_eq!(quantile(&five, 0.5), 3.0);
        assert_eq!(quantile(&five, 1.0), 5.0);
        assert!((quantile(&five, 0.95) - 4.8).abs() < 1e-9);
        assert_eq!(quantile(&[10.0, 20.0], 0.5), 15.0);
        assert!((quantile(&[10.0, 20.0], 0.95) - 19.5).abs() < 1e-9);
        assert_eq!(quantile(&[7.0], 0.95), 7.0);
        assert!(quantile(&[], 0.5).is_nan());
        // p95 of 1..=100: rank 94.05 of 0..99, between 95 and 96.
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!((quantile(&hundred, 0.95) - 95.05).abs() < 1e-9);
    }

    #[test]
    fn a_table_written_from_a_runs_json_is_the_table_of_the_run() {
        let mut t = Table::default();
        t.add("P1 control idle, 1000 users (anon)", "MiB", 2.8, "");
        t.add("P1 control idle, 1000 users (anon)", "MiB", 2.9, "");
        t.add("B1 tunnel, 16 streams: Gbit/s", "Gbit/s", 1.2, "");
        t.add_peer("B1 tunnel, 16 streams: Gbit/s", "Gbit/s", 1.8);
        t.note("B1 tunnel, 16 streams: Gbit/s", "note: kept");
        let again = Table::from_json(&t.to_json()).unwrap();
        assert_eq!(markdown(&again, 2, "abc1234", "today"), markdown(&t, 2, "abc1234", "today"));
    }
}
