//! The owner's Telegram bot: its settings, how far the events were told, how far its updates
//! were read. The token is kept sealed under the master key and never comes back out.

use rusqlite::{Connection, OptionalExtension as _, params};
use serde::Serialize;

use crate::error::Error;
use crate::secrets::Purpose;
use crate::secrets::Vault;

/// The languages the bot speaks.
pub(crate) const LANGS: [&str; 4] = ["en", "ru", "fa", "zh"];

/// The bot as the panel shows it (never its token).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct TelegramView {
    pub bot_name: String,
    pub chat_id: i64,
    pub lang: String,
    pub events: Vec<String>,
    pub tell_users: bool,
    pub updated: u64,
}

/// The bot as the bot's tasks use it.
#[derive(Clone, Debug)]
pub(crate) struct Bot {
    pub token: String,
    pub chat_id: i64,
    pub lang: String,
    pub events: String,
    pub told: i64,
    pub update_offset: i64,
    pub tell_users: bool,
}

/// Sets the bot up (replacing one set before); events are told from the next one on.
#[allow(clippy::too_many_arguments)]
pub(crate) fn set(
    conn: &Connection,
    vault: &Vault,
    token: &str,
    bot_name: &str,
    chat_id: i64,
    lang: &str,
    events: &str,
    tell_users: bool,
    now: u64,
) -> Result<(), Error> {
    let told: i64 = conn.query_row("SELECT ifnull(max(id), 0) FROM events", [], |row| row.get(0))?;
    conn.execute(
        "INSERT INTO telegram (id, token_enc, bot_name, chat_id, lang, events, told, tell_users, updated)
         VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (id) DO UPDATE SET token_enc = excluded.token_enc, bot_name = excluded.bot_name,
             chat_id = excluded.chat_id, lang = excluded.lang, events = excluded.events, told = excluded.told,
             update_offset = 0, tell_users = excluded.tell_users, updated = excluded.updated",
        params![
            vault.seal(Purpose::Telegram, token.as_bytes()),
            bot_name,
            chat_id,
            lang,
            events,
            told,
            tell_users,
            now
        ],
    )?;
    Ok(())
}

/// Forgets the bot.
pub(crate) fn clear(conn: &Connection) -> Result<bool, Error> {
    Ok(conn.execute("DELETE FROM telegram", [])? > 0)
}

pub(crate) fn view(conn: &Connection) -> Result<Option<TelegramView>, Error> {
    Ok(conn
        .prepare_cached("SELECT bot_name, chat_id, lang, events, tell_users, updated FROM telegram")?
        .query_row([], |row| {
            Ok(TelegramView {
                bot_name: row.get(0)?,
                chat_id: row.get(1)?,
                lang: row.get(2)?,
                events: row.get::<_, String>(3)?.split(',').map(str::to_owned).collect(),
                tell_users: row.get(4)?,
                updated: row.get(5)?,
            })
        })
        .optional()?)
}

pub(crate) fn bot(conn: &Connection, vault: &Vault) -> Result<Option<Bot>, Error> {
    let row = conn
        .prepare_cached("SELECT token_enc, chat_id, lang, events, told, update_offset, tell_users FROM telegram")?
        .query_row([], |row| {
            let sealed: Vec<u8> = row.get(0)?;
            let bot = Bot {
                token: String::new(),
                chat_id: row.get(1)?,
                lang: row.get(2)?,
                events: row.get(3)?,
                told: row.get(4)?,
                update_offset: row.get(5)?,
                tell_users: row.get(6)?,
            };
            Ok((sealed, bot))
        })
        .optional()?;
    let Some((sealed, mut bot)) = row else { return Ok(None) };
    bot.token = String::from_utf8(vault.open(Purpose::Telegram, &sealed)?.to_vec())
        .map_err(|_| Error::Internal("the bot's token is not text".into()))?;
    Ok(Some(bot))
}

/// Events were told up to `id`.
pub(crate) fn told(conn: &Connection, id: i64) -> Result<(), Error> {
    conn.prepare_cached("UPDATE telegram SET told = max(told, ?1)")?.execute([id])?;
    Ok(())
}

/// Updates were read up to `offset` (the next to ask for).
pub(crate) fn read_up_to(conn: &Connection, offset: i64) -> Result<(), Error> {
    conn.prepare_cached("UPDATE telegram SET update_offset = max(update_offset, ?1)")?.execute([offset])?;
    Ok(())
}

/// Sets (or clears) a user's own Telegram chat.
pub(crate) fn set_user_chat(conn: &Connection, user: u64, chat: Option<i64>) -> Result<(), Error> {
    if conn.execute("UPDATE users SET telegram_id = ?2 WHERE id = ?1", params![user, chat])? == 0 {
        return Err(Error::NotFound("user"));
    }
    Ok(())
}

/// The bot's username when it takes users (the subscription pages link to it).
pub(crate) fn taking_users(conn: &Connection) -> Result<Option<String>, Error> {
    Ok(conn
        .prepare_cached("SELECT bot_name FROM telegram WHERE tell_users")?
        .query_row([], |row| row.get(0))
        .optional()?)
}

/// How many times the user bound a chat (`None`: no such user).
pub(crate) fn binds(conn: &Connection, user: u64) -> Result<Option<u64>, Error> {
    Ok(conn
        .prepare_cached("SELECT telegram_binds FROM users WHERE id = ?1")?
        .query_row([user], |row| row.get(0))
        .optional()?)
}

/// Binds `chat` to the user, speaking `lang`, if the user's binds are still `binds` (the code
/// was drawn from them: it works once). Returns whether it did.
pub(crate) fn bind(conn: &Connection, user: u64, binds: u64, chat: i64, lang: &str) -> Result<bool, Error> {
    let changed = conn
        .prepare_cached(
            "UPDATE users SET telegram_id = ?3, telegram_lang = ?4, telegram_binds = telegram_binds + 1
             WHERE id = ?1 AND telegram_binds = ?2",
        )?
        .execute(params![user, binds, chat, lang])?;
    Ok(changed == 1)
}

/// The users bound to `chat`, by id.
pub(crate) fn users_of_chat(conn: &Connection, chat: i64) -> Result<Vec<u64>, Error> {
    let users = conn
        .prepare_cached("SELECT id FROM users WHERE telegram_id = ?1 ORDER BY id")?
        .query_map([chat], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(users)
}

/// Unbinds every user from `chat`; returns how many were bound.
pub(crate) fn unbind_chat(conn: &Connection, chat: i64) -> Result<usize, Error> {
    Ok(conn.execute("UPDATE users SET telegram_id = NULL, telegram_lang = NULL WHERE telegram_id = ?1", [chat])?)
}

/// The one-time code on the user's subscription page: the user, and a MAC under the master
/// key of the user and how many times they bound a chat (a bind makes the next code).
pub(crate) fn bind_code(vault: &Vault, user: u64, binds: u64) -> String {
    let data = [b"bind ".as_slice(), &user.to_be_bytes(), &binds.to_be_bytes()].concat();
    let mac = vault.seed(Purpose::Telegram, &data);
    format!("{user}-{}", hex::encode(&mac[..16]))
}
