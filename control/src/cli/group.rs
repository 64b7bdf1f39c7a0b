//! `hearth-control group`: listing, adding, changing and removing groups (which users get
//! which nodes, and their defaults).

use std::path::Path;

use anyhow::Result;
use clap::Subcommand;

use crate::app::now;
use crate::{error, serve, store};

/// What `group` does.
#[derive(Subcommand)]
pub(crate) enum GroupCommand {
    /// List groups, with their users and nodes counted.
    List,
    /// Add a group.
    Add {
        /// The group's name.
        name: String,
        #[command(flatten)]
        settings: GroupArgs,
    },
    /// Change a group: what is not given stays.
    Set {
        /// The group's name.
        name: String,
        /// A new name.
        #[arg(long)]
        rename: Option<String>,
        #[command(flatten)]
        settings: GroupArgs,
    },
    /// Delete a group: its users lose its nodes.
    Remove {
        /// The group's name.
        name: String,
        /// Delete without asking (the CLI never asks: this flag says you mean it).
        #[arg(long, required = true)]
        yes: bool,
    },
}

/// A group's settings on the command line.
#[derive(clap::Args)]
pub(crate) struct GroupArgs {
    /// A note.
    #[arg(long)]
    note: Option<String>,
    /// Its users' default device limit (0: none).
    #[arg(long)]
    device_limit: Option<u32>,
    /// Its nodes refuse BitTorrent for its users: true or false.
    #[arg(long)]
    block_torrent: Option<bool>,
    /// Its nodes refuse outbound port 25 for its users: true or false.
    #[arg(long)]
    block_smtp: Option<bool>,
    /// The rule set its users are routed by (`""`: none; see `routing`).
    #[arg(long)]
    rule_set: Option<String>,
}

impl GroupArgs {
    fn input(self, name: Option<String>) -> store::nodes::GroupInput {
        store::nodes::GroupInput {
            name,
            note: self.note,
            device_limit: self.device_limit,
            block_torrent: self.block_torrent,
            block_smtp: self.block_smtp,
            rule_set: self.rule_set,
            ..store::nodes::GroupInput::default()
        }
    }
}

/// Runs a `group` command on the data directory `dir`.
pub(crate) fn run(dir: &Path, command: GroupCommand) -> Result<()> {
    let (_, db, signer) = serve::open(dir)?;
    let now = now();
    let id_of = |c: &rusqlite::Connection, name: &str| -> Result<i64, error::Error> {
        store::nodes::groups(c)?
            .into_iter()
            .find(|g| g.name == name)
            .map(|g| g.id)
            .ok_or(error::Error::NotFound("group"))
    };
    match command {
        GroupCommand::List => {
            out!("{:<20} {:>6} {:>6} {:>8}  note", "name", "users", "nodes", "devices");
            for g in db.read_blocking(store::nodes::groups)? {
                out!("{:<20} {:>6} {:>6} {:>8}  {}", g.name, g.users, g.nodes, g.device_limit, g.note);
            }
        }
        GroupCommand::Add { name, settings } => {
            let group =
                db.write_blocking(|tx| store::nodes::create_group(tx, "cli", &settings.input(Some(name)), now))?;
            out!("group {} added", group.name);
        }
        GroupCommand::Set { name, rename, settings } => {
            let group = db.write_blocking(|tx| {
                let id = id_of(tx, &name)?;
                crate::nodes::update_group(tx, &signer, "cli", id, &settings.input(rename), now)
            })?;
            out!("{}", serde_json::to_string_pretty(&group)?);
        }
        GroupCommand::Remove { name, yes: _ } => {
            db.write_blocking(|tx| {
                let id = id_of(tx, &name)?;
                crate::nodes::delete_group(tx, &signer, "cli", id, now)
            })?;
            out!("group {name} deleted");
        }
    }
    Ok(())
}
