//! 3x-ui (and x-ui forks): its SQLite database (`/etc/x-ui/x-ui.db`), as 3x-ui 2.9 (the
//! first with Hysteria) to 3.6 write it. Read by column name, as upgraded databases carry
//! their columns in another order.
//!
//! - Users are the clients of its Hysteria inbounds (`protocol` `hysteria`, or `hysteria2`
//!   as 2.9.3 to 3.0.1 also wrote): the password is the client's `auth` (or the inbound's
//!   shared one), the name its `email` (unique in 3x-ui). Clients of other protocols are
//!   listed as skipped: Hearth serves Hysteria2 only, and they hold no Hysteria2 password.
//! - Quota, usage and expiry are the `client_traffics` row's (what 3x-ui enforced): bytes, and
//!   milliseconds (negative: that many days from the first connection).
//! - A client disabled only because its quota or expiry ran out comes enabled: Hearth's own
//!   limits hold it, and raising them works as it did.
//! - The inbound's reset schedule (daily, weekly, monthly; hourly as daily) becomes the
//!   user's; a client's auto-renewal of 1, 7 or 28 to 31 days becomes a daily, weekly or
//!   monthly reset with no expiry (3x-ui never let it expire).
//! - The subscription id becomes aliases under the panel's subscription paths (`subPath`,
//!   `subJsonPath`, `subClashPath`, or the path of `subURI` and the like), for the first
//!   Hysteria client that has it.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::{Context as _, bail};
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

use super::fetch::{intact, wal_without_log};
use super::incoming::{Fate, Field, Incoming, IncomingUser, Skipped};

/// What becomes of each field of a 3x-ui client (and of its inbound).
const FIELDS: &[Field] = &[
    Field { field: "email", fate: Fate::Kept, how: "the user's name" },
    Field {
        field: "auth",
        fate: Fate::Kept,
        how: "the Hysteria2 password (the inbound's shared one for a client without)",
    },
    Field { field: "totalGB, total", fate: Fate::Kept, how: "the traffic quota (client_traffics' when it has a row)" },
    Field { field: "up, down", fate: Fate::Kept, how: "the traffic used" },
    Field {
        field: "expiryTime, expiry_time",
        fate: Fate::Kept,
        how: "the expiry; a negative one is days from the first connection; the inbound's when earlier",
    },
    Field {
        field: "enable",
        fate: Fate::Mapped,
        how: "disabled stays disabled, but a client disabled only because its quota or expiry ran out comes enabled (Hearth's limits hold it)",
    },
    Field {
        field: "reset",
        fate: Fate::Mapped,
        how: "auto-renewal: no expiry, and traffic back to zero daily (1 day), each Monday (2 to 14) or every 30 days from its next renewal (more)",
    },
    Field {
        field: "traffic_reset, traffic_reset_day",
        fate: Fate::Mapped,
        how: "the inbound's schedule: daily (hourly too), weekly, or monthly on the 1st (UTC) whatever the day",
    },
    Field {
        field: "subId",
        fate: Fate::Kept,
        how: "old links: aliases under each subscription path, for its first Hysteria client",
    },
    Field { field: "comment", fate: Fate::Kept, how: "the note (cut at 1000 bytes, said per user)" },
    Field {
        field: "limitIp",
        fate: Fate::Kept,
        how: "the device limit (devices at once: addresses, an IPv6 /64 as one)",
    },
    Field { field: "tgId", fate: Fate::Kept, how: "the user's own Telegram chat for the bot's reminders" },
    Field { field: "inbound enable", fate: Fate::Mapped, how: "a disabled inbound's clients come disabled" },
    Field {
        field: "id, password, flow, security (other protocols)",
        fate: Fate::Dropped,
        how: "Hearth serves Hysteria2 only: such clients are listed as skipped",
    },
    Field { field: "created_at, updated_at, last_online", fate: Fate::Dropped, how: "Hearth counts from the import" },
    Field {
        field: "group_name",
        fate: Fate::Dropped,
        how: "put users in Hearth's groups by hand: they decide which nodes a user reaches",
    },
];

/// A number as 3x-ui stores it: a number, a numeric string, or `""` (none).
fn number(value: Option<&Value>) -> i64 {
    match value {
        Some(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)).unwrap_or(0),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
        _ => 0,
    }
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default().trim()
}

/// A subscription path as 3x-ui serves it: a `/` at both ends.
fn folder(path: &str) -> String {
    let trimmed = path.trim().trim_matches('/');
    if trimmed.is_empty() { "/".to_owned() } else { format!("/{trimmed}/") }
}

