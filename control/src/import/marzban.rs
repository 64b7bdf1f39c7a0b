//! Marzban and PasarGuard (its fork): their database (the SQLite file, or a MySQL dump as
//! `mysqldump` writes it), or their REST API with an admin token. Marzban 0.5 to 0.8 and
//! PasarGuard 1 to 5 keep users alike; what differs is read by column name.
//!
//! - The Hysteria2 password is PasarGuard's `proxy_settings.hysteria.auth` (3.0 and later).
//!   Marzban has no Hysteria2: its users come with a new password, and their apps move over
//!   through their subscription (an alias serves them Hearth's servers).
//! - `status` `disabled` (the owner's decision) comes disabled; `limited` and `expired` are
//!   the panel's reckoning of quota and expiry, which Hearth redoes, so they come enabled;
//!   `on_hold` starts on first use, for the days of `on_hold_expire_duration`.
//! - Resets: `day`, `week`, `month` as daily, weekly, monthly; `year` (Hearth resets at most
//!   monthly) as none, said in the note.
//! - Subscription links: both panels make a new token each time a link is shown (the
//!   username or id and the time, signed with the panel's `jwt.secret_key`), so the links apps
//!   hold cannot be listed from the database. They are taken from a list of the links in use
//!   (the old web server's access log, or any text holding them): each is checked as the
//!   panel checks it (signature, not before the user was made, not revoked) and becomes an
//!   alias. The secret is read from the database and used only for this check: it is never
//!   stored, and a link nobody fetched is never served. Checking needs the database (the API
//!   tells neither the secret nor when a user's links were revoked).

use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::path::Path;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Mac as _;
use rusqlite::types::Value as Sql;
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;
use subtle::ConstantTimeEq as _;

use super::fetch::{PAGE, PAGE_BYTES, PAGES, api_client, intact, wal_without_log};
use super::incoming::{Fate, Field, Incoming, IncomingUser, MAX_ALIASES, Skipped};

/// What becomes of each field of a Marzban or PasarGuard user.
const FIELDS: &[Field] = &[
    Field { field: "username", fate: Fate::Kept, how: "the user's name" },
    Field {
        field: "proxy_settings.hysteria.auth",
        fate: Fate::Kept,
        how: "PasarGuard's Hysteria2 password; Marzban has none, so its users get a new one and move over by their old link",
    },
    Field { field: "data_limit", fate: Fate::Kept, how: "the traffic quota" },
    Field { field: "used_traffic", fate: Fate::Kept, how: "the traffic used" },
    Field { field: "expire", fate: Fate::Kept, how: "the expiry" },
    Field {
        field: "status",
        fate: Fate::Mapped,
        how: "disabled stays disabled; limited and expired come enabled (Hearth's limits hold them); on_hold starts on the first connection",
    },
    Field {
        field: "on_hold_expire_duration",
        fate: Fate::Kept,
        how: "the days from the first connection (rounded up)",
    },
    Field {
        field: "on_hold_timeout",
        fate: Fate::Dropped,
        how: "Hearth starts the days at the first connection only, never at a date: said per user",
    },
    Field {
        field: "data_limit_reset_strategy",
        fate: Fate::Mapped,
        how: "day, week, month as daily, weekly, monthly; year is none (said in the note)",
    },
    Field { field: "note", fate: Fate::Kept, how: "the note (cut at 1000 bytes, said per user)" },
    Field { field: "hwid_limit", fate: Fate::Kept, how: "the device limit" },
    Field {
        field: "created_at, sub_revoked_at",
        fate: Fate::Mapped,
        how: "used to check old links as the panel checks them, then not kept",
    },
    Field {
        field: "admin_id, group and inbound settings, lifetime_used_traffic, online_at",
        fate: Fate::Dropped,
        how: "imported users are the importing admin's; Hearth's groups decide which nodes a user reaches; it counts from the import",
    },
];

/// Which of the two panels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    Marzban,
    PasarGuard,
}

impl Flavor {
    /// The source's name (in `imported_from` and reports).
    pub(crate) fn source(self) -> &'static str {
        match self {
            Flavor::Marzban => "marzban",
            Flavor::PasarGuard => "pasarguard",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Flavor::Marzban => "Marzban",
            Flavor::PasarGuard => "PasarGuard",
        }
    }
}

/// One user as both panels keep it, from a database row or an API object.
#[derive(Debug, Default)]
struct Row {
    id: i64,
    username: String,
    status: String,
    used: u64,
    data_limit: u64,
    /// Unix seconds, 0: never.
    expire: u64,
    /// Unix seconds rounded up (a link made in the same second as the user is older).
    created: u64,
    /// When the user's links were last revoked, rounded up; 0: never.
    revoked: u64,
    reset: String,
    note: String,
    on_hold_seconds: u64,
    /// When the panel would have started an on-hold user's days by itself (Unix seconds, 0:
    /// never).
    on_hold_timeout: u64,
    hysteria: Option<String>,
    hwid_limit: Option<u32>,
}

/// Unix seconds of a date as the panels write it: `2025-02-01 10:00:00.123456` (SQLite,
/// MySQL), `2025-02-01T10:00:00.123456` or with `Z` (their API); rounded up when `ceil`.
fn date(text: &str, ceil: bool) -> Option<u64> {
    let text = text.trim().trim_end_matches('Z').trim_end_matches("+00:00");
    let (day, time) = text.split_once(['T', ' '])?;
    let (time, fraction) = time.split_once('.').unwrap_or((time, ""));
    let at = super::remnawave::unix_of(&format!("{day}T{time}Z"))?;
    let up = ceil && fraction.bytes().any(|b| b != b'0');
    Some(at + u64::from(up))
}

