-- Moving in from another panel: old subscription paths served as aliases, and where
-- imported users came from, migration 12.

-- An old subscription path a user's app still fetches (`/sub/<token>` of the panel the user
-- was imported from), served by every edge (and control) like the user's link: its snapshot
-- is sealed under a token derived from the path (`SubToken::for_alias`), whose hash is here.
CREATE TABLE aliases (
    path       TEXT PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_hash BLOB NOT NULL UNIQUE,
    source     TEXT NOT NULL,
    created    INTEGER NOT NULL
) STRICT;
CREATE INDEX aliases_by_user ON aliases (user_id);

-- The panel and the id a user was imported from (`3x-ui:alice@example`): an import run again
-- finds it and adds nothing.
ALTER TABLE users ADD COLUMN imported_from TEXT;
CREATE UNIQUE INDEX users_imported_from ON users (imported_from) WHERE imported_from IS NOT NULL;
