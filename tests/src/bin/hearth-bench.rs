//! Detailed measurements beside the suite (`tests/bench`, `hearth-suite`).
//!
//! `hearth-bench node`: how long the node takes to apply a credential set of 10,000 users.
//!
//! `hearth-bench control`: control's cold start, idle memory with 1000 users, bulk and
//! one-by-one creates, the cost of one user change, and memory under ten sign-ins at once.
//!
//! `hearth-bench edge`: what one subscription answer, one 429 and one push cost the edge,
//! natively and as the Worker in workerd. It starts each edge as the tests do, pushes 1000
//! users, then keeps a fixed number of requests in flight for a few seconds and divides the
//! server process's CPU time (user + system, from /proc) by the answers it gave. Limits are
//! switched off by configuration for the answer runs, and on (one fetch per link) for the
//! 429 runs. Figures include the HTTP server; for the Worker, `wrangler dev` adds its proxy,
//! which is not counted (only `workerd` is).

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use hearth_shared::wire::SubToken;
use hearth_tests::control_sim::{ControlSim, demo_snapshot};
use hearth_tests::edge::{Backend, EdgeProcess};
use rand_core::OsRng;

const API: &str = "api-bench-0123456789";
const PUSH_TOKEN: &str = "bench-push-token-0123456789-0123456789";
const USERS: u64 = 1000;
const SECONDS: u64 = 8;
const IN_FLIGHT: usize = 16;

fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat[stat.rfind(')').context("stat")? + 2..].split(' ').collect();
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

fn ticks_per_second() -> u64 {
    // Linux reports /proc times in USER_HZ, 100 on every architecture Hearth runs on.
    100
}

/// Puts every thread of `pid` on `cpu` (BENCH.md: the system under test on one CPU, the
/// load on the other), when the machine has two CPUs or more and `taskset` is there.
fn pin(pid: u32, cpu: usize) -> bool {
    // Counted once, before this process is pinned to one of them.
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from));
    cpus >= 2
        && std::process::Command::new("taskset")
            .args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
}

struct Run {
    answers: u64,
    cpu_us_each: f64,
    per_second: f64,
}

