//! The command line of `hearth-control`: its arguments (`Cli`), and a module per command
//! family holding that family's subcommands and what each does. `main` parses and hands each
//! command to its module; the modules call the store and the domain, never the other way round.

pub(crate) mod admin;
pub(crate) mod edge;
pub(crate) mod group;
pub(crate) mod import;
pub(crate) mod init;
pub(crate) mod keys;
mod links;
pub(crate) mod node;
pub(crate) mod release;
pub(crate) mod restore;
pub(crate) mod routing;
pub(crate) mod user;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Hearth control: users, nodes, signing and publishing.
#[derive(Parser)]
#[command(version, about)]
pub(crate) struct Cli {
    /// Where control keeps its keys, settings and database.
    #[arg(long, env = "HEARTH_DATA_DIR", default_value = "hearth-data", global = true)]
    pub(crate) data_dir: PathBuf,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Make a new data directory: the offline root key, the online signing and release keys
    /// (certified by the root), the owner's recovery key, the master key, a self-signed TLS
    /// certificate and `control.toml`.
    Init {
        /// A host name or address the certificate should also be valid for (repeatable).
        #[arg(long = "host")]
        hosts: Vec<String>,
    },
    /// Run control: the admin panel and API, the node API, publishing to the edge.
    Serve,
    /// Manage users.
    User {
        #[command(subcommand)]
        command: user::UserCommand,
    },
    /// Manage nodes.
    Node {
        #[command(subcommand)]
        command: node::NodeCommand,
    },
    /// Manage groups (which users get which nodes, and their defaults).
    Group {
        #[command(subcommand)]
        command: group::GroupCommand,
    },
    /// Rebuild control in a new data directory from what the edge holds: from the encrypted
    /// archive (the default), or from the signed snapshots and credential sets.
    Restore {
        /// The edge's URL (as in `edge_url`).
        #[arg(long)]
        from_edge: String,
        /// The `edge.toml` kept from `init` (root key, push token, API prefix).
        #[arg(long)]
        edge_settings: PathBuf,
        /// The owner's recovery key file.
        #[arg(long)]
        recovery_key: PathBuf,
        /// Rebuild from the snapshots instead of the archive (needs --root-key).
        #[arg(long)]
        from_snapshots: bool,
        /// The root key file, to certify new online keys (needed from snapshots, or when the
        /// archive predates a key rotation).
        #[arg(long)]
        root_key: Option<PathBuf>,
    },
    /// Routing per user: outbounds (direct, SOCKS5, HTTP proxies) and named rule sets in the
    /// official Hysteria 2 server's ACL syntax, given to users and groups with `--rule-set`.
    Routing {
        #[command(subcommand)]
        command: routing::RoutingCommand,
    },
    /// The edges control publishes to (links are served by each).
    Edge {
        #[command(subcommand)]
        command: edge::EdgeCommand,
    },
    /// Admin accounts besides the owner: full admins, operators, read-only admins and
    /// resellers.
    Admin {
        #[command(subcommand)]
        command: admin::AdminCommand,
    },
    /// Signed node releases.
    Release {
        #[command(subcommand)]
        command: release::ReleaseCommand,
    },
    /// Keys of the data directory.
    Keys {
        #[command(subcommand)]
        command: keys::KeysCommand,
    },
    /// Take users over from another panel, keeping their Hysteria2 passwords and serving
    /// their old subscription paths as aliases (see docs/moving-in.md).
    /// One transaction, all or nothing; users imported before are left as they are.
    Import {
        /// The panel: hearth (the JSON format `export` writes), 3x-ui, remnawave, marzban,
        /// pasarguard.
        source: crate::import::Source,
        /// The panel's database (3x-ui: its SQLite file; marzban, pasarguard: the SQLite file
        /// or a MySQL dump), or the document (hearth; `-` reads standard input).
        #[arg(long)]
        file: Option<PathBuf>,
        /// The panel's address, to read users over its REST API (remnawave, marzban,
        /// pasarguard).
        #[arg(long)]
        url: Option<String>,
        /// A file holding the panel's API token (never on the command line).
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// Marzban, PasarGuard: a list of the subscription links in use (the old web server's
        /// access log, or any text holding them), each checked with the database's secret and
        /// kept as an alias (their panels sign a new link each time one is shown).
        #[arg(long, requires = "file")]
        links: Option<PathBuf>,
        /// Print what would be imported and skipped, and why; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Write every user (links, passwords, aliases) as a Hearth users document: what
    /// `import hearth` reads. As secret as the links.
    Export {
        /// Where to write it (`-`: standard output).
        #[arg(long, default_value = "-")]
        out: PathBuf,
    },
}
