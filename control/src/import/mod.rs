//! Moving in from another panel without losing anyone: users come with the Hysteria2 password
//! their apps hold (so a single imported link keeps connecting through Hearth's nodes) and
//! their old subscription paths become aliases every edge serves (so a subscription in an app
//! keeps updating, once the old domain points at an edge).
//!
//! Each source is read into an [`Incoming`] (users, and what is skipped and why); [`apply`]
//! takes it in one transaction, all or nothing, and a user already imported (by its source
//! and id there) is left as it is, so an import run twice changes nothing the second time. A
//! dry run does all the same and rolls it back. The Hearth JSON format ([`Document`]) is both
//! an importer's input and what `export` writes, so nobody is locked in.

mod fetch;
mod incoming;
pub(crate) mod json;
pub(crate) mod marzban;
pub(crate) mod remnawave;
pub(crate) mod xui;

use fetch::read_capped;
pub(crate) use incoming::{Fate, Field, Incoming, IncomingUser, MAX_ALIASES, MAX_PASSWORD, MAX_USERS, Skipped};

use std::collections::HashSet;

use hearth_shared::wire::{SubToken, UserId};
use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::publish::Signer;
use crate::store::changes::Changes;
use crate::store::users::{DeviceLimit, UserInput};
use crate::store::{aliases, audit, user_import};

/// The panels users are taken over from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Source {
    /// A Hearth users document (JSON): what `export` writes, or any script.
    Hearth,
    /// 3x-ui (or an x-ui fork with Hysteria): its SQLite database file.
    #[value(name = "3x-ui")]
    Xui,
    /// Remnawave: its REST API, with an API token.
    Remnawave,
    /// Marzban: its database (SQLite file or MySQL dump), or its REST API with an admin token.
    Marzban,
    /// PasarGuard: its database (SQLite file or MySQL dump), or its REST API with an admin
    /// token.
    #[value(name = "pasarguard")]
    PasarGuard,
}

impl Source {
    /// The source of this name (as the CLI and the API take it).
    pub(crate) fn named(name: &str) -> Result<Source, Error> {
        <Source as clap::ValueEnum>::from_str(name, true).map_err(|_| {
            let names: Vec<String> = <Source as clap::ValueEnum>::value_variants()
                .iter()
                .filter_map(|s| clap::ValueEnum::to_possible_value(s).map(|v| v.get_name().to_owned()))
                .collect();
            Error::invalid("bad_source", format!("source must be one of {}", names.join(", ")))
        })
    }
}

/// Where a source is read from (as the CLI names it).
#[derive(Clone, Debug, Default)]
pub(crate) struct From {
    /// A database file or document (`-`: standard input).
    pub file: Option<std::path::PathBuf>,
    /// A panel's address, for its REST API.
    pub url: Option<String>,
    /// A file holding the panel's API token.
    pub token_file: Option<std::path::PathBuf>,
    /// A list of the old links in use (an access log), checked against the database's secret.
    pub links: Option<std::path::PathBuf>,
}

/// Reads what `source` holds.
pub(crate) fn read(source: Source, from: &From) -> anyhow::Result<Incoming> {
    use anyhow::Context as _;
    match source {
        Source::Hearth => {
            let file = from.file.as_deref().context("import hearth reads a document: give --file (or --file -)")?;
            let bytes = if file.as_os_str() == "-" {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(
                    &mut std::io::Read::take(std::io::stdin(), json::MAX_BYTES as u64 + 1),
                    &mut bytes,
                )
                .context("reading standard input")?;
                bytes
            } else {
                read_capped(file, json::MAX_BYTES)?
            };
            Ok(json::read(&bytes)?)
        }
        Source::Xui => {
            let file =
                from.file.as_deref().context("import 3x-ui reads its database: give --file /etc/x-ui/x-ui.db")?;
            xui::read(file, crate::clock::now())
        }
        Source::Remnawave => {
            let url =
                from.url.as_deref().context("import remnawave reads its API: give --url https://panel.example")?;
            let file = from.token_file.as_deref().context("give --token-file: a file holding a Remnawave API token")?;
            let token = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(remnawave::read(url, &token))
        }
        Source::Marzban | Source::PasarGuard => {
            let flavor = if source == Source::Marzban { marzban::Flavor::Marzban } else { marzban::Flavor::PasarGuard };
            match (&from.file, &from.url) {
                (Some(file), _) => match &from.links {
                    Some(links) => {
                        let list =
                            std::fs::File::open(links).with_context(|| format!("reading {}", links.display()))?;
                        marzban::read_file(file, flavor, Some(&mut std::io::BufReader::new(list)))
                    }
                    None => marzban::read_file(file, flavor, None),
                },
                (None, Some(url)) => {
                    anyhow::ensure!(
                        from.links.is_none(),
                        "old links are checked with the panel's database: give --file with --links"
                    );
                    let file =
                        from.token_file.as_deref().context("give --token-file: a file holding an admin token")?;
                    let token = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
                    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                    runtime.block_on(marzban::read_api(url, &token, flavor))
                }
                (None, None) => anyhow::bail!(
                    "give --file (its database: an SQLite file or a MySQL dump) or --url and --token-file (its API)"
                ),
            }
        }
    }
}

