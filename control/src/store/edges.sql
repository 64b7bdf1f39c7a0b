-- Many edges, one publisher. Every stream carries `seq`, the order of its last change; each
-- edge keeps `pushed`, the `seq` up to which it holds every stream as control has it, so
-- what an edge lacks is `seq > pushed`, whichever process made the change. The outbox (one
-- queue for one edge) goes.
ALTER TABLE streams ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
UPDATE streams SET seq = rowid;

CREATE TABLE edges (
    id          INTEGER PRIMARY KEY,
    -- How the owner names it (`main`: the edge of `edge_url`, with edge.toml's token and prefix).
    name        TEXT NOT NULL UNIQUE,
    -- Where control pushes and nodes fall back to.
    url         TEXT NOT NULL UNIQUE,
    -- Its own API prefix and push token (NULL: edge.toml's).
    api_prefix  TEXT,
    push_token  TEXT,
    -- The public base of links it serves (NULL: its URL and the sub prefix).
    link_base   TEXT,
    -- Whether its links are offered: active, or blocked / retired (links move elsewhere).
    state       TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'blocked', 'retired')),
    position    INTEGER NOT NULL,
    pushed      INTEGER NOT NULL DEFAULT 0,
    drained     INTEGER NOT NULL DEFAULT 0,
    last_drain  INTEGER NOT NULL DEFAULT 0,
    release     INTEGER NOT NULL DEFAULT 0,
    archive     INTEGER NOT NULL DEFAULT 0,
    added       INTEGER NOT NULL,
    last_push   INTEGER NOT NULL DEFAULT 0,
    last_error  TEXT,
    error_since INTEGER NOT NULL DEFAULT 0
) STRICT;

-- The edge in use becomes `main`: it holds everything but what waited in the outbox or was
-- set aside, which is numbered after everything else and so goes out again.
INSERT INTO edges (name, url, position, pushed, drained, release, archive, added)
SELECT 'main', value, 0, (SELECT ifnull(max(rowid), 0) FROM streams),
       ifnull((SELECT value FROM state WHERE key = 'drain_cursor'), 0),
       ifnull((SELECT value FROM state WHERE key = 'edge_release'), 0),
       ifnull((SELECT value FROM state WHERE key = 'archive_version'), 0),
       unixepoch()
FROM state WHERE key = 'edge_url' AND value != '';
UPDATE streams SET seq = seq + (SELECT ifnull(max(rowid), 0) FROM streams)
WHERE name IN (SELECT stream FROM outbox UNION SELECT stream FROM outbox_held);
CREATE UNIQUE INDEX streams_by_seq ON streams (seq);
DELETE FROM state WHERE key IN ('edge_url', 'drain_cursor', 'edge_release');

DROP TABLE outbox;
DROP TABLE outbox_held;
-- Streams an edge refused, set aside at that version so the rest goes on.
CREATE TABLE outbox_held (
    edge    INTEGER NOT NULL REFERENCES edges (id) ON DELETE CASCADE,
    stream  TEXT NOT NULL,
    version INTEGER NOT NULL,
    reason  TEXT NOT NULL,
    held_at INTEGER NOT NULL,
    PRIMARY KEY (edge, stream)
) STRICT, WITHOUT ROWID;
