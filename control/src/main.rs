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

// Handlers answer `Result<_, Response>`, axum's idiom; a response is large by nature.
#[allow(clippy::result_large_err)]
mod api;
mod app;
mod archive;
mod auth;
mod clock;
mod config;
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
mod routing_cli;
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

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use hearth_shared::keys::Role;

use crate::app::now;
use crate::store::nodes::NodeInput;
use crate::store::users::{ListQuery, Mbps, SpeedInput, UserInput};

/// Hearth control: users, nodes, signing and publishing.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Where control keeps its keys, settings and database.
    #[arg(long, env = "HEARTH_DATA_DIR", default_value = "hearth-data", global = true)]
    data_dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
        command: UserCommand,
    },
    /// Manage nodes.
    Node {
        #[command(subcommand)]
        command: NodeCommand,
    },
    /// Manage groups (which users get which nodes, and their defaults).
    Group {
        #[command(subcommand)]
        command: GroupCommand,
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
        command: routing_cli::RoutingCommand,
    },
    /// The edges control publishes to (links are served by each).
    Edge {
        #[command(subcommand)]
        command: EdgeCommand,
    },
    /// Admin accounts besides the owner: full admins, operators, read-only admins and
    /// resellers.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Signed node releases.
    Release {
        #[command(subcommand)]
        command: ReleaseCommand,
    },
    /// Keys of the data directory.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Take users over from another panel, keeping their Hysteria2 passwords and serving
    /// their old subscription paths as aliases (see the README, "Moving from another panel").
    /// One transaction, all or nothing; users imported before are left as they are.
    Import {
        /// The panel: hearth (the JSON format `export` writes), 3x-ui, remnawave, marzban,
        /// pasarguard.
        source: import::Source,
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

#[derive(Subcommand)]
enum UserCommand {
    /// Add a user and print its subscription link.
    Add {
        /// The user's name.
        name: String,
        /// Traffic quota in GiB (0: unlimited).
        #[arg(long, default_value_t = 0)]
        quota_gib: u64,
        /// Valid for this many days.
        #[arg(long)]
        days: Option<u64>,
        /// Count the days from the first connection.
        #[arg(long)]
        start_on_first_use: bool,
        /// When traffic goes back to zero: none, daily, weekly, monthly, rolling30.
        #[arg(long, default_value = "none")]
        reset: String,
        /// A group whose nodes the user gets (repeatable; default: `default`).
        #[arg(long = "group")]
        groups: Vec<String>,
        /// A note.
        #[arg(long, default_value = "")]
        note: String,
        #[command(flatten)]
        speed: SpeedArgs,
    },
    /// Set a user's speed limit and what a used-up quota does (what is not given stays).
    Limit {
        /// The user's name.
        name: String,
        #[command(flatten)]
        speed: SpeedArgs,
    },
    /// List users.
    List {
        /// Only names or notes containing this.
        #[arg(long)]
        search: Option<String>,
        /// Only this status: active, disabled, expired, over_quota, not_started.
        #[arg(long)]
        status: Option<String>,
    },
    /// Show a user and its subscription link.
    Show {
        /// The user's name.
        name: String,
    },
    /// Disable a user: its nodes drop it at once.
    Disable {
        /// The user's name.
        name: String,
    },
    /// Enable a user again.
    Enable {
        /// The user's name.
        name: String,
    },
    /// Add days to a user's expiry (from now when it has expired).
    Extend {
        /// The user's name.
        name: String,
        /// How many days.
        days: u64,
    },
    /// Change a user's settings: what is not given stays.
    Set {
        /// The user's name.
        name: String,
        /// A new name.
        #[arg(long)]
        rename: Option<String>,
        /// Traffic quota in GiB (0: unlimited).
        #[arg(long)]
        quota_gib: Option<u64>,
        /// Valid for this many days from now (or from the first connection, with
        /// `--start-on-first-use`).
        #[arg(long)]
        days: Option<u64>,
        /// Count the days from the first connection.
        #[arg(long, requires = "days")]
        start_on_first_use: bool,
        /// Never expires.
        #[arg(long, conflicts_with = "days")]
        no_expiry: bool,
        /// When traffic goes back to zero: none, daily, weekly, monthly, rolling30.
        #[arg(long)]
        reset: Option<String>,
        /// The groups whose nodes the user gets (repeatable; replaces them all).
        #[arg(long = "group")]
        groups: Vec<String>,
        /// Devices at once (0: no limit; `group`: its groups' default).
        #[arg(long, value_parser = device_limit)]
        device_limit: Option<store::users::DeviceLimit>,
        /// The rule set its traffic is routed by (`""`: its groups'; see `routing`).
        #[arg(long)]
        rule_set: Option<String>,
        /// A note.
        #[arg(long)]
        note: Option<String>,
    },
    /// Delete a user: its link stops, its nodes drop it.
    Delete {
        /// The user's name.
        name: String,
        /// Delete without asking (the CLI never asks: this flag says you mean it).
        #[arg(long, required = true)]
        yes: bool,
    },
    /// Give a user a new link (the old one stops working).
    Rotate {
        /// The user's name.
        name: String,
    },
}

/// A user's speed settings on the command line.
#[derive(clap::Args)]
struct SpeedArgs {
    /// Upload limit in Mbit/s (0: none; `group`: the groups' default).
    #[arg(long, value_parser = own_speed)]
    up: Option<Own>,
    /// Download limit in Mbit/s (0: none; `group`: the groups' default).
    #[arg(long, value_parser = own_speed)]
    down: Option<Own>,
    /// When the quota is used up: cut, slow or group.
    #[arg(long)]
    on_quota: Option<String>,
    /// The rate in Mbit/s a user whose quota is used up is slowed to (with `--on-quota slow`).
    #[arg(long, value_parser = speed)]
    slow_speed: Option<Mbps>,
}

/// A user's own limit one way: `None` for its groups' default.
#[derive(Clone, Copy)]
struct Own(Option<Mbps>);

fn speed(text: &str) -> Result<Mbps, String> {
    Mbps::parse(text.parse::<f64>().map_err(|_| format!("{text:?} is not a number of Mbit/s"))?)
}

fn device_limit(text: &str) -> Result<store::users::DeviceLimit, String> {
    match text {
        "group" => Ok(store::users::DeviceLimit::Group),
        n => match n.parse::<u32>() {
            Ok(n) if n <= store::users::MAX_DEVICES => Ok(store::users::DeviceLimit::Own(n)),
            _ => Err(format!("a device limit is 0 to {} or `group`", store::users::MAX_DEVICES)),
        },
    }
}

fn own_speed(text: &str) -> Result<Own, String> {
    if text == "group" { Ok(Own(None)) } else { speed(text).map(|m| Own(Some(m))) }
}

impl SpeedArgs {
    /// Into `input`, over the user's limit `held` (a side not given keeps it).
    fn fill(self, input: &mut UserInput, held: SpeedInput) {
        if self.up.is_some() || self.down.is_some() {
            input.speed_limit = Some(SpeedInput {
                up: self.up.map_or(held.up, |own| own.0),
                down: self.down.map_or(held.down, |own| own.0),
            });
        }
        input.on_quota = self.on_quota;
        input.slow_speed = self.slow_speed;
    }
}

#[derive(Subcommand)]
enum GroupCommand {
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
struct GroupArgs {
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

#[derive(Subcommand)]
enum NodeCommand {
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

#[derive(Subcommand)]
enum EdgeCommand {
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

#[derive(Subcommand)]
enum AdminCommand {
    /// Add an admin; prints their password once (they sign in at the panel with it).
    Add {
        /// Their login.
        login: String,
        /// admin (everything but admin accounts), operator (users only), read-only, or
        /// reseller (only the users they create, within the limits below).
        #[arg(long)]
        role: String,
        /// A reseller's most users.
        #[arg(long)]
        max_users: Option<u64>,
        /// A reseller's traffic allowance, in GiB: what their users may use in all, resets
        /// and deleted users counted (and each needs a quota).
        #[arg(long)]
        max_traffic_gib: Option<f64>,
        /// The rate, in Mbit/s, a reseller's users over quota may be slowed to (with a
        /// traffic allowance and none given: cut off).
        #[arg(long)]
        max_slow_mbps: Option<f64>,
        /// How many days ahead a reseller's users' time may reach (each needs an end date).
        #[arg(long)]
        max_days: Option<u64>,
        /// A group a reseller may put users in (repeat for more): their users reach that
        /// group's nodes.
        #[arg(long = "group")]
        groups: Vec<String>,
    },
    /// List the admins, their roles and a reseller's limits and use.
    List,
    /// Remove every passkey of an admin (or the owner's, by the owner's login) who lost
    /// theirs: they sign in with their password alone again.
    ForgetPasskeys {
        /// Their login (the owner's too).
        login: String,
    },
    /// Give an admin a new password (printed once): they are signed out everywhere; with
    /// --end-tokens their API tokens end too (for a password that leaked).
    ResetPassword {
        /// Their login.
        login: String,
        /// End their API tokens too.
        #[arg(long)]
        end_tokens: bool,
    },
    /// Remove an admin: signed out, tokens revoked; the users they created stay.
    Remove {
        /// Their login.
        login: String,
        /// Remove without asking (the CLI never asks: this flag says you mean it).
        #[arg(long, required = true)]
        yes: bool,
    },
}

#[derive(Subcommand)]
enum ReleaseCommand {
    /// Sign node binaries as a release. Without --out it is added to this control at once;
    /// with --out (on the machine that keeps the release key) it is written to a directory
    /// for `release add`.
    Sign {
        /// The release key file (default: the data directory's).
        #[arg(long)]
        key: Option<PathBuf>,
        /// The version, like 0.2.0: nodes take only a newer one.
        #[arg(long)]
        version: String,
        /// How long nodes accept it, like 30d.
        #[arg(long, default_value = "30d")]
        expires: String,
        /// Write the signed release here instead of adding it.
        #[arg(long)]
        out: Option<PathBuf>,
        /// The hearth-node binaries: paths to ELF executables, or os-arch=path.
        #[arg(required = true)]
        binaries: Vec<String>,
    },
    /// Add a release signed elsewhere (a directory `release sign --out` wrote).
    Add {
        /// The directory.
        dir: PathBuf,
    },
    /// List releases and their rollouts.
    List,
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Show every key's id and public key, after checking the records against the root.
    Show,
    /// Replace the signing, release or root key. The root key (kept offline) certifies the
    /// new key; control, the edge and every node take it without enrolling again, and refuse
    /// the retired key from then on. Works while control runs.
    Rotate {
        /// signing, release or root.
        #[arg(long)]
        role: Role,
        /// The current root's secret key file.
        #[arg(long)]
        root_key: PathBuf,
        /// Rotating the root: where to write the new root's secret key (a new file; keep it
        /// offline). The old and the new root both sign the rotation.
        #[arg(long)]
        new_root_key: Option<PathBuf>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Init { hosts } => {
            let created = keyring::init(&cli.data_dir, &hosts, now())?;
            let paths = keyring::Paths::new(&cli.data_dir);
            out!("Initialised {}", cli.data_dir.display());
            out!("  root key      {} ({})", created.root.id(), created.root);
            out!("  signing key   {} (certified by root)", created.signing.id());
            out!("  release key   {} (certified by root)", created.release.id());
            out!("  recovery key  {} ({})", created.recovery.id(), created.recovery);
            let pin = tls::pin_of(&cli.data_dir.join("tls.crt"))?;
            out!("  TLS pin       sha256/{}", hex::encode(pin));
            out!();
            out!("Keep these two files offline, then delete them from this machine:");
            out!("  {}  (certifies and rotates every other key)", paths.secret(Role::Root).display());
            out!("  {}  (opens the recovery archive and snapshots)", paths.secret(Role::Recovery).display());
            out!();
            out!("Settings: {} (then `hearth-control serve`)", cli.data_dir.join(config::FILE).display());
        }
        Command::Serve => serve::run(&cli.data_dir)?,
        Command::User { command } => user_command(&cli.data_dir, command)?,
        Command::Node { command } => node_command(&cli.data_dir, command)?,
        Command::Group { command } => group_command(&cli.data_dir, command)?,
        Command::Restore { from_edge, edge_settings, recovery_key, from_snapshots, root_key } => {
            let options =
                restore::Options { edge_url: from_edge, edge_settings, recovery_key, root_key, from_snapshots };
            let report = restore::run(&cli.data_dir, &options)?;
            restore::print(&report, &cli.data_dir);
        }
        Command::Edge { command } => edge_command(&cli.data_dir, command)?,
        Command::Routing { command } => routing_cli::run(&cli.data_dir, command)?,
        Command::Import { source, file, url, token_file, links, dry_run } => {
            let from = import::From { file, url, token_file, links };
            let incoming = import::read(source, &from)?;
            let (_, db, signer) = serve::open(&cli.data_dir)?;
            let apply =
                move |tx: &rusqlite::Transaction<'_>| import::apply(tx, &signer, "cli", incoming, dry_run, now());
            let report = if dry_run { db.dry_run_blocking(apply)? } else { db.write_blocking(apply)? };
            print!("{}", report.text());
        }
        Command::Export { out } => {
            let (_, db, signer) = serve::open(&cli.data_dir)?;
            let document = db.read_blocking(move |c| import::json::export(c, &signer))?;
            let mut text = serde_json::to_string_pretty(&document).context("writing the document")?;
            text.push('\n');
            if out.as_os_str() == "-" {
                print!("{text}");
            } else {
                keyring::write_private(&out, text.as_bytes())?;
                eprintln!("{} users written to {} (as secret as their links)", document.users.len(), out.display());
            }
        }
        Command::Release { command } => release_command(&cli.data_dir, command)?,
        Command::Admin { command } => admin_command(&cli.data_dir, command)?,
        Command::Keys { command: KeysCommand::Rotate { role, root_key, new_root_key } } => {
            let rotated = keyring::rotate(&cli.data_dir, role, &root_key, new_root_key.as_deref(), now())?;
            for r in &rotated {
                out!("{:<8} {}  {}  (key record v{})", r.role, r.key.id(), r.key, r.version);
            }
            // Signs every stream again with the key in force; a running control switches at
            // its next signature.
            let (_, db, signer) = serve::open(&cli.data_dir)?;
            let serial = db.read_blocking(|c| store::get_state(c, "keys_serial"))?;
            drop(signer);
            out!("Rotation {serial} recorded; every stream was signed again.");
            out!("The edge takes the new records with the next push, nodes with their next pull.");
            if let Some(path) = new_root_key {
                out!("Keep {} offline with the recovery key; the old root key is retired.", path.display());
            }
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
                    out!("{role:<8} {}  {key}  ({source})", key.id());
                }
            }
        }
    }
    Ok(())
}

fn release_command(dir: &std::path::Path, command: ReleaseCommand) -> Result<()> {
    let now = now();
    match command {
        ReleaseCommand::Sign { key, version, expires, out, binaries } => {
            let key_path = key.unwrap_or_else(|| keyring::Paths::new(dir).secret(Role::Release));
            let key = keyring::load_key(&key_path, Role::Release).context("loading the release key")?;
            let binaries = binaries.iter().map(|spec| releases::read_binary(spec)).collect::<Result<Vec<_>>>()?;
            if let Some(warning) = releases::too_large_for_edges(&binaries) {
                eprintln!("warning: {warning}");
            }
            let lifetime = releases::parse_lifetime(&expires)?;
            // Added here at once: sign past the newest release this control holds, so two
            // releases signed within one second are both taken.
            let sequence = match &out {
                Some(_) => now,
                None => {
                    let (_, db, _) = serve::open(dir)?;
                    db.read_blocking(|conn| {
                        Ok(conn.query_row("SELECT COALESCE(MAX(version), 0) + 1 FROM releases", [], |row| {
                            row.get::<_, i64>(0)
                        })?)
                    })? as u64
                }
            };
            let envelope = releases::sign(&key, &version, lifetime, &binaries, now, sequence)?;
            for b in &binaries {
                out!(
                    "{}/{}  {} bytes  sha256 {}",
                    b.os,
                    b.arch,
                    b.bytes.len(),
                    hex::encode(hearth_shared::sha256(&b.bytes))
                );
            }
            match out {
                Some(out) => {
                    releases::write_dir(&out, &envelope, &binaries)?;
                    out!(
                        "release {version} signed into {}; on control: hearth-control release add {}",
                        out.display(),
                        out.display()
                    );
                }
                None => {
                    let files: Vec<(String, Vec<u8>)> = binaries
                        .into_iter()
                        .map(|b| {
                            (
                                hearth_shared::release::ReleaseFile { os: b.os, arch: b.arch, len: 0, sha256: [0; 32] }
                                    .name(),
                                b.bytes,
                            )
                        })
                        .collect();
                    let (_, db, _) = serve::open(dir)?;
                    let (release, _) =
                        db.write_blocking(|tx| Ok(releases::import(dir, tx, &envelope, &files, "cli", now)?))?;
                    out!(
                        "release {release} ({version}) added; roll it out from the admin panel or POST /api/releases/{release}/rollout"
                    );
                }
            }
        }
        ReleaseCommand::Add { dir: from } => {
            let (envelope, files) = releases::read_dir(&from)?;
            let (_, db, _) = serve::open(dir)?;
            let (release, manifest) =
                db.write_blocking(|tx| Ok(releases::import(dir, tx, &envelope, &files, "cli", now)?))?;
            out!("release {release} ({}) added", manifest.version);
        }
        ReleaseCommand::List => {
            let (_, db, _) = serve::open(dir)?;
            for r in db.read_blocking(releases::list)? {
                out!("{}", serde_json::to_string(&r)?);
            }
        }
    }
    Ok(())
}

fn user_command(dir: &std::path::Path, command: UserCommand) -> Result<()> {
    let (config, db, signer) = serve::open(dir)?;
    let (bases, primary) = links_of(&config, &db)?;
    let link = |token: &hearth_shared::wire::SubToken| format!("{primary}/{}", token.to_link_form());
    let now = now();
    match command {
        UserCommand::Add { name, quota_gib, days, start_on_first_use, reset, groups, note, speed } => {
            let mut input = UserInput {
                name: Some(name),
                quota: Some(quota_gib.checked_mul(1 << 30).context("quota is too large")?),
                days,
                start_on_first_use: Some(start_on_first_use),
                reset: Some(reset),
                note: Some(note),
                groups: (!groups.is_empty()).then_some(groups),
                ..UserInput::default()
            };
            speed.fill(&mut input, SpeedInput::default());
            let created = db.write_blocking(|tx| crate::users::create(tx, &signer, "cli", &input, now))?;
            out!("user {} added", created.id);
            out!("link: {}", link(&created.token));
        }
        UserCommand::List { search, status } => {
            let mut page = 1;
            out!("{:>6}  {:<24} {:<12} {:>12} {:>12}  groups", "id", "name", "status", "used MiB", "quota MiB");
            loop {
                let query = ListQuery {
                    q: search.clone(),
                    status: status.clone(),
                    page: Some(page),
                    per_page: Some(500),
                    ..ListQuery::default()
                };
                let list = db.read_blocking(|c| store::users::list(c, &query))?;
                for u in &list.users {
                    out!(
                        "{:>6}  {:<24} {:<12} {:>12} {:>12}  {}",
                        u.id,
                        u.name,
                        u.status,
                        (u.used_up + u.used_down) >> 20,
                        u.quota >> 20,
                        u.groups.join(",")
                    );
                }
                if page * list.per_page >= list.total {
                    break;
                }
                page += 1;
            }
        }
        UserCommand::Show { name } => {
            let (user, token) = db.read_blocking(|c| {
                let id = store::users::id_by_name(c, &name)?;
                Ok((store::users::get(c, id)?, store::users::token(c, &signer.vault, id)?))
            })?;
            out!("{}", serde_json::to_string_pretty(&user)?);
            out!("link: {}", link(&token));
            for base in bases.iter().filter(|b| b.state != store::edges::LinkState::Retired) {
                out!("link at {} ({}): {}/{}", base.edge, base.state.as_str(), base.base, token.to_link_form());
            }
        }
        UserCommand::Disable { name } => {
            let input = UserInput { enabled: Some(false), ..UserInput::default() };
            db.write_blocking(|tx| {
                let id = store::users::id_by_name(tx, &name)?;
                crate::users::update(tx, &signer, "cli", id, &input, now)
            })?;
            out!("user {name} disabled");
        }
        UserCommand::Enable { name } => {
            let input = UserInput { enabled: Some(true), ..UserInput::default() };
            let user = db.write_blocking(|tx| {
                let id = store::users::id_by_name(tx, &name)?;
                crate::users::update(tx, &signer, "cli", id, &input, now)
            })?;
            out!("user {name} enabled ({})", user.status);
        }
        UserCommand::Extend { name, days } => {
            let user = db.write_blocking(|tx| {
                let id = store::users::id_by_name(tx, &name)?;
                crate::users::extend(tx, &signer, "cli", id, days, now)
            })?;
            if user.expires_at == 0 {
                out!("user {name}: {} days from the first connection", user.duration_days);
            } else {
                out!("user {name} expires {}", crate::clock::civil_date(user.expires_at));
            }
        }
        UserCommand::Set {
            name,
            rename,
            quota_gib,
            days,
            start_on_first_use,
            no_expiry,
            reset,
            groups,
            device_limit,
            rule_set,
            note,
        } => {
            let input = UserInput {
                name: rename,
                quota: quota_gib.map(|gib| gib.saturating_mul(1 << 30)),
                days,
                start_on_first_use: start_on_first_use.then_some(true),
                expires_at: no_expiry.then_some(0),
                reset,
                groups: (!groups.is_empty()).then_some(groups),
                device_limit,
                rule_set,
                note,
                ..UserInput::default()
            };
            let user = db.write_blocking(|tx| {
                let id = store::users::id_by_name(tx, &name)?;
                crate::users::update(tx, &signer, "cli", id, &input, now)
            })?;
            out!("{}", serde_json::to_string_pretty(&user)?);
        }
        UserCommand::Delete { name, yes: _ } => {
            db.write_blocking(|tx| {
                let id = store::users::id_by_name(tx, &name)?;
                crate::users::delete(tx, &signer, "cli", id, now)
            })?;
            out!("user {name} deleted");
        }
        UserCommand::Limit { name, speed } => {
            let user = db.write_blocking(|tx| {
                let id = store::users::id_by_name(tx, &name)?;
                let mut input = UserInput::default();
                speed.fill(&mut input, store::users::get(tx, id)?.speed_limit);
                crate::users::update(tx, &signer, "cli", id, &input, now)
            })?;
            let side = |own: Option<Mbps>| match own {
                None => "the groups' default".to_owned(),
                Some(Mbps(0)) => "no limit".to_owned(),
                Some(m) => format!("{} Mbit/s", m.0 as f64 / 1000.0),
            };
            out!("user {name}: up {}, down {}", side(user.speed_limit.up), side(user.speed_limit.down));
            match user.on_quota.as_str() {
                "slow" => out!("over quota: slowed to {}", side(Some(user.slow_speed))),
                "cut" => out!("over quota: cut off"),
                _ => out!("over quota: as its groups say"),
            }
        }
        UserCommand::Rotate { name } => {
            let token = db.write_blocking(|tx| {
                let id = store::users::id_by_name(tx, &name)?;
                crate::users::rotate(tx, &signer, "cli", id, now)
            })?;
            out!("new link: {}", link(&token));
        }
    }
    Ok(())
}

/// Every edge's link base, and the primary one, as `serve` has them.
fn links_of(config: &config::Config, db: &store::Db) -> Result<(Vec<app::LinkBase>, String)> {
    let bases = app::link_bases(config, &config.sub_url, db.read_blocking(store::edges::list)?);
    let primary = app::primary(&bases).unwrap_or_else(|| config.sub_url.clone());
    Ok((bases, primary))
}

fn edge_command(dir: &std::path::Path, command: EdgeCommand) -> Result<()> {
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

fn group_command(dir: &std::path::Path, command: GroupCommand) -> Result<()> {
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

fn admin_command(dir: &std::path::Path, command: AdminCommand) -> Result<()> {
    use store::admins;
    let (_, db, _) = serve::open(dir)?;
    let now = now();
    match command {
        AdminCommand::Add { login, role, max_users, max_traffic_gib, max_slow_mbps, max_days, groups } => {
            let role = auth::Role::parse(&role)
                .with_context(|| format!("unknown role {role:?}: give admin, operator, read-only or reseller"))?;
            let reseller = role == auth::Role::Reseller;
            let input = admins::AdminInput {
                login: Some(login),
                role: Some(role),
                max_users: max_users.map(Some),
                max_traffic: max_traffic_gib.map(|gib| Some((gib.max(0.0) * 1_073_741_824.0) as u64)),
                max_slow_speed: max_slow_mbps
                    .map(|mbps| store::users::Mbps::parse(mbps).map(Some).map_err(anyhow::Error::msg))
                    .transpose()?,
                max_days: max_days.map(Some),
                groups: (reseller || !groups.is_empty()).then_some(groups),
                password: None,
                end_tokens: false,
            };
            let password = secrets::random_token();
            let hasher = auth::Hasher::new();
            let hash =
                tokio::runtime::Builder::new_current_thread().build()?.block_on(hasher.hash(password.clone()))?;
            let admin = db.write_blocking(|tx| admins::create(tx, "cli", &input, &hash, now))?;
            out!("admin {} added ({})", admin.login, admin.role.as_str());
            out!("  password  {password}");
            out!("  (shown once: give it to them; the owner can set another in the panel)");
        }
        AdminCommand::List => {
            out!("{:<24} {:<10} {:>6} {:>10} {:>12}  groups", "login", "role", "users", "max users", "max GiB");
            for a in db.read_blocking(admins::list)? {
                let limit = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
                let gib = a.max_traffic.map_or("-".to_owned(), |b| format!("{:.1}", b as f64 / 1_073_741_824.0));
                out!(
                    "{:<24} {:<10} {:>6} {:>10} {:>12}  {}",
                    a.login,
                    a.role.as_str(),
                    a.users,
                    limit(a.max_users),
                    gib,
                    a.groups.join(",")
                );
            }
        }
        AdminCommand::ForgetPasskeys { login } => {
            let removed = db.write_blocking(|tx| {
                let owner = auth::owner(tx)?.is_some_and(|(name, _)| name.eq_ignore_ascii_case(login.trim()));
                let (admin, who) = if owner {
                    (None, "owner".to_owned())
                } else {
                    (Some(admins::id_of(tx, &login)?), format!("admin {}", login.trim()))
                };
                store::passkeys::forget_all(tx, "cli", admin, &who, now)
            })?;
            out!("{removed} passkeys of {login} removed");
        }
        AdminCommand::ResetPassword { login, end_tokens } => {
            let password = secrets::random_token();
            let hasher = auth::Hasher::new();
            let hash =
                tokio::runtime::Builder::new_current_thread().build()?.block_on(hasher.hash(password.clone()))?;
            let input = admins::AdminInput { end_tokens, ..Default::default() };
            db.write_blocking(|tx| {
                let id = admins::id_of(tx, &login)?;
                admins::update(tx, "cli", id, &input, Some(&hash), now)
            })?;
            out!(
                "admin {login}: new password, signed out everywhere{}",
                if end_tokens { ", API tokens ended" } else { "" }
            );
            out!("  password  {password}");
            out!("  (shown once: give it to them)");
        }
        AdminCommand::Remove { login, yes: _ } => {
            db.write_blocking(|tx| {
                let id = admins::id_of(tx, &login)?;
                admins::remove(tx, "cli", id, now)
            })?;
            out!("admin {login} removed");
        }
    }
    Ok(())
}

fn node_command(dir: &std::path::Path, command: NodeCommand) -> Result<()> {
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