/// A number of a column or field: an integer, a real, or a numeric text.
fn count(value: &Sql) -> u64 {
    match value {
        Sql::Integer(n) => u64::try_from(*n).unwrap_or(0),
        Sql::Real(f) if *f > 0.0 => *f as u64,
        Sql::Text(s) => s.trim().parse().unwrap_or(0),
        _ => 0,
    }
}

/// An instant of a column: Unix seconds (Marzban's `expire`) or a date.
fn instant(value: &Sql, ceil: bool) -> u64 {
    match value {
        Sql::Text(s) => date(s, ceil).or_else(|| s.trim().parse().ok()).unwrap_or(0),
        other => count(other),
    }
}

fn text_of(value: &Sql) -> String {
    match value {
        Sql::Text(s) => s.trim().to_owned(),
        Sql::Integer(n) => n.to_string(),
        _ => String::new(),
    }
}

/// The Hysteria2 password in PasarGuard's `proxy_settings`.
fn hysteria_auth(settings: &Value) -> Option<String> {
    let auth = settings.pointer("/hysteria/auth")?.as_str()?.trim();
    (!auth.is_empty()).then(|| auth.to_owned())
}

fn columns(conn: &Connection, table: &str) -> rusqlite::Result<HashSet<String>> {
    let mut query = conn.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?;
    let names: HashSet<String> = query.query_map([], |row| row.get(0))?.collect::<rusqlite::Result<_>>()?;
    Ok(names)
}

/// Which panel a database is, from its tables.
fn flavor_of(conn: &Connection) -> anyhow::Result<Flavor> {
    let users = columns(conn, "users").context("not an SQLite database")?;
    if !["id", "username", "status", "used_traffic", "data_limit"].iter().all(|c| users.contains(*c)) {
        bail!("not a Marzban or PasarGuard database: it has no users table of theirs");
    }
    Ok(if users.contains("proxy_settings") { Flavor::PasarGuard } else { Flavor::Marzban })
}

/// Reads the users (and the secret their links are signed with) of a database.
fn rows_of(conn: &Connection, flavor: Flavor) -> anyhow::Result<(Vec<Row>, Option<String>)> {
    let have = columns(conn, "users")?;
    let column = |name: &str| if have.contains(name) { format!("\"{name}\"") } else { "NULL".to_owned() };
    let query = format!(
        "SELECT id, username, status, used_traffic, data_limit, {}, {}, {}, {}, {}, {}, {}, {}, {} FROM users ORDER BY id",
        column("expire"),
        column("created_at"),
        column("sub_revoked_at"),
        column("data_limit_reset_strategy"),
        column("note"),
        column("on_hold_expire_duration"),
        column("proxy_settings"),
        column("hwid_limit"),
        column("on_hold_timeout"),
    );
    let mut statement = conn.prepare(&query)?;
    let mut rows: Vec<Row> = statement
        .query_map([], |row| {
            let value = |i: usize| row.get::<_, Sql>(i);
            let settings: Value = serde_json::from_str(&text_of(&value(11)?)).unwrap_or(Value::Null);
            Ok(Row {
                id: row.get::<_, Option<i64>>(0)?.unwrap_or(0),
                username: text_of(&value(1)?),
                status: text_of(&value(2)?),
                used: count(&value(3)?),
                data_limit: count(&value(4)?),
                expire: instant(&value(5)?, false),
                created: instant(&value(6)?, true),
                revoked: instant(&value(7)?, true),
                reset: text_of(&value(8)?),
                note: text_of(&value(9)?),
                on_hold_seconds: count(&value(10)?),
                hysteria: hysteria_auth(&settings),
                hwid_limit: u32::try_from(count(&value(12)?)).ok().filter(|n| *n > 0),
                on_hold_timeout: instant(&value(13)?, false),
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    // Marzban keeps credentials in a table of their own: none of them is Hysteria2.
    if flavor == Flavor::Marzban {
        for row in &mut rows {
            row.hysteria = None;
        }
    }
    let secret = if columns(conn, "jwt")?.contains("secret_key") {
        conn.query_row("SELECT secret_key FROM jwt ORDER BY id LIMIT 1", [], |row| row.get::<_, Option<String>>(0))
            .ok()
            .flatten()
    } else {
        None
    };
    Ok((rows, secret))
}

/// The user an old link names, and when it was made.
#[derive(Debug, PartialEq, Eq)]
enum Who {
    Name(String),
    Id(i64),
}

const JWT_HEAD: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.";

fn hmac(secret: &str, text: &str) -> [u8; 32] {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(text.as_bytes());
    mac.finalize().into_bytes().into()
}

fn same(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Whom a subscription token names and when it was made, if the panel signed it: Marzban's
/// `b64(username,time)` with the first 10 characters of `b64(sha256(that, secret))` (0.5 and
/// later, and PasarGuard to 3.2), its subscription JWT (before 0.5), and PasarGuard's
/// `b64(v3,id,time)` with 10 hex characters (4.0 to 5.0) or `.` and an HMAC-SHA256 (5.1 on).
fn claim(token: &str, secret: &str, flavor: Flavor) -> Option<(Who, u64)> {
    let alphabet = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if token.len() < 15 || token.len() > 512 || !token.chars().all(|c| alphabet(c) || c == '.') {
        return None;
    }
    if let Some(rest) = token.strip_prefix(JWT_HEAD) {
        let (body, signature) = rest.split_once('.')?;
        let want = URL_SAFE_NO_PAD.encode(hmac(secret, &format!("{JWT_HEAD}{body}")));
        if !same(&want, signature) {
            return None;
        }
        let body: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).ok()?).ok()?;
        let name = body.get("sub")?.as_str().filter(|s| !s.is_empty())?;
        if body.get("access")?.as_str()? != "subscription" {
            return None;
        }
        return Some((Who::Name(name.to_owned()), body.get("iat")?.as_u64()?));
    }
    let text = match token.rsplit_once('.') {
        Some((payload, signature)) if flavor == Flavor::PasarGuard => {
            same(&URL_SAFE_NO_PAD.encode(hmac(secret, payload)), signature).then_some(payload)?
        }
        Some(_) => return None,
        None => {
            let (payload, signature) = token.split_at(token.len() - 10);
            let digest = hearth_shared::sha256(format!("{payload}{secret}").as_bytes());
            let b64 = URL_SAFE_NO_PAD.encode(digest);
            let hex = hex::encode(digest);
            let ok = same(&b64[..10], signature) || (flavor == Flavor::PasarGuard && same(&hex[..10], signature));
            ok.then_some(payload)?
        }
    };
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(text).ok()?).ok()?;
    let fields: Vec<&str> = text.split(',').collect();
    match fields.as_slice() {
        ["v2" | "v3", id, at] if flavor == Flavor::PasarGuard => Some((Who::Id(id.parse().ok()?), at.parse().ok()?)),
        [name, at] => Some((Who::Name((*name).to_owned()), at.parse().ok()?)),
        [name, at, ..] if flavor == Flavor::Marzban => Some((Who::Name((*name).to_owned()), at.parse().ok()?)),
        _ => None,
    }
}

/// Why an old link is not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Refusal {
    NotSigned,
    NoSuchUser,
    BeforeUser,
    Revoked,
}

impl Refusal {
    fn says(self) -> &'static str {
        match self {
            Refusal::NotSigned => "not signed by this panel",
            Refusal::NoSuchUser => "of no user in this panel",
            Refusal::BeforeUser => "made before their user (a user deleted and made again)",
            Refusal::Revoked => "revoked in the panel",
        }
    }
}

