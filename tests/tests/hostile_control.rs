//! A hostile or broken control against the node, over HTTPS with the certificate the node
//! pins: it answers an enrollment, a refusal of one, and a usage report with bodies far
//! longer than the answer can be (saying so, or chunked and never ending). The node reads
//! only what the answer can hold, hangs up, keeps its memory (the kernel's high-water mark of
//! the process) far below what the answer would take, and says why. `hearth-node enroll`
//! fails and leaves the state directory empty (an enrollment into it then succeeds); a
//! running node keeps serving its set to the real sing-box client and keeps the report
//! queued, sending the very same report again until control acknowledges it.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hearth_shared::envelope::{Audience, Envelope, Kind};
use hearth_shared::keys::{Role, SecretKey};
use hearth_shared::sha256;
use hearth_shared::wire::{self, CredEntry, CredentialSet, UsageAck, UsageReport, stream};
use hearth_tests::control_sim::ControlSim;
use hearth_tests::node::{NodeProcess, ProxyClient, fetch, http_server, metric, until_logged};
use hearth_tests::stand_in::{Answer, Body, RISE_KIB, Request, Seen, peak, stand_in_tls, until};

const API: &str = "api-hostile-control-0123456789";
/// The longest answer to an enrollment the node reads, and the longest refusal of one.
const ENROLLMENT_MAX: usize = 1024 * 1024;
const REFUSAL_MAX: usize = 16 * 1024;

/// How the stand-in control answers an enrollment.
#[derive(Clone, Debug)]
enum Enrollment {
    /// Accepted, with this body.
    Accepted(Body),
    /// Refused (403), with this body.
    Refused(Body),
}

/// The answer control gives a node it enrolls as node 1, with `sim`'s keys.
fn enrollment(sim: &ControlSim) -> Vec<u8> {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let records: Vec<String> = sim.key_records().iter().map(|record| hex(record)).collect();
    serde_json::to_vec(&serde_json::json!({
        "node": 1, "port": 4443, "obfs": null, "root_key": sim.root.public().to_string(),
        "key_records": records, "api_prefix": API, "edge_url": null,
    }))
    .unwrap()
}

