//! Remnawave: its REST API (`GET /api/users?start=&size=`, with an API token), in the three
//! shapes 2.0 to 3.3 answer (`uuid` alone, `uuid` and `id`, `id` alone; usage at the top or
//! under `userTraffic`).
//!
//! - The Hysteria2 password is the user's `vlessUuid`: Remnawave gives it to its nodes and
//!   puts it in `hysteria2://` links (it has no field of its own for it).
//! - `status` `DISABLED` (the owner's decision) comes disabled; `LIMITED` and `EXPIRED` are
//!   Remnawave's own reckoning of quota and expiry, which Hearth redoes, so they come enabled.
//! - `expireAt` is always set in Remnawave; a date in 2099 or later is "never".
//! - The old subscription path is the path of `subscriptionUrl` (`/api/sub/<shortUuid>`, or
//!   the subscription page's prefix), with each client-type variant (`/json`, `/singbox`...).
//! - Every request carries `X-Forwarded-For` and `X-Forwarded-Proto: https`: Remnawave closes
//!   the connection of a request without them when it is reached directly.

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::fetch::{PAGE, PAGE_BYTES, PAGES, api_client};
use super::incoming::{Fate, Field, Incoming, IncomingUser, Skipped};

/// What becomes of each field of a Remnawave user.
const FIELDS: &[Field] = &[
    Field { field: "username", fate: Fate::Kept, how: "the user's name" },
    Field {
        field: "vlessUuid",
        fate: Fate::Kept,
        how: "the Hysteria2 password (Remnawave's nodes and links use it so)",
    },
    Field { field: "trafficLimitBytes", fate: Fate::Kept, how: "the traffic quota" },
    Field { field: "usedTrafficBytes", fate: Fate::Kept, how: "the traffic used" },
    Field { field: "expireAt", fate: Fate::Kept, how: "the expiry (2099 and later: never)" },
    Field {
        field: "status",
        fate: Fate::Mapped,
        how: "DISABLED stays disabled; LIMITED and EXPIRED come enabled (Hearth's limits hold them)",
    },
    Field {
        field: "trafficLimitStrategy",
        fate: Fate::Mapped,
        how: "DAY daily, WEEK weekly, MONTH and MONTH_ROLLING on the 1st of each month (UTC)",
    },
    Field { field: "hwidDeviceLimit", fate: Fate::Kept, how: "the device limit" },
    Field { field: "telegramId", fate: Fate::Kept, how: "the user's own Telegram chat for the bot's reminders" },
    Field { field: "description, tag, email", fate: Fate::Mapped, how: "the note (tag and email appended)" },
    Field {
        field: "subscriptionUrl",
        fate: Fate::Kept,
        how: "old links: its path and each client-type variant (/json, /singbox...) as aliases",
    },
    Field {
        field: "activeInternalSquads, lastConnectedNode, createdAt, onlineAt",
        fate: Fate::Dropped,
        how: "Hearth's groups decide which nodes a user reaches; it counts from the import",
    },
];

/// The client-type variants of a subscription path Remnawave (and its subscription page)
/// answer.
const VARIANTS: [&str; 6] = ["json", "v2ray-json", "singbox", "mihomo", "stash", "clash"];

/// Unix seconds of an ISO-8601 UTC date (`2030-01-31T20:59:59.000Z`).
pub(super) fn unix_of(date: &str) -> Option<u64> {
    let date = date.trim().strip_suffix('Z')?;
    let (day, time) = date.split_once('T')?;
    let mut ymd = day.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let time = time.split('.').next()?;
    let mut hms = time.split(':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

/// The year 2099 begins: Remnawave's owners write a date past it for "never".
const NEVER_FROM: u64 = 4_070_908_800;

fn field<'a>(user: &'a Value, key: &str) -> &'a str {
    user.get(key).and_then(Value::as_str).unwrap_or_default().trim()
}

