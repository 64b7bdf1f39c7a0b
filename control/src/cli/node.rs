//! `hearth-control node`: adding nodes (with the command that enrolls or installs one),
//! listing and removing them.

use std::path::Path;

use anyhow::Result;
use clap::Subcommand;

use crate::app::now;
use crate::store::nodes::NodeInput;
use crate::{serve, store};

/// What `node` does.
#[derive(Subcommand)]
pub(crate) enum NodeCommand {
    /// Add a node and print its one-line enrollment command.
    Add {
        /// The node's name, as users' apps show it.
        name: String,
        /// The public host name or IP address clients connect to.
        #[arg(long)]
        host: String,
        /// The UDP port.
        #[arg(long, default_value_t = 443)]
        port: u16,
        /// Port hopping range, like 20000-30000.
        #[arg(long)]
        hop: Option<String>,
        /// The TLS server name clients send.
        #[arg(long)]
        sni: Option<String>,
        /// self_signed (clients pin the node's certificate) or operator (a CA-issued one).
        #[arg(long, default_value = "self_signed")]
        tls: String,
        /// A Salamander obfuscation password.
        #[arg(long)]
        obfs: Option<String>,
        /// The http(s) address of a web site the node shows anyone without a password
        /// (default: nginx's 404 page).
        #[arg(long)]
        masquerade: Option<String>,
        /// A group whose users the node serves (repeatable; default: `default`).
        #[arg(long = "group")]
        groups: Vec<String>,
        /// Let apps that can check nothing about the node's self-signed certificate connect
        /// to it unchecked (anyone on their path can then pose as the node to them).
        #[arg(long)]
        allow_unverified: bool,
        /// A domain pointing at the node: it gets a certificate for it from the CA of
        /// `[acme]` (Let's Encrypt by default), which apps then check the usual way.
        #[arg(long)]
        domain: Option<String>,
    },
    /// Print a new one-time enrollment command for a node.
    EnrollCommand {
        /// The node's name.
        name: String,
    },
    /// List nodes.
    List,
    /// Delete a node: it is no longer in anyone's profile, and its enrollment ends.
    Remove {
        /// The node's name.
        name: String,
        /// Delete without asking (the CLI never asks: this flag says you mean it).
        #[arg(long, required = true)]
        yes: bool,
    },
}

/// Runs a `node` command on the data directory `dir`.
pub(crate) fn run(dir: &Path, command: NodeCommand) -> Result<()> {
    let (config, db, signer) = serve::open(dir)?;
    let now = now();
    match command {
        NodeCommand::Add { name, host, port, hop, sni, tls, obfs, masquerade, groups, allow_unverified, domain } => {
            let input = NodeInput {
                name: Some(name),
                host: Some(host),
                port: Some(port),
                hop,
                sni,
                tls: Some(tls),
                obfs,
                masquerade,
                groups: (!groups.is_empty()).then_some(groups),
                allow_unverified: allow_unverified.then_some(true),
                domain,
                ..NodeInput::default()
            };
            let (node, token) = db.write_blocking(|tx| store::nodes::create(tx, "cli", &input, now))?;
            let release = db.read_blocking(|c| crate::releases::in_force(c, now))?;
            match config.install_command(&token, node.port, release.as_ref().map(|(_, m)| m)) {
                Some(install) => {
                    out!("node {} added; on a fresh Linux server, as root, run (within 24 hours):", node.id);
                    out!("  {install}");
                    out!("or, with hearth-node installed by hand:");
                }
                None => {
                    out!("node {} added; on the node, run (within 24 hours):", node.id);
                    eprintln!(
                        "(no node release is published: `hearth-control release sign` one to get a one-line install)"
                    );
                }
            }
            out!("  {}", config.enroll_command(&token));
            if !node.domain.is_empty() {
                out!(
                    "the node gets a certificate for {0} from {1}: point {0} at it (DNS A or AAAA) and open TCP 443 \
                     (with masquerade_tcp) or TCP 80 for the CA's check",
                    node.domain,
                    config.acme.directory
                );
            }
        }
        NodeCommand::EnrollCommand { name } => {
            let (token, replaced) = db.write_blocking(|tx| {
                let id = store::nodes::id_by_name(tx, &name)?;
                store::nodes::new_enroll_token(tx, "cli", id, now)
            })?;
            if replaced {
                eprintln!("the enrollment command made before this one no longer works");
            }
            out!("{}", config.enroll_command(&token));
        }
        NodeCommand::Remove { name, yes: _ } => {
            db.write_blocking(|tx| {
                let id = store::nodes::id_by_name(tx, &name)?;
                crate::nodes::delete(tx, &signer, "cli", id, now)
            })?;
            out!("node {name} deleted");
        }
        NodeCommand::List => {
            let nodes = db.read_blocking(store::nodes::list)?;
            out!("{:>4}  {:<20} {:<28} {:<9} {:<10} last seen", "id", "name", "address", "enrolled", "version");
            for n in nodes {
                let seen = if n.last_seen == 0 {
                    "never".to_owned()
                } else {
                    format!("{} s ago", now.saturating_sub(n.last_seen))
                };
                out!(
                    "{:>4}  {:<20} {:<28} {:<9} {:<10} {seen}",
                    n.id,
                    n.name,
                    format!("{}:{}", n.host, n.port),
                    if n.enrolled { "yes" } else { "no" },
                    n.version
                );
            }
        }
    }
    Ok(())
}