/// Runs `hearth-node enroll` into `dir` against a stand-in control that answers as `answer`
/// says. Returns whether it succeeded and what it printed, once the stand-in saw it hang up
/// on a hostile body; fails at once when its memory rises over [`RISE_KIB`] from where it
/// was when it asked (it reads on), or when it runs on.
async fn enroll(dir: &Path, answer: Enrollment) -> (bool, String, Arc<Seen>) {
    let hostile = !matches!(answer, Enrollment::Accepted(Body::Bytes(_)));
    let (url, pin, seen) =
        stand_in_tls(move |request: &Request| match (request.path == format!("/{API}/enroll"), &answer) {
            (true, Enrollment::Accepted(body)) => Answer::new(200, body.clone()),
            (true, Enrollment::Refused(body)) => Answer::new(403, body.clone()),
            (false, _) => Answer::bytes(404, b"not here\n"),
        })
        .await;
    let mut child = std::process::Command::new(hearth_tests::binary("hearth-node").unwrap())
        .arg("enroll")
        .arg("--state")
        .arg(dir)
        .args(["--control", &url, "--api-prefix", API, "--token", "enroll-token-0123", "--control-pin", &pin])
        // A backtrace for its error would read the debug binary's symbols: tens of MiB that
        // are no part of reading the answer.
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let what = format!("{dir:?}: the enrollment");
    let (status, said) = seen.watch(&mut child, &what, RISE_KIB, Duration::from_secs(120), || None).await;
    let (kib, first) = (seen.peak_kib.load(Ordering::Relaxed), seen.first_kib.load(Ordering::Relaxed));
    eprintln!("enrollment: memory {first} KiB when it asked, {kib} KiB sampled; it said: {said}");
    assert!(first > 0, "the enrollment's memory was never sampled (it never asked control)");
    assert!(kib <= first + RISE_KIB, "the enrollment's memory rose to {} MiB from {} MiB", kib / 1024, first / 1024);
    assert_eq!(seen.whole(), Vec::<String>::new(), "the enrollment read a hostile answer whole");
    if hostile {
        let started = Instant::now();
        while seen.hung_up("enroll") == 0 {
            assert!(started.elapsed() < Duration::from_secs(30), "the stand-in never saw the enrollment hang up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    (status.success(), said, seen)
}

/// The names of the files in `dir`, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[tokio::test]
async fn an_enrollment_reads_an_oversized_or_endless_answer_from_control_only_up_to_its_cap_and_leaves_nothing() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("node");
    let answer = format!("an answer over {ENROLLMENT_MAX} bytes, more than an enrollment answer can be");
    let refusal = format!("an answer over {REFUSAL_MAX} bytes, more than control's refusal can be");
    let cases = [
        ("an oversized answer", Enrollment::Accepted(Body::Oversized), &answer),
        ("an endless answer", Enrollment::Accepted(Body::Endless), &answer),
        ("an oversized refusal", Enrollment::Refused(Body::Oversized), &refusal),
        ("an endless refusal", Enrollment::Refused(Body::Endless), &refusal),
    ];
    for (what, answer, reason) in cases {
        let (enrolled, said, _) = enroll(&dir, answer).await;
        assert!(!enrolled, "{what}: the enrollment succeeded: {said}");
        assert!(said.contains(reason.as_str()), "{what}: the error does not name the cap: {said}");
        let expected =
            if what.contains("refusal") { "control refused the enrollment (403" } else { "control's answer" };
        assert!(said.contains(expected), "{what}: {said}");
        // Nothing: neither control's answer nor the keys made for it (which would stop an
        // enrollment into the directory again).
        assert_eq!(files(&dir), Vec::<String>::new(), "{what}: the enrollment left a half-written node");
    }

    // Control answers well: the node enrolls into the same directory.
    let sim = ControlSim::new();
    let (enrolled, said, _) = enroll(&dir, Enrollment::Accepted(Body::Bytes(enrollment(&sim)))).await;
    assert!(enrolled, "the enrollment failed after the hostile answers: {said}");
    assert!(said.contains("Enrolled as node 1"), "{said}");
    let settings = std::fs::read_to_string(dir.join("node.toml")).unwrap();
    assert!(settings.contains("node = 1\n") && settings.contains(API), "{settings}");
    assert!(dir.join("trust.bin").exists(), "the enrollment kept no trust");
}

/// What the stand-in control answers node 1 with.
struct Control {
    sim: ControlSim,
    /// The set offered to a node that holds none (the node starts with it).
    set: Vec<u8>,
    /// A hostile answer to usage reports, in place of the acknowledgement.
    usage: Option<Body>,
    /// The usage reports received: their sequence number, their bytes, and whether they got
    /// a hostile answer.
    reports: Vec<(u64, Vec<u8>, bool)>,
}

fn control_answer(control: &mut Control, request: &Request) -> Answer {
    match request.path.strip_prefix(&format!("/{API}/nodes/1")).unwrap_or_default() {
        // A long poll: nothing new after a second.
        "/creds" if request.param("after").is_some_and(|after| after != "0") => {
            Answer::bytes(204, b"").after(Duration::from_secs(1))
        }
        "/creds" => Answer::bytes(200, &control.set),
        "/usage" => {
            let envelope = Envelope::decode(&request.body, Kind::UsageReport.max_len()).unwrap();
            let report = UsageReport::decode(&envelope.body).unwrap();
            control.reports.push((report.seq, request.body.clone(), control.usage.is_some()));
            match &control.usage {
                Some(body) => Answer::new(200, body.clone()),
                None => {
                    let ack = UsageAck { node: 1, seq: report.seq };
                    let draft = control.sim.draft(Kind::UsageAck, stream::usage_ack(1), report.seq, Audience::Node(1));
                    Answer::bytes(200, &draft.sign(wire::encode(&ack), &[&control.sim.signing]).encode())
                }
            }
        }
        _ => Answer::bytes(404, b"not here\n"),
    }
}

/// The sequence numbers of the reports in the node's usage queue, and the last one control
/// acknowledged.
fn queue(dir: &Path) -> (Vec<u64>, u64) {
    let mut queued: Vec<u64> = std::fs::read_dir(dir.join("usage"))
        .map(|entries| {
            entries.filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".report")?.parse().ok()).collect()
        })
        .unwrap_or_default();
    queued.sort_unstable();
    let acked = std::fs::read_to_string(dir.join("usage.acked")).ok().and_then(|s| s.trim().parse().ok());
    (queued, acked.unwrap_or(0))
}