/// The path part of a `subURI`-like setting (`https://host:port/path/`), as a folder.
fn uri_folder(uri: &str) -> Option<String> {
    let rest = uri.trim().split_once("://")?.1;
    let path = rest.find('/').map_or("/", |at| &rest[at..]);
    Some(folder(path.split(['?', '#']).next().unwrap_or("/")))
}

/// One client's `client_traffics` row.
struct Traffic {
    enable: bool,
    up: u64,
    down: u64,
    expiry_ms: i64,
    total: u64,
    /// Auto-renewal, days (0: none).
    renew_days: i64,
}

fn columns(conn: &Connection, table: &str) -> rusqlite::Result<HashSet<String>> {
    let mut query = conn.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?;
    let names: HashSet<String> = query.query_map([], |row| row.get(0))?.collect::<rusqlite::Result<_>>()?;
    Ok(names)
}

/// Reads a 3x-ui database at `path` (opened read-only; a live panel's `-wal` file beside it is
/// read too). `now` decides whether a limit had run out.
pub(crate) fn read(path: &Path, now: u64) -> anyhow::Result<Incoming> {
    let behind = wal_without_log(path);
    let (conn, inbound_columns) = open(path)?;
    let folders = subscription_folders(&panel_settings(&conn)?);
    let traffic = traffic_of(&conn)?;
    let inbounds = inbounds_of(&conn, &inbound_columns)?;

    let mut incoming = Incoming { source: "3x-ui".to_owned(), fields: FIELDS.to_vec(), ..Incoming::default() };
    incoming.warnings.extend(behind);
    let mut reader = Reader {
        folders,
        traffic,
        now_ms: i64::try_from(now).unwrap_or(i64::MAX).saturating_mul(1000),
        incoming,
        seen: HashMap::new(),
        subscriptions: HashMap::new(),
        others: Vec::new(),
    };
    for inbound in &inbounds {
        reader.inbound(inbound)?;
    }
    Ok(reader.finish())
}

/// The database at `path`, opened read-only and checked whole, and the columns of its
/// inbounds (which must hold clients).
fn open(path: &Path) -> anyhow::Result<(Connection, HashSet<String>)> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .with_context(|| format!("opening {} as SQLite", path.display()))?;
    let inbound_columns =
        columns(&conn, "inbounds").with_context(|| format!("{} is not an SQLite database", path.display()))?;
    intact(&conn, path)?;
    if !["id", "protocol", "settings"].iter().all(|c| inbound_columns.contains(*c)) {
        bail!("{} is not a 3x-ui database: it has no inbounds table with clients", path.display());
    }
    Ok((conn, inbound_columns))
}

/// The panel's settings, by key (none in a database without them).
fn panel_settings(conn: &Connection) -> anyhow::Result<HashMap<String, String>> {
    if !columns(conn, "settings")?.contains("key") {
        return Ok(HashMap::new());
    }
    let mut query = conn.prepare("SELECT key, value FROM settings")?;
    let rows = query.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, Option<String>>(1)?)))?;
    let settings = rows
        .map(|row| row.map(|(key, value)| (key, value.unwrap_or_default())))
        .collect::<rusqlite::Result<_>>()
        .context("reading the panel's settings")?;
    Ok(settings)
}

/// Where subscriptions were served: each path 3x-ui answers a subscription id under, as its
/// `settings` say (its defaults where they say nothing).
fn subscription_folders(settings: &HashMap<String, String>) -> Vec<String> {
    let setting = |key: &str, default: &str| settings.get(key).cloned().unwrap_or_else(|| default.to_owned());
    let mut folders = Vec::new();
    for (path_key, default, uri_key) in [
        ("subPath", "/sub/", "subURI"),
        ("subJsonPath", "/json/", "subJsonURI"),
        ("subClashPath", "/clash/", "subClashURI"),
    ] {
        let uri = setting(uri_key, "");
        let folder = if uri.trim().is_empty() { Some(folder(&setting(path_key, default))) } else { uri_folder(&uri) };
        if let Some(folder) = folder.filter(|f| f != "/" && !folders.contains(f)) {
            folders.push(folder);
        }
    }
    folders
}

