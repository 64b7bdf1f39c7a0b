-- Hearth's schema after migration 33 (written by store::fresh's test from a database the migrations made: HEARTH_WRITE_FRESH=1 cargo test -p hearth-control --bin hearth-control store::fresh)
CREATE TABLE state (
    key   TEXT PRIMARY KEY,
    value ANY NOT NULL
) STRICT;
CREATE TABLE owner (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    login         TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created       INTEGER NOT NULL
, totp_secret BLOB, totp_pending BLOB, totp_last_step INTEGER NOT NULL DEFAULT 0) STRICT;
CREATE TABLE sessions (
    id_hash   BLOB PRIMARY KEY,
    created   INTEGER NOT NULL,
    last_seen INTEGER NOT NULL
, address TEXT NOT NULL DEFAULT '', agent TEXT NOT NULL DEFAULT '', admin_id INTEGER REFERENCES admins (id) ON DELETE CASCADE) STRICT;
CREATE TABLE groups (
    id   INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    note TEXT NOT NULL DEFAULT ''
, speed_up INTEGER NOT NULL DEFAULT 0 CHECK (speed_up >= 0), speed_down INTEGER NOT NULL DEFAULT 0 CHECK (speed_down >= 0), on_quota TEXT NOT NULL DEFAULT 'cut' CHECK (on_quota IN ('cut', 'slow')), slow_kbps INTEGER NOT NULL DEFAULT 0 CHECK (slow_kbps >= 0), device_limit INTEGER NOT NULL DEFAULT 0 CHECK (device_limit >= 0), block_torrent INTEGER NOT NULL DEFAULT 0 CHECK (block_torrent IN (0, 1)), block_smtp INTEGER NOT NULL DEFAULT 0 CHECK (block_smtp IN (0, 1)), rule_set_id INTEGER REFERENCES rule_sets (id)) STRICT;
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
, release_target INTEGER NOT NULL DEFAULT 0, update_status TEXT NOT NULL DEFAULT '', release_running INTEGER NOT NULL DEFAULT 0, presence_at INTEGER NOT NULL DEFAULT 0, multiplier INTEGER NOT NULL DEFAULT 1000 CHECK (multiplier BETWEEN 1 AND 100000), quota INTEGER NOT NULL DEFAULT 0 CHECK (quota >= 0), quota_day INTEGER NOT NULL DEFAULT 1 CHECK (quota_day BETWEEN 1 AND 28), quota_next INTEGER NOT NULL DEFAULT 0, quota_used INTEGER NOT NULL DEFAULT 0, limited INTEGER NOT NULL DEFAULT 0 CHECK (limited IN (0, 1)), offline_told INTEGER NOT NULL DEFAULT 0, deltas INTEGER NOT NULL DEFAULT 0 CHECK (deltas IN (0, 1)), cert_der BLOB, cert_names TEXT NOT NULL DEFAULT '', allow_unverified INTEGER NOT NULL DEFAULT 0 CHECK (allow_unverified IN (0, 1)), domain TEXT NOT NULL DEFAULT '', acme_domain TEXT NOT NULL DEFAULT '', acme_cert BLOB, acme_not_after INTEGER NOT NULL DEFAULT 0, acme_renewed INTEGER NOT NULL DEFAULT 0, acme_error TEXT NOT NULL DEFAULT '', acme_error_at INTEGER NOT NULL DEFAULT 0, acme_public INTEGER NOT NULL DEFAULT 0 CHECK (acme_public IN (0, 1)), acme_warned INTEGER NOT NULL DEFAULT 0, release_said_at INTEGER NOT NULL DEFAULT 0) STRICT;
CREATE TABLE node_groups (
    node_id  INTEGER NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    group_id INTEGER NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    PRIMARY KEY (node_id, group_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX node_groups_by_group ON node_groups (group_id, node_id);
CREATE TABLE streams (
    name        TEXT PRIMARY KEY,
    version     INTEGER NOT NULL,
    digest      BLOB,
    body_sha256 BLOB,
    envelope    BLOB,
    expires     INTEGER NOT NULL DEFAULT 0
, seq INTEGER NOT NULL DEFAULT 0) STRICT;
CREATE TABLE usage_daily (
    user_id INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    day     INTEGER NOT NULL,
    up      INTEGER NOT NULL,
    down    INTEGER NOT NULL,
    PRIMARY KEY (user_id, day)
) STRICT, WITHOUT ROWID;
CREATE TABLE audit (
    id     INTEGER PRIMARY KEY,
    at     INTEGER NOT NULL,
    actor  TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
, changes TEXT) STRICT;
CREATE TABLE recovery_codes (
    code_hash BLOB PRIMARY KEY
) STRICT;
CREATE INDEX usage_daily_by_day ON usage_daily (day);
CREATE TABLE node_usage_daily (
        node_id INTEGER NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
        day     INTEGER NOT NULL,
        up      INTEGER NOT NULL,
        down    INTEGER NOT NULL,
        PRIMARY KEY (node_id, day)
    ) STRICT, WITHOUT ROWID;
CREATE TABLE releases (
    -- The version of the release envelope (its signing time): unique and increasing.
    version  INTEGER PRIMARY KEY,
    -- The manifest's version, like 0.2.0.
    name     TEXT NOT NULL,
    built    INTEGER NOT NULL,
    expires  INTEGER NOT NULL,
    manifest BLOB NOT NULL,
    added    INTEGER NOT NULL
) STRICT;
CREATE TABLE rollouts (
    release  INTEGER PRIMARY KEY REFERENCES releases (version) ON DELETE CASCADE,
    state    TEXT NOT NULL CHECK (state IN ('canary', 'rolling', 'done', 'failed', 'stopped')),
    canary   INTEGER NOT NULL,
    -- The node told last, and since when.
    current  INTEGER NOT NULL,
    since    INTEGER NOT NULL,
    detail   TEXT NOT NULL DEFAULT '',
    started  INTEGER NOT NULL,
    updated  INTEGER NOT NULL
) STRICT;
CREATE TABLE known_addresses (
        address_hash BLOB PRIMARY KEY,
        signed_in    INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID;
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
, failing_told INTEGER NOT NULL DEFAULT 0, deltas INTEGER NOT NULL DEFAULT 0 CHECK (deltas IN (0, 1)), untrusted_forwarding TEXT, disk_full INTEGER NOT NULL DEFAULT 0) STRICT;
CREATE UNIQUE INDEX streams_by_seq ON streams (seq);
CREATE TABLE outbox_held (
    edge    INTEGER NOT NULL REFERENCES edges (id) ON DELETE CASCADE,
    stream  TEXT NOT NULL,
    version INTEGER NOT NULL,
    reason  TEXT NOT NULL,
    held_at INTEGER NOT NULL,
    PRIMARY KEY (edge, stream)
) STRICT, WITHOUT ROWID;
CREATE TABLE presence (
    node_id     INTEGER NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    devices     INTEGER NOT NULL,
    connections INTEGER NOT NULL,
    PRIMARY KEY (node_id, user_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX presence_by_user ON presence (user_id, node_id);
CREATE TABLE hwid_devices (
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    key        BLOB NOT NULL CHECK (length(key) = 16),
    os         TEXT NOT NULL,
    os_version TEXT NOT NULL,
    model      TEXT NOT NULL,
    app        TEXT NOT NULL,
    first_seen INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL,
    PRIMARY KEY (user_id, key)
) STRICT, WITHOUT ROWID;
CREATE TABLE hwid_forgotten (
    user_id INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    key     BLOB NOT NULL CHECK (length(key) = 16),
    before  INTEGER NOT NULL,
    PRIMARY KEY (user_id, key)
) STRICT, WITHOUT ROWID;
CREATE TABLE aliases (
    path       TEXT PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_hash BLOB NOT NULL UNIQUE,
    source     TEXT NOT NULL,
    created    INTEGER NOT NULL
, prefix TEXT GENERATED ALWAYS AS (
        CASE WHEN instr(substr(path, 2), '/') = 0 THEN '/' ELSE substr(path, 1, instr(substr(path, 2), '/') + 1) END
     ) VIRTUAL) STRICT;
CREATE INDEX aliases_by_user ON aliases (user_id);
CREATE TABLE events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    -- What it is about (`user 12`, `node 3`), as the audit log names it.
    subject TEXT NOT NULL,
    -- A JSON object, never a secret.
    data    TEXT NOT NULL
) STRICT;
CREATE TABLE webhooks (
    id         INTEGER PRIMARY KEY,
    url        TEXT NOT NULL,
    events     TEXT NOT NULL,
    secret_enc BLOB NOT NULL,
    created    INTEGER NOT NULL
) STRICT;
CREATE TABLE deliveries (
    id         INTEGER PRIMARY KEY,
    webhook_id INTEGER NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id   INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    state      TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts   INTEGER NOT NULL DEFAULT 0,
    queued     INTEGER NOT NULL,
    next_at    INTEGER NOT NULL,
    done_at    INTEGER NOT NULL DEFAULT 0,
    -- The last answer's HTTP status (0: none came) and its first bytes, or why none came.
    status     INTEGER NOT NULL DEFAULT 0,
    answer     TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX deliveries_queue ON deliveries (state, webhook_id, id);
CREATE INDEX deliveries_of_webhook ON deliveries (webhook_id, id);
CREATE INDEX deliveries_of_event ON deliveries (event_id);
CREATE TABLE admins (
    id            INTEGER PRIMARY KEY,
    login         TEXT NOT NULL UNIQUE COLLATE NOCASE,
    password_hash TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'read-only', 'reseller')),
    -- A reseller's limits (NULL: none): how many users, how many bytes of quota in total.
    max_users     INTEGER CHECK (max_users >= 0),
    max_traffic   INTEGER CHECK (max_traffic >= 0),
    created       INTEGER NOT NULL
, spent INTEGER NOT NULL DEFAULT 0 CHECK (spent >= 0), max_slow_kbps INTEGER CHECK (max_slow_kbps >= 0), max_days INTEGER CHECK (max_days >= 0)) STRICT;
CREATE TABLE admin_groups (
    admin_id INTEGER NOT NULL REFERENCES admins (id) ON DELETE CASCADE,
    group_id INTEGER NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    PRIMARY KEY (admin_id, group_id)
) STRICT, WITHOUT ROWID;
CREATE TABLE "api_tokens" (
    id        INTEGER PRIMARY KEY,
    name      TEXT NOT NULL,
    hash      BLOB NOT NULL UNIQUE,
    scope     TEXT NOT NULL CHECK (scope IN ('read', 'users', 'operate', 'admin')),
    created   INTEGER NOT NULL,
    last_used INTEGER NOT NULL DEFAULT 0,
    admin_id  INTEGER REFERENCES admins (id) ON DELETE CASCADE
) STRICT;
CREATE TABLE passkeys (
    id            INTEGER PRIMARY KEY,
    admin_id      INTEGER REFERENCES admins (id) ON DELETE CASCADE,
    -- The account's WebAuthn user handle (16 random bytes, the same for all its passkeys).
    user_handle   BLOB NOT NULL,
    credential_id BLOB NOT NULL UNIQUE,
    passkey       TEXT NOT NULL,
    name          TEXT NOT NULL,
    created       INTEGER NOT NULL,
    last_used     INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX passkeys_admin ON passkeys (admin_id);
CREATE VIRTUAL TABLE user_search USING fts5 (
    name, note, content = 'users', content_rowid = 'id', tokenize = 'trigram'
);
CREATE INDEX audit_actor ON audit (actor, id);
CREATE INDEX audit_action ON audit (action, id);
CREATE TABLE "users" (
    id              INTEGER PRIMARY KEY,
    name            TEXT NOT NULL,
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
, speed_up INTEGER CHECK (speed_up >= 0), speed_down INTEGER CHECK (speed_down >= 0), on_quota TEXT CHECK (on_quota IN ('cut', 'slow')), slow_kbps INTEGER NOT NULL DEFAULT 0 CHECK (slow_kbps >= 0), device_limit INTEGER CHECK (device_limit >= 0), kick INTEGER NOT NULL DEFAULT 0, refused_devices INTEGER NOT NULL DEFAULT 0, devices_refused_at INTEGER NOT NULL DEFAULT 0, refused_torrent INTEGER NOT NULL DEFAULT 0, refused_smtp INTEGER NOT NULL DEFAULT 0, refusal_noticed INTEGER NOT NULL DEFAULT 0, raw_up INTEGER NOT NULL DEFAULT 0, raw_down INTEGER NOT NULL DEFAULT 0, hwid_refused_at INTEGER NOT NULL DEFAULT 0, imported_from TEXT, quota_warned INTEGER NOT NULL DEFAULT 0, telegram_id INTEGER, expiry_warned INTEGER NOT NULL DEFAULT 0, admin_id INTEGER REFERENCES admins (id) ON DELETE SET NULL, creds_digest BLOB, tenant INTEGER NOT NULL DEFAULT 0, rule_set_id INTEGER REFERENCES rule_sets (id), telegram_lang TEXT CHECK (telegram_lang IN ('en', 'ru', 'fa', 'zh')), telegram_binds INTEGER NOT NULL DEFAULT 0, expiry_warned_day INTEGER NOT NULL DEFAULT 0) STRICT;
CREATE INDEX users_expiry ON users (expires_at) WHERE expires_at > 0;
CREATE INDEX users_reset ON users (next_reset) WHERE next_reset > 0;
CREATE INDEX users_status ON users (status, id);
CREATE INDEX users_usage_dirty ON users (id) WHERE usage_dirty = 1;
CREATE UNIQUE INDEX users_imported_from ON users (imported_from) WHERE imported_from IS NOT NULL;
CREATE INDEX users_admin ON users (admin_id) WHERE admin_id IS NOT NULL;
CREATE TRIGGER user_search_delete AFTER DELETE ON users BEGIN
    INSERT INTO user_search (user_search, rowid, name, note) VALUES ('delete', old.id, old.name, old.note);
END;
CREATE TRIGGER user_search_update AFTER UPDATE OF name, note ON users BEGIN
    INSERT INTO user_search (user_search, rowid, name, note) VALUES ('delete', old.id, old.name, old.note);
    INSERT INTO user_search (rowid, name, note) VALUES (new.id, new.name, new.note);
END;
CREATE INDEX users_name_nocase ON users (name COLLATE NOCASE);
CREATE UNIQUE INDEX users_name_in_tenant ON users (tenant, name);
CREATE INDEX users_name_nocase_in_tenant ON users (tenant, name COLLATE NOCASE);
CREATE INDEX aliases_by_prefix ON aliases (prefix);
CREATE INDEX users_credential ON users (credential_hash);
CREATE TABLE outbounds (
    id       INTEGER PRIMARY KEY,
    name     TEXT NOT NULL COLLATE NOCASE,
    node_id  INTEGER NOT NULL DEFAULT 0,
    spec     TEXT NOT NULL,
    password BLOB,
    UNIQUE (name, node_id)
);
CREATE TRIGGER outbounds_of_deleted_node AFTER DELETE ON nodes
BEGIN
    DELETE FROM outbounds WHERE node_id = OLD.id;
END;
CREATE TABLE rule_sets (
    id      INTEGER PRIMARY KEY CHECK (id BETWEEN 1 AND 65535),
    name    TEXT NOT NULL UNIQUE,
    text    TEXT NOT NULL,
    updated INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE "telegram" (
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
INSERT INTO "groups" ("id", "name", "note", "speed_up", "speed_down", "on_quota", "slow_kbps", "device_limit", "block_torrent", "block_smtp", "rule_set_id") VALUES (1, 'default', 'New users and nodes join this group', 0, 0, 'cut', 0, 0, 0, 0, NULL);
INSERT INTO "user_search" ("user_search") VALUES ('rebuild');