/// Reads what `source` holds from the bytes of its file (an upload to the panel).
pub(crate) async fn read_bytes(source: Source, bytes: Vec<u8>) -> Result<Incoming, Error> {
    match source {
        Source::Hearth => json::read(&bytes),
        // A database is read from a file of its own (SQLite reads files), gone afterwards.
        Source::Xui => tokio::task::spawn_blocking(move || {
            let dir = tempfile::tempdir().map_err(|e| Error::Internal(format!("a temporary directory: {e}")))?;
            let path = dir.path().join("x-ui.db");
            std::fs::write(&path, &bytes).map_err(|e| Error::Internal(format!("writing the upload: {e}")))?;
            xui::read(&path, crate::clock::now()).map_err(|e| Error::invalid("bad_source_file", format!("{e:#}")))
        })
        .await
        .map_err(|e| Error::Internal(format!("reading the upload: {e}")))?,
        // A panel read over its API: the body names it.
        Source::Remnawave => {
            let api = Api::of(&bytes)?;
            remnawave::read(&api.url, &api.token).await.map_err(|e| Error::invalid("source_refused", format!("{e:#}")))
        }
        // Their API (a JSON body naming it), or their database.
        Source::Marzban | Source::PasarGuard => {
            let flavor = if source == Source::Marzban { marzban::Flavor::Marzban } else { marzban::Flavor::PasarGuard };
            if bytes.trim_ascii_start().starts_with(b"{") {
                let api = Api::of(&bytes)?;
                return marzban::read_api(&api.url, &api.token, flavor)
                    .await
                    .map_err(|e| Error::invalid("source_refused", format!("{e:#}")));
            }
            tokio::task::spawn_blocking(move || {
                marzban::read_bytes(&bytes, flavor).map_err(|e| Error::invalid("bad_source_file", format!("{e:#}")))
            })
            .await
            .map_err(|e| Error::Internal(format!("reading the upload: {e}")))?
        }
    }
}

/// A panel's API, as an upload names it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Api {
    url: String,
    token: String,
}

impl Api {
    fn of(bytes: &[u8]) -> Result<Api, Error> {
        serde_json::from_slice(bytes)
            .map_err(|e| Error::invalid("bad_json", format!("send {{\"url\": ..., \"token\": ...}}: {e}")))
    }
}

/// What an import did (or, dry, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Report {
    pub source: String,
    pub dry_run: bool,
    /// Users added: name, id at the source, whether the password was kept, aliases.
    pub imported: Vec<ImportedUser>,
    /// Users imported before (nothing changed).
    pub unchanged: usize,
    pub skipped: Vec<Skipped>,
    /// Every field of the source's users, and what became of it.
    pub fields: Vec<Field>,
    pub warnings: Vec<String>,
}

/// One user an import added.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct ImportedUser {
    pub user: UserId,
    pub name: String,
    pub id: String,
    pub password_kept: bool,
    pub link_kept: bool,
    pub aliases: usize,
    /// What came over changed, in words ("its note was cut to 1000 bytes").
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
}

