//! The owner's Telegram bot (`/api/telegram`) and users' own chats with it
//! (`/api/users/{id}/telegram`). Setting the bot up needs the `admin` scope and Telegram's
//! word that the token and the chat work; the token never comes back out.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::input::{Bounded, Input, Reply, bytes, ok};
use super::write::{change, change_users};
use crate::app::App;
use crate::auth::Scope;
use crate::error::Error;
use crate::store::{self, events};

/// The owner's Telegram bot, as set in Settings.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::api) struct TelegramInput {
    /// The bot's token from @BotFather.
    token: String,
    /// The owner's chat with the bot (a number; a group's is negative).
    chat_id: i64,
    #[serde(default = "english")]
    lang: String,
    #[serde(default = "everything")]
    events: Vec<String>,
    /// Whether the bot takes users: subscription pages link to it (a one-time link binds the
    /// user's own chat), and users' chats are told their quota, expiry and a disabled account.
    #[serde(default)]
    tell_users: bool,
}

fn english() -> String {
    "en".to_owned()
}

fn everything() -> Vec<String> {
    vec!["*".to_owned()]
}

impl Bounded for TelegramInput {
    fn check_bounds(&self) -> Result<(), Error> {
        bytes("token", &self.token, 128)?;
        bytes("lang", &self.lang, 8)?;
        if self.events.len() > events::KINDS.len() {
            return Err(Error::invalid("too_long", format!("events must be at most {}", events::KINDS.len())));
        }
        self.events.iter().try_for_each(|kind| bytes("events", kind, 64))
    }
}

pub(super) async fn get(State(app): State<Arc<App>>, auth: crate::api::request::Auth) -> Reply {
    auth.need(Scope::Read)?;
    let bot = app.db.read(store::telegram::view).await?;
    ok(json!({ "telegram": bot }))
}

/// Sets the bot up, once Telegram took the token and the chat took a first message.
pub(super) async fn set(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Input(input): Input<TelegramInput>,
) -> Reply {
    auth.need(Scope::Admin)?;
    let token = input.token.trim().to_owned();
    let well_formed = token.split_once(':').is_some_and(|(id, secret)| {
        !id.is_empty()
            && id.bytes().all(|b| b.is_ascii_digit())
            && !secret.is_empty()
            && secret.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    });
    if !well_formed {
        return Err(Error::invalid("bad_token", "a bot token is <digits>:<letters>, as @BotFather gives it").into());
    }
    if !store::telegram::LANGS.contains(&input.lang.as_str()) {
        return Err(Error::invalid("bad_lang", "lang must be en, ru, fa or zh").into());
    }
    let filter = events::check_filter(&input.events)?;
    let api = crate::telegram::Api::new(&app.config.telegram_api, std::time::Duration::from_secs(15))?;
    let bot_name = crate::telegram::check(&api, &token, input.chat_id, &input.lang).await?;
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let linked = store::telegram::taking_users(tx)?;
        store::telegram::set(
            tx,
            &app.signer.vault,
            &token,
            &bot_name,
            input.chat_id,
            &input.lang,
            &filter,
            input.tell_users,
            now,
        )?;
        // Every subscription page links to the bot, or no longer does.
        if store::telegram::taking_users(tx)? != linked {
            crate::publish::republish_users(tx, &app.signer, now)?;
        }
        store::audit(tx, now, actor, "telegram.set", &format!("@{bot_name}"), &input.chat_id.to_string())
    })
    .await?;
    let bot = app.db.read(store::telegram::view).await?;
    ok(json!({ "telegram": bot }))
}

pub(super) async fn clear(State(app): State<Arc<App>>, auth: crate::api::request::Auth) -> Reply {
    change(&app, &auth, Scope::Admin, move |tx, app, actor, now| {
        let linked = store::telegram::taking_users(tx)?;
        if !store::telegram::clear(tx)? {
            return Err(Error::NotFound("telegram bot"));
        }
        if linked.is_some() {
            crate::publish::republish_users(tx, &app.signer, now)?;
        }
        store::audit(tx, now, actor, "telegram.clear", "", "")
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A user's own Telegram chat, for messages about its quota and expiry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::api) struct UserChat {
    /// `null`: none.
    chat_id: Option<i64>,
}

impl Bounded for UserChat {
    fn check_bounds(&self) -> Result<(), Error> {
        Ok(())
    }
}

pub(super) async fn set_user_chat(
    State(app): State<Arc<App>>,
    auth: crate::api::request::Auth,
    Path(id): Path<u64>,
    Input(input): Input<UserChat>,
) -> Reply {
    change_users(&app, &auth, Some(id), move |tx, _, actor, now| {
        store::telegram::set_user_chat(tx, id, input.chat_id)?;
        store::audit(tx, now, actor, "user.telegram", &format!("user {id}"), "")
    })
    .await?;
    ok(json!({ "user": id, "chat_id": input.chat_id }))
}
