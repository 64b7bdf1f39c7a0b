//! The owner's Telegram bot: events told as messages in the owner's language (a burst as one
//! message), commands from the owner's chat, and, when the owner wants it, users told of their
//! own quota and expiry. It reads its updates by long polling (`getUpdates`), so a control at
//! home behind NAT works; nothing reaches control from Telegram.
//!
//! Events are told from `told` on, so nothing is lost while Telegram or control is down (they
//! wait in the database for 30 days). The Bot API's address is `telegram_api` (the tests point
//! it at a stand-in); the token, part of every request's path, never appears in a log or error.

use std::sync::Arc;
use std::time::Duration;

// Text for a message in Telegram's HTML (which takes `&quot;` and numeric entities too).
use hearth_shared::render::page::escape;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::app::{App, now};
use crate::error::Error;
use crate::store::events::{self, EventView};
use crate::store::telegram::{self as store, Bot};
use crate::store::users;

mod api;
mod chats;
mod text;
mod user_text;
pub(crate) use api::Api;
use text::{Said, message, say};

/// How long a burst of events is gathered into one message.
const BATCH: Duration = Duration::from_secs(3);
/// The longest wait for a commit (users' expiries are looked for this often).
const IDLE: Duration = Duration::from_secs(60);
/// The most events read at once.
const PAGE: usize = 500;
/// How long `getUpdates` waits for an update.
const POLL_SECS: u64 = 50;

/// Checks a bot before it is kept: the token is a bot's (`getMe`), and the chat takes its
/// messages (a first message, in the owner's language). Returns the bot's username.
pub(crate) async fn check(api: &Api, token: &str, chat: i64, lang: &str) -> Result<String, Error> {
    let refused = |what: api::ApiError| Error::invalid("telegram_refused", what.to_string());
    let me = api.call(token, "getMe", &json!({})).await.map_err(refused)?;
    let name = me["username"].as_str().unwrap_or_default().to_owned();
    api.send(token, chat, &say(lang, Said::Hello { bot: &name })).await.map_err(refused)?;
    Ok(name)
}

/// Tells the owner's chat the events since the last told, a burst as one message, until
/// shutdown; and users with a chat of their own their quota and expiry, when the owner wants.
pub(crate) async fn notifier(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    // Made once there is a bot: an install without one keeps no client in memory.
    let mut client: Option<Api> = None;
    let mut changes = app.published.subscribe();
    // How long to wait before reading the events at once: after a failure, and at the start
    // (events may have come while control was down).
    let mut retry: Option<Duration> = Some(BATCH);
    let mut failures = 0u32;
    let mut expiries_checked = std::time::Instant::now();
    loop {
        // Events come with commits: wait for one (at most a minute, for expiries), then a
        // moment more to gather the burst it begins.
        let stop = match retry.take() {
            Some(wait) => crate::tasks::stopped(&mut shutdown, wait).await,
            None => {
                crate::tasks::nudged(&mut shutdown, &mut changes, IDLE).await
                    || crate::tasks::stopped(&mut shutdown, BATCH).await
            }
        };
        if stop {
            return;
        }
        let state = app.clone();
        let bot = match app.db.read(move |c| store::bot(c, &state.signer.vault)).await {
            Ok(Some(bot)) => bot,
            Ok(None) => continue,
            Err(e) => {
                tracing::error!(error = %e, "telegram: reading the bot failed");
                continue;
            }
        };
        let api = match &client {
            Some(api) => api.clone(),
            None => match Api::new(&app.config.telegram_api, Duration::from_secs(30)) {
                Ok(api) => client.insert(api).clone(),
                Err(_) => return,
            },
        };
        let after = bot.told;
        let Ok(pending) = app.db.read(move |c| events::after(c, after, PAGE as u64)).await else { continue };
        let Some(last) = pending.last().map(|e| e.id) else {
            // Expiries come by themselves: looked for every minute (and with every burst).
            if bot.tell_users && expiries_checked.elapsed() >= Duration::from_secs(60) {
                chats::tell(&app, &api, &bot, &[], now()).await;
                expiries_checked = std::time::Instant::now();
            }
            continue;
        };
        let told: Vec<EventView> = pending.iter().filter(|e| events::takes(&bot.events, &e.kind)).cloned().collect();
        if !told.is_empty()
            && let Err(e) = api.send(&bot.token, bot.chat_id, &message(&bot.lang, &told)).await
        {
            tracing::warn!(error = %e, "telegram: telling the owner failed; retrying");
            failures += 1;
            retry = Some((BATCH * 2u32.saturating_pow(failures.min(7))).min(Duration::from_secs(300)));
            continue;
        }
        failures = 0;
        // A long backlog goes on at once.
        if pending.len() == PAGE {
            retry = Some(Duration::ZERO);
        }
        if bot.tell_users {
            chats::tell(&app, &api, &bot, &pending, now()).await;
            expiries_checked = std::time::Instant::now();
        }
        if let Err(e) = app.db.write(move |tx| store::told(tx, last)).await {
            tracing::error!(error = %e, "telegram: recording what was told failed");
        }
    }
}

