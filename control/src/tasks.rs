//! Control's background work: the sweeps that enforce expiry, reset traffic, republish usage
//! and renew credential sets (publishing to the edges and their usage drains are in
//! [`crate::outbox`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::app::{App, now};
use crate::error::Error;
use crate::publish::{self, REFRESH_BEFORE};
use crate::store::changes::Changes;
use crate::store::sweeps::{self, DueReset, FailingEdge, NodeSilence};

pub(crate) use crate::store::nodes::NODE_ONLINE_SECS;
/// Users one sweep transaction handles at most.
const SWEEP_BATCH: usize = 1000;

pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>, wait: Duration) -> bool {
    tokio::select! {
        _ = shutdown.wait_for(|stop| *stop) => true,
        () = tokio::time::sleep(wait) => false,
    }
}

/// Waits for a commit (`changes`, from `App::published`), at most `wait`; true on shutdown.
/// Tasks with nothing to do wait so, and read nothing meanwhile.
pub(crate) async fn nudged(
    shutdown: &mut watch::Receiver<bool>,
    changes: &mut watch::Receiver<u64>,
    wait: Duration,
) -> bool {
    tokio::select! {
        _ = shutdown.wait_for(|stop| *stop) => true,
        _ = changes.changed() => false,
        () = tokio::time::sleep(wait) => false,
    }
}

/// One pass of every sweep; returns how many users it republished.
pub(crate) fn sweep(
    conn: &rusqlite::Connection,
    app: &App,
    now: u64,
    usage: bool,
    renew: bool,
) -> Result<usize, Error> {
    let mut changes = Changes::default();
    let mut touched = 0;
    // Expired since the last publish.
    for id in sweeps::expired_users(conn, now, SWEEP_BATCH)? {
        changes.user(conn, id)?;
        touched += 1;
    }
    // Traffic resets that are due.
    for DueReset { id, reset } in sweeps::resets_due(conn, now, SWEEP_BATCH)? {
        let strategy = crate::store::users::parse_reset(&reset).unwrap_or(hearth_shared::wire::ResetStrategy::Never);
        let next = crate::clock::next_reset(strategy, now);
        // A reseller's user is reset only while their traffic allowance has room for it
        // (what it used counts against it); else it waits for the next period, used up.
        if !crate::store::admins::room_to_reset(conn, id)? {
            sweeps::postpone_reset(conn, id, next)?;
            crate::store::audit(
                conn,
                now,
                "control",
                "user.reset_skipped",
                &format!("user {id} ({})", crate::store::users::get(conn, id)?.name),
                "its reseller's traffic allowance has no room for a reset",
            )?;
            continue;
        }
        crate::store::users::spend(conn, id)?;
        sweeps::reset_traffic(conn, id, next)?;
        changes.user(conn, id)?;
        touched += 1;
    }
    if usage {
        for id in sweeps::usage_dirty(conn, SWEEP_BATCH)? {
            changes.user(conn, id)?;
            touched += 1;
        }
        // Nodes silent for long: who was on them no longer counts against anyone.
        touched += crate::nodes::expire_presence(conn, &app.signer, now)?;
        // Nodes whose cap month ended (a limited node reports nothing to start it).
        touched += crate::nodes::roll_quotas(conn, &app.signer, now)?;
        // Public certificates near their expiry: links pin the node's own again.
        touched += crate::nodes::sweep_certificates(conn, &app.signer, now)?;
        touched += tell_silences(conn, now)?;
        crate::store::events::prune(conn, now)?;
    }
    crate::publish::changes(conn, &app.signer, changes, now)?;
    if crate::releases::advance(conn, &app.signer, app.config.release_timeout_secs, now)? {
        touched += 1;
    }
    if renew {
        for name in sweeps::creds_expiring(conn, now + REFRESH_BEFORE)? {
            if let Ok(hearth_shared::wire::Stream::Creds(node)) = name.parse() {
                publish::publish_creds(conn, &app.signer, node, now, true)?;
            }
        }
    }
    Ok(touched)
}

/// Every node's set checked whole: a change signs a node's set from the last one by the users
/// it touched, so a change that forgot to say what it touched would otherwise stay out of the
/// set until the whole set is built again. Signs each set that differs; returns how many.
pub(crate) fn check_sets(conn: &rusqlite::Connection, app: &App, now: u64) -> Result<usize, Error> {
    let drifted = publish::all_nodes_changed(conn, &app.signer, now)?;
    if drifted > 0 {
        tracing::warn!(nodes = drifted, "node sets differed from the sets built from every user: signed again");
    }
    Ok(drifted)
}

