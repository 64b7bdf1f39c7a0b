//! `hearth-control user`: adding, listing, showing, changing, limiting and deleting users
//! from the shell, through the same domain functions (and checks) as the admin API.

use std::path::Path;

use anyhow::{Context as _, Result};
use clap::Subcommand;
use hearth_shared::RateError;
use hearth_shared::wire::SubToken;

use super::links::links_of;
use crate::app::{LinkBase, now};
use crate::publish::Signer;
use crate::serve;
use crate::store::users::{ListQuery, Mbps, SpeedInput, UserInput, UserView};
use crate::store::{self, Db};

/// What `user` does.
#[derive(Subcommand)]
pub(crate) enum UserCommand {
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
pub(crate) struct SpeedArgs {
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

/// Why a speed on the command line was refused (clap prints it after the value).
#[derive(Debug, thiserror::Error)]
enum SpeedArgError {
    /// Not a number.
    #[error("{0:?} is not a number of Mbit/s")]
    NotANumber(String),
    /// A number, but not a speed the panel takes.
    #[error(transparent)]
    Speed(#[from] RateError),
}

/// Why a device limit on the command line was refused.
#[derive(Debug, thiserror::Error)]
#[error("a device limit is 0 to {max} or `group`", max = store::users::MAX_DEVICES)]
struct DeviceLimitError;

fn speed(text: &str) -> Result<Mbps, SpeedArgError> {
    let mbps = text.parse::<f64>().map_err(|_| SpeedArgError::NotANumber(text.to_owned()))?;
    Ok(Mbps::parse(mbps)?)
}

fn device_limit(text: &str) -> Result<store::users::DeviceLimit, DeviceLimitError> {
    match text {
        "group" => Ok(store::users::DeviceLimit::Group),
        n => match n.parse::<u32>() {
            Ok(n) if n <= store::users::MAX_DEVICES => Ok(store::users::DeviceLimit::Own(n)),
            _ => Err(DeviceLimitError),
        },
    }
}

fn own_speed(text: &str) -> Result<Own, SpeedArgError> {
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

/// Runs a `user` command on the data directory `dir`.
pub(crate) fn run(dir: &Path, command: UserCommand) -> Result<()> {
    let (config, db, signer) = serve::open(dir)?;
    let (bases, primary) = links_of(&config, &db)?;
    let users = Users { db, signer, bases, primary, now: now() };
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
            users.add(&input)
        }
        UserCommand::List { search, status } => users.list(search.as_deref(), status.as_deref()),
        UserCommand::Show { name } => users.show(&name),
        UserCommand::Disable { name } => users.disable(&name),
        UserCommand::Enable { name } => users.enable(&name),
        UserCommand::Extend { name, days } => users.extend(&name, days),
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
            users.set(&name, &input)
        }
        UserCommand::Delete { name, yes: _ } => users.delete(&name),
        UserCommand::Limit { name, speed } => users.limit(&name, speed),
        UserCommand::Rotate { name } => users.rotate(&name),
    }
}

/// What every `user` subcommand works with: the database, the signer, where links are served
/// and the time it runs at.
struct Users {
    db: Db,
    signer: Signer,
    /// Every edge's link base.
    bases: Vec<LinkBase>,
    /// The primary link base: the one links are printed at.
    primary: String,
    now: u64,
}

impl Users {
    /// A user's link at the primary link base.
    fn link(&self, token: &SubToken) -> String {
        format!("{}/{}", self.primary, token.to_link_form())
    }

    /// `user add`: creates the user and prints its link.
    fn add(&self, input: &UserInput) -> Result<()> {
        let created = self.db.write_blocking(|tx| crate::users::create(tx, &self.signer, "cli", input, self.now))?;
        out!("user {} added", created.id);
        out!("link: {}", self.link(&created.token));
        Ok(())
    }

