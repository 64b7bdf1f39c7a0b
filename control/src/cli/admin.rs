//! `hearth-control admin`: admin accounts besides the owner (full admins, operators,
//! read-only admins and resellers), their passwords and passkeys.

use std::path::Path;

use anyhow::{Context as _, Result};
use clap::Subcommand;

use crate::app::now;
use crate::{auth, secrets, serve, store};

/// What `admin` does.
#[derive(Subcommand)]
pub(crate) enum AdminCommand {
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

/// Runs an `admin` command on the data directory `dir`.
pub(crate) fn run(dir: &Path, command: AdminCommand) -> Result<()> {
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
                max_slow_speed: max_slow_mbps.map(|mbps| store::users::Mbps::parse(mbps).map(Some)).transpose()?,
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
