//! The owner's Telegram bot: its settings, how far the events were told, how far its updates
//! were read. The token is kept sealed under the master key and never comes back out. And
//! the users' own chats: binding them, their language, and the expiries they were warned of.

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

/// The language the bot speaks to the user's own chat (`None`: the owner's); an error when
/// there is no such user.
pub(crate) fn chat_lang(conn: &Connection, user: u64) -> Result<Option<String>, Error> {
    Ok(conn.prepare_cached("SELECT telegram_lang FROM users WHERE id = ?1")?.query_row([user], |row| row.get(0))?)
}

/// A user's own chat, as [`chat_of`] reads it.
pub(crate) struct UserChat {
    /// `None`: none bound.
    pub(crate) chat: Option<i64>,
    /// The language spoken to it (`None`: the owner's).
    pub(crate) lang: Option<String>,
}

/// The user's own chat and its language, when the user can be read (`None`: no such user,
/// or it could not be read).
pub(crate) fn chat_of(conn: &Connection, user: u64) -> Result<Option<UserChat>, Error> {
    Ok(conn
        .prepare_cached("SELECT telegram_id, telegram_lang FROM users WHERE id = ?1")?
        .query_row([user], |row| Ok(UserChat { chat: row.get(0)?, lang: row.get(1)? }))
        .ok())
}

/// An enabled user with a chat of their own whose access ends soon, and the expiries they
/// were warned of (`warned`: three days ahead; `warned_day`: a day ahead).
pub(crate) struct Expiring {
    pub(crate) user: u64,
    pub(crate) chat: i64,
    pub(crate) lang: Option<String>,
    pub(crate) expires: u64,
    pub(crate) warned: u64,
    pub(crate) warned_day: u64,
}

/// Enabled users with a chat of their own whose access ends after `after` and by `by`, not
/// warned of that end both three days and a day ahead.
pub(crate) fn expiring(conn: &Connection, after: u64, by: u64) -> Result<Vec<Expiring>, Error> {
    let mut expiring = conn.prepare_cached(
        "SELECT id, telegram_id, telegram_lang, expires_at, expiry_warned, expiry_warned_day FROM users
                 WHERE telegram_id IS NOT NULL AND enabled AND expires_at > ?1 AND expires_at <= ?2
                   AND (expiry_warned != expires_at OR expiry_warned_day != expires_at)",
    )?;
    let rows = expiring
        .query_map([after, by], |row| {
            Ok(Expiring {
                user: row.get(0)?,
                chat: row.get(1)?,
                lang: row.get(2)?,
                expires: row.get(3)?,
                warned: row.get(4)?,
                warned_day: row.get(5)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Notes that the user was warned of the end of their access at `expires` three days ahead,
/// and, when `last_day`, a day ahead.
pub(crate) fn warned_of_expiry(conn: &Connection, user: u64, expires: u64, last_day: bool) -> Result<(), Error> {
    conn.execute(
        "UPDATE users SET expiry_warned = ?2,
                                expiry_warned_day = CASE WHEN ?3 THEN ?2 ELSE expiry_warned_day END
                         WHERE id = ?1",
        params![user, expires, last_day],
    )?;
    Ok(())
}

/// The one-time code on the user's subscription page: the user, and a MAC under the master
/// key of the user and how many times they bound a chat (a bind makes the next code).
pub(crate) fn bind_code(vault: &Vault, user: u64, binds: u64) -> String {
    let data = [b"bind ".as_slice(), &user.to_be_bytes(), &binds.to_be_bytes()].concat();
    let mac = vault.seed(Purpose::Telegram, &data);
    format!("{user}-{}", hex::encode(&mac[..16]))
}