#[tokio::test]
async fn a_node_keeps_serving_and_keeps_its_usage_report_through_oversized_and_endless_answers_from_control() {
    let temp = tempfile::tempdir().unwrap();
    let mut sim = ControlSim::new();
    let alice = CredentialSet::new(1, vec![CredEntry::new(1, sha256(b"alice-pw"))]).unwrap();
    let set = sim.creds(&alice).envelope().unwrap().to_vec();
    let control = Arc::new(Mutex::new(Control { sim, set: set.clone(), usage: None, reports: Vec::new() }));
    let answers = control.clone();
    let (url, pin, seen) = stand_in_tls(move |request| control_answer(&mut answers.lock().unwrap(), request)).await;
    let dir = temp.path().join("node");
    let settings = format!(
        "control_url = \"{url}\"\ncontrol_pin = \"{pin}\"\napi_prefix = \"{API}\"\nedge_poll_secs = 1\nreport_secs = 1\n"
    );
    hearth_tests::node::state_dir_with(&dir, &control.lock().unwrap().sim, 1, &settings).unwrap();
    hearth_tests::node::save_node_key(&dir, &SecretKey::generate(Role::Node, &mut rand_core::OsRng).unwrap()).unwrap();
    std::fs::write(dir.join("creds.envelope"), &set).unwrap();
    let (node, log) = NodeProcess::start_logged(&dir).unwrap();
    let metrics = node.metrics_url().unwrap();
    let web = http_server(b"through the node".to_vec()).await.unwrap();
    let alice = ProxyClient::sing_box(node.outbound("alice-pw")).unwrap();
    let still_serving = |what: &'static str| {
        let (alice, metrics, dir) = (&alice, &metrics, &dir);
        async move {
            assert_eq!(fetch(alice, web).await.unwrap(), b"through the node", "alice was cut off by {what}");
            assert_eq!(metric(metrics, "hearth_node_set_version").await.unwrap(), 1, "{what} changed the set held");
            assert_eq!(hearth_tests::node::held_set(dir).unwrap().1, vec![1], "{what} changed the set on disk");
        }
    };

    // Alice's bytes make a report, which control acknowledges; the node pulls from control.
    still_serving("nothing").await;
    until("a report acknowledged and two pulls answered", node.pid(), u64::MAX, || {
        let (queued, acked) = queue(&dir);
        queued.is_empty() && acked >= 1 && seen.requests("creds") >= 2
    })
    .await;
    let baseline = peak(node.pid());
    seen.pid.store(node.pid(), Ordering::Relaxed);
    let bound = baseline + RISE_KIB;

    let said = format!("an answer over {} bytes, more than an acknowledgement can be", Kind::UsageAck.max_len());
    for (what, body) in [("an oversized answer", Body::Oversized), ("an endless answer", Body::Endless)] {
        let before = seen.hung_up("usage");
        while log.try_recv().is_ok() {}
        control.lock().unwrap().usage = Some(body);
        // Another report, which control answers with a hostile body each time it is sent.
        still_serving(what).await;
        until(&format!("the node hung up on {what} to the same report twice"), node.pid(), bound, || {
            seen.hung_up("usage") >= before + 2
        })
        .await;
        let line = until_logged(&log, &said, Duration::from_secs(60)).await.unwrap_or_else(|e| panic!("{what}: {e:#}"));
        assert!(line.contains("refused control's answer to a usage report; it stays queued"), "{what}: {line}");
        let answered: Vec<u64> =
            control.lock().unwrap().reports.iter().filter(|(_, _, hostile)| *hostile).map(|(seq, _, _)| *seq).collect();
        let (queued, acked) = queue(&dir);
        assert!(
            answered.iter().all(|seq| queued.contains(seq) && *seq > acked),
            "{what}: {answered:?} sent, {queued:?} queued"
        );
        assert!(metric(&metrics, "hearth_node_usage_reports_queued").await.unwrap() >= 1, "{what}");
        still_serving(what).await;
    }

    // Control answers well again: the very reports it answered with hostile bodies are sent
    // again and acknowledged, and the queue empties.
    control.lock().unwrap().usage = None;
    let hostile: Vec<(u64, Vec<u8>)> = control
        .lock()
        .unwrap()
        .reports
        .iter()
        .filter(|(_, _, hostile)| *hostile)
        .map(|(seq, bytes, _)| (*seq, bytes.clone()))
        .collect();
    let last = hostile.iter().map(|(seq, _)| *seq).max().unwrap();
    until("the queued reports acknowledged", node.pid(), bound, || {
        let (queued, acked) = queue(&dir);
        queued.is_empty() && acked >= last
    })
    .await;
    let reports = control.lock().unwrap().reports.clone();
    for (seq, bytes) in &hostile {
        assert!(
            reports.iter().any(|(s, b, hostile)| s == seq && b == bytes && !hostile),
            "report {seq} was not sent again as it was first"
        );
    }
    assert_eq!(metric(&metrics, "hearth_node_usage_reports_queued").await.unwrap(), 0);
    still_serving("the hostile answers").await;

    seen.check_memory("the node", node.pid(), baseline);
    node.stop().unwrap();
}
