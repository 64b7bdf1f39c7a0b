-- Hearth control's database, migration 1. Every table is STRICT; times are Unix seconds.

-- Small named values: the batch counter, the edge's usage cursor, settings.
CREATE TABLE state (
    key   TEXT PRIMARY KEY,
    value ANY NOT NULL
) STRICT;

-- The one owner account (created by the one-time setup link).
CREATE TABLE owner (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    login         TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created       INTEGER NOT NULL
) STRICT;

CREATE TABLE sessions (
    id_hash   BLOB PRIMARY KEY,
    created   INTEGER NOT NULL,
    last_seen INTEGER NOT NULL
) STRICT;

-- API tokens: only their SHA-256 is kept.
CREATE TABLE api_tokens (
    id        INTEGER PRIMARY KEY,
    name      TEXT NOT NULL,
    hash      BLOB NOT NULL UNIQUE,
    scope     TEXT NOT NULL CHECK (scope IN ('read', 'operate', 'admin')),
    created   INTEGER NOT NULL,
    last_used INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE TABLE groups (
    id   INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    note TEXT NOT NULL DEFAULT ''
) STRICT;

-- The subscription token and the Hysteria2 credential are kept encrypted under the master
-- key; the token is found by its SHA-256, the credential's SHA-256 goes to the nodes.
CREATE TABLE users (
    id              INTEGER PRIMARY KEY,
    name            TEXT NOT NULL UNIQUE,
    token_hash      BLOB NOT NULL UNIQUE,
    token_enc       BLOB NOT NULL,
    credential_enc  BLOB NOT NULL,
    credential_hash BLOB NOT NULL,
    quota           INTEGER NOT NULL DEFAULT 0 CHECK (quota >= 0),
    used_up         INTEGER NOT NULL DEFAULT 0,
    used_down       INTEGER NOT NULL DEFAULT 0,
    reset           TEXT NOT NULL DEFAULT 'none',
    -- When used traffic next goes back to zero (0: never).
    next_reset      INTEGER NOT NULL DEFAULT 0,
    expires_at      INTEGER NOT NULL DEFAULT 0,
    duration_secs   INTEGER NOT NULL DEFAULT 0,
    started_at      INTEGER NOT NULL DEFAULT 0,
    enabled         INTEGER NOT NULL DEFAULT 1,
    note            TEXT NOT NULL DEFAULT '',
    -- The status last published; the credential sets hold exactly the users whose status
    -- here is 'active' or 'not_started', and those 'over_quota' whose quota action is to
    -- slow down (a later migration).
    status          TEXT NOT NULL DEFAULT 'active',
    -- Usage changed since the snapshot was last published (republished in batches).
    usage_dirty     INTEGER NOT NULL DEFAULT 0,
    created         INTEGER NOT NULL,
    updated         INTEGER NOT NULL
) STRICT;
CREATE INDEX users_expiry ON users (expires_at) WHERE expires_at > 0;
CREATE INDEX users_reset ON users (next_reset) WHERE next_reset > 0;
CREATE INDEX users_status ON users (status, id);
CREATE INDEX users_usage_dirty ON users (id) WHERE usage_dirty = 1;

CREATE TABLE user_groups (
    user_id  INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    group_id INTEGER NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    PRIMARY KEY (user_id, group_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX user_groups_by_group ON user_groups (group_id, user_id);

CREATE TABLE nodes (
    id             INTEGER PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    host           TEXT NOT NULL,
    port           INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    hop_start      INTEGER NOT NULL DEFAULT 0,
    hop_end        INTEGER NOT NULL DEFAULT 0,
    sni            TEXT NOT NULL DEFAULT '',
    tls            TEXT NOT NULL DEFAULT 'self_signed' CHECK (tls IN ('self_signed', 'operator')),
    cert_sha256    BLOB,
    spki_sha256    BLOB,
    obfs           TEXT NOT NULL DEFAULT '',
    masquerade     TEXT NOT NULL DEFAULT '',
    public_key     BLOB,
    enroll_hash    BLOB UNIQUE,
    enroll_expires INTEGER NOT NULL DEFAULT 0,
    last_seen      INTEGER NOT NULL DEFAULT 0,
    version        TEXT NOT NULL DEFAULT '',
    usage_seq      INTEGER NOT NULL DEFAULT 0,
    usage_digest   BLOB,
    created        INTEGER NOT NULL
) STRICT;

CREATE TABLE node_groups (
    node_id  INTEGER NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    group_id INTEGER NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    PRIMARY KEY (node_id, group_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX node_groups_by_group ON node_groups (group_id, node_id);

-- The latest signed envelope of every stream control publishes (a deleted stream keeps its
-- version with no envelope), served to nodes directly and pushed to the edge.
CREATE TABLE streams (
    name        TEXT PRIMARY KEY,
    version     INTEGER NOT NULL,
    digest      BLOB,
    body_sha256 BLOB,
    envelope    BLOB,
    expires     INTEGER NOT NULL DEFAULT 0
) STRICT;

-- What the edge has not acknowledged yet, oldest first.
CREATE TABLE outbox (
    id      INTEGER PRIMARY KEY,
    stream  TEXT NOT NULL,
    version INTEGER NOT NULL,
    created INTEGER NOT NULL
) STRICT;

-- Daily traffic per user, for charts.
CREATE TABLE usage_daily (
    user_id INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    day     INTEGER NOT NULL,
    up      INTEGER NOT NULL,
    down    INTEGER NOT NULL,
    PRIMARY KEY (user_id, day)
) STRICT, WITHOUT ROWID;

-- Every change: who, what, when. Never a secret.
CREATE TABLE audit (
    id     INTEGER PRIMARY KEY,
    at     INTEGER NOT NULL,
    actor  TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
) STRICT;

INSERT INTO groups (name, note) VALUES ('default', 'New users and nodes join this group');