/// The wrk script: cycles over the paths in `paths_file`, counts the answers with `status`.
const WRK_SCRIPT: &str = r#"
local paths = {}
for line in io.lines(os.getenv("HEARTH_BENCH_PATHS")) do paths[#paths + 1] = line end
local expected = tonumber(os.getenv("HEARTH_BENCH_STATUS"))
local threads = {}
function setup(thread) table.insert(threads, thread) end
local i = 0
function request()
  i = i + 1
  return wrk.format("GET", paths[(i % #paths) + 1], { ["User-Agent"] = "v2rayN/7.12.5" })
end
matched, other = 0, 0
function response(status, headers, body)
  if status == expected then matched = matched + 1 else other = other + 1 end
end
function done(summary, latency, requests)
  local m, o = 0, 0
  for _, t in ipairs(threads) do m = m + t:get("matched"); o = o + t:get("other") end
  io.write(string.format("hearth matched=%d other=%d\n", m, o))
end
"#;

/// Keeps `IN_FLIGHT` requests for `paths` in flight for `SECONDS` with wrk (a load generator
/// fast enough to keep the edge busy, so the figure is the cost of an answer at full load,
/// not of waking up for each one), and divides the edge's CPU time by the answers.
async fn load(edge: &EdgeProcess, paths: &[String], status: u16) -> Result<Run> {
    let dir = tempfile::tempdir()?;
    let (script, list) = (dir.path().join("load.lua"), dir.path().join("paths"));
    std::fs::write(&script, WRK_SCRIPT)?;
    std::fs::write(&list, paths.join("\n"))?;
    let pid = edge.server_pid()?;
    let before = cpu_ticks(pid)?;
    let started = Instant::now();
    let mut wrk = std::process::Command::new("wrk");
    wrk.args(["-t1", &format!("-c{IN_FLIGHT}"), &format!("-d{SECONDS}s"), "-s"])
        .arg(&script)
        .arg(&edge.url)
        .env("HEARTH_BENCH_PATHS", &list)
        .env("HEARTH_BENCH_STATUS", status.to_string());
    let output =
        tokio::task::spawn_blocking(move || wrk.output()).await?.context("running wrk (apt-get install wrk)")?;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_us = (cpu_ticks(pid)? - before) as f64 * 1e6 / ticks_per_second() as f64;
    let text = String::from_utf8_lossy(&output.stdout);
    let counts = text.lines().find_map(|line| line.strip_prefix("hearth matched="));
    let Some((matched, other)) = counts.and_then(|rest| rest.split_once(" other=")) else {
        bail!("wrk failed: {text}{}", String::from_utf8_lossy(&output.stderr));
    };
    let (answers, other): (u64, u64) = (matched.trim().parse()?, other.trim().parse()?);
    if other > 0 || answers == 0 {
        bail!("expected {status} only: {answers} did, {other} did not");
    }
    Ok(Run { answers, cpu_us_each: cpu_us / answers as f64, per_second: answers as f64 / elapsed })
}

async fn bench(backend: Backend, limits: bool) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut sim = ControlSim::new();
    let mut vars = sim.edge_vars(API, PUSH_TOKEN, &[]);
    if limits {
        vars.push(("HEARTH_LINK_LIMIT".to_owned(), "1".to_owned()));
        vars.push(("HEARTH_NETWORK_BURST".to_owned(), "100000000".to_owned()));
        vars.push(("HEARTH_NETWORK_PER_MINUTE".to_owned(), "100000000".to_owned()));
    } else {
        vars.push(("HEARTH_LIMITS".to_owned(), "off".to_owned()));
    }
    let state = dir.path().join(if backend == Backend::Native { "edge.db" } else { "worker" });
    let edge = EdgeProcess::start(backend, &state, &vars)?;
    // This process (and wrk) is on CPU 0 already, so the edge started seeing one CPU and
    // sized its runtime for one, as it would on a 1 vCPU machine.
    if !pin(edge.server_pid()?, 1) {
        eprintln!("note: could not pin the edge and the load to CPUs of their own; figures include contention");
    }
    let tokens: Vec<SubToken> = (0..USERS).map(|_| SubToken::generate(&mut OsRng)).collect();
    let items: Vec<_> = tokens.iter().zip(1..).map(|(token, user)| sim.snapshot(token, &demo_snapshot(user))).collect();
    let push = sim.push(&items);
    let http = hearth_tests::http().build()?;
    let started = Instant::now();
    let response =
        http.post(format!("{}/{API}/push", edge.url)).bearer_auth(PUSH_TOKEN).body(push.clone()).send().await?;
    let push_time = started.elapsed();
    if !response.status().is_success() {
        bail!("push refused: {}", response.text().await?);
    }
    let links: Vec<String> = tokens.iter().map(|t| format!("{}/s/{}", edge.url, t.to_link_form())).collect();
    if limits {
        // Use each link's one fetch, so that every request of the run is refused.
        for link in &links {
            http.get(link).send().await?.bytes().await?;
        }
    }
    if !limits {
        // The floor: what the same HTTP stack costs for `/healthz`, which touches nothing.
        let floor = load(&edge, &["/healthz".to_owned()], 200).await?;
        println!(
            "| {backend:?} | /healthz (HTTP floor) | {:.1} us | {:.0} | {} | |",
            floor.cpu_us_each, floor.per_second, floor.answers
        );
    }
    let paths: Vec<String> = tokens.iter().map(|t| format!("/s/{}", t.to_link_form())).collect();
    let run = load(&edge, &paths, if limits { 429 } else { 200 }).await?;
    println!(
        "| {:?} | {} | {:.1} us | {:.0} | {} | push of {USERS} users: {} bytes in {:.0} ms |",
        backend,
        if limits { "429 (link over its limit)" } else { "subscription answer (limits off)" },
        run.cpu_us_each,
        run.per_second,
        run.answers,
        push.len(),
        push_time.as_secs_f64() * 1000.0,
    );
    edge.stop()
}

/// The edge's own work per request, without HTTP or the kernel: `Edge::handle` called in this
/// process on one thread, over the links of 1000 users, for as many requests as fit in
/// `SECONDS`. This is the figure comparable with a Worker's CPU time, which does not count
/// the runtime's HTTP either.
async fn edge_logic(limits: bool) -> Result<()> {
    use hearth_edge::config::EdgeConfig;
    use hearth_edge::native::{Edge, Request};
    use http::HeaderMap;
    let dir = tempfile::tempdir()?;
    let mut sim = ControlSim::new();
    let root = sim.root.public().to_string();
    let config = EdgeConfig::from_vars(|name| match name {
        "HEARTH_ROOT_KEY" => Some(root.clone()),
        "HEARTH_PUSH_TOKEN" => Some(PUSH_TOKEN.to_owned()),
        "HEARTH_API_PREFIX" => Some(API.to_owned()),
        "HEARTH_LIMITS" => Some((if limits { "on" } else { "off" }).to_owned()),
        "HEARTH_LINK_LIMIT" => Some("1".to_owned()),
        "HEARTH_NETWORK_BURST" | "HEARTH_NETWORK_PER_MINUTE" => Some("100000000".to_owned()),
        _ => None,
    })?;
    let edge = Edge::open(config, &dir.path().join("edge.db"), 64 << 20, None).await?;
    let tokens: Vec<SubToken> = (0..USERS).map(|_| SubToken::generate(&mut OsRng)).collect();
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
    headers.insert("user-agent", "v2rayN/7.12.5".parse()?);
    headers.insert("host", "edge.example.net".parse()?);
    let paths: Vec<String> = tokens.iter().map(|t| format!("/s/{}", t.to_link_form())).collect();
    let expected = if limits { 429 } else { 200 };
    let mut answers = 0u64;
    let run = async |paths: &[String]| -> u64 {
        let mut n = 0u64;
        for path in paths {
            let request = Request { method: "GET", path, query: "", headers: &headers, client, body: &[] };
            let reply = edge.handle(&request).await;
            n += u64::from(reply.status == expected);
        }
        n
    };
    // Warm up: fills the link cache, and with limits on spends each link's one fetch.
    run(&paths).await;
    let pid = std::process::id();
    let before = cpu_ticks(pid)?;
    let started = Instant::now();
    let mut requests = 0u64;
    while started.elapsed() < Duration::from_secs(SECONDS) {
        answers += run(&paths).await;
        requests += paths.len() as u64;
    }
    let cpu_us = (cpu_ticks(pid)? - before) as f64 * 1e6 / ticks_per_second() as f64;
    if answers != requests {
        bail!("{} of {requests} requests did not get {expected}", requests - answers);
    }
    println!(
        "| Native, in process | {} | {:.1} us | {:.0} | {answers} | |",
        if limits { "edge logic, 429" } else { "edge logic, subscription answer" },
        cpu_us / answers as f64,
        answers as f64 / started.elapsed().as_secs_f64(),
    );
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

async fn first_200(http: &reqwest::Client, url: &str, started: Instant) -> Result<Duration> {
    loop {
        if let Ok(response) = http.get(format!("{url}/healthz")).send().await
            && response.status().is_success()
        {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("control did not answer within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn bench_control() -> Result<()> {
    use hearth_tests::control::{ControlDir, ControlProcess};
    use serde_json::json;
    let temp = tempfile::tempdir()?;
    let dir = ControlDir::init(&temp.path().join("control"))?;
    let http = dir.client()?;
    println!("| control | figure |");
    println!("|---|---|");

    let started = Instant::now();
    let control = ControlProcess::start(&dir, &[])?;
    let cold = first_200(&http, &control.url, started).await?;
    println!("| cold start to first 200, empty | {:.1} ms |", cold.as_secs_f64() * 1000.0);
    let token = control.setup(&http, "operate").await?;
    let post =
        |path: &str, body: serde_json::Value| http.post(control.api(path)).bearer_auth(&token).json(&body).send();

    let names: Vec<String> = (0..1000).map(|i| format!("bulk-{i:04}")).collect();
    let started = Instant::now();
    let answer = post("/users/bulk", json!({ "names": names })).await?;
    if !answer.status().is_success() {
        bail!("bulk create failed: {}", answer.text().await?);
    }
    println!("| create 1000 users, one bulk call | {:.0} ms |", started.elapsed().as_secs_f64() * 1000.0);

    let started = Instant::now();
    for i in 0..200 {
        let answer = post("/users", json!({ "name": format!("single-{i:03}") })).await?;
        if !answer.status().is_success() {
            bail!("create failed: {}", answer.text().await?);
        }
    }
    println!("| create 200 users, one call each | {:.0} ms |", started.elapsed().as_secs_f64() * 1000.0);

    // One user change: a quota change re-signs the snapshot and checks every node's set.
    let pid = control.pid();
    let before = cpu_ticks(pid)?;
    let mut latencies = Vec::new();
    for i in 0..300u64 {
        let started = Instant::now();
        let answer = http
            .patch(control.api(&format!("/users/{}", 1 + i % 1000)))
            .bearer_auth(&token)
            .json(&json!({ "quota": (i + 1) << 30 }))
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!("change failed: {}", answer.text().await?);
        }
        answer.bytes().await?;
        latencies.push(started.elapsed());
    }
    let cpu_us = (cpu_ticks(pid)? - before) as f64 * 1e6 / ticks_per_second() as f64 / 300.0;
    latencies.sort();
    println!(
        "| one user change over HTTPS (300 changes among 1200 users) | p50 {:.2} ms, p95 {:.2} ms; control CPU {:.0} us each |",
        percentile(&latencies, 0.5).as_secs_f64() * 1000.0,
        percentile(&latencies, 0.95).as_secs_f64() * 1000.0,
        cpu_us
    );

    tokio::time::sleep(Duration::from_secs(3)).await;
    println!(
        "| idle memory with 1200 users | {:.1} MiB anonymous, {:.1} MiB resident |",
        hearth_tests::proc_status_kib(pid, "RssAnon:")? as f64 / 1024.0,
        hearth_tests::proc_status_kib(pid, "VmRSS:")? as f64 / 1024.0
    );

    let peak_before = hearth_tests::proc_status_kib(pid, "VmHWM:")?;
    let statuses = control.wrong_sign_ins(&http, 10).await?;
    let refused = statuses.iter().filter(|s| **s == 429).count();
    println!(
        "| 10 sign-ins at once (argon2id 19 MiB, t=2) | peak memory +{:.1} MiB; {} answered 401, {refused} 429 |",
        (hearth_tests::proc_status_kib(pid, "VmHWM:")? - peak_before) as f64 / 1024.0,
        statuses.len() - refused
    );

    control.stop()?;
    let started = Instant::now();
    let control = ControlProcess::start(&dir, &[])?;
    let cold = first_200(&http, &control.url, started).await?;
    println!("| cold start to first 200, 1200 users | {:.1} ms |", cold.as_secs_f64() * 1000.0);
    control.stop()
}

/// `hearth-bench panel`: with 10,000 users, how long each page of the admin panel waits for
/// its data (the API calls it makes, in parallel as the page makes them), measured from the
/// client over HTTPS on loopback (so an upper bound of control's own time); and the size of
/// everything the browser downloads.
async fn bench_panel() -> Result<()> {
    use hearth_tests::control::{ControlDir, ControlProcess};
    use serde_json::json;
    let temp = tempfile::tempdir()?;
    let dir = ControlDir::init(&temp.path().join("control"))?;
    let http = dir.client()?;
    let control = ControlProcess::start(&dir, &[])?;
    let token = control.setup(&http, "operate").await?;
    let names: Vec<String> = (0..10_000).map(|i| format!("user-{i:05}")).collect();
    let answer =
        http.post(control.api("/users/bulk")).bearer_auth(&token).json(&json!({ "names": names })).send().await?;
    if !answer.status().is_success() {
        bail!("bulk create failed: {}", answer.text().await?);
    }
    println!("| admin panel, 10,000 users | p50 | p95 | bytes |");
    println!("|---|---|---|---|");
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
        for _ in 0..40 {
            let started = Instant::now();
            let answers =
                futures_join(calls.iter().map(|call| http.get(control.api(call)).bearer_auth(&token).send())).await;
            bytes = 0;
            for answer in answers {
                let answer = answer?;
                if !answer.status().is_success() {
                    bail!("{page}: {}", answer.text().await?);
                }
                bytes += answer.bytes().await?.len();
            }
            times.push(started.elapsed());
        }
        times.sort();
        println!(
            "| {page} | {:.1} ms | {:.1} ms | {bytes} |",
            percentile(&times, 0.5).as_secs_f64() * 1000.0,
            percentile(&times, 0.95).as_secs_f64() * 1000.0
        );
    }
    // What a first visit downloads: the page and its files, gzipped as browsers ask.
    let page_url = format!("{}/{}/", control.url, control.admin);
    let page_text = http.get(&page_url).header("accept-encoding", "identity").send().await?.text().await?;
    let mut urls = vec![page_url.clone()];
    for asset in page_text.split("assets/").skip(1).filter_map(|rest| rest.split('"').next()) {
        urls.push(format!("{}/{}/assets/{asset}", control.url, control.admin));
    }
    let (mut total, mut plain) = (0, 0);
    for url in &urls {
        total += http.get(url).header("accept-encoding", "gzip").send().await?.bytes().await?.len();
        plain += http.get(url).header("accept-encoding", "identity").send().await?.bytes().await?.len();
    }
    if urls.len() < 4 {
        bail!("the page names {} files, expected 3", urls.len() - 1);
    }
    println!("| everything a first visit downloads | | | {total} gzipped ({plain} plain) |");
    control.stop()
}

/// Sends requests together and waits for all (the panel's pages fetch their data in parallel).
async fn futures_join<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.expect("a request task panicked"));
    }
    out
}

async fn bench_node() -> Result<()> {
    use hearth_shared::sha256;
    use hearth_shared::wire::{CredEntry, CredentialSet};
    use hearth_tests::node::state_dir;
    let temp = tempfile::tempdir()?;
    let mut sim = ControlSim::new();
    let dir = temp.path().join("node");
    state_dir(&dir, &sim, 1)?;
    // Applying a set of 10,000 users: a fresh table is built beside the live one and swapped
    // in (the data path only ever waits for the swap). The node logs how long it took.
    let users: Vec<CredEntry> =
        (1..=10_000u64).map(|u| CredEntry { user: u, hash: sha256(format!("password-{u}").as_bytes()) }).collect();
    let item = sim.creds(&CredentialSet::new(1, users)?);
    std::fs::write(dir.join("creds.envelope"), item.envelope().context("an envelope")?)?;
    let mut applies = Vec::new();
    for _ in 0..5 {
        let mut child = std::process::Command::new(hearth_tests::binary("hearth-node")?)
            .args(["serve", "--state"])
            .arg(&dir)
            .env("HEARTH_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        let stderr = child.stderr.take().context("stderr")?;
        let line = {
            use std::io::BufRead as _;
            std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
                .find(|l| l.contains("serving the last good credential set"))
        };
        let _ = child.kill();
        let _ = child.wait();
        let micros: u64 = line
            .as_deref()
            .and_then(|l| l.split("micros=").nth(1))
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|m| m.parse().ok())
            .context("the node did not log its apply time")?;
        applies.push(micros);
    }
    applies.sort_unstable();
    println!();
    println!(
        "| applying a set of 10,000 users | median {:.2} ms (min {:.2}, max {:.2}) |",
        applies[2] as f64 / 1000.0,
        applies[0] as f64 / 1000.0,
        applies[4] as f64 / 1000.0
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let what = std::env::args().nth(1).unwrap_or_default();
    if what == "control" {
        return bench_control().await;
    }
    if what == "node" {
        return bench_node().await;
    }
    if what == "panel" {
        return bench_panel().await;
    }
    if what != "edge" {
        bail!("usage: HEARTH_PROFILE=release hearth-bench control | panel | node | edge [native|worker|workerd]");
    }
    if !pin(std::process::id(), 0) {
        eprintln!("note: could not pin the load to a CPU of its own; figures include contention");
    }
    println!("| edge | what | server CPU per answer | answers/s | answers | push |");
    println!("|---|---|---|---|---|---|");
    // An optional second word picks one edge: `native` or `worker`.
    let only = std::env::args().nth(2);
    for backend in [Backend::Native, Backend::Worker, Backend::Workerd] {
        if only.as_deref().is_some_and(|only| !format!("{backend:?}").eq_ignore_ascii_case(only)) {
            continue;
        }
        for limits in [false, true] {
            if backend == Backend::Native {
                edge_logic(limits).await?;
            }
            bench(backend, limits).await?;
        }
    }
    Ok(())
}
