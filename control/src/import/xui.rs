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

use super::{Incoming, IncomingUser, Skipped};

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
}

fn columns(conn: &Connection, table: &str) -> rusqlite::Result<HashSet<String>> {
    let mut query = conn.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?;
    let names: HashSet<String> = query.query_map([], |row| row.get(0))?.collect::<rusqlite::Result<_>>()?;
    Ok(names)
}

/// Reads a 3x-ui database at `path` (opened read-only; a live panel's `-wal` file beside it is
/// read too). `now` decides whether a limit had run out.
pub(crate) fn read(path: &Path, now: u64) -> anyhow::Result<Incoming> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .with_context(|| format!("opening {} as SQLite", path.display()))?;
    let inbound_columns =
        columns(&conn, "inbounds").with_context(|| format!("{} is not an SQLite database", path.display()))?;
    if !["id", "protocol", "settings"].iter().all(|c| inbound_columns.contains(*c)) {
        bail!("{} is not a 3x-ui database: it has no inbounds table with clients", path.display());
    }
    let settings: HashMap<String, String> = if columns(&conn, "settings")?.contains("key") {
        let mut query = conn.prepare("SELECT key, value FROM settings")?;
        let rows = query.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, Option<String>>(1)?)))?;
        rows.filter_map(Result::ok).map(|(key, value)| (key, value.unwrap_or_default())).collect()
    } else {
        HashMap::new()
    };
    let setting = |key: &str, default: &str| settings.get(key).cloned().unwrap_or_else(|| default.to_owned());
    // Where subscriptions were served: each path 3x-ui answers a subscription id under.
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

    let traffic: HashMap<String, Traffic> = if columns(&conn, "client_traffics")?.contains("email") {
        let mut query = conn.prepare(
            "SELECT email, enable, CAST(up AS INTEGER), CAST(down AS INTEGER), CAST(expiry_time AS INTEGER),
                    CAST(total AS INTEGER) FROM client_traffics",
        )?;
        let rows = query.query_map([], |row| {
            Ok((
                row.get::<_, Option<String>>(0)?.unwrap_or_default(),
                Traffic {
                    enable: row.get::<_, Option<i64>>(1)?.unwrap_or(1) != 0,
                    up: row.get::<_, Option<i64>>(2)?.unwrap_or(0).max(0) as u64,
                    down: row.get::<_, Option<i64>>(3)?.unwrap_or(0).max(0) as u64,
                    expiry_ms: row.get::<_, Option<i64>>(4)?.unwrap_or(0),
                    total: row.get::<_, Option<i64>>(5)?.unwrap_or(0).max(0) as u64,
                },
            ))
        })?;
        rows.filter_map(Result::ok).collect()
    } else {
        HashMap::new()
    };

    let optional =
        |name: &str| if inbound_columns.contains(name) { name.to_owned() } else { format!("NULL AS {name}") };
    let sql = format!(
        "SELECT id, {}, {}, {}, protocol, settings, {}, {} FROM inbounds ORDER BY id",
        optional("remark"),
        optional("enable"),
        optional("expiry_time"),
        optional("stream_settings"),
        optional("traffic_reset"),
    );
    let mut query = conn.prepare(&sql)?;
    let inbounds = query
        .query_map([], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, Option<String>>(1)?.unwrap_or_default(),
                row.get::<_, Option<i64>>(2)?.unwrap_or(1) != 0,
                row.get::<_, Option<i64>>(3)?.unwrap_or(0),
                row.get::<_, Option<String>>(4)?.unwrap_or_default(),
                row.get::<_, Option<String>>(5)?.unwrap_or_default(),
                row.get::<_, Option<String>>(6)?.unwrap_or_default(),
                row.get::<_, Option<String>>(7)?.unwrap_or_default(),
            ))
        })?
        .collect::<Result<Vec<_>, _>>()
        .context("reading the inbounds")?;

    let mut incoming = Incoming { source: "3x-ui".to_owned(), ..Incoming::default() };
    let mut seen: HashMap<String, i64> = HashMap::new();
    let mut subscriptions: HashSet<String> = HashSet::new();
    let mut others: Vec<(usize, String)> = Vec::new();
    let now_ms = i64::try_from(now).unwrap_or(i64::MAX).saturating_mul(1000);
    for (inbound, remark, inbound_enabled, inbound_expiry, protocol, settings, stream, reset_schedule) in inbounds {
        let Ok(settings) = serde_json::from_str::<Value>(&settings) else {
            incoming.skipped.push(Skipped {
                id: format!("inbound #{inbound}"),
                reason: format!("inbound #{inbound} ({remark}): its settings are not JSON"),
            });
            continue;
        };
        let Some(clients) = settings.get("clients").and_then(Value::as_array) else { continue };
        let hysteria = matches!(protocol.as_str(), "hysteria" | "hysteria2");
        let shared_auth = serde_json::from_str::<Value>(&stream)
            .ok()
            .and_then(|s| s.pointer("/hysteriaSettings/auth").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default();
        for client in clients {
            let email = text(client, "email").to_owned();
            let id = if email.is_empty() { format!("inbound #{inbound} client") } else { email.clone() };
            let skip = |reason: String| Skipped { id: id.clone(), reason };
            if !hysteria {
                let subscription = text(client, "subId");
                if !subscription.is_empty() {
                    others.push((incoming.skipped.len(), subscription.to_owned()));
                }
                incoming.skipped.push(skip(format!(
                    "{protocol} client (inbound #{inbound} {remark}): Hearth serves Hysteria2 only, and this client has no Hysteria2 password to carry over"
                )));
                continue;
            }
            if email.is_empty() {
                incoming.skipped.push(skip("a Hysteria client with no email (3x-ui's name for it)".into()));
                continue;
            }
            if let Some(first) = seen.get(&email) {
                incoming.skipped.push(skip(format!("the same email again (imported from inbound #{first})")));
                continue;
            }
            let auth = match text(client, "auth") {
                "" if !shared_auth.trim().is_empty() => shared_auth.trim().to_owned(),
                "" => {
                    incoming
                        .skipped
                        .push(skip("no Hysteria2 password (auth), and the inbound has no shared one".into()));
                    continue;
                }
                auth => auth.to_owned(),
            };
            seen.insert(email.clone(), inbound);
            let row = traffic.get(&email);
            let quota = row.map_or(number(client.get("totalGB")).max(0) as u64, |t| t.total);
            let (up, down) = row.map_or((0, 0), |t| (t.up, t.down));
            let mut expiry_ms = row.map_or(number(client.get("expiryTime")), |t| t.expiry_ms);
            if inbound_expiry > 0 && (expiry_ms <= 0 || inbound_expiry < expiry_ms) {
                expiry_ms = inbound_expiry;
            }
            let renew_days = number(client.get("reset"));
            let mut reset = match reset_schedule.as_str() {
                "hourly" | "daily" => "daily",
                "weekly" => "weekly",
                "monthly" => "monthly",
                _ => "none",
            };
            // Auto-renewal: 3x-ui pushed the expiry on and zeroed the usage every N days.
            if reset == "none" && renew_days > 0 && expiry_ms != 0 {
                reset = match renew_days {
                    1 => "daily",
                    7 => "weekly",
                    28..=31 => "monthly",
                    _ => "none",
                };
                if reset != "none" && expiry_ms > 0 {
                    expiry_ms = 0;
                }
            }
            let (expires_at, days_from_first_use) = match expiry_ms {
                ms if ms > 0 => ((ms / 1000) as u64, 0),
                ms if ms < 0 => (0, (-ms as u64).div_ceil(86_400_000)),
                _ => (0, 0),
            };
            // Disabled only because a limit ran out: Hearth's own limits hold it.
            let ran_out = (quota > 0 && up.saturating_add(down) >= quota) || (expiry_ms > 0 && expiry_ms <= now_ms);
            let manual = client.get("enable").and_then(Value::as_bool) == Some(false) && !ran_out;
            let enabled = inbound_enabled && !manual && (row.is_none_or(|t| t.enable) || ran_out);
            let subscription = text(client, "subId");
            let aliases = if subscription.is_empty() || !subscriptions.insert(subscription.to_owned()) {
                Vec::new()
            } else {
                folders.iter().map(|folder| format!("{folder}{subscription}")).collect()
            };
            incoming.users.push(IncomingUser {
                id: email.clone(),
                name: email,
                password: Some(auth),
                quota,
                used_up: up,
                used_down: down,
                expires_at,
                days_from_first_use,
                enabled,
                reset: reset.to_owned(),
                note: text(client, "comment").chars().take(crate::store::users::MAX_NOTE).collect(),
                aliases,
                ..IncomingUser::default()
            });
        }
    }
    // A subscription id that also carried other protocols' links: the skipped clients say
    // which user keeps it.
    for (index, subscription) in others {
        if let Some(user) =
            incoming.users.iter().find(|u| u.aliases.iter().any(|a| a.ends_with(&format!("/{subscription}"))))
        {
            let kept = format!("; its subscription is kept by {} (Hysteria2 only)", user.name);
            incoming.skipped[index].reason.push_str(&kept);
        }
    }
    Ok(incoming)
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
            assert_eq!(names, ["alice", "bob"], "{file}");
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
            let skipped: Vec<(&str, &str)> =
                incoming.skipped.iter().map(|s| (s.id.as_str(), s.reason.as_str())).collect();
            assert_eq!(skipped.len(), 2, "{skipped:?}");
            assert_eq!(skipped[0].0, "alice-vless");
            assert!(skipped[0].1.ends_with("its subscription is kept by alice (Hysteria2 only)"), "{skipped:?}");
            assert!(skipped[1].1.starts_with("vless client (inbound #2 VLESS-443): Hearth serves Hysteria2 only"));
        }
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

    #[test]
    fn subscription_paths_follow_the_panel_settings() {
        assert_eq!(folder("sub"), "/sub/");
        assert_eq!(folder("/a/b/"), "/a/b/");
        assert_eq!(uri_folder("https://sub.example.com:2096/s/"), Some("/s/".to_owned()));
        assert_eq!(uri_folder("https://sub.example.com"), Some("/".to_owned()));
    }
}