/// Reads the bot's updates by long polling until shutdown, and answers commands from the
/// owner's chat, and users' from the chats they bound (see [`chats`]); anyone else's are not
/// answered.
pub(crate) async fn poller(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let mut client: Option<Api> = None;
    let mut changes = app.published.subscribe();
    let mut wait = Duration::from_secs(1);
    let mut limiter = chats::Limiter::default();
    loop {
        let state = app.clone();
        let bot = match app.db.read(move |c| store::bot(c, &state.signer.vault)).await {
            Ok(Some(bot)) => bot,
            // No bot: one comes with a commit (the owner's setting).
            _ => {
                if crate::tasks::nudged(&mut shutdown, &mut changes, IDLE).await {
                    return;
                }
                continue;
            }
        };
        let api = match &client {
            Some(api) => api.clone(),
            None => match Api::new(&app.config.telegram_api, Duration::from_secs(POLL_SECS + 15)) {
                Ok(api) => client.insert(api).clone(),
                Err(_) => return,
            },
        };
        let body = json!({ "offset": bot.update_offset, "timeout": POLL_SECS, "allowed_updates": ["message"] });
        let updates = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            updates = api.call(&bot.token, "getUpdates", &body) => updates,
        };
        let updates = match updates {
            Ok(updates) => {
                wait = Duration::from_secs(1);
                updates
            }
            Err(e) => {
                tracing::warn!(error = %e, "telegram: reading updates failed; retrying");
                if crate::tasks::stopped(&mut shutdown, wait).await {
                    return;
                }
                wait = (wait * 2).min(Duration::from_secs(60));
                continue;
            }
        };
        let mut offset = bot.update_offset;
        for update in updates.as_array().map_or(&[][..], Vec::as_slice) {
            offset = offset.max(update["update_id"].as_i64().unwrap_or(0) + 1);
            let message = &update["message"];
            let text = message["text"].as_str().unwrap_or_default();
            let Some(chat) = message.pointer("/chat/id").and_then(Value::as_i64) else { continue };
            if !text.starts_with('/') || text.len() > 4096 {
                continue;
            }
            let reply = match chats::answer(&app, &bot, chat, text, &mut limiter, now()).await {
                Some(reply) => reply,
                None if chat == bot.chat_id => command(&app, &bot, text).await,
                None => continue,
            };
            if let Err(e) = api.send(&bot.token, chat, &reply).await {
                tracing::warn!(error = %e, "telegram: answering a command failed");
            }
        }
        if offset != bot.update_offset
            && let Err(e) = app.db.write(move |tx| store::read_up_to(tx, offset)).await
        {
            tracing::error!(error = %e, "telegram: recording the update offset failed");
        }
    }
}

/// Runs a command from the owner's chat; the answer (HTML).
async fn command(app: &Arc<App>, bot: &Bot, text: &str) -> String {
    let mut words = text.split_whitespace();
    let name = words.next().unwrap_or_default();
    let name = name.split('@').next().unwrap_or_default();
    let rest: Vec<&str> = words.collect();
    let lang = bot.lang.as_str();
    let answer = match name {
        "/status" => status(app, lang).await,
        "/user" if !rest.is_empty() => user(app, lang, &rest.join(" ")).await,
        "/disable" | "/enable" if !rest.is_empty() => {
            let enabled = name == "/enable";
            let input = users::UserInput { enabled: Some(enabled), ..users::UserInput::default() };
            change(app, lang, &rest.join(" "), move |tx, app, id, now| {
                crate::users::update(tx, &app.signer, "telegram", id, &input, now).map(|u| u.status)
            })
            .await
        }
        "/extend" if rest.len() >= 2 => match rest[rest.len() - 1].parse::<u64>() {
            Ok(days) => {
                change(app, lang, &rest[..rest.len() - 1].join(" "), move |tx, app, id, now| {
                    crate::users::extend(tx, &app.signer, "telegram", id, days, now)
                        .map(|u| crate::clock::civil_date(u.expires_at))
                })
                .await
            }
            Err(_) => Ok(say(lang, Said::Help)),
        },
        _ => Ok(say(lang, Said::Help)),
    };
    answer.unwrap_or_else(|e| escape(&e.to_string()))
}

/// Changes the user named `name`; the answer names the user and what it is now.
async fn change(
    app: &Arc<App>,
    lang: &str,
    name: &str,
    f: impl FnOnce(&rusqlite::Connection, &App, u64, u64) -> Result<String, Error> + Send + 'static,
) -> Result<String, Error> {
    let (who, state) = (name.to_owned(), app.clone());
    let done = app
        .db
        .write(move |tx| match users::id_by_name(tx, &who) {
            Ok(id) => f(tx, &state, id, now()).map(Some),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        })
        .await?;
    app.changed();
    Ok(match done {
        Some(became) => say(lang, Said::Done(&format!("{name}: {became}"))),
        None => say(lang, Said::NoSuchUser(name)),
    })
}