impl Report {
    /// The report as the CLI prints it.
    pub(crate) fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let verb = if self.dry_run { "would import" } else { "imported" };
        let _ = writeln!(
            out,
            "{} from {}: {verb} {} users",
            if self.dry_run { "dry run" } else { "import" },
            self.source,
            self.imported.len()
        );
        for user in &self.imported {
            let _ = writeln!(
                out,
                "  {} ({}): password {}, {} alias{}",
                user.name,
                user.id,
                if user.password_kept { "kept" } else { "new" },
                user.aliases,
                if user.aliases == 1 { "" } else { "es" }
            );
            for changed in &user.changed {
                let _ = writeln!(out, "    {changed}");
            }
        }
        if self.unchanged > 0 {
            let _ = writeln!(out, "already imported, left as they are: {}", self.unchanged);
        }
        for warning in &self.warnings {
            let _ = writeln!(out, "warning: {warning}");
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(out, "skipped: {}", self.skipped.len());
            for skipped in &self.skipped {
                let _ = writeln!(out, "  {}: {}", skipped.id, skipped.reason);
            }
        }
        if !self.fields.is_empty() {
            let _ = writeln!(out, "fields of {}:", self.source);
            for field in &self.fields {
                let fate = match field.fate {
                    Fate::Kept => "kept",
                    Fate::Mapped => "mapped",
                    Fate::Dropped => "dropped",
                };
                let _ = writeln!(out, "  {} {fate}: {}", field.field, field.how);
            }
        }
        out
    }
}

/// Why one user cannot be taken (it is skipped, the rest go on).
fn refuse(user: &IncomingUser, reason: impl Into<String>) -> Skipped {
    // By the name people know it by, and its id there when that is something else (a number
    // in PasarGuard, a uuid in Remnawave).
    let id = if user.name.is_empty() || user.name == user.id {
        user.id.clone()
    } else {
        format!("{} ({})", user.name, user.id)
    };
    Skipped { id, reason: reason.into() }
}

/// An imported Hysteria2 password an app cannot present.
#[derive(Debug, thiserror::Error)]
#[error("its Hysteria2 password is not 1 to {MAX_PASSWORD} bytes of printable text")]
struct BadPassword;

/// A password an app can present, or why not.
fn check_password(password: &str) -> Result<(), BadPassword> {
    if password.is_empty() || password.len() > MAX_PASSWORD || password.chars().any(char::is_control) {
        return Err(BadPassword);
    }
    Ok(())
}

/// Takes `incoming` into the database in the caller's transaction (`dry_run`: the caller rolls
/// it back). A user imported before is left as it is; a user that cannot be taken (its name or
/// password is another user's, a field is out of bounds) is skipped with the reason; a source
/// with too many users is refused whole.
pub(crate) fn apply(
    conn: &Connection,
    signer: &Signer,
    actor: &str,
    incoming: Incoming,
    dry_run: bool,
    now: u64,
) -> Result<Report, Error> {
    if incoming.users.len() > MAX_USERS {
        return Err(Error::invalid("too_many_users", format!("an import takes at most {MAX_USERS} users")));
    }
    let mut report = Report {
        source: incoming.source.clone(),
        dry_run,
        skipped: incoming.skipped,
        fields: incoming.fields,
        warnings: incoming.warnings,
        ..Report::default()
    };
    let mut changes = Changes::default();
    let mut passwords = HashSet::new();
    let mut aliased = false;
    for user in incoming.users {
        let key = format!("{}:{}", incoming.source, user.id);
        if user_import::imported_as(conn, &key)?.is_some() {
            report.unchanged += 1;
            continue;
        }
        match take(conn, signer, &user, &key, &mut passwords, now) {
            Ok(Err(skipped)) => report.skipped.push(skipped),
            Ok(Ok(imported)) => {
                aliased |= imported.aliases > 0;
                changes.user(conn, imported.user)?;
                report.imported.push(imported);
            }
            Err(e) => return Err(e),
        }
    }
    crate::publish::changes(conn, signer, changes, now)?;
    if aliased {
        crate::publish::publish_edge_settings(conn, signer, now)?;
    }
    if !dry_run && !report.imported.is_empty() {
        let detail = format!("{} users ({} skipped)", report.imported.len(), report.skipped.len());
        audit(conn, now, actor, "import", &incoming.source, &detail)?;
    }
    Ok(report)
}