/// The most bytes of one line of a links list read (longer lines are cut).
const LINE_BYTES: usize = 64 << 10;
/// The most bytes of a links list read.
pub(crate) const LINKS_BYTES: u64 = 4 << 30;

/// The old links in `list` (an access log, or any text): each `/<path>/<token>` in a request
/// or address, with the client type after it if any (`/sub/<token>/clash-meta`: an alias as
/// the app fetches it), and each line that is a token alone (under `/sub/`). Yields the alias
/// path and the token. The panels' `info` and `usage` pages under a link are not links.
fn candidates(line: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let token_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let bare = line.trim();
    if bare.len() >= 15 && bare.chars().all(token_char) {
        found.push((format!("/sub/{bare}"), bare.to_owned()));
        return found;
    }
    for piece in line.split(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>')) {
        let path = match piece.split_once("://") {
            Some((_, rest)) => rest.find('/').map_or("", |at| &rest[at..]),
            None => piece,
        };
        if !path.starts_with('/') {
            continue;
        }
        let path = path.split(['?', '#']).next().unwrap_or_default();
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        let Some(at) = segments.iter().skip(2).position(|s| s.len() >= 15 && s.chars().all(token_char)) else {
            continue;
        };
        let at = at + 2;
        match &segments[at + 1..] {
            [] => {}
            [kind] if !matches!(*kind, "info" | "usage") && kind.len() <= 32 => {}
            _ => continue,
        }
        found.push((segments.join("/"), segments[at].to_owned()));
    }
    found
}

/// The old paths each user (by id in the panel) gets as aliases.
type Aliases = HashMap<i64, Vec<String>>;

/// Old links checked: the aliases each user gets (newest first, at most [`MAX_ALIASES`]),
/// and what was refused.
fn links(
    list: &mut dyn BufRead,
    rows: &[Row],
    secret: &str,
    flavor: Flavor,
) -> anyhow::Result<(Aliases, Vec<Skipped>)> {
    let by_name: HashMap<&str, &Row> = rows.iter().map(|row| (row.username.as_str(), row)).collect();
    let by_id: HashMap<i64, &Row> = rows.iter().map(|row| (row.id, row)).collect();
    let mut taken: HashMap<i64, Vec<(u64, String)>> = HashMap::new();
    let mut refused: HashMap<Refusal, usize> = HashMap::new();
    let mut seen = HashSet::new();
    let mut line = Vec::new();
    let mut read = 0u64;
    loop {
        line.clear();
        let n = std::io::Read::take(&mut *list, LINE_BYTES as u64)
            .read_until(b'\n', &mut line)
            .context("reading the links list")?;
        if n == 0 {
            break;
        }
        read += n as u64;
        anyhow::ensure!(read <= LINKS_BYTES, "the links list is over {} GiB", LINKS_BYTES >> 30);
        for (path, token) in candidates(&String::from_utf8_lossy(&line)) {
            if !seen.insert(path.clone()) {
                continue;
            }
            let verdict = match claim(&token, secret, flavor) {
                None => Err(Refusal::NotSigned),
                Some((who, at)) => {
                    let row = match who {
                        Who::Name(name) => by_name.get(name.as_str()),
                        Who::Id(id) => by_id.get(&id),
                    };
                    match row {
                        None => Err(Refusal::NoSuchUser),
                        Some(row) if at < row.created => Err(Refusal::BeforeUser),
                        Some(row) if at < row.revoked => Err(Refusal::Revoked),
                        Some(row) => Ok((row.id, at)),
                    }
                }
            };
            match verdict {
                Ok((id, at)) => taken.entry(id).or_default().push((at, path)),
                // A path that only looks like a link (a long file name) is not counted.
                Err(Refusal::NotSigned) if !path.starts_with("/sub/") => {}
                Err(why) => *refused.entry(why).or_default() += 1,
            }
        }
    }
    let mut aliases = HashMap::new();
    let mut dropped = 0;
    for (id, mut paths) in taken {
        paths.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        dropped += paths.len().saturating_sub(MAX_ALIASES);
        aliases.insert(id, paths.into_iter().take(MAX_ALIASES).map(|(_, path)| path).collect());
    }
    let mut skipped: Vec<Skipped> = {
        let mut refused: Vec<_> = refused.into_iter().collect();
        refused.sort();
        refused
            .into_iter()
            .map(|(why, n)| Skipped {
                id: "old links".to_owned(),
                reason: format!("{n} link{} {}", if n == 1 { "" } else { "s" }, why.says()),
            })
            .collect()
    };
    if dropped > 0 {
        skipped.push(Skipped {
            id: "old links".to_owned(),
            reason: format!("{dropped} older links of users with more than {MAX_ALIASES}: the newest are kept"),
        });
    }
    Ok((aliases, skipped))
}

