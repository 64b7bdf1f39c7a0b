//! Reading Marzban or PasarGuard over its REST API with an admin token: every page of its
//! users, each object read as a database row is.

use std::collections::HashSet;

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::user::{FIELDS, Flavor, Row, date, hysteria_auth, user_of};
use crate::import::fetch::{PAGE, PAGE_BYTES, PAGES, api_client};
use crate::import::incoming::{Incoming, Skipped};

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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::super::read_file;
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/import/marzban").join(name)
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
}