/// Sweeper rounds (5 s each) in an hour.
const HOURLY: u64 = 720;

/// Whether a sweeper round checks every node's set whole ([`check_sets`]): once an hour, but
/// not as control starts. Building every set is the largest thing control does (at 100,000
/// users about 110 ms and tens of megabytes a node), and a start has nothing new to check: the
/// sets were signed by the changes themselves, in the same transactions.
fn checks_sets(round: u64) -> bool {
    round > 0 && round.is_multiple_of(HOURLY)
}

/// An edge failing this long is told failing (a push retried within seconds is not news).
pub(crate) const FAILING_AFTER: u64 = 120;

/// The news of a node's silence or return: offline, told now, when it was not told offline
/// (`offline_told` 0); else back online, told so (0 again). The event's kind, and what its
/// `offline_told` becomes.
fn silence_news(offline_told: u64, now: u64) -> (&'static str, u64) {
    if offline_told == 0 { ("node.offline", now) } else { ("node.online", 0) }
}

/// Tells of nodes gone silent (offline as the overview counts them) and back, and of edges
/// failing: each once, when it crosses.
fn tell_silences(conn: &rusqlite::Connection, now: u64) -> Result<usize, Error> {
    use crate::store::events::emit;
    let nodes = sweeps::silences(conn, now.saturating_sub(NODE_ONLINE_SECS))?;
    let mut told_now = nodes.len();
    for NodeSilence { id, name, last_seen, offline_told } in nodes {
        let (kind, told) = silence_news(offline_told, now);
        let data = serde_json::json!({ "node": { "id": id, "name": name }, "last_seen": last_seen });
        emit(conn, now, kind, &format!("node {id}"), &data)?;
        sweeps::set_offline_told(conn, id, told)?;
    }
    let edges = sweeps::failing_edges(conn, now.saturating_sub(FAILING_AFTER))?;
    told_now += edges.len();
    for FailingEdge { id, name, last_error: error, error_since: since } in edges {
        let data = serde_json::json!({ "edge": { "id": id, "name": name }, "error": error, "since": since });
        emit(conn, now, "edge.failing", &format!("edge {name}"), &data)?;
        sweeps::set_failing_told(conn, id, now)?;
    }
    Ok(told_now)
}

/// The primary edge, the healthy active edge after it and how long the primary has failed,
/// when it has failed for `after` seconds while that one takes pushes.
fn failover_due(
    conn: &rusqlite::Connection,
    after: u64,
    now: u64,
) -> Result<Option<(crate::store::edges::Edge, crate::store::edges::Edge, u64)>, Error> {
    Ok(failover_of(crate::store::edges::list(conn)?, after, now))
}

/// [`failover_due`] of `edges` (in their order, the first active one the primary).
fn failover_of(
    edges: Vec<crate::store::edges::Edge>,
    after: u64,
    now: u64,
) -> Option<(crate::store::edges::Edge, crate::store::edges::Edge, u64)> {
    use crate::store::edges::LinkState;
    let mut active = edges.into_iter().filter(|e| e.state == LinkState::Active);
    let primary = active.next()?;
    let failing_for = if primary.error_since > 0 { now.saturating_sub(primary.error_since) } else { 0 };
    if failing_for < after {
        return None;
    }
    active.find(|e| e.last_error.is_none() && e.last_push > 0).map(|next| (primary, next, failing_for))
}

/// Moves links off a primary edge that has failed for `edge_failover_secs` while another
/// active edge takes pushes: the primary is marked blocked, as the owner would (its links are
/// still listed and served where it answers, and every other edge names the new primary),
/// audited as control's act and told (`edge.failover`). Links move back only when the owner
/// marks it active again. Returns whether it moved them.
pub(crate) fn fail_over(conn: &rusqlite::Connection, app: &App, now: u64) -> Result<bool, Error> {
    use crate::store::edges::{self, LinkState};
    let Some((primary, next, failing_for)) = failover_due(conn, app.config.edge_failover_secs, now)? else {
        return Ok(false);
    };
    edges::set_state(conn, primary.id, LinkState::Blocked)?;
    let detail = format!("failing for {failing_for} s: links moved to {}", next.name);
    crate::store::audit(conn, now, "control", "edge.failover", &primary.name, &detail)?;
    let data = serde_json::json!({
        "edge": { "id": primary.id, "name": primary.name },
        "to": { "id": next.id, "name": next.name },
        "error": primary.last_error,
        "since": primary.error_since,
    });
    crate::store::events::emit(conn, now, "edge.failover", &format!("edge {}", primary.name), &data)?;
    crate::publish::edges_changed(conn, &app.signer, now)?;
    tracing::warn!(edge = %primary.name, to = %next.name, failing_for, "the primary edge keeps failing: links moved to the next one");
    Ok(true)
}

