//! The bot for the people who use the links: a user binds their own chat by opening the
//! one-time link on their subscription page (Telegram sends `/start <code>-<lang>` for them:
//! nobody types a token into a chat), then asks for their usage and their link, and is told
//! when their quota runs low, their access is about to end or their account is disabled, in
//! the language of their subscription page.
//!
//! A chat sees only the users bound to it; a chat with none gets no answer at all. Each chat
//! is answered at most [`PER_MINUTE`] times a minute. The owner turns all of it off with the
//! bot's `tell_users`.

use std::collections::HashMap;
use std::sync::Arc;

use hearth_shared::ct_eq;
use hearth_shared::wire::UserId;

use super::api::Api;
use super::user_text::{Lang, Told, lang_of, told};
use crate::app::App;
use crate::error::Error;
use crate::store::events::EventView;
use crate::store::telegram::{self as store, Bot, bind_code};
use crate::store::users;

/// Users are warned this long before they expire (and again a day before).
const EXPIRY_WARNING: u64 = 3 * 86_400;
/// Answers to one chat in a minute, at most.
pub(super) const PER_MINUTE: u32 = 10;
/// A user is warned again this long before the end of their access.
const LAST_DAY: u64 = 86_400;

/// What `/start` carries from a page: `<user>-<mac>-<lang>`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Start<'a> {
    pub(super) user: UserId,
    /// `<user>-<mac>`, as [`bind_code`] makes it.
    pub(super) code: &'a str,
    pub(super) lang: Lang,
}

pub(super) fn parse_start(param: &str) -> Option<Start<'_>> {
    let (code, lang) = param.rsplit_once('-')?;
    let (user, mac) = code.split_once('-')?;
    if mac.len() != 32 || !mac.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(Start { user: user.parse().ok()?, code, lang: lang_of(lang)? })
}

/// Answers per chat in the current minute.
#[derive(Default)]
pub(super) struct Limiter {
    minute: u64,
    chats: HashMap<i64, u32>,
}

impl Limiter {
    /// Whether `chat` may be answered at `now` (and counts it).
    pub(super) fn allow(&mut self, chat: i64, now: u64) -> bool {
        if now / 60 != self.minute {
            self.minute = now / 60;
            self.chats.clear();
        }
        let count = self.chats.entry(chat).or_insert(0);
        *count += 1;
        *count <= PER_MINUTE
    }
}

/// The answer to a message from `chat` when it is a user's matter: a `/start` from a page, or
/// a command from a chat users are bound to. `None`: not one (the owner's commands, or a
/// chat that gets nothing).
pub(super) async fn answer(
    app: &Arc<App>,
    bot: &Bot,
    chat: i64,
    text: &str,
    limiter: &mut Limiter,
    now: u64,
) -> Option<String> {
    if !bot.tell_users {
        return None;
    }
    let mut words = text.split_whitespace();
    let command = words.next().unwrap_or_default().split('@').next().unwrap_or_default();
    let param = words.next();
    let owners = chat == bot.chat_id;
    match (command, param) {
        ("/start", Some(param)) => {
            if !limiter.allow(chat, now) {
                return None;
            }
            Some(bind(app, bot, chat, param, now).await.unwrap_or_else(|e| {
                tracing::error!(error = %e, "telegram: binding a chat failed");
                told(lang_of(&bot.lang).unwrap_or_default(), Told::BindFailed)
            }))
        }
        ("/usage" | "/link" | "/stop", _) | ("/start" | "/help", None) if !(owners && command == "/help") => {
            let state = app.clone();
            let bound = app
                .db
                .read(move |c| {
                    let ids = store::users_of_chat(c, chat)?;
                    let mut bound = Vec::new();
                    for id in ids {
                        let lang = store::chat_lang(c, id)?;
                        let link = users::token(c, &state.signer.vault, id)?.to_link_form();
                        bound.push((users::get(c, id)?, lang, link));
                    }
                    Ok(bound)
                })
                .await;
            let bound = match bound {
                Ok(bound) => bound,
                Err(e) => {
                    tracing::error!(error = %e, "telegram: reading a chat's users failed");
                    return None;
                }
            };
            // A chat nobody bound gets nothing, whatever it asks.
            if bound.is_empty() || !limiter.allow(chat, now) {
                return None;
            }
            let lang = bound.iter().find_map(|(_, lang, _)| lang.as_deref().and_then(lang_of));
            let lang = lang.or_else(|| lang_of(&bot.lang)).unwrap_or_default();
            Some(match command {
                "/usage" => bound
                    .iter()
                    .map(|(user, _, _)| super::text::card(lang.text().code, user, None))
                    .collect::<Vec<_>>()
                    .join("\n\n"),
                "/link" => bound
                    .iter()
                    .map(|(user, _, link)| {
                        super::text::card(lang.text().code, user, Some(&format!("{}/{link}", app.sub_url())))
                    })
                    .collect::<Vec<_>>()
                    .join("\n\n"),
                "/stop" => match app.db.write(move |tx| store::unbind_chat(tx, chat)).await {
                    Ok(_) => told(lang, Told::Stopped),
                    Err(e) => {
                        tracing::error!(error = %e, "telegram: unbinding a chat failed");
                        return None;
                    }
                },
                _ => told(lang, Told::Help),
            })
        }
        _ => None,
    }
}