/// One Remnawave user as Hearth takes it; `Err` names why it is skipped.
fn user_of(user: &Value) -> Result<IncomingUser, (String, String)> {
    let name = field(user, "username").to_owned();
    let id = match (user.get("uuid").and_then(Value::as_str), user.get("id").and_then(Value::as_u64)) {
        (Some(uuid), _) => uuid.to_owned(),
        (None, Some(id)) => id.to_string(),
        (None, None) => name.clone(),
    };
    let skip = |reason: &str| (if name.is_empty() { id.clone() } else { name.clone() }, reason.to_owned());
    if name.is_empty() {
        return Err(skip("no username"));
    }
    let password = field(user, "vlessUuid");
    if password.is_empty() {
        return Err(skip("no vlessUuid (its Hysteria2 password)"));
    }
    let used = user
        .pointer("/userTraffic/usedTrafficBytes")
        .or_else(|| user.get("usedTrafficBytes"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let expires_at = match unix_of(field(user, "expireAt")) {
        Some(at) if at < NEVER_FROM => at,
        _ => 0,
    };
    let reset = match field(user, "trafficLimitStrategy") {
        "DAY" => "daily",
        "WEEK" => "weekly",
        // A month from the day the user was made, in Remnawave: Hearth's months start on the 1st.
        "MONTH" | "MONTH_ROLLING" => "monthly",
        _ => "none",
    };
    let mut note = field(user, "description").to_owned();
    for (label, value) in [("tag", field(user, "tag").to_owned()), ("email", field(user, "email").to_owned())] {
        if !value.is_empty() {
            if !note.is_empty() {
                note.push_str(" | ");
            }
            note.push_str(&format!("{label}: {value}"));
        }
    }
    let mut aliases = Vec::new();
    let url = field(user, "subscriptionUrl");
    if let Some((_, rest)) = url.split_once("://") {
        let path = rest.find('/').map_or("", |at| &rest[at..]).split(['?', '#']).next().unwrap_or_default();
        let path = path.trim_end_matches('/');
        // At the root of the subscription page's domain (`/<shortUuid>`), the link alone: a
        // variant there would be a folder of its own for each user.
        if !path.is_empty() {
            aliases.push(path.to_owned());
            if path[1..].contains('/') {
                aliases.extend(VARIANTS.iter().map(|variant| format!("{path}/{variant}")));
            }
        }
    }
    Ok(IncomingUser {
        id,
        name,
        password: Some(password.to_owned()),
        quota: user.get("trafficLimitBytes").and_then(Value::as_u64).unwrap_or(0),
        used_down: used,
        expires_at,
        enabled: field(user, "status") != "DISABLED",
        reset: reset.to_owned(),
        note,
        device_limit: user.get("hwidDeviceLimit").and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok()),
        telegram_id: user.get("telegramId").and_then(Value::as_i64).filter(|id| *id != 0),
        aliases,
        ..IncomingUser::default()
    })
}

/// Reads every user of the Remnawave panel at `base` (its address, `https://panel.example`)
/// with the API `token`.
pub(crate) async fn read(base: &str, token: &str) -> anyhow::Result<Incoming> {
    let (base, http) = api_client(base)?;
    let mut incoming = Incoming { source: "remnawave".to_owned(), fields: FIELDS.to_vec(), ..Incoming::default() };
    let mut names = std::collections::HashSet::new();
    let mut start = 0;
    for _ in 0..PAGES {
        let response = http
            .get(format!("{base}/api/users?start={start}&size={PAGE}"))
            .bearer_auth(token.trim())
            .header("x-forwarded-for", "127.0.0.1")
            .header("x-forwarded-proto", "https")
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "Remnawave at {base} did not answer ({}): is the address right? (Hearth sends X-Forwarded-For and X-Forwarded-Proto, as Remnawave wants when reached directly)",
                    e.without_url()
                )
            })?;
        match response.status().as_u16() {
            200 => {}
            401 => bail!("Remnawave refused the token (401): make an API token in its Settings, API tokens"),
            403 => bail!("Remnawave refused the token (403): it was deleted, or lacks the users scope (users:read)"),
            404 => bail!("{base} has no /api/users: is it Remnawave's panel address (not its subscription page)?"),
            status => bail!("Remnawave answered {status} to the list of users"),
        }
        let bytes = hearth_io::capped::read(response, PAGE_BYTES, "a page of Remnawave users").await?;
        let page: Value = serde_json::from_slice(&bytes).context("Remnawave's list of users is not JSON")?;
        let users = page
            .pointer("/response/users")
            .and_then(Value::as_array)
            .context("Remnawave's answer has no response.users: an unknown version?")?;
        let total = page.pointer("/response/total").and_then(Value::as_u64).unwrap_or(0) as usize;
        for user in users {
            match user_of(user) {
                // Newest first: a user made while the pages are read shifts them; each once.
                Ok(user) if !names.insert(user.name.clone()) => {}
                Ok(user) => incoming.users.push(user),
                Err((id, reason)) => incoming.skipped.push(Skipped { id, reason }),
            }
        }
        start += users.len();
        if users.is_empty() || start >= total {
            return Ok(incoming);
        }
    }
    bail!("Remnawave has more than {} users", PAGES * PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscription_page_at_the_root_is_one_alias() {
        let user = serde_json::json!({
            "uuid": "u-1", "username": "dana", "vlessUuid": "a92afbd8-b796-48af-a79f-692cc97bbc4b",
            "subscriptionUrl": "https://sub.example.com/x7Kp2mQv9LdN4tRb",
        });
        assert_eq!(user_of(&user).unwrap().aliases, ["/x7Kp2mQv9LdN4tRb"]);
    }

    #[test]
    fn dates_read_as_remnawave_writes_them() {
        assert_eq!(unix_of("2030-01-31T20:59:59.000Z"), Some(1_896_123_599));
        assert_eq!(unix_of("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(unix_of("2026-06-30T21:00:00.000Z"), Some(1_782_853_200));
        assert_eq!(unix_of("2026-13-01T00:00:00.000Z"), None);
        assert_eq!(unix_of("yesterday"), None);
    }

    /// Serves the fixture pages (`tests/fixtures/import/remnawave`, made from Remnawave's
    /// response models) as Remnawave does: the token checked, the proxy headers required (a
    /// request without them is cut off), pages by `start` and `size`.
    async fn stand_in(shape: &'static str) -> String {
        use axum::extract::Query;
        use axum::http::{HeaderMap, StatusCode};
        use axum::response::IntoResponse;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/import/remnawave");
        let mut all: Vec<Value> = Vec::new();
        for start in [0, 2] {
            let page: Value = serde_json::from_slice(
                &std::fs::read(dir.join(format!("{shape}/users_start{start}_size2.json"))).unwrap(),
            )
            .unwrap();
            all.extend(page["response"]["users"].as_array().unwrap().iter().cloned());
        }
        let unauthorized = std::fs::read(dir.join("error_401.json")).unwrap();
        let forbidden = std::fs::read(dir.join("error_403.json")).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = axum::Router::new().route(
            "/api/users",
            axum::routing::get(
                move |headers: HeaderMap, Query(query): Query<std::collections::HashMap<String, usize>>| {
                    let (all, unauthorized, forbidden) = (all.clone(), unauthorized.clone(), forbidden.clone());
                    async move {
                        let header =
                            |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                        if header("x-forwarded-for").is_empty() || header("x-forwarded-proto") != "https" {
                            return (StatusCode::IM_A_TEAPOT, "Remnawave would close the connection").into_response();
                        }
                        match header("authorization").as_str() {
                            "Bearer good-token" => {}
                            "Bearer deleted-token" => return (StatusCode::FORBIDDEN, forbidden).into_response(),
                            _ => return (StatusCode::UNAUTHORIZED, unauthorized).into_response(),
                        }
                        let start = query.get("start").copied().unwrap_or(0);
                        let size = query.get("size").copied().unwrap_or(25);
                        if !(1..=1000).contains(&size) {
                            return StatusCode::BAD_REQUEST.into_response();
                        }
                        let users: Vec<Value> = all.iter().skip(start).take(size).cloned().collect();
                        axum::Json(serde_json::json!({ "response": { "users": users, "total": all.len() } }))
                            .into_response()
                    }
                },
            ),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{address}")
    }

    #[tokio::test]
    async fn users_of_each_shape_come_with_their_vless_uuid_limits_and_old_paths() {
        let expected: Value = serde_json::from_slice(
            &std::fs::read(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../tests/fixtures/import/remnawave/expected_mapping.json"
            ))
            .unwrap(),
        )
        .unwrap();
        for shape in ["v3", "v2.8", "v2.1"] {
            let base = stand_in(shape).await;
            let incoming = read(&base, "good-token").await.unwrap();
            assert_eq!(incoming.source, "remnawave");
            assert!(incoming.skipped.is_empty(), "{shape}: {:?}", incoming.skipped);
            assert_eq!(incoming.users.len(), 3, "{shape}");
            assert_eq!(incoming.fields, FIELDS);
            for (user, want) in incoming.users.iter().zip(expected.as_array().unwrap()) {
                assert_eq!(user.name, want["name"].as_str().unwrap(), "{shape}");
                assert_eq!(user.password.as_deref(), want["password"].as_str(), "{shape}");
                assert_eq!(user.quota, want["quota_bytes"].as_u64().unwrap_or(0), "{shape}");
                assert_eq!(user.used_down, want["used"].as_u64().unwrap(), "{shape}");
                let never = want["expires_at"].as_u64().unwrap() >= NEVER_FROM;
                assert_eq!(user.expires_at, if never { 0 } else { want["expires_at"].as_u64().unwrap() }, "{shape}");
                assert_eq!(user.enabled, want["enabled"].as_bool().unwrap(), "{shape}");
                let reset = want["reset"].as_str().unwrap().replace("never", "none");
                assert_eq!(user.reset, reset, "{shape}");
                assert_eq!(user.note, want["note"].as_str().unwrap_or_default(), "{shape}");
                assert_eq!(user.telegram_id, want["telegram_id"].as_i64(), "{shape}");
                let paths: Vec<&str> =
                    want["old_sub_paths"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
                assert_eq!(user.aliases, paths, "{shape}");
            }
        }
        let base = stand_in("v3").await;
        let refused = read(&base, "wrong").await.unwrap_err().to_string();
        assert!(refused.contains("refused the token (401)"), "{refused}");
        let deleted = read(&base, "deleted-token").await.unwrap_err().to_string();
        assert!(deleted.contains("(403)"), "{deleted}");
        let elsewhere = read(&format!("{base}/nothing"), "good-token").await.unwrap_err().to_string();
        assert!(elsewhere.contains("has no /api/users"), "{elsewhere}");
        assert!(read("ftp://x", "t").await.is_err());
    }
}