/// Runs the sweeps until shutdown: expiry and resets every 5 s, usage every minute, renewal
/// of credential sets every hour.
pub(crate) async fn sweeper(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let mut round: u64 = 0;
    loop {
        let usage = round.is_multiple_of(12);
        let renew = round.is_multiple_of(HOURLY);
        let state = app.clone();
        match app.db.write(move |tx| sweep(tx, &state, now(), usage, renew)).await {
            Ok(0) => {}
            Ok(touched) => {
                tracing::debug!(touched, "sweep republished users");
                app.changed();
            }
            Err(e) => tracing::error!(error = %e, "sweep failed"),
        }
        // Looked at with a read; the writer is taken only to act (and it looks again).
        let after = app.config.edge_failover_secs;
        if after > 0 && app.db.read(move |c| Ok(failover_due(c, after, now())?.is_some())).await.unwrap_or(false) {
            let state = app.clone();
            match app.db.write(move |tx| fail_over(tx, &state, now())).await {
                Ok(false) => {}
                Ok(true) => {
                    if let Err(e) = app.refresh_links() {
                        tracing::error!(error = %e, "reading the edges after a failover");
                    }
                    app.changed();
                }
                Err(e) => tracing::error!(error = %e, "checking the primary edge failed"),
            }
        }
        if checks_sets(round) {
            let state = app.clone();
            match app.db.write(move |tx| check_sets(tx, &state, now())).await {
                Ok(0) => {}
                Ok(_) => app.changed(),
                Err(e) => tracing::error!(error = %e, "checking the node sets failed"),
            }
        }
        round += 1;
        if stopped(&mut shutdown, Duration::from_secs(5)).await {
            return;
        }
    }
}

