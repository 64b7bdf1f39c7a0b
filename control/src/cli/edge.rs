//! `hearth-control edge`: the edges control publishes to, and the state of their links.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Subcommand;

use super::links::links_of;
use crate::app::now;
use crate::{publish, serve, store};

/// What `edge` does.
#[derive(Subcommand)]
pub(crate) enum EdgeCommand {
    /// List the edges, how far each has come, and their links' state.
    List,
    /// Add an edge with its own push token and API prefix (its `edge.toml`, or the Worker's
    /// secrets); it is brought up to date with everything while control serves.
    Add {
        /// Its name: lowercase letters, digits and '-'.
        name: String,
        /// Where control pushes and nodes fall back to.
        #[arg(long)]
        url: String,
        /// The edge's API prefix.
        #[arg(long)]
        api_prefix: String,
        /// A file holding the edge's push token (`-`: read it from standard input), so it
        /// never shows in the process list.
        #[arg(long)]
        push_token_file: PathBuf,
        /// The public base of its links (default: its URL and the sub prefix).
        #[arg(long)]
        link_base: Option<String>,
    },
    /// Mark an edge's links active, blocked (its domain is blocked: links move to the first
    /// active edge) or retired.
    Mark {
        /// The edge's name.
        name: String,
        /// active, blocked or retired.
        state: String,
    },
    /// Stop publishing to an edge (`main` is `edge_url`: change it in the settings).
    Remove {
        /// The edge's name.
        name: String,
    },
}

/// Runs a `edge` command on the data directory `dir`.
pub(crate) fn run(dir: &Path, command: EdgeCommand) -> Result<()> {
    let (config, db, signer) = serve::open(dir)?;
    let now = now();
    match command {
        EdgeCommand::List => {
            let overview = db.read_blocking(|c| store::overview::overview(c, now))?;
            let (bases, primary) = links_of(&config, &db)?;
            out!("{:<12} {:<8} {:>8} {:>5}  {:<40} links", "name", "links", "pending", "held", "url");
            for status in &overview.edges {
                let edge = &status.edge;
                let base = bases.iter().find(|b| b.edge == edge.name).map_or("", |b| b.base.as_str());
                out!(
                    "{:<12} {:<8} {:>8} {:>5}  {:<40} {base}",
                    edge.name,
                    edge.state.as_str(),
                    status.pending,
                    status.held,
                    edge.url
                );
                if let Some(error) = &edge.last_error {
                    out!("{:<12} failing since {} s ago: {error}", "", now.saturating_sub(edge.error_since));
                }
            }
            out!("primary link base: {primary}");
        }
        EdgeCommand::Add { name, url, api_prefix, push_token_file, link_base } => {
            let token = if push_token_file.as_os_str() == "-" {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).context("reading the push token")?;
                line
            } else {
                std::fs::read_to_string(&push_token_file)
                    .with_context(|| format!("reading {}", push_token_file.display()))?
            };
            let edge = store::edges::NewEdge::checked(
                &name,
                &url,
                &api_prefix,
                token.trim(),
                link_base.as_deref(),
                &config.edge.sub_prefix,
            )?;
            db.write_blocking(|tx| {
                store::edges::add(tx, &edge, now)?;
                store::audit(tx, now, "cli", "edge.add", &edge.name, &edge.url)?;
                publish::edges_changed(tx, &signer, now).map(drop)
            })?;
            out!("edge {name} added: control brings it up to date while it serves");
        }
        EdgeCommand::Mark { name, state } => {
            let state = store::edges::check_state(&state)?;
            db.write_blocking(|tx| {
                let edge = store::edges::by_name(tx, &name)?.ok_or(crate::error::Error::NotFound("edge"))?;
                store::edges::set_state(tx, edge.id, state)?;
                store::audit(tx, now, "cli", "edge.state", &name, state.as_str())?;
                publish::edges_changed(tx, &signer, now).map(drop)
            })?;
            out!("edge {name}: links {}; primary link base: {}", state.as_str(), links_of(&config, &db)?.1);
        }
        EdgeCommand::Remove { name } => {
            db.write_blocking(|tx| {
                let edge = store::edges::by_name(tx, &name)?.ok_or(crate::error::Error::NotFound("edge"))?;
                if edge.name == store::edges::MAIN {
                    return Err(crate::error::Error::invalid(
                        "main_edge",
                        "the main edge is edge_url: change it in the settings",
                    ));
                }
                store::edges::remove(tx, edge.id)?;
                store::audit(tx, now, "cli", "edge.remove", &name, &edge.url)?;
                publish::edges_changed(tx, &signer, now).map(drop)
            })?;
            out!("edge {name} removed");
        }
    }
    Ok(())
}
