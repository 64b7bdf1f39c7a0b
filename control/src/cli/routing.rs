//! `hearth-control routing`: the outbounds and rule sets of routing per user from the command
//! line, through the same store functions (and checks) as the admin API.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Subcommand;

use crate::publish::{self, Signer};
use crate::store::routing::{self, OutboundInput};
use crate::store::{self, Db};
use crate::{app::now, serve};

/// What `routing` does.
#[derive(Subcommand)]
pub(crate) enum RoutingCommand {
    /// List the outbounds (no password shown) and the rule sets, with whom each is given to.
    List,
    /// Add an outbound, or change the one of that name (and node): what is not given stays.
    Outbound {
        /// Its name, which rules give it (`direct` and `default` may be redefined).
        name: String,
        /// direct, socks5 or http.
        #[arg(long = "type")]
        kind: Option<String>,
        /// Only for this node (by name); otherwise every node.
        #[arg(long)]
        node: Option<String>,
        /// A proxy's host:port.
        #[arg(long)]
        server: Option<String>,
        /// A proxy's username.
        #[arg(long)]
        username: Option<String>,
        /// A file holding the proxy's password (`-`: standard input), so it never shows in
        /// the process list.
        #[arg(long)]
        password_file: Option<PathBuf>,
        /// Direct: auto, v4, v6, prefer_v4 or prefer_v6.
        #[arg(long)]
        ip_mode: Option<String>,
        /// Direct: the interface to send from.
        #[arg(long)]
        interface: Option<String>,
        /// Direct: the IPv4 source address.
        #[arg(long)]
        source_v4: Option<String>,
        /// Direct: the IPv6 source address.
        #[arg(long)]
        source_v6: Option<String>,
    },
    /// Remove an outbound (refused while a rule set names it and no other of its name is left).
    RemoveOutbound {
        /// Its name.
        name: String,
        /// The node it is for (by name); otherwise the one for every node.
        #[arg(long)]
        node: Option<String>,
    },
    /// Add a rule set from a file (`-`: standard input), or replace the rules of the one of
    /// that name. Rules that do not check are refused with their line and column.
    Rules {
        /// The rule set's name.
        name: String,
        /// The rules, one a line, in the official Hysteria 2 server's ACL syntax.
        file: PathBuf,
    },
    /// Remove a rule set (refused while a user or group is given it).
    RemoveRules {
        /// The rule set's name.
        name: String,
    },
}

/// Reads a file (`-`: standard input), refusing one longer than a rule set may be.
fn read(path: &Path, what: &str) -> Result<String> {
    use std::io::Read as _;
    let most = hearth_shared::acl::MAX_TEXT;
    let mut bytes = Vec::new();
    let reading = || format!("reading the {what} from {}", path.display());
    if path.as_os_str() == "-" {
        std::io::stdin().take(most as u64 + 1).read_to_end(&mut bytes).with_context(reading)?;
    } else {
        std::fs::File::open(path)
            .with_context(reading)?
            .take(most as u64 + 1)
            .read_to_end(&mut bytes)
            .with_context(reading)?;
    }
    if bytes.len() > most {
        anyhow::bail!("{} holds more than {} KiB: too long for {what}", path.display(), most / 1024);
    }
    String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{} is not UTF-8 text: not {what}", path.display()))
}

fn node_id(conn: &rusqlite::Connection, node: Option<&str>) -> Result<u64, crate::error::Error> {
    match node {
        None => Ok(0),
        Some(name) => store::nodes::id_by_name(conn, name).map_err(|_| crate::error::Error::NotFound("node")),
    }
}

/// Runs a `routing` command on the data directory `dir`.
pub(crate) fn run(dir: &Path, command: RoutingCommand) -> Result<()> {
    let (_, db, signer) = serve::open(dir)?;
    let routes = Routes { db, signer, now: now() };
    match command {
        RoutingCommand::List => routes.list(),
        RoutingCommand::Outbound {
            name,
            kind,
            node,
            server,
            username,
            password_file,
            ip_mode,
            interface,
            source_v4,
            source_v6,
        } => {
            let password = password_file
                .map(|path| read(&path, "password").map(|p| p.trim_end_matches(['\r', '\n']).to_owned()))
                .transpose()?;
            let input = OutboundInput {
                name: Some(name.clone()),
                node: None,
                kind,
                server,
                username,
                password,
                ip_mode,
                interface,
                source_v4,
                source_v6,
            };
            routes.save_outbound(&name, node.as_deref(), input)
        }
        RoutingCommand::RemoveOutbound { name, node } => routes.remove_outbound(&name, node.as_deref()),
        RoutingCommand::Rules { name, file } => {
            let text = read(&file, "rules")?;
            routes.save_rules(&name, &text)
        }
        RoutingCommand::RemoveRules { name } => routes.remove_rules(&name),
    }
}