/// Notices commits made by other processes (the CLI on the same database) and wakes the
/// edges' workers and the nodes' long polls, so a user added from the shell reaches nodes at
/// once; an edge added from the shell gets its worker, and its links show.
pub(crate) async fn watch_external(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let conn = match app.db.connect() {
        Ok(conn) => Arc::new(std::sync::Mutex::new(conn)),
        Err(e) => {
            tracing::error!(error = %e, "cannot watch the database for outside changes");
            return;
        }
    };
    let mut last: Option<i64> = None;
    loop {
        let watcher = conn.clone();
        let version = tokio::task::spawn_blocking(move || {
            watcher.lock().expect("watcher lock").query_row("PRAGMA data_version", [], |row| row.get::<_, i64>(0))
        })
        .await;
        if let Ok(Ok(version)) = version {
            if last.is_some_and(|last| last != version) {
                let state = app.clone();
                if let Ok(Err(error)) = tokio::task::spawn_blocking(move || state.refresh_links()).await {
                    tracing::warn!(%error, "reading the edges");
                }
                app.changed();
            }
            last = Some(version);
        }
        if stopped(&mut shutdown, Duration::from_millis(500)).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::users::UserInput;
    use crate::testing::TestControl;
    use hearth_shared::wire::stream;

    #[test]
    fn sweeps_expire_reset_republish_and_renew() {
        let t = TestControl::new(false);
        let app = &t.app;
        let now = crate::app::now();
        let (node, creds_version) = app
            .db
            .write_blocking(|tx| {
                let node = crate::testing::enrolled_node(tx, &app.signer, now)?;
                let daily =
                    UserInput { name: Some("daily".into()), reset: Some("daily".into()), ..UserInput::default() };
                crate::users::create(tx, &app.signer, "test", &daily, now)?;
                let brief =
                    UserInput { name: Some("brief".into()), expires_at: Some(now + 10), ..UserInput::default() };
                crate::users::create(tx, &app.signer, "test", &brief, now)?;
                tx.execute("UPDATE users SET used_up = 5, used_down = 7, usage_dirty = 1 WHERE name = 'daily'", [])?;
                let version = crate::store::streams::envelope(tx, &stream::creds(node.id))?.map(|(v, _)| v).unwrap();
                Ok((node.id, version))
            })
            .unwrap();
        let status = |name: &'static str| {
            app.db
                .read_blocking(|c| {
                    Ok(c.query_row(
                        "SELECT status, used_up + used_down, usage_dirty FROM users WHERE name = ?1",
                        [name],
                        |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?, r.get::<_, bool>(2)?)),
                    )?)
                })
                .unwrap()
        };
        // Nothing is due yet: only the dirty usage is republished.
        let touched = app.db.write_blocking(|tx| sweep(tx, app, now, true, false)).unwrap();
        assert_eq!(touched, 1);
        assert_eq!(status("daily"), ("active".into(), 12, false));
        // Two days on: the brief user has expired and leaves the set; the daily one is reset;
        // the set, signed two days ago, is renewed when renewal runs.
        let later = now + 2 * 86_400;
        app.db.write_blocking(|tx| sweep(tx, app, later, false, false)).unwrap();
        assert_eq!(status("brief").0, "expired");
        assert_eq!(status("daily"), ("active".into(), 0, false));
        let set_after =
            |c: &rusqlite::Connection| crate::store::streams::envelope(c, &stream::creds(node)).map(|e| e.unwrap().0);
        let expired_version = app.db.read_blocking(set_after).unwrap();
        assert_eq!(expired_version, creds_version + 1, "the expiry re-signed the set");
        let far = later + publish::CREDS_LIFETIME - REFRESH_BEFORE + 60;
        app.db.write_blocking(|tx| sweep(tx, app, far, false, true)).unwrap();
        assert_eq!(app.db.read_blocking(set_after).unwrap(), expired_version + 1, "renewed before it expires");
        app.db.write_blocking(|tx| sweep(tx, app, far, false, true)).unwrap();
        assert_eq!(app.db.read_blocking(set_after).unwrap(), expired_version + 1, "renewed once");
    }

    /// A change to a user that reached no node's set (made behind control's back here) is
    /// signed by the hourly check of every set ([`check_sets`]), once.
    #[test]
    fn the_hourly_sweep_signs_a_set_that_drifted_from_the_database() {
        let t = TestControl::new(false);
        let app = &t.app;
        let now = crate::app::now();
        let node = app
            .db
            .write_blocking(|tx| {
                let node = crate::testing::enrolled_node(tx, &app.signer, now)?;
                crate::users::create(
                    tx,
                    &app.signer,
                    "test",
                    &UserInput { name: Some("kim".into()), ..UserInput::default() },
                    now,
                )?;
                Ok(node.id)
            })
            .unwrap();
        let latest = || {
            app.db
                .read_blocking(move |c| {
                    Ok(c.query_row(
                        "SELECT max(version) FROM streams WHERE name IN (?1, ?2)",
                        [stream::creds(node), stream::creds_delta(node)],
                        |r| r.get::<_, u64>(0),
                    )?)
                })
                .unwrap()
        };
        let before = latest();
        assert_eq!(app.db.write_blocking(|tx| check_sets(tx, app, now)).unwrap(), 0);
        assert_eq!(latest(), before, "nothing to sign while every set is as built");
        app.db.write_blocking(|tx| Ok(tx.execute("UPDATE users SET kick = kick + 1 WHERE name = 'kim'", [])?)).unwrap();
        app.db.write_blocking(|tx| sweep(tx, app, now, true, true)).unwrap();
        assert_eq!(latest(), before, "the sweeps themselves do not check every set");
        assert_eq!(app.db.write_blocking(|tx| check_sets(tx, app, now)).unwrap(), 1);
        assert!(latest() > before, "the drifted set is signed again");
        let signed = latest();
        assert_eq!(app.db.write_blocking(|tx| check_sets(tx, app, now)).unwrap(), 0);
        assert_eq!(latest(), signed, "once");
    }

    /// A node unheard of is told offline once, and online once it is heard of again.
    #[test]
    fn a_silence_is_told_offline_then_online() {
        assert_eq!(silence_news(0, 5000), ("node.offline", 5000));
        assert_eq!(silence_news(5000, 6000), ("node.online", 0));
    }

    /// Links fail over when the primary (the first active edge) has failed `after` seconds, to
    /// the first active edge after it that takes pushes without error; never otherwise.
    #[test]
    fn links_fail_over_to_the_next_healthy_active_edge() {
        use crate::store::edges::{Edge, LinkState};
        let edge = |id: i64, state: LinkState, error_since: u64, last_push: u64| Edge {
            id,
            name: format!("e{id}"),
            url: format!("https://e{id}.example"),
            api_prefix: None,
            push_token: None,
            link_base: None,
            state,
            position: id,
            pushed: 0,
            drained: 0,
            last_drain: 0,
            release: 0,
            archive: 0,
            added: 0,
            last_push,
            last_error: (error_since > 0).then(|| "refused".to_owned()),
            error_since,
            untrusted_forwarding: None,
            disk_full: 0,
        };
        let ids = |found: Option<(Edge, Edge, u64)>| found.map(|(from, to, since)| (from.id, to.id, since));
        let failing = edge(1, LinkState::Active, 1000, 900);
        let healthy = edge(3, LinkState::Active, 0, 1500);
        let at = |edges: Vec<Edge>, now| ids(failover_of(edges, 300, now));
        assert_eq!(at(vec![failing.clone(), healthy.clone()], 1300), Some((1, 3, 300)));
        assert_eq!(at(vec![failing.clone(), healthy.clone()], 1299), None, "not failing long enough");
        assert_eq!(at(vec![healthy.clone(), failing.clone()], 9999), None, "the primary is healthy");
        let blocked = edge(2, LinkState::Blocked, 0, 1500);
        let failing_too = edge(2, LinkState::Active, 1200, 1100);
        let never_pushed = edge(2, LinkState::Active, 0, 0);
        for between in [blocked.clone(), failing_too, never_pushed] {
            assert_eq!(at(vec![failing.clone(), between, healthy.clone()], 1300), Some((1, 3, 300)));
        }
        assert_eq!(at(vec![failing.clone()], 9999), None, "no edge to move to");
        assert_eq!(at(vec![blocked, failing, healthy], 1300), Some((1, 3, 300)), "a blocked edge is not the primary");
    }

    /// The sets are checked whole once an hour, never as control starts (round 0): building
    /// every node's set is the most work control does, and a start had nothing to change them.
    #[test]
    fn the_sets_are_checked_hourly_and_not_at_start() {
        let checked: Vec<u64> = (0..3 * HOURLY + 1).filter(|round| checks_sets(*round)).collect();
        assert_eq!(checked, [HOURLY, 2 * HOURLY, 3 * HOURLY]);
    }

    /// A user over quota is out of the node's set until the traffic reset the sweep runs when
    /// it is due; then the user is back in a newly signed set, and stays out of it before.
    #[test]
    fn a_due_reset_brings_an_over_quota_user_back_into_the_set() {
        let t = TestControl::new(false);
        let app = &t.app;
        let now = crate::app::now();
        let (node, capped) = app
            .db
            .write_blocking(|tx| {
                let node = crate::testing::enrolled_node(tx, &app.signer, now)?;
                let input = UserInput {
                    name: Some("capped".into()),
                    quota: Some(1000),
                    reset: Some("daily".into()),
                    ..UserInput::default()
                };
                let capped = crate::users::create(tx, &app.signer, "test", &input, now)?.id;
                Ok((node.id, capped))
            })
            .unwrap();
        // The set the node would pull: its version, and whether the user is in it.
        let held = || {
            app.db
                .read_blocking(|c| {
                    let (version, bytes) =
                        crate::store::streams::envelope(c, &stream::creds(node))?.expect("a signed set");
                    let envelope = hearth_shared::envelope::Envelope::decode(&bytes, usize::MAX).expect("an envelope");
                    let set = hearth_shared::wire::CredentialSet::decode(&envelope.body).expect("a set");
                    Ok((version, set.users().iter().any(|u| u.user == capped)))
                })
                .unwrap()
        };
        let status = || {
            app.db
                .read_blocking(|c| {
                    Ok(c.query_row("SELECT status FROM users WHERE id = ?1", [capped], |r| r.get::<_, String>(0))?)
                })
                .unwrap()
        };
        assert!(held().1, "a new user is in the set");
        // 1200 bytes counted (by a report, which marks usage to publish): over quota, out of the set.
        app.db
            .write_blocking(|tx| {
                tx.execute("UPDATE users SET used_down = 1200, usage_dirty = 1 WHERE id = ?1", [capped])?;
                sweep(tx, app, now, true, false)
            })
            .unwrap();
        assert_eq!(status(), "over_quota");
        let (cut, in_set) = held();
        assert!(!in_set, "over quota: out of the set");
        // Until the next midnight (UTC) no reset is due: still out. (The test may run at any
        // time of day: a fixed step such as an hour would cross midnight late in the day.)
        let midnight = crate::clock::next_reset(hearth_shared::wire::ResetStrategy::Daily, now);
        app.db.write_blocking(|tx| sweep(tx, app, midnight - 1, true, false)).unwrap();
        assert_eq!((status().as_str(), held()), ("over_quota", (cut, false)));
        // Past the next midnight the reset is due: usage back to zero, the user back in a set
        // signed again.
        app.db.write_blocking(|tx| sweep(tx, app, midnight + 60, true, false)).unwrap();
        assert_eq!(status(), "active");
        let (version, in_set) = held();
        assert!(in_set && version > cut, "the reset put the user back (set {cut} -> {version})");
    }
}
