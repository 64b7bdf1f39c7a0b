//! `hearth-edge`: not built yet.
//!
//! This binary is a placeholder that refuses to run, so nothing can mistake it for a working
//! edge. Its issue in the tracker fills it in; until then it exits with status 2.

fn main() -> std::process::ExitCode {
    eprintln!("hearth-edge: the edge is not part of this build yet; see README.md (Status)");
    std::process::ExitCode::from(2)
}