    /// `user list`: every user matching, a page of 500 at a time.
    fn list(&self, search: Option<&str>, status: Option<&str>) -> Result<()> {
        let mut page = 1;
        out!("{:>6}  {:<24} {:<12} {:>12} {:>12}  groups", "id", "name", "status", "used MiB", "quota MiB");
        loop {
            let query = ListQuery {
                q: search.map(str::to_owned),
                status: status.map(str::to_owned),
                page: Some(page),
                per_page: Some(500),
                ..ListQuery::default()
            };
            let list = self.db.read_blocking(|c| store::users::list(c, &query))?;
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
        Ok(())
    }

    /// `user show`: the user, its link, and its link at every edge not retired.
    fn show(&self, name: &str) -> Result<()> {
        let (user, token) = self.db.read_blocking(|c| {
            let id = store::users::id_by_name(c, name)?;
            Ok((store::users::get(c, id)?, store::users::token(c, &self.signer.vault, id)?))
        })?;
        out!("{}", serde_json::to_string_pretty(&user)?);
        out!("link: {}", self.link(&token));
        for base in self.bases.iter().filter(|b| b.state != store::edges::LinkState::Retired) {
            out!("link at {} ({}): {}/{}", base.edge, base.state.as_str(), base.base, token.to_link_form());
        }
        Ok(())
    }

    /// `user disable`.
    fn disable(&self, name: &str) -> Result<()> {
        let input = UserInput { enabled: Some(false), ..UserInput::default() };
        self.update(name, &input)?;
        out!("user {name} disabled");
        Ok(())
    }

    /// `user enable`: prints the status it is back in.
    fn enable(&self, name: &str) -> Result<()> {
        let input = UserInput { enabled: Some(true), ..UserInput::default() };
        let user = self.update(name, &input)?;
        out!("user {name} enabled ({})", user.status);
        Ok(())
    }

    /// `user extend`: prints the new expiry (or the days counted from the first connection).
    fn extend(&self, name: &str, days: u64) -> Result<()> {
        let user = self.db.write_blocking(|tx| {
            let id = store::users::id_by_name(tx, name)?;
            crate::users::extend(tx, &self.signer, "cli", id, days, self.now)
        })?;
        if user.expires_at == 0 {
            out!("user {name}: {} days from the first connection", user.duration_days);
        } else {
            out!("user {name} expires {}", crate::clock::civil_date(user.expires_at));
        }
        Ok(())
    }

    /// `user set`: prints the user as changed.
    fn set(&self, name: &str, input: &UserInput) -> Result<()> {
        let user = self.update(name, input)?;
        out!("{}", serde_json::to_string_pretty(&user)?);
        Ok(())
    }

    /// `user delete`.
    fn delete(&self, name: &str) -> Result<()> {
        self.db.write_blocking(|tx| {
            let id = store::users::id_by_name(tx, name)?;
            crate::users::delete(tx, &self.signer, "cli", id, self.now)
        })?;
        out!("user {name} deleted");
        Ok(())
    }

    /// `user limit`: sets the speed over the limit held, and prints what is in force.
    fn limit(&self, name: &str, speed: SpeedArgs) -> Result<()> {
        let user = self.db.write_blocking(|tx| {
            let id = store::users::id_by_name(tx, name)?;
            let mut input = UserInput::default();
            speed.fill(&mut input, store::users::get(tx, id)?.speed_limit);
            crate::users::update(tx, &self.signer, "cli", id, &input, self.now)
        })?;
        let side = |own: Option<Mbps>| match own {
            None => "the groups' default".to_owned(),
            Some(m) if m.0.is_zero() => "no limit".to_owned(),
            Some(m) => m.0.to_string(),
        };
        out!("user {name}: up {}, down {}", side(user.speed_limit.up), side(user.speed_limit.down));
        match user.on_quota.as_str() {
            "slow" => out!("over quota: slowed to {}", side(Some(user.slow_speed))),
            "cut" => out!("over quota: cut off"),
            _ => out!("over quota: as its groups say"),
        }
        Ok(())
    }

    /// `user rotate`: prints the new link.
    fn rotate(&self, name: &str) -> Result<()> {
        let token = self.db.write_blocking(|tx| {
            let id = store::users::id_by_name(tx, name)?;
            crate::users::rotate(tx, &self.signer, "cli", id, self.now)
        })?;
        out!("new link: {}", self.link(&token));
        Ok(())
    }

    /// Changes the user called `name` by `input`.
    fn update(&self, name: &str, input: &UserInput) -> Result<UserView> {
        Ok(self.db.write_blocking(|tx| {
            let id = store::users::id_by_name(tx, name)?;
            crate::users::update(tx, &self.signer, "cli", id, input, self.now)
        })?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What clap prints after a refused value: the same words as before the errors had types.
    #[test]
    fn values_refused_say_why() {
        assert_eq!(speed("fast").unwrap_err().to_string(), "\"fast\" is not a number of Mbit/s");
        assert_eq!(speed("-1").unwrap_err().to_string(), "a speed is a number of Mbit/s from 0 to 100000");
        let below = own_speed("0.0001").err().map(|e| e.to_string());
        assert_eq!(below.as_deref(), Some("a speed is at least 0.001 Mbit/s (or 0 for none)"));
        assert_eq!(device_limit("1001").unwrap_err().to_string(), "a device limit is 0 to 1000 or `group`");
        assert_eq!(speed("0.5").map(Mbps::stored).ok(), Some(500));
        assert!(matches!(own_speed("group"), Ok(Own(None))));
        assert_eq!(device_limit("group").ok(), Some(store::users::DeviceLimit::Group));
    }
}