/// Each client's `client_traffics` row, by email (none in a database without them).
fn traffic_of(conn: &Connection) -> anyhow::Result<HashMap<String, Traffic>> {
    let traffic_columns = columns(conn, "client_traffics")?;
    if !traffic_columns.contains("email") {
        return Ok(HashMap::new());
    }
    let reset = if traffic_columns.contains("reset") { "CAST(reset AS INTEGER)" } else { "0" };
    let mut query = conn.prepare(&format!(
        "SELECT email, enable, CAST(up AS INTEGER), CAST(down AS INTEGER), CAST(expiry_time AS INTEGER),
                    CAST(total AS INTEGER), {reset} FROM client_traffics"
    ))?;
    let rows = query.query_map([], |row| {
        Ok((
            row.get::<_, Option<String>>(0)?.unwrap_or_default(),
            Traffic {
                enable: row.get::<_, Option<i64>>(1)?.unwrap_or(1) != 0,
                up: row.get::<_, Option<i64>>(2)?.unwrap_or(0).max(0) as u64,
                down: row.get::<_, Option<i64>>(3)?.unwrap_or(0).max(0) as u64,
                expiry_ms: row.get::<_, Option<i64>>(4)?.unwrap_or(0),
                total: row.get::<_, Option<i64>>(5)?.unwrap_or(0).max(0) as u64,
                renew_days: row.get::<_, Option<i64>>(6)?.unwrap_or(0).max(0),
            },
        ))
    })?;
    let traffic = rows.collect::<rusqlite::Result<_>>().context("reading the clients' traffic (client_traffics)")?;
    Ok(traffic)
}

/// One inbound, as its row has it.
struct Inbound {
    id: i64,
    remark: String,
    enabled: bool,
    /// Milliseconds (0: none).
    expiry_ms: i64,
    protocol: String,
    /// JSON, with its clients.
    settings: String,
    /// JSON, with the shared Hysteria2 password if any.
    stream: String,
    /// Its traffic reset: hourly, daily, weekly, monthly (or none).
    reset_schedule: String,
    /// The day of the month of a monthly reset.
    reset_day: i64,
}

/// The inbounds, in order (columns a database has not read as none).
fn inbounds_of(conn: &Connection, inbound_columns: &HashSet<String>) -> anyhow::Result<Vec<Inbound>> {
    let optional =
        |name: &str| if inbound_columns.contains(name) { name.to_owned() } else { format!("NULL AS {name}") };
    let sql = format!(
        "SELECT id, {}, {}, {}, protocol, settings, {}, {}, {} FROM inbounds ORDER BY id",
        optional("remark"),
        optional("enable"),
        optional("expiry_time"),
        optional("stream_settings"),
        optional("traffic_reset"),
        optional("traffic_reset_day"),
    );
    let mut query = conn.prepare(&sql)?;
    let inbounds = query
        .query_map([], |row| {
            Ok(Inbound {
                id: row.get::<_, i64>(0)?,
                remark: row.get::<_, Option<String>>(1)?.unwrap_or_default(),
                enabled: row.get::<_, Option<i64>>(2)?.unwrap_or(1) != 0,
                expiry_ms: row.get::<_, Option<i64>>(3)?.unwrap_or(0),
                protocol: row.get::<_, Option<String>>(4)?.unwrap_or_default(),
                settings: row.get::<_, Option<String>>(5)?.unwrap_or_default(),
                stream: row.get::<_, Option<String>>(6)?.unwrap_or_default(),
                reset_schedule: row.get::<_, Option<String>>(7)?.unwrap_or_default(),
                reset_day: row.get::<_, Option<i64>>(8)?.unwrap_or(1),
            })
        })?
        .collect::<Result<Vec<_>, _>>()
        .context("reading the inbounds")?;
    Ok(inbounds)
}

/// The clients read so far, inbound by inbound, and what the panel says of all of them.
struct Reader {
    /// Where subscriptions were served.
    folders: Vec<String>,
    /// Each client's traffic, by email.
    traffic: HashMap<String, Traffic>,
    now_ms: i64,
    incoming: Incoming,
    /// The inbound each email was imported from.
    seen: HashMap<String, i64>,
    /// Each subscription id, and the client whose it is here.
    subscriptions: HashMap<String, String>,
    /// Skipped clients of other protocols with a subscription id: where each is in
    /// `incoming.skipped`, and the id.
    others: Vec<(usize, String)>,
}

