//! `hearth-node supervise`: runs `hearth-node serve` and keeps it running, which is what makes
//! self-updates safe.
//!
//! - The server exits with [`update::RESTART_CODE`] after swapping in a new binary: it is
//!   started again at once (the new binary).
//! - A new binary that exits three times, or does not prove itself healthy within
//!   `update_health_secs` + `update_grace_secs` (60 s + 60 s by default), is replaced by the
//!   previous one (`<exe>.prev`), and the reason is recorded for control.
//! - Any other exit is restarted after a pause that grows to 30 s while it keeps failing.
//!
//! systemd runs this (see `deploy/`); SIGTERM reaches the whole service, and the supervisor
//! waits for the server to finish its graceful stop before it exits.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use crate::state::StateDir;
use crate::update;

enum Outcome {
    Exited(std::process::ExitStatus),
    Unhealthy,
    Stop,
}

/// Asks the server to stop as SIGTERM would (the supervisor alone got the signal).
fn terminate(child: &tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    }
}

/// Supervises the server of the state directory `dir` until SIGTERM.
pub(crate) fn run(dir: &Path) -> Result<()> {
    let exe = update::executable()?;
    let state = StateDir::new(dir);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        // `systemctl reload`: passed on to the server (it renews its public certificate now).
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let (mut failures, mut pause) = (0u32, Duration::from_secs(1));
        loop {
            let within = state.settings().map_or(120, |s| s.update_health_secs.saturating_add(s.update_grace_secs));
            let proving = update::pending(&state).is_some();
            let started = Instant::now();
            let mut child = tokio::process::Command::new(&exe)
                .arg("serve")
                .arg("--state")
                .arg(dir)
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {}", exe.display()))?;
            let limit = tokio::time::sleep(Duration::from_secs(within));
            tokio::pin!(limit);
            let mut proving = proving;
            let outcome = loop {
                break tokio::select! {
                    status = child.wait() => Outcome::Exited(status?),
                    _ = term.recv() => Outcome::Stop,
                    _ = tokio::signal::ctrl_c() => Outcome::Stop,
                    _ = hup.recv() => {
                        if let Some(pid) = child.id() {
                            let _ = std::process::Command::new("kill").args(["-HUP", &pid.to_string()]).status();
                        }
                        continue;
                    }
                    () = &mut limit, if proving => {
                        // Kept in time (the server confirmed it): nothing to roll back.
                        if update::pending(&state).is_none() {
                            proving = false;
                            continue;
                        }
                        Outcome::Unhealthy
                    }
                };
            };
            match outcome {
                Outcome::Stop => {
                    terminate(&child);
                    if tokio::time::timeout(Duration::from_secs(20), child.wait()).await.is_err() {
                        let _ = child.kill().await;
                    }
                    return Ok(());
                }
                Outcome::Unhealthy => {
                    let _ = child.kill().await;
                    update::roll_back(&state, &exe, &format!("the new binary was not healthy within {within} s"))?;
                    failures = 0;
                }
                Outcome::Exited(status) if status.code() == Some(update::RESTART_CODE) => {
                    tracing::info!("starting the new binary");
                    failures = 0;
                }
                Outcome::Exited(status) if update::pending(&state).is_some() => {
                    failures += 1;
                    tracing::error!(%status, failures, "the new binary exited");
                    if failures >= 3 {
                        update::roll_back(&state, &exe, &format!("the new binary exited ({status}) three times"))?;
                        failures = 0;
                    } else {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
                Outcome::Exited(status) => {
                    if started.elapsed() > Duration::from_secs(60) {
                        pause = Duration::from_secs(1);
                    }
                    tracing::error!(%status, pause = pause.as_secs(), "the server exited; starting it again");
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        _ = term.recv() => return Ok(()),
                    }
                    pause = (pause * 2).min(Duration::from_secs(30));
                }
            }
        }
    })
}