/// One user as Hearth takes it.
fn user_of(row: Row, flavor: Flavor, aliases: Vec<String>) -> IncomingUser {
    let mut note = row.note.clone();
    let reset = match row.reset.as_str() {
        "day" => "daily",
        "week" => "weekly",
        "month" => "monthly",
        "year" => {
            let said = format!("reset yearly in {} (not kept)", flavor.title());
            note = if note.is_empty() { said } else { format!("{note} | {said}") };
            "none"
        }
        _ => "none",
    };
    let on_hold = row.status == "on_hold" && row.on_hold_seconds > 0;
    let mut mapped = Vec::new();
    if on_hold && row.on_hold_timeout > 0 {
        mapped.push(format!(
            "{} would have started its days on {} if it had not connected by then: here they start at its first connection",
            flavor.title(),
            crate::clock::civil_date(row.on_hold_timeout)
        ));
    }
    IncomingUser {
        id: match flavor {
            Flavor::Marzban => row.username.clone(),
            Flavor::PasarGuard => row.id.to_string(),
        },
        name: row.username,
        password: row.hysteria,
        quota: row.data_limit,
        used_down: row.used,
        expires_at: if on_hold { 0 } else { row.expire },
        days_from_first_use: if on_hold { row.on_hold_seconds.div_ceil(86_400) } else { 0 },
        enabled: row.status != "disabled",
        reset: reset.to_owned(),
        note,
        device_limit: row.hwid_limit,
        aliases,
        mapped,
        ..IncomingUser::default()
    }
}

/// The users of a database `conn` holds, with the old links of `list` checked.
fn from_database(
    conn: &Connection,
    flavor: Flavor,
    list: Option<&mut dyn BufRead>,
    what: &str,
) -> anyhow::Result<Incoming> {
    let found = flavor_of(conn).with_context(|| format!("{what} is not a {} database", flavor.title()))?;
    if found != flavor {
        bail!("{what} is a {} database: import it as {}", found.title(), found.source());
    }
    let (rows, secret) = rows_of(conn, flavor)?;
    let (mut aliases, skipped) = match list {
        Some(list) => {
            let secret = secret
                .filter(|s| !s.is_empty())
                .with_context(|| format!("{what} has no jwt.secret_key: old links cannot be checked"))?;
            links(list, &rows, &secret, flavor)?
        }
        None => (HashMap::new(), Vec::new()),
    };
    let mut incoming =
        Incoming { source: flavor.source().to_owned(), skipped, fields: FIELDS.to_vec(), ..Incoming::default() };
    for row in rows {
        if row.username.is_empty() {
            incoming.skipped.push(Skipped { id: row.id.to_string(), reason: "no username".to_owned() });
            continue;
        }
        let paths = aliases.remove(&row.id).unwrap_or_default();
        incoming.users.push(user_of(row, flavor, paths));
    }
    Ok(incoming)
}

/// Reads a database file: SQLite (opened read-only), or a MySQL dump.
pub(crate) fn read_file(path: &Path, flavor: Flavor, list: Option<&mut dyn BufRead>) -> anyhow::Result<Incoming> {
    let what = path.display().to_string();
    let mut head = [0u8; 16];
    let n = std::io::Read::read(&mut std::fs::File::open(path).with_context(|| format!("reading {what}"))?, &mut head)
        .with_context(|| format!("reading {what}"))?;
    if head[..n] == *b"SQLite format 3\0" {
        let behind = wal_without_log(path);
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .with_context(|| format!("opening {what} as SQLite"))?;
        intact(&conn, path)?;
        let mut incoming = from_database(&conn, flavor, list, &what)?;
        incoming.warnings.extend(behind);
        return Ok(incoming);
    }
    let file = std::fs::File::open(path).with_context(|| format!("reading {what}"))?;
    let conn = mysql::load(&mut std::io::BufReader::new(file)).with_context(|| format!("reading {what}"))?;
    from_database(&conn, flavor, list, &what)
}

/// Reads the bytes of a database (an upload to the panel): SQLite or a MySQL dump.
pub(crate) fn read_bytes(bytes: &[u8], flavor: Flavor) -> anyhow::Result<Incoming> {
    if bytes.starts_with(b"SQLite format 3\0") {
        let dir = tempfile::tempdir().context("a temporary directory")?;
        let path = dir.path().join("db.sqlite3");
        std::fs::write(&path, bytes).context("writing the upload")?;
        let conn =
            Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .context("opening the upload as SQLite")?;
        intact(&conn, &path)?;
        return from_database(&conn, flavor, None, "the upload");
    }
    let conn = mysql::load(&mut std::io::Cursor::new(bytes)).context("the upload")?;
    from_database(&conn, flavor, None, "the upload")
}

/// One API user object as a row.
fn row_of_api(user: &Value) -> Row {
    let text = |key: &str| user.get(key).and_then(Value::as_str).unwrap_or_default().trim().to_owned();
    let number = |key: &str| user.get(key).and_then(Value::as_u64).unwrap_or(0);
    let expire = match user.get("expire") {
        Some(Value::String(s)) => date(s, false).unwrap_or(0),
        Some(value) => value.as_u64().unwrap_or(0),
        None => 0,
    };
    Row {
        id: user.get("id").and_then(Value::as_i64).unwrap_or(0),
        username: text("username"),
        status: text("status"),
        used: number("used_traffic"),
        data_limit: number("data_limit"),
        expire,
        created: date(&text("created_at"), true).unwrap_or(0),
        revoked: 0,
        reset: text("data_limit_reset_strategy"),
        note: text("note"),
        on_hold_seconds: number("on_hold_expire_duration"),
        on_hold_timeout: date(&text("on_hold_timeout"), false).unwrap_or(0),
        hysteria: user.get("proxy_settings").and_then(hysteria_auth),
        hwid_limit: u32::try_from(number("hwid_limit")).ok().filter(|n| *n > 0),
    }
}