impl Reader {
    /// Reads the clients of one inbound.
    fn inbound(&mut self, inbound: &Inbound) -> anyhow::Result<()> {
        let Inbound { id, remark, .. } = inbound;
        // Its clients are in there: none of them could be listed, so nothing is taken.
        let Ok(settings) = serde_json::from_str::<Value>(&inbound.settings) else {
            bail!(
                "inbound #{id} ({remark}) has settings that are not JSON, so its clients cannot be read: \
                 fix or delete it in 3x-ui, then import again"
            );
        };
        let Some(clients) = settings.get("clients").and_then(Value::as_array) else { return Ok(()) };
        let hysteria = matches!(inbound.protocol.as_str(), "hysteria" | "hysteria2");
        let shared_auth = serde_json::from_str::<Value>(&inbound.stream)
            .ok()
            .and_then(|s| s.pointer("/hysteriaSettings/auth").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default();
        for client in clients {
            if hysteria {
                self.hysteria_client(inbound, &shared_auth, client);
            } else {
                self.other_client(inbound, client);
            }
        }
        Ok(())
    }

    /// A client of another protocol: skipped (its subscription id kept, to say who keeps it).
    fn other_client(&mut self, inbound: &Inbound, client: &Value) {
        let Inbound { id: inbound_id, remark, protocol, .. } = inbound;
        let skipped = &mut self.incoming.skipped;
        let subscription = text(client, "subId");
        if !subscription.is_empty() {
            self.others.push((skipped.len(), subscription.to_owned()));
        }
        skipped.push(Skipped {
            id: client_id(inbound, client),
            reason: format!(
                "{protocol} client (inbound #{inbound_id} {remark}): Hearth serves Hysteria2 only, and this client has no Hysteria2 password to carry over"
            ),
        });
    }

    /// A Hysteria client: a user, unless it has no email or password, or its email was taken
    /// already.
    fn hysteria_client(&mut self, inbound: &Inbound, shared_auth: &str, client: &Value) {
        let email = text(client, "email").to_owned();
        let skip = |reason: String| Skipped { id: client_id(inbound, client), reason };
        if email.is_empty() {
            self.incoming.skipped.push(skip("a Hysteria client with no email (3x-ui's name for it)".into()));
            return;
        }
        if let Some(first) = self.seen.get(&email) {
            self.incoming.skipped.push(skip(format!("the same email again (imported from inbound #{first})")));
            return;
        }
        let auth = match text(client, "auth") {
            "" if !shared_auth.trim().is_empty() => shared_auth.trim().to_owned(),
            "" => {
                self.incoming
                    .skipped
                    .push(skip("no Hysteria2 password (auth), and the inbound has no shared one".into()));
                return;
            }
            auth => auth.to_owned(),
        };
        self.seen.insert(email.clone(), inbound.id);
        let mut user = user_of(client, &email, auth, inbound, self.traffic.get(&email), self.now_ms);
        user.aliases = self.aliases(text(client, "subId"), &email, &mut user.mapped);
        self.incoming.users.push(user);
    }

    /// The aliases of a client's subscription id, under each subscription folder: for the
    /// first client that has it (a later one is said to get a new link).
    fn aliases(&mut self, subscription: &str, email: &str, mapped: &mut Vec<String>) -> Vec<String> {
        match self.subscriptions.get(subscription) {
            _ if subscription.is_empty() => Vec::new(),
            Some(first) => {
                mapped.push(format!(
                    "its subscription id is {first}'s too: its old link keeps serving {first}, and this user gets a new one"
                ));
                Vec::new()
            }
            None => {
                self.subscriptions.insert(subscription.to_owned(), email.to_owned());
                let segment = hearth_shared::wire::alias_segment(subscription);
                if segment != subscription {
                    mapped.push(format!(
                        "its subscription id has characters a link carries escaped: its old link is served as {segment}"
                    ));
                }
                self.folders.iter().map(|folder| format!("{folder}{segment}")).collect()
            }
        }
    }

    /// What was read: a subscription id that also carried other protocols' links, the
    /// skipped clients say which user keeps it.
    fn finish(mut self) -> Incoming {
        for (index, subscription) in self.others {
            let ending = format!("/{}", hearth_shared::wire::alias_segment(&subscription));
            if let Some(user) = self.incoming.users.iter().find(|u| u.aliases.iter().any(|a| a.ends_with(&ending))) {
                let kept = format!("; its subscription is kept by {} (Hysteria2 only)", user.name);
                self.incoming.skipped[index].reason.push_str(&kept);
            }
        }
        self.incoming
    }
}

/// How a skipped client is named: its email, or its place when it has none.
fn client_id(inbound: &Inbound, client: &Value) -> String {
    let email = text(client, "email");
    if email.is_empty() { format!("inbound #{} client", inbound.id) } else { email.to_owned() }
}

/// One Hysteria client as Hearth takes it (its aliases aside), with the password `auth`, its
/// `client_traffics` row if any, at `now_ms`: its limits (the inbound's expiry when earlier),
/// its reset (its own renewal over the inbound's schedule), and enabled unless the owner
/// disabled it or its inbound.
fn user_of(
    client: &Value,
    email: &str,
    auth: String,
    inbound: &Inbound,
    row: Option<&Traffic>,
    now_ms: i64,
) -> IncomingUser {
    let (inbound_enabled, inbound_expiry, reset_day) = (inbound.enabled, inbound.expiry_ms, inbound.reset_day);
    let reset_schedule = &inbound.reset_schedule;
    let quota = row.map_or(number(client.get("totalGB")).max(0) as u64, |t| t.total);
    let (up, down) = row.map_or((0, 0), |t| (t.up, t.down));
    let mut expiry_ms = row.map_or(number(client.get("expiryTime")), |t| t.expiry_ms);
    if inbound_expiry > 0 && (expiry_ms <= 0 || inbound_expiry < expiry_ms) {
        expiry_ms = inbound_expiry;
    }
    let mut mapped = Vec::new();
    // The inbound's schedule, and what it became when not quite itself.
    let (mut reset, mut inbound_said) = match reset_schedule.as_str() {
        "hourly" => {
            ("daily", Some("its inbound's hourly traffic reset became a daily one (Hearth's most often)".to_owned()))
        }
        "daily" => ("daily", None),
        "weekly" => ("weekly", None),
        "monthly" => (
            "monthly",
            (reset_day > 1).then(|| {
                format!("its inbound reset traffic monthly on day {reset_day}: here it is the 1st of each month (UTC)")
            }),
        ),
        _ => ("none", None),
    };
    let mut next_reset = 0;
    let expired_at_ms = expiry_ms;
    // Auto-renewal: at its expiry 3x-ui adds the client's days and zeroes its usage,
    // forever. Here that is no expiry, and a reset as close to its period as Hearth has.
    let renew_days = row.map_or_else(|| number(client.get("reset")), |t| t.renew_days);
    if renew_days > 0 && expiry_ms != 0 {
        let renew_ms = renew_days.saturating_mul(86_400_000);
        let (strategy, how) = match renew_days {
            1 => ("daily", "every day at midnight UTC".to_owned()),
            2..=14 => ("weekly", format!("every Monday (3x-ui renewed it every {renew_days} days)")),
            _ => ("rolling30", format!("every 30 days (3x-ui renewed it every {renew_days} days)")),
        };
        if reset != "none" && reset != strategy {
            inbound_said = Some(format!("its inbound's {reset_schedule} reset gave way to its own renewal"));
        }
        reset = strategy;
        if expiry_ms > 0 && strategy == "rolling30" {
            // The next renewal 3x-ui would have made, counted as it counts them.
            let mut next = expiry_ms;
            while next <= now_ms {
                next = next.saturating_add(renew_ms);
            }
            next_reset = (next / 1000) as u64;
        }
        mapped.push(format!(
            "3x-ui renewed it for {renew_days} days at each expiry: it has no expiry here, and its traffic goes back to zero {how}"
        ));
        expiry_ms = 0;
    }
    mapped.extend(inbound_said);
    let (expires_at, days_from_first_use) = match expiry_ms {
        ms if ms > 0 => ((ms / 1000) as u64, 0),
        ms if ms < 0 => (0, (-ms as u64).div_ceil(86_400_000)),
        _ => (0, 0),
    };
    // Disabled only because a limit ran out: Hearth's own limits hold it.
    let ran_out = (quota > 0 && up.saturating_add(down) >= quota) || (expired_at_ms > 0 && expired_at_ms <= now_ms);
    let manual = client.get("enable").and_then(Value::as_bool) == Some(false) && !ran_out;
    let enabled = inbound_enabled && !manual && (row.is_none_or(|t| t.enable) || ran_out);
    let device_limit = u32::try_from(number(client.get("limitIp"))).ok().filter(|n| *n > 0);
    let telegram_id = Some(number(client.get("tgId"))).filter(|id| *id != 0);
    IncomingUser {
        id: email.to_owned(),
        name: email.to_owned(),
        password: Some(auth),
        quota,
        used_up: up,
        used_down: down,
        expires_at,
        days_from_first_use,
        enabled,
        reset: reset.to_owned(),
        note: text(client, "comment").to_owned(),
        device_limit,
        telegram_id,
        next_reset,
        mapped,
        ..IncomingUser::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/import/3x-ui").join(name)
    }

    /// The fixtures are databases shaped as 3x-ui 2.9.4 and 3.6.0 write them
    /// (`tests/fixtures/import/3x-ui/make_fixture.py`), read as of 2026-12-01.
    #[test]
    fn hysteria_clients_come_with_their_passwords_limits_and_subscription_paths() {
        for file in ["x-ui-v2.9.4.db", "x-ui-v3.6.0.db"] {
            let incoming = read(&fixture(file), 1_796_083_200).unwrap();
            assert_eq!(incoming.source, "3x-ui");
            let names: Vec<&str> = incoming.users.iter().map(|u| u.name.as_str()).collect();
            assert_eq!(names, ["alice", "bob", "carol", "erin"], "{file}");
            let alice = &incoming.users[0];
            assert_eq!(alice.password.as_deref(), Some("Alic3-hy2-pass"));
            assert_eq!((alice.quota, alice.used_up, alice.used_down), (53_687_091_200, 1_073_741_824, 5_368_709_120));
            assert_eq!((alice.expires_at, alice.enabled, alice.reset.as_str()), (1_798_761_600, true, "none"));
            assert_eq!(alice.note, "paid until 2027");
            assert_eq!(
                alice.aliases,
                ["/feed/alicesub0000001x", "/feed-json/alicesub0000001x", "/clash/alicesub0000001x"],
                "{file}"
            );
            let bob = &incoming.users[1];
            assert_eq!(bob.password.as_deref(), Some("b0b-hy2-pass"));
            assert_eq!((bob.days_from_first_use, bob.expires_at, bob.enabled), (30, 0, false), "{file}");
            // limitIp is the device limit; tgId the user's own chat.
            assert_eq!((bob.device_limit, alice.device_limit, alice.telegram_id), (Some(2), None, Some(123_456_789)));
            assert_eq!(bob.telegram_id, None, "{file}: an empty tgId is none");
            assert!(alice.mapped.is_empty() && bob.mapped.is_empty(), "{:?} {:?}", alice.mapped, bob.mapped);
            let skipped: Vec<(&str, &str)> =
                incoming.skipped.iter().map(|s| (s.id.as_str(), s.reason.as_str())).collect();
            assert_eq!(skipped.len(), 2, "{skipped:?}");
            assert_eq!(skipped[0].0, "alice-vless");
            assert!(skipped[0].1.ends_with("its subscription is kept by alice (Hysteria2 only)"), "{skipped:?}");
            assert!(skipped[1].1.starts_with("vless client (inbound #2 VLESS-443): Hearth serves Hysteria2 only"));
        }
    }

    /// Clients that renew themselves stay on with their own period, whatever the inbound's
    /// schedule (issue 47, 1); a subscription id with a space or a letter beyond ASCII is
    /// served as apps request it (6); a second client with the same id says whose it is, and
    /// a long note comes whole to be cut, and said, on the way in (7, 2).
    #[test]
    fn renewing_clients_stay_on_and_nothing_is_dropped_unsaid() {
        for file in ["x-ui-v2.9.4.db", "x-ui-v3.6.0.db"] {
            let now = 1_796_083_200; // 2026-12-01T00:00:00Z
            let incoming = read(&fixture(file), now).unwrap();
            let carol = &incoming.users[2];
            assert_eq!(carol.name, "carol");
            // Weekly on a monthly inbound: its own week, no expiry, a Hearth reset each Monday.
            assert_eq!((carol.expires_at, carol.days_from_first_use, carol.reset.as_str()), (0, 0, "weekly"), "{file}");
            assert_eq!((carol.enabled, carol.next_reset), (true, 0));
            assert_eq!(carol.mapped.len(), 3, "{file}: {:?}", carol.mapped);
            assert!(carol.mapped[0].contains("renewed it for 7 days at each expiry: it has no expiry here"));
            assert!(carol.mapped[1].contains("its inbound's monthly reset gave way to its own renewal"));
            assert!(carol.mapped[2].ends_with("its old link is served as carol%20sub%20%C3%BC"));
            assert_eq!(
                carol.aliases,
                ["/feed/carol%20sub%20%C3%BC", "/feed-json/carol%20sub%20%C3%BC", "/clash/carol%20sub%20%C3%BC"]
            );
            assert!(carol.aliases.iter().all(|a| crate::store::aliases::check(a).is_ok()));
            assert_eq!((carol.device_limit, carol.telegram_id), (Some(3), Some(555_000_111)));
            assert!(carol.note.len() > crate::store::users::MAX_NOTE && carol.note.starts_with("Оплачено"));
            // Thirty days, renewed last before today: every 30 days from its next renewal.
            let erin = &incoming.users[3];
            assert_eq!((erin.expires_at, erin.reset.as_str(), erin.enabled), (0, "rolling30", true), "{file}");
            assert_eq!(erin.next_reset, 1_793_491_200 + 2 * 30 * 86_400, "2026-12-31, as 3x-ui counts");
            assert!(erin.aliases.is_empty(), "bob keeps the link");
            assert!(erin.mapped.iter().any(|m| m.contains("its subscription id is bob's too")), "{:?}", erin.mapped);
            assert_eq!(incoming.fields, FIELDS);
        }
        // The day of a monthly reset, which only 3.x keeps, is said when it is not the 1st.
        let v3 = read(&fixture("x-ui-v3.6.0.db"), 1_796_083_200).unwrap();
        let mut temp = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut temp, &std::fs::read(fixture("x-ui-v3.6.0.db")).unwrap()).unwrap();
        let conn = Connection::open(temp.path()).unwrap();
        conn.execute_batch(
            "UPDATE client_traffics SET reset = 0 WHERE email = 'carol';
             UPDATE inbounds SET settings = replace(settings, '\"reset\": 7', '\"reset\": 0') WHERE id = 3;",
        )
        .unwrap();
        drop(conn);
        let monthly = read(temp.path(), 1_796_083_200).unwrap();
        let carol = &monthly.users[2];
        assert_eq!((carol.reset.as_str(), carol.expires_at), ("monthly", 1_797_724_800));
        assert_eq!(
            carol.mapped[0],
            "its inbound reset traffic monthly on day 15: here it is the 1st of each month (UTC)"
        );
        assert!(v3.users[2].mapped.iter().all(|m| !m.contains("day 15")), "the renewal replaced the schedule");
    }

