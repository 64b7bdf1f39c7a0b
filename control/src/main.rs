//! `hearth-control`: the program an operator runs to own Hearth's users and nodes.
//!
//! `init` makes a data directory (keys, master key, TLS certificate, `control.toml`);
//! `serve` runs the admin API, the node API and the publisher; the other commands manage
//! users, nodes and keys from the shell, on the same database.

/// `println!` for the command line: a reader that went away (`hearth-control user list | head
/// -1`) ends the program quietly, as other command-line tools do, instead of a panic.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            panic!("writing to standard output: {e}");
        }
    }};
}

mod allocator;
// Handlers answer `Result<_, Response>`, axum's idiom; a response is large by nature.
#[allow(clippy::result_large_err)]
mod api;
mod app;
mod archive;
mod auth;
mod batches;
mod cli;
mod clock;
mod config;
mod crash;
mod error;
mod import;
mod install;
mod keyring;
#[allow(clippy::result_large_err)]
mod metrics;
mod nodes;
mod outbox;
mod passkeys;
mod private_file;
mod publish;
mod releases;
mod restore;
mod secrets;
mod serve;
mod settings;
mod store;
mod tasks;
mod telegram;
#[cfg(test)]
mod testing;
mod tls;
mod totp;
mod ui;
mod users;
mod webhooks;

use anyhow::Result;
use clap::Parser as _;

use crate::cli::{Cli, Command};

/// Parses the command line and hands the command to its module in [`cli`].
fn main() -> Result<()> {
    let Cli { data_dir: dir, command } = Cli::parse();
    match command {
        Command::Init { hosts } => cli::init::run(&dir, &hosts),
        Command::Serve => {
            let unsettled = allocator::settle();
            serve::run(&dir, unsettled)
        }
        Command::User { command } => cli::user::run(&dir, command),
        Command::Node { command } => cli::node::run(&dir, command),
        Command::Group { command } => cli::group::run(&dir, command),
        Command::Restore { from_edge, edge_settings, recovery_key, from_snapshots, root_key } => {
            cli::restore::run(&dir, from_edge, edge_settings, recovery_key, from_snapshots, root_key)
        }
        Command::Edge { command } => cli::edge::run(&dir, command),
        Command::Routing { command } => cli::routing::run(&dir, command),
        Command::Import { source, file, url, token_file, links, dry_run } => {
            cli::import::run(&dir, source, file, url, token_file, links, dry_run)
        }
        Command::Export { out } => cli::import::export(&dir, &out),
        Command::Release { command } => cli::release::run(&dir, command),
        Command::Admin { command } => cli::admin::run(&dir, command),
        Command::Keys { command } => cli::keys::run(&dir, command),
    }
}