/// Binds `chat` to the user whose page's link carried `param`, once; the answer.
async fn bind(app: &Arc<App>, bot: &Bot, chat: i64, param: &str, now: u64) -> Result<String, Error> {
    let fallback = lang_of(&bot.lang).unwrap_or_default();
    let Some(start) = parse_start(param) else { return Ok(told(fallback, Told::BindFailed)) };
    let (user, code, lang) = (start.user, start.code.to_owned(), start.lang);
    let state = app.clone();
    let bound = app
        .db
        .write(move |tx| {
            let Some(binds) = store::binds(tx, user)? else { return Ok(None) };
            let expected = bind_code(&state.signer.vault, user, binds);
            if !ct_eq(expected.as_bytes(), code.as_bytes()) || !store::bind(tx, user, binds, chat, lang.text().code)? {
                return Ok(None);
            }
            // The link on the page is used: the page gets a new one.
            let mut changes = crate::store::changes::Changes::default();
            changes.users.insert(user);
            crate::publish::changes(tx, &state.signer, changes, now)?;
            let view = users::get(tx, user)?;
            crate::store::audit(
                tx,
                now,
                "telegram",
                "user.telegram_bound",
                &format!("user {user} ({})", view.name),
                "",
            )?;
            Ok(Some(view))
        })
        .await?;
    let Some(view) = bound else {
        tracing::info!("telegram: a link to bind a chat was refused (used, or not a page's)");
        return Ok(told(lang, Told::BindFailed));
    };
    app.changed();
    Ok(format!("{}\n\n{}", told(lang, Told::Welcome), super::text::card(lang.text().code, &view, None)))
}

/// What a user's own chat is reminded of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reminder {
    /// A share of the quota crossed.
    Quota(u64),
    /// The access ends at this time: in three days or less (`last_day`: in a day or less).
    Expiry { expires: u64, last_day: bool },
    /// The account was disabled.
    Disabled,
}

/// The expiry reminder due for a user whose access ends at `expires` (0: never), warned
/// before of the expiries `warned` (three days ahead) and `warned_day` (a day ahead).
pub(super) fn expiry_due(expires: u64, warned: u64, warned_day: u64, now: u64) -> Option<Reminder> {
    if expires <= now || expires > now + EXPIRY_WARNING {
        return None;
    }
    if expires <= now + LAST_DAY {
        return (warned_day != expires).then_some(Reminder::Expiry { expires, last_day: true });
    }
    (warned != expires).then_some(Reminder::Expiry { expires, last_day: false })
}