async fn status(app: &Arc<App>, lang: &str) -> Result<String, Error> {
    let overview = app.db.read(move |c| crate::store::overview::overview(c, now())).await?;
    let users: Vec<String> = overview.users.iter().map(|(status, n)| format!("{status}: {n}")).collect();
    Ok(say(
        lang,
        Said::Status {
            users: &users.join(", "),
            online: overview.online,
            nodes: overview.nodes,
            pending: overview.pending,
        },
    ))
}

async fn user(app: &Arc<App>, lang: &str, name: &str) -> Result<String, Error> {
    let (who, state) = (name.to_owned(), app.clone());
    let found = app
        .db
        .read(move |c| match users::id_by_name(c, &who) {
            Ok(id) => Ok(Some((users::get(c, id)?, users::token(c, &state.signer.vault, id)?))),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        })
        .await?;
    let Some((user, token)) = found else { return Ok(say(lang, Said::NoSuchUser(name))) };
    let link = format!("{}/{}", app.sub_url(), token.to_link_form());
    Ok(text::card(lang, &user, Some(&link)))
}

#[cfg(test)]
mod tests {
    use hearth_shared::render::page::human_bytes as size;

    use super::*;

    #[test]
    fn a_burst_is_one_message_in_the_owners_language() {
        let event =
            |id, kind: &str, data: Value| EventView { id, kind: kind.into(), at: 0, subject: String::new(), data };
        let burst: Vec<EventView> = (0..40)
            .map(|i| {
                event(i, "user.near_quota", json!({ "user": { "id": i, "name": format!("u<{i}>") }, "percent": 80 }))
            })
            .collect();
        let text = message("en", &burst);
        assert_eq!(text.lines().count(), text::MOST_LINES + 1);
        assert!(text.starts_with("⚠️ u&lt;0&gt; used 80% of the quota"), "{text}");
        assert!(text.ends_with("… and 10 more (see the panel)"), "{text}");
        let ru = message("ru", &burst[..1]);
        assert_eq!(ru, "⚠️ u&lt;0&gt; израсходовал 80% квоты");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(12), "12 B");
    }

    /// A Bot API that records each `sendMessage` body and answers ok.
    pub(super) async fn recording_bot_api() -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let sent: std::sync::Arc<std::sync::Mutex<Vec<Value>>> = Default::default();
        let record = sent.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let Ok(n) = stream.read(&mut buf).await else { return };
                        if n == 0 {
                            return;
                        }
                        request.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&request).to_string();
                        let Some(head_end) = text.find("\r\n\r\n") else { continue };
                        let length: usize = text[..head_end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if request.len() < head_end + 4 + length {
                            continue;
                        }
                        let body: Value =
                            serde_json::from_slice(&request[head_end + 4..head_end + 4 + length]).unwrap_or_default();
                        record.lock().unwrap().push(body);
                        let answer = r#"{"ok":true,"result":{}}"#;
                        let reply = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                            answer.len()
                        );
                        let _ = stream.write_all(reply.as_bytes()).await;
                        return;
                    }
                });
            }
        });
        (base, sent)
    }

    /// A user with a chat of their own is told each share of the quota crossed (80 % and 95 %,
    /// lowest first), in the bot's language; a user without a chat is told nothing.
    #[tokio::test]
    async fn a_users_own_chat_is_told_each_share_of_the_quota_crossed() {
        let control = crate::testing::TestControl::new(false);
        let app = control.app.clone();
        let state = app.clone();
        let ids: Vec<u64> = app
            .db
            .write(move |tx| {
                let mut ids = Vec::new();
                for name in ["ann", "ben"] {
                    let input = crate::store::users::UserInput { name: Some(name.into()), ..Default::default() };
                    ids.push(crate::users::create(tx, &state.signer, "test", &input, 1)?.id);
                }
                tx.execute("UPDATE users SET telegram_id = 4242 WHERE id = ?1", [ids[0]])?;
                Ok(ids)
            })
            .await
            .unwrap();
        let (base, sent) = recording_bot_api().await;
        let api = Api::new(&base, Duration::from_secs(5)).unwrap();
        let bot = Bot {
            token: "1:t".into(),
            chat_id: 1,
            lang: "en".into(),
            events: String::new(),
            told: 0,
            update_offset: 0,
            tell_users: true,
        };
        let near = |id: i64, user: u64, percent: u64| EventView {
            id,
            kind: "user.near_quota".into(),
            at: 0,
            subject: String::new(),
            data: json!({ "user": { "id": user, "name": "x" }, "percent": percent }),
        };
        let pending = [near(1, ids[0], 80), near(2, ids[0], 95), near(3, ids[1], 80)];
        chats::tell(&app, &api, &bot, &pending, now()).await;
        let sent = sent.lock().unwrap().clone();
        let told: Vec<(i64, String)> =
            sent.iter().map(|m| (m["chat_id"].as_i64().unwrap(), m["text"].as_str().unwrap().to_owned())).collect();
        assert_eq!(
            told,
            [
                (4242, "You have used 80% of your VPN traffic.".to_owned()),
                (4242, "You have used 95% of your VPN traffic.".to_owned())
            ]
        );
    }
}
