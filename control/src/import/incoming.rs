//! What every reader makes of its source: the users it found, and those it skipped and why.

use serde::{Deserialize, Serialize};

/// The longest Hysteria2 password taken (what an app holds; other panels make far shorter).
pub(crate) const MAX_PASSWORD: usize = 256;
/// The most users one import takes.
pub(crate) const MAX_USERS: usize = 100_000;
/// The most aliases one user takes.
pub(crate) const MAX_ALIASES: usize = 8;

/// One user as a source describes it (and as the Hearth JSON format writes it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IncomingUser {
    /// The user's id at the source (its email in 3x-ui, username in Marzban, uuid in
    /// Remnawave): with the source, what tells an import run again that it has the user.
    pub id: String,
    /// The name in Hearth.
    pub name: String,
    /// The Hysteria2 password the user's apps hold; none: a new one (its apps need the new
    /// link or the alias).
    #[serde(default)]
    pub password: Option<String>,
    /// A Hearth link token (the link form) to keep: from another Hearth's export.
    #[serde(default)]
    pub link: Option<String>,
    /// Traffic quota in bytes, up and down together (0: none).
    #[serde(default)]
    pub quota: u64,
    /// Traffic used so far.
    #[serde(default)]
    pub used_up: u64,
    #[serde(default)]
    pub used_down: u64,
    /// Expiry, Unix seconds (0: never).
    #[serde(default)]
    pub expires_at: u64,
    /// Not started yet: valid this many days from the first connection.
    #[serde(default)]
    pub days_from_first_use: u64,
    /// Whether the user may connect.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// none, daily, weekly, monthly or rolling30.
    #[serde(default = "none")]
    pub reset: String,
    #[serde(default)]
    pub note: String,
    /// Devices at once (none: its groups').
    #[serde(default)]
    pub device_limit: Option<u32>,
    /// Old subscription paths (`/sub/<token>`) to serve as aliases.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// The user's own Telegram chat, for the bot's reminders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telegram_id: Option<i64>,
    /// When its traffic first goes back to zero, Unix seconds (0: as its reset says, from
    /// now): the old panel's next renewal, so the cycle it paid for carries on.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub next_reset: u64,
    /// What the source had that came over changed, in words (for the report).
    #[serde(skip)]
    pub mapped: Vec<String>,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn yes() -> bool {
    true
}

fn none() -> String {
    "none".to_owned()
}

/// A user a source has that is not imported, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Skipped {
    /// The user's id or name at the source.
    pub id: String,
    pub reason: String,
}

/// What became of one of the source's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Fate {
    /// Taken as it is.
    Kept,
    /// Taken as Hearth's nearest equivalent.
    Mapped,
    /// Not taken.
    Dropped,
}

/// One of the source's fields, and what became of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Field {
    /// Its name at the source.
    pub field: &'static str,
    pub fate: Fate,
    /// Where it went, or why not.
    pub how: &'static str,
}

/// What a source holds, read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Incoming {
    /// The source's name (`3x-ui`, `marzban`, `pasarguard`, `remnawave`, `hearth`).
    pub source: String,
    pub users: Vec<IncomingUser>,
    /// What the source has that is not a user Hearth can take (another protocol's client).
    pub skipped: Vec<Skipped>,
    /// Every field of the source's users, and what became of it.
    pub fields: Vec<Field>,
    /// What the reader noticed about the source as a whole (a database read without its
    /// write-ahead log).
    pub warnings: Vec<String>,
}