    /// A damaged database imports nothing (issue 47, 3): a page of zeros where the clients'
    /// traffic or the panel's settings were, found before anything is read. An inbound whose
    /// settings are not JSON refuses the import, naming it (5).
    #[test]
    fn a_damaged_database_imports_nothing() {
        let temp = tempfile::tempdir().unwrap();
        for file in ["x-ui-v2.9.4.db", "x-ui-v3.6.0.db"] {
            for table in ["client_traffics", "settings", "inbounds"] {
                let copy = temp.path().join(format!("{table}-{file}"));
                std::fs::copy(fixture(file), &copy).unwrap();
                let conn = Connection::open(&copy).unwrap();
                conn.execute_batch("PRAGMA journal_mode = DELETE").unwrap();
                let (root, page): (i64, i64) = conn
                    .query_row(
                        "SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_master WHERE name = ?1",
                        [table],
                        |row| Ok((row.get(0)?, row.get(1)?)),
                    )
                    .unwrap();
                drop(conn);
                let mut bytes = std::fs::read(&copy).unwrap();
                let at = usize::try_from((root - 1) * page).unwrap();
                bytes[at..at + usize::try_from(page).unwrap()].fill(0);
                std::fs::write(&copy, bytes).unwrap();
                let error = format!("{:#}", read(&copy, 0).unwrap_err());
                assert!(
                    error.contains("is damaged") && error.contains("nothing is imported"),
                    "{file} {table}: {error}"
                );
            }
            let copy = temp.path().join(format!("json-{file}"));
            std::fs::copy(fixture(file), &copy).unwrap();
            let conn = Connection::open(&copy).unwrap();
            conn.execute_batch(
                "PRAGMA journal_mode = DELETE; UPDATE inbounds SET settings = '{\"clients\": [' WHERE id = 3",
            )
            .unwrap();
            drop(conn);
            let error = format!("{:#}", read(&copy, 0).unwrap_err());
            assert!(error.starts_with("inbound #3 (HY2-monthly) has settings that are not JSON"), "{error}");
        }
    }