/// Takes one user: `Ok(Err(_))` when it is skipped (nothing of it stored).
fn take(
    conn: &Connection,
    signer: &Signer,
    user: &IncomingUser,
    key: &str,
    passwords: &mut HashSet<[u8; 32]>,
    now: u64,
) -> Result<Result<ImportedUser, Skipped>, Error> {
    let password = match password_of(conn, user, passwords)? {
        Ok(password) => password,
        Err(skipped) => return Ok(Err(skipped)),
    };
    let token = match token_of(conn, user)? {
        Ok(token) => token,
        Err(skipped) => return Ok(Err(skipped)),
    };
    if user.aliases.len() > MAX_ALIASES {
        return Ok(Err(refuse(user, format!("it has more than {MAX_ALIASES} old subscription paths"))));
    }
    let Mapped { input, next_reset, changed } = mapped(user, now);
    // A savepoint: a user refused half-way leaves nothing behind.
    let stored = user_import::in_savepoint(conn, || -> Result<UserId, Error> {
        let id = crate::store::users::insert_imported(conn, &signer.vault, &input, token, &password, key, now)?;
        user_import::set_usage(conn, id, user.used_up, user.used_down)?;
        for path in &user.aliases {
            aliases::add(conn, id, path, key.split(':').next().unwrap_or_default(), now)?;
        }
        if user.telegram_id.is_some() {
            crate::store::telegram::set_user_chat(conn, id, user.telegram_id)?;
        }
        if next_reset > now && user.reset != "none" {
            user_import::set_next_reset(conn, id, next_reset)?;
        }
        Ok(id)
    })?;
    match stored {
        Ok(id) => Ok(Ok(ImportedUser {
            user: id,
            name: user.name.clone(),
            id: user.id.clone(),
            password_kept: user.password.is_some(),
            link_kept: user.link.is_some(),
            aliases: user.aliases.len(),
            changed,
        })),
        Err(Error::Invalid { message, .. } | Error::Conflict { message, .. }) => Ok(Err(refuse(user, message))),
        Err(e) => Err(e),
    }
}

/// The Hysteria2 password a user comes with: its own, or a new one when it has none. Skipped
/// when its own is not one an app can present, or is another user's (stored, or taken by
/// this import so far: `passwords`).
fn password_of(
    conn: &Connection,
    user: &IncomingUser,
    passwords: &mut HashSet<[u8; 32]>,
) -> Result<Result<String, Skipped>, Error> {
    let Some(password) = &user.password else {
        return Ok(Ok(crate::secrets::random_credential()));
    };
    if let Err(reason) = check_password(password) {
        return Ok(Err(refuse(user, reason.to_string())));
    }
    let hash = hearth_shared::sha256(password.as_bytes());
    let taken = user_import::credential_taken(conn, &hash)?;
    if taken || !passwords.insert(hash) {
        return Ok(Err(refuse(user, "its Hysteria2 password is another user's: a node could not tell them apart")));
    }
    Ok(Ok(password.clone()))
}

/// The subscription link a user comes with: its own Hearth token, or a new one when it has
/// none. Skipped when its own is not a Hearth token, or is another user's.
fn token_of(conn: &Connection, user: &IncomingUser) -> Result<Result<SubToken, Skipped>, Error> {
    let token = match &user.link {
        Some(link) => match SubToken::parse(link.rsplit('/').next().unwrap_or_default()) {
            Some(token) => token,
            None => return Ok(Err(refuse(user, "its link is not a Hearth subscription token"))),
        },
        None => SubToken::generate(&mut rand_core::OsRng),
    };
    let taken = user_import::token_taken(conn, &token.hash())?;
    if taken {
        return Ok(Err(refuse(user, "its link is another user's")));
    }
    Ok(Ok(token))
}

/// What Hearth makes of an incoming user's fields.
struct Mapped {
    /// The user as Hearth stores it.
    input: UserInput,
    /// When its traffic first goes back to zero (0: as its reset says, from the import).
    next_reset: u64,
    /// What came over changed, in words: the source's (see [`IncomingUser::mapped`]) and
    /// Hearth's own.
    changed: Vec<String>,
}

