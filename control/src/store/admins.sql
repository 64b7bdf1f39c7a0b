-- More than one admin, migration 16. The owner stays in `owner`; every other admin is a row
-- here with a role: 'admin' (everything but admin accounts), 'operator' (users only),
-- 'read-only', or 'reseller' (only the users they created, within the limits below).
CREATE TABLE admins (
    id            INTEGER PRIMARY KEY,
    login         TEXT NOT NULL UNIQUE COLLATE NOCASE,
    password_hash TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'read-only', 'reseller')),
    -- A reseller's limits (NULL: none): how many users, how many bytes of quota in total.
    max_users     INTEGER CHECK (max_users >= 0),
    max_traffic   INTEGER CHECK (max_traffic >= 0),
    created       INTEGER NOT NULL
) STRICT;

-- The groups a reseller may put users in (and so the nodes those users reach).
CREATE TABLE admin_groups (
    admin_id INTEGER NOT NULL REFERENCES admins (id) ON DELETE CASCADE,
    group_id INTEGER NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    PRIMARY KEY (admin_id, group_id)
) STRICT, WITHOUT ROWID;

-- Who created a user (NULL: the owner); a reseller sees only theirs. A removed admin's users
-- stay, the owner's.
ALTER TABLE users ADD COLUMN admin_id INTEGER REFERENCES admins (id) ON DELETE SET NULL;
CREATE INDEX users_admin ON users (admin_id) WHERE admin_id IS NOT NULL;

-- A session or an API token belongs to an admin (NULL: the owner) and goes with them. A
-- token's scope may now be 'users' (users only, as an operator).
ALTER TABLE sessions ADD COLUMN admin_id INTEGER REFERENCES admins (id) ON DELETE CASCADE;

CREATE TABLE api_tokens_new (
    id        INTEGER PRIMARY KEY,
    name      TEXT NOT NULL,
    hash      BLOB NOT NULL UNIQUE,
    scope     TEXT NOT NULL CHECK (scope IN ('read', 'users', 'operate', 'admin')),
    created   INTEGER NOT NULL,
    last_used INTEGER NOT NULL DEFAULT 0,
    admin_id  INTEGER REFERENCES admins (id) ON DELETE CASCADE
) STRICT;
INSERT INTO api_tokens_new (id, name, hash, scope, created, last_used)
    SELECT id, name, hash, scope, created, last_used FROM api_tokens;
DROP TABLE api_tokens;
ALTER TABLE api_tokens_new RENAME TO api_tokens;