/// Reads every user of the panel at `base` over its REST API with an admin's bearer `token`
/// (`POST /api/admin/token` gives one).
pub(crate) async fn read_api(base: &str, token: &str, flavor: Flavor) -> anyhow::Result<Incoming> {
    let (base, http) = api_client(base)?;
    let name = flavor.title();
    let mut incoming = Incoming { source: flavor.source().to_owned(), fields: FIELDS.to_vec(), ..Incoming::default() };
    let mut names = HashSet::new();
    let mut offset = 0;
    for _ in 0..PAGES {
        let response = http
            .get(format!("{base}/api/users?offset={offset}&limit={PAGE}"))
            .bearer_auth(token.trim())
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!("{name} at {base} did not answer ({}): is the address right?", e.without_url())
            })?;
        match response.status().as_u16() {
            200 => {}
            401 => bail!(
                "{name} refused the token (401): sign in for one with POST {base}/api/admin/token (it lasts a day by default)"
            ),
            403 => bail!("{name} refused the token (403): it is not an admin's"),
            404 => bail!("{base} has no /api/users: is it {name}'s panel address?"),
            status => bail!("{name} answered {status} to the list of users"),
        }
        let bytes = hearth_io::capped::read(response, PAGE_BYTES, "a page of users").await?;
        let page: Value =
            serde_json::from_slice(&bytes).with_context(|| format!("{name}'s list of users is not JSON"))?;
        let users = page
            .get("users")
            .and_then(Value::as_array)
            .with_context(|| format!("{name}'s answer has no users: an unknown version?"))?;
        for user in users {
            let found = if user.get("proxy_settings").is_some() { Flavor::PasarGuard } else { Flavor::Marzban };
            if user.get("proxies").is_some() || user.get("proxy_settings").is_some() {
                anyhow::ensure!(
                    found == flavor,
                    "{base} is {}, not {name}: import it as {}",
                    found.title(),
                    found.source()
                );
            }
            let row = row_of_api(user);
            if row.username.is_empty() {
                incoming.skipped.push(Skipped { id: row.id.to_string(), reason: "no username".to_owned() });
            } else if names.insert(row.username.clone()) {
                incoming.users.push(user_of(row, flavor, Vec::new()));
            }
        }
        offset += users.len();
        let total = page.get("total").and_then(Value::as_u64).unwrap_or(0) as usize;
        if users.is_empty() || offset >= total {
            return Ok(incoming);
        }
    }
    bail!("{name} has more than {} users", PAGES * PAGE)
}

/// A MySQL dump (as `mysqldump` and `mariadb-dump` write it) read into an in-memory SQLite
/// database: each table's columns from its `CREATE TABLE`, its rows from its `INSERT`s. Only
/// the tables an import reads are kept.
mod mysql {
    use std::collections::HashMap;
    use std::io::BufRead;

    use anyhow::{Context as _, bail};
    use rusqlite::Connection;
    use rusqlite::types::Value;

    /// The tables read.
    const TABLES: [&str; 3] = ["users", "jwt", "proxies"];
    /// The most bytes of one line (one `INSERT` of many rows).
    const LINE_BYTES: u64 = 256 << 20;

