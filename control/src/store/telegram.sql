-- The Telegram bot, migration 14.

-- The owner's bot (one): its token (sealed under the master key), the owner's chat, the
-- language and the events it is told, how far the events were told (an event id) and how far
-- the bot's updates were read (Telegram's update offset).
CREATE TABLE telegram (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    token_enc     BLOB NOT NULL,
    bot_name      TEXT NOT NULL,
    chat_id       INTEGER NOT NULL,
    lang          TEXT NOT NULL CHECK (lang IN ('en', 'ru')),
    events        TEXT NOT NULL,
    told          INTEGER NOT NULL,
    update_offset INTEGER NOT NULL DEFAULT 0,
    -- Whether users with a Telegram id are told themselves (80 % of quota, 3 days before expiry).
    tell_users    INTEGER NOT NULL DEFAULT 0,
    updated       INTEGER NOT NULL
) STRICT;

-- A user's own Telegram chat (NULL: none), and the expiry it was last warned of.
ALTER TABLE users ADD COLUMN telegram_id INTEGER;
ALTER TABLE users ADD COLUMN expiry_warned INTEGER NOT NULL DEFAULT 0;