/// What every `routing` subcommand works with: the database, the signer (whose vault holds
/// the proxies' passwords) and the time it runs at.
struct Routes {
    db: Db,
    signer: Signer,
    now: u64,
}

impl Routes {
    /// `routing list`: the outbounds (no password shown), and the rule sets with whom each is
    /// given to.
    fn list(&self) -> Result<()> {
        let vault = self.signer.vault.clone();
        let (outbounds, sets) =
            self.db.read_blocking(move |c| Ok((routing::outbounds(c, &vault)?, routing::rule_sets(c)?)))?;
        out!("outbounds:");
        for outbound in &outbounds {
            out!("  {}", serde_json::to_string(&outbound.view())?);
        }
        out!("rule sets:");
        for set in &sets {
            out!(
                "  {} (id {}): {} users, {} groups, {} rules",
                set.name,
                set.id,
                set.users,
                set.groups,
                set.text.lines().count()
            );
        }
        Ok(())
    }

    /// `routing outbound`: adds the outbound `name` for `node` (by name; `None`: every node),
    /// or changes the one there is by `input`.
    fn save_outbound(&self, name: &str, node: Option<&str>, mut input: OutboundInput) -> Result<()> {
        let (signer, now) = (&self.signer, self.now);
        self.db.write_blocking(|tx| {
            let node = node_id(tx, node)?;
            input.node = Some(node);
            let existing = routing::outbounds(tx, &signer.vault)?
                .into_iter()
                .find(|o| o.node == node && o.outbound.name.eq_ignore_ascii_case(name));
            let (id, action) = match existing {
                Some(existing) => {
                    routing::update_outbound(tx, &signer.vault, existing.id, &input)?;
                    (existing.id, "outbound.update")
                }
                None => (routing::add_outbound(tx, &signer.vault, &input)?, "outbound.add"),
            };
            store::audit(tx, now, "cli", action, &format!("outbound {id} ({name})"), "")?;
            publish::all_nodes_changed(tx, signer, now).map(drop)
        })?;
        out!("outbound {name} saved: the nodes it reaches route by it from their next pull");
        Ok(())
    }

    /// `routing remove-outbound`: removes the outbound `name` for `node` (by name; `None`: the
    /// one for every node).
    fn remove_outbound(&self, name: &str, node: Option<&str>) -> Result<()> {
        let (signer, now) = (&self.signer, self.now);
        self.db.write_blocking(|tx| {
            let node = node_id(tx, node)?;
            let found = routing::outbounds(tx, &signer.vault)?
                .into_iter()
                .find(|o| o.node == node && o.outbound.name.eq_ignore_ascii_case(name))
                .ok_or(crate::error::Error::NotFound("outbound"))?;
            routing::remove_outbound(tx, &signer.vault, found.id)?;
            store::audit(tx, now, "cli", "outbound.remove", &format!("outbound {} ({name})", found.id), "")?;
            publish::all_nodes_changed(tx, signer, now).map(drop)
        })?;
        out!("outbound {name} removed");
        Ok(())
    }

    /// `routing rules`: adds the rule set `name` with the rules `text`, or replaces the rules
    /// of the one there is.
    fn save_rules(&self, name: &str, text: &str) -> Result<()> {
        let (signer, now) = (&self.signer, self.now);
        self.db.write_blocking(|tx| {
            let existing = routing::rule_sets(tx)?.into_iter().find(|set| set.name == name.trim());
            let (id, action) = match existing {
                Some(set) => {
                    routing::update_rule_set(tx, &signer.vault, set.id, None, Some(text), now)?;
                    (set.id, "rule_set.update")
                }
                None => (routing::add_rule_set(tx, &signer.vault, name, text, now)?, "rule_set.add"),
            };
            store::audit(tx, now, "cli", action, &format!("rule set {id} ({name})"), "")?;
            publish::all_nodes_changed(tx, signer, now).map(drop)
        })?;
        out!("rule set {name} saved");
        Ok(())
    }

    /// `routing remove-rules`: removes the rule set `name`.
    fn remove_rules(&self, name: &str) -> Result<()> {
        let (signer, now) = (&self.signer, self.now);
        self.db.write_blocking(|tx| {
            let set = routing::rule_sets(tx)?
                .into_iter()
                .find(|set| set.name == name.trim())
                .ok_or(crate::error::Error::NotFound("rule set"))?;
            routing::remove_rule_set(tx, set.id)?;
            store::audit(tx, now, "cli", "rule_set.remove", &format!("rule set {} ({name})", set.id), "")?;
            publish::all_nodes_changed(tx, signer, now).map(drop)
        })?;
        out!("rule set {name} removed");
        Ok(())
    }
}
