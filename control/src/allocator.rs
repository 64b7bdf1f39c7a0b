//! glibc's allocator set up for a program that runs for months: `serve` starts itself again,
//! once, with glibc told to give the free top of an arena back to the system past 128 KiB.
//!
//! Left to itself, glibc raises that threshold to twice the largest block it has handed back
//! to the system (up to 64 MiB): after a bulk create has freed a buffer of a few megabytes
//! (a node's set of 100,000 users, a push), the tens of megabytes its threads freed stay in
//! their arenas. Control held 75 MiB right after creating 100,000 users, 4 MiB of it in use;
//! with the threshold set, 19 to 22 MiB (docs/benchmarks.md, the scale rows). glibc reads its
//! tunables only when a program starts, and setting them from within takes `unsafe` code,
//! which Hearth does not have: hence the second start (about a millisecond). An operator's
//! own `glibc.malloc.trim_threshold` in `GLIBC_TUNABLES` is kept as it is.

/// Set in the environment of the second start, so there is no third whatever glibc makes of
/// `GLIBC_TUNABLES` (glibc 2.36 parses it in place, cutting the string after its first item).
const STARTED_AGAIN: &str = "HEARTH_ALLOCATOR_SET";

/// The tunable, and the value Hearth gives it: glibc's default before it raises it.
const TUNABLE: &str = "glibc.malloc.trim_threshold";
const VALUE: &str = "131072";

/// `GLIBC_TUNABLES` with Hearth's setting added to what it holds (`current`), or `None` when
/// it says the threshold already.
fn tunables(current: Option<&str>) -> Option<String> {
    let current = current.unwrap_or("");
    let setting = format!("{TUNABLE}={VALUE}");
    let said = current.split(':').any(|item| item.split_once('=').is_some_and(|(name, _)| name == TUNABLE));
    match current {
        _ if said => None,
        "" => Some(setting),
        current => Some(format!("{current}:{setting}")),
    }
}

/// Starts this program again with the threshold set, unless it is set already. Returns only
/// when it is, or with why it could not start again (control then runs without it).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn settle() -> Option<String> {
    use std::os::unix::process::CommandExt as _;
    if std::env::var_os(STARTED_AGAIN).is_some() {
        return None;
    }
    let current = std::env::var("GLIBC_TUNABLES").ok();
    let tunables = tunables(current.as_deref())?;
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            return Some(format!("could not find this program to start it again with glibc's allocator set: {e}"));
        }
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    let e = command.args(args).env("GLIBC_TUNABLES", tunables).env(STARTED_AGAIN, "1").exec();
    Some(format!("could not start again with glibc's allocator set (it keeps more memory after bursts): {e}"))
}

/// Other C libraries (musl, the static release build) need nothing.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn settle() -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_is_added_to_what_the_operator_set() {
        let ours = "glibc.malloc.trim_threshold=131072";
        assert_eq!(tunables(None).as_deref(), Some(ours));
        assert_eq!(tunables(Some("")).as_deref(), Some(ours));
        assert_eq!(
            tunables(Some("glibc.malloc.arena_max=2")).as_deref(),
            Some("glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=131072")
        );
        // Set already (by the second start, or by the operator): left as it is, so the
        // program starts again once at most.
        assert_eq!(tunables(Some(ours)), None);
        assert_eq!(tunables(Some("glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=1048576")), None);
        // A tunable whose name only starts the same is another one.
        assert!(tunables(Some("glibc.malloc.trim_threshold_x=1")).is_some());
    }
}