    /// A database in write-ahead-log mode read without its `-wal` file is read, with a warning
    /// that it may be behind (issue 47, 9); with the file beside it, or in rollback mode, none.
    #[test]
    fn a_wal_database_without_its_log_is_said_to_be_perhaps_behind() {
        assert!(read(&fixture("x-ui-v3.6.0.db"), 0).unwrap().warnings.is_empty(), "its -wal is beside it");
        assert!(read(&fixture("x-ui-v2.9.4.db"), 0).unwrap().warnings.is_empty(), "not in WAL mode");
        let temp = tempfile::tempdir().unwrap();
        let alone = temp.path().join("x-ui.db");
        std::fs::copy(fixture("x-ui-v3.6.0.db"), &alone).unwrap();
        let read_alone = read(&alone, 0).unwrap();
        assert_eq!(read_alone.users.len(), 4);
        assert_eq!(read_alone.warnings.len(), 1);
        assert!(
            read_alone.warnings[0].starts_with("x-ui.db is in write-ahead-log mode and its -wal file is not beside it")
        );
    }

    #[test]
    fn anything_else_is_a_clear_error() {
        let temp = tempfile::tempdir().unwrap();
        let text = temp.path().join("x-ui.db");
        std::fs::write(&text, b"not a database at all, just text that is long enough to fill a header").unwrap();
        assert!(read(&text, 0).unwrap_err().to_string().contains("is not an SQLite database"));
        let other = temp.path().join("other.db");
        Connection::open(&other).unwrap().execute_batch("CREATE TABLE users (id INTEGER)").unwrap();
        assert!(read(&other, 0).unwrap_err().to_string().contains("is not a 3x-ui database"));
        assert!(read(&temp.path().join("missing.db"), 0).is_err());
    }

