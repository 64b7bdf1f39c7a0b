//! Crash points for the crash tests: a test build (debug assertions on) dies on the spot, as
//! under `kill -9`, where `HEARTH_CRASH_AT` names the point it reached; a release build has
//! none. Each point sits where a write Hearth treats as safe to lose has not been made yet,
//! so the test that sets it shows what is found again after it.

/// Dies here when `HEARTH_CRASH_AT` is `name` (test builds only).
pub(crate) fn point(name: &str) {
    if cfg!(debug_assertions) && std::env::var("HEARTH_CRASH_AT").is_ok_and(|at| at == name) {
        eprintln!("hearth-control: crashing at {name} (HEARTH_CRASH_AT)");
        std::process::abort();
    }
}
