-- The bot for users, migration 32: the bot speaks Persian and Chinese too; a user binds their
-- own chat through a one-time link on their subscription page.

-- SQLite keeps a column's CHECK as written: the table is made again with the new languages.
CREATE TABLE telegram_new (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    token_enc     BLOB NOT NULL,
    bot_name      TEXT NOT NULL,
    chat_id       INTEGER NOT NULL,
    lang          TEXT NOT NULL CHECK (lang IN ('en', 'ru', 'fa', 'zh')),
    events        TEXT NOT NULL,
    told          INTEGER NOT NULL,
    update_offset INTEGER NOT NULL DEFAULT 0,
    -- Whether the bot takes users: the subscription pages link to it, users bind their own
    -- chats and are told of their quota, expiry and a disabled account.
    tell_users    INTEGER NOT NULL DEFAULT 0,
    updated       INTEGER NOT NULL
) STRICT;
INSERT INTO telegram_new (id, token_enc, bot_name, chat_id, lang, events, told, update_offset, tell_users, updated)
    SELECT id, token_enc, bot_name, chat_id, lang, events, told, update_offset, tell_users, updated FROM telegram;
DROP TABLE telegram;
ALTER TABLE telegram_new RENAME TO telegram;

-- The language the bot speaks to the user's own chat (NULL: the owner's), how many times the
-- user bound a chat (the one-time link's code is drawn from it, so a used link is dead), and
-- the expiry the user was last warned of a day ahead (`expiry_warned`: three days ahead).
ALTER TABLE users ADD COLUMN telegram_lang TEXT CHECK (telegram_lang IN ('en', 'ru', 'fa', 'zh'));
ALTER TABLE users ADD COLUMN telegram_binds INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN expiry_warned_day INTEGER NOT NULL DEFAULT 0;
