//! `hearth-control`: the program an operator runs to own Hearth's users and nodes.
//!
//! Today it makes and shows the keys of a data directory (`init`, `keys show`); the admin
//! API, the store and publishing to the edge build on them.

mod keyring;

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use clap::{Parser, Subcommand};
use hearth_shared::keys::Role;

/// Hearth control: users, nodes, signing and publishing.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Where control keeps its keys and state.
    #[arg(long, env = "HEARTH_DATA_DIR", default_value = "hearth-data", global = true)]
    data_dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Make a new data directory: the offline root key, the online signing and release keys
    /// (certified by the root), and the owner's recovery key.
    Init,
    /// Keys of the data directory.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Show every key's id and public key, after checking the records against the root.
    Show,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Init => {
            let created = keyring::init(&cli.data_dir, now())?;
            let paths = keyring::Paths::new(&cli.data_dir);
            println!("Initialised {}", cli.data_dir.display());
            println!("  root key      {} ({})", created.root.id(), created.root);
            println!("  signing key   {} (certified by root)", created.signing.id());
            println!("  release key   {} (certified by root)", created.release.id());
            println!("  recovery key  {} ({})", created.recovery.id(), created.recovery);
            println!();
            println!("Keep these two files offline, then delete them from this machine:");
            println!("  {}  (certifies and rotates every other key)", paths.secret(Role::Root).display());
            println!("  {}  (opens the recovery archive and snapshots)", paths.secret(Role::Recovery).display());
        }
        Command::Keys { command: KeysCommand::Show } => {
            let trust = keyring::load_trust(&cli.data_dir, now())?;
            for role in [Role::Root, Role::Signing, Role::Release] {
                let source = match trust.role_version(role).unwrap_or(0) {
                    0 => "trust anchor".to_owned(),
                    version => format!("key record v{version}"),
                };
                let keys = trust.role(role).map(|keys| keys.keys.as_slice()).unwrap_or_default();
                for key in keys {
                    println!("{role:<8} {}  {key}  ({source})", key.id());
                }
            }
        }
    }
    Ok(())
}