    fn identifier(text: &str) -> Option<&str> {
        let name = text.strip_prefix('`')?.split('`').next()?;
        (!name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            .then_some(name)
    }

    pub(super) fn load(dump: &mut dyn BufRead) -> anyhow::Result<Connection> {
        let conn = Connection::open_in_memory()?;
        let mut tables: HashMap<String, Vec<String>> = HashMap::new();
        let mut creating: Option<(String, Vec<String>)> = None;
        let mut line = Vec::new();
        let mut number = 0usize;
        let mut statements = 0usize;
        // mysqldump and mariadb-dump end with this line: a dump without it was cut short.
        let (mut signed, mut completed) = (false, false);
        loop {
            line.clear();
            let n = std::io::Read::take(&mut *dump, LINE_BYTES).read_until(b'\n', &mut line)?;
            if n == 0 {
                break;
            }
            number += 1;
            if n as u64 == LINE_BYTES && !line.ends_with(b"\n") {
                bail!("line {number} is over {} MiB", LINE_BYTES >> 20);
            }
            let text = std::str::from_utf8(&line).with_context(|| format!("line {number} is not UTF-8"))?;
            let text = text.trim_end();
            if number == 1 {
                signed = text.starts_with("-- MySQL dump") || text.starts_with("-- MariaDB dump");
            }
            completed |= text.starts_with("-- Dump completed");
            if let Some((_, columns)) = creating.as_mut() {
                if text.starts_with(')') {
                    let (table, columns) = creating.take().unwrap_or_default();
                    let list: Vec<String> = columns.iter().map(|c| format!("\"{c}\"")).collect();
                    conn.execute_batch(&format!("CREATE TABLE \"{table}\" ({})", list.join(", ")))?;
                    tables.insert(table, columns);
                } else if let Some(column) = identifier(text.trim_start()) {
                    columns.push(column.to_owned());
                }
                continue;
            }
            if let Some(rest) = text.strip_prefix("CREATE TABLE ") {
                let rest = rest.trim_start_matches("IF NOT EXISTS ");
                let table = identifier(rest).with_context(|| format!("line {number}: a table without a name"))?;
                statements += 1;
                if TABLES.contains(&table) {
                    creating = Some((table.to_owned(), Vec::new()));
                }
                continue;
            }
            let Some(rest) = text.strip_prefix("INSERT INTO ") else { continue };
            let table = identifier(rest).with_context(|| format!("line {number}: an INSERT without a table"))?;
            statements += 1;
            let Some(columns) = tables.get(table) else { continue };
            let rest = &rest[table.len() + 2..];
            let (names, values) = match rest.trim_start().strip_prefix('(') {
                Some(list) => {
                    let (list, values) = list.split_once(')').context("an unended column list")?;
                    let names: Vec<String> =
                        list.split(',').filter_map(|c| identifier(c.trim())).map(str::to_owned).collect();
                    (names, values)
                }
                None => (columns.clone(), rest),
            };
            let values =
                values.trim_start().strip_prefix("VALUES").with_context(|| format!("line {number}: no VALUES"))?;
            let rows = tuples(values).with_context(|| format!("line {number}"))?;
            let quoted: Vec<String> = names.iter().map(|c| format!("\"{c}\"")).collect();
            let marks = vec!["?"; names.len()].join(", ");
            let mut insert =
                conn.prepare(&format!("INSERT INTO \"{table}\" ({}) VALUES ({marks})", quoted.join(", ")))?;
            for row in rows {
                if row.len() != names.len() {
                    bail!("line {number}: a row of {} values for {} columns", row.len(), names.len());
                }
                insert.execute(rusqlite::params_from_iter(row))?;
            }
        }
        if statements == 0 {
            bail!("not a MySQL dump (nor an SQLite database): no CREATE TABLE or INSERT in it");
        }
        if signed && !completed {
            bail!("the dump was cut short: it has no \"-- Dump completed\" line at its end");
        }
        Ok(conn)
    }

    /// The rows of `VALUES (...),(...);`.
    fn tuples(text: &str) -> anyhow::Result<Vec<Vec<Value>>> {
        let mut rows = Vec::new();
        let bytes = text.as_bytes();
        let mut i = 0;
        let skip = |i: &mut usize| {
            while *i < bytes.len() && bytes[*i].is_ascii_whitespace() {
                *i += 1;
            }
        };
        loop {
            skip(&mut i);
            if bytes.get(i) != Some(&b'(') {
                bail!("a row does not begin with (");
            }
            i += 1;
            let mut row = Vec::new();
            loop {
                skip(&mut i);
                row.push(value(bytes, &mut i)?);
                skip(&mut i);
                match bytes.get(i) {
                    Some(b',') => i += 1,
                    Some(b')') => {
                        i += 1;
                        break;
                    }
                    _ => bail!("a row is not ended"),
                }
            }
            rows.push(row);
            skip(&mut i);
            match bytes.get(i) {
                Some(b',') => i += 1,
                Some(b';') | None => return Ok(rows),
                _ => bail!("rows are not separated by ,"),
            }
        }
    }

    /// One value: NULL, a number, a quoted string (with MySQL's escapes), `0x` hex or
    /// `_binary '...'`.
    fn value(bytes: &[u8], i: &mut usize) -> anyhow::Result<Value> {
        let rest = &bytes[*i..];
        if rest.starts_with(b"NULL") {
            *i += 4;
            return Ok(Value::Null);
        }
        if rest.starts_with(b"_binary ") {
            *i += 8;
            return value(bytes, i);
        }
        if rest.starts_with(b"0x") {
            let end = rest[2..].iter().position(|b| !b.is_ascii_hexdigit()).map_or(rest.len(), |n| n + 2);
            *i += end;
            return Ok(Value::Blob(hex::decode(&rest[2..end]).context("bad hex")?));
        }
        if rest.first() == Some(&b'\'') {
            let mut out = Vec::new();
            let mut j = 1;
            loop {
                match rest.get(j) {
                    None => bail!("an unended string"),
                    Some(b'\\') => {
                        let escaped = *rest.get(j + 1).context("an unended string")?;
                        out.push(match escaped {
                            b'0' => 0,
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 8,
                            b'Z' => 26,
                            other => other,
                        });
                        j += 2;
                    }
                    Some(b'\'') if rest.get(j + 1) == Some(&b'\'') => {
                        out.push(b'\'');
                        j += 2;
                    }
                    Some(b'\'') => break,
                    Some(&b) => {
                        out.push(b);
                        j += 1;
                    }
                }
            }
            *i += j + 1;
            return Ok(match String::from_utf8(out) {
                Ok(text) => Value::Text(text),
                Err(e) => Value::Blob(e.into_bytes()),
            });
        }
        let end = rest.iter().position(|b| !(b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E')));
        let number = std::str::from_utf8(&rest[..end.unwrap_or(rest.len())])?;
        if number.is_empty() {
            bail!("an unknown value");
        }
        *i += number.len();
        Ok(match number.parse::<i64>() {
            Ok(n) => Value::Integer(n),
            Err(_) => Value::Real(number.parse().with_context(|| format!("{number:?} is not a number"))?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/import/marzban").join(name)
    }

    fn tokens() -> Value {
        serde_json::from_slice(&std::fs::read(fixture("tokens.json")).unwrap()).unwrap()
    }

    #[test]
    fn dates_read_as_both_panels_write_them() {
        assert_eq!(date("2025-02-01 10:00:00.123456", false), Some(1_738_404_000));
        assert_eq!(date("2025-02-01 10:00:00.123456", true), Some(1_738_404_001));
        assert_eq!(date("2025-02-01 10:00:00.000000", true), Some(1_738_404_000));
        assert_eq!(date("2025-02-01T10:00:00.123456Z", true), Some(1_738_404_001));
        assert_eq!(date("2027-01-01T00:00:00Z", false), Some(1_798_761_600));
        assert_eq!(date("2027-01-01 00:00:00", false), Some(1_798_761_600));
        assert_eq!(date("soon", false), None);
    }

    /// A damaged database imports nothing (issue 47, 3): a page of zeros where the users were,
    /// in either panel's SQLite file, read from a file or uploaded.
    #[test]
    fn a_damaged_database_imports_nothing() {
        let temp = tempfile::tempdir().unwrap();
        for (file, flavor) in
            [("marzban-v0.8.4.sqlite3", Flavor::Marzban), ("pasarguard-v5.2.1.sqlite3", Flavor::PasarGuard)]
        {
            assert!(!read_file(&fixture(file), flavor, None).unwrap().users.is_empty());
            let copy = temp.path().join(file);
            std::fs::copy(fixture(file), &copy).unwrap();
            let (root, page): (i64, i64) = Connection::open(&copy)
                .unwrap()
                .query_row(
                    "SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_master WHERE name = 'users'",
                    [],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .unwrap();
            let mut bytes = std::fs::read(&copy).unwrap();
            let at = usize::try_from((root - 1) * page).unwrap();
            bytes[at..at + usize::try_from(page).unwrap()].fill(0);
            std::fs::write(&copy, &bytes).unwrap();
            let error = format!("{:#}", read_file(&copy, flavor, None).unwrap_err());
            assert!(error.contains("is damaged") && error.contains("nothing is imported"), "{file}: {error}");
            let error = format!("{:#}", read_bytes(&bytes, flavor).unwrap_err());
            assert!(error.contains("is damaged"), "{file} uploaded: {error}");
        }
    }

    /// Every token of the fixtures (made by the panels' own schemes, with the verdict each
    /// panel gives it) gets the same verdict here.
    #[test]
    fn old_links_are_checked_as_each_panel_checks_them() {
        let all = tokens();
        for (file, flavor, secret) in [
            ("marzban-v0.8.4.sqlite3", Flavor::Marzban, "marzban_secret"),
            ("pasarguard-v5.2.1.sqlite3", Flavor::PasarGuard, "pasarguard_secret"),
        ] {
            let conn = Connection::open_with_flags(fixture(file), OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
            let (rows, read_secret) = rows_of(&conn, flavor).unwrap();
            assert_eq!(read_secret.as_deref(), all[secret].as_str(), "{file}");
            let panel = file.trim_end_matches(".sqlite3");
            let mut checked = 0;
            for token in all["tokens"].as_array().unwrap().iter().filter(|t| t["panel"] == panel) {
                let list = format!("{}\n", token["path"].as_str().unwrap());
                let (aliases, refused) =
                    links(&mut list.as_bytes(), &rows, all[secret].as_str().unwrap(), flavor).unwrap();
                let valid = token["valid"].as_bool().unwrap();
                assert_eq!(!aliases.is_empty(), valid, "{panel} {token}");
                assert_eq!(refused.is_empty(), valid, "{panel} {token}: {refused:?}");
                if valid {
                    let user = rows.iter().find(|r| r.username == token["user"].as_str().unwrap()).unwrap();
                    assert_eq!(aliases[&user.id], vec![token["path"].as_str().unwrap().to_owned()]);
                }
                checked += 1;
            }
            assert!(checked >= 15, "{panel}: {checked}");
        }
    }

    #[test]
    fn links_are_found_in_an_access_log_and_addresses() {
        let found = candidates(
            r#"203.0.113.9 - - [01/Dec/2025:12:00:00 +0000] "GET /sub/YWxpY2UsMTc2NDU5MDQwMA9i2-8dbr04/clash-meta HTTP/1.1" 200 912 "-" "v2rayNG/1.9.16""#,
        );
        assert_eq!(
            found,
            vec![(
                "/sub/YWxpY2UsMTc2NDU5MDQwMA9i2-8dbr04/clash-meta".to_owned(),
                "YWxpY2UsMTc2NDU5MDQwMA9i2-8dbr04".to_owned()
            )]
        );
        assert!(candidates("GET /sub/YWxpY2UsMTc2NDU5MDQwMA9i2-8dbr04/info HTTP/1.1").is_empty());
        let found = candidates("https://sub.example.com/my-subs/djMsMSwxNzY0NTkwNDAw.aBsjEYsnvkm7t9YM?x=1");
        assert_eq!(found[0].0, "/my-subs/djMsMSwxNzY0NTkwNDAw.aBsjEYsnvkm7t9YM");
        assert_eq!(candidates("YWxpY2UsMTc2NDU5MDQwMA9i2-8dbr04")[0].0, "/sub/YWxpY2UsMTc2NDU5MDQwMA9i2-8dbr04");
        assert!(candidates("GET /static/app.js HTTP/1.1").is_empty());
    }

    /// The fixtures' users, as each panel has them, from its SQLite database and its API pages.
    #[test]
    fn users_come_with_limits_status_and_passwords_where_the_panel_has_them() {
        for (file, flavor) in
            [("marzban-v0.8.4.sqlite3", Flavor::Marzban), ("pasarguard-v5.2.1.sqlite3", Flavor::PasarGuard)]
        {
            let incoming = read_file(&fixture(file), flavor, None).unwrap();
            assert_eq!(incoming.source, flavor.source());
            let names: Vec<&str> = incoming.users.iter().map(|u| u.name.as_str()).collect();
            assert_eq!(names, ["alice", "bob", "carol"], "{file}");
            let [alice, bob, carol] = &incoming.users[..] else { unreachable!() };
            assert_eq!((alice.quota, alice.used_down, alice.expires_at), (50 << 30, 3 << 29, 1_798_761_600));
            assert_eq!(
                (alice.reset.as_str(), alice.enabled, alice.note.as_str()),
                ("monthly", true, "paid until 2027-01-01")
            );
            assert_eq!(
                (bob.days_from_first_use, bob.expires_at, bob.enabled),
                (30, 0, true),
                "on hold: 30 days from first use"
            );
            // The date the panel would have started them by itself is said, not silently lost.
            assert_eq!(bob.mapped.len(), 1, "{file}: {:?}", bob.mapped);
            assert!(
                bob.mapped[0].ends_with(
                    "its days on 2026-01-01 if it had not connected by then: here they start at its first connection"
                ),
                "{:?}",
                bob.mapped
            );
            assert!(alice.mapped.is_empty() && carol.mapped.is_empty());
            assert_eq!(incoming.fields, FIELDS);
            assert!(incoming.warnings.is_empty(), "{:?}", incoming.warnings);
            assert!(!carol.enabled, "disabled in the panel");
            assert_eq!((carol.quota, carol.expires_at), (0, 1_767_225_600));
            match flavor {
                Flavor::Marzban => {
                    assert!(incoming.users.iter().all(|u| u.password.is_none()), "Marzban has no Hysteria2");
                    assert_eq!(alice.id, "alice");
                }
                Flavor::PasarGuard => {
                    assert_eq!(alice.password.as_deref(), Some("hy2-alice-auth-0001"));
                    assert_eq!(carol.password.as_deref(), Some("hy2-carol-auth-0003"));
                    assert_eq!(alice.id, "1");
                }
            }
            let wrong = if flavor == Flavor::Marzban { Flavor::PasarGuard } else { Flavor::Marzban };
            let refused = read_file(&fixture(file), wrong, None).unwrap_err();
            assert!(format!("{refused:#}").contains(&format!("import it as {}", flavor.source())), "{refused:#}");
        }
        let refused = read_file(&fixture("tokens.json"), Flavor::Marzban, None).unwrap_err();
        assert!(format!("{refused:#}").contains("not a MySQL dump"), "{refused:#}");
    }

    /// Serves the fixtures' API pages as the panels do: the bearer token checked, pages by
    /// `offset` and `limit`.
    async fn stand_in(page: &'static str) -> String {
        use axum::extract::Query;
        use axum::http::{HeaderMap, StatusCode};
        use axum::response::IntoResponse;
        let all: Value = serde_json::from_slice(&std::fs::read(fixture(page)).unwrap()).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = axum::Router::new().route(
            "/api/users",
            axum::routing::get(move |headers: HeaderMap, Query(query): Query<HashMap<String, usize>>| {
                let all = all.clone();
                async move {
                    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer admin-token") {
                        let body = serde_json::json!({"detail": "Could not validate credentials"});
                        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
                    }
                    let offset = query.get("offset").copied().unwrap_or(0);
                    let limit = query.get("limit").copied().unwrap_or(usize::MAX);
                    let users: Vec<Value> =
                        all["users"].as_array().unwrap().iter().skip(offset).take(limit.min(2)).cloned().collect();
                    axum::Json(serde_json::json!({ "users": users, "total": all["total"] })).into_response()
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{address}")
    }

    #[tokio::test]
    async fn the_api_gives_the_same_users_as_the_database() {
        for (page, file, flavor) in [
            ("marzban-v0.8.4.api-users.json", "marzban-v0.8.4.sqlite3", Flavor::Marzban),
            ("pasarguard-v5.2.1.api-users.json", "pasarguard-v5.2.1.sqlite3", Flavor::PasarGuard),
            ("pasarguard-v5.2.1.api-users.load_sub.json", "pasarguard-v5.2.1.sqlite3", Flavor::PasarGuard),
        ] {
            let base = stand_in(page).await;
            let by_api = read_api(&base, "admin-token", flavor).await.unwrap();
            let by_file = read_file(&fixture(file), flavor, None).unwrap();
            assert_eq!(by_api, by_file, "{page}");
            let refused = read_api(&base, "expired", flavor).await.unwrap_err().to_string();
            assert!(refused.contains("refused the token (401)"), "{refused}");
        }
        let base = stand_in("pasarguard-v5.2.1.api-users.json").await;
        let wrong = read_api(&base, "admin-token", Flavor::Marzban).await.unwrap_err().to_string();
        assert!(wrong.contains("import it as pasarguard"), "{wrong}");
    }

    #[test]
    fn a_mysql_dump_reads_as_its_sqlite_twin() {
        let by_dump = read_file(&fixture("marzban-v0.8.4.mysqldump.sql"), Flavor::Marzban, None).unwrap();
        let by_file = read_file(&fixture("marzban-v0.8.4.sqlite3"), Flavor::Marzban, None).unwrap();
        assert_eq!(by_dump, by_file);
        let list = std::fs::read(fixture("marzban-v0.8.4.access.log")).unwrap();
        let from_dump =
            read_file(&fixture("marzban-v0.8.4.mysqldump.sql"), Flavor::Marzban, Some(&mut &list[..])).unwrap();
        let from_file = read_file(&fixture("marzban-v0.8.4.sqlite3"), Flavor::Marzban, Some(&mut &list[..])).unwrap();
        assert_eq!(from_dump, from_file);
        assert!(from_dump.users.iter().any(|u| !u.aliases.is_empty()));
        let whole = std::fs::read_to_string(fixture("marzban-v0.8.4.mysqldump.sql")).unwrap();
        let cut = &whole[..whole.find("-- Table structure for table `proxies`").unwrap()];
        let error = mysql::load(&mut cut.as_bytes()).unwrap_err().to_string();
        assert!(error.contains("cut short"), "{error}");
        for bad in [
            "CREATE TABLE `users` (\n  `id` int\n);\nINSERT INTO `users` VALUES (1,'a",
            "CREATE TABLE `users` (\n  `id` int\n);\nINSERT INTO `users` VALUES (1,2);",
            "CREATE TABLE `users` (\n  `id` int\n);\nINSERT INTO `users` VALUES (1) (2);",
        ] {
            assert!(mysql::load(&mut bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