    /// The panel's subscription paths: the path of its URI settings over its path settings,
    /// its defaults where it says nothing, each once and never the root.
    #[test]
    fn subscription_folders_are_the_panels_own() {
        let settings = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect()
        };
        assert_eq!(subscription_folders(&settings(&[])), ["/sub/", "/json/", "/clash/"]);
        let set = [("subPath", "feed"), ("subJsonURI", "https://sub.example.com/j/"), ("subClashPath", "/feed/")];
        assert_eq!(subscription_folders(&settings(&set)), ["/feed/", "/j/"]);
        assert_eq!(subscription_folders(&settings(&[("subURI", "https://sub.example.com")])), ["/json/", "/clash/"]);
    }

    /// A client's limits are its traffic row's when it has one; one the owner disabled stays
    /// disabled unless only a limit ran out; a negative expiry is days from the first use.
    #[test]
    fn a_client_comes_as_its_panel_kept_it() {
        let inbound = Inbound {
            id: 3,
            remark: "HY2".to_owned(),
            enabled: true,
            expiry_ms: 0,
            protocol: "hysteria".to_owned(),
            settings: String::new(),
            stream: String::new(),
            reset_schedule: "hourly".to_owned(),
            reset_day: 1,
        };
        let client = serde_json::json!({
            "email": "dave", "totalGB": 100, "expiryTime": -2 * 86_400_000, "enable": false,
            "limitIp": "3", "tgId": 0, "comment": " a note "
        });
        let now_ms = 1_796_083_200_000;
        let dave = user_of(&client, "dave", "dave-pass".to_owned(), &inbound, None, now_ms);
        assert_eq!((dave.quota, dave.expires_at, dave.days_from_first_use), (100, 0, 2));
        assert_eq!(
            (dave.enabled, dave.reset.as_str(), dave.device_limit, dave.telegram_id),
            (false, "daily", Some(3), None)
        );
        assert_eq!((dave.password.as_deref(), dave.note.as_str()), (Some("dave-pass"), "a note"));
        assert_eq!(dave.mapped, ["its inbound's hourly traffic reset became a daily one (Hearth's most often)"]);
        let row = Traffic { enable: false, up: 60, down: 40, expiry_ms: 0, total: 100, renew_days: 0 };
        let dave = user_of(&client, "dave", "dave-pass".to_owned(), &inbound, Some(&row), now_ms);
        assert_eq!((dave.used_up, dave.used_down, dave.expires_at, dave.days_from_first_use), (60, 40, 0, 0));
        assert!(dave.enabled, "disabled only because its quota ran out");
        let off = Inbound { enabled: false, ..inbound };
        assert!(!user_of(&client, "dave", "dave-pass".to_owned(), &off, Some(&row), now_ms).enabled);
    }

    #[test]
    fn subscription_paths_follow_the_panel_settings() {
        assert_eq!(folder("sub"), "/sub/");
        assert_eq!(folder("/a/b/"), "/a/b/");
        assert_eq!(uri_folder("https://sub.example.com:2096/s/"), Some("/s/".to_owned()));
        assert_eq!(uri_folder("https://sub.example.com"), Some("/".to_owned()));
    }
}