/// An incoming user's fields as Hearth takes them, at `now`: a next reset beyond a year is
/// none, a note is cut to Hearth's most, days from the first use start then.
fn mapped(user: &IncomingUser, now: u64) -> Mapped {
    let mut changed = user.mapped.clone();
    // No periodic reset is further off than a month: a date beyond a year is not one (nor a
    // number SQLite keeps), and the cycle counts from the import.
    let next_reset = if user.next_reset > now.saturating_add(366 * 86_400) {
        changed.push("its next reset was more than a year away: its cycle counts from the import".to_owned());
        0
    } else {
        user.next_reset
    };
    let mut note = user.note.clone();
    if hearth_shared::cut_to(&mut note, crate::store::users::MAX_NOTE) {
        changed.push(format!("its note was cut to {} bytes (Hearth's most)", crate::store::users::MAX_NOTE));
    }
    let (expires_at, days, start_on_first_use) = if user.days_from_first_use > 0 {
        (None, Some(user.days_from_first_use), Some(true))
    } else {
        (Some(user.expires_at), None, None)
    };
    let input = UserInput {
        name: Some(user.name.clone()),
        quota: Some(user.quota),
        expires_at,
        days,
        start_on_first_use,
        reset: Some(user.reset.clone()),
        note: Some(note),
        enabled: Some(user.enabled),
        device_limit: user.device_limit.map(DeviceLimit::Own),
        ..UserInput::default()
    };
    Mapped { input, next_reset, changed }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> IncomingUser {
        IncomingUser {
            id: "alice@example".to_owned(),
            name: "alice".to_owned(),
            quota: 50 << 30,
            expires_at: 1_798_761_600,
            enabled: true,
            reset: "monthly".to_owned(),
            note: "paid".to_owned(),
            device_limit: Some(2),
            next_reset: 1_798_000_000,
            mapped: vec!["said by the source".to_owned()],
            ..IncomingUser::default()
        }
    }

    /// A user's fields come over as they are, with what the source said changed.
    #[test]
    fn a_users_fields_come_as_hearths() {
        let now = 1_796_083_200;
        let Mapped { input, next_reset, changed } = mapped(&user(), now);
        assert_eq!(
            (input.name.as_deref(), input.quota, input.expires_at),
            (Some("alice"), Some(50 << 30), Some(1_798_761_600))
        );
        assert_eq!((input.days, input.start_on_first_use, input.enabled), (None, None, Some(true)));
        assert_eq!((input.reset.as_deref(), input.note.as_deref()), (Some("monthly"), Some("paid")));
        assert_eq!(input.device_limit, Some(DeviceLimit::Own(2)));
        assert_eq!(next_reset, 1_798_000_000);
        assert_eq!(changed, ["said by the source"]);
    }

    /// Days from the first use start then (no expiry); a next reset beyond a year and a note
    /// over Hearth's most are changed, and said.
    #[test]
    fn what_hearth_cannot_keep_is_changed_and_said() {
        let now = 1_796_083_200;
        let incoming = IncomingUser {
            days_from_first_use: 30,
            next_reset: now + 400 * 86_400,
            note: "n".repeat(crate::store::users::MAX_NOTE + 1),
            mapped: Vec::new(),
            ..user()
        };
        let Mapped { input, next_reset, changed } = mapped(&incoming, now);
        assert_eq!((input.expires_at, input.days, input.start_on_first_use), (None, Some(30), Some(true)));
        assert_eq!(next_reset, 0);
        assert_eq!(input.note.map(|n| n.len()), Some(crate::store::users::MAX_NOTE));
        assert_eq!(
            changed,
            [
                "its next reset was more than a year away: its cycle counts from the import".to_owned(),
                format!("its note was cut to {} bytes (Hearth's most)", crate::store::users::MAX_NOTE),
            ]
        );
    }

    #[test]
    fn a_password_is_printable_text_of_bounded_length() {
        assert!(check_password("hy2-alice-auth-0001").is_ok());
        assert!(check_password("").is_err());
        assert!(check_password("tab\there").is_err());
        assert!(check_password(&"p".repeat(MAX_PASSWORD + 1)).is_err());
    }
}