/// Tells users with a chat of their own what `pending` events say of them (each share of the
/// quota crossed, lowest first; a disabled account), and of their access ending in three
/// days and again in one (once for each expiry), each in the user's language.
pub(super) async fn tell(app: &Arc<App>, api: &Api, bot: &Bot, pending: &[EventView], now: u64) {
    let mut told_of: Vec<(UserId, Reminder)> = pending
        .iter()
        .filter_map(|e| {
            let user = e.data.pointer("/user/id")?.as_u64()?;
            match e.kind.as_str() {
                "user.near_quota" => Some((user, Reminder::Quota(e.data["percent"].as_u64()?))),
                "user.disabled" => Some((user, Reminder::Disabled)),
                _ => None,
            }
        })
        .collect();
    let found = app
        .db
        .read(move |c| {
            let mut chats = Vec::new();
            for (user, reminder) in told_of.drain(..) {
                if let Some(store::UserChat { chat: Some(chat), lang }) = store::chat_of(c, user)? {
                    chats.push((user, chat, lang, reminder));
                }
            }
            for store::Expiring { user, chat, lang, expires, warned, warned_day } in
                store::expiring(c, now, now + EXPIRY_WARNING)?
            {
                if let Some(reminder) = expiry_due(expires, warned, warned_day, now) {
                    chats.push((user, chat, lang, reminder));
                }
            }
            Ok(chats)
        })
        .await;
    let found = match found {
        Ok(found) => found,
        Err(e) => {
            tracing::error!(error = %e, "telegram: reading whom to tell failed");
            return;
        }
    };
    for (user, chat, lang, reminder) in found {
        let lang = lang.as_deref().and_then(lang_of).or_else(|| lang_of(&bot.lang)).unwrap_or_default();
        let text = match reminder {
            Reminder::Quota(percent) => told(lang, Told::Near { percent }),
            Reminder::Expiry { expires, last_day } => {
                told(lang, Told::Expires { date: &crate::clock::civil_date(expires), last_day })
            }
            Reminder::Disabled => told(lang, Told::Disabled),
        };
        if let Err(e) = api.send(&bot.token, chat, &text).await {
            tracing::warn!(user, error = %e, "telegram: telling a user failed");
            continue;
        }
        if let Reminder::Expiry { expires, last_day } = reminder {
            // A day ahead, the three-day warning is past too: it is not sent after it.
            let recorded = app.db.write(move |tx| store::warned_of_expiry(tx, user, expires, last_day)).await;
            if let Err(e) = recorded {
                tracing::error!(user, error = %e, "telegram: recording a reminder failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn a_start_parameter_is_a_user_a_mac_and_a_language() {
        let mac = "0123456789abcdef0123456789abcdef";
        let param = format!("42-{mac}-fa");
        let start = parse_start(&param).unwrap();
        assert_eq!(start, Start { user: 42, code: &format!("42-{mac}"), lang: Lang::Fa });
        for bad in [
            format!("42-{mac}"),
            format!("42-{mac}-de"),
            format!("x-{mac}-en"),
            format!("42-{}-en", &mac[1..]),
            format!("42-{}g-en", &mac[1..]),
            String::new(),
        ] {
            assert_eq!(parse_start(&bad), None, "{bad}");
        }
    }

    #[test]
    fn expiry_reminders_come_three_days_and_one_day_ahead_once_each() {
        const DAY: u64 = 86_400;
        let expires = 10 * DAY;
        let three = Some(Reminder::Expiry { expires, last_day: false });
        let one = Some(Reminder::Expiry { expires, last_day: true });
        assert_eq!(expiry_due(expires, 0, 0, expires - 4 * DAY), None, "too early");
        assert_eq!(expiry_due(expires, 0, 0, expires - 3 * DAY), three);
        assert_eq!(expiry_due(expires, expires, 0, expires - 2 * DAY), None, "told");
        assert_eq!(expiry_due(expires, expires, 0, expires - DAY), one);
        assert_eq!(expiry_due(expires, 0, 0, expires - DAY / 2), one, "late: the last day's only");
        assert_eq!(expiry_due(expires, expires, expires, expires - 60), None, "told");
        assert_eq!(expiry_due(expires, 0, 0, expires), None, "over");
        assert_eq!(expiry_due(0, 0, 0, 5), None, "never");
        assert_eq!(expiry_due(expires, expires - 1, expires - 1, expires - 2 * DAY), three, "a new expiry");
    }

    #[test]
    fn a_chat_is_answered_ten_times_a_minute() {
        let mut limiter = Limiter::default();
        assert!((0..PER_MINUTE).all(|_| limiter.allow(7, 120)));
        assert!(!limiter.allow(7, 150));
        assert!(limiter.allow(8, 150), "another chat has its own");
        assert!(limiter.allow(7, 180), "the next minute");
    }

    /// A user binds with the code of their page, once; their chat sees them and nobody else;
    /// a chat nobody bound gets nothing; reminders (each share of the quota, a disabled
    /// account, three days and one day before the end) come once each in the page's
    /// language, at the moment the clock passed in says.
    #[tokio::test]
    async fn a_user_binds_once_sees_only_their_own_and_is_reminded_once_each() {
        const DAY: u64 = 86_400;
        let control = crate::testing::TestControl::new(false);
        let app = control.app.clone();
        let now = crate::clock::now();
        let state = app.clone();
        let (ann, ben) = app
            .db
            .write(move |tx| {
                store::set(tx, &state.signer.vault, "1:t", "hearth_test_bot", 1, "en", "", true, now)?;
                let mut ids = Vec::new();
                for name in ["ann", "ben"] {
                    let input = crate::store::users::UserInput { name: Some(name.into()), ..Default::default() };
                    ids.push(crate::users::create(tx, &state.signer, "test", &input, now)?.id);
                }
                tx.execute(
                    "UPDATE users SET expires_at = ?2 WHERE id = ?1",
                    rusqlite::params![ids[0], now + 5 * DAY / 2],
                )?;
                Ok((ids[0], ids[1]))
            })
            .await
            .unwrap();
        let state = app.clone();
        let bot = app.db.read(move |c| store::bot(c, &state.signer.vault)).await.unwrap().unwrap();
        let mut limiter = Limiter::default();
        let code = bind_code(&app.signer.vault, ann, 0);
        assert_ne!(code, bind_code(&app.signer.vault, ann, 1), "a bind makes a new code");
        assert_ne!(code, bind_code(&app.signer.vault, ben, 0));

        // Unbound chats get nothing; a forged code (ben's id, ann's MAC) binds nobody.
        for text in ["/usage", "/link", "/help", "/stop", "/start"] {
            assert_eq!(answer(&app, &bot, 500, text, &mut limiter, now).await, None, "{text}");
        }
        let forged = format!("{ben}-{}-en", code.split_once('-').unwrap().1);
        let refused = answer(&app, &bot, 500, &format!("/start {forged}"), &mut limiter, now).await.unwrap();
        assert_eq!(refused, told(Lang::En, Told::BindFailed));
        let welcome = answer(&app, &bot, 500, &format!("/start {code}-fa"), &mut limiter, now).await.unwrap();
        assert!(welcome.starts_with(&told(Lang::Fa, Told::Welcome)) && welcome.contains("ann"), "{welcome}");
        let again = answer(&app, &bot, 501, &format!("/start {code}-ru"), &mut limiter, now).await.unwrap();
        assert_eq!(again, told(Lang::Ru, Told::BindFailed), "one time only");
        assert_eq!(answer(&app, &bot, 501, "/usage", &mut limiter, now).await, None, "the used code bound nobody");
        let usage = answer(&app, &bot, 500, "/usage", &mut limiter, now).await.unwrap();
        assert!(usage.contains("<b>ann</b>") && !usage.contains("ben") && !usage.contains("://"), "{usage}");
        let link = answer(&app, &bot, 500, "/link", &mut limiter, now).await.unwrap();
        assert!(link.contains("<b>ann</b>") && link.contains("://") && link.contains("<pre>"), "{link}");
        assert!(!link.contains("ben"));
        let off = Bot { tell_users: false, ..bot.clone() };
        assert_eq!(answer(&app, &off, 500, "/usage", &mut limiter, now).await, None, "the owner turned it off");

        // Reminders, with the clock passed in.
        let (base, sent) = crate::telegram::tests::recording_bot_api().await;
        let api = Api::new(&base, Duration::from_secs(5)).unwrap();
        let event = |id: i64, kind: &str, user: u64, data: Value| EventView {
            id,
            kind: kind.into(),
            at: 0,
            subject: String::new(),
            data: json!({ "user": { "id": user, "name": "x" }, "percent": data }),
        };
        let pending = [
            event(1, "user.near_quota", ann, json!(80)),
            event(2, "user.near_quota", ann, json!(95)),
            event(3, "user.near_quota", ben, json!(80)),
            event(4, "user.disabled", ann, Value::Null),
        ];
        let sent_now =
            || sent.lock().unwrap().iter().map(|m| m["text"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
        tell(&app, &api, &bot, &pending, now).await;
        let date = crate::clock::civil_date(now + 5 * DAY / 2);
        let expected = [
            told(Lang::Fa, Told::Near { percent: 80 }),
            told(Lang::Fa, Told::Near { percent: 95 }),
            told(Lang::Fa, Told::Disabled),
            told(Lang::Fa, Told::Expires { date: &date, last_day: false }),
        ];
        assert_eq!(sent_now(), expected, "ben has no chat: nothing for him");
        tell(&app, &api, &bot, &[], now + 60).await;
        assert_eq!(sent_now().len(), 4, "three days ahead, once");
        tell(&app, &api, &bot, &[], now + 2 * DAY).await;
        assert_eq!(sent_now()[4], told(Lang::Fa, Told::Expires { date: &date, last_day: true }));
        tell(&app, &api, &bot, &[], now + 2 * DAY + 60).await;
        tell(&app, &api, &bot, &[], now + 3 * DAY).await;
        assert_eq!(sent_now().len(), 5, "a day ahead, once; nothing once it is over");
        assert!(sent.lock().unwrap().iter().all(|m| m["chat_id"] == 500));

        // Unbound: nothing more.
        assert_eq!(answer(&app, &bot, 500, "/stop", &mut limiter, now).await.unwrap(), told(Lang::Fa, Told::Stopped));
        assert_eq!(answer(&app, &bot, 500, "/usage", &mut limiter, now).await, None);
    }
}
